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


import collections  # noqa: E402
import functools  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: The files and notebooks that take longest, longest first (issue 29: per-file totals of the
#: README's command on the 2-core machine, ``--durations=0`` summed by file).  Under
#: ``--dist loadfile`` each runs whole on one worker; started first, the short files fill in
#: around them and the run ends with the shortest, both workers busy to the end (longest
#: processing time first).  pytest-xdist's own order (most tests first) started the
#: single-test files last: ``docs/howto-search.md``, one doctest of 20 s, ran alone at the end
#: while the other worker had nothing left.  Only the order depends on this list; a file
#: missing from it runs after these, in pytest-xdist's order.
LONGEST_FIRST = (
    "tests/test_search.py", "tests/test_one_reading.py", "tests/test_bench.py",
    "tests/test_fake_tracker_dense.py", "tests/test_emit_roundtrip.py",
    "notebooks/03_sizing_seed004.ipynb", "tests/test_properties.py",
    "tests/test_search_job.py", "tests/test_bounds.py", "notebooks/07_measure_activations.ipynb",
    "tests/test_fake_tracker_moe.py", "tests/test_min_gpus_brute.py",
    "tests/test_muon_search.py", "tests/test_emit.py", "docs/howto-search.md",
    "tests/test_engine_compile.py", "tests/test_fake_tracker_gaps.py", "tests/test_emit_held.py",
    "tests/test_wheel.py", "tests/test_engine_fsdp2.py", "tests/test_time_validation.py",
    "tests/test_timing.py", "tests/test_clamped_glu.py", "tests/test_shell_reader.py",
    "tests/test_plotting.py", "tests/test_fuzz.py", "tests/test_production_runs_fit.py",
    "tests/test_context_parallel.py", "tests/test_training.py", "tools/measured.py",
)

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
        subprocess.run([sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                       check=False)


def pytest_collection_modifyitems(config, items):
    """In a pytest-xdist worker: the items of :data:`LONGEST_FIRST` first, in its order, then
    the other files by their number of tests, most first (pytest-xdist's ``loadscope-reorder``,
    turned off in :func:`pytest_configure`), each file's tests in their own order.  Every
    worker sorts the same collection the same way, as pytest-xdist requires."""
    if getattr(config, "workerinput", None) is None:
        return
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    files = [item.nodeid.split("::", 1)[0] for item in items]
    count, first = collections.Counter(files), {}
    for i, name in enumerate(files):
        first.setdefault(name, i)
    order = sorted(range(len(items)), key=lambda i: (rank.get(files[i], len(rank)),
                                                     -count[files[i]], first[files[i]], i))
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
