"""``memsym min-gpus``: the fewest GPUs on which a training fits, and the layout to use."""

from __future__ import annotations

from ..job import muon_no_effect_note
from .option_table import add_command
from .options import emit_json
from .search import Progress, search_model, search_options
from .search_report import bytes_json, layout_json, sharding_words


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
    options = search_options(args)
    try:
        res = min_gpus(search_model(args), args.gpu, max_gpus=args.max_gpus, progress=prog,
                       **options)
    finally:
        prog.close()
    row = dict(res.layout)
    row.setdefault("m", None)
    # as a search JSON row says it: with the overlaps it launches and, for a Megatron-FSDP
    # scheme, its strategy (megatron_fsdp, from memsym.search.job_fields.MEGATRON_FSDP_STRATEGY)
    lay = layout_json(row, options["framework"])
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
    print("layout: " + layout_text(lay, options.get("optimizer")))
    print(res.explanation() + "  (C: GPU memory in bytes"
          + (f", less the {args.margin_bytes / 1e9:.4g} GB --margin)" if args.margin_bytes
             else ")"))
    muon = muon_no_effect_note(options.get("optimizer"), options.get("held", {}))
    for note in res.notes + ([muon] if muon else []):
        print("note: " + note)
    print("bytes on the most-loaded GPU: " + ", ".join(
        f"{k} {float(v) / 1e9:.3f} GB" for k, v in res.bytes.items()))
    return 0


def layout_text(lay: dict, optimizer: str | None = None) -> str:
    """The text of a :func:`memsym.cli.search_report.layout_json` layout: its knobs as ``name value``
    (the launch overlaps left to the JSON, as the search table leaves them), a Megatron-FSDP
    scheme in Megatron-LM's words, its ``--data-parallel-sharding-strategy`` beside it (what
    ``memsym search --emit megatron`` launches), any other scheme as ``memsym estimate`` says
    it under ``optimizer`` (:func:`memsym.cli.search_report.sharding_words`).

    Examples
    --------
    >>> layout_text({"tp": 2, "dp": 4, "sharding": "fsdp", "num_microbatches": None,
    ...              "overlap_grad_reduce": True, "megatron_fsdp": "optim_grads_params"})
    'tp 2, dp 4, sharding fsdp (Megatron-FSDP optim_grads_params)'
    >>> layout_text({"tp": 1, "sharding": "zero3"})
    'tp 1, sharding zero3'
    >>> layout_text({"tp": 2, "ep": 4, "etp": 1}), layout_text({"tp": 2, "etp": 2})
    ('tp 2, ep 4, etp 1', 'tp 2')
    >>> layout_text({"tp": 1, "sharding": "distributed-optimizer"}, "muon")
    'tp 1, sharding distributed-optimizer (layer-wise under muon)'
    """
    said = []
    for key, value in lay.items():
        if value is None or key in ("megatron_fsdp", "overlap_grad_reduce",
                                    "overlap_param_gather"):
            continue
        if key == "etp" and value == lay.get("tp"):
            continue        # the experts' TP said only where it is not tp (its default)
        if key == "sharding":
            value = sharding_words(value, lay.get("megatron_fsdp"), optimizer)
        said.append(f"{key} {value}")
    return ", ".join(said)
