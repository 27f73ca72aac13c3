"""The flex MoE dispatcher's buffers (memsym.terms.dispatcher_buffers), each against byte
counts derived by hand from DeepEP's source, and the three ways they reach a job: a
Megatron-LM command, a Megatron-Bridge recipe, the CLI.

Sources: DeepEP hybrid-ep 94a9f8f6b1 (csrc/config.hpp:51-100, deep_ep/buffer.py:228-282,
csrc/deep_ep.cpp:145-188, csrc/hybrid_ep/buffer/intranode.cu, extension/allgather.cu,
buffer/internode_doca.cu);
Megatron-LM d98e8a64dd (moe/fused_a2a.py get_buffer, token_dispatcher.py _DeepepManager).
"""

from __future__ import annotations

import json

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.symbols import E, b, c, e, h, s, t, t_e
from memsym.terms.dispatcher_buffers import (deepep_buffer, deepep_buffer_bytes, hybridep_buffer,
                                             hybridep_rdma_buffer)
from memsym.training import training_memory

MIB = 2**20


def test_deepep_intranode_by_hand():
    """DeepSeek-V3 (h = 7168, hidden_bytes = 2h = 14336) over 8 ranks, 20 SMs (10 channels):
    dispatch and combine configs both receive 256 NVLink tokens; one rank's queue entry holds
    the token, SourceMeta (8), 128 int64 top-k indices (1024), 128 fp32 weights (512) and 128
    fp32 scales (512) = 16392 B.  NVL: 10 x 8 x (2 x 1 + 3) x 4 = 1600, plus 10 x 8 x 256 x
    16392 = 335708160; 335709760 rounded up to 128 = 335709824.  No RDMA within 8 ranks."""
    assert deepep_buffer_bytes(14336, 8) == (335709824, 0)
    # + the 160 B of barrier signals and peer pointers + the 32 MiB workspace
    assert deepep_buffer().evaluate({h: 7168, e: 8, t_e: 1}) == 335709824 + 160 + 32 * MIB


def test_deepep_internode_by_hand():
    """64 ranks: 8 NVLink peers x 8 RDMA ranks.  NVL: 10 x 8 x (2 x 8 + 3) x 4 = 6080 and
    10 x 8 x 288 x 16392 = 377671680 -> 377677760 -> 377677824 (128-aligned).  RDMA: dispatch
    (send 28) and combine (send 20) both round 128 receive tokens up to 140; 10 x 8 x (8 x 2 +
    2) x 2 x 4 = 11520 and 10 x 8 x 140 x 2 x (16392 + 16) = 367539200: 367550720."""
    assert deepep_buffer_bytes(14336, 64) == (377677824, 367550720)
    assert deepep_buffer().evaluate({h: 7168, e: 32, t_e: 2}) == \
        377677824 + 160 + 32 * MIB + 367550720


def test_deepep_sm_count_scales_the_channels():
    """24 SMs: 12 channels, 6/5 of the 20-SM queues (before the 128-byte rounding)."""
    nvl20, _ = deepep_buffer_bytes(4096, 4, 20)
    nvl24, _ = deepep_buffer_bytes(4096, 4, 24)
    assert abs(nvl24 * 5 - nvl20 * 6) < 128 * 6


def test_hybridep_by_hand():
    """Qwen3-30B-A3B (h 2048, 128 experts) at t = 4 (SP), e = 4, t_e = 1, s = 2048: T = 512
    tokens per rank, 4 ranks, 32 local experts, one NVLink domain of 4.  Slots T G = 2048,
    each 2 x 2048 + 4 x 32 x 4 + 4 x 16 = 4672 B; the gathered map 2048 x 128 bools."""
    got = hybridep_buffer().evaluate({h: 2048, E: 128, e: 4, t_e: 1, s: 2048, b: 1, c: 1, t: 4})
    assert got == 2048 * 4672 + 2048 * 128


def test_only_the_device_count_sees_them():
    """cudaMalloc / IPC / NVSHMEM memory: in the device total, not in PyTorch's counters; only
    on a MoE model; refused outside DeepEP's group sizes and outside Megatron."""
    kw = dict(t=4, e=4, t_e=1, d=2, sequence_parallel=True, seq_length=2048)
    base = training_memory(job("qwen3-30b-a3b", **kw)).grouped()
    deep = training_memory(job("qwen3-30b-a3b", moe_dispatcher="deepep", **kw)).grouped()
    assert deep["deepep_buffers"] == deepep_buffer_bytes(4096, 4)[0] + 160 + 32 * MIB
    assert deep["total"] - base["total"] == deep["deepep_buffers"]
    alloc = training_memory(job("qwen3-30b-a3b", moe_dispatcher="deepep", metric="allocated",
                                **kw)).grouped()
    assert "deepep_buffers" not in alloc
    with pytest.raises(InvalidValueError, match="needs an MoE model"):
        job("llama2-7b", d=8, moe_dispatcher="deepep")
    with pytest.raises(InvalidValueError, match="no dispatch config for 3 ranks"):
        job("qwen3-30b-a3b", t=1, e=3, t_e=1, d=3, seq_length=2048, moe_dispatcher="deepep")
    with pytest.raises(InvalidValueError, match="Megatron-core's, not torchtitan's"):
        job("qwen3-30b-a3b", e=4, d=4, seq_length=2048, moe_dispatcher="hybridep",
            framework="torchtitan")


_MOE = ["--num-layers", "4", "--hidden-size", "2048", "--num-attention-heads", "32",
        "--seq-length", "2048", "--max-position-embeddings", "2048", "--micro-batch-size", "1",
        "--bf16", "--use-distributed-optimizer", "--vocab-size", "32000", "--num-experts", "8",
        "--moe-router-topk", "2", "--expert-model-parallel-size", "4", "--world-size", "4"]


def _megatron(*extra):
    from memsym.readers.jobs import megatron_job
    from memsym.readers.megatron import read_megatron_args

    return megatron_job(read_megatron_args(_MOE + list(extra)))


def test_megatron_flags_reach_the_job():
    """--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep|hybridep (and the
    deprecated --moe-enable-deepep, transformer_config.py:1743-1753)."""
    assert _megatron().training.memory.moe_dispatcher == "alltoall"
    for backend in ("deepep", "hybridep"):
        j = _megatron("--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend",
                      backend)
        assert j.training.memory.moe_dispatcher == backend
        assert f"{backend}_buffers" in training_memory(j).grouped()
    assert _megatron("--moe-token-dispatcher-type", "flex", "--moe-enable-deepep") \
        .training.memory.moe_dispatcher == "deepep"
    with pytest.raises(InvalidValueError, match="memsym models deepep and hybridep"):
        _megatron("--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "ncclep")


def test_bridge_recipes_that_set_flex():
    """qwen3_30b_a3b_pretrain_8gpu_h100 runs DeepEP, deepseek_v3_pretrain_256gpu_b300_fp8mx
    HybridEP (model.moe_token_dispatcher_type flex); a recipe calling
    apply_flex_dispatcher_backend runs its backend; a dense recipe sets none."""
    def read(name):
        return bridge_job_options(read_bridge_recipe(name))

    assert read("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config")[1]["moe_dispatcher"] == "deepep"
    assert read("deepseek_v3_pretrain_256gpu_b300_fp8mx_config")[1]["moe_dispatcher"] == "hybridep"
    # the library recipe, which calls apply_flex_dispatcher_backend itself (recipes/deepseek/
    # h100/deepseek_v3.py:256); the perf recipe of its name, on the library's alias
    # deepseek_v3_pretrain_config (perf_recipes/deepseek/h100/deepseek_v3.py:30), inherits it
    _, opts, notes = read("recipes.deepseek.h100.deepseek_v3.deepseek_v3_pretrain_1024gpu_h100_bf16_config")
    # EP 64 over 8-GPU nodes: the RDMA buffers are counted now, no note says otherwise
    assert opts["moe_dispatcher"] == "hybridep" and not any("RDMA buffers" in n for n in notes)
    assert read("deepseek_v3_pretrain_1024gpu_h100_bf16_config")[1]["moe_dispatcher"] == "hybridep"
    _, opts, _ = bridge_job_options(read_bridge_recipe("llama3_70b_pretrain_config"))
    assert "moe_dispatcher" not in opts


def test_the_cli_reaches_them(capsys):
    """--moe-dispatcher deepep: the breakdown's deepep_buffers row, cited to DeepEP."""
    argv = ["estimate", "qwen3-30b-a3b", "--tp", "4", "--ep", "4", "--etp", "1", "--dp", "2",
            "--sequence-parallel", "--seq-length", "2048", "--json"]
    assert main(argv + ["--moe-dispatcher", "deepep"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["bytes"]["deepep_buffers"] == deepep_buffer_bytes(4096, 4)[0] + 160 + 32 * MIB
    assert got["training"]["moe_dispatcher"] == "deepep"
    assert main(argv[:-1] + ["--moe-dispatcher", "deepep"]) == 0
    out = capsys.readouterr().out
    assert "deepep_buffers" in out and "deepep, csrc/config.hpp" in out


def test_hybridep_nvlink_domain_of_the_gpu():
    """detect_accessible_ranks: on an NVL72 rack (GB200) all 16 ranks share one NVLink domain,
    so the probability slots hold E/e x 16 local experts' probabilities, not E/e x 8 (HGX)."""
    vals = {h: 2048, E: 128, e: 16, t_e: 1, s: 4096, b: 1, c: 1, t: 1}
    slots = 4096 * 16
    assert hybridep_buffer(72).evaluate(vals) - hybridep_buffer(8).evaluate(vals) == \
        slots * 4 * 8 * (16 - 8)
    kw = dict(e=16, t_e=1, d=16, seq_length=4096, moe_dispatcher="hybridep")
    rack = training_memory(job("qwen3-30b-a3b", gpu="gb200", **kw)).grouped()["hybridep_buffers"]
    assert rack == hybridep_buffer(72).evaluate(vals)


def test_allgather_keeps_the_gathered_tokens_in_the_global_buffer():
    """MoEAllGatherTokenDispatcher gathers the e t_e group's hidden states into Megatron's
    GlobalMemoryBuffer ("mpu", kept for the run): Qwen3-30B-A3B at t = 4 (SP), e = 4,
    t_e = 1, s = 2048: 512 tokens per rank x 4 ranks x 2048 x 2 bytes = 8388608, inside
    PyTorch's allocator (so in the allocated count too); none on one rank."""
    kw = dict(t=4, e=4, t_e=1, d=2, sequence_parallel=True, seq_length=2048)
    for metric in ("device", "allocated"):
        est = training_memory(job("qwen3-30b-a3b", moe_dispatcher="allgather", metric=metric, **kw))
        assert est.breakdown()["dispatcher_gather_buffer"] == 512 * 4 * 2048 * 2
    from memsym.terms.dispatcher_buffers import allgather_dispatch_buffer

    assert allgather_dispatch_buffer().evaluate({s: 4096, b: 1, c: 1, t: 1, e: 1, t_e: 1,
                                                 h: 2048}) == 0
    j = _megatron("--moe-token-dispatcher-type", "allgather")
    assert j.training.memory.moe_dispatcher == "allgather"
    assert "dispatcher_gather_buffer" in training_memory(j).breakdown()


def _rdma_by_hand(tokens, hidden, local_experts, per_domain, nodes, chunk=64):
    """internode_doca.cu's cudaMalloc sizes, one by one [bytes]: dispatch (383-432) and
    combine (557-592), uint16 tokens, fp32 probabilities and scaling factors, uint64 flags."""
    remote = nodes - 1
    flags_d = ((tokens - 1) // chunk + 1) * remote + 2 * remote
    dispatch = [tokens * hidden * 2,                                      # attn_input_token
                tokens * local_experts * per_domain * nodes * 4,          # attn_input_prob
                tokens * (hidden // 128) * 4,                             # attn_input_scaling_factor
                tokens * remote * hidden * 2,                             # rdma_inter_node_group_token
                tokens * remote * local_experts * per_domain * 4,         # ..._prob
                tokens * remote * (hidden // 128) * 4,                    # ..._scaling_factor
                flags_d * 8, flags_d * 8, 8]          # group flags, attn_input_flags, expected
    combine = [tokens * remote * hidden * 2, tokens * remote * local_experts * per_domain * 4,
               tokens * remote * hidden * 2, tokens * remote * local_experts * per_domain * 4,
               flags_d * 8, flags_d * 8, 8]
    return sum(dispatch) + sum(combine)


def test_hybridep_rdma_buffers_by_hand():
    """HybridEP's RDMA coordinator, when the e t_e group spans NVLink domains
    (hybrid_ep.cu:61-97): DeepSeek-V3 at TP 2 (SP), EP 64 on 8-GPU HGX nodes (T = 2048
    tokens per rank, 8 nodes, 4 local experts), and Qwen3-30B-A3B at EP 16 (T = 4096, 2
    nodes, 8 local experts); none inside one domain (EP 8 on HGX, EP 16 on an NVL72 rack)."""
    v3 = {h: 7168, E: 256, e: 64, t_e: 1, s: 4096, b: 1, c: 1, t: 2}
    assert _rdma_by_hand(2048, 7168, 4, 8, 8) == 657_202_640
    assert hybridep_rdma_buffer().evaluate(v3) == 657_202_640
    qwen = {h: 2048, E: 128, e: 16, t_e: 1, s: 4096, b: 1, c: 1, t: 1}
    assert hybridep_rdma_buffer().evaluate(qwen) == _rdma_by_hand(4096, 2048, 8, 8, 2) == 72_878_160
    assert hybridep_rdma_buffer(72).evaluate(qwen) == 0
    assert hybridep_rdma_buffer().evaluate({**v3, e: 8, t: 1}) == 0


def test_hybridep_rdma_buffers_reach_the_job():
    """On H100 (8-GPU NVLink domains) a 16-rank HybridEP group adds the RDMA buffers beside the
    NVLink ones, outside PyTorch's allocator (device metric only); on GB200 (NVL72) it does
    not."""
    kw = dict(e=16, t_e=1, d=16, seq_length=4096, moe_dispatcher="hybridep")
    hgx = training_memory(job("qwen3-30b-a3b", gpu="h100", **kw)).grouped()
    assert hgx["hybridep_rdma_buffers"] == _rdma_by_hand(4096, 2048, 8, 8, 2)
    rack = training_memory(job("qwen3-30b-a3b", gpu="gb200", **kw)).grouped()
    assert rack.get("hybridep_rdma_buffers", 0) == 0
    alloc = training_memory(job("qwen3-30b-a3b", gpu="h100", metric="allocated", **kw)).grouped()
    assert "hybridep_rdma_buffers" not in alloc
