"""More of the newer Hugging Face model types (issue 32, item 4) against transformers' own models.

Same oracle and helpers as ``tests/test_hf_newer_types.py``: transformers (5.25.0 when checked)
builds ``AutoModelForCausalLM.from_config`` of the very file memsym reads, on the meta device, and
``sum(p.numel())`` of its parameters (a tied weight once) must equal memsym's count.  Small configs
keep every structural switch of the published files with small sizes; one full-size config per
family carries the values of its published config.json (hub page cited) and is checked against
the total the model card states (rounded as the card rounds it) or, where the card gives no total,
against a hand count written out from the modules the modeling file builds.  No network: every
config is written here.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError, UnknownNameError
from memsym.model import active_parameter_count, from_hf_config, parameter_count, parameter_counts
from memsym.model.hf_config import HF_MODEL_TYPES

from hf_oracle import (TOKENS, assert_masks_follow_dropout, assert_stages_add_up, billions,
                       fuzz_configs, language_model_count, one_case_per_type, small_config,
                       write_config)
from test_hf_hybrid import SMALL as HYBRID_SMALL
from test_hf_newer_types import NEWER_TYPES

# the model types this file covers
MORE_TYPES = {"olmo3", "cohere2", "ministral", "ministral3", "helium", "glm", "cwm", "vaultgemma",
              "mamba", "falcon_mamba", "mamba2", "hunyuan_v1_moe", "flex_olmo", "minimax_m2",
              "granitemoeshared", "nemotron", "phi", "gpt_bigcode", "stablelm", "glm4_moe_lite",
              "exaone", "internlm3"}

_MLA = dict(q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
            v_head_dim=8, n_routed_experts=4, n_shared_experts=1, moe_intermediate_size=16,
            num_experts_per_tok=2, n_group=1, topk_group=1, num_key_value_heads=4)

_BIGCODE = {"model_type": "gpt_bigcode", "n_embd": 64, "n_layer": 3, "n_head": 4,
            "n_positions": 64, "vocab_size": 128, **TOKENS}

_SSM = {"hidden_size": 64, "num_hidden_layers": 3, "vocab_size": 128, **TOKENS}

SMALL = {
    # OLMo 3: OLMo 2's q/k norms over all heads and post-norms; sliding-window layers
    "olmo3": small_config("olmo3", layer_types=["sliding_attention", "sliding_attention",
                                                "full_attention"], sliding_window=16),
    "olmo3-bias-tied-head-dim": small_config("olmo3", attention_bias=True, tie_word_embeddings=True,
                                             head_dim=8),
    # Command R7B: one LayerNorm (no bias) feeding attention and MLP in parallel, tied
    "cohere2": small_config("cohere2"),
    "cohere2-bias-head-dim-untied": small_config("cohere2", attention_bias=True, head_dim=32,
                                                 tie_word_embeddings=False),
    "ministral": small_config("ministral", head_dim=16),
    "ministral-head-dim-tied": small_config("ministral", head_dim=32, tie_word_embeddings=True),
    "ministral3": small_config("ministral3"),
    "ministral3-head-dim-tied": small_config("ministral3", head_dim=16, tie_word_embeddings=True),
    # Helium: q, k, v biased by attention_bias, o_proj never; MLP by mlp_bias
    "helium": small_config("helium", head_dim=16),
    "helium-biases": small_config("helium", head_dim=16, attention_bias=True, mlp_bias=True),
    # GLM (GLM-4-9B-*-hf): fused gate_up, q/k/v bias by default
    "glm": small_config("glm", head_dim=16),
    "glm-no-bias-head-dim": small_config("glm", attention_bias=False),
    "cwm": small_config("cwm"),
    "cwm-mlp-bias-head-dim": small_config("cwm", mlp_bias=True, head_dim=8),
    # VaultGemma: Gemma's MLP with two norms per layer (no post-norms, no q/k norms), tied
    "vaultgemma": small_config("vaultgemma", head_dim=16),
    "vaultgemma-bias-untied": small_config("vaultgemma", attention_bias=True,
                                           tie_word_embeddings=False),
    # Mamba (Mamba-1 mixers only): the defaults (dt_rank "auto", tied), and every switch: biases,
    # no conv bias, explicit dt_rank, a file's intermediate_size over expand * h
    "mamba": {"model_type": "mamba", **_SSM},
    "mamba-switches": {"model_type": "mamba", **_SSM, "use_bias": True, "use_conv_bias": False,
                       "time_step_rank": 8, "state_size": 8, "conv_kernel": 3, "expand": 3,
                       "intermediate_size": 96, "tie_word_embeddings": False},
    # Falcon-Mamba: Mamba's modules plus weightless dt, B, C norms
    "falcon_mamba": {"model_type": "falcon_mamba", **_SSM, "expand": 16,
                     "intermediate_size": 128},
    "falcon_mamba-bias-untied": {"model_type": "falcon_mamba", **_SSM, "use_bias": True,
                                 "time_step_rank": 6, "tie_word_embeddings": False},
    # Mamba-2: grouped B/C, gated norm; biases, no conv bias, tied
    "mamba2": {"model_type": "mamba2", **_SSM, "num_heads": 8, "head_dim": 16, "n_groups": 2,
               "state_size": 16},
    "mamba2-switches": {"model_type": "mamba2", **_SSM, "num_heads": 4, "head_dim": 32,
                        "n_groups": 1, "state_size": 8, "use_bias": True,
                        "use_conv_bias": False, "conv_kernel": 3, "tie_word_embeddings": True},
    # HunYuan MoE: router, experts and one shared MLP in every layer, q/k norms of head_dim
    "hunyuan_v1_moe": small_config("hunyuan_v1_moe", head_dim=16, num_experts=4, moe_topk=2),
    "hunyuan_v1_moe-one-expert-bias-tied": small_config(
        "hunyuan_v1_moe", head_dim=32, num_experts=1, attention_bias=True,
        tie_word_embeddings=True),
    # FlexOlmo: OLMo 2's norms with an MoE block (no shared expert) in every layer
    "flex_olmo": small_config("flex_olmo", num_experts=4, num_experts_per_tok=2),
    "flex_olmo-bias-head-dim-tied": small_config("flex_olmo", num_experts=4, num_experts_per_tok=2,
                                                 attention_bias=True, head_dim=8,
                                                 tie_word_embeddings=True),
    # MiniMax-M2: q/k norms over all heads, MoE in every layer, attention never biased
    "minimax_m2": small_config("minimax_m2", head_dim=16, num_local_experts=4,
                               num_experts_per_tok=2),
    "minimax_m2-bias-ignored-tied": small_config("minimax_m2", head_dim=8, num_local_experts=4,
                                                 num_experts_per_tok=2, attention_bias=True,
                                                 tie_word_embeddings=True),
    # Granite MoE with a shared MLP (or none at shared_intermediate_size 0)
    "granitemoeshared": small_config("granitemoeshared", num_local_experts=4,
                                     shared_intermediate_size=48),
    "granitemoeshared-no-shared-bias": small_config("granitemoeshared", num_local_experts=4,
                                                    shared_intermediate_size=0,
                                                    attention_bias=True),
    # Nemotron (Nemotron-4, Minitron): LayerNorm1P with bias, relu2 MLP without gate
    "nemotron": small_config("nemotron"),
    "nemotron-biases-head-dim-tied": small_config("nemotron", head_dim=32, attention_bias=True,
                                                  mlp_bias=True, tie_word_embeddings=True),
    # Phi-1/1.5/2: one LayerNorm, parallel attention and MLP, every projection and lm_head
    # biased; q/k LayerNorms of h / a; GQA and a head_dim of its own
    "phi": small_config("phi"),
    "phi-qk-layernorm-tied": small_config("phi", qk_layernorm=True, head_dim=16,
                                          tie_word_embeddings=True),
    "phi-mha-head-dim": small_config("phi", head_dim=8, num_key_value_heads=4),
    # GPTBigCode (StarCoder): GPT-2 with one KV head (multi_query), or multi-head attention
    "gpt_bigcode": _BIGCODE,
    "gpt_bigcode-mha-n-inner-untied": {**_BIGCODE, "multi_query": False, "n_inner": 80,
                                       "tie_word_embeddings": False},
    # StableLM: LayerNorms with bias, q/k/v bias switch, parallel residual, head_dim = h / a
    "stablelm": small_config("stablelm"),
    "stablelm-parallel-qkv-bias-tied": small_config("stablelm", use_qkv_bias=True,
                                                    use_parallel_residual=True,
                                                    tie_word_embeddings=True, head_dim=32),
    # GLM-4.7-Flash: DeepSeek-V3's multi-latent attention, layer 0 dense then MoE with a shared
    # expert; or the layers mlp_layer_types lists, no q LoRA, two shared experts, MTP, tied
    "glm4_moe_lite": small_config("glm4_moe_lite", **_MLA),
    "glm4_moe_lite-layer-types-no-q-lora": small_config(
        "glm4_moe_lite", **{**_MLA, "q_lora_rank": None, "n_shared_experts": 2},
        mlp_layer_types=["sparse", "dense", "sparse"], tie_word_embeddings=True,
        num_nextn_predict_layers=1, first_k_dense_replace=2),
    # EXAONE 3.x and InternLM3: LlamaForCausalLM of their config classes, with their aliases
    # (num_layers; qkv_bias, bias)
    "exaone": small_config("exaone"),
    "exaone-num-layers-biases": {**{k: v for k, v in small_config("exaone").items()
                                    if k != "num_hidden_layers"},
                                 "num_layers": 3, "attention_bias": True, "mlp_bias": True,
                                 "head_dim": 8, "activation_function": "silu",
                                 "layer_norm_epsilon": 1e-5},
    "internlm3": small_config("internlm3"),
    "internlm3-biases-tied": small_config("internlm3", qkv_bias=True, bias=True, head_dim=16,
                                          tie_word_embeddings=True),
}


def test_every_type_here_has_a_small_config():
    assert {cfg["model_type"] for cfg in SMALL.values()} == MORE_TYPES
    assert MORE_TYPES <= set(HF_MODEL_TYPES)
    assert not MORE_TYPES & NEWER_TYPES


def test_the_newer_types_accepted_reach_the_issue_count():
    # issue 32: 37 newer config.json model types count exactly as transformers builds them
    # (this file's, tests/test_hf_newer_types.py's and the hybrids of tests/test_hf_hybrid.py)
    hybrid = {cfg["model_type"] for cfg in HYBRID_SMALL.values()}
    newer = MORE_TYPES | NEWER_TYPES | hybrid
    assert newer <= set(HF_MODEL_TYPES)
    assert len(newer) >= 37


# --------------------------------------------------------------------------------------------
# full-size configs: the published config.json values (the fields that matter)
# --------------------------------------------------------------------------------------------

# Checked against copies of the published files found with the code search (December 2026; no
# network to the hub itself). "Verified" below means every field here was read in such a copy;
# otherwise the comment names the fields that were not checked.
REAL = {
    # https://huggingface.co/allenai/Olmo-3-1025-7B/blob/main/config.json
    # values not checked against the hub file: all but vocab_size 100278, pad 100277 and eos
    # 100257, which are the dolma2 tokenizer's (allenai/OLMo-core replay-manifest docstring)
    "olmo-3-7b": {"architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3",
                  "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 32, "attention_bias": False,
                  "sliding_window": 4096,
                  "layer_types": 8 * (3 * ["sliding_attention"] + ["full_attention"]),
                  "max_position_embeddings": 65536, "tie_word_embeddings": False,
                  "vocab_size": 100278, "pad_token_id": 100277, "eos_token_id": 100257},
    # https://huggingface.co/CohereLabs/c4ai-command-r7b-12-2024/blob/main/config.json
    # checked: heads 32, kv heads 8, layers 32, head dim 128, sliding_window 4096, pattern 4,
    # max_position_embeddings 132096 (a public KV-cache catalog quoting .../raw/main/config.json);
    # values not checked against the hub file: hidden/intermediate size, logit_scale, vocab, tie,
    # token ids
    "command-r7b": {"architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2",
                    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "attention_bias": False,
                    "sliding_window": 4096, "sliding_window_pattern": 4, "logit_scale": 0.25,
                    "max_position_embeddings": 132096, "tie_word_embeddings": True,
                    "vocab_size": 256000, "pad_token_id": 0, "bos_token_id": 5,
                    "eos_token_id": 255001},
    # https://huggingface.co/mistralai/Ministral-8B-Instruct-2410 (config.json and the card's
    # architecture table). Corrected: model_type was "ministral"; the 2410 file still says
    # "mistral" (a public eval script's load_model: "The 2410 checkpoint still advertises
    # Mistral, which ignores layer_types"), so transformers builds a MistralForCausalLM; the
    # count is the same. Sizes as the card's table (36 layers, 32 heads, dim 4096, 8 KV heads,
    # hidden 12288, head dim 128, vocab 131072); values not checked against the hub file:
    # its layer_types list (not written here), sliding_window, max_position_embeddings, token ids
    "ministral-8b": {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                     "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                     "sliding_window": 32768, "max_position_embeddings": 32768,
                     "tie_word_embeddings": False, "vocab_size": 131072, "bos_token_id": 1,
                     "eos_token_id": 2},
    # https://huggingface.co/kyutai/helium-1-preview-2b/blob/main/config.json
    # verified against mlx-community/helium-1-preview-2b-4bit's copy (quoted field for field in
    # a public Rust test): vocab_size 48000 and every other field here, except pad_token_id 3,
    # which that copy does not carry (not checked)
    "helium-1-2b": {"architectures": ["HeliumForCausalLM"], "model_type": "helium",
                    "hidden_size": 2560, "intermediate_size": 7040, "num_hidden_layers": 24,
                    "num_attention_heads": 20, "num_key_value_heads": 20, "head_dim": 128,
                    "attention_bias": False, "mlp_bias": False, "max_position_embeddings": 4096,
                    "tie_word_embeddings": False, "vocab_size": 48000, "pad_token_id": 3,
                    "bos_token_id": 1, "eos_token_id": 2},
    # https://huggingface.co/THUDM/glm-4-9b-chat-hf/blob/main/config.json
    # checked: every size, head_dim, attention_bias, partial_rotary_factor, vocab, tie and
    # max_position_embeddings (a public C++ test's copy, "GLM-4-9B-Chat as transformers >= 4.46
    # exports it"); values not checked against the hub file: pad/eos token ids
    "glm-4-9b-chat-hf": {"architectures": ["GlmForCausalLM"], "model_type": "glm",
                         "hidden_size": 4096, "intermediate_size": 13696,
                         "num_hidden_layers": 40, "num_attention_heads": 32,
                         "num_key_value_heads": 2, "head_dim": 128, "attention_bias": True,
                         "partial_rotary_factor": 0.5, "max_position_embeddings": 131072,
                         "tie_word_embeddings": False, "vocab_size": 151552,
                         "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338]},
    # https://huggingface.co/facebook/cwm/blob/main/config.json
    # values not checked against the hub file: all (no copy found)
    "cwm": {"architectures": ["CwmForCausalLM"], "model_type": "cwm", "hidden_size": 6144,
            "intermediate_size": 21504, "num_hidden_layers": 64, "num_attention_heads": 48,
            "num_key_value_heads": 8, "head_dim": 128, "sliding_window": 8192,
            "max_position_embeddings": 131072, "tie_word_embeddings": False,
            "vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": [128001, 128008]},
    # https://huggingface.co/google/vaultgemma-1b/blob/main/config.json
    # checked: vocab 256000, 26 layers, 4 heads and KV heads, hidden 1152, intermediate 6912,
    # head_dim 256 (keras-hub's VaultGemma conversion test config); values not checked against
    # the hub file: attention_bias, max_position_embeddings, tie, token ids
    "vaultgemma-1b": {"architectures": ["VaultGemmaForCausalLM"], "model_type": "vaultgemma",
                      "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
                      "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 256,
                      "attention_bias": False, "max_position_embeddings": 1024,
                      "tie_word_embeddings": True, "vocab_size": 256000, "pad_token_id": 0,
                      "bos_token_id": 2, "eos_token_id": 1},
    # https://huggingface.co/state-spaces/mamba-2.8b-hf/blob/main/config.json
    # values not checked against the hub file: all (no copy found)
    "mamba-2.8b": {"architectures": ["MambaForCausalLM"], "model_type": "mamba",
                   "hidden_size": 2560, "intermediate_size": 5120, "num_hidden_layers": 64,
                   "state_size": 16, "conv_kernel": 4, "expand": 2, "time_step_rank": 160,
                   "use_bias": False, "use_conv_bias": True, "vocab_size": 50280,
                   "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 0,
                   "pad_token_id": 0},
    # https://huggingface.co/tiiuae/falcon-mamba-7b/blob/main/config.json (its expand 16 is
    # overridden by its intermediate_size 8192, as transformers loads the file). Verified field
    # for field against the copy in danielgonzagat/penin-monorepo
    # SYSTEM/opt/llm_base/falcon-mamba-7b/config.json (expand 16 is in the file); corrected:
    # mixer_rms_eps dropped, the file has none (transformers' default, 1e-6, is what it was)
    "falcon-mamba-7b": {"architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba",
                        "hidden_size": 4096, "intermediate_size": 8192, "expand": 16,
                        "num_hidden_layers": 64, "state_size": 16, "conv_kernel": 4,
                        "time_step_rank": 256, "use_bias": False, "use_conv_bias": True,
                        "vocab_size": 65024,
                        "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 11,
                        "pad_token_id": 11},
    # https://huggingface.co/mistralai/Mamba-Codestral-7B-v0.1/blob/main/config.json
    # values not checked against the hub file: all (no copy found)
    "mamba-codestral-7b": {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2",
                           "hidden_size": 4096, "num_hidden_layers": 64, "num_heads": 128,
                           "head_dim": 64, "n_groups": 8, "state_size": 128, "expand": 2,
                           "conv_kernel": 4, "use_bias": False, "use_conv_bias": True,
                           "chunk_size": 256, "vocab_size": 32768,
                           "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 0,
                           "pad_token_id": 0},
    # https://huggingface.co/tencent/Hunyuan-A13B-Instruct/blob/main/config.json
    # checked against tianyu1412/Hunyuan-A13B models/config.json (a copy of Tencent's release
    # repository): every value here matches, tie_word_embeddings true included (head_dim there
    # is attention_head_dim 128). That copy differs in form: model_type "hunyuan" (remote code)
    # and per-layer lists (moe_topk [8]*32, num_shared_expert [1]*32, moe_intermediate_size
    # [3072]*32), which memsym refuses for moe_topk: see
    # test_hunyuan_a13b_per_layer_moe_topk_as_published
    "hunyuan-a13b": {"architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan_v1_moe",
                     "hidden_size": 4096, "intermediate_size": 3072, "num_hidden_layers": 32,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                     "num_experts": 64, "moe_topk": 8, "attention_bias": False,
                     "max_position_embeddings": 32768, "tie_word_embeddings": True,
                     "vocab_size": 128167, "pad_token_id": 127961, "bos_token_id": 1,
                     "eos_token_id": 127960},
    # https://huggingface.co/allenai/FlexOlmo-7x7B-1T/blob/main/config.json
    # checked: num_experts 7, num_experts_per_tok 7 (all experts active; the paper's top-4 is
    # not the released file), vocab 100352, and the OLMo 2 7B sizes (a public FlexOlmo analysis
    # that recomputes from the HF config.json); values not checked against the hub file:
    # max_position_embeddings, tie, token ids
    "flexolmo-7x7b": {"architectures": ["FlexOlmoForCausalLM"], "model_type": "flex_olmo",
                      "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                      "num_attention_heads": 32, "num_key_value_heads": 32, "num_experts": 7,
                      "num_experts_per_tok": 7, "attention_bias": False,
                      "max_position_embeddings": 4096, "tie_word_embeddings": False,
                      "vocab_size": 100352, "pad_token_id": 100277, "eos_token_id": 100257},
    # https://huggingface.co/MiniMaxAI/MiniMax-M2/blob/main/config.json
    # checked: hidden 3072, 62 layers, 256 local experts, top 8 (a public Rust test's fixture);
    # values not checked against the hub file: the rest
    "minimax-m2": {"architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2",
                   "hidden_size": 3072, "intermediate_size": 1536, "num_hidden_layers": 62,
                   "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
                   "num_local_experts": 256, "num_experts_per_tok": 8, "rotary_dim": 64,
                   "use_qk_norm": True, "max_position_embeddings": 196608,
                   "tie_word_embeddings": False, "vocab_size": 200064, "bos_token_id": 200019,
                   "eos_token_id": 200020},
    # https://huggingface.co/nvidia/Minitron-4B-Base/blob/main/config.json
    # the hub file itself not found; every value here equals TensorRT-LLM's Nemotron_4_4B test
    # config (which spells the head dim as kv_channels 128, equal to 3072 / 24): 24 heads, not
    # the card's "32 attention heads"
    "minitron-4b": {"architectures": ["NemotronForCausalLM"], "model_type": "nemotron",
                    "hidden_size": 3072, "intermediate_size": 9216, "num_hidden_layers": 32,
                    "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128,
                    "hidden_act": "relu2", "partial_rotary_factor": 0.5, "norm_eps": 1e-5,
                    "max_position_embeddings": 4096, "tie_word_embeddings": False,
                    "vocab_size": 256000, "bos_token_id": 2, "eos_token_id": 3},
    # https://huggingface.co/microsoft/phi-2/blob/main/config.json
    # verified: several public copies of the file (transformers_version 4.37.0) carry every
    # value here
    "phi-2": {"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": 2560,
              "intermediate_size": 10240, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 32, "partial_rotary_factor": 0.4, "qk_layernorm": False,
              "hidden_act": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.0,
              "attention_dropout": 0.0, "max_position_embeddings": 2048,
              "tie_word_embeddings": False, "vocab_size": 51200, "bos_token_id": 50256,
              "eos_token_id": 50256},
    # https://huggingface.co/bigcode/starcoder/blob/main/config.json
    # checked: n_embd 6144, n_head 48, n_inner 24576, n_layer 40, n_positions 8192, multi_query,
    # vocab 49152 (Cerebras modelzoo's StarCoder HF converter defaults); values not checked
    # against the hub file: activation, dropouts, token ids
    "starcoder": {"architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode",
                  "n_embd": 6144, "n_head": 48, "n_inner": 24576, "n_layer": 40,
                  "n_positions": 8192, "multi_query": True, "vocab_size": 49152,
                  "activation_function": "gelu_pytorch_tanh", "attn_pdrop": 0.1,
                  "resid_pdrop": 0.1, "embd_pdrop": 0.1, "bos_token_id": 0, "eos_token_id": 0},
    # https://huggingface.co/stabilityai/stablelm-2-1_6b/blob/main/config.json
    # checked: vocab 100352, hidden 2048, intermediate 5632, 24 layers, 32 heads and KV heads,
    # use_qkv_bias, partial_rotary_factor 0.25, 4096 positions, untied (a public test's
    # stablelm-2-1.6b config); values not checked against the hub file: use_parallel_residual,
    # qk_layernorm, token ids
    "stablelm-2-1.6b": {"architectures": ["StableLmForCausalLM"], "model_type": "stablelm",
                        "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
                        "num_attention_heads": 32, "num_key_value_heads": 32,
                        "use_qkv_bias": True, "qk_layernorm": False,
                        "use_parallel_residual": False, "partial_rotary_factor": 0.25,
                        "max_position_embeddings": 4096, "tie_word_embeddings": False,
                        "vocab_size": 100352, "bos_token_id": 100257, "eos_token_id": 100257},
    # https://huggingface.co/zai-org/GLM-4.7-Flash/blob/main/config.json
    # verified: every value here is in a public test fixture that writes "the exact
    # GLM-4.7-Flash config" (transformers_version 5.0.0rc0), not transformers' defaults
    "glm-4.7-flash": {"architectures": ["Glm4MoeLiteForCausalLM"], "model_type": "glm4_moe_lite",
                      "hidden_size": 2048, "intermediate_size": 10240,
                      "moe_intermediate_size": 1536, "num_hidden_layers": 47,
                      "num_attention_heads": 20, "num_key_value_heads": 20,
                      "n_routed_experts": 64, "n_shared_experts": 1, "num_experts_per_tok": 4,
                      "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1,
                      "q_lora_rank": 768, "kv_lora_rank": 512, "qk_nope_head_dim": 192,
                      "qk_rope_head_dim": 64, "v_head_dim": 256, "num_nextn_predict_layers": 1,
                      "attention_bias": False, "max_position_embeddings": 202752,
                      "tie_word_embeddings": False, "vocab_size": 154880, "pad_token_id": 154820,
                      "eos_token_id": [154820, 154827, 154829]},
    # https://huggingface.co/LGAI-EXAONE/EXAONE-3.5-7.8B-Instruct/blob/main/config.json
    # checked: hidden 4096, intermediate 14336, 32 layers, 32 heads, 8 KV heads, 32768 positions,
    # untied, vocab 102400 (mlx-community/EXAONE-3.5-7.8B-Instruct-4bit's config projection in a
    # public preflight script); pad 0, bos 1, eos 361, silu and eps 1e-5 as in a public dump of
    # EXAONE-3.0-7.8B's config (same family); values not checked against the 3.5 hub file: those
    "exaone-3.5-7.8b": {"architectures": ["ExaoneForCausalLM"], "model_type": "exaone",
                        "hidden_size": 4096, "intermediate_size": 14336, "num_layers": 32,
                        "num_attention_heads": 32, "num_key_value_heads": 8,
                        "activation_function": "silu", "layer_norm_epsilon": 1e-5,
                        "max_position_embeddings": 32768, "tie_word_embeddings": False,
                        "vocab_size": 102400, "pad_token_id": 0, "bos_token_id": 1,
                        "eos_token_id": 361},
    # https://huggingface.co/internlm/internlm3-8b-instruct/blob/main/config.json
    # checked: every value here but the token ids (mlx-community/internlm3-8b-instruct-4bit's
    # copy, quoted in a public Rust test, and a Swift test's "realConfigJSON"); values not
    # checked against the hub file: pad/bos/eos token ids
    "internlm3-8b": {"architectures": ["InternLM3ForCausalLM"], "model_type": "internlm3",
                     "hidden_size": 4096, "intermediate_size": 10240, "num_hidden_layers": 48,
                     "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
                     "qkv_bias": False, "bias": False, "max_position_embeddings": 32768,
                     "tie_word_embeddings": False, "vocab_size": 128512, "pad_token_id": 2,
                     "bos_token_id": 1, "eos_token_id": 2},
}


def _read(tmp_path, case):
    return from_hf_config(write_config(tmp_path, REAL[case], case))


def test_ministral_8b_against_the_card(tmp_path):
    # Ministral-8B-Instruct-2410 model card, architecture table: "Parameters 8,019,808,256"
    assert parameter_count(_read(tmp_path, "ministral-8b")) == 8_019_808_256


def test_command_r7b_hand_count_and_card(tmp_path):
    # hand count from modeling_cohere2.py (h=4096, a=32, g=8, d_h=128, f=14336, L=32,
    # V=256000, tied): q, k, v, o; gate, up, down; one Cohere2LayerNorm (weight only) a layer
    h, L, V, f = 4096, 32, 256000, 14336
    layer = 2 * h * h + 2 * h * 8 * 128 + 3 * h * f + h
    arch = _read(tmp_path, "command-r7b")
    assert parameter_count(arch) == V * h + L * layer + h
    # the card: "Model Size: 7 billion parameters", the body without the (tied) embedding
    counts = parameter_counts(arch)
    assert counts["output_layer"] == 0
    assert billions(parameter_count(arch) - counts["embedding"]) == 7


def test_dense_families_against_their_cards(tmp_path):
    # model cards: Olmo 3 "7B"; Helium-1 "2B parameters"; GLM-4-9B "9B"; VaultGemma "1B"
    assert billions(parameter_count(_read(tmp_path, "olmo-3-7b"))) == 7
    assert billions(parameter_count(_read(tmp_path, "helium-1-2b"))) == 2
    assert billions(parameter_count(_read(tmp_path, "glm-4-9b-chat-hf"))) == 9
    assert billions(parameter_count(_read(tmp_path, "vaultgemma-1b"))) == 1
    # CWM card: "a 32-billion-parameter" model (whole billions, cut)
    assert parameter_count(_read(tmp_path, "cwm")) // 10**9 == 32


def test_glm_hand_count(tmp_path):
    # modeling_glm.py: q, k, v with bias, o_proj without; gate_up_proj (2f x h) and down_proj;
    # input and post-attention RMSNorms (h=4096, a=32, g=2, d_h=128, f=13696, L=40, V=151552)
    h, L, V, f = 4096, 40, 151552, 13696
    attn = h * 32 * 128 + 32 * 128 + 2 * (h * 2 * 128 + 2 * 128) + 32 * 128 * h
    layer = attn + 3 * h * f + 2 * h
    assert parameter_count(_read(tmp_path, "glm-4-9b-chat-hf")) == 2 * V * h + L * layer + h


def test_mamba_hand_count_and_name(tmp_path):
    # hand count from modeling_mamba.py (h=2560, d_inner=5120, N=16, dt_rank=160, k=4, L=64,
    # V=50280, tied): in_proj, conv1d (+bias), x_proj, dt_proj (+bias), A_log, D, out_proj
    # and the block's RMSNorm; the model's name: 2.8B
    h, d, n, r, L, V = 2560, 5120, 16, 160, 64, 50280
    mixer = h * 2 * d + d * 4 + d + d * (r + 2 * n) + r * d + d + d * n + d + d * h
    arch = _read(tmp_path, "mamba-2.8b")
    assert parameter_count(arch) == V * h + L * (mixer + h) + h
    assert billions(parameter_count(arch), 1) == 2.8
    assert parameter_counts(arch)["attention"] == 0 and parameter_counts(arch)["mlp"] == 0


def test_mamba2_and_falcon_mamba_against_their_names(tmp_path):
    # Mamba-Codestral-7B and Falcon-Mamba-7B ("the first competitive attention-free 7B
    # language model", arXiv 2410.05355): 7B each
    assert billions(parameter_count(_read(tmp_path, "mamba-codestral-7b"))) == 7
    arch = _read(tmp_path, "falcon-mamba-7b")
    assert billions(parameter_count(arch)) == 7 and arch.mamba_inner_size == 8192


def test_moe_families_against_their_cards(tmp_path):
    # Hunyuan-A13B card: "80 billion total parameters and 13 billion active" (tied embedding)
    arch = _read(tmp_path, "hunyuan-a13b")
    assert billions(parameter_count(arch)) == 80 and billions(active_parameter_count(arch)) == 13
    # MiniMax-M2 card: "230 billion total parameters with 10 billion active parameters"; the
    # active count without the embedding and lm_head is the card's 10B, the total is within the
    # card's rounding to tens of billions
    arch = _read(tmp_path, "minimax-m2")
    counts = parameter_counts(arch)
    vocab = counts["embedding"] + counts["output_layer"]
    assert billions(active_parameter_count(arch) - vocab) == 10
    assert round(parameter_count(arch) / 10**10) == 23


def test_phi2_hand_count_and_card(tmp_path):
    # modeling_phi.py (h=2560, f=10240, L=32, V=51200, untied): q, k, v, dense with bias; fc1,
    # fc2 with bias; one LayerNorm (weight, bias) a layer; final LayerNorm; lm_head with bias
    h, f, L, V = 2560, 10240, 32, 51200
    layer = 4 * h * h + 4 * h + 2 * h * f + f + h + 2 * h
    arch = _read(tmp_path, "phi-2")
    assert parameter_count(arch) == V * h + L * layer + 2 * h + V * h + V
    # the card: "a Transformer with 2.7 billion parameters" (tenths, cut)
    assert parameter_count(arch) // 10**8 == 27
    assert arch.extra["hf_dropout"] == {"attention_dropout": 0.0, "resid_pdrop": 0.1,
                                        "embd_pdrop": 0.0}


def test_starcoder_and_stablelm_against_their_cards(tmp_path):
    # StarCoder card: "15.5B parameter models"; a hand count from modeling_gpt_bigcode.py
    # (h=6144, f=24576, d_h=128, one KV head, L=40, V=49152, 8192 positions, tied)
    h, f, L, V, P = 6144, 24576, 40, 49152, 8192
    layer = h * (h + 2 * 128) + (h + 2 * 128) + h * h + h + 2 * h * f + f + h + 4 * h
    arch = _read(tmp_path, "starcoder")
    assert parameter_count(arch) == V * h + P * h + L * layer + 2 * h
    assert billions(parameter_count(arch), 1) == 15.5
    # Stable LM 2 1.6B card: "a 1.6 billion parameter decoder-only language model"
    assert billions(parameter_count(_read(tmp_path, "stablelm-2-1.6b")), 1) == 1.6


def test_glm_4_7_flash_against_the_card(tmp_path):
    # GLM-4.7-Flash card: "a 30B-A3B MoE model"; the active 3B without the embedding and lm_head;
    # the MTP layer transformers does not build is said, not counted
    arch = _read(tmp_path, "glm-4.7-flash")
    counts = parameter_counts(arch)
    vocab = counts["embedding"] + counts["output_layer"]
    assert billions(parameter_count(arch)) == 30
    assert billions(active_parameter_count(arch) - vocab) == 3
    assert any(n.startswith("num_nextn_predict_layers=1 not counted") for n in arch.extra["notes"])


def test_exaone_and_internlm3_against_their_cards(tmp_path):
    # EXAONE-3.5-7.8B card: "Number of Parameters (without embeddings): 6.98B" (neither the
    # input embedding nor the untied lm_head)
    arch = _read(tmp_path, "exaone-3.5-7.8b")
    counts = parameter_counts(arch)
    assert billions(parameter_count(arch) - counts["embedding"] - counts["output_layer"],
                    2) == 6.98
    # InternLM3-8B-Instruct card: "an 8-billion parameter instruction model" (cut)
    assert parameter_count(_read(tmp_path, "internlm3-8b")) // 10**9 == 8


def test_minitron_against_the_card(tmp_path):
    # Minitron-4B-Base card: a 4B model pruned from Nemotron-4 15B
    assert billions(parameter_count(_read(tmp_path, "minitron-4b"))) == 4


def test_flexolmo_hand_count(tmp_path):
    # modeling_flex_olmo.py (h=4096, a=g=32, f=11008, E=7, L=32, V=100352, untied): q, k, v, o;
    # q_norm (a d_h), k_norm (g d_h); router E x h; E gated experts; post-attention and
    # post-feedforward RMSNorms
    h, f, E, L, V = 4096, 11008, 7, 32, 100352
    layer = 4 * h * h + 2 * h + E * h + E * 3 * h * f + 2 * h
    assert parameter_count(_read(tmp_path, "flexolmo-7x7b")) == 2 * V * h + L * layer + h


def test_hunyuan_a13b_per_layer_moe_topk_as_published(tmp_path):
    # tianyu1412/Hunyuan-A13B models/config.json writes moe_topk, num_shared_expert and
    # moe_intermediate_size once per layer; HunYuanMoEV1 reads moe_topk[layer_idx] when it is a
    # list. The scalar form above counts 80.39B total and 12.75B active; the list form must too
    cfg = {**REAL["hunyuan-a13b"], "moe_topk": [8] * 32, "num_shared_expert": [1] * 32,
           "moe_intermediate_size": [3072] * 32}
    arch = from_hf_config(write_config(tmp_path, cfg, "hunyuan-a13b-lists"))
    scalar = _read(tmp_path, "hunyuan-a13b")
    assert parameter_count(arch) == parameter_count(scalar)
    assert active_parameter_count(arch) == active_parameter_count(scalar)
    # a top-k that differs between layers is a model memsym's one-value record cannot hold
    with pytest.raises(InvalidValueError, match="'moe_topk' differs between layers") as exc:
        from_hf_config(write_config(tmp_path, {**cfg, "moe_topk": [8] * 31 + [4]}, "hunyuan-mixed"))
    assert "\n" not in str(exc.value)


@pytest.mark.torch
@pytest.mark.parametrize("case", sorted(REAL))
def test_real_configs_match_transformers(tmp_path, case):
    path = write_config(tmp_path, REAL[case], case)
    assert parameter_count(from_hf_config(path)) == language_model_count(path)


# --------------------------------------------------------------------------------------------
# refusals: one line; a suggestion is never applied
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg,match", [
    (small_config("ministral"), "missing field 'head_dim'"),
    (small_config("hunyuan_v1_moe", num_experts=4), "missing field 'head_dim'"),
    ({k: v for k, v in small_config("nemotron").items() if k != "num_key_value_heads"},
     "missing field 'num_key_value_heads'"),
    (small_config("phi", qk_layernorm=True, head_dim=8), "qk_layernorm with a Phi head_dim"),
    (small_config("stablelm", qk_layernorm=True), "per-head LayerNorms"),
    ({**_BIGCODE, "add_cross_attention": True}, "add_cross_attention"),
    (small_config("glm4_moe_lite", **_MLA, attention_bias=True), "attention_bias true"),
    (small_config("glm4_moe_lite", **_MLA, mlp_layer_types=["dense"]),
     "'mlp_layer_types' must list"),
    (small_config("hunyuan_v1_moe", head_dim=16, num_experts=[4, 4, 4]),
     "'num_experts' must be a whole"),
    (small_config("helium", head_dim=32), "Helium head_dim"),
    ({"model_type": "mamba2", **_SSM, "num_heads": 8, "head_dim": 8}, "must equal num_heads"),
    ({"model_type": "mamba2", **_SSM, "num_heads": 8, "head_dim": 16, "n_groups": 3},
     "not a multiple of its 3 groups"),
])
def test_what_transformers_cannot_build_or_memsym_does_not_model(tmp_path, cfg, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("typo,near", [("olmo_3", "olmo3"), ("cohere3", "cohere2"),
                                       ("ministral4", "ministral3")])
def test_a_misspelt_type_is_refused_not_read_as_the_suggestion(tmp_path, typo, near):
    with pytest.raises(UnknownNameError) as err:
        from_hf_config(write_config(tmp_path, small_config(typo, head_dim=16)))
    msg = str(err.value)
    assert "\n" not in msg and f"{typo!r}" in msg and near in msg
    assert "never reads one in place of the other" in msg


def test_a_mamba1_estimate_is_refused_in_one_line_and_mamba2_is_estimated(tmp_path, capsys):
    # memsym estimate in this process (memsym.cli.main, what the installed command runs); a
    # fresh process is tests/test_cli.py's subject
    from memsym.cli import main

    def run(case):
        code = main(["estimate", str(write_config(tmp_path, SMALL[case], case))])
        return (code, *capsys.readouterr())

    code, _, err = run("mamba")
    assert code == 2 and err.count("\n") == 1
    assert "Mamba-1" in err
    code, _, err = run("mamba2")
    assert code == 0, err


def test_active_equals_total_for_the_dense_types(tmp_path):
    arch = _read(tmp_path, "olmo-3-7b")
    assert active_parameter_count(arch) == parameter_count(arch)


@pytest.mark.parametrize("case", ["mamba2", "mamba-switches", "hunyuan_v1_moe", "phi",
                                  "granitemoeshared", "cohere2"])
def test_stages_add_up_to_the_count(tmp_path, case):
    assert_stages_add_up(from_hf_config(write_config(tmp_path, SMALL[case])))


@pytest.mark.torch
@pytest.mark.parametrize("case", one_case_per_type(SMALL))
def test_dropout_masks_follow_the_transformers_model(tmp_path, case):
    # oracle: transformers' model in training mode keeps a dropout mask exactly when the
    # probabilities memsym read are not all zero
    cfg = dict(SMALL[case])
    dropout_fields = from_hf_config(write_config(tmp_path, cfg, "probe")).extra["hf_dropout"]
    cfg.update({k: 0.1 for k in dropout_fields})
    assert_masks_follow_dropout(write_config(tmp_path, cfg))


def test_fuzzed_configs(tmp_path):
    fuzz_configs(tmp_path, SMALL, {k for cfg in SMALL.values() for k in cfg})
