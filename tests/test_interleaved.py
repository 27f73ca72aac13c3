"""The interleaved schedule's exact makespan, vectorised (memsym.timing.interleaved, issue 31).

Megatron-LM d98e8a64dd megatron/core/pipeline_parallel/schedules.py
``forward_backward_pipelining_with_interleaving``: rank r runs
``(p - r - 1) * 2 + (v - 1) * microbatch_group_size_per_vp_stage`` warm-up forwards (all
m v where that is more), then one forward and one backward per step, then the cool-down
backwards, its forwards in ``get_schedule_table``'s order (groups of N micro-batches, each
through chunk 0, then chunk 1, ...).  The expected values come from a trace by hand, from
Narayanan's closed form where it is exact, or from the simulated order
(memsym.terms.pipeline_order.simulate, which the single-job estimate prices).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from memsym.errors import InvalidValueError
from memsym.model import preset
from memsym.terms.pipeline_order import bubble_fraction, simulate
from memsym.timing.interleaved import (MAX_PASSES, exact_interleaved, interleaved_makespan,
                                       schedule_levels)
from memsym.timing.bubble import bubble_in_stages
from memsym.timing.pipeline import microbatch_group, simulated_pipeline
from memsym.timing.records import Overlap, Settings
from memsym.timing.step import step_time_grid


def test_hand_traced_two_ranks_two_chunks():
    # p = 2, m = 2, v = 2, N = 2; per chunk rank 0 forward 1, backward 2, rank 1 forward 2,
    # backward 1 (whole stages (2, 4) and (4, 2)).  Virtual stages s = chunk * 2 + rank.
    # Rank 0 warms up min(2 + 2, 4) = 4: F0s0 [0,1] F1s0 [1,2] F0s2 F1s2, then B0s2 B1s2
    # B0s0 B1s0; rank 1 warms up 2: F0s1 F1s1, then F0s3 B0s3 F1s3 B1s3, then B0s1 B1s1.
    # F0s1 [1,3], F1s1 [3,5], F0s2 [3,4], F1s2 [5,6], F0s3 [5,7], B0s3 [7,8], F1s3 [8,10],
    # B1s3 [10,11], B0s2 [8,10], B1s2 [11,13], B0s1 [11,12], B1s1 [13,14], B0s0 [13,15],
    # B1s0 [15,17]: the makespan is 17
    assert float(interleaved_makespan(2, 2, 2, 2, (2.0, 0.0, 4.0), (4.0, 0.0, 2.0))) == 17.0
    assert simulate(2, 2, 2, 2, forward=[2, 4], backward=[4, 2]).makespan == 17


@pytest.mark.parametrize("p, v, k", [(2, 2, 1), (2, 3, 4), (4, 2, 2), (4, 4, 1), (8, 2, 2)])
def test_equal_stages_take_narayanans_form(p, v, k):
    # equal stages, m = k p (N = p divides m): (m v + p - 1) chunk passes' (f + b) / v,
    # Narayanan §2.2.2's (p - 1) / v stage units of bubble; f = 1, b = 2 per stage
    m = k * p
    got = interleaved_makespan(p, m, v, p, (1.0, 1.0, 1.0), (2.0, 2.0, 2.0))
    assert float(got) == pytest.approx((m * v + p - 1) * 3 / v, rel=1e-12)


def test_equals_the_simulated_order_over_a_grid():
    # first, middle and last stages of their own, random; every (p, v, m) of the grid, at
    # Megatron's default group size N = p and at N = max(p, m) (one group); m below p and m
    # not a multiple of N too (Megatron refuses some; the order still runs).  The same float
    # operations in the same order as the simulation: equal to the last bit
    rng = np.random.default_rng(31)
    checked = deadlocked = 0
    for p, v, m in itertools.product((2, 3, 4, 5), (2, 3, 4), (1, 2, 3, 4, 5, 6, 8, 9, 12)):
        for N in sorted({p, max(p, m)}):
            f, b = rng.exponential(1.0, (3, 4)), rng.exponential(2.0, (3, 4))
            if schedule_levels(p, m, v, N) is None:
                # a deadlocking order (m mod N in (0, p), which Megatron refuses): the
                # simulation stalls on it too
                with pytest.raises(InvalidValueError, match="deadlocks"):
                    simulate(p, m, v, N)
                deadlocked += 1
                continue
            got = interleaved_makespan(p, m, v, N, tuple(f), tuple(b))
            for j in range(4):
                fw = [float(f[1, j])] * p
                bw = [float(b[1, j])] * p
                fw[0], bw[0], fw[-1], bw[-1] = f[0, j], b[0, j], f[2, j], b[2, j]
                ref = simulate(p, m, v, N, forward=[float(x) for x in fw],
                               backward=[float(x) for x in bw]).makespan
                assert got[j] == ref, (p, v, m, N, j)
                checked += 1
    assert checked >= 600 and deadlocked <= 12       # the grid is nearly all runnable


def test_levels_of_the_two_rank_schedule():
    # 2 p m v passes; rank 0's 2 m v passes run one after another, so at least that many levels
    levels, ends, n = schedule_levels(2, 4, 2, 2)
    assert n == 32 and len(levels) >= 16
    assert [(lv[0], lv[1]) for lv in levels][0][0] == 0 and levels[-1][1] == 32
    assert sum(hi - lo for lo, hi, *_ in levels) == 32       # every pass in one level


def test_large_schedules_keep_the_given_seconds():
    # beyond MAX_PASSES chunk passes the rows keep what they were given (the closed form)
    tau = {r: (1.0, 2.0) for r in ("first", "middle", "last")}
    m = MAX_PASSES // 4 + 1                           # 2 p m v > MAX_PASSES at p = v = 2
    got = exact_interleaved(Settings(), np.array([-1.0, -1.0]), tau, 0.0, np.array([2, 2]),
                            np.array([4, m]), np.array([2, 2]))
    assert got[0] == pytest.approx((4 * 2 + 1) * 3 / 2) and got[1] == -1.0


@pytest.mark.parametrize("first, last", [(18, 14), (14, 18), (None, None)])
def test_grid_prices_interleaved_rows_as_the_simulated_schedule(first, last):
    # step_time_grid's default pipeline (the search's) and its exact_schedule (the
    # estimate's, one simulation per layout) agree on interleaved layouts with uneven or
    # even end stages (the embedding and output layer make the ends unequal anyway)
    kw = dict(t=2, p=2, d=4, v=2, m=np.array([2, 4, 8, 16]), first_stage_layers=first,
              last_stage_layers=last, settings=Settings(seq_length=4096, recompute="full"))
    grid = step_time_grid(preset("llama3-8b"), "h100", **kw)
    exact = step_time_grid(preset("llama3-8b"), "h100", exact_schedule=True, **kw)
    np.testing.assert_allclose(grid["step"], exact["step"], rtol=1e-12)


@pytest.mark.parametrize("st", [Settings(torch_rounds=True), Settings(group_size=2)])
def test_a_group_below_p_runs_megatrons_default_in_all_three_places(st):
    # p = 4, m = 3, v = 2: torch's round is floor(3 / max(1, floor(3/4))) = 3 < p, and a set
    # group of 2 is below p too; Megatron's order takes N >= p, so each place runs N = p = 4.
    # Expected: the simulated order at N = 4 (stages forward 1, backward 2, v = 2 chunks).
    p, m, v = 4, 3, 2
    assert microbatch_group(st, p, m, v) == 4
    want = simulate(p, m, v, 4, forward=[1.0] * p, backward=[2.0] * p).makespan
    tau = {r: (1.0, 2.0) for r in ("first", "middle", "last")}
    assert float(exact_interleaved(st, -1.0, tau, 0.0, p, m, v)) == want
    arr = (np.array([float(p)]), np.array([float(m)]), np.array([float(v)]))
    assert float(simulated_pipeline(st, np.array([-1.0]), tau, 0.0, *arr)[0]) == want
    beta, _ = bubble_in_stages(st, *arr)
    assert float(beta[0]) == float(bubble_fraction("interleaved", p, m, v, 4)) * m


def test_the_closed_form_misses_the_hand_traced_makespan_of_unequal_chunks():
    # the hand-traced schedule above (p = 2, m = 2, v = 2; whole stages forward / backward
    # (2, 4) on rank 0 and (4, 2) on rank 1): both stages take tau = 6, so the closed form
    # m tau_max + beta (sum tau - tau_max) / (p - 1) gives 2 x 6 + beta x 6 with beta the
    # bubble in stage units of equal stages, m x bubble_fraction = 2 x (7.5 - 6) / 6 = 1/2:
    # 15, below the trace's 17 (rank 1's heavy forward and rank 0's heavy backward do not
    # overlap as equal stages would).  The exact path takes the trace's 17.
    beta = float(bubble_fraction("interleaved", 2, 2, 2, 2)) * 2
    assert beta == 0.5
    closed = 2 * 6.0 + beta * 6.0
    tau = {"first": (2.0, 4.0), "middle": (0.0, 0.0), "last": (4.0, 2.0)}
    got = exact_interleaved(Settings(), closed, tau, 0.0, np.array(2), np.array(2), np.array(2))
    assert (closed, float(got)) == (15.0, 17.0)


@pytest.mark.parametrize("pp_p2p", [True, False])
def test_uneven_end_stages_price_as_the_simulated_schedule_beyond_128_passes(pp_p2p):
    # llama3-8b on pp 4, vpp 2 with 6-layer end stages (6 + 10 + 10 + 6): the middle ranks
    # are the busiest, where the closed form is off by ~1-2 % (issue: the search's row
    # 0.4 % above the estimate at m = 32, 64).  2 p m v = 512 and 1024 chunk passes: the
    # grid (the search's) prices the schedule's longest path, as exact_schedule (the
    # estimate's simulation of Megatron's order) does, with the PP p2p hidden (overlap_p2p_
    # comm) or exposed in every chunk pass (--no-overlap-p2p-communication) alike
    kw = dict(t=1, p=4, d=2, v=2, m=np.array([16, 32, 64]), first_stage_layers=6,
              last_stage_layers=6, overlap=Overlap(pp_p2p=pp_p2p),
              settings=Settings(seq_length=4096, recompute="full"))
    grid = step_time_grid(preset("llama3-8b"), "h100", **kw)
    exact = step_time_grid(preset("llama3-8b"), "h100", exact_schedule=True, **kw)
    np.testing.assert_allclose(grid["step"], exact["step"], rtol=1e-12)
    assert 2 * 4 * 64 * 2 <= MAX_PASSES
