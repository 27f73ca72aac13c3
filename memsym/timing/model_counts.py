r"""A whole model's counts the time model reads: one layer's weights and the forward FLOPs per token.

:func:`layer_params` is one layer's dense and expert weight parameters (what the
data-parallel sync moves, :mod:`memsym.timing.data_parallel`); :func:`forward_flops_per_token`
is the model's forward FLOPs per token over all its layers and the logits (the MFU numerator
over 3, :mod:`memsym.timing.report`).  Both are whole-layer counts before any split, built on
the per-GPU shapes of :mod:`memsym.timing.gemm`.

References
----------
.. [narayanan] arXiv:2104.04473 Appendix (a layer's GEMMs and weights), §5.1 (the model FLOPs
   per token).
"""

from __future__ import annotations

from .gemm import Shape, attention_flops, layer_gemms
from .linear_attention import gdn_flops, kind_shape
from .ssm import ssd_flops

__all__ = ["layer_params", "forward_flops_per_token"]


def layer_params(x: Shape, *, moe: bool) -> tuple:
    r"""(dense, expert) weight parameters of one layer (norms included in dense).

    .. math:: N_{dense} = h\,(a + 2g)\,d_{qk} + a\,d_v\,h + k\,h\,f + 2h, \quad
       k = 3 \text{ (gated MLP) else } 2

    (an MoE layer: the router :math:`hE` and the shared experts' :math:`k\,h\,f_{sh}` in
    place of the MLP (a latent MoE's :math:`2h\,h_{lat}` too), :math:`N_{expert} = E\,k\,h\,f_e`
    (:math:`h_{lat}` for h); MLA's low-rank projections in place of :math:`h(a+2g)d_{qk}`).

    Parameters
    ----------
    x : Shape
        The architecture (:func:`shape_of`).
    moe : bool
        An MoE layer (router, shared and routed experts) instead of a dense MLP.

    Examples
    --------
    Llama-3-70B (h 8192, 64 heads, 8 KV heads of 128, f 28672; its config.json) by hand:

    >>> from memsym.model import preset
    >>> from memsym.timing.gemm import shape_of
    >>> dense, expert = layer_params(shape_of(preset("llama3-70b")), moe=False)
    >>> dense == 8192 * (64 + 16) * 128 + 64 * 128 * 8192 + 3 * 8192 * 28672 + 2 * 8192, expert
    (True, 0)

    References
    ----------
    .. [narayanan] arXiv:2104.04473 Appendix (a layer's GEMMs, its weight matrices).
    """
    h = x.h
    if x.mla:
        r_q, r_kv, d_r = x.mla
        att = (h * r_q + r_q * x.a * x.d_qk if r_q else h * x.a * x.d_qk) \
            + h * (r_kv + d_r) + r_kv * x.a * (x.d_qk - d_r + x.d_v) + x.a * x.d_v * h
    else:
        att = h * (x.a + 2 * x.g) * x.d_qk + x.a * x.d_v * h
    mult = 3 if x.gated else 2
    if not moe:
        return att + mult * h * x.f + 2 * h, 0
    return (att + h * x.E + mult * h * x.f_sh + 2 * h * x.h_lat + 2 * h,
            x.E * mult * (x.h_lat or h) * x.f_e)


def forward_flops_per_token(x: Shape, s, *, causal: bool = True) -> float:
    r"""Model forward FLOPs per token (all layers, the logits, attention): the MFU numerator / 3.

    .. math:: F_{tok} = \sum_{\text{layers}} \frac{F_{GEMM} + F_{attn}}{s} + 2\,h\,V

    A hybrid's layers are summed kind by kind (``Shape.kinds``): each kind's GEMMs, its
    attention core or its SSD scan's forward matmuls (:func:`memsym.timing.ssm.ssd_flops`;
    a Gated DeltaNet's chunked kernels, :func:`memsym.timing.linear_attention.gdn_flops`).

    Parameters
    ----------
    x : Shape
        The architecture (:func:`shape_of`).
    s : int
        Sequence length [tokens].
    causal : bool
        Count half of the attention core (causal masking).

    Returns
    -------
    float
        Forward FLOPs per token [FLOP/token].

    Examples
    --------
    >>> from memsym.model import preset
    >>> from memsym.timing.gemm import shape_of
    >>> x = shape_of(preset("gpt3-175b"))
    >>> f = forward_flops_per_token(x, 2048, causal=False)
    >>> f == 24 * 96 * 12288**2 * (1 + 2048 / (6 * 12288) + x.V / (12 * 12288 * 96))
    True

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §5.1 (the model FLOPs per token, 24 L h^2 (1 + s/6h +
       V/12Lh) for GPT without the gated MLP).
    """
    if x.kinds:
        total = 0.0
        for (kind, ffn), n, _, _ in x.kinds:
            y, mixer = kind_shape(x, kind)    # a global layer: attention of its own shape
            lay = sum(q.flops for q in layer_gemms(y, s, 1, moe=bool(ffn), mixer=mixer,
                                                   mlp=ffn is not None)) / s
            if mixer == "attention":
                lay = lay + attention_flops(y, s, 1, causal_skip=causal) / s
            elif mixer == "mamba":
                lay = lay + ssd_flops(x.ssm, s)[0] / s
            elif mixer == "gdn":
                lay = lay + gdn_flops(x.gdn, s)[0] / s
            total = total + n * lay
        return float(total + 2 * x.h * x.V)
    dense = sum(q.flops for q in layer_gemms(x, s, 1)) / s
    per_layer_att = attention_flops(x, s, 1, causal_skip=causal) / s
    total = (x.L - x.L_moe) * (dense + per_layer_att)
    if x.L_moe:
        moe = sum(q.flops for q in layer_gemms(x, s, 1, moe=True)) / s
        total = total + x.L_moe * (moe + per_layer_att)
    return float(total + 2 * x.h * x.V)
