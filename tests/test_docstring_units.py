"""Every public function's parameters carry their units in brackets, checked against the
symbol registry (as fluids checks its docstrings): a parameter named like a registered
symbol (``d``, ``t``, ``N`` ...) or like the Megatron argument that sets one
(``seq_length`` -> s, ``micro_batch_size`` -> b, ``capacity`` -> C ...) must be documented
in a ``Parameters`` (or, for records, ``Attributes``) section with ``[unit]``, the unit the
registry gives that symbol.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

import memsym
from memsym.symbols import registry

#: Megatron-style parameter names -> the registry symbol they set.
ALIASES = {"seq_length": "s", "micro_batch_size": "b", "global_batch_size": "B",
           "capacity": "C", "num_microbatches": "m", "world_size": "G", "gpus": "G",
           "params": "N", "dp": "d", "tp": "t", "pp": "p", "cp": "c", "ep": "e"}

#: Packages outside the check: the command line (argparse help is its documentation) and the
#: PyTorch measurement helpers (tensors, not sizes).
SKIP = ("memsym.cli", "memsym.measure", "memsym.reference_layers", "memsym.bench")

_SECTION = re.compile(r"(?:Parameters|Attributes)\n-+\n(.*?)(?=\n\n[A-Z][A-Za-z ]+\n-+\n|\Z)", re.S)


def _public_callables():
    seen = set()
    for info in pkgutil.walk_packages(memsym.__path__, "memsym."):
        if info.name.startswith(SKIP):
            continue
        mod = importlib.import_module(info.name)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name, None)
            if callable(obj) and id(obj) not in seen and getattr(obj, "__module__", "").startswith("memsym"):
                seen.add(id(obj))
                yield f"{obj.__module__}.{name}", obj


def _documented(doc: str, name: str):
    """The text documenting parameter ``name`` (its line and the indented lines after it)."""
    for section in _SECTION.findall(doc):
        for match in re.finditer(r"^(\S[^\n]*?) : [^\n]*\n((?:[ \t]+[^\n]*\n?)*)", section + "\n", re.M):
            names = [n.strip() for n in match.group(1).split(",")]
            if name in names:
                return match.group(0)
    return None


def _cases():
    reg = registry()
    out = []
    for where, obj in _public_callables():
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            continue
        for pname in params:
            sym = pname if pname in reg else ALIASES.get(pname)
            if sym is not None:
                out.append((where, obj, pname, reg[sym].unit))
    return out


CASES = _cases()


def test_the_check_sees_the_public_api():
    assert len(CASES) > 100


@pytest.mark.parametrize("where,obj,pname,unit", CASES, ids=[f"{c[0]}({c[2]})" for c in CASES])
def test_parameter_unit_matches_the_registry(where, obj, pname, unit):
    text = _documented(inspect.getdoc(obj) or "", pname)
    assert text is not None, f"{where}: parameter {pname} is not documented (Parameters/Attributes)"
    assert f"[{unit}]" in text, f"{where}: parameter {pname} needs its unit [{unit}]"
