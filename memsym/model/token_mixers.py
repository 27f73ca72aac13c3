"""Token mixers other than attention and Mamba: one mixer's parameters, and the sizes they read.

Qwen3-Next interleaves Gated DeltaNet layers (Yang, Kautz & Hatamizadeh 2024, *Gated Delta
Networks: Improving Mamba2 with Delta Rule*, arXiv:2412.06464) with gated softmax attention;
LFM2 interleaves gated short convolutions with attention; MiniMax-01 lightning attention
(Qin et al. 2024, arXiv:2401.04658) with softmax attention.  :func:`gdn_parts` and
:func:`conv_parts` count one mixer as transformers' ``Qwen3NextGatedDeltaNet`` and
``Lfm2ShortConv`` build it; :func:`memsym.model.counts.parameter_expression` counts ``L_gdn``
and ``L_conv`` of them.
"""

from __future__ import annotations

import sympy as sp

from .architecture import Architecture, lenient
from .layer_patterns import mixer_layer_count
from ..symbols import B_lin, H_gk, H_gv, a, d_gk, d_gv, d_h, h, k_gdn, k_sc

__all__ = ["gdn_parts", "conv_parts", "lightning_parts", "mixer_values"]


def gdn_parts(x: Architecture) -> tuple:
    r"""One Gated DeltaNet mixer's parameters as (TP-sharded, TP-replicated) expressions.

    .. math::
        P_{\mathrm{gdn}} = h\,(2H_{gk}d_{gk} + 2H_{gv}d_{gv}) + 2hH_{gv}
            + k_{\mathrm{gdn}}(2H_{gk}d_{gk} + H_{gv}d_{gv}) + 2H_{gv} + H_{gv}d_{gv}h
            + d_{gv}

    in_proj_qkvz h -> q, k (H_gk d_gk each), v, z (H_gv d_gv each); in_proj_ba h -> b, a
    (H_gv each); a depthwise causal conv1d of k_gdn taps over q, k, v without bias; dt_bias and
    A_log per value head; out_proj H_gv d_gv -> h; none biased; and the gated RMSNorm
    (``Qwen3NextRMSNormGated(linear_value_head_dim)``): one weight of d_gv shared by the heads,
    replicated.  The projections, the conv and the per-head vectors split with the heads under
    tensor parallelism (derived: the layout Megatron-core's Mamba mixer uses; not checked
    against a Megatron Gated DeltaNet).

    Parameters
    ----------
    x : Architecture
        A model with Gated DeltaNet layers (``layer_mixers`` holding ``"gdn"``).

    Returns
    -------
    tuple of sympy.Expr
        (TP-sharded, replicated) [parameters].

    References
    ----------
    transformers 5.25.0 ``models/qwen3_next/modeling_qwen3_next.py``, ``Qwen3NextGatedDeltaNet``
    (hf-transformers-5-25); Yang et al. 2024, arXiv:2412.06464, §3.

    Examples
    --------
    >>> gdn_parts(Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("gdn",), gdn_key_heads=2,
    ...     gdn_value_heads=4, gdn_key_head_dim=4, gdn_value_head_dim=4))[1]
    d_gv
    """
    del x   # every Gated DeltaNet mixer has the same modules; x keeps the parts' signature
    qk, v = H_gk * d_gk, H_gv * d_gv
    tp = h * (2 * qk + 2 * v) + 2 * h * H_gv + k_gdn * (2 * qk + v) + 2 * H_gv + v * h
    return tp, d_gv


def conv_parts(x: Architecture) -> tuple:
    r"""One short-convolution mixer's parameters as (TP-sharded, TP-replicated) expressions.

    .. math::
        P_{\mathrm{conv}} = 3h^2 + k_{\mathrm{sc}}h + h^2 + [\mathrm{bias}]\,(3h + h + h)

    in_proj h -> B, C, x (3h), a depthwise causal conv1d of k_sc taps over h channels, out_proj
    h -> h, each biased iff ``short_conv_bias`` (``conv_bias``).  in_proj and the conv split
    with the channels under tensor parallelism, out_proj by rows (its bias replicated):
    derived, as for Megatron-core's Mamba mixer.

    Parameters
    ----------
    x : Architecture
        A model with short-convolution layers (``layer_mixers`` holding ``"conv"``).

    Returns
    -------
    tuple of sympy.Expr
        (TP-sharded, replicated) [parameters].

    References
    ----------
    transformers 5.25.0 ``models/lfm2/modeling_lfm2.py``, ``Lfm2ShortConv`` (hf-transformers-5-25).

    Examples
    --------
    >>> conv_parts(Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("conv",), short_conv_bias=True))
    (4*h**2 + h*k_sc + 4*h, h)
    """
    tp = 3 * h * h + k_sc * h + h * h
    if x.short_conv_bias:
        return tp + 3 * h + h, h
    return tp, sp.Integer(0)


def lightning_parts(x: Architecture) -> tuple:
    r"""One lightning-attention mixer's parameters as (TP-sharded, TP-replicated) expressions.

    .. math:: P_{\mathrm{lin}} = 3h\,a d_h + h\,a d_h + a d_h\,h + a d_h

    qkv_proj h -> 3 a d_h, output_gate h -> a d_h, out_proj a d_h -> h, none biased, and an
    RMSNorm over a d_h; its decay rates are buffers.  Everything splits with the heads under
    tensor parallelism (derived).

    Parameters
    ----------
    x : Architecture
        A model with lightning-attention layers (``layer_mixers`` holding ``"lightning"``).

    Returns
    -------
    tuple of sympy.Expr
        (TP-sharded, replicated) [parameters].

    References
    ----------
    transformers 5.25.0 ``models/minimax/modeling_minimax.py``,
    ``MiniMaxLightningAttention`` (hf-transformers-5-25).

    Examples
    --------
    >>> lightning_parts(Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("lightning",)))[0]
    5*a*d_h*h + a*d_h
    """
    del x   # every lightning mixer has the same modules; x keeps the parts' signature
    return 5 * h * a * d_h + a * d_h, sp.Integer(0)


def mixer_values(arch: Architecture) -> dict:
    """The values of :func:`gdn_parts`' and :func:`conv_parts`' size symbols and the
    lightning block size ``B_lin`` (only of the mixers the model has).

    Examples
    --------
    >>> sorted(mixer_values(Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("gdn",), gdn_key_heads=2,
    ...     gdn_value_heads=4, gdn_key_head_dim=4, gdn_value_head_dim=8)).values())
    [2, 4, 4, 4, 8]
    """
    x = lenient(arch)
    vals = {}
    if mixer_layer_count(x, "gdn"):
        vals.update({H_gk: x.gdn_key_heads, H_gv: x.gdn_value_heads, d_gk: x.gdn_key_head_dim,
                     d_gv: x.gdn_value_head_dim, k_gdn: x.gdn_conv_kernel})
    if mixer_layer_count(x, "conv"):
        vals[k_sc] = x.short_conv_kernel
    if mixer_layer_count(x, "lightning"):
        vals[B_lin] = x.lightning_block_size
    return {sym: sp.Integer(val) for sym, val in vals.items()}
