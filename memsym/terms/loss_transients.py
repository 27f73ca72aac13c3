"""Loss transients: what the cross-entropy adds at its forward and backward peaks.

Megatron's vocab-parallel cross-entropy, PyTorch's eager ``F.cross_entropy`` on an fp32 copy
of the logits (torchtitan), transformers' ``ForCausalLMLoss`` (its model code, run by DeepSpeed
and the Hugging Face Trainer) and torch's ``loss_parallel``: each a cited
:class:`~memsym.term.Term` beyond the saved softmax of
:func:`memsym.terms.activations.output_activations`.  Re-exported by
:mod:`memsym.terms.transients`.
"""

from __future__ import annotations

import sympy as sp

from ..errors import choose
from ..symbols import V, b, c, s, t
from ..term import Source, Term, Total
from ..text import shared_doc
from ..values import as_expr

__all__ = ["cross_entropy_transient", "torch_cross_entropy_transient",
           "hf_cross_entropy_transient", "torch_cross_entropy_backward", "loss_parallel_transient", "loss_parallel_backward"]

_CE = Source("megatron-core", "core/tensor_parallel/cross_entropy.py, "
             "_VocabParallelCrossEntropy.forward and VocabParallelCrossEntropy.calculate_*")


#: The three size parameters of the loss Terms (here and in :mod:`memsym.terms.recipe_buffers`),
#: described once.
logit_doc = shared_doc(logit_params="""
    tokens : sympy.Expr, optional
        Tokens on one GPU [tokens]; default :math:`s b / c`.
    vocab : sympy.Expr, optional
        Padded vocabulary [tokens]; default ``V``.
    tp : sympy.Expr, optional
        Tensor-parallel size the vocabulary is split over [GPUs]; default ``t``.
    """)


@logit_doc
def logit_sizes(tokens=None, vocab=None, tp=None) -> tuple:
    """(tokens on one GPU, padded vocabulary, TP size) of the loss Terms.

    Parameters
    ----------
    {logit_params}

    Examples
    --------
    >>> logit_sizes(), logit_sizes(4096, tp=8)
    ((b*s/c, V, t), (4096, V, 8))
    """
    return (s * b / c if tokens is None else as_expr(tokens), V if vocab is None else as_expr(vocab),
            t if tp is None else as_expr(tp))


def _logit_shape(tokens, vocab, tp):
    tau, vocab, tp = logit_sizes(tokens, vocab, tp)
    return tau * vocab / tp


@logit_doc
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
    tau, vocab, tp = logit_sizes(tokens, vocab, tp)
    return Total("cross-entropy transient (last stage, forward peak)", (
        Term("logits_16bit", 2 * tau * vocab / tp, "16-bit logits of the output layer, alive while "
             "the fp32 copy is made (and their gradient in backward)", _CE, label="bf16 logits"),
        Term("ce_per_token", 29 * tau, "fp32 logits_max and predicted logits (gather + clone); "
             "int64 masked target and arange; bool target mask", _CE, label="per-token CE buffers"),
    ))


@logit_doc
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
    tau, vocab, tp = logit_sizes(tokens, vocab, tp)
    src = Source("torchtitan", "torchtitan/components/loss.py, cross_entropy_loss "
                 "(F.cross_entropy(pred.flatten(0, 1).float(), labels))")
    return Total("cross-entropy transient of F.cross_entropy on fp32 logits (torchtitan)", (
        Term("logits_16bit", 2 * tau * vocab / tp, "16-bit pred, alive until the loss returns",
             src, label="bf16 logits"),
        Term("logits_fp32_copy", 4 * tau * vocab / tp, "the .float() copy log_softmax reads",
             src, label="fp32 logits copy"),
    ))


_HF_CE = Source("hf-transformers-loss", "loss/loss_utils.py:52-74, ForCausalLMLoss (logits.float() "
                "at :62; labels padded and shifted at :66-67 unless shift_labels is given; "
                "fixed_cross_entropy's F.cross_entropy at :43); models/llama/modeling_llama.py:"
                "471-483 (lm_head's logits, returned beside the loss); integrations/deepspeed.py:"
                "723-777 (deepspeed_sp_compute_loss: Ulysses passes shift_labels, :740-747)")

#: Bytes of an element of the logits by their dtype.
_LOGIT_WIDTHS = {"fp32": 4, "bf16": 2, "fp16": 2}


@logit_doc
def hf_cross_entropy_transient(tokens=None, vocab=None, tp=None, dtype: str = "bf16",
                               shifted=True) -> Total:
    r"""What transformers' ``ForCausalLMLoss`` adds at its forward peak [bytes].

    Beyond its saved log-softmax, with :math:`\tau = s b / c` tokens on one GPU, :math:`w` bytes a logit in the model's
    compute dtype:

    .. math::

        \underbrace{w\tau V/t}_{\text{logits}} + \underbrace{4\tau V/t}_{\text{fp32 copy},
        \;w = 2} + \underbrace{8 b (s + 1) + 8 s b}_{\text{int64 labels}, \;c = 1}

    ``LlamaForCausalLM.forward`` (and every causal LM of transformers 5 through
    ``self.loss_function``) passes the output layer's logits to ``ForCausalLMLoss``, which
    casts them to fp32 (``logits.float()``: a copy of 16-bit logits, the tensor itself when
    they are fp32), pads the labels with one ``ignore_index`` column and copies the shifted
    view (``labels[..., 1:].contiguous()``, int64), then calls ``F.cross_entropy``: while
    ``log_softmax`` writes its fp32 output (saved for the backward: the :math:`4\tau V/t` of
    :func:`memsym.terms.activations.output_activations`) the logits (returned with the loss,
    alive until the Trainer's ``compute_loss`` returns), the fp32 copy and both label tensors
    are alive: 10 bytes a logit over 16-bit weights, 8 over fp32 ones (no copy).  The copy
    dies with the loss function; the backward is
    :func:`torch_cross_entropy_backward`'s.  Under DeepSpeed Ulysses (:math:`c > 1`) the
    Trainer passes the data loader's ``shift_labels`` (``deepspeed_sp_compute_loss``): no
    label copy.  Measured on the CPU in ``tests/test_hf_loss.py`` (fp32 and bf16 weights).

    Parameters
    ----------
    {logit_params}
    dtype : {"bf16", "fp16", "fp32"}
        The logits' dtype: the model's compute dtype (autocast's under autocast) [1].
    shifted : bool or None
        Whether the loss pads and shifts the labels itself (no ``shift_labels`` given: the
        Trainer without Ulysses); None: where :math:`c = 1` (a search template) [1].

    Returns
    -------
    Total
        ``logits_16bit`` (``logits_fp32`` in fp32), ``logits_fp32_copy`` (16-bit logits only)
        and ``labels_int64`` [bytes].

    Examples
    --------
    >>> hf = hf_cross_entropy_transient(dtype="fp32")
    >>> hf.keys, hf.evaluate(s=128, b=2, c=1, V=32000, t=1) == (4 * 256 * 32000
    ...                                                          + 8 * 2 * 129 + 8 * 256)
    (('logits_fp32', 'labels_int64'), True)
    >>> hf_cross_entropy_transient(shifted=False).evaluate(s=128, b=2, c=2, V=32000, t=1)
    24576000

    References
    ----------
    .. [hf-transformers-loss] transformers 5.25.0 ``loss/loss_utils.py`` (``ForCausalLMLoss``,
       ``fixed_cross_entropy``), ``models/llama/modeling_llama.py`` (``LlamaForCausalLM``),
       ``integrations/deepspeed.py`` (``deepspeed_sp_compute_loss``).
    """
    dtype = choose("logits dtype", dtype, tuple(_LOGIT_WIDTHS))
    n = _logit_shape(tokens, vocab, tp)
    tau = logit_sizes(tokens, vocab, tp)[0]
    labels = 8 * (tau + b) + 8 * tau
    if shifted is None:
        labels = sp.Piecewise((labels, sp.Eq(c, 1)), (0, True))
    fp32 = dtype == "fp32"
    terms = [Term("logits_fp32" if fp32 else "logits_16bit", _LOGIT_WIDTHS[dtype] * n,
                  f"{dtype} logits of the output layer, returned beside the loss",
                  _HF_CE, label=f"{dtype} logits")]
    if not fp32:
        terms.append(Term("logits_fp32_copy", 4 * n, "the .float() copy log_softmax reads",
                          _HF_CE, label="fp32 logits copy"))
    if shifted is not False:
        terms.append(Term("labels_int64", labels, "the labels padded with one ignore_index "
                          "column and their shifted contiguous copy (int64)", _HF_CE,
                          label="int64 labels"))
    return Total("cross-entropy transient of transformers' ForCausalLMLoss", tuple(terms))


_TORCH_CE = Source("pytorch-autograd", "aten NLLLossBackward0 (nll_loss_backward: a zero-filled "
                   "fp32 grad_input) and LogSoftmaxBackward0 (_log_softmax_backward_data: a new "
                   "fp32 grad_input while its saved output and incoming grad are alive)")


@logit_doc
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


@logit_doc
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


@logit_doc
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
