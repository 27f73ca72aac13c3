"""The options of one subcommand alone (issue 28's one table of options, continued).

What a subcommand asks or how it shows its answer (``memsym estimate``'s output switches,
``solve``/``plot`` unknowns, ``search``/``min-gpus`` lists, ``time``, ``check``, the MODEL
positional): rows of :mod:`memsym.cli.option_table` like those of
:mod:`memsym.cli.option_rows`, which joins them into the one table.
"""

from __future__ import annotations

from ..vocabulary import PRECISION_NAMES
from . import options as T
from .option_schema import JOB_AND_SEARCH, JOB_DEFAULTS, PLOT_UNKNOWNS, SOLVE_UNKNOWNS, flag, option

__all__ = ["command_rows", "time_rows", "check_rows", "model_rows"]


def command_rows():
    """The options of one subcommand alone: what it asks or how it shows the answer."""
    est, plot, latex = frozenset({"estimate"}), frozenset({"plot"}), frozenset({"latex"})
    search, ming = frozenset({"search"}), frozenset({"min-gpus"})
    # plot and latex write their own formats: --json there would be read and dropped
    json_cmds = (JOB_AND_SEARCH - {"plot", "latex"}) | {"time", "models", "gpus"}
    return [
        option("--gpus", group="search", type=T.positive_int, metavar="N", commands=search,
           effect="memory, time",
           help="number of GPUs (world size); with a job (--launch-script, --args-file, "
           "--bridge-recipe, --deepspeed-config, --torchtitan-config, pasted arguments) the "
           "job's world size when not given (its --world-size, launcher or recipe)"),
        option("--top", group="output", type=T.top_count, metavar="K", commands=search,
           parser_default=10, default=10, source="memsym", effect="output",
           help="how many layouts to show, 1..1000 (memsym.limits.MAX_TOP)"),
        option("--emit", group="output", choices=("megatron", "torchtitan", "deepspeed"),
           commands=search, effect="output",
           help="print each top layout as the framework's own input instead of the table: "
           "Megatron-LM arguments (of pretrain_gpt.py, of pretrain_hybrid.py for a hybrid "
           "Mamba model), a torchtitan v0.2 job TOML fragment or a "
           "ds_config.json, and the memsym estimate command that reads it back; prices the "
           "layouts under that framework's rules (--framework); a layout the framework cannot "
           "spell is named in one line, not emitted"),
        option("--emit-dir", group="output", metavar="DIR", commands=search, effect="output",
           help="with --emit: write one file per layout into DIR (created if missing; at most "
           "--top files): layout_N.txt (Megatron-LM argument file), layout_N.toml or "
           "layout_N.json"),
        # a job reads it as Megatron's own argument (memsym.readers.megatron_userbuffers)
        option("--tp-comm-overlap-cfg", group="search", metavar="FILE", commands=search,
           effect="time", help="with --tp-comm-overlap: Megatron's userbuffers config (YAML), "
           "held fixed; the rows running the TP overlap are timed with it, and --emit megatron "
           "writes it beside each layout (tp_comm_overlap_cfg.yaml)"),
        option("--max-gpus", group="search", type=T.positive_int, metavar="N", commands=ming,
           parser_default=1 << 17, default=1 << 17, source="memsym", effect="none",
           help="search bound"),
        flag("--wide", group="output", commands=est, effect="output", exclusive="report",
              help="each term's source on its line (wider than 100 columns)"),
        flag("--markdown", "markdown", group="output", commands=est, effect="output",
              exclusive="report",
              help="the report as Markdown, for an issue or a design review: a table of the "
              "terms (bytes, GB, share of the capacity, source reference), the dominant terms, "
              "the defaults applied, the metric and the verdict"),
        flag("--sensitivity", group="output", commands=est, effect="output",
              help="a table of how the per-GPU total moves with each knob (d, t, p, c, b, s, "
              "and v with pipeline parallelism): the exact derivative of the symbolic total at "
              "the job [GB per unit] and the exact change when the knob is doubled (the job "
              "estimated again); in JSON under \"sensitivity\""),
        flag("--advise", group="output", commands=est, effect="output",
              help="list the single changes that make the job fit (always when it does not): "
              "each knob's smallest change, solved and verified"),
        option(("--output", "-o"), group="output", metavar="FILE", commands=plot, required=True,
           effect="output", help="FILE.png, FILE.pdf or FILE.svg"),
        option(("--output", "-o"), group="output", metavar="FILE", commands=latex | {"bench"},
           effect="output", help="write to FILE instead of stdout"),
        option("--vs", group="output", type=T.choice("unknown", tuple(PLOT_UNKNOWNS)),
           parser_default="dp", default="dp", source="memsym", commands=plot, effect="output",
           help="memory-vs: the unknown on the x axis (dp, tp, pp, cp, micro-batch-size, "
           "seq-length)"),
        option("--candidates", group="output", type=T.candidates, metavar="LIST", commands=plot,
           effect="output", source="around the solution; powers of two for tp, pp, cp, "
           "seq-length", help="memory-vs: values to draw, 1,2,4,8 or 1:32"),
        option("--x", "map_x", group="output", choices=("t", "p", "c", "d", "e", "v", "b"),
           parser_default="p", default="p", source="memsym", commands=plot, effect="output",
           help="feasibility: knob on the x axis"),
        option("--y", "map_y", group="output", choices=("t", "p", "c", "d", "e", "v", "b"),
           parser_default="t", default="t", source="memsym", commands=plot, effect="output",
           help="feasibility: knob on the y axis"),
        option("--map", "map_value", group="output", choices=("fits", "step_time", "headroom"),
           commands=plot, effect="output",
           source="step time with a global batch, else fits",
           help="feasibility: what a cell shows"),
        option("--by", group="output", choices=("stage", "phase"), parser_default="stage",
           default="stage", source="memsym", commands=plot, effect="output",
           help="breakdown: one bar per pipeline stage, or per phase of the step (forward, "
           "loss-backward, backward, optimizer) on the most-loaded stage"),
        option("--title", group="output", commands=plot, effect="output", source="the job",
           help="the plot's title"),
        flag("--document", group="output", commands=latex, effect="output",
              exclusive="form", help="a standalone amsmath document"),
        flag("--snippet", group="output", commands=latex, effect="output", exclusive="form",
              help="an align* block to \\input"),
        flag("--markdown", group="output", commands=latex, effect="output", exclusive="form",
              help="Markdown with $$ math"),
        option("--paper", group="output", type=T.choice("paper", ("a4", "letter")),
           parser_default="a4", default="a4", source="memsym", commands=latex,
           effect="output", help="--document: paper size, a4 or letter (2.5 cm margins)"),
        option("--solve", group="output", type=T.choice("unknown", tuple(SOLVE_UNKNOWNS)),
           metavar="UNKNOWN", commands=latex, effect="output",
           help="also solve for " + ", ".join(SOLVE_UNKNOWNS) + " (needs --gpu-memory or "
           "--gpu)"),
        flag("--quick", group="output", commands=frozenset({"bench"}), effect="output",
              help="small sizes (seconds): proves it runs"),
        flag("--suite", group="output", commands=frozenset({"bench"}), effect="output",
              help="also time the full test suite"),
        flag("--json", group="output", commands=json_cmds, effect="output", exclusive="report",
              help="one JSON object on stdout"),
    ]


def time_rows():
    tm = frozenset({"time"})
    return [
        option("model", group="time", metavar="MODEL-or-PARAMS", commands=tm, positional=True,
           effect="time", help="a model preset name, a Hugging Face config.json or Hub "
           "model id (org/name[@revision]), or a parameter count (7B, 175e9, 1T)"),
        option("--tokens", group="time", type=T.tokens, metavar="T", commands=tm, required=True,
           effect="time", help="training tokens (300B, 15T, 3e11)"),
        option("--gpu", group="time", metavar="NAME", commands=tm, parser_default="h100-80gb",
           default="h100-80gb", source="memsym", effect="time",
           help="GPU from the catalogue (memsym gpus): its peak dense FLOP/s"),
        # --world-size as estimate / solve / latex spell the job's GPU count
        option(("--gpus", "--world-size"), "gpus", group="time", type=T.positive_int,
           metavar="G", commands=tm, parser_default=8, default=8, source="memsym: one node",
           effect="time", help="number of GPUs (the job's world size)"),
        # the precisions a job takes (estimate's --precision): one word on every path; a GPU
        # without that peak in its datasheet (fp4 before Blackwell) is refused in one line
        option("--precision", group="time", type=T.choice("precision", PRECISION_NAMES),
           commands=tm, field="precision", parser_default="bf16", default="bf16", source=JOB_DEFAULTS,
           effect="time", help="which peak to use (the job's weight precision with a layout): "
           + ", ".join(PRECISION_NAMES)),
        # not --efficiency: that word is the step-time model's GEMM efficiency on every path
        option("--mfu", group="time", type=T.efficiency, metavar="ETA", commands=tm,
           effect="time", default="1/2",
           source="memsym.terms.compute.DEFAULT_EFFICIENCY: Narayanan et al. 2021 Table 1 "
           "reaches 52% of A100 peak", help="Eq. 4's achieved fraction of peak FLOP/s end to "
           "end (model FLOPs utilisation), 0.01 <= ETA <= 1; without a layout"),
        option("--tflops", group="time", type=T.tflops, metavar="X", commands=tm, effect="time",
           help="achieved TFLOP/s per GPU (overrides --gpu peak and --mfu); without a layout"),
        option(("--recompute-granularity", "--recompute"), "recompute", group="time",
           type=T.choice("recompute", ("full", "selective", "none")), commands=tm,
           default="full", source="Narayanan et al. 2021 Eq. 4 as printed (8TN); with a layout "
           "the job's own default, none (memsym.job.DEFAULTS)",
           effect="time", help="full: 8*T*N; none: 6*T*N; with a layout the job's recompute, "
           "as estimate's (selective only with a layout)"),
        option("--price-per-gpu-hour", group="time", type=T.price, metavar="X", commands=tm,
           effect="output", help="price of one GPU-hour (any currency) for the cost"),
    ]


def check_rows():
    """``memsym check LOG JOB``: the log (before the MODEL), its warm-up, the calibration."""
    chk = frozenset({"check"})
    return [
        option("log", group="input", metavar="LOG", positional=True, commands=chk,
           effect="input", help="check: a training log of Megatron-LM, Megatron-Bridge or "
           "torchtitan (its iteration and memory lines; at most memsym.limits.MAX_LOG_BYTES)"),
        # not --warmup: Megatron-LM's removed --warmup, which a pasted launch may carry
        option("--warmup-lines", group="check", type=T.log_lines, metavar="N", commands=chk,
           effect="output", source="memsym.readers.logs: the first 10 % of the iteration "
           "lines, at least 2",
           help="iteration lines skipped as warm-up before the median step time"),
        option("--calibrate", group="check", metavar="FILE", commands=chk, effect="output",
           help="write FILE (JSON): the factor on the compute part of the step time that makes "
           "the predicted step time equal the log's median, with the GPU, the job, the log's "
           "SHA-256 and the date"),
        option("--calibration", group="check", metavar="FILE", commands=chk | {"estimate"},
           effect="time", source="none (uncalibrated)",
           help="read a --calibrate FILE and scale the compute part of the step time by its "
           "factor (made on the same GPU or GPU class); the output says that it is applied"),
    ]


def model_rows():
    # plot's KIND is a subcommand of its own (memsym.cli.plot), each with its own help
    # check's LOG first: argparse takes positionals in the order they are added
    return (*check_rows()[:1],
            option("model", group="input", metavar="MODEL", positional=True,
              commands=JOB_AND_SEARCH,
              effect="memory, time", nargs="?",
              help="preset name (memsym models: llama3-70b, mixtral-8x7b, ...), path to a "
              "Hugging Face config.json, or Hub model id org/name[@revision] (needs "
              "huggingface_hub; an existing local path wins); its recipe "
              "(memsym.model.RECIPES) is the baseline"),)
