"""Checked whole-number sizes, Megatron-LM's padded vocabulary and an architecture's printable
name: the small helpers :mod:`memsym.model.architecture` resolves a model with (split from it so
that the Architecture record keeps room for its fields; re-exported there).
"""

from __future__ import annotations

import numbers

from ..errors import InvalidValueError
from ..text import printable, short

__all__ = ["pos_int", "padded_vocab_size", "inert_name"]


def pos_int(value, what: str, allow_zero: bool = False) -> int:
    """``value`` as a whole number > 0 (>= 0 with ``allow_zero``), refused in one line naming
    ``what`` otherwise.

    Examples
    --------
    >>> pos_int(8, "t"), pos_int(0, "e", allow_zero=True)
    (8, 0)
    >>> pos_int(True, "t")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: t must be a whole number, got bool True
    """
    # bool is an int subclass in Python: True must not pass as 1 layer.
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise InvalidValueError(f"{what} must be a whole number, got {type(value).__name__} "
                                    f"{short(value)}")
        value = int(value)
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidValueError(f"{what} must be {'>= 0' if allow_zero else '> 0'}, got "
                                f"{short(value)}")
    return value


def padded_vocab_size(vocab_size: int, t: int = 1, divisible_by: int = 128) -> int:
    """Megatron-LM's padded vocabulary: the next multiple of ``divisible_by * t``.

    .. math:: V_{\\mathrm{pad}} = \\left\\lceil \\frac{V}{128\\,t} \\right\\rceil 128\\,t

    Parameters
    ----------
    vocab_size : int
        Tokenizer vocabulary [tokens].
    t : int
        Tensor-parallel size [GPUs].
    divisible_by : int
        ``--make-vocab-size-divisible-by`` (default 128).

    References
    ----------
    Megatron-LM ``_vocab_size_with_padding`` (megatron/training/tokenizer); MEGATRON-ESTIMATORS.md §2.1.

    Examples
    --------
    >>> padded_vocab_size(50257, t=1), padded_vocab_size(50257, t=8), padded_vocab_size(32000, t=8)
    (50304, 51200, 32768)
    """
    vocab_size = pos_int(vocab_size, "vocab_size")
    mult = pos_int(divisible_by, "make_vocab_size_divisible_by") * pos_int(t, "t")
    return -(-vocab_size // mult) * mult


def inert_name(name) -> str:
    """``name`` as printable text of at most ~64 characters, unchanged if it already is one.

    :func:`printable` doubles every backslash, so applied twice it changes a name again; a
    name already inert (no hidden characters, short) is kept as it is, so that resolving a
    copy of a resolved model (``dataclasses.replace``) gives the same name: a config.json
    named ``C:\\models\\llama`` was refused by every estimate.

    Examples
    --------
    >>> inert_name("llama-7b"), inert_name("C:models") == "C:models"
    ('llama-7b', True)
    """
    text = name if isinstance(name, str) else str(name)
    plain = text.replace("\\", "")
    if len(text) <= 96 and printable(plain, 96) == plain:
        return text
    return printable(text, 64)
