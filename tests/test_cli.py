"""The command line: outputs, JSON contract and one-line errors (exit 2, no traceback)."""

import json
import subprocess
import sys
from fractions import Fraction

import pytest

from in_process import run

#: PyTorch's "total capacity" (cudaMemGetInfo) for an H100 80GB, 79.11 GiB, as
#: vllm-project/vllm#27508 prints it.
H100_CUDA_TOTAL = int(Fraction("79.11") * 2**30)

GB = 10**9


def test_estimate_json_contract(capsys):
    code, out, err = run(capsys, "estimate", "--params", "175B", "--dp", "8", "--tp", "8",
                         "--pp", "8", "--gpu-memory", "80GB", "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    b = data["bytes"]
    # Megatron-core's distributed optimizer by hand (the default, convention framework):
    # N/(pt) = 175e9/64; bf16 weights 2x, the whole fp32 gradient buffer 4x on every rank
    # (NVIDIA/Megatron-LM#654), fp32 master + Adam moments 12/8 x sharded over d = 8
    shard = 175 * GB / 64
    assert b["weights"] == 2 * shard
    assert b["gradients"] == 4 * shard
    assert b["optimizer"] == 12 * shard / 8
    assert b["total"] == b["weights"] + b["gradients"] + b["optimizer"]
    assert data["gpu_memory_bytes"] == 80 * GB and data["fits"] is True


def test_estimate_without_capacity_has_null_fits(capsys):
    code, out, _ = run(capsys, "estimate", "--params", "7e9", "--sharding", "ddp", "--json")
    data = json.loads(out)
    assert data["fits"] is None and data["gpu_memory_bytes"] is None
    # Megatron DDP with bf16: 2 + 4 (fp32 gradient buffer) + 12 = 18 bytes per parameter
    # (Megatron-LM docs/user-guide/features/dist_optimizer.md)
    assert data["bytes"]["total"] == 18 * 7 * GB


def test_use_distributed_optimizer_flag_and_megatron_convention(capsys):
    code, out, _ = run(capsys, "estimate", "--params", "1e9", "--dp", "4",
                       "--use-distributed-optimizer", "--convention", "megatron-lm", "--json")
    # Megatron-LM: 6 + 12/4 = 9 bytes per parameter
    assert json.loads(out)["bytes"]["total"] == 9 * GB


def test_gpu_memory_units(capsys):
    _, out, _ = run(capsys, "estimate", "--params", "4.5B", "--sharding", "ddp", "--gpu-memory", "80GiB", "--json")
    data = json.loads(out)
    assert data["gpu_memory_bytes"] == 80 * 2**30
    assert data["fits"] is True  # 18 x 4.5e9 = 81 GB of states <= 85.9e9 bytes
    _, out, _ = run(capsys, "estimate", "--params", "4.5B", "--sharding", "ddp", "--gpu-memory", "80GB", "--json")
    assert json.loads(out)["fits"] is False


def test_solve_dp_json(capsys):
    # seed 000's distributed optimizer, N/(pt)(b_hp + 16/d)
    code, out, _ = run(capsys, "solve", "dp", "--params", "175B", "--tp", "4", "--pp", "2",
                       "--gpu-memory", "80GB", "--convention", "seed000", "--json")
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
    assert r"\frac{12}{d}" in out          # Megatron: (b_hp + 4 + 12/d), the default
    code, out, _ = run(capsys, "latex", "--convention", "seed000")
    assert code == 0 and r"\frac{16}{d}" in out      # seed 000: (b_hp + 16/d)


def test_console_script_end_to_end():
    proc = subprocess.run([sys.executable, "-m", "memsym", "estimate", "--params", "7B", "--json"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    # seed 000, summary formula, with the command's defaults (distributed optimizer, bf16,
    # Adam, d = 1): bf16 weights 2 B + fp32 gradients 4 B + fp32 master/momentum/variance
    # 12 B = 18 B per parameter -> 7e9 * (2 + 16) = 126e9 bytes (nothing sharded at d = 1)
    byt = json.loads(proc.stdout)["bytes"]
    assert byt == {"weights": 14 * 10**9, "gradients": 28 * 10**9, "optimizer": 84 * 10**9,
                   "total": 126 * 10**9}


def test_estimate_with_cluster_prices_communication(capsys):
    # Llama-3 70B (h = 8192, L = 80) at t = 4, p = 4, d = 2 on H100 nodes; B = 32 -> m = 16
    code, out, err = run(capsys, "estimate", "llama3-70b", "--tp", "4", "--pp", "4", "--dp", "2",
                         "--seq-length", "4096", "--micro-batch-size", "1", "--global-batch-size", "32",
                         "--sequence-parallel", "--recompute-granularity", "selective",
                         "--gpu", "h100-80gb", "--json")
    data = json.loads(out)
    assert code == (0 if data["fits"] else 1), err     # estimate exits 1 when it does not fit
    # hand: Narayanan §3.3's 4 all-reduces of s*b*h*2 bytes per layer (ring factor 2(t-1)/t;
    # under SP each is an all-gather plus a reduce-scatter of (t-1)/t each), plus the two input
    # all-gathers the backward repeats under SP for the weight gradients of the column-parallel
    # GEMMs (Megatron-core tensor_parallel/layers.py, LinearWithGradAccumulationAndAsync-
    # Communication.backward, "if ctx.sequence_parallel: ... dist_all_gather_func"): 5 x
    # 2(t-1)/t s b h 2 bytes, for the L/p = 20 layers of this stage and m = 16 micro-batches
    tp_bytes = 5 * 4096 * 8192 * 2 * 2 * 3 // 4 * 20 * 16
    assert data["communication"]["tp"]["bytes"] == tp_bytes
    assert data["communication"]["tp"]["link"] == "intra"
    assert data["bubble"] == (4 - 1) / 16  # (p - 1)/m
    assert 0 < data["mfu"] < 1 and data["step_time_s"] > 0
    # --gpu h100-80gb supplies the capacity: the 79.11 GiB CUDA reports for it (PyTorch's
    # "total capacity" in vllm-project/vllm#27508), not the datasheet's decimal 80 GB
    assert data["gpu_memory_bytes"] == H100_CUDA_TOTAL > 80 * GB
    assert "cuda-total-h100" in data["gpu_memory_note"]


def test_estimate_cluster_needs_model_and_sane_efficiency(capsys):
    # (review fix) --gpu alone now supplies the capacity of a --params estimate; the options
    # that price communication and time still need a model
    code, out, err = run(capsys, "estimate", "--params", "7B", "--efficiency", "0.5")
    assert code == 2 and "model" in err and "--efficiency" in err and out == ""
    code, out, err = run(capsys, "estimate", "--params", "7B", "--gpu", "h100-80gb",
                         "--inter-node-bandwidth", "50")
    assert code == 2 and "model" in err and "--inter-node-bandwidth" in err and out == ""
    code, out, err = run(capsys, "estimate", "llama2-7b", "--seq-length", "4096", "--efficiency", "1.5")
    assert code == 2 and "efficiency" in err and out == ""
    code, out, err = run(capsys, "estimate", "llama2-7b", "--seq-length", "4096", "--efficiency", "0")
    assert code == 2 and "efficiency" in err and out == ""


def test_params_with_gpu_supplies_capacity(capsys):
    # seed 000 with the command's defaults: 7e9 x 18 B = 126 GB > the H100's 79.11 GiB
    code, out, err = run(capsys, "estimate", "--params", "7B", "--gpu", "h100-80gb", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["gpu_memory_bytes"] == H100_CUDA_TOTAL and data["fits"] is False
    assert data["bytes"]["total"] == 126 * GB
    # the datasheet reading on request (seed 000 and 004 size GPUs by it)
    code, out, err = run(capsys, "estimate", "--params", "7B", "--gpu-memory", "80GB", "--json")
    assert json.loads(out)["gpu_memory_bytes"] == 80 * GB


LLAMA70B_CLUSTER = ["llama3-70b", "--tp", "4", "--pp", "4", "--dp", "2", "--seq-length", "4096",
                    "--micro-batch-size", "1", "--global-batch-size", "32", "--sequence-parallel",
                    "--recompute-granularity", "selective", "--gpu", "h100-80gb"]
# hand, as in test_estimate_with_cluster_prices_communication
LLAMA70B_TP_BYTES = 5 * 4096 * 8192 * 2 * 2 * 3 // 4 * 20 * 16


def test_text_estimate_prints_communication_and_time(capsys):
    code, out, err = run(capsys, "estimate", *LLAMA70B_CLUSTER)
    assert code == (1 if out.startswith(("does NOT fit", "tight:")) else 0), err
    after = out.split("communication per GPU per step", 1)[1]     # after the memory table
    assert f"{LLAMA70B_TP_BYTES:,}" in after
    # bubble (p - 1)/m = 3/16
    assert f"pipeline bubble: {100 * 3 / 16:.3g} % of the compute time" in after  # (p-1)/m = 3/16
    assert "step time:" in after and "MFU" in after


def test_framework_convention_prices_communication_too(capsys):
    for conv in ("megatron-lm", "megatron-bridge"):
        code, out, err = run(capsys, "estimate", *LLAMA70B_CLUSTER, "--convention", conv, "--json")
        assert code == 0, err
        data = json.loads(out)
        assert data["communication"]["tp"]["bytes"] == LLAMA70B_TP_BYTES
        assert data["bubble"] == 3 / 16
        code, out, err = run(capsys, "estimate", *LLAMA70B_CLUSTER, "--convention", conv)
        assert code == 0 and "communication per GPU per step" in out


def test_text_table_keys_never_run_into_numbers(capsys):
    code, out, _ = run(capsys, "estimate", "llama3-70b", "--tp", "4", "--pp", "4", "--seq-length",
                       "4096", "--sequence-parallel", "--convention", "megatron-bridge")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("weights_and_optimizer")]
    assert {line.split()[0] for line in rows} >= {"weights_and_optimizer_dense"}
    for line in rows:
        key = line.split()[0]
        assert line[len(key)] == " " and line.split()[1].replace(",", "").isdigit()


def test_moe_dp_traffic_uses_total_parameters(capsys):
    # Mixtral 8x7B, t = p = 1, d = 8, DDP: every expert's gradient is all-reduced, so the DP
    # bytes are the ring all-reduce 2(d-1)/d of all N parameters x 4-byte gradients (Megatron-LM
    # arguments.py validate_args at d98e8a64dd: under --bf16, "accumulate and all-reduce
    # gradients in fp32" unless --grad-reduce-in-bf16), N the total count (not the 12.9e9
    # active parameters)
    # the hand count of the next test (HF config of Mixtral 8x7B): 46,702,792,704 parameters
    n_total = 46_702_792_704
    code, out, err = run(capsys, "estimate", "mixtral-8x7b", "--dp", "8", "--seq-length", "4096",
                         "--sharding", "ddp", "--gpu", "h100-80gb", "--json")
    assert code == (0 if json.loads(out)["fits"] else 1), err
    dp_bytes = json.loads(out)["communication"]["dp"]["bytes"]
    assert dp_bytes == 2 * 7 * n_total * 4 // 8


def test_moe_dp_traffic_with_expert_parallelism(capsys):
    # Mixtral 8x7B with e = 8: a GPU holds the dense parameters and 1/8 of the experts; the
    # dense gradients are reduced over the d = 8 data-parallel ranks, the experts' over the
    # expert-data-parallel group of d t / (e t_e) = 1 rank (Megatron-core
    # parallel_state.initialize_model_parallel), which moves nothing.
    # Hand count (HF config: h 4096, f 14336, 32 layers, 8 experts, SwiGLU = 3 h f):
    experts = 32 * 8 * 3 * 4096 * 14336                       # 45,097,156,608
    dense = 46_702_792_704 - experts                          # 1,605,636,096 (attention, norms,
    assert dense + experts // 8 == 7_242_780_672              #   router, embeddings)
    code, out, err = run(capsys, "estimate", "mixtral-8x7b", "--dp", "8", "--seq-length", "4096",
                         "--expert-model-parallel-size", "8", "--sharding", "ddp",
                         "--gpu", "h100-80gb", "--json")
    assert code == (0 if json.loads(out)["fits"] else 1), err
    # ring all-reduce 2(d-1)/d of the dense gradients, 4 bytes each (fp32 under --bf16)
    assert json.loads(out)["communication"]["dp"]["bytes"] == 2 * 7 * dense * 4 // 8
