"""What each framework does differently, as one record of data per framework.

memsym follows a job's framework (``Training.framework``: Megatron-LM, DeepSpeed or
torchtitan) in its launch rules, its defaults and its runtime.  Each difference is a field of
:class:`Framework`, read where it matters (``FRAMEWORK[name].field``), so that a behaviour is
written once, with its source, instead of as ``framework == ...`` branches spread over the
modules.  SymPy-free, like :mod:`memsym.vocabulary` (the command line reads it).

Sources (each field's docstring names its locator):

- Megatron-LM at d98e8a64dd: ``megatron/training/arguments.py`` (``--overlap-grad-reduce``
  and ``--overlap-param-gather`` are ``store_true``), ``megatron/core/distributed``.
- DeepSpeed: ``deepspeed/runtime/zero/config.py`` (``overlap_comm`` defaults to True for
  stage 3 only; ``stage`` defaults to 0, no sharding).
- torchtitan: ``torchtitan/config/job_config.py`` (``data_parallel_shard_degree = -1``:
  FSDP2 over every data-parallel rank), ``torchtitan/distributed/pipeline_parallel.py``
  (``torch.distributed.pipelining`` schedules), its models (no dropout layers).

>>> FRAMEWORK["torchtitan"].default_scheme, FRAMEWORK["deepspeed"].schemes
('fsdp', ('ddp', 'zero1', 'zero2', 'zero3'))
>>> FRAMEWORK["deepspeed"].overlaps_by_default("zero3"), FRAMEWORK["megatron"].overlaps_by_default("ddp")
(True, False)
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import choose
from .vocabulary import FRAMEWORKS, PRECISION_NAMES, SCHEMES

__all__ = ["Framework", "FRAMEWORK", "FRAMEWORK_SCHEMES", "framework"]


@dataclass(frozen=True)
class Framework:
    """One framework's behaviour, as memsym models it.

    Attributes
    ----------
    name : str
        memsym's name (:data:`memsym.vocabulary.FRAMEWORKS`).
    title : str
        How users spell it in prose.
    schemes : tuple of str
        The sharding schemes it runs (:data:`memsym.vocabulary.SCHEMES`).
    default_scheme : str
        Its sharding when none is given.  Megatron-LM's own default is DDP; memsym's default
        for a Megatron job is the distributed optimizer, as the recipes of Megatron-Bridge
        train (:data:`memsym.job_record.REPORTED_DEFAULTS` says so in every report).
    default_scheme_source : str
        Where :attr:`default_scheme` comes from.
    attention_source : str
        Why its attention keeps no score matrix when the user names no kernel (the report's
        ``flash_attention`` default): the kernel its model code calls by default.
    overlap_schemes : tuple of str
        The schemes under which its data-parallel collectives overlap the backward (and the
        next forward's parameter gather) when the user sets nothing: none for Megatron-LM
        (``store_true`` flags), ZeRO-3 for DeepSpeed (``overlap_comm``), every scheme for
        torchtitan (FSDP2 prefetches and reduce-scatters in the backward; DDP's buckets
        all-reduce in it).
    launch_overlaps : str
        How a launch turns the data-parallel overlaps on: ``"flags"`` (Megatron's
        ``--overlap-grad-reduce`` / ``--overlap-param-gather``), ``"overlap_comm"``
        (DeepSpeed's one key; the parameter gather overlaps under ZeRO-3 only) or
        ``"always"`` (torchtitan: nothing to set).
    megatron_options : bool
        Whether Megatron-LM's own switches (``--tp-comm-overlap``, the pipeline layout,
        ``--recompute-modules``, the overlap flags, ...) apply; the others refuse them.  Its
        command line also spells what the other frameworks leave to the model code (the
        attention kernel, dropout).
    torch_pipelining : bool
        Pipeline parallelism through ``torch.distributed.pipelining``: torch's round size
        for the interleaved warm-up (``ScheduleInterleaved1F1B``'s ``number_of_rounds``),
        its micro-batch rules instead of Megatron's, its send/receive buffers kept through
        the step, FSDP2 kept unsharded through the pipelined backward, and torchtitan's
        generated layer split (``distributed/pipeline_parallel.py``,
        ``generate_llm_fqn_per_model_part``) when none is given.
    tp_userbuffers : bool
        ``tp_comm_overlap`` is Transformer Engine's userbuffers (split GEMMs); torchtitan's
        async TP is torch's micro-pipelining instead.
    dropout_layers : bool
        Whether its models build dropout layers at all (torchtitan's do not:
        ``models/llama3/model.py``; ``models/attention.py`` calls
        ``scaled_dot_product_attention`` without ``dropout_p``): asking for dropout is refused.
    recipe_defaults : bool
        Whether a preset's training recipe (:data:`memsym.model.RECIPES`, Megatron-Bridge's
        recipes: no dropout for the Llama-style presets) fills what the user left unset
        (:func:`memsym.job.resolve_dropout`); the other frameworks do not run those recipes.
    hf_model_code : bool
        Whether it trains the model's own transformers code (DeepSpeed): a ``config.json``'s
        dropout probabilities decide whether masks are kept (``modeling_llama.py``,
        ``attention_dropout``; :func:`memsym.job.framework_dropout`), and RoPE's angles are
        computed for any position (``LlamaRotaryEmbedding.forward``: ``inv_freq`` x
        ``position_ids``), so only a learned position table bounds the sequence (rule
        ``seq-positions``), and a gated attention is transformers' ``Qwen3NextAttention``
        (``hf_qwen3_next`` of :func:`memsym.terms.activations.layer_activations`).
    layer_selective_ac : bool
        Whether it checkpoints every n-th block (``recompute_method="every"``: torchtitan's
        ``selective_ac_option = "N"``, ``_apply_ac_to_transformer_block``); Megatron
        checkpoints uniform or block.
    tp_sequence_parallel : bool
        Whether its tensor parallelism is always sequence parallel (torchtitan's
        ``models/llama3/infra/parallelize.py``, ``apply_tp``: ``SequenceParallel`` norms and
        ``Shard(1)`` block outputs; no switch turns it off).
    torch_loss : bool
        Whether the last stage runs torch's cross-entropy on an fp32 copy of the logits
        (torchtitan's ``components/loss.py``, ``cross_entropy_loss``), vocabulary-parallel
        under DTensor ``loss_parallel`` at TP > 1 unless ``--parallelism.disable_loss_parallel``
        (``train.py``), instead of Megatron-core's fused vocab-parallel cross-entropy
        (``core/tensor_parallel/cross_entropy.py``).
    torch_output_layer : bool
        Whether the output layer is torch's ``ColwiseParallel`` (``apply_tp``:
        ``input_layouts=Shard(1)``, which saves the all-gathered input under sequence
        parallelism) after a final RMSNorm run eagerly in fp32 (torchtitan's ``RMSNorm``,
        :func:`memsym.terms.activations.output_activations`).
    grads_set_to_none : bool
        Whether each step starts with ``optimizers.zero_grad()`` (``set_to_none=True``,
        torch's default; torchtitan's ``train.py``, ``train_step``), so FSDP2's sharded
        gradients do not exist until the backward's reduce-scatter makes them; Megatron's
        gradient buffer and DeepSpeed's partitions persist.
    fsdp_io_groups : bool
        Whether FSDP2 wraps the embedding and the output layer as groups of their own, the
        root group held or resharded by ``fsdp_root_group`` (torchtitan's ``apply_fsdp`` at
        9dec370 and at 73a0e6979d; :func:`memsym.terms.transients.fsdp2_io_groups`).
    overlap_ipg_buffers : int or None
        The gradient buckets (IPG buffers) the data-parallel reduce fills when it overlaps
        the backward, None for the library default (:data:`memsym.terms.transients.DEFAULTS`):
        DeepSpeed's ``overlap_comm`` adds a second one "to avoid data access conflict"
        (``runtime/zero/stage_1_and_2.py``, ``DeepSpeedZeroOptimizer.setup_buckets``:
        ``buf_1``).
    dtensor_tp : bool
        Tensor parallelism through torch's DTensor plans (torchtitan's ``apply_tp`` in
        ``models/llama3/infra/parallelize.py`` at 018740b7aae7): under sequence parallelism
        ``PrepareModuleInput`` gathers each block's attention and MLP input and
        ``ColwiseParallel`` saves it gathered; without ``loss_parallel`` the output layer
        replicates the logits (``output_layouts=Replicate()``).  Megatron's layers keep the
        sequence shard and gather again in backward, and its loss is vocab-parallel.
    config_suffix : str
        The file a launch is written to (``memsym search --emit``): an arguments file, a
        JSON ``ds_config`` or a TOML job config.
    reader_option : str
        The ``memsym estimate`` option that reads that file back.
    config_lacks : tuple of str
        The job's sizes its file does not hold, given beside it on reading back (a DeepSpeed
        config has no world size and no sequence length; a torchtitan TOML no world size).
    config_precisions : tuple of str
        The precisions its file spells as memsym reads it back (DeepSpeed's ``bf16``/``fp16``
        sections, none for fp8; torchtitan's FSDP2 ``mixed_precision_param`` bf16).
    config_optimizers : tuple of str
        The optimizers its input spells as memsym reads it back (Megatron-LM's
        ``--optimizer adam|sgd``, Adam being AdamW there; the config-file frameworks' jobs
        are read as Adam).
    reads_offload : bool
        Whether its config offloads model states to the CPU (DeepSpeed's ``offload_*``).
    cp_attention : tuple
        Its context-parallel attention: the implementation and the methods it runs, the
        default first (:func:`memsym.terms.context_parallel.cp_attention_transients`); empty
        where memsym models none.  DeepSpeed's is Ulysses (``sequence_parallel_size``:
        ``UlyssesSPAttentionHF``, an all-to-all to a/c heads of the whole sequence), ``a2a``
        only.
    frozen_linear_keeps_no_input : bool
        Whether a linear layer whose weight is frozen (a LoRA base weight without an adapter)
        saves no input for the backward: Transformer Engine's ``Linear`` saves its input only
        when the weight requires a gradient (:func:`memsym.terms.megatron_lora.frozen_linear_inputs`
        cites it).  torch's frozen ``nn.Linear`` keeps no input either: under PEFT on the
        frameworks running transformers' code (DeepSpeed) :func:`memsym.terms.peft_lora.peft_frozen_base`
        counts it with the adapters' own tensors; torchtitan's LoRA is not modelled so.
    searched_schemes : tuple
        The schemes a search offers when none is named (empty: every scheme it runs): those
        its launch arguments spell (:mod:`memsym.emit`).  Megatron-LM's are DDP, the
        distributed optimizer and Megatron-FSDP's ``optim_grads`` / ``optim_grads_params``
        (the zero2 and fsdp rows); DeepSpeed's ZeRO-1/3, which memsym prices under a Megatron
        job too, have no Megatron-LM flag and are searched only when named.
    moe_combine_keeps_outputs : bool
        Whether an MoE layer keeps each routed copy's expert output for the backward of its
        probability-weighted combine (``combine_kept`` of
        :func:`memsym.terms.activations.layer_activations`).  torchtitan multiplies the
        expert outputs by the router scores in its combine (``models/common/
        token_dispatcher.py:160`` at b5bcd76c6), which keeps them; DeepSpeed's MoE is not
        read here and keeps the term (memsym's reading before this field).  Megatron-core
        (d98e8a64dd) multiplies the probabilities into the expert activation before fc2
        (``moe/experts.py:943-1028``, ``TEGroupedMLP.forward``: ``bias_act_func`` with
        ``permuted_probs``) and unpermutes with a plain sum: no dispatcher passes ``probs`` to
        ``moe_utils.unpermute`` (``token_dispatcher.py:891-899``, ``:1459-1467``; HybridEP's
        ``hybrid_ep_combine`` at ``:1189``), whose unfused path is a ``scatter_add_``
        (``moe_utils.py:615``, only the indices kept) and whose fused one Transformer
        Engine's ``moe_unpermute`` without ``merging_probs`` (d0067d0da6
        ``pytorch/permutation.py:803-808``: only the row map saved).
    moe_glu_clamp_copy : bool
        Whether a clamped gated expert activation (GPT-OSS's ``swiglu_limit``, Megatron's
        ``activation_func_clamp_value``) keeps a clamped copy of the fc1 output beside it
        (:func:`memsym.terms.activations.clamped_glu_copy`): Megatron-core's
        ``weighted_bias_quick_geglu_impl`` clamps the two halves eagerly, concatenates them
        and its fused function saves the concatenation (d98e8a64dd
        ``core/fusions/fused_bias_geglu.py:424-440``, ``:326-327``), while the clamps keep
        the fc1 output; unfused, its eager ``glu`` keeps the clamped gate half
        (:func:`memsym.terms.eager_glu.eager_clamped_glu_input`).  The other frameworks'
        GPT-OSS experts are not read here.
    expert_tp : bool
        Whether it splits the routed experts' GEMMs over an expert tensor-parallel size of
        their own, t_e (searched as t_e = t or 1: :func:`memsym.search.grid.expert_tp_sizes`):
        Megatron-LM's ``--expert-tensor-parallel-size``, torchtitan v0.2.2's
        ``expert_tensor_parallel_degree``.  DeepSpeed's AutoEP has no such size (t_e = t).
    searched_sizes : tuple
        ``(knob, values)`` pairs a search holds where the caller names none (empty: every
        size is searched): the layouts memsym reads back from the framework's own file, so
        that ``memsym search``, ``min-gpus``, ``plot`` and ``search --emit`` rank the same rows.
        DeepSpeed (edaa722126) reads a config's AutoTP (``tensor_parallel.autotp_size``,
        ``deepspeed/__init__.py:210-212``), which memsym reads as t
        (:mod:`memsym.readers.deepspeed_autotp`) but searches only where ``--tp`` names it
        (AutoTP shards the transformers ``tp_plan`` of the model, which a search does not
        check) or a read config sets it; Ulysses' ``sequence_parallel_size``
        (:203-206), read as c with the ``a2a`` method (:mod:`memsym.readers.deepspeed_ulysses`),
        is searched likewise only where ``--cp`` names it or a read config sets it: the key
        alone changes the batch rule, the training script must register Ulysses' attention
        (``UlyssesSPAttentionHF.register_with_transformers``); DeepSpeed pipelines only
        a model-code ``PipelineModule`` (``deepspeed/__init__.py:213``), and a Hugging Face
        model's recompute is its own gradient checkpointing of every decoder layer, given
        beside the config (:data:`memsym.readers.deepspeed_notes.MODEL_CHECKPOINTING`): none
        or full.
    searched_sizes_reason : str
        The line a search prints when it holds :attr:`searched_sizes`.
    named_sizes : tuple
        The sizes of :attr:`searched_sizes` a search does try where the command line names
        them (DeepSpeed: AutoTP's ``tp``, Ulysses' ``cp``); the others it never changes
        (DeepSpeed's ``pp``, ``vpp``), so a hint to try a larger one names only these.
    tp_whole_embedding : bool
        Whether its tensor parallelism leaves the word embedding whole on every TP rank (and
        a tied output layer with it), where Megatron's ``VocabParallelEmbedding`` splits it:
        DeepSpeed AutoTP (edaa722126) shards what the model's transformers ``tp_plan`` names
        (``runtime/engine.py:816-848``, ``module_inject/tp_plan_converter.py:42-70``), which
        names no embedding (transformers 5.25 ``LlamaConfig.base_model_tp_plan``), and leaves
        an output layer tied to the embedding replicated (``module_inject/auto_tp.py:488-535``).
    tp_gathered_logits : bool
        Whether every TP rank holds all logits: AutoTP's output layer is
        ``colwise_gather_output`` (transformers' ``LlamaForCausalLM._tp_plan``), a column split
        whose outputs are all-gathered (``tp_plan_converter.py:48-50``, ``LinearLayer(...,
        gather_output=True)``, ``auto_tp.py:486``) before the model's own loss.
    eager_swiglu : bool
        Whether its gated MLPs and experts run SwiGLU as eager ``silu(w1 x) * w3 x``, whose
        product keeps SiLU's output (:func:`memsym.terms.eager_glu.eager_silu_output`):
        torchtitan's ``FeedForward`` and ``GroupedExperts`` (b5bcd76c6
        ``models/common/feed_forward.py:53-54``, ``moe.py:94-107``) and transformers' own
        model code, which DeepSpeed trains (5.25.0 ``LlamaMLP.forward``,
        ``integrations/moe.py:498-504``); Megatron-core fuses it (``bias_activation_fusion``)
        or keeps its own eager products (:func:`memsym.terms.activations.unfused_glu_products`).
    tp_without_sequence_parallel : bool
        Whether its tensor parallelism never splits the sequence: AutoTP keeps the
        activations between its linears whole on every TP rank (``LinearAllreduce``
        all-reduces its output, ``LinearLayer`` takes the whole input: edaa722126
        ``module_inject/layers.py:770-776``, ``:851-869``), so a
        job with sequence parallelism is refused and a search holds it off.
    """

    name: str
    title: str
    schemes: tuple
    default_scheme: str
    default_scheme_source: str
    attention_source: str
    overlap_schemes: tuple
    launch_overlaps: str
    megatron_options: bool
    torch_pipelining: bool
    tp_userbuffers: bool
    dropout_layers: bool
    recipe_defaults: bool
    hf_model_code: bool
    layer_selective_ac: bool
    tp_sequence_parallel: bool
    torch_loss: bool
    torch_output_layer: bool
    grads_set_to_none: bool
    fsdp_io_groups: bool
    overlap_ipg_buffers: int | None
    dtensor_tp: bool
    config_suffix: str
    reader_option: str
    config_lacks: tuple
    config_precisions: tuple
    config_optimizers: tuple
    reads_offload: bool
    cp_attention: tuple = ()
    frozen_linear_keeps_no_input: bool = False
    searched_schemes: tuple = ()
    moe_combine_keeps_outputs: bool = True
    moe_glu_clamp_copy: bool = False
    expert_tp: bool = False
    searched_sizes: tuple = ()
    searched_sizes_reason: str = ""
    named_sizes: tuple = ()
    tp_whole_embedding: bool = False
    tp_gathered_logits: bool = False
    tp_without_sequence_parallel: bool = False
    eager_swiglu: bool = False

    def held_sizes(self, **named) -> dict:
        """The searched sizes a search of this framework takes where the caller named none
        (:attr:`searched_sizes`): ``{"all": the sizes in the order given, "held": the names
        held}``.

        >>> FRAMEWORK["deepspeed"].held_sizes(tp=None, pp=[2], recompute=None)
        {'all': ((1,), [2], ('none', 'full')), 'held': ('tp', 'recompute')}
        >>> FRAMEWORK["megatron"].held_sizes(tp=None)
        {'all': (None,), 'held': ()}
        """
        held = {k: v for k, v in self.searched_sizes if k in named and named[k] is None}
        return {"all": tuple(held.get(k, v) for k, v in named.items()), "held": tuple(held)}

    def expert_tp_refusal(self, t_e, t=None) -> str:
        """The line refusing an experts' TP size ``t_e`` where :attr:`expert_tp` is False (the
        experts split by the layers' TP size ``t``), one wording for estimate and search.

        >>> FRAMEWORK["deepspeed"].expert_tp_refusal((2,))[:67]
        'expert_tensor_parallel_size t_e=2 (--etp) is not a deepspeed option'
        """
        sizes = " ".join(map(str, t_e)) if isinstance(t_e, (tuple, list)) else t_e
        return (f"expert_tensor_parallel_size t_e={sizes} (--etp) is not a {self.name} option: "
                f"it splits the experts by the tensor-parallel size (t_e = t"
                + ("" if t is None else f" = {t}") + ")")

    def overlaps_by_default(self, scheme: str) -> bool:
        """Whether the data-parallel collectives overlap under ``scheme`` with nothing set.

        A framework whose launch has nothing to set (``launch_overlaps == "always"``:
        torchtitan) overlaps under any scheme, also one a :class:`memsym.job.Training` that no
        job validated carries (:func:`memsym.timing.step_settings.overlap_of` prices such records).

        >>> FRAMEWORK["torchtitan"].overlaps_by_default("distributed-optimizer")
        True
        """
        return self.launch_overlaps == "always" or scheme in self.overlap_schemes

    def launch_overlap_options(self, scheme: str) -> dict:
        """The overlap options a launch of ``scheme`` sets (as :func:`memsym.job.job` options).

        >>> FRAMEWORK["megatron"].launch_overlap_options("distributed-optimizer")
        {'overlap_grad_reduce': True, 'overlap_param_gather': True}
        >>> FRAMEWORK["deepspeed"].launch_overlap_options("zero2")
        {'overlap_grad_reduce': True, 'overlap_param_gather': False}
        >>> FRAMEWORK["torchtitan"].launch_overlap_options("fsdp")
        {}
        """
        if self.launch_overlaps == "always":
            return {}
        out = {"overlap_grad_reduce": True}
        if self.launch_overlaps == "overlap_comm":
            # overlap_comm prefetches parameters under ZeRO-3 only (ZeRO-1/2 gather the
            # updated parameters inside the step)
            out["overlap_param_gather"] = scheme == "zero3"
        elif scheme != "ddp":
            out["overlap_param_gather"] = True
        return out


#: Every framework's record, by name.
FRAMEWORK = {
    "megatron": Framework(
        name="megatron", title="Megatron-LM", schemes=SCHEMES,
        default_scheme="distributed-optimizer",
        default_scheme_source="memsym.job.DEFAULTS: Megatron-core's distributed optimizer "
                              "(the recipes' --use-distributed-optimizer)",
        attention_source="memsym.job.DEFAULTS: Megatron-core's --attention-backend auto picks "
                         "a fused or flash kernel",
        overlap_schemes=(), launch_overlaps="flags", megatron_options=True,
        torch_pipelining=False, tp_userbuffers=True, dropout_layers=True,
        recipe_defaults=True, hf_model_code=False, layer_selective_ac=False,
        tp_sequence_parallel=False, torch_loss=False, torch_output_layer=False,
        grads_set_to_none=False, fsdp_io_groups=False, dtensor_tp=False, overlap_ipg_buffers=None,
        config_suffix="txt", reader_option="--args-file", config_lacks=(),
        config_precisions=PRECISION_NAMES, config_optimizers=("adam", "adamw", "sgd"),
        reads_offload=False,
        # Megatron-LM arguments.py: --cp-comm-type default ["p2p"]; Transformer Engine runs it
        # (attn_forward_func_with_cp: "p2p", "a2a+p2p", "all_gather", "a2a")
        cp_attention=("transformer-engine", ("p2p", "all_gather", "a2a", "a2a+p2p")),
        frozen_linear_keeps_no_input=True,
        # what memsym.emit spells as Megatron-LM arguments (zero2 / fsdp: Megatron-FSDP)
        searched_schemes=("ddp", "zero2", "fsdp", "distributed-optimizer"),
        moe_combine_keeps_outputs=False, moe_glu_clamp_copy=True, expert_tp=True),
    "deepspeed": Framework(
        name="deepspeed", title="DeepSpeed", schemes=("ddp", "zero1", "zero2", "zero3"),
        default_scheme="ddp",
        default_scheme_source="deepspeed's default (zero_optimization.stage 0)",
        # transformers 5.25.0 modeling_utils.py:1856, get_correct_attn_implementation
        attention_source="transformers' default attn_implementation 'sdpa' (modeling_utils.py, "
                         "get_correct_attn_implementation): PyTorch's SDPA runs a flash or "
                         "memory-efficient kernel on 16-bit inputs",
        overlap_schemes=("zero3",), launch_overlaps="overlap_comm", megatron_options=False,
        torch_pipelining=False, tp_userbuffers=True, dropout_layers=True,
        recipe_defaults=False, hf_model_code=True, layer_selective_ac=False,
        tp_sequence_parallel=False, torch_loss=False, torch_output_layer=False,
        grads_set_to_none=False, fsdp_io_groups=False, dtensor_tp=False, overlap_ipg_buffers=2,
        config_suffix="json", reader_option="--deepspeed-config",
        config_lacks=("world_size", "seq_length"), config_precisions=("fp32", "bf16", "fp16"),
        config_optimizers=("adam", "adamw"), reads_offload=True,
        # Ulysses (runtime/sequence_parallel/ulysses_sp.py, UlyssesSPAttentionHF): the all-to-all
        # of Megatron's --cp-comm-type a2a, its only method
        cp_attention=("deepspeed-ulysses", ("a2a",)),
        searched_sizes=(("tp", (1,)), ("pp", (1,)), ("cp", (1,)), ("vpp", (1,)),
                        ("recompute", ("none", "full"))),
        searched_sizes_reason="memsym's DeepSpeed reader reads ZeRO data parallelism, "
                              "AutoEP's expert parallelism, AutoTP's autotp_size and Ulysses' "
                              "sequence_parallel_size (searched where --tp / --cp name them: "
                              "both need the training script's own setup) from a "
                              "ds_config.json; pipelines are model code (PipelineModule), and "
                              "recompute is the model's own gradient checkpointing of every "
                              "layer or none",
        named_sizes=("tp", "cp"),
        tp_whole_embedding=True, tp_gathered_logits=True, tp_without_sequence_parallel=True,
        eager_swiglu=True),
    "torchtitan": Framework(
        name="torchtitan", title="torchtitan", schemes=("fsdp", "ddp"),
        default_scheme="fsdp",
        default_scheme_source="torchtitan's default (data_parallel_shard_degree -1)",
        attention_source="torchtitan v0.2.2 models/attention.py, "
                         "ScaledDotProductAttentionWrapper: SDPA with the cuDNN, then the flash "
                         "kernel first",
        overlap_schemes=("fsdp", "ddp"), launch_overlaps="always", megatron_options=False,
        torch_pipelining=True, tp_userbuffers=False, dropout_layers=False,
        recipe_defaults=False, hf_model_code=False, layer_selective_ac=True,
        tp_sequence_parallel=True, torch_loss=True, torch_output_layer=True,
        grads_set_to_none=True, fsdp_io_groups=True, dtensor_tp=True, overlap_ipg_buffers=None,
        config_suffix="toml", reader_option="--torchtitan-config",
        config_lacks=("world_size",), config_precisions=("bf16",),
        config_optimizers=("adam", "adamw"), reads_offload=False,
        # torch's _cp_options.rotate_method default ALL_GATHER (torchtitan's
        # experimental.context_parallel_rotate_method "allgather")
        cp_attention=("torch", ("allgather", "alltoall")), expert_tp=True, eager_swiglu=True),
}
assert tuple(FRAMEWORK) == FRAMEWORKS      # the vocabulary and the table name the same three

#: The schemes of each framework that runs fewer than all of :data:`~memsym.vocabulary.SCHEMES`
#: (Megatron runs every one), as :mod:`memsym.search.space` reads them.
FRAMEWORK_SCHEMES = {name: fw.schemes for name, fw in FRAMEWORK.items()
                     if set(fw.schemes) != set(SCHEMES)}


def framework(name: str) -> Framework:
    """The record of the framework ``name`` (refused in one line when unknown).

    >>> framework("deepspeed").title
    'DeepSpeed'
    """
    return FRAMEWORK[choose("framework", name, FRAMEWORKS)]
