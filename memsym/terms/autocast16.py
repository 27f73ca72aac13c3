r"""What ``torch.autocast`` over 16-bit weights keeps beyond the same model without it.

The Trainer's ``--bf16`` over bf16 weights (``--fp16`` over fp16 ones) runs the autocast it
runs over fp32 weights (:mod:`memsym.terms.autocast`), which casts no 16-bit weight (``cached_cast`` caches fp32 leaves alone) and leaves the residual
16-bit (the embedding and every ``residual + out`` are 16-bit).  What differs from the plain
16-bit model is only the ops CUDA's autocast runs in fp32 that meet a 16-bit tensor: for
transformers' GPT-2, GPT-NeoX, Phi and StableLM with SDPA ``layer_norm`` and gelu_new's
``pow`` (torch 2.13 ``aten/src/ATen/autocast_mode.h:870``, :874, ``AT_FORALL_FP32``; measured:
no other op registered for ``AutocastCUDA`` and not for ``AutocastCPU`` meets a 16-bit tensor
in their forward, nor in Llama's, Mistral's, Qwen2's or Qwen3's, whose ``LlamaRMSNorm`` casts
to fp32 itself).  Each ``nn.LayerNorm`` casts its 16-bit input, weight and bias to fp32 and
``native_layer_norm`` keeps all three for its backward (torch ``derivatives.yaml``): an fp32
copy of its input, :math:`4\tau h` where the 16-bit model's norm keeps the 16-bit input
(:math:`2\tau h`, once for both norms of GPT-NeoX's parallel residual, which now keep a copy
each), and :math:`4 \cdot 2h` bytes of weight and bias; its fp32 output is cast by each
linear reading it, where the 16-bit model keeps the norm's 16-bit output once (GPT-2's fused
``c_attn`` and ``c_fc``, GPT-NeoX's ``query_key_value`` and ``dense_h_to_4h``: one cast each;
Phi's ``q_proj``, ``k_proj``, ``v_proj``, ``fc1`` on its one norm: three more; StableLM's q, k,
v and gate, up: three more).  gelu_new keeps what it keeps over fp32 weights
(:math:`6\tau f` more).  A checkpointed layer's input is the 16-bit residual (nothing more).
Per layer,

.. math::

    \Delta^{16}_{\ell} = n_{\mathrm{norm}} \cdot 4\tau h - n_{\mathrm{in}} \cdot 2\tau h
    + 2\tau h\,(n_{\mathrm{read}} - n_{\mathrm{norm}}) + [\mathrm{gelu\_new}]\, 6\tau f
    + n_{\mathrm{norm}} \cdot 8h \quad [\text{bytes}]

(:math:`n_{\mathrm{in}}` the norms' distinct 16-bit inputs: :math:`n_{\mathrm{norm}}`, 1
under a parallel residual; :math:`n_{\mathrm{read}}` the linears reading them), and at the
model's end the final ``LayerNorm``'s :math:`2\tau h + 8h`.  Measured on transformers'
``GPT2LMHeadModel``, ``GPTNeoXForCausalLM``, ``PhiForCausalLM`` and ``StableLmForCausalLM``
(bfloat16 under CPU autocast with CUDA's fp32 ops emulated, against bfloat16 without autocast)
in ``tests/test_autocast_16bit.py``, and so GPT-J's, CodeGen's, GPTBigCode's, StarCoder2's
OPT's (affine LayerNorms) and Falcon's (rotary, its three layer layouts).

MPT's LayerNorms have a weight and no bias (``norm_1.bias = None``): :math:`4h` bytes of fp32
weight a norm where the others keep :math:`8h`.  BLOOM normalizes the word embedding
(``word_embeddings_layernorm``), whose fp32 output under CUDA's autocast makes the residual
stream fp32 from the first layer on (``residual + out`` promotes): each LayerNorm then keeps
the fp32 residual itself instead of a cast of it, the same :math:`4\tau h` a norm, so the layer
keeps what GPT-2's keeps without gelu_new; the embedding's norm keeps :math:`2\tau h + 8h` more
(:func:`autocast16_input`), and a checkpointed layer's input is the fp32 residual,
:math:`2\tau h` more a layer, beside the fp32 alibi (``build_alibi_tensor(...,
dtype=hidden_states.dtype)``) every checkpoint holds.  Its attention's softmax is
``F.softmax(..., dtype=torch.float32)``, whose dtype CUDA's autocast keeps
(``fp32_set_opt_dtype``), and BloomGelu runs no fp32 op.  Phi's ``qk_layernorm`` adds its q
and k norms' fp32 copies (:func:`autocast16_qk_norms`); Falcon's alibi is a 16-bit additive
mask with or without autocast (``modeling_falcon.py:560``, :582-597): its layer keeps what the
rotary one keeps.  Other LayerNorm models are not counted: the Trainer launch's note says so.

References
----------
.. [pytorch-autocast] PyTorch, "Automatic Mixed Precision package - torch.amp" (the ops CUDA's
   autocast runs in fp32); torch 2.13 ``aten/src/ATen/autocast_mode.h:870`` (``pow``), :874
   (``layer_norm``), ``AT_FORALL_FP32``; :919, :423-430 (``softmax`` is
   ``fp32_set_opt_dtype``: a dtype given is kept); ``aten/src/ATen/autocast_mode.cpp``
   (``cached_cast``: fp32 leaves alone).
.. [hf-transformers-5-25] transformers 5.25.0 ``models/gpt2/modeling_gpt2.py:276, :307, :619``,
   ``models/gpt_neox/modeling_gpt_neox.py:250, :261, :266, :357``,
   ``models/phi/modeling_phi.py:274, :381``, ``models/stablelm/modeling_stablelm.py:346, :370,
   :469`` (``nn.LayerNorm`` on the 16-bit residual); ``activations.py:65-66``
   (``NewGELUActivation``); ``models/bloom/modeling_bloom.py:500`` (the embedding's norm),
   :373, :379, :392, :398, :310, :340 (the norms on the residual, ``dropout_add``), :515, :90
   (alibi in the hidden states' dtype), :284 (softmax); ``models/mpt/modeling_mpt.py:165-174``,
   :242 (LayerNorms without bias), :193, :207, :155 (a 16-bit residual), :129 (softmax of fp32
   scores).
"""

from __future__ import annotations

import sympy as sp

from ..symbols import a, d_h, f, g, h
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["AUTOCAST16_LAYERS", "autocast16_layer_excess", "autocast16_qk_norms",
           "autocast16_input", "autocast16_output"]

#: transformers model types whose layer under autocast over 16-bit weights memsym counts, with
#: the :func:`autocast16_layer_excess` keywords of its layer (measured:
#: tests/test_autocast_16bit.py): GPT-2, GPT-NeoX, Phi, StableLM, GPT-J, CodeGen, GPTBigCode
#: and StarCoder2, whose LayerNorms (and gelu_new) run in fp32 under CUDA's autocast, with the
#: linears reading the norms (GPT-2's and GPTBigCode's c_attn, c_fc; Phi's q, k, v, fc1;
#: StableLM's q, k, v, gate, up; GPT-J's q, k, v, fc_in; CodeGen's qkv_proj, fc_in;
#: StarCoder2's and OPT's q, k, v and c_fc / fc1; Falcon's query_key_value, dense_h_to_4h,
#: rotary or alibi; BLOOM's query_key_value, dense_h_to_4h on an fp32 residual;
#: MPT's Wqkv, up_proj); None where
#: the layer keeps nothing more (the Llama family: no op that CUDA's autocast alone runs in
#: fp32 meets a 16-bit tensor, LlamaRMSNorm casting to fp32 itself).
AUTOCAST16_LAYERS = {"llama": None, "mistral": None, "qwen2": None, "qwen3": None,
                     "gpt2": dict(tanh_gelu=True, readers=2), "gpt_neox": dict(readers=2),
                     "phi": dict(tanh_gelu=True, readers=4), "stablelm": dict(readers=5),
                     "gptj": dict(tanh_gelu=True, readers=4),
                     "codegen": dict(tanh_gelu=True, readers=2),
                     "gpt_bigcode": dict(readers=2), "starcoder2": dict(readers=4),
                     "opt": dict(readers=4), "falcon": dict(readers=2),
                     "bloom": dict(readers=2, fp32_residual=True), "mpt": dict(readers=2)}

_LAYERNORM16 = Source("hf-transformers-5-25", "models/gpt2/modeling_gpt2.py:276, :307, :619, "
                      "models/gpt_neox/modeling_gpt_neox.py:250, :261, :266, :357, "
                      "models/phi/modeling_phi.py:274, :381, models/stablelm/modeling_stablelm."
                      "py:346, :370, :469 (nn.LayerNorm "
                      "on the 16-bit residual: an fp32 op under CUDA autocast, torch 2.13 "
                      "aten/src/ATen/autocast_mode.h:874, which casts input, weight and bias "
                      "to fp32 and keeps them for native_layer_norm's backward); "
                      "activations.py:65-66 (gelu_new's pow, autocast_mode.h:870)")

_QK_NORMS = Source("hf-transformers-5-25", "models/phi/modeling_phi.py:170-176, :194-196 "
                   "(q_layernorm, k_layernorm: nn.LayerNorm(h // a) on the 16-bit q and k, an "
                   "fp32 op under CUDA autocast, torch 2.13 aten/src/ATen/autocast_mode.h:874)")


def autocast16_layer_excess(recompute: str = "none", *, tanh_gelu: bool = False,
                            norms: int = 2, norm_tensors: int = 2, readers: int = 2,
                            norm_weights: int = 2, fp32_residual: bool = False) -> Term:
    r"""What a LayerNorm layer keeps under CUDA's autocast over 16-bit weights beyond its own.

    Per layer [bytes], beyond the same layer without autocast:

    .. math::

        \text{kept: } n_{\mathrm{norm}} \cdot 4\tau h - n_{\mathrm{in}} \cdot 2\tau h
        + 2\tau h\,(n_{\mathrm{read}} - n_{\mathrm{norm}}) + [\mathrm{gelu}]\, 6\tau f
        + n_{\mathrm{norm}} n_w \cdot 4h, \qquad \text{full recompute: }
        [\mathrm{fp32\ residual}]\, 2\tau h

    Each ``nn.LayerNorm`` keeps an fp32 copy of its 16-bit input (``layer_norm`` is an fp32 op
    under CUDA's autocast; BLOOM's, the fp32 residual itself), where the 16-bit layer keeps its
    :math:`n_{\mathrm{in}}` distinct 16-bit inputs (2; 1 under a parallel residual), and fp32
    copies of its :math:`n_w` weight vectors (weight and bias: 2; MPT's weight alone: 1);
    ``gelu_new`` keeps its ``pow`` input, ``tanh`` output and ``1 + tanh`` in fp32.  Each
    linear reading a norm's fp32 output keeps its own 16-bit cast (autocast caches casts of
    leaves alone), where the 16-bit layer keeps each norm's 16-bit output once:
    :math:`n_{\mathrm{read}} - n_{\mathrm{norm}}` more (Phi's ``q_proj``, ``k_proj``,
    ``v_proj`` and ``fc1`` on its one norm: 3).  No weight is cast.  A checkpointed layer
    keeps its input: the 16-bit residual, or BLOOM's fp32 one.  :math:`\tau = sb/c`.

    Parameters
    ----------
    recompute : {"none", "full"}
        The layer's recompute [1].
    tanh_gelu : bool
        transformers' ``gelu_new``, whose ``pow`` runs in fp32 [1].
    norms : int
        :math:`n_{\mathrm{norm}}`, the layer's LayerNorms (2; 1 in Phi's parallel block) [1].
    norm_tensors : int
        :math:`n_{\mathrm{in}}`, the norms' distinct 16-bit inputs: 2, or 1 under a parallel
        residual [1].
    readers : int
        :math:`n_{\mathrm{read}}`, the linears reading the norms' outputs [1].
    norm_weights : int
        :math:`n_w`, the h-wide parameter vectors of a norm (2 weight and bias, 1 weight) [1].
    fp32_residual : bool
        BLOOM's residual stream, fp32 after its embedding's norm [1].

    Examples
    --------
    GPT-2 small (h = 768, f = 3072) at s = 1024, b = 4: 4 tau h + 6 tau f + 16 h.

    >>> autocast16_layer_excess(tanh_gelu=True).evaluate(s=1024, b=4, c=1, h=768, f=3072) == (
    ...     4 * 4096 * 768 + 6 * 4096 * 3072 + 16 * 768)
    True

    Pythia-1B (h = 2048, parallel residual) at s = 2048, b = 1: 6 tau h + 16 h.

    >>> autocast16_layer_excess(norm_tensors=1).evaluate(s=2048, b=1, c=1, h=2048) == (
    ...     6 * 2048 * 2048 + 16 * 2048)
    True
    >>> autocast16_layer_excess("full").expr
    0

    MPT-7B (h = 4096, weight-only norms) at s = 2048, b = 1: 4 tau h + 8 h; BLOOM checkpointed.

    >>> autocast16_layer_excess(norm_weights=1).evaluate(s=2048, b=1, c=1, h=4096) == (
    ...     4 * 2048 * 4096 + 8 * 4096)
    True
    >>> autocast16_layer_excess("full", fp32_residual=True).expr
    2*b*h*s/c

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/gpt2/modeling_gpt2.py:254-256``,
       :276, :307, :241-243; ``activations.py:65-66``; ``models/gpt_neox/modeling_gpt_neox.py:
       232-233``, :250, :261, :266; ``models/phi/modeling_phi.py:258``, :274, :190-192, :247;
       ``models/stablelm/modeling_stablelm.py:327-330``, :346, :359-370, :267-269, :152;
       ``models/gptj/modeling_gptj.py:213``, :141-143, :202; ``models/codegen/modeling_codegen
       .py:212``, :138, :201; ``models/gpt_bigcode/modeling_gpt_bigcode.py:266-270``, :203,
       :253; ``models/starcoder2/modeling_starcoder2.py:212-213``, :171-173, :63;
       ``models/opt/modeling_opt.py:197-202``, :218, :153-157, :242-244;
       ``models/falcon/modeling_falcon.py:371-381``, :396-420, :296, :352;
       ``models/bloom/modeling_bloom.py:373-398``, :310, :340, :258, :327;
       ``models/mpt/modeling_mpt.py:165-174``, :193-207, :98, :150; measured in
       ``tests/test_autocast_16bit.py``.
    .. [pytorch-autocast] torch 2.13 ``aten/src/ATen/autocast_mode.h:870``, :874
       (``AT_FORALL_FP32``: ``pow``, ``layer_norm``); ``tools/autograd/derivatives.yaml``
       (``native_layer_norm``: input, weight, bias kept).
    """
    tok, _ = token_split(False)
    if recompute == "full":
        return Term("autocast16_checkpoint", 2 * tok * h if fp32_residual else sp.Integer(0),
                    "the checkpointed layer input: " + ("BLOOM's fp32 residual beside the 16-bit "
                    "one kept without autocast" if fp32_residual else "the 16-bit residual, "
                    "as without autocast"), _LAYERNORM16, label="autocast 16-bit checkpoint")
    gelu = 3 * 2 * tok * f if tanh_gelu else 0
    return Term("autocast16_layer", norms * 4 * tok * h - norm_tensors * 2 * tok * h
                + 2 * tok * h * (readers - norms) + gelu + norms * norm_weights * 4 * h,
                f"autocast over 16-bit weights: the {norms} LayerNorm(s)' fp32 copies of their "
                f"input (beyond the {norm_tensors} 16-bit input(s) kept without autocast), "
                f"weights and biases, {readers - norms} more 16-bit casts of their fp32 outputs"
                + (", gelu_new's fp32 pow input, tanh and 1 + tanh" if tanh_gelu else ""),
                _LAYERNORM16, label="autocast fp32 LayerNorms")


def autocast16_qk_norms(recompute: str = "none") -> Term:
    r"""What Phi's ``qk_layernorm`` keeps under CUDA's autocast over 16-bit weights beyond its own.

    Per layer [bytes], beyond the same layer without autocast:

    .. math::

        \text{kept: } 2\tau (a + g) d_h + 2 \cdot 8 d_h, \qquad \text{full recompute: } 0

    ``q_layernorm`` and ``k_layernorm`` (``nn.LayerNorm`` of :math:`d_h`, weight and bias) run
    in fp32 on the 16-bit outputs of ``q_proj`` and ``k_proj``: each keeps an fp32 copy of its
    input (4 bytes an element where the 16-bit layer keeps the 16-bit input, 2) and of its
    weight and bias.  Their fp32 outputs go through the partial rotary (``q * cos``, fp32 by
    promotion, keeps only ``cos`` for the backward) and ``torch.cat``, and SDPA keeps its own
    16-bit casts of them, as many bytes as the 16-bit layer's q and k.  :math:`\tau = sb/c`.

    Parameters
    ----------
    recompute : {"none", "full"}
        The layer's recompute [1].

    Examples
    --------
    Phi-2's shape (h = 2560, 32 heads of 80) with qk_layernorm at s = 2048, b = 1:

    >>> autocast16_qk_norms().evaluate(s=2048, b=1, c=1, a=32, g=32, d_h=80) == (
    ...     2 * 2048 * 64 * 80 + 16 * 80)
    True

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/phi/modeling_phi.py:170-176``
       (``nn.LayerNorm(hidden_size // num_attention_heads)``), :190-196, :199-213 (partial
       rotary, ``torch.cat``), :218-227 (SDPA); measured in ``tests/test_autocast_16bit.py``.
    .. [pytorch-autocast] torch 2.13 ``aten/src/ATen/autocast_mode.h:874``;
       ``tools/autograd/derivatives.yaml`` (``native_layer_norm``: input, weight, bias kept).
    """
    tok, _ = token_split(False)
    if recompute == "full":
        return Term("autocast16_qk_norms", sp.Integer(0), "recomputed in the backward",
                    _QK_NORMS, label="autocast fp32 q/k LayerNorms")
    return Term("autocast16_qk_norms", 2 * tok * (a + g) * d_h + 2 * 8 * d_h, "Phi's q and k "
                "LayerNorms' fp32 copies of their 16-bit inputs, weights and biases under "
                "autocast over 16-bit weights", _QK_NORMS, label="autocast fp32 q/k LayerNorms")


def autocast16_input(recompute: str = "none", *, frozen: bool = False) -> Term:
    r"""What BLOOM's input side keeps under CUDA's autocast over 16-bit weights beyond its own.

    [bytes], beyond the same model without autocast:

    .. math:: 2\tau h + 8h + [\mathrm{full\ recompute}]\; 2 a \tau
        + [\mathrm{PEFT}]\; 2\tau h \quad [\text{bytes}]

    ``word_embeddings_layernorm`` keeps an fp32 copy of the 16-bit embedding (4 bytes an
    element where the 16-bit model keeps 2) and of its weight and bias; its fp32 output is
    the residual stream, and the alibi built in its dtype is fp32 (:math:`b \cdot a \cdot s`
    elements, 4 bytes where the 16-bit model's are 2), freed at the forward's end unless the
    layers are checkpointed: every checkpoint holds it (one tensor) until its backward.  Under
    PEFT (``frozen``) the embedding's output is the leaf ``enable_input_require_grads`` makes
    it, held by its gradient's accumulator: the 16-bit tensor stays beside the fp32 copy
    (without autocast the norm keeps that leaf itself).  :math:`\tau = sb/c`.

    Parameters
    ----------
    recompute : {"none", "full"}
        The layers' recompute [1].
    frozen : bool
        PEFT's frozen embedding, its output made to require a gradient [1].

    Examples
    --------
    BLOOM-560m (h = 1024, 16 heads) at s = 2048, b = 1, checkpointed:

    >>> autocast16_input("full").evaluate(s=2048, b=1, c=1, h=1024, a=16) == (
    ...     2 * 2048 * 1024 + 8 * 1024 + 2 * 16 * 2048)
    True

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/bloom/modeling_bloom.py:425``,
       :500 (``word_embeddings_layernorm``), :515, :90 (``build_alibi_tensor(...,
       dtype=hidden_states.dtype)``), :528-535 (alibi an input of every layer);
       ``modeling_layers.py`` (``GradientCheckpointingLayer``: the layer's arguments held by
       ``torch.utils.checkpoint``); ``modeling_utils.py:3192-3200`` (checkpointing calls
       ``enable_input_require_grads``); measured in ``tests/test_autocast_16bit.py``.
    .. [pytorch-autocast] torch 2.13 ``aten/src/ATen/autocast_mode.h:874``.
    """
    tok, _ = token_split(False)
    alibi = 2 * a * tok if recompute == "full" else 0
    leaf = 2 * tok * h if frozen else 0
    return Term("autocast16_input", 2 * tok * h + 8 * h + alibi + leaf, "BLOOM's embedding "
                "LayerNorm's fp32 copies of its 16-bit input, weight and bias" + (
                    ", the fp32 alibi the checkpoints hold" if alibi else "") + (
                    ", beside the 16-bit input PEFT's gradient leaf keeps" if frozen else ""),
                _LAYERNORM16, label="autocast fp32 embedding LayerNorm")


def autocast16_output(norm_weights: int = 2) -> Term:
    r"""What the final LayerNorm keeps under CUDA's autocast over 16-bit weights beyond its own.

    [bytes], beyond the same model without autocast:

    .. math:: 2\tau h + n_w \cdot 4h \quad [\text{bytes}]

    Its fp32 copy of the 16-bit residual (4 bytes an element where the 16-bit model keeps 2;
    BLOOM's residual is fp32 already, the same bytes), and of its :math:`n_w` weight vectors;
    the output layer casts its fp32 output to the 16-bit tensor the 16-bit model keeps, its
    own weight not cast.  :math:`\tau = sb/c`.

    Parameters
    ----------
    norm_weights : int
        :math:`n_w`, the norm's h-wide parameter vectors (2 weight and bias, 1 weight) [1].

    Examples
    --------
    >>> autocast16_output().evaluate(s=1024, b=4, c=1, h=768) == 2 * 4096 * 768 + 8 * 768
    True

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/gpt2/modeling_gpt2.py:619``
       (``ln_f``); ``models/gpt_neox/modeling_gpt_neox.py:357`` (``final_layer_norm``);
       ``models/phi/modeling_phi.py:381``; ``models/stablelm/modeling_stablelm.py:469``;
       ``models/bloom/modeling_bloom.py:542``; ``models/mpt/modeling_mpt.py:240-242``, :347.
    .. [pytorch-autocast] torch 2.13 ``aten/src/ATen/autocast_mode.h:874``.
    """
    tok, _ = token_split(False)
    return Term("autocast16_output", 2 * tok * h + norm_weights * 4 * h, "the final LayerNorm's "
                "fp32 copies of its 16-bit input and weights under autocast over 16-bit weights",
                _LAYERNORM16, label="autocast fp32 final LayerNorm")
