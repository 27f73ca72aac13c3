"""The exact (SymPy) bytes of one chosen layout, term by term with their sources, from the same
templates the vectorized search compiled.
"""

from __future__ import annotations

from typing import Mapping
from dataclasses import replace as _replace

import sympy as sp

from ..training import (ALLOWANCE_KEYS as _ALLOW, Layout, OUTSIDE_ALLOCATOR_KEYS as _OUTSIDE,
                        STATE_KEYS as _STATE_KEYS, training_values)

from .choices import scheme_row
from .space import Space, KNOBS
from .grid import with_split
from .templates import check_stages, stage_count_items, choice_template, template_rep
from ..symbols import lookup, m as m_sym
from ..term import Total
from ..groups import BUFFER_KEYS, TRANSIENT_KEYS

#: The framework's buffers kept in every phase through PyTorch's allocator (the CUDA graphs');
#: FSDP2's pools are buffers too but are listed with those outside the allocator's reach.
_BUFFERS = tuple(key for key in BUFFER_KEYS if key not in _OUTSIDE)
#: The per-term columns of a search, in the groups ``memsym estimate --json`` reports
#: (:meth:`memsym.training.TrainingEstimate.grouped`): the model states, the activations, the
#: peak phase's transients, the allowances, the framework's buffers and those outside
#: PyTorch's allocator.
TERM_COLUMNS = _STATE_KEYS + ("activations", "transients") + _ALLOW + _BUFFERS + _OUTSIDE


def exact_row(space: Space, row: Mapping) -> dict:
    """Exact (SymPy) bytes of one layout on its most-loaded stage, grouped like ``estimate``."""
    vals, totals = row_totals(space, row)
    best = None
    for stage, tot in totals.items():
        val = tot.evaluate(vals)
        if best is None or val > best[1]:
            best = (stage, val, tot)
    stage, _, tot = best
    bd = tot.breakdown(vals)
    return {"stage": stage, "bytes": group_bytes(bd), "total": tot, "values": vals}


def group_bytes(bd: Mapping) -> dict:
    """Exact per-term bytes grouped as ``memsym estimate --json`` reports them: model-state
    keys, ``activations`` (every activation term), ``transients`` (the peak phase's, where
    not zero), the allowances, the framework's buffers and those outside PyTorch's allocator
    where the job has them, ``total``."""
    out = {k: bd[k] for k in _STATE_KEYS if k in bd}
    grouped = set(TERM_COLUMNS) | {"total"} | set(TRANSIENT_KEYS)
    out["activations"] = sp.Add(*(val for key, val in bd.items() if key not in grouped))
    for key in TRANSIENT_KEYS:
        if bd.get(key, 0) != 0:
            out["transients"] = bd[key]
    for key in _ALLOW + _BUFFERS + _OUTSIDE:
        if key in bd:
            out[key] = bd[key]
    out["total"] = bd["total"]
    return out


def row_totals(space: Space, row: Mapping):
    """(exact values, {stage: Total}) for one layout: the stages the search compares
    (:func:`check_stages`), each the template the vectorized search compiled, with the
    stage's exact parameter counts substituted (every Term keeps its own source)."""

    tt, pp, cc, dd, ee, vv, bb = (int(row[k]) for k in KNOBS[:7])
    te = int(row.get("t_e") or tt)
    space = with_split(space, row.get("first_stage_layers") or space.first_stage_layers or 0,
                 row.get("last_stage_layers") or space.last_stage_layers or 0)
    lay = Layout(t=tt, p=pp, d=dd, c=cc, e=ee, v=vv if vv > 1 else None,
                 t_e=te if space.arch.num_experts else None,
                 first_stage_layers=space.first_stage_layers,
                 last_stage_layers=space.last_stage_layers)
    # m is set here (not from B by training_values): smallest_d asks at d = 1, where b d
    # need not divide B yet
    vals = training_values(space.arch, lay, space.training(micro_batch_size=bb,
                                                           global_batch_size=None),
                           dict(space.allowances))
    if space.global_batch_size is not None:
        vals[m_sym] = sp.Integer(space.global_batch_size // (bb * dd))
    rc, spf = row["recompute"], bool(row["sequence_parallel"]) and tt > 1
    totals = {}
    for stage in check_stages(space, pp):
        tot = choice_template(space, rc, spf, vv > 1, row.get("offload", "none"),
                        scheme_row(row["sharding"], space.framework),
                        *template_rep(space, pp, stage))[0]
        sub = {lookup(name): val for name, val in stage_count_items(space, tt, pp, ee, stage,
                                                                        te)}
        for name in sub:
            vals.pop(name, None)
        totals[stage] = Total(f"memory of pipeline stage {stage}",
                              tuple(_replace(term, expr=_lazy_xreplace(term.expr, sub))
                                    for term in tot))
    return vals, totals


def _lazy_xreplace(expr, sub):
    """``expr.xreplace(sub)`` that leaves every Max/Min unevaluated.

    Re-evaluating the phase peak's ``Max`` with symbols still in it makes SymPy prove an
    ordering between its branches (``_find_localzeros``: about 0.2 s per layout); the
    branches are compared when the row is evaluated with numbers, which is exact and fast."""
    if isinstance(expr, (sp.Max, sp.Min)):
        return expr.func(*(_lazy_xreplace(a, sub) for a in expr.args), evaluate=False)
    if not expr.has(sp.Max, sp.Min):
        return expr.xreplace(sub)
    return expr.func(*(_lazy_xreplace(a, sub) for a in expr.args))
