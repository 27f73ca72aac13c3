"""Transient peaks: memory that exists only during one phase of the training step.

The fp32 logits of the cross-entropy, the unsharded parameters and reduce-scatter buffers of
FSDP2 / ZeRO-3, DeepSpeed's gradient buckets, the optimizer step's temporaries, the CUDA
context and NCCL's buffers; each a cited :class:`~memsym.term.Term` with its knobs as symbols
and :data:`DEFAULTS` from the libraries' documented defaults.
"""

from __future__ import annotations

import sympy as sp

from ..symbols import (M_ctx, N, N_bkt, N_ll, N_pf, S_nccl, V, b, b_hp, b_r, b_u, c, d, h, m, n_ag,
                       n_bkt, n_ch, n_comm, p, s, t)
from ..term import Source, Term, Total
from ..values import as_expr, lazy_min
from ..errors import InvalidValueError

__all__ = ["DEFAULTS", "cross_entropy_transient", "torch_cross_entropy_transient",
           "torch_cross_entropy_backward", "loss_parallel_transient", "loss_parallel_backward",
           "fsdp2_transients", "fsdp2_io_groups", "fsdp2_reshards_after_forward",
           "fsdp2_kept_unsharded", "fsdp2_pipeline_unsharded", "zero3_transients",
           "deepspeed_ipg_buckets", "megatron_buckets", "optimizer_step_transient",
           "cuda_context", "nccl_buffers", "tp_comm_userbuffers", "USERBUFFER_GEMMS",
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

_CE = Source("megatron-core", "core/tensor_parallel/cross_entropy.py, "
             "_VocabParallelCrossEntropy.forward and VocabParallelCrossEntropy.calculate_*")
_FSDP_PG = Source("pytorch-fsdp2", "_fsdp_param_group.py, FSDPParamGroup (Note on overlapping "
                  "all-gather copy-in and all-gather: next group's all-gather overlaps the current)")
_FSDP_RS = Source("pytorch-fsdp2", "_fsdp_collectives.py, foreach_reduce (reduce_scatter_input of "
                  "the padded unsharded numel, reduce_output of 1/world of it, in reduce_dtype)")
_DS_EST = Source("deepspeed-zero", "runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs "
                 "(largest_layer_memory = 4 * largest_layer_params); "
                 "partitioned_param_coordinator.py (prefetch bucket)")
_DS_IPG = Source("deepspeed-zero", "runtime/zero/stage_1_and_2.py, DeepSpeedZeroOptimizer."
                 "setup_buckets (buf_0, and buf_1 with overlap_comm: torch.empty("
                 "reduce_bucket_size, dtype=self.dtype))")
_MC_DDP = Source("megatron-core", "core/distributed/distributed_data_parallel.py, "
                 "DistributedDataParallel.__init__ (bucket_size = max(40000000, 1000000 * dp)); "
                 "param_and_grad_buffer.py (buckets are views of grad_data / param_data)")
_ADAM = Source("pytorch-optim", "torch/optim/adam.py, _multi_tensor_adam "
               "(exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs))")
_CTX = Source("cuda-lazy-loading", "§4.7 Lazy Loading (modules loaded on first use; default since "
              "CUDA 12.2 on Linux)")
_NCCL = Source("nccl-env", "NCCL_BUFFSIZE (default 4 MiB), NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS")


def _logits(tokens, vocab, tp) -> tuple:
    """(tokens on one GPU, padded vocabulary, TP size) with memsym's symbols as defaults."""
    return (s * b / c if tokens is None else as_expr(tokens), V if vocab is None else as_expr(vocab),
            t if tp is None else as_expr(tp))


def _logit_shape(tokens, vocab, tp):
    tau, vocab, tp = _logits(tokens, vocab, tp)
    return tau * vocab / tp


_LOGIT_PARAMS = """tokens : sympy.Expr, optional
        Tokens on one GPU [tokens]; default :math:`s b / c`.
    vocab : sympy.Expr, optional
        Padded vocabulary [tokens]; default ``V``.
    tp : sympy.Expr, optional
        Tensor-parallel size the vocabulary is split over [GPUs]; default ``t``."""


def _logit_doc(fn):
    # the loss Terms share their three size parameters: one description
    fn.__doc__ = fn.__doc__.replace("{logit_params}", _LOGIT_PARAMS)
    return fn


@_logit_doc
def cross_entropy_transient(tokens=None, vocab=None, tp=None) -> Total:
    r"""What the vocab-parallel cross-entropy adds at its forward peak, beyond the saved softmax.

    With :math:`\tau = s b / c` tokens on one GPU and :math:`V/t` logits per token:

    .. math::

        \underbrace{2\tau V/t}_{\text{bf16 logits}} +
        \underbrace{(4 + 1 + 8 + 8 + 4 + 4)\,\tau}_{\text{max, mask, target, arange, predicted}\times 2}

    ``calculate_logits_max`` makes an fp32 copy of the logits (``.float()``), then subtracts,
    exponentiates and normalises *in place*, and saves that fp32 softmax for the backward:
    the :math:`4\tau V/t` of :func:`memsym.terms.activations.output_activations` (not counted
    again here).  While it exists, the output layer's 16-bit logits are still referenced by the
    model's forward (``GPTModel.forward`` keeps ``logits`` until the loss returns), and the
    backward's 16-bit gradient of the logits is as large again at the other end.  Per token, the
    peak of ``calculate_predicted_logits`` holds the fp32 ``logits_max`` (4), the bool
    ``target_mask`` (1), the int64 ``masked_target`` (8) and ``arange_1d`` (8), and the fp32
    predicted logits twice (the gather and its ``.clone()``, 4 + 4): 29 bytes; the loss line
    reaches 29 again (max, mask, target, predicted, sum-exp, log, loss).  Measured on a literal
    port in ``tests/test_transients.py``.

    Parameters
    ----------
    {logit_params}

    Returns
    -------
    Total
        ``logits_16bit`` and ``ce_per_token`` [bytes].

    Examples
    --------
    >>> ce = cross_entropy_transient()
    >>> ce.evaluate(s=4096, b=1, c=1, V=128256, t=4) == 2 * 4096 * 128256 // 4 + 29 * 4096
    True

    References
    ----------
    .. [megatron-core] ``core/tensor_parallel/cross_entropy.py``, ``_VocabParallelCrossEntropy``.
    """
    tau, vocab, tp = _logits(tokens, vocab, tp)
    return Total("cross-entropy transient (last stage, forward peak)", (
        Term("logits_16bit", 2 * tau * vocab / tp, "16-bit logits of the output layer, alive while "
             "the fp32 copy is made (and their gradient in backward)", _CE, label="bf16 logits"),
        Term("ce_per_token", 29 * tau, "fp32 logits_max and predicted logits (gather + clone); "
             "int64 masked target and arange; bool target mask", _CE, label="per-token CE buffers"),
    ))


@_logit_doc
def torch_cross_entropy_transient(tokens=None, vocab=None, tp=None) -> Total:
    r"""What ``F.cross_entropy(pred.float(), labels)`` adds at its forward peak (torchtitan).

    With :math:`\tau = s b / c` tokens on one GPU and :math:`V/t` logits per token:

    .. math::

        \underbrace{2\tau V/t}_{\text{bf16 pred}} + \underbrace{4\tau V/t}_{\text{fp32 copy}}

    torchtitan's ``cross_entropy_loss`` casts the 16-bit logits to fp32 (``.float()``) and
    calls ``F.cross_entropy`` = ``log_softmax`` + ``nll_loss``: while ``log_softmax`` writes
    its fp32 output (saved for backward: the :math:`4\tau V/t` of
    :func:`memsym.terms.activations.output_activations`), the fp32 copy and the bf16 ``pred``
    (deleted by the train step only after the loss returns) are alive.

    Parameters
    ----------
    {logit_params}

    Examples
    --------
    >>> torch_cross_entropy_transient().evaluate(s=8192, b=2, c=1, V=128256, t=1) \
    ...     == 6 * 8192 * 2 * 128256
    True

    References
    ----------
    torchtitan ``torchtitan/components/loss.py``, ``cross_entropy_loss``.
    """
    tau, vocab, tp = _logits(tokens, vocab, tp)
    src = Source("torchtitan", "torchtitan/components/loss.py, cross_entropy_loss "
                 "(F.cross_entropy(pred.flatten(0, 1).float(), labels))")
    return Total("cross-entropy transient of F.cross_entropy on fp32 logits (torchtitan)", (
        Term("logits_16bit", 2 * tau * vocab / tp, "16-bit pred, alive until the loss returns",
             src, label="bf16 logits"),
        Term("logits_fp32_copy", 4 * tau * vocab / tp, "the .float() copy log_softmax reads",
             src, label="fp32 logits copy"),
    ))


_TORCH_CE = Source("pytorch-autograd", "aten NLLLossBackward0 (nll_loss_backward: a zero-filled "
                   "fp32 grad_input) and LogSoftmaxBackward0 (_log_softmax_backward_data: a new "
                   "fp32 grad_input while its saved output and incoming grad are alive)")


@_logit_doc
def torch_cross_entropy_backward(tokens=None, vocab=None, tp=None) -> Total:
    r"""What the eager backward of ``F.cross_entropy(pred.float(), labels)`` adds [bytes].

    .. math::

        \underbrace{4\tau V/t}_{\text{nll\_loss grad}} +
        \underbrace{4\tau V/t}_{\text{log\_softmax grad}}

    Beyond the saved fp32 log-softmax (torchtitan's loss uncompiled), the backward starts from the
    loss: ``nll_loss_backward`` makes a zero-filled fp32 gradient of the log-probabilities, then
    ``_log_softmax_backward_data`` writes the fp32 gradient of its input while its saved output
    (:math:`4\tau V/t` of :func:`memsym.terms.activations.output_activations`) and that incoming
    gradient are alive: :math:`12\tau V/t` at once, above the forward's :math:`10\tau V/t`.  The
    cast back to 16 bits follows with only one fp32 buffer left.  Measured on CPU
    (``tests/test_transients.py``, allocator-level: 12 and 10 bytes per logit).

    Parameters
    ----------
    {logit_params}

    Returns
    -------
    Total
        ``nll_grad_fp32`` and ``log_softmax_grad_fp32`` [bytes].

    Examples
    --------
    >>> torch_cross_entropy_backward().evaluate(s=8192, b=2, c=1, V=128256, t=1) \
    ...     == 8 * 8192 * 2 * 128256
    True

    References
    ----------
    .. [pytorch-autograd] ``NLLLossBackward0``, ``LogSoftmaxBackward0`` (ATen ``LossNLL.cpp``,
       ``SoftMax.cpp``: CPU and CUDA kernels allocate one output each).
    """
    n = _logit_shape(tokens, vocab, tp)
    return Total("backward of F.cross_entropy on fp32 logits (eager)", (
        Term("nll_grad_fp32", 4 * n, "nll_loss's fp32 gradient of the log-probabilities",
             _TORCH_CE, label="nll_loss grad"),
        Term("log_softmax_grad_fp32", 4 * n, "log_softmax's fp32 gradient of its input",
             _TORCH_CE, label="log_softmax grad"),
    ))


_LOSS_PARALLEL = Source("pytorch-loss-parallel", "torch/distributed/tensor/parallel/loss.py, "
                        "_log_softmax (x.to(fp32), shifted = x - x_max, exp(shifted), "
                        "result = shifted - logsumexp) and _nll_loss_and_log_softmax_backward "
                        "((zeros_like(x) + exp(x)) * grad_output)")


@_logit_doc
def loss_parallel_transient(tokens=None, vocab=None, tp=None) -> Total:
    r"""What torch's ``loss_parallel`` cross-entropy adds at its forward peak (torchtitan, t > 1).

    .. math::

        \underbrace{2\tau V/t}_{\text{bf16 pred}} + \underbrace{4\tau V/t}_{\text{fp32 copy}}
        + \underbrace{4\tau V/t}_{\text{shifted}}

    torchtitan keeps the output layer's logits vocab-sharded (``ColwiseParallel`` with ``Shard(-1)``
    outputs) and computes ``F.cross_entropy(pred.float(), labels)`` inside ``loss_parallel()``: the
    DTensor ``_log_softmax`` keeps the fp32 input, the shifted logits ``x - max`` and, while
    ``exp(shifted)`` is summed or the result written, one more fp32 buffer: the result (saved for
    backward) is the :math:`4\tau V/t` of :func:`memsym.terms.activations.output_activations`.  14
    bytes per local logit at the peak, measured on a gloo group of 2 (``tests/test_transients.py``).

    Parameters
    ----------
    {logit_params}

    Examples
    --------
    >>> loss_parallel_transient().evaluate(s=8192, b=16, c=1, V=128256, t=8) \
    ...     == 10 * 8192 * 16 * 128256 // 8
    True

    References
    ----------
    PyTorch ``torch/distributed/tensor/parallel/loss.py``; torchtitan
    ``parallelize_llama.py`` (``output_layouts=Shard(-1)`` with loss parallel) and
    ``utils.get_train_context`` (``loss_parallel()`` unless ``disable_loss_parallel``).
    """
    n = _logit_shape(tokens, vocab, tp)
    return Total("forward of torch's loss_parallel cross-entropy", (
        Term("logits_16bit", 2 * n, "16-bit vocab-sharded pred, alive until the loss returns",
             _LOSS_PARALLEL, label="bf16 logits"),
        Term("logits_fp32_copy", 4 * n, "the fp32 copy _log_softmax reads", _LOSS_PARALLEL,
             label="fp32 logits copy"),
        Term("shifted_fp32", 4 * n, "shifted logits x - max (fp32), alive beside exp(shifted) "
             "or the result", _LOSS_PARALLEL, label="shifted logits"),
    ))


@_logit_doc
def loss_parallel_backward(tokens=None, vocab=None, tp=None) -> Total:
    r"""What the backward of torch's ``loss_parallel`` cross-entropy adds [bytes].

    .. math:: 3 \times 4\tau V/t

    Beyond its saved fp32 log-softmax, ``_nll_loss_and_log_softmax_backward`` computes
    ``(zeros_like(x) + exp(x)) * grad_output``: the zero-filled gradient, ``exp(x)`` and their sum
    (then the product in place of ``exp(x)``) are fp32 buffers of the local logits, 16 bytes per
    logit with the saved result, measured on a gloo group of 2 (``tests/test_transients.py``).

    Parameters
    ----------
    {logit_params}

    Examples
    --------
    >>> loss_parallel_backward().evaluate(s=8192, b=16, c=1, V=128256, t=8) \
    ...     == 12 * 8192 * 16 * 128256 // 8
    True

    References
    ----------
    .. [pytorch-loss-parallel] ``loss.py``, ``_nll_loss_and_log_softmax_backward``.
    """
    n = _logit_shape(tokens, vocab, tp)
    return Total("backward of torch's loss_parallel cross-entropy", (
        Term("nll_grad_fp32", 4 * n, "zeros_like(x) with the target entries set (fp32)",
             _LOSS_PARALLEL, label="nll_loss grad"),
        Term("exp_fp32", 4 * n, "exp(x) of the saved log-softmax (fp32)", _LOSS_PARALLEL,
             label="exp(log-softmax)"),
        Term("log_softmax_grad_fp32", 4 * n, "their sum, then times grad_output (fp32)",
             _LOSS_PARALLEL, label="log_softmax grad"),
    ))


def fsdp2_transients(group_params=None, dp=None) -> Total:
    r"""FSDP2's unsharded parameters (current + prefetched groups) and reduce-scatter buffers.

    With :math:`N_{\mathrm{ll}}` the parameters of the largest ``fully_shard`` group (one
    transformer block), :math:`n_{\mathrm{ag}}` groups unsharded at once:

    .. math::

        n_{\mathrm{ag}} N_{\mathrm{ll}} b_u \;+\; N_{\mathrm{ll}}\,b_u
        \;+\; N_{\mathrm{ll}}\,b_r\,(1 + 1/d)

    (all-gathered params; the block's unsharded gradients in param_dtype; reduce-scatter input
    and output in reduce_dtype).  Dim-0 padding to a multiple of :math:`d` is neglected here;
    :func:`memsym.terms.framework_state.fsdp2_padded_numel` counts it exactly.

    Parameters
    ----------
    dp : int
        Data-parallel size [GPUs].

    Examples
    --------
    >>> fsdp2_transients().evaluate(N_ll=10**6, n_ag=2, b_u=2, b_r=4, d=4)
    11000000

    References
    ----------
    .. [pytorch-fsdp2] ``_fsdp_param_group.py``, ``_fsdp_collectives.py:foreach_reduce``.
    """
    n = N_ll if group_params is None else as_expr(group_params)
    dp = d if dp is None else as_expr(dp)
    return Total("FSDP2 transients (backward of one block)", (
        Term("unsharded_params", n_ag * n * b_u, "all-gathered parameters of the current and "
             "prefetched groups, in param_dtype", _FSDP_PG, label="all-gathered params"),
        Term("unsharded_grads", n * b_u, "the block's unsharded gradients before copy-in",
             _FSDP_RS, label="unsharded grads"),
        Term("reduce_scatter", n * b_r * (1 + 1 / dp), "reduce-scatter input (unsharded) and "
             "output (1/d), in reduce_dtype", _FSDP_RS, label="reduce-scatter buffers"),
    ))


_TT_FSDP = Source("torchtitan", "models/llama3/infra/parallelize.py, apply_fsdp (since 83e694105: "
                  "tok_embeddings and [norm, output] their own groups, the latter "
                  "reshard_after_forward=False; before: the root fully_shard(model) holds them); "
                  "torch _fsdp_state.py _lazy_init (the root is never resharded after forward)")


def fsdp2_io_groups(root_group: bool = False, untied: bool = True, group_params=None) -> dict:
    r"""torchtitan's FSDP2 embedding / output groups beyond the blocks' (:func:`fsdp2_transients`).

    With :math:`P_{\mathrm{out}} = Vh/t + h` (output projection and final norm) and
    :math:`P_{\mathrm{io}} = P_{\mathrm{out}} + [\text{untied}]\,Vh/t` (with the embedding),
    in ``param_dtype`` (:math:`b_u`); at the loss and its backward no block is gathered since
    83e694105 and one (the last, not resharded) before, not :math:`n_{\mathrm{ag}}`:

    .. math::

        \text{since 83e694105:}\quad T_{\mathrm{fwd}} = T_{\mathrm{loss}} = P_{\mathrm{out}} b_u
        - n_{\mathrm{ag}} N_{\mathrm{ll}} b_u,\qquad T_{\mathrm{bwd}} = 0

        \text{root group (before):}\quad T_{\mathrm{fwd}} = T_{\mathrm{loss}} =
        P_{\mathrm{io}} b_u - (n_{\mathrm{ag}} - 1) N_{\mathrm{ll}} b_u,\qquad
        T_{\mathrm{bwd}} = P_{\mathrm{io}} b_u + (Vh/t) b_u

    Since 83e694105 ``[norm, output]`` is kept gathered after forward (FSDP2 would prefetch it at
    once for backward), every block is resharded (the last re-gathered by that group's pre-backward
    prefetch, after the loss's backward); the embedding is resharded after its forward.  Before, the
    root ``fully_shard(model)`` held the embedding, norm and output, unsharded from the forward's
    start to the root's post-backward at the end of the backward, with the output projection's
    unsharded gradient (made in the output layer's backward) waiting for it; the last block was not
    resharded after forward.

    Parameters
    ----------
    root_group : bool
        torchtitan's grouping before 83e694105 (the root holds embedding, norm and output).
    untied : bool
        Whether the output projection is its own matrix (not the embedding's).
    group_params : sympy.Expr, optional
        Parameters of one block on one GPU [parameters]; default ``N_ll``.

    Returns
    -------
    dict
        Phase name (``forward``, ``loss-backward``, ``backward``) -> tuple of Terms.

    Examples
    --------
    Llama-3 8B (h = 4096, V = 128256, t = 1), one block of 218112000 parameters:

    >>> ph = fsdp2_io_groups()
    >>> sum(t_.evaluate(V=128256, h=4096, t=1, b_u=2, n_ag=2, N_ll=218112000)
    ...     for t_ in ph["forward"]) == 2 * (128256 * 4096 + 4096) - 2 * 2 * 218112000
    True

    References
    ----------
    torchtitan ``apply_fsdp`` at 9dec370 and at 73a0e6979d (v0.2.2); PyTorch
    ``_fsdp_state.py`` (``_lazy_init``: ``post_forward_mesh_info = None`` for the root).
    """
    n = N_ll if group_params is None else as_expr(group_params)
    out_params = V * h / t + h
    io = out_params + (V * h / t if untied else 0)
    if not root_group:
        # every block resharded after forward; the output group's pre-backward prefetches the
        # last one only after the loss's backward
        none = Term("blocks_gathered_at_the_loss", -n_ag * n * b_u, "no block gathered at the "
                    "loss and its backward (all resharded after forward)", _TT_FSDP,
                    label="no block at the loss")
        kept = Term("output_group_gathered", out_params * b_u, "[norm, output] kept gathered "
                    "after forward (reshard_after_forward=False)", _TT_FSDP,
                    label="output group gathered")
        return {"forward": (kept, none), "loss-backward": (kept, none), "backward": ()}
    one_block = Term("blocks_gathered_at_the_loss", -(n_ag - 1) * n * b_u, "one block gathered "
                     "at the loss and its backward, not n_ag: the last one, not resharded "
                     "after forward", _TT_FSDP, label="one block at the loss")
    root = Term("root_group_gathered", io * b_u, "the root group (embedding, final norm, "
                "output) gathered from the forward's start to the backward's end", _TT_FSDP,
                label="root group gathered")
    grad = Term("output_grad_unsharded", V * h / t * b_u, "the output projection's unsharded "
                "gradient, until the root's reduce-scatter at the backward's end", _TT_FSDP,
                label="output grad unsharded")
    return {"forward": (root, one_block), "loss-backward": (root, one_block),
            "backward": (root, grad)}


def fsdp2_reshards_after_forward(setting="default", *, is_root=False, pp_enabled=False,
                                 torchtitan=True) -> bool:
    """Whether FSDP2 frees a group's unsharded parameters after its forward.

    FSDP2 (``fully_shard(reshard_after_forward=None)``, the default): True except for the root
    module, whose parameters would be re-gathered at once (``FSDPState._lazy_init``).
    torchtitan's ``fsdp_reshard_after_forward``: ``"always"`` True, ``"never"`` False,
    ``"default"`` ``not pp_enabled`` (with pipeline parallelism no block reshards: per-microbatch
    all-gathers would not overlap).

    Examples
    --------
    >>> fsdp2_reshards_after_forward(pp_enabled=True), fsdp2_reshards_after_forward()
    (False, True)
    >>> fsdp2_reshards_after_forward(None, is_root=True, torchtitan=False)
    False

    References
    ----------
    PyTorch ``_fully_shard.py`` and ``_fsdp_state.py:_lazy_init``; torchtitan
    ``torchtitan/distributed/fsdp.py:get_fsdp_reshard_after_forward_policy`` (b5bcd76c66).
    """
    if torchtitan:
        if setting not in ("always", "never", "default"):
            raise InvalidValueError(f"torchtitan's fsdp_reshard_after_forward is always, never or "
                                    f"default, not {setting!r}")
        return {"always": True, "never": False}.get(setting, not pp_enabled)
    if setting is None or setting == "default":
        return not is_root
    if isinstance(setting, bool):
        return setting
    raise InvalidValueError(f"reshard_after_forward is None, True or False here, not {setting!r}")


def fsdp2_kept_unsharded(stage_params=None) -> Term:
    r"""Unsharded parameters kept from forward to backward when FSDP2 does not reshard.

    .. math:: \Psi_{\mathrm{stage}}\, b_u

    on top of the sharded copy of :func:`memsym.terms.model_state.model_state` (the all-gather
    output is its own full-size buffer in ``param_dtype``): every block of the stage stays
    gathered (torchtitan with PP, ``reshard_after_forward=False``, or the root).

    Examples
    --------
    >>> fsdp2_kept_unsharded(8 * 10**9).evaluate(b_u=2)
    16000000000

    References
    ----------
    .. [pytorch-fsdp2] ``_fsdp_param_group.py``, ``FSDPParamGroup`` (all-gather output buffer).
    """
    n = N / (p * t) if stage_params is None else as_expr(stage_params)
    return Term("kept_unsharded", n * b_u, "unsharded parameters kept between "
                "forward and backward (no reshard after forward)", _FSDP_PG,
                label="params kept gathered")


def fsdp2_pipeline_unsharded(stage_params=None) -> Total:
    r"""What an FSDP2 pipeline stage keeps unsharded through the pipelined step [bytes].

    With :math:`\Psi_{\mathrm{stage}}` the stage's parameters on one GPU:

    .. math::

        \underbrace{\Psi_{\mathrm{stage}}\, b_u}_{\text{parameters kept gathered}}
        \;+\; \underbrace{\Psi_{\mathrm{stage}}\, b_r}_{\text{accumulated gradients}}

    ``torch.distributed.pipelining`` runs each micro-batch's backward of an FSDP2 stage with
    ``set_reshard_after_backward(False)`` and ``set_requires_gradient_sync(False)`` and
    reduce-scatters once after the last: the all-gathered parameters stay (torchtitan also
    skips the reshard after forward under PP) and each parameter's unsharded gradient is
    accumulated, in ``reduce_dtype`` when it differs from ``param_dtype``
    (``FSDPParam.to_accumulated_grad_if_needed``: the fp32 copy of a bf16 gradient).  Both are
    on top of the sharded states of :func:`memsym.terms.model_state.model_state`.

    Examples
    --------
    A 405B stage of 16 layers at t = 8 (6.3e9 parameters per GPU) keeps 6 bytes each:

    >>> fsdp2_pipeline_unsharded(10**9).evaluate(b_u=2, b_r=4)
    6000000000

    References
    ----------
    PyTorch ``torch/distributed/pipelining/stage.py`` (``backward_maybe_with_nosync``),
    ``_fsdp_param.py`` (``to_accumulated_grad_if_needed``, ``accumulate_unsharded_grad_if_needed``);
    torchtitan ``distributed/fsdp.py`` (no reshard after forward with PP).
    """
    kept = fsdp2_kept_unsharded(stage_params)
    n = kept.expr / b_u
    return Total("FSDP2 under pipeline parallelism: unsharded stage", (
        kept,
        Term("accumulated_grads", n * b_r, "unsharded gradients accumulated over the "
             "micro-batches (reduce_dtype) until the last backward reduce-scatters them",
             Source("pytorch-pipelining", "stage.py, backward_maybe_with_nosync; _fsdp_param.py "
                    "to_accumulated_grad_if_needed"), label="accumulated grads"),
    ))


def zero3_transients(largest_layer=None, persistent_params=None) -> Total:
    r"""DeepSpeed ZeRO-3: the gathered largest layer and the prefetch bucket.

    .. math:: 4 N_{\mathrm{ll}} + b_u N_{\mathrm{pf}}

    (16-bit parameters and gradients of the largest layer, DeepSpeed's estimator; the
    ``stage3_prefetch_bucket_size`` elements fetched ahead).  Parameters below
    ``stage3_param_persistence_threshold`` (1e5 elements: norms, biases) stay gathered on every
    rank: pass their count as ``persistent_params`` for a ``persistent`` term
    :math:`b_u N_{\mathrm{persist}}(1 - 1/d)` beyond their shard.  A parameter reused within
    ``stage3_max_reuse_distance`` (1e9) is not released, and ``stage3_max_live_parameters``
    (1e9) caps what is gathered: neither is modelled.

    Examples
    --------
    >>> zero3_transients().evaluate(N_ll=10**8, N_pf=5 * 10**7, b_u=2)
    500000000

    References
    ----------
    DeepSpeed ``runtime/zero/stage3.py``, ``partitioned_param_coordinator.py``.
    """
    n = N_ll if largest_layer is None else as_expr(largest_layer)
    terms = [
        Term("gathered_layer", 4 * n, "16-bit parameters and gradients of the largest layer",
             _DS_EST, label="gathered layer"),
        Term("prefetch", b_u * N_pf, "parameters prefetched ahead (stage3_prefetch_bucket_size)",
             _DS_EST, label="prefetch bucket"),
    ]
    if persistent_params is not None:
        terms.append(Term("persistent", b_u * as_expr(persistent_params) * (1 - 1 / d),
                          "parameters under stage3_param_persistence_threshold, kept whole",
                          Source("deepspeed-zero", "runtime/zero/config.py "
                                 "(stage3_param_persistence_threshold 1e5); "
                                 "partitioned_param_coordinator.py"), label="persistent params"))
    return Total("ZeRO-3 transients", tuple(terms))


def deepspeed_ipg_buckets() -> Total:
    r"""DeepSpeed ZeRO-1/2 independent-partition gradient buckets.

    .. math:: n_{\mathrm{bkt}}\, N_{\mathrm{bkt}}\, b_{hp}

    ``reduce_bucket_size`` elements in the optimizer's 16-bit dtype, two buffers with
    ``overlap_comm``: 1 GB (2 GB) at the defaults with bf16.

    Examples
    --------
    >>> deepspeed_ipg_buckets().evaluate(n_bkt=2, N_bkt=5 * 10**8, b_hp=2)
    2000000000

    References
    ----------
    DeepSpeed ``runtime/zero/stage_1_and_2.py``.
    """
    return Total("DeepSpeed IPG buckets", (
        Term("ipg_buckets", n_bkt * N_bkt * b_hp, "contiguous gradient buckets "
             "(reduce_bucket_size, x2 with overlap_comm)", _DS_IPG, label="IPG buckets"),
    ))


def megatron_buckets(dp=None) -> sp.Expr:
    r"""Megatron-core's bucket size [parameters]: views into the buffers, no extra memory.

    .. math:: \max(4\cdot10^7,\; 10^6\, d)

    Gradient buckets are slices of ``grad_data`` and the distributed optimizer all-gathers
    parameters in place into ``param_data``, so the buckets add no memory beyond the model
    states; they size NCCL's messages.  Buckets exist only with ``overlap_grad_reduce`` and on
    pipeline rank 0.

    Parameters
    ----------
    dp : int
        Data-parallel size [GPUs].

    Examples
    --------
    >>> megatron_buckets(64)
    64000000
    >>> megatron_buckets(8)
    40000000

    References
    ----------
    Megatron-LM ``megatron/core/distributed/distributed_data_parallel.py`` at d98e8a64dd.
    """
    dp = d if dp is None else as_expr(dp)
    return sp.Max(40 * 10**6, 10**6 * dp)


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


def cuda_context() -> Term:
    r"""The CUDA context and loaded kernels: :math:`M_{\mathrm{ctx}}` (default 500 MiB).

    Outside PyTorch's caching allocator (``torch.cuda.max_memory_allocated`` does not see
    it, ``nvidia-smi`` does).  CUDA's lazy loading keeps it to the kernels used; the default
    is an allowance, set ``M_ctx`` from a measurement of your stack.

    Examples
    --------
    >>> cuda_context().evaluate(DEFAULTS) / 2**20
    500

    References
    ----------
    .. [cuda-lazy-loading] §4.7 Lazy Loading (modules loaded on first use).
    """
    return Term("cuda_context", M_ctx, "CUDA context and loaded kernel modules", _CTX,
                label="CUDA context")


def nccl_buffers() -> Term:
    r"""NCCL's communicator buffers: one SIMPLE-protocol buffer per channel and ring peer.

    .. math:: n_{\mathrm{comm}}\, n_{\mathrm{ch}}\, S_{\mathrm{nccl}}

    ``NCCL_BUFFSIZE`` (4 MiB) per channel and peer; with :math:`n_{\mathrm{ch}} = 32` (NCCL's
    channel maximum) each communicator holds 128 MiB.  The LL/LL128 buffers and tree peers
    add to it; lower ``NCCL_BUFFSIZE`` or ``NCCL_MAX_NCHANNELS`` to cut it.

    Examples
    --------
    >>> nccl_buffers().evaluate({**DEFAULTS, n_comm: 3}) / 2**20
    384

    References
    ----------
    .. [nccl-env] ``NCCL_BUFFSIZE`` (default 4 MiB), ``NCCL_MAX_NCHANNELS``.
    """
    return Term("nccl_buffers", n_comm * n_ch * S_nccl, "NCCL buffers (NCCL_BUFFSIZE per channel "
                "and peer)", _NCCL, label="NCCL buffers")


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
