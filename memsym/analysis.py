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

from .errors import BeyondSearchBound, InvalidValueError, NoFitError, UnknownNameError
from .limits import MAX_CANDIDATES, SEARCH_BOUND
from .printing import latex, tidy
from .symbols import C, G, d, lookup, p, t
# the symbols under other names where solve_job rewrites d = G / (t p c)
from .symbols import c as c_, d as d_, p as p_, t as t_
from .values import as_values, exact
from .text import approx, short
from .units import capacity_bytes
from .job import Job, whole
from .training import job_memory

__all__ = ["Solution", "smallest", "largest", "smallest_gpus", "JobSolution", "solve_job",
           "JOB_UNKNOWNS"]


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


@functools.lru_cache(maxsize=256)
def _closed_form(expr: sp.Expr, unknown: sp.Symbol):
    """Positive real solutions of ``expr = C`` for ``unknown``, or None if solve cannot."""
    try:
        sols = sp.solve(sp.Eq(expr, C), unknown)
    except (NotImplementedError, ValueError, TypeError):  # pragma: no cover - sympy gaps
        return None
    sols = [tidy(s) for s in sols if s.is_real is not False]
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


def _bound(expr, x, vals, cap, want_small: bool = True):
    """(closed form, exact real boundary) or (None, None).

    A peak over the step's phases is ``... Max(a_1, ..., a_k) ...`` (one Max node, entering
    linearly): it fits exactly when every branch (the Max replaced by one a_i) fits, so the
    boundary is the largest branch boundary for a falling total (``want_small``) and the
    smallest for a rising one; branches that fit at every x (no positive root) do not bind.
    The closed form is then ``Max`` (or ``Min``) of the branches' closed forms."""
    maxes = [node for node in sp.preorder_traversal(expr) if isinstance(node, sp.Max)]
    if len(set(maxes)) == 1:
        node = maxes[0]
        found = []
        for arg in node.args:
            branch = expr.xreplace({node: arg})
            if x not in branch.xreplace(vals).free_symbols:
                continue
            sol, val = _bound(branch, x, vals, cap, want_small)
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
    # approx: exact numbers shown safely beyond float range (no inf, no OverflowError)
    return NoFitError(
        f"nothing fits: {names} alone need {_gb(floor)} GB "
        f"(>= capacity {_gb(cap)} GB) {where} {x.name} is",
        binding=tuple(parts), floor=floor)


def _gb(value) -> str:
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

    closed, bound = _bound(expr, x, vals, cap, want_small)
    if want_small:
        if not fits(upper):
            if user_upper is not None:
                raise NoFitError(f"nothing fits with {x.name} <= {upper}: the total at "
                                 f"{x.name} = {upper} is {_gb(_value(fixed, x, upper))} GB "
                                 f"(> capacity {_gb(cap)} GB)")
            lim = sp.limit(fixed, x, sp.oo)
            if lim >= cap:
                raise _floor_message(total, x, vals, cap, +1)
            raise _beyond(x, "smallest", bound)
        # the first n that fits in [lower, upper]: start at the exact boundary when there is
        # one, else gallop upwards from lower; then bisect (fits is monotone in n)
        start = lower if bound is None else min(max(lower, int(sp.ceiling(bound))), upper)
        # the closed form is exact, so the boundary is at most one below start; the gallop
        # still checks both ways in case a sympy root was the wrong one
        hi = _first_true(fits, lower, upper, start)
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
        relation = ">="
    else:
        if not fits(lower):
            raise _floor_message(total, x, vals, cap, -1)
        if fits(upper):
            if user_upper is None:
                raise _beyond(x, "largest", bound)
            n = upper
        else:
            # the last n that fits: from the exact boundary, or gallop up from lower; bisect
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
            n = lo
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
        relation = "<="
    return Solution(x, int(n), closed, bound, relation, _value(fixed, x, n), cap)


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


# ---------------------------------------------------------------------------------------------
# solving a whole training job (model states + activations + allowances, most-loaded stage)
# ---------------------------------------------------------------------------------------------
#: unknown -> (job option, registry symbol, "smallest" or "largest", meaning)
JOB_UNKNOWNS = {
    "dp": ("d", "d", "smallest", "data-parallel size"),
    "tp": ("t", "t", "smallest", "tensor-parallel size"),
    "pp": ("p", "p", "smallest", "pipeline-parallel size"),
    "cp": ("c", "c", "smallest", "context-parallel size"),
    "gpus": ("d", "G", "smallest", "number of GPUs G = t p c d (t, p, c fixed)"),
    "micro-batch-size": ("micro_batch_size", "b", "largest", "micro-batch size"),
    "seq-length": ("seq_length", "s", "largest", "sequence length"),
}
_JOB_ALIASES = {"d": "dp", "t": "tp", "p": "pp", "c": "cp", "G": "gpus", "b": "micro-batch-size",
                "s": "seq-length", "micro_batch_size": "micro-batch-size",
                "seq_length": "seq-length", "world_size": "gpus"}
#: Search ranges of the unknowns without a natural limit (galloping and bisection: about
#: 2 log2 of the range job estimates; an answer beyond them is refused, never guessed).
_JOB_UPPER = {"d": 2**20, "micro_batch_size": 2**16, "seq_length": 2**24}
#: Consecutive candidates refused by a launch rule before the search gives up on a region.
_RULE_WINDOW = 4096


@dataclass(frozen=True)
class JobSolution(Solution):
    """The answer to a sizing question about a whole training job.

    Attributes
    ----------
    unknown : sympy.Symbol
        The registry symbol solved for (``d``, ``t``, ``p``, ``c``, ``G``, ``b`` or ``s``).
    value : int
        The integer answer, verified against :func:`memsym.training.job_memory` under the
        launch rules of :mod:`memsym.rules`: it fits, and the next admissible candidate
        towards "not fitting" does not (or no smaller/larger admissible candidate exists).
    closed_form : sympy.Expr or None
        The boundary ``M(x) = C`` of the most-loaded stage's total solved for the unknown
        over the positive reals, in every other symbol (None where there is none).
    bound : sympy.Expr or None
        That boundary at the job's other values (exact).
    relation : str
        ``">="`` (smallest) or ``"<="`` (largest).
    memory : sympy.Expr
        The total [bytes] of the job at the answer (its most-loaded stage).
    capacity : sympy.Expr
        GPU memory compared with [bytes].
    stage : int
        The most-loaded pipeline stage at the answer.
    notes : tuple of str
        How the integer was found and checked; which terms make the boundary implicit.
    neighbour : tuple or None
        (candidate, memory [bytes]) of the next admissible candidate checked not to fit.
    job : memsym.job.Job
        The job at the answer.
    tried : tuple of (int, sympy.Expr)
        Every admissible candidate evaluated (value, memory [bytes]), the answer and then the
        neighbour last.
    """

    # Solution's fields (unknown ... capacity) and its latex(), then the job's own
    stage: int
    notes: tuple = ()
    neighbour: tuple | None = None
    job: object = None
    tried: tuple = ()


def _job_unknown(unknown: str) -> str:
    name = _JOB_ALIASES.get(unknown, unknown)
    if name not in JOB_UNKNOWNS:
        raise UnknownNameError("unknown", unknown, list(JOB_UNKNOWNS))
    return name


def _divisors(n: int) -> list:
    """The divisors of ``n`` in ascending order (``n`` at most 2^40: a bounded loop)."""
    if n > 2**40:
        raise InvalidValueError(f"{n} is too large to enumerate its divisors (at most 2^40)")
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def _first_true(pred, lo: int, hi: int, start: int):
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


def solve_job(job, unknown: str, capacity=None, *, world_size: int | None = None,
              fix_dp: bool = False) -> JobSolution:
    r"""The smallest (dp, tp, pp, cp, gpus) or largest (micro-batch-size, seq-length) value
    of ``unknown`` for which the whole job fits: model states + activations + allowances on
    the most-loaded GPU (:func:`memsym.training.job_memory`), the other settings fixed.

    .. math:: x^\star = \min\{x : \max_i M_i(x) \le C\}
        \quad\text{or}\quad \max\{x : \max_i M_i(x) \le C\}

    First the closed form: the most-loaded stage's total is solved for the unknown over the
    positive reals (:func:`smallest` / :func:`largest` on the total with the other values
    substituted); where the total is not an explicit function of the unknown (the stage's
    parameter counts change with p in steps) the notes say so.  Then the integer is found on
    the estimate itself: every candidate is built as a job (:meth:`memsym.job.Job.replace`)
    under the launch rules of :mod:`memsym.rules`; a candidate a rule refuses is skipped.
    t and p are enumerated in ascending order up to the heads and layers; d, c, b and s are
    found by bounded galloping and bisection (memory is monotone in each); with a global
    batch size, d and b range over the divisors of B/b and B/d.  The answer is verified: it
    fits and the next admissible candidate towards "not fitting" does not.

    Parameters
    ----------
    job : memsym.job.Job
        The job (:func:`memsym.job.job`); the unknown's own value in it is a starting point.
    unknown : {"dp", "tp", "pp", "cp", "gpus", "micro-batch-size", "seq-length"}
        What to solve for ("gpus": G = t p c d with t, p, c fixed, d solved).
    capacity : int, str or None
        GPU memory [bytes] (``"80GB"`` accepted); None = the job's (its GPU's).
    world_size : int, optional
        Keep ``G = t p c d`` [GPUs] fixed while solving tp, pp, cp or micro-batch-size: each
        candidate's d is ``G/(t p c)`` (candidates it does not divide are skipped).
    fix_dp : bool
        With ``world_size``: keep the job's d as well (only candidates with
        ``t p c d = G`` remain).

    Returns
    -------
    JobSolution

    Raises
    ------
    NoFitError
        When no admissible value fits (the message names the floor for d, c, gpus).
    BeyondSearchBound
        When an answer may lie beyond the search range (no answer is claimed).

    Examples
    --------
    >>> from memsym.job import job
    >>> sol = solve_job(job("llama2-7b", tp=1, pp=1, seq_length=4096), "dp", 80 * 10**9)
    >>> sol.relation, sol.value >= 1, sol.memory <= sol.capacity
    ('>=', True, True)

    References
    ----------
    Megatron-LM's launch rules (:mod:`memsym.rules`); the total of :mod:`memsym.training`.
    """
    if not isinstance(job, Job):
        raise InvalidValueError("solve_job needs a memsym.job.Job (memsym.job.job(model, ...)), "
                                f"got {type(job).__name__}")
    name = _job_unknown(unknown)
    field, sym_name, direction, meaning = JOB_UNKNOWNS[name]
    cap_src = capacity if capacity is not None else job.capacity
    if cap_src is None:
        raise InvalidValueError(f"solve {name} needs a GPU memory capacity (capacity=80e9, "
                                "'80GB', or a job built with gpu=...)")
    cap = sp.Integer(capacity_bytes(cap_src))
    x = lookup(sym_name)
    lay, trn = job.layout, job.training
    tpc = lay.t * lay.p * lay.c
    notes = []
    extra = {}
    if world_size is not None:
        if name in ("dp", "gpus"):
            raise InvalidValueError(f"solve {name} with a fixed world size: the world size "
                                    "already fixes d (drop world_size)")
        extra["world_size"] = whole(world_size, "world size")
        if fix_dp:
            extra["d"] = lay.d

    # -- the closed form on the most-loaded stage's total, the other values substituted
    est = job_memory(job)
    expr = est.total.expr
    vals = dict(est.values)
    sym_total = est.total
    if name == "gpus":
        sym_total = est.total.map(lambda e_: e_.xreplace({d_: G / (t_ * p_ * c_)}))
        expr = sym_total.expr
        vals.pop(d_, None)
    vals.pop(x, None)
    closed = bound = None
    if name == "pp":
        notes.append("no closed form in p: the stage's parameter counts (N_tp, N_rep: its "
                     "decoder layers, the embedding on the first stage, the output layer on "
                     "the last) change with p in steps, and the most-loaded stage can move; "
                     "p was enumerated")
    elif x in expr.free_symbols:
        try:
            closed, bound = _bound(expr, x, vals, cap, want_small=direction == "smallest")
        except (NotImplementedError, ValueError, TypeError):  # pragma: no cover - sympy gaps
            closed, bound = None, None
        if closed is None:
            notes.append(f"no closed form in {x.name}: sympy finds no positive root of "
                         f"M({x.name}) = C for this total; the integer was searched")
        if name == "tp":
            notes.append("the closed form holds the stage's parameter counts at the given t; "
                         "N_tp changes with t only through the vocabulary padding (a multiple "
                         "of 128 t), so t was enumerated")
        if name == "seq-length" and job.model.position_embedding_type == "learned_absolute":
            notes.append("the learned position embedding (max_position_embeddings x h) is held "
                         "at the given s in the closed form")
    else:
        notes.append(f"the total does not depend on {x.name} at these settings")

    # -- the integer, on the estimate under the same rules
    cache = {}

    def at(n: int):
        """(memory, estimate, job) at candidate n, or None where a launch rule refuses it."""
        if n not in cache:
            try:
                jn = job.replace(**{field: n}, **extra)
            except InvalidValueError:     # DivisibilityError and other launch rules
                cache[n] = None
            else:
                e_ = job_memory(jn)
                cache[n] = (e_.bytes_total, e_, jn)
        return cache[n]

    def fits(n: int) -> bool:
        got = at(n)
        return got is not None and got[0] <= cap

    smallest_ = direction == "smallest"
    value = neighbour = None
    if name in ("tp", "pp"):
        limit = job.model.num_attention_heads if name == "tp" else job.model.num_layers
        tried = []
        # only divisors can pass tp-heads / pp-layers (an even split): a bounded candidate list
        # (at most 2 sqrt(limit) values); with uneven first/last stages every p may split
        uneven = name == "pp" and (lay.first_stage_layers is not None
                                   or lay.last_stage_layers is not None)
        small = [q for q in range(1, int(limit ** 0.5) + 1) if limit % q == 0]
        cands = range(1, limit + 1) if uneven else sorted(set(small + [limit // q for q in small]))
        for n in cands:
            got = at(n)
            if got is None:
                continue
            tried.append(n)
            if got[0] <= cap:
                value = n
                break
        if value is None:
            if not tried:
                raise NoFitError(f"nothing fits: every {name} up to {limit} breaks a launch rule")
            low = min(tried, key=lambda n: at(n)[0])
            raise NoFitError(f"nothing fits: no admissible {x.name} up to {limit} fits "
                             f"{_gb(cap)} GB; the least is {_gb(at(low)[0])} GB at "
                             f"{x.name} = {low}")
        below = [n for n in tried if n < value]
        if below:
            neighbour = (below[-1], at(below[-1])[0])
        notes.append(f"{x.name} enumerated 1, 2, ... {limit}; {len(tried) - 1} admissible "
                     f"smaller value(s) checked not to fit, the others refused by a launch rule")
    else:
        base = getattr(lay, field) if hasattr(lay, field) else trn.value(field)
        lo, hi = 1, _JOB_UPPER.get(field, 2**20)
        cands = None
        if field == "c":
            hi = trn.batch.seq_length
        if field == "seq_length" and job.model.max_position_embeddings:
            hi = job.model.max_position_embeddings
        if trn.batch.global_batch_size is not None and field in ("d", "micro_batch_size"):
            other = trn.batch.micro_batch_size if field == "d" else lay.d
            if trn.batch.global_batch_size % other:
                raise InvalidValueError(f"global batch size {trn.batch.global_batch_size} is not a "
                                        f"multiple of {other}")
            cands = _divisors(trn.batch.global_batch_size // other)
        if cands is not None:
            val = cands.__getitem__
            lo_i, hi_i = 0, len(cands) - 1
            start_n = base if bound is None else int(sp.ceiling(bound) if smallest_ else sp.floor(bound))
            start = next((i for i, v_ in enumerate(cands) if v_ >= start_n), hi_i)
        else:
            def val(i):
                return i
            lo_i, hi_i = lo, hi
            start = base
            if bound is not None and bound.is_finite:
                start = int(sp.ceiling(bound)) if smallest_ else int(sp.floor(bound))

        def admissible_i(i, step):
            for _ in range(_RULE_WINDOW):
                if i < lo_i or i > hi_i:
                    return None
                if at(val(i)) is not None:
                    return i
                i += step
            return None

        # the search range's ends are admissible candidates (a rule may refuse the limits)
        lo_a, hi_a = admissible_i(lo_i, +1), admissible_i(hi_i, -1)
        if lo_a is None or hi_a is None:
            raise NoFitError(f"nothing fits: every candidate {x.name} in {val(lo_i)}..{val(hi_i)} "
                             f"checked breaks a launch rule")
        lo_i, hi_i = lo_a, hi_a
        if smallest_:
            def pred(i):
                j_ = admissible_i(i, +1)
                return j_ is not None and fits(val(j_))
            first = _first_true(pred, lo_i, hi_i, start)
            if first is None:
                floor = sp.limit(expr.xreplace(vals), x, sp.oo) if x in expr.free_symbols else None
                if name in ("dp", "cp", "gpus") and floor is not None and floor >= cap:
                    raise _floor_message(sym_total, x, vals, cap, +1)
                raise NoFitError(f"nothing fits: no admissible {x.name if name != 'gpus' else 'd'}"
                                 f" up to {val(hi_i)} fits {_gb(cap)} GB")
            i_ans = admissible_i(first, +1)
            prev = admissible_i(i_ans - 1, -1)
        else:
            def pred(i):     # true ... true false ... false  ->  first false
                j_ = admissible_i(i, -1)
                return not (j_ is not None and fits(val(j_)))
            first_false = _first_true(pred, lo_i, hi_i, start)
            if first_false is None:
                i_ans = admissible_i(hi_i, -1)
                prev = None
                notes.append(f"every admissible {x.name} up to {val(hi_i)} fits: the answer is "
                             "the search limit" + (" (max_position_embeddings: Megatron-LM asserts "
                                                   "max_position_embeddings >= seq_length)"
                                                   if field == "seq_length" and cands is None
                                                   and hi == job.model.max_position_embeddings
                                                   else ""))
            else:
                i_ans = admissible_i(first_false - 1, -1) if first_false > lo_i else None
                prev = admissible_i(first_false, +1)
            if i_ans is None:
                raise NoFitError(f"nothing fits: {x.name} = {val(admissible_i(lo_i, +1) or lo_i)} "
                                 f"already needs {_gb(at(val(admissible_i(lo_i, +1) or lo_i))[0])}"
                                 f" GB (> capacity {_gb(cap)} GB)"
                                 if admissible_i(lo_i, +1) is not None else
                                 f"nothing fits: every {x.name} breaks a launch rule")
        value = val(i_ans)
        if prev is not None:
            neighbour = (val(prev), at(val(prev))[0])
        how = ("the divisors of the global batch" if cands is not None else
               f"{x.name if name != 'gpus' else 'd'} in 1..{val(hi_i)} by galloping and bisection")
        notes.append(f"integer found on the estimate over {how}, candidates a launch rule "
                     "refuses skipped")
    mem, e_ans, j_ans = at(value)
    if not mem <= cap:                                  # pragma: no cover - defensive
        raise NoFitError(f"internal check failed: {x.name} = {value} does not fit")
    if neighbour is not None and neighbour[1] <= cap:   # pragma: no cover - defensive
        raise BeyondSearchBound(f"the total is not monotone in {x.name} here; no answer is claimed")
    shown = value * tpc if name == "gpus" else value
    if neighbour is not None:
        nb = neighbour[0] * tpc if name == "gpus" else neighbour[0]
        neighbour = (nb, neighbour[1])
        notes.append(f"checked: {x.name} = {shown} fits ({_gb(mem)} GB <= {_gb(cap)} GB) and the "
                     f"next admissible {x.name} = {nb} does not ({_gb(neighbour[1])} GB)")
    else:
        notes.append(f"checked: {x.name} = {shown} fits ({_gb(mem)} GB <= {_gb(cap)} GB); no "
                     f"admissible {'smaller' if smallest_ else 'larger'} {x.name} exists")
    if e_ans.stage != est.stage:
        notes.append(f"the most-loaded stage moved from {est.stage} to {e_ans.stage}")
    scale = tpc if name == "gpus" else 1
    seen = [(n * scale, got[0]) for n, got in cache.items() if got is not None]
    last = [value * scale] + ([neighbour[0]] if neighbour is not None else [])
    tried = tuple([row for row in seen if row[0] not in last]
                  + [row for v_ in last for row in seen if row[0] == v_])
    return JobSolution(x, int(shown), closed, bound, ">=" if smallest_ else "<=", mem, cap,
                       e_ans.stage, tuple(notes), neighbour, j_ans, tried)

