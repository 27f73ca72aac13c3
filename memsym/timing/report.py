r"""The step report: communication, bubble, FLOPs, step time and MFU of one configuration,
as plain numbers (what ``memsym estimate --gpu`` and ``memsym time`` print).

It composes the closed forms of :mod:`memsym.terms.compute` and
:mod:`memsym.terms.communication` on a cluster (:mod:`memsym.hardware`) and, given the job's
architecture, layout and training, the predicted step time of :func:`memsym.timing.step.step_time`.
"""

from __future__ import annotations

import sympy as sp

from .. import hardware
from ..errors import InvalidValueError, choose
from ..job import microbatches
from ..numeric import finite_float
from ..symbols import F, eta
from ..terms.communication import (LAYOUT_ORDER, communication_per_step, communication_time,
                                   layout_warnings, placement)
from ..terms.compute import DEFAULT_EFFICIENCY, bubble_fraction, flops_per_iteration, step_time
from ..terms.model_state import byte_widths
from ..terms.pipeline_order import bubble_fraction as schedule_bubble
from ..values import as_expr, as_values, positive
from .gemm import shape_of
from .model_counts import forward_flops_per_token
from .step import step_time as predicted_step

__all__ = ["step_report"]


def _num(x, what: str = "result", inputs=None):
    """An exact result as a plain number: ints exactly, others as finite floats (a result
    past float range is refused naming the extreme inputs, never returned as ``inf``)."""
    x = as_expr(x)
    if x.is_Integer:
        return int(x)
    return finite_float(x, what, inputs)


def step_report(values: dict, *, cluster=None, gpu=None, precision: str = "bf16",
                sharding: str | None = "distributed-optimizer", recompute: str = "none",
                sequence_parallel: bool = False, context: str | None = None,
                expert: bool = False, interleaved: bool = False, scatter_gather: bool = False,
                overlap: str = "none", efficiency=None, formula: str = "memsym",
                gpus_per_node=None, intra_node_bandwidth=None, inter_node_bandwidth=None,
                dp_params=None, arch=None, layout=None, training=None,
                mfu_flops: str = "gemm", pipelined_fsdp: bool = False, m=None) -> dict:
    """Communication, bubble, FLOPs, step time and MFU of one configuration, as plain numbers.

    Parameters
    ----------
    values : dict
        Registry names to numbers: the model (``N``, ``s``, ``h``, ``L``, ``V``; ``g``,
        ``d_h`` for CP; ``k``, ``L_m`` for EP), the layout (``t``, ``p``, ``d``, ``c``,
        ``e``, ``v``), ``b`` and ``m``; optional ``b_c`` (default 2), ``b_g`` / ``b_hp``
        (default from the sharding's byte widths), ``eta``, ``omega``.
    cluster, gpu : str or Cluster, str or GPU, optional
        A cluster preset (:func:`memsym.hardware.cluster`), or a GPU to build one around.
    gpus_per_node : int, optional
        GPUs of one node [GPUs] (default the cluster's, 8 around ``gpu``).
    intra_node_bandwidth, inter_node_bandwidth : float, optional
        Each link's bandwidth per direction [B/s] (default the cluster's).
    precision : {"bf16", "fp16", "fp8", "fp32", "fp4"}
        Byte widths (:func:`memsym.terms.model_state.byte_widths`) and the peak (fp32: the
        TF32 tensor-core peak, which ``assumptions["peak_note"]`` says).
    sharding : str or None
        The data-parallel scheme (:data:`memsym.terms.model_state.SCHEMES`); None: no DP.
    recompute, overlap, formula : str
        The closed forms' options: {"none", "selective", "full"}, {"none", "full",
        "fraction"}, {"memsym", "korthikanti", "6n"} (:func:`step_time`).
    context : {"ring", "all-gather", "ulysses"} or None
        The CP variant (default ring where c > 1).
    sequence_parallel, expert, interleaved, scatter_gather, pipelined_fsdp : bool
        Megatron SP; the EP term (also where e > 1); the interleaved schedule; Narayanan's
        scatter/gather PP sends; FSDP2 under ``torch.distributed.pipelining`` (one
        all-gather and reduce-scatter per step) (:func:`memsym.terms.communication.
        communication_per_step`).
    efficiency : float, optional
        :math:`\\eta` [1]; default ``values["eta"]`` or :data:`DEFAULT_EFFICIENCY` (1/2); with
        ``arch`` the achieved-GEMM-efficiency override (None: :mod:`memsym.timing.efficiency`).
    dp_params : int, optional
        Parameters whose gradients the DP group reduces, before the :math:`p\\,t` split
        [parameters] (default ``values["N"]``, which prices the FLOPs: for a mixture of
        experts pass the total, Mixtral 8x7B 46.7e9 against 12.9e9 active).
    arch, layout, training : optional
        A resolved architecture, :class:`memsym.training.Layout` and
        :class:`memsym.training.Training`: the step time, bubble and MFU then come from
        :func:`memsym.timing.step.step_time` (breakdown in ``step_time_parts_s``; its
        ``communication``: bytes, seconds before overlap, ``exposed_seconds``, link);
        without them, the closed forms :func:`step_time` and :mod:`memsym.terms.communication`.
    mfu_flops : {"gemm", "6n"}
        The MFU numerator with ``arch``: the GEMM shapes' and causal attention's FLOPs
        (:func:`memsym.timing.model_counts.forward_flops_per_token` x 3) or 6N per token.
    m : int, optional
        Micro-batches per step and pipeline [1] with ``arch`` (default: from ``training``).

    Returns
    -------
    dict
        JSON-ready: ``communication`` {group: {"bytes", "seconds", "link"}}, ``bubble``,
        ``flops`` {"model", "hardware"} per iteration, ``step_time_s``, ``mfu``, ``hfu``,
        ``global_batch``, ``tokens_per_step``, ``warnings``, ``assumptions``.

    Examples
    --------
    >>> rep = step_report({"N": 7 * 10**9, "s": 4096, "b": 1, "h": 4096, "L": 32, "V": 32000,
    ...                    "t": 8, "p": 1, "d": 1, "m": 1}, cluster="dgx-h100", sharding=None)
    >>> rep["communication"]["tp"]["bytes"], rep["communication"]["tp"]["link"]
    (7516192768, 'intra')
    >>> round(rep["communication"]["tp"]["seconds"] * 1000, 2)  # 7.5 GB at 450 GB/s each way
    16.7
    >>> rep["assumptions"]["layout_order"]
    'tp, cp, pp, dp'

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §5.1 (model FLOPs and MFU).
    """
    return _report(**locals())     # every argument as given


def _report(values: dict, *, cluster, gpu, precision, sharding, recompute, sequence_parallel,
            context, expert, interleaved, scatter_gather, overlap, efficiency, formula,
            gpus_per_node, intra_node_bandwidth, inter_node_bandwidth, dp_params, arch, layout,
            training, mfu_flops, pipelined_fsdp, m) -> dict:
    """:func:`step_report`'s work, its keywords all given."""
    vals, clu, precision_key = _inputs(values, precision, sharding, cluster, gpu, efficiency,
                                       gpus_per_node, intra_node_bandwidth, inter_node_bandwidth)
    context, expert = _parallel_kinds(vals, context, expert)
    gpus_total, batch = _totals(vals)
    pipe = int(vals["p"]) > 1
    opts = dict(sequence_parallel=sequence_parallel, pipeline=pipe, scatter_gather=scatter_gather,
                interleaved=interleaved, sharding=sharding, context=context, expert=expert,
                recompute=recompute, dp_params=dp_params, pipelined_fsdp=pipelined_fsdp)
    ctx = dict(_closed_forms(vals, clu, opts, gpus_total, overlap=overlap, formula=formula),
               vals=vals, batch=batch, gpus_total=gpus_total)
    given = {k.name: v for k, v in ctx["exact_vals"].items()}

    def num(x, what):
        return _num(x, what, given)

    if arch is not None:
        return _predicted_report(ctx, arch, layout, training, clu, efficiency, mfu_flops, m)
    return _closed_form_report(ctx, clu, num, precision_key, overlap=overlap, recompute=recompute)


def _inputs(values: dict, precision, sharding, cluster, gpu, efficiency, gpus_per_node,
            intra_node_bandwidth, inter_node_bandwidth) -> tuple:
    """The values with every default filled in (layout sizes 1, the sharding's byte widths,
    the cluster's figures, the efficiency), the cluster and the precision's canonical name."""
    vals = dict(values)
    precision_key = choose("precision", precision, hardware.PRECISIONS)
    defaults = {"t": 1, "p": 1, "d": 1, "c": 1, "e": 1, "v": 1, "m": 1, "b": 1, "b_c": 2}
    for key, val in defaults.items():
        vals.setdefault(key, val)
    if sharding is not None:
        widths = byte_widths(sharding, precision, convention="seed000")  # unknown precision refused there
        for sym, width in widths.items():
            vals.setdefault(sym.name, width)
    clu = _cluster_of(cluster, gpu, gpus_per_node, intra_node_bandwidth, inter_node_bandwidth)
    for key, val in clu.values(precision).items():
        vals.setdefault(key, val)
    eff = efficiency if efficiency is not None else vals.get("eta", DEFAULT_EFFICIENCY)
    vals["eta"] = positive(eff, "efficiency")
    if vals["eta"] > 1:
        raise InvalidValueError(f"efficiency must be in (0, 1], got {vals['eta']}")
    return vals, clu, precision_key


def _cluster_of(cluster, gpu, gpus_per_node, intra_node_bandwidth, inter_node_bandwidth):
    """The cluster preset, or one built around ``gpu``, with the given node size and
    bandwidths."""
    if cluster is not None:
        clu = hardware.cluster(cluster)
    else:
        dev = hardware.gpu(gpu) if gpu is not None else None
        if dev is None:
            raise InvalidValueError("step_report needs a cluster (e.g. dgx-h100) or a gpu")
        clu = hardware.cluster_for(dev, gpus_per_node or 8, intra_node_bandwidth, inter_node_bandwidth)
    changes = {}
    if gpus_per_node is not None:
        changes["gpus_per_node"] = int(gpus_per_node)
    if intra_node_bandwidth is not None:
        changes["intra_node_bandwidth"] = intra_node_bandwidth
    if inter_node_bandwidth is not None:
        changes["inter_node_bandwidth"] = inter_node_bandwidth
    if changes:
        clu = clu.with_(**changes)
    return clu


def _parallel_kinds(vals: dict, context, expert) -> tuple:
    """The CP method (ring when c > 1 and none given) and whether experts are parallel."""
    if context is None and int(vals["c"]) > 1:
        context = "ring"
    expert = expert or int(vals["e"]) > 1
    if expert:
        vals.setdefault("L_m", vals.get("L"))
    return context, expert


def _totals(vals: dict) -> tuple:
    """GPUs G = t p c d and the global batch B = b m d [sequences], each the default of its
    value."""
    gpus_total = int(vals["t"]) * int(vals["p"]) * int(vals["c"]) * int(vals["d"])
    batch = int(vals["b"]) * int(vals["m"]) * int(vals["d"])
    vals.setdefault("G", gpus_total)
    vals.setdefault("B", batch)
    return gpus_total, batch


def _closed_forms(vals: dict, clu, opts: dict, gpus_total: int, *, overlap, formula) -> dict:
    """The closed forms of the communication, the step and the FLOPs, evaluated exactly at
    ``vals``, with the links each group crosses."""
    links = placement(vals, clu.domain)
    byte_total = communication_per_step(**opts)
    time_total = communication_time(placement_map=links, **opts)
    recompute, pipe = opts["recompute"], opts["pipeline"]
    step = step_time(recompute=recompute, communication=time_total, overlap=overlap,
                     interleaved=opts["interleaved"], pipeline=pipe, formula=formula)
    needed = (byte_total.free_symbols | step.free_symbols)
    exact_vals = as_values({k: v for k, v in vals.items()
                            if any(sym.name == getattr(k, "name", k) for sym in needed)})
    return {
        "links": links, "byte_total": byte_total, "exact_vals": exact_vals,
        "bytes_bd": byte_total.breakdown(exact_vals), "secs_bd": time_total.breakdown(exact_vals),
        "t_step": step.evaluate(exact_vals),
        "model": flops_per_iteration("model", "none", formula).evaluate(exact_vals),
        "hardware_flops": flops_per_iteration("hardware", recompute, formula).evaluate(exact_vals),
        "peak": exact_vals[F] * gpus_total,
        "bubble": (bubble_fraction(opts["interleaved"]).xreplace(exact_vals) if pipe
                   else sp.Integer(0)),
    }


def _closed_form_report(ctx: dict, clu, num, precision_key: str, *, overlap, recompute) -> dict:
    """:func:`step_report` from the closed forms alone (no architecture given)."""
    vals, exact_vals, links = ctx["vals"], ctx["exact_vals"], ctx["links"]
    bytes_bd, secs_bd, t_step, peak = ctx["bytes_bd"], ctx["secs_bd"], ctx["t_step"], ctx["peak"]
    model, hardware_flops, batch = ctx["model"], ctx["hardware_flops"], ctx["batch"]
    return {
        "communication": {key: {"bytes": num(bytes_bd[key], f"{key} bytes"),
                                "seconds": num(secs_bd[key], f"{key} time [s]"),
                                "link": links[key]} for key in ctx["byte_total"].keys},
        "bubble": num(ctx["bubble"], "bubble"),
        "flops": {"model": num(model, "model FLOPs"), "hardware": num(hardware_flops, "hardware FLOPs")},
        "step_time_s": num(t_step, "step time [s]"),
        "mfu": num(model / (peak * t_step), "MFU"),
        "hfu": num(hardware_flops / (peak * t_step), "HFU"),
        "global_batch": batch,
        "tokens_per_step": batch * int(vals["s"]),
        "gpus": ctx["gpus_total"],
        "warnings": layout_warnings(vals, clu.domain),
        "assumptions": {
            "cluster": clu.name, "gpu": clu.gpu.name, "precision": precision_key,
            "peak_flops_per_gpu": _num(exact_vals[F]), "efficiency": _num(exact_vals[eta]),
            "gpus_per_node": clu.gpus_per_node,
            "intra_node_bandwidth_bytes_per_s": _num(clu.intra_node_bandwidth),
            "inter_node_bandwidth_bytes_per_s": _num(clu.inter_node_bandwidth),
            "overlap": overlap, "recompute": recompute, "layout_order": ", ".join(LAYOUT_ORDER),
            "bandwidth_convention": "per direction (NVLink: half the vendor figure; NIC per port)",
            **({"peak_note": hardware.FP32_PEAK_NOTE} if precision_key == "fp32" else {}),
        },
    }


def _predicted_report(ctx: dict, arch, layout, training, clu, efficiency, mfu_flops,
                      m=None) -> dict:
    """:func:`step_report` with the step time of :func:`memsym.timing.step.step_time` (exact
    schedule) and the MFU on GEMM-count (or 6N) model FLOPs."""
    kind = choose("MFU FLOP count", mfu_flops, ("gemm", "6n"))
    m = microbatches(layout, training) if m is None else m    # a Job's m when given
    if m is None:     # one micro-batch per step when none given
        training, m = training.replace(num_microbatches=1, global_batch_size=None), 1
    eta_gemm = None if efficiency is None else float(positive(efficiency, "efficiency"))
    st = predicted_step(arch, layout, training, clu.gpu.name, clu, eta_gemm=eta_gemm, m=m)
    batch, gpus_total = ctx["batch"], ctx["gpus_total"]
    s_ = training.batch.seq_length
    peak = float(clu.gpu.peak(training.states.autocast or training.states.precision)) * gpus_total
    six_n = float(ctx["model"])
    gemm = 3.0 * forward_flops_per_token(shape_of(arch), s_, causal=True) * batch * s_
    model = gemm if kind == "gemm" else six_n
    # hardware FLOPs: full recomputation runs every forward twice (4 passes, not 3);
    # selective recomputes attention's core only (priced in the step, not counted here)
    hardware_ = model * (sp.Rational(4, 3) if training.memory.recompute == "full" else 1)
    busy = st.parts["pipeline"] - st.bubble
    # one communication model: the groups' bytes, seconds and links are the step time's own
    # (memsym.timing.step.StepTime.communication: the same collectives, gradient bytes,
    # bandwidths and NVLink domain), not the closed forms of memsym.terms.communication
    return {
        "communication": {key: dict(st.communication[key]) for key in ctx["byte_total"].keys},
        # the schedule's idle fraction on uniform stages (Megatron's order simulated: (p-1)/m
        # for 1F1B, (p-1)/(v m) interleaved where that holds); its seconds with the real
        # stage times (embedding, output layer, uneven ends) are step_time_parts_s["bubble"]
        "bubble": float(schedule_bubble(
            "gpipe" if training.pipeline.schedule == "gpipe" else "1f1b", layout.p,
            st.assumptions["microbatches"], layout.v or 1,
            backward_ratio=3 if training.memory.recompute == "full" else 2)),
        "bubble_of_busy_time": float(st.bubble / busy) if busy > 0 else 0.0,
        "flops": {"model": float(model), "hardware": float(hardware_), "model_6n": six_n,
                  "model_gemm": float(gemm)},
        "step_time_s": float(st.total),
        "step_time_parts_s": {k: float(v) for k, v in st.parts.items()},
        "mfu": float(model / (peak * st.total)),
        "hfu": float(hardware_ / (peak * st.total)),
        "global_batch": batch,
        "tokens_per_step": batch * int(s_),
        "gpus": gpus_total,
        "warnings": layout_warnings(ctx["vals"], clu.domain),
        "assumptions": {
            "cluster": clu.name, "gpu": clu.gpu.name,
            # the matmuls' precision (autocast's over fp32 weights)
            "precision": training.states.autocast or training.states.precision,
            "peak_flops_per_gpu": peak / gpus_total,
            "efficiency": None if eta_gemm is None else eta_gemm,
            "step_model": "memsym.timing.step.step_time: GEMM shapes on the efficiency curve, "
                          "collectives with overlap, exact pipeline schedule",
            "mfu_flops": kind, "microbatches": st.assumptions["microbatches"],
            "overlap": {k: getattr(st.assumptions["overlap"], k)
                        for k in st.assumptions["overlap"].__dataclass_fields__},
            "gpus_per_node": clu.gpus_per_node,
            "intra_node_bandwidth_bytes_per_s": float(clu.intra_node_bandwidth),
            "inter_node_bandwidth_bytes_per_s": float(clu.inter_node_bandwidth),
            "recompute": training.memory.recompute,
            "launchable": st.assumptions["launchable"],
        },
    }
