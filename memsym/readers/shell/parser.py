"""The parser of the bash subset: tokens (:mod:`memsym.readers.shell.lexer`) to a tree of
and-or lists, pipelines, commands, ``if`` and ``{ ...; }`` groups, nested at most
:data:`memsym.limits.SHELL_MAX_DEPTH` deep.  Loops, functions and subshells are refused here.
"""

from __future__ import annotations

from ...limits import SHELL_MAX_DEPTH
from .errors import LaunchScriptError

# ----------------------------------------------------------------------------------------------
# parser: tokens -> a list of and-or lists.
#   ("andor", [(joiner, pipeline), ...], background, line)  joiner: None, "&&" or "||"
#   pipeline: (negated, [command, ...])
#   command: ("cmd", words, line, arrays, redirs) | ("if", branches, else, line, redirs)
#            | ("group", nodes, line, redirs)
# ----------------------------------------------------------------------------------------------

_RESERVED = {"then", "elif", "else", "fi", "do", "done", "esac", "}", "in", "]]"}
_LOOPS = ("for", "while", "until", "case", "select", "function", "coproc")


def literal(word):
    """The word's text when it is plain unquoted literal text, else None."""
    if len(word) == 1 and word[0][0] == "lit" and not word[0][2]:
        return word[0][1]
    return None


class Parser:
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
                first = literal(tok[1])
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
        if tok is not None and tok[0] == "word" and literal(tok[1]) == "time":
            self.i += 1         # `time [-p] pipeline` runs the pipeline as it is
            tok = self.tok()
            if tok is not None and tok[0] == "word" and literal(tok[1]) == "-p":
                self.i += 1
                tok = self.tok()
        if tok is not None and tok[0] == "word" and literal(tok[1]) == "!":
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
            first = literal(tok[1])
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
        if tok is None or tok[0] != "word" or literal(tok[1]) != word:
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
            kw = literal(self.t[self.i][1])
            self.i += 1
            if kw == "elif":
                continue
            if kw == "else":
                otherwise = self.parse(stop=("fi",), line=line)
                self.expect("fi", line)
            return ("if", branches, otherwise, line, self.redirs())
