"""``memsym solve``: the smallest degree (or largest size) that fits a GPU."""

from __future__ import annotations

from .options import add_model_state_options, emit_json

#: unknown -> (registry symbol, smallest or largest, help)
UNKNOWNS = {
    "dp": ("d", "smallest", "smallest data-parallel size d that fits"),
}


def add_parser(sub) -> None:
    parser = sub.add_parser("solve", help="smallest degree that fits",
                            description="Solve the per-GPU memory for one unknown: the closed form "
                            "over the positive reals, then the integer, verified by substitution.")
    unknowns = parser.add_subparsers(dest="unknown", metavar="UNKNOWN", parser_class=type(parser))
    unknowns.required = True
    dp = unknowns.add_parser("dp", help=UNKNOWNS["dp"][2], description=UNKNOWNS["dp"][2])
    add_model_state_options(dp, dp=False)
    dp.add_argument("--json", action="store_true", help="one JSON object on stdout")
    dp.set_defaults(run=run_dp)
    # issue 3: sizing a whole training configuration (MODEL and Megatron-LM options)
    from .training_options import add_training_options, solve_training

    for name, helptext in (("micro-batch-size", "largest micro-batch size that fits"),
                           ("pp", "smallest pipeline-parallel size that fits"),
                           ("tp", "smallest tensor-parallel size that fits")):
        sp_ = unknowns.add_parser(name, help=helptext, description=helptext +
                                  " (valid layouts only: divisibility is respected)")
        add_model_state_options(sp_)
        add_training_options(sp_)
        sp_.add_argument("--json", action="store_true", help="one JSON object on stdout")
        sp_.set_defaults(run=solve_training)


def run_dp(args) -> int:
    from ..analysis import smallest
    from ..errors import InvalidValueError
    from .options import model_state_setup

    if args.gpu_memory is None:
        raise InvalidValueError("solve dp needs --gpu-memory C (e.g. 80GB or 80GiB)")
    # b_hp kept symbolic so the closed form reads as seed 000 writes it:
    # d >= (b_g + b_m + b_o) N / (C p t - N b_hp)
    total, values, _, _ = model_state_setup(args, keep_symbolic=True)
    sol = smallest(total, "d", args.gpu_memory, values)
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
            "gpu_memory_bytes": int(sol.capacity),
            "latex": sol.latex(),
        })
        return
    rel = "smallest" if sol.relation == ">=" else "largest"
    closed = "" if sol.closed_form is None else f" from {sol.unknown} {sol.relation} {sol.closed_form}"
    bound = "" if sol.bound is None else f" = {float(sol.bound):.4g}"
    print(f"{rel} {sol.unknown} = {sol.value}{closed}{bound}; memory at {sol.unknown} = {sol.value}: "
          f"{float(sol.memory) / 1e9:.3f} GB of {float(sol.capacity) / 1e9:.3f} GB")
