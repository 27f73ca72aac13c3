r"""The exact polynomial fit of measured byte counts (no PyTorch needed).

A measurement (any function of a shape, e.g. the bytes autograd saves, :mod:`memsym.measure`)
is fitted by the polynomial in the registry's shape symbols with rational coefficients that
reproduces it exactly: a design of shapes whose monomial rows have full rank (tested modulo a
Mersenne prime, solved over the rationals), then fresh shapes that the fit must predict to the
byte.  A measurement no polynomial of the chosen form explains raises :class:`MeasureError`.

.. math:: M(s, b, h, \dots) = \sum_k c_k\, s^{i_k} b^{j_k} h^{l_k} \cdots, \quad c_k \in \mathbb{Q}

References
----------
.. [pytorch-saved-tensors-hooks] PyTorch documentation, "Hooks for saved tensors"
   (``torch.autograd.graph.saved_tensors_hooks``): what :data:`SOURCE` cites.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Callable, Mapping

import sympy as sp
from sympy import ZZ
from sympy.polys.matrices import DomainMatrix

from .errors import InvalidValueError, MemsymError
from .symbols import lookup
from .term import Source, Term, Total
from .values import as_expr

__all__ = ["MeasureError", "SOURCE", "Fit", "monomial_basis", "fit_polynomial"]

#: The citation of every measured term (a key of memsym/references.toml).
SOURCE = Source("pytorch-saved-tensors-hooks", "measured with torch.autograd.graph.saved_tensors_hooks")

# A 61-bit Mersenne prime: the rank test during design selection runs modulo it (fast
# Python ints); full rank mod P implies full rank over Q, and the solve itself is exact.
_P = (1 << 61) - 1


class MeasureError(MemsymError):
    """A measurement that no polynomial of the chosen form explains, or that cannot run.

    Attributes
    ----------
    shape : dict or None
        The instance (symbol name -> value) where the fit failed, if any.
    measured, predicted : int or None
        The measured bytes there and what the fitted polynomial predicts.
    """

    def __init__(self, message: str, shape=None, measured=None, predicted=None):
        super().__init__(message)
        self.shape, self.measured, self.predicted = shape, measured, predicted


# ------------------------------------------------------------------ the polynomial fit


def _symbols(symbols) -> tuple:
    if isinstance(symbols, (str, sp.Symbol)):
        symbols = (symbols,)
    out = tuple(lookup(x) for x in symbols)  # validated against the registry, never parsed
    if not out:
        raise InvalidValueError("fit needs at least one shape symbol (e.g. s, b, h, a)")
    if len(set(out)) != len(out):
        raise InvalidValueError("fit symbols must be distinct")
    return out


def monomial_basis(symbols, degree: int, max_degree: Mapping | None = None) -> tuple:
    r"""All monomials in ``symbols`` of total degree at most ``degree``.

    .. math::

        \{\, x_1^{e_1}\cdots x_n^{e_n} : \textstyle\sum e_i \le D,\; e_i \le D_i \,\}

    Parameters
    ----------
    symbols : sequence of str or Symbol
        Registered shape symbols [1].
    degree : int
        Total degree :math:`D` [1].
    max_degree : mapping, optional
        Per-symbol caps :math:`D_i` (name -> int), e.g. ``{"b": 1}`` when the bytes are
        known to be linear in the micro-batch size.

    Returns
    -------
    tuple of sympy.Expr
        The monomials, constant first.

    Examples
    --------
    >>> monomial_basis(("s", "b"), 2)
    (1, s, b, s**2, b*s, b**2)
    >>> monomial_basis(("s", "b"), 2, {"b": 1})
    (1, s, b, s**2, b*s)
    """
    syms = _symbols(symbols)
    if not isinstance(degree, int) or isinstance(degree, bool) or degree < 0:
        raise InvalidValueError(f"degree must be a whole number >= 0, not {degree!r}")
    caps = {}
    for name, cap in (max_degree or {}).items():
        sym = lookup(name)
        if sym not in syms:
            raise InvalidValueError(f"max_degree names {sym}, which is not among the fit symbols "
                                    f"({', '.join(map(str, syms))})")
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 0:
            raise InvalidValueError(f"max_degree[{sym}] must be a whole number >= 0, not {cap!r}")
        caps[sym] = cap
    ranges = [range(min(degree, caps.get(x, degree)) + 1) for x in syms]
    exps = sorted((e for e in itertools.product(*ranges) if sum(e) <= degree),
                  key=lambda e: (sum(e), tuple(reversed(e))))
    return tuple(sp.Mul(*(x**k for x, k in zip(syms, e))) for e in exps)


def _check_basis(basis, syms) -> tuple:
    out = []
    for mono in basis:
        mono = as_expr(mono, "basis entry") if isinstance(mono, int) else mono  # never text
        if not isinstance(mono, sp.Expr):
            raise InvalidValueError(f"basis entries must be SymPy monomials, not {type(mono).__name__}")
        if not mono.free_symbols <= set(syms):
            extra = ", ".join(sorted(str(x) for x in mono.free_symbols - set(syms)))
            raise InvalidValueError(f"basis monomial {mono} uses {extra}, not among the fit symbols")
        terms = sp.Poly(mono, *syms).terms() if mono.is_polynomial(*syms) else []
        if len(terms) != 1 or terms[0][1] != 1:
            raise InvalidValueError(f"basis entry {mono} is not a monomial with coefficient 1")
        out.append(mono)
    if len(set(out)) != len(out):
        raise InvalidValueError("basis monomials must be distinct")
    if not out:
        raise InvalidValueError("basis must not be empty")
    return tuple(out)


def _row(monos, syms, point) -> list[int]:
    vals = {x: sp.Integer(point[x.name]) for x in syms}
    return [int(mono.xreplace(vals)) if mono != 1 else 1 for mono in monos]


def _draw(rng, syms, ranges, valid):
    point = {x.name: rng.randint(*ranges[x.name]) for x in syms}
    return point if valid is None or valid(dict(point)) else None


def _distinct(rng, syms, ranges, valid, seen: set, tries: int):
    """The valid points of ``tries`` draws that are not in ``seen`` (which each joins)."""
    for _ in range(tries):
        point = _draw(rng, syms, ranges, valid)
        if point is not None and tuple(point.values()) not in seen:
            seen.add(tuple(point.values()))
            yield point


def _select(monos, syms, ranges, valid, rng, tries) -> list[dict]:
    """Points whose monomial rows are linearly independent (a square, invertible design)."""
    n = len(monos)
    pivots: dict[int, list[int]] = {}
    chosen, points = [], _distinct(rng, syms, ranges, valid, set(), tries)
    while len(chosen) < n:       # no draw once the design is square
        point = next(points, None)
        if point is None:
            break
        r = [v % _P for v in _row(monos, syms, point)]
        for col in sorted(pivots):
            if r[col]:
                fac, prow = r[col], pivots[col]
                r = [(x - fac * y) % _P for x, y in zip(r, prow)]
        lead = next((j for j, x in enumerate(r) if x), None)
        if lead is None:
            continue  # adds nothing the design does not already pin down
        inv = pow(r[lead], _P - 2, _P)
        pivots[lead] = [(x * inv) % _P for x in r]
        chosen.append(point)
    if len(chosen) < n:
        raise MeasureError(
            f"the shapes allowed by the ranges cannot tell the {n} basis monomials apart "
            f"(rank {len(chosen)} of {n}); widen the ranges or lower the degree")
    return chosen


def _fresh(rng, syms, ranges, valid, count, exclude, tries) -> list[dict]:
    seen = {tuple(p.values()) for p in exclude}
    out = list(itertools.islice(_distinct(rng, syms, ranges, valid, seen, tries), count))
    if len(out) < count:
        raise MeasureError(f"found only {len(out)} of {count} further valid shapes; widen the ranges")
    return out


@dataclass(frozen=True)
class Fit:
    """An exact polynomial fitted to measurements, with the evidence it rests on.

    Attributes
    ----------
    expr : sympy.Expr
        The fitted total [bytes], rational coefficients.
    parts : dict
        Group name -> fitted polynomial [bytes] (the groups the measurement reported).
    symbols : tuple of Symbol
        The shape symbols.
    basis : tuple of sympy.Expr
        The monomials the fit could use.
    points, checks, holdout : tuple of dict
        Instances solved for, instances that over-determine the fit, and held-back
        instances (never seen by the solver) on which the fit was verified.
    measured : tuple of (dict, dict)
        Every instance with its measured bytes per group.
    """

    expr: sp.Expr
    parts: dict
    symbols: tuple
    basis: tuple
    points: tuple
    checks: tuple
    holdout: tuple
    measured: tuple = field(repr=False)

    def total(self, name: str = "measured bytes saved for backward", source: Source = SOURCE) -> Total:
        """The fit as a memsym :class:`~memsym.term.Total`, one term per group."""
        terms = tuple(Term(key or "(layer)", expr, f"measured: saved for backward in {key or 'the layer'}",
                           source, label=key or "(layer)") for key, expr in self.parts.items())
        return Total(name, terms)


def fit_polynomial(measure: Callable, symbols, *, degree: int | None = None, max_degree=None,
                   basis=None, ranges: Mapping | None = None, valid: Callable | None = None,
                   extra: int = 4, holdout: int = 4, holdout_ranges: Mapping | None = None,
                   seed: int = 0, tries: int = 20000) -> Fit:
    r"""The exact polynomial (rational coefficients) that reproduces ``measure`` on every instance.

    Picks instances whose monomial values are linearly independent, solves the square
    system exactly (SymPy ``DomainMatrix`` over the integers), checks ``extra`` further
    instances against the solution, then verifies ``holdout`` held-back instances drawn
    from ``holdout_ranges`` (by default up to twice the fitting ranges) that the solver
    never saw:

    .. math::

        \text{bytes}(x) = \sum_{m \in \text{basis}} c_m\, m(x), \qquad c_m \in \mathbb{Q}

    Parameters
    ----------
    measure : callable
        ``measure(shape) -> int`` or ``-> {group: int}`` [bytes]; ``shape`` maps symbol
        names to whole numbers.
    symbols : sequence of str
        Registered shape symbols (``s``, ``b``, ``h``, ``a``, ``g``, ``d_h``, ``f``, ...).
    degree : int, optional
        Total degree of the monomial basis (see :func:`monomial_basis`).
    max_degree : mapping, optional
        Per-symbol degree caps.
    basis : sequence of sympy.Expr, optional
        An explicit monomial basis instead of ``degree`` (e.g. ``[s*b*h, s**2*b*a]``).
    ranges : mapping, optional
        Symbol name -> ``(low, high)`` inclusive whole-number range; default ``(1, 8)``.
    valid : callable, optional
        ``valid(shape) -> bool`` for constraints such as ``h % a == 0``.
    extra, holdout : int
        Number of over-determining and of held-back instances.
    holdout_ranges : mapping, optional
        Ranges of the held-back instances; default ``(low, 2 high)``.
    seed : int
        Seed of the (deterministic) instance choice.

    Returns
    -------
    Fit

    Raises
    ------
    MeasureError
        When an over-determining or held-back instance disagrees with the fit (no
        polynomial in that basis explains the measurements), or when the ranges cannot
        identify the basis.

    Examples
    --------
    >>> from memsym.symbols import s, b, h
    >>> fit = fit_polynomial(lambda x: 2 * x["s"] * x["b"] * x["h"] + 4 * x["s"] * x["b"],
    ...                      ("s", "b", "h"), degree=3)
    >>> fit.expr
    2*b*h*s + 4*b*s
    >>> fit_polynomial(lambda x: x["s"] ** 3, ("s",), degree=2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    memsym.polyfit.MeasureError: no polynomial of total degree 2 in s fits: at s=8 the measurement is 512 bytes but ...
    """
    syms = _symbols(symbols)
    monos, where = _fit_basis(syms, degree, max_degree, basis)
    rngs, hold = _fit_ranges(syms, ranges, holdout_ranges, extra, holdout)

    rng = random.Random(seed)
    points = _select(monos, syms, rngs, valid, rng, tries)
    checks = _fresh(rng, syms, rngs, valid, extra, points, tries)
    held = _fresh(rng, syms, hold, valid, holdout, points + checks, tries)

    run = _Measurements(measure)
    measured = [run(pt) for pt in points]
    groups, parts, total = _solve_exact(monos, syms, points, measured)
    for pt in checks:
        _verify(run(pt), pt, "measurement", groups, parts, total, syms, where)
    for pt in held:
        _verify(run(pt), pt, "held-back measurement", groups, parts, total, syms, where)
    every = [(dict(pt), dict(run.cache[tuple(pt.values())])) for pt in points + checks + held]
    return Fit(total, parts, syms, monos, tuple(points), tuple(checks), tuple(held), tuple(every))


def _fit_basis(syms, degree, max_degree, basis) -> tuple:
    """``(monomials, where)``: the basis fitted and its description for messages."""
    if basis is None:
        if degree is None:
            raise InvalidValueError("give a total degree or an explicit monomial basis")
        monos = monomial_basis(syms, degree, max_degree)
        form = f"total degree {degree}"
    else:
        if degree is not None or max_degree is not None:
            raise InvalidValueError("give either a degree (with max_degree) or a basis, not both")
        monos = _check_basis(basis, syms)
        form = "basis {" + ", ".join(map(str, monos)) + "}"
    return monos, f"{form} in {', '.join(map(str, syms))}"


def _fit_ranges(syms, ranges, holdout_ranges, extra, holdout) -> tuple:
    """``(ranges, holdout ranges)`` by symbol name, checked, with their defaults."""
    rngs = {}
    for x in syms:
        lo, hi = (ranges or {}).get(x.name, (1, 8))
        if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
            raise InvalidValueError(f"range of {x} must be whole numbers 1 <= low <= high, not {(lo, hi)}")
        rngs[x.name] = (lo, hi)
    unknown = set(ranges or {}) - {x.name for x in syms}
    if unknown:
        raise InvalidValueError(f"ranges name symbols not being fitted: {', '.join(sorted(unknown))}")
    hold = {x.name: (holdout_ranges or {}).get(x.name, (rngs[x.name][0], 2 * rngs[x.name][1]))
            for x in syms}
    for count, what in ((extra, "extra"), (holdout, "holdout")):
        if not isinstance(count, int) or count < 0:
            raise InvalidValueError(f"{what} must be a whole number >= 0, not {count!r}")
    return rngs, hold


class _Measurements:
    """``measure`` called once per instance: ``{group: bytes}`` (``""``: one number)."""

    def __init__(self, measure: Callable):
        self.measure = measure
        self.cache: dict[tuple, dict] = {}

    def __call__(self, point) -> dict:
        key = tuple(point.values())
        if key not in self.cache:
            got = self.measure(dict(point))
            got = dict(got) if isinstance(got, Mapping) else {"": got}
            for grp, val in got.items():
                if not isinstance(val, int) or isinstance(val, bool):
                    raise InvalidValueError(f"measure must return whole bytes, got {val!r} for {grp!r}")
            self.cache[key] = got
        return self.cache[key]


def _solve_exact(monos, syms, points, measured) -> tuple:
    """``(groups, parts, total)``: the square system through ``points`` solved exactly."""
    groups = sorted({grp for got in measured for grp in got})
    n = len(monos)
    A = DomainMatrix([[ZZ(v) for v in _row(monos, syms, pt)] for pt in points], (n, n), ZZ)
    rhs = DomainMatrix([[ZZ(got.get(grp, 0)) for grp in groups] for got in measured], (n, len(groups)), ZZ)
    sol, den = A.solve_den(rhs)  # exact: A sol = den rhs
    sol = sol.to_Matrix()
    den = sp.Integer(den.element if hasattr(den, "element") else den)
    parts = {grp: sp.Add(*(sp.Rational(sol[i, j]) / den * monos[i] for i in range(n)))
             for j, grp in enumerate(groups)}
    return groups, parts, sp.expand(sp.Add(*parts.values()))


def _verify(got, point, label, groups, parts, total, syms, where) -> None:
    """Refuse the fit when the measurement ``got`` at ``point`` disagrees with it."""
    new = set(got) - set(groups)
    meas = sum(got.values())
    pred = total.xreplace({x: sp.Integer(point[x.name]) for x in syms})
    bad = [g for g in groups if parts[g].xreplace({x: sp.Integer(point[x.name]) for x in syms})
           != got.get(g, 0)]
    if pred != meas or bad or new:
        at = ", ".join(f"{k}={v}" for k, v in point.items())
        detail = f" (group {(sorted(new) or bad)[0] or '(layer)'})" if pred == meas else ""
        shown = str(pred) if pred.is_Integer else f"about {float(pred):.6g}"
        raise MeasureError(
            f"no polynomial of {where} fits: at {at} the {label} is {meas} bytes but the fit "
            f"through the other instances predicts {shown}{detail} (raise the degree, add the "
            "missing monomial, or restrict the shapes where the layer changes behaviour)",
            point, meas, pred)
