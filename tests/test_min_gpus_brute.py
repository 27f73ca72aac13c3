"""min_gpus against a brute force over d, and the pruned search of smallest_multiple.

The brute force prices each layout with :func:`memsym.training.training_memory` (the exact
SymPy totals, not the vectorized grid that min_gpus searches) at d = 1, 2, ... and keeps the
first d that fits; the fewest GPUs is the least t d over the layouts.
"""

from __future__ import annotations

import functools
import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.model import Architecture
from memsym.search import launch_overlaps, make_space, min_gpus
from memsym.search.fewest_gpus import (candidate_knobs, evaluate_rows, known_bounds,
                                       smallest_d_by_fit, smallest_multiple)
from memsym.search.space import CHOICE_KEYS
from memsym.training import Layout, Training, training_memory

GB = 10**9
ZERO = {"workspace": 0, "nccl": 0, "fragmentation": 0}
TOY = Architecture(name="toy", num_layers=4, hidden_size=1024, num_attention_heads=16,
                   vocab_size=32000, swiglu=True, normalization="RMSNorm",
                   ffn_hidden_size=4096, position_embedding_type="rope", add_bias_linear=False)


@functools.lru_cache(maxsize=None)
def _exact_total(t, d, spf, cap_opts):
    """The exact total of the toy at (t, p = c = 1, d) under ZeRO-3 and full recompute
    (cached: the scan over d for a larger capacity is the start of the smaller one's)."""
    lay = Layout(t=t, p=1, d=d, c=1, e=1, sequence_parallel=spf)
    tr = Training(seq_length=1024, micro_batch_size=1, recompute="full", sharding="zero3",
                  **launch_overlaps("megatron", "zero3"))
    return training_memory(TOY, lay, tr, allowances=ZERO).bytes_total


@pytest.mark.parametrize("cap_gb", [0.25, 0.5, 1])
def test_min_gpus_is_the_brute_force_over_d(cap_gb):
    cap = int(cap_gb * GB)
    best = None
    for t in (1, 2):
        for spf in ((False,) if t == 1 else (False, True)):
            # ZeRO-3 divides every model state by d: the first d that fits is the answer
            for d in range(1, 257):
                if _exact_total(t, d, spf, None) <= cap:
                    if best is None or t * d < best:
                        best = t * d
                    break
    r = min_gpus(TOY, "a100-80gb", seq_length=1024, capacity=cap, recompute=["full"],
                 sharding=["zero3"], micro_batch_sizes=[1], tp=[1, 2], pp=[1], cp=[1],
                 gpus_per_node=2, allowances=ZERO, max_gpus=512)
    assert r.gpus == best
    lay = r.layout
    assert lay["t"] * lay["d"] == best
    assert r.bytes["total"] == _exact_total(lay["t"], lay["d"], lay["sequence_parallel"], None)
    assert r.bytes["total"] <= cap


@settings(max_examples=60, deadline=None, derandomize=True)
@given(rows=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 4), st.integers(1, 64),
                               st.integers(1, 16)), min_size=1, max_size=12),
       known=st.one_of(st.none(), st.integers(1, 2000)))
def test_pruned_search_keeps_the_fewest_gpus(rows, known):
    # rows of (the smallest fitting d, step, k_max, GPUs per unit of d): the fewest GPUs is
    # min weight * d over the rows whose d is a multiple of step within k_max step (the
    # smallest multiple of step at or above need), found here by direct arithmetic
    need, step, kmax, weight = (np.array(c, dtype=np.int64) for c in zip(*rows))
    exact = -(-need // step) * step
    exact = np.where(exact <= kmax * step, exact, 0)
    fits = exact > 0
    full = smallest_multiple(lambda r, dv: dv >= need[r], step, kmax)
    assert full.tolist() == exact.tolist()
    pruned = smallest_multiple(lambda r, dv: dv >= need[r], step, kmax, weight=weight,
                               known=known)
    if not fits.any():
        assert not pruned.any()
        return
    g_best = int((weight * exact)[fits].min())
    if known is not None and known < g_best:
        return                      # the bound said no row can win: nothing to keep
    winners = np.flatnonzero(fits & (weight * exact == g_best))
    # every row at the fewest GPUs keeps its exact d; no other row reaches that few
    assert pruned[winners].tolist() == exact[winners].tolist()
    others = np.setdiff1d(np.arange(len(need)), winners)
    assert np.all((pruned[others] == 0) | (weight[others] * pruned[others] > g_best))


def test_pruned_search_keeps_a_tie():
    # row 0 fits at d = 1 with 5 GPUs per d: G = 5.  Row 1 (1 GPU per d) needs d = 5: after
    # the probes d = 1, 2, 4 fail its fewest possible G is 5, a tie, so it is searched on
    # (d = 8 fits, then bisection: 6 fits, 5 fits) and both rows end at G = 5
    need = np.array([1, 5])
    got = smallest_multiple(lambda r, dv: dv >= need[r], np.array([1, 1]), np.array([64, 64]),
                            weight=np.array([5, 1]))
    assert got.tolist() == [1, 5]


# --- the experts' own TP size (issue 32) ------------------------------------------------
#: GPT-OSS 120B under Megatron-LM: 36 layers, 64 heads, 8 KV heads, 128 biased experts
#: (memsym.model.presets).  Megatron-core splits biased experts with t_e = 1 only, so every
#: t > 1 layout runs its experts whole (ETP 1 beside TP t), and each expert-parallel group
#: e t_e must divide t c d (parallel_state.py:874-884 at d98e8a64dd).
OSS_SEQ, OSS_CAP = 4096, 40 * GB


def _oss_total(t, te, p, e, d):
    """The exact total of GPT-OSS 120B at (t, t_e, p, e, d), c = 1, b = 1, full recompute and
    the distributed optimizer (sequence parallelism on with t > 1, as Megatron-core requires
    with experts); None where training_memory refuses the layout (a launch rule)."""
    lay = Layout(t=t, p=p, d=d, c=1, e=e, t_e=te, sequence_parallel=t > 1)
    tr = Training(seq_length=OSS_SEQ, micro_batch_size=1, recompute="full",
                  sharding="distributed-optimizer",
                  **launch_overlaps("megatron", "distributed-optimizer"))
    try:
        return training_memory("gpt-oss-120b", lay, tr, allowances=ZERO).bytes_total
    except InvalidValueError:
        return None


def _oss_brute_force(pairs, max_gpus=128):
    """The fewest GPUs t p d over ``pairs`` of (t, t_e), p in {2, 3, 4, 6, 9} (even splits of
    36), e in {4, 8, 16, 32}: for each layout the first d (a multiple of e t_e / gcd(e t_e, t),
    the ep-group rule) whose exact total fits, no further than the best G found so far."""
    best = max_gpus + 1
    for (t, te), p, e in itertools.product(pairs, (2, 3, 4, 6, 9), (4, 8, 16, 32)):
        step = e * te // math.gcd(e * te, t)
        d = step
        while t * p * d < best:
            total = _oss_total(t, te, p, e, d)
            if total is not None and total <= OSS_CAP:
                best = t * p * d
                break
            d += step
    return best


def test_min_gpus_tries_the_experts_own_tp_size():
    # brute force over a small grid of layouts priced one by one with training_memory: with
    # the experts whole (t_e = 1) beside t > 1 fewer GPUs fit than with t_e = t (here t = 1:
    # t_e = t > 1 is refused for biased experts); min_gpus must find no more than either
    same_tp = _oss_brute_force([(1, 1), (2, 2), (4, 4), (8, 8)])
    with_etp1 = _oss_brute_force([(1, 1), (2, 1), (4, 1), (8, 1)])
    assert with_etp1 < same_tp          # the case this test is about: ETP != TP saves GPUs
    r = min_gpus("gpt-oss-120b", "a100-80gb", seq_length=OSS_SEQ, capacity=OSS_CAP,
                 recompute=["full"], sharding=["distributed-optimizer"], micro_batch_sizes=[1],
                 cp=[1], allowances=ZERO, uneven=False, max_gpus=256)
    assert r.gpus <= with_etp1
    lay = r.layout
    assert r.gpus == lay["t"] * lay["p"] * lay["c"] * lay["d"]
    # the chosen layout's own estimate fits, and is the total min_gpus reports
    own = _oss_total(lay["t"], lay["t_e"], lay["p"], lay["e"], lay["d"])
    assert lay["sequence_parallel"] == (lay["t"] > 1)
    assert own == r.bytes["total"] and own <= OSS_CAP


def test_cli_min_gpus_says_the_experts_tp(capsys):
    # the command reports the chosen t_e: in --json always (etp), in the text where it is not
    # tp (Megatron's default); GPT-OSS's biased experts run with t_e = 1 (moe-bias-etp)
    argv = ["min-gpus", "gpt-oss-120b", "--gpu", "a100-40gb", "--recompute", "full",
            "--sharding", "distributed-optimizer"]
    assert main(argv + ["--json"]) == 0
    lay = json.loads(capsys.readouterr().out)["layout"]
    r = min_gpus("gpt-oss-120b", "a100-40gb", recompute=["full"],
                 sharding=["distributed-optimizer"])
    assert lay["etp"] == r.layout["t_e"] == 1 and lay["tp"] == r.layout["t"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert ("etp 1" in text) == (lay["tp"] > 1)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(rows=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 4), st.integers(1, 64),
                               st.integers(1, 400), st.integers(1, 400)),
                     min_size=1, max_size=12))
def test_search_started_from_known_sizes_is_the_same(rows):
    # each row: (the smallest fitting d, step, k_max, two sizes d already priced).  What the
    # priced sizes say (fits where d >= need; counted only at multiples of step) must not
    # change the answer: the smallest multiple of step at or above need within k_max step
    need, step, kmax, pa, pb = (np.array(c, dtype=np.int64) for c in zip(*rows))
    exact = -(-need // step) * step
    exact = np.where(exact <= kmax * step, exact, 0)
    idx = np.arange(len(need))
    lo, hi = known_bounds(step, kmax, [(idx, dv, dv >= need) for dv in (pa, pb)])
    got = smallest_multiple(lambda r, dv: dv >= need[r], step, kmax, lo=lo, hi=hi)
    assert got.tolist() == exact.tolist()


def test_every_d_the_fit_search_returns_fits():
    # smallest_d_by_fit returns per (layout, choice) 0 or a d; a d it returns must fit on the
    # compiled totals, also for the rows it stops searching (their d only has to exceed the
    # fewest GPUs).  Mixtral 8x7B on H100s has rows whose alpha + beta/d d* fails the check
    # and that cannot win: they were once left with that unchecked d*.
    space = make_space("mixtral-8x7b", "h100-80gb", micro_batch_sizes=(1,))
    knobs, _ = candidate_knobs(space, 128)
    rows, d = smallest_d_by_fit(space, knobs, 128, lambda *a: None)
    live = np.flatnonzero(d > 0)
    cols = evaluate_rows(space, knobs, d[live], rows=rows["knob"][live],
                         only={k: rows[k][live] for k in CHOICE_KEYS})
    assert len(cols["row"]) == len(live)
    assert np.all(cols["memory"] <= float(space.capacity))
