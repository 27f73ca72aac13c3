"""One reading of a job's command line: the words a user pastes, sorted before argparse sees them.

A job command (``estimate``, ``solve``, ``plot``, ``latex``) takes memsym's own options, the
Megatron-LM arguments of a launch command pasted whole (with or without its launcher:
``torchrun ...``, ``python -m torch.distributed.run ...``, ``deepspeed ...``, ``python
pretrain_gpt.py``, environment assignments such as ``WORLD_SIZE=64``) and a MODEL (a preset or
a config.json, before or after the command).  :func:`split_job_words` walks the words once,
each option taking exactly as many values as its parser defines (memsym's own from the
subcommand's argparse parser, Megatron's from its argument table,
:data:`memsym.readers._megatron_flags.FLAGS`), so a value that looks like a word (``--lr
3e-4``, ``--position-embedding-type rope``, ``--moe-layer-freq "[0]*3+[1]*58"``) is never
taken for the MODEL.

Which reading applies is decided by one thing only, whether a MODEL is named:

* with a MODEL its recipe is the baseline; memsym's options and the Megatron arguments it
  spells itself are read by argparse, the other Megatron arguments are changes to the recipe
  (:func:`memsym.readers.megatron.read_megatron_overrides`);
* without a MODEL, a job is a Megatron-LM command: every Megatron argument (memsym's
  shorthands such as ``--tp`` translated to Megatron's spelling) is read by Megatron-LM's
  reader with Megatron's defaults (:func:`memsym.readers.megatron.read_megatron_args`), and
  memsym's own options are applied on top of it;
* without a MODEL and without any model argument, only the model states are estimated
  (``--params N``);
* a Hugging Face Trainer launch (``deepspeed train.py --deepspeed ds.json
  --per_device_train_batch_size 4 ...``) is read by its own reader and written as memsym's
  options for the same job (:mod:`memsym.cli.hf_launch`), never by Megatron-LM's.  The rule:
  some option names a field of transformers' ``TrainingArguments`` (or run_clm.py's) in
  transformers' underscore spelling, or is ``--deepspeed`` / ``--fsdp`` / ``--optim``, and is
  not a Megatron-LM argument (Megatron spells its arguments with dashes), and the script is not
  Megatron's ``pretrain_*.py``;
* with ``--bridge-recipe NAME`` (or run_recipe.py's ``--recipe NAME``) the job is a
  Megatron-Bridge recipe: the ``section.field=value`` words and run_recipe.py's options
  (``-tp 4``) are its overrides (:attr:`JobWords.bridge`, read by
  :mod:`memsym.readers.bridge`), a launcher's words give the world size, and a MODEL is
  refused (the recipe names it).

A ``memsym search`` command line that names a job is split into the search's words and the
job's first (:mod:`memsym.cli.search_words`); the job's are then read here.  Nothing here
evaluates a word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..text import looks_like_option, option_values
from .option_table import memsym_spellings

__all__ = ["JobWords", "split_job_words", "LAUNCHER_WORDS", "MEMSYM_SPELLINGS", "option_arities",
           "take_values", "subparser", "expand_files"]

#: Words of a launcher that precede the training script (dropped): torchrun and its module
#: spellings, the Python interpreter and its unbuffered flag, DeepSpeed's and uv's launchers.
LAUNCHER_WORDS = frozenset({"torchrun", "python", "python3", "-m", "-u", "torch.distributed.run",
                            "torch.distributed.launch", "deepspeed", "uv", "run"})

#: DeepSpeed's launcher options (deepspeed/launcher/runner.py ``parse_args``): the two that
#: fix the world size map to torchrun's, the rest take one value and change nothing here.
_DEEPSPEED_LAUNCHER = {"--num_gpus": "--nproc_per_node", "--num-gpus": "--nproc_per_node",
                       "--num_nodes": "--nnodes", "--num-nodes": "--nnodes"}
_DEEPSPEED_LAUNCHER_IGNORED = frozenset({"--hostfile", "--include", "--exclude", "--launcher",
                                         "--ssh_port"})

#: memsym's shorthands of Megatron-LM arguments -> Megatron's spelling (read by Megatron's
#: reader when no MODEL is named, so that ``--tp 2`` and ``--tensor-model-parallel-size 2``
#: are one argument): from the table of options.
MEMSYM_SPELLINGS = memsym_spellings()

#: memsym's values of a Megatron-spelled option that Megatron itself does not take: the option
#: stays memsym's (argparse) in every reading.
_MEMSYM_VALUES = {"--recompute-granularity": {"none", "selective-op"},
                  "--recompute": {"none", "selective-op"},
                  "--finetune": {"full", "lora", "qlora"}}

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


@dataclass
class JobWords:
    """The words of one job command line, sorted.

    Attributes
    ----------
    argparse : list of str
        What the subcommand's argparse parser reads (its positionals and memsym's options).
    megatron : list of str
        Megatron-LM arguments (and the launcher's options) for Megatron's reader.
    model : str or None
        The MODEL word, when one is named.
    launcher : bool
        Whether a launcher or script prefix was pasted (and dropped).
    environment : dict
        ``NAME=VALUE`` assignments pasted before the command (``WORLD_SIZE`` gives the world
        size, as Megatron reads it from the environment).
    hf_trainer : HfTrainerLaunch or None
        A Hugging Face Trainer launch, read (:mod:`memsym.cli.hf_launch`): its words are
        replaced by memsym's options for the same job.
    bridge : list of str
        With ``--bridge-recipe`` / ``--recipe``: the ``section.field=value`` overrides, those of
        run_recipe.py's options (``-tp 4``) first, so that a trailing override wins as in
        run_recipe.py (:mod:`memsym.readers.bridge`).
    """

    argparse: list = field(default_factory=list)
    megatron: list = field(default_factory=list)
    model: str | None = None
    launcher: bool = False
    environment: dict = field(default_factory=dict)
    bridge: list = field(default_factory=list)
    hf_trainer: object = None


def _arity(action) -> object:
    n = action.nargs
    if n == 0:
        return 0
    if n in (None, "?"):
        return 1
    return n


def option_arities(parser) -> dict:
    """option string -> arity of every option of ``parser`` (0, 1, '+', '*', or a count; an
    optional value ``nargs='?'`` with choices is the set of its choices)."""
    return {o: (frozenset(a.choices) if a.nargs == "?" and a.choices else _arity(a))
            for a in parser._actions for o in a.option_strings}


def take_values(words, i, arity, inline):
    """The values of an option of ``arity`` at ``words[i:]``: (values, next index)."""
    if isinstance(arity, frozenset):   # an optional value: only one of its choices
        take = inline is None and i < len(words) and words[i] in arity
        return (words[i:i + 1], i + 1) if take else ([], i)
    if arity == 0:
        return [], i
    if inline is not None and arity == 1:
        return [], i
    return option_values(words, i, arity)


def split_job_words(parser, words, *, positionals: int = 0, from_file=frozenset()) -> JobWords:
    """Sort the words of a job command for its two readers (see the module's docstring).

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The subcommand's parser (memsym's options and their arities).
    words : list of str
        The words after the subcommand (and after ``solve``'s unknown).
    positionals : int
        Positional words the subcommand takes before its MODEL (``plot``: its KIND).
    from_file : set of int
        Indices of ``words`` read from a launch script or argument file: those never name
        the MODEL (a stray word there is an error naming it).

    Returns
    -------
    JobWords

    Examples
    --------
    >>> import argparse
    >>> p = argparse.ArgumentParser()
    >>> _ = p.add_argument("model", nargs="?"); _ = p.add_argument("--tp", type=int)
    >>> w = split_job_words(p, ["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py",
    ...                         "--lr", "3e-4", "--tp", "2", "llama2-7b"])
    >>> w.model, w.argparse, w.megatron
    ('llama2-7b', ['llama2-7b', '--tp', '2'], ['--nproc_per_node', '8', '--lr', '3e-4'])
    """
    from ..errors import InvalidValueError

    own = option_arities(parser)
    out = JobWords()
    bridge = any(w.partition("=")[0] in ("--bridge-recipe", "--recipe") for w in words) \
        and "--bridge-recipe" in own
    mine, theirs, pos, convenience = _sort_words(words, own, bridge, from_file, out)
    if len(pos) > positionals + 1:
        extra = pos[positionals + 1]
        _refuse_bridge_words(pos[positionals], extra, bridge)
        raise InvalidValueError(
            f"unexpected word {extra[:60]!r}: one MODEL (a preset, a config.json or a Hub id) is taken; is "
            "it the value of a flag that takes none, or a value with a space in it (quote it)?")
    out.model = pos[positionals] if len(pos) > positionals else None
    if out.model is not None:
        _refuse_bridge_words(out.model, None, bridge)
    if out.model is None and (theirs or out.launcher or _names_a_model(mine)) \
            and not _model_states_only(mine) and not bridge:
        # a Megatron-LM command without a model: Megatron's reader reads every argument it
        # knows, memsym's shorthands in Megatron's spelling
        mine = _respell_for_megatron(mine, theirs)
    if "WORLD_SIZE" in out.environment:
        theirs.append(("--world-size", [out.environment["WORLD_SIZE"]]))
    out.argparse = pos[:positionals + (1 if out.model is not None else 0)]
    for word, got in mine:
        out.argparse += [word, *got]
    for word, got in theirs:
        out.megatron += [word, *got]
    out.bridge = convenience + out.bridge
    return out


def _refuse_bridge_words(model: str, extra, bridge: bool):
    """A Megatron-Bridge recipe name given as the MODEL, or an override word without
    ``--bridge-recipe``: one line saying how Bridge's command is written.  The recipe table is
    imported only for a word shaped like one (every recipe name holds ``_config``; an override
    is ``section.field=value``): a preset's command does not pay for it."""
    from ..errors import InvalidValueError

    if bridge:
        return
    if "_config" in model:
        from ..readers.bridge import is_recipe_name
        if is_recipe_name(model):
            raise InvalidValueError(f"{model[:80]!r} is a Megatron-Bridge recipe, not a model: "
                                    f"give it as --bridge-recipe {model[:80]} "
                                    "[section.field=value ...]")
    if extra is not None and "." in extra.partition("=")[0] and "=" in extra:
        from ..readers.bridge_command import looks_like_override
        if looks_like_override(extra):
            raise InvalidValueError(f"{extra[:60]!r} is a Megatron-Bridge override: it follows "
                                    "--bridge-recipe NAME (the recipe it changes)")


def _sort_words(words, own, bridge, from_file, out):
    """``(mine, theirs, pos, convenience)``: memsym's and Megatron's (option word, values)
    pairs, the positional words and run_recipe.py's options, ``out``'s launcher, environment
    and overrides filled on the way."""
    from ..errors import InvalidValueError

    mine, theirs, pos = [], [], []   # (option word, values) pairs and positional words
    convenience = []                 # run_recipe.py's options as overrides (before the others)
    i, n = 0, len(words)
    while i < n:
        w = words[i]
        i += 1
        if w == "--":
            pos.extend(words[i:])
            break
        if bridge:
            taken = _bridge_word(words, i, w, convenience, out.bridge)
            if taken is not None:
                i = taken
                continue
        if w in ("-m", "-u") and (out.launcher or (i < n and words[i] in LAUNCHER_WORDS)):
            out.launcher = True                  # the interpreter's own flags
            continue
        if not looks_like_option(w):
            _plain_word(w, i - 1 in from_file, not theirs and not mine, out, pos)
            continue
        name, eq, inline = w.partition("=")
        inline = inline if eq else None
        if name in _DEEPSPEED_LAUNCHER or name in _DEEPSPEED_LAUNCHER_IGNORED:
            got, i = take_values(words, i, 1, inline)
            if name in _DEEPSPEED_LAUNCHER:
                theirs.append((_DEEPSPEED_LAUNCHER[name], got if inline is None else [inline]))
            out.launcher = True
            continue
        arity = own.get(name)
        if arity is not None:
            got, i = take_values(words, i, arity, inline)
            if arity == 1 and inline is None and not got:
                shown = f", got {words[i][:40]!r}" if i < n else ""
                raise InvalidValueError(f"{name} needs a value{shown} (a value starting with '-' "
                                        f"is given as {name}=VALUE)")
            mine.append((w, got))
            continue
        got, i = _megatron_option(words, i, name, inline)
        theirs.append((w, got))
    return mine, theirs, pos, convenience


def _clipped(word: str) -> str:
    """A word quoted for a message, its first 40 characters where it is longer."""
    return repr(word) if len(word) <= 40 else repr(word[:40]) + "..."


def _plain_word(w, from_file, before_options, out, pos):
    """Sort a word that is not an option: an environment assignment (before any option), a
    launcher's word, or a positional one (an error when read from a file)."""
    from ..errors import InvalidValueError

    head = w.split(None, 1)
    if len(head) == 2 and (head[0] in LAUNCHER_WORDS or head[0].endswith(".py")
                           or head[0].rsplit("/", 1)[-1].startswith(("python", "torchrun"))):
        # a whole command in one word (pasted in quotes): never a launcher word to drop
        raise InvalidValueError(
            f"one word holds a whole command ({_clipped(w)}): paste it without the quotes, "
            "as the shell splits it, or save it as a script for --launch-script")
    if _ASSIGNMENT.match(w) and before_options:
        name, _, value = w.partition("=")
        out.environment[name] = value
    elif w in LAUNCHER_WORDS or w.rsplit("/", 1)[-1].startswith(("python", "torchrun")) \
            or w.endswith(".py"):
        out.launcher = True
    elif from_file:
        raise InvalidValueError(
            f"unexpected word {w[:60]!r} in the launch script or argument file: "
            "pretrain_gpt.py takes no positional arguments (an unset variable, or the "
            "value of a flag that takes none?)")
    else:
        pos.append(w)


def _megatron_option(words, i, name, inline):
    """``(values, index after them)`` of Megatron-LM's option ``name`` at ``words[i - 1]``."""
    # Megatron's table is read only where a word is not memsym's own (a pasted command)
    from ..errors import InvalidValueError
    from ..readers.megatron import SCHEDULE_ENTRY, megatron_arity
    from ..readers.megatron_arguments import ArgumentError

    if len(name.split()) > 1:      # several arguments in one word (pasted in quotes)
        raise InvalidValueError(f"one word holds several arguments ({_clipped(name)}): paste "
                                "them without the quotes, as the shell splits them")

    arity = megatron_arity(name)
    if arity is None:
        raise ArgumentError(name)
    got, i = take_values(words, i, arity, inline)
    if name == "--step-batch-size-schedule":
        # its entries split into words by an unquoted ${ARR[@]}: the reader takes them back
        while i < len(words) and SCHEDULE_ENTRY.fullmatch(words[i]):
            got.append(words[i])
            i += 1
    return got, i


def _respell_for_megatron(mine, theirs):
    """memsym's options that Megatron-LM also knows moved to ``theirs`` in Megatron's
    spelling (unless a value is memsym's own); the others are returned."""
    from ..readers.megatron import megatron_arity

    kept = []
    for word, got in mine:
        name, eq, inline = word.partition("=")
        spelled = MEMSYM_SPELLINGS.get(name, name)
        values = got if not eq else [inline]
        if megatron_arity(spelled) is not None and not set(values) & _MEMSYM_VALUES.get(name, set()):
            theirs.append((spelled if not eq else f"{spelled}={inline}", got))
        else:
            kept.append((word, got))
    return kept


def _bridge_word(words, i, w, convenience, overrides):
    """The index after ``w`` when it is a Megatron-Bridge word (an override, or one of
    run_recipe.py's options and its value), else None."""
    from ..errors import InvalidValueError
    from ..readers.bridge_command import RUN_RECIPE_FLAGS, RUN_RECIPE_OPTIONS, SECTIONS, looks_like_override
    from ..readers.bridge_models import is_model_word

    if not looks_like_option(w):
        if looks_like_override(w) or w.partition("=")[0].lstrip("+~") in SECTIONS:
            overrides.append(w)
            return i
        if w in LAUNCHER_WORDS or w.endswith(".py") or _ASSIGNMENT.match(w) \
                or w.rsplit("/", 1)[-1].startswith(("python", "torchrun")) or is_model_word(w):
            return None
        raise InvalidValueError(f"{w[:60]!r}: with --bridge-recipe the words are "
                                "section.field=value overrides and at most one MODEL (a preset, "
                                "a config.json or a Hub id) in place of the recipe's model")
    name, eq, inline = w.partition("=")
    if name in RUN_RECIPE_FLAGS:            # run_recipe.py's switches take no value
        if eq:
            raise InvalidValueError(f"{name} is a switch of run_recipe.py: give it without a value")
        if name == "--deterministic":       # read by memsym.readers.bridge
            overrides.append(name)
        return i
    if name not in RUN_RECIPE_OPTIONS:
        return None
    if eq:
        value = inline
    elif i < len(words):
        value, i = words[i], i + 1
    else:
        raise InvalidValueError(f"{name} needs a value")
    if name == "--mode" and value not in ("pretrain", "sft", "lora", "dora"):
        raise InvalidValueError(f"--mode {value[:40]}: run_recipe.py's modes are pretrain, sft, "
                                "lora, dora")
    if name in ("--mode", "--dataset", "--step-func", "--step_func"):
        # checked against the recipe by memsym.readers.bridge (a benchmark recipe refuses some)
        overrides.append(f"{name}={value}")
    if RUN_RECIPE_OPTIONS[name] is not None:
        convenience.append(f"{RUN_RECIPE_OPTIONS[name]}={value}")
    return i


def _names_a_model(mine) -> bool:
    """Whether memsym's options describe a model's architecture (no MODEL needed)."""
    from .job_options import ARCH_OPTIONS

    arch = {"--" + n.replace("_", "-") for n in ARCH_OPTIONS}
    return any(word.partition("=")[0] in arch for word, _ in mine) or \
        any(word.partition("=")[0] in ("--launch-script", "--args-file") for word, _ in mine)


def _model_states_only(mine) -> bool:
    """``--params N``: the model-state estimate (no architecture, no Megatron reading)."""
    return any(word.partition("=")[0] == "--params" for word, _ in mine)


#: Job subcommands -> positional words before their MODEL (``check``: its LOG).
JOB_COMMANDS = {"estimate": 0, "solve": 0, "plot": 0, "latex": 0, "check": 1}


def subparser(parser, name):
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict) and name in choices:
            return choices[name]
    return None


def prepare_argv(parser, raw, *, searched: bool = False):
    """``(argv for argparse, JobWords or None)`` of the whole command line ``raw``: a job
    command's words sorted by :func:`split_job_words`, any other command's left as given
    (``searched``: the job of a ``memsym search``, whose micro-batch the search varies)."""
    if not raw or raw[0] not in JOB_COMMANDS:
        return list(raw), None
    head, sub = [raw[0]], subparser(parser, raw[0])
    rest = list(raw[1:])
    if raw[0] in ("solve", "plot"):          # solve's UNKNOWN, plot's KIND: a subparser each
        if not rest or looks_like_option(rest[0]):
            return list(raw), None          # argparse says which unknowns (kinds) exist
        head.append(rest.pop(0))
        sub = subparser(sub, head[-1])
        if sub is None:
            return list(raw), None
    positionals = JOB_COMMANDS[raw[0]]
    if head[-1] == "memory-vs" and rest and not looks_like_option(rest[0]):
        from .plot import UNKNOWNS

        if rest[0] in UNKNOWNS:              # `plot memory-vs dp MODEL`: the swept unknown
            rest = ["--vs", *rest]
    cut = rest.index("--") if "--" in rest else len(rest)
    if cut + 1 < len(rest) and _starts_command(rest[cut + 1]):
        del rest[cut]            # `memsym estimate -- torchrun ...`: the pasted command follows
    expanded, from_file = expand_files(rest)
    hf = None
    if positionals == 0 and any(_trainer_spelling(w) for w in expanded):
        # a Hugging Face Trainer launch, never Megatron-LM's (the rule: memsym.cli.hf_launch)
        from ..readers.hf_trainer import is_hf_trainer_launch
        from .hf_launch import hf_trainer_words

        if is_hf_trainer_launch(expanded):
            expanded, hf = hf_trainer_words(option_arities(sub), expanded, searched=searched)
            from_file = frozenset()
    words = split_job_words(sub, expanded, positionals=positionals, from_file=from_file)
    words.hf_trainer = hf
    return head + words.argparse, words


def _starts_command(word) -> bool:
    """Whether ``word`` opens a pasted launch command: a launcher (:data:`LAUNCHER_WORDS`,
    Accelerate's and TRL's command-line tools, an interpreter or torchrun by path), a training
    script or an environment assignment before them."""
    base = str(word).rsplit("/", 1)[-1]
    return (word in LAUNCHER_WORDS or word in ("accelerate", "trl") or base.endswith(".py")
            or base.startswith(("python", "torchrun")) or bool(_ASSIGNMENT.match(str(word))))


def _trainer_spelling(word) -> bool:
    """Whether ``word`` may be a Hugging Face Trainer argument (an option with ``_`` in its
    name, or ``--deepspeed`` / ``--fsdp`` / ``--optim``): the readers load only then."""
    name = str(word).partition("=")[0]
    return name.startswith("--") and ("_" in name or name in ("--deepspeed", "--fsdp", "--optim"))


def expand_files(words):
    """``--launch-script FILE`` and ``--args-file FILE`` replaced by the words they hold, in
    place, so that a script or an argument file is read exactly as the same words pasted
    (later words win, as in argparse); and the indices of the words from files."""
    out, i, from_file = [], 0, set()
    while i < len(words):
        name, eq, inline = words[i].partition("=")
        if name not in ("--launch-script", "--args-file"):
            out.append(words[i])
            i += 1
            continue
        # the readers load only for a command line that names a file
        from ..errors import InvalidValueError
        from ..readers._values import read_bounded
        from ..readers.launch_script import read_argument_file, read_launch_script

        if eq:
            path, i = inline, i + 1
        elif i + 1 < len(words) and not looks_like_option(words[i + 1]):
            path, i = words[i + 1], i + 2
        else:
            raise InvalidValueError(f"{name} needs a file")
        if name == "--launch-script":
            # bounded, regular files only: a FIFO would block, a larger script is refused
            got = read_launch_script(read_bounded(path, "launch script", errors="replace"))
        else:
            got = read_argument_file(path)
        from_file.update(range(len(out), len(out) + len(got)))
        out += got
    return out, frozenset(from_file)
