"""Megatron-Bridge's SFT and PEFT recipes (issues 30 and 32): read from their source with their
own defaults, and LoRA's adapter count as LoRA's formula gives it.

Every expected value is written from the recipe source at Megatron-Bridge 067f987df0 (the
file:line beside it) or by hand from r(d_in + d_out) per adapted matrix, never from memsym.
"""

from __future__ import annotations

import json

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe


def test_llama3_70b_peft_recipe_reads_the_source_settings():
    """recipes/llama/h100/llama3.py:2576-2694 llama3_70b_peft_8gpu_h100_bf16_config, the
    library recipe: named by its module path, the bare name being the perf recipe's."""
    r = read_bridge_recipe("recipes.llama.h100.llama3.llama3_70b_peft_8gpu_h100_bf16_config")
    v = r["values"]
    assert r["hf_model"] == "meta-llama/Meta-Llama-3-70B"            # :2592
    assert v["dataset.seq_length"] == 4096 and v["model.seq_length"] == 4096   # :2598-2601
    assert v["peft"] == "LoRA"          # :2605 default_peft_config("lora") -> LoRA()
    assert (v["peft.dim"], v["peft.alpha"]) == (16, 32)              # :2608-2609
    # LoRA's own defaults (peft/lora.py:143-154), which the recipe keeps
    assert v["peft.target_modules"] == ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    assert v["peft.dropout"] == 0.0 and v["peft.lora_dtype"] is None
    assert v["peft.sequence_parallel_input_regather"] is False
    assert v["model.tensor_model_parallel_size"] == 8                 # :2616
    assert v["model.pipeline_model_parallel_size"] == 1               # :2617
    assert v["model.sequence_parallel"] is False                      # :2621
    assert (v["train.global_batch_size"], v["train.micro_batch_size"]) == (8, 1)   # :2630-2631
    assert v["ddp.use_distributed_optimizer"] is False                # :2683
    assert v["ddp.grad_reduce_in_fp32"] is False                      # :2684
    assert v["mixed_precision"] == "bf16_mixed"                       # :2624
    assert v["model.recompute_granularity"] is None                   # :2667
    # _peft_common's dataset: default_squad_config(..., enable_offline_packing=True)
    # (recipes/common.py:264, :298)
    assert v["dataset.enable_offline_packing"] is True
    assert r["world_size"] == 8


def test_qwen3_8b_peft_sets_its_fields_before_assigning_peft():
    """recipes/qwen/h100/qwen3.py:1662-1668: dim 8, alpha 16, qkv and proj only."""
    v = read_bridge_recipe("qwen3_8b_peft_1gpu_h100_bf16_config")["values"]
    assert (v["peft.dim"], v["peft.alpha"]) == (8, 16)
    assert v["peft.target_modules"] == ["linear_qkv", "linear_proj"]
    _, opts, _ = bridge_job_options(read_bridge_recipe("qwen3_8b_peft_1gpu_h100_bf16_config"))
    assert opts["finetune"] == "lora" and opts["lora_rank"] == 8
    assert opts["lora_targets"] == ("q", "k", "v", "o")


def test_an_sft_recipe_is_full_finetuning():
    """recipes/llama/h100/llama3.py:1548 llama3_8b_sft_2gpu_h100_bf16_config: _sft_common's
    peft=None (recipes/common.py:232)."""
    r = read_bridge_recipe("llama3_8b_sft_config")
    assert r["recipe"] == "llama3_8b_sft_2gpu_h100_bf16_config" and r["values"]["peft"] is None
    _, opts, _ = bridge_job_options(r)
    assert opts.get("finetune", "full") == "full"


def test_peft_overrides_and_refusals():
    r = read_bridge_recipe("llama3_8b_peft_config", ["peft.dim=4",
                                                     "peft.sequence_parallel_input_regather=true"])
    _, opts, _ = bridge_job_options(r)
    assert opts["lora_rank"] == 4 and opts["lora_regather"] is True
    for words in (["peft=dora"], ["peft.lora_dtype=float32"], ["peft.target_modules=[*.linear_qkv]"],
                  ["peft.exclude_modules=[linear_fc2]"]):
        with pytest.raises(InvalidValueError):
            bridge_job_options(read_bridge_recipe("llama3_8b_peft_config", words))
    with pytest.raises(InvalidValueError):      # a PEFT field on a recipe without PEFT
        read_bridge_recipe("llama3_8b_sft_config", ["peft.dim=8"])
    with pytest.raises(InvalidValueError):      # run_recipe.py refuses --mode lora there
        read_bridge_recipe("llama3_8b_pretrain_config", ["peft=lora"])


def test_estimate_of_a_peft_recipe_counts_lora_by_hand(capsys):
    """Llama-3 8B (h 4096, 32 heads and 8 groups of 128, f 14336, 32 layers) at r = 8 on
    linear_qkv, linear_proj, linear_fc1, linear_fc2 (llama3.py:2368): one adapter per module,
    r(d_in + d_out): 8(4096 + 6144) + 8(4096 + 4096) + 8(4096 + 28672) + 8(14336 + 4096)
    = 557056 per layer, x 32 = 17825792 adapter parameters, bf16 (2 bytes, bf16_mixed's
    params_dtype) on the one GPU (TP 1)."""
    code = main(["estimate", "--bridge-recipe", "llama3_8b_peft_1gpu_h100_bf16_config",
                 "--gpu", "h100-80gb", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    per_layer = 8 * (4096 + 6144) + 8 * (4096 + 4096) + 8 * (4096 + 28672) + 8 * (14336 + 4096)
    assert per_layer * 32 == 17825792
    assert data["bytes"]["adapter_weights"] == 2 * 17825792


def test_qlora_under_megatron_keeps_peft_adapters(capsys):
    """A QLoRA job is bitsandbytes + PEFT whatever the framework (Bridge has no 4-bit base), so
    its adapters sit on transformers' separate projections, while a LoRA job under Megatron
    puts one on each fused module.  Llama-2 7B (config.json: h 4096, 32 heads, f 11008, 32
    layers) at r = 16 on all seven projections, LoRA's r (d_in + d_out) per adapted matrix:
    PEFT  16 (4 * 2h + 3 (h + f)) = 1,249,280 per layer, fp32 (PEFT's adapters);
    Bridge 16 ((h + 3h) + 2h + (h + 2f) + (f + h)) = 1,052,672 per layer, bf16."""
    h, f = 4096, 11008
    peft = 32 * 16 * (4 * 2 * h + 3 * (h + f))
    bridge = 32 * 16 * ((h + 3 * h) + 2 * h + (h + 2 * f) + (f + h))
    assert (peft, bridge) == (39_976_960, 33_685_504)
    got = {}
    for mode in ("qlora", "lora"):
        assert main(["estimate", "llama2-7b", "--finetune", mode, "--lora-rank", "16",
                     "--lora-targets", "q,k,v,o,gate,up,down", "--seq-length", "2048",
                     "--json"]) == 0
        got[mode] = json.loads(capsys.readouterr().out)["bytes"]["adapter_weights"]
    assert got == {"qlora": 4 * peft, "lora": 2 * bridge}


def test_dora_mode_is_refused_in_one_line(capsys):
    code = main(["estimate", "--bridge-recipe", "llama3_8b_peft_config", "--mode", "dora",
                 "--gpu", "h100-80gb"])
    err = capsys.readouterr().err
    assert code == 2 and "DoRA" in err and len(err.strip().splitlines()) == 1


def test_mode_against_the_recipe_and_vlm_refused():
    """scripts/training/recipe_metadata.py:209-225: the mode must match the recipe's name."""
    with pytest.raises(InvalidValueError):
        read_bridge_recipe("llama3_8b_peft_config", ["--mode=sft"])
    assert read_bridge_recipe("llama3_8b_peft_config", ["--mode=lora"])["values"]["peft"] == "LoRA"
    with pytest.raises(InvalidValueError, match="vision-language"):
        read_bridge_recipe("qwen25_vl_3b_peft_config")


#: Seed 001's LoRA + SP input re-gather runs (mbridge-memory-tuning, Measured Results) as the
#: recipe name plus the overrides the table and the 33655ef845 recipes it ran describe: the
#: printed TP / EP and sequence length (8192 printed for Qwen3-8B; the MoE rows' lengths as
#: formulas/measured_memory.toml reads them off the savings), sequence parallelism (the
#: re-gather needs it), ETP 1 and, for Qwen3-8B, _peft_common's LoRA (dim 32 on the four
#: modules) which 067f987df0's recipe replaced by dim 8 on linear_qkv and linear_proj.
SEED001_LORA = {
    "qwen3-8b": ("qwen3_8b_peft_config", ["-tp", "2", "dataset.seq_length=8192", "peft.dim=32",
             "peft.target_modules=[linear_qkv,linear_proj,linear_fc1,linear_fc2]"], 47.545, 42.814),
    "qwen3-30b-a3b": ("qwen3_30b_a3b_peft_config", ["-tp", "4", "-ep", "4", "-etp", "1",
                                                    "dataset.seq_length=8192"], 29.890, 28.321),
    "gpt-oss-120b": ("gpt_oss_120b_peft_config", ["-tp", "2", "-ep", "8", "-etp", "1",
                                                  "dataset.seq_length=4096"], 52.185, 51.371),
}


@pytest.mark.parametrize("model", sorted(SEED001_LORA))
def test_seed001_lora_runs_as_recipe_commands(capsys, model):
    """The recipe commands give the data file's prediction of the same runs
    (tools/measured.py), within 10 % of the measured peaks, and the re-gather below."""
    from tools import measured

    recipe, words, base, regather = SEED001_LORA[model]
    got = []
    for on in ("false", "true"):
        code = main(["estimate", "--bridge-recipe", recipe, *words, "model.sequence_parallel=true",
                     f"peft.sequence_parallel_input_regather={on}", "--world-size", "8",
                     "--gpu", "h100-80gb", "--metric", "allocated", "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        got.append(json.loads(out)["bytes"]["total"])
    rows = [measured.predict(f"seed001.{model}.lora{tail}").total for tail in ("", "-regather")]
    assert [round(g / 1e7) for g in got] == [round(float(r) / 1e7) for r in rows]
    assert got[1] < got[0]
    for g, m in zip(got, (base, regather)):
        assert abs(g / (m * 1e9) - 1) < 0.10
