"""The lessons' prose agrees with their code (issue 33): every number a notebook's markdown
quotes with decimals and a unit ("92.48 GB", "16.7 ms", "9.6 %") is one the notebook itself
prints or asserts, to the precision quoted, or is listed below as cited from a source.

The check, per notebook:

* **quoted**: each ``<number with decimals> <unit>`` in a markdown cell (units: GB/s, GiB, GB,
  MiB, MB, ms, %, bytes). Integers are left out: "80 GB" names a GPU as often as it states a
  result, and an integer matches too much to be evidence.
* **evidence**: the numbers followed by the same unit in the code cells' stored outputs
  (stream text and ``text/plain``; a printed list ``[14.0, 26.0] GB`` gives each of its
  numbers), and every number on a code line that asserts
  (``assert ...``): the outputs are what the code printed when the notebook was last run
  (nbval checks they are still what it prints), the asserts what it checks.
* a quoted number matches when some evidence rounds to it at the quoted precision
  (``|e - q| <= 1/2`` unit of its last decimal); comments in code are not evidence, so a number
  cannot be made to pass by writing it in a comment.

A number that comes from outside the notebook (a seed's figure, a vendor's value) is listed in
:data:`CITED` with where it comes from; anything else that does not match fails, naming the
notebook, the cell and the number.
"""

from __future__ import annotations

import copy
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

_UNIT = r"(GB/s|GiB|GB|MiB|MB|ms|%|bytes)"
#: a number with decimals and its unit, not part of a longer number or word (1,234.5 allowed)
_QUOTED = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})*\.\d+|\d+\.\d+)\s?" + _UNIT + r"(?![\w/])")
#: any number with its unit (the evidence in outputs)
_WITH_UNIT = re.compile(r"(?<![\w.])(\d[\d,_]*(?:\.\d+)?(?:e[+-]?\d+)?)\s?" + _UNIT)
_NUMBER = re.compile(r"(?<![\w.])(\d[\d_]*(?:\.\d+)?)")
#: a printed list of numbers and their unit: ``[14.0, 26.0, 140.0] GB``
_LIST = re.compile(r"\[([^\]\n]*)\]\s?" + _UNIT)

#: (notebook, quoted text) -> its source, for numbers the notebook cites instead of computing.
CITED = {
    ("01_model_states_seed000.ipynb", "5.5 GB"):
        "the figure an earlier version of the notebook printed, quoted as a slip",
    ("03_sizing_seed004.ipynb", "79.14 GiB"):
        "A100 80GB's CUDA total as reported publicly (memsym.hardware cites it)",
    ("03_sizing_seed004.ipynb", "84.98 GB"): "79.14 GiB in GB (1 GiB = 2^30 bytes)",
    ("03_sizing_seed004.ipynb", "23.68 GiB"):
        "RTX 4090's CUDA total as reported publicly (memsym.hardware cites it)",
    ("03_sizing_seed004.ipynb", "25.43 GB"): "23.68 GiB in GB",
    ("04_memory_tuning_seed001.ipynb", "28.4 %"):
        "seed 001's card (Megatron-Bridge's memory-tuning guide); the notebook prints -28.3 % "
        "from the card's rounded 508.7 TFLOP/s and says why",
    ("06_sensitivity.ipynb", "7.5 GB"):
        "seed 002's rounded TP bytes per step (7.516 GB, asserted in notebook 02)",
    ("09_interactive_layout.ipynb", "79.11 GiB"):
        "H100 80GB's CUDA total (vllm-project/vllm#27508, memsym.hardware)",
}


def _outputs(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        text = o.get("text", "")
        out.append("".join(text) if isinstance(text, list) else text)
        plain = o.get("data", {}).get("text/plain", "")
        out.append("".join(plain) if isinstance(plain, list) else plain)
    return "\n".join(out)


def _number(text: str) -> Decimal:
    return Decimal(text.replace(",", "").replace("_", ""))


def evidence(nb: dict) -> tuple[dict, list]:
    """(unit -> the numbers printed with it, the numbers on assert lines)."""
    by_unit, asserted = {}, []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        printed = _outputs(cell)
        for m in _WITH_UNIT.finditer(printed):
            try:
                by_unit.setdefault(m.group(2), []).append(_number(m.group(1)))
            except ArithmeticError:     # pragma: no cover - a malformed number is no evidence
                continue
        for m in _LIST.finditer(printed):
            by_unit.setdefault(m.group(2), []).extend(
                _number(x.group(1)) for x in _NUMBER.finditer(m.group(1)))
        for line in "".join(cell["source"]).splitlines():
            code = line.split("#", 1)[0]          # comments are not evidence
            if re.search(r"\bassert\b", code):
                asserted += [_number(m.group(1)) for m in _NUMBER.finditer(code)]
    return by_unit, asserted


def mismatches(nb: dict, name: str) -> list[str]:
    """Every quoted number of ``nb`` that no output or assert of it supports, as
    ``cell N: "text"``."""
    by_unit, asserted = evidence(nb)
    bad = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        for m in _QUOTED.finditer("".join(cell["source"])):
            quoted = f"{m.group(1)} {m.group(2)}"
            if (name, quoted) in CITED:
                continue
            q = _number(m.group(1))
            half = Decimal(5) * Decimal(10) ** (q.as_tuple().exponent - 1)
            if not any(abs(e - q) <= half for e in by_unit.get(m.group(2), []) + asserted):
                bad.append(f"cell {i}: {quoted!r}")
    return bad


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_numbers_in_the_prose_are_the_notebooks_own(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert mismatches(nb, path.name) == [], (
        f"{path.name}: numbers in the prose that no output or assert of the notebook gives "
        "(fix the prose, or list a cited number in CITED with its source)")


def test_every_cited_number_is_still_quoted():
    # an exemption whose number has left the prose would hide nothing, but would let the same
    # text pass unchecked if it came back with another meaning: keep the list exact
    for (name, quoted), _ in CITED.items():
        nb = json.loads((ROOT / "notebooks" / name).read_text(encoding="utf-8"))
        prose = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        assert quoted in {f"{m.group(1)} {m.group(2)}" for m in _QUOTED.finditer(prose)}, quoted


def _altered(path: Path, old: str, new: str) -> dict:
    nb = copy.deepcopy(json.loads(path.read_text(encoding="utf-8")))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            src = "".join(cell["source"])
            if old in src:
                cell["source"] = src.replace(old, new)
                return nb
    raise AssertionError(f"{old!r} is not in {path.name}'s prose")


def test_the_check_fails_on_an_altered_copy():
    # the lesson says 92.48 GB because update() printed it; a copy whose prose says 92.98 GB
    # (or 49.02 for 49.20: digits swapped) is caught, naming the number
    path = ROOT / "notebooks" / "09_interactive_layout.ipynb"
    assert mismatches(json.loads(path.read_text(encoding="utf-8")), path.name) == []
    bad = mismatches(_altered(path, "**92.48 GB**", "**92.98 GB**"), path.name)
    assert len(bad) == 1 and "'92.98 GB'" in bad[0]
    assert mismatches(_altered(path, "**49.20 GB**", "**49.02 GB**"), path.name)
    # the precision quoted is the precision checked: 92.5 GB is 92.48 GB rounded, 92.4 is not
    assert mismatches(_altered(path, "**92.48 GB**", "**92.5 GB**"), path.name) == []
    assert mismatches(_altered(path, "**92.48 GB**", "**92.4 GB**"), path.name)


def test_a_comment_is_not_evidence():
    nb = {"cells": [
        {"cell_type": "markdown", "source": "The job needs 12.34 GB."},
        {"cell_type": "code", "source": "x = 1  # 12.34 GB\nassert x == 1  # 12.34",
         "outputs": [{"output_type": "stream", "text": "x = 1 GB\n"}]},
    ]}
    assert mismatches(nb, "made-up.ipynb") == ["cell 0: '12.34 GB'"]
    nb["cells"][1]["outputs"][0]["text"] = "needs 12.341 GB\n"       # printed: evidence
    assert mismatches(nb, "made-up.ipynb") == []
    nb["cells"][1]["outputs"][0]["text"] = "needs 12.341 MB\n"       # another unit: none
    assert mismatches(nb, "made-up.ipynb") == ["cell 0: '12.34 GB'"]
