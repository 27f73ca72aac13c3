"""Model, layout and training options with Megatron-LM's long names (issue 3).

A launch command's arguments can be pasted: ``--num-layers 32 --hidden-size 4096 ...``.  The
positional MODEL (a preset name or a config.json path) gives the architecture; options given
next to it override its fields.  memsym's own options as a job's options are
:mod:`memsym.cli.job_options`'s; a job read from a framework's config or recipe is
:mod:`memsym.cli.framework_jobs`'.  Nothing here evaluates argument text.
"""

from __future__ import annotations

import sys

from .framework_jobs import framework_input, framework_job_from_args, framework_read_as
from .job_options import ARCH_OPTIONS, grad_reduce, memsym_options
from .option_table import switches
from ..vocabulary import CONVENTION_NAMES
from .job_report import (advice_report, advice_tried, metric_report, report_for,
                         sensitivity_report)

__all__ = ["wants_training", "job_from_args", "warn_sequence_parallel"]

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


def megatron_job_from_args(args):
    """(Job, MegatronJob) of a Megatron-LM command without a MODEL (:func:`megatron_mode`):
    Megatron's reader with Megatron's defaults, memsym's own options applied on top of it."""
    from ..errors import InvalidValueError
    from ..frameworks import FRAMEWORK
    from ..readers.jobs import megatron_job
    from ..readers.megatron import read_megatron_args

    own = memsym_options(args)
    mj = read_megatron_args(args.job_words.megatron,
                            tp_comm_overlap=bool(own.get("tp_comm_overlap")))
    if not FRAMEWORK[own.get("framework", "megatron")].megatron_options:
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
            if base.training.value(option) != own[option]:
                raise InvalidValueError(f"--{option} {own[option]} contradicts {said[0]} "
                                        f"({base.training.value(option)}); give one of them")
    import dataclasses

    if mj.layout.get("t_e") == mj.layout.get("t") and not _given_etp(given):
        # Megatron's --expert-tensor-parallel-size defaults to TP (the reader fills it in):
        # left to the job's own default, so no "has effect only on a model with experts"
        # note for an argument the command never gave
        mj = dataclasses.replace(mj, layout={**mj.layout, "t_e": None})
    if "sharding" in own:   # memsym's --sharding decides: Megatron's DDP default is not used
        mj = dataclasses.replace(mj, notes=tuple(
            n for n in mj.notes if not n.startswith("no --use-distributed-optimizer")))
    return megatron_job(mj, **own), mj


def _given_etp(words) -> bool:
    """Whether a pasted command gives the expert tensor-parallel size (any spelling)."""
    names = {w.split("=", 1)[0].lstrip("-").replace("_", "-") for w in words
             if str(w).startswith("-")}
    return bool(names & {"expert-tensor-parallel-size", "etp"})


def wants_training(args) -> bool:
    """Whether the arguments describe a job (else the model-state-only path applies): a MODEL,
    architecture options, a pasted Megatron-LM command, or a framework config."""
    return (args.model is not None or any(getattr(args, n, None) is not None for n in ARCH_OPTIONS)
            or megatron_mode(args) or framework_input(args))


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

    if getattr(args, "params", None) is not None:   # every job command alike
        raise InvalidValueError("--params contradicts the model: the parameter count comes "
                                "from the MODEL or the architecture options (drop --params)")
    if megatron_mode(args):
        j, mj = megatron_job_from_args(args)
        # a hybrid layer pattern is a HybridModel, built by pretrain_hybrid.py (Megatron-LM
        # d98e8a64dd pretrain_hybrid.py:44; pretrain_mamba.py is its deprecated wrapper); the
        # argument parser and its defaults are the same as pretrain_gpt.py's
        hybrid = mj.architecture.get("layer_mixers") is not None   # set by a layer pattern only
        script = "pretrain_hybrid.py" if hybrid else "pretrain_gpt.py"
        args.reading = {"read_as": f"Megatron-LM arguments ({script} semantics and defaults)",
                        "ignored": list(mj.ignored)}
        return j.replace(**override) if override else j
    arch = arch_overrides(args)
    opts = memsym_options(args)
    notes = []
    words = getattr(args, "job_words", None)
    pasted = words.megatron if words is not None else []
    if pasted and args.model is None:
        raise InvalidValueError(f"{pasted[0]} is a Megatron-LM argument: it needs a model (a "
                                "preset, a config.json or the architecture arguments), not "
                                "--params")
    ignored = []
    if args.model is not None and not _reads_swiglu_fusion(args, arch):
        # Megatron reads --no-bias-swiglu-fusion under --swiglu only (argument_utils.py:314-319
        # at d98e8a64dd; else bias_gelu_fusion): ignored, as the reader ignores it pasted
        opts.pop("bias_activation_fusion", None)
        ignored.append("--no-bias-swiglu-fusion")
    if pasted:
        from ..model import resolve_model
        from ..readers.megatron import read_megatron_overrides

        base = resolve_model(args.model)
        o = read_megatron_overrides(pasted, num_layers=arch.get("num_layers", base.num_layers),
                                    p=opts.get("p", 1), has_experts=bool(base.num_experts),
                                    mamba=bool(base.mamba_inner_size),
                                    mtp_layers=arch.get("mtp_num_layers", base.mtp_num_layers),
                                    tp_comm_overlap=bool(opts.get("tp_comm_overlap")),
                                    quick_geglu=_quick_geglu(base),
                                    gated=bool(arch.get("swiglu", base.swiglu)))
        if "layer_mixers" in o.options:
            # Megatron's validate_args (arguments.py:787-797 at d98e8a64dd): the hybrid pattern
            # gives the layer count, its E symbols the MoE layers, its '/' parts the MTP depths
            for key in ("num_layers", "moe_layer_freq", "mtp_num_layers"):
                if key in arch and arch[key] != o.options.get(key, arch[key]):
                    notes.append(f"memsym's {key} {arch.pop(key)!r} ignored: the hybrid "
                                 "layer pattern sets it (Megatron's validate_args)")
        if "megatron_fsdp" in o.options and getattr(args, "use_distributed_optimizer", False) \
                and getattr(args, "sharding", None) is None:
            # Megatron-FSDP v1 runs the distributed optimizer itself (validate_args turns
            # --use-distributed-optimizer on, arguments.py l. 1128-1135 at d98e8a64dd): the
            # flag beside it names no other sharding
            opts.pop("sharding", None)
        for key, value in o.options.items():
            mine = opts.get(key, arch.get(key))
            if mine is not None and mine != value:
                raise InvalidValueError(f"the Megatron-LM arguments set {key} = {value!r}, memsym's "
                                        f"options {mine!r}: give one of them")
            (arch if key in _ARCH_FIELDS else opts)[key] = value
        notes += o.notes
        ignored += [w for w in o.ignored if w not in ignored]
        if "vocab_size" in o.options:   # --padded-vocab-size: the rows, as they stand
            from ..readers._values import check_unpadded_vocab
            check_unpadded_vocab(arch["vocab_size"], opts.get("t", 1), "the tensor-parallel size",
                                 "--padded-vocab-size")
        if "--cross-entropy-loss-fusion" in pasted and opts.get("cross_entropy_fusion_impl") == "te":
            from ..readers.recipe_mechanisms import TE_LOSS_REFUSED
            raise InvalidValueError(TE_LOSS_REFUSED)   # as Megatron-LM's validate_args
    if "num_query_groups" in arch and not getattr(args, "group_query_attention", False):
        # Megatron-LM ignores --num-query-groups without --group-query-attention; a model that
        # already has grouped KV heads (a GQA preset or config.json) takes the new count
        if args.model is None or query_groups(args.model) is None:
            arch.pop("num_query_groups")
            notes.append("--num-query-groups has no effect without --group-query-attention "
                         "(Megatron uses multi-head attention)")
    if args.model is None:
        arch.setdefault("position_embedding_type", "rope" if args.swiglu else "learned_absolute")
    opts = grad_reduce({**opts, **arch})
    if notes:
        opts["_notes"] = tuple(opts.get("_notes", ())) + tuple(notes)
    opts.update(override)
    if "d" in override:
        opts.pop("world_size", None)
    args.reading = {"read_as": None, "ignored": ignored}
    return job(args.model, **opts)


def _reads_swiglu_fusion(args, arch: dict) -> bool:
    """Whether memsym's ``--no-bias-swiglu-fusion`` (if given) reaches the MODEL's gated unit.

    ``core_transformer_config_from_args`` (Megatron-LM argument_utils.py:314-319 at
    d98e8a64dd) sets ``bias_activation_fusion`` from ``args.bias_swiglu_fusion`` under
    ``--swiglu`` only, else from ``args.bias_gelu_fusion``: a model without a SwiGLU, or with
    GPT-OSS's clamped gated unit (Megatron's ``--quick-geglu``), never reads it.
    """
    if not getattr(args, "no_bias_swiglu_fusion", False):
        return True
    from ..model import resolve_model

    base = resolve_model(args.model)
    swiglu = arch.get("swiglu", base.swiglu)
    return bool(swiglu) and not _quick_geglu(base)


def _quick_geglu(base) -> bool:
    """GPT-OSS's clamped gated unit is Megatron's quick-GeGLU
    (memsym.terms.activations.clamped_glu_copy)."""
    return bool(base.swiglu and (base.extra or {}).get("swiglu_limit") is not None)


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
        if _hybrid_pattern_pasted(args):
            # the pattern sets the layer count and its E symbols the MoE layers (Megatron's
            # validate_args, arguments.py:787-797 at d98e8a64dd); the hybrid model never
            # reads --moe-layer-freq, so its length is not checked (job_from_args notes it)
            layers = None
        arch["moe_layer_freq"] = parse_moe_layer_freq(arch["moe_layer_freq"], layers)
    return arch


def _hybrid_pattern_pasted(args) -> bool:
    """Whether the pasted Megatron-LM arguments give a hybrid layer pattern (or its deprecated
    spelling, which validate_args copies into it: arguments.py:746-754 at d98e8a64dd)."""
    words = getattr(args, "job_words", None)
    pasted = (words.megatron if words is not None else None) or ()
    return any(w.split("=", 1)[0] in ("--hybrid-layer-pattern", "--hybrid-override-pattern")
               for w in pasted)


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


def estimate_training(args) -> int:
    """``memsym estimate MODEL ...``: print the per-GPU training memory (table or JSON)."""
    from ..text import printable
    from .options import emit_json

    framework = j = framework_job_from_args(args)
    if framework is not None:
        rep = report_for(args, framework)
        rep["read_as"] = framework_read_as(args)
        if getattr(args, "bridge_recipe", None):
            rep["ignored"] = list(args.reading["ignored"])
        rep["notes"] = list(dict.fromkeys(rep.get("notes", []) + list(framework.notes)))
        if getattr(args, "reading", None):
            rep["ignored"] = [printable(x) for x in args.reading["ignored"]]
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
    from .hf_launch import hf_report

    hf_report(args, rep)                # a pasted Hugging Face Trainer launch says so
    total = rep.pop("_total")
    if getattr(args, "calibration", None) is not None:
        calibrate_report(args, rep)
    device = metric_report(args, j, rep, total)
    from .options import margin_bytes

    cap = args.gpu_memory
    rep["margin_bytes"] = margin = margin_bytes(args, cap)
    usable = None if cap is None else cap - margin      # what a job must fit within
    fits = None if cap is None else bool(device <= usable)     # always on the device's count
    rep.update(verdict_report(rep["metric"], device, usable, j))
    # "does not fit" is an answer, as for solve; "tight" exits 1 too: the exit status is the
    # conservative "fits", the verdict says whether only the allocator's reserve is in doubt
    status = 1 if fits is False else 0
    if cap is not None and (rep["verdict"] == "does not fit" or getattr(args, "advise", False)) \
            and args.convention not in CONVENTION_NAMES:
        rep["advice"] = advice_report(j.replace(capacity=usable) if j.capacity != usable else j)
        rep["advice_tried"] = advice_tried(j)      # what "no single change of ..." names
    if getattr(args, "sensitivity", False):
        rep["sensitivity"] = sensitivity_report(args, j)
    if args.json:
        said = {k: rep.pop(k) for k in ("verdict", "reserve_fraction_that_fits")}
        emit_json({**rep, "gpu_memory_bytes": cap,
                   "gpu_memory_note": getattr(args, "capacity_note", "as given"), "fits": fits,
                   **said})
        return status
    from .report_text import render_estimate, render_markdown

    print(render_markdown(rep, args, fits=fits, device=device) if getattr(args, "markdown", False)
          else render_estimate(rep, args, fits=fits, device=device,
                               wide=getattr(args, "wide", False)))
    return status


def verdict_report(metric: dict, device: int, usable, j=None) -> dict:
    """``verdict`` and ``reserve_fraction_that_fits`` of a job's report
    (:func:`memsym.terms.allowances.reserve_verdict` on the device's count and its
    fragmentation term, from ``metric`` as :func:`memsym.cli.job_report.metric_report` made
    it); both None without a capacity.  A "tight" job ``j`` is estimated again without the
    margin: at no reserve another stage or phase, with more memory outside the allocator,
    may be the peak, and "tight" must not hide a job that does not fit at all.  The reserve
    fraction is the most-loaded stage's (its peak phase's allocation), the one the margin
    puts over the capacity."""
    from ..terms.allowances import reserve_verdict
    from ..training import job_memory
    from .options import number_out

    if usable is None:
        return {"verdict": None, "reserve_fraction_that_fits": None}
    verdict, x_ = reserve_verdict(device, metric.get("device_fragmentation_bytes", 0),
                                  metric.get("device_fragmentation_fraction", 0), usable)
    if verdict == "tight" and j is not None:
        bare = job_memory(j.replace(fragmentation=0, metric="device")).grouped()
        if sum(number_out(v, round_up=True) for k, v in bare.items() if k != "total") > usable:
            verdict, x_ = "does not fit", None
    return {"verdict": verdict, "reserve_fraction_that_fits": None if x_ is None else float(x_)}


def calibrate_report(args, rep: dict) -> None:
    """``estimate --calibration FILE``: scale the compute part of the step time by the file's
    factor (:mod:`memsym.cli.calibration`); the report's notes say it is applied."""
    from ..errors import InvalidValueError
    from ..hardware import gpu
    from .calibration import apply_calibration, read_calibration

    cal = read_calibration(args.calibration)
    if args.gpu is None or rep.get("step_time_s") is None:
        raise InvalidValueError("--calibration scales the step time: give the job's --gpu and "
                                "--global-batch-size")
    apply_calibration(rep, cal, gpu(args.gpu).name, gpu(args.gpu).arch_class)


def switch_dests() -> tuple:
    """``(flag, argparse destination)`` of every framework switch (:func:`switches`)."""
    return tuple((flag, dest) for flag, dest, _, _ in switches())
