"""``memsym.values.cached_max`` is ``sympy.Max`` (issue 29: the suite's and the search's time).

The oracle is SymPy's own ``Max`` (SymPy 1.14, the release pyproject.toml pins): the same
arguments kept, in the same order.  memsym only skips SymPy's ``factor_terms`` of a pair's
difference where the pair takes both signs (no proof of an order can exist there).
"""

from __future__ import annotations

import pytest
import sympy as sp
import sympy.functions.elementary.miscellaneous as minmax

from memsym.values import cached_max, cached_min

m, c, a, b = (sp.Symbol(name, positive=True) for name in "mcab")
n = sp.Symbol("n", integer=True, positive=True)

CASES = [
    (m, 2 * m, 4 * m / c),            # 2m > m proved; 2m and 4m/c cross (c = 1, c = 1000)
    (m, 2 * m),                       # one dominates: the larger alone
    (a * b + a * c, a * (b + c) / 2, a),
    (sp.Integer(3), m, sp.Integer(5)),   # numbers: the larger number kept beside m
    (m, sp.Max(m, c), a),             # a nested Max flattened
    (m * n, m * (n + 1) / 2, 4 * m / c),
    (a * (b + 1) - a * b, a, m),      # equal at every point, not provably so without expand
    (sp.Min(m, c), m, c),             # Min(m, c) <= m: dropped
    (sp.Integer(7),),
    (m * (1 - 1 / c), sp.Integer(1)),   # cross at m = c = 2 and m = 1000, c = 2, not at 1s
]


@pytest.mark.parametrize("args", CASES, ids=range(len(CASES)))
def test_cached_max_is_sympys_max(args):
    got, want = cached_max(*args), sp.Max(*args)
    assert got == want and type(got) is type(want)
    assert got.args == want.args      # the same arguments in the same order


@pytest.mark.parametrize("args", CASES + [(m, sp.Min(m, c), a), (sp.Max(m, c), m, c)],
                         ids=range(len(CASES) + 2))
def test_cached_min_is_sympys_min(args):
    got, want = cached_min(*args), sp.Min(*args)
    assert got == want and type(got) is type(want)
    assert got.args == want.args


def _factor_terms_calls(monkeypatch) -> list:
    """The expressions ``sympy.factor_terms`` is called on from now on (SymPy's ``Max`` calls
    it through its own module)."""
    calls, original = [], sp.factor_terms

    def counted(expr, *args, **kwargs):
        calls.append(expr)
        return original(expr, *args, **kwargs)

    monkeypatch.setattr(sp, "factor_terms", counted)
    monkeypatch.setattr(minmax, "factor_terms", counted)
    return calls


def _fresh():
    """Two positive symbols of no maximum built before (memsym remembers maxima and pairs)."""
    return sp.Dummy("m", positive=True), sp.Dummy("c", positive=True)


def test_a_crossing_pair_is_not_factored(monkeypatch):
    """Max(m, 2m, 4m/c): SymPy factors 2m - 4m/c looking for an order it cannot prove (it is
    positive at c = 1000, negative at c = 1); memsym keeps the pair without doing so, and gets
    SymPy's answer."""
    m, c = _fresh()
    calls = _factor_terms_calls(monkeypatch)
    args = (m, 2 * m, 4 * m / c)
    got = cached_max(*args)
    assert calls == []
    want = sp.Max(*args)
    assert calls, "SymPy's Max factors the crossing pair's difference"
    assert got == want == sp.Max(2 * m, 4 * m / c, evaluate=False)


def test_a_pair_crossing_only_away_from_1_is_not_factored(monkeypatch):
    """Max(m (1 - 1/c), 1): the difference m (1 - 1/c) - 1 is at most 0 where every symbol
    is 1 or 1000 with c = 1 or m = 1 (-1, and 1 - 1/1000 - 1), positive at m = 1000, c = 2
    (499): memsym keeps both without factoring it, as SymPy does after factoring."""
    m, c = _fresh()
    calls = _factor_terms_calls(monkeypatch)
    args = (m * (1 - 1 / c), sp.Integer(1))
    got = cached_max(*args)
    assert calls == []
    want = sp.Max(*args)
    assert calls, "SymPy's Max factors the pair's difference"
    assert got == want and set(got.args) == set(args)
