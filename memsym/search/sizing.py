"""Sizing questions: the smallest data-parallel size for a layout (:func:`smallest_d`), the
fewest GPUs (:func:`min_gpus`) and the largest value that fits (:func:`largest_fit`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

import numpy as np
import sympy as sp

from ..frameworks import FRAMEWORK
from ..errors import InvalidValueError, MemsymError, NoFitError
from ..symbols import b as b_sym, d, m as m_sym, s as s_sym
from .. import rules as _rules

from .choices import matched_choices, scheme_row
from .space import RULES, from_job, make_space, positive_whole
from .grid import with_split, explain
from .fewest_gpus import (candidate_knobs, nothing_fits_error, smallest_d_by_divisors,
                          smallest_d_by_fit)
from .exact import exact_row, row_totals, group_bytes
from .results import search
from ..analysis import largest, smallest
from ..model import resolve


def _sizing_space(model, gpu, options: dict) -> tuple:
    """``(model, gpu, space)`` of a sizing call: a Job read as the search reads it
    (:func:`memsym.search.space.from_job`), then ``options``' own ``space`` or one made of them;
    refused where the framework splits the pipeline its own way."""
    model, gpu = from_job(model, gpu, options)
    space = options.pop("space", None) or make_space(model, gpu, **options)
    # the sizing answers walk p over Megatron's splits (p dividing the layers, or the given
    # end stages); torchtitan splits each p its own way, which search() prices
    if FRAMEWORK[space.framework].torch_pipelining:
        raise InvalidValueError("smallest_d, min_gpus and largest_fit size Megatron-style "
                                "pipelines; for a torchtitan job use search(..., "
                                "framework=\"torchtitan\") at the candidate GPU counts")
    return model, gpu, space


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
               t_e: int | None = None, **options):
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
    t_e : int or None
        Expert tensor-parallel size [GPUs] (None: t, Megatron-LM's default,
        arguments.py:587-588 at d98e8a64dd).

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
    model, gpu, space = _sizing_space(model, gpu, options)
    t_e = t if t_e is None else t_e
    row = {"t": t, "p": p, "c": c, "d": 1, "e": e, "v": v, "b": b, "t_e": t_e,
           "recompute": recompute, "sharding": scheme_row(sharding),
           "sequence_parallel": sequence_parallel, "offload": offload}
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
        # rules batch (b d divides B) and ep-group (e t_e divides t c d)
        return ((Bv is None or Bv % (b * n) == 0)
                and (not space.arch.num_experts or (t * c * n) % (e * t_e) == 0))

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


def min_gpus(model, gpu=None, *, max_gpus: int = 1 << 17, progress: Callable | None = None,
             **options) -> MinGpus:
    r"""The fewest GPUs on which the training fits, over every layout the rules allow.

    For each rule-valid (t, p, c, e, v, b, t_e) (t_e: the experts' TP sizes :func:`search`
    tries beside t), with the first/last stage sizes :func:`search`
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

    start = time.perf_counter()
    model, gpu, space = _sizing_space(model, gpu, options)
    maxg = positive_whole(max_gpus, "max_gpus")
    knobs, offer = candidate_knobs(space, maxg)

    def report(done, total):
        if progress is not None:
            progress(done, total)

    if space.global_batch_size is not None:
        rows, best_d = smallest_d_by_divisors(space, knobs, maxg, report)
    else:
        rows, best_d = smallest_d_by_fit(space, knobs, maxg, report)
    if rows is None:
        best_d = np.zeros(0, dtype=np.int64)
        rows = {"knob": np.zeros(0, dtype=np.int64)}
    n = len(best_d)
    tpc = (knobs["t"] * knobs["p"] * knobs["c"])[rows["knob"]] if n else np.zeros(0, dtype=np.int64)
    for k in knobs:
        rows[k] = knobs[k][rows["knob"]]
    ok = best_d > 0
    if not ok.any():
        raise nothing_fits_error(space, knobs, maxg)
    G_all = np.where(ok, tpc * best_d, np.iinfo(np.int64).max)
    gbest = int(G_all.min())
    tie = np.flatnonzero(G_all == gbest)
    res, lay, f_c, l_c = _chosen_layout(model, gpu, space, gbest, _tied_rows(rows, best_d, tie,
                                                                           offer))
    # the exact, symbolic answer for the chosen layout
    sol, method, closed, bound = None, "searched", None, None
    try:
        sol = smallest_d(model, gpu, space=with_split(space, f_c, l_c), hint=lay["d"], **{
            k: lay[k] for k in ("t", "p", "c", "e", "b", "v", "t_e", "recompute", "sharding",
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


_LAYOUT_KEYS = ("t", "p", "c", "d", "e", "v", "b", "t_e", "recompute", "sharding",
                "sequence_parallel", "offload")


def _tied_rows(rows, best_d, tie, offer) -> list:
    """The layouts (one dict each) of the candidate rows ``tie``, all at the fewest GPUs."""
    cand = []
    for i in tie:
        cand.append({"t": int(rows["t"][i]), "p": int(rows["p"][i]), "c": int(rows["c"][i]),
                     "d": int(best_d[i]), "e": int(rows["e"][i]), "v": int(rows["v"][i]),
                     "b": int(rows["b"][i]), "t_e": int(rows["t_e"][i]),
                     "recompute": str(rows["recompute"][i]),
                     "sharding": str(rows["sharding"][i]),
                     "sequence_parallel": bool(rows["sequence_parallel"][i]),
                     "offload": str(rows["offload"][i]),
                     "first_stage_layers": int(rows["f"][i]) if offer else 0,
                     "last_stage_layers": int(rows["l"][i]) if offer else 0})
    return cand


def _chosen_layout(model, gpu, space, gbest, cand) -> tuple:
    """``(result, layout, f, l)``: the tied layouts ranked exactly as :func:`search` ranks
    them at G = ``gbest``, the best of them, and its first/last stage sizes (0: even).  The
    search at ``gbest`` keeps the space's experts' TP sizes: the candidates' t_e came from the
    same :func:`memsym.search.grid.expert_tp_sizes`."""
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

    def key_of(r):
        return tuple(r[k] for k in _LAYOUT_KEYS) + (r.get("first_stage_layers") or 0,
                                                    r.get("last_stage_layers") or 0)

    keyset = {key_of(r) for r in cand}
    for i in order:
        r = res.row(int(i))
        if key_of(r) in keyset:
            chosen = r
            break
    if chosen is None:
        chosen = res.best() if len(order) else {**cand[0]}
    lay = {k: chosen[k] for k in _LAYOUT_KEYS}
    lay["m"] = chosen.get("m")
    f_c, l_c = chosen.get("first_stage_layers") or 0, chosen.get("last_stage_layers") or 0
    if f_c or l_c:
        lay.update(first_stage_layers=f_c or None, last_stage_layers=l_c or None)
    return res, lay, f_c, l_c


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
    model, gpu, space = _sizing_space(model, gpu, options)
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
