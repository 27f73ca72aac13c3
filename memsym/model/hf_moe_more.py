"""The MoE ``config.json`` families of transformers 5.25.0 read beside the DeepSeek-style ones of
:mod:`memsym.model.hf_moe`: Hy3 (``hy_v3``), MiniCPM5 MoE (``minicpm5_moe``: gated attention),
Mellum2 (``mellum``), Kolibri 1 (``kolibri1``: four norms a layer) and Flint (``flint``: a
sink logit per head, an ungated shared expert).

Each reader returns :class:`~memsym.model.architecture.Architecture` keyword arguments read with
the defaults of transformers' config class and the modules its ``modeling_<type>.py`` builds
(transformers 5.25.0), so that the parameter count equals ``sum(p.numel())`` of
``AutoModelForCausalLM.from_config`` (``tests/test_hf_recent_types.py``).
:func:`memsym.model.hf_config.from_hf_config` dispatches here.
"""

from __future__ import annotations

from .hf_decoders import decoder_fields
from .hf_fields import ConfigFields
from .hf_moe import first_dense_pattern, mlp_layer_types, uncounted_notes

__all__ = ["MORE_MOE_READERS"]


def _read_hy_v3(c: ConfigFields, mtype: str, notes: list) -> dict:
    # transformers 5.25.0 modeling_hy_v3.py: HYV3Attention q, k, v, o bias=config.attention_bias,
    # q_norm and k_norm RMSNorm(head_dim) (:212-225); HYV3DecoderLayer: HYV3MLP of
    # intermediate_size where mlp_layer_types[i] == "dense" (default: layer 0,
    # configuration_hy_v3.py __post_init__), else HYV3MoE (:340-357): HYV3TopKRouter weight E x h
    # (no bias; e_score_correction_bias an nn.Buffer), E gated experts of moe_intermediate_size
    # (no bias) and a HYV3MLP shared expert of num_shared_experts * moe_intermediate_size
    kw = decoder_fields(c, mtype)
    if c.bool("mlp_bias", False):
        raise c._bad("mlp_bias true in a hy_v3 config is not modelled (biases on the dense and "
                     "shared-expert MLPs beside unbiased routed experts)")
    for key in ("num_experts", "num_experts_per_tok", "num_shared_experts"):
        if key in c.data and c.data[key] is None:
            raise c._bad(f"field {key!r} null: transformers builds no model of it; give a "
                         "number or leave it out")
    n_layers = kw["num_layers"]
    pattern = mlp_layer_types(c, n_layers, lambda n: tuple(int(i >= 1) for i in range(n)))
    n_exp = c.int(("num_experts", "num_local_experts"), 192)
    moe_f, n_shared = c.int("moe_intermediate_size", 1536), c.int("num_shared_experts", 1,
                                                                   allow_zero=True)
    # HYV3MLP takes intermediate_size or config.intermediate_size (:117): num_shared_experts 0
    # builds a shared expert of intermediate_size, not none
    shared_f = n_shared * moe_f or kw["ffn_hidden_size"]
    if not n_shared:
        notes.append(f"num_shared_experts 0: transformers' HYV3MoE builds a shared expert of "
                     f"intermediate_size ({shared_f}) all the same, counted")
    kw.update(attention_bias=c.bool("attention_bias", False), qk_layernorm=True,
              num_experts=n_exp, moe_router_topk=c.int("num_experts_per_tok", 8),
              moe_ffn_hidden_size=moe_f, moe_shared_expert_intermediate_size=shared_f,
              moe_layer_freq=pattern, moe_router_bias=False)
    if any(pattern):
        notes.append(f"e_score_correction_bias ({sum(pattern)} x {n_exp}) not counted: a buffer, "
                     "not a parameter, in transformers' HYV3MoE")
    return kw


def _read_minicpm5_moe(c: ConfigFields, mtype: str, notes: list) -> dict:
    # transformers 5.25.0 modeling_minicpm5_moe.py: MiniCPM5MoeAttention k, v, o and q_gate_proj
    # h -> 2 a d_h (the query and a sigmoid output gate: attention_output_gate), all
    # bias=config.attention_bias, no q/k norm (:241-264); MiniCPM5MoeMLP of intermediate_size
    # where mlp_layer_types[i] == "dense" (default: the first first_k_dense_replace layers, 1,
    # configuration_minicpm5_moe.py __post_init__), else MiniCPM5MoeMoE (:146-157): a router
    # weight E x h (e_score_correction_bias an nn.Buffer), E gated experts of
    # moe_intermediate_size and a gated shared MLP of n_shared_experts * moe_intermediate_size
    kw = decoder_fields(c, mtype)
    n_layers = kw["num_layers"]
    pattern = mlp_layer_types(c, n_layers, lambda n: first_dense_pattern(c, n, 1))
    n_exp = c.int(("n_routed_experts", "num_local_experts"), 160)
    moe_f = c.int("moe_intermediate_size", 512)
    n_shared = c.int("n_shared_experts", 1, allow_zero=True)
    kw.update(attention_bias=c.bool("attention_bias", False), attention_output_gate=True,
              num_experts=n_exp, moe_router_topk=c.int("num_experts_per_tok", 16),
              moe_ffn_hidden_size=moe_f,
              moe_shared_expert_intermediate_size=n_shared * moe_f or None,
              moe_layer_freq=pattern, moe_router_bias=False)
    uncounted_notes(c, notes, pattern, n_exp, "MiniCPM5Moe", mtp=False)
    return kw


def _read_mellum(c: ConfigFields, mtype: str, notes: list) -> dict:
    # transformers 5.25.0 modeling_mellum.py: MellumAttention q, k, v, o bias=
    # config.attention_bias, q_norm and k_norm RMSNorm(head_dim) (:215-228; its sliding-window
    # layers change no parameter); MellumDecoderLayer: MellumSparseMoeBlock where
    # mlp_layer_types[i] == "sparse" (default: every layer, configuration_mellum.py
    # __post_init__): a router weight E x h (no bias), E gated experts of moe_intermediate_size
    # (:275-335), else MellumMLP of intermediate_size; no MTP layer (:427 ignores mtp.*)
    kw = decoder_fields(c, mtype)
    n_layers = kw["num_layers"]
    pattern = mlp_layer_types(c, n_layers, lambda n: (1,) * n)
    kw.update(attention_bias=c.bool("attention_bias", False), qk_layernorm=True,
              num_experts=c.int(("num_local_experts", "num_experts"), 64),
              moe_router_topk=c.int("num_experts_per_tok", 8),
              moe_ffn_hidden_size=c.int("moe_intermediate_size", 896), moe_layer_freq=pattern,
              moe_router_bias=False)
    n_mtp = c.int(("num_nextn_predict_layers", "num_mtp_layers"), 0, allow_zero=True)
    if n_mtp:
        notes.append(f"num_mtp_layers={n_mtp} not counted: transformers' MellumForCausalLM "
                     "builds no MTP layer (count it with --mtp-num-layers when the training "
                     "framework builds one)")
    return kw


def _read_kolibri1(c: ConfigFields, mtype: str, notes: list) -> dict:
    # transformers 5.25.0 modeling_kolibri1.py: Kolibri1Attention q, k, v, o without bias,
    # q_norm and k_norm RMSNorm(head_dim) (:154-160; its sliding-window layers change no
    # parameter); Kolibri1DecoderLayer (:319-328): Kolibri1SparseMoeBlock in every layer (a
    # router weight E x h, its e_score_correction_bias an nn.Buffer; E gated experts of
    # moe_intermediate_size; a gated shared MLP of shared_expert_intermediate_size) and four
    # RMSNorms: input, post-attention (pre-MLP), post-self-attention and post-MLP.
    # Kolibri1Config has no intermediate_size (no dense MLP): the experts' width stands in
    moe_f = c.int("moe_intermediate_size", 512)
    kw = decoder_fields(ConfigFields({**c.data, "intermediate_size": moe_f}, c.where), mtype)
    n_exp = c.int(("num_local_experts", "num_experts"), 384)
    pattern = (1,) * kw["num_layers"]
    kw.update(attention_bias=False, qk_layernorm=True, norms_per_layer=4, num_experts=n_exp,
              moe_router_topk=c.int("num_experts_per_tok", 6), moe_ffn_hidden_size=moe_f,
              moe_shared_expert_intermediate_size=c.int("shared_expert_intermediate_size", 512,
                                                        allow_zero=True) or None,
              moe_layer_freq=pattern, moe_router_bias=False)
    notes.append(f"e_score_correction_bias ({sum(pattern)} x {n_exp}) not counted: a buffer, "
                 "not a parameter, in transformers' Kolibri1TopKRouter")
    return kw


def _read_flint(c: ConfigFields, mtype: str, notes: list) -> dict:
    # transformers 5.25.0 modeling_flint.py: FlintAttention q, k, v, o bias=
    # config.attention_bias, q_norm and k_norm RMSNorm(head_dim), a learned sink logit per head
    # (sinks, :263) in every layer, sliding or full; FlintDecoderLayer (:314-319):
    # FlintSparseMoeBlock iff i not in mlp_only_layers (default [0, 1]) and num_experts > 0 and
    # (i + 1) % decoder_sparse_step == 0: a router E x h (no bias), E gated experts of
    # moe_intermediate_size and an ungated shared MLP of shared_expert_intermediate_size
    # (:146-149); else FlintMLP of intermediate_size
    if c.data.get("mlp_only_layers") is None:
        c = ConfigFields({**c.data, "mlp_only_layers": [0, 1]}, c.where)
    kw = decoder_fields(c, mtype)
    n_exp = c.int("num_experts", 256, allow_zero=True)
    pattern = tuple(int(n_exp > 0) * sparse for sparse in c.sparse_step_layers(kw["num_layers"]))
    kw.update(attention_bias=c.bool("attention_bias", False), qk_layernorm=True,
              attention_sinks=True)
    if any(pattern):
        moe_f = c.int("moe_intermediate_size", 512)
        kw.update(num_experts=n_exp, moe_router_topk=c.int("num_experts_per_tok", 6),
                  moe_ffn_hidden_size=moe_f,
                  moe_shared_expert_intermediate_size=c.int(
                      "shared_expert_intermediate_size", 1024, allow_zero=True) or None,
                  moe_layer_freq=pattern, moe_router_bias=False)
    return kw


def _read_aria_text(c: ConfigFields, mtype: str, notes: list) -> dict:
    # transformers 5.25.0 modeling_aria.py: AriaTextAttention q, k, v, o bias=
    # config.attention_bias (:421-432); AriaTextDecoderLayer (:490-494): AriaTextMoELayer in
    # every layer (:319-326): a router weight E x h without bias (AriaTextTopKRouter, :263),
    # E SiLU-gated experts of intermediate_size (AriaExperts, :285-286: no bias) and a gated
    # shared MLP of intermediate_size x moe_num_shared_experts with bias=config.mlp_bias
    # (AriaSharedExpertsMLP, :241-244); AriaTextConfig's defaults 8 experts, top-2, two shared
    # (configuration_aria.py:85-87)
    if c.bool("mlp_bias", False):
        raise c._bad("mlp_bias true in an aria_text config (biases on the shared experts' "
                     "projections but not on the routed experts') is not modelled")
    kw = decoder_fields(c, mtype)
    ffn = kw["ffn_hidden_size"]
    n_layers = kw["num_layers"]
    kw.update(attention_bias=c.bool("attention_bias", False),
              num_experts=c.int("moe_num_experts", 8), moe_router_topk=c.int("moe_topk", 2),
              moe_ffn_hidden_size=ffn,
              moe_shared_expert_intermediate_size=ffn * c.int("moe_num_shared_experts", 2,
                                                              allow_zero=True) or None,
              moe_layer_freq=(1,) * n_layers, moe_router_bias=False)
    return kw


MORE_MOE_READERS = {"hy_v3": _read_hy_v3, "minicpm5_moe": _read_minicpm5_moe,
                    "mellum": _read_mellum, "kolibri1": _read_kolibri1, "flint": _read_flint,
                    "aria_text": _read_aria_text}
"""model_type -> its reader ``(c, mtype, notes) -> Architecture keyword arguments``."""
