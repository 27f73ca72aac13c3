"""No twins (issue 29): collective time, bubble and step time are each defined once.

* Collectives: :mod:`memsym.terms.collectives` owns NCCL's per-rank factors and ring steps;
  the numpy functions of :mod:`memsym.timing.collectives` are its closed forms compiled.  The
  grid below holds the two equal, and a hand value (nccl-tests doc/PERFORMANCE.md: an
  all-reduce moves 2(n-1)/n S per rank in 2(n-1) steps) pins what both compute.  No module
  but the owner writes a ring factor ``(x - 1) / x`` by hand (read from the source with ast).
* Bubble: :func:`memsym.terms.pipeline.bubble_fraction` owns Narayanan's closed form
  (arXiv:2104.04473 §2.2.1-2.2.2: (p-1)/m, (p-1)/(v m)); the exact schedule
  (:func:`memsym.terms.pipeline_order.bubble_fraction`) returns it wherever it holds.
* Step time: the closed form (:func:`memsym.terms.compute.step_time`: compute times
  (1 + bubble), plus communication) and the predicted step
  (:func:`memsym.timing.step.step_time_grid`: m tau_max plus the bubble in stage units
  times the other stages' mean tau, plus exposed DP and the optimizer) are two models of one
  composition; the grid's pipeline part follows the closed form's bubble-over-compute
  ratio at every m.

Grids are small (about a hundred layouts in one vectorised call): the file runs in seconds.
"""

from __future__ import annotations

import ast
import itertools
import math
import pathlib

import numpy as np
import pytest
import sympy as sp

from memsym.model import preset
from memsym.symbols import G, m as m_sym, p as p_sym, v as v_sym
from memsym.terms import collectives as closed
from memsym.terms import compute, pipeline, pipeline_order
from memsym.timing import collectives as numeric
from memsym.timing.step import Overlap, Settings, step_time_grid
from source_trees import parsed

ROOT = pathlib.Path(__file__).resolve().parent.parent

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "p2p")
#: Group sizes a job meets: TP in a node, DP and EP across nodes, an NVL72 rack, 512 ranks.
RANKS = (1, 2, 3, 4, 7, 8, 16, 64, 72, 512)
#: Message sizes [bytes]: none, one byte, a page, seed 002's TP bytes, a 70B model's bf16
#: gradients on one of 8 ranks (17.5e9), a terabyte.
SIZES = (0, 1, 4096, 7516192768, 17_500_000_000, 10**12)
#: Per-direction bandwidths [bytes/s] and per-step latencies [s] of memsym's links.
LINKS = ((450 * 10**9, sp.Rational(5, 10**6)), (50 * 10**9, sp.Rational(1, 10**5)),
         (370 * 10**9, 0))


@pytest.mark.parametrize("kind", KINDS)
def test_numeric_collectives_are_the_closed_forms(kind):
    for n, size, (bw, lat) in itertools.product(RANKS, SIZES, LINKS):
        exact_t = closed.collective_time(kind, size, n, bw, lat)
        exact_b = closed.collective_bytes(kind, size, n)
        got_t = float(numeric.collective_time(kind, size, n, bw, float(lat)))
        got_b = float(numeric.collective_bytes(kind, size, n))
        # the step time prices a lone rank's ring collective at 0 (it is not issued)
        want_t = 0.0 if (n == 1 and kind != "p2p") else float(exact_t)
        assert math.isclose(got_t, want_t, rel_tol=1e-15, abs_tol=0.0), (kind, n, size, bw)
        assert math.isclose(got_b, float(exact_b), rel_tol=1e-15), (kind, n, size)


def test_all_reduce_by_hand():
    # nccl-tests doc/PERFORMANCE.md: 2(n-1)/n S per rank, 2(n-1) latency steps
    S, n, bw, lat = 8 * 10**9, 8, 450 * 10**9, sp.Rational(5, 10**6)
    hand = sp.Rational(2 * (n - 1), n) * S / bw + 2 * (n - 1) * lat
    assert closed.collective_time("all-reduce", S, n, bw, lat) == hand
    assert float(numeric.collective_time("all-reduce", S, n, bw, float(lat))) == \
        pytest.approx(float(hand), rel=1e-15)


def test_numeric_collectives_broadcast_like_numpy():
    n = np.array([[1.0], [8.0]])
    size = np.array([1e6, 2e6, 4e6])
    assert numeric.collective_time("p2p", size, n, 1e9).shape == (2, 3)
    assert numeric.collective_bytes("all-gather", size, n).shape == (2, 3)
    assert list(numeric.collective_bytes("all-gather", size, n)[0]) == [0.0, 0.0, 0.0]


def _hand_ring_factors(path: pathlib.Path) -> list[str]:
    """``(x - 1) / x`` and ``k * (x - 1) / x`` written in ``path``'s code (not its text)."""
    def minus_one(node):
        return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)
                and isinstance(node.left, ast.Name) and isinstance(node.right, ast.Constant)
                and node.right.value == 1 and node.left.id)

    out = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) \
                and isinstance(node.right, ast.Name):
            left = node.left
            parts = [left] + ([left.left, left.right] if isinstance(left, ast.BinOp)
                              and isinstance(left.op, ast.Mult) else [])
            if any(minus_one(q) == node.right.id for q in parts):
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_ring_factors_are_written_once():
    owner = ROOT / "memsym" / "terms" / "collectives.py"
    assert len(_hand_ring_factors(owner)) == 4      # the scan sees the owner's table
    found = [hit for path in sorted((ROOT / "memsym").rglob("*.py")) if path != owner
             for hit in _hand_ring_factors(path)]
    assert found == [], "ring factors written outside memsym/terms/collectives.py:\n" + \
        "\n".join(found)


# --- bubble -------------------------------------------------------------------------------

def _closed_form_holds(schedule, p, m, v):
    if v == 1:
        return schedule in ("1f1b", "gpipe")
    if schedule == "gpipe":
        return m >= p
    return m >= p and m % p == 0          # Megatron's N = p divides m


@pytest.mark.parametrize("schedule", ("1f1b", "interleaved", "gpipe"))
def test_exact_bubble_is_the_closed_form_where_it_holds(schedule):
    checked = 0
    for p, m, v in itertools.product((1, 2, 3, 4, 8, 16), (1, 2, 4, 7, 8, 16, 32, 48, 64),
                                     (1, 2, 3, 5)):
        if schedule != "gpipe" and (v > 1) != (schedule == "interleaved"):
            continue
        if not _closed_form_holds(schedule, p, m, v) or (v > 1 and p == 1):
            continue
        sym = pipeline.bubble_fraction(v > 1).xreplace({p_sym: p, m_sym: m, v_sym: v})
        assert pipeline_order.bubble_fraction(schedule, p, m, v) == sym, (p, m, v)
        # Narayanan §2.2, by hand
        assert sym == sp.Rational(p - 1, v * m)
        checked += 1
    assert checked > 20


def test_seed002_bubble_table():
    # seed 002: 8 stages, m = 4 ... 64 -> 175 %, 87.5 %, 43.75 %, 21.875 %, 10.9375 %
    want = [sp.Rational(175, 100), sp.Rational(875, 1000), sp.Rational(4375, 10000),
            sp.Rational(21875, 100000), sp.Rational(109375, 1000000)]
    assert [pipeline_order.bubble_fraction("1f1b", 8, mm) for mm in (4, 8, 16, 32, 64)] == want


# --- step time ----------------------------------------------------------------------------

def test_predicted_pipeline_follows_the_closed_forms_bubble():
    """The predicted step's pipeline part is m tau_max + (bubble / compute of the closed form)
    x m x tau_bar: tau_max and tau_bar are read from two micro-batch counts and the identity
    is checked at the others, each layout one row of a vectorised grid."""
    terms = compute.step_time(pipeline=True)
    ratio = sp.cancel(terms["bubble"].expr / terms["compute"].expr)   # (p-1)/m
    ratio_il = sp.cancel(compute.step_time(pipeline=True, interleaved=True)["bubble"].expr
                         / terms["compute"].expr)                        # (p-1)/(v m)
    assert G not in ratio.free_symbols
    rows = [(p, v, t, mult) for p in (2, 4, 8) for v in (1, 2) for t in (1, 4)
            for mult in (1, 2, 3, 5, 8)]
    p, v, t, mult = (np.array(col) for col in zip(*rows))
    m = mult * p
    out = step_time_grid(preset("llama3-8b"), "h100", t=t, p=p, d=2, v=v, m=m,
                         settings=Settings(seq_length=4096, flash_attention=True,
                                           dropout=False, distributed_optimizer=True),
                         overlap=Overlap())
    assert np.all(out["launchable"])
    # the step is the pipeline, the exposed DP traffic and the optimizer, nothing else
    assert np.array_equal(out["step"], out["pipeline"] + out["dp"] + out["optimizer"])
    pipe = {row: float(x) for row, x in zip(rows, out["pipeline"])}
    for (pp, vv, tt, mult_), got in pipe.items():
        one, two = pipe[(pp, vv, tt, 1)], pipe[(pp, vv, tt, 2)]
        tau_max = (two - one) / pp                       # m = p and m = 2p
        form = ratio_il if vv > 1 else ratio
        frac1 = float(form.xreplace({p_sym: pp, m_sym: pp, v_sym: vv}))
        tau_bar = (one - pp * tau_max) / (frac1 * pp)
        mm = mult_ * pp
        frac = float(form.xreplace({p_sym: pp, m_sym: mm, v_sym: vv}))
        assert got == pytest.approx(mm * tau_max + frac * mm * tau_bar, rel=1e-12), \
            (pp, vv, tt, mult_)
        # the last stage carries the output layer: the others' mean is below the slowest
        # (a bubble priced on the slowest stage's tau would make them equal)
        assert 0 < tau_bar < tau_max * (1 - 1e-9)
