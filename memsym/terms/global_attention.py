"""A global attention layer's activations: Gemma 4's full-attention layers, the model's
attention at their own head width and KV heads (``global_head_dim``,
``num_global_key_value_heads`` or ``per_layer_config``), measured on transformers'
``Gemma4TextDecoderLayer`` (``tests/test_hf_gemma4.py``)."""

from __future__ import annotations

import sympy as sp

from ..symbols import a, b, c, d_h, d_hg, g, g_g, s, t
from ..term import Source, Term
from ..values import as_expr  # library arguments: text refused, never parsed

__all__ = ["GLOBAL_SHAPES", "SDPA_GQA_MAX_HEAD_DIM", "as_global", "sdpa_repeated_kv"]

#: A global attention layer (Gemma 4's full-attention layers) is the model's attention at its
#: own head width and KV heads: its terms with d_h and g read as d_hg and g_g.
GLOBAL_SHAPES = {d_h: d_hg, g: g_g}


def as_global(expr) -> sp.Expr:
    r"""``expr`` [bytes] of an attention layer at a global layer's head width and KV heads.

    .. math:: A_{\mathrm{glb}} = A_{\mathrm{attn}}\big|_{d_h \to d_{hg},\; g \to g_g}

    Gemma4TextAttention builds each layer from ``config.per_layer_config[layer_idx]``'s
    head_dim and num_key_value_heads, its q, k, v, norms and attention the model's at those
    sizes.

    References
    ----------
    transformers 5.25.0 ``models/gemma4/modeling_gemma4.py``, ``Gemma4TextAttention``
    (hf-transformers-5-25).

    Examples
    --------
    >>> from memsym.symbols import b, s
    >>> as_global(2 * s * b * g * d_h)
    2*b*d_hg*g_g*s
    """
    return as_expr(expr).xreplace(GLOBAL_SHAPES)


#: transformers 5.25.0 ``integrations/sdpa_attention.py`` lines 42-51 (``use_gqa_in_sdpa``):
#: SDPA takes the KV heads as they are (``enable_gqa``) only for head widths up to 256; wider
#: heads (Gemma 4's 512-wide global layers) get ``repeat_kv``'s copies of a heads.
SDPA_GQA_MAX_HEAD_DIM = 256


def sdpa_repeated_kv(width: int = 2) -> Term:
    r"""What a global layer wider than SDPA's GQA limit keeps beyond its KV heads [bytes].

    ``sdpa_attention_forward`` expands keys and values to the :math:`a` query heads with
    ``repeat_kv`` (an expand, then a reshape that copies) when ``use_gqa_in_sdpa`` is false, as
    it is for head widths above 256; SDPA then saves the two expanded copies in place of the
    :math:`g_g`-head keys and values its attention term counts.  Of one KV head
    (:math:`g_g = 1`) the reshape is a view of the keys (a size-1 dimension beside the
    stride-0 one), no copy: 0 there.  Per layer and micro-batch,
    :math:`\tau = sb/c`:

    .. math:: \Delta = 2 w \tau d_{hg} (a - g_g) / t

    Parameters
    ----------
    width : {2, 4}
        Bytes of an element of the compute dtype [bytes/element].

    Returns
    -------
    Term
        ``sdpa_repeated_kv``, per global layer and micro-batch, per GPU [bytes].

    References
    ----------
    transformers 5.25.0 ``integrations/sdpa_attention.py`` lines 42-51 (``use_gqa_in_sdpa``)
    and lines 19-28, 127-128 (``repeat_kv``) (hf-transformers-5-25); measured on a 512-wide
    ``Gemma4TextDecoderLayer`` (``tests/test_gemma4_moe.py``).

    Examples
    --------
    >>> sdpa_repeated_kv().evaluate(s=8, b=1, c=1, t=1, d_hg=512, a=16, g_g=2)
    229376
    """
    expr = 2 * width * s * b / c * d_hg * (a - g_g) / t
    return Term("sdpa_repeated_kv", expr, "the repeat_kv copies of keys and values SDPA saves "
                "for heads wider than 256", Source(
                    "hf-transformers-5-25", "integrations/sdpa_attention.py:42-51 "
                    "use_gqa_in_sdpa (head dim <= 256); repeat_kv :19-28, :127-128"),
                label="sdpa repeated kv")
