"""A global attention layer's activations: Gemma 4's full-attention layers, the model's
attention at their own head width and KV heads (``global_head_dim``,
``num_global_key_value_heads`` or ``per_layer_config``), measured on transformers'
``Gemma4TextDecoderLayer`` (``tests/test_hf_gemma4.py``)."""

from __future__ import annotations

import sympy as sp

from ..symbols import d_h, d_hg, g, g_g
from ..values import as_expr  # library arguments: text refused, never parsed

__all__ = ["GLOBAL_SHAPES", "as_global"]

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
