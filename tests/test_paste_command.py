"""Real jobs in (issue 13): the six Megatron-LM example scripts pasted into ``memsym estimate``.

The scripts are the verbatim fixtures of tests/test_readers_megatron.py (each with its source
path and revision); that file checks the reader's model against Megatron's own parameter
count (a literal port).  Here the command line must give the same model, and
``--convention megatron-lm`` on the pasted command must equal Megatron-LM's own
``report_theoretical_memory`` (the literal port in tests/framework_ports.py) for it.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest

import framework_ports as port
from memsym.model import Architecture, parameter_count
from test_readers_megatron import EXPECTED, SCRIPTS, job_of
from in_process import run as cli


def script(tmp_path, key):
    path = tmp_path / f"{key}.sh"
    path.write_text(SCRIPTS[key][2], encoding="utf-8")
    return str(path)


#: what each script needs beside --world-size / --vocab-size (EXPECTED's "added"): the Qwen3
#: RL config runs t = 4 with experts and no --sequence-parallel, which Megatron's MoE layer
#: refuses in training (memsym.rules moe-tp-sp); the test below shows the refusal.
EXTRA = {"qwen3_30b_a3b": ["--sequence-parallel"]}


@pytest.mark.parametrize("key", sorted(SCRIPTS))
def test_six_scripts_estimate_with_the_model_megatron_builds(capsys, tmp_path, key):
    argv = ["estimate", "--launch-script", script(tmp_path, key), *EXPECTED[key]["added"],
            *EXTRA.get(key, []), "--json"]
    code, out, err = cli(capsys, *argv)
    assert code == 0, err
    data = json.loads(out)
    mj = job_of(key)
    # the command's model is the reader's, whose count test_readers_megatron checks against
    # Megatron's compute_weight_and_optimizer_memory (port) and hand arithmetic
    assert data["params"] == parameter_count(Architecture(**mj.architecture))
    assert data["layout"]["tp"] == EXPECTED[key]["t"]
    assert data["read_as"].startswith("Megatron-LM arguments")
    assert "--lr" in data["ignored"] or "--lr" not in SCRIPTS[key][2]
    assert data["bytes"]["total"] > 0


def test_qwen3_without_sequence_parallel_is_refused_with_the_rule(capsys, tmp_path):
    code, out, err = cli(capsys, "estimate", "--launch-script", script(tmp_path, "qwen3_30b_a3b"),
                         *EXPECTED["qwen3_30b_a3b"]["added"])
    assert code == 2 and out == "" and "needs sequence parallelism" in err


def test_distributed_optimizer_only_with_its_flag(capsys, tmp_path):
    # GPT-3 175B's script has no --use-distributed-optimizer: Megatron trains with plain DDP.
    # With --fp16 the gradient buffer is fp16 (accumulate_allreduce_grads_in_fp32 is forced
    # only by --bf16) and the optimizer copies it to fp32 main gradients.
    code, out, err = cli(capsys, "estimate", "--launch-script", script(tmp_path, "gpt3_175b"),
                         *EXPECTED["gpt3_175b"]["added"], "--json")
    assert code == 0, err
    data = json.loads(out)
    assert "optimizer" in data["bytes"]
    # nothing is sharded over d: the optimizer row is the whole fp32 state of the shard,
    # 12 bytes per parameter (master 4 + Adam 8), three times the 4-byte fp32 main gradients.
    # Those exist only in the optimizer step (Float16OptimizerWithFloat16Params
    # _copy_model_grads_to_main_grads makes them, zero_grad frees them): not a steady row.
    step = data["optimizer_step_bytes"]["main_gradients"]
    assert "main_gradients" not in data["bytes"]
    assert data["bytes"]["optimizer"] == 3 * step
    # the optimizer phase holds every steady state plus the main gradients, no activations
    states = sum(data["bytes"][k] for k in ("weights", "gradients", "optimizer"))
    ph = data["phases"]
    assert ph["optimizer"] >= states + step
    assert ph[ph["peak"]] == max(ph["forward"], ph["backward"], ph["optimizer"])


def test_megatron_convention_on_a_pasted_command_equals_its_own_report(capsys, tmp_path):
    # GPT-3 175B (t 8, p 16, d 8 at --world-size 1024; no recompute; fp16; plain DDP): the
    # framework's offline estimator, report_theoretical_memory, ported literally
    key = "gpt3_175b"
    code, out, err = cli(capsys, "estimate", "--launch-script", script(tmp_path, key),
                         *EXPECTED[key]["added"], "--convention", "megatron-lm", "--json")
    assert code == 0, err
    data = json.loads(out)
    mj = job_of(key)
    lay, trn = mj.layout, mj.training
    args = port.lm_args(Architecture(**mj.architecture), t=lay["t"], p=lay["p"], d=lay["d"],
                        s=trn["seq_length"], b=trn["micro_batch_size"],
                        sequence_parallel=lay["sequence_parallel"], recompute=None,
                        distributed_optimizer=False)
    wo, act = port.lm_report_theoretical_memory_bytes(args, Fraction(trn["num_microbatches"]))
    assert data["bytes"]["total"] == math.ceil(wo + act)


def test_a_misspelt_argument_is_an_error_with_a_suggestion(capsys, tmp_path):
    code, out, err = cli(capsys, "estimate", "--launch-script", script(tmp_path, "gpt3_175b"),
                         *EXPECTED["gpt3_175b"]["added"], "--tensor-model-paralel-size", "8")
    assert code == 2 and out == "" and "--tensor-model-parallel-size" in err


def test_pasted_arguments_without_a_world_size_say_which_flag(capsys, tmp_path):
    code, out, err = cli(capsys, "estimate", "--launch-script", script(tmp_path, "gpt3_175b"),
                         "--vocab-size", "50257")
    assert code == 2 and "--world-size" in err


def test_megatrons_mixtral_script_on_one_node_says_which_flag(capsys, tmp_path):
    # the script runs PP 4 x EP 8 and takes its node count from SLURM_NNODES (default 1), which
    # memsym does not read: 8 GPUs cannot hold the expert groups of t_e e p = 32 (Megatron's
    # RankGenerator refuses it too), and the error names --world-size
    code, out, err = cli(capsys, "estimate", "--launch-script", script(tmp_path, "mixtral_8x7b"),
                         "--vocab-size", "32000")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "t_e*e*p = 32" in err and "--world-size" in err


# --- DeepSpeed and torchtitan configs as the layout/training part of a job --------------------
def test_deepspeed_zero3_offload_for_a_preset(capsys, tmp_path):
    # DeepSpeed's JSON keys: micro-batch 2 x accumulation 4 x DP 8 = train_batch_size 64
    # (runtime/config.py _batch_assertion); ZeRO-3 with the optimizer offloaded to the CPU:
    # the GPU keeps only its bf16 parameter partition, 2 N / d bytes (N = 6,738,415,616)
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                               "bf16": {"enabled": True},
                               "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}))
    code, out, err = cli(capsys, "estimate", "llama2-7b", "--deepspeed-config", str(cfg),
                         "--world-size", "8", "--seq-length", "4096", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["layout"]["dp"] == 8 and data["training"]["micro_batch_size"] == 2
    assert data["bytes"]["weights"] == 2 * 6_738_415_616 // 8
    assert "optimizer" not in data["bytes"] and "gradients" not in data["bytes"]


def test_torchtitan_llama3_405b_toml(capsys, tmp_path):
    # torchtitan v0.2.2 train_configs/llama3_405b.toml (verbatim in test_readers_frameworks):
    # TP 8, data_parallel_shard_degree -1 -> 512 / 8 = 64, local batch 2, seq_len 8192, full AC
    from test_readers_frameworks import LLAMA3_405B

    toml = tmp_path / "llama3_405b.toml"
    toml.write_text(LLAMA3_405B)
    code, out, err = cli(capsys, "estimate", "--torchtitan-config", str(toml), "--world-size",
                         "512", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["model"] == "torchtitan llama3 405B"   # models/llama3 llama3_args["405B"]
    assert (data["layout"]["tp"], data["layout"]["dp"]) == (8, 64)
    assert (data["training"]["seq_length"], data["training"]["micro_batch_size"],
            data["training"]["recompute"]) == (8192, 2, "full")
    assert any("leftover" in n for n in data["notes"])


def test_torchtitan_zbv_toml_places_the_output_on_rank_0(capsys, tmp_path):
    # ZBVZeroBubble (torch's V placement) on 4 ranks: 32 layers + embedding and output weights
    # of 2 over 8 stages, 36 = 8 x 4 + 4, the first four one more ([3, 5, 5, 5, 4, 4, 4, 2]
    # layers, generate_llm_fqn_per_model_part); rank r holds stages r and 7 - r: rank 0
    # 3 + 2 layers, the embedding, the output layer and the loss, the others 9
    toml = tmp_path / "zbv.toml"
    toml.write_text("[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nseq_len = 8192\n"
                    "local_batch_size = 8\n[parallelism]\npipeline_parallel_degree = 4\n"
                    "pipeline_parallel_schedule = \"ZBVZeroBubble\"\n"
                    "pipeline_parallel_first_stage_less_layers = 2\n"
                    "pipeline_parallel_last_stage_less_layers = 2\n")
    code, out, err = cli(capsys, "estimate", "--torchtitan-config", str(toml), "--world-size",
                         "8", "--gpu", "h100-80gb")
    assert code == 0, err
    assert "[5, 9, 9, 9] layers per rank" in out
    assert "V schedule priced as interleaved 1F1B, v = 2" in out
    code, out, err = cli(capsys, "estimate", "--torchtitan-config", str(toml), "--world-size",
                         "8", "--json")
    data = json.loads(out)
    assert data["training"]["stage_placement"] == "v"


def test_time_reads_a_config_json(capsys, tmp_path):
    # Llama-2 7B's config.json values: 6,738,415,616 parameters (the published total); the
    # time is Narayanan Eq. 4, 8 T N / (G X) with full recompute
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                               "num_attention_heads": 32, "intermediate_size": 11008,
                               "vocab_size": 32000}))
    code, out, err = cli(capsys, "time", str(cfg), "--tokens", "2T", "--gpus", "1024",
                         "--tflops", "400", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["params"] == 6_738_415_616
    assert data["seconds"] == pytest.approx(8 * 2e12 * 6_738_415_616 / (1024 * 400e12), rel=1e-12)


@pytest.mark.parametrize("pad", [False, True])
def test_bridge_padded_and_unpadded_runs(capsys, pad):
    # Megatron-Bridge: GPTModelProvider.should_pad_vocab (default False; True when the vocabulary
    # comes from the tokenizer): the literal port of estimate_training_memory with and without
    from memsym.model import preset
    from test_conventions import bridge_port

    argv = ["estimate", "llama3-70b", "--tp", "8", "--pp", "1", "--dp", "4", "--seq-length",
            "4096", "--micro-batch-size", "1", "--sequence-parallel",
            "--recompute-granularity", "selective", "--convention", "megatron-bridge", "--json"]
    code, out, err = cli(capsys, *argv, *(["--should-pad-vocab"] if pad else []))
    assert code == 0, err
    dense, routed, act = bridge_port(preset("llama3-70b"), dict(t=8, p=1, d=4),
                                     dict(s=4096, b=1, sequence_parallel=True,
                                          recompute="selective"), pad)
    assert json.loads(out)["bytes"]["total"] == math.ceil(dense + routed + act)


def test_every_job_command_takes_a_pasted_command(capsys, tmp_path):
    # solve, latex and plot read the same pasted job as estimate (one job record)
    path = script(tmp_path, "llama3_8b_fp8")
    code, out, err = cli(capsys, "estimate", "--launch-script", path, "--json")
    assert code == 0, err
    total = json.loads(out)["bytes"]["total"]
    code, out, err = cli(capsys, "solve", "micro-batch-size", "--launch-script", path,
                         "--gpu-memory", f"{total + 1}B", "--json")
    # the script's micro-batch 1 fits within its own total + 1 byte, and the answer divides
    # B/d = 128/8 = 16 (Megatron's batch rule)
    assert code in (0, 1), err
    if code == 0:
        assert 16 % json.loads(out)["value"] == 0
    code, out, err = cli(capsys, "latex", "--launch-script", path, "--markdown")
    assert code == 0 and "TP 1" in out and "DP 8" in out, err
    code, out, err = cli(capsys, "plot", "breakdown", "--launch-script", path, "-o",
                         str(tmp_path / "b.svg"))
    assert code == 0 and (tmp_path / "b.svg").stat().st_size > 0, err
