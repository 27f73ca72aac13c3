"""DBRX, DeepSeek-V3.2, Qwen3-Next, Qwen3.5, LFM2, MiniMax-01, GPT-OSS's swiglu_limit from config.json.

Same oracle as ``tests/test_hf_newer_types.py``: transformers (5.25.0 when checked) builds
``AutoModelForCausalLM.from_config`` of the very file memsym reads, on the meta device, and
``sum(p.numel())`` of its parameters must equal memsym's count, for small configs (every
structural switch) and for the published full-size configs.  The model types transformers knows
whose layers memsym has no kind for stay refused, in one line that names what is missing.
No network: every config is written here.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.model import (active_parameter_count, from_hf_config, parameter_count,
                          parameter_counts, preset)

from hf_oracle import (TOKENS, assert_masks_follow_dropout, assert_stages_add_up, billions,
                       fuzz_configs, small_config, write_config)
from in_process import estimate

TYPES = {"dbrx", "deepseek_v32", "qwen3_next", "lfm2", "minimax", "qwen3_5_text",
         "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe", "lfm2_moe", "glm_moe_dsa"}

# transformers 5.25's DbrxAttention reads attn_config.rope_theta, which DbrxAttentionConfig
# does not default: a file without it cannot be built (the published one has it)
_DBRX = {"model_type": "dbrx", "d_model": 64, "n_heads": 4, "n_layers": 3, "vocab_size": 128,
         "max_seq_len": 64, "attn_config": {"rope_theta": 10000.0}, **TOKENS}
_MLA = dict(q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
            v_head_dim=8, n_routed_experts=4, n_shared_experts=1, moe_intermediate_size=16,
            num_experts_per_tok=2, n_group=1, topk_group=1, num_key_value_heads=4)

# Qwen3-Next: 2 query/key and 4 value heads in the Gated DeltaNet layers (value heads a multiple)
_Q3N = {"model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
        "vocab_size": 128, "max_position_embeddings": 64, "head_dim": 16,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
        "linear_value_head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24, **TOKENS}

# Qwen3.5: Qwen3-Next's mixers, a dense MLP in every layer (qwen3_5_text) or MoE with a gated
# shared expert in every layer (qwen3_5_moe_text: no mlp_only_layers, no decoder_sparse_step);
# the vision-language files wrap them in text_config
_Q35 = {k: v for k, v in _Q3N.items() if k not in ("num_experts", "num_experts_per_tok",
                                                     "moe_intermediate_size",
                                                     "shared_expert_intermediate_size")}
_Q35["model_type"] = "qwen3_5_text"
_Q35_MOE = {k: v for k, v in _Q3N.items() if k != "intermediate_size"}
_Q35_MOE["model_type"] = "qwen3_5_moe_text"
_Q35_VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 32, "num_heads": 2,
               "out_hidden_size": 64}

# LFM2: short-convolution and attention layers, the MLP width adjusted from block_ff_dim
_LFM2 = {"model_type": "lfm2", "hidden_size": 64, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
         "max_position_embeddings": 64, **TOKENS}

# MiniMax-01: lightning-attention and softmax-attention layers, MoE in every layer
_MINIMAX = {"model_type": "minimax", "hidden_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
            "vocab_size": 128, "max_position_embeddings": 64, "num_local_experts": 4,
            "num_experts_per_tok": 2, **TOKENS}

SMALL = {
    # DBRX: fused Wqkv, bias-free LayerNorms, MoE (router, gated experts) in every layer; the
    # DbrxConfig defaults (one KV head, 4 experts of 3584, top-1), or every nested field set
    "dbrx": _DBRX,
    "dbrx-nested": {**_DBRX, "attn_config": {"kv_n_heads": 2, "clip_qkv": 8.0,
                                             "rope_theta": 10000.0, "attn_pdrop": 0.0},
                    "ffn_config": {"ffn_hidden_size": 48, "moe_num_experts": 4, "moe_top_k": 2,
                                   "ffn_act_fn": {"name": "gelu"}}},
    # DeepSeek-V3.2: DeepSeek-V3's MLA and MoE plus the sparse-attention indexer in every
    # layer; first_k_dense_replace, or the layers mlp_layer_types lists; no shared expert, tied
    "deepseek_v32": small_config("deepseek_v32", **_MLA, first_k_dense_replace=1, index_n_heads=4,
                                 index_head_dim=16),
    "deepseek_v32-layer-types-tied": small_config(
        "deepseek_v32", **{**_MLA, "n_shared_experts": 0}, index_n_heads=2, index_head_dim=8,
        mlp_layer_types=["sparse", "dense", "sparse"], tie_word_embeddings=True,
        num_nextn_predict_layers=1),
    "deepseek_v32-defaults": small_config("deepseek_v32", **_MLA),
    # GLM-5 (GLM-MoE-DSA): DeepSeek-V3.2's attention and indexer in every layer (index_topk_freq
    # 1), the first first_k_dense_replace layers dense; or listed MLP kinds and indexer types,
    # tied; or GlmMoeDsaConfig's own defaults of the MLA sizes
    "glm_moe_dsa": small_config("glm_moe_dsa", **_MLA, first_k_dense_replace=1, index_n_heads=4,
                                index_head_dim=16),
    "glm_moe_dsa-listed-tied": small_config(
        "glm_moe_dsa", **{**_MLA, "n_shared_experts": 2}, index_n_heads=2, index_head_dim=8,
        mlp_layer_types=["sparse", "dense", "sparse"], indexer_types=["full"] * 3,
        tie_word_embeddings=True),
    "glm_moe_dsa-defaults": small_config("glm_moe_dsa", n_routed_experts=4, num_experts_per_tok=2,
                                         n_group=1, topk_group=1, kv_lora_rank=16, q_lora_rank=24,
                                         qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                                         moe_intermediate_size=16, index_n_heads=2,
                                         index_head_dim=8),

    # Qwen3-Next: Gated DeltaNet layers and gated attention (every 4th layer), MoE with a gated
    # shared expert in every layer; or listed layer types, biased attention, dense layers by
    # mlp_only_layers and decoder_sparse_step, a 3-tap conv, tied; or no experts at all; or
    # attention every other layer (full_attention_interval)
    "qwen3_next": _Q3N,
    "qwen3_next-layer-types-bias-dense-tied": {
        **_Q3N, "attention_bias": True, "mlp_only_layers": [0], "decoder_sparse_step": 2,
        "layer_types": ["full_attention", "linear_attention"] * 2, "linear_conv_kernel_dim": 3,
        "tie_word_embeddings": True},
    "qwen3_next-dense": {**_Q3N, "num_experts": 0},
    "qwen3_next-interval-2": {**_Q3N, "full_attention_interval": 2},
    # Qwen3.5 dense; tied, attention every other layer; a file that still spells
    # Qwen3-Next's MoE pattern fields (Qwen3_5MoeDecoderLayer builds experts in every layer)
    "qwen3_5_text": _Q35,
    "qwen3_5_text-tied-interval-2": {**_Q35, "tie_word_embeddings": True,
                                     "full_attention_interval": 2},
    "qwen3_5_moe_text": _Q35_MOE,
    "qwen3_5_moe_text-sparse-step-ignored": {**_Q35_MOE, "decoder_sparse_step": 2,
                                             "mlp_only_layers": [0], "attention_bias": True},
    # the vision-language files: AutoModelForCausalLM builds Qwen3_5ForCausalLM /
    # Qwen3_5MoeForCausalLM of text_config alone (its own tie_word_embeddings, not the top
    # level's); a text_config without the core sizes takes the text config class's defaults
    "qwen3_5": {"model_type": "qwen3_5", "vision_config": _Q35_VISION, **TOKENS,
                "tie_word_embeddings": True,
                "text_config": {k: v for k, v in _Q35.items() if k != "model_type"}},
    "qwen3_5_moe": {"model_type": "qwen3_5_moe", "vision_config": _Q35_VISION, **TOKENS,
                    "text_config": {**{k: v for k, v in _Q35_MOE.items() if k != "model_type"},
                                    "tie_word_embeddings": True}},
    # LFM2: listed layer types, intermediate_size adjusted (2/3, x1, to a multiple of 16), tied;
    # or full_attn_idxs, block_ff_dim over intermediate_size, a 1.3 multiplier, biased 4-tap
    # convs, tie_embedding false over the tied default; or no adjustment; or an integer
    # multiplier and a head_dim of its own
    "lfm2": {**_LFM2, "intermediate_size": 96, "block_multiple_of": 16,
             "layer_types": ["conv", "conv", "full_attention", "conv"]},
    "lfm2-block-ff-dim-idxs-bias-untied": {
        **_LFM2, "block_ff_dim": 100, "intermediate_size": 96, "full_attn_idxs": [1, 3],
        "conv_bias": True, "conv_L_cache": 4, "tie_embedding": False,
        "block_ffn_dim_multiplier": 1.3, "block_multiple_of": 8},
    "lfm2-no-adjust": {**_LFM2, "intermediate_size": 96, "block_auto_adjust_ff_dim": False},
    "lfm2-int-multiplier-head-dim": {**_LFM2, "intermediate_size": 96,
                                     "block_ffn_dim_multiplier": 2, "head_dim": 8},
    # LFM2-MoE: LFM2's mixers, two dense layers then MoE (no shared expert), tied; or every
    # layer MoE, biased convs, untied by tie_embedding; or every layer dense
    "lfm2_moe": {**_LFM2, "model_type": "lfm2_moe", "intermediate_size": 96,
                 "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2,
                 "layer_types": ["conv", "conv", "full_attention", "conv"]},
    "lfm2_moe-all-moe-bias-untied": {
        **_LFM2, "model_type": "lfm2_moe", "intermediate_size": 96, "moe_intermediate_size": 16,
        "num_experts": 4, "num_experts_per_tok": 2, "num_dense_layers": 0, "conv_bias": True,
        "conv_L_cache": 4, "tie_embedding": False,
        "layer_types": ["full_attention", "conv", "conv", "full_attention"]},
    "lfm2_moe-dense": {**_LFM2, "model_type": "lfm2_moe", "intermediate_size": 96,
                       "num_dense_layers": 4, "layer_types": ["conv", "full_attention"] * 2},
    # MiniMax-01: the default alternation; or seven-to-one as published, a head_dim, tied
    "minimax": _MINIMAX,
    "minimax-layer-types-head-dim-tied": {
        **_MINIMAX, "head_dim": 8, "tie_word_embeddings": True,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"]},
}


# --------------------------------------------------------------------------------------------
# full-size configs
# --------------------------------------------------------------------------------------------

REAL = {
    # https://huggingface.co/databricks/dbrx-instruct/blob/main/config.json (gated: no copy of
    # the file itself found).  Checked: d_model 6144, n_heads 48, n_layers 40, vocab 100352,
    # max_seq_len 32768, ffn_hidden_size 10752, moe_num_experts 16, moe_top_k 4, rope_theta
    # 500000 (a public write-up quoting "the official Hugging Face model configuration");
    # kv_n_heads 8 and clip_qkv 8 are from a public DBRX config class's defaults written for
    # the released model; values not checked against the hub file: kv_n_heads, clip_qkv, token
    # ids.  moe_normalize_expert_weights is written 1.0: transformers 5.25's strict
    # DbrxFFNConfig refuses the integer 1 the hub file is reported to carry.
    "dbrx-instruct": {"architectures": ["DbrxForCausalLM"], "model_type": "dbrx",
                      "d_model": 6144, "n_heads": 48, "n_layers": 40, "max_seq_len": 32768,
                      "vocab_size": 100352,
                      "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
                      "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16,
                                     "moe_top_k": 4, "moe_jitter_eps": 0,
                                     "moe_loss_weight": 0.05,
                                     "moe_normalize_expert_weights": 1.0},
                      "tie_word_embeddings": False},
    # https://huggingface.co/deepseek-ai/DeepSeek-V3.2/blob/main/config.json: every field below
    # read in a public copy of that file (a config walk-through quoting it in full; vocab_size
    # 129280 from its embedding count); quantization_config left out (no parameter)
    "deepseek-v3.2": {"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
                      "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0,
                      "eos_token_id": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
                      "hidden_size": 7168, "index_head_dim": 128, "index_n_heads": 64,
                      "index_topk": 2048, "intermediate_size": 18432, "kv_lora_rank": 512,
                      "max_position_embeddings": 163840, "moe_intermediate_size": 2048,
                      "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
                      "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128,
                      "num_experts_per_tok": 8, "num_hidden_layers": 61,
                      "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
                      "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                      "rms_norm_eps": 1e-06,
                      "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40,
                                       "mscale": 1.0, "mscale_all_dim": 1.0,
                                       "original_max_position_embeddings": 4096, "type": "yarn"},
                      "rope_theta": 10000, "routed_scaling_factor": 2.5,
                      "scoring_func": "sigmoid", "topk_group": 4, "topk_method": "noaux_tc",
                      "v_head_dim": 128, "vocab_size": 129280, "tie_word_embeddings": False},
    # https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json; checked: hidden 2880,
    # heads 64, KV heads 8, 36 layers, 128 experts, top-4, vocab 201088, sliding_window 128,
    # rope_theta 150000, swiglu_limit 7.0 (public copies of its fields: a GptOssConfig written
    # for the released model, model-config tests); values not checked against the hub file:
    # the layer_types order (sliding first), rope_scaling (no parameter), token ids
    "gpt-oss-120b": {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
                     "attention_bias": True, "experts_per_token": 4, "head_dim": 64,
                     "hidden_size": 2880, "intermediate_size": 2880,
                     "layer_types": ["sliding_attention", "full_attention"] * 18,
                     "max_position_embeddings": 131072, "num_attention_heads": 64,
                     "num_experts_per_tok": 4, "num_hidden_layers": 36,
                     "num_key_value_heads": 8, "num_local_experts": 128,
                     "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False,
                     "vocab_size": 201088, "rope_theta": 150000},
}


# https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json; the values
# below are those a public parameter-count test quotes from the same architecture's
# Qwen/Qwen3-Coder-Next config.json (hidden 2048, 48 layers, vocab 151936, head_dim 256, 16/2
# heads, 512 experts top-10 of 512, shared 512, Gated DeltaNet 16/32 heads of 128, conv 4,
# attention every 4th layer, untied), with its totals read from the safetensors headers:
# 79,674,391,296 parameters, 3,874,929,408 active.  Values not checked against the hub file:
# intermediate_size 5120 and max_position_embeddings 262144 (no parameter of an all-MoE model).
REAL["qwen3-next-80b-a3b"] = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
    "num_hidden_layers": 48, "vocab_size": 151936, "head_dim": 256, "num_attention_heads": 16,
    "num_key_value_heads": 2, "num_experts": 512, "num_experts_per_tok": 10,
    "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 32,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
    "tie_word_embeddings": False, "intermediate_size": 5120, "max_position_embeddings": 262144}


# https://huggingface.co/Qwen/Qwen3.6-35B-A3B, "Model Overview" (read in a public copy of the
# card; Qwen3.6 keeps Qwen3.5-MoE's model_type and classes, transformers' qwen3_5_moe docs): hidden
# 2048, vocabulary 248320, 40 layers laid out 10 x (3 x (Gated DeltaNet -> MoE) + 1 x (Gated
# Attention -> MoE)), Gated DeltaNet 32 V and 16 QK heads of 128, attention 16 Q and 2 KV heads
# of 256, 256 experts, 8 routed + 1 shared, expert size 512; "35B in total and 3B activated",
# with its vision encoder.  Not on the card: tie_word_embeddings (false, Qwen3_5MoeTextConfig's
# default) and the conv kernel (4, the default).
REAL["qwen3.6-35b-a3b"] = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
    "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 32, "num_heads": 2},
    "text_config": {"hidden_size": 2048, "num_hidden_layers": 40, "vocab_size": 248320,
                    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
                    "linear_num_key_heads": 16, "linear_num_value_heads": 32,
                    "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                    "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
                    "shared_expert_intermediate_size": 512, "full_attention_interval": 4,
                    "tie_word_embeddings": False}}


def test_dbrx_hand_count_and_card(tmp_path):
    # DbrxForCausalLM: wte and lm_head V h; per block norm_1, norm_2 (h each, no bias), Wqkv
    # h (h + 2 g d_h), out_proj h^2, router h E, experts 3 E f h; norm_f h
    h, L, V, E, f, g, d = 6144, 40, 100352, 16, 10752, 8, 128
    block = 2 * h + h * (h + 2 * g * d) + h * h + h * E + 3 * E * f * h
    arch = from_hf_config(write_config(tmp_path, REAL["dbrx-instruct"], "dbrx"))
    assert parameter_count(arch) == 2 * V * h + L * block + h == 131_596_523_520
    # the model card: "132B total parameters of which 36B parameters are active on any input"
    assert billions(parameter_count(arch)) == 132
    assert billions(active_parameter_count(arch)) == 36


def test_deepseek_v32_is_v3_plus_its_indexer(tmp_path):
    # the same file read as DeepSeek-V3 lacks only the indexer: per layer wq_b r_q H_idx d_idx,
    # wk h d_idx, k_norm 2 d_idx (LayerNorm weight and bias), weights_proj h H_idx
    cfg = REAL["deepseek-v3.2"]
    v32 = from_hf_config(write_config(tmp_path, cfg, "v32"))
    v3 = from_hf_config(write_config(tmp_path, {**cfg, "model_type": "deepseek_v3"}, "v3"))
    h, r_q, heads, dim = 7168, 1536, 64, 128
    indexer = r_q * heads * dim + h * dim + 2 * dim + h * heads
    assert parameter_count(v32) - parameter_count(v3) == 61 * indexer
    assert parameter_counts(v32)["attention"] - parameter_counts(v3)["attention"] == 61 * indexer
    assert parameter_count(v32) == 671_877_929_216
    # the card's 685B holds the MTP layer, which transformers does not build (said in notes)
    assert any("num_nextn_predict_layers=1 not counted" in n for n in v32.extra["notes"])
    assert any("indexer" in n for n in v32.extra["notes"])


# https://huggingface.co/LiquidAI/LFM2-1.2B/blob/main/config.json: 16 layers, full_attn_idxs
# [2, 5, 8, 10, 12, 14], hidden 2048, 32 heads, 8 KV heads, conv_L_cache 3,
# max_position_embeddings 128000, no head_dim (a public test quoting the file fetched from the
# hub); values not checked against the hub file: vocab_size 65536, block_ff_dim 12288, the
# adjustment fields (Lfm2Config's defaults), tie_embedding, conv_bias (checked only through
# the card's total, below)
REAL["lfm2-1.2b"] = {
    "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "num_hidden_layers": 16,
    "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8, "conv_L_cache": 3,
    "full_attn_idxs": [2, 5, 8, 10, 12, 14], "max_position_embeddings": 128000,
    "vocab_size": 65536, "block_ff_dim": 12288, "block_ffn_dim_multiplier": 1.0,
    "block_multiple_of": 256, "block_auto_adjust_ff_dim": True, "tie_embedding": True,
    "conv_bias": False}



def test_an_lfm2_estimate_holds_its_short_conv_activations(tmp_path, capsys):
    # the memory estimate of LFM2 runs (weights of the exact count, activations with the
    # short-convolution term) where the linear-attention mixers' are refused
    path = write_config(tmp_path, REAL["lfm2-1.2b"], "lfm2")
    code, out, err = estimate(capsys, path, "--seq-length", 4096)
    assert code == 0, err
    weights = next(line for line in out.splitlines() if line.startswith("weights"))
    assert f"{2 * 1_170_340_608:,}" in weights


def test_lfm2_hand_count_and_card(tmp_path):
    # Lfm2ForCausalLM: embedding V h (tied); per layer operator_norm, ffn_norm and a gated MLP
    # of int(2 x 12288 / 3) = 8192 (already a multiple of 256); conv layers in_proj 3h^2, conv
    # 3h, out_proj h^2; attention layers q, o h^2 each, k, v h g d each, q/k norms d each;
    # final embedding_norm h
    h, V, f, g, d = 2048, 65536, 8192, 8, 64
    conv = 3 * h * h + 3 * h + h * h
    att = 2 * h * h + 2 * h * g * d + 2 * d
    total = V * h + 16 * (3 * h * f + 2 * h) + 10 * conv + 6 * att + h
    arch = from_hf_config(write_config(tmp_path, REAL["lfm2-1.2b"], "lfm2"))
    assert parameter_count(arch) == total == 1_170_340_608
    assert parameter_counts(arch)["short_conv"] == 10 * conv
    # the model card: "1.17B" parameters
    assert billions(parameter_count(arch), 2) == 1.17


# https://huggingface.co/MiniMaxAI/MiniMax-Text-01-hf/blob/main/config.json (no copy found):
# hidden 6144, 80 layers, 64 heads of 128, 8 KV heads, 32 experts top-2 of 9216, seven
# lightning layers then one softmax-attention layer, vocab 200064 (a public MiniMax-01 config
# class and a printout of the released model's modules); values not checked against the hub
# file: max_position_embeddings, tie_word_embeddings (False, the printout's separate lm_head)
REAL["minimax-text-01"] = {
    "architectures": ["MiniMaxForCausalLM"], "model_type": "minimax", "hidden_size": 6144,
    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 128, "intermediate_size": 9216, "num_local_experts": 32,
    "num_experts_per_tok": 2, "vocab_size": 200064, "max_position_embeddings": 10240000,
    "layer_types": (["linear_attention"] * 7 + ["full_attention"]) * 10,
    "tie_word_embeddings": False}


def test_minimax_text_01_hand_count_and_card(tmp_path):
    # lightning layers: qkv_proj 3 h a d, output_gate h a d, out_proj a d h, norm a d;
    # attention layers: q, o h a d each, k, v h g d each; every layer: router E h, E experts
    # 3 h f, two norms
    h, L, V, E, f, a, g, d = 6144, 80, 200064, 32, 9216, 64, 8, 128
    lightning = 5 * h * a * d + a * d
    att = 2 * h * a * d + 2 * h * g * d
    total = 2 * V * h + 70 * lightning + 10 * att + L * (E * h + E * 3 * h * f + 2 * h) + h
    arch = from_hf_config(write_config(tmp_path, REAL["minimax-text-01"], "minimax"))
    assert parameter_count(arch) == total == 456_089_655_296
    # the model card: "456 billion total parameters, of which 45.9 billion are activated per
    # token", the latter without the embedding and the output layer
    assert billions(parameter_count(arch)) == 456
    assert billions(active_parameter_count(arch) - 2 * V * h, 1) == 45.9


def test_qwen3_next_hand_count_and_the_published_totals(tmp_path):
    # per Gated DeltaNet layer (Qwen3NextGatedDeltaNet): in_proj_qkvz h (2 H_k d_k + 2 H_v d_v),
    # in_proj_ba 2 h H_v, conv1d k (2 H_k d_k + H_v d_v), dt_bias and A_log H_v each, norm d_v,
    # out_proj H_v d_v h; per attention layer (Qwen3NextAttention): q_proj h 2 a d, k and v
    # h g d each, o_proj a d h, q_norm and k_norm d each; per layer: router E h, E experts
    # 3 h f_e, shared expert 3 h f_sh and its gate h, two norms 2h
    h, L, V, E, f_e, f_sh, a, g, d = 2048, 48, 151936, 512, 512, 512, 16, 2, 256
    hk, hv, dk, dv, k = 16, 32, 128, 128, 4
    gdn = (h * (2 * hk * dk + 2 * hv * dv) + 2 * h * hv + k * (2 * hk * dk + hv * dv)
           + 2 * hv + dv + hv * dv * h)
    att = h * 2 * a * d + 2 * h * g * d + a * d * h + 2 * d
    moe = E * h + E * 3 * h * f_e + 3 * h * f_sh + h
    total = 2 * V * h + 36 * gdn + 12 * att + L * (moe + 2 * h) + h
    arch = from_hf_config(write_config(tmp_path, REAL["qwen3-next-80b-a3b"], "q3n"))
    assert parameter_count(arch) == total == 79_674_391_296
    assert active_parameter_count(arch) == 3_874_929_408
    assert parameter_counts(arch)["linear_attention"] == 36 * gdn
    assert arch.layer_mixers == ("gdn", "gdn", "gdn", "attention") * 12


def test_qwen3_6_moe_hand_count_and_card(tmp_path):
    # Qwen3_5MoeGatedDeltaNet: in_proj_qkv h (2 H_k d_k + H_v d_v), in_proj_z h H_v d_v,
    # in_proj_b and in_proj_a h H_v each (Qwen3-Next's in_proj_qkvz and in_proj_ba, split),
    # conv1d k (2 H_k d_k + H_v d_v), dt_bias and A_log H_v each, norm d_v, out_proj
    # H_v d_v h; the attention, MoE block and norms as Qwen3-Next's (above), MoE in all 40
    h, L, V, E, f_e, f_sh, a, g, d = 2048, 40, 248320, 256, 512, 512, 16, 2, 256
    hk, hv, dk, dv, k = 16, 32, 128, 128, 4
    gdn = (h * (2 * hk * dk + hv * dv) + h * hv * dv + 2 * h * hv + k * (2 * hk * dk + hv * dv)
           + 2 * hv + dv + hv * dv * h)
    att = h * 2 * a * d + 2 * h * g * d + a * d * h + 2 * d
    moe = E * h + E * 3 * h * f_e + 3 * h * f_sh + h
    total = 2 * V * h + 30 * gdn + 10 * att + L * (moe + 2 * h) + h
    arch = from_hf_config(write_config(tmp_path, REAL["qwen3.6-35b-a3b"], "q36"))
    assert parameter_count(arch) == total
    assert arch.layer_mixers == ("gdn", "gdn", "gdn", "attention") * 10
    assert arch.moe_layer_freq == (1,) * 40
    # the card: 35B in total (the vision encoder with it) and 3B activated
    assert billions(parameter_count(arch)) == 35
    assert billions(active_parameter_count(arch)) == 3


def test_glm5_published_totals(tmp_path):
    # GLM-5's technical report ("GLM-5: from Vibe Coding to Agentic Engineering", its
    # architecture table, read in a public copy): 3 dense + 75 MoE layers, 1 MTP layer, hidden
    # 6144, dense intermediate 12288, MoE intermediate 2048, QK head dim 192, V head dim 256,
    # Q LoRA 2048, KV LoRA 512, 64 heads, indexer 32 heads of 128, 256 experts, 8 routed + 1
    # shared, vocabulary 154880; 744B total, 40B activated.  transformers builds no MTP layer
    # (as DeepSeek-V3's 671B, the total leaves it out); the 40B activated leave out the
    # embedding and output layer, 2 V h = 1.90B (41.78B with them)
    h, V = 6144, 154880
    cfg = {"model_type": "glm_moe_dsa", "hidden_size": h, "num_hidden_layers": 78,
           "first_k_dense_replace": 3, "intermediate_size": 12288, "moe_intermediate_size": 2048,
           "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256,
           "q_lora_rank": 2048, "kv_lora_rank": 512, "num_attention_heads": 64,
           "index_n_heads": 32, "index_head_dim": 128, "n_routed_experts": 256,
           "num_experts_per_tok": 8, "n_shared_experts": 1, "vocab_size": V,
           "num_nextn_predict_layers": 1}
    arch = from_hf_config(write_config(tmp_path, cfg))
    assert billions(parameter_count(arch)) == 744
    assert billions(active_parameter_count(arch) - 2 * V * h) == 40


@pytest.mark.parametrize("layers, experts, width, attention, total, active", [
    (24, 32, 1792, 6, 8.3, 1.5),      # LFM2-8B-A1B
    (40, 64, 1536, 10, 23.8, 2.3),    # LFM2-24B-A2B
])
def test_lfm2_moe_published_totals(tmp_path, layers, experts, width, attention, total, active):
    # Liquid AI's LFM2-24B-A2B release post ("same hidden dimension (2048) and attention
    # configuration as LFM2-8B-A1B", 24 -> 40 layers, 32 -> 64 experts, top-4, expert size 1536
    # vs 1792, the first two layers dense, 10 attention layers of 40; "24 billion total
    # parameters ... 2.3B active") and LFM2-8B-A1B's (18 short-convolution and 6 GQA blocks,
    # vocabulary 65,536; 8.3B total, 1.5B active).  Not stated: the dense layers' width and the
    # heads (Lfm2MoeConfig's defaults, 7168 and 32 / 8) and where the attention layers sit
    # (the count does not depend on it)
    kinds = ["conv"] * layers
    for i in range(attention):
        kinds[2 + i * (layers // attention)] = "full_attention"
    cfg = {**_LFM2, "model_type": "lfm2_moe", "hidden_size": 2048, "num_hidden_layers": layers,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 65536,
           "intermediate_size": 7168, "moe_intermediate_size": width, "num_experts": experts,
           "num_experts_per_tok": 4, "num_dense_layers": 2, "layer_types": kinds}
    arch = from_hf_config(write_config(tmp_path, cfg))
    assert billions(parameter_count(arch), 1) == total
    # the posts give the active count to one decimal, rounded or cut (8B: 1.557B counted)
    assert abs(active_parameter_count(arch) / 10**9 - active) < 0.1


@pytest.mark.parametrize("case", ["qwen3_next", "minimax", "qwen3_5", "qwen3_5_moe", "lfm2_moe"])
def test_an_estimate_of_the_linear_attention_mixers_runs(tmp_path, case, capsys):
    # the Gated DeltaNet and lightning mixers' activations are modelled (see the measurements
    # below): the memory estimate of a small config runs
    path = write_config(tmp_path, SMALL[case])
    code, out, err = estimate(capsys, path)
    assert code == 0, err
    assert any(line.startswith("activations") for line in out.splitlines())


# --------------------------------------------------------------------------------------------
# GPT-OSS: swiglu_limit kept as the preset keeps it
# --------------------------------------------------------------------------------------------

def test_gpt_oss_config_json_keeps_swiglu_limit_as_the_preset(tmp_path):
    from memsym.timing.gemm import shape_of

    arch = from_hf_config(write_config(tmp_path, REAL["gpt-oss-120b"], "oss"))
    ref = preset("gpt-oss-120b")
    assert arch.extra["swiglu_limit"] == ref.extra["swiglu_limit"] == 7.0
    assert parameter_count(arch) == parameter_count(ref)
    # the time model's clamped expert activation (the Bridge's activation_func_clamp_value)
    assert shape_of(arch).expert_clamp and shape_of(arch) == shape_of(ref)
    # GptOssConfig's default when the file has none, and a file's own value
    small = small_config("gpt_oss", head_dim=16, num_local_experts=4, num_experts_per_tok=2)
    assert from_hf_config(write_config(tmp_path, small, "dflt")).extra["swiglu_limit"] == 7.0
    own = from_hf_config(write_config(tmp_path, {**small, "swiglu_limit": 10}, "own"))
    assert own.extra["swiglu_limit"] == 10.0
    with pytest.raises(InvalidValueError, match="'swiglu_limit' must be a number > 0") as err:
        from_hf_config(write_config(tmp_path, {**small, "swiglu_limit": "7"}, "bad"))
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------------------------
# refusals: one line, naming what is missing
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg,match", [
    ({**_DBRX, "tie_word_embeddings": True}, "DbrxConfig refuses it"),
    ({**_DBRX, "d_model": 66}, "not a multiple of n_heads"),
    ({**_DBRX, "attn_config": [1]}, "'attn_config' must be an object"),
    ({k: v for k, v in _DBRX.items() if k != "n_layers"}, "missing field 'n_layers'"),
    (small_config("deepseek_v32", **{**_MLA, "q_lora_rank": None}), "q_lora_rank null"),
    (small_config("deepseek_v32", **_MLA, attention_bias=True), "attention_bias true"),
    (small_config("deepseek_v32", **_MLA, mlp_layer_types=["dense"]),
     "'mlp_layer_types' must list"),
    ({**_Q3N, "linear_num_value_heads": 3}, "multiple of linear_num_key_heads"),
    ({**_Q3N, "layer_types": ["linear_attention"]}, "'layer_types' must list 4"),
    ({**_LFM2, "intermediate_size": 96, "block_ffn_dim_multiplier": None},
     "block_ffn_dim_multiplier null"),
    ({**_LFM2, "intermediate_size": 96, "layer_types": ["conv", "sliding"] * 2},
     "'layer_types' must list 4"),
    ({**_MINIMAX, "layer_types": ["lightning"] * 4}, "'layer_types' must list 4"),
    ({**_Q3N, "model_type": "qwen3_5", "text_config": []}, "'text_config' must be an object"),
    # types transformers builds with layers memsym has no field for: no near type offered
    # (deepseek_v3 would be another model; Gemma 4's layers: tests/test_hf_gemma4.py)
    (small_config("deepseek_v4"), "hyper-connection residual streams"),
    ({**_LFM2, "model_type": "lfm2_moe", "intermediate_size": 96}, "missing field 'layer_types'"),
    (small_config("glm_moe_dsa", **_MLA, index_n_heads=2, index_head_dim=8, index_topk_freq=2),
     "build no indexer"),
    (small_config("glm_moe_dsa", **_MLA, index_n_heads=2, index_head_dim=8,
                  index_topk_pattern="FS"),
     "must list 3 entries"),
])
def test_what_transformers_cannot_build_or_memsym_does_not_model(tmp_path, cfg, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value) and "did you mean" not in str(err.value)


def test_the_new_architecture_fields_are_checked():
    from memsym.model import Architecture, resolve

    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4,
                position_embedding_type="rope")
    mla = dict(multi_latent_attention=True, kv_lora_rank=16, qk_head_dim=8,
               qk_pos_emb_head_dim=8, v_head_dim=8)
    for bad, match in [
            (dict(dsa_index_heads=4), "go together"),
            (dict(dsa_index_heads=4, dsa_index_head_dim=8, **mla), "go together"),
            (dict(attention_output_gate=True, q_lora_rank=8, **mla), "not modelled"),
            (dict(layer_mixers=("gdn", "attention")), "need gdn_key_heads"),
            (dict(layer_mixers=("conv", "lstm")), "layer_mixers must list 2 entries"),
            (dict(layer_mixers=("conv", "attention"), short_conv_kernel=0), "> 0")]:
        with pytest.raises(InvalidValueError, match=match):
            resolve(Architecture(**base, **bad))
    # a short-convolution model needs nothing more than its kernel (default 3)
    arch = Architecture(**base, layer_mixers=("conv", "attention"), ffn_hidden_size=96,
                        vocab_size=128, swiglu=True)
    conv = 4 * 64 * 64 + 3 * 64
    assert parameter_counts(arch)["short_conv"] == conv


def test_dbrx_reads_only_the_nested_fields_transformers_reads(tmp_path):
    # a top-level kv_n_heads or attn_pdrop is not DbrxAttention's (it reads attn_config's)
    top = {**_DBRX, "kv_n_heads": 4, "attn_pdrop": 0.5}
    arch = from_hf_config(write_config(tmp_path, top))
    assert arch.num_query_groups == 1
    assert arch.extra["hf_dropout"]["attn_pdrop"] == 0.0


@pytest.mark.torch
@pytest.mark.parametrize("case", ["dbrx-nested", "deepseek_v32", "qwen3_next", "minimax"])
def test_dropout_masks_follow_the_transformers_model(tmp_path, case):
    cfg = dict(SMALL[case])
    if case.startswith("dbrx"):
        cfg.update(resid_pdrop=0.1, emb_pdrop=0.1,
                   attn_config={**cfg["attn_config"], "attn_pdrop": 0.1})
    else:
        cfg.update(attention_dropout=0.1)
    dropout = assert_masks_follow_dropout(write_config(tmp_path, cfg))
    assert all(p == 0.1 for p in dropout.values())


@pytest.mark.torch
def test_the_dsa_indexer_keeps_no_activation_for_backward():
    # measured: transformers' DeepseekV32Indexer.forward runs under torch.no_grad, so autograd
    # keeps nothing of it (memsym adds no activation term for it)
    torch = pytest.importorskip("torch")
    from transformers.models.deepseek_v32 import modeling_deepseek_v32 as mod
    from transformers import DeepseekV32Config

    conf = DeepseekV32Config(**{**small_config("deepseek_v32", **_MLA, index_n_heads=4,
                                               index_head_dim=16), "index_topk": 4})
    indexer = mod.DeepseekV32Indexer(conf, 0)
    bsz, seq = 2, 6
    x = torch.randn(bsz, seq, 64, requires_grad=True)
    q_resid = torch.randn(bsz, seq, 24, requires_grad=True)
    cos, sin = torch.ones(bsz, seq, 8), torch.zeros(bsz, seq, 8)
    mask = torch.zeros(bsz, seq, seq)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = indexer(x, q_resid, (cos, sin), mask, None)
    assert out.shape == (bsz, seq, 4) and not out.requires_grad and saved == []


def _lfm2_conv_layer(mixer_only: bool):
    """transformers' own LFM2 short-convolution layer (or its mixer alone) as (make, inputs)
    for memsym.measure: bf16, input [b, s, h] with requires_grad, MLP width f unadjusted."""
    torch = pytest.importorskip("torch")
    from transformers import Lfm2Config
    from transformers.models.lfm2 import modeling_lfm2 as mod

    def make(s, b, h, k_sc, f=8):
        conf = Lfm2Config(hidden_size=h, num_hidden_layers=1, num_attention_heads=1,
                          num_key_value_heads=1, intermediate_size=f, vocab_size=8,
                          block_auto_adjust_ff_dim=False, conv_L_cache=k_sc,
                          layer_types=["conv"])
        if mixer_only:
            return mod.Lfm2ShortConv(conf, 0)
        return _Call(mod.Lfm2DecoderLayer(conf, 0))

    class _Call(torch.nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            return self.layer(x)

    def inputs(s, b, h, k_sc, f=8):
        return torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)

    return make, inputs


@pytest.mark.torch
def test_the_short_conv_activations_are_measured_in_transformers_layer():
    # measured: transformers' Lfm2ShortConv (CPU, bf16, its PyTorch causal_conv1d_fn) keeps
    # exactly memsym's short_conv_activations; its whole decoder layer keeps memsym's hybrid
    # layer ("conv", MLP) plus the two differences tests/test_hf_activations.py derives for
    # every transformers layer: LlamaRMSNorm-style fp32 copies (4sbh per norm, two norms) and
    # the unfused SwiGLU's SiLU output (2sbf)
    import sympy as sp

    from memsym.measure import derive_saved_bytes
    from memsym.symbols import b, c, f, h, s, t
    from memsym.terms.mamba import hybrid_layer_activations
    from memsym.terms.short_conv import short_conv_activations

    fit_args = dict(dtype="bfloat16", group_by="none", degree=3, extra=2, holdout=3)
    make, inputs = _lfm2_conv_layer(mixer_only=True)
    mixer = derive_saved_bytes(make, inputs, ("s", "b", "h", "k_sc"),
                               max_degree=dict(s=1, b=1, h=1, k_sc=1),
                               ranges=dict(s=(1, 6), b=(1, 3), h=(1, 6), k_sc=(2, 5)), **fit_args)
    assert sp.expand(mixer.expr - short_conv_activations().expr.xreplace({t: 1})) == 0
    make, inputs = _lfm2_conv_layer(mixer_only=False)
    layer = derive_saved_bytes(make, inputs, ("s", "b", "h", "k_sc", "f"),
                               max_degree=dict(s=1, b=1, h=1, k_sc=1, f=1),
                               ranges=dict(s=(1, 6), b=(1, 3), h=(1, 6), k_sc=(2, 5), f=(1, 6)),
                               **fit_args)
    ours = hybrid_layer_activations(("conv", False), gated=True, norm="rmsnorm", dropout=False,
                                    sequence_parallel=False, flash=True).expr
    differences = 2 * 4 * s * b * h + 2 * s * b * f
    assert sp.expand(layer.expr - ours.xreplace({t: 1, c: 1}) - differences) == 0


@pytest.mark.parametrize("case", ["dbrx-nested", "deepseek_v32", "qwen3_next",
                                  "lfm2-block-ff-dim-idxs-bias-untied", "minimax",
                                  "qwen3_5_moe"])
def test_stages_add_up_to_the_count(tmp_path, case):
    # each layer by its own kind: Gated DeltaNet, short convolution, lightning or attention
    assert_stages_add_up(from_hf_config(write_config(tmp_path, SMALL[case])))


def test_fuzzed_configs(tmp_path):
    keys = {k for cfg in SMALL.values() for k in cfg}
    fuzz_configs(tmp_path, SMALL, keys)


def _qwen3_next_gdn_mixer(monkeypatch):
    """transformers' own Qwen3NextGatedDeltaNet as (make, inputs) for memsym.measure, its
    chunked gated delta rule replaced by a stand-in that keeps nothing (v cloned as the
    output): what is measured is the module around the kernel.  bf16, input [b, s, h]."""
    torch = pytest.importorskip("torch")
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next import modeling_qwen3_next as mod

    def rule(query, key, value, g=None, beta=None, **kwargs):
        return value.clone(), None

    monkeypatch.setattr(mod, "torch_chunk_gated_delta_rule", rule)

    def make(s, b, h, H_gk, H_gv, d_gk, d_gv, k_gdn):
        conf = Qwen3NextConfig(hidden_size=h, num_hidden_layers=1, num_attention_heads=1,
                               num_key_value_heads=1, vocab_size=8, intermediate_size=8,
                               linear_num_key_heads=H_gk, linear_num_value_heads=H_gv,
                               linear_key_head_dim=d_gk, linear_value_head_dim=d_gv,
                               linear_conv_kernel_dim=k_gdn, layer_types=["linear_attention"])
        return mod.Qwen3NextGatedDeltaNet(conf, 0)

    def inputs(s, b, h, H_gk, H_gv, d_gk, d_gv, k_gdn):
        return torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)

    return make, inputs


@pytest.mark.torch
def test_the_gated_deltanet_activations_are_measured_around_the_kernel(monkeypatch):
    # measured: transformers' Qwen3NextGatedDeltaNet (CPU, bf16, the PyTorch causal_conv1d_fn
    # and gated RMSNorm) keeps exactly memsym's gdn_activations less the kernel_* terms, which
    # are derived from fla's ChunkGatedDeltaRuleFunction (the kernel training runs; the CPU
    # fallback torch_chunk_gated_delta_rule is a per-token loop training does not run, so the
    # rule is replaced by a stand-in keeping nothing).  The kernel's beta is the sigmoid's
    # output (measured here), so no kernel term repeats it.
    import sympy as sp

    from memsym.measure import derive_saved_bytes
    from memsym.symbols import t
    from memsym.terms.gated_deltanet import GDN_KERNEL_KEYS, gdn_activations

    names = ("s", "b", "h", "H_gk", "H_gv", "d_gk", "d_gv", "k_gdn")
    make, inputs = _qwen3_next_gdn_mixer(monkeypatch)
    fit = derive_saved_bytes(make, inputs, names, dtype="bfloat16", group_by="none", degree=4,
                             max_degree={n: 1 for n in names},
                             ranges=dict(s=(1, 5), b=(1, 3), h=(1, 5), H_gk=(1, 2),
                                         H_gv=(1, 4), d_gk=(1, 4), d_gv=(1, 4), k_gdn=(2, 4)),
                             valid=lambda x: x["H_gv"] % x["H_gk"] == 0, extra=2, holdout=3)
    module = sum((term.expr for term in gdn_activations() if term.key not in GDN_KERNEL_KEYS),
                 sp.Integer(0))
    assert sp.expand(fit.expr - module.xreplace({t: 1})) == 0


def test_the_fla_kernel_terms_are_the_saved_tensors_of_its_forward():
    # derived from fla at bc3b101dcb, fla/ops/gated_delta_rule/chunk.py lines 281-326: with
    # transformers' call (use_qk_l2norm_in_kernel=True, g and beta given, no initial state,
    # chunk 64) ctx.save_for_backward keeps q, k (l2-normalised, 16-bit), q_rstd, k_rstd (fp32
    # per row [b s H_gk]), v ([b, s, H_gv, d_gv]), g (fp32 cumsum [b, s, H_gv]), beta (= the
    # sigmoid's output, counted in the module), A ([b, s, H_gv, 64], k.dtype); the chunk
    # states h are recomputed in the backward (chunk.py line 160)
    import sympy as sp

    from memsym.symbols import H_gk, H_gv, b, d_gk, d_gv, s, t
    from memsym.terms.gated_deltanet import GDN_KERNEL_KEYS, gdn_activations

    tot = gdn_activations()
    kernel = sum((tot[key].expr for key in GDN_KERNEL_KEYS), sp.Integer(0)).xreplace({t: 1})
    per_token = 2 * 2 * H_gk * d_gk + 2 * 4 * H_gk + 2 * H_gv * d_gv + 4 * H_gv + 2 * 64 * H_gv
    assert sp.expand(kernel - s * b * per_token) == 0


def test_a_qwen3_next_estimate_holds_the_gated_deltanet_activations(tmp_path, capsys):
    # the memory estimate of Qwen3-Next runs: weights of the exact count, activations with the
    # Gated DeltaNet term (36 of its 48 layers)
    path = write_config(tmp_path, REAL["qwen3-next-80b-a3b"], "q3n")
    code, out, err = estimate(capsys, path, "--seq-length", 4096)
    assert code == 0, err
    assert any(line.startswith("activations") for line in out.splitlines())


def _backward_bytes(module, x) -> int:
    """Bytes of the distinct storages the backward graph of ``module(x)`` holds (saved
    tensors reachable from the output's grad_fn), the module's parameters and buffers left
    out.  Unlike saved_tensors_hooks it leaves out what a branch that does not reach the
    output saved: MiniMaxLightningAttention's last state update, which feeds only the
    returned cache that MiniMaxDecoderLayer drops (``hidden_states, _ = self.self_attn``)."""
    import torch

    out = module(x)
    own = {p.untyped_storage().data_ptr()
           for p in (*module.parameters(), *module.buffers())}
    storages, seen, todo = {}, set(), [out.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        for name in dir(fn):
            val = getattr(fn, name) if name.startswith("_saved_") else None
            if isinstance(val, torch.Tensor) and val.untyped_storage().data_ptr() not in own:
                storages[val.untyped_storage().data_ptr()] = val.untyped_storage().nbytes()
        todo += [nxt for nxt, _ in fn.next_functions]
    return sum(storages.values())


@pytest.mark.torch
@pytest.mark.parametrize("blocks", [1, 2, 3])
def test_the_lightning_activations_are_measured_in_transformers_layer(blocks):
    # measured: transformers' MiniMaxLightningAttention (CPU, bf16, pure PyTorch) keeps exactly
    # memsym's lightning_activations for s = blocks x B_lin, fitted over b >= 2, a >= 2, d_h, h
    # and B_lin, but for the block decay exp(-slope_rate B_lin) ([a, 1, 1], 2a bytes) each
    # block from the third keeps, which memsym leaves out.  At b = 1 the 4-d matmuls fold their
    # batch dimensions without a copy: q, k, v become views of the SiLU output (kept instead,
    # the same 6 s a d_h bytes) and the state updates' V copies (2 b a d_h (s - B_lin)) vanish
    import sympy as sp
    import torch
    from transformers import MiniMaxConfig
    from transformers.models.minimax import modeling_minimax as mod

    from memsym.polyfit import fit_polynomial
    from memsym.symbols import B_lin, a, b, d_h, lookup, s, t
    from memsym.terms.lightning import lightning_activations

    class Call(torch.nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            return self.layer(x, None, None)[0]

    def measure(shape):
        b, B = shape["b"], shape["B_lin"]
        conf = MiniMaxConfig(hidden_size=shape["h"], num_hidden_layers=2,
                             num_attention_heads=shape["a"], num_key_value_heads=1,
                             head_dim=shape["d_h"], block_size=B, vocab_size=8,
                             intermediate_size=8, num_local_experts=2,
                             layer_types=["linear_attention", "full_attention"])
        torch.manual_seed(0)
        layer = Call(mod.MiniMaxLightningAttention(conf, 0)).to(torch.bfloat16)
        x = torch.randn(b, blocks * B, shape["h"], dtype=torch.bfloat16, requires_grad=True)
        return _backward_bytes(layer, x)

    fit = fit_polynomial(measure, ("b", "a", "d_h", "h", "B_lin"), degree=4,
                         max_degree=dict(b=1, a=1, d_h=2, h=1, B_lin=2),
                         ranges=dict(b=(2, 3), a=(2, 4), d_h=(2, 8), h=(2, 5), B_lin=(2, 5)),
                         valid=lambda x: x["d_h"] % 2 == 0, extra=2, holdout=3,
                         holdout_ranges=dict(b=(2, 4), a=(2, 6), d_h=(2, 10), h=(2, 6),
                                             B_lin=(2, 6)))
    ours = lightning_activations().expr.xreplace({t: 1, s: blocks * B_lin})
    block_decay = 2 * a * max(blocks - 2, 0)
    assert sp.expand(fit.expr - ours - block_decay) == 0
    v_copies = 2 * b * a * d_h * (s - B_lin)
    for shape in (dict(a=2, d_h=4, h=3, B_lin=3), dict(a=4, d_h=6, h=5, B_lin=2)):
        at = {**{lookup(k): v for k, v in shape.items()}, b: 1, t: 1, s: blocks * shape["B_lin"]}
        want = lightning_activations().expr - v_copies + block_decay
        assert measure({**shape, "b": 1}) == want.xreplace(at)
