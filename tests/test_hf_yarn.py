"""A config.json's YaRN ``rope_scaling`` reaches the architecture as Megatron's ``yarn_*`` fields.

Megatron-Bridge 067f987df0 models/conversion/model_bridge.py:501-523, 590-632 maps a
``rope_scaling`` of rope type "yarn" key by key (factor, original_max_position_embeddings,
mscale, mscale_all_dim); an MLA model (DeepSeek) keeps MLATransformerConfig's defaults for the
keys the file leaves out (factor 40, mscale 1.0, mscale_all_dim 0.0: Megatron-LM d98e8a64dd
transformer_config.py:3315-3330); GPT-OSS's bridge sets factor 32.0 and yarn_mscale None
whatever the file says (gpt_oss_bridge.py:94-100).  Megatron-core's concentration factor
(yarn_rotary_pos_embedding.py:275-304) is 1 when mscale equals mscale_all_dim, else
(0.1 mu ln s + 1) / (0.1 mu_all ln s + 1), and 0.1 ln s + 1 when either is None; RoPE runs
fused only at exactly 1 (rope_utils.py:351-356).
"""

from __future__ import annotations

import math

import pytest

from memsym.errors import InvalidValueError
from memsym.model import from_hf_config
from memsym.timing.gemm import shape_of
from memsym.timing.rope import yarn_concentration

from hf_oracle import small_config, write_config
from test_hf_configs import _DEEPSEEK

# DeepSeek-V3's config.json rope_scaling (huggingface.co/deepseek-ai/DeepSeek-V3)
V3_YARN = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
           "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"}
# gpt-oss-120b's config.json rope_scaling: no mscale, no mscale_all_dim
OSS_YARN = {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
            "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False}


def test_deepseek_v3_rope_scaling_is_carried_and_fused(tmp_path):
    cfg = small_config("deepseek_v3", **_DEEPSEEK, rope_scaling=V3_YARN)
    arch = from_hf_config(write_config(tmp_path, cfg, "v3"))
    assert arch.extra["yarn_rotary_scaling_factor"] == 40.0
    assert arch.extra["yarn_mscale"] == arch.extra["yarn_mscale_all_dim"] == 1.0
    assert arch.extra["yarn_original_max_position_embeddings"] == 4096
    # equal mscales: (0.1 ln 40 + 1) / (0.1 ln 40 + 1) = 1, TE's fused RoPE
    assert yarn_concentration(arch.extra) == 1.0
    assert not shape_of(arch).rope_unfused


def test_mla_keeps_megatron_defaults_for_left_out_keys(tmp_path):
    # mscale 0.707 given, mscale_all_dim left out: MLATransformerConfig's 0.0, so by hand
    # (0.1 * 0.707 * ln 40 + 1) / (0.1 * 0 * ln 40 + 1) = 1.26081...
    yarn = {"type": "yarn", "factor": 40, "mscale": 0.707}
    arch = from_hf_config(write_config(tmp_path, small_config("deepseek_v3", **_DEEPSEEK,
                                                              rope_scaling=yarn), "mla"))
    assert arch.extra["yarn_mscale_all_dim"] == 0.0
    assert yarn_concentration(arch.extra) == pytest.approx(0.1 * 0.707 * math.log(40) + 1)


def test_gpt_oss_keeps_its_bridge_reading(tmp_path):
    small = small_config("gpt_oss", head_dim=16, num_local_experts=4, num_experts_per_tok=2)
    arch = from_hf_config(write_config(tmp_path, {**small, "rope_scaling": OSS_YARN}, "oss"))
    # no mscale: 0.1 ln 32 + 1 = 1.346574 (transformers' default attention factor too)
    assert "yarn_mscale" not in arch.extra
    assert yarn_concentration(arch.extra) == pytest.approx(0.1 * math.log(32) + 1)
    # the bridge sets yarn_mscale None whatever the file says: equal mscales change nothing
    own = {**OSS_YARN, "mscale": 1.0, "mscale_all_dim": 1.0}
    arch = from_hf_config(write_config(tmp_path, {**small, "rope_scaling": own}, "own"))
    assert yarn_concentration(arch.extra) == pytest.approx(0.1 * math.log(32) + 1)


def test_gpt_provider_yarn_and_other_rope_types(tmp_path):
    # a GPT-provider model (Qwen3) with YaRN factor 4 and no mscale: 0.1 ln 4 + 1 = 1.138629
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    arch = from_hf_config(write_config(tmp_path, small_config("qwen3", rope_scaling=yarn), "q"))
    assert arch.extra["yarn_rotary_scaling_factor"] == 4.0
    assert yarn_concentration(arch.extra) == pytest.approx(0.1 * math.log(4) + 1)
    assert shape_of(arch).rope_unfused
    # another rope type carries nothing (Llama 3's "llama3" scaling)
    llama3 = {"rope_type": "llama3", "factor": 8.0}
    arch = from_hf_config(write_config(tmp_path, small_config("llama", rope_scaling=llama3), "l"))
    assert not any(k.startswith("yarn_") for k in arch.extra)


def test_bad_rope_scaling_value_is_refused(tmp_path):
    yarn = {"rope_type": "yarn", "factor": 4.0, "mscale": "1"}
    with pytest.raises(InvalidValueError, match="'mscale' must be a number >= 0") as err:
        from_hf_config(write_config(tmp_path, small_config("qwen3", rope_scaling=yarn), "bad"))
    assert "\n" not in str(err.value) and "rope_scaling" in str(err.value)
