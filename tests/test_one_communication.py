"""One communication model (issue 31): estimate's per-group bytes, seconds and links are the
step time's own (memsym.timing.step.StepTime.communication), on the link a hand layout gives.

The expected link of each group is derived here from the rank order Megatron-LM uses
(``tp-cp-ep-dp-pp``, innermost first: DP's ranks are t*c apart, EP's t_e apart) and the
GPUs that share the intra-node link (8 per DGX H100 node; 72 on a GB200 NVL72 rack).  The
expected seconds of DP and EP are derived from their bytes with NCCL's ring step counts
(nccl-tests doc/PERFORMANCE.md) and the link's bandwidth and latency, not read back from the
model: NVLink at 450 GB/s per direction x NCCL's 370/450 (nccl-tests#212), InfiniBand at
50 GB/s; 5 us / 10 us per ring step (memsym.timing.collectives.LINK_LATENCY).
"""

import json

import pytest

from memsym import hardware
from memsym.cli import main
from memsym.model import moe_layer_pattern, preset
from memsym.timing.step import step_time
from memsym.training import Layout, Training

NVLINK_H100 = 450e9 * 370 / 450     # NCCL's effective NVLink 4 rate per direction
NVLINK_GB200 = 900e9 * 370 / 450    # NVLink 5 1.8 TB/s both ways = 900 GB/s each way
IB = 50e9                           # 400 Gb/s per GPU
LAT = {"intra": 5e-6, "inter": 10e-6}


def _estimate(capsys, model, gpu, *layout, gbs=32, extra=()):
    args = ["estimate", model, "--gpu", gpu, *layout, "--seq-length", "4096",
            "--global-batch-size", str(gbs), "--json", *extra]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def _step(rep, model, lay, clu, gbs=32, **training):
    tr = Training(seq_length=4096, micro_batch_size=1, global_batch_size=gbs,
                  flash_attention=True, dropout=rep["training"]["dropout"], **training)
    return step_time(preset(model), lay, tr, clu.gpu.name, clu)


def _same_as_step(rep, st, groups):
    for g in groups:
        got, want = rep["communication"][g], st.communication[g]
        assert got["seconds"] == pytest.approx(want["seconds"], rel=1e-12), g
        assert got["bytes"] == want["bytes"], g
        assert got["link"] == want["link"], g
        # the step time's own breakdown is what the report calls exposed
        assert got["exposed_seconds"] == pytest.approx(st.parts[g], rel=1e-12), g


def test_dp_inside_one_node_is_nvlink(capsys):
    # t=4, p=2, d=2 on 8-GPU nodes: DP ranks are t*c = 4 apart, 2 of them: span 8 <= 8.
    # (The closed forms' tp-cp-pp-dp order put DP outside PP, span 16: inter-node.)
    rep = _estimate(capsys, "llama3-8b", "h100-80gb", "--tp", "4", "--pp", "2", "--dp", "2")
    st = _step(rep, "llama3-8b", Layout(t=4, p=2, d=2), hardware.cluster_for("h100-80gb", 8))
    _same_as_step(rep, st, ("tp", "pp", "dp"))
    dp = rep["communication"]["dp"]
    assert (rep["communication"]["tp"]["link"], dp["link"]) == ("intra", "intra")
    assert rep["communication"]["pp"]["link"] == "inter"      # PP outermost: span 16
    # distributed optimizer: one reduce-scatter + one all-gather, (n-1) ring steps each
    assert dp["seconds"] == pytest.approx(dp["bytes"] / NVLINK_H100 + 2 * (2 - 1) * LAT["intra"],
                                          rel=1e-9)
    # --overlap-grad-reduce is off (Megatron's default): all of it is exposed
    assert dp["exposed_seconds"] == pytest.approx(dp["seconds"], rel=1e-12)


def test_dp_across_nodes_is_the_network_and_bf16_grads_halve_them(capsys):
    # t=4, d=4: DP span 4 x 4 = 16 > 8 GPUs per node
    rep = _estimate(capsys, "llama3-8b", "h100-80gb", "--tp", "4", "--dp", "4")
    st = _step(rep, "llama3-8b", Layout(t=4, d=4), hardware.cluster_for("h100-80gb", 8))
    _same_as_step(rep, st, ("tp", "dp"))
    dp = rep["communication"]["dp"]
    assert dp["link"] == "inter" and rep["communication"]["tp"]["link"] == "intra"
    assert dp["seconds"] == pytest.approx(dp["bytes"] / IB + 2 * (4 - 1) * LAT["inter"],
                                          rel=1e-9)
    # --grad-reduce-in-bf16: the reduce-scatter moves 2-byte gradients, the all-gather 2-byte
    # weights either way: (2 + 2) / (4 + 2) of the bytes (a dense model)
    bf16 = _estimate(capsys, "llama3-8b", "h100-80gb", "--tp", "4", "--dp", "4",
                     extra=("--grad-reduce-in-bf16",))["communication"]["dp"]
    assert bf16["bytes"] / dp["bytes"] == pytest.approx(4 / 6, rel=1e-9)
    st16 = _step(rep, "llama3-8b", Layout(t=4, d=4), hardware.cluster_for("h100-80gb", 8),
                 grad_dtype="bf16")
    assert bf16["seconds"] == pytest.approx(st16.communication["dp"]["seconds"], rel=1e-12)


def test_ep_on_an_nvl72_rack_stays_on_nvlink(capsys):
    # EP 16 (and DP 16) with 4 GPUs per compute tray: EP ranks are t_e = 1 apart, span 16,
    # inside the rack's 72-GPU NVLink domain; on 4-GPU nodes alone it would be inter-node
    rep = _estimate(capsys, "qwen3-30b-a3b", "gb200", "--gpus-per-node", "4", "--ep", "16",
                    "--dp", "16", gbs=64)
    clu = hardware.cluster_for("gb200", 4)
    st = _step(rep, "qwen3-30b-a3b", Layout(d=16, e=16), clu, gbs=64)
    _same_as_step(rep, st, ("tp", "dp", "ep"))
    ep, dp = rep["communication"]["ep"], rep["communication"]["dp"]
    assert (ep["link"], dp["link"]) == ("intra", "intra")
    moe_layers = 48            # Qwen3-30B-A3B: every one of its 48 layers is MoE
    assert sum(moe_layer_pattern(preset("qwen3-30b-a3b"))) == moe_layers
    m = 64 // 16
    # dispatch + combine, forward and backward: 4 all-to-alls of (e - 1) ring steps per MoE
    # layer and micro-batch, and the forward's all-gather of the 128 experts' int64 token
    # counts over the 16 ranks (token_dispatcher.py preprocess), 15 more steps
    calls = 4 * moe_layers * m
    gathers = moe_layers * m
    counts = gathers * 15 * 128 * 8          # bytes one GPU sends in them: 15/16 of 16 x 1 kB
    assert ep["seconds"] == pytest.approx(ep["bytes"] / NVLINK_GB200
                                          + (calls + gathers) * (16 - 1) * LAT["intra"], rel=1e-9)
    assert dp["seconds"] == pytest.approx(dp["bytes"] / NVLINK_GB200 + 2 * (16 - 1) * LAT["intra"],
                                          rel=1e-9)
    # the same job on 8-GPU H100 nodes: span 16 > 8, both leave the node.  Of a GPU's 15 EP
    # peers 8 sit on the other node: 8/15 of the bytes it sends go through its NIC, the other
    # 7/15 over NVLink beside them (memsym.timing.moe.ep_alltoall_time), so the NIC sets the pace
    h100 = _estimate(capsys, "qwen3-30b-a3b", "h100-80gb", "--ep", "16", "--dp", "16", gbs=64)
    assert h100["communication"]["ep"]["link"] == "inter"
    a2a = h100["communication"]["ep"]["bytes"] - counts
    assert h100["communication"]["ep"]["seconds"] == pytest.approx(
        a2a * 8 / 15 / IB + counts / IB + (calls + gathers) * (16 - 1) * LAT["inter"], rel=1e-9)
