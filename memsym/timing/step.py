r"""The step time: per-stage compute from GEMMs, exposed communication, exact schedule, DP sync.

For each pipeline stage the forward and backward of one micro-batch cost the sum over its
layers of GEMM times (:mod:`.efficiency`), attention, memory-bound operations priced by HBM
bandwidth, and the communication that is not hidden (each overlap a named switch in
:class:`Overlap`).  The pipeline makespan comes from the schedule (:mod:`.schedule`): the
slowest stage runs all ``m`` micro-batches, the fill and drain pass once through the others
(divided by ``v`` chunks), times the exact bubble of Megatron-LM's order.  After the flush
the data-parallel gradient reduce-scatter / all-reduce and the parameter all-gather are
exposed beyond what the last backward / first forward hides, then the optimizer step.

References
----------
.. [megatron-lm] distributed/distributed_data_parallel_config.py (overlap_grad_reduce,
   overlap_param_gather); model_parallel_config.py (tp_comm_overlap, overlap_p2p_comm,
   overlap_moe_expert_parallel_comm); arguments.py (overlap_p2p_comm only with interleaving).
.. [narayanan] arXiv:2104.04473 §2.2, §3.2, §5.1.
.. [korthikanti] arXiv:2205.05198 §4-§6.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidValueError, choose
from ..frameworks import framework
from ..hardware import Cluster, cluster_for, gpu as _gpu
from ..numeric import unique_rows
from ..term import Source
from .collectives import collective_bytes, collective_time, group_bandwidth, group_link
from .efficiency import ceiling, gemm_time, memory_time
from .records import Overlap, Settings, StepTime
from .moe import gemm_seconds, moe_layer_extras
from .gemm import (attention_flops, layer_gemms, layer_params, memory_bytes, output_gemm,
                   shape_of)
from ..terms.pipeline_order import bubble_fraction, schedule_rule, simulate
from ..terms.schedule import torch_round_size
from ..job import canonical, dropout_kept
from ..training import microbatches

__all__ = ["Overlap", "StepTime", "Settings", "overlap_of", "step_time", "step_time_grid",
           "most_layers_per_rank",
           "OPTIMIZER_BYTES", "SOURCES",
           "FLASH_FORWARD", "FLASH_BACKWARD"]

#: Backward memory-bound bytes relative to the forward's (see :func:`layer_time`).
BACKWARD_MEMORY = 1.5

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
                     "get_schedule_table (simulated in memsym.timing.schedule)"),
    "optimizer": Source("memsym-derivation", "OPTIMIZER_BYTES per parameter at HBM bandwidth"),
    "collectives": Source("nccl-tests", "doc/PERFORMANCE.md (bus bandwidth factors)"),
}

#: HBM bytes per parameter of one optimizer step (Megatron Float16Optimizer path): grad-norm read (4), Adam reads g, p, m, v (16) and writes p, m, v (12), fp32 -> bf16 copy (6), zeroing the grad buffer (4).  Memsym count; was: read the fp32 gradient
#: (4), read and write master (8), m (8), v (8), write the bf16 weight (2).  Memsym's count.
OPTIMIZER_BYTES = 42
#: Flash attention's throughput relative to the GEMM ceiling, forward and backward
#: (FlashAttention-2 paper: forward up to ~70 % of A100 peak, backward ~ 5-10 % lower;
#: assumption: 0.9 and 0.75 of the ceiling).
FLASH_FORWARD = 0.9
FLASH_BACKWARD = 0.75


def _arr(x):
    return np.asarray(x, dtype=float)


def layer_time(x, st: Settings, dev, clu, t, c, e, t_e, b, *, moe: bool, eta_gemm, overlap: Overlap,
           dp, raw: dict | None = None):
    """Forward and backward seconds of one layer and one micro-batch on one GPU (arrays).

    ``raw``, when given, receives for ``tp``, ``ep`` and ``cp`` the layer's collectives as
    issued, before any overlap hides them: ``(forward s, backward s, forward bytes, backward
    bytes)`` (bytes one GPU sends, :func:`memsym.timing.collectives.collective_bytes`), the
    backward including a fully recomputed forward's.  Under Transformer Engine's userbuffers
    they are the plain collectives the overlap replaces."""
    s = st.seq_length
    prec = st.precision
    gemms = layer_gemms(x, s, b, t, c, e, t_e, moe=moe)
    # experts as TE's grouped GEMM, the router in the input dtype (memsym.timing.moe)
    f_gemm = sum(gemm_seconds(q, "forward", dev, prec, eta_gemm=eta_gemm) for q in gemms)
    # backward: data gradient [M,N]x[N,K] and weight gradient [K,M]x[M,N]
    b_gemm = sum(gemm_seconds(q, "dgrad", dev, prec, eta_gemm=eta_gemm)
                 + gemm_seconds(q, "wgrad", dev, prec, eta_gemm=eta_gemm) for q in gemms)
    # attention core: bf16 even in fp8 recipes (Transformer Engine keeps DPA in bf16)
    aprec = "bf16" if prec == "fp8" else prec
    peak = dev.peak(aprec)
    ceil = ceiling(dev, aprec) if eta_gemm is None else float(eta_gemm)
    if st.flash_attention:
        fl = attention_flops(x, s, b, t, c, causal_skip=True)
        f_att = fl / (peak * ceil * FLASH_FORWARD)
        b_att = 2.5 * fl / (peak * ceil * FLASH_BACKWARD)
    else:
        # unfused core attention: batched QK^T [s/c, d] x [d, s] and AV [s/c, s] x [s, d_v]
        heads = _arr(b) * x.a / _arr(t)
        sq = s / _arr(c)
        qk = gemm_time(sq, s, x.d_qk, dev, aprec, eta_gemm=eta_gemm, count=heads)
        av = gemm_time(sq, x.d_v, s, dev, aprec, eta_gemm=eta_gemm, count=heads)
        f_att = qk + av
        b_att = 2 * (qk + av)
    mem = memory_time(memory_bytes(x, s, b, t, c, e, t_e, moe=moe,
                                   sequence_parallel=st.sequence_parallel,
                                   flash=st.flash_attention, dropout=st.dropout), dev)
    # backward of an elementwise op reads its saved input and the incoming gradient and writes
    # one gradient (norm, activation, softmax: 3 tensors to the forward's 2; dropout and
    # residual pass the gradient through): about 1.5 x the forward bytes (memsym's count)
    f_mem, b_mem = mem, BACKWARD_MEMORY * mem
    # --- tensor parallel: bytes of the full activation [T, h] in bf16
    T = _arr(b) * s / _arr(c)
    act = 2 * T * x.h
    bw, lat = group_bandwidth("tp", t, clu, t=t, c=c, d=dp)
    if st.sequence_parallel:
        calls = 2 if moe else 4   # fwd: AG + RS around attention (and MLP when dense)
        one = collective_time("all-gather", act, t, bw, lat)
        f_tp = calls * one
        f_tp_bytes = calls * collective_bytes("all-gather", act, t)
    else:
        calls = 1 if moe else 2
        f_tp = calls * collective_time("all-reduce", act, t, bw, lat)
        f_tp_bytes = calls * collective_bytes("all-reduce", act, t)
    # as issued: the backward repeats the forward's collectives, plus (SP) the input re-gather
    # of the column-parallel layers (LinearWithGradAccumulationAndAsyncCommunication)
    sp_back = 1.5 if st.sequence_parallel else 1
    tp_raw = [f_tp, sp_back * f_tp, f_tp_bytes, sp_back * f_tp_bytes]
    # backward: Megatron's LinearWithGradAccumulationAndAsyncCommunication (tensor_parallel/
    # layers.py) issues the column-parallel layers' dgrad all-reduce (SP: reduce-scatter)
    # asynchronously and runs the weight-gradient GEMM under it; under SP it also re-gathers
    # the input asynchronously under the dgrad GEMM.  The row-parallel layers' backward
    # all-gather (SP) is exposed.
    colpar = [q for q in gemms if q.name in ("qkv", "q", "q_up", "kv_up", "fc1", "shared_fc1")]
    wgrad = sum(gemm_time(q.K, q.N, q.M, dev, prec, eta_gemm=eta_gemm, count=q.count)
                for q in colpar)
    dgrad = sum(gemm_time(q.M, q.K, q.N, dev, prec, eta_gemm=eta_gemm, count=q.count)
                for q in colpar)
    if not overlap.tp_async_backward:
        b_tp = f_tp * (1.5 if st.sequence_parallel else 1)
    elif st.sequence_parallel:
        n_col = calls // 2
        b_tp = (n_col * one                                   # row-parallel backward AG
                + np.maximum(0, n_col * one - wgrad)          # dgrad RS under wgrad
                + np.maximum(0, n_col * one - dgrad))         # input re-gather under dgrad
    else:
        b_tp = np.maximum(0, f_tp - wgrad)
    if overlap.tp_comm and overlap.tp_comm_split and st.sequence_parallel and not moe \
            and not x.mla:
        # userbuffers exist only with t > 1 (Bridge and TE turn the overlap off at t = 1)
        ub = _userbuffers(gemms, dev, prec, eta_gemm, t, T * x.h, bw, lat)
        multi = _arr(t) > 1
        f_gemm, b_gemm, f_tp, b_tp = (np.where(multi, u, plain) for u, plain in
                                      zip(ub, (f_gemm, b_gemm, f_tp, b_tp)))
    elif overlap.tp_comm:
        f_tp = np.maximum(0, f_tp - f_gemm)
        b_tp = np.maximum(0, b_tp - b_gemm)
    # --- expert parallel all-to-all: dispatch + combine of the rank's routed rows
    f_ep = b_ep = 0.0
    ep_raw = [0.0, 0.0, 0.0, 0.0]
    if moe:
        tok = T / (_arr(t) if st.sequence_parallel else 1)
        # all-to-alls by where EP ranks sit, expert-TP AG/RS, dispatcher copies (.moe)
        f_ep, b_ep, f_b, b_b, f_c, b_c = moe_layer_extras(gemms, tok, x.k, e, t_e, clu, dev, prec)
        f_mem, b_mem, ep_raw = f_mem + f_c, b_mem + b_c, [f_ep, b_ep, f_b, b_b]
        if overlap.ep_a2a:
            exp_f = sum(gemm_seconds(q, "forward", dev, prec, eta_gemm=eta_gemm)
                        for q in gemms if q.name.startswith("expert"))
            f_ep = np.maximum(0, f_ep - exp_f)
            b_ep = np.maximum(0, b_ep - 2 * exp_f)
    # --- context parallel ring: K and V blocks passed c - 1 times (fwd), K,V + dK,dV (bwd)
    kv = 2 * 2 * T * x.g * x.d_qk / _arr(t) if not x.mla else 2 * T * x.a * (x.d_qk + x.d_v) / _arr(t)
    cbw, clat = group_bandwidth("cp", c, clu, t=t, c=c, d=dp)
    cc = _arr(c)
    f_cp = np.where(cc > 1, (cc - 1) * collective_time("p2p", kv, cc, cbw, clat), 0.0)
    b_cp = 2 * f_cp
    cp_bytes = np.where(cc > 1, (cc - 1) * collective_bytes("p2p", kv, cc), 0.0)
    cp_raw = [f_cp, b_cp, cp_bytes, 2 * cp_bytes]
    if overlap.cp_ring:
        f_cp = np.maximum(0, f_cp - f_att)
        b_cp = np.maximum(0, b_cp - b_att)
    fwd = {"gemm": f_gemm, "attention": f_att, "memory": f_mem, "tp": f_tp, "ep": f_ep,
           "cp": f_cp}
    bwd = {"gemm": b_gemm, "attention": b_att, "memory": b_mem, "tp": b_tp, "ep": b_ep,
           "cp": b_cp}
    if st.recompute == "full":
        for key in fwd:
            bwd[key] = bwd[key] + st.recompute_fraction * fwd[key]
        for item in (tp_raw, ep_raw, cp_raw):     # the recomputed forward's collectives
            item[1] = item[1] + st.recompute_fraction * item[0]
            item[3] = item[3] + st.recompute_fraction * item[2]
    elif st.recompute == "selective-op":
        # torchtitan's per-op SAC (distributed/activation_checkpoint.py, _custom_policy): of the
        # block's forward aten.mm calls every second is recomputed (mm_count % 2 == 0) and SDPA
        # is saved. A Llama block calls wq, wk, wv, wo, w1, w3, w2 (GPT: q, k, v, o, fc1,
        # fc2): the backward reruns wk, wo and w3 (fc2), plus the elementwise ops between them
        # (GEMM, output columns rerun): wk is the K columns of the fused QKV, w3 half of fc1
        rerun = {"qkv": lambda q: x.g * x.d_qk / _arr(t), "proj": lambda q: q.N,
                 ("fc1" if x.gated else "fc2"): lambda q: q.N / 2 if x.gated else q.N}
        bwd["gemm"] = bwd["gemm"] + sum(
            gemm_time(q.M, rerun[q.name](q), q.K, dev, prec, eta_gemm=eta_gemm, count=q.count)
            for q in gemms if q.name in rerun)
        bwd["memory"] = bwd["memory"] + f_mem
    elif st.recompute == "selective":
        bwd["attention"] = bwd["attention"] + f_att
        if not st.flash_attention:  # the softmax and its dropout run again
            scores = _arr(b) * (x.a / _arr(t)) * (s / cc) * s
            bwd["memory"] = bwd["memory"] + memory_time(2 * (2 + (2.5 if st.dropout else 0))
                                                        * scores, dev)  # 2 bytes per element
    if raw is not None:
        raw.update(tp=tuple(tp_raw), ep=tuple(ep_raw), cp=tuple(cp_raw))
    return fwd, bwd


#: Transformer Engine's default userbuffer overlaps (``initialize_ub`` without a user
#: config, as Megatron-Bridge passes it when ``tp_comm_overlap_cfg`` is None): the SMs the
#: pipelined reduce-scatter and the bulk collectives take from the GEMM beside them.
UB_COMM_SMS = 16
#: ... and the chunks a pipelined GEMM + reduce-scatter is split into.
UB_PIPELINE_SPLITS = 4


def _fewer_sms(dev, taken):
    """The GPU with ``taken`` SMs given to communication kernels (``set_sm_margin``)."""
    import dataclasses

    keep = (dev.sm_count - taken) / dev.sm_count
    return dataclasses.replace(dev, sm_count=dev.sm_count - taken,
                               **{k: (getattr(dev, k) or 0) * keep or None
                                  for k in ("bf16", "fp16", "fp8")})


def _userbuffers(gemms, dev, prec, eta, t, hidden, bw, lat):
    """Forward / backward GEMM and exposed TP seconds of one dense layer under Transformer
    Engine's default userbuffer overlaps (``--tp-comm-overlap`` with sequence parallelism).

    transformer_engine/pytorch/module/base.py ``initialize_ub``: ring exchange (the
    all-gather passed to the neighbour chunk by chunk on the copy engines, one GEMM of M/t
    rows per chunk: qkv and fc1 forward, proj and fc2 data gradients), pipelined GEMM +
    reduce-scatter (4 chunks, 16 SMs reserved: proj and fc2 forward), bulk (one GEMM on the
    other SMs beside the whole collective on 16: qkv and fc1 data and weight gradients), the
    proj and fc2 weight gradients on the ring's gathered gradient.  All-gather buffers are
    fp8 under an fp8 recipe.  ``hidden``: the layer's full activation [T h] elements."""
    g = {q.name: q for q in gemms}
    tt = _arr(t)
    few = _fewer_sms(dev, UB_COMM_SMS)
    ag_width = 1 if prec == "fp8" else 2
    rows = g["qkv"].M

    def gemm(M, N, K, on=dev, count=1):
        return gemm_time(M, N, K, on, prec, eta_gemm=eta, count=count)

    def ring(M, N, K):
        chunk = gemm(M / tt, N, K)
        step = collective_time("p2p", ag_width * hidden / tt, 2, bw, lat)
        return tt * chunk, (tt - 1) * np.maximum(0, step - chunk)

    def pipelined(M, N, K):
        n = UB_PIPELINE_SPLITS
        chunk = gemm(M / n, N, K, few)
        rs = collective_time("reduce-scatter", 2 * hidden / n, tt, bw, lat)
        return n * chunk, rs + (n - 1) * np.maximum(0, rs - chunk)

    def bulk(M, N, K, comm):
        run = gemm(M, N, K, few)
        return run, np.maximum(0, comm - run)

    qkv, proj, fc1, fc2 = g["qkv"], g["proj"], g["fc1"], g["fc2"]
    ag = collective_time("all-gather", ag_width * hidden, tt, bw, lat)
    rs = collective_time("reduce-scatter", 2 * hidden, tt, bw, lat)
    fwd = [ring(rows, qkv.N, qkv.K), pipelined(rows, proj.N, proj.K),
           ring(rows, fc1.N, fc1.K), pipelined(rows, fc2.N, fc2.K)]
    bwd = [ring(rows, proj.K, proj.N), (gemm(proj.K, proj.N, proj.M), 0.0),
           ring(rows, fc2.K, fc2.N), (gemm(fc2.K, fc2.N, fc2.M), 0.0)]
    for q in (qkv, fc1):
        bwd += [bulk(q.M, q.K, q.N, ag), bulk(q.K, q.N, q.M, rs)]
    return (sum(a for a, _ in fwd), sum(a for a, _ in bwd),
            sum(b for _, b in fwd), sum(b for _, b in bwd))


def _stage_layers(L, p, first, last):
    """Decoder layers on (first, middle, last) stages (Megatron's uneven first/last option)."""
    p = _arr(p)
    if first is None and last is None:
        per = L / p
        return per, per, per
    fl = _arr(first if first is not None else 0)
    ll = _arr(last if last is not None else 0)
    inner = p - (first is not None) - (last is not None)
    rest = (L - fl - ll) / np.maximum(inner, 1)
    return (fl if first is not None else rest), rest, (ll if last is not None else rest)


def step_time_grid(arch, gpu_name, *, t=1, p=1, d=1, c=1, e=1, t_e=None, v=1, b=None, m=1,
                   settings: Settings = Settings(), cluster: Cluster | None = None,
                   overlap: Overlap = Overlap(), eta_gemm=None, first_stage_layers=None,
                   last_stage_layers=None, exact_schedule: bool = False,
                   communication: bool = False) -> dict:
    r"""Step time [s] of many layouts at once: numpy arrays of the knobs broadcast together.

    .. math::

        t_{\text{step}} = m\,\max_r \tau_r + \beta\,\frac{\sum_r \tau_r - \max_r \tau_r}{p - 1}
            + t_{\text{DP, exposed}} + t_{\text{optimizer}},
        \qquad \tau_r = t^{\text{fwd}}_r + t^{\text{bwd}}_r

    with :math:`\tau_r` the stage's forward + backward of one micro-batch (every layer's
    GEMMs, attention, memory-bound work and exposed TP/EP/CP traffic, the embedding and output
    layer on the end stages, exposed PP p2p) and :math:`\beta` the exact bubble in stage
    units (:func:`memsym.timing.schedule.bubble_fraction` times m; :math:`(p-1)/v` where
    Megatron's closed form holds).

    Returns a dict of arrays: ``step`` and the parts ``compute``, ``bubble``, ``tp``, ``ep``,
    ``cp``, ``pp``, ``dp``, ``optimizer``, ``memory`` (seconds of one step of the busiest
    stage, the communication parts being the exposed time), and ``launchable`` (False where
    Megatron's interleaved-schedule rule refuses the layout; the step is still priced).

    Parameters
    ----------
    arch : memsym.model.Architecture
        The model.
    gpu_name : str or GPU
        The GPU (:mod:`memsym.hardware`).
    t, p, d, c, e : array_like
        Tensor-, pipeline-, data-, context- and expert-parallel sizes [GPUs].
    t_e : array_like, optional
        Expert tensor-parallel size [GPUs] (default t).
    v : array_like
        Model chunks per pipeline rank [1].
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
        Simulate the schedule with each stage's own durations (at most 1,000 layouts)
        instead of the uniform-stage bubble.
    communication : bool
        Also return, for each group ``g`` of tp, ep, cp, pp, dp, ``comm_g_s`` (its
        collectives' seconds as issued in one step of the busiest stage, before any overlap
        hides them), ``comm_g_bytes`` (the bytes one GPU sends for them) and ``comm_g_intra``
        (True where the group's ring stays on the intra-node link,
        :attr:`memsym.hardware.Cluster.domain`): what the step's ``g`` part exposes of.

    Examples
    --------
    >>> from memsym.model import preset
    >>> out = step_time_grid(preset("llama3-70b"), "h100", t=[4, 8], p=4, d=[2, 1], v=5,
    ...                      m=[16, 32], settings=Settings(seq_length=4096, precision="fp8"))
    >>> bool(out["step"][1] > out["step"][0])   # TP 8 is slower (seed 001)
    True
    """
    dev = _gpu(gpu_name)
    clu = cluster if cluster is not None else cluster_for(dev.name)
    st = settings
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
    choose("precision", st.precision, ("bf16", "fp16", "fp8", "fp32"))
    choose("recompute", st.recompute, ("none", "selective", "full", "selective-op"))
    choose("pipeline schedule", st.schedule, ("1f1b", "gpipe"))
    x = shape_of(arch)
    b = st.micro_batch_size if b is None else b
    t, p, d, c, e, v, b, m = np.broadcast_arrays(*(_arr(q) for q in (t, p, d, c, e, v, b, m)))
    t_e_ = t if t_e is None else np.broadcast_to(_arr(t_e), t.shape)
    knobs = np.stack([t, p, d, c, e, v, b, m])
    if not np.all(np.isfinite(knobs)) or np.any(knobs != np.floor(knobs)) or np.any(knobs < 1) \
            or np.any(knobs > 10**7):
        raise InvalidValueError("every layout knob (t, p, d, c, e, v, b, m) must be a whole "
                                "number in 1..1e7")
    if t.size > 10_000_000:
        raise InvalidValueError(f"{t.size} layouts exceed the 10,000,000 a grid may hold")
    s = st.seq_length
    lf, lb = {}, {}
    raw_dense, raw_moe = {}, {}
    dense_f, dense_b = layer_time(x, st, dev, clu, t, c, e, t_e_, b, moe=False, eta_gemm=eta_gemm,
                              overlap=overlap, dp=d, raw=raw_dense)
    raw_layer = raw_dense
    if x.L_moe:
        moe_f, moe_b = layer_time(x, st, dev, clu, t, c, e, t_e_, b, moe=True, eta_gemm=eta_gemm,
                              overlap=overlap, dp=d, raw=raw_moe)
        share = x.L_moe / x.L   # MoE layers spread evenly over stages (assumption)
        for key in dense_f:
            lf[key] = (1 - share) * dense_f[key] + share * moe_f[key]
            lb[key] = (1 - share) * dense_b[key] + share * moe_b[key]
        raw_layer = {g: tuple((1 - share) * u + share * w for u, w in zip(raw_dense[g], raw_moe[g]))
                     for g in raw_dense}
    else:
        lf, lb = dense_f, dense_b
    layer_f = sum(lf.values())
    layer_b = sum(lb.values())
    first, middle, last = _stage_layers(x.L, p, first_stage_layers, last_stage_layers)
    # output layer + cross-entropy on the last stage (fp32 logits: ~16 bytes per logit, fwd+bwd)
    prec = st.precision
    og = output_gemm(x, s, b, t, c)
    out_f = gemm_time(og.M, og.N, og.K, dev, "bf16" if prec == "fp8" else prec, eta_gemm=eta_gemm)
    out_b = (gemm_time(og.M, og.K, og.N, dev, "bf16" if prec == "fp8" else prec, eta_gemm=eta_gemm)
             + gemm_time(og.K, og.N, og.M, dev, "bf16" if prec == "fp8" else prec, eta_gemm=eta_gemm))
    logits = og.M * og.N
    out_f = out_f + memory_time(6 * logits, dev)
    out_b = out_b + memory_time(10 * logits, dev)
    T = b * s / c
    emb = memory_time(4 * T * x.h, dev)   # embedding lookup + its gradient scatter
    # PP p2p: one [T, h] (/t under SP) bf16 message per chunk pass and direction
    pbw, plat = group_bandwidth("pp", p, clu, t=t, c=c, d=d)
    # /t: SP splits the sent tensor; without SP Megatron's scatter/gather optimisation
    # (Narayanan §4.1) sends 1/t and all-gathers it over NVLink (not priced)
    msg = 2 * T * x.h / t
    p2p = np.where(p > 1, collective_time("p2p", msg, p, pbw, plat), 0.0)
    hide_p2p = overlap.pp_p2p & (v > 1)
    p2p_exposed = np.where(hide_p2p, 0.0, p2p) * v   # v chunk passes per stage-microbatch
    tau = {}
    out_role = "first" if st.output_first else "last"
    for role, layers in (("first", first), ("middle", middle), ("last", last)):
        fr = layers * layer_f + (emb if role == "first" else 0) + (out_f if role == out_role else 0)
        br = layers * layer_b + (out_b if role == out_role else 0)
        tau[role] = (fr, br)
    tau_first = sum(tau["first"]) + 2 * p2p_exposed
    tau_mid = sum(tau["middle"]) + 2 * p2p_exposed
    tau_last = sum(tau["last"]) + 2 * p2p_exposed
    single = p == 1
    tau_first = np.where(single, sum(tau["first"]) + (0 if st.output_first else out_f + out_b),
                         tau_first)
    tau_max = np.where(single, tau_first, np.maximum(np.maximum(tau_first, tau_last), tau_mid))
    total_tau = np.where(single, tau_first, tau_first + tau_last + np.maximum(p - 2, 0) * tau_mid)
    # exact bubble in stage units per unique (p, m, v, N, backward/forward ratio)
    frac = np.broadcast_to(np.asarray(st.recompute_fraction if st.recompute == "full" else 0.0,
                                      dtype=float), p.shape)
    ratios = 2 + frac
    beta = np.zeros(p.shape)
    uniq, inv = unique_rows(p.ravel().astype(int), m.ravel().astype(int), v.ravel().astype(int),
                            np.round(frac.ravel() * 2**24).astype(np.int64))
    if len(uniq) > 20_000:
        raise InvalidValueError(f"{len(uniq)} distinct (p, m, v) exceed 20,000")
    first_of = np.zeros(len(uniq), dtype=np.int64)
    first_of[inv.ravel()[::-1]] = np.arange(inv.size)[::-1]     # a row of each distinct key
    vals = np.empty(len(uniq))
    ok = np.empty(len(uniq), dtype=bool)
    for i, (pp_, mm_, vv_, _) in enumerate(uniq):
        ratio = float(ratios.ravel()[first_of[i]])
        N = _group(st, int(pp_), int(mm_), int(vv_))
        sched = "gpipe" if st.schedule == "gpipe" else ("1f1b" if vv_ == 1 else "interleaved")
        if vv_ > 1 and N is not None and N < pp_:
            N = None
        vals[i] = float(bubble_fraction(sched, pp_, mm_, vv_, N, backward_ratio=ratio)) * mm_
        # Megatron's interleaving rule; GPipe / torch's LoopedBFS have none
        ok[i] = sched == "gpipe" or schedule_rule(pp_, mm_, vv_, N) is None
    beta = vals[inv.ravel()].reshape(p.shape)
    launchable = ok[inv.ravel()].reshape(p.shape)
    others = np.where(single, 0.0, (total_tau - tau_max) / np.maximum(p - 1, 1))
    pipeline = m * tau_max + beta * others
    if exact_schedule:
        pipeline = np.array(pipeline, dtype=float)
        if pipeline.size > 1000:
            raise InvalidValueError("exact_schedule simulates each layout: at most 1,000")
        fwd = {r: np.broadcast_to(tau[r][0] + p2p_exposed, p.shape) for r in tau}
        bwd = {r: np.broadcast_to(tau[r][1] + p2p_exposed, p.shape) for r in tau}
        for idx in np.ndindex(p.shape):
            pp_ = int(p[idx])
            if pp_ == 1:
                continue
            fw = [float(fwd["middle"][idx])] * pp_
            bw = [float(bwd["middle"][idx])] * pp_
            fw[0], bw[0] = float(fwd["first"][idx]), float(bwd["first"][idx])
            fw[-1], bw[-1] = float(fwd["last"][idx]), float(bwd["last"][idx])
            N = _group(st, pp_, int(m[idx]), int(v[idx]))
            N = N if (N is None or N >= pp_) else None
            sim = simulate(pp_, int(m[idx]), int(v[idx]), N, forward=fw, backward=bw,
                           gpipe=st.schedule == "gpipe")
            pipeline[idx] = sim.makespan
    bubble = pipeline - m * tau_max
    # --- data parallel: gradients of this GPU's shard over DP x CP (experts: expert DP)
    dense_p, expert_p = layer_params(x, moe=False)
    if x.L_moe:
        moe_dense, moe_expert = layer_params(x, moe=True)
        per_layer_dense = ((x.L - x.L_moe) * dense_p + x.L_moe * moe_dense) / x.L
        per_layer_expert = x.L_moe * moe_expert / x.L
    else:
        per_layer_dense, per_layer_expert = dense_p, 0.0
    layers_max = np.maximum(np.maximum(first, last), middle)
    # the end stages' own weights: the embedding (first stage) or the output layer and the
    # final norm (last); with p = 1 one GPU holds them all, both matrices when untied
    ends = x.V * x.h * np.where((p == 1) & bool(x.untied), 2, 1) + x.h
    dense_gpu = (layers_max * per_layer_dense + ends) / t
    if st.output_first:
        # V placement: the first rank holds both matrices, the others only layers
        dense_gpu = np.where(p > 1, np.maximum(first * per_layer_dense + 2 * x.V * x.h + x.h,
                                               np.maximum(middle, last) * per_layer_dense) / t,
                             dense_gpu)
    expert_gpu = layers_max * per_layer_expert / (e * t_e_)
    ndp = d * c
    ebw_dp, elat_dp = group_bandwidth("dp", ndp, clu, t=t, c=np.ones_like(c), d=ndp)
    edp = np.maximum(d * c * t / (e * t_e_), 1)
    gb = st.grad_bytes
    # a dense model has no expert buffer: its expert collectives are not issued (an empty
    # one would still be charged its ring's latency steps)
    edp = np.where(expert_gpu > 0, edp, 1)
    if st.distributed_optimizer:
        rs = collective_time("reduce-scatter", dense_gpu * gb, ndp, ebw_dp, elat_dp) \
            + collective_time("reduce-scatter", expert_gpu * gb, edp, ebw_dp, elat_dp)
        ag = collective_time("all-gather", dense_gpu * 2, ndp, ebw_dp, elat_dp) \
            + collective_time("all-gather", expert_gpu * 2, edp, ebw_dp, elat_dp)
    else:
        rs = collective_time("all-reduce", dense_gpu * gb, ndp, ebw_dp, elat_dp) \
            + collective_time("all-reduce", expert_gpu * gb, edp, ebw_dp, elat_dp)
        ag = np.zeros_like(rs)
    last_bwd = np.where(single, tau["first"][1], tau["first"][1])
    first_fwd = tau["first"][0]
    rs_exp = np.maximum(0, rs - last_bwd) if overlap.grad_reduce else rs
    ag_exp = np.maximum(0, ag - first_fwd) if (overlap.param_gather and st.distributed_optimizer) else ag
    shard = ndp if st.distributed_optimizer else 1
    optimizer = memory_time(OPTIMIZER_BYTES * (dense_gpu / shard + expert_gpu / np.where(
        st.distributed_optimizer, edp, 1)), dev)
    dp_exposed = rs_exp + ag_exp
    if st.gather_per_microbatch:
        # per micro-batch: the forward's all-gather, the backward's again and the
        # reduce-scatter (ZeRO §7: 3 Psi), hidden behind the pipeline's compute where it fits
        once = rs + ag
        again = once * 2 / (2 + gb)                     # the backward's all-gather
        per_mb = np.maximum(0, np.maximum(m, 1) * (once + again) - pipeline)
        if st.pipelined_fsdp:     # torch.distributed.pipelining syncs once per step at p > 1
            per_mb = np.where(p > 1, dp_exposed, per_mb)
        dp_exposed = per_mb
    step = pipeline + dp_exposed + optimizer
    per_stage_mb = m * layers_max
    out = {
        "step": step, "pipeline": pipeline, "bubble": bubble,
        "compute": per_stage_mb * (lf["gemm"] + lb["gemm"] + lf["attention"] + lb["attention"]),
        "memory": per_stage_mb * (lf["memory"] + lb["memory"]),
        "tp": per_stage_mb * (lf["tp"] + lb["tp"]), "ep": per_stage_mb * (lf["ep"] + lb["ep"]),
        "cp": per_stage_mb * (lf["cp"] + lb["cp"]), "pp": m * 2 * p2p_exposed,
        "dp": dp_exposed, "optimizer": optimizer, "launchable": launchable,
    }
    if communication:
        out.update(_communication(st, clu, raw_layer, per_stage_mb, m, p, v, t, c, d, e, t_e_,
                                  ndp, edp, gb, dense_gpu, expert_gpu, p2p, msg,
                                  (rs, ag, once, again) if st.gather_per_microbatch
                                  else (rs, ag, None, None)))
    return out


def _communication(st, clu, raw_layer, per_stage_mb, m, p, v, t, c, d, e, t_e, ndp, edp, gb,
                   dense_gpu, expert_gpu, p2p, msg, dp_times) -> dict:
    """``comm_<group>_s``, ``_bytes``, ``_intra`` of :func:`step_time_grid` (``communication``):
    the same collectives, bandwidths and links the step prices, before any overlap."""
    out = {}
    for g in ("tp", "ep", "cp"):
        f_s, b_s, f_b, b_b = raw_layer[g]
        out[f"comm_{g}_s"] = per_stage_mb * (f_s + b_s)
        out[f"comm_{g}_bytes"] = per_stage_mb * (f_b + b_b)
    # PP: one message each way per micro-batch and chunk pass
    out["comm_pp_s"] = np.where(p > 1, m * 2 * v * p2p, 0.0)
    out["comm_pp_bytes"] = np.where(p > 1, m * 2 * v * collective_bytes("p2p", msg, p), 0.0)
    # DP: reduce-scatter of the gradients (gb bytes each) + all-gather of the 2-byte weights
    # (distributed optimizer), or the all-reduce (DDP); ZeRO-3 / FSDP every micro-batch
    rs, ag, once, again = dp_times
    if st.distributed_optimizer:
        one_b = (collective_bytes("reduce-scatter", dense_gpu * gb, ndp)
                 + collective_bytes("reduce-scatter", expert_gpu * gb, edp)
                 + collective_bytes("all-gather", dense_gpu * 2, ndp)
                 + collective_bytes("all-gather", expert_gpu * 2, edp))
    else:
        one_b = (collective_bytes("all-reduce", dense_gpu * gb, ndp)
                 + collective_bytes("all-reduce", expert_gpu * gb, edp))
    dp_s, dp_b = rs + ag, one_b
    if once is not None:
        per_mb = np.maximum(m, 1)
        dp_s = per_mb * (once + again)
        dp_b = per_mb * one_b * (1 + 2 / (2 + gb))   # the backward's all-gather again
        if st.pipelined_fsdp:
            dp_s, dp_b = np.where(p > 1, rs + ag, dp_s), np.where(p > 1, one_b, dp_b)
    out["comm_dp_s"], out["comm_dp_bytes"] = dp_s, dp_b
    dom = int(getattr(clu, "domain", clu.gpus_per_node))
    layouts = {"tp": (t, dict(t=t, c=c, d=d)), "ep": (e, dict(t=t, c=c, d=d, t_e=t_e)),
               "cp": (c, dict(t=t, c=c, d=d)), "pp": (p, dict(t=t, c=c, d=d)),
               "dp": (ndp, dict(t=t, c=np.ones_like(c), d=ndp))}
    for g, (size, lay) in layouts.items():
        out[f"comm_{g}_intra"] = group_link(g, size, dom, **lay)
    return out


def most_layers_per_rank(num_layers: int, p, first=0, last=0):
    r"""Decoder layers on the pipeline rank holding the most [1], vectorised.

    .. math:: \max\Big(f,\ l,\ \frac{L - f - l}{p - [f > 0] - [l > 0]}\Big)

    with the first / last stage sizes f, l (0: not given, the even split L/p).

    Parameters
    ----------
    num_layers : int
        Decoder layers L [1].
    p : int or array_like
        Pipeline-parallel size [GPUs].
    first, last : int or array_like
        Megatron's ``--decoder-first/last-pipeline-num-layers`` [1]; 0 when not given.

    Returns
    -------
    numpy.ndarray
        Layers on the most loaded rank [1].

    Examples
    --------
    >>> float(most_layers_per_rank(126, 16, 7, 7)), float(most_layers_per_rank(80, 4))
    (8.0, 20.0)
    """
    p, f_, l_ = _arr(p), _arr(first), _arr(last)
    mid = np.where((f_ == 0) & (l_ == 0), num_layers / p,
                   (num_layers - f_ - l_) / np.maximum(p - (f_ > 0) - (l_ > 0), 1))
    return np.maximum(np.maximum(f_, l_), mid)


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


def _group(st: Settings, p: int, m: int, v: int):
    """The warm-up group of one layout: torch's round size under ``torch_rounds``
    (interleaved only), else Megatron's ``microbatch_group_size_per_vp_stage``."""
    if st.torch_rounds and v > 1 and st.group_size is None:
        return int(torch_round_size(m, p))
    return st.group_size


def overlap_of(training) -> Overlap:
    """The overlaps a job runs with: its ``overlap_grad_reduce`` / ``overlap_param_gather`` /
    ``tp_comm_overlap`` / ``overlap_moe_expert_parallel_comm`` / ``overlap_p2p_comm``, each
    unset one at its framework's default (:meth:`memsym.frameworks.Framework.overlaps_by_default`).

    Megatron-LM's ``--overlap-grad-reduce`` and ``--overlap-param-gather`` are ``store_true``
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

    ``layout``: :class:`memsym.training.Layout`; ``training``:
    :class:`memsym.training.Training` (its ``num_microbatches`` or ``global_batch_size``
    gives m).  ``eta_gemm`` overrides the efficiency curve with one achieved GEMM
    efficiency.  ``flops_per_token`` (model FLOPs per token) adds the MFU.

    Parameters
    ----------
    arch : memsym.model.Architecture
        The model.
    layout : Layout
        The parallel layout.
    training : Training
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
    """
    training = canonical(training)        # "GPipe" is GPipe here too
    # a Job's m (Job.m, computed once when it was built), else from the batch sizes
    mm = microbatches(layout, training) if m is None else m
    if mm is None:
        raise InvalidValueError("give num_microbatches or global_batch_size to price a step")
    if overlap is None:
        overlap = overlap_of(training)
    batch, mem, states, pipe = training.batch, training.memory, training.states, training.pipeline
    titan = framework(training.framework).torch_pipelining      # torch.distributed.pipelining
    st = Settings(seq_length=batch.seq_length, micro_batch_size=batch.micro_batch_size,
                  recompute=mem.recompute,
                  sequence_parallel=bool(layout.sequence_parallel and layout.t > 1),
                  flash_attention=mem.flash_attention, dropout=dropout_kept(training),
                  precision=states.precision,
                  # every scheme but DDP shards the optimizer and reduce-scatters (ZeRO-1 on)
                  distributed_optimizer=states.sharding != "ddp",
                  # --grad-reduce-in-bf16 (grad_dtype bf16) reduces 2-byte gradients, as the
                  # memory counts its buffer; otherwise Megatron's fp32 main-grad buffer
                  grad_bytes=2 if states.grad_dtype in ("bf16", "fp16") else 4,
                  gather_per_microbatch=states.sharding in ("zero3", "fsdp"),
                  pipelined_fsdp=states.sharding == "fsdp" and titan,
                  recompute_fraction=_recompute_fraction(arch, layout, training),
                  group_size=pipe.microbatch_group_size, torch_rounds=titan,
                  schedule=pipe.schedule, output_first=pipe.stage_placement == "v")
    first, last = layout.first_stage_layers, layout.last_stage_layers
    pl = getattr(layout, "pipeline_layout", None)
    if pl is not None and layout.p > 1:
        # a custom layout: its end ranks' layers (the middle ranks priced at their mean)
        first, last = pl.rank_layers(0), pl.rank_layers(layout.p - 1)
    out = step_time_grid(arch, gpu_name, t=layout.t, p=layout.p, d=layout.d, c=layout.c,
                         e=layout.e, t_e=layout.t_e, v=layout.v or 1, m=mm, settings=st,
                         cluster=cluster, overlap=overlap, eta_gemm=eta_gemm,
                         first_stage_layers=first, last_stage_layers=last,
                         exact_schedule=True, communication=True)

    def first_of(key):
        return np.asarray(out[key]).ravel()[0]

    parts = {k: float(first_of(k)) for k in out if k != "launchable" and not k.startswith("comm_")}
    # bytes: whole bytes (sums of element counts x widths; rounding drops float residue)
    comm = {g: {"bytes": int(round(float(first_of(f"comm_{g}_bytes")))),
                "seconds": float(first_of(f"comm_{g}_s")), "exposed_seconds": parts[g],
                "link": "intra" if bool(first_of(f"comm_{g}_intra")) else "inter"}
            for g in ("tp", "cp", "pp", "dp", "ep")}
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
