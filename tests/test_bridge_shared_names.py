"""A recipe name both of Megatron-Bridge's packages export (issue 32): read as
``scripts/training/run_recipe.py --recipe NAME`` reads it at Megatron-Bridge 067f987df0.

``load_recipe`` (scripts/training/recipe_runner.py:234-243) takes the performance recipe for
any name its family's ``perf_recipes/<family>/__init__.py`` exports
(``resolved_benchmark_recipe_metadata``, scripts/training/recipe_metadata.py:164-179); the
library recipe stays reachable through its generic alias (recipe_metadata.py:49-51) and, here,
its module path.  The expected values are the recipe functions' lines, read by hand.
"""

from __future__ import annotations

import json

import pytest

from memsym.errors import InvalidValueError
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.readers.bridge_names import SHARED, recipe_for_source
from in_process import run as cli

SFT = "llama3_70b_sft_32gpu_h100_bf16_config"
LIBRARY_SFT = "recipes.llama.h100.llama3." + SFT
GPT_OSS = "gpt_oss_120b_pretrain_64gpu_h100_bf16_config"
LIBRARY_GPT_OSS = "recipes.gpt_oss.h100.gpt_oss." + GPT_OSS


def _opts(name, *overrides):
    return bridge_job_options(read_bridge_recipe(name, list(overrides)))[1:]


def test_the_shared_names_are_bridges():
    """The nine names of BENCHMARK_RECIPE_PRECEDENCE_COLLISIONS (recipe_metadata.py:52-64) and
    nemotron_3_super_pretrain_64gpu_gb200_bf16_config, which that list leaves out but which
    both packages export (perf_recipes/nemotronh/__init__.py:29, recipes/nemotronh/
    __init__.py:23), so run_recipe.py resolves it the same way (the list only words a
    warning, recipe_runner.py:238-243)."""
    assert set(SHARED) == {
        "deepseek_v3_pretrain_1024gpu_h100_bf16_config", "glm52_sft_192gpu_gb200_bf16_config",
        "glm52_sft_416gpu_h100_bf16_config", "gpt_oss_120b_pretrain_64gpu_h100_bf16_config",
        "llama3_70b_peft_8gpu_h100_bf16_config", "llama3_70b_sft_32gpu_h100_bf16_config",
        "nemotron_3_nano_pretrain_8gpu_gb200_bf16_config",
        "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config",
        "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config",
        "nemotron_3_super_pretrain_64gpu_gb200_bf16_config"}


def test_the_bare_name_is_the_perf_recipe_the_module_path_the_library_one():
    """perf_recipes/llama/h100/llama3.py:290-318: TP 4, PP 4, VP 5, SP on (:304-307), GBS 32
    (:308), TP overlap on (:311); recipes/llama/h100/llama3.py:1762-1806: TP 8, PP 4, no VP,
    no SP (:1791-1796), GBS 8 (:1805).  Bridge's alias llama3_70b_sft_config
    (recipes/llama/llama3.py:56) is the library recipe, as run_recipe.py runs it."""
    reading = read_bridge_recipe(SFT)
    assert reading["source"].startswith(
        "src/megatron/bridge/perf_recipes/llama/h100/llama3.py:290 ")
    opts, notes = _opts(SFT)
    assert (opts["t"], opts["p"], opts["v"], opts["sequence_parallel"]) == (4, 4, 5, True)
    assert opts["global_batch_size"] == 32 and opts["tp_comm_overlap"] is True
    assert any(LIBRARY_SFT in n and "llama3_70b_sft_config" in n for n in notes)
    library = read_bridge_recipe(LIBRARY_SFT)
    assert library["source"].startswith("src/megatron/bridge/recipes/llama/h100/llama3.py:1762 ")
    lib_opts, lib_notes = _opts(LIBRARY_SFT)
    assert (lib_opts["t"], lib_opts["p"], lib_opts.get("v"), lib_opts["sequence_parallel"]) \
        == (8, 4, None, False)
    assert lib_opts["global_batch_size"] == 8
    assert any("library recipe" in n and f"--recipe {SFT} runs the performance" in n
               for n in lib_notes)
    assert _opts("llama3_70b_sft_config") == (lib_opts, lib_notes)
    assert _opts("perf_recipes.llama.h100.llama3." + SFT) == (opts, notes)


def test_gpt_oss_perf_and_library_layouts():
    """perf_recipes/gpt_oss/h100/gpt_oss.py:32-35: TP 1, PP 4, EP 8, no SP;
    recipes/gpt_oss/h100/gpt_oss.py:183-191: TP 2, PP 4, EP 16, SP on."""
    opts, _ = _opts(GPT_OSS)
    assert (opts["t"], opts["p"], opts["e"], opts["sequence_parallel"]) == (1, 4, 8, False)
    opts, _ = _opts(LIBRARY_GPT_OSS)
    assert (opts["t"], opts["p"], opts["e"], opts["sequence_parallel"]) == (2, 4, 16, True)
    assert _opts("gpt_oss_120b_pretrain_config")[0] == opts      # Bridge's alias: the library's


def _estimate(capsys, *words):
    code, out, err = cli(capsys, "estimate", *words, "--json")
    assert code == 0, err
    return json.loads(out)


def test_a_pasted_run_recipe_command_reads_what_bridge_runs(capsys):
    """``python scripts/training/run_recipe.py --recipe NAME``, ``--recipe NAME`` and
    ``--bridge-recipe NAME`` are one job: the perf recipe's layout (perf_recipes/llama/h100/
    llama3.py:304-307: TP 4, PP 4, VP 5 on 32 GPUs, so DP 2); the library module path
    another (recipes/llama/h100/llama3.py:1791-1792: TP 8, PP 4, DP 1)."""
    pasted = _estimate(capsys, "python", "scripts/training/run_recipe.py", "--recipe", SFT)
    flag = _estimate(capsys, "--bridge-recipe", SFT)
    assert pasted["bytes"] == flag["bytes"] and pasted["layout"] == flag["layout"]
    assert _estimate(capsys, "--recipe", SFT)["bytes"] == flag["bytes"]
    assert {k: flag["layout"][k] for k in ("tp", "pp", "vpp", "dp")} == \
        {"tp": 4, "pp": 4, "vpp": 5, "dp": 2}
    assert "perf_recipes/llama/h100/llama3.py:290" in flag["read_as"]
    library = _estimate(capsys, "--bridge-recipe", LIBRARY_SFT)
    assert {k: library["layout"][k] for k in ("tp", "pp", "dp")} == {"tp": 8, "pp": 4, "dp": 1}
    assert "recipes/llama/h100/llama3.py:1762" in library["read_as"]


def test_dora_on_a_perf_lora_recipe_is_refused_as_run_recipe_refuses_it():
    """validate_benchmark_recipe_scope (recipe_metadata.py:243-244): a perf PEFT recipe is a
    fixed LoRA config; --mode lora is accepted, dora refused."""
    name = "llama3_70b_peft_8gpu_h100_bf16_config"
    assert read_bridge_recipe(name, ["--mode=lora"])["values"]["peft"] == "LoRA"
    with pytest.raises(InvalidValueError, match="fixed LoRA config"):
        read_bridge_recipe(name, ["--mode=dora"])
    library = read_bridge_recipe("recipes.llama.h100.llama3." + name, ["--mode=dora"])
    assert library["values"]["peft"] == "DoRA"       # the library recipe takes peft_scheme


def test_a_measured_runs_file_names_its_recipe():
    """A run's ``path:function`` reads that file's recipe."""
    perf = "src/megatron/bridge/perf_recipes/gpt_oss/h100/gpt_oss.py:" + GPT_OSS + " (line 25)"
    library = "src/megatron/bridge/recipes/gpt_oss/h100/gpt_oss.py:" + GPT_OSS + " (line 162)"
    assert read_bridge_recipe(recipe_for_source(perf))["source"].startswith(perf.split(":")[0])
    assert read_bridge_recipe(recipe_for_source(library))["source"].startswith(
        library.split(":")[0])
    assert recipe_for_source("src/megatron/bridge/perf_recipes/llama/h100/llama3.py:"
                             "llama3_70b_pretrain_64gpu_h100_fp8cs_config") \
        == "llama3_70b_pretrain_64gpu_h100_fp8cs_config"
