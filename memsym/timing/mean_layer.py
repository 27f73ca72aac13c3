r"""The mean decoder layer of a model: each layer kind priced once, weighted by its share.

The step (:mod:`memsym.timing.step`) multiplies one layer's time by the layers of each
pipeline stage.  A model whose layers differ (dense and MoE layers, a hybrid's Mamba-2,
attention and MLP layers) is priced kind by kind (:func:`memsym.timing.layer.layer_time`)
and the kinds weighted by their share of the L decoder layers, spread evenly over the stages
(an assumption).  :func:`layer_parts` turns the mean layer into the busiest stage's parts of
the step's breakdown.

References
----------
.. [narayanan] arXiv:2104.04473 §2.2, §3.2.
.. [megatron-lm] core/transformer/transformer_block.py (the decoder's layers, one after the
   other, each a TransformerLayer of its own spec).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..distinct_rows import distinct_layouts, spread
from .layer import layer_time
from .linear_attention import kind_shape
from .moe_host import floored_growth, unpaired_growth
from .mtp import mtp_block, mtp_settings
from .records import Overlap, Settings

__all__ = ["mean_layer", "layer_parts", "bf16_layer_excess"]


def mean_layer(x, st: Settings, dev, clu, t, c, e, t_e, b, d, *, eta_gemm,
               overlap: Overlap, mtp_layers: int = 0) -> tuple:
    r"""The mean decoder layer's forward and backward parts of one micro-batch [s].

    .. math::

        \bar t = \Bigl(1 - \frac{L_{moe}}{L}\Bigr) t_{dense} + \frac{L_{moe}}{L}\,t_{moe},
        \qquad t_{MTP} = t_{last}\ \text{(at the MTP block's precision)}

    per part (``gemm``, ``attention``, ``memory``, ``tp``, ``ep``, ``cp``; a hybrid: every
    kind of ``x.kinds`` weighted by its share n / L).  Returns ``(lf, lb, raw, ep_alone,
    mtp)``: the forward and backward parts (dicts of arrays [s]); the layer's collectives as
    issued (:func:`memsym.timing.layer.layer_time`'s ``raw``); what an MoE layer's
    all-to-alls add when nothing overlaps them, the issued forward and backward EP seconds
    less the exposed ones, the forward's under the host floor
    (:func:`memsym.timing.moe_host.floored_growth`)
    [s] (0 without MoE); and ``mtp``, an MTP layer's forward and backward parts [s]: a layer of
    the last layer's kind (``Shape.last_moe``; a hybrid's: its MTP pattern's layers,
    :func:`memsym.timing.mtp.mtp_block`, else the mean), under FP4 priced at 16 bits where
    ``mtp_layers`` are given (:func:`memsym.timing.mtp.mtp_settings`).

    A layer's time depends on the layout only through (t, c, e, t_e, b): d reaches it only as
    the place of its TP and CP groups in the tp-cp-ep-dp-pp mesh, whose strides (1 and t,
    :func:`memsym.timing.collectives.group_stride`) do not depend on d.  A grid of many
    layouts (a search's, where d, p, v and the stage split vary too) is priced once per
    distinct combination, with one of its rows' d, and spread back (elementwise arithmetic:
    the same numbers to the last bit).

    Parameters
    ----------
    x : memsym.timing.gemm.Shape
        The model's shape.
    st : Settings
        What the step does beyond the layout.
    dev : GPU
        The GPU.
    clu : Cluster
        The interconnect.
    t, c, e, t_e, d : array_like
        Tensor-, context-, expert-, expert-tensor- and data-parallel sizes [GPUs].
    b : array_like
        Micro-batch size [sequences].
    eta_gemm : float or None
        A fixed achieved GEMM efficiency in (0, 1] [1] (None: the efficiency curve).
    overlap : Overlap
        Which communication hides behind compute.
    mtp_layers : int
        MTP layers of the model [layers] (their precision differs under FP4).

    Examples
    --------
    A dense model's mean layer is its one layer: no MoE all-to-alls, no other kind.

    >>> from memsym.hardware import cluster_for, gpu; from memsym.model import preset
    >>> from memsym.timing.gemm import shape_of
    >>> dev, one = gpu("h100"), np.array(1.0)
    >>> lf, lb, raw, alone, mtp = mean_layer(shape_of(preset("llama3-8b")),
    ...     Settings(seq_length=4096), dev, cluster_for(dev.name), one, one, one, one, one, one,
    ...     eta_gemm=0.5, overlap=Overlap())
    >>> round(float(lf["gemm"]) * 1e3, 1), alone, mtp == (lf, lb)   # layer_time's 3.6 ms
    (3.6, 0.0, True)

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §3.2 (every stage runs its layers one after the other).
    """
    knobs = np.broadcast_arrays(t, c, e, t_e, b, d)
    shape = knobs[0].shape
    # settings given per row (a recompute fraction per layout) are priced row by row
    per_row = any(isinstance(v, (np.ndarray, list)) and np.ndim(v)
                  for v in (getattr(st, f.name) for f in dataclasses.fields(st)))
    d_whole = np.array_equal(knobs[5], np.floor(knobs[5])) and np.all(knobs[5] >= 0)
    # a search's grid has several d for each (t, c, e, t_e, b): a sixth of its rows
    found = distinct_layouts(*knobs[:5]) if not per_row and d_whole else None
    if found is not None:
        uq, inv = found
        rep = np.empty(len(uq))
        rep[inv] = knobs[5].ravel()     # each combination's d: one of its rows'
        got = _mean_layer_of(x, st, dev, clu, *(uq[:, i].astype(float) for i in range(5)),
                             rep, eta_gemm=eta_gemm, overlap=overlap, mtp=bool(mtp_layers))
        return spread(got, inv, shape)
    return _mean_layer_of(x, st, dev, clu, t, c, e, t_e, b, d, eta_gemm=eta_gemm,
                          overlap=overlap, mtp=bool(mtp_layers))


def _mean_layer_of(x, st, dev, clu, t, c, e, t_e, b, d, *, eta_gemm, overlap, mtp) -> tuple:
    """:func:`mean_layer` on every row as given."""
    got = _kinds(x, st, dev, clu, t, c, e, t_e, b, d, eta_gemm=eta_gemm, overlap=overlap)
    if mtp and x.mtp_kinds:
        # a hybrid's MTP block: its pattern's layers, at the MTP block's precision
        block = mtp_block(x, mtp_settings(st), dev, clu, t, c, e, t_e, b, d, eta_gemm=eta_gemm,
                          overlap=overlap)
        got = (*got[:4], block)
    elif mtp and mtp_settings(st) is not st:
        # the MTP block runs at 16 bits under FP4 (memsym.timing.mtp): its layer repriced
        bf16 = _kinds(x, mtp_settings(st), dev, clu, t, c, e, t_e, b, d, eta_gemm=eta_gemm,
                      overlap=overlap)
        got = (*got[:4], bf16[4])
    return got


def _kinds(x, st, dev, clu, t, c, e, t_e, b, d, *, eta_gemm, overlap) -> tuple:
    """The mean layer's parts, collectives, EP seconds alone and the last layer's kind's parts."""
    if x.kinds:
        return _mean_hybrid_layer(x, st, dev, clu, t, c, e, t_e, b, d, eta_gemm=eta_gemm,
                                  overlap=overlap)
    lf, lb = {}, {}
    ep_alone = 0.0
    raw_dense, raw_moe = {}, {}
    dense_f, dense_b = layer_time(x, st, dev, clu, t, c, e, t_e, b, moe=False, eta_gemm=eta_gemm,
                                  overlap=overlap, dp=d, raw=raw_dense)
    raw_layer = raw_dense
    if x.L_moe:
        moe_f, moe_b = layer_time(x, st, dev, clu, t, c, e, t_e, b, moe=True, eta_gemm=eta_gemm,
                                  overlap=overlap, dp=d, raw=raw_moe)
        share = x.L_moe / x.L   # MoE layers spread evenly over stages (assumption)
        for key in dense_f:
            lf[key] = (1 - share) * dense_f[key] + share * moe_f[key]
            lb[key] = (1 - share) * dense_b[key] + share * moe_b[key]
        raw_layer = {g: tuple((1 - share) * u + share * w for u, w in zip(raw_dense[g], raw_moe[g]))
                     for g in raw_dense}
        # what the all-to-alls the overlap hides add when they run alone, under the MoE
        # layer's host floor (memsym.timing.moe_host)
        ep_alone = _alone(raw_moe, moe_f, moe_b, overlap)
        last = (moe_f, moe_b) if x.last_moe else (dense_f, dense_b)
    else:
        lf, lb = dense_f, dense_b
        last = (lf, lb)
    return lf, lb, raw_layer, ep_alone, last


def _alone(raw, f, b, overlap: Overlap):
    """What an MoE layer's forward and backward take alone beyond their steady-state price [s]:
    the all-to-alls the overlap hides (issued less exposed), under the forward's host floor,
    the backward with none; under the EP overlap against the combined 1F1B pair's floor
    (memsym.timing.moe_host.unpaired_growth)."""
    xf, xb = raw["ep"][0] - f["ep"], raw["ep"][1] - b["ep"]
    if overlap.ep_a2a:
        return unpaired_growth(raw["gpu"][0], raw["gpu"][1], xf, xb)
    return floored_growth(raw["gpu"][0], xf) + xb


def _mean_hybrid_layer(x, st, dev, clu, t, c, e, t_e, b, d, *, eta_gemm, overlap) -> tuple:
    """:func:`_kinds` for a hybrid model: each layer kind of ``x.kinds`` priced alone
    (:func:`layer_time` with its mixer and MLP), weighted by its share of the L layers (the
    kinds spread evenly over the stages, an assumption); an MTP layer priced as the mean."""
    lf, lb, raw_layer = {}, {}, {}
    ep_alone = 0.0
    for (kind, ffn), n, _, _ in x.kinds:
        raw = {}
        y, mixer = kind_shape(x, kind)      # a global layer: attention of its own shape
        f, bw = layer_time(y, st, dev, clu, t, c, e, t_e, b, moe=bool(ffn), eta_gemm=eta_gemm,
                           overlap=overlap, dp=d, raw=raw, mixer=mixer, mlp=ffn is not None)
        share = n / x.L
        for key in f:
            lf[key] = lf.get(key, 0.0) + share * f[key]
            lb[key] = lb.get(key, 0.0) + share * bw[key]
        for g in ("tp", "ep", "cp"):
            raw_layer[g] = tuple(u + share * w for u, w in
                                 zip(raw_layer.get(g, (0.0,) * 4), raw[g]))
        if ffn:     # the MoE layers' all-to-alls alone (as _kinds)
            ep_alone = _alone(raw, f, bw, overlap)
    return lf, lb, raw_layer, ep_alone, (lf, lb)


def bf16_layer_excess(x, st: Settings, dev, clu, knobs: tuple, lf: dict, lb: dict, *,
                      eta_gemm, overlap: Overlap) -> tuple:
    r"""What one decoder layer run in BF16 takes beyond the run's mean layer [s].

    Forward and backward; 0 unless the run has ``bf16_layers`` under fp8 or fp4.

    .. math:: \Delta^{\text{fwd}} = \sum_{part} \bar t^{\text{fwd}}_{part}\bigl|_{16\,\text{bit}}
        - \sum_{part} \bar t^{\text{fwd}}_{part}

    (the backward alike): the mean layer (:func:`mean_layer`) repriced with the GEMMs at the
    16-bit rate and no quantize kernels (the settings at ``precision="bf16"``); a BF16 layer
    of Megatron's ``--first-last-layers-bf16`` runs outside any FP8 / NVFP4 autocast
    (:mod:`memsym.training.bf16_layers`).  Its kind is the mean layer's (the kinds spread
    evenly over the layers, as :func:`mean_layer` assumes).

    Parameters
    ----------
    x : memsym.timing.gemm.Shape
        The model's shape.
    st : Settings
        What the step does beyond the layout (``bf16_layers``).
    dev : GPU
        The GPU.
    clu : Cluster
        The interconnect.
    knobs : tuple of array_like
        ``(t, c, e, t_e, b, d)``: as :func:`mean_layer` takes them [GPUs], b [sequences].
    lf, lb : dict
        The run's mean layer's forward and backward parts [s].
    eta_gemm : float or None
        A fixed achieved GEMM efficiency in (0, 1] [1] (None: the efficiency curve).
    overlap : Overlap
        Which communication hides behind compute.

    Examples
    --------
    >>> from memsym.hardware import cluster_for, gpu; from memsym.model import preset
    >>> from memsym.timing.gemm import shape_of
    >>> dev, one = gpu("h100"), np.array(1.0)
    >>> x, st = shape_of(preset("llama3-8b")), Settings(seq_length=4096, precision="fp8")
    >>> lf, lb, *_ = mean_layer(x, st, dev, cluster_for(dev.name), *(one,) * 6, eta_gemm=0.5,
    ...                         overlap=Overlap())
    >>> bf16_layer_excess(x, st, dev, cluster_for(dev.name), (one,) * 6, lf, lb, eta_gemm=0.5,
    ...                   overlap=Overlap())
    (0.0, 0.0)

    References
    ----------
    megatron-core: fp8_utils.py:711-728, 836-850; transformer_block.py:685-697 at d98e8a64dd.
    """
    if st.precision not in ("fp8", "fp4") or not any(st.bf16_layers):
        return 0.0, 0.0
    bf16 = dataclasses.replace(st, precision="bf16", fp8_recipe=None, fp8_param_gather=False,
                               fp4_param_gather=False, bf16_layers=(0, 0))
    f16, b16, *_ = mean_layer(x, bf16, dev, clu, *knobs, eta_gemm=eta_gemm, overlap=overlap)
    return (sum(f16.values()) - sum(lf.values()), sum(b16.values()) - sum(lb.values()))


def layer_parts(lf: dict, lb: dict, per_stage_mb, ep_once=0.0, mtp=None) -> dict:
    r"""The step's parts spent in the busiest stage's layers [s].

    .. math:: t_{part} = m\,(L_{max} - N_{MTP})\,(t^{fwd}_{part} + t^{bwd}_{part})
        + m\,N_{MTP}\,(t^{fwd}_{MTP,part} + t^{bwd}_{MTP,part})

    ``compute`` (GEMMs and the attention core), ``memory`` (memory-bound work) and the
    exposed ``tp``, ``ep`` (plus ``ep_once``, the all-to-alls exposed once per step) and
    ``cp`` communication; the stage's MTP layers :math:`N_{MTP}` at their own parts (the
    last layer's kind, or a hybrid's MTP pattern's layers, at the MTP block's precision), as
    the step's total prices them.

    Parameters
    ----------
    lf, lb : dict
        The mean layer's forward and backward parts [s] (:func:`mean_layer`).
    per_stage_mb : array_like
        Layer passes of the busiest stage in one step, m L_max [layers].
    ep_once : array_like
        All-to-all seconds exposed once per step [s].
    mtp : tuple, optional
        ``(mf, mb, n)``: an MTP layer's forward and backward parts [s]
        (:func:`mean_layer`) and the MTP layer passes among ``per_stage_mb``, m N_MTP
        [layers].

    Examples
    --------
    8 micro-batches of 4 layers, each 1 ms of GEMMs forward and 2 ms backward: 32 x 3 ms.

    >>> parts = dict(gemm=1e-3, attention=0.0, memory=0.0, tp=0.0, ep=0.0, cp=0.0)
    >>> out = layer_parts(parts, {**parts, "gemm": 2e-3}, 8 * 4)
    >>> round(out["compute"], 6), out["tp"]
    (0.096, 0.0)

    One of the 4 layers an MTP layer of 2 ms forward and 4 ms backward: 24 x 3 + 8 x 6 ms.

    >>> mtp = ({**parts, "gemm": 2e-3}, {**parts, "gemm": 4e-3}, 8 * 1)
    >>> round(layer_parts(parts, {**parts, "gemm": 2e-3}, 8 * 4, mtp=mtp)["compute"], 6)
    0.12

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §2.2 (the slowest stage runs all m micro-batches).
    """
    if mtp is not None:
        mf, mb, n = mtp
        rest, own = layer_parts(lf, lb, per_stage_mb - n, ep_once), layer_parts(mf, mb, n)
        return {k: rest[k] + own[k] for k in rest}
    return {"compute": per_stage_mb * (lf["gemm"] + lb["gemm"] + lf["attention"] + lb["attention"]),
            "memory": per_stage_mb * (lf["memory"] + lb["memory"]),
            "tp": per_stage_mb * (lf["tp"] + lb["tp"]),
            "ep": per_stage_mb * (lf["ep"] + lb["ep"]) + ep_once,
            "cp": per_stage_mb * (lf["cp"] + lb["cp"])}
