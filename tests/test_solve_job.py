"""Solving a whole job (issue 16, part 1): the closed form of the most-loaded stage's total,
the integer checked against the estimate itself (it fits, the next admissible candidate does
not), candidates a launch rule refuses skipped; from Python and from the command line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import sympy as sp

from memsym.job_solver import solve_job
from memsym.errors import InvalidValueError, NoFitError, UnknownNameError
from memsym.job import job
from memsym.training import Layout, Training, training_memory
from in_process import run as _cli

GB = 10**9
CAP = 80 * GB
#: What ``--gpu h100-80gb`` checks against: the 79.11 GiB CUDA reports (vllm-project/vllm#27508).
H100 = int(sp.Rational("79.11") * 2**30)
# GPT-3 175B (h = 12288, 96 layers, V = 50257, 2048 positions), t = 8, p = 4, full recompute,
# flash attention, 16 micro-batches
TR = Training(seq_length=2048, recompute="full", num_microbatches=16)


def _gpt3(**over):
    opts = dict(tp=8, pp=4, dp=8, seq_length=2048, recompute="full", num_microbatches=16)
    opts.update(over)
    return job("gpt3-175b", **opts)


def _mem(layout, training=TR, model="gpt3-175b"):
    return training_memory(model, layout, training).bytes_total


def _hand_bound(cap):
    # Only the distributed optimizer's fp32 shard, 12 (N_tp/t + N_rep)/(c d) bytes, and its
    # 10 % fragmentation allowance fall with d: M(d) = A + B/d.  Stage 0 by hand: 24 layers of
    # 12h^2 + 7h tensor-split (qkv, proj, fc1, fc2 weights; qkv and fc1 biases) and 6h
    # replicated (two LayerNorms, proj and fc2 biases), the word embedding padded to a multiple
    # of 128 t = 1024 (50257 -> 51200, split), the 2048 x h position embedding (replicated).
    h = 12288
    n_tp = 24 * (12 * h * h + 7 * h) + 51200 * h
    n_rep = 24 * 6 * h + 2048 * h
    B = sp.Rational(12 * 11, 10) * (sp.Rational(n_tp, 8) + n_rep)
    A = _mem(Layout(t=8, p=4, d=8)) - B / 8          # the estimate at one d, minus B/d
    return B / (cap - A)


def test_dp_closed_form_by_hand():
    bound = _hand_bound(CAP)
    sol = solve_job(_gpt3(), "dp", CAP)
    assert sol.bound == bound and sol.relation == ">=" and sol.stage == 0
    assert sol.value == int(sp.ceiling(bound)) == 3
    # the closed form is in the symbols (capacity, the stage's counts, the layout), not numbers
    assert {x.name for x in sol.closed_form.free_symbols} >= {"C", "N_tp", "N_rep", "t", "p"}
    # the integer against the estimate itself: d = 3 fits, d = 2 does not
    assert _mem(Layout(t=8, p=4, d=3)) <= CAP < _mem(Layout(t=8, p=4, d=2))
    assert sol.memory == _mem(Layout(t=8, p=4, d=3))
    assert sol.neighbour == (2, _mem(Layout(t=8, p=4, d=2)))


def test_gpus_is_t_p_c_times_d():
    d_sol = solve_job(_gpt3(), "dp", CAP)
    g_sol = solve_job(_gpt3(), "gpus", CAP)
    assert g_sol.unknown.name == "G" and g_sol.value == 8 * 4 * d_sol.value == 96
    # G = t p c d: the boundary in G is t p c times the boundary in d
    assert g_sol.bound == 32 * d_sol.bound


@pytest.mark.parametrize("unknown,field", [("tp", "t"), ("pp", "p")])
def test_tp_pp_smallest_admissible_against_the_estimate(unknown, field):
    sol = solve_job(_gpt3(), unknown, CAP)
    lay = Layout(t=8, p=4, d=8)
    assert _mem(replace(lay, **{field: sol.value})) <= CAP
    # every smaller value is either refused by a launch rule or does not fit
    for n in range(1, sol.value):
        try:
            j = _gpt3(**{unknown: n})
        except InvalidValueError:
            continue
        assert _mem(j.layout) > CAP, n


def test_micro_batch_divides_the_global_batch():
    # B = 512, d = 4: b must divide B/d = 128; the largest b that fits, the next divisor not
    j = job("llama3-70b", tp=8, pp=4, dp=4, seq_length=4096, recompute="selective",
            global_batch_size=512, sequence_parallel=True)
    sol = solve_job(j, "micro-batch-size", CAP)
    assert 128 % sol.value == 0 and sol.relation == "<="
    lay = Layout(t=8, p=4, d=4, sequence_parallel=True)

    def mem(bb):
        return _mem(lay, Training(seq_length=4096, recompute="selective", global_batch_size=512,
                                  micro_batch_size=bb), "llama3-70b")

    nxt = min(x for x in (1, 2, 4, 8, 16, 32, 64, 128) if x > sol.value)
    assert mem(sol.value) <= CAP < mem(nxt)
    assert sol.neighbour[0] == nxt


def test_seq_length_stops_at_max_position_embeddings():
    # GPT-3 has 2048 learned positions: Megatron-LM asserts max_position_embeddings >= seq_length
    sol = solve_job(_gpt3(), "seq-length", CAP)
    assert sol.value == 2048 and any("max_position_embeddings" in n for n in sol.notes)
    assert sol.memory <= CAP


def test_cp_fixed_world_size():
    # d = 2 at c = 1 does not fit (above); c = 2 halves activations and the optimizer shard
    sol = solve_job(_gpt3(dp=2), "cp", CAP)
    lay = Layout(t=8, p=4, d=2)
    assert sol.value == 2
    assert _mem(replace(lay, c=2)) <= CAP < _mem(lay)


def test_cp_at_long_sequences_reaches_the_admissible_c():
    # s = 8192: only c = 1 and the c with 2c | 8192 pass Megatron's cp-seq rule; the search
    # walked 8192, 8191, ... and gave up after 4096 refusals ("every candidate c in 1..8192
    # checked breaks a launch rule") before reaching 4096.  The answer is the smallest c whose
    # estimate fits, c = 1 being over (the estimate, memsym.training.training_memory)
    cap = 84_940_000_000
    base = job("llama3-8b", seq_length=8192, tp=2, world_size=16, micro_batch_size=2,
               sharding="distributed-optimizer")
    sol = solve_job(base, "cp", cap, world_size=16)
    assert sol.value == 2
    at = {c: training_memory(base.model, replace(base.layout, c=c, d=16 // (2 * c)),
                             base.training).bytes_total for c in (1, 2)}
    assert at[2] <= cap < at[1]
    assert any("2c divides the sequence length" in n for n in sol.notes)


def test_nothing_fits_names_the_floor():
    # Llama-3 70B, t = 8, p = 4, s = 8192 without recompute: weights and gradients (6 bytes per
    # parameter of the stage) and the activations stay however large d is
    j = job("llama3-70b", tp=8, pp=4, dp=4, seq_length=8192)
    with pytest.raises(NoFitError, match="however large d is"):
        solve_job(j, "dp", CAP)


def test_bad_input():
    with pytest.raises(UnknownNameError):
        solve_job(_gpt3(), "heads", CAP)
    with pytest.raises(InvalidValueError, match="needs a GPU memory capacity"):
        solve_job(_gpt3(), "dp")
    with pytest.raises(InvalidValueError, match="needs a memsym.job.Job"):
        solve_job("gpt3-175b", "dp", CAP)


def test_cli_solve_dp_job_with_gpu_name(capsys):
    # --gpu h100-80gb is the capacity CUDA reports for it, 79.11 GiB = 84.9 GB, where the
    # hand bound of test_dp_closed_form_by_hand gives d = 2 (3 at the datasheet's 80 GB)
    code, out, err = _cli(capsys, "solve", "dp", "gpt3-175b", "--tp", "8", "--pp", "4",
                          "--seq-length", "2048", "--recompute-granularity", "full",
                          "--num-microbatches", "16", "--use-flash-attn", "--gpu", "h100-80gb",
                          "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["value"] == int(sp.ceiling(_hand_bound(H100))) == 2
    assert rep["stage"] == 0 and rep["gpu_memory_bytes"] == H100
    assert rep["neighbour"]["value"] == 1 and rep["neighbour"]["memory_bytes"] > H100
    assert rep["closed_form"] and not rep["closed_form"].startswith("-")


def test_cli_solve_text_names_closed_form_integer_stage_and_check(capsys):
    code, out, _ = _cli(capsys, "solve", "gpus", "gpt3-175b", "--tp", "8", "--pp", "4",
                        "--seq-length", "2048", "--recompute-granularity", "full",
                        "--num-microbatches", "16", "--use-flash-attn", "--gpu-memory", "80GB")
    assert code == 0
    assert out.startswith("smallest G = 96 for gpt3-175b")
    assert "closed form: G >=" in out and "stage 0" in out and "checked: G = 96 fits" in out


def test_cli_solve_nothing_fits_exit_1(capsys):
    code, _, err = _cli(capsys, "solve", "dp", "llama3-70b", "--tp", "8", "--pp", "4",
                        "--seq-length", "8192", "--gpu-memory", "80GB")
    assert code == 1 and "nothing fits" in err


def test_cli_solve_dp_model_states_path_kept(capsys):
    # seed 000: d >= 16 N/(C p t - 2 N) = 2800/290 = 9.66 -> 10 at the datasheet's 80 GB
    # (by hand), and 2800e9/(8 x 84.94e9 - 350e9) = 8.50 -> 9 at the H100's CUDA total
    code, out, _ = _cli(capsys, "solve", "dp", "--params", "175B", "--tp", "4", "--pp", "2",
                        "--gpu-memory", "80GB", "--convention", "seed000", "--json")
    assert code == 0 and json.loads(out)["value"] == 10
    code, out, _ = _cli(capsys, "solve", "dp", "--params", "175B", "--tp", "4", "--pp", "2",
                        "--gpu", "h100-80gb", "--convention", "seed000", "--json")
    assert code == 0 and json.loads(out)["value"] == sp.ceiling(
        sp.Rational(16 * 175 * 10**9) / (8 * H100 - 2 * 175 * 10**9)) == 9
