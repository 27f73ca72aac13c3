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
end and as the loss's backward starts, with and without gradient checkpointing.  Which ops
autocast runs in 16 bits differs between CUDA and the CPU for some ops (``pow``,
``layer_norm``, ``softmax`` are fp32 ops on CUDA only: torch 2.13
``aten/src/ATen/autocast_mode.h``, ``AT_FORALL_FP32``); the Llama layer's path meets none of
them in a 16-bit input, so its CPU measurement is the CUDA count.

**GPT-2** (transformers' ``GPT2Block``, ``modeling_gpt2.py:248-312``) meets two of them
(``layer_norm``, ``pow``; eager attention's softmax too, refused), and its count is CUDA's: ``ln_1`` and ``ln_2`` are ``nn.LayerNorm``, an fp32 op on CUDA, which keeps
its fp32 input (the residual, :math:`+2\tau h` each beyond the 16-bit model's 2-byte one) and
returns fp32, which the fused ``c_attn`` (``Conv1D``: ``torch.addmm``, lower precision) and
``c_fc`` each cast once (no extra cast: :math:`n_{qkv} = n_{up} = 1`); ``gelu_new``
(``activations.py:65-66``: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 pow(x, 3))))``) runs
``pow`` in fp32 on CUDA, so autograd keeps an fp32 copy of the 16-bit ``c_fc`` output (for
``pow``), ``tanh``'s output and ``1 + tanh`` in fp32 (the 16-bit ``x`` itself is kept by no
one), :math:`3 \cdot 2\tau f` beyond the 16-bit model's three 2-byte tensors; the product is
fp32 and ``mlp.c_proj`` casts it to 16 bits, as the 16-bit model keeps its 16-bit product.
The attention (SDPA on ``c_attn``'s 16-bit output), both dropouts after the 16-bit ``c_proj``
outputs, the embedding dropout (on the fp32 embedding, but CUDA's ``native_dropout`` keeps a
1-byte mask either way) and the loss (``logits.float()``) are as in the 16-bit model.  Per layer,

.. math::

    \Delta_{\mathrm{GPT\text{-}2}} = 2 \cdot 2\tau h + 3 \cdot 2\tau f + 2 W_\ell
    \quad [\text{bytes}], \qquad W_\ell = 4h^2 + 2hf

and the biases' casts (``addmm``'s ``self``: :func:`layer_linear_biases`) stay in autocast's
cache alone until the forward ends (:func:`autocast_cached_casts`).  Measured on
transformers' ``GPT2LMHeadModel`` (float32 under CPU autocast with CUDA's fp32 ops emulated,
against bfloat16) with ``MemTracker`` in ``tests/test_autocast_gpt2.py``.

**GPT-NeoX** (Pythia; ``modeling_gpt_neox.py:228-270``) is GPT-2's count without ``gelu_new``:
its ``hidden_act`` ``gelu`` is ``F.gelu``, on no autocast list, so it runs on the 16-bit
``dense_h_to_4h`` output as in 16 bits; its fused ``query_key_value`` and ``dense_h_to_4h``
cast their LayerNorms' fp32 outputs once each; under ``use_parallel_residual`` (its default)
both LayerNorms read the same fp32 residual, kept once (:math:`+2\tau h`, :math:`+4\tau h`
with sequential residuals).  Its RoPE tables are built in the hidden states' dtype
(``cos.to(x.dtype)``, fp32 under autocast), one storage for the model, left to the model as
for Llama; they promote the rotated Q and K to fp32, which SDPA casts back to 16 bits.
Measured on ``GPTNeoXForCausalLM`` in ``tests/test_autocast_gpt2.py``.

**16-bit weights**: :mod:`memsym.terms.autocast16`.

References
----------
.. [pytorch-autocast] PyTorch, "Automatic Mixed Precision package - torch.amp" (the ops that
   autocast to 16 bits: ``linear``, ``matmul``, ``scaled_dot_product_attention``; those that
   run in fp32); torch 2.13 ``torch/amp/autocast_mode.py:218`` (``cache_enabled``: "the weight
   cache inside autocast") and ``aten/src/ATen/autocast_mode.cpp`` (``cached_cast``).
.. [hf-transformers-5-25] transformers 5.25.0 ``models/llama/modeling_llama.py:62-67``
   (``LlamaRMSNorm.forward``), :163-164 (``LlamaMLP.forward``), :244-246 (the q, k, v
   projections), :308, :314 (the residual adds); ``models/gpt2/modeling_gpt2.py:187`` (c_attn),
   :225 (c_proj), :241-244 (``GPT2MLP.forward``), :276, :285, :307, :310 (``GPT2Block``'s norms
   and residual adds), :619 (ln_f), :698 (lm_head); ``activations.py:65-66``
   (``NewGELUActivation``); ``pytorch_utils.py:119`` (``Conv1D.forward``: ``torch.addmm``);
   ``models/gpt_neox/modeling_gpt_neox.py:41-48`` (``GPTNeoXMLP``), :91-97 (the RoPE tables in
   ``x.dtype``), :249-268 (``GPTNeoXLayer.forward``).
"""

from __future__ import annotations

import sympy as sp

from ..symbols import V, a, d_h, f, g, h
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["AUTOCAST_LAYERS", "AUTOCAST_MODEL_TYPES", "AUTOCAST_ACTIVATIONS",
           "layer_linear_weights", "layer_linear_biases", "autocast_layer_excess",
           "autocast_output", "autocast_cached_casts"]

#: transformers model types whose decoder layer under autocast memsym counts, with the
#: :func:`autocast_layer_excess` keywords of its layer (measured: tests/test_autocast.py,
#: tests/test_autocast_gpt2.py).  The Llama family: LlamaRMSNorm, separate q, k, v and gate, up
#: projections, SDPA (Mistral's layer is generated from Llama's, modular_mistral.py); GPT-2:
#: LayerNorm, the fused c_attn and c_fc (Conv1D), gelu_new; GPT-NeoX (Pythia): LayerNorm, the
#: fused query_key_value and dense_h_to_4h, exact GeLU, partial RoPE.
AUTOCAST_LAYERS = {"llama": {}, "mistral": {}, "qwen2": {}, "qwen3": {},
                   "gpt2": dict(qkv_projections=1, up_projections=1, gated=False,
                                tanh_gelu=True),
                   "gpt_neox": dict(qkv_projections=1, up_projections=1, gated=False)}
AUTOCAST_MODEL_TYPES = tuple(AUTOCAST_LAYERS)
#: The activation measured on each LayerNorm type of AUTOCAST16_LAYERS (GPT-2's and GPT-NeoX's
#: over fp32 weights too), as (the config.json field naming it, the activation): its config
#: class's default (transformers 5.25.0 configuration_gpt2.py:83, configuration_gpt_neox.py:66,
#: configuration_phi.py:71, configuration_stablelm.py:50, configuration_gptj.py:74,
#: configuration_codegen.py:77, configuration_gpt_bigcode.py:64, configuration_starcoder2.py:66,
#: configuration_opt.py:64, configuration_falcon.py:87).  Another is refused
#: (memsym.job_checks_hf.check_autocast) and said as not counted by the Trainer launch
#: (memsym.cli.hf_launch): whether its ops are fp32 under CUDA's autocast was not measured.
#: BLOOM's and MPT's activation is their code's (BloomGelu, nn.GELU: modeling_bloom.py:322,
#: modeling_mpt.py:145), named by no config field: none here.
AUTOCAST_ACTIVATIONS = {"gpt2": ("activation_function", "gelu_new"),
                        "gpt_neox": ("hidden_act", "gelu"), "phi": ("hidden_act", "gelu_new"),
                        "stablelm": ("hidden_act", "silu"),
                        "gptj": ("activation_function", "gelu_new"),
                        "codegen": ("activation_function", "gelu_new"),
                        "gpt_bigcode": ("activation_function", "gelu_pytorch_tanh"),
                        "starcoder2": ("hidden_act", "gelu_pytorch_tanh"),
                        "opt": ("activation_function", "relu"), "falcon": ("activation", "gelu")}
_LAYER = Source("hf-transformers-5-25", "models/llama/modeling_llama.py:62-67 (LlamaRMSNorm on "
                "the fp32 residual), :163-164, :244-246 (each projection casts its fp32 input), "
                ":308, :314 (residual adds promote to fp32); torch autocast_mode.cpp cached_cast")
_LAYERNORM = Source("hf-transformers-5-25", "models/gpt2/modeling_gpt2.py:276, :307 (nn.LayerNorm, "
               "an fp32 op under CUDA autocast, keeps the fp32 residual), :187, :241-243 (one "
               "cast of each norm's fp32 output), :285, :310 (residual adds promote to fp32); "
               "activations.py:65-66 (gelu_new's pow, fp32 on CUDA: torch 2.13 "
               "aten/src/ATen/autocast_mode.h AT_FORALL_FP32); pytorch_utils.py:119 (addmm); "
               "models/gpt_neox/modeling_gpt_neox.py:249-268 (GPTNeoXLayer.forward: the "
               "parallel residual's LayerNorms read one fp32 residual), :46-48 (exact GeLU)")
_CASTS = Source("pytorch-autocast", "aten/src/ATen/autocast_mode.cpp cached_cast (fp32 leaves "
                "that require grad, kept until the outermost autocast exits); torch 2.13 "
                "torch/amp/autocast_mode.py:218")


def layer_linear_weights(gated: bool = True) -> sp.Expr:
    r"""The linear weights of one transformers decoder layer [parameters].

    .. math:: W_\ell = 2 h\,a d_h + 2 h\,g d_h + n_{\mathrm{mlp}} h f

    The query and output projections (:math:`h \times a d_h`), key and value
    (:math:`h \times g d_h`), and the MLP's :math:`n_{\mathrm{mlp}}` matrices of
    :math:`h \times f`: 3 gated (Llama's ``gate_proj``, ``up_proj``, ``down_proj``), 2 not
    (GPT-2's ``c_fc``, ``c_proj``; its fused ``c_attn`` is q, k, v at :math:`g = a`).

    Parameters
    ----------
    gated : bool
        A gated (SwiGLU) MLP of three matrices, else two [1].

    Examples
    --------
    Llama 3 8B: 218,103,808 a layer (32 layers: 6,979,321,856); GPT-2 (h = 768, 12 heads of
    64, f = 3072): 12 h^2 = 7,077,888.

    >>> from memsym.symbols import a, d_h, f, g, h
    >>> layer_linear_weights().subs({h: 4096, a: 32, g: 8, d_h: 128, f: 14336})
    218103808
    >>> layer_linear_weights(False).subs({h: 768, a: 12, g: 12, d_h: 64, f: 3072})
    7077888

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/llama/modeling_llama.py``
       (``LlamaAttention.__init__``, ``LlamaMLP.__init__``);
       ``models/gpt2/modeling_gpt2.py:107-108``, :235-236 (``Conv1D`` c_attn, c_proj, c_fc,
       c_proj).
    """
    return 2 * h * a * d_h + 2 * h * g * d_h + (3 if gated else 2) * h * f


def layer_linear_biases(qkv: bool, out: bool, mlp: bool, gated: bool = True) -> sp.Expr:
    r"""The biases of one transformers decoder layer's linear weights [parameters].

    .. math:: B_\ell = [\mathrm{qkv}]\,(a + 2g) d_h + [\mathrm{out}]\,h
        + [\mathrm{mlp}]\,(n_{\mathrm{up}} f + h)

    Autocast casts each to 16 bits with its matmul (``addmm``'s ``self``, ``linear``'s
    ``bias``) and caches the cast until the forward ends, though no backward keeps it.

    Parameters
    ----------
    qkv, out, mlp : bool
        Biases on the q, k, v projections, on the attention's output, on the MLP [1].
    gated : bool
        A gated MLP (:math:`n_{\mathrm{up}} = 2`: gate and up), else 1 [1].

    Examples
    --------
    GPT-2 (h = 768, 12 heads of 64, f = 3072): 3h + h + f + h = 6,912.

    >>> from memsym.symbols import a, d_h, f, g, h
    >>> layer_linear_biases(True, True, True, False).subs(
    ...     {h: 768, a: 12, g: 12, d_h: 64, f: 3072})
    6912

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``pytorch_utils.py:119`` (``Conv1D``:
       ``torch.addmm(self.bias, ...)``); ``models/qwen2/modeling_qwen2.py`` (q, k, v biased).
    """
    return ((a + 2 * g) * d_h if qkv else 0) + (h if out else 0) + (
        ((2 if gated else 1) * f + h) if mlp else 0)


def autocast_layer_excess(recompute: str = "none", *, qkv_projections: int = 3,
                          up_projections: int = 2, gated: bool = True,
                          tanh_gelu: bool = False, norm_tensors: int = 2) -> Term:
    r"""What a decoder layer keeps under autocast over fp32 weights beyond its 16-bit self.

    Per layer [bytes]:

    .. math::

        \text{kept: } 2 n_{\mathrm{norm}}\tau h + 2\tau h\,(n_{qkv} + n_{up} - 2)
        + [\mathrm{gelu}]\,6\tau f + 2 W_\ell, \qquad \text{full recompute: } 2\tau h

    The norms' fp32 tensors beyond their 16-bit ones (:math:`n_{\mathrm{norm}} \cdot 2\tau h`:
    an RMSNorm's normalised tensor, a LayerNorm's input; GPT-NeoX's parallel residual feeds
    both LayerNorms one residual, kept once), the extra 16-bit casts of the norms'
    fp32 outputs, one per projection beyond the first, GPT-2's ``gelu_new`` input, ``tanh``
    output and ``1 + tanh`` in fp32 (``pow`` is an fp32 op under CUDA's autocast), and the
    16-bit copies of the layer's linear weights (:func:`layer_linear_weights`) its matmuls
    keep; a checkpointed layer keeps its fp32 input, 2 bytes an element more (its weight
    casts are made again when its backward rebuilds it).  :math:`\tau = sb/c`.

    Parameters
    ----------
    recompute : {"none", "full"}
        The layer's recompute: everything kept, or its input alone [1].
    qkv_projections : int
        Separate linears reading the attention norm's output (3: q, k, v; GPT-2's c_attn 1) [1].
    up_projections : int
        Separate linears reading the MLP norm's output (2: gate, up; GPT-2's c_fc 1) [1].
    gated : bool
        A gated MLP (three weight matrices), else two [1].
    tanh_gelu : bool
        transformers' ``gelu_new`` (``NewGELUActivation``), whose ``pow`` runs in fp32 [1].
    norm_tensors : int
        :math:`n_{\mathrm{norm}}`, the norms' distinct fp32 tensors: 2, or 1 where both
        LayerNorms read the same residual (GPT-NeoX's ``use_parallel_residual``) [1].

    Examples
    --------
    Llama 3 8B (h = 4096) at s = 2048, b = 1: 10 x 2048 x 4096 bytes of activations and
    2 x 218,103,808 of weight casts a layer, 2 x 2048 x 4096 a checkpoint.

    >>> llama3_8b = dict(s=2048, b=1, c=1, h=4096, a=32, g=8, d_h=128, f=14336)
    >>> autocast_layer_excess().evaluate(**llama3_8b) == 10 * 2048 * 4096 + 2 * 218103808
    True
    >>> autocast_layer_excess("full").evaluate(**llama3_8b) == 2 * 2048 * 4096
    True

    GPT-2 (h = 768, f = 3072) at s = 1024, b = 4: 4 tau h + 6 tau f + 2 x 12 h^2.

    >>> gpt2 = autocast_layer_excess(qkv_projections=1, up_projections=1, gated=False,
    ...                              tanh_gelu=True)
    >>> gpt2.evaluate(s=1024, b=4, c=1, h=768, a=12, g=12, d_h=64, f=3072) == (
    ...     4 * 4096 * 768 + 6 * 4096 * 3072 + 24 * 768**2)
    True

    Pythia-1B (GPT-NeoX, h = 2048, f = 8192, parallel residual) at s = 2048, b = 1:
    2 tau h + 2 x 12 h^2.

    >>> neox = autocast_layer_excess(qkv_projections=1, up_projections=1, gated=False,
    ...                              norm_tensors=1)
    >>> neox.evaluate(s=2048, b=1, c=1, h=2048, a=8, g=8, d_h=256, f=8192) == (
    ...     2 * 2048 * 2048 + 24 * 2048**2)
    True

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/llama/modeling_llama.py:62-67``,
       :163-164, :244-246, :308, :314; ``models/gpt2/modeling_gpt2.py:276-310``,
       ``activations.py:65-66``; ``models/gpt_neox/modeling_gpt_neox.py:249-268``
       (``GPTNeoXLayer.forward``); measured in ``tests/test_autocast.py`` and
       ``tests/test_autocast_gpt2.py``.
    .. [pytorch-autocast] ``aten/src/ATen/autocast_mode.cpp`` (``cached_cast``).
    """
    tok, _ = token_split(False)
    src = _LAYER if gated else _LAYERNORM
    if recompute == "full":
        return Term("autocast_checkpoint", 2 * tok * h, "the checkpointed layer input is the "
                    "fp32 residual (2 bytes an element beyond a 16-bit one)", src,
                    label="autocast fp32 checkpoint")
    casts = qkv_projections + up_projections - 2
    gelu = 3 * 2 * tok * f if tanh_gelu else 0
    return Term("autocast_layer", norm_tensors * 2 * tok * h + 2 * tok * h * casts + gelu
                + 2 * layer_linear_weights(gated),
                f"autocast over fp32 weights: the norms' {norm_tensors} fp32 tensors, "
                f"{casts} more 16-bit casts of their fp32 outputs (one per projection)"
                + (", gelu_new's fp32 pow input, tanh and 1 + tanh" if tanh_gelu else "")
                + " and the 16-bit copies of the layer's linear weights", src,
                label="autocast fp32 residual and weight casts")


def autocast_output(tied: bool = False, weight_cast: bool = True) -> Term:
    r"""What the final norm and the output layer keep under autocast beyond the 16-bit model.

    Over fp32 weights [bytes]:

    .. math:: 2\tau h + 2 V h \quad [\text{bytes}]

    The final norm's input is the fp32 residual and its normalised tensor fp32, 4 bytes an
    element where the 16-bit model's ``LlamaRMSNorm`` keeps 2 (GPT-2's ``ln_f``, an fp32
    ``LayerNorm`` on CUDA, keeps its fp32 input where the 16-bit one keeps a 2-byte one: the
    same :math:`2\tau h`; :math:`\tau = sb/c`); the output
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
       and ``LlamaForCausalLM.forward`` (``self.lm_head(hidden_states[...])``);
       ``models/gpt2/modeling_gpt2.py:619`` (ln_f), :698 (lm_head, tied to wte).
    """
    tok, _ = token_split(False)
    if not weight_cast:
        return Term("autocast_output", 2 * tok * h, "the final norm's fp32 tensor (RMSNorm's "
                    "normalised tensor, LayerNorm's input) under autocast over fp32 weights",
                    _LAYER, label="autocast final norm")
    return Term("autocast_output", 2 * tok * h + 2 * V * h, "the final norm's fp32 tensor "
                "(RMSNorm's normalised tensor, LayerNorm's input) and the output layer's 16-bit "
                "weight copy"
                + (" (the tied embedding's)" if tied else "") + " under autocast over fp32 "
                "weights", _LAYER, label="autocast final norm and output cast")


def autocast_cached_casts(layers, *, weights: bool = True, gated: bool = True,
                          biases=0) -> Term:
    r"""The 16-bit copies autocast's cache holds at the forward's end beyond autograd's.

    [bytes]:

    .. math:: 2\,L\,([\mathrm{weights}]\,W_\ell + B_\ell) \quad [\text{bytes}]

    Autocast's cache keeps each cast of an fp32 leaf until the outermost autocast region (the
    model's forward) exits.  Under full recompute a checkpointed layer's forward keeps
    nothing for its backward, so the cache alone holds every layer's weight casts (the
    backward casts each rebuilt layer's weights again: one layer's, counted with the rebuilt
    layer by :func:`autocast_layer_excess`); without recompute autograd keeps the weight
    casts (counted with each layer) and the cache alone holds the biases' casts, which no
    backward keeps (:func:`layer_linear_biases`).

    Parameters
    ----------
    layers : int or sympy.Expr
        Decoder layers :math:`L` on this GPU [1].
    weights : bool
        Whether the weights' casts are the cache's alone (full recompute) [1].
    gated : bool
        A gated MLP (:func:`layer_linear_weights`) [1].
    biases : int or sympy.Expr
        :math:`B_\ell`, the biases of one layer's linears (:func:`layer_linear_biases`)
        [parameters].

    Examples
    --------
    >>> autocast_cached_casts(32).evaluate(h=4096, a=32, g=8, d_h=128, f=14336)
    13958643712
    >>> autocast_cached_casts(12, weights=False, biases=6912).evaluate()
    165888

    References
    ----------
    .. [pytorch-autocast] ``aten/src/ATen/autocast_mode.cpp`` (``cached_cast``); torch 2.13
       ``torch/amp/autocast_mode.py:218``.
    """
    per_layer = (layer_linear_weights(gated) if weights else 0) + biases
    return Term("autocast_cached_casts", 2 * layers * per_layer, "autocast's cached 16-bit "
                "copies of every layer's fp32 linear "
                + ("weights" + (" and biases" if biases else "") + ", held until the forward "
                   "ends (the checkpointed layers keep no activation)" if weights else
                   "biases, held until the forward ends (no backward keeps them)"), _CASTS,
                label="autocast weight cache")
