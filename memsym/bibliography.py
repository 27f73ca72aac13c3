"""The bibliography every ``Source(key, locator)`` points into, shipped with the package.

``memsym/references.toml`` holds one entry per source (authors, title, year, where, units);
documents print full entries from it (:mod:`memsym.document`), and the catalogue tests check
that every cited key is in it.
"""

from __future__ import annotations

import functools

__all__ = ["references"]


@functools.lru_cache(maxsize=1)
def _load() -> dict:
    # read on first use: tomllib and importlib.resources cost ~10 ms, and `import memsym`
    # reaches this module (Term prints through memsym.printing) without needing them
    import tomllib
    from importlib import resources

    text = resources.files("memsym").joinpath("references.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def references() -> dict:
    """The bibliography as a dict keyed by reference key (a fresh copy).

    Examples
    --------
    >>> references()["zero"]["title"]
    'ZeRO: Memory Optimizations Toward Training Trillion Parameter Models'
    """
    return {key: dict(entry) for key, entry in _load().items()}
