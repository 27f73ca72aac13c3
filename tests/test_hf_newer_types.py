"""The newer Hugging Face model types (issue 32) against transformers' own models, and the refusals.

Same oracle as ``tests/test_hf_configs.py``: transformers 5.24.0 builds
``AutoModelForCausalLM.from_config`` of the very file memsym reads, on the meta device, and
``sum(p.numel())`` of its parameters (a tied weight once) must equal memsym's count.  For the
vision-language ``gemma3`` files transformers builds ``Gemma3ForConditionalGeneration``; memsym counts
its language model, so the oracle leaves out the ``vision_tower`` and ``multi_modal_projector``
parameters (and checks that these are the only ones it leaves out).  Small configs keep every
structural switch of the published files with small sizes; one full-size config per family carries
the values of its published config.json (hub page cited) and is checked against the total the model
card states (rounded as the card rounds it) and, where that is all a card gives, against a hand count
written out from the modules the modeling file builds.  No network: every config is written here.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError, UnknownNameError
from memsym.model import active_parameter_count, from_hf_config, parameter_count, parameter_counts
from memsym.model.hf_config import HF_MODEL_TYPES

from hf_oracle import (TOKENS, assert_masks_follow_dropout, assert_stages_add_up, billions,
                       fuzz_configs, language_model_count, one_case_per_type, small_config,
                       write_config)

# the model types this file covers (the older ones are in tests/test_hf_configs.py)
NEWER_TYPES = {"llama4_text", "llama4", "gemma3", "olmoe", "smollm3", "glm4", "glm4_moe",
               "ernie4_5", "ernie4_5_moe", "seed_oss", "exaone4", "hunyuan_v1_dense", "apertus",
               "arcee", "dots1", "exaone_moe"}

_VISION = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
           "intermediate_size": 32}
_MOE_GROUPS = {"n_group": 1, "topk_group": 1}

SMALL = {
    # Llama 4: every layer MoE (Scout), every second (Maverick), an explicit moe_layers list
    "llama4_text": small_config("llama4_text", head_dim=16, intermediate_size=32,
                                intermediate_size_mlp=96, num_local_experts=4),
    "llama4_text-interleave-2": small_config("llama4_text", num_hidden_layers=4, head_dim=16,
                                             intermediate_size=32, intermediate_size_mlp=96,
                                             num_local_experts=4, num_experts_per_tok=2,
                                             interleave_moe_layer_step=2, attention_bias=True),
    "llama4_text-moe-layers-tied": small_config("llama4_text", num_hidden_layers=4, head_dim=16,
                                                intermediate_size=32, intermediate_size_mlp=96,
                                                num_local_experts=4, moe_layers=[1, 2],
                                                tie_word_embeddings=True),
    "llama4": {"model_type": "llama4", "vision_config": _VISION, **TOKENS,
               "text_config": small_config("llama4_text", head_dim=16, intermediate_size=32,
                                           intermediate_size_mlp=96, num_local_experts=4,
                                           interleave_moe_layer_step=2)},
    "gemma3": {"model_type": "gemma3", "vision_config": _VISION,
               "text_config": small_config("gemma3_text", head_dim=16)},
    "gemma3-untied": {"model_type": "gemma3", "tie_word_embeddings": False,
                      "vision_config": _VISION,
                      "text_config": small_config("gemma3_text", head_dim=16)},
    # which tie_word_embeddings counts: Gemma3ForConditionalGeneration reads the top-level one,
    # Llama4ForCausalLM (built from the text config) the text_config's
    "gemma3-text-config-tie-ignored": {"model_type": "gemma3", "vision_config": _VISION,
                                       "text_config": small_config("gemma3_text", head_dim=16,
                                                                   tie_word_embeddings=False)},
    "llama4-top-level-tie-ignored": {"model_type": "llama4", "tie_word_embeddings": True,
                                     "vision_config": _VISION, **TOKENS,
                                     "text_config": small_config("llama4_text", head_dim=16,
                                                                 intermediate_size=32,
                                                                 intermediate_size_mlp=96,
                                                                 num_local_experts=4)},
    # EXAONE MoE: EXAONE 4's attention, DeepSeek-V3's MoE after the first dense layer, one
    # shared expert; or the layers mlp_layer_types lists, two shared experts, tied; or every
    # layer MoE with no shared expert
    "exaone_moe": small_config("exaone_moe", num_experts=4, num_experts_per_tok=2,
                               moe_intermediate_size=16, head_dim=16),
    "exaone_moe-layer-types-2-shared-tied": small_config(
        "exaone_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
        num_shared_experts=2, mlp_layer_types=["sparse", "dense", "sparse"],
        tie_word_embeddings=True),
    "exaone_moe-all-moe-no-shared": small_config("exaone_moe", num_experts=4, num_experts_per_tok=2,
                                                 moe_intermediate_size=16, first_k_dense_replace=0,
                                                 num_shared_experts=0),
    "olmoe": small_config("olmoe", num_experts=4, num_experts_per_tok=2),
    "olmoe-bias-tied": small_config("olmoe", num_experts=4, num_experts_per_tok=2,
                                    attention_bias=True, tie_word_embeddings=True),
    "smollm3": small_config("smollm3"),
    "smollm3-biases-untied": small_config("smollm3", attention_bias=True, mlp_bias=True,
                                          tie_word_embeddings=False),
    "glm4": small_config("glm4", head_dim=16),
    "glm4-no-bias-default-head-dim": small_config("glm4", attention_bias=False),
    "glm4_moe": small_config("glm4_moe", n_routed_experts=4, n_shared_experts=1,
                             num_experts_per_tok=2, moe_intermediate_size=16,
                             first_k_dense_replace=1, num_nextn_predict_layers=1,
                             attention_bias=True, use_qk_norm=True, head_dim=16, **_MOE_GROUPS),
    "glm4_moe-all-moe-2-shared": small_config("glm4_moe", n_routed_experts=4, n_shared_experts=2,
                                              num_experts_per_tok=2, moe_intermediate_size=16,
                                              first_k_dense_replace=0, **_MOE_GROUPS),
    "ernie4_5": small_config("ernie4_5", head_dim=16),
    "ernie4_5-bias-untied": small_config("ernie4_5", use_bias=True, tie_word_embeddings=False),
    "ernie4_5_moe": small_config("ernie4_5_moe", num_hidden_layers=4, moe_num_experts=4, moe_k=2,
                                 moe_intermediate_size=16, moe_num_shared_experts=1,
                                 moe_layer_start_index=1, moe_layer_end_index=3,
                                 moe_layer_interval=1),
    "ernie4_5_moe-interval-no-shared": small_config("ernie4_5_moe", num_hidden_layers=4,
                                                    moe_num_experts=4, moe_k=2,
                                                    moe_intermediate_size=16,
                                                    moe_num_shared_experts=0,
                                                    moe_layer_start_index=0, moe_layer_end_index=2,
                                                    moe_layer_interval=2,
                                                    tie_word_embeddings=False),
    "seed_oss": small_config("seed_oss", head_dim=16),
    "seed_oss-every-bias": small_config("seed_oss", head_dim=16, attention_out_bias=True,
                                        mlp_bias=True),
    "seed_oss-no-bias": small_config("seed_oss", head_dim=16, attention_bias=False),
    "exaone4": small_config("exaone4"),
    "exaone4-tied-head-dim": small_config("exaone4", tie_word_embeddings=True, head_dim=32),
    "hunyuan_v1_dense": small_config("hunyuan_v1_dense", head_dim=16),
    "hunyuan_v1_dense-bias": small_config("hunyuan_v1_dense", head_dim=32, attention_bias=True),
    "apertus": small_config("apertus"),
    "apertus-relu2-bias": small_config("apertus", hidden_act="relu2", attention_bias=True),
    "arcee": small_config("arcee"),
    "arcee-biases": small_config("arcee", attention_bias=True, mlp_bias=True, head_dim=8),
    "dots1": small_config("dots1", n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                          moe_intermediate_size=16, first_k_dense_replace=1, **_MOE_GROUPS),
    "dots1-bias-2-shared": small_config("dots1", n_routed_experts=4, n_shared_experts=2,
                                        num_experts_per_tok=2, moe_intermediate_size=16,
                                        attention_bias=True, **_MOE_GROUPS),
}


def test_every_newer_type_has_a_small_config():
    assert {cfg["model_type"] for cfg in SMALL.values()} == NEWER_TYPES
    assert NEWER_TYPES <= set(HF_MODEL_TYPES)


@pytest.mark.parametrize("case", ["apertus", "llama4_text-interleave-2", "ernie4_5_moe",
                                  "glm4_moe", "olmoe-bias-tied", "gemma3"])
def test_stages_add_up_to_the_count(tmp_path, case):
    assert_stages_add_up(from_hf_config(write_config(tmp_path, SMALL[case])))


# --------------------------------------------------------------------------------------------
# full-size configs: the published config.json values (the fields that matter)
# --------------------------------------------------------------------------------------------

REAL = {
    # https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E/blob/main/config.json
    "llama-4-scout": {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
                      "text_config": {"model_type": "llama4_text", "hidden_size": 5120,
                                      "intermediate_size": 8192, "intermediate_size_mlp": 16384,
                                      "num_hidden_layers": 48, "num_attention_heads": 40,
                                      "num_key_value_heads": 8, "head_dim": 128,
                                      "num_local_experts": 16, "num_experts_per_tok": 1,
                                      "interleave_moe_layer_step": 1, "use_qk_norm": True,
                                      "attention_chunk_size": 8192, "vocab_size": 202048,
                                      "max_position_embeddings": 10485760, "rope_theta": 500000.0,
                                      "tie_word_embeddings": False},
                      "vision_config": {"hidden_size": 1408, "num_hidden_layers": 34,
                                        "num_attention_heads": 16, "intermediate_size": 5632},
                      "tie_word_embeddings": False},
    # https://huggingface.co/meta-llama/Llama-4-Maverick-17B-128E/blob/main/config.json (text_config)
    "llama-4-maverick-text": {"architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text",
                              "hidden_size": 5120, "intermediate_size": 8192,
                              "intermediate_size_mlp": 16384, "num_hidden_layers": 48,
                              "num_attention_heads": 40, "num_key_value_heads": 8,
                              "head_dim": 128, "num_local_experts": 128,
                              "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
                              "vocab_size": 202048, "max_position_embeddings": 1048576,
                              "tie_word_embeddings": False},
    # https://huggingface.co/google/gemma-3-4b-pt/blob/main/config.json (the text_config omits
    # the heads, KV heads, head_dim and vocabulary: Gemma3TextConfig's defaults)
    "gemma-3-4b": {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                   "text_config": {"model_type": "gemma3_text", "hidden_size": 2560,
                                   "intermediate_size": 10240, "num_hidden_layers": 34,
                                   "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                                   "sliding_window": 1024},
                   "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152,
                                     "image_size": 896, "intermediate_size": 4304,
                                     "num_attention_heads": 16, "num_hidden_layers": 27,
                                     "patch_size": 14, "vision_use_head": False},
                   "mm_tokens_per_image": 256, "eos_token_id": [1, 106]},
    # https://huggingface.co/google/gemma-3-27b-pt/blob/main/config.json
    "gemma-3-27b": {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                    "text_config": {"model_type": "gemma3_text", "head_dim": 128,
                                    "hidden_size": 5376, "intermediate_size": 21504,
                                    "num_attention_heads": 32, "num_hidden_layers": 62,
                                    "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
                                    "sliding_window": 1024},
                    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152,
                                      "image_size": 896, "intermediate_size": 4304,
                                      "num_attention_heads": 16, "num_hidden_layers": 27,
                                      "patch_size": 14, "vision_use_head": False}},
    # https://huggingface.co/allenai/OLMoE-1B-7B-0924/blob/main/config.json
    "olmoe-1b-7b": {"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe",
                    "hidden_size": 2048, "intermediate_size": 1024, "num_hidden_layers": 16,
                    "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 64,
                    "num_experts_per_tok": 8, "max_position_embeddings": 4096,
                    "attention_bias": False, "clip_qkv": None, "tie_word_embeddings": False,
                    "vocab_size": 50304, "pad_token_id": 1, "eos_token_id": 50279},
    # https://huggingface.co/HuggingFaceTB/SmolLM3-3B/blob/main/config.json
    "smollm3-3b": {"architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3",
                   "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                   "num_attention_heads": 16, "num_key_value_heads": 4,
                   "max_position_embeddings": 65536, "attention_bias": False, "mlp_bias": False,
                   "no_rope_layer_interval": 4, "tie_word_embeddings": True,
                   "vocab_size": 128256, "pad_token_id": 128004, "bos_token_id": None,
                   "eos_token_id": 128012},
    # https://huggingface.co/THUDM/GLM-4-9B-0414/blob/main/config.json
    "glm-4-9b-0414": {"architectures": ["Glm4ForCausalLM"], "model_type": "glm4",
                      "hidden_size": 4096, "intermediate_size": 13696, "num_hidden_layers": 40,
                      "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
                      "attention_bias": True, "partial_rotary_factor": 0.5,
                      "max_position_embeddings": 32768, "tie_word_embeddings": False,
                      "vocab_size": 151552, "pad_token_id": 151329,
                      "eos_token_id": [151329, 151336, 151338]},
    # https://huggingface.co/zai-org/GLM-4.5-Air/blob/main/config.json
    "glm-4.5-air": {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
                    "hidden_size": 4096, "intermediate_size": 10944, "moe_intermediate_size": 1408,
                    "num_hidden_layers": 46, "num_attention_heads": 96, "num_key_value_heads": 8,
                    "head_dim": 128, "n_routed_experts": 128, "n_shared_experts": 1,
                    "num_experts_per_tok": 8, "first_k_dense_replace": 1, "n_group": 1,
                    "topk_group": 1, "attention_bias": True, "use_qk_norm": False,
                    "partial_rotary_factor": 0.5, "num_nextn_predict_layers": 1,
                    "max_position_embeddings": 131072, "tie_word_embeddings": False,
                    "vocab_size": 151552, "pad_token_id": 151329,
                    "eos_token_id": [151329, 151336, 151338]},
    # https://huggingface.co/baidu/ERNIE-4.5-0.3B-PT/blob/main/config.json
    "ernie-4.5-0.3b": {"architectures": ["Ernie4_5ForCausalLM"], "model_type": "ernie4_5",
                       "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 18,
                       "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 128,
                       "max_position_embeddings": 131072, "use_bias": False,
                       "tie_word_embeddings": True, "vocab_size": 103424, "pad_token_id": 0,
                       "bos_token_id": 1, "eos_token_id": 2},
    # https://huggingface.co/baidu/ERNIE-4.5-21B-A3B-PT/blob/main/config.json
    "ernie-4.5-21b-a3b": {"architectures": ["Ernie4_5_MoeForCausalLM"],
                          "model_type": "ernie4_5_moe", "hidden_size": 2560,
                          "intermediate_size": 12288, "num_hidden_layers": 28,
                          "num_attention_heads": 20, "num_key_value_heads": 4,
                          "moe_num_experts": 64, "moe_k": 6, "moe_intermediate_size": 1536,
                          "moe_num_shared_experts": 2, "moe_layer_start_index": 1,
                          "moe_layer_end_index": 27, "moe_layer_interval": 1,
                          "max_position_embeddings": 131072, "use_bias": False,
                          "tie_word_embeddings": True, "vocab_size": 103424, "pad_token_id": 0,
                          "bos_token_id": 1, "eos_token_id": 2},
    # https://huggingface.co/ByteDance-Seed/Seed-OSS-36B-Base/blob/main/config.json
    "seed-oss-36b": {"architectures": ["SeedOssForCausalLM"], "model_type": "seed_oss",
                     "hidden_size": 5120, "intermediate_size": 27648, "num_hidden_layers": 64,
                     "num_attention_heads": 80, "num_key_value_heads": 8, "head_dim": 128,
                     "attention_bias": True, "attention_out_bias": False, "mlp_bias": False,
                     "attention_dropout": 0.1, "residual_dropout": 0.1,
                     "max_position_embeddings": 524288, "tie_word_embeddings": False,
                     "vocab_size": 155136, "pad_token_id": 1, "bos_token_id": 0,
                     "eos_token_id": 2},
    # https://huggingface.co/LGAI-EXAONE/EXAONE-4.0-32B/blob/main/config.json
    "exaone-4.0-32b": {"architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4",
                       "hidden_size": 5120, "intermediate_size": 27392, "num_hidden_layers": 64,
                       "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                       "sliding_window": 4096, "sliding_window_pattern": "LLLG",
                       "layer_types": 16 * (3 * ["sliding_attention"] + ["full_attention"]),
                       "max_position_embeddings": 131072, "tie_word_embeddings": False,
                       "vocab_size": 102400, "pad_token_id": 0, "bos_token_id": 1,
                       "eos_token_id": 361},
    # https://huggingface.co/swiss-ai/Apertus-8B-2509/blob/main/config.json
    "apertus-8b": {"architectures": ["ApertusForCausalLM"], "model_type": "apertus",
                   "hidden_size": 4096, "intermediate_size": 21504, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "xielu",
                   "attention_bias": False, "max_position_embeddings": 65536,
                   "tie_word_embeddings": False, "vocab_size": 131072, "pad_token_id": 3,
                   "bos_token_id": 1, "eos_token_id": 68},
    # https://huggingface.co/rednote-hilab/dots.llm1.base/blob/main/config.json
    "dots.llm1": {"architectures": ["Dots1ForCausalLM"], "model_type": "dots1",
                  "hidden_size": 4096, "intermediate_size": 10944, "moe_intermediate_size": 1408,
                  "num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 32,
                  "n_routed_experts": 128, "n_shared_experts": 2, "num_experts_per_tok": 6,
                  "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
                  "attention_bias": False, "max_position_embeddings": 32768,
                  "tie_word_embeddings": False, "vocab_size": 152064, "bos_token_id": None,
                  "eos_token_id": 151649, "pad_token_id": 151643},
}


def _read(tmp_path, case):
    return from_hf_config(write_config(tmp_path, REAL[case], case))


def test_llama4_scout_hand_count_and_card(tmp_path):
    # Hand count from modeling_llama4.py (h=5120, a=40, g=8, d_h=128, f_expert=8192, E=16,
    # L=48, V=202048, untied): every layer is MoE (interleave_moe_layer_step 1)
    h, L, V, E, f = 5120, 48, 202048, 16, 8192
    attn = 2 * h * 40 * 128 + 2 * h * 8 * 128
    moe = h * E + E * 3 * h * f + 3 * h * f           # router, experts, shared expert
    total = 2 * V * h + L * (attn + moe + 2 * h) + h
    arch = _read(tmp_path, "llama-4-scout")
    assert parameter_count(arch) == total == 107_769_861_120
    # the model card: "17B (Activated) 109B (Total)"; the 109B holds the vision encoder too,
    # which memsym leaves out (and says so)
    assert billions(active_parameter_count(arch)) == 17
    assert 107 * 10**9 < parameter_count(arch) < 109 * 10**9
    assert any("vision encoder" in n for n in arch.extra["notes"])
    # "did you mean llama?" read as llama would be an 11.1B model; never done in its place
    assert arch.extra["hf_model_type"] == "llama4"


def test_llama4_maverick_interleaved(tmp_path):
    # model card: "17B (Activated) 400B (Total)" (text and vision); dense layers alternate
    # with MoE layers: 24 of each
    arch = _read(tmp_path, "llama-4-maverick-text")
    h, V, E, f, f_mlp = 5120, 202048, 128, 8192, 16384
    attn = 2 * h * 40 * 128 + 2 * h * 8 * 128
    dense = attn + 3 * h * f_mlp + 2 * h
    moe = attn + h * E + E * 3 * h * f + 3 * h * f + 2 * h
    assert parameter_count(arch) == 24 * (dense + moe) + 2 * V * h + h
    # the card's whole billions, cut (as ERNIE's and dots' below)
    assert parameter_count(arch) // 10**9 == 400 and billions(active_parameter_count(arch)) == 17


@pytest.mark.parametrize("case,non_embedding_m", [("gemma-3-4b", 3_209), ("gemma-3-27b", 25_600)])
def test_gemma3_text_config_against_the_report(tmp_path, case, non_embedding_m):
    # Gemma 3 technical report (arXiv 2503.19786) Table 1: non-embedding parameters 3,209M (4B),
    # 25,600M (27B); the vision encoder (417M) is the part memsym leaves out
    arch = _read(tmp_path, case)
    counts = parameter_counts(arch)
    assert counts["output_layer"] == 0                           # tied (Gemma3Config default)
    assert round((parameter_count(arch) - counts["embedding"]) / 10**6) == non_embedding_m
    assert arch.vocab_size == 262208


def test_gemma3_text_config_defaults_are_said(tmp_path):
    arch = _read(tmp_path, "gemma-3-4b")
    assert (arch.num_attention_heads, arch.num_query_groups, arch.kv_channels) == (8, 4, 256)
    notes = arch.extra["notes"]
    assert any("num_attention_heads=8" in n and "vocab_size=262208" in n for n in notes)
    assert all("\n" not in n for n in notes)


def test_olmoe_against_the_paper(tmp_path):
    # OLMoE paper (arXiv 2409.02060) Table 1: OLMoE-1B-7B, 1.3B active and 6.9B total parameters
    arch = _read(tmp_path, "olmoe-1b-7b")
    assert billions(parameter_count(arch), 1) == 6.9
    assert billions(active_parameter_count(arch), 1) == 1.3


def test_dense_families_against_their_cards(tmp_path):
    # model cards: SmolLM3 "a 3B parameter language model"; GLM-4-9B-0414 "9B";
    # ERNIE-4.5-0.3B "0.36B"; Seed-OSS-36B "36B"; Apertus "8B"
    assert billions(parameter_count(_read(tmp_path, "smollm3-3b"))) == 3
    assert billions(parameter_count(_read(tmp_path, "glm-4-9b-0414"))) == 9
    assert billions(parameter_count(_read(tmp_path, "ernie-4.5-0.3b")), 2) == 0.36
    assert billions(parameter_count(_read(tmp_path, "seed-oss-36b"))) == 36
    assert billions(parameter_count(_read(tmp_path, "apertus-8b"))) == 8


def test_exaone4_against_the_card(tmp_path):
    # EXAONE-4.0-32B model card: "Number of Parameters (without embeddings): 30.95B"
    # (neither the input embedding nor the untied lm_head)
    arch = _read(tmp_path, "exaone-4.0-32b")
    counts = parameter_counts(arch)
    body = parameter_count(arch) - counts["embedding"] - counts["output_layer"]
    assert billions(body, 2) == 30.95


def test_moe_families_against_their_cards(tmp_path):
    # GLM-4.5-Air card: "106B total parameters and 12B active", counted without the embedding
    # and lm_head (and without the MTP layer transformers does not build)
    arch = _read(tmp_path, "glm-4.5-air")
    counts = parameter_counts(arch)
    vocab = counts["embedding"] + counts["output_layer"]
    assert billions(parameter_count(arch) - vocab) == 106
    assert billions(active_parameter_count(arch) - vocab) == 12
    assert any(n.startswith("num_nextn_predict_layers=1 not counted") for n in arch.extra["notes"])
    # ERNIE-4.5-21B-A3B card: "Total Params 21B, Activated Params 3B" (whole billions, cut)
    arch = _read(tmp_path, "ernie-4.5-21b-a3b")
    assert parameter_count(arch) // 10**9 == 21 and active_parameter_count(arch) // 10**9 == 3
    # dots.llm1 card: "142B total parameters, 14B activated" (whole billions, cut)
    arch = _read(tmp_path, "dots.llm1")
    assert parameter_count(arch) // 10**9 == 142 and active_parameter_count(arch) // 10**9 == 14


@pytest.mark.torch
@pytest.mark.parametrize("case", sorted(set(REAL) - {"llama-4-maverick-text", "gemma-3-27b"}))
def test_real_configs_match_transformers(tmp_path, case):
    path = write_config(tmp_path, REAL[case], case)
    assert parameter_count(from_hf_config(path)) == language_model_count(path)


# --------------------------------------------------------------------------------------------
# refusals: one line; a suggestion is never applied
# --------------------------------------------------------------------------------------------

def test_a_misspelt_model_type_is_refused_not_read_as_the_suggestion(tmp_path):
    # architectures[0] names a known class, model_type is misspelt: before issue 32 the file was
    # read as that class's type; now the model_type is refused and the near name only suggested
    cfg = {**small_config("llama"), "model_type": "lama", "architectures": ["LlamaForCausalLM"]}
    with pytest.raises(UnknownNameError) as err:
        from_hf_config(write_config(tmp_path, cfg))
    msg = str(err.value)
    assert "\n" not in msg and "'lama'" in msg and "did you mean llama" in msg
    assert "never reads one in place of the other" in msg
    # without a model_type, the file's own architectures[0] names the type (no guess)
    cfg.pop("model_type")
    assert from_hf_config(write_config(tmp_path, cfg, "b")).extra["hf_model_type"] == "llama"


# zamba and zamba2 are read (tests/test_hf_zamba.py), each as its own type, never as another


@pytest.mark.parametrize("cfg,match", [
    (small_config("hunyuan_v1_dense"), "missing field 'head_dim'"),
    (small_config("seed_oss", attention_bias=False, attention_out_bias=True), "attention_out_bias"),
    (small_config("ernie4_5_moe", use_bias=True), "use_bias true"),
    (small_config("olmoe", head_dim=32), "head_dim other than"),
    (small_config("dots1", n_shared_experts=1, num_experts_per_tok=2),
     "missing field 'n_routed_experts'"),
    ({"model_type": "gemma3", "text_config": [1]}, "'text_config' must be an object"),
    (small_config("llama4_text", moe_layers="1"), "'moe_layers' must be a list"),
])
def test_what_transformers_cannot_build_or_memsym_does_not_model(tmp_path, cfg, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value)


def test_the_cli_refuses_a_hybrid_in_one_line(tmp_path, capsys):
    # memsym estimate in this process (memsym.cli.main, what the installed command runs); a
    # fresh process is tests/test_cli.py's subject
    from memsym.cli import main

    code = main(["estimate", str(write_config(tmp_path, small_config("falcon_h1")))])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    # a Falcon-H1 layer runs attention and Mamba side by side: its activations are refused
    assert err.count("\n") == 1 and "Mamba side by side" in err


# --------------------------------------------------------------------------------------------
# dropout as the newer transformers models apply it
# --------------------------------------------------------------------------------------------

@pytest.mark.torch
@pytest.mark.parametrize("case", one_case_per_type(SMALL))
def test_dropout_masks_follow_the_transformers_model(tmp_path, case):
    # oracle: transformers' model in training mode keeps a dropout mask exactly when the
    # probabilities memsym read are not all zero (Seed-OSS defaults to 0.1)
    assert_masks_follow_dropout(write_config(tmp_path, SMALL[case]))


def test_fuzzed_newer_configs(tmp_path):
    # nested fields too: a text_config or a moe_layers list given as a small mapping
    st = pytest.importorskip("hypothesis").strategies
    keys = {k for cfg in SMALL.values() for k in cfg} | {"text_config", "moe_layers"}
    fuzz_configs(tmp_path, SMALL, keys,
                 (st.dictionaries(st.sampled_from(sorted(keys)), st.integers(0, 64), max_size=3),))


def test_the_docs_list_every_accepted_type():
    # docs/validation.md lists the model_type values read (issue 32: kept in step with the code)
    from pathlib import Path

    text = Path(__file__).resolve().parent.parent.joinpath("docs", "validation.md").read_text()
    section = text[text.index("## config.json"):]
    missing = [t for t in HF_MODEL_TYPES if f"`{t}`" not in section]
    assert not missing, missing
