"""The search entry point (:func:`search`) and its result (:class:`SearchResult`): every
layout that passes the rules, priced, ranked, explained.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import InvalidValueError, NoFitError, StepTimeNotModelledError, UnknownNameError
from ..frameworks import FRAMEWORK
from ..symbols import N_bkt
from ..terms.transients import DEFAULTS as _TRANSIENT_DEFAULTS, deepspeed_ipg_buckets
from ..training.traits import activation_width
from .. import rules as _rules
from ..training import OUTSIDE_ALLOCATOR_KEYS as _OUTSIDE

from .job_fields import states_scheme
from .space import RULES, Space, CHOICE_RULES, KNOBS, from_job, positive_whole, make_space
from .grid import choice_knobs, grid_knobs, raw_grid, rule_masks
from .evaluate import binding_columns, evaluate_grid
from .step_times import TIME_PARTS
from .exact import TERM_COLUMNS, exact_row
from ..timing.gemm import shape_of


def _larger_sizes(space: Space, held: tuple) -> tuple:
    """The parallel sizes a no-fit hint may ask to enlarge: TP and PP, or where the framework
    holds its sizes (:attr:`memsym.frameworks.Framework.searched_sizes`) those a search tries
    when named (:attr:`~memsym.frameworks.Framework.named_sizes`: DeepSpeed's AutoTP and
    Ulysses, never a pipeline); none the caller cannot change (``held``)."""
    fw = FRAMEWORK[space.framework]
    sizes = fw.named_sizes if fw.searched_sizes else ("tp", "pp")
    return tuple(k for k in sizes if k not in held)


def no_fit_hint(space: Space, tight: int | None = None, held: tuple = ()) -> str:
    """What else could fit when no layout of ``space`` does, in one line: the tight layouts
    (within the GPU only without the fragmentation margin; ``tight``: how many, None when not
    counted), and the memory-saving choices the space leaves out, save those the caller
    cannot change (``held``: knob names, e.g. what ``--emit deepspeed``'s file cannot spell).

    Examples
    --------
    >>> sp_ = make_space("llama2-7b", "a100-80gb", recompute=["none"])
    >>> print(no_fit_hint(sp_))
    layouts are judged with the fragmentation margin, so a tight one (within the GPU only without it) is excluded: --fragmentation 0 admits it; more could fit with --recompute full, --offload optimizer
    >>> print(no_fit_hint(sp_, tight=0))
    more could fit with --recompute full, --offload optimizer
    >>> print(no_fit_hint(sp_, tight=0, held=("recompute",)))
    more could fit with --offload optimizer

    A DeepSpeed search holds TP and CP where none is named and never pipelines: a larger
    ``--tp`` (AutoTP) or ``--cp`` (Ulysses), no ``--pp``:

    >>> ds = make_space("llama2-7b", "a100-80gb", framework="deepspeed", recompute=["none"])
    >>> print(no_fit_hint(ds, tight=0))
    more could fit with --recompute full, larger --tp/--cp, --offload optimizer
    """
    more = []
    if "recompute" not in held and not any(str(r).startswith("full") for r in space.recompute):
        more.append("--recompute full")
    sizes = _larger_sizes(space, held)
    if sizes and any(getattr(space, k) is not None for k in sizes):
        more.append("larger " + "/".join(f"--{k}" for k in sizes))
    if tuple(space.offload) == ("none",):
        more.append("--offload optimizer")
    margin = dict(space.allowances).get("fragmentation", 1)
    if not margin or tight == 0:
        first = ""
    elif tight is None:
        first = ("layouts are judged with the fragmentation margin, so a tight one (within the "
                 "GPU only without it) is excluded: --fragmentation 0 admits it")
    else:
        first = "--fragmentation 0 admits the tight layout" + ("s" if tight > 1 else "")
    more_text = "more could fit with " + ", ".join(more) if more else ""
    return "; ".join(x for x in (first, more_text) if x)


@dataclass
class SearchResult:
    """The feasible layouts of one search, as numpy columns, with ranking helpers.

    Attributes
    ----------
    space : Space
    gpus : int
        Number of GPUs (world size) [GPUs].
    columns : dict
        Knobs (``t p c d e v b m``), choices (``recompute sharding sequence_parallel offload``),
        ``memory`` (the most-loaded GPU [bytes]), ``stage`` (its pipeline stage), one column
        per grouped term (``weights`` ... ``activations`` ... ``fragmentation``),
        ``headroom`` (capacity - memory [bytes]), ``fits``, ``step_time`` [s] (NaN without a
        global batch) and its breakdown :data:`TIME_PARTS` [s], ``f``/``l`` (first/last stage
        layers, 0: even split), ``binding`` (the largest term's key).
    excluded : dict
        Rule name -> number of raw layouts it excludes (a layout may break several).
    raw : int
        Raw layouts considered before the rules.
    seconds : float
        Wall time of the search.
    timed : bool
        False where the timing layer refuses the model (:class:`StepTimeNotModelledError`):
        no step time, ranked by headroom even with a global batch.
    """

    space: Space
    gpus: int
    columns: dict
    excluded: dict
    raw: int
    seconds: float = 0.0
    valid: int = 0
    timed: bool = True
    notes: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.columns["memory"])

    @property
    def ranked_by(self) -> str:
        return "step time" if self.priced else "memory headroom"

    @property
    def priced(self) -> bool:
        """Whether the rows hold a step time: a global batch, and a model the timing prices."""
        return self.space.global_batch_size is not None and self.timed

    def order(self, fitting: bool = True):
        """Row indices best first: step time (then headroom) with a global batch, else headroom."""

        col = self.columns
        idx = np.flatnonzero(col["fits"]) if fitting else np.arange(len(self))
        if self.priced:
            keys = (-col["headroom"][idx], col["step_time"][idx])   # lexsort: last key first
        else:
            keys = (-col["headroom"][idx],)
        return idx[np.lexsort(keys)]

    def row(self, i: int) -> dict:
        """One layout as a plain dict (knobs, choices, bytes per grouped term, step time)."""
        col = self.columns
        out = {k: int(col[k][i]) for k in ("t", "p", "c", "d", "e", "v", "b")}
        out["t_e"] = int(col["t_e"][i]) if "t_e" in col else out["t"]
        out["m"] = None if col["m"][i] <= 0 else int(col["m"][i])
        for k in ("recompute", "sharding", "offload"):
            out[k] = str(col[k][i])
        out["sequence_parallel"] = bool(col["sequence_parallel"][i])
        out["first_stage_layers"] = int(col["f"][i]) or None
        out["last_stage_layers"] = int(col["l"][i]) or None
        out["stage"] = int(col["stage"][i])
        out["memory"] = float(col["memory"][i])
        out["headroom"] = float(col["headroom"][i])
        out["fits"] = bool(col["fits"][i])
        st = float(col["step_time"][i])
        out["step_time"] = None if math.isnan(st) else st
        out["time"] = None if math.isnan(st) else {
            k[len("time_"):]: float(col[k][i]) for k in TIME_PARTS}
        out["binding"] = str(col["binding"][i])
        # a buffer outside the allocator that another row has and this one lacks (the
        # userbuffers of tp_comm_overlap on a row without SP) is no term of this row; no
        # transients where the peak is the steady sum, as memsym estimate reports it
        out["bytes"] = {k: float(col[k][i]) for k in self.term_keys
                        if k in col and not (k in _OUTSIDE and math.isnan(col[k][i]))
                        and not (k == "transients" and col[k][i] == 0)}
        return out

    @property
    def term_keys(self) -> tuple:
        return tuple(k for k in TERM_COLUMNS if k in self.columns)

    def top(self, k: int = 10) -> list:
        """The ``k`` best fitting layouts as dicts (see :meth:`row`)."""
        return [self.row(int(i)) for i in self.order()[:k]]

    def best(self) -> dict:
        """The best fitting layout; :class:`NoFitError` naming the closest one when none fits."""
        idx = self.order()
        if len(idx):
            return self.row(int(idx[0]))
        raise self.no_fit()

    def no_fit(self, held: tuple = ()) -> NoFitError:
        """The error of a search where nothing fits, with :func:`no_fit_hint`'s line (``held``:
        the knobs the caller cannot change)."""

        if not len(self):
            return NoFitError(f"no layout of {self.gpus} GPUs passes the rules ("
                              + ", ".join(f"{k}: {v}" for k, v in self.excluded.items() if v) + ")")
        col = self.columns
        i = int(np.argmin(col["memory"]))
        r = self.row(i)
        # judged with the fragmentation margin (conservative); the layouts within the capacity
        # only without it are "tight" (memsym.terms.allowances.VERDICTS): say how many
        tight = int(np.sum(col["memory"] - col["fragmentation"] <= self.space.capacity)) \
            if "fragmentation" in col else 0
        return NoFitError(
            f"no layout of {self.gpus} x {self.space.gpu.name} fits: the least memory is "
            f"{r['memory'] / 1e9:.4g} GB > {self.space.capacity / 1e9:.4g} GB "
            f"(t={r['t']}, p={r['p']}, c={r['c']}, d={r['d']}, "
            + (f"e={r['e']}, t_e={r.get('t_e') or r['t']}, " if self.space.arch.num_experts
               else "") + f"b={r['b']}, {r['recompute']} "
            f"recompute, {r['sharding']}; binding term: {r['binding']})"
            + (f"; {tight} layout{'s' if tight > 1 else ''} would fit without the fragmentation "
               "margin (tight: the allocator's reserve decides; expandable segments keep it "
               "small)" if tight else ""),
            binding=(r["binding"],), floor=exact_row(self.space, r)["bytes"]["total"],
            hint=no_fit_hint(self.space, tight, held))

    def pareto(self) -> list:
        """Fitting layouts on the Pareto front of headroom (more is better) vs step time
        (less is better), fastest first.  Without a global batch: the most headroom only."""

        col = self.columns
        idx = np.flatnonzero(col["fits"])
        if not len(idx):
            return []
        if not self.priced:
            return [self.row(int(idx[np.argmax(col["headroom"][idx])]))]
        order = idx[np.lexsort((-col["headroom"][idx], col["step_time"][idx]))]
        front, best_head = [], -np.inf
        for i in order:
            if col["headroom"][i] > best_head:
                front.append(self.row(int(i)))
                best_head = col["headroom"][i]
        return front

    def largest(self, knob: str = "b") -> dict:
        """The fitting layout with the largest value of a knob (``b`` the micro-batch size),
        ties broken by the ranking."""

        if knob not in self.columns:
            raise UnknownNameError("knob", knob, KNOBS)
        idx = self.order()
        if not len(idx):
            raise self.no_fit()
        vals = self.columns[knob][idx]
        return self.row(int(idx[int(np.argmax(vals))]))

    def exact(self, i: int) -> dict:
        """Exact bytes of row ``i`` (SymPy, term by term) and the stage they belong to,
        from the same composition the vectorized search used."""
        return exact_row(self.space, self.row(i))


def search(model, gpu=None, gpus: int = 8, *, progress: Callable | None = None, **options) -> SearchResult:
    r"""Every layout of ``gpus`` GPUs that the framework rules allow, with its memory on the
    most-loaded GPU, its step time, and whether it fits; ranked.

    .. math::

        \{(t,p,c,d,e,v,b,\text{recompute},\text{sharding},\text{SP}) :
          t\,p\,c\,d = G,\ \text{rules}\}, \qquad
        M_{\max} = \max_{\text{stage}} M_{\text{stage}} \le C

    Parameters
    ----------
    model : str or Architecture
        A preset name, a config.json path or an :class:`~memsym.model.Architecture`.
    gpu : str
        A catalogue GPU (``h100-80gb``); its memory is the capacity unless ``capacity`` is
        given [bytes].
    gpus : int
        The world size G [GPUs].
    progress : callable, optional
        Called as ``progress(done, total)`` per discrete choice (the command line uses it to
        show progress on stderr).
    **options
        ``seq_length`` (4096), ``global_batch_size`` (None: rank by headroom, no step time),
        ``micro_batch_sizes`` (1, 2, 4, 8), ``recompute`` (all three), ``sharding``
        (:data:`SCHEMES`), ``sequence_parallel`` ((False, True)), ``offload`` (("none",)),
        ``tp``/``pp``/``cp``/``ep``/``vpp`` (lists restricting the candidates),
        ``precision``, ``optimizer``, ``convention``, ``flash_attention`` (True),
        ``dropout`` (True: Megatron keeps dropout masks by default), ``allowances`` (overrides of the training allowances),
        ``finetune`` ("full", "lora", "qlora"), ``lora_rank``, ``lora_targets``,
        ``quantization``, ``first_stage_layers``/``last_stage_layers``, ``capacity``,
        ``gpus_per_node``, ``cluster``, ``efficiency`` (the explicit override: one achieved
        GEMM efficiency, 0.01 <= efficiency <= 1, memsym.limits.EFFICIENCY_RANGE; default
        None, predicted per GEMM shape),
        ``capacity_factor`` (MoE, > 0; default 1), ``uneven`` (True: offer uneven first/last
        stages, :func:`stage_splits`, where none are given).

    Returns
    -------
    SearchResult

    Examples
    --------
    >>> res = search("llama2-7b", "a100-80gb", 8, seq_length=2048, global_batch_size=64,
    ...              recompute=["selective"], sharding=["distributed-optimizer"])
    >>> best = res.best()
    >>> best["fits"], best["t"] * best["p"] * best["c"] * best["d"]
    (True, 8)
    >>> res.excluded["tp-heads"]
    0
    """

    start = time.perf_counter()
    G_ = positive_whole(gpus, "gpus")
    model, gpu = from_job(model, gpu, options)
    space = options.pop("space", None) or make_space(model, gpu, **options)
    timed = _timed(space)    # before any grid work: an efficiency it cannot price is refused
    grid = raw_grid(space, G_)
    masks = rule_masks(space, grid, G_)
    raw = len(grid["t"])
    bad = np.zeros(raw, dtype=bool)
    for mask in masks.values():
        bad |= mask
    excluded = {name: int(masks[name].sum()) if name in masks else 0 for name in RULES}
    # choice-level rules, counted on the layouts that pass the knob rules
    ok = ~bad
    n_ok = int(ok.sum())
    okk = grid_knobs(space, {k: grid[k][ok] for k in KNOBS}, G_)
    for spf, off, scheme in itertools.product(space.sequence_parallel, space.offload, space.sharding):
        if spf:
            continue      # SP rows exist only with t > 1, where no choice rule refuses SP
        for name, mask in _rules.masks(space.arch, choice_knobs(okk, spf, off, scheme),
                                       CHOICE_RULES).items():
            excluded[name] += int(mask.sum())
    if n_ok == 0:
        # an impossible restriction is bad input, not "nothing fits": say which rules
        names = [f"{name} ({RULES[name]})" for name, count in
                 sorted(excluded.items(), key=lambda kv: -kv[1]) if count]
        raise InvalidValueError(f"no layout of {G_} GPUs passes the framework rules with these "
                                "restrictions; excluded by " + "; ".join(names[:4]))
    valid = {k: grid[k][ok] for k in KNOBS + ("f", "l")}
    cols = evaluate_grid(space, valid, progress, want_time=timed)
    cols["headroom"] = space.capacity - cols["memory"] if len(cols["memory"]) else np.array([])
    cols["fits"] = cols["headroom"] >= 0 if len(cols["memory"]) else np.array([], dtype=bool)
    cols["binding"] = binding_columns(cols)
    res = SearchResult(space, G_, cols, excluded, raw, time.perf_counter() - start, valid=n_ok,
                       timed=timed)
    res.notes += _search_notes(space, timed)
    return res


def _search_notes(space: Space, timed: bool) -> list:
    """What a search left out or could not rank by, each one line."""
    notes = []
    if space.unmodelled_recompute:
        notes.append(f"{' and '.join(space.unmodelled_recompute)} recompute of a shared "
                     f"transformer block is not modelled: recompute {' and '.join(space.recompute)}"
                     " searched")
    if not timed:
        notes.append(f"step time not modelled for {space.arch.name}: ranked by headroom")
    elif space.global_batch_size is None:
        notes.append("no global batch size: layouts ranked by memory headroom (no step time)")
    if space.framework_held:
        f = FRAMEWORK[space.framework]
        sizes = ", ".join(f"{k} {' or '.join(map(str, v))}" for k, v in f.searched_sizes
                          if k in space.framework_held)
        notes.append(f"held for {f.title}: {sizes} ({f.searched_sizes_reason}; name the sizes "
                     "to search them)")
    notes += overlap_comm_bucket_note(space)
    return notes


def overlap_comm_bucket_note(space: Space) -> list:
    """The note of a DeepSpeed search whose ZeRO-1/2 rows carry ``overlap_comm``'s second IPG
    bucket, else none.

    The search prices the overlaps it launches (:func:`memsym.search.launch_overlaps`), and
    ``memsym search --emit deepspeed`` writes them: ``"overlap_comm": true`` at every stage.
    DeepSpeed's own default is on for ZeRO-3 only (``overlap_comm_valid``,
    deepspeed/runtime/zero/config.py:383-385 at edaa722126), and with it ZeRO-1/2 allocate a
    second ``reduce_bucket_size`` buffer "to avoid data access conflict" (``setup_buckets``,
    runtime/zero/stage_1_and_2.py:2508-2514).  A job estimated with DeepSpeed's default (a plain
    ``memsym estimate --framework deepspeed --sharding zero2``) holds one bucket, so such a row
    is one bucket (plus its fragmentation margin) above it; a job's own overlaps (a search of a
    job) are its own, and no note is needed.

    >>> from memsym.search.space import make_space
    >>> note, = overlap_comm_bucket_note(make_space("llama2-7b", "h100-80gb",
    ...                                             framework="deepspeed", sharding=["zero2"]))
    >>> note[:57], "reduce_bucket_size elements, 2 GB)" in note, "(one bucket, 1 GB)" in note
    ('ZeRO-1/2 rows are priced with DeepSpeed overlap_comm on (', True, True)
    >>> overlap_comm_bucket_note(make_space("llama2-7b", "h100-80gb", framework="deepspeed",
    ...                                     sharding=["zero3"]))
    []
    """
    if space.overlaps is not None or FRAMEWORK[space.framework].launch_overlaps != "overlap_comm":
        return []
    zero12 = [s for s in space.sharding if states_scheme(s) in ("zero1", "zero2")]
    if not zero12:
        return []
    width = activation_width(space.training(sharding=zero12[0]))
    one = int(deepspeed_ipg_buckets().evaluate(n_bkt=1, N_bkt=_TRANSIENT_DEFAULTS[N_bkt],
                                               b_hp=width))
    return [f"ZeRO-1/2 rows are priced with DeepSpeed overlap_comm on (2 IPG buckets of "
            f"reduce_bucket_size elements, {2 * one / 1e9:.3g} GB), as the search prices the "
            "launch and --emit deepspeed writes it; DeepSpeed's default for stages 1/2 is off (one "
            f"bucket, {one / 1e9:.3g} GB), which a plain memsym estimate counts "
            "(deepspeed/runtime/zero/config.py overlap_comm_valid, stage_1_and_2.py "
            "setup_buckets)"]


def _timed(space: Space) -> bool:
    """Whether the timing layer prices ``space``'s model: False only on its own refusal
    (:class:`StepTimeNotModelledError`, e.g. a shared-block hybrid), where the search keeps
    the global batch for the memory and ranks by headroom, unless an explicit ``efficiency``
    is given (it prices the step time alone: refused with the timing layer's words); any
    other error still stops it."""
    if space.global_batch_size is None:
        return True
    try:
        shape_of(space.arch)
    except StepTimeNotModelledError as exc:
        if space.efficiency is not None:
            # the explicit GEMM efficiency prices the step time and nothing else: with no step
            # time it cannot act, so it is refused, as estimate refuses it (the timing
            # layer's own words, one definition), not dropped
            raise StepTimeNotModelledError(
                f"efficiency {float(space.efficiency):g} (--efficiency) is the step time's GEMM "
                f"efficiency, and {exc}; without it the search ranks by memory headroom") \
                from None
        return False
    return True
