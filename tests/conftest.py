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

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_progress_line(monkeypatch):
    """A search that runs past 0.5 s writes one progress line on stderr
    (:class:`memsym.cli.search.Progress`): how long it runs depends on the machine's load, so
    every test sees it only where it asks for it (``after=0``, patched after this)."""
    from memsym.cli import min_gpus as cli_min_gpus, search as cli_search

    quiet = functools.partial(cli_search.Progress, after=float("inf"))
    monkeypatch.setattr(cli_search, "Progress", quiet)
    monkeypatch.setattr(cli_min_gpus, "Progress", quiet)
