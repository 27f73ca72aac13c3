r"""What transformers' own norms keep beyond memsym's norm, under a framework that trains them.

memsym counts a norm as Megatron's fused kernel keeps it: its 16-bit input and fp32
statistics, :math:`2\tau h/\sigma + 4\tau/\sigma` (RMSNorm).  Hugging Face transformers'
``LlamaRMSNorm`` (``modeling_llama.py`` lines 62-67) runs::

    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states.to(input_dtype)

``to`` keeps nothing; ``pow(2)`` keeps its input, the fp32 copy; ``mean`` and ``+ eps`` keep
nothing; ``rsqrt`` keeps its output, the fp32 statistic; ``x * rsqrt`` keeps both again (one
storage each); ``weight *`` keeps the 16-bit normalised tensor (the weight is a parameter).
The norm's 16-bit input is kept by none of them.  Per norm of width w over :math:`\tau` tokens
that is :math:`6\tau w + 4\tau`, against memsym's :math:`2\tau w + 4\tau`:

.. math::

    \Delta_{\mathrm{copy}} = 4\tau w \quad [\text{bytes}]

(the fp32 copy in place of the 16-bit input, :math:`+2\tau w`, and the normalised tensor,
:math:`+2\tau w`), ``norm_fp32_input`` for the layer's main norms and post-norms
(:math:`w = h`), ``qk_norm_fp32_input`` for the per-head Q and K norms (:math:`w = d_h` over
:math:`(a + g)/t` heads; over the whole projection the same :math:`(a + g) d_h`) and
``mla_latent_norm_fp32_input`` for MLA's ``q_a_layernorm`` and ``kv_a_layernorm``
(:math:`w = r_q + r_{kv}`; their fp32 statistics, :math:`4\tau` each, memsym leaves out under
every framework).  Every
RMSNorm class of the transformer families memsym reads starts with the same fp32 copy
(Qwen2/3, Mistral, Mixtral, Phi-3, DeepSeek, GLM-4, ...: the same code; Gemma's below keeps the
copy too).  ``nn.LayerNorm`` in 16 bits (``native_layer_norm``) keeps its 16-bit input and fp32
mean and 1/σ, as memsym counts: no copy.  Three things beyond the copy are counted here.

**Norms scaled by 1 + weight in fp32** (``GemmaRMSNorm``, ``Gemma2RMSNorm``,
``Gemma3RMSNorm``, ``Qwen3NextRMSNorm``): ``output = self._norm(x.float()); output = output *
(1.0 + self.weight.float()); return output.type_as(x)`` (transformers 5.25.0
``modeling_gemma3.py`` lines 128-133, ``modeling_qwen3_next.py`` 135-140).  ``x.pow(2)`` and
``x * rsqrt(...)`` keep the fp32 copy and the fp32 ``rsqrt`` (the statistics; ``mean`` and the
``+ eps`` keep nothing), the ``(1 + weight)`` multiply keeps its two operands: the fp32
normalised tensor, 4 bytes an element where Llama's 16-bit one is 2, and ``1 + weight``, a fresh
fp32 tensor of the norm's width (``type_as`` keeps nothing).  Per norm of width w over
:math:`\tau` tokens:

.. math::

    \Delta_{\mathrm{fp32}} = 2\tau w + 4w \quad [\text{bytes}]

On Q and K (per head, :math:`w = d_h` over :math:`(a + g)/t` heads) that is
``qk_norm_fp32_output``; on the decoder layer's main norms (:math:`w = h`) ``norm_fp32_output``.

**Post-norms** (Gemma 2/3's ``post_attention_layernorm`` and ``post_feedforward_layernorm``,
GLM-4's ``post_self_attn_layernorm`` and ``post_mlp_layernorm``: ``Gemma3DecoderLayer.forward``
lines 394 and 400 normalise the attention and MLP outputs before the residual add) are two
norms more per layer than the two pre-norms memsym's layer holds: each keeps its input and its
statistics, :math:`2\tau h/\sigma + 4\tau/\sigma`; their outputs go to the residual add, which
keeps nothing (``post_norms``).

The model's final norm is the layers' class (``Gemma3TextModel.norm``, ``Olmo2Model.norm``,
``NemotronHModel.norm_f``, ...): beyond Llama's :math:`6\tau h` it keeps what the class keeps
beyond Llama's (``final_norm_excess``).

The pre-norm of a hybrid model's Mamba layer is its RMSNorm class too (``NemotronHBlock.norm``,
``Zamba2MambaDecoderLayer.input_layernorm``, Bamba's ``input_layernorm``) and keeps the same
(:mod:`memsym.terms.mamba`); the Mamba2 mixer's gated norm does not: in training transformers
hands its weight to mamba_ssm's fused ``mamba_split_conv1d_scan_combined`` (``rmsnorm_weight=
self.norm.weight``, ``modeling_nemotron_h.py`` lines 670-690), whose Triton norm keeps its
rstd, no fp32 copy.  That assumes the fused kernel is there (the Hub kernel or mamba_ssm,
lines 542-564); without either the function is a stub returning None and the mixer runs its
torch path (lines 692-693, from 699 on), which keeps far more than counted here.

Measured on transformers' ``LlamaDecoderLayer``, ``Qwen2DecoderLayer`` and ``Qwen3DecoderLayer``
in ``tests/test_hf_activations.py``, on ``Gemma3DecoderLayer``, ``Qwen3NextDecoderLayer``,
``Glm4DecoderLayer`` and ``DeepseekV3Attention`` in ``tests/test_hf_norms.py``.

References
----------
.. [hf-transformers-5-25] transformers 5.25.0 ``models/llama/modeling_llama.py``,
   ``models/gemma3/modeling_gemma3.py``,
   ``models/qwen3_next/modeling_qwen3_next.py``.
"""

from __future__ import annotations

from ..symbols import a, d_h, g, h, t
from ..term import Source, Term

__all__ = ["final_norm_excess", "fp32_input_copies", "fp32_scale_qk_norms", "fp32_scale_norms",
           "post_norms"]

_G3 = "models/gemma3/modeling_gemma3.py "
_LLAMA_NORM = ("models/llama/modeling_llama.py LlamaRMSNorm.forward (lines 64-67: "
               "hidden_states.to(torch.float32), kept by pow(2) and by the rsqrt multiply; "
               "self.weight * hidden_states.to(input_dtype) keeps the 16-bit normalised tensor)")
_PRODUCT_NORM = ("models/olmo2/modeling_olmo2.py Olmo2RMSNorm.forward (lines 58-63: the fp32 "
                 "copy kept by pow(2) and the rsqrt multiply; (self.weight * hidden_states) keeps "
                 "the fp32 normalised tensor); the same in GptOssRMSNorm, Olmo3RMSNorm, "
                 "FlexOlmoRMSNorm")
_Q3N = "models/qwen3_next/modeling_qwen3_next.py "
_NORM = ("RMSNorm.forward: output * (1.0 + self.weight.float()), then type_as(x) (" + _G3
         + "Gemma3RMSNorm lines 128-133; " + _Q3N + "Qwen3NextRMSNorm lines 135-140; "
         "VaultGemmaRMSNorm); HeliumRMSNorm and NemotronHRMSNorm: self.weight.to(torch.float32) "
         "* hidden_states, the same bytes")
_Q3N_QK = Source("hf-transformers-5-25", _Q3N + "Qwen3NextRMSNorm.forward (lines 135-140: "
                 "output * (1.0 + self.weight.float()), then type_as(x)); Qwen3NextAttention."
                 "__init__ (q_norm, k_norm of head_dim)")
_G3_QK = Source("hf-transformers-5-25", _G3 + "Gemma3RMSNorm.forward (lines 128-133: output * "
                "(1.0 + self.weight.float()), then type_as(x)); Gemma3Attention (q_norm, k_norm "
                "of head_dim, lines 310-311, 329-330)")


def fp32_input_copies(tok, sig, n_norms, qk_norm=False, latent_rank=0, *,
                      product: bool = False, width: int = 2) -> list:
    r"""What transformers' RMSNorms keep beyond memsym's 16-bit norms: their fp32 copies [bytes].

    .. math::

        n\,\frac{k\tau h}{\sigma} \;\text{and, with Q and K norms,}\;
        \frac{k\tau (a + g) d_h}{t} \;\text{or, with MLA's latent norms,}\; k\tau r

    with :math:`k = 4`, or :math:`k = 6` with ``product``: ``(self.weight * hidden_states)
    .to(input_dtype)`` (``GptOssRMSNorm``, ``Olmo2RMSNorm``, ``Olmo3RMSNorm``,
    ``FlexOlmoRMSNorm``) multiplies the 16-bit weight into the fp32 normalised tensor, which the
    multiply keeps in fp32, :math:`4\tau w` where Llama's 16-bit one is :math:`2\tau w` (the
    weight is a parameter, not counted).

    Parameters
    ----------
    tok : sympy.Expr
        Tokens of one micro-batch on this context-parallel rank, :math:`\tau = sb/c` [tokens].
    sig : int or sympy.Expr
        The sequence-parallel divisor :math:`\sigma` [1].
    n_norms : int
        The layer's h-wide norms whose saved tensors stay kept (pre- and post-norms) [norms].
    qk_norm : bool or str
        Norms on Q and K (per head or over the whole projection: the same elements).
    latent_rank : int or sympy.Expr
        :math:`r`, MLA's latent norms' widths together, ``q_lora_rank + kv_lora_rank``
        (``q_a_layernorm``, ``kv_a_layernorm``; replicated over t; 0 without them) [elements].
    product : bool
        The norm multiplies the weight in fp32 (the fp32 normalised tensor kept).
    width : {2, 4}
        Bytes of the layer's tensors in its compute dtype (4 training in fp32) [bytes/element].

    Returns
    -------
    list of Term
        ``norm_fp32_input`` and, with Q and K norms, ``qk_norm_fp32_input``, with latent
        norms ``mla_latent_norm_fp32_input``.

    Examples
    --------
    >>> from memsym.symbols import s, b
    >>> [x.expr for x in fp32_input_copies(s * b, 1, 2, qk_norm=True)]
    [8*b*h*s, 4*b*d_h*s*(a + g)/t]
    >>> [x.expr for x in fp32_input_copies(s * b, 1, 2, qk_norm=True, product=True)]
    [12*b*h*s, 6*b*d_h*s*(a + g)/t]

    References
    ----------
    hf-transformers-5-25: transformers 5.25.0 ``modeling_llama.py`` ``LlamaRMSNorm.forward``
    (lines 62-67); ``modeling_olmo2.py`` ``Olmo2RMSNorm.forward`` (lines 58-63).
    """
    src = Source("hf-transformers-5-25", _PRODUCT_NORM if product else _LLAMA_NORM)
    # the fp32 copy (4 bytes) and the normalised tensor (4 with the product, else the compute
    # width) in place of memsym's input at the compute width: in fp32 the copy is the input
    # itself (``to`` returns it), the multiply keeps it all the same
    k = 4 + (4 if product else width) - width
    what = "fp32" if product or width == 4 else "16-bit"
    wanted = (("norm_fp32_input", n_norms * k * tok * h / sig, bool(n_norms),
               f"{n_norms} transformers RMSNorms: the fp32 copy of each input (kept in place of "
               "the 16-bit input)"),
              ("qk_norm_fp32_input", k * tok * (a + g) * d_h / t, bool(qk_norm),
               "transformers RMSNorms on Q and K: the fp32 copy of each input"),
              ("mla_latent_norm_fp32_input", k * tok * latent_rank, bool(latent_rank),
               "transformers RMSNorms on MLA's latents (q_a_layernorm, kv_a_layernorm): the fp32 "
               "copy of each input"))
    return [_copy_term(key, expr, whose, what, src) for key, expr, on, whose in wanted if on]


def _copy_term(key: str, expr, whose: str, what: str, src: Source) -> Term:
    """One group of RMSNorms' fp32 input copies and ``what`` normalised tensors [bytes]."""
    return Term(key, expr, f"{whose} and the {what} normalised tensor", src,
                label=key.replace("_", " "))


def fp32_scale_qk_norms(tok, *, qwen3_next: bool = False, width: int = 2) -> Term:
    r"""What Q and K norms scaling by 1 + weight in fp32 keep beyond a 16-bit norm [bytes].

    .. math:: \frac{2\tau (a + g) d_h}{t} + 2 \cdot 4 d_h

    Parameters
    ----------
    tok : sympy.Expr
        Tokens of one micro-batch on this context-parallel rank, :math:`\tau = sb/c` [tokens].
    qwen3_next : bool
        Cite ``Qwen3NextRMSNorm`` (else ``Gemma3RMSNorm``).
    width : {2, 4}
        Bytes of the layer's tensors in its compute dtype (4 training in fp32) [bytes/element].

    Examples
    --------
    >>> from memsym.symbols import s, b
    >>> fp32_scale_qk_norms(s * b).expr
    2*b*d_h*s*(a + g)/t + 8*d_h

    References
    ----------
    hf-transformers-5-25: transformers 5.25.0 ``modeling_gemma3.py`` 128-133,
    ``modeling_qwen3_next.py`` 135-140.
    """
    return _scale_term("qk_norm_fp32_output", tok * (a + g) * d_h / t, 2 * d_h,
                       "Q and K norms", "Q and K", "4 d_h per norm",
                       _Q3N_QK if qwen3_next else _G3_QK, width)


def fp32_scale_norms(tok, sig, n_norms, width: int = 2) -> Term:
    r"""What ``n_norms`` main norms scaling by 1 + weight in fp32 keep beyond 16-bit ones [bytes].

    .. math:: n \left(\frac{2\tau h}{\sigma} + 4h\right)

    Parameters
    ----------
    tok : sympy.Expr
        Tokens of one micro-batch on this context-parallel rank, :math:`\tau = sb/c` [tokens].
    sig : int or sympy.Expr
        The sequence-parallel divisor :math:`\sigma` [1].
    n_norms : int
        Norms of the layer whose products stay saved [norms].
    width : {2, 4}
        Bytes of the layer's tensors in its compute dtype (4 training in fp32) [bytes/element].

    Examples
    --------
    >>> from memsym.symbols import s, b
    >>> fp32_scale_norms(s * b, 1, 4).expr
    8*b*h*s + 16*h

    References
    ----------
    hf-transformers-5-25: transformers 5.25.0 ``modeling_gemma3.py`` 128-133,
    ``modeling_qwen3_next.py`` 135-140.
    """
    return _scale_term("norm_fp32_output", n_norms * tok * h / sig, n_norms * h,
                       f"{n_norms} norms", "output", "4h per norm",
                       Source("hf-transformers-5-25", _NORM), width)


def _scale_term(key: str, elems, weights, whose: str, what: str, per: str, src: Source,
                width: int = 2) -> Term:
    """What norms scaling by a fresh fp32 weight keep beyond ones at the compute ``width``:
    their ``elems`` normalised elements at 4 bytes, not ``width``, and ``weights`` fp32 weight
    elements [bytes]."""
    why = f"(4 bytes, not {width})" if width != 4 else "(fp32 as the layer's)"
    return Term(key, (4 - width) * elems + 4 * weights,
                f"{whose} scaling by 1 + weight in fp32: the fp32 normalised {what} the multiply "
                f"keeps {why} and 1 + weight ({per})", src, label=key.replace("_", " "))


def post_norms(tok, sig, stat_bytes, width: int = 2) -> Term:
    r"""The inputs and statistics of a layer's two post-norms [bytes].

    .. math:: 2 \left(\frac{2\tau h}{\sigma} + \frac{\beta\tau}{\sigma}\right)

    Parameters
    ----------
    tok : sympy.Expr
        Tokens of one micro-batch on this context-parallel rank, :math:`\tau = sb/c` [tokens].
    sig : int or sympy.Expr
        The sequence-parallel divisor :math:`\sigma` [1].
    stat_bytes : int
        :math:`\beta`, fp32 statistics per token of one norm (RMSNorm 4, LayerNorm 8, 0 when
        left out) [bytes].
    width : {2, 4}
        Bytes of the layer's tensors in its compute dtype (4 training in fp32) [bytes/element].

    Examples
    --------
    >>> from memsym.symbols import s, b
    >>> post_norms(s * b, 1, 4).expr
    4*b*h*s + 8*b*s

    References
    ----------
    hf-transformers-5-25: transformers 5.25.0 ``modeling_gemma3.py``
    ``Gemma3DecoderLayer.forward`` (lines 394, 400); ``modeling_glm4.py``
    ``Glm4DecoderLayer.forward`` (lines 103, 109).
    """
    return Term("post_norms", 2 * (width * tok * h + stat_bytes * tok) / sig,
                "inputs and fp32 statistics of the post-attention and post-MLP norms (the "
                "outputs go to the residual add, which keeps nothing)",
                Source("hf-transformers-5-25", _G3 + "Gemma3DecoderLayer.forward (lines 394, "
                       "400: post_attention_layernorm, post_feedforward_layernorm before the "
                       "residual adds); models/glm4/modeling_glm4.py Glm4DecoderLayer.forward "
                       "(lines 103, 109)"), label="post norms")


_FINAL = ("the final norm (Gemma3TextModel.norm, models/gemma3/modeling_gemma3.py line 473; "
          "Qwen3NextModel.norm, modeling_qwen3_next.py 1068; NemotronHModel.norm_f, "
          "modeling_nemotron_h.py 1177; GemmaRMSNorm, Gemma2RMSNorm, VaultGemmaRMSNorm, "
          "HeliumRMSNorm)")
_FINAL_PRODUCT = ("models/olmo2/modeling_olmo2.py Olmo2Model.norm (line 345), Olmo2RMSNorm."
                  "forward (line 63: (self.weight * hidden_states).to(input_dtype), the fp32 "
                  "product kept); GptOssModel.norm (modeling_gpt_oss.py 422), Olmo3Model.norm "
                  "(modeling_olmo3.py 370), FlexOlmoModel.norm (modeling_flex_olmo.py 428)")


def final_norm_excess(tok, sig, *, scale: bool = False, product: bool = False,
                      width: int = 2) -> list:
    r"""What a transformers model's final norm keeps beyond Llama's ``LlamaRMSNorm`` [bytes].

    Llama's keeps :math:`6\tau h/\sigma` and its statistics
    (:func:`memsym.terms.activations.output_activations`, ``fp32_norm="transformers"``); a
    final norm of the model's own class keeps, as the layer's norms of that class,

    .. math::

        \frac{2\tau h}{\sigma} + 4h \;\text{(scale)}, \qquad
        \frac{2\tau h}{\sigma} \;\text{(product)}

    more: the fp32 normalised tensor (4 bytes, not 2) and, scaling by a fresh fp32 weight
    (``1 + weight.float()``, ``weight.to(torch.float32)``), that weight.

    Parameters
    ----------
    tok : sympy.Expr
        Tokens of one micro-batch on this context-parallel rank, :math:`\tau = sb/c` [tokens].
    sig : int or sympy.Expr
        The sequence-parallel divisor :math:`\sigma` [1].
    scale : bool
        The norm scales by a fresh fp32 weight (the architecture's ``norm_fp32_scale``).
    product : bool
        The norm multiplies its 16-bit weight in fp32 (``norm_fp32_product``).
    width : {2, 4}
        Bytes of the layer's tensors in its compute dtype (4 training in fp32) [bytes/element].

    Returns
    -------
    list of Term
        ``final_norm_fp32_output`` or ``final_norm_fp32_product``; none for Llama's class.

    Examples
    --------
    >>> from memsym.symbols import s, b
    >>> [x.expr for x in final_norm_excess(s * b, 1, scale=True)]
    [2*b*h*s + 4*h]
    >>> [x.expr for x in final_norm_excess(s * b, 1, product=True)]
    [2*b*h*s]

    References
    ----------
    hf-transformers-5-25: transformers 5.25.0 ``modeling_gemma3.py`` 128-133 and 473,
    ``modeling_olmo2.py`` 58-63 and 345.
    """
    if scale:
        return [_scale_term("final_norm_fp32_output", tok * h / sig, h, "the final norm",
                            "output", "4h", Source("hf-transformers-5-25", _NORM + "; " + _FINAL),
                            width)]
    if product and width != 4:
        return [Term("final_norm_fp32_product", (4 - width) * tok * h / sig, "the final norm's "
                     f"fp32 weight * product (4 bytes, not Llama's {width})",
                     Source("hf-transformers-5-25", _FINAL_PRODUCT),
                     label="final norm fp32 product")]
    return []
