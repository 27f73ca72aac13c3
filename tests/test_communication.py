"""Communication volumes and times (issue 4): seed 002 and nccl-tests numbers, written by hand."""

from __future__ import annotations

import pytest
import sympy as sp
from hypothesis import given, settings, strategies as st

from memsym.errors import InvalidValueError, UnknownNameError
from memsym.symbols import beta_inter, beta_intra, t
from memsym.terms.collectives import collective_bytes, collective_steps, collective_time
from memsym.terms.communication import (communication_per_step, communication_time,
                                        context_parallel, data_parallel, expert_parallel,
                                        layout_warnings, link_for, pipeline_parallel, placement,
                                        tensor_parallel, tensor_parallel_fits)

SEED = dict(s=4096, b=1, h=4096, L=32, t=8, b_c=2, p=1, m=1)


def test_seed002_tp_bytes_per_step():
    # seed 002: tp_bytes_per_step(4096, 1, 4096, 32, tp=8) / 1e9 = 7.516192768 GB/step
    assert tensor_parallel().evaluate(SEED) == 7516192768
    by_hand = 4 * (4096 * 1 * 4096 * 2) * sp.Rational(2 * 7, 8) * 32
    assert tensor_parallel().evaluate(SEED) == by_hand


def test_sequence_parallel_moves_the_same_bytes():
    # Korthikanti §4.2.2: all-gather + reduce-scatter = all-reduce
    assert sp.simplify(tensor_parallel(sequence_parallel=True).expr - tensor_parallel().expr) == 0


def test_full_recompute_adds_forward_traffic():
    # 2 of the 4 all-reduces are forward: recompute adds them again -> 6/4
    ratio = tensor_parallel(recompute="full").expr / tensor_parallel().expr
    assert sp.simplify(ratio) == sp.Rational(3, 2)
    assert tensor_parallel(recompute="selective").expr == tensor_parallel().expr


def test_seed002_nvlink_vs_infiniband_time():
    # seed 002: 7.5 GB/step at 900 GB/s ~ 10 ms ("10ミリ秒前後"), at 50 GB/s ~ 150 ms
    nv = communication_time(pipeline=False, sharding=None, latency=False)
    ib = communication_time(pipeline=False, sharding=None, latency=False,
                            placement_map={"tp": "inter"})
    t_nv = nv.evaluate(SEED, beta_intra=900 * 10**9)
    t_ib = ib.evaluate(SEED, beta_inter=50 * 10**9)
    assert t_nv == sp.Rational(7516192768, 900 * 10**9)
    assert 0.005 < float(t_nv) < 0.015
    assert abs(float(t_ib) - 0.150) < 0.001
    assert t_ib / t_nv == 18  # one order of magnitude, as the seed says


def test_rule_tp_within_node():
    assert tensor_parallel_fits(8, 8) and not tensor_parallel_fits(16, 8)
    assert link_for("tp", {"tp": 8}, 8) == "intra"
    assert link_for("tp", {"tp": 16}, 8) == "inter"
    assert placement({"t": 16, "d": 2}, 8)["tp"] == "inter"
    assert layout_warnings({"t": 16}, 8) and not layout_warnings({"t": 8}, 8)


def test_layout_order_tp_cp_pp_dp():
    # Llama 3: [TP, CP, PP, DP] innermost first; 8 GPUs per node
    links = placement({"t": 4, "c": 2, "p": 4, "d": 8}, 8)
    assert links["tp"] == "intra" and links["cp"] == "intra"
    assert links["pp"] == "inter" and links["dp"] == "inter"
    links = placement({"t": 2, "d": 4}, 8)  # 2 x 4 = 8 GPUs: DP stays in the node
    assert links["dp"] == "intra"


def test_nccl_factors():
    # nccl-tests PERFORMANCE.md: 2(n-1)/n, (n-1)/n, (n-1)/n, 1
    assert collective_bytes("all-reduce", 8000, 8) == 14000
    assert collective_bytes("reduce-scatter", 8000, 8) == 7000
    assert collective_bytes("all-gather", 8000, 8) == 7000
    assert collective_bytes("all-to-all", 8000, 8) == 7000
    assert collective_bytes("broadcast", 8000, 8) == 8000
    assert collective_steps("all-reduce", 8) == 14
    # time = bytes / bw + latency * steps
    assert collective_time("all-reduce", 8000, 8, 1000, sp.Rational(1, 10**6)) == \
        14 + sp.Rational(14, 10**6)
    with pytest.raises(UnknownNameError):
        collective_bytes("allreduse")


def test_dp_schemes_zero_section7():
    # ZeRO §7: DDP 2Psi, ZeRO-1/2 2Psi, ZeRO-3 3Psi (element counts, large d)
    subs = dict(b_g=1, b_hp=1, p=1, t=1, m=1, N=10**9, d=10**6)
    ddp = data_parallel("ddp").evaluate(subs)
    z1 = data_parallel("zero1").evaluate(subs)
    z3 = data_parallel("fsdp").evaluate(subs)
    assert ddp == z1 == 2 * 10**9 * sp.Rational(10**6 - 1, 10**6)
    assert z3 / ddp == sp.Rational(3, 2)


def test_pp_point_to_point():
    # Narayanan §4.1: bsh per microbatch per boundary; /t with scatter-gather; 0 without PP
    vals = dict(s=2048, b=1, h=1024, b_c=1, m=1, t=4)
    assert pipeline_parallel().evaluate(vals, p=2) == 2048 * 1024
    assert pipeline_parallel(scatter_gather=True).evaluate(vals, p=2) == 2048 * 1024 // 4
    assert pipeline_parallel().evaluate(vals, p=1) == 0


def test_cp_ring_vs_allgather_forward_equal():
    # ring passes c-1 local K,V blocks: the same forward bytes as an all-gather of K,V
    vals = dict(s=8192, b=1, g=8, d_h=128, b_c=2, t=1, L=1, p=1, m=1, c=4)
    ring = context_parallel("ring").evaluate(vals)      # fwd + 2x bwd
    gather = context_parallel("all-gather").evaluate(vals)  # fwd + 1x bwd
    fwd = sp.Rational(3, 4) * 2 * 8192 * 8 * 128 * 2
    assert ring == 3 * fwd and gather == 2 * fwd
    with pytest.raises(UnknownNameError):
        context_parallel("rng")


def test_ep_all_to_all():
    vals = dict(s=4096, b=1, k=2, h=4096, b_c=2, L_m=1, p=1, m=1, e=8)
    assert expert_parallel().evaluate(vals) == 4 * sp.Rational(7, 8) * 4096 * 2 * 4096 * 2
    assert expert_parallel(recompute="full").evaluate(vals) == \
        6 * sp.Rational(7, 8) * 4096 * 2 * 4096 * 2


def test_derivative_in_bandwidth_and_solve():
    # d(time)/d(beta_intra) is -time/beta; solve for the bandwidth that gives 10 ms
    T = communication_time(pipeline=False, sharding=None, latency=False)
    expr = T.subs(SEED).expr
    assert sp.simplify(sp.diff(expr, beta_intra) + expr / beta_intra) == 0
    (bw,) = sp.solve(sp.Eq(expr, sp.Rational(1, 100)), beta_intra)
    assert bw == sp.Rational(7516192768, 1) * 100  # 751.6 GB/s


def test_largest_t_under_a_time_budget():
    # TP bytes per GPU grow with t (2(t-1)/t): the question is the LARGEST t within 10 ms.
    # At 800 GB/s: 8*s*b*h*2*L*(t-1)/t / 8e11 <= 1e-2  <=>  (t-1)/t <= 8e9/8589934592
    from memsym.analysis import largest
    T = communication_time(pipeline=False, sharding=None, latency=False)
    vals = {k: v for k, v in SEED.items() if k != "t"}
    vals["beta_intra"] = 800 * 10**9
    sol = largest(T, "t", sp.Rational(1, 100), vals)
    # by hand: (t-1)/t <= 0.93132... -> t <= 14.56 -> 14
    assert sol.value == 14


def test_bad_input():
    with pytest.raises(UnknownNameError):
        communication_per_step(sharding="zero4")
    with pytest.raises(UnknownNameError):
        tensor_parallel(recompute="ful")
    with pytest.raises(InvalidValueError):
        communication_time(bogus=True)
    with pytest.raises(UnknownNameError):
        link_for("xp", {}, 8)


@settings(max_examples=50, deadline=None, derandomize=True)
@given(tp=st.integers(1, 64), node=st.integers(1, 16))
def test_tp_link_rule_property(tp, node):
    assert (link_for("tp", {"tp": tp}, node) == "intra") == (tp <= node)


@settings(max_examples=50, deadline=None, derandomize=True)
@given(tp=st.integers(1, 64))
def test_tp_bytes_monotone_in_t(tp):
    expr = tensor_parallel().subs(dict(s=1, b=1, h=1, L=1, b_c=1, p=1, m=1)).expr
    assert expr.subs(t, tp + 1) >= expr.subs(t, tp)


def test_expert_traffic_counts_the_tokens_a_rank_holds():
    # with sequence parallelism a rank holds s b /(t) tokens, with CP s b / c: the
    # dispatched bytes shrink by the same factor (the activation terms count the same tokens)
    import sympy as sp

    from memsym.symbols import c, t
    from memsym.terms.communication import communication_per_step

    plain = communication_per_step(tensor=False, sharding=None, pipeline=False, expert=True)["ep"].expr
    sp_on = communication_per_step(tensor=True, sequence_parallel=True, sharding=None,
                                   pipeline=False, expert=True)["ep"].expr
    cp_on = communication_per_step(tensor=False, sharding=None, pipeline=False, expert=True,
                                   context="ring")["ep"].expr
    assert sp.simplify(sp_on - plain / t) == 0
    assert sp.simplify(cp_on - plain / c) == 0


def test_group_sizes_accept_whole_floats_and_refuse_the_rest():
    # 8.0 is the whole number 8 (values.exact); 8.5, NaN and text are refused with one line
    assert placement({"t": 8.0, "d": 2.0}, 8) == placement({"t": 8, "d": 2}, 8)
    assert layout_warnings({"t": 16.0}, 8)
    for bad in (8.5, float("nan"), "8"):
        with pytest.raises(InvalidValueError):
            placement({"t": bad}, 8)


def test_collective_names_go_through_one_matcher():
    # NCCL's function names and p2p spellings map to the table; then errors.choose
    assert collective_bytes("AllReduce", 8, 4) == collective_bytes("all-reduce", 8, 4) == 12
    assert collective_steps("all_gather", 4) == 3
    assert collective_bytes("SendRecv", 5, 2) == 5
    with pytest.raises(UnknownNameError) as err:
        collective_bytes("all-reduc")
    assert "all-reduce" in err.value.suggestions
    with pytest.raises(UnknownNameError):
        collective_bytes(None)


def test_bandwidth_is_per_direction_in_the_symbols():
    # the registry says which direction convention a bandwidth symbol uses
    from memsym.symbols import beta, info
    for sym in (beta, beta_intra, beta_inter):
        assert info(sym).meaning.endswith("one direction")


# --- issue 17: TP and PP traffic under context parallelism ---------------------------------

def test_tp_and_pp_traffic_divided_by_cp():
    # a CP rank holds s/c tokens (Megatron schedules.py: tensor_shape[0] //= cp size):
    # llama3-8b-like numbers, c = 1, 2, 4 give bytes in the ratio 4 : 2 : 1
    base = dict(s=8192, b=1, h=4096, L=32, t=8, b_c=2, p=4, m=8)
    tp = [float(tensor_parallel(context_parallel=True).evaluate(c=c, **base)) for c in (1, 2, 4)]
    assert tp[0] == 2 * tp[1] == 4 * tp[2]
    # hand: 4 all-reduces x 2 (t-1)/t x s b h b_c / c x (L/p) m at c = 2
    assert tp[1] == 4 * 2 * 7 / 8 * 8192 * 4096 * 2 / 2 * 8 * 8
    pp = [float(pipeline_parallel(context_parallel=True).evaluate(c=c, **base)) for c in (1, 4)]
    assert pp[0] == 4 * pp[1]


def test_cp_enters_every_term_of_communication_per_step():
    tot = communication_per_step(context="ring", sequence_parallel=True)
    c_sym = sp.Symbol("c", positive=True)
    assert c_sym in tot["tp"].expr.free_symbols and c_sym in tot["pp"].expr.free_symbols


def test_fsdp_under_pipelining_syncs_once_per_step():
    # FSDP2 per micro-batch: all-gather forward and backward, reduce-scatter, m times (ZeRO §7
    # 3 Psi per micro-batch at b_g = b_hp); under torch.distributed.pipelining nothing
    # reshards and gradients sync after the last micro-batch: one all-gather (b_hp) and one
    # reduce-scatter (b_g) per step, (d-1)/d Psi (b_hp + b_g) whatever m is
    from memsym.terms.communication import communication_per_step

    vals = dict(N=8 * 10**9, p=4, t=2, d=8, m=16, b_hp=2, b_g=4)
    psi = 8 * 10**9 // 8
    per_mb = communication_per_step(tensor=False, pipeline=False, sharding="fsdp")
    once = communication_per_step(tensor=False, pipeline=False, sharding="fsdp",
                                  pipelined_fsdp=True)
    assert per_mb["dp"].evaluate(vals) == 16 * psi * 7 * (2 * 2 + 4) // 8
    assert once["dp"].evaluate(vals) == psi * 7 * (2 + 4) // 8
    assert "pipelining" in once["dp"].source.key
