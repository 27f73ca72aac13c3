"""The context-parallel communication type as Megatron-core, Transformer Engine and
Megatron-Bridge spell it.

Sources: Megatron-LM d98e8a64dd ``megatron/core/transformer/transformer_config.py:1030``
(``cp_comm_type``: one name, one per layer, or None) and ``:3162-3177`` (DeepSeek-V3.2's sparse
attention, DSA, runs context parallelism with ``allgather`` only, underscores and case
ignored); Transformer Engine d0067d0da6 ``attention/dot_product_attention/context_parallel.py:
5096-5139`` (``p2p``, ``a2a+p2p``, ``all_gather``, ``a2a``; anything else raises);
Megatron-Bridge 067f987df0, whose recipes set it (``recipes/gpt_oss/h100/gpt_oss.py:592``
``"a2a"``, ``perf_recipes/glm_moe_dsa/gb200/glm5.py:65`` ``"allgather"``).
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.model import from_hf_config
from memsym.readers.bridge import read_bridge_recipe

from hf_oracle import small_config, write_config
from in_process import run

_MLA = dict(q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
            v_head_dim=8, n_routed_experts=4, n_shared_experts=1, moe_intermediate_size=16,
            num_experts_per_tok=2, n_group=1, topk_group=1, num_key_value_heads=4)


def _dsa(tmp_path):
    return from_hf_config(write_config(tmp_path, small_config(
        "deepseek_v32", **_MLA, first_k_dense_replace=1, index_n_heads=4, index_head_dim=16)))


def _job(model, cp=2, **kw):
    return job(model, cp=cp, seq_length=64, micro_batch_size=1, **kw)


def test_dsa_context_parallelism_needs_allgather(tmp_path):
    x = _dsa(tmp_path)
    with pytest.raises(InvalidValueError, match="DSA.*needs cp_comm_type allgather"):
        _job(x)                                          # Megatron's default: p2p
    with pytest.raises(InvalidValueError, match="DSA.*needs cp_comm_type allgather"):
        _job(x, cp_comm_type="a2a")
    # Megatron-core reads both spellings for DSA (the underscore dropped)
    for spelt in ("allgather", "all_gather"):
        assert _job(x, cp_comm_type=spelt).training.comm.cp_comm_type == spelt
    _job(x, cp=1)                                        # no context parallelism: no rule


def test_transformer_engine_attention_takes_all_gather_only():
    with pytest.raises(InvalidValueError, match="Unsupported communication type: allgather"):
        _job("llama3-8b", cp_comm_type="allgather")
    _job("llama3-8b", cp_comm_type="all_gather")


def test_a_bridge_recipe_s_cp_comm_type_is_read():
    # gpt_oss.py:592: the 32K SFT recipe runs a2a (gpt-oss's sinks need it under TE's CP)
    reading = read_bridge_recipe("gpt_oss_120b_sft_48gpu_h100_bf16_32k_config")
    assert reading["values"]["model.cp_comm_type"] == "a2a"
    glm5 = read_bridge_recipe("glm51_sft_192gpu_gb200_bf16_config")
    assert glm5["values"]["model.cp_comm_type"] == "allgather"


def test_an_override_clears_the_sinks_rule(capsys):
    base = ["estimate", "--bridge-recipe", "gpt_oss_120b_pretrain_config",
            "model.context_parallel_size=2", "--world-size", "64"]
    code, out, err = run(capsys, *base, "model.cp_comm_type=p2p")
    assert (code, out) == (2, "") and "needs cp_comm_type a2a" in err
    code, out, err = run(capsys, *base, "model.cp_comm_type=a2a")
    assert code in (0, 1), err
    code, out, err = run(capsys, *base, "model.cp_comm_type=7")
    assert (code, out) == (2, "") and "model.cp_comm_type must be a name" in err
