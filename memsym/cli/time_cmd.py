"""``memsym time``: training time, GPU-hours and cost for T tokens.

Without a layout: Narayanan et al.'s Eq. 4, ``8TN/(G X)`` with full recomputation.  With the
job options ``estimate`` takes (a layout, a batch, :data:`memsym.cli.option_rows.TIME_JOB_OPTIONS`)
the same job is priced by the step-time model (:mod:`memsym.timing`), the step estimate
reports: ``ceil(T / (B s))`` steps of that step time.
"""

from __future__ import annotations

from .option_table import add_command
from .options import emit_json


def add_parser(sub) -> None:
    add_command(
        sub, run, "time", help="training time, GPU-hours and cost for T tokens",
        description="End-to-end training time ~ 8*T*N/(G*X) with full recomputation, "
        "6*T*N/(G*X) without (Narayanan et al. 2021 Eq. 4), X = MFU (--mfu) x peak dense FLOP/s "
        "of the GPU; GPU-hours and cost = price x GPU-hours.")


def _params(text: str):
    """(parameter count, label): a count, or a model preset's (active) parameter count."""
    from ..errors import MemsymError
    from ..units import parse_count

    try:
        return parse_count(text), "parameters"
    except MemsymError:
        pass
    from .. import model as models
    from ..text import printable

    # a preset name or a Hugging Face config.json (UnknownNameError with suggestions on a miss)
    arch = models.resolve_model(text)
    arch = models.resolve(arch, seq_length=arch.max_position_embeddings or 1)
    moe = getattr(arch, "is_moe", False)
    moe = moe() if callable(moe) else moe
    if moe and hasattr(models, "active_parameter_count"):
        # FLOPs per token follow the parameters each token meets (Kaplan's 6N with active N)
        return int(models.active_parameter_count(arch)), f"active parameters of {printable(arch.name)}"
    return int(models.parameter_count(arch)), f"parameters of {printable(arch.name)}"


def time_report(args) -> dict:
    """The numbers of ``memsym time`` as a JSON-ready dict."""
    import sympy as sp

    from ..hardware import gpu
    from ..terms.compute import DEFAULT_EFFICIENCY
    from ..terms.training_cost import gpu_hours, training_cost, training_time
    from ..values import exact

    params, what = _params(args.model)
    if args.tflops is not None:
        peak, eff, device = exact(args.tflops) * 10**12, sp.Integer(1), None
    else:
        device = gpu(args.gpu)
        peak = exact(device.peak(args.precision))
        eff = DEFAULT_EFFICIENCY if args.mfu is None else exact(args.mfu, "mfu")
    vals = {"T": args.tokens, "N": params, "G": args.gpus, "F": peak, "eta": eff}
    if args.recompute == "selective":
        from ..errors import InvalidValueError

        raise InvalidValueError("Eq. 4 prices full recomputation (8TN) or none (6TN): "
                                "selective recompute needs a layout (--tp, --global-batch-size, "
                                "...), priced by the step-time model")
    full = args.recompute in (None, "full")       # Eq. 4 as printed: full recomputation
    total = training_time(recompute=full)
    seconds = total.evaluate(vals)
    hours = gpu_hours(total).evaluate(vals)
    cost = None
    if args.price_per_gpu_hour is not None:
        cost = training_cost(total).evaluate(vals, price=exact(args.price_per_gpu_hour))
    factor = 8 if full else 6
    from ..numeric import finite_float

    inputs = {"--tokens": args.tokens, "MODEL": params, "--gpus": args.gpus,
              "achieved FLOP/s": float(peak * eff), "--price-per-gpu-hour": args.price_per_gpu_hour}
    for name, value in (("training time", seconds), ("GPU-hours", hours), ("cost", cost)):
        if value is not None:
            finite_float(value, name, inputs)
    return {
        "params": params,
        "params_kind": what,
        "tokens": args.tokens,
        "gpu": None if device is None else device.name,
        "gpus": args.gpus,
        "precision": args.precision,
        "peak_flops_per_gpu": float(peak) if device is not None else None,
        "mfu": float(eff),
        "achieved_flops_per_gpu": float(peak * eff),
        "training_flops": factor * args.tokens * params,
        "seconds": float(seconds),
        "days": float(seconds / 86400),
        "gpu_hours": float(hours),
        "price_per_gpu_hour": args.price_per_gpu_hour,
        "cost": None if cost is None else float(cost),
        "formula": f"{factor}*T*N/(G*F*eta)",
        "source": "narayanan, §5.1, Eq. (4); cost = price x GPU-hours",
    }


def _job_given(args) -> bool:
    """Whether a job option is given (a layout, a batch: the step-time model prices it); the
    GEMM efficiency alone names no layout, so it is refused without one."""
    from ..errors import InvalidValueError
    from .option_rows import TIME_JOB_OPTIONS

    given = any(getattr(args, dest, None) not in (None, False)
                for dest in TIME_JOB_OPTIONS - {"efficiency"})
    if not given and args.efficiency is not None:
        raise InvalidValueError("--efficiency is the step-time model's GEMM efficiency: give a "
                                "layout (--tp, --global-batch-size, ...), or --mfu for Eq. 4's "
                                "end-to-end fraction of peak")
    return given


#: The job options ``time`` passes to the job by name rather than through the table loop.
_SEPARATE = frozenset({"seq_length", "global_batch_size", "gpus_per_node", "efficiency",
                       "intra_node_bandwidth", "inter_node_bandwidth"})


def job_time_report(args) -> dict:
    """``memsym time`` of a job: its step priced by the step-time model, as ``estimate`` prices
    it, times the number of steps ``ceil(T / (B s))`` the tokens take."""
    import math
    import types

    from ..errors import InvalidValueError
    from ..job import job
    from ..units import parse_count
    from .job_report import communication_report
    from .option_rows import TIME_JOB_OPTIONS
    from .option_table import rows
    from .search import default_global_batch

    try:
        parse_count(args.model)
    except ValueError:
        pass
    else:
        raise InvalidValueError("a layout needs a MODEL (a preset, a config.json or a Hub id), not a "
                                "parameter count: the step-time model prices its GEMMs")
    if args.tflops is not None or args.mfu is not None:
        raise InvalidValueError("--tflops and --mfu price Narayanan's Eq. 4 (no layout); with a "
                                "layout the step-time model prices every GEMM (--efficiency "
                                "overrides its GEMM efficiency)")
    notes = []
    seq = args.seq_length or 4096
    batch = args.global_batch_size
    if batch is None and getattr(args, "num_microbatches", None) is not None:
        pass                 # B = m b d, the job's own (below)
    elif batch is None:
        batch = default_global_batch(seq)
        notes.append(f"global batch {batch} sequences assumed (about 4M tokens per step, "
                     "Llama 2's; give --global-batch-size)")
    # the job fields the table's rows set (memsym.cli.option_rows: one meaning per option)
    opts = {}
    for o in rows("time"):
        if o.dest in TIME_JOB_OPTIONS and o.field and o.dest not in _SEPARATE:
            value = getattr(args, o.dest, None)
            if o.action and value:
                opts[o.field] = o.value
            elif not o.action and value is not None:
                opts[o.field] = value
    j = job(args.model, world_size=args.gpus, seq_length=seq, global_batch_size=batch,
            precision=args.precision, gpu=args.gpu,
            **({} if args.recompute is None else {"recompute": args.recompute}),
            gpus_per_node=args.gpus_per_node, **opts)
    if batch is None:        # m micro-batches of b on each of d replicas
        batch = j.training.batch.num_microbatches * j.training.batch.micro_batch_size * j.layout.d
    cluster = types.SimpleNamespace(gpu=args.gpu, efficiency=args.efficiency,
                                    gpus_per_node=args.gpus_per_node,
                                    intra_node_bandwidth=args.intra_node_bandwidth,
                                    inter_node_bandwidth=args.inter_node_bandwidth)
    step = communication_report(cluster, j)
    steps = math.ceil(args.tokens / (batch * seq))
    seconds = steps * step["step_time_s"]
    hours = seconds * args.gpus / 3600
    cost = None if args.price_per_gpu_hour is None else hours * args.price_per_gpu_hour
    lay = j.layout
    return {
        "method": "step-time model (memsym.timing), the step estimate prices",
        "model": j.model.name, "tokens": args.tokens, "gpu": args.gpu, "gpus": args.gpus,
        "layout": {"tp": lay.t, "pp": lay.p, "cp": lay.c, "dp": lay.d, "ep": lay.e,
                   "vpp": lay.v or 1},
        "seq_length": seq, "global_batch_size": batch, "steps": steps,
        "step_time_s": step["step_time_s"], "mfu": step.get("mfu"),
        "seconds": float(seconds), "days": float(seconds / 86400), "gpu_hours": float(hours),
        "price_per_gpu_hour": args.price_per_gpu_hour,
        "cost": None if cost is None else float(cost), "notes": notes + list(j.notes),
    }


def run(args) -> int:
    if _job_given(args):
        rep = job_time_report(args)
        if args.json:
            emit_json(rep)
            return 0
        lay = ", ".join(f"{k} {v}" for k, v in rep["layout"].items())
        lines = [f"memsym time: {rep['model']}, {rep['tokens']:,} tokens, {rep['gpus']} x "
                 f"{rep['gpu']} ({lay}), {rep['method']}",
                 f"{rep['steps']:,} steps of {rep['global_batch_size']} x {rep['seq_length']} "
                 f"tokens at {rep['step_time_s']:.3f} s"
                 + (f" (MFU {rep['mfu']:.1%})" if rep.get("mfu") else ""),
                 f"training time {rep['days']:.2f} days ({rep['seconds']:,.0f} s)",
                 f"GPU-hours     {rep['gpu_hours']:,.0f}"]
        if rep["cost"] is not None:
            lines.append(f"cost          {rep['cost']:,.2f} at {rep['price_per_gpu_hour']} per "
                         "GPU-hour")
        lines += [f"note: {n}" for n in rep["notes"]]
        print("\n".join(lines))
        return 0
    rep = time_report(args)
    if args.json:
        emit_json(rep)
        return 0
    dev = rep["gpu"] or "given throughput"
    lines = [
        f"memsym time: {rep['params']:,} {rep['params_kind']}, {rep['tokens']:,} tokens, "
        f"{rep['gpus']} x {dev}",
        f"achieved {rep['achieved_flops_per_gpu'] / 1e12:.1f} TFLOP/s per GPU "
        f"(MFU {rep['mfu']:.3g}); {rep['formula']}  [{rep['source']}]",
        f"training time {rep['days']:.2f} days ({rep['seconds']:,.0f} s)",
        f"GPU-hours     {rep['gpu_hours']:,.0f}",
    ]
    if rep["cost"] is not None:
        lines.append(f"cost          {rep['cost']:,.2f} at {rep['price_per_gpu_hour']} per GPU-hour")
    print("\n".join(lines))
    return 0
