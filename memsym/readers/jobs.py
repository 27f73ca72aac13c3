"""Framework inputs as memsym jobs: a read Megatron-LM argument list becomes a
:class:`memsym.job.Job` with Megatron's meaning (its defaults were applied by the reader).

The mapping is one function per framework and says, in the job's notes, where memsym's model
approximates the framework's (Megatron-FSDP's strategies as the sharding schemes that keep
the same states).
"""

from __future__ import annotations

import dataclasses

from ..errors import InvalidValueError
from ..job import job
from ..job_checks import compile_changes_recompute
from ..model import Architecture, resolve_model
from ..model.torchtitan_stages import torchtitan_end_stages, torchtitan_stages_per_rank
from ..vocabulary import FP8_RECIPE_COUNTED_AS
from .deepspeed import HIDDEN_AUTO_KEYS, resolve_hidden_autos
from .deepspeed_notes import MODEL_CHECKPOINTING
from .megatron import MEGATRON_FSDP_SCHEMES
from .torchtitan import V_SCHEDULES
from .torchtitan_models import torchtitan_architecture

__all__ = ["megatron_job", "deepspeed_job", "autotp_architecture", "torchtitan_job", "torchtitan_positions",
           "MEGATRON_FSDP_SCHEMES", "DEEPSPEED_SCHEMES"]


def megatron_job(mj, model=None, **options):
    """The :class:`memsym.job.Job` of a :class:`memsym.readers.megatron.MegatronJob`.

    Parameters
    ----------
    mj : MegatronJob
        From :func:`memsym.readers.megatron.read_megatron_args`.
    model : str, optional
        A preset or config.json whose architecture the arguments' model fields override
        (a pasted command normally carries the whole model, so this is usually None).
    **options
        Job options on top (``gpu``, ``capacity``, ``convention``, allowances, ...).

    Returns
    -------
    Job
        With the reader's notes, and one per approximation made here.

    Examples
    --------
    >>> from memsym.readers.megatron import read_megatron_args
    >>> mj = read_megatron_args(["--num-layers", "2", "--hidden-size", "64",
    ...     "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
    ...     "--vocab-size", "1000", "--tokenizer-type", "NullTokenizer", "--world-size", "2",
    ...     "--micro-batch-size", "1", "--bf16"])
    >>> j = megatron_job(mj)
    >>> j.layout.d, j.training.sharding, j.training.precision
    (2, 'ddp', 'bf16')
    """

    options = dict(options)
    notes = list(mj.notes) + list(options.pop("_notes", ()))
    opts = _megatron_layout_options(mj.layout)
    _add_megatron_training(opts, mj.training, notes)
    _add_megatron_precision(opts, mj.precision, mj.training)
    _add_megatron_step(opts, mj.optimizer, notes)
    opts.update(mj.architecture if model is None else
                {k: v for k, v in mj.architecture.items() if v is not None})
    opts.update(options)
    return job(model, _notes=tuple(notes),
               _defaults=tuple(d for d in mj.defaults if d[0] not in options), **opts)


def _megatron_layout_options(lay: dict) -> dict:
    """The job options of a MegatronJob's layout: the degrees, the pipeline split and the
    data-parallel size (from --world-size, else d), refused when neither is known."""
    opts = {k: lay[k] for k in ("t", "p", "c", "e", "t_e", "v", "sequence_parallel",
                                "first_stage_layers", "last_stage_layers", "pipeline_layout",
                                "account_for_embedding_in_pipeline_split",
                                "account_for_loss_in_pipeline_split") if lay.get(k) is not None}
    if lay.get("world_size") is not None:
        opts["world_size"] = lay["world_size"]
    elif lay.get("d") is not None:
        opts["d"] = lay["d"]
    else:
        raise InvalidValueError("the data-parallel size is world/(t p c): give --world-size N "
                                "(Megatron reads WORLD_SIZE from torchrun, not from its arguments)")
    return opts


def _add_megatron_training(opts: dict, trn: dict, notes: list) -> None:
    """Add the batch, recompute, flash-attention and dropout options of a MegatronJob's
    training part to ``opts`` (a note when only one of the two dropouts is on)."""
    opts.update(seq_length=trn["seq_length"], micro_batch_size=trn["micro_batch_size"])
    if trn.get("global_batch_size") is not None:
        opts["global_batch_size"] = trn["global_batch_size"]
    rc = trn.get("recompute") or {}
    granularity = rc.get("granularity")
    opts["recompute"] = granularity or "none"
    if granularity == "full":   # --recompute-method / --recompute-num-layers (both required)
        opts["recompute_method"] = rc.get("method")
        opts["recompute_num_layers"] = rc.get("num_layers")
    if granularity == "selective":   # --recompute-modules (TransformerConfig default core_attn)
        opts["recompute_modules"] = tuple(rc.get("modules") or ("core_attn",))
    opts["flash_attention"] = bool(trn.get("flash_attention", True))
    hidden, attention = trn.get("hidden_dropout", 0), trn.get("attention_dropout", 0)
    opts["dropout"] = bool(hidden > 0 or attention > 0)
    if (hidden > 0) != (attention > 0):
        notes.append(f"dropout masks kept for both (--hidden-dropout {hidden}, --attention-dropout "
                     f"{attention}): memsym models one dropout setting")


def _add_megatron_precision(opts: dict, prec: dict, trn: dict) -> None:
    """Add the precision options of a MegatronJob (fp8, gradient and optimizer-state dtypes)
    and its activation CPU offloading to ``opts``."""
    params = prec.get("params_dtype", "fp32")
    if prec.get("fp4"):
        opts["precision"] = "fp4"
        if prec.get("fp4_param_gather"):
            opts["fp4_param_gather"] = True
    elif prec.get("fp8"):
        opts["precision"] = "fp8"
        opts["fp8_param_gather"] = bool(prec.get("fp8_param_gather"))
        if prec.get("fp8_recipe") is not None:
            opts["fp8_recipe"] = FP8_RECIPE_COUNTED_AS[prec["fp8_recipe"]]
    else:
        opts["precision"] = params
    if any(prec.get("bf16_layers", ())):   # --first-last-layers-bf16 under FP8 / FP4
        opts["bf16_layers"] = tuple(prec["bf16_layers"])
    if prec.get("grad_dtype") not in (None, "fp32"):
        opts["grad_dtype"] = prec["grad_dtype"]
    if prec.get("precision_aware_optimizer"):
        opts["precision_aware"] = True
        opts.update({k: prec[k] for k in ("main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
                     if prec.get(k, "fp32") != "fp32"})
    if trn.get("cpu_offloading_num_layers"):   # --cpu-offloading-num-layers N > 0
        opts["cpu_offloading_num_layers"] = trn["cpu_offloading_num_layers"]
    # --cuda-graph-impl and the data loader's mask (recipe_mechanisms.megatron_cuda_graph_options)
    opts.update({k: trn[k] for k in ("cuda_graph_impl", "cuda_graph_modules",
                                     "batch_attention_mask", "optimizer_cuda_graph") if k in trn})
    if trn.get("moe_dispatcher", "alltoall") != "alltoall":   # memsym.terms.dispatcher_buffers
        opts["moe_dispatcher"] = trn["moe_dispatcher"]
    if trn.get("mla_down_proj_fusion"):   # --mla-down-proj-fusion (memsym.timing.recompute)
        opts["mla_down_proj_fusion"] = True
    if trn.get("bias_activation_fusion") is False:   # eager gated unit (megatron._glu_fusion)
        opts["bias_activation_fusion"] = False
    if trn.get("fp32_residual_connection"):   # memsym.readers.megatron_numerics
        opts["fp32_residual_connection"] = True


def _add_megatron_step(opts: dict, opt: dict, notes: list) -> None:
    """Add a MegatronJob's optimizer, step overlaps and sharding scheme to ``opts`` (a note
    when Megatron-FSDP's strategy is counted as a memsym sharding scheme)."""
    opts["optimizer"] = opt.get("optimizer", "adam")
    # Muon's --muon-tp-mode, --muon-num-ns-steps, --muon-nesterov (megatron_muon; Muon only)
    opts.update({k: opt[k] for k in ("muon_tp_mode", "muon_num_ns_steps", "muon_nesterov")
                 if k in opt})
    # the step's overlaps, as the command sets them (Megatron's store_true flags: off unless given)
    opts["overlap_grad_reduce"] = bool(opt.get("overlap_grad_reduce"))
    opts["overlap_param_gather"] = bool(opt.get("overlap_param_gather"))
    opts["tp_comm_overlap"] = bool(opt.get("tp_comm_overlap"))
    if opt.get("tp_comm_overlap_cfg") is not None:   # --tp-comm-overlap-cfg FILE, read
        opts["tp_comm_overlap_cfg"] = opt["tp_comm_overlap_cfg"]
    opts["overlap_moe_expert_parallel_comm"] = bool(opt.get("overlap_moe_expert_parallel_comm"))
    opts["overlap_p2p_comm"] = bool(opt.get("overlap_p2p_comm", True))
    opts["defer_embedding_wgrad_compute"] = bool(opt.get("defer_embedding_wgrad_compute"))
    opts["wgrad_deferral_limit"] = int(opt.get("wgrad_deferral_limit") or 0)
    if opt.get("cp_comm_type"):      # one type, or one per layer (memsym.job.canonical)
        opts["cp_comm_type"] = tuple(opt["cp_comm_type"])
    if opt.get("use_megatron_fsdp"):
        strategy = opt.get("data_parallel_sharding_strategy") or "optim_grads_params"
        opts["sharding"] = MEGATRON_FSDP_SCHEMES[strategy]
        opts["megatron_fsdp"] = strategy
        opts["fsdp_double_buffer"] = bool(opt.get("fsdp_double_buffer"))
        # Megatron-FSDP reads no grad_reduce_in_fp32: its main grads are the parameters' dtype
        # unless --megatron-fsdp-main-grads-dtype (megatron_fsdp_options)
        opts.pop("grad_dtype", None)
        if opt.get("grad_dtype"):
            opts["grad_dtype"] = opt["grad_dtype"]
        notes.append(f"Megatron-FSDP {strategy}: its own buffers, sharded as sharding "
                     f"{opts['sharding']} shards them")
    elif opt.get("use_torch_fsdp2"):
        opts["sharding"] = "fsdp"
    else:
        # Megatron-LM: plain DDP unless --use-distributed-optimizer (arguments.py store_true)
        opts["sharding"] = "distributed-optimizer" if opt.get("use_distributed_optimizer") else "ddp"


#: DeepSpeed's zero_optimization.stage -> memsym's sharding scheme (stage 0: plain data parallel).
DEEPSPEED_SCHEMES = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}


def deepspeed_job(cfg: dict, model, **options):
    """The :class:`memsym.job.Job` of a read DeepSpeed config (:func:`read_deepspeed_config`)
    for ``model`` (a preset, config.json or Architecture: DeepSpeed's JSON has no model).

    ZeRO stage -> sharding, ``offload_optimizer``/``offload_param`` -> offload, bf16/fp16 ->
    precision, ``optimizer.type`` -> optimizer, AutoEP's ``autoep_size`` -> e, micro-batch and global batch as DeepSpeed's
    batch rule resolved them, ``reduce_bucket_size`` / ``stage3_prefetch_bucket_size`` (and
    no IPG buffer without ``contiguous_gradients``: ``stage_1_and_2.py``, ``setup_buckets``)
    -> the job's ``zero_buckets``, AutoTP's ``autotp_size`` -> t (without sequence
    parallelism: :mod:`memsym.readers.deepspeed_autotp`; the model's vocabulary unpadded,
    :func:`autotp_architecture`), Ulysses' ``sequence_parallel_size`` -> c with cp_comm_type
    a2a (:mod:`memsym.readers.deepspeed_ulysses`); DeepSpeed keeps no pipeline split of its own here
    (p = 1).  ZeRO sizes still ``"auto"`` are
    filled from the model's hidden size as the Hugging Face Trainer fills them
    (:func:`memsym.readers.deepspeed.resolve_hidden_autos`); every value filled is reported
    among the job's defaults, with its source.

    Examples
    --------
    >>> j = deepspeed_job({"layout": {"d": 8}, "training": {"micro_batch_size": 2,
    ...     "global_batch_size": 64}, "precision": {"params_dtype": "bf16"},
    ...     "sharding": {"zero_stage": 3, "offload_optimizer": "cpu", "offload_param": "none"},
    ...     "notes": ()}, "llama2-7b", seq_length=4096)
    >>> j.training.sharding, j.training.offload, j.layout.d, j.m
    ('zero3', 'optimizer', 8, 4)
    """

    shard = dict(cfg["sharding"])
    defaults = list(cfg.get("defaults", ()))
    if any(shard.get(key) == "auto" for key in HIDDEN_AUTO_KEYS):
        resolve_hidden_autos(shard, resolve_model(model).hidden_size, defaults)
    opts = {"d": cfg["layout"]["d"], "micro_batch_size": cfg["training"]["micro_batch_size"],
            "global_batch_size": cfg["training"]["global_batch_size"],
            "precision": cfg["precision"].get("params_dtype", "fp32"),
            "sharding": DEEPSPEED_SCHEMES[shard["zero_stage"]]}
    if cfg.get("optimizer") is not None:
        opts["optimizer"] = cfg["optimizer"]
    if cfg["layout"].get("e") is not None:
        opts["e"] = cfg["layout"]["e"]          # AutoEP's autoep_size
    if cfg["layout"].get("t", 1) > 1:
        opts["t"] = cfg["layout"]["t"]          # AutoTP's autotp_size
        model = autotp_architecture(model, opts["t"])
    if cfg["layout"].get("c", 1) > 1:
        # Ulysses' sequence_parallel_size: context parallelism by all-to-all, DeepSpeed's one
        # method (FRAMEWORK["deepspeed"].cp_attention; memsym.readers.deepspeed_ulysses)
        opts["c"] = cfg["layout"]["c"]
    off_p, off_o = shard.get("offload_param", "none"), shard.get("offload_optimizer", "none")
    if off_p not in (None, "none"):
        opts["offload"] = "optimizer+params"
    elif off_o not in (None, "none"):
        opts["offload"] = "optimizer"
    opts["framework"] = "deepspeed"
    if shard.get("overlap_comm") is not None:
        # zero_optimization.overlap_comm: the gradient reduction runs beside the backward, and
        # under ZeRO-3 the parameter all-gather is prefetched beside the forward (ZeRO-1/2
        # all-gather the updated parameters inside the optimizer step)
        opts["overlap_grad_reduce"] = bool(shard["overlap_comm"])
        opts["overlap_param_gather"] = bool(shard["overlap_comm"]) and shard["zero_stage"] == 3
    buckets = tuple((key, shard[key]) for key in ("reduce_bucket_size",
                                                  "stage3_prefetch_bucket_size")
                    if isinstance(shard.get(key), int))
    if shard.get("contiguous_gradients") is False:
        # setup_buckets allocates the IPG buffers only with contiguous_gradients (with it: one,
        # two under overlap_comm, memsym.training's default from overlap_grad_reduce)
        buckets += (("ipg_buffers", 0),)
    if buckets:
        opts["zero_buckets"] = buckets
    opts.update(options)
    notes = tuple(cfg.get("notes", ()))
    if opts.get("recompute") == "full":   # given beside the config: the model's checkpointing
        notes += (MODEL_CHECKPOINTING,)
    return job(model, _notes=notes,
               _defaults=tuple(d for d in defaults if d[0] not in options), **opts)


def autotp_architecture(model, t: int) -> Architecture:
    """The architecture as DeepSpeed AutoTP splits it over ``t`` ranks: the transformers
    model's own vocabulary, unpadded (``make_vocab_size_divisible_by = 1``: transformers
    builds ``nn.Embedding(config.vocab_size, ...)``), whose untied output layer AutoTP splits
    by rows (``colwise_gather_output``).  AutoTP allows uneven shards (``module_inject/
    tp_shard.py:47-93``; ``docs/_tutorials/autotp-training.md``, "Limitations"), memsym counts
    even ones: an untied vocabulary that t does not divide is refused in one line (the heads
    and the MLP width are checked by :func:`memsym.model.check_layout`).

    Parameters
    ----------
    model : str, Architecture
        A preset, a config.json or an Architecture.
    t : int
        AutoTP's ``autotp_size`` [GPUs].

    Examples
    --------
    >>> autotp_architecture("llama2-7b", 2).make_vocab_size_divisible_by
    1
    """
    arch = model if isinstance(model, Architecture) else resolve_model(model)
    if arch.untie_embeddings_and_output_weights and arch.vocab_size % t:
        raise InvalidValueError(f"tensor_parallel.autotp_size {t} does not divide the vocabulary "
                                f"({arch.vocab_size}): AutoTP splits the output layer unevenly, "
                                "memsym counts even shards")
    return dataclasses.replace(arch, make_vocab_size_divisible_by=1)


def torchtitan_positions(model, seq_len: int):
    """The architecture as torchtitan builds it for ``seq_len``: a RoPE model's table covers the
    training sequence (``update_from_config`` sets ``max_seq_len = training.seq_len``, with only
    a warning above the original maximum), so Megatron's ``max_position_embeddings >=
    seq_length`` assertion does not apply.  Learned absolute positions are left as they are.

    Examples
    --------
    >>> torchtitan_positions("llama3-8b", 32768).max_position_embeddings
    32768
    """


    arch = model if isinstance(model, Architecture) else resolve_model(model)
    if arch.position_embedding_type != "rope":
        return arch
    plain = Architecture(**{f.name: getattr(arch, f.name) for f in dataclasses.fields(Architecture)})
    return dataclasses.replace(plain, max_position_embeddings=seq_len)


def torchtitan_job(cfg: dict, model=None, **options):
    """The :class:`memsym.job.Job` of a read torchtitan TOML (:func:`read_torchtitan_toml`).

    The model is ``model`` or the config's model name and flavor as torchtitan builds it
    (:func:`memsym.readers.torchtitan_models.torchtitan_architecture`: ``llama3`` ``405B``,
    ``deepseek_v3`` ``671B`` without a multi-token-prediction layer).  Data parallelism: replicate x shard GPUs, the
    states sharded by FSDP2 when the shard degree is > 1 (HSDP's replicas keep their own
    shard: counted over the whole data-parallel group, said in the notes); activation
    checkpointing ``full`` -> full recompute, ``selective`` with ``selective_ac_option = "op"``
    -> torchtitan's per-op SAC (``recompute="selective-op"``), with a layer frequency n ->
    every n-th block of a rank fully checkpointed (``recompute_method="every"``: floor(b/n)
    of a rank's b blocks); a compiled loss (``[compile]``) -> ``compiled_loss``, compiled
    blocks under per-op SAC -> ``compiled_model``.

    Examples
    --------
    >>> cfg = {"layout": {"dp_replicate": 1, "dp_shard": 8, "t": 1, "p": 1, "c": 1, "e": 1,
    ...        "d": 8, "world_size": 8}, "training": {"seq_len": 8192, "local_batch_size": 1,
    ...        "global_batch_size": 8, "ac_mode": "full"}, "precision": {"float8": False},
    ...        "model": {"name": "llama3", "flavor": "8B"}, "notes": ()}
    >>> j = torchtitan_job(cfg)
    >>> j.model.name, j.training.sharding, j.training.recompute
    ('torchtitan llama3 8B', 'fsdp', 'full')
    """

    notes = list(cfg.get("notes", ()))
    lay, trn = cfg["layout"], cfg["training"]
    if model is None:
        model = _torchtitan_named_model(cfg)
    arch = torchtitan_positions(model if isinstance(model, Architecture)
                                else resolve_model(model), trn["seq_len"])
    ac = trn.get("ac_mode", "none")
    if ac == "memory_budget":   # torch.compile's min-cut AC under a budget: no fixed set kept
        raise InvalidValueError("torchtitan activation_checkpoint memory_budget (torch.compile's "
                                "memory-budget AC) is not modelled: memsym reads none, full or "
                                "selective")
    per_op = ac == "selective" and trn.get("selective_ac_option") == "op"
    local, pipe, ranks = trn["local_batch_size"], {}, [arch.num_layers]
    if lay["p"] > 1:
        pipe, ranks = _torchtitan_pipeline(lay, arch, local, notes)
    opts = {"t": lay["t"], "p": lay["p"], "c": lay["c"], "e": lay["e"], "d": lay["d"],
            # the experts' TP where it is not t: expert_tensor_parallel_degree 1 under EP
            **({"t_e": lay["t_e"]} if lay.get("t_e", lay["t"]) != lay["t"] else {}),
            "seq_length": trn["seq_len"], "micro_batch_size": local,
            "global_batch_size": trn.get("global_batch_size") if not pipe else None,
            "framework": "torchtitan", **pipe,
            "recompute": "selective-op" if per_op else
            {"full": "full", "selective": "selective"}.get(ac, "none"),
            "compiled_loss": bool(trn.get("compiled_loss", False)),
            "loss_parallel": bool(trn.get("loss_parallel", True)),
            "sharding": "fsdp" if lay.get("dp_shard", 1) > 1 else "ddp",
            "precision": "bf16", "sequence_parallel": lay["t"] > 1}
    _refuse_unmodelled_torchtitan(cfg)
    if cfg["precision"].get("mixed_precision_param") == "float32":
        # FSDP2 MixedPrecisionPolicy(param_dtype=float32): the forward and backward in fp32
        opts["precision"] = "fp32"
    if cfg["precision"].get("float8"):
        # torchao's Float8Linear casts weights and activations per GEMM; FSDP2 keeps the
        # parameters in their own dtype (torchtitan components/quantization/float8.py)
        notes.append("float8 (torchao Float8Linear): parameters counted in bf16 compute and "
                     "fp32 states as FSDP2 keeps them; the per-GEMM fp8 casts are transient")
    _add_torchtitan_recompute(opts, trn, arch, ac, per_op, ranks, notes)
    # compiled blocks change only what per-op SAC keeps (memsym.terms.op_sac)
    opts["compiled_model"] = (bool(trn.get("compiled_model"))
                             and compile_changes_recompute(opts["recompute"]))
    if lay.get("dp_replicate", 1) > 1 and lay.get("dp_shard", 1) > 1:
        notes.append("HSDP: the states are counted as sharded over the whole data-parallel "
                     "group (torchtitan shards them over data_parallel_shard_degree only)")
    opts = {k: v for k, v in opts.items() if v is not None}
    opts.update(options)
    return job(arch, _notes=tuple(notes), **opts)


def _torchtitan_named_model(cfg: dict) -> Architecture:
    """The architecture torchtitan's own model class builds for the config's [model] name and
    flavor, refused when the config names none."""
    meta = cfg.get("model") or {}
    if not meta.get("name") or not meta.get("flavor"):
        raise InvalidValueError("the torchtitan config names no model (TOML [model] name/"
                                "flavor, Python model_registry): give the MODEL (a preset "
                                "or a Hugging Face config.json)")
    # the architecture torchtitan's own model class builds for this flavor
    # (torchtitan_models.TORCHTITAN_FLAVORS; an unknown one refused in one line)
    return torchtitan_architecture(meta["name"], meta["flavor"], int(meta.get("mtp_layers") or 0))


def _torchtitan_pipeline(lay: dict, arch: Architecture, local: int, notes: list):
    """The pipeline options of a torchtitan layout with p > 1 and the layers per rank
    [layers] of torchtitan's split: ``(options, ranks)``, with a note for each schedule or split
    memsym approximates (the V schedules' and DualPipeV's conditions refused as torch does)."""
    # pipeline_parallel.py: local_batch_size / pipeline_parallel_microbatch_size
    # micro-batches; the looped schedules put 2 stages on each rank by default
    mbs = lay.get("pipeline_parallel_microbatch_size", 1)
    schedule = lay.get("pipeline_parallel_schedule", "1F1B")
    weights = lay.get("pipeline_parallel_stage_less_layers", (1, 1))
    # pipeline_llm: 1 stage per rank for the single-stage schedules, 2 for the others,
    # or what pipeline_parallel_layers_per_stage makes
    spr = torchtitan_stages_per_rank(arch.num_layers, lay["p"],
                                     lay.get("pipeline_parallel_layers_per_stage"),
                                     schedule not in ("1F1B", "GPipe"), *weights)
    if schedule in V_SCHEDULES and spr != 2:
        raise InvalidValueError(f"torch's {schedule} needs exactly 2 stages per rank, got "
                                f"{spr} (pipeline_parallel_layers_per_stage)")
    if schedule == "DualPipeV" and local // mbs < 2 * lay["p"]:
        raise InvalidValueError(f"torch's DualPipeV needs at least as many micro-batches as "
                                f"stages ({2 * lay['p']}), got {local // mbs}")
    pipe = {"micro_batch_size": mbs, "num_microbatches": local // mbs,
            # LoopedBFS is GPipe looped over the rank's stages (breadth-first)
            "schedule": "gpipe" if schedule in ("GPipe", "LoopedBFS") else "1f1b",
            "v": None if spr == 1 else spr}
    if schedule in V_SCHEDULES:
        # stage_index_to_group_rank "v": stages r and 2p-1-r on rank r
        pipe["stage_placement"] = "v"
    if schedule in V_SCHEDULES:
        notes.append(f"pipeline schedule {schedule}: its V places stages r and 2p-1-r on "
                     "rank r, so rank 0 holds the embedding, the output layer and the "
                     "loss; rank r holds min(2p, m+1+r, 2m) chunk passes (one more on the "
                     "last rank), as torch's schedule tables; its bubble counted as "
                     "interleaved 1F1B's with 2 stages per rank")
    elif schedule not in ("1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS"):
        notes.append(f"pipeline schedule {schedule}: counted as interleaved 1F1B with {spr} "
                     "stages per rank (its warm-up and bubble: its first rank holds at "
                     "least the chunk passes any rank of torch's zero-bubble tables holds)")
    # the split torchtitan generates for this schedule and these end-stage weights
    # (memsym.job.framework_layout generates the default one for API jobs)
    first, last, ranks = torchtitan_end_stages(
        arch.num_layers, lay["p"], spr, *weights,
        style="v" if schedule in V_SCHEDULES else "loop")
    if first is not None:
        pipe.update(first_stage_layers=first, last_stage_layers=last)
        notes.append(f"torchtitan's pipeline split: {ranks} layers per rank")
    return pipe, ranks


def _refuse_unmodelled_torchtitan(cfg: dict) -> None:
    """Refuse the torchtitan settings memsym does not model: TP without sequence parallelism,
    training.dtype bfloat16 and FSDP2's CPU offload."""
    lay, trn = cfg["layout"], cfg["training"]
    if lay["t"] > 1 and not lay.get("sequence_parallel", True):
        # the Python config's enable_sequence_parallel = False (v0.2: always on); memsym.job
        # counts torchtitan's TP with its SequenceParallel norms and sharded block outputs
        raise InvalidValueError("torchtitan enable_sequence_parallel = False (tensor parallelism "
                                "without sequence parallelism) is not modelled for torchtitan")
    if cfg["precision"].get("dtype") == "bfloat16":
        raise InvalidValueError("torchtitan training.dtype = bfloat16 (parameters, gradients and "
                                "optimizer states all in bf16, no fp32 copy) is not modelled: "
                                "memsym reads float32 with mixed_precision_param")
    if trn.get("enable_cpu_offload"):
        raise InvalidValueError("torchtitan training.enable_cpu_offload (FSDP2 CPUOffloadPolicy: "
                                "parameters, gradients and optimizer states on the host) is not "
                                "modelled")


def _add_torchtitan_recompute(opts: dict, trn: dict, arch: Architecture, ac: str, per_op: bool,
                              ranks, notes: list) -> None:
    """Set ``opts``' recompute for torchtitan's per-op SAC (selective recompute where memsym
    does not price it) and for a layer frequency (every n-th block of a rank fully
    checkpointed), with a note for each."""
    if per_op:
        if arch.num_experts or arch.multi_latent_attention or not arch.swiglu:
            # memsym prices per-op SAC for dense gated-MLP blocks only
            opts["recompute"] = "selective"
            notes.append("per-op selective AC is modelled for dense gated-MLP layers: counted "
                         "as Korthikanti's selective recompute for this model")
    option = str(trn.get("selective_ac_option", ""))
    if ac == "selective" and option.isdigit():
        # distributed/activation_checkpoint.py _apply_layer_sac: one counter per process runs
        # over the blocks of a rank's stages, and block k (from 1) is wrapped in full AC when
        # k % ac_freq == 0 (0 and 1: every block): floor(n/ac_freq) of a rank's n blocks, the
        # others keep their activations (recompute_method "every")
        freq = int(option)
        opts["recompute"] = "full"
        if freq > 1:
            opts.update(recompute_method="every", recompute_num_layers=freq)
            wrapped = sorted({(n, n // freq) for n in ranks})
            notes.append(f"activation checkpointing every {freq} blocks: "
                         + ", ".join(f"{w} of {n}" for n, w in wrapped)
                         + " blocks of a rank fully checkpointed, the others keep their "
                         "activations")
