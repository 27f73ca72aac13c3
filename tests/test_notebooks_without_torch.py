"""The lessons pass without PyTorch (issue 16): notebook 07 measures activations with torch
and must skip cleanly, with one clear line, where torch is absent.

The kernel is started with a ``sitecustomize`` that marks torch and transformers as absent
(``sys.modules[name] = None``: ``importlib.util.find_spec`` then returns None and ``import``
raises ImportError), as on a machine without the ``torch`` extra; nbval runs the notebook
and compares its outputs, so every cell's asserts still hold.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_notebook_07_passes_without_torch(tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    # and rfc3987_syntax: jsonschema's optional checker of the "iri" string format, which
    # builds a lark grammar when jsonschema is imported (nbval imports nbformat, nbformat
    # jsonschema: 1.5-3 s of this pytest's start).  nbformat validates with a Draft4Validator
    # made without a format checker (nbformat.json_compat), so no format is ever checked.
    (hide / "sitecustomize.py").write_text(
        "import sys\nfor name in ('torch', 'transformers', 'rfc3987_syntax'):\n"
        "    sys.modules[name] = None\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(hide), str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
         "--nbval-sanitize-with", str(ROOT / "notebooks" / "nbval_sanitize.cfg"),
         "-o", "addopts=", str(ROOT / "notebooks" / "07_measure_activations.ipynb")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
