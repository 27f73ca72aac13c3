r"""Exact rational functions on sparse polynomials: the SymPy steps a closed form needs,
without the whole-expression passes that cost most of a whole job's solve.

A per-GPU total is a sum of terms, each a polynomial in the job's symbols over a monomial
denominator (:math:`N/(d\,t\,p)`, :math:`b s h / t`).  Brought onto SymPy's sparse
polynomials (``sympy.polys.rings``), what ``sympy.together``, ``Poly``, ``cancel`` and
``limit`` compute on such a sum costs a few milliseconds instead of tens; each function
here answers None where the expression is not of that kind, and its caller then asks SymPy
as before.  Every answer is the one SymPy gives (the docstrings say why), so the closed
forms print as they did.
"""

from __future__ import annotations

import sympy as sp
from sympy.polys.domains import QQ, ZZ
from sympy.polys.polyerrors import BasePolynomialError
from sympy.polys.rings import PolyRing, sring

from .errors import InvalidValueError

__all__ = ["plain_generator", "plain_cancel", "over_monomial", "linear_root", "is_zero",
           "limit_at_infinity"]


def plain_generator(gen: sp.Expr) -> bool:
    """Whether ``gen`` (a generator of a polynomial ring) is a symbol or a function of atoms
    (``Min(m, p)``): what ``sympy.factor_terms`` and ``signsimp`` leave as it is.

    >>> m, p = sp.symbols("m p")
    >>> plain_generator(m), plain_generator(sp.Min(m, p)), plain_generator(sp.sqrt(m))
    (True, True, False)
    """
    return gen.is_Symbol or (gen.is_Function and all(arg.is_Atom for arg in gen.args))


def plain_cancel(expr: sp.Expr) -> sp.Expr | None:
    r"""``sympy.cancel(expr)`` for a ratio of polynomials over the rationals in symbols (or
    functions of atoms, :func:`plain_generator`), else None.

    For such a ratio ``cancel`` returns :math:`P/Q` from ``PolyElement.cancel`` in the ring of
    its generators: :math:`P` and :math:`Q` integer polynomials without a common factor (their
    contents coprime) and :math:`Q`'s leading coefficient positive, one form for one rational
    function (SymPy 1.14 ``polytools.cancel``, ``rings.PolyElement.cancel``).  Before that it
    runs ``signsimp`` and ``factor_terms`` over the whole expression, which change neither the
    rational function nor such generators, and which take most of its time on a whole job's
    closed form: they are skipped here.

    >>> N, C, p, t = sp.symbols("N C p t", positive=True)
    >>> plain_cancel((4 * N * t - 2 * N) / (2 * C * p * t - C * p)), plain_cancel(sp.sqrt(N))
    (2*N/(C*p), None)
    """
    num, den = sp.fraction(_expression(expr))
    try:
        ring, (top, bottom) = sring((num, den))
    except BasePolynomialError:
        return None
    if (ring.domain not in (ZZ, QQ) or not ring.ngens
            or not all(plain_generator(gen) for gen in ring.symbols)):
        return None
    top, bottom = top.cancel(bottom)
    return top.as_expr() / bottom.as_expr()


def _expression(expr):
    """``expr`` if it is a SymPy expression (text is never parsed here), else an error."""
    if not isinstance(expr, sp.Expr):
        raise InvalidValueError(f"expected a SymPy expression, got {type(expr).__name__}")
    return expr


def _generators(expr: sp.Expr, unknown: sp.Symbol | None, opaque: bool = False):
    """The generators of ``expr`` as a polynomial in plain generators (sorted), or None where
    a node is none of a rational number, a generator, a sum, a product or an integer power.
    With ``unknown``: every generator real, and ``unknown`` inside none but itself.
    ``opaque``: any other node (a ``Max`` of sums) is a generator as it stands."""
    gens, stack = set(), [expr]
    while stack:
        node = stack.pop()
        if node.is_Add or node.is_Mul or (node.is_Pow and node.exp.is_Integer):
            stack.extend(node.args)
        elif node.is_Rational:
            continue
        elif opaque and not node.is_number:
            gens.add(node)
        elif not plain_generator(node) or (unknown is not None and not (
                node.is_real and (node == unknown or unknown not in node.free_symbols))):
            return None
        else:
            gens.add(node)
    return sorted(gens, key=sp.default_sort_key)


def over_monomial(expr: sp.Expr, unknown: sp.Symbol | None = None, opaque: bool = False):
    r"""``(ring, numerator, exponents)``: ``expr`` as a polynomial over :math:`\mathbb{Q}` in
    its generators divided by the monomial with those exponents, or None where a denominator
    is not a monomial (or a generator not plain, :func:`_generators`; ``opaque``: any
    function a generator).

    A sum is taken over the highest power of each generator among its terms' denominators, as
    ``sympy.together`` combines it (which may cancel more, never less).

    >>> d, t = sp.symbols("d t", positive=True)
    >>> ring, num, exps = over_monomial(3 + 8 / (d * t) + 1 / t)
    >>> num.as_expr(), exps
    (3*d*t + d + 8, (1, 1))
    """
    gens = _generators(_expression(expr), unknown, opaque)
    if not gens:
        return None
    ring = PolyRing(tuple(gens), QQ)
    got = _convert(expr, ring, dict(zip(gens, ring.gens)), {})
    return None if got is None else (ring, *got)


#: The largest integer power :func:`_convert` expands (a memory total's are 1 or 2).
_MAX_POWER = 16


def _convert(expr, ring, gens, seen):
    """``(numerator, exponents)`` of ``expr`` (memoised in ``seen``), or None."""
    if expr in seen:
        return seen[expr]
    zero = (0,) * ring.ngens
    if expr.is_Rational:
        got = (ring.ground_new(QQ(expr.p, expr.q)), zero)
    elif expr in gens:
        got = (gens[expr], zero)
    elif expr.is_Pow and not (expr.exp.is_Integer and abs(expr.exp) <= _MAX_POWER):
        got = None                          # a root, a symbolic or a huge power: SymPy's path
    elif expr.is_Pow:
        base, k = _convert(expr.base, ring, gens, seen), int(expr.exp)
        if base is None:
            got = None
        elif k >= 0:
            got = (base[0] ** k, tuple(k * e for e in base[1]))
        elif len(base[0]) != 1:
            got = None                      # a sum in a denominator
        else:                               # (c m / M)^-k = M^k / c^k over m^k
            (mono, coeff), = base[0].terms()
            got = (ring({tuple(-k * e for e in base[1]): ring.domain.one / coeff ** -k}),
                   tuple(-k * e for e in mono))
    elif not (expr.is_Add or expr.is_Mul):
        got = None
    else:
        parts = [_convert(arg, ring, gens, seen) for arg in expr.args]
        if any(part is None for part in parts):
            got = None
        elif expr.is_Mul:
            num = ring.one
            for part in parts:
                num *= part[0]
            got = (num, tuple(map(sum, zip(*(part[1] for part in parts)))))
        else:
            common = tuple(map(max, zip(*(part[1] for part in parts))))
            num = ring.zero
            for part in parts:
                num += part[0] * ring({tuple(c - e for c, e in zip(common, part[1])): 1})
            got = (num, common)
    seen[expr] = got
    return got


def linear_root(expr: sp.Expr, unknown: sp.Symbol) -> sp.Expr | None:
    r"""The root :math:`x = -b/a` of ``expr = 0`` when its numerator over the common monomial
    denominator (:func:`over_monomial`) is :math:`a x + b` with :math:`b \ne 0`, every
    generator real; else None.

    ``sympy.together`` of ``expr`` has this numerator times a factor free of the unknown
    (with :math:`b \ne 0` no power of the unknown divides it, and ``together`` cancels at most
    more), so its ``Poly`` in the unknown has the same degree and root: the same rational
    function, which :func:`memsym.printing.tidy` brings to one form.  A ratio of polynomials
    in real symbols is never non-real (``is_real`` is not False).

    >>> N, C, d, t = sp.symbols("N C d t", positive=True)
    >>> linear_root(2 * N / t + 16 * N / (d * t) - C, d)
    -16*N/(-C*t + 2*N)
    """
    got = over_monomial(expr, unknown)
    if got is None or unknown not in got[0].symbols:
        return None
    ring, num, _ = got
    x = ring.gens[ring.symbols.index(unknown)]
    if num.degree(x) != 1 or not (b := num.coeff_wrt(x, 0)):
        return None
    return -b.as_expr() / num.coeff_wrt(x, 1).as_expr()


def is_zero(expr: sp.Expr) -> bool | None:
    """True where ``expr`` is the zero rational function in its generators (then
    ``sympy.cancel(expr)`` is 0), None where that is not shown.

    Any function is a generator as it stands (a ``Max`` of sums); a polynomial in them that
    vanishes is zero whatever their values.  Not a proof of the converse: a sum that does not
    vanish here may still be zero (two spellings of one maximum), and ``Piecewise`` is left
    to SymPy (``cancel`` treats its pieces apart).

    >>> a, b = sp.symbols("a b", positive=True)
    >>> top = sp.Max(a, b + 1)
    >>> is_zero(a / b + 1 / b - (a + 1) / b), is_zero(a / b - 1), is_zero(top / b - top / b)
    (True, None, True)
    """
    if _expression(expr).is_Rational:
        return True if expr == 0 else None
    if expr.has(sp.Piecewise):
        return None
    got = over_monomial(expr, opaque=True)
    return True if got is not None and not got[1] else None


def limit_at_infinity(expr: sp.Expr, x: sp.Symbol):
    r""":math:`\lim_{x \to \infty}` ``expr`` for a polynomial in ``x`` alone over a power of
    ``x`` (``sympy.limit``'s answer: a rational number, ``oo`` or ``-oo``), else None.

    Over :math:`x^k` a numerator of degree :math:`n` tends to 0 for :math:`n < k`, to its
    leading coefficient for :math:`n = k`, and to :math:`\pm\infty` by its leading
    coefficient's sign for :math:`n > k`.

    >>> d = sp.Symbol("d", positive=True)
    >>> limit_at_infinity(3 + 8 / d, d), limit_at_infinity(d / 2 - 1, d)
    (3, oo)
    """
    if _expression(expr).free_symbols != {x}:
        return None
    got = over_monomial(expr)
    if got is None or got[0].symbols != (x,):
        return None
    ring, num, (k,) = got
    n = num.degree()
    if n < k:
        return sp.Integer(0)
    lead = num.LC
    if n == k:
        return ring.domain.to_sympy(lead)
    return sp.oo if lead > 0 else -sp.oo
