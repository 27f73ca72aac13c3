r"""Configuration search: every layout that fits, ranked; the smallest cluster; the largest batch.

The per-GPU training total (:func:`memsym.training.stage_total`: model states + activations +
allowances on each pipeline stage) is compiled once per *discrete* choice (recompute mode,
sequence parallelism, interleaving, stage role) and evaluated with numpy broadcasting over
the whole grid of *numeric* knobs (t, p, c, d, e, v, b, m, and the exact parameters each
stage holds); no SymPy runs per configuration.  Framework rules are numpy masks over the
same grid, each named (:data:`RULES`), so every excluded layout says which rule excluded it;
uneven first/last pipeline stages (:func:`stage_splits`) are part of the grid.  The predicted
step time (:func:`memsym.timing.step.step_time_grid`: GEMMs after the splits on the GPU's
efficiency curve, collectives with overlap, the exact schedule; breakdown :data:`TIME_PARTS`)
ranks the layouts that fit.  Every pipeline stage that can be the most loaded is evaluated:
first, last, and the lowest stage of each distinct middle make-up (dense/MoE layers).

Sizing questions are solved exactly where the total is monotone in the unknown: the
smallest d for a layout (hence the smallest GPU count) by :func:`memsym.analysis.smallest`
(closed form, then the integer), checked against the vectorized search.

References
----------
.. [seed001] MCore: CPU offloading refuses p > 1; VPP needs (L/p) % v == 0.
.. [seed002] tensor parallelism stays inside a node (t <= GPUs per node).
.. [seed004] minimum hardware: 13B full fine-tune -> 4 x A100 80GB with +20-30 % activations.
.. [narayanan] arXiv:2104.04473 (layouts, bubble, step time).
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

import sympy as sp

from .errors import InvalidValueError, MemsymError, NoFitError, UnknownNameError, choose
from .symbols import M_alloc, V, d
from .values import boolean, exact
from . import rules as _rules
from .job import DEFAULTS
from .numeric import unique_rows
from .training import ALLOWANCE_KEYS as _ALLOW, STATE_KEYS as _STATE_KEYS

__all__ = ["RULES", "SCHEMES", "TIME_PARTS", "Space", "SearchResult", "MinGpus", "search",
           "min_gpus", "smallest_d", "largest_fit", "explain", "raw_grid", "stage_splits"]

#: The rules the search applies, by name (the name is what the output shows), from the one
#: rule table :data:`memsym.rules.RULES`.
RULES = {name: rule.summary for name, rule in _rules.RULES.items()}
#: Rules on the discrete choices (checked per recompute/sharding/SP/offload combination).
_CHOICE_RULES = ("moe-tp-sp", "offload-pp", "zero-pp")

#: Sharding schemes searched by default (fsdp is the same memory as zero3).
SCHEMES = ("ddp", "zero1", "zero2", "zero3", "distributed-optimizer")

_KNOBS = ("t", "p", "c", "d", "e", "v", "b")
_CHOICE_KEYS = ("recompute", "sharding", "sequence_parallel", "offload")


def _divisors(n: int) -> list:
    small = [i for i in range(1, int(math.isqrt(n)) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))


#: The memsym.limits limit each searched size is bounded by (every loop and grid is bounded).
_LIMIT_OF = {"gpus": "gpus", "max_gpus": "gpus", "gpus_per_node": "gpus", "seq_length": "sequence",
             "global_batch_size": "global_batch", "micro-batch size": "micro_batch",
             "lora_rank": "rank", "tp": "gpus", "pp": "gpus", "cp": "gpus", "ep": "gpus",
             "vpp": "layers"}


def _pos(value, what):
    # numbers only: int("abc"), int(nan), int(inf) and int(None) would escape as other errors
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or int(value) != value or int(value) < 1:
        raise InvalidValueError(f"{what} must be a whole number >= 1, got {value!r:.40}")
    if what in _LIMIT_OF:
        from .limits import check_limit

        check_limit(_LIMIT_OF[what], int(value), what)
    return int(value)


def _choices(kind, given, accepted) -> tuple:
    """Each name of ``given`` matched by :func:`memsym.errors.choose`, duplicates dropped."""
    return tuple(dict.fromkeys(choose(kind, item, accepted) for item in given))


def _scheme(name) -> str:
    """A sharding scheme by name; FSDP keeps the same states as ZeRO-3, so it is one row."""
    from .terms.model_state import SCHEMES as ALL_SCHEMES

    key = choose("sharding", name, ALL_SCHEMES)
    return "zero3" if key == "fsdp" else key


def _int_list(given, what):
    if given is None:
        return None
    if isinstance(given, (int,)) and not isinstance(given, bool):
        given = [given]
    return tuple(sorted({_pos(x, what) for x in given}))


# ------------------------------------------------------------------------------------------
# the problem
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Space:
    """What is searched: a model on a GPU type, a training setup and the knob choices.

    Build it with :func:`search` / :func:`min_gpus` keywords; fields mirror them.

    Attributes
    ----------
    capacity : int
        GPU memory capacity [bytes].
    seq_length : int
        Sequence length [tokens].
    global_batch_size : int or None
        Global batch size [sequences].
    tp, pp, cp, ep : tuple of int or None
        The tensor-, pipeline-, context- and expert-parallel sizes the search is restricted
        to (None: every divisor) [GPUs].
    """

    arch: object
    gpu: object
    capacity: int
    gpus_per_node: int
    seq_length: int
    global_batch_size: int | None
    micro_batch_sizes: tuple
    recompute: tuple
    sharding: tuple
    sequence_parallel: tuple
    offload: tuple
    tp: tuple | None
    pp: tuple | None
    cp: tuple | None
    ep: tuple | None
    vpp: tuple | None
    precision: str
    optimizer: str
    convention: str
    flash_attention: bool
    dropout: bool
    schedule: str
    allowances: tuple
    finetune: str
    lora_rank: int
    lora_targets: tuple
    quantization: str
    first_stage_layers: int | None
    last_stage_layers: int | None
    efficiency: object
    intra_bw: float
    inter_bw: float
    latency: float
    capacity_factor: object = 1
    #: offer uneven first/last pipeline stages (:func:`stage_splits`) when none is given
    uneven: bool = True
    cluster: object = None

    @property
    def uniform(self) -> bool:
        from .model import moe_layer_pattern

        return (self.first_stage_layers is None and self.last_stage_layers is None
                and len(set(moe_layer_pattern(self.arch))) == 1)

    def training(self, **kw):
        from .training import Training

        base = dict(seq_length=self.seq_length, micro_batch_size=1,
                    global_batch_size=self.global_batch_size, recompute="none",
                    flash_attention=self.flash_attention, dropout=self.dropout,
                    schedule=self.schedule, precision=self.precision, optimizer=self.optimizer,
                    sharding="distributed-optimizer", convention=self.convention,
                    offload="none", capacity_factor=self.capacity_factor,
                    finetune=self.finetune, lora_rank=self.lora_rank,
                    lora_targets=self.lora_targets, quantization=self.quantization)
        base.update(kw)
        return Training(**base)


def _from_job(model, gpu, options: dict):
    """A :class:`memsym.job.Job` as the search's model: its resolved architecture, and its
    training settings, allowances, GPU and capacity as the defaults of ``options`` (the
    layout is what the search explores)."""
    from .job import Job

    if not isinstance(model, Job):
        return model, gpu
    tr = model.training
    for key, val in (("seq_length", tr.seq_length), ("global_batch_size", tr.global_batch_size),
                     ("precision", tr.precision), ("optimizer", tr.optimizer),
                     ("convention", tr.convention), ("flash_attention", tr.flash_attention),
                     ("dropout", tr.dropout), ("schedule", tr.schedule),
                     ("capacity_factor", tr.capacity_factor), ("finetune", tr.finetune),
                     ("lora_rank", tr.lora_rank), ("allowances", dict(model.allowances)),
                     ("capacity", model.capacity)):
        if val is not None:
            options.setdefault(key, val)
    if gpu is None and model.gpu is not None:
        gpu = model.gpu.name
    return model.model, gpu


def make_space(model, gpu, *, seq_length=DEFAULTS["seq_length"], global_batch_size=None,
               micro_batch_sizes=None,
               recompute=("none", "selective", "full"), sharding=SCHEMES,
               sequence_parallel=(False, True), offload=("none",), tp=None, pp=None, cp=None,
               ep=None, vpp=None, precision=DEFAULTS["precision"], optimizer=DEFAULTS["optimizer"],
               convention=DEFAULTS["convention"],
               flash_attention=DEFAULTS["flash_attention"], dropout=DEFAULTS["dropout"],
               schedule=DEFAULTS["schedule"], allowances=None,
               finetune="full", lora_rank=16, lora_targets="all", quantization=None,
               first_stage_layers=None, last_stage_layers=None, capacity=None,
               gpus_per_node=None, cluster=None, efficiency=None, capacity_factor=1,
               uneven=True) -> Space:
    """Validate the search keywords into a :class:`Space` (see :func:`search`)."""
    from . import hardware, model as models
    from .terms.adapters import LORA_TARGETS, QUANTIZATIONS
    from .terms.model_state import CONVENTIONS, OFFLOADS, OPTIMIZERS, PRECISIONS
    from .training import ALLOWANCES

    arch = model if isinstance(model, models.Architecture) else models.resolve_model(model)
    arch = models.resolve(arch, seq_length=_pos(seq_length, "seq_length"))
    clu = None
    if cluster is not None:
        clu = hardware.cluster(cluster)
        dev = clu.gpu if gpu is None else hardware.gpu(gpu)
    else:
        if gpu is None:
            raise InvalidValueError("give a GPU (e.g. h100-80gb) or a cluster")
        dev = hardware.gpu(gpu)
        clu = hardware.cluster_for(dev, gpus_per_node or 8)
    if gpus_per_node is not None:
        clu = clu.with_(gpus_per_node=_pos(gpus_per_node, "gpus_per_node"))
    cap = dev.memory_bytes if capacity is None else capacity
    if isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not cap > 0 \
            or not math.isfinite(cap):
        raise InvalidValueError(f"GPU memory capacity must be a number of bytes > 0 (for text use "
                                f"memsym.units.parse_bytes('80GB')), got {cap!r:.40}")
    finetune = _choices("fine-tuning mode", [finetune], ("full", "lora", "qlora"))[0]
    if quantization is None:
        quantization = {"full": "bf16", "lora": "bf16", "qlora": "nf4-dq"}[finetune]
    quantization = _choices("quantization", [quantization], QUANTIZATIONS)[0]
    if isinstance(lora_targets, str):
        lora_targets = LORA_TARGETS if lora_targets == "all" else (lora_targets,)
    lora_targets = _choices("LoRA target", lora_targets, LORA_TARGETS)
    B = None if global_batch_size is None else _pos(global_batch_size, "global_batch_size")
    if micro_batch_sizes is None:
        limit = 8 if B is None else min(8, B)
        micro_batch_sizes = [x for x in (1, 2, 4, 8) if x <= limit]
    mbs = _int_list(micro_batch_sizes, "micro-batch size")
    shard = tuple(dict.fromkeys(_scheme(x) for x in
                                ([sharding] if isinstance(sharding, str) else sharding)))
    if finetune != "full":
        # adapters' states are tiny: sharding them changes nothing worth a row; keep the
        # schemes that change where the frozen weights live (replicated or ZeRO-3 sharded)
        shard = tuple(dict.fromkeys("zero3" if x == "zero3" else "ddp" for x in shard))
    al = tuple(sorted((k, v) for k, v in (allowances or {}).items()))
    for key, _ in al:
        if key not in ALLOWANCES:
            raise UnknownNameError("allowance", key, ALLOWANCES)
    # None: the step time predicts GEMM efficiency (memsym.timing.efficiency); a number is
    # the explicit, named override (the achieved GEMM efficiency eta_gemm)
    eff = None
    if efficiency is not None:
        eff = exact(efficiency, "efficiency")
        if not 0 < eff <= 1:
            raise InvalidValueError(f"efficiency is the achieved fraction of peak FLOP/s of "
                                    f"the GEMMs: 0 < efficiency <= 1, got {efficiency}")
    for what, val in (("first_stage_layers", first_stage_layers),
                      ("last_stage_layers", last_stage_layers)):
        if val is not None:
            _pos(val, what)
    prec = choose("precision", precision, PRECISIONS)
    if B is not None:
        dev.peak(prec)   # the step time needs the GPU's peak at this precision: refuse early
    cf = exact(capacity_factor, "capacity_factor")
    if not cf > 0:
        raise InvalidValueError(f"capacity_factor must be > 0, got {capacity_factor}")
    return Space(
        arch=arch, gpu=dev, capacity=int(cap) if float(cap).is_integer() else cap,
        gpus_per_node=clu.gpus_per_node, seq_length=int(seq_length), global_batch_size=B,
        micro_batch_sizes=mbs,
        recompute=_choices("recompute mode", [recompute] if isinstance(recompute, str) else recompute,
                           ("none", "selective", "full")),
        sharding=shard,
        sequence_parallel=tuple(sorted({bool(x) for x in ([sequence_parallel] if isinstance(
            sequence_parallel, bool) else sequence_parallel)})),
        offload=_choices("offload", [offload] if isinstance(offload, str) else offload, OFFLOADS),
        tp=_int_list(tp, "tp"), pp=_int_list(pp, "pp"), cp=_int_list(cp, "cp"),
        ep=_int_list(ep, "ep"), vpp=_int_list(vpp, "vpp"),
        precision=prec, optimizer=choose("optimizer", optimizer, OPTIMIZERS),
        convention=_choices("convention", [convention], CONVENTIONS)[0],
        flash_attention=boolean(flash_attention, "flash_attention"),
        dropout=boolean(dropout, "dropout"), schedule=schedule,
        allowances=al, finetune=finetune, lora_rank=_pos(lora_rank, "lora_rank"),
        lora_targets=lora_targets, quantization=quantization,
        first_stage_layers=None if first_stage_layers is None else int(first_stage_layers),
        last_stage_layers=None if last_stage_layers is None else int(last_stage_layers),
        efficiency=eff, intra_bw=clu.intra_node_bandwidth, inter_bw=clu.inter_node_bandwidth,
        latency=clu.latency, capacity_factor=cf, uneven=bool(uneven), cluster=clu)


# ------------------------------------------------------------------------------------------
# the raw grid and the rules (numpy masks)
# ------------------------------------------------------------------------------------------
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


def raw_grid(space: Space, gpus: int, *, fixed_d: bool = True) -> dict:
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
    import numpy as np

    x = space.arch
    L_ = x.num_layers
    divs = _divisors(gpus)
    cand_t = space.tp or tuple(dv for dv in divs)
    cand_p = space.pp or tuple(dv for dv in divs)
    cand_c = space.cp or tuple(dv for dv in divs)
    if x.num_experts:
        cand_e = space.ep or tuple(dv for dv in _divisors(x.num_experts))
    else:
        cand_e = space.ep or (1,)
    given = space.first_stage_layers is not None or space.last_stage_layers is not None
    offer = space.uneven and not given
    cand_v = space.vpp or tuple(sorted(set(_divisors(L_)) | (
        {vv for vv in (2, 4, 8) if vv <= L_} if offer else set())))
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

    ev = np.array(list(itertools.product(cand_e, cand_v, space.micro_batch_sizes)), dtype=np.int64)
    blocks = []
    for row in rows:
        fl = np.array(splits(row[1]), dtype=np.int64)
        nb = len(fl) * len(ev)
        blk = np.empty((nb, 9), dtype=np.int64)
        blk[:, 0:4] = row
        blk[:, 4:7] = np.tile(ev, (len(fl), 1))
        blk[:, 7:9] = np.repeat(fl, len(ev), axis=0)
        blocks.append(blk)
    allr = np.concatenate(blocks)
    return {k: allr[:, i] for i, k in enumerate(("t", "p", "c", "d", "e", "v", "b", "f", "l"))}


def _splits_of(space: Space, grid: dict):
    """The (f, l) columns of a grid (0: none), filled from the space where a grid lacks them."""
    import numpy as np

    n = len(grid["t"])
    if "f" in grid:
        return grid["f"], grid["l"]
    return (np.full(n, space.first_stage_layers or 0, dtype=np.int64),
            np.full(n, space.last_stage_layers or 0, dtype=np.int64))


@functools.lru_cache(maxsize=4096)
def _sub(space: Space, f: int, l_: int) -> Space:
    """The space with first/last stage sizes f, l (0: none)."""
    f, l_ = (int(f) or None), (int(l_) or None)
    if space.first_stage_layers == f and space.last_stage_layers == l_:
        return space
    return replace(space, first_stage_layers=f, last_stage_layers=l_)


def _grid_knobs(space: Space, grid: dict, gpus: int | None = None) -> dict:
    """The knob values :mod:`memsym.rules` reads, over a grid (expert TP = t here)."""
    B = space.global_batch_size
    k = {name: grid[name] for name in _KNOBS}
    k.update({"t_e": grid["t"], "s": space.seq_length, "B": B, "gpus": gpus,
              "gpus_per_node": space.gpus_per_node,
              "first_stage_layers": space.first_stage_layers,
              "last_stage_layers": space.last_stage_layers, "microbatch_group_size": None,
              "m": None if B is None else B // (grid["b"] * grid["d"])})
    return k


def _knob_names(space: Space, gpus) -> list:
    names = [n for n in _rules.RULES if n not in _CHOICE_RULES and (n != "world-size" or gpus)]
    if space.tp is not None:
        # tp-per-node is a preference: a --tp given explicitly (even beyond a node) is asked for
        names = [n for n in names if n != "tp-per-node"]
    return names


def rule_masks(space: Space, grid: dict, gpus: int | None = None) -> dict:
    """``rule name -> boolean array`` (True where the layout breaks the rule) for every rule
    on the numeric knobs (:mod:`memsym.rules`; the choice rules are applied per combination).
    The rules read first/last stage sizes as scalars: evaluated per (f, l) group."""
    import numpy as np

    names = _knob_names(space, gpus)
    f_, l_ = _splits_of(space, grid)
    n = len(grid["t"])
    out = {name: np.zeros(n, dtype=bool) for name in names}
    for (fv, lv), idx in _groups(f_, l_):
        sub = _sub(space, fv, lv)
        g2 = {k: grid[k][idx] for k in _KNOBS}
        for name, mask in _rules.masks(space.arch, _grid_knobs(sub, g2, gpus), names).items():
            out[name][idx] = mask
    return out


def _groups(f_, l_):
    """``((f, l), row indices)`` per distinct first/last split of a grid."""
    import numpy as np

    if not len(f_):
        return []
    uniq, inv = unique_rows(f_, l_)
    # a stable sort of 16-bit keys is numpy's radix sort: ~7x faster than int64 here
    order = np.argsort(inv.astype(np.int16) if len(uniq) < 2 ** 15 else inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
    return [((int(uniq[u, 0]), int(uniq[u, 1])), order[bounds[u]:bounds[u + 1]])
            for u in range(len(uniq))]


def _choice_knobs(k: dict, spf: bool, off: str, scheme: str) -> dict:
    return dict(k, sequence_parallel=spf, offload=off != "none",
                shards_gradients=scheme in ("zero2", "zero3", "fsdp"))


def explain(space_or_model, layout: Mapping, gpu=None, **kw) -> list:
    """The names of the rules one layout breaks (empty when it is valid).

    Examples
    --------
    >>> explain("llama3-405b", {"t": 16, "p": 5, "d": 1}, "h100-80gb")
    ['tp-per-node', 'tp-kv-heads', 'pp-layers']
    """
    import numpy as np

    space = space_or_model if isinstance(space_or_model, Space) else make_space(
        space_or_model, gpu, **kw)
    grid = {k: np.array([int(layout.get(k, 1))], dtype=np.int64) for k in _KNOBS}
    space = _sub(space, layout.get("first_stage_layers") or space.first_stage_layers or 0,
                 layout.get("last_stage_layers") or space.last_stage_layers or 0)
    k = _choice_knobs(_grid_knobs(space, grid), bool(layout.get("sequence_parallel", False)),
                      layout.get("offload", "none"),
                      _scheme(layout.get("sharding", "distributed-optimizer")))
    return [name for name, mask in _rules.masks(space.arch, k).items()
            if name != "world-size" and bool(mask[0])
            and not (name == "tp-per-node" and space.tp is not None)]   # asked for explicitly


# ------------------------------------------------------------------------------------------
# compiled pieces (cached per space and discrete choice)
# ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def _compiled(expr):
    """``(function, argument names)`` of one expression, compiled once per expression."""
    from .numeric import compile_expr

    return compile_expr(expr)


def _call(expr, kw: dict):
    fn, names = _compiled(expr)
    return fn(*[kw[n] for n in names])[0]


@functools.lru_cache(maxsize=4096)
def _check_stages(space: Space, pp: int) -> tuple:
    """The pipeline stages whose memory can be the largest at ``p = pp``, lowest first.

    The first stage (embedding, the most micro-batches in flight) and the last (output layer,
    logits) always.  Between them, stages of the same make-up (the MoE/dense kind of each of
    their layers) hold the same parameters and the same activations per micro-batch, and the
    lower index keeps at least as many micro-batches in flight (1F1B: min(p - i, m);
    interleaved: 2(p - i - 1) + (v - 1) p + 1; GPipe: m), so the lowest index of each
    make-up stands for all of them.  An evenly split uniform model needs only first and last.
    """
    if pp == 1:
        return (0,)
    if space.uniform or pp == 2:
        return (0, pp - 1)
    from .model import moe_layer_pattern, stage_layers

    pattern = moe_layer_pattern(space.arch)
    lowest = {}
    for i in range(1, pp - 1):
        rng = stage_layers(space.arch, pp, i, space.first_stage_layers, space.last_stage_layers)
        lowest.setdefault(tuple(pattern[j] for j in rng), i)
    return (0, *sorted(lowest.values()), pp - 1)


@functools.lru_cache(maxsize=4096)
def _template_rep(space: Space, pp: int, stage: int) -> tuple:
    """``(p, stage)`` of the activation template that stands for stage ``stage`` of ``pp``.

    An evenly split uniform model keeps p symbolic (L/p layers, p - i micro-batches), so its
    first and last stages of every p share one template, built at the smallest p > 1; any
    other model's stages depend on their concrete layers: their own (p, stage)."""
    if not space.uniform or pp == 1:
        return pp, stage
    L_ = space.arch.num_layers
    p0 = next(q for q in range(2, L_ + 1) if L_ % q == 0)
    return p0, (0 if stage == 0 else p0 - 1)


#: Shared stage templates: (space, structure) -> (representative space, p, stage, layers).
_REPS: dict = {}


@functools.lru_cache(maxsize=65536)
def _stage_template(space: Space, pp: int, f: int, l_: int, stage: int) -> tuple:
    """``((space, p, stage) of the template, factor)`` for stage ``stage`` of ``pp`` at first/
    last stage sizes ``f``, ``l_`` (0: none): the factor multiplies the template's decoder-
    layer activations.

    An evenly split uniform model keeps p symbolic (:func:`_template_rep`, factor 1).  Any
    other stage's total depends on its layers only through (a) its role (first: embedding and
    the most micro-batches in flight; last: the output layer; a middle stage: its index,
    p - i in flight, p symbolic), (b) whether it holds dense and/or MoE layers (which
    states, which per-layer activations) and (c) ``layer_activations`` = in-flight x (dense
    layers x per-dense-layer + MoE layers x per-MoE-layer) / v
    (:func:`memsym.training.stage_activations`).  A stage of one layer kind is therefore
    the template of the first stage of the same structure met, its layer term scaled by
    n / n0 (exact); a stage mixing both kinds keeps its own counts in the key (factor 1).
    """
    from .model import moe_layer_pattern, stage_layers

    sub = _sub(space, f, l_)
    if sub.uniform or pp == 1:
        return (sub, *_template_rep(sub, pp, stage)), 1.0
    pattern = moe_layer_pattern(space.arch)
    kinds = [pattern[i] for i in stage_layers(space.arch, pp, stage, sub.first_stage_layers,
                                              sub.last_stage_layers)]
    n_moe = sum(kinds)
    n_dense = len(kinds) - n_moe
    mixed = (n_dense, n_moe) if n_dense and n_moe else None
    middle = None if stage in (0, pp - 1) else stage
    key = (space, stage == 0, stage == pp - 1, middle, n_dense > 0, n_moe > 0, mixed)
    if key not in _REPS:
        if len(_REPS) > 65536:
            _REPS.clear()
        _REPS[key] = ((sub, pp, stage), len(kinds))
    rep, n0 = _REPS[key]
    return rep, (1.0 if mixed or not n0 else len(kinds) / n0)


@functools.lru_cache(maxsize=4096)
def _template(space: Space, rc: str, sp_on: bool, inter: bool, off: str, scheme: str, pp: int,
              stage: int):
    """The per-GPU total of stage ``stage`` of ``pp`` under one discrete choice: the Total of
    :func:`memsym.training.stage_total` itself (the one composition), symbolic in the knobs
    and in the stage's parameter counts, which the search binds per row.

    t enters the stage's structure only through "t > 1 turns sequence parallelism on"
    (``sp_on``) and v only through "interleaved or not" (``inter``), so one template serves
    every t and v.  Returns (states and activation Terms, their activation sum, the
    allowance Terms over a placeholder for the allocated bytes, the decoder layers'
    activation term ``layer_activations`` alone; the activation sum excludes it)."""
    from .training import Layout, _stage_total, allowance_terms

    lay = Layout(t=2 if sp_on else 1, p=pp, v=2 if inter else None, sequence_parallel=sp_on,
                 first_stage_layers=space.first_stage_layers,
                 last_stage_layers=space.last_stage_layers)
    tot = _stage_total(space.arch, lay, space.training(recompute=rc, sharding=scheme, offload=off),
                       stage, space.global_batch_size is not None)
    allow = set(_ALLOW)
    kept = tuple(term for term in tot if term.key not in allow)
    states = tuple(term for term in kept if term.key in _STATE_KEYS or term.key.startswith("expert_"))
    acts = sp.Add(*(term.expr for term in kept if term not in states
                    and term.key != "layer_activations"))
    layer = sp.Add(*(term.expr for term in kept if term.key == "layer_activations"))
    return tot, states, acts, allowance_terms(_ALLOCATED), layer


@functools.lru_cache(maxsize=4096)
def _act_template(space: Space, rc: str, sp_on: bool, inter: bool, off: str, pp: int,
                  stage: int) -> tuple:
    """(activation sum without the decoder layers, the decoder layers' term) of one stage:
    :func:`memsym.training._stage_activations`, the activations :func:`_template`'s total
    holds; they do not depend on the sharding scheme, so one serves every scheme."""
    from .training import Layout, _stage_activations

    lay = Layout(t=2 if sp_on else 1, p=pp, v=2 if inter else None, sequence_parallel=sp_on,
                 first_stage_layers=space.first_stage_layers,
                 last_stage_layers=space.last_stage_layers)
    act = _stage_activations(space.arch, lay, space.training(recompute=rc, offload=off), stage,
                             space.global_batch_size is not None)
    rest = sp.Add(*(term.expr for term in act if term.key != "layer_activations"))
    layer = sp.Add(*(term.expr for term in act if term.key == "layer_activations"))
    return rest, layer


@functools.lru_cache(maxsize=4096)
def _fast_template(space: Space, rc: str, sp_on: bool, inter: bool, off: str, scheme: str,
                   pp: int, stage: int) -> tuple:
    """:func:`_template`'s pieces (None, states, activations without the decoder layers,
    allowances, decoder layers) built from the two halves :func:`memsym.training._stage_total`
    adds (``_states_and_transients`` and ``_stage_activations``), the activations shared across
    sharding schemes (tests check the sum against the exact per-layout total)."""
    from .training import PHASES, Layout, _states_and_transients, allowance_terms

    lay = Layout(t=2 if sp_on else 1, p=pp, v=2 if inter else None, sequence_parallel=sp_on,
                 first_stage_layers=space.first_stage_layers,
                 last_stage_layers=space.last_stage_layers)
    trn = space.training(recompute=rc, sharding=scheme, offload=off)
    steady, trans = _states_and_transients(space.arch, lay, trn, stage)
    states = tuple(steady)
    rest, layer = _act_template(space, rc, sp_on, inter, off, pp, stage)
    # the phase transients depend on the scheme (FSDP2 / ZeRO buffers): per template; the
    # peak phase max(T_fwd, T_bwd, T_opt - A) is taken per row with the row's activations A
    # (memsym.training._phase_term states the same formula)
    phases = tuple(sp.Add(*(term.expr for term in trans[ph])) for ph in PHASES)
    return None, states, rest, allowance_terms(_ALLOCATED), layer, phases


#: The allocated bytes in the compiled allowance terms (the fragmentation allowance is a
#: fraction of them): the registry's M_alloc.
_ALLOCATED = M_alloc


#: Stage counts by what they depend on (see :func:`_stage_counts`).
_COUNTS: dict = {}


@functools.lru_cache(maxsize=65536)
def _stage_counts(space: Space, tt: int, pp: int, ee: int, stage: int) -> tuple:
    """``((symbol name, value), ...)``: the stage's parameter counts
    (:func:`memsym.training.stage_counts`) at one (t, p, e).

    Full training's counts (N_tp, N_rep, N_exp of all the ranks together, N_lin per TP rank)
    depend on the layout only through t (vocabulary padding, N_lin/t), the stage's layers,
    whether it is first / last, and p > 1 (the tied output copy): computed once per such key
    and shared across p and e (LoRA's per-GPU counts also depend on e: kept in the key)."""
    from .model import stage_layers
    from .training import Layout, stage_counts

    rng = stage_layers(space.arch, pp, stage, space.first_stage_layers, space.last_stage_layers)
    key = (space.arch, space.finetune, space.lora_rank, space.lora_targets, tt, rng.start,
           rng.stop, stage == 0, stage == pp - 1, pp > 1,
           ee if space.finetune != "full" else None)
    if key not in _COUNTS:
        if len(_COUNTS) > 65536:
            _COUNTS.clear()
        lay = Layout(t=tt, p=pp, e=ee, first_stage_layers=space.first_stage_layers,
                     last_stage_layers=space.last_stage_layers)
        _COUNTS[key] = tuple((str(k), v) for k, v in
                             stage_counts(space.arch, lay, space.training(), stage).items())
    return _COUNTS[key]


# ------------------------------------------------------------------------------------------
# results
# ------------------------------------------------------------------------------------------
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
    """

    space: Space
    gpus: int
    columns: dict
    excluded: dict
    raw: int
    seconds: float = 0.0
    valid: int = 0
    notes: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.columns["memory"])

    @property
    def ranked_by(self) -> str:
        return "step time" if self.space.global_batch_size is not None else "memory headroom"

    def order(self, fitting: bool = True):
        """Row indices best first: step time (then headroom) with a global batch, else headroom."""
        import numpy as np

        col = self.columns
        idx = np.flatnonzero(col["fits"]) if fitting else np.arange(len(self))
        if self.space.global_batch_size is not None:
            keys = (-col["headroom"][idx], col["step_time"][idx])   # lexsort: last key first
        else:
            keys = (-col["headroom"][idx],)
        return idx[np.lexsort(keys)]

    def row(self, i: int) -> dict:
        """One layout as a plain dict (knobs, choices, bytes per grouped term, step time)."""
        col = self.columns
        out = {k: int(col[k][i]) for k in ("t", "p", "c", "d", "e", "v", "b")}
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
        out["bytes"] = {k: float(col[k][i]) for k in self.term_keys if k in col}
        return out

    @property
    def term_keys(self) -> tuple:
        return tuple(k for k in _STATE_KEYS + ("activations",) + _ALLOW if k in self.columns)

    def top(self, k: int = 10) -> list:
        """The ``k`` best fitting layouts as dicts (see :meth:`row`)."""
        return [self.row(int(i)) for i in self.order()[:k]]

    def best(self) -> dict:
        """The best fitting layout; :class:`NoFitError` naming the closest one when none fits."""
        idx = self.order()
        if len(idx):
            return self.row(int(idx[0]))
        raise self.no_fit()

    def no_fit(self) -> NoFitError:
        import numpy as np

        if not len(self):
            return NoFitError(f"no layout of {self.gpus} GPUs passes the rules ("
                              + ", ".join(f"{k}: {v}" for k, v in self.excluded.items() if v) + ")")
        i = int(np.argmin(self.columns["memory"]))
        r = self.row(i)
        return NoFitError(
            f"no layout of {self.gpus} x {self.space.gpu.name} fits: the least memory is "
            f"{r['memory'] / 1e9:.4g} GB > {self.space.capacity / 1e9:.4g} GB "
            f"(t={r['t']}, p={r['p']}, c={r['c']}, d={r['d']}, b={r['b']}, {r['recompute']} "
            f"recompute, {r['sharding']}; binding term: {r['binding']})",
            binding=(r["binding"],), floor=_exact_row(self.space, r)["bytes"]["total"])

    def pareto(self) -> list:
        """Fitting layouts on the Pareto front of headroom (more is better) vs step time
        (less is better), fastest first.  Without a global batch: the most headroom only."""
        import numpy as np

        col = self.columns
        idx = np.flatnonzero(col["fits"])
        if not len(idx):
            return []
        if self.space.global_batch_size is None:
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
        import numpy as np

        if knob not in self.columns:
            raise UnknownNameError("knob", knob, _KNOBS)
        idx = self.order()
        if not len(idx):
            raise self.no_fit()
        vals = self.columns[knob][idx]
        return self.row(int(idx[int(np.argmax(vals))]))

    def exact(self, i: int) -> dict:
        """Exact bytes of row ``i`` (SymPy, term by term) and the stage they belong to,
        from the same composition the vectorized search used."""
        return _exact_row(self.space, self.row(i))


# ------------------------------------------------------------------------------------------
# the vectorized evaluation
# ------------------------------------------------------------------------------------------
def _evaluate(space: Space, grid: dict, gpus_of_row, progress=None, want_time=True,
              only: dict | None = None, per_stage: bool = False) -> dict:
    """Memory (and step time) of every row of ``grid`` under every discrete choice.

    ``grid`` holds rule-valid numeric knobs.  Every stage of :func:`_check_stages` is
    evaluated (slot j of a row holds its j-th such stage) and the largest is kept.  Returns
    concatenated columns; ``per_stage`` adds ``stage_memory`` (rows x slots, NaN where a row
    has fewer stages) for sizing questions that need each stage's own curve."""
    import numpy as np

    from .training import allowance_values, arch_values

    x = space.arch
    n = len(grid["t"])
    out_cols: dict = {k: [] for k in ("row", "t", "p", "c", "d", "e", "v", "b", "m", "recompute",
                                       "sharding", "sequence_parallel", "offload", "memory",
                                       "stage", "step_time", "f", "l") + TIME_PARTS
                      + _STATE_KEYS + ("activations",) + _ALLOW}
    if per_stage:
        out_cols["stage_memory"] = []
    if n == 0:
        return {k: np.array([]) for k in out_cols}
    B = space.global_batch_size
    t_, p_, c_, d_, e_, v_, b_ = (grid[k] for k in _KNOBS)
    m_ = (B // (b_ * d_)) if B is not None else np.zeros(n, dtype=np.int64)
    scal = {str(k): float(v) for k, v in arch_values(x, 1).items()}
    allow = {str(k): float(v) for k, v in allowance_values(dict(space.allowances)).items()}
    Vpad = {int(tt): float(arch_values(x, int(tt))[V]) for tt in np.unique(t_)}
    V_row = np.array([Vpad[int(tt)] for tt in t_])
    # slot j of a row holds the j-th stage _check_stages gives for its (p, f, l) (-1: none)
    f_, l_ = _splits_of(space, grid)
    uq, inv_pfl = unique_rows(p_, f_, l_)
    stages_of = [_check_stages(_sub(space, fv, lv), int(pv)) for pv, fv, lv in uq]
    nslot = max(len(sts) for sts in stages_of)
    stage_tab = np.full((len(uq), nslot), -1, dtype=np.int64)
    for u, sts in enumerate(stages_of):
        stage_tab[u, :len(sts)] = sts
    slot_stage = stage_tab[inv_pfl].T.copy()
    # per slot: the stage's exact parameter counts (memsym.training.stage_counts), computed
    # once per unique (t, p, e, f, l, stage); and which template stands for it (with the
    # factor its decoder-layer activations scale by: see _stage_template)
    names = [name for name, _ in _stage_counts(space, int(t_[0]), int(p_[0]), int(e_[0]), 0)]
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
                                 slot_stage[j, live])
        table = np.array([[float(v) for _, v in _stage_counts(_sub(space, key[3], key[4]),
                                                               int(key[0]), int(key[1]),
                                                               int(key[2]), int(key[5]))]
                          for key in uniq]).reshape(-1, len(names))
        for col, name in enumerate(names):
            counts[name][j, live] = table[inv, col]
        ids = np.empty(len(uniq), dtype=np.int64)
        fac = np.empty(len(uniq))
        for u, key in enumerate(uniq):
            rep, factor = _stage_template(space, int(key[1]), int(key[3]), int(key[4]),
                                          int(key[5]))
            if rep not in tmpl_index:
                tmpl_index[rep] = len(tmpl_rep)
                tmpl_rep.append(rep)
            ids[u], fac[u] = tmpl_index[rep], factor
        tmpl_id[j, live] = ids[inv]
        scale[j, live] = fac[inv]
    base_kw = dict(scal)
    base_kw.update(allow)
    base_kw.update({"s": float(space.seq_length), "c_f": float(space.capacity_factor),
                    "t": t_.astype(float), "p": p_.astype(float), "c": c_.astype(float),
                    "d": d_.astype(float), "e": e_.astype(float), "t_e": t_.astype(float),
                    "v": v_.astype(float), "b": b_.astype(float), "m": m_.astype(float),
                    "V": V_row})
    knob_k = _grid_knobs(space, grid)
    combos = list(itertools.product(space.recompute, space.sequence_parallel, (False, True),
                                    space.offload, space.sharding))

    def pick(kw, rows):
        return {k: (val[rows] if isinstance(val, np.ndarray) else val) for k, val in kw.items()}

    time_cache: dict = {}

    for done, (rc, spf, inter, off, scheme) in enumerate(combos, 1):
        if progress is not None:
            progress(done, len(combos))
        sel = (v_ > 1) if inter else (v_ == 1)
        if spf:
            sel &= t_ > 1          # SP is a choice only with t > 1 (Megatron turns it off at 1)
        for mask in _rules.masks(x, _choice_knobs(knob_k, spf, off, scheme), _CHOICE_RULES).values():
            sel &= ~mask
        if only is not None:
            sel &= ((only["recompute"] == rc) & (only["sharding"] == scheme)
                    & (only["sequence_parallel"] == spf) & (only["offload"] == off))
        if not sel.any():
            continue
        idx = np.flatnonzero(sel)
        kw = pick(base_kw, idx)
        best_mem = np.full(len(idx), -np.inf)
        best_stage = np.zeros(len(idx), dtype=np.int64)
        best_parts = {key: np.full(len(idx), np.nan) for key in _STATE_KEYS + ("activations",) + _ALLOW}
        stage_mem = np.full((len(idx), nslot), np.nan)
        for j in range(nslot):
            ridx = np.flatnonzero(slot_stage[j, idx] >= 0)
            if not len(ridx):
                continue
            rows = idx[ridx]
            rkw = pick(kw, ridx)
            rkw.update({name: arr[j, rows] for name, arr in counts.items()})
            parts = {"activations": np.zeros(len(ridx))}
            tid = tmpl_id[j, rows]
            for q in np.unique(tid):
                sub = np.flatnonzero(tid == q)
                skw = rkw if len(sub) == len(ridx) else pick(rkw, sub)
                sub_space, pq, stq = tmpl_rep[q]
                _, states, acts, allowance, layer, phases = _fast_template(
                    sub_space, rc, spf, inter, off, scheme, pq, stq)
                # the decoder layers' activations scale with the stage's layer count
                # (one layer kind per shared template, _stage_template)
                fac_q = scale[j, rows[sub]]
                act_q = _call(acts, skw) + fac_q * _call(layer, skw)
                tf, tb, to = (_call(ex, skw) for ex in phases)
                parts["activations"][sub] = act_q + np.maximum(np.maximum(tf, tb), to - act_q)
                for term in states:
                    parts.setdefault(term.key, np.zeros(len(ridx)))[sub] = _call(term.expr, skw)
            allocated = sum(parts.values())
            akw = dict(allow, M_alloc=allocated)
            for term in allowance:
                parts[term.key] = np.broadcast_to(np.asarray(_call(term.expr, akw), dtype=float),
                                                  len(ridx))
            mem = allocated + sum(parts[key] for key in _ALLOW)
            stage_mem[ridx, j] = mem
            # strictly larger: on a tie the lower stage stays (as training_memory picks)
            better = mem > best_mem[ridx]
            tgt = ridx[better]
            best_mem[tgt] = mem[better]
            best_stage[tgt] = slot_stage[j, rows[better]]
            for key, arr2 in parts.items():
                best_parts[key][tgt] = arr2[better]
        out_cols["row"].append(idx)
        for k in ("t", "p", "c", "d", "e", "v", "b"):
            out_cols[k].append(grid[k][idx])
        out_cols["f"].append(f_[idx])
        out_cols["l"].append(l_[idx])
        out_cols["m"].append(m_[idx])
        out_cols["recompute"].append(np.full(len(idx), rc, dtype=object))
        out_cols["sharding"].append(np.full(len(idx), scheme, dtype=object))
        out_cols["offload"].append(np.full(len(idx), off, dtype=object))
        out_cols["sequence_parallel"].append(np.full(len(idx), spf, dtype=bool))
        out_cols["memory"].append(best_mem)
        out_cols["stage"].append(best_stage)
        if per_stage:
            out_cols["stage_memory"].append(stage_mem)
        for key in _STATE_KEYS + ("activations",) + _ALLOW:
            col = best_parts[key]
            # a term some stage has and the row's most-loaded stage lacks (experts on a
            # dense stage) is 0 bytes there; a term no stage has stays NaN (dropped below)
            out_cols[key].append(col if np.isnan(col).all() else np.nan_to_num(col, nan=0.0))
        if want_time and B is not None:
            # the step time depends on the choice only through (recompute, SP, DDP / ZeRO-3 /
            # a sharded optimizer): priced once per such triple over every row, then indexed
            tkey = (rc, spf, scheme if scheme in ("ddp", "zero3") else "sharded")
            if tkey not in time_cache:
                rows_t = np.flatnonzero(t_ > 1) if spf else np.arange(n)
                full = _step_time(space, {k: grid[k][rows_t] for k in _KNOBS}, m_[rows_t],
                                  f_[rows_t], l_[rows_t], rc, spf, scheme)
                pos = np.full(n, -1, dtype=np.int64)
                pos[rows_t] = np.arange(len(rows_t))
                time_cache[tkey] = (full, pos)
            full, pos = time_cache[tkey]
            secs = {k: col[pos[idx]] for k, col in full.items()}
        else:
            secs = {k: np.full(len(idx), np.nan) for k in ("step_time",) + TIME_PARTS}
        for key, col in secs.items():
            out_cols[key].append(col)
    cols = {k: (np.concatenate(v) if v else np.array([])) for k, v in out_cols.items()}
    # drop term columns that are absent everywhere
    for key in _STATE_KEYS:
        if key in cols and (not len(cols[key]) or np.all(np.isnan(cols[key]))):
            del cols[key]
    return cols


#: The step-time breakdown columns of a search [s]: the decoder layers' GEMM and attention
#: compute, memory-bound operations, exposed communication (TP, EP, CP, PP, DP), pipeline
#: bubble, optimizer step, and the rest (embedding, output layer and loss on the end stages)
#: (:func:`memsym.timing.step.step_time_grid`; they add up to the step).
TIME_PARTS = ("time_compute", "time_memory", "time_comm", "time_bubble", "time_optimizer",
              "time_other")


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
    import numpy as np

    from .timing.step import Overlap, Settings, step_time_grid

    x = space.arch
    L_ = x.num_layers
    n = len(knobs["t"])
    if n == 0:
        return {k: np.zeros(0) for k in ("step_time",) + TIME_PARTS}
    st = Settings(seq_length=space.seq_length, micro_batch_size=int(knobs["b"][0]),
                  recompute=rc, sequence_parallel=bool(spf),
                  flash_attention=space.flash_attention, dropout=space.dropout,
                  precision=space.precision if space.precision in ("bf16", "fp16", "fp8", "fp32")
                  else "bf16",
                  distributed_optimizer=scheme != "ddp",
                  schedule="gpipe" if space.schedule == "gpipe" else "1f1b")
    p_ = knobs["p"]
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
                         e=knobs["e"], t_e=knobs["t"], v=knobs["v"], b=knobs["b"],
                         m=np.maximum(m_, 1), settings=st, cluster=space.cluster,
                         eta_gemm=eta, first_stage_layers=first, last_stage_layers=last)
    col = {k: np.broadcast_to(np.asarray(out[k], dtype=float), (n,)) for k in (
        "step", "compute", "memory", "bubble", "optimizer", "tp", "ep", "cp", "pp", "dp",
        "pipeline")}
    if scheme == "zero3":
        bare = step_time_grid(x, space.gpu.name, t=knobs["t"], p=p_, d=knobs["d"], c=knobs["c"],
                              e=knobs["e"], t_e=knobs["t"], v=knobs["v"], b=knobs["b"],
                              m=np.maximum(m_, 1), settings=st, cluster=space.cluster,
                              overlap=Overlap.none(), eta_gemm=eta, first_stage_layers=first,
                              last_stage_layers=last)
        once = np.asarray(bare["dp"], dtype=float)        # RS + AG, nothing hidden
        ag = once * 2 / (2 + st.grad_bytes)
        dp3 = np.maximum(0, np.maximum(m_, 1) * (once + ag) - col["pipeline"])
        col = dict(col, step=col["step"] - col["dp"] + dp3, dp=dp3)
    res = {"step_time": col["step"], "time_compute": col["compute"], "time_memory": col["memory"],
           "time_comm": col["tp"] + col["ep"] + col["cp"] + col["pp"] + col["dp"],
           "time_bubble": col["bubble"], "time_optimizer": col["optimizer"]}
    res["time_other"] = res["step_time"] - sum(res[k] for k in TIME_PARTS[:-1])
    return res


@functools.lru_cache(maxsize=64)
def _model_numbers(x) -> tuple:
    """(active parameters, MoE layers) of an architecture, computed once per search."""
    from .model import active_parameter_count, moe_layer_pattern

    return int(active_parameter_count(x)), sum(moe_layer_pattern(x))


def _binding(cols: dict):
    import numpy as np

    keys = [k for k in _STATE_KEYS + ("activations",) + _ALLOW if k in cols]
    if not len(cols["memory"]):
        return np.array([], dtype=object)
    mat = np.vstack([np.nan_to_num(cols[k], nan=-1.0) for k in keys])
    return np.array(keys, dtype=object)[np.argmax(mat, axis=0)]


# ------------------------------------------------------------------------------------------
# public entry points
# ------------------------------------------------------------------------------------------
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
        GEMM efficiency, 0 < efficiency <= 1; default None, predicted per GEMM shape),
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
    import numpy as np

    start = time.perf_counter()
    G_ = _pos(gpus, "gpus")
    model, gpu = _from_job(model, gpu, options)
    space = options.pop("space", None) or make_space(model, gpu, **options)
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
    okk = _grid_knobs(space, {k: grid[k][ok] for k in _KNOBS}, G_)
    for spf, off, scheme in itertools.product(space.sequence_parallel, space.offload, space.sharding):
        if spf:
            continue      # SP rows exist only with t > 1, where no choice rule refuses SP
        for name, mask in _rules.masks(space.arch, _choice_knobs(okk, spf, off, scheme),
                                       _CHOICE_RULES).items():
            excluded[name] += int(mask.sum())
    if n_ok == 0:
        # an impossible restriction is bad input, not "nothing fits": say which rules
        names = [f"{name} ({RULES[name]})" for name, count in
                 sorted(excluded.items(), key=lambda kv: -kv[1]) if count]
        raise InvalidValueError(f"no layout of {G_} GPUs passes the framework rules with these "
                                "restrictions; excluded by " + "; ".join(names[:4]))
    valid = {k: grid[k][ok] for k in _KNOBS + ("f", "l")}
    gpus_row = np.full(n_ok, G_, dtype=np.int64)
    cols = _evaluate(space, valid, gpus_row, progress)
    cols["headroom"] = space.capacity - cols["memory"] if len(cols["memory"]) else np.array([])
    cols["fits"] = cols["headroom"] >= 0 if len(cols["memory"]) else np.array([], dtype=bool)
    cols["binding"] = _binding(cols)
    res = SearchResult(space, G_, cols, excluded, raw, time.perf_counter() - start, valid=n_ok)
    if space.global_batch_size is None:
        res.notes.append("no global batch size: layouts ranked by memory headroom (no step time)")
    return res


def _exact_row(space: Space, row: Mapping) -> dict:
    """Exact (SymPy) bytes of one layout on its most-loaded stage, grouped like ``estimate``."""
    vals, totals = _row_totals(space, row)
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
    keys, ``activations`` (every activation term), the allowances, ``total``."""
    out = {k: bd[k] for k in _STATE_KEYS if k in bd}
    out["activations"] = sp.Add(*(val for key, val in bd.items()
                                   if key not in _STATE_KEYS and key not in _ALLOW and key != "total"))
    for key in _ALLOW:
        if key in bd:
            out[key] = bd[key]
    out["total"] = bd["total"]
    return out


def _row_totals(space: Space, row: Mapping):
    """(exact values, {stage: Total}) for one layout: the stages the search compares
    (:func:`_check_stages`), each the template the vectorized search compiled, with the
    stage's exact parameter counts substituted (every Term keeps its own source)."""
    from dataclasses import replace as _replace

    from .symbols import lookup, m as m_sym
    from .term import Total
    from .training import Layout, training_values

    tt, pp, cc, dd, ee, vv, bb = (int(row[k]) for k in _KNOBS)
    space = _sub(space, row.get("first_stage_layers") or space.first_stage_layers or 0,
                 row.get("last_stage_layers") or space.last_stage_layers or 0)
    lay = Layout(t=tt, p=pp, d=dd, c=cc, e=ee, v=vv if vv > 1 else None,
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
    for stage in _check_stages(space, pp):
        tot = _template(space, rc, spf, vv > 1, row.get("offload", "none"),
                        _scheme(row["sharding"]), *_template_rep(space, pp, stage))[0]
        sub = {lookup(name): val for name, val in _stage_counts(space, tt, pp, ee, stage)}
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


# ------------------------------------------------------------------------------------------
# minimum hardware
# ------------------------------------------------------------------------------------------
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
    from .analysis import smallest
    from .symbols import m as m_sym

    model, gpu = _from_job(model, gpu, options)
    space = options.pop("space", None) or make_space(model, gpu, **options)
    row = {"t": t, "p": p, "c": c, "d": 1, "e": e, "v": v, "b": b, "recompute": recompute,
           "sharding": _scheme(sharding), "sequence_parallel": sequence_parallel,
           "offload": offload}
    broken = [r for r in explain(space, row) if r not in ("batch", "ep-group")]
    if broken:
        raise InvalidValueError("layout breaks " + ", ".join(f"{r} ({RULES[r]})" for r in broken))
    vals, full = _row_totals(space, row)   # every value is exact; N is already the stage's
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


def _no_valid_choice(space, knobs, maxg) -> NoFitError:
    """Every (layout, discrete choice) breaks a rule (offload with p > 1, say): name it."""
    why = (f" (offload-pp: {RULES['offload-pp']})"
           if "none" not in space.offload and all(int(x_) > 1 for x_ in knobs["p"]) else "")
    return NoFitError(f"no layout passes the rules within {maxg} GPUs{why}")


def min_gpus(model, gpu=None, *, max_gpus: int = 1 << 17, progress: Callable | None = None,
             **options) -> MinGpus:
    r"""The fewest GPUs on which the training fits, over every layout the rules allow.

    For each rule-valid (t, p, c, e, v, b) and discrete choice the memory is nonincreasing
    in d, so the smallest fitting d is found for all of them at once (vectorized exponential
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
    model, gpu = _from_job(model, gpu, options)
    space = options.pop("space", None) or make_space(model, gpu, **options)
    x = space.arch
    maxg = _pos(max_gpus, "max_gpus")
    # candidate (t, p, c, e, v, b): the knob rules except world size and the d-dependent ones
    pseudo = replace(space, global_batch_size=None)
    cand_t = space.tp or tuple(dv for dv in _divisors(x.num_attention_heads) if dv <= space.gpus_per_node)
    cand_p = space.pp or tuple(_divisors(x.num_layers)) if space.first_stage_layers is None \
        and space.last_stage_layers is None else (space.pp or tuple(range(2, x.num_layers + 1)))
    cand_c = space.cp or (1,)
    cand_e = space.ep or (tuple(_divisors(x.num_experts)) if x.num_experts else (1,))
    cand_v = space.vpp or (1,)   # interleaving never lowers memory (seed 001): v = 1 for sizing
    prod = np.array(list(itertools.product(cand_t, cand_p, cand_c, cand_e, cand_v,
                                           space.micro_batch_sizes)), dtype=np.int64)
    grid = {k: prod[:, i] for i, k in enumerate(("t", "p", "c", "e", "v", "b"))}
    grid["d"] = np.ones(len(prod), dtype=np.int64)
    masks = rule_masks(pseudo, grid)
    masks.pop("ep-group", None)
    bad = np.zeros(len(prod), dtype=bool)
    for mask in masks.values():
        bad |= mask
    grid = {k: val[~bad] for k, val in grid.items()}
    grid = {k: val[grid["t"] * grid["p"] * grid["c"] <= maxg] for k, val in grid.items()}
    if not len(grid["t"]):
        raise NoFitError(f"no layout passes the rules within {maxg} GPUs")
    B = space.global_batch_size
    knobs = {k: grid[k] for k in ("t", "p", "c", "e", "v", "b")}
    nk = len(knobs["t"])

    def evaluate_at(dvals, only=None, rows=None, per_stage=False):
        """Memory of knob rows (``rows``, default all) at data-parallel sizes ``dvals``
        under every discrete choice (or the row's own choice with ``only``)."""
        sel = np.arange(nk) if rows is None else rows
        g2 = {k: knobs[k][sel] for k in knobs}
        g2["d"] = np.asarray(dvals, dtype=np.int64)
        return _evaluate(space, g2, np.zeros(len(sel), dtype=np.int64), want_time=False,
                         only=only, per_stage=per_stage)

    def report(done, total):
        if progress is not None:
            progress(done, total)

    cap = float(space.capacity)
    if B is not None:
        # finite candidates: b*d must divide B; memory is nonincreasing in d (fewer
        # micro-batches in flight, more sharding), so the first divisor that fits is the answer
        best = {}
        dvs = sorted({dv for bb in np.unique(knobs["b"]) for dv in _divisors(B // int(bb))})
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
                                   only={k: rows[k][sel] for k in _CHOICE_KEYS})
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
    for k in ("t", "p", "c", "e", "v", "b"):
        rows[k] = knobs[k][rows["knob"]]
    ok = best_d > 0
    if not ok.any():
        # the least memory at the largest d tried names the binding term
        dfar = np.maximum(maxg // (knobs["t"] * knobs["p"] * knobs["c"]), 1)
        cols = evaluate_at(dfar)
        if not len(cols["memory"]):   # every candidate breaks a rule of its discrete choices
            raise _no_valid_choice(space, knobs, maxg)
        cols["binding"] = _binding(cols)
        j = int(np.argmin(cols["memory"]))
        least = {k: cols[k][j] for k in _KNOBS + _CHOICE_KEYS}
        raise NoFitError(
            f"nothing fits within {maxg} x {space.gpu.name}: the least memory is "
            f"{cols['memory'][j] / 1e9:.4g} GB > {space.capacity / 1e9:.4g} GB (t={cols['t'][j]}, "
            f"p={cols['p'][j]}, c={cols['c'][j]}, d={cols['d'][j]}, b={cols['b'][j]}, "
            f"{cols['recompute'][j]} recompute, {cols['sharding'][j]}); binding term: "
            f"{cols['binding'][j]}", binding=(str(cols["binding"][j]),),
            floor=_exact_row(space, least)["bytes"]["total"])
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
                     "offload": str(rows["offload"][i])})
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
    keyset = {(r["t"], r["p"], r["c"], r["d"], r["e"], r["v"], r["b"], r["recompute"],
               r["sharding"], r["sequence_parallel"], r["offload"]) for r in cand}
    for i in order:
        r = res.row(int(i))
        key = (r["t"], r["p"], r["c"], r["d"], r["e"], r["v"], r["b"], r["recompute"],
               r["sharding"], r["sequence_parallel"], r["offload"])
        if key in keyset:
            chosen = r
            break
    if chosen is None:
        chosen = res.best() if len(order) else {**cand[0]}
    lay = {k: chosen[k] for k in ("t", "p", "c", "d", "e", "v", "b", "recompute", "sharding",
                                  "sequence_parallel", "offload")}
    lay["m"] = chosen.get("m")
    # the exact, symbolic answer for the chosen layout
    sol, method, closed, bound = None, "searched", None, None
    try:
        sol = smallest_d(model, gpu, space=space, hint=lay["d"], **{k: lay[k] for k in (
            "t", "p", "c", "e", "b", "v", "recompute", "sharding", "sequence_parallel", "offload")})
        closed, bound = sol.closed_form, sol.bound
        if closed is not None:
            method = "closed form"
        if sol.value != lay["d"]:
            # the vectorized search and the exact solver disagree only at float ties
            res.notes.append(f"the exact solver gives d = {sol.value}, the search d = {lay['d']}")
    except MemsymError:   # a solver gap falls back to the searched answer
        sol = None
    exact = _exact_row(space, lay)
    return MinGpus(gbest, lay, exact["bytes"], closed, bound, method, sol, n,
                   time.perf_counter() - start, res.notes)


# ------------------------------------------------------------------------------------------
# the largest micro-batch, sequence, model
# ------------------------------------------------------------------------------------------
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
    from .analysis import largest
    from .symbols import b as b_sym, s as s_sym

    what = _choices("quantity", [what], ("micro_batch_size", "seq_length", "layers"))[0]
    lay = {"t": 1, "p": 1, "c": 1, "d": 1, "e": 1, "v": 1, "b": 1, "recompute": "none",
           "sharding": "distributed-optimizer", "sequence_parallel": False, "offload": "none"}
    lay.update(layout or {})
    lay["sharding"] = _scheme(lay["sharding"])
    model, gpu = _from_job(model, gpu, options)
    space = options.pop("space", None) or make_space(model, gpu, **options)
    if space.global_batch_size is not None and what == "micro_batch_size":
        raise InvalidValueError("the largest micro-batch is asked with no global batch (m free)")
    if what == "layers":
        from .model import resolve

        def fits(nl):
            sp2 = replace(space, arch=resolve(replace(space.arch, num_layers=int(nl))))
            if explain(sp2, lay):
                return None
            ex = _exact_row(sp2, lay)
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
    if what == "seq_length" and space.arch.max_position_embeddings:
        limit = min(limit, space.arch.max_position_embeddings)     # rule seq-positions
    vals, totals = _row_totals(space, lay)
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
