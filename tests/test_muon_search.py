"""Muon in the search (issue 31): ``memsym search`` and ``memsym min-gpus`` say a Muon layout's
scheme as ``memsym estimate`` says it, and price its states and step as estimate prices the
same job.  Expected wording from Megatron-LM d98e8a64dd (arguments.py:1724-1737: the
distributed optimizer under an emerging optimizer is the layer-wise one), expected numbers
from ``memsym estimate`` / ``memsym time`` of the row's own job (the other path), or by hand.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from memsym.hardware import cluster_for, gpu
from memsym.job import job
from memsym.model import Architecture
from memsym.search import launch_overlaps, search
from memsym.timing.muon import muon_step_time, newton_schulz_time
from memsym.timing.step import step_time
from memsym.training import job_memory, phase_totals, phase_transients, training_values
from in_process import run


#: estimate's own words for the distributed optimizer under Muon (memsym.cli.report_text)
LAYER_WISE = "distributed-optimizer (layer-wise under muon)"


def test_estimate_says_the_layer_wise_words(capsys):
    code, out, _ = run(capsys, "estimate", "llama2-7b", "--optimizer", "dist_muon",
                       "--world-size", "8")
    assert code == 0 and LAYER_WISE in out


def test_min_gpus_says_the_layout_as_estimate_does(capsys):
    code, out, _ = run(capsys, "min-gpus", "llama2-7b", "--gpu", "h100-80gb",
                       "--optimizer", "dist_muon")
    assert code == 0
    line = next(l for l in out.splitlines() if l.startswith("layout: "))
    assert f"sharding {LAYER_WISE}" in line


def test_search_rows_say_the_scheme_as_estimate_does(capsys):
    code, out, _ = run(capsys, "search", "llama2-7b", "--gpus", "8", "--gpu", "h100-80gb",
                       "--optimizer", "dist_muon", "--global-batch-size", "64", "--top", "2")
    assert code == 0
    rows = [l for l in out.splitlines() if l[:3].strip() in ("1", "2")]
    assert len(rows) == 2 and all(LAYER_WISE in r for r in rows)


def test_adam_rows_keep_the_plain_scheme(capsys):
    code, out, _ = run(capsys, "min-gpus", "llama2-7b", "--gpu", "h100-80gb")
    assert code == 0 and "layer-wise" not in out


# ----------------------------------------------------------------------------------------------
# The optimizer states' Source under Muon: where Muon makes them, not DistributedOptimizer
# ----------------------------------------------------------------------------------------------
def _sources(capsys, *extra):
    code, out, _ = run(capsys, "estimate", "llama2-7b", "--world-size", "8", *extra, "--json")
    assert code == 0
    return json.loads(out)["sources"]


def test_muon_states_cite_the_momentum_buffer_and_megatrons_muon_wrapper(capsys):
    # Emerging-Optimizers fd77292 orthogonalized_optimizer.py:152-154:
    #   state["momentum_buffer"] = torch.zeros_like(p.data)
    # Megatron-LM d98e8a64dd optimizer/__init__.py:899-902: under bf16 TensorParallelMuon is
    # wrapped in Float16OptimizerWithFloat16Params (DDP); layer_wise_optimizer.py:576-589 wraps
    # it after shard_params (the layer-wise distributed optimizer)
    ddp = _sources(capsys, "--optimizer", "muon", "--sharding", "ddp")["optimizer"]
    assert "orthogonalized_optimizer.py:152-154" in ddp and "__init__.py:892-904" in ddp
    assert "distrib_optimizer.py" not in ddp
    lw = _sources(capsys, "--optimizer", "dist_muon")
    assert "layer_wise_optimizer.py:576-589" in lw["optimizer"]
    assert "orthogonalized_optimizer.py:152-154" in lw["optimizer"]
    assert "distrib_optimizer.py" not in lw["optimizer"]
    # layer_wise_optimizer.py:174-180: "Megatron DDP handle allreduce grad"
    assert "layer_wise_optimizer.py:174-180" in lw["gradients"]


def test_adam_keeps_the_distributed_optimizers_source(capsys):
    src = _sources(capsys, "--sharding", "distributed-optimizer")["optimizer"]
    assert "distrib_optimizer.py" in src


# ----------------------------------------------------------------------------------------------
# --muon-tp-mode at TP size 1
# ----------------------------------------------------------------------------------------------
#: h 64, 4 heads of 16, 2 KV groups, SwiGLU f 128, 2 layers (test_muon.py's TINY)
TINY = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                    ffn_hidden_size=128, vocab_size=256, swiglu=True, normalization="RMSNorm",
                    untie_embeddings_and_output_weights=True, max_position_embeddings=4096,
                    position_embedding_type="rope", add_bias_linear=False)


def _step(mode, t):
    dev = gpu("h100")
    return float(muon_step_time(TINY, dev, cluster_for(dev.name), 2, t=np.array(float(t)), e=1,
                                t_e=1, ndp=1, edp=1, layer_wise=False, tp_mode=mode))


def test_tp_modes_at_tp_1_cost_their_element_wise_passes_and_no_collective():
    # At t = 1 the source still runs each mode's TP branch: Transformer Engine sets
    # partition_dim on every linear weight whatever the TP size (TE d0067d0da linear.py:1857-1862),
    # orthogonalize passes it on unless blockwise (emerging_optimizers.py:403), and
    # newton_schulz_tp (Emerging-Optimizers muon_utils.py:317-343) then
    #   duplicated: all-gathers over the one-rank group and torch.cat's the single shard: one
    #     fp32 copy, read 4 + write 4 = 8 bytes per element;
    #   distributed: distributed_normalize_p2 (x * x: 8, sum: 4, x / norm: 8) = 20 bytes per
    #     element for F.normalize's 12 (read, read + write): 8 more.
    # A group of one moves nothing: no collective time.  The Newton-Schulz GEMMs are the same
    # (the whole matrix, the long side split over 1 rank), so each mode exceeds blockwise by
    # 8 bytes per element of its TP-split matrices at HBM bandwidth, by hand:
    # q 64x64, k 32x64, v 32x64, proj 64x64, fc1 (SwiGLU) 256x64, fc2 64x128 per layer
    split = 64 * 64 + 32 * 64 + 32 * 64 + 64 * 64 + 256 * 64 + 64 * 128
    assert split == 36864
    extra = 2 * 8 * split / gpu("h100").hbm_bandwidth      # 2 layers
    block = _step("blockwise", 1)
    assert _step("duplicated", 1) - block == pytest.approx(extra, rel=1e-9)
    # distributed also orients by partition_dim (muon_utils.py:336-341): the column-parallel
    # k and v (32 x 64) run their Gram on the 64 side instead of 32, 2 each over 2 layers
    dev = gpu("h100")
    gram = 2 * 2 * float(newton_schulz_time(32, 64, dev, split=1, partition_dim=0)
                         - newton_schulz_time(64, 32, dev))
    assert _step("distributed", 1) - block == pytest.approx(extra + gram, rel=1e-9)



# ----------------------------------------------------------------------------------------------
# A search under Muon prices each row as estimate (and the step time) prices that row's job
# ----------------------------------------------------------------------------------------------
MUON_CASES = (
    # Megatron-LM's default (duplicated), Megatron-Bridge's (blockwise, Nesterov on), the
    # distributed mode with 3 Newton-Schulz steps, over DDP and the layer-wise optimizer
    ({"muon_tp_mode": "duplicated"}, "distributed-optimizer"),
    ({"muon_tp_mode": "blockwise", "muon_nesterov": True}, "distributed-optimizer"),
    ({"muon_tp_mode": "distributed", "muon_num_ns_steps": 3}, "ddp"),
)


def _row_job(r, held, sharding):
    return job("llama3-8b", t=r["t"], p=r["p"], c=r["c"], d=r["d"], e=r["e"],
               v=r["v"] if r["v"] > 1 else None, micro_batch_size=r["b"],
               recompute=r["recompute"], sharding=sharding,
               sequence_parallel=r["sequence_parallel"], gpu="h100-80gb", seq_length=512,
               global_batch_size=64, optimizer="muon", **held,
               **launch_overlaps("megatron", sharding))


def phase_peak(j):
    """The phase whose total is the job's peak (memsym.training.phase_totals)."""
    vals = training_values(j.model, j.layout, j.training, dict(j.allowances))
    tots = phase_totals(j, 0)
    return max(tots, key=lambda ph: float(tots[ph].evaluate(vals)))


def test_search_rows_are_the_estimate_and_step_time_of_their_jobs():
    for held, sharding in MUON_CASES:
        # short sequences, full recompute: the optimizer step's phase is the peak, where the
        # Newton-Schulz workspace counts
        res = search("llama3-8b", "h100-80gb", 16, seq_length=512, global_batch_size=64,
                     optimizer="muon", sharding=[sharding], recompute=["full"],
                     tp=[1, 2, 4], pp=[1, 2], held=held)
        rows = [res.row(i) for i in range(len(res))]
        picked = {}
        for r in rows:                      # one row per (t, p, SP)
            picked.setdefault((r["t"], r["p"], r["sequence_parallel"]), r)
        assert {k[0] for k in picked} == {1, 2, 4}
        peaks = set()
        for r in picked.values():
            j = _row_job(r, held, sharding)
            peaks.add(phase_peak(j))
            assert float(job_memory(j).bytes_total) == pytest.approx(r["memory"], rel=1e-12), \
                (held, r)
            assert step_time(j.model, j.layout, j.training, "h100-80gb").total == \
                pytest.approx(r["step_time"], rel=1e-9), (held, r)
        assert "optimizer" in peaks
        # the exact bytes the table prints for a row: the estimate's too
        i = int(res.order()[0])
        r = res.row(i)
        j = _row_job(r, held, sharding)
        assert float(res.exact(i)["bytes"]["total"]) == \
            pytest.approx(float(job_memory(j).bytes_total), rel=1e-12)


def test_the_blockwise_workspace_is_the_tp_shard_by_hand():
    # blockwise orthogonalizes each TP shard (emerging_optimizers.py:403: partition_dim None);
    # Llama-3-8B's largest Muon matrix is fc1, 2 x 14336 x 4096 (SwiGLU), column-parallel:
    # the step's fp32 result and its two scaled copies are 12 bytes per element of its shard,
    # Nesterov's lerp 4 more (orthogonalized_optimizer.py:197, emerging_optimizers.py:237).
    # linear_qkv (48 x 128 = 6144 rows) split into Q, K, V stays below it: at t = 1 the
    # blocks' copies 4 x 6144 and Q's 12 x 4096 (x 4096 columns), 73728 < 16 x 28672
    fc1 = 2 * 14336 * 4096
    for t in (1, 2, 4):
        j = job("llama3-8b", t=t, d=2, optimizer="muon", muon_tp_mode="blockwise",
                muon_nesterov=True, sharding="ddp")
        tr = phase_transients(j, 0)["optimizer"]
        got = {term.key: term.expr.subs(training_values(j.model, j.layout, j.training)) for term in tr
               if term.key == "newton_schulz_workspace"}
        assert got == {"newton_schulz_workspace": 16 * fc1 // t}


def test_search_takes_the_muon_switches_and_holds_them(capsys):
    # before, a search refused them ("not a searched setting"); now held over every layout
    code, out, err = run(capsys, "search", "llama2-7b", "--gpus", "8", "--gpu", "h100-80gb",
                         "--optimizer", "muon", "--muon-tp-mode", "blockwise",
                         "--muon-nesterov", "--muon-num-ns-steps", "3",
                         "--global-batch-size", "64", "--top", "1")
    assert code == 0, err
    held = next(l for l in out.splitlines() if l.startswith("held from the job: "))
    for words in ("muon_tp_mode blockwise", "muon_nesterov True", "muon_num_ns_steps 3"):
        assert words in held


#: a small MLA model: q and kv down-projections (q_lora_rank 384, kv_lora_rank 256)
MLA = Architecture(num_layers=4, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=2816,
                   vocab_size=32768, swiglu=True, normalization="RMSNorm",
                   max_position_embeddings=4096, position_embedding_type="rope",
                   add_bias_linear=False, multi_latent_attention=True, q_lora_rank=384,
                   kv_lora_rank=256, qk_head_dim=64, qk_pos_emb_head_dim=32, v_head_dim=64,
                   untie_embeddings_and_output_weights=True)


def test_search_carries_mla_down_proj_fusion_into_the_step_time():
    # --mla-down-proj-fusion fuses MLA's input norm into the down-projection (Megatron-LM
    # arguments.py:3566-3572): --recompute-modules layernorm has no norm to rerun, so the
    # fused row is faster, and each row is the step time of its own job
    got = {}
    for fused in (False, True):
        held = {"mla_down_proj_fusion": fused, "recompute_modules": ("layernorm",)}
        res = search(MLA, "h100-80gb", 8, seq_length=2048, global_batch_size=64,
                     sharding=["distributed-optimizer"], recompute=["selective"], tp=[1, 2],
                     pp=[1], micro_batch_sizes=[1], held=held)
        r = res.row(int(res.order()[0]))
        j = job(MLA, t=r["t"], p=r["p"], c=r["c"], d=r["d"], e=r["e"], micro_batch_size=r["b"],
                recompute="selective", sharding="distributed-optimizer",
                sequence_parallel=r["sequence_parallel"], gpu="h100-80gb", seq_length=2048,
                global_batch_size=64, **held,
                **launch_overlaps("megatron", "distributed-optimizer"))
        assert step_time(j.model, j.layout, j.training, "h100-80gb").total == \
            pytest.approx(r["step_time"], rel=1e-9)
        got[fused] = (r["t"], r["sequence_parallel"], r["step_time"])
    assert got[True][:2] == got[False][:2] and got[True][2] < got[False][2]


def test_min_gpus_takes_the_muon_options_and_holds_them(capsys):
    # review item 2: min-gpus takes estimate's --muon-* options (the same rows) and holds them
    from memsym.cli import build_parser
    from memsym.cli.search import search_options

    args = build_parser("min-gpus").parse_args([
        "min-gpus", "llama2-7b", "--gpu", "h100-80gb", "--optimizer", "muon",
        "--muon-tp-mode", "blockwise", "--muon-nesterov", "--muon-num-ns-steps", "3"])
    assert search_options(args)["held"] == {"muon_tp_mode": "blockwise", "muon_nesterov": True,
                                            "muon_num_ns_steps": 3}
    code, _, err = run(capsys, "min-gpus", "llama2-7b", "--gpu", "h100-80gb",
                       "--optimizer", "muon", "--muon-tp-mode", "bogus")
    assert code == 2 and len(err.strip().splitlines()) == 1
