r"""Sizing questions about a whole training job: the smallest d, t, p, c or GPU count, or the
largest micro-batch or sequence, that fits.

The job's total (model states, activations and allowances of its most-loaded stage,
:mod:`memsym.training`) is solved for the unknown with :mod:`memsym.analysis`'s closed form
over the reals, then the integer answer is found under the frameworks' launch rules (galloping
and bisection over the admissible candidates) and verified by substituting back.

.. math:: \min\{x \in \mathbb{Z}_{>0} \text{ admissible} : M(x) \le C\}
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from .analysis import (Solution, closed_bound, first_true, floor_at_infinity, floor_message,
                       gb_text)
from .errors import BeyondSearchBound, InvalidValueError, NoFitError, UnknownNameError
from .job import Job, whole
from .symbols import G, lookup
# the symbols under other names where solve_job rewrites d = G / (t p c)
from .symbols import c as c_, d as d_, p as p_, t as t_
from .training import job_memory
from .units import capacity_bytes

__all__ = ["JobSolution", "solve_job", "JOB_UNKNOWNS"]

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


def _device_count(job, notes: list):
    """The job whose total is the device's count: whether a job fits is judged on it on every
    path (:data:`memsym.terms.allowances.VERDICTS`), so a solve compares it with C whatever
    metric the job names (said in ``notes``)."""
    metric = job.training.memory.metric
    if metric == "device":
        return job
    notes.append(f"solved on the device's count (what must fit C), not the {metric} metric "
                 "the job names")
    return job.replace(metric="device")


def solve_job(job, unknown: str, capacity=None, *, world_size: int | None = None,
              fix_dp: bool = False, tidied: bool = True) -> JobSolution:
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
    tidied : bool
        False: the closed form as solved, not in its printed form (:func:`memsym.printing.tidy`,
        most of the time of a whole job's solve), for a caller that uses only the value.

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
    lay = job.layout
    tpc = lay.t * lay.p * lay.c
    notes = []
    job = _device_count(job, notes)
    extra = {}
    if world_size is not None:
        if name in ("dp", "gpus"):
            raise InvalidValueError(f"solve {name} with a fixed world size: the world size "
                                    "already fixes d (drop world_size)")
        extra["world_size"] = whole(world_size, "world size")
        if fix_dp:
            extra["d"] = lay.d

    # -- the closed form on the most-loaded stage's total, the other values substituted
    est, expr, vals, sym_total = _stage_total(job, name, x)
    closed, bound = _closed_form(job, name, x, expr, vals, cap, direction, notes, tidied)

    # -- the integer, on the estimate under the same rules
    candidates = _Candidates(job, field, extra, cap)
    smallest_ = direction == "smallest"
    if name in ("tp", "pp"):
        value, neighbour = _enumerate_divisors(candidates, name, x, notes)
    else:
        ladder, start, hi = _ladder(candidates, field, bound, smallest_)
        value, neighbour = _search_integer(candidates, ladder, start, hi, name, field, x,
                                           smallest_, (expr, vals, sym_total), notes)
    return _checked_solution(candidates, est, name, x, value, neighbour, tpc, closed, bound,
                             smallest_, notes)


def _checked_solution(candidates, est, name, x, value, neighbour, tpc, closed, bound,
                      smallest_, notes) -> JobSolution:
    """The answer checked to fit (and its neighbour not to), as a :class:`JobSolution`."""
    cap = candidates.cap
    mem, e_ans, j_ans = candidates.at(value)
    if not mem <= cap:                                  # pragma: no cover - defensive
        raise NoFitError(f"internal check failed: {x.name} = {value} does not fit")
    if neighbour is not None and neighbour[1] <= cap:   # pragma: no cover - defensive
        raise BeyondSearchBound(f"the total is not monotone in {x.name} here; no answer is claimed")
    shown = value * tpc if name == "gpus" else value
    if neighbour is not None:
        nb = neighbour[0] * tpc if name == "gpus" else neighbour[0]
        neighbour = (nb, neighbour[1])
        notes.append(f"checked: {x.name} = {shown} fits ({gb_text(mem)} GB <= {gb_text(cap)} GB) and the "
                     f"next admissible {x.name} = {nb} does not ({gb_text(neighbour[1])} GB)")
    else:
        notes.append(f"checked: {x.name} = {shown} fits ({gb_text(mem)} GB <= {gb_text(cap)} GB); no "
                     f"admissible {'smaller' if smallest_ else 'larger'} {x.name} exists")
    if e_ans.stage != est.stage:
        notes.append(f"the most-loaded stage moved from {est.stage} to {e_ans.stage}")
    scale = tpc if name == "gpus" else 1
    seen = [(n * scale, got[0]) for n, got in candidates.cache.items() if got is not None]
    last = [value * scale] + ([neighbour[0]] if neighbour is not None else [])
    tried = tuple([row for row in seen if row[0] not in last]
                  + [row for v_ in last for row in seen if row[0] == v_])
    return JobSolution(x, int(shown), closed, bound, ">=" if smallest_ else "<=", mem, cap,
                       e_ans.stage, tuple(notes), neighbour, j_ans, tried)


def _stage_total(job, name, x):
    """``(estimate, expr, values, total)``: the most-loaded stage's total, in G for "gpus"
    (d = G / (t p c)), and the job's values of every symbol but the unknown."""
    est = job_memory(job)
    expr = est.total.expr
    vals = dict(est.values)
    sym_total = est.total
    if name == "gpus":
        sym_total = est.total.map(lambda e_: e_.xreplace({d_: G / (t_ * p_ * c_)}))
        expr = sym_total.expr
        vals.pop(d_, None)
    vals.pop(x, None)
    return est, expr, vals, sym_total


def _closed_form(job, name, x, expr, vals, cap, direction, notes, tidied=True):
    """``(closed, bound)``: the boundary M(x) = C solved for x, and at the job's values."""
    closed = bound = None
    if name == "pp":
        notes.append("no closed form in p: the stage's parameter counts (N_tp, N_rep: its "
                     "decoder layers, the embedding on the first stage, the output layer on "
                     "the last) change with p in steps, and the most-loaded stage can move; "
                     "p was enumerated")
    elif x in expr.free_symbols:
        try:
            closed, bound = closed_bound(expr, x, vals, cap, direction == "smallest", tidied)
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
    return closed, bound


class _Candidates:
    """The job at each candidate value n of the unknown, estimated once and kept."""

    def __init__(self, job, field, extra, cap):
        self.job, self.field, self.extra, self.cap = job, field, extra, cap
        self.cache = {}

    def at(self, n: int):
        """(memory, estimate, job) at candidate n, or None where a launch rule refuses it."""
        if n not in self.cache:
            try:
                jn = self.job.replace(**{self.field: n}, **self.extra)
            except InvalidValueError:     # DivisibilityError and other launch rules
                self.cache[n] = None
            else:
                e_ = job_memory(jn)
                self.cache[n] = (e_.bytes_total, e_, jn)
        return self.cache[n]

    def fits(self, n: int) -> bool:
        got = self.at(n)
        return got is not None and got[0] <= self.cap


def _enumerate_divisors(candidates, name, x, notes):
    """``(value, neighbour)``: the smallest t or p that fits, enumerated in ascending order."""
    job, cap, at = candidates.job, candidates.cap, candidates.at
    lay = job.layout
    value = neighbour = None
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
                         f"{gb_text(cap)} GB; the least is {gb_text(at(low)[0])} GB at "
                         f"{x.name} = {low}")
    below = [n for n in tried if n < value]
    if below:
        neighbour = (below[-1], at(below[-1])[0])
    notes.append(f"{x.name} enumerated 1, 2, ... {limit}; {len(tried) - 1} admissible "
                 f"smaller value(s) checked not to fit, the others refused by a launch rule")
    return value, neighbour


def _same(i):
    return i


class _Ladder:
    """The candidates searched, by position i in lo..hi: the value ``val(i)`` (i itself, or
    the i-th divisor of the global batch)."""

    def __init__(self, candidates, val, lo, hi, divisors):
        # divisors: what a list of candidates holds (a phrase), or None for every integer
        self.candidates, self.val, self.lo, self.hi = candidates, val, lo, hi
        self.divisors = divisors

    def admissible(self, i, step):
        """The first position from i in steps of ``step`` that a launch rule admits, or None."""
        for _ in range(_RULE_WINDOW):
            if i < self.lo or i > self.hi:
                return None
            if self.candidates.at(self.val(i)) is not None:
                return i
            i += step
        return None


def _ladder(candidates, field, bound, smallest_):
    """``(ladder, start, hi)``: the positions searched for ``field``, where the search
    starts (the closed form's bound, else the job's own value), and the value limit hi."""
    job = candidates.job
    lay, trn = job.layout, job.training
    base = getattr(lay, field) if hasattr(lay, field) else trn.value(field)
    lo, hi = 1, _JOB_UPPER.get(field, 2**20)
    cands = None
    if field == "c":
        hi = trn.batch.seq_length
        # only c = 1 and the c with 2c | s pass the cp-seq rule (memsym.rules_layout): a
        # ladder over 1..s would give up after _RULE_WINDOW refusals before reaching s/2
        s_ = trn.batch.seq_length
        cands = [1] + ([c_ for c_ in _divisors(s_ // 2) if c_ > 1] if s_ % 2 == 0 else [])
    if field == "seq_length" and job.model.max_position_embeddings:
        hi = job.model.max_position_embeddings
    if trn.batch.global_batch_size is not None and field in ("d", "micro_batch_size"):
        other = trn.batch.micro_batch_size if field == "d" else lay.d
        if trn.batch.global_batch_size % other:
            raise InvalidValueError(f"global batch size {trn.batch.global_batch_size} is not a "
                                    f"multiple of {other}")
        cands = _divisors(trn.batch.global_batch_size // other)
    if cands is not None:
        lo_i, hi_i = 0, len(cands) - 1
        start_n = base if bound is None else int(sp.ceiling(bound) if smallest_ else sp.floor(bound))
        start = next((i for i, v_ in enumerate(cands) if v_ >= start_n), hi_i)
        what = ("1 and the c whose 2c divides the sequence length" if field == "c"
                else "the divisors of the global batch")
        return _Ladder(candidates, cands.__getitem__, lo_i, hi_i, what), start, hi
    start = base
    if bound is not None and bound.is_finite:
        start = int(sp.ceiling(bound)) if smallest_ else int(sp.floor(bound))
    return _Ladder(candidates, _same, lo, hi, None), start, hi


def _search_integer(candidates, ladder, start, hi, name, field, x, smallest_, total, notes):
    """``(value, neighbour)``: the answer found by galloping and bisection over ``ladder``;
    ``total`` is ``(expr, vals, sym_total)``, for the message when nothing fits."""
    val, cap = ladder.val, candidates.cap
    # the search range's ends are admissible candidates (a rule may refuse the limits)
    lo_a, hi_a = ladder.admissible(ladder.lo, +1), ladder.admissible(ladder.hi, -1)
    if lo_a is None or hi_a is None:
        raise NoFitError(f"nothing fits: every candidate {x.name} in {val(ladder.lo)}.."
                         f"{val(ladder.hi)} checked breaks a launch rule")
    ladder.lo, ladder.hi = lo_a, hi_a
    if smallest_:
        i_ans, prev = _smallest_position(ladder, start, name, x, total, cap)
    else:
        i_ans, prev = _largest_position(ladder, start, field, x, hi, cap, notes)
    neighbour = None
    value = val(i_ans)
    if prev is not None:
        neighbour = (val(prev), candidates.at(val(prev))[0])
    how = (ladder.divisors if ladder.divisors else
           f"{x.name if name != 'gpus' else 'd'} in 1..{val(ladder.hi)} by galloping and bisection")
    notes.append(f"integer found on the estimate over {how}, candidates a launch rule "
                 "refuses skipped")
    return value, neighbour


def _smallest_position(ladder, start, name, x, total, cap):
    """``(i_ans, prev)``: the first admissible position that fits and the one before it."""
    admissible, val, fits = ladder.admissible, ladder.val, ladder.candidates.fits

    def pred(i):
        j_ = admissible(i, +1)
        return j_ is not None and fits(val(j_))
    first = first_true(pred, ladder.lo, ladder.hi, start)
    if first is None:
        expr, vals, sym_total = total
        floor = floor_at_infinity(expr.xreplace(vals), x)
        if name in ("dp", "cp", "gpus") and floor is not None and floor >= cap:
            raise floor_message(sym_total, x, vals, cap, +1)
        raise NoFitError(f"nothing fits: no admissible {x.name if name != 'gpus' else 'd'}"
                         f" up to {val(ladder.hi)} fits {gb_text(cap)} GB")
    i_ans = admissible(first, +1)
    prev = admissible(i_ans - 1, -1)
    return i_ans, prev


def _largest_position(ladder, start, field, x, hi, cap, notes):
    """``(i_ans, prev)``: the last admissible position that fits and the one after it."""
    admissible, val, at = ladder.admissible, ladder.val, ladder.candidates.at
    fits = ladder.candidates.fits
    lo_i, hi_i = ladder.lo, ladder.hi

    def pred(i):     # true ... true false ... false  ->  first false
        j_ = admissible(i, -1)
        return not (j_ is not None and fits(val(j_)))
    first_false = first_true(pred, lo_i, hi_i, start)
    if first_false is None:
        i_ans = admissible(hi_i, -1)
        prev = None
        notes.append(f"every admissible {x.name} up to {val(hi_i)} fits: the answer is "
                     "the search limit" + (" (max_position_embeddings: Megatron-LM asserts "
                                           "max_position_embeddings >= seq_length)"
                                           if field == "seq_length" and not ladder.divisors
                                           and hi == ladder.candidates.job.model
                                           .max_position_embeddings
                                           else ""))
    else:
        i_ans = admissible(first_false - 1, -1) if first_false > lo_i else None
        prev = admissible(first_false, +1)
    if i_ans is None:
        raise NoFitError(f"nothing fits: {x.name} = {val(admissible(lo_i, +1) or lo_i)} "
                         f"already needs {gb_text(at(val(admissible(lo_i, +1) or lo_i))[0])}"
                         f" GB (> capacity {gb_text(cap)} GB)"
                         if admissible(lo_i, +1) is not None else
                         f"nothing fits: every {x.name} breaks a launch rule")
    return i_ans, prev
