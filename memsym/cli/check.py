"""``memsym check LOG JOB``: memsym's prediction against a run's own log, term by term.

The log (:mod:`memsym.readers.logs`: Megatron-LM, Megatron-Bridge or torchtitan) gives the
measured step time (the median after the warm-up) and the peak memory the framework printed,
each under its own metric (Megatron's ``max allocated`` is ``torch.cuda.max_memory_allocated``,
``max reserved`` and torchtitan's ``memory: X GiB`` are ``torch.cuda.max_memory_reserved``).
The job (the same options as ``memsym estimate``, with ``--gpu``) gives the prediction: the
step time and its parts (compute, memory-bound work, exposed communication, bubble, optimizer,
other) and, for each metric the log prints, the per-GPU total under that metric
(``--metric``) with its model states, activations and allowances.  The gap is explained term
by term: with the other parts as predicted, what the compute part (or the activations) would
have to be to match the measurement.

``--calibrate FILE`` writes the factor on the compute part that makes the predicted step time
equal the measured median (:mod:`memsym.cli.calibration`); ``--calibration FILE`` applies one,
and the output says so.
"""

from __future__ import annotations

from fractions import Fraction

from ..vocabulary import CONVENTION_NAMES
from .option_table import add_command

__all__ = ["add_parser", "run", "check_report", "render_check"]

#: The step time's parts as ``check`` groups them: (name, keys of ``step_time_parts_s``).
STEP_PARTS = (("compute", ("compute",)), ("memory", ("memory",)),
              ("comm", ("tp", "ep", "cp", "pp", "dp")), ("bubble", ("bubble",)),
              ("optimizer", ("optimizer",)))

#: What each log metric is, for the reader.
METRIC_TEXT = {"allocated": ("max allocated", "torch.cuda.max_memory_allocated"),
               "reserved": ("max reserved", "torch.cuda.max_memory_reserved")}

_GIB = 2**30


def add_parser(sub) -> None:
    add_command(
        sub, run, "check", help="predicted against measured: a training log and its job",
        description="Read a Megatron-LM, Megatron-Bridge or torchtitan training log (its "
        "iteration and memory lines) and the job that ran (the options of memsym estimate, "
        "with --gpu), and print predicted against measured step time and peak memory, the gap "
        "explained term by term. The step time is the median after the warm-up (the first "
        "10 % of the iteration lines, at least 2; --warmup-lines N).")


def _refuse(message: str):
    from ..errors import InvalidValueError

    raise InvalidValueError(message)


def _job(args):
    """The validated job and its report (step time priced on ``--gpu``)."""
    from ..hardware import gpu
    from .job_report import report_for
    from .framework_jobs import framework_job_from_args
    from .training_options import job_from_args, wants_training

    if not wants_training(args):
        _refuse("check needs the job that ran: a MODEL (a preset, a config.json or a Hub id), its "
                "launch command or a framework config, with its layout and --global-batch-size")
    if args.gpu is None:
        _refuse("check needs --gpu NAME, the GPU the log was measured on (memsym gpus)")
    if args.convention in CONVENTION_NAMES:
        _refuse(f"check compares memsym's own estimate; --convention {args.convention} is the "
                "framework's estimator (use --convention framework)")
    device = gpu(args.gpu)
    if args.gpu_memory is None:
        args.gpu_memory = device.capacity_bytes
    j = framework_job_from_args(args) or job_from_args(args)
    rep = report_for(args, j)
    rep.pop("_total", None)
    if rep.get("step_time_s") is None:
        _refuse("check needs the step time: give the job's --global-batch-size")
    return j, rep, device


def _memory_rows(j, log) -> list:
    """Predicted against measured peak memory, one row per metric the log prints."""
    from ..groups import ALLOWANCE_KEYS, STATE_KEYS
    from ..training import job_memory
    from .options import number_out

    rows = []
    for metric in ("allocated", "reserved"):
        peak = log.peak(metric)
        if peak is None:
            continue
        est = job_memory(j.replace(metric=metric))
        terms = {k: number_out(v, round_up=True) for k, v in est.grouped().items() if k != "total"}
        groups = {"states": 0, "activations": 0, "allowances": 0}
        for key, val in terms.items():
            group = "allowances" if key in ALLOWANCE_KEYS else \
                "states" if key in STATE_KEYS else "activations"
            groups[group] += val
        predicted = sum(terms.values())
        implied = peak.bytes - groups["states"] - groups["allowances"]
        log_name, torch_name = METRIC_TEXT[metric]
        rows.append({
            "metric": metric, "log_metric": log_name, "is": torch_name,
            "measured_bytes": peak.bytes, "printed": peak.printed, "rank": peak.rank,
            "after_iteration": peak.iteration, "line": peak.line,
            "readings": sum(1 for m in log.memory if m.metric == metric),
            "predicted_bytes": predicted, "groups_bytes": groups, "term_bytes": terms,
            "gap_bytes": peak.bytes - predicted, "ratio": peak.bytes / predicted,
            "implied_activations_bytes": implied,
            "stage": {"index": est.stage, "role": est.role}})
    return rows


def check_report(args) -> dict:
    """The JSON-ready comparison of ``memsym check`` (writes the calibration if asked)."""
    from ..readers.logs import FRAMEWORK_NAMES, WARMUP_MIN, read_log, steady_step
    from ..text import printable
    from .calibration import (apply_calibration, calibration_record, factor_for,
                              read_calibration, write_calibration)

    log = read_log(args.log)       # a bad log is refused before the job is priced
    if args.calibrate and args.calibration:
        _refuse("give --calibrate FILE (write one) or --calibration FILE (apply one), not both")
    cal = read_calibration(args.calibration) if args.calibration else None
    j, rep, device = _job(args)
    gpu_name = device.name
    skipped, measured, kept = steady_step(log, args.warmup_lines, tokens_per_step=rep["tokens_per_step"],
                                          gpus=rep["gpus"])
    parts = dict(rep["step_time_parts_s"])
    predicted = Fraction(rep["step_time_s"])
    uncalibrated = {"step_s": predicted, "compute_s": Fraction(parts["compute"])}
    if cal is not None:
        predicted = apply_calibration(rep, cal, gpu_name, device.arch_class)
        parts = dict(rep["step_time_parts_s"])
    shown = {name: sum(parts.get(k, 0.0) for k in keys) for name, keys in STEP_PARTS}
    shown["other"] = float(predicted) - sum(shown.values())
    compute = Fraction(parts["compute"])
    gap = measured - predicted
    step = {"measured_s": float(measured), "predicted_s": float(predicted),
            "ratio": float(measured / predicted), "gap_s": float(gap), "parts_s": shown,
            "implied_compute_s": float(compute + gap),
            "implied_compute_factor": float((compute + gap) / compute) if compute else None,
            "per_iteration_s": [float(t) for t in _times(log, kept, rep)],
            "iterations": [i.iteration for i in kept]}
    tflops = [i.tflops for i in kept if i.tflops is not None]
    if tflops:
        from statistics import median

        step["log_tflops_per_gpu_median"] = float(median(tflops))
    out = {"log": {"name": printable(str(args.log), 200), "sha256": log.sha256,
                   "framework": log.framework, "framework_name": FRAMEWORK_NAMES[log.framework],
                   "lines": log.lines, "iteration_lines": len(log.iterations)},
           "warmup": {"skipped": skipped, "kept": len(kept),
                      "rule": "--warmup-lines" if args.warmup_lines is not None else
                      f"the first 10 % of the iteration lines, at least {WARMUP_MIN}"},
           "job": {"model": rep["model"], "layout": rep["layout"], "gpu": gpu_name,
                   "global_batch": rep["global_batch"], "tokens_per_step": rep["tokens_per_step"],
                   "gpus": rep["gpus"], "seq_length": rep["training"]["seq_length"],
                   "micro_batch_size": rep["training"]["micro_batch_size"],
                   "recompute": rep["training"]["recompute"]},
           "step_time": step, "memory": _memory_rows(j, log),
           "calibration": rep.get("calibration"), "calibrated": None,
           "notes": list(rep.get("notes", [])), "units": "seconds, bytes"}
    if getattr(args, "metric", None) is not None:
        out["notes"].append(f"--metric {args.metric} not used: each memory figure is compared "
                            "under the metric the log prints it in")
    if args.calibrate:
        from datetime import datetime, timezone

        k = factor_for(uncalibrated["step_s"], uncalibrated["compute_s"], measured)
        record = calibration_record(
            k, gpu=gpu_name, gpu_class=device.arch_class, job=out["job"],
            log_sha256=log.sha256, log_name=out["log"]["name"],
            framework=log.framework, measured_s=measured, predicted_s=uncalibrated["step_s"],
            date=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        write_calibration(args.calibrate, record)
        out["calibrated"] = {"file": printable(str(args.calibrate), 200),
                             "compute_factor": float(k),
                             "compute_factor_exact": record["compute_factor"]}
    return out


def _times(log, kept, rep) -> list:
    from ..readers.logs import LOG_RATE

    if LOG_RATE[log.framework] == "tokens_per_s":
        return [Fraction(rep["tokens_per_step"]) / (i.tokens_per_s * rep["gpus"]) for i in kept]
    return [i.step_time_s for i in kept]


def _gib(value) -> str:
    return f"{value / _GIB:.2f}"


def _wrap(text: str) -> list:
    """``text`` (made printable) in lines of at most 100 columns, continuations indented."""
    import textwrap

    from ..text import printable

    return textwrap.wrap(printable(text, 2000), width=100, subsequent_indent="  ",
                         break_on_hyphens=False) or [""]


def render_check(rep: dict) -> str:
    """The comparison as text, at most 100 columns."""
    lg, st, job = rep["log"], rep["step_time"], rep["job"]
    lay = job["layout"]
    lines = _wrap(f"memsym check: {lg['name']} ({lg['framework_name']}, "
                  f"{lg['iteration_lines']} iteration lines, sha256 {lg['sha256'][:12]})")
    lines += _wrap(f"job: {job['model']} on {job['gpus']} x {job['gpu']}: d = {lay['dp']}, "
                   f"t = {lay['tp']}, p = {lay['pp']}, c = {lay['cp']}, e = {lay['ep']}; "
                   f"global batch {job['global_batch']}, s = {job['seq_length']}, "
                   f"b = {job['micro_batch_size']}, recompute {job['recompute']}")
    lines += _wrap(f"warm-up: {rep['warmup']['skipped']} iteration lines skipped "
                   f"({rep['warmup']['rule']}); the median of the {rep['warmup']['kept']} after")
    lines.append("")
    if rep["calibration"]:
        cal = rep["calibration"]
        lines += _wrap(f"CALIBRATION APPLIED: compute part x {cal['compute_factor']:.4g} "
                       f"from {cal['file']} (made {cal['date']}; uncalibrated step "
                       f"{cal['uncalibrated_step_time_s']:.4g} s)")
    lines += [f"{'step time [s]':<32}{'predicted':>12}{'measured':>12}{'measured/pred.':>16}",
              f"{'total':<32}{st['predicted_s']:>12.4g}{st['measured_s']:>12.4g}"
              f"{st['ratio']:>16.3f}"]
    labels = {"compute": "compute (GEMMs, attention)", "memory": "memory-bound",
              "comm": "comm (exposed tp ep cp pp dp)", "bubble": "pipeline bubble",
              "optimizer": "optimizer step", "other": "other (embedding, output)"}
    for key, val in st["parts_s"].items():
        lines.append(f"  {labels[key]:<30}{val:>12.4g}")
    if st["implied_compute_factor"] is not None:
        lines += _wrap(f"gap {st['gap_s']:+.4g} s: with the other parts as predicted, the "
                       f"compute part measured is {st['implied_compute_s']:.4g} s "
                       f"(x {st['implied_compute_factor']:.3g} of the predicted)")
    if "log_tflops_per_gpu_median" in st:
        lines.append(f"the log's own throughput: {st['log_tflops_per_gpu_median']:.4g} TFLOP/s "
                     "per GPU (median; its FLOP count, not memsym's)")
    if rep["calibrated"]:
        c = rep["calibrated"]
        lines += _wrap(f"calibration written: {c['file']} (compute part x "
                       f"{c['compute_factor']:.4g}: the predicted step time equals the measured "
                       "median; apply it with --calibration FILE)")
    for row in rep["memory"]:
        g = row["groups_bytes"]
        lines += ["", f"peak memory, {row['log_metric']} = {row['is']} (--metric {row['metric']})",
                  f"{'[GiB]':<32}{'predicted':>12}{'measured':>12}{'measured/pred.':>16}",
                  f"{'total':<32}{_gib(row['predicted_bytes']):>12}"
                  f"{_gib(row['measured_bytes']):>12}{row['ratio']:>16.3f}"]
        for key in ("states", "activations", "allowances"):
            lines.append(f"  {key:<30}{_gib(g[key]):>12}")
        lines += _wrap(f"gap {(row['gap_bytes']) / _GIB:+.2f} GiB: with states and allowances "
                       f"as predicted, the activations measured are "
                       f"{_gib(row['implied_activations_bytes'])} GiB (predicted "
                       f"{_gib(g['activations'])})")
        where = "" if row["rank"] is None else f"rank {row['rank']}, "
        lines += _wrap(f"measured: the largest of {row['readings']} reading(s) ({where}after "
                       f"iteration {row['after_iteration']}, line {row['line']}): "
                       f"{row['printed']}; predicted: pipeline stage {row['stage']['index']} "
                       f"({row['stage']['role']}), the heaviest")
    if not rep["memory"]:
        lines += [""] + _wrap("peak memory: the log prints none (Megatron: report_memory after "
                              "the first logged iteration; torchtitan: memory: on each step line)")
    for note in rep["notes"]:
        lines += _wrap(f"note: {note}")
    return "\n".join(lines)


def run(args) -> int:
    from .options import emit_json

    rep = check_report(args)
    if args.json:
        emit_json(rep)
    else:
        print(render_check(rep))
    return 0
