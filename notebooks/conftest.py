"""nbval's sanitize file wherever pytest is started (issue 33).

pyproject's ``addopts`` names it relative to the repository root
(``--nbval-sanitize-with=notebooks/nbval_sanitize.cfg``); ``cd notebooks && python3 -m pytest
--nbval 05_smallest_d.ipynb`` read it relative to ``notebooks/`` and every cell failed with
FileNotFoundError.  A relative path that does not exist from the working directory is
resolved against the root pytest found (the folder of pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path


def pytest_configure(config):
    name = getattr(config.option, "nbval_sanitize_with", None)
    if name and not Path(name).is_absolute() and not Path(name).exists():
        rooted = Path(config.rootpath) / name
        if rooted.exists():
            config.option.nbval_sanitize_with = str(rooted)
