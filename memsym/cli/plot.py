"""``memsym plot KIND``: the charts of a job, written to PNG, PDF or SVG by the file's extension.

``breakdown`` (one bar per pipeline stage, one labelled segment per term, against the
capacity), ``memory-vs`` (memory against d, t, p, c, b or s, the solved value and the floor
marked), ``feasibility`` (a layout search over two knobs: fits or step time, the best layout
starred, the binding term per cell), ``step-time`` (the step time by part) and ``timeline``
(memory over the step's phases).  Each KIND is a subcommand with its own help and options (:data:`KIND_HELP`); this
module draws from an estimate the caller has already computed (:func:`add_plot_parser`,
:func:`run_plot`).
"""

from __future__ import annotations

from .option_table import PLOT_KINDS, PLOT_UNKNOWNS, add_options

__all__ = ["KINDS", "UNKNOWNS", "KIND_HELP", "add_plot_parser", "run_plot", "phase_segments"]

#: Plot kinds and the unknowns memory-vs draws against (memsym.cli.option_table).
KINDS, UNKNOWNS = PLOT_KINDS, PLOT_UNKNOWNS

#: The cluster's pricing options: only the kinds that price the step (step-time, feasibility)
#: take them.
_CLUSTER = ("gpus_per_node", "intra_node_bandwidth", "inter_node_bandwidth", "efficiency")

#: kind -> (one-line help, description, the plot options it does not take).
KIND_HELP = {
    "breakdown": (
        "per-GPU memory by term, one bar per pipeline stage or per phase of the step",
        "One bar per pipeline stage the estimate compares (the first, the last, and one of "
        "each distinct middle make-up; the most-loaded named), or with --by phase one bar per "
        "phase of the step (forward, loss-backward, backward, optimizer step) on the "
        "most-loaded stage; each segment one row of the report as the peak phase holds it "
        "(the bytes of memsym estimate --json with the transients placed: states not yet "
        "made taken off their row, freed activations off the activations, the rest a "
        "transients segment) labelled with its GB and its share of the capacity; the "
        "capacity line drawn "
        "when --gpu or --gpu-memory gives one, and with --margin the capacity less the margin.",
        ("vs", "candidates", "map_x", "map_y", "map_value") + _CLUSTER),
    "memory-vs": (
        "memory per GPU against one unknown",
        "Memory per GPU against one unknown (--vs dp, tp, pp, cp, micro-batch-size or "
        "seq-length), the job re-estimated at each value (--candidates); the capacity line, "
        "the floor no amount of the unknown removes, and with a capacity the solved value "
        "marked. The title names the job with the unknown left free.",
        ("map_x", "map_y", "map_value", "margin", "by") + _CLUSTER),
    "feasibility": (
        "a layout search over two knobs (needs --gpu)",
        "The layouts of the job's world size on --gpu, over two knobs (--x, --y), each the "
        "job memsym estimate reads from the same options with its layout changed (a setting "
        "the search does not carry is refused): whether a "
        "layout fits, the best step time or the best headroom (--map) in each cell, blank "
        "cells explained, the best layout starred at the centre of its cell; each cell "
        "labelled with the term that binds (the largest) in its layout with the most "
        "headroom, the abbreviations explained in the legend; step times priced on the "
        "cluster the options describe (--gpus-per-node, --intra-node-bandwidth, "
        "--inter-node-bandwidth, --efficiency).",
        ("vs", "candidates", "margin", "by")),
    "step-time": (
        "the step time by part, a stacked bar (needs --gpu)",
        "One stacked bar of the job's step time on --gpu [s]: compute, memory-bound kernels, "
        "each parallel group's exposed communication, the pipeline bubble, the optimizer "
        "step and the rest, each labelled with its seconds and share of the step (the "
        "step_time_parts_s and step_time_s of memsym estimate --gpu NAME --json, with the "
        "same cluster options).",
        ("vs", "candidates", "map_x", "map_y", "map_value", "margin", "by")),
    "timeline": (
        "memory over the step's phases on the most-loaded stage",
        "Per-GPU memory in each phase of the training step (forward, loss-backward, "
        "backward, optimizer) on the most-loaded pipeline stage, one bar per phase (the "
        "phases of memsym estimate --json), the peak marked, the capacity line and with "
        "--margin the capacity less the margin.",
        ("vs", "candidates", "map_x", "map_y", "map_value", "by") + _CLUSTER),
}


def add_plot_parser(subparsers):
    """Register ``memsym plot`` and its kinds (a subcommand each, with its own description
    and the options it takes: :data:`KIND_HELP`).  Returns the ``plot`` parser."""
    parser = subparsers.add_parser(
        "plot", help="draw a job's memory breakdown, memory against an unknown, or a layout map",
        description="Charts of a job, written to PNG, PDF or SVG by the file's extension. "
        "Memory in GB (1e9 bytes). memsym plot KIND --help for each kind.")
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", parser_class=type(parser))
    kinds.required = True
    for kind in KINDS:
        short, long, skip = KIND_HELP[kind]
        sub = kinds.add_parser(kind, help=short, description=long + " Memory in GB (1e9 bytes).")
        add_options(sub, "plot", skip=skip)
        # the options a kind does not take read as absent
        sub.set_defaults(run=run, **{dest: None for dest in skip})
    return parser


def _capacity(args, capacity):
    if capacity is not None:
        return capacity
    if getattr(args, "gpu_memory", None) is not None:
        return args.gpu_memory
    if getattr(args, "gpu", None):
        from ..hardware import gpu

        return gpu(args.gpu).capacity_bytes
    return None


def _job_name(estimate, arch) -> str:
    from ..job_parts import arch_of, layout_text

    x = arch_of(estimate, arch)
    return f"{getattr(x, 'name', None) or 'model'}, {layout_text(estimate.values)}"


def stage_bytes(estimate, job=None) -> dict:
    """Bar label -> whole bytes per term (as ``memsym estimate --json`` reports them) of each
    pipeline stage the estimate compares (:func:`memsym.training.candidate_stages`), the
    most-loaded named; without the job, the most-loaded stage alone."""
    from ..training import candidate_stages, job_memory
    from .search_report import bytes_json

    def label(i, p):
        role = "only" if p == 1 else "first" if i == 0 else "last" if i == p - 1 else "middle"
        return f"stage {i} ({role}" + (", most loaded)" if i == estimate.stage else ")")

    if job is None:
        return {label(estimate.stage, 1 if estimate.role == "only" else 2):
                bytes_json(estimate.held())}
    p = job.layout.p
    return {label(i, p): bytes_json((estimate if i == estimate.stage else
                                     job_memory(job, stage=i)).held())
            for i in candidate_stages(job.model, job.layout)}


def phase_segments(estimate, job) -> dict:
    """Phase -> ``{term: exact bytes}`` of the most-loaded stage in each phase of the step
    (:func:`memsym.training.phase_totals` evaluated at the estimate's values), in step order:
    the model states and allowances each a segment, the activation terms together
    (``activations``), and the phase's transients placed by :func:`memsym.groups.held_rows`
    (states not yet made taken off those states, the rest netted as ``transients``, a
    negative net taken off ``activations``), so that every segment is >= 0 and each phase's
    segments add up to its total (:meth:`TrainingEstimate.phases`)."""
    from ..groups import BUFFER_KEYS, held_rows
    from ..training import (ACTIVATION_KEYS, ALLOWANCE_KEYS, OUTSIDE_ALLOCATOR_KEYS, STATE_KEYS,
                            phase_totals)

    out = {}
    for ph, tot in phase_totals(job, estimate.stage).items():
        bd = tot.breakdown(estimate.values)
        rows = {k: v for k, v in bd.items() if k in STATE_KEYS}
        rows["activations"] = sum((v for k, v in bd.items() if k in ACTIVATION_KEYS), 0)
        rows.update((k, v) for k, v in bd.items()
                    if k in ALLOWANCE_KEYS or k in BUFFER_KEYS or k in OUTSIDE_ALLOCATOR_KEYS)
        parts = {k: v for k, v in bd.items() if k not in rows and k not in ACTIVATION_KEYS
                 and k != "total"}
        out[ph] = held_rows(rows, parts)
    return out


def sweep_title(estimate, arch, unknown: str) -> str:
    """The title of a memory-vs sweep: the unknown, and the job with the unknown left free
    (``Memory per GPU against the data-parallel size d`` / ``gpt3-175b: TP 8 x PP 4 x DP d,
    s = 2048, b = 1``), not the one value the job was given."""
    from ..job_parts import arch_of
    from ..symbols import registry

    vals = {getattr(k, "name", k): v for k, v in estimate.values.items()}

    def shown(sym):
        return sym if sym == unknown else str(int(vals.get(sym, 1)))

    parts = [f"{tag} {shown(sym)}" for sym, tag in (("t", "TP"), ("p", "PP"), ("c", "CP"),
                                                    ("d", "DP"))
             if sym != "c" or unknown == "c" or int(vals.get("c", 1)) > 1]
    # s or b swept: named on the first line, left out of the job's
    tail = [f"{sym} = {shown(sym)}" for sym in ("s", "b") if sym in vals and sym != unknown]
    meta = registry().get(unknown)
    model = getattr(arch_of(estimate, arch), "name", None) or "model"
    return (f"Memory per GPU against {'the ' + meta.meaning + ' ' if meta else ''}{unknown}\n"
            f"{model}: " + " x ".join(parts) + "".join(", " + x for x in tail))


def _re_estimate(arch, layout, training, unknown):
    """``n -> bytes``: the job re-estimated with the unknown set to n (exact stage counts,
    micro-batches and padding at every candidate; a layout the rules refuse raises)."""
    from dataclasses import replace

    from ..training import training_memory

    field = {"d": "d", "t": "t", "p": "p", "c": "c"}.get(unknown)

    def evaluate(n: int):
        if field is not None:
            return training_memory(arch, replace(layout, **{field: n}), training).bytes_total
        key = "micro_batch_size" if unknown == "b" else "seq_length"
        return training_memory(arch, layout, training.replace(**{key: n})).bytes_total

    return evaluate


def _job_estimate(j, unknown):
    """``n -> bytes``: the Job re-estimated with the unknown set to n (its allowances and
    rules kept; a candidate a rule refuses raises and is skipped by the plot)."""
    from ..training import job_memory

    field = {"d": "d", "t": "t", "p": "p", "c": "c", "b": "micro_batch_size",
             "s": "seq_length"}[unknown]
    return lambda n: job_memory(j.replace(**{field: int(n)})).bytes_total


def run_plot(args, estimate, *, arch=None, layout=None, training=None, capacity=None,
             solution=None, job=None) -> int:
    """Draw ``args.kind`` for an already computed estimate and write ``args.output``.

    Parameters
    ----------
    args : argparse.Namespace
        With the plot options (memsym.cli.option_table) (and ``gpu``/``gpu_memory`` if known).
    estimate : memsym.training.TrainingEstimate
    arch, layout, training : optional
        The job (default: the estimate's attributes of those names).  memory-vs re-estimates
        the job at each candidate with them (layouts the rules refuse are skipped and named on
        the plot); feasibility searches the world size of ``layout`` on ``args.gpu``.
    capacity : number, optional
        GPU memory [bytes]; default ``args.gpu_memory``, else the catalogue's ``args.gpu``.
    solution : memsym.analysis.Solution, optional
        For memory-vs: the solve result to mark (otherwise the smallest/largest candidate
        that fits is marked).
    job : memsym.job.Job, optional
        memory-vs re-estimates this job (its allowances and launch rules) at each candidate.
    """
    from .. import plotting
    from ..errors import InvalidValueError

    arch = arch if arch is not None else getattr(estimate, "arch", None)
    layout = layout if layout is not None else getattr(estimate, "layout", None)
    training = training if training is not None else getattr(estimate, "training", None)
    cap = _capacity(args, capacity)
    import os

    ext = os.path.splitext(str(args.output))[1].lower().lstrip(".")
    if ext not in plotting.FORMATS:
        raise InvalidValueError(f"--output must end in .png, .pdf or .svg, got {args.output!r}")
    name = _job_name(estimate, arch)
    metric = getattr(getattr(training, "memory", None), "metric", "device")
    if metric != "device" and args.kind != "feasibility":
        from ..terms.allowances import METRIC_COUNTERS

        # bars of another counter against the capacity would draw a fit the device's count
        # may not have (the fit is judged on it): no capacity line, the counter named
        cap = None
        name += f"\n{METRIC_COUNTERS[metric]} (fit: the device's count)"
    if args.kind == "breakdown":
        fig = _breakdown_figure(args, estimate, job, cap, name)
    elif args.kind == "memory-vs":
        fig = _memory_vs_figure(args, estimate, arch, layout, training, cap, solution, job)
    elif args.kind == "step-time":
        fig = _step_time_figure(args, job, name)
    elif args.kind == "timeline":
        fig = _timeline_figure(args, estimate, cap, name)
    else:
        fig = _feasibility_figure(args, arch, layout, training, cap, job)
    plotting.save(fig, args.output)
    from .hf_launch import hf_reading, reading_lines

    # a pasted Hugging Face Trainer launch: how it was read, as estimate says it
    print("\n".join([f"wrote {args.output}", *reading_lines(hf_reading(args, job))]))
    return 0


def _breakdown_figure(args, estimate, job, cap, name):
    """The ``breakdown`` figure: by pipeline stage, or ``--by phase`` of the step."""
    from .. import plotting
    from ..errors import InvalidValueError
    from .options import margin_bytes

    margin = margin_bytes(args, cap) or None
    if getattr(args, "by", None) == "phase":
        if job is None:
            raise InvalidValueError("plot breakdown --by phase needs the job")
        return plotting.phase_breakdown(
            phase_segments(estimate, job), capacity=cap, margin=margin,
            peak=getattr(estimate, "phase", None),
            title=args.title or f"Per-GPU memory by term and phase of the step, stage "
            f"{estimate.stage} (most loaded)\n{name}")
    return plotting.stage_breakdown(
        stage_bytes(estimate, job), capacity=cap, margin=margin,
        title=args.title or f"Per-GPU memory by term and pipeline stage\n{name}")


def _memory_vs_figure(args, estimate, arch, layout, training, cap, solution, job):
    """The ``memory-vs`` figure: the total over the candidates of ``args.vs``."""
    from .. import plotting

    unknown = UNKNOWNS[args.vs]
    evaluate = None    # the symbolic total, unless the job can be re-estimated
    if job is not None:
        evaluate = _job_estimate(job, unknown)
    elif arch is not None and layout is not None and training is not None:
        evaluate = _re_estimate(arch, layout, training, unknown)
    # p (and the stage split) changes which layers a stage holds, so the estimate's total
    # is not symbolic in p: draw the re-estimates only, without a symbolic floor
    source = None if unknown == "p" and evaluate is not None else estimate
    return plotting.memory_vs(source, unknown, capacity=cap, candidates=args.candidates,
                              evaluate=evaluate, solution=solution,
                              title=args.title or sweep_title(estimate, arch, unknown))


def _timeline_figure(args, estimate, cap, name):
    """The ``timeline`` figure: the memory of each phase of the step."""
    from .. import plotting
    from .options import margin_bytes

    margin = margin_bytes(args, cap) or None
    phases = dict(estimate.phase_bytes)
    return plotting.phase_timeline(
        phases, capacity=cap, margin=margin, peak=getattr(estimate, "phase", None),
        title=args.title or f"Per-GPU memory by phase of the step, stage {estimate.stage} "
        f"(most loaded)\n{name}")


def _feasibility_figure(args, arch, layout, training, cap, job=None):
    """The ``feasibility`` map of a layout search run here over the job's world size (its
    cluster noted under the title when it priced the step).

    The search takes the job itself (:func:`memsym.search.space.from_job`): every training
    setting, allowance and the capacity as ``memsym estimate`` reads them from the same
    options, the job's own recompute, sharding, offload and micro-batch size; the map varies
    the layout.  A setting the search does not carry is refused in one line
    (:func:`memsym.search.space.refuse_unsearched`), never dropped."""
    from .. import plotting
    from ..errors import InvalidValueError

    if arch is None or layout is None or training is None or not getattr(args, "gpu", None):
        raise InvalidValueError("plot feasibility needs a MODEL and --gpu NAME (the layout "
                                "search runs over the job's world size)")
    from .. import search as searching
    from ..job import job as build_job
    from ..search.job_fields import recompute_choice, space_differences
    from ..search.space import (OVERLAP_FIELDS, from_job, global_batch_of, make_space,
                                refuse_unsearched)

    if training.memory.recompute_modules is not None:   # not a search choice: never dropped silently
        raise InvalidValueError("plot feasibility searches the recompute modes; "
                                "--recompute-modules is not one of its choices")
    refuse_unsearched(training, "plot feasibility",
                      carried=OVERLAP_FIELDS + ("num_microbatches",))
    if job is None:     # run_plot called with the parts: the job they make
        job = build_job(arch, layout=layout, training=training)
    if job.training.batch.num_microbatches is not None:
        # m micro-batches at the job's layout: the same global batch at every layout
        job = job.replace(global_batch_size=global_batch_of(job), num_microbatches=None)
    from ..hardware import cluster_for

    gb = 10**9      # the bandwidth options are in GB/s, the cluster in bytes/s
    intra, inter = (None if getattr(args, k, None) is None else getattr(args, k) * gb
                    for k in ("intra_node_bandwidth", "inter_node_bandwidth"))
    clu = cluster_for(args.gpu, getattr(args, "gpus_per_node", None) or 8, intra, inter)
    # the job's own choices where the search would explore, its own overlaps where the
    # search would price the launch's; the map varies the layout
    tr = job.training
    choices = dict(micro_batch_size=tr.batch.micro_batch_size,
                   recompute=recompute_choice(tr.memory), sharding=tr.states.sharding,
                   offload=tr.states.offload)
    pinned = dict(micro_batch_sizes=[choices["micro_batch_size"]],
                  recompute=[choices["recompute"]], sharding=[choices["sharding"]],
                  offload=[choices["offload"]],
                  overlaps={k: tr.value(k) for k in OVERLAP_FIELDS},
                  first_stage_layers=job.layout.first_stage_layers,
                  last_stage_layers=job.layout.last_stage_layers,
                  **({"capacity": cap} if cap is not None else {}))
    options = dict(pinned)
    space = make_space(*from_job(job, args.gpu, options), **options)
    differ = space_differences(tr, space, **choices)
    if differ:      # the search would price another job: refused, never drawn
        raise InvalidValueError(f"plot feasibility: the job's {'; '.join(differ)} is not "
                                "what its search prices; estimate the layout instead")
    res = searching.search(job, args.gpu, job.layout.world_size, cluster=clu,
                           efficiency=getattr(args, "efficiency", None), **pinned)
    fig = plotting.feasibility(res, x=args.map_x, y=args.map_y, value=args.map_value,
                               title=args.title)
    if res.space.global_batch_size is not None:
        # step times priced here: say on which cluster, under the title (the legend
        # below the axes takes the space under the x axis)
        import textwrap

        ax = fig.axes[0]
        note = cluster_note({
            "gpus_per_node": clu.gpus_per_node,
            "intra_node_bandwidth_bytes_per_s": clu.intra_node_bandwidth,
            "inter_node_bandwidth_bytes_per_s": clu.inter_node_bandwidth,
            "efficiency": getattr(args, "efficiency", None)})
        ax.set_title(ax.get_title() + "\n" + textwrap.fill(note, 60, break_on_hyphens=False),
                     fontsize="medium")
    return fig


def step_parts(args, j) -> dict:
    """``step_time_s``, ``step_time_parts_s`` and ``communication`` of the job on ``args.gpu``
    exactly as ``memsym estimate --gpu NAME --json`` reports them with the same cluster options
    (:func:`memsym.cli.job_report.communication_report`: ``--gpus-per-node``, the bandwidths
    and ``--efficiency``; the GPU's usual cluster where they are not given)."""
    from types import SimpleNamespace

    from .job_report import communication_report

    opts = SimpleNamespace(gpu=args.gpu, mfu_flops=None, **{
        dest: getattr(args, dest, None) for dest in _CLUSTER})
    return communication_report(opts, j)


def _step_time_figure(args, j, name):
    from .. import plotting
    from ..errors import InvalidValueError

    if j is None or not getattr(args, "gpu", None):
        raise InvalidValueError("plot step-time needs a MODEL and --gpu NAME (the step is "
                                "priced on that GPU)")
    rep = step_parts(args, j)
    fig = plotting.step_time_bars(
        rep["step_time_parts_s"], rep["step_time_s"],
        title=args.title or f"Step time by part on {args.gpu}: {rep['step_time_s']:.3g} s\n{name}")
    import textwrap

    ax = fig.axes[0]      # the cluster the step was priced on, under the bar (as wide as it)
    note = textwrap.fill(cluster_note(rep.get("assumptions") or {}), 46,
                         break_on_hyphens=False)
    ax.set_xlabel("\n".join(x for x in (ax.get_xlabel().strip("\n"), note) if x),
                  fontsize="small")
    return fig


def cluster_note(assumptions: dict) -> str:
    """The cluster a step was priced on, in one line (the ``assumptions`` of
    :func:`memsym.timing.report.step_report`).

    Examples
    --------
    >>> cluster_note({"gpus_per_node": 4, "intra_node_bandwidth_bytes_per_s": 1e11,
    ...               "inter_node_bandwidth_bytes_per_s": 2.5e10, "efficiency": 0.45})
    'priced on 4 GPUs per node, 100 GB/s intra-node, 25 GB/s inter-node, GEMM efficiency 0.45'
    """
    a_ = assumptions
    parts = [f"{a_['gpus_per_node']} GPUs per node"] if a_.get("gpus_per_node") else []
    parts += [f"{float(a_[key]) / 1e9:g} GB/s {where}" for key, where in (
        ("intra_node_bandwidth_bytes_per_s", "intra-node"),
        ("inter_node_bandwidth_bytes_per_s", "inter-node")) if a_.get(key) is not None]
    eff = a_.get("efficiency")
    parts.append("GEMM efficiency " + ("by shape (memsym.timing)" if eff is None else f"{eff:g}"))
    return "priced on " + ", ".join(parts)


def add_parser(sub) -> None:
    """``memsym plot KIND MODEL ... -o FILE``: each kind with the plot and job options."""
    add_plot_parser(sub)


def run(args) -> int:
    """Build the job once (:func:`memsym.cli.solve.job_from_args`), estimate it, solve the
    memory-vs unknown when a capacity is known, and draw."""
    from ..errors import InvalidValueError, MemsymError
    from ..training import job_memory
    from .solve import job_from_args
    from .training_options import wants_training

    if not wants_training(args):
        raise InvalidValueError("plot needs a MODEL (a preset, a config.json or a Hub id) and "
                                "--seq-length")
    j = job_from_args(args)
    est = job_memory(j)
    solution = None
    if args.kind == "memory-vs" and j.capacity is not None:
        from ..job_solver import solve_job

        name = {"d": "dp", "t": "tp", "p": "pp", "c": "cp", "b": "micro-batch-size",
                "s": "seq-length"}.get(UNKNOWNS[args.vs])
        try:
            solution = solve_job(j, name, j.capacity)
        except MemsymError:       # nothing fits / beyond the range: the plot says so itself
            solution = None
        if solution is not None and args.candidates is not None \
                and solution.value not in args.candidates:
            solution = None       # the marked value must be one of the drawn candidates
    return run_plot(args, est, arch=j.model, layout=j.layout, training=j.training,
                    capacity=j.capacity, solution=solution, job=j)
