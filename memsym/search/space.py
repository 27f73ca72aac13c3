"""The search problem: the model, GPU, candidate knobs and discrete choices (:class:`Space`,
:func:`make_space`), and the names the search reports (:data:`RULES`); the sharding and
recompute choices it enumerates are :mod:`memsym.search.choices`'.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, fields

from ..errors import InvalidValueError, UnknownNameError, choose
from ..values import boolean, exact
from ..vocabulary import MOE_DISPATCHERS
from .. import hardware, model as models, rules as _rules
from ..frameworks import FRAMEWORK
from ..job import DEFAULTS, FRAMEWORKS, Job, resolve_dropout
from ..job_checks import check_dispatcher, compile_changes_recompute
from ..job_checks_hf import check_autocast
from ..job_record import Layout
from ..job_framework import framework_architecture
from ..limits import check_limit
from ..terms.model_state import CONVENTIONS, OFFLOADS, OPTIMIZERS, PRECISIONS, byte_widths
from ..model import moe_layer_pattern
from ..training import ALLOWANCES, Training
from ..terms.adapters import LORA_TARGETS, QUANTIZATIONS
# re-exported: the search's callers import them here
from .job_fields import (HELD_FIELDS, autocast_choices, MEGATRON_FSDP_STRATEGY, OVERLAP_FIELDS,  # noqa: F401
                         carried_ub_config, checked_held, checked_overlaps, row_overlaps,
                         global_batch_of, held_of, checked_efficiency, megatron_fsdp_rows,
                         refuse_unsearched, states_scheme)
from .choices import framework_choices, matched_choices, recompute_choices, recompute_fields


#: The rules the search applies, by name (the name is what the output shows), from the one
#: rule table :data:`memsym.rules.RULES`.
RULES = {name: rule.summary for name, rule in _rules.RULES.items()}


#: Rules on the discrete choices (checked per recompute/sharding/SP/offload combination).
CHOICE_RULES = ("moe-tp-sp", "torchtitan-tp-sp", "offload-pp", "zero-pp", "muon-sharding",
                "torchtitan-ep-replicas")


KNOBS = ("t", "p", "c", "d", "e", "v", "b", "t_e")


CHOICE_KEYS = ("recompute", "sharding", "sequence_parallel", "offload")


def divisors_of(n: int) -> list:
    small = [i for i in range(1, int(math.isqrt(n)) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))


#: The memsym.limits limit each searched size is bounded by (every loop and grid is bounded).
_LIMIT_OF = {"gpus": "gpus", "max_gpus": "gpus", "gpus_per_node": "gpus", "seq_length": "sequence",
             "global_batch_size": "global_batch", "micro-batch size": "micro_batch",
             "lora_rank": "rank", "tp": "gpus", "pp": "gpus", "cp": "gpus", "ep": "gpus",
             "etp": "gpus", "vpp": "layers"}


def positive_whole(value, what):
    # numbers only: int("abc"), int(nan), int(inf) and int(None) would escape as other errors
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or int(value) != value or int(value) < 1:
        raise InvalidValueError(f"{what} must be a whole number >= 1, got {value!r:.40}")
    if what in _LIMIT_OF:
        check_limit(_LIMIT_OF[what], int(value), what)
    return int(value)


def _int_list(given, what):
    if given is None:
        return None
    if isinstance(given, (int,)) and not isinstance(given, bool):
        given = [given]
    return tuple(sorted({positive_whole(x, what) for x in given}))


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
    capacity_factor: object = 1
    #: offer uneven first/last pipeline stages (:func:`stage_splits`) when none is given
    uneven: bool = True
    cluster: object = None
    #: whose launch rules and runtime apply (:data:`memsym.job.FRAMEWORKS`)
    framework: str = "megatron"
    #: Megatron's --fp8-recipe under fp8 (None: per-tensor scaling; memsym.vocabulary.FP8_RECIPES)
    fp8_recipe: str | None = None
    #: the data-parallel overlaps every row is priced with: None, the launch's
    #: (memsym.search.step_times.launch_overlaps); else a job's own ``(name, value)`` pairs of
    #: overlap_grad_reduce / overlap_param_gather (None: the framework's default)
    overlaps: tuple | None = None
    #: Megatron-core's MoE token dispatcher, held fixed over the searched layouts (its
    #: buffers priced per row as estimate prices them: memsym.terms.dispatcher_buffers)
    moe_dispatcher: str = "alltoall"
    #: Megatron's --tp-comm-overlap, held fixed: on in every row that runs sequence
    #: parallelism (t > 1; validate_args asserts SP under it), with Transformer Engine's
    #: userbuffers (memsym.terms.transients.tp_comm_userbuffers) and the overlapped TP time
    tp_comm_overlap: bool = False
    #: Megatron-FSDP's --fsdp-double-buffer, held fixed: on in every Megatron-FSDP row (its
    #: persistent bucket pools, memsym.terms.transients.megatron_fsdp_buckets)
    fsdp_double_buffer: bool = False
    #: Megatron's --tp-comm-overlap-cfg, held fixed with tp_comm_overlap: the userbuffers
    #: config the overlapped TP GEMMs are timed with (None: Transformer Engine's default)
    tp_comm_overlap_cfg: object = None
    #: a job's other settings, held fixed: (name, value) pairs of HELD_FIELDS (job_fields)
    held: tuple = ()
    etp: tuple | None = None    # the experts' TP sizes tried (None: grid.expert_tp_sizes')
    #: the framework's default recompute modes the model's memory terms refuse, left out of
    #: the searched choices (a shared block's selective: memsym.terms.mamba); said in a note
    unmodelled_recompute: tuple = ()
    #: the knobs the framework's searchable sizes held where the caller named none
    #: (:attr:`memsym.frameworks.Framework.searched_sizes`); said in a note
    framework_held: tuple = ()

    def __hash__(self) -> int:
        # a space keys every per-search cache (templates, stages, counts) and is hashed
        # hundreds of thousands of times a search: its fields' hash (the architecture's
        # included) is computed once and kept beside them (not a field: equality, repr and
        # dataclasses.replace do not see it)
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", h)
            return h

    def __getstate__(self) -> dict:
        # a string's hash differs between processes: the kept hash is never pickled
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def comm_fields(self, sp_on: bool) -> dict:
        """The :class:`memsym.training.Training` communication fields of a row with sequence
        parallelism ``sp_on``: ``tp_comm_overlap`` where it is carried and the row runs SP
        (Megatron asserts SP under it), else none.

        Examples
        --------
        >>> space = make_space("llama3-8b", "h100-80gb", tp_comm_overlap=True)
        >>> space.comm_fields(True), space.comm_fields(False)
        ({'tp_comm_overlap': True}, {})
        """
        if not (self.tp_comm_overlap and sp_on):
            return {}
        cfg = self.tp_comm_overlap_cfg
        return {"tp_comm_overlap": True, **({} if cfg is None else {"tp_comm_overlap_cfg": cfg})}

    @property
    def uniform(self) -> bool:
        return (self.first_stage_layers is None and self.last_stage_layers is None
                and len(set(moe_layer_pattern(self.arch))) == 1)

    def training(self, **kw):
        """The :class:`memsym.training.Training` of this space with ``kw`` changed, one
        (immutable) record per distinct set of changes: a cold search asks for the same few
        hundreds of times while it builds its templates."""
        try:
            return _space_training(self, tuple(sorted(kw.items())))
        except TypeError:    # an unhashable value (or a refused keyword: raised again below)
            return self.build_training(**kw)

    def build_training(self, **kw):
        """:meth:`training`, built anew."""
        base = dict(seq_length=self.seq_length, micro_batch_size=1,
                    global_batch_size=self.global_batch_size, recompute="none",
                    flash_attention=self.flash_attention, dropout=self.dropout,
                    schedule=self.schedule, precision=self.precision, optimizer=self.optimizer,
                    sharding="distributed-optimizer", convention=self.convention,
                    offload="none", capacity_factor=self.capacity_factor,
                    finetune=self.finetune, lora_rank=self.lora_rank,
                    lora_targets=self.lora_targets, quantization=self.quantization,
                    framework=self.framework, moe_dispatcher=self.moe_dispatcher)
        if self.fp8_recipe is not None:
            base["fp8_recipe"] = self.fp8_recipe
        base.update(self.held)
        if "recompute" in kw:
            kw = {**kw, **recompute_fields(kw["recompute"])}
        if self.overlaps is not None:      # a job's own overlaps (plot feasibility's)
            base.update(row_overlaps(self.overlaps, self.framework, kw.get("sharding", "")))
        elif FRAMEWORK[self.framework].launch_overlaps == "overlap_comm":
            # the emitted config's overlap_comm (step_times.launch_overlaps): its second IPG
            # buffer is memory the read-back counts (memsym.training.transients._transient_widths)
            base["overlap_grad_reduce"] = True
        base.update(kw)
        if base.get("compiled_model") and not compile_changes_recompute(base.get("recompute")):
            # torch.compile changes what per-op SAC saves only: another row's recompute keeps
            # what it keeps, as memsym.readers.jobs.torchtitan_job reads a compiled model
            base["compiled_model"] = False
        if FRAMEWORK[self.framework].megatron_options and base["sharding"] in MEGATRON_FSDP_STRATEGY:
            # Megatron-LM runs ZeRO-2 as Megatron-FSDP optim_grads, FSDP as optim_grads_params
            # and the no_shard / optim rows as themselves (memsym.emit spells them so): priced
            # with its own buffers, as the read-back counts them
            base["megatron_fsdp"] = MEGATRON_FSDP_STRATEGY[base["sharding"]]
            base["sharding"] = states_scheme(base["sharding"])
            base["fsdp_double_buffer"] = self.fsdp_double_buffer
        return Training(**base)


@functools.lru_cache(maxsize=4096)
def _space_training(space: Space, changes: tuple):
    return space.build_training(**dict(changes))


def from_job(model, gpu, options: dict):
    """A :class:`memsym.job.Job` as the search's model: its resolved architecture, and its
    training settings (its HELD_FIELDS as ``held``), allowances, GPU and capacity as the
    defaults of ``options`` (the layout is what the search explores; micro-batches given as
    its global batch, :func:`global_batch_of`); another setting is refused
    (:func:`refuse_unsearched`; the overlaps are carried when ``options`` gives ``overlaps``)."""
    if not isinstance(model, Job):
        return model, gpu
    tr = model.training
    refuse_unsearched(tr, carried=("num_microbatches",) + HELD_FIELDS + (
        OVERLAP_FIELDS if options.get("overlaps") is not None else ()))
    options.setdefault("held", dict(held_of(tr)))
    for key, val in (("seq_length", tr.batch.seq_length), ("global_batch_size", global_batch_of(model)),
                     ("precision", tr.states.precision), ("optimizer", tr.states.optimizer),
                     ("convention", tr.states.convention), ("flash_attention", tr.memory.flash_attention),
                     ("dropout", tr.memory.dropout), ("schedule", tr.pipeline.schedule),
                     ("capacity_factor", tr.memory.capacity_factor), ("finetune", tr.adapters.finetune),
                     ("lora_rank", tr.adapters.lora_rank), ("lora_targets", tr.adapters.lora_targets),
                     ("quantization", tr.adapters.quantization), ("allowances", dict(model.allowances)),
                     ("framework", tr.framework), ("fp8_recipe", tr.states.fp8_recipe),
                     ("moe_dispatcher", tr.memory.moe_dispatcher),
                     ("tp_comm_overlap", tr.comm.tp_comm_overlap),
                     ("fsdp_double_buffer", tr.states.fsdp_double_buffer),
                     ("tp_comm_overlap_cfg", tr.comm.tp_comm_overlap_cfg),
                     ("capacity", model.capacity)):
        if val is not None:
            options.setdefault(key, val)
    if tr.states.megatron_fsdp is not None:   # searched over Megatron-FSDP's strategies
        options.setdefault("sharding", tuple(MEGATRON_FSDP_STRATEGY))
    if tr.states.fp8_param_gather:   # Megatron's validate_args: DistOpt or FSDP, not DDP
        options.setdefault("sharding", ("distributed-optimizer",))
    if gpu is None and model.gpu is not None:
        gpu = model.gpu.name
    return model.model, gpu


def _sequence_parallel_choices(sequence_parallel, framework) -> tuple:
    """The sequence-parallel choices searched: off only where the framework's TP never splits
    the sequence (:attr:`memsym.frameworks.Framework.tp_without_sequence_parallel`)."""
    got = {bool(x) for x in ([sequence_parallel] if isinstance(sequence_parallel, bool)
                             else sequence_parallel)}
    if FRAMEWORK[framework].tp_without_sequence_parallel:
        if got == {True}:
            raise InvalidValueError(f"sequence_parallel: {FRAMEWORK[framework].title}'s tensor "
                                    "parallelism (AutoTP) never splits the sequence")
        got = {False}
    return tuple(sorted(got))


def _autocast_space(arch, held, sizes, sharding, recompute, job_fields: dict) -> tuple:
    """:func:`memsym.search.job_fields.autocast_choices`, then each recompute choice left
    checked as estimate checks the job (:func:`memsym.job_checks_hf.check_autocast` on a
    one-GPU replica of the model and ``job_fields``): a choice the check refuses is dropped
    where the caller named none (LoRA over 16-bit weights is counted under full recompute
    only), refused in one line where it was named, as is a model or framework the check
    refuses."""
    named = recompute is not None
    sizes, sharding, recompute = autocast_choices(held, sizes, sharding, recompute)
    autocast = dict(held or {}).get("autocast")
    if not autocast:
        return sizes, sharding, recompute
    kept, refusal = [], None
    for rc in recompute:
        probe = Training(sharding="ddp", autocast=autocast, **recompute_fields(rc),
                         **{k: v for k, v in job_fields.items() if v is not None})
        try:
            check_autocast(arch, Layout(), probe)
        except InvalidValueError as err:
            if named:
                raise
            refusal = refusal or err
            continue
        kept.append(rc)
    if not kept:
        raise refusal
    return sizes, sharding, kept


def _capacity_factor(value):
    """The MoE capacity factor, exact and > 0 (refused in one line otherwise)."""
    cf = exact(value, "capacity_factor")
    if not cf > 0:
        raise InvalidValueError(f"capacity_factor must be > 0, got {value}")
    return cf


def make_space(model, gpu, *, seq_length=DEFAULTS["seq_length"], global_batch_size=None,
               micro_batch_sizes=None,
               recompute=None, sharding=None,
               sequence_parallel=(False, True), offload=("none",), tp=None, pp=None, cp=None,
               ep=None, vpp=None, precision=DEFAULTS["precision"], optimizer=DEFAULTS["optimizer"],
               convention=DEFAULTS["convention"],
               flash_attention=DEFAULTS["flash_attention"], dropout=None,
               schedule=DEFAULTS["schedule"], allowances=None,
               finetune="full", lora_rank=16, lora_targets="all", quantization=None,
               first_stage_layers=None, last_stage_layers=None, capacity=None,
               gpus_per_node=None, cluster=None, efficiency=None, capacity_factor=1, fp8_recipe=None,
               uneven=True, framework="megatron", overlaps=None, moe_dispatcher="alltoall",
               tp_comm_overlap=False, fsdp_double_buffer=False, tp_comm_overlap_cfg=None,
               held=None, etp=None) -> Space:
    """Validate the search keywords into a :class:`Space` (see :func:`search`).

    ``recompute`` and ``sharding`` default to what the framework offers: Megatron's none /
    selective / full and :data:`memsym.search.choices.SCHEMES`; torchtitan's
    :data:`~memsym.search.choices.TORCHTITAN_RECOMPUTE` (per-op SAC for dense gated-MLP models
    only) and :data:`~memsym.search.choices.TORCHTITAN_SCHEMES`."""
    arch = model if isinstance(model, models.Architecture) else models.resolve_model(model)
    arch = models.resolve(arch, seq_length=positive_whole(seq_length, "seq_length"))
    dev, clu, cap = _device(gpu, cluster, gpus_per_node, capacity)
    finetune, quantization, lora_targets = _adapters(finetune, quantization, lora_targets)
    B = None if global_batch_size is None else positive_whole(global_batch_size, "global_batch_size")
    if micro_batch_sizes is None:
        limit = 8 if B is None else min(8, B)
        micro_batch_sizes = [x for x in (1, 2, 4, 8) if x <= limit]
    mbs = _int_list(micro_batch_sizes, "micro-batch size")

    framework = choose("framework", framework, FRAMEWORKS)
    arch = framework_architecture(arch, framework)      # transformers' unpadded vocabulary
    titan = FRAMEWORK[framework].layer_selective_ac     # torchtitan's AC and FSDP2 choices
    # autocast: the layouts and choices it was measured under, checked as estimate checks it
    (tp, pp, cp, ep), sharding, recompute = _autocast_space(
        arch, held, (tp, pp, cp, ep), sharding, recompute, dict(
            framework=framework, precision=precision, flash_attention=flash_attention, finetune=finetune))
    # the sizes its own file spells, held where none is named (search, min-gpus, plot, --emit)
    held_sizes = FRAMEWORK[framework].held_sizes(tp=tp, pp=pp, cp=cp, vpp=vpp, recompute=recompute)
    tp, pp, cp, vpp, recompute = held_sizes["all"]
    # None: the preset's recipe or the framework's default, as memsym.job.job resolves it
    # (torchtitan builds no dropout; Megatron-Bridge trains Llama without)
    dropout, _ = resolve_dropout(framework, None if dropout is None
                                 else boolean(dropout, "dropout"), model, arch)
    prec = choose("precision", precision, PRECISIONS)
    # a shared block's selective recompute (Zamba, Zamba2) is refused by its memory terms:
    # left out of the default choices, one place for every caller (search, min-gpus, --emit)
    unmodelled = ("selective",) if recompute is None and arch.shared_blocks else ()
    shard, recompute, modes = framework_choices(framework, arch, sharding, recompute,
                                                 finetune, flash_attention, prec)
    recompute = tuple(r for r in recompute if r not in unmodelled)
    shard = megatron_fsdp_rows(shard, choose("optimizer", optimizer, OPTIMIZERS), framework,
                               given=sharding is not None)
    for scheme in shard:   # a scheme the precision is not modelled under: refused before searching
        byte_widths(states_scheme(scheme), prec, choose("optimizer", optimizer, OPTIMIZERS),
                    convention)
    al = _allowances(allowances)
    # None: the step time predicts GEMM efficiency (memsym.timing.efficiency); a number is
    # the explicit, named override (the achieved GEMM efficiency eta_gemm)
    eff = None if efficiency is None else checked_efficiency(efficiency)
    first_stage_layers, last_stage_layers = (None if v is None else positive_whole(v, w)
                                             for v, w in ((first_stage_layers, "first_stage_layers"),
                                                          (last_stage_layers, "last_stage_layers")))
    if B is not None:
        dev.peak(prec)   # the step time needs the GPU's peak at this precision: refuse early
    dispatcher = _dispatcher(moe_dispatcher, arch, framework)
    overlap = boolean(tp_comm_overlap, "tp_comm_overlap")
    if overlap and not FRAMEWORK[framework].megatron_options:
        raise InvalidValueError(f"tp_comm_overlap is Megatron's --tp-comm-overlap, not a "
                                f"{framework} option")
    double = boolean(fsdp_double_buffer, "fsdp_double_buffer")
    if double and not (FRAMEWORK[framework].megatron_options
                       and set(shard) & set(MEGATRON_FSDP_STRATEGY)):
        raise InvalidValueError("fsdp_double_buffer is Megatron-FSDP's: search one of its "
                                "strategies (sharding no_shard, optim, zero2, fsdp)")
    return Space(
        arch=arch, gpu=dev, capacity=int(cap) if float(cap).is_integer() else cap,
        gpus_per_node=clu.gpus_per_node, seq_length=int(seq_length), global_batch_size=B,
        micro_batch_sizes=mbs,
        recompute=recompute_choices([recompute] if isinstance(recompute, str) else recompute,
                                     modes, titan, arch.num_layers),
        sharding=shard,
        sequence_parallel=_sequence_parallel_choices(sequence_parallel, framework),
        offload=matched_choices("offload", [offload] if isinstance(offload, str) else offload, OFFLOADS),
        tp=_int_list(tp, "tp"), pp=_int_list(pp, "pp"), cp=_int_list(cp, "cp"),
        ep=_int_list(ep, "ep"), vpp=_int_list(vpp, "vpp"),
        precision=prec, optimizer=choose("optimizer", optimizer, OPTIMIZERS),
        convention=matched_choices("convention", [convention], CONVENTIONS)[0],
        flash_attention=boolean(flash_attention, "flash_attention"),
        dropout=dropout, schedule=schedule,
        allowances=al, finetune=finetune, lora_rank=positive_whole(lora_rank, "lora_rank"),
        lora_targets=lora_targets, quantization=quantization,
        first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
        efficiency=eff, capacity_factor=_capacity_factor(capacity_factor), uneven=bool(uneven), cluster=clu,
        framework=framework, fp8_recipe=fp8_recipe, overlaps=checked_overlaps(overlaps),
        moe_dispatcher=dispatcher, tp_comm_overlap=overlap, fsdp_double_buffer=double,
        tp_comm_overlap_cfg=carried_ub_config(tp_comm_overlap_cfg, overlap),
        held=checked_held(held), etp=_int_list(etp, "etp"),
        unmodelled_recompute=tuple(r for r in unmodelled if r in modes),
        framework_held=held_sizes["held"])


def _allowances(allowances) -> tuple:
    """The allowance overrides as sorted ``(name, value)`` pairs, each name checked."""
    al = tuple(sorted((k, v) for k, v in (allowances or {}).items()))
    for key, _ in al:
        if key not in ALLOWANCES:
            raise UnknownNameError("allowance", key, ALLOWANCES)
    return al


def _dispatcher(name, arch, framework) -> str:
    """The MoE token dispatcher held fixed over the search, checked as a job checks it
    (:func:`memsym.job_checks.check_dispatcher`): Megatron-core's, and only with experts."""
    name = choose("MoE token dispatcher", name, MOE_DISPATCHERS)
    check_dispatcher(name, framework, bool(arch.num_experts))
    return name


def _device(gpu, cluster, gpus_per_node, capacity) -> tuple:
    """``(gpu, cluster, capacity)``: the GPU, its cluster and its memory [bytes], checked."""
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
        clu = clu.with_(gpus_per_node=positive_whole(gpus_per_node, "gpus_per_node"))
    cap = dev.capacity_bytes if capacity is None else capacity
    if isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not cap > 0 \
            or not math.isfinite(cap):
        raise InvalidValueError(f"GPU memory capacity must be a number of bytes > 0 (for text use "
                                f"memsym.units.parse_bytes('80GB')), got {cap!r:.40}")
    return dev, clu, cap


def _adapters(finetune, quantization, lora_targets) -> tuple:
    """``(finetune, quantization, lora_targets)`` checked, the quantization defaulted."""
    finetune = matched_choices("fine-tuning mode", [finetune], ("full", "lora", "qlora"))[0]
    if quantization is None:
        quantization = {"full": "bf16", "lora": "bf16", "qlora": "nf4-dq"}[finetune]
    quantization = matched_choices("quantization", [quantization], QUANTIZATIONS)[0]
    if isinstance(lora_targets, str):
        lora_targets = LORA_TARGETS if lora_targets == "all" else (lora_targets,)
    lora_targets = matched_choices("LoRA target", lora_targets, LORA_TARGETS)
    return finetune, quantization, lora_targets
