r"""The exact pipeline schedule: Megatron-LM's op order per rank, run on its data dependencies.

Each pipeline rank executes its forward and backward model-chunk passes in the order
Megatron-LM's ``forward_backward_pipelining_with(out)_interleaving`` issues them (warm-up
forwards, then one forward and one backward per steady step, then the cool-down backwards;
the interleaved order from ``get_schedule_table`` with ``microbatch_group_size_per_vp_stage``
N), each as soon as its input has arrived.  The makespan gives the bubble exactly — for
m not a multiple of p, m < p, uneven stages and any N — and the peak count of forwards
not yet backwarded gives the in-flight activations.  GPipe's order, and over v chunks per rank
torch's breadth-first ``ScheduleLoopedBFS``, run on the same dependencies.  Each rank's order
is :mod:`memsym.terms.pipeline_rank_order`'s.

References
----------
.. [megatron-lm] megatron/core/pipeline_parallel/schedules.py (rev d98e8a6):
   get_pp_rank_microbatches (num_warmup_microbatches = 2(p - rank - 1) + (v - 1) N, capped at
   m v; 1F1B: p - rank - 1 capped at m), get_schedule_table, and the checks in
   forward_backward_pipelining_with_interleaving (N in [p, m]; m mod N = 0 or >= p).
.. [narayanan] arXiv:2104.04473 §2.2 ((p-1)/m and (p-1)/(v m)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator
from fractions import Fraction
from functools import lru_cache

import sympy as sp

from ..errors import InvalidValueError, choose
from . import pipeline
from ..text import shared_doc
from .pipeline_rank_order import rank_order

__all__ = ["SCHEDULES", "MAX_OPS", "schedule_rule", "pass_dependency", "ready_passes",
           "live_by_held_gradients", "simulate", "Simulation", "bubble_fraction", "chunk_peak"]

_doc = shared_doc(schedule_params="""
    p : int
        Pipeline-parallel size (stages) [GPUs].
    m : int
        Micro-batches per step [1].
    v : int
        Model chunks per rank [1].
    """)

SCHEDULES = ("1f1b", "interleaved", "gpipe")
#: Bound on the forward + backward passes simulated (p m v 2).
MAX_OPS = 2_000_000


def _whole(x, what):
    if isinstance(x, bool) or int(x) != x or int(x) < 1:
        raise InvalidValueError(f"{what} must be a whole number >= 1, got {x!r:.40}")
    return int(x)


@_doc
def schedule_rule(p, m, v=1, group_size=None) -> str | None:
    """The Megatron-LM rule an interleaved schedule breaks, or None when it launches.

    Verbatim conditions of schedules.py / arguments.py (rev d98e8a6): interleaving needs
    p > 1 (p > 2 without p2p overlap, refused where a Megatron command is read,
    :mod:`memsym.readers.megatron_training`); N (``microbatch_group_size_per_vp_stage``, default p)
    must lie in [p, m]; the last group m mod N must be 0 or at least p.

    Parameters
    ----------
    {schedule_params}
    group_size : int, optional
        ``microbatch_group_size_per_vp_stage`` N (default p).

    Returns
    -------
    str or None
        The broken rule's message, or None.

    Examples
    --------
    >>> schedule_rule(4, 8, 2) is None
    True
    >>> schedule_rule(16, 1, 4)
    'microbatch_group_size_per_vp_stage N=16 must lie in [p=16, m=1]'
    >>> schedule_rule(4, 6, 2)
    'm mod N = 2 must be 0 or >= p = 4 (dependency bubbles)'
    """
    p, m, v = _whole(p, "p"), _whole(m, "m"), _whole(v, "v")
    if v == 1:
        return None
    if p == 1:
        return f"interleaved schedule needs p > 1, got p={p}"
    N = p if group_size is None else _whole(group_size, "group_size")
    if N > m or N < p:
        return f"microbatch_group_size_per_vp_stage N={N} must lie in [p={p}, m={m}]"
    rest = m % N
    if 0 < rest < p:
        return f"m mod N = {rest} must be 0 or >= p = {p} (dependency bubbles)"
    return None


def chunk_peak(rank: int, p: int, m: int, v: int, weights, N=None, gpipe: bool = False) -> tuple:
    """Micro-batches of each model chunk in flight on ``rank`` when the weight in flight
    peaks, over Megatron's op order (:func:`rank_order`) [1].

    With chunks of unequal size (a custom pipeline layout) the peak of what a rank holds
    need not fall at the end of its warm-up; walking the rank's forwards and backwards finds
    it (the first time it is reached).

    Parameters
    ----------
    rank, p, m, v : int
        The pipeline rank, pipeline size [GPUs], micro-batches [1], chunks per rank [1].
    weights : sequence of number
        What one micro-batch of each chunk holds (its decoder layers, say).
    N : int, optional
        ``microbatch_group_size_per_vp_stage``: micro-batches per group (default p; not
        parameters).
    gpipe : bool
        Breadth-first order (GPipe; torch's LoopedBFS with v > 1): every chunk holds all m.

    Returns
    -------
    tuple of int
        Per chunk, its micro-batches in flight at the peak.

    Examples
    --------
    Rank 0 of 2, chunks of 1 and 2 layers, 4 micro-batches (N = 2): the warm-up's 4 forwards
    and the one before the first backward hold chunk 0 three times and chunk 1 twice
    (7 layers); no later moment holds more:

    >>> chunk_peak(0, 2, 4, 2, (1, 2))
    (3, 2)
    """
    if len(weights) != v:
        raise InvalidValueError(f"give one weight per model chunk ({v}), got {len(weights)}")
    if 2 * m * v > MAX_OPS:
        raise InvalidValueError(f"{2 * m * v} forward and backward passes exceed {MAX_OPS}")
    live, held, best, best_live = [0] * v, 0, None, tuple([0] * v)
    for kind, _, ch in rank_order(rank, p, m, v, N, gpipe):
        step = 1 if kind == "F" else -1
        live[ch] += step
        held += step * weights[ch]
        if best is None or held > best:
            best, best_live = held, tuple(live)
    return best_live


def live_by_held_gradients(rank: int, p: int, m: int, v: int, N=None,
                           gpipe: bool = False) -> tuple:
    """The most chunk passes ``rank`` holds while h of its chunks hold unsharded gradients,
    for h = 1 .. v, over the rank's op order (:func:`rank_order`) [1].

    torch.distributed.pipelining runs each stage's backward with gradient sync off and
    accumulates its unsharded gradients (FSDP2) from the stage's first backward until its
    last micro-batch's backward, which reduce-scatters and frees them before the next op.
    With v stages per rank they come and go one stage at a time while the activations in
    flight fall: where the schedule runs its backwards in a cool-down (m = p interleaved,
    LoopedBFS) the rank never holds all its gradients beside its warm-up's activations.
    A chunk's gradients are counted whole from the start of its first backward, beside the
    pass that backward frees (an upper bound on the moment).

    Parameters
    ----------
    rank, p, m, v : int
        The pipeline rank, pipeline size [GPUs], micro-batches [1], chunks per rank [1].
    N : int, optional
        ``microbatch_group_size_per_vp_stage``: micro-batches per group of the interleaved
        warm-up (default p; torch: its round size; not parameters).
    gpipe : bool
        Breadth-first order (GPipe; torch's LoopedBFS with v > 1).

    Returns
    -------
    tuple of int
        Entry h - 1: the most chunk passes in flight while exactly h chunks hold gradients
        (0: never).

    Examples
    --------
    Interleaved at m = p = 8, v = 2 (torchtitan's Table 5 layout): the first rank's second
    chunk finishes its backwards before the first begins, so it holds one chunk's gradients
    beside all 16 chunk passes and never both; at m = 16 both, beside its warm-up's 23;
    1F1B holds its 8 with its gradients:

    >>> live_by_held_gradients(0, 8, 8, 2, N=8), live_by_held_gradients(0, 8, 16, 2, N=8)
    ((16, 0), (23, 23))
    >>> live_by_held_gradients(0, 8, 8, 1)
    (8,)
    """
    if 2 * m * v > MAX_OPS:
        raise InvalidValueError(f"{2 * m * v} forward and backward passes exceed {MAX_OPS}")
    live, holding, done, best = 0, set(), [0] * v, [0] * v
    for kind, _, ch in rank_order(rank, p, m, v, N, gpipe):
        if kind == "F":
            live += 1
        else:
            holding.add(ch)
        if holding:
            best[len(holding) - 1] = max(best[len(holding) - 1], live)
        if kind == "B":
            live -= 1
            done[ch] += 1
            if done[ch] == m:         # its last backward: reduce-scattered and freed
                holding.discard(ch)
    return tuple(best)


@dataclass(frozen=True)
class Simulation:
    """Result of :func:`simulate`: makespan [time units], ideal busy time of the busiest
    rank, bubble = makespan / busy - 1, and each rank's peak chunk-passes in flight."""

    makespan: Fraction
    busy: Fraction
    bubble: Fraction
    in_flight: tuple


def pass_dependency(kind: str, mb: int, gs: int, last: int) -> tuple | None:
    r"""The pass that pass ``(kind, mb, gs)`` waits for, or None [1].

    .. math:: F(i, g) \leftarrow F(i, g - 1), \qquad
        B(i, g) \leftarrow B(i, g + 1)\ (g < G),\quad B(i, G) \leftarrow F(i, G)

    A forward of micro-batch :math:`i` on global stage :math:`g` (``chunk * p + rank``) needs
    the previous stage's forward (the first stage none), a backward the next stage's backward,
    and the last stage's backward its own forward: the order Megatron-core's p2p sends impose
    (``schedules.py`` ``forward_backward_pipelining_*``).

    Parameters
    ----------
    kind : {"F", "B"}
        Forward or backward pass [1].
    mb, gs : int
        Micro-batch and global stage of the pass [1].
    last : int
        The last global stage, :math:`p v - 1` [1].

    Examples
    --------
    >>> pass_dependency("F", 0, 0, 3), pass_dependency("F", 2, 1, 3)
    (None, ('F', 2, 0))
    >>> pass_dependency("B", 1, 3, 3), pass_dependency("B", 1, 2, 3)
    (('F', 1, 3), ('B', 1, 3))

    References
    ----------
    Megatron-LM d98e8a64dd ``megatron/core/pipeline_parallel/schedules.py``.
    """
    if kind == "F":
        return ("F", mb, gs - 1) if gs > 0 else None
    return ("B", mb, gs + 1) if gs < last else ("F", mb, gs)


def ready_passes(orders: list, v: int) -> Iterator[tuple]:
    """The ranks' passes in an order the schedule can run them: the ranks in turn, each as far
    as its next pass's dependency (:func:`pass_dependency`) has run.

    Yields ``(rank, kind, mb, chunk, gs, dep)`` (``gs`` the global stage ``chunk * p + rank``,
    ``dep`` the pass it waited for or None); stops at the first turn in which no rank can go
    on, before every pass where the order deadlocks.

    Parameters
    ----------
    orders : list
        Each rank's :func:`rank_order`.
    v : int
        Model chunks per rank [1].

    Examples
    --------
    >>> [q[:3] for q in ready_passes([rank_order(r, 2, 1) for r in range(2)], 1)]
    [(0, 'F', 0), (1, 'F', 0), (1, 'B', 0), (0, 'B', 0)]

    References
    ----------
    Megatron-LM d98e8a64dd ``megatron/core/pipeline_parallel/schedules.py``.
    """
    p, pos, ran = len(orders), [0] * len(orders), set()
    last, progressed = p * v - 1, True
    while progressed:
        progressed = False
        for r in range(p):
            while pos[r] < len(orders[r]):
                kind, mb, ch = orders[r][pos[r]]
                gs = ch * p + r
                dep = pass_dependency(kind, mb, gs, last)
                if dep is not None and dep not in ran:
                    break
                yield r, kind, mb, ch, gs, dep
                ran.add((kind, mb, gs))
                pos[r] += 1
                progressed = True


@_doc
def simulate(p, m, v=1, group_size=None, *, forward=(1,), backward=(2,),
             gpipe: bool = False) -> Simulation:
    r"""Run the schedule on its data dependencies; durations per rank or per model chunk.

    ``forward`` / ``backward``: one duration per rank (or one for all), the time of a whole
    stage's forward / backward of one microbatch, a chunk taking 1/v of it; or, per rank, a
    sequence of its v chunks' own durations (uneven chunks: Megatron's
    ``--pipeline-model-parallel-layout``).  Exact rationals.
    ``gpipe=True`` runs GPipe's order (all forwards, then all backwards; with v > 1 torch's
    breadth-first ``ScheduleLoopedBFS``).

    .. math::

        e(\pi) = \max\big(e(\pi^{-}_{r}),\ e(\operatorname{dep}\pi)\big) + d_{r,j},
        \qquad \text{makespan} = \max_\pi e(\pi)

    each pass :math:`\pi` (a forward or backward of one micro-batch through chunk j of rank
    r) ending :math:`d_{r,j}` after both the rank's previous pass :math:`\pi^{-}_{r}` and its
    dependency (the previous virtual stage's forward, the next one's backward) have ended;
    :math:`d_{r,j}` is the rank's whole-stage time / v, or the chunk's own.

    Parameters
    ----------
    {schedule_params}
    group_size : int, optional
        ``microbatch_group_size_per_vp_stage`` N (default p).
    forward, backward : sequence
        Per rank (or one for all): a whole stage's forward / backward of one micro-batch
        [time units], or a sequence of the rank's v chunks' durations [time units] (whole
        numbers and fractions stay exact; floats are taken as seconds).
    gpipe : bool
        GPipe's order (breadth-first over the chunks when v > 1).

    Returns
    -------
    Simulation

    Examples
    --------
    Uniform 1F1B: the bubble is (p - 1)/m, also for m < p:

    >>> simulate(4, 8).bubble, simulate(8, 2).bubble
    (Fraction(3, 8), Fraction(7, 2))
    >>> simulate(4, 8, 2).bubble  # interleaved, m a multiple of p: (p-1)/(v m)
    Fraction(3, 16)

    Uneven chunks, p = v = 2 (layout ``Et|tt|tt|tL``: 1 + 2 and 2 + 1 layers, a layer's
    forward 1 and backward 2; hand-traced in tests/test_uneven_step.py):

    >>> simulate(2, 2, 2, forward=[(1, 2), (2, 1)], backward=[(2, 4), (4, 2)]).makespan
    Fraction(22, 1)

    References
    ----------
    Megatron-LM schedules.py (rev d98e8a6); pipeline_parallel_layer_layout.py
    ``get_num_layers_to_build`` (a chunk's layers).
    """
    p, m, v = _whole(p, "p"), _whole(m, "m"), _whole(v, "v")
    N = p if group_size is None else _whole(group_size, "group_size")
    if 2 * p * m * v > MAX_OPS:
        raise InvalidValueError(f"schedule of {2 * p * m * v} passes exceeds {MAX_OPS}")
    # whole numbers and fractions stay exact; floats (seconds) are simulated in floats
    num = _number([*forward, *backward])
    fw, bw = _chunk_durations(p, v, forward, num), _chunk_durations(p, v, backward, num)
    orders = [rank_order(r, p, m, v, N, gpipe) for r in range(p)]
    free = [num(0)] * p
    done: dict = {}
    flight = [0] * p
    peak = [0] * p
    for r, kind, mb, ch, gs, dep in ready_passes(orders, v):
        start = max(free[r], done[dep]) if dep is not None else free[r]
        end = start + (fw[r][ch] if kind == "F" else bw[r][ch])
        done[(kind, mb, gs)] = end
        free[r] = end
        flight[r] += 1 if kind == "F" else -1
        peak[r] = max(peak[r], flight[r])
    if len(done) < sum(len(o) for o in orders):
        raise InvalidValueError(f"schedule p={p} m={m} v={v} N={N} deadlocks")
    makespan = max(free)
    busy = max(m * (_whole_stage(forward, r, p, fw, num) + _whole_stage(backward, r, p, bw, num))
               for r in range(p))
    return Simulation(makespan, busy, makespan / busy - 1, tuple(peak))


def _per_rank(p: int, durations) -> list:
    # one entry per rank: the one given for all repeated, or the p given
    durations = list(durations)
    out = durations if len(durations) == p else durations * p
    if len(out) != p:
        raise InvalidValueError("forward/backward: one positive duration, or one per rank")
    return out


def _number(durations):
    # whole numbers and fractions stay exact; any float (seconds) makes every duration a float
    flat = [x for d in durations for x in (d if _is_seq(d) else (d,))]
    return (lambda x: float(x)) if any(isinstance(x, float) for x in flat) else Fraction


def _is_seq(d) -> bool:
    return isinstance(d, (tuple, list))


def _chunk_durations(p: int, v: int, durations, num) -> list:
    """Each rank's v chunk-pass durations: a whole-stage duration split in v, or the v given."""
    out = []
    for d in _per_rank(p, durations):
        # a chunk may take no time (a virtual stage of the embedding alone); a rank may not
        row = [num(x) for x in d] if _is_seq(d) else [num(d) / v] * v
        if len(row) != v or min(row) < 0 or sum(row) <= 0:
            raise InvalidValueError(f"forward/backward: positive durations, one per rank or "
                                    f"{v} per rank (one per chunk)")
        out.append(row)
    return out


def _whole_stage(durations, r: int, p: int, chunks: list, num):
    # rank r's whole-stage duration: as given, or the sum of its chunks' own
    d = _per_rank(p, durations)[r]
    return sum(chunks[r]) if _is_seq(d) else num(d)


@lru_cache(maxsize=4096)
def _closed_form(p: int, m: int, v: int):
    # Narayanan's (p-1)/(v m), (p-1)/m at v = 1: written once, in memsym.terms.pipeline
    return pipeline.bubble_fraction(v > 1, p, m, v)


@lru_cache(maxsize=4096)
def _bubble_cached(p, m, v, N, ratio, gpipe=False):
    return simulate(p, m, v, N, forward=(1,), backward=(ratio,), gpipe=gpipe).bubble


@_doc
def bubble_fraction(schedule: str = "1f1b", p=1, m=1, v=1, group_size=None, *,
                    backward_ratio=2, strict: bool = False) -> sp.Rational:
    r"""Exact pipeline bubble: idle time over the ideal compute time, uniform stages [1].

    .. math::

        \text{1F1B, GPipe: } \frac{p-1}{m} \qquad
        \text{interleaved (valid N, } N \mid m\text{), looped BFS } (m \ge p)\text{: }
        \frac{p-1}{v\,m}

    (the closed form :func:`memsym.terms.pipeline.bubble_fraction` at these numbers) and
    otherwise whatever the simulated order gives (:func:`simulate`, with a backward
    ``backward_ratio`` times the forward: 2, or 3 with full recomputation).  ``gpipe`` with
    v > 1 is torch's breadth-first ``ScheduleLoopedBFS`` (Lamy-Poirier 2022, §3).
    ``strict`` raises when Megatron-LM would refuse the interleaved layout
    (:func:`schedule_rule`); otherwise the layout is priced as it would run.

    Parameters
    ----------
    schedule : {"1f1b", "interleaved", "gpipe"}
        The pipeline schedule.
    {schedule_params}
    group_size : int, optional
        ``microbatch_group_size_per_vp_stage`` N (default p) [1].
    backward_ratio : number
        Backward time over forward time (2, or 3 with full recomputation) [1].
    strict : bool
        Raise when Megatron-LM would refuse the interleaved layout.

    Returns
    -------
    sympy.Rational
        Bubble time over ideal compute time [1].

    Examples
    --------
    >>> bubble_fraction("1f1b", p=8, m=4)
    7/4
    >>> bubble_fraction("interleaved", p=4, m=8, v=2)
    3/16
    >>> bubble_fraction("interleaved", p=4, m=10, v=2) > sp.Rational(3, 20)  # m % p != 0
    True
    >>> bubble_fraction("gpipe", p=4, m=8, v=2), bubble_fraction("gpipe", p=4, m=2, v=2)
    (3/16, 5/4)

    References
    ----------
    Narayanan et al. 2021 §2.2; Megatron-LM schedules.py; Lamy-Poirier, "Breadth-First
    Pipeline Parallelism" (arXiv:2211.05953); torch/distributed/pipelining/schedules.py,
    ScheduleLoopedBFS.
    """
    schedule = choose("pipeline schedule", schedule, SCHEDULES)
    p, m, v = _whole(p, "p"), _whole(m, "m"), _whole(v, "v")
    if schedule in ("gpipe", "1f1b") and v == 1:
        return _closed_form(p, m, 1)
    if schedule == "gpipe":
        # breadth-first over v chunks: one fill and drain of chunk passes, (p-1)/(v m) once
        # every rank has work for the whole fill (m >= p; simulated otherwise)
        if m >= p:
            return _closed_form(p, m, v)
        frac = _bubble_cached(p, m, v, p, Fraction(backward_ratio), True)
        return sp.Rational(frac.numerator, frac.denominator)
    if schedule == "1f1b":
        schedule = "interleaved"
    rule = schedule_rule(p, m, v, group_size)
    if strict and rule:
        raise InvalidValueError(f"Megatron-LM refuses this interleaved layout: {rule}")
    N = p if group_size is None else _whole(group_size, "group_size")
    if rule is None and m % N == 0:
        return _closed_form(p, m, v)
    if v > 1 and p == 1:
        return sp.Integer(0)
    frac = _bubble_cached(p, m, v, N, Fraction(backward_ratio))
    return sp.Rational(frac.numerator, frac.denominator)
