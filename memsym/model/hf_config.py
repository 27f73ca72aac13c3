"""The Hugging Face ``config.json`` reader: one local file in, the :class:`Architecture` out.

Each accepted ``model_type`` is read with the defaults of transformers' own config class and the
modules its ``modeling_<type>.py`` builds, so that the parameter count equals
``sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())`` (transformers 5.24.0,
checked by ``tests/test_hf_configs.py`` and ``tests/test_hf_newer_types.py``).  Nothing in the
file is evaluated; every size is bounded.
"""

from __future__ import annotations

import os

from ..errors import UnknownNameError
from .architecture import Architecture, printable, resolve
from .hf_fields import ConfigFields, read_config_json
from .hf_hybrid import HYBRID_READERS, HYBRID_TYPES

__all__ = ["from_hf_config", "HF_MODEL_TYPES"]


# model_type -> the config class's defaults that matter when the file omits the field:
# (tie_word_embeddings, num_key_value_heads (None: = num_attention_heads), head_dim (None: h/a),
#  max_position_embeddings).  REF: transformers 5.24.0 models/<type>/configuration_<type>.py,
# the dataclass field defaults and __post_init__.
_DEFAULTS = {
    "llama": (False, None, None, 2048),
    "mistral": (False, 8, None, 131072),
    "mixtral": (False, 8, None, 131072),
    "qwen2": (False, 32, None, 32768),
    "qwen3": (False, 32, 128, 32768),
    "qwen2_moe": (False, 16, None, 32768),
    "qwen3_moe": (False, 4, None, 32768),
    "deepseek_v2": (False, None, None, 2048),
    "deepseek_v3": (False, None, None, 4096),
    "gpt_oss": (False, 8, 64, 131072),
    "gpt2": (True, None, None, 1024),
    "gpt_neox": (False, None, None, 2048),
    "gemma": (True, 16, 256, 8192),
    "gemma2": (True, 4, 256, 8192),
    "gemma3_text": (True, 4, 256, 131072),
    "phi3": (False, None, None, 4096),
    "phimoe": (False, 8, None, 131072),
    "olmo": (False, None, None, 2048),
    "olmo2": (False, None, None, 2048),
    "gptj": (False, None, None, 2048),
    "falcon": (True, None, None, 2048),
    "bloom": (True, None, None, None),
    "starcoder2": (True, 2, None, 4096),
    "cohere": (True, None, None, 8192),
    "granite": (False, None, None, 2048),
    "granitemoe": (False, None, None, 2048),
    # the newer families (issue 32)
    "llama4_text": (False, 8, 128, 131072),
    "olmoe": (False, None, None, 4096),
    "smollm3": (True, 4, None, 32768),
    "glm4": (False, 2, 128, 131072),
    "glm4_moe": (False, 8, None, 131072),
    "ernie4_5": (True, 2, 128, 131072),
    "ernie4_5_moe": (True, 4, None, 131072),
    "seed_oss": (False, 8, 128, 524288),
    "exaone4": (False, 32, None, 2048),
    "hunyuan_v1_dense": (False, None, None, 2048),
    "apertus": (False, None, None, 65536),
    "arcee": (False, None, None, 4096),
    "dots1": (False, 32, None, 2048),
}
# model_type of a vision-language file -> (the model_type of its text_config, the text config
# class's defaults of the core sizes, which the released files omit).  REF: transformers 5.24.0
# configuration_gemma3.py Gemma3TextConfig, configuration_llama4.py Llama4TextConfig.
_TEXT_CONFIG = {
    "gemma3": ("gemma3_text", {"hidden_size": 2304, "intermediate_size": 9216,
                               "num_hidden_layers": 26, "num_attention_heads": 8,
                               "vocab_size": 262208}),
    "llama4": ("llama4_text", {"hidden_size": 5120, "intermediate_size": 8192,
                               "num_hidden_layers": 48, "num_attention_heads": 40,
                               "vocab_size": 202048}),
}
# model types transformers builds with layers memsym does not model: refused in one line that
# says so, with no near name suggested (a near name is another model, with another count)
_HYBRID_MAMBA = ("hybrid Mamba layers with attention blocks shared across layers are not "
                 "modelled")
_NOT_MODELLED = {
    "zamba": _HYBRID_MAMBA, "zamba2": _HYBRID_MAMBA,
    "mamba": "Mamba (state-space) layers are not modelled",
    "mamba2": "Mamba (state-space) layers are not modelled",
    "falcon_mamba": "Mamba (state-space) layers are not modelled",
    "qwen3_next": "hybrid Gated DeltaNet (linear-attention) layers are not modelled",
    "minimax": "hybrid lightning (linear-attention) layers are not modelled",
}
# model_type -> the dropout probabilities its causal LM applies, with the config class's
# defaults.  REF: transformers 5.24.0 modeling_<type>.py (the config fields its nn.Dropout
# modules and attention's dropout read; gpt2's hidden_dropout and the classifier/summary
# dropouts belong to other heads) and configuration_<type>.py (the defaults).
_ATTENTION_ONLY = {"attention_dropout": 0.0}
_DROPOUT = {mtype: _ATTENTION_ONLY for mtype in _DEFAULTS}
_DROPOUT.update({
    "ernie4_5": {}, "ernie4_5_moe": {},          # attention dropout fixed at 0.0 in modeling
    "seed_oss": {"attention_dropout": 0.1, "residual_dropout": 0.1},
    "gpt2": {"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1},
    "gptj": {"attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0},
    "phi3": {"attention_dropout": 0.0, "resid_pdrop": 0.0},
    "gpt_neox": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    "bloom": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    "falcon": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    "starcoder2": {"attention_dropout": 0.0, "residual_dropout": 0.0, "embedding_dropout": 0.0},
})
_DROPOUT.update({mtype: row[2] for mtype, row in HYBRID_READERS.items()})
HF_MODEL_TYPES = tuple(sorted(set(_DEFAULTS) | set(_TEXT_CONFIG) | set(HYBRID_TYPES)))
"""The ``model_type`` values :func:`from_hf_config` reads."""

_HF_ARCHS = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
             "MixtralForCausalLM": "mixtral", "Qwen2ForCausalLM": "qwen2",
             "Qwen3ForCausalLM": "qwen3", "Qwen2MoeForCausalLM": "qwen2_moe",
             "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV2ForCausalLM": "deepseek_v2",
             "DeepseekV3ForCausalLM": "deepseek_v3", "GptOssForCausalLM": "gpt_oss",
             "GPT2LMHeadModel": "gpt2", "GPTNeoXForCausalLM": "gpt_neox",
             "GemmaForCausalLM": "gemma", "Gemma2ForCausalLM": "gemma2",
             "Gemma3ForCausalLM": "gemma3_text", "Phi3ForCausalLM": "phi3",
             "PhimoeForCausalLM": "phimoe", "OlmoForCausalLM": "olmo",
             "Olmo2ForCausalLM": "olmo2", "GPTJForCausalLM": "gptj",
             "FalconForCausalLM": "falcon", "BloomForCausalLM": "bloom",
             "Starcoder2ForCausalLM": "starcoder2", "CohereForCausalLM": "cohere",
             "GraniteForCausalLM": "granite", "GraniteMoeForCausalLM": "granitemoe",
             "Llama4ForCausalLM": "llama4_text", "Llama4ForConditionalGeneration": "llama4",
             "Gemma3ForConditionalGeneration": "gemma3", "OlmoeForCausalLM": "olmoe",
             "SmolLM3ForCausalLM": "smollm3", "Glm4ForCausalLM": "glm4",
             "Glm4MoeForCausalLM": "glm4_moe", "Ernie4_5ForCausalLM": "ernie4_5",
             "Ernie4_5_MoeForCausalLM": "ernie4_5_moe", "SeedOssForCausalLM": "seed_oss",
             "Exaone4ForCausalLM": "exaone4", "HunYuanDenseV1ForCausalLM": "hunyuan_v1_dense",
             "ApertusForCausalLM": "apertus", "ArceeForCausalLM": "arcee",
             "Dots1ForCausalLM": "dots1", "JambaForCausalLM": "jamba",
             "BambaForCausalLM": "bamba", "FalconH1ForCausalLM": "falcon_h1",
             "NemotronHForCausalLM": "nemotron_h",
             "GraniteMoeHybridForCausalLM": "granitemoehybrid"}


# ----------------------------------------------------------------------------------------------
# one reader per family; each returns Architecture keyword arguments
# ----------------------------------------------------------------------------------------------

def _decoder(c: ConfigFields, mtype: str, gated: bool = True, norm: str = "RMSNorm") -> dict:
    """The fields every Llama-like config spells the same way (core sizes required)."""
    _, kv_default, hd_default, pos_default = _DEFAULTS[mtype]
    heads = c.int("num_attention_heads")
    return dict(num_layers=c.int("num_hidden_layers"), hidden_size=c.int("hidden_size"),
                num_attention_heads=heads,
                num_query_groups=c.int("num_key_value_heads",
                                       heads if kv_default is None else kv_default, null=heads),
                # modeling: getattr(config, "head_dim", h // a); a null head_dim is h // a too
                kv_channels=c.int("head_dim", hd_default, null=None),
                ffn_hidden_size=c.int("intermediate_size"), swiglu=gated, normalization=norm,
                vocab_size=c.int("vocab_size"), position_embedding_type="rope",
                max_position_embeddings=c.int("max_position_embeddings", pos_default),
                add_bias_linear=False)


def _read_llama_like(c: ConfigFields, mtype: str, notes: list) -> dict:
    kw = _decoder(c, mtype)
    if mtype in ("llama", "granite", "smollm3", "arcee"):
        # LlamaAttention / GraniteAttention / SmolLM3Attention / ArceeAttention: q, k, v, o with
        # bias=config.attention_bias; their MLPs' projections with bias=config.mlp_bias
        kw["attention_bias"] = c.bool("attention_bias", False)
        kw["add_bias_linear"] = c.bool("mlp_bias", False)
    elif mtype in ("qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text", "olmo", "olmo2",
                   "cohere", "phimoe", "granitemoe", "olmoe", "hunyuan_v1_dense", "apertus"):
        kw["attention_bias"] = c.bool("attention_bias", False)   # MLP / experts never biased
    elif mtype == "qwen2":
        kw["add_qkv_bias"] = True           # Qwen2Attention: q, k, v with bias=True, o without
    elif mtype == "qwen2_moe":
        kw["add_qkv_bias"] = c.bool("qkv_bias", True)
    elif mtype == "glm4":
        # Glm4Attention: q, k, v with bias=config.attention_bias (default True), o_proj bias=False
        kw["add_qkv_bias"] = c.bool("attention_bias", True)
    elif mtype == "ernie4_5":
        # Ernie4_5Attention q, k, v, o and Ernie4_5MLP gate, up, down: bias=config.use_bias
        kw["add_bias_linear"] = c.bool("use_bias", False)
    elif mtype == "seed_oss":
        # SeedOssAttention: q, k, v bias=config.attention_bias, o bias=config.attention_out_bias;
        # SeedOssMLP: bias=config.mlp_bias
        qkv, out = c.bool("attention_bias", True), c.bool("attention_out_bias", False)
        if out and not qkv:
            raise c._bad("attention_out_bias true with attention_bias false (an output-projection "
                         "bias without q, k, v biases) is not modelled")
        kw.update(attention_bias=out, add_qkv_bias=qkv, add_bias_linear=c.bool("mlp_bias", False))
    # mistral, mixtral, phi3, exaone4: every projection bias=False whatever the file says
    if mtype in ("qwen3", "qwen3_moe", "exaone4", "hunyuan_v1_dense", "apertus"):
        # Qwen3 / Exaone4 / Apertus q_norm, k_norm and HunYuan's query_layernorm,
        # key_layernorm: an RMSNorm(head_dim) each on q and on k
        kw["qk_layernorm"] = True
    if mtype == "hunyuan_v1_dense" and kw["kv_channels"] is None:
        # HunYuanDenseV1Attention reads config.head_dim, whose default is None: transformers
        # cannot build the model without it
        raise c._bad("missing field 'head_dim' (transformers' HunYuanDenseV1Attention needs it)")
    if mtype in ("arcee", "apertus"):
        # ArceeMLP / ApertusMLP: up_proj, act, down_proj (no gate)
        kw["swiglu"] = False
    if mtype == "apertus":
        # ApertusMLP replaces the activation by XIELU (learned alpha_p, alpha_n) iff
        # hidden_act == "xielu"; every other ACT2FN activation has no parameter
        kw["xielu_activation"] = c.str("hidden_act", "xielu") == "xielu"
    if mtype in ("gemma2", "gemma3_text", "glm4"):
        # input, post_attention, pre_feedforward and post_feedforward norms (Glm4DecoderLayer:
        # input, post_self_attn, post_attention and post_mlp)
        kw["norms_per_layer"] = 4
    if mtype == "gemma3_text":
        kw["qk_layernorm"] = True           # Gemma3RMSNorm(head_dim) on q and on k
    if mtype == "olmo":
        kw["norm_affine"] = False           # OlmoLayerNorm: F.layer_norm(x, shape, None, None)
        kw["normalization"] = "LayerNorm"
    if mtype == "olmo2":
        # Olmo2RMSNorm(a*d_h) on q and (g*d_h) on k; post_attention and post_feedforward norms
        kw.update(qk_layernorm=True, qk_norm_width="full")
    if mtype == "olmoe":
        # OlmoeAttention: q_norm = RMSNorm(h), k_norm = RMSNorm((h // a) * g), which are a*d_h
        # and g*d_h only when d_h = h / a; OlmoeSparseMoeBlock in every layer: a router h x E
        # (no bias) and E gated experts of intermediate_size
        hs, heads = kw["hidden_size"], kw["num_attention_heads"]
        if kw["kv_channels"] not in (None, hs // heads) or hs % heads:
            raise c._bad("an OLMoE head_dim other than hidden_size / num_attention_heads is not "
                         "modelled (its q and k norms keep the hidden size)")
        kw.update(qk_layernorm=True, qk_norm_width="full", num_experts=c.int("num_experts", 64),
                  moe_router_topk=c.int("num_experts_per_tok", 8),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"], moe_router_bias=False)
    if mtype == "cohere":
        # CohereLayerNorm: a weight, no bias; one input norm feeding attention and MLP in
        # parallel; use_qk_norm: CohereLayerNorm((a, d_h)) on q and ((g, d_h)) on k
        kw.update(normalization="LayerNorm", norm_bias=False, norms_per_layer=1,
                  parallel_attention=True)
        if c.bool("use_qk_norm", False):
            kw.update(qk_layernorm=True, qk_norm_width="full")
    if mtype == "phimoe":
        # nn.LayerNorm(elementwise_affine=True) norms; lm_head bias=config.lm_head_bias
        kw.update(normalization="LayerNorm", output_layer_bias=c.bool("lm_head_bias", False))
    if mtype == "mixtral":
        kw.update(num_experts=c.int("num_local_experts", 8),
                  moe_router_topk=c.int("num_experts_per_tok", 2),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"], moe_router_bias=False)
    if mtype == "phimoe":
        kw.update(num_experts=c.int("num_local_experts", 16),
                  moe_router_topk=c.int("num_experts_per_tok", 2),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"], moe_router_bias=False)
    if mtype == "granitemoe":
        kw.update(num_experts=c.int("num_local_experts", 8, null=8),
                  moe_router_topk=c.int("num_experts_per_tok", 2, null=2),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"], moe_router_bias=False)
    if mtype in ("qwen2_moe", "qwen3_moe"):
        n_layers = kw["num_layers"]
        n_exp = c.int("num_experts", 60 if mtype == "qwen2_moe" else 128)
        step = c.int("decoder_sparse_step", 1)
        dense_only = set(c.int_list("mlp_only_layers"))
        # DecoderLayer: sparse iff i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
        pattern = tuple(int(i not in dense_only and (i + 1) % step == 0) for i in range(n_layers))
        kw.update(num_experts=n_exp,
                  moe_router_topk=c.int("num_experts_per_tok", 4 if mtype == "qwen2_moe" else 8),
                  moe_ffn_hidden_size=c.int("moe_intermediate_size",
                                            1408 if mtype == "qwen2_moe" else 768),
                  moe_layer_freq=pattern, moe_router_bias=False)
        if mtype == "qwen2_moe":
            kw.update(moe_shared_expert_intermediate_size=c.int(
                "shared_expert_intermediate_size", 5632, allow_zero=True) or None,
                moe_shared_expert_gate=True)
    if mtype == "gpt_oss":
        kw.update(add_bias_linear=c.bool("attention_bias", True), attention_sinks=True,
                  num_experts=c.int("num_local_experts", 128),
                  moe_router_topk=c.int(("num_experts_per_tok", "experts_per_token"), 4),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"])
    return kw


def _read_llama4(c: ConfigFields, mtype: str, notes: list) -> dict:
    # Llama4TextDecoderLayer: Llama4TextMoe iff layer_idx in config.moe_layers (default
    # range(step - 1, L, step), step = interleave_moe_layer_step), else Llama4TextMLP of
    # intermediate_size_mlp.  Llama4TextMoe: router h x E (no bias), E gated experts and one
    # gated shared expert, all of intermediate_size.  The q/k norm (Llama4TextL2Norm) has no
    # weight; no_rope_layers and attention_chunk_size change no parameter.
    kw = _decoder(c, mtype)
    n_layers, f_expert = kw["num_layers"], kw["ffn_hidden_size"]
    if c.data.get("moe_layers") is not None:
        listed = set(c.int_list("moe_layers"))
        pattern = tuple(int(i in listed) for i in range(n_layers))
    else:
        step = c.int("interleave_moe_layer_step", 1)
        pattern = tuple(int(i % step == step - 1) for i in range(n_layers))
    kw.update(attention_bias=c.bool("attention_bias", False),
              ffn_hidden_size=c.int("intermediate_size_mlp", 16384),
              num_experts=c.int("num_local_experts", 16),
              moe_router_topk=c.int("num_experts_per_tok", 1), moe_ffn_hidden_size=f_expert,
              moe_shared_expert_intermediate_size=f_expert, moe_layer_freq=pattern,
              moe_router_bias=False)
    return kw


def _first_dense_pattern(c: ConfigFields, n_layers: int, default: int) -> tuple:
    # DeepSeek-style decoder layer: MoE iff layer_idx >= config.first_k_dense_replace
    first_dense = c.int("first_k_dense_replace", default, allow_zero=True, null=default)
    return tuple(int(i >= first_dense) for i in range(n_layers))


def _read_shared_moe(c: ConfigFields, mtype: str, notes: list) -> dict:
    # Glm4MoeDecoderLayer / Dots1DecoderLayer: a gated MLP of intermediate_size in the first
    # first_k_dense_replace layers, then MoE: a router weight E x h (its
    # e_score_correction_bias is an nn.Buffer, not a parameter), E gated experts of
    # moe_intermediate_size and one gated shared MLP of n_shared_experts * moe_intermediate_size.
    glm = mtype == "glm4_moe"
    kw = _decoder(c, mtype)
    if glm:
        # Glm4MoeAttention: q, k, v bias=config.attention_bias, o_proj bias=False; q_norm,
        # k_norm = RMSNorm(head_dim) iff use_qk_norm
        kw.update(add_qkv_bias=c.bool("attention_bias", False),
                  qk_layernorm=c.bool("use_qk_norm", False))
        n_exp, n_shared = c.int("n_routed_experts", 128), c.int("n_shared_experts", 1,
                                                                 allow_zero=True)
        topk, moe_f = c.int("num_experts_per_tok", 8), c.int("moe_intermediate_size", 1408)
    else:
        # Dots1Attention: q, k, v, o bias=config.attention_bias; RMSNorm(head_dim) on q and k.
        # n_routed_experts, n_shared_experts and num_experts_per_tok default to None in
        # Dots1Config, which builds no model: they are required
        kw.update(attention_bias=c.bool("attention_bias", False), qk_layernorm=True)
        n_exp, n_shared = c.int("n_routed_experts"), c.int("n_shared_experts", allow_zero=True)
        topk, moe_f = c.int("num_experts_per_tok"), c.int("moe_intermediate_size", 1408)
    pattern = _first_dense_pattern(c, kw["num_layers"], 1 if glm else 0)
    kw.update(num_experts=n_exp, moe_router_topk=topk, moe_ffn_hidden_size=moe_f,
              moe_shared_expert_intermediate_size=n_shared * moe_f or None,
              moe_layer_freq=pattern, moe_router_bias=False)
    _uncounted_notes(c, notes, pattern, n_exp, "Glm4Moe" if glm else "Dots1", mtp=glm)
    return kw


def _uncounted_notes(c: ConfigFields, notes: list, pattern, n_exp: int, cls: str, *, mtp: bool) -> None:
    """Say what a DeepSeek-V3-style config holds that transformers' ``cls`` model does not
    build as parameters: the routers' e_score_correction_bias (an nn.Buffer) and, where the
    config has them, the MTP layers (num_nextn_predict_layers)."""
    if any(pattern):
        notes.append(f"e_score_correction_bias ({sum(pattern)} x {n_exp}) not counted: a buffer, "
                     f"not a parameter, in transformers' {cls}TopkRouter")
    n_mtp = c.int("num_nextn_predict_layers", 0, allow_zero=True) if mtp else 0
    if n_mtp:
        notes.append(f"num_nextn_predict_layers={n_mtp} not counted: transformers' "
                     f"{cls}ForCausalLM builds no MTP layer (count it with --mtp-num-layers "
                     "when the training framework builds one)")


def _read_ernie_moe(c: ConfigFields, mtype: str, notes: list) -> dict:
    # Ernie4_5_MoeDecoderLayer: Ernie4_5_MoeSparseMoeBlock iff (i + 1) % moe_layer_interval == 0
    # and moe_layer_start_index <= i <= moe_layer_end_index, else Ernie4_5_MoeMLP of
    # intermediate_size.  The block: router weight E x h plus e_score_correction_bias, an
    # nn.Parameter of E (requires_grad=False); E gated experts of moe_intermediate_size (never
    # biased); a shared MLP of moe_num_shared_experts * moe_intermediate_size.
    kw = _decoder(c, mtype)
    if c.bool("use_bias", False):
        raise c._bad("use_bias true in an ERNIE-4.5 MoE config is not modelled (its experts stay "
                     "unbiased while every other projection and lm_head get biases; no released "
                     "ERNIE-4.5 MoE model uses it)")
    n_layers = kw["num_layers"]
    start = c.int("moe_layer_start_index", 1, allow_zero=True)
    end = c.int("moe_layer_end_index", 27, allow_zero=True)
    step = c.int("moe_layer_interval", 1)
    pattern = tuple(int((i + 1) % step == 0 and start <= i <= end) for i in range(n_layers))
    n_exp = c.int(("moe_num_experts", "num_experts"), 64)
    moe_f = c.int("moe_intermediate_size", 1536)
    n_shared = c.int("moe_num_shared_experts", 2, allow_zero=True)
    kw.update(num_experts=n_exp, moe_router_topk=c.int(("moe_k", "num_experts_per_tok"), 6),
              moe_ffn_hidden_size=moe_f,
              moe_shared_expert_intermediate_size=n_shared * moe_f or None,
              moe_layer_freq=pattern, moe_router_bias=True)
    if any(pattern):
        notes.append(f"e_score_correction_bias ({sum(pattern)} x {n_exp}) counted: an "
                     "nn.Parameter (requires_grad=False) of transformers' Ernie4_5_MoeStatics")
    return kw


def _read_deepseek(c: ConfigFields, mtype: str, notes: list) -> dict:
    v3 = mtype == "deepseek_v3"
    kw = _decoder(c, mtype)
    heads = kw["num_attention_heads"]
    if c.bool("attention_bias", False) or c.bool("mlp_bias", False):
        raise c._bad("attention_bias / mlp_bias true in a DeepSeek MLA config is not modelled "
                     "(no released DeepSeek model uses them)")
    n_layers = kw["num_layers"]
    first_dense = c.int("first_k_dense_replace", 3 if v3 else 0, allow_zero=True,
                        null=3 if v3 else 0)
    freq = c.int("moe_layer_freq", 1)
    if freq != 1:
        notes.append(f"moe_layer_freq={freq} ignored: transformers' DeepSeek decoder layer is MoE "
                     "from layer first_k_dense_replace on")
    n_shared = c.int("n_shared_experts", 1 if v3 else 2, allow_zero=True)
    moe_f = c.int("moe_intermediate_size", 2048 if v3 else 1407)
    # DeepseekV{2,3}DecoderLayer: MoE iff layer_idx >= config.first_k_dense_replace
    pattern = tuple(int(i >= first_dense) for i in range(n_layers))
    topk = c.int("num_experts_per_tok", 8) if v3 else c.int("num_experts_per_tok")
    v_head = c.int("v_head_dim", 128, null=128)
    kw.update(num_query_groups=heads, kv_channels=v_head,
              num_experts=c.int("n_routed_experts", 256 if v3 else 64), moe_router_topk=topk,
              moe_ffn_hidden_size=moe_f, moe_layer_freq=pattern,
              moe_shared_expert_intermediate_size=n_shared * moe_f or None,
              multi_latent_attention=True, q_lora_rank=c.int("q_lora_rank", 1536, null=None),
              kv_lora_rank=c.int("kv_lora_rank", 512), qk_head_dim=c.int("qk_nope_head_dim", 128),
              qk_pos_emb_head_dim=c.int("qk_rope_head_dim", 64), v_head_dim=v_head,
              # DeepseekV3TopkRouter keeps e_score_correction_bias as an nn.Buffer (not a
              # parameter) in transformers 5; DeepSeek-V2's router has no bias
              moe_router_bias=False, mtp_num_layers=0)
    _uncounted_notes(c, notes, pattern if v3 else (), kw["num_experts"],
                     "DeepseekV3" if v3 else "DeepseekV2", mtp=True)
    return kw


def _read_gpt2(c: ConfigFields, mtype: str, notes: list) -> dict:
    hs = c.int(("n_embd", "hidden_size"))
    return dict(num_layers=c.int(("n_layer", "num_hidden_layers")), hidden_size=hs,
                num_attention_heads=c.int(("n_head", "num_attention_heads")),
                ffn_hidden_size=c.int("n_inner", 4 * hs), vocab_size=c.int("vocab_size"),
                max_position_embeddings=c.int(("n_positions", "max_position_embeddings"), 1024),
                add_bias_linear=True)


def _read_gpt_neox(c: ConfigFields, mtype: str, notes: list) -> dict:
    # GPTNeoXAttention: query_key_value and dense with bias=config.attention_bias;
    # GPTNeoXMLP: dense_h_to_4h, dense_4h_to_h with nn.Linear's default bias
    return dict(num_layers=c.int("num_hidden_layers"), hidden_size=c.int("hidden_size"),
                num_attention_heads=c.int("num_attention_heads"),
                ffn_hidden_size=c.int("intermediate_size"), vocab_size=c.int("vocab_size"),
                position_embedding_type="rope",
                max_position_embeddings=c.int("max_position_embeddings", 2048),
                add_bias_linear=True, attention_bias=c.bool("attention_bias", True),
                parallel_attention=c.bool("use_parallel_residual", True))


def _read_gptj(c: ConfigFields, mtype: str, notes: list) -> dict:
    # GPTJBlock: one ln_1 feeding attention and MLP in parallel; q, k, v, out_proj bias=False;
    # fc_in, fc_out with bias; GPTJForCausalLM.lm_head = nn.Linear(n_embd, vocab) with bias
    hs = c.int(("n_embd", "hidden_size"))
    return dict(num_layers=c.int(("n_layer", "num_hidden_layers")), hidden_size=hs,
                num_attention_heads=c.int(("n_head", "num_attention_heads")),
                ffn_hidden_size=c.int("n_inner", 4 * hs, null=4 * hs),
                vocab_size=c.int("vocab_size"), position_embedding_type="rope",
                max_position_embeddings=c.int(("n_positions", "max_position_embeddings"), 2048),
                add_bias_linear=True, attention_bias=False, output_layer_bias=True,
                norms_per_layer=1, parallel_attention=True)


def _read_falcon(c: ConfigFields, mtype: str, notes: list) -> dict:
    hs, heads = c.int(("hidden_size", "n_embed")), c.int("num_attention_heads")
    new_arch = c.bool("new_decoder_architecture", False)
    parallel = c.bool("parallel_attn", True)
    # FalconAttention: fused qkv of (2 g + a) d_h rows with the new decoder architecture,
    # h + 2 d_h with multi_query (one KV head), 3h otherwise
    if new_arch:
        groups = c.int("num_kv_heads", heads, null=heads)
    elif c.bool("multi_query", True):
        groups = 1
    else:
        groups = heads
    # FalconDecoderLayer: two norms unless parallel_attn with num_ln_in_parallel_attn != 2
    # (None becomes 2 with the new decoder architecture)
    n_ln = c.int("num_ln_in_parallel_attn", None, allow_zero=True)
    if n_ln is None and new_arch:
        n_ln = 2
    norms = 2 if (not parallel or n_ln == 2) else 1
    bias = c.bool("bias", False)
    return dict(num_layers=c.int("num_hidden_layers"), hidden_size=hs, num_attention_heads=heads,
                num_query_groups=groups, ffn_hidden_size=c.int("ffn_hidden_size", 4 * hs, null=4 * hs),
                vocab_size=c.int("vocab_size"),
                position_embedding_type="none" if c.bool("alibi", False) else "rope",
                max_position_embeddings=c.int("max_position_embeddings", 2048),
                add_bias_linear=bias, norms_per_layer=norms, parallel_attention=parallel)


def _read_bloom(c: ConfigFields, mtype: str, notes: list) -> dict:
    # BloomModel: word_embeddings_layernorm after the embedding; fused qkv 3h and dense with
    # bias; 4h MLP with bias; input and post-attention LayerNorms; ALiBi (no position table)
    hs = c.int(("hidden_size", "n_embed"))
    return dict(num_layers=c.int(("n_layer", "num_hidden_layers")), hidden_size=hs,
                num_attention_heads=c.int(("n_head", "num_attention_heads")),
                ffn_hidden_size=4 * hs, vocab_size=c.int("vocab_size"),
                position_embedding_type="none", add_bias_linear=True, embedding_norm=True)


def _read_starcoder2(c: ConfigFields, mtype: str, notes: list) -> dict:
    # Starcoder2: q, k, v, o and c_fc, c_proj with bias=config.use_bias; nn.LayerNorm norms;
    # head_dim = getattr(config, "head_dim", None) or h // a
    kw = _decoder(c, mtype, gated=False, norm="LayerNorm")
    kw["add_bias_linear"] = c.bool("use_bias", True)
    return kw


_READERS = {"gpt2": _read_gpt2, "gpt_neox": _read_gpt_neox, "gptj": _read_gptj,
            "falcon": _read_falcon, "bloom": _read_bloom, "starcoder2": _read_starcoder2,
            "deepseek_v2": _read_deepseek, "deepseek_v3": _read_deepseek,
            "llama4_text": _read_llama4, "glm4_moe": _read_shared_moe, "dots1": _read_shared_moe,
            "ernie4_5_moe": _read_ernie_moe}


def from_hf_config(path) -> Architecture:
    """Read a local Hugging Face ``config.json`` into an :class:`Architecture` (no network).

    Accepted ``model_type`` (or, only when the file has none, the type of ``architectures[0]``):
    apertus, arcee, bloom, cohere, deepseek_v2, deepseek_v3, dots1, ernie4_5, ernie4_5_moe,
    exaone4, falcon (both decoder architectures), gemma, gemma2, gemma3 (its text_config),
    gemma3_text, glm4, glm4_moe, gpt2, gpt_neox, gpt_oss, gptj, granite, granitemoe,
    hunyuan_v1_dense, llama, llama4 (its text_config), llama4_text, mistral, mixtral, olmo, olmo2,
    olmoe, phi3 (Phi-3 and Phi-4), phimoe, qwen2, qwen2_moe, qwen3, qwen3_moe, seed_oss, smollm3,
    starcoder2, and the hybrid Mamba / attention types bamba, falcon_h1, granitemoehybrid, jamba,
    nemotron_h (:mod:`memsym.model.hf_hybrid`: per-layer mixers in ``layer_mixers``; their
    parameter count is exact, a memory estimate of them is refused).  The core sizes (hidden size, layers, heads, vocabulary, MLP size) must be in the
    file (a vision-language file's text_config takes its text config class's defaults, as the
    released gemma3 files need, and says so in the notes); every other field defaults as
    transformers' config class defaults it, and the modules are those the transformers model
    builds, so the parameter count equals ``sum(p.numel())`` of
    ``AutoModelForCausalLM.from_config`` (transformers 5.24.0; for gemma3, of its language
    model).  Where transformers builds less than the file describes (DeepSeek-V3's and GLM-4.5's
    MTP layer, a vision encoder) the difference is said in ``arch.extra["notes"]``.  Any other
    ``model_type`` is refused; a near name may be suggested but is never read in its place.  The file is parsed as JSON only; nothing in it is evaluated, every
    size is checked against :data:`~memsym.model.architecture.LIMITS` as it is read, and the
    name (``_name_or_path``) is stored escaped (:func:`~memsym.model.architecture.printable`).

    Parameters
    ----------
    path : str or os.PathLike
        The ``config.json`` file, or a directory holding one.

    Returns
    -------
    Architecture
        Resolved; ``extra`` holds ``hf_model_type``, ``hf_dropout`` (the dropout
        probabilities the transformers model applies, by config field) and ``notes`` (a tuple
        of strings).

    Raises
    ------
    InvalidValueError
        Missing, unreadable or non-regular file, not JSON, not an object, over 4 MiB, a missing
        field (named), a field of the wrong type (booleans are not numbers), a size above its
        limit (named), a type transformers knows whose layers memsym does not model (shared
        attention blocks: zamba, zamba2; Mamba; linear attention: qwen3_next, minimax), a
        structure of a type that is not modelled (named).
    UnknownNameError
        An unsupported model type (the accepted ones are listed).

    References
    ----------
    transformers 5.24.0 ``models/<model_type>/configuration_<model_type>.py`` and
    ``modeling_<model_type>.py`` (hf-transformers-5).

    Examples
    --------
    >>> import json, tempfile, os
    >>> from memsym.model import parameter_count
    >>> cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    ...        "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     fn = os.path.join(tmp, "config.json")
    ...     with open(fn, "w") as fh:
    ...         json.dump(cfg, fh)
    ...     parameter_count(from_hf_config(fn))
    6738415616
    """
    data, where = read_config_json(path)
    c = ConfigFields(data, printable(os.path.basename(os.path.dirname(where)) + "/config.json"
                             if os.path.dirname(where) else where, 120))
    mtype = data.get("model_type")
    archs = data.get("architectures")
    if mtype is None:
        # no model_type: the file's own architectures[0] names the class (never a guess)
        if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] in _HF_ARCHS:
            mtype = _HF_ARCHS[archs[0]]
        else:
            raise c._bad("missing field 'model_type' (and no known 'architectures' entry); "
                         f"accepted: {', '.join(HF_MODEL_TYPES)}")
    elif not isinstance(mtype, str):
        raise c._bad(f"field 'model_type' must be a string, got {type(mtype).__name__}; "
                     f"accepted: {', '.join(HF_MODEL_TYPES)}")
    elif mtype in _NOT_MODELLED:
        raise c._bad(f"model_type {mtype!r} is refused: {_NOT_MODELLED[mtype]} (accepted: "
                     f"{', '.join(HF_MODEL_TYPES)})")
    elif mtype not in HF_MODEL_TYPES:
        # refused even when architectures[0] or a near name is a known type: a near name is
        # another model with another count, so memsym suggests it and never reads it instead
        err = UnknownNameError("config.json model_type", mtype, HF_MODEL_TYPES,
                               limit=len(HF_MODEL_TYPES))
        hint = (f"; did you mean {' or '.join(err.suggestions)}? (another type is another "
                "model: memsym never reads one in place of the other)" if err.suggestions else "")
        # the hint before the long list, which a terminal line may cut
        err.args = (f"unknown config.json model_type {mtype[:80]!r}{hint}; accepted: "
                    f"{', '.join(HF_MODEL_TYPES)}",)
        raise err
    raw_name = data.get("_name_or_path")
    if raw_name is not None and not isinstance(raw_name, str):
        raise c._bad(f"field '_name_or_path' must be a string, got {type(raw_name).__name__}")
    name = printable(raw_name or mtype, 64)
    file_type, notes = mtype, []
    if mtype in _TEXT_CONFIG:
        # a vision-language file: its language model is the text_config, read with the text
        # config class's defaults for the sizes the released files leave out
        text_type, core = _TEXT_CONFIG[mtype]
        text = data.get("text_config")
        if text is None:
            text = {}
        if not isinstance(text, dict):
            raise c._bad(f"field 'text_config' must be an object, got {type(text).__name__}")
        defaulted = sorted(k for k in core if text.get(k) is None)
        if mtype == "gemma3":
            # Gemma3ForConditionalGeneration ties lm_head to the language model's embedding by
            # the top-level tie_word_embeddings (Gemma3Config default True)
            tied = c.bool("tie_word_embeddings", True)
        c = ConfigFields({**text, **{k: core[k] for k in defaulted}}, f"{c.where} text_config")
        if mtype == "llama4":
            # AutoModelForCausalLM builds Llama4ForCausalLM of the text config alone
            tied = c.bool("tie_word_embeddings", _DEFAULTS[text_type][0])
        notes.append(f"model_type {mtype!r}: the language model (text_config) only; the vision "
                     "encoder and the multimodal projector are not counted")
        if defaulted:
            notes.append("text_config without " + ", ".join(defaulted) + ": transformers' "
                         f"{'Gemma3' if mtype == 'gemma3' else 'Llama4'}TextConfig defaults ("
                         + ", ".join(f"{k}={core[k]}" for k in defaulted) + ")")
        mtype = text_type
    elif mtype in HYBRID_READERS:
        # the hybrid Mamba / attention families (memsym.model.hf_hybrid)
        reader, tie_default, _ = HYBRID_READERS[mtype]
        tied = c.bool("tie_word_embeddings", tie_default)
    else:
        tied = c.bool("tie_word_embeddings", _DEFAULTS[mtype][0])
    if mtype in HYBRID_READERS:
        kw = reader(c, notes)
    else:
        kw = _READERS.get(mtype, _read_llama_like)(c, mtype, notes)
    dropout = {k: c.probability(k, dflt) for k, dflt in _DROPOUT[mtype].items()}
    kw.update(name=name, untie_embeddings_and_output_weights=not tied,
              extra={"hf_model_type": file_type, "hf_dropout": dropout, "notes": tuple(notes)})
    return resolve(Architecture(**kw))
