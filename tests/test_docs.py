"""The documentation: generated reference pages are current, links resolve, LaTeX compiles."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from memsym.printing import latex
from memsym.symbols import registry
from tex import compile_tex, needs_tex
from tools import reference

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def pages():
    return reference.generate()


def test_generated_reference_is_current(pages):
    """docs/reference/ equals what `python tools/reference.py` would write now."""
    stale = [name for name, text in pages.items()
             if not (DOCS / "reference" / name).is_file()
             or (DOCS / "reference" / name).read_text(encoding="utf-8") != text]
    assert not stale, f"stale generated pages {stale}: run `python tools/reference.py`"


def test_check_flag_reports_stale_pages(tmp_path, capsys):
    """--check exits 1 on a checkout whose pages differ, 0 once they are written."""
    (tmp_path / "formulas").mkdir()
    for path in (ROOT / "formulas").glob("*.toml"):
        (tmp_path / "formulas" / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    # a source checkout: the catalogue's README and the bibliography (package data since it
    # moved to memsym/references.toml)
    (tmp_path / "formulas" / "README.md").write_text(
        (ROOT / "formulas" / "README.md").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "memsym").mkdir()
    (tmp_path / "memsym" / "references.toml").write_text(
        (ROOT / "memsym" / "references.toml").read_text(encoding="utf-8"), encoding="utf-8")
    assert reference.main(["--check", "--root", str(tmp_path)]) == 1
    assert reference.main(["--root", str(tmp_path)]) == 0
    assert reference.main(["--check", "--root", str(tmp_path)]) == 0
    assert reference.stale(tmp_path) == []


def test_every_catalogue_entry_and_symbol_is_documented(pages):
    entries = reference.catalogue()
    assert entries
    for _, entry in entries:
        assert f"### `{entry['id']}`" in pages["formulas.md"]
        assert entry["latex"].strip() in pages["formulas.md"]
    for name in registry():
        assert f"| `{name}` |" in pages["symbols.md"]
    for key in reference.references():
        assert f"## `{key}`" in pages["bibliography.md"]


def test_seed000_entry_shows_the_printed_formula_and_the_code():
    """The seed-000 entry: the printed form and memsym's expression with fp32 widths."""
    entry = next(e for _, e in reference.catalogue() if e["id"] == "seed000.distributed_optimizer")
    expr = reference.code_expression(entry)
    from memsym.symbols import N, b_hp, d, p, t
    # seed 000: N/(pt) b_hp + N/(ptd) 4 + N/(ptd) 12, derived by hand
    assert (expr - (N / (p * t) * b_hp + 16 * N / (p * t * d))).equals(0)
    text = reference.formulas_page()
    block = text.split("### `seed000.distributed_optimizer`")[1].split("### ")[0]
    assert latex(expr) in block
    assert "N = 1.75e11" in block and "1.09375e10" in block     # 175e9 and 10.9375 GB


def test_numbers_print_as_written():
    assert reference.number(7.5e9) == "7.5e9"
    assert reference.number(64) == "64"
    assert reference.number(0.25) == "0.25"
    assert reference.number(1.75e9) == "1.75e9"
    assert reference.number(1e-6) == "1e-6"


def test_code_outside_memsym_is_refused():
    with pytest.raises(ValueError, match="memsym function"):
        reference.code_expression({"code": "os:getcwd"})


def _markdown_files():
    files = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md", ROOT / "notebooks" / "README.md",
                                          ROOT / "tools" / "README.md"]
    return [f for f in files if f.is_file()]


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    """Every relative link in the Markdown pages points at an existing file (and heading)."""
    text = path.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve()
        assert dest.exists(), f"{path.name}: broken link {target}"
        if anchor and dest.suffix == ".md":
            heads = re.findall(r"^#+ (.+)$", dest.read_text(encoding="utf-8"), re.M)
            anchors = {reference.anchor(h.replace("`", "")) for h in heads}
            assert anchor in anchors, f"{path.name}: no heading #{anchor} in {file_part}"


@needs_tex
@pytest.mark.tex
def test_reference_latex_compiles(pages):
    """Every $$ block of the formula reference (as printed and as memsym prints it) compiles."""
    blocks = re.findall(r"^\$\$\n(.*?)\n\$\$$", pages["formulas.md"], re.S | re.M)
    assert len(blocks) >= 2 * len(reference.catalogue())
    body = "\n".join("\\begin{equation*}\n%s\n\\end{equation*}" % b for b in blocks)
    symbols = "\n".join("$%s$" % meta.latex for meta in registry().values())
    compile_tex("\\documentclass{article}\n\\usepackage{amsmath}\n\\usepackage{amssymb}\n"
                "\\begin{document}\n" + body + "\n" + symbols + "\n\\end{document}\n")


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_follow_the_policy(path):
    """notebooks/README.md: executed in order, outputs stored, no errors, asserts present."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "no code cells"
    counts = [c.get("execution_count") for c in code]
    assert all(isinstance(n, int) for n in counts), "a code cell was not executed (stored outputs missing)"
    assert counts == sorted(counts) and len(set(counts)) == len(counts), "cells not run top to bottom"
    for cell in code:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", f"stored error in {path.name}"
    assert any("assert " in "".join(c["source"]) for c in code), "states no key number as an assert"
    assert nb["cells"][0]["cell_type"] == "markdown", "starts without a lesson title"


def test_reference_refuses_a_root_without_the_catalogue(tmp_path, monkeypatch, capsys):
    """A wrong --root is one line on stderr, exit 2, and nothing is created under it."""
    monkeypatch.chdir(tmp_path)
    assert reference.main(["--root", "x y"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "formulas/ catalogue" in err and "Traceback" not in err
    assert not (tmp_path / "x y").exists()
    assert reference.main(["--check", "--root", "x y"]) == 2
    with pytest.raises(ValueError):
        reference.write(tmp_path / "x y")
    assert list(tmp_path.iterdir()) == []


def _commands(page: pathlib.Path) -> list[list[str]]:
    """The `memsym ...` lines of the page's ```bash blocks, as argument lists."""
    blocks = re.findall(r"^```bash\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M)
    return [line.split("#")[0].split()[1:] for block in blocks for line in block.splitlines()
            if line.startswith("memsym ")]


def test_getting_started_commands_run(tmp_path, monkeypatch, capsys):
    """docs/getting-started.md says its `memsym` commands run: they do, with exit status 0."""
    from memsym.cli import main

    commands = _commands(DOCS / "getting-started.md")
    assert len(commands) >= 3
    monkeypatch.chdir(tmp_path)   # `memsym latex ... -o sizing.tex` writes here
    for argv in commands:
        assert main(argv) == 0, " ".join(argv)
        capsys.readouterr()
    assert (tmp_path / "sizing.tex").is_file()
