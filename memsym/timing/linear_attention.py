r"""A hybrid's token mixers beside attention on one GPU: which the step time prices, their
projections, and the Gated DeltaNet mixer's chunked kernels (FLOPs and HBM bytes).

Megatron-core's ``GatedDeltaNet`` (``megatron/core/ssm/gated_delta_net/gdn.py`` and
``common.py`` at Megatron-LM d98e8a64dd) runs, for :math:`H_k` query/key heads of :math:`d_k`
and :math:`H_v` value heads of :math:`d_v`: in_proj (column-parallel, ``common.py:211-224``:
one GEMM to q, k, v, z, beta, alpha, :math:`2H_kd_k + 2H_vd_v + 2H_v` wide), fla's
``causal_conv1d`` (silu) on q, k, v (``gdn.py:232-240``), ``_prepare_input_for_gated_delta_rule``
(``common.py:383-442``: fla's ``l2norm`` on q and k, their ``repeat_interleave`` to
:math:`H_v` heads, the gates g and beta in fp32, the inputs made contiguous), fla's
``chunk_gated_delta_rule`` with chunk length 64 (``gdn.py:72-73``), the gated RMSNorm over
each value head times :math:`\mathrm{silu}(z)` (``common.py:371-380``) and out_proj
(row-parallel, ``common.py:274-287``).  Tensor parallelism splits the heads (``common.py:183-187``),
so every count below is the t = 1 count over t.

The chunked gated delta rule (Yang, Kautz and Hatamizadeh 2024, arXiv:2412.06464 §3; fla's
kernels at bc3b101dcb), per value head, chunk of C tokens, per token:

1. the WY representation: :math:`A = (I + \mathrm{tril}(\beta KK^\top))^{-1}`
   (``chunk_scaled_dot_kkt``: :math:`2Cd_k`; ``solve_tril``: 16 products of 16 x 16 blocks
   per 64-token chunk, :math:`C^2/2`), :math:`W = A(\beta e^{g}K)`, :math:`U = A(\beta V)`
   (``recompute_w_u``: :math:`2C(d_k + d_v)`);
2. the inter-chunk recurrence (``chunk_gated_delta_rule_fwd_h``): :math:`V' = U - WS`,
   :math:`S \leftarrow e^{g}S + K^\top V'`: :math:`4d_kd_v`;
3. the output (``chunk_fwd_o``): :math:`QS` (:math:`2d_kd_v`) and the masked intra-chunk
   :math:`(QK^\top)V'` (:math:`2C(d_k + d_v)`).

The intra-chunk blocks are counted whole, as ``tl.dot`` computes them before the mask.

References
----------
.. [gated-deltanet] Yang, Kautz, Hatamizadeh 2024, arXiv:2412.06464 §3 (chunkwise
   training: the WY representation, the state passing between chunks).
.. [megatron-lm] megatron/core/ssm/gated_delta_net/gdn.py, common.py at d98e8a64dd.
.. [fla] flash-linear-attention at bc3b101dcb: fla/ops/gated_delta_rule/chunk.py
   (``chunk_gated_delta_rule_fwd`` / ``_bwd``), wy_fast.py, fla/ops/common/chunk_delta_h.py,
   chunk_o.py, chunk_scaled_dot_kkt.py, fla/ops/utils/solve_tril.py.
"""

from __future__ import annotations

import numpy as np

from dataclasses import replace

from ..errors import StepTimeNotModelledError
from ..model.hybrid_layers import hybrid_layer_parameters, layer_kind_pattern

__all__ = ["GDN_CHUNK", "PRICED_MIXERS", "priced_kinds", "global_shape", "kind_shape",
           "gdn_shape", "projection_widths",
           "gdn_flops", "gdn_kernels", "gdn_copy_bytes"]

#: Megatron-core GatedDeltaNet's chunk length C [tokens] (``self.chunk_size = 64``,
#: megatron/core/ssm/gated_delta_net/gdn.py:73 at d98e8a64dd; fla's default).
GDN_CHUNK = 64

#: The hybrid token mixers the time model prices (Mamba-2, Gated DeltaNet, attention, none,
#: global attention: attention at its own head width and KV heads, :func:`kind_shape`).
PRICED_MIXERS = ("attention", "mamba", "gdn", "none", "global", "kv_reuse", "global_kv_reuse")

_NAMES = {"mamba1": "Mamba-1", "parallel": "parallel Mamba/attention",
          "conv": "short-convolution", "lightning": "lightning-attention",
          "shared": "shared-block"}


def priced_kinds(x) -> tuple:
    r"""A resolved hybrid's layers by kind; refuses a mixer the time model does not price.

    .. math:: \bigl((\text{mixer}, \text{ffn}),\; n,\; P_{dense},\; P_{expert}\bigr)
       \text{ per kind}

    (the time shape's ``kinds``: each distinct layer kind, its count n and one layer's
    dense and expert weights).

    Parameters
    ----------
    x : memsym.model.Architecture
        A hybrid model, resolved (:func:`memsym.model.architecture.lenient`).

    Returns
    -------
    tuple
        Each kind with its count and one layer's weights [parameters].

    Raises
    ------
    StepTimeNotModelledError
        A Mamba-1, parallel, short-convolution, lightning-attention or shared-block layer.

    Examples
    --------
    >>> from memsym.model import Architecture
    >>> k = priced_kinds(Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("gdn", "attention"), gdn_key_heads=2,
    ...     gdn_value_heads=2, gdn_key_head_dim=4, gdn_value_head_dim=4, ffn_hidden_size=16))
    >>> [kind for kind, *_ in k]
    [('gdn', False), ('attention', False)]

    References
    ----------
    .. [megatron-lm] megatron/core/ssm/mamba_mixer.py, gated_delta_net/gdn.py at d98e8a64dd
       (the mixers priced).
    """
    pattern = layer_kind_pattern(x)
    other = sorted({_NAMES[m] for m, _ in pattern if m not in PRICED_MIXERS})
    if other:
        what = "/".join(other)
        raise StepTimeNotModelledError(
            f"the step time of {x.name!r}, a hybrid {what}/attention model, is not modelled "
            f"(its {what} layers are not priced; Mamba-2 and Gated DeltaNet are); its memory "
            "estimate and fit are: leave out the time options (memsym estimate --gpu gives them)")
    out = []
    for kind in dict.fromkeys(pattern):
        parts = dict(hybrid_layer_parameters(x, kind))
        out.append((kind, pattern.count(kind), parts["tp"] + parts["replicated"],
                    parts["experts"]))
    return tuple(out)


def global_shape(x) -> tuple:
    r"""``(g_g, d_hg, kv projections, MLP factor)``: the global and KV-reusing layers' shapes.

    The global attention layers' KV heads, head width and KV projections, and the KV-reusing
    layers' MLP width factor of a resolved model [1].

    .. math:: (g_g,\; d_{hg},\; 2 \text{ or } 1,\; 1 \text{ or } 2)

    Parameters
    ----------
    x : memsym.model.Architecture
        A model with ``"global"`` layers (Gemma 4's full-attention layers).

    Returns
    -------
    tuple of int
        Their KV heads, head width and the projections of their KV heads: 2 (k_proj, v_proj)
        or 1 (``attention_k_eq_v``: the keys' projection read as the values), and the
        KV-reusing layers' MLP width over f: 2 with ``kv_reuse_wide_mlp``, else 1 [1].

    Examples
    --------
    >>> from memsym.model import Architecture
    >>> global_shape(Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("attention", "global"),
    ...     global_kv_channels=8, global_num_query_groups=1, global_v_proj=False))
    (1, 8, 1, 1)

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/gemma4/modeling_gemma4.py``,
       ``Gemma4TextAttention.__init__`` (k_proj of its own head width and KV heads, no
       v_proj under ``attention_k_eq_v``), ``Gemma4TextMLP.__init__`` (``use_double_wide_mlp``).
    """
    return (x.global_num_query_groups or x.num_query_groups,
            x.global_kv_channels or x.kv_channels, 2 if x.global_v_proj else 1,
            2 if getattr(x, "kv_reuse_wide_mlp", False) else 1)


def kind_shape(x, mixer: str) -> tuple:
    r"""The time shape and mixer a layer of ``mixer`` is priced with [1].

    .. math:: (g, d_{qk}, d_v, n_{kv}) \to (g_g, d_{hg}, d_{hg}, n_{kv,g})

    A ``"global"`` layer is attention at its own head width and KV heads (and its KV
    projections: one under ``attention_k_eq_v``), priced as attention on that shape; a
    ``"kv_reuse"`` / ``"global_kv_reuse"`` layer (Gemma 4's ``num_kv_shared_layers``) as
    attention / a global layer without KV projections, its MLP at the factor of
    :func:`global_shape`; any other mixer as it is.

    Parameters
    ----------
    x : memsym.timing.gemm.Shape
        The model's time shape (its ``glob`` the global layers' :func:`global_shape`).
    mixer : str
        The layer's mixer.

    Returns
    -------
    tuple
        ``(shape, mixer)``.

    Examples
    --------
    >>> from memsym.timing.gemm import Shape
    >>> x = Shape(L=2, h=8, a=2, g=2, d_qk=4, d_v=4, f=16, gated=True, V=32, E=0, k=0,
    ...           f_e=0, f_sh=0, L_moe=0, mla=(), untied=False, glob=(1, 8, 1, 2))
    >>> y, mixer = kind_shape(x, "global")
    >>> (y.g, y.d_qk, y.d_v, y.kv_proj, mixer)
    (1, 8, 8, 1, 'attention')
    >>> y, mixer = kind_shape(x, "kv_reuse")
    >>> (y.g, y.kv_proj, y.f, mixer)
    (2, 0, 32, 'attention')

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/gemma4/modeling_gemma4.py``,
       ``Gemma4TextAttention`` (the layer's own head_dim and num_key_value_heads; a "reuse"
       layer's q_proj and o_proj alone), ``Gemma4TextMLP`` (``use_double_wide_mlp``).
    """
    if mixer not in ("global", "kv_reuse", "global_kv_reuse"):
        return x, mixer
    g_g, d_hg, kv, wide = x.glob
    y = replace(x, g=g_g, d_qk=d_hg, d_v=d_hg, kv_proj=kv) if mixer != "kv_reuse" else x
    if mixer == "global":
        return y, "attention"
    return replace(y, kv_proj=0, f=y.f * wide), "attention"


def gdn_shape(x) -> tuple:
    r"""``(H_k, H_v, d_k, d_v, conv kernel)`` of a resolved model's Gated DeltaNet mixers [1].

    .. math:: (H_k, H_v, d_k, d_v, k_{gdn})

    Parameters
    ----------
    x : memsym.model.Architecture
        A model with Gated DeltaNet layers.

    Returns
    -------
    tuple of int
        Key and value heads, key and value head dimensions, conv taps [1].

    Examples
    --------
    >>> from memsym.model import Architecture
    >>> gdn_shape(Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("gdn",), gdn_key_heads=2,
    ...     gdn_value_heads=4, gdn_key_head_dim=4, gdn_value_head_dim=8))
    (2, 4, 4, 8, 4)

    References
    ----------
    .. [megatron-lm] megatron/core/ssm/gated_delta_net/common.py:176-187 at d98e8a64dd
       (``linear_num_key_heads`` ... ``linear_conv_kernel_dim``).
    """
    return (x.gdn_key_heads, x.gdn_value_heads, x.gdn_key_head_dim, x.gdn_value_head_dim,
            x.gdn_conv_kernel)


def projection_widths(mixer: str, ssm: tuple = (), gdn: tuple = ()) -> tuple:
    r"""In_proj's output and out_proj's input widths of a Mamba-2 or Gated DeltaNet mixer (t = 1).

    .. math::

        \text{Mamba-2: } (2d_{ssm} + 2GN + H,\; d_{ssm}),\qquad
        \text{GDN: } (2H_kd_k + 2H_vd_v + 2H_v,\; H_vd_v)

    Parameters
    ----------
    mixer : {"mamba", "gdn"}
        The mixer.
    ssm : tuple
        ``(d_ssm, N, H, G, conv kernel)`` [1] (Mamba-2).
    gdn : tuple
        ``(H_k, H_v, d_k, d_v, conv kernel)`` [1] (Gated DeltaNet).

    Returns
    -------
    tuple of int
        The two widths [elements].

    Examples
    --------
    >>> projection_widths("gdn", gdn=(2, 4, 4, 8, 4)), projection_widths("mamba", (64, 16, 2, 1, 4))
    ((88, 32), (162, 64))

    References
    ----------
    .. [megatron-lm] megatron/core/ssm/mamba_mixer.py (in_proj ``zxBCdt``) and
       gated_delta_net/common.py:201-203, gdn.py:45 (``in_proj_dim``) at d98e8a64dd.
    """
    if mixer == "gdn":
        H_k, H_v, d_k, d_v, _ = gdn
        return 2 * H_k * d_k + 2 * H_v * d_v + 2 * H_v, H_v * d_v
    d, N, H, G, _ = ssm
    return 2 * d + 2 * G * N + H, d


def gdn_kernels(gdn: tuple, chunk: int = GDN_CHUNK, width: int = 2) -> tuple:
    r"""Per-token FLOPs and HBM bytes of each kernel one Gated DeltaNet mixer launches (t = 1).

    Forward and backward, as Megatron-core's ``GatedDeltaNet`` and fla's
    ``chunk_gated_delta_rule`` run them.  Per value head and token, with :math:`C` the chunk,
    :math:`K = d_k`, :math:`V = d_v`, :math:`S = KV/C` state values (the chunk states h and
    dh, 16-bit), :math:`w` bytes per 16-bit element, the fp32 gate g (4 bytes) and the WY
    matrix A (C per token), the chunk kernels' FLOPs are

    .. math::

        \begin{aligned}
        &\text{kkt\_solve}: 2CK + C^2/2,\quad \text{wy}: 2C(K + V),\quad
        \text{chunk\_h}: 4KV,\quad \text{chunk\_o}: 2KV + 2C(K + V);\\
        &\text{backward: wy and chunk\_h again (recomputed)},\ \text{dv\_local}: 2C(K + V),\
        \text{dhu}: 6KV,\ \text{dqkwg}: 6KV + 4CK + 2CV,\\
        &\text{wy\_bwd}: 10CK + 4CV + 4C^2
        \end{aligned}

    (``prepare_wy_repr_bwd``: :math:`dA` from dw and du, :math:`A^\top dw`, :math:`A^\top du`,
    the two :math:`C\times C` products through the inverse and the recomputed
    :math:`\beta KK^\top` with its two gradients), each reading and writing the tensors its
    fla wrapper passes.  The streamed kernels (no matmul) are the conv1d (:math:`2w` per qkv
    channel, backward :math:`3w`), the input preparation (q, k made contiguous, fla's l2norm
    with its fp32 rstd, their expansion to :math:`H_v` heads, v and z made contiguous), the
    gates, the chunk-local cumsum of g, and the gated norm (:math:`3w` per value channel,
    backward :math:`5w`), with their mirrors in the backward.  fla at bc3b101dcb launches
    kkt_solve and wy as one kernel (``chunk_gated_delta_rule_fwd_intra``, which skips the six
    upper 16 x 16 blocks of :math:`\beta KK^\top`): counted as the stand-alone kernels, whole
    blocks and A's round trip through HBM included (an upper bound of a few per cent).

    Parameters
    ----------
    gdn : tuple
        ``(H_k, H_v, d_k, d_v, conv kernel)`` [1].
    chunk : int
        Chunk length C [tokens].
    width : int
        Bytes per 16-bit activation element [bytes/element].

    Returns
    -------
    tuple
        ``(forward, backward)``, each a tuple of ``(kernel, FLOPs per token [FLOP], bytes per
        token [bytes])``; FLOPs 0 for the memory-bound kernels.

    Examples
    --------
    One head, d_k = d_v = 4, C = 4 (S = 4): chunk_h does 4 * 16 = 64 FLOPs per token over
    2 (2 * 4 + 2 * 4) + 2 * 4 + 4 = 44 bytes.

    >>> f, b = gdn_kernels((1, 1, 4, 4, 4), chunk=4)
    >>> dict((k, (fl, by)) for k, fl, by in f)["chunk_h"]
    (64, 44.0)

    References
    ----------
    .. [fla] fla/ops/gated_delta_rule/chunk.py, wy_fast.py (``recompute_w_u_fwd_kernel``,
       ``prepare_wy_repr_bwd_kernel``), fla/ops/common/chunk_delta_h.py, chunk_o.py
       (``chunk_fwd_kernel_o``, ``chunk_bwd_kernel_dv_local``, ``chunk_bwd_kernel_dqkwg``),
       chunk_scaled_dot_kkt.py, fla/ops/utils/solve_tril.py at bc3b101dcb.
    .. [megatron-lm] megatron/core/ssm/gated_delta_net/gdn.py:170-289, common.py:347-442
       at d98e8a64dd.
    """
    H_k, H_v, K, V, _ = gdn
    w, C = width, chunk
    S = K * V / C
    qk, vv = H_k * K, H_v * V
    cd = 2 * qk + vv                                  # conv channels: q, k, v

    def head(flops, nbytes):                          # one value head's count, all heads
        return H_v * flops, H_v * nbytes

    wy = ("wy",) + head(2 * C * (K + V), 2 * w * (K + V) + w * C + w + 4)
    state = ("chunk_h",) + head(4 * K * V, 2 * w * (K + V) + w * S + 4)
    # q, k contiguous (4w), l2norm with fp32 rstd (4w + 4 per head), the expansion to H_v heads
    prep = 8 * w * qk + 8 * H_k + w * (2 * qk + 2 * H_v * K) + 4 * w * vv
    gates = H_v * (2 * w + 4 + w) + 8 * H_v           # alpha, beta -> g (fp32), beta; cumsum
    fwd = (("conv1d", 0, 2 * w * cd), ("prepare", 0, prep), ("gates", 0, gates),
           ("kkt_solve",) + head(2 * C * K + C * C / 2, w * K + w + 4 + w * C), wy, state,
           ("chunk_o",) + head(2 * K * V + 2 * C * (K + V), 2 * w * (K + V) + w * S + 4),
           ("gated_norm", 0, 3 * w * vv))
    bwd = (("gated_norm", 0, 5 * w * vv), wy, state,
           ("dv_local",) + head(2 * C * (K + V), 2 * w * (K + V) + 4),
           ("dhu",) + head(6 * K * V, 3 * w * (K + V) + w * S + 4),
           ("dqkwg",) + head(6 * K * V + 4 * C * K + 2 * C * V,
                             6 * w * K + 3 * w * V + 2 * w * S + 8),
           ("wy_bwd",) + head(10 * C * K + 4 * C * V + 4 * C * C,
                              3 * w * (K + V) + w * C + 2 * w + 8),
           ("adds", 0, H_v * (3 * w * K + 12)), ("gates", 0, gates),
           ("prepare", 0, w * (2 * H_v * K + 2 * qk) + 6 * w * qk + 8 * H_k),
           ("split", 0, 2 * w * (2 * cd + vv + 2 * H_v)), ("conv1d", 0, 3 * w * cd))
    return fwd, bwd


def gdn_flops(gdn: tuple, T, t=1, chunk: int = GDN_CHUNK) -> tuple:
    r"""Matmul FLOPs of one Gated DeltaNet layer's chunked kernels on one GPU, forward and backward.

    .. math::

        F_{\text{fwd}} = \frac{T H_v}{t}\bigl(6Cd_k + 4Cd_v + C^2/2 + 6d_kd_v\bigr),\qquad
        F_{\text{bwd}} = \frac{T H_v}{t}\bigl(18Cd_k + 10Cd_v + 4C^2 + 16d_kd_v\bigr)

    the sums of :func:`gdn_kernels`' matmul kernels.

    Parameters
    ----------
    gdn : tuple
        ``(H_k, H_v, d_k, d_v, conv kernel)`` [1].
    T : array_like
        Tokens of one micro-batch on the GPU's context-parallel rank [tokens].
    t : array_like
        Tensor-parallel size [GPUs].
    chunk : int
        Chunk length C [tokens].

    Returns
    -------
    tuple of numpy.ndarray
        Forward and backward FLOPs [FLOP].

    Examples
    --------
    One head, d_k = d_v = 4, C = 4, T = 8: forward 8 (96 + 64 + 8 + 96) = 8 * 264.

    >>> f, b = gdn_flops((1, 1, 4, 4, 4), 8, chunk=4)
    >>> float(f) == 8 * 264, float(b) == 8 * (288 + 160 + 64 + 256)
    (True, True)

    References
    ----------
    .. [gated-deltanet] arXiv:2412.06464 §3 (the chunkwise algorithm).
    .. [fla] fla/ops/gated_delta_rule/chunk.py at bc3b101dcb.
    """
    per = np.asarray(T, float) / np.asarray(t, float)
    fwd, bwd = gdn_kernels(gdn, chunk)
    return per * sum(fl for _, fl, _ in fwd), per * sum(fl for _, fl, _ in bwd)


def gdn_copy_bytes(gdn: tuple, width: int = 2) -> tuple:
    r"""Per-token HBM bytes of Megatron-core's layout copies around a GDN mixer at b > 1 [bytes].

    .. math::

        B_{\text{fwd}} = 2wH_vd_v,\qquad B_{\text{bwd}} = 2w\,(2H_kd_k + 2H_vd_v + 2H_v)

    The gated norm's output goes back from ``[b, s, .]`` to ``[s, b, .]``
    (``transpose(0, 1).contiguous()``, ``common.py:363-364``); in the backward Transformer
    Engine's ``grad_output_preprocess`` makes in_proj's output gradient, transposed
    (``gdn.py:187``), contiguous.  At b = 1 the transposes are views: no copy.

    Parameters
    ----------
    gdn : tuple
        ``(H_k, H_v, d_k, d_v, conv kernel)`` [1].
    width : int
        Bytes per activation element [bytes/element].

    Returns
    -------
    tuple of int
        Forward and backward bytes per token [bytes].

    Examples
    --------
    >>> gdn_copy_bytes((2, 4, 4, 8, 4))
    (128, 352)

    References
    ----------
    .. [megatron-lm] megatron/core/ssm/gated_delta_net/common.py:361-368, gdn.py:185-187 at
       d98e8a64dd.
    .. [transformer-engine] transformer_engine/pytorch/module/base.py at d0067d0da6
       (``grad_output_preprocess``: ``reshape`` then ``contiguous``).
    """
    n_in, n_out = projection_widths("gdn", gdn=gdn)
    return 2 * width * n_out, 2 * width * n_in
