"""Every public function's parameters carry their units in brackets, checked against the
symbol registry (as fluids checks its docstrings): a parameter named like a registered
symbol (``d``, ``t``, ``N`` ...) or like the Megatron argument that sets one
(``seq_length`` -> s, ``micro_batch_size`` -> b, ``capacity`` -> C ...) must be documented
in a ``Parameters`` (or, for records, ``Attributes``) section with ``[unit]``, the unit the
registry gives that symbol.  The few parameters that only share a symbol's name
(:data:`EXCEPTIONS`, each with its reason) must still be documented, with their own meaning.
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

#: Parameters named like a registered symbol that mean something else there (documented
#: with their own meaning, not the symbol's unit): (function, parameter) -> why.
EXCEPTIONS = {
    ("memsym.terms.pipeline_rank_order.rank_order", "N"):
        "the microbatch group size (microbatch_group_size_per_vp_stage), not parameters",
    ("memsym.terms.pipeline_rank_order.schedule_table", "N"):
        "the microbatch group size (microbatch_group_size_per_vp_stage), not parameters",
    ("memsym.terms.pipeline_order.chunk_peak", "N"):
        "the microbatch group size (microbatch_group_size_per_vp_stage), not parameters",
    ("memsym.terms.pipeline_order.live_by_held_gradients", "N"):
        "the microbatch group size (microbatch_group_size_per_vp_stage), not parameters",
    ("memsym.timing.efficiency.gemm_time", "N"): "a GEMM dimension [elements], not parameters",
    ("memsym.timing.efficiency.gemm_efficiency", "N"):
        "a GEMM dimension [elements], not parameters",
    ("memsym.timing.gemm.Gemm", "N"): "a GEMM dimension [elements], not parameters",
    ("memsym.timing.moe.grouped_gemm_time", "N"): "a GEMM dimension [elements], not parameters",
    ("memsym.rules.masks", "k"): "the knob mapping the rules read, not top-k",
    ("memsym.rules.broken", "k"): "the knob mapping the rules read, not top-k",
    ("memsym.rules.check", "k"): "the knob mapping the rules read, not top-k",
    ("memsym.model.stages.StageParameters", "tp"):
        "the stage's TP-sharded parameters [parameters], not the tensor-parallel size",
}

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


def _signature(obj):
    try:
        return inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return {}


def _cases():
    reg = registry()
    out = []
    for where, obj in _public_callables():
        for pname in _signature(obj):
            sym = pname if pname in reg else ALIASES.get(pname)
            if sym is not None and (where, pname) not in EXCEPTIONS:
                out.append((where, obj, pname, reg[sym].unit))
    return out


CASES = _cases()


def test_the_check_sees_the_public_api():
    assert len(CASES) > 100


def test_every_exception_is_a_documented_parameter():
    # an exception outliving its parameter (renamed, removed) would hide nothing and mislead
    found = {(where, pname): obj for where, obj in _public_callables()
             for pname in _signature(obj) if (where, pname) in EXCEPTIONS}
    assert set(found) == set(EXCEPTIONS), sorted(set(EXCEPTIONS) - set(found))
    undocumented = [key for key, obj in found.items()
                    if _documented(inspect.getdoc(obj) or "", key[1]) is None]
    assert not undocumented, undocumented


@pytest.mark.parametrize("where,obj,pname,unit", CASES, ids=[f"{c[0]}({c[2]})" for c in CASES])
def test_parameter_unit_matches_the_registry(where, obj, pname, unit):
    text = _documented(inspect.getdoc(obj) or "", pname)
    assert text is not None, f"{where}: parameter {pname} is not documented (Parameters/Attributes)"
    assert f"[{unit}]" in text, f"{where}: parameter {pname} needs its unit [{unit}]"


#: A parameter's documented type that names a number: its description carries a unit.
_NUMBER = re.compile(r"\b(int|float|number|array_like|ndarray)\b")


def _timing_parameters():
    """(where, parameter, documenting text or None) of every parameter of every public
    function and exported record of a module under memsym/timing (issue 29)."""
    import memsym.timing

    for info in pkgutil.walk_packages(memsym.timing.__path__, "memsym.timing."):
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            public = inspect.isfunction(obj) or name in getattr(mod, "__all__", ())
            if name.startswith("_") or not public or getattr(obj, "__module__", "") != mod.__name__:
                continue
            for pname, par in _signature(obj).items():
                if par.kind not in (par.VAR_POSITIONAL, par.VAR_KEYWORD):
                    yield f"{mod.__name__}.{name}", pname, _documented(inspect.getdoc(obj) or "", pname)


def test_every_timing_parameter_is_documented_with_its_unit():
    # every parameter of a public timing function is documented, and one whose type names a
    # number (int, float, array_like ...) carries its unit in brackets; flags, names and
    # records (bool, str, {...}, Settings) have none
    found = list(_timing_parameters())
    assert len(found) > 300
    undocumented = [(w, p) for w, p, text in found if text is None]
    assert not undocumented, undocumented
    unitless = [(w, p) for w, p, text in found if _NUMBER.search(text.splitlines()[0].split(" : ", 1)[1])
                and not re.search(r"\[[^\]\s][^\]]*\]", text)]
    assert not unitless, unitless


def test_no_control_characters_in_the_sources():
    # a math block written through a non-raw string turns \t, \f, \b, \r into control
    # characters ("\tau" -> tab + "au"): none may reach a source file of the package
    import pathlib

    root = pathlib.Path(memsym.__file__).parent
    bad = [(str(f.relative_to(root)), i) for f in sorted(root.rglob("*.py"))
           for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
           if re.search(r"[\x00-\x09\x0b-\x1f\x7f]", line)]
    assert not bad, bad
