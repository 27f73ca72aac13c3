"""The command line: outputs, JSON contract and one-line errors (exit 2, no traceback)."""

import json
import subprocess
import sys

import pytest

from memsym.cli import main

GB = 10**9


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_json_contract(capsys):
    code, out, err = run(capsys, "estimate", "--params", "175B", "--dp", "8", "--tp", "8",
                         "--pp", "8", "--gpu-memory", "80GB", "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    b = data["bytes"]
    # seed 000 by hand: N/(pt) = 175e9/64; weights 2x, gradients 4/8 x, optimizer 12/8 x
    shard = 175 * GB / 64
    assert b["weights"] == 2 * shard
    assert b["gradients"] == 4 * shard / 8
    assert b["optimizer"] == 12 * shard / 8
    assert b["total"] == b["weights"] + b["gradients"] + b["optimizer"]
    assert data["gpu_memory_bytes"] == 80 * GB and data["fits"] is True


def test_estimate_without_capacity_has_null_fits(capsys):
    code, out, _ = run(capsys, "estimate", "--params", "7e9", "--sharding", "ddp", "--json")
    data = json.loads(out)
    assert data["fits"] is None and data["gpu_memory_bytes"] is None
    assert data["bytes"]["total"] == 16 * 7 * GB  # ZeRO baseline, fp16 gradients


def test_use_distributed_optimizer_flag_and_megatron_convention(capsys):
    code, out, _ = run(capsys, "estimate", "--params", "1e9", "--dp", "4",
                       "--use-distributed-optimizer", "--convention", "megatron-lm", "--json")
    # Megatron-LM: 6 + 12/4 = 9 bytes per parameter
    assert json.loads(out)["bytes"]["total"] == 9 * GB


def test_gpu_memory_units(capsys):
    _, out, _ = run(capsys, "estimate", "--params", "5B", "--sharding", "ddp", "--gpu-memory", "80GiB", "--json")
    data = json.loads(out)
    assert data["gpu_memory_bytes"] == 80 * 2**30
    assert data["fits"] is True  # 80 GB of states <= 85.9e9 bytes
    _, out, _ = run(capsys, "estimate", "--params", "5B", "--sharding", "ddp", "--gpu-memory", "79GB", "--json")
    assert json.loads(out)["fits"] is False


def test_solve_dp_json(capsys):
    code, out, _ = run(capsys, "solve", "dp", "--params", "175B", "--tp", "4", "--pp", "2",
                       "--gpu-memory", "80GB", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["unknown"] == "d" and data["value"] == 10  # hand: 2800/290 = 9.66 -> 10
    assert data["closed_form"] == "16*N/(C*p*t - N*b_hp)"
    assert "\\geq" in data["latex"]


def test_solve_dp_nothing_fits_exit_1(capsys):
    code, out, err = run(capsys, "solve", "dp", "--params", "175B", "--gpu-memory", "80GB")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "weights" in err


@pytest.mark.parametrize("argv,needle", [
    (["estimate", "--params", "0"], "--params"),
    (["estimate", "--params", "abc"], "--params"),
    (["estimate", "--params", "7B", "--dp", "0"], "--dp"),
    (["estimate", "--params", "7B", "--dp", "1.5"], "--dp"),
    (["estimate", "--params", "7B", "--tp", "-2"], "--tp"),
    (["estimate", "--params", "7B", "--sharding", "zer03"], "zero3"),
    (["estimate", "--params", "7B", "--optimizer", "adamm"], "adam"),
    (["estimate", "--params", "7B", "--precision", "bf17"], "bf16"),
    (["estimate", "--params", "7B", "--convention", "megatron"], "megatron-lm"),
    (["estimate", "--params", "7B", "--gpu-memory", "80"], "ambiguous"),
    (["estimate", "--params", "7B", "--gpu-memory", "80gb"], "GB"),
    (["estimate", "--params", "7B", "--gpu-memory", "1e3TB"], "memory size"),
    (["estimate", "--params", "7B", "--sharding", "zero2", "--use-distributed-optimizer"], "contradicts"),
    (["estimate", "--params", "7B", "--offload", "optimizer", "--pp", "2"], "offload"),
    (["estimate"], "--params"),
    (["solve", "dp", "--params", "7B"], "--gpu-memory"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert needle in err
    assert "Traceback" not in err


def test_latex_derivation(capsys):
    code, out, _ = run(capsys, "latex")
    assert code == 0
    assert r"\underbrace" in out and r"b_{\mathrm{hp}}" in out
    assert r"\frac{16}{d}" in out


def test_console_script_end_to_end():
    proc = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--params", "7B", "--json"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["bytes"]["total"] > 0


def test_estimate_with_cluster_prices_communication(capsys):
    # Llama-3 70B (h = 8192, L = 80) at t = 4, p = 4, d = 2 on H100 nodes; B = 32 -> m = 16
    code, out, err = run(capsys, "estimate", "llama3-70b", "--tp", "4", "--pp", "4", "--dp", "2",
                         "--seq-length", "4096", "--micro-batch-size", "1", "--global-batch-size", "32",
                         "--sequence-parallel", "--recompute-granularity", "selective",
                         "--gpu", "h100-80gb", "--json")
    assert code == 0, err
    data = json.loads(out)
    # hand (Narayanan §3.3): 4 all-reduces of s*b*h*2 bytes, ring factor 2(t-1)/t,
    # for the L/p = 20 layers of this stage and m = 16 microbatches
    tp_bytes = 4 * 4096 * 8192 * 2 * 2 * 3 // 4 * 20 * 16
    assert data["communication"]["tp"]["bytes"] == tp_bytes
    assert data["communication"]["tp"]["link"] == "intra"
    assert data["bubble"] == (4 - 1) / 16  # (p - 1)/m
    assert 0 < data["mfu"] < 1 and data["step_time_s"] > 0
    # --gpu h100-80gb supplies the capacity: 80 GB as the vendor states it
    assert data["gpu_memory_bytes"] == 80 * GB


def test_estimate_cluster_needs_model_and_sane_efficiency(capsys):
    code, out, err = run(capsys, "estimate", "--params", "7B", "--gpu", "h100-80gb")
    assert code == 2 and "model" in err and out == ""
    code, out, err = run(capsys, "estimate", "llama2-7b", "--seq-length", "4096", "--efficiency", "1.5")
    assert code == 2 and "efficiency" in err and out == ""
