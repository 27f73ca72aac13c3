"""Jais 2 (``jais2``), nanochat (``nanochat``) and Youtu-LLM (``youtu``) against transformers' own
models (issue 32, item 4).

Same oracle as ``tests/test_hf_newer_types.py``: transformers (5.25.0 when checked) builds
``AutoModelForCausalLM.from_config`` of the very file memsym reads, on the meta device, and
``sum(p.numel())`` of its parameters (a tied weight once) must equal memsym's count, for small
configs (every structural switch), the config classes' defaults and published configs, which are
also counted by hand.  No network: every config is written here.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.model import from_hf_config, parameter_count, parameter_counts

from hf_oracle import TOKENS, write_config

# the model types this file covers
TYPES = {"jais2", "nanochat", "youtu"}

_BASE = {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
         "intermediate_size": 96, "vocab_size": 128, "max_position_embeddings": 64, **TOKENS}
_JAIS2 = {"model_type": "jais2", **_BASE, "num_key_value_heads": 2}
_NANO = {"model_type": "nanochat", **_BASE, "num_key_value_heads": 2}
_YOUTU = {"model_type": "youtu", **_BASE, "num_key_value_heads": 4, "q_lora_rank": 24,
          "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8}

SMALL = {
    # Jais 2: biased q, k, v, o and up/down (relu2, no gate), biased LayerNorms, untied; or no
    # biases, a head_dim of its own, tied
    "jais2": _JAIS2,
    "jais2-no-bias-head-dim-tied": {**_JAIS2, "attention_bias": False, "mlp_bias": False,
                                    "head_dim": 8, "tie_word_embeddings": True},
    # nanochat: weightless RMSNorms (layers, q/k, final), fc1/fc2 relu2 MLP, untied; or biased
    # attention, tied
    "nanochat": _NANO,
    "nanochat-bias-tied": {**_NANO, "attention_bias": True, "tie_word_embeddings": True},
    # Youtu-LLM: multi-latent attention with q LoRA, a dense gated MLP (mlp_bias not read),
    # tied; or no q LoRA, untied
    "youtu": _YOUTU,
    "youtu-no-q-lora-mlp-bias-ignored-untied": {**_YOUTU, "q_lora_rank": None, "mlp_bias": True,
                                                "tie_word_embeddings": False},
}


REAL = {
    # https://huggingface.co/nanochat-students/nanochat-d20 (converted to transformers'
    # NanoChat): n_embd 1280, 20 layers, 10 heads and KV heads, vocabulary 65536, 2048 tokens,
    # MLP 4 n_embd, untied, as public converters write its config.json from the checkpoint's
    # meta file and a public test checks against d20
    "nanochat-d20": {"architectures": ["NanoChatForCausalLM"], "model_type": "nanochat",
                     "vocab_size": 65536, "hidden_size": 1280, "intermediate_size": 5120,
                     "num_hidden_layers": 20, "num_attention_heads": 10,
                     "num_key_value_heads": 10, "max_position_embeddings": 2048,
                     "hidden_act": "relu2", "rms_norm_eps": 1e-6, "attention_bias": False,
                     "tie_word_embeddings": False, "final_logit_softcapping": 15.0},
    # https://huggingface.co/tencent/Youtu-LLM-2B/blob/main/config.json: the fields below as
    # public copies quote Youtu-LLM's config.json
    "youtu-llm-2b": {"architectures": ["YoutuForCausalLM"], "model_type": "youtu",
                     "hidden_size": 2048, "intermediate_size": 6144, "kv_lora_rank": 512,
                     "num_attention_heads": 16, "num_hidden_layers": 32,
                     "num_key_value_heads": 16, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
                     "qk_rope_head_dim": 64, "tie_word_embeddings": True, "v_head_dim": 128,
                     "vocab_size": 128256},
}


def test_nanochat_d20_hand_count(tmp_path):
    # modeling_nanochat.py (h=1280, f=5120, L=20, V=65536, untied): q, k, v, o h^2 each; fc1,
    # fc2; no norm has a weight: six weights a layer plus embed_tokens and lm_head
    h, f, L, V = 1280, 5120, 20, 65536
    arch = from_hf_config(write_config(tmp_path, REAL["nanochat-d20"], "d20"))
    assert parameter_counts(arch)["norms"] == 0
    assert parameter_count(arch) == 2 * V * h + L * (4 * h * h + 2 * h * f)


def test_youtu_llm_2b_hand_count(tmp_path):
    # modeling_youtu.py (h=2048, a=16, r_q=1536, r_kv=512, d_nope=128, d_rope=64, d_v=128,
    # f=6144, L=32, V=128256, tied): DeepSeek-V3's attention (as MiniCPM3's in
    # tests/test_hf_moe_types.py), a gated MLP, two RMSNorms; the model card's "2B"
    h, a, rq, rkv, dn, dr, dv, f, L, V = 2048, 16, 1536, 512, 128, 64, 128, 6144, 32, 128256
    att = h * rq + rq + rq * a * (dn + dr) + h * (rkv + dr) + rkv + rkv * a * (dn + dv) + a * dv * h
    arch = from_hf_config(write_config(tmp_path, REAL["youtu-llm-2b"], "youtu"))
    assert parameter_count(arch) == V * h + L * (att + 3 * h * f + 2 * h) + h
    assert round(parameter_count(arch) / 10**9) == 2


def test_youtu_attention_bias_is_refused(tmp_path):
    with pytest.raises(InvalidValueError, match="attention_bias true in a Youtu config") as err:
        from_hf_config(write_config(tmp_path, {**_YOUTU, "attention_bias": True}))
    assert "\n" not in str(err.value)
