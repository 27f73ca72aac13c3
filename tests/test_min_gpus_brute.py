"""min_gpus against a brute force over d, and the pruned search of smallest_multiple.

The brute force prices each layout with :func:`memsym.training.training_memory` (the exact
SymPy totals, not the vectorized grid that min_gpus searches) at d = 1, 2, ... and keeps the
first d that fits; the fewest GPUs is the least t d over the layouts.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from memsym.model import Architecture
from memsym.search import launch_overlaps, make_space, min_gpus
from memsym.search.fewest_gpus import (candidate_knobs, evaluate_rows, smallest_d_by_fit,
                                       smallest_multiple)
from memsym.search.space import CHOICE_KEYS
from memsym.training import Layout, Training, training_memory

GB = 10**9
ZERO = {"workspace": 0, "nccl": 0, "fragmentation": 0}
TOY = Architecture(name="toy", num_layers=4, hidden_size=1024, num_attention_heads=16,
                   vocab_size=32000, swiglu=True, normalization="RMSNorm",
                   ffn_hidden_size=4096, position_embedding_type="rope", add_bias_linear=False)


def _exact_total(t, d, spf, cap_opts):
    """The exact total of the toy at (t, p = c = 1, d) under ZeRO-3 and full recompute."""
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
