"""``memsym search``: the best layouts of a model on N GPUs, each with its memory breakdown.

The search's options and run, and ``--emit`` (each row in a framework's input, written and
printed with its read-back command); the table and the JSON rows are
:mod:`memsym.cli.search_report`'s."""

from __future__ import annotations

import sys
import time

from ..frameworks import FRAMEWORK
from .option_table import add_command
from .options import emit_json, number_out
from .search_job import writes_held
from .search_report import (bytes_json, layout_json, note_lines, render, row_sharding,
                            torchtitan_stages)

__all__ = ["add_parser", "run", "search_options", "Progress", "MUON_HELD"]

#: Muon's options ``min-gpus`` takes (memsym.cli.option_rows), held over its layouts.
MUON_HELD = ("muon_tp_mode", "muon_num_ns_steps", "muon_nesterov")


#: Tokens per step assumed when no global batch is given: Llama 2's 4M-token batch
#: (Touvron et al. 2023, arXiv:2307.09288, §2.2), so that layouts rank by step time.
DEFAULT_TOKENS_PER_STEP = 4 * 2**20


def default_global_batch(seq_length: int) -> int:
    """A power-of-two number of sequences closest to 4M tokens per step (at least 1).

    >>> default_global_batch(4096), default_global_batch(8192), default_global_batch(10**7)
    (1024, 512, 1)
    """
    import math

    return 2 ** max(0, round(math.log2(DEFAULT_TOKENS_PER_STEP / seq_length)))


def _dropout_on(args) -> bool:
    """Dropout masks kept: None (the framework's default, memsym.job.DEFAULTS for Megatron,
    off for torchtitan) unless a dropout is given."""
    from ..errors import InvalidValueError

    rates = [r for r in (args.hidden_dropout, args.attention_dropout) if r is not None]
    if getattr(args, "dropout", False):
        if any(r == 0 for r in rates):
            raise InvalidValueError("--dropout keeps dropout masks: a dropout of 0 contradicts it")
        return True
    if not rates:
        return None
    if len({r > 0 for r in rates}) > 1:
        raise InvalidValueError("memsym models one dropout setting: give --hidden-dropout and "
                                "--attention-dropout both zero or both non-zero")
    return rates[0] > 0


def search_model(args):
    """The model searched: MODEL with the architecture options applied (the same fields and
    parsing as a job's, :func:`memsym.cli.training_options.arch_overrides`)."""
    from .training_options import query_groups, arch_overrides

    arch = arch_overrides(args)
    if not arch:
        return args.model
    if "num_query_groups" in arch and not args.group_query_attention \
            and query_groups(args.model) is None:
        arch.pop("num_query_groups")     # as Megatron: ignored without --group-query-attention
    from ..job import job

    return job(args.model, **arch).model


def search_options(args, *, assume_batch: bool = False) -> dict:
    """Keyword arguments of :func:`memsym.search.search` from parsed options: the job options
    of :mod:`memsym.cli.option_table` (absent ones take the job's defaults,
    :data:`memsym.job.DEFAULTS`), the list options as the values to try.

    ``assume_batch``: without ``--global-batch-size`` assume about 4M tokens per step
    (:func:`default_global_batch`), so that layouts rank by step time."""
    from ..errors import InvalidValueError
    from ..job import DEFAULTS

    def given(name):
        value = getattr(args, name, None)
        return DEFAULTS[name] if value is None else value

    if getattr(args, "metric", None) is not None:
        # the search judges every row by the device's memory (allowances included); a job's
        # metric is refused as memsym.search.job_fields.refuse_unsearched refuses it
        raise InvalidValueError(f"--metric {args.metric} is not a searched setting (a search "
                                "judges each layout by the device's memory, allowances "
                                "included); estimate a layout with --metric instead")
    seq = given("seq_length")
    capacity = args.gpu_memory
    args.margin_bytes = 0
    if getattr(args, "margin", None):
        # the search judges on capacity - margin: the same comparison, an exact integer less
        from ..hardware import gpu
        from .options import margin_bytes

        full = capacity if capacity is not None else gpu(args.gpu).capacity_bytes
        args.margin_bytes = margin_bytes(args, full)
        capacity = full - args.margin_bytes
    batch = args.global_batch_size
    if batch is None and assume_batch:
        batch = default_global_batch(seq)
    framework = args.framework or "megatron"
    out = dict(seq_length=seq, global_batch_size=batch,
               precision=given("precision"), optimizer=given("optimizer"),
               convention=args.convention, flash_attention=not args.no_flash_attn,
               dropout=_dropout_on(args), finetune=given("finetune"),
               lora_rank=given("lora_rank"), capacity=capacity,
               gpus_per_node=args.gpus_per_node, efficiency=args.efficiency,
               tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep, vpp=args.vpp, etp=args.etp,
               sequence_parallel=(False,) if args.no_sequence_parallel else (False, True),
               first_stage_layers=args.first_stage_layers,
               last_stage_layers=args.last_stage_layers,
               uneven=not args.no_uneven_stages)
    allowances = {key: getattr(args, dest) for key, dest in (
        ("workspace", "workspace"), ("nccl", "nccl_buffers"), ("fragmentation", "fragmentation"))
        if getattr(args, dest, None) is not None}
    if allowances:
        out["allowances"] = allowances
    if args.micro_batch_size:
        out["micro_batch_sizes"] = args.micro_batch_size
    if args.recompute_granularity:
        out["recompute"] = args.recompute_granularity
    if getattr(args, "schedule", None):
        out["schedule"] = args.schedule
    out["framework"] = framework
    if getattr(args, "moe_dispatcher", None) is not None:
        # held fixed over the layouts, its buffers priced per row (memsym.search.Space)
        out["moe_dispatcher"] = args.moe_dispatcher
    if getattr(args, "tp_comm_overlap", None):
        # on in every row with sequence parallelism (memsym.search.Space.comm_fields)
        out["tp_comm_overlap"] = True
    if getattr(args, "tp_comm_overlap_cfg", None) is not None:
        from ..readers.megatron_userbuffers import read_tp_comm_overlap_cfg

        # held fixed with --tp-comm-overlap (memsym.search.Space.tp_comm_overlap_cfg); what
        # memsym does not read of it is not priced (as estimate notes it)
        out["tp_comm_overlap_cfg"] = read_tp_comm_overlap_cfg(args.tp_comm_overlap_cfg, [])
    if getattr(args, "fsdp_double_buffer", None):
        # on in every Megatron-FSDP row (memsym.search.Space.fsdp_double_buffer)
        out["fsdp_double_buffer"] = True
    if getattr(args, "fp8_recipe", None) is not None:
        out["fp8_recipe"] = args.fp8_recipe
    out["sharding"] = args.sharding   # None: what the framework runs (memsym.search)
    # min-gpus's Muon options (search reads them as the job's words), the CP method and
    # autocast over fp32 weights: held fixed over every layout, as a job's are
    # (memsym.search.job_fields.HELD_FIELDS)
    held = {name: getattr(args, name) for name in MUON_HELD + ("cp_comm_type", "autocast")
            if getattr(args, name, None) is not None}
    if held:
        out["held"] = held
    if args.offload:
        out["offload"] = args.offload
    return out


class Progress:
    """Prints ``done/total`` steps on stderr once a search has run longer than ``after`` s."""

    def __init__(self, what: str, after: float = 0.5, stream=None):
        self.what, self.after = what, after
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if time.perf_counter() - self.start < self.after:
            return
        tty = getattr(self.stream, "isatty", lambda: False)()
        if not tty:  # a log file gets one line, not a carriage-return animation
            if not self.shown:
                self.stream.write(f"{self.what}: searching ({total} steps)...")
                self.stream.flush()
            self.shown = True
            return
        self.shown = True
        self.stream.write(f"\r{self.what}: {done}/{total} steps")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def add_parser(sub) -> None:
    parser = add_command(
        sub, run, "search", help="best layouts of a model on N GPUs",
        description="Every layout (t, p, c, d, e, v, micro-batch, recompute, sharding) that the "
        "framework rules allow on N GPUs, its memory on the most-loaded GPU and step time; "
        "the best that fit, each with its breakdown. GB = 1e9 bytes.")
    # None: --emit decides the framework (else Megatron-LM)
    parser.set_defaults(framework=None)


def _emit_framework(args) -> None:
    """``--emit`` prices the layouts under its framework: it sets ``--framework`` or must
    agree with it."""
    from ..errors import InvalidValueError

    args.emit, args.emit_dir = getattr(args, "emit", None), getattr(args, "emit_dir", None)
    if args.emit_dir is not None and args.emit is None:
        raise InvalidValueError("--emit-dir needs --emit megatron, torchtitan or deepspeed")
    if args.emit is not None:
        from .training_options import arch_overrides

        changed = arch_overrides(args)
        if changed:   # the emitted read-back command names the MODEL alone
            raise InvalidValueError(f"--emit reads the layouts back on the MODEL as named: give a "
                                    f"config.json with {', '.join(sorted(changed))} instead of "
                                    "the architecture options")
    if getattr(args, "framework", None) is None:
        args.framework = args.emit or "megatron"
    elif args.emit is not None and args.emit != args.framework:
        raise InvalidValueError(f"--emit {args.emit} prices the layouts under {args.emit}'s rules: "
                                f"--framework {args.framework} contradicts it")


def _problem(args):
    """``(model, gpu, options, gpus, job)`` of the search: a job's (:mod:`memsym.cli.search_job`)
    or the MODEL's with the command line's options (``job`` None)."""
    from ..errors import InvalidValueError
    from .search_job import search_job

    # a job beside the search's words (memsym.cli.search_words.SearchWords, read by memsym.cli.main)
    sj = search_job(args, search_options(args)) \
        if getattr(getattr(args, "job_words", None), "reading", None) is not None else None
    if sj is not None:
        return sj.job, args.gpu, dict(sj.options), sj.gpus, sj
    if args.model is None:
        raise InvalidValueError("search needs a MODEL (a preset, a config.json or a Hub id) "
                                "or a job (--launch-script, --args-file, --bridge-recipe, "
                                "--deepspeed-config, --torchtitan-config)")
    if args.gpus is None:
        # --world-size is a job's (a pasted command's, a launch script's): the search's is --gpus
        raise InvalidValueError("give the number of GPUs to search on: --gpus N")
    return search_model(args), args.gpu, search_options(args, assume_batch=True), args.gpus, None


def run(args) -> int:
    from ..search import search

    _emit_framework(args)
    model, gpu, options, gpus, sj = _problem(args)
    args.search_job = sj
    # without a global batch there is no step time to rank by: assume Llama 2's 4M tokens
    assumed = sj is None and args.global_batch_size is None
    held, unspelled = None, ()
    if args.emit:   # the shared settings --emit cannot spell: refused before any searching
        from ..emit import check_emittable
        from ..emit_rules import UNSPELLED, held_for_emit
        from ..search.space import from_job, make_space

        # the sizes its file cannot spell held (a job's own pinned already), said in the output
        held = held_for_emit(args.emit, options)
        unspelled = tuple(UNSPELLED.get(args.emit, ({}, ""))[0])   # no hint to change them
        model, gpu = from_job(model, gpu, options)
        options = {"space": make_space(model, gpu, **options)}
        check_emittable(args.emit, options["space"], args.model, writes_held(sj))
    prog = Progress("memsym search")
    try:
        res = search(model, gpu, gpus, progress=prog, **options)
    finally:
        prog.close()
    order = res.order()[: args.top]
    if not len(order):
        raise res.no_fit(unspelled)
    rows = [(res.row(int(i)), res.exact(int(i))) for i in order]
    emitted = _emitted(args, res, rows) if args.emit else None
    if args.json:
        _print_json(args, res, rows, emitted)
        return 0
    if emitted:
        text = _emit_text(args, res, rows, emitted, assumed)
        print(text.replace("\n", f"\n# held by --emit {args.emit}: {held}\n", 1) if held else text)
        return 0
    text = render(res, rows, margin=args.margin_bytes, job=sj is not None)
    if sj is not None:
        from .search_job import job_lines

        head, _, rest = text.partition("\n")
        text = "\n".join([head, *job_lines(sj, res), rest])
    if assumed:
        text = text.replace("\n", f"\nnote: no --global-batch-size: assumed B = "
                            f"{res.space.global_batch_size} sequences (about 4M tokens per step, "
                            "as Llama 2 trained)\n", 1)
    print(text)
    return 0


def _print_json(args, res, rows, emitted) -> None:
    """The JSON rows of a search (with a job, each names it: ``job``)."""
    cap = res.space.capacity          # what a layout must fit within: capacity - margin
    sj = args.search_job
    if sj is not None:
        from .search_job import job_report

        job = job_report(sj, res)
    emit_json([{
        "layout": layout_json(row, res.space.framework, res.space.overlaps), "gpus": res.gpus,
        **({"torchtitan": torchtitan_stages(res.space, row)}
           if FRAMEWORK[res.space.framework].torch_pipelining else {}),
        "bytes": bytes_json(exact["bytes"]),
        "gpu_memory_bytes": number_out(cap + args.margin_bytes),
        "margin_bytes": args.margin_bytes,
        "headroom_bytes": number_out(cap - exact["bytes"]["total"]),
        "fits": bool(exact["bytes"]["total"] <= cap),
        "stage": exact["stage"], "binding": row["binding"],
        "step_time_s": row["step_time"],
        "step_time_parts_s": row.get("time"), "units": "bytes",
        # the search's notes (what the table prints as "note:" lines), on every row
        "notes": list(res.notes),
        **({"emit": _emit_json(args, got)} if emitted else {}),
        **({"job": job} if sj is not None else {}),
    } for (row, exact), got in zip(rows, emitted or [None] * len(rows))])


def _emitted(args, res, rows) -> list:
    """``(n, Emitted or the reason it is not, path or None)`` per row; the files written
    when ``--emit-dir`` is given (every file built before the first is written)."""
    import os

    from ..emit import NotExpressible, emit

    out = []
    for n, (row, _) in enumerate(rows, 1):
        try:
            got = emit(args.emit, row, res.space, res.gpus, args.model, folder=args.emit_dir,
                       held=writes_held(args.search_job))
            if args.search_job is not None and got.arguments:
                from .search_job import relaunch

                got = relaunch(args.search_job, got)    # the job's whole argument list
        except NotExpressible as exc:
            got = str(exc)
        out.append([n, got, None])
    if all(isinstance(got, str) for _, got, _ in out):
        raise NotExpressible(f"--emit {args.emit}: none of the {len(out)} layouts can be "
                             f"spelled; layout 1: {out[0][1]}")
    if args.emit_dir is not None:
        folder = args.emit_dir
        if not os.path.isdir(folder):
            os.mkdir(folder)          # the folder itself, not its parents: a typo fails
        for item in out:
            if isinstance(item[1], str):
                continue
            item[2] = os.path.join(folder, item[1].file_name(item[0]))
            for path, text in ((item[2], item[1].text),
                               *((os.path.join(folder, name), body)
                                 for name, body in item[1].files)):
                # O_NOFOLLOW: a link planted at layout_N.* is refused, not written through
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                             | getattr(os, "O_NOFOLLOW", 0), 0o644)
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(text)
    return out


def _read_back(args, n, got, path) -> str:
    """The ``memsym estimate`` command that reads the emitted layout back."""
    import shlex

    from ..emit import EMIT_AS_WORDS

    if path is None and got.framework not in EMIT_AS_WORDS:
        path = got.file_name(n)       # printed only: the file the text is saved as
    # the capacity the search judged on, where it was given (estimate judges fitting on it)
    cap = [] if args.gpu_memory is None else ["--gpu-memory", f"{int(args.gpu_memory)}"]
    if getattr(args, "margin_bytes", 0):
        cap += ["--margin", f"{args.margin_bytes}B"]
    if args.search_job is not None:   # the job's MODEL and memsym options, as it was read
        from .search_job import read_back_words

        head = read_back_words(args.search_job)
    else:
        head = [args.model]
    return shlex.join(["memsym", "estimate", *head, *got.read_back(path), *cap, "--json"])


def _emit_json(args, item) -> dict:
    n, got, path = item
    if isinstance(got, str):
        return {"framework": args.emit, "refused": got}
    return {"framework": got.framework, "text": got.text, "arguments": list(got.arguments),
            **({"script": got.script} if got.script else {}),
            "file": path, "read_back": _read_back(args, n, got, path),
            **({"files": dict(got.files)} if got.files else {}),
            **({"notes": list(got.notes)} if got.notes else {})}


def _etp(row) -> str:
    """`` t_e=N`` where the experts' TP is not t, else nothing."""
    te = row.get("t_e") or row["t"]
    return "" if te == row["t"] else f" t_e={te}"


def _emit_text(args, res, rows, emitted, assumed) -> str:
    """Each layout's summary and read-back command as ``#`` lines, then its text (or the
    file written, or the one line saying why it is not emitted)."""
    lines = [f"# memsym search --emit {args.emit}: {res.space.arch.name} on {res.gpus} x "
             f"{res.space.gpu.name}, s = {res.space.seq_length}, B = "
             f"{res.space.global_batch_size}"
             + (" (assumed: about 4M tokens per step, as Llama 2 trained)" if assumed else "")]
    # what the table would say under its head, as comments: the emitted text stays a file
    # or command to paste, and nothing the search assumed or left out goes unsaid
    lines += ["# " + line for line in note_lines(res, job=args.search_job is not None)]
    for (row, exact), (n, got, path) in zip(rows, emitted):
        f_, l_ = row.get("first_stage_layers"), row.get("last_stage_layers")
        ends = "" if f_ is None and l_ is None else f" ends {f_ or '-'}/{l_ or '-'}"
        total = bytes_json(exact["bytes"])["total"]
        head = (f"# layout {n}: t={row['t']} p={row['p']} c={row['c']} d={row['d']} "
                f"e={row['e']}{_etp(row)} v={row['v']} b={row['b']}{ends}, "
                f"recompute {row['recompute']}, "
                f"sharding {row_sharding(res.space, row['sharding'])}, "
                f"SP {'on' if row['sequence_parallel'] else 'off'}: "
                f"{total} bytes ({total / 1e9:.3f} GB)")
        lines.append("")
        if isinstance(got, str):
            lines.append(f"{head}; not emitted: {got}")
            continue
        lines.append(head)
        if got.script:      # which script the arguments are given to (a hybrid's is its own)
            lines.append(f"# arguments of {got.script}")
        lines.append("# read back: " + _read_back(args, n, got, path))
        lines += [f"# note: {note}" for note in got.notes]
        if path is not None:
            lines.append(f"# wrote {path}")
        else:
            lines.append(got.text.rstrip("\n"))
            for name, body in got.files:     # what the arguments name, to save beside them
                lines.append(f"# {name}:")
                lines += [f"#   {line}" for line in body.splitlines()]
    return "\n".join(lines)
