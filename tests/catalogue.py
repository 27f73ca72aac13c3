"""Reading the formulas/ catalogue: a strict parser for trusted, checked-in files.

Only the tests parse these strings.  Names must be the entry's own source symbols (the keys
of ``where``) or registered memsym symbols; anything else is an error, so a typo in the
catalogue cannot silently become a new symbol.
"""

from __future__ import annotations

import importlib
import pathlib
import tomllib

import sympy as sp
from sympy.parsing.sympy_parser import auto_number, parse_expr, rationalize

from memsym.symbols import registry
from memsym.values import as_values

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORMULAS = ROOT / "formulas"

#: Functions a catalogue formula may use.
_FUNCTIONS = {name: getattr(sp, name) for name in (
    "Rational", "Integer", "Float", "Min", "Max", "ceiling", "floor", "sqrt", "log", "Piecewise",
    "Abs", "Symbol")}


def references() -> dict:
    return tomllib.loads((FORMULAS.parent / "memsym" / "references.toml").read_text())


def entries():
    """(file name, entry) for every [[formula]] of every catalogue file."""
    out = []
    for path in sorted(FORMULAS.glob("*.toml")):
        if path.name == "references.toml":
            continue
        data = tomllib.loads(path.read_text())
        for entry in data.get("formula", []):
            out.append((path.name, entry))
    return out


def parse(text: str, local: dict) -> sp.Expr:
    """Parse catalogue text with only ``local`` names and the allowed functions."""
    table = {name: info.symbol for name, info in registry().items()}
    table.update(local)
    global_dict = {"__builtins__": {}, **_FUNCTIONS}
    return parse_expr(str(text), local_dict=table, global_dict=global_dict,
                      transformations=(auto_number, rationalize), evaluate=True)


def source_symbols(entry) -> dict:
    """The entry's own symbols (keys of ``where``), as fresh positive symbols."""
    return {name: sp.Symbol(f"src_{name}", positive=True) for name in entry.get("where", {})}


def source_expr(entry) -> tuple[sp.Expr, dict]:
    local = source_symbols(entry)
    return parse(entry["sympy"], local), local


def mapped_source(entry) -> sp.Expr:
    """The source formula rewritten in memsym's symbols through ``where``."""
    expr, local = source_expr(entry)
    mapping = {local[name]: parse(value, {}) for name, value in entry.get("where", {}).items()}
    return expr.xreplace(mapping)


def code_expr(entry) -> sp.Expr:
    module, _, func = entry["code"].partition(":")
    obj = getattr(importlib.import_module(module), func)
    result = obj(**entry.get("args", {})) if callable(obj) else obj
    expr = getattr(result, "expr", result)
    subs = entry.get("code_subs", {})
    return sp.sympify(expr).xreplace(as_values(subs)) if subs else sp.sympify(expr)


def check_value(entry, values: dict) -> sp.Expr:
    """The source formula evaluated at a check's values (source or registry names)."""
    expr, local = source_expr(entry)
    table = {**{name: info.symbol for name, info in registry().items()}, **local}
    subs = {}
    for name, value in values.items():
        if name not in table:
            raise KeyError(f"{entry['id']}: check value for unknown name {name!r}")
        subs[table[name]] = parse(repr(value) if isinstance(value, float) else str(value), {})
    # source symbols the check leaves out take their `where` value (e.g. b_32 = 4)
    for name, sym in local.items():
        if sym not in subs:
            subs[sym] = parse(entry["where"][name], {})
    return expr.xreplace(subs).xreplace(subs)
