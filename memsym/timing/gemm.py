r"""Per-layer work after the TP/SP/CP/EP splits: GEMM shapes, attention, memory-bound bytes.

One GPU's share of one transformer layer for one micro-batch of ``b`` sequences of ``s``
tokens, split by tensor (``t``), context (``c``), expert (``e``, expert-TP ``t_e``)
parallelism; sequence parallelism splits the norm/dropout/residual elementwise work by t.
Forward GEMMs ``[M, K] x [K, N]`` have a data-gradient ``[M, N] x [N, K]`` and a
weight-gradient ``[K, M] x [M, N]`` in the backward pass (same FLOPs, other shapes).
Every count is vectorised over numpy arrays of the layout knobs.  A whole model's counts
before any split (a layer's weights, the forward FLOPs per token) are
:mod:`memsym.timing.model_counts`.

References
----------
.. [narayanan] arXiv:2104.04473 Appendix (the GEMMs of a GPT layer; backward = 2 x forward).
.. [korthikanti] arXiv:2205.05198 §4 (sequence parallelism), §5 (selective recompute), App. A.
.. [flash-attention] Dao et al. 2022 / 2023: causal blocks above the diagonal are skipped;
   the backward runs 5 matrix multiplies to the forward's 2 (2.5x the FLOPs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.architecture import lenient, padded_vocab_size
from ..model.layer_patterns import is_hybrid, moe_layer_pattern
from ..model.hybrid_layers import mtp_layer_kinds
from ..text import shared_doc
from .linear_attention import gdn_shape, global_shape, priced_kinds, projection_widths
from .rope import rope_passes, yarn_concentration

__all__ = ["Gemm", "Shape", "shape_of", "layer_gemms", "attention_flops", "memory_bytes"]

_doc = shared_doc(shape_params="""
    x : Shape
        The architecture (:func:`shape_of`).
    s : int or array_like
        Sequence length [tokens].
    b : int or array_like
        Micro-batch size [sequences].
    """, parallel_params="""
    t, c, e : array_like
        Tensor-, context- and expert-parallel sizes [GPUs].
    t_e : array_like, optional
        Expert tensor-parallel size [GPUs] (default t).
    """)


@dataclass(frozen=True)
class Shape:
    """The numbers of an architecture the time model needs (resolved, Megatron defaults).

    Attributes
    ----------
    L : int
        Decoder layers [1].
    h : int
        Hidden size [1].
    a, g : int
        Attention heads and key/value heads (query groups) [1].
    d_qk, d_v : int
        Query/key head dimension (with MLA's RoPE part) and value head dimension [1].
    f : int
        Dense MLP hidden size [1].
    gated : bool
        Gated MLP (SwiGLU: two input projections).
    V : int
        Padded vocabulary size [tokens].
    E, k : int
        Routed experts per MoE layer (0 = dense) and experts per token (top-k) [1].
    f_e, f_sh : int
        Routed-expert and shared-expert MLP hidden sizes [1] (0 when absent).
    L_moe : int
        MoE layers among the L [1].
    mla : tuple
        ``(q_lora_rank or 0, kv_lora_rank, rope dim)`` under MLA, else ``()``.
    untied : bool
        Output layer untied from the input embedding.
    rope, rope_unfused : bool
        RoPE (memory-bound work counted); run eager (YaRN mscale != 1: :mod:`memsym.timing.rope`).
    expert_bias : bool
        The routed experts' linear layers carry biases (``add_bias_linear`` on a MoE model):
        Megatron-core adds the fc2 bias outside the grouped GEMM, scaled by the routing
        probability (:func:`memsym.timing.moe.expert_bias_bytes`).
    expert_clamp, swiglu_clamp : bool
        The routed experts' GLU input is clamped first (Megatron's
        ``activation_func_clamp_value``; GPT-OSS's ``swiglu_limit``), in eager PyTorch
        (:func:`memsym.timing.moe.glu_clamp_bytes`); a clamped ``--swiglu``, clamped eagerly
        under ``--no-bias-swiglu-fusion`` (:func:`memsym.timing.moe_eager.swiglu_clamp_bytes`).
    kinds : tuple
        A hybrid model's layers by kind: ``((mixer, ffn), count, dense, expert)`` with
        ``mixer`` ``"attention"``, ``"mamba"``, ``"gdn"`` or ``"none"``, ``ffn`` None (no
        MLP), False (dense MLP) or True (MoE), ``count`` such layers and ``dense``/``expert``
        one layer's weights [parameters] (:func:`memsym.model.hybrid_layers.layer_kind_pattern`);
        ``()`` for a transformer, whose every layer has attention and an MLP.
    ssm : tuple
        The Mamba-2 mixers' ``(d_ssm, N, H, G, conv kernel)`` [1] (``()`` without any).
    gdn : tuple
        The Gated DeltaNet mixers' ``(H_k, H_v, d_k, d_v, conv kernel)`` [1] (``()``: none).
    output_gate : bool
        Attention's output gate (``attention_output_gate``, Qwen3-Next): linear_qkv also
        projects a d_qk gate channels (Megatron-LM attention.py:1689-1691).
    kv_proj, glob : int, tuple
        KV projections (2; 1: attention_k_eq_v) [1]; linear_attention.global_shape's tuple [1].
    h_lat : int
        A latent MoE's width (``moe_latent_size``; 0: none) [1]: the experts' and dispatch's.
    last_moe : bool
        The last decoder layer is MoE: each MTP layer's kind (Megatron-LM's
        ``get_gpt_mtp_block_spec_for_backend`` takes ``layer_specs[-1]``, gpt_layer_specs.py).
    mtp_kinds : tuple
        A hybrid's MTP block instead: a ``(mixer, ffn)`` per letter (:func:`mtp_layer_kinds`).
    """

    L: int
    h: int
    a: int
    g: int
    d_qk: int   # query/key head dim (with MLA's RoPE part)
    d_v: int    # value head dim
    f: int
    gated: bool
    V: int
    E: int      # routed experts (0 = dense)
    k: int
    f_e: int
    f_sh: int
    L_moe: int
    mla: tuple  # (q_lora_rank or 0, kv_lora_rank, rope dim) or ()
    untied: bool
    rope: bool = True
    rope_unfused: bool = False
    expert_bias: bool = False
    expert_clamp: bool = False
    swiglu_clamp: bool = False
    kinds: tuple = ()
    ssm: tuple = ()
    last_moe: bool = False
    h_lat: int = 0
    mtp_kinds: tuple = ()
    gdn: tuple = ()
    output_gate: bool = False
    kv_proj: int = 2    # projections of the KV heads: k and v, or k alone (attention_k_eq_v)
    glob: tuple = ()    # (g_g, d_hg, kv_proj, reuse MLP factor) (linear_attention.global_shape)


def shape_of(arch) -> Shape:
    """Resolve ``arch`` (a memsym Architecture) into the numbers the time model uses.

    Parameters
    ----------
    arch : memsym.model.Architecture
        The model (its vocabulary padded as for t = 1).

    Returns
    -------
    Shape

    Examples
    --------
    >>> from memsym.model import preset
    >>> x = shape_of(preset("llama3-70b"))
    >>> (x.L, x.h, x.a, x.g, x.f, x.gated)
    (80, 8192, 64, 8, 28672, True)

    References
    ----------
    .. [hf-transformers] the models' config.json fields (hidden_size, num_attention_heads,
       num_key_value_heads, intermediate_size, vocab_size).
    """
    x = lenient(arch)
    kinds = priced_kinds(x) if is_hybrid(x) else ()
    mtp_kinds = mtp_layer_kinds(x) if kinds and x.mtp_layer_pattern else ()
    ssm = ((x.mamba_inner_size, x.mamba_state_dim, x.mamba_num_heads, x.mamba_num_groups,
            x.mamba_conv_kernel)
           if ("mamba", None) in mtp_kinds or any(k[0][0] == "mamba" for k in kinds) else ())
    mla, d_qk, d_v = (), x.kv_channels, x.kv_channels
    if x.multi_latent_attention:
        mla = (x.q_lora_rank or 0, x.kv_lora_rank, x.qk_pos_emb_head_dim)
        d_qk, d_v = x.qk_head_dim + x.qk_pos_emb_head_dim, x.v_head_dim
    E = x.num_experts or 0
    pattern = moe_layer_pattern(x)
    return Shape(L=x.num_layers, h=x.hidden_size, a=x.num_attention_heads, g=x.num_query_groups,
                 d_qk=d_qk, d_v=d_v, f=x.ffn_hidden_size, gated=bool(x.swiglu),
                 V=padded_vocab_size(x.vocab_size, 1, x.make_vocab_size_divisible_by),
                 E=E, k=x.moe_router_topk if E else 0,
                 f_e=(x.moe_ffn_hidden_size or 0) if E else 0,
                 f_sh=(x.moe_shared_expert_intermediate_size or 0) if E else 0,
                 L_moe=sum(pattern), mla=mla, untied=bool(x.untie_embeddings_and_output_weights),
                 rope=x.position_embedding_type == "rope",
                 rope_unfused=yarn_concentration(x.extra or {}) != 1.0,
                 expert_bias=bool(E and x.add_bias_linear),
                 expert_clamp=bool(E and x.swiglu)     # a swiglu_limit (0 too: quick-GeGLU)
                 and (x.extra or {}).get("swiglu_limit") is not None,
                 swiglu_clamp=bool(x.swiglu) and (x.extra or {}).get("swiglu_clamp") is not None,
                 kinds=kinds, ssm=ssm, last_moe=bool(pattern and pattern[-1]),
                 h_lat=(x.moe_latent_size or 0) if E else 0, mtp_kinds=mtp_kinds,
                 gdn=gdn_shape(x) if any(k[0][0] == "gdn" for k in kinds) else (),
                 output_gate=bool(x.attention_output_gate), glob=global_shape(x))


@dataclass(frozen=True)
class Gemm:
    """One forward GEMM ``count x [M, K] x [K, N]`` (arrays broadcast over layouts).

    Attributes
    ----------
    name : str
        Which GEMM (``"qkv"``, ``"fc1"``, ...).
    M, N, K : array_like
        GEMM dimensions [elements] (``N`` a GEMM dimension, not a parameter count).
    count : int or array_like
        How many such GEMMs (the local experts) [GEMMs].
    eager : tuple of str
        Element-wise passes Megatron-core runs on this GEMM's output in eager PyTorch, outside
        any fused kernel: ``"bias"`` (the routed experts' fc2 bias,
        :func:`memsym.timing.moe.expert_bias_bytes`), ``"clamp"`` (the clamp before the
        experts' fused GLU, :func:`memsym.timing.moe.glu_clamp_bytes`), ``"glu"`` (their eager one).
    """

    name: str
    M: object
    N: object
    K: object
    count: object = 1
    eager: tuple = ()

    @property
    def flops(self):
        return 2.0 * np.asarray(self.M, float) * self.N * self.K * self.count


@_doc
def layer_gemms(x: Shape, s, b, t=1, c=1, e=1, t_e=None, *, moe: bool = False,
                mixer: str = "attention", mlp: bool = True) -> list:
    r"""Forward GEMMs of one layer on one GPU for one micro-batch (attention core excluded).

    Tokens on a rank: :math:`T = b\,s/c` (sequence parallelism all-gathers the :math:`T/t`
    tokens back to :math:`T` before each column-parallel GEMM).  Column-parallel weights
    split their output dimension by t, row-parallel their input.  A MoE layer's experts
    receive, per GPU, :math:`b\,s\,k\,t_e/(t\,c)` routed rows (balanced routing) spread
    over its :math:`E/e` local experts; its router ``[T/t, h] x [h, E]`` runs on the SP shard
    (MoE training rejects TP without SP), a latent MoE (``h_lat``) adds ``latent_fc1`` ``[T/t,
    h] x [h, h_lat]`` and ``latent_fc2`` ``[T/t, h_lat] x [h_lat, h]`` (replicated) and its
    experts read and write ``h_lat``.  A Mamba-2 mixer (Megatron-core's ``MambaMixer``)
    projects with in_proj ``[T, h] x [h, (2 d_ssm + 2 G N + H)/t]`` (column-parallel: z, x, B,
    C, dt) and out_proj ``[T, d_ssm/t] x [d_ssm/t, h]`` (row-parallel); a Gated DeltaNet mixer
    (``GatedDeltaNet``) in_proj ``[T, h] x [h, (2 H_k d_k + 2 H_v d_v + 2 H_v)/t]`` (q, k, v,
    z, beta, alpha) and out_proj ``[T, H_v d_v/t] x [H_v d_v/t, h]``
    (:func:`memsym.timing.linear_attention.projection_widths`).

    Parameters
    ----------
    {shape_params}
    {parallel_params}
    moe : bool
        A MoE layer (router, routed and shared experts) instead of a dense MLP.
    mixer : {{"attention", "mamba", "gdn", "none"}}
        The layer's token mixer (a hybrid's layer kind; a transformer's is attention).
    mlp : bool
        The layer has an MLP or MoE block (a hybrid's Mamba and attention layers have none).

    Returns
    -------
    list of Gemm

    Examples
    --------
    Hand count for GPT-3 175B (h = 12288, f = 4h, a = 96, no GQA), t = 8, s = 2048, b = 1:
    QKV [2048, 12288] x [12288, 3 * 12288 / 8], 2 M N K = 2 * 2048 * 12288 * 4608 FLOPs.

    >>> from memsym.model import preset
    >>> g = layer_gemms(shape_of(preset("gpt3-175b")), 2048, 1, t=8)
    >>> [(q.name, int(q.M), int(q.N), int(q.K)) for q in g][:2]
    [('qkv', 2048, 4608, 12288), ('proj', 2048, 12288, 1536)]
    >>> float(sum(q.flops for q in g)) == 2 * 2048 * 12 * 12288**2 / 8
    True

    A Mamba-2 layer alone, d_ssm = 64, N = 16, H = 2, G = 1, h = 32, t = 2, T = 8: in_proj
    [8, 32] x [32, (128 + 32 + 2) / 2], out_proj [8, 32] x [32, 32].

    >>> x = Shape(L=1, h=32, a=1, g=1, d_qk=32, d_v=32, f=0, gated=False, V=128, E=0, k=0,
    ...           f_e=0, f_sh=0, L_moe=0, mla=(), untied=False, ssm=(64, 16, 2, 1, 4))
    >>> [(q.name, int(q.M), int(q.N), int(q.K))
    ...  for q in layer_gemms(x, 8, 1, t=2, mixer="mamba", mlp=False)]
    [('in_proj', 8, 81, 32), ('out_proj', 8, 32, 32)]

    References
    ----------
    .. [narayanan] arXiv:2104.04473 Appendix (a layer's GEMMs and their FLOPs).
    """
    t, c, e = (np.asarray(v, float) for v in (t, c, e))
    t_e = t if t_e is None else np.asarray(t_e, float)
    T = np.asarray(b, float) * s / c
    out = []
    h = x.h
    if mixer in ("mamba", "gdn"):
        n_in, n_out = projection_widths(mixer, x.ssm, x.gdn)
        out.append(Gemm("in_proj", T, n_in / t, h))
        out.append(Gemm("out_proj", T, h + 0 * t, n_out / t))
    elif mixer != "attention":
        pass
    elif x.mla:
        r_q, r_kv, d_r = x.mla
        if r_q:
            out.append(Gemm("q_down", T, r_q + 0 * t, h))
            out.append(Gemm("q_up", T, x.a * x.d_qk / t, r_q))
        else:
            out.append(Gemm("q", T, x.a * x.d_qk / t, h))
        out.append(Gemm("kv_down", T, r_kv + d_r + 0 * t, h))
        out.append(Gemm("kv_up", T, x.a * (x.d_qk - d_r + x.d_v) / t, r_kv))
        out.append(Gemm("proj", T, h + 0 * t, x.a * x.d_v / t))
    else:
        out.append(Gemm("qkv", T, (x.a * (1 + x.output_gate) + x.kv_proj * x.g) * x.d_qk / t, h))
        out.append(Gemm("proj", T, h + 0 * t, x.a * x.d_v / t))
    mult = 2 if x.gated else 1
    if not mlp:
        return out
    if not moe:
        out.append(Gemm("fc1", T, mult * x.f / t, h))
        out.append(Gemm("fc2", T, h + 0 * t, x.f / t))
        return out
    return out + _moe_gemms(x, T, np.asarray(b, float) * s * x.k * t_e / (t * c), t, e, t_e, mult)


def _moe_gemms(x: Shape, T, rows, t, e, t_e, mult) -> list:
    """MoE GEMMs: router (router.py:111, :614-624) and latent projections (moe_layer.py:266-304,
    489-490, 591-592) on each TP rank's T/t SP tokens (:636-640), routed and shared experts."""
    h, local = x.h, x.E / e
    out = [Gemm("router", T / t, x.E + 0 * t, h)]
    if x.h_lat:
        out += [Gemm("latent_fc1", T / t, x.h_lat + 0 * t, h),
                Gemm("latent_fc2", T / t, h + 0 * t, x.h_lat)]
        h = x.h_lat
    per_expert = rows / local
    # TEGroupedMLP clamps fc1's output in eager PyTorch before the fused GLU, builds
    # linear_fc2 with skip_bias_add=True and adds that bias after it (memsym.timing.moe)
    out.append(Gemm("expert_fc1", per_expert, mult * x.f_e / t_e, h, local,
                    eager=("clamp",) if x.expert_clamp else ()))
    out.append(Gemm("expert_fc2", per_expert, h + 0 * t, x.f_e / t_e, local,
                    eager=("bias",) if x.expert_bias else ()))
    if x.f_sh:
        # the shared experts keep the hidden width (mlp.py:215-244: is_expert False)
        out.append(Gemm("shared_fc1", T, mult * x.f_sh / t, x.h))
        out.append(Gemm("shared_fc2", T, x.h + 0 * t, x.f_sh / t))
    return out


def output_gemm(x: Shape, s, b, t=1, c=1) -> Gemm:
    """The output layer (logits) on the last stage: ``[T, h] x [h, V/t]``.

    Parameters
    ----------
    x : Shape
        The architecture (:func:`shape_of`).
    s, b : int
        Sequence length [tokens] and micro-batch size [sequences].
    t, c : array_like
        Tensor- and context-parallel sizes [GPUs].

    Examples
    --------
    >>> from memsym.model import preset
    >>> int(output_gemm(shape_of(preset("gpt3-175b")), 2048, 1, t=8).N)
    6288

    References
    ----------
    .. [narayanan] arXiv:2104.04473 Appendix (a layer's GEMMs and their FLOPs).
    """
    T = np.asarray(b, float) * s / np.asarray(c, float)
    return Gemm("output", T, x.V / np.asarray(t, float), x.h)


@_doc
def attention_flops(x: Shape, s, b, t=1, c=1, *, causal_skip: bool):
    r"""Forward FLOPs of the attention core (:math:`QK^T` and attention x V) on one GPU.

    .. math::

        2\,b\,\frac{s}{c}\,s\,\frac{a}{t}\,(d_{qk} + d_v)\;\cdot\;\bigl(\tfrac12\text{ if causal
        blocks are skipped (flash)}\bigr)

    Parameters
    ----------
    {shape_params}
    t, c : array_like
        Tensor- and context-parallel sizes [GPUs].
    causal_skip : bool
        Causal blocks are skipped (flash attention): half the FLOPs.

    Returns
    -------
    numpy.ndarray
        Forward FLOPs [FLOP].

    Examples
    --------
    GPT-3 175B, s = 2048, t = 8, b = 1: 2 * 2048^2 * 12 * 128 * 2 = 4 s^2 h / t FLOPs.

    >>> from memsym.model import preset
    >>> fl = attention_flops(shape_of(preset("gpt3-175b")), 2048, 1, 8, causal_skip=False)
    >>> float(fl) == 4 * 2048**2 * 12288 / 8
    True

    References
    ----------
    .. [narayanan] arXiv:2104.04473 Appendix (a layer's GEMMs and their FLOPs).
    """
    full = 2.0 * np.asarray(b, float) * (s / np.asarray(c, float)) * s * (x.a / np.asarray(t, float)) \
        * (x.d_qk + x.d_v)
    return full / 2 if causal_skip else full


@_doc
def memory_bytes(x: Shape, s, b, t=1, c=1, e=1, t_e=None, *, moe: bool, sequence_parallel: bool,
                 flash: bool, dropout: bool, width: int = 2, mixer: str = "attention",
                 mlp: bool = True):
    r"""HBM bytes of one layer's memory-bound forward operations on one GPU [bytes].

    Per element of the hidden state (:math:`T h`, divided by t under sequence parallelism,
    replicated on every TP rank without it): 2 norms (read + write: 4), 2 residual adds
    (2 reads + 1 write: 6), 2 dropouts (read, write and a 1-byte mask: 5, if dropout is on);
    the activation (GeLU: read + write of f; SwiGLU: 2 reads + 1 write); RoPE on Q and K;
    without flash attention the softmax reads and writes the :math:`s \times s` scores (plus
    attention dropout).  MoE layers add the routed experts' and shared expert's activations (the
    all-to-all dispatcher's router, permute, sort and unpermute copies are
    :func:`memsym.timing.moe.dispatch_bytes`).  The backward pass moves about 1.5 times these
    bytes (memsym.timing.step).  A hybrid's layer holds one norm and one residual add per
    block it has (a mixer, an MLP); a Mamba-2 mixer's own kernels are
    :func:`memsym.timing.ssm.ssd_kernels`'s, a Gated DeltaNet's
    :func:`memsym.timing.linear_attention.gdn_kernels`', forward and backward; attention's
    output gate (``_apply_output_gate``: reads the core's output and the gate, writes the
    product) adds :math:`3T a d_v/t`.  Memsym's count (assumption).

    Parameters
    ----------
    {shape_params}
    {parallel_params}
    moe, sequence_parallel, flash, dropout : bool
        A MoE layer; Megatron sequence parallelism; flash attention (no s x s scores);
        dropout on.
    width : int
        Bytes per element [bytes/element] (bf16: 2).
    mixer : {"attention", "mamba", "gdn", "none"}
        The layer's token mixer.
    mlp : bool
        The layer has an MLP or MoE block.

    Returns
    -------
    numpy.ndarray
        HBM bytes [bytes].

    Examples
    --------
    >>> from memsym.model import preset
    >>> x = shape_of(preset("gpt3-175b"))
    >>> nb = memory_bytes(x, 2048, 1, 8, moe=False, sequence_parallel=True, flash=True,
    ...                   dropout=False)
    >>> float(nb) == 2 * (10 * 2048 * 12288 / 8 + 2 * 2048 * 4 * 12288 / 8)
    True

    References
    ----------
    .. [korthikanti] arXiv:2205.05198 §4 (the activations a layer reads and writes).
    """
    t = np.asarray(t, float)
    c = np.asarray(c, float)
    t_e = t if t_e is None else np.asarray(t_e, float)
    T = np.asarray(b, float) * s / c
    hidden = T * x.h / (t if sequence_parallel else 1)
    blocks = (mixer != "none") + bool(mlp)
    elems = blocks * (5 + (2.5 if dropout else 0)) * hidden
    act = 3 if x.gated else 2
    if not mlp:
        pass
    elif moe:
        # the dispatcher's router, permute, sort and unpermute copies are priced with their
        # mirror backward in memsym.timing.moe.moe_layer_extras
        rows = np.asarray(b, float) * s * x.k * t_e / (t * c)
        elems = elems + act * rows * x.f_e / t_e
        if x.f_sh:
            elems = elems + act * T * x.f_sh / t
    else:
        elems = elems + act * T * x.f / t
    if mixer != "attention":
        return width * elems
    if x.output_gate:
        elems = elems + 3 * T * x.a * x.d_v / t
    if x.rope:
        elems = elems + rope_passes(x.rope_unfused) * T * (x.a + x.g) * x.d_qk / t
    if not flash:
        scores = np.asarray(b, float) * (x.a / t) * (s / c) * s
        elems = elems + (2 + (2.5 if dropout else 0)) * scores
    return width * elems
