"""Sizing questions: the smallest data-parallel size for a layout (:func:`smallest_d`), the
fewest GPUs (:func:`min_gpus`) and the largest value that fits (:func:`largest_fit`).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

import sympy as sp

from ..frameworks import FRAMEWORK
from ..errors import InvalidValueError, MemsymError, NoFitError
from ..symbols import b as b_sym, d, m as m_sym, s as s_sym
from .. import rules as _rules

from .space import (CHOICE_KEYS, KNOBS, RULES, divisors_of, from_job, make_space, matched_choices,
                    positive_whole, scheme_row)
from .grid import with_split, explain, rule_masks, stage_splits
from .evaluate import binding_columns, evaluate_grid
from .exact import exact_row, row_totals, group_bytes
from .results import search
from ..analysis import largest, smallest
from ..model import resolve


def _megatron_split_only(space) -> None:
    # the sizing answers walk p over Megatron's splits (p dividing the layers, or the given
    # end stages); torchtitan splits each p its own way, which search() prices
    if FRAMEWORK[space.framework].torch_pipelining:
        raise InvalidValueError("smallest_d, min_gpus and largest_fit size Megatron-style "
                                "pipelines; for a torchtitan job use search(..., "
                                "framework=\"torchtitan\") at the candidate GPU counts")


@dataclass
class MinGpus:
    """The smallest GPU count that fits, and how it was found.

    Attributes
    ----------
    gpus : int
        The answer G = t p c d [GPUs].
    layout : dict
        The layout chosen at that count (best step time, else most headroom).
    bytes : dict
        Exact bytes of that layout grouped as ``memsym estimate --json`` (SymPy numbers).
    closed_form : sympy.Expr or None
        The boundary :math:`d \\geq f(\\ldots)` solved symbolically for the chosen layout
        (None where the total is not solvable in closed form and d was searched).
    bound : sympy.Expr or None
        That boundary at the given values.
    method : str
        ``"closed form"`` or ``"searched"``.
    solution : memsym.analysis.Solution or None
    notes : list of str
        E.g. where the exact solver's d differs from the searched one.
    """

    gpus: int
    layout: dict
    bytes: dict
    closed_form: object
    bound: object
    method: str
    solution: object = None
    candidates: int = 0
    seconds: float = 0.0
    notes: list = field(default_factory=list)

    def explanation(self) -> str:
        """Closed form, then the integer: ``d >= 16 N/(C p t - ...) = 1.3 -> d = 2 -> G = 16``."""
        lay = self.layout
        tpc = lay["t"] * lay["p"] * lay["c"]
        head = ""
        if self.closed_form is not None:
            head = f"d >= {sp.sstr(self.closed_form)} = {float(self.bound):.6g}; "
        return (f"{head}d = {lay['d']} -> G = t*p*c*d = {tpc}*{lay['d']} = {self.gpus}"
                f" ({self.method})")


def smallest_d(model, gpu=None, *, t: int = 1, p: int = 1, c: int = 1, e: int = 1, b: int = 1,
               v: int = 1, recompute: str = "full", sharding: str = "distributed-optimizer",
               sequence_parallel: bool = False, offload: str = "none", hint: int | None = None,
               **options):
    """The smallest data-parallel size d for one layout, solved exactly.

    The most-loaded stage's total is solved for d with :func:`memsym.analysis.smallest`
    (closed form over the positive reals, then the integer, verified), for every stage the
    search compares; the answer is the largest of them, moved up to the next d the batch
    rule allows.  ``m`` is replaced by ``B/(b d)`` when a global batch is given, so the
    pipeline's in-flight micro-batches shrink with d as they do in Megatron.

    Parameters
    ----------
    t : int
        Tensor-parallel size [GPUs].

    p : int
        Pipeline-parallel size (number of stages) [GPUs].
    c : int
        Context-parallel size [GPUs].
    e : int
        Expert-parallel size [GPUs].
    b : int
        Micro-batch size [sequences].
    v : int
        Virtual pipeline stages (model chunks) per pipeline rank [1].

    Returns
    -------
    memsym.analysis.Solution
        For the stage that needs the largest d.

    Examples
    --------
    >>> sol = smallest_d("llama2-7b", "a100-80gb", sharding="zero3", seq_length=2048,
    ...                  allowances={"workspace": 0, "nccl": 0, "fragmentation": 0})
    >>> sol.value
    2
    """
    model, gpu = from_job(model, gpu, options)
    space = options.pop("space", None) or make_space(model, gpu, **options)
    _megatron_split_only(space)
    row = {"t": t, "p": p, "c": c, "d": 1, "e": e, "v": v, "b": b, "recompute": recompute,
           "sharding": scheme_row(sharding), "sequence_parallel": sequence_parallel,
           "offload": offload}
    broken = [r for r in explain(space, row) if r not in ("batch", "ep-group")]
    if broken:
        raise InvalidValueError("layout breaks " + ", ".join(f"{r} ({RULES[r]})" for r in broken))
    vals, full = row_totals(space, row)   # every value is exact; N is already the stage's
    vals.pop(d, None)
    Bv = space.global_batch_size
    if Bv is not None:
        vals[m_sym] = sp.Integer(Bv) / (sp.Integer(b) * d)
        # Min(in-flight, m) is piecewise in d: solve on the branch active near the answer
        # (``hint``, else d = 1); the integer is verified on the full total below.
        at = {**vals, d: sp.Integer(hint or 1)}

        def branch(*args):
            return min(args, key=lambda x_: x_.xreplace(at))

        totals = {k_: tot.map(lambda x_: x_.xreplace(vals).replace(sp.Min, branch))
                  for k_, tot in full.items()}
    else:
        totals = {k_: tot.map(lambda x_: x_.xreplace(vals)) for k_, tot in full.items()}

    def valid(n: int) -> bool:
        ok = True
        if Bv is not None:
            ok &= Bv % (b * n) == 0
        if space.arch.num_experts:
            ok &= (t * c * n) % (e * t) == 0
        return bool(ok)

    upper = None if Bv is None else Bv // b
    best = None
    for tot in totals.values():
        sol = smallest(tot, "d", space.capacity, valid=valid, upper=upper)
        if best is None or sol.value > best.value:
            best = sol
    # the chosen d must make every stage fit and obey the rules
    nval = best.value

    def at_n(n_):
        out = {**vals, d: sp.Integer(n_)}
        if Bv is not None:
            out[m_sym] = sp.Rational(Bv, b * n_)
        return out

    while not (valid(nval) and all(tot.evaluate(at_n(nval)) <= space.capacity
                                   for tot in full.values())):
        nval += 1
        if upper is not None and nval > upper:
            raise NoFitError(f"no data-parallel size up to B/b = {upper} fits this layout")
    if nval != best.value:
        best = replace(best, value=nval)
    return best


def _smallest_multiple(fits: Callable, step, kmax):
    """For each row r the smallest d = k step[r] (1 <= k <= kmax[r]) with ``fits(rows, d)``
    true, 0 where none: galloping on k (1, 2, 4, ...), then bisection.  ``fits`` must be
    monotone in d (memory is nonincreasing in d); it is called on index arrays of rows.

    Examples
    --------
    >>> import numpy as np
    >>> need = np.array([1, 5, 12, 40])           # row r fits from d = need[r] on
    >>> _smallest_multiple(lambda r, dv: dv >= need[r], np.array([1, 1, 4, 1]),
    ...                    np.array([64, 64, 64, 32])).tolist()
    [1, 5, 12, 0]
    """
    import numpy as np

    step = np.asarray(step, dtype=np.int64)
    kmax = np.asarray(kmax, dtype=np.int64)
    lo = np.zeros(len(step), dtype=np.int64)   # largest k known not to fit
    hi = np.zeros(len(step), dtype=np.int64)   # smallest k known to fit (0: none)
    k = np.ones(len(step), dtype=np.int64)
    todo = np.flatnonzero(kmax >= 1)
    while len(todo):
        ok = np.asarray(fits(todo, k[todo] * step[todo]), dtype=bool)
        hi[todo[ok]] = k[todo[ok]]
        miss = todo[~ok]
        lo[miss] = k[miss]
        k[miss] = np.minimum(2 * k[miss], kmax[miss])
        todo = miss[lo[miss] < kmax[miss]]
    todo = np.flatnonzero(hi - lo > 1)
    while len(todo):
        mid = (lo[todo] + hi[todo]) // 2
        ok = np.asarray(fits(todo, mid * step[todo]), dtype=bool)
        hi[todo[ok]] = mid[ok]
        lo[todo[~ok]] = mid[~ok]
        todo = todo[hi[todo] - lo[todo] > 1]
    return hi * step


def _with_splits(num_layers: int, grid: dict, cand_v) -> dict:
    """The knob rows with their first/last stage sizes (``f``, ``l``; 0: the even split):
    the even split where p divides the layers, and the uneven ones :func:`stage_splits`
    offers, as :func:`search` lays them out."""
    import numpy as np

    parts = []
    for pp in np.unique(grid["p"]):
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


def _no_valid_choice(space, knobs, maxg) -> NoFitError:
    """Every (layout, discrete choice) breaks a rule (offload with p > 1, say): name it."""
    why = (f" (offload-pp: {RULES['offload-pp']})"
           if "none" not in space.offload and all(int(x_) > 1 for x_ in knobs["p"]) else "")
    return NoFitError(f"no layout passes the rules within {maxg} GPUs{why}")


def min_gpus(model, gpu=None, *, max_gpus: int = 1 << 17, progress: Callable | None = None,
             **options) -> MinGpus:
    r"""The fewest GPUs on which the training fits, over every layout the rules allow.

    For each rule-valid (t, p, c, e, v, b), with the first/last stage sizes :func:`search`
    offers (uneven ones unless ``uneven=False``), and each discrete choice the memory is
    nonincreasing in d, so the smallest fitting d is found for all of them at once (vectorized exponential
    search and bisection on the compiled totals), moved up to the next d the batch rule
    allows; G = t p c d is minimised (ties: best step time, else most headroom).  The chosen
    layout's d is then solved exactly (:func:`smallest_d`: closed form, then the integer) and
    must agree.

    .. math:: G^{*} = \min_{\text{layouts}} t\,p\,c\,d^{*}(t,p,c,\ldots),\qquad
              d^{*} = \min\{d : M(d) \le C\}

    Parameters
    ----------
    max_gpus : int
        Search bound on G.
    **options
        As :func:`search`.

    Raises
    ------
    NoFitError
        When nothing fits up to ``max_gpus``; names the binding term.

    Examples
    --------
    Seed 004: a 7B full fine-tune needs at least two 80 GB GPUs:

    >>> r = min_gpus("llama2-7b", "a100-80gb", seq_length=2048, recompute=["full"],
    ...              allowances={"workspace": 0, "nccl": 0, "fragmentation": 0})
    >>> r.gpus
    2
    """
    import numpy as np

    start = time.perf_counter()
    model, gpu = from_job(model, gpu, options)
    space = options.pop("space", None) or make_space(model, gpu, **options)
    _megatron_split_only(space)
    x = space.arch
    maxg = positive_whole(max_gpus, "max_gpus")
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
    prod = np.array(list(itertools.product(cand_t, cand_p, cand_c, cand_e, cand_v,
                                           space.micro_batch_sizes)), dtype=np.int64)
    grid = {k: prod[:, i] for i, k in enumerate(("t", "p", "c", "e", "v", "b"))}
    if offer:
        grid = _with_splits(x.num_layers, grid, cand_v)
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
    B = space.global_batch_size
    knobs = {k: grid[k] for k in ("t", "p", "c", "e", "v", "b") + (("f", "l") if offer else ())}
    nk = len(knobs["t"])

    def evaluate_at(dvals, only=None, rows=None, per_stage=False):
        """Memory of knob rows (``rows``, default all) at data-parallel sizes ``dvals``
        under every discrete choice (or the row's own choice with ``only``)."""
        sel = np.arange(nk) if rows is None else rows
        g2 = {k: knobs[k][sel] for k in knobs}
        g2["d"] = np.asarray(dvals, dtype=np.int64)
        return evaluate_grid(space, g2, np.zeros(len(sel), dtype=np.int64), want_time=False,
                         only=only, per_stage=per_stage)

    def report(done, total):
        if progress is not None:
            progress(done, total)

    cap = float(space.capacity)
    if B is not None:
        # finite candidates: b*d must divide B; memory is nonincreasing in d (fewer
        # micro-batches in flight, more sharding), so the first divisor that fits is the answer
        best = {}
        dvs = sorted({dv for bb in np.unique(knobs["b"]) for dv in divisors_of(B // int(bb))})
        for done, dv in enumerate(dvs, 1):
            report(done, len(dvs))
            ok_rows = np.flatnonzero((B % (knobs["b"] * dv) == 0)
                                     & (knobs["t"] * knobs["p"] * knobs["c"] * dv <= maxg))
            if x.num_experts:
                ok_rows = ok_rows[(knobs["c"][ok_rows] * dv) % knobs["e"][ok_rows] == 0]
            if not len(ok_rows):
                continue
            cols = evaluate_at(np.full(len(ok_rows), dv), rows=ok_rows)
            fit = cols["memory"] <= cap
            for j in np.flatnonzero(fit):
                key = (int(ok_rows[cols["row"][j]]), cols["recompute"][j], cols["sharding"][j],
                       bool(cols["sequence_parallel"][j]), cols["offload"][j])
                best.setdefault(key, dv)
        if not best:
            rows, best_d = None, np.zeros(0, dtype=np.int64)
        else:
            keys = list(best)
            rows = {"knob": np.array([k_[0] for k_ in keys]),
                    "recompute": np.array([k_[1] for k_ in keys], dtype=object),
                    "sharding": np.array([k_[2] for k_ in keys], dtype=object),
                    "sequence_parallel": np.array([k_[3] for k_ in keys], dtype=bool),
                    "offload": np.array([k_[4] for k_ in keys], dtype=object)}
            best_d = np.array([best[k_] for k_ in keys], dtype=np.int64)
    else:
        # without a global batch nothing in flight depends on d, and every d-dependent term
        # is a model state divided by d: each stage's memory is alpha + beta/d exactly
        # (checked at d = 4), so d* = max over the stages of ceil(beta/(C - alpha)).  The
        # most-loaded stage may change with d (deepseek-v3: dense first stages, MoE later),
        # so the max over stages is not of that form; each stage is fitted on its own.
        report(1, 3)
        m1, m2, m4 = (evaluate_at(np.full(nk, dv), per_stage=True) for dv in (1, 2, 4))
        if not len(m1["row"]):   # every candidate breaks a rule of its discrete choices
            raise _no_valid_choice(space, knobs, maxg)
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
        if x.num_experts:
            ee, cc = knobs["e"][rows["knob"]], knobs["c"][rows["knob"]]
            step = ee // np.gcd(ee, cc)
        kmax = maxg // (tpc0 * step)      # d = k step with t p c d <= max_gpus
        with np.errstate(invalid="ignore"):
            kstar = np.where(np.isfinite(dstar), np.ceil(dstar / step), 0)
        dstar = np.where((kstar >= 1) & (kstar <= kmax), kstar * step, 0).astype(np.int64)

        def fits_at(sel, dvals):
            """Whether knob-and-choice rows ``sel`` fit at data-parallel sizes ``dvals``."""
            out = np.zeros(len(sel), dtype=bool)
            if len(sel):
                memd = evaluate_at(dvals, rows=rows["knob"][sel],
                                   only={k: rows[k][sel] for k in CHOICE_KEYS})
                out[memd["row"]] = memd["memory"] <= cap
            return out

        # verify on the compiled totals: d* fits and d* - step does not.  A row that fails
        # (float rounding at the boundary, a stage not of the form a + b/d) is searched
        # exactly instead (gallop and bisection; memory is nonincreasing in d)
        report(2, 3)
        live = np.flatnonzero(dstar > 0)
        top_ok = fits_at(live, dstar[live])
        low = live[top_ok & (dstar[live] > step[live])]
        low_fits = fits_at(low, dstar[low] - step[low])
        redo = np.union1d(np.union1d(live[~top_ok], low[low_fits]), np.flatnonzero(~linear))
        verified = np.setdiff1d(live[top_ok], redo)
        if len(verified) and len(redo):
            # a row needs d >= step: one whose smallest G already exceeds a verified row's
            # answer cannot win (or tie), so it is not searched
            g_known = int((tpc0[verified] * dstar[verified]).min())
            redo = redo[tpc0[redo] * step[redo] <= g_known]
        if len(redo):
            report(3, 3)
            dstar[redo] = _smallest_multiple(lambda r, dv: fits_at(redo[r], dv), step[redo],
                                             kmax[redo])
        best_d = dstar
    if rows is None:
        best_d = np.zeros(0, dtype=np.int64)
        rows = {"knob": np.zeros(0, dtype=np.int64)}
    n = len(best_d)
    tpc = (knobs["t"] * knobs["p"] * knobs["c"])[rows["knob"]] if n else np.zeros(0, dtype=np.int64)
    for k in knobs:
        rows[k] = knobs[k][rows["knob"]]
    ok = best_d > 0
    if not ok.any():
        # the least memory at the largest d tried names the binding term
        dfar = np.maximum(maxg // (knobs["t"] * knobs["p"] * knobs["c"]), 1)
        cols = evaluate_at(dfar)
        if not len(cols["memory"]):   # every candidate breaks a rule of its discrete choices
            raise _no_valid_choice(space, knobs, maxg)
        cols["binding"] = binding_columns(cols)
        j = int(np.argmin(cols["memory"]))
        least = {k: cols[k][j] for k in KNOBS + CHOICE_KEYS}
        least.update(first_stage_layers=int(cols["f"][j]), last_stage_layers=int(cols["l"][j]))
        raise NoFitError(
            f"nothing fits within {maxg} x {space.gpu.name}: the least memory is "
            f"{cols['memory'][j] / 1e9:.4g} GB > {space.capacity / 1e9:.4g} GB (t={cols['t'][j]}, "
            f"p={cols['p'][j]}, c={cols['c'][j]}, d={cols['d'][j]}, b={cols['b'][j]}, "
            f"{cols['recompute'][j]} recompute, {cols['sharding'][j]}); binding term: "
            f"{cols['binding'][j]}", binding=(str(cols["binding"][j]),),
            floor=exact_row(space, least)["bytes"]["total"])
    G_all = np.where(ok, tpc * best_d, np.iinfo(np.int64).max)
    gbest = int(G_all.min())
    tie = np.flatnonzero(G_all == gbest)
    # rank the tied layouts exactly as `search` would at G = gbest
    cand = []
    for i in tie:
        cand.append({"t": int(rows["t"][i]), "p": int(rows["p"][i]), "c": int(rows["c"][i]),
                     "d": int(best_d[i]), "e": int(rows["e"][i]), "v": int(rows["v"][i]),
                     "b": int(rows["b"][i]), "recompute": str(rows["recompute"][i]),
                     "sharding": str(rows["sharding"][i]),
                     "sequence_parallel": bool(rows["sequence_parallel"][i]),
                     "offload": str(rows["offload"][i]),
                     "first_stage_layers": int(rows["f"][i]) if offer else 0,
                     "last_stage_layers": int(rows["l"][i]) if offer else 0})
    tied = replace(space, tp=tuple(sorted({r["t"] for r in cand})),
                   pp=tuple(sorted({r["p"] for r in cand})), cp=tuple(sorted({r["c"] for r in cand})),
                   vpp=tuple(sorted({r["v"] for r in cand})),
                   micro_batch_sizes=tuple(sorted({r["b"] for r in cand})),
                   recompute=tuple(sorted({r["recompute"] for r in cand})),
                   sharding=tuple(sorted({r["sharding"] for r in cand})),
                   sequence_parallel=tuple(sorted({r["sequence_parallel"] for r in cand})),
                   offload=tuple(sorted({r["offload"] for r in cand})))
    res = search(model, gpu, gbest, space=tied)
    order = res.order()
    chosen = None
    names = ("t", "p", "c", "d", "e", "v", "b", "recompute", "sharding", "sequence_parallel",
             "offload")

    def key_of(r):
        return tuple(r[k] for k in names) + (r.get("first_stage_layers") or 0,
                                              r.get("last_stage_layers") or 0)

    keyset = {key_of(r) for r in cand}
    for i in order:
        r = res.row(int(i))
        if key_of(r) in keyset:
            chosen = r
            break
    if chosen is None:
        chosen = res.best() if len(order) else {**cand[0]}
    lay = {k: chosen[k] for k in names}
    lay["m"] = chosen.get("m")
    f_c, l_c = chosen.get("first_stage_layers") or 0, chosen.get("last_stage_layers") or 0
    if f_c or l_c:
        lay.update(first_stage_layers=f_c or None, last_stage_layers=l_c or None)
    # the exact, symbolic answer for the chosen layout
    sol, method, closed, bound = None, "searched", None, None
    try:
        sol = smallest_d(model, gpu, space=with_split(space, f_c, l_c), hint=lay["d"], **{
            k: lay[k] for k in ("t", "p", "c", "e", "b", "v", "recompute", "sharding",
                                "sequence_parallel", "offload")})
        closed, bound = sol.closed_form, sol.bound
        if closed is not None:
            method = "closed form"
        if sol.value != lay["d"]:
            # the vectorized search and the exact solver disagree only at float ties
            res.notes.append(f"the exact solver gives d = {sol.value}, the search d = {lay['d']}")
    except MemsymError:   # a solver gap falls back to the searched answer
        sol = None
    exact = exact_row(space, lay)
    return MinGpus(gbest, lay, exact["bytes"], closed, bound, method, sol, n,
                   time.perf_counter() - start, res.notes)


def largest_fit(what: str, model, gpu=None, *, layout: Mapping | None = None, limit: int = 1 << 20,
                **options) -> dict:
    r"""The largest micro-batch size, sequence length or depth (layers) that fits one layout.

    ``micro_batch_size`` and ``seq_length`` are solved exactly on the most-loaded stage's
    total (:func:`memsym.analysis.largest`: closed form where SymPy finds one, e.g. the
    quadratic in s without flash attention, then the integer) for every stage compared;
    ``layers`` (the largest model of the same width) is found by bisection on the exact total,
    keeping p | L and (L/p) % v == 0.

    Returns
    -------
    dict
        ``{"what", "value", "closed_form", "bound", "bytes"}``.

    Examples
    --------
    >>> r = largest_fit("micro_batch_size", "llama2-7b", "a100-80gb", seq_length=2048,
    ...                 layout={"t": 1, "p": 1, "d": 8, "recompute": "full", "sharding": "zero3"})
    >>> r["value"] > 1
    True
    """
    what = matched_choices("quantity", [what], ("micro_batch_size", "seq_length", "layers"))[0]
    lay = {"t": 1, "p": 1, "c": 1, "d": 1, "e": 1, "v": 1, "b": 1, "recompute": "none",
           "sharding": "distributed-optimizer", "sequence_parallel": False, "offload": "none"}
    lay.update(layout or {})
    lay["sharding"] = scheme_row(lay["sharding"])
    model, gpu = from_job(model, gpu, options)
    space = options.pop("space", None) or make_space(model, gpu, **options)
    _megatron_split_only(space)
    if space.global_batch_size is not None and what == "micro_batch_size":
        raise InvalidValueError("the largest micro-batch is asked with no global batch (m free)")
    if what == "layers":
        def fits(nl):
            sp2 = replace(space, arch=resolve(replace(space.arch, num_layers=int(nl))))
            if explain(sp2, lay):
                return None
            ex = exact_row(sp2, lay)
            return ex if ex["bytes"]["total"] <= space.capacity else None

        step = lay["p"] * lay["v"]
        lo, k = 0, 1                 # lo*step fits (0: nothing known); gallop on k
        while k * step <= limit and fits(k * step):
            lo, k = k, k * 2
        if lo == 0:
            raise NoFitError(f"not even {step} layers fit this layout")
        hi = k
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid * step) else (lo, mid)
        ex = fits(lo * step)
        return {"what": what, "value": lo * step, "closed_form": None, "bound": None,
                "bytes": ex["bytes"]}
    if what == "seq_length" and space.arch.max_position_embeddings and not (
            FRAMEWORK[space.framework].hf_model_code
            and space.arch.position_embedding_type == "rope"):
        limit = min(limit, space.arch.max_position_embeddings)     # rule seq-positions
    vals, totals = row_totals(space, lay)
    sym = b_sym if what == "micro_batch_size" else s_sym
    vals.pop(sym, None)

    def valid(nv: int) -> bool:
        # the same cp-seq rule the search applies (2c | s for c > 1)
        return not _rules.broken(space.arch, {"c": lay["c"], "s": nv}, ["cp-seq"]) \
            if what == "seq_length" else True

    best = None
    for stage, tot in totals.items():
        sol = largest(tot, sym, space.capacity, vals, valid=valid, upper=limit)
        if best is None or sol.value < best.value:
            best = sol
    nv = best.value
    vals[sym] = sp.Integer(nv)
    bd = max((tot.breakdown(vals) for tot in totals.values()), key=lambda x: x["total"])
    return {"what": what, "value": nv, "closed_form": best.closed_form, "bound": best.bound,
            "bytes": group_bytes(bd)}
