r"""The step time: per-stage compute from GEMMs, exposed communication, exact schedule, DP sync.

For each pipeline stage the forward and backward of one micro-batch cost the sum over its
layers of GEMM times (:mod:`.efficiency`), attention, memory-bound operations priced by HBM
bandwidth, and the communication that is not hidden (each overlap a named switch in
:class:`Overlap`).  The pipeline makespan comes from the schedule (:mod:`.schedule`): the
slowest stage runs all ``m`` micro-batches, the fill and drain pass once through the others
(divided by ``v`` chunks), times the exact bubble of Megatron-LM's order.  After the flush
the data-parallel gradient reduce-scatter / all-reduce and the parameter all-gather are
exposed beyond what the last backward / first forward hides, then the optimizer step.

This module composes the step; the parts live where they are owned: one layer's time in
:mod:`.layer`, the stages and the schedule in :mod:`.pipeline`, the data-parallel sync and
the optimizer step in :mod:`.data_parallel` (their public names are re-exported here), what a
job's records set for the step (its overlaps and :class:`Settings`) in :mod:`.step_settings`.

References
----------
.. [megatron-lm] distributed/distributed_data_parallel_config.py (overlap_grad_reduce,
   overlap_param_gather); model_parallel_config.py (tp_comm_overlap, overlap_p2p_comm,
   overlap_moe_expert_parallel_comm); arguments.py (overlap_p2p_comm only with interleaving).
.. [narayanan] arXiv:2104.04473 §2.2, §3.2, §5.1.
.. [korthikanti] arXiv:2205.05198 §4-§6.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import InvalidValueError, choose
from ..hardware import Cluster, cluster_for, gpu as _gpu
from ..term import Source
from . import data_parallel
from .data_parallel import (data_parallel_sync, fsdp_group_collectives, gather_wait_fraction,
                            parameters_per_gpu)
from .expert_casts import EXPERT_QUANTIZE, expert_weight_cast_seconds
from .gemm import layer_gemms, shape_of
from .efficiency import as_array
from .makespan import pipeline_parts
from .interleaved import priced_together
from .mean_layer import bf16_layer_excess, layer_parts, mean_layer
from .records import Overlap, Settings, StepTime
from .step_settings import overlap_of, settings_of
from ..job import canonical
from ..vocabulary import FP8_RECIPES
from ..vocabulary import MOE_DISPATCHERS, RECOMPUTE_MODULES
from ..training import microbatches

__all__ = ["Overlap", "StepTime", "Settings", "step_time", "step_time_grid",
           "step_time_grids", "SOURCES"]

#: Where each part of the breakdown comes from (keys of memsym/references.toml).
SOURCES = {
    "compute": Source("nvidia-gemm-guide", "tile and wave quantisation, math vs memory bound; "
                      "ceiling calibrated per class (docs/time-accuracy.md)"),
    "memory": Source("memsym-derivation", "memory-bound bytes per layer, memsym.timing.gemm."
                     "memory_bytes, at the datasheet HBM bandwidth"),
    "tp": Source("megatron-schedules", "tensor_parallel/layers.py, LinearWithGradAccumulation"
                 "AndAsyncCommunication (async dgrad collectives under the wgrad GEMM)"),
    "ep": Source("gshard", "§2.2 (dispatch and combine all-to-all per MoE layer)"),
    "cp": Source("ring-attention", "§3 (K, V blocks passed around the ring)"),
    "pp": Source("megatron-schedules", "arguments.py: overlap_p2p_comm only with interleaving"),
    "dp": Source("megatron-schedules", "distributed_data_parallel_config.py: overlap_grad_reduce, "
                 "overlap_param_gather"),
    "bubble": Source("megatron-schedules", "schedules.py: get_pp_rank_microbatches, "
                     "get_schedule_table (simulated in memsym.timing.schedule); each chunk's "
                     "layers: transformer_block.py get_num_layers_to_build, "
                     "pipeline_parallel_layer_layout.py (memsym.timing.pipeline.chunk_times)"),
    "optimizer": Source("memsym-derivation", "OPTIMIZER_BYTES per parameter at HBM bandwidth"),
    "collectives": Source("nccl-tests", "doc/PERFORMANCE.md (bus bandwidth factors)"),
}


def step_time_grid(arch, gpu_name, *, t=1, p=1, d=1, c=1, e=1, t_e=None, v=1, b=None, m=1,
                   settings: Settings = Settings(), cluster: Cluster | None = None,
                   overlap: Overlap = Overlap(), eta_gemm=None, first_stage_layers=None,
                   last_stage_layers=None, exact_schedule: bool = False,
                   communication: bool = False, chunk_layers=None, mtp_layers: int = 0) -> dict:
    r"""Step time [s] of many layouts at once: numpy arrays of the knobs broadcast together.

    .. math::

        t_{\text{step}} = m\,\max_r \tau_r + \beta\,\frac{\sum_r \tau_r - \max_r \tau_r}{p - 1}
            + t_{\text{DP, exposed}} + t_{\text{optimizer}},
        \qquad \tau_r = t^{\text{fwd}}_r + t^{\text{bwd}}_r

    :math:`\tau_r`: stage r's forward + backward of one micro-batch (layers, end layers, exposed
    TP/EP/CP/PP); :math:`\beta` the exact bubble in stage units ((p - 1)/v in the closed form).
    Returns a dict of arrays: ``step``; its parts [s] (``compute``, ``memory``, exposed ``tp``,
    ``ep``, ``cp``, ``pp`` of the busiest stage, ``bubble``, ``dp``, ``optimizer``); ``launchable``
    (False where Megatron's interleaving rule refuses the layout, still priced).

    Parameters
    ----------
    arch, gpu_name : memsym.model.Architecture, str or GPU
        The model; the GPU (:mod:`memsym.hardware`).
    t, p, d, c, e, t_e : array_like
        Tensor-, pipeline-, data-, context-, expert- and expert-tensor-parallel (default t)
        sizes [GPUs].
    b : array_like, optional
        Micro-batch size [sequences] (default ``settings.micro_batch_size``).
    v, m : array_like
        Model chunks per pipeline rank and micro-batches per step [1].
    settings, overlap : Settings, Overlap
        What the step does beyond the layout; which communication hides behind compute.
    cluster : Cluster, optional
        The interconnect (default: the GPU's usual cluster).
    eta_gemm : float, optional
        A fixed achieved GEMM efficiency in (0, 1] [1] replacing the efficiency curve.
    first_stage_layers, last_stage_layers : int, optional
        Uneven pipeline: decoder layers on the first / last stage [layers].
    exact_schedule : bool
        The first two terms as the simulated makespan (:func:`.pipeline.simulated_pipeline`).
    communication : bool
        Also return per group ``g`` (tp, ep, cp, pp, dp) ``comm_g_s`` (as issued in one step
        of the busiest stage), ``comm_g_bytes`` (one GPU sends), ``comm_g_intra``.
    chunk_layers : tuple of tuple of int, optional
        One layout's decoder and MTP layers of chunk j of rank r [layers].
    mtp_layers : int
        MTP layers on the output stage [layers]: the last layer's kind and :mod:`.mtp`'s work.

    Examples
    --------
    >>> from memsym.model import preset
    >>> out = step_time_grid(preset("llama3-70b"), "h100", t=[4, 8], p=4, d=[2, 1], v=5,
    ...                      m=[16, 32], settings=Settings(seq_length=4096, precision="fp8"))
    >>> bool(out["step"][1] > out["step"][0])   # TP 8 is slower (seed 001)
    True

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §2.2 (the bubble), §3.2; [megatron-schedules].
    """
    return step_time_grids([dict(arch=arch, gpu_name=gpu_name, t=t, p=p, d=d, c=c, e=e, t_e=t_e,
                                 v=v, b=b, m=m, settings=settings, cluster=cluster,
                                 overlap=overlap, eta_gemm=eta_gemm,
                                 first_stage_layers=first_stage_layers,
                                 last_stage_layers=last_stage_layers,
                                 exact_schedule=exact_schedule, communication=communication,
                                 chunk_layers=chunk_layers, mtp_layers=mtp_layers)])[0]


def step_time_grids(calls: list) -> list:
    """:func:`step_time_grid` of each of several grids, their interleaved schedules priced together.

    A search's (recompute, SP, sharding) groups share their schedules' shapes, and each
    shape's longest path costs about as much for one layout as for all of theirs
    (:func:`memsym.timing.interleaved.priced_together`); each grid's values are the ones it
    gets alone.

    Parameters
    ----------
    calls : list of dict
        :func:`step_time_grid`'s keyword arguments, one dict a grid (sizes [GPUs],
        micro-batches [1], micro-batch size [sequences]).

    Returns
    -------
    list of dict
        Each grid's :func:`step_time_grid` [s].

    Examples
    --------
    >>> from memsym.model import preset
    >>> kw = dict(arch=preset("llama3-70b"), gpu_name="h100", t=8, p=4, v=5, m=[8, 16])
    >>> one, two = step_time_grids([kw, dict(kw, d=2)])
    >>> bool((one["step"] == step_time_grid(**kw)["step"]).all())
    True

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §2.2 (the bubble); [megatron-schedules].
    """
    shared: dict = {}     # the layer prices of grids that differ in the DP sync alone
    return priced_together([_step_time_steps(**kw, shared=shared) for kw in calls])


def _step_time_steps(arch, gpu_name, *, t=1, p=1, d=1, c=1, e=1, t_e=None, v=1, b=None, m=1,
                     settings: Settings = Settings(), cluster: Cluster | None = None,
                     overlap: Overlap = Overlap(), eta_gemm=None, first_stage_layers=None,
                     last_stage_layers=None, exact_schedule: bool = False,
                     communication: bool = False, chunk_layers=None, mtp_layers: int = 0,
                     shared: dict | None = None):
    """:func:`step_time_grid` as a generator of its interleaved schedules' pricing requests
    (:func:`memsym.timing.makespan.pipeline_parts` with ``steps``); ``shared``: the layer
    and pipeline prices of the grids priced beside it (:func:`_shared_entry`)."""
    st, dev = settings, _gpu(gpu_name)
    clu = cluster if cluster is not None else cluster_for(dev.name)
    _check_settings(st, overlap, dev)
    x, b = shape_of(arch), (st.micro_batch_size if b is None else b)
    t, p, d, c, e, v, b, m, t_e_ = _layout_knobs(t, p, d, c, e, v, b, m, t_e)
    # the layer and pipeline prices, shared with the grids beside it that differ in the
    # data-parallel sync alone (_shared_entry)
    entry = _shared_entry(shared, (x, dev, clu, st, overlap, eta_gemm, mtp_layers,
                                   exact_schedule, chunk_layers),
                          (t, p, d, c, e, t_e_, v, b, m, first_stage_layers, last_stage_layers))
    if "layer" not in entry:
        entry["layer"] = _read_only(_layer_prices(x, st, dev, clu, overlap,
                                                  (t, c, e, t_e_, b, d), eta_gemm, mtp_layers))
    lf, lb, raw_layer, ep_alone, mtp, bf_f, bf_b = entry["layer"]
    if "request" in entry or "pp" in entry:
        # priced by the grid that made the entry, ahead of this one in each round of
        # priced_together: its requests asked again (the same durations, priced once by
        # interleaved._remembered), its pipeline taken when it has it.  pipeline_parts asks
        # once (makespan._pipeline_steps' one yield), so one round ends it; the bound says so
        for _ in range(_FOLLOWER_ROUNDS):
            if "pp" in entry:
                break
            yield entry["request"]
        pp = entry["pp"]
    else:
        # (arrays over a search's rows: the excess is zero unless there are BF16 layers)
        n_bf = st.bf16_layers if st.precision in ("fp8", "fp4") and any(st.bf16_layers) \
            else (0, 0)
        pp = yield from _noted(entry, pipeline_parts(
            x, st, dev, clu, overlap, (t, p, d, c, v, b, m), (lf, lb, ep_alone, mtp),
            eta_gemm=eta_gemm, first=first_stage_layers, last=last_stage_layers,
            chunks=chunk_layers, mtp_layers=mtp_layers, exact_schedule=exact_schedule,
            bf16=(*n_bf, bf_f, bf_b), steps=True))
    # data parallel: gradients of this GPU's shard over DP x CP (experts: expert DP)
    dense_gpu, expert_gpu, layers_max, ends_gpu = parameters_per_gpu(x, st, p, t, e, t_e_,
                                                                     pp["stages"])
    sync = data_parallel_sync(st, dev, clu, overlap, dense_gpu, expert_gpu, pp["tau"]["first"],
                              pp["pipeline"], p=p, m=m, t=t, c=c, d=d, e=e, t_e=t_e_,
                              ends_gpu=ends_gpu, muon=(arch, layers_max),
                              gather_wait=gather_wait_fraction(x, e, t_e_, d))
    sync["optimizer"] = sync["optimizer"] + _expert_weight_casts(  # expert weights, once a step
        x, st, dev, (t, c, e, t_e_, b), layers_max)
    step = pp["pipeline"] + pp["edges"] + sync["dp"] + sync["optimizer"]
    per_stage_mb = m * layers_max
    out = {"step": step, "pipeline": pp["pipeline"] + pp["edges"], "bubble": pp["bubble"],
           **layer_parts(lf, lb, per_stage_mb, pp["edges"],
                         (*mtp, m * pp["mtp_busy"]) if mtp_layers else None),
           "pp": m * 2 * pp["p2p_exposed"],
           "dp": sync["dp"], "optimizer": sync["optimizer"], "launchable": pp["launchable"]}
    if communication:
        out.update(data_parallel.communication(
            st, clu, raw_layer, per_stage_mb, m, p, v, t, c, d, e, t_e_, sync["ndp"],
            sync["edp"], st.grad_bytes, dense_gpu, expert_gpu, pp["p2p"], pp["msg"],
            (sync["rs"], sync["ag"], sync["once"], sync["again"]), ends_gpu=ends_gpu))
    return out


#: The fields of :class:`Settings` and :class:`Overlap` that only the data-parallel sync
#: reads (:mod:`.data_parallel`): grids that differ in them alone have the same layer prices.
_DP_SETTINGS = dict(distributed_optimizer=False, gather_per_microbatch=False,
                    reduce_per_microbatch=False, pipelined_fsdp=False, fsdp_groups=())
_DP_OVERLAPS = dict(grad_reduce=False, param_gather=False)


#: The rounds of :func:`memsym.timing.interleaved.priced_together` a grid sharing another's
#: pipeline waits for it: the pipeline asks one exact schedule (one round); a second round
#: would be a bug, and the ``KeyError`` after the bound says so rather than a loop that
#: never ends.
_FOLLOWER_ROUNDS = 2


def _shared_entry(shared: dict | None, inputs: tuple, arrays: tuple) -> dict:
    """The entry of ``shared`` (a dict filled as it goes: ``layer``, :func:`_layer_prices`;
    ``request``, the pipeline's last pricing request; ``pp``, its parts) of the grids priced
    together with these ``inputs`` (model shape, GPU, cluster, settings, overlap, ...) and
    knob ``arrays``, a new one where no grid had them.

    A search prices each (recompute, SP) under every sharding scheme over the same rows, and
    the layer and the pipeline read none of the data-parallel fields (:data:`_DP_SETTINGS`,
    :data:`_DP_OVERLAPS`, read by :mod:`.data_parallel` alone): they are keyed without
    them, the arrays compared value by value, and the grids take the same (read-only)
    arrays.  An input that cannot be a key (a setting given per row) shares nothing."""
    x, dev, clu, st, overlap, *rest = inputs
    try:
        key = (x, dev, clu, dataclasses.replace(st, **_DP_SETTINGS),
               dataclasses.replace(overlap, **_DP_OVERLAPS), *rest,
               tuple(None if a is None else np.shape(a) for a in arrays))
        hash(key)
    except (TypeError, AttributeError, ValueError):
        return {}
    met = [] if shared is None else shared.setdefault(key, [])
    for seen, entry in met:
        if all(u is w or (u is not None and w is not None and np.array_equal(u, w))
               for u, w in zip(seen, arrays)):
            return entry
    met.append((arrays, {}))
    return met[-1][1]


def _noted(entry: dict, steps):
    """``yield from steps`` with each request it yields and the value it returns kept in
    ``entry`` (:func:`_shared_entry`) for the grids that share it."""
    sent = None
    while True:
        try:
            entry["request"] = steps.send(sent)
        except StopIteration as done:
            entry["pp"] = _read_only(done.value)
            return entry["pp"]
        sent = yield entry["request"]


def _read_only(value):
    """``value`` with every numpy array in it (through dicts, tuples and lists) made read-only:
    the grids that share an entry (:func:`_shared_entry`) read the same arrays, so an in-place
    change by one would move another's step time; it raises instead."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, dict):
        for item in value.values():
            _read_only(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _read_only(item)
    return value


def _layer_prices(x, st, dev, clu, overlap, knobs: tuple, eta_gemm, mtp_layers: int) -> tuple:
    """``(lf, lb, raw, ep_alone, mtp, bf_f, bf_b)``: the mean layer
    (:func:`.mean_layer.mean_layer`) and the BF16 first / last layers' excess over it
    (Megatron's ``Settings.bf16_layers``: the first stage's and the last's, each what a
    16-bit layer takes beyond the mean one; p = 1: both on the one) [s]."""
    t, c, e, t_e, b, d = knobs
    lf, lb, raw, alone, mtp = mean_layer(x, st, dev, clu, t, c, e, t_e, b, d, eta_gemm=eta_gemm,
                                         overlap=overlap, mtp_layers=mtp_layers)
    bf = bf16_layer_excess(x, st, dev, clu, knobs, lf, lb, eta_gemm=eta_gemm, overlap=overlap)
    return (lf, lb, raw, alone, mtp, *bf)


def _expert_weight_casts(x, st, dev, knobs, layers_max):
    """Seconds of one step's MXFP8 casts of the busiest rank's local expert weights, on the
    first micro-batch or by the FP8 parameters' refresh after the update
    (:func:`.expert_casts.expert_weight_cast_seconds` per MoE layer, its share of the rank's
    layers); zero but under MXFP8 on a MoE model."""
    if not (x.E and st.precision == "fp8" and st.fp8_recipe == "mxfp8"):
        return 0.0
    t, c, e, t_e, b = knobs
    gemms = layer_gemms(x, st.seq_length, b, t, c, e, t_e, moe=True)
    return (layers_max * x.L_moe / x.L
            * expert_weight_cast_seconds(gemms, dev, st.expert_quantize))


def _check_settings(st, overlap, dev) -> None:
    """Refuse settings and overlaps the step cannot price on ``dev``, one line each, in a
    fixed order."""
    if not isinstance(st, Settings):
        raise InvalidValueError(f"settings must be a Settings, got {type(st).__name__}")
    if not isinstance(overlap, Overlap) or not all(
            isinstance(getattr(overlap, k), bool) for k in Overlap.__dataclass_fields__):
        raise InvalidValueError("overlap must be an Overlap whose switches are true or false")
    for what in ("seq_length", "micro_batch_size"):
        val = getattr(st, what)
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or not 1 <= val <= 10**8:
            raise InvalidValueError(f"{what} must be a whole number in 1..1e8, got {val!r:.40}")
    if st.grad_bytes not in (1, 2, 4):
        raise InvalidValueError(f"grad_bytes must be 1, 2 or 4, got {st.grad_bytes!r:.40}")
    choose("precision", st.precision, ("bf16", "fp16", "fp8", "fp32", "fp4"))
    if st.fp8_recipe is not None:
        choose("FP8 recipe", st.fp8_recipe, FP8_RECIPES)
        if st.precision != "fp8":
            raise InvalidValueError(f"fp8_recipe {st.fp8_recipe} needs precision fp8, "
                                    f"not {st.precision}")
    if st.fp8_param_gather and st.precision != "fp8" or st.fp4_param_gather and st.precision != "fp4":
        raise InvalidValueError(f"fp8_param_gather needs precision fp8 and fp4_param_gather "
                                f"precision fp4, not {st.precision}")
    if st.precision == "fp4":
        dev.peak("fp4")     # NVFP4 GEMMs need the FP4 peak the vendor prints (refused else)
    if st.fp8_recipe == "mxfp8" and dev.arch_class not in ("blackwell", "blackwell-ultra"):
        # transformer_engine/pytorch/quantization.py, _compute_mxfp8_support
        raise InvalidValueError(f"MXFP8 needs compute capability 10.0 or higher (Blackwell): "
                                f"{dev.name} is {dev.arch_class}, where Transformer Engine refuses it")
    choose("recompute", st.recompute, ("none", "selective", "full", "selective-op"))
    if isinstance(st.recompute_modules, str):
        raise InvalidValueError("recompute_modules must be a tuple of module names, got a string")
    for mod in st.recompute_modules:
        choose("recompute module", mod, RECOMPUTE_MODULES)
    choose("pipeline schedule", st.schedule, ("1f1b", "gpipe"))
    choose("MoE dispatcher", st.moe_dispatcher, MOE_DISPATCHERS)
    choose("expert quantize path", st.expert_quantize, EXPERT_QUANTIZE)


def _layout_knobs(t, p, d, c, e, v, b, m, t_e) -> tuple:
    """The layout knobs broadcast together as float arrays (t_e defaulting to t), each a
    whole number in 1..1e7, at most 10,000,000 layouts."""
    t, p, d, c, e, v, b, m = np.broadcast_arrays(*(as_array(q) for q in (t, p, d, c, e, v, b, m)))
    t_e_ = t if t_e is None else np.broadcast_to(as_array(t_e), t.shape)
    # each knob checked as it is (no stacked copy of a search's rows): NaN fails both
    # comparisons of its minimum, an infinite one the maximum's
    if not all(q.size == 0 or (q.min() >= 1 and q.max() <= 10**7
                               and np.array_equal(q, np.floor(q)))
               for q in (t, p, d, c, e, v, b, m)):
        raise InvalidValueError("every layout knob (t, p, d, c, e, v, b, m) must be a whole "
                                "number in 1..1e7")
    if t.size > 10_000_000:
        raise InvalidValueError(f"{t.size} layouts exceed the 10,000,000 a grid may hold")
    return t, p, d, c, e, v, b, m, t_e_


def step_time(arch, layout, training, gpu_name, cluster: Cluster | None = None, *,
              overlap: Overlap | None = None, eta_gemm=None, flops_per_token=None,
              m: int | None = None) -> StepTime:
    r"""Step time of one layout [s], with a breakdown (memsym Layout and Training records).

    :func:`step_time_grid` of one layout, m from ``training``'s ``num_microbatches`` or
    ``global_batch_size``.

    Parameters
    ----------
    arch : memsym.model.Architecture
        The model.
    layout : memsym.training.Layout
        The parallel layout.
    training : memsym.training.Training
        The training step (gives s, b and m).
    gpu_name : str or GPU
        The GPU (:mod:`memsym.hardware`).
    cluster : Cluster, optional
        The interconnect (default: the GPU's usual cluster).
    overlap : Overlap, optional
        Which communication hides behind compute (default: the job's,
        :func:`memsym.timing.step_settings.overlap_of`).
    eta_gemm : float, optional
        A fixed achieved GEMM efficiency in (0, 1] [1] replacing the efficiency curve.
    flops_per_token : float, optional
        Model FLOPs per token [FLOP/token] (adds the MFU).
    m : int, optional
        Micro-batches per step and pipeline [1]: a :class:`memsym.job.Job`'s ``m`` (computed
        once when the job was built); default from ``training`` (:func:`memsym.job.microbatches`).

    Returns
    -------
    StepTime
        The step [s], its parts [s], the bubble [s] and the MFU [1].

    Examples
    --------
    >>> from memsym.model import preset
    >>> from memsym.training import Layout, Training
    >>> st = step_time(preset("llama3-8b"), Layout(t=2, d=4, sequence_parallel=True),
    ...                Training(seq_length=4096, global_batch_size=32, flash_attention=True,
    ...                         dropout=False), "h100")
    >>> st.bubble, st.assumptions["microbatches"]      # no pipeline: no bubble; m = 32/4
    (0.0, 8)
    >>> sorted(st.parts)[:4]
    ['bubble', 'compute', 'cp', 'dp']

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §2.2, §3.2, §5.1.
    """
    training = canonical(training)        # "GPipe" is GPipe here too
    # a Job's m (Job.m, computed once when it was built), else from the batch sizes
    mm = microbatches(layout, training) if m is None else m
    if mm is None:
        raise InvalidValueError("give num_microbatches or global_batch_size to price a step")
    if overlap is None:
        overlap = overlap_of(training)
    st = settings_of(arch, layout, training)
    pl = getattr(layout, "pipeline_layout", None)
    # a custom layout (--pipeline-model-parallel-layout, the account-for switches): each
    # chunk's own layers, an MTP layer as one more; else Megatron's first/last sizes, every
    # chunk of a rank equal, the MTP layers on the last stage
    chunks = tuple(pl.chunk_timed_layers(r) for r in range(layout.p)) \
        if pl is not None and layout.p > 1 else None
    out = step_time_grid(arch, gpu_name, t=layout.t, p=layout.p, d=layout.d, c=layout.c,
                         e=layout.e, t_e=layout.t_e, v=layout.v or 1, m=mm, settings=st,
                         cluster=cluster, overlap=overlap, eta_gemm=eta_gemm,
                         first_stage_layers=layout.first_stage_layers,
                         last_stage_layers=layout.last_stage_layers,
                         exact_schedule=True, communication=True, chunk_layers=chunks,
                         mtp_layers=getattr(arch, "mtp_num_layers", 0) or 0)

    def first_of(key):
        return np.asarray(out[key]).ravel()[0]

    parts = {k: float(first_of(k)) for k in out if k != "launchable" and not k.startswith("comm_")}
    comm = _communication_of(first_of, parts)
    if st.fsdp_groups:        # each collective the groups issue, with its count
        comm["dp"]["collectives"] = fsdp_group_collectives(st, mm)
    total = parts.pop("step")
    mfu = None
    if flops_per_token is not None:
        tokens = mm * training.batch.micro_batch_size * layout.d * training.batch.seq_length
        mfu = 3 * flops_per_token * tokens / (layout.world_size * total * _gpu(gpu_name).peak(
            training.states.autocast or training.states.precision))
    return StepTime(total, parts, parts["bubble"], mfu,
                    {"overlap": overlap, "eta_gemm": eta_gemm, "microbatches": mm,
                     "sources": SOURCES, "settings": st,
                     "launchable": bool(np.asarray(out["launchable"]).ravel()[0])}, comm)


def _communication_of(first_of, parts: dict) -> dict:
    """Each group's collectives in one step, as issued and exposed, and the link it crosses
    (:attr:`memsym.timing.records.StepTime.communication`)."""
    # bytes: whole bytes (sums of element counts x widths; rounding drops float residue)
    return {g: {"bytes": int(round(float(first_of(f"comm_{g}_bytes")))),
                "seconds": float(first_of(f"comm_{g}_s")), "exposed_seconds": parts[g],
                "link": "intra" if bool(first_of(f"comm_{g}_intra")) else "inter"}
            for g in ("tp", "cp", "pp", "dp", "ep")}
