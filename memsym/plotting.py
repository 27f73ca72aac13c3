"""Plots of memory budgets and layout searches (matplotlib, imported only when a plot is made).

Each function returns a :class:`matplotlib.figure.Figure`; save it with ``fig.savefig("x.pdf")``
or ``.png``.  Memory axes are in GB (1e9 bytes), as the seeds print them.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["breakdown_bars", "memory_vs_d", "feasibility_map"]

_GB = 1e9


def _figure(ax=None):
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), layout="constrained")
    return fig, fig.add_subplot()


def breakdown_bars(breakdowns: Mapping[str, Mapping], *, capacity=None, title: str = "", ax=None):
    """Stacked bars, one per configuration, one segment per term [GB].

    Parameters
    ----------
    breakdowns : mapping
        Label -> ``{term: bytes}`` (``"total"`` is ignored), e.g. from
        :meth:`memsym.term.Total.breakdown` or ``search(...).top()[i]["bytes"]``.
    capacity : number, optional
        GPU memory [bytes], drawn as a horizontal line.

    Examples
    --------
    >>> fig = breakdown_bars({"zero1": {"weights": 14e9, "optimizer": 10.5e9}}, capacity=80e9)
    >>> [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    ['capacity', 'weights', 'optimizer']
    """
    import numpy as np

    fig, ax = _figure(ax)
    labels = list(breakdowns)
    keys = []
    for bd in breakdowns.values():
        for key in bd:
            if key != "total" and key not in keys:
                keys.append(key)
    bottom = np.zeros(len(labels))
    for key in keys:
        vals = np.array([float(breakdowns[lab].get(key, 0)) / _GB for lab in labels])
        ax.bar(labels, vals, bottom=bottom, label=key)
        bottom += vals
    if capacity is not None:
        ax.axhline(float(capacity) / _GB, color="black", linestyle="--", label="capacity")
    ax.set_ylabel("memory per GPU [GB]")
    if title:
        ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    return fig


def memory_vs_d(total, values: Mapping, capacity, *, d_max: int | None = None, solution=None,
                ax=None):
    """Memory per GPU against the data-parallel size d, the capacity line and the solved
    smallest d marked.

    Parameters
    ----------
    total : memsym.term.Total
        A total depending on ``d``.
    values : mapping
        Every other symbol's value.
    capacity : number
        [bytes].
    solution : memsym.analysis.Solution, optional
        Default: :func:`memsym.analysis.smallest` of ``total`` in d.

    Examples
    --------
    >>> from memsym import model_state, byte_widths
    >>> M = model_state("zero3", convention="seed000").subs(byte_widths("zero3", convention="seed000"))
    >>> fig = memory_vs_d(M, {"N": 70e9, "t": 1, "p": 1}, 80e9)
    >>> fig.axes[0].get_xlabel()
    'data-parallel size d'
    """
    import numpy as np

    from .analysis import smallest
    from .errors import NoFitError

    vals = {str(getattr(k, "name", k)): v for k, v in dict(values).items() if str(getattr(k, "name", k)) != "d"}
    if solution is None:
        try:
            solution = smallest(total, "d", capacity, vals)
        except NoFitError:
            solution = None
    top = d_max or max(8, 2 * (solution.value if solution else 8))
    ds = np.arange(1, top + 1, dtype=float)
    comp = total.compile()
    kw = {k: float(v) for k, v in vals.items()}
    kw["d"] = ds
    mem = np.broadcast_to(comp(**kw), ds.shape) / _GB
    fig, ax = _figure(ax)
    ax.plot(ds, mem, marker="o", markersize=3, label="memory per GPU")
    ax.axhline(float(capacity) / _GB, color="black", linestyle="--", label="capacity")
    if solution is not None:
        ax.axvline(solution.value, color="tab:red", linestyle=":",
                   label=f"smallest d = {solution.value}")
        ax.plot([solution.value], [float(solution.memory) / _GB], "o", color="tab:red")
    ax.set_xlabel("data-parallel size d")
    ax.set_ylabel("memory per GPU [GB]")
    ax.legend(loc="best", fontsize="small")
    return fig


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
    import numpy as np

    col = result.columns
    ts = sorted({int(x) for x in col["t"]}) or [1]
    ps = sorted({int(x) for x in col["p"]}) or [1]
    grid = np.full((len(ts), len(ps)), np.nan)
    for i, tt in enumerate(ts):
        for j, pp in enumerate(ps):
            sel = (col["t"] == tt) & (col["p"] == pp)
            if sel.any():
                grid[i, j] = np.max(col["headroom"][sel]) / _GB
    fig, ax = _figure(ax)
    lim = np.nanmax(np.abs(grid)) if np.isfinite(grid).any() else 1.0
    img = ax.imshow(grid, cmap="RdYlGn", vmin=-lim, vmax=lim, origin="lower", aspect="auto")
    ax.set_xticks(range(len(ps)), [str(x) for x in ps])
    ax.set_yticks(range(len(ts)), [str(x) for x in ts])
    ax.set_xlabel("pipeline-parallel size p")
    ax.set_ylabel("tensor-parallel size t")
    for i in range(len(ts)):
        for j in range(len(ps)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.0f}", ha="center", va="center", fontsize="small")
    fig.colorbar(img, ax=ax, label="best headroom [GB]")
    ax.set_title(f"{result.space.arch.name} on {result.gpus} x {result.space.gpu.name}")
    return fig
