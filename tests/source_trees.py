"""Each memsym source file parsed once per test process (issue 29: suite time).

The structural tests (test_function_size, test_layers, test_frameworks_table, test_no_twins,
test_option_table) each read the package with :mod:`ast`; a whole-package parse costs about
1.3 s, and several of them parse at collection, which every xdist worker repeats.  They only
read the trees (``ast.walk``, ``NodeVisitor``), never change them, so one shared tree per
file is the same input each had before.
"""

from __future__ import annotations

import ast
import functools
import pathlib


@functools.lru_cache(maxsize=None)
def _parsed(path: pathlib.Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def parsed(path) -> ast.Module:
    """The module tree of the Python file ``path`` (read-only: shared by every caller)."""
    return _parsed(pathlib.Path(path).resolve())
