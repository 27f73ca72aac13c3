"""The mean layer of a grid of layouts (a search's) is each row's mean layer, to the last bit.

:func:`memsym.timing.mean_layer.mean_layer` prices a large grid once per distinct (t, c, e,
t_e, b) and spreads the result back.  Megatron-LM builds its process groups in the order
tp-cp-ep-dp-pp (megatron/core/parallel_state.py, initialize_model_parallel): a TP group's
ranks are neighbours (stride 1) and a CP group's are t apart, whatever d is, so the links a
layer's TP and CP collectives run on, and with them the layer's time, do not depend on d.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from memsym.hardware import cluster_for, gpu
from memsym.model import preset
from memsym.timing.collectives import group_stride
from memsym.timing.gemm import shape_of
from memsym.timing.mean_layer import mean_layer
from memsym.timing.records import Overlap, Settings

KW = dict(eta_gemm=None, overlap=Overlap())


def _leaves(value):
    # the arrays of mean_layer's nested result, in a fixed order
    if isinstance(value, dict):
        return [leaf for k in sorted(value) for leaf in _leaves(value[k])]
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [np.asarray(value, dtype=float)]


def test_tp_and_cp_strides_do_not_depend_on_d():
    # order tp-cp-ep-dp-pp: TP neighbours 1 apart, CP neighbours t apart (by hand)
    for d in (1, 8, 64):
        assert float(group_stride("tp", t=8, c=2, d=d)) == 1
        assert float(group_stride("cp", t=8, c=2, d=d)) == 8


@pytest.mark.parametrize("model, mtp_layers", [("deepseek-v3", 1), ("nemotron-3-nano", 0)])
def test_grid_rows_equal_the_layer_priced_alone(model, mtp_layers):
    x = shape_of(preset(model))
    dev = gpu("h100")
    clu = cluster_for(dev.name)
    st = Settings(seq_length=4096, sequence_parallel=True)
    # 2 x 2 x 2 x 2 x 2 (t, c, e, t_e, b) combinations, each with 4 data-parallel sizes:
    # 128 rows, 32 distinct layers (the grid path prices these once each)
    rows = [(t, c, e, te, b, d) for t, c, e, te, b, d in
            itertools.product((1, 8), (1, 2), (1, 8), (1, 2), (1, 2), (1, 2, 16, 64))]
    grid = [np.array(col, dtype=float) for col in zip(*rows)]
    got = _leaves(mean_layer(x, st, dev, clu, *grid, mtp_layers=mtp_layers, **KW))
    for i in (0, 1, 2, 3, 37, 64, 101, 127):
        alone = _leaves(mean_layer(x, st, dev, clu, *(np.array([float(v)]) for v in rows[i]),
                                   mtp_layers=mtp_layers, **KW))
        assert len(alone) == len(got)
        for g, a in zip(got, alone):
            # a scalar part (0.0 without MoE) stays a scalar; arrays are compared row i
            assert (g if g.ndim == 0 else g[i]) == (a if a.ndim == 0 else a[0])
    # rows that differ only in d: the same layer (rows 0-3 share (t, c, e, t_e, b))
    for g in got:
        if g.ndim:
            assert g[0] == g[1] == g[2] == g[3]
