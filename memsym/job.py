r"""One training job: the resolved model, the layout, the step and the hardware, built once.

The record's parts and their defaults are :mod:`memsym.job_record` (re-exported here).

Every command and API answers from a :class:`Job`: :func:`job` builds it from a preset, a
config.json, an :class:`~memsym.model.Architecture` or architecture fields, with one set of
defaults (:data:`DEFAULTS`) and one validation (:mod:`memsym.rules`); nothing downstream
resolves or validates it again.

.. math:: G = t\,p\,c\,d, \qquad B = m\,b\,d
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping

from .errors import InvalidValueError, UnknownNameError
from .frameworks import framework as framework_record
from .terms.allowances import allowance_values
from .terms.cuda_graphs import cuda_graph_notes
from .terms.hf_eager_attention import EAGER_ONLY
from . import hardware, rules
from .model.pipeline_layout import PipelineLayout
from .model import Architecture, resolve, resolve_model
from .units import capacity_bytes as _capacity   # GPU memory capacity as whole bytes
from .vocabulary import ALLOWANCE_KEYS, FRAMEWORKS, RECOMPUTE_METHODS  # noqa: F401

from .job_record import (DEFAULTS, FIELD_PARTS, OPTION_ALIASES, REPORTED_DEFAULTS, Layout, Training,
                         microbatches, recompute_modules_of, whole)
# the checks and the framework's decisions live in their own modules; re-exported here, where
# every caller imports them from
from .job_checks import canonical, check_fields, check_types, validate  # noqa: F401
from .job_framework import (dropout_kept, framework_architecture, framework_dropout,  # noqa: F401
                            framework_layout, resolve_dropout)
from .values import flag

__all__ = ["Layout", "Training", "Job", "DEFAULTS", "REPORTED_DEFAULTS", "OPTION_ALIASES", "job", "whole",
           "recompute_modules_of", "resolve_dropout", "dropout_kept",
           "microbatches", "validate", "muon_no_effect_note"]

#: Megatron's switches that count the embedding / loss as a layer of the pipeline split
#: (:meth:`memsym.model.pipeline_layout.PipelineLayout.from_account_flags`).
_ACCOUNT_FLAGS = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")


# ---------------------------------------------------------------------------------------------
# the job
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Job:
    """One training job, resolved and validated (build it with :func:`job`).

    Attributes
    ----------
    model : memsym.model.Resolved
        The architecture, every default filled in.
    layout : Layout
        The parallel layout (:class:`Layout`).
    training : Training
        The training step (:class:`Training`).
    allowances : tuple of (str, number)
        Overrides of the allowance defaults (:data:`memsym.training.ALLOWANCES`).
    gpu, cluster : hardware records or None
        Where it runs (:mod:`memsym.hardware`), when given.
    capacity : int or None
        GPU memory [bytes] the job must fit (unless given, the GPU's
        :attr:`~memsym.hardware.GPU.capacity_bytes`: the total CUDA reports, where cited).
    m : int or None
        Micro-batches per step and pipeline [1] (from ``B/(b d)`` or given).
    notes : tuple of str
        What was assumed or adjusted (defaults that matter, SP off at t = 1, ...).
    defaults : tuple of (str, object, str)
        Each default the job applied because it was not given: ``(option, value, where the
        default comes from)`` (:data:`REPORTED_DEFAULTS`, or the framework reader's own).
    """

    model: object
    layout: Layout = field(default_factory=Layout)
    training: Training = field(default_factory=Training)
    allowances: tuple = ()
    gpu: object = None
    cluster: object = None
    capacity: int | None = None
    m: int | None = None
    notes: tuple = ()
    defaults: tuple = ()

    def replace(self, **options) -> "Job":
        """A new job with ``options`` changed (the same names as :func:`job`), validated."""
        defaults = tuple(d for d in self.defaults if d[0] not in _canonical(options))
        options.setdefault("capacity", self.capacity)    # replace(capacity=...) changes it
        return job(self.model, layout=self.layout, training=self.training,
                   allowances=dict(self.allowances), gpu=self.gpu, cluster=self.cluster,
                   _notes=self.notes, _defaults=defaults, **options)

    @property
    def world_size(self) -> int:
        """``G = t p c d`` [GPUs]."""
        return self.layout.world_size

    def describe(self) -> str:
        """One line naming the model and the layout (titles, headers)."""
        lay, trn = self.layout, self.training
        parts = [f"t={lay.t}", f"p={lay.p}", f"d={lay.d}"]
        parts += [f"{n}={getattr(lay, n)}" for n in ("c", "e") if getattr(lay, n) != 1]
        if lay.v:
            parts.append(f"v={lay.v}")
        return f"{self.model.name}, {' '.join(parts)}, s={trn.batch.seq_length}, b={trn.batch.micro_batch_size}"


_LAYOUT_FIELDS = tuple(f.name for f in dataclasses.fields(Layout))
_TRAINING_FIELDS = tuple(FIELD_PARTS)


def _canonical(options: Mapping) -> dict:
    out = {}
    for key, val in options.items():
        name = OPTION_ALIASES.get(key, key)
        if name in out and out[name] != val:
            raise InvalidValueError(f"{key} given twice with different values")
        out[name] = val
    return out


def _pipeline_layout_of(base, lay: Layout, account: dict) -> tuple:
    """The layout with its ``pipeline_layout`` parsed (a string or per-stage lists, or the
    account-for switches' split) and v set from it, as Megatron sets the VPP size from the
    layout; and a note saying the split."""
    spec = lay.pipeline_layout
    if any(account.values()):
        if spec is not None:
            raise InvalidValueError("a pipeline layout cannot be given with "
                                    "--account-for-embedding/loss-in-pipeline-split (Megatron)")
        if lay.first_stage_layers is not None or lay.last_stage_layers is not None:
            raise InvalidValueError("first/last stage sizes cannot be given with "
                                    "--account-for-embedding/loss-in-pipeline-split (Megatron)")
        spec = PipelineLayout.from_account_flags(
            whole(base.num_layers, "num_layers"), whole(lay.p, "p"),
            whole(lay.v, "v", optional=True),
            embedding=account.get(_ACCOUNT_FLAGS[0], False), loss=account.get(_ACCOUNT_FLAGS[1], False))
    if spec is None:
        return lay, []
    pl = PipelineLayout.from_spec(spec, whole(lay.p, "p"))
    if lay.v is None and pl.v > 1:
        lay = dataclasses.replace(lay, v=pl.v)
    return (dataclasses.replace(lay, pipeline_layout=pl),
            [f"pipeline layout: decoder layers per rank (chunks joined by +) {pl.describe()}"])


def job(model=None, *, layout: Layout | None = None, training: Training | None = None,
        allowances: Mapping | None = None, gpu=None, cluster=None, capacity=None,
        world_size=None, gpus_per_node=None, _notes=(), _defaults=(), **options) -> Job:
    """Build and validate one training job.

    Parameters
    ----------
    model : str, path, Architecture or None
        A preset name, a config.json path, an Architecture, or None with architecture
        fields among ``options`` (``num_layers``, ``hidden_size``, ...).
    layout, training : Layout, Training, optional
        Starting points; ``options`` override their fields.
    allowances : mapping, optional
        Overrides of the allowance defaults (``{"workspace": 0}``) [bytes or fraction].
    gpu, cluster : str or hardware record, optional
        Where it runs; the GPU's memory is the capacity unless ``capacity`` is given.
    capacity : int, optional
        GPU memory C [bytes] the job must fit (default: the GPU's ``capacity_bytes``, the
        total CUDA reports for it where a report is cited, else its datasheet figure).
    world_size : int, optional
        ``G`` [GPUs]: gives ``d = G/(t p c)`` when ``d`` is not given.
    gpus_per_node : int, optional
        Overrides the cluster's node size [GPUs].
    **options
        Layout and Training fields (:data:`DEFAULTS`) under their names or the aliases of
        :data:`OPTION_ALIASES` (``tp``, ``pp``, ``dp``, Megatron's long names), allowance
        keys (``workspace``, ``nccl``, ``fragmentation``) and Architecture fields.

    Returns
    -------
    Job

    Examples
    --------
    >>> j = job("llama2-70b", tp=8, pp=4, world_size=64, seq_length=4096, global_batch_size=64)
    >>> j.layout.d, j.m, j.model.name
    (2, 32, 'llama2-70b')
    >>> job("llama2-70b", tp=16)
    Traceback (most recent call last):
    ...
    memsym.errors.DivisibilityError: tensor-parallel size t=16 must divide the KV heads (num_query_groups=8)
    """
    opts = _canonical(options)
    notes = list(_notes)
    base = _architecture(model, opts)
    lay_kw, trn_kw, alw, account = _sorted_options(opts, allowances)
    seq_given = training is not None or "seq_length" in trn_kw
    defaulted = _defaulted(layout, training, lay_kw, trn_kw, world_size)
    layout = Layout() if layout is None else layout
    training = Training() if training is None else training
    check_types(layout, training)
    lay = dataclasses.replace(layout, **lay_kw)
    lay, layout_notes = _pipeline_layout_of(base, lay, account)
    notes += layout_notes
    trn, why = _training_of(training, trn_kw, model, base, notes)
    fw = framework_record(trn.framework)
    base = framework_architecture(base, trn.framework)   # transformers' unpadded vocabulary
    trn, eager_only = _eager_only(base, trn, trn_kw, fw, notes)
    if world_size is not None:
        lay = _with_world_size(base, lay, "d" in lay_kw, world_size)
    if not seq_given:
        trn = _default_sequence(base, trn, notes)
    x = resolve(base, seq_length=whole(trn.batch.seq_length, "seq_length"))
    if lay.sequence_parallel is True and lay.t == 1:
        lay = dataclasses.replace(lay, sequence_parallel=False)
        notes.append("sequence parallelism is off at t = 1 (as Megatron-LM turns it off)")
    lay, split_notes = framework_layout(x, lay, trn)
    notes += split_notes + _no_effect_notes(x, lay, trn, fw)
    m_ = validate(x, lay, trn)
    notes += cuda_graph_notes(trn.memory.cuda_graph_impl, tuple(trn.memory.cuda_graph_modules))
    if {"mlp", "mla_up_proj"} & set(recompute_modules_of(trn)):
        # memsym.timing.recompute prices each module's forward rerun, not what runs beside it
        notes.append("the step time prices the recomputed modules' forward GEMMs and "
                     "memory-bound work; the TP collectives around a recomputed mlp and MLA's "
                     "RoPE on the recomputed q and k are not priced")
    if x.dsa_index_heads and lay.c > 1:
        notes.append("DeepSeek-V3.2's sparse attention (DSA) runs its own all-gather context "
                     "parallelism (Megatron-core dsa.py:1807 at d98e8a64dd): its buffers are "
                     "counted as Transformer Engine's all_gather attention's")
    allowance_values(alw)                        # refuses unknown keys and negative values
    dev, clu, cap = _hardware(gpu, cluster, gpus_per_node, capacity)
    _fp8_layout_notes(trn, dev, notes)
    framework_default = {"sharding": fw.default_scheme_source, "dropout": why,
                         "flash_attention": fw.attention_source if not eager_only else
                         f"eager: {eager_only} declares no _supports_sdpa, so transformers' "
                         "get_correct_attn_implementation falls back from 'sdpa' to 'eager' "
                         "(modeling_utils.py:1882-1889 at 5.25.0)"}
    defaulted = [k for k in defaulted if k not in SETTING_DEFAULTS or SETTING_DEFAULTS[k][1](x, trn)]
    applied = tuple(_defaults) + tuple(
        (k, trn.value(k) if k in FIELD_PARTS else getattr(lay, k),
         framework_default.get(k) or (SETTING_DEFAULTS[k][0] if k in SETTING_DEFAULTS
                                      else REPORTED_DEFAULTS[k])) for k in defaulted)
    return Job(x, lay, trn, tuple(sorted(alw.items())), dev, clu, cap, m_,
               tuple(dict.fromkeys(notes)), applied)


def _eager_only(base, trn: Training, trn_kw: dict, fw, notes: list) -> tuple:
    """(the Training, the model class's citation) for a model class that runs eager attention
    alone under transformers' code (memsym.terms.hf_eager_attention.EAGER_ONLY): flash off
    by default, refused when asked for; (trn, None) for any other model or framework."""
    eager_only = EAGER_ONLY.get((base.extra or {}).get("hf_model_type")) \
        if fw.hf_model_code else None
    if eager_only and "flash_attention" not in trn_kw and trn.memory.flash_attention:
        trn = trn.replace(flash_attention=False)    # Training's default True is Megatron's
        notes.append(f"eager attention: {eager_only} declares no _supports_sdpa; transformers "
                     "falls back from 'sdpa' to 'eager' (modeling_utils.py:1882-1889 at 5.25.0)")
    if eager_only and trn.memory.flash_attention:
        raise InvalidValueError(
            f"{base.extra['hf_model_type']} runs eager attention alone under transformers' "
            f"model code ({eager_only} declares no _supports_sdpa nor _supports_flash_attn): "
            "flash attention (sdpa, flash_attention_2) is refused by transformers; drop "
            "--use-flash-attn")
    return trn, eager_only


def _fp8_layout_notes(trn: Training, dev, notes: list) -> None:
    """Say, under per-tensor FP8, whether the FP8 transpose is counted: Transformer Engine keeps
    none where the GPU's FP8 GEMMs take non-TN layouts (it reads the device, pytorch/utils.py:
    657-663 at d0067d0da6; :attr:`memsym.hardware.GPU.non_tn_fp8_gemm`), and without a GPU
    memsym counts it, as on Hopper (the default, named)."""
    if trn.states.precision != "fp8" or trn.states.fp8_recipe == "mxfp8":
        return
    if dev is None:
        if not trn.states.fp8_param_gather:
            notes.append("no --gpu: FP8 GEMMs read as TN-only (memsym's default, Hopper's, "
                         "compute capability 9.0): per-tensor FP8 keeps each weight's FP8 "
                         "transpose (Transformer Engine csrc/quantizer.cpp:375); give --gpu for "
                         "Blackwell, which keeps none")
    elif dev.non_tn_fp8_gemm:
        notes.append(f"per-tensor FP8 on {dev.name} (compute capability "
                     f"{'.'.join(map(str, dev.compute_capability))}): Transformer Engine runs "
                     "FP8 GEMMs in any layout and keeps no FP8 transpose of a weight or input")


def _architecture(model, opts: dict):
    """The architecture of ``model`` (a preset, a config.json, an Architecture, or None with
    the fields given) with the architecture fields of ``opts`` applied (popped from it)."""
    arch_fields = {f.name for f in dataclasses.fields(Architecture)}
    over = {k: opts.pop(k) for k in list(opts) if k in arch_fields}
    if model is None:
        for need in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
            if need not in over:
                raise InvalidValueError(f"without a model give {need} (or name a preset / "
                                        "config.json)")
        base = Architecture(name="custom")
    else:
        base = resolve_model(model)
    if over:
        plain = Architecture(**{f.name: getattr(base, f.name)
                                for f in dataclasses.fields(Architecture)})
        base = dataclasses.replace(plain, **over)
    return base


def _sorted_options(opts: dict, allowances) -> tuple:
    """The remaining options sorted into Layout fields, Training fields, allowances and
    Megatron's account-for switches; any other name is refused."""
    lay_kw = {k: opts.pop(k) for k in list(opts) if k in _LAYOUT_FIELDS}
    trn_kw = {k: opts.pop(k) for k in list(opts) if k in _TRAINING_FIELDS}
    alw = dict(allowances or {})
    alw.update({k: opts.pop(k) for k in list(opts) if k in ALLOWANCE_KEYS})
    account = {k: flag(opts.pop(k), k) for k in _ACCOUNT_FLAGS if k in opts}
    if opts:
        name = next(iter(opts))
        raise UnknownNameError("job option", name, list(_LAYOUT_FIELDS + _TRAINING_FIELDS)
                               + list(OPTION_ALIASES) + list(ALLOWANCE_KEYS))
    return lay_kw, trn_kw, alw, account


#: The defaults of settings that matter to some jobs only: field -> (where the default comes
#: from, whether the job's architecture and Training use the field).  Reported beside
#: :data:`REPORTED_DEFAULTS` when not given and used (a recipe under FP8, a dispatcher for a
#: mixture of experts, the Megatron-FSDP buffers under fsdp, the userbuffers config under
#: --tp-comm-overlap).
SETTING_DEFAULTS: dict = {
    "fp8_recipe": ("Megatron-LM arguments.py: --fp8-recipe delayed (per-tensor scaling; "
                   "tensorwise counted alike)", lambda x, trn: trn.states.precision == "fp8"),
    "moe_dispatcher": ("Megatron-LM arguments.py: --moe-token-dispatcher-type alltoall",
                       lambda x, trn: x.is_moe),
    "megatron_fsdp": ("memsym.job.DEFAULTS: fsdp counted as FSDP2's buffers (no "
                      "--use-megatron-fsdp)", lambda x, trn: trn.states.sharding == "fsdp"
                      and trn.states.accelerate_fsdp is None),
    "fsdp_double_buffer": ("Megatron-LM arguments.py: --fsdp-double-buffer off",
                           lambda x, trn: trn.states.megatron_fsdp is not None),
    "fp4_param_gather": ("Megatron-LM arguments.py: --fp4-param-gather off (bf16 weights "
                         "beside TE's NVFP4 copies)", lambda x, trn: trn.states.precision == "fp4"),
    "tp_comm_overlap_cfg": ("Transformer Engine's default userbuffers config (no "
                            "--tp-comm-overlap-cfg; memsym.timing.userbuffers)",
                            lambda x, trn: trn.comm.tp_comm_overlap),
    # Megatron-LM arguments.py:2633, 2648-2655 at d98e8a64dd
    "muon_tp_mode": ("Megatron-LM arguments.py: --muon-tp-mode duplicated (the whole matrix "
                     "orthogonalized on every TP rank)", lambda x, trn: trn.states.optimizer == "muon"),
    "muon_num_ns_steps": ("Megatron-LM arguments.py: --muon-num-ns-steps 5",
                          lambda x, trn: trn.states.optimizer == "muon"),
    "muon_nesterov": ("Megatron-LM arguments.py: --muon-nesterov off",
                      lambda x, trn: trn.states.optimizer == "muon"),
    # arguments.py:3566-3572: the MLA input norm a TENorm of its own, recomputed by layernorm
    "mla_down_proj_fusion": ("Megatron-LM arguments.py: --mla-down-proj-fusion off",
                             lambda x, trn: bool(x.multi_latent_attention)
                             and "layernorm" in (trn.memory.recompute_modules or ())),
}


def _defaulted(layout, training, lay_kw: dict, trn_kw: dict, world_size) -> list:
    """The options of :data:`REPORTED_DEFAULTS` the job takes by default (none when it starts
    from a Layout or a Training), and dropout whenever the job resolves it."""
    defaulted = [] if training is not None or layout is not None else [
        k for k in (*REPORTED_DEFAULTS, *SETTING_DEFAULTS) if k not in trn_kw and k not in lay_kw
        and not (k == "d" and world_size is not None)]
    if "dropout" not in trn_kw and (training is None or isinstance(training, Training) and training.memory.dropout is None) \
            and "dropout" not in defaulted:
        defaulted.append("dropout")   # resolved here whatever the starting Training
    return defaulted


def _training_of(training: Training, trn_kw: dict, model, base, notes: list) -> tuple:
    """The Training with ``trn_kw`` applied, spelled canonically, the framework's default
    sharding and the resolved dropout (saying why in ``notes``), and the dropout's reason."""
    default_shard = training.states.sharding == DEFAULTS["sharding"] and "sharding" not in trn_kw
    trn = canonical(training.replace(**trn_kw))
    fw = framework_record(trn.framework)
    if default_shard and fw.default_scheme != trn.states.sharding:
        trn = trn.replace(sharding=fw.default_scheme)   # its own default, not Megatron's
        notes.append(f"sharding {trn.states.sharding}: {trn.framework}'s default")
    adapter = [k for k in ("lora_rank", "lora_targets", "quantization", "lora_regather",
                           "lora_dropout", "dora", "lora_expert_params") if k in trn_kw]
    if adapter and trn.adapters.finetune == "full":
        raise InvalidValueError(f"{', '.join(adapter)} describe{'s' if len(adapter) == 1 else ''}"
                                " LoRA adapters: give finetune lora or qlora (--finetune lora)")
    asked = trn.memory.dropout
    dropout, why = resolve_dropout(trn.framework, asked, model, base)
    trn = trn.replace(dropout=dropout)
    if why is not None and "recipe" not in why:
        notes.append(why)   # the framework decided (or Megatron's default kept): say why
    return trn, why


def _with_world_size(base, lay: Layout, d_given: bool, world_size) -> Layout:
    """The layout with ``d = G/(t p c)`` from the world size G (checked against a given d)."""
    G = whole(world_size, "world size")
    tpc = whole(lay.t, "t") * whole(lay.p, "p") * whole(lay.c, "c")
    if G % tpc:
        raise InvalidValueError(f"world size {G} is not a multiple of t*p*c = {tpc}")
    if d_given:   # the one world-size rule (memsym.rules "world-size")
        rules.check(base, {"t": lay.t, "p": lay.p, "c": lay.c, "d": lay.d, "gpus": G},
                    ["world-size"])
    return dataclasses.replace(lay, d=G // tpc)


def _default_sequence(base, trn: Training, notes: list) -> Training:
    """The default sequence, capped by the position table (Megatron: s <= max positions),
    with a note saying which."""
    table = base.max_position_embeddings
    if table is not None and table < trn.batch.seq_length:
        trn = trn.replace(seq_length=table)
        notes.append(f"sequence length s = {table}: {base.name}'s position table (memsym's "
                     f"default {DEFAULTS['seq_length']} is longer; give seq_length)")
    else:
        notes.append(f"sequence length s = {trn.batch.seq_length} (memsym's default; give "
                     "seq_length / --seq-length)")
    return trn


def _no_effect_notes(x, lay: Layout, trn: Training, fw) -> list:
    """A note for each option given that has no effect on this job."""
    notes = []
    if trn.memory.loss_parallel is False and (not fw.torch_loss or lay.t == 1):
        notes.append("loss_parallel = False (--disable-loss-parallel) has effect only for "
                     "torchtitan jobs with t > 1")
    if trn.pipeline.schedule != DEFAULTS["schedule"] and lay.p == 1:
        notes.append(f"schedule {trn.pipeline.schedule} (--schedule) has effect only with pipeline "
                     "parallelism (p > 1)")
    if lay.t_e is not None and not x.num_experts:
        notes.append("expert_tensor_parallel_size (--expert-tensor-parallel-size) has effect only "
                     "on a model with experts")
    if trn.pipeline.wgrad_deferral_limit and not trn.pipeline.defer_embedding_wgrad_compute:
        notes.append("wgrad_deferral_limit (--wgrad-deferral-limit) has effect only with "
                     "--defer-embedding-wgrad-compute")
    if trn.memory.fsdp_root_group is True and (not fw.fsdp_io_groups or trn.states.sharding != "fsdp"
                                               or lay.p > 1):
        notes.append("fsdp_root_group has effect only for torchtitan's FSDP2 without pipelining")
    muon = muon_no_effect_note(trn.states.optimizer,
                               {name: trn.value(name) for name in _MUON_FIELDS})
    return notes + ([muon] if muon else [])


#: The Muon settings, whose defaults are Megatron-LM's (:class:`memsym.job_record.ModelStates`).
_MUON_FIELDS = ("muon_tp_mode", "muon_num_ns_steps", "muon_nesterov")
_DEFAULT_STATES = Training().states


def muon_no_effect_note(optimizer: str | None, values: Mapping) -> str | None:
    """The note for Muon settings set away from their defaults under another optimizer.

    Megatron-core reads them only to build Muon (optimizer/emerging_optimizers.py:554-561,
    ``_muon_config_to_kwargs``, registered for ``"muon"`` at :587, at d98e8a64dd).

    >>> muon_no_effect_note("adam", {"muon_nesterov": True, "muon_tp_mode": "duplicated"})
    'muon_nesterov (--muon-nesterov) has effect only with optimizer muon (Megatron-core reads it only to build Muon)'
    >>> muon_no_effect_note("muon", {"muon_nesterov": True}) is None
    True
    """
    given = [f"{name} (--{name.replace('_', '-')})" for name in _MUON_FIELDS
             if values.get(name, getattr(_DEFAULT_STATES, name)) != getattr(_DEFAULT_STATES, name)]
    if not given or (optimizer or "adam") == "muon":
        return None
    one = len(given) == 1
    return (f"{', '.join(given)} {'has' if one else 'have'} effect only with optimizer muon "
            f"(Megatron-core reads {'it' if one else 'them'} only to build Muon)")


def _hardware(gpu, cluster, gpus_per_node, capacity) -> tuple:
    """The GPU, the cluster and the capacity [bytes] the job runs on (None where not given)."""
    dev = clu = None
    if cluster is not None:
        clu = cluster if isinstance(cluster, hardware.Cluster) else hardware.cluster(cluster)
        dev = clu.gpu if gpu is None else (gpu if isinstance(gpu, hardware.GPU) else hardware.gpu(gpu))
    elif gpu is not None:
        dev = gpu if isinstance(gpu, hardware.GPU) else hardware.gpu(gpu)
        clu = hardware.cluster_for(dev, whole(gpus_per_node, "gpus_per_node") if gpus_per_node else 8)
    if clu is not None and gpus_per_node is not None:
        clu = clu.with_(gpus_per_node=whole(gpus_per_node, "gpus_per_node"))
    cap = capacity
    if cap is None and dev is not None:
        cap = dev.capacity_bytes
    if cap is not None:
        cap = _capacity(cap)
    return dev, clu, cap
