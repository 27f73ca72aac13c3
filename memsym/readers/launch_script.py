"""Extract a training command's argument list from a bash launch script, without running it.

This module owns a small, bounded reader of the bash subset launch scripts use: ``VAR=value``,
arrays ``ARGS=( ... )`` and ``+=``, ``$VAR``/``${VAR}``/``${VAR:-default}``/``${ARR[@]}``,
``$((...))`` integer arithmetic, quoting, comments, line continuations, ``if``/``elif``/``else``
on simple string tests, and heredocs (skipped).  Commands are never executed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..errors import InvalidValueError
from ._values import MAX_ARGS, MAX_BYTES_INPUT, read_bounded

__all__ = ["LaunchScript", "LaunchScriptError", "parse_launch_script", "read_launch_script",
           "read_argument_file", "MAX_EXPANSION_DEPTH"]

MAX_EXPANSION_DEPTH = 16          # nested ${...:-${...}} defaults and re-read command strings
MAX_VALUE_CHARS = 4 << 20         # the longest value a variable may grow to
MAX_COMMANDS = 100_000


class LaunchScriptError(InvalidValueError):
    """A launch script memsym cannot read (the construct and the line are named)."""


@dataclass(frozen=True)
class LaunchScript:
    """What :func:`parse_launch_script` found.

    Attributes
    ----------
    argv : list of str
        torchrun's options (when launched by torchrun) followed by the training script's arguments.
    program : str or None
        The training script named on the command line (``pretrain_gpt.py``).
    nproc_per_node, nnodes : str or None
        torchrun's values as the script sets them.
    unset : tuple of str
        Variables the script reads but never sets (their ``$NAME`` stays in ``argv``).
    notes : tuple of str
        What was assumed (commands not run, the environment taken as empty, ...).
    """

    argv: list
    program: object = None
    nproc_per_node: object = None
    nnodes: object = None
    unset: tuple = ()
    notes: tuple = field(default_factory=tuple)


# ----------------------------------------------------------------------------------------------
# lexer: text -> tokens.  A word is a list of parts: ("lit", text, quoted), ("var", spec, quoted),
# ("cmd", text, quoted), ("arith", text, quoted).
# ----------------------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_OPS = ("&&", "||", ";;", ";", "&", "|", "(", ")", "\n")


class _Lexer:
    def __init__(self, text: str):
        self.s, self.i, self.line = text, 0, 1
        self.pending_heredocs = []

    def fail(self, why):
        raise LaunchScriptError(f"launch script line {self.line}: {why}")

    def peek(self, k=0):
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def tokens(self):
        out = []
        while True:
            tok = self.next()
            if tok is None:
                return out
            out.append(tok)

    def next(self):
        s = self.s
        while self.i < len(s):
            ch = s[self.i]
            if ch in " \t\r":
                self.i += 1
            elif ch == "\\" and self.peek(1) == "\n":
                self.i += 2
                self.line += 1
            elif ch == "#":
                while self.i < len(s) and s[self.i] != "\n":
                    self.i += 1
            else:
                break
        if self.i >= len(s):
            return None
        ch = s[self.i]
        if ch == "\n":
            self.i += 1
            self.line += 1
            if self.pending_heredocs:
                self.skip_heredocs()
            return ("op", "\n", self.line - 1)
        if s.startswith("<<", self.i):
            self.i += 2
            if self.peek() == "-":
                self.i += 1
            while self.peek() and self.peek() in " \t":
                self.i += 1
            word = self.word()
            delim = "".join(p[1] for p in word if p[0] == "lit")
            self.pending_heredocs.append(delim)
            return self.next()
        for op in _OPS:
            if s.startswith(op, self.i):
                self.i += len(op)
                return ("op", op, self.line)
        if ch in "<>":
            # a redirection: its target word is read and dropped
            self.i += 1
            while self.peek() and self.peek() in "<>&":
                self.i += 1
            while self.peek() and self.peek() in " \t":
                self.i += 1
            self.word()
            return self.next()
        line = self.line
        m = _ASSIGN.match(s, self.i)
        if m and s.startswith("<", m.end()) and not s.startswith(("<<", "<("), m.end()):
            # `VOCAB_FILE=<Specify path to file>/gpt2-vocab.json`: a placeholder left for the
            # user to fill in (bash itself would read a redirection); the variable stays unset.
            j = s.find(">", m.end())
            k = s.find("\n", m.end())
            if j > 0 and (k < 0 or j < k):
                self.i = j + 1
                self.word()
                return ("placeholder", m.group(1), line)
        if m and s.startswith("(", m.end()):
            self.i = m.end() + 1
            return ("array", m.group(1), bool(m.group(2)), self.array_body(), line)
        return ("word", self.word(), line)

    def skip_heredocs(self):
        for delim in self.pending_heredocs:
            while self.i < len(self.s):
                j = self.s.find("\n", self.i)
                j = len(self.s) if j < 0 else j
                text = self.s[self.i:j]
                self.i = min(j + 1, len(self.s))
                self.line += 1
                if text.strip() == delim:
                    break
        self.pending_heredocs = []

    def array_body(self):
        words = []
        while True:
            while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
                if self.s[self.i] == "\n":
                    self.line += 1
                self.i += 1
            if self.i >= len(self.s):
                self.fail("unterminated array '('")
            ch = self.s[self.i]
            if ch == "\\" and self.peek(1) == "\n":
                self.i += 2
                self.line += 1
                continue
            if ch == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
                continue
            if ch == ")":
                self.i += 1
                return words
            if ch in "(;&|<>":     # word() would not advance: refuse instead of looping
                self.fail(f"unexpected {ch!r} inside an array")
            words.append(self.word())
            if len(words) > MAX_ARGS:
                self.fail(f"an array of more than {MAX_ARGS} words")

    def word(self):
        parts = []
        s = self.s
        while self.i < len(s):
            ch = s[self.i]
            if ch in " \t\r\n;&|()<>":
                break
            if ch == "\\":
                nxt = self.peek(1)
                self.i += 2
                if nxt == "\n":
                    self.line += 1
                    continue
                parts.append(("lit", nxt, True))
            elif ch == "'":
                j = s.find("'", self.i + 1)
                if j < 0:
                    self.fail("unterminated single quote")
                text = s[self.i + 1:j]
                self.line += text.count("\n")
                parts.append(("lit", text, True))
                self.i = j + 1
            elif ch == '"':
                self.i += 1
                parts.extend(self.double_quoted())
            elif ch == "$":
                parts.append(self.dollar(quoted=False))
            elif ch == "`":
                j = s.find("`", self.i + 1)
                if j < 0:
                    self.fail("unterminated backquote")
                parts.append(("cmd", s[self.i + 1:j], False))
                self.i = j + 1
            else:
                j = self.i
                while self.i < len(s) and s[self.i] not in " \t\r\n;&|()<>\\'\"$`":
                    self.i += 1
                parts.append(("lit", s[j:self.i], False))
        return parts

    def double_quoted(self):
        parts, buf, s = [], [], self.s
        while True:
            if self.i >= len(s):
                self.fail('unterminated double quote')
            ch = s[self.i]
            if ch == '"':
                self.i += 1
                break
            if ch == "\\" and self.peek(1) and self.peek(1) in '$`"\\\n':
                if self.peek(1) == "\n":
                    self.line += 1
                else:
                    buf.append(self.peek(1))
                self.i += 2
            elif ch == "$":
                if buf:
                    parts.append(("lit", "".join(buf), True))
                    buf = []
                parts.append(self.dollar(quoted=True))
            elif ch == "`":
                j = s.find("`", self.i + 1)
                if j < 0:
                    self.fail("unterminated backquote")
                parts.append(("cmd", s[self.i + 1:j], True))
                self.i = j + 1
            else:
                if ch == "\n":
                    self.line += 1
                buf.append(ch)
                self.i += 1
        parts.append(("lit", "".join(buf), True))   # keeps "" a (quoted, empty) word
        return parts

    def balanced(self, open_, close):
        # from just after an opening bracket to its match, skipping quoted text
        depth, j, s = 1, self.i, self.s
        while j < len(s):
            ch = s[j]
            if ch == "\\":
                j += 2
                continue
            if ch == "'":
                k = s.find("'", j + 1)
                j = (k if k >= 0 else len(s)) + 1
                continue
            if ch == '"':
                k = j + 1
                while k < len(s) and s[k] != '"':
                    k += 2 if s[k] == "\\" else 1
                j = k + 1
                continue
            if ch == open_:
                depth += 1
            elif ch == close:
                depth -= 1
                if depth == 0:
                    text = s[self.i:j]
                    self.line += text.count("\n")
                    self.i = j + 1
                    return text
            j += 1
        self.fail(f"unterminated '{open_}'")

    def dollar(self, quoted):
        s = self.s
        self.i += 1
        ch = self.peek()
        if s.startswith("((", self.i):
            self.i += 2
            text = self.balanced("(", ")")
            if self.peek() != ")":
                self.fail("unterminated $((")
            self.i += 1
            return ("arith", text, quoted)
        if ch == "(":
            self.i += 1
            return ("cmd", self.balanced("(", ")"), quoted)
        if ch == "{":
            self.i += 1
            return ("var", self.balanced("{", "}"), quoted)
        m = _NAME.match(s, self.i)
        if m:
            self.i = m.end()
            return ("var", m.group(0), quoted)
        if ch and (ch.isdigit() or ch in "@*#?$!-"):
            self.i += 1
            return ("var", ch, quoted)
        return ("lit", "$", quoted)


# ----------------------------------------------------------------------------------------------
# parser: tokens -> a list of nodes ("cmd", words, line) | ("array", ...) | ("if", branches, else)
# ----------------------------------------------------------------------------------------------

def _literal(word):
    """The word's text when it is plain unquoted literal text, else None."""
    if len(word) == 1 and word[0][0] == "lit" and not word[0][2]:
        return word[0][1]
    return None


class _Parser:
    def __init__(self, tokens):
        self.t, self.i = tokens, 0

    def parse(self, stop=()):
        nodes = []
        self.joiner = None
        while self.i < len(self.t):
            tok = self.t[self.i]
            if tok[0] == "op":
                self.i += 1
                if tok[1] in ("(", ")"):
                    raise LaunchScriptError(f"launch script line {tok[2]}: subshells and "
                                            "function definitions are not read")
                # && and || join the next command to the previous one (conditions use them)
                self.joiner = tok[1] if tok[1] in ("&&", "||") else None
                continue
            if tok[0] in ("array", "placeholder"):
                self.i += 1
                nodes.append(tok)
                continue
            first = _literal(tok[1])
            if first in stop:
                return nodes
            if first == "if":
                nodes.append(self.parse_if())
                continue
            if first in ("for", "while", "until", "case", "select", "function"):
                raise LaunchScriptError(f"launch script line {tok[2]}: '{first}' is not read; "
                                        "paste the argument list instead")
            nodes.append(self.command())
        if stop:
            raise LaunchScriptError(f"launch script: missing {' or '.join(stop)}")
        return nodes

    def command(self):
        words, line, arrays = [], self.t[self.i][2], []
        while self.i < len(self.t):
            tok = self.t[self.i]
            if tok[0] == "op":
                if tok[1] == "(" and len(words) == 1:
                    raise LaunchScriptError(f"launch script line {line}: function definitions "
                                            "are not read")
                break
            self.i += 1
            if tok[0] == "array":       # `cmd A=(...)`, e.g. `local A=(...)`: keep as array node
                arrays.append(tok)
                continue
            words.append(tok[1])
        joiner, self.joiner = self.joiner, None
        return ("cmd", words, line, arrays, joiner)

    def parse_if(self):
        branches, otherwise = [], None
        line = self.t[self.i][2]
        self.i += 1                      # 'if'
        while True:
            cond = self.parse(stop=("then",))
            self.i += 1                  # 'then'
            body = self.parse(stop=("elif", "else", "fi"))
            branches.append((cond, body))
            kw = _literal(self.t[self.i][1])
            self.i += 1
            if kw == "elif":
                continue
            if kw == "else":
                otherwise = self.parse(stop=("fi",))
                self.i += 1
            return ("if", branches, otherwise, line)


# ----------------------------------------------------------------------------------------------
# evaluation: assignments and expansions only
# ----------------------------------------------------------------------------------------------

class _Unknown(Exception):
    """A condition that cannot be decided from the script alone."""


class _Eval:
    def __init__(self, env=None, depth=0):
        self.vars = {}      # name -> str | list
        self.order = []     # names in the order first assigned
        self.unset, self.notes, self.commands = [], [], []
        self.depth = depth
        for k, v in (env or {}).items():
            self.assign(str(k), str(v))

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)

    def assign(self, name, value, append=False):
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            raise LaunchScriptError(f"the value of {name} grows beyond {MAX_VALUE_CHARS} characters")
        if isinstance(value, list) and len(value) > MAX_ARGS:
            raise LaunchScriptError(f"the array {name} grows beyond {MAX_ARGS} words")
        if name not in self.order:
            self.order.append(name)
        if append:
            old = self.vars.get(name)
            if isinstance(value, list):
                old = [] if old is None else old if isinstance(old, list) else [old]
                value = old + value
            else:
                value = (old if isinstance(old, str) else "") + value
        self.vars[name] = value

    # -- expansion --------------------------------------------------------------------------
    def lookup(self, name, cond):
        if name in self.vars:
            return self.vars[name]
        if not cond and name not in self.unset:
            self.unset.append(name)
        return None

    def expand_var(self, spec, quoted, cond, depth):
        """A ${...} or $NAME: returns a str, a list (array @ in quotes), or None (unset)."""
        if depth > MAX_EXPANSION_DEPTH:
            raise LaunchScriptError("variable expansion nested too deeply")
        if spec.startswith("#"):
            inner = spec[1:]
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]", inner)
            val = self.lookup(m.group(1) if m else inner, cond)
            if val is None:
                return "0"
            return str(len(val))
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(?:\[([^\]]*)\])?(.*)", spec,
                         re.S)
        if not m:
            raise LaunchScriptError(f"expansion ${{{spec[:40]}}} is not read")
        name, index, rest = m.group(1), m.group(2), m.group(3)
        val = self.lookup(name, cond)
        if index is not None and val is not None:
            if index in ("@", "*"):
                val = val if isinstance(val, list) else [val]
                if index == "*" or not quoted:
                    val = val if not quoted else " ".join(val)
            elif index.isdigit():
                arr = val if isinstance(val, list) else [val]
                val = arr[int(index)] if int(index) < len(arr) else None
            else:
                raise LaunchScriptError(f"array index [{index[:20]}] is not read")
        elif isinstance(val, list):
            val = val[0] if val else ""      # $ARR is ${ARR[0]}
        if rest:
            op = re.match(r":?[-=+?]", rest)
            if not op:
                raise LaunchScriptError(f"expansion ${{{spec[:40]}}} is not read (only :-, -, :=, "
                                        ":+ and ${{#...}} are)")
            op, arg = op.group(0), rest[len(op.group(0)):]
            empty = val is None or (op.startswith(":") and val in ("", []))
            if op.endswith("-") or op.endswith("="):
                if empty:
                    if name in self.unset and not cond:
                        self.unset.remove(name)
                    val = self.expand_text(arg, depth + 1, cond)
                    if op.endswith("="):
                        self.assign(name, val)
            elif op.endswith("+"):
                val = "" if empty else self.expand_text(arg, depth + 1, cond)
            elif empty:
                raise LaunchScriptError(f"${{{spec[:40]}}}: the script requires {name} to be set")
        if val is None:
            if cond:
                return ""
            return "${" + spec + "}" if len(spec) > 1 or not spec.isalnum() else "$" + spec
        return val

    def expand_text(self, text, depth, cond):
        # the default of ${X:-...}: a word in its own right (quotes removed, not split)
        return self.join(self.fields(_word_parts(text), depth, cond, split=False))

    def arith(self, text, depth, cond):
        def sub(m):
            v = self.expand_var(m.group(1) or m.group(2) or m.group(3), False, cond, depth + 1)
            return v if isinstance(v, str) else " ".join(v)
        expr = re.sub(r"\$\{([^}]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)|(?<![\w$])([A-Za-z_][A-Za-z0-9_]*)",
                      sub, text)
        try:
            return str(_Arith(expr).parse())
        except ValueError:
            self.note(f"$(({text.strip()[:40]})) not computed")
            return "$((" + text + "))"

    def fields(self, parts, depth=0, cond=False, split=True):
        """Expand a word into fields (bash word splitting of unquoted expansions)."""
        fields, cur = [], None

        def push_split(v):
            nonlocal cur
            pieces = v.split()
            if not pieces:
                if v and cur is not None:
                    fields.append(cur)
                    cur = None
                return
            if v[:1].isspace() and cur is not None:
                fields.append(cur)
                cur = None
            for j, piece in enumerate(pieces):
                if j == 0:
                    cur = (cur or "") + piece
                else:
                    fields.append(cur)
                    cur = piece
            if v[-1:].isspace():
                fields.append(cur)
                cur = None

        for kind, value, quoted in parts:
            if kind == "lit":
                cur = (cur or "") + value
                continue
            if kind == "var":
                v = self.expand_var(value, quoted, cond, depth)
            elif kind == "arith":
                v = self.arith(value, depth, cond)
            else:
                # never run; the placeholder has no spaces, so it stays one word when split
                self.note(f"command substitution $({value.strip()[:40]}) not run")
                v = "$(...)"
            if isinstance(v, list):
                if quoted:
                    for j, el in enumerate(v):
                        if j:
                            fields.append(cur)
                            cur = None
                        cur = (cur or "") + el
                else:
                    for el in v:
                        push_split(" " + el + " ") if split else None
                        if not split:
                            cur = (cur or "") + (" " if cur else "") + el
                continue
            if quoted or not split:
                cur = (cur or "") + v
            else:
                push_split(v)
        if cur is not None:
            fields.append(cur)
        if len(fields) > MAX_ARGS:
            raise LaunchScriptError(f"a word expands to more than {MAX_ARGS} words")
        return fields

    @staticmethod
    def join(fields):
        return " ".join(fields)

    # -- statements -------------------------------------------------------------------------
    def run(self, nodes):
        for node in nodes:
            if len(self.commands) > MAX_COMMANDS:
                raise LaunchScriptError(f"more than {MAX_COMMANDS} commands")
            if node[0] == "array":
                _, name, append, words, _line = node
                vals = [f for w in words for f in self.fields(w)]
                self.assign(name, vals, append)
            elif node[0] == "placeholder":
                self.vars.pop(node[1], None)
                self.note(f"line {node[2]}: {node[1]}=<...> is a placeholder to fill in; "
                          f"${node[1]} left unset")
            elif node[0] == "if":
                self.run_if(node)
            else:
                self.run_command(node)

    def run_if(self, node):
        _, branches, otherwise, line = node
        for cond, body in branches:
            try:
                ok = self.condition(cond)
            except _Unknown as why:
                if _assigns(body) or any(_assigns(b) for _, b in branches) or \
                        (otherwise and _assigns(otherwise)):
                    raise LaunchScriptError(f"launch script line {line}: cannot decide `if` "
                                            f"({why}) and its branches set variables; paste the "
                                            "argument list instead") from None
                self.note(f"line {line}: `if` not decided ({why}); its branches set nothing")
                return
            if ok:
                self.run(body)
                return
        if otherwise:
            self.run(otherwise)

    def condition(self, nodes):
        # a list of test commands joined by && / || is flattened by the parser into commands
        # separated by operators; here: one or more `[ ... ]` / `[[ ... ]]` commands.
        result = None
        for node in nodes:
            if node[0] != "cmd":
                raise _Unknown("not a test")
            value = self.test(node[1])
            if result is None or node[4] is None:
                result = value
            elif node[4] == "&&":      # bash: && and || have equal precedence, left to right
                result = result and value
            else:
                result = result or value
        if result is None:
            raise _Unknown("empty condition")
        return result

    def test(self, words):
        ws = [self.join(self.fields(w, cond=True, split=False)) for w in words]
        if ws and ws[0] in ("[", "[[") and ws[-1] in ("]", "]]"):
            ws = ws[1:-1]
        else:
            raise _Unknown(f"'{' '.join(ws)[:40]}' is not a string test")
        # || and && inside [[ ]] arrive as separate commands; within one test: ! and binary ops
        neg = False
        while ws and ws[0] == "!":
            neg, ws = not neg, ws[1:]
        if len(ws) == 2 and ws[0] in ("-n", "-z"):
            r = (ws[1] != "") if ws[0] == "-n" else (ws[1] == "")
        elif len(ws) == 3 and ws[1] in ("=", "==", "!="):
            r = (ws[0] == ws[2]) if ws[1] != "!=" else (ws[0] != ws[2])
        elif len(ws) == 3 and ws[1] in ("-eq", "-ne"):
            try:
                r = (int(ws[0]) == int(ws[2])) == (ws[1] == "-eq")
            except ValueError:
                raise _Unknown(f"'{' '.join(ws)[:40]}' compares non-numbers") from None
        elif len(ws) == 1:
            r = ws[0] != ""
        else:
            raise _Unknown(f"test '{' '.join(ws)[:40]}'")
        return r != neg

    def run_command(self, node):
        _, words, line, arrays, _joiner = node
        i = 0
        assigned = False
        while i < len(words):
            m = _ASSIGN.match(_prefix_literal(words[i]))
            if not m:
                break
            name, append = m.group(1), bool(m.group(2))
            value = self.join(self.fields(_strip_prefix(words[i], m.end()), split=False))
            self.assign(name, value, append)
            assigned = True
            i += 1
        rest = words[i:]
        for arr in arrays:
            _, name, append, ws, _l = arr
            self.assign(name, [f for w in ws for f in self.fields(w)], append)
        if not rest:
            return
        head = _literal(rest[0])
        if head in ("export", "declare", "local", "readonly", "typeset"):
            for w in rest[1:]:
                lit = _prefix_literal(w)
                m = _ASSIGN.match(lit)
                if m:
                    self.assign(m.group(1), self.join(self.fields(_strip_prefix(w, m.end()),
                                                                  split=False)), bool(m.group(2)))
            return
        if head == "unset":
            for w in rest[1:]:
                self.vars.pop(_prefix_literal(w), None)
            return
        if head in ("source", "."):
            self.note(f"line {line}: `{head} ...` not read (only this script's own assignments)")
            return
        expanded = [f for w in rest for f in self.fields(w)]
        if assigned and expanded:
            pass    # `VAR=x cmd`: the assignment was for the command's environment only
        self.commands.append((expanded, line))


def _assigns(nodes) -> bool:
    for n in nodes:
        if n[0] == "array":
            return True
        if n[0] == "if":
            if any(_assigns(b) for _, b in n[1]) or (n[2] and _assigns(n[2])):
                return True
        elif n[0] == "cmd":
            if n[3]:
                return True
            if n[1] and _ASSIGN.match(_prefix_literal(n[1][0])):
                return True
            if n[1] and _literal(n[1][0]) in ("export", "declare", "local", "unset"):
                return True
    return False


def _prefix_literal(word) -> str:
    """The unquoted literal text at the start of a word (where NAME= of an assignment sits)."""
    if word and word[0][0] == "lit" and not word[0][2]:
        return word[0][1]
    return ""


def _strip_prefix(word, n):
    first = word[0]
    rest = first[1][n:]
    return ([("lit", rest, False)] if rest else []) + list(word[1:]) or [("lit", "", True)]


def _word_parts(text):
    lx = _Lexer(text)
    parts = []
    while lx.i < len(lx.s):
        ch = lx.s[lx.i]
        if ch in " \t\r\n;&|()<>":
            parts.append(("lit", ch, True))      # inside ${X:-...} these are plain text
            lx.i += 1
            continue
        parts.extend(lx.word())
    return parts


class _Arith:
    """Integer + - * / % and parentheses over literal numbers (variables substituted first)."""

    def __init__(self, s):
        self.toks = re.findall(r"\d+|[-+*/%()]|\S", s)
        self.i = 0
        if len(self.toks) > 1000:
            raise ValueError("too long")

    def parse(self):
        v = self.expr()
        if self.i != len(self.toks):
            raise ValueError("trailing")
        return v

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else ""

    def expr(self):
        v = self.term()
        while self.peek() in ("+", "-"):
            op = self.toks[self.i]
            self.i += 1
            w = self.term()
            v = v + w if op == "+" else v - w
        return v

    def term(self):
        v = self.unary()
        while self.peek() in ("*", "/", "%"):
            op = self.toks[self.i]
            self.i += 1
            w = self.unary()
            if op == "*":
                v = v * w
            elif w == 0:
                raise ValueError("division by zero")
            else:   # bash truncates toward zero
                q = abs(v) // abs(w) * (1 if (v >= 0) == (w >= 0) else -1)
                v = q if op == "/" else v - q * w
            if abs(v) > 1 << 63:
                raise ValueError("overflow")
        return v

    def unary(self):
        if self.peek() == "-":
            self.i += 1
            return -self.unary()
        if self.peek() == "+":
            self.i += 1
            return self.unary()
        if self.peek() == "(":
            self.i += 1
            v = self.expr()
            if self.peek() != ")":
                raise ValueError("paren")
            self.i += 1
            return v
        tok = self.peek()
        if tok.isdigit():
            self.i += 1
            return int(tok)
        raise ValueError("not a number")


# ----------------------------------------------------------------------------------------------
# finding the training command
# ----------------------------------------------------------------------------------------------

_SCRIPT = re.compile(r"(?:^|/)pretrain_[A-Za-z0-9_]*\.py$|(?:^|/)train_[A-Za-z0-9_]*\.py$")
_LAUNCHERS = {"torchrun", "python", "python3", "python3.10", "python3.11", "python3.12", "srun",
              "deepspeed", "uv", "run", "-m", "-u", "torch.distributed.run",
              "torch.distributed.launch", "nsys", "exec"}


def _find_command(commands):
    for words, line in commands:
        for j, w in enumerate(words):
            if _SCRIPT.search(w):
                return words, j, line
    return None


def _split_launcher(words, j):
    """torchrun's options (kept) and the training script's arguments."""
    pre = words[:j]
    launcher_opts = []
    if "torchrun" in [os.path.basename(w) for w in pre] or "torch.distributed.run" in pre \
            or "torch.distributed.launch" in pre:
        k = max(i for i, w in enumerate(pre) if os.path.basename(w) == "torchrun"
                or w in ("torch.distributed.run", "torch.distributed.launch"))
        launcher_opts = pre[k + 1:]
    return launcher_opts, words[j + 1:]


def parse_launch_script(text: str, env: dict | None = None) -> LaunchScript:
    """Read a bash launch script and find its training command (nothing is run).

    The command is the first one naming ``pretrain_*.py`` (or ``train_*.py``): among the
    script's commands, then inside string variables (a command built as a string for
    ``srun bash -c``), and failing both, the variables whose value starts with ``--`` are joined
    in the order they were first set (a sourced model-configuration file).

    Parameters
    ----------
    text : str
        The script (at most 1 MiB).
    env : dict, optional
        Values for variables the script expects from outside (``{"1": "/data", "TP": "8"}``).

    Returns
    -------
    LaunchScript

    Examples
    --------
    >>> s = parse_launch_script('''
    ... GPUS=8
    ... ARGS=(--num-layers 2   # a comment
    ...       --hidden-size "${HIDDEN:-64}")
    ... torchrun --nproc_per_node $GPUS --nnodes 1 pretrain_gpt.py ${ARGS[@]} --save $1
    ... ''')
    >>> s.argv
    ['--nproc_per_node', '8', '--nnodes', '1', '--num-layers', '2', '--hidden-size', '64', '--save', '$1']
    >>> s.unset, s.nproc_per_node
    (('1',), '8')
    """
    if not isinstance(text, str):
        raise LaunchScriptError(f"a launch script is text, got {type(text).__name__}")
    if len(text.encode("utf-8", "replace")) > MAX_BYTES_INPUT:
        raise LaunchScriptError(f"launch script larger than {MAX_BYTES_INPUT} bytes")
    ev = _Eval(env)
    _run_text(ev, text, 0)
    found = _find_command(ev.commands)
    source = None
    if found is None:
        for name in ev.order:
            val = ev.vars.get(name)
            if isinstance(val, str) and ".py" in val:
                sub = _Eval(depth=1)
                sub.vars, sub.order = dict(ev.vars), list(ev.order)
                try:
                    _run_text(sub, val, 1)
                except LaunchScriptError:
                    continue
                found = _find_command(sub.commands)
                if found is not None:
                    source = f"the command string in ${name}"
                    ev.unset.extend(u for u in sub.unset if u not in ev.unset)
                    break
    if found is None:
        argv, names = [], []
        for name in ev.order:
            val = ev.vars.get(name)
            words = val if isinstance(val, list) else (val.split() if isinstance(val, str) else [])
            if words and words[0].startswith("--"):
                argv.extend(words)
                names.append(name)
        if not argv:
            raise LaunchScriptError("no pretrain_*.py command and no argument variables found in "
                                    "the launch script")
        ev.note("no pretrain_*.py command in the script: arguments gathered from "
                + ", ".join("$" + n for n in names))
        program, launcher_opts = None, []
    else:
        words, j, line = found
        program = words[j]
        launcher_opts, args = _split_launcher(words, j)
        argv = launcher_opts + args
        if source:
            ev.note(f"training command found in {source}")
    nproc = nnodes = None
    for k, w in enumerate(launcher_opts):
        key, eq, val = w.partition("=")
        if not eq:
            val = launcher_opts[k + 1] if k + 1 < len(launcher_opts) else None
        if key in ("--nproc_per_node", "--nproc-per-node"):
            nproc = val
        elif key == "--nnodes":
            nnodes = val
    if len(argv) > MAX_ARGS:
        raise LaunchScriptError(f"more than {MAX_ARGS} arguments")
    return LaunchScript(argv=argv, program=program, nproc_per_node=nproc, nnodes=nnodes,
                        unset=tuple(ev.unset), notes=tuple(ev.notes))


def _run_text(ev: _Eval, text: str, depth: int):
    if depth > MAX_EXPANSION_DEPTH:
        raise LaunchScriptError("command strings nested too deeply")
    nodes = _Parser(_Lexer(text).tokens()).parse()
    ev.run(nodes)


def read_launch_script(text: str, env: dict | None = None) -> list:
    """The argument list of a launch script's training command (see :func:`parse_launch_script`).

    torchrun's options come first (``--nproc_per_node``, ``--nnodes``, ...; memsym's Megatron
    reader takes the world size from them), then the training script's arguments.

    Examples
    --------
    >>> read_launch_script('A="--num-layers 4"\\npython pretrain_gpt.py $A --bf16')
    ['--num-layers', '4', '--bf16']
    """
    return parse_launch_script(text, env).argv


def read_argument_file(path) -> list:
    """A plain argument list file: words separated by white space, ``#`` comments, shell quoting.

    A file holding a whole launch script (a line ``#!`` or a ``pretrain_*.py`` command) is read
    with :func:`read_launch_script`.

    Examples
    --------
    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    ...     _ = f.write("--num-layers 2  # layers\\n--hidden-size 64 \\\\\\n --bf16\\n")
    >>> read_argument_file(f.name); os.unlink(f.name)
    ['--num-layers', '2', '--hidden-size', '64', '--bf16']
    """
    text = read_bounded(path, "argument file", errors="replace")
    if text.startswith("#!") or re.search(r"pretrain_[A-Za-z0-9_]*\.py", text):
        return read_launch_script(text)
    ev = _Eval()
    words = []
    for node in _Parser(_Lexer(text).tokens()).parse():
        if node[0] != "cmd":
            raise InvalidValueError("an argument file holds arguments only (no arrays or `if`)")
        for w in node[1]:
            words.extend(ev.fields(w))
    if ev.unset:
        raise InvalidValueError("argument file uses variables it cannot set: "
                                + ", ".join("$" + u for u in ev.unset))
    return words
