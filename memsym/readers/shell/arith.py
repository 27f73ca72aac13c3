"""bash's ``$((...))`` integer arithmetic, in the part launch scripts use (:class:`Arith`)."""

from __future__ import annotations

import re

from ...limits import SHELL_MAX_DEPTH, SHELL_MAX_NUMBER_DIGITS
from .errors import Unknown
from .lexer import NAME
from .variables import NOVAL


_ARITH_WS = re.compile(r"[ \t\n]*")
_ARITH_TOKEN = re.compile(r"([0-9][0-9A-Za-z_#@]*)|([A-Za-z_][A-Za-z0-9_]*)|"
                          r"(\*\*=|\*\*|\+\+|--|<<=|>>=|[<>=!]=|&&|\|\||<<|>>|[-+*/%^&|]=|"
                          r"[-+*/%()])|(.)", re.S)
_INT64 = 1 << 63


class Arith:
    """bash's integer arithmetic, in the part launch scripts use: decimal, octal (``010``) and
    hex (``0x10``) numbers, variables (their values evaluated in turn), unary ``+ -``, ``**``,
    ``* / %``, ``+ -`` and parentheses, in 64-bit integers (a value outside them is refused; bash
    would wrap around).  Other operators are refused; depth is bounded by SHELL_MAX_DEPTH."""

    def __init__(self, ev, text, depth):
        self.ev, self.depth, self.d = ev, depth, 0
        if depth > SHELL_MAX_DEPTH:
            ev.fail(f"$((...)) variables nested more than {SHELL_MAX_DEPTH} deep "
                    "(memsym.limits.SHELL_MAX_DEPTH)")
        self.toks, pos, n = [], 0, len(text)
        while True:
            pos = _ARITH_WS.match(text, pos).end()
            if pos >= n:
                break
            m = _ARITH_TOKEN.match(text, pos)
            num, name, op, other = m.groups()
            pos = m.end()
            if num:
                self.toks.append(("n", self.number(num)))
            elif name:
                if text.startswith("[", pos):
                    ev.fail("array elements inside $((...)) are not read")
                self.toks.append(("v", name))
            elif op:
                if op in ("++", "--"):
                    # bash: after a name, or before one, an increment (an assignment, refused);
                    # otherwise two signs (`--5` is 5, `1--5` is 6)
                    follows = _ARITH_WS.match(text, pos).end()
                    if (self.toks and self.toks[-1][0] == "v") or NAME.match(text, follows):
                        ev.fail(f"the operator {op} in $((...)) is not read")
                    self.toks.append(("o", op[0]))
                    pos -= 1
                    continue
                if op not in ("**", "+", "-", "*", "/", "%", "(", ")"):
                    ev.fail(f"the operator {op} in $((...)) is not read")
                self.toks.append(("o", op))
            elif other == "$":
                raise Unknown("it uses a value the script does not set")
            else:
                ev.fail(f"{other!r} in $((...)) is not read")
        self.i = 0

    def number(self, tok):
        fail = self.ev.fail
        if len(tok) > SHELL_MAX_NUMBER_DIGITS:
            fail(f"a number of more than {SHELL_MAX_NUMBER_DIGITS} digits in $((...)) "
                 "(memsym.limits.SHELL_MAX_NUMBER_DIGITS)")
        if "#" in tok or "@" in tok:
            fail(f"the number {tok!r} in base#digits form is not read")
        if tok[:2] in ("0x", "0X"):
            if not re.fullmatch(r"[0-9A-Fa-f]+", tok[2:]):
                fail(f"invalid number {tok!r} in $((...))")
            v = int(tok[2:], 16)
        elif tok[0] == "0" and len(tok) > 1:
            if not re.fullmatch(r"[0-7]+", tok):
                fail(f"the number {tok!r}: bash reads a leading 0 as octal and refuses it")
            v = int(tok, 8)
        elif re.fullmatch(r"[0-9]+", tok):
            v = int(tok)
        else:
            fail(f"invalid number {tok!r} in $((...))")
        return self.check(v)

    def check(self, v):
        if not -_INT64 <= v < _INT64:
            self.ev.fail("$((...)) leaves bash's 64-bit integers (bash would wrap around); "
                         "not read")
        return v

    def deeper(self):
        self.d += 1
        if self.depth + self.d > SHELL_MAX_DEPTH:
            self.ev.fail(f"$((...)) nested more than {SHELL_MAX_DEPTH} deep "
                         "(memsym.limits.SHELL_MAX_DEPTH)")

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else ("", "")

    def value(self):
        if not self.toks:
            return 0        # $(( )) is 0
        v = self.add()
        if self.i != len(self.toks):
            self.ev.fail("a syntax error in $((...))")
        return v

    def add(self):
        v = self.mul()
        while self.peek() in (("o", "+"), ("o", "-")):
            op = self.toks[self.i][1]
            self.i += 1
            w = self.mul()
            v = self.check(v + w if op == "+" else v - w)
        return v

    def mul(self):
        v = self.power()
        while self.peek() in (("o", "*"), ("o", "/"), ("o", "%")):
            op = self.toks[self.i][1]
            self.i += 1
            w = self.power()
            if op == "*":
                v = self.check(v * w)
            elif w == 0:
                self.ev.fail("division by 0 in $((...))")
            else:       # C division: the quotient truncated toward zero
                q = self.check(abs(v) // abs(w) * (1 if (v >= 0) == (w >= 0) else -1))
                v = q if op == "/" else v - q * w
        return v

    def power(self):
        base = self.unary()
        if self.peek() == ("o", "**"):
            self.i += 1
            self.deeper()
            e = self.power()        # right-associative
            self.d -= 1
            if e < 0:
                self.ev.fail("a negative exponent in $((...))")
            if abs(base) > 1 and e >= 64:
                self.check(_INT64)
            return self.check(base ** e)
        return base

    def unary(self):
        tok = self.peek()
        if tok in (("o", "-"), ("o", "+")):
            self.i += 1
            self.deeper()
            v = self.unary()
            self.d -= 1
            return self.check(-v) if tok[1] == "-" else v
        return self.primary()

    def primary(self):
        kind, val = self.peek()
        self.i += 1
        if kind == "n":
            return val
        if kind == "v":
            v = self.ev.vars.get(val)
            if isinstance(v, list):
                v = v[0] if v else NOVAL
            if v is None:
                raise Unknown(f"{val} is not set in the script")
            if v is NOVAL or v.strip(" \t\n") == "":
                return 0
            return Arith(self.ev, v, self.depth + self.d + 1).value()
        if (kind, val) == ("o", "("):
            self.deeper()
            v = self.add()
            if self.peek() != ("o", ")"):
                self.ev.fail("a missing ')' in $((...))")
            self.i += 1
            self.d -= 1
            return v
        self.ev.fail("a syntax error in $((...))")
