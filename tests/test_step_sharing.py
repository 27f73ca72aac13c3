"""Grids that differ in the data-parallel sync alone share their layer prices when priced
together (issue 29 item 6: a cold search), and each gets what it gets priced alone."""

import numpy as np
import pytest

from memsym.model import preset
from memsym.timing import step as step_mod
from memsym.timing.records import Overlap, Settings
from memsym.timing.step import step_time_grid, step_time_grids


def _grids():
    base = dict(arch=preset("llama3-70b"), gpu_name="h100", t=np.array([4.0, 8.0, 8.0]),
                p=np.array([4.0, 4.0, 2.0]), d=np.array([8.0, 4.0, 8.0]), v=np.array([1.0, 5.0, 1.0]),
                m=np.array([16.0, 32.0, 8.0]))
    ddp = dict(base, settings=Settings(seq_length=4096, distributed_optimizer=False),
               overlap=Overlap(grad_reduce=True))
    zero1 = dict(base, settings=Settings(seq_length=4096, distributed_optimizer=True),
                 overlap=Overlap(grad_reduce=True, param_gather=True))
    fsdp = dict(base, settings=Settings(seq_length=4096, distributed_optimizer=True,
                                        gather_per_microbatch=True))
    return [ddp, zero1, fsdp]


def test_dp_variants_priced_together_equal_each_alone():
    together = step_time_grids(_grids())
    for kw, got in zip(_grids(), together):
        alone = step_time_grid(**kw)
        assert set(got) == set(alone)
        for key in alone:
            assert np.array_equal(np.asarray(got[key]), np.asarray(alone[key])), key
    # the sync differs (an all-reduce against a reduce-scatter and all-gather): the sharing
    # did not copy one grid's step onto another
    assert not np.array_equal(together[0]["dp"], together[2]["dp"])


def test_layer_and_pipeline_priced_once_for_dp_variants(monkeypatch):
    calls = []
    for name in ("mean_layer", "pipeline_parts"):
        real = getattr(step_mod, name)

        def counted(*args, _real=real, _name=name, **kw):
            calls.append(_name)
            return _real(*args, **kw)

        monkeypatch.setattr(step_mod, name, counted)
    step_time_grids(_grids())
    assert sorted(calls) == ["mean_layer", "pipeline_parts"]
    calls.clear()
    grids = _grids()
    grids[1]["t"] = np.array([4.0, 8.0, 4.0])      # other rows: priced apart
    step_time_grids(grids)
    assert sorted(calls) == ["mean_layer"] * 2 + ["pipeline_parts"] * 2


def test_the_shared_prices_cannot_be_changed_in_place(monkeypatch):
    # every grid of a group reads the same layer and pipeline arrays: they are read-only, so
    # a later in-place change by one grid (a bug) raises rather than moving another's step
    seen = []
    real = step_mod._shared_entry

    def kept(*args):
        entry = real(*args)
        seen.append(entry)
        return entry

    monkeypatch.setattr(step_mod, "_shared_entry", kept)
    together = step_time_grids(_grids())
    shared = seen[0]
    arrays = [a for a in (*shared["layer"], *shared["pp"].values()) if isinstance(a, np.ndarray)]
    assert arrays and not any(a.flags.writeable for a in arrays)
    with pytest.raises(ValueError, match="read-only"):
        arrays[0] += 1
    # and what each grid returns is its own: changing one grid's step changes no other's
    before = together[1]["step"].copy()
    together[0]["step"] += 1
    assert np.array_equal(together[1]["step"], before)
