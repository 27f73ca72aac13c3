"""``memsym estimate``: the per-GPU memory breakdown of a training configuration."""

from __future__ import annotations

from .option_table import add_command, fill_model_state_defaults
from .options import emit_json, model_state_setup, number_out
from .training_options import switch_dests

#: JSON keys that are always present in "bytes" for the model-state family.
MODEL_STATE_KEYS = ("weights", "gradients", "optimizer")


def add_parser(sub) -> None:
    add_command(
        sub, run, "estimate", help="per-GPU memory breakdown",
        description="Per-GPU memory of a training configuration, term by term, with sources. "
        "Bytes are exact; GB means 1e9 bytes and GiB 2^30.")


def model_state_report(args) -> dict:
    """The model-state part of the report: exact bytes per term, host bytes, sources."""
    from ..terms.model_state import host_state

    fill_model_state_defaults(args)
    total, values, scheme, widths = model_state_setup(args)
    bd = total.breakdown(values)
    out = {key: bd.get(key, 0) for key in MODEL_STATE_KEYS}
    host = {}
    if args.offload != "none":
        host_total = host_state(scheme, offload=args.offload).subs(widths)
        host = {k: v for k, v in host_total.breakdown(values).items() if k != "total"}
    sources = {term.key: str(term.source) for term in total}
    return {"bytes": out, "host_bytes": host, "values": values, "scheme": scheme,
            "widths": {str(k): int(v) for k, v in widths.items()}, "sources": sources,
            "total": total}


#: (option, dest) of the options that describe a model's training: without a MODEL they
#: would be silently ignored, so they are refused instead.
_NEEDS_MODEL = (
    ("--seq-length", "seq_length"), ("--micro-batch-size", "micro_batch_size"),
    ("--global-batch-size", "global_batch_size"), ("--num-microbatches", "num_microbatches"),
    ("--context-parallel-size", "cp"), ("--expert-model-parallel-size", "ep"),
    ("--expert-tensor-parallel-size", "etp"), ("--virtual-pipeline-model-parallel-size", "vpp"),
    ("--sequence-parallel", "sequence_parallel"),
    ("--decoder-first-pipeline-num-layers", "first_stage_layers"),
    ("--decoder-last-pipeline-num-layers", "last_stage_layers"),
    ("--pipeline-model-parallel-layout", "pipeline_layout"),
    ("--account-for-embedding-in-pipeline-split", "account_for_embedding_in_pipeline_split"),
    ("--account-for-loss-in-pipeline-split", "account_for_loss_in_pipeline_split"),
    ("--recompute-granularity", "recompute_granularity"), ("--use-flash-attn", "use_flash_attn"),
    ("--hidden-dropout", "hidden_dropout"), ("--attention-dropout", "attention_dropout"),
    ("--moe-expert-capacity-factor", "moe_expert_capacity_factor"), ("--workspace", "workspace"),
    ("--nccl-buffers", "nccl_buffers"), ("--fragmentation", "fragmentation"),
    ("--group-query-attention", "group_query_attention"), ("--swiglu", "swiglu"),
    ("--untie-embeddings-and-output-weights", "untie_embeddings_and_output_weights"),
    ("--multi-latent-attention", "multi_latent_attention"), ("--normalization", "normalization"),
    ("--grad-reduce-in-bf16", "grad_reduce_in_bf16"), ("--fp8-param-gather", "fp8_param_gather"),
    ("--fp4-param-gather", "fp4_param_gather"),
    ("--wgrad-deferral-limit", "wgrad_deferral_limit"),
    ("--framework", "framework"),
    ("--recompute-method", "recompute_method"), ("--recompute-num-layers", "recompute_num_layers"),
    ("--recompute-modules", "recompute_modules"),
    *switch_dests(),
)


def check_model_state_only(args) -> None:
    """Without a MODEL only model states are estimated: options that need a model are refused
    (never silently ignored), and ``--world-size`` must equal t*p*d (it gives d without --dp)."""
    from ..errors import InvalidValueError

    given = [opt for opt, dest in _NEEDS_MODEL
             if getattr(args, dest, None) is not None and getattr(args, dest, None) is not False]
    if getattr(args, "schedule", None) is not None:
        given.append("--schedule")
    if given:
        raise InvalidValueError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} "
                                "a MODEL (a preset, a config.json or a Hub id); "
                                "with --params alone memsym estimates model states only")
    _check_muon_states(args)
    ws = getattr(args, "world_size", None)
    if ws is not None:
        t_, p_ = args.tp or 1, args.pp or 1
        if args.dp is None:
            if ws % (t_ * p_):
                raise InvalidValueError(f"world size {ws} is not a multiple of t*p = {t_ * p_}")
            args.dp = ws // (t_ * p_)
        elif args.dp * t_ * p_ != ws:
            raise InvalidValueError(f"world size {ws} != t*p*d = {t_}*{p_}*{args.dp} = "
                                    f"{t_ * p_ * args.dp}")


def _check_muon_states(args) -> None:
    """Megatron's Muon rules on the model states alone, as a job's estimate applies them
    (:data:`memsym.rules.RULES` ``muon-sharding``, ``muon-fp16``): DDP or the (layer-wise)
    distributed optimizer only, and no fp16."""
    if args.optimizer != "muon":
        # both rules hold only under Muon: without it the rule table (and the model package
        # it imports, a twentieth of `memsym estimate`'s start-up) is not needed
        return
    from ..rules import RULES
    from .options import resolve_scheme

    scheme = resolve_scheme(args)
    k = {"muon": args.optimizer == "muon", "precision": args.precision,
         "shards_gradients": scheme in ("zero2", "zero3", "fsdp"), "zero1": scheme == "zero1"}
    for rule in (RULES["muon-sharding"], RULES["muon-fp16"]):
        if bool(rule.test(None, k)):
            raise rule.error(rule.message(None, k))


def run(args) -> int:
    import sympy as sp

    from ..errors import InvalidValueError

    from .training_options import estimate_training, wants_training

    if getattr(args, "job_words", None) is not None and args.job_words.megatron \
            and not wants_training(args):
        raise InvalidValueError(f"{args.job_words.megatron[0]} is a Megatron-LM argument: it "
                                "needs a model (a preset, a config.json or the architecture "
                                "arguments); with --params use memsym's options (--precision, "
                                "--sharding)")

    if args.gpu is not None and args.gpu_memory is None:
        from ..hardware import gpu

        args.gpu_memory = gpu(args.gpu).capacity_bytes  # CUDA total where cited, else datasheet
        args.capacity_note = gpu(args.gpu).capacity_note
    if args.advise and (args.gpu_memory is None or not wants_training(args)):
        raise InvalidValueError("--advise needs a job (a MODEL or a launch command) and a "
                                "capacity (--gpu NAME or --gpu-memory C)")
    if wants_training(args):  # a job: the full training total (job_from_args refuses --params)
        return estimate_training(args)
    from .job_report import PRICING

    pricing = [opt for opt, dest in PRICING + (("--calibration", "calibration"),)
               if getattr(args, dest, None) is not None]
    if pricing:  # --gpu alone only supplies the capacity of the model-state estimate
        raise InvalidValueError(f"{', '.join(pricing)}: communication and time need a model: name "
                                "a preset or config.json (e.g. memsym estimate llama3-8b "
                                "--seq-length 8192 --gpu h100-80gb)")

    check_model_state_only(args)
    rep = model_state_report(args)
    terms = dict(rep["bytes"])
    total = sp.Add(*terms.values())
    from .options import margin_bytes

    cap = args.gpu_memory
    rep["margin_bytes"] = margin = margin_bytes(args, cap)
    fits = None if cap is None else bool(total <= cap - margin)
    values = rep["values"]
    if getattr(args, "sensitivity", False):
        rep["sensitivity"] = model_state_sensitivity(rep)
    if args.json:
        emit_json({
            "bytes": {**{k: number_out(v) for k, v in terms.items()}, "total": number_out(total)},
            "gpu_memory_bytes": cap,
            "gpu_memory_note": getattr(args, "capacity_note", "as given"),
            "margin_bytes": margin,
            "fits": fits,
            # model states alone have no fragmentation term: no reserve band (the training
            # estimate's "tight", memsym.terms.allowances.VERDICTS)
            "verdict": None if fits is None else "fits" if fits else "does not fit",
            "reserve_fraction_that_fits": None,
            "host_bytes": {k: number_out(v) for k, v in rep["host_bytes"].items()},
            "layout": {"dp": int(values["d"]), "tp": int(values["t"]), "pp": int(values["p"])},
            "params": int(values["N"]),
            "sharding": rep["scheme"],
            "convention": args.convention,
            "precision": args.precision,
            "optimizer": args.optimizer,
            "offload": args.offload,
            "bytes_per_parameter": rep["widths"],
            "sources": rep["sources"],
            **({"sensitivity": rep["sensitivity"]} if "sensitivity" in rep else {}),
            "units": "bytes",
        })
        return 0
    text = render_markdown(terms, total, rep, args, fits) if getattr(args, "markdown", False) \
        else render_table(terms, total, rep, args, fits)
    if "sensitivity" in rep:
        from .report_text import render_sensitivity

        block = render_sensitivity(rep["sensitivity"])
        text += "\n\n" + (f"```text\n{block}\n```" if getattr(args, "markdown", False) else block)
    print(text)
    return 0


def model_state_sensitivity(rep: dict) -> list:
    """The model states' slope in d, t and p (exact: the total is a formula in them) and the
    exact change when each is doubled (:mod:`memsym.sensitivity`), JSON-ready."""
    import sympy as sp

    from ..sensitivity import Sensitivity, derivatives
    from ..symbols import lookup
    from .job_report import sensitivity_rows

    total, values = rep["total"], {lookup(k): v for k, v in rep["values"].items()}
    now = sp.Add(*(term.expr for term in total)).xreplace(values)
    rows = []
    for knob, (whole, parts) in derivatives(total, values, ("d", "t", "p")).items():
        x = lookup(knob)
        doubled = sp.Add(*(term.expr for term in total)).xreplace({**values, x: 2 * values[x]})
        rows.append(Sensitivity(knob, int(values[x]), whole, parts,
                                number_out(doubled - now, round_up=True)))
    return sensitivity_rows(rows)


def render_markdown(terms: dict, total, rep: dict, args, fits) -> str:
    """The model-state estimate as Markdown (:func:`memsym.cli.report_text.markdown_table`)."""
    from .report_text import (capacity_label, margin_text, markdown_references, markdown_table,
                              markdown_text, scheme_words)

    values, cap = rep["values"], args.gpu_memory
    rows = {k: number_out(v, round_up=True) for k, v in terms.items()}
    rows["total"] = sum(rows.values())
    refs = list(dict.fromkeys(rep["sources"][k] for k in terms if rep["sources"].get(k)))
    lines = [f"### memsym estimate: model states, {scheme_words(rep['scheme'], args.optimizer)} "
             f"({args.convention} convention)", "",
             f"N = {int(values['N']):,} parameters; d = {values['d']}, t = {values['t']}, "
             f"p = {values['p']}; {args.precision} weights, {args.optimizer} optimizer, "
             f"offload {args.offload}", ""]
    lines += markdown_table(rows, base=cap or rows["total"] or 1,
                            base_name="capacity" if cap else "total", sources=rep["sources"],
                            refs=refs)
    if fits is not None:
        lines += ["", "**" + markdown_text(
            f"GPU memory {capacity_label(args)}{margin_text(rep)}: "
            f"{'fits' if fits else 'does NOT fit'}, headroom "
            f"{(cap - rep['margin_bytes'] - float(total)) / 1e9:.3f} GB") + "**"]
    return "\n".join(lines + markdown_references(refs))


def render_table(terms: dict, total, rep: dict, args, fits) -> str:
    """A plain-text table: bytes, GB (1e9) and GiB (2^30) per term, with sources."""
    values = rep["values"]
    from .report_text import scheme_words

    head = (f"memsym estimate: {scheme_words(rep['scheme'], args.optimizer)} "
            f"({args.convention} convention), "
            f"{args.precision} weights, {args.optimizer} optimizer, offload {args.offload}\n"
            f"N = {int(values['N']):,} parameters; d = {values['d']}, t = {values['t']}, "
            f"p = {values['p']}")
    import sympy as sp

    from ..text import approx

    items = list(terms.items()) + [("total", total)]
    # exact whole bytes, any size; the columns widen so that huge values never run together
    shown = {key: f"{number_out(val, round_up=True):,}" for key, val in items}
    wide = max(22, 2 + max(len(s) for s in shown.values()))
    rows = [f"{'term':<12}{'bytes':>{wide}}{'GB':>12}{'GiB':>12}  source"]
    for key, val in items:
        src = rep["sources"].get(key, "")
        rows.append(f"{key:<12}{shown[key]:>{wide}}{approx(sp.Rational(val) / 10**9, 6):>12}"
                    f"{approx(sp.Rational(val) / 2**30, 6):>12}  {src}")
    lines = [head, ""] + rows
    for key, val in rep["host_bytes"].items():
        lines.append(f"(host memory: {key} {float(val) / 1e9:.3f} GB offloaded)")
    if fits is not None:
        cap = args.gpu_memory
        verdict = "fits" if fits else "does NOT fit"
        from .report_text import capacity_label, margin_text

        lines.append(f"\nGPU memory {capacity_label(args)}{margin_text(rep)}: {verdict}, "
                     f"headroom {(cap - rep['margin_bytes'] - float(total)) / 1e9:.3f} GB")
    return "\n".join(lines)
