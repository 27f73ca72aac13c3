import pathlib
import sys

# tests/catalogue.py is a helper module shared by the catalogue and docs tests
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

# tests/data holds other projects' files verbatim (torchtitan's config_registry.py files, read
# by memsym with ast and never imported): not test modules
collect_ignore_glob = ["data/*"]
# this file is a plugin, not a doctest module: collecting it as one clashes with the other
# conftest.py files (notebooks/, tools/), which share its module name
collect_ignore = ["conftest.py"]


import functools  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

from suite_order import longest_first  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Byte code written once before the workers start (:func:`pytest_configure`): memsym's and
#: the tools' modules (``compileall``, which rewrites only what is stale) and pytest's
#: assertion-rewritten test modules (``.ci/rewrite_tests.py``, likewise).
PRECOMPILE = (("-m", "compileall", "-q", "-j", "0", "memsym"),
              ("-m", "compileall", "-q", "-j", "0", "-l", "tools", "tests", "conftest.py"),
              (str(ROOT / ".ci" / "rewrite_tests.py"),))


def pytest_configure(config):
    """In pytest-xdist's controller (``-n``), before its workers start: the byte code of
    memsym, tools/ and the test modules written once, and the files handed out longest first.

    Each worker collects the whole suite, and where ``PYTHONDONTWRITEBYTECODE`` is set (this
    project's machines and CI) each compiled every memsym module from source and rewrote the
    asserts of every test module itself, as did every notebook kernel and every ``python -m
    memsym`` a test starts.  Written here once (git-ignored ``__pycache__``, as ``.ci/run``
    and ``memsym bench`` write them), every later process only reads them.  Best effort: a
    step that fails leaves its files to be compiled where they are imported, as before."""
    if getattr(config, "workerinput", None) is not None or not getattr(config.option, "tx", None):
        return
    if getattr(config.option, "dist", None) in ("loadfile", "loadscope"):
        config.option.loadscopereorder = False   # the order of pytest_collection_modifyitems
    for args in PRECOMPILE:
        if args[0] != "-m" and not pathlib.Path(args[0]).is_file():   # a tree without .ci/
            continue
        subprocess.run([sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                       check=False)


def pytest_collection_modifyitems(config, items):
    """In a pytest-xdist worker: the items in :func:`suite_order.longest_first`'s order
    (pytest-xdist's own ``loadscope-reorder`` turned off in :func:`pytest_configure`).  Every
    worker sorts the same collection the same way, as pytest-xdist requires."""
    if getattr(config, "workerinput", None) is None:
        return
    order = longest_first([item.nodeid for item in items])
    items[:] = [items[i] for i in order]


@pytest.fixture(autouse=True)
def _no_progress_line(monkeypatch):
    """A search that runs past 0.5 s writes one progress line on stderr
    (:class:`memsym.cli.search.Progress`): how long it runs depends on the machine's load, so
    every test sees it only where it asks for it (``after=0``, patched after this)."""
    from memsym.cli import min_gpus as cli_min_gpus, search as cli_search

    quiet = functools.partial(cli_search.Progress, after=float("inf"))
    monkeypatch.setattr(cli_search, "Progress", quiet)
    monkeypatch.setattr(cli_min_gpus, "Progress", quiet)
