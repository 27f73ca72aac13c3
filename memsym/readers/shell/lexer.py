"""The lexer of the bash subset: script text to tokens, and each word to its parts.

Quoting, comments, line continuations, here-documents and here-strings are resolved here;
nothing is expanded (:mod:`memsym.readers.shell.expansion` does that).
"""

from __future__ import annotations

import re

from .._values import MAX_ARGS
from .errors import LaunchScriptError

# ----------------------------------------------------------------------------------------------
# lexer: text -> tokens.  A word is a list of parts: ("lit", text, quoted), ("var", spec, quoted),
# ("cmd", text, quoted), ("arith", text, quoted).  Tokens: ("word", parts, line),
# ("array", name, append, [parts...], line), ("placeholder", name, line),
# ("redir", operator, parts, line), ("op", operator, line).
# ----------------------------------------------------------------------------------------------

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_OPS = ("&&", "||", ";;", ";&", "|&", ";", "&", "|", "(", ")")
_REDIRS = (">>", ">|", ">&", "<&", "<>", ">", "<")
_BREAK = frozenset(" \t\n;&|()<>")          # characters that end an unquoted word
_PLAIN_STOP = frozenset(" \t\n;&|()<>\\'\"$`")
_INDEXED = re.compile(r"\[[^\]\s]*\]\+?=")
_ALL_ELEMENTS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\[@\]")
_HEREDOC_ASSIGN = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?=|\$\(\([^\n]*=")


class Lexer:
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
            m = ASSIGN.match(s, self.i)
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
                    and self.peek() == "(" and ASSIGN.fullmatch(word[0][1])):
                m = ASSIGN.fullmatch(word[0][1])      # `A=(`, also split by a `\` newline
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
        m = NAME.match(s, self.i)
        if m:
            self.i = m.end()
            return ("var", m.group(0), quoted)
        if ch and (ch.isdigit() or ch in "@*#?$!-"):
            self.i += 1
            return ("var", ch, quoted)
        return ("lit", "$", quoted)
