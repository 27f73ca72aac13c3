"""Layers that reuse an earlier layer's keys and values (Gemma 4's ``num_kv_shared_layers``):
their attention parameters, the ``"kv_reuse"`` and ``"global_kv_reuse"`` entries of
``layer_mixers``."""

from __future__ import annotations

import sympy as sp

from .architecture import Architecture, norm_params
from ..symbols import d_h, d_hg, g, g_g, h

__all__ = ["KV_REUSE_MIXERS", "kv_reuse_parts"]

#: The KV-reusing mixers and the mixer each reuses the keys and values of.
KV_REUSE_MIXERS = {"kv_reuse": "attention", "global_kv_reuse": "global"}


def kv_reuse_parts(x: Architecture, base: tuple, glob: bool = False) -> tuple:
    r"""The attention parameters of a layer reusing an earlier layer's keys and values, as
    (TP-sharded, TP-replicated) expressions: its base layer's less the key and value
    projections and the key norm.

    .. math::
        P_{\mathrm{kvr}} = P_{\mathrm{base}} - n_{kv}\,h\,g d_h - [\mathrm{bias}]\,n_{kv}\,g d_h
            - \eta\,d_h

    (:math:`n_{kv}` = 2, or 1 for a global layer whose keys are its values,
    ``attention_k_eq_v``; a global layer's :math:`g_g, d_{hg}` for :math:`g, d_h`).

    Parameters
    ----------
    x : Architecture
        The model (per-head q/k norms: :func:`memsym.model.architecture.resolve` refuses
        another).
    base : tuple of sympy.Expr
        The base layer's (TP-sharded, replicated) attention parameters [parameters].
    glob : bool
        A global layer (``"global_kv_reuse"``).

    Returns
    -------
    tuple of sympy.Expr
        (TP-sharded, replicated) [parameters].

    References
    ----------
    transformers 5.25.0 ``models/gemma4/modeling_gemma4.py`` lines 1160-1189
    (``Gemma4TextAttention.__init__``: a ``"reuse"`` layer of ``config.kv_sharing_modes``
    builds q_proj, q_norm and o_proj alone) (hf-transformers-5-25).

    Examples
    --------
    >>> arch = Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...     normalization="RMSNorm", add_bias_linear=False, qk_layernorm=True,
    ...     layer_mixers=("attention", "kv_reuse"))
    >>> kv_reuse_parts(arch, (2 * h * 2 * d_h + 2 * h * g * d_h, 2 * d_h))
    (4*d_h*h, d_h)
    """
    tp, rep = base
    bias = bool(x.add_bias_linear if x.attention_bias is None else x.attention_bias) \
        or x.add_qkv_bias
    kv = 1 if glob and not x.global_v_proj else 2
    heads, width = (g_g, d_hg) if glob else (g, d_h)
    tp = tp - kv * h * heads * width - (kv * heads * width if bias else 0)
    return sp.expand(tp), sp.expand(rep - norm_params(x) * width)
