"""Extract a training command's argument list from a bash launch script, without running it.

This module owns a small, bounded reader of the bash subset launch scripts use, read as bash
reads it: ``VAR=value``, arrays ``ARGS=( ... )`` and ``+=``, ``export``/``declare``/``readonly``,
``$VAR``/``${VAR}``/``${VAR:-default}`` (and ``-``, ``:=``, ``:+``, ``:?``, ``${#...}``),
``${ARR[@]}``/``${ARR[*]}``/``${ARR[n]}``, ``$((...))`` integer arithmetic (``+ - * / % **``),
quoting, comments, line continuations, ``&&``/``||`` lists and ``if``/``elif``/``else`` on
string and number tests it can decide, ``{ ...; }`` groups, pipelines, redirections,
here-documents and here-strings (their text is a command's input, never a command).
Commands are never executed: ``$(...)`` stays the text ``$(...)``.

Anything outside the subset (loops, functions, subshells, ``eval``, ``read``, brace expansion,
``$'...'``, pattern tests, assignments bash may or may not make, ...) is refused with the line
and the construct.  Reading is linear in the script, and every depth and size is bounded
while the script is read and expanded (:data:`memsym.limits.SHELL_MAX_DEPTH`,
:data:`~memsym.limits.SHELL_MAX_WORD_CHARS`, :data:`~memsym.limits.SHELL_MAX_EXPANDED_CHARS`,
:data:`~memsym.limits.SHELL_MAX_NUMBER_DIGITS`).

Two assumptions are made, and each is reported: a variable the script reads but never sets
(``$1``, ``$DATA``) stays in the words as its own text and is listed in ``unset`` (inside a
test or a ``${X:-default}`` it is taken as unset, as under ``env -i``; a variable bash sets
itself, ``$PWD``, ``$RANDOM``, is never taken as unset), and unquoted ``*``, ``?``, ``[`` and
``~`` are kept as written (as bash does when no file matches).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..errors import InvalidValueError
from ..text import printable
from ..limits import (SHELL_MAX_COMMANDS, SHELL_MAX_DEPTH, SHELL_MAX_EXPANDED_CHARS,
                      SHELL_MAX_NUMBER_DIGITS, SHELL_MAX_WORD_CHARS)
from ._values import MAX_ARGS, MAX_BYTES_INPUT, read_bounded

__all__ = ["LaunchScript", "LaunchScriptError", "parse_launch_script", "read_launch_script",
           "read_argument_file", "MAX_EXPANSION_DEPTH"]

MAX_EXPANSION_DEPTH = SHELL_MAX_DEPTH   # kept for callers of the old name
MAX_COMMANDS = SHELL_MAX_COMMANDS


class LaunchScriptError(InvalidValueError):
    """A launch script memsym cannot read (the construct and the line are named).

    The message is one line of inert text: script text quoted in it has its newlines and
    control characters escaped (:func:`memsym.text.printable`)."""

    def __init__(self, message):
        super().__init__(printable(str(message), 400))


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
# ("cmd", text, quoted), ("arith", text, quoted).  Tokens: ("word", parts, line),
# ("array", name, append, [parts...], line), ("placeholder", name, line),
# ("redir", operator, parts, line), ("op", operator, line).
# ----------------------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_OPS = ("&&", "||", ";;", ";&", "|&", ";", "&", "|", "(", ")")
_REDIRS = (">>", ">|", ">&", "<&", "<>", ">", "<")
_BREAK = frozenset(" \t\n;&|()<>")          # characters that end an unquoted word
_PLAIN_STOP = frozenset(" \t\n;&|()<>\\'\"$`")
_INDEXED = re.compile(r"\[[^\]\s]*\]\+?=")
_ALL_ELEMENTS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\[@\]")
_HEREDOC_ASSIGN = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?=|\$\(\([^\n]*=")


class _Lexer:
    def __init__(self, text: str, line: int = 1):
        self.s, self.i, self.line = text, 0, line
        self.pending_heredocs = []      # (delimiter, strip_tabs, quoted, line) after this line

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

    def skip_blanks(self):
        s = self.s
        while self.i < len(s) and s[self.i] in " \t":
            self.i += 1

    def next(self):
        s = self.s
        while True:     # a loop, not recursion: a script of 10^5 redirections is read flat
            while self.i < len(s):
                ch = s[self.i]
                if ch in " \t":
                    self.i += 1
                elif ch == "\\" and self.peek(1) == "\n":
                    self.i += 2
                    self.line += 1
                elif ch == "#":
                    j = s.find("\n", self.i)
                    self.i = len(s) if j < 0 else j
                else:
                    break
            if self.i >= len(s):
                # bash reads a here-document that has no end line up to the end of the file
                self.pending_heredocs = []
                return None
            ch = s[self.i]
            line = self.line
            if ch == "\n":
                self.i += 1
                self.line += 1
                if self.pending_heredocs:
                    self.read_heredocs()
                return ("op", "\n", line)
            if s.startswith("<<<", self.i):
                # a here-string: the word is the command's input; the line goes on after it
                self.i += 3
                self.skip_blanks()
                word = self.word()
                if not word:
                    self.fail("a here-string '<<<' without its word")
                return ("redir", "<<<", word, line)
            if s.startswith("<<", self.i):
                self.i += 2
                strip = self.peek() == "-"
                if strip:
                    self.i += 1
                self.skip_blanks()
                word = self.word()
                if not word or any(p[0] != "lit" for p in word):
                    self.fail("a here-document delimiter must be plain text")
                delim = "".join(p[1] for p in word)
                if not delim:
                    self.fail("a here-document with an empty delimiter is not read")
                self.pending_heredocs.append((delim, strip, any(p[2] for p in word), line))
                return ("redir", "<<", [("lit", delim, True)], line)
            if s.startswith(("&>>", "&>"), self.i):
                self.i += 3 if s.startswith("&>>", self.i) else 2
                return self.redirect(line)
            if s.startswith(("<(", ">("), self.i):
                # a process substitution names a pipe to a command: never run, like $(...)
                self.i += 2
                return ("word", [("cmd", self.balanced("(", ")"), False)], line)
            if ch in "<>":
                for op in _REDIRS:
                    if s.startswith(op, self.i):
                        self.i += len(op)
                        break
                self.no_split_operator()
                return self.redirect(line)
            for op in _OPS:
                if s.startswith(op, self.i):
                    self.i += len(op)
                    self.no_split_operator()
                    return ("op", op, line)
            m = _ASSIGN.match(s, self.i)
            if m and s.startswith("<", m.end()) and not s.startswith(("<<", "<("), m.end()):
                # `VOCAB_FILE=<Specify path to file>/gpt2-vocab.json`: a placeholder left for the
                # user to fill in (bash itself would read a redirection); the variable stays unset.
                # looked for in the next 200 characters only: a line of 10^5 `A=<` stays linear
                end = min(len(s), m.end() + 200)
                j = s.find(">", m.end(), end)
                k = s.find("\n", m.end(), end)
                if j > 0 and (k < 0 or j < k):
                    self.i = j + 1
                    self.word()
                    return ("placeholder", m.group(1), line)
            word = self.word()
            if (len(word) == 1 and word[0][0] == "lit" and not word[0][2]
                    and self.peek() == "(" and _ASSIGN.fullmatch(word[0][1])):
                m = _ASSIGN.fullmatch(word[0][1])      # `A=(`, also split by a `\` newline
                self.i += 1
                return ("array", m.group(1), bool(m.group(2)), self.array_body(), line)
            if (len(word) == 1 and word[0][0] == "lit" and not word[0][2]
                    and self.peek() in ("<", ">")):
                if word[0][1].isdigit():
                    continue    # `2>&1`: the 2 is the redirection's file descriptor, not a word
                if re.fullmatch(r"\{[A-Za-z_][A-Za-z0-9_]*\}", word[0][1]):
                    self.fail(f"{word[0][1]}> assigns a file descriptor to a variable; not read")
            return ("word", word, line)

    def no_split_operator(self):
        """Refuse ``&\\<newline>&``: bash joins the lines first and reads one operator."""
        j = self.i
        while self.s.startswith("\\\n", j):
            j += 2
        if j > self.i and j < len(self.s) and self.s[j] in "&|;<>(":
            self.fail("a line continuation inside an operator is not read")

    def redirect(self, line):
        self.skip_blanks()
        if self.s.startswith(("<(", ">("), self.i):     # `exec > >(tee log)`: never run
            self.i += 2
            return ("redir", ">", [("cmd", self.balanced("(", ")"), False)], line)
        if self.peek() in ("(", ")", ";", "&", "|", "<", ">", "\n", ""):
            self.fail("a redirection without its target")
        return ("redir", ">", self.word(), line)

    def read_heredocs(self):
        s = self.s
        for delim, strip, quoted, line in self.pending_heredocs:
            logical = []
            while True:
                if self.i >= len(s):
                    break       # bash: "here-document delimited by end-of-file"
                j = s.find("\n", self.i)
                j = len(s) if j < 0 else j
                text = s[self.i:j]
                self.i = min(j + 1, len(s))
                self.line += 1
                if strip:
                    text = text.lstrip("\t")
                if not quoted and (len(text) - len(text.rstrip("\\"))) % 2:
                    # unquoted: backslash-newline joins the lines, and the end line is looked
                    # for in the joined line (as bash does)
                    logical.append(text[:-1])
                    continue
                text = "".join(logical) + text
                logical = []
                if text == delim:
                    break
                if not quoted and _HEREDOC_ASSIGN.search(text):
                    # an unquoted here-document is expanded when bash runs it
                    self.fail(f"a here-document (line {line}) that assigns with ${{X:=...}} "
                              "or $((X=...))")
        self.pending_heredocs = []

    def array_body(self):
        words = []
        while True:
            while self.i < len(self.s) and self.s[self.i] in " \t\n":
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
            if ch == "[" and _INDEXED.match(self.s, self.i):
                self.fail("array elements with an index [k]=value are not read")
            words.append(self.word())
            if len(words) > MAX_ARGS:
                self.fail(f"an array of more than {MAX_ARGS} words")

    def word(self):
        parts = []
        s = self.s
        while self.i < len(s):
            ch = s[self.i]
            if ch in _BREAK:
                break
            if ch == "\\":
                nxt = self.peek(1)
                self.i += 2
                if nxt == "\n":
                    self.line += 1
                    continue
                if nxt == "":
                    self.i = len(s)
                    nxt = "\\"      # bash keeps a backslash that ends the script
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
                if self.peek(1) in ("'", '"'):
                    self.fail(f"the quoting ${self.peek(1)}...{self.peek(1)} is not read")
                parts.append(self.dollar(quoted=False))
            elif ch == "`":
                parts.append(("cmd", self.backquoted(), False))
            else:
                j = self.i
                while self.i < len(s) and s[self.i] not in _PLAIN_STOP:
                    self.i += 1
                if parts and parts[-1][0] == "lit" and not parts[-1][2]:
                    # `X\<newline>=2` is `X=2`: bash removes the line break before it reads
                    # the word, so the pieces are one text (and an assignment)
                    parts[-1] = ("lit", parts[-1][1] + s[j:self.i], False)
                else:
                    parts.append(("lit", s[j:self.i], False))
        return parts

    def backquoted(self):
        j = self.s.find("`", self.i + 1)
        if j < 0:
            self.fail("unterminated backquote")
        text = self.s[self.i + 1:j]
        self.line += text.count("\n")
        self.i = j + 1
        return text

    def double_quoted(self, to_end=False):
        """From just after an opening ``"`` to its match (``to_end``: the text of a
        ``"${X:-...}"`` default, whose own double quotes are removed)."""
        parts, buf, s = [], [], self.s
        while True:
            if self.i >= len(s):
                if to_end:
                    break
                self.fail('unterminated double quote')
            ch = s[self.i]
            if ch == '"':
                self.i += 1
                if to_end:
                    continue
                break
            if ch == "\\" and self.peek(1) and (self.peek(1) in '$`"\\\n'
                                                  or (to_end and self.peek(1) == "}")):
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
                if buf:
                    parts.append(("lit", "".join(buf), True))
                    buf = []
                parts.append(("cmd", self.backquoted(), True))
            else:
                if ch == "\n":
                    self.line += 1
                buf.append(ch)
                self.i += 1
        if buf or not parts:
            parts.append(("lit", "".join(buf), True))   # keeps "" a (quoted, empty) word
        if not to_end and any(p[0] == "var" and _ALL_ELEMENTS.fullmatch(p[1]) for p in parts):
            # bash drops a "...${A[@]}..." that expands to nothing at all when A is empty:
            # the quoted string is kept as one group to know where it ends
            return [("dq", parts, True)]
        return parts

    def default_parts(self, quoted):
        """The parts of the word of a ``${X:-word}`` (all of ``self.s``).  Unquoted, its
        blanks are unquoted text (split when the expansion is); in double quotes, ``'`` is
        plain text."""
        if quoted:
            return self.double_quoted(to_end=True)
        parts = []
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch in _BREAK:
                if ch == "\n":
                    self.line += 1
                parts.append(("lit", ch, False))
                self.i += 1
                continue
            parts.extend(self.word())
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
        if s.startswith("\\\n", self.i):
            self.fail("a line continuation right after $ is not read")
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
        if ch == "[":
            self.fail("the old arithmetic $[...] is not read; write $((...))")
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
# parser: tokens -> a list of and-or lists.
#   ("andor", [(joiner, pipeline), ...], background, line)  joiner: None, "&&" or "||"
#   pipeline: (negated, [command, ...])
#   command: ("cmd", words, line, arrays, redirs) | ("if", branches, else, line, redirs)
#            | ("group", nodes, line, redirs)
# ----------------------------------------------------------------------------------------------

_RESERVED = {"then", "elif", "else", "fi", "do", "done", "esac", "}", "in", "]]"}
_LOOPS = ("for", "while", "until", "case", "select", "function", "coproc")


def _literal(word):
    """The word's text when it is plain unquoted literal text, else None."""
    if len(word) == 1 and word[0][0] == "lit" and not word[0][2]:
        return word[0][1]
    return None


class _Parser:
    def __init__(self, tokens):
        self.t, self.i = tokens, 0
        self.depth = 0

    def fail(self, line, why):
        raise LaunchScriptError(f"launch script line {line}: {why}")

    def tok(self):
        return self.t[self.i] if self.i < len(self.t) else None

    def skip_newlines(self):
        while self.i < len(self.t) and self.t[self.i][:2] == ("op", "\n"):
            self.i += 1

    def parse(self, stop=(), line=None):
        nodes = []
        while self.i < len(self.t):
            tok = self.t[self.i]
            if tok[0] == "op":
                if tok[1] in ("\n", ";"):
                    self.i += 1
                    continue
                if tok[1] in ("(", ")"):
                    self.fail(tok[2], "subshells ( ... ), (( ... )) and function definitions "
                                      "are not read")
                self.fail(tok[2], f"unexpected '{tok[1]}'")
            if tok[0] == "word":
                first = _literal(tok[1])
                if first in stop:
                    return nodes
                if first in _RESERVED:
                    self.fail(tok[2], f"unexpected '{first}'")
            nodes.append(self.andor())
        if stop:
            raise LaunchScriptError(f"launch script line {line}: missing {' or '.join(stop)}")
        return nodes

    def andor(self):
        line = self.t[self.i][-1]
        items = [(None, self.pipeline())]
        background = False
        while self.i < len(self.t):
            tok = self.t[self.i]
            if tok[0] != "op":
                break
            if tok[1] in ("&&", "||"):
                self.i += 1
                self.skip_newlines()
                if self.tok() is None:
                    self.fail(tok[2], f"'{tok[1]}' at the end of the script")
                items.append((tok[1], self.pipeline()))
                continue
            if tok[1] == "&":
                self.i += 1
                background = True
            elif tok[1] in (";;", ";&"):
                self.fail(tok[2], f"unexpected '{tok[1]}'")
            break
        return ("andor", items, background, line)

    def pipeline(self):
        negated = False
        tok = self.tok()
        if tok is not None and tok[0] == "word" and _literal(tok[1]) == "time":
            self.i += 1         # `time [-p] pipeline` runs the pipeline as it is
            tok = self.tok()
            if tok is not None and tok[0] == "word" and _literal(tok[1]) == "-p":
                self.i += 1
                tok = self.tok()
        if tok is not None and tok[0] == "word" and _literal(tok[1]) == "!":
            negated = True
            self.i += 1
        cmds = [self.command()]
        while self.i < len(self.t) and self.t[self.i][:2] in (("op", "|"), ("op", "|&")):
            self.i += 1
            self.skip_newlines()
            if self.tok() is None:
                self.fail(self.t[self.i - 1][2], "'|' at the end of the script")
            cmds.append(self.command())
        return (negated, cmds)

    def redirs(self):
        out = []
        while self.i < len(self.t) and self.t[self.i][0] == "redir":
            out.append(self.t[self.i])
            self.i += 1
        return out

    def command(self):
        tok = self.tok()
        if tok is None:
            self.fail(self.t[-1][-1], "a command is missing at the end of the script")
        line = tok[-1]
        if tok[0] == "op":
            if tok[1] in ("(", ")"):
                self.fail(line, "subshells ( ... ), (( ... )) and function definitions are "
                                "not read")
            self.fail(line, f"a command is missing before '{tok[1]}'")
        if tok[0] == "word":
            first = _literal(tok[1])
            if first in _LOOPS:
                self.fail(line, f"'{first}' is not read; paste the argument list instead")
            if first in _RESERVED:
                self.fail(line, f"unexpected '{first}'")
            if first in ("if", "{"):
                self.depth += 1
                if self.depth > SHELL_MAX_DEPTH:
                    self.fail(line, f"if/{{ }} blocks nested more than {SHELL_MAX_DEPTH} deep")
                self.i += 1
                node = self.parse_if(line) if first == "if" else self.parse_group(line)
                self.depth -= 1
                return node
        words, arrays, redirs = [], [], []
        while self.i < len(self.t):
            tok = self.t[self.i]
            if tok[0] == "op":
                if tok[1] == "(":
                    self.fail(line, "function definitions and subshells are not read")
                break
            self.i += 1
            if tok[0] == "array":       # `declare -a A=(...)`: an array assignment
                arrays.append(tok)
            elif tok[0] == "placeholder":
                arrays.append(tok)
            elif tok[0] == "redir":
                redirs.append(tok)
            else:
                words.append(tok[1])
        return ("cmd", words, line, arrays, redirs)

    def expect(self, word, line):
        tok = self.tok()
        if tok is None or tok[0] != "word" or _literal(tok[1]) != word:
            self.fail(line, f"missing '{word}'")
        self.i += 1

    def parse_group(self, line):
        body = self.parse(stop=("}",), line=line)
        self.expect("}", line)
        return ("group", body, line, self.redirs())

    def parse_if(self, line):
        branches, otherwise = [], None
        while True:
            cond = self.parse(stop=("then",), line=line)
            self.expect("then", line)
            body = self.parse(stop=("elif", "else", "fi"), line=line)
            branches.append((cond, body))
            kw = _literal(self.t[self.i][1])
            self.i += 1
            if kw == "elif":
                continue
            if kw == "else":
                otherwise = self.parse(stop=("fi",), line=line)
                self.expect("fi", line)
            return ("if", branches, otherwise, line, self.redirs())


# ----------------------------------------------------------------------------------------------
# evaluation: assignments and expansions only
# ----------------------------------------------------------------------------------------------

class _Unknown(Exception):
    """A condition that cannot be decided from the script alone."""


class _Exit(Exception):
    """The script ran `exit`: bash reads no further."""


class _NoValue:
    """A variable the script unset (or an array element it never set): known to be empty."""

    def __repr__(self):
        return "<unset>"


_NOVAL = _NoValue()
# variables bash sets itself even under `env -i`: their values are never "unset"
_BASH_OWN = frozenset(
    "BASH BASHOPTS BASH_ALIASES BASH_ARGC BASH_ARGV BASH_CMDS BASH_EXECUTION_STRING BASH_LINENO "
    "BASH_LOADABLES_PATH BASH_SOURCE BASH_VERSINFO BASH_VERSION DIRSTACK EUID GROUPS HOSTNAME "
    "HOSTTYPE IFS MACHTYPE OPTERR OPTIND OSTYPE PATH PPID PS4 PWD SHELL SHELLOPTS SHLVL TERM UID "
    "RANDOM SRANDOM SECONDS LINENO EPOCHSECONDS EPOCHREALTIME BASHPID FUNCNAME HISTCMD _ "
    "0 ? $ ! -".split())
_IFS_RUN = re.compile(r"[ \t\n]+")       # bash's default IFS: space, tab, newline
_SPEC = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(?:\[([^\]]*)\])?(.*)", re.S)
_OP = re.compile(r":?[-=+?]")
_DECL = ("export", "declare", "typeset", "readonly", "local")
# builtins that set variables or change how the rest is read, which memsym does not follow
_REFUSED_BUILTINS = {"eval": "it runs text as commands", "let": "it assigns by arithmetic",
                     "read": "its value comes from input",
                     "readarray": "its value comes from input",
                     "mapfile": "its value comes from input", "getopts": "it parses arguments",
                     "shift": "it moves the positional arguments", "alias": "it changes commands",
                     "return": "there is no function to return from", "builtin": "",
                     "command": "", "enable": "", "trap": "", "coproc": ""}


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
        for j, seg in enumerate(_IFS_RUN.split(t)):
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


class _Eval:
    def __init__(self, env=None, depth=0):
        self.vars = {}          # name -> str | list | _NOVAL
        self.order = {}         # names in the order first assigned (a dict: O(1) membership)
        self.unset = {}         # names read but never set, in order
        self.notes = {}
        self.commands = []
        self.readonly = set()
        self.depth = depth
        self.line = 0
        self.budget = SHELL_MAX_EXPANDED_CHARS
        self.confined = 0       # >0: inside a pipeline, a background list or an undecided branch
        self.exited = None      # the line of the `exit` that ended the script
        self.cmdsubs = 0        # command substitutions seen (their status is unknown)
        for k, v in (env or {}).items():
            self.assign(str(k), str(v))

    # -- bookkeeping ------------------------------------------------------------------------
    def fail(self, why):
        raise LaunchScriptError(f"launch script line {self.line}: {why}")

    def note(self, text):
        if len(self.notes) < 50:        # a script of 10^5 placeholders gets 50 notes, not 10^5
            self.notes[text] = None
        else:
            self.notes["further notes left out"] = None

    def spend(self, n):
        self.budget -= n
        if self.budget < 0:
            self.fail(f"the script's expansions produce more than {SHELL_MAX_EXPANDED_CHARS} "
                      "characters in all (memsym.limits.SHELL_MAX_EXPANDED_CHARS)")

    def assign(self, name, value, append=False):
        if self.confined:
            self.fail(f"{name} is set where bash would set it in a subshell or maybe not at all "
                      "(a pipeline, '&', or a branch memsym cannot decide)")
        if name == "IFS":
            self.fail("assigning IFS changes how bash splits words; not read")
        if name in self.readonly:
            self.fail(f"{name} is readonly; bash refuses to assign it")
        old = self.vars.get(name)
        if isinstance(value, list):
            if len(value) > MAX_ARGS:
                self.fail(f"the array {name} grows beyond {MAX_ARGS} words")
            if append:
                new = [] if old is None or old is _NOVAL else (old if isinstance(old, list)
                                                                 else [old])
                if len(new) + len(value) > MAX_ARGS:
                    self.fail(f"the array {name} grows beyond {MAX_ARGS} words")
                new.extend(value)       # in place: appending is linear, not quadratic
                value = new
        else:
            if isinstance(old, list):
                # `A=x` and `A+=x` on an array set its element 0, keeping the others
                first = old[0] if old else ""
                value = (first + value) if append else value
                self.check_value(name, value)
                old[0:1] = [value]
                self.order.setdefault(name)
                return
            if append and isinstance(old, str):
                value = old + value
            self.check_value(name, value)
        self.order.setdefault(name)
        self.vars[name] = value

    def check_value(self, name, value):
        if len(value) > SHELL_MAX_WORD_CHARS:
            self.fail(f"the value of {name} grows beyond {SHELL_MAX_WORD_CHARS} characters "
                      "(memsym.limits.SHELL_MAX_WORD_CHARS)")
        self.spend(len(value))     # a string is copied when it grows: the copy is paid for

    # -- expansion --------------------------------------------------------------------------
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
                        raise _Unknown(f"${m.group(1)} is set by bash itself")
                    self.unset.setdefault(m.group(1))
                    out.text("${" + spec + "}")
                    return
            if index in ("@", "*"):
                n = len(val) if isinstance(val, list) else (0 if val in (None, _NOVAL) else 1)
            else:
                if index is None and isinstance(val, list):
                    val = val[0] if val else _NOVAL
                val = "" if val in (None, _NOVAL) else val
                if not val.isascii():
                    self.fail(f"${{{shown}}}: the length of non-ASCII text depends on the locale")
                n = len(val)
            out.text(str(n))
            return
        m = _SPEC.fullmatch(spec)
        if not m:
            self.fail(f"expansion ${{{shown}}} is not read")
        name, index, rest = m.group(1), m.group(2), m.group(3)
        if index is not None and not _NAME.fullmatch(name):
            self.fail(f"expansion ${{{shown}}} is not read")
        if name in _BASH_OWN and name not in self.vars:
            if rest:
                self.fail(f"${{{shown}}}: bash sets ${name} itself; its value is not known "
                          "without running the script")
            if cond:
                raise _Unknown(f"${name} is set by bash itself")
        val = self.lookup(name, True)
        if index in ("@", "*"):
            if rest:
                self.fail(f"expansion ${{{shown}}} is not read (operators on a whole array)")
            if val is None:
                if not cond:
                    self.unset.setdefault(name)
                out.text("${" + spec + "}")
                return
            arr = val if isinstance(val, list) else ([] if val is _NOVAL else [val])
            if quoted and index == "@" and not arr:
                out.no_elements = True
            if index == "*" and quoted:
                out.text(" ".join(arr))
                return
            for j, el in enumerate(arr):
                if j:
                    out.next_element()
                self.emit(el, quoted, out)
            return
        if index is not None:
            val = self.element(val, index)
        elif isinstance(val, list):
            val = val[0] if val else _NOVAL      # $ARR is ${ARR[0]}
        if rest:
            op = _OP.match(rest)
            if not op:
                self.fail(f"expansion ${{{shown}}} is not read (only -, :-, =, :=, +, :+, ?, :? "
                          "and ${#...} are)")
            op, arg = op.group(0), rest[op.end():]
            empty = val is None or val is _NOVAL or (op.startswith(":") and val == "")
            if op[-1] == "-":
                if empty:
                    self.expand_parts(self.arg_parts(arg, quoted), out, depth + 1, cond,
                                      lit_split=not quoted)
                    return
            elif op[-1] == "=":
                if empty:
                    if index is not None or not _NAME.fullmatch(name):
                        self.fail(f"${{{shown}}}: bash cannot assign this way")
                    val = self.text_of(self.arg_parts(arg, quoted), depth + 1, cond)
                    self.assign(name, val)
            elif op[-1] == "+":
                if empty:
                    if quoted:
                        out.text("")
                    return
                self.expand_parts(self.arg_parts(arg, quoted), out, depth + 1, cond,
                                  lit_split=not quoted)
                return
            elif empty:
                self.fail(f"${{{shown}}}: the script requires {name} to be set")
        if val is None:
            if cond:
                self.emit("", quoted, out)
                return
            self.unset.setdefault(name)
            out.text("${" + spec + "}" if len(spec) > 1 or not spec.isalnum() else "$" + spec)
            return
        if val is _NOVAL:
            val = ""
        self.emit(val, quoted, out)

    def arg_parts(self, text, quoted):
        lx = _Lexer(text, self.line)
        return lx.default_parts(quoted)

    def element(self, val, index):
        if not re.fullmatch(r"[0-9]+", index):
            self.fail(f"array index [{index[:20]}] is not read (only a number is)")
        if len(index) > SHELL_MAX_NUMBER_DIGITS:
            self.fail(f"array index of more than {SHELL_MAX_NUMBER_DIGITS} digits "
                      "(memsym.limits.SHELL_MAX_NUMBER_DIGITS)")
        k = _Arith(self, "", 0).number(index)   # an index is arithmetic: 010 is 8, 08 an error
        if val is None:
            return None
        arr = val if isinstance(val, list) else ([] if val is _NOVAL else [val])
        return arr[k] if k < len(arr) else _NOVAL

    def lookup(self, name, cond):
        if name in self.vars:
            return self.vars[name]
        if not cond:
            self.unset.setdefault(name)
        return None

    def arith(self, text, depth, cond):
        """``$((text))``: the number as text, or None (and a note) when a value is unknown."""
        expr = self.text_of(_Lexer(text, self.line).double_quoted(to_end=True), depth + 1, cond)
        try:
            return str(_Arith(self, expr, depth + 1).value())
        except _Unknown as why:
            self.note(f"$(({text.strip()[:40]})) not computed ({why})")
            return None

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
        if len(self.commands) > MAX_COMMANDS:
            self.fail(f"more than {MAX_COMMANDS} commands")
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
                except _Unknown:
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
        while i < len(words) and _ASSIGN.match(_prefix_literal(words[i])):
            i += 1
        prefix, rest = words[:i], words[i:]
        subs = self.cmdsubs
        if not rest:
            # assignments (left to right, each sees the one before) and arrays, in order
            for w in prefix:
                m = _ASSIGN.match(_prefix_literal(w))
                self.assign(m.group(1), self.text_of(_strip_prefix(w, m.end()), 0),
                            bool(m.group(2)))
            self.assign_arrays(arrays)
            self.redirections(redirs)
            return 0 if self.cmdsubs == subs else None
        head = _literal(rest[0])
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
            except _Unknown:
                return None
        words_out = []
        for w in rest:
            self.check_braces(w)
            self.check_unexpanded(w, line)
            words_out.extend(self.fields(w))
        self.redirections(redirs)
        values = []         # `VAR=x cmd`: expanded after the words, for cmd's environment only
        for w in prefix:
            m = _ASSIGN.match(_prefix_literal(w))
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
            raise _Exit()
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
            lit = _literal(words[k])
            if lit is None or not lit.startswith(("-", "+")) or lit in ("-", "+"):
                break
            k += 1
            if lit == "--":
                break
            if lit[0] == "+" or any(c not in allowed for c in lit[1:]):
                self.fail(f"`{head} {lit}` is not read")
        readonly = head == "readonly" or any("r" in (_literal(w) or "") for w in words[:k])
        if any("a" in (_literal(w) or "") for w in words[:k]) and words[k:]:
            self.fail(f"`{head} -a` with words other than NAME=(...) is not read")
        names = []
        for w in words[k:]:
            m = _ASSIGN.match(_prefix_literal(w))
            if m:
                self.assign(m.group(1), self.text_of(_strip_prefix(w, m.end()), 0),
                            bool(m.group(2)))
                names.append(m.group(1))
                continue
            for f in self.fields(w):
                m = _ASSIGN.match(f)
                if m and m.end() <= len(f):
                    self.assign(m.group(1), f[m.end():], bool(m.group(2)))
                    names.append(m.group(1))
                elif _NAME.fullmatch(f):
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
            if not _NAME.fullmatch(a):
                self.fail(f"`unset {a[:40]}` is not read (only whole variables are)")
            if a in self.readonly:
                self.fail(f"{a} is readonly; bash refuses to unset it")
            if self.confined:
                self.fail(f"{a} is unset where bash would do it in a subshell or maybe not at all")
            self.vars[a] = _NOVAL
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
        """A ``[ ... ]``, ``test ...`` or ``[[ ... ]]`` decided: True / False, or _Unknown."""
        if name == "[[":
            if _literal(words[-1]) != "]]":
                self.fail("`[[` without its `]]` on the same command (&&, ||, <, > and ( ) "
                          "inside [[ ]] are not read)")
            ws, lits = [], []
            for j, w in enumerate(words[1:-1], 1):
                ws.append(self.text_of(w, 0, cond=True))
                lits.append(_literal(w))
                prev = _literal(words[j - 1])
                if prev in ("==", "=", "!=") and j >= 3:
                    for p in w:      # an unquoted pattern character makes it a pattern match
                        if not p[2] and re.search(r"[*?\[]", p[1] if p[0] == "lit" else
                                                  self.text_of([p], 0, cond=True)):
                            raise _Unknown("a pattern match in [[ ]]")
                if _literal(w) == "=~":
                    raise _Unknown("=~ in [[ ]]")
            return self.decide(ws, arith=True, lits=lits)
        # expanded again with cond=True: unset variables are empty, as under `env -i`
        ws = [f for w in words[1:] for f in self.fields(w, cond=True)]
        if name == "[":
            if not ws or ws[-1] != "]":
                raise _Unknown("`[` without `]`")
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
            raise _Unknown(f"test {ws[0]!r}")
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
        raise _Unknown(f"test '{' '.join(ws)[:40]}'")

    def test_number(self, text, arith):
        if arith:       # [[ a -eq b ]] evaluates both sides as arithmetic
            return _Arith(self, text, 1).value()
        m = re.fullmatch(r"[ \t\n]*([-+]?)([0-9]+)[ \t\n]*", text)
        if not m:
            raise _Unknown(f"{text[:20]!r} is not an integer")
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
            if words and _ASSIGN.match(_prefix_literal(words[0])):
                return True
            if words and _literal(words[0]) in _DECL + ("unset",) + tuple(_REFUSED_BUILTINS):
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


_ARITH_WS = re.compile(r"[ \t\n]*")
_ARITH_TOKEN = re.compile(r"([0-9][0-9A-Za-z_#@]*)|([A-Za-z_][A-Za-z0-9_]*)|"
                          r"(\*\*=|\*\*|\+\+|--|<<=|>>=|[<>=!]=|&&|\|\||<<|>>|[-+*/%^&|]=|"
                          r"[-+*/%()])|(.)", re.S)
_INT64 = 1 << 63


class _Arith:
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
                    if (self.toks and self.toks[-1][0] == "v") or _NAME.match(text, follows):
                        ev.fail(f"the operator {op} in $((...)) is not read")
                    self.toks.append(("o", op[0]))
                    pos -= 1
                    continue
                if op not in ("**", "+", "-", "*", "/", "%", "(", ")"):
                    ev.fail(f"the operator {op} in $((...)) is not read")
                self.toks.append(("o", op))
            elif other == "$":
                raise _Unknown("it uses a value the script does not set")
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
                v = v[0] if v else _NOVAL
            if v is None:
                raise _Unknown(f"{val} is not set in the script")
            if v is _NOVAL or v.strip(" \t\n") == "":
                return 0
            return _Arith(self.ev, v, self.depth + self.d + 1).value()
        if (kind, val) == ("o", "("):
            self.deeper()
            v = self.add()
            if self.peek() != ("o", ")"):
                self.ev.fail("a missing ')' in $((...))")
            self.i += 1
            self.d -= 1
            return v
        self.ev.fail("a syntax error in $((...))")


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
    if "\0" in text:
        raise LaunchScriptError("launch script holds a NUL character: not a text file")
    if "\r" in text:
        line = text.count("\n", 0, text.index("\r")) + 1
        raise LaunchScriptError(f"launch script line {line}: a carriage return (a Windows line "
                                "ending), which bash reads as part of a word; convert the file "
                                "to Unix line endings")
    ev = _Eval(env)
    _run_text(ev, text, 0)
    found = _find_command(ev.commands)
    source = None
    if found is None:
        for name in list(ev.order):
            val = ev.vars.get(name)
            if isinstance(val, str) and ".py" in val:
                # a command built as a string (`srun bash -c "$CMD"`): read it in a copy of
                # the variables; the copy and the reading are paid from the same budget
                ev.spend(len(ev.vars) + len(val))
                sub = _Eval(depth=1)
                sub.vars = {k: (list(v) if isinstance(v, list) else v) for k, v in ev.vars.items()}
                sub.order, sub.readonly, sub.budget = dict(ev.order), set(ev.readonly), ev.budget
                try:
                    _run_text(sub, val, 1)
                except LaunchScriptError:
                    continue
                finally:
                    ev.budget = sub.budget
                found = _find_command(sub.commands)
                if found is not None:
                    source = f"the command string in ${name}"
                    for u in sub.unset:
                        ev.unset.setdefault(u)
                    break
    if found is None and ev.exited is not None:
        raise LaunchScriptError(f"launch script line {ev.exited}: the script exits before any "
                                "pretrain_*.py command (read with an empty environment)")
    if found is None:
        argv, names = [], []
        for name in ev.order:
            val = ev.vars.get(name)
            words = val if isinstance(val, list) else (
                [w for w in _IFS_RUN.split(val) if w] if isinstance(val, str) else [])
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
    try:
        ev.run(nodes)
    except _Exit:
        ev.note(f"line {ev.exited}: the script exits there; nothing after it is read")


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
        for joiner, (negated, cmds) in node[1]:
            for cmd in cmds:
                if joiner or negated or node[2] or cmd[0] != "cmd" or cmd[3] or cmd[4]:
                    raise InvalidValueError("an argument file holds arguments only (no arrays, "
                                            "`if`, operators or redirections)")
                for w in cmd[1]:
                    words.extend(ev.fields(w))
    if ev.unset:
        raise InvalidValueError("argument file uses variables it cannot set: "
                                + ", ".join("$" + u for u in ev.unset))
    return words
