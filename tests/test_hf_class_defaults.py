"""The config classes' own defaults of the types whose fields default to None (issue 32, item 4).

Oracle: transformers (5.25.0 when checked) builds ``AutoModelForCausalLM.from_config`` of the
very file memsym reads (``AutoConfig.for_model(t).to_dict()`` written as config.json) on the meta
device.  Where it builds a model that can run, memsym's count must equal ``sum(p.numel())``;
where it fails (or its forward fails), memsym refuses in one line naming the field and saying
that transformers fails too, and the test checks that transformers does fail.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.model import from_hf_config, parameter_count

from hf_oracle import class_defaults, language_model_count, write_config


# model_type -> the field whose None default transformers' own model cannot be built with
NOT_BUILT = {"hunyuan_v1_dense": "head_dim", "hunyuan_v1_moe": "head_dim",
             "ministral": "head_dim", "nemotron": "num_key_value_heads",
             "dots1": "n_routed_experts", "dbrx": "attn_config.rope_theta"}


@pytest.mark.torch
@pytest.mark.parametrize("mtype", sorted(NOT_BUILT))
def test_defaults_transformers_cannot_build_are_refused_in_one_line(tmp_path, mtype):
    path = write_config(tmp_path, class_defaults(mtype), mtype)
    with pytest.raises(InvalidValueError, match=f"missing field '{NOT_BUILT[mtype]}': "
                                                "transformers builds no model") as err:
        from_hf_config(path)
    assert "\n" not in str(err.value)
    # the oracle: transformers itself fails on the same file (DBRX's attention on the missing
    # attribute, the others on its None)
    with pytest.raises((TypeError, AttributeError)):
        language_model_count(path)


@pytest.mark.torch
def test_glm4_moe_defaults_take_the_floor_of_h_over_a(tmp_path):
    # Glm4MoeConfig: h 4096, 96 heads, no head_dim field; Glm4MoeAttention's
    # getattr(config, "head_dim", h // a) gives 42-wide heads (q_proj 4032 x 4096)
    path = write_config(tmp_path, class_defaults("glm4_moe"), "glm4_moe")
    arch = from_hf_config(path)
    assert arch.kv_channels == 4096 // 96 == 42
    assert parameter_count(arch) == language_model_count(path)


def test_glm4_moe_null_head_dim_is_refused(tmp_path):
    # a null head_dim reaches Glm4MoeAttention as None (head_dim**-0.5 fails in transformers)
    cfg = {"model_type": "glm4_moe", "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 128,
           "head_dim": None}
    with pytest.raises(InvalidValueError, match="head_dim null in a glm4_moe config") as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value)


@pytest.mark.torch
def test_deepseek_v2_defaults_refused_for_their_missing_top_k(tmp_path):
    path = write_config(tmp_path, class_defaults("deepseek_v2"), "v2")
    with pytest.raises(InvalidValueError, match="num_experts_per_tok.*torch.topk") as err:
        from_hf_config(path)
    assert "\n" not in str(err.value)
    # the defaults with a top-k given count as transformers builds them
    cfg = {**class_defaults("deepseek_v2"), "num_experts_per_tok": 6}
    path = write_config(tmp_path, cfg, "v2k")
    assert parameter_count(from_hf_config(path)) == language_model_count(path)


@pytest.mark.torch
def test_deepseek_v2_without_top_k_cannot_run_a_forward():
    # the oracle of the refusal: a small DeepseekV2 of num_experts_per_tok None is built, and
    # its first forward fails in the router
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    conf = AutoConfig.for_model("deepseek_v2", hidden_size=32, num_hidden_layers=1,
                                num_attention_heads=2, intermediate_size=48, vocab_size=64,
                                n_routed_experts=4, moe_intermediate_size=8, kv_lora_rank=8,
                                q_lora_rank=None, qk_nope_head_dim=8, qk_rope_head_dim=8,
                                v_head_dim=8)
    assert conf.num_experts_per_tok is None
    model = AutoModelForCausalLM.from_config(conf)
    with pytest.raises(TypeError):
        model(torch.zeros(1, 4, dtype=torch.long))


# The Mamba-2 family's time_step_limit defaults to (0.0, inf), which Python's json.dump writes as
# a bare Infinity (not JSON), and published files carry it: nvidia/Nemotron-H-8B-Base-8K's
# config.json has "time_step_limit": [0.0, Infinity].  memsym reads no such field.
INFINITE_DEFAULT = ("nemotron_h", "mamba2", "bamba", "falcon_h1", "granitemoehybrid")


@pytest.mark.torch
@pytest.mark.parametrize("mtype", INFINITE_DEFAULT)
def test_an_infinite_field_memsym_does_not_read_is_kept_out(tmp_path, mtype):
    path = write_config(tmp_path, class_defaults(mtype), mtype)
    assert "Infinity" in path.read_text()
    assert parameter_count(from_hf_config(path)) == language_model_count(path)


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN"])
def test_a_non_finite_field_memsym_reads_is_refused_by_name(tmp_path, value):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": %s, "intermediate_size": 64, '
                    '"num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100, '
                    '"time_step_limit": [0.0, Infinity]}' % value)
    with pytest.raises(InvalidValueError, match="hidden_size") as err:
        from_hf_config(path)
    assert "\n" not in str(err.value)
