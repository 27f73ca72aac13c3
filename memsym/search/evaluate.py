"""The vectorized evaluation: memory of every stage and the predicted step time over the whole
grid of numeric knobs, with no SymPy per configuration.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np

from ..symbols import V
from .. import rules as _rules
from ..distinct_rows import distinct, unique_rows
from ..training import (ALLOWANCE_KEYS as _ALLOW, OUTSIDE_ALLOCATOR_KEYS as _OUTSIDE,
                        allowance_values, arch_values)

from ..model import moe_layer_pattern
from .choices import recompute_layers
from .space import Space, CHOICE_RULES, KNOBS
from .grid import choice_knobs, grid_knobs, splits_of, with_split
from .exact import TERM_COLUMNS as _TERM_COLUMNS
from .templates import (allowance_function, call_stage, check_stages,
                        save_stage_tables, stage_count_floats, stage_function, stage_template)
from ..timing.pipeline import most_layers_per_rank
from .step_times import TIME_PARTS, choice_times, time_choices, time_rows


def evaluate_grid(space: Space, grid: dict, progress=None, want_time=True,
                  only: dict | None = None, per_stage: bool = False, slots=None) -> dict:
    """Memory (and step time) of every row of ``grid`` under every discrete choice.

    ``grid`` holds rule-valid numeric knobs.  Every stage of :func:`check_stages` is
    evaluated (slot j of a row holds its j-th such stage) and the largest is kept.  Returns
    concatenated columns; ``per_stage`` adds ``stage_memory`` (rows x slots, NaN where a row
    has fewer stages) for sizing questions that need each stage's own curve.  ``slots``: the
    grid's :func:`stage_slots`, where a caller pricing the same layouts again has them."""

    x = space.arch
    n = len(grid["t"])
    keys = ("row", "t", "p", "c", "d", "e", "v", "b", "t_e", "m", "recompute", "sharding",
            "sequence_parallel", "offload", "memory", "stage", "step_time", "f", "l") \
        + TIME_PARTS + _TERM_COLUMNS + (("stage_memory",) if per_stage else ())
    if n == 0:
        return {k: np.array([]) for k in keys}
    B = space.global_batch_size
    t_, p_, c_, d_, e_, v_, b_ = (grid[k] for k in KNOBS[:7])
    te_ = grid.get("t_e", t_)
    m_ = (B // (b_ * d_)) if B is not None else np.zeros(n, dtype=np.int64)
    scal = {str(k): float(v) for k, v in arch_values(x, 1).items()}
    allow = {str(k): float(v) for k, v in allowance_values(dict(space.allowances)).items()}
    Vpad = {int(tt): float(arch_values(x, int(tt))[V]) for tt in distinct(t_)}
    V_row = np.array([Vpad[int(tt)] for tt in t_])
    f_, l_ = splits_of(space, grid)
    slots = _stage_slots(space, grid, f_, l_) if slots is None else slots
    base_kw = dict(scal)
    base_kw.update(allow)
    base_kw.update({"s": float(space.seq_length), "c_f": float(space.capacity_factor),
                    "t": t_.astype(float), "p": p_.astype(float), "c": c_.astype(float),
                    "d": d_.astype(float), "e": e_.astype(float), "t_e": te_.astype(float),
                    "v": v_.astype(float), "b": b_.astype(float), "m": m_.astype(float),
                    "V": V_row})
    combos = list(itertools.product(space.recompute, space.sequence_parallel, (False, True),
                                    space.offload, space.sharding))

    choices = {"recompute": space.recompute, "sharding": space.sharding,
               "offload": space.offload}
    rows_of = _ChoiceRows(space, grid, f_, l_, only)
    sels = [rows_of(*combo) for combo in combos]
    # the choices that differ in recompute and sharding alone are priced one after another,
    # sharing what their templates share on the same rows (memos: rows -> their keyword
    # values and the compiled pieces' values, templates.call_stage: the model states do not
    # read recompute, the activations not the sharding); the columns keep the choices' order
    inner = max(1, len(combos) // max(1, len(space.recompute)))
    order = sorted(range(len(combos)), key=lambda i: (i % inner // len(space.sharding), i))
    time_cache: dict = {"need": time_rows(combos, sels),
                        "first": time_choices([combos[i] for i in order if sels[i].any()])}
    present: set = set()    # the term columns some row has
    chunks: list = [None] * len(combos)     # each choice's columns, in the choices' order
    memos: dict = {}
    group = None
    for done, i in enumerate(order, 1):
        if progress is not None:
            progress(done, len(combos))
        if i % inner // len(space.sharding) != group:
            group = i % inner // len(space.sharding)
            memos.clear()      # a new (SP, interleaving, offload) group
        if not sels[i].any():
            continue
        idx = np.flatnonzero(sels[i])
        memo = memos.setdefault(idx.tobytes(), {})
        if "kw" not in memo:
            memo["kw"] = _pick(base_kw, idx)
        chunks[i] = {}
        _add_choice(chunks[i].__setitem__, space, grid, (m_, te_, f_, l_), slots, idx, allow,
                    combos[i], memo, present, time_cache if want_time and B is not None else None,
                    per_stage)
    memos.clear()
    save_stage_tables()   # the templates built here, for the next process (compile cache)
    # term columns absent everywhere (NaN on every row) are dropped, not joined
    dropped = set(_TERM_COLUMNS) - present - {"activations", "transients"} - set(_ALLOW)
    cols = {k: _joined(chunks, k) for k in keys if k not in dropped}
    chunks.clear()
    for name, values in choices.items():
        if len(cols[name]):
            cols[name] = np.array(values, dtype=object)[cols[name]]
    return cols


def _joined(chunks: list, key: str):
    """Column ``key`` of the choices' ``chunks`` (each a dict of its rows' columns, ``row``
    the rows themselves, kept to the last; None where no row takes the choice) end to end,
    each piece let go once copied (the pieces and the joined columns together would double a
    search's peak memory, each page faulted in); NaN in the rows of a choice none of whose
    stages has the term."""
    live = [chunk for chunk in chunks if chunk is not None]
    parts = [chunk.get(key) if key == "row" else chunk.pop(key, None) for chunk in live]
    if all(part is not None for part in parts):
        return np.concatenate(parts) if parts else np.array([])
    sizes = [len(chunk["row"]) for chunk in live]
    out = np.full(sum(sizes), np.nan)
    for part, end, size in zip(parts, itertools.accumulate(sizes), sizes):
        if part is not None:
            out[end - size:end] = part
    return out


def _add_choice(put, space: Space, grid: dict, cols: tuple, slots, idx, allow: dict,
                choice: tuple, memo: dict, present: set, time_cache, per_stage: bool) -> None:
    """Write (``put(key, values)``) the columns of rows ``idx`` under one discrete ``choice``:
    knobs, choices, the most-loaded stage's memory and terms (``present`` gains the term
    columns some row has), and the step time (NaN where ``time_cache`` is None: untimed)."""
    m_, te_, f_, l_ = cols
    rc, spf, inter, off, scheme = choice
    choices = {"recompute": space.recompute, "sharding": space.sharding,
               "offload": space.offload}
    best_mem, best_stage, best_parts, stage_mem = _most_loaded_stage(
        slots, memo["kw"], idx, allow, choice, allowance_function(space), memo)
    put("row", idx)
    for k in ("t", "p", "c", "d", "e", "v", "b"):
        put(k, grid[k][idx])
    put("t_e", te_[idx])
    put("f", f_[idx])
    put("l", l_[idx])
    put("m", m_[idx])
    # the choices as their index in the space (object arrays are built once, in
    # evaluate_grid: filling one per choice costs a tenth of a search)
    for name, value in (("recompute", rc), ("sharding", scheme), ("offload", off)):
        put(name, np.full(len(idx), choices[name].index(value), dtype=np.intp))
    put("sequence_parallel", np.full(len(idx), spf, dtype=bool))
    put("memory", best_mem)
    put("stage", best_stage)
    if per_stage:
        put("stage_memory", stage_mem)
    for key in _TERM_COLUMNS:
        col = best_parts.get(key)      # None: no stage of these rows has the term (NaN)
        # a term some stage has and the row's most-loaded stage lacks (experts on a
        # dense stage) is 0 bytes there; a term no stage has stays NaN (dropped below)
        if col is not None and not np.isnan(col).all():
            present.add(key)
            col = np.nan_to_num(col, nan=0.0)
        put(key, col)
    if time_cache is not None:
        secs = choice_times(space, grid, m_, f_, l_, idx, rc, spf, scheme, time_cache)
    else:
        secs = {k: np.full(len(idx), np.nan) for k in ("step_time",) + TIME_PARTS}
    for key, col in secs.items():
        put(key, col)


class _Picked(dict):
    """The keyword values ``kw`` of rows ``rows``: an array indexed the first time its name is
    asked for, a scalar as it is (a stage's compiled pieces read a few of the names)."""

    def __init__(self, kw, rows):
        super().__init__()
        self.kw, self.rows = kw, rows

    def __missing__(self, name):
        val = self.kw[name]
        self[name] = val = val[self.rows] if isinstance(val, np.ndarray) else val
        return val


def _pick(kw, rows):
    """The keyword values of ``rows`` (:class:`_Picked`): arrays indexed, scalars as they are."""
    return _Picked(kw, rows)


@dataclass(frozen=True)
class _Slots:
    """The stages each grid row evaluates: slot j of a row holds the j-th stage
    :func:`check_stages` gives for its (p, f, l) (``stage``: -1 where none), that stage's
    exact parameter counts (``counts``: name -> slots x rows), and which template stands for
    it (``template``: an index into ``templates``, with the factor ``scale`` its decoder-layer
    activations scale by: see :func:`stage_template`)."""

    stage: object
    counts: dict
    template: object
    scale: object
    templates: list

    @property
    def count(self) -> int:
        return len(self.stage)

    def take(self, rows) -> "_Slots":
        """The slots of grid rows ``rows`` (an index array), in that order."""
        return _Slots(self.stage[:, rows], {k: v[:, rows] for k, v in self.counts.items()},
                      self.template[:, rows], self.scale[:, rows], self.templates)


def stage_slots(space: Space, grid: dict) -> _Slots:
    """The stages each row of ``grid`` evaluates, with their parameter counts and templates
    (independent of d, b and the discrete choices): computed once, and taken by row
    (``.take(rows)``) for each :func:`evaluate_grid` of the same layouts."""
    return _stage_slots(space, grid, *splits_of(space, grid))


def _stage_slots(space: Space, grid: dict, f_, l_) -> _Slots:
    """The :class:`_Slots` of ``grid`` with first/last stage sizes ``f_``, ``l_``."""

    t_, p_, e_ = grid["t"], grid["p"], grid["e"]
    te_ = grid.get("t_e", t_)
    n = len(t_)
    # slot j of a row holds the j-th stage check_stages gives for its (p, f, l) (-1: none)
    uq, inv_pfl = unique_rows(p_, f_, l_)
    stages_of = [check_stages(with_split(space, fv, lv), int(pv)) for pv, fv, lv in uq]
    nslot = max(len(sts) for sts in stages_of)
    stage_tab = np.full((len(uq), nslot), -1, dtype=np.int64)
    for u, sts in enumerate(stages_of):
        stage_tab[u, :len(sts)] = sts
    slot_stage = stage_tab[inv_pfl].T.copy()
    # per slot: the stage's exact parameter counts (memsym.training.stage_counts), computed
    # once per unique (t, p, e, f, l, stage); and which template stands for it (with the
    # factor its decoder-layer activations scale by: see stage_template)
    # (the names are the same for every row; row 0's own split, which may be uneven)
    names = [name for name, _ in stage_count_floats(with_split(space, f_[0], l_[0]),
                                                    int(t_[0]), int(p_[0]), int(e_[0]), 0,
                                                    int(te_[0]))]
    counts = {name: np.zeros((nslot, n)) for name in names}
    tmpl_id = np.zeros((nslot, n), dtype=np.int64)
    scale = np.ones((nslot, n))
    tmpl_rep: list = []
    tmpl_index: dict = {}
    for j in range(nslot):
        live = np.flatnonzero(slot_stage[j] >= 0)
        if not len(live):
            continue
        uniq, inv = unique_rows(t_[live], p_[live], e_[live], f_[live], l_[live],
                                 slot_stage[j, live], te_[live])
        table = np.array([[v for _, v in stage_count_floats(with_split(space, key[3], key[4]),
                                                            int(key[0]), int(key[1]),
                                                            int(key[2]), int(key[5]),
                                                            int(key[6]))]
                          for key in uniq]).reshape(-1, len(names))
        for col, name in enumerate(names):
            counts[name][j, live] = table[inv, col]
        ids = np.empty(len(uniq), dtype=np.int64)
        fac = np.empty(len(uniq))
        for u, key in enumerate(uniq):
            rep, factor = stage_template(space, int(key[1]), int(key[3]), int(key[4]),
                                          int(key[5]))
            if rep not in tmpl_index:
                tmpl_index[rep] = len(tmpl_rep)
                tmpl_rep.append(rep)
            ids[u], fac[u] = tmpl_index[rep], factor
        tmpl_id[j, live] = ids[inv]
        scale[j, live] = fac[inv]
    return _Slots(slot_stage, counts, tmpl_id, scale, tmpl_rep)


class _ChoiceRows:
    """Which grid rows take a discrete choice: called with (recompute, SP, interleaved,
    offload, sharding), the boolean mask of the rows it applies to."""

    def __init__(self, space: Space, grid: dict, f_, l_, only):
        x = space.arch
        self.grid, self.f_, self.l_, self.only, self.arch = grid, f_, l_, only, x
        self.knob_k = grid_knobs(space, grid)
        # the most layers on one rank and in one model chunk of a row (block-N choices beyond
        # a chunk are full recompute)
        self.rank_max = most_layers_per_rank(x.num_layers, grid["p"], f_, l_)
        self.chunk_max = self.rank_max / grid["v"]
        self.one_kind = len(set(moe_layer_pattern(x))) == 1
        self._refused: dict = {}    # (SP, offload, scheme) -> rows a choice rule refuses

    def __call__(self, rc, spf, inter, off, scheme):
        t_, v_, f_, l_, only = self.grid["t"], self.grid["v"], self.f_, self.l_, self.only
        sel = (v_ > 1) if inter else (v_ == 1)
        if spf:
            sel &= t_ > 1          # SP is a choice only with t > 1 (Megatron turns it off at 1)
        method, n_layers = recompute_layers(rc) or (None, None)
        if method == "block":
            # block N with N >= every chunk's layers is full recompute: one row, not two;
            # a model of one layer kind takes it on even splits (templates.py)
            sel &= n_layers < self.chunk_max
            if self.one_kind:
                sel &= (f_ == 0) & (l_ == 0)
        elif method == "every":
            # every-N wraps no block of a rank with fewer than N: that is no recompute
            sel &= n_layers <= self.rank_max
        sel &= ~self._refused_by_rules(spf, off, scheme)
        if only is not None:
            sel &= ((only["recompute"] == rc) & (only["sharding"] == scheme)
                    & (only["sequence_parallel"] == spf) & (only["offload"] == off))
        return sel

    def _refused_by_rules(self, spf, off, scheme):
        """The rows the choice rules refuse under (SP, offload, scheme): the same for every
        recompute and interleaving, so computed once per triple."""

        key = (spf, off, scheme)
        if key not in self._refused:
            refused = np.zeros(len(self.grid["t"]), dtype=bool)
            for mask in _rules.masks(self.arch, choice_knobs(self.knob_k, spf, off, scheme),
                                     CHOICE_RULES).values():
                refused |= mask
            self._refused[key] = refused
        return self._refused[key]


def _most_loaded_stage(slots: _Slots, kw: dict, idx, allow: dict, choice: tuple,
                       allowances, memo: dict | None = None) -> tuple:
    """``(memory, stage, parts, stage_memory)`` of rows ``idx`` under one discrete choice:
    the most-loaded stage's bytes, its index and its terms, and every slot's bytes
    (``allowances``: the space's :func:`memsym.search.templates.allowance_function`)."""

    rc, spf, inter, off, scheme = choice
    nslot, slot_stage = slots.count, slots.stage
    best_mem = np.full(len(idx), -np.inf)
    best_stage = np.zeros(len(idx), dtype=np.int64)
    best_parts: dict = {}      # the terms some stage has (NaN on rows where another wins)
    stage_mem = np.full((len(idx), nslot), np.nan)
    for j in range(nslot):
        # the slot's rows, keyword values and templates: the same for every choice of the
        # memo's rows (the counts and knobs do not read the choice), indexed once
        got = None if memo is None else memo.get(("slot", j))
        if got is None:
            got = _slot_values(slots, kw, idx, j)
            if memo is not None:
                memo[("slot", j)] = got
        ridx, rows, subs = got
        if not len(ridx):
            continue
        parts = {"activations": np.zeros(len(ridx)), "transients": np.zeros(len(ridx))}
        for q, sub, skw, fac_q in subs:
            sub_space, pq, stq = slots.templates[q]
            acts, layer, phases, states = call_stage(stage_function(
                sub_space, rc, spf, inter, off, scheme, pq, stq), skw,
                None if memo is None else memo.setdefault((j, q), {}))
            # the decoder layers' activations scale with the stage's layer count
            # (one layer kind per shared template, stage_template: fac_q)
            act_q = acts + fac_q * layer
            *running, to = phases
            peak = functools.reduce(np.maximum, running, to - act_q)
            parts["activations"][sub] = act_q
            parts["transients"][sub] = peak
            for key, value in states.items():
                parts.setdefault(key, np.zeros(len(ridx)))[sub] = value
        # the allowances are over what PyTorch's allocator holds; the buffers outside it
        # (memsym.training.outside_allocator) are added after them
        allocated = sum(val for key, val in parts.items() if key not in _OUTSIDE)
        outside = sum(val for key, val in parts.items() if key in _OUTSIDE)
        akw = dict(allow, M_alloc=allocated)
        for key, call in zip(allowances.state_keys, allowances.calls):
            parts[key] = np.broadcast_to(np.asarray(call(akw), dtype=float), len(ridx))
        mem = allocated + sum(parts[key] for key in _ALLOW) + outside
        stage_mem[ridx, j] = mem
        # strictly larger: on a tie the lower stage stays (as training_memory picks)
        better = mem > best_mem[ridx]
        tgt = ridx[better]
        best_mem[tgt] = mem[better]
        best_stage[tgt] = slot_stage[j, rows[better]]
        for key, arr2 in parts.items():
            best_parts.setdefault(key, np.full(len(idx), np.nan))[tgt] = arr2[better]
    return best_mem, best_stage, best_parts, stage_mem


def _slot_values(slots: _Slots, kw: dict, idx, j: int) -> tuple:
    """``(ridx, rows, [(template, its rows in ridx, their keyword values, their decoder
    layers' scale)])`` of slot ``j`` over rows ``idx``: ``ridx`` the positions in ``idx`` of
    the rows that have the slot, ``rows`` those rows (``idx[ridx]``); the keyword values the
    knobs ``kw`` and the slot's counts."""
    ridx = np.flatnonzero(slots.stage[j, idx] >= 0)
    rows = idx[ridx]
    if not len(ridx):
        return ridx, rows, []
    # a slot every row has (the first and last stage) takes the rows as they are
    rkw = _pick(kw, slice(None) if len(ridx) == len(idx) else ridx)
    rkw.update({name: arr[j, rows] for name, arr in slots.counts.items()})
    tid = slots.template[j, rows]
    subs = []
    for q in distinct(tid):
        sub = np.flatnonzero(tid == q)
        subs.append((q, sub, rkw if len(sub) == len(ridx) else _pick(rkw, sub),
                     slots.scale[j, rows[sub]]))
    return ridx, rows, subs


def binding_columns(cols: dict):

    keys = [k for k in _TERM_COLUMNS if k in cols]
    if not len(cols["memory"]):
        return np.array([], dtype=object)
    # the first largest term of each row (argmax over the stacked terms, NaN as -1), as a
    # running maximum: no (terms x rows) matrix, tens of MB a new process would fault in
    best = np.nan_to_num(cols[keys[0]], nan=-1.0)
    which = np.zeros(len(best), dtype=np.intp)
    for i, key in enumerate(keys[1:], 1):
        col = np.nan_to_num(cols[key], nan=-1.0)
        better = col > best
        best = np.where(better, col, best)
        which[better] = i
    return np.array(keys, dtype=object)[which]
