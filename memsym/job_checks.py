r"""The checks of a job: field types and limits, canonical names, the launch rules.

:func:`validate` refuses what the framework would refuse, one line naming the rule
(:mod:`memsym.rules`), and returns the micro-batches per step; :func:`check_fields` checks
the fields' types and bounds only; :func:`canonical` spells every named choice as
:func:`memsym.errors.choose` matches it.  :func:`memsym.job.job` runs them once.  The checks
of Megatron-core's own options are :mod:`memsym.job_checks_megatron`'s, those of transformers'
model code :mod:`memsym.job_checks_hf`'s.

References
----------
.. [megatron-lm] megatron/training/arguments.py (validate_args);
   core/transformer/transformer_config.py (TransformerConfig.__post_init__).
"""

from __future__ import annotations

from .errors import InvalidValueError, UnknownNameError, choose
from .frameworks import framework as framework_record
from .terms.allowances import METRICS
from .values import flag
from .limits import FIELD_LIMITS, check_limit
from .terms.activations import RECOMPUTE, recompute_modules as _modules
from .terms.model_state import CONVENTIONS, OFFLOADS, OPTIMIZERS, PRECISIONS, SCHEMES
from .terms.schedule import SCHEDULES
from .vocabulary import FP8_RECIPES, MUON_TP_MODES
from . import rules
from .terms.adapters import LORA_TARGETS, QUANTIZATIONS
from .terms.cuda_graphs import check_cuda_graphs
from .terms.recipe_buffers import check_recipe_fields
from .terms.dispatcher_buffers import check_deepep_group
from .terms.context_parallel import cp_method
from .model.pipeline_layout import PipelineLayout
from .model.stages import check_layout
from .vocabulary import (FINETUNES, FRAMEWORK_CONVENTIONS, FRAMEWORKS, MOE_DISPATCHERS,
                         RECOMPUTE_METHODS, STAGE_PLACEMENTS)
from .job_record import Layout, Training, microbatches, whole
from .job_checks_megatron import (check_bf16_layers, check_fp8_attention, check_fp8_glu_input,
                                  check_megatron_fsdp)
from .job_checks_hf import (check_accelerate_fsdp, check_autocast, check_chunked_loss,
                            check_gemma4_layers, check_gemma4_moe, check_peft_variants,
                            check_torch_ddp)

__all__ = ["check_fields", "canonical", "validate", "compile_changes_recompute",
           "check_dispatcher"]


def compile_changes_recompute(recompute: str) -> bool:
    """Whether compiling the blocks (``compiled_model``) changes what ``recompute`` keeps.

    Only torchtitan's per-op SAC: the compiled graph saves only what its backward reads
    (:mod:`memsym.terms.op_sac`); every other mode keeps what it keeps, compiled or not.
    A job reader drops the flag elsewhere, as the search does on such rows.

    Examples
    --------
    >>> compile_changes_recompute("selective-op"), compile_changes_recompute("full")
    (True, False)
    """
    return recompute == "selective-op"


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------
def check_types(layout, training) -> None:
    """Refuse a layout or training that is not a :class:`Layout` / :class:`Training`."""
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


#: The Training switches :func:`check_fields` holds to a real boolean (``flag``), by flat name.
_SWITCHES = ("flash_attention", "dropout", "precision_aware", "fp8_param_gather",
            "fp4_param_gather", "optimizer_cuda_graph", "fsdp_double_buffer", "torch_ddp_buckets",
            "fsdp_keep_gathered",
            "compiled_loss", "compiled_model", "chunked_loss", "sac_saves_attention",
            "bias_activation_fusion", "loss_parallel", "fsdp_root_group", "tp_comm_overlap",
            "overlap_moe_expert_parallel_comm", "overlap_p2p_comm",
            "defer_embedding_wgrad_compute", "muon_nesterov", "mla_down_proj_fusion",
            "activation_func_fp8_input_store", "fp8_attention", "overlap_grad_reduce",
            "overlap_param_gather")
#: The switches that may also be None: unset, the framework's default applies.
_UNSET_SWITCHES = frozenset({"dropout", "overlap_grad_reduce", "overlap_param_gather"})


def check_fields(layout: Layout, training: Training) -> None:
    check_types(layout, training)
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
    flag(layout.sequence_parallel, "sequence_parallel")
    for name in _SWITCHES:
        if name not in _UNSET_SWITCHES or training.value(name) is not None:
            flag(training.value(name), name)
    if not training.memory.sac_saves_attention and training.memory.recompute != "selective-op":
        raise InvalidValueError("sac_saves_attention changes only recompute 'selective-op' "
                                "(torchtitan's per-op SAC; --sac-recomputes-attention on the "
                                f"command line), got {training.memory.recompute!r}")
    if training.memory.compiled_model and not compile_changes_recompute(training.memory.recompute):
        raise InvalidValueError("compiled_model changes only recompute 'selective-op' (torchtitan's "
                                f"per-op SAC), got recompute {training.memory.recompute!r}")
    whole(training.pipeline.wgrad_deferral_limit, "wgrad_deferral_limit", minimum=0)
    whole(training.states.muon_num_ns_steps, "muon_num_ns_steps")


def _check_fp32_residual(x, training: Training) -> None:
    """``fp32_residual_connection`` is Megatron-core's, under 16-bit weights only
    (``validate_args``: "residual connection in fp32 only supported when using fp16 or bf16",
    arguments.py:1374-1376 at d98e8a64dd; FP8 and FP4 run over bf16 weights).  A hybrid or
    MTP model's full-recompute checkpoints are not counted with fp32 inputs: refused."""
    flag(training.memory.fp32_residual_connection, "fp32_residual_connection")
    if not training.memory.fp32_residual_connection:
        return
    if not framework_record(training.framework).megatron_options:
        raise InvalidValueError("fp32_residual_connection is Megatron's --fp32-residual-"
                                f"connection (framework megatron), not {training.framework}'s")
    if training.states.precision == "fp32":
        raise InvalidValueError("--fp32-residual-connection needs --bf16 or --fp16: residual "
                                "connection in fp32 only supported when using fp16 or bf16 "
                                "(Megatron's validate_args)")
    if training.memory.recompute == "full" and (x.layer_mixers or x.mtp_num_layers):
        raise InvalidValueError("--fp32-residual-connection with full recompute of a hybrid or "
                                "MTP model: their checkpoints' fp32 inputs are not modelled")


def _check_first_iteration(training: Training) -> None:
    """Refuse ``first_iteration`` where it is not modelled: Megatron-core's Adam under DDP or
    the distributed optimizer makes its moments in the first step (``init_state_fn`` only on
    loading, optimizer/optimizer.py:1127-1129 at d98e8a64dd); other runtimes are not read."""
    flag(training.memory.first_iteration, "first_iteration")
    st = training.states
    if training.memory.first_iteration and not (
            framework_record(training.framework).megatron_options and st.optimizer == "adam"
            and st.sharding in ("ddp", "distributed-optimizer") and not st.megatron_fsdp):
        raise InvalidValueError("first_iteration is modelled for Megatron-core's Adam under ddp or "
                                f"the distributed optimizer, not {training.framework}'s "
                                f"{st.optimizer} under {st.sharding}")


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
            "moe_dispatcher": ("MoE token dispatcher", MOE_DISPATCHERS),
            "muon_tp_mode": ("muon_tp_mode (--muon-tp-mode)", MUON_TP_MODES),
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
    table = {**_named_choices(), "recompute_method": ("recompute method", RECOMPUTE_METHODS),
             "fp8_recipe": ("FP8 recipe", FP8_RECIPES)}
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
    _check_expert_tp(layout, training.framework)
    offered = framework_record(training.framework).schemes
    if training.states.accelerate_fsdp is not None:   # the Trainer's FSDP2 (check_accelerate_fsdp)
        offered = offered + ("fsdp",)
    if training.states.sharding not in offered:
        raise InvalidValueError(f"{training.framework} shards with {' or '.join(offered)}, not "
                                f"{training.states.sharding}")
    if training.states.precision == "fp8" and training.states.sharding == "fsdp" and (
            not framework_record(training.framework).megatron_options
            or not training.states.fp8_param_gather):
        # memsym's fp8 under fsdp is Megatron-FSDP's FP8 parameters (memsym.terms.widths)
        raise InvalidValueError("fp8 under fsdp is Megatron-FSDP's FP8 parameters (framework "
                                f"megatron with fp8_param_gather), not {training.framework}'s"
                                + ("" if training.states.fp8_param_gather
                                   else " without fp8_param_gather"))
    if training.states.fp4_param_gather and not (
            framework_record(training.framework).megatron_options
            and training.states.sharding == "distributed-optimizer"):
        # NVFP4 parameters: Megatron's --fp4-param-gather (memsym.terms.low_precision.nvfp4_weight_bytes),
        # modelled under the distributed optimizer only; its precision is a rule (memsym.rules)
        raise InvalidValueError("fp4_param_gather is Megatron's NVFP4 parameters: framework "
                                "megatron and the distributed optimizer, not "
                                f"{training.framework} under {training.states.sharding}")
    _check_first_iteration(training)
    if training.memory.optimizer_cuda_graph and not framework_record(
            training.framework).megatron_options:
        raise InvalidValueError("optimizer_cuda_graph is Megatron's --optimizer-cuda-graph "
                                f"(framework megatron), not {training.framework}'s")
    check_megatron_fsdp(training)
    check_torch_ddp(training)
    check_accelerate_fsdp(x, layout, training)
    check_autocast(x, layout, training)
    check_chunked_loss(x, layout, training)
    check_gemma4_moe(x, layout, training)
    check_gemma4_layers(x, layout, training)
    check_zero_buckets(training.states.zero_buckets)
    check_recipe_fields(training.states, training.memory, training.framework, x.num_layers, layout.p)
    mods = training.memory.cuda_graph_modules
    if isinstance(mods, str) or not isinstance(mods, (tuple, list)):
        raise InvalidValueError(f"cuda_graph_modules must be a list of names, got {mods!r:.60}")
    check_cuda_graphs(training.memory.cuda_graph_impl, tuple(mods),
                      framework_record(training.framework).megatron_options,
                      training.memory.cpu_offloading_num_layers > 0, bool(x.num_experts))
    if not isinstance(training.memory.batch_attention_mask, bool):
        raise InvalidValueError("batch_attention_mask must be True or False")
    _check_dispatcher(x, layout, names["moe_dispatcher"], training.framework)
    if training.memory.mla_down_proj_fusion and not x.multi_latent_attention:
        raise InvalidValueError("mla_down_proj_fusion (--mla-down-proj-fusion) needs "
                                "multi-latent attention (Megatron-LM's validate_args)")
    check_fp8_glu_input(x, training)
    check_fp8_attention(training)
    _check_fp32_residual(x, training)
    check_bf16_layers(x, training)
    if training.states.fp8_recipe is not None:   # Megatron reads --fp8-recipe under --fp8-format
        choose("FP8 recipe", training.states.fp8_recipe, FP8_RECIPES)
        if names["precision"] != "fp8":
            raise InvalidValueError(f"fp8_recipe {training.states.fp8_recipe} needs precision "
                                    f"fp8, not {names['precision']}")
    cp_method(training.framework, training.comm.cp_comm_type)   # the framework's CP methods
    for name in ("lora_regather", "lora_dropout", "dora"):
        if not isinstance(getattr(training.adapters, name), bool):
            raise InvalidValueError(f"{name} must be True or False, got "
                                    f"{getattr(training.adapters, name)!r}")
    check_peft_variants(training, x)
    if training.adapters.finetune != "full":
        _check_lora(training.adapters)
    k = rules.knobs(layout, training)
    # rules that need m read it; the batch rule comes first, as microbatches() would raise it
    rules.check(x, k, [n for n in rules.LAUNCH if n not in rules.NEED_M])
    m_ = microbatches(layout, training)
    rules.check(x, dict(k, m=m_), rules.NEED_M)
    if names["schedule"] == "gpipe" and m_ is None and layout.p > 1:
        raise InvalidValueError("GPipe keeps all m micro-batches: give num_microbatches or "
                                "global_batch_size")
    return m_


def _check_lora(ad) -> None:
    """A LoRA job's rank, base format and targets (none only beside the expert parameters:
    PEFT raises on a LoraConfig matching nothing, peft v0.20.0 tuners_utils.py:996-1001)."""
    whole(ad.lora_rank, "lora_rank")
    if ad.quantization is not None:
        choose("quantization", ad.quantization, QUANTIZATIONS)
    if ad.lora_targets == "all":
        return
    if isinstance(ad.lora_targets, str):
        raise InvalidValueError("lora_targets must be \"all\" or a list of "
                                + ", ".join(LORA_TARGETS))
    if not ad.lora_targets and not ad.lora_expert_params:
        raise InvalidValueError("lora_targets none adapts nothing: give targets (q,k,v,o,gate,"
                                "up,down) or lora_expert_params")
    for name in ad.lora_targets:
        choose("LoRA target", name, LORA_TARGETS)


def _check_expert_tp(layout: Layout, framework: str) -> None:
    # an experts' TP size of their own (Framework.expert_tp): Megatron-LM's and torchtitan's;
    # DeepSpeed splits the experts by the layers' TP size, so a t_e != t would go unpriced
    if layout.t_e is not None and layout.t_e != layout.t and \
            not framework_record(framework).expert_tp:
        raise InvalidValueError(framework_record(framework).expert_tp_refusal(layout.t_e,
                                                                             layout.t))


def check_dispatcher(dispatcher: str, framework: str, moe: bool) -> None:
    """Refuse a MoE token dispatcher the framework or the model cannot have, in the words
    :func:`validate` and the search (:mod:`memsym.search.space`) both use.

    Megatron-core's ``--moe-token-dispatcher-type`` choices other than ``alltoall`` are its
    own, and it builds no token dispatcher without routed experts.  ``dispatcher`` is a
    canonical name (:data:`memsym.vocabulary.MOE_DISPATCHERS`), ``moe`` whether the model has
    routed experts; raises :class:`memsym.errors.InvalidValueError`.

    >>> check_dispatcher("alltoall", "deepspeed", moe=False)
    >>> check_dispatcher("flex", "deepspeed", moe=True)
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: moe_dispatcher flex is Megatron-core's, not deepspeed's
    """
    if dispatcher != "alltoall" and not framework_record(framework).megatron_options:
        raise InvalidValueError(f"moe_dispatcher {dispatcher} is Megatron-core's, not {framework}'s")
    if dispatcher != "alltoall" and not moe:
        raise InvalidValueError(f"moe_dispatcher {dispatcher} needs an MoE model (Megatron-core "
                                "builds no token dispatcher without experts)")


def _check_dispatcher(x, layout: Layout, dispatcher: str, framework: str) -> None:
    check_dispatcher(dispatcher, framework, x.is_moe)
    if dispatcher == "deepep":     # DeepEP has configs for some group sizes only (e t_e > 1)
        check_deepep_group(layout.e * (layout.t if layout.t_e is None else layout.t_e))


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
        # arguments.py 1024-1026: the distributed optimizer or Megatron-FSDP, any strategy
        # (no_shard included, whose states are DDP's)
        if training.states.sharding == "ddp" and training.states.megatron_fsdp is None:
            raise InvalidValueError("--overlap-param-gather needs the distributed optimizer "
                                    "(--use-distributed-optimizer) or Megatron-FSDP")
    if training.pipeline.defer_embedding_wgrad_compute and layout.p == 1:  # model_parallel_config
        raise InvalidValueError("--defer-embedding-wgrad-compute needs pipeline parallelism "
                                "(Megatron's ModelParallelConfig: \"Cannot defer embedding "
                                "wgrad compute when pipeline model parallel is not used\")")
    if training.comm.tp_comm_overlap and (layout.t == 1 or not layout.sequence_parallel):
        raise InvalidValueError("--tp-comm-overlap needs --sequence-parallel, which Megatron "
                                "turns off at TP 1 (validate_args)")
    cfg = training.comm.tp_comm_overlap_cfg
    if cfg is not None and not (isinstance(cfg, (str, tuple)) and training.comm.tp_comm_overlap):
        raise InvalidValueError("tp_comm_overlap_cfg names the userbuffers config (a string, or "
                                "a user's config as memsym.timing.userbuffers.user_ub_config "
                                "reads it) of tp_comm_overlap, which is off")


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
    if method == "uniform" and n != 1 and x.mtp_num_layers:
        # multi_token_prediction.py:1621-1627 at d98e8a64dd: MTP's checkpoint asserts it
        raise InvalidValueError(f"recompute_method uniform with recompute_num_layers {n} and "
                                "multi-token prediction: Megatron asserts recompute_num_layers "
                                "must be 1 for MTP recompute")
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


#: The names Training.zero_buckets takes, each with its limit (memsym.limits).
ZERO_BUCKET_NAMES = {"reduce_bucket_size": "parameters", "stage3_prefetch_bucket_size":
                     "parameters", "ipg_buffers": None}


def check_zero_buckets(pairs) -> None:
    """Refuse a ``zero_buckets`` that is not (name, whole number) pairs of known names."""
    if not isinstance(pairs, tuple):
        raise InvalidValueError("zero_buckets must be a tuple of (name, value) pairs")
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and pair[0] in ZERO_BUCKET_NAMES):
            raise InvalidValueError("zero_buckets holds (name, value) pairs named "
                                    + ", ".join(ZERO_BUCKET_NAMES))
        name, value = pair
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidValueError(f"zero_buckets {name} must be a whole number >= 0")
        if ZERO_BUCKET_NAMES[name]:
            check_limit(ZERO_BUCKET_NAMES[name], value, name)
        elif value > 2:
            raise InvalidValueError("zero_buckets ipg_buffers is 0, 1 or 2 (DeepSpeed's "
                                    "setup_buckets)")
