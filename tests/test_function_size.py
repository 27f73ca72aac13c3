"""Functions short enough to read (issue 29): no function in memsym/ is over 100 lines.

Every function and method under memsym/, nested ones too, is found with :mod:`ast`; its
length is ``end_lineno - lineno + 1`` of its ``def`` statement (the decorators are not
counted, the docstring is).  A function is named ``path::qualified_name``, the qualified name
as Python's ``__qualname__`` writes it (``Class.method``, ``outer.<locals>.inner``).

The functions longer than the limit are listed in :data:`ALLOWED` with the number of lines
each had when listed and the reason it is long: either a stated reason that it is better kept
whole, or that it is still to split.  One may shrink but not grow past its number, and an
entry leaves the list when its function is split or gone (the test fails while a function at
or under the limit is still listed, so that it cannot grow back).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from source_trees import parsed

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "memsym"

#: The most lines a function may have.
LIMIT = 100

#: The functions over the limit: ``path::qualified_name`` -> (lines when listed, why it is long).
ALLOWED = {
    "memsym/reference_layers.py::_classes": (
        144, "defines the torch layer classes in one closure so that importing the module "
             "needs no torch"),
}


def _functions(tree: ast.AST, prefix: str = ""):
    """Yield ``(qualified_name, lines)`` for every function under ``tree``, nested ones too."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + node.name
            yield name, node.end_lineno - node.lineno + 1
            yield from _functions(node, name + ".<locals>.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")
        else:  # an if/try/with block at module or class level
            yield from _functions(node, prefix)


def _sizes() -> dict:
    sizes = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        tree = parsed(path)
        for name, lines in _functions(tree):
            # a name defined twice (an if/else pair) keeps its longer definition
            key = f"{module}::{name}"
            sizes[key] = max(lines, sizes.get(key, 0))
    return sizes


SIZES = _sizes()
LONG = sorted(name for name, lines in SIZES.items() if lines > LIMIT or name in ALLOWED)


def test_the_functions_are_found():
    """The walk sees the package (so an empty walk cannot pass), methods and nested ones too."""
    assert len(SIZES) > 500
    assert "memsym/readers/launch_script.py::parse_launch_script" in SIZES
    assert any(".<locals>." in name for name in SIZES)
    assert any(name.split("::")[1].count(".") == 1 and ".<locals>." not in name
               for name in SIZES)   # a method
    source = "def f(x):\n    '''Doc.'''\n\n    return x\n"
    assert dict(_functions(ast.parse("@decorator\n" + source))) == {"f": 4}


@pytest.mark.parametrize("function", LONG)
def test_function_is_short_enough_to_read(function):
    allowed = ALLOWED.get(function, (LIMIT, ""))[0]
    assert SIZES.get(function, 0) <= allowed, (
        f"{function} has {SIZES[function]} lines, more than {allowed}"
        + ("" if function in ALLOWED else " (the limit): split it into helpers named for what "
                                          "they do"))


def test_the_allow_list_only_shrinks():
    """An entry whose function is gone or back under the limit must leave the list."""
    stale = sorted(f for f in ALLOWED if f not in SIZES or SIZES[f] <= LIMIT)
    assert not stale, f"remove from ALLOWED (split or gone): {stale}"


def test_every_allowance_says_why():
    assert all(isinstance(lines, int) and lines > LIMIT and reason.strip()
               for lines, reason in ALLOWED.values())
