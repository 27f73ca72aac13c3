"""Bounded, validated conversions of the strings a reader is given (shared by the readers)."""

from __future__ import annotations

import os
import re
import stat
from fractions import Fraction
import json
import tomllib

from ..errors import InvalidValueError
from ..text import printable
from ..limits import LIMITS, MAX_INPUT_BYTES, MAX_NUMBER_CHARS, check_text
from ..values import flag

# Bounds on every size read from a user's command or file: memsym.limits' documented limits,
# generous for any real model, keeping arithmetic and loops bounded.
MAX_LAYERS = LIMITS["layers"].maximum
MAX_HIDDEN = LIMITS["hidden"].maximum
MAX_HEADS = LIMITS["heads"].maximum
MAX_VOCAB = LIMITS["vocab"].maximum
MAX_SEQ = LIMITS["sequence"].maximum
MAX_GPUS = LIMITS["gpus"].maximum
MAX_BATCH = LIMITS["global_batch"].maximum
MAX_BYTES_INPUT = MAX_INPUT_BYTES  # 1 MiB: the largest script, argument file or config read
MAX_ARGS = 100_000                 # words in one argument list
MAX_WORD = 100_000                 # characters in one word

_INT = re.compile(r"[+]?[0-9]{1,20}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,3})?")


def _parsed(text, what: str, kind: str, pattern, convert):
    """``text`` (not a bool) matched against ``pattern`` and converted, or an error naming
    ``what`` and the ``kind`` of number it must be."""
    if isinstance(text, bool):
        raise InvalidValueError(f"{what} must be {kind}, got {text!r}")
    s = str(text).strip()
    if not pattern.fullmatch(s):
        raise InvalidValueError(f"{what} must be {kind}, got {str(text)[:60]!r}")
    return convert(s)


def _within(value, what: str, lo, hi, shown=None):
    """``value`` if in [lo, hi]; else an error naming ``what`` and ``shown`` (the user's token,
    when given: ``1e400`` as written, not its 401 digits)."""
    if not lo <= value <= hi:
        raise InvalidValueError(f"{what} must be between {lo} and {hi}, got "
                                f"{value if shown is None else shown}")
    return value


def whole(text, what: str, lo: int = 1, hi: int = MAX_GPUS) -> int:
    """``text`` as a whole number in [lo, hi], or :class:`InvalidValueError` naming ``what``."""
    if isinstance(text, int) and not isinstance(text, bool):
        return _within(text, what, lo, hi)
    return _within(_parsed(text, what, "a whole number", _INT, int), what, lo, hi)


def fraction(text, what: str, lo=0, hi=1) -> Fraction:
    """``text`` (a decimal such as ``0.1`` or ``1e-2``) as an exact Fraction in [lo, hi]."""
    if isinstance(text, (int, Fraction)) and not isinstance(text, bool):
        value = Fraction(text)
    elif isinstance(text, float):
        value = Fraction(str(text))     # the decimal the user wrote, not the binary float
    else:
        return _within(decimal(text, what), what, lo, hi, str(text).strip())
    return _within(value, what, lo, hi)


def decimal(text, what: str) -> Fraction:
    """``text`` (a decimal such as ``-7.0`` or ``1e-2``) as an exact Fraction, unbounded.

    >>> decimal("1e3", "--x"), decimal("-7.5", "--x")
    (Fraction(1000, 1), Fraction(-15, 2))
    """
    return _parsed(text, what, "a number", _FLOAT, Fraction)


def recipe_flag(values, key: str, default=False):
    """A recipe's true/false field ``values[key]`` (``default`` when absent): a bool or None."""
    v = values.get(key, default)
    return v if v is None else flag(v, key)


def check_unpadded_vocab(rows: int, t: int, setting: str, why: str) -> None:
    """Refuse a vocabulary kept unpadded that tensor parallelism cannot split evenly.

    Megatron-core's vocab-parallel embedding and output layer give each of the ``t`` ranks
    ``rows / t`` rows (``divide`` asserts it), so a vocabulary that no padding rounds up to a
    multiple of ``t`` stops the launch.

    Parameters
    ----------
    rows : int
        The embedding's rows [tokens], as the framework builds them.
    t : int
        Tensor-parallel size [GPUs].
    setting : str
        The argument that sets ``t``, as the user spelled it.
    why : str
        What keeps the vocabulary unpadded, as the user spelled it.

    Raises
    ------
    InvalidValueError
        ``t`` does not divide ``rows``.

    References
    ----------
    Megatron-LM ``megatron/core/tensor_parallel/utils.py:118`` at ``d98e8a64dd``
    (``VocabUtility.vocab_range_from_global_vocab_size``: ``divide(global_vocab_size,
    world_size)``).

    Examples
    --------
    >>> check_unpadded_vocab(151936, 8, "--tp", "--padded-vocab-size")
    >>> check_unpadded_vocab(151935, 8, "--tp", "--padded-vocab-size")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: --tp 8 does not divide the vocabulary of 151935 rows, which --padded-vocab-size keeps unpadded: Megatron-core's vocab-parallel embedding splits it evenly
    """
    if rows % t:
        raise InvalidValueError(f"{setting} {t} does not divide the vocabulary of {rows} rows, "
                                f"which {why} keeps unpadded: Megatron-core's vocab-parallel "
                                "embedding splits it evenly")


def read_bounded(path, what: str, limit: int = MAX_BYTES_INPUT, errors: str = "strict") -> str:
    """The text of the regular file ``path``, refused above ``limit`` bytes (one line each).

    A directory, device, FIFO or socket is refused before it is opened (a FIFO would block
    the reader forever, ``/dev/zero`` never end); at most ``limit + 1`` bytes are read, so a
    file that grows after the size check is refused too.  UTF-8, with ``errors`` as for
    :meth:`bytes.decode` (``"replace"`` for shell scripts, whose comments may hold any byte).

    Examples
    --------
    >>> read_bounded("/nonexistent.toml", "torchtitan TOML")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: cannot read torchtitan TOML '/nonexistent.toml': No such file or directory
    """
    shown = printable(os.fsdecode(os.fspath(path)), 200)
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidValueError(f"{what} {shown!r} is not a regular file (a directory, "
                                    "device, FIFO or socket)")
        if info.st_size > limit:
            raise InvalidValueError(f"{what} larger than {limit} bytes")
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise InvalidValueError(f"cannot read {what} {shown!r}: {exc.strerror}") from None
    if len(raw) > limit:
        raise InvalidValueError(f"{what} larger than {limit} bytes")
    try:
        return raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise InvalidValueError(f"{what} {shown!r} is not UTF-8 text (byte {exc.start})") from None


def _refuse_constant(name):
    # json's hook for NaN, Infinity, -Infinity: not JSON (RFC 8259 §6) and never a size
    raise InvalidValueError(f"{name} is not a JSON number")


def _bounded_int(digits: str) -> int:
    # json's hook for integers: check_text has bounded their length; this keeps the bound if a
    # caller parses without it
    if len(digits) > MAX_NUMBER_CHARS:
        raise InvalidValueError(f"a number of {len(digits)} digits; at most {MAX_NUMBER_CHARS}")
    return int(digits)


def load_json(text: str, what: str):
    """``text`` parsed as JSON after :func:`check_text`; one :class:`InvalidValueError` line
    for every failure (NaN and Infinity refused, integers bounded).

    Examples
    --------
    >>> load_json('{"stage": 3}', "DeepSpeed config")
    {'stage': 3}
    >>> load_json('{"stage": NaN}', "DeepSpeed config")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: DeepSpeed config: NaN is not a JSON number
    """

    if len(text) > MAX_BYTES_INPUT * 4:
        raise InvalidValueError(f"{what} larger than {MAX_BYTES_INPUT * 4} characters")
    check_text(text, what, "json")
    try:
        return json.loads(text, parse_int=_bounded_int, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise InvalidValueError(f"{what} is not JSON: {exc.msg} at line {exc.lineno}") from None
    except InvalidValueError as exc:
        raise InvalidValueError(f"{what}: {exc}") from None
    except (RecursionError, ValueError, MemoryError) as exc:   # past the pre-scan: still one line
        raise InvalidValueError(f"{what} is not readable JSON ({type(exc).__name__})") from None


def load_toml(text: str, what: str) -> dict:
    """``text`` parsed as TOML after :func:`check_text`; one :class:`InvalidValueError` line
    for every failure.

    Examples
    --------
    >>> load_toml("[training]\\nseq_len = 8192\\n", "torchtitan TOML")
    {'training': {'seq_len': 8192}}
    """

    check_text(text, what, "toml")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:

        raise InvalidValueError(f"{what} is not TOML: {printable(str(exc), 160)}") from None
    except (RecursionError, ValueError, MemoryError) as exc:   # past the pre-scan: still one line
        raise InvalidValueError(f"{what} is not readable TOML ({type(exc).__name__})") from None
