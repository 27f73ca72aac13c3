"""What of a job a search carries: the :class:`memsym.training.Training` fields it holds or
explores (:data:`SEARCHED_FIELDS`), the one-line refusal of any other setting a job makes
(:func:`refuse_unsearched`), and a job's recompute choice and global batch as a search takes
them (:func:`recompute_choice`, :func:`global_batch_of`).
"""

from __future__ import annotations

from ..errors import InvalidValueError, UnknownNameError
from ..frameworks import FRAMEWORK
from ..job_record import FIELD_PARTS
from ..text import short
from ..training import Training
from ..timing.userbuffers import ub_config
from ..limits import EFFICIENCY_RANGE
from ..values import boolean, exact
from ..vocabulary import MEGATRON_FSDP_OPTIMIZERS, MEGATRON_FSDP_SCHEMES


#: The rows of a Megatron search that run as Megatron-FSDP, with the
#: ``--data-parallel-sharding-strategy`` each is: ZeRO-2's states as ``optim_grads``, FSDP's as
#: ``optim_grads_params`` (no other Megatron-LM flag shards them), and the two strategies whose
#: states a plain Megatron scheme also keeps (DDP's, the distributed optimizer's) as rows of
#: their own names, ``no_shard`` and ``optim`` (:data:`MEGATRON_FSDP_ROWS`); each priced with
#: Megatron-FSDP's own buffers, as ``memsym estimate`` reads the launch back.
MEGATRON_FSDP_STRATEGY = {"no_shard": "no_shard", "optim": "optim", "zero2": "optim_grads",
                          "fsdp": "optim_grads_params"}

#: The rows named by their Megatron-FSDP strategy -> the scheme whose states they keep
#: (memsym.vocabulary.MEGATRON_FSDP_SCHEMES): the scheme a row's memory and time are priced as.
MEGATRON_FSDP_ROWS = {row: MEGATRON_FSDP_SCHEMES[row] for row in ("no_shard", "optim")}


def states_scheme(row: str) -> str:
    """The sharding scheme of a search row's sharding choice: a Megatron-FSDP strategy row's
    (:data:`MEGATRON_FSDP_ROWS`), else the choice itself.

    Examples
    --------
    >>> states_scheme("no_shard"), states_scheme("optim"), states_scheme("zero2")
    ('ddp', 'distributed-optimizer', 'zero2')
    """
    return MEGATRON_FSDP_ROWS.get(row, row)


#: The :class:`memsym.training.Training` fields a search carries: the space's own settings
#: (:meth:`Space.training`) and the choices it explores (recompute and its layer-wise form,
#: sharding, offload, micro-batch size).  Any other field a job sets is not searched.
SEARCHED_FIELDS = frozenset((
    "seq_length", "micro_batch_size", "global_batch_size", "recompute", "recompute_method",
    "recompute_num_layers", "flash_attention", "dropout", "schedule", "precision", "optimizer",
    "sharding", "convention", "offload", "capacity_factor", "finetune", "lora_rank",
    "lora_targets", "quantization", "framework", "fp8_recipe", "moe_dispatcher",
    "tp_comm_overlap", "fsdp_double_buffer", "tp_comm_overlap_cfg"))


#: The data-parallel overlap fields a search can price a job's own values of (``overlaps``).
OVERLAP_FIELDS = ("overlap_grad_reduce", "overlap_param_gather")

#: The other :class:`memsym.training.Training` fields a search holds fixed at a job's values
#: (``held``, :meth:`Space.training`): the memory terms read them from each row's Training,
#: as estimate's do; those the step time reads (the gradient width, FP8 parameter gathers,
#: the selective recompute's modules, the MoE and P2P overlaps) are passed to it
#: (:mod:`memsym.search.evaluate`).  Fields that change which stage holds what (the V
#: placement, micro-batch groups, layer offloading), NVFP4 parameters and the metric stay
#: refused (:func:`refuse_unsearched`).  Muon's switches and MLA's down-projection fusion
#: (Megatron-LM's ``--muon-tp-mode``, ``--muon-num-ns-steps``, ``--muon-nesterov``,
#: ``--mla-down-proj-fusion``) are held too: the Newton-Schulz workspace and the optimizer
#: step read the first three, the recomputed norms the last, as estimate's do.  The
#: context-parallel method (``cp_comm_type``) is held as a job names it: its attention buffers
#: priced per row and its rules (sinks-cp, dsa-cp, te-cp-allgather) applied to every c > 1;
#: autocast over fp32 weights (a Trainer's ``--bf16``) too: its casts kept per layer and its
#: matmuls priced at the autocast dtype, as estimate's are.
HELD_FIELDS = (
    "grad_dtype", "fp8_param_gather", "recompute_modules", "precision_aware",
    "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype", "zero_buckets",
    "cross_entropy_fusion_impl", "batch_attention_mask", "compiled_loss", "compiled_model",
    "loss_parallel", "cuda_graph_impl", "cuda_graph_modules", "optimizer_cuda_graph",
    "overlap_moe_expert_parallel_comm", "overlap_p2p_comm", "bias_activation_fusion",
    "muon_tp_mode", "muon_num_ns_steps", "muon_nesterov", "mla_down_proj_fusion",
    "sac_saves_attention", "activation_func_fp8_input_store", "bf16_layers",
    "fp32_residual_connection", "fp8_attention", "cp_comm_type", "autocast")


def held_of(tr) -> tuple:
    """``(name, value)`` of each :data:`HELD_FIELDS` field where the Training ``tr`` differs
    from :class:`Training`'s default: what a search of the job holds fixed beside its own
    settings.

    Examples
    --------
    >>> from memsym.training import Training
    >>> held_of(Training(grad_dtype="bf16")), held_of(Training())
    ((('grad_dtype', 'bf16'),), ())
    """
    default = Training()
    return tuple((name, tr.value(name)) for name in HELD_FIELDS
                 if tr.value(name) != default.value(name))


def checked_held(given) -> tuple:
    """``held`` of :func:`memsym.search.space.make_space` as the Space holds it: ``(name,
    value)`` pairs of :data:`HELD_FIELDS`, each checked as a Training checks it.

    Examples
    --------
    >>> checked_held({"grad_dtype": "bf16"})
    (('grad_dtype', 'bf16'),)
    >>> checked_held({"metric": "reserved"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    memsym.errors.UnknownNameError: unknown held setting 'metric' (accepted: activation_func_fp8_input_store, ...)
    """
    pairs = tuple(sorted(dict(given or {}).items()))
    for key, _ in pairs:
        if key not in HELD_FIELDS:
            raise UnknownNameError("held setting", key, HELD_FIELDS)
    return held_of(Training(**dict(pairs)))


def unsearched_fields(tr, carried=()) -> list:
    """``"name value"`` of each field of the Training ``tr`` that a search does not carry
    (not in :data:`SEARCHED_FIELDS`, nor in ``carried``: fields this search is given, such as
    :data:`OVERLAP_FIELDS` with ``overlaps``) and that differs from :class:`Training`'s
    default: a search of the job would price, and draw, a different job without it.

    Examples
    --------
    >>> from memsym.training import Training
    >>> unsearched_fields(Training(optimizer="sgd")), unsearched_fields(Training(metric="reserved"))
    ([], ['metric reserved'])
    """
    default = Training()
    return [f"{name} {val if isinstance(val, str) else short(val)}" for name, val in
            ((name, tr.value(name)) for name in FIELD_PARTS)
            if name not in SEARCHED_FIELDS and name not in carried
            and val != default.value(name)]


def refuse_unsearched(tr, what: str = "search", carried=()) -> None:
    """Refuse, in one line, a job's setting that the search's space does not carry (it would
    be priced, and emitted, without it): NVFP4 parameters (``fp4_param_gather``), the
    optimizer step's CUDA graph, and any other field outside
    :data:`SEARCHED_FIELDS` (:func:`unsearched_fields`, ``carried`` as there).  ``what``: the
    command that searches, as the message names it.  Megatron-FSDP's strategy is a row of the
    search (:data:`MEGATRON_FSDP_STRATEGY`); its double buffer, the MoE dispatcher,
    ``tp_comm_overlap`` and its userbuffers config are carried (:class:`Space`).

    Examples
    --------
    >>> from memsym.training import Training
    >>> refuse_unsearched(Training())            # the defaults: nothing to refuse
    >>> refuse_unsearched(Training(sharding="ddp", megatron_fsdp="no_shard"))
    >>> refuse_unsearched(Training(metric="reserved"))
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: search: the job's metric reserved is not a searched setting (the search prices the job's settings it keeps); estimate the layout instead
    """
    kept = unsearched_fields(tr, (*carried, "megatron_fsdp"))  # a strategy is a searched row
    if kept:
        raise InvalidValueError(f"{what}: the job's {', '.join(kept)} is not a searched setting "
                                "(the search prices the job's settings it keeps); estimate "
                                "the layout instead")


def recompute_choice(memory) -> str:
    """The search's recompute choice of a job's :class:`memsym.job_record.Memory` (the
    inverse of :func:`recompute_fields`): its mode, or ``"block-N"`` / ``"every-N"`` for a
    layer-wise full recompute.  Megatron's ``uniform`` grouping is not a search choice and is
    refused in one line.

    Examples
    --------
    >>> from memsym.job_record import Memory
    >>> recompute_choice(Memory(recompute="selective"))
    'selective'
    >>> recompute_choice(Memory(recompute="full", recompute_method="block", recompute_num_layers=2))
    'block-2'
    """
    if memory.recompute_method is None:
        return memory.recompute
    if memory.recompute_method not in ("block", "every"):
        raise InvalidValueError(f"recompute method {memory.recompute_method} is not a search "
                                "choice (block-N or every-N); estimate the layout instead")
    return f"{memory.recompute_method}-{memory.recompute_num_layers or 1}"


def global_batch_of(job) -> int | None:
    """A job's global batch ``B`` [sequences]: its own, else its ``m`` micro-batches at its
    layout, ``B = m b d`` (the same batch at every layout a search tries), else None.

    Examples
    --------
    >>> from memsym.job import job
    >>> global_batch_of(job("llama2-7b", dp=4, micro_batch_size=2, num_microbatches=8))
    64
    """
    batch = job.training.batch
    if batch.global_batch_size is not None or batch.num_microbatches is None:
        return batch.global_batch_size
    return batch.num_microbatches * batch.micro_batch_size * job.layout.d


def carried_ub_config(cfg, tp_comm_overlap: bool):
    """The userbuffers config a search holds fixed (``tp_comm_overlap_cfg``: a
    Megatron-Bridge config's name or a user's config as
    :func:`memsym.timing.userbuffers.user_ub_config` makes it), checked as a job checks it:
    known (:func:`memsym.timing.userbuffers.ub_config`) and only with ``tp_comm_overlap``.

    Examples
    --------
    >>> carried_ub_config(None, False) is None
    True
    >>> carried_ub_config("userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192", False)
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: tp_comm_overlap_cfg is the userbuffers config of tp_comm_overlap, which is off
    """
    if cfg is None:
        return None
    if not tp_comm_overlap:
        raise InvalidValueError("tp_comm_overlap_cfg is the userbuffers config of "
                                "tp_comm_overlap, which is off")
    if isinstance(cfg, list):
        cfg = tuple(tuple(entry) for entry in cfg)
    if not isinstance(cfg, (str, tuple)):
        raise InvalidValueError(f"tp_comm_overlap_cfg names a userbuffers config (a string or "
                                f"a user's config tuple), got {type(cfg).__name__}")
    ub_config(cfg)              # an unknown name or malformed tuple: refused in one line
    return cfg


def checked_overlaps(given) -> tuple | None:
    """``overlaps`` of :func:`memsym.search.space.make_space` as the Space holds it: None (the
    launch's), else ``(name, value)`` pairs of :data:`OVERLAP_FIELDS`, each None or a bool.

    Examples
    --------
    >>> checked_overlaps({"overlap_grad_reduce": True})
    (('overlap_grad_reduce', True), ('overlap_param_gather', None))
    """
    if given is None:
        return None
    given = dict(given)
    for key in given:
        if key not in OVERLAP_FIELDS:
            raise UnknownNameError("overlap", key, OVERLAP_FIELDS)
    return tuple((key, None if given.get(key) is None else boolean(given[key], key))
                 for key in OVERLAP_FIELDS)


def row_overlaps(overlaps, framework: str, sharding: str) -> dict:
    """A job's own ``overlaps`` (:func:`checked_overlaps`' pairs) as one row of ``sharding``
    runs them: a Megatron-LM plain DDP row without ``overlap_param_gather`` (DDP gathers no
    parameters, and ``arguments.py`` l. 1024-1026 at ``d98e8a64dd`` refuses the flag without
    the distributed optimizer or Megatron-FSDP; :mod:`memsym.emit` leaves it out), the None
    values (the framework's defaults) left out.

    Examples
    --------
    >>> on = checked_overlaps({"overlap_grad_reduce": True, "overlap_param_gather": True})
    >>> row_overlaps(on, "megatron", "ddp"), row_overlaps(on, "megatron", "no_shard")
    ({'overlap_grad_reduce': True, 'overlap_param_gather': False}, \
{'overlap_grad_reduce': True, 'overlap_param_gather': True})
    """
    out = {k: v for k, v in overlaps if v is not None}
    if sharding == "ddp" and FRAMEWORK[framework].megatron_options \
            and "overlap_param_gather" in out:
        out["overlap_param_gather"] = False
    return out


def megatron_fsdp_rows(shard: tuple, optimizer: str, framework: str, given: bool) -> tuple:
    """The sharding rows ``shard`` of a search whose optimizer is ``optimizer``: Megatron-FSDP
    steps Adam and SGD only (:data:`memsym.vocabulary.MEGATRON_FSDP_OPTIMIZERS`, Megatron-LM's
    validate_args), so under another optimizer a Megatron search's Megatron-FSDP rows
    (:data:`MEGATRON_FSDP_STRATEGY`) are left out of its default schemes, and refused in one
    line where asked for by name (``given``).

    Examples
    --------
    >>> megatron_fsdp_rows(("ddp", "zero2"), "adafactor", "megatron", given=False)
    ('ddp',)
    >>> megatron_fsdp_rows(("ddp", "zero2"), "adafactor", "deepspeed", given=True)
    ('ddp', 'zero2')
    """
    if not FRAMEWORK[framework].megatron_options or optimizer in MEGATRON_FSDP_OPTIMIZERS:
        return shard
    fsdp = [row for row in shard if row in MEGATRON_FSDP_STRATEGY]
    if fsdp and given:
        raise InvalidValueError(f"sharding {', '.join(fsdp)}: Megatron-FSDP does not support "
                                f"the {optimizer} optimizer (Megatron-LM's validate_args: sgd "
                                "or adam)")
    return tuple(row for row in shard if row not in MEGATRON_FSDP_STRATEGY)


def checked_efficiency(efficiency):
    """The explicit GEMM efficiency eta_gemm [1], exact and within its physical range.

    >>> checked_efficiency(0.5)
    1/2
    """
    eff = exact(efficiency, "efficiency")
    # a physical range (memsym.limits): 1e-310 made every time inf and every column NaN
    lo, hi = (exact(x, "efficiency") for x in EFFICIENCY_RANGE)
    if not lo <= eff <= hi:
        raise InvalidValueError(f"efficiency is the achieved fraction of peak FLOP/s of "
                                f"the GEMMs: {float(lo):g} <= efficiency <= {float(hi):g}, "
                                f"got {short(efficiency)}")
    return eff


def space_differences(tr, space, **choices) -> list:
    """``"name job-value (searched space-value)"`` of each field where the Training ``tr`` of a
    job differs from the one ``space`` prices for the job's ``choices``
    (:meth:`Space.training`: ``micro_batch_size``, ``recompute``, ``sharding``, ``offload``):
    a map drawn from the search would be another job's.  The adapters' targets and format are
    left out (the space holds them checked and spelled out).

    Examples
    --------
    >>> from memsym.search.space import make_space
    >>> from memsym.training import Training
    >>> sp = make_space("llama2-7b", "h100-80gb", optimizer="sgd")
    >>> space_differences(Training(optimizer="sgd", dropout=False), sp,
    ...                   sharding="distributed-optimizer")
    []
    >>> space_differences(Training(dropout=False), sp, sharding="distributed-optimizer")
    ['optimizer adam (searched sgd)']
    """
    mine = space.training(**choices)
    return [f"{name} {tr.value(name)} (searched {mine.value(name)})" for name in FIELD_PARTS
            if name not in ("lora_targets", "quantization")
            and tr.value(name) != mine.value(name)]


#: What autocast (over fp32 weights, or 16-bit ones of LayerNorm models) was measured under
#: (memsym.job_checks_hf.check_autocast):
#: one GPU per replica, plain DDP, recompute none or full.
_AUTOCAST_SAID = ("autocast is counted under plain DDP with one GPU per replica, recompute "
                  "none or full (as measured)")


def autocast_choices(held, sizes: tuple, sharding, recompute) -> tuple:
    """``(sizes, sharding, recompute)`` of a search that holds autocast over fp32 weights
    (``held``: the search's held settings; ``sizes``: its ``(tp, pp, cp, ep)`` lists, None
    where none is named): the layouts and choices it was measured under
    (:func:`memsym.job_checks_hf.check_autocast`) where none are named; one named outside them
    is refused in one line (:class:`memsym.errors.InvalidValueError`), as estimate refuses
    the job.  Without autocast held, the arguments unchanged.

    Examples
    --------
    >>> autocast_choices({"autocast": "bf16"}, (None, None, None, None), None, None)
    (([1], [1], [1], [1]), ['ddp'], ['none', 'full'])
    >>> autocast_choices({"autocast": "bf16"}, ([2], None, None, None), None, None)
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: autocast is counted under plain DDP with one GPU per replica, recompute none or full (as measured): not tp [2]
    """
    if not dict(held or {}).get("autocast"):
        return sizes, sharding, recompute
    for name, value in zip(("tp", "pp", "cp", "ep"), sizes):
        if value is not None and list(value) != [1]:
            raise InvalidValueError(f"{_AUTOCAST_SAID}: not {name} {list(value)}")
    if sharding is not None and list([sharding] if isinstance(sharding, str) else sharding) \
            != ["ddp"]:
        raise InvalidValueError(f"{_AUTOCAST_SAID}: not sharding {sharding}")
    recompute = ["none", "full"] if recompute is None else \
        list([recompute] if isinstance(recompute, str) else recompute)
    if not set(recompute) <= {"none", "full"}:
        raise InvalidValueError(f"{_AUTOCAST_SAID}: not recompute {recompute}")
    return ([1], [1], [1], [1]), ["ddp"], recompute
