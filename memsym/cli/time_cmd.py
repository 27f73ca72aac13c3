"""``memsym time``: training time, GPU-hours and cost for T tokens (Narayanan Eq. 4)."""

from __future__ import annotations

from .option_table import add_options
from .options import emit_json


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "time", help="training time, GPU-hours and cost for T tokens",
        description="End-to-end training time ~ 8*T*N/(G*X) with full recomputation, "
        "6*T*N/(G*X) without (Narayanan et al. 2021 Eq. 4), X = efficiency x peak dense FLOP/s "
        "of the GPU; GPU-hours and cost at a price per GPU-hour (seed 004).")
    add_options(parser, "time")
    parser.set_defaults(run=run)


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
    from ..terms.compute import DEFAULT_EFFICIENCY, gpu_hours, training_cost, training_time
    from ..values import exact

    params, what = _params(args.model)
    if args.tflops is not None:
        peak, eff, device = exact(args.tflops) * 10**12, sp.Integer(1), None
    else:
        device = gpu(args.gpu)
        peak = exact(device.peak(args.precision))
        eff = DEFAULT_EFFICIENCY if args.efficiency is None else exact(args.efficiency, "efficiency")
    vals = {"T": args.tokens, "N": params, "G": args.gpus, "F": peak, "eta": eff}
    total = training_time(recompute=args.recompute == "full")
    seconds = total.evaluate(vals)
    hours = gpu_hours(total).evaluate(vals)
    cost = None
    if args.price_per_gpu_hour is not None:
        cost = training_cost(total).evaluate(vals, price=exact(args.price_per_gpu_hour))
    factor = 8 if args.recompute == "full" else 6
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
        "efficiency": float(eff),
        "achieved_flops_per_gpu": float(peak * eff),
        "training_flops": factor * args.tokens * params,
        "seconds": float(seconds),
        "days": float(seconds / 86400),
        "gpu_hours": float(hours),
        "price_per_gpu_hour": args.price_per_gpu_hour,
        "cost": None if cost is None else float(cost),
        "formula": f"{factor}*T*N/(G*F*eta)",
        "source": "narayanan, §5.1, Eq. (4); seed004 (cost = price x GPU-hours)",
    }


def run(args) -> int:
    rep = time_report(args)
    if args.json:
        emit_json(rep)
        return 0
    dev = rep["gpu"] or "given throughput"
    lines = [
        f"memsym time: {rep['params']:,} {rep['params_kind']}, {rep['tokens']:,} tokens, "
        f"{rep['gpus']} x {dev}",
        f"achieved {rep['achieved_flops_per_gpu'] / 1e12:.1f} TFLOP/s per GPU "
        f"(efficiency {rep['efficiency']:.3g}); {rep['formula']}  [{rep['source']}]",
        f"training time {rep['days']:.2f} days ({rep['seconds']:,.0f} s)",
        f"GPU-hours     {rep['gpu_hours']:,.0f}",
    ]
    if rep["cost"] is not None:
        lines.append(f"cost          {rep['cost']:,.2f} at {rep['price_per_gpu_hour']} per GPU-hour")
    print("\n".join(lines))
    return 0
