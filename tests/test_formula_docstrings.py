"""Every public formula function is documented as fluids documents its correlations: a
one-line summary, a math block, a doctest and a ``References`` section naming its source
(the units of its parameters are checked by tests/test_docstring_units.py).

A *public formula function* is a public function (its name without a leading underscore)
defined in a module under ``memsym/terms/``, exported in ``__all__`` or not, whose return
annotation names a term or an expression: ``Term``, ``Total`` (or a tuple of Terms),
``Expr``, ``Rational`` or ``Integer``.  Every public function there must declare what it
returns, so that none escapes the check for want of an annotation.  The test lists the
formula functions that lack any of the four parts; the list must be empty, apart from
:data:`ALLOWED`, which may only shrink (an entry that no longer lacks anything fails).

Every public function of a module under ``memsym/timing/`` is checked too (issue 29), with
its return annotation or without: a summary, a doctest and a ``References`` section always,
and the math block unless it returns no number: a function whose return annotation names a
record, a table or a name (``str``, ``dict``, ``list``, ``Shape``, ``Gemm``, ``StepTime``,
``Overlap``, ``Settings``: :data:`_ASSEMBLES`) assembles other functions' formulas and states none of its
own, so it is held to the other three parts only.  A function that returns seconds, bytes,
FLOPs, a count, a fraction or an array of them (or declares no return type) needs the math
block that its code computes.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import memsym.terms
import memsym.timing
from memsym.bibliography import references

#: Modules another change is editing; only their functions may be in :data:`ALLOWED`.
REWORKED = ("memsym.terms.collectives.", "memsym.terms.communication.", "memsym.terms.compute.",
            "memsym.terms.pipeline.", "memsym.terms.pipeline_order.")

#: Functions still lacking a part, each with the parts it lacks (empty: every formula function
#: is documented; an entry may only be added with the reason it cannot be, and must leave
#: once fixed).  memsym/timing/step.py and pipeline.py left it when issue 29 documented them.
ALLOWED: dict = {}

#: A return annotation naming a term, a total, a tuple of terms or a SymPy expression.
_RETURNS = re.compile(r"\b(Term|Total|Expr|Rational|Integer)\b")
#: A return annotation naming a record, a table or a name: no formula of its own (timing).
_ASSEMBLES = re.compile(r"^(str|dict|list|Shape|Gemm|StepTime|Overlap|Settings)\b")
_REFERENCES = re.compile(r"^References\n-+\n(.*?)(?=\n\n[A-Z][A-Za-z ]+\n-+\n|\Z)", re.S | re.M)
#: A framework file at a pinned commit: a file name and a hexadecimal commit (7 to 40 digits).
_ARXIV = re.compile(r"arXiv:\d{4}\.\d{4,5}")
_FILE = re.compile(r"[\w/.-]+\.(?:py|md|cu|cpp|h|json|yaml|toml|txt)\b")
_COMMIT = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z])")


def _public_functions(package=memsym.terms):
    """(dotted name, function) of every public function defined in a module of ``package``
    (memsym/terms unless told), in module order: exported in ``__all__`` or only public by
    name (``host_state`` is re-exported by :mod:`memsym` without being in its module's
    ``__all__``)."""
    out = {}
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            own = inspect.isfunction(obj) and obj.__module__ == mod.__name__
            if own and not name.startswith("_"):
                out[f"{mod.__name__}.{name}"] = obj
    return out


def _returns(obj) -> str:
    """The return annotation as written (``""`` when there is none)."""
    returns = inspect.signature(obj, eval_str=False).return_annotation
    if returns is inspect.Signature.empty:
        return ""
    return returns if isinstance(returns, str) else getattr(returns, "__name__", str(returns))


def _formula_functions():
    """(dotted name, function) of every public formula function, in module order."""
    return {where: obj for where, obj in _public_functions().items()
            if _RETURNS.search(_returns(obj))}


def _names_a_source(section: str, keys) -> bool:
    """Whether a References section names a bibliography key (as written there), a paper
    (its arXiv identifier) or a framework file at a pinned commit."""
    for key in keys:
        if re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(key), section):
            return True
    if _ARXIV.search(section):
        return True
    return bool(_FILE.search(section) and _COMMIT.search(section))


def lacks(obj, keys, math: bool = True) -> tuple:
    """The parts of ``obj``'s docstring that are missing, in a fixed order (the math block
    only when ``math``)."""
    doc = inspect.getdoc(obj) or ""
    lines = doc.splitlines()
    missing = []
    # a summary: one non-empty first line followed by a blank line (or nothing)
    if not lines or not lines[0].strip() or (len(lines) > 1 and lines[1].strip()):
        missing.append("summary")
    if math and ".. math::" not in doc and ":math:`" not in doc:
        missing.append("math")
    if not re.search(r"^\s*>>> ", doc, re.M):
        missing.append("doctest")
    section = _REFERENCES.search(doc)
    if section is None or not _names_a_source(section.group(1), keys):
        missing.append("references")
    return tuple(missing)


def _timing_functions():
    """(dotted name, function) of every public function of memsym/timing, in module order."""
    return _public_functions(memsym.timing)


def _needs_math(where: str, obj) -> bool:
    """Whether a checked function must carry a math block: every formula function of
    memsym/terms, and a timing function unless it returns a record, a table or a name."""
    return not where.startswith("memsym.timing.") or not _ASSEMBLES.match(_returns(obj))


FUNCTIONS = {**_formula_functions(), **_timing_functions()}


def _missing():
    keys = sorted(references(), key=len, reverse=True)
    out = {where: lacks(obj, keys, _needs_math(where, obj)) for where, obj in FUNCTIONS.items()}
    return {where: parts for where, parts in out.items() if parts}


def test_the_check_sees_the_formula_functions():
    # 69 when written, 76 once widened past __all__ and to Rational and tuple-of-Term returns;
    # a change in how modules export would otherwise empty the check silently
    assert len(FUNCTIONS) >= 76, len(FUNCTIONS)
    assert len(_timing_functions()) >= 60, len(_timing_functions())
    for where in ("memsym.timing.efficiency.gemm_time", "memsym.timing.step.step_time",
                  "memsym.terms.model_state.host_state", "memsym.terms.adapters.quantization_bits",
                  "memsym.terms.allowances.allowance_terms",
                  "memsym.terms.pipeline_order.bubble_fraction"):
        assert where in FUNCTIONS, where


def test_every_public_function_says_what_it_returns():
    # a formula function without a return annotation would escape the check unseen
    bare = sorted(where for where, obj in _public_functions().items() if not _returns(obj))
    assert not bare, f"annotate the return type of: {bare}"


def test_every_formula_function_is_documented():
    missing = {where: parts for where, parts in _missing().items() if where not in ALLOWED}
    assert not missing, "\n".join(f"{w}: lacks {', '.join(p)}" for w, p in sorted(missing.items()))


def test_the_allowed_set_only_shrinks():
    # an entry that is fixed (or renamed, or removed) must leave ALLOWED: stale entries would
    # hide a regression of the function later
    missing = _missing()
    stale = sorted(w for w in ALLOWED if w not in FUNCTIONS or not missing.get(w))
    assert not stale, f"fixed or gone, remove from ALLOWED: {stale}"
    # and an entry may not hide more than it lists
    grown = {w: missing[w] for w in ALLOWED if w in missing and not set(missing[w]) <= set(ALLOWED[w])}
    assert not grown, grown


def test_only_the_reworked_modules_are_allowed():
    # the allowance is for files another engineer is editing, not a place to park new gaps
    elsewhere = sorted(w for w in ALLOWED if not w.startswith(REWORKED))
    assert not elsewhere, elsewhere


def test_the_check_can_fail():
    keys = sorted(references(), key=len, reverse=True)

    def bare(d: int):
        """Nothing else."""

    assert lacks(bare, keys) == ("math", "doctest", "references")
    assert lacks(bare, keys, math=False) == ("doctest", "references")

    def full(d: int):
        """The data-parallel size.

        .. math:: d

        Examples
        --------
        >>> 1
        1

        References
        ----------
        .. [zero] §5.
        """

    assert lacks(full, keys) == ()

    def pinned(d: int):
        """A summary.

        :math:`d`

        >>> 1
        1

        References
        ----------
        Megatron-core ``megatron/core/transformer/mlp.py`` at 0a1b2c3d.
        """

    assert lacks(pinned, keys) == ()

    def unpinned(d: int):
        """A summary.

        :math:`d`

        >>> 1
        1

        References
        ----------
        Megatron-core ``megatron/core/transformer/mlp.py``.
        """

    assert lacks(unpinned, keys) == ("references",)
