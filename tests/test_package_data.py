"""The package reads nothing from the source tree around it (issue 29: an installed package must
work).

``memsym/timing/validation.py`` used to read ``formulas/measured_time.toml`` through
``Path(__file__).parent.parent.parent``, a folder an installed package does not have; it is
repository tooling now (``tools/time_accuracy.py``), beside ``tools/measured.py``.  These
checks need no wheel (``tests/test_wheel.py`` builds one, slowly): the package folder alone is
copied where no ``formulas/``, ``docs/`` or ``tests/`` lie beside it, and run from there.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "memsym"

#: The modules that name a path through ``__file__``, and why each stays inside the package or
#: refuses without a checkout.  A new use must be added here with its reason.
FILE_PATHS = {
    # hashes its own sibling memsym/numeric.py (the compile cache's key), and stamps the
    # installed package's own files (package_stamp: the search's stage-table cache key), both
    # inside the package wherever it is installed
    "memsym/compile_cache.py": 2,
    # `memsym bench --suite` times a checkout's test suite; without tests/ beside the package
    # it refuses in one line (tests/test_wheel.py::test_bench_suite_refuses_without_a_checkout)
    "memsym/bench.py": 1,
}

_RUN_ALONE = """
import importlib, importlib.util, pkgutil, sys
import memsym
assert memsym.__file__.startswith(sys.argv[1]), memsym.__file__
bad = []
for m in pkgutil.walk_packages(memsym.__path__, prefix="memsym."):
    if m.name.startswith(("memsym.measure", "memsym.reference_layers")):
        continue            # PyTorch measurements: slow to import, and they read no files
    try:
        importlib.import_module(m.name)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] == "memsym":
            bad.append(f"{m.name}: {err}")
    except Exception as err:
        bad.append(f"{m.name}: {type(err).__name__}: {err}")
assert not bad, bad
assert importlib.util.find_spec("memsym.timing.validation") is None
from memsym import bibliography
assert len(bibliography.references()) > 50      # package data: memsym/references.toml
print("ok")
"""


def test_every_file_path_in_the_package_is_reviewed():
    """No module reaches the source tree around the package through ``__file__`` unreviewed."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        n = len(re.findall(r"\b__file__\b", path.read_text(encoding="utf-8")))
        if n:
            found[path.relative_to(ROOT).as_posix()] = n
    assert found == FILE_PATHS
    # the old escape, three folders up to the checkout's formulas/, is gone
    assert not [p for p in PACKAGE.rglob("*.py")
                if re.search(r"parent\.parent\.parent|[\"']formulas[\"']",
                             p.read_text(encoding="utf-8"))]


def test_the_package_alone_imports_every_module(tmp_path):
    """A copy of ``memsym/`` with no checkout around it: every module imports (the step-time
    validation is not among them) and the package's own data is read."""
    alone = tmp_path / "site"
    shutil.copytree(PACKAGE, alone / "memsym", ignore=shutil.ignore_patterns("__pycache__"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH")}
    env.update(PYTHONPATH=str(alone), PYTHONNOUSERSITE="1", MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", _RUN_ALONE, str(alone)], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"


def test_the_time_accuracy_tool_lists_the_runs_from_the_checkout():
    """The tooling reads the one copy of the data, ``formulas/measured_time.toml``."""
    from tools import time_accuracy

    assert time_accuracy.RUNS_PATH == ROOT / "formulas" / "measured_time.toml"
    runs = time_accuracy.runs()
    ids = [r["id"] for r in runs]
    assert len(ids) == len(set(ids)) > 10
    # the file's own text names every run the tool lists
    text = time_accuracy.RUNS_PATH.read_text(encoding="utf-8")
    assert all(f'id = "{i}"' in text for i in ids)
