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
