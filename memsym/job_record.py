r"""The job record: the layout and the training step of a job, and their defaults.

:class:`Layout` (how the GPUs are split) and :class:`Training` (what one step does), with the one table of
defaults (:data:`DEFAULTS`), the option spellings accepted beside the field names, the defaults every report
lists, the one whole-number validator and :math:`m = B/(b\,d)`; :func:`memsym.job.job` builds them.

.. math:: G = t\,p\,c\,d, \qquad B = m\,b\,d
"""

from __future__ import annotations

import dataclasses, numbers
from dataclasses import dataclass

from sympy import Rational

from .errors import InvalidValueError
from .job_adapters import Adapters
from .job_comm import CommOverlap
from .model.pipeline_layout import PipelineLayout
from .rules import check as check_rule
from .vocabulary import recompute_modules

__all__ = ["Layout", "Training", "Batch", "PipelineSchedule", "ModelStates", "Memory", "Adapters",
           "PARTS", "FIELD_PARTS", "DEFAULTS", "OPTION_ALIASES", "REPORTED_DEFAULTS",
           "whole", "microbatches", "recompute_modules_of"]

# the parts ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """A parallel layout: how the GPUs are split (Megatron-LM's ordering [TP, CP, PP, DP]).

    Attributes
    ----------
    t, p, d, c : int
        Tensor-, pipeline-, data- and context-parallel sizes [GPUs]; world size ``G = t p c d``.
    e, t_e : int or None
        Expert-parallel size and expert tensor-parallel size [GPUs] (``t_e`` None = ``t``, as
        Megatron-LM's ``validate_args`` resolves it).
    v : int or None
        Virtual pipeline stages (model chunks) per pipeline rank [1]; None = not interleaved.
    sequence_parallel : bool
        Megatron sequence parallelism (only meaningful for ``t > 1``).
    first_stage_layers, last_stage_layers : int or None
        Uneven pipeline: decoder layers on the first / last stage (Megatron's
        ``--decoder-first/last-pipeline-num-layers``); the rest split evenly.
    pipeline_layout : PipelineLayout or None
        Megatron's ``--pipeline-model-parallel-layout`` (or the split of
        ``--account-for-embedding/loss-in-pipeline-split``): which layers each chunk of each
        rank builds (:class:`memsym.model.pipeline_layout.PipelineLayout`); its v is the
        layout's.  :func:`job` takes the layout string.
    """

    t: int = 1
    p: int = 1
    d: int = 1
    c: int = 1
    e: int = 1
    t_e: int | None = None
    v: int | None = None
    sequence_parallel: bool = False
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    pipeline_layout: PipelineLayout | None = None

    @property
    def world_size(self) -> int:
        """``G = t p c d`` [GPUs]."""
        return self.t * self.p * self.c * self.d

    @property
    def expert_tp(self) -> int:
        """The expert tensor-parallel size [GPUs] (``t`` unless given)."""
        return self.t if self.t_e is None else self.t_e


@dataclass(frozen=True)
class Batch:
    """How many tokens one step takes.

    Attributes
    ----------
    seq_length, micro_batch_size, global_batch_size : int (the last int or None)
        ``s`` [tokens], ``b`` [sequences], ``B`` [sequences].
    num_microbatches : int or None
        ``m``, micro-batches per step and pipeline [1]; None = derived from ``global_batch_size`` as
        ``B/(b d)``, or "enough" (at least ``p``) when that is also None.
    """

    seq_length: int = 4096
    micro_batch_size: int = 1
    num_microbatches: int | None = None
    global_batch_size: int | None = None


@dataclass(frozen=True)
class PipelineSchedule:
    """How the micro-batches run through the pipeline stages.

    Attributes
    ----------
    schedule : {"1f1b", "gpipe"}
        Pipeline schedule; when the layout's ``v`` > 1, 1F1B is interleaved and GPipe
        loops breadth-first (torch's ``ScheduleLoopedBFS``, torchtitan only).
    stage_placement : {"loop", "v"}
        Where a rank's pipeline stages sit: ``"loop"`` (default) puts stage i on rank
        i mod p, so the last rank holds the output layer and the loss; ``"v"`` puts stages r
        and 2p - 1 - r on rank r (torch's ``ZBVZeroBubble`` and ``DualPipeV``, torchtitan
        only, 2 stages per rank), so rank 0 holds the embedding, the output layer and the
        loss, and rank r holds their chunk passes
        (:func:`memsym.terms.schedule.v_stage_microbatches`).
    microbatch_group_size : int or None
        Megatron's ``microbatch_group_size_per_vp_stage`` (None = p; the interleaved rule).
    overlap_p2p_comm : bool
        Megatron's ``overlap_p2p_comm`` (default on; ``--no-overlap-p2p-communication``): the
        interleaved schedule's p2p sends hide behind compute; without it interleaving needs PP > 2.
    defer_embedding_wgrad_compute : bool
        Megatron's ``--defer-embedding-wgrad-compute`` (default off; needs PP > 1): the
        output layer's weight-gradient GEMMs wait for the pipeline flush, so the last stage
        keeps each micro-batch's output-layer input and logits gradient until then
        (:func:`memsym.terms.transients.deferred_wgrad_buffers`).
    wgrad_deferral_limit : int
        Megatron's ``--wgrad-deferral-limit`` (default 0: all deferred; else the most deferred).
    """

    schedule: str = "1f1b"
    stage_placement: str = "loop"
    microbatch_group_size: int | None = None
    overlap_p2p_comm: bool = True
    defer_embedding_wgrad_compute: bool = False
    wgrad_deferral_limit: int = 0


@dataclass(frozen=True)
class ModelStates:
    """How the model states (weights, gradients, optimizer states) are held.

    Attributes
    ----------
    precision, optimizer, sharding, offload : str
        As in :func:`memsym.terms.model_state.model_state` / :func:`byte_widths`.
    convention : str
        How model states are counted: ``"framework"`` (default: what Megatron-core, DeepSpeed
        or FSDP2 allocate: the distributed optimizer's 6 + 12/d B/parameter), ``"seed000"``
        (read as ZeRO-2, 2 + 16/d; alias ``"memsym"``), ``"zero-paper"`` (ZeRO §5), ``"megatron-lm"``.
    grad_dtype, precision_aware, fp8_param_gather, fp8_recipe, fp4_param_gather, bf16_layers
        The gradient-buffer dtype (None: the framework's, fp32 for Megatron's 16-bit training,
        ``"bf16"`` = ``--grad-reduce-in-bf16``; Megatron-FSDP's main grads), ``--use-precision-
        aware-optimizer``, ``--fp8-param-gather`` (:func:`byte_widths`), ``--fp8-recipe`` (None:
        per-tensor; ``"mxfp8"``: ``FP8_RECIPES``), ``--fp4-param-gather``; (first, last) decoder
        layers in BF16 under fp8/fp4 (``--first-last-layers-bf16``, :mod:`memsym.training.bf16_layers`).
    main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype : str
        Megatron's precision-aware optimizer dtypes (fp32; :mod:`memsym.terms.recipe_buffers`).
    zero_buckets : tuple of (str, int)
        DeepSpeed's ZeRO buffers, ``(name, value)`` pairs of ``reduce_bucket_size``
        [elements], ``stage3_prefetch_bucket_size`` [elements] and ``ipg_buffers`` [1] (0, 1,
        or 2 with ``overlap_comm``) as :func:`memsym.readers.jobs.deepspeed_job` reads them;
        absent ones keep :data:`memsym.terms.transients.DEFAULTS`.
    megatron_fsdp, fsdp_double_buffer
        Megatron-FSDP's ``--data-parallel-sharding-strategy`` (None: not Megatron-FSDP;
        :func:`memsym.terms.megatron_fsdp.megatron_fsdp_state`), ``--fsdp-double-buffer``.
    muon_tp_mode, muon_num_ns_steps, muon_nesterov : str, int, bool
        Under ``optimizer="muon"``, Megatron-LM's ``--muon-tp-mode`` (duplicated,
        :data:`memsym.vocabulary.MUON_TP_MODES`), ``--muon-num-ns-steps`` (5 [iterations]) and
        ``--muon-nesterov`` (off): arguments.py:2648-2655, 2633 at d98e8a64dd
        (:mod:`memsym.timing.muon`).
    torch_ddp_buckets, autocast : bool, str
        torch DDP's gradient buckets beside param.grad (:mod:`memsym.terms.torch_ddp`);
        ``torch.autocast``'s dtype over fp32 weights (None, bf16, fp16: :mod:`memsym.terms.autocast`).
    accelerate_fsdp : str or None
        The ``fsdp`` scheme as Accelerate's FSDP2 plugin runs transformers' model under the
        Hugging Face Trainer (:mod:`memsym.terms.accelerate_fsdp`): ``"mixed"`` (``--bf16`` /
        ``--fp16``: the trained parameters upcast to fp32, gathered and reduced in the 16-bit
        dtype), ``"plain"`` (no mixed precision: every tensor in the weights' dtype); None:
        not Accelerate's.
    """

    precision: str = "bf16"
    optimizer: str = "adam"
    sharding: str = "distributed-optimizer"
    convention: str = "framework"
    offload: str = "none"
    grad_dtype: str | None = None
    precision_aware: bool = False
    fp8_param_gather: bool = False
    fp8_recipe: str | None = None
    fp4_param_gather: bool = False
    bf16_layers: tuple[int, int] = (0, 0)
    main_params_dtype: str = "fp32"
    exp_avg_dtype: str = "fp32"
    exp_avg_sq_dtype: str = "fp32"
    zero_buckets: tuple[tuple[str, int], ...] = ()
    megatron_fsdp: str | None = None
    fsdp_double_buffer: bool = False
    muon_tp_mode: str = "duplicated"
    muon_num_ns_steps: int = 5
    muon_nesterov: bool = False
    torch_ddp_buckets: bool = False
    autocast: str | None = None
    accelerate_fsdp: str | None = None


@dataclass(frozen=True)
class Memory:
    """What the activations and transients keep, and which count of memory is reported.

    Attributes
    ----------
    recompute : {"none", "selective", "full", "selective-op"}
        Activation recomputation (Megatron ``--recompute-granularity``; absent = none).
    recompute_method, recompute_num_layers
        Megatron's ``--recompute-method`` / ``--recompute-num-layers`` under full recompute
        (None: every layer checkpointed on its own, ``uniform`` with 1).  ``uniform`` N:
        groups of N layers checkpointed (each group's input kept, one group rematerialised
        in backward); ``block`` N: the first N layers of each model chunk checkpointed, the
        others keep their activations (``transformer_block.py``, ``_checkpointed_forward``);
        ``every`` N (torchtitan's ``selective_ac_option = "N"``): every N-th transformer block
        a rank builds is fully checkpointed, floor(n/N) of its n blocks, counted across its
        pipeline stages (``activation_checkpoint.py``, ``_apply_layer_sac``).
    recompute_modules : tuple of str or None
        Megatron-Core's ``--recompute-modules`` under selective recompute: which submodules
        are checkpointed (:data:`memsym.terms.activations.RECOMPUTE_MODULES`: core_attn,
        moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts; held in that order, each
        once).  None (default): Megatron's default ``("core_attn",)`` under selective
        recompute; given with another mode, or another framework, it is refused.  What each
        drops: :func:`memsym.terms.activations.layer_activations`.
    flash_attention : bool
        Memory-efficient attention (no s^2 scores kept; softmax statistics kept; default
        True: Megatron-core's ``--attention-backend auto`` picks a fused or flash kernel).
    dropout : bool or None
        Whether dropout masks are kept (Megatron's defaults --hidden-dropout 0.1 and
        --attention-dropout 0.1; Llama-style recipes set both to 0, and PyTorch keeps no
        mask at p = 0).  None (default): the model's recipe, where a preset has one
        (:data:`memsym.model.RECIPES`: Megatron-Bridge trains Llama, Mistral, Qwen3,
        DeepSeek-V3 and gpt-oss without dropout), else the framework's default
        (:func:`memsym.job.resolve_dropout`); :func:`memsym.job.job` resolves it.
        torchtitan's models have no dropout layers: with ``framework="torchtitan"`` it is
        off (asking for it is refused).
    compiled_loss, compiled_model, chunked_loss : bool
        ``torch.compile`` of the loss (torchtitan's ``compile.components`` with ``"loss"``, since
        bbb1b616e: the 16-bit logits and 8 bytes per token kept, no fp32 copy; :func:`memsym.
        terms.activations.output_activations`) and of each block (``"model"``, before that
        ``training.compile``: under ``"selective-op"`` a block keeps only what its backward
        reads, :func:`memsym.terms.op_sac.op_sac_layer`); TRL's chunked loss (chunked_nll:
        no logits kept, :mod:`memsym.terms.chunked_loss`).  Default False: eager PyTorch.
    sac_saves_attention : bool
        Whether per-op SAC saves the SDPA output (default True).  False where the kernel SDPA
        runs is not on torchtitan's ``_save_list``: cuDNN's, first on compute capability 10
        since torchtitan #1196 and listed only since b39377f9f (:func:`memsym.terms.op_sac.op_sac_layer`).
    loss_parallel : bool
        torchtitan's loss parallel (default True: ``disable_loss_parallel = false``): with
        t > 1 the logits stay vocab-sharded and the cross-entropy runs in ``loss_parallel()``
        (:func:`memsym.terms.transients.loss_parallel_transient`); torchtitan only.
    fsdp_root_group : bool
        torchtitan's FSDP2 grouping before 83e694105 (July 2025), the root ``fully_shard``
        holding embedding, final norm and output, gathered from the forward's start to the
        backward's end (default False, since v0.2: the embedding its
        own group, ``[norm, output]`` one; :func:`memsym.terms.transients.fsdp2_io_groups`).
    fsdp_keep_gathered : bool
        FSDP2's ``reshard_after_forward=False`` on every group (the Trainer's ``--fsdp
        shard_grad_op`` or ``fsdp_config`` ``reshard_after_forward`` false under Accelerate's
        plugin, ``accelerate_fsdp``): every parameter stays all-gathered from its forward to
        its backward (:func:`memsym.terms.transients.fsdp2_kept_unsharded`).  Default False.
    capacity_factor : int or Rational
        MoE routed-token load of the busiest expert rank over a balanced one (1; Megatron's
        ``--moe-expert-capacity-factor`` when tokens are dropped).
    bias_activation_fusion : bool
        Megatron's fused gated unit (True; False: ``memsym.terms.activations.unfused_glu_products``,
        clamped ``memsym.terms.eager_glu``; fused and clamped, GPT-OSS's: ``clamped_glu_copy``).
    activation_func_fp8_input_store, fp8_attention : bool
        Megatron-core's FP8 SwiGLU input (False): :func:`memsym.terms.activations.fp8_glu_input`;
        TE's FP8 attention (``fp8_dpa``, False): :mod:`memsym.terms.fp8_attention`.
    cross_entropy_fusion_impl, cpu_offloading_num_layers : str, int
        Megatron's loss ("native", or Transformer Engine's "te") and its first k layers'
        activations on the host (0): :mod:`memsym.terms.recipe_buffers`.
    cuda_graph_impl, cuda_graph_modules, batch_attention_mask, optimizer_cuda_graph
        Megatron-core's CUDA graphs, parts captured, batches' mask, ``--optimizer-cuda-graph``
        (:mod:`memsym.terms.cuda_graphs`).
    moe_dispatcher : {"alltoall", "allgather", "deepep", "hybridep"}
        Megatron's MoE token dispatcher (``--moe-token-dispatcher-type``; the flex one named
        by its ``--moe-flex-dispatcher-backend``): :mod:`memsym.terms.dispatcher_buffers`.
    mla_down_proj_fusion : bool
        Megatron's ``--mla-down-proj-fusion`` (off, arguments.py:3566-3572; needs MLA,
        1976-1977): MLA's input norm fused into the q/kv down-projection, so ``layernorm``
        recompute does not rerun it (:func:`memsym.timing.recompute.norms_recomputed`).
    fp32_residual_connection : bool
        Megatron's ``--fp32-residual-connection`` (off; ``--bf16`` or ``--fp16`` only,
        arguments.py:1374-1376): the residual stream and the pipeline's p2p tensors in fp32,
        the layers' saved tensors 16-bit casts (:mod:`memsym.terms.fp32_residual`).
    first_iteration : bool
        The first iteration's peak (False: every later one's): Megatron-core makes no Adam
        moments before the first optimizer step unless a checkpoint's state is loaded
        (Transformer Engine's FusedAdam makes them in ``step``), so its forward and backward
        run without them, what a memory log printed once after the first iteration reads
        (:func:`memsym.training.transients.states_and_transients`).
    metric : {"device", "reserved", "allocated"}
        Which count of memory the total is (:data:`memsym.terms.allowances.METRICS`):
        ``"device"`` (default: what nvidia-smi and ``cudaMemGetInfo`` see, and what must fit),
        ``"reserved"`` (``torch.cuda.max_memory_reserved``: no CUDA context, no NCCL buffers)
        or ``"allocated"`` (``torch.cuda.max_memory_allocated``: also no allocator reserve).
    """

    recompute: str = "none"
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    recompute_modules: tuple[str, ...] | None = None
    flash_attention: bool = True
    dropout: bool | None = None
    compiled_loss: bool = False
    compiled_model: bool = False
    chunked_loss: bool = False
    sac_saves_attention: bool = True
    loss_parallel: bool = True
    fsdp_root_group: bool = False
    fsdp_keep_gathered: bool = False
    capacity_factor: int | Rational = 1
    bias_activation_fusion: bool = True
    activation_func_fp8_input_store: bool = False
    fp8_attention: bool = False
    cross_entropy_fusion_impl: str = "native"
    cpu_offloading_num_layers: int = 0
    cuda_graph_impl: str = "none"
    cuda_graph_modules: tuple[str, ...] = ()
    batch_attention_mask: bool = True
    optimizer_cuda_graph: bool = False
    moe_dispatcher: str = "alltoall"
    metric: str = "device"
    mla_down_proj_fusion: bool = False
    fp32_residual_connection: bool = False
    first_iteration: bool = False


#: Training's sub-records: attribute -> record class.
PARTS: dict = {"batch": Batch, "pipeline": PipelineSchedule, "states": ModelStates,
               "memory": Memory, "adapters": Adapters, "comm": CommOverlap}
#: Every flat field name of a Training -> the sub-record that owns it ("" for ``framework``,
#: a field of Training itself), in the order the options are listed.
FIELD_PARTS: dict = {name: part for name, part in (
    *((n, "batch") for n in ("seq_length", "micro_batch_size", "num_microbatches", "global_batch_size")),
    *((n, "memory") for n in ("recompute", "recompute_method", "recompute_num_layers",
                              "recompute_modules", "flash_attention", "dropout")),
    ("schedule", "pipeline"), ("stage_placement", "pipeline"), *((n, "states") for n in (
        "precision", "optimizer", "sharding", "convention", "offload")),
    ("capacity_factor", "memory"), ("microbatch_group_size", "pipeline"),
    *((n, "states") for n in ("grad_dtype", "precision_aware", "fp8_param_gather", "fp8_recipe")),
    *((n, "adapters") for n in ("finetune", "lora_rank", "lora_targets", "quantization",
                                "lora_regather", "lora_dropout", "dora", "lora_expert_params")),
    ("compiled_loss", "memory"), ("framework", ""), ("loss_parallel", "memory"), ("fsdp_root_group", "memory"),
    *((n, "comm") for n in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
                            "overlap_moe_expert_parallel_comm", "tp_comm_overlap_cfg")),
    *((n, "pipeline") for n in ("overlap_p2p_comm", "defer_embedding_wgrad_compute",
                                "wgrad_deferral_limit")),
    ("metric", "memory"), ("first_iteration", "memory"), ("zero_buckets", "states"), ("cp_comm_type", "comm"), *((n, "states") for n in (
        "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype", "megatron_fsdp",
        "fsdp_double_buffer", "fp4_param_gather", "bf16_layers")),
    *((n, "memory") for n in ("cross_entropy_fusion_impl", "cpu_offloading_num_layers", "moe_dispatcher",
        "cuda_graph_impl", "cuda_graph_modules", "batch_attention_mask", "optimizer_cuda_graph", "compiled_model",
        "mla_down_proj_fusion", "bias_activation_fusion", "sac_saves_attention", "activation_func_fp8_input_store",
        "chunked_loss", "fp32_residual_connection", "fp8_attention")),
    *((n, "states") for n in ("muon_tp_mode", "muon_num_ns_steps", "muon_nesterov",
                              "torch_ddp_buckets", "autocast", "accelerate_fsdp")),
    ("fsdp_keep_gathered", "memory"))}


@dataclass(frozen=True, init=False)
class Training:
    """What one training step does: six typed sub-records and the framework.

    Build it with flat keywords (Megatron-LM argument names where they exist), each routed to
    the sub-record that owns it (:data:`FIELD_PARTS`), or with the sub-records themselves
    (the examples).

    The defaults are :data:`DEFAULTS` (one table for every command and API).  Reading a flat name
    (``training.recompute``) is a convenience for users and notebooks; memsym's own code reads the sub-record
    (``training.memory.recompute``; tests/test_job_record.py checks); :meth:`replace` takes the same keywords.

    Attributes
    ----------
    batch : Batch
        Sequence length, micro-batch size, micro-batches, global batch.
    pipeline : PipelineSchedule
        Pipeline schedule, stage placement and their Megatron switches.
    states : ModelStates
        Precision, optimizer, sharding, convention, offload, state dtypes, ZeRO buffers.
    memory : Memory
        Recomputation, attention, dropout, loss, FSDP2 grouping, MoE capacity, fusion, metric.
    adapters : Adapters
        Full training or LoRA / QLoRA adapters.
    comm : CommOverlap
        Data-parallel, tensor-parallel and expert-parallel communication overlap.
    framework : {"megatron", "deepspeed", "torchtitan"}
        Whose launch rules and runtime apply (:data:`memsym.vocabulary.FRAMEWORKS`; default
        Megatron-LM).  ``"torchtitan"``: sharding ``fsdp`` or ``ddp``, FSDP2 with pipelining
        split as torchtitan splits (:func:`memsym.job.framework_layout`), the stage kept
        unsharded through the pipelined backward (:func:`memsym.terms.transients.
        fsdp2_pipeline_unsharded`).  ``"deepspeed"``: ``ddp`` or ZeRO ``zero1/2/3``.

    Examples
    --------
    >>> t = Training(seq_length=8192, recompute="full")
    >>> t.batch.seq_length, t.memory.recompute, t.states.precision
    (8192, 'full', 'bf16')
    >>> t.replace(recompute="selective").memory.recompute
    'selective'
    >>> Training(recompute="full") == Training(memory=Memory(recompute="full"))
    True
    """

    batch: Batch = Batch()
    pipeline: PipelineSchedule = PipelineSchedule()
    states: ModelStates = ModelStates()
    memory: Memory = Memory()
    adapters: Adapters = Adapters()
    comm: CommOverlap = CommOverlap()
    framework: str = "megatron"

    def __init__(self, *, batch: Batch | None = None, pipeline: PipelineSchedule | None = None,
                 states: ModelStates | None = None, memory: Memory | None = None,
                 adapters: Adapters | None = None, comm: CommOverlap | None = None,
                 framework: str = "megatron", **flat):
        given = {"batch": batch, "pipeline": pipeline, "states": states, "memory": memory,
                 "adapters": adapters, "comm": comm}
        unknown = [k for k in flat if FIELD_PARTS.get(k, "") == ""]
        if unknown:
            raise TypeError(f"Training got an unexpected keyword argument {unknown[0]!r}")
        for part, cls in PARTS.items():
            record = cls() if given[part] is None else given[part]
            if not isinstance(record, cls):
                raise InvalidValueError(f"training {part} must be a memsym.{cls.__name__}(...), "
                                        f"got {type(record).__name__}")
            changes = {k: tuple(v) for k, v in vars(record).items() if isinstance(v, list)}
            changes.update({k: tuple(v) if isinstance(v, list) else v for k, v in flat.items()
                            if FIELD_PARTS[k] == part})    # lists as tuples: cache keys
            object.__setattr__(self, part,
                               dataclasses.replace(record, **changes) if changes else record)
        object.__setattr__(self, "framework", framework)

    def __getattr__(self, name: str):
        # a flat field name reads its sub-record (the users' convenience); anything else is a
        # plain AttributeError (pickle and copy ask for __setstate__ before the parts are set)
        part = FIELD_PARTS.get(name)
        if not part:
            raise AttributeError(f"'Training' object has no attribute {name!r}")
        return getattr(object.__getattribute__(self, part), name)

    def replace(self, **changes) -> "Training":
        """A new Training with ``changes`` made: flat field names, sub-records or framework.

        Examples
        --------
        >>> Training().replace(seq_length=2048, framework="torchtitan").batch.seq_length
        2048
        """
        kw = {**{part: getattr(self, part) for part in PARTS}, "framework": self.framework}
        kw.update({k: changes.pop(k) for k in list(changes) if k in kw})
        return Training(**kw, **changes)

    def value(self, name: str):
        """The flat field ``name``'s value, read from the sub-record that owns it (for code
        that reads fields by name: option tables, reports, limits).

        Examples
        --------
        >>> Training(recompute="full").value("recompute")
        'full'
        """
        part = FIELD_PARTS[name]
        return getattr(getattr(self, part), name) if part else getattr(self, name)

    def flat(self) -> dict:
        """Every flat field and its value, in :data:`FIELD_PARTS` order."""
        return {name: self.value(name) for name in FIELD_PARTS}


def _defaults() -> dict:
    out = {f.name: f.default for f in dataclasses.fields(Layout)}
    out.update(Training().flat())
    return out


#: Every default of a job, in one table (Layout and Training fields).  Where it differs
#: from a framework's, the framework readers (:mod:`memsym.readers`) apply the framework's.
DEFAULTS: dict = _defaults()

#: Option spellings accepted beside the field names (Megatron-LM's and the CLI's).
OPTION_ALIASES: dict = {
    "tp": "t", "tensor_model_parallel_size": "t", "pp": "p", "pipeline_model_parallel_size": "p",
    "dp": "d", "data_parallel_size": "d", "cp": "c", "context_parallel_size": "c",
    "ep": "e", "expert_model_parallel_size": "e", "etp": "t_e",
    "expert_tensor_parallel_size": "t_e", "vpp": "v", "virtual_pipeline_model_parallel_size": "v",
    "decoder_first_pipeline_num_layers": "first_stage_layers",
    "decoder_last_pipeline_num_layers": "last_stage_layers",
    "recompute_granularity": "recompute", "use_flash_attn": "flash_attention",
    "moe_expert_capacity_factor": "capacity_factor",
    "microbatch_group_size_per_vp_stage": "microbatch_group_size",
    "pipeline_model_parallel_layout": "pipeline_layout",
}
#: The defaults that decide memory or time, listed in every report when the user did not give
#: them: field -> where the value comes from (memsym's own choice, said with its reason).
REPORTED_DEFAULTS: dict = {
    "precision": "memsym.job.DEFAULTS: bf16 mixed precision (Megatron-LM --bf16, as the "
                 "recipes of Megatron-Bridge and torchtitan train)",
    "optimizer": "memsym.job.DEFAULTS: Adam (Megatron-LM's --optimizer default)",
    "sharding": "memsym.job.DEFAULTS: Megatron-core's distributed optimizer (the recipes' "
                "--use-distributed-optimizer)",
    "recompute": "memsym.job.DEFAULTS: no recomputation (Megatron-LM without "
                 "--recompute-granularity)",
    "flash_attention": "memsym.job.DEFAULTS: Megatron-core's --attention-backend auto picks a "
                       "fused or flash kernel",
    "dropout": "Megatron-LM arguments.py: --hidden-dropout 0.1 and --attention-dropout 0.1 "
               "(the model has no recipe in memsym.model.RECIPES)",
    "micro_batch_size": "memsym.job.DEFAULTS: one sequence per micro-batch",
    "seq_length": "memsym.job.DEFAULTS: 4096 tokens, capped by the model's position table",
    "d": "memsym.job.DEFAULTS: data-parallel size 1 (no --world-size or --dp)",
}


def whole(value, what: str, *, minimum: int = 1, optional: bool = False):
    """``value`` as a Python int ``>= minimum`` (None passes when ``optional``).

    Booleans are refused (``True`` is not one layer); numpy integers are accepted.

    Examples
    --------
    >>> whole(8, "t")
    8
    >>> whole(0, "t")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: t must be a whole number >= 1, got 0
    """
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise InvalidValueError(f"{what} must be a whole number >= {minimum}"
                                + (" or None" if optional else "") + f", got {shown}")
    return int(value)


def microbatches(layout: Layout, training: Training):
    """The number of micro-batches m per step (None when neither m nor B is given).

    Megatron: ``B = m · b · d`` (the global batch is split over data-parallel ranks and
    micro-batches; CP ranks share a sequence).

    Examples
    --------
    >>> microbatches(Layout(d=2), Training(micro_batch_size=1, global_batch_size=32))
    16
    """
    m_, B_ = training.batch.num_microbatches, training.batch.global_batch_size
    bd = training.batch.micro_batch_size * layout.d
    if B_ is not None:
        # the one batch rule (memsym.rules "batch"): its error class, message and source
        check_rule(None, {"B": B_, "b": training.batch.micro_batch_size, "d": layout.d}, ["batch"])
        if m_ is not None and m_ != B_ // bd:
            raise InvalidValueError(f"num_microbatches {m_} contradicts B/(b*d) = {B_ // bd}")
        return B_ // bd
    return m_


def recompute_modules_of(training: Training) -> tuple:
    """The modules a job recomputes under selective recompute (Megatron's default
    ``("core_attn",)`` when none are given), else ``()``.

    Examples
    --------
    >>> recompute_modules_of(Training(recompute="selective"))
    ('core_attn',)
    >>> recompute_modules_of(Training(recompute="selective", recompute_modules=("mlp", "moe")))
    ('mlp', 'moe')
    """
    if training.memory.recompute != "selective":
        return ()
    mods = training.memory.recompute_modules
    return ("core_attn",) if mods is None else recompute_modules(mods)
