"""Megatron-LM's ``--moe-layer-freq`` pattern language, parsed (never evaluated), and its
hybrid layer pattern (``--hybrid-layer-pattern``, with the MTP depths after ``/``).

Megatron (``arguments.py``: ``moe_freq_type`` / ``_eval_pattern``) checks that a pattern holds
only digits, ``,``, ``[``, ``]``, ``(``, ``)``, ``+`` and ``*`` and then ``eval``s it; this
module reads the same language with a small recursive-descent parser, bounded in length and
depth, so that no text a user gives is ever evaluated.  The hybrid pattern's grammar and checks
are ``megatron/core/models/hybrid/hybrid_layer_allocation.py`` (``parse_hybrid_pattern``,
``_validate_pattern``) and ``validate_args``' hybrid section (``arguments.py:741-923``), both at
Megatron-LM d98e8a64dd.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from ..errors import InvalidValueError
from ._values import MAX_LAYERS, whole

__all__ = ["parse_moe_layer_freq", "MAX_PATTERN_CHARS", "HybridPattern", "parse_hybrid_pattern",
           "unified_hybrid_pattern", "HYBRID_SYMBOLS"]

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




#: Megatron's hybrid layer symbols (``Symbols.VALID_LAYERS``, hybrid_layer_allocation.py:17-26):
#: Mamba, Gated DeltaNet, attention, DSA attention, MLA, MLP, MoE.
HYBRID_SYMBOLS = "MG*D+-E"
_PIPE, _MTP = "|", "/"          # Symbols.PIPE, Symbols.MTP_SEPARATOR


class HybridPattern(NamedTuple):
    """A parsed unified hybrid pattern (Megatron's ``ParsedHybridPattern``): the main
    decoder pattern (``|`` pipeline boundaries kept; None when empty), the one MTP block's
    pattern (None: no MTP) and the MTP depths."""

    main: Optional[str]
    mtp: Optional[str]
    depths: int


def _check_symbols(pattern: str, name: str, allow_pipe: bool) -> None:
    """``_validate_pattern`` (hybrid_layer_allocation.py:277-298): only layer symbols (and
    ``|`` in the main pattern); attention never beside MLA or DSA."""
    valid = HYBRID_SYMBOLS + (_PIPE if allow_pipe else "")
    bad = next((ch for ch in pattern if ch not in valid), None)
    if bad is not None:
        raise InvalidValueError(f"--hybrid-layer-pattern: in the {name} pattern, {bad!r} is not "
                                f"a valid layer symbol (valid: {' '.join(valid)}; Megatron's "
                                "_validate_pattern)")
    if "*" in pattern and ("D" in pattern or "+" in pattern):
        raise InvalidValueError(f"--hybrid-layer-pattern: the {name} pattern mixes attention "
                                "(*) with MLA/DSA (+/D), which Megatron does not support")


def parse_hybrid_pattern(text: str) -> HybridPattern:
    """Megatron's ``parse_hybrid_pattern``: ``<main>/<mtp>/<mtp>/...``, every MTP part alike.

    The text before the first ``/`` is the main decoder pattern (``|`` marks pipeline
    stages); each part after it is one MTP depth's block, and all of them must be the same
    pattern.  Parts that are all empty mean no MTP.

    Parameters
    ----------
    text : str
        The ``--hybrid-layer-pattern`` value.

    Returns
    -------
    HybridPattern

    Raises
    ------
    InvalidValueError
        A symbol outside :data:`HYBRID_SYMBOLS` (``|`` in the main pattern only), attention
        beside MLA/DSA, MTP parts that differ, or a pattern over the length bound.

    Examples
    --------
    Megatron's own examples (hybrid_layer_allocation.py:221-231):

    >>> parse_hybrid_pattern("M*M*/MM/MM")
    HybridPattern(main='M*M*', mtp='MM', depths=2)
    >>> parse_hybrid_pattern("M-M-|M-M*-/MM/MM")
    HybridPattern(main='M-M-|M-M*-', mtp='MM', depths=2)
    >>> parse_hybrid_pattern("M*M*/")
    HybridPattern(main='M*M*', mtp=None, depths=0)

    References
    ----------
    Megatron-LM megatron/core/models/hybrid/hybrid_layer_allocation.py:200-298 at d98e8a64dd.
    """
    if not isinstance(text, str):
        raise InvalidValueError(f"--hybrid-layer-pattern must be a string, got {text!r:.40}")
    if len(text) > MAX_PATTERN_CHARS:
        raise InvalidValueError(f"--hybrid-layer-pattern longer than {MAX_PATTERN_CHARS} "
                                "characters")
    parts = text.split(_MTP)
    main = parts[0]
    if len(parts) == 1 or main:
        _check_symbols(main, "main", allow_pipe=True)
    mtp_parts = parts[1:]
    if all(p == "" for p in mtp_parts):     # no separator, or nothing after it
        return HybridPattern(main or (None if len(parts) > 1 else main), None, 0)
    first = mtp_parts[0]
    for i, part in enumerate(mtp_parts[1:], start=2):
        if part != first:
            raise InvalidValueError(f"--hybrid-layer-pattern: all MTP patterns must be "
                                    f"identical; pattern 1 is {first!r}, pattern {i} is "
                                    f"{part[:40]!r}")
    _check_symbols(first, "MTP", allow_pipe=False)
    return HybridPattern(main or None, first, len(mtp_parts))


def unified_hybrid_pattern(layer_pattern, override_pattern, mtp_override_pattern,
                           mtp_num_layers) -> Optional[str]:
    r"""The ``--hybrid-layer-pattern`` ``validate_args`` leaves: the deprecated
    ``--hybrid-override-pattern`` forwarded to it, and the legacy
    ``--mtp-hybrid-override-pattern`` joined on as ``mtp_num_layers`` depths.

    .. math:: \text{pattern} = \text{main} + (\texttt{/} + \text{mtp}) \times n_{MTP}
        \quad\text{(legacy MTP pattern, main without '/', } n_{MTP} > 0)

    Parameters
    ----------
    layer_pattern, override_pattern, mtp_override_pattern : str or None
        ``--hybrid-layer-pattern``, ``--hybrid-override-pattern``,
        ``--mtp-hybrid-override-pattern``.
    mtp_num_layers : int or None
        ``--mtp-num-layers`` [layers].

    Returns
    -------
    str or None
        The unified pattern (None: not a hybrid model).

    Raises
    ------
    InvalidValueError
        Both ``--hybrid-override-pattern`` and ``--hybrid-layer-pattern`` given (Megatron
        asserts against it).

    Examples
    --------
    The Nemotron 3 Super Bridge test's model (test_nemotronh_recipes_pretrain.py:74-77):

    >>> unified_hybrid_pattern("M*E", None, "*E", 2)
    'M*E/*E/*E'
    >>> unified_hybrid_pattern(None, "M*E", None, None)
    'M*E'

    References
    ----------
    Megatron-LM megatron/training/arguments.py:743-785 at d98e8a64dd.
    """
    if override_pattern is not None:
        if layer_pattern is not None:
            raise InvalidValueError("--hybrid-override-pattern and --hybrid-layer-pattern "
                                    "cannot both be given (--hybrid-override-pattern is "
                                    "deprecated; Megatron asserts)")
        layer_pattern = override_pattern
    if (mtp_override_pattern is not None and mtp_num_layers
            and (layer_pattern is None or _MTP not in layer_pattern)):
        if len(mtp_override_pattern) * mtp_num_layers > MAX_PATTERN_CHARS:
            raise InvalidValueError(f"--mtp-hybrid-override-pattern x --mtp-num-layers is "
                                    f"longer than {MAX_PATTERN_CHARS} characters")
        layer_pattern = (layer_pattern or "") + _MTP + _MTP.join(
            [mtp_override_pattern] * mtp_num_layers)
    return layer_pattern
