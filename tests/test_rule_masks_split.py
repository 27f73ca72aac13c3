"""The search's rule masks (issue 29, the cold search): the rules that read no first/last stage
split are evaluated once over the whole grid, the others per (f, l) group; the masks must be
those of every rule evaluated on each group alone, as the rules are written (scalars f, l)."""

from __future__ import annotations

import numpy as np
import pytest

from memsym import rules
from memsym.search.grid import grid_knobs, raw_grid, rule_masks, splits_of, with_split
from memsym.search.space import KNOBS, make_space


def _per_group(space, grid, gpus, names):
    # every rule on each (f, l) group's rows, with that group's split as the space's
    f_, l_ = splits_of(space, grid)
    out = {name: np.zeros(len(grid["t"]), dtype=bool) for name in names}
    for fv, lv in {(int(a), int(b)) for a, b in zip(f_, l_)}:
        idx = np.flatnonzero((f_ == fv) & (l_ == lv))
        sub = with_split(space, fv, lv)
        knobs = grid_knobs(sub, {k: grid[k][idx] for k in KNOBS if k in grid}, gpus)
        for name, mask in rules.masks(space.arch, knobs, names).items():
            out[name][idx] = mask
    return out


@pytest.mark.parametrize("model, gpu, gpus, options", [
    ("llama3-405b", "h100-80gb", 16384, dict(seq_length=8192, global_batch_size=2048)),
    ("deepseek-v3", "h100-80gb", 2048, dict(seq_length=4096, global_batch_size=15360)),
    ("mixtral-8x7b", "a100-80gb", 32, dict(global_batch_size=256)),
])
def test_masks_are_the_per_group_rules(model, gpu, gpus, options):
    space = make_space(model, gpu, **options)
    grid = raw_grid(space, gpus)
    got = rule_masks(space, grid, gpus)
    f_, l_ = splits_of(space, grid)
    assert len({(int(a), int(b)) for a, b in zip(f_, l_)}) > 1     # the split-free path runs
    want = _per_group(space, grid, gpus, list(got))
    assert got.keys() == want.keys()
    for name in want:
        assert np.array_equal(got[name], want[name]), name
    # a rule that reads the split refuses some layouts here and keeps others (a mask that
    # the split's value decides)
    assert any(got[n].any() and not got[n].all() for n in ("pp-layers", "vpp-layers"))
