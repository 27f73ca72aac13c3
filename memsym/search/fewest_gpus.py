"""The vectorized part of :func:`memsym.search.sizing.min_gpus`: the candidate layouts and
the smallest data-parallel size d at which each fits, for all of them at once.

Each candidate (t, p, c, e, v, b) row, with the first/last stage sizes the search offers, is
priced under every discrete choice on the compiled totals (:func:`evaluate_grid`); memory is
nonincreasing in d, so the smallest d that fits is found by a walk over the divisors of the
global batch, or, without one, from the exact form alpha + beta / d of each stage's total
(checked, and searched by galloping and bisection where it does not hold).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Callable

import numpy as np

from ..errors import NoFitError
from ..distinct_rows import distinct
from .space import CHOICE_KEYS, KNOBS, RULES, divisors_of
from .grid import expert_tp_sizes, rule_masks, stage_splits
from .evaluate import binding_columns, evaluate_grid, stage_slots
from .exact import exact_row
from .results import no_fit_hint

__all__ = ["candidate_knobs", "evaluate_rows", "smallest_d_by_divisors", "smallest_d_by_fit",
           "smallest_multiple", "with_splits", "no_valid_choice", "nothing_fits_error"]


def candidate_knobs(space, maxg: int) -> tuple:
    """``(knobs, offer)``: the candidate (t, p, c, e, v, b, t_e) rows that pass the knob rules
    within ``maxg`` GPUs [GPUs] (every rule but the world size and the d-dependent ones), with
    their first/last stage sizes ``f``, ``l`` where ``offer`` (uneven end stages offered).
    The experts' TP sizes t_e beside each t are those :func:`search` tries
    (:func:`memsym.search.grid.expert_tp_sizes`).

    Examples
    --------
    >>> from memsym.search import make_space
    >>> knobs, offer = candidate_knobs(make_space("llama2-7b", "a100-80gb"), 8)
    >>> int((knobs["t"] * knobs["p"] * knobs["c"]).max()) <= 8
    True
    >>> knobs, _ = candidate_knobs(make_space("mixtral-8x7b", "h100-80gb"), 8)
    >>> sorted({(int(t), int(te)) for t, te in zip(knobs["t"], knobs["t_e"])})
    [(1, 1), (2, 1), (2, 2), (4, 1), (4, 4), (8, 1), (8, 8)]
    """

    x = space.arch
    # candidate (t, p, c, e, v, b): the knob rules except world size and the d-dependent ones
    pseudo = replace(space, global_batch_size=None)
    cand_t = space.tp or tuple(dv for dv in divisors_of(x.num_attention_heads) if dv <= space.gpus_per_node)
    given = space.first_stage_layers is not None or space.last_stage_layers is not None
    # p: the divisors of the layers (the even split) and, where uneven end stages are offered,
    # every p up to the layers with the splits the search offers (stage_splits)
    offer = space.uneven and not given
    cand_p = space.pp or (tuple(range(2, x.num_layers + 1)) if given else tuple(sorted(
        set(divisors_of(x.num_layers)) | (set(range(2, x.num_layers + 1)) if offer else set()))))
    cand_c = space.cp or (1,)
    cand_e = space.ep or (tuple(divisors_of(x.num_experts)) if x.num_experts else (1,))
    cand_v = space.vpp or (1,)   # interleaving never lowers memory (seed 001): v = 1 for sizing
    # (t, t_e) pairs: the experts' TP sizes the search tries beside each t (one rule)
    cand_tte = [(tt, te) for tt in cand_t for te in expert_tp_sizes(space, tt)]
    prod = np.array([(tt, pp, cc, ee, vv, bb, te) for (tt, te), pp, cc, ee, vv, bb in
                     itertools.product(cand_tte, cand_p, cand_c, cand_e, cand_v,
                                       space.micro_batch_sizes)], dtype=np.int64)
    grid = {k: prod[:, i] for i, k in enumerate(("t", "p", "c", "e", "v", "b", "t_e"))}
    if offer:
        grid = with_splits(x.num_layers, grid, cand_v)
    grid["d"] = np.ones(len(grid["t"]), dtype=np.int64)
    masks = rule_masks(pseudo, grid)
    masks.pop("ep-group", None)
    bad = np.zeros(len(grid["t"]), dtype=bool)
    for mask in masks.values():
        bad |= mask
    grid = {k: val[~bad] for k, val in grid.items()}
    grid = {k: val[grid["t"] * grid["p"] * grid["c"] <= maxg] for k, val in grid.items()}
    if not len(grid["t"]):
        raise NoFitError(f"no layout passes the rules within {maxg} GPUs")
    knobs = {k: grid[k] for k in ("t", "p", "c", "e", "v", "b", "t_e")
             + (("f", "l") if offer else ())}
    return knobs, offer


def evaluate_rows(space, knobs, dvals, only=None, rows=None, per_stage=False,
                  slots=None) -> dict:
    """Memory of knob rows (``rows``, default all) at data-parallel sizes ``dvals`` [GPUs]
    under every discrete choice (or the row's own choice with ``only``): the columns of
    :func:`memsym.search.evaluate.evaluate_grid`, without the step time.  ``slots``: the
    knobs' :func:`memsym.search.evaluate.stage_slots`, computed once for every call."""

    sel = np.arange(len(knobs["t"])) if rows is None else rows
    g2 = {k: knobs[k][sel] for k in knobs}
    g2["d"] = np.asarray(dvals, dtype=np.int64)
    return evaluate_grid(space, g2, want_time=False, only=only, per_stage=per_stage,
                         slots=None if slots is None else slots.take(sel))


def smallest_d_by_divisors(space, knobs, maxg: int, report: Callable) -> tuple:
    """``(rows, best_d)`` with a global batch: per (knob row, discrete choice) that fits, the
    smallest d [GPUs] such that b d divides B; ``rows`` is None where nothing fits."""

    B, x, cap = space.global_batch_size, space.arch, float(space.capacity)
    # finite candidates: b*d must divide B; memory is nonincreasing in d (fewer
    # micro-batches in flight, more sharding), so the first divisor that fits is the answer
    best = {}
    dvs = sorted({dv for bb in distinct(knobs["b"]) for dv in divisors_of(B // int(bb))})
    slots = stage_slots(space, knobs)     # the same layouts at every d: their stages once
    for done, dv in enumerate(dvs, 1):
        report(done, len(dvs))
        ok_rows = np.flatnonzero((B % (knobs["b"] * dv) == 0)
                                 & (knobs["t"] * knobs["p"] * knobs["c"] * dv <= maxg))
        if x.num_experts:   # rule ep-group: e t_e divides t c d
            ok_rows = ok_rows[(knobs["t"][ok_rows] * knobs["c"][ok_rows] * dv)
                              % (knobs["e"][ok_rows] * knobs["t_e"][ok_rows]) == 0]
        if not len(ok_rows):
            continue
        cols = evaluate_rows(space, knobs, np.full(len(ok_rows), dv), rows=ok_rows,
                             slots=slots)
        fit = cols["memory"] <= cap
        for j in np.flatnonzero(fit):
            key = (int(ok_rows[cols["row"][j]]), cols["recompute"][j], cols["sharding"][j],
                   bool(cols["sequence_parallel"][j]), cols["offload"][j])
            best.setdefault(key, dv)
    if not best:
        return None, np.zeros(0, dtype=np.int64)
    keys = list(best)
    rows = {"knob": np.array([k_[0] for k_ in keys]),
            "recompute": np.array([k_[1] for k_ in keys], dtype=object),
            "sharding": np.array([k_[2] for k_ in keys], dtype=object),
            "sequence_parallel": np.array([k_[3] for k_ in keys], dtype=bool),
            "offload": np.array([k_[4] for k_ in keys], dtype=object)}
    return rows, np.array([best[k_] for k_ in keys], dtype=np.int64)


def smallest_d_by_fit(space, knobs, maxg: int, report: Callable) -> tuple:
    r"""``(rows, best_d)`` without a global batch: per (knob row, discrete choice), the
    smallest d [GPUs] that fits (0: none within ``maxg``), from each stage's exact form

    .. math:: M(d) = \alpha + \beta / d, \qquad d^{*} = \max_{\text{stages}}
              \lceil \beta / (C - \alpha) \rceil

    verified on the compiled totals (d* fits, d* - step does not) and searched where it fails
    or a stage is not of that form.  A verified row keeps its d*, the least.  A row searched is
    searched to the end only while its smallest possible G = t p c d (from d = step on) can
    reach or tie the fewest GPUs found, by a verified row or a searched one; past that its d
    is 0 (nothing fitting found yet) or a d that fits but may not be the least: either way
    more GPUs than the fewest."""

    x, cap = space.arch, float(space.capacity)
    nk = len(knobs["t"])
    # without a global batch nothing in flight depends on d, and every d-dependent term
    # is a model state divided by d: each stage's memory is alpha + beta/d exactly
    # (checked at d = 4), so d* = max over the stages of ceil(beta/(C - alpha)).  The
    # most-loaded stage may change with d (deepseek-v3: dense first stages, MoE later),
    # so the max over stages is not of that form; each stage is fitted on its own.
    report(1, 3)
    # the three probes in one evaluation (its cost is mostly per call), split back by row
    tiled = np.tile(np.arange(nk), 3)
    slots = stage_slots(space, knobs)     # the same layouts at every d: their stages once
    m124 = evaluate_rows(space, knobs, np.repeat([1, 2, 4], nk), rows=tiled, per_stage=True,
                         slots=slots)
    m1, m2, m4 = ({k: val[(m124["row"] // nk) == i] for k, val in m124.items()}
                  for i in range(3))
    for part in (m2, m4):
        part["row"] = part["row"] % nk
    if not len(m1["row"]):   # every candidate breaks a rule of its discrete choices
        raise no_valid_choice(space, knobs, maxg)
    s1, s2, s4 = m1["stage_memory"], m2["stage_memory"], m4["stage_memory"]
    beta = 2 * (s1 - s2)
    alpha = s1 - beta
    absent = np.isnan(s1)    # rows with fewer stages than the widest
    linear = np.all(absent | np.isclose(alpha + beta / 4, s4, rtol=1e-9, atol=1.0), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(alpha < cap, np.ceil(np.maximum(beta, 0) / (cap - alpha)), np.inf)
    need = np.where(absent, 1, np.maximum(need, 1))
    dstar = need.max(axis=1)          # inf: some stage never fits
    rows = {"knob": m1["row"], "recompute": m1["recompute"], "sharding": m1["sharding"],
            "sequence_parallel": m1["sequence_parallel"], "offload": m1["offload"]}
    tpc0 = (knobs["t"] * knobs["p"] * knobs["c"])[rows["knob"]]
    step = np.ones(len(dstar), dtype=np.int64)
    if x.num_experts:   # rule ep-group: e t_e divides t c d, so d steps by e t_e / gcd
        ete = (knobs["e"] * knobs["t_e"])[rows["knob"]]
        step = ete // np.gcd(ete, (knobs["t"] * knobs["c"])[rows["knob"]])
    kmax = maxg // (tpc0 * step)      # d = k step with t p c d <= max_gpus
    with np.errstate(invalid="ignore"):
        kstar = np.where(np.isfinite(dstar), np.ceil(dstar / step), 0)
    dstar = np.where((kstar >= 1) & (kstar <= kmax), kstar * step, 0).astype(np.int64)
    everyone = np.arange(len(dstar))
    probes = [(everyone, np.full(len(dstar), dv), part["memory"] <= cap)
              for dv, part in ((1, m1), (2, m2), (4, m4))]
    _verify_fit(space, (knobs, slots), rows, dstar, step, kmax, tpc0, linear, report, probes)
    return rows, dstar


def _verify_fit(space, knobs_slots, rows, dstar, step, kmax, tpc0, linear, report,
                probes) -> None:
    """Check each row's d* on the compiled totals (d* fits, d* - step does not), and search
    in place the rows where that fails, from what ``probes`` (``(rows, d, fits)`` triples:
    the d = 1, 2, 4 evaluations) and these checks already know of each (``knobs_slots``:
    the candidate knobs and their :func:`memsym.search.evaluate.stage_slots`)."""

    cap = float(space.capacity)
    knobs, slots = knobs_slots

    def fits_at(sel, dvals):
        """Whether knob-and-choice rows ``sel`` fit at data-parallel sizes ``dvals``."""
        out = np.zeros(len(sel), dtype=bool)
        if len(sel):
            memd = evaluate_rows(space, knobs, dvals, rows=rows["knob"][sel],
                                 only={k: rows[k][sel] for k in CHOICE_KEYS}, slots=slots)
            out[memd["row"]] = memd["memory"] <= cap
        return out

    # verify on the compiled totals: d* fits and d* - step does not.  A row that fails
    # (float rounding at the boundary, a stage not of the form a + b/d) is searched
    # exactly instead (gallop and bisection; memory is nonincreasing in d)
    report(2, 3)
    live = np.flatnonzero(dstar > 0)
    # both probes (d* and d* - step) in one evaluation: its cost is mostly per call
    has_low = dstar[live] > step[live]
    below = live[has_low]
    both = fits_at(np.concatenate([live, below]),
                   np.concatenate([dstar[live], dstar[below] - step[below]]))
    top_ok = both[:len(live)]
    probes = probes + [(live, dstar[live], top_ok),
                       (below, dstar[below] - step[below], both[len(live):])]
    low = below[top_ok[has_low]]
    low_fits = both[len(live):][top_ok[has_low]]
    # np.union1d / np.setdiff1d, spelled with distinct (numpy's import numpy.ma at once)
    redo = distinct(np.concatenate([live[~top_ok], low[low_fits], np.flatnonzero(~linear)]))
    verified = distinct(live[top_ok])
    verified = verified[~np.isin(verified, redo, assume_unique=True)]
    # the fewest G a verified row fits at: a row to search whose smallest possible G
    # (t p c step, then t p c (lo + 1) step as it goes) exceeds it, or one found fitting,
    # cannot win (or tie), so smallest_multiple stops searching it
    g_known = int((tpc0[verified] * dstar[verified]).min()) if len(verified) else None
    if len(redo):
        report(3, 3)
        # the search starts from the d each row is already known to fit at or not (no d
        # priced twice)
        lo, hi = known_bounds(step, kmax, probes)
        dstar[redo] = smallest_multiple(lambda r, dv: fits_at(redo[r], dv), step[redo],
                                        kmax[redo], weight=tpc0[redo], known=g_known,
                                        lo=lo[redo], hi=hi[redo])


def known_bounds(step, kmax, probes) -> tuple:
    """``(lo, hi)`` per row: the largest k known not to fit and the smallest k (at most
    ``kmax``) known to fit (0: none), from ``probes`` of ``(rows, d, fits)`` at the d
    [GPUs] that are multiples of the row's step (d = k step; memory is nonincreasing in d).

    Examples
    --------
    >>> import numpy as np
    >>> rows = np.array([0, 1, 2])
    >>> lo, hi = known_bounds(np.array([1, 2, 1]), np.array([8, 8, 3]),
    ...                       [(rows, np.array([2, 2, 4]), np.array([False, True, True])),
    ...                        (rows, np.array([4, 3, 1]), np.array([True, True, False]))])
    >>> lo.tolist(), hi.tolist()
    ([2, 0, 1], [4, 1, 0])
    """

    step = np.asarray(step, dtype=np.int64)
    lo = np.zeros(len(step), dtype=np.int64)
    hi = np.zeros(len(step), dtype=np.int64)
    for sel, dvals, ok in probes:
        dvals = np.asarray(dvals, dtype=np.int64)
        on = dvals % step[sel] == 0          # a d the row may take (rule ep-group)
        kk = dvals // step[sel]
        fit = on & ok & (kk <= kmax[sel])
        miss = on & ~ok
        np.maximum.at(lo, sel[miss], kk[miss])
        cur = hi[sel[fit]]
        hi[sel[fit]] = np.where((cur == 0) | (kk[fit] < cur), kk[fit], cur)
    # memory nonincreasing in d keeps lo below hi; a float tie at the boundary may not
    return np.where((hi > 0) & (lo >= hi), hi - 1, lo), hi


def nothing_fits_error(space, knobs, maxg: int) -> NoFitError:
    """The error when no layout fits within ``maxg`` GPUs [GPUs]: the least memory at the
    largest d tried, and the binding term there."""

    # the least memory at the largest d tried names the binding term
    dfar = np.maximum(maxg // (knobs["t"] * knobs["p"] * knobs["c"]), 1)
    cols = evaluate_rows(space, knobs, dfar)
    if not len(cols["memory"]):   # every candidate breaks a rule of its discrete choices
        return no_valid_choice(space, knobs, maxg)
    cols["binding"] = binding_columns(cols)
    j = int(np.argmin(cols["memory"]))
    least = {k: cols[k][j] for k in KNOBS + CHOICE_KEYS}
    least.update(first_stage_layers=int(cols["f"][j]), last_stage_layers=int(cols["l"][j]))
    return NoFitError(
        f"nothing fits within {maxg} x {space.gpu.name}: the least memory is "
        f"{cols['memory'][j] / 1e9:.4g} GB > {space.capacity / 1e9:.4g} GB (t={cols['t'][j]}, "
        f"p={cols['p'][j]}, c={cols['c'][j]}, d={cols['d'][j]}, b={cols['b'][j]}, "
        f"{cols['recompute'][j]} recompute, {cols['sharding'][j]}); binding term: "
        f"{cols['binding'][j]}", binding=(str(cols["binding"][j]),),
        floor=exact_row(space, least)["bytes"]["total"], hint=no_fit_hint(space))


def smallest_multiple(fits: Callable, step, kmax, weight=None, known=None, lo=None, hi=None):
    """For each row r the smallest d = k step[r] (1 <= k <= kmax[r]) with ``fits(rows, d)``
    true, 0 where none: galloping on k (1, 2, 4, ...), then bisection.  ``fits`` must be
    monotone in d (memory is nonincreasing in d); it is called on index arrays of rows.
    ``lo`` / ``hi``: per row, a k already known not to fit / to fit (0: none, as
    :func:`known_bounds` gives them); the gallop then starts at 2 lo, and a row with both
    is only bisected.

    With ``weight`` (GPUs per unit of d [GPUs], t p c) only the rows that can reach the
    fewest GPUs are searched to the end: a row whose G = weight d is already known to exceed
    ``known`` [GPUs] (or a G another row fits at) can neither win nor tie, so its search
    stops: it is left with 0 (nothing fitting found yet) or the d it was last found to fit
    at, either way more GPUs than the fewest.

    Examples
    --------
    >>> import numpy as np
    >>> need = np.array([1, 5, 12, 40])           # row r fits from d = need[r] on
    >>> smallest_multiple(lambda r, dv: dv >= need[r], np.array([1, 1, 4, 1]),
    ...                    np.array([64, 64, 64, 32])).tolist()
    [1, 5, 12, 0]
    >>> smallest_multiple(lambda r, dv: dv >= need[r], np.array([1, 1, 4, 1]),
    ...                    np.array([64, 64, 64, 32]), weight=np.array([8, 1, 1, 1])).tolist()
    [1, 5, 0, 0]
    >>> smallest_multiple(lambda r, dv: dv >= need[r], np.array([1, 1, 4, 1]),
    ...                    np.array([64, 64, 64, 32]), lo=np.array([0, 4, 2, 0]),
    ...                    hi=np.array([1, 0, 0, 0])).tolist()
    [1, 5, 12, 0]
    """

    known = np.inf if known is None else known
    step = np.asarray(step, dtype=np.int64)
    kmax = np.asarray(kmax, dtype=np.int64)
    # largest k known not to fit; smallest k known to fit (0: none)
    lo = np.zeros(len(step), dtype=np.int64) if lo is None else np.array(lo, dtype=np.int64)
    hi = np.zeros(len(step), dtype=np.int64) if hi is None else np.array(hi, dtype=np.int64)
    k = np.where(lo > 0, np.minimum(2 * lo, kmax), 1)

    def hopeful(rows):
        """The rows whose fewest possible GPUs, weight (lo + 1) step, is within the best
        G found so far (ties kept: they are ranked afterwards)."""
        nonlocal known
        if weight is None:
            return rows
        found = np.flatnonzero(hi > 0)
        if len(found):
            known = min(known, int((weight[found] * hi[found] * step[found]).min()))
        return rows[weight[rows] * (lo[rows] + 1) * step[rows] <= known]

    todo = hopeful(np.flatnonzero((kmax >= 1) & (hi == 0) & (lo < kmax)))
    while len(todo):
        ok = np.asarray(fits(todo, k[todo] * step[todo]), dtype=bool)
        hi[todo[ok]] = k[todo[ok]]
        miss = todo[~ok]
        lo[miss] = k[miss]
        k[miss] = np.minimum(2 * k[miss], kmax[miss])
        todo = hopeful(miss[lo[miss] < kmax[miss]])
    todo = hopeful(np.flatnonzero(hi - lo > 1))
    while len(todo):
        mid = (lo[todo] + hi[todo]) // 2
        ok = np.asarray(fits(todo, mid * step[todo]), dtype=bool)
        hi[todo[ok]] = mid[ok]
        lo[todo[~ok]] = mid[~ok]
        todo = hopeful(todo[hi[todo] - lo[todo] > 1])
    return hi * step


def with_splits(num_layers: int, grid: dict, cand_v) -> dict:
    """The knob rows with their first/last stage sizes (``f``, ``l``; 0: the even split):
    the even split where p divides the layers, and the uneven ones :func:`stage_splits`
    offers, as :func:`search` lays them out."""

    parts = []
    for pp in distinct(grid["p"]):
        idx = np.flatnonzero(grid["p"] == pp)
        pairs = ([(0, 0)] if num_layers % int(pp) == 0 else []) + list(
            stage_splits(num_layers, int(pp), cand_v))
        for f_, l_ in pairs:
            parts.append((idx, f_, l_))
    if not parts:
        return {**{k: v[:0] for k, v in grid.items()}, "f": grid["p"][:0], "l": grid["p"][:0]}
    out = {k: np.concatenate([grid[k][idx] for idx, _, _ in parts]) for k in grid}
    out["f"] = np.concatenate([np.full(len(idx), f_, dtype=np.int64) for idx, f_, _ in parts])
    out["l"] = np.concatenate([np.full(len(idx), l_, dtype=np.int64) for idx, _, l_ in parts])
    return out


def no_valid_choice(space, knobs, maxg) -> NoFitError:
    """Every (layout, discrete choice) breaks a rule (offload with p > 1, say): name it."""
    why = (f" (offload-pp: {RULES['offload-pp']})"
           if "none" not in space.offload and all(int(x_) > 1 for x_ in knobs["p"]) else "")
    return NoFitError(f"no layout passes the rules within {maxg} GPUs{why}")
