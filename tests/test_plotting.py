"""Plots (issue 5, part 7): each returns a Figure that saves to PDF and PNG (Agg backend)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from memsym import byte_widths, model_state  # noqa: E402
from memsym.plotting import breakdown_bars, feasibility_map, memory_vs_d  # noqa: E402
from memsym.search import search  # noqa: E402

GB = 10**9


def test_breakdown_bars_stack_to_the_total(tmp_path):
    # ZeRO §5 example: 7.5B, d = 64: stage 1 = 4Ψ + 12Ψ/64 = 31.4 GB
    bd = model_state("zero1", convention="seed000").subs(byte_widths("zero1", convention="seed000")).breakdown(N=7.5e9, d=64, p=1, t=1)
    fig = breakdown_bars({"zero1": bd}, capacity=80 * GB)
    assert isinstance(fig, Figure)
    tops = [patch.get_y() + patch.get_height() for patch in fig.axes[0].patches]
    assert abs(max(tops) - 31.40625) < 1e-9
    fig.savefig(tmp_path / "bars.pdf")
    fig.savefig(tmp_path / "bars.png")
    assert (tmp_path / "bars.pdf").stat().st_size > 0 and (tmp_path / "bars.png").stat().st_size > 0


def test_memory_vs_d_marks_smallest_d(tmp_path):
    # ZeRO-3, 70B, 80 GB: 16 * 70e9 / d <= 80e9  ->  d >= 14 (by hand)
    M = model_state("zero3", convention="seed000").subs(byte_widths("zero3", convention="seed000"))
    fig = memory_vs_d(M, {"N": 70e9, "t": 1, "p": 1}, 80 * GB)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "smallest d = 14" in labels
    fig.savefig(tmp_path / "d.pdf")


def test_feasibility_map(tmp_path):
    res = search("llama2-13b", "a100-80gb", 8, seq_length=2048, recompute=["full"],
                 sharding=["distributed-optimizer"], micro_batch_sizes=[1])
    fig = feasibility_map(res)
    img = fig.axes[0].get_images()[0]
    ts = sorted({int(x) for x in res.columns["t"]})
    ps = sorted({int(x) for x in res.columns["p"]})
    assert img.get_array().shape == (len(ts), len(ps))
    fig.savefig(tmp_path / "map.png")
