"""Hugging Face config.json families against transformers' own models, and the reader's refusals.

The oracle is independent of memsym: transformers builds ``AutoModelForCausalLM.from_config`` of
the very file memsym reads, on the meta device (no memory, no download), and
``sum(p.numel() for p in model.parameters())`` (shared tied weights counted once) must equal
memsym's ``parameter_count``.  Those tests carry ``@pytest.mark.torch`` and skip cleanly without
torch or transformers (verified against transformers 5.24.0, torch 2.13).  Realistic configs carry
the values of the models' published config.json files (hub page cited); where the release publishes
a total (the hub's safetensors parameter count or the model card) it is asserted without torch.
Every config here is written by the test itself: no network.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from memsym.errors import InvalidValueError, UnknownNameError
from memsym.model import from_hf_config, parameter_count
from memsym.limits import FIELD_LIMITS, limit_of
from memsym.model.hf_config import HF_MODEL_TYPES

from hf_oracle import (TOKENS, assert_stages_add_up, dropout_masks, one_case_per_type,
                       small_config, transformers_count, write_config)

# --------------------------------------------------------------------------------------------
# small configs, one or more per model type and per structural switch
# --------------------------------------------------------------------------------------------

_DEEPSEEK = dict(q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
                 v_head_dim=8, n_routed_experts=4, n_shared_experts=1, moe_intermediate_size=16,
                 first_k_dense_replace=1, num_experts_per_tok=2, n_group=1, topk_group=1,
                 num_key_value_heads=4)

SMALL = {
    "llama": small_config("llama"),
    "llama-biases": small_config("llama", attention_bias=True, mlp_bias=True),
    "llama-attention-bias": small_config("llama", attention_bias=True),
    "llama-mlp-bias-tied": small_config("llama", mlp_bias=True, tie_word_embeddings=True),
    "llama-head-dim": small_config("llama", head_dim=32),
    "llama-no-kv-field": {k: v for k, v in small_config("llama").items()
                          if k != "num_key_value_heads"},
    "mistral": small_config("mistral"),
    "mistral-default-kv": {**{k: v for k, v in small_config("mistral").items()
                              if k != "num_key_value_heads"}, "num_attention_heads": 8},
    "mixtral": small_config("mixtral", num_local_experts=4, num_experts_per_tok=2),
    "qwen2": small_config("qwen2"),
    "qwen2-tied": small_config("qwen2", tie_word_embeddings=True),
    "qwen3": small_config("qwen3", head_dim=16),
    "qwen3-default-head-dim": small_config("qwen3"),
    "qwen2_moe": small_config("qwen2_moe", num_experts=4, num_experts_per_tok=2,
                              moe_intermediate_size=32, shared_expert_intermediate_size=48,
                              decoder_sparse_step=2, mlp_only_layers=[0]),
    "qwen3_moe": small_config("qwen3_moe", head_dim=16, num_experts=4, num_experts_per_tok=2,
                              moe_intermediate_size=32, mlp_only_layers=[1]),
    "deepseek_v2": small_config("deepseek_v2", **{**_DEEPSEEK, "q_lora_rank": None},
                                topk_method="greedy"),
    "deepseek_v3": small_config("deepseek_v3", **_DEEPSEEK, num_nextn_predict_layers=1),
    "gpt_oss": small_config("gpt_oss", head_dim=16, num_local_experts=4, num_experts_per_tok=2),
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 64,
             "vocab_size": 128, **TOKENS},
    "gpt2-n-inner": {"model_type": "gpt2", "n_embd": 64, "n_layer": 3, "n_head": 4,
                     "n_positions": 64, "n_inner": 80, "vocab_size": 128, **TOKENS},
    "gpt_neox": small_config("gpt_neox", num_key_value_heads=None),
    "gpt_neox-no-attention-bias": small_config("gpt_neox", attention_bias=False),
    "gemma": small_config("gemma", head_dim=16),
    "gemma-default-head-dim-and-kv": {**{k: v for k, v in small_config("gemma").items()
                                         if k != "num_key_value_heads"},
                                      "num_attention_heads": 16},
    "gemma-attention-bias": small_config("gemma", head_dim=16, attention_bias=True),
    "gemma2": small_config("gemma2", head_dim=16),
    "gemma3_text": small_config("gemma3_text", head_dim=16),
    "gemma3_text-untied": small_config("gemma3_text", head_dim=16, tie_word_embeddings=False),
    "phi3": small_config("phi3"),
    "phi3-tied": small_config("phi3", tie_word_embeddings=True),
    "phimoe": small_config("phimoe", num_local_experts=4, num_experts_per_tok=2),
    "phimoe-biases": small_config("phimoe", num_local_experts=4, num_experts_per_tok=2,
                                  attention_bias=True, lm_head_bias=True),
    "olmo": small_config("olmo"),
    "olmo-tied-bias": small_config("olmo", tie_word_embeddings=True, attention_bias=True),
    "olmo2": small_config("olmo2"),
    "gptj": {"model_type": "gptj", "n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 64,
             "rotary_dim": 8, "vocab_size": 128, **TOKENS},
    "gptj-tied": {"model_type": "gptj", "n_embd": 64, "n_layer": 3, "n_head": 4,
                  "n_positions": 64, "rotary_dim": 8, "n_inner": 80, "vocab_size": 128,
                  "tie_word_embeddings": True, **TOKENS},
    "falcon-multi-query-parallel": {"model_type": "falcon", "hidden_size": 64,
                                    "num_hidden_layers": 3, "num_attention_heads": 4,
                                    "vocab_size": 128, **TOKENS},
    "falcon-mha-sequential-bias": {"model_type": "falcon", "hidden_size": 64,
                                   "num_hidden_layers": 3, "num_attention_heads": 4,
                                   "vocab_size": 128, "multi_query": False,
                                   "parallel_attn": False, "bias": True, **TOKENS},
    "falcon-new-architecture": {"model_type": "falcon", "hidden_size": 64,
                                "num_hidden_layers": 3, "num_attention_heads": 4,
                                "num_kv_heads": 2, "new_decoder_architecture": True,
                                "vocab_size": 128, **TOKENS},
    "falcon-new-one-norm-ffn": {"model_type": "falcon", "hidden_size": 64,
                                "num_hidden_layers": 3, "num_attention_heads": 4,
                                "num_kv_heads": 2, "new_decoder_architecture": True,
                                "num_ln_in_parallel_attn": 1, "ffn_hidden_size": 80,
                                "vocab_size": 128, **TOKENS},
    "falcon-alibi-untied": {"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 3,
                            "num_attention_heads": 4, "alibi": True,
                            "tie_word_embeddings": False, "vocab_size": 128, **TOKENS},
    "bloom": {"model_type": "bloom", "n_embed": 64, "n_layer": 3, "n_head": 4,
              "vocab_size": 128, **TOKENS},
    "starcoder2": small_config("starcoder2"),
    "starcoder2-no-bias-untied": small_config("starcoder2", use_bias=False,
                                              tie_word_embeddings=False),
    "cohere": small_config("cohere"),
    "cohere-qk-norm-bias": small_config("cohere", use_qk_norm=True, attention_bias=True),
    "granite": small_config("granite"),
    "granite-mlp-bias": small_config("granite", mlp_bias=True, tie_word_embeddings=True),
    "granitemoe": small_config("granitemoe", num_local_experts=4, num_experts_per_tok=2),
}


# --------------------------------------------------------------------------------------------
# realistic configs: the published config.json values (fields that matter)
# --------------------------------------------------------------------------------------------

REAL = {
    # https://huggingface.co/google/gemma-7b/blob/main/config.json
    "gemma-7b": {"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "head_dim": 256,
                 "hidden_act": "gelu", "hidden_size": 3072, "intermediate_size": 24576,
                 "max_position_embeddings": 8192, "num_attention_heads": 16,
                 "num_hidden_layers": 28, "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
                 "rope_theta": 10000.0, "vocab_size": 256000, "bos_token_id": 2,
                 "eos_token_id": 1, "pad_token_id": 0},
    # https://huggingface.co/google/gemma-2-9b/blob/main/config.json
    "gemma-2-9b": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
                   "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
                   "hidden_size": 3584, "intermediate_size": 14336,
                   "max_position_embeddings": 8192, "num_attention_heads": 16,
                   "num_hidden_layers": 42, "num_key_value_heads": 8, "query_pre_attn_scalar": 256,
                   "sliding_window": 4096, "final_logit_softcapping": 30.0,
                   "attn_logit_softcapping": 50.0, "vocab_size": 256000, "bos_token_id": 2,
                   "eos_token_id": 1, "pad_token_id": 0},
    # https://huggingface.co/google/gemma-3-1b-pt/blob/main/config.json
    "gemma-3-1b": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                   "head_dim": 256, "hidden_size": 1152, "intermediate_size": 6912,
                   "max_position_embeddings": 32768, "num_attention_heads": 4,
                   "num_hidden_layers": 26, "num_key_value_heads": 1,
                   "query_pre_attn_scalar": 256, "sliding_window": 512,
                   "sliding_window_pattern": 6, "rope_theta": 1000000,
                   "vocab_size": 262144, "bos_token_id": 2, "eos_token_id": 1,
                   "pad_token_id": 0},
    # https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json
    "phi-3-mini": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
                   "hidden_size": 3072, "intermediate_size": 8192,
                   "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
                   "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
                   "rms_norm_eps": 1e-05, "sliding_window": 2047, "tie_word_embeddings": False,
                   "vocab_size": 32064, "bos_token_id": 1, "eos_token_id": 32000,
                   "pad_token_id": 32000},
    # https://huggingface.co/microsoft/phi-4/blob/main/config.json (model_type phi3)
    "phi-4": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 5120,
              "intermediate_size": 17920, "max_position_embeddings": 16384,
              "original_max_position_embeddings": 16384, "num_attention_heads": 40,
              "num_hidden_layers": 40, "num_key_value_heads": 10, "rope_theta": 250000,
              "tie_word_embeddings": False, "vocab_size": 100352, "bos_token_id": 100257,
              "eos_token_id": 100257, "pad_token_id": 100257},
    # https://huggingface.co/microsoft/Phi-3.5-MoE-instruct/blob/main/config.json
    "phi-3.5-moe": {"architectures": ["PhiMoEForCausalLM"], "model_type": "phimoe",
                    "hidden_size": 4096, "intermediate_size": 6400,
                    "max_position_embeddings": 131072, "num_attention_heads": 32,
                    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 16,
                    "num_experts_per_tok": 2, "attention_bias": True, "lm_head_bias": True,
                    "tie_word_embeddings": False, "vocab_size": 32064, "bos_token_id": 1,
                    "eos_token_id": 32000},
    # https://huggingface.co/allenai/OLMo-2-1124-7B/blob/main/config.json
    "olmo-2-7b": {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2",
                  "hidden_size": 4096, "intermediate_size": 11008,
                  "max_position_embeddings": 4096, "num_attention_heads": 32,
                  "num_hidden_layers": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-06,
                  "rope_theta": 500000, "attention_bias": False, "tie_word_embeddings": False,
                  "vocab_size": 100352, "eos_token_id": 100257, "pad_token_id": 100277},
    # https://huggingface.co/allenai/OLMo-1B-hf/blob/main/config.json
    "olmo-1b": {"architectures": ["OlmoForCausalLM"], "model_type": "olmo", "hidden_size": 2048,
                "intermediate_size": 8192, "max_position_embeddings": 2048,
                "num_attention_heads": 16, "num_hidden_layers": 16, "num_key_value_heads": 16,
                "attention_bias": False, "clip_qkv": None, "tie_word_embeddings": True,
                "vocab_size": 50304, "eos_token_id": 50279, "pad_token_id": 1},
    # https://huggingface.co/EleutherAI/gpt-j-6b/blob/main/config.json
    "gpt-j-6b": {"architectures": ["GPTJForCausalLM"], "model_type": "gptj", "n_embd": 4096,
                 "n_head": 16, "n_layer": 28, "n_positions": 2048, "rotary_dim": 64,
                 "n_inner": None, "activation_function": "gelu_new",
                 "tie_word_embeddings": False, "vocab_size": 50400, "bos_token_id": 50256,
                 "eos_token_id": 50256},
    # https://huggingface.co/tiiuae/falcon-7b/blob/main/config.json
    "falcon-7b": {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "alibi": False,
                  "bias": False, "hidden_size": 4544, "multi_query": True,
                  "new_decoder_architecture": False, "num_attention_heads": 71,
                  "num_hidden_layers": 32, "parallel_attn": True, "vocab_size": 65024,
                  "bos_token_id": 11, "eos_token_id": 11},
    # https://huggingface.co/tiiuae/falcon-40b/blob/main/config.json
    "falcon-40b": {"architectures": ["FalconForCausalLM"], "model_type": "falcon",
                   "alibi": False, "bias": False, "hidden_size": 8192,
                   "new_decoder_architecture": True, "num_attention_heads": 128,
                   "num_hidden_layers": 60, "num_kv_heads": 8, "parallel_attn": True,
                   "vocab_size": 65024, "bos_token_id": 11, "eos_token_id": 11},
    # https://huggingface.co/bigscience/bloom-560m/blob/main/config.json
    "bloom-560m": {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "n_embed": 1024,
                   "n_head": 16, "n_layer": 24, "vocab_size": 250880,
                   "apply_residual_connection_post_layernorm": False,
                   "layer_norm_epsilon": 1e-05, "bos_token_id": 1, "eos_token_id": 2,
                   "pad_token_id": 3},
    # https://huggingface.co/bigcode/starcoder2-3b/blob/main/config.json
    "starcoder2-3b": {"architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2",
                      "hidden_size": 3072, "intermediate_size": 12288,
                      "max_position_embeddings": 16384, "num_attention_heads": 24,
                      "num_hidden_layers": 30, "num_key_value_heads": 2, "norm_epsilon": 1e-05,
                      "rope_theta": 999999.4420358813, "sliding_window": 4096, "use_bias": True,
                      "vocab_size": 49152, "bos_token_id": 0, "eos_token_id": 0},
    # https://huggingface.co/CohereForAI/c4ai-command-r-v01/blob/main/config.json
    "command-r": {"architectures": ["CohereForCausalLM"], "model_type": "cohere",
                  "hidden_size": 8192, "intermediate_size": 22528, "logit_scale": 0.0625,
                  "max_position_embeddings": 8192, "num_attention_heads": 64,
                  "num_hidden_layers": 40, "num_key_value_heads": 64, "layer_norm_eps": 1e-05,
                  "rope_theta": 8000000.0, "use_qk_norm": False, "vocab_size": 256000,
                  "bos_token_id": 5, "eos_token_id": 255001, "pad_token_id": 0},
    # https://huggingface.co/CohereForAI/c4ai-command-r-plus/blob/main/config.json (qk-norm)
    "command-r-plus": {"architectures": ["CohereForCausalLM"], "model_type": "cohere",
                       "hidden_size": 12288, "intermediate_size": 33792, "logit_scale": 0.8333,
                       "max_position_embeddings": 8192, "num_attention_heads": 96,
                       "num_hidden_layers": 64, "num_key_value_heads": 8,
                       "layer_norm_eps": 1e-05, "rope_theta": 75000000.0, "use_qk_norm": True,
                       "vocab_size": 256000, "bos_token_id": 5, "eos_token_id": 255001,
                       "pad_token_id": 0},
    # https://huggingface.co/ibm-granite/granite-3.0-2b-base/blob/main/config.json
    "granite-3.0-2b": {"architectures": ["GraniteForCausalLM"], "model_type": "granite",
                       "hidden_size": 2048, "intermediate_size": 8192,
                       "max_position_embeddings": 4096, "num_attention_heads": 32,
                       "num_hidden_layers": 40, "num_key_value_heads": 8,
                       "attention_bias": False, "mlp_bias": False, "embedding_multiplier": 12.0,
                       "attention_multiplier": 0.015625, "residual_multiplier": 0.22,
                       "logits_scaling": 8.0, "tie_word_embeddings": True, "vocab_size": 49155,
                       "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0},
    # https://huggingface.co/ibm-granite/granite-3.0-1b-a400m-base/blob/main/config.json
    "granite-3.0-1b-a400m": {"architectures": ["GraniteMoeForCausalLM"],
                             "model_type": "granitemoe", "hidden_size": 1024,
                             "intermediate_size": 512, "max_position_embeddings": 4096,
                             "num_attention_heads": 16, "num_hidden_layers": 24,
                             "num_key_value_heads": 8, "num_local_experts": 32,
                             "num_experts_per_tok": 8, "tie_word_embeddings": True,
                             "vocab_size": 49155, "bos_token_id": 0, "eos_token_id": 0,
                             "pad_token_id": 0},
    # https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json
    "deepseek-v2-lite": {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
                         "hidden_size": 2048, "intermediate_size": 10944,
                         "moe_intermediate_size": 1408, "num_hidden_layers": 27,
                         "num_attention_heads": 16, "num_key_value_heads": 16,
                         "n_shared_experts": 2, "n_routed_experts": 64, "kv_lora_rank": 512,
                         "q_lora_rank": None, "qk_rope_head_dim": 64, "v_head_dim": 128,
                         "qk_nope_head_dim": 128, "topk_method": "greedy", "n_group": 1,
                         "topk_group": 1, "num_experts_per_tok": 6, "moe_layer_freq": 1,
                         "first_k_dense_replace": 1, "vocab_size": 102400,
                         "max_position_embeddings": 163840, "tie_word_embeddings": False,
                         "bos_token_id": 100000, "eos_token_id": 100001},
}

# Published totals.  Each is the hub's safetensors parameter count of the release; the ones the
# model card rounds ("8.54B", "9.24B", ...) agree with it.
PUBLISHED = {
    "gemma-7b": 8_537_680_896,          # google/gemma-7b, safetensors (card: 8.54B)
    "gemma-2-9b": 9_241_705_984,        # google/gemma-2-9b, safetensors (card: 9.24B)
    "gemma-3-1b": 999_885_952,          # google/gemma-3-1b-pt, safetensors (card: 1B)
    "phi-3-mini": 3_821_079_552,        # microsoft/Phi-3-mini-4k-instruct, safetensors (3.8B)
    "phi-4": 14_659_507_200,            # microsoft/phi-4, safetensors (card: 14B / 14.7B)
    "phi-3.5-moe": 41_873_153_344,      # microsoft/Phi-3.5-MoE-instruct, safetensors (41.9B)
    "olmo-2-7b": 7_298_617_344,         # allenai/OLMo-2-1124-7B, safetensors (7.3B)
    "olmo-1b": 1_176_764_416,           # allenai/OLMo-1B-hf, safetensors (1.18B)
    "bloom-560m": 559_214_592,          # bigscience/bloom-560m, model card "559,214,592 parameters"
    "command-r": 34_980_831_232,        # CohereForAI/c4ai-command-r-v01, safetensors (35B)
    "granite-3.0-2b": 2_533_531_648,    # ibm-granite/granite-3.0-2b-base, safetensors (2.53B)
    "falcon-7b": 6_921_720_704,         # tiiuae/falcon-7b, safetensors (card: 7B)
    "starcoder2-3b": 3_030_371_328,     # bigcode/starcoder2-3b, safetensors (3.03B)
    "command-r-plus": 103_810_674_688,  # CohereForAI/c4ai-command-r-plus, safetensors (104B)
    "deepseek-v2-lite": 15_706_484_224,  # deepseek-ai/DeepSeek-V2-Lite, safetensors (15.7B)
}


def test_every_accepted_type_has_a_small_config():
    # the newer types (issue 32) have theirs in tests/test_hf_newer_types.py,
    # tests/test_hf_more_types.py and tests/test_hf_layer_kinds.py, the hybrid Mamba types in
    # tests/test_hf_hybrid.py, zamba and zamba2 in tests/test_hf_zamba.py, OPT, GPT-Neo,
    # CodeGen, MPT and Persimmon in tests/test_hf_classic_types.py, Command A MoE, AFMoE,
    # MiniCPM3 and Solar Open in tests/test_hf_moe_types.py, Granite Swash and IQuest-Coder in
    # tests/test_hf_swa_types.py, Jais 2, nanochat and Youtu-LLM in tests/test_hf_dense_types.py
    from test_hf_classic_types import SMALL as CLASSIC_MORE
    from test_hf_moe_types import SMALL as MOE_MORE
    from test_hf_swa_types import SMALL as SWA
    from test_hf_dense_types import SMALL as DENSE_MORE
    from test_hf_layer_kinds import SMALL as DBRX_DSA
    from test_hf_zamba import SMALL as ZAMBA
    from test_hf_hybrid import SMALL as HYBRID
    from test_hf_more_types import SMALL as MORE
    from test_hf_newer_types import SMALL as NEWER
    from test_hf_gemma4 import SMALL as GEMMA4
    from test_hf_recent_types import SMALL as RECENT
    from test_hf_types_more import SMALL as TYPES_MORE
    from test_hf_wrapper_types import SMALL as WRAPPERS

    assert ({cfg["model_type"] for cfg in {**SMALL, **NEWER, **HYBRID, **MORE,
                                           **DBRX_DSA, **ZAMBA, **CLASSIC_MORE,
                                           **MOE_MORE, **SWA, **DENSE_MORE,
                                           **GEMMA4, **RECENT, **TYPES_MORE,
                                           **WRAPPERS}.values()}
            == set(HF_MODEL_TYPES))


@pytest.mark.parametrize("case", sorted(PUBLISHED))
def test_real_configs_published_totals(tmp_path, case):
    assert parameter_count(from_hf_config(write_config(tmp_path, REAL[case]))) == PUBLISHED[case]


@pytest.mark.torch
@pytest.mark.parametrize("case", sorted(REAL))
def test_real_configs_match_transformers(tmp_path, case):
    path = write_config(tmp_path, REAL[case])
    assert parameter_count(from_hf_config(path)) == transformers_count(path)


def test_hand_counts_of_the_new_structures(tmp_path):
    # Independent hand arithmetic from the modules each modeling file builds (h=64, L=3, a=4,
    # g=2, d_h=16, f=96, V=128):
    h, L, V, f = 64, 3, 128, 96
    attn = 2 * h * 64 + 2 * h * 32                       # q, o: h x a d_h; k, v: h x g d_h
    # GPT-J: one LayerNorm (2h), no attention bias, 4h MLP with biases, lm_head with bias
    gptj = V * h + L * (2 * h + 4 * h * h + 2 * h * 4 * h + 4 * h + h) + 2 * h + V * h + V
    assert parameter_count(from_hf_config(write_config(tmp_path, SMALL["gptj"], "j"))) == gptj
    # Gemma 2: four RMSNorms per layer, tied
    gemma2 = V * h + L * (attn + 3 * h * f + 4 * h) + h
    assert parameter_count(from_hf_config(write_config(tmp_path, SMALL["gemma2"], "g"))) == gemma2
    # OLMo 2: q norm over a d_h = 64, k norm over g d_h = 32, two norms, untied
    olmo2 = 2 * V * h + L * (attn + 64 + 32 + 3 * h * f + 2 * h) + h
    assert parameter_count(from_hf_config(write_config(tmp_path, SMALL["olmo2"], "o"))) == olmo2
    # OLMo: non-parametric LayerNorms, no norm parameters at all
    olmo = 2 * V * h + L * (attn + 3 * h * f)
    assert parameter_count(from_hf_config(write_config(tmp_path, SMALL["olmo"], "o1"))) == olmo
    # BLOOM: embedding LayerNorm, fused qkv 3h and dense with bias, 4h MLP with bias, 2 LNs
    bloom = V * h + 2 * h + L * (3 * h * h + 3 * h + h * h + h + 8 * h * h + 5 * h + 4 * h) + 2 * h
    assert parameter_count(from_hf_config(write_config(tmp_path, SMALL["bloom"], "b"))) == bloom
    # Cohere with qk-norm: one bias-free LayerNorm per layer, q/k norms (a + g) d_h, q, k, v, o
    # biases (a d_h + 2 g d_h + h), tied
    cohere = V * h + L * (attn + (64 + 2 * 32 + h) + 4 * 16 + 2 * 16 + 3 * h * f + h) + h
    path = write_config(tmp_path, SMALL["cohere-qk-norm-bias"], "c")
    assert parameter_count(from_hf_config(path)) == cohere
    # Falcon-7B style: one KV head (qkv h + 2 d_h), one LayerNorm (parallel), no biases, tied
    falcon = V * h + L * ((h + 2 * 16) * h + h * h + 8 * h * h + 2 * h) + 2 * h
    path = write_config(tmp_path, SMALL["falcon-multi-query-parallel"], "f")
    assert parameter_count(from_hf_config(path)) == falcon


# --------------------------------------------------------------------------------------------
# DeepSeek-V3: what transformers builds, said in notes
# --------------------------------------------------------------------------------------------

def test_deepseek_v3_mtp_and_router_buffer_are_notes(tmp_path):
    arch = from_hf_config(write_config(tmp_path, SMALL["deepseek_v3"]))
    assert arch.mtp_num_layers == 0 and arch.moe_router_bias is False
    notes = arch.extra["notes"]
    assert any(n.startswith("num_nextn_predict_layers=1 not counted") for n in notes)
    assert any("e_score_correction_bias" in n for n in notes)
    assert all("\n" not in n for n in notes)
    # without num_nextn_predict_layers there is nothing to say about MTP
    cfg = {k: v for k, v in SMALL["deepseek_v3"].items() if k != "num_nextn_predict_layers"}
    arch2 = from_hf_config(write_config(tmp_path, cfg, "n"))
    assert not any("num_nextn" in n for n in arch2.extra["notes"])
    # a plain llama config carries no notes
    assert from_hf_config(write_config(tmp_path, SMALL["llama"], "l")).extra["notes"] == ()


# --------------------------------------------------------------------------------------------
# refusals
# --------------------------------------------------------------------------------------------

def test_unknown_model_type_lists_the_accepted(tmp_path):
    with pytest.raises(UnknownNameError) as err:
        from_hf_config(write_config(tmp_path, small_config("bert")))
    msg = str(err.value)
    assert "\n" not in msg and "bert" in msg
    for mtype in HF_MODEL_TYPES:
        assert mtype in msg
    # the vision-language gemma3 is read through its text_config (tests/test_hf_newer_types.py)
    arch = from_hf_config(write_config(tmp_path, {"model_type": "gemma3", "text_config": {}}, "g3"))
    assert arch.extra["hf_model_type"] == "gemma3"


@pytest.mark.parametrize("field,value,limit", [
    ("num_hidden_layers", 10**8, "num_layers"),
    ("num_hidden_layers", 10**10, "num_layers"),
    ("num_hidden_layers", 10**300, "num_layers"),
    ("hidden_size", 2**24 + 64, "hidden_size"),
    ("num_attention_heads", 2**20 + 4, "num_attention_heads"),
    ("vocab_size", 2**31 + 1, "vocab_size"),
    ("max_position_embeddings", 2**31 + 1, "max_position_embeddings"),
    ("intermediate_size", 2**30 + 1, "ffn_hidden_size"),
])
def test_sizes_over_the_limits_refused_at_once(tmp_path, field, value, limit):
    for mtype, extra in (("llama", {}), ("qwen3_moe", {"num_experts": 8, "num_experts_per_tok": 2,
                                                       "moe_intermediate_size": 32})):
        path = write_config(tmp_path, {**small_config(mtype), **extra, field: value}, mtype)
        start = time.perf_counter()
        with pytest.raises(InvalidValueError) as err:
            from_hf_config(path)
        assert time.perf_counter() - start < 2.0
        msg = str(err.value)
        lim = limit_of(FIELD_LIMITS[limit])
        if len(str(value)) > 60:   # memsym.limits.MAX_NUMBER_CHARS: refused on the text, unparsed
            assert f"a number of {len(str(value))} characters" in msg and "\n" not in msg
        else:
            assert lim.shown in msg and "\n" not in msg
        assert len(msg) < 300                      # a 301-digit value is described, not echoed


def test_experts_over_the_limit(tmp_path):
    cfg = small_config("mixtral", num_local_experts=2**20 + 1, num_experts_per_tok=2)
    with pytest.raises(InvalidValueError, match=r"limit of 2\^20 experts"):
        from_hf_config(write_config(tmp_path, cfg))


def test_a_hostile_name_is_stored_escaped(tmp_path):
    evil = "x\n\x1b[2J\x1b[1;32mllama2-7b: fits\x1b[0m\r\u202e" + "y" * 500
    arch = from_hf_config(write_config(tmp_path, {**SMALL["llama"], "_name_or_path": evil}))
    assert arch.name.isprintable() and len(arch.name) <= 100
    assert "\\n" in arch.name and "\\x1b" in arch.name
    with pytest.raises(InvalidValueError, match="'_name_or_path' must be a string"):
        from_hf_config(write_config(tmp_path, {**SMALL["llama"], "_name_or_path": ["a"]}, "n"))


@pytest.mark.parametrize("change,match", [
    ({"model_type": 7}, "'model_type' must be a string"),
    ({"head_dim": "16"}, "'head_dim' must be a whole number"),
    ({"num_key_value_heads": 2.0}, "'num_key_value_heads' must be a whole number"),
    ({"attention_bias": 1}, "'attention_bias' must be true or false"),
    ({"vocab_size": [128]}, "'vocab_size' must be a whole number"),
    ({"num_hidden_layers": 0}, "'num_hidden_layers' must be > 0"),
])
def test_malformed_fields_one_line(tmp_path, change, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, {**SMALL["llama"], **change}))
    assert "\n" not in str(err.value)


def test_malformed_moe_and_alias_fields(tmp_path):
    with pytest.raises(InvalidValueError, match="'mlp_only_layers' must be a list"):
        from_hf_config(write_config(tmp_path, {**SMALL["qwen3_moe"], "mlp_only_layers": "0"}))
    # two spellings of one size (transformers' attribute_map) that disagree
    cfg = {**SMALL["gpt2"], "hidden_size": 128}
    with pytest.raises(InvalidValueError, match="'n_embd' and 'hidden_size'"):
        from_hf_config(write_config(tmp_path, cfg, "a"))
    # agreeing spellings are fine
    assert from_hf_config(write_config(tmp_path, {**SMALL["gpt2"], "hidden_size": 64}, "b")) \
        .hidden_size == 64


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO")
def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(InvalidValueError, match="not a regular file"):
        from_hf_config(fifo)


# --------------------------------------------------------------------------------------------
# the new structures through the pipeline stages, and MTP when the framework builds it
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["gptj", "gptj-tied", "bloom", "gemma3_text", "olmo",
                                  "cohere-qk-norm-bias", "phimoe-biases", "falcon-new-one-norm-ffn"])
def test_stages_add_up_to_the_count(tmp_path, case):
    from memsym.model import stage_parameters
    arch = from_hf_config(write_config(tmp_path, SMALL[case]))
    total = parameter_count(arch)
    one = stage_parameters(arch, t=1, p=1, stage=0, pad_vocab=False)
    assert one.total == total
    assert_stages_add_up(arch, 3)       # p = 3: one layer each


def test_deepseek_v3_mtp_counted_when_the_framework_builds_it(tmp_path):
    # The reader counts what transformers builds; a Megatron job with --mtp-num-layers 1 (and the
    # expert bias it trains, --moe-router-enable-expert-bias) is the preset's model again.
    from dataclasses import replace
    from memsym.model import preset
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
           "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
           "num_hidden_layers": 61, "num_nextn_predict_layers": 1, "num_attention_heads": 128,
           "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
           "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "num_experts_per_tok": 8,
           "first_k_dense_replace": 3, "vocab_size": 129280, "max_position_embeddings": 163840,
           "tie_word_embeddings": False}   # deepseek-ai/DeepSeek-V3 config.json
    arch = from_hf_config(write_config(tmp_path, cfg))
    megatron = replace(arch, mtp_num_layers=1, moe_router_bias=True)
    assert parameter_count(megatron) == parameter_count(preset("deepseek-v3"))
    assert parameter_count(megatron, mtp=False) == 671_026_419_200   # DeepSeek-V3 README main model


# --------------------------------------------------------------------------------------------
# fuzz: any JSON object is an Architecture or one clear line, quickly
# --------------------------------------------------------------------------------------------

def test_fuzzed_config_contents(tmp_path):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    from memsym.errors import MemsymError

    keys = sorted({k for cfg in SMALL.values() for k in cfg} | {"_name_or_path", "text_config"})
    values = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2, max_value=10**12),
                       st.sampled_from([10**8, 10**10, 10**300, 2**31 + 1, 0, 1, 2, 4, 64]),
                       st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
                       st.lists(st.integers(min_value=0, max_value=4), max_size=4))
    types = st.sampled_from(list(HF_MODEL_TYPES) + ["bert", "", "gemma3"])

    @hypothesis.settings(max_examples=150, deadline=None, database=None)
    @hypothesis.given(mtype=types, base=st.sampled_from(sorted(SMALL)),
                      changes=st.dictionaries(st.sampled_from(keys), values, max_size=4))
    def check(mtype, base, changes):
        cfg = {**SMALL[base], "model_type": mtype, **changes}
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        start = time.perf_counter()
        try:
            arch = from_hf_config(path)
        except MemsymError as exc:
            msg = str(exc)
            assert msg and "\n" not in msg and len(msg) < 2000
        else:
            assert parameter_count(arch) > 0 and arch.name.isprintable()
        assert time.perf_counter() - start < 5.0

    check()


def test_v_placement_ranks_hold_what_torchtitan_puts_there(tmp_path):
    # torchtitan's V schedules (ZBVZeroBubble, DualPipeV) split 6 layers + embedding + output
    # into 4 stages of 2 units (generate_llm_fqn_per_model_part: [1, 2, 2, 1] layers) and put
    # stages r and 3 - r on rank r: rank 0 holds the embedding, layers 0 and 5, the final
    # norm and lm_head; rank 1 layers 1-4.  transformers' own modules (meta device) give each
    # rank's parameter count; memsym's V job holds the same on each rank
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoConfig, AutoModelForCausalLM

    from memsym.job import job
    from memsym.model import stage_parameters
    from memsym.training import output_stage

    path = write_config(tmp_path, small_config("llama", num_hidden_layers=6))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(path.parent)))

    def count(*modules):
        return sum(q.numel() for mod in modules for q in mod.parameters())

    inner = model.model
    want = [count(inner.embed_tokens, inner.layers[0], inner.layers[5], inner.norm,
                  model.lm_head),
            count(*inner.layers[1:5])]
    j = job(str(path), p=2, v=2, d=1, seq_length=64, num_microbatches=4,
            framework="torchtitan", stage_placement="v")
    lay = j.layout
    assert output_stage(lay, j.training) == 0
    got = [stage_parameters(j.model, 1, 2, r, first_stage_layers=lay.first_stage_layers,
                            last_stage_layers=lay.last_stage_layers, pad_vocab=False,
                            output_stage=output_stage(lay, j.training)).total
           for r in (0, 1)]
    assert got == want


# --------------------------------------------------------------------------------------------
# dropout: the probabilities each transformers model applies (DeepSpeed runs that model)
# --------------------------------------------------------------------------------------------

@pytest.mark.torch
@pytest.mark.parametrize("mtype", sorted(HF_MODEL_TYPES))
def test_dropout_fields_are_the_ones_the_modeling_code_reads(mtype):
    # oracle: transformers' own sources and config defaults (not memsym's table)
    import importlib
    import inspect
    import re

    pytest.importorskip("transformers")
    from transformers import AutoConfig

    from memsym.model.hf_config import _DROPOUT, _TEXT_CONFIG

    # a vision-language type is read through its text_config: the text type's fields; a type
    # transformers reads with another's config class (gpt-sw3: GPT2Config) as that type
    mtype = _TEXT_CONFIG[mtype][0] if mtype in _TEXT_CONFIG else mtype
    if mtype not in _DROPOUT:
        mtype = AutoConfig.for_model(mtype).model_type
    # EXAONE 3.x and InternLM3 configs build transformers' LlamaForCausalLM
    pkg = {"gemma3_text": "gemma3", "llama4_text": "llama4", "exaone": "llama",
           "internlm3": "llama", "iquestcoder": "llama", "qwen3_5_text": "qwen3_5",
           "qwen3_5_moe_text": "qwen3_5_moe",
           # Param2 and Sarvam configs build GLM-4.5's and DeepSeek-V3's models
           "param2moe": "glm4_moe", "sarvam_moe": "glm4_moe", "sarvam_mla": "deepseek_v3",
           "apertus1p5_text": "apertus1p5", "gemma4_text": "gemma4",
           "aria_text": "aria", "cohere_compass_text": "cohere_compass",
           "gemma4_unified_text": "gemma4_unified",
           "emu3_text_model": "emu3"}.get(mtype, mtype)
    src = inspect.getsource(importlib.import_module(f"transformers.models.{pkg}.modeling_{pkg}"))
    read = set(re.findall(r"config\.([a-z_]*(?:dropout|pdrop)[a-z_]*)", src))
    # the classification / summary heads' dropouts are not the causal LM's (gpt2 falls back to
    # hidden_dropout only for its token-classification head's classifier); Llama 4's
    # projector_dropout is its vision projector's
    read = {k for k in read if not k.startswith(("classifier", "summary", "projector"))}
    if mtype in ("gpt2", "gpt_bigcode", "mpt"):  # their token-classification heads alike
        read.discard("hidden_dropout")
    if mtype == "apertus1p5_text":  # Apertus1p5VisionTokenizerResnetBlock's (:98, :114)
        read.discard("dropout")
    assert set(_DROPOUT[mtype]) == read
    defaults = AutoConfig.for_model(mtype).to_dict()
    if mtype in ("dbrx", "mpt"):
        # DbrxAttention / MptAttention read attn_config.attn_pdrop (memsym reads the nested field)
        defaults.update(attn_pdrop=defaults["attn_config"]["attn_pdrop"])
    assert {k: defaults[k] for k in read} == _DROPOUT[mtype]


@pytest.mark.torch
@pytest.mark.parametrize("case", one_case_per_type(SMALL))
@pytest.mark.parametrize("p", [None, 0.1])
def test_deepspeed_dropout_follows_the_transformers_model(tmp_path, case, p):
    # oracle: transformers' model in training mode keeps a mask exactly when memsym's DeepSpeed
    # job counts dropout; at the config defaults (p None) and with every field memsym reads set
    from memsym.job import job
    from memsym.model.hf_config import _DROPOUT

    cfg = dict(SMALL[case])
    if p is not None:
        cfg.update({k: p for k in _DROPOUT[cfg["model_type"]]})
    path = write_config(tmp_path, cfg)
    j = job(from_hf_config(path), framework="deepspeed", sharding="zero1", d=1,
            seq_length=8, micro_batch_size=1, global_batch_size=1)
    assert j.training.dropout == (dropout_masks(path) > 0)
    assert any("DeepSpeed runs the transformers model" in n for n in j.notes)


def test_deepspeed_dropout_default_for_a_preset_is_said():
    from memsym.job import job

    # a preset is its published config.json: Llama's class applies attention_dropout alone,
    # 0.0 (transformers' LlamaConfig default, which Llama 2's config.json keeps), so no masks
    j = job("llama2-7b", framework="deepspeed", d=8, seq_length=4096, micro_batch_size=1,
            global_batch_size=8)
    assert j.training.dropout is False
    assert any("DeepSpeed runs the transformers model, whose config.json sets "
               "attention_dropout 0" in n for n in j.notes)
    transformers = pytest.importorskip("transformers")
    assert transformers.LlamaConfig().attention_dropout == 0.0
    # GPT-3 has no transformers class: Megatron-LM's 0.1 dropouts, said
    j = job("gpt3-175b", framework="deepspeed", d=8, seq_length=2048, micro_batch_size=1,
            global_batch_size=8)
    assert j.training.dropout
    assert any("DeepSpeed runs the model's own code" in n for n in j.notes)
    # Megatron builds its own model: its --hidden-dropout / --attention-dropout defaults hold
    assert not any("DeepSpeed" in n for n in job("llama2-7b", d=8).notes)


def test_dropout_probability_refused_out_of_range(tmp_path):
    with pytest.raises(InvalidValueError, match="'attention_dropout' must be a probability"):
        from_hf_config(write_config(tmp_path, small_config("llama", attention_dropout=1.5)))
    with pytest.raises(InvalidValueError, match="'resid_pdrop' must be a probability"):
        from_hf_config(write_config(tmp_path, small_config("gpt2", resid_pdrop=True)))
