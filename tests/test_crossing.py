"""``memsym.crossing``: the sign probe ``cached_max`` runs before SymPy's proof attempts.

The oracle is SymPy's own numeric evaluation (``xreplace`` of every symbol by an Integer):
:func:`exact_at` must give the same number at every point, and no number exactly where SymPy
gives none (``zoo``, ``nan``).
"""

from __future__ import annotations

import itertools

import pytest
import sympy as sp

from memsym.crossing import exact_at, takes_both_signs

m, c, p = (sp.Symbol(name, positive=True, integer=True) for name in "mcp")
x = sp.Symbol("x")

EXPRESSIONS = [
    m * (1 - 1 / c) + sp.Rational(7, 3) * p ** 2 - 5,                 # sums, products, powers
    sp.floor(m / sp.Max(1, sp.floor(m / p))) - sp.ceiling(c / 3),      # rounding, nested Max
    sp.Min(m * c, 2 * p + c * sp.floor(m / p) - 1) / (p * c),          # Min, division
    sp.Piecewise((c / p, sp.Eq(m / c, p / 2)), (4 * m - c, m < 2 * p), (m ** -2, True)),
    sp.Piecewise((m, sp.And(m <= p, sp.Not(sp.Eq(c, 1)))),
                 (-c, sp.And(sp.Or(c > p, m >= c), sp.Ne(m / c, p / 3))), (p, True)),
    (m - c) ** -3 + sp.Max(m, c, p) - sp.Min(m / 2, c / 3),            # a negative base
    sp.Piecewise((m, m >= 2 * c), (c, c <= p / 2), (p, True)),          # equal sides decide
]


@pytest.mark.parametrize("expr", EXPRESSIONS, ids=range(len(EXPRESSIONS)))
def test_exact_at_is_sympys_value_at_every_point(expr):
    at = exact_at(expr)
    syms = sorted(expr.free_symbols, key=lambda s: s.name)
    for values in itertools.product((1, 2, 3, 7, 1000), repeat=len(syms)):
        point = dict(zip(syms, map(sp.Integer, values)))
        want = expr.xreplace(point)
        try:
            num, den = at({s: (int(v), 1) for s, v in point.items()})
        except (ZeroDivisionError, LookupError):
            assert not want.is_Rational, (point, want)     # zoo or nan: no number there
            continue
        assert den > 0 and sp.Rational(num, den) == want, (point, want)


def test_no_number_where_sympy_has_none():
    at = exact_at(1 / (m - 1))
    with pytest.raises(ZeroDivisionError):
        at({m: (1, 1)})
    assert (1 / (m - 1)).xreplace({m: sp.Integer(1)}) is sp.zoo
    none_holds = sp.Piecewise((m, m > 2), (c, m < 1))
    with pytest.raises(LookupError):
        exact_at(none_holds)({m: (2, 1), c: (5, 1)})
    assert none_holds.xreplace({m: sp.Integer(2), c: sp.Integer(5)}) is sp.nan


@pytest.mark.parametrize("expr", [sp.sqrt(x), x + sp.Float("0.5"), sp.log(x), sp.Abs(x)])
def test_other_nodes_have_no_exact_function(expr):
    assert exact_at(expr) is None


def test_both_signs_by_hand():
    # 2m - 4m/c: 2 - 4 < 0 at m = c = 1, 2000 - 4 > 0 at c = 1000
    assert takes_both_signs(2 * m - 4 * m / c)
    assert not takes_both_signs(m)                     # positive everywhere
    assert not takes_both_signs(sp.Integer(3))         # no symbol: no claim
    # m (1 - 1/c) - 1 is -1 at c = 1 whatever m, and never positive at the points of 1
    # (m (1 - 1/1000) - 1 < 0 at m = 1); at the points of 2: 2 (1/2) - 1 = 0,
    # 1000 (1/2) - 1 > 0
    d = m * (1 - 1 / c) - 1
    assert not takes_both_signs(d) and takes_both_signs(d, (1, 2))
    # a value that is no number before both signs are seen: no claim
    assert not takes_both_signs(sp.sqrt(m) - 2)
    n = sp.Symbol("n", even=True)                      # 1 is not even: not probed
    assert not takes_both_signs(n - 3)
