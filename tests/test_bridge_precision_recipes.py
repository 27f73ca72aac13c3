"""Megatron-Bridge's named mixed-precision configs: the job memsym models has the FP8 recipe
(and FP8/FP4 parameter gather, gradient dtype) each config sets.

Every expected value is written from Megatron-Bridge 067f987df0
src/megatron/bridge/training/mixed_precision.py (the line beside it), never from memsym: the
MixedPrecisionConfig defaults fp8_recipe "tensorwise" (:50-52), fp8_param_gather False (:61),
grad_reduce_in_fp32 True (:47); fp16_mixed sets grad_reduce_in_fp32 False (:212).  memsym counts
delayed and tensorwise alike and has no blockwise recipe (memsym.vocabulary.FP8_RECIPES), so
blockwise is the job's tensorwise, said in a note.
"""

from __future__ import annotations

import json

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.readers.bridge_precision import recipe_precision

from tiny_megatron import tiny_megatron_states

# name -> (memsym precision, fp8_recipe, *_param_gather, grad_dtype), from the source lines
BRIDGE_CONFIGS = {
    # :217-232: fp8 "hybrid", fp8_recipe "delayed" (:227), fp8_param_gather True (:231)
    "bf16_with_fp8_delayed_scaling_mixed": ("fp8", "delayed", True, None),
    # :236-251: fp16_mixed's grad_reduce_in_fp32 False, "delayed" (:246), gather (:250)
    "fp16_with_fp8_delayed_scaling_mixed": ("fp8", "delayed", True, "fp16"),
    # :255-266: fp8 "e4m3", "mxfp8" (:263), gather (:264)
    "bf16_with_mxfp8_mixed": ("fp8", "mxfp8", True, None),
    # :270-281: "mxfp8" (:278), gather (:279)
    "fp16_with_mxfp8_mixed": ("fp8", "mxfp8", True, "fp16"),
    # :285-303: "tensorwise" (:298), gather (:302)
    "bf16_with_fp8_current_scaling_mixed": ("fp8", "tensorwise", True, None),
    # :307-325: "tensorwise" (:320), gather (:324)
    "nemotron_h_bf16_with_fp8_current_scaling_mixed": ("fp8", "tensorwise", True, None),
    # :329-347: "blockwise" (:342), gather (:346)
    "nanov2_bf16_with_fp8_current_scaling_mixed": ("fp8", "blockwise", True, None),
    # :351-369: "tensorwise" (:364), gather (:368)
    "fp16_with_fp8_current_scaling_mixed": ("fp8", "tensorwise", True, "fp16"),
    # :373-385: "blockwise" (:383), fp8_param_gather False (:384)
    "bf16_with_fp8_subchannel_scaling_mixed": ("fp8", "blockwise", False, None),
    # :389-401: "blockwise" (:399), no gather (:400)
    "fp16_with_fp8_subchannel_scaling_mixed": ("fp8", "blockwise", False, "fp16"),
    # :405-417: fp8 None (:412), fp4 "e2m1" (:413), fp4_param_gather True (:416)
    "bf16_with_nvfp4_mixed": ("fp4", None, True, None),
    # :421-429: bf16_with_nvfp4_mixed, the last 14 layers in BF16
    "nemotron_3_super_bf16_with_nvfp4_mixed": ("fp4", None, True, None),
}


@pytest.mark.parametrize("name", sorted(BRIDGE_CONFIGS))
def test_each_named_config_gives_its_recipe(name):
    prec, bridge_recipe, gather, grads = BRIDGE_CONFIGS[name]
    notes = []
    out = recipe_precision({"mixed_precision": name}, notes)
    assert out["precision"] == prec
    # memsym's recipe: Bridge's, blockwise counted as tensorwise (said in a note)
    want = {"blockwise": "tensorwise"}.get(bridge_recipe, bridge_recipe)
    assert out.get("fp8_recipe") == want
    assert (bridge_recipe == "blockwise") == any("blockwise" in n for n in notes)
    assert out.get(f"{prec}_param_gather", False) is gather
    assert out.get("grad_dtype") == grads
    # get_mixed_precision_config reads hyphens as underscores (mixed_precision.py:443)
    assert recipe_precision({"mixed_precision": name.replace("_", "-")}, []) == out


def test_fp8_switched_on_in_bf16_mixed_takes_the_config_default():
    """bf16_mixed (:185-197) sets no fp8_recipe: fp8="hybrid" on it runs the dataclass's
    "tensorwise" (:50-52), not Megatron-LM's --fp8-recipe default "delayed"."""
    out = recipe_precision({"mixed_precision": "bf16_mixed", "mixed_precision.fp8": "hybrid"}, [])
    assert (out["precision"], out["fp8_recipe"]) == ("fp8", "tensorwise")
    out = recipe_precision({"mixed_precision": "bf16_with_fp8_current_scaling_mixed",
                            "mixed_precision.fp8_recipe": "delayed"}, [])
    assert out["fp8_recipe"] == "delayed"


def test_fp8_with_fp4_and_an_unknown_recipe_are_refused():
    # MixedPrecisionConfig.finalize: fp4 and fp8 together raise (:107-108)
    with pytest.raises(InvalidValueError, match="fp8 and fp4"):
        recipe_precision({"mixed_precision": "bf16_with_nvfp4_mixed",
                          "mixed_precision.fp8": "hybrid"}, [])
    with pytest.raises(InvalidValueError, match="fp8_recipe"):
        recipe_precision({"mixed_precision": "bf16_with_fp8_current_scaling_mixed",
                          "mixed_precision.fp8_recipe": "nvfp4x"}, [])


def test_the_fp8cs_recipe_prints_tensorwise(capsys):
    """recipes/llama/h100/llama3.py:690 llama3_8b_pretrain_2gpu_h100_fp8cs_config runs
    bf16_with_fp8_current_scaling_mixed: fp8_recipe "tensorwise" (mixed_precision.py:298)."""
    argv = ["estimate", "--bridge-recipe", "llama3_8b_pretrain_2gpu_h100_fp8cs_config",
            "--gpu", "h100-80gb"]
    assert main(argv) == 1          # exit 1: the job does not fit the H100 (c = 2, no recompute)
    out = capsys.readouterr().out
    assert "precision fp8 (tensorwise)" in out and "default: fp8_recipe" not in out
    assert main(argv + ["--json"]) == 1
    assert json.loads(capsys.readouterr().out)["training"]["fp8_recipe"] == "tensorwise"


def test_megatron_reads_its_fp8_recipe():
    """Megatron-LM --fp8-recipe tensorwise is the job's tensorwise, not the default delayed."""
    states = tiny_megatron_states("--fp8-format hybrid --fp8-recipe tensorwise")
    assert states.fp8_recipe == "tensorwise"
