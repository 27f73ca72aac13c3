"""The table of options (issue 28): every option of every ``memsym`` subcommand is one row of
:data:`OPTIONS` (:mod:`memsym.cli.option_rows`; its schema :mod:`memsym.cli.option_schema`).

A row says everything about one option: its names, how many values it takes and of what type,
the job option it sets (:data:`memsym.job.DEFAULTS` names), the value used when it is absent
and where that default comes from, whether it changes memory or time (or only what is shown),
and which subcommands take it (``memsym search`` and ``min-gpus`` take the same job options,
some of them as a list of values to try).  The argparse parsers of the subcommands
(:func:`add_options`), their ``--help`` text and the option reference
(``docs/options.md``, written by ``tools/option_reference.py``) are generated from :data:`OPTIONS`; a test
fails when the reference is stale or when an option is declared anywhere else.

The Megatron-LM arguments a pasted launch command may carry are Megatron's own table
(:data:`memsym.readers._megatron_flags.FLAGS`, generated from Megatron-LM's ``arguments.py``);
the rows here that spell a Megatron-LM argument use Megatron's name first and its meaning.

Building a parser imports no SymPy.
"""

from __future__ import annotations

from .option_rows import OPTIONS, SWITCH_FLAGS
from .option_schema import (EFFECTS, GROUPS, JOB, JOB_COMMANDS, JOB_DEFAULTS, PLOT_KINDS,
                            PLOT_UNKNOWNS, SEARCH, SEARCH_COMMANDS, SOLVE_UNKNOWNS, Option)

__all__ = ["Option", "OPTIONS", "GROUPS", "EFFECTS", "JOB_COMMANDS", "SEARCH_COMMANDS",
           "add_options", "rows", "shown", "job_fields", "switches",
           "arch_options", "memsym_spellings", "fill_model_state_defaults", "PLOT_KINDS",
           "PLOT_UNKNOWNS", "SOLVE_UNKNOWNS", "help_text"]


def rows(command: str) -> tuple:
    """The rows of ``command`` in help order."""
    order = list(GROUPS)
    mine = [o for o in OPTIONS if command in o.commands]
    return tuple(sorted(mine, key=lambda o: order.index(o.group)))


def shown(value) -> str:
    """A default as the help and the option reference show it (``on``, ``64 MiB``, ``2``)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int) and value >= 2**20 and value % 2**20 == 0:
        return f"{value // 2**20} MiB"
    return str(value)


def help_text(o: Option, command: str) -> str:
    """The ``--help`` line of ``o`` in ``command``: its meaning and its default with the source."""
    listed = command in SEARCH and o.search == "list"
    if listed:   # a search tries values: its default is said in search_help, not the job's
        return (o.search_help or o.help).replace("%", "%%")
    text = o.help
    if o.default is not None and o.source:
        text += f" (default {shown(o.default)}: {o.source})"
    elif o.source:
        text += f" (default: {o.source})"
    return text.replace("%", "%%")


def add_command(sub, run, command: str, **kwargs):
    """The parser of subcommand ``command`` (``sub.add_parser`` with ``kwargs``): its options
    (:func:`add_options`) and ``run``, the function it calls."""
    parser = sub.add_parser(command, **kwargs)
    add_options(parser, command)
    parser.set_defaults(run=run)
    return parser


def add_options(parser, command: str, *, skip=()) -> None:
    """Add the options of ``command`` (:data:`OPTIONS`) to an argparse ``parser``.

    Options absent from the command line are None (or False for a flag), never a value that
    looks given: a job's defaults are the job's (:data:`memsym.job.DEFAULTS`), the recipe's or
    the framework's, and reported as such.
    """
    groups, exclusive = {}, {}
    for o in rows(command):
        if o.dest in skip:
            continue
        if o.group not in groups:
            groups[o.group] = parser.add_argument_group(GROUPS[o.group])
        target = groups[o.group]
        if o.exclusive:
            if o.exclusive not in exclusive:
                exclusive[o.exclusive] = target.add_mutually_exclusive_group()
            target = exclusive[o.exclusive]
        listed = command in SEARCH and o.search == "list"
        kw = {"help": help_text(o, command)}
        if o.action:
            kw["action"] = o.action
        else:
            kw["type"] = (o.search_type or o.type) if listed else o.type
            if kw["type"] is None:
                kw.pop("type")
            kw["nargs"] = "+" if listed else o.nargs
            if o.const is not None:
                kw["const"] = o.const
            if o.choices is not None and not (listed and o.search_type):
                kw["choices"] = o.choices
            if o.metavar:
                kw["metavar"] = o.metavar
        if o.positional:
            # MODEL is optional for a job (--params N estimates the model states alone) and
            # for a search (a job's file or recipe may name the model), required for min-gpus
            kw.pop("nargs", None)
            if o.nargs is not None and command != "min-gpus":
                kw.update(nargs=o.nargs, default=None)
            target.add_argument(o.dest, **kw)
            continue
        if command in SEARCH and o.dest in ("gpu",):
            kw["required"] = True
        elif o.required:
            kw["required"] = True
        target.add_argument(*o.names, dest=o.dest, default=o.parser_default, **kw)


# ---------------------------------------------------------------------------------------------
# what the rest of the CLI reads from the table
# ---------------------------------------------------------------------------------------------
def job_fields() -> tuple:
    """``(dest, job option)`` of estimate's valued (non-flag) options that set one job option
    each."""
    skip = {"hidden_dropout", "attention_dropout", "sharding", "gpu", "gpu_memory",
            "gpus_per_node", "metric", "workspace", "nccl_buffers", "fragmentation",
            "world_size", "framework", "convention"}
    return tuple((o.dest, o.field) for o in rows("estimate")
                 if o.field and not o.action and o.dest not in skip and o.group not in
                 ("model",) and not o.positional)


def fill_model_state_defaults(args) -> None:
    """The model-state estimate's precision, optimizer and offload where not given: the
    job's defaults (:data:`memsym.job.DEFAULTS`), one table for every path.

    Read from the rows that state them (``source`` the job's defaults, each checked equal to
    :data:`memsym.job.DEFAULTS` by tests/test_option_table.py), so that an estimate of model
    states alone does not load the job's modules (a tenth of its start-up).
    """
    for name in ("precision", "optimizer", "offload"):
        if getattr(args, name, None) is None:
            row = next(o for o in OPTIONS if o.dest == name
                       and (o.source or "").startswith(JOB_DEFAULTS))
            setattr(args, name, row.default)


def switches() -> tuple:
    """``(flag, dest, job option, value)`` of the framework switches (plain store_true flags)."""
    names = set(SWITCH_FLAGS)
    return tuple((o.names[0], o.dest, o.field, o.value) for o in OPTIONS if o.names[0] in names)


def arch_options() -> tuple:
    """The destinations of the valued architecture options (Megatron-LM's names)."""
    return tuple(o.dest for o in OPTIONS if o.group == "model" and not o.action
                 and o.dest != "normalization")


def memsym_spellings() -> dict:
    """memsym's shorthand of a Megatron-LM argument -> Megatron's spelling (``--tp`` ->
    ``--tensor-model-parallel-size``): rows whose first name is Megatron's."""
    out = {}
    for o in OPTIONS:
        if len(o.names) > 1 and JOB & o.commands and o.names[0].startswith("--") \
                and o.dest not in ("no_flash_attn", "dp"):
            for alias in o.names[1:]:
                if alias.startswith("--"):
                    out[alias] = o.names[0]
    return out
