"""Extract a training command's argument list from a bash launch script, without running it.

This module owns a small, bounded reader of the bash subset launch scripts use, read as bash
reads it: ``VAR=value``, arrays ``ARGS=( ... )`` and ``+=``, ``export``/``declare``/``readonly``,
``$VAR``/``${VAR}``/``${VAR:-default}`` (and ``-``, ``:=``, ``:+``, ``:?``, ``${#...}``),
``${ARR[@]}``/``${ARR[*]}``/``${ARR[n]}``, ``$((...))`` integer arithmetic (``+ - * / % **``),
quoting, comments, line continuations, ``&&``/``||`` lists and ``if``/``elif``/``else`` on
string and number tests it can decide, ``{ ...; }`` groups, pipelines, redirections,
here-documents and here-strings (their text is a command's input, never a command).
Commands are never executed: ``$(...)`` stays the text ``$(...)``.

Anything outside the subset (loops, functions, subshells, ``eval``, ``read``, brace expansion,
``$'...'``, pattern tests, assignments bash may or may not make, ...) is refused with the line
and the construct.  Reading is linear in the script, and every depth and size is bounded
while the script is read and expanded (:data:`memsym.limits.SHELL_MAX_DEPTH`,
:data:`~memsym.limits.SHELL_MAX_WORD_CHARS`, :data:`~memsym.limits.SHELL_MAX_EXPANDED_CHARS`,
:data:`~memsym.limits.SHELL_MAX_NUMBER_DIGITS`).

Two assumptions are made, and each is reported: a variable the script reads but never sets
(``$1``, ``$DATA``) stays in the words as its own text and is listed in ``unset`` (inside a
test or a ``${X:-default}`` it is taken as unset, as under ``env -i``; a variable bash sets
itself, ``$PWD``, ``$RANDOM``, is never taken as unset), and unquoted ``*``, ``?``, ``[`` and
``~`` are kept as written (as bash does when no file matches).

This module is the front end: it finds the training command among the commands the reading
recorded.  The reader of the bash subset itself is :mod:`memsym.readers.shell` (lexer, parser,
variables, arithmetic, expansion, interpreter), one module per stage.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..errors import InvalidValueError
from ..limits import SHELL_MAX_DEPTH
from ._values import MAX_ARGS, MAX_BYTES_INPUT, read_bounded
from .shell.errors import LaunchScriptError
from .shell.expansion import IFS_RUN
from .shell.interpreter import Exit, Interpreter
from .shell.lexer import Lexer
from .shell.parser import Parser

__all__ = ["LaunchScript", "LaunchScriptError", "parse_launch_script", "read_launch_script",
           "read_argument_file"]


@dataclass(frozen=True)
class LaunchScript:
    """What :func:`parse_launch_script` found.

    Attributes
    ----------
    argv : list of str
        torchrun's options (when launched by torchrun) followed by the training script's arguments.
    program : str or None
        The training script named on the command line (``pretrain_gpt.py``).
    nproc_per_node, nnodes : str or None
        torchrun's values as the script sets them.
    unset : tuple of str
        Variables the script reads but never sets (their ``$NAME`` stays in ``argv``).
    notes : tuple of str
        What was assumed (commands not run, the environment taken as empty, ...).
    """

    argv: list
    program: object = None
    nproc_per_node: object = None
    nnodes: object = None
    unset: tuple = ()
    notes: tuple = field(default_factory=tuple)


# ----------------------------------------------------------------------------------------------
# finding the training command
# ----------------------------------------------------------------------------------------------

_SCRIPT = re.compile(r"(?:^|/)pretrain_[A-Za-z0-9_]*\.py$|(?:^|/)train_[A-Za-z0-9_]*\.py$")


def _find_command(commands):
    for words, line in commands:
        for j, w in enumerate(words):
            if _SCRIPT.search(w):
                return words, j, line
    return None


def _split_launcher(words, j):
    """torchrun's options (kept) and the training script's arguments."""
    pre = words[:j]
    launcher_opts = []
    if "torchrun" in [os.path.basename(w) for w in pre] or "torch.distributed.run" in pre \
            or "torch.distributed.launch" in pre:
        k = max(i for i, w in enumerate(pre) if os.path.basename(w) == "torchrun"
                or w in ("torch.distributed.run", "torch.distributed.launch"))
        launcher_opts = pre[k + 1:]
    return launcher_opts, words[j + 1:]


def parse_launch_script(text: str, env: dict | None = None) -> LaunchScript:
    """Read a bash launch script and find its training command (nothing is run).

    The command is the first one naming ``pretrain_*.py`` (or ``train_*.py``): among the
    script's commands, then inside string variables (a command built as a string for
    ``srun bash -c``), and failing both, the variables whose value starts with ``--`` are joined
    in the order they were first set (a sourced model-configuration file).

    Parameters
    ----------
    text : str
        The script (at most 1 MiB).
    env : dict, optional
        Values for variables the script expects from outside (``{"1": "/data", "TP": "8"}``).

    Returns
    -------
    LaunchScript

    Examples
    --------
    >>> s = parse_launch_script('''
    ... GPUS=8
    ... ARGS=(--num-layers 2   # a comment
    ...       --hidden-size "${HIDDEN:-64}")
    ... torchrun --nproc_per_node $GPUS --nnodes 1 pretrain_gpt.py ${ARGS[@]} --save $1
    ... ''')
    >>> s.argv
    ['--nproc_per_node', '8', '--nnodes', '1', '--num-layers', '2', '--hidden-size', '64', '--save', '$1']
    >>> s.unset, s.nproc_per_node
    (('1',), '8')
    """
    _check_script_text(text)
    ev = Interpreter(env)
    _run_text(ev, text, 0)
    found = _find_command(ev.commands)
    source = None
    if found is None:
        found, source = _find_in_command_strings(ev)
    if found is None and ev.exited is not None:
        raise LaunchScriptError(f"launch script line {ev.exited}: the script exits before any "
                                "pretrain_*.py command (read with an empty environment)")
    if found is None:
        argv = _argument_variables(ev)
        program, launcher_opts = None, []
    else:
        words, j, line = found
        program = words[j]
        launcher_opts, args = _split_launcher(words, j)
        argv = launcher_opts + args
        if source:
            ev.note(f"training command found in {source}")
    nproc, nnodes = _torchrun_sizes(launcher_opts)
    if len(argv) > MAX_ARGS:
        raise LaunchScriptError(f"more than {MAX_ARGS} arguments")
    return LaunchScript(argv=argv, program=program, nproc_per_node=nproc, nnodes=nnodes,
                        unset=tuple(ev.unset), notes=tuple(ev.notes))


def _check_script_text(text):
    """Refuse what is not a launch script's text: not a string, over the size bound, a NUL
    character or a carriage return (said with its line)."""
    if not isinstance(text, str):
        raise LaunchScriptError(f"a launch script is text, got {type(text).__name__}")
    if len(text.encode("utf-8", "replace")) > MAX_BYTES_INPUT:
        raise LaunchScriptError(f"launch script larger than {MAX_BYTES_INPUT} bytes")
    if "\0" in text:
        raise LaunchScriptError("launch script holds a NUL character: not a text file")
    if "\r" in text:
        line = text.count("\n", 0, text.index("\r")) + 1
        raise LaunchScriptError(f"launch script line {line}: a carriage return (a Windows line "
                                "ending), which bash reads as part of a word; convert the file "
                                "to Unix line endings")


def _find_in_command_strings(ev: Interpreter):
    """The training command inside a string variable (in the order the variables were set),
    read in a copy of ``ev``'s variables: ``(found, source)``, ``(None, None)`` when none holds
    one; the unset variables of the reading that found it are added to ``ev``'s."""
    for name in list(ev.order):
        val = ev.vars.get(name)
        if isinstance(val, str) and ".py" in val:
            # a command built as a string (`srun bash -c "$CMD"`): read it in a copy of
            # the variables; the copy and the reading are paid from the same budget
            ev.spend(len(ev.vars) + len(val))
            sub = Interpreter(depth=1)
            sub.vars = {k: (list(v) if isinstance(v, list) else v) for k, v in ev.vars.items()}
            sub.order, sub.readonly, sub.budget = dict(ev.order), set(ev.readonly), ev.budget
            try:
                _run_text(sub, val, 1)
            except LaunchScriptError:
                continue
            finally:
                ev.budget = sub.budget
            found = _find_command(sub.commands)
            if found is not None:
                for u in sub.unset:
                    ev.unset.setdefault(u)
                return found, f"the command string in ${name}"
    return None, None


def _argument_variables(ev: Interpreter) -> list:
    """The words of the variables whose value starts with ``--``, joined in the order they were
    first set (a sourced model configuration), noted; refused when there are none."""
    argv, names = [], []
    for name in ev.order:
        val = ev.vars.get(name)
        words = val if isinstance(val, list) else (
            [w for w in IFS_RUN.split(val) if w] if isinstance(val, str) else [])
        if words and words[0].startswith("--"):
            argv.extend(words)
            names.append(name)
    if not argv:
        raise LaunchScriptError("no pretrain_*.py command and no argument variables found in "
                                "the launch script")
    ev.note("no pretrain_*.py command in the script: arguments gathered from "
            + ", ".join("$" + n for n in names))
    return argv


def _torchrun_sizes(launcher_opts):
    """torchrun's ``--nproc_per_node`` (or ``--nproc-per-node``) and ``--nnodes`` values
    (``--key value`` or ``--key=value``; the last one given), None when not given."""
    nproc = nnodes = None
    for k, w in enumerate(launcher_opts):
        key, eq, val = w.partition("=")
        if not eq:
            val = launcher_opts[k + 1] if k + 1 < len(launcher_opts) else None
        if key in ("--nproc_per_node", "--nproc-per-node"):
            nproc = val
        elif key == "--nnodes":
            nnodes = val
    return nproc, nnodes


def _run_text(ev: Interpreter, text: str, depth: int):
    if depth > SHELL_MAX_DEPTH:
        raise LaunchScriptError("command strings nested too deeply")
    nodes = Parser(Lexer(text).tokens()).parse()
    try:
        ev.run(nodes)
    except Exit:
        ev.note(f"line {ev.exited}: the script exits there; nothing after it is read")


def read_launch_script(text: str, env: dict | None = None) -> list:
    """The argument list of a launch script's training command (see :func:`parse_launch_script`).

    torchrun's options come first (``--nproc_per_node``, ``--nnodes``, ...; memsym's Megatron
    reader takes the world size from them), then the training script's arguments.

    Examples
    --------
    >>> read_launch_script('A="--num-layers 4"\\npython pretrain_gpt.py $A --bf16')
    ['--num-layers', '4', '--bf16']
    """
    return parse_launch_script(text, env).argv


def read_argument_file(path) -> list:
    """A plain argument list file: words separated by white space, ``#`` comments, shell quoting.

    A file holding a whole launch script (a line ``#!`` or a ``pretrain_*.py`` command) is read
    with :func:`read_launch_script`.

    Examples
    --------
    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    ...     _ = f.write("--num-layers 2  # layers\\n--hidden-size 64 \\\\\\n --bf16\\n")
    >>> read_argument_file(f.name); os.unlink(f.name)
    ['--num-layers', '2', '--hidden-size', '64', '--bf16']
    """
    text = read_bounded(path, "argument file", errors="replace")
    if text.startswith("#!") or re.search(r"pretrain_[A-Za-z0-9_]*\.py", text):
        return read_launch_script(text)
    ev = Interpreter()
    words = []
    for node in Parser(Lexer(text).tokens()).parse():
        for joiner, (negated, cmds) in node[1]:
            for cmd in cmds:
                if joiner or negated or node[2] or cmd[0] != "cmd" or cmd[3] or cmd[4]:
                    raise InvalidValueError("an argument file holds arguments only (no arrays, "
                                            "`if`, operators or redirections)")
                for w in cmd[1]:
                    words.extend(ev.fields(w))
    if ev.unset:
        raise InvalidValueError("argument file uses variables it cannot set: "
                                + ", ".join("$" + u for u in ev.unset))
    return words
