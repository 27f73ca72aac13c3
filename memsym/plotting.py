"""Plots of memory budgets and layout searches (matplotlib, imported only when a plot is made).

Owns the charts a reader of a sizing question needs: the breakdown of a job's memory against
the GPU's capacity (:mod:`memsym.plot_breakdown`, re-exported here), memory against one
unknown (d, t, p, b, s, ...) with the solved value and the floor no amount of the unknown
removes, and the feasibility map of a layout search.  Each function returns a :class:`matplotlib.figure.Figure`; :func:`save` writes
it as PNG, PDF or SVG by the file's extension.  Memory axes are in GB (1e9 bytes).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import sympy as sp

from .analysis import largest, smallest
from .errors import InvalidValueError, NoFitError, UnknownNameError
from .plot_base import (CAPACITY_COLOR, DIVERGING_CMAP, FITS_COLOR, FORMATS, GB, MAX_TEXT,
                        NOFIT_COLOR, OKABE_ITO, SEQUENTIAL_CMAP, figure, legend_outside,
                        plot_text, save)
from .plot_breakdown import breakdown, breakdown_bars, phase_breakdown, stage_breakdown
from .plot_time import phase_timeline, step_time_bars
from .symbols import lookup, registry
from .values import as_values, exact

__all__ = ["breakdown", "memory_vs", "feasibility", "save", "FORMATS", "plot_text", "MAX_TEXT",
           "breakdown_bars", "feasibility_map", "stage_breakdown", "phase_breakdown",
           "step_time_bars", "phase_timeline", "binding_code"]

_MAX_POINTS = 4096   # points on a memory-vs curve (every size from a user is bounded)
_RED = OKABE_ITO["vermillion"]   # the solved value and "nothing fits" (Okabe-Ito, plot_base)


# ---------------------------------------------------------------------------------------------
# memory against one unknown
# ---------------------------------------------------------------------------------------------
#: Default candidates per unknown: powers of two for the parallel sizes and lengths.
_POW2 = {"t": 64, "p": 64, "c": 64, "e": 256, "v": 16, "s": 1 << 20, "t_e": 64}


def _axis_label(name: str) -> str:
    meta = registry().get(name)
    if meta is None:
        return name
    unit = "" if meta.unit == "1" else f" [{meta.unit}]"
    return f"{meta.meaning} {name}{unit}"


def _candidates(name: str, solved) -> list[int]:
    if name in _POW2:
        out, n = [], 1
        while n <= _POW2[name]:
            out.append(n)
            n *= 2
        if name == "s":
            out = [x for x in out if x >= 256]
        return out
    top = max(16, 2 * int(solved)) if solved else 32
    return list(range(1, min(top, _MAX_POINTS) + 1))


def memory_vs(total, unknown: str, values: Mapping | None = None, capacity=None, *,
              candidates: Sequence[int] | None = None, solution=None,
              evaluate: Callable[[int], float] | None = None, title: str | None = None,
              ax=None):
    r"""Memory per GPU against one unknown (d, t, p, c, b, s, ...) [GB]: the curve, the
    capacity line, the solved value marked and labelled, and the floor.

    The floor is the memory no amount of the unknown removes: the limit as it grows for a
    total that falls with it (d, t, p), or the part that does not grow with it (b, s).
    When the floor reaches the capacity, "nothing fits" is written on the plot.

    .. math:: M_{\mathrm{floor}} = \lim_{x\to\infty} M(x) \quad\text{(or } M(0^+)\text{)}

    Parameters
    ----------
    total : Total or TrainingEstimate
        The symbolic total; an estimate brings its total and values.
    unknown : str
        A registered symbol name (``"d"``, ``"t"``, ``"b"``, ...).
    values : mapping, optional
        Every other symbol's value (default: the estimate's).
    capacity : number, optional
        GPU memory [bytes].
    candidates : sequence of int, optional
        The unknown's values to draw (default: 1 .. 2x the solution for d and b, powers of two
        for t, p, c, e, s).  At most 4096.
    solution : memsym.analysis.Solution, optional
        Default: :func:`memsym.analysis.smallest` (or ``largest`` for b and s) of the total.
    evaluate : callable, optional
        ``n -> bytes`` used instead of the symbolic total (for unknowns that change the
        stage's structure, such as p); a candidate that raises ``ValueError`` (a layout the
        rules refuse) is skipped and the plot says so.

    Examples
    --------
    >>> from memsym import model_state, byte_widths
    >>> M = model_state("zero3").subs(byte_widths("zero3"))
    >>> fig = memory_vs(M, "d", {"N": 70e9, "t": 1, "p": 1}, 80e9)
    >>> fig.axes[0].get_xlabel()
    'data-parallel size d [GPUs]'
    """
    # matplotlib first: without it the call fails before any work, as it always has
    from matplotlib.ticker import MaxNLocator

    x = lookup(unknown)
    if hasattr(total, "total") and hasattr(total, "values"):
        values = total.values if values is None else values
        total = total.total
    vals = as_values({k: v for k, v in dict(values or {}).items()
                      if getattr(k, "name", k) != x.name})
    grows = x.name in ("b", "s", "N", "L", "h", "m")
    cap = None if capacity is None else exact(capacity, "capacity")
    fixed = total.expr.xreplace(vals) if total is not None else None
    if fixed is not None and fixed.free_symbols - {x}:
        missing = ", ".join(sorted(s_.name for s_ in fixed.free_symbols - {x}))
        raise InvalidValueError(f"memory_vs needs values for: {missing}")
    floor = _floor(fixed, x, grows)
    nothing = False
    centre = None          # a symbolic answer, to place the default candidates around
    if solution is None and cap is not None and fixed is not None:
        centre, nothing = _solved(total, x, cap, vals, grows)
        if evaluate is None:
            solution = centre
    elif solution is not None:
        centre = solution
    xs, ys, skipped = _curve(_drawn_candidates(x, candidates, centre), evaluate, fixed, x)
    none_drawn = False
    if evaluate is not None and cap is not None and solution is None:
        # the marked value is the best drawn candidate that fits when re-estimated
        fit = [n for n, y in zip(xs, ys) if y * GB <= float(cap)]
        if fit:
            best = max(fit) if grows else min(fit)
            solution = type("Found", (), {"value": best, "memory": ys[xs.index(best)] * GB})()
            nothing = False
        elif not nothing:
            none_drawn = True
    fig, ax = figure(ax)
    ax.plot(xs, ys, marker="o", markersize=3.5, color=OKABE_ITO["blue"], label="memory per GPU")
    if _capacity_and_floor(ax, x, cap, floor, grows):
        nothing = True
    if solution is not None and not nothing:
        _mark_solution(ax, x, solution, grows, xs)
    if nothing:
        _say_nothing_fits(ax, floor, cap)
    if none_drawn:
        ax.text(0.5, 0.97, f"none of the drawn {x.name} fits: try larger values",
                transform=ax.transAxes, ha="center", va="top", color=_RED)
    _x_axis(ax, x, xs, skipped, MaxNLocator)
    ax.set_ylabel("memory per GPU [GB = 1e9 bytes]")
    ax.set_ylim(bottom=0)
    ax.set_title(plot_text(title) if title else f"Memory per GPU against {x.name}")
    legend_outside(ax)
    return fig


def _floor(fixed, x, grows):
    """The memory no amount of ``x`` removes (None where there is no finite limit)."""
    floor = None
    if fixed is not None:
        try:
            floor = sp.limit(fixed, x, 0, "+") if grows else sp.limit(fixed, x, sp.oo)
        except (NotImplementedError, ValueError, TypeError):  # pragma: no cover - sympy gaps
            floor = None
        if floor is not None and not floor.is_finite:
            floor = None
    return floor


def _solved(total, x, cap, vals, grows) -> tuple:
    """``(solution, nothing)``: the smallest (largest for what grows) ``x`` that fits, or
    None; ``nothing`` where no value fits."""
    centre, nothing = None, False
    try:
        centre = (largest if grows else smallest)(total, x, cap, vals)
    except NoFitError:
        nothing = True
    except (InvalidValueError, NotImplementedError):  # e.g. Min(m, p): no closed search
        centre = None
    return centre, nothing


def _drawn_candidates(x, candidates, centre) -> list:
    """The values of ``x`` to draw: the given ones, or the defaults around the solution."""
    cands = list(candidates) if candidates is not None else \
        _candidates(x.name, centre.value if centre is not None else None)
    if len(cands) > _MAX_POINTS or not cands:
        raise InvalidValueError(f"candidates: 1 to {_MAX_POINTS} values, got {len(cands)}")
    if centre is not None and centre.value not in cands and candidates is None \
            and x.name not in _POW2:
        cands = sorted(set(cands) | {int(centre.value)})
    return cands


def _curve(cands, evaluate, fixed, x) -> tuple:
    """``(xs, ys, skipped)``: the candidates drawn, their memory [GB], those the rules refuse."""
    xs, ys, skipped = [], [], []
    for n in cands:
        try:
            val = evaluate(int(n)) if evaluate is not None else fixed.xreplace({x: sp.Integer(n)})
        except ValueError:
            skipped.append(int(n))
            continue
        xs.append(int(n))
        ys.append(float(val) / GB)
    return xs, ys, skipped


def _capacity_and_floor(ax, x, cap, floor, grows) -> bool:
    """The capacity and floor lines; whether the floor leaves nothing that fits."""
    nothing = False
    if cap is not None:
        capf = float(cap) / GB
        ax.axhline(capf, color=CAPACITY_COLOR, linestyle="--", label=f"capacity C = {capf:.4g} GB")
    if floor is not None:
        fl = float(floor) / GB
        what = f"floor: memory no {x.name} removes" if not grows else \
            f"floor: memory that does not grow with {x.name}"
        ax.axhline(fl, color=OKABE_ITO["bluish green"], linestyle=":", label=f"{what} ({fl:.4g} GB)")
        if cap is not None and not grows and floor >= cap:
            nothing = True
    return nothing


def _mark_solution(ax, x, solution, grows, xs) -> None:
    """The solved value: a vertical line, the point and its label."""
    word = "largest" if grows else "smallest"
    val = int(solution.value)
    mem = float(solution.memory) / GB
    ax.axvline(val, color=_RED, linestyle="-.", linewidth=1)
    ax.plot([val], [mem], "o", color=_RED, markersize=7,
            label=f"{word} {x.name} that fits = {val}")
    # below the point, on the side away from the curve (it rises towards smaller x when
    # memory falls with x, towards larger x when it grows) and from the capacity line
    # just above; to the right when the point is the first drawn
    left = not grows and xs and val > min(xs)
    ax.annotate(f"{x.name} = {val}\n{mem:.1f} GB", (val, mem), xytext=(-8 if left else 8, -8),
                textcoords="offset points", color=_RED, fontsize="small",
                ha="right" if left else "left", va="top")


def _say_nothing_fits(ax, floor, cap) -> None:
    """"nothing fits" on the plot, below the floor where there is one."""
    msg = "nothing fits"
    ypos, coords = 0.5, ax.transAxes
    if floor is not None and cap is not None:
        word = "reaches" if floor == cap else "is above"
        msg += (f": the floor {float(floor) / GB:.4g} GB\n{word} the "
                f"{float(cap) / GB:.4g} GB capacity")
        # below the floor no curve point lies: the message there covers no data
        ypos, coords = float(floor) / GB / 2, ax.get_yaxis_transform()
    ax.text(0.5, ypos, msg, transform=coords, ha="center", va="center",
            fontsize="large", color=_RED,
            bbox=dict(boxstyle="round", facecolor="white", edgecolor=_RED))


def _x_axis(ax, x, xs, skipped, MaxNLocator) -> None:
    """The unknown's axis: powers of two on a log scale, integers (``MaxNLocator``, matplotlib's),
    and what was not drawn."""
    skipped_note = ""
    if skipped:   # under the x label, where it covers no data
        skipped_note = (f"\n(not drawn, refused by the layout rules: {x.name} = "
                        + ", ".join(map(str, skipped[:8])) + (" ..." if len(skipped) > 8 else "") + ")")
    meta = registry().get(x.name)
    if x.name in _POW2 and len(xs) > 1:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(v) for v in xs])
        ax.minorticks_off()
    elif meta is not None and meta.integer:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(_axis_label(x.name) + skipped_note)


# ---------------------------------------------------------------------------------------------
# feasibility of a layout search
# ---------------------------------------------------------------------------------------------
#: Short labels of the binding terms on the feasibility map (others: the initials of their
#: words, ``expert_optimizer`` -> ``EO``); the legend spells out each one drawn.
_BINDING_CODES = {"weights": "W", "gradients": "G", "optimizer": "O", "activations": "A",
                  "transients": "T", "workspace": "WS", "nccl": "N", "fragmentation": "F"}


def binding_code(term: str) -> str:
    """The short label of a binding term on the feasibility map.

    Examples
    --------
    >>> binding_code("optimizer"), binding_code("expert_main_gradients")
    ('O', 'EMG')
    """
    term = str(term)
    return _BINDING_CODES.get(term) or "".join(w[:1] for w in term.split("_")).upper() or "?"


def _cells(result, xk, yk, value):
    """``(xs, ys, grid, binding)``: the knobs' values, each cell's value (NaN blank), and
    (i, j) -> the binding term (the largest) of the cell's shown layout: the fastest that fits
    on a step-time map, else the one with the most headroom."""
    col = result.columns
    xs = sorted({int(v) for v in col[xk]}) if len(result) else [1]
    ys = sorted({int(v) for v in col[yk]}) if len(result) else [1]
    grid = np.full((len(ys), len(xs)), np.nan)
    binding = {}
    for i, yy in enumerate(ys):
        for j, xx in enumerate(xs):
            sel = (col[yk] == yy) & (col[xk] == xx)
            if not sel.any():
                continue                     # blank: no layout with these two passes the rules
            fits = sel & col["fits"]
            rows = np.flatnonzero(sel)
            shown = rows[int(np.argmax(col["headroom"][rows]))]
            if value == "fits":
                grid[i, j] = 1.0 if fits.any() else 0.0
            elif value == "step_time":
                st = col["step_time"][fits]
                ok = fits.any() and np.isfinite(st).any()
                grid[i, j] = np.nanmin(st) if ok else -1.0
                if ok:
                    fast = np.flatnonzero(fits)
                    shown = fast[int(np.nanargmin(col["step_time"][fast]))]
            else:
                grid[i, j] = np.max(col["headroom"][sel]) / GB
            binding[i, j] = str(col["binding"][shown])
    return xs, ys, grid, binding


def feasibility(result, x: str = "p", y: str = "t", *, value: str | None = None,
                title: str | None = None, ax=None):
    """Map of a layout search over two knobs: whether any layout with those two values fits,
    or the best step time among those that do; the best layout marked, blank cells explained,
    and each cell labelled (:func:`binding_code`, explained in the legend) with the term that
    binds, the largest, in its shown layout (the fastest that fits on a step-time map, else
    the one with the most headroom).

    Parameters
    ----------
    result : memsym.search.SearchResult
        From :func:`memsym.search.search`.
    x, y : str
        Knobs (``t p c d e v b``).
    value : {"fits", "step_time", "headroom"}, optional
        What a cell shows; default step time when the search has a global batch, else fits.

    Examples
    --------
    >>> from memsym.search import search
    >>> res = search("llama2-7b", "a100-80gb", 8, seq_length=2048, recompute=["full"],
    ...              sharding=["zero3"])
    >>> fig = feasibility(res)
    >>> fig.axes[0].get_xlabel()
    'pipeline-parallel size (number of stages) p [GPUs]'
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    knobs = ("t", "p", "c", "d", "e", "v", "b")
    for k in (x, y):
        if k not in knobs:
            raise UnknownNameError("knob", k, knobs)
    if x == y:
        raise InvalidValueError(f"x and y must be two different knobs, got {x!r} twice")
    if value is None:
        value = "step_time" if result.space.global_batch_size is not None else "fits"
    if value not in ("fits", "step_time", "headroom"):
        raise InvalidValueError(f"value must be fits, step_time or headroom, got {value!r}")
    xs, ys, grid, binding = _cells(result, x, y, value)
    best = result.best() if len(result) and result.columns["fits"].any() else None
    best_cell = None if best is None else (ys.index(best[y]), xs.index(best[x]))
    fig, ax = figure(ax, size=(8, 4.6))
    if value == "fits":
        cmap = ListedColormap([NOFIT_COLOR, FITS_COLOR])
        ax.imshow(grid, cmap=cmap, vmin=0, vmax=1, origin="lower", aspect="auto")
        handles = [Patch(color=FITS_COLOR, label="a layout fits"),
                   Patch(color=NOFIT_COLOR, label="valid, none fits")]
    elif value == "step_time":
        handles = _step_time_cells(fig, ax, grid, best_cell)
    else:
        handles = _headroom_cells(fig, ax, grid, best_cell)
    handles.append(Patch(facecolor="white", edgecolor="0.6", label="blank: no layout passes the rules"))
    _binding_labels(ax, binding, handles)
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(_axis_label(x))
    ax.set_ylabel(_axis_label(y))
    gpu = result.space.gpu.name
    ax.set_title(plot_text(title or f"{result.space.arch.name} on {result.gpus} x {gpu}: "
                           + {"fits": "does a layout fit?", "step_time": "best step time",
                              "headroom": "best headroom"}[value]))
    if best is not None:
        i, j = best_cell
        # at the centre of its cell (image cell (i, j) spans j +- 1/2, i +- 1/2)
        ax.plot([j], [i], marker="*", markersize=14, color=OKABE_ITO["yellow"],
                markeredgecolor="black", linestyle="none",
                label=f"best: t={best['t']} p={best['p']} c={best['c']} d={best['d']} b={best['b']}")
        handles.append(ax.get_lines()[-1])
    else:
        ax.text(0.5, 0.5, "nothing fits", transform=ax.transAxes, ha="center", va="center",
                fontsize="large", color=_RED,
                bbox=dict(boxstyle="round", facecolor="white", edgecolor=_RED))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=2,
              fontsize="small", title=_blank_note(result, xs, ys, grid, x, y)
              + ("\nletters: the term that binds (the largest) in the cell's "
                 + ("fastest layout that fits" if value == "step_time" else
                    "layout with the most headroom") if binding else ""),
              title_fontsize="x-small", frameon=False)
    return fig


def _step_time_cells(fig, ax, grid, best_cell) -> list:
    """The step-time map: each fitting cell's best time [s], the others marked; the legend's
    handles."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    ys, xs = grid.shape
    shown = np.where(grid > 0, grid, np.nan)
    img = ax.imshow(shown, cmap=SEQUENTIAL_CMAP, origin="lower", aspect="auto")
    fig.colorbar(img, ax=ax, label="best step time [s]")
    nofit = np.where(grid == -1.0, 1.0, np.nan)
    ax.imshow(nofit, cmap=ListedColormap([NOFIT_COLOR]), origin="lower", aspect="auto")
    handles = [Patch(color=NOFIT_COLOR, label="valid, none fits")]
    finite = grid[grid > 0]
    mid = (finite.min() + finite.max()) / 2 if finite.size else 0
    for i in range(ys):
        for j in range(xs):
            if grid[i, j] > 0:   # dark text on the light (fast) end of viridis_r
                # the best cell's number under its star, which sits at the centre
                low = 0.32 if (i, j) == best_cell else 0.0
                ax.text(j, i - low, f"{grid[i, j]:.2f} s", ha="center", va="center",
                        fontsize="x-small", color="black" if grid[i, j] <= mid else "white")
    return handles


def _headroom_cells(fig, ax, grid, best_cell) -> list:
    """The headroom map: each cell's best headroom [GB]; the legend's handles (none)."""
    lim = np.nanmax(np.abs(grid)) if np.isfinite(grid).any() else 1.0
    img = ax.imshow(grid, cmap=DIVERGING_CMAP, vmin=-lim, vmax=lim, origin="lower", aspect="auto")
    fig.colorbar(img, ax=ax, label="best headroom [GB]")
    handles = []
    for (i, j), val in np.ndenumerate(grid):
        if np.isfinite(val):   # the number: a pale cell near 0 GB must not read as blank
            low = 0.32 if (i, j) == best_cell else 0.0
            ax.text(j, i - low, f"{val:.0f} GB", ha="center", va="center",
                    fontsize="x-small", color="white" if abs(val) > 0.6 * lim else "black")
    return handles


def _binding_labels(ax, binding, handles) -> None:
    """Each cell's binding-term code, and its meaning appended to the legend's ``handles``."""
    from matplotlib.patches import Patch

    for (i, j), term in binding.items():   # at the top of its cell: the centre holds the star
        ax.text(j, i + 0.3, binding_code(term), ha="center", va="center", fontsize="x-small",
                fontweight="bold",
                bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none",
                          alpha=0.8))
    for term in dict.fromkeys(sorted(binding.values(), key=binding_code)):
        handles.append(Patch(visible=False, label=f"{binding_code(term)} = {plot_text(term)}"))


def _blank_note(result, xs, ys, grid, x, y) -> str:
    """Why cells are blank: the pair cannot split the GPUs, or the rules refuse every layout."""
    split = {"t", "p", "c", "d"}
    cannot, refused = 0, 0
    for i, yy in enumerate(ys):
        for j, xx in enumerate(xs):
            if not np.isnan(grid[i, j]):
                continue
            if x in split and y in split and result.gpus % (xx * yy):
                cannot += 1
            else:
                refused += 1
    if not cannot and not refused:
        return "every cell holds at least one valid layout"
    bits = []
    if cannot:
        bits.append(f"{cannot} blank: {y}\u00b7{x} does not divide the {result.gpus} GPUs")
    if refused:
        rules = [f"{k} ({v})" for k, v in sorted(result.excluded.items(), key=lambda kv: -kv[1])
                 if v][:3]
        bits.append(f"{refused} blank: the framework rules refuse every layout with that pair"
                    + (" (most excluded by: " + ", ".join(rules) + ")" if rules else ""))
    return "; ".join(bits)


def feasibility_map(result, *, ax=None):
    """Heat map over (t, p) for one GPU count: the best headroom [GB] of any layout with that
    t and p (blank where no layout passes the rules; negative where none fits).

    Parameters
    ----------
    result : memsym.search.SearchResult

    Examples
    --------
    >>> from memsym.search import search
    >>> res = search("llama2-7b", "a100-80gb", 8, seq_length=2048, recompute=["full"],
    ...              sharding=["zero3"])
    >>> fig = feasibility_map(res)
    >>> fig.axes[0].get_xlabel()
    'pipeline-parallel size p'
    """
    col = result.columns
    ts = sorted({int(x) for x in col["t"]}) or [1]
    ps = sorted({int(x) for x in col["p"]}) or [1]
    grid = np.full((len(ts), len(ps)), np.nan)
    for i, tt in enumerate(ts):
        for j, pp in enumerate(ps):
            sel = (col["t"] == tt) & (col["p"] == pp)
            if sel.any():
                grid[i, j] = np.max(col["headroom"][sel]) / GB
    fig, ax = figure(ax)
    lim = np.nanmax(np.abs(grid)) if np.isfinite(grid).any() else 1.0
    img = ax.imshow(grid, cmap=DIVERGING_CMAP, vmin=-lim, vmax=lim, origin="lower", aspect="auto")
    ax.set_xticks(range(len(ps)), [str(x) for x in ps])
    ax.set_yticks(range(len(ts)), [str(x) for x in ts])
    ax.set_xlabel("pipeline-parallel size p")
    ax.set_ylabel("tensor-parallel size t")
    for i in range(len(ts)):
        for j in range(len(ps)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.0f}", ha="center", va="center", fontsize="small")
    fig.colorbar(img, ax=ax, label="best headroom [GB]")
    ax.set_title(plot_text(f"{result.space.arch.name} on {result.gpus} x {result.space.gpu.name}"))
    return fig
