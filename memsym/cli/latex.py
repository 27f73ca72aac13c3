"""``memsym latex``: the derivation of the per-GPU memory for design documents.

``memsym latex MODEL ...`` (a whole job: model, layout, training) writes the job's design
document from :mod:`memsym.document` (``--paper a4|letter``, ``--solve UNKNOWN`` with
``--gpu-memory`` or ``--gpu``); ``memsym latex --params N ...`` the model states alone.

Default: an ``equation*`` block.  ``--snippet``: an ``align*`` block to ``\\input``.
``--document``: a standalone amsmath document (derivation, per-term table with sources and,
given ``--params`` and ``--gpu-memory`` without ``--dp``, the smallest d).  ``--markdown``:
the same with ``$$`` math for code-hosting sites.  ``--output FILE`` writes the file only
once everything has been computed.
"""

from __future__ import annotations

import sys

from .option_table import add_command


def add_parser(sub) -> None:
    add_command(sub, run, "latex", help="the derivation as LaTeX",
                description="The derivation, one underbrace per term, as LaTeX valid "
                "inside any amsmath document.")


def _write(args, text: str) -> None:
    from .output import write_file

    text = text + ("" if text.endswith("\n") else "\n")
    if args.output:
        # atomically, and refusing a FIFO or a device (a FIFO would block: issue 15)
        write_file(args.output, text)
    else:
        sys.stdout.write(text)


def run_job(args) -> int:
    """The whole job's document, snippet or Markdown (default: the snippet)."""
    import argparse

    from .. import document
    from ..errors import InvalidValueError
    from .job_report import cluster_known, communication_report
    from .solve import job_from_args

    j = job_from_args(args)
    solution = None
    if args.solve is not None:
        if j.capacity is None:
            raise InvalidValueError("--solve needs --gpu-memory C or --gpu NAME")
        from ..job_solver import solve_job

        solution = solve_job(j, args.solve, j.capacity)
        j = solution.job          # the document shows the job at the solved value
    cluster = None
    if (args.markdown or args.document) and cluster_known(args):
        # the step time and traffic `memsym estimate --gpu ... --json` reports for this job
        # on the cluster the same options describe (--gpus-per-node, the bandwidths,
        # --efficiency; the GPU's usual cluster where they are not given)
        priced = argparse.Namespace(**{k: getattr(args, k, None) for k in (
            "gpu", "efficiency", "gpus_per_node", "intra_node_bandwidth",
            "inter_node_bandwidth", "mfu_flops")})
        cluster = communication_report(priced, j)
    if args.markdown:
        text = document.job_markdown(j, solve=solution, cluster=cluster)
    elif args.document:
        text = document.job_document(j, solve=solution, paper=args.paper, cluster=cluster)
    else:
        text = document.job_snippet(j, solve=solution)
    _write(args, text)
    return 0


def run(args) -> int:
    from .training_options import wants_training

    if wants_training(args):
        return run_job(args)
    from .. import printing
    from ..analysis import smallest
    from ..terms.model_state import model_state
    from .option_table import fill_model_state_defaults
    from .options import model_state_convention, model_state_setup

    fill_model_state_defaults(args)
    # keep b_hp symbolic as seed 000 does; `rest` holds the other widths, substituted
    solved, values, scheme, rest = model_state_setup(args, need_params=False, keep_symbolic=True)
    # the derivation starts from the widths as symbols, then substitutes `rest`
    total = model_state(scheme, convention=model_state_convention(args), offload=args.offload)
    if args.dp is None:
        values.pop("d")      # d stays the unknown (solved below when N and C are given)
    solution = None
    if args.params is not None and args.gpu_memory is not None and args.dp is None:
        solution = smallest(solved, "d", args.gpu_memory, values)
    if solution is not None:  # the table shows the values at the solved d
        values["d"] = solution.value
    if args.document:
        text = printing.design_document(total, rest, values, solution,
                                        title=f"Per-GPU model-state memory ({scheme})")
    elif args.snippet:
        text = printing.snippet_latex(total, rest, solution)
    elif args.markdown:
        text = printing.markdown_report(total, rest, values, solution)
    else:
        body = printing.derivation_latex(total, rest)
        if solution is not None:
            body += "\n\\end{equation*}\n\\begin{equation*}\n" + solution.latex()
        text = "\\begin{equation*}\n" + body + "\n\\end{equation*}"
    _write(args, text)
    return 0
