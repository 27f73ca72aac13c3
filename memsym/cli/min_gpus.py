"""``memsym min-gpus``: the fewest GPUs on which a training fits, and the layout to use."""

from __future__ import annotations

from .option_table import add_command
from .options import emit_json
from .search import (Progress, bytes_json, layout_json, megatron_fsdp_of, search_model,
                     search_options)


def add_parser(sub) -> None:
    add_command(
        sub, run, "min-gpus", help="fewest GPUs that fit, with the layout",
        description="The smallest number of GPUs (over every layout the rules allow) on which "
        "the training fits; the boundary d >= f(N, C) is solved in closed form where the total "
        "allows, then the integer. GB = 1e9 bytes.")


def run(args) -> int:
    import sympy as sp

    from ..search import min_gpus

    prog = Progress("memsym min-gpus")
    try:
        res = min_gpus(search_model(args), args.gpu, max_gpus=args.max_gpus, progress=prog,
                       **search_options(args))
    finally:
        prog.close()
    row = dict(res.layout)
    row.setdefault("m", None)
    lay = {**layout_json(row),
           **megatron_fsdp_of(getattr(args, "framework", None) or "megatron", row["sharding"])}
    if args.json:
        emit_json({
            "gpus": res.gpus, "layout": lay, "bytes": bytes_json(res.bytes),
            "method": res.method, "margin_bytes": args.margin_bytes,
            "closed_form": None if res.closed_form is None else sp.sstr(res.closed_form),
            "bound": None if res.bound is None else float(res.bound),
            "units": "bytes",
        })
        return 0
    print(f"memsym min-gpus: {res.gpus} GPUs")
    print("layout: " + ", ".join(f"{k} {v}" for k, v in lay.items() if v is not None))
    print(res.explanation() + "  (C: GPU memory in bytes"
          + (f", less the {args.margin_bytes / 1e9:.4g} GB --margin)" if args.margin_bytes
             else ")"))
    for note in res.notes:
        print("note: " + note)
    print("bytes on the most-loaded GPU: " + ", ".join(
        f"{k} {float(v) / 1e9:.3f} GB" for k, v in res.bytes.items()))
    return 0
