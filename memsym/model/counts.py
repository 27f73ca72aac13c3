"""Exact parameter counts: symbolic forms in the registry's symbols and integers."""

from __future__ import annotations


import sympy as sp

from ..errors import InvalidValueError
from .architecture import Architecture, lenient, norm_params, padded_vocab_size, resolve
from .kv_sharing import kv_reuse_parts
from .per_layer_inputs import per_layer_model_parts
from .layer_patterns import (is_hybrid, mixer_counts, mixer_layer_count, moe_layer_count,
                             moe_layer_pattern)
from ..symbols import (E, G_ssm, H_idx, H_ssm, L, L_att, L_conv, L_ffn, L_gdn, L_glb, L_kvr,
                       L_kvrg, L_lin, L_m, L_ssm, N_ssm, V, V_pl, a, d_h, d_hg, d_idx, d_qk, d_r,
                       d_ssm, d_v, f, f_e, f_sh, g, g_g, h, h_lat, k, k_conv, n_mtp, p_pl, r_dt,
                       r_kv, r_q, s_max)
from .token_mixers import conv_parts, gdn_parts, lightning_parts, mixer_values
from .lora_counts import lora_parameter_count
from .shared_blocks import shared_parameter_parts
from ..text import shared_doc
from ..values import as_expr  # library arguments: text refused, never parsed

# ----------------------------------------------------------------------------------------------
# symbolic parameter counts
# ----------------------------------------------------------------------------------------------

__all__ = ["COMPONENTS", "parameter_expression", "parameter_values", "parameter_counts", "parameter_count", "active_parameter_count", "lora_parameter_count"]

_doc = shared_doc(count_params="""
    arch : Architecture
        The model.
    t : int
        Tensor-parallel size [GPUs]; matters only with ``pad_vocab``.
    pad_vocab : bool
        Count Megatron's padded vocabulary rows (default: the published vocabulary).
    """)


COMPONENTS = ("embedding", "position_embedding", "per_layer_inputs", "attention", "mamba",
              "linear_attention", "short_conv", "mlp", "norms", "router", "latent_projections",
              "shared_experts", "experts", "output_layer", "mtp", "mtp_experts")
"""Keys of :func:`parameter_expression` / :func:`parameter_counts`, in model order."""

ZERO = sp.Integer(0)


def _attention_bias(x: Architecture) -> bool:
    # Q, K, V and output-projection biases: their own switch, else Megatron's add_bias_linear
    return bool(x.add_bias_linear if x.attention_bias is None else x.attention_bias)


def _attention_parts(x: Architecture):
    """Per-layer attention parameters as (TP-sharded, TP-replicated) expressions."""
    bias_all = _attention_bias(x)
    bias_qkv = bias_all or x.add_qkv_bias
    # the output projection's bias: its own switch (GPT-Neo's out_proj alone), else bias_all
    bias_out = bias_all if x.attention_out_bias is None else x.attention_out_bias
    eta = norm_params(x)
    if x.multi_latent_attention:
        # DeepSeek-V2/V3 MLA (arXiv 2405.04434 §2.1): queries and keys/values through low-rank
        # latents with an RMSNorm each; the down projections are duplicated on every TP rank in
        # Megatron-core (parallel_mode="duplicated"), the up projections and output are sharded.
        rep = ZERO
        if x.q_lora_rank:
            rep += h * r_q + eta * r_q
            tp = r_q * a * (d_qk + d_r)
        else:
            tp = h * a * (d_qk + d_r)
        rep += h * (r_kv + d_r) + eta * r_kv
        tp += r_kv * a * (d_qk + d_v) + a * d_v * h
        if bias_all:  # not used by any preset; counted as Megatron would build it
            tp += a * (d_qk + d_r) + a * (d_qk + d_v)
            rep += h
        if x.dsa_index_heads:
            # DeepSeek-V3.2's indexer (transformers' DeepseekV32Indexer): wq_b r_q -> H_idx d_idx,
            # wk h -> d_idx, k_norm nn.LayerNorm(d_idx) (weight and bias), weights_proj
            # h -> H_idx, none biased; kept whole on every TP rank
            rep += r_q * H_idx * d_idx + h * d_idx + 2 * d_idx + h * H_idx
        return tp, rep
    # Q and O are h x a*d_h, K and V are h x g*d_h (GQA; g = a is multi-head attention).
    tp = h * a * d_h + 2 * h * g * d_h + a * d_h * h
    rep = ZERO
    if bias_qkv:
        tp += (a + 2 * g) * d_h
    if bias_out:
        rep += h                      # the output projection's bias (row-parallel: replicated)
    if x.qk_layernorm and x.qk_norm_width == "full":
        # OLMo 2 (Olmo2RMSNorm(a*d_h), (g*d_h)) and Cohere (CohereLayerNorm((a, d_h)), (g, d_h))):
        # a weight per query/key channel, split with the heads under TP
        tp += eta * (a + g) * d_h
    elif x.qk_layernorm:
        rep += 2 * eta * d_h          # one norm over the head dim for Q and one for K
    if x.attention_sinks:
        tp += a                       # one sink logit per head, sharded with the heads
    if x.attention_output_gate:
        # Qwen3-Next's q_proj h -> 2 a d_h: the query and a sigmoid gate on the output
        tp += h * a * d_h + (a * d_h if bias_qkv else ZERO)
    return tp, rep


def global_attention_parts(x: Architecture) -> tuple:
    r"""One global attention layer's attention parameters as (TP-sharded, TP-replicated)
    expressions: the model's attention at the global layers' head width and KV heads.

    .. math::
        P_{\mathrm{glb}} = h\,a d_{hg} + (1 + [v])\,h\,g_g d_{hg} + a d_{hg}\,h
            + 2\eta\,d_{hg} + [\mathrm{bias}](a + (1 + [v]) g_g) d_{hg}

    ([v]: the layer builds v_proj; without it, ``attention_k_eq_v``, its keys serve as values),
    plus the output bias, q/k norms and sinks as the model's other attention layers have them.

    Parameters
    ----------
    x : Architecture
        A model with ``"global"`` entries in ``layer_mixers``.

    Returns
    -------
    tuple of sympy.Expr
        (TP-sharded, replicated) [parameters].

    References
    ----------
    transformers 5.25.0 ``models/gemma4/modeling_gemma4.py``, ``Gemma4TextAttention.__init__``
    (head_dim and num_key_value_heads of ``config.per_layer_config[layer_idx]``; v_proj None
    under ``use_alternative_attention``) (hf-transformers-5-25).

    Examples
    --------
    >>> global_attention_parts(Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("attention", "global"),
    ...     global_kv_channels=8, global_num_query_groups=1, global_v_proj=False,
    ...     add_bias_linear=False))
    (2*a*d_hg*h + d_hg*g_g*h, 0)
    """
    tp, rep = _attention_parts(x)
    if not x.global_v_proj:
        # Gemma4TextAttention: v_proj None, value_states = key_states; its bias goes with it
        bias_qkv = _attention_bias(x) or x.add_qkv_bias
        tp -= h * g * d_h + (g * d_h if bias_qkv else ZERO)
    shapes = {d_h: d_hg, g: g_g}
    return sp.expand(tp.xreplace(shapes)), sp.expand(as_expr(rep).xreplace(shapes))


def _mlp_parts(x: Architecture, width, io=h):
    """An MLP of inner size ``width`` from and to ``io`` (h; a latent MoE's experts h_lat):
    (TP-sharded, replicated) weights and biases."""
    gated = x.gated
    tp = (3 if gated else 2) * io * width
    rep = ZERO
    if x.add_bias_linear:
        tp += (2 if gated else 1) * width   # column-parallel fc1 (gate and up) biases
        rep += io                           # row-parallel fc2 bias
    if x.xielu_activation:
        rep += 2                            # xIELU's alpha_p and alpha_n (Apertus), one each
    return tp, rep


def mamba_parts(x: Architecture):
    """One Mamba mixer's parameters as (TP-sharded, TP-replicated) expressions.

    Mamba-2 (Dao & Gu 2024 §7; transformers' BambaMixer, NemotronHMamba2Mixer, ...): in_proj
    h -> 2 d_ssm + 2 G N + H (z, x, B, C, dt), a depthwise conv1d of k_conv taps over
    x, B, C (d_ssm + 2 G N channels), dt_bias, A_log and D per head, a gated RMSNorm over
    d_ssm, out_proj d_ssm -> h.  Mamba-1 (Gu & Dao 2023 Algorithm 2; JambaMambaMixer):
    in_proj h -> 2 d_ssm (x, z), conv1d over d_ssm, x_proj d_ssm -> r_dt + 2N, dt_proj
    r_dt -> d_ssm with bias, A_log d_ssm x N, D d_ssm, out_proj d_ssm -> h, and Jamba's
    RMSNorms of r_dt, N, N on dt, B, C.  Megatron-core's MambaMixer shards in_proj by columns,
    the conv, heads and norm with them and out_proj by rows (its bias replicated).
    """
    rep = h if x.mamba_out_proj_bias else ZERO
    if x.mamba_version == 1:
        conv_ch = d_ssm
        tp = 2 * d_ssm * h + d_ssm * (r_dt + 2 * N_ssm) + r_dt * d_ssm + d_ssm
        tp += d_ssm * N_ssm + d_ssm + d_ssm * h
        if x.mamba_in_proj_bias:
            tp += 2 * d_ssm
        if x.mamba_inner_norms:
            rep += r_dt + 2 * N_ssm
    else:
        conv_ch = d_ssm + 2 * G_ssm * N_ssm
        proj = 2 * d_ssm + 2 * G_ssm * N_ssm + H_ssm
        tp = proj * h + 3 * H_ssm + d_ssm * h
        if x.mamba_in_proj_bias:
            tp += proj
        if x.mamba_gated_norm:
            tp += d_ssm
    tp += conv_ch * k_conv + (conv_ch if x.mamba_conv_bias else ZERO)
    return tp, rep


def layer_parts(x: Architecture, moe: bool) -> dict:
    """One decoder layer: component -> (TP-sharded, replicated, routed-expert) expressions."""
    at, ar = _attention_parts(x)
    parts = {"attention": (at, ar, ZERO),
             "norms": (ZERO, x.norms_per_layer * norm_params(x) * h, ZERO)}
    if x.per_layer_input_size:
        # Gemma4TextDecoderLayer (transformers 5.25.0 modeling_gemma4.py:1345-1350):
        # per_layer_input_gate h -> p, per_layer_projection p -> h (no bias) and
        # post_per_layer_input_norm of h; outside the TP plan, whole on every rank
        parts["per_layer_inputs"] = (ZERO, 2 * h * p_pl + norm_params(x) * h, ZERO)
    if not moe:
        mt, mr = _mlp_parts(x, f)
        parts["mlp"] = (mt, mr, ZERO)
        return parts
    router = h * E + (E if x.moe_router_bias else 0)
    parts["router"] = (ZERO, router, ZERO)
    if x.moe_shared_expert_intermediate_size:
        st, sr = _mlp_parts(x, f_sh)
        if x.moe_shared_expert_gate:
            sr += h
        parts["shared_experts"] = (st, sr, ZERO)
    if x.moe_latent_size:
        # Megatron-core moe_layer.py:266-304 (MoELayer.__init__): fc1_latent_proj h -> h_lat
        # and fc2_latent_proj h_lat -> h, TELinear(parallel_mode="duplicated"): whole on every
        # TP rank, biased with add_bias_linear
        bias = h_lat + h if x.add_bias_linear else ZERO
        parts["latent_projections"] = (ZERO, 2 * h * h_lat + bias, ZERO)
    # the routed experts run at the latent width (experts.py:217-245, TEGroupedMLP)
    et, er = _mlp_parts(x, f_e, h_lat if x.moe_latent_size else h)
    parts["experts"] = (ZERO, ZERO, E * (et + er))
    return parts


def _per_layer_total(x: Architecture, moe: bool, experts: bool = True):
    return sum((tp + rep + (ex if experts else 0) for tp, rep, ex in layer_parts(x, moe).values()),
               ZERO)


def mtp_extra(x: Architecture):
    # REF: DeepSeek-V3 (arXiv 2412.19437) §2.2: each MTP module has RMSNorms on the hidden state
    # and on the embedding, the projection M (2h -> h) and a transformer block; Megatron-core adds
    # a final norm per MTP layer.  The embedding and output head are shared with the main model.
    return 3 * norm_params(x) * h + 2 * h * h


_MTP_LETTERS = {"*": ("attention",), "M": (), "-": ("mlp",),   # beside each letter's norms
                "E": ("router", "latent_projections", "shared_experts")}


def _mtp_block(x: Architecture, last_moe: bool) -> tuple:
    # one MTP block (routed experts apart): a layer of the last layer's kind (GPT path), or a
    # hybrid's MTP pattern, a layer per letter (multi_token_prediction.py:1199-1229, HybridStack)
    if not x.mtp_layer_pattern:
        return (_per_layer_total(x, last_moe, experts=False),
                layer_parts(x, True)["experts"][2] if last_moe else ZERO)
    body = experts = ZERO
    for ch in x.mtp_layer_pattern:
        parts = layer_parts(x, ch == "E")
        body += parts["norms"][1] + (sum(mamba_parts(x), ZERO) if ch == "M" else ZERO)
        body += sum((sum(parts[k][:2], ZERO) for k in _MTP_LETTERS[ch] if k in parts), ZERO)
        experts += parts["experts"][2] if ch == "E" else ZERO
    return body, experts


def parameter_expression(arch: Architecture) -> dict:
    """The parameter count of each component as a SymPy expression in registry symbols.

    The structure (gated or not, GQA or MLA, biases, norms, tied or untied) comes from ``arch``;
    the sizes stay symbols (h, a, g, d_h, f, V, E, k, f_e, f_sh, L, L_m, s_max, r_q, r_kv,
    d_qk, d_r, d_v, n_mtp), and :func:`parameter_values` gives their values.

    .. math::
        N = \\underbrace{Vh}_{\\text{embedding}} + L\\,P_{\\text{attn}} + (L-L_m)P_{\\text{mlp}}
          + L_m\\,(hE + P_{\\text{sh}} + E\\,P_{\\text{exp}}) + n_{\\text{norm}}\\eta h L + \\eta h
          + [\\text{untied}]\\,Vh + n_{\\text{mtp}}(\\dots)

    (one MTP block in place of n_mtp with ``mtp_repeated``) with n_norm = ``norms_per_layer`` (2), η parameters per normalised element (2 LayerNorm,
    1 RMSNorm or bias-free LayerNorm, 0 non-parametric), plus V for an output-layer bias and ηh
    for an embedding norm where the model has them.

    Parameters
    ----------
    arch : Architecture
        The model.

    Returns
    -------
    dict
        ``{component: expr}`` for every key of :data:`COMPONENTS` [parameters].

    References
    ----------
    Narayanan et al. 2021, Eq. 2 (GPT); MEGATRON-ESTIMATORS.md §2.2 (GQA, SwiGLU, MoE, MLA).

    Examples
    --------
    >>> from memsym.model import preset
    >>> ex = parameter_expression(preset("llama2-7b"))
    >>> ex["attention"], ex["mlp"], ex["norms"]
    (L*(2*a*d_h*h + 2*d_h*g*h), 3*L*f*h, 2*L*h + h)
    """
    x = lenient(arch)
    pattern = moe_layer_pattern(x)
    hybrid = is_hybrid(x)
    n_att, n_ssm, n_ffn = mixer_counts(x)
    any_moe = any(pattern)
    # a hybrid model counts its attention and MLP/MoE layers by its own patterns (L_att, L_ffn)
    any_dense = n_ffn > sum(pattern) if hybrid else not all(pattern)
    layers_att = L_att if hybrid else L
    layers_ffn = L_ffn if hybrid else L
    n_moe = L_m if any_moe else ZERO
    n_dense = (layers_ffn - L_m) if any_moe else layers_ffn
    out = {key: ZERO for key in COMPONENTS}
    out["embedding"] = V * h
    if x.position_embedding_type == "learned_absolute":
        out["position_embedding"] = s_max * h
    if x.untie_embeddings_and_output_weights:
        out["output_layer"] = V * h
    if x.output_layer_bias:                      # GPT-J's lm_head bias (kept when tied, too)
        out["output_layer"] += V
    dense_parts = layer_parts(x, False) if any_dense else {}
    moe_parts = layer_parts(x, True) if any_moe else {}
    for key, layers in (("attention", layers_att), ("norms", L)):
        if not hybrid or n_att or key == "norms":
            out[key] = layers * sum(layer_parts(x, any_moe)[key][:3], ZERO)
    if n_ssm:
        out["mamba"] = L_ssm * sum(mamba_parts(x), ZERO)
    if mixer_layer_count(x, "gdn"):
        out["linear_attention"] = L_gdn * sum(gdn_parts(x), ZERO)
    if mixer_layer_count(x, "lightning"):
        out["linear_attention"] += L_lin * sum(lightning_parts(x), ZERO)
    if mixer_layer_count(x, "conv"):
        out["short_conv"] = L_conv * sum(conv_parts(x), ZERO)
    if mixer_layer_count(x, "global"):
        out["attention"] += L_glb * sum(global_attention_parts(x), ZERO)
    if x.per_layer_input_size:
        out["per_layer_inputs"] = L * layer_parts(x, any_moe)["per_layer_inputs"][1] \
            + per_layer_model_parts(x)
    if x.shared_blocks:                          # Zamba's shared blocks: each weight once
        for key, expr in shared_parameter_parts(x).items():
            out[key] += expr
    out["norms"] += norm_params(x) * h                  # final norm
    if x.embedding_norm:                         # BLOOM's word_embeddings_layernorm
        out["norms"] += norm_params(x) * h
    if any_dense:
        out["mlp"] = n_dense * sum(dense_parts["mlp"], ZERO)
    for sym, mixer in ((L_kvr, "kv_reuse"), (L_kvrg, "global_kv_reuse")):
        if mixer_layer_count(x, mixer):           # layers reusing keys and values (Gemma 4)
            glob = mixer == "global_kv_reuse"
            base = global_attention_parts(x) if glob else _attention_parts(x)
            out["attention"] += sym * sum(kv_reuse_parts(x, base, glob), ZERO)
            if x.kv_reuse_wide_mlp:               # their MLP of 2f: once more its f-wide part
                out["mlp"] += sym * _mlp_parts(x, f)[0]
    for key in ("router", "latent_projections", "shared_experts", "experts"):
        if key in moe_parts:
            out[key] = n_moe * sum(moe_parts[key], ZERO)
    if x.mtp_num_layers:
        # mtp_use_repeated_layer: Megatron builds one MTP layer and runs it n_mtp times
        # (multi_token_prediction.py:1960-1969, 1985-1996, 2049 at d98e8a64dd)
        blocks = 1 if x.mtp_repeated else n_mtp
        body, experts = _mtp_block(x, pattern[-1])
        out["mtp"], out["mtp_experts"] = blocks * (body + mtp_extra(x)), blocks * experts
    return {key: sp.expand(val) if key in ("mtp", "mtp_experts") else val
            for key, val in out.items()}


def parameter_values(arch: Architecture, t: int = 1, pad_vocab: bool = False) -> dict:
    """The values of the symbols in :func:`parameter_expression` for ``arch`` (exact Integers).

    ``V`` is the published vocabulary, or Megatron's padded one when ``pad_vocab`` (padding to a
    multiple of ``make_vocab_size_divisible_by * t``).

    Parameters
    ----------
    arch : Architecture
        The model.
    t : int
        Tensor-parallel size [GPUs]; matters only with ``pad_vocab``.
    pad_vocab : bool
        Use Megatron's padded vocabulary (default: the published one).

    Returns
    -------
    dict of sympy.Symbol to sympy.Integer
        The architecture symbols (``h``, ``V``, ``L``, ...) and their values.

    Examples
    --------
    >>> from memsym.model import preset
    >>> vals = parameter_values(preset("gpt3-175b"), pad_vocab=True)
    >>> int(vals[V]), int(vals[h])
    (50304, 12288)
    """
    x = resolve(arch)   # strict: learned positions need max_position_embeddings
    vocab = (padded_vocab_size(x.vocab_size, t, x.make_vocab_size_divisible_by) if pad_vocab
             else x.vocab_size)
    vals = {h: x.hidden_size, a: x.num_attention_heads, g: x.num_query_groups,
            d_h: x.kv_channels, f: x.ffn_hidden_size, V: vocab, L: x.num_layers,
            s_max: x.max_position_embeddings or 1, n_mtp: x.mtp_num_layers,
            L_m: moe_layer_count(x)}
    vals[L_att], vals[L_ssm], vals[L_ffn] = mixer_counts(x)
    if vals[L_ssm]:
        vals.update({d_ssm: x.mamba_inner_size, N_ssm: x.mamba_state_dim,
                     k_conv: x.mamba_conv_kernel})
        if x.mamba_version == 1:
            vals[r_dt] = x.mamba_dt_rank
        else:
            vals.update({H_ssm: x.mamba_num_heads, G_ssm: x.mamba_num_groups})
    if x.is_moe:
        vals.update({E: x.num_experts, k: x.moe_router_topk, f_e: x.moe_ffn_hidden_size,
                     f_sh: x.moe_shared_expert_intermediate_size or 0})
        if x.moe_latent_size:
            vals[h_lat] = x.moe_latent_size
    if x.multi_latent_attention:
        vals.update({r_kv: x.kv_lora_rank, d_qk: x.qk_head_dim, d_r: x.qk_pos_emb_head_dim,
                     d_v: x.v_head_dim})
        if x.q_lora_rank:
            vals[r_q] = x.q_lora_rank
        if x.dsa_index_heads:
            vals.update({H_idx: x.dsa_index_heads, d_idx: x.dsa_index_head_dim})
    for sym, mixer in ((L_gdn, "gdn"), (L_conv, "conv"), (L_lin, "lightning"), (L_glb, "global"),
                       (L_kvr, "kv_reuse"), (L_kvrg, "global_kv_reuse")):
        if mixer_layer_count(x, mixer):
            vals[sym] = mixer_layer_count(x, mixer)
    if mixer_layer_count(x, "global") or mixer_layer_count(x, "global_kv_reuse"):
        vals.update({d_hg: x.global_kv_channels, g_g: x.global_num_query_groups})
    if x.per_layer_input_size:
        vals.update({p_pl: x.per_layer_input_size, V_pl: x.per_layer_input_vocab})
    vals.update(mixer_values(x))
    return {sym: sp.Integer(val) for sym, val in vals.items()}


def as_int(expr, vals) -> int:
    value = sp.sympify(expr).xreplace(vals)
    if not value.is_Integer:  # pragma: no cover - a symbol left unvalued is a bug here
        raise InvalidValueError(f"parameter count did not evaluate to an integer: {value}")
    return int(value)


@_doc
def parameter_counts(arch: Architecture, t: int = 1, pad_vocab: bool = False) -> dict:
    """Exact parameter count of each component [parameters], keys as :data:`COMPONENTS`.

    Parameters
    ----------
    {count_params}

    Returns
    -------
    dict of str to int
        Parameters of each component [parameters].

    Examples
    --------
    >>> from memsym.model import preset
    >>> c = parameter_counts(preset("llama2-7b"))
    >>> c["embedding"], c["output_layer"], c["norms"]
    (131072000, 131072000, 266240)
    """
    vals = parameter_values(arch, t, pad_vocab)
    return {key: as_int(expr, vals) for key, expr in parameter_expression(arch).items()}


def _kept_sum(counts: dict, mtp: bool, embedding: bool) -> int:
    """The sum of ``counts`` without the MTP layers (unless ``mtp``) and the input embedding
    (unless ``embedding``)."""
    if not mtp:
        counts["mtp"] = counts["mtp_experts"] = 0
    if not embedding:
        counts["embedding"] = counts["position_embedding"] = 0
    return sum(counts.values())


def parameter_count(arch: Architecture, t: int = 1, pad_vocab: bool = False, mtp: bool = True,
                    embedding: bool = True) -> int:
    """The exact number of parameters of ``arch`` [parameters].

    .. math:: N = \\sum_{\\text{components}} N_c

    Parameters
    ----------
    arch : Architecture
        The model.
    t : int
        Tensor-parallel size [GPUs]; matters only with ``pad_vocab`` (the padding multiple is
        128·t).
    pad_vocab : bool
        Count Megatron's padded vocabulary rows (default: the published vocabulary).
    mtp : bool
        Include the multi-token-prediction layers (DeepSeek-V3's published 671B excludes them).
    embedding : bool
        Include the input embedding (and learned position table).

    Examples
    --------
    >>> from memsym.model import preset
    >>> parameter_count(preset("llama2-7b"))
    6738415616
    """
    counts = parameter_counts(arch, t, pad_vocab)
    return _kept_sum(counts, mtp, embedding)


@_doc
def active_parameter_count(arch: Architecture, t: int = 1, pad_vocab: bool = False,
                           mtp: bool = False, embedding: bool = True) -> int:
    """Parameters a token passes through: routed experts count k of E per MoE layer.

    .. math:: N_{\\text{active}} = N - L_m (E - k) P_{\\text{exp}}

    MTP layers are excluded by default (they are a training-only head).  DeepSeek-V3's "37B
    activated" and gpt-oss's "5.1B active" are stated without the input embedding: pass
    ``embedding=False`` for those.

    Parameters
    ----------
    {count_params}
    mtp : bool
        Include the multi-token-prediction layers (default: excluded).
    embedding : bool
        Include the input embedding (and learned position table).

    Returns
    -------
    int
        Active parameters [parameters].

    Examples
    --------
    >>> from memsym.model import preset
    >>> active_parameter_count(preset("mixtral-8x7b"))
    12879925248
    """
    counts = parameter_counts(arch, t, pad_vocab)
    x = lenient(arch)
    if x.is_moe:
        ratio = sp.Rational(x.moe_router_topk, x.num_experts)
        counts["experts"] = int(counts["experts"] * ratio)
        counts["mtp_experts"] = int(counts["mtp_experts"] * ratio)
    return _kept_sum(counts, mtp, embedding)
