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

from .errors import InvalidValueError, UnknownNameError, choose
from .frameworks import framework as framework_record
from .terms.allowances import METRICS, allowance_values
from .limits import FIELD_LIMITS, check_limit
from .terms.activations import RECOMPUTE, recompute_modules as _modules
from .terms.model_state import CONVENTIONS, OFFLOADS, OPTIMIZERS, PRECISIONS, SCHEMES
from .terms.schedule import SCHEDULES
from . import hardware, rules
from .terms.adapters import LORA_TARGETS, QUANTIZATIONS
from .terms.recipe_buffers import check_recipe_fields
from .terms.context_parallel import cp_method
from .model.pipeline_layout import PipelineLayout
from .model.stages import check_layout, torchtitan_end_stages
from .model import Architecture, recipe, resolve, resolve_model
from .units import capacity_bytes as _capacity   # GPU memory capacity as whole bytes
from .vocabulary import (ALLOWANCE_KEYS, FINETUNES, FRAMEWORK_CONVENTIONS, FRAMEWORKS,
                         RECOMPUTE_METHODS, STAGE_PLACEMENTS)

from .job_record import (DEFAULTS, FIELD_PARTS, OPTION_ALIASES, REPORTED_DEFAULTS, Layout, Training,
                         check_zero_buckets, microbatches, recompute_modules_of, whole)

__all__ = ["Layout", "Training", "Job", "DEFAULTS", "REPORTED_DEFAULTS", "OPTION_ALIASES", "job", "whole",
           "recompute_modules_of", "resolve_dropout", "dropout_kept",
           "microbatches", "validate"]

#: Megatron's switches that count the embedding / loss as a layer of the pipeline split
#: (:meth:`memsym.model.pipeline_layout.PipelineLayout.from_account_flags`).
_ACCOUNT_FLAGS = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")


def _flag(value, what: str) -> bool:
    # a string such as "false" is truthy in Python, so only real booleans are accepted
    if not isinstance(value, bool):
        raise InvalidValueError(f"{what} must be true or false, got {value!r:.40}")
    return value


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------
def _check_types(layout, training) -> None:
    # a dict (or anything else) would fail later with an AttributeError, not a clear refusal
    for obj, cls, name in ((layout, Layout, "layout"), (training, Training, "training")):
        if not isinstance(obj, cls):
            raise InvalidValueError(f"{name} must be a memsym.{cls.__name__}(...), got "
                                    f"{type(obj).__name__}")


def _check_limits(layout: Layout, training: Training) -> None:
    # memsym.limits.FIELD_LIMITS: every size a user can give has a documented bound (a
    # count of 10^12 micro-batches would walk 10^12 schedule steps)
    for name, value in {**vars(layout), **training.flat()}.items():
        if name in FIELD_LIMITS and isinstance(value, int) and not isinstance(value, bool):
            check_limit(FIELD_LIMITS[name], value, name)


def check_fields(layout: Layout, training: Training) -> None:
    _check_types(layout, training)
    for name in ("t", "p", "d", "c", "e"):
        whole(getattr(layout, name), f"layout {name}")
    for name in ("seq_length", "micro_batch_size"):
        whole(training.value(name), name)
    for obj, name in ((layout, "v"), (layout, "t_e"), (training.batch, "num_microbatches"),
                      (training.batch, "global_batch_size"), (training.pipeline, "microbatch_group_size")):
        whole(getattr(obj, name), name, optional=True)
    for obj, name in ((layout, "first_stage_layers"), (layout, "last_stage_layers")):
        whole(getattr(obj, name), name, minimum=0, optional=True)
    _check_limits(layout, training)
    _flag(layout.sequence_parallel, "sequence_parallel")
    _flag(training.memory.flash_attention, "flash_attention")
    if training.memory.dropout is not None:
        _flag(training.memory.dropout, "dropout")
    _flag(training.states.precision_aware, "precision_aware")
    _flag(training.states.fp8_param_gather, "fp8_param_gather")
    _flag(training.memory.compiled_loss, "compiled_loss")
    _flag(training.memory.loss_parallel, "loss_parallel")
    _flag(training.memory.fsdp_root_group, "fsdp_root_group")
    _flag(training.comm.tp_comm_overlap, "tp_comm_overlap")
    _flag(training.comm.overlap_moe_expert_parallel_comm, "overlap_moe_expert_parallel_comm")
    _flag(training.pipeline.overlap_p2p_comm, "overlap_p2p_comm")
    _flag(training.pipeline.defer_embedding_wgrad_compute, "defer_embedding_wgrad_compute")
    whole(training.pipeline.wgrad_deferral_limit, "wgrad_deferral_limit", minimum=0)
    for name in ("overlap_grad_reduce", "overlap_param_gather"):
        if training.value(name) is not None:
            _flag(training.value(name), name)


def _named_choices() -> dict:
    """Training field -> (its name in messages, the accepted names): the one table
    :func:`canonical` spells and :func:`validate` checks."""
    return {"recompute": ("recompute mode", RECOMPUTE),
            "schedule": ("pipeline schedule", SCHEDULES),
            "stage_placement": ("stage placement", STAGE_PLACEMENTS),
            "precision": ("precision", PRECISIONS), "optimizer": ("optimizer", OPTIMIZERS),
            "sharding": ("sharding", SCHEMES),
            "convention": ("convention", CONVENTIONS + FRAMEWORK_CONVENTIONS),
            "offload": ("offload", OFFLOADS),
            "finetune": ("fine-tuning mode", FINETUNES),
            "metric": ("memory metric", tuple(METRICS)),
            "framework": ("framework", FRAMEWORKS)}


def canonical(training: Training) -> Training:
    """``training`` with every named choice in its canonical spelling (``"GPipe"`` ->
    ``"gpipe"``), as :func:`memsym.errors.choose` matches them, so that code comparing a
    field with its canonical name sees what the user meant; an unknown name is left for
    :func:`validate` to refuse.

    Examples
    --------
    >>> canonical(Training(schedule=" GPipe", sharding="ZeRO3")).schedule
    'gpipe'
    """
    fixed = {}
    table = {**_named_choices(), "recompute_method": ("recompute method", RECOMPUTE_METHODS)}
    for name, (label, accepted) in table.items():
        value = training.value(name)
        if isinstance(value, str):
            try:
                fixed[name] = choose(label, value, accepted)
            except UnknownNameError:
                pass
    mods = training.memory.recompute_modules
    if isinstance(mods, (list, tuple)):
        try:
            fixed["recompute_modules"] = _modules(mods)
        except InvalidValueError:   # UnknownNameError too: validate() refuses it
            pass
    if isinstance(training.comm.cp_comm_type, (list, tuple)):  # Megatron's: one type per layer
        fixed["cp_comm_type"] = cp_method(fixed.get("framework", training.framework),
                                          training.comm.cp_comm_type)
    return training.replace(**{k: v for k, v in fixed.items() if v != training.value(k)})


def validate(x, layout: Layout, training: Training):
    """Refuse what the framework would refuse, one line naming the rule; return ``m``.

    ``x`` is a resolved architecture (:func:`memsym.model.resolve`).  Field types first,
    then every launch rule of :data:`memsym.rules.RULES`.

    Examples
    --------
    >>> from memsym.model import preset
    >>> validate(preset("llama2-7b"), Layout(p=4, v=2, first_stage_layers=5, last_stage_layers=9),
    ...          Training(seq_length=4096))
    Traceback (most recent call last):
    ...
    memsym.errors.DivisibilityError: virtual pipeline size v=2 must divide the layers of every pipeline stage (stage 0 has 5)
    """
    check_fields(layout, training)
    _check_pipeline_layout(x, layout, training)
    names = {name: choose(label, training.value(name), accepted)
             for name, (label, accepted) in _named_choices().items()}
    _check_recompute_layers(x, layout, training)
    _check_recompute_modules(x, training)
    _check_overlaps(x, layout, training)
    offered = framework_record(training.framework).schemes
    if training.states.sharding not in offered:
        raise InvalidValueError(f"{training.framework} shards with {' or '.join(offered)}, not "
                                f"{training.states.sharding}")
    check_zero_buckets(training.states.zero_buckets)
    check_recipe_fields(training.states, training.memory, training.framework, x.num_layers, layout.p)
    cp_method(training.framework, training.comm.cp_comm_type)   # the framework's CP methods
    if not isinstance(training.adapters.lora_regather, bool):
        raise InvalidValueError(f"lora_regather must be True or False, got {training.adapters.lora_regather!r}")
    if training.adapters.finetune != "full":
        whole(training.adapters.lora_rank, "lora_rank")
        if training.adapters.quantization is not None:
            choose("quantization", training.adapters.quantization, QUANTIZATIONS)
        if training.adapters.lora_targets != "all":
            if isinstance(training.adapters.lora_targets, str) or not training.adapters.lora_targets:
                raise InvalidValueError("lora_targets must be \"all\" or a list of "
                                        + ", ".join(LORA_TARGETS))
            for name in training.adapters.lora_targets:
                choose("LoRA target", name, LORA_TARGETS)
    k = rules.knobs(layout, training)
    # rules that need m read it; the batch rule comes first, as microbatches() would raise it
    rules.check(x, k, [n for n in rules.LAUNCH if n not in rules.NEED_M])
    m_ = microbatches(layout, training)
    rules.check(x, dict(k, m=m_), rules.NEED_M)
    if names["schedule"] == "gpipe" and m_ is None and layout.p > 1:
        raise InvalidValueError("GPipe keeps all m micro-batches: give num_microbatches or "
                                "global_batch_size")
    return m_


def _check_overlaps(x, layout: Layout, training: Training) -> None:
    # Megatron-LM validate_args: --overlap-param-gather only with the distributed optimizer
    # (or Megatron-FSDP) and only with --overlap-grad-reduce; --tp-comm-overlap asserts
    # sequence parallelism, which validate_args turns off at t = 1
    if not framework_record(training.framework).megatron_options:
        for name, flag in (("tp_comm_overlap", "--tp-comm-overlap"),
                           ("overlap_moe_expert_parallel_comm",
                            "--overlap-moe-expert-parallel-comm"),
                           ("defer_embedding_wgrad_compute",
                            "--defer-embedding-wgrad-compute")):
            if training.value(name):
                raise InvalidValueError(f"{name} is Megatron's {flag}, not a "
                                        f"{training.framework} option")
        return
    if not training.pipeline.overlap_p2p_comm and (layout.v or 1) > 1 and layout.p <= 2:
        raise InvalidValueError("the interleaved schedule needs --pipeline-model-parallel-size "
                                f"> 2 with --no-overlap-p2p-communication, got {layout.p}")
    if training.comm.overlap_moe_expert_parallel_comm:   # transformer_config.py __post_init__
        why = ("expert parallelism (EP > 1)" if layout.e <= 1 else
               "--virtual-pipeline-model-parallel-size where PP > 1"
               if layout.p > 1 and (layout.v or 1) == 1 else
               "no full recomputation" if training.memory.recompute == "full" else
               "bf16 or fp16 parameters" if training.states.precision == "fp32" else
               "at most one MTP layer" if (getattr(x, "mtp_num_layers", 0) or 0) > 1 else None)
        if why:
            raise InvalidValueError(f"--overlap-moe-expert-parallel-comm needs {why} "
                                    "(Megatron's TransformerConfig)")
    if training.comm.overlap_param_gather:
        if not training.comm.overlap_grad_reduce:
            raise InvalidValueError("--overlap-param-gather needs --overlap-grad-reduce "
                                    "(Megatron's validate_args)")
        if training.states.sharding == "ddp":
            raise InvalidValueError("--overlap-param-gather needs the distributed optimizer "
                                    "(--use-distributed-optimizer) or Megatron-FSDP")
    if training.pipeline.defer_embedding_wgrad_compute and layout.p == 1:  # model_parallel_config
        raise InvalidValueError("--defer-embedding-wgrad-compute needs pipeline parallelism "
                                "(Megatron's ModelParallelConfig: \"Cannot defer embedding "
                                "wgrad compute when pipeline model parallel is not used\")")
    if training.comm.tp_comm_overlap and (layout.t == 1 or not layout.sequence_parallel):
        raise InvalidValueError("--tp-comm-overlap needs --sequence-parallel, which Megatron "
                                "turns off at TP 1 (validate_args)")


def _check_pipeline_layout(x, layout: Layout, training: Training) -> None:
    # transformer_config.py __post_init__: a layout excludes the uneven-stage arguments and
    # sets the VPP size (a given one must agree); validate_layer_layout
    pl = layout.pipeline_layout
    if pl is None:
        return

    if not isinstance(pl, PipelineLayout):
        raise InvalidValueError("pipeline_layout must be a memsym PipelineLayout (job() takes "
                                "the layout string)")
    if (layout.v or 1) != pl.v:
        raise InvalidValueError(f"virtual pipeline size v={layout.v} conflicts with the "
                                f"pipeline layout's {pl.v} stages per rank")
    if not framework_record(training.framework).megatron_options:
        raise InvalidValueError("a pipeline layout is Megatron-Core's "
                                "(--pipeline-model-parallel-layout)")
    check_layout(x, layout.t, layout.p, layout.e, layout.t_e, layout.first_stage_layers,
                 layout.last_stage_layers, pl)


def _check_recompute_layers(x, layout: Layout, training: Training) -> None:
    # Megatron's rules: --recompute-method and --recompute-num-layers only with full
    # recompute, both given (TransformerConfig.__post_init__).  Its message names 1..layers per
    # rank, but only a missing N raises: a larger N checkpoints the whole chunk (block) or
    # makes one group of it (uniform: min(layer_idx + N, layers), core/recompute.py)
    method, n = training.memory.recompute_method, training.memory.recompute_num_layers
    if method is None and n is None:
        return
    if training.memory.recompute != "full":
        raise InvalidValueError("recompute_method / recompute_num_layers need recompute full "
                                "(Megatron's --recompute-granularity full)")
    if method is None or n is None:
        raise InvalidValueError("full recompute with layers given needs both recompute_method "
                                "(uniform, block or every) and recompute_num_layers")
    method = choose("recompute method", method, RECOMPUTE_METHODS)
    # Megatron accepts 0 (TransformerConfig checks only None): block 0 checkpoints no layer;
    # uniform 0 never advances its loop (core/recompute.py: layer_idx += recompute_num_layers)
    whole(n, "recompute_num_layers", minimum=0)
    if n == 0 and method != "block":
        raise InvalidValueError(f"recompute_num_layers 0 with recompute_method {method}: "
                                "Megatron's uniform loop never advances (core/recompute.py); "
                                "block 0 checkpoints no layer")
    if method == "every" and (not framework_record(training.framework).layer_selective_ac
                              or layout.pipeline_layout is not None):
        raise InvalidValueError("recompute_method \"every\" is torchtitan's layer selective AC "
                                "(selective_ac_option = \"N\"): use framework=\"torchtitan\"; "
                                "Megatron checkpoints uniform or block")


def _check_recompute_modules(x, training: Training) -> None:
    # TransformerConfig.__post_init__ (d98e8a64dd): the modules are read only under selective
    # granularity; mla_up_proj needs multi_latent_attention.  moe_act's moe_grouped_gemm,
    # shared_experts' moe_shared_expert_overlap and the fp8 recipe are not job fields: the
    # Megatron reader checks them (memsym.readers.megatron)
    mods = training.memory.recompute_modules
    if mods is None:
        return
    if not framework_record(training.framework).megatron_options:
        raise InvalidValueError(f"recompute_modules is Megatron-Core's --recompute-modules, not "
                                f"a {training.framework} option")
    mods = _modules(mods)
    if training.memory.recompute != "selective":
        raise InvalidValueError("recompute_modules need recompute selective (Megatron reads "
                                "--recompute-modules only under --recompute-granularity "
                                f"selective), got recompute {training.memory.recompute}")
    if "mla_up_proj" in mods and not x.multi_latent_attention:
        raise InvalidValueError("recompute module mla_up_proj needs multi-latent attention "
                                "(Megatron's TransformerConfig)")


def framework_layout(x, layout: Layout, training: Training) -> tuple:
    """The layout as the job's framework lays it out, and a note for each change.

    torchtitan splits the layers over its pipeline stages itself
    (:func:`memsym.model.stages.torchtitan_rank_layers`) unless told the split: memsym takes
    that split as the first and last stage sizes; its tensor parallelism is always sequence
    parallel (``apply_tp``).  A split whose middle ranks differ is
    refused (memsym's stages between the ends hold equal layers); give the split as
    ``first_stage_layers`` / ``last_stage_layers``.

    Examples
    --------
    >>> from memsym.model import preset
    >>> lay, notes = framework_layout(preset("llama3-405b"), Layout(t=8, p=8),
    ...                               Training(framework="torchtitan"))
    >>> lay.first_stage_layers, lay.last_stage_layers
    (15, 15)
    """
    notes, fw = [], framework_record(training.framework)
    if fw.tp_sequence_parallel and layout.t > 1 and not layout.sequence_parallel:
        # apply_tp: SequenceParallel norms and Shard(1) block outputs; no switch turns it off
        layout = dataclasses.replace(layout, sequence_parallel=True)
        notes.append("torchtitan's tensor parallelism is sequence parallel (apply_tp shards the "
                     "norms and the block outputs over the sequence): counted with it")
    if (not fw.torch_pipelining or layout.p == 1
            or layout.first_stage_layers is not None or layout.last_stage_layers is not None):
        return layout, notes

    # the V placement's split (stages r and 2p-1-r on rank r) needs its 2 stages per rank;
    # other v are refused by rule v-placement after this
    style = "v" if training.pipeline.stage_placement == "v" and layout.v == 2 else "loop"
    first, last, ranks = torchtitan_end_stages(x.num_layers, layout.p, layout.v or 1,
                                               style=style)
    if first is None:
        return layout, notes
    return (dataclasses.replace(layout, first_stage_layers=first, last_stage_layers=last),
            notes + [f"torchtitan's pipeline split: {ranks} layers per rank (generate_llm_fqn_"
                     "per_model_part, the embedding and the output counted as one layer each)"])


def framework_dropout(framework: str, dropout=None, arch=None):
    """Whether dropout masks are kept under ``framework`` when ``dropout`` is asked for (None:
    not asked), and why, as ``(dropout, reason)`` (reason None: nothing to say).

    * a framework whose models build no dropout (``Framework.dropout_layers`` False in
      :data:`memsym.frameworks.FRAMEWORK`: torchtitan's): off, and asking for it is refused;
    * one that runs the model's own code (``hf_model_code``: DeepSpeed): a ``config.json``'s
      model (``arch.extra["hf_dropout"]``, :func:`memsym.model.from_hf_config`) keeps masks if
      one of the probabilities its transformers modeling code applies is > 0 (Llama-style
      models: ``attention_dropout`` 0.0, none);
    * elsewhere what was asked, else None (the job's default, Megatron's 0.1 dropouts).

    Examples
    --------
    >>> framework_dropout("torchtitan")[0], framework_dropout("megatron", False)
    (False, (False, None))
    >>> framework_dropout("torchtitan", False)
    (False, None)
    """
    fw = framework_record(framework)
    if not fw.dropout_layers:
        if dropout:
            raise InvalidValueError(f"{fw.title}'s models have no dropout layers: dropout must "
                                    f"be off with framework {fw.name} (--hidden-dropout 0 "
                                    "--attention-dropout 0, or leave them out)")
        return False, (None if dropout is not None
                       else f"dropout off: {fw.title}'s models have no dropout layers")
    probs = None if arch is None else (arch.extra or {}).get("hf_dropout")
    if dropout is None and fw.hf_model_code and probs is not None:
        on = any(p_ > 0 for p_ in probs.values())
        shown = ", ".join(f"{k} {v:g}" for k, v in probs.items())
        return on, (f"dropout {'on' if on else 'off'}: {fw.title} runs the transformers model, "
                    f"whose config.json sets {shown}")
    if dropout is None and fw.hf_model_code:
        return None, ("dropout masks counted as Megatron's 0.1 defaults: DeepSpeed runs the "
                      "model's own code (give the model as its config.json to take its "
                      "dropouts, or --hidden-dropout 0 --attention-dropout 0)")
    return dropout, None


def resolve_dropout(framework: str, dropout=None, model=None, arch=None) -> tuple:
    """Whether dropout masks are kept, and why: ``(bool, reason or None)``.

    What was asked (``dropout``) under the framework's rules (:func:`framework_dropout`);
    when nothing was asked, a preset's recipe under Megatron (:func:`memsym.model.recipe`),
    else Megatron-LM's 0.1 dropouts.  ``model`` is the name or preset the job was built from,
    ``arch`` its architecture.

    Examples
    --------
    >>> resolve_dropout("megatron", None, "llama3-70b")[0], resolve_dropout("megatron")
    (False, (True, None))
    >>> resolve_dropout("megatron", True, "llama3-70b")
    (True, None)
    """
    kept, why = framework_dropout(framework, dropout, arch)
    if kept is None and framework_record(framework).recipe_defaults:
        options, source = recipe(model)
        if "dropout" in options:
            name = getattr(model, "name", model)
            return options["dropout"], f"{name}'s recipe, {source}"
    return (True if kept is None else kept), why


def dropout_kept(training) -> bool:
    """``training.dropout`` with None read as Megatron-LM's default (masks kept): for code
    given a Training that no :func:`job` resolved."""
    return True if training.memory.dropout is None else training.memory.dropout



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
_ALLOWANCE_KEYS = ALLOWANCE_KEYS


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
    lay_kw = {k: opts.pop(k) for k in list(opts) if k in _LAYOUT_FIELDS}
    trn_kw = {k: opts.pop(k) for k in list(opts) if k in _TRAINING_FIELDS}
    alw = dict(allowances or {})
    alw.update({k: opts.pop(k) for k in list(opts) if k in _ALLOWANCE_KEYS})
    account = {k: _flag(opts.pop(k), k) for k in _ACCOUNT_FLAGS if k in opts}
    if opts:
        name = next(iter(opts))
        raise UnknownNameError("job option", name, list(_LAYOUT_FIELDS + _TRAINING_FIELDS)
                               + list(OPTION_ALIASES) + list(_ALLOWANCE_KEYS))
    seq_given = training is not None or "seq_length" in trn_kw
    defaulted = [] if training is not None or layout is not None else [
        k for k in REPORTED_DEFAULTS if k not in trn_kw and k not in lay_kw
        and not (k == "d" and world_size is not None)]
    if "dropout" not in trn_kw and (training is None or isinstance(training, Training) and training.memory.dropout is None) \
            and "dropout" not in defaulted:
        defaulted.append("dropout")   # resolved here whatever the starting Training
    layout = Layout() if layout is None else layout
    training = Training() if training is None else training
    _check_types(layout, training)
    lay = dataclasses.replace(layout, **lay_kw)
    lay, layout_notes = _pipeline_layout_of(base, lay, account)
    notes += layout_notes
    default_shard = training.states.sharding == DEFAULTS["sharding"] and "sharding" not in trn_kw
    trn = canonical(training.replace(**trn_kw))
    fw = framework_record(trn.framework)
    if default_shard and fw.default_scheme != trn.states.sharding:
        trn = trn.replace(sharding=fw.default_scheme)   # its own default, not Megatron's
        notes.append(f"sharding {trn.states.sharding}: {trn.framework}'s default")
    adapter = [k for k in ("lora_rank", "lora_targets", "quantization", "lora_regather")
               if k in trn_kw]
    if adapter and trn.adapters.finetune == "full":
        raise InvalidValueError(f"{', '.join(adapter)} describe{'s' if len(adapter) == 1 else ''}"
                                " LoRA adapters: give finetune lora or qlora (--finetune lora)")
    asked = trn.memory.dropout
    dropout, why = resolve_dropout(trn.framework, asked, model, base)
    trn = trn.replace(dropout=dropout)
    if why is not None and "recipe" not in why:
        notes.append(why)   # the framework decided (or Megatron's default kept): say why
    if world_size is not None:
        G = whole(world_size, "world size")
        tpc = whole(lay.t, "t") * whole(lay.p, "p") * whole(lay.c, "c")
        if G % tpc:
            raise InvalidValueError(f"world size {G} is not a multiple of t*p*c = {tpc}")
        if "d" in lay_kw:   # the one world-size rule (memsym.rules "world-size")
            rules.check(base, {"t": lay.t, "p": lay.p, "c": lay.c, "d": lay.d, "gpus": G},
                        ["world-size"])
        lay = dataclasses.replace(lay, d=G // tpc)
    if not seq_given:
        # the default sequence, capped by the position table (Megatron: s <= max positions)
        table = base.max_position_embeddings
        if table is not None and table < trn.batch.seq_length:
            trn = trn.replace(seq_length=table)
            notes.append(f"sequence length s = {table}: {base.name}'s position table (memsym's "
                         f"default {DEFAULTS['seq_length']} is longer; give seq_length)")
        else:
            notes.append(f"sequence length s = {trn.batch.seq_length} (memsym's default; give "
                         "seq_length / --seq-length)")
    x = resolve(base, seq_length=whole(trn.batch.seq_length, "seq_length"))
    if lay.sequence_parallel is True and lay.t == 1:
        lay = dataclasses.replace(lay, sequence_parallel=False)
        notes.append("sequence parallelism is off at t = 1 (as Megatron-LM turns it off)")
    lay, split_notes = framework_layout(x, lay, trn)
    notes += split_notes
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
    m_ = validate(x, lay, trn)
    if set(recompute_modules_of(trn)) - {"core_attn"}:
        # memsym.timing.step prices selective recompute as the attention core's forward again
        notes.append("the step time prices selective recompute as core_attn's (the attention "
                     "core's forward run again in backward); the other --recompute-modules' "
                     "recomputed forwards are not priced")
    allowance_values(alw)                        # refuses unknown keys and negative values
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
    framework_default = {"sharding": fw.default_scheme_source, "dropout": why}
    applied = tuple(_defaults) + tuple(
        (k, trn.value(k) if k in FIELD_PARTS else getattr(lay, k),
         framework_default.get(k) or REPORTED_DEFAULTS[k]) for k in defaulted)
    return Job(x, lay, trn, tuple(sorted(alw.items())), dev, clu, cap, m_,
               tuple(dict.fromkeys(notes)), applied)
