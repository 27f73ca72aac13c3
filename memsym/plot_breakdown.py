"""Breakdown charts: a job's per-GPU memory as stacked bars, by term group, by term, or by
term on each pipeline stage or in each phase of the step, with every segment labelled (GB and
share), the capacity line and the capacity less a safety margin.

Re-exported by :mod:`memsym.plotting`; memory axes in GB (1e9 bytes).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .errors import InvalidValueError
from .plot_base import (CAPACITY_COLOR, GB, OKABE_ITO, PALETTE, color, figure, legend_outside,
                        plot_text)
from .groups import TRANSIENT_KEYS
from .training import ACTIVATION_KEYS, ALLOWANCE_KEYS, STATE_KEYS

__all__ = ["breakdown", "breakdown_bars", "stage_breakdown", "phase_breakdown"]

#: Term keys by group, as :meth:`memsym.training.TrainingEstimate.grouped` reports them.
_GROUPS = (("model states", STATE_KEYS), ("activations", ("activations",) + ACTIVATION_KEYS),
           ("peak-phase transients", ("transients",) + TRANSIENT_KEYS),
           ("allowances", ALLOWANCE_KEYS))
#: Okabe-Ito colours (:data:`memsym.plot_base.OKABE_ITO`), one per group.
_COLORS = {"model states": OKABE_ITO["blue"], "activations": OKABE_ITO["orange"],
           "peak-phase transients": OKABE_ITO["sky blue"],
           "allowances": OKABE_ITO["reddish purple"], "other": OKABE_ITO["yellow"]}


def _grouped_bytes(item) -> dict:
    """Group name -> bytes for an estimate or a ``{term: bytes}`` mapping."""
    if hasattr(item, "held"):       # an estimate: its rows as the peak phase holds them
        bd = item.held()
    elif hasattr(item, "breakdown") and hasattr(item, "total"):
        bd = item.breakdown()
    else:
        bd = dict(item)
    out = {}
    seen = set()
    for group, keys in _GROUPS:
        vals = [float(bd[k]) for k in keys if k in bd]
        seen.update(k for k in keys if k in bd)
        if vals:
            out[group] = sum(vals)
    rest = [float(v) for k, v in bd.items() if k not in seen and k != "total"]
    if rest:
        out["other"] = sum(rest)
    return out


def breakdown(items, *, capacity=None, title: str | None = None, ax=None):
    """Stacked bars of per-GPU memory by term group (model states, activations,
    allowances) [GB], one bar per job, with the capacity line.

    Parameters
    ----------
    items : TrainingEstimate, mapping
        One estimate (:func:`memsym.training.training_memory`), or label -> estimate or
        ``{term: bytes}`` (e.g. :meth:`memsym.term.Total.breakdown`).
    capacity : number, optional
        GPU memory [bytes], drawn and labelled.
    title : str, optional

    Examples
    --------
    >>> from memsym.training import Layout, Training, training_memory
    >>> est = training_memory("llama2-7b", Layout(d=8), Training(seq_length=4096))
    >>> fig = breakdown({"llama2-7b d=8": est}, capacity=80e9)
    >>> [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    ['capacity 80 GB', 'model states', 'activations', 'peak-phase transients', 'allowances']
    """
    if hasattr(items, "breakdown") and hasattr(items, "total"):
        items = {"most-loaded GPU": items}
    labels = [plot_text(x) for x in items]
    if len(set(labels)) != len(labels):

        raise InvalidValueError("breakdown labels must differ (after escaping for the plot)")
    data = [_grouped_bytes(v) for v in items.values()]
    groups = [g for g, _ in _GROUPS if any(g in d for d in data)]
    if any("other" in d for d in data):
        groups.append("other")
    fig, ax = figure(ax)
    bottom = np.zeros(len(labels))
    held_less = np.zeros(len(labels))    # a group below zero (the transients), drawn last
    for g in groups:
        vals = np.array([d.get(g, 0.0) / GB for d in data])
        below = np.minimum(vals, 0)
        held_less -= below
        vals = np.maximum(vals, 0)
        if not below.any() or vals.any():
            ax.bar(labels, vals, bottom=bottom, label=g, color=_COLORS[g], edgecolor="white")
        bottom += vals
    if held_less.any():
        # what the peak phase does not hold (e.g. the first iteration's Adam moments) is
        # struck through at the top of the stack: the bar's total is where it begins
        ax.bar(labels, held_less, bottom=bottom - held_less, fill=False, hatch="//",
               edgecolor=CAPACITY_COLOR, label="not held at the peak phase")
    for i, top in enumerate(bottom - held_less):
        ax.annotate(f"{top:.1f} GB", (i, bottom[i]), xytext=(0, 3), textcoords="offset points",
                    ha="center", va="bottom", fontsize="small")
    if capacity is not None:
        cap = float(capacity) / GB
        ax.axhline(cap, color=CAPACITY_COLOR, linestyle="--", label=f"capacity {cap:.4g} GB")
        ax.set_ylim(0, max(cap, float(bottom.max(initial=0))) * 1.15)
    ax.set_ylabel("memory per GPU [GB = 1e9 bytes]")
    ax.set_xlabel("job")
    ax.set_title(plot_text(title) if title else "Per-GPU memory by term group (most-loaded GPU)")
    legend_outside(ax)
    return fig


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
    fig, ax = figure(ax)
    labels = list(breakdowns)
    shown = [plot_text(lab) for lab in labels]
    keys = []
    for bd in breakdowns.values():
        for key in bd:
            if key != "total" and key not in keys:
                keys.append(key)
    bottom = np.zeros(len(labels))
    for n, key in enumerate(keys):
        vals = np.array([float(breakdowns[lab].get(key, 0)) / GB for lab in labels])
        ax.bar(shown, vals, bottom=bottom, label=plot_text(key), color=color(n),
               edgecolor="white", hatch=_hatch(n))
        bottom += vals
    if capacity is not None:
        ax.axhline(float(capacity) / GB, color=CAPACITY_COLOR, linestyle="--", label="capacity")
    ax.set_ylabel("memory per GPU [GB]")
    if title:
        ax.set_title(plot_text(title))
    legend_outside(ax)
    return fig


#: Okabe-Ito colours (:data:`memsym.plot_base.OKABE_ITO`) of the terms memsym reports
#: (:meth:`memsym.training.TrainingEstimate.grouped`): the model states blue, sky blue and
#: bluish green, the activations orange, the allowances reddish purple, yellow, vermillion;
#: further terms cycle the palette hatched, so that no two segments look alike.
_TERM_COLORS = {"weights": OKABE_ITO["blue"], "gradients": OKABE_ITO["sky blue"],
                "optimizer": OKABE_ITO["bluish green"], "activations": OKABE_ITO["orange"],
                "workspace": OKABE_ITO["reddish purple"], "nccl": OKABE_ITO["yellow"],
                "fragmentation": OKABE_ITO["vermillion"]}


#: Colour and hatch per term; the netted transients of a phase hatched in the activations'
#: colour (they are activation-like buffers: logits, the loss's).
_TERM_STYLES = {**{k: (v, None) for k, v in _TERM_COLORS.items()},
                "transients": (OKABE_ITO["orange"], "xx")}


def _hatch(n: int):
    """No hatch for the palette's first round of colours; hatched beyond it."""
    return None if n < len(PALETTE) else "//"
#: A segment shorter than this share of the y axis (two lines of x-small text on a 5.4 inch
#: figure) gets its label beside the bar, not inside; labels beside a bar are kept at least
#: _SPACING apart, so that none covers another.
_INSIDE = 0.065
_SPACING = 0.045
#: The distance between two bars' centres [bar-axis units; a bar is 0.45 wide].
_PITCH = 1.5


def stage_breakdown(stages: Mapping[str, Mapping], *, capacity=None, margin=None,
                    title: str | None = None, ax=None):
    """Stacked bars, one per pipeline stage, one segment per term [GB]: each segment labelled
    with its term, GB and share of the capacity (of the bar's total without one), each bar's
    total above it, the capacity line and, with a margin, the capacity less the margin.

    A segment too short for its label inside has it beside the bar, joined by a thin line;
    those labels are spaced so that none covers another.

    Parameters
    ----------
    stages : mapping
        Bar label (``"stage 0 (first)"``) -> ``{term: bytes}`` (``"total"`` is ignored), e.g.
        the ``bytes`` of ``memsym estimate --json`` for each stage.
    capacity : number, optional
        GPU memory [bytes], drawn and labelled; the shares are of it.
    margin : number, optional
        Bytes a job must leave free (``--margin``); drawn at ``capacity - margin``.
    title : str, optional

    Examples
    --------
    >>> fig = stage_breakdown({"stage 0": {"weights": 14e9, "nccl": 0.5e9}}, capacity=80e9)
    >>> sorted(t.get_text() for t in fig.axes[0].texts)
    ['14.5 GB', 'nccl 0.5 GB, 0.6 %', 'weights\\n14.0 GB, 17.5 %']
    """
    return _stacked(stages, capacity, margin, "stage",
                    plot_text(title) if title else "Per-GPU memory by term and pipeline stage",
                    "pipeline stage", ax)


def phase_breakdown(phases: Mapping[str, Mapping], *, capacity=None, margin=None,
                    peak: str | None = None, title: str | None = None, ax=None):
    """Stacked bars, one per phase of the training step (forward, loss-backward, backward,
    optimizer step) on one pipeline stage, one segment per term [GB]: each segment labelled
    with its term, GB and share of the capacity, each bar's total above it, the peak phase
    named under its bar, the capacity line and, with a margin, the capacity less the margin.

    Parameters
    ----------
    phases : mapping
        Phase -> ``{term: bytes}`` in step order (``"total"`` is ignored; every value >= 0),
        e.g. :func:`memsym.cli.plot.phase_segments`.
    capacity : number, optional
        GPU memory [bytes], drawn and labelled; the shares are of it.
    margin : number, optional
        Bytes a job must leave free (``--margin``); drawn at ``capacity - margin``.
    peak : str, optional
        The peak phase (default: the bar with the largest total, the earliest on a tie).
    title : str, optional

    Examples
    --------
    >>> fig = phase_breakdown({"forward": {"weights": 14e9, "activations": 30e9},
    ...                        "optimizer": {"weights": 14e9, "optimizer": 8e9}}, capacity=80e9)
    >>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
    ['forward\\n(peak)', 'optimizer']
    """
    if not phases:
        raise InvalidValueError("phase_breakdown needs at least one phase")
    tops = {k: sum(float(v) for key, v in bd.items() if key != "total")
            for k, bd in phases.items()}
    if peak is None:
        peak = max(tops, key=lambda k: tops[k])   # max keeps the first of equals
    if peak not in phases:
        raise InvalidValueError(f"peak phase {peak!r} is not one of {', '.join(phases)}")
    return _stacked(phases, capacity, margin, "phase",
                    plot_text(title) if title else "Per-GPU memory by term and phase of the step",
                    "phase of the training step (in order)", ax, peak=peak)


def _stacked(bars: Mapping[str, Mapping], capacity, margin, what: str, title: str,
             xlabel: str, ax, peak=None):
    """The stacked, labelled bars of :func:`stage_breakdown` and :func:`phase_breakdown`."""
    labels = [plot_text(x) for x in bars]
    if len(set(labels)) != len(labels):
        raise InvalidValueError(f"{what} labels must differ (after escaping for the plot)")
    for name, bd in bars.items():
        bad = [k for k, v in bd.items() if k != "total" and float(v) < 0]
        if bad:    # a stacked bar cannot draw a negative segment: the caller nets it first
            raise InvalidValueError(f"{what} {str(name)[:40]!r}: term {str(bad[0])[:40]!r} is "
                                    "negative; a stacked bar needs every term >= 0")
    keys = list(dict.fromkeys(k for bd in bars.values() for k, v in bd.items()
                              if k != "total" and float(v) > 0))
    fig, ax = figure(ax, size=(max(6.5, 2.6 * len(labels) + 3.5), 5.4))
    data = [[float(bd.get(k, 0)) / GB for k in keys] for bd in bars.values()]
    tops = np.array([sum(row) for row in data])
    cap = None if capacity is None else float(capacity) / GB
    ymax = max(cap or 0, float(tops.max(initial=0))) * 1.15 or 1.0
    # bars _PITCH apart: the labels beside one bar end before the next bar's labels begin
    xs = np.arange(len(labels)) * _PITCH
    bottom = np.zeros(len(labels))
    colors, extra = {}, 0
    for key in keys:        # terms without a colour of their own: the palette again, hatched
        colors[key] = _TERM_STYLES.get(key) or (color(extra), "//")
        extra += key not in _TERM_STYLES
    for n, key in enumerate(keys):
        vals = np.array([row[n] for row in data])
        ax.bar(xs, vals, width=0.45, bottom=bottom, label=plot_text(key), edgecolor="white",
               color=colors[key][0], hatch=colors[key][1])
        bottom += vals
    for i, row in zip(xs, data):
        base = cap if cap else tops[int(round(i / _PITCH))]
        beside, y0 = [], 0.0
        for key, gb in zip(keys, row):
            text = plot_text(f"{key} {gb:.1f} GB, {100 * gb / base:.1f} %") if gb > 0 else None
            if text and gb >= _INSIDE * ymax:
                # on two lines (term; GB and share): narrower than the gap between two bars,
                # so that it covers none of the labels beside the bar
                text = text.replace(" ", "\n", 1)
                # on a pale box: a label wider than its bar stays whole and legible
                ax.text(i, y0 + gb / 2, text, ha="center", va="center", fontsize="x-small",
                        bbox=dict(boxstyle="round,pad=0.15", facecolor="white",
                                  edgecolor="none", alpha=0.75))
            elif text:
                beside.append((y0 + gb / 2, text))
            y0 += gb
        last = -np.inf
        for yc, text in beside:       # bottom up: each at least _SPACING above the last
            last = max(yc, last + _SPACING * ymax)
            ax.annotate(text, (i + 0.225, yc), xytext=(i + 0.3, last), textcoords="data",
                        va="center", fontsize="x-small",
                        arrowprops=dict(arrowstyle="-", color="0.5", linewidth=0.5))
        top = tops[int(round(i / _PITCH))]
        # on white: legible where the capacity line passes just above the bar
        ax.annotate(f"{top:.1f} GB", (i, top), xytext=(0, 3), textcoords="offset points",
                    ha="center", va="bottom", fontsize="small", fontweight="bold",
                    bbox=dict(boxstyle="square,pad=0.1", facecolor="white", edgecolor="none"))
    if cap is not None:
        ax.axhline(cap, color=CAPACITY_COLOR, linestyle="--", label=f"capacity {cap:.4g} GB")
        if margin:
            usable = cap - float(margin) / GB
            ax.axhline(usable, color=CAPACITY_COLOR, linestyle=":",
                       label=f"capacity - margin {usable:.4g} GB")
    ax.set_xticks(xs, [lab + ("\n(peak)" if peak is not None and name == peak else "")
                       for lab, name in zip(labels, bars)])
    ax.set_xlim(-0.6, xs[-1] + 1.2)
    ax.set_ylim(0, ymax)
    ax.set_xlabel(xlabel + "; segments: GB and % of the " + ("capacity" if cap else "bar"))
    ax.set_ylabel("memory per GPU [GB = 1e9 bytes]")
    ax.set_title(title)
    legend_outside(ax)
    return fig
