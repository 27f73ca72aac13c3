"""Pipeline bubble, FLOPs, step time, MFU, training time and cost (issue 4)."""

from __future__ import annotations

import pytest
import sympy as sp

from memsym.analysis import smallest
from memsym.errors import InvalidValueError, UnknownNameError
from memsym.symbols import G, beta_inter, eta
from memsym.terms.communication import communication_time
from memsym.terms.compute import flops_per_iteration, hfu, mfu, parameters_narayanan, step_time
from memsym.terms.training_cost import (gpu_hours, training_cost, training_time,
                                        training_time_from_steps)
from memsym.timing.report import step_report
from memsym.terms.pipeline import bubble_fraction, data_parallel_for, global_batch

DAY = 86400


def test_seed002_bubble_table():
    # seed 002: 8 stages, m = 4..64 -> 175.0%, 87.5%, 43.8%, 21.9%, 10.9%
    printed = {4: 175.0, 8: 87.5, 16: 43.8, 32: 21.9, 64: 10.9}
    for mm, pct in printed.items():
        assert round(float(bubble_fraction(stages=8, microbatches=mm)) * 100, 1) == pct


def test_interleaved_bubble_and_global_batch():
    assert bubble_fraction(True, 8, 16, 4) == sp.Rational(7, 64)
    assert global_batch(1, 8, 16) == 128
    # seed 002: t 8 -> 4 on 64 GPUs doubles d and the global batch
    assert global_batch(1, 8, data_parallel_for(64, t=4)) == 2 * global_batch(1, 8, data_parallel_for(64, t=8))


def test_smallest_microbatches_for_10_percent_bubble():
    from memsym.term import Term, Total, Source
    bub = Total("bubble", (Term("bubble", bubble_fraction(), "bubble", Source("narayanan", "§2.2.1"),
                                unit="1"),), unit="1")
    sol = smallest(bub, "m", sp.Rational(1, 10), {"p": 8})
    assert sol.value == 70  # by hand: 7/m <= 0.1 -> m >= 70


def test_narayanan_eq4_gpt3_and_1t():
    tt = training_time()
    gpt3 = tt.evaluate(T=300 * 10**9, N=175 * 10**9, G=1024, F=140 * 10**12, eta=1) / DAY
    assert abs(float(gpt3) - 34) < 0.5  # "about 34 days"
    one_t = tt.evaluate(T=450 * 10**9, N=10**12, G=3072, F=163 * 10**12, eta=1) / DAY
    assert abs(float(one_t) - 84) < 1  # "about 84 days" (83.2 with P = 1e12, 83.9 with 1008B)


def test_parameters_eq2_1t():
    from memsym.values import as_values
    P = parameters_narayanan().xreplace(as_values(L=128, h=25600, V=51200, s=2048))
    assert abs(float(P) - 1008e9) < 0.5e9  # Narayanan Table 1: 1008B


def test_flops_forms_by_hand():
    # one layer forward: 24 B s h^2 + 4 B s^2 h, logits 2 B s h V; backward 2x; recompute +1x
    B, L, s, h, V = 8, 2, 1024, 2048, 50000
    fwd = L * (24 * B * s * h**2 + 4 * B * s**2 * h) + 2 * B * s * h * V
    vals = dict(B=B, L=L, s=s, h=h, V=V)
    assert flops_per_iteration("model").evaluate(vals) == 3 * fwd
    # Eq. 3 recomputes the layers (4x) but not the logits (3x: 6 B s h V)
    layers = L * (24 * B * s * h**2 + 4 * B * s**2 * h)
    assert flops_per_iteration("hardware", "full").evaluate(vals) == 4 * layers + 6 * B * s * h * V
    assert flops_per_iteration("model", formula="6n").evaluate(B=2, N=10, s=3) == 360
    with pytest.raises(UnknownNameError):
        flops_per_iteration("modle")


def test_mfu_equals_eta_without_overheads():
    assert mfu(step_time(pipeline=False)) == eta
    assert hfu(step_time(recompute="full", pipeline=False), "full") == eta
    # full recompute: MFU is 3/4 of eta (hand: 72(...)/96(...) ratio with V = 0, s/h -> 0)
    st = step_time(recompute="full", pipeline=False)
    val = mfu(st).xreplace({sp.Symbol("V", positive=True): 0})
    assert sp.limit(val, sp.Symbol("s", positive=True), 0) == sp.Rational(3, 4) * eta


def test_overlap_assumptions():
    comm = communication_time(pipeline=False, sharding=None, latency=False)
    none = step_time(communication=comm, pipeline=False, formula="6n")
    frac = step_time(communication=comm, pipeline=False, formula="6n", overlap="fraction")
    full = step_time(communication=comm, pipeline=False, formula="6n", overlap="full")
    vals = dict(s=4096, b=1, h=4096, L=32, t=8, b_c=2, p=1, m=1, beta_intra=900 * 10**9,
                B=1, N=7 * 10**9, F=989 * 10**12, G=8, eta=sp.Rational(1, 2))
    compute = sp.Rational(6 * 7 * 10**9 * 4096, 8 * 989 * 10**12 // 2)
    tp = sp.Rational(7516192768, 900 * 10**9)
    assert none.evaluate(vals) == compute + tp
    assert frac.evaluate(vals, omega=sp.Rational(1, 4)) == compute + sp.Rational(3, 4) * tp
    assert full.evaluate(vals) == max(compute, tp)
    with pytest.raises(UnknownNameError):
        step_time(overlap="partial")


def test_derivative_of_step_time_in_inter_node_bandwidth():
    comm = communication_time(sharding="ddp", tensor=False, pipeline=False, latency=False)
    st = step_time(communication=comm, pipeline=False)
    dT = st.sensitivity("beta_inter")
    # d/d(beta) of bytes/beta = -bytes/beta^2
    assert sp.simplify(dT + comm.expr / beta_inter) == 0


def test_smallest_gpus_for_a_deadline():
    # GPT-3 175B, 300B tokens at 140 TFLOP/s: fewest GPUs to finish in 30 days
    sol = smallest(training_time(), "G", 30 * DAY,
                   {"T": 300 * 10**9, "N": 175 * 10**9, "F": 140 * 10**12, "eta": 1})
    # by hand: 8*300e9*175e9 / (140e12 * 30*86400) = 1157.4 -> 1158
    assert sol.value == 1158


def test_gpu_hours_and_cost():
    tt = training_time()
    vals = dict(T=300 * 10**9, N=175 * 10**9, G=1024, F=140 * 10**12, eta=1)
    hours = gpu_hours(tt).evaluate(vals)
    assert hours == sp.Rational(8 * 300 * 10**9 * 175 * 10**9, 140 * 10**12 * 3600)
    assert training_cost(tt).evaluate(vals, price=2) == 2 * hours
    steps = training_time_from_steps(step_time(pipeline=False, formula="6n"))
    assert sp.simplify(steps.expr - 6 * sp.Symbol("N", positive=True) *
                       sp.Symbol("T", positive=True) / (G * sp.Symbol("F", positive=True) * eta)) == 0


def test_step_report_seed002():
    rep = step_report({"N": 7 * 10**9, "s": 4096, "b": 1, "h": 4096, "L": 32, "V": 32000,
                       "t": 8, "p": 1, "d": 1, "m": 1}, cluster="dgx-h100", sharding=None)
    assert rep["communication"]["tp"]["bytes"] == 7516192768
    assert rep["communication"]["tp"]["link"] == "intra"
    # priced per direction: NVLink 4 is 900 GB/s both ways = 450 GB/s each way
    assert abs(rep["communication"]["tp"]["seconds"] - 7.516192768 / 450) < 1e-12
    # seed 002's "about 10 ms" divides by the both-direction 900 GB/s: reproduced by override
    seed = step_report({"N": 7 * 10**9, "s": 4096, "b": 1, "h": 4096, "L": 32, "V": 32000,
                        "t": 8, "p": 1, "d": 1, "m": 1}, cluster="dgx-h100", sharding=None,
                       intra_node_bandwidth=900 * 10**9)
    assert abs(seed["communication"]["tp"]["seconds"] - 7.516192768 / 900) < 1e-12
    assert rep["bubble"] == 0 and rep["global_batch"] == 1
    assert 0 < rep["mfu"] <= 0.5 and rep["step_time_s"] > 0
    import json
    json.dumps(rep)


def test_step_report_tp_across_nodes_is_slow_and_warned():
    base = {"N": 70 * 10**9, "s": 4096, "b": 1, "h": 8192, "L": 80, "V": 32000, "p": 4, "d": 2,
            "m": 16}
    inside = step_report({**base, "t": 8}, cluster="dgx-h100")
    across = step_report({**base, "t": 16}, cluster="dgx-h100")
    assert across["communication"]["tp"]["link"] == "inter" and across["warnings"]
    assert inside["communication"]["pp"]["link"] == "inter"
    assert inside["bubble"] == pytest.approx(3 / 16)
    # hand: bandwidth 450 -> 50 GB/s per direction (x9) and ring factor 2(t-1)/t from
    # 7/4 to 15/8: about an order of magnitude slower, seed 002's "一桁落ちる"
    ratio = across["communication"]["tp"]["seconds"] / inside["communication"]["tp"]["seconds"]
    assert ratio == pytest.approx(9 * (15 / 8) / (7 / 4), rel=1e-12)
    with pytest.raises(InvalidValueError):
        step_report(base)


def test_cli_time(capsys):
    import json
    from memsym.cli import main
    # Narayanan Eq. 4 through the command line: GPT-3, 300B tokens, 1024 GPUs at 140 TFLOP/s
    assert main(["time", "175B", "--tokens", "300B", "--tflops", "140", "--gpus", "1024",
                 "--price-per-gpu-hour", "2", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert abs(rep["days"] - 34) < 0.5
    assert rep["gpu_hours"] == pytest.approx(8 * 300e9 * 175e9 / 140e12 / 3600 * 1)
    assert rep["cost"] == pytest.approx(2 * rep["gpu_hours"])
    assert main(["time", "7B", "--tokens", "1T", "--gpu", "h100-80"]) == 2
    assert "did you mean h100-80gb" in capsys.readouterr().err
    assert main(["time", "7B", "--tokens", "1T", "--mfu", "1.5"]) == 2


def test_selective_recompute_flops_counted_term_by_term():
    # Recomputing the attention core re-runs the forward Q K^T and attention x V only:
    # 2 s^2 h + 2 s^2 h FLOPs per sequence per layer, i.e. 4 B L s^2 h per iteration.
    import sympy as sp

    from memsym.symbols import B, L, h, s
    from memsym.terms.compute import flops_per_iteration

    model = flops_per_iteration("model").expr
    counted = flops_per_iteration("hardware", "selective", "memsym").expr
    assert sp.simplify(counted - model - 4 * B * L * s**2 * h) == 0
    # the paper's printed form charges three times that: 12 B L s^2 h
    printed = flops_per_iteration("hardware", "selective", "korthikanti").expr
    assert sp.simplify(printed - model - 12 * B * L * s**2 * h) == 0


# --- review fixes --------------------------------------------------------------------------

# Mixtral 8x7B (Jiang et al. 2024, arXiv:2401.04088 §2: "47B parameters", "13B active"),
# counted by hand from its config (L 32, h 4096, 8 experts of 3 x 4096 x 14336, top-2, GQA
# 8 x 128, V 32000 untied): per layer attention 41,943,040 + router 32,768 + norms 8,192;
# total = 32 x 1,451,270,144 + 262,148,096 = 46,702,792,704; active with 2 experts
# = 32 x 394,305,536 + 262,148,096 = 12,879,925,248.
MIXTRAL_TOTAL = 46_702_792_704
MIXTRAL_ACTIVE = 12_879_925_248


def test_moe_dp_gradients_follow_the_total_parameters():
    # N prices the FLOPs (active parameters); every expert's gradients are all-reduced.
    vals = {"N": MIXTRAL_ACTIVE, "s": 4096, "b": 1, "h": 4096, "L": 32, "V": 32000,
            "t": 1, "p": 1, "d": 8, "m": 1}
    rep = step_report(vals, cluster="dgx-h100", sharding="ddp", dp_params=MIXTRAL_TOTAL)
    # hand: ddp all-reduce 2 (d-1)/d * Psi * b_g with b_g = 2 (bf16), Psi = 46,702,792,704:
    # 2 * 7/8 * 46,702,792,704 * 2 = 163,459,774,464 bytes; d = 8 fits one node (450 GB/s)
    assert rep["communication"]["dp"]["bytes"] == 163_459_774_464
    assert rep["communication"]["dp"]["seconds"] == pytest.approx(163_459_774_464 / 450e9, rel=1e-12)
    # dp_params changes the DP term only: FLOPs are the same as without it
    plain = step_report(vals, cluster="dgx-h100", sharding="ddp")
    assert plain["flops"] == rep["flops"]
    assert plain["communication"]["dp"]["bytes"] == 2 * 7 * MIXTRAL_ACTIVE * 2 // 8
    assert rep["communication"]["dp"]["bytes"] / plain["communication"]["dp"]["bytes"] \
        == pytest.approx(46.7 / 12.879, rel=1e-3)   # the 3.6x the active count missed


def test_dp_params_symbolic_and_split_over_model_parallel_ranks():
    from memsym.terms.communication import communication_per_step as cps

    tot = cps(tensor=False, pipeline=False, sharding="ddp", dp_params=800)
    # hand: Psi = 800 / (p t) = 100 with p = 2, t = 4; 2 (d-1)/d Psi b_g = 2 * 3/4 * 100 * 2
    assert tot.evaluate(p=2, t=4, d=4, b_g=2) == 300
    time = communication_time(tensor=False, pipeline=False, sharding="ddp", dp_params=800,
                              latency=False)
    assert time.evaluate(p=2, t=4, d=4, b_g=2, beta_inter=100) == 3
    with pytest.raises(InvalidValueError):
        cps(sharding="ddp", dp_params="8e9")   # text is never parsed


def test_fp32_is_priced_at_the_tf32_peak_and_says_so():
    vals = {"N": 10**9, "s": 1024, "b": 1, "h": 2048, "L": 16, "V": 32000, "d": 2}
    rep = step_report(vals, gpu="h100-80gb", precision="fp32", sharding="ddp")
    # H100 SXM datasheet: TF32 989 TFLOPS with sparsity = 494.7 dense (BF16 989.4 / 2)
    assert rep["assumptions"]["peak_flops_per_gpu"] == pytest.approx(494.7e12)
    assert "TF32" in rep["assumptions"]["peak_note"]
    # fp32 gradients: 4 bytes; ddp all-reduce over d = 2: 2 * 1/2 * 1e9 * 4
    assert rep["communication"]["dp"]["bytes"] == 4 * 10**9
    assert "peak_note" not in step_report(vals, gpu="h100-80gb", sharding="ddp")["assumptions"]
    with pytest.raises(UnknownNameError, match="fp32"):
        step_report(vals, gpu="h100-80gb", precision="fp64", sharding="ddp")


def test_cli_estimate_fp32(capsys):
    from memsym.cli import main
    assert main(["estimate", "llama2-7b", "--seq-length", "4096", "--precision", "fp32",
                 "--gpu", "h100-80gb"]) in (0, 1)   # 1: does not fit; what matters: no refusal
    assert "unknown precision" not in capsys.readouterr().err


def test_report_states_the_conventions_it_used():
    from memsym.terms.communication import LAYOUT_ORDER
    rep = step_report({"N": 7 * 10**9, "s": 4096, "b": 1, "h": 4096, "L": 32, "V": 32000,
                       "t": 8}, cluster="dgx-h100", sharding=None)
    assert rep["assumptions"]["layout_order"] == ", ".join(LAYOUT_ORDER) == "tp, cp, pp, dp"
    assert rep["assumptions"]["bandwidth_convention"].startswith("per direction")


def test_one_default_flop_formula():
    # step_time, flops_per_iteration, mfu and hfu share the default ("memsym"), so the HFU
    # of a selective-recompute step with nothing else in it is exactly the efficiency
    assert hfu(step_time(recompute="selective", pipeline=False), "selective") == eta
    assert flops_per_iteration("hardware", "selective").expr == \
        flops_per_iteration("hardware", "selective", "memsym").expr
    # MFU of that step: model / hardware FLOPs = (1 + s/(6h) + V/(12hL)) / (1 + 2s/(9h) + V/(12hL))
    from memsym.symbols import L, V, h, s
    ratio = (1 + s / (6 * h) + V / (12 * h * L)) / (1 + 2 * s / (9 * h) + V / (12 * h * L))
    assert sp.simplify(mfu(step_time(recompute="selective", pipeline=False)) - eta * ratio) == 0


def test_recompute_modes_defined_once():
    from memsym.conventions import knobs as conventions
    from memsym.terms import activations, communication, compute
    assert compute.RECOMPUTE is activations.RECOMPUTE is communication.RECOMPUTE \
        is conventions.RECOMPUTE


# --- issue 17: the GEMM-count convention (default) beside 6N ---------------------------------

def test_gemm_count_llama3_405b_by_hand():
    from memsym.terms.compute import gemm_flops_per_token
    from memsym.symbols import a, d_h, f, g, h, s
    # Llama 3 405B (Table 3): h 16384, 128 heads of 128, 8 KV heads, f 53248, SwiGLU, s 8192
    vals = {h: 16384, a: 128, d_h: 128, g: 8, f: 53248, s: 8192}
    hand = (2 * 16384 * (128 + 16) * 128 + 2 * 128 * 128 * 16384 + 6 * 16384 * 53248
            + 4 * 8192 * 128 * 128 // 2)
    assert gemm_flops_per_token().expr.subs(vals) == hand


def test_gemm_count_exceeds_6n_by_the_attention_term():
    # 6N omits attention: at s = 8192 the 405B layer's causal attention adds 3 x 2 s a d_h
    from memsym.terms.compute import flops_per_iteration_gemm
    from memsym.symbols import B, L, V, a, d_h, f, g, h, s
    vals = {h: 16384, a: 128, d_h: 128, g: 8, f: 53248, s: 8192, L: 126, V: 128256, B: 1}
    gemm = flops_per_iteration_gemm().expr.subs(vals)
    six_n_like = flops_per_iteration_gemm(causal=True).expr.subs(vals) - 126 * 8192 * 3 * (
        4 * 8192 * 128 * 128 // 2)
    assert gemm - six_n_like == 126 * 8192 * 6 * 8192 * 128 * 128
    # per token: layer GEMMs 2h(a+2g)d + 2adh + 6hf = 6,375,342,080; causal attention
    # 2 s a d = 268,435,456; logits 2hV = 4,202,692,608
    assert gemm / six_n_like == 1 + sp.Rational(126 * 268435456, 126 * 6375342080 + 4202692608)


def test_gemm_count_recompute_kinds():
    from memsym.terms.compute import flops_per_iteration_gemm
    model = flops_per_iteration_gemm("model").expr
    full = flops_per_iteration_gemm("hardware", "full").expr
    sel = flops_per_iteration_gemm("hardware", "selective").expr
    # full recompute: 4 forward passes of the layers (not of the logits); selective: + attention
    assert sp.expand(full - model) == sp.expand(model / 3 - B_S_LOGITS())
    assert sp.simplify(sel - model).has(sp.Symbol("a", positive=True))


def B_S_LOGITS():
    from memsym.symbols import B, V, h, s
    return 2 * B * s * h * V


def test_selective_op_flops_gemm_count_equals_closed_form():
    # torchtitan's per-op SAC reruns every second forward matmul (tests/test_engine_sac.py runs
    # the policy): on a GPT block k, o and fc2, 12h^2 per token and layer of the forward's
    # 24h^2, so the hardware FLOPs are 72BLsh^2(1 + s/(6h) + 1/6 + V/(12hL)); the GEMM count
    # (per-matrix) and that closed form agree on GPT shapes, and 6N becomes 7N
    import sympy as sp
    from memsym.symbols import B, L, N, V, a, d_h, f, g, h, s
    from memsym.terms.compute import flops_per_iteration, flops_per_iteration_gemm

    gpt = {g: a, d_h: h / a, f: 4 * h}
    counted = flops_per_iteration_gemm("hardware", "selective-op", gated=False, causal=False).expr
    by_hand = 72 * B * L * s * h**2 * (1 + s / (6 * h) + sp.Rational(1, 6) + V / (12 * h * L))
    assert sp.simplify(counted.subs(gpt) - by_hand) == 0
    assert sp.simplify(flops_per_iteration("hardware", "selective-op").expr - by_hand) == 0
    assert flops_per_iteration("hardware", "selective-op", formula="6n").expr == 7 * N * B * s
    # model FLOPs never count recomputation
    assert flops_per_iteration("model", "selective-op").expr == flops_per_iteration("model").expr
