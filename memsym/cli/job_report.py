"""The report of one job: its JSON-ready numbers (memory per term and stage, the metric, the
sources, communication and time on a cluster, advice and sensitivity), built for ``estimate``
from a validated :class:`memsym.job.Job`.
"""

from __future__ import annotations

from ..errors import StepTimeNotModelledError
from ..frameworks import FRAMEWORK
from ..vocabulary import CONVENTION_NAMES
from .options import number_out

__all__ = ["report_for", "metric_report", "sensitivity_report", "sensitivity_rows",
           "advice_report", "communication_report", "cluster_known", "node_size", "PRICING",
           "defaults_rows", "LAYER_WISE"]


def _num(value) -> int:
    return number_out(value, round_up=True)


def report_for(args, j) -> dict:
    """The report of one validated :class:`memsym.job.Job`, evaluated on every stage; with
    cluster options, communication and time too."""
    from ..model import parameter_count
    from ..text import printable
    from ..training import job_memory

    arch, layout, training = j.model, j.layout, j.training

    def priced() -> dict:
        # the same block whatever the memory convention: communication does not depend on it
        if not cluster_known(args):
            return {}
        try:
            return communication_report(args, j)
        except StepTimeNotModelledError:
            if any(getattr(args, dest, None) is not None for _, dest in PRICING):
                raise      # a time asked for by its own options: refused, as memsym time does
            # --gpu alone also gives the capacity: the memory and the fit, as search ranks
            # such a model by headroom (memsym.search.results), with one note
            return {"notes": [f"step time not modelled for {printable(arch.name)}: memory and "
                              "fit only"]}

    common = {
        "model": printable(arch.name),
        "layout": {"dp": layout.d, "tp": layout.t, "pp": layout.p, "cp": layout.c,
                   "ep": layout.e, "etp": layout.expert_tp, "vpp": layout.v,
                   "sequence_parallel": layout.sequence_parallel,
                   "world_size": layout.world_size},
        "training": _training_fields(j),
        "convention": args.convention,
        # every default the job applied because it was not given, and where it comes from
        "defaults": defaults_rows(j.defaults, j.training.states),
        "units": "bytes",
    }
    if args.convention in CONVENTION_NAMES:
        from ..conventions import convention_breakdown

        pad = {"should_pad_vocab": True} if getattr(args, "should_pad_vocab", False) and \
            args.convention == "megatron-bridge" else {}
        out = convention_breakdown(args.convention, arch, layout, training, **pad)
        byt = dict(out["bytes"])
        return {**common, "bytes": byt, "stage": {"index": 0, "role": "first",
                "note": "the framework assumes pipeline stage 0 is the most loaded"},
                "path": out["path"], "assumptions": out["assumptions"],
                "params": int(parameter_count(arch)), **priced(), "_total": byt["total"]}
    est = job_memory(j)
    extra = priced()
    untimed = extra.pop("notes", [])
    grouped = est.grouped()
    byt = {key: _num(val) for key, val in grouped.items()}
    byt["total"] = sum(v_ for k_, v_ in byt.items() if k_ != "total")
    return {**common, "bytes": byt,
            "stage": {"index": est.stage, "role": est.role,
                      "stage_totals": [_num(x) for x in est.stage_bytes]},
            "activation_bytes": {k_: _num(v_) for k_, v_ in est.activations().items()},
            # the peak over the step's phases, and the states that exist only in the step
            "phases": {"peak": est.phase, **{ph: _num(v_) for ph, v_ in est.phase_bytes}},
            "optimizer_step_bytes": {k_: _num(v_) for k_, v_ in est.step_bytes},
            # the transients row itemised: what the peak phase adds or takes away
            "peak_parts": [{"key": k_, "label": l_, "bytes": _num(v_)}
                           for k_, l_, v_ in est.peak_parts],
            "allowances": {str(s_): number_out(v_) for s_, v_ in est.values.items()
                           if s_.name in ("M_ws", "M_nccl", "phi_frag")},
            "sources": _sources(est),
            "params": int(parameter_count(arch)),
            "notes": list(est.notes) + [printable(n, 200) for n in arch.extra.get("notes", ())]
            + untimed,
            **extra, "_total": byt["total"]}


#: What ``--use-distributed-optimizer`` is under Muon, and what memsym counts for it.
LAYER_WISE = ("under muon it is Megatron-core's layer-wise distributed optimizer, as with "
              "the deprecated --optimizer dist_muon (Megatron-LM arguments.py:1724-1737; "
              "Megatron-Bridge training/optim.py:103-110): every rank keeps the whole weights "
              "and gradients and the optimizer states of its share of the parameters "
              "(core/optimizer/layer_wise_optimizer.py:167-181), counted as the distributed "
              "optimizer's, split over d c")


def defaults_rows(defaults, states) -> list:
    """The report's ``defaults`` rows: ``(option, value, source)`` each as a dict, less a
    sharding default another argument overrode (``--optimizer dist_muon`` is Muon with the
    layer-wise distributed optimizer, not Megatron's DDP default), and the distributed
    optimizer's row under Muon saying it is the layer-wise one (:data:`LAYER_WISE`).

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> defaults_rows([("sharding", "ddp", "plain DDP")],
    ...               NS(sharding="distributed-optimizer", optimizer="muon"))
    []
    >>> [r["source"][:30] for r in defaults_rows([("sharding", "distributed-optimizer", "DistOpt")],
    ...                                          NS(sharding="distributed-optimizer", optimizer="muon"))]
    ['DistOpt; under muon it is Mega']
    """
    rows = []
    for option, value, source in defaults:
        if option == "sharding" and value != states.sharding:
            continue        # set by another argument: not a default that applied
        if option == "sharding" and value == "distributed-optimizer" \
                and states.optimizer == "muon":
            source = f"{source}; {LAYER_WISE}"
        rows.append({"option": option, "value": value, "source": source})
    return rows


def _training_fields(j) -> dict:
    """The job's training options as the report prints them, each as the job reads it."""
    from ..job import recompute_modules_of

    layout, training = j.layout, j.training
    return {"seq_length": training.batch.seq_length,
            "micro_batch_size": training.batch.micro_batch_size,
            "recompute": training.memory.recompute,
            "recompute_method": training.memory.recompute_method,
            "recompute_num_layers": training.memory.recompute_num_layers,
            "recompute_modules": list(recompute_modules_of(training))
                if training.memory.recompute == "selective" else None,
            "flash_attention": training.memory.flash_attention,
            "dropout": training.memory.dropout, "schedule": training.pipeline.schedule,
            "stage_placement": training.pipeline.stage_placement,
            "framework": training.framework,
            # the weight precision and state sharding, each as the job reads it
            "precision": training.states.precision,
            "fp8_recipe": training.states.fp8_recipe,
            "fp4_param_gather": training.states.fp4_param_gather,
            "bf16_layers": list(training.states.bf16_layers),
            "optimizer": training.states.optimizer,
            "sharding": training.states.sharding,
            "megatron_fsdp": training.states.megatron_fsdp,
            "fsdp_double_buffer": training.states.fsdp_double_buffer,
            "torch_ddp_buckets": training.states.torch_ddp_buckets,
            "autocast": training.states.autocast,
            "accelerate_fsdp": training.states.accelerate_fsdp,
            "fsdp_keep_gathered": training.memory.fsdp_keep_gathered,
            "compiled_loss": training.memory.compiled_loss,
            "chunked_loss": training.memory.chunked_loss,
            "compiled_model": training.memory.compiled_model,
            "sac_saves_attention": training.memory.sac_saves_attention,
            "loss_parallel": training.memory.loss_parallel,
            "cross_entropy_fusion_impl": training.memory.cross_entropy_fusion_impl,
            "cpu_offloading_num_layers": training.memory.cpu_offloading_num_layers,
            "cuda_graph_impl": training.memory.cuda_graph_impl,
            "cuda_graph_modules": list(training.memory.cuda_graph_modules),
            "batch_attention_mask": training.memory.batch_attention_mask,
            "optimizer_cuda_graph": training.memory.optimizer_cuda_graph,
            "first_iteration": training.memory.first_iteration,
            "moe_dispatcher": training.memory.moe_dispatcher,
            "main_params_dtype": training.states.main_params_dtype,
            "exp_avg_dtype": training.states.exp_avg_dtype,
            "exp_avg_sq_dtype": training.states.exp_avg_sq_dtype,
            "overlap_grad_reduce": training.comm.overlap_grad_reduce,
            "overlap_param_gather": training.comm.overlap_param_gather,
            "tp_comm_overlap": training.comm.tp_comm_overlap,
            "tp_comm_overlap_cfg": training.comm.tp_comm_overlap_cfg,
            "overlap_moe_expert_parallel_comm":
                training.comm.overlap_moe_expert_parallel_comm,
            "overlap_p2p_comm": training.pipeline.overlap_p2p_comm,
            "defer_embedding_wgrad_compute": training.pipeline.defer_embedding_wgrad_compute,
            "wgrad_deferral_limit": training.pipeline.wgrad_deferral_limit,
            "first_stage_layers": layout.first_stage_layers,
            "last_stage_layers": layout.last_stage_layers,
            "pipeline_layout": None if layout.pipeline_layout is None
                else layout.pipeline_layout.describe()}


def metric_report(args, j, rep: dict, total) -> int:
    """Add the memory metric to ``rep`` (its name, what it sees, the device total) and return
    the device total [bytes], on which fitting is judged (:data:`memsym.terms.allowances.METRICS`)."""
    from ..symbols import phi_frag
    from ..terms.allowances import METRICS, allowance_values
    from ..training import job_memory

    name = j.training.memory.metric
    if name == "device" or args.convention in CONVENTION_NAMES:
        device, frag = total, rep["bytes"].get("fragmentation", 0)
    else:
        est = job_memory(j.replace(metric="device"))
        grouped = {k: _num(v) for k, v in est.grouped().items() if k != "total"}
        device, frag = sum(grouped.values()), grouped.get("fragmentation", 0)
    # the device's fragmentation term and its fraction (a user's --fragmentation; the
    # allocated metric's 0 is its view, not the device's): the reserve band of the verdict
    phi = allowance_values(dict(j.allowances))[phi_frag] if frag else 0
    rep["metric"] = {"name": name, "sees": METRICS[name][1], "device_bytes_total": device,
                     "device_fragmentation_bytes": frag,
                     "device_fragmentation_fraction": number_out(phi)}
    return device


def _sources(est) -> dict:
    """The source of every row the report shows: each term's own, for the activations row
    (several terms summed) each of its terms' sources once, and the transients row's (the
    peak phase's Term)."""
    out = {term.key: str(term.source) for term in est.total}
    grouped = set(est.grouped()) | {"phase_transient"}
    acts = [term for term in est.total if term.key not in grouped]
    out["activations"] = "; ".join(dict.fromkeys(str(term.source) for term in acts))
    if "transients" in grouped:
        out["transients"] = out["phase_transient"]
    out.pop("phase_transient", None)
    return out


def sensitivity_report(args, j) -> list:
    """Each knob's :class:`memsym.sensitivity.Sensitivity` at the job, JSON-ready."""
    from ..errors import InvalidValueError
    from ..sensitivity import sensitivity

    if args.convention in CONVENTION_NAMES:
        raise InvalidValueError(f"--sensitivity differentiates memsym's own total: with "
                                f"--convention {args.convention} the report is the framework's "
                                "estimator (drop one of them)")
    return sensitivity_rows(sensitivity(j))


def sensitivity_rows(rows) -> list:
    """:class:`memsym.sensitivity.Sensitivity` rows as JSON (exact values also as text)."""
    return [{"knob": r.knob, "value": r.value,
             "bytes_per_unit": None if r.derivative is None else number_out(r.derivative),
             "bytes_per_unit_exact": None if r.derivative is None else str(r.derivative),
             "by_term_bytes_per_unit": {k: None if v is None else number_out(v)
                                        for k, v in r.by_term.items()},
             "doubled_value": 2 * r.value, "doubled_change_bytes": r.doubled,
             "note": r.note} for r in rows]


def advice_report(j) -> list:
    """The levers that make the job fit (:func:`memsym.advice.levers`), JSON-ready."""
    from ..advice import levers

    return [{"knob": lv.knob, "change": lv.change, "flags": list(lv.flags),
             "bytes_total": lv.bytes_total, "saved_bytes": lv.saved, "gpus": lv.gpus,
             "step_time_s": lv.step_time} for lv in levers(j)]


def advice_tried(j) -> list:
    """The knobs the advice tries for the job, in words (:func:`memsym.advice.tried_changes`:
    the sizes its framework's search changes), for the line saying none of them fits."""
    from ..advice import tried_changes

    return list(tried_changes(j))


#: (option, dest) of the cluster options that price communication and time (--gpu alone may
#: also just supply the capacity, so it is not among them).
PRICING = (("--gpus-per-node", "gpus_per_node"), ("--intra-node-bandwidth", "intra_node_bandwidth"),
            ("--inter-node-bandwidth", "inter_node_bandwidth"), ("--efficiency", "efficiency"))


def node_size(args) -> int | None:
    """GPUs per node the step is priced with [GPUs]: ``--gpus-per-node``, else the compute tray
    of an NVL72 rack where the ``--gpu`` is one (its catalogue system's node is smaller than
    its NVLink domain: 4 of 72 on GB200 and GB300), else None (the HGX node of 8,
    :func:`memsym.hardware.cluster_for`).

    The link a group is priced on follows the NVLink domain (:attr:`memsym.devices.Cluster.domain`,
    72 on an NVL72 rack either way), so the tray changes the words, not the step time.

    References: NVIDIA Multi-Node NVLink tuning guide, "Understanding Your Grace-Blackwell
    Systems" (GB200 72x1: 18 compute trays, 4 GPUs per compute tray, 9 NVL72 NVLink switch
    trays); NVIDIA NVL72 AI Factory enterprise reference architecture, "System Hardware &
    Components" (GB300 NVL compute tray: 4 Blackwell Ultra GPUs; 9 NVSwitch trays join all 72).

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> node_size(NS(gpu="gb300", gpus_per_node=None)), node_size(NS(gpu="gb200-186gb",
    ...     gpus_per_node=None))
    (4, 4)
    >>> node_size(NS(gpu="h100-80gb", gpus_per_node=None)), node_size(NS(gpu="gb300",
    ...     gpus_per_node=8))
    (None, 8)
    """
    from ..hardware import cluster, clusters, gpu

    if getattr(args, "gpus_per_node", None) is not None or getattr(args, "gpu", None) is None:
        return getattr(args, "gpus_per_node", None)
    name = gpu(args.gpu).name
    trays = [c.gpus_per_node for c in map(cluster, clusters())
             if c.gpu.name == name and (c.nvlink_domain or 0) > c.gpus_per_node]
    return trays[0] if trays else None


def cluster_known(args) -> bool:
    """Whether the options describe a cluster (with a model: communication and time are priced)."""
    return getattr(args, "gpu", None) is not None or \
        any(getattr(args, dest, None) is not None for _, dest in PRICING)


def communication_report(args, j) -> dict:
    """``communication``, ``bubble``, ``flops``, ``step_time_s``, ``mfu`` of the layout on the
    cluster the options describe (:func:`memsym.timing.report.step_report` with the layout:
    step time, bubble and MFU from :func:`memsym.timing.step.step_time`, the exact schedule;
    MFU on GEMM-count FLOPs; ``--efficiency`` the explicit achieved-GEMM-efficiency override)."""
    from ..model import active_parameter_count, moe_layer_pattern
    from ..timing.report import step_report
    from ..training import arch_values, job_stage_parameters

    arch, layout, training = j.model, j.layout, j.training
    if j.m is None:     # one micro-batch per step when none given (as step_report prices it)
        training = training.replace(num_microbatches=1, global_batch_size=None)
    values = {str(sym): int(val) for sym, val in arch_values(arch, layout.t).items()}
    # FLOPs: 6 N per token on the parameters a token passes through (the active ones for
    # MoE), as memsym search prices them: Korthikanti's 72BLsh^2 form assumes a GPT layer
    # (4h MLP, full multi-head attention) and miscounts SwiGLU, GQA and experts
    values["N"] = int(active_parameter_count(arch))
    # data parallelism reduces the gradients a GPU holds: the heaviest stage's dense and
    # expert parameters (experts/(e t_e) of them); the ring factor uses d for both groups
    heaviest = max(
        (job_stage_parameters(j, i).per_gpu for i in range(layout.p)))
    dp_params = heaviest * layout.p * layout.t
    m_ = j.m or 1       # the job's m, computed once when it was built
    if training.states.grad_dtype in ("bf16", "fp16"):   # --grad-reduce-in-bf16: 2-byte gradients
        values["b_g"] = 2                           # reduced, as the step time prices them
    elif training.states.autocast and training.states.precision == "fp32":
        # matmuls at the autocast dtype, fp32 gradients reduced
        values["b_g"] = 4
    values.update({"s": training.batch.seq_length, "b": training.batch.micro_batch_size, "m": m_,
                   "t": layout.t, "p": layout.p, "d": layout.d, "c": layout.c, "e": layout.e,
                   "v": layout.v or 1})
    if arch.num_experts:
        values["L_m"] = sum(moe_layer_pattern(arch))
    gb = 10**9
    return step_report(
        values, gpu=args.gpu or "h100-80gb",
        precision=training.states.autocast or training.states.precision,
        sharding=training.states.sharding, recompute=training.memory.recompute,
        sequence_parallel=layout.sequence_parallel, interleaved=(layout.v or 1) > 1,
        efficiency=args.efficiency, gpus_per_node=node_size(args),
        intra_node_bandwidth=None if args.intra_node_bandwidth is None else args.intra_node_bandwidth * gb,
        inter_node_bandwidth=None if args.inter_node_bandwidth is None else args.inter_node_bandwidth * gb,
        dp_params=dp_params, formula="6n", arch=arch, layout=layout, training=training,
        mfu_flops=getattr(args, "mfu_flops", None) or "gemm",
        pipelined_fsdp=(FRAMEWORK[training.framework].torch_pipelining
                        and training.states.sharding == "fsdp"
                        and layout.p > 1), m=j.m or 1)
