"""Model, layout and training options with Megatron-LM's long names (issue 3).

A launch command's arguments can be pasted: ``--num-layers 32 --hidden-size 4096 ...``.  The
positional MODEL (a preset name or a config.json path) gives the architecture; options given
next to it override its fields.  Nothing here evaluates argument text.
"""

from __future__ import annotations

import sys

from .option_table import arch_options, job_fields, switches
from .options import number_out

__all__ = ["wants_training", "job_from_args", "ARCH_OPTIONS", "warn_sequence_parallel"]

#: option dest -> Architecture field (Megatron-LM long names, dashes for underscores).
ARCH_OPTIONS = arch_options()
_ARCH_FLAGS = ("swiglu", "untie_embeddings_and_output_weights", "multi_latent_attention")
#: Architecture fields a pasted Megatron-LM argument may change (the rest are job options).
_ARCH_FIELDS = frozenset(ARCH_OPTIONS + _ARCH_FLAGS + (
    "normalization", "add_bias_linear", "add_qkv_bias", "qk_layernorm", "position_embedding_type",
    "moe_shared_expert_gate", "moe_router_bias"))


def megatron_mode(args) -> bool:
    """Whether the job is a Megatron-LM command read with Megatron's own defaults: no MODEL,
    and Megatron's arguments pasted, in a launch script or in an argument file
    (:mod:`memsym.cli.reading` sorted the words)."""
    words = getattr(args, "job_words", None)
    return args.model is None and bool(words is not None and words.megatron) \
        and getattr(args, "params", None) is None


def framework_input(args) -> bool:
    """Whether a DeepSpeed config or torchtitan TOML describes the job."""
    return bool(getattr(args, "deepspeed_config", None) or getattr(args, "torchtitan_config", None))


def _host_options(args) -> dict:
    """The job options memsym's own (host) options give, whatever the framework input."""
    from ..terms.model_state import CONVENTIONS

    extra = {}
    if args.convention in CONVENTIONS and args.convention != "framework":
        extra["convention"] = args.convention
    for key, dest in (("workspace", "workspace"), ("nccl", "nccl_buffers"),
                      ("fragmentation", "fragmentation")):
        if getattr(args, dest, None) is not None:
            extra[key] = getattr(args, dest)
    if getattr(args, "metric", None) is not None:
        extra["metric"] = args.metric
    if getattr(args, "gpu", None) is not None:
        extra["gpu"] = args.gpu
    if getattr(args, "gpu_memory", None) is not None:
        extra["capacity"] = args.gpu_memory
    if getattr(args, "gpus_per_node", None) is not None:
        extra["gpus_per_node"] = args.gpus_per_node
    return extra


def framework_job_from_args(args):
    """The Job of a DeepSpeed config or torchtitan TOML given with ``--deepspeed-config`` /
    ``--torchtitan-config`` (None when neither is given)."""
    from ..errors import InvalidValueError
    from ..readers import read_deepspeed_config, read_torchtitan_toml
    from ..readers.jobs import deepspeed_job, torchtitan_job

    ds, tt = getattr(args, "deepspeed_config", None), getattr(args, "torchtitan_config", None)
    if ds is None and tt is None:
        return None
    if ds is not None and tt is not None:
        raise InvalidValueError("give --deepspeed-config or --torchtitan-config, not both")
    # the config decides the layout and the training: memsym's options for them, or pasted
    # Megatron-LM arguments, would be dropped silently, so they are refused
    host = set(_host_options(args)) | {"world_size", "seq_length"}
    said = sorted(k for k in _memsym_options(args) if k not in host and not k.startswith("_"))
    arch = [n for n in ARCH_OPTIONS if getattr(args, n, None) is not None]
    words = getattr(args, "job_words", None)
    if said or arch or (words is not None and words.megatron):
        what = ", ".join(said + arch) or words.megatron[0]
        raise InvalidValueError(f"{what}: with {'--deepspeed-config' if ds else '--torchtitan-config'}"
                                " the config file sets the layout and the training; give them "
                                "there (only --world-size, --seq-length, the GPU and the "
                                "allowances go beside it)")
    extra = _host_options(args)
    if args.seq_length is not None:
        extra["seq_length"] = args.seq_length
    if ds is not None:
        if args.model is None:
            raise InvalidValueError("a DeepSpeed config has no model: name a MODEL (a preset or a "
                                    "Hugging Face config.json) before --deepspeed-config")
        return deepspeed_job(read_deepspeed_config(ds, world_size=args.world_size), args.model,
                             **extra)
    return torchtitan_job(read_torchtitan_toml(tt, world_size=args.world_size), args.model,
                          **{k: v for k, v in extra.items() if k != "seq_length"})


def megatron_job_from_args(args):
    """(Job, MegatronJob) of a Megatron-LM command without a MODEL (:func:`megatron_mode`):
    Megatron's reader with Megatron's defaults, memsym's own options applied on top of it."""
    from ..errors import InvalidValueError
    from ..readers.jobs import megatron_job
    from ..readers.megatron import read_megatron_args

    mj = read_megatron_args(args.job_words.megatron)
    own = _memsym_options(args)
    if own.get("framework", "megatron") != "megatron":
        raise InvalidValueError(f"--framework {own['framework']}: a Megatron-LM command runs under "
                                "Megatron-LM; name a MODEL to describe a "
                                f"{own['framework']} job")
    given = set(args.job_words.megatron)
    for option, flags in (("precision", ("--bf16", "--fp16", "--fp8-format")),
                          ("sharding", ("--use-distributed-optimizer", "--use-megatron-fsdp",
                                        "--use-torch-fsdp2"))):
        said = [f for f in flags if f in given]
        if option in own and said:
            base = megatron_job(mj, **{k: v for k, v in own.items() if k != option})
            if getattr(base.training, option) != own[option]:
                raise InvalidValueError(f"--{option} {own[option]} contradicts {said[0]} "
                                        f"({getattr(base.training, option)}); give one of them")
    if "sharding" in own:   # memsym's --sharding decides: Megatron's DDP default is not used
        import dataclasses

        mj = dataclasses.replace(mj, notes=tuple(
            n for n in mj.notes if not n.startswith("no --use-distributed-optimizer")))
    return megatron_job(mj, **own), mj


def wants_training(args) -> bool:
    """Whether the arguments describe a job (else the model-state-only path applies): a MODEL,
    architecture options, a pasted Megatron-LM command, or a framework config."""
    return (args.model is not None or any(getattr(args, n, None) is not None for n in ARCH_OPTIONS)
            or megatron_mode(args) or framework_input(args))


#: (dest, Job option) of the valued layout and training options (memsym.cli.option_table);
#: None values are left to the job's defaults (memsym.job.DEFAULTS), so the command line has
#: no defaults of its own.
_JOB_OPTIONS = job_fields()


def _memsym_options(args) -> dict:
    """The job options memsym's own options give, only those given (argparse's absent
    options are None or False, so no default of the command line's own enters a job)."""
    from ..errors import InvalidValueError
    from .options import resolve_scheme

    opts = {dest_job: getattr(args, dest) for dest, dest_job in _JOB_OPTIONS
            if getattr(args, dest, None) is not None}
    if getattr(args, "sequence_parallel", False):
        opts["sequence_parallel"] = True
    for flag in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        if getattr(args, flag, False):
            opts[flag] = True
    if getattr(args, "no_flash_attn", False):
        opts["flash_attention"] = False
    elif getattr(args, "use_flash_attn", False):
        opts["flash_attention"] = True
    hidden, attention = getattr(args, "hidden_dropout", None), getattr(args, "attention_dropout", None)
    if getattr(args, "dropout", False):      # --dropout: masks kept, as Megatron's 0.1
        if 0 in (hidden, attention):
            raise InvalidValueError("--dropout keeps dropout masks: a dropout of 0 contradicts it")
        hidden = attention = hidden or attention or 1
    if hidden is not None or attention is not None:
        hidden = hidden if hidden is not None else attention
        attention = attention if attention is not None else hidden
        if (hidden > 0) != (attention > 0):
            raise InvalidValueError("memsym models one dropout setting: give --hidden-dropout and "
                                    "--attention-dropout both zero or both non-zero")
        opts["dropout"] = hidden > 0
    if getattr(args, "sharding", None) is not None or getattr(args, "use_distributed_optimizer", False):
        opts["sharding"] = resolve_scheme(args)
    if getattr(args, "grad_reduce_in_bf16", False):
        # Megatron's validate_args: the flag only stops --bf16 forcing fp32 gradients; under
        # fp16 or fp32 parameters it changes nothing (the reader notes the same)
        opts["_grad_reduce_in_bf16"] = True
    if getattr(args, "fp8_param_gather", False):
        opts["fp8_param_gather"] = True
    if getattr(args, "lora_regather", False):
        opts["lora_regather"] = True
    if getattr(args, "should_pad_vocab", False) and args.convention != "megatron-bridge":
        opts["_notes"] = ("--should-pad-vocab has effect only with --convention megatron-bridge "
                          "(Megatron-Bridge's GPTModelProvider.should_pad_vocab)",)
    for _, dest, option, value in switches():
        if getattr(args, dest, False):
            opts[option] = value
    if getattr(args, "framework", None) is not None:
        opts["framework"] = args.framework
    # the convention (a framework estimator such as megatron-bridge reports its own breakdown
    # beside the job's), allowances, GPU, capacity and node size: as for every input
    opts.update(_host_options(args))
    if getattr(args, "world_size", None) is not None:
        opts["world_size"] = args.world_size
    return opts


def _grad_reduce(opts: dict) -> dict:
    """``--grad-reduce-in-bf16`` as Megatron's validate_args reads it: a bf16 gradient buffer
    under bf16 (or fp8) parameters, no effect otherwise (said in a note)."""
    if opts.pop("_grad_reduce_in_bf16", False):
        if opts.get("precision", "bf16") in ("bf16", "fp8"):
            opts["grad_dtype"] = "bf16"
        else:
            opts["_notes"] = tuple(opts.get("_notes", ())) + (
                "--grad-reduce-in-bf16 has effect only with bf16 parameters (Megatron's --bf16)",)
    return opts


def job_from_args(args, **override):
    """The :class:`memsym.job.Job` the command line describes, built and validated once
    (``override``: job options that replace the parsed ones, e.g. ``tp=4`` for a candidate).

    One reading (:mod:`memsym.cli.reading`): with a MODEL its recipe is the baseline, memsym's
    options and the Megatron-LM arguments pasted beside them change it (each with Megatron's
    meaning); without one, a Megatron-LM command is read with Megatron's defaults
    (:func:`megatron_job_from_args`).
    """
    from ..errors import InvalidValueError
    from ..job import job

    if megatron_mode(args):
        j, mj = megatron_job_from_args(args)
        args.reading = {"read_as": "Megatron-LM arguments (pretrain_gpt.py semantics and "
                        "defaults)", "ignored": list(mj.ignored)}
        return j.replace(**override) if override else j
    arch = arch_overrides(args)
    opts = _memsym_options(args)
    notes = []
    words = getattr(args, "job_words", None)
    pasted = words.megatron if words is not None else []
    if pasted and args.model is None:
        raise InvalidValueError(f"{pasted[0]} is a Megatron-LM argument: it needs a model (a "
                                "preset, a config.json or the architecture arguments), not "
                                "--params")
    ignored = []
    if pasted:
        from ..model import resolve_model
        from ..readers.megatron import read_megatron_overrides

        base = resolve_model(args.model)
        o = read_megatron_overrides(pasted, num_layers=arch.get("num_layers", base.num_layers),
                                    p=opts.get("p", 1), has_experts=bool(base.num_experts))
        for key, value in o.options.items():
            mine = opts.get(key, arch.get(key))
            if mine is not None and mine != value:
                raise InvalidValueError(f"the Megatron-LM arguments set {key} = {value!r}, memsym's "
                                        f"options {mine!r}: give one of them")
            (arch if key in _ARCH_FIELDS else opts)[key] = value
        notes += o.notes
        ignored = list(o.ignored)
    if "num_query_groups" in arch and not getattr(args, "group_query_attention", False):
        # Megatron-LM ignores --num-query-groups without --group-query-attention; a model that
        # already has grouped KV heads (a GQA preset or config.json) takes the new count
        if args.model is None or query_groups(args.model) is None:
            arch.pop("num_query_groups")
            notes.append("--num-query-groups has no effect without --group-query-attention "
                         "(Megatron uses multi-head attention)")
    if args.model is None:
        arch.setdefault("position_embedding_type", "rope" if args.swiglu else "learned_absolute")
    opts = _grad_reduce({**opts, **arch})
    if notes:
        opts["_notes"] = tuple(opts.get("_notes", ())) + tuple(notes)
    opts.update(override)
    if "d" in override:
        opts.pop("world_size", None)
    args.reading = {"read_as": None, "ignored": ignored}
    return job(args.model, **opts)


def arch_overrides(args) -> dict:
    """The architecture fields the model options give (Megatron-LM's names; a
    ``--moe-layer-freq`` pattern parsed as Megatron parses it, never evaluated)."""
    arch = {n: getattr(args, n) for n in ARCH_OPTIONS if getattr(args, n, None) is not None}
    for n in _ARCH_FLAGS:
        if getattr(args, n, None):
            arch[n] = True
    if getattr(args, "normalization", None) is not None:
        arch["normalization"] = args.normalization
    if "moe_layer_freq" in arch:
        from ..model import resolve_model
        from ..readers.megatron import parse_moe_layer_freq

        layers = arch.get("num_layers") or (resolve_model(args.model).num_layers
                                            if args.model is not None else None)
        arch["moe_layer_freq"] = parse_moe_layer_freq(arch["moe_layer_freq"], layers)
    return arch


def query_groups(model):
    """The KV-head count of a named model (None: multi-head attention, one KV head each)."""
    from ..model import resolve_model

    base = resolve_model(model)
    g = base.num_query_groups
    return None if g is None or g == base.num_attention_heads else g


def warn_sequence_parallel(args) -> None:
    """Warn once on stderr, before any output, that --sequence-parallel is a no-op at t = 1.

    ``memsym solve tp`` does not warn: its candidates with t > 1 do use sequence parallelism.
    """
    if args.sequence_parallel and (args.tp or 1) == 1 and getattr(args, "unknown", None) != "tp":
        print("memsym: warning: --sequence-parallel has no effect at tensor-parallel size 1 "
              "(Megatron-LM turns it off)", file=sys.stderr)


def training_report(args, **override) -> dict:
    """The JSON-ready report of ``memsym estimate MODEL ...`` (memsym or a framework convention)."""
    return report_for(args, job_from_args(args, **override))


def _num(value) -> int:
    return number_out(value, round_up=True)


def report_for(args, j, *, cluster: bool = True) -> dict:
    """The report of one validated :class:`memsym.job.Job`, evaluated on every stage; with
    ``cluster`` and cluster options, communication and time too."""
    from ..model import parameter_count
    from ..text import printable
    from ..training import job_memory

    arch, layout, training = j.model, j.layout, j.training

    def priced() -> dict:
        # the same block whatever the memory convention: communication does not depend on it
        if cluster and cluster_known(args):
            return communication_report(args, arch, layout, training)
        return {}

    common = {
        "model": printable(arch.name),
        "layout": {"dp": layout.d, "tp": layout.t, "pp": layout.p, "cp": layout.c,
                   "ep": layout.e, "etp": layout.expert_tp, "vpp": layout.v,
                   "sequence_parallel": layout.sequence_parallel,
                   "world_size": layout.world_size},
        "training": {"seq_length": training.seq_length,
                     "micro_batch_size": training.micro_batch_size,
                     "recompute": training.recompute,
                     "recompute_method": training.recompute_method,
                     "recompute_num_layers": training.recompute_num_layers,
                     "flash_attention": training.flash_attention,
                     "dropout": training.dropout, "schedule": training.schedule,
                     "stage_placement": training.stage_placement,
                     "framework": training.framework, "compiled_loss": training.compiled_loss,
                     "loss_parallel": training.loss_parallel,
                     "overlap_grad_reduce": training.overlap_grad_reduce,
                     "overlap_param_gather": training.overlap_param_gather,
                     "tp_comm_overlap": training.tp_comm_overlap,
                     "overlap_moe_expert_parallel_comm":
                         training.overlap_moe_expert_parallel_comm,
                     "overlap_p2p_comm": training.overlap_p2p_comm,
                     "defer_embedding_wgrad_compute": training.defer_embedding_wgrad_compute,
                     "wgrad_deferral_limit": training.wgrad_deferral_limit,
                     "first_stage_layers": layout.first_stage_layers,
                     "last_stage_layers": layout.last_stage_layers,
                     "pipeline_layout": None if layout.pipeline_layout is None
                     else layout.pipeline_layout.describe()},
        "convention": args.convention,
        # every default the job applied because it was not given, and where it comes from
        "defaults": [{"option": k_, "value": v_, "source": src} for k_, v_, src in j.defaults],
        "units": "bytes",
    }
    if args.convention in ("megatron-lm", "megatron-bridge"):
        from ..conventions import convention_breakdown

        pad = {"should_pad_vocab": True} if getattr(args, "should_pad_vocab", False) and \
            args.convention == "megatron-bridge" else {}
        out = convention_breakdown(args.convention, arch, layout, training, **pad)
        byt = dict(out["bytes"])
        return {**common, "bytes": byt, "stage": {"index": 0, "role": "first",
                "note": "the framework assumes pipeline stage 0 is the most loaded"},
                "path": out["path"], "assumptions": out["assumptions"],
                "params": int(parameter_count(arch)), **priced(), "_total": byt["total"]}
    est = job_memory(j)
    extra = priced()
    grouped = est.grouped()
    byt = {key: _num(val) for key, val in grouped.items()}
    byt["total"] = sum(v_ for k_, v_ in byt.items() if k_ != "total")
    return {**common, "bytes": byt,
            "stage": {"index": est.stage, "role": est.role,
                      "stage_totals": [_num(x) for x in est.stage_bytes]},
            "activation_bytes": {k_: _num(v_) for k_, v_ in est.activations().items()},
            # the peak over the step's phases, and the states that exist only in the step
            "phases": {"peak": est.phase, **{ph: _num(v_) for ph, v_ in est.phase_bytes}},
            "optimizer_step_bytes": {k_: _num(v_) for k_, v_ in est.step_bytes},
            "allowances": {str(s_): number_out(v_) for s_, v_ in est.values.items()
                           if s_.name in ("M_ws", "M_nccl", "phi_frag")},
            "sources": _sources(est),
            "params": int(parameter_count(arch)),
            "notes": list(est.notes) + [printable(n, 200) for n in arch.extra.get("notes", ())],
            **extra, "_total": byt["total"]}


def metric_report(args, j, rep: dict, total) -> int:
    """Add the memory metric to ``rep`` (its name, what it sees, the device total) and return
    the device total [bytes], on which fitting is judged (:data:`memsym.terms.allowances.METRICS`)."""
    from ..terms.allowances import METRICS
    from ..training import job_memory

    name = j.training.metric
    if name == "device" or args.convention in ("megatron-lm", "megatron-bridge"):
        device = total
    else:
        est = job_memory(j.replace(metric="device"))
        device = sum(_num(v) for k, v in est.grouped().items() if k != "total")
    rep["metric"] = {"name": name, "sees": METRICS[name][1], "device_bytes_total": device}
    return device


def _sources(est) -> dict:
    """The source of every row the report shows: each term's own, and for the activations row
    (several terms summed) each of its terms' sources once."""
    out = {term.key: str(term.source) for term in est.total}
    grouped = est.grouped()
    acts = [term for term in est.total if term.key not in grouped]
    out["activations"] = "; ".join(dict.fromkeys(str(term.source) for term in acts))
    return out


def estimate_training(args) -> int:
    """``memsym estimate MODEL ...``: print the per-GPU training memory (table or JSON)."""
    from ..text import printable
    from .options import emit_json

    framework = j = framework_job_from_args(args)
    if framework is not None:
        rep = report_for(args, framework)
        rep["read_as"] = ("a DeepSpeed config" if args.deepspeed_config else
                          "a torchtitan job TOML (v0.2 keys)")
        rep["notes"] = list(dict.fromkeys(rep.get("notes", []) + list(framework.notes)))
    else:
        j = job_from_args(args)
        rep = report_for(args, j)
        reading = args.reading
        if reading["read_as"]:
            rep["read_as"] = reading["read_as"]
        if reading["read_as"] or reading["ignored"]:
            rep["ignored"] = [printable(x) for x in reading["ignored"]]
        rep["notes"] = list(dict.fromkeys(rep.get("notes", []) + [printable(n, 300) for n in j.notes]))
        warn_sequence_parallel(args)        # once, after validation, before any output
    total = rep.pop("_total")
    device = metric_report(args, j, rep, total)
    from .options import margin_bytes

    cap = args.gpu_memory
    rep["margin_bytes"] = margin = margin_bytes(args, cap)
    usable = None if cap is None else cap - margin      # what a job must fit within
    fits = None if cap is None else bool(device <= usable)     # always on the device's count
    status = 1 if fits is False else 0    # "does not fit" is an answer, as for solve
    if cap is not None and (fits is False or getattr(args, "advise", False)) \
            and args.convention not in ("megatron-lm", "megatron-bridge"):
        rep["advice"] = advice_report(j.replace(capacity=usable) if j.capacity != usable else j)
    if getattr(args, "sensitivity", False):
        rep["sensitivity"] = sensitivity_report(args, j)
    if args.json:
        emit_json({**rep, "gpu_memory_bytes": cap,
                   "gpu_memory_note": getattr(args, "capacity_note", "as given"), "fits": fits})
        return status
    from .report_text import render_estimate, render_markdown

    print(render_markdown(rep, args, fits=fits, device=device) if getattr(args, "markdown", False)
          else render_estimate(rep, args, fits=fits, device=device,
                               wide=getattr(args, "wide", False)))
    return status


def sensitivity_report(args, j) -> list:
    """Each knob's :class:`memsym.sensitivity.Sensitivity` at the job, JSON-ready."""
    from ..errors import InvalidValueError
    from ..sensitivity import sensitivity

    if args.convention in ("megatron-lm", "megatron-bridge"):
        raise InvalidValueError(f"--sensitivity differentiates memsym's own total: with "
                                f"--convention {args.convention} the report is the framework's "
                                "estimator (drop one of them)")
    return sensitivity_rows(sensitivity(j))


def sensitivity_rows(rows) -> list:
    """:class:`memsym.sensitivity.Sensitivity` rows as JSON (exact values also as text)."""
    return [{"knob": r.knob, "value": r.value,
             "bytes_per_unit": None if r.derivative is None else number_out(r.derivative),
             "bytes_per_unit_exact": None if r.derivative is None else str(r.derivative),
             "by_term_bytes_per_unit": {k: None if v is None else number_out(v)
                                        for k, v in r.by_term.items()},
             "doubled_value": 2 * r.value, "doubled_change_bytes": r.doubled,
             "note": r.note} for r in rows]


def advice_report(j) -> list:
    """The levers that make the job fit (:func:`memsym.advice.levers`), JSON-ready."""
    from ..advice import levers

    return [{"knob": lv.knob, "change": lv.change, "flags": list(lv.flags),
             "bytes_total": lv.bytes_total, "saved_bytes": lv.saved, "gpus": lv.gpus,
             "step_time_s": lv.step_time} for lv in levers(j)]



def switch_dests() -> tuple:
    """``(flag, argparse destination)`` of every framework switch (:func:`switches`)."""
    return tuple((flag, dest) for flag, dest, _, _ in switches())


#: (option, dest) of the cluster options that price communication and time (--gpu alone may
#: also just supply the capacity, so it is not among them).
PRICING = (("--gpus-per-node", "gpus_per_node"), ("--intra-node-bandwidth", "intra_node_bandwidth"),
            ("--inter-node-bandwidth", "inter_node_bandwidth"), ("--efficiency", "efficiency"))


def cluster_known(args) -> bool:
    """Whether the options describe a cluster (with a model: communication and time are priced)."""
    return getattr(args, "gpu", None) is not None or \
        any(getattr(args, dest, None) is not None for _, dest in PRICING)


def communication_report(args, arch, layout, training) -> dict:
    """``communication``, ``bubble``, ``flops``, ``step_time_s``, ``mfu`` of the layout on the
    cluster the options describe (:func:`memsym.timing.report.step_report` with the layout:
    step time, bubble and MFU from :func:`memsym.timing.step.step_time`, the exact schedule;
    MFU on GEMM-count FLOPs; ``--efficiency`` the explicit achieved-GEMM-efficiency override)."""
    from ..model import active_parameter_count, moe_layer_pattern
    from ..timing.report import step_report
    from ..training import arch_values, job_stage_parameters, microbatches

    values = {str(sym): int(val) for sym, val in arch_values(arch, layout.t).items()}
    # FLOPs: 6 N per token on the parameters a token passes through (the active ones for
    # MoE), as memsym search prices them: Korthikanti's 72BLsh^2 form assumes a GPT layer
    # (4h MLP, full multi-head attention) and miscounts SwiGLU, GQA and experts
    values["N"] = int(active_parameter_count(arch))
    # data parallelism reduces the gradients a GPU holds: the heaviest stage's dense and
    # expert parameters (experts/(e t_e) of them); the ring factor uses d for both groups
    heaviest = max(
        (job_stage_parameters(arch, layout, training, i).per_gpu for i in range(layout.p)))
    dp_params = heaviest * layout.p * layout.t
    m_ = microbatches(layout, training) or 1
    if training.grad_dtype in ("bf16", "fp16"):   # --grad-reduce-in-bf16: 2-byte gradients
        values["b_g"] = 2                           # reduced, as the step time prices them
    values.update({"s": training.seq_length, "b": training.micro_batch_size, "m": m_,
                   "t": layout.t, "p": layout.p, "d": layout.d, "c": layout.c, "e": layout.e,
                   "v": layout.v or 1})
    if arch.num_experts:
        values["L_m"] = sum(moe_layer_pattern(arch))
    gb = 10**9
    return step_report(
        values, gpu=args.gpu or "h100-80gb", precision=training.precision,
        sharding=training.sharding, recompute=training.recompute,
        sequence_parallel=layout.sequence_parallel, interleaved=(layout.v or 1) > 1,
        efficiency=args.efficiency, gpus_per_node=args.gpus_per_node,
        intra_node_bandwidth=None if args.intra_node_bandwidth is None else args.intra_node_bandwidth * gb,
        inter_node_bandwidth=None if args.inter_node_bandwidth is None else args.inter_node_bandwidth * gb,
        dp_params=dp_params, formula="6n", arch=arch, layout=layout, training=training,
        mfu_flops=getattr(args, "mfu_flops", None) or "gemm",
        pipelined_fsdp=(training.framework == "torchtitan" and training.sharding == "fsdp"
                        and layout.p > 1))
