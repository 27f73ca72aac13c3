r"""What ``torch.autocast`` over fp32 weights keeps beyond a model trained in 16 bits.

The Hugging Face Trainer's ``--bf16`` / ``--fp16`` without DeepSpeed or FSDP runs the model's
forward under ``torch.autocast`` (Accelerate 1.16 ``accelerator.py:1791-1801``); a checkpoint
loaded in float32 (TRL's default ``ModelConfig.dtype``, or run_clm's ``--dtype float32``)
keeps fp32 weights, gradients and AdamW moments while its matmuls run in 16 bits.  Against the
same transformers model loaded in 16 bits (:func:`memsym.terms.activations.layer_activations`
at width 2 with transformers' norms, :mod:`memsym.terms.hf_norms`), autocast keeps:

* **a 16-bit copy of every linear weight** (:func:`layer_linear_weights`, kept by
  :func:`autocast_layer_excess` and :func:`autocast_output`): ``linear`` is on
  autocast's lower-precision list, and autocast caches the cast of each fp32 leaf that
  requires a gradient for the rest of the autocast region (torch
  ``aten/src/ATen/autocast_mode.cpp``, ``cached_cast``: "Imitate Apex and cache some of the
  casts to streamline parameter reuse"); each matmul keeps its cast weight for the input's
  gradient until its backward.  The embedding lookup is not on the list (no cast); a tied
  output layer's weight is cast where the output layer uses it.
* **an fp32 residual stream** (:func:`autocast_layer_excess`): the embedding is fp32 and each
  ``residual + out`` promotes the 16-bit output back to fp32, so each ``LlamaRMSNorm`` gets an
  fp32 input (``to(torch.float32)`` keeps it as it is), keeps it, and keeps its fp32
  normalised tensor (``weight * hidden.to(input_dtype)``, ``input_dtype`` now float32): 4 bytes
  an element where the 16-bit model keeps a 2-byte one, :math:`+2\tau h` per norm.  The norm's
  output is fp32 too, and every linear reading it casts it anew (autocast caches only leaves):
  transformers' separate ``q_proj``, ``k_proj``, ``v_proj`` keep three 16-bit casts and
  ``gate_proj``, ``up_proj`` two, where the 16-bit model keeps the norm's output once.  A
  checkpointed layer's input (full recompute) is the fp32 residual, and the final norm keeps
  what the layers' norms keep (:func:`autocast_output`).  Under full recompute the cache still
  holds every layer's casts when the forward ends (:func:`autocast_cached_casts`).

Everything after the projections is 16-bit as in the 16-bit model: the projections' outputs,
the attention kernel's inputs (RoPE's fp32 tables promote Q and K to fp32, and SDPA casts
them back), SiLU and the product, the logits.  Per layer of transformers' Llama, over
:math:`\tau = sb` tokens,

.. math::

    \Delta_{\mathrm{layer}} = 2 \cdot 2\tau h + 2\tau h\,(n_{qkv} - 1) + 2\tau h\,(n_{up} - 1)
    + 2 W_\ell = 10\,\tau h + 2 W_\ell \quad [\text{bytes}]

measured on transformers' own ``LlamaDecoderLayer``, ``Qwen2DecoderLayer`` and
``Qwen3DecoderLayer`` built in float32 and run under ``torch.autocast("cpu", torch.bfloat16)``
in ``tests/test_autocast.py``, where torch's own ``MemTracker`` on the whole
``LlamaForCausalLM`` (float32 under autocast against bfloat16) sees these bytes at the forward's
end and as the loss's backward starts, with and without gradient checkpointing.  Which ops autocast runs in 16 bits differs between CUDA and the
CPU for some ops (``pow``, ``layer_norm``, ``softmax`` are fp32 ops on CUDA only); the Llama
layer's path meets none of them in a 16-bit input, so its CPU measurement is the CUDA count.

References
----------
.. [pytorch-autocast] PyTorch, "Automatic Mixed Precision package - torch.amp" (the ops that
   autocast to 16 bits: ``linear``, ``matmul``, ``scaled_dot_product_attention``; those that
   run in fp32); torch 2.13 ``torch/amp/autocast_mode.py:218`` (``cache_enabled``: "the weight
   cache inside autocast") and ``aten/src/ATen/autocast_mode.cpp`` (``cached_cast``).
.. [hf-transformers-5-25] transformers 5.25.0 ``models/llama/modeling_llama.py:62-67``
   (``LlamaRMSNorm.forward``), :163-164 (``LlamaMLP.forward``), :244-246 (the q, k, v
   projections), :308, :314 (the residual adds).
"""

from __future__ import annotations

import sympy as sp

from ..symbols import V, a, d_h, f, g, h
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["AUTOCAST_MODEL_TYPES", "layer_linear_weights", "autocast_layer_excess",
           "autocast_output", "autocast_cached_casts"]

#: transformers model types whose decoder layer under autocast memsym counts: LlamaRMSNorm,
#: separate q, k, v and gate, up projections, SDPA (measured: tests/test_autocast.py; Mistral's
#: layer is generated from Llama's, modular_mistral.py).
AUTOCAST_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")

_LAYER = Source("hf-transformers-5-25", "models/llama/modeling_llama.py:62-67 (LlamaRMSNorm on "
                "the fp32 residual), :163-164, :244-246 (each projection casts its fp32 input), "
                ":308, :314 (residual adds promote to fp32); torch autocast_mode.cpp cached_cast")
_CASTS = Source("pytorch-autocast", "aten/src/ATen/autocast_mode.cpp cached_cast (fp32 leaves "
                "that require grad, kept until the outermost autocast exits); torch 2.13 "
                "torch/amp/autocast_mode.py:218")


def layer_linear_weights() -> sp.Expr:
    r"""The linear weights of one transformers Llama-family decoder layer [parameters].

    .. math:: W_\ell = 2 h\,a d_h + 2 h\,g d_h + 3 h f

    ``q_proj`` and ``o_proj`` (:math:`h \times a d_h`), ``k_proj`` and ``v_proj``
    (:math:`h \times g d_h`), ``gate_proj``, ``up_proj`` and ``down_proj`` (:math:`h \times f`).

    Examples
    --------
    Llama 3 8B: 218,103,808 a layer (32 layers: 6,979,321,856).

    >>> from memsym.symbols import a, d_h, f, g, h
    >>> layer_linear_weights().subs({h: 4096, a: 32, g: 8, d_h: 128, f: 14336})
    218103808

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/llama/modeling_llama.py``
       (``LlamaAttention.__init__``, ``LlamaMLP.__init__``).
    """
    return 2 * h * a * d_h + 2 * h * g * d_h + 3 * h * f


def autocast_layer_excess(recompute: str = "none", *, qkv_projections: int = 3,
                          up_projections: int = 2) -> Term:
    r"""What a decoder layer keeps under autocast over fp32 weights beyond its 16-bit self.

    Per layer [bytes]:

    .. math::

        \text{kept: } 4\tau h + 2\tau h\,(n_{qkv} + n_{up} - 2) + 2 W_\ell, \qquad
        \text{full recompute: } 2\tau h

    The two RMSNorms' fp32 normalised tensors (:math:`2 \cdot 2\tau h` beyond the 16-bit ones),
    the extra 16-bit casts of the norms' fp32 outputs, one per projection beyond the first,
    and the 16-bit copies of the layer's linear weights (:func:`layer_linear_weights`) its
    matmuls keep; a checkpointed layer keeps its fp32 input, 2 bytes an element more (its
    weight casts are made again when its backward rebuilds it).  :math:`\tau = sb/c`.

    Parameters
    ----------
    recompute : {"none", "full"}
        The layer's recompute: everything kept, or its input alone [1].
    qkv_projections : int
        Separate linears reading the attention norm's output (3: q, k, v) [1].
    up_projections : int
        Separate linears reading the MLP norm's output (2: gate, up) [1].

    Examples
    --------
    Llama 3 8B (h = 4096) at s = 2048, b = 1: 10 x 2048 x 4096 bytes of activations and
    2 x 218,103,808 of weight casts a layer, 2 x 2048 x 4096 a checkpoint.

    >>> llama3_8b = dict(s=2048, b=1, c=1, h=4096, a=32, g=8, d_h=128, f=14336)
    >>> autocast_layer_excess().evaluate(**llama3_8b) == 10 * 2048 * 4096 + 2 * 218103808
    True
    >>> autocast_layer_excess("full").evaluate(**llama3_8b) == 2 * 2048 * 4096
    True

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/llama/modeling_llama.py:62-67``,
       :163-164, :244-246, :308, :314; measured in ``tests/test_autocast.py``.
    .. [pytorch-autocast] ``aten/src/ATen/autocast_mode.cpp`` (``cached_cast``).
    """
    tok, _ = token_split(False)
    if recompute == "full":
        return Term("autocast_checkpoint", 2 * tok * h, "the checkpointed layer input is the "
                    "fp32 residual (2 bytes an element beyond a 16-bit one)", _LAYER,
                    label="autocast fp32 checkpoint")
    casts = qkv_projections + up_projections - 2
    return Term("autocast_layer", 2 * 2 * tok * h + 2 * tok * h * casts
                + 2 * layer_linear_weights(),
                "autocast over fp32 weights: the two RMSNorms' fp32 normalised tensors, "
                f"{casts} more 16-bit casts of their fp32 outputs (one per projection) and the "
                "16-bit copies of the layer's linear weights", _LAYER,
                label="autocast fp32 residual and weight casts")


def autocast_output(tied: bool = False, weight_cast: bool = True) -> Term:
    r"""What the final norm and the output layer keep under autocast beyond the 16-bit model.

    Over fp32 weights [bytes]:

    .. math:: 2\tau h + 2 V h \quad [\text{bytes}]

    The final norm's input is the fp32 residual and its normalised tensor fp32, 4 bytes an
    element where the 16-bit model's ``LlamaRMSNorm`` keeps 2 (:math:`\tau = sb/c`); the output
    layer keeps the 16-bit copy of its weight (the embedding's, when tied) for the hidden
    state's gradient, :math:`2Vh`, left out without ``weight_cast``.

    Parameters
    ----------
    tied : bool
        The output layer shares the embedding's weight (cast all the same) [1].
    weight_cast : bool
        Whether the output layer's cast weight is kept [1]: not under TRL's chunked loss,
        whose matmul casts ``w.t()``, a view autocast does not cache
        (:mod:`memsym.terms.chunked_loss`).

    Examples
    --------
    >>> autocast_output().evaluate(s=2048, b=1, c=1, h=4096, V=128256) == 2 * 2048 * 4096 + (
    ...     2 * 128256 * 4096)
    True
    >>> autocast_output(weight_cast=False).evaluate(s=2048, b=1, c=1, h=4096) == 2 * 2048 * 4096
    True

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/llama/modeling_llama.py:62-67``
       and ``LlamaForCausalLM.forward`` (``self.lm_head(hidden_states[...])``).
    """
    tok, _ = token_split(False)
    if not weight_cast:
        return Term("autocast_output", 2 * tok * h, "the final RMSNorm's fp32 normalised "
                    "tensor under autocast over fp32 weights", _LAYER, label="autocast final norm")
    return Term("autocast_output", 2 * tok * h + 2 * V * h, "the final RMSNorm's fp32 "
                "normalised tensor and the output layer's 16-bit weight copy"
                + (" (the tied embedding's)" if tied else "") + " under autocast over fp32 "
                "weights", _LAYER, label="autocast final norm and output cast")


def autocast_cached_casts(layers) -> Term:
    r"""The 16-bit weight copies autocast holds at the forward's end under full recompute.

    [bytes]:

    .. math:: 2\,L\,W_\ell \quad [\text{bytes}]

    A checkpointed layer's forward keeps nothing for its backward, but autocast's cache
    keeps each layer's weight casts until the outermost autocast region (the model's forward)
    exits; the backward casts each rebuilt layer's weights again (one layer's, counted with
    the rebuilt layer by :func:`autocast_layer_excess`).

    Parameters
    ----------
    layers : int or sympy.Expr
        Decoder layers :math:`L` on this GPU [1].

    Examples
    --------
    >>> autocast_cached_casts(32).evaluate(h=4096, a=32, g=8, d_h=128, f=14336)
    13958643712

    References
    ----------
    .. [pytorch-autocast] ``aten/src/ATen/autocast_mode.cpp`` (``cached_cast``); torch 2.13
       ``torch/amp/autocast_mode.py:218``.
    """
    return Term("autocast_cached_casts", 2 * layers * layer_linear_weights(), "autocast's "
                "cached 16-bit copies of every layer's fp32 linear weights, held until the "
                "forward ends (the checkpointed layers keep no activation)", _CASTS,
                label="autocast weight cache")
