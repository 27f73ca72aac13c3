"""``memsym solve``: the smallest degree (or largest size) with which a whole job fits a GPU.

``memsym solve UNKNOWN MODEL ... --gpu-memory C | --gpu NAME`` solves the full per-GPU total
(model states + activations + allowances on the most-loaded stage,
:func:`memsym.job_solver.solve_job`); ``memsym solve dp --params N ...`` (no MODEL) keeps the
model-state-only path of seed 000.  Also :func:`job_from_args`, the Job of the job options,
shared by ``latex`` and ``plot``.
"""

from __future__ import annotations

import sys

from .option_table import SOLVE_UNKNOWNS, add_options
from .options import emit_json


def add_parser(sub) -> None:
    parser = sub.add_parser("solve", help="smallest degree (largest size) that fits",
                            description="Solve the per-GPU memory of a whole job for one unknown: "
                            "the closed form over the positive reals, then the integer, verified "
                            "against the estimate under the launch rules.")
    unknowns = parser.add_subparsers(dest="unknown", metavar="UNKNOWN", parser_class=type(parser))
    unknowns.required = True
    for name, helptext in SOLVE_UNKNOWNS.items():
        sp_ = unknowns.add_parser(name, help=helptext, description=helptext + ": model states + "
                                  "activations + allowances on the most-loaded GPU; candidates a "
                                  "launch rule refuses are skipped. Without MODEL, `solve dp "
                                  "--params N` solves the model states alone (seed 000).")
        # the unknown's own option is not offered (d, t, p are what is solved)
        add_options(sp_, "solve", skip=("dp",) if name in ("dp", "gpus") else ())
        sp_.set_defaults(run=run)


def job_from_args(args):
    """The :class:`memsym.job.Job` of the job options (MODEL, layout, training, allowances,
    ``--gpu``, ``--gpu-memory``), validated once."""
    from .framework_jobs import framework_job_from_args
    from .training_options import job_from_args as build, warn_sequence_parallel

    framework = framework_job_from_args(args)   # a DeepSpeed config or torchtitan TOML
    if framework is not None:
        return framework
    j = build(args)                              # one reading: memsym.cli.reading
    warn_sequence_parallel(args)        # once, after validation
    return j


def run(args) -> int:
    from ..errors import InvalidValueError
    from .training_options import wants_training

    if not wants_training(args):
        if args.unknown != "dp":
            raise InvalidValueError(f"solve {args.unknown} needs a MODEL (a preset, a config.json "
                                    "or a Hub id) and --seq-length")
        return run_dp(args)
    from ..job_solver import solve_job

    fix_dp = args.world_size is not None and getattr(args, "dp", None) is not None
    if args.world_size is not None and args.unknown in ("tp", "pp", "cp") and fix_dp:
        # G and d fixed: the unknown starts at the one value that makes t p c d = G
        others = {"tp": (args.pp or 1) * (args.cp or 1), "pp": (args.tp or 1) * (args.cp or 1),
                  "cp": (args.tp or 1) * (args.pp or 1)}[args.unknown] * args.dp
        if args.world_size % others:
            raise InvalidValueError(f"no {args.unknown} makes t*p*c*d = world size "
                                    f"{args.world_size}")
        setattr(args, args.unknown, args.world_size // others)
    j = job_from_args(args)
    if j.capacity is None:
        raise InvalidValueError(f"solve {args.unknown} needs --gpu-memory C (e.g. 80GB or "
                                "80GiB) or --gpu NAME")
    from .options import margin_bytes

    args.margin_bytes = margin_bytes(args, j.capacity)
    # solved against capacity - margin: the same inequality with an exact integer less
    sol = solve_job(j, args.unknown, j.capacity - args.margin_bytes,
                    world_size=args.world_size if args.unknown not in ("dp", "gpus") else None,
                    fix_dp=fix_dp)
    report_job(sol, j, args)
    return 0


def run_dp(args) -> int:
    """``solve dp --params N ...``: model states alone (seed 000's question)."""
    from ..analysis import smallest
    from ..errors import InvalidValueError
    from .option_table import fill_model_state_defaults
    from .options import margin_bytes, model_state_setup

    cap = args.gpu_memory
    if cap is None and args.gpu:
        from ..hardware import gpu

        cap = gpu(args.gpu).capacity_bytes
    if cap is None:
        raise InvalidValueError("solve dp needs --gpu-memory C (e.g. 80GB or 80GiB) or --gpu NAME")
    # b_hp kept symbolic so the closed form reads as seed 000 writes it:
    # d >= (b_g + b_m + b_o) N / (C p t - N b_hp)
    fill_model_state_defaults(args)
    total, values, _, _ = model_state_setup(args, keep_symbolic=True)
    args.margin_bytes = margin_bytes(args, cap)
    sol = smallest(total, "d", cap - args.margin_bytes, values)
    report(sol, args)
    return 0


def report(sol, args) -> None:
    """Print a :class:`~memsym.analysis.Solution` as JSON or one readable line."""
    if args.json:
        emit_json({
            "unknown": sol.unknown.name,
            "value": sol.value,
            "closed_form": None if sol.closed_form is None else str(sol.closed_form),
            "bound": None if sol.bound is None else float(sol.bound),
            "memory_bytes": int(sol.memory) if sol.memory.is_Integer else float(sol.memory),
            "gpu_memory_bytes": int(sol.capacity) + args.margin_bytes,
            "margin_bytes": args.margin_bytes,
            "latex": sol.latex(),
        })
        return
    rel = "smallest" if sol.relation == ">=" else "largest"
    closed = "" if sol.closed_form is None else f" from {sol.unknown} {sol.relation} {sol.closed_form}"
    bound = "" if sol.bound is None else f" = {float(sol.bound):.4g}"
    print(f"{rel} {sol.unknown} = {sol.value}{closed}{bound}; memory at {sol.unknown} = {sol.value}: "
          f"{float(sol.memory) / 1e9:.3f} GB of {float(sol.capacity) / 1e9:.3f} GB"
          + _margin_note(args))


def _margin_note(args) -> str:
    """`` (capacity 80.000 GB less a 4.000 GB margin)`` where ``--margin`` keeps bytes free."""
    m = getattr(args, "margin_bytes", 0)
    return "" if not m else f" (the capacity less a {m / 1e9:.3f} GB margin, --margin)"


def _bytes(value) -> int:
    """Whole bytes (rounded up: an allocation is never a fraction of a byte)."""
    import sympy as sp

    return int(sp.ceiling(value))


def report_job(sol, j, args) -> None:
    """Print a :class:`~memsym.job_solver.JobSolution`: JSON, or the closed form, the integer,
    the stage and the check as lines."""
    from ..printing import latex

    x = sol.unknown.name
    # the job's own notes (an option without effect on this job, a default it resolved) first,
    # then the solver's: nothing the command line said is dropped unsaid
    notes = list(dict.fromkeys(tuple(j.notes) + tuple(sol.notes)))
    from .hf_launch import hf_reading, reading_lines

    reading = hf_reading(args, j)       # a pasted Hugging Face Trainer launch says so
    if reading:                         # its notes hold the job's, as the launch words them
        notes = list(dict.fromkeys(reading["notes"] + list(sol.notes)))
    if args.json:
        emit_json({**({"reading": reading} if reading else {}),
            "unknown": args.unknown, "symbol": x, "value": sol.value, "relation": sol.relation,
            "closed_form": None if sol.closed_form is None else str(sol.closed_form),
            "closed_form_latex": None if sol.closed_form is None else latex(sol.closed_form),
            "bound": None if sol.bound is None else float(sol.bound),
            "memory_bytes": _bytes(sol.memory),
            "gpu_memory_bytes": int(sol.capacity) + args.margin_bytes,
            "margin_bytes": args.margin_bytes,
            "stage": sol.stage,
            "neighbour": None if sol.neighbour is None else
            {"value": sol.neighbour[0], "memory_bytes": _bytes(sol.neighbour[1])},
            "notes": notes, "job": sol.job.describe(),
            # every admissible candidate evaluated; the answer, then the neighbour, last
            "tried": [{"value": v_, "memory_bytes": _bytes(m_)} for v_, m_ in sol.tried],
        })
        return
    word = "smallest" if sol.relation == ">=" else "largest"
    out = [f"{word} {x} = {sol.value} for {sol.job.describe()} on {float(sol.capacity) / 1e9:.4g} GB "
           f"(most-loaded pipeline stage {sol.stage}){_margin_note(args)}"]
    if sol.closed_form is not None:
        bound = "" if sol.bound is None else f" = {float(sol.bound):.6g}"
        out.append(f"closed form: {x} {sol.relation} {sol.closed_form}{bound}")
    else:
        out.append("closed form: none")
    said = reading_lines(reading)
    out += [f"  {line}" for line in said]
    out += [f"  {note}" for note in notes if f"note: {note}" not in said]
    sys.stdout.write("\n".join(out) + "\n")
