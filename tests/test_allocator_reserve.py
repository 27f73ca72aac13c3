"""The published caching-allocator reserve data (``formulas/allocator_reserve.toml``): each
point carries the numbers its locator quotes, and the stated statistic (count, median, max
and min of max_reserved / allocated - 1 over the run-peak pairs, by expandable_segments) is
what the points give.  The data is the basis, or the lack of one, of memsym's fragmentation
allowance (:mod:`memsym.terms.allowances`).
"""

from __future__ import annotations

import statistics
import tomllib
from fractions import Fraction
from pathlib import Path

import pytest

from memsym.terms.allowances import ALLOWANCES

DATA = tomllib.loads((Path(__file__).resolve().parent.parent / "formulas"
                      / "allocator_reserve.toml").read_text())
POINTS = DATA["point"]
STATES = ("on", "off", "unstated")


def fraction(pt) -> Fraction:
    """The reserve fraction of one point, exact from the printed decimals."""
    alloc = Fraction(str(pt["allocated"]))
    if "reserved" in pt:
        return Fraction(str(pt["reserved"])) / alloc - 1
    return Fraction(str(pt["reserved_unallocated"])) / alloc


def test_every_point_is_described_and_quotes_its_numbers():
    ids = [p["id"] for p in POINTS]
    assert len(ids) == len(set(ids))
    for pt in POINTS:
        assert pt["url"].startswith("https://github.com/"), pt["id"]
        assert pt["kind"] in ("peak", "oom", "current"), pt["id"]
        assert pt["expandable_segments"] in STATES and pt["es_basis"], pt["id"]
        assert pt["allocated_metric"] in ("max_allocated", "peak_active", "current_allocated")
        assert pt["reserved_metric"] in ("max_reserved", "current_reserved")
        assert ("reserved" in pt) != ("reserved_unallocated" in pt), pt["id"]
        # the numbers are the printed ones: the locator quotes each of them
        for key in ("allocated", "reserved", "reserved_unallocated"):
            if key in pt:
                assert str(pt[key]) in pt["locator"], (pt["id"], key)
        if pt["kind"] == "peak":      # both peaks: the pair the statistic uses
            assert pt["allocated_metric"] != "current_allocated"
            assert pt["reserved_metric"] == "max_reserved"
            assert fraction(pt) >= 0, pt["id"]


def test_stated_statistic_is_the_points():
    """The [[summary]] per expandable_segments state, recomputed from the "peak" points."""
    stated = {s["expandable_segments"]: s for s in DATA["summary"]}
    assert set(stated) == set(STATES)
    for state in STATES:
        fr = [float(fraction(p)) for p in POINTS
              if p["kind"] == "peak" and p["expandable_segments"] == state]
        s = stated[state]
        assert s["count"] == len(fr), state
        if fr:
            assert s["median"] == pytest.approx(round(statistics.median(fr), 4), abs=1e-12)
            assert s["max"] == pytest.approx(round(max(fr), 4), abs=1e-12)
            assert s["min"] == pytest.approx(round(min(fr), 4), abs=1e-12)


def test_default_margin_is_below_every_published_reserve_without_expandable_segments():
    """The 10 % default is no upper bound without expandable segments (9 pairs, 20-39 %), and
    no published pair with them on backs it: the default stays, as the allowance's comment
    says, an assumption (issue 30)."""
    default = ALLOWANCES["fragmentation"].default
    off = [fraction(p) for p in POINTS if p["kind"] == "peak"
           and p["expandable_segments"] == "off"]
    assert default == Fraction(1, 10) and off and min(off) > default
    assert not [p for p in POINTS if p["kind"] == "peak" and p["expandable_segments"] == "on"]
