"""The formulas/ catalogue: every entry equals the code, and its worked numbers hold."""

from __future__ import annotations

import re

import pytest
import sympy as sp

from catalogue import ROOT, check_value, code_expr, entries, mapped_source, references

ENTRIES = entries()
IDS = [f"{name}:{entry['id']}" for name, entry in ENTRIES]
REQUIRED = ("id", "title", "source", "locator", "latex", "sympy", "code")


def test_catalogue_is_not_empty():
    assert len(ENTRIES) >= 8


def test_ids_unique():
    ids = [entry["id"] for _, entry in ENTRIES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("name,entry", ENTRIES, ids=IDS)
def test_entry_fields_and_source(name, entry):
    missing = [f for f in REQUIRED if f not in entry]
    assert not missing, f"{entry.get('id')}: missing {missing}"
    assert entry["source"] in references(), f"{entry['id']}: unknown reference {entry['source']}"
    for check in entry.get("checks", []):
        assert check.get("origin"), f"{entry['id']}: check without origin"
        assert re.match(r"^(paper|seed|hand|framework|vendor)\b", check["origin"]), check["origin"]


@pytest.mark.parametrize("name,entry", ENTRIES, ids=IDS)
def test_code_equals_source(name, entry):
    source = mapped_source(entry)
    code = code_expr(entry)
    diff = sp.simplify(sp.cancel(sp.together(source - code)))
    assert diff == 0, f"{entry['id']}: source {source} != code {code}"


@pytest.mark.parametrize("name,entry", [(n, e) for n, e in ENTRIES if e.get("checks")],
                         ids=[f"{n}:{e['id']}" for n, e in ENTRIES if e.get("checks")])
def test_checks_reproduce(name, entry):
    for check in entry["checks"]:
        value = check_value(entry, check["values"])
        assert value.is_number, f"{entry['id']}: unresolved symbols {value.free_symbols}"
        expect = sp.Rational(repr(check["expect"])) if isinstance(check["expect"], float) else sp.sympify(check["expect"])
        tol = sp.Rational(repr(check.get("tol", 0)))
        assert abs(value - expect) <= tol, (
            f"{entry['id']}: {check['origin']}: got {float(value):.6g}, expected {float(expect):.6g}")


def test_every_cited_source_key_exists():
    """Every Source("key", ...) written in the package names a reference."""
    refs = references()
    pattern = re.compile(r"""Source\(\s*["']([A-Za-z0-9_.\-]+)["']""")
    keys = set()
    for path in (ROOT / "memsym").rglob("*.py"):
        keys |= set(pattern.findall(path.read_text()))
    assert keys, "no Source(...) found"
    unknown = sorted(k for k in keys if k not in refs)
    assert not unknown, f"sources missing from memsym/references.toml: {unknown}"
