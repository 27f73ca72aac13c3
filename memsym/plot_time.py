"""Charts of one job's step: where its time goes (a stacked bar of the step-time parts [s]) and
its memory over the step's phases on the most-loaded stage (one bar per phase [GB], against
the capacity and the capacity less a safety margin).

Re-exported by :mod:`memsym.plotting`; colours from :data:`memsym.plot_base.OKABE_ITO`.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .errors import InvalidValueError
from .plot_base import (CAPACITY_COLOR, GB, OKABE_ITO, figure, legend_outside, plot_text,
                        text_color)

__all__ = ["STEP_PARTS", "step_segments", "step_time_bars", "phase_timeline"]

#: The step-time parts drawn, bottom up: (key of ``step_time_parts_s``, legend label,
#: colour, hatch).  The communication parts are each group's exposed seconds (what overlap
#: leaves on the critical path, :attr:`memsym.timing.step.StepTime.communication`); ``other``
#: is the step less every named part (the embedding and output layer on the end stages and
#: what the exact schedule adds beyond the per-layer sums).
STEP_PARTS = (
    ("compute", "compute (GEMMs, attention)", "compute", OKABE_ITO["blue"], None),
    ("memory", "memory-bound kernels", "memory-bound", OKABE_ITO["sky blue"], None),
    ("tp", "exposed TP communication", "TP comm.", OKABE_ITO["orange"], None),
    ("cp", "exposed CP communication", "CP comm.", OKABE_ITO["orange"], ".."),
    ("ep", "exposed EP communication", "EP comm.", OKABE_ITO["orange"], "xx"),
    ("pp", "exposed PP communication", "PP comm.", OKABE_ITO["vermillion"], None),
    ("dp", "exposed DP communication", "DP comm.", OKABE_ITO["vermillion"], "//"),
    ("bubble", "pipeline bubble", "bubble", OKABE_ITO["yellow"], None),
    ("optimizer", "optimizer step", "optimizer", OKABE_ITO["bluish green"], None),
    ("other", "other (embedding, output layer, schedule)", "other", OKABE_ITO["reddish purple"],
     None),
)
#: A step whose named parts exceed it by more than this share is refused (the parts would not
#: be a breakdown of it); below it, float rounding.
_SLACK = 1e-9
#: Labels beside a bar are kept at least this share of the step apart.
_SPACING = 0.05


def step_segments(parts: Mapping[str, float], total: float) -> dict:
    """The drawn segments [s]: each named part of :data:`STEP_PARTS` that is not zero, and
    ``other`` = the step less their sum, so that the segments add up to the step.

    Parameters
    ----------
    parts : mapping
        ``step_time_parts_s`` of ``memsym estimate --gpu ... --json`` [s].
    total : float
        ``step_time_s`` [s].

    Raises
    ------
    InvalidValueError
        A negative part, or named parts larger than the step.

    Examples
    --------
    >>> step_segments({"pipeline": 0.75, "compute": 0.5, "dp": 0.125, "tp": 0.0}, 1.0)
    {'compute': 0.5, 'dp': 0.125, 'other': 0.375}
    """
    out = {}
    for key, *_ in STEP_PARTS[:-1]:
        val = float(parts.get(key, 0.0))
        if val < 0:
            raise InvalidValueError(f"step-time part {key!r} is negative ({val:g} s)")
        if val > 0:
            out[key] = val
    rest = float(total) - sum(out.values())
    if rest < -_SLACK * max(float(total), 1.0):
        raise InvalidValueError(f"the step-time parts add to {sum(out.values()):g} s, more than "
                                f"the step's {float(total):g} s")
    if rest > _SLACK * float(total):
        out["other"] = rest
    return out


def _beside(ax, x, labels, gap) -> float:
    """``(y centre, text)`` labels to the right of the bar at ``x``, spaced bottom up at
    least ``gap`` apart (none covers another); returns the highest label's height."""
    last = float("-inf")
    for yc, text in labels:
        last = max(yc, last + gap)
        ax.annotate(text, (x + 0.2, yc), xytext=(x + 0.3, last), textcoords="data",
                    va="center", fontsize="small",
                    arrowprops=dict(arrowstyle="-", color="0.5", linewidth=0.5))
    return last


def step_time_bars(parts: Mapping[str, float], total: float, *, title: str | None = None,
                   ax=None):
    """One stacked bar of the job's step time [s]: compute, memory-bound kernels, each
    group's exposed communication, the bubble, the optimizer step and the rest, each segment
    labelled with its seconds and share of the step, the step's total under the bar.

    Parameters
    ----------
    parts : mapping
        ``step_time_parts_s`` [s] (:func:`step_segments`).
    total : float
        ``step_time_s`` [s].
    title : str, optional

    Examples
    --------
    >>> fig = step_time_bars({"compute": 0.5, "dp": 0.125}, 1.0)
    >>> [float(p.get_height()) for p in fig.axes[0].patches]
    [0.5, 0.125, 0.375]
    """
    segs = step_segments(parts, total)
    fig, ax = figure(ax, size=(7.5, 5.0))
    total = float(total)
    y0, labels = 0.0, []
    for key, label, short, col, hatch in STEP_PARTS:
        if key not in segs:
            continue
        val = segs[key]
        ax.bar([0], [val], width=0.4, bottom=y0, color=col, hatch=hatch, edgecolor="white",
               label=label)
        pct = 100 * val / total       # a part under 0.05 % would print as "0.0 %"
        labels.append((y0 + val / 2, f"{short} {val:.3g} s, "
                       + (f"{pct:.1f} %" if pct >= 0.05 else "< 0.05 %")))
        y0 += val
    top = _beside(ax, 0, labels, _SPACING * total)
    ax.set_xlim(-0.5, 1.6)
    ax.set_ylim(0, max(total, top) * 1.06 or 1.0)     # the highest label inside the axes
    ax.set_xticks([0], [f"one training step: {total:.3g} s"])
    ax.set_ylabel("time per step [s]")
    ax.set_title(plot_text(title) if title else "Step time by part")
    legend_outside(ax)
    return fig


def phase_timeline(phases: Mapping[str, float], *, capacity=None, margin=None, peak=None,
                   title: str | None = None, ax=None):
    """Per-GPU memory in each phase of the step (forward, loss-backward, backward, optimizer)
    on one stage [GB]: one bar per phase in step order, each labelled with its GB, the peak
    phase marked (its colour and "(peak)" under it), the capacity line and, with a margin,
    the capacity less the margin.

    Parameters
    ----------
    phases : mapping
        Phase -> bytes in step order (``phases`` of ``memsym estimate --json`` without
        ``peak``; :data:`memsym.training.PHASES`).
    capacity : number, optional
        GPU memory [bytes].
    margin : number, optional
        Bytes a job must leave free (``--margin``); drawn at ``capacity - margin``.
    peak : str, optional
        The peak phase (default: the largest, the earliest on a tie).

    Examples
    --------
    >>> fig = phase_timeline({"forward": 60e9, "optimizer": 50e9}, capacity=80e9)
    >>> [float(p.get_height()) for p in fig.axes[0].patches]
    [60.0, 50.0]
    """
    if not phases:
        raise InvalidValueError("phase_timeline needs at least one phase")
    names = list(phases)
    vals = np.array([float(phases[k]) / GB for k in names])
    if peak is None:
        peak = names[int(np.argmax(vals))]
    if peak not in phases:
        raise InvalidValueError(f"peak phase {peak!r} is not one of {', '.join(names)}")
    cap = None if capacity is None else float(capacity) / GB
    fig, ax = figure(ax, size=(8.5, 4.6))
    xs = np.arange(len(names))
    cols = [OKABE_ITO["vermillion"] if k == peak else OKABE_ITO["blue"] for k in names]
    ax.bar(xs, vals, width=0.6, color=cols, edgecolor="white")
    ymax = max(cap or 0, float(vals.max())) * 1.12 or 1.0
    for x, v, col in zip(xs, vals, cols):
        # inside the bar, near its top: above it the label would run into the capacity lines;
        # a bar too short to hold it has it just above
        share = f"\n{100 * v / cap:.1f} %" if cap else ""
        inside = v >= 0.15 * ymax
        ax.text(x, v * 0.97 if inside else v + 0.01 * ymax, f"{v:.1f} GB{share}", ha="center",
                va="top" if inside else "bottom", fontsize="small",
                color=text_color(col) if inside else "black")
    from matplotlib.patches import Patch

    handles = [Patch(color=OKABE_ITO["blue"], label="phase total"),
               Patch(color=OKABE_ITO["vermillion"], label=f"peak phase ({plot_text(peak)})")]
    if cap is not None:
        handles.append(ax.axhline(cap, color=CAPACITY_COLOR, linestyle="--",
                                  label=f"capacity {cap:.4g} GB"))
    if margin and cap is not None:
        usable = cap - float(margin) / GB
        handles.append(ax.axhline(usable, color=CAPACITY_COLOR, linestyle=":",
                                  label=f"capacity - margin {usable:.4g} GB"))
    ax.set_xticks(xs, [plot_text(k) + ("\n(peak)" if k == peak else "") for k in names])
    ax.set_xlabel("phase of the training step (in order); bars: GB"
                  + (" and % of the capacity" if cap else ""))
    ax.set_ylim(0, ymax)
    ax.set_ylabel("memory per GPU [GB = 1e9 bytes]")
    ax.set_title(plot_text(title) if title else "Per-GPU memory over the step's phases")
    legend_outside(ax, handles=handles)
    return fig
