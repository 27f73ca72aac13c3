"""The bibliography every ``Source(key, locator)`` points into, shipped with the package.

``memsym/references.toml`` holds one entry per source (authors, title, year, where, units);
documents print full entries from it (:func:`entry_text`, :mod:`memsym.document`), and the
catalogue tests check that every cited key is in it.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
import tomllib

__all__ = ["references", "entry_text", "clean_locator"]


@functools.lru_cache(maxsize=1)
def _load() -> dict:
    # read on first use: tomllib and importlib.resources cost ~10 ms, and `import memsym`
    # reaches this module (Term prints through memsym.printing) without needing them

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


#: The seeds' Japanese section headings that locators quote, in English (pdflatex's default
#: fonts cannot set them; the reference entry says the seed is in Japanese).
_HEADINGS = {"概要": "overview", "測定結果": "measurements", "まとめ": "summary",
             "一時メモリ／ワークスペースメモリ": "temporary / workspace memory",
             "使い方の例": "usage example", "テンソル並列": "tensor parallelism"}


def clean_locator(text: str) -> str:
    """The locator with the seeds' Japanese headings in English, without other characters
    pdflatex cannot set and without the punctuation they leave behind.

    >>> clean_locator("概要; 測定結果 (expandable_segments)")
    'overview; measurements (expandable_segments)'
    >>> clean_locator("summary formula (まとめ)")
    'summary formula'
    """
    text = str(text)
    for ja, en in _HEADINGS.items():
        # a heading quoted after its English rendering ("summary formula (まとめ)") is dropped
        if re.search(r"\(\s*%s\s*\)" % re.escape(ja), text) and en in text.lower():
            text = re.sub(r"\(\s*%s\s*\)" % re.escape(ja), "", text)
        text = text.replace(ja, en)
    kept = "".join(ch for ch in text if ord(ch) < 0x250)
    kept = re.sub(r"\(\s*[;,]?\s*\)", "", kept)
    kept = re.sub(r"\s*[;,]\s*(?=[;,]|$)", "", kept)
    kept = re.sub(r"^\s*[;,]\s*", "", kept)
    return re.sub(r"\s{2,}", " ", kept).strip()


def entry_text(key: str, bib: dict) -> str:
    """One entry as plain text (authors. title. year. where. units.) from ``bib``
    (:func:`references`); a key missing from it says so.

    >>> entry_text("nope", {})
    'nope (not in memsym/references.toml)'
    """
    ref = bib.get(key)
    if ref is None:
        return f"{key} (not in memsym/references.toml)"
    bits = []
    if ref.get("authors"):
        bits.append(str(ref["authors"]))
    bits.append(str(ref.get("title", key)))
    if ref.get("year"):
        bits.append(str(ref["year"]))
    if ref.get("where"):
        bits.append(str(ref["where"]))
    text = ". ".join(b.rstrip(".") for b in bits) + "."
    if ref.get("units"):
        text += f" Units: {ref['units']}."
    return text

