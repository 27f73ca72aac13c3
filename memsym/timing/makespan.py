r"""The pipeline part of a grid of layouts: the stages' durations, the makespan, the edges.

From the mean layer (:mod:`memsym.timing.mean_layer`) and the end layers
(:func:`memsym.timing.pipeline.end_layers`) each stage's forward and backward of one
micro-batch (:func:`memsym.timing.pipeline.stage_times`, or each chunk's for a custom
layout), the PP p2p exposed per stage-microbatch, the pipeline's seconds (m tau_max plus the
bubble in stage units, or the simulated schedule) and the all-to-alls the EP overlap leaves
alone at the schedule's edges (:func:`ep_alone_passes`).  :func:`memsym.timing.step.
step_time_grid` adds the data-parallel sync and the optimizer step to it.

References
----------
.. [megatron-lm] core/pipeline_parallel/schedules.py (get_pp_rank_microbatches,
   get_schedule_table), core/pipeline_parallel/combined_1f1b.py, arguments.py
   (overlap_p2p_comm only with interleaving), all at rev d98e8a64dd.
.. [narayanan] arXiv:2104.04473 §2.2, §4.1.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidValueError
from .collectives import collective_time, group_bandwidth
from .bubble import bubble_in_stages
from .pipeline import (busiest_stage, chunk_times, end_layers, heaviest_middle, microbatch_group,
                       simulated_pipeline, stage_layers, stage_times)
from .mtp import mtp_depth
from .interleaved import priced_together
from .one_f_one_b import exact_one_f_one_b
from .records import Overlap, Settings

__all__ = ["pipeline_parts", "ep_alone_passes"]


def pipeline_parts(x, st: Settings, dev, clu, overlap: Overlap, knobs: tuple, layer: tuple, *,
                   eta_gemm=None, first=None, last=None, chunks=None, mtp_layers: int = 0,
                   exact_schedule: bool = False, bf16=None, steps: bool = False) -> dict:
    r"""The pipeline's seconds of a grid of layouts and what they are made of [s].

    .. math::

        t_{\text{pipeline}} = m\,\max_r \tau_r + \beta\,\frac{\sum_r \tau_r - \max_r \tau_r}{p - 1}
            + t_{\text{EP alone}}

    (:func:`memsym.timing.step.step_time_grid`'s first terms).  Under 1F1B (v = 1) that form
    is the schedule's exact makespan where the last stage is the slowest, forward and
    backward (the longest path then runs along the last stage, the fill and drain through
    the others); with a heavier first or middle stage (the embedding, an uneven split, MTP
    under the V placement) the schedule runs off it: below it where the first stage is the
    slowest in both passes (its fill overlaps), either side otherwise.  So 1F1B's layouts (no
    custom layout) take the exact makespan of their first, middle and last stages
    (:func:`memsym.timing.one_f_one_b.one_f_one_b_makespan`, the simulated schedule's).
    Interleaved (v > 1) the form is exact with equal stages only (unequal ones: off the
    simulated schedule by up to a few per cent): schedules of at most
    :data:`memsym.timing.interleaved.MAX_PASSES` chunk passes take their longest path
    (:func:`memsym.timing.interleaved.exact_interleaved`, the simulated schedule's), larger
    ones keep the form, as GPipe does; with ``exact_schedule`` every layout takes the
    simulated schedule.  Returns a dict: ``pipeline`` (the makespan), ``bubble``, ``edges``
    (:func:`ep_alone_passes`) [s]; ``launchable``; ``stages`` (the decoder layers
    of the first, middle, last (and heaviest middle) stages [layers]); ``tau`` (each stage's
    forward and backward [s]); ``msg`` [bytes], ``p2p`` and ``p2p_exposed`` [s] (the PP
    message, its seconds and its exposed seconds per stage-microbatch); ``mtp_busy`` (the MTP
    layers among the busiest stage's, where the output stage holds the most layers [layers]).

    Parameters
    ----------
    x : memsym.timing.gemm.Shape
        The model's shape.
    st : Settings
        What the step does beyond the layout.
    dev : GPU
        The GPU.
    clu : Cluster
        The interconnect.
    overlap : Overlap
        Which communication hides behind compute.
    knobs : tuple of array_like
        ``(t, p, d, c, v, b, m)``: tensor-, pipeline-, data- and context-parallel sizes
        [GPUs], model chunks per rank [1], micro-batch size [sequences], micro-batches [1].
    layer : tuple
        :func:`memsym.timing.mean_layer.mean_layer`'s forward and backward parts [s], its
        EP seconds alone [s] and an MTP layer's forward and backward parts [s]:
        ``(lf, lb, ep_alone, (mf, mb))``.
    eta_gemm : float, optional
        A fixed achieved GEMM efficiency in (0, 1] [1].
    first, last : int, optional
        Decoder layers on the first / last stage [layers].
    chunks : tuple of tuple of int, optional
        One layout's decoder and MTP layers of chunk j of rank r [layers].
    mtp_layers : int
        MTP depths on the output stage [layers]: each its layer (``(mf, mb)``) and
        :func:`memsym.timing.mtp.mtp_depth`'s work beside it.
    exact_schedule : bool
        The makespan as the simulated schedule.
    bf16 : tuple, optional
        The end stages' BF16 layers and one's excess over the mean layer [s] (:func:`_bf16_ends`).
    steps : bool
        Return a generator instead, which yields the arguments of its
        :func:`memsym.timing.interleaved.exact_interleaved` (none where no row takes it),
        takes back that function's value and returns the dict: several grids' interleaved
        schedules are then priced together (:func:`memsym.timing.interleaved.priced_together`).

    Examples
    --------
    One GPU has no bubble, no p2p and no edges:

    >>> from memsym.hardware import cluster_for, gpu; from memsym.model import preset
    >>> from memsym.timing.gemm import shape_of
    >>> from memsym.timing.mean_layer import mean_layer
    >>> dev, one = gpu("h100"), np.array(1.0)
    >>> x, st = shape_of(preset("llama3-8b")), Settings(seq_length=4096)
    >>> lf, lb, _, alone, mtp = mean_layer(x, st, dev, cluster_for(dev.name), one, one, one,
    ...                                    one, one, one, eta_gemm=0.5, overlap=Overlap())
    >>> out = pipeline_parts(x, st, dev, cluster_for(dev.name), Overlap(), (one,) * 7,
    ...                      (lf, lb, alone, mtp), eta_gemm=0.5)
    >>> float(out["bubble"]), float(out["p2p"]), float(out["edges"]), float(out["stages"][0])
    (0.0, 0.0, 0.0, 32.0)

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §2.2 (the bubble), §3.2; [megatron-schedules].
    """
    parts = _parts_steps(x, st, dev, clu, overlap, knobs, layer, eta_gemm=eta_gemm, first=first,
                         last=last, chunks=chunks, mtp_layers=mtp_layers,
                         exact_schedule=exact_schedule, bf16=bf16)
    return parts if steps else priced_together([parts])[0]


def _parts_steps(x, st: Settings, dev, clu, overlap: Overlap, knobs: tuple, layer: tuple, *,
                 eta_gemm=None, first=None, last=None, chunks=None, mtp_layers: int = 0,
                 exact_schedule: bool = False, bf16=None):
    # pipeline_parts as the generator steps=True returns
    t, p, d, c, v, b, m = knobs
    lf, lb, ep_alone, mtp = layer
    out_f, out_b, emb = _output_ends(x, st, dev, clu, overlap, (t, c, d, b), eta_gemm,
                                     mtp_layers, layer)
    emb, emb_b, out_f, out_b = _bf16_ends(emb, out_f, out_b, bf16)
    msg, p2p, p2p_exposed = _pp_p2p(x, clu, overlap, b * st.seq_length / c, t, p, c, d, v,
                                    4 if st.fp32_residual_connection else 2)
    stages, tau, chunk_tau = _stage_durations(st, x.L, p, v, first, last, chunks, lf, lb,
                                              (emb, out_f, out_b, emb_b), p2p_exposed, mtp_layers)
    pipeline, bubble, launchable = yield from _pipeline_steps(st, tau, p2p_exposed, out_f, out_b,
                                                              p, m, v, exact_schedule, chunk_tau)
    edges = ep_alone_passes(x, overlap, p, v, m, _groups(st, p, m, v, overlap), ep_alone)
    # the output stage (the last; the first under the V placement) holds the MTP layers
    out_stage = stages[0] if st.output_first else stages[2]
    busiest = np.maximum(np.maximum(stages[0], stages[2]), stages[3])
    return {"pipeline": pipeline, "bubble": bubble, "edges": edges, "launchable": launchable,
            "stages": stages, "tau": tau, "msg": msg, "p2p": p2p, "p2p_exposed": p2p_exposed,
            "mtp_busy": np.where(out_stage == busiest, mtp_layers, 0)}


def _bf16_ends(emb, out_f, out_b, bf16) -> tuple:
    """``(emb, emb_b, out_f, out_b)``: the end stages' own seconds with their BF16 layers'
    excess over the mean layer [s] (``bf16``: ``(n_first, n_last, delta_f, delta_b)``,
    :func:`memsym.timing.mean_layer.bf16_layer_excess`).  The first layers run beside the
    embedding (rank 0, chunk 0), the last beside the output layer (the last rank's last
    chunk), as the MTP layers do (:mod:`memsym.training.bf16_layers`)."""
    n_first, n_last, bf_f, bf_b = bf16 or (0, 0, 0.0, 0.0)
    return (emb + n_first * bf_f, n_first * bf_b, out_f + n_last * bf_f, out_b + n_last * bf_b)


def _groups(st: Settings, p, m, v, overlap: Overlap) -> np.ndarray:
    """:func:`memsym.timing.pipeline.microbatch_group` of each layout (p, m, v) of a grid [1]:
    the group the simulated schedule runs (torch's rounds, a set size, p; never below p), so
    that the EP edges count the warm-up that order has (0 without the EP overlap, where
    :func:`ep_alone_passes` does not read it)."""
    if not overlap.ep_a2a:
        return 0
    P, M, V = np.broadcast_arrays(*(np.asarray(a).astype(np.int64) for a in (p, m, v)))
    # one integer code per (p, m, v), compacted after each column (so every code stays below
    # the grid's size and the products below its square): 1-D uniques cost far less than
    # np.unique over rows (axis=1 sorts void views)
    code = np.zeros(P.size, dtype=np.int64)
    for col in (P.ravel(), M.ravel(), V.ravel()):
        _, idx = np.unique(col, return_inverse=True)
        _, code = np.unique(code * (int(idx.max(initial=0)) + 1) + idx.ravel(),
                            return_inverse=True)
    _, first, inv = np.unique(code, return_index=True, return_inverse=True)
    keys = zip(P.ravel()[first].tolist(), M.ravel()[first].tolist(), V.ravel()[first].tolist())
    groups = np.array([microbatch_group(st, *k) for k in keys], dtype=float)
    return groups[inv.ravel()].reshape(P.shape)


def _output_ends(x, st, dev, clu, overlap, knobs, eta_gemm, mtp_layers, layer) -> tuple:
    """:func:`memsym.timing.pipeline.end_layers`' output-layer forward and backward and
    embedding [s], with the output stage's ``mtp_layers`` MTP depths: each one's work beside
    its layer (:func:`memsym.timing.mtp.mtp_depth`) and what its layer (``layer``'s MTP
    parts: the last layer's kind, or a hybrid's MTP pattern's layers, at the MTP block's
    precision) takes beyond the mean layer, which the stage's layer count prices it as [s]."""
    t, c, d, b = knobs
    out_f, out_b, emb = end_layers(x, st, dev, b, t, c, eta_gemm)
    if not mtp_layers:
        return out_f, out_b, emb
    lf, lb, _, (mf, mb) = layer
    dep_f, dep_b = mtp_depth(x, st, dev, clu, overlap, knobs, (out_f, out_b, emb),
                             eta_gemm=eta_gemm)
    kind_f, kind_b = sum(mf.values()) - sum(lf.values()), sum(mb.values()) - sum(lb.values())
    return out_f + mtp_layers * (dep_f + kind_f), out_b + mtp_layers * (dep_b + kind_b), emb


def _pipeline_steps(st, tau: dict, p2p_exposed, out_f, out_b, p, m, v, exact_schedule: bool,
                    chunk_tau=None):
    """The pipeline's seconds (m tau_max plus the bubble in stage units, or the simulated
    schedule, with each chunk's own durations where ``chunk_tau`` gives them), its bubble [s]
    and whether Megatron's interleaving rule lets it launch; a generator that yields the
    arguments of :func:`memsym.timing.interleaved.exact_interleaved` and takes back its value."""
    tau_max, total_tau = busiest_stage(st, tau, p, p2p_exposed, out_f, out_b)
    beta, launchable = bubble_in_stages(st, p, m, v)
    others = np.where(p == 1, 0.0, (total_tau - tau_max) / np.maximum(p - 1, 1))
    pipeline = m * tau_max + beta * others
    if exact_schedule:
        pipeline = simulated_pipeline(st, pipeline, tau, p2p_exposed, p, m, v, chunk_tau)
    elif chunk_tau is None:
        # the closed form is exact only where the last stage is the slowest: 1F1B's rows
        # (v = 1) take the schedule's exact makespan, as the simulated schedule prices them,
        # and so do the interleaved rows of a small schedule (its longest path, vectorised)
        pipeline = exact_one_f_one_b(st, pipeline, tau, p2p_exposed, p, m, v)
        pipeline = yield (st, pipeline, tau, p2p_exposed, p, m, v)   # exact_interleaved
    return pipeline, pipeline - m * tau_max, launchable


def _stages(st, L, p, v, first, last, chunks, mtp=0) -> tuple:
    """Decoder layers of the (first, middle (mean), last, heaviest middle) stages: of the
    given first / last sizes plus the ``mtp`` MTP layers on the output stage (the last, the
    first under the V placement; p = 1: the one stage), or of a one-layout ``chunk_layers``
    (its p ranks of v chunks checked against the layout's p and v; its MTP layers its own)."""
    if chunks is not None:
        if np.size(p) != 1 or np.size(v) != 1 or len(chunks) != int(np.ravel(p)[0]) \
                or any(len(row) != int(np.ravel(v)[0]) for row in chunks):
            raise InvalidValueError("chunk_layers must give p ranks of v chunks of one layout")
        # the layers the chunks run (the decoder's L, plus any MTP layers they count)
        L, first, last = sum(map(sum, chunks)), sum(chunks[0]), sum(chunks[-1])
    first, middle, last = stage_layers(L, p, first, last)
    if mtp and chunks is None:
        single = np.asarray(p) == 1
        first = first + np.where(single | st.output_first, mtp, 0)
        last = last + np.where(single | (not st.output_first), mtp, 0)
    return first, middle, last, heaviest_middle(chunks, middle)


def _stage_durations(st, L, p, v, first, last, chunks, lf: dict, lb: dict, ends,
                     p2p_exposed, mtp=0) -> tuple:
    """The stages' decoder layers (:func:`_stages`), their :func:`stage_times` and, where
    ``chunks`` is given, each chunk's (:func:`chunk_times`); ``lf`` / ``lb``: the mean
    decoder layer's forward / backward parts, ``ends``: the embedding, the output
    layer's forward and backward, the first stage's own backward [s]; ``mtp``: MTP layers on the output stage."""
    stages = _stages(st, L, p, v, first, last, chunks, mtp)
    layer_f, layer_b = sum(lf.values()), sum(lb.values())
    emb, out_f, out_b, emb_b = ends
    tau = stage_times(st, stages, layer_f, layer_b, emb, out_f, out_b, emb_b)
    chunk_tau = None if chunks is None else chunk_times(st, chunks, layer_f, layer_b, emb,
                                                         out_f, out_b, p2p_exposed, emb_b)
    return stages, tau, chunk_tau


def _pp_p2p(x, clu, overlap, T, t, p, c, d, v, width=2) -> tuple:
    """The PP p2p message [bytes], its seconds and its exposed seconds per stage-microbatch:
    one [T, h] (/t under SP) message of ``width`` bytes an element (bf16; fp32 under
    ``--fp32-residual-connection``, Megatron's pipeline_dtype) per chunk pass and direction."""
    pbw, plat = group_bandwidth("pp", p, clu, t=t, c=c, d=d)
    # /t: SP splits the sent tensor; without SP Megatron's scatter/gather optimisation
    # (Narayanan §4.1) sends 1/t and all-gathers it over NVLink (not priced)
    msg = width * T * x.h / t
    p2p = np.where(p > 1, collective_time("p2p", msg, p, pbw, plat), 0.0)
    hide_p2p = overlap.pp_p2p & (v > 1)
    p2p_exposed = np.where(hide_p2p, 0.0, p2p) * v   # v chunk passes per stage-microbatch
    return msg, p2p, p2p_exposed


def ep_alone_passes(x, overlap: Overlap, p, v, m, group, ep_alone):
    r"""Seconds of one step's all-to-alls the EP overlap cannot hide beyond its steady state.

    .. math:: t_{\text{EP alone}} = \frac{L_{moe}}{p\,v}\,
        \min\bigl(2 (p - 1) + (v - 1)\,g + 1,\ m v\bigr)\,t_{\text{alone}}

    Megatron-core's combined 1F1B without pipelining (``overlap_moe_expert_parallel_comm``,
    p = 1: ``combined_1f1b_schedule_for_no_pipelining`` in pipeline_parallel/combined_1f1b.py
    at d98e8a64dd) runs the first micro-batch's forward and the last one's backward alone,
    "no a2a overlapping": once per step every MoE layer's issued forward and backward
    all-to-alls less their exposed part (``ep_alone``).  Interleaved (p > 1), the first
    rank's warm-up forwards and cool-down backwards run alone: ``2 (p - 1) + (v - 1) g + 1``
    model-chunk passes each way (schedules.py ``get_pp_rank_microbatches``: one more warm-up
    micro-batch under the overlap; g the micro-batch group size), at most m v, each through
    L_moe / (p v) MoE layers.  0 without the overlap.

    Parameters
    ----------
    x : memsym.timing.gemm.Shape
        The model's shape (its ``L_moe`` MoE layers).
    overlap : Overlap
        Which communication hides behind compute (``ep_a2a``).
    p, v, m, group : array_like
        Pipeline-parallel size [GPUs], model chunks per rank [1], micro-batches [1] and the
        micro-batch group size g [1].
    ep_alone : array_like
        One MoE layer's issued forward and backward all-to-all seconds less the exposed ones
        [s] (:func:`memsym.timing.mean_layer.mean_layer`).

    Examples
    --------
    p = 1: every MoE layer's all-to-alls alone once (by hand: 58 x 1 x 1 ms = 58 ms).

    >>> from memsym.model import preset; from memsym.timing.gemm import shape_of
    >>> x = shape_of(preset("deepseek-v3"))
    >>> round(float(ep_alone_passes(x, Overlap(ep_a2a=True), 1, 1, 64, 1, 1e-3)), 6)
    0.058

    References
    ----------
    .. [megatron-schedules] pipeline_parallel/combined_1f1b.py, schedules.py
       get_pp_rank_microbatches (rev d98e8a64dd).
    """
    alone = np.minimum(2 * (p - 1) + (v - 1) * group + 1, m * v)
    return x.L_moe * alone / (p * v) * ep_alone if overlap.ep_a2a else 0.0 * p
