"""Bounded, validated conversions of the strings a reader is given (shared by the readers)."""

from __future__ import annotations

import re
from fractions import Fraction

from ..errors import InvalidValueError

# Bounds on every size read from a user's command or file (the lead moves them to a shared
# limits module).  They are generous for any real model, and keep arithmetic and loops bounded.
MAX_LAYERS = 10**6
MAX_HIDDEN = 2**24
MAX_HEADS = 2**20
MAX_VOCAB = 2**31
MAX_SEQ = 2**31
MAX_GPUS = 2**40
MAX_BATCH = 2**40
MAX_BYTES_INPUT = 1 << 20          # 1 MiB: the largest script, argument file or config read
MAX_ARGS = 100_000                 # words in one argument list
MAX_WORD = 100_000                 # characters in one word

_INT = re.compile(r"[+]?[0-9]{1,20}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,3})?")


def whole(text, what: str, lo: int = 1, hi: int = MAX_GPUS) -> int:
    """``text`` as a whole number in [lo, hi], or :class:`InvalidValueError` naming ``what``."""
    if isinstance(text, bool):
        raise InvalidValueError(f"{what} must be a whole number, got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        s = str(text).strip()
        if not _INT.fullmatch(s):
            raise InvalidValueError(f"{what} must be a whole number, got {str(text)[:60]!r}")
        value = int(s)
    if not lo <= value <= hi:
        raise InvalidValueError(f"{what} must be between {lo} and {hi}, got {value}")
    return value


def fraction(text, what: str, lo=0, hi=1) -> Fraction:
    """``text`` (a decimal such as ``0.1`` or ``1e-2``) as an exact Fraction in [lo, hi]."""
    if isinstance(text, bool):
        raise InvalidValueError(f"{what} must be a number, got {text!r}")
    if isinstance(text, (int, Fraction)):
        value = Fraction(text)
    elif isinstance(text, float):
        value = Fraction(str(text))     # the decimal the user wrote, not the binary float
    else:
        s = str(text).strip()
        if not _FLOAT.fullmatch(s):
            raise InvalidValueError(f"{what} must be a number, got {str(text)[:60]!r}")
        value = Fraction(s)
    if not lo <= value <= hi:
        raise InvalidValueError(f"{what} must be between {lo} and {hi}, got {value}")
    return value
