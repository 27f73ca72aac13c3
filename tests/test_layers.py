"""One direction through the code (issue 29): memsym's import graph, read from its source.

The graph is built with :mod:`ast` from every ``import`` and ``from ... import`` of a memsym
module, relative or absolute, at module level and inside functions (an import inside a
function still runs, so it still ties the two modules together).  Four rules
(docs/architecture.md explains them and the layers):

(a) no cycle, counting the imports inside functions;
(b) every import goes down :data:`LAYERS` (or stays inside one layer);
(c) an import inside a function only in the command line (``memsym/cli``, for start-up
    speed); optional third-party packages (torch, transformers, matplotlib) are not
    memsym modules and are not counted;
(d) no underscore name taken from another memsym module;
(e) no third-party package imported inside a function outside the command line, except the
    optional ones (:data:`OPTIONAL`) and the few kept lazy on purpose (:data:`LAZY_THIRD_PARTY`).

The allow-lists below hold the violations not fixed yet.  They may only shrink: a test fails
when an entry no longer occurs, so a fix removes its line.  The goal is four empty sets.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import sys
from dataclasses import dataclass

import pytest

from source_trees import parsed

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "memsym"

#: The layers, lowest first.  A module belongs to the layer of its longest listed prefix
#: (``memsym.model.stages`` to ``memsym.model``).  A module may import from its own layer and
#: the layers below, never from a layer above.
LAYERS = (
    # the one symbol registry, exact values, units, limits, text, the numeric boundary, the
    # LaTeX printer (Term and Total print themselves through it), and data that needs no
    # formula (the bibliography, GPUs and clusters, the term keys of a total by group)
    ("core", ("memsym.errors", "memsym.symbols", "memsym.values", "memsym.units",
              "memsym.limits", "memsym.text", "memsym.numeric", "memsym.compile_cache",
              "memsym.version", "memsym.vocabulary", "memsym.frameworks", "memsym.tex_width",
              "memsym.tex_printer", "memsym.tex_grouped", "memsym.rational",
              "memsym.printing", "memsym.bibliography", "memsym.devices", "memsym.hardware",
              "memsym.groups",
              "memsym.distinct_rows", "memsym.crossing")),
    ("term", ("memsym.term",)),
    # formula families as pure functions returning Terms
    ("terms", ("memsym.terms",)),
    # architectures, exact parameter counts, stage splits, presets, config.json; the one rule
    # table, which reads only the architecture (the stage split checks a layout against it)
    ("model", ("memsym.model", "memsym.rule", "memsym.rules", "memsym.rules_layout",
               "memsym.rules_model_kinds", "memsym.rules_states")),
    # the job record and the frameworks' defaults
    ("job", ("memsym.job_adapters", "memsym.job_comm", "memsym.job_record", "memsym.job",
             "memsym.job_checks_hf", "memsym.job_checks_megatron", "memsym.job_checks",
             "memsym.job_framework", "memsym.unchecked_job")),
    # the per-GPU total of a job
    ("composition", ("memsym.training",)),
    # consumers of the composed total, side by side
    ("consumers", ("memsym.timing", "memsym.analysis", "memsym.job_solver", "memsym.search", "memsym.conventions",
                   "memsym.measure", "memsym.polyfit", "memsym.reference_layers", "memsym.advice",
                   "memsym.sensitivity")),
    ("readers", ("memsym.readers",)),
    # the whole-job document (and the structure of a job's total it prints), plots, the
    # benchmark, and a searched layout as a framework's launch arguments (which its readers
    # read back)
    ("outputs", ("memsym.document", "memsym.document_time", "memsym.job_parts", "memsym.plotting",
                 "memsym.plot_base", "memsym.plot_time",
                 "memsym.plot_breakdown", "memsym.bench", "memsym.emit", "memsym.emit_rules",
                 "memsym.emit_megatron_flags",
                 "memsym.emit_held")),
    # the package's own namespace (``from memsym import ...``)
    ("package", ("memsym",)),
    ("cli", ("memsym.cli", "memsym.__main__")),
)


# ---------------------------------------------------------------------------------------------
# The allowed exceptions (issue 29): none.  Spelling, should one ever be needed: 'importer ->
# imported module' and, for private names, 'importer -> module.name'.  When the test was
# written they held 3 cycle-closing imports (a 15-module cycle), 12 upward imports, 115
# importer/imported pairs of imports inside functions and 89 private names.
# ---------------------------------------------------------------------------------------------
#: (a) the imports that close a cycle, left out of the cycle check.
CYCLE_EDGES = set()

#: (b) imports that go up the layers.
UPWARD = set()

#: (c) imports inside functions outside memsym/cli, as (importer, imported) pairs.
LOCAL = set()

#: (d) underscore names taken from another module.
PRIVATE = set()


@dataclass(frozen=True)
class Edge:
    """One imported memsym module (``name`` is None) or one name imported from it."""

    source: str
    target: str
    name: str | None
    local: bool
    line: int


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[tuple[str, str | None]]:
    """(memsym module, imported name or None) for each name the statement imports."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names if a.name.split(".")[0] == "memsym"]
    if node.level:
        base = module.split(".")
        if MODULES[module].name != "__init__.py":
            base.pop()
        base = base[:len(base) - (node.level - 1)]
        package = ".".join(base + ([node.module] if node.module else []))
    else:
        package = node.module or ""
        if package.split(".")[0] != "memsym":
            return []
    out = []
    for alias in node.names:
        sub = f"{package}.{alias.name}"
        out.append((sub, None) if sub in MODULES else (package, alias.name))
    return out


class _FunctionDepth(ast.NodeVisitor):
    """A visitor that knows how many functions (defs, async defs, lambdas) enclose the node it
    visits (``depth``; 0 at module level)."""

    depth = 0

    def _function(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function


class _Collector(_FunctionDepth):
    def __init__(self, module: str):
        self.module, self.depth, self.edges = module, 0, []

    def visit_Import(self, node):
        for target, name in _targets(self.module, node):
            self.edges.append(Edge(self.module, target, name, self.depth > 0, node.lineno))

    visit_ImportFrom = visit_Import


def import_edges() -> list[Edge]:
    """Every import of a memsym module in the package, in file order."""
    edges = []
    for module, path in MODULES.items():
        collector = _Collector(module)
        collector.visit(parsed(path))
        edges += collector.edges
    return edges


@functools.lru_cache(maxsize=None)
def edges() -> tuple[Edge, ...]:
    """:func:`import_edges`, built once in the worker that runs these tests (not at collection,
    which every pytest-xdist worker repeats)."""
    return tuple(import_edges())


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the module's longest matching prefix."""
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    if best is None:
        raise AssertionError(f"{module} has no layer in LAYERS")
    return best[0]


def _cycles(edges) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for e in edges:
        if e.source != e.target:
            graph[e.source].add(e.target)
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _pair(e: Edge) -> str:
    return f"{e.source} -> {e.target}"


def _found() -> dict[str, set[str]]:
    """The live violations of each rule, in the allow-lists' spelling."""
    cycles = _cycles(edges())
    return {
        "CYCLE_EDGES": {_pair(e) for e in edges()
                        if any(e.source in comp and e.target in comp for comp in cycles)},
        "UPWARD": {_pair(e) for e in edges() if layer_of(e.target) > layer_of(e.source)},
        "LOCAL": {_pair(e) for e in edges() if e.local and e.source != e.target
                  and layer_of(e.source) != layer_of("memsym.cli")},
        "PRIVATE": {f"{_pair(e)}.{e.name}" for e in edges() if e.name and e.source != e.target
                    and e.name.startswith("_") and not e.name.startswith("__")},
    }


# ---------------------------------------------------------------------------------------------
# (e) third-party packages imported inside functions
# ---------------------------------------------------------------------------------------------
#: Optional packages: memsym runs without them, so they are imported where they are used.
OPTIONAL = frozenset({"torch", "transformers", "matplotlib", "huggingface_hub"})

#: Required packages kept lazy on purpose, 'importer -> package': the memory path (``import
#: memsym``, a job, its training total) loads no numpy, and ``memsym.limits`` and
#: ``memsym.frameworks`` no SymPy; these modules sit on that path and load the package only
#: where a numpy function is built or a SymPy number is met.
LAZY_THIRD_PARTY = {
    "memsym.numeric -> numpy", "memsym.compile_cache -> numpy", "memsym.rules -> numpy",
    "memsym.rules_layout -> numpy", "memsym.rules_model_kinds -> numpy",
    "memsym.text -> sympy",
}

#: Required packages imported inside functions for no reason of their own: none is left (the
#: search's numpy moved to module level; the search loads numpy anyway).  May only shrink.
THIRD_PARTY_LOCAL: set = set()


class _ThirdParty(_FunctionDepth):
    """Top-level package names imported inside a function (relative imports are memsym's)."""

    def __init__(self):
        self.depth, self.found = 0, set()

    def visit_Import(self, node):
        if self.depth:
            self.found |= {a.name.split(".")[0] for a in node.names}

    def visit_ImportFrom(self, node):
        if self.depth and not node.level and node.module:
            self.found.add(node.module.split(".")[0])


def _third_party_local() -> set[str]:
    out = set()
    for module, path in MODULES.items():
        if layer_of(module) == layer_of("memsym.cli"):
            continue
        visitor = _ThirdParty()
        visitor.visit(parsed(path))
        out |= {f"{module} -> {name}" for name in visitor.found if name != "memsym"}
    return out


def test_no_required_third_party_package_imported_inside_functions():
    """(e) numpy, SymPy, ... at module level; optional packages where they are used."""
    found = {e for e in _third_party_local() if e.split(" -> ")[1] not in OPTIONAL}
    extra = found - LAZY_THIRD_PARTY - THIRD_PARTY_LOCAL
    assert not extra, f"import at module level: {sorted(extra)}"
    stale = (LAZY_THIRD_PARTY | THIRD_PARTY_LOCAL) - found
    assert not stale, f"fixed, remove from the allow-list: {sorted(stale)}"


def test_no_standard_library_module_imported_inside_functions():
    """(e) the standard library at module level too: ``import memsym`` stays lean by loading
    its submodules on first use (``memsym.__getattr__``), not by hiding imports in functions."""
    found = sorted(e for e in _third_party_local() if e.split(" -> ")[1] in sys.stdlib_module_names)
    assert not found, f"import at module level: {found}"


def test_the_third_party_check_sees_local_imports():
    """The visitor finds a function's imports and only those (so an empty set cannot pass)."""
    v = _ThirdParty()
    v.visit(ast.parse("import numpy\ndef f():\n    import numpy as np\n    from sympy import S\n"
                      "    from . import x\n"))
    assert v.found == {"numpy", "sympy"}
    assert "memsym.plot_base -> matplotlib" in _third_party_local()


def test_the_collector_sees_relative_absolute_and_local_imports():
    """The graph builder finds what the rules are about (so an empty graph cannot pass)."""
    assert len(MODULES) > 50
    found = {(e.source, e.target) for e in edges()}
    assert ("memsym.__main__", "memsym.cli") in found           # absolute/relative, module level
    assert ("memsym.term", "memsym.values") in found            # from .values import ...
    assert any(e.local for e in edges() if e.source.startswith("memsym.cli"))  # inside functions
    tree = ast.parse("def f():\n    from ..model import stages as s, resolve\n")
    collector = _Collector("memsym.terms.model_state")
    collector.visit(tree)
    assert [(e.target, e.name, e.local) for e in collector.edges] == [
        ("memsym.model.stages", None, True), ("memsym.model", "resolve", True)]


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_import_cycle():
    """(a) Without the allowed closing edges, the graph (function-level imports counted) is
    acyclic."""
    kept = [e for e in edges() if _pair(e) not in CYCLE_EDGES]
    assert _cycles(kept) == []


def test_imports_go_down_the_layers():
    """(b) Every import goes to the same layer or one below."""
    assert _found()["UPWARD"] <= UPWARD, sorted(_found()["UPWARD"] - UPWARD)


def test_no_function_local_imports_outside_the_cli():
    """(c) Imports of memsym modules inside functions only in memsym/cli."""
    assert _found()["LOCAL"] <= LOCAL, sorted(_found()["LOCAL"] - LOCAL)


def test_no_private_names_across_modules():
    """(d) An underscore name stays in its module."""
    assert _found()["PRIVATE"] <= PRIVATE, sorted(_found()["PRIVATE"] - PRIVATE)


def test_the_library_never_imports_the_cli():
    cli = layer_of("memsym.cli")
    assert [_pair(e) for e in edges() if layer_of(e.source) != cli and layer_of(e.target) == cli] == []


@pytest.mark.parametrize("name", ["CYCLE_EDGES", "UPWARD", "LOCAL", "PRIVATE"])
def test_the_allow_lists_only_shrink(name):
    """An allowed violation that no longer occurs must leave its list (so it cannot return)."""
    stale = globals()[name] - _found()[name]
    assert not stale, f"fixed, remove from {name}: {sorted(stale)}"
