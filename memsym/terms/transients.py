"""Transient peaks: memory that exists only during one phase of the training step.

The fp32 logits of the cross-entropy, the unsharded parameters and reduce-scatter buffers of
FSDP2 / ZeRO-3, DeepSpeed's gradient buckets, the optimizer step's temporaries; each a cited
:class:`~memsym.term.Term` with its knobs as symbols and :data:`DEFAULTS` from the libraries'
documented defaults.

The loss's transients live in :mod:`memsym.terms.loss_transients`, those of data-parallel
sharding (FSDP2, ZeRO, the buckets) in :mod:`memsym.terms.sharding_transients`; both are
re-exported here.
"""

from __future__ import annotations

from ..symbols import (M_ctx, N, N_bkt, N_pf, S_nccl, V, b, b_r, b_u, c, d, h, m,
                       n_ag, n_bkt, n_ch, p, s, t)
from ..term import Source, Term, Total
from ..values import as_expr, lazy_min
from .loss_transients import (cross_entropy_transient, hf_cross_entropy_transient,
                              loss_parallel_backward, loss_parallel_transient,
                              torch_cross_entropy_backward, torch_cross_entropy_transient)
from .sharding_transients import (deepspeed_ipg_buckets, fsdp2_io_groups, fsdp2_kept_unsharded,
                                  fsdp2_pipeline_unsharded, fsdp2_reshards_after_forward,
                                  fsdp2_transients, megatron_buckets, megatron_fsdp_buckets,
                                  megatron_fsdp_fp8_unsharded, zero3_transients)

__all__ = ["DEFAULTS", "cross_entropy_transient", "torch_cross_entropy_transient",
           "hf_cross_entropy_transient", "torch_cross_entropy_backward", "loss_parallel_transient",
           "loss_parallel_backward",
           "fsdp2_transients", "fsdp2_io_groups", "fsdp2_reshards_after_forward",
           "fsdp2_kept_unsharded", "fsdp2_pipeline_unsharded", "zero3_transients",
           "deepspeed_ipg_buckets", "megatron_buckets", "megatron_fsdp_fp8_unsharded",
           "megatron_fsdp_buckets",
           "optimizer_step_transient", "master_weight_cast",
           "tp_comm_userbuffers", "USERBUFFER_GEMMS",
           "deferred_wgrad_buffers"]

_MIB = 2**20

#: Default values of the transient knobs, each from a documented default (see the functions).
DEFAULTS = {
    M_ctx: 500 * _MIB,         # allowance; CUDA lazy loading (default since 12.2) keeps it small
    S_nccl: 4 * _MIB,          # NCCL_BUFFSIZE default 4194304 (nccl-env)
    n_ch: 32,                  # NCCL's MAXCHANNELS: an upper bound on channels per communicator
    n_ag: 2,                   # FSDP2: current group + one prefetched (forward and backward)
    N_bkt: 5 * 10**8,          # DeepSpeed reduce_bucket_size default (runtime/zero/config.py)
    n_bkt: 1,                  # DeepSpeed overlap_comm off for stages 1/2 (2 buffers when on)
    N_pf: 5 * 10**7,           # DeepSpeed stage3_prefetch_bucket_size default
    b_r: 4,                    # FSDP2 reduce_dtype fp32 (torchtitan's default)
    b_u: 2,                    # FSDP2 param_dtype bf16; ZeRO-3's 16-bit parameters
}

_ADAM = Source("pytorch-optim", "torch/optim/adam.py, _multi_tensor_adam "
               "(exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs))")


def optimizer_step_transient(params=None, state_bytes=4) -> Total:
    r"""torch.optim.Adam(W)'s foreach step: a full copy of the second moment.

    .. math:: \Psi_{\mathrm{opt}}\, b_{\mathrm{state}}

    ``_multi_tensor_adam`` computes ``torch._foreach_sqrt(exp_avg_sq)`` out of place for every
    tensor of a (device, dtype) group at once.  Fused multi-tensor kernels (Apex / TE
    ``FusedAdam``, used by Megatron) work in chunks and add next to nothing.

    Parameters
    ----------
    params : sympy.Expr, optional
        Parameters whose states this GPU steps [parameters]; default :math:`N/(p t d)`.
    state_bytes : int
        Bytes per element of ``exp_avg_sq`` [bytes].

    Examples
    --------
    >>> optimizer_step_transient(10**6).evaluate()
    4000000

    References
    ----------
    .. [pytorch-optim] ``torch/optim/adam.py``, ``_multi_tensor_adam`` (``_foreach_sqrt``).
    """
    if params is None:
        params = N / (p * t * d)
    return Total("optimizer-step transient", (
        Term("adam_sqrt", as_expr(params) * as_expr(state_bytes), "out-of-place sqrt of "
             "exp_avg_sq (foreach Adam)", _ADAM, label="foreach sqrt"),
    ))


def master_weight_cast(shard_params, width=2) -> Term:
    r"""Transformer Engine's 16-bit casts of the fp32 master shards at the step [bytes].

    .. math:: b_{16}\,\Psi_{\mathrm{q}}

    Made to requantize FP8 / NVFP4 parameters after the optimizer step.  Megatron-core's distributed optimizer with ``--fp8-param-gather`` (or
    ``--fp4-param-gather``) quantizes every fp32 main-parameter shard back into its FP8 / NVFP4
    model parameter after ``optimizer.step()``, in one call over all of them
    (``_copy_main_params_to_model_params`` -> ``quantize_param_shard``); Transformer Engine's
    ``quantize_master_weights`` first casts each master shard to the model weight's nominal
    dtype, ``master_weight.to(model_weight.dtype)``, "to keep numerical consistency" with the
    16-bit path, and holds every cast in its per-recipe lists until the casts into the
    parameters are done.  :math:`\Psi_{\mathrm{q}}` is the quantized parameters whose master
    shard the GPU holds.  This happens after the moments are updated, while the fp32
    main-gradient shard is still alive (it is freed by the next ``zero_grad``).

    Parameters
    ----------
    shard_params : sympy.Expr
        Quantized (FP8 / NVFP4) parameters whose fp32 master shard this GPU holds [parameters].
    width : int or sympy.Expr
        Bytes per element of the parameters' nominal dtype [bytes] (2: bf16 / fp16).

    Examples
    --------
    Llama 3 70B at TP 4 PP 4, d = 2 (4.28e9 FP8 linear parameters on stage 0): 4.28 GB.

    >>> master_weight_cast(4_280_000_000 // 2).evaluate()
    4280000000

    References
    ----------
    .. [transformer-engine] ``pytorch/tensor/utils.py:204-345`` (``quantize_master_weights``, line 291:
       ``master_weight = master_weight.to(model_weight.dtype)``, kept in the bucket lists,
       since #1544), ``:466-590`` (current scaling: amaxes, then the casts).
    .. [megatron-core] ``core/optimizer/optimizer.py:777-808`` (``optimizer.step()`` then
       ``_copy_main_params_to_model_params``), ``core/optimizer/distrib_optimizer.py:2802-2857``
       (one ``quantize_param_shard`` over every FP8 parameter), ``core/fp8_utils.py:421-453``.
    """
    return Term("master_weight_cast", as_expr(width) * as_expr(shard_params),
                "16-bit casts of the fp32 master shards, all held while Transformer Engine "
                "requantizes the FP8 / NVFP4 parameters after the step",
                Source("transformer-engine", "pytorch/tensor/utils.py:204-345 "
                       "(quantize_master_weights, :291 master_weight.to(model_weight.dtype), kept in "
                       "the per-recipe lists until the casts), :466-590; Megatron-core "
                       "d98e8a64dd optimizer/optimizer.py:777-808, optimizer/distrib_optimizer.py:"
                       "2802-2857 (one quantize_param_shard after optimizer.step())"),
                label="16-bit master casts")


#: Transformer Engine's tensor-parallel overlap GEMMs, each with one userbuffer of the layer's
#: global input shape [s b / c, h] (``initialize_ub``'s ``methods``): those whose buffer is an
#: all-gather input (``layers_all_gather_overlap``) are FP8 (1 byte) under an FP8 recipe, the
#: reduce-scatter outputs stay in the 16-bit dtype (2 bytes).
USERBUFFER_GEMMS = {
    "all-gather": ("qkv_fprop", "qkv_dgrad", "proj_dgrad", "proj_wgrad", "fc1_fprop",
                   "fc1_dgrad", "fc2_dgrad", "fc2_wgrad"),
    "reduce-scatter": ("proj_fprop", "fc2_fprop", "qkv_wgrad", "fc1_wgrad"),
}


def tp_comm_userbuffers(fp8: bool) -> Term:
    r"""Transformer Engine's userbuffers for ``--tp-comm-overlap`` [bytes].

    .. math::

        \frac{s\,b\,h}{c}\,\bigl(8\,w_{\mathrm{ag}} + 4 \cdot 2\bigr),\qquad
        w_{\mathrm{ag}} = 1 \text{ (FP8) or } 2

    Outside PyTorch's allocator (``cuMemCreate`` / ``cudaMalloc``, kept for the whole run).
    Megatron-LM (``training/initialize.py``, ``_initialize_tp_communicators``) and Megatron-Bridge
    (``training/initialize.py``) call ``initialize_ub`` with the shape
    ``[seq_length * micro_batch_size / context_parallel_size, hidden_size]`` and one quantization
    mode (FP8 under an FP8 recipe).  With the default configuration every one of the twelve GEMMs of
    :data:`USERBUFFER_GEMMS` gets one buffer of that whole shape (``CommOverlapBase`` and the
    all-gather ``CommOverlapP2PBase``, ``comm_gemm_overlap.cpp``:
    ``buffer_shape[0] * buffer_shape[1]`` elements; a ring-exchange *reduce-scatter*, which a
    ``--tp-comm-overlap-cfg`` file may choose, would hold ``(2t - 1)/t`` of it).  Rounding to the
    allocation granularity (2 MiB) is left out.

    Examples
    --------
    >>> # Llama 3 70B, s = 4096, b = 1, c = 1: 8 x 32 MiB (FP8) + 4 x 64 MiB = 512 MiB
    >>> tp_comm_userbuffers(True).evaluate({s: 4096, b: 1, h: 8192, c: 1}) / 2**20
    512
    >>> tp_comm_userbuffers(False).evaluate({s: 4096, b: 1, h: 8192, c: 1}) / 2**20
    768

    References
    ----------
    .. [transformer-engine] ``pytorch/module/base.py``, ``initialize_ub`` (``methods``,
       ``layers_all_gather_overlap``, ``fp8_buf``); ``common/comm_gemm_overlap/
       comm_gemm_overlap.cpp`` (``CommOverlapBase::initialize``,
       ``CommOverlapP2PBase::initialize``).
    """
    w_ag = 1 if fp8 else 2
    # (named apart from the registry's n_ag, the FSDP all-gather depth)
    n_gather, n_scatter = (len(USERBUFFER_GEMMS[k]) for k in ("all-gather", "reduce-scatter"))
    return Term("tp_comm_userbuffers", (n_gather * w_ag + n_scatter * 2) * s * b * h / c,
                "Transformer Engine userbuffers of --tp-comm-overlap: one [s b / c, h] buffer "
                "per overlapped GEMM, outside PyTorch's allocator",
                Source("transformer-engine", "pytorch/module/base.py initialize_ub; "
                       "common/comm_gemm_overlap/comm_gemm_overlap.cpp"),
                label="TP-overlap userbuffers")


def deferred_wgrad_buffers(microbatches=None, limit=0, width=2, sequence_parallel=True,
                           last_pending=False) -> Term:
    r"""What Megatron's ``--defer-embedding-wgrad-compute`` keeps on the last stage [bytes].

    Held until the pipeline flush: the output layer (a ``ColumnParallelLinear``) appends each
    micro-batch's input to ``embedding_activation_buffer`` in its forward and, in its backward, the
    logits' gradient to ``grad_output_buffer`` instead of computing its weight gradient, while fewer
    than ``--wgrad-deferral-limit`` are held (0: no limit); the flush
    (``finish_embedding_wgrad_compute``, before the optimizer step) drains both.  With
    :math:`\tau = s b / c` tokens on one GPU, :math:`w` bytes per element and
    :math:`n = \min(m, \text{limit})` micro-batches (:math:`m` when the limit is 0):

    .. math::

        n\,w\,\tau\Big(\frac{h}{\sigma} + \frac{V}{t}\Big),
        \qquad \sigma = t \text{ under sequence parallelism, else } 1

    (the input is the sequence-sharded one under sequence parallelism: the all-gather happens inside
    the GEMM) at the last deferred backward.  Before it, at the last micro-batch's forward and its
    loss's backward, that micro-batch's gradient is not in the buffer yet (the loss's backward makes
    it: the loss's own ``logits_grad_16bit``), so :math:`\min(m - 1, \text{limit})` gradients
    (``last_pending``).  Both are held beside the stage's peak activations, an upper bound on the
    moment: the last rank's steady state keeps its in-flight passes beside them.

    Parameters
    ----------
    microbatches : sympy.Expr, optional
        Micro-batches per step m [1]; default the symbol ``m``.
    limit : int
        ``--wgrad-deferral-limit`` [1]; 0 = every micro-batch.
    width : int
        Bytes per element of the output layer's input and gradient [bytes] (2 for bf16).
    sequence_parallel : bool
        Whether the input is split over the sequence (``--sequence-parallel``).
    last_pending : bool
        At the last micro-batch's forward or loss backward: one logits gradient fewer (its
        own, not yet appended).

    Examples
    --------
    Llama 3 70B on seed 001's last stage (t 4, s 4096, 16 micro-batches, limit 22; padded
    vocabulary 128,512): 16 x (16.8 + 263.2) MB:

    >>> deferred_wgrad_buffers(16, 22).evaluate(s=4096, b=1, c=1, h=8192, V=128512, t=4)
    4479516672

    References
    ----------
    .. [megatron-core] ``core/tensor_parallel/layers.py`` (``ColumnParallelLinear.forward``,
       ``LinearWithGradAccumulationAndAsyncCommunication.backward``),
       ``core/pipeline_parallel/schedules.py`` (``finish_embedding_wgrad_compute``),
       ``core/model_parallel_config.py`` (``defer_embedding_wgrad_compute``,
       ``wgrad_deferral_limit``).
    """
    mm = m if microbatches is None else as_expr(microbatches)

    def capped(count):
        return count if not limit else lazy_min(count, int(limit))

    n = capped(mm)
    grads = capped(mm - 1) if last_pending else n
    tau = s * b / c
    return Term("deferred_wgrad_buffers",
                width * tau * (n * h / (t if sequence_parallel else 1) + grads * V / t),
                "the output layer's inputs and logits gradients of the deferred micro-batches, "
                "kept for its weight-gradient GEMMs at the pipeline flush",
                Source("megatron-core", "core/tensor_parallel/layers.py, ColumnParallelLinear."
                       "forward (embedding_activation_buffer) and LinearWithGradAccumulationAnd"
                       "AsyncCommunication.backward (grad_output_buffer); pipeline_parallel/"
                       "schedules.py, finish_embedding_wgrad_compute"),
                label="deferred output wgrad")
