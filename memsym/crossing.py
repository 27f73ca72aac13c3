"""Whether a symbolic difference takes both signs: the probe :func:`memsym.values.cached_max`
runs before SymPy's proof attempts (issue 29).

Where the difference of two arguments of a ``Max`` is exactly positive at one point and
exactly negative at another (each symbol at a value its assumptions allow), no sound proof
can order the two and SymPy keeps both; the probe lets ``cached_max`` skip the proof attempt
(a ``factor_terms`` and its comparisons, tens of milliseconds on a phase's transients).  Each
point's value is computed exactly on Python integers (:func:`exact_at`) where the expression
is made of the nodes a memory total holds, and by SymPy's substitution otherwise: the same
number either way, without rebuilding the whole expression at every point.
"""

from __future__ import annotations

import functools
import math

import sympy as sp

__all__ = ["takes_both_signs", "exact_at"]


@functools.lru_cache(maxsize=4096)
def _takes(sym: sp.Symbol, value: int) -> bool:
    # whether the integer `value` satisfies every assumption of `sym` (positive, integer, ...)
    num = sp.Integer(value)
    return all(getattr(num, f"is_{key}", None) == held for key, held in sym.assumptions0.items())


@functools.lru_cache(maxsize=4096)
def takes_both_signs(diff: sp.Expr, lows: tuple = (1,)) -> bool:
    """Whether ``diff`` is exactly positive at one point and exactly negative at another.

    For each value ``low`` of ``lows`` in turn, each point gives every symbol ``low`` or 1000
    (where its assumptions allow both): all at ``low``, then each symbol alone at 1000, then
    each alone at ``low`` with the others at 1000.  Where both signs are seen no sound proof
    orders the two sides ``diff`` is the difference of, and SymPy's ``Max`` keeps both.
    False where that is not shown (a proof may exist), and where a point's value is not a
    rational number (a root, an undefined function) before both signs are seen among the
    points of its ``low``.  Remembered per expression.

    Parameters
    ----------
    diff : sympy.Expr
        The difference of two candidate maxima [bytes].
    lows : tuple of int
        The low values of the points, in turn [1]: 1, then 2 where a term vanishes at 1
        (``1 - 1/t``).

    Returns
    -------
    bool

    Examples
    --------
    >>> m, c = sp.Symbol("m", positive=True), sp.Symbol("c", positive=True)
    >>> takes_both_signs(2 * m - 4 * m / c), takes_both_signs(2 * m - m)
    (True, False)
    >>> takes_both_signs(m * (1 - 1 / c) - 1), takes_both_signs(m * (1 - 1 / c) - 1, (1, 2))
    (False, True)

    References
    ----------
    SymPy 1.14 ``MinMaxBase._find_localzeros`` and ``_is_connected``
    (sympy/functions/elementary/miscellaneous.py): the proof attempt this probe skips.
    """
    signs: set = set()
    for low in lows:
        seen = _signs(diff, low)
        if seen is None:
            return False
        signs |= seen
        if len(signs) == 2:
            return True
    return False


@functools.lru_cache(maxsize=4096)
def _signs(diff: sp.Expr, low: int):
    """The signs (``value > 0``) of ``diff``'s nonzero values at the points of ``low``
    (:func:`takes_both_signs`), stopping at the second; None at a value that is not a
    rational number before then."""
    syms = sorted(diff.free_symbols, key=lambda x: x.name)
    if not syms or not all(_takes(x, low) and _takes(x, 1000) for x in syms):
        return frozenset()
    lows, thousands = dict.fromkeys(syms, sp.Integer(low)), dict.fromkeys(syms, sp.Integer(1000))
    points = [lows, *({**lows, x: sp.Integer(1000)} for x in syms),
              *({**thousands, x: sp.Integer(low)} for x in syms)]
    at = exact_at(diff)
    signs = set()
    for point in points:
        value = _at_point(diff, at, point)
        if not value.is_Rational:   # not a plain number there (a root, a function): no claim
            return None
        if value != 0:
            signs.add(value > 0)
        if len(signs) == 2:
            break
    return frozenset(signs)


def _at_point(diff: sp.Expr, at, point: dict) -> sp.Expr:
    """``diff.xreplace(point)``: from ``at`` (:func:`exact_at`) where it gives a number there,
    else (no function, or a division by zero, a Piecewise without a true condition) SymPy's."""
    if at is not None:
        try:
            num, den = at({x: (int(v), 1) for x, v in point.items()})
        except (ZeroDivisionError, LookupError):
            pass
        else:
            return sp.Rational(num, den)
    return diff.xreplace(point)


def exact_at(expr: sp.Basic):
    r"""``expr`` as a function of a point, exact on Python integers; None where it cannot be.

    The function takes each symbol of ``expr`` to ``(value, 1)`` and returns ``expr``'s
    exact value there as ``(numerator, denominator)``, the denominator positive and the pair
    not reduced (no gcd on the way: ``sympy.Rational`` reduces it), built once for every
    point.  It evaluates numbers, symbols, sums, products, whole powers, ``floor``,
    ``ceiling``, ``Max``, ``Min``, ``Piecewise`` and the comparisons and logic of its
    conditions, each as SymPy evaluates it on numbers, and raises ZeroDivisionError or
    LookupError (a Piecewise without a true condition) at a point where SymPy's value is
    not a number.  None where ``expr`` holds another node (a Float, a root, another
    function).

    .. math:: \frac{a}{b} + \frac{c}{d} = \frac{a d + c b}{b d}, \qquad
        \frac{a}{b} \cdot \frac{c}{d} = \frac{a c}{b d}

    Parameters
    ----------
    expr : sympy.Basic
        The expression [any unit].

    Returns
    -------
    callable or None

    Examples
    --------
    >>> x, y = sp.Symbol("x"), sp.Symbol("y")
    >>> at = exact_at(x / 3 + sp.floor(y / 2) - sp.Max(x, y))
    >>> sp.Rational(*at({x: (4, 1), y: (7, 1)}))
    -8/3
    >>> exact_at(sp.sqrt(x)) is None
    True

    References
    ----------
    SymPy 1.14's numeric evaluation of ``Add``, ``Mul``, ``Pow``, ``floor``, ``ceiling``,
    ``Max``, ``Min`` and ``Piecewise`` on rational arguments, which this reproduces.
    """
    try:
        return _compiled(expr)
    except TypeError:
        return None


def _add(x, y):
    return (x[0] + y[0], x[1]) if x[1] == y[1] else (x[0] * y[1] + y[0] * x[1], x[1] * y[1])


def _less(x, y):
    return x[0] * y[1] < y[0] * x[1]


def _power(x, k: int):
    if k < 0:
        if x[0] == 0:
            raise ZeroDivisionError("a negative power of 0")
        x, k = ((x[1], x[0]) if x[0] > 0 else (-x[1], -x[0])), -k
    return x[0] ** k, x[1] ** k


_FOLDS = {sp.Add: lambda xs: functools.reduce(_add, xs),
          sp.Mul: lambda xs: (math.prod(x[0] for x in xs), math.prod(x[1] for x in xs)),
          sp.Max: lambda xs: functools.reduce(lambda x, y: y if _less(x, y) else x, xs),
          sp.Min: lambda xs: functools.reduce(lambda x, y: y if _less(y, x) else x, xs),
          sp.And: all, sp.Or: any}
_COMPARE = {sp.StrictLessThan: _less, sp.LessThan: lambda x, y: not _less(y, x),
            sp.StrictGreaterThan: lambda x, y: _less(y, x),
            sp.GreaterThan: lambda x, y: not _less(x, y),
            sp.Equality: lambda x, y: x[0] * y[1] == y[0] * x[1],
            sp.Unequality: lambda x, y: x[0] * y[1] != y[0] * x[1]}
_ROUND = {sp.floor: lambda x: (x[0] // x[1], 1), sp.ceiling: lambda x: (-(-x[0] // x[1]), 1)}


def _compiled(node: sp.Basic):
    """:func:`exact_at`'s function of ``node``; TypeError for a node it does not take."""
    if node.is_Symbol:
        return lambda pt: pt[node]
    if node is sp.true or node is sp.false or node.is_Rational:   # singletons: no __eq__
        value = bool(node) if node.is_Boolean else (int(node.p), int(node.q))
        return lambda pt: value
    kind = type(node)
    if kind is sp.Piecewise:     # the first pair whose condition holds, as SymPy picks it
        pairs = [(_compiled(pair.expr), _compiled(pair.cond)) for pair in node.args]
        return lambda pt: _first_holding(pairs, pt)
    parts = [_compiled(arg) for arg in node.args]
    if kind in _FOLDS:
        fold = _FOLDS[kind]
        return lambda pt: fold([part(pt) for part in parts])
    if kind is sp.Pow and node.exp.is_Integer:
        base, exp = parts[0], int(node.exp)
        return lambda pt: _power(base(pt), exp)
    if kind in _ROUND or kind is sp.Not:
        one, inner = _ROUND.get(kind, lambda truth: not truth), parts[0]
        return lambda pt: one(inner(pt))
    if kind in _COMPARE:
        compare, (left, right) = _COMPARE[kind], parts
        return lambda pt: compare(left(pt), right(pt))
    raise TypeError(f"no exact value for {kind.__name__}")


def _first_holding(pairs, pt):
    for value, holds in pairs:
        if holds(pt):
            return value(pt)
    raise LookupError("no condition of the Piecewise holds")
