r"""The step time: per-stage compute from GEMMs, exposed communication, exact schedule, DP sync.

For each pipeline stage the forward and backward of one micro-batch cost the sum over its
layers of GEMM times (:mod:`.efficiency`), attention, memory-bound operations priced by HBM
bandwidth, and the communication that is not hidden (each overlap a named switch in
:class:`Overlap`).  The pipeline makespan comes from the schedule (:mod:`.schedule`): the
slowest stage runs all ``m`` micro-batches, the fill and drain pass once through the others
(divided by ``v`` chunks), times the exact bubble of Megatron-LM's order.  After the flush
the data-parallel gradient reduce-scatter / all-reduce and the parameter all-gather are
exposed beyond what the last backward / first forward hides, then the optimizer step.

This module composes the step; the parts live where they are owned: one layer's time in
:mod:`.layer`, the stages and the schedule in :mod:`.pipeline`, the data-parallel sync and
the optimizer step in :mod:`.data_parallel` (their public names are re-exported here).

References
----------
.. [megatron-lm] distributed/distributed_data_parallel_config.py (overlap_grad_reduce,
   overlap_param_gather); model_parallel_config.py (tp_comm_overlap, overlap_p2p_comm,
   overlap_moe_expert_parallel_comm); arguments.py (overlap_p2p_comm only with interleaving).
.. [narayanan] arXiv:2104.04473 §2.2, §3.2, §5.1.
.. [korthikanti] arXiv:2205.05198 §4-§6.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import InvalidValueError, choose
from ..frameworks import framework
from ..hardware import Cluster, cluster_for, gpu as _gpu
from ..term import Source
from . import data_parallel
from .collectives import collective_time, group_bandwidth
from .data_parallel import OPTIMIZER_BYTES, data_parallel_sync, parameters_per_gpu
from .moe_host import floored_growth
from .records import Overlap, Settings, StepTime
from .gemm import shape_of
from .layer import (BACKWARD_MEMORY, FLASH_BACKWARD, FLASH_FORWARD, UB_COMM_SMS,  # noqa: F401
                    UB_PIPELINE_SPLITS, as_array, layer_time)
from .pipeline import (bubble_in_stages, busiest_stage, chunk_times, end_layers, heaviest_middle,
                       most_layers_per_rank, simulated_pipeline, stage_layers, stage_times)
from ..job import canonical, dropout_kept, recompute_modules_of
from ..vocabulary import FP8_RECIPES
from ..vocabulary import MOE_DISPATCHERS, RECOMPUTE_MODULES
from ..training import microbatches
from ..numeric import unique_rows

__all__ = ["Overlap", "StepTime", "Settings", "overlap_of", "step_time", "step_time_grid",
           "most_layers_per_rank",
           "OPTIMIZER_BYTES", "SOURCES",
           "FLASH_FORWARD", "FLASH_BACKWARD"]

#: Where each part of the breakdown comes from (keys of memsym/references.toml).
SOURCES = {
    "compute": Source("nvidia-gemm-guide", "tile and wave quantisation, math vs memory bound; "
                      "ceiling calibrated per class (docs/time-accuracy.md)"),
    "memory": Source("memsym-derivation", "memory-bound bytes per layer, memsym.timing.gemm."
                     "memory_bytes, at the datasheet HBM bandwidth"),
    "tp": Source("megatron-schedules", "tensor_parallel/layers.py, LinearWithGradAccumulation"
                 "AndAsyncCommunication (async dgrad collectives under the wgrad GEMM)"),
    "ep": Source("gshard", "§2.2 (dispatch and combine all-to-all per MoE layer)"),
    "cp": Source("ring-attention", "§3 (K, V blocks passed around the ring)"),
    "pp": Source("megatron-schedules", "arguments.py: overlap_p2p_comm only with interleaving"),
    "dp": Source("megatron-schedules", "distributed_data_parallel_config.py: overlap_grad_reduce, "
                 "overlap_param_gather"),
    "bubble": Source("megatron-schedules", "schedules.py: get_pp_rank_microbatches, "
                     "get_schedule_table (simulated in memsym.timing.schedule); each chunk's "
                     "layers: transformer_block.py get_num_layers_to_build, "
                     "pipeline_parallel_layer_layout.py (memsym.timing.pipeline.chunk_times)"),
    "optimizer": Source("memsym-derivation", "OPTIMIZER_BYTES per parameter at HBM bandwidth"),
    "collectives": Source("nccl-tests", "doc/PERFORMANCE.md (bus bandwidth factors)"),
}


def step_time_grid(arch, gpu_name, *, t=1, p=1, d=1, c=1, e=1, t_e=None, v=1, b=None, m=1,
                   settings: Settings = Settings(), cluster: Cluster | None = None,
                   overlap: Overlap = Overlap(), eta_gemm=None, first_stage_layers=None,
                   last_stage_layers=None, exact_schedule: bool = False,
                   communication: bool = False, chunk_layers=None, mtp_layers: int = 0) -> dict:
    r"""Step time [s] of many layouts at once: numpy arrays of the knobs broadcast together.

    .. math::

        t_{\text{step}} = m\,\max_r \tau_r + \beta\,\frac{\sum_r \tau_r - \max_r \tau_r}{p - 1}
            + t_{\text{DP, exposed}} + t_{\text{optimizer}},
        \qquad \tau_r = t^{\text{fwd}}_r + t^{\text{bwd}}_r

    with :math:`\tau_r` stage r's forward + backward of one micro-batch (its layers, end layers
    and exposed TP/EP/CP/PP traffic) and :math:`\beta` the exact bubble in stage units
    (:func:`memsym.timing.pipeline.bubble_in_stages`; (p - 1)/v in the closed form).
    Returns a dict of arrays: ``step``; the parts ``compute``, ``bubble``, ``tp``, ``ep``, ``cp``,
    ``pp``, ``dp``, ``optimizer``, ``memory`` [s] (of the busiest stage, communication exposed);
    ``launchable`` (False where Megatron's interleaving rule refuses the layout, still priced).

    Parameters
    ----------
    arch : memsym.model.Architecture
        The model.
    gpu_name : str or GPU
        The GPU (:mod:`memsym.hardware`).
    t, p, d, c, e : array_like
        Tensor-, pipeline-, data-, context- and expert-parallel sizes [GPUs].
    t_e, v : array_like
        Expert tensor-parallel size [GPUs] (default t); model chunks per pipeline rank [1].
    b : array_like, optional
        Micro-batch size [sequences] (default ``settings.micro_batch_size``).
    m : array_like
        Micro-batches per step [1].
    settings : Settings
        What the step does beyond the layout.
    cluster : Cluster, optional
        The interconnect (default: the GPU's usual cluster).
    overlap : Overlap
        Which communication hides behind compute.
    eta_gemm : float, optional
        A fixed achieved GEMM efficiency in (0, 1] [1] replacing the efficiency curve.
    first_stage_layers, last_stage_layers : int, optional
        Uneven pipeline: decoder layers on the first / last stage [1].
    exact_schedule : bool
        The first two terms as the simulated makespan (:func:`.pipeline.simulated_pipeline`).
    communication : bool
        Also return, per group ``g`` of tp, ep, cp, pp, dp, ``comm_g_s`` (its collectives'
        seconds as issued in one step of the busiest stage, before overlap), ``comm_g_bytes``
        (the bytes one GPU sends) and ``comm_g_intra`` (True where its ring stays on the
        intra-node link, :attr:`memsym.hardware.Cluster.domain`).
    chunk_layers : tuple of tuple of int, optional
        One layout's decoder and MTP layers of chunk j of rank r, ``chunk_layers[r][j]`` [layers].
    mtp_layers : int
        MTP layers N on the output (Megatron: last) stage, each a layer of the last layer's kind
        (counted in ``chunk_layers`` where given) and :func:`_output_ends`' work [layers].

    Examples
    --------
    >>> from memsym.model import preset
    >>> out = step_time_grid(preset("llama3-70b"), "h100", t=[4, 8], p=4, d=[2, 1], v=5,
    ...                      m=[16, 32], settings=Settings(seq_length=4096, precision="fp8"))
    >>> bool(out["step"][1] > out["step"][0])   # TP 8 is slower (seed 001)
    True

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §2.2 (the bubble), §3.2; [megatron-schedules].
    """
    st, dev = settings, _gpu(gpu_name)
    clu = cluster if cluster is not None else cluster_for(dev.name)
    _check_settings(st, overlap, dev)
    x, b = shape_of(arch), (st.micro_batch_size if b is None else b)
    t, p, d, c, e, v, b, m, t_e_ = _layout_knobs(t, p, d, c, e, v, b, m, t_e)
    lf, lb, raw_layer, ep_alone, kind = _mean_layer(x, st, dev, clu, t, c, e, t_e_, b, d,
                                                    eta_gemm=eta_gemm, overlap=overlap)
    out_f, out_b, emb = _output_ends(x, st, dev, b, t, c, eta_gemm, mtp_layers, kind)
    msg, p2p, p2p_exposed = _pp_p2p(x, clu, overlap, b * st.seq_length / c, t, p, c, d, v)
    stages, tau, chunk_tau = _stage_durations(st, x.L, p, v, first_stage_layers, last_stage_layers,
                                              chunk_layers, lf, lb, (emb, out_f, out_b),
                                              p2p_exposed, mtp_layers)
    pipeline, bubble, launchable = _pipeline(st, tau, p2p_exposed, out_f, out_b, p, m, v,
                                             exact_schedule, chunk_tau)
    # data parallel: gradients of this GPU's shard over DP x CP (experts: expert DP)
    dense_gpu, expert_gpu, layers_max, ends_gpu = parameters_per_gpu(x, st, p, t, e, t_e_, stages)
    sync = data_parallel_sync(st, dev, clu, overlap, dense_gpu, expert_gpu, tau["first"], pipeline,
                              p=p, m=m, t=t, c=c, d=d, e=e, t_e=t_e_, ends_gpu=ends_gpu, muon=(arch, layers_max))
    group = p if st.group_size is None else st.group_size
    edges = _ep_alone_passes(x, overlap, p, v, m, group, ep_alone)
    step = pipeline + edges + sync["dp"] + sync["optimizer"]
    per_stage_mb = m * layers_max
    out = {"step": step, "pipeline": pipeline + edges, "bubble": bubble,
           **_layer_parts(lf, lb, per_stage_mb, edges), "pp": m * 2 * p2p_exposed,
           "dp": sync["dp"], "optimizer": sync["optimizer"], "launchable": launchable}
    if communication:
        out.update(data_parallel.communication(
            st, clu, raw_layer, per_stage_mb, m, p, v, t, c, d, e, t_e_, sync["ndp"],
            sync["edp"], st.grad_bytes, dense_gpu, expert_gpu, p2p, msg,
            (sync["rs"], sync["ag"], sync["once"], sync["again"]), ends_gpu=ends_gpu))
    return out


def _output_ends(x, st, dev, b, t, c, eta_gemm, mtp_layers, kind) -> tuple:
    """:func:`memsym.timing.pipeline.end_layers`' output-layer forward and backward and
    embedding [s], the output stage's MTP layers priced as the last decoder layer's kind
    (``Shape.last_moe``): ``kind``, that kind's forward and backward seconds beyond the mean
    layer's, which the stage's layer count prices them as [s]."""
    out_f, out_b, emb = end_layers(x, st, dev, b, t, c, eta_gemm, mtp_layers)
    return out_f + mtp_layers * kind[0], out_b + mtp_layers * kind[1], emb


def _pipeline(st, tau: dict, p2p_exposed, out_f, out_b, p, m, v, exact_schedule: bool,
              chunk_tau=None) -> tuple:
    """The pipeline's seconds (m tau_max plus the bubble in stage units, or the simulated
    schedule, with each chunk's own durations where ``chunk_tau`` gives them), its bubble [s]
    and whether Megatron's interleaving rule lets it launch."""
    tau_max, total_tau = busiest_stage(st, tau, p, p2p_exposed, out_f, out_b)
    beta, launchable = bubble_in_stages(st, p, m, v)
    others = np.where(p == 1, 0.0, (total_tau - tau_max) / np.maximum(p - 1, 1))
    pipeline = m * tau_max + beta * others
    if exact_schedule:
        pipeline = simulated_pipeline(st, pipeline, tau, p2p_exposed, p, m, v, chunk_tau)
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
    layer's forward and backward [s]; ``mtp``: MTP layers on the output stage."""
    stages = _stages(st, L, p, v, first, last, chunks, mtp)
    layer_f, layer_b = sum(lf.values()), sum(lb.values())
    tau = stage_times(st, stages, layer_f, layer_b, *ends)
    chunk_tau = None if chunks is None else chunk_times(st, chunks, layer_f, layer_b,
                                                         *ends, p2p_exposed)
    return stages, tau, chunk_tau


def _pp_p2p(x, clu, overlap, T, t, p, c, d, v) -> tuple:
    """The PP p2p message [bytes], its seconds and its exposed seconds per stage-microbatch:
    one [T, h] (/t under SP) bf16 message per chunk pass and direction."""
    pbw, plat = group_bandwidth("pp", p, clu, t=t, c=c, d=d)
    # /t: SP splits the sent tensor; without SP Megatron's scatter/gather optimisation
    # (Narayanan §4.1) sends 1/t and all-gathers it over NVLink (not priced)
    msg = 2 * T * x.h / t
    p2p = np.where(p > 1, collective_time("p2p", msg, p, pbw, plat), 0.0)
    hide_p2p = overlap.pp_p2p & (v > 1)
    p2p_exposed = np.where(hide_p2p, 0.0, p2p) * v   # v chunk passes per stage-microbatch
    return msg, p2p, p2p_exposed


def _ep_alone_passes(x, overlap: Overlap, p, v, m, group, ep_alone):
    """Seconds of one step's all-to-alls the EP overlap cannot hide beyond its steady state.

    Megatron-core's combined 1F1B without pipelining (``overlap_moe_expert_parallel_comm``,
    p = 1: ``combined_1f1b_schedule_for_no_pipelining`` in pipeline_parallel/combined_1f1b.py
    at d98e8a64dd) runs the first micro-batch's forward and the last one's backward alone,
    "no a2a overlapping": once per step every MoE layer's issued forward and backward
    all-to-alls less their exposed part (``ep_alone``) [s].  Interleaved (p > 1), the first
    rank's warm-up forwards and cool-down backwards run alone: ``2 (p - 1) + (v - 1) g + 1``
    model-chunk passes each way (schedules.py ``get_pp_rank_microbatches``: one more warm-up
    micro-batch under the overlap; g the micro-batch group size), at most m v, each through
    L_moe / (p v) MoE layers."""
    alone = np.minimum(2 * (p - 1) + (v - 1) * group + 1, m * v)
    return x.L_moe * alone / (p * v) * ep_alone if overlap.ep_a2a else 0.0 * p


def _layer_parts(lf: dict, lb: dict, per_stage_mb, ep_once=0.0) -> dict:
    """The step's parts spent in the busiest stage's layers [s]: compute (GEMMs and the
    attention core), memory-bound work and the exposed TP, EP (plus ``ep_once``, the
    all-to-alls exposed once per step) and CP communication."""
    return {"compute": per_stage_mb * (lf["gemm"] + lb["gemm"] + lf["attention"] + lb["attention"]),
            "memory": per_stage_mb * (lf["memory"] + lb["memory"]),
            "tp": per_stage_mb * (lf["tp"] + lb["tp"]),
            "ep": per_stage_mb * (lf["ep"] + lb["ep"]) + ep_once,
            "cp": per_stage_mb * (lf["cp"] + lb["cp"])}


def _check_settings(st, overlap, dev) -> None:
    """Refuse settings and overlaps the step cannot price on ``dev``, one line each, in a
    fixed order."""
    if not isinstance(st, Settings):
        raise InvalidValueError(f"settings must be a Settings, got {type(st).__name__}")
    if not isinstance(overlap, Overlap) or not all(
            isinstance(getattr(overlap, k), bool) for k in Overlap.__dataclass_fields__):
        raise InvalidValueError("overlap must be an Overlap whose switches are true or false")
    for what in ("seq_length", "micro_batch_size"):
        val = getattr(st, what)
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or not 1 <= val <= 10**8:
            raise InvalidValueError(f"{what} must be a whole number in 1..1e8, got {val!r:.40}")
    if st.grad_bytes not in (1, 2, 4):
        raise InvalidValueError(f"grad_bytes must be 1, 2 or 4, got {st.grad_bytes!r:.40}")
    choose("precision", st.precision, ("bf16", "fp16", "fp8", "fp32", "fp4"))
    if st.fp8_recipe is not None:
        choose("FP8 recipe", st.fp8_recipe, FP8_RECIPES)
        if st.precision != "fp8":
            raise InvalidValueError(f"fp8_recipe {st.fp8_recipe} needs precision fp8, "
                                    f"not {st.precision}")
    if st.fp8_param_gather and st.precision != "fp8" or st.fp4_param_gather and st.precision != "fp4":
        raise InvalidValueError(f"fp8_param_gather needs precision fp8 and fp4_param_gather "
                                f"precision fp4, not {st.precision}")
    if st.precision == "fp4":
        dev.peak("fp4")     # NVFP4 GEMMs need the FP4 peak the vendor prints (refused else)
    if st.fp8_recipe == "mxfp8" and dev.arch_class not in ("blackwell", "blackwell-ultra"):
        # transformer_engine/pytorch/quantization.py, _compute_mxfp8_support
        raise InvalidValueError(f"MXFP8 needs compute capability 10.0 or higher (Blackwell): "
                                f"{dev.name} is {dev.arch_class}, where Transformer Engine refuses it")
    choose("recompute", st.recompute, ("none", "selective", "full", "selective-op"))
    if isinstance(st.recompute_modules, str):
        raise InvalidValueError("recompute_modules must be a tuple of module names, got a string")
    for mod in st.recompute_modules:
        choose("recompute module", mod, RECOMPUTE_MODULES)
    choose("pipeline schedule", st.schedule, ("1f1b", "gpipe"))
    choose("MoE dispatcher", st.moe_dispatcher, MOE_DISPATCHERS)


def _layout_knobs(t, p, d, c, e, v, b, m, t_e) -> tuple:
    """The layout knobs broadcast together as float arrays (t_e defaulting to t), each a
    whole number in 1..1e7, at most 10,000,000 layouts."""
    t, p, d, c, e, v, b, m = np.broadcast_arrays(*(as_array(q) for q in (t, p, d, c, e, v, b, m)))
    t_e_ = t if t_e is None else np.broadcast_to(as_array(t_e), t.shape)
    knobs = np.stack([t, p, d, c, e, v, b, m])
    if not np.all(np.isfinite(knobs)) or np.any(knobs != np.floor(knobs)) or np.any(knobs < 1) \
            or np.any(knobs > 10**7):
        raise InvalidValueError("every layout knob (t, p, d, c, e, v, b, m) must be a whole "
                                "number in 1..1e7")
    if t.size > 10_000_000:
        raise InvalidValueError(f"{t.size} layouts exceed the 10,000,000 a grid may hold")
    return t, p, d, c, e, v, b, m, t_e_


def _mean_layer(x, st, dev, clu, t, c, e, t_e, b, d, *, eta_gemm, overlap) -> tuple:
    """Forward and backward parts of the mean decoder layer (MoE layers spread evenly over
    the stages, an assumption), its collectives as issued (:func:`layer_time`) and what an
    MoE layer's all-to-alls add when nothing overlaps them: the issued forward and backward
    EP seconds less the exposed ones [s] (0 without MoE), and the forward and backward
    seconds a layer of the last layer's kind (an MTP layer's) takes beyond the mean [s].

    A layer's time depends on the layout only through (t, c, e, t_e, b, d): a grid of many
    layouts (a search's, where p, v and the stage split vary too) is priced once per distinct
    combination and spread back (elementwise arithmetic: the same numbers to the last bit)."""
    knobs = np.broadcast_arrays(t, c, e, t_e, b, d)
    shape = knobs[0].shape
    # settings given per row (a recompute fraction per layout) are priced row by row
    per_row = any(isinstance(v, (np.ndarray, list)) and np.ndim(v)
                  for v in (getattr(st, f.name) for f in dataclasses.fields(st)))
    if not per_row and knobs[0].size > 64 and all(np.array_equal(k, np.floor(k)) for k in knobs) \
            and all(np.all(k >= 0) for k in knobs):
        uq, inv = unique_rows(*(k.ravel() for k in knobs))
        if 2 * len(uq) <= knobs[0].size:
            got = _mean_layer_of(x, st, dev, clu, *(uq[:, i].astype(float) for i in range(6)),
                                 eta_gemm=eta_gemm, overlap=overlap)
            return _spread(got, inv, shape)
    return _mean_layer_of(x, st, dev, clu, t, c, e, t_e, b, d, eta_gemm=eta_gemm,
                          overlap=overlap)


def _spread(value, inv, shape):
    # the per-distinct-row values of _mean_layer back on every row (numbers stay numbers)
    if isinstance(value, dict):
        return {k: _spread(v, inv, shape) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_spread(v, inv, shape) for v in value)
    return value[inv].reshape(shape) if np.ndim(value) else value


def _mean_layer_of(x, st, dev, clu, t, c, e, t_e, b, d, *, eta_gemm, overlap) -> tuple:
    """:func:`_mean_layer` on every row as given."""
    if x.kinds:
        return _mean_hybrid_layer(x, st, dev, clu, t, c, e, t_e, b, d, eta_gemm=eta_gemm,
                                  overlap=overlap)
    lf, lb = {}, {}
    ep_alone, kind = 0.0, (0.0, 0.0)
    raw_dense, raw_moe = {}, {}
    dense_f, dense_b = layer_time(x, st, dev, clu, t, c, e, t_e, b, moe=False, eta_gemm=eta_gemm,
                                  overlap=overlap, dp=d, raw=raw_dense)
    raw_layer = raw_dense
    if x.L_moe:
        moe_f, moe_b = layer_time(x, st, dev, clu, t, c, e, t_e, b, moe=True, eta_gemm=eta_gemm,
                                  overlap=overlap, dp=d, raw=raw_moe)
        share = x.L_moe / x.L   # MoE layers spread evenly over stages (assumption)
        for key in dense_f:
            lf[key] = (1 - share) * dense_f[key] + share * moe_f[key]
            lb[key] = (1 - share) * dense_b[key] + share * moe_b[key]
        raw_layer = {g: tuple((1 - share) * u + share * w for u, w in zip(raw_dense[g], raw_moe[g]))
                     for g in raw_dense}
        # what the all-to-alls the overlap hides add when they run alone, under the MoE
        # layer's host floor (memsym.timing.moe_host)
        ep_alone = (floored_growth(raw_moe["gpu"][0], raw_moe["ep"][0] - moe_f["ep"])
                    + floored_growth(raw_moe["gpu"][1], raw_moe["ep"][1] - moe_b["ep"]))
        last_f, last_b = (moe_f, moe_b) if x.last_moe else (dense_f, dense_b)
        kind = (sum(last_f.values()) - sum(lf.values()), sum(last_b.values()) - sum(lb.values()))
    else:
        lf, lb = dense_f, dense_b
    return lf, lb, raw_layer, ep_alone, kind


def _mean_hybrid_layer(x, st, dev, clu, t, c, e, t_e, b, d, *, eta_gemm, overlap) -> tuple:
    """:func:`_mean_layer_of` for a hybrid model: each layer kind of ``x.kinds`` priced alone
    (:func:`layer_time` with its mixer and MLP), weighted by its share of the L layers (the
    kinds spread evenly over the stages, an assumption); an MTP layer priced as the mean."""
    lf, lb, raw_layer = {}, {}, {}
    ep_alone = 0.0
    for (mixer, ffn), n, _, _ in x.kinds:
        raw = {}
        f, bw = layer_time(x, st, dev, clu, t, c, e, t_e, b, moe=bool(ffn), eta_gemm=eta_gemm,
                           overlap=overlap, dp=d, raw=raw, mixer=mixer, mlp=ffn is not None)
        share = n / x.L
        for key in f:
            lf[key] = lf.get(key, 0.0) + share * f[key]
            lb[key] = lb.get(key, 0.0) + share * bw[key]
        for g in ("tp", "ep", "cp"):
            raw_layer[g] = tuple(u + share * w for u, w in
                                 zip(raw_layer.get(g, (0.0,) * 4), raw[g]))
        if ffn:     # the MoE layers' all-to-alls alone (as _mean_layer_of)
            ep_alone = (floored_growth(raw["gpu"][0], raw["ep"][0] - f["ep"])
                        + floored_growth(raw["gpu"][1], raw["ep"][1] - bw["ep"]))
    return lf, lb, raw_layer, ep_alone, (0.0, 0.0)


def _recompute_fraction(arch, layout, training) -> float:
    # Megatron's --recompute-method block N reruns the first N layers of each model chunk;
    # torchtitan's layer SAC every N-th block of a rank (floor(n/N) of its n, the rank with
    # the most layers: the slowest stage)
    method = training.memory.recompute_method if training.memory.recompute == "full" else None
    if method == "every":
        n = int(most_layers_per_rank(arch.num_layers, layout.p, layout.first_stage_layers or 0,
                                     layout.last_stage_layers or 0))
        return (n // training.memory.recompute_num_layers) / n
    if method != "block":
        return 1.0
    chunk = arch.num_layers / (layout.p * (layout.v or 1))
    return min(training.memory.recompute_num_layers, chunk) / chunk


def overlap_of(training) -> Overlap:
    """The overlaps a job runs with, each one left unset at its framework's default.

    Its ``overlap_grad_reduce`` / ``overlap_param_gather`` / ``tp_comm_overlap`` /
    ``overlap_moe_expert_parallel_comm`` / ``overlap_p2p_comm``; the defaults from
    :meth:`memsym.frameworks.Framework.overlaps_by_default`.  Megatron-LM's ``--overlap-grad-reduce`` and ``--overlap-param-gather`` are ``store_true``
    flags (off unless given); torchtitan's FSDP2 and torch DDP overlap in the backward;
    DeepSpeed's ``overlap_comm`` defaults to on for ZeRO-3 only.  The other switches keep
    :class:`Overlap`'s defaults (Megatron's own: ``overlap_p2p_comm`` with interleaving, the
    backward's async TP collectives, Transformer Engine's ring attention).

    Examples
    --------
    >>> from memsym.training import Training
    >>> overlap_of(Training()).grad_reduce, overlap_of(Training(framework="torchtitan",
    ...     sharding="fsdp")).grad_reduce
    (False, True)
    >>> o = overlap_of(Training(overlap_grad_reduce=True, overlap_param_gather=True))
    >>> o.grad_reduce, o.param_gather, o.tp_comm
    (True, True, False)

    References
    ----------
    .. [megatron-lm-arguments] --overlap-grad-reduce, --overlap-param-gather (store_true).
    .. [torchtitan-job-config] FSDP2; [deepspeed-config] zero/config.py overlap_comm.
    """
    fw = framework(training.framework)
    default = fw.overlaps_by_default(training.states.sharding)

    def pick(value):
        return default if value is None else bool(value)

    return Overlap(grad_reduce=pick(training.comm.overlap_grad_reduce),
                   param_gather=pick(training.comm.overlap_param_gather),
                   tp_comm=bool(training.comm.tp_comm_overlap),
                   # torchtitan's async TP is torch's micro-pipelining, not TE's userbuffers
                   tp_comm_split=fw.tp_userbuffers,
                   ep_a2a=bool(training.comm.overlap_moe_expert_parallel_comm),
                   pp_p2p=bool(training.pipeline.overlap_p2p_comm))


def step_time(arch, layout, training, gpu_name, cluster: Cluster | None = None, *,
              overlap: Overlap | None = None, eta_gemm=None, flops_per_token=None,
              m: int | None = None) -> StepTime:
    r"""Step time of one layout [s], with a breakdown (memsym Layout and Training records).

    :func:`step_time_grid` of one layout, m from ``training``'s ``num_microbatches`` or
    ``global_batch_size``.

    Parameters
    ----------
    arch : memsym.model.Architecture
        The model.
    layout : memsym.training.Layout
        The parallel layout.
    training : memsym.training.Training
        The training step (gives s, b and m).
    gpu_name : str or GPU
        The GPU (:mod:`memsym.hardware`).
    cluster : Cluster, optional
        The interconnect (default: the GPU's usual cluster).
    overlap : Overlap, optional
        Which communication hides behind compute (default: the job's, :func:`overlap_of`).
    eta_gemm : float, optional
        A fixed achieved GEMM efficiency in (0, 1] [1] replacing the efficiency curve.
    flops_per_token : float, optional
        Model FLOPs per token [FLOP/token] (adds the MFU).
    m : int, optional
        Micro-batches per step and pipeline [1]: a :class:`memsym.job.Job`'s ``m`` (computed
        once when the job was built); default from ``training`` (:func:`memsym.job.microbatches`).

    Returns
    -------
    StepTime
        The step [s], its parts [s], the bubble [s] and the MFU [1].

    Examples
    --------
    >>> from memsym.model import preset
    >>> from memsym.training import Layout, Training
    >>> st = step_time(preset("llama3-8b"), Layout(t=2, d=4, sequence_parallel=True),
    ...                Training(seq_length=4096, global_batch_size=32, flash_attention=True,
    ...                         dropout=False), "h100")
    >>> st.bubble, st.assumptions["microbatches"]      # no pipeline: no bubble; m = 32/4
    (0.0, 8)
    >>> sorted(st.parts)[:4]
    ['bubble', 'compute', 'cp', 'dp']

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §2.2, §3.2, §5.1.
    """
    training = canonical(training)        # "GPipe" is GPipe here too
    # a Job's m (Job.m, computed once when it was built), else from the batch sizes
    mm = microbatches(layout, training) if m is None else m
    if mm is None:
        raise InvalidValueError("give num_microbatches or global_batch_size to price a step")
    if overlap is None:
        overlap = overlap_of(training)
    st = _settings_of(arch, layout, training)
    pl = getattr(layout, "pipeline_layout", None)
    # a custom layout (--pipeline-model-parallel-layout, the account-for switches): each
    # chunk's own layers, an MTP layer as one more; else Megatron's first/last sizes, every
    # chunk of a rank equal, the MTP layers on the last stage
    chunks = tuple(pl.chunk_timed_layers(r) for r in range(layout.p)) \
        if pl is not None and layout.p > 1 else None
    out = step_time_grid(arch, gpu_name, t=layout.t, p=layout.p, d=layout.d, c=layout.c,
                         e=layout.e, t_e=layout.t_e, v=layout.v or 1, m=mm, settings=st,
                         cluster=cluster, overlap=overlap, eta_gemm=eta_gemm,
                         first_stage_layers=layout.first_stage_layers,
                         last_stage_layers=layout.last_stage_layers,
                         exact_schedule=True, communication=True, chunk_layers=chunks,
                         mtp_layers=getattr(arch, "mtp_num_layers", 0) or 0)

    def first_of(key):
        return np.asarray(out[key]).ravel()[0]

    parts = {k: float(first_of(k)) for k in out if k != "launchable" and not k.startswith("comm_")}
    comm = _communication_of(first_of, parts)
    total = parts.pop("step")
    mfu = None
    if flops_per_token is not None:
        tokens = mm * training.batch.micro_batch_size * layout.d * training.batch.seq_length
        mfu = 3 * flops_per_token * tokens / (layout.world_size * total * _gpu(gpu_name).peak(
            training.states.precision))
    return StepTime(total, parts, parts["bubble"], mfu,
                    {"overlap": overlap, "eta_gemm": eta_gemm, "microbatches": mm,
                     "sources": SOURCES, "settings": st,
                     "launchable": bool(np.asarray(out["launchable"]).ravel()[0])}, comm)


def _settings_of(arch, layout, training) -> Settings:
    """What the step of ``layout`` and ``training`` does beyond the layout (:class:`Settings`)."""
    batch, mem, states, pipe = training.batch, training.memory, training.states, training.pipeline
    titan = framework(training.framework).torch_pipelining      # torch.distributed.pipelining
    return Settings(seq_length=batch.seq_length, micro_batch_size=batch.micro_batch_size,
                    recompute=mem.recompute,
                    sequence_parallel=bool(layout.sequence_parallel and layout.t > 1),
                    flash_attention=mem.flash_attention, dropout=dropout_kept(training),
                    precision=states.precision, fp8_recipe=states.fp8_recipe,
                    fp8_param_gather=bool(states.fp8_param_gather),
                    fp4_param_gather=bool(states.fp4_param_gather),
                    # every scheme but DDP shards the optimizer and reduce-scatters (ZeRO-1 on)
                    distributed_optimizer=states.sharding != "ddp",
                    # --grad-reduce-in-bf16 (grad_dtype bf16) reduces 2-byte gradients, as the
                    # memory counts its buffer; otherwise Megatron's fp32 main-grad buffer
                    grad_bytes=2 if states.grad_dtype in ("bf16", "fp16") else 4,
                    gather_per_microbatch=states.sharding in ("zero3", "fsdp"),
                    reduce_per_microbatch=states.sharding == "zero2",
                    pipelined_fsdp=states.sharding == "fsdp" and titan,
                    recompute_fraction=_recompute_fraction(arch, layout, training),
                    # Megatron's --recompute-modules under selective (default core_attn)
                    recompute_modules=(recompute_modules_of(training)
                                       if mem.recompute == "selective" else ("core_attn",)),
                    group_size=pipe.microbatch_group_size, torch_rounds=titan,
                    schedule=pipe.schedule, output_first=pipe.stage_placement == "v",
                    tp_overlap_cfg=training.comm.tp_comm_overlap_cfg,
                    moe_dispatcher=mem.moe_dispatcher, optimizer=states.optimizer)


def _communication_of(first_of, parts: dict) -> dict:
    """Each group's collectives in one step, as issued and exposed, and the link it crosses
    (:attr:`memsym.timing.records.StepTime.communication`)."""
    # bytes: whole bytes (sums of element counts x widths; rounding drops float residue)
    return {g: {"bytes": int(round(float(first_of(f"comm_{g}_bytes")))),
                "seconds": float(first_of(f"comm_{g}_s")), "exposed_seconds": parts[g],
                "link": "intra" if bool(first_of(f"comm_{g}_intra")) else "inter"}
            for g in ("tp", "cp", "pp", "dp", "ep")}
