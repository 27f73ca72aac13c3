"""The statements of the bash subset, run on the parsed tree: assignments, ``&&``/``||``
lists, pipelines, ``if``/``elif``/``else`` on the tests it can decide, ``{ ...; }`` groups,
``export``/``declare``/``readonly``/``unset``/``set``/``exit``, and the other commands
recorded, never run (:attr:`Interpreter.commands`).
"""

from __future__ import annotations

import re

from ...limits import SHELL_MAX_COMMANDS, SHELL_MAX_NUMBER_DIGITS
from .._values import MAX_ARGS
from .arith import Arith
from .errors import Unknown
from .expansion import Expander
from .lexer import ASSIGN, NAME
from .parser import literal
from .variables import NOVAL


class Exit(Exception):
    """The script ran `exit`: bash reads no further."""


_DECL = ("export", "declare", "typeset", "readonly", "local")
# builtins that set variables or change how the rest is read, which memsym does not follow
_REFUSED_BUILTINS = {"eval": "it runs text as commands", "let": "it assigns by arithmetic",
                     "read": "its value comes from input",
                     "readarray": "its value comes from input",
                     "mapfile": "its value comes from input", "getopts": "it parses arguments",
                     "shift": "it moves the positional arguments", "alias": "it changes commands",
                     "return": "there is no function to return from", "builtin": "",
                     "command": "", "enable": "", "trap": "", "coproc": ""}


class Interpreter(Expander):
    """A reading's statements run in order: the variables set, the commands recorded."""

    def __init__(self, env=None, depth=0):
        self.commands = []
        self.exited = None      # the line of the `exit` that ended the script
        super().__init__(env, depth)

    # -- statements -------------------------------------------------------------------------
    def run(self, nodes):
        status = 0
        for node in nodes:
            status = self.run_andor(node)
        return status

    def run_andor(self, node):
        _, items, background, line = node
        self.line = line
        if background:
            self.confined += 1
        try:
            status = None
            for joiner, pipe in items:
                if joiner is None:
                    status = self.run_pipeline(pipe)
                elif status is None:
                    # bash may or may not run it: its commands are kept (the training command
                    # may be one), and an assignment in it is refused
                    self.confined += 1
                    try:
                        status = self.run_pipeline(pipe)
                    finally:
                        self.confined -= 1
                    status = None
                elif (joiner == "&&") == (status == 0):
                    status = self.run_pipeline(pipe)
            return 0 if background else status
        finally:
            if background:
                self.confined -= 1

    def run_pipeline(self, pipe):
        negated, cmds = pipe
        if len(cmds) > 1:
            self.confined += 1       # every part of a pipeline runs in a subshell
        try:
            for cmd in cmds:
                status = self.run_node(cmd)
        finally:
            if len(cmds) > 1:
                self.confined -= 1
        if negated and status is not None:
            status = 0 if status else 1
        return status

    def run_node(self, node):
        if len(self.commands) > SHELL_MAX_COMMANDS:
            self.fail(f"more than {SHELL_MAX_COMMANDS} commands")
        if node[0] == "if":
            status = self.run_if(node)
        elif node[0] == "group":
            status = self.run(node[1])
        else:
            return self.run_command(node)
        self.redirections(node[-1])
        return status

    def redirections(self, redirs):
        # their words are expanded (for ${X:=...}), as bash does, and dropped
        for r in redirs:
            if r[1] != "<<":
                try:
                    self.fields(r[2], cond=True, split=False)
                except Unknown:
                    pass

    def run_if(self, node):
        _, branches, otherwise, line, _r = node
        for cond, body in branches:
            ok = self.run(cond) if cond else None
            self.line = line
            if ok is None:
                if any(_assigns(b) for _, b in branches) or (otherwise and _assigns(otherwise)):
                    self.fail("cannot decide `if` (a test memsym cannot evaluate) and its "
                              "branches set variables; paste the argument list instead")
                self.note(f"line {line}: `if` not decided; its branches set nothing")
                return None
            if ok == 0:
                return self.run(body)
        if otherwise:
            return self.run(otherwise)
        return 0

    def run_command(self, node):
        _, words, line, arrays, redirs = node
        self.line = line
        i = 0
        while i < len(words) and ASSIGN.match(_prefix_literal(words[i])):
            i += 1
        prefix, rest = words[:i], words[i:]
        subs = self.cmdsubs
        if not rest:
            # assignments (left to right, each sees the one before) and arrays, in order
            for w in prefix:
                m = ASSIGN.match(_prefix_literal(w))
                self.assign(m.group(1), self.text_of(_strip_prefix(w, m.end()), 0),
                            bool(m.group(2)))
            self.assign_arrays(arrays)
            self.redirections(redirs)
            return 0 if self.cmdsubs == subs else None
        head = literal(rest[0])
        if re.match(r"[A-Za-z_][A-Za-z0-9_]*\[[^\]]*\]\+?=", _prefix_literal(rest[0])):
            self.fail("array element assignments A[k]=value are not read")
        if head in _DECL:
            if prefix:
                self.fail(f"assignments before `{head}` are not read")
            return self.declaration(head, rest[1:], arrays)
        if arrays:
            self.fail("an array assignment inside a command is not read")
        if head in ("[", "[[", "test"):
            # expanded by test() only, where an unset variable is empty (as under `env -i`)
            if redirs and head == "[[":
                self.fail("< and > inside [[ ]] are not read")
            if redirs:      # `[ a < b ]` reads a file b: bash's answer depends on the disk
                return None
            try:
                return 0 if self.test(head, rest) else 1
            except Unknown:
                return None
        words_out = []
        for w in rest:
            self.check_braces(w)
            self.check_unexpanded(w, line)
            words_out.extend(self.fields(w))
        self.redirections(redirs)
        values = []         # `VAR=x cmd`: expanded after the words, for cmd's environment only
        for w in prefix:
            m = ASSIGN.match(_prefix_literal(w))
            values.append((m.group(1), self.text_of(_strip_prefix(w, m.end()), 0),
                           bool(m.group(2))))
        if not words_out:
            # `VAR=x $EMPTY`: no command is left, so bash makes the assignments in the shell
            for name, value, append in values:
                self.assign(name, value, append)
            return 0 if self.cmdsubs == subs else None
        name = words_out[0]
        if head is None and name in (_DECL + tuple(_REFUSED_BUILTINS) + (
                "unset", "set", "exit", "source", ".", "printf", "[", "[[", "test")):
            self.fail(f"a command name that expands to `{name}` is not read")
        if name in _REFUSED_BUILTINS:
            why = _REFUSED_BUILTINS[name]
            self.fail(f"`{name}` is not read" + (f" ({why})" if why else ""))
        if name == "unset":
            return self.unset_names(words_out[1:])
        if name == "set":
            args, k = words_out[1:], 0
            while k < len(args):        # options only: -e, +x, -euo pipefail, -o posix
                a = args[k]
                if a in ("-", "--") or not a.startswith(("-", "+")):
                    self.fail("`set` with arguments sets the positional parameters; not read")
                if "o" in a[1:] and k + 1 < len(args) and args[k + 1] == "posix":
                    self.fail("`set -o posix` changes how bash reads the script; not read")
                k += 2 if "o" in a[1:] else 1
            return 0
        if name == "printf" and "-v" in words_out[1:]:
            self.fail("`printf -v` assigns a variable; not read")
        if name == "exit":
            if self.confined:
                self.note(f"line {line}: `exit` that bash may or may not reach: not followed")
                return None
            self.exited = line
            raise Exit()
        if name in ("source", "."):
            self.note(f"line {line}: `{name} ...` not read (only this script's own assignments)")
            return None
        if name in ("true", ":"):
            return 0
        if name == "false":
            return 1
        self.commands.append((words_out, line))
        return None

    def assign_arrays(self, arrays):
        for arr in arrays:
            if arr[0] == "placeholder":
                self.vars.pop(arr[1], None)
                self.note(f"line {arr[2]}: {arr[1]}=<...> is a placeholder to fill in; "
                          f"${arr[1]} left unset")
                continue
            _, name, append, ws, _l = arr
            vals = []
            for w in ws:
                self.check_braces(w)
                vals.extend(self.fields(w))
                if len(vals) > MAX_ARGS:
                    self.fail(f"the array {name} grows beyond {MAX_ARGS} words")
            self.assign(name, vals, append)

    def declaration(self, head, words, arrays):
        if head == "local":
            self.fail("`local` outside a function (bash refuses it and assigns nothing)")
        allowed = {"export": "", "readonly": "", "declare": "xrga", "typeset": "xrga"}[head]
        k = 0
        while k < len(words):
            lit = literal(words[k])
            if lit is None or not lit.startswith(("-", "+")) or lit in ("-", "+"):
                break
            k += 1
            if lit == "--":
                break
            if lit[0] == "+" or any(c not in allowed for c in lit[1:]):
                self.fail(f"`{head} {lit}` is not read")
        readonly = head == "readonly" or any("r" in (literal(w) or "") for w in words[:k])
        if any("a" in (literal(w) or "") for w in words[:k]) and words[k:]:
            self.fail(f"`{head} -a` with words other than NAME=(...) is not read")
        names = []
        for w in words[k:]:
            m = ASSIGN.match(_prefix_literal(w))
            if m:
                self.assign(m.group(1), self.text_of(_strip_prefix(w, m.end()), 0),
                            bool(m.group(2)))
                names.append(m.group(1))
                continue
            for f in self.fields(w):
                m = ASSIGN.match(f)
                if m and m.end() <= len(f):
                    self.assign(m.group(1), f[m.end():], bool(m.group(2)))
                    names.append(m.group(1))
                elif NAME.fullmatch(f):
                    names.append(f)
                else:
                    self.fail(f"`{head} {f[:40]}`: not a variable name")
        self.assign_arrays(arrays)
        names.extend(a[1] for a in arrays)
        if readonly:
            self.readonly.update(names)
        return 0

    def unset_names(self, args):
        functions = False
        for a in args:
            if a in ("-v", "--"):
                continue
            if a == "-f":
                functions = True
                continue
            if a.startswith("-"):
                self.fail(f"`unset {a}` is not read")
            if functions:
                continue
            if not NAME.fullmatch(a):
                self.fail(f"`unset {a[:40]}` is not read (only whole variables are)")
            if a in self.readonly:
                self.fail(f"{a} is readonly; bash refuses to unset it")
            if self.confined:
                self.fail(f"{a} is unset where bash would do it in a subshell or maybe not at all")
            self.vars[a] = NOVAL
        return 0

    def check_unexpanded(self, word, line):
        """Note what bash would expand from outside the script: ``~`` and file name patterns."""
        if _prefix_literal(word).startswith("~"):
            self.note(f"line {line}: ~ kept as written (bash puts the home directory there)")
        if any(p[0] == "lit" and not p[2] and re.search(r"[*?\[]", p[1]) for p in word):
            self.note(f"line {line}: * ? [ kept as written (as bash does when no file matches)")

    def check_braces(self, word):
        """Refuse a word bash would brace-expand (``--x{1,2}``, ``{1..4}``): unquoted ``{``
        and ``}`` with an unquoted ``,`` or ``..`` between them."""
        flat = "".join(p[1] if p[0] == "lit" and not p[2] else "\0" for p in word)
        if "{" not in flat:
            return
        opened = sep = False
        prev = ""
        for ch in flat:         # one pass (a regular expression could backtrack for long)
            if ch == "{":
                opened, sep = True, False
            elif ch == "}":
                if opened and sep:
                    self.fail(f"brace expansion in '{flat.replace(chr(0), '...')[:40]}' "
                              "is not read")
                opened = False
            elif opened and (ch == "," or (ch == "." and prev == ".")):
                sep = True
            prev = ch

    # -- tests --------------------------------------------------------------------------------
    def test(self, name, words):
        """A ``[ ... ]``, ``test ...`` or ``[[ ... ]]`` decided: True / False, or Unknown."""
        if name == "[[":
            if literal(words[-1]) != "]]":
                self.fail("`[[` without its `]]` on the same command (&&, ||, <, > and ( ) "
                          "inside [[ ]] are not read)")
            ws, lits = [], []
            for j, w in enumerate(words[1:-1], 1):
                ws.append(self.text_of(w, 0, cond=True))
                lits.append(literal(w))
                prev = literal(words[j - 1])
                if prev in ("==", "=", "!=") and j >= 3:
                    for p in w:      # an unquoted pattern character makes it a pattern match
                        if not p[2] and re.search(r"[*?\[]", p[1] if p[0] == "lit" else
                                                  self.text_of([p], 0, cond=True)):
                            raise Unknown("a pattern match in [[ ]]")
                if literal(w) == "=~":
                    raise Unknown("=~ in [[ ]]")
            return self.decide(ws, arith=True, lits=lits)
        # expanded again with cond=True: unset variables are empty, as under `env -i`
        ws = [f for w in words[1:] for f in self.fields(w, cond=True)]
        if name == "[":
            if not ws or ws[-1] != "]":
                raise Unknown("`[` without `]`")
            ws = ws[:-1]
        return self.decide(ws, arith=False)

    def decide(self, ws, arith, lits=None):
        """POSIX test by the number of arguments (``[``, ``test``); for ``[[ ]]`` (``lits``:
        the words as written) only a word written as an operator is one."""
        def op(k, *names):
            return ws[k] in names and (lits is None or lits[k] == ws[k])

        n = len(ws)
        if n == 0:
            return False
        if n == 1:
            return ws[0] != ""
        if n == 2:
            if op(0, "!"):
                return ws[1] == ""
            if op(0, "-n"):
                return ws[1] != ""
            if op(0, "-z"):
                return ws[1] == ""
            raise Unknown(f"test {ws[0]!r}")
        if n == 3:
            a, b = ws[0], ws[2]
            if op(1, "=", "=="):
                return a == b
            if op(1, "!="):
                return a != b
            if op(1, "-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
                x, y = (self.test_number(a, arith), self.test_number(b, arith))
                return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y,
                        "-gt": x > y, "-ge": x >= y}[ws[1]]
            if op(0, "!"):
                return not self.decide(ws[1:], arith, lits and lits[1:])
        if n == 4 and op(0, "!"):
            return not self.decide(ws[1:], arith, lits and lits[1:])
        raise Unknown(f"test '{' '.join(ws)[:40]}'")

    def test_number(self, text, arith):
        if arith:       # [[ a -eq b ]] evaluates both sides as arithmetic
            return Arith(self, text, 1).value()
        m = re.fullmatch(r"[ \t\n]*([-+]?)([0-9]+)[ \t\n]*", text)
        if not m:
            raise Unknown(f"{text[:20]!r} is not an integer")
        if len(m.group(2)) > SHELL_MAX_NUMBER_DIGITS:
            self.fail(f"a number of more than {SHELL_MAX_NUMBER_DIGITS} digits in a test")
        v = int(m.group(2))     # `[` reads 08 as 8 (base 10)
        return -v if m.group(1) == "-" else v


def _assigns(nodes) -> bool:
    """Whether any command in ``nodes`` may set a variable (used where bash may skip them)."""
    for n in nodes:
        if n[0] == "andor":
            if any(_assigns(pipe[1]) for _, pipe in n[1]):
                return True
        elif n[0] == "if":
            if any(_assigns(c) or _assigns(b) for c, b in n[1]) or (n[2] and _assigns(n[2])):
                return True
        elif n[0] == "group":
            if _assigns(n[1]):
                return True
        elif n[0] == "cmd":
            if n[3]:
                return True
            words = n[1]
            if words and ASSIGN.match(_prefix_literal(words[0])):
                return True
            if words and literal(words[0]) in _DECL + ("unset",) + tuple(_REFUSED_BUILTINS):
                return True
            for w in words:
                for p in _flat(w):
                    if p[0] == "var" and re.match(r"[A-Za-z_][A-Za-z0-9_]*:?=", p[1]):
                        return True
                    if p[0] == "arith" and "=" in p[1]:
                        return True
    return False


def _flat(word):
    for p in word:
        if p[0] == "dq":
            yield from p[1]
        else:
            yield p


def _prefix_literal(word) -> str:
    """The unquoted literal text at the start of a word (where NAME= of an assignment sits)."""
    if word and word[0][0] == "lit" and not word[0][2]:
        return word[0][1]
    return ""


def _strip_prefix(word, n):
    first = word[0]
    rest = first[1][n:]
    return ([("lit", rest, False)] if rest else []) + list(word[1:]) or [("lit", "", True)]
