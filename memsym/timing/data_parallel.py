r"""The data-parallel part of the step: the gradient sync after the flush, the parameter
all-gather, the optimizer step, and each group's collectives as issued.

After the pipeline flush the data-parallel gradient reduce-scatter / all-reduce and the
parameter all-gather are exposed beyond what the last backward / first forward hides (ZeRO-3
and FSDP: every micro-batch, behind the pipeline's compute where it fits), then the optimizer
step reads and writes :data:`OPTIMIZER_BYTES` per parameter of the GPU's shard (Muon's
matrices :func:`memsym.timing.muon.muon_step_bytes`).  The
all-gather moves each parameter at the width of
:func:`memsym.terms.widths.param_gather_bytes` (the one rule the step time and the
communication report share): 2 B for bf16, 1 B for FP8 linear weights under
``--fp8-param-gather``, 1/2 B for NVFP4 ones under ``--fp4-param-gather``.

References
----------
.. [megatron-lm] distributed/distributed_data_parallel_config.py (overlap_grad_reduce,
   overlap_param_gather).
.. [zero] arXiv:1910.02054 §7.
"""

from __future__ import annotations

import numpy as np

from ..terms.widths import param_gather_bytes
from .collectives import (collective_bytes, collective_time, group_bandwidth, group_link,
                          nvlink_domain)
from .efficiency import memory_time
from .model_counts import layer_params
from .muon import muon_parameters, muon_step_bytes, muon_step_time
from .records import Overlap, Settings

__all__ = ["OPTIMIZER_BYTES", "gather_wait_fraction", "fsdp_group_collectives"]

#: Megatron-core's default bucket of the gradient / parameter buffers: max(40e6, 1e6 x DP)
#: elements (distributed_data_parallel.py:133-134, Megatron-LM d98e8a64dd) [elements].
BUCKET_FLOOR, BUCKET_PER_DP = 40_000_000, 1_000_000

#: HBM bytes per parameter of one optimizer step (Megatron Float16Optimizer path): grad-norm read (4), Adam reads g, p, m, v (16) and writes p, m, v (12), fp32 -> bf16 copy (6), zeroing the grad buffer (4).  Memsym count; was: read the fp32 gradient
#: (4), read and write master (8), m (8), v (8), write the bf16 weight (2).  Memsym's count.
OPTIMIZER_BYTES = 42


def parameters_per_gpu(x, st: Settings, p, t, e, t_e, stages: tuple) -> tuple:
    r"""Dense and expert parameters of the busiest pipeline rank's GPU [parameters].

    Also its decoder layers, and of its dense parameters those outside the decoder layers:

    .. math:: N_{dense} = \frac{L_{max}\,\bar N_{layer} + N_{ends}}{t}
       + [\text{AutoTP}]\,V h\,(1 - 1/t), \quad
       N_{expert} = \frac{L_{max}\,\bar N_{expert}}{e\,t_e}, \quad
       N_{ends} = V h\,(1 + [p = 1 \wedge \text{untied}]) + h

    ``stages``: the decoder layers of the (first, middle, last) stages, and of the heaviest
    middle stage where the middle ones differ (a fourth entry).  The dense ones are
    split over TP (but DeepSpeed AutoTP's word embedding, ``Settings.whole_embedding``), the
    experts over EP x expert TP; the end stages hold the embedding or the
    output layer and the final norm (the fourth value: not linear-layer weights, gathered at
    16 bits under FP8 / NVFP4 parameters; so are the dense weights of the rank's BF16 layers,
    ``Settings.bf16_layers``: both ends' at p = 1, else the larger end's).  A hybrid's layer is the mean of its kinds' weights
    (``Shape.kinds``).

    Parameters
    ----------
    x : Shape
        The model's GEMM shapes (:func:`memsym.timing.gemm.shape_of`).
    st : Settings
        The run's settings.
    p, t, e, t_e : array_like
        Pipeline-, tensor-, expert- and expert-tensor-parallel sizes [GPUs].
    stages : tuple
        Decoder layers of the first, middle, last (and heaviest middle) stage [layers].

    Examples
    --------
    Llama-2-7B on one GPU: 2 V h + h = 2 x 32000 x 4096 + 4096 = 262148096 end weights (by
    hand), 6.74e9 parameters in all (the model card's 6.74B):

    >>> from memsym.model import preset
    >>> from memsym.timing.gemm import shape_of
    >>> dense, expert, layers, ends = parameters_per_gpu(shape_of(preset("llama2-7b")),
    ...     Settings(), np.array(1.0), 1.0, 1.0, 1.0, (32, 32, 32))
    >>> float(expert), float(layers), round(float(dense) / 1e9, 2), int(ends)  # 2 V h + h
    (0.0, 32.0, 6.74, 262148096)

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §2 (parameters split over tensor and pipeline ranks).
    """
    first, _, last, middle = stages if len(stages) == 4 else (*stages, stages[1])
    dense_p, _ = layer_params(x, moe=False)
    if x.kinds:     # a hybrid's layers by kind (memsym.model.hybrid_layers)
        per_layer_dense = sum(n * dense for _, n, dense, _ in x.kinds) / x.L
        per_layer_expert = sum(n * expert for _, n, _, expert in x.kinds) / x.L
    elif x.L_moe:
        moe_dense, moe_expert = layer_params(x, moe=True)
        per_layer_dense = ((x.L - x.L_moe) * dense_p + x.L_moe * moe_dense) / x.L
        per_layer_expert = x.L_moe * moe_expert / x.L
    else:
        per_layer_dense, per_layer_expert = dense_p, 0.0
    layers_max = np.maximum(np.maximum(first, last), middle)
    # the end stages' own weights: the embedding (first stage) or the output layer and the
    # final norm (last); with p = 1 one GPU holds them all, both matrices when untied
    ends = x.V * x.h * np.where((p == 1) & bool(x.untied), 2, 1) + x.h
    # AutoTP's word embedding (a tied output layer with it) whole on every TP rank
    whole = x.V * x.h * (1 - 1 / np.asarray(t, dtype=float)) if st.whole_embedding else 0.0
    dense_gpu = (layers_max * per_layer_dense + ends) / t + whole
    ends_gpu = ends / t + whole
    if st.output_first:
        # V placement: the first rank holds both matrices, the others only layers
        v_first = first * per_layer_dense + 2 * x.V * x.h + x.h
        v_rest = np.maximum(middle, last) * per_layer_dense
        dense_gpu = np.where(p > 1, np.maximum(v_first, v_rest) / t, dense_gpu)
        ends_gpu = np.where((p > 1) & (v_first < v_rest), 0.0,
                            np.where(p > 1, (2 * x.V * x.h + x.h) / t, ends_gpu))
    expert_gpu = layers_max * per_layer_expert / (e * t_e)
    n_bf = st.bf16_layers if st.precision in ("fp8", "fp4") else (0, 0)   # gathered 16-bit
    ends_gpu = ends_gpu + np.where(p == 1, sum(n_bf), max(n_bf)) * per_layer_dense / t
    return dense_gpu, expert_gpu, layers_max, ends_gpu


def gathered_bytes(st: Settings, dense_gpu, expert_gpu, ends_gpu=0.0) -> tuple:
    r"""The bytes of the dense and the expert parameters the all-gather assembles on a GPU [bytes].

    .. math:: B_{dense} = (N_{dense} - N_{ends})\,w_{lin} + N_{ends}\,w_{16}, \quad
       B_{expert} = N_{expert}\,w_{lin}

    Linear-layer weights at the width of
    :func:`memsym.terms.widths.param_gather_bytes` (FP8 / NVFP4 parameters), the ``ends_gpu``
    embedding, output-layer and final-norm weights at 16 bits (the decoder layers' norms and
    routers are counted as linear weights).

    Parameters
    ----------
    st : Settings
        The run's settings (precision, FP8 / FP4 parameter gather).
    dense_gpu, expert_gpu : array_like
        Dense and expert parameters of the GPU [parameters].
    ends_gpu : array_like
        Of ``dense_gpu``, the weights outside the decoder layers [parameters].

    Examples
    --------
    bf16: (10 - 2) x 2 + 2 x 2 = 20 and 4 x 2 = 8 bytes; NVFP4 gather: 8 x 1/2 + 2 x 2 = 8
    and 4 x 1/2 = 2 (by hand):

    >>> gathered_bytes(Settings(), 10.0, 4.0, 2.0)
    (20.0, 8.0)
    >>> gathered_bytes(Settings(precision="fp4", fp4_param_gather=True), 10.0, 4.0, 2.0)
    (8.0, 2.0)

    References
    ----------
    .. [megatron-lm-arguments] ``--fp8-param-gather``, ``--fp4-param-gather``.
    """
    lin = float(param_gather_bytes(st.precision, st.fp8_recipe, st.fp8_param_gather,
                                   st.fp4_param_gather))
    other = float(param_gather_bytes(st.precision, linear=False))
    return (dense_gpu - ends_gpu) * lin + ends_gpu * other, expert_gpu * lin


def gather_wait_fraction(x, e, t_e, d):
    r"""Of the experts' parameter all-gather, the share the first forward waits for [1].

    .. math:: \phi = \frac{w_1 \max(0, E_l - k_1) + w_2 \max(0, E_l - k_2)}
       {E_l\,(w_1 + w_2)}, \quad k_i = \lceil S / w_i \rceil, \quad
       S = \max(4 \cdot 10^7, 10^6 d), \quad E_l = E / e

    with :math:`w_1 = (k - 1)\,h_e f_e / t_e`, :math:`w_2 = h_e f_e / t_e` one local
    expert's fc1 and fc2 weights (:math:`k` = 3 gated, else 2; :math:`h_e` the latent width
    where there is one).  Under ``overlap_param_gather`` each bucket's all-gather is
    dispatched when the forward pre-hook waits on the one before it, one bucket ahead
    (param_and_grad_buffer.py:538-567), and the pre-hook of a module waits on every
    bucket holding one of its parameters in turn (distributed_data_parallel.py:517-551).
    Transformer Engine's ``GroupedLinear`` holds each local expert's weight as its own
    parameter (grouped_linear.py:1740-1741, ``moe_single_grouped_weight`` False by
    default), and a bucket closes at the first parameter that takes it to :math:`S`
    elements (param_and_grad_buffer.py:986; the distributed optimizer's layout alike,
    distrib_optimizer.py:567-574), so an fc1 / fc2 module spans
    :math:`\lceil E_l / k_i \rceil` buckets of :math:`k_i` experts: only the first was
    dispatched ahead, the others run while the GPU waits.

    Parameters
    ----------
    x : Shape
        The model's GEMM shapes (:func:`memsym.timing.gemm.shape_of`).
    e, t_e, d : array_like
        Expert-, expert-tensor- and data-parallel sizes [GPUs].

    Examples
    --------
    GPT-OSS 120B at EP 8, DP 64 (128 experts, h = f_e = 2880, gated): 16 local experts,
    S = 64e6, fc1 weights 16 588 800 (k_1 = 4), fc2 8 294 400 (k_2 = 8), so
    (2 x 12 + 1 x 8) / (3 x 16) = 2/3 (by hand):

    >>> from memsym.model import preset
    >>> from memsym.timing.gemm import shape_of
    >>> x = shape_of(preset("gpt-oss-120b"))
    >>> round(float(gather_wait_fraction(x, 8, 1, 64)), 4)
    0.6667
    >>> float(gather_wait_fraction(x, 64, 1, 64))   # 2 local experts: one bucket a module
    0.0

    References
    ----------
    .. [megatron-lm] distributed/distributed_data_parallel.py:133-134, 517-551;
       distributed/param_and_grad_buffer.py:538-567, 986;
       optimizer/distrib_optimizer.py:567-574 (d98e8a64dd).
    .. [transformer-engine] pytorch/module/grouped_linear.py:1740-1741 (d0067d0da6).
    """
    e, t_e, d = (np.asarray(v, dtype=float) for v in (e, t_e, d))
    if not x.E:
        return np.zeros(np.broadcast(e, t_e, d).shape)
    local = x.E / e
    width = (x.h_lat or x.h) * x.f_e / t_e
    w1, w2 = ((3 if x.gated else 2) - 1) * width, width
    size = np.maximum(BUCKET_FLOOR, BUCKET_PER_DP * d)
    wait1 = np.maximum(0, local - np.ceil(size / w1))
    wait2 = np.maximum(0, local - np.ceil(size / w2))
    return (w1 * wait1 + w2 * wait2) / (local * (w1 + w2))


def data_parallel_sync(st: Settings, dev, clu, overlap: Overlap, dense_gpu, expert_gpu,
                       first_stage: tuple, pipeline, *, p, m, t, c, d, e, t_e,
                       ends_gpu=0.0, muon=None, gather_wait=0.0) -> dict:
    r"""The exposed data-parallel seconds of one step and the optimizer step's seconds.

    .. math:: t_{dp} = \max(0, t_{rs} - t_{bwd,1}) + \max(\phi\,t_{ag,exp},\ t_{ag} - t_{fwd,1}),
       \quad
       t_{opt} = \frac{42\,(N_{dense}/d_{shard} + N_{expert}/e_{dp})}{B_{HBM}}

    (Muon: its matrices, :func:`memsym.timing.muon.muon_parameters`, at
    :func:`memsym.timing.muon.muon_step_bytes` in place of 42; each ``max`` only where that
    overlap is on; ZeRO-3 / FSDP: :math:`\max(0, m\,(t_{rs} + 2 t_{ag}) - t_{pipeline})`).

    FSDP2 groups priced one by one (``Settings.fsdp_groups``, Accelerate's):
    :math:`\max(0,\ m\,(t_{ag} + t_{ag,bwd}) + t_{rs} - t_{pipeline},\ t_{rs} - t_{bwd,1})`,
    each group's forward and backward all-gathers (:math:`t_{ag}`, :math:`t_{ag,bwd}`) in every
    micro-batch, its reduce-scatter (:math:`t_{rs}`) once a step, in the last backward
    (:func:`fsdp_group_collectives`); ``rs`` is then one step's, ``once`` and ``again`` one
    micro-batch's forward and backward all-gathers.

    ``first_stage``: the first stage's (forward, backward) of one micro-batch, which hide the
    all-gather and the reduce-scatter (the gradients' buckets are reduced as the last
    micro-batch's backward fills them, ``no_sync`` holding them back before it; the
    all-gather one bucket ahead of the forward's pre-hooks, so at least the share
    :math:`\phi` of the experts' waits, :func:`gather_wait_fraction`); ``pipeline``: the pipeline's seconds, which hide the
    per-micro-batch collectives of ZeRO-3 / FSDP.  Returns ``dp`` and ``optimizer`` [s], the
    group sizes ``ndp`` (DP x CP) and ``edp`` (expert DP) [GPUs], and the collectives' seconds
    as issued: ``rs``, ``ag`` (once) and, per micro-batch, ``once`` and ``again`` (None
    without ZeRO-3 / FSDP).  ``ends_gpu``: of ``dense_gpu``, the weights outside the
    decoder layers (:func:`gathered_bytes`).  Muon under the distributed optimizer is
    Megatron's layer-wise one: gradients all-reduced, parameters all-gathered after the step.

    Parameters
    ----------
    st, dev, clu, overlap : Settings, GPU, Cluster, Overlap
        The run's settings, its GPU, interconnect and overlaps.
    dense_gpu, expert_gpu, ends_gpu : array_like
        The GPU's parameters (:func:`parameters_per_gpu`) [parameters].
    first_stage, pipeline : tuple, array_like
        The first stage's (forward, backward) and the pipeline's seconds [s].
    p, m, t, c, d, e, t_e : array_like
        Pipeline size [GPUs], micro-batches [1], TP, CP, DP, EP, expert-TP sizes [GPUs].
    muon : tuple, optional
        ``(arch, layers)``, the busiest stage's decoder layers [layers]: Muon's Newton-Schulz
        seconds (:func:`memsym.timing.muon.muon_step_time`) join the optimizer step.
    gather_wait : array_like
        :math:`\phi`, the share of the experts' all-gather the first forward waits for
        (:func:`gather_wait_fraction`) [1].

    Examples
    --------
    >>> from memsym.hardware import cluster_for, gpu
    >>> dev, one = gpu("h100"), np.array(1.0)
    >>> out = data_parallel_sync(Settings(), dev, cluster_for(dev.name), Overlap(), np.array(1e9),
    ...                          np.array(0.0), (0.0, 0.0), one, p=one, m=one, t=one, c=one,
    ...                          d=8 * one, e=one, t_e=one)
    >>> round(float(out["optimizer"]) * 1e3, 3)   # 42 B x 1e9 / 8 at 3.35 TB/s [ms]
    1.567
    >>> bool(out["dp"] == out["rs"] + out["ag"])   # nothing hides it here
    True

    References
    ----------
    .. [zero] arXiv:1910.02054 §7 (3 Psi per step under stage 3).
    .. [megatron-lm] distributed/distributed_data_parallel_config.py (overlap_grad_reduce,
       overlap_param_gather).
    """
    ndp = d * c
    ebw_dp, elat_dp = group_bandwidth("dp", ndp, clu, t=t, c=np.ones_like(c), d=ndp)
    edp = np.maximum(d * c * t / (e * t_e), 1)
    gb = st.grad_bytes
    # a dense model has no expert buffer: its expert collectives are not issued (an empty
    # one would still be charged its ring's latency steps)
    edp = np.where(expert_gpu > 0, edp, 1)
    # the gradients: reduce-scatter under the distributed optimizer, all-reduce under DDP and
    # Muon's layer-wise distributed optimizer (layer_wise_optimizer.py:167-181: DDP all-reduces,
    # each rank steps its whole parameters and all-gathers them, allgather_params 816-868)
    red = "reduce-scatter" if st.distributed_optimizer and st.optimizer != "muon" else "all-reduce"
    rs = collective_time(red, dense_gpu * gb, ndp, ebw_dp, elat_dp) \
        + collective_time(red, expert_gpu * gb, edp, ebw_dp, elat_dp)
    ag, ag_wait = _gather_times(st, overlap.grad_reduce, (dense_gpu, expert_gpu, ends_gpu),
                                (ndp, edp, ebw_dp, elat_dp), gather_wait, np.zeros_like(rs))
    last_bwd = first_stage[1]
    first_fwd = first_stage[0]
    rs_exp = np.maximum(0, rs - last_bwd) if overlap.grad_reduce else rs
    ag_exp = np.maximum(ag_wait, ag - first_fwd) \
        if (overlap.param_gather and st.distributed_optimizer) else ag
    optimizer = _optimizer_time(st, dev, clu, dense_gpu, expert_gpu, muon, (t, e, t_e, ndp, edp))
    dp_exposed, rs, ag, once, again = _per_microbatch(
        st, (rs, ag, rs_exp + ag_exp, ag_exp), m, p, pipeline, last_bwd,
        lambda kind, size: collective_time(kind, size, ndp, ebw_dp, elat_dp))
    return {"dp": dp_exposed, "optimizer": optimizer, "ndp": ndp, "edp": edp,
            "rs": rs, "ag": ag, "once": once, "again": again}


def _per_microbatch(st: Settings, times: tuple, m, p, pipeline, last_bwd, price) -> tuple:
    """``(exposed, rs, ag, once, again)`` [s]: the DP sync exposed in a step whose collectives
    run each micro-batch (ZeRO-3 / FSDP, ZeRO-2, FSDP2 groups priced one by one), else the
    once-a-step ``exposed`` of ``times`` (``rs``, ``ag``, ``exposed``, ``ag_exposed``) as it
    is; ``price(kind, buffer bytes)``: one collective's seconds on the DP group."""
    rs, ag, exposed, ag_exp = times
    once = again = None
    if st.fsdp_groups:
        # each FSDP2 group as issued (Settings.fsdp_groups): every micro-batch's forward
        # all-gathers, its backward's again, one reduce-scatter a step in the last backward,
        # which alone can hide it; the gathers behind the whole pipeline's compute
        rs, ag, again = _group_sums(st, price)
        once = ag
        issued = np.maximum(m, 1) * (ag + again) + rs
        exposed = np.maximum(np.maximum(0, issued - pipeline), rs - last_bwd)
    elif st.gather_per_microbatch:
        # per micro-batch: the forward's all-gather, the backward's again and the
        # reduce-scatter (ZeRO §7: 3 Psi), hidden behind the pipeline's compute where it fits
        once = rs + ag
        again = ag                                      # the backward's all-gather
        per_mb = np.maximum(0, np.maximum(m, 1) * (once + again) - pipeline)
        if st.pipelined_fsdp:     # torch.distributed.pipelining syncs once per step at p > 1
            per_mb = np.where(p > 1, exposed, per_mb)
        exposed = per_mb
    elif st.reduce_per_microbatch:
        # ZeRO-2: every micro-batch's gradients reduce-scattered (Settings), the weights
        # gathered once after the optimizer step
        once, again = rs, np.zeros_like(rs)
        exposed = np.maximum(0, np.maximum(m, 1) * rs - pipeline) + ag_exp
    return exposed, rs, ag, once, again


def _gather_times(st: Settings, bucketed, params, groups, gather_wait, zero):
    """The parameter all-gather's seconds and those the first forward waits for at least.

    ``params``: dense, expert and end weights of the GPU; ``groups``: ndp, edp, bandwidth,
    latency; ``bucketed``: ``overlap_grad_reduce`` (buckets of
    :func:`gather_wait_fraction`; without it one bucket a buffer,
    distributed_data_parallel.py:135-137, so the first pre-hook waits on all of it)."""
    if not st.distributed_optimizer:
        return zero, zero
    dense_gpu, expert_gpu, ends_gpu = params
    ndp, edp, bw, lat = groups
    dense_ag, expert_ag = gathered_bytes(st, dense_gpu, expert_gpu, ends_gpu)
    ag_expert = collective_time("all-gather", expert_ag, edp, bw, lat)
    ag = collective_time("all-gather", dense_ag, ndp, bw, lat) + ag_expert
    return ag, (ag_expert * gather_wait if bucketed else ag)


def _optimizer_time(st: Settings, dev, clu, dense_gpu, expert_gpu, muon, groups):
    """The optimizer step's seconds on one GPU: :data:`OPTIMIZER_BYTES` per parameter of its
    share (Muon: its matrices at :func:`memsym.timing.muon.muon_step_bytes`, and the
    Newton-Schulz work of :func:`memsym.timing.muon.muon_step_time`); ``groups``: t, e, t_e,
    ndp, edp."""
    t, e, t_e, ndp, edp = groups
    shard = ndp if st.distributed_optimizer else 1
    eshard = np.where(st.distributed_optimizer, edp, 1)
    opt_bytes = OPTIMIZER_BYTES * (dense_gpu / shard + expert_gpu / eshard)
    if st.optimizer != "muon" or muon is None:
        return memory_time(opt_bytes, dev)
    # the matrices Muon steps at its own bytes, the rest (embeddings, norms, biases) at Adam's
    m_dense, m_expert = muon_parameters(muon[0], muon[1], t=t, e=e, t_e=t_e)
    m_dense, m_expert = np.minimum(m_dense, dense_gpu), np.minimum(m_expert, expert_gpu)
    opt_bytes = opt_bytes + (muon_step_bytes(st.muon_nesterov) - OPTIMIZER_BYTES) * (
        m_dense / shard + m_expert / eshard)
    return memory_time(opt_bytes, dev) + muon_step_time(
        muon[0], dev, clu, muon[1], t=t, e=e, t_e=t_e, ndp=ndp, edp=edp,
        layer_wise=st.distributed_optimizer, tp_mode=st.muon_tp_mode, steps=st.muon_ns_steps)


def communication(st, clu, raw_layer, per_stage_mb, m, p, v, t, c, d, e, t_e, ndp, edp, gb,
                  dense_gpu, expert_gpu, p2p, msg, dp_times, ends_gpu=0.0) -> dict:
    """``comm_<group>_s``, ``_bytes``, ``_intra``: each group's collectives before overlap.

    The columns of :func:`memsym.timing.step.step_time_grid` (``communication``): the same
    collectives, bandwidths and links the step prices, before any overlap.

    Parameters
    ----------
    st, clu : Settings, Cluster
        The run's settings and interconnect.
    raw_layer : dict
        Per group, one layer's (forward s, backward s, forward bytes, backward bytes) [s, bytes].
    per_stage_mb, m, v : array_like
        Layer passes of the busiest stage [layers], micro-batches [1], chunks per rank [1].
    p, t, c, d, e, t_e, ndp, edp : array_like
        Parallel sizes, DP x CP and expert DP [GPUs].
    gb : float
        Gradient bytes per parameter [bytes].
    dense_gpu, expert_gpu, ends_gpu : array_like
        The GPU's parameters [parameters].
    p2p, msg : array_like
        One PP message's seconds [s] and size [bytes].
    dp_times : tuple
        ``rs``, ``ag``, ``once``, ``again`` of :func:`data_parallel_sync` [s] (with
        ``Settings.fsdp_groups``: one step's reduce-scatters, one micro-batch's forward
        all-gathers, the same, its backward's).

    Examples
    --------
    >>> from memsym.model import preset
    >>> from memsym.timing.step import step_time_grid
    >>> out = step_time_grid(preset("llama3-8b"), "h100", t=2, d=4, communication=True)
    >>> bool(out["comm_tp_intra"]), bool(out["comm_tp_s"] >= out["tp"])   # issued >= exposed
    (True, True)

    References
    ----------
    .. [nccl-tests] doc/PERFORMANCE.md (bus bandwidth factors).
    """
    out = {}
    for g in ("tp", "ep", "cp"):
        f_s, b_s, f_b, b_b = raw_layer[g]
        out[f"comm_{g}_s"] = per_stage_mb * (f_s + b_s)
        out[f"comm_{g}_bytes"] = per_stage_mb * (f_b + b_b)
    # PP: one message each way per micro-batch and chunk pass
    out["comm_pp_s"] = np.where(p > 1, m * 2 * v * p2p, 0.0)
    out["comm_pp_bytes"] = np.where(p > 1, m * 2 * v * collective_bytes("p2p", msg, p), 0.0)
    # DP: reduce-scatter of the gradients (gb bytes each) + all-gather of the weights at
    # the data_parallel_sync widths (gathered_bytes; distributed optimizer), or the all-reduce
    # (DDP); ZeRO-3 / FSDP every micro-batch
    rs, ag, once, again = dp_times
    if st.fsdp_groups:     # Accelerate's groups: rs once a step, ag and again per micro-batch
        per_mb = np.maximum(m, 1)
        rs_b, ag_b, again_b = _group_sums(st, lambda kind, size: collective_bytes(kind, size, ndp))
        return _with_links(out, clu, (per_mb * (ag + again) + rs,
                                      per_mb * (ag_b + again_b) + rs_b), p, t, c, d, e, t_e, ndp)
    ag_b = 0.0
    if st.distributed_optimizer:
        dense_ag, expert_ag = gathered_bytes(st, dense_gpu, expert_gpu, ends_gpu)
        ag_b = (collective_bytes("all-gather", dense_ag, ndp)
                + collective_bytes("all-gather", expert_ag, edp))
    red = "reduce-scatter" if st.distributed_optimizer and st.optimizer != "muon" else "all-reduce"
    one_b = (collective_bytes(red, dense_gpu * gb, ndp) + collective_bytes(red, expert_gpu * gb, edp)
             + ag_b)
    dp_s, dp_b = rs + ag, one_b
    if once is not None and st.reduce_per_microbatch:
        per_mb = np.maximum(m, 1)                     # ZeRO-2: the reduce-scatter alone again
        dp_s, dp_b = per_mb * once + ag, per_mb * (one_b - ag_b) + ag_b
    elif once is not None:
        per_mb = np.maximum(m, 1)
        dp_s = per_mb * (once + again)
        dp_b = per_mb * (one_b + ag_b)                # the backward's all-gather again
        if st.pipelined_fsdp:
            dp_s, dp_b = np.where(p > 1, rs + ag, dp_s), np.where(p > 1, one_b, dp_b)
    return _with_links(out, clu, (dp_s, dp_b), p, t, c, d, e, t_e, ndp)


def _with_links(out: dict, clu, dp: tuple, p, t, c, d, e, t_e, ndp) -> dict:
    """``out`` with the DP group's (seconds, bytes) and each group's link."""
    out["comm_dp_s"], out["comm_dp_bytes"] = dp
    dom = nvlink_domain(clu)
    layouts = {"tp": (t, dict(t=t, c=c, d=d)), "ep": (e, dict(t=t, c=c, d=d, t_e=t_e)),
               "cp": (c, dict(t=t, c=c, d=d)), "pp": (p, dict(t=t, c=c, d=d)),
               "dp": (ndp, dict(t=t, c=np.ones_like(c), d=ndp))}
    for g, (size, lay) in layouts.items():
        out[f"comm_{g}_intra"] = group_link(g, size, dom, **lay)
    return out


def _group_sums(st: Settings, price) -> tuple:
    """``(reduce-scatters, forward all-gathers, backward all-gathers)`` of
    ``Settings.fsdp_groups``, each collective priced by ``price(kind, buffer bytes)`` and
    summed: the reduce-scatters of one step, the all-gathers of one micro-batch."""
    width = float(param_gather_bytes(st.precision))
    rs = ag = again = 0.0
    for size, n, regathered in st.fsdp_groups:
        rs = rs + n * price("reduce-scatter", size * st.grad_bytes)
        gathers = n * price("all-gather", size * width)
        ag = ag + gathers
        again = again + gathers if regathered else again
    return rs, ag, again


def fsdp_group_collectives(st: Settings, m) -> list:
    r"""The collectives of one step of Accelerate's FSDP2 groups, with their counts.

    Those of ``Settings.fsdp_groups``: each distinct kind and buffer with its count.

    .. math:: n_{ag}(P) = m\,(1 + [\text{regathered}])\,n_P, \quad n_{rs}(P) = n_P

    for the :math:`n_P` groups of :math:`P` parameters; an all-gather's buffer (its output)
    is :math:`P` at the precision's width, a reduce-scatter's (its input) :math:`P` at
    ``grad_bytes`` (FSDP2 pads each parameter's dim 0 to a multiple of the group: not counted).

    Parameters
    ----------
    st : Settings
        The run's settings (``fsdp_groups``, the precision, ``grad_bytes``).
    m : int
        Micro-batches per step [1].

    Returns
    -------
    list of dict
        ``{"kind", "buffer_bytes", "count"}`` (the full buffer [bytes] as
        :func:`memsym.timing.collectives.collective_time` takes it; per step [1]), sorted.

    Examples
    --------
    Two blocks of 10 parameters resharded after forward and a kept group of 6, bf16 gathers
    and reductions, 2 micro-batches: each block gathered 2 x 2 times, the kept group twice,
    each group reduced once (by hand):

    >>> st = Settings(grad_bytes=2, fsdp_groups=((10, 2, True), (6, 1, False)))
    >>> [tuple(x.values()) for x in fsdp_group_collectives(st, 2)]
    [('all-gather', 12, 2), ('all-gather', 20, 8), ('reduce-scatter', 12, 1), ('reduce-scatter', 20, 2)]

    References
    ----------
    .. [hf-accelerate] Accelerate 1.16.0 ``utils/fsdp_utils.py:850-904``.
    .. [pytorch-fsdp2] torch 2.13.0 ``_fsdp_param_group.py:576-638``,
       ``_fsdp_collectives.py:592-625``.
    """
    width = param_gather_bytes(st.precision)
    counts: dict = {}
    for size, n, regathered in st.fsdp_groups:
        for kind, nbytes, times in (("all-gather", size * width, m * n * (2 if regathered else 1)),
                                    ("reduce-scatter", size * st.grad_bytes, n)):
            key = (kind, int(nbytes))
            counts[key] = counts.get(key, 0) + int(times)
    return [{"kind": kind, "buffer_bytes": nbytes, "count": n}
            for (kind, nbytes), n in sorted(counts.items())]
