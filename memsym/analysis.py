"""Sizing questions answered exactly: the smallest (or largest) integer that fits.

The total is solved for the unknown over the positive reals (closed form, cached per
expression), the boundary is evaluated exactly, then integrality and divisibility are
applied and the answer is verified by substituting back: the answer fits and its
neighbour does not.  ``integer=True`` is never used in ``solve`` (it returns ``[]``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Mapping

import sympy as sp

from .errors import InvalidValueError, NoFitError
from .symbols import C, lookup
from .values import as_values, exact

__all__ = ["Solution", "smallest", "largest", "smallest_gpus"]

_MAX_STEPS = 1 << 62  # search bound for integer unknowns (beyond any real cluster)


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
        from .printing import latex

        rel = r"\geq" if self.relation == ">=" else r"\leq"
        x = latex(self.unknown)
        parts = [x]
        if self.closed_form is not None:
            parts.append(f"{rel} {latex(self.closed_form)}")
        if self.bound is not None:
            parts.append(f"{'=' if self.closed_form is not None else rel} {float(self.bound):.6g}")
        return " ".join(parts) + rf" \;\Rightarrow\; {x} = {self.value}"

    def _repr_latex_(self) -> str:
        return f"${self.latex()}$"


@functools.lru_cache(maxsize=256)
def _closed_form(expr: sp.Expr, unknown: sp.Symbol):
    """Positive real solutions of ``expr = C`` for ``unknown``, or None if solve cannot."""
    try:
        sols = sp.solve(sp.Eq(expr, C), unknown)
    except (NotImplementedError, ValueError, TypeError):  # pragma: no cover - sympy gaps
        return None
    sols = [_tidy(s) for s in sols if s.is_real is not False]
    return tuple(sols) if sols else None


def _tidy(expr: sp.Expr) -> sp.Expr:
    """A closed form as a person writes it: common factors out, no minus sign leading the
    numerator and the denominator (``-16N/(-Cpt + 2N)`` becomes ``16N/(Cpt - 2N)``).

    >>> from memsym.symbols import C, N, p, t
    >>> _tidy(-16 * N / (-C * p * t + 2 * N))
    16*N/(C*p*t - 2*N)
    """
    expr = sp.factor_terms(sp.cancel(expr))
    num, den = sp.fraction(expr)
    if den.could_extract_minus_sign():
        num, den = -num, -den
    return sp.factor_terms(num) / sp.factor_terms(den)


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


def _bound(expr, x, vals, cap):
    """(closed form, exact real boundary) or (None, None)."""
    sols = _closed_form(expr, x)
    if not sols:
        return None, None
    for sol in sols:
        val = sol.xreplace({**vals, C: cap})
        if val.is_real and val.is_positive:
            return sol, val
    return sols[0], None


def _floor_message(total, x, vals, cap, direction):
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
    return NoFitError(
        f"nothing fits: {names} alone need {float(floor) / 1e9:.4g} GB "
        f"(>= capacity {float(cap) / 1e9:.4g} GB) {where} {x.name} is",
        binding=tuple(parts), floor=floor)


def _search(total, unknown, capacity, values, valid, lower, upper, want_small):
    x, cap, vals, expr, fixed = _prepare(total, unknown, capacity, values)
    for name, bound in (("lower", lower), ("upper", upper)):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 1):
            raise InvalidValueError(f"{name} must be a whole number >= 1, got {bound!r}")
    upper = _MAX_STEPS if upper is None else upper
    if upper < lower:
        raise InvalidValueError(f"upper {upper} is below lower {lower}")

    def fits(n: int) -> bool:
        return bool(_value(fixed, x, n) <= cap)

    closed, bound = _bound(expr, x, vals, cap)
    if want_small:
        # memory must fall as x grows; the floor is the limit at infinity
        if not fits(upper):
            lim = sp.limit(fixed, x, sp.oo) if upper >= _MAX_STEPS else _value(fixed, x, upper)
            if lim >= cap:
                raise _floor_message(total, x, vals, cap, +1)
        start = lower if bound is None else max(lower, int(sp.ceiling(bound)))
        start = min(start, upper)
        n = start
        if not fits(n):
            # no exact boundary (or rounding): gallop upwards, then bisect
            step, lo = 1, n
            while not fits(min(n + step, upper)):
                lo = n + step
                step *= 2
                if lo >= upper:
                    raise _floor_message(total, x, vals, cap, +1)
            hi = min(n + step, upper)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if fits(mid) else (mid, hi)
            n = hi
        while n > lower and fits(n - 1):
            n -= 1
        if valid is not None:
            while not (valid(n) and fits(n)):
                n += 1
                if n > upper:
                    raise InvalidValueError(f"no valid {x.name} <= {upper} fits")
        relation = ">="
    else:
        if not fits(lower):
            raise _floor_message(total, x, vals, cap, -1)
        n = lower if bound is None else max(lower, min(int(sp.floor(bound)), upper))
        if not fits(n):
            while n > lower and not fits(n):
                n = max(lower, n // 2)
        step = 1
        while n + step <= upper and fits(n + step):
            n += step
            step *= 2
        while step > 1:
            step //= 2
            if n + step <= upper and fits(n + step):
                n += step
        if valid is not None:
            while not (valid(n) and fits(n)):
                n -= 1
                if n < lower:
                    raise InvalidValueError(f"no valid {x.name} >= {lower} fits")
        relation = "<="
    return Solution(x, int(n), closed, bound, relation, _value(fixed, x, n), cap)


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
        When the terms that do not shrink with the unknown alone reach the capacity;
        the error names them and their floor.

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

    Examples
    --------
    >>> from memsym import model_state, byte_widths
    >>> M = model_state("zero3", convention="seed000").subs(byte_widths("zero3", convention="seed000"))
    >>> sol = smallest_gpus(M, 80 * 10**9, {"N": 70 * 10**9, "t": 2, "p": 1})
    >>> sol.closed_form, sol.value
    (16*N/C, 14)
    """
    from .symbols import G, d, p, t

    vals = as_values(values)
    tp = vals.get(t, t) * vals.get(p, p)
    if not sp.sympify(tp).is_Integer:
        raise InvalidValueError("smallest_gpus needs values for t and p")
    rewritten = total.map(lambda x: x.xreplace({d: G / (t * p)}))
    return smallest(rewritten, G, capacity, vals, valid=lambda n: n % int(tp) == 0, lower=int(tp))


