"""One reading of a job (issue 28): pasted words, a launch script and an argument file are the
same job; an argument Megatron-LM ignores for memory and time changes no number; memsym's own
options are honoured in every reading; a value that looks like a word is a value.

The oracles: the six example scripts of NVIDIA/Megatron-LM (tests/test_readers_megatron.py,
verbatim, whose reader is checked there against Megatron's own parameter count), Megatron's
argument table (which options take values, which it models), and published configurations
(DeepSeek-V3's ``first_k_dense_replace = 3`` of 61 layers).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsym.cli import main
from memsym.model import Architecture, parameter_count, preset
from memsym.readers.launch_script import read_launch_script
from memsym.readers.megatron_arguments import MODELOPT as _MODELOPT, TABLE as _TABLE
from memsym.readers.megatron_effects import NO_EFFECT as _NO_EFFECT
from test_readers_megatron import EXPECTED, SCRIPTS
from in_process import run

EXTRA = {"qwen3_30b_a3b": ["--sequence-parallel"]}   # see tests/test_paste_command.py


def estimate_json(capsys, *argv) -> dict:
    code, out, err = run(capsys, "estimate", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _torchrun_split(words):
    """(torchrun's options, the training script's arguments) of a script's words."""
    k = 0
    while k < len(words) and words[k] in ("--nproc_per_node", "--nnodes", "--node_rank",
                                          "--master_addr", "--master_port"):
        k += 2
    return words[:k], words[k:]


# --- pasting ---------------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(SCRIPTS))
def test_pasted_scripts_equal_the_launch_script(capsys, tmp_path, key):
    path = tmp_path / f"{key}.sh"
    path.write_text(SCRIPTS[key][2], encoding="utf-8")
    added = EXPECTED[key]["added"] + EXTRA.get(key, [])
    via_script = estimate_json(capsys, "--launch-script", path, *added)
    words = read_launch_script(SCRIPTS[key][2])
    launcher, rest = _torchrun_split(words)
    argfile = tmp_path / "args.txt"
    argfile.write_text(shlex.join(rest), encoding="utf-8")
    for pasted in (words,                                                    # no launcher
                   ["torchrun", *launcher, "pretrain_gpt.py", *rest],        # torchrun
                   ["python", "-m", "torch.distributed.run", *launcher,      # its module
                    "pretrain_gpt.py", *rest],
                   [*added[:0], "python", "pretrain_gpt.py", *launcher, *rest]):
        assert estimate_json(capsys, *pasted, *added) == via_script
    assert estimate_json(capsys, *launcher, "--args-file", argfile, *added) == via_script
    # the count of the model Megatron builds (checked against Megatron's own formula in
    # test_readers_megatron): the pasted words give the same model
    mj_arch = via_script["params"]
    assert mj_arch == estimate_json(capsys, *words, *added)["params"]


def test_the_issue_command_is_read(capsys):
    # `--lr 3e-4` used to be taken for the MODEL ("--lr needs a value")
    data = estimate_json(capsys, "--num-layers", 24, "--hidden-size", 1024,
                         "--num-attention-heads", 16, "--seq-length", 1024,
                         "--max-position-embeddings", 1024, "--vocab-size", 50257,
                         "--world-size", 8, "--lr", "3e-4", "--micro-batch-size", 4,
                         "--position-embedding-type", "rope")
    assert data["ignored"] == ["--lr"]
    # GPT-2 medium as Megatron builds it without --bf16: 24 layers of 12h^2 + 13h, rope (no
    # position table), the vocabulary padded to 128 (50257 -> 50304), final LayerNorm 2h
    h = 1024
    assert data["params"] == 24 * (12 * h * h + 13 * h) + 50257 * h + 2 * h
    assert data["layout"]["dp"] == 8


def test_environment_and_deepspeed_launcher_give_the_world_size(capsys):
    base = ["--num-layers", 2, "--hidden-size", 64, "--num-attention-heads", 4,
            "--seq-length", 32, "--max-position-embeddings", 32, "--vocab-size", 1000,
            "--micro-batch-size", 1, "--bf16"]
    env = estimate_json(capsys, "WORLD_SIZE=16", "CUDA_DEVICE_MAX_CONNECTIONS=1", "torchrun",
                        "pretrain_gpt.py", *base)
    ds = estimate_json(capsys, "deepspeed", "--num_gpus", 8, "--num_nodes", 2,
                       "pretrain_gpt.py", *base)
    assert env["layout"]["dp"] == ds["layout"]["dp"] == 16


def test_a_command_pasted_after_a_double_dash_is_the_same_command(capsys):
    # `memsym estimate -- torchrun ...` (the shell's end-of-options convention before a pasted
    # command) used to take every word after `--` for a MODEL ("unexpected word")
    base = ["--num-layers", 2, "--hidden-size", 64, "--num-attention-heads", 4,
            "--seq-length", 32, "--max-position-embeddings", 32, "--vocab-size", 1000,
            "--micro-batch-size", 1, "--bf16"]
    plain = estimate_json(capsys, "torchrun", "--nproc_per_node", 8, "pretrain_gpt.py", *base)
    assert estimate_json(capsys, "--", "torchrun", "--nproc_per_node", 8, "pretrain_gpt.py",
                         *base) == plain
    env = estimate_json(capsys, "--", "WORLD_SIZE=8", "torchrun", "pretrain_gpt.py", *base)
    # the same job; only the note saying where the world size came from differs
    assert {k: v for k, v in env.items() if k != "notes"} == \
        {k: v for k, v in plain.items() if k != "notes"}
    # a `--` before anything else keeps argparse's meaning: what follows is positional
    code, out, err = run(capsys, "estimate", "--", "llama3-8b", "--tp", 2)
    assert code == 2 and out == "" and "unexpected word '--tp'" in err


def test_a_model_before_or_after_the_command(capsys):
    args = ["--tensor-model-parallel-size", 2, "--seq-length", 4096, "--lr", "3e-4"]
    before = estimate_json(capsys, "llama2-7b", *args)
    after = estimate_json(capsys, "torchrun", "pretrain_gpt.py", *args, "llama2-7b")
    assert before == after
    assert before["model"] == "llama2-7b" and before["layout"]["tp"] == 2


# --- one reading -----------------------------------------------------------------------------
def numbers(report: dict) -> dict:
    """A report without what it says of the input (the defaults it applied, the arguments it
    ignored): the job's numbers and settings."""
    return {k: v for k, v in report.items() if k not in ("defaults", "ignored")}


def test_a_harmless_flag_changes_nothing(capsys):
    # --bf16 on a bf16 recipe changes no number (the report then lists precision as given)
    plain = estimate_json(capsys, "llama2-7b", "--seq-length", 4096)
    bf16 = estimate_json(capsys, "llama2-7b", "--seq-length", 4096, "--bf16")
    assert numbers(bf16) == numbers(plain)
    assert [d["option"] for d in plain["defaults"] if d["option"] == "precision"] == ["precision"]
    assert "precision" not in [d["option"] for d in bf16["defaults"]]
    zero3 = estimate_json(capsys, "llama2-7b", "--seq-length", 4096, "--sharding", "zero3")
    assert zero3["bytes"]["total"] < plain["bytes"]["total"]
    assert numbers(estimate_json(capsys, "llama2-7b", "--seq-length", 4096, "--sharding",
                                 "zero3", "--bf16")) == numbers(zero3)
    tp2 = estimate_json(capsys, "llama2-7b", "--tp", 2)
    assert estimate_json(capsys, "llama2-7b", "--tensor-model-parallel-size", 2,
                         "--train-iters", 100)["ignored"] == ["--train-iters"]
    assert numbers(estimate_json(capsys, "llama2-7b", "--tensor-model-parallel-size", 2,
                                 "--train-iters", 100)) == numbers(tp2)
    assert numbers(estimate_json(capsys, "llama2-7b", "--tp", 2, "--bf16")) == numbers(tp2)


_SMALL_MEGATRON = ("--num-layers", 2, "--hidden-size", 256, "--num-attention-heads", 4,
                   "--seq-length", 1024, "--max-position-embeddings", 1024, "--vocab-size",
                   1024, "--micro-batch-size", 1, "--world-size", 1, "--bf16")


def test_use_flash_attn_is_read_as_megatron_reads_it(capsys):
    # Megatron-LM d98e8a64dd parses --use-flash-attn (arguments.py:2910) and reads it nowhere
    # (its one other mention, training/determinism.py:150, is a comment): the kernel is
    # --attention-backend's, so the flag neither turns the scores off nor contradicts a backend
    plain = estimate_json(capsys, *_SMALL_MEGATRON)
    flash = estimate_json(capsys, *_SMALL_MEGATRON, "--use-flash-attn")
    assert numbers(flash) == numbers(plain) and "--use-flash-attn" in flash["ignored"]
    unfused = estimate_json(capsys, *_SMALL_MEGATRON, "--attention-backend", "unfused")
    both = estimate_json(capsys, *_SMALL_MEGATRON, "--attention-backend", "unfused",
                         "--use-flash-attn")            # was refused as a contradiction
    assert both["bytes"] == unfused["bytes"]
    assert unfused["bytes"]["total"] > plain["bytes"]["total"]      # the s x s scores kept
    local = estimate_json(capsys, *_SMALL_MEGATRON, "--transformer-impl", "local",
                          "--use-flash-attn")
    assert local["training"]["flash_attention"] is False


def test_fp8_recipes_memsym_does_not_model_are_counted_alike_on_every_path(capsys, tmp_path):
    # Megatron-core's blockwise and custom recipes (transformer_config.py at d98e8a64dd) are
    # counted as tensorwise, the per-tensor current-scaling recipe, by the pasted arguments, a
    # launch script and a Bridge recipe alike (memsym.vocabulary.FP8_RECIPE_COUNTED_AS); they
    # were counted as delayed by the first two and as tensorwise by the third, and the report
    # listed "--fp8-recipe delayed" as a default applied to a job that gave one
    tiny = (*_SMALL_MEGATRON, "--fp8-format", "hybrid", "--gpu", "h100-80gb")
    tensorwise = estimate_json(capsys, *tiny, "--fp8-recipe", "tensorwise")
    for recipe in ("blockwise", "custom"):
        rep = estimate_json(capsys, *tiny, "--fp8-recipe", recipe)
        assert rep["training"]["fp8_recipe"] == "tensorwise"
        assert rep["bytes"] == tensorwise["bytes"]
        assert rep["step_time_s"] == tensorwise["step_time_s"]
        assert "fp8_recipe" not in [d["option"] for d in rep["defaults"]]
        assert any(n.startswith(f"--fp8-recipe {recipe}: counted as FP8 tensorwise")
                   for n in rep["notes"])
    script = tmp_path / "train.sh"
    script.write_text("torchrun pretrain_gpt.py " + " ".join(
        map(str, (*_SMALL_MEGATRON, "--fp8-format", "hybrid", "--fp8-recipe", "blockwise"))))
    read = estimate_json(capsys, "--launch-script", str(script), "--gpu", "h100-80gb")
    assert read["training"]["fp8_recipe"] == "tensorwise" and read["bytes"] == tensorwise["bytes"]


def test_bridge_words_without_bridge_recipe_say_how_bridge_is_written(capsys):
    # a recipe name where the MODEL goes, or a Bridge override with a preset, is one line
    # naming --bridge-recipe (was "unknown model" / "unexpected word ... quote it?")
    for argv, said in ((["llama3_70b_pretrain_config"], "is a Megatron-Bridge recipe"),
                       (["llama3_70b_pretrain_config", "model.tensor_model_parallel_size=4"],
                        "is a Megatron-Bridge recipe"),
                       (["llama3-70b", "model.tensor_model_parallel_size=4"],
                        "is a Megatron-Bridge override")):
        code, out, err = run(capsys, "estimate", *argv, "--gpu", "h100-80gb")
        assert code == 2 and out == "" and err.count("\n") == 1 and said in err, err
        assert "--bridge-recipe" in err
    # the recipe itself, given as Bridge's command is written, is read
    code, out, err = run(capsys, "estimate", "--bridge-recipe", "llama3_70b_pretrain_config",
                         "model.tensor_model_parallel_size=4", "--gpu", "h100-80gb")
    assert code in (0, 1) and "Megatron-Bridge recipe" in out, err


def test_contradictions_are_refused(capsys):
    for argv in (["llama2-7b", "--precision", "fp16", "--bf16"],
                 ["llama2-7b", "--bf16", "--fp16"],
                 ["--num-layers", 2, "--hidden-size", 64, "--num-attention-heads", 4,
                  "--seq-length", 32, "--vocab-size", 1000, "--micro-batch-size", 1,
                  "--world-size", 1, "--bf16", "--precision", "fp16"]):
        code, out, err = run(capsys, "estimate", *argv)
        assert code == 2 and out == "" and err.count("\n") == 1, err


def test_padded_vocab_size_beside_a_model_is_its_rows_on_memsyms_layout(capsys, tmp_path):
    # Megatron builds args.padded_vocab_size rows as given (gpt_builders.py:89) and splits them
    # evenly over TP (tensor_parallel/utils.py:118): the rows meet memsym's --tp
    argfile = tmp_path / "args.txt"
    argfile.write_text("--padded-vocab-size 32002\n", encoding="utf-8")
    base = ["llama2-7b", "--world-size", 8, "--args-file", argfile]
    code, out, err = run(capsys, "estimate", *base, "--tp", 4)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "size 4 does not divide the vocabulary of 32002 rows" in err
    rows = estimate_json(capsys, *base, "--tp", 2)["params"]
    arch = dataclasses.replace(preset("llama2-7b"), vocab_size=32002,
                               make_vocab_size_divisible_by=1)
    # 2 x 4096 more rows than the published 32000 (Llama 2's untied embedding and output layer)
    assert rows == parameter_count(preset("llama2-7b")) + 2 * 2 * 4096
    assert rows == parameter_count(arch, t=2, pad_vocab=True)


def test_memsym_options_are_honoured_in_the_megatron_reading(capsys):
    base = ["--num-layers", 4, "--hidden-size", 256, "--num-attention-heads", 4,
            "--seq-length", 128, "--max-position-embeddings", 128, "--vocab-size", 1000,
            "--micro-batch-size", 1, "--world-size", 8, "--bf16"]
    megatron = estimate_json(capsys, *base, "--use-distributed-optimizer")
    assert numbers(estimate_json(capsys, *base, "--sharding", "distributed-optimizer")) == \
        numbers(megatron)
    ddp = estimate_json(capsys, *base)
    zero3 = estimate_json(capsys, *base, "--sharding", "zero3")
    assert zero3["bytes"]["weights"] * 8 == ddp["bytes"]["weights"]   # 16-bit weights / d
    # memsym's shorthand and Megatron's spelling are one argument
    assert estimate_json(capsys, *base, "--tp", 2) == \
        estimate_json(capsys, *base, "--tensor-model-parallel-size", 2)


def test_word_like_values_are_values(capsys):
    # DeepSeek-V3: first_k_dense_replace = 3 dense layers of 61 (config.json), Megatron's
    # pattern "([0]*3+[1]*58)" (examples/deepseek_v3): the preset's own layer pattern
    plain = estimate_json(capsys, "deepseek-v3", "--seq-length", 4096, "--ep", 8, "--dp", 8)
    again = estimate_json(capsys, "deepseek-v3", "--seq-length", 4096, "--ep", 8, "--dp", 8,
                          "--moe-layer-freq", "([0]*3+[1]*58)")
    assert again == plain
    other = estimate_json(capsys, "deepseek-v3", "--seq-length", 4096, "--ep", 8, "--dp", 8,
                          "--moe-layer-freq", "([0]*1+[1]*60)")
    assert other["params"] > plain["params"]


def test_query_groups_follow_megatron_and_the_model(capsys):
    # Llama-3 8B has 8 KV heads (config.json num_key_value_heads): --num-query-groups changes them
    four = estimate_json(capsys, "llama3-8b", "--seq-length", 4096, "--num-query-groups", 4)
    plain = estimate_json(capsys, "llama3-8b", "--seq-length", 4096)
    # K and V projections (h x 128 per group, no bias) of 4 groups fewer, in 32 layers
    assert plain["params"] - four["params"] == 2 * 4096 * 4 * 128 * 32
    # Llama-2 7B is multi-head: Megatron ignores the count without --group-query-attention
    mha = estimate_json(capsys, "llama2-7b", "--seq-length", 4096, "--num-query-groups", 4)
    assert mha["params"] == estimate_json(capsys, "llama2-7b", "--seq-length", 4096)["params"]
    assert any("--num-query-groups has no effect" in n for n in mha["notes"])


def test_plot_memory_vs_takes_its_unknown_as_a_word(capsys, tmp_path):
    out = tmp_path / "m.png"
    code, stdout, err = run(capsys, "plot", "memory-vs", "dp", "llama2-7b", "--seq-length",
                            4096, "-o", out)
    assert code == 0, err and out.exists()


def test_unknown_argument_is_one_line(capsys):
    code, out, err = run(capsys, "estimate", "llama2-7b", "--num-layerz", 4)
    assert code == 2 and out == "" and err.count("\n") == 1 and "--num-layers" in err


# --- the property: arguments without effect, and order -----------------------------------------
#: Megatron-LM arguments its reader marks as not changing memory or time (not modelled, not
#: refused, not noted), with a value of the right shape for their arity.


def _estimate_options() -> set:
    """The option strings of memsym's own ``estimate`` command."""
    from memsym.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {o for a in sub.choices["estimate"]._actions for o in a.option_strings}


# Megatron flags without effect on a step (memsym.readers.megatron_effects.NO_EFFECT), so
# each is listed as ignored; not the ones read beside an argument memsym reads (a MODEL's
# SwiGLU reads --no-bias-swiglu-fusion), nor the flags that are also memsym's own options
# (bare --finetune is memsym's --finetune full: honoured, not ignored;
# test_megatrons_bare_finetune_flag_is_full_fine_tuning)
_MEMSYMS_OWN = _estimate_options()
_WITHOUT_EFFECT = set().union(*(dests for reason, dests in _NO_EFFECT.items()
                                if not reason.startswith("read only beside an argument memsym "
                                                         "reads")))
_HARMLESS = sorted(n for n, (dest, arity, _) in _TABLE.items()
                   if dest in _WITHOUT_EFFECT and arity in (0, 1)
                   and n.startswith("--") and not n.startswith(("--nproc", "--nnodes"))
                   and n not in _MEMSYMS_OWN and n not in _MODELOPT)
_JOBS = [["llama2-7b", "--seq-length", "2048", "--tp", "2"],
         ["llama3-8b", "--seq-length", "4096", "--pp", "2", "--global-batch-size", "8",
          "--recompute-granularity", "selective"],
         ["mixtral-8x7b", "--seq-length", "1024", "--ep", "2", "--dp", "2", "--bf16"]]


# each example runs 3 estimates (~1 s each on this 2-core machine): 4 examples, ~15 s
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job=st.sampled_from(_JOBS), extra=st.lists(st.sampled_from(_HARMLESS), min_size=1,
                                                   max_size=3, unique=True),
       seed=st.randoms(use_true_random=False))
def test_harmless_arguments_and_order_change_nothing(capsys, job, extra, seed):
    words = []
    for name in extra:
        words += [name] if _TABLE[name][1] == 0 else [name, "1"]
    plain = estimate_json(capsys, *job)
    more = estimate_json(capsys, *job, *words)
    assert more.pop("ignored") == list(extra)
    assert more == {k: v for k, v in plain.items() if k != "ignored"}
    # reordered: the option/value pairs shuffled, the MODEL anywhere
    pairs, i = [], 1
    while i < len(job):
        takes = i + 1 < len(job) and not job[i + 1].startswith("--")
        pairs.append(job[i:i + 2] if takes else job[i:i + 1])
        i += 2 if takes else 1
    seed.shuffle(pairs)
    pairs.insert(seed.randrange(len(pairs) + 1), [job[0]])
    assert estimate_json(capsys, *[w for p in pairs for w in p]) == plain


# --- the help says what the code does ------------------------------------------------------------
def test_models_and_gpus_list_the_catalogues(capsys):
    from memsym.hardware import gpu

    data = json.loads((main(["models", "--json"]), capsys.readouterr().out)[1])
    names = {r["name"]: r for r in data["models"]}
    # Llama 2 7B: 6,738,415,616 parameters (Hugging Face safetensors index total_size / 2)
    assert names["llama2-7b"]["params"] == 6_738_415_616
    assert data["recipe"]["precision"] == "bf16"
    data = json.loads((main(["gpus", "--json"]), capsys.readouterr().out)[1])
    h100 = {r["name"]: r for r in data["gpus"]}["h100-80gb"]
    # 79.11 GiB, the total PyTorch's out-of-memory message reports for an H100 80GB
    assert h100["capacity_bytes"] == gpu("h100-80gb").capacity_bytes
    assert abs(h100["capacity_bytes"] / 2**30 - 79.11) < 0.005


def test_lora_on_estimate(capsys):
    # LoRA (Hu et al. 2021, §4.1): r (d_in + d_out) trainable parameters per adapted module.
    # Megatron-Bridge puts one adapter on each Megatron module (peft/lora.py:159-250 at
    # 067f987df0), so the fused linear_qkv (h -> h + 2*1024) and linear_fc1 (h -> 2f) carry one
    # each.  Llama 3 70B (config.json): h 8192, 8 KV heads of 128, MLP 28672, 80 layers; every
    # module adapted at rank 16: 16 ((2h + 2048) + 2h + (h + 2f) + (f + h)) = 16 (6h + 3f + 2048)
    per_layer = 16 * (6 * 8192 + 3 * 28672 + 2 * 1024)
    adapters = 80 * per_layer
    assert adapters == 175_636_480
    data = estimate_json(capsys, "llama3-70b", "--tp", 8, "--seq-length", 4096,
                         "--finetune", "lora", "--lora-rank", 16)
    # Megatron-Bridge builds the adapters in the model's bf16 (2 bytes; peft/lora_layers.py:435
    # at 067f987df0, ``dtype = lora_dtype or base_dtype``), split over t = 8 like their base
    # matrices
    assert data["bytes"]["adapter_weights"] == 2 * adapters // 8
    full = estimate_json(capsys, "llama3-70b", "--tp", 8, "--seq-length", 4096)
    assert data["bytes"]["total"] < full["bytes"]["total"]
    qv = estimate_json(capsys, "llama3-70b", "--tp", 8, "--seq-length", 4096,
                       "--finetune", "lora", "--lora-targets", "q,v")
    assert qv["bytes"]["adapter_weights"] == 2 * 80 * 16 * (2 * 8192 + 8192 + 1024) // 8


def test_recompute_num_layers_zero_as_megatron_runs_it(capsys):
    # megatron/core/recompute.py (d98e8a64dd): block checkpoints layer i iff i < N, so N = 0
    # keeps every layer's activations, as no recompute; uniform advances by N, so N = 0 never
    # ends and is refused.  TransformerConfig only refuses a missing N.
    job = ["llama2-7b", "--seq-length", 4096, "--pp", 2, "--tp", 2, "--global-batch-size", 8,
           "--gpu", "h100-80gb"]
    block0 = estimate_json(capsys, *job, "--recompute-granularity", "full", "--recompute-method",
                           "block", "--recompute-num-layers", 0)
    none = estimate_json(capsys, *job)
    assert block0["bytes"]["total"] == none["bytes"]["total"]
    assert block0["step_time_s"] == none["step_time_s"]
    code, out, err = run(capsys, "estimate", *job, "--recompute-granularity", "full",
                         "--recompute-method", "uniform", "--recompute-num-layers", 0)
    assert code == 2 and out == "" and "never advances" in err


# NVIDIA/Megatron-LM examples/rl/model_configs/qwen3_8b.sh at d98e8a64dd, verbatim (a newer
# example: the model options of Megatron-Bridge's run_config for Qwen3 8B)
QWEN3_8B_RL = r'''#!/bin/bash

TP=${TP:-1}
PP=${PP:-1}
NODES_REQUIRED=${NODES_REQUIRED:-1}

echo "Using Qwen3 8B model checkpoint"
SCRIPT_PATH="${BASH_SOURCE[0]}"
source $(dirname $SCRIPT_PATH)/common.sh

# Default values
GRPO_CLAMP_EPS_LOWER=${GRPO_CLAMP_EPS_LOWER:-0.2}
GRPO_CLAMP_EPS_UPPER=${GRPO_CLAMP_EPS_UPPER:-0.2}
MAX_INFERENCE_BS=${MAX_INFERENCE_BS:-32}
GRPO_GROUP_SIZE=${GRPO_GROUP_SIZE:-16}
GRPO_PROMPTS_PER_STEP=${GRPO_PROMPTS_PER_STEP:-64}
GRPO_ITERATIONS=${GRPO_ITERATIONS:-1}
GRPO_KL_BETA=${GRPO_KL_BETA:-"0.0"}
TRAINING_BATCH_SIZE=${TRAINING_BATCH_SIZE:-256}
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}
MAX_SEQ_LENGTH=${MAX_SEQ_LENGTH:-32768}
EXIT_INTERVAL=${EXIT_INTERVAL:-16}
CHKPT_SAVE_INTERVAL=${CHKPT_SAVE_INTERVAL:-16}

ENV_DEPENDENT="\
  --micro-batch-size $MICRO_BATCH_SIZE \
  --global-batch-size $TRAINING_BATCH_SIZE \
  --grpo-group-size $GRPO_GROUP_SIZE \
  --grpo-prompts-per-step $GRPO_PROMPTS_PER_STEP \
  --grpo-iterations $GRPO_ITERATIONS \
  --grpo-clamp-eps-lower $GRPO_CLAMP_EPS_LOWER \
  --grpo-clamp-eps-upper $GRPO_CLAMP_EPS_UPPER \
  --grpo-kl-beta $GRPO_KL_BETA \
  --langrl-env-config $ENV_CONFIG "

# Model configuration based on MegatronBridge run_config.yaml
MODEL_OPTIONS="\
  --ckpt-format torch_dist \
  --seq-length $MAX_SEQ_LENGTH \
  --inference-max-seq-length $MAX_SEQ_LENGTH \
  --inference-max-requests $MAX_INFERENCE_BS \
  --pretrained-checkpoint $CHECKPOINT \
  --untie-embeddings-and-output-weights \
  --num-layers 36 \
  --hidden-size 4096 \
  --ffn-hidden-size 12288 \
  --num-attention-heads 32 \
  --kv-channels 128 \
  --max-position-embeddings 40960 \
  --group-query-attention \
  --num-query-groups 8 \
  --normalization RMSNorm \
  --norm-epsilon 1e-6 \
  --qk-layernorm \
  --position-embedding-type rope \
  --rotary-percent 1.0 \
  --rotary-base 1000000 \
  --use-rotary-position-embeddings \
  --swiglu \
  --disable-bias-linear \
  --attention-dropout 0.0 \
  --hidden-dropout 0.0 \
  --no-masked-softmax-fusion \
  --attention-softmax-in-fp32 \
  --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model Qwen/Qwen3-8B \
  --vocab-size 151936 \
  --make-vocab-size-divisible-by 128 \
  --optimizer adam \
  --adam-beta1 0.9 \
  --adam-beta2 0.999 \
  --adam-eps 1e-8 \
  --lr 1e-6 \
  --min-lr 1e-7 \
  --lr-warmup-samples 0 \
  --clip-grad 1.0 \
  --weight-decay 0.01 \
  --recompute-granularity selective \
  --recompute-activations \
  --recompute-modules core_attn \
  "

'''


@pytest.mark.parametrize("launcher", [[], ["torchrun", "--nproc_per_node", "8", "train_rl.py"]])
def test_a_newer_example_pasted_counts_the_model_megatron_builds(capsys, tmp_path, launcher):
    path = tmp_path / "qwen3_8b.sh"
    path.write_text(QWEN3_8B_RL, encoding="utf-8")
    via_script = estimate_json(capsys, "--launch-script", path, "--world-size", 8)
    pasted = estimate_json(capsys, *launcher, *read_launch_script(QWEN3_8B_RL), "--world-size", 8)
    assert pasted == via_script
    # Qwen3-8B as transformers builds it (the preset, checked against transformers' model
    # class in tests/test_hf_configs.py): 8,190,735,360 parameters
    assert via_script["params"] == parameter_count(preset("qwen3-8b")) == 8_190_735_360
    assert "--lr" in via_script["ignored"] and via_script["training"]["recompute"] == "selective"


def test_script_words_never_name_the_model(capsys, tmp_path):
    path = tmp_path / "s.sh"
    path.write_text("torchrun pretrain_gpt.py --num-layers 2 $UNSET_PARAMS\n", encoding="utf-8")
    code, out, err = run(capsys, "estimate", "--launch-script", path)
    assert code == 2 and out == "" and "in the launch script" in err


def test_megatrons_bare_finetune_flag_is_full_fine_tuning(capsys):
    # Megatron-LM's --finetune (store_true): load a checkpoint without its optimizer state;
    # the memory of full training, as memsym's --finetune full
    plain = estimate_json(capsys, "llama2-7b", "--tp", 2)
    assert estimate_json(capsys, "llama2-7b", "--finetune", "--tp", 2) == plain
    assert numbers(estimate_json(capsys, "llama2-7b", "--tp", 2, "--finetune", "full")) == \
        numbers(plain)


def test_every_report_lists_the_defaults_it_applied(capsys):
    # with a MODEL: memsym's recipe (memsym.job.DEFAULTS), each with its reason
    rows = {d["option"]: d for d in estimate_json(capsys, "llama2-7b", "--tp", 2)["defaults"]}
    assert rows["precision"]["value"] == "bf16" and "DEFAULTS" in rows["precision"]["source"]
    assert rows["sharding"]["value"] == "distributed-optimizer" and "tp" not in rows
    # without one: Megatron-LM's own argument defaults, cited to arguments.py
    rows = {d["option"]: d for d in estimate_json(
        capsys, "--num-layers", 2, "--hidden-size", 64, "--num-attention-heads", 4,
        "--seq-length", 32, "--vocab-size", 1000, "--micro-batch-size", 1, "--world-size", 1,
        "--bf16")["defaults"]}
    assert "precision" not in rows                      # given: --bf16
    assert rows["sharding"]["value"] == "ddp" and "arguments.py" in rows["sharding"]["source"]
    assert rows["position_embedding_type"]["value"] == "learned_absolute"
    # and the LaTeX / Markdown document says them too
    code, out, err = run(capsys, "latex", "llama2-7b", "--tp", 2, "--markdown")
    assert code == 0 and "Defaults applied (not given), from memsym.job.DEFAULTS: precision bf16" in out


#: memsym's own options (not Megatron-LM's) with a value that changes a job, for the test
#: below; every option of `estimate` that Megatron does not spell must be listed here or in
#: _NOT_JOB_OPTIONS (the test fails on a new one, so none can be dropped unnoticed).
_OWN_VALUES = {
    "--compiled-loss": [], "--compiled-model": [], "--convention": ["seed000"], "--cp": ["2"], "--dp": ["4"],
    "--data-parallel-size": ["4"], "--disable-loss-parallel": [], "--efficiency": ["0.3"],
    "--ep": ["2"], "--etp": ["1"], "--fragmentation": ["0"], "--framework": ["torchtitan"],
    "--gpu": ["a100-40gb"], "--gpu-memory": ["40GB"], "--gpus-per-node": ["4"],
    "--inter-node-bandwidth": ["10"], "--intra-node-bandwidth": ["100"],
    "--nccl-buffers": ["0"], "--no-flash-attn": [], "--no-flash-attention": [],
    "--num-microbatches": ["4"], "--offload": ["optimizer"], "--pp": ["4"], "--tp": ["1"],
    "--vpp": ["2"], "--precision": ["fp16"], "--recompute": ["full"], "--schedule": ["gpipe"],
    "--sharding": ["zero3"], "--should-pad-vocab": [], "--workspace": ["0"],
    "--finetune": ["lora"], "--lora-rank": ["8"], "--lora-targets": ["q,v"],
    "--lora-quantization": ["int8"], "--lora-regather": [], "--lora-dropout": [], "--dora": [],
    "--lora-expert-params": ["gate_up"],
    "--params": ["7B"],
    "--metric": ["allocated"], "--advise": [], "--dropout": [], "--margin": ["0.1"],
    "--moe-dispatcher": ["hybridep"], "--sac-recomputes-attention": [],
    "--torch-ddp-buckets": [], "--first-iteration": [], "--autocast": ["bf16"], "--chunked-loss": [],
    "--accelerate-fsdp": ["mixed"], "--fsdp-keep-gathered": [],
}
#: Options that choose the input or the output, not the job (each tested on its own).
_NOT_JOB_OPTIONS = {"-h", "--help", "--json", "--wide", "--markdown", "--sensitivity",
                    "--args-file", "--launch-script", "--deepspeed-config", "--torchtitan-config",
                    "--bridge-recipe", "--recipe",
                    # a calibration file's factor on the step time: tests/test_check.py
                    "--calibration"}


_MEGATRON_COMMAND = ["--num-layers", 4, "--hidden-size", 256, "--num-attention-heads", 4,
                     "--seq-length", 128, "--max-position-embeddings", 128, "--vocab-size", 1000,
                     "--micro-batch-size", 1, "--global-batch-size", 16, "--world-size", 8,
                     "--bf16", "--tensor-model-parallel-size", 2,
                     "--pipeline-model-parallel-size", 2, "--use-distributed-optimizer"]
_PRESET_JOB = ["llama2-7b", "--tp", 2, "--pp", 2, "--world-size", 8, "--global-batch-size", 16,
               "--seq-length", 1024]


@pytest.mark.parametrize("path", ["megatron", "preset", "args-file", "launch-script"])
def test_every_own_option_is_honoured_or_refused_in_every_reading(capsys, tmp_path, path):
    import shlex

    # every input path: the flags of a preset job, a pasted Megatron-LM command, the same
    # command in an argument file and in a launch script (torchrun prefix, a variable)
    words = " ".join(shlex.quote(str(w)) for w in _MEGATRON_COMMAND)
    if path == "args-file":
        (tmp_path / "args.txt").write_text(words + "\n", encoding="utf-8")
        base = ["--args-file", tmp_path / "args.txt"]
    elif path == "launch-script":
        (tmp_path / "run.sh").write_text(
            f"#!/bin/bash\nARGS=\"{words}\"\ntorchrun --nproc_per_node 8 pretrain_gpt.py $ARGS\n",
            encoding="utf-8")
        base = ["--launch-script", tmp_path / "run.sh"]
    else:
        base = _MEGATRON_COMMAND if path == "megatron" else _PRESET_JOB

    from memsym.cli import build_parser
    from memsym.readers.megatron import megatron_arity

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    own = {o for a in sub.choices["estimate"]._actions for o in a.option_strings
           if megatron_arity(o) is None}
    # --finetune is Megatron's flag too; with a value (lora, qlora, full) it is memsym's
    assert (own | {"--finetune"}) - _NOT_JOB_OPTIONS == set(_OWN_VALUES), \
        "a new option: say what it does"
    plain = estimate_json(capsys, *base)
    for option, values in _OWN_VALUES.items():
        code, out, err = run(capsys, "estimate", *base, option, *values, "--json")
        if code == 2:
            assert out == "" and err.count("\n") == 1 and "Traceback" not in err, option
            continue
        assert code == 0, (option, err)
        assert json.loads(out) != plain, f"{option} {values} was dropped"


def test_the_metric_is_stated_and_fitting_is_judged_on_the_device(capsys):
    # What each counter sees (memsym.terms.allowances.METRICS): PyTorch's counters miss the
    # CUDA context (500 MiB with lazy loading, CUDA Programming Guide §4.7) and NCCL's buffers
    # (NCCL_BUFFSIZE 4 MiB x NCCL_MAX_NCHANNELS 32 x 4 communicators = 512 MiB); allocated also
    # misses the allocator's reserve (the 10 % fragmentation margin of the allocated bytes).
    job = ["llama2-7b", "--tp", 2, "--pp", 2, "--world-size", 4, "--global-batch-size", 8,
           "--sequence-parallel", "--tp-comm-overlap", "--gpu", "h100-80gb"]
    rep = {m: estimate_json(capsys, *job, "--metric", m) for m in ("device", "reserved",
                                                                   "allocated")}
    total = {m: r["bytes"]["total"] for m, r in rep.items()}
    user_buffers = rep["device"]["bytes"]["tp_comm_userbuffers"]      # outside PyTorch too
    assert total["device"] - total["reserved"] == 500 * 2**20 + 512 * 2**20 + user_buffers
    allocated_tensors = total["allocated"] - 64 * 2**20   # the cuBLAS / TE workspaces
    frag = total["reserved"] - total["allocated"]
    assert abs(frag - allocated_tensors / 10) <= 2          # rounding of whole bytes
    for r in rep.values():
        assert r["metric"]["device_bytes_total"] == total["device"]
        assert r["fits"] == (total["device"] <= r["gpu_memory_bytes"])
    assert "max_memory_allocated" in rep["allocated"]["metric"]["sees"]


def test_a_job_that_does_not_fit_gets_verified_levers_and_exit_1(capsys):
    # Llama 2 70B on one node at TP 8 with d = 1: the states alone (18 bytes x 8.6e9
    # parameters per GPU) exceed the 84.9 GB CUDA gives an H100
    job = ["llama2-70b", "--seq-length", 4096, "--tp", 8, "--world-size", 8,
           "--global-batch-size", 64, "--gpu", "h100-80gb"]
    code, out, err = run(capsys, "estimate", *job, "--json")
    assert code == 1, err
    rep = json.loads(out)
    assert rep["fits"] is False and rep["advice"]
    for lever in rep["advice"]:
        # each lever, applied as the flags it names, makes the estimate fit (exit 0)
        code, out, err = run(capsys, "estimate", *job, *lever["flags"], "--json")
        assert code == 0, (lever, err)
        again = json.loads(out)
        assert again["fits"] is True and again["bytes"]["total"] == lever["bytes_total"]
    code, out, err = run(capsys, "estimate", *job)
    assert code == 1 and out.startswith("does NOT fit:") and "advice:" in out
    # --advise on a job that fits lists the levers too; without a capacity it is refused
    code, out, err = run(capsys, "estimate", "llama2-7b", "--tp", 2, "--gpu", "h100-80gb",
                         "--advise", "--json")
    assert code == 0 and "advice" in json.loads(out)
    code, out, err = run(capsys, "estimate", "llama2-7b", "--advise")
    assert code == 2 and out == "" and "--advise needs" in err


def test_the_advice_offers_what_a_search_of_the_framework_would_try(capsys):
    # DeepSpeed runs the transformers model: no pipeline or context parallelism of memsym's,
    # whole-layer gradient checkpointing (memsym.frameworks.FRAMEWORK["deepspeed"].
    # searched_sizes); the same job under Megatron-LM gets them offered
    job = ["llama3-8b", "--world-size", 8, "--gpu", "h100-80gb", "--seq-length", 8192,
           "--micro-batch-size", 2, "--json", "--advise"]
    knobs = {}
    for fw in ("deepspeed", "megatron"):
        code, out, err = run(capsys, "estimate", *job, "--framework", fw)
        assert code in (0, 1), err
        knobs[fw] = {(a["knob"], a["flags"][-1]) for a in json.loads(out)["advice"]}
    assert not {k for k in knobs["deepspeed"] if k[0] in ("pp", "cp")}
    assert ("recompute", "selective") not in knobs["deepspeed"]
    assert {k for k in knobs["megatron"] if k[0] in ("pp", "cp")}


def test_a_job_no_single_change_fits_says_so_in_its_first_line(capsys):
    # Llama 3 70B under DeepSpeed's plain DDP on 8 GPUs: 16 bytes of states a parameter on every
    # GPU (1.1 TB) that no single change of a DeepSpeed job brings under 80 GB
    code, out, err = run(capsys, "estimate", "llama3-70b", "--framework", "deepspeed",
                         "--world-size", 8, "--gpu", "h100-80gb")
    assert code == 1, err
    first = out.splitlines()[0]
    assert first.startswith("does NOT fit:") and first.endswith("no single change makes it fit")


def test_options_beside_a_framework_config_are_refused_not_dropped(capsys, tmp_path):
    # a DeepSpeed config sets ZeRO, the micro-batch and precision; memsym's --tp or
    # --recompute-granularity beside it used to change nothing
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}, '
                   '"bf16": {"enabled": true}}', encoding="utf-8")
    base = ["llama2-7b", "--deepspeed-config", cfg, "--world-size", 8, "--seq-length", 2048]
    assert estimate_json(capsys, *base)["layout"]["dp"] == 8
    for extra in (["--tp", 2], ["--recompute-method", "uniform"], ["--bf16"]):
        code, out, err = run(capsys, "estimate", *base, *extra)
        assert code == 2 and out == "" and "config file sets the layout" in err, extra


def test_a_deepspeed_config_takes_the_models_gradient_checkpointing_beside_it(capsys, tmp_path):
    """No ds_config key checkpoints a Hugging Face model: its own gradient checkpointing does,
    every decoder layer (transformers 5.25 GradientCheckpointingLayer), so
    ``--recompute-granularity full`` beside the config is read as that, with a note, and is the
    same job as the same layout given as memsym's options; selective has no counterpart."""
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}, '
                   '"bf16": {"enabled": true}}', encoding="utf-8")
    base = ["llama2-7b", "--deepspeed-config", cfg, "--world-size", 8, "--seq-length", 2048]
    read = estimate_json(capsys, *base, "--recompute-granularity", "full")
    plain = estimate_json(capsys, "llama2-7b", "--framework", "deepspeed", "--sharding", "zero3",
                          "--world-size", 8, "--seq-length", 2048, "--micro-batch-size", 1,
                          "--recompute-granularity", "full")
    assert read["training"]["recompute"] == "full" and read["bytes"] == plain["bytes"]
    assert read["bytes"]["activations"] < estimate_json(capsys, *base)["bytes"]["activations"]
    assert any("the model's own gradient checkpointing" in n for n in read["notes"])
    code, out, err = run(capsys, "estimate", *base, "--recompute-granularity", "selective")
    assert code == 2 and out == "" and err.count("\n") == 1 and "every decoder layer" in err


def test_the_text_report_is_at_most_100_columns_with_numbered_references(capsys):
    job = ["llama3-70b", "--tp", 8, "--pp", 4, "--world-size", 128, "--seq-length", 8192,
           "--global-batch-size", 512, "--sequence-parallel", "--recompute-granularity",
           "selective", "--gpu", "h100-80gb"]
    code, out, err = run(capsys, "estimate", *job)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 100
    data = estimate_json(capsys, *job)
    cap, rows = data["gpu_memory_bytes"], out.splitlines()
    # each term: its share of the capacity, and a reference listed at the end
    weights = next(r for r in rows if r.startswith("weights "))
    assert f"{100 * data['bytes']['weights'] / cap:.1f} %" in weights and weights.endswith("[1]")
    refs = rows[rows.index("references:") + 1:]
    assert refs[0].startswith("[1] ") and data["sources"]["weights"].split()[0] in refs[0]
    assert rows[[r.startswith("dominant:") for r in rows].index(True)].startswith(
        "dominant: activations")
    code, wide, err = run(capsys, "estimate", *job, "--wide")
    assert code == 0 and data["sources"]["weights"] in wide and "references:" not in wide


def test_levers_skip_a_combination_the_model_refuses(capsys):
    # fp8 under fsdp is modelled only as Megatron-FSDP's FP8 parameters (fp8_param_gather,
    # which this job lacks): the fsdp lever is refused by the estimate and left out, the
    # others still offered (this used to end the command with that refusal instead of the
    # report)
    code, out, err = run(capsys, "estimate", "llama2-7b", "--precision", "fp8", "--world-size",
                         8, "--seq-length", 4096, "--global-batch-size", 128, "--gpu",
                         "h100-80gb", "--advise", "--json")     # "tight": levers on --advise
    rep = json.loads(out)
    assert code == 1 and rep["fits"] is False and rep["advice"]
    assert all(lever["flags"][:2] != ["--sharding", "fsdp"] for lever in rep["advice"])


def test_grad_reduce_in_bf16_halves_the_gradient_traffic_it_reduces(capsys):
    # Megatron's distributed optimizer: reduce-scatter of the gradients (b_g bytes) and
    # all-gather of the bf16 parameters (2 bytes), (d - 1)/d of the shard each (ZeRO §7);
    # --grad-reduce-in-bf16 makes b_g 2 instead of the fp32 main-grad buffer's 4.
    # Llama 3 8B: 8,030,261,248 parameters (config.json; test_models), t = p = 1, d = 64
    job = ["llama3-8b", "--seq-length", 4096, "--world-size", 64, "--global-batch-size", 512,
           "--gpu", "h100-80gb"]
    fp32 = estimate_json(capsys, *job)
    bf16 = estimate_json(capsys, *job, "--grad-reduce-in-bf16")
    n = 8_030_261_248
    assert fp32["communication"]["dp"]["bytes"] == 63 * n * (4 + 2) // 64
    assert bf16["communication"]["dp"]["bytes"] == 63 * n * (2 + 2) // 64
    assert bf16["bytes"]["gradients"] * 2 == fp32["bytes"]["gradients"]
    assert bf16["step_time_s"] < fp32["step_time_s"]


@pytest.mark.parametrize("command", [["solve", "dp"], ["latex", "--markdown", "--solve", "tp"]],
                         ids=["solve", "latex"])
def test_every_own_option_is_honoured_or_refused_on_every_job_command(capsys, command):
    # the same options on the other job commands: each changes the answer (the solved value
    # and its derivation, or the design document) or is refused in one line, exit 2
    # one pipeline stage, so that the document (one stage) shows the output layer's terms too
    base = ["llama2-7b", "--tp", 2, "--global-batch-size", 16, "--seq-length", 1024,
            "--gpu", "h100-80gb"]
    json_out = ["--json"] if command[0] == "solve" else []
    code, plain, err = run(capsys, *command, *base, *json_out)
    assert code == 0, err
    for option, values in _OWN_VALUES.items():
        values = ["4"] if option in ("--tp", "--pp") else values
        code, out, err = run(capsys, *command, *base, option, *values, *json_out)
        if code == 2:
            assert out == "" and err.count("\n") == 1 and "Traceback" not in err, option
            continue
        assert code in (0, 1), (option, err)
        assert out != plain, f"{command[0]} {option} {values} was dropped"


# ---------------------------------------------------------------------------------------------
# The job fields of FP8/FP4, the MoE dispatcher, Megatron-FSDP and userbuffers on every path
# ---------------------------------------------------------------------------------------------
def test_the_report_states_precision_recipe_and_megatron_fsdp_as_given(capsys):
    """The JSON and text reports carry the precision, FP8 recipe, sharding and Megatron-FSDP
    fields as the Megatron-LM flags said them, and the Python API's keywords of the same
    names give the same bytes (two paths to one job)."""
    from memsym.job import job
    from memsym.training.estimate import job_memory

    flags = ["llama3-8b", "--gpu", "gb200", "--world-size", 16, "--bf16",
             "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params",
             "--fsdp-double-buffer"]
    rep = estimate_json(capsys, *flags)
    trn = rep["training"]
    assert (trn["precision"], trn["sharding"], trn["megatron_fsdp"],
            trn["fsdp_double_buffer"]) == ("bf16", "fsdp", "optim_grads_params", True)
    api = job("llama3-8b", gpu="gb200", d=16, precision="bf16", sharding="fsdp",
              megatron_fsdp="optim_grads_params", fsdp_double_buffer=True)
    est = job_memory(api)
    assert est.stage == rep["stage"]["index"]
    assert [float(x) for x in est.stage_bytes] == pytest.approx(rep["stage"]["stage_totals"],
                                                               abs=1)
    # the double buffer is part of the count: without it the total differs
    single = estimate_json(capsys, *flags[:-1])
    assert single["training"]["fsdp_double_buffer"] is False
    assert single["bytes"]["total"] != rep["bytes"]["total"]
    code, out, err = run(capsys, "estimate", *flags)
    assert code == 0, err
    assert "Megatron-FSDP optim_grads_params, double buffer" in " ".join(out.split())
    mx = estimate_json(capsys, "llama3-8b", "--gpu", "gb200", "--precision", "fp8",
                       "--fp8-recipe", "mxfp8", "--world-size", 16)
    assert (mx["training"]["precision"], mx["training"]["fp8_recipe"]) == ("fp8", "mxfp8")
    code, out, err = run(capsys, "estimate", "llama3-8b", "--gpu", "gb200", "--precision",
                         "fp8", "--fp8-recipe", "mxfp8", "--world-size", 16)
    assert "precision fp8 (mxfp8)" in " ".join(out.split())


def test_defaults_of_the_new_fields_are_reported_where_they_matter(capsys):
    """Each of fp8_recipe, moe_dispatcher, megatron_fsdp, fsdp_double_buffer and
    tp_comm_overlap_cfg is listed among the defaults (value and source) when the job uses it
    and it was not given, and not otherwise."""
    def defaults(*argv):     # whether the job fits (exit 0 or 1) does not matter here
        code, out, err = run(capsys, "estimate", *argv, "--json")
        assert code in (0, 1), err
        return {d["option"]: d for d in json.loads(out)["defaults"]}

    fp8 = defaults("llama3-8b", "--gpu", "gb200", "--precision", "fp8")
    assert fp8["fp8_recipe"]["value"] is None and "--fp8-recipe" in fp8["fp8_recipe"]["source"]
    assert "fp8_recipe" not in defaults("llama3-8b", "--gpu", "gb200", "--precision", "fp8",
                                        "--fp8-recipe", "mxfp8")
    assert "fp8_recipe" not in defaults("llama3-8b")           # bf16: no recipe
    moe = defaults("qwen3-30b-a3b", "--ep", 2, "--world-size", 8)
    assert moe["moe_dispatcher"]["value"] == "alltoall"
    assert "moe_dispatcher" not in defaults("llama3-8b")        # dense: no dispatcher
    assert "moe_dispatcher" not in defaults("qwen3-30b-a3b", "--ep", 2, "--world-size", 8,
                                            "--moe-dispatcher", "deepep")
    fsdp = defaults("llama3-8b", "--sharding", "fsdp", "--world-size", 8)
    assert fsdp["megatron_fsdp"]["value"] is None and "fsdp_double_buffer" not in fsdp
    assert "megatron_fsdp" not in defaults("llama3-8b", "--world-size", 8)
    over = defaults("llama3-8b", "--tp", 2, "--sequence-parallel", "--tp-comm-overlap",
                    "--world-size", 8)
    assert over["tp_comm_overlap_cfg"]["value"] is None
    assert "tp_comm_overlap_cfg" not in defaults("llama3-8b", "--tp", 2, "--world-size", 8)


#: The new fields' options a job command takes, with a value that changes the job (the
#: preset stays a Megatron-LM/Blackwell job that uses them) and the base job it applies to.
_NEW_FIELD_OPTIONS = {
    "--fp8-recipe": (["mxfp8"], ["llama3-8b", "--gpu", "gb200", "--precision", "fp8",
                                 "--tp", 2, "--global-batch-size", 16, "--seq-length", 1024]),
    "--moe-dispatcher": (["deepep"], ["qwen3-30b-a3b", "--gpu", "gb200", "--ep", 4,
                                      "--world-size", 8, "--global-batch-size", 16,
                                      "--seq-length", 1024]),
}


def _svg_drawing(path) -> str:
    """An SVG's drawing without what differs run to run (matplotlib's date and random
    ids of clip paths, markers and images), so that two plots compare equal when they draw the same."""
    import re

    text = re.sub(r"<dc:date>.*?</dc:date>", "", path.read_text(encoding="utf-8"))
    return re.sub(r"\b([a-z]+)[0-9a-f]{10}\b", r"\1ID", text)


@pytest.mark.parametrize("command", [["solve", "dp", "--json"],
                                     ["latex", "--markdown", "--solve", "tp"],
                                     ["plot", "breakdown"], ["estimate", "--json"]],
                         ids=["solve", "latex", "plot", "estimate"])
@pytest.mark.parametrize("option", sorted(_NEW_FIELD_OPTIONS))
def test_new_field_options_are_honoured_or_refused_on_every_job_command(capsys, tmp_path,
                                                                        command, option):
    """--fp8-recipe (a Megatron-LM spelling, so not in _OWN_VALUES above) and
    --moe-dispatcher change every job command's answer or are refused in one line."""
    values, base = _NEW_FIELD_OPTIONS[option]
    if command[0] == "plot":
        outs = []
        for extra in ([], [option, *values]):
            path = tmp_path / f"b{len(extra)}.svg"
            code, out, err = run(capsys, *command, *base, *extra, "--output", path)
            assert code == 0, err
            outs.append(_svg_drawing(path))
        assert outs[0] != outs[1], f"plot {option} was dropped"
        return
    code, plain, err = run(capsys, *command, *base)
    assert code in (0, 1), err
    code, out, err = run(capsys, *command, *base, option, *values)
    if code == 2:
        assert out == "" and err.count("\n") == 1 and "Traceback" not in err
        return
    assert code in (0, 1), err
    assert out != plain, f"{command[0]} {option} {values} was dropped"


def test_plot_feasibility_searches_the_jobs_precision_and_refuses_what_it_cannot(capsys,
                                                                                 tmp_path):
    """plot feasibility's search takes the job's precision and FP8 recipe (the MXFP8 map
    differs from the per-tensor one) and MoE dispatcher (DeepEP's buffers on every layout),
    and refuses what it would not price (Megatron-FSDP's optim strategy: the search runs
    Megatron-FSDP as its zero2 and fsdp only)."""
    base = ["plot", "feasibility", "llama3-8b", "--gpu", "gb200", "--world-size", 16,
            "--precision", "fp8", "--global-batch-size", 64, "--map", "headroom"]
    maps = []
    for extra in ([], ["--fp8-recipe", "mxfp8"]):
        path = tmp_path / f"f{len(extra)}.svg"
        code, out, err = run(capsys, *base, *extra, "--output", path)
        assert code == 0, err
        maps.append(_svg_drawing(path))
    assert maps[0] != maps[1], "plot feasibility dropped --fp8-recipe"
    moe = []
    for extra in ([], ["--moe-dispatcher", "deepep"]):
        path = tmp_path / f"moe{len(extra)}.svg"
        code, out, err = run(capsys, "plot", "feasibility", "qwen3-30b-a3b", "--gpu", "gb200",
                             "--ep", 4, "--world-size", 8, "--map", "headroom", *extra,
                             "--output", path)
        assert code == 0, err
        moe.append(_svg_drawing(path))
    assert moe[0] != moe[1], "plot feasibility dropped --moe-dispatcher"
    code, out, err = run(capsys, "plot", "feasibility", "llama3-8b", "--gpu", "gb200",
                         "--world-size", 8, "--use-megatron-fsdp",
                         "--data-parallel-sharding-strategy", "optim",
                         "--output", tmp_path / "fsdp.svg")
    assert code == 2 and out == "" and err.count("\n") == 1 and "megatron_fsdp" in err


@pytest.mark.parametrize("value", ["deepspeed", "torchtitan"])
def test_a_search_options_value_is_never_read_as_a_launcher(value):
    """``deepspeed`` is DeepSpeed's launcher word (``deepspeed --num_gpus 8 train.py``), and
    ``--framework deepspeed`` is memsym's own option: its value is the option's, so the search
    stays a MODEL's search (no job read from pasted words, its own defaults not held)."""
    from memsym.cli import build_parser
    from memsym.cli.search_words import prepare_search

    raw = ["search", "llama2-7b", "--framework", value, "--gpu", "h100-80gb", "--gpus", "8"]
    argv, words = prepare_search(build_parser("search"), raw)
    assert (argv, words) == (raw, None)
    # a pasted DeepSpeed launch still is a job's command
    pasted = ["search", "deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "2",
              "--gpus", "8"]
    assert prepare_search(build_parser("search"), pasted)[1] is not None


def test_a_pasted_hugging_face_deepspeed_launch_is_read_as_the_trainers_job(capsys, tmp_path):
    """``deepspeed --num_gpus 8 train.py --deepspeed ds.json --gradient_checkpointing`` runs a
    Hugging Face Trainer script (TrainingArguments' own names, transformers 5.25
    training_args.py:1463, 926), not pretrain_gpt.py: it is read by the Trainer's reader
    (memsym.readers.hf_trainer), never by Megatron-LM's ("did you mean --seed?"); without a
    sequence length (a Trainer script's is its tokenizer's) one line says which to give."""
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3}}',
                   encoding="utf-8")
    launch = ["estimate", "llama3-8b", "deepspeed", "--num_gpus", "8", "train.py",
              "--deepspeed", str(cfg), "--gradient_checkpointing", "--gpu", "h100-80gb"]
    code = main(launch)
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "--block_size" in err and "--seq-length" in err and "did you mean" not in err
    code = main([*launch, "--seq-length", "2048", "--json"])
    out, err = capsys.readouterr()
    rep = json.loads(out)
    assert code in (0, 1) and rep["read_as"].startswith("a Hugging Face Trainer launch")
