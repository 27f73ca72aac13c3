"""``memsym latex``: the derivation of the per-GPU model-state memory as LaTeX."""

from __future__ import annotations

from .options import add_model_state_options


def add_parser(sub) -> None:
    parser = sub.add_parser("latex", help="the derivation as LaTeX",
                            description="The derivation, one underbrace per term, as an amsmath "
                            "equation* block (valid inside any amsmath document).")
    add_model_state_options(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    from ..printing import derivation_latex
    from .options import model_state_setup
    from ..terms.model_state import byte_widths, model_state
    from .options import resolve_scheme

    scheme = resolve_scheme(args)
    convention = "megatron-lm" if args.convention == "megatron-bridge" else args.convention
    total = model_state(scheme, convention=convention, offload=args.offload)
    widths = byte_widths(scheme, args.precision, args.optimizer, convention)
    # keep b_hp symbolic as seed 000 does; substitute the other widths
    body = derivation_latex(total, {k: v for k, v in widths.items() if k.name != "b_hp"})
    print("\\begin{equation*}\n" + body + "\n\\end{equation*}")
    return 0
