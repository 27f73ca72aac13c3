"""Plots (issue 16, part 3): each returns a Figure; titles, axis labels with units, the capacity
line, the solved value, the floor, "nothing fits" and the best layout checked on the matplotlib
objects; saved as PNG, PDF and SVG."""

from __future__ import annotations

import argparse
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from memsym import byte_widths, model_state  # noqa: E402
from memsym.errors import InvalidValueError  # noqa: E402
from memsym.plotting import (breakdown, breakdown_bars, feasibility, feasibility_map,  # noqa: E402
                             memory_vs, save)
from memsym.search import search  # noqa: E402
from memsym.symbols import L, N, b, h, s  # noqa: E402
from memsym.term import Source, Term, Total  # noqa: E402
from memsym.training import Layout, Training, training_memory  # noqa: E402

GB = 10**9


def _texts(ax):
    return [t.get_text() for t in ax.texts]


def _legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_breakdown_bars_stack_to_the_total(tmp_path):
    # ZeRO §5 example: 7.5B, d = 64: stage 1 = 4Ψ + 12Ψ/64 = 31.4 GB
    bd = model_state("zero1", convention="zero-paper").subs(byte_widths("zero1", convention="zero-paper")).breakdown(N=7.5e9, d=64, p=1, t=1)
    fig = breakdown_bars({"zero1": bd}, capacity=80 * GB)
    assert isinstance(fig, Figure)
    tops = [patch.get_y() + patch.get_height() for patch in fig.axes[0].patches]
    assert abs(max(tops) - 31.40625) < 1e-9
    fig.savefig(tmp_path / "bars.pdf")
    fig.savefig(tmp_path / "bars.png")
    assert (tmp_path / "bars.pdf").stat().st_size > 0 and (tmp_path / "bars.png").stat().st_size > 0


def test_breakdown_groups_and_capacity():
    # ZeRO §5 again, grouped: 4Ψ + 12Ψ/64 are all model states (31.40625 GB), nothing else
    bd = model_state("zero1", convention="zero-paper").subs(byte_widths("zero1", convention="zero-paper")).breakdown(N=7.5e9, d=64, p=1, t=1)
    fig = breakdown({"ZeRO-1, d = 64": bd}, capacity=80 * GB, title="ZeRO §5")
    ax = fig.axes[0]
    assert ax.get_title() == "ZeRO §5"
    assert ax.get_ylabel() == "memory per GPU [GB = 1e9 bytes]"
    assert _legend(ax) == ["capacity 80 GB", "model states"]
    assert "31.4 GB" in _texts(ax)
    cap = [ln for ln in ax.get_lines() if ln.get_label().startswith("capacity")][0]
    assert cap.get_ydata()[0] == 80
    # the legend sits outside the axes (anchored right of them)
    assert ax.get_legend().get_bbox_to_anchor().x0 >= ax.get_window_extent().x1


def test_breakdown_of_estimates_stacks_groups():
    lay, tr = Layout(t=4, p=2, d=8), Training(seq_length=2048, recompute="full", num_microbatches=16)
    ests = {f"d={n}": training_memory("gpt3-175b", replace(lay, d=n), tr) for n in (8, 32)}
    fig = breakdown(ests, capacity=80 * GB)
    ax = fig.axes[0]
    assert _legend(ax)[1:] == ["model states", "activations", "allowances"]
    # each bar's stack ends at the estimate's total
    for i, est in enumerate(ests.values()):
        tops = [p.get_y() + p.get_height() for p in ax.patches if abs(p.get_x() + p.get_width() / 2 - i) < 1e-9]
        assert abs(max(tops) - float(est.bytes_total) / GB) < 1e-9


def test_memory_vs_d_marks_smallest_d_and_integer_ticks(tmp_path):
    # ZeRO-3, 70B, 80 GB: 16 * 70e9 / d <= 80e9  ->  d >= 14 (by hand); floor 0 (all sharded)
    M = model_state("zero3", convention="zero-paper").subs(byte_widths("zero3", convention="zero-paper"))
    fig = memory_vs(M, "d", {"N": 70e9, "t": 1, "p": 1}, 80 * GB)
    ax = fig.axes[0]
    assert "smallest d that fits = 14" in _legend(ax)
    assert ax.get_xlabel() == "data-parallel size d [GPUs]"
    assert ax.get_ylabel() == "memory per GPU [GB = 1e9 bytes]"
    assert all(float(x).is_integer() for x in ax.get_xticks())
    assert any("d = 14" in t for t in _texts(ax))
    fig.savefig(tmp_path / "d.pdf")


def test_memory_vs_draws_the_floor():
    # distributed optimizer, 7B: 2N + 16N/d [bytes]; floor 2 * 7e9 = 14 GB (the weights no d
    # shards); 14 + 112/d <= 80 -> d >= 112/66 = 1.7 -> 2 (by hand)
    M = model_state("distributed-optimizer", convention="seed000").subs(
        byte_widths(convention="seed000"))
    fig = memory_vs(M, "d", {"N": 7e9, "t": 1, "p": 1}, 80 * GB)
    ax = fig.axes[0]
    floor = [ln for ln in ax.get_lines() if ln.get_label().startswith("floor")][0]
    assert floor.get_ydata()[0] == 14
    assert floor.get_label() == "floor: memory no d removes (14 GB)"
    assert "smallest d that fits = 2" in _legend(ax)


def test_memory_vs_nothing_fits():
    # 70B with the distributed optimizer: the unsharded bf16 weights alone are 140 GB > 80 GB
    M = model_state("distributed-optimizer", convention="seed000").subs(
        byte_widths(convention="seed000"))
    fig = memory_vs(M, "d", {"N": 70e9, "t": 1, "p": 1}, 80 * GB)
    ax = fig.axes[0]
    assert any(t.startswith("nothing fits: the floor 140 GB") for t in _texts(ax))
    assert not any(lab.startswith("smallest") for lab in _legend(ax))


def test_memory_vs_micro_batch_grows():
    # seed 002: 34sbhL bytes per sequence without recompute; s = h = 4096, L = 32:
    # 34*4096*4096*32 = 18,253,611,008 bytes (18.25 GB) per sequence, plus 14 GB of weights:
    # 14 + 18.25 b <= 80 -> b <= 3.6 -> 3 (by hand)
    tot = Total("toy", (Term("weights", 2 * N, "bf16 weights", Source("seed002", "16 bytes")),
                        Term("acts", 34 * s * b * h * L, "activations", Source("korthikanti", "Eq. 1"))))
    fig = memory_vs(tot, "b", {"N": 7e9, "s": 4096, "h": 4096, "L": 32}, 80 * GB)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "micro-batch size b [sequences]"
    assert "largest b that fits = 3" in _legend(ax)
    floor = [ln for ln in ax.get_lines() if ln.get_label().startswith("floor")][0]
    assert floor.get_ydata()[0] == 14


def test_memory_vs_p_skips_refused_layouts():
    # GPT-3 has 96 layers: p = 5 does not divide them (Megatron refuses it), p = 4 does
    lay, tr = Layout(t=4, p=2, d=8), Training(seq_length=2048, recompute="full", num_microbatches=16)
    # p changes the layers a stage holds: the curve is re-estimated, no symbolic total is used
    fig = memory_vs(None, "p", capacity=80 * GB, candidates=[1, 2, 4, 5, 8],
                    evaluate=lambda n: training_memory("gpt3-175b", replace(lay, p=n), tr).bytes_total)
    ax = fig.axes[0]
    assert [int(x) for x in ax.get_lines()[0].get_xdata()] == [1, 2, 4, 8]
    assert ax.get_xlabel() == ("pipeline-parallel size (number of stages) p [GPUs]\n"
                               "(not drawn, refused by the layout rules: p = 5)")
    # the marked p is the smallest drawn candidate whose re-estimate fits
    mem = {n: training_memory("gpt3-175b", replace(lay, p=n), tr).bytes_total for n in (1, 2, 4, 8)}
    want = min(n for n, m in mem.items() if m <= 80 * GB)
    assert f"smallest p that fits = {want}" in _legend(ax)


def _search():
    return search("llama2-13b", "a100-80gb", 8, seq_length=4096, micro_batch_sizes=[1],
                  global_batch_size=64)


def test_feasibility_step_time_marks_best_and_explains_blanks(tmp_path):
    res = _search()
    fig = feasibility(res)
    ax = fig.axes[0]
    best = res.best()
    star = [ln for ln in ax.get_lines() if ln.get_label().startswith("best")][0]
    assert star.get_label() == (f"best: t={best['t']} p={best['p']} c={best['c']} "
                                f"d={best['d']} b={best['b']}")
    assert "best step time" in ax.get_title()
    assert ax.get_xlabel().endswith("p [GPUs]") and ax.get_ylabel().endswith("t [GPUs]")
    # (t, p) pairs whose product does not divide 8 cannot exist: e.g. t = 8, p = 2
    title = ax.get_legend().get_title().get_text()
    assert "t\u00b7p does not divide the 8 GPUs" in title
    img = ax.get_images()[0].get_array()
    ts = sorted({int(x) for x in res.columns["t"]})
    ps = sorted({int(x) for x in res.columns["p"]})
    assert img.shape == (len(ts), len(ps))
    assert fig.axes[1].get_ylabel() == "best step time [s]"
    for ext in ("png", "pdf", "svg"):
        save(fig, tmp_path / f"map.{ext}")
        assert (tmp_path / f"map.{ext}").stat().st_size > 0


def test_feasibility_fits_map_values():
    res = search("llama2-13b", "a100-40gb", 8, seq_length=4096, micro_batch_sizes=[1],
                 recompute=["none"], sharding=["ddp"])
    fig = feasibility(res, value="fits")
    ax = fig.axes[0]
    arr = ax.get_images()[0].get_array()
    # 13B with plain DDP: 16 bytes x 13e9 = 208 GB unsharded; only model parallelism helps
    assert set(float(v) for v in arr.compressed()) <= {0.0, 1.0}
    if not res.columns["fits"].any():
        assert "nothing fits" in _texts(ax)


def test_feasibility_map_kept(tmp_path):
    res = search("llama2-13b", "a100-80gb", 8, seq_length=2048, recompute=["full"],
                 sharding=["distributed-optimizer"], micro_batch_sizes=[1])
    fig = feasibility_map(res)
    img = fig.axes[0].get_images()[0]
    ts = sorted({int(x) for x in res.columns["t"]})
    ps = sorted({int(x) for x in res.columns["p"]})
    assert img.get_array().shape == (len(ts), len(ps))
    fig.savefig(tmp_path / "map.png")


def test_save_refuses_other_formats(tmp_path):
    fig = breakdown({"x": {"weights": 1e9}})
    with pytest.raises(InvalidValueError, match=r"\.png, \.pdf or \.svg"):
        save(fig, tmp_path / "x.jpg")


def test_cli_plot_module(tmp_path):
    from memsym.cli import ArgumentParser
    from memsym.cli.plot import add_plot_parser, run_plot

    parser = ArgumentParser(prog="memsym")
    sub = parser.add_subparsers(dest="command", parser_class=ArgumentParser)
    add_plot_parser(sub)
    lay, tr = Layout(t=4, p=2, d=8), Training(seq_length=2048, recompute="full", num_microbatches=16)
    est = training_memory("gpt3-175b", lay, tr)
    for kind, extra in (("breakdown", []), ("memory-vs", ["--vs", "dp", "--candidates", "4:24"]),
                        ("memory-vs", ["--vs", "micro-batch-size", "--candidates", "1,2,4"])):
        out = tmp_path / f"{kind}.svg"
        args = parser.parse_args(["plot", kind, "-o", str(out)] + extra)
        args.gpu_memory = 80 * GB
        assert run_plot(args, est, arch="gpt3-175b", layout=lay, training=tr) == 0
        assert out.read_text().startswith("<?xml")
    args = parser.parse_args(["plot", "feasibility", "-o", str(tmp_path / "f.png")])
    with pytest.raises(InvalidValueError, match="needs a MODEL and --gpu"):
        run_plot(args, est)
    from memsym.cli import UsageError

    with pytest.raises(UsageError):
        parser.parse_args(["plot", "memory-vs", "-o", "x.png", "--candidates", "__import__('os')"])
    with pytest.raises(argparse.ArgumentTypeError):
        from memsym.cli.options import candidates

        candidates("1:100000")


# ---------------------------------------------------------------------------------------------
# memsym plot KIND JOB ... -o FILE (the command line)
# ---------------------------------------------------------------------------------------------
_JOB = ["gpt3-175b", "--tp", "8", "--pp", "4", "--dp", "8", "--seq-length", "2048",
        "--recompute-granularity", "full", "--num-microbatches", "16", "--use-flash-attn"]


def _plot_cli(monkeypatch, tmp_path, kind, ext, *extra):
    import memsym.plotting as plotting
    from memsym.cli import main

    drawn = []
    real = plotting.save

    def keep(fig, path):
        drawn.append(fig)
        return real(fig, path)

    monkeypatch.setattr(plotting, "save", keep)
    out = tmp_path / f"{kind}.{ext}"
    assert main(["plot", kind, *_JOB, *extra, "-o", str(out)]) == 0
    assert out.stat().st_size > 0
    return drawn[0].axes[0], out


def _estimate_json(*argv):
    import contextlib
    import io
    import json

    from memsym.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(["estimate", *argv, "--json"])
    return json.loads(buf.getvalue())


def test_cli_plot_of_another_metric_draws_no_capacity(monkeypatch, tmp_path):
    # bars counted as torch.cuda.max_memory_allocated are not what must fit: the capacity
    # line would draw a fit the device's count may not have (the fit is judged on it); the
    # title names the counter, the bar is the allocated total estimate reports
    ax, _ = _plot_cli(monkeypatch, tmp_path, "breakdown", "png", "--gpu", "h100-80gb",
                      "--metric", "allocated")
    assert not [ln for ln in ax.get_lines() if ln.get_label().startswith("capacity")]
    assert "torch.cuda.max_memory_allocated (fit: the device's count)" in ax.get_title()
    rep = _estimate_json(*_JOB, "--gpu", "h100-80gb", "--metric", "allocated")
    bar = [p for p in ax.patches if abs(p.get_x() + p.get_width() / 2) < 1e-9]
    assert bar[-1].get_y() + bar[-1].get_height() == pytest.approx(rep["bytes"]["total"] / GB)


def test_cli_plot_breakdown(monkeypatch, tmp_path):
    ax, _ = _plot_cli(monkeypatch, tmp_path, "breakdown", "png", "--gpu", "h100-80gb")
    assert "gpt3-175b" in ax.get_title() and "TP 8 x PP 4 x DP 8 (256 GPUs)" in ax.get_title()
    assert ax.get_ylabel() == "memory per GPU [GB = 1e9 bytes]"
    # one bar per stage the estimate compares: p = 4 has the first, one middle and the last
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["stage 0 (first, most loaded)", "stage 1 (middle)", "stage 3 (last)"]
    rep = _estimate_json(*_JOB, "--gpu", "h100-80gb")
    terms = {k: v for k, v in rep["bytes"].items() if k != "total"}
    # the H100's CUDA total, 79.11 GiB = 84.94 GB (vllm-project/vllm#27508), then one legend
    # entry per term (not three groups)
    assert _legend(ax) == ["capacity 84.94 GB", *terms]
    cap = next(ln for ln in ax.get_lines() if ln.get_label().startswith("capacity"))
    assert cap.get_ydata()[0] == rep["gpu_memory_bytes"] / GB
    # the most-loaded stage's bar: one segment per term, its height the JSON bytes / 1e9,
    # stacked in the report's order from 0 to the total
    bar = [p for p in ax.patches if abs(p.get_x() + p.get_width() / 2) < 1e-9]
    assert [p.get_height() for p in bar] == pytest.approx([v / GB for v in terms.values()],
                                                          rel=1e-12)
    assert bar[-1].get_y() + bar[-1].get_height() == pytest.approx(rep["bytes"]["total"] / GB)
    assert len(ax.patches) == 3 * len(terms)
    # every segment labelled with its GB and its share of the capacity (inside a segment on
    # two lines)
    shown = [t.get_text().replace("\n", " ") for t in ax.texts]
    for key, val in terms.items():
        label = f"{key} {val / GB:.1f} GB, {100 * val / rep['gpu_memory_bytes']:.1f} %"
        assert label in shown, label


def test_cli_plot_breakdown_help_is_the_plots_own(capsys):
    from memsym.cli import main

    with pytest.raises(SystemExit):
        main(["plot", "breakdown", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: memsym plot breakdown")
    assert "One bar per pipeline stage" in out and "--vs" not in out and "--output" in out
    with pytest.raises(SystemExit):
        main(["plot", "feasibility", "--help"])
    out = " ".join(capsys.readouterr().out.split())      # the help's lines joined
    assert "starred at the centre of its cell" in out and "--candidates" not in out


def test_cli_plot_memory_vs_title_names_the_job_and_the_unknown(monkeypatch, tmp_path):
    ax, _ = _plot_cli(monkeypatch, tmp_path, "memory-vs", "png", "--gpu-memory", "80GB",
                      "--vs", "dp")
    # the sweep varies d: the title leaves it free instead of naming the job's d = 8
    assert ax.get_title() == ("Memory per GPU against the data-parallel size d\n"
                              "gpt3-175b: TP 8 x PP 4 x DP d, s = 2048, b = 1")
    ax, _ = _plot_cli(monkeypatch, tmp_path, "memory-vs", "png", "--gpu-memory", "80GB",
                      "--vs", "tp", "--candidates", "4,8")
    assert "TP t x PP 4 x DP 8" in ax.get_title() and "256 GPUs" not in ax.get_title()


def test_cli_plot_memory_vs_marks_the_solved_d(monkeypatch, tmp_path):
    ax, out = _plot_cli(monkeypatch, tmp_path, "memory-vs", "svg", "--gpu-memory", "80GB",
                        "--vs", "dp")
    assert ax.get_xlabel() == "data-parallel size d [GPUs]"
    legend = _legend(ax)
    # smallest d = 3 (tests/test_solve_job.py derives it by hand), the capacity and the floor
    assert "smallest d that fits = 3" in legend and "capacity C = 80 GB" in legend
    assert any(x.startswith("floor: memory no d removes") for x in legend)
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert out.read_text().lstrip().startswith(("<?xml", "<svg"))


def test_cli_plot_memory_vs_nothing_fits(monkeypatch, tmp_path):
    # Llama-3 70B, s = 8192, no recompute: nothing fits however large d is (the floor is above C)
    import memsym.plotting as plotting
    from memsym.cli import main

    drawn = []
    real = plotting.save
    monkeypatch.setattr(plotting, "save", lambda fig, path: (drawn.append(fig), real(fig, path))[1])
    out = tmp_path / "none.pdf"
    assert main(["plot", "memory-vs", "llama3-70b", "--tp", "8", "--pp", "4", "--seq-length",
                 "8192", "--gpu-memory", "80GB", "-o", str(out)]) == 0
    texts = " ".join(_texts(drawn[0].axes[0]))
    assert "nothing fits" in texts
    assert out.read_bytes().startswith(b"%PDF")


def test_feasibility_star_at_the_centre_of_its_cell():
    res = _search()
    fig = feasibility(res, x="p", y="t")
    ax = fig.axes[0]
    best = res.best()
    xs = [int(t.get_text()) for t in ax.get_xticklabels()]
    ys = [int(t.get_text()) for t in ax.get_yticklabels()]
    star = next(ln for ln in ax.get_lines() if ln.get_marker() == "*")
    # image cell (i, j) spans j +- 1/2 by i +- 1/2: its centre is (j, i)
    assert (star.get_xdata()[0], star.get_ydata()[0]) == (xs.index(best["p"]), ys.index(best["t"]))


def test_cli_plot_feasibility_marks_best(monkeypatch, tmp_path):
    ax, _ = _plot_cli(monkeypatch, tmp_path, "feasibility", "png", "--gpu", "h100-80gb")
    assert ax.get_xlabel().startswith("pipeline-parallel size")
    assert ax.get_ylabel().startswith("tensor-parallel size")
    fig_texts = [t.get_text() for t in ax.figure.legends[0].get_texts()] if ax.figure.legends \
        else _legend(ax)
    assert any(x.startswith("best:") for x in fig_texts)
    assert any("blank" in x for x in fig_texts)
    # its step times are priced on the cluster the options give, and the title says which
    ax, _ = _plot_cli(monkeypatch, tmp_path, "feasibility", "png", "--gpu", "h100-80gb",
                      "--global-batch-size", "128", *_CLUSTER_FLAGS)
    title = " ".join(ax.get_title().split())
    assert "priced on 4 GPUs per node, 100 GB/s intra-node, 10 GB/s inter-node, GEMM " \
        "efficiency 0.3" in title


def test_cli_plot_bad_extension(tmp_path, capsys):
    from memsym.cli import main

    assert main(["plot", "breakdown", *_JOB, "-o", str(tmp_path / "x.jpg")]) == 2
    assert "--output must end in .png, .pdf or .svg" in capsys.readouterr().err


def test_cli_plot_memory_vs_keeps_the_job_allowances(monkeypatch, tmp_path):
    # --workspace 0 drops the workspace allowance at every candidate d (the fragmentation share
    # is of allocated memory only, so the curve falls by exactly that allowance: its default
    # M_ws, the CUDA context and the cuBLAS / TE workspaces)
    from memsym.training import ALLOWANCES
    ax, _ = _plot_cli(monkeypatch, tmp_path, "memory-vs", "png", "--gpu-memory", "80GB",
                      "--vs", "dp", "--candidates", "2,3,4", "--workspace", "0")
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "memory per GPU")
    xs, ys = list(line.get_xdata()), list(line.get_ydata())
    for n in (2, 3, 4):
        full = training_memory("gpt3-175b", Layout(t=8, p=4, d=n),
                               Training(seq_length=2048, recompute="full", num_microbatches=16))
        ws = float(ALLOWANCES["workspace"].default)
        assert abs(ys[xs.index(n)] - (float(full.bytes_total) - ws) / GB) < 1e-9


# ---------------------------------------------------------------------------------------------
# the palette, plot step-time, plot timeline, the binding term on the feasibility map (issue 33)
# ---------------------------------------------------------------------------------------------
def _png(path):
    # a PNG file starts with its 8-byte signature (PNG spec, ISO/IEC 15948 §5.2)
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_palette_is_okabe_itos():
    from matplotlib.colors import to_hex

    from memsym.plot_base import OKABE_ITO, PALETTE, color
    from memsym.plot_time import phase_timeline, step_time_bars
    from memsym.plotting import stage_breakdown

    # Okabe and Ito, Color Universal Design (2008), https://jfly.uni-koeln.de/color/, RGB 0-255
    cud = {"black": (0, 0, 0), "orange": (230, 159, 0), "sky blue": (86, 180, 233),
           "bluish green": (0, 158, 115), "yellow": (240, 228, 66), "blue": (0, 114, 178),
           "vermillion": (213, 94, 0), "reddish purple": (204, 121, 167)}
    assert {k: "#%02X%02X%02X" % rgb for k, rgb in cud.items()} == OKABE_ITO
    assert set(PALETTE) <= set(OKABE_ITO.values()) and color(len(PALETTE)) == PALETTE[0]
    figs = [stage_breakdown({"s0": {"weights": 14e9, "gradients": 7e9, "optimizer": 28e9,
                                    "activations": 9e9, "nccl": 1e9}}, capacity=80e9),
            step_time_bars({"compute": 0.5, "tp": 0.1, "dp": 0.1, "bubble": 0.1,
                            "optimizer": 0.05}, 1.0),
            phase_timeline({"forward": 60e9, "optimizer": 50e9}, capacity=80e9)]
    for fig in figs:
        drawn = {to_hex(p.get_facecolor()).upper() for p in fig.axes[0].patches}
        assert drawn and drawn <= set(OKABE_ITO.values()), drawn
    # the fits map is an image: its two colours, vermillion (none fits) and bluish green
    img = feasibility(_search(), x="p", y="t", value="fits").axes[0].images[0]
    assert [to_hex(c).upper() for c in img.cmap.colors] == [OKABE_ITO["vermillion"],
                                                             OKABE_ITO["bluish green"]]


def test_cli_plot_step_time_bars_are_the_json_parts(monkeypatch, tmp_path):
    from memsym.plot_time import STEP_PARTS

    ax, out = _plot_cli(monkeypatch, tmp_path, "step-time", "png", "--gpu", "h100-80gb")
    assert _png(out)
    rep = _estimate_json(*_JOB, "--gpu", "h100-80gb")
    parts, step = rep["step_time_parts_s"], rep["step_time_s"]
    named = [k for k, *_ in STEP_PARTS[:-1] if parts[k] > 0]
    # step = pipeline + exposed DP + optimizer (memsym.timing.step); "other" is what the
    # named parts leave of it (the end stages' embedding / output layer)
    other = step - sum(parts[k] for k in named)
    assert other >= 0
    assert [p.get_height() for p in ax.patches] == pytest.approx(
        [parts[k] for k in named] + [other], rel=1e-12)
    top = ax.patches[-1]
    assert top.get_y() + top.get_height() == pytest.approx(step, rel=1e-12)
    assert _legend(ax)[:2] == ["compute (GEMMs, attention)", "memory-bound kernels"]
    assert "exposed DP communication" in _legend(ax) and "pipeline bubble" in _legend(ax)
    assert ax.get_ylabel() == "time per step [s]"
    assert "gpt3-175b" in ax.get_title() and "h100-80gb" in ax.get_title()
    assert f"compute {parts['compute']:.3g} s, {100 * parts['compute'] / step:.1f} %" \
        in _texts(ax)


def test_cli_plot_timeline_bars_are_the_json_phases(monkeypatch, tmp_path):
    from memsym.training import PHASES

    ax, out = _plot_cli(monkeypatch, tmp_path, "timeline", "png", "--gpu", "h100-80gb",
                        "--margin", "0.05")
    assert _png(out)
    rep = _estimate_json(*_JOB, "--gpu", "h100-80gb", "--margin", "0.05")
    # the JSON rounds each phase up to whole bytes: equal to a byte
    heights = [p.get_height() * GB for p in ax.patches]
    assert heights == pytest.approx([rep["phases"][ph] for ph in PHASES], abs=1)
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == list(PHASES)
    assert f"{rep['phases']['peak']}\n(peak)" in [t.get_text() for t in ax.get_xticklabels()]
    cap, usable = (rep["gpu_memory_bytes"] / GB,
                   (rep["gpu_memory_bytes"] - rep["margin_bytes"]) / GB)
    lines = {ln.get_label().split(" ")[0] + ln.get_linestyle(): ln.get_ydata()[0]
             for ln in ax.get_lines()}
    assert lines == pytest.approx({"capacity--": cap, "capacity:": usable}, rel=1e-9)
    assert ax.get_ylabel() == "memory per GPU [GB = 1e9 bytes]"


def test_cli_plot_step_time_and_timeline_refuse_in_one_line(tmp_path, capsys):
    from memsym.cli import main

    assert main(["plot", "step-time", *_JOB, "-o", str(tmp_path / "s.png")]) == 2
    err = capsys.readouterr()
    assert "needs a MODEL and --gpu" in err.err and err.out == "" and err.err.count("\n") == 1
    assert main(["plot", "timeline", *_JOB, "--margin", "0.05", "-o",
                 str(tmp_path / "t.png")]) == 2
    assert "margin" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_feasibility_labels_each_cell_with_its_binding_term():
    import numpy as np

    from memsym.plotting import binding_code
    from memsym.training import ALLOWANCE_KEYS, STATE_KEYS

    res = _search()
    ax = feasibility(res, x="p", y="t", value="fits").axes[0]
    col = res.columns
    terms = [k for k in STATE_KEYS + ("activations",) + ALLOWANCE_KEYS if k in col]
    xs = [int(t.get_text()) for t in ax.get_xticklabels()]
    ys = [int(t.get_text()) for t in ax.get_yticklabels()]
    codes = {(t.get_position()[0], t.get_position()[1]): t.get_text() for t in ax.texts}
    want = set()
    for i, tt in enumerate(ys):
        for j, pp in enumerate(xs):
            rows = np.flatnonzero((col["t"] == tt) & (col["p"] == pp))
            if not len(rows):
                continue
            # the cell's layout with the most headroom; its largest term, found here anew
            r = rows[np.argmax(col["headroom"][rows])]
            big = max(terms, key=lambda k: np.nan_to_num(col[k][r], nan=-1.0))
            assert codes[(j, i + 0.3)] == binding_code(big)
            want.add(big)
    legend = _legend(ax)
    assert {f"{binding_code(k)} = {k}" for k in want} <= set(legend)
    assert "binds (the largest)" in ax.get_legend().get_title().get_text()
    assert binding_code("optimizer") == "O" and binding_code("expert_optimizer") == "EO"


def _bar_tops(ax):
    """x centre -> the top of the stacked bar there [GB] (the sum of its segments)."""
    tops = {}
    for p in ax.patches:
        x = round(p.get_x() + p.get_width() / 2, 9)
        tops[x] = tops.get(x, 0.0) + p.get_height()
    return [tops[x] for x in sorted(tops)]


def test_cli_plot_breakdown_by_phase_bars_are_the_phase_totals(monkeypatch, tmp_path):
    # issue 33: one stacked bar per phase; each bar's height is the library's own total of
    # that phase (memsym.training.phase_totals, what estimate --json reports under "phases"),
    # not a sum the plot makes up
    from memsym.job import job
    from memsym.training import PHASES, job_memory, phase_totals

    ax, out = _plot_cli(monkeypatch, tmp_path, "breakdown", "png", "--gpu", "h100-80gb",
                        "--by", "phase", "--margin", "4GB")
    assert _png(out)
    rep = _estimate_json(*_JOB, "--gpu", "h100-80gb", "--margin", "4GB")
    # the JSON rounds each phase up to whole bytes: equal to a byte
    assert [top * GB for top in _bar_tops(ax)] == pytest.approx(
        [rep["phases"][ph] for ph in PHASES], abs=1)
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == list(PHASES)
    assert f"{rep['phases']['peak']}\n(peak)" in [t.get_text() for t in ax.get_xticklabels()]
    assert all(p.get_height() >= 0 for p in ax.patches)
    cap, usable = (rep["gpu_memory_bytes"] / GB,
                   (rep["gpu_memory_bytes"] - rep["margin_bytes"]) / GB)
    lines = {ln.get_label().split(" ")[0] + ln.get_linestyle(): ln.get_ydata()[0]
             for ln in ax.get_lines()}
    assert lines == pytest.approx({"capacity--": cap, "capacity:": usable}, rel=1e-9)
    assert rep["margin_bytes"] == 4 * GB
    # the optimizer phase holds no activations (they are freed by then): no such segment there
    assert "optimizer" in ax.get_xticklabels()[-1].get_text()
    assert "activations" in _legend(ax) and "weights" in _legend(ax)

    # a single stage, where backward frees the output layer's activations (a negative
    # transient): the bars still add up to phase_totals evaluated by the library itself
    j = job("llama2-7b", seq_length=4096)
    est = job_memory(j)
    from memsym.cli.plot import phase_segments
    from memsym.plotting import phase_breakdown

    segs = phase_segments(est, j)
    ax = phase_breakdown(segs, capacity=80 * GB).axes[0]
    lib = phase_totals(j, est.stage)
    assert [top * GB for top in _bar_tops(ax)] == pytest.approx(
        [float(lib[ph].evaluate(est.values)) for ph in PHASES], rel=1e-12)
    assert all(v >= 0 for bd in segs.values() for v in bd.values())
    assert "activations" not in segs["optimizer"] or segs["optimizer"]["activations"] == 0
    with pytest.raises(InvalidValueError, match="negative"):
        phase_breakdown({"backward": {"weights": 1e9, "output_freed": -1e8}})


_CLUSTER_FLAGS = ("--efficiency", "0.3", "--inter-node-bandwidth", "10",
                  "--intra-node-bandwidth", "100", "--gpus-per-node", "4")


def test_cli_plot_step_time_takes_the_cluster_options(monkeypatch, tmp_path):
    # issue 33: plot prices the step on the cluster the options describe, as estimate does
    # (before, plot step-time dropped them and priced the GPU's usual cluster)
    from memsym.plot_time import step_segments

    ax, _ = _plot_cli(monkeypatch, tmp_path, "step-time", "png", "--gpu", "h100-80gb",
                      *_CLUSTER_FLAGS)
    rep = _estimate_json(*_JOB, "--gpu", "h100-80gb", *_CLUSTER_FLAGS)
    base = _estimate_json(*_JOB, "--gpu", "h100-80gb")
    drawn = [p.get_height() for p in ax.patches]
    assert drawn == pytest.approx(list(step_segments(rep["step_time_parts_s"],
                                                     rep["step_time_s"]).values()), rel=1e-12)
    # every GEMM at 0.3 of peak (the default predicts more): the compute part grows, and the
    # data-parallel traffic over 10 GB/s links instead of 50 takes longer
    assert rep["step_time_parts_s"]["compute"] > base["step_time_parts_s"]["compute"]
    assert rep["step_time_parts_s"]["dp"] > base["step_time_parts_s"]["dp"]
    assert f"{rep['step_time_s']:.3g} s" in ax.get_title()
    # and the plot says which cluster it priced the step on
    note = " ".join(ax.get_xlabel().split())
    assert "4 GPUs per node" in note and "100 GB/s intra-node" in note
    assert "10 GB/s inter-node" in note and "GEMM efficiency 0.3" in note


def test_cli_plot_feasibility_prices_on_the_given_cluster(monkeypatch):
    # the feasibility map's search runs on the cluster of the options: its step times are
    # those of a search given the same cluster and efficiency
    import memsym.search as search_mod
    from memsym.cli import main
    from memsym.hardware import cluster_for

    seen = {}

    def fake(*a, **kw):
        seen.update(kw)
        raise InvalidValueError("stop here")

    monkeypatch.setattr(search_mod, "search", fake)
    assert main(["plot", "feasibility", *_JOB, "--gpu", "h100-80gb", *_CLUSTER_FLAGS,
                 "-o", "/nonexistent/x.png"]) == 2
    assert seen["efficiency"] == pytest.approx(0.3)
    want = cluster_for("h100-80gb", 4, 100e9, 10e9)
    got = seen["cluster"]
    assert (got.gpus_per_node, got.intra_node_bandwidth, got.inter_node_bandwidth) == \
        (want.gpus_per_node, want.intra_node_bandwidth, want.inter_node_bandwidth) == \
        (4, 100e9, 10e9)


def test_cluster_options_only_on_the_kinds_that_price_the_step(capsys):
    from memsym.cli import main

    for kind, takes in (("step-time", True), ("feasibility", True), ("breakdown", False),
                        ("timeline", False), ("memory-vs", False)):
        with pytest.raises(SystemExit):
            main(["plot", kind, "--help"])
        out = capsys.readouterr().out
        assert ("--inter-node-bandwidth" in out) is takes, kind
        assert ("--by" in out) is (kind == "breakdown"), kind


@pytest.mark.parametrize("settings", [
    ["--optimizer", "sgd", "--no-flash-attn", "--dropout", "--framework", "deepspeed",
     "--sharding", "zero1"],
    ["--optimizer", "adafactor", "--framework", "torchtitan", "--sharding", "fsdp",
     "--recompute-granularity", "full"],
    ["--optimizer", "adam8bit", "--no-flash-attn", "--hidden-dropout", "0.1",
     "--attention-dropout", "0.1", "--offload", "optimizer", "--overlap-grad-reduce"]],
    ids=["deepspeed", "torchtitan", "megatron"])
def test_cli_plot_feasibility_draws_the_job_estimate_reads(monkeypatch, tmp_path, settings):
    """plot feasibility searches the job ``memsym estimate`` reads from the same options: its
    optimizer, attention kernel, dropout, framework, sharding and offload (the optimizer,
    flash attention, dropout and framework were dropped, the map drawn for Megatron's Adam).
    The cell d = 4, t = 1 of 4 GPUs holds one layout (p = c = 1): its drawn headroom and
    whether it fits are the estimate's at --dp 4."""
    import numpy as np

    import memsym.plotting as plotting
    from memsym.cli import main

    job = ["llama2-7b", "--gpu", "h100-80gb", "--seq-length", "2048", *settings]
    drawn = []
    monkeypatch.setattr(plotting, "save", lambda fig, path: drawn.append(fig))
    maps = {}
    for value in ("headroom", "fits"):
        assert main(["plot", "feasibility", *job, "--world-size", "4", "--x", "d", "--y", "t",
                     "--map", value, "-o", str(tmp_path / "f.png")]) == 0
        ax = drawn.pop().axes[0]
        xs = [int(t.get_text()) for t in ax.get_xticklabels()]
        ys = [int(t.get_text()) for t in ax.get_yticklabels()]
        maps[value] = float(np.asarray(ax.images[0].get_array())[ys.index(1), xs.index(4)])
    rep = _estimate_json(*job, "--dp", "4")
    headroom = (rep["gpu_memory_bytes"] - rep["bytes"]["total"]) / GB
    assert maps["headroom"] == pytest.approx(headroom, abs=1e-6)
    assert maps["fits"] == float(rep["fits"])


def test_cli_plot_feasibility_refuses_a_job_its_search_prices_otherwise(capsys, tmp_path):
    """What the search would price differently from the job is refused in one line: Megatron's
    --sharding zero2 (the search prices it as Megatron-FSDP optim_grads, the estimate does
    not) and a setting the search does not carry (the memory metric)."""
    from memsym.cli import main

    for extra, word in ((["--sharding", "zero2"], "megatron_fsdp"),
                        (["--metric", "reserved"], "metric")):
        code = main(["plot", "feasibility", "llama2-7b", "--gpu", "h100-80gb", "--world-size",
                     "4", *extra, "-o", str(tmp_path / "f.png")])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and err.count("\n") == 1 and word in err
