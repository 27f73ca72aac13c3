"""What ``scripts/training/run_recipe.py`` changes in a performance (benchmark) recipe after the
overrides (issue 32), read at Megatron-Bridge 067f987df0: the precision-aware optimizer of a
bf16 Adam benchmark (``_apply_benchmark_runtime_defaults``, run_recipe.py:377-394), the weak
scaling of its global batch (``_apply_benchmark_weak_scaling``, run_recipe.py:343-374, with
``weak_scaled_global_batch_size``, scripts/common/benchmark_parallelism.py:126-141), and the
options it refuses (``validate_benchmark_recipe_scope``, recipe_metadata.py:228-256).

The recipe: perf_recipes/llama/h100/llama3.py:34-47, llama3_8b_pretrain_8gpu_h100_bf16_config:
8 GPUs (its name), TP 1, PP 1, CP 2, global batch 128, micro-batch 1, so DP 8 / 2 = 4.
"""

from __future__ import annotations

import json

import pytest

from memsym.errors import InvalidValueError
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from in_process import run as cli

PERF = "llama3_8b_pretrain_8gpu_h100_bf16_config"
SFT = "llama3_70b_sft_32gpu_h100_bf16_config"
LIBRARY_SFT = "recipes.llama.h100.llama3." + SFT


def _opts(name, *overrides, world_size=None):
    reading = read_bridge_recipe(name, list(overrides), world_size=world_size)
    return bridge_job_options(reading)[1:]


def test_a_bf16_benchmark_runs_the_precision_aware_optimizer():
    """run_recipe.py:384-393: ``metadata.precision == "bf16"`` (the name's) and
    ``optimizer.optimizer == "adam"`` (recipes/common.py:53, the base's Adam) and no override
    naming ``optimizer`` or ``optimizer.use_precision_aware_optimizer``: turned on."""
    opts, notes = _opts(PERF)
    assert opts["precision_aware"] is True
    assert any("precision-aware optimizer" in n and "run_recipe.py:377-394" in n for n in notes)
    opts, notes = _opts(PERF, "optimizer.use_precision_aware_optimizer=false")
    assert opts["precision_aware"] is False
    assert not any("precision-aware" in n for n in notes)


def test_an_fp8_benchmark_and_a_library_recipe_keep_their_optimizer():
    """The default is the bf16 benchmarks' alone: perf_recipes/llama/h100/llama3.py:72 (fp8cs)
    keeps the recipe's False; the library twin of a shared name (recipes/llama/h100/
    llama3.py:1762, its module path) is no benchmark (resolved_benchmark_recipe_metadata,
    recipe_metadata.py:175-179), while its bare name, the perf recipe, gets it."""
    assert _opts("llama3_8b_pretrain_8gpu_h100_fp8cs_config")[0].get("precision_aware") \
        in (None, False)
    assert _opts(LIBRARY_SFT)[0].get("precision_aware") in (None, False)
    assert _opts(SFT)[0]["precision_aware"] is True


def test_a_tp_override_weak_scales_the_global_batch():
    """-tp 2 on 8 GPUs: DP 8 / (2 x 1 x 2) = 2 against the recipe's 4, so the batch is
    128 x 2 / 4 = 64 (benchmark_parallelism.py:141), said in a note."""
    opts, notes = _opts(PERF, "model.tensor_model_parallel_size=2")
    assert opts["global_batch_size"] == 128 * 2 // 4 == 64
    assert any("global batch 128 -> 64" in n and "run_recipe.py:343-374" in n for n in notes)
    # 16 GPUs at TP 2: DP 16 / 4 = 4, the recipe's: kept
    assert _opts(PERF, "model.tensor_model_parallel_size=2", world_size=16)[0][
        "global_batch_size"] == 128
    # 16 GPUs at the recipe's layout: DP 8, the batch 128 x 8 / 4
    assert _opts(PERF, world_size=16)[0]["global_batch_size"] == 256


def test_a_given_global_batch_is_kept():
    """run_recipe.py:356: an override naming train.global_batch_size (-gb N is one,
    run_recipe.py COMMON_OVERRIDE_FIELDS) is not scaled."""
    opts, notes = _opts(PERF, "model.tensor_model_parallel_size=2", "train.global_batch_size=96")
    assert opts["global_batch_size"] == 96
    assert not any("global batch" in n for n in notes)


def test_a_library_recipe_is_not_weak_scaled():
    """recipes/llama/h100/llama3.py:1791-1792 (TP 8, PP 4 on 32 GPUs): a library recipe keeps
    its batch (8, :1799) whatever the layout."""
    opts, _ = _opts(LIBRARY_SFT, "model.tensor_model_parallel_size=4")
    assert opts["global_batch_size"] == 8


def test_a_grid_the_world_does_not_hold_and_a_fractional_batch_are_refused():
    """benchmark_parallelism.py:86-104: TP*PP*CP must divide the GPUs (TP 3 on 8).  :135-140:
    the scaled batch must be whole: nemotronh_56b_pretrain_256gpu_b200_bf16_config
    (perf_recipes/nemotronh/b200/nemotronh.py:370-373 on :39-45: TP 2, batch 192, so DP
    256 / 2 = 128) on 2 GPUs is DP 1, and 192 x 1 / 128 is no whole batch.  The 64gpu H100
    DeepSeek-V3 recipe keeps the 1024-GPU layout (perf_recipes/deepseek/h100/deepseek_v3.py:
    163-166 on :35-38: PP 8, EP 64, ETP 1): ETP*EP*PP = 512 does not divide its 64 GPUs
    (:106-121), so run_recipe.py refuses it at any world size."""
    with pytest.raises(InvalidValueError, match="TP \\* PP \\* CP"):
        read_bridge_recipe(PERF, ["model.tensor_model_parallel_size=3"])
    with pytest.raises(InvalidValueError, match="no whole batch"):
        read_bridge_recipe("nemotronh_56b_pretrain_256gpu_b200_bf16_config", [], world_size=2)
    assert read_bridge_recipe("nemotronh_56b_pretrain_256gpu_b200_bf16_config", [],
                              world_size=4)["values"]["train.global_batch_size"] == 192 * 2 // 128
    with pytest.raises(InvalidValueError, match="ETP \\* EP \\* PP \\(1 \\* 64 \\* 8 = 512\\)"):
        read_bridge_recipe("deepseek_v3_pretrain_64gpu_h100_bf16_config", [], world_size=1024)


def test_run_recipes_dataset_is_refused_for_a_benchmark(capsys):
    """recipe_metadata.py:251-255: a benchmark recipe owns its dataset; memsym says so in one
    line (exit 2), and reads a library recipe's --dataset as not modelled."""
    code, out, err = cli(capsys, "estimate", "python", "scripts/training/run_recipe.py",
                         "--recipe", PERF, "--dataset", "mock")
    assert code == 2 and "owns its dataset" in err and "Traceback" not in err
    code, out, err = cli(capsys, "estimate", "--bridge-recipe", LIBRARY_SFT, "--dataset",
                         "mock", "--json")
    assert code == 0, err
    with pytest.raises(InvalidValueError, match="llm_step"):
        read_bridge_recipe(PERF, ["--step-func=vlm_step"])
    read_bridge_recipe(PERF, ["--step-func=gpt_step"])     # a text step matches llm_step


def test_the_estimate_says_what_run_recipe_changed(capsys):
    code, out, err = cli(capsys, "estimate", "--bridge-recipe", PERF, "-tp", "2", "--json")
    assert code == 0, err
    got = json.dumps(json.loads(out))
    assert "global batch 128 -> 64" in got and "precision-aware optimizer" in got


def test_deterministic_turns_off_loss_fusion_and_tp_overlap_before_the_overrides():
    """run_recipe.py --deterministic (run_recipe.py:258, applied at :478 before the overrides
    at :484): recipes/utils/determinism_utils.py:37 and :47 turn off the fused cross-entropy
    and TP overlap.  llama3_70b_pretrain_64gpu_h100_bf16_config keeps its base's
    CommOverlapConfig(tp_comm_overlap=True) at TP 4 with SP (comm_overlap.py:442-448), and
    _benchmark_common's fused "te" loss (perf_recipes/_common.py:31)."""
    name = "llama3_70b_pretrain_64gpu_h100_bf16_config"
    opts, _ = _opts(name)
    assert opts["tp_comm_overlap"] is True and opts["cross_entropy_fusion_impl"] == "te"
    opts, notes = _opts(name, "--deterministic")
    assert opts["tp_comm_overlap"] is False and "cross_entropy_fusion_impl" not in opts
    assert any(n.startswith("--deterministic") for n in notes)
    # an override comes after apply_determinism, so it wins wherever it stands
    opts, _ = _opts(name, "comm_overlap.tp_comm_overlap=true", "--deterministic")
    assert opts["tp_comm_overlap"] is True


def test_run_recipes_switches_are_read_from_a_pasted_command(capsys):
    code, out, err = cli(capsys, "estimate", "python", "scripts/training/run_recipe.py",
                         "--recipe", PERF, "--dry-run", "--deterministic", "--json")
    assert code == 0, err
    assert "--deterministic: run_recipe.py turns off" in out
    code, out, err = cli(capsys, "estimate", "--bridge-recipe", PERF, "--deterministic=1")
    assert code == 2 and "switch" in err
