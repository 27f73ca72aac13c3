"""Numbers at the boundary: user values become exact SymPy numbers, checked by domain.

Everything inside memsym is exact; a float given by a user is read through its decimal
``repr`` (``7.5e9`` becomes the integer 7500000000), never kept as a float.  NaN, infinity,
zero or negative sizes and fractional degrees are refused here with one clear line.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from numbers import Integral, Rational as _PyRational
from typing import Mapping
import sys

import sympy as sp
from sympy.core.operations import ShortCircuit

from .errors import InvalidValueError, LimitError
from .symbols import info, lookup
from .text import short
from .limits import check_limit
from .crossing import takes_both_signs

__all__ = ["exact", "whole", "positive", "positive_or_symbolic", "boolean", "flag", "as_values",
           "as_expr",
           "lazy_min", "cached_max", "cached_min", "holds_float"]


#: The most bits an exact number's numerator or denominator may have (about 1,233 digits):
#: far above every limit of :mod:`memsym.limits` and 10^300-sized thought experiments, and
#: it keeps each exact operation on user values bounded in time and memory.
MAX_BITS = 4096


def _bounded(num: sp.Expr, what: str) -> sp.Expr:
    if num.is_Rational and max(int(num.p).bit_length(), int(num.q).bit_length()) > MAX_BITS:
        raise LimitError(f"{what} = {short(num)} has more than {int(MAX_BITS * 0.30103)} digits; "
                         "memsym's sizes stop far below (see memsym.limits)", what, MAX_BITS)
    return num


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
            x = float(value)
            if not math.isfinite(x):  # Float('1e1000') is finite to SymPy, not as a float
                raise InvalidValueError(f"{what} must be within float range, got {short(value)}")
            frac = Fraction(repr(x))
            return sp.Rational(frac.numerator, frac.denominator)
        return _bounded(value, what)
    if isinstance(value, Integral):
        return _bounded(sp.Integer(int(value)), what)
    if isinstance(value, _PyRational):
        return _bounded(sp.Rational(int(value.numerator), int(value.denominator)), what)
    if isinstance(value, float) or hasattr(value, "__float__") and not isinstance(value, str):
        x = float(value)
        if not math.isfinite(x):
            raise InvalidValueError(f"{what} must be finite, got {x}")
        frac = Fraction(repr(x))  # shortest decimal that round-trips: 0.1 -> 1/10
        return sp.Rational(frac.numerator, frac.denominator)
    raise InvalidValueError(f"{what} must be a number, got {type(value).__name__} {value!r:.60}")


def _limit(value, what, limit):
    if limit is None:
        return
    if isinstance(limit, str):
        check_limit(limit, value, what)
    elif value > limit:
        raise LimitError(f"{what} = {short(value)} is above the limit {limit}", what, limit)


def whole(value, what: str = "value", *, minimum: int = 1, limit=None,
          integral_floats: bool = False) -> int:
    """``value`` as a Python ``int`` if it is a whole number >= ``minimum`` (and within ``limit``).

    The one validator of counts, sizes and degrees from the Python API.  ``True``/``False``
    are refused (a bool is not a count); numpy and SymPy integers are accepted; a float is
    accepted only with ``integral_floats=True`` and only when finite and integral (``8.0``);
    text is refused, never parsed.

    Parameters
    ----------
    value : int, numpy integer, sympy.Integer (float if ``integral_floats``)
        The number.
    what : str
        Its name in the error message (``"num_layers"``, ``"--tp"``).
    minimum : int
        The smallest accepted value (1 for sizes and degrees, 0 for counts that may be absent).
    limit : str or int, optional
        A key of :data:`memsym.limits.LIMITS` (``"layers"``, ``"gpus"``, ...) or a number;
        above it, :class:`~memsym.errors.LimitError` names the limit.

    Examples
    --------
    >>> import numpy as np
    >>> whole(np.int64(8), "t"), whole(8.0, "t", integral_floats=True)
    (8, 8)
    >>> whole(True, "t")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: t must be a whole number >= 1, got True (a bool)
    >>> whole(10**7, "num_layers", limit="layers")
    Traceback (most recent call last):
    ...
    memsym.errors.LimitError: num_layers = 10000000 is above memsym's limit of 10^6 layers (layers: ~8000x the deepest published LLM (126 layers); per-layer and per-stage loops stay short)
    """
    accepted = f"{what} must be a whole number >= {minimum}"
    if isinstance(value, bool) or type(value).__name__ in ("bool_", "bool") \
            and type(value).__module__ == "numpy":
        raise InvalidValueError(f"{accepted}, got {value!r} (a bool)")
    if isinstance(value, Integral):
        n = int(value)
    elif isinstance(value, sp.Integer):
        n = int(value)
    elif isinstance(value, (str, bytes, bytearray)):
        raise InvalidValueError(f"{accepted}, got the text {short(str(value))} "
                                "(memsym never parses text)")
    elif isinstance(value, float) or (not isinstance(value, sp.Basic)
                                      and hasattr(value, "__float__")):
        x = float(value)
        if not integral_floats:
            raise InvalidValueError(f"{accepted}, got the float {x!r} (give an int)")
        if not math.isfinite(x) or not x.is_integer():
            raise InvalidValueError(f"{accepted}, got {x!r}")
        n = int(Fraction(x))
    else:
        raise InvalidValueError(f"{accepted}, got {type(value).__name__} {short(value)}")
    if n < minimum:
        raise InvalidValueError(f"{accepted}, got {short(n)}")
    _limit(n, what, limit)
    return n


def positive(value, what: str = "value", *, limit=None, allow_zero: bool = False) -> sp.Rational:
    """``value`` as an exact, finite SymPy number > 0 (>= 0 with ``allow_zero``).

    Floats are read through their shortest decimal (``0.1`` is ``1/10``); NaN, infinity,
    bools and text are refused.

    Examples
    --------
    >>> positive(0.45, "efficiency"), positive(2, "price", allow_zero=True)
    (9/20, 2)
    >>> positive(float("inf"), "tflops")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: tflops must be finite, got inf
    """
    num = exact(value, what)
    if allow_zero and num < 0:
        raise InvalidValueError(f"{what} must be >= 0, got {short(num)}")
    if not allow_zero and not num > 0:
        raise InvalidValueError(f"{what} must be > 0, got {short(num)}")
    _limit(num, what, limit)
    return num


def positive_or_symbolic(value, what: str = "value", *, limit=None,
                         allow_zero: bool = False) -> sp.Expr:
    """A formula function's argument: a symbol or a symbolic expression passes through
    (:func:`as_expr`); a number must be exact, finite, > 0 (>= 0 with ``allow_zero``) and
    within ``limit`` (:func:`positive`; issue 15: refuse at the entry, naming the input,
    instead of returning ``inf`` later).

    Examples
    --------
    >>> positive_or_symbolic(sp.Symbol("G"), "gpus"), positive_or_symbolic(8, "gpus", limit="gpus")
    (G, 8)
    """
    if isinstance(value, sp.Basic) and not value.is_number:
        return as_expr(value, what)
    return positive(value, what, limit=limit, allow_zero=allow_zero)


def boolean(value, what: str = "flag") -> bool:
    """``value`` if it is ``True`` or ``False`` (numpy bools too); anything else is refused.

    ``"false"`` and ``"no"`` are truthy strings: taken as flags they would switch a feature on.
    A switch read into a Python ``bool`` (the search's keyword arguments, which a numpy grid
    may fill): unlike :func:`flag`, which checks a switch kept as given, a numpy bool is
    converted, and the refusal speaks Python's ``True`` / ``False``.

    Examples
    --------
    >>> boolean(False, "flash_attention")
    False
    >>> boolean("false", "flash_attention")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: flash_attention must be True or False, got str 'false'
    """
    if isinstance(value, bool):
        return value

    np = sys.modules.get("numpy")  # numpy's bool is not a Python bool; never import it here
    if np is not None and isinstance(value, np.bool_):
        return bool(value)
    raise InvalidValueError(f"{what} must be True or False, got {type(value).__name__} {short(value)}")


def flag(value, what: str) -> bool:
    """``value`` when it is a real boolean, else a refusal naming ``what``.

    A switch kept as given: a job record's field (:mod:`memsym.job_checks`), a DeepSpeed
    config's or a Megatron-Bridge recipe's true / false (:mod:`memsym.readers`).  Unlike
    :func:`boolean` no numpy bool is taken (the record would keep it, not a ``bool``), and the
    refusal speaks the files' ``true`` / ``false``.

    Examples
    --------
    >>> flag(True, "dropout")
    True
    >>> flag("false", "dropout")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: dropout must be true or false, got 'false'
    """
    # a string such as "false" is truthy in Python, so only real booleans are accepted
    if not isinstance(value, bool):
        raise InvalidValueError(f"{what} must be true or false, got {value!r:.40}")
    return value


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


def _integral(expr: sp.Expr) -> bool:
    """Whether ``expr`` is a whole number for every admissible value of its symbols: an
    integer, a registered whole-number symbol, or sums, products and non-negative integer
    powers of those (``2*t``, ``t*p + 1``; not ``t/3``, not ``h/a``)."""
    if expr.is_Integer:
        return True
    if expr.is_Symbol:
        try:
            return info(expr).integer and info(expr).symbol is expr
        except Exception:  # an unregistered symbol: nothing is known about it
            return False
    if expr.is_Add or expr.is_Mul:
        return all(_integral(arg) for arg in expr.args)
    if expr.is_Pow:
        return expr.exp.is_Integer and expr.exp >= 0 and _integral(expr.base)
    return False


def _check_symbolic_domain(sym: sp.Symbol, expr: sp.Expr) -> None:
    """A symbolic substitution must keep ``sym`` in its domain for every admissible value of
    the expression's own symbols: ``N = -t`` (negative), ``d = t/3`` (fractional), ``d = t - 1``
    (0 at t = 1, where 1/d is ``zoo``) are refused, ``d = 2*t`` is accepted."""
    meta = info(sym)
    shown = short(expr)
    if expr.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
        raise InvalidValueError(f"{sym.name} ({meta.meaning}) must be finite, got {shown}")
    if expr.is_real is False:
        raise InvalidValueError(f"{sym.name} ({meta.meaning}) must be real, got {shown}")
    if meta.domain == "nonnegative":
        if expr.is_nonnegative is not True:
            raise InvalidValueError(f"{sym.name} ({meta.meaning}) must be >= 0, but {sym.name} = "
                                    f"{shown} can be negative")
        return
    if meta.integer:
        if not _integral(expr):
            raise InvalidValueError(f"{sym.name} ({meta.meaning}) must be a whole number, but "
                                    f"{sym.name} = {shown} can be fractional (give a sum or "
                                    "product of whole-number symbols)")
        # the smallest value of an integer polynomial in symbols >= 1: set every symbol to 1
        # and require positive coefficients (then it is increasing in each symbol)
        poly_ok = all(c > 0 for c in sp.Poly(expr, *sorted(expr.free_symbols, key=str)).coeffs())
        if not poly_ok or expr.xreplace({x: 1 for x in expr.free_symbols}) < 1:
            raise InvalidValueError(f"{sym.name} ({meta.meaning}) must be >= 1, but {sym.name} = "
                                    f"{shown} can be below 1")
        return
    if expr.is_positive is not True:
        raise InvalidValueError(f"{sym.name} ({meta.meaning}) must be > 0, but {sym.name} = "
                                f"{shown} can be zero or negative")


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
            expr = as_expr(val, sym.name)
            _check_symbolic_domain(sym, expr)
            out[sym] = expr
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
    if not holds_float(expr):
        return expr
    floats = expr.atoms(sp.Float)
    return expr.xreplace({x: exact(x, what) for x in floats}) if floats else expr


@functools.lru_cache(maxsize=1 << 16)
def holds_float(expr: sp.Basic) -> bool:
    """Whether ``expr`` holds a SymPy Float anywhere in its tree.

    Remembered per subtree: a Term is built from subexpressions already checked (every
    :class:`memsym.term.Term` checks its expression, :func:`as_expr`), so checking a new
    sum or product visits only its new nodes, where ``expr.atoms(Float)`` walks the whole
    tree again each time (a cold search builds thousands of Terms).  Exact: SymPy's ``==``
    tells a Float from an equal Integer or Rational (``Float(2.0) != 2``), so a remembered
    ``2*x`` never stands for ``2.0*x``.

    Examples
    --------
    >>> from sympy import Float, Symbol
    >>> x = Symbol("x")
    >>> holds_float(2 * x), holds_float(Float(2.0) * x), holds_float(x + Float(0.5))
    (False, True, True)
    """
    if isinstance(expr, sp.Float):
        return True
    return any(holds_float(arg) for arg in expr.args)


def lazy_min(*args) -> sp.Expr:
    """``Min(*args)``: evaluated when every argument is a number; for symbols left as written,
    since sympy's ordering proof for symbolic arguments (``Min._find_localzeros``) costs
    milliseconds per call and the search builds hundreds of such caps (substitution
    evaluates them).

    Examples
    --------
    >>> from sympy import Symbol
    >>> lazy_min(4, 7), lazy_min(Symbol("m"), 22)
    (4, Min(22, m))
    """
    args = [as_expr(a) for a in args]
    if all(a.is_number for a in args):
        return sp.Min(*args)
    return sp.Min(*args, evaluate=False)


@functools.lru_cache(maxsize=1024)
def cached_max(*args: sp.Expr) -> sp.Expr:
    """``sympy.Max(*args)``, built once per distinct argument tuple.

    Same result as ``Max``: sympy's proof of which symbolic argument is larger
    (``Max._find_localzeros``, a ``factor_terms`` of each difference) costs tens of
    milliseconds on a whole phase's transients, and the search and the job commands build
    the same maxima for every row and option (issue 29).  Where every two arguments are
    ordered one way at one point and the other way at another
    (:func:`memsym.crossing.takes_both_signs`), no proof exists and ``Max`` keeps them all:
    that ``Max`` is built without looking for one
    (``evaluate=False`` orders the same arguments the same way).  Otherwise :func:`_built`
    builds SymPy's ``Max`` skipping the proof attempts of the pairs that cross.

    Examples
    --------
    >>> from sympy import Symbol
    >>> m, c = Symbol("m", positive=True), Symbol("c", positive=True)
    >>> cached_max(m, 2 * m), cached_max(m, 2 * m) is cached_max(m, 2 * m)
    (2*m, True)
    >>> cached_max(m, 4 * m / c) == sp.Max(m, 4 * m / c)   # c < 4 and c > 4: both kept
    True
    """
    return _extremum(sp.Max, args)


@functools.lru_cache(maxsize=256)
def cached_min(*args: sp.Expr) -> sp.Expr:
    """``sympy.Min(*args)``, built once per distinct argument tuple as :func:`cached_max`
    builds ``Max`` (the minimum of a largest-value closed form's branches).

    Examples
    --------
    >>> from sympy import Symbol
    >>> m, c = Symbol("m", positive=True), Symbol("c", positive=True)
    >>> cached_min(m, 2 * m), cached_min(m, 4 * m / c) == sp.Min(m, 4 * m / c)
    (m, True)
    """
    return _extremum(sp.Min, args)


def _extremum(cls, args: tuple) -> sp.Expr:
    """``cls(*args)`` (``Max`` or ``Min``) as :func:`cached_max` describes."""
    args = tuple(as_expr(a) for a in args)
    plain = all(not a.is_number and not isinstance(a, (sp.Min, sp.Max)) for a in args)
    if plain and len(set(args)) == len(args) > 1 and all(
            takes_both_signs(a - b) for i, a in enumerate(args) for b in args[i + 1:]):
        return cls(*args, evaluate=False)
    return _built(cls, args)


def _built(cls, args: tuple) -> sp.Expr:
    """``cls(*args)`` (``sympy.Max`` or ``Min``) built as SymPy 1.14 builds it
    (``MinMaxBase.__new__``: the argument filter, the collapse of nested extrema, then each
    argument kept unless one already kept is proved at least as large (as small for ``Min``),
    ``_find_localzeros``), with the steps skipped that cannot succeed: a pair's proof
    attempt (``_is_connected``: SymPy's comparisons, then those of the ``factor_terms`` of its
    difference) when the pair is ordered one way at one point and the other way at another
    (:func:`_connected`), where no proof exists and SymPy keeps both after tens of
    milliseconds.  The same arguments are kept, in the same order, so the result is the same
    expression."""
    try:
        kept = cls._collapse_arguments(frozenset(cls._new_args_filter(args)))
    except ShortCircuit:
        return cls.zero
    zeros: set = set()
    for v in kept:
        new = True
        for z in list(zeros):
            if id(v) == id(z):
                new = False
                continue
            con = _connected(v, z)
            if con:
                new = False
                if con is True or con == cls:
                    zeros.remove(z)
                    zeros.add(v)
        if new:
            zeros.add(v)
    return cls(*zeros, evaluate=False)


@functools.lru_cache(maxsize=4096)
def _connected(x: sp.Expr, y: sp.Expr):
    """SymPy 1.14's ``MinMaxBase._is_connected(x, y)`` (``True``, ``Max``, ``Min`` or ``False``:
    which of the two is provably the larger), returning ``False`` where
    :func:`memsym.crossing.takes_both_signs` shows the difference takes both signs: at points
    of 1 and 1000 before SymPy's comparisons, of 2 and 1000 too before its ``factor_terms``
    pass (each an assumption query, together tens of milliseconds).  Every point satisfies
    the symbols' assumptions, which are all SymPy's proofs use: where the difference takes
    both signs none exists, and SymPy's answer is ``False`` too.  Remembered per ordered
    pair: a pure function of the two expressions, and the maxima of a search's or a job's
    stages share many of their pairs."""
    for attempt in range(2):
        if x == y:
            return True
        if attempt == 0 and takes_both_signs(x - y):
            return False
        larger, smaller = sp.Max, sp.Min
        for op in "><":
            for _ in range(2):
                try:
                    holds = x >= y if op == ">" else x <= y
                except TypeError:
                    return False  # non-real argument
                if not holds.is_Relational:
                    return larger if holds else smaller
                larger, smaller = smaller, larger
                x, y = y, x
            x, y = y, x
        if attempt == 0 and takes_both_signs(x - y, (1, 2)):   # before factoring: more points
            return False
        x, y = sp.factor_terms(x - y), sp.S.Zero
    return False
