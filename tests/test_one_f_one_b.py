"""The exact 1F1B makespan of a first, middle and last stage (memsym.timing.one_f_one_b).

The oracle is the schedule itself: Megatron's 1F1B op order run on its data dependencies
(:func:`memsym.terms.pipeline_order.simulate`, a longest path through the 2 p m passes),
never the closed form's own output.
"""

from __future__ import annotations

import numpy as np
import pytest

from memsym.model import preset
from memsym.terms.pipeline_order import simulate
from memsym.timing.one_f_one_b import exact_one_f_one_b, one_f_one_b_makespan
from memsym.timing.records import Settings
from memsym.timing.step import step_time_grid


def _durations(rng, n):
    """``n`` draws of (f1, b1, f_mid, b_mid, f_last, b_last): exponential, a few small whole
    numbers (ties), and log-normal over four orders of magnitude."""
    out = []
    for _ in range(n):
        kind = rng.integers(3)
        if kind == 0:
            d = rng.exponential(1.0, 6)
        elif kind == 1:
            d = rng.choice([0.0, 1.0, 2.0, 3.0], 6) + 1e-3
        else:
            d = np.exp(rng.normal(0.0, 2.0, 6))
        out.append(d)
    return np.array(out)


def _simulated(p, m, d):
    fw, bw = [float(d[2])] * p, [float(d[3])] * p
    fw[0], bw[0], fw[-1], bw[-1] = float(d[0]), float(d[1]), float(d[4]), float(d[5])
    return simulate(p, m, forward=fw, backward=bw).makespan


@pytest.mark.parametrize("p", [2, 3, 4, 5, 7, 8, 12, 16])
def test_equals_the_simulated_schedule_on_random_stages(p):
    """Every m from 1 past 2p (below, at and above the warm-up's depth) and two larger,
    random durations (a heavier first, middle or last stage, ties, near-zero passes): the
    form vectorised over the draws equals the simulated schedule to floating rounding."""
    rng = np.random.default_rng(p)
    for m in list(range(1, 2 * p + 3)) + [3 * p + 1, 4 * p + 5]:
        d = _durations(rng, 12)
        got = one_f_one_b_makespan(p, m, (d[:, 0], d[:, 2], d[:, 4]), (d[:, 1], d[:, 3], d[:, 5]))
        want = np.array([_simulated(p, m, row) for row in d])
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=f"p={p} m={m}")


@pytest.mark.parametrize("p,m", [(24, 2), (24, 23), (24, 24), (24, 51), (64, 3), (64, 63),
                                 (64, 64), (64, 129), (4, 2048), (16, 1920)])
def test_equals_the_simulated_schedule_on_deep_pipelines_and_long_steps(p, m):
    """The search's deepest pipelines (p = 64) and longest steps (m in the thousands), around
    the warm-up's depth: equal to the simulation to floating rounding (its sequential sums
    of a few thousand passes drift by ~1e-13)."""
    rng = np.random.default_rng(p * 10_000 + m)
    d = _durations(rng, 3)
    got = one_f_one_b_makespan(p, m, (d[:, 0], d[:, 2], d[:, 4]), (d[:, 1], d[:, 3], d[:, 5]))
    np.testing.assert_allclose(got, [_simulated(p, m, row) for row in d], rtol=1e-12)


def test_vectorised_over_p_and_m():
    """One call over rows of different (p, m) equals each row's simulation."""
    rng = np.random.default_rng(0)
    p = rng.integers(2, 10, 200)
    m = rng.integers(1, 30, 200)
    d = _durations(rng, 200)
    got = one_f_one_b_makespan(p, m, (d[:, 0], d[:, 2], d[:, 4]), (d[:, 1], d[:, 3], d[:, 5]))
    want = [_simulated(int(pp), int(mm), row) for pp, mm, row in zip(p, m, d)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_by_hand_first_stage_heavier():
    """p = 2, m = 2, first stage f = 2, b = 4, last f = b = 1.  Traced: rank 0 F0 [0, 2],
    F1 [2, 4]; rank 1 F0 [2, 3], B0 [3, 4]; rank 0 B0 [4, 8]; rank 1 F1 [4, 5], B1 [5, 6];
    rank 0 B1 [8, 12]: 12, where Narayanan's m tau_max + sum tau - tau_max = 2 x 6 + 2 = 14."""
    assert float(one_f_one_b_makespan(2, 2, (2.0, 0.0, 1.0), (4.0, 0.0, 1.0))) == 12.0


def test_by_hand_middle_stages_heavier():
    """tests/test_uneven_step.py's hand trace: p = 4, stages of 1, 2, 2, 1 layers plus one
    layer of embedding / output (forward 3, 5, 5, 3; backward 6, 10, 10, 6): 48 at m = 1,
    58 at m = 2 and 15 m + 28 for m = 2..12, 5 below (m - 1) 15 + 48."""
    for m in range(1, 13):
        got = float(one_f_one_b_makespan(4, m, (3.0, 5.0, 3.0), (6.0, 10.0, 6.0)))
        assert got == (48.0 if m == 1 else 15 * m + 28), m


def test_last_stage_slowest_is_narayanans_form():
    """Where the last stage is the slowest, forward and backward, the makespan is
    m tau_last + tau_first + (p - 2) tau_mid (arXiv:2104.04473 §2.2.1 with (p - 1) bubble
    stages of the others' mean)."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        p, m = int(rng.integers(2, 12)), int(rng.integers(1, 40))
        f1, b1, fm, bm = rng.exponential(1.0, 4)
        fl, bl = max(f1, fm) * (1 + rng.random()), max(b1, bm) * (1 + rng.random())
        fm, bm = (fm, bm) if p > 2 else (0.0, 0.0)
        want = m * (fl + bl) + (f1 + b1) + (p - 2) * (fm + bm)
        got = float(one_f_one_b_makespan(p, m, (f1, fm, fl), (b1, bm, bl)))
        assert got == pytest.approx(want, rel=1e-13)


def test_leaves_other_rows_as_given():
    """p = 1, interleaved (v > 1) and GPipe rows keep the pipeline seconds they came with."""
    tau = {"first": (2.0, 4.0), "middle": (0.0, 0.0), "last": (1.0, 1.0)}
    p, m, v = np.array([1, 2, 2, 2]), np.array([2, 2, 2, 4]), np.array([1, 1, 2, 1])
    got = exact_one_f_one_b(Settings(), np.full(4, 99.0), tau, 0.0, p, m, v)
    # hand, m = 4: the first stage's passes alone, 4 x 6 = 24 (a detour through the last
    # stage skipping one first-stage forward gives as much: 24 + 2 - 2)
    assert got.tolist() == [99.0, 12.0, 99.0, 24.0]
    gpipe = exact_one_f_one_b(Settings(schedule="gpipe"), np.full(4, 99.0), tau, 0.0, p, m, v)
    assert gpipe.tolist() == [99.0] * 4


def test_grid_prices_the_simulated_schedule_under_1f1b():
    """The step's grid (the search's path) equals ``exact_schedule=True`` (the simulation, the
    estimate's path) on uneven end stages, the first heavier, p = 2..8, m = 1..3p, and the
    exact schedule no longer caps 1F1B grids at 1,000 layouts."""
    rows = [(p, m) for p in (2, 4, 8) for m in range(1, 3 * p + 1)]
    p, m = (np.array(c) for c in zip(*rows))
    kw = dict(t=1, p=p, d=1, v=1, m=m, first_stage_layers=12, last_stage_layers=4,
              settings=Settings(seq_length=4096))
    grid = step_time_grid(preset("llama3-8b"), "h100", **kw)
    exact = step_time_grid(preset("llama3-8b"), "h100", exact_schedule=True, **kw)
    np.testing.assert_allclose(grid["step"], exact["step"], rtol=1e-12)
    big = step_time_grid(preset("llama3-8b"), "h100", t=1, p=4, d=1, v=1,
                         m=np.arange(1, 1201), exact_schedule=True, first_stage_layers=12,
                         last_stage_layers=4, settings=Settings(seq_length=4096))
    assert big["step"].shape == (1200,)
