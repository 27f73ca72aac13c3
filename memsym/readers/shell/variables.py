"""The variables a reading holds, and what it spends: the store the later stages share.

A value is text, a list (an array) or :data:`NOVAL` (unset by the script: known to be
empty); a name absent from the store was never set (its ``$NAME`` stays as written).
Assignments are refused where bash would make them in a subshell or maybe not at all, and
every value and the whole reading are bounded (:data:`memsym.limits.SHELL_MAX_WORD_CHARS`,
:data:`~memsym.limits.SHELL_MAX_EXPANDED_CHARS`).
"""

from __future__ import annotations

from ...limits import SHELL_MAX_EXPANDED_CHARS, SHELL_MAX_WORD_CHARS
from .._values import MAX_ARGS
from .errors import LaunchScriptError


class NoValue:
    """A variable the script unset (or an array element it never set): known to be empty."""

    def __repr__(self):
        return "<unset>"


NOVAL = NoValue()


class Variables:
    """The variable store of one reading, with its notes, its current line and its budget."""

    def __init__(self, env=None, depth=0):
        self.vars = {}          # name -> str | list | NOVAL
        self.order = {}         # names in the order first assigned (a dict: O(1) membership)
        self.unset = {}         # names read but never set, in order
        self.notes = {}
        self.readonly = set()
        self.depth = depth
        self.line = 0
        self.budget = SHELL_MAX_EXPANDED_CHARS
        self.confined = 0       # >0: inside a pipeline, a background list or an undecided branch
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
                new = [] if old is None or old is NOVAL else (old if isinstance(old, list)
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

    def lookup(self, name, cond):
        if name in self.vars:
            return self.vars[name]
        if not cond:
            self.unset.setdefault(name)
        return None
