"""Configuration search (issue 5): rules, ranking, minimum hardware, largest fits, CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings, strategies as st

from memsym import model_state, byte_widths
from memsym.analysis import smallest
from memsym.cli import main
from memsym.errors import InvalidValueError, NoFitError, UnknownNameError
from memsym.model import Architecture, preset
from memsym.search import (RULES, explain, largest_fit, launch_overlaps, min_gpus,
                           search, smallest_d)
from memsym.symbols import C as C_sym, N, d, s as s_sym
from memsym.term import Source, Term
from memsym.training import Layout, Training, training_memory

GB = 10**9
#: The capacities CUDA reports (PyTorch's "total capacity"): A100 80GB 79.14 GiB
#: (lianqi1008/Control-GIC#6), H100 80GB 79.11 GiB (vllm-project/vllm#27508).
A100_80GB = int(Fraction("79.14") * 2**30)
H100_80GB = int(Fraction("79.11") * 2**30)
ZERO = {"workspace": 0, "nccl": 0, "fragmentation": 0}


# --- rules, each named ---------------------------------------------------------------------
def test_rules_named_for_a_bad_layout():
    # Llama-3 405B: 128 heads, 8 KV heads, 126 layers; 8 GPUs per node (seed 002)
    assert explain("llama3-405b", {"t": 16, "p": 5}, "h100-80gb") == [
        "tp-per-node", "tp-kv-heads", "pp-layers"]
    assert explain("llama3-405b", {"t": 8, "p": 2}, "h100-80gb") == []


def test_vpp_rule_of_seed001():
    # seed 001 baseline: Llama3 70B, TP4 PP4 VPP5 (80/4 = 20 layers, 20 % 5 == 0); PP8 VPP5 too
    assert explain("llama3-70b", {"t": 4, "p": 4, "v": 5}, "h100-80gb") == []
    assert explain("llama3-70b", {"t": 4, "p": 8, "v": 5}, "h100-80gb") == []
    assert explain("llama3-70b", {"t": 4, "p": 4, "v": 3}, "h100-80gb") == ["vpp-layers"]
    assert explain("llama3-70b", {"t": 4, "p": 1, "v": 2}, "h100-80gb") == ["vpp-stages"]


def test_offload_only_with_p1_and_batch_rule():
    assert "offload-pp" in explain("llama2-7b", {"p": 2, "offload": "optimizer"}, "a100-80gb")
    assert explain("llama2-7b", {"p": 1, "offload": "optimizer"}, "a100-80gb") == []
    assert explain("llama2-7b", {"d": 3, "b": 2}, "a100-80gb", global_batch_size=64) == ["batch"]


def test_moe_rules():
    # Mixtral 8x7B: 8 experts; e must divide them; e*t_e | t*c*d
    assert "ep-experts" in explain("mixtral-8x7b", {"e": 3, "d": 3}, "h100-80gb")
    assert "ep-group" in explain("mixtral-8x7b", {"e": 4, "d": 2}, "h100-80gb")
    assert "ep-experts" in explain("llama2-7b", {"e": 2, "d": 2}, "h100-80gb")


def test_excluded_counts_match_the_masks_by_hand():
    # 8 GPUs, llama2-7b (32 heads, 32 layers): raw (t, p, c, d) factorizations of 8 = 20;
    # v in divisors(32) (6), b in (1, 2, 4, 8) (4): 480 raw layouts
    res = search("llama2-7b", "a100-80gb", 8, seq_length=2048, recompute=["full"],
                 sharding=["zero3"], sequence_parallel=[False], uneven=False)
    assert res.raw == 20 * 6 * 4
    # v > 1 with p = 1: the 10 factorizations with p = 1 x 5 values of v x 4 b
    assert res.excluded["vpp-stages"] == 10 * 5 * 4
    assert set(res.excluded) == set(RULES)


def test_every_row_obeys_the_rules():
    res = search("llama3-70b", "h100-80gb", 64, seq_length=4096, global_batch_size=128,
                 recompute=["selective"], sharding=["distributed-optimizer"])
    col = res.columns
    assert np.all(col["t"] * col["p"] * col["c"] * col["d"] == 64)
    for i in range(0, len(res), max(1, len(res) // 40)):
        row = res.row(i)
        assert explain(res.space, row) == [], row


# --- the vectorized memory is the training total ------------------------------------------
def test_vectorized_equals_training_memory():
    res = search("llama2-7b", "a100-80gb", 8, seq_length=2048, global_batch_size=64)
    rng = np.random.default_rng(7)
    for i in rng.choice(len(res), 12, replace=False):
        row = res.row(int(i))
        lay = Layout(t=row["t"], p=row["p"], d=row["d"], c=row["c"],
                     v=row["v"] if row["v"] > 1 else None,
                     sequence_parallel=row["sequence_parallel"],
                     first_stage_layers=row["first_stage_layers"],
                     last_stage_layers=row["last_stage_layers"])
        # a Megatron search's zero2 / fsdp rows are Megatron-FSDP (with PP too)
        tr = Training(seq_length=2048, micro_batch_size=row["b"], global_batch_size=64,
                      recompute=row["recompute"], sharding=row["sharding"],
                      megatron_fsdp={"zero2": "optim_grads",
                                     "fsdp": "optim_grads_params"}.get(row["sharding"]))
        est = training_memory("llama2-7b", lay, tr)
        assert row["memory"] == pytest.approx(float(est.bytes_total), rel=1e-12)
        ex = res.exact(int(i))
        assert ex["bytes"]["total"] == est.bytes_total
        assert ex["stage"] == est.stage


# --- ranking and Pareto front -------------------------------------------------------------
def test_ranking_and_pareto_front():
    res = search("llama3-70b", "h100-80gb", 64, seq_length=4096, global_batch_size=128,
                 recompute=["selective", "full"], sharding=["distributed-optimizer"])
    top = res.top(20)
    assert all(r["fits"] for r in top)
    times = [r["step_time"] for r in top]
    assert times == sorted(times)
    front = res.pareto()
    assert front
    for a, b in zip(front, front[1:]):
        assert a["step_time"] <= b["step_time"] and a["headroom"] < b["headroom"]
    # nothing that fits dominates a front member
    col = res.columns
    fits = col["fits"]
    for r in front:
        dom = fits & (col["step_time"] < r["step_time"]) & (col["headroom"] > r["headroom"])
        assert not dom.any()


def test_binding_term_is_the_largest():
    # 126 layers: Llama 3's end stages of 7 layers let p = 16 split the other 112 evenly
    res = search("llama3-405b", "h100-80gb", 16384, seq_length=8192, global_batch_size=2048,
                 recompute=["full"], sharding=["distributed-optimizer"],
                 first_stage_layers=7, last_stage_layers=7)
    best = res.best()
    assert best["binding"] == max(best["bytes"], key=best["bytes"].get)


def test_full_recompute_beats_none_on_memory():
    # Korthikanti Table 2 (no flash attention: the s^2 scores are what selective recompute
    # saves): full recompute keeps 2sbh per layer, far below the other modes
    opts = dict(seq_length=4096, tp=[1], pp=[1], cp=[1], sharding=["zero3"],
                sequence_parallel=[False], micro_batch_sizes=[1])
    col = search("llama2-7b", "a100-80gb", 8, flash_attention=False, **opts).columns
    mem = {rc: col["memory"][col["recompute"] == rc][0] for rc in ("none", "selective", "full")}
    assert mem["full"] < mem["selective"] < mem["none"]
    # with flash attention there are no scores to save: Megatron's checkpointed core_attn then
    # keeps Q, K and the whole fused QKV output behind V (terms.qkv_storage), while no
    # recompute keeps Q, K and a contiguous V copy; for MHA (g = a) the checkpoint holds more
    col = search("llama2-7b", "a100-80gb", 8, **opts).columns
    mem = {rc: col["memory"][col["recompute"] == rc][0] for rc in ("none", "selective", "full")}
    assert mem["full"] < mem["none"] < mem["selective"]


# --- minimum hardware: seed 004 -----------------------------------------------------------
def test_seed004_13b_rule_four_a100():
    # seed 004: 13B full fine-tune, 16 B/param (208 GB) + 20-30 % activations ~ 250 GB,
    # 250/80 = 3.125 -> 4 x A100 80GB; without the activations 208/80 = 2.6 -> 3.
    # The seed pools memory over the GPUs: ZeRO-3 over d = G GPUs (t = p = 1).
    states = model_state("zero3", convention="seed000").subs(byte_widths("zero3", convention="seed000"))
    for frac in (sp.Rational(1, 5), sp.Rational(3, 10)):
        act = Term("activations", frac * 16 * N / d, "seed 004: +20-30 % of 16P, pooled",
                   Source("seed004", "実践的な計算シミュレーション例"))
        sol = smallest(states + act, "d", 80 * GB, {"N": 13 * GB, "t": 1, "p": 1})
        assert sol.value == 4
    assert smallest(states, "d", 80 * GB, {"N": 13 * GB, "t": 1, "p": 1}).value == 3


def test_seed004_13b_model_path():
    # the same question through the model: 208 GB of states cannot fit on 2 (104 GB each);
    # with memsym's allowances (2 GiB + 10 %) and full recompute the answer is the seed's 4
    r = min_gpus("llama2-13b", "a100-80gb", seq_length=4096, recompute=["full"],
                 sharding=["zero3"], tp=[1], pp=[1], micro_batch_sizes=[1])
    assert r.gpus == 4
    assert r.method == "closed form" and r.closed_form is not None
    assert 3 < float(r.bound) <= 4


def test_seed004_7b_needs_two_80gb():
    # seed 004: 7B full fine-tune: 112 GB > 80 GB -> at least 2 x A100 80GB
    r = min_gpus("llama2-7b", "a100-80gb", seq_length=2048, recompute=["full"], allowances=ZERO)
    assert r.gpus == 2
    assert r.bytes["total"] <= 80 * GB


def test_smallest_d_closed_form_matches_vectorized():
    # ZeRO-1 at p = 2 (ZeRO-2/3 refuse PP): 2 + 14/d bytes per parameter of the stage
    sol = smallest_d("llama2-13b", "a100-80gb", sharding="zero1", seq_length=4096, p=2,
                     recompute="selective", global_batch_size=64)
    assert sol.closed_form is not None
    kw = dict(seq_length=4096, global_batch_size=64, tp=[1], pp=[2], cp=[1],
              recompute=["selective"], sharding=["zero1"], micro_batch_sizes=[1],
              sequence_parallel=[False], vpp=[1], uneven=False)
    # the vectorised search at the answer fits; at the next smaller admissible d (64 % d == 0)
    # it does not, and its float memory equals the exact estimate of the same layout
    res = search("llama2-13b", "a100-80gb", 2 * sol.value, **kw)
    assert res.columns["fits"].all()
    smaller = max(dd for dd in range(1, sol.value) if 64 % dd == 0)
    below = search("llama2-13b", "a100-80gb", 2 * smaller, **kw)
    assert not below.columns["fits"].any()
    exact = training_memory("llama2-13b", Layout(p=2, d=sol.value), Training(
        seq_length=4096, global_batch_size=64, recompute="selective", sharding="zero1"))
    assert res.columns["memory"][0] == pytest.approx(float(exact.bytes_total), rel=1e-12)


def test_min_gpus_no_fit_names_binding_term():
    with pytest.raises(NoFitError) as err:
        min_gpus("llama2-7b", "rtx4090-24gb", seq_length=2048, sharding=["ddp"], tp=[1], pp=[1],
                 max_gpus=64)
    assert "binding term" in str(err.value)


def test_largest_micro_batch_is_largest():
    lay = {"t": 1, "p": 1, "d": 8, "recompute": "full", "sharding": "zero3"}
    r = largest_fit("micro_batch_size", "llama2-7b", "a100-80gb", seq_length=2048, layout=lay)
    assert r["bytes"]["total"] <= A100_80GB
    bigger = largest_fit("micro_batch_size", "llama2-7b", "a100-80gb", seq_length=2048,
                         layout=lay, capacity=float(r["bytes"]["total"]) - 1)
    assert bigger["value"] == r["value"] - 1


def test_longest_sequence_closed_form_quadratic():
    lay = {"t": 1, "p": 1, "d": 8, "recompute": "none", "sharding": "zero3"}
    # a long-context Llama-2 7B (2^17 positions), so the position table does not bound s
    long7b = replace(preset("llama2-7b"), max_position_embeddings=2**17)
    r = largest_fit("seq_length", long7b, "a100-80gb", flash_attention=False, dropout=False,
                    layout=lay)
    cap = A100_80GB              # a100-80gb: the 79.14 GiB CUDA reports

    def est(seq):                # the same layout through the training estimate
        return training_memory(long7b, Layout(d=8), Training(
            seq_length=seq, micro_batch_size=1, recompute="none", flash_attention=False,
            dropout=False, sharding="zero3"))

    s_max = r["value"]
    # the answer fits and the next sequence length (every s is valid at c = 1) does not
    assert est(s_max).bytes_total <= cap < est(s_max + 1).bytes_total
    assert r["bytes"]["total"] == est(s_max).bytes_total
    # the bound is the real root of M(s) = C before the floor: s_max <= bound < s_max + 1
    # and the training total at s = bound is exactly the capacity
    assert s_max <= r["bound"] < s_max + 1
    e = est(s_max)
    vals = {k: v for k, v in e.values.items() if k != s_sym}
    m_full = e.total.expr.xreplace(vals)
    # the peak over the step's phases is one Max (ZeRO-3's fp32 gradient partition exists only
    # in the optimizer step): at the boundary the end of forward binds
    assert e.phase == "forward"
    for node in m_full.atoms(sp.Max):
        binding = max(node.args, key=lambda a_: a_.xreplace({s_sym: r["bound"]}))
        m_full = m_full.xreplace({node: binding})
    m_of_s = sp.expand(m_full)
    assert sp.simplify(m_of_s.xreplace({s_sym: r["bound"]}) - cap) == 0
    # without flash attention the total is quadratic in s; by hand the s^2 coefficient is the
    # softmax output kept per layer, 2 a s^2 b bytes (bf16; no dropout mask/output at
    # dropout 0, Korthikanti Sec. 4.2.1), times L = 32 layers, plus the 10 % fragmentation
    # allowance: 2 * 32 * 1 * 32 * 11/10 = 11264/5
    assert sp.Poly(m_of_s, s_sym).degree() == 2
    assert sp.Poly(m_of_s, s_sym).LC() == sp.Rational(2 * 32 * 1 * 32 * 11, 10)
    # the closed form, at the model's values and C = 79.14 GiB, is that same bound
    assert r["closed_form"].free_symbols <= set(e.values) | {C_sym}
    at = r["closed_form"].xreplace({**e.values, C_sym: sp.Integer(cap)})
    assert sp.simplify(at - r["bound"]) == 0


def test_bad_names():
    with pytest.raises(UnknownNameError):
        search("llama2-7b", "h100-80", 8)
    with pytest.raises(UnknownNameError):
        search("llama2-7b", "h100-80gb", 8, recompute=["partial"])


# --- the minimum is minimal (property) ----------------------------------------------------
@settings(max_examples=10, deadline=None, derandomize=True)
@given(layers=st.sampled_from([4, 6, 8, 12]), width=st.sampled_from([512, 1024, 2048]),
       heads=st.sampled_from([8, 16]), cap_gb=st.sampled_from([0.25, 0.5, 1, 2]))
def test_min_gpus_is_minimal(layers, width, heads, cap_gb):
    arch = Architecture(name="toy", num_layers=layers, hidden_size=width, num_attention_heads=heads,
                        vocab_size=32000, swiglu=True, normalization="RMSNorm",
                        ffn_hidden_size=4 * width, position_embedding_type="rope",
                        add_bias_linear=False)
    opts = dict(seq_length=1024, capacity=int(cap_gb * GB), recompute=["selective"],
                sharding=["distributed-optimizer", "zero3"], micro_batch_sizes=[1],
                gpus_per_node=2, cp=[1], allowances=ZERO)   # uneven end stages offered too
    try:
        r = min_gpus(arch, "a100-80gb", max_gpus=256, **opts)
    except NoFitError:
        return
    assert r.bytes["total"] <= cap_gb * GB
    if r.gpus > 1:
        fewer = search(arch, "a100-80gb", r.gpus - 1, **opts)
        assert not fewer.columns["fits"].any()
    lay = r.layout
    if lay["d"] > 1:
        smaller = search(arch, "a100-80gb", lay["t"] * lay["p"] * lay["c"] * (lay["d"] - 1),
                         tp=[lay["t"]], pp=[lay["p"]], **{k: v for k, v in opts.items() if k != "cp"},
                         cp=[lay["c"]])
        assert not smaller.columns["fits"].any()


def test_min_gpus_offers_uneven_stages():
    # Llama 3 405B with Megatron's distributed optimizer and full recompute on H100s (79.11
    # GiB): an even split needs a p dividing the 126 layers; with uneven end stages
    # (--decoder-first/last-pipeline-num-layers) a p that does not divide them fits on fewer
    # GPUs.  The answer is the exact training total of that layout, and a search at one GPU
    # fewer finds nothing
    opts = dict(sharding=["distributed-optimizer"], recompute=["full"])
    even = min_gpus("llama3-405b", "h100-80gb", uneven=False, **opts)
    best = min_gpus("llama3-405b", "h100-80gb", **opts)
    assert 126 % even.layout["p"] == 0 and best.gpus < even.gpus
    lay = best.layout
    assert 126 % lay["p"] != 0 and lay["first_stage_layers"] + lay["last_stage_layers"] + \
        (lay["p"] - 2) * ((126 - lay["first_stage_layers"] - lay["last_stage_layers"])
                          // (lay["p"] - 2)) == 126
    assert best.gpus == lay["t"] * lay["p"] * lay["d"]
    row = {**lay, "c": 1}
    est = training_memory("llama3-405b", *_training_of(row, 4096, None))
    assert est.bytes_total == best.bytes["total"] and est.bytes_total <= H100_80GB
    fewer = search("llama3-405b", "h100-80gb", best.gpus - 1, **opts)
    assert not fewer.columns["fits"].any()


# --- command line -------------------------------------------------------------------------
def test_cli_search_json_bytes_like_estimate(capsys):
    code = main(["search", "llama2-7b", "--gpu", "a100-80gb", "--gpus", "8", "--seq-length",
                 "2048", "--global-batch-size", "64", "--top", "2", "--json",
                 "--recompute", "selective", "--sharding", "zero1"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 2
    first = rows[0]
    lay = first["layout"]
    assert set(first["bytes"]) >= {"weights", "gradients", "optimizer", "activations", "total"}
    argv = ["estimate", "llama2-7b", "--tp", str(lay["tp"]), "--pp", str(lay["pp"]),
            "--dp", str(lay["dp"]), "--seq-length", "2048", "--micro-batch-size",
            str(lay["micro_batch_size"]), "--global-batch-size", "64",
            "--recompute-granularity", "selective", "--sharding", "zero1", "--json"]
    if lay["sequence_parallel"]:
        argv.append("--sequence-parallel")
    if lay["vpp"] > 1:
        argv += ["--virtual-pipeline-model-parallel-size", str(lay["vpp"])]
    assert main(argv) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["bytes"] == first["bytes"]


def test_cli_min_gpus_json(capsys):
    code = main(["min-gpus", "llama2-7b", "--gpu", "a100-80gb", "--seq-length", "2048",
                 "--recompute", "full", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert {"gpus", "layout", "bytes"} <= set(out)
    # seed 004: a 7B full fine-tune needs 2 x 80 GB.  By hand: one GPU holds at least the
    # 16 bytes/parameter of mixed-precision Adam (2 + 2 + 12), 16 * 6.74e9 = 107.8 GB > 80 GB;
    # on two (t = 2 or ZeRO over d = 2) the states halve to ~54 GB, leaving room for the
    # full-recompute activations (layer inputs only) and the allowances
    assert out["gpus"] == 2
    assert out["bytes"]["total"] <= 80 * GB


def test_cli_errors(capsys):
    assert main(["search", "llama2-7b", "--gpu", "h100-80", "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "h100-80gb" in err
    assert main(["search", "llama3-405b", "--gpu", "rtx4090-24gb", "--gpus", "8",
                 "--recompute", "none"]) == 1


def test_context_parallel_needs_2c_to_divide_the_sequence():
    # Megatron cuts the sequence into 2c chunks (rank i keeps chunks i and 2c-1-i)
    from memsym.search import explain

    assert "cp-seq" in explain("llama2-7b", {"t": 1, "p": 1, "c": 4096, "d": 1}, "h100-80gb",
                               seq_length=4096)
    assert "cp-seq" not in explain("llama2-7b", {"t": 1, "p": 1, "c": 2048, "d": 1}, "h100-80gb",
                                   seq_length=4096)


def test_cli_search_assumes_a_4m_token_batch(capsys):
    from memsym.cli import main

    assert main(["search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8", "--top", "1"]) == 0
    out = capsys.readouterr().out
    # 4 * 2^20 tokens / 4096 tokens per sequence = 1024 sequences; ranked by step time
    assert "B = 1024" in out and "ranked by step time" in out


# --- review fixes (issue 5 follow-up) -----------------------------------------------------
def _training_of(row, seq_length, global_batch, dropout=None):
    """The row as memsym.training's Layout and Training (the defaults both share,
    memsym.job.DEFAULTS), with the overlaps the search prices a launch with; ``dropout`` the
    space's where the Training goes to a function that no job resolves (step_time)."""
    lay = Layout(t=row["t"], p=row["p"], d=row["d"], c=row["c"], e=row["e"],
                 v=row["v"] if row["v"] > 1 else None, sequence_parallel=row["sequence_parallel"],
                 first_stage_layers=row.get("first_stage_layers"),
                 last_stage_layers=row.get("last_stage_layers"))
    tr = Training(seq_length=seq_length, micro_batch_size=row["b"],
                  global_batch_size=global_batch, recompute=row["recompute"],
                  sharding=row["sharding"], dropout=dropout,
                  # a Megatron search's zero2 / fsdp rows are Megatron-FSDP (memsym.emit)
                  megatron_fsdp={"zero2": "optim_grads",
                                 "fsdp": "optim_grads_params"}.get(row["sharding"]),
                  **launch_overlaps("megatron", row["sharding"]))
    return lay, tr


def test_mixed_layers_deepseek_v3_most_loaded_stage():
    # DeepSeek-V3: 61 layers, the first 3 dense, then MoE (arXiv:2412.19437 §4.2).  With
    # p = 61 each stage holds one layer: stage 1 (dense) stands in for no MoE stage; stage 3,
    # the first MoE layer, holds the experts with 61 - 3 = 58 micro-batches in flight.
    # training_memory evaluates all 61 stages one by one: the search must find the same.
    opts = dict(seq_length=4096, global_batch_size=1024, recompute=["none"],
                sharding=["distributed-optimizer"], sequence_parallel=[False], tp=[1], pp=[61],
                cp=[1], ep=[8], vpp=[1], micro_batch_sizes=[1])
    res = search("deepseek-v3", "h200-141gb", 61 * 8, **opts)
    assert len(res) == 1
    row = res.row(0)
    est = training_memory("deepseek-v3", *_training_of(row, 4096, 1024))
    assert est.stage == 3 and row["stage"] == 3
    assert row["memory"] == pytest.approx(float(est.bytes_total), rel=1e-12)
    assert res.exact(0)["bytes"]["total"] == est.bytes_total
    assert est.bytes_total > 141 * GB and not row["fits"]


def test_mixed_layers_moe_layer_freq_every_row_equals_training_memory():
    # moe_layer_freq = 2: layers 0, 2, 4, 6 are MoE, 1, 3, 5, 7 dense (Megatron: i % q == 0)
    arch = Architecture(name="toy-moe", num_layers=8, hidden_size=1024, num_attention_heads=16,
                        vocab_size=32000, swiglu=True, normalization="RMSNorm",
                        ffn_hidden_size=4096, position_embedding_type="rope",
                        add_bias_linear=False, num_experts=4, moe_router_topk=2,
                        moe_ffn_hidden_size=2048, moe_layer_freq=2)
    res = search(arch, "a100-80gb", 8, seq_length=1024, global_batch_size=32, pp=[2, 4, 8],
                 recompute=["none", "full"], sharding=["zero1", "zero3"], micro_batch_sizes=[1])
    assert len(res) > 0
    # the first row of each (p, recompute, most-loaded stage): every pipeline size, dense and
    # MoE stages as the most loaded, each recompute (a random draw of 16 rows was almost all
    # p = 2, none at p = 8)
    kinds = {}
    for i in range(len(res)):
        row = res.row(i)
        kinds.setdefault((row["p"], row["recompute"], row["stage"]), i)
    assert {p_ for p_, _, _ in kinds} == {2, 4, 8} and len({st for *_, st in kinds}) == 4
    for i in kinds.values():
        row = res.row(int(i))
        est = training_memory(arch, *_training_of(row, 1024, 32))
        assert row["stage"] == est.stage, row
        assert row["memory"] == pytest.approx(float(est.bytes_total), rel=1e-12)
        assert res.exact(int(i))["bytes"]["total"] == est.bytes_total


def test_min_gpus_deepseek_v3_without_a_batch():
    # each stage is a + b/d but their max is not (the most-loaded stage moves with d):
    # min-gpus must answer, and its answer is checked with training_memory at d and d - 1
    r = min_gpus("deepseek-v3", "h200-141gb")
    lay = r.layout
    assert r.gpus == lay["t"] * lay["p"] * lay["c"] * lay["d"]
    cap = 141 * GB

    def total(dd):
        row = dict(lay, d=dd)
        lay_, tr = _training_of(row, 4096, None)
        lay_ = replace(lay_, t_e=lay["t_e"])     # the experts' TP min-gpus chose
        return training_memory("deepseek-v3", lay_, tr).bytes_total

    assert r.bytes["total"] == total(lay["d"]) <= cap
    # ep-group: e t_e divides t c d (Megatron-LM parallel_state.py:874-884 at d98e8a64dd)
    smaller = [dd for dd in range(1, lay["d"])
               if (lay["t"] * lay["c"] * dd) % (lay["e"] * lay["t_e"]) == 0]
    if smaller:
        assert total(smaller[-1]) > cap
    assert main(["min-gpus", "deepseek-v3", "--gpu", "h200-141gb"]) == 0


def test_search_step_time_is_the_timing_model_mixtral():
    # The search prices each row with memsym.timing.step (GEMM shapes, efficiency curves,
    # collectives, exact schedule), not 6n/(peak eta): every row equals the one-layout
    # memsym.timing.step.step_time of the same layout (no pipeline: no schedule to simulate).
    from memsym.timing.step import step_time

    res = search("mixtral-8x7b", "h100-80gb", 8, seq_length=4096, global_batch_size=64,
                 tp=[1], pp=[1], cp=[1], ep=[1, 8], vpp=[1], micro_batch_sizes=[1],
                 recompute=["none"], sharding=["distributed-optimizer"],
                 sequence_parallel=[False])
    assert len(res) == 2
    for i in range(2):
        row = res.row(i)
        lay, tr = _training_of(row, 4096, 64, res.space.dropout)
        one = step_time(res.space.arch, lay, tr, "h100-80gb", res.space.cluster)
        assert row["step_time"] == pytest.approx(one.total, rel=1e-9)
        # the breakdown the rows carry adds up to the step on the busiest stage
        parts = row["time"]
        assert sum(parts.values()) == pytest.approx(row["step_time"], rel=1e-9)
        assert parts["compute"] == pytest.approx(one.parts["compute"], rel=1e-9)
        assert parts["bubble"] == 0
    # the explicit efficiency override: all GEMMs at the given fraction of peak
    slow = search("mixtral-8x7b", "h100-80gb", 8, seq_length=4096, global_batch_size=64,
                  tp=[1], pp=[1], cp=[1], ep=[1], vpp=[1], micro_batch_sizes=[1],
                  recompute=["none"], sharding=["distributed-optimizer"],
                  sequence_parallel=[False], efficiency=0.25)
    one = step_time(res.space.arch, *_training_of(slow.row(0), 4096, 64, slow.space.dropout),
                    "h100-80gb",
                    res.space.cluster, eta_gemm=0.25)
    assert slow.row(0)["step_time"] == pytest.approx(one.total, rel=1e-9)


def test_efficiency_and_capacity_factor_are_checked():
    from memsym.cli.options import efficiency
    from memsym.errors import InvalidValueError

    for bad in (1.5, 0, -0.5):
        with pytest.raises(InvalidValueError, match="efficiency"):
            search("llama2-7b", "h100-80gb", 8, efficiency=bad)
    with pytest.raises(InvalidValueError, match="capacity_factor"):
        search("mixtral-8x7b", "h100-80gb", 8, capacity_factor=0)
    assert efficiency("1") == 1.0 and efficiency("0.25") == 0.25
    for cmd in (["search", "llama2-7b", "--gpus", "8"], ["min-gpus", "llama2-7b"]):
        assert main(cmd + ["--gpu", "h100-80gb", "--efficiency", "1.5"]) == 2


def test_cli_efficiency_out_of_range_one_line(capsys):
    assert main(["search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8",
                 "--efficiency", "3"]) == 2
    err = capsys.readouterr().err
    assert "0.01 <= x <= 1" in err and err.strip().count("\n") <= 1   # memsym.limits.EFFICIENCY_RANGE


def test_longest_sequence_obeys_the_cp_seq_rule():
    # c = 2: Megatron cuts the sequence into 2c = 4 chunks, so s must be a multiple of 4;
    # the answer is the largest such s that fits (checked with training_memory)
    lay = {"t": 1, "p": 1, "c": 2, "d": 4, "recompute": "full", "sharding": "zero3"}
    long7b = replace(preset("llama2-7b"), max_position_embeddings=2**20)
    r = largest_fit("seq_length", long7b, "a100-80gb", layout=lay)
    s_max = r["value"]
    assert s_max % 4 == 0

    def fits(seq):
        est = training_memory(long7b, Layout(t=1, p=1, c=2, d=4),
                              Training(seq_length=seq, recompute="full", sharding="zero3"))
        return est.bytes_total <= A100_80GB

    assert fits(s_max) and not fits(s_max + 4)
    assert explain(long7b, lay, "a100-80gb", seq_length=s_max) == []


def test_tp_ffn_checks_the_expert_ffn_of_mixed_models():
    # dense ffn 4096 and expert ffn 1000: t = 8 divides both (1000 = 8 x 125), t = 16 only
    # the dense one (1000 = 16 x 62.5)
    arch = Architecture(name="toy-moe", num_layers=8, hidden_size=1024, num_attention_heads=16,
                        vocab_size=32000, swiglu=True, normalization="RMSNorm",
                        ffn_hidden_size=4096, position_embedding_type="rope",
                        add_bias_linear=False, num_experts=4, moe_ffn_hidden_size=1000,
                        moe_layer_freq=2)
    assert "tp-ffn" not in explain(arch, {"t": 8, "sequence_parallel": True}, "h100-80gb")
    assert "tp-ffn" in explain(arch, {"t": 16, "sequence_parallel": True}, "h100-80gb",
                               gpus_per_node=16)


def test_min_gpus_reports_progress_and_names_are_chosen():
    calls = []
    r = min_gpus("llama2-7b", "a100-80gb", seq_length=2048, recompute=["FULL"],
                 sharding=["Distributed_Optimizer", "fsdp"], allowances=ZERO,
                 progress=lambda done, total: calls.append((done, total)))
    assert r.gpus == 2
    assert calls and all(1 <= done <= total for done, total in calls)
    # fsdp in a Megatron search is Megatron-FSDP optim_grads_params (its own buffers)
    assert r.layout["sharding"] in ("distributed-optimizer", "fsdp")


# --- issue 17: predictive step time, launchable layouts, uneven stages ----------------------
def _launch_check(res, row):
    """Every launch rule of memsym.rules on the row's full knobs, and Megatron's interleaved
    schedule rule (memsym.timing.schedule.schedule_rule, a port of schedules.py)."""
    from memsym import rules
    from memsym.timing.schedule import schedule_rule

    lay, tr = _training_of(row, res.space.seq_length, res.space.global_batch_size)
    k = rules.knobs(lay, tr, gpus=res.gpus, gpus_per_node=res.space.gpus_per_node, m=row["m"])
    rules.check(res.space.arch, k, rules.LAUNCH)
    assert not rules.broken(res.space.arch, k, rules.PREFERENCES), row
    assert schedule_rule(row["p"], row["m"], row["v"]) is None, row


@pytest.fixture(scope="module")
def llama3_405b_16k():
    # as `memsym search llama3-405b --gpu h100-80gb --gpus 16384 --global-batch-size 2048
    # --seq-length 8192` runs it (flash attention on, dropout off)
    return search("llama3-405b", "h100-80gb", 16384, seq_length=8192, global_batch_size=2048,
                  dropout=False)


def _distinct_layouts(res):
    """(t, p, c, d) of the fitting rows, best first, each layout once (its best row).  The
    layout read from the columns, a row built only for a layout's first (best) index: building
    every fitting row of the 16,384-GPU search took 1.5 s per call."""
    cols = [res.columns[k] for k in ("t", "p", "c", "d")]
    seen = {}
    for i in res.order():
        key = tuple(int(col[i]) for col in cols)
        if key not in seen:
            row = seen[key] = res.row(int(i))
            assert (row["t"], row["p"], row["c"], row["d"]) == key, (row, key)
    return seen


def test_llama3_405b_top_rows_are_launchable(llama3_405b_16k):
    res = llama3_405b_16k
    top = res.top(20)
    assert len(top) == 20
    for row in top:
        _launch_check(res, row)
        # m < p never wins by a mispriced bubble: every top row has m >= p
        assert row["m"] >= row["p"], row
        # a Megatron search offers what Megatron-LM launches (Framework.searched_schemes):
        # no DeepSpeed ZeRO-1/3 row; its zero2 / fsdp rows are Megatron-FSDP, run with PP
        assert row["sharding"] in ("ddp", "distributed-optimizer", "zero2", "fsdp"), row
    # the old ranking's top rows (p = 2, one micro-batch, v up to 63) are refused, by name
    assert "vpp-microbatches" in explain(res.space, {"t": 8, "p": 2, "c": 1, "d": 1024,
                                                     "v": 3, "b": 2})
    # the search's counts stay consistent: every raw layout is valid or excluded by a rule
    assert res.valid <= res.raw and res.excluded["pp-layers"] > 0
    assert res.excluded["vpp-layers"] > 0


def test_llama3_405b_meta_layout_is_offered_with_uneven_stages(llama3_405b_16k):
    # Llama 3 §3.3.2: TP 8, CP 1, PP 16, DP 128 on 16,384 H100s, one layer fewer on the first
    # and the last stage (7 + 14 x 8 + 7 = 126).  16 does not divide 126: only uneven end
    # stages make it launchable, and with v > 1 Megatron needs every stage's layers divisible
    # by v (7-layer ends: v = 1 or 7 only; 8 middle layers: v in 1, 2, 4, 8).
    res = llama3_405b_16k
    layouts = _distinct_layouts(res)
    meta = layouts[(8, 16, 1, 128)]
    assert (meta["first_stage_layers"], meta["last_stage_layers"]) in ((6, 8), (8, 6), (7, 7))
    _launch_check(res, meta)
    # the paper's 7/7 ends with v = 4 (what docs/time-accuracy.md prices at 6.69 s) break
    # vpp-layers, and the search names it
    assert explain(res.space, {"t": 8, "p": 16, "c": 1, "d": 128, "v": 4, "b": 1,
                               "first_stage_layers": 7, "last_stage_layers": 7}) == ["vpp-layers"]
    assert explain(res.space, {"t": 8, "p": 16, "c": 1, "d": 128, "v": 1, "b": 1,
                               "first_stage_layers": 7, "last_stage_layers": 7}) == []


@pytest.mark.xfail(strict=True, reason=(
    "issue 17 item 5 (blocked): Meta's layout with v = 8 and no recompute is priced at 6.00 s "
    "but needs 87.7 GB under Megatron-LM's allocation (128 in-flight chunk passes of 533 MB and "
    "the distributed optimizer's 19.1 GB of weights and fp32 gradients) and 161.6 GB under "
    "torchtitan's (torch.distributed.pipelining's kept buffers), against 84.94 GB; it ranks 55th "
    "(Megatron-FSDP optim_grads_params, no recompute, v <= 2 on 126 layers) and 44th with full recompute (torchtitan, whose DTensor TP keeps the gathered block inputs). "
    "Meta's stack frees the stage inputs/outputs and keeps no gradient buffer before the backward; "
    "docs/howto-search.md, 'Llama 3 405B's production layout', doctests every number"))
def test_llama3_405b_meta_layout_ranks_near_the_top(llama3_405b_16k):
    layouts = list(_distinct_layouts(llama3_405b_16k))
    assert (8, 16, 1, 128) in layouts[:5]
    meta = _distinct_layouts(llama3_405b_16k)[(8, 16, 1, 128)]
    assert 6.0 <= meta["step_time"] <= 7.0   # paper: 400 TFLOP/s per GPU, ~6.2-6.5 s


def test_seed001_ratios_through_the_search():
    # seed 001 (Llama 3 70B SFT, 32 H100, FP8, seq 4096, GBS 32, MBS 1, VPP 5): measured
    # throughput TP 4 -> 8: -28 %, PP 4 -> 8: -6 % (step time up in both)
    res = search("llama3-70b", "h100-80gb", 32, seq_length=4096, global_batch_size=32,
                 precision="fp8", tp=[4, 8], pp=[4, 8], cp=[1], vpp=[5], micro_batch_sizes=[1],
                 recompute=["none"], sharding=["distributed-optimizer"],
                 sequence_parallel=[True], uneven=False)
    st = {(int(t_), int(p_)): float(s_) for t_, p_, s_ in
          zip(res.columns["t"], res.columns["p"], res.columns["step_time"])}
    assert st[(8, 4)] > st[(4, 4)] and st[(4, 8)] > st[(4, 4)]
    # and TP 8 costs more than PP 8, as measured (-28 % vs -6 %)
    assert st[(8, 4)] > st[(4, 8)]


def test_interleaved_rule_is_megatrons_schedule_rule():
    # rules_layout.py's vpp-microbatches (the one the search applies) equals the port of
    # schedules.py's checks in memsym.timing.schedule.schedule_rule on every small case
    from memsym import rules
    from memsym.model import preset
    from memsym.timing.schedule import schedule_rule

    x = preset("llama2-7b")
    for p_ in range(2, 9):
        for m_ in range(1, 33):
            for v_ in (1, 2, 4):
                for n_ in (None, p_, p_ + 1, 2 * p_):
                    k = {"p": p_, "m": m_, "v": v_, "microbatch_group_size": n_}
                    mask = bool(rules.RULES["vpp-microbatches"].test(x, k))
                    assert mask == (schedule_rule(p_, m_, v_, n_) is not None), k


def test_uneven_stage_memory_equals_training_memory():
    # rows with uneven first/last stages (shared templates, layer term scaled) equal the
    # exact per-layout total of memsym.training
    res = search("llama3-70b", "h100-80gb", 64, seq_length=4096, global_batch_size=128,
                 pp=[4, 8, 16], recompute=["selective", "full"],
                 sharding=["distributed-optimizer"])
    rows = [res.row(i) for i in range(len(res)) if res.columns["f"][i]]
    assert rows
    for row in rows[:: max(1, len(rows) // 12)]:
        est = training_memory("llama3-70b", *_training_of(row, 4096, 128))
        assert row["memory"] == pytest.approx(float(est.bytes_total), rel=1e-12), row
        assert row["stage"] == est.stage


def test_pipeline_sizes_that_only_split_unevenly():
    # p = 16 does not divide Llama 3 405B's 126 layers: asked for alone, every row is an uneven
    # split (Megatron's --decoder-first/last-pipeline-num-layers), and each prices as
    # training_memory prices that job (the search once took its first row's even split)
    res = search("llama3-405b", "h100-80gb", 128, seq_length=4096, global_batch_size=128,
                 pp=[16], recompute=["full"], sharding=["distributed-optimizer"])
    assert len(res) and set(res.columns["p"]) == {16}
    assert all(int(f_) > 0 for f_ in res.columns["f"])
    for i in range(0, len(res), max(1, len(res) // 6)):
        row = res.row(i)
        assert (126 - row["first_stage_layers"] - row["last_stage_layers"]) % 14 == 0
        est = training_memory("llama3-405b", *_training_of(row, 4096, 128))
        assert row["memory"] == pytest.approx(float(est.bytes_total), rel=1e-12), row


def test_given_stage_sizes_restrict_and_uneven_can_be_turned_off():
    kw = dict(seq_length=4096, global_batch_size=128, recompute=["full"],
              sharding=["distributed-optimizer"])
    given = search("llama3-405b", "h100-80gb", 128, first_stage_layers=7, last_stage_layers=7,
                   pp=[16], **kw)
    assert set(given.columns["f"]) == {7} and set(given.columns["l"]) == {7}
    even = search("llama3-405b", "h100-80gb", 128, uneven=False, **kw)
    assert set(even.columns["f"]) == {0}
    assert all(126 % int(p_) == 0 for p_ in even.columns["p"])


def test_explicit_tp_beyond_a_node_is_allowed():
    # tp-per-node is a preference: asked for explicitly, t = 16 on 8-GPU nodes is searched
    res = search("llama2-7b", "h100-80gb", 64, seq_length=4096, global_batch_size=64,
                 tp=[16], recompute=["full"], sharding=["distributed-optimizer"])
    assert res.excluded["tp-per-node"] == 0 and len(res) > 0
    assert set(res.columns["t"]) == {16}


def test_explain_names_exactly_the_rules_the_search_counts():
    # every raw layout (uneven splits included): the rules explain() names for it are the
    # masks the search counted it under; the valid ones are exactly those explain() clears
    from memsym.search import raw_grid, rule_masks

    res = search("llama2-7b", "a100-80gb", 8, seq_length=2048, global_batch_size=64,
                 recompute=["full"], sharding=["distributed-optimizer"],
                 sequence_parallel=[False])
    grid = raw_grid(res.space, 8)
    masks = rule_masks(res.space, grid, 8)
    assert {k: int(v.sum()) for k, v in masks.items()} == {
        k: v for k, v in res.excluded.items() if k in masks}
    rng = np.random.default_rng(3)
    for i in rng.choice(len(grid["t"]), 150, replace=False):
        lay = {k: int(grid[k][i]) for k in ("t", "p", "c", "d", "e", "v", "b")}
        lay.update(first_stage_layers=int(grid["f"][i]) or None,
                   last_stage_layers=int(grid["l"][i]) or None)
        named = [r for r in explain(res.space, lay) if r in masks]
        assert named == [k for k in masks if masks[k][i]], lay
    ok = ~np.any(np.stack(list(masks.values())), axis=0)
    assert int(ok.sum()) == res.valid


def test_torchtitan_search_launches_fsdp_with_pipelines_on_its_split():
    # torchtitan composes FSDP2 with pipeline parallelism and splits the layers itself
    # (generate_llm_fqn_per_model_part): a torchtitan search offers those layouts, which the
    # Megatron search refuses for its DeepSpeed ZeRO-3 rows (rule zero-pp), and prices each as
    # `estimate` prices the job
    from memsym.job import job
    from memsym.model.torchtitan_stages import torchtitan_rank_layers
    from memsym.training import job_memory

    kw = dict(seq_length=8192, global_batch_size=256)
    titan = search("llama3-405b", "h100-80gb", 512, framework="torchtitan", **kw)
    # Megatron's refusal is a rule count, not a ranking: its space narrowed to a scheme the
    # rule names (ZeRO-3; one recompute, one micro-batch) still counts it, at a fraction of
    # the full space's pricing
    mega = search("llama3-405b", "h100-80gb", 512, sharding=["zero3"], recompute=["full"],
                  micro_batch_sizes=[1], **kw)
    assert titan.excluded["zero-pp"] == 0 and mega.excluded["zero-pp"] > 0
    assert set(mega.columns["p"]) == {1}     # every pipelined ZeRO-3 layout refused
    top = titan.top(5)
    assert {r["sharding"] for r in titan.top(50)} <= {"fsdp", "ddp"}
    assert any(r["sharding"] == "fsdp" and r["p"] > 1 for r in top)
    for r in top[:3]:
        ranks = torchtitan_rank_layers(126, r["p"], r["v"])
        assert (r["first_stage_layers"] or ranks[0], r["last_stage_layers"] or ranks[-1]) == \
            (ranks[0], ranks[-1])
        j = job("llama3-405b", t=r["t"], p=r["p"], c=r["c"], d=r["d"],
                v=r["v"] if r["v"] > 1 else None, micro_batch_size=r["b"],
                recompute=r["recompute"], sharding=r["sharding"],
                sequence_parallel=r["sequence_parallel"], framework="torchtitan",
                gpu="h100-80gb", **kw)
        assert float(job_memory(j).bytes_total) == pytest.approx(r["memory"], rel=1e-12)
    with pytest.raises(InvalidValueError, match="FSDP2 or replicates"):
        search("llama3-8b", "h100-80gb", 8, framework="torchtitan", sharding=["zero1"], **kw)
    with pytest.raises(InvalidValueError, match="torchtitan job use search"):
        min_gpus("llama3-8b", "h100-80gb", framework="torchtitan")


def test_torchtitan_search_memory_is_estimate_memory():
    # every sampled row of a torchtitan search (TP with and without PP, FSDP2 or replicas,
    # each recompute) is priced as estimate prices the job; TP rows are sequence parallel
    # (rule torchtitan-tp-sp), as torchtitan's apply_tp always is
    import numpy as np

    from memsym.job import job
    from memsym.search.choices import recompute_fields
    from memsym.training import job_memory

    res = search("llama3-70b", "h100-80gb", 64, seq_length=4096, global_batch_size=128,
                 framework="torchtitan", dropout=False)
    cols = res.columns
    assert np.all(np.asarray(cols["sequence_parallel"])[np.asarray(cols["t"]) > 1])
    assert res.excluded["torchtitan-tp-sp"] > 0
    # the best row of each kind (recompute, sharding, TP or not, PP or not) and of every
    # (p, v): each choice and each pipeline shape once
    kinds, shapes = {}, {}
    for i in res.order():
        r = res.row(int(i))
        kinds.setdefault((r["recompute"], r["sharding"], r["t"] > 1, r["p"] > 1), int(i))
        shapes.setdefault((r["p"], r["v"]), int(i))
    picked = dict.fromkeys(list(kinds.values()) + list(shapes.values()))
    assert {rc for rc, *_ in kinds} == set(res.space.recompute)
    assert {(tp, pp) for _, _, tp, pp in kinds} == {(False, False), (True, False), (True, True)}
    assert any(p_ > 1 and v_ == 1 for p_, v_ in shapes) and any(v_ > 1 for _, v_ in shapes)
    for i in picked:
        r = res.row(i)
        pipe = r["p"] > 1
        j = job("llama3-70b", t=r["t"], p=r["p"], c=r["c"], d=r["d"], seq_length=4096,
                v=r["v"] if r["v"] > 1 else None, micro_batch_size=r["b"],
                global_batch_size=None if pipe else 128,
                num_microbatches=r["m"] if pipe else None, **recompute_fields(r["recompute"]),
                sharding=r["sharding"], sequence_parallel=r["sequence_parallel"],
                framework="torchtitan", dropout=False)
        assert float(job_memory(j).bytes_total) == pytest.approx(r["memory"], rel=1e-12), r


def test_cli_search_framework_torchtitan(capsys):
    from memsym.cli import main

    assert main(["search", "llama3-8b", "--gpu", "h100-80gb", "--gpus", "16", "--seq-length",
                 "8192", "--global-batch-size", "32", "--framework", "torchtitan", "--top", "5",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 5 and {r["layout"]["sharding"] for r in rows} <= {"fsdp", "ddp"}
    assert main(["min-gpus", "llama3-8b", "--gpu", "h100-80gb", "--framework", "torchtitan"]) == 2
    assert "torchtitan job use search" in capsys.readouterr().err


@pytest.mark.parametrize("framework,shards", [
    ("megatron", ["zero3", "zero1", "distributed-optimizer", "ddp"]),
    ("torchtitan", ["fsdp", "ddp"])])
def test_search_step_time_is_estimate_step_time(framework, shards):
    # one model of the step for both: the search's vectorized row and step_time() of the
    # same job agree for every sharding (ZeRO-3 / FSDP gather per micro-batch, the
    # sharded-optimizer schemes step over 1/d, torchtitan's pipelined FSDP syncs once)
    from memsym.job import job
    from memsym.timing.step import step_time

    kw = dict(seq_length=4096, global_batch_size=64)
    res = search("llama3-8b", "h100-80gb", 16, sharding=shards, recompute=["full"],
                 framework=framework, **kw)
    seen = set()
    for r in res.top(80):
        key = (r["sharding"], r["p"] > 1)
        if key in seen:
            continue
        seen.add(key)
        j = job("llama3-8b", t=r["t"], p=r["p"], c=r["c"], d=r["d"],
                v=r["v"] if r["v"] > 1 else None, micro_batch_size=r["b"],
                recompute=r["recompute"], sharding=r["sharding"],
                sequence_parallel=r["sequence_parallel"], gpu="h100-80gb",
                framework=framework, **kw, **launch_overlaps(framework, r["sharding"]))
        assert step_time(j.model, j.layout, j.training, "h100-80gb").total == \
            pytest.approx(r["step_time"], rel=1e-9), key
    assert len(seen) >= 3


def test_torchtitan_search_offers_layers_per_stage_and_torchs_schedule_rule():
    # torchtitan makes more than 2 stages per rank through pipeline_parallel_layers_per_stage
    # (pipeline_llm): Llama 3 405B on p = 16 with 2 layers per stage has 4 stages per rank and
    # Meta's 7 + 14 x 8 + 7 split.  The search offers it, prices it as the TOML job with that
    # setting, and applies torch's own schedule rule (Schedule1F1B needs m >= p)
    from memsym.readers.jobs import torchtitan_job
    from memsym.readers.torchtitan import read_torchtitan_toml
    from memsym.training import job_memory

    res = search("llama3-405b", "h100-80gb", 2048, seq_length=8192, global_batch_size=256,
                 framework="torchtitan", tp=[8], pp=[16], cp=[1], recompute=["full"],
                 sharding=["fsdp"], micro_batch_sizes=[1, 4])
    shapes = {(r["v"], r["first_stage_layers"], r["last_stage_layers"])
              for r in (res.row(i) for i in range(len(res)))}
    assert {(4, 7, 7), (8, 7, 7), (2, 7, 7)} <= shapes and not any(v_ in (3, 6) for v_, *_ in shapes)
    assert res.excluded["torch-pp-microbatches"] > 0      # b = 4: m = 4 < p = 16 under 1F1B
    row = next(res.row(i) for i in range(len(res))
               if res.row(i)["v"] == 4 and res.row(i)["b"] == 1)
    toml = ("[model]\nname = \"llama3\"\nflavor = \"405B\"\n[training]\nseq_len = 8192\n"
            "local_batch_size = 16\n[parallelism]\ntensor_parallel_degree = 8\n"
            "pipeline_parallel_degree = 16\npipeline_parallel_schedule = \"Interleaved1F1B\"\n"
            "pipeline_parallel_layers_per_stage = 2\n[activation_checkpoint]\nmode = \"full\"\n")
    j = torchtitan_job(read_torchtitan_toml(toml, world_size=2048))
    assert (j.layout.d, j.layout.v, j.m) == (16, 4, row["m"])
    assert float(job_memory(j).bytes_total) == pytest.approx(row["memory"], rel=1e-12)


def test_cli_torchtitan_search_names_the_toml_setting(capsys):
    # a torchtitan row with v > 2 stages per rank says which pipeline_parallel_layers_per_stage
    # makes them; torchtitan's own derivation (torchtitan_stages_per_rank) gives that v back
    from memsym.model.torchtitan_stages import torchtitan_stages_per_rank

    code = main(["search", "llama3-405b", "--gpu", "h100-80gb", "--gpus", "2048",
                 "--seq-length", "8192", "--global-batch-size", "256", "--framework",
                 "torchtitan", "--tp", "8", "--pp", "16", "--top", "20", "--json"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    deep = [r for r in rows if r["layout"]["vpp"] > 2]
    assert deep
    for r in deep:
        n = int(r["torchtitan"].split("layers_per_stage = ")[1].split()[0])
        assert torchtitan_stages_per_rank(126, 16, n, multi_stage=True) == r["layout"]["vpp"]


def test_block_recompute_rows_are_the_estimate_of_that_job():
    # Megatron's --recompute-method block --recompute-num-layers N as a search choice
    # ("block-N"): each row's memory is training_memory's for that job and its step time
    # step_time()'s, for even splits, interleaving and DeepSeek-V3's mixed dense / MoE
    # stages (uneven ends too); a model of one layer kind takes block-N on even splits
    # only; N at or beyond a chunk's layers is full recompute (one row)
    from memsym.job import job
    from memsym.timing.step import step_time
    from memsym.training import job_memory

    cases = (("llama3-70b", 64, dict(pp=[4, 8, 6]), 4096, 128),
             ("deepseek-v3", 256, dict(pp=[8], ep=[32], tp=[1]), 4096, 256))
    for model, gpus, knobs, s_, B_ in cases:
        res = search(model, "h100-80gb", gpus, seq_length=s_, global_batch_size=B_,
                     recompute=["block-1", "block-2", "full"], sharding=["distributed-optimizer"],
                     **knobs)
        rows = [res.row(i) for i in range(len(res)) if res.columns["recompute"][i] != "full"]
        assert rows
        picked = {}
        for r in rows:      # one row per (p, v, ends, N)
            picked.setdefault((r["p"], r["v"], r["first_stage_layers"], r["recompute"]), r)
        if model == "llama3-70b":      # p = 6 does not divide 80: no block rows for it
            assert not any(r["first_stage_layers"] or r["last_stage_layers"]
                           for r in picked.values())
            assert {r["p"] for r in picked.values()} == {4, 8}
        for r in list(picked.values())[:: max(1, len(picked) // 10)]:
            n = int(r["recompute"].split("-")[1])
            per_chunk = max(filter(None, (r["first_stage_layers"], r["last_stage_layers"])),
                            default=0)
            assert n < max(per_chunk, res.space.arch.num_layers / r["p"]) / r["v"]
            j = job(model, t=r["t"], p=r["p"], c=r["c"], d=r["d"], e=r["e"],
                    v=r["v"] if r["v"] > 1 else None, micro_batch_size=r["b"],
                    recompute="full", recompute_method="block", recompute_num_layers=n,
                    sharding=r["sharding"], sequence_parallel=r["sequence_parallel"],
                    first_stage_layers=r["first_stage_layers"],
                    last_stage_layers=r["last_stage_layers"], gpu="h100-80gb",
                    seq_length=s_, global_batch_size=B_,
                    **launch_overlaps("megatron", r["sharding"]))
            assert float(job_memory(j).bytes_total) == pytest.approx(r["memory"], rel=1e-12), r
            if not r["first_stage_layers"] and not r["last_stage_layers"]:
                assert step_time(j.model, j.layout, j.training, "h100-80gb").total == \
                    pytest.approx(r["step_time"], rel=1e-9), r
    with pytest.raises(InvalidValueError, match="block-N is Megatron"):
        search("llama3-8b", "h100-80gb", 8, recompute=["block-2"], framework="torchtitan")
    with pytest.raises(InvalidValueError, match="1..32"):
        search("llama3-8b", "h100-80gb", 8, recompute=["block-40"])


def test_cli_block_recompute_row_is_the_estimate(capsys):
    # a block-N row of `memsym search --json`, fed back to `memsym estimate` with Megatron's
    # --recompute-granularity full --recompute-method block --recompute-num-layers N, gives
    # the same bytes
    assert main(["search", "llama3-70b", "--gpu", "h100-80gb", "--gpus", "64",
                 "--global-batch-size", "128", "--recompute", "block-2", "--sharding",
                 "distributed-optimizer", "--top", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    lay = row["layout"]
    assert (lay["recompute"], lay["recompute_method"], lay["recompute_num_layers"]) == \
        ("block-2", "block", 2)
    argv = ["estimate", "llama3-70b", "--tp", str(lay["tp"]), "--pp", str(lay["pp"]),
            "--dp", str(lay["dp"]), "--cp", str(lay["cp"]), "--seq-length", "4096",
            "--micro-batch-size", str(lay["micro_batch_size"]), "--global-batch-size", "128",
            "--recompute-granularity", "full", "--recompute-method", "block",
            "--recompute-num-layers", "2", "--sharding", "distributed-optimizer", "--json"]
    if lay["sequence_parallel"]:
        argv.append("--sequence-parallel")
    if lay["vpp"] > 1:
        argv += ["--virtual-pipeline-model-parallel-size", str(lay["vpp"])]
    for key, flag in (("decoder_first_pipeline_num_layers", "--decoder-first-pipeline-num-layers"),
                      ("decoder_last_pipeline_num_layers", "--decoder-last-pipeline-num-layers")):
        if lay[key]:
            argv += [flag, str(lay[key])]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["bytes"] == row["bytes"]
    # the row's step time is priced with the overlaps it names (Megatron's store_true flags);
    # fed back with them, estimate gives the same step time
    assert (lay["overlap_grad_reduce"], lay["overlap_param_gather"]) == (True, True)
    assert main(argv + ["--gpu", "h100-80gb", "--overlap-grad-reduce",
                        "--overlap-param-gather"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == pytest.approx(
        row["step_time_s"], rel=1e-9)
    assert main(["search", "llama3-70b", "--gpu", "h100-80gb", "--gpus", "64",
                 "--recompute", "block-x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "block-N" in err


def test_torchtitan_rows_warm_up_in_torchs_rounds():
    # torch's interleaved schedules warm up rounds of m // max(1, m // p) micro-batches, not
    # Megatron's p: where p does not divide m the search's rows and step_time() of the same
    # torchtitan job price the same schedule (they disagreed on every such row before)
    from memsym.job import job
    from memsym.timing.step import step_time

    kw = dict(seq_length=4096, global_batch_size=48)
    res = search("llama3-8b", "h100-80gb", 16, framework="torchtitan", sharding=["fsdp"],
                 recompute=["full"], **kw)
    rows = [r for r in res.top(400) if r["v"] > 1 and r["p"] > 1 and r["m"] % r["p"]]
    assert len(rows) >= 10
    for r in rows:
        j = job("llama3-8b", t=r["t"], p=r["p"], c=r["c"], d=r["d"], v=r["v"],
                micro_batch_size=r["b"], recompute=r["recompute"], sharding=r["sharding"],
                sequence_parallel=r["sequence_parallel"], gpu="h100-80gb",
                framework="torchtitan", first_stage_layers=r["first_stage_layers"],
                last_stage_layers=r["last_stage_layers"], **kw)
        assert step_time(j.model, j.layout, j.training, "h100-80gb").total == \
            pytest.approx(r["step_time"], rel=1e-9), r


def test_torchtitan_looped_bfs_rows_price_the_job():
    # schedule="gpipe" with v > 1 stages per rank is torch's ScheduleLoopedBFS under
    # torchtitan: the search's rows hold and take what training_memory() and step_time()
    # of the same job do (all m v chunk passes in flight, the breadth-first bubble); under
    # Megatron, which has no such schedule, those rows are refused by name
    from memsym.job import job
    from memsym.timing.step import step_time

    kw = dict(seq_length=4096, global_batch_size=64)
    res = search("llama3-8b", "h100-80gb", 16, framework="torchtitan", schedule="gpipe",
                 sharding=["fsdp"], recompute=["full", "none"], **kw)
    rows = [r for r in res.top(400) if r["v"] > 1 and r["p"] > 1]
    assert len(rows) >= 10
    for r in rows[:: max(1, len(rows) // 12)]:
        j = job("llama3-8b", t=r["t"], p=r["p"], c=r["c"], d=r["d"], v=r["v"],
                micro_batch_size=r["b"], recompute=r["recompute"], sharding=r["sharding"],
                sequence_parallel=r["sequence_parallel"], gpu="h100-80gb", schedule="gpipe",
                framework="torchtitan", first_stage_layers=r["first_stage_layers"],
                last_stage_layers=r["last_stage_layers"], **kw)
        est = training_memory(j.model, j.layout, j.training)
        assert r["memory"] == pytest.approx(float(est.bytes_total), rel=1e-12), r
        assert step_time(j.model, j.layout, j.training, "h100-80gb").total == \
            pytest.approx(r["step_time"], rel=1e-9), r
    meg = search("llama3-8b", "h100-80gb", 16, schedule="gpipe", recompute=["full"], **kw)
    assert meg.excluded["gpipe-chunks"] > 0 and all(int(v_) == 1 for v_ in meg.columns["v"])


def test_torchtitan_every_n_rows_price_the_job():
    # torchtitan's default activation checkpointing (selective_ac_option "2": every 2nd block
    # of a rank) is a choice of its search, "every-2", and each row holds and takes what
    # training_memory() and step_time() of the same job do (floor(b/2) of a rank's b blocks
    # checkpointed, uneven end stages included); Megatron's space refuses it by name
    from memsym.job import job
    from memsym.timing.step import step_time

    kw = dict(seq_length=8192, global_batch_size=256)
    res = search("llama3-405b", "h100-80gb", 512, framework="torchtitan", sharding=["fsdp"],
                 recompute=["every-2", "every-3"], **kw)
    rows = [r for r in (res.row(i) for i in range(len(res))) if r["p"] > 1]
    assert {r["recompute"] for r in rows} == {"every-2", "every-3"}
    assert any(r["first_stage_layers"] for r in rows) and any(r["v"] > 1 for r in rows)
    # one row of each (recompute, p): each every-N against each rank size b (even and uneven
    # ends), alternately one model chunk per rank and the first interleaved row (v > 1)
    kinds = list(dict.fromkeys((r["recompute"], r["p"]) for r in rows))
    sample = []
    for k, kind in enumerate(kinds):
        same = [r for r in rows if (r["recompute"], r["p"]) == kind]
        sample.append(next((r for r in same if (r["v"] > 1) == k % 2), same[0]))
    assert {r["recompute"] for r in sample} == {"every-2", "every-3"}
    assert any(r["first_stage_layers"] for r in sample) and any(not r["first_stage_layers"]
                                                               for r in sample)
    assert any(r["v"] > 1 for r in sample) and any(r["v"] == 1 for r in sample)
    for r in sample:
        n = int(r["recompute"].split("-")[1])
        j = job("llama3-405b", t=r["t"], p=r["p"], c=r["c"], d=r["d"], v=r["v"],
                micro_batch_size=r["b"], recompute="full", recompute_method="every",
                recompute_num_layers=n, sharding=r["sharding"],
                sequence_parallel=r["sequence_parallel"], gpu="h100-80gb",
                framework="torchtitan", first_stage_layers=r["first_stage_layers"],
                last_stage_layers=r["last_stage_layers"], **kw)
        est = training_memory(j.model, j.layout, j.training)
        assert r["memory"] == pytest.approx(float(est.bytes_total), rel=1e-12), r
        # the rerun is the compute part's; with uneven ends the search bounds the pipeline's
        # makespan from above where step_time() simulates it (docs/time-accuracy.md)
        st = step_time(j.model, j.layout, j.training, "h100-80gb")
        assert st.parts["compute"] == pytest.approx(r["time"]["compute"], rel=1e-9), r
        assert st.total <= r["step_time"] * (1 + 1e-12) <= st.total * 1.01, r
    with pytest.raises(InvalidValueError, match="torchtitan's selective_ac_option"):
        search("llama3-405b", "h100-80gb", 512, recompute=["every-2"], **kw)


def test_a_framework_search_offers_only_the_schemes_the_framework_runs():
    # DeepSpeed shards with ZeRO stages 0-3 only (runtime/zero/config.py ZeroStageEnum): no
    # Megatron distributed optimizer, no FSDP2 rows, and asking for one is refused
    from memsym.errors import InvalidValueError
    from memsym.search import search

    res = search("llama2-7b", "h100-80gb", 8, framework="deepspeed", global_batch_size=64,
                 micro_batch_sizes=[1], recompute=["full"])
    assert set(res.space.sharding) == {"ddp", "zero1", "zero2", "zero3"}
    with pytest.raises(InvalidValueError, match="deepspeed shards with"):
        search("llama2-7b", "h100-80gb", 8, framework="deepspeed",
               sharding=["distributed-optimizer"])


def test_fp8_search_on_megatron_searches_the_schemes_fp8_is_modelled_under(capsys, monkeypatch):
    # `memsym search --precision fp8` with Megatron's default schemes used to fail on the
    # first scheme FP8 is not modelled under (zero1); the default is now the schemes
    # byte_widths accepts for fp8 (an independent path: its own refusal), an explicit scheme
    # outside them is still refused in one line
    from memsym.errors import InvalidValueError
    from memsym.frameworks import FRAMEWORK_SCHEMES
    from memsym.terms.model_state import byte_widths

    def accepted(scheme):
        try:
            byte_widths(scheme, "fp8")
        except InvalidValueError:
            return False
        return True

    want = {x for x in FRAMEWORK_SCHEMES.get("megatron", ("ddp", "distributed-optimizer",
                                                           "zero1", "zero2", "zero3", "fsdp"))
            if accepted(x)}
    res = search("llama3-8b", "h100-80gb", 8, precision="fp8", global_batch_size=64,
                 recompute=["full"], micro_batch_sizes=[1])
    assert set(res.space.sharding) == want == {"ddp", "distributed-optimizer"}
    assert len(res) and res.best()["sharding"] in want
    # refused before any searching: a progress line shown at once would come first otherwise
    import functools

    import memsym.cli.search as cli_search

    monkeypatch.setattr(cli_search, "Progress", functools.partial(cli_search.Progress, after=0))
    assert main(["search", "llama3-8b", "--gpu", "h100-80gb", "--gpus", "8", "--precision",
                 "fp8", "--sharding", "zero1", "--global-batch-size", "64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zero1" in err


def test_expert_tp_is_searched_megatron():
    """The experts' TP t_e is an axis of its own (Megatron-LM's --expert-tensor-parallel-size;
    searched as t_e = t or 1).  By hand, Mixtral (8 experts, 8 KV heads, expert ffn 14336)
    on 16 GPUs at t = 4, p = c = 1 (d = 4), b = 1: e in {1, 2, 4, 8} x t_e in {4, 1} = 8
    layouts; parallel_state.py:874-884 (d98e8a64dd) needs t_e e p to divide the world, i.e.
    e t_e | t c d = 16, which only (e, t_e) = (8, 4) breaks (32): 7 pass, 1 by ep-group."""
    res = search("mixtral-8x7b", "h100-80gb", 16, tp=[4], pp=[1], cp=[1], vpp=[1],
                 micro_batch_sizes=[1], global_batch_size=64)
    assert (res.raw, res.valid, res.excluded["ep-group"]) == (8, 7, 1)
    seen = {(res.row(i)["e"], res.row(i)["t_e"]) for i in range(len(res))}
    assert seen == {(e, te) for e in (1, 2, 4, 8) for te in (4, 1)} - {(8, 4)}


def test_expert_tp_is_searched_torchtitan():
    """torchtitan v0.2.2 takes etp = tp or 1 under EP (parallel_dims.py:58-59) and gives the
    experts the TP mesh without EP (llama4/infra/parallelize.py:561-563): the same 8 rows as
    the Megatron count less (e, t_e) = (1, 1), refused by torchtitan-etp: 6 pass."""
    res = search("mixtral-8x7b", "h100-80gb", 16, tp=[4], pp=[1], cp=[1], vpp=[1],
                 micro_batch_sizes=[1], global_batch_size=64, framework="torchtitan",
                 sharding=["fsdp"])
    assert (res.raw, res.valid) == (8, 6)
    assert (res.excluded["ep-group"], res.excluded["torchtitan-etp"]) == (1, 1)


def test_expert_tp_not_searched_where_no_framework_has_it():
    """A dense model, and DeepSpeed (AutoEP has no expert TP), keep t_e = t: one row per t."""
    for model, fw in (("llama3-8b", "megatron"), ("mixtral-8x7b", "deepspeed")):
        res = search(model, "h100-80gb", 8, tp=[1] if fw == "deepspeed" else [2], pp=[1],
                     cp=[1], vpp=[1], micro_batch_sizes=[1], global_batch_size=64,
                     framework=fw, sharding=["zero1"] if fw == "deepspeed" else None)
        assert all(res.row(i)["t_e"] == res.row(i)["t"] for i in range(len(res)))


def test_expert_tp_prices_the_expert_states():
    """Mixtral's routed experts: 32 layers x 8 experts x 3 x 4096 x 14336 = 45,097,156,608
    parameters.  At t = 2, e = 4 on 16 GPUs (d = 8) one GPU holds N_exp / (e t_e) of them:
    bf16 weights 2 bytes and fp32 gradients 4 bytes each, so t_e = 1 holds twice t_e = 2's;
    the distributed optimizer's 12 bytes are sharded over the expert data-parallel group
    t c d / (e t_e) (parallel_state.py: world / (t_e e p)), 12 N_exp / (t c d) either way."""
    n_exp = 32 * 8 * 3 * 4096 * 14336
    res = search("mixtral-8x7b", "h100-80gb", 16, tp=[2], pp=[1], cp=[1], ep=[4], vpp=[1],
                 micro_batch_sizes=[1], global_batch_size=64, sharding=["distributed-optimizer"],
                 recompute=["full"])
    got = {}
    for i in range(len(res)):
        if res.row(i)["sequence_parallel"]:
            got[res.row(i)["t_e"]] = res.exact(i)["bytes"]
    assert set(got) == {1, 2}
    for te, b in got.items():
        assert b["expert_weights"] == 2 * n_exp // (4 * te)
        assert b["expert_gradients"] == 4 * n_exp // (4 * te)
        assert b["expert_optimizer"] == 12 * n_exp // (2 * 1 * 8)


def test_expert_tp_asked_for_by_name(capsys):
    """``--etp`` (``etp=``) names the experts' TP sizes tried, each still checked by the rules:
    by hand as in test_expert_tp_is_searched_megatron, t = 4 with t_e = 2 only, e t_e | 16
    keeps e in {1, 2, 4, 8} (8 x 2 = 16): 4 layouts; a model without experts is refused in
    one line (exit 2)."""
    res = search("mixtral-8x7b", "h100-80gb", 16, tp=[4], pp=[1], cp=[1], vpp=[1],
                 micro_batch_sizes=[1], global_batch_size=64, etp=[2])
    assert (res.raw, res.valid) == (4, 4)
    assert {res.row(i)["t_e"] for i in range(len(res))} == {2}
    code = main(["search", "llama3-8b", "--gpu", "h100-80gb", "--gpus", "8", "--etp", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "needs a model with experts" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("held", [
    {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ("attn",)},
    {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ()},
    {"cuda_graph_impl": "full_iteration", "optimizer_cuda_graph": True},
])
def test_cuda_graph_rows_equal_training_memory(held):
    # every row's memory is the exact per-layout total, CUDA graphs' buffers included: the
    # search once compiled its grid without Transformer Engine's static inputs, and ranked,
    # counted as fitting and emitted layouts whose own estimate did not fit (a Nemotron 3
    # Nano search: 74.8 GB on the grid, 83.0 GB exact).  Uneven first/last stages share a
    # template whose layer term is scaled; the graphs' buffers are not, so they must stay exact.
    res = search("llama3-8b", "h100-80gb", 16, seq_length=4096, global_batch_size=64,
                 pp=[1, 2, 3, 4], recompute=["selective", "full"],
                 sharding=["distributed-optimizer"], micro_batch_sizes=[1, 2], held=held)
    assert len(res)
    keys = [k for k in res.columns if k.startswith("cuda_graph") or k == "optimizer_graph_pool"]
    assert keys or held["cuda_graph_impl"] == "full_iteration"
    uneven = [i for i in range(len(res)) if res.columns["f"][i]]
    picks = sorted(set(range(0, len(res), max(1, len(res) // 10))) | set(uneven[:4]))
    for i in picks:
        row = res.row(i)
        lay, tr = _training_of(row, 4096, 64)
        est = training_memory("llama3-8b", lay, replace(tr, **held))
        assert row["memory"] == pytest.approx(float(est.bytes_total), rel=1e-12), row
        assert res.exact(i)["bytes"]["total"] == est.bytes_total
        for key in keys:   # the grid's column is the estimate's own term
            assert row["bytes"][key] == pytest.approx(float(est.grouped().get(key, 0)), rel=1e-12)


def test_search_step_time_holds_the_bias_activation_fusion():
    # a held bias_activation_fusion off (Megatron's --no-bias-gelu-fusion / --disable-bias-linear
    # on a quick-GeGLU model) prices GPT-OSS's experts on the eager glu path in the search's
    # rows as step_time prices the job (memsym.timing.moe_eager), and costs time
    from memsym.job import job
    from memsym.timing.step import step_time

    kw = dict(seq_length=4096, global_batch_size=64)
    opts = dict(tp=[1], pp=[4], cp=[1], ep=[8], vpp=[1], micro_batch_sizes=[1],
                recompute=["full"], sharding=["distributed-optimizer"], **kw)
    fused = search("gpt-oss-120b", "h100-80gb", 64, **opts)
    eager = search("gpt-oss-120b", "h100-80gb", 64, held={"bias_activation_fusion": False},
                   **opts)
    assert len(fused) == len(eager) >= 1
    for i in range(len(eager)):
        r, f = eager.row(i), fused.row(i)
        assert (r["d"], r["e"], r["t_e"], r["first_stage_layers"]) == \
            (f["d"], f["e"], f["t_e"], f["first_stage_layers"])
        j = job("gpt-oss-120b", t=r["t"], p=r["p"], c=r["c"], d=r["d"], e=r["e"],
                first_stage_layers=r["first_stage_layers"],
                last_stage_layers=r["last_stage_layers"], micro_batch_size=r["b"], recompute=r["recompute"], sharding=r["sharding"],
                sequence_parallel=r["sequence_parallel"], gpu="h100-80gb",
                bias_activation_fusion=False, **kw, **launch_overlaps("megatron", r["sharding"]))
        assert step_time(j.model, j.layout, j.training, "h100-80gb").total == \
            pytest.approx(r["step_time"], rel=1e-9)
        assert r["step_time"] > f["step_time"]
