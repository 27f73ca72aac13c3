"""A softmax sink (softmax_type off-by-one or learnable) under FP8 attention, as Transformer
Engine's ``get_attention_backend`` decides it (issue 32).

Transformer Engine d0067d0da6, ``transformer_engine/pytorch/attention/dot_product_attention/
utils.py``, for training with ``fp8 and fp8_meta["recipe"].fp8_dpa``:

* :646-673: FlashAttention 2 and 4 off for FP8 attention (:651-656), FlashAttention 3 off for
  FP8 training (:657-660), the unfused attention off unless ``NVTE_UnfusedDPA_Emulate_FP8``
  (:666-673);
* :1122-1139: ``softmax_type != "vanilla"``: FlashAttention off (:1123-1124); under FP8
  attention cuDNN's fused attention off where ``device_compute_capability < (10, 0) or
  cudnn_version < (9, 21, 0)`` (:1125-1134), the unfused attention off (:1135-1139);
* :724-737: on compute capability 12.0 flash and fused attention both off for FP8.

So only cuDNN's fused attention is left, on compute capability 10.x (B200 / GB200 10.0, B300 /
GB300 10.3, NVIDIA's CUDA GPUs table) with cuDNN >= 9.21, and none on Hopper (9.0).  FP8
attention reaches TE from Megatron-Bridge's ``mixed_precision.fp8_dot_product_attention``
(training/mixed_precision.py:58 at 067f987df0) through Megatron-core's recipes (fp8_utils.py:
777-788: tensorwise and mxfp8 pass ``fp8_dpa``, blockwise's Float8BlockScaling does not, :781-784,
and TE's recipe default is False, common/recipe/__init__.py:441); Megatron-LM has no
command-line argument for it (arguments.py:2307, 2333-2334 at d98e8a64dd).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from in_process import run
from memsym.errors import InvalidValueError
from memsym.hardware import gpu
from memsym.readers import te_attention
from memsym.readers.bridge_precision import recipe_fp8_attention
from memsym.readers.te_attention import fp8_attention_notes

SINKS = ("off-by-one", "learnable")
FP8_DPA = ("delayed", "tensorwise", "mxfp8")


@pytest.mark.parametrize("kind", SINKS)
@pytest.mark.parametrize("recipe", FP8_DPA)
def test_a_sink_under_fp8_attention_has_no_backend_on_hopper(kind, recipe):
    for name in ("h100-80gb", "h200-141gb"):       # compute capability 9.0 < 10.0
        with pytest.raises(InvalidValueError, match="has no attention for it") as got:
            fp8_attention_notes(kind, recipe, name)
        assert "\n" not in str(got.value) and "1122-1139" in str(got.value)


@pytest.mark.parametrize("kind", SINKS)
@pytest.mark.parametrize("recipe", FP8_DPA)
def test_a_sink_under_fp8_attention_runs_cudnns_fused_attention_on_blackwell(kind, recipe):
    for name in ("b200", "gb200", "b300", "gb300"):   # 10.0, 10.0, 10.3, 10.3
        notes = fp8_attention_notes(kind, recipe, name)
        assert any("cuDNN's fused attention" in n and "9.21" in n for n in notes), notes


def test_sm120_runs_no_fp8_attention(monkeypatch):
    # no sm120 GPU in memsym's table: one with B200's figures and compute capability 12.0
    fake = dataclasses.replace(gpu("b200"), name="sm120", compute_capability=(12, 0))
    monkeypatch.setattr(te_attention, "gpu_named", lambda name: fake)
    with pytest.raises(InvalidValueError, match="724-737"):
        fp8_attention_notes("learnable", "delayed", "sm120")


def test_vanilla_softmax_or_no_fp8_attention_checks_no_backend():
    # the sink filter is softmax_type != "vanilla" under fp8_dpa alone
    assert all("softmax" not in n for n in fp8_attention_notes("vanilla", "delayed", "h100-80gb"))
    assert fp8_attention_notes("learnable", None, "h100-80gb") == []


def test_which_recipes_run_attention_in_fp8():
    on = {"mixed_precision.fp8_dot_product_attention": True}
    assert recipe_fp8_attention({"mixed_precision": "bf16_with_fp8_delayed_scaling_mixed",
                                 **on}) == "delayed"
    assert recipe_fp8_attention({"mixed_precision": "bf16_with_fp8_current_scaling_mixed",
                                 **on}) == "tensorwise"
    assert recipe_fp8_attention({"mixed_precision": "bf16_with_nvfp4_mixed", **on}) == "nvfp4"
    # blockwise: Float8BlockScaling gets no fp8_dpa; bf16: no FP8 autocast; the field off
    assert recipe_fp8_attention({"mixed_precision": "bf16_with_fp8_subchannel_scaling_mixed",
                                 **on}) is None
    assert recipe_fp8_attention({"mixed_precision": "bf16_mixed", **on}) is None
    assert recipe_fp8_attention({"mixed_precision": "bf16_with_mxfp8_mixed"}) is None


#: GPT-OSS 120B's GB200 MXFP8 perf recipe: _apply_gpt_oss_120b_full_iter_fp8mx_configs sets
#: mixed_precision.fp8_dot_product_attention = True (perf_recipes/gpt_oss/common.py:44), and
#: GPT-OSS's model bridge the learnable softmax (models/gpt_oss/gpt_oss_bridge.py:86).
GPT_OSS_FP8MX = ["--bridge-recipe", "gpt_oss_120b_pretrain_64gpu_gb200_fp8mx_config"]


def test_gpt_oss_fp8_attention_recipe_on_its_gpu_and_on_hopper(capsys):
    code, out, err = run(capsys, "estimate", *GPT_OSS_FP8MX, "--gpu", "gb200", "--json")
    assert code in (0, 1), err
    notes = json.loads(out)["notes"]
    assert any("learnable softmax under FP8 attention on gb200" in n
               and "cuDNN's fused attention" in n for n in notes), notes
    code, out, err = run(capsys, "estimate", *GPT_OSS_FP8MX, "--gpu", "h100-80gb")
    assert (code, out) == (2, "") and err.count("\n") == 1 and "Traceback" not in err
    code, out, err = run(capsys, "estimate", *GPT_OSS_FP8MX, "--json")
    assert code in (0, 1), err
    assert any("give --gpu" in n for n in json.loads(out)["notes"])


#: GPT-OSS 120B's H100 BF16 perf recipe given delayed-scaling FP8 with FP8 attention (delayed
#: scaling runs FP8 attention on Hopper's fused attention without a sink, utils.py:675-685).
H100_FP8_DPA = ["--bridge-recipe", "gpt_oss_120b_pretrain_64gpu_h100_bf16_config",
                "mixed_precision=bf16_with_fp8_delayed_scaling_mixed",
                "mixed_precision.fp8_dot_product_attention=true"]


@pytest.mark.parametrize("command", ["estimate", "search"])
def test_a_sink_under_fp8_attention_on_hopper_is_refused_in_one_line(capsys, command):
    code, out, err = run(capsys, command, *H100_FP8_DPA, "--gpu", "h100-80gb")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "learnable softmax under FP8 attention on h100-80gb" in err
    # vanilla (the override replaces the model bridge's learnable): no sink, the filter is off
    code, out, err = run(capsys, "estimate", *H100_FP8_DPA, "model.softmax_type=vanilla",
                         "--gpu", "h100-80gb")
    assert code in (0, 1), err
    # an off-by-one softmax is a sink to TE too
    code, out, err = run(capsys, "estimate", *H100_FP8_DPA, "model.softmax_type=off-by-one",
                         "--gpu", "h100-80gb")
    assert code == 2 and "off-by-one softmax under FP8 attention" in err


def test_megatron_lm_has_no_fp8_attention_argument(capsys):
    for flag in ("--fp8-dot-product-attention", "--fp8-multi-head-attention"):
        code, out, err = run(capsys, "estimate", "--world-size", 1, "--", "pretrain_gpt.py",
                             "--num-layers", 2, "--hidden-size", 256, "--num-attention-heads", 4,
                             "--seq-length", 512, "--max-position-embeddings", 512,
                             "--vocab-size", 1024, "--micro-batch-size", 1, "--bf16",
                             "--softmax-type", "learnable", flag)
        assert (code, out) == (2, "") and err.count("\n") == 1
        assert "has no Megatron-LM argument (arguments.py:2333-2334" in err
