r"""One decoder layer's forward and backward on one GPU: GEMMs, attention, memory-bound work
and the TP / EP / CP communication that overlap does not hide.

:func:`layer_time` prices one layer and one micro-batch for arrays of layouts; the step
(:mod:`memsym.timing.step`) multiplies it by the layers of each pipeline stage.  Under
Transformer Engine's userbuffers (``--tp-comm-overlap`` with sequence parallelism) a dense
layer's GEMMs and TP collectives are priced chunk by chunk.

References
----------
.. [megatron-lm] core/tensor_parallel/layers.py (LinearWithGradAccumulationAndAsync
   Communication); model_parallel_config.py (tp_comm_overlap, overlap_moe_expert_parallel_comm).
.. [korthikanti] arXiv:2205.05198 §4-§6.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .collectives import collective_bytes, collective_time, group_bandwidth
from .efficiency import as_array, ceiling, exp_time, gemm_precision, gemm_time, memory_time
from .gemm import attention_flops, layer_gemms, memory_bytes
from .linear_attention import gdn_copy_bytes, gdn_kernels, projection_widths
from .ssm import layout_copy_bytes, ssd_kernels, ssd_rate
from .moe import gemm_seconds, moe_layer_extras
from .moe_eager import eager_seconds
from .moe_host import host_exposed, paired_host_exposed
from .quantize import cast_bytes, cast_copies, cast_kernels, cast_rate, current_scaling
from .records import Overlap, Settings
from .recompute import module_recompute
from .userbuffers import UB_COMM_SMS, UB_PIPELINE_SPLITS, ub_config
from ..terms.low_precision import MXFP8_BLOCK, NVFP4_BLOCK

__all__ = ["BACKWARD_MEMORY", "FLASH_FORWARD", "FLASH_BACKWARD", "UB_COMM_SMS",
           "UB_PIPELINE_SPLITS", "fp8_element_bytes"]

#: Backward memory-bound bytes relative to the forward's (see :func:`layer_time`).
BACKWARD_MEMORY = 1.5

#: Flash attention's throughput relative to the GEMM ceiling, forward and backward
#: (FlashAttention-2 paper: forward up to ~70 % of A100 peak, backward ~ 5-10 % lower;
#: assumption: 0.9 and 0.75 of the ceiling).
FLASH_FORWARD = 0.9
FLASH_BACKWARD = 0.75


#: The column-parallel GEMMs, whose backward collectives Megatron issues asynchronously.
COLUMN_PARALLEL = ("qkv", "q", "q_up", "kv_up", "fc1", "shared_fc1", "in_proj")


def layer_time(x, st: Settings, dev, clu, t, c, e, t_e, b, *, moe: bool, eta_gemm, overlap: Overlap,
               dp, raw: dict | None = None, mixer: str = "attention", mlp: bool = True):
    r"""Forward and backward seconds of one layer and one micro-batch on one GPU (arrays).

    .. math:: t_{fwd} = \sum_{GEMMs} t_{GEMM} + t_{attn} + t_{mem} + t_{tp} + t_{ep} + t_{cp},
       \quad t_{bwd} = \sum_{GEMMs} (t_{dgrad} + t_{wgrad}) + t'_{attn} + 1.5\,t_{mem}
       + t'_{tp} + t'_{ep} + t'_{cp} \;(+\,t_{fwd} \text{ recomputed})
    (dict entries ``gemm`` ... ``cp``; the collectives' seconds the overlap leaves exposed).

    Parameters
    ----------
    x : memsym.timing.gemm.Shape
        The model's shape.
    st : Settings
        What the step does beyond the layout.
    dev, clu : GPU, Cluster
        The GPU and the interconnect.
    t, c, e, t_e, dp : array_like
        Tensor-, context-, expert-, expert-tensor- and data-parallel sizes [GPUs].
    b : array_like
        Micro-batch size [sequences].
    moe, mlp : bool
        The layer's MLP block is an MoE block; the layer has an MLP or MoE block at all.
    eta_gemm : float or None
        A fixed achieved GEMM efficiency in (0, 1] [1] (None: the efficiency curve).
    overlap : Overlap
        Which communication hides behind compute.
    raw : dict, optional
        Receives for ``tp``, ``ep`` and ``cp`` the collectives as issued, before overlap:
        ``(forward [s], backward [s], forward [bytes], backward [bytes])`` (one GPU sends,
        the backward with a recomputed forward's; under userbuffers the plain collectives).
    mixer : {"attention", "mamba", "gdn", "none"}
        A hybrid's token mixer: the ``"attention"`` part is its core, the attention, the
        Mamba-2 SSD scan or the Gated DeltaNet's chunked kernels (:func:`_chunked`).

    Examples
    --------
    A Llama-3-8B layer, 4096 tokens on one H100 at a fixed GEMM efficiency of 1/2: the
    forward GEMMs are 2 T N = 2 x 4096 x 218103808 FLOPs (N = h (a + 2g) d + a d h + 3 h f)
    at 494.7 TFLOP/s, 3.61 ms (by hand), and the backward's twice those FLOPs:

    >>> from memsym.hardware import cluster_for, gpu; from memsym.model import preset
    >>> from memsym.timing.gemm import shape_of
    >>> dev, one = gpu("h100"), np.array(1.0)
    >>> f, b = layer_time(shape_of(preset("llama3-8b")), Settings(seq_length=4096), dev,
    ...     cluster_for(dev.name), one, one, one, one, one, moe=False, eta_gemm=0.5,
    ...     overlap=Overlap(), dp=one)
    >>> round(float(f["gemm"]) * 1e3, 1), round(float(b["gemm"] / f["gemm"]), 1), float(f["tp"])
    (3.6, 2.0, 0.0)

    References
    ----------
    .. [narayanan] arXiv:2104.04473 Appendix (the backward pass: twice the forward's FLOPs).
    """
    moe = moe and mlp
    gemms = layer_gemms(x, st.seq_length, b, t, c, e, t_e, moe=moe, mixer=mixer, mlp=mlp)
    if not st.bias_activation_fusion:
        # unfused, the clamped quick-GeGLU's experts run the eager glu (moe/experts.py:995-1016
        # at d98e8a64dd), not the fused path's clamp-and-concatenate (memsym.timing.moe_eager),
        # and a clamped SwiGLU's eager glu clamps in torch (mlp.py:327-329, experts.py:1004-1006)
        gemms = [dataclasses.replace(q, eager=tuple("glu" if op == "clamp" else op
                                                     for op in q.eager)
                                     + (("swiglu_clamp",) if x.swiglu_clamp and q.name in
                                        ("fc1", "shared_fc1", "expert_fc1") else ()))
                 for q in gemms]
    f_gemm, b_gemm, f_att, b_att, f_mem, b_mem = _compute(x, st, dev, gemms, (t, c, e, t_e, b),
                                                          eta_gemm, moe=moe, mixer=mixer, mlp=mlp)
    T = as_array(b) * st.seq_length / as_array(c)     # tokens of one micro-batch on one CP rank
    f_gemm, b_gemm, f_tp, b_tp, tp_raw = _tensor_parallel(
        x, st, gemms, dev, clu, t, c, dp, T, moe=moe, eta_gemm=eta_gemm, overlap=overlap,
        f_gemm=f_gemm, b_gemm=b_gemm, blocks=((mixer != "none") + (mlp and not moe)))
    # --- expert parallel all-to-all: dispatch + combine of the rank's routed rows
    f_ep = b_ep = f_c = 0.0
    ep_raw = [0.0, 0.0, 0.0, 0.0]
    if moe:
        f_ep, b_ep, f_c, b_c, ep_raw = _expert_parallel(x, st, gemms, dev, clu, t, e, t_e, T,
                                                        eta_gemm=eta_gemm, overlap=overlap,
                                                        attention=(f_att, b_att))
        f_mem, b_mem = f_mem + f_c, b_mem + b_c
    f_cp, b_cp, cp_raw = _context_parallel(x, clu, t, c, dp, T, overlap, f_att, b_att,
                                           mixer=mixer)
    fwd = {"gemm": f_gemm, "attention": f_att, "memory": f_mem, "tp": f_tp, "ep": f_ep,
           "cp": f_cp}
    bwd = {"gemm": b_gemm, "attention": b_att, "memory": b_mem, "tp": b_tp, "ep": b_ep,
           "cp": b_cp}
    _recompute(x, st, dev, gemms, (t, c, b, T), eta_gemm, fwd, bwd, (tp_raw, ep_raw, cp_raw),
               moe=moe, dispatch_f=f_c, attention=mixer == "attention")
    gpu = (sum(fwd.values()), sum(bwd.values()))
    if moe and st.moe_host_sync:
        # the host sync in each MoE layer's forward: a floor on the forward, or under the EP
        # overlap's combined 1F1B on the forward-backward pair (memsym.timing.moe_host);
        # counted with the memory-bound part
        fwd["memory"] = fwd["memory"] + (paired_host_exposed(*gpu) if overlap.ep_a2a
                                         else host_exposed(gpu[0]))
    if raw is not None:
        raw.update(tp=tuple(tp_raw), ep=tuple(ep_raw), cp=tuple(cp_raw))
        if moe:     # the GPU seconds before the host floor (forward, backward)
            raw["gpu"] = gpu
    return fwd, bwd


def _compute(x, st: Settings, dev, gemms, knobs, eta_gemm, *, moe: bool, mixer: str, mlp: bool):
    """One layer's GEMM, attention-core (or SSD scan) and memory-bound seconds, forward and
    backward, before any communication (``knobs``: t, c, e, t_e, b)."""
    t, c, e, t_e, b = knobs
    s = st.seq_length
    prec, gprec = st.precision, gemm_precision(st.precision, st.fp8_recipe)
    # experts as TE's grouped GEMM, the router in the input dtype (memsym.timing.moe)
    f_gemm = sum(gemm_seconds(q, "forward", dev, gprec, eta_gemm=eta_gemm) for q in gemms)
    # backward: data gradient [M,N]x[N,K] and weight gradient [K,M]x[M,N]
    b_gemm = sum(gemm_seconds(q, "dgrad", dev, gprec, eta_gemm=eta_gemm)
                 + gemm_seconds(q, "wgrad", dev, gprec, eta_gemm=eta_gemm) for q in gemms)
    f_ssm = b_ssm = 0.0
    if mixer == "attention":
        f_att, b_att = _attention(x, st, dev, t, c, b, eta_gemm)
    elif mixer == "mamba":
        f_att, b_att, f_ssm, b_ssm = _chunked(ssd_kernels(x.ssm), layout_copy_bytes(x.ssm),
                                              st, dev, t, c, b)
    elif mixer == "gdn":
        f_att, b_att, f_ssm, b_ssm = _chunked(gdn_kernels(x.gdn), gdn_copy_bytes(x.gdn),
                                              st, dev, t, c, b)
    else:
        f_att = b_att = 0.0 * as_array(t)
    mem = memory_time(memory_bytes(x, s, b, t, c, e, t_e, moe=moe,
                                   sequence_parallel=st.sequence_parallel,
                                   flash=st.flash_attention, dropout=st.dropout,
                                   mixer=mixer, mlp=mlp), dev)
    # backward of an elementwise op reads its saved input and the incoming gradient and writes
    # one gradient (norm, activation, softmax: 3 tensors to the forward's 2; dropout and
    # residual pass the gradient through): about 1.5 x the forward bytes (memsym's count)
    # a Mamba or GDN mixer's memory-bound kernels are counted kernel by kernel, backward included
    f_mem, b_mem = mem + f_ssm, BACKWARD_MEMORY * mem + b_ssm
    # the dense or shared MLP's eager passes (the routed experts': memsym.timing.moe)
    f_eager, b_eager = eager_seconds(gemms, dev, experts=False)
    f_mem, b_mem = f_mem + f_eager, b_mem + b_eager
    if prec in ("fp8", "fp4"):
        # Transformer Engine's casts of each quantized GEMM's input and output gradient
        # (memsym.timing.quantize): one copy under per-tensor FP8 on a non-TN GPU, else two
        copies = cast_copies(prec, st.fp8_recipe, dev.non_tn_fp8_gemm)
        # amax passes (current scaling, NVFP4) and the norm-fused inputs' own casts (all but
        # delayed scaling)
        f_q, b_q = cast_bytes(gemms, fp8_element_bytes(st), copies,
                              **cast_kernels(prec, st.fp8_recipe))
        # at the fraction of HBM bandwidth the recipe's cast kernel reaches (MXFP8: measured)
        rate = cast_rate(prec, st.fp8_recipe)
        f_mem, b_mem = f_mem + memory_time(f_q, dev) / rate, b_mem + memory_time(b_q, dev) / rate
    return f_gemm, b_gemm, f_att, b_att, f_mem, b_mem


def _attention(x, st: Settings, dev, t, c, b, eta_gemm):
    """Forward and backward seconds of the attention core (flash, or the unfused batched
    GEMMs) of one layer; bf16 even in fp8 recipes (Transformer Engine keeps DPA in bf16)."""
    s = st.seq_length
    aprec = "bf16" if st.precision in ("fp8", "fp4") else st.precision
    peak = dev.peak(aprec)
    ceil = ceiling(dev, aprec) if eta_gemm is None else float(eta_gemm)
    if st.flash_attention:
        fl = attention_flops(x, s, b, t, c, causal_skip=True)
        # one exponential per kept score, forward and backward, on the SFUs beside the MMA
        exps = exp_time(fl / (2 * (x.d_qk + x.d_v)), dev)
        f_att = np.maximum(fl / (peak * ceil * FLASH_FORWARD), exps)
        b_att = np.maximum(2.5 * fl / (peak * ceil * FLASH_BACKWARD), exps)
    else:
        # unfused core attention: batched QK^T [s/c, d] x [d, s] and AV [s/c, s] x [s, d_v]
        heads = as_array(b) * x.a / as_array(t)
        sq = s / as_array(c)
        qk = gemm_time(sq, s, x.d_qk, dev, aprec, eta_gemm=eta_gemm, count=heads)
        av = gemm_time(sq, x.d_v, s, dev, aprec, eta_gemm=eta_gemm, count=heads)
        f_att = qk + av
        b_att = 2 * (qk + av)
    return f_att, b_att


def _chunked(passes, copies, st: Settings, dev, t, c, b):
    """Forward and backward seconds of a Mamba-2 mixer's kernels (:func:`memsym.timing.ssm.
    ssd_kernels`) or a Gated DeltaNet's (:func:`memsym.timing.linear_attention.gdn_kernels`):
    ``(matmul f, matmul b, memory-bound f, memory-bound b)``.  Each chunked matmul kernel
    (Triton, mamba_ssm's or fla's) takes the longer of its FLOPs at the rate mamba_ssm's
    Triton kernels reach (:func:`memsym.timing.ssm.ssd_rate`: the measured share of the
    16-bit peak, at most the measured rate per SM; measured on the SSD scan and applied to
    fla's chunk kernels, an assumption; bf16 inputs under any recipe) and its bytes at HBM
    bandwidth (a roofline: the measured rate is one kernel's, its traffic inside it); the
    conv1d, state-passing, norm, gate and reduction kernels and,
    at b > 1, Megatron-core's layout copies (``copies``) stream at HBM bandwidth."""
    aprec = "bf16" if st.precision in ("fp8", "fp4") else st.precision
    rate = ssd_rate(dev.peak(aprec), dev.sm_count)
    per = as_array(b) * st.seq_length / (as_array(c) * as_array(t))  # tokens x (1/t) [tokens]
    out = []
    for kernels, copy in zip(passes, copies):
        mm = sum(np.maximum(per * fl / rate, memory_time(per * by, dev))
                 for _, fl, by in kernels if fl)
        streamed = sum(by for _, fl, by in kernels if not fl) + np.where(as_array(b) > 1, copy, 0)
        out.append((mm, memory_time(per * streamed, dev)))
    (f_mm, f_mem), (b_mm, b_mem) = out
    return f_mm, b_mm, f_mem, b_mem


def _tensor_parallel(x, st: Settings, gemms, dev, clu, t, c, dp, T, *, moe: bool, eta_gemm,
                     overlap: Overlap, f_gemm, b_gemm, blocks: int = 2):
    """The layer's GEMM seconds and exposed TP seconds, forward and backward, after the
    overlaps, and its TP collectives as issued ``[f s, b s, f bytes, b bytes]``.

    ``blocks``: the layer's blocks that open with a column-parallel and close with a
    row-parallel GEMM (attention, a Mamba mixer (MambaMixer's in_proj and out_proj), a dense
    MLP; an MoE block's are the dispatcher's), each one all-reduce (SP: an all-gather and a
    reduce-scatter) forward."""
    prec = st.precision
    # --- tensor parallel: bytes of the full activation [T, h] in bf16
    act = 2 * T * x.h
    bw, lat = group_bandwidth("tp", t, clu, t=t, c=c, d=dp)
    one = None
    if st.sequence_parallel:
        calls = 2 * blocks   # fwd: AG + RS around attention (and MLP when dense)
        one = collective_time("all-gather", act, t, bw, lat)
        f_tp = calls * one
        f_tp_bytes = calls * collective_bytes("all-gather", act, t)
    else:
        calls = blocks
        f_tp = calls * collective_time("all-reduce", act, t, bw, lat)
        f_tp_bytes = calls * collective_bytes("all-reduce", act, t)
    # as issued: the backward repeats the forward's collectives, plus (SP) the input re-gather
    # of the column-parallel layers (LinearWithGradAccumulationAndAsyncCommunication)
    sp_back = 1.5 if st.sequence_parallel else 1
    tp_raw = [f_tp, sp_back * f_tp, f_tp_bytes, sp_back * f_tp_bytes]
    b_tp = _tp_backward(st, gemms, dev, eta_gemm, overlap, f_tp, one, calls)
    if overlap.tp_comm and overlap.tp_comm_split and st.sequence_parallel and not moe \
            and not x.mla and {"qkv", "fc1"} <= {q.name for q in gemms}:
        # userbuffers exist only with t > 1 (Bridge and TE turn the overlap off at t = 1)
        ub = _userbuffers(gemms, dev, gemm_precision(prec, st.fp8_recipe), eta_gemm, t, T * x.h, bw, lat,
                          ag_width=fp8_element_bytes(st), cfg=ub_config(st.tp_overlap_cfg))
        multi = as_array(t) > 1
        f_gemm, b_gemm, f_tp, b_tp = (np.where(multi, u, plain) for u, plain in
                                      zip(ub, (f_gemm, b_gemm, f_tp, b_tp)))
    elif overlap.tp_comm:
        f_tp = np.maximum(0, f_tp - f_gemm)
        b_tp = np.maximum(0, b_tp - b_gemm)
    if st.sequence_parallel and current_scaling(prec, st.fp8_recipe):
        # FP8 current scaling under SP: each block's column-parallel input (forward) and
        # row-parallel output gradient (backward) quantizer all-reduces its fp32 amax, 4
        # bytes (MAX), over the TP group before the cast, the stream waiting on it: exposed
        # (TE d0067d0da6 module/linear.py:351-355, 818-825; csrc/quantizer.cpp:1015-1021)
        amax = blocks * collective_time("all-reduce", 4, t, bw, lat)
        amax_bytes = blocks * collective_bytes("all-reduce", 4, t)
        f_tp, b_tp = f_tp + amax, b_tp + amax
        tp_raw = [tp_raw[0] + amax, tp_raw[1] + amax, tp_raw[2] + amax_bytes,
                  tp_raw[3] + amax_bytes]
    return f_gemm, b_gemm, f_tp, b_tp, tp_raw


def _tp_backward(st: Settings, gemms, dev, eta_gemm, overlap: Overlap, f_tp, one, calls):
    """The backward's exposed TP seconds before Transformer Engine's overlaps.

    Megatron's LinearWithGradAccumulationAndAsyncCommunication (tensor_parallel/layers.py)
    issues the column-parallel layers' dgrad all-reduce (SP: reduce-scatter) asynchronously
    and runs the weight-gradient GEMM under it; under SP it also re-gathers the input
    asynchronously under the dgrad GEMM.  The row-parallel layers' backward all-gather (SP)
    is exposed."""
    prec = gemm_precision(st.precision, st.fp8_recipe)
    colpar = [q for q in gemms if q.name in COLUMN_PARALLEL]
    wgrad = sum(gemm_time(q.K, q.N, q.M, dev, prec, eta_gemm=eta_gemm, count=q.count)
                for q in colpar)
    dgrad = sum(gemm_time(q.M, q.K, q.N, dev, prec, eta_gemm=eta_gemm, count=q.count)
                for q in colpar)
    if not overlap.tp_async_backward:
        return f_tp * (1.5 if st.sequence_parallel else 1)
    if st.sequence_parallel:
        n_col = calls // 2
        return (n_col * one                                   # row-parallel backward AG
                + np.maximum(0, n_col * one - wgrad)          # dgrad RS under wgrad
                + np.maximum(0, n_col * one - dgrad))         # input re-gather under dgrad
    return np.maximum(0, f_tp - wgrad)


def _expert_parallel(x, st: Settings, gemms, dev, clu, t, e, t_e, T, *, eta_gemm,
                     overlap: Overlap, attention=(0.0, 0.0)):
    """An MoE layer's exposed EP seconds (forward, backward), the dispatcher's memory-bound
    seconds (forward, backward) and its EP collectives as issued.

    Under ``overlap_moe_expert_parallel_comm`` Megatron-core runs one micro-batch's forward
    of a layer beside another's backward (``TransformerLayerSchedulePlan.run``,
    megatron/core/models/common/model_chunk_schedule_plan.py at Megatron-LM d98e8a64dd):
    the backward's combine beside the forward's pre-dispatch work (attention block, router,
    shared experts), both dispatches beside the experts' backward and forward, and the
    forward's combine beside the backward's pre-dispatch work.  Each all-to-all is exposed
    by what its compute partner leaves (``attention``: the attention core's forward and
    backward seconds)."""
    prec, gprec = st.precision, gemm_precision(st.precision, st.fp8_recipe)
    tok = T / (as_array(t) if st.sequence_parallel else 1)
    # all-to-alls by where EP ranks sit, expert-TP AG/RS, dispatcher copies (.moe)
    f_ep, b_ep, f_b, b_b, f_c, b_c = moe_layer_extras(
        gemms, tok, x.k, e, t_e, clu, dev, prec,
        fp8_recipe="nvfp4" if prec == "fp4" else st.fp8_recipe, dispatcher=st.moe_dispatcher,
        expert_quantize=st.expert_quantize)
    ep_raw = [f_ep, b_ep, f_b, b_b]
    if overlap.ep_a2a:
        def seconds(which, experts):
            return sum(gemm_seconds(q, w, dev, gprec, eta_gemm=eta_gemm) for q in gemms
                       for w in which if q.name.startswith("expert") == experts)
        exp_f = seconds(("forward",), True)
        pre_f = seconds(("forward",), False) + attention[0]
        pre_b = seconds(("dgrad", "wgrad"), False) + attention[1]
        one = b_ep / 2                   # one all-to-all (the backward's dispatch or combine)
        counts = f_ep - b_ep             # the forward's token-count gather, before its dispatch
        dispatch = np.maximum(0, 2 * one + counts - 3 * exp_f)   # beside mlp bwd, dw, fwd
        share = (one + counts) / np.maximum(2 * one + counts, 1e-30)
        f_ep = np.maximum(0, one - pre_b) + share * dispatch     # combine fwd | pre-dispatch bwd
        b_ep = np.maximum(0, one - pre_f) + (1 - share) * dispatch   # combine bwd | pre fwd
    return f_ep, b_ep, f_c, b_c, ep_raw


def _context_parallel(x, clu, t, c, dp, T, overlap: Overlap, f_att, b_att, *,
                      mixer: str = "attention"):
    """The layer's exposed CP seconds (forward, backward) and its CP traffic as issued.

    Attention: the ring, K and V blocks passed c - 1 times (forward), K, V and dK, dV
    (backward), hidden under the attention core with ``overlap.cp_ring``.  A Mamba-2 mixer
    (:func:`_mamba_context_parallel`): two all-to-alls each way, exposed.  None without a
    token mixer."""
    if mixer in ("mamba", "gdn"):
        return _mamba_context_parallel(x, clu, t, c, dp, T, mixer)
    kv = 2 * 2 * T * x.g * x.d_qk / as_array(t) if not x.mla else 2 * T * x.a * (x.d_qk + x.d_v) / as_array(t)
    cbw, clat = group_bandwidth("cp", c, clu, t=t, c=c, d=dp)
    cc = as_array(c) if mixer == "attention" else np.ones_like(as_array(c))
    f_cp = np.where(cc > 1, (cc - 1) * collective_time("p2p", kv, cc, cbw, clat), 0.0)
    b_cp = 2 * f_cp
    cp_bytes = np.where(cc > 1, (cc - 1) * collective_bytes("p2p", kv, cc), 0.0)
    cp_raw = [f_cp, b_cp, cp_bytes, 2 * cp_bytes]
    if overlap.cp_ring:
        f_cp = np.maximum(0, f_cp - f_att)
        b_cp = np.maximum(0, b_cp - b_att)
    return f_cp, b_cp, cp_raw


def _mamba_context_parallel(x, clu, t, c, dp, T, mixer="mamba"):
    """A Mamba-2 or Gated DeltaNet mixer's CP all-to-alls (forward, backward seconds; as issued).

    Megatron-core's ``MambaContextParallel`` (megatron/core/ssm/mamba_context_parallel.py at
    Megatron-LM d98e8a64dd): ``pre_conv_ssm`` turns in_proj's output from sequence- to
    head-sharded with all-to-alls of z, x, B, C and dt (``_all_to_all_cp2hp``), the scan
    runs on the whole sequence for H/(t c) heads, ``post_conv_ssm`` turns y back
    (``_all_to_all_hp2cp``); the backward runs the transposed all-to-alls of the gradients.
    Each rank sends its bf16 ``[T, (2 d_ssm + 2 G N + H)/t]`` and ``[T, d_ssm/t]`` (T the
    CP rank's tokens), nothing hides them (issued on the compute stream).  ``GatedDeltaNet``
    does the same with its in_proj output and the gated norm's (``a2a_cp_to_hp``,
    ``a2a_hp_to_cp``, megatron/core/ssm/gated_delta_net/gdn.py:175-183, common.py:366-368)."""
    cc = as_array(c)
    payload = 2 * T * sum(projection_widths(mixer, x.ssm, x.gdn)) / as_array(t)
    cbw, clat = group_bandwidth("cp", c, clu, t=t, c=c, d=dp)
    # one all-to-all for the projections and one for y, counted as one payload (the ring
    # latency of the five z, x, B, C, dt calls of pre_conv_ssm not separated)
    f_cp = np.where(cc > 1, collective_time("all-to-all", payload, cc, cbw, clat), 0.0)
    cp_bytes = np.where(cc > 1, collective_bytes("all-to-all", payload, cc), 0.0)
    return f_cp, f_cp, [f_cp, f_cp, cp_bytes, cp_bytes]


def _recompute(x, st: Settings, dev, gemms, knobs, eta_gemm, fwd: dict, bwd: dict, raws, *,
               moe: bool, dispatch_f, attention: bool = True):
    """Add to ``bwd`` (and to the backward of each issued ``raws`` entry) the forward work
    the recompute mode runs again (``knobs``: t, c, b and the tokens T of a CP rank;
    ``dispatch_f``: an MoE layer's forward dispatcher seconds, rerun by ``moe``)."""
    t, c, b, T = knobs
    s = st.seq_length
    prec = gemm_precision(st.precision, st.fp8_recipe)
    f_mem, f_att = fwd["memory"], fwd["attention"]
    if st.recompute == "full":
        for key in fwd:
            bwd[key] = bwd[key] + st.recompute_fraction * fwd[key]
        for item in raws:     # the recomputed forward's collectives
            item[1] = item[1] + st.recompute_fraction * item[0]
            item[3] = item[3] + st.recompute_fraction * item[2]
    elif st.recompute == "selective-op":
        # torchtitan's per-op SAC (distributed/activation_checkpoint.py, _custom_policy): of the
        # block's forward aten.mm calls every second is recomputed (mm_count % 2 == 0) and SDPA
        # is saved. A Llama block calls wq, wk, wv, wo, w1, w3, w2 (GPT: q, k, v, o, fc1,
        # fc2): the backward reruns wk, wo and w3 (fc2), plus the elementwise ops between them
        # (GEMM, output columns rerun): wk is the K columns of the fused QKV, w3 half of fc1
        rerun = {"qkv": lambda q: x.g * x.d_qk / as_array(t), "proj": lambda q: q.N,
                 ("fc1" if x.gated else "fc2"): lambda q: q.N / 2 if x.gated else q.N}
        bwd["gemm"] = bwd["gemm"] + sum(
            gemm_time(q.M, rerun[q.name](q), q.K, dev, prec, eta_gemm=eta_gemm, count=q.count)
            for q in gemms if q.name in rerun)
        bwd["memory"] = bwd["memory"] + f_mem
    elif st.recompute == "selective":
        if "core_attn" in st.recompute_modules and attention:
            bwd["attention"] = bwd["attention"] + f_att
            if not st.flash_attention:  # the softmax and its dropout run again
                scores = as_array(b) * (x.a / as_array(t)) * (s / as_array(c)) * s
                bwd["memory"] = bwd["memory"] + memory_time(2 * (2 + (2.5 if st.dropout else 0))
                                                            * scores, dev)  # 2 bytes/element
        # the other --recompute-modules (memsym.timing.recompute)
        g_s, m_s, dispatch = module_recompute(x, st.recompute_modules, gemms, dev, prec, T, t,
                                              moe=moe, sequence_parallel=st.sequence_parallel,
                                              eta_gemm=eta_gemm,
                                              mla_fused=st.mla_down_proj_fusion)
        bwd["gemm"] = bwd["gemm"] + g_s
        bwd["memory"] = bwd["memory"] + m_s
        if dispatch:   # moe: router, dispatch and combine rerun, all-to-alls included
            bwd["memory"] = bwd["memory"] + dispatch_f
            bwd["ep"] = bwd["ep"] + fwd["ep"]
            ep_raw = raws[1]
            ep_raw[1] = ep_raw[1] + ep_raw[0]
            ep_raw[3] = ep_raw[3] + ep_raw[2]


def _fewer_sms(dev, taken):
    """The GPU with ``taken`` SMs given to communication kernels (``set_sm_margin``)."""
    keep = (dev.sm_count - taken) / dev.sm_count
    return dataclasses.replace(dev, sm_count=dev.sm_count - taken,
                               **{k: (getattr(dev, k) or 0) * keep or None
                                  for k in ("bf16", "fp16", "fp8", "fp4")})


def fp8_element_bytes(st: Settings) -> float:
    r"""Bytes per element of an activation Transformer Engine moves quantized [bytes].

    .. math:: w = 2 \text{ (bf16)},\ 1 \text{ (FP8)},\ 1 + \tfrac{1}{32} \text{ (MXFP8)},\
       \tfrac{1}{2} + \tfrac{1}{16} \text{ (NVFP4)}

    2 (bf16), 1 (FP8 with per-tensor scales), 1 + 1/32 (MXFP8: one E8M0 scale byte per 32 elements,
    ``MXFP8Quantizer.get_scale_shape``, pytorch/tensor/mxfp8_tensor.py) or 1/2 + 1/16 (NVFP4).

    Parameters
    ----------
    st : Settings
        The run's precision and FP8 recipe.

    Examples
    --------
    >>> [fp8_element_bytes(Settings(precision=p, fp8_recipe=r))
    ...  for p, r in (("bf16", None), ("fp8", None), ("fp8", "mxfp8"))]
    [2, 1, 1.03125]
    >>> fp8_element_bytes(Settings(precision="fp4"))     # 1/2 + 1/16
    0.5625

    References
    ----------
    .. [transformer-engine] pytorch/tensor/mxfp8_tensor.py (``MXFP8Quantizer.get_scale_shape``),
       pytorch/tensor/nvfp4_tensor.py (an E4M3 scale per 16 elements).
    """
    if st.precision == "fp4":     # NVFP4: 4-bit data and an E4M3 scale per 16 elements
        return 0.5 + 1 / NVFP4_BLOCK
    if st.precision != "fp8":
        return 2
    return 1 + 1 / MXFP8_BLOCK if st.fp8_recipe == "mxfp8" else 1


def _userbuffers(gemms, dev, prec, eta, t, hidden, bw, lat, *, ag_width=None, cfg=None):
    """Forward / backward GEMM and exposed TP seconds of one dense layer under Transformer
    Engine's userbuffer overlaps (``--tp-comm-overlap`` with sequence parallelism), each GEMM
    as ``cfg`` (:func:`memsym.timing.userbuffers.ub_config`) says.

    transformer_engine/pytorch/module/base.py ``initialize_ub``: ring exchange (the
    all-gather passed to the neighbour chunk by chunk on the copy engines, one GEMM of M/t
    rows per chunk: qkv and fc1 forward, proj and fc2 data gradients); proj and fc2 forward
    either pipelined GEMM + reduce-scatter (``num_splits`` chunks, the reduce-scatter kernel
    beside them) or a reduce-scatter ring (comm_gemm_overlap.cpp ``split_overlap_rs`` of
    CommOverlapP2PBase: t chunk GEMMs of M/t rows, chunk i - 1 sent to its rank under chunk
    i, then one kernel sums the t received chunks); bulk (one GEMM beside the whole
    collective: qkv and fc1 data and weight gradients); the proj and fc2 weight gradients on
    the ring's gathered gradient.  A GEMM runs on every SM but the communication kernel's
    where its entry sets ``set_sm_margin`` (comm_gemm_overlap.cpp:143).  All-gather buffers
    are fp8 under an fp8 recipe (``fp8_buf`` of the all-gather layers; ``ag_width``
    [bytes/element], :func:`fp8_element_bytes`, overrides it), reduce-scatter buffers bf16.  ``hidden``: the layer's full
    activation [T h] elements; ``cfg`` default: Transformer Engine's own."""
    g = {q.name: q for q in gemms}
    tt = as_array(t)
    cfg = ub_config() if cfg is None else cfg
    if ag_width is None:
        ag_width = 1 if prec in ("fp8", "mxfp8") else 2
    rows = g["qkv"].M

    def on(name):
        taken = dev.sm_count - cfg[name].math_sms(dev.sm_count)
        return _fewer_sms(dev, taken) if taken else dev

    def gemm(M, N, K, where=dev, count=1):
        return gemm_time(M, N, K, where, prec, eta_gemm=eta, count=count)

    def ring(name, M, N, K):
        chunk = gemm(M / tt, N, K, on(name))
        step = collective_time("p2p", ag_width * hidden / tt, 2, bw, lat)
        return tt * chunk, (tt - 1) * np.maximum(0, step - chunk)

    def reduce_scatter(name, M, N, K):
        u = cfg[name]
        if u.method == "pipeline":
            n = u.num_splits
            chunk = gemm(M / n, N, K, on(name))
            rs = collective_time("reduce-scatter", 2 * hidden / n, tt, bw, lat)
            return n * chunk, rs + (n - 1) * np.maximum(0, rs - chunk)
        # ring: t chunk GEMMs, t - 1 bf16 sends each under the next chunk, then the sum of
        # the t received [M/t, N] chunks (reads t of them, writes one)
        chunk = gemm(M / tt, N, K, on(name))
        step = collective_time("p2p", 2 * hidden / tt, 2, bw, lat)
        total = memory_time(2 * hidden * (1 + 1 / tt), dev)
        return tt * chunk + total, (tt - 1) * np.maximum(0, step - chunk)

    def bulk(name, M, N, K, comm):
        run = gemm(M, N, K, on(name))
        return run, np.maximum(0, comm - run)

    qkv, proj, fc1, fc2 = g["qkv"], g["proj"], g["fc1"], g["fc2"]
    ag = collective_time("all-gather", ag_width * hidden, tt, bw, lat)
    rs = collective_time("reduce-scatter", 2 * hidden, tt, bw, lat)
    fwd = [ring("qkv_fprop", rows, qkv.N, qkv.K),
           reduce_scatter("proj_fprop", rows, proj.N, proj.K),
           ring("fc1_fprop", rows, fc1.N, fc1.K),
           reduce_scatter("fc2_fprop", rows, fc2.N, fc2.K)]
    bwd = [ring("proj_dgrad", rows, proj.K, proj.N), (gemm(proj.K, proj.N, proj.M), 0.0),
           ring("fc2_dgrad", rows, fc2.K, fc2.N), (gemm(fc2.K, fc2.N, fc2.M), 0.0)]
    for name, q in (("qkv", qkv), ("fc1", fc1)):
        bwd += [bulk(name + "_dgrad", q.M, q.K, q.N, ag), bulk(name + "_wgrad", q.K, q.N, q.M, rs)]
    return (sum(a for a, _ in fwd), sum(a for a, _ in bwd),
            sum(b for _, b in fwd), sum(b for _, b in bwd))
