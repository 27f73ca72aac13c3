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
from ..numeric import distinct, unique_rows
from ..training import (ALLOWANCE_KEYS as _ALLOW, OUTSIDE_ALLOCATOR_KEYS as _OUTSIDE,
                        allowance_values, arch_values)

from ..model import moe_layer_pattern
from .space import Space, CHOICE_RULES, KNOBS, recompute_layers, states_scheme
from .job_fields import row_overlaps
from .grid import choice_knobs, grid_knobs, splits_of, with_split
from .exact import TERM_COLUMNS as _TERM_COLUMNS
from .templates import (allowance_function, call_stage, check_stages,
                        save_stage_tables, stage_count_floats, stage_function, stage_template)
from ..frameworks import FRAMEWORK
from ..timing.pipeline import most_layers_per_rank
from ..timing.step import Settings, overlap_of, step_time_grid
from ..job import Training
from ..job_record import recompute_modules_of


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
    out_cols: dict = {k: [] for k in ("row", "t", "p", "c", "d", "e", "v", "b", "t_e", "m",
                                       "recompute", "sharding", "sequence_parallel", "offload",
                                       "memory",
                                       "stage", "step_time", "f", "l") + TIME_PARTS
                      + _TERM_COLUMNS}
    if per_stage:
        out_cols["stage_memory"] = []
    if n == 0:
        return {k: np.array([]) for k in out_cols}
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
    time_cache: dict = {"need": _time_rows(combos, sels)}
    present: set = set()    # the term columns some row has

    # the choices that differ in recompute and sharding alone are priced one after another,
    # sharing what their templates share on the same rows (memos: rows -> their keyword
    # values and the compiled pieces' values, templates.call_stage: the model states do not
    # read recompute, the activations not the sharding); the columns keep the choices' order
    inner = max(1, len(combos) // max(1, len(space.recompute)))
    chunks: list = [None] * len(combos)
    memos: dict = {}
    group = None
    for done, i in enumerate(sorted(range(len(combos)), key=lambda i: (
            i % inner // len(space.sharding), i)), 1):
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
        chunks[i] = {k: [] for k in out_cols}
        _add_choice(chunks[i], space, grid, (m_, te_, f_, l_), slots, idx, allow, combos[i],
                    memo, present, time_cache if want_time and B is not None else None,
                    per_stage)
    for chunk in chunks:
        for key, parts in (chunk or {}).items():
            out_cols[key] += parts
    save_stage_tables()   # the templates built here, for the next process (compile cache)
    # term columns absent everywhere (NaN on every row) are dropped, not concatenated
    for key in set(_TERM_COLUMNS) - present - {"activations"} - set(_ALLOW):
        del out_cols[key]
    cols = {k: (np.concatenate(v) if v else np.array([])) for k, v in out_cols.items()}
    for name, values in choices.items():
        if out_cols[name]:
            cols[name] = np.array(values, dtype=object)[cols[name]]
    return cols


def _add_choice(out_cols: dict, space: Space, grid: dict, cols: tuple, slots, idx, allow: dict,
                choice: tuple, memo: dict, present: set, time_cache, per_stage: bool) -> None:
    """Append to ``out_cols`` the columns of rows ``idx`` under one discrete ``choice``:
    knobs, choices, the most-loaded stage's memory and terms (``present`` gains the term
    columns some row has), and the step time (NaN where ``time_cache`` is None: untimed)."""
    m_, te_, f_, l_ = cols
    rc, spf, inter, off, scheme = choice
    choices = {"recompute": space.recompute, "sharding": space.sharding,
               "offload": space.offload}
    best_mem, best_stage, best_parts, stage_mem = _most_loaded_stage(
        slots, memo["kw"], idx, allow, choice, allowance_function(space), memo)
    out_cols["row"].append(idx)
    for k in ("t", "p", "c", "d", "e", "v", "b"):
        out_cols[k].append(grid[k][idx])
    out_cols["t_e"].append(te_[idx])
    out_cols["f"].append(f_[idx])
    out_cols["l"].append(l_[idx])
    out_cols["m"].append(m_[idx])
    # the choices as their index in the space (object arrays are built once, in
    # evaluate_grid: filling one per choice costs a tenth of a search)
    for name, value in (("recompute", rc), ("sharding", scheme), ("offload", off)):
        out_cols[name].append(np.full(len(idx), choices[name].index(value), dtype=np.intp))
    out_cols["sequence_parallel"].append(np.full(len(idx), spf, dtype=bool))
    out_cols["memory"].append(best_mem)
    out_cols["stage"].append(best_stage)
    if per_stage:
        out_cols["stage_memory"].append(stage_mem)
    for key in _TERM_COLUMNS:
        col = best_parts[key]
        # a term some stage has and the row's most-loaded stage lacks (experts on a
        # dense stage) is 0 bytes there; a term no stage has stays NaN (dropped below)
        if not np.isnan(col).all():
            present.add(key)
            col = np.nan_to_num(col, nan=0.0)
        out_cols[key].append(col)
    if time_cache is not None:
        secs = _choice_times(space, grid, m_, f_, l_, idx, rc, spf, scheme, time_cache)
    else:
        secs = {k: np.full(len(idx), np.nan) for k in ("step_time",) + TIME_PARTS}
    for key, col in secs.items():
        out_cols[key].append(col)


def _pick(kw, rows):
    """The keyword values of ``rows``: arrays indexed, scalars as they are."""

    return {k: (val[rows] if isinstance(val, np.ndarray) else val) for k, val in kw.items()}


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
    best_parts = {key: np.full(len(idx), np.nan) for key in _TERM_COLUMNS}
    stage_mem = np.full((len(idx), nslot), np.nan)
    for j in range(nslot):
        ridx = np.flatnonzero(slot_stage[j, idx] >= 0)
        if not len(ridx):
            continue
        rows = idx[ridx]
        # a slot every row has (the first and last stage) takes the rows as they are
        rkw = dict(kw) if len(ridx) == len(idx) else _pick(kw, ridx)
        rkw.update({name: arr[j, rows] for name, arr in slots.counts.items()})
        parts = {"activations": np.zeros(len(ridx))}
        tid = slots.template[j, rows]
        for q in distinct(tid):
            sub = np.flatnonzero(tid == q)
            skw = rkw if len(sub) == len(ridx) else _pick(rkw, sub)
            sub_space, pq, stq = slots.templates[q]
            acts, layer, phases, states = call_stage(stage_function(
                sub_space, rc, spf, inter, off, scheme, pq, stq), skw,
                None if memo is None else memo.setdefault((j, q), {}))
            # the decoder layers' activations scale with the stage's layer count
            # (one layer kind per shared template, stage_template)
            fac_q = slots.scale[j, rows[sub]]
            act_q = acts + fac_q * layer
            *running, to = phases
            peak = functools.reduce(np.maximum, running, to - act_q)
            parts["activations"][sub] = act_q + peak
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
            best_parts[key][tgt] = arr2[better]
    return best_mem, best_stage, best_parts, stage_mem


def _choice_times(space: Space, grid: dict, m_, f_, l_, idx, rc, spf, scheme,
                  time_cache: dict) -> dict:
    """The step time and its parts of rows ``idx`` under one discrete choice (``time_cache``:
    ``"need"``, the rows of each time key (:func:`_time_rows`), and the times priced)."""

    n = len(grid["t"])
    t_ = grid["t"]
    # the step time depends on the choice only through (recompute, SP, DDP / ZeRO-2 (its
    # gradients reduced every micro-batch) / ZeRO-3 / FSDP / a sharded optimizer): priced once
    # per such triple over every row, then indexed (a Megatron-FSDP strategy row is priced as
    # the scheme whose states it keeps)
    scheme = states_scheme(scheme)
    tkey = _time_key(rc, spf, scheme)
    if tkey not in time_cache:
        rows_t = np.flatnonzero(time_cache["need"][tkey])
        # the expert-TP size is t where the grid gives none; every other knob is in the grid
        knobs = {k: (grid.get(k, t_) if k == "t_e" else grid[k])[rows_t] for k in KNOBS}
        full = _step_time(space, knobs, m_[rows_t], f_[rows_t], l_[rows_t], rc, spf, scheme)
        pos = np.full(n, -1, dtype=np.int64)
        pos[rows_t] = np.arange(len(rows_t))
        time_cache[tkey] = (full, pos)
    full, pos = time_cache[tkey]
    return {k: col[pos[idx]] for k, col in full.items()}


def _time_rows(combos, sels) -> dict:
    """``time key -> rows``: the step time is priced once per :func:`_time_key` over the
    rows some choice of it takes (a row every choice rule of the key refuses, a MoE row
    without SP at t > 1, is never priced)."""
    need: dict = {}
    for (rc, spf, _, _, scheme), sel in zip(combos, sels):
        key = _time_key(rc, spf, scheme)
        need[key] = need.get(key, False) | sel
    return need


def _time_key(rc, spf, scheme) -> tuple:
    """What a row's step time depends on among its discrete choices: recompute, SP and DDP /
    ZeRO-2 / ZeRO-3 / FSDP / a sharded optimizer (a Megatron-FSDP strategy row priced as the
    scheme whose states it keeps)."""
    scheme = states_scheme(scheme)
    return (rc, spf, scheme if scheme in ("ddp", "zero2", "zero3", "fsdp") else "sharded")


#: The step-time breakdown columns of a search [s]: the decoder layers' GEMM and attention
#: compute, memory-bound operations, exposed communication (TP, EP, CP, PP, DP), pipeline
#: bubble, optimizer step, and the rest (embedding, output layer and loss on the end stages)
#: (:func:`memsym.timing.step.step_time_grid`; they add up to the step).
TIME_PARTS = ("time_compute", "time_memory", "time_comm", "time_bubble", "time_optimizer",
              "time_other")


def launch_overlaps(framework: str, sharding: str) -> dict:
    """The overlap options every row is priced with, as :func:`memsym.job.job` options.

    The search proposes layouts to launch, so it prices them with the data-parallel overlaps
    the framework can run: Megatron-LM's ``--overlap-grad-reduce`` and, with a sharded
    optimizer, ``--overlap-param-gather`` (off unless given); DeepSpeed's ``overlap_comm``,
    which overlaps the gradient reduction and, under ZeRO-3 only, prefetches the parameter
    all-gather (ZeRO-1/2 gather the updated parameters inside the step); torchtitan's FSDP2
    and DDP overlap by default.  A row fed back to ``memsym estimate`` with these gets its
    step time.

    Examples
    --------
    >>> launch_overlaps("megatron", "distributed-optimizer")
    {'overlap_grad_reduce': True, 'overlap_param_gather': True}
    >>> launch_overlaps("megatron", "ddp"), launch_overlaps("torchtitan", "fsdp")
    ({'overlap_grad_reduce': True}, {})
    >>> launch_overlaps("deepspeed", "zero2")
    {'overlap_grad_reduce': True, 'overlap_param_gather': False}
    >>> launch_overlaps("megatron", "no_shard")       # Megatron-FSDP no_shard: DDP's states
    {'overlap_grad_reduce': True}
    """
    return FRAMEWORK[framework].launch_overlap_options(states_scheme(sharding))


def _search_overlap(space: Space, sharding: str, comm: dict | None = None):
    """The :class:`memsym.timing.step.Overlap` of :func:`launch_overlaps` (or of the space's
    own ``overlaps``, a job's) and ``comm`` (the row's carried communication fields:
    :meth:`Space.comm_fields`), as the job with those options gets it
    (:func:`memsym.timing.step.overlap_of`)."""
    framework = space.framework
    given = launch_overlaps(framework, sharding) if space.overlaps is None \
        else row_overlaps(space.overlaps, framework, sharding)
    held = {k: v for k, v in space.held if k in ("overlap_moe_expert_parallel_comm",
                                                  "overlap_p2p_comm")}   # a job's own
    return overlap_of(Training(framework=framework, sharding=sharding, **given, **held,
                               **(comm or {})))


def _step_time(space: Space, knobs: dict, m_, f_, l_, rc: str, spf: bool, scheme: str) -> dict:
    """Seconds per step [s] of each row and its breakdown (:data:`TIME_PARTS`), predicted by
    :func:`memsym.timing.step.step_time_grid`: per-stage GEMMs after the TP/SP/CP/EP splits
    on the GPU's efficiency curve (``efficiency``, when given, is the explicit achieved GEMM
    efficiency ``eta_gemm``), memory-bound work at HBM bandwidth, collectives on the links
    their groups cross with Megatron's default overlaps, the exact schedule's bubble (uneven
    end stages included), the exposed DP sync and the optimizer step.

    Sharding enters as Megatron's distributed optimizer (gradient reduce-scatter + parameter
    all-gather once per step, overlapped) for ZeRO-1/2, as an all-reduce for DDP.  ZeRO-3 /
    FSDP gathers the parameters in every micro-batch's forward and again in its backward and
    reduce-scatters the gradients in every backward (DeepSpeed stage 3, FSDP2's
    reshard_after_forward): m (AG + AG + RS), hidden behind the pipeline's compute where it
    fits (prefetching), the rest exposed (assumption: the collectives' un-overlapped times
    from :func:`memsym.timing.step.step_time_grid` with :meth:`Overlap.none`, AG = RS 2/b_g)."""

    x = space.arch
    L_ = x.num_layers
    n = len(knobs["t"])
    if n == 0:
        return {k: np.zeros(0) for k in ("step_time",) + TIME_PARTS}
    p_ = knobs["p"]
    method, n_layers = recompute_layers(rc) or (None, None)
    frac = 1.0
    if method == "block":
        # block N reruns min(N, chunk) of each chunk's layers (step_time's mean chunk L/(p v))
        chunk = L_ / (p_ * knobs["v"])
        frac = np.minimum(n_layers, chunk) / chunk
    elif method == "every":
        # every N-th block of the rank with the most layers (as step_time prices it)
        n_rank = most_layers_per_rank(L_, p_, f_, l_)
        frac = np.floor(n_rank / n_layers) / n_rank
    st = Settings(seq_length=space.seq_length, micro_batch_size=int(knobs["b"][0]),
                  recompute="full" if method is not None else rc,
                  recompute_fraction=frac, sequence_parallel=bool(spf),
                  # block skips the MTP layer's recompute (multi_token_prediction.py:1630)
                  mtp_recompute=method != "block",
                  flash_attention=space.flash_attention, dropout=space.dropout,
                  precision=space.precision if space.precision in ("bf16", "fp16", "fp8", "fp32", "fp4")
                  else "bf16", fp8_recipe=space.fp8_recipe if space.precision == "fp8" else None,
                  distributed_optimizer=scheme != "ddp",
                  gather_per_microbatch=scheme in ("zero3", "fsdp"),
                  reduce_per_microbatch=scheme == "zero2",
                  whole_embedding=FRAMEWORK[space.framework].tp_whole_embedding,
                  gathered_logits=FRAMEWORK[space.framework].tp_gathered_logits,
                  pipelined_fsdp=scheme == "fsdp" and FRAMEWORK[space.framework].torch_pipelining,
                  torch_rounds=FRAMEWORK[space.framework].torch_pipelining,
                  schedule="gpipe" if space.schedule == "gpipe" else "1f1b",
                  # the carried dispatcher prices its all-to-all as estimate does (DeepEP /
                  # HybridEP send a token once per rank and NVLink domain: timing.flex_dispatch)
                  moe_dispatcher=space.moe_dispatcher, optimizer=space.optimizer,
                  # the carried userbuffers config, where the row runs the TP overlap
                  tp_overlap_cfg=space.comm_fields(bool(spf)).get("tp_comm_overlap_cfg"),
                  **_held_settings(space, rc))
    even = (f_ == 0) & (l_ == 0)
    # the even split as explicit end stages of L/p layers (the middle then holds L/p too)
    first = np.where(f_ > 0, f_, L_ / p_)
    last = np.where(l_ > 0, l_, L_ / p_)
    one_given = ~even & ((f_ == 0) | (l_ == 0))
    if one_given.any():        # one end given: the others split the rest evenly
        inner = p_ - 1
        rest = np.where(f_ > 0, (L_ - f_) / np.maximum(inner, 1), (L_ - l_) / np.maximum(inner, 1))
        first = np.where(one_given & (f_ == 0), rest, first)
        last = np.where(one_given & (l_ == 0), rest, last)
    eta = None if space.efficiency is None else float(space.efficiency)
    out = step_time_grid(x, space.gpu.name, t=knobs["t"], p=p_, d=knobs["d"], c=knobs["c"],
                         e=knobs["e"], t_e=knobs["t_e"], v=knobs["v"], b=knobs["b"],
                         m=np.maximum(m_, 1), settings=st, cluster=space.cluster,
                         overlap=_search_overlap(space, scheme, space.comm_fields(bool(spf))),
                         eta_gemm=eta, first_stage_layers=first, last_stage_layers=last,
                         mtp_layers=x.mtp_num_layers or 0)
    col = {k: np.broadcast_to(np.asarray(out[k], dtype=float), (n,)) for k in (
        "step", "compute", "memory", "bubble", "optimizer", "tp", "ep", "cp", "pp", "dp",
        "pipeline")}
    res = {"step_time": col["step"], "time_compute": col["compute"], "time_memory": col["memory"],
           "time_comm": col["tp"] + col["ep"] + col["cp"] + col["pp"] + col["dp"],
           "time_bubble": col["bubble"], "time_optimizer": col["optimizer"]}
    other = res["step_time"] - sum(res[k] for k in TIME_PARTS[:-1])
    # what the named parts leave (the exact schedule's makespan beyond them); a float
    # residue of the subtraction is not a part
    res["time_other"] = np.where(np.abs(other) <= 1e-9 * np.abs(res["step_time"]), 0.0, other)
    return res


def _held_settings(space: Space, rc: str) -> dict:
    """The :class:`memsym.timing.records.Settings` fields a job's held settings give
    (:data:`memsym.search.job_fields.HELD_FIELDS`), as the job's step time reads them: FP8
    parameter gathers, the reduced gradient's width, the selective recompute's modules, Muon's
    TP mode, Newton-Schulz steps and Nesterov, MLA's down-projection fusion, the bias-activation
    fusion (off: a clamped GLU's eager kernels, memsym.timing.moe_eager) and the BF16 first /
    last layers of an FP8 / FP4 run."""
    held = dict(space.held)
    out = {"fp8_param_gather": bool(held.get("fp8_param_gather", False)),
           "grad_bytes": 2 if held.get("grad_dtype") in ("bf16", "fp16") else 4}
    # Muon's and MLA's switches, as memsym.timing.step reads a job's (Settings' defaults
    # are the Training's: a field not held keeps it)
    for field, name in (("muon_tp_mode", "muon_tp_mode"), ("muon_num_ns_steps", "muon_ns_steps"),
                        ("muon_nesterov", "muon_nesterov"),
                        ("mla_down_proj_fusion", "mla_down_proj_fusion"),
                        ("bias_activation_fusion", "bias_activation_fusion")):
        if field in held:
            out[name] = held[field]
    if rc == "selective" and held.get("recompute_modules") is not None:
        out["recompute_modules"] = recompute_modules_of(space.training(recompute=rc))
    if space.precision in ("fp8", "fp4") and any(held.get("bf16_layers", ())):
        out["bf16_layers"] = tuple(held["bf16_layers"])   # first_last_layers_bf16, as step.py
    return out


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
