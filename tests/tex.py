"""Compile LaTeX with a real TeX engine (pdflatex) and report errors."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

PDFLATEX = shutil.which("pdflatex")
needs_tex = pytest.mark.skipif(PDFLATEX is None, reason="pdflatex not installed (.ci/run installs it)")


def compile_tex(source: str) -> str:
    """Compile a standalone document; fail the test on any LaTeX error. Returns the log."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "doc.tex"
        path.write_text(source, encoding="utf-8")
        proc = subprocess.run(
            [PDFLATEX, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
            cwd=tmp, capture_output=True, text=True, errors="replace", timeout=120)
        log = (Path(tmp) / "doc.log").read_text(errors="replace") if (Path(tmp) / "doc.log").exists() else proc.stdout
        bad = [line for line in log.splitlines() if line.startswith("!") or "Undefined control sequence" in line]
        if proc.returncode != 0 or bad or not (Path(tmp) / "doc.pdf").exists():
            raise AssertionError("pdflatex failed:\n" + "\n".join(bad or log.splitlines()[-30:]))
        return log


PDFTOTEXT = shutil.which("pdftotext")
needs_pdftotext = pytest.mark.skipif(PDFLATEX is None or PDFTOTEXT is None,
                                     reason="pdflatex or pdftotext (poppler-utils) not installed")


def pdf_pages(source: str) -> list[dict]:
    """Compile a standalone document and read its PDF back with pdftotext: per page, its
    ``text`` (reading order) and ``bottom``, the lowest word's lower edge as a fraction of
    the page's height (the page number left out)."""
    import re

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "doc.tex").write_text(source, encoding="utf-8")
        subprocess.run([PDFLATEX, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
                       cwd=tmp, capture_output=True, timeout=120, check=True)
        pdf = str(Path(tmp) / "doc.pdf")
        text = subprocess.run([PDFTOTEXT, pdf, "-"], capture_output=True, text=True,
                              check=True).stdout
        bbox = subprocess.run([PDFTOTEXT, "-bbox", pdf, "-"], capture_output=True, text=True,
                              check=True).stdout
    pages = []
    for i, (page_text, page_box) in enumerate(zip(text.split("\f"), bbox.split("<page ")[1:])):
        height = float(re.search(r'height="([\d.]+)"', page_box).group(1))
        words = [float(y) for y, w in re.findall(r'yMax="([\d.]+)">([^<]*)</word>', page_box)
                 if w.strip() != str(i + 1)]
        pages.append({"text": page_text, "bottom": max(words, default=0.0) / height})
    return pages
