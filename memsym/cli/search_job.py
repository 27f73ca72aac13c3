"""``memsym search`` of a whole job (issue 32): which layout to launch for this job on N GPUs.

A job is what ``memsym estimate`` reads: a launch script (``--launch-script``), an argument
file (``--args-file``), a pasted Megatron-LM command, a Megatron-Bridge recipe with its
overrides (``--bridge-recipe``), a DeepSpeed config or a torchtitan config beside a MODEL, or
a MODEL (a preset or a Hugging Face config.json) with memsym's options.  The command line is
split once (:func:`memsym.cli.search_words.prepare_search`): the search's own words (the searched
knobs as pins, the GPU count, the machine and the output) stay the search's; every other
word is the job's, read by ``estimate``'s parser and readers (:mod:`memsym.cli.reading`,
:func:`memsym.cli.training_options.job_from_args`: one reading, the same conflicts refused).

The job's settings that the search does not vary are held fixed over every layout
(:func:`memsym.search.space.from_job`), its overlaps and recompute and offload choice
included; its own layout (t, p, c, d, e, v, micro-batch, sharding, sequence parallelism) is
not pinned: the search looks for the best one, on ``--gpus`` GPUs or, without it, on the
job's world size.
"""

from __future__ import annotations

import shlex
from argparse import Namespace
from dataclasses import dataclass, field, replace

from ..text import looks_like_option, option_values, printable
from .report_text import scheme_words

__all__ = ["SearchJob", "search_job", "job_report", "job_lines", "relaunch",
           "read_back_words", "writes_held", "bridge_overrides", "bridge_relaunch",
           "placement_note", "PLACEMENT_DESTS"]

#: The options of a job's config or recipe, which ``estimate``'s parser reads itself (a
#: launch script and an argument file are read as their words, before it).
_CONFIGS = ("--bridge-recipe", "--recipe", "--deepspeed-config", "--torchtitan-config")

#: How a job places its layers on the pipeline stages itself (Megatron-LM's destinations;
#: Megatron-Bridge's ``model.`` fields of the same names): a layout string, or the embedding /
#: loss counted as a layer in the split (``--account-for-*``, arguments.py at d98e8a64dd).  The
#: search prices the even split or the first/last stage sizes, so an emitted layout writes
#: them off, with a note naming them (:func:`placement_note`).
PLACEMENT_DESTS = ("pipeline_model_parallel_layout", "account_for_embedding_in_pipeline_split",
                   "account_for_loss_in_pipeline_split")

#: The job's settings an emitted Megatron-LM layout spells itself (Megatron-LM's argument
#: destinations, :data:`memsym.readers.megatron_arguments.TABLE`): a job's own words for them
#: are replaced by the layout's when it is written out as the job's whole argument list.
_LAYOUT_DESTS = frozenset((
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "expert_model_parallel_size", "expert_tensor_parallel_size",
    "num_virtual_stages_per_pipeline_rank", "num_layers_per_virtual_pipeline_stage",
    "virtual_pipeline_model_parallel_size", "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers", "sequence_parallel", "tp_comm_overlap",
    "tp_comm_overlap_cfg", "world_size", "seq_length", "micro_batch_size", "global_batch_size",
    "bf16", "fp16", "fp8", "fp8_recipe", "fp4", "fp4_recipe", "optimizer",
    "use_distributed_optimizer", "use_megatron_fsdp", "data_parallel_sharding_strategy",
    "ckpt_format", "use_torch_fsdp2", "fsdp_double_buffer", "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend", "recompute_granularity", "recompute_method",
    "recompute_num_layers", "hidden_dropout", "attention_dropout", "attention_backend",
    "use_flash_attn", "overlap_grad_reduce", "overlap_param_gather", *PLACEMENT_DESTS))


@dataclass
class SearchJob:
    """A job read for a search (:func:`search_job`).

    Attributes
    ----------
    job : memsym.job.Job
        The job as ``estimate`` reads it.
    reading : argparse.Namespace
        ``estimate``'s parsed options of the job's words (``job_words``: their sorting).
    words : memsym.cli.search_words.SearchWords
    options : dict
        :func:`memsym.search.search` keywords: the search's own (pins, capacity, cluster),
        the job's overlaps, recompute and offload unless the command line lists them.
    gpus : int
        The GPU count searched [GPUs].
    gpus_from : str
        Where it comes from (``--gpus`` or the job's world size).
    choices : dict
        The job's recompute and offload choices held (those the command line lists none of).
    batch_auto : bool
        Whether the job's micro-batch is the DeepSpeed config's ``"auto"`` (searched; its
        global batch held, :func:`_searched_deepspeed`).
    """

    job: object
    reading: object
    words: object
    options: dict
    gpus: int
    gpus_from: str
    choices: dict = field(default_factory=dict)
    batch_auto: bool = False


def read_job(words, gpus=None, gpu=None):
    """``(Job, estimate's namespace, global batch or None)`` of the job's words, read exactly
    as ``memsym estimate`` reads them (its parser and :func:`memsym.cli.reading.prepare_argv`,
    done by the caller: ``words.reading``; its job builders here).  A DeepSpeed config whose
    micro-batch is ``"auto"`` is read with its batch searched
    (:func:`_searched_deepspeed`): the global batch it holds is the third item.  ``gpu``: the
    search's GPU, the job's where it names none (what a job checks on the GPU's arch)."""
    from .framework_jobs import framework_job_from_args, framework_read_as
    from .training_options import job_from_args, wants_training

    from ..errors import InvalidValueError

    est = words.reading
    if not wants_training(est):
        raise InvalidValueError("search needs a model: a MODEL, or a job that names one")
    if getattr(est, "accelerate_fsdp", None) or getattr(est, "fsdp_keep_gathered", None):
        # its groups, held gradients and collectives are the job's own (memsym.terms.
        # accelerate_fsdp); the search's rows price no such scheme: refused in its own words
        raise InvalidValueError("search: Accelerate's FSDP2 (a Trainer launch's --fsdp, "
                                "--accelerate-fsdp) is not a searched setting; estimate the "
                                "job's layouts one by one instead")
    if gpu is not None and getattr(est, "gpu", None) is None:
        est.gpu = gpu
    if gpus is not None and getattr(est, "world_size", None) is None \
            and getattr(est, "deepspeed_config", None) is None:
        # --gpus is the world size of a job that gives none (command_rows: "the job's world
        # size when not given"), as for a DeepSpeed config (_searched_deepspeed)
        _read_on(est, gpus)
    framework, batch = _searched_deepspeed(est, gpus)
    if framework is None:
        framework = framework_job_from_args(est)
    if framework is not None:        # how estimate says it read the config or recipe
        said = getattr(est, "reading", None) or {"read_as": None, "ignored": []}
        est.reading = said            # framework_read_as reads a Bridge recipe's from it
        est.reading = {"ignored": list(said["ignored"]), "read_as": framework_read_as(est)}
        return framework, est, batch
    return job_from_args(est), est, None


def _read_on(est, gpus: int) -> None:
    """Read a job that gives no world size on the searched ``gpus``: memsym's own
    ``--world-size``, and a pasted Megatron-LM command's (whose reader needs it) unless its
    launcher's words fix one."""
    from ..readers.megatron_arguments import MegatronArguments, parse_megatron_argv
    from .training_options import megatron_mode

    if megatron_mode(est):
        raw, _, spelled = parse_megatron_argv(est.job_words.megatron)
        if MegatronArguments(raw, spelled).world_size() is not None:
            return
        est.job_words.megatron = [*est.job_words.megatron, "--world-size", str(gpus)]
    est.world_size = gpus


def _searched_deepspeed(est, gpus):
    """``(Job, global batch)`` of a DeepSpeed config whose micro-batch the search varies, else
    ``(None, None)``.

    Under the Hugging Face Trainer a ``"auto"`` ``train_micro_batch_size_per_gpu`` is the
    ``--per_device_train_batch_size`` the user picks (transformers' ``HfTrainerDeepSpeedConfig.
    trainer_config_process``), so the search varies it like any job's micro-batch and holds the
    global batch (the config's ``train_batch_size`` or ``--global-batch-size``:
    :func:`memsym.readers.deepspeed.searched_deepspeed_config`); the config is read by
    ``estimate``'s path with a one-sequence stand-in batch on the job's GPUs."""
    from ..readers.deepspeed import searched_deepspeed_config
    from .framework_jobs import framework_job_from_args

    if getattr(est, "deepspeed_config", None) is None:
        return None, None
    world = est.world_size if est.world_size is not None else gpus
    from .hf_launch import config_of

    got = searched_deepspeed_config(config_of(est, est.deepspeed_config), world,
                                    est.global_batch_size)
    if got is None:
        # a numeric micro-batch: the config read as estimate reads it, on the searched GPUs
        # (--gpus) where no --world-size is given, as the "auto" path above
        est.world_size = world
        return None, None
    if est.num_microbatches is not None:
        from ..errors import InvalidValueError

        raise InvalidValueError("--num-microbatches: the search sets the gradient accumulation "
                                "of each layout (global batch / (micro-batch x GPUs)); give "
                                "--global-batch-size")
    reading = Namespace(**vars(est))
    reading.deepspeed_config, reading.world_size, reading.global_batch_size = got[0], world, None
    job = framework_job_from_args(reading)
    est.reading = reading.reading
    est.micro_batch_auto = got[2]
    return job, got[1]


def _job_recompute(memory) -> str:
    """The search's recompute choice of the job: Megatron's full recompute of every layer
    (``--recompute-method uniform --recompute-num-layers 1``, how ``--emit megatron``
    spells full) is the search's ``full``; block-N and every-N as they are."""
    from ..search.job_fields import recompute_choice

    if memory.recompute == "full" and memory.recompute_method == "uniform" \
            and memory.recompute_num_layers in (None, 1):
        return "full"
    return recompute_choice(memory)


def search_job(args, opts: dict):
    """The :class:`SearchJob` of a search whose command line holds a job, else None.

    ``opts``: the search's options (:func:`memsym.cli.search.search_options`), of which only
    the search's own are kept (the pins, capacity and margin, the cluster); the job's settings
    come from the job (:func:`memsym.search.space.from_job`), with its own overlaps, and its
    recompute and offload where the command line lists none."""
    from ..search.space import OVERLAP_FIELDS

    words = getattr(args, "job_words", None)
    if getattr(words, "reading", None) is None:
        return None
    job, est, batch = read_job(words, args.gpus, getattr(args, "gpu", None))
    args.framework = job.training.framework       # --emit must agree with the job's
    args.model = est.model                         # the MODEL the job names, if any
    tr = job.training
    keep = {"capacity", "gpus_per_node", "efficiency", "tp", "pp", "cp", "ep", "etp", "vpp",
            "sequence_parallel", "first_stage_layers", "last_stage_layers", "uneven",
            "micro_batch_sizes", "recompute", "offload"}
    opts = {k: v for k, v in opts.items() if k in keep and v is not None}
    choices = {k: v for k, v in (("recompute", _job_recompute(tr.memory)),
                                 ("offload", tr.states.offload)) if k not in opts}
    opts.update({k: [v] for k, v in choices.items()})
    if getattr(est, "deepspeed_config", None) is not None:
        # a DeepSpeed config's job runs ZeRO data parallelism: deepspeed.initialize
        # (deepspeed/__init__.py) builds the PipelineEngine only for a PipelineModule, which
        # the HF Trainer / Accelerate ("auto" batch) never pass; its TP is AutoTP's
        # autotp_size (the job's t) and its CP Ulysses' sequence_parallel_size (the job's c),
        # both needing the script's own setup: each held at the job's unless the command line
        # pins one
        held = {"tp": job.layout.t, "cp": job.layout.c}
        for key in ("tp", "pp", "cp", "vpp"):
            opts.setdefault(key, [held.get(key, 1)])
    if args.sharding is not None:     # else the framework's schemes (from_job: the job's)
        opts["sharding"] = args.sharding
    elif choices.get("offload") == "optimizer+params" and tr.states.megatron_fsdp is None:
        # parameters offload only where they are sharded (memsym.terms.model_state; DeepSpeed's
        # offload_param is ZeRO-3's): the job's own scheme, not the framework's others
        opts["sharding"] = [tr.states.sharding]
    elif tr.states.precision_aware and tr.states.megatron_fsdp is None:
        # the precision-aware optimizer is the distributed optimizer's (memsym.terms.widths,
        # Megatron's --use-precision-aware-optimizer): no DDP or ZeRO rows beside it
        opts["sharding"] = ["distributed-optimizer"]
    opts["overlaps"] = {k: tr.value(k) for k in OVERLAP_FIELDS}
    if batch is not None:    # a searched DeepSpeed batch: its global batch, not the stand-in's
        opts["global_batch_size"] = batch
    # --gpus asks the question (the job's own world size, its --world-size included, is
    # how the job was read; the search is on --gpus), else the job's world size
    gpus, whence = (args.gpus, "--gpus") if args.gpus is not None else \
        (job.layout.world_size, "the job's world size")
    return SearchJob(job, est, words, opts, gpus, whence, choices,
                     bool(getattr(est, "micro_batch_auto", False)))


def _source(sj: SearchJob) -> str:
    """Where the job was read from: its files or recipe, its MODEL, pasted arguments."""
    est = sj.reading
    parts = list(sj.words.sources)
    launch = getattr(est.job_words, "hf_trainer", None)
    if est.model is not None:
        parts.insert(0, f"MODEL {est.model}")
    if launch is not None:
        parts.insert(0, f"the Hugging Face Trainer launch {launch.script[:60]}")
    if est.job_words is not None and est.job_words.megatron and not parts:
        parts.append("pasted Megatron-LM arguments")
    return printable(", ".join(parts) or "memsym's options", 300)


def held_settings(space) -> dict:
    """The job's settings held fixed over every searched layout, as the space holds them."""
    out = {"seq_length": space.seq_length, "global_batch_size": space.global_batch_size,
           "precision": space.precision, "fp8_recipe": space.fp8_recipe,
           "optimizer": space.optimizer, "framework": space.framework,
           "convention": space.convention, "flash_attention": space.flash_attention,
           "dropout": bool(space.dropout), "schedule": space.schedule,
           "finetune": space.finetune, "moe_dispatcher": space.moe_dispatcher,
           "tp_comm_overlap": space.tp_comm_overlap,
           "fsdp_double_buffer": space.fsdp_double_buffer,
           "allowances": {k: v if isinstance(v, (int, float, str)) else str(v)
                          for k, v in space.allowances}}
    out.update({k: v for k, v in (space.overlaps or ())})
    out.update({k: v if isinstance(v, (bool, int, float, str)) else str(v)
                for k, v in space.held})
    return out


def job_report(sj: SearchJob, res) -> dict:
    """The ``job`` entry of a search's JSON rows: where the job was read from, what it holds
    fixed, its own layout (not pinned), the GPU count and where it comes from."""
    from .hf_launch import hf_reading

    j, est = sj.job, sj.reading
    lay, tr = j.layout, j.training
    hf = hf_reading(est, j)        # a Hugging Face Trainer launch: read as estimate reads it
    rep = {
        "source": _source(sj),
        "read_as": est.reading.get("read_as") or "memsym's options over the MODEL's recipe",
        "model": printable(j.model.name),
        "held": {**held_settings(res.space), **sj.choices},
        "job_layout": {"tp": lay.t, "pp": lay.p, "cp": lay.c, "dp": lay.d, "ep": lay.e,
                       "etp": lay.expert_tp, "vpp": lay.v, "micro_batch_size": "auto" if sj.batch_auto
                       else tr.batch.micro_batch_size,
                       "sharding": tr.states.sharding,
                       "sequence_parallel": bool(lay.sequence_parallel),
                       "world_size": lay.world_size},
        "searched": ["tp", "pp", "cp", "dp", "ep", "etp", "vpp", "micro_batch_size", "sharding",
                     "sequence_parallel"] + [k for k in ("recompute", "offload")
                                             if k not in sj.choices],
        "gpus": res.gpus, "gpus_from": sj.gpus_from,
        "ignored": [printable(x) for x in est.reading.get("ignored", [])],
        "notes": [printable(n, 300) for n in j.notes],
    }
    if hf is not None:
        rep.update(read_as=hf["read_as"], ignored=[printable(x) for x in hf["ignored"]],
                   notes=list(dict.fromkeys([printable(n, 300) for n in hf["notes"]]
                                            + rep["notes"])), defaults=hf["defaults"])
    return rep


def job_lines(sj: SearchJob, res) -> list:
    """The text lines that say where the job came from and what it holds fixed."""
    from .hf_launch import reading_lines

    rep = job_report(sj, res)
    held = rep["held"]
    shown = ", ".join(f"{k} {v}" for k, v in held.items()
                      if k != "allowances" and v is not None)
    lay = rep["job_layout"]
    return [f"job: {rep['source']} (read as {rep['read_as']}); model {rep['model']}",
            f"held from the job: {shown}",
            f"the job's own layout, not pinned: t={lay['tp']} p={lay['pp']} c={lay['cp']} "
            f"d={lay['dp']} e={lay['ep']}"
            + (f" t_e={lay['etp']}" if lay["etp"] != lay["tp"] else "")
            + f" v={lay['vpp'] or 1} b={lay['micro_batch_size']} on "
            f"{lay['world_size']} GPUs, sharding "
            f"{scheme_words(lay['sharding'], sj.job.training.states.optimizer)}; searched on "
            f"{rep['gpus']} GPUs ({rep['gpus_from']})",
            # a Trainer launch: what estimate says of its reading (ignored, notes, defaults)
            *(reading_lines(rep)[1:] if "defaults" in rep else ())]


def _kept_words(words, held: bool = True) -> list:
    """``words`` without the job's config or recipe (:data:`_CONFIGS`), the launcher's options
    and the settings an emitted layout spells (:data:`_LAYOUT_DESTS`; with ``held``, the job's
    held settings too, :data:`memsym.emit_held.MEGATRON_HELD_DESTS`), each with its values
    (Megatron-LM's arities, :data:`memsym.readers.megatron_arguments.TABLE`)."""
    from ..emit_held import MEGATRON_HELD_DESTS
    from ..readers.megatron_arguments import TABLE

    spelled = _LAYOUT_DESTS | (MEGATRON_HELD_DESTS if held else frozenset())
    kept, i = [], 0
    while i < len(words):
        name, eq, _ = words[i].partition("=")
        dest, arity, _ = TABLE.get(name, (None, 1 if name in _CONFIGS else 0, None))
        j = i + 1 if eq or arity == 0 else option_values(words, i + 1, arity)[1]
        if dest not in spelled and not str(dest).startswith("torchrun_") \
                and name not in _CONFIGS:
            kept += words[i:j]
        i = j
    return kept


def relaunch(sj: SearchJob, got):
    """An emitted Megatron-LM layout as the job's whole argument list: the job's own
    Megatron-LM words without those the layout spells (:data:`_LAYOUT_DESTS`) or the
    launcher's (the world size is the layout's), then the layout's.  Without Megatron-LM
    words (a MODEL and memsym's options) the layout as emitted."""
    if getattr(sj.reading, "bridge_recipe", None) is not None:
        return bridge_relaunch(sj, got)
    words = list(sj.reading.job_words.megatron) if sj.reading.job_words is not None else []
    if not words:
        return got
    arguments = tuple(_kept_words(words)) + tuple(got.arguments)
    from ..readers.megatron_arguments import TABLE

    placed = [w for w in words if TABLE.get(w.partition("=")[0], ("",))[0] in PLACEMENT_DESTS]
    lines, i = [], 0
    while i < len(arguments):            # one argument and its values per line
        j = i + 1
        while j < len(arguments) and not looks_like_option(arguments[j]):
            j += 1
        lines.append(shlex.join(arguments[i:j]))
        i = j
    return replace(got, text="\n".join(lines) + "\n", arguments=arguments,
                   notes=got.notes + placement_note(placed))


def placement_note(features) -> tuple:
    """The note of an emitted layout whose job placed its layers itself (``features``: the
    options or fields it did so by, :data:`PLACEMENT_DESTS`), or none.

    >>> placement_note(["--account-for-loss-in-pipeline-split"])[0][:62]
    'the job places its layers itself (--account-for-loss-in-pipeli'
    """
    if not features:
        return ()
    return (f"the job places its layers itself ({', '.join(dict.fromkeys(features))}); the "
            "search priced them split evenly over the stages (or by the row's first/last "
            "stage sizes), so the layout is launched without it",)


def writes_held(sj) -> bool:
    """Whether an emitted layout of the search job ``sj`` (None: a MODEL's search) writes the
    job's held settings (:func:`memsym.emit.emit`'s ``held``): not a Megatron-Bridge recipe's,
    relaunched as its overrides (:func:`bridge_relaunch`), whose recipe carries them."""
    return sj is None or getattr(sj.reading, "bridge_recipe", None) is None


def read_back_words(sj: SearchJob) -> list:
    """memsym's own options of the job that its read-back repeats: the MODEL and the job's
    memsym options, not its files or config, nor what the emitted layout sets
    (:func:`_kept_words`: its held settings included, unless the recipe carries them)."""
    est = sj.reading
    return _kept_words(list(est.job_words.argparse) if est.job_words is not None else [],
                       writes_held(sj))


# ---------------------------------------------------------------------------------------------
# A Megatron-Bridge recipe's layout out: run_recipe.py's arguments, section.field=value
# ---------------------------------------------------------------------------------------------
#: Megatron-LM's layout arguments of an emitted row (:func:`memsym.emit.emit`) -> the
#: ConfigContainer field Megatron-Bridge sets from the same value (scripts/training/
#: run_recipe.py at 067f987df0: trailing KEY=VALUE overrides after its own options, parse_args
#: :445-452; COMMON_OVERRIDE_FIELDS :135, its -tp ... spellings) and the value written where
#: the argument is absent (Megatron's default: one rank,
#: no virtual stages or uneven ends, no sequence parallelism, no recompute).
_BRIDGE_FIELDS = {
    "--tensor-model-parallel-size": ("model.tensor_model_parallel_size", "1"),
    "--pipeline-model-parallel-size": ("model.pipeline_model_parallel_size", "1"),
    "--context-parallel-size": ("model.context_parallel_size", "1"),
    "--expert-model-parallel-size": ("model.expert_model_parallel_size", "1"),
    # the row's expert TP: 1 where the search priced t_e = 1 (memsym.emit spells the flag
    # then), else null, Megatron-core's default of t for None (model_parallel_config.py:506-507
    # at d98e8a64dd); a recipe's own (e.g. 1) would read back otherwise
    "--expert-tensor-parallel-size": ("model.expert_tensor_parallel_size", "null"),
    "--num-virtual-stages-per-pipeline-rank": ("model.virtual_pipeline_model_parallel_size",
                                               "null"),
    "--decoder-first-pipeline-num-layers": ("model.num_layers_in_first_pipeline_stage", "null"),
    "--decoder-last-pipeline-num-layers": ("model.num_layers_in_last_pipeline_stage", "null"),
    "--sequence-parallel": ("model.sequence_parallel", "false"),
    "--micro-batch-size": ("train.micro_batch_size", None),
    "--global-batch-size": ("train.global_batch_size", None),
}
_BRIDGE_RECOMPUTE = {"--recompute-granularity": "model.recompute_granularity",
                     "--recompute-method": "model.recompute_method",
                     "--recompute-num-layers": "model.recompute_num_layers"}


def _values(words) -> dict:
    """Megatron-LM option -> its value (``"true"`` for a switch) of an emitted word list."""
    out, i = {}, 0
    while i < len(words):
        j = i + 1
        while j < len(words) and not looks_like_option(words[j]):
            j += 1
        out[words[i]] = words[i + 1] if j > i + 1 else "true"
        i = j
    return out


def _bridge_sharding(given: dict) -> list:
    """The DDP overrides of an emitted row's sharding.  Megatron-FSDP: its strategy (Bridge
    turns the distributed optimizer on itself, training/config.py:1084-1085; its checkpoint
    format is asserted, :1107); else the distributed optimizer on or off in both the DDP and
    the optimizer config (Bridge turns both on where either is, config.py:2111-2123), and
    under DDP no parameter-gather overlap."""
    if "--use-megatron-fsdp" in given:
        return ["ddp.use_megatron_fsdp=true",
                f"ddp.data_parallel_sharding_strategy={given['--data-parallel-sharding-strategy']}",
                f"ddp.fsdp_double_buffer={'true' if '--fsdp-double-buffer' in given else 'false'}",
                "checkpoint.ckpt_format=fsdp_dtensor"]
    on = "true" if "--use-distributed-optimizer" in given else "false"
    out = ["ddp.use_megatron_fsdp=false", f"ddp.use_distributed_optimizer={on}",
           f"optimizer.use_distributed_optimizer={on}"]
    if on == "false":   # DDP gathers no parameters: off in both (synced the same way, :2125)
        out += ["ddp.overlap_param_gather=false", "optimizer.overlap_param_gather=false"]
    return out


def bridge_overrides(got, recompute: bool, placed: bool = False) -> list:
    """The Megatron-Bridge overrides of an emitted Megatron-LM layout ``got``: the parallel
    sizes, the pipeline's ends, sequence parallelism, the batch (the global batch always:
    run_recipe.py weak-scales a benchmark recipe's unless it is given, :357), the sharding and,
    when ``recompute`` (searched, not the job's own), the recompute (Megatron-Core's default
    modules under selective, ``[core_attn]``); ``placed``: the recipe places its layers itself
    (:func:`recipe_placement`), written off.

    Examples
    --------
    >>> from memsym.emit import Emitted
    >>> got = Emitted("megatron", "", ("--tensor-model-parallel-size", "2",
    ...     "--pipeline-model-parallel-size", "1", "--sequence-parallel", "--micro-batch-size",
    ...     "1", "--global-batch-size", "64", "--use-distributed-optimizer"), (), 8, 4096)
    >>> bridge_overrides(got, False)[:3]
    ['model.tensor_model_parallel_size=2', 'model.pipeline_model_parallel_size=1', 'model.context_parallel_size=1']
    >>> bridge_overrides(got, False)[8:]
    ['model.sequence_parallel=true', 'train.micro_batch_size=1', 'train.global_batch_size=64', 'ddp.use_megatron_fsdp=false', 'ddp.use_distributed_optimizer=true', 'optimizer.use_distributed_optimizer=true']
    """
    given = _values(list(got.arguments))
    out = [f"{key}={given.get(flag, absent)}" for flag, (key, absent) in _BRIDGE_FIELDS.items()]
    if placed or "--decoder-first-pipeline-num-layers" in given or \
            "--decoder-last-pipeline-num-layers" in given:
        # uneven ends: no layout string and no embedding/loss accounting beside them
        # (Megatron-Core refuses either with first/last stage sizes); an even split: none
        # either, and a layout given keeps run_recipe.py's sync_model_pipeline_layout
        # (recipe_runner.py:373-388 at 067f987df0) from rebuilding the recipe's own
        out += ["model.pipeline_model_parallel_layout=null",
                "model.account_for_embedding_in_pipeline_split=false",
                "model.account_for_loss_in_pipeline_split=false"]
    out += _bridge_sharding(given)
    if recompute:
        out += [f"{key}={given.get(flag, 'null')}" for flag, key in _BRIDGE_RECOMPUTE.items()]
        if given.get("--recompute-granularity") == "selective":
            out.append("model.recompute_modules=[core_attn]")
    return out


def bridge_relaunch(sj: SearchJob, got):
    """An emitted layout of a Megatron-Bridge recipe as run_recipe.py's arguments: ``--recipe
    NAME --mode MODE`` (the job's mode, :func:`memsym.readers.bridge_peft.recipe_mode`), the
    job's own overrides but those the layout sets, then the layout's (:func:`bridge_overrides`; a trailing override wins, run_recipe.py :27-28).  The
    world size is the launcher's (torchrun's, Bridge reads no argument for it): the read-back
    gives it as memsym's ``--world-size``; memsym's options a recipe refuses beside it
    (``--sharding``, ``--precision``: the recipe's own) are dropped from the read-back."""
    from ..readers.bridge import read_bridge_recipe
    from ..readers.bridge_peft import recipe_mode

    est = sj.reading
    placed = recipe_placement(est)
    layout = bridge_overrides(got, "recompute" not in sj.choices, bool(placed))
    if not sj.job.training.comm.tp_comm_overlap and not any(
            w == "--tp-comm-overlap" for w in got.arguments):
        # the search held no TP overlap (the job's layout had none): a recipe that asks for
        # it would run it at t > 1 with SP (Bridge's comm_overlap.py:442-448), so it is off
        values = read_bridge_recipe(est.bridge_recipe, est.job_words.bridge,
                                    as_run=False)["values"]
        if values.get("comm_overlap.tp_comm_overlap"):
            layout.append("comm_overlap.tp_comm_overlap=false")
    # the layout's fields, and the pipeline layout Bridge rebuilds for a new PP / VP
    # (recipe_runner.py sync_model_pipeline_layout) unless it is given
    owned = {w.partition("=")[0] for w in layout} | {"model.pipeline_model_parallel_layout"}
    kept = [w for w in est.job_words.bridge if w.partition("=")[0].lstrip("+~") not in owned
            and not w.startswith("--mode=")]
    # the mode the job was read in: a fine-tuning recipe run_recipe.py refuses under another
    # (_validate_recipe_mode, run_recipe.py:300-304; a benchmark's, recipe_metadata.py:238-244)
    mode = recipe_mode(est.bridge_recipe, est.job_words.bridge)
    if mode is None:    # every shipped recipe's name says one (a guard, not a path)
        from ..errors import InvalidValueError

        raise InvalidValueError(f"recipe {est.bridge_recipe[:80]!r}: its run_recipe.py mode "
                                "is not known; give --mode pretrain|sft|lora")
    arguments = ("--recipe", est.bridge_recipe, "--mode", mode, *kept, *layout)
    lines = [shlex.join(arguments[:2]), shlex.join(arguments[2:4])]
    lines += [shlex.quote(w) for w in arguments[4:]]
    host, pairs = [], list(got.host)
    for i in range(0, len(pairs) - 1, 2):
        if pairs[i] not in ("--sharding", "--precision"):
            host += pairs[i:i + 2]
    host += ["--world-size", str(got.world_size)]
    return replace(got, text="\n".join(lines) + "\n", arguments=arguments, host=tuple(host),
                   files=(), notes=got.notes + placement_note(placed), script="run_recipe.py")


def recipe_placement(est) -> list:
    """The ``model.`` fields by which a Megatron-Bridge recipe (with its overrides) places its
    layers itself: a layout string, its layout builder (DeepSeek-V3's, Kimi K2's:
    ``model._pipeline_model_parallel_layout_builder``, which run_recipe.py calls again for a
    new PP / VP), the embedding or loss counted in the split."""
    from ..readers.bridge import read_bridge_recipe

    got = read_bridge_recipe(est.bridge_recipe, est.job_words.bridge, as_run=False)
    values, out = got["values"], []
    if "model.pipeline_model_parallel_layout" not in got["overridden"] and any(
            "_pipeline_model_parallel_layout_builder" in line for line in got["computed"] or ()):
        out.append("model._pipeline_model_parallel_layout_builder")
    out += [f"model.{dest}" for dest in PLACEMENT_DESTS if values.get(f"model.{dest}")]
    return out
