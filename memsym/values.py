"""Numbers at the boundary: user values become exact SymPy numbers, checked by domain.

Everything inside memsym is exact; a float given by a user is read through its decimal
``repr`` (``7.5e9`` becomes the integer 7500000000), never kept as a float.  NaN, infinity,
zero or negative sizes and fractional degrees are refused here with one clear line.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Integral, Rational as _PyRational
from typing import Mapping

import sympy as sp

from .errors import InvalidValueError
from .symbols import info, lookup

__all__ = ["exact", "as_values", "as_expr"]


def exact(value, what: str = "value") -> sp.Expr:
    """An exact SymPy number for ``value`` (int, Fraction, finite float, SymPy number).

    Parameters
    ----------
    value : int, float, fractions.Fraction or sympy.Number
        The number; floats are converted through their shortest decimal representation.
    what : str
        What the number is, for the error message.

    Examples
    --------
    >>> exact(7.5e9)
    7500000000
    >>> exact(0.1)
    1/10
    """
    if isinstance(value, bool):
        raise InvalidValueError(f"{what} must be a number, got {value!r}")
    if isinstance(value, sp.Basic):
        if not value.is_number:
            raise InvalidValueError(f"{what} must be a number, got the expression {value}")
        if value.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
            raise InvalidValueError(f"{what} must be finite, got {value}")
        if value.is_real is not True:
            raise InvalidValueError(f"{what} must be a real number, got {value}")
        if isinstance(value, sp.Float):  # read like a Python float: its shortest decimal
            frac = Fraction(repr(float(value)))
            return sp.Rational(frac.numerator, frac.denominator)
        return value
    if isinstance(value, Integral):
        return sp.Integer(int(value))
    if isinstance(value, _PyRational):
        return sp.Rational(int(value.numerator), int(value.denominator))
    if isinstance(value, float) or hasattr(value, "__float__") and not isinstance(value, str):
        x = float(value)
        if not math.isfinite(x):
            raise InvalidValueError(f"{what} must be finite, got {x}")
        frac = Fraction(repr(x))  # shortest decimal that round-trips: 0.1 -> 1/10
        return sp.Rational(frac.numerator, frac.denominator)
    raise InvalidValueError(f"{what} must be a number, got {type(value).__name__} {value!r:.60}")


def _check_domain(sym: sp.Symbol, val: sp.Expr) -> None:
    meta = info(sym)
    if not val.is_real:
        raise InvalidValueError(f"{sym.name} ({meta.meaning}) must be real, got {val}")
    if meta.domain == "nonnegative":
        if val < 0:
            raise InvalidValueError(f"{sym.name} ({meta.meaning}) must be >= 0, got {val}")
        return
    if val <= 0:
        raise InvalidValueError(f"{sym.name} ({meta.meaning}) must be > 0, got {val}")
    if meta.integer and not val.is_integer:
        raise InvalidValueError(f"{sym.name} ({meta.meaning}) must be a whole number, got {val}")


def as_values(values: Mapping | None = None, **kwargs) -> dict[sp.Symbol, sp.Expr]:
    """Validate a substitution: registered names (or symbols) to exact, in-domain numbers.

    Symbolic values (expressions in registered symbols) pass through unchanged, so a
    substitution may also rename or specialise, e.g. ``{b_hp: 2}`` or ``{t: 8}``.

    Examples
    --------
    >>> as_values({"d": 8}, t=2)
    {d: 8, t: 2}
    """
    if values is not None and not isinstance(values, Mapping):
        raise InvalidValueError(f"values must be a mapping of symbol names to numbers, got "
                                f"{type(values).__name__}")
    out: dict[sp.Symbol, sp.Expr] = {}
    for key, val in {**(dict(values) if values else {}), **kwargs}.items():
        sym = lookup(key)
        if isinstance(val, sp.Basic) and not val.is_number:
            out[sym] = as_expr(val, sym.name)
            continue
        num = exact(val, sym.name)
        _check_domain(sym, num)
        out[sym] = num
    return out


def as_expr(value, what: str = "value") -> sp.Expr:
    """A SymPy object for a library argument (number or expression); text is refused.

    ``sympy.sympify`` parses strings with ``eval``; memsym's functions take numbers and
    expressions only, so a string (say, Python code to import ``os``) is refused here, never
    parsed.

    Examples
    --------
    >>> as_expr(3), as_expr(0.5), as_expr(0.1)
    (3, 1/2, 1/10)
    >>> as_expr("1+1")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: value must be a number or a SymPy expression, got the text '1+1' (memsym never parses text)
    """
    if isinstance(value, (str, bytes, bytearray)):
        raise InvalidValueError(f"{what} must be a number or a SymPy expression, got the text "
                                f"{str(value)[:60]!r} (memsym never parses text)")
    try:
        expr = sp.sympify(value, strict=True)  # strict: no string parsing, no eval
    except sp.SympifyError:
        raise InvalidValueError(f"{what} must be a number or a SymPy expression, got "
                                f"{type(value).__name__}") from None
    # floats are read through their decimal repr here, once, so every term stays exact
    floats = expr.atoms(sp.Float)
    return expr.xreplace({x: exact(x, what) for x in floats}) if floats else expr
