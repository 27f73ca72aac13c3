"""Sizing questions answered exactly: the smallest (or largest) integer that fits.

The total is solved for the unknown over the positive reals (closed form, cached per
expression), the boundary is evaluated exactly, then integrality and divisibility are
applied and the answer is verified by substituting back: the answer fits and its
neighbour does not.  ``integer=True`` is never used in ``solve`` (it returns ``[]``).
"""

from __future__ import annotations

import functools
from numbers import Integral
from dataclasses import dataclass
from typing import Callable, Mapping

import sympy as sp

from .errors import BeyondSearchBound, InvalidValueError, NoFitError
from .limits import MAX_CANDIDATES, SEARCH_BOUND
from .printing import latex, tidy
from .rational import linear_root
from .symbols import C, G, d, lookup, p, t
from .values import as_values, exact
from .text import approx, short

__all__ = ["Solution", "smallest", "largest", "smallest_gpus", "closed_bound", "floor_message",
           "floor_at_infinity", "gb_text", "first_true"]


@dataclass(frozen=True)
class Solution:
    """The answer to a sizing question.

    Attributes
    ----------
    unknown : sympy.Symbol
        What was solved for.
    value : int
        The integer answer (verified: it fits, and the next one towards "not fitting" does not).
    closed_form : sympy.Expr or None
        The boundary solved symbolically in every other symbol (``None`` when no closed
        form exists and the answer was searched).
    bound : sympy.Expr or None
        The real boundary at the given values (exact).
    relation : str
        ``">="`` for a smallest answer, ``"<="`` for a largest.
    memory : sympy.Expr
        The total [bytes] at the answer.
    capacity : sympy.Expr
        The capacity it was compared with [bytes].
    """

    unknown: sp.Symbol
    value: int
    closed_form: sp.Expr | None
    bound: sp.Expr | None
    relation: str
    memory: sp.Expr
    capacity: sp.Expr

    def latex(self) -> str:
        r"""The result as LaTeX, e.g. ``d \geq \frac{16 N}{C p t - N b_{hp}} = 10.4 \Rightarrow d = 11``."""
        rel = r"\geq" if self.relation == ">=" else r"\leq"
        x = latex(self.unknown)
        parts = [x]
        if self.closed_form is not None:
            parts.append(f"{rel} {latex(self.closed_form)}")
        if self.bound is not None:
            parts.append(f"{'=' if self.closed_form is not None else rel} {approx(self.bound, 6)}")
        return " ".join(parts) + rf" \;\Rightarrow\; {x} = {self.value}"

    def _repr_latex_(self) -> str:
        return f"${self.latex()}$"


def _linear_root(expr: sp.Expr, unknown: sp.Symbol):
    """The roots of ``expr = C`` when its numerator is linear in ``unknown`` (a x + b = 0
    gives -b/a) or quadratic (the two roots of a x^2 + b x + c = 0), else None.

    Most totals are: model states fall as 1/d, activations rise as s, b.  ``sympy.solve``
    finds the same root but factors the coefficients first, which takes about 15 times as
    long on a whole job's total; :func:`memsym.printing.tidy` then brings both to one form
    (``sympy.cancel`` is canonical).  A quadratic total (activations that rise as t or c
    while the states fall as 1/t) took ``solve`` 12.9 s of a non-fitting job's 18 s advice.  An unknown inside ``Min``/``Max`` or a power is not a
    polynomial generator and falls back to ``solve``."""
    num, _ = sp.fraction(sp.together(expr - C))
    try:
        poly = sp.Poly(num, unknown)
    except sp.PolynomialError:
        return None
    if poly.degree() == 2:
        # a x^2 + b x + c = 0: the two roots sympy.solve returns, without its factoring
        a, b, c = poly.all_coeffs()
        disc = sp.sqrt(b ** 2 - 4 * a * c)
        return [(-b - disc) / (2 * a), (-b + disc) / (2 * a)]
    if poly.degree() != 1:
        return None
    a, b = poly.all_coeffs()
    return [-b / a]


def _inside_min_max(expr: sp.Expr, unknown: sp.Symbol) -> bool:
    """Whether ``unknown`` is inside a ``Min``, ``Max``, ``ceiling`` or ``floor`` of ``expr``.

    ``sympy.solve`` has no method for them (it rewrites ``Abs`` piecewise, not ``Min``/``Max``,
    and cannot invert them or a rounding): it raises NotImplementedError or finds nothing,
    after factoring for tens of seconds on a whole job's total (a torchtitan total's ``Min``
    of two phases; HybridEP's buffers, ``ceiling(b s / (64 c t))``: 40 s for t)."""
    return any(isinstance(node, (sp.Min, sp.Max, sp.ceiling, sp.floor))
               and unknown in node.free_symbols for node in sp.preorder_traversal(expr))


@functools.lru_cache(maxsize=256)
def _closed_form(expr: sp.Expr, unknown: sp.Symbol):
    """Real solutions of ``expr = C`` for ``unknown`` as solved (not yet tidied), or None if
    solve cannot."""
    if (root := linear_root(expr - C, unknown)) is not None:
        return (root,)    # the root of a linear total, on sparse polynomials: is_real not False
    sols = _linear_root(expr, unknown)
    if sols is None and _inside_min_max(expr, unknown):
        return None
    try:
        sols = sp.solve(sp.Eq(expr, C), unknown) if sols is None else sols
    except (NotImplementedError, ValueError, TypeError):  # pragma: no cover - sympy gaps
        return None
    sols = [s for s in sols if s.is_real is not False]
    return tuple(sols) if sols else None


def _prepare(total, unknown, capacity, values):
    x = lookup(unknown)
    cap = exact(capacity, "capacity")
    if not cap > 0:
        raise InvalidValueError(f"capacity must be > 0 bytes, got {cap}")
    vals = as_values(values)
    vals.pop(x, None)
    expr = total.expr
    fixed = expr.xreplace(vals)
    extra = fixed.free_symbols - {x}
    if extra:
        raise InvalidValueError("values needed to solve for %s: %s"
                                % (x, ", ".join(sorted(s.name for s in extra))))
    if x not in fixed.free_symbols:
        raise InvalidValueError(f"{total.name} does not depend on {x}")
    return x, cap, vals, expr, fixed


def _value(fixed, x, n) -> sp.Expr:
    return fixed.xreplace({x: sp.Integer(n)})


#: The most maxima holding the unknown that :func:`closed_bound` splits into branches (2 to the
#: power of it branches at least); beyond it the integer search alone answers.
MAX_SPLITS = 6


def closed_bound(expr, x, vals, cap, want_small: bool = True, tidied: bool = True):
    """(closed form, exact real boundary) or (None, None).

    ``tidied=False``: the closed form as solved, not brought to the printed form by
    :func:`memsym.printing.tidy` (which takes most of the time), for a caller that wants only
    the boundary's value (the same number either way) or the integer.

    A peak over the step's phases is ``... Max(a_1, ..., a_k) ...`` (one Max node, entering
    linearly): it fits exactly when every branch (the Max replaced by one a_i) fits, so the
    boundary is the largest branch boundary for a falling total (``want_small``) and the
    smallest for a rising one; branches that fit at every x (no positive root) do not bind.
    The closed form is then ``Max`` (or ``Min``) of the branches' closed forms.

    Maxima inside a maximum (a phase's peak that is itself the larger of two operations) are
    split the same way, outermost first, at most :data:`MAX_SPLITS` of them: ``sympy.solve``
    on a total with the unknown inside a ``Max`` rewrites it piecewise and takes seconds to
    find nothing."""
    maxes = list(dict.fromkeys(node for node in sp.preorder_traversal(expr)
                               if isinstance(node, sp.Max)))
    if len(maxes) > 1:
        maxes = [node for node in maxes if x in node.xreplace(vals).free_symbols]
        if len(maxes) > MAX_SPLITS:
            return None, None
    if maxes:
        node = maxes[0]
        found = []
        for arg in node.args:
            branch = expr.xreplace({node: arg})
            if x not in branch.xreplace(vals).free_symbols:
                continue
            sol, val = closed_bound(branch, x, vals, cap, want_small, tidied)
            if sol is None or val is None:
                continue
            found.append((sol, val))
        if not found:
            return None, None
        pick = max if want_small else min
        sol, val = pick(found, key=lambda sv: sv[1])
        sols = [sv[0] for sv in found]
        return ((sp.Max if want_small else sp.Min)(*sols, evaluate=False) if len(sols) > 1
                else sol), val
    sols = _closed_form(expr, x)
    if not sols:
        return None, None
    form = tidy if tidied else (lambda root: root)   # tidy keeps its answers
    for sol in sols:
        if (val := sol.xreplace({**vals, C: cap})).is_real and val.is_positive:
            return form(sol), form(sol).xreplace({**vals, C: cap})   # the shown root's value
    return form(sols[0]), None


def floor_at_infinity(expr, x):
    """``lim_{x -> oo} expr`` (the memory ``x`` cannot remove) when ``expr`` holds ``x`` alone
    and SymPy can take it, else None (then only "nothing fits up to the range's end" is said).

    >>> d, t = sp.symbols("d t", positive=True)
    >>> floor_at_infinity(3 + 8 / d, d), floor_at_infinity(3 + 8 / (d * t), d) is None
    (3, True)
    """
    if expr.free_symbols != {x}:
        return None
    try:
        return sp.limit(expr, x, sp.oo)
    except (NotImplementedError, ValueError):     # gruntz's MRV set in several variables
        return None


def floor_message(total, x, vals, cap, direction):
    """NoFitError naming the terms that stay as x grows (or shrinks) and their floor."""

    limit_at = sp.oo if direction > 0 else sp.Integer(1)
    parts = {}
    for term in total:
        val = term.expr.xreplace(vals)
        lim = sp.limit(val, x, limit_at) if x in val.free_symbols else val
        if lim != 0:
            parts[term.key] = lim
    floor = sp.Add(*parts.values())
    where = "however large" if direction > 0 else "however small"
    names = " + ".join(parts) or "none"
    # approx: exact numbers shown safely beyond float range (no inf, no OverflowError)
    return NoFitError(
        f"nothing fits: {names} alone need {gb_text(floor)} GB "
        f"(>= capacity {gb_text(cap)} GB) {where} {x.name} is",
        binding=tuple(parts), floor=floor)


def gb_text(value) -> str:
    """``value`` bytes in GB, exact numbers shown safely beyond float range."""
    value = value if isinstance(value, sp.Basic) else sp.Integer(value)  # ints only: never text
    return approx(value / 10**9, 4)


def _beyond(x, what: str, bound=None) -> BeyondSearchBound:
    where = "" if bound is None else f" (the real boundary is {x.name} = {approx(bound)})"
    return BeyondSearchBound(f"the {what} {x.name} that fits is beyond the search bound "
                             f"2^{SEARCH_BOUND.bit_length() - 1}{where}; no answer is claimed",
                             SEARCH_BOUND)


def _whole_bound(name, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise InvalidValueError(f"{name} must be a whole number >= 1, got {value!r:.40}")
    return int(value)


def _search(total, unknown, capacity, values, valid, lower, upper, want_small, multiple_of=None):
    """The bounded search behind :func:`smallest` and :func:`largest`.

    Every loop is bounded by construction: galloping and bisection over at most
    ``[1, SEARCH_BOUND]`` (<= 2 x 256 exact evaluations), and at most
    :data:`~memsym.limits.MAX_CANDIDATES` calls of ``valid`` past the memory boundary.
    Memory is monotone in the unknown (falling for :func:`smallest`, rising for
    :func:`largest`), so once the boundary is found only ``valid`` needs asking.
    """
    x, cap, vals, expr, fixed = _prepare(total, unknown, capacity, values)
    lower = _whole_bound("lower", lower)
    user_upper = _whole_bound("upper", upper)
    if user_upper is not None and user_upper > SEARCH_BOUND:
        raise InvalidValueError(f"upper must be at most the search bound "
                                f"2^{SEARCH_BOUND.bit_length() - 1}")
    upper = SEARCH_BOUND if user_upper is None else user_upper
    if upper < lower:
        raise InvalidValueError(f"upper {upper} is below lower {lower}")
    step_k = _whole_bound("multiple_of", multiple_of)

    def fits(n: int) -> bool:
        return bool(_value(fixed, x, n) <= cap)

    # a Term present only at some sizes (a Piecewise in them: the CP buffers at c > 1) takes
    # the given sizes first, so that the closed form sees the one peak Max it can split
    pieces = expr.replace(lambda e: isinstance(e, sp.Piecewise),
                          lambda e: e.xreplace({k: v for k, v in vals.items() if k != x}))
    closed, bound = closed_bound(pieces, x, vals, cap, want_small)
    if want_small:
        n = _smallest_fit(total, x, vals, cap, fixed, fits, lower, upper, user_upper, bound,
                          step_k, valid)
        relation = ">="
    else:
        n = _largest_fit(total, x, vals, cap, fits, lower, upper, user_upper, bound, step_k,
                         valid)
        relation = "<="
    return Solution(x, int(n), closed, bound, relation, _value(fixed, x, n), cap)


def _smallest_fit(total, x, vals, cap, fixed, fits, lower, upper, user_upper, bound, step_k,
                  valid) -> int:
    """The smallest n in [lower, upper] that fits (a multiple of ``step_k``, ``valid``)."""
    if not fits(upper):
        if user_upper is not None:
            raise NoFitError(f"nothing fits with {x.name} <= {upper}: the total at "
                             f"{x.name} = {upper} is {gb_text(_value(fixed, x, upper))} GB "
                             f"(> capacity {gb_text(cap)} GB)")
        lim = sp.limit(fixed, x, sp.oo)
        if lim >= cap:
            raise floor_message(total, x, vals, cap, +1)
        raise _beyond(x, "smallest", bound)
    # the first n that fits in [lower, upper]: start at the exact boundary when there is
    # one, else gallop upwards from lower; then bisect (fits is monotone in n)
    start = lower if bound is None else min(max(lower, int(sp.ceiling(bound))), upper)
    # the closed form is exact, so the boundary is at most one below start; the gallop
    # still checks both ways in case a sympy root was the wrong one
    hi = first_true(fits, lower, upper, start)
    n = hi
    if step_k is not None:
        n = -(-n // step_k) * step_k
        if n > upper:
            raise (NoFitError(f"no multiple of {step_k} with {x.name} <= {upper} fits")
                   if user_upper is not None else _beyond(x, "smallest", bound))
    if valid is not None:
        for _ in range(MAX_CANDIDATES):
            if valid(n) and fits(n):  # fits: cheap insurance against a non-monotone total
                break
            n += step_k or 1
            if n > upper:
                if user_upper is None:
                    raise _beyond(x, "smallest valid", bound)
                raise NoFitError(f"no valid {x.name} <= {upper} fits")
        else:
            raise _beyond_candidates(x, n)
    return n


def _largest_fit(total, x, vals, cap, fits, lower, upper, user_upper, bound, step_k,
                 valid) -> int:
    """The largest n in [lower, upper] that fits (a multiple of ``step_k``, ``valid``)."""
    if not fits(lower):
        raise floor_message(total, x, vals, cap, -1)
    if fits(upper):
        if user_upper is None:
            raise _beyond(x, "largest", bound)
        n = upper
    else:
        # the last n that fits: from the exact boundary, or gallop up from lower; bisect
        n = _last_fitting(fits, lower, upper, bound)
    if step_k is not None:
        n = (n // step_k) * step_k
        if n < lower:
            raise NoFitError(f"no multiple of {step_k} with {x.name} >= {lower} fits")
    if valid is not None:
        for _ in range(MAX_CANDIDATES):
            if valid(n) and fits(n):
                break
            n -= step_k or 1
            if n < lower:
                raise NoFitError(f"no valid {x.name} >= {lower} fits")
        else:
            raise _beyond_candidates(x, n)
    return n


def _last_fitting(fits, lower, upper, bound) -> int:
    """The last n in [lower, upper) that fits, ``fits(lower)`` true and ``fits(upper)`` false:
    galloping from the closed-form ``bound`` (else from lower), then bisection."""
    start = lower if bound is None else min(max(lower, int(sp.floor(bound))), upper)
    if fits(start):
        lo, stepu, hi = start, 1, None
        while hi is None:
            cand = min(start + stepu, upper)
            if not fits(cand):
                hi = cand
            else:
                lo, stepu = cand, stepu * 2
    else:
        hi, stepd = start, 1
        while not fits(max(lower, hi - stepd)):
            hi, stepd = max(lower, hi - stepd), stepd * 2
        lo = max(lower, hi - stepd)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _beyond_candidates(x, n) -> BeyondSearchBound:
    return BeyondSearchBound(f"no {x.name} meeting the divisibility rule within {MAX_CANDIDATES} "
                             f"candidates of the memory boundary (stopped at {x.name} = {short(n)}): "
                             "beyond the search bound; no answer is claimed", MAX_CANDIDATES)


def smallest(total, unknown, capacity, values: Mapping | None = None, *,
             valid: Callable[[int], bool] | None = None, lower: int = 1,
             upper: int | None = None) -> Solution:
    r"""The smallest integer ``unknown`` for which ``total <= capacity``.

    Parameters
    ----------
    total : Total
        A total that does not grow with the unknown (memory in d, t, p, ...).
    unknown : str or sympy.Symbol
        A registered symbol, e.g. ``"d"``.
    capacity : number
        The memory available [bytes].
    values : mapping
        Values of every other symbol of the total.
    valid : callable, optional
        A divisibility rule the answer must also satisfy (e.g. t divides the heads).
    lower, upper : int
        The range searched.

    Raises
    ------
    NoFitError
        When the terms that do not shrink with the unknown alone reach the capacity (the
        error names them and their floor), or nothing fits up to a given ``upper``.
    BeyondSearchBound
        When an answer may exist but lies above :data:`memsym.limits.SEARCH_BOUND` (2^256),
        or ``valid`` refuses :data:`memsym.limits.MAX_CANDIDATES` (2^20) candidates in a row.

    Examples
    --------
    The seed-000 question, smallest d for GPT-3 175B on 80 GB GPUs with t = 8, p = 8:

    >>> from memsym import model_state, byte_widths
    >>> M = model_state("distributed-optimizer", convention="seed000").subs(byte_widths(convention="seed000"))
    >>> sol = smallest(M, "d", 80 * 10**9, {"N": 175 * 10**9, "t": 8, "p": 8})
    >>> sol.closed_form, sol.value
    (16*N/(C*p*t - 2*N), 1)
    """
    return _search(total, unknown, capacity, values, valid, lower, upper, True)


def largest(total, unknown, capacity, values: Mapping | None = None, *,
            valid: Callable[[int], bool] | None = None, lower: int = 1,
            upper: int | None = None) -> Solution:
    """The largest integer ``unknown`` for which ``total <= capacity`` (the total must not
    shrink as the unknown grows: parameters, micro-batch size, sequence length).

    Parameters
    ----------
    total : Total
        A total that does not shrink as the unknown grows.
    unknown : str or sympy.Symbol
        A registered symbol, e.g. ``"b"``.
    capacity : number
        The memory available [bytes].
    values : mapping
        Values of every other symbol of the total.
    valid, lower, upper
        As in :func:`smallest`.

    Examples
    --------
    >>> from memsym import model_state, byte_widths
    >>> M = model_state("ddp", convention="seed000").subs(byte_widths("ddp", convention="seed000"))
    >>> largest(M, "N", 80 * 10**9, {"d": 1, "t": 1, "p": 1}).value
    5000000000
    """
    return _search(total, unknown, capacity, values, valid, lower, upper, False)


def smallest_gpus(total, capacity, values: Mapping | None = None) -> Solution:
    r"""The fewest GPUs :math:`G = d\,t\,p` that fit, for fixed t and p.

    The total is rewritten with :math:`d = G/(t p)` and solved for G over the positive reals;
    the integer answer is then the smallest multiple of :math:`t p` that fits.


    Parameters
    ----------
    total : Total
        The per-GPU total, symbolic in d (and t, p).
    capacity : number
        The memory available [bytes].
    values : mapping
        Values of t, p and every other symbol but d.

    Examples
    --------
    >>> from memsym import model_state, byte_widths
    >>> M = model_state("zero3", convention="seed000").subs(byte_widths("zero3", convention="seed000"))
    >>> sol = smallest_gpus(M, 80 * 10**9, {"N": 70 * 10**9, "t": 2, "p": 1})
    >>> sol.closed_form, sol.value
    (16*N/C, 14)
    """
    vals = as_values(values)
    tp = vals.get(t, t) * vals.get(p, p)
    if not sp.sympify(tp).is_Integer:
        raise InvalidValueError("smallest_gpus needs values for t and p")
    rewritten = total.map(lambda x: x.xreplace({d: G / (t * p)}))
    # the smallest multiple of t p is rounded up to in one step (a walk of up to t p - 1
    # candidates would be unbounded for t p up to 2^80)
    return _search(rewritten, G, capacity, vals, None, int(tp), None, True, multiple_of=int(tp))

def first_true(pred, lo: int, hi: int, start: int):
    """The smallest n in [lo, hi] with pred(n), for pred false...false true...true; None if
    pred(hi) is false.  Galloping from ``start`` then bisection: O(log(hi - lo)) calls."""
    if not pred(hi):
        return None
    start = min(max(lo, start), hi)
    if pred(start):
        h, step = start, 1
        while h - step >= lo and pred(h - step):
            h, step = h - step, step * 2
        low = max(lo - 1, h - step)
    else:
        low, step, h = start, 1, None
        while h is None:
            cand = min(start + step, hi)
            if pred(cand):
                h = cand
            else:
                low, step = cand, step * 2
    while h - low > 1:
        mid = (low + h) // 2
        low, h = (low, mid) if pred(mid) else (mid, h)
    return h
