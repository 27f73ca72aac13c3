r"""Pipeline schedules: how many micro-batches of activations each stage holds at its peak.

Activation memory of a pipeline stage = (layers on the stage) × (micro-batches in flight) ×
(activations per layer and micro-batch).  Under 1F1B the first stage holds p micro-batches of
L/p layers, L layers' worth (Korthikanti Eq. 5), whatever p; the interleaved schedule with v
model chunks per stage multiplies that by 1 + (p−1)/(p·v); with fewer micro-batches than stages
only m are in flight (min(1, m/p)); GPipe keeps all m.

Stage i (0-based) of p holds, in layers' worth of one micro-batch:

* 1F1B: :math:`\min(p - i,\, m)\,L/p` (warm-up p − i − 1 forwards, then one more before the first
  backward);
* interleaved: :math:`\min(2(p - i - 1) + (v - 1)p + 1,\; m v)\,L/(p v)` (Megatron-LM's
  interleaved warm-up of :math:`W_i = \min(2(p - i - 1) + (v - 1)p,\, m v)` forward chunks,
  then one more forward before the first backward while any remain; counted in model chunks
  of L/(pv) layers);
* GPipe: :math:`m\,L/p` (every forward before any backward); with v chunks per rank, torch's
  breadth-first ``ScheduleLoopedBFS`` keeps the same: :math:`m v` chunk micro-batches of
  :math:`L/(p v)` layers (every chunk's forwards before any backward).

:func:`pipeline_factor` is the first stage's row of this one model divided by L, so the two
can never disagree.

References
----------
.. [korthikanti] arXiv:2205.05198 §4.2.3 (Eq. 5 and the interleaved factor).
.. [narayanan] arXiv:2104.04473 §2.2 (1F1B and interleaved schedules).
.. [gpipe] arXiv:1811.06965 §2.2.
.. [pytorch-pipelining] torch/distributed/pipelining/schedules.py, ScheduleLoopedBFS.
   _calculate_single_rank_operations (breadth-first; arXiv:2211.05953).
.. [megatron-lm] theoretical_memory_usage.py (min(1, m/p) for fewer micro-batches than stages);
   core/pipeline_parallel/schedules.py, get_pp_rank_microbatches (rev d98e8a6):
   num_warmup_microbatches = (p - rank - 1)*2 + (v - 1)*N, N = microbatch_group_size_per_vp_stage
   (default p), capped at m*v.  :func:`memsym.timing.schedule.simulate` runs the schedule and
   counts the same peak (tests/test_timing.py checks the two agree).
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError, choose
from ..symbols import L, m, p, v
from ..term import Source, Term
from ..values import as_expr, lazy_min  # library arguments: text refused, never parsed
from ..vocabulary import SCHEDULES
from ..text import shared_doc

__all__ = ["SCHEDULES", "pipeline_factor", "first_stage_layers", "stage_layers", "torch_round_size",
           "stage_microbatches", "v_stage_microbatches", "embedding_microbatches",
           "logits_microbatches"]

_doc = shared_doc(schedule_params="""
    schedule : {"1f1b", "gpipe"}
        The pipeline schedule; with ``vv`` > 1, 1F1B is interleaved and GPipe
        breadth-first (torch's LoopedBFS).
    pp : int or sympy.Expr
        Pipeline-parallel size p [GPUs] (default the symbol ``p``).
    vv : int or sympy.Expr, optional
        Model chunks per rank v [1]; None = not interleaved.
    mm : int or sympy.Expr, optional
        Micro-batches per step m [1]; None = no cap.
    """)


def _schedule(schedule: str) -> str:
    return choose("pipeline schedule", schedule, SCHEDULES)


def _into_min(expr: sp.Expr) -> sp.Expr:
    """``c * Min(x, y)`` -> ``Min(c x, c y)`` for a positive factor c (every registry symbol is
    positive), so the cap reads as Megatron-LM writes it: min(1, m/p), not min(m, p)/p."""
    if not (expr.is_Mul and any(isinstance(arg, sp.Min) for arg in expr.args)):
        return expr
    cap = next(arg for arg in expr.args if isinstance(arg, sp.Min))
    rest = expr / cap
    if rest.is_positive is not True:
        return expr
    return sp.Min(*(sp.cancel(arg * rest) for arg in cap.args))


def pipeline_factor(schedule: str = "1f1b", *, interleaved: bool = False,
                    limited: bool = False) -> Term:
    r"""The first stage's activations in units of L layers' worth of one micro-batch [1].

    .. math::

        \phi = \begin{cases}
        1 & \text{1F1B (Eq. 5: p micro-batches of } L/p \text{ layers)}\\
        1 + \dfrac{p - 1}{p\,v} & \text{interleaved 1F1B}\\
        \min(1,\, m/p) & \text{1F1B with } m \text{ micro-batches}\\
        \min\!\left(\dfrac{p v + p - 1}{p v},\, \dfrac{m}{p}\right)
            & \text{interleaved 1F1B with } m \text{ micro-batches}\\
        m/p & \text{GPipe}
        \end{cases}

    Built from :func:`stage_layers` of the first stage (divided by L), so it is the same model
    as :func:`stage_microbatches`.

    Parameters
    ----------
    schedule : {"1f1b", "gpipe"}
    interleaved : bool
        The interleaved 1F1B schedule (v model chunks per stage).
    limited : bool
        Cap by the number of micro-batches m (Megatron-LM's min(1, m/p)).

    Examples
    --------
    >>> pipeline_factor(interleaved=True).expr
    (p*v + p - 1)/(p*v)
    >>> pipeline_factor(limited=True).expr
    Min(1, m/p)
    >>> pipeline_factor(interleaved=True, limited=True).expr.subs({p: 4, v: 2, m: 2})
    1/2

    References
    ----------
    .. [korthikanti] arXiv:2205.05198, §4.2.3, Eq. 5 and the interleaved factor.
    .. [megatron-lm] ``theoretical_memory_usage.py``, ``compute_activation_memory`` (min(1, m/p));
       ``schedules.py``, ``forward_backward_pipelining_with_interleaving``
       (``num_warmup_microbatches``).
    .. [gpipe] arXiv:1811.06965, §2.2.
    """
    schedule = _schedule(schedule)
    # one model: the first stage's row of stage_layers, in units of L (never a second formula)
    mm = m if (limited or schedule == "gpipe") else None
    vv = v if interleaved else None
    expr = _into_min(stage_layers("first", schedule, vv=vv, mm=mm) / L)
    if schedule == "gpipe":
        return Term("pipeline.gpipe", expr, "GPipe: all m micro-batches of L/p layers in flight",
                    Source("gpipe", "§2.2"), unit="1")
    if interleaved:
        what = "min(2p - 1 + (v - 1)p, m v) chunks of L/(pv) layers" if limited else \
            "L(1 + (p-1)/(pv)) layers' worth"
        return Term("pipeline.interleaved" + (".limited" if limited else ""), expr,
                    "interleaved 1F1B: first stage holds " + what,
                    Source("korthikanti", "§4.2.3") if not limited else
                    Source("megatron-lm", "schedules.py, forward_backward_pipelining_with_"
                                          "interleaving (num_warmup_microbatches)"), unit="1")
    if limited:
        return Term("pipeline.1f1b.limited", expr, "1F1B with m micro-batches: "
                    "min(1, m/p)", Source("megatron-lm", "theoretical_memory_usage.py, "
                                          "compute_activation_memory"), unit="1")
    return Term("pipeline.1f1b", expr, "1F1B: first stage holds p micro-batches of L/p "
                "layers, L layers' worth", Source("korthikanti", "§4.2.3, Eq. 5"), unit="1")


def first_stage_layers(schedule: str = "1f1b", *, interleaved: bool = False,
                       limited: bool = False) -> sp.Expr:
    r"""Layers' worth of activations on the first stage: ``L * pipeline_factor`` [layers].

    .. math:: L\,\phi

    with :math:`\phi` the :func:`pipeline_factor` of the schedule.

    Examples
    --------
    Korthikanti Eq. 5: the first 1F1B stage holds L layers' worth, and interleaved
    L(1 + (p - 1)/(p v)):

    >>> first_stage_layers()
    L
    >>> sp.simplify(first_stage_layers(interleaved=True) - L * (1 + (p - 1) / (p * v)))
    0

    References
    ----------
    .. [korthikanti] arXiv:2205.05198, §4.2.3, Eq. 5 and the interleaved factor.
    """
    return L * pipeline_factor(schedule, interleaved=interleaved, limited=limited).expr


def _stage_index(stage, pp):
    """Stage index in 0..p-1 ('first', 'last' or a whole number); refused outside the range."""
    if isinstance(stage, str) and stage in ("first", "last"):
        return sp.Integer(0) if stage == "first" else pp - 1
    if isinstance(stage, bool) or not isinstance(stage, (int, sp.Integer)):
        raise InvalidValueError(f"stage must be 'first', 'last' or an index, got {stage!r:.40}")
    i = sp.Integer(stage)
    # a negative index or one past the last stage would give a count <= 0, never an error
    if i < 0 or (pp.is_number and i >= pp):
        upper = pp - 1 if pp.is_number else "p-1"
        raise InvalidValueError(f"stage must be in 0..{upper}, got {stage}")
    return i


def torch_round_size(mm=m, pp=p) -> sp.Expr:
    r"""Micro-batches per round of torch's interleaved schedules [1]: their group size N.

    .. math:: N = \left\lfloor \frac{m}{\max(1, \lfloor m/p \rfloor)} \right\rfloor

    ``torch.distributed.pipelining``'s ``ScheduleInterleaved1F1B`` (and
    ``ScheduleInterleavedZeroBubble``) run ``number_of_rounds = max(1, m // p)`` rounds of
    ``microbatches_per_round = m // number_of_rounds`` micro-batches, and warm up
    ``(v - 1) N + 2 (p - 1 - rank)`` chunk forwards (``_get_warmup_ops``): Megatron's
    interleaved warm-up with this N in place of ``microbatch_group_size_per_vp_stage``.
    N = p where p divides m; N = m < p with fewer micro-batches than stages, which torch runs
    and Megatron refuses.

    Parameters
    ----------
    mm : int or sympy.Expr
        Micro-batches per step m [1].
    pp : int or sympy.Expr
        Pipeline-parallel size p [GPUs].

    Returns
    -------
    sympy.Expr
        Micro-batches per round [1].

    Examples
    --------
    >>> torch_round_size(16, 4), torch_round_size(10, 4), torch_round_size(3, 4)
    (4, 5, 3)

    References
    ----------
    .. [pytorch-pipelining] torch/distributed/pipelining/schedules.py,
       ScheduleInterleaved1F1B.__init__ and _get_warmup_ops (torch 2.13).
    """
    mm, pp = as_expr(mm), as_expr(pp)
    return sp.floor(mm / sp.Max(1, sp.floor(mm / pp)))


@_doc
def stage_microbatches(stage, schedule: str = "1f1b", *, pp=p, vv=None, mm=None,
                       group=None) -> sp.Expr:
    r"""Model-chunk micro-batches stage ``stage`` holds at its peak [1].

    Under 1F1B a count of micro-batches of L/p layers; interleaved (``vv`` > 1) a count of
    chunk micro-batches of L/(p v) layers.  ``mm`` None means "at least as many micro-batches
    as the schedule can hold" (no cap).

    Parameters
    ----------
    stage : {"first", "last"} or int
        The pipeline stage (an index 0 .. p−1).
    {schedule_params}
    group : int or sympy.Expr, optional
        Megatron's ``microbatch_group_size_per_vp_stage`` N (default p).

    Returns
    -------
    sympy.Expr
        Chunk micro-batches held [1].

    Examples
    --------
    >>> stage_microbatches(0), stage_microbatches("last")
    (p, 1)
    >>> stage_microbatches(0, vv=v)
    p*v + p - 1
    >>> stage_microbatches(0, pp=4, mm=2)
    2
    >>> stage_microbatches(0, "gpipe", pp=4, vv=2, mm=8)   # LoopedBFS: m v chunk passes
    16

    ``group`` is Megatron's ``microbatch_group_size_per_vp_stage`` N (default p): the
    warm-up is :math:`2(p - i - 1) + (v - 1) N` chunks (``get_pp_rank_microbatches``):

    >>> stage_microbatches(0, pp=4, vv=2, group=6)
    13

    References
    ----------
    .. [narayanan] arXiv:2104.04473, §2.2 (1F1B and interleaved schedules).
    .. [megatron-schedules] ``megatron/core/pipeline_parallel/schedules.py`` (rev d98e8a64dd),
       ``get_pp_rank_microbatches``: ``num_warmup_microbatches = (p - rank - 1)*2 + (v - 1)*N``,
       capped at m v.
    .. [pytorch-pipelining] ``torch/distributed/pipelining/schedules.py``, ``ScheduleLoopedBFS``.
    .. [gpipe] arXiv:1811.06965, §2.2.
    """
    schedule = _schedule(schedule)
    pp = as_expr(pp)                   # exact: plain ints must not become floats
    vv = None if vv is None else as_expr(vv)
    mm = None if mm is None else as_expr(mm)
    i = _stage_index(stage, pp)
    if schedule == "gpipe":
        if mm is None:
            raise InvalidValueError("GPipe keeps all m micro-batches: give the number of micro-batches")
        # breadth-first (torch's LoopedBFS): all m micro-batches through every chunk first
        return as_expr(mm) * (1 if vv is None else vv)
    if vv is not None and vv != 1:
        if pp == 1:
            raise InvalidValueError("an interleaved (virtual) pipeline needs p > 1 stages")
        # REF: narayanan §2.2; Megatron-LM schedules.py: warm-up W = (p - i - 1)*2 + (v - 1)*p
        # forward chunks, capped at m*v (then all forwards run before any backward); while
        # chunks remain, the steady state runs one more forward before the first backward,
        # so the peak is min(W + 1, m v)
        nn = pp if group is None else as_expr(group)
        count = sp.expand(2 * (pp - i - 1) + (vv - 1) * nn + 1)
        return count if mm is None else lazy_min(count, mm * vv)
    count = pp - i
    return count if mm is None else lazy_min(count, mm)


@_doc
def stage_layers(stage, schedule: str = "1f1b", *, pp=p, vv=None, mm=None, layers=L) -> sp.Expr:
    r"""Layers' worth of one micro-batch's activations held by a stage at its peak [layers].

    With :math:`n_i` the chunk micro-batches stage :math:`i` holds
    (:func:`stage_microbatches`):

    .. math::

        n_i\,\frac{L}{p} \text{ (not interleaved)},\qquad
        n_i\,\frac{L}{p\,v} \text{ (v chunks per rank)}

    Parameters
    ----------
    stage : {"first", "last"} or int
        The pipeline stage (an index 0 .. p−1).
    {schedule_params}
    layers : int or sympy.Expr
        Decoder layers L [1] (default the symbol ``L``).

    Returns
    -------
    sympy.Expr
        Layers' worth of one micro-batch's activations [layers].

    Examples
    --------
    Eq. 5: the first 1F1B stage holds L layers' worth; the last L/p:

    >>> stage_layers("first"), stage_layers("last")
    (L, L/p)

    and interleaved, L(1 + (p - 1)/(p v)):

    >>> sp.simplify(stage_layers("first", vv=v) - L * (1 + (p - 1) / (p * v)))
    0

    References
    ----------
    .. [korthikanti] arXiv:2205.05198, §4.2.3, Eq. 5 and the interleaved factor.
    .. [narayanan] arXiv:2104.04473, §2.2 (1F1B and interleaved schedules).
    """
    chunks = stage_microbatches(stage, schedule, pp=pp, vv=vv, mm=mm)
    pp, layers = as_expr(pp), as_expr(layers)
    per = layers / pp if (vv is None or vv == 1) else layers / (pp * vv)
    return chunks * per


def v_stage_microbatches(stage, *, pp=p, mm=None) -> sp.Expr:
    r"""Chunk passes rank ``stage`` of a V pipeline holds at its peak [1].

    torch's V schedules place stages :math:`r` and :math:`2p - 1 - r` on rank :math:`r`
    (``ZBVZeroBubble``, ``DualPipeV``); a chunk pass is live from its forward to its
    (weight) backward.  torch's own tables give ``ZBVZeroBubble``
    :math:`\min(2p,\ m + 1 + r,\ 2m)` and ``DualPipeV`` (which needs :math:`m \ge 2p`) 2p,
    one more on the last rank; memsym counts

    .. math:: \min(2p,\ m + 1 + r,\ 2m) + [r = p - 1]

    exact for both but ZBV's last rank (one pass above).  Interleaved 1F1B's first rank would
    hold 3p - 1.

    Parameters
    ----------
    stage : {"first", "last"} or int
        The pipeline rank r (0 .. p−1).
    pp : int or sympy.Expr
        Pipeline-parallel size p [GPUs] (default the symbol ``p``).
    mm : int or sympy.Expr, optional
        Micro-batches per step m [1]; None = no cap.

    Returns
    -------
    sympy.Expr
        Chunk passes held [1].

    Examples
    --------
    >>> [v_stage_microbatches(r, pp=4, mm=8) for r in range(4)]
    [8, 8, 8, 9]
    >>> [v_stage_microbatches(r, pp=4, mm=2) for r in range(4)]
    [3, 4, 4, 5]
    >>> v_stage_microbatches(0)
    2*p

    References
    ----------
    .. [pytorch-pipelining] ``torch/distributed/pipelining/schedules.py``,
       ``ScheduleZBVZeroBubble`` and ``ScheduleDualPipeV`` (their ``pipeline_order``;
       ``tests/test_timing.py`` reads them).
    """
    pp = as_expr(pp)
    mm = None if mm is None else as_expr(mm)
    i = _stage_index(stage, pp)
    count = 2 * pp if mm is None else lazy_min(2 * pp, mm + 1 + i, 2 * mm)
    return count + (1 if i == pp - 1 else 0)


@_doc
def embedding_microbatches(schedule: str = "1f1b", *, pp=p, vv=None, mm=None,
                           group=None) -> sp.Expr:
    r"""Micro-batches whose input-embedding activations the first stage holds at its peak.

    1F1B: p; interleaved: :math:`\max(N, 2p - 1)` with N the micro-batch group (default p:
    2p − 1, the first chunk has run p micro-batches, then p − 1 more when the first backward
    starts; a group larger than 2p − 1 finishes its first chunk's N first); GPipe: m; each
    capped by m.

    Parameters
    ----------
    {schedule_params}
    group : int, optional
        Megatron's ``microbatch_group_size_per_vp_stage`` N (default p).

    Returns
    -------
    sympy.Expr
        Micro-batches held [1].

    Examples
    --------
    >>> embedding_microbatches(), embedding_microbatches(vv=2)
    (p, 2*p - 1)
    >>> embedding_microbatches(pp=4, vv=2, group=12)    # the first group's 12 forwards first
    12

    References
    ----------
    .. [narayanan] arXiv:2104.04473, §2.2 (1F1B and interleaved schedules).
    .. [megatron-schedules] ``megatron/core/pipeline_parallel/schedules.py`` (rev d98e8a64dd),
       ``get_pp_rank_microbatches``: ``num_warmup_microbatches = (p - rank - 1)*2 + (v - 1)*N``,
       capped at m v.
    .. [gpipe] arXiv:1811.06965, §2.2.
    """
    schedule = _schedule(schedule)
    pp = as_expr(pp)
    mm = None if mm is None else as_expr(mm)
    if schedule == "gpipe":
        return stage_microbatches(0, "gpipe", pp=pp, mm=mm)
    if vv is None or vv == 1:
        count = pp
    else:
        # the warm-up's 2(p-1) + (v-1)N + 1 forwards run chunk by chunk in groups of N
        count = 2 * pp - 1 if group is None else sp.Max(as_expr(group), 2 * pp - 1)
    return count if mm is None else lazy_min(count, mm)


def logits_microbatches(schedule: str = "1f1b", *, mm=None) -> sp.Expr:
    r"""Micro-batches whose output-layer activations (logits) the last stage holds.

    .. math:: n_\ell = 1 \text{ (1F1B)},\qquad n_\ell = m \text{ (GPipe)}

    1F1B (interleaved or not) runs each micro-batch's backward right after its forward on
    the last stage: 1.  GPipe: m.

    Examples
    --------
    >>> logits_microbatches()
    1
    >>> logits_microbatches("gpipe", mm=8)    # GPipe: every forward before any backward
    8

    References
    ----------
    .. [narayanan] arXiv:2104.04473, §2.2 (1F1B and interleaved schedules).
    .. [gpipe] arXiv:1811.06965, §2.2.
    """
    schedule = _schedule(schedule)
    if schedule == "gpipe":
        return stage_microbatches(0, "gpipe", mm=mm)
    return sp.Integer(1)
