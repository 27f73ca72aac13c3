"""One reading of a ``memsym search`` command line that names a job: the search's own words
(the searched knobs, the GPU count, the machine and the output) for argparse, the job's words
(the MODEL, the files and recipes, pasted framework arguments) for ``estimate``'s reading
(:mod:`memsym.cli.reading`, :mod:`memsym.cli.search_job`).

Nothing here evaluates a word.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..text import looks_like_option
from .reading import LAUNCHER_WORDS, option_arities, subparser, take_values

__all__ = ["JOB_INPUTS", "SEARCH_OWN", "PASTED_KNOBS", "SearchWords", "prepare_search"]

#: The options that name a job's file or recipe: any of them makes a search a job's.
JOB_INPUTS = ("--launch-script", "--args-file", "--bridge-recipe", "--recipe",
              "--deepspeed-config", "--torchtitan-config")

#: The destinations of ``memsym search``'s options that stay the search's beside a job: the
#: searched knobs (pins), the GPU count, the machine searched on and the output.  Every other
#: option is the job's, read as ``estimate`` reads it (Megatron-LM's ``--fsdp-double-buffer``
#: and ``--tp-comm-overlap-cfg`` too: with a job they are its arguments).
SEARCH_OWN = frozenset((
    "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch_size", "sharding", "recompute_granularity",
    "offload", "first_stage_layers", "last_stage_layers", "gpus", "top", "emit", "emit_dir",
    "no_uneven_stages", "no_sequence_parallel", "json", "gpu", "gpu_memory", "margin",
    "gpus_per_node", "efficiency"))


#: The searched knobs a pasted Megatron-LM command spells too: after its launcher or script
#: (``torchrun``, ``pretrain_gpt.py``) they are the job's own layout, not the search's pins.
PASTED_KNOBS = frozenset(("tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch_size",
                          "recompute_granularity", "first_stage_layers", "last_stage_layers"))


@dataclass
class SearchWords:
    """The job's words of a ``memsym search`` command line (:func:`prepare_search`).

    Attributes
    ----------
    job : list of str
        The words ``estimate``'s reading reads (the MODEL, the files, pasted arguments,
        memsym's job options).
    sources : list of str
        The files and recipe named (``--launch-script run.sh``), as given.
    reading : argparse.Namespace
        ``memsym estimate``'s reading of the job's words (its parsed options, ``job_words``
        their sorting), set by :func:`memsym.cli.main`.
    """

    job: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    reading: object = None


def _launcher_word(w: str) -> bool:
    return w in LAUNCHER_WORDS or w.endswith(".py") or \
        w.rsplit("/", 1)[-1].startswith(("python", "torchrun"))


def prepare_search(parser, raw):
    """``(argv for argparse, SearchWords or None)`` of a ``memsym search`` command line
    ``raw``: without a job (no file, recipe, config or pasted framework argument) the words
    as given; with one, the search's own options (:data:`SEARCH_OWN`) for argparse and the
    rest, in order, for ``estimate``'s reading (after a pasted command's launcher or script,
    its layout words too: :data:`PASTED_KNOBS`).

    Examples
    --------
    >>> from memsym.cli import build_parser
    >>> argv, words = prepare_search(build_parser("search"), ["search", "--launch-script",
    ...     "run.sh", "--gpu", "h100-80gb", "--tp", "2", "4", "--seq-length", "8192"])
    >>> argv, words.job, words.sources
    (['search', '--gpu', 'h100-80gb', '--tp', '2', '4'], ['--launch-script', 'run.sh', '--seq-length', '8192'], ['--launch-script run.sh'])
    """
    sub = subparser(parser, "search")
    words = list(raw[1:])
    if sub is None or any(w in ("-h", "--help") for w in words):
        return list(raw), None
    arities = option_arities(sub)
    dests = {o: a.dest for a in sub._actions for o in a.option_strings}
    own = {o for o, dest in dests.items() if dest in SEARCH_OWN}
    mine, out, job, pasted = [], SearchWords(), False, False
    i = 0
    while i < len(words):
        w = words[i]
        name, eq, inline = w.partition("=")
        option = looks_like_option(w)
        if option and name in own and not (pasted and dests[name] in PASTED_KNOBS):
            got, i = take_values(words, i + 1, arities[name], inline if eq else None)
            mine += [w, *got]
            continue
        if option and name in JOB_INPUTS:
            job = True
            value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
            out.sources.append(f"{name} {value}".strip())
        elif option and name in arities:
            # memsym's own option: its values are its (--framework deepspeed names no launcher)
            got, i = take_values(words, i + 1, arities[name], inline if eq else None)
            out.job += [w, *got]
            continue
        elif not option and _launcher_word(w):
            job = pasted = True         # a pasted command: its layout words are the job's
        elif option and name not in arities and name != "--world-size":
            job = True                  # a pasted framework argument
        out.job.append(w)
        i += 1
    if not job:
        return list(raw), None
    return [raw[0], *mine], out
