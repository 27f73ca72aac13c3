"""The schema of memsym's table of options: what a row says, the subcommands, the help groups.

:mod:`memsym.cli.option_rows` holds the rows, :mod:`memsym.cli.option_table` builds the
parsers, the help and the reference page from them.  Plain data: building a parser imports no
SymPy.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Option", "option", "flag", "JOB_COMMANDS", "SEARCH_COMMANDS", "JOB", "SEARCH",
           "JOB_AND_SEARCH", "EFFECTS", "GROUPS", "PLOT_KINDS", "PLOT_UNKNOWNS",
           "SOLVE_UNKNOWNS", "JOB_DEFAULTS", "ALLOWANCES_SOURCE", "MEGATRON_ARGS",
           "RECIPE_SOURCE"]

#: The subcommands that take a whole job (MODEL, layout, training, allowances); ``check``
#: takes the job of the run whose log it reads.
JOB_COMMANDS = ("estimate", "solve", "plot", "latex", "check")
#: The subcommands that search layouts: the same job options, lists of values to try on top.
SEARCH_COMMANDS = ("search", "min-gpus")
JOB = frozenset(JOB_COMMANDS)
SEARCH = frozenset(SEARCH_COMMANDS)
JOB_AND_SEARCH = JOB | SEARCH

#: Effects: what an option changes.
EFFECTS = ("memory", "time", "memory, time", "output", "input", "none")

#: Plot kinds, as the command line names them.
PLOT_KINDS = ("breakdown", "memory-vs", "feasibility", "step-time", "timeline")
#: Unknowns ``plot memory-vs`` draws against (registry names; b and s grow memory).
PLOT_UNKNOWNS = {"dp": "d", "d": "d", "tp": "t", "t": "t", "pp": "p", "p": "p", "cp": "c",
                 "c": "c", "micro-batch-size": "b", "b": "b", "seq-length": "s", "s": "s"}
#: ``memsym solve UNKNOWN``: unknown -> help (the unknowns of memsym.job_solver.solve_job).
SOLVE_UNKNOWNS = {
    "dp": "smallest data-parallel size d that fits",
    "tp": "smallest tensor-parallel size t that fits",
    "pp": "smallest pipeline-parallel size p that fits",
    "cp": "smallest context-parallel size c that fits",
    "gpus": "fewest GPUs G = t p c d that fit (t, p, c fixed; d solved)",
    "micro-batch-size": "largest micro-batch size b that fits",
    "seq-length": "largest sequence length s that fits",
}

#: Where defaults come from (cited once; a row names one of these or its own).
JOB_DEFAULTS = "memsym.job.DEFAULTS"
ALLOWANCES_SOURCE = "memsym.training.ALLOWANCES"
MEGATRON_ARGS = "Megatron-LM megatron/training/arguments.py (d98e8a64dd)"
RECIPE_SOURCE = ("the MODEL's recipe (memsym.model.RECIPES: 0 for Llama, Mistral, Qwen3, "
                 "DeepSeek-V3 and gpt-oss, as Megatron-Bridge trains them), else Megatron-LM's "
                 "0.1; torchtitan builds no dropout")


@dataclass(frozen=True)
class Option:
    """One option of the command line.

    Attributes
    ----------
    names : tuple of str
        Its spellings; the first is the one shown (Megatron-LM's where it has one).
    dest : str
        The argparse destination.
    group : str
        The help group (:data:`GROUPS`).
    commands : frozenset
        The subcommands that take it.
    effect : str
        What it changes (:data:`EFFECTS`).
    help : str
        What it means.
    type : callable, optional
        The value's type (validates; never evaluates text).
    nargs, const, choices, metavar, action, required
        As argparse's.
    field : str, optional
        The job option it sets (a :class:`memsym.job.Layout` / :class:`~memsym.job.Training`
        field, or an architecture field).
    value : object, optional
        For a flag: the value it sets ``field`` to.
    default : object, optional
        The value the job uses when the option is absent (documented; the parser's own default
        is None, so an absent option never looks given).
    source : str
        Where ``default`` comes from.
    search : str, optional
        How ``search`` / ``min-gpus`` take it: ``"list"`` (values to try), ``"same"``.
    search_help, search_type
        The list form's help and type, where they differ.
    exclusive : str, optional
        A mutually exclusive group's name.
    parser_default : object
        argparse's default, for the few output options whose default is a plain value.
    """

    names: tuple
    dest: str
    group: str
    commands: frozenset
    effect: str
    help: str
    type: object = None
    nargs: object = None
    const: object = None
    choices: tuple | None = None
    metavar: str | None = None
    action: str | None = None
    required: bool = False
    field: str | None = None
    value: object = None
    default: object = None
    source: str = ""
    search: str | None = None
    search_help: str | None = None
    search_type: object = None
    exclusive: str | None = None
    parser_default: object = None
    positional: bool = False


def option(names, dest=None, *, group, commands=JOB, effect="memory", help="", **kw) -> Option:
    names = (names,) if isinstance(names, str) else tuple(names)
    if dest is None:
        dest = names[0].lstrip("-").replace("-", "_")
    return Option(names=names, dest=dest, group=group, commands=frozenset(commands),
                  effect=effect, help=help, **kw)


def flag(names, dest=None, **kw) -> Option:
    return option(names, dest, action="store_true", **kw)


#: Help groups, in the order ``--help`` shows them.
GROUPS = {
    "input": "the job",
    "states": "model states (without MODEL: --params N)",
    "model": "model (Megatron-LM argument names)",
    "layout": "layout",
    "training": "training",
    "finetune": "fine-tuning (LoRA / QLoRA adapters on a frozen base)",
    "allowances": "allowances (set 0 to drop one)",
    "framework": "a framework's job: a launch command pasted whole, after `--` or not "
                 "(Megatron-LM's pretrain_gpt.py / pretrain_hybrid.py with Megatron's "
                 "defaults; a Hugging Face "
                 "Trainer script, `trl sft` or a deepspeed launch with theirs: "
                 "docs/howto-paste-launch-command.md), or a config file",
    "cluster": "cluster (communication, bubble, FLOPs, step time, MFU)",
    "search": "search (values to try)",
    "time": "training time",
    "check": "the training log (memsym check)",
    "output": "output",
}

