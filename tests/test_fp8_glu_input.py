"""``activation_func_fp8_input_store``: the fused SwiGLU saves its input in FP8.

Megatron-core d98e8a64dd: ``SwiGLUFunction`` / ``BiasSwiGLUFunction`` /
``WeightedSwiGLUFunction`` save ``input.to(torch.float8_e4m3fn) if fp8_input_store else
input`` (fusions/fused_bias_swiglu.py:180-184, :232-235, :269-270), the fc1 output, where the
16-bit tensor took 2 bytes per element; the flag is a TransformerConfig field Megatron-LM
keeps off its command line (arguments.py:2306-2329) and refuses for another activation
(transformer_config.py:2467-2469).  Every expected value is the element count written out by
hand: one byte saved per fc1-output element kept.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.model import resolve_model
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.readers.megatron_arguments import ArgumentError, parse_megatron_argv
from memsym.training import Layout, Training, training_memory


def _acts(model, layout, **kw) -> int:
    tr = Training(seq_length=4096, micro_batch_size=1, global_batch_size=64, **kw)
    return training_memory(resolve_model(model), layout, tr).grouped()["activations"]


def test_dense_swiglu_saves_one_byte_per_fc1_element():
    # Llama 3 8B (32 layers, f = 14336) at TP 2, s = 4096, b = 1: fc1's output is
    # 4096 x 2 x 14336 / 2 elements per layer, each kept in 1 byte instead of 2
    lay = Layout(t=2)
    saved = _acts("llama3-8b", lay) - _acts("llama3-8b", lay, activation_func_fp8_input_store=True)
    assert saved == 32 * 4096 * 2 * 14336 // 2


def test_routed_experts_save_one_byte_per_routed_fc1_element():
    # Qwen3-30B-A3B (48 MoE layers, top-8, f_e = 768) at EP 8, TP 1: a rank receives on
    # average 8 x 4096 routed copies, each with a 2 x 768 fc1 output
    lay = Layout(e=8, d=8)
    saved = _acts("qwen3-30b-a3b", lay) - _acts("qwen3-30b-a3b", lay,
                                                activation_func_fp8_input_store=True)
    assert saved == 48 * 8 * 4096 * 2 * 768


def test_eager_gate_and_recomputed_mlp_keep_no_fp8_copy():
    # the eager glu() (bias_activation_fusion False, mlp.py:320-334) never reads the flag,
    # and a recomputed MLP keeps nothing of its activation
    lay = Layout(t=2)
    for kw in (dict(bias_activation_fusion=False),
               dict(recompute="selective", recompute_modules=("mlp",))):
        assert _acts("llama3-8b", lay, **kw) == _acts(
            "llama3-8b", lay, activation_func_fp8_input_store=True, **kw)


def test_refused_where_megatron_refuses():
    # transformer_config.py:2467-2469: SwiGLU only (GPT-OSS runs a clamped quick-GeGLU)
    with pytest.raises(InvalidValueError, match="SwiGLU only"):
        _acts("gpt-oss-120b", Layout(e=8, d=8), activation_func_fp8_input_store=True)
    with pytest.raises(InvalidValueError, match="framework megatron"):
        _acts("llama3-8b", Layout(d=8), activation_func_fp8_input_store=True,
              framework="torchtitan", sharding="fsdp")


def test_megatron_lm_has_no_such_argument():
    with pytest.raises(ArgumentError, match="arguments.py:2329"):
        parse_megatron_argv(["--swiglu", "--activation-func-fp8-input-store"])


def test_bridge_field_sets_it():
    # llama3_8b_pretrain_config: TP 1, CP 2, s 8192, MBS 1: 32 layers of 8192 / 2 tokens,
    # each fc1 output 2 x 14336 wide
    model, opts, _ = bridge_job_options(read_bridge_recipe(
        "llama3_8b_pretrain_config", ["model.activation_func_fp8_input_store=true"]))
    assert opts["activation_func_fp8_input_store"] is True
    assert (opts["t"], opts["c"], opts["seq_length"]) == (1, 2, 8192)
    on = training_memory(job(model, **opts)).grouped()["activations"]
    off = training_memory(job(model, **{**opts, "activation_func_fp8_input_store": False})
                          ).grouped()["activations"]
    assert off - on == 32 * (8192 // 2) * 2 * 14336


def test_moe_act_recompute_keeps_the_shared_experts_fp8_input():
    # DeepSeek-V3: 58 MoE layers and its MTP layer (MoE too), the first 3 dense (f = 18432),
    # one shared expert of f_sh = 2048.  Recomputing moe_act reruns the routed experts'
    # activation (nothing of it kept), but Megatron's shared experts check only
    # "shared_experts" (Megatron-LM d98e8a64dd moe_layer.py:252-255, the checkpoint at
    # :517-529; moe_act is read by the routed experts only, experts.py:271): their fused
    # SwiGLU still keeps its 4096 x 2 x 2048 fc1 output in 1 byte instead of 2, as the dense
    # layers' MLPs keep theirs
    lay = Layout(e=8, d=8)
    kw = dict(recompute="selective", recompute_modules=("core_attn", "moe_act"))
    saved = _acts("deepseek-v3", lay, **kw) - _acts("deepseek-v3", lay,
                                                    activation_func_fp8_input_store=True, **kw)
    assert saved == (58 + 1) * 4096 * 2 * 2048 + 3 * 4096 * 2 * 18432
