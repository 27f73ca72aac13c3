"""The raw grid of layouts and the framework rules over it as numpy masks (:func:`raw_grid`,
:func:`stage_splits`, :func:`rule_masks`, :func:`explain`).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace
from typing import Mapping

import numpy as np

from ..frameworks import FRAMEWORK
from ..errors import InvalidValueError
from .. import rules as _rules
from ..distinct_rows import unique_rows

from .choices import scheme_row
from .space import (Space, CHOICE_RULES, KNOBS, MEGATRON_FSDP_STRATEGY, divisors_of, make_space,
                    states_scheme)
from ..model.torchtitan_stages import torchtitan_end_stages, torchtitan_layers_per_stage


#: Lighter end stages offered: each end stage holds between mid - UNEVEN_SPAN v and mid layers.
UNEVEN_SPAN = 2


def stage_splits(num_layers: int, p: int, vpp=(1,)) -> tuple:
    r"""The uneven (first, last) stage sizes the search offers at pipeline size ``p``.

    Megatron-LM's ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
    (transformer_config.py: the other p - 2 stages split the rest evenly; with v > 1 every
    stage's layers divisible by v).  Offered: for each v of ``vpp``, a middle size ``mid``
    (a multiple of v) and end stages f, l (multiples of v) with

    .. math:: f + l + (p - 2)\,\mathrm{mid} = L, \qquad
              \max(v, \mathrm{mid} - 2v) \le f, l \le \mathrm{mid}

    (p = 2: f + l = L with |f - l| <= 2v), the even split excluded (it is the ``(0, 0)`` row).
    Bounded: per v at most ``4v/p + 1`` middle sizes and 3 splits each.

    Parameters
    ----------
    num_layers : int
        Decoder layers L.
    p : int
        Pipeline-parallel size (number of stages) [GPUs].
    vpp : tuple of int
        Virtual stages per pipeline rank tried.

    Examples
    --------
    Llama 3 405B (126 layers) on 16 stages: Meta's 7 + 14 x 8 + 7 and its neighbours:

    >>> stage_splits(126, 16)
    ((6, 8), (7, 7), (8, 6))
    >>> stage_splits(126, 16, (2,))    # v = 2: every stage even
    ((6, 8), (8, 6))
    >>> stage_splits(126, 1)
    ()
    """
    L_, out = int(num_layers), set()
    if p < 2:
        return ()
    for vv in vpp:
        vv = int(vv)
        if p == 2:
            for f in range(vv, L_, vv):
                lv = L_ - f
                if lv % vv == 0 and abs(f - lv) <= UNEVEN_SPAN * vv and f != lv:
                    out.add((f, lv))
            continue
        lo_mid = -(-L_ // p)
        hi_mid = (L_ + 2 * UNEVEN_SPAN * vv) // p
        for mid in range(lo_mid - lo_mid % vv, hi_mid + 1, vv):
            if mid < vv:
                continue
            rest = L_ - (p - 2) * mid
            low = max(vv, mid - UNEVEN_SPAN * vv)
            for f in range(-(-low // vv) * vv, mid + 1, vv):
                lv = rest - f
                if low <= lv <= mid and lv % vv == 0 and not (f == lv == mid):
                    out.add((f, lv))
    return tuple(sorted(out))


def raw_grid(space: Space, gpus: int) -> dict:
    """Every (t, p, c, d, e, v, b, f, l) with t*p*c*d = gpus drawn from the candidate lists, as
    numpy columns (before any rule).  Candidates: divisors of the GPU count for t, p, c;
    divisors of the experts for e; divisors of the layers (and 2, 4, 8 where uneven stages
    are offered) for v; the micro-batch list for b; f, l the first/last stage sizes (0: the
    even split; the given sizes only where ``first_stage_layers``/``last_stage_layers`` are
    set; else the even split and :func:`stage_splits` unless ``uneven`` is off).

    Parameters
    ----------
    gpus : int
        Number of GPUs (world size) [GPUs].
    """

    x = space.arch
    L_ = x.num_layers
    divs = divisors_of(gpus)
    cand_t = space.tp or tuple(dv for dv in divs)
    cand_p = space.pp or tuple(dv for dv in divs)
    cand_c = space.cp or tuple(dv for dv in divs)
    if x.num_experts:
        cand_e = space.ep or tuple(dv for dv in divisors_of(x.num_experts))
    else:
        cand_e = space.ep or (1,)
    given = space.first_stage_layers is not None or space.last_stage_layers is not None
    titan = FRAMEWORK[space.framework].torch_pipelining     # torchtitan splits each p its own way
    offer = space.uneven and not given and not titan
    cand_v = space.vpp or tuple(sorted(set(divisors_of(L_)) | (
        {vv for vv in (2, 4, 8) if vv <= L_} if offer else set())))
    if titan and not space.vpp:
        # single-stage schedules, the looped ones' default 2 stages per rank, and the counts
        # pipeline_parallel_layers_per_stage makes (kept where one does: titan_split)
        cand_v = _TORCHTITAN_V
    rows = []
    for tt in cand_t:
        if gpus % tt:
            continue
        for pp in cand_p:
            if (gpus // tt) % pp:
                continue
            for cc in cand_c:
                if (gpus // (tt * pp)) % cc:
                    continue
                rows.append((tt, pp, cc, gpus // (tt * pp * cc)))
    if not rows:
        raise InvalidValueError(f"no layout of the given tp/pp/cp sizes multiplies to {gpus} GPUs")

    @functools.lru_cache(maxsize=None)
    def splits(pp):
        if given:
            return ((space.first_stage_layers or 0, space.last_stage_layers or 0),)
        return ((0, 0),) + (stage_splits(L_, pp, cand_v) if offer and pp <= L_ else ())

    @functools.lru_cache(maxsize=None)
    def titan_split(pp, vv):
        # torchtitan's own split (memsym.job.framework_layout): one per (p, v), or none when
        # its middle ranks differ (memsym's middle stages are equal)
        if pp == 1:
            return ((0, 0),)
        if vv > 2 and torchtitan_layers_per_stage(L_, pp, vv) is None:
            return ()   # no pipeline_parallel_layers_per_stage gives vv stages per rank
        try:
            first, last, _ = torchtitan_end_stages(L_, pp, vv)
        except InvalidValueError:   # no split torchtitan makes (or memsym represents)
            return ()
        return ((first or 0, last or 0),)

    ev = np.array(list(itertools.product(cand_e, cand_v, space.micro_batch_sizes)), dtype=np.int64)
    rows = [row + (te,) for row in rows for te in expert_tp_sizes(space, row[0])]
    blocks = []
    for row in rows:
        if titan and not given:
            fl_ev = [(np.array(titan_split(row[1], int(vv)), dtype=np.int64).reshape(-1, 2),
                      ev[ev[:, 1] == vv]) for vv in cand_v]
        else:
            fl_ev = [(np.array(splits(row[1]), dtype=np.int64), ev)]
        for fl, evv in fl_ev:
            nb = len(fl) * len(evv)
            if not nb:
                continue
            blk = np.empty((nb, 10), dtype=np.int64)
            blk[:, 0:4] = row[:4]
            blk[:, 4:7] = np.tile(evv, (len(fl), 1))
            blk[:, 7:9] = np.repeat(fl, len(evv), axis=0)
            blk[:, 9] = row[4]
            blocks.append(blk)
    if not blocks:
        raise InvalidValueError(f"no layout of {gpus} GPUs has a pipeline split the framework "
                                "makes")
    allr = np.concatenate(blocks)
    return {k: allr[:, i] for i, k in enumerate(("t", "p", "c", "d", "e", "v", "b", "f", "l",
                                                 "t_e"))}


def expert_tp_sizes(space: Space, t: int) -> tuple:
    """The expert tensor-parallel sizes t_e the search offers beside tensor parallelism t.

    A model with experts under a framework that splits the experts' GEMMs apart from the
    dense ones is offered t_e = t (Megatron-LM's default: ``validate_args`` sets
    ``expert_tensor_parallel_size`` to TP when unset, arguments.py:587-588 at d98e8a64dd) and
    t_e = 1 (the experts whole on each rank, spread over EP alone).  Bounded to these two
    (the limit of the axis): Megatron-LM takes any t_e whose expert groups t_e e p divide the
    world (parallel_state.py:874-884), but t_e beyond t only widens the experts' all-to-all
    and between 1 and t is rarely what a recipe runs; the rules (``ep-group``, ``tp-ffn``,
    ``deepep-group``) then keep those the framework accepts.  torchtitan v0.2.2 takes exactly
    these two under EP (``etp == tp or etp == 1``, parallel_dims.py:58-59); without experts,
    or where the framework has no separate expert TP (DeepSpeed's AutoEP), t_e = t.  Sizes
    asked for by name (``etp=``, ``--etp``) are tried instead, at every t.

    Parameters
    ----------
    space : Space
        The search problem.
    t : int
        Tensor-parallel size [GPUs].

    Examples
    --------
    >>> expert_tp_sizes(make_space("mixtral-8x7b", "h100-80gb"), 4)
    (4, 1)
    >>> expert_tp_sizes(make_space("llama3-8b", "h100-80gb"), 4)
    (4,)
    """
    if space.etp is not None:      # asked for by name: each still checked by the rules
        if not FRAMEWORK[space.framework].expert_tp:
            raise InvalidValueError(FRAMEWORK[space.framework].expert_tp_refusal(space.etp))
        if not space.arch.num_experts:
            raise InvalidValueError(f"etp (the experts' TP) needs a model with experts "
                                    f"({space.arch.name} has none)")
        return space.etp
    if not space.arch.num_experts or t == 1 or not FRAMEWORK[space.framework].expert_tp:
        return (t,)
    return (t, 1)


#: Stages per rank a torchtitan search offers: 1 (1F1B), 2 (the looped schedules' default)
#: and up to 8 through ``pipeline_parallel_layers_per_stage``.
_TORCHTITAN_V = (1, 2, 3, 4, 6, 8)


def splits_of(space: Space, grid: dict):
    """The (f, l) columns of a grid (0: none), filled from the space where a grid lacks them."""

    n = len(grid["t"])
    if "f" in grid:
        return grid["f"], grid["l"]
    return (np.full(n, space.first_stage_layers or 0, dtype=np.int64),
            np.full(n, space.last_stage_layers or 0, dtype=np.int64))


@functools.lru_cache(maxsize=4096)
@functools.lru_cache(maxsize=65536)
def with_split(space: Space, f: int, l_: int) -> Space:
    """The space with first/last stage sizes f, l (0: none); one object per split, so that
    the caches keyed by it find it by identity (no field-by-field comparison)."""
    f, l_ = (int(f) or None), (int(l_) or None)
    if space.first_stage_layers == f and space.last_stage_layers == l_:
        return space
    return replace(space, first_stage_layers=f, last_stage_layers=l_)


def grid_knobs(space: Space, grid: dict, gpus: int | None = None) -> dict:
    """The knob values :mod:`memsym.rules` reads, over a grid (expert TP t_e = t where the
    grid has no t_e column)."""
    B = space.global_batch_size
    cp = dict(space.held).get("cp_comm_type")
    k = {name: grid[name] for name in KNOBS if name in grid}
    k.update({"t_e": grid.get("t_e", grid["t"]), "s": space.seq_length, "B": B, "gpus": gpus,
              "torchtitan": FRAMEWORK[space.framework].torch_pipelining,
              "gpipe": space.schedule == "gpipe", "flash_attention": bool(space.flash_attention),
              "deepspeed": FRAMEWORK[space.framework].hf_model_code,
              "tp_sequence_parallel": FRAMEWORK[space.framework].tp_sequence_parallel,
              "megatron_options": FRAMEWORK[space.framework].megatron_options,
              "gpus_per_node": space.gpus_per_node,
              "first_stage_layers": space.first_stage_layers,
              "last_stage_layers": space.last_stage_layers, "microbatch_group_size": None,
              "moe_dispatcher": space.moe_dispatcher, "muon": space.optimizer == "muon",
              "precision": space.precision, "m": None if B is None else B // (grid["b"] * grid["d"]),
              "bf16_layers": tuple(dict(space.held).get("bf16_layers", (0, 0))),
              # the CP method a job names, held over the rows (else the framework's default,
              # p2p under TE): the rules sinks-cp, dsa-cp and te-cp-allgather read it for
              # every c > 1, as a job's check does (memsym.rules)
              "te_cp_without_a2a": _rules.te_cp_without_a2a(FRAMEWORK[space.framework], cp),
              **_rules.cp_spellings(FRAMEWORK[space.framework], cp)})
    return k


def _knob_names(space: Space, gpus) -> list:
    names = [n for n in _rules.RULES if n not in CHOICE_RULES and (n != "world-size" or gpus)]
    if space.tp is not None:
        # tp-per-node is a preference: a --tp given explicitly (even beyond a node) is asked for
        names = [n for n in names if n != "tp-per-node"]
    return names


def rule_masks(space: Space, grid: dict, gpus: int | None = None) -> dict:
    """``rule name -> boolean array`` (True where the layout breaks the rule) for every rule
    on the numeric knobs (:mod:`memsym.rules`; the choice rules are applied per combination).
    The rules read first/last stage sizes as scalars: those that read them are evaluated per
    (f, l) group, the others once over the whole grid (each rule is elementwise)."""

    names = _knob_names(space, gpus)
    f_, l_ = splits_of(space, grid)
    n = len(grid["t"])
    out = {name: np.zeros(n, dtype=bool) for name in names}
    groups = _groups(f_, l_)
    if len(groups) > 1:
        whole = grid_knobs(space, {k: grid[k] for k in KNOBS if k in grid}, gpus)
        split = _reading_the_split(space.arch, whole, names)
        for name, mask in _rules.masks(space.arch, whole,
                                       [m for m in names if m not in split]).items():
            out[name] |= mask
        names = [m for m in names if m in split]
    for (fv, lv), idx in groups:
        sub = with_split(space, fv, lv)
        g2 = {k: grid[k][idx] for k in KNOBS if k in grid}
        for name, mask in _rules.masks(space.arch, grid_knobs(sub, g2, gpus), names).items():
            out[name][idx] = mask
    return out


#: The knobs that carry a layout's first/last stage split (scalars, per (f, l) group).
_SPLIT_KNOBS = frozenset({"first_stage_layers", "last_stage_layers"})


class _Reads(dict):
    """Knob values that note the names a rule reads (every name, where it walks them)."""

    def __init__(self, k):
        super().__init__(k)
        self.names: set = set()

    def __getitem__(self, name):
        self.names.add(name)
        return super().__getitem__(name)

    def get(self, name, default=None):
        self.names.add(name)
        return super().get(name, default)

    def __contains__(self, name):
        self.names.add(name)
        return super().__contains__(name)

    def _every(self):
        self.names.update(super().keys())

    def __iter__(self):
        self._every()
        return super().__iter__()

    def keys(self):
        self._every()
        return super().keys()

    def items(self):
        self._every()
        return super().items()

    def values(self):
        self._every()
        return super().values()


def _reading_the_split(x, k: dict, names) -> set:
    """The rules of ``names`` that read the first/last stage split, found by running each
    on the first layout of knobs ``k``."""
    first = {key: (val[:1] if isinstance(val, np.ndarray) and val.ndim else val)
             for key, val in k.items()}
    out = set()
    for name in names:
        seen = _Reads(first)
        _rules.masks(x, seen, [name])
        if seen.names & _SPLIT_KNOBS:
            out.add(name)
    return out


def _groups(f_, l_):
    """``((f, l), row indices)`` per distinct first/last split of a grid."""

    if not len(f_):
        return []
    uniq, inv = unique_rows(f_, l_)
    # a stable sort of 16-bit keys is numpy's radix sort: ~7x faster than int64 here
    order = np.argsort(inv.astype(np.int16) if len(uniq) < 2 ** 15 else inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
    return [((int(uniq[u, 0]), int(uniq[u, 1])), order[bounds[u]:bounds[u + 1]])
            for u in range(len(uniq))]


def choice_knobs(k: dict, spf: bool, off: str, scheme: str) -> dict:
    """The knobs ``k`` of one discrete choice: sequence parallelism, offload, whether the
    row's scheme shards gradients, and whether it runs as Megatron-FSDP (a Megatron search's
    :data:`MEGATRON_FSDP_STRATEGY` rows), as :func:`memsym.rules.knobs` names them."""
    return dict(k, sequence_parallel=spf, offload=off != "none",
                shards_gradients=states_scheme(scheme) in ("zero2", "zero3", "fsdp"),
                zero1=states_scheme(scheme) == "zero1",
                megatron_fsdp=bool(k.get("megatron_options")) and scheme in MEGATRON_FSDP_STRATEGY)


def explain(space_or_model, layout: Mapping, gpu=None, **kw) -> list:
    """The names of the rules one layout breaks (empty when it is valid).

    Examples
    --------
    >>> explain("llama3-405b", {"t": 16, "p": 5, "d": 1}, "h100-80gb")
    ['tp-per-node', 'tp-kv-heads', 'pp-layers']
    """

    space = space_or_model if isinstance(space_or_model, Space) else make_space(
        space_or_model, gpu, **kw)
    grid = {k: np.array([int(layout.get(k) or (layout.get("t", 1) if k == "t_e" else 1))],
                        dtype=np.int64) for k in KNOBS}
    space = with_split(space, layout.get("first_stage_layers") or space.first_stage_layers or 0,
                 layout.get("last_stage_layers") or space.last_stage_layers or 0)
    k = choice_knobs(grid_knobs(space, grid), bool(layout.get("sequence_parallel", False)),
                      layout.get("offload", "none"),
                      scheme_row(layout.get("sharding", "distributed-optimizer"), space.framework))
    return [name for name, mask in _rules.masks(space.arch, k).items()
            if name != "world-size" and bool(mask[0])
            and not (name == "tp-per-node" and space.tp is not None)]   # asked for explicitly
