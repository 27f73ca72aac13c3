"""Byte quantities as people write them: ``80GB`` (1e9), ``80GiB`` (2^30), or plain bytes.

GB and GiB differ by 7.4 %, and sources mix them (ZeRO uses 1e9; DeepSpeed prints "GB" but
computes GiB), so memsym accepts only unambiguous spellings and every output says which unit
it uses.  Nothing here evaluates the text: it is matched against a strict pattern.
"""

from __future__ import annotations

import math
import numbers
import re
from fractions import Fraction

from .errors import InvalidValueError
from .limits import MAX_DIGITS, check_limit
from .text import approx, short
from .values import exact

__all__ = ["parse_bytes", "parse_count", "parse_number", "UNITS", "format_bytes"]

#: Accepted unit spellings (case-sensitive: ``gb`` could be gigabits) and their size in bytes.
UNITS = {
    "B": 1,
    "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50,
}

# re.ASCII: \d must not match other scripts' digits ("٨٠GB" is not a size anyone types)
_PATTERN = re.compile(r"^(?P<num>\d+(?:\.\d+)?) ?(?P<unit>[A-Za-z]+)?$", re.ASCII)
#: Bare numbers below this many bytes are surely a forgotten unit ("80" meaning 80 GB).
_MIN_BARE = 2**20
_ACCEPTED = "a number with a unit (80GB, 80 GB, 80GiB, 1.5TB) or a whole number of bytes"


def parse_bytes(text) -> int:
    """The number of bytes a capacity string means (exact integer).

    Parameters
    ----------
    text : str or int
        ``"80GB"``, ``"80 GB"``, ``"80GiB"``, ``"141GB"``, ``"85899345920"`` (bytes).

    Raises
    ------
    InvalidValueError
        For ambiguous or malformed spellings: ``80`` (no unit, too small to be bytes),
        ``80gb`` (lower-case, could be gigabits), ``1e3TB`` (exponent), ``-80GB``, ``0GB``,
        and for text longer than :data:`memsym.limits.MAX_DIGITS` digits.
    LimitError
        Above 2^64 bytes (:data:`memsym.limits.LIMITS` ``"bytes"``), e.g. ``1e309`` bytes.

    Examples
    --------
    >>> parse_bytes("80GB"), parse_bytes("80GiB"), parse_bytes("1.5 TB")
    (80000000000, 85899345920, 1500000000000)
    """
    if isinstance(text, bool):
        raise InvalidValueError(f"memory size must be {_ACCEPTED}, got {text!r}")
    if isinstance(text, int):
        value = text
        unit = "B"
    else:
        raw = str(text).strip()
        # bounded before any conversion: int() of a 5,000-digit string raises ValueError
        match = _PATTERN.match(raw) if len(raw) <= MAX_DIGITS + 8 else None
        if not match:
            raise InvalidValueError(f"cannot read memory size {short(str(text))}: expected {_ACCEPTED}"
                                    + (f" (at most {MAX_DIGITS} digits)" if len(raw) > MAX_DIGITS else ""))
        unit = match.group("unit") or ""
        if unit and unit not in UNITS:
            upper = {u.lower(): u for u in UNITS}
            hint = ""
            if unit.lower() in upper:
                bits = unit[-1] == "b" and not unit.lower().endswith("ib")
                hint = (f" (units are case-sensitive: did you mean {upper[unit.lower()]}?"
                        + (f" '{unit}' could mean bits)" if bits else ")"))
            raise InvalidValueError(f"unknown unit {short(unit)} in {short(raw)}{hint}; accepted: "
                                    + ", ".join(UNITS))
        number = Fraction(match.group("num"))
        if not unit:
            if number.denominator != 1 or number < _MIN_BARE:
                raise InvalidValueError(
                    f"memory size {raw!r} is ambiguous: give a unit (e.g. {raw}GB or {raw}GiB); "
                    f"plain numbers are bytes and must be whole and >= {_MIN_BARE}")
            unit = "B"
        value = number * UNITS[unit]
        if value.denominator != 1:
            raise InvalidValueError(f"memory size {raw!r} is not a whole number of bytes")
        value = int(value)
    if value <= 0:
        raise InvalidValueError(f"memory size must be > 0 bytes, got {short(text)}")
    return check_limit("bytes", value, "memory size")


def format_bytes(value, unit: str = "GB", digits: int = 2) -> str:
    """``value`` bytes as ``"12.34 GB"`` in the named unit (GB = 1e9, GiB = 2^30).

    Examples
    --------
    >>> format_bytes(80 * 2**30, "GiB"), format_bytes(120 * 10**9)
    ('80.00 GiB', '120.00 GB')
    """
    return f"{float(value) / UNITS[unit]:.{digits}f} {unit}"


_COUNT = re.compile(r"^(?P<num>\d+(?:\.\d+)?)(?:[eE](?P<exp>\+?\d{1,2}))?(?P<suffix>[KMBT]?)$",
                    re.ASCII)
_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def parse_count(text, what: str = "parameter count", limit: str | None = None) -> int:
    """A whole count written as ``7000000000``, ``7e9``, ``7B``, ``1.5T`` or ``175B``.

    The text is matched against a strict pattern and converted exactly (no float), so
    ``1e15`` stays the integer 10^15.  Text of more than :data:`memsym.limits.MAX_DIGITS`
    characters is refused before conversion; ``limit`` names a :data:`memsym.limits.LIMITS`
    entry (``"parameters"``, ``"tokens"``) the count must not exceed.

    Examples
    --------
    >>> parse_count("7B"), parse_count("1.75e11"), parse_count("1e15")
    (7000000000, 175000000000, 1000000000000000)
    """
    if isinstance(text, bool):
        raise InvalidValueError(f"{what} must be a whole number, got {text!r}")
    if isinstance(text, int):
        value = Fraction(text)
    else:
        raw = str(text).strip()
        match = _COUNT.match(raw) if len(raw) <= MAX_DIGITS else None
        if not match and re.match(r"^\d+(?:\.\d+)?[eE]\+?\d{3,}[KMBT]?$", raw, re.ASCII):
            raise InvalidValueError(f"cannot read {what} {short(raw)}: exponents go up to e99 "
                                    "(memsym's sizes stop far below 1e99, see memsym.limits)")
        if not match:
            raise InvalidValueError(f"cannot read {what} {short(raw)}: expected a whole number "
                                    "such as 7000000000, 7e9, 7B or 1.5T"
                                    + (f" (at most {MAX_DIGITS} digits)" if len(raw) > MAX_DIGITS else ""))
        value = Fraction(match.group("num")) * 10 ** int(match.group("exp") or 0)
        value *= _SUFFIX[match.group("suffix")]
    if value.denominator != 1:
        raise InvalidValueError(f"{what} must be a whole number, got {short(text)}")
    if value <= 0:
        raise InvalidValueError(f"{what} must be > 0, got {short(text)}")
    return int(value) if limit is None else check_limit(limit, int(value), what)


_NUMBER = re.compile(r"^(?P<num>\d+(?:\.\d*)?|\.\d+)(?:[eE](?P<exp>[+-]?\d{1,4}))?$", re.ASCII)


def parse_number(text, what: str = "value", *, low=0, high=None, include_low: bool = True,
                 include_high: bool = True, limit: str | None = None) -> Fraction:
    """A decimal number typed by a user (``0.1``, ``1e-3``, ``45``) as an exact ``Fraction``.

    Matched against a strict pattern (no sign, no ``inf``/``nan``, at most
    :data:`memsym.limits.MAX_DIGITS` characters, exponents of at most four digits) and
    converted exactly, then checked against ``[low, high]``: ``--fragmentation 1e1000`` or
    ``--efficiency 1e-320`` are refused with the range instead of becoming ``inf`` or ``0``.

    Parameters
    ----------
    text : str
        The number as typed.
    what : str
        Its name (``"--fragmentation"``).
    low, high : number, optional
        The accepted range (``high=None``: no upper end other than ``limit``).
    include_low, include_high : bool
        Whether the ends are accepted.
    limit : str, optional
        A :data:`memsym.limits.LIMITS` key the value must not exceed.

    Examples
    --------
    >>> parse_number("0.1", "--fragmentation", high=1)
    Fraction(1, 10)
    >>> parse_number("1e1000", "--fragmentation", high=1)
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: --fragmentation must be in [0, 1], got 1e+1000
    """
    if isinstance(text, bool) or not isinstance(text, str):
        raise InvalidValueError(f"{what} must be given as text such as 0.1 or 1e-3, got "
                                f"{type(text).__name__}")
    raw = text.strip()
    match = _NUMBER.match(raw) if len(raw) <= MAX_DIGITS else None
    if not match:
        raise InvalidValueError(f"cannot read {what} {short(raw)}: expected a decimal number "
                                f"such as 0.1, 45 or 1e-3 (at most {MAX_DIGITS} characters)")
    num = match.group("num")
    value = Fraction(num if not num.endswith(".") else num[:-1]) * Fraction(10) ** int(match.group("exp") or 0)
    lo_ok = value > low or (include_low and value == low)
    hi_ok = high is None or value < high or (include_high and value == high)
    if not (lo_ok and hi_ok):
        left = "[" if include_low else "("
        right = "" if high is None else f", {high}{']' if include_high else ')'}"
        rng = f"{left}{low}{right}" if high is not None else (f">= {low}" if include_low else f"> {low}")
        raise InvalidValueError(f"{what} must be {'in ' if high is not None else ''}{rng}, "
                                f"got {approx(value)}")
    if limit is not None:
        check_limit(limit, value, what)

    exact(value, what)  # 1e-9999 is in (0, 1] but has 10^4 digits: refused (values.MAX_BITS)
    return value


def capacity_bytes(value) -> int:
    """A GPU memory capacity as whole bytes: a number of bytes > 0, or text such as ``"80GB"``
    (:func:`parse_bytes`).

    Examples
    --------
    >>> capacity_bytes("80GB"), capacity_bytes(2**30)
    (80000000000, 1073741824)
    """
    if isinstance(value, str):
        return parse_bytes(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0 \
            or not math.isfinite(value):
        raise InvalidValueError(f"GPU memory capacity must be a number of bytes > 0, got "
                                f"{value!r:.40}")
    return int(value)
