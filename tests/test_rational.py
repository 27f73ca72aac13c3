"""memsym.rational against SymPy's own answers on random expressions of the shapes memory
totals take (sums of rational multiples of monomials over monomial denominators).

Oracle: ``sympy.solve``, ``sympy.cancel`` and ``sympy.limit`` on the same expression; a seeded
generator, so a failure names its case.
"""

from __future__ import annotations

import random

import pytest
import sympy as sp

from memsym.rational import is_zero, limit_at_infinity, linear_root, plain_cancel

N, C, d, t, p, s, b = sp.symbols("N C d t p s b", positive=True)
_SYMBOLS = (N, t, p, s, b)


def _monomial(rng, with_d: bool, powers=(1, 1, 2, -1)):
    coeff = sp.Rational(rng.randint(1, 40), rng.choice((1, 2, 3, 8)))
    term = coeff
    for sym in rng.sample(_SYMBOLS, rng.randint(0, 3)):
        term *= sym ** rng.choice(powers)
    return term / d if with_d else term


def _total(rng):
    """A memory-total-shaped sum: terms with and without 1/d, minus the capacity C."""
    terms = [_monomial(rng, rng.random() < 0.5) for _ in range(rng.randint(2, 6))]
    return sp.Add(*terms, _monomial(rng, True)) - C


@pytest.mark.parametrize("seed", range(24))
def test_linear_root_is_sympys_root(seed):
    expr = _total(random.Random(seed))
    got = linear_root(expr, d)
    roots = sp.solve(sp.Eq(expr, 0), d)
    if got is None:
        return                  # left to SymPy's path (the caller falls back)
    assert len(roots) <= 1
    if roots:
        assert sp.simplify(got - roots[0]) == 0
    else:                       # SymPy drops a root that is not positive; the formula holds
        assert sp.simplify(expr.subs(d, got)) == 0


@pytest.mark.parametrize("seed", range(24))
def test_plain_cancel_is_sympys_cancel(seed):
    rng = random.Random(1000 + seed)
    num = sp.Add(*(_monomial(rng, False, (1, 2)) for _ in range(rng.randint(1, 4))))
    den = sp.Add(*(_monomial(rng, False, (1, 2)) for _ in range(rng.randint(1, 3))))
    expr = num / den
    got = plain_cancel(expr)
    assert got is None or got == sp.cancel(expr)      # one form: the same expression tree


@pytest.mark.parametrize("seed", range(12))
def test_is_zero_and_the_limit_agree_with_sympy(seed):
    rng = random.Random(2000 + seed)
    a = sp.Add(*(_monomial(rng, rng.random() < 0.5) for _ in range(3)))
    assert is_zero(sp.expand(a - a.rewrite(sp.Add))) in (True, None)
    assert is_zero(a * 2 - a - a) is True
    assert is_zero(a) is None or sp.cancel(a) == 0
    one = sp.Add(*(sp.Rational(rng.randint(-9, 9), rng.randint(1, 5)) * d ** k
                   for k in range(rng.randint(0, 3)))) / d ** rng.randint(0, 3)
    got = limit_at_infinity(one, d)
    if got is not None:
        assert got == sp.limit(one, d, sp.oo)


def test_roots_and_symbolic_powers_are_left_to_sympy():
    assert linear_root(N / d + sp.sqrt(t) - C, d) is None
    assert linear_root(N / d + t ** sp.Symbol("q") - C, d) is None
    assert linear_root(N / d + t ** 40 - C, d) is None        # beyond the expanded powers
