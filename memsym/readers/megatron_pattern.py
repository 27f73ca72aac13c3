"""Megatron-LM's ``--moe-layer-freq`` pattern language, parsed (never evaluated).

Megatron (``arguments.py``: ``moe_freq_type`` / ``_eval_pattern``) checks that a pattern holds
only digits, ``,``, ``[``, ``]``, ``(``, ``)``, ``+`` and ``*`` and then ``eval``s it; this
module reads the same language with a small recursive-descent parser, bounded in length and
depth, so that no text a user gives is ever evaluated.
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ._values import MAX_LAYERS, whole

__all__ = ["parse_moe_layer_freq", "MAX_PATTERN_CHARS"]

MAX_PATTERN_CHARS = 10_000      # longest --moe-layer-freq pattern read


def parse_moe_layer_freq(text, num_layers: int | None = None):
    """Megatron's ``--moe-layer-freq``: an int q, or a 0/1 pattern such as ``([0]*3+[1]*58)``.

    Megatron (args: ``moe_freq_type`` / ``_eval_pattern``) checks that the string holds only
    digits, ``,``, ``[``, ``]``, ``(``, ``)``, ``+`` and ``*`` and then ``eval``s it; here the same
    language (list literals, ``+`` concatenation, ``*`` repetition, parentheses) is parsed by a
    bounded recursive-descent parser.  Nothing is evaluated.

    Parameters
    ----------
    text : str or int
        The argument's value.
    num_layers : int, optional
        When given, a pattern must have exactly this many entries (args: ``validate_args``).

    Returns
    -------
    int or tuple of int
        q (layer i is MoE iff i mod q = 0) or the 0/1 pattern (1 = MoE layer).

    Examples
    --------
    >>> parse_moe_layer_freq("([0]*3+[1]*58)", 61)[:4], sum(parse_moe_layer_freq("[0]*3+[1]*58"))
    ((0, 0, 0, 1), 58)
    >>> parse_moe_layer_freq("2"), parse_moe_layer_freq("([1]*3+[0]*2)*2")
    (2, (1, 1, 1, 0, 0, 1, 1, 1, 0, 0))
    """
    if isinstance(text, int) and not isinstance(text, bool):
        return whole(text, "--moe-layer-freq", 1, MAX_LAYERS)
    if not isinstance(text, str):
        raise InvalidValueError(f"--moe-layer-freq must be a string or an int, got {text!r:.40}")
    s = text.replace(" ", "")
    if len(s) > MAX_PATTERN_CHARS:
        raise InvalidValueError(f"--moe-layer-freq pattern longer than {MAX_PATTERN_CHARS} characters")
    if "[" not in s:
        return whole(s, "--moe-layer-freq", 1, MAX_LAYERS)
    bad = sorted({ch for ch in s if ch not in "0123456789,[]()+*"})
    if bad:
        raise InvalidValueError(f"--moe-layer-freq pattern {text[:60]!r} has characters "
                                f"{''.join(bad)!r}; only digits , [ ] ( ) + * are accepted")
    value = _Pattern(s, text).parse()
    if not isinstance(value, list):
        raise InvalidValueError(f"--moe-layer-freq pattern {text[:60]!r} is not a list")
    if any(x not in (0, 1) for x in value):
        raise InvalidValueError(f"--moe-layer-freq pattern {text[:60]!r} must hold only 0 (dense) "
                                "and 1 (MoE)")
    if num_layers is not None and len(value) != num_layers:
        raise InvalidValueError(f"--moe-layer-freq pattern has {len(value)} entries but "
                                f"--num-layers is {num_layers} (Megatron asserts they are equal)")
    return tuple(value)


class _Pattern:
    """expr := term ('+' term)* ; term := atom ('*' atom)* ; atom := INT | '[' list ']' | '(' expr ')'."""

    MAX_DEPTH = 50

    def __init__(self, s: str, original: str):
        self.s, self.i, self.original, self.depth = s, 0, original, 0

    def fail(self, why: str):
        raise InvalidValueError(f"--moe-layer-freq pattern {self.original[:60]!r}: {why}")

    def peek(self):
        return self.s[self.i] if self.i < len(self.s) else ""

    def parse(self):
        v = self.expr()
        if self.i != len(self.s):
            self.fail(f"unexpected {self.peek()!r} at position {self.i}")
        return v

    def expr(self):
        v = self.term()
        while self.peek() == "+":
            self.i += 1
            w = self.term()
            if isinstance(v, list) != isinstance(w, list):
                self.fail("'+' joins two lists or two numbers")
            v = v + w
            self.check(v)
        return v

    def term(self):
        v = self.atom()
        while self.peek() == "*":
            self.i += 1
            w = self.atom()
            if isinstance(v, list) and isinstance(w, list):
                self.fail("'*' repeats a list a number of times, not by a list")
            if isinstance(v, list) or isinstance(w, list):
                lst, n = (v, w) if isinstance(v, list) else (w, v)
                if len(lst) * n > MAX_LAYERS:
                    self.fail(f"the pattern exceeds {MAX_LAYERS} layers")
                v = lst * n
            else:
                v = v * w
            self.check(v)
        return v

    def atom(self):
        ch = self.peek()
        if ch.isdigit():
            j = self.i
            while self.peek().isdigit():
                self.i += 1
                if self.i - j > 7:
                    self.fail("number too large")
            return int(self.s[j:self.i])
        if ch and ch in "[(":
            self.depth += 1
            if self.depth > self.MAX_DEPTH:
                self.fail("nested too deeply")
            self.i += 1
            if ch == "(":
                v = self.expr()
                if self.peek() != ")":
                    self.fail("missing ')'" if self.peek() != "," else "tuples are not accepted")
            else:
                v = []
                if self.peek() != "]":
                    while True:
                        x = self.expr()
                        if isinstance(x, list):
                            self.fail("nested lists are not accepted")
                        v.append(x)
                        if self.peek() != ",":
                            break
                        self.i += 1
                if self.peek() != "]":
                    self.fail("missing ']'")
            self.i += 1
            self.depth -= 1
            return v
        self.fail(f"expected a number, '[' or '(' at position {self.i}, got {ch or 'the end'!r}")

    def check(self, v):
        if isinstance(v, list) and len(v) > MAX_LAYERS:
            self.fail(f"the pattern exceeds {MAX_LAYERS} layers")
        if isinstance(v, int) and v > MAX_LAYERS:
            self.fail(f"a number exceeds {MAX_LAYERS}")


