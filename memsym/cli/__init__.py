"""The ``memsym`` command: a stable interface for scripts and people.

Each subcommand lives in its own module with ``add_parser(subparsers)`` and ``run(args)``;
:data:`COMMANDS` lists them.  Bad input is one line on stderr and exit status 2 (never a
traceback); a sizing question without an answer ("nothing fits") is exit status 1.
Modules import SymPy-heavy code only inside ``run`` so that ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["main", "COMMANDS", "ArgumentParser"]

#: subcommand -> module (relative to this package); a module registers one subcommand.
COMMANDS = {
    "estimate": ".estimate",
    "solve": ".solve",
    "latex": ".latex",
    "time": ".time_cmd",
    "bench": ".bench",
    "search": ".search",
    "min-gpus": ".min_gpus",
    "plot": ".plot",
    "models": ".catalogue",
    "gpus": ".catalogue",
    "check": ".check",
}


class UsageError(Exception):
    """Raised by :class:`ArgumentParser` instead of printing usage and exiting."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line (the caller prints it)."""

    def error(self, message):  # noqa: D401 - argparse API
        raise UsageError(f"{self.prog}: error: {message}")


def build_parser(command: str | None = None) -> ArgumentParser:
    """The ``memsym`` parser: every subcommand, or only ``command``'s when one is named.

    A run needs only its own subcommand's parser: building the other ten (their option rows,
    help texts and argparse actions) is a fifth of the start-up of ``memsym estimate``, so
    :func:`main` names the command its first word gives; ``memsym --help``, ``--version`` and
    a misspelt command build them all (argparse lists the choices).
    """
    from ..version import __version__

    parser = ArgumentParser(
        prog="memsym",
        description="GPU memory and communication cost of LLM training, derived symbolically.")
    parser.add_argument("--version", action="version", version=f"memsym {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True
    modules = [COMMANDS[command]] if command in COMMANDS else COMMANDS.values()
    for module in dict.fromkeys(modules):   # a module may register several commands
        importlib.import_module(module, __name__).add_parser(sub)
    return parser


def _search_words(parser, raw):
    """``memsym search``'s words: with a job, the search's own for its parser, and the job's
    read as ``memsym estimate`` reads them (its parser, named ``memsym search`` in its
    errors), carried in ``words.reading`` (:mod:`memsym.cli.search_job`)."""
    from .reading import prepare_argv, subparser
    from .search_words import prepare_search

    ordered, words = prepare_search(parser, raw)
    if words is not None:
        estimate = build_parser("estimate")
        subparser(estimate, "estimate").prog = "memsym search"
        argv, sorted_words = prepare_argv(estimate, ["estimate", *words.job], searched=True)
        words.reading = estimate.parse_args(argv)
        words.reading.job_words = sorted_words
    return ordered, words


def _settle(args) -> None:
    """Megatron-LM's spellings memsym's options take as more than one setting
    (``--optimizer dist_muon``: :func:`memsym.cli.options.expand_dist_muon`), in the
    command's namespace and in a search's job reading."""
    from .option_schema import SEARCH
    from .options import expand_dist_muon

    expand_dist_muon(args, args.command in SEARCH)
    reading = getattr(args.job_words, "reading", None)
    if reading is not None:
        expand_dist_muon(reading, False)


def main(argv=None) -> int:
    """Run the command line; returns the exit status.

    A command's standard output is collected while it runs and written in one go once it
    has finished (:func:`memsym.cli.output.write_stdout`): a command that fails half-way
    prints nothing on stdout, and a write that fails (closed stdout, a closed pipe, a full
    disk) is an error with exit status 2, not a silent 0.
    """
    import contextlib
    import gc
    import io

    from ..errors import MemsymError, NoFitError
    from ..text import printable
    from .output import write_stdout

    # The process's own command line (argv None: the ``memsym`` script, ``python -m memsym``):
    # importing SymPy and the command's modules creates some 10^5 objects that live as long
    # as the process, and the cyclic collector, triggered every few hundred allocations,
    # traverses them again and again while they are made (a sixth of ``import sympy``).  The
    # collector pauses until the command's arguments are parsed (their types import what they
    # need: ``--params`` SymPy), then ``gc.freeze()`` moves what start-up made out of every
    # later collection and the collector resumes for the command.
    # Called with a list (tests, scripts), the host process's collector is left alone.
    startup = argv is None and gc.isenabled()
    if startup:
        gc.disable()
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            raw = list(sys.argv[1:] if argv is None else argv)
            try:
                parser = build_parser(raw[0] if raw else None)
                # a job command's words are sorted once (memsym's options, a pasted
                # Megatron-LM command, the MODEL) before argparse reads memsym's own:
                # memsym.cli.reading
                from .reading import prepare_argv

                ordered, words = prepare_argv(parser, raw)
                if raw and raw[0] == "search":      # a job's words beside the search's own
                    ordered, words = _search_words(parser, raw)
                # parsing converts the values (--params 175B: memsym.units, which imports
                # SymPy): still start-up
                args, unknown = parser.parse_known_args(ordered)
            finally:
                if startup:
                    gc.freeze()
                    gc.enable()
            if unknown:     # named by its command, as argparse names a bad argument
                hint = "; the GPUs to search on are --gpus N" if "--world-size" in unknown \
                    and args.command == "search" else ""
                raise UsageError(f"memsym {args.command}: error: unrecognized arguments: "
                                 + " ".join(unknown) + hint)
            args.job_words = words
            _settle(args)
            status = int(args.run(args) or 0)
        write_stdout(buffer.getvalue())
        return status
    except SystemExit:                 # --help and --version print, then exit
        write_stdout(buffer.getvalue())
        raise
    except UsageError as exc:
        print(printable(str(exc), 400), file=sys.stderr)
        return 2
    except NoFitError as exc:
        print(f"memsym: {printable(str(exc), 400)}", file=sys.stderr)
        if exc.hint:
            print(f"memsym: hint: {printable(exc.hint, 400)}", file=sys.stderr)
        return 1
    except MemsymError as exc:
        print(f"memsym: error: {printable(str(exc), 400)}", file=sys.stderr)
        return 2
    except OSError as exc:  # --output into a missing folder, a config.json we may not read
        where = f" {printable(exc.filename)!r}" if exc.filename else ""
        print(f"memsym: error: cannot use{where}: {exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
