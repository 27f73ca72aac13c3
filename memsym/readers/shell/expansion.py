"""Parameter expansion and word splitting: a word's parts to the fields bash makes of them.

``$NAME``, ``${NAME}``, ``${X:-default}`` (and ``-``, ``=``, ``:=``, ``+``, ``:+``, ``?``,
``:?``), ``${#X}``, ``${A[@]}``, ``${A[*]}``, ``${A[n]}`` and ``$((...))``; a command
substitution stays the text ``$(...)``.  Word splitting is at runs of space, tab and newline
(bash's default IFS; assigning IFS is refused).
"""

from __future__ import annotations

import re

from ...limits import SHELL_MAX_DEPTH, SHELL_MAX_NUMBER_DIGITS, SHELL_MAX_WORD_CHARS
from .._values import MAX_ARGS
from .arith import Arith
from .errors import Unknown
from .lexer import NAME, Lexer
from .variables import NOVAL, Variables

# variables bash sets itself even under `env -i`: their values are never "unset"
_BASH_OWN = frozenset(
    "BASH BASHOPTS BASH_ALIASES BASH_ARGC BASH_ARGV BASH_CMDS BASH_EXECUTION_STRING BASH_LINENO "
    "BASH_LOADABLES_PATH BASH_SOURCE BASH_VERSINFO BASH_VERSION DIRSTACK EUID GROUPS HOSTNAME "
    "HOSTTYPE IFS MACHTYPE OPTERR OPTIND OSTYPE PATH PPID PS4 PWD SHELL SHELLOPTS SHLVL TERM UID "
    "RANDOM SRANDOM SECONDS LINENO EPOCHSECONDS EPOCHREALTIME BASHPID FUNCNAME HISTCMD _ "
    "0 ? $ ! -".split())
IFS_RUN = re.compile(r"[ \t\n]+")       # bash's default IFS: space, tab, newline
_SPEC = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(?:\[([^\]]*)\])?(.*)", re.S)
_OP = re.compile(r":?[-=+?]")


class _Out:
    """The fields one word expands to: bash's word splitting, with running size bounds.

    ``text`` adds quoted text or unquoted literal text (kept whole: the field exists even if
    the text is empty and quoted); ``splittable`` adds the result of an unquoted expansion, split
    at runs of space, tab and newline; ``next_element`` separates the elements of ``${A[@]}``.
    Outside of splitting (assignments, ``[[ ]]``) every word is one field.
    """

    __slots__ = ("ev", "split", "fields", "cur", "exists", "size", "chars", "no_elements")

    def __init__(self, ev, split):
        self.ev, self.split = ev, split
        self.fields, self.cur, self.exists, self.size = [], [], False, 0
        self.chars = 0                  # characters kept so far (to see if a group added any)
        self.no_elements = False        # a "${A[@]}" of an empty array was expanded

    def grow(self, n):
        # checked before the text is kept: a word can never be built past the limit
        self.size += n + 1
        if self.size > SHELL_MAX_WORD_CHARS:
            self.ev.fail(f"a word or value expands to more than {SHELL_MAX_WORD_CHARS} characters "
                         "(memsym.limits.SHELL_MAX_WORD_CHARS)")
        self.ev.spend(n + 1)

    def text(self, t):
        self.grow(len(t))
        self.cur.append(t)
        self.chars += len(t)
        self.exists = True

    def splittable(self, t):
        if not self.split:
            self.text(t)
            return
        self.grow(len(t))
        for j, seg in enumerate(IFS_RUN.split(t)):
            if j:
                self.brk()
            if seg:
                self.cur.append(seg)
                self.chars += len(seg)
                self.exists = True

    def brk(self):
        if self.exists:
            self.fields.append("".join(self.cur))
            if len(self.fields) > MAX_ARGS:
                self.ev.fail(f"a word expands to more than {MAX_ARGS} words")
        self.cur, self.exists = [], False

    def next_element(self):
        if self.split:
            self.brk()
        else:
            self.text(" ")

    def finish(self):
        if not self.split:
            return ["".join(self.cur)]
        self.brk()
        return self.fields


class Expander(Variables):
    """The variable store with bash's expansions of a word (:meth:`fields`, :meth:`text_of`)."""

    def __init__(self, env=None, depth=0):
        self.cmdsubs = 0        # command substitutions seen (their status is unknown)
        super().__init__(env, depth)

    def fields(self, parts, depth=0, cond=False, split=True):
        """Expand a word into fields (bash's word splitting of unquoted expansions)."""
        out = _Out(self, split)
        self.expand_parts(parts, out, depth, cond)
        return out.finish()

    def text_of(self, parts, depth, cond=False):
        """A word expanded as in an assignment: one string, not split."""
        return self.fields(parts, depth, cond, split=False)[0]

    def expand_parts(self, parts, out, depth, cond, lit_split=False):
        for kind, value, quoted in parts:
            if kind == "lit":
                if lit_split and not quoted:
                    out.splittable(value)
                else:
                    out.text(value)
            elif kind == "var":
                self.param(value, quoted, out, depth, cond)
            elif kind == "dq":
                exists, chars, nfields = out.exists, out.chars, len(out.fields)
                out.no_elements = False
                self.expand_parts(value, out, depth, cond)
                if out.no_elements and out.chars == chars and len(out.fields) == nfields:
                    out.exists = exists     # "${E[@]}$X" with E empty, X empty: no word
            elif kind == "arith":
                v = self.arith(value, depth, cond)
                if v is None:
                    out.text("$((" + value + "))")
                else:
                    out.text(v)
            else:
                # never run; the placeholder has no blanks, so it stays one word
                self.note(f"command substitution $({value.strip()[:40]}) not run")
                self.cmdsubs += 1
                out.text("$(...)")

    def emit(self, val, quoted, out):
        if quoted:
            out.text(val)
        else:
            out.splittable(val)

    def param(self, spec, quoted, out, depth, cond):
        """A ${...} or $NAME, expanded into ``out``."""
        if depth > SHELL_MAX_DEPTH:
            self.fail(f"${{...}} expansions nested more than {SHELL_MAX_DEPTH} deep "
                      "(memsym.limits.SHELL_MAX_DEPTH)")
        shown = spec[:40]
        if spec.startswith("#") and len(spec) > 1:
            self.param_length(spec, shown, out, cond)
            return
        m = _SPEC.fullmatch(spec)
        if not m:
            self.fail(f"expansion ${{{shown}}} is not read")
        name, index, rest = m.group(1), m.group(2), m.group(3)
        if index is not None and not NAME.fullmatch(name):
            self.fail(f"expansion ${{{shown}}} is not read")
        if name in _BASH_OWN and name not in self.vars:
            if rest:
                self.fail(f"${{{shown}}}: bash sets ${name} itself; its value is not known "
                          "without running the script")
            if cond:
                raise Unknown(f"${name} is set by bash itself")
        val = self.lookup(name, True)
        if index in ("@", "*"):
            self.param_elements(spec, name, index, rest, val, quoted, out, cond)
            return
        if index is not None:
            val = self.element(val, index)
        elif isinstance(val, list):
            val = val[0] if val else NOVAL      # $ARR is ${ARR[0]}
        if rest:
            done, val = self.param_operator(shown, name, index, rest, val, quoted, out, depth,
                                            cond)
            if done:
                return
        if val is None:
            if cond:
                self.emit("", quoted, out)
                return
            self.unset.setdefault(name)
            out.text("${" + spec + "}" if len(spec) > 1 or not spec.isalnum() else "$" + spec)
            return
        if val is NOVAL:
            val = ""
        self.emit(val, quoted, out)

    def param_length(self, spec, shown, out, cond):
        """``${#X}``, ``${#A[@]}``, ``${#A[n]}``: a length (characters, or elements), expanded
        into ``out``; an unset variable stays as its text (unknown in a test)."""
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[([^\]]*)\])?", spec[1:])
        if not m:
            self.fail(f"expansion ${{{shown}}} is not read")
        val = self.lookup(m.group(1), True)
        index = m.group(2)
        if index not in (None, "@", "*"):
            val = self.element(val, index)      # the index is checked even if A is unset
            index = "0"
        if val is None:
            if m.group(1) in _BASH_OWN or not cond:
                if cond:
                    raise Unknown(f"${m.group(1)} is set by bash itself")
                self.unset.setdefault(m.group(1))
                out.text("${" + spec + "}")
                return
        if index in ("@", "*"):
            n = len(val) if isinstance(val, list) else (0 if val in (None, NOVAL) else 1)
        else:
            if index is None and isinstance(val, list):
                val = val[0] if val else NOVAL
            val = "" if val in (None, NOVAL) else val
            if not val.isascii():
                self.fail(f"${{{shown}}}: the length of non-ASCII text depends on the locale")
            n = len(val)
        out.text(str(n))

    def param_elements(self, spec, name, index, rest, val, quoted, out, cond):
        """``${A[@]}`` or ``${A[*]}`` (``index``), the array's value ``val``, expanded into
        ``out``: one field per element, or (quoted ``*``) the elements joined by a space."""
        shown = spec[:40]
        if rest:
            self.fail(f"expansion ${{{shown}}} is not read (operators on a whole array)")
        if val is None:
            if not cond:
                self.unset.setdefault(name)
            out.text("${" + spec + "}")
            return
        arr = val if isinstance(val, list) else ([] if val is NOVAL else [val])
        if quoted and index == "@" and not arr:
            out.no_elements = True
        if index == "*" and quoted:
            out.text(" ".join(arr))
            return
        for j, el in enumerate(arr):
            if j:
                out.next_element()
            self.emit(el, quoted, out)

    def param_operator(self, shown, name, index, rest, val, quoted, out, depth, cond):
        """The operator ``rest`` (``-``, ``=``, ``+``, ``?``, each with or without ``:``) on the
        value ``val``: ``(True, None)`` when it expanded the word into ``out``, else
        ``(False, value)`` with the value to expand (assigned by ``=``)."""
        op = _OP.match(rest)
        if not op:
            self.fail(f"expansion ${{{shown}}} is not read (only -, :-, =, :=, +, :+, ?, :? "
                      "and ${#...} are)")
        op, arg = op.group(0), rest[op.end():]
        empty = val is None or val is NOVAL or (op.startswith(":") and val == "")
        if op[-1] == "-":
            if empty:
                self.expand_parts(self.arg_parts(arg, quoted), out, depth + 1, cond,
                                  lit_split=not quoted)
                return True, None
        elif op[-1] == "=":
            if empty:
                if index is not None or not NAME.fullmatch(name):
                    self.fail(f"${{{shown}}}: bash cannot assign this way")
                val = self.text_of(self.arg_parts(arg, quoted), depth + 1, cond)
                self.assign(name, val)
        elif op[-1] == "+":
            if empty:
                if quoted and name == "@":
                    out.no_elements = True  # "${@+x}" without arguments: no word, as "$@"
                elif quoted:
                    out.text("")
                return True, None
            self.expand_parts(self.arg_parts(arg, quoted), out, depth + 1, cond,
                              lit_split=not quoted)
            return True, None
        elif empty:
            self.fail(f"${{{shown}}}: the script requires {name} to be set")
        return False, val

    def arg_parts(self, text, quoted):
        lx = Lexer(text, self.line)
        return lx.default_parts(quoted)

    def element(self, val, index):
        if not re.fullmatch(r"[0-9]+", index):
            self.fail(f"array index [{index[:20]}] is not read (only a number is)")
        if len(index) > SHELL_MAX_NUMBER_DIGITS:
            self.fail(f"array index of more than {SHELL_MAX_NUMBER_DIGITS} digits "
                      "(memsym.limits.SHELL_MAX_NUMBER_DIGITS)")
        k = Arith(self, "", 0).number(index)   # an index is arithmetic: 010 is 8, 08 an error
        if val is None:
            return None
        arr = val if isinstance(val, list) else ([] if val is NOVAL else [val])
        return arr[k] if k < len(arr) else NOVAL


    def arith(self, text, depth, cond):
        """``$((text))``: the number as text, or None (and a note) when a value is unknown."""
        expr = self.text_of(Lexer(text, self.line).double_quoted(to_end=True), depth + 1, cond)
        try:
            return str(Arith(self, expr, depth + 1).value())
        except Unknown as why:
            self.note(f"$(({text.strip()[:40]})) not computed ({why})")
            return None
