"""Rewrite flat reads of a Training's fields to the sub-record that owns them (repository tooling).

memsym's :class:`memsym.job_record.Training` holds its fields in typed sub-records
(:data:`memsym.job_record.FIELD_PARTS`: ``batch``, ``pipeline``, ``states``, ``memory``,
``adapters``, ``comm``).  Users may still read ``training.recompute``; memsym's own modules read
``training.memory.recompute`` (tests/test_job_record.py enforces it with :func:`flat_reads`).
This script is not part of the package: it is run by hand on a branch written against the flat
record, to port it::

    python3 -m tools.rename_job_fields memsym/            # rewrite in place, list the changes
    python3 -m tools.rename_job_fields --check memsym/    # list only; exit 1 if any is left
    python3 -m tools.rename_job_fields --receiver st memsym/timing/step.py   # another name

What it rewrites, where the receiver is a Training (a name in :data:`RECEIVERS` or
``--receiver``, or any ``<expr>.training``):

* ``training.seq_length`` -> ``training.batch.seq_length`` (every field but ``framework``);
* ``getattr(training, "recompute"[, default])`` -> ``training.memory.recompute``;
* ``getattr(training, name)`` (a name computed at run time) -> ``training.value(name)``;
* ``dataclasses.replace(training, ...)`` / ``replace(training, ...)`` ->
  ``training.replace(...)`` (:meth:`memsym.job_record.Training.replace` takes flat names).

It reads the source with :mod:`ast`, so strings and comments are left alone; it prints each
change as ``path:line: old -> new`` and what it could not decide (a ``getattr`` with a default
and a computed name, ``hasattr``) as ``path:line: left: ...`` for a person to read.  Running
it twice changes nothing the second time.
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import sys

from memsym.job_record import FIELD_PARTS

#: Names that hold a Training in memsym's code (and ``<anything>.training``).
RECEIVERS = frozenset({"training", "trn", "tr", "train_training", "base_training",
                       "new_training"})
#: The flat fields that live in a sub-record (``framework`` is Training's own).
MOVED = {name: part for name, part in FIELD_PARTS.items() if part}
_REPLACERS = {"replace", "_replace"}


def is_training(node: ast.AST, names=RECEIVERS) -> bool:
    """Whether ``node`` is an expression memsym's convention names a Training."""
    if isinstance(node, ast.Name):
        return node.id in names
    return isinstance(node, ast.Attribute) and node.attr == "training"


def _const(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _edits(tree: ast.AST, names) -> tuple:
    """``(edits, left)``: edits as ``((line, col), (end_line, end_col), text)`` spans of the
    source (ast's byte offsets), and the lines a person must read."""
    edits, left = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in MOVED and is_training(node.value, names):
            # the span of ".attr": from the receiver's end to the node's end
            edits.append(((node.value.end_lineno, node.value.end_col_offset),
                          (node.end_lineno, node.end_col_offset),
                          f".{MOVED[node.attr]}.{node.attr}"))
        elif isinstance(node, ast.Call) and node.args and is_training(node.args[0], names):
            func = node.func
            fname = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else None)
            recv = node.args[0]
            if fname == "getattr" and len(node.args) >= 2:
                key = _const(node.args[1])
                if key is not None and key in MOVED:
                    edits.append(((node.lineno, node.col_offset),
                                  (node.end_lineno, node.end_col_offset),
                                  (recv, f".{MOVED[key]}.{key}")))
                elif key is None and len(node.args) == 2:
                    edits.append(((node.lineno, node.col_offset),
                                  (node.end_lineno, node.end_col_offset),
                                  (recv, ".value(", node.args[1], ")")))
                elif key is None:
                    left.append((node.lineno, "getattr with a computed name and a default"))
            elif fname == "hasattr":
                left.append((node.lineno, "hasattr on a Training"))
            elif fname in _REPLACERS and (len(node.args) > 1 or node.keywords):
                rest = node.args[1:] + [k for k in node.keywords]
                first = min(rest, key=lambda n: (n.lineno, n.col_offset))
                edits.append(((node.lineno, node.col_offset),
                              (first.lineno, first.col_offset), (recv, ".replace(")))
    return edits, left


def rewrite(source: str, names=RECEIVERS) -> tuple:
    """``(new source, [(line, old, new)], [(line, why)])`` for one module's text."""
    lines = source.splitlines(keepends=True)
    raw = [ln.encode() for ln in lines]
    edits, left = _edits(ast.parse(source), names)

    def text(node):   # a node's own source text
        return ast.get_source_segment(source, node)

    done, changes = set(), []
    # apply from the end so that earlier offsets stay valid; skip spans inside another edit
    for (l0, c0), (l1, c1), new in sorted(edits, key=lambda e: e[0], reverse=True):
        if (l0, c0) in done:
            continue
        done.add((l0, c0))
        if isinstance(new, tuple):
            new = "".join(text(p) if isinstance(p, ast.AST) else p for p in new)
        if l0 == l1:
            old = raw[l0 - 1][c0:c1].decode()
            raw[l0 - 1] = raw[l0 - 1][:c0] + new.encode() + raw[l0 - 1][c1:]
        else:
            old = b"".join([raw[l0 - 1][c0:]] + raw[l0:l1 - 1] + [raw[l1 - 1][:c1]]).decode()
            raw[l0 - 1] = raw[l0 - 1][:c0] + new.encode() + raw[l1 - 1][c1:]
            for i in range(l0, l1):
                raw[i] = b""
        changes.append((l0, old, new))
    return b"".join(raw).decode(), sorted(changes), sorted(left)


def flat_reads(source: str, names=RECEIVERS) -> list:
    """The lines of ``source`` that read a Training's field by its flat name (what
    :func:`rewrite` would change): ``[(line, old text)]``."""
    return [(line, old) for line, old, _ in rewrite(source, names)[1]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=pathlib.Path, help="files or folders (*.py)")
    ap.add_argument("--check", action="store_true", help="list only; exit 1 if any is left")
    ap.add_argument("--receiver", action="append", default=[],
                    help="another variable name that holds a Training (repeatable)")
    args = ap.parse_args(argv)
    names = RECEIVERS | set(args.receiver)
    files = [f for p in args.paths for f in (sorted(p.rglob("*.py")) if p.is_dir() else [p])]
    found = 0
    for path in files:
        src = path.read_text()
        new, changes, left = rewrite(src, names)
        for line, old, repl in changes:
            print(f"{path}:{line}: {old.strip()} -> {repl}")
        for line, why in left:
            print(f"{path}:{line}: left: {why}")
        found += len(changes)
        if changes and not args.check:
            path.write_text(new)
    return 1 if args.check and found else 0


if __name__ == "__main__":
    sys.exit(main())
