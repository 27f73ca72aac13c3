r"""TRL's chunked cross-entropy (``loss_type="chunked_nll"``, ``SFTConfig``'s default).

TRL patches the causal LM's forward (huggingface/trl f2cd57710a, trl/trainer/sft_trainer.py
``_patch_chunked_ce_lm_head``, lines 237-378, applied at :1298-1319): with labels it runs only
the backbone (``self.base_model``, :304-311) to ``last_hidden_state`` and hands it, with
``lm_head.weight``, to ``_chunked_cross_entropy_loss`` (:117-234).  The model's ``lm_head`` is
never called: **no full logits, no saved 16-bit input of the output layer, no cast of its
weight in autocast's cache**.  Instead, over the :math:`n = b(s - 1)` shifted positions
(``hidden_states[..., :-1, :]``, :181-183):

* ``hidden[order]`` (:202-204) packs the valid rows to the front: a new
  :math:`n \times h` tensor in the hidden states' dtype (fp32 under autocast over fp32
  weights: the residual stream), kept because every chunk's checkpoint holds a slice of it,
  and the int64 ``order`` (kept by the index's backward) and packed labels
  (:func:`chunked_loss_activations`);
* each chunk of :math:`k = \min(256, n)` rows (``_CHUNKED_LM_HEAD_CHUNK_SIZE``, :86) runs
  ``_chunk`` (:99-114) under ``torch.utils.checkpoint(..., use_reentrant=False)`` (:214-223):
  its ``[k, V]`` logits, log-probabilities and entropy temporaries live only inside that
  chunk's forward (:func:`chunked_loss_forward`) and again in its backward, which recomputes
  them (:func:`chunked_loss_backward`).

The loop runs :math:`\lceil n / k \rceil` chunks over the valid rows only (``n_padded``,
:207, 211); memsym counts every position valid (no ``-100`` labels), which bounds a batch with
padding or prompt masking from above.

With PEFT (``--use_peft``) TRL patches ``get_base_model()`` (:1306-1319): the adapters live in
the module tree, ``lm_head`` is no tuner layer (TRL refuses one) and stays frozen, so the chunks
make no weight gradient (:func:`chunked_loss_backward`'s ``frozen_head``); the forward is the
same.  The Trainer runs the forward under Accelerate's autocast (TRL's default ``bf16``) over
bf16 weights too: their chunk's fp32 copies are cast back to 16 bits for the matmul.  ``lm_head`` in ``modules_to_save`` would train a copy of it: memsym refuses every
``lora_modules_to_save`` (memsym.readers.trl_sft).

Under DeepSpeed (``--deepspeed ds.json``) the engine holds the model in the config's 16-bit
dtype and runs no torch.autocast: ``h.float() @ w.float().t()`` is an fp32 matmul over fp32
copies, fp32 logits (``no_autocast``).  ``_chunk`` runs the matmul inside
``maybe_gather_lm_head_ctx(w, b)`` (trl/trainer/utils.py:188-220): a null context except under
ZeRO-3, where it is ``deepspeed.zero.GatheredParameters`` of the partitioned weight
(``gathered``): the whole 16-bit :math:`V \times h` weight allocated by the all-gather on entry
(deepspeedai/DeepSpeed edaa722126 deepspeed/runtime/zero/partition_parameters.py:2435-2453,
1695-1735, 2102-2112: ``torch.empty(partition_size * world_size)``) and freed on exit
(:2493-2515, 1737-1776, 308-324: ``free_param``, ``param.data = torch.empty(0)``), in the
forward and again in the checkpoint's recomputation; its gradient reaches the parameter
through ``w.float()``'s backward after the context has closed (the fp32 copy, not the gathered
storage, is what the matmul saves).

Measured with torch's MemTracker on transformers' ``LlamaForCausalLM`` running TRL's own
functions (``tests/trl_chunked_vendored.py``, verbatim from f2cd57710a sft_trainer.py:86-378;
``tests/test_chunked_loss.py``), bf16 weights and fp32 weights, both under bf16 autocast, with
gradient checkpointing and without; and where gradients are summed (the backward from three
chunks, PEFT's LoRA) from the CPU allocator's own record (torch.profiler), since MemTracker's
dispatch mode makes autograd sum them out of place.
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError, choose
from ..symbols import V, b, h, s
from ..term import Source, Term, Total

__all__ = ["CHUNK", "RUNS", "chunk_sizes", "chunked_loss_activations", "chunked_loss_forward",
           "chunked_loss_backward"]

#: Rows of one chunk (huggingface/trl f2cd57710a trl/trainer/sft_trainer.py:86,
#: ``_CHUNKED_LM_HEAD_CHUNK_SIZE``).
CHUNK = 256
#: How a chunk's matmul runs: over 16-bit weights under the Trainer's torch.autocast of their
#: dtype, over fp32 weights under it, or over 16-bit weights without autocast (DeepSpeed's
#: engine, which runs none).
RUNS = ("autocast", "fp32_autocast", "no_autocast")

_TRL = Source("huggingface-trl", "f2cd57710a trl/trainer/sft_trainer.py:99-234 (_chunk, "
              "_chunked_cross_entropy_loss) and 237-378 (_patch_chunked_ce_lm_head)")
_DS = Source("deepspeed-zero", "edaa722126 deepspeed/runtime/zero/partition_parameters.py:"
             "2435-2515 (GatheredParameters), 2102-2112, 308-324; huggingface/trl f2cd57710a "
             "trl/trainer/utils.py:188-220 (maybe_gather_lm_head_ctx)")
_AMP = Source("pytorch-autocast", "aten/src/ATen/autocast_mode.h, CUDA's fp32 ops "
              "(AT_FORALL_FP32: exp, nll_loss; AT_FORALL_FP32_SET_OPT_DTYPE: log_softmax) and "
              "16-bit ones (matmul); cached_cast caches fp32 leaves only (not w.t())")


def chunk_sizes() -> tuple:
    r"""The shifted positions of one micro-batch and the rows of one chunk [tokens].

    .. math:: n = b\,(s - 1), \qquad k = \min(256, n)

    TRL drops each sequence's last position (``hidden_states[..., :-1, :]``) and runs chunks
    of ``_CHUNKED_LM_HEAD_CHUNK_SIZE`` rows (c = 1: the Trainer's plain DDP).

    Examples
    --------
    >>> chunk_sizes()
    (b*(s - 1), Min(256, b*(s - 1)))

    References
    ----------
    .. [huggingface-trl] huggingface/trl f2cd57710a ``trl/trainer/sft_trainer.py:86``
       (``_CHUNKED_LM_HEAD_CHUNK_SIZE = 256``), :181-183 (the shift), :211-213 (the chunks).
    """
    n = b * (s - 1)
    return n, sp.Min(CHUNK, n)


def chunked_loss_activations(width: int = 2) -> Total:
    r"""What the chunked loss keeps from the forward to its backward [bytes].

    .. math:: w_r\,n\,h + 16\,n \quad [\text{bytes}]

    The packed hidden states ``hidden[order]`` (:math:`w_r` bytes an element: the hidden
    states' dtype, 4 under autocast over fp32 weights) and the int64 ``order`` and packed
    labels (8 bytes a position each), with :math:`n = b(s - 1)` (c = 1).  In place of the
    output layer's saved input and the loss's logits.

    Parameters
    ----------
    width : int
        Bytes of an element of the hidden states (2 for 16-bit weights, 4 under autocast
        over fp32 weights) [bytes].

    Examples
    --------
    >>> chunked_loss_activations(4).evaluate(s=1024, b=2, h=4096) == 4 * 2046 * 4096 + 16 * 2046
    True

    References
    ----------
    .. [huggingface-trl] huggingface/trl f2cd57710a ``trl/trainer/sft_trainer.py:181-204``
       (the shift, ``valid``, ``order``, ``hidden[order]``, ``labels[order]``).
    """
    n, _ = chunk_sizes()
    return Total("activations of the chunked loss", (
        Term("packed_hidden", width * n * h, "the shifted hidden states packed valid-first "
             "(hidden[order]), sliced by every chunk's checkpoint", _TRL,
             label="packed hidden states"),
        Term("packed_indices", 16 * n, "int64 order (kept by the index's backward) and "
             "packed labels", _TRL, label="packed order and labels"),
    ))


def chunked_loss_forward(run: str = "autocast", width: int = 2, gathered: bool = False) -> Term:
    r"""The peak of the chunked loss in the model's forward, beyond what it keeps [bytes].

    The backbone's output ``last_hidden_state`` (:math:`w_r\tau h`, :math:`\tau = sb`) is alive
    until the patched forward returns; on it, the larger of the packing (the reshaped copy
    of the shifted rows, :math:`w_r n h`, beside its packed copy; a view at b = 1, counted all
    the same) and one chunk's forward.  The Trainer runs the forward under Accelerate's
    torch.autocast (``--bf16``, TRL's default; over bf16 weights too: Accelerate 1.16
    ``accelerator.py:1791-1801``): the matmul runs in 16
    bits on 16-bit casts (not cached: ``w.float().t()`` is no leaf), ``log_softmax`` and
    ``exp`` in fp32 on CUDA.  Over 16-bit weights ``h.float() @ w.float().t()`` first makes
    fp32 copies of the chunk and the weight (:math:`4kh + 4Vh`), alive through the matmul
    beside their casts and the 16-bit logits; over fp32 weights under autocast they are no
    copies:

    .. math::

        w_r\tau h + \max(w_r n h,\; 6kh + 6Vh + 2kV,\; 14kV + k)
        \qquad
        w_r\tau h + \max(w_r n h,\; 2kh + 2Vh + 2kV,\; 14kV + k)

    The last term of each: the logits, ``log_p``, ``log_p.exp()`` and the entropy's product
    alive at once (2 + 4 + 4 + 4 bytes a logit) with the chunk's bool ``valid`` (a byte a
    row).  16-bit weights without autocast (DeepSpeed's engine, ``"no_autocast"``): the fp32
    copies and fp32 logits, and under ZeRO-3 (``gathered``, :math:`g = 1`) the gathered 16-bit
    weight beside them through the matmul (freed on the context's exit, before ``log_softmax``):

    .. math:: w_r\tau h + \max(w_r n h,\; 4kh + 4Vh + 4kV + 2gVh,\; 16kV + k)

    The checkpoint keeps none of them: the exponential is freed before the per-row sum
    (in the backward's recomputation it is kept for the product's backward,
    :func:`chunked_loss_backward`).

    Parameters
    ----------
    run : {"autocast", "fp32_autocast", "no_autocast"}
        How the chunk's matmul runs (:data:`RUNS`): over 16-bit weights under the Trainer's
        torch.autocast of their dtype, over fp32 weights under it, or over 16-bit weights
        without autocast (DeepSpeed's engine).
    width : int
        Bytes of an element of the hidden states, :math:`w_r` (4 over fp32 weights) [bytes].
    gathered : bool
        ZeRO-3: the 16-bit weight gathered around the matmul (``"no_autocast"`` only).

    Raises
    ------
    InvalidValueError
        An unknown ``run``, or ``gathered`` with another than ``"no_autocast"``.

    Examples
    --------
    >>> chunked_loss_forward("no_autocast", gathered=True).evaluate(
    ...     s=1024, b=2, h=4096, V=151936) == 2 * 2048 * 4096 + (
    ...     4 * 256 * 4096 + 6 * 151936 * 4096 + 4 * 256 * 151936)
    True
    >>> chunked_loss_forward().evaluate(s=1024, b=2, h=4096, V=151936) == 2 * 2048 * 4096 + (
    ...     6 * 256 * 4096 + 6 * 151936 * 4096 + 2 * 256 * 151936)
    True

    References
    ----------
    .. [huggingface-trl] huggingface/trl f2cd57710a ``trl/trainer/sft_trainer.py:99-114``
       (``_chunk``), :181-204 (the packing), :304-311 (the backbone's output).
    .. [pytorch-autocast] torch 2.13.0 ``aten/src/ATen/autocast_mode.h`` (``AT_FORALL_FP32``:
       ``exp``; ``AT_FORALL_FP32_SET_OPT_DTYPE``: ``log_softmax``) and ``autocast_mode.cpp``
       (``cached_cast``: leaves only).
    .. [deepspeed] deepspeedai/DeepSpeed edaa722126
       ``deepspeed/runtime/zero/partition_parameters.py:2435-2515`` (``GatheredParameters``),
       :2102-2112 (the gathered flat tensor), :308-324 (``free_param``).
    """
    run = _variant(run, gathered)
    n, k = chunk_sizes()
    no_autocast = run == "no_autocast"
    copies = 0 if run == "fp32_autocast" else 4 * k * h + 4 * V * h   # h/w.float() of 16 bits
    chunk = (copies + 2 * k * h + 2 * V * h + 2 * k * V, 14 * k * V + k)
    if no_autocast:     # an fp32 matmul on the copies: fp32 logits, no 16-bit casts
        chunk = (copies + 4 * k * V + (2 * V * h if gathered else 0), 16 * k * V + k)
    return Term("chunk_forward", width * s * b * h + sp.Max(width * n * h, *chunk),
                "the backbone's output, and the packing or one chunk's logits, "
                "log-probabilities and entropy temporaries (and the matmul's 16-bit casts"
                + ("" if run == "fp32_autocast" else " and fp32 copies")
                + " of the chunk and weight)"
                if not no_autocast else "the backbone's output, and the packing or one chunk's "
                "fp32 copies and logits" + (" beside the gathered weight" if gathered else "")
                + " or its log-probabilities and entropy temporaries",
                _DS if gathered else _TRL if no_autocast else _AMP,
                label="chunked loss's forward")


def _variant(run: str, gathered: bool) -> str:
    """``run`` as :data:`RUNS` spells it, checked with ``gathered``."""
    run = choose("chunked loss run", run, RUNS)
    if gathered and run != "no_autocast":
        raise InvalidValueError("ZeRO-3's gathered lm_head is counted under DeepSpeed's engine "
                                "(16-bit weights, no autocast)")
    return run


def chunked_loss_backward(run: str = "autocast", frozen_head: bool = False,
                          gathered: bool = False) -> Term:
    r"""The peak of the chunked loss's backward over its start (the loss's gradient) [bytes].

    With :math:`A = w\,Vh + w\,nh` the gradients of the output weight and of the packed hidden
    states summed over the chunks already done (autograd's input buffers, in their dtypes:
    :math:`w` = 2 for 16-bit weights, 4 for fp32 ones), 16-bit weights under the Trainer's
    autocast (:func:`chunked_loss_forward`):

    .. math:: A + \max(6kh + 6Vh + 2kV,\; 14kV + 2Vh + 2kh + 5k)

    the recomputed matmul (fp32 copies, 16-bit casts, logits) or entropy (beside the casts
    saved for the matmul's backward; the casts' fp32 gradients stay below).  fp32 weights:

    .. math:: A + \max(14kV + 2Vh + 2kh + 5k,\; 2kV + 4Vh + 4kh,\; 8Vh + 4kh)

    the recomputed forward, the matmul's backward (its 16-bit casts, the 16-bit gradient of the
    logits and the 16-bit gradients), and the weight's fp32 gradient added to :math:`A` out of
    place (the cast's gradient reaches the buffer through ``t()``, a view) while the chunk's
    fp32 gradient is alive.  With ``lm_head`` frozen (PEFT: sft_trainer.py:1306-1319) there is
    no weight gradient, nor is the chunk's cast saved (the matmul keeps ``mat1`` for the
    weight's gradient only: its :math:`2kh` is absent, measured); 16-bit, :math:`A = w\,nh`:

    .. math:: A + \max(6kh + 6Vh + 2kV,\; 14kV + 2Vh + 5k)

    Without autocast (``"no_autocast"``: DeepSpeed; ZeRO-3's ``gathered``, :math:`g = 1`), trained
    and frozen (:func:`_no_autocast_peak`):

    .. math:: A + \max(16kV + 4Vh + 4kh + 5k,\; 4kV + 8Vh + 8kh) \qquad
              A + \max(16kV + 4Vh + 5k,\; 4kV + 4Vh + 4kh,\; g\,(6Vh + 4kh + 4kV))

    From three chunks (:math:`n > 512`) a middle chunk's gradient scattered into a new
    :math:`n \times h` tensor beside the summed one can peak instead
    (:func:`_middle_chunk_scatter`):

    .. math:: [n > 512]\,(w\,Vh + 2w\,nh + w\,kh) \qquad ([n > 512]\,(2w\,nh + w\,kh)
              \text{ frozen})

    (the last chunk frees the packed rows first; the index's and the shift's backward stay
    below).  The term is the larger.  With two chunks or more (:math:`n > 256`) the first
    chunk, of :math:`k` rows, runs last and sees :math:`A` whole; with one chunk
    (:math:`n \le 256`, :math:`s b \le 257`) there is no :math:`A` and the term bounds the
    peak from above.  Under autocast with exactly two chunks the weight's out-of-place sum
    comes after the packed rows are freed (lower by :math:`4nh + 8n`): an upper bound.
    Measured from the CPU allocator's record (torch.profiler), without a TorchDispatchMode:
    under one (torch's MemTracker) autograd sums gradients out of place
    (``at::isTensorSubclassLike``), a third :math:`n \times h` tensor that a CUDA run does not
    make (tests/test_chunked_loss.py).
    ``-100`` positions shorten the chunks' run, not one chunk.

    Parameters
    ----------
    run : {"autocast", "fp32_autocast", "no_autocast"}
        How the chunk's matmul runs, as :func:`chunked_loss_forward`'s.
    frozen_head : bool
        ``lm_head`` frozen (LoRA and QLoRA: not a target, TRL refuses it as one), 16-bit
        weights only.
    gathered : bool
        ZeRO-3's gathered weight (``"no_autocast"`` only).

    Raises
    ------
    InvalidValueError
        ``frozen_head`` over fp32 weights (not measured); as :func:`chunked_loss_forward`.

    Examples
    --------
    >>> chunked_loss_backward("fp32_autocast").evaluate(s=1024, b=2, h=4096, V=151936) == (
    ...     12 * 151936 * 4096 + 4 * 2046 * 4096 + 4 * 256 * 4096)
    True
    >>> chunked_loss_backward(frozen_head=True).evaluate(s=1024, b=2, h=4096, V=151936) == (
    ...     2 * 2046 * 4096 + 6 * 256 * 4096 + 6 * 151936 * 4096 + 2 * 256 * 151936)
    True

    References
    ----------
    .. [huggingface-trl] huggingface/trl f2cd57710a ``trl/trainer/sft_trainer.py:211-226``
       (the chunk loop, each chunk under ``checkpoint(..., use_reentrant=False)``) and
       :1306-1319 (PEFT: the base model patched, ``lm_head`` no tuner layer).
    .. [pytorch-autocast] torch 2.13.0 ``aten/src/ATen/autocast_mode.h`` (the ops' dtypes
       on CUDA, as in :func:`chunked_loss_forward`); ``torch/csrc/autograd/input_buffer.cpp``
       (``accumulate``: in place unless a dispatch mode or another reference).
    .. [deepspeed] deepspeedai/DeepSpeed edaa722126
       ``deepspeed/runtime/zero/partition_parameters.py:2435-2515`` (``GatheredParameters``).
    """
    run = _variant(run, gathered)
    n, k = chunk_sizes()
    w = 4 if run == "fp32_autocast" else 2
    weight = 0 if frozen_head else w * V * h
    peak = _chunk_peak(k, run, frozen_head, gathered)
    scatter = _middle_chunk_scatter(n, k, w, weight)
    return Term("chunk_backward", sp.Max(weight + w * n * h + peak, scatter),
                "one chunk's recomputed forward and backward, with the "
                + ("" if frozen_head else "output weight's and ")
                + "packed hidden states' gradients of the chunks done, or a middle chunk's "
                "gradient scattered beside them",
                _DS if gathered else _TRL if run == "no_autocast" else _AMP,
                label="one chunk's backward")


def _chunk_peak(k, run: str, frozen_head: bool, gathered: bool):
    """One chunk's recomputation and backward over the gradients of the chunks done [bytes]
    (:func:`chunked_loss_backward`'s maxima, by weights' dtype and autocast)."""
    if run == "fp32_autocast" and frozen_head:
        raise InvalidValueError("the chunked loss with a frozen lm_head is counted over 16-bit "
                                "weights (LoRA under autocast is not modelled)")
    copies = 6 * k * h + 6 * V * h + 2 * k * V      # the recomputed 16-bit matmul's peak
    if run == "no_autocast":
        return _no_autocast_peak(k, frozen_head, gathered)
    if frozen_head:
        return sp.Max(copies, 14 * k * V + 2 * V * h + 5 * k)
    if run == "fp32_autocast":
        return sp.Max(14 * k * V + 2 * V * h + 2 * k * h + 5 * k, 2 * k * V + 4 * V * h
                      + 4 * k * h, 8 * V * h + 4 * k * h)
    return sp.Max(copies, 14 * k * V + 2 * V * h + 2 * k * h + 5 * k)


def _no_autocast_peak(k, frozen_head: bool, gathered: bool):
    r"""One chunk's backward peak over the gradients of the chunks done, 16-bit weights
    without autocast (DeepSpeed's engine) [bytes]: the recomputed forward (the fp32 copies
    saved for the matmul's backward beside the fp32 logits, ``log_p``, its exponential and the
    entropy's product) or the matmul's backward (those copies, the fp32 gradient of the logits
    and the fp32 gradients of the weight and the chunk), as measured before the Trainer's
    autocast was read (memsym 366edcd's tests/test_chunked_loss.py) and again without it
    (tests/test_chunked_loss_deepspeed.py).  Frozen, ``h.float()`` is not saved.  Under ZeRO-3
    the recomputation gathers the weight again around its matmul (``GatheredParameters``,
    deepspeed/runtime/zero/partition_parameters.py:2435-2515): the gathered 16-bit weight
    beside its fp32 copy, the chunk's and the fp32 logits, :math:`6Vh + 4kh + 4kV`, freed before
    the backward reaches the matmul.  Trained, that stays below the matmul's backward
    (:math:`4kV + 8Vh + 8kh`); frozen it can bind (:math:`2Vh + 4kh > 12kV + 5k`).  The
    weight's gradient sums in autograd's buffer as under plain DDP (one ``AccumulateGrad`` for
    every chunk's ``w.float()``), reduced by DeepSpeed's hooks after the chunks (its buckets
    are the sharding's own terms)."""
    if not frozen_head:
        return sp.Max(16 * k * V + 4 * V * h + 4 * k * h + 5 * k,
                      4 * k * V + 8 * V * h + 8 * k * h)
    regather = 6 * V * h + 4 * k * h + 4 * k * V if gathered else 0
    return sp.Max(16 * k * V + 4 * V * h + 5 * k, 4 * k * V + 4 * V * h + 4 * k * h, regather)


def _middle_chunk_scatter(n, k, w: int, weight):
    r"""A middle chunk's scattered gradient beside the summed ones [bytes].

    Autograd runs the chunks' backward last-made first, each ``SliceBackward`` scattering the
    chunk's gradient (:math:`w\,kh`, in the hidden states' dtype) into a new :math:`n \times h`
    tensor beside the buffer, which then adds it in place; from three chunks (:math:`n > 512`)
    a middle chunk does so while the packed rows are still kept, the peak at long sequences
    (:func:`chunked_loss_backward`'s last math block)."""
    # [n > 512] for an integer n >= 1 as Mins, not a Piecewise in b (memsym.analysis's
    # closed forms split one peak Max)
    middle = sp.Min(sp.Max(n - 2 * CHUNK, 0), 1)
    return middle * (weight + 2 * w * n * h + w * k * h)
