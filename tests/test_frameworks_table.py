"""Framework behaviour as data (issue 29): one record per framework, no ``framework ==`` branches.

:mod:`memsym.frameworks` holds what each framework does differently.  These tests check the
table against the code that reads the frameworks' own inputs (the readers' scheme tables, the
readers' refusals) and count the string comparisons of a framework name left in the package:
the allow-list below may only shrink (a test fails when a module has fewer than listed, so a
conversion lowers its number), and the goal is an empty one.
"""

from __future__ import annotations

import ast
import json
import pathlib

import pytest

from memsym.cli import main
from memsym.errors import UnknownNameError
from memsym.frameworks import FRAMEWORK, framework
from memsym.readers.jobs import DEEPSPEED_SCHEMES
from memsym.vocabulary import FRAMEWORKS, SCHEMES

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "memsym"

#: module -> comparisons of a framework name (``x == "torchtitan"``, ``x != "megatron"``, ``x in
#: ("deepspeed", ...)``) still in it.  May only shrink.
ALLOWED = {
    "memsym/job.py": 12,
    "memsym/timing/step.py": 4,
    "memsym/search/space.py": 3,
    "memsym/search/grid.py": 3,
    "memsym/search/sizing.py": 2,
    "memsym/training.py": 10,
    "memsym/rules.py": 2,
    # the log reader tells the log formats apart (Megatron-Bridge's among them), by their lines
    "memsym/readers/logs.py": 2,
}


def _framework_comparisons(tree) -> int:
    """Comparisons with a framework's name as a string constant on either side."""
    names = set(FRAMEWORKS)

    def named(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(e) for e in node.elts)
        return False

    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Compare)
               and any(named(n) for n in (node.left, *node.comparators)))


COUNTS = {p.relative_to(PACKAGE.parent).as_posix():
          _framework_comparisons(ast.parse(p.read_text(encoding="utf-8")))
          for p in sorted(PACKAGE.rglob("*.py"))}


def test_the_counter_sees_a_branch():
    """The counter finds the comparisons it is meant to find (so an empty count can fail)."""
    tree = ast.parse('if t.framework == "torchtitan" or "deepspeed" != f or f in ("megatron",):'
                     '\n    pass\nif f == "fsdp":\n    pass')
    assert _framework_comparisons(tree) == 3


@pytest.mark.parametrize("module", sorted(COUNTS))
def test_no_new_framework_branch(module):
    allowed = ALLOWED.get(module, 0)
    assert COUNTS[module] <= allowed, (
        f"{module} compares a framework's name {COUNTS[module]} times (allowed {allowed}): read "
        "the behaviour from memsym.frameworks.FRAMEWORK instead")


def test_the_allow_list_only_shrinks():
    stale = {m: (n, COUNTS.get(m, 0)) for m, n in ALLOWED.items() if COUNTS.get(m, 0) < n}
    assert not stale, f"lower these allowances to the module's count (allowed, now): {stale}"


def test_the_table_names_the_vocabulary_frameworks():
    assert tuple(FRAMEWORK) == FRAMEWORKS
    for name, record in FRAMEWORK.items():
        assert record.name == name
        assert set(record.schemes) <= set(SCHEMES) and record.default_scheme in record.schemes
        assert set(record.overlap_schemes) <= set(record.schemes)


def test_deepspeed_runs_exactly_the_stages_its_config_takes():
    """DeepSpeed's ``zero_optimization.stage`` 0..3 (``deepspeed/runtime/zero/config.py``), read
    by the DeepSpeed reader, are the schemes the table says DeepSpeed runs."""
    assert set(FRAMEWORK["deepspeed"].schemes) == set(DEEPSPEED_SCHEMES.values())


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_each_framework_default_scheme_is_what_a_job_gets(name, capsys):
    """A job of each framework with no sharding given is sharded as the table's default."""
    code = main(["estimate", "llama2-7b", "--framework", name, "--world-size", "8", "--json"])
    assert code in (0, 1)
    got = json.loads(capsys.readouterr().out)
    applied = {d["option"]: d["value"] for d in got["defaults"]}
    assert applied["sharding"] == FRAMEWORK[name].default_scheme


def test_unknown_framework_is_one_line():
    with pytest.raises(UnknownNameError, match="framework"):
        framework("megatorn")
