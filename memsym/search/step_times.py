"""The step time of a search's rows: each (recompute, SP, sharding) group of choices priced
once over the rows that take it (:func:`memsym.timing.step.step_time_grids`, all the groups'
interleaved schedules priced together), with the overlaps the search launches.
"""

from __future__ import annotations

import numpy as np

from ..frameworks import FRAMEWORK
from ..job import Training
from ..job_record import recompute_modules_of
from ..timing.pipeline import most_layers_per_rank
from ..timing.step import Settings, step_time_grids
from ..timing.step_settings import overlap_of
from .job_fields import row_overlaps
from .choices import recompute_layers
from .space import Space, KNOBS, states_scheme

__all__ = ["TIME_PARTS", "choice_times", "launch_overlaps", "time_choices", "time_rows"]


def choice_times(space: Space, grid: dict, m_, f_, l_, idx, rc, spf, scheme,
                  time_cache: dict) -> dict:
    """The step time and its parts of rows ``idx`` under one discrete choice (``time_cache``:
    ``"need"``, the rows of each time key (:func:`time_rows`), ``"first"``, the choice
    each key is priced as (:func:`time_choices`), and the times priced)."""

    # the step time depends on the choice only through (recompute, SP, DDP / ZeRO-2 (its
    # gradients reduced every micro-batch) / ZeRO-3 / FSDP / a sharded optimizer): priced once
    # per such triple over every row, then indexed (a Megatron-FSDP strategy row is priced as
    # the scheme whose states it keeps); every key at the first one asked for, their
    # interleaved schedules priced together (memsym.timing.step.step_time_grids)
    tkey = _time_key(rc, spf, states_scheme(scheme))
    if tkey not in time_cache:
        keys = [k for k in time_cache["first"] if k not in time_cache]
        time_cache.update(zip(keys, _step_times(space, grid, m_, f_, l_, [
            (np.flatnonzero(time_cache["need"][k]),) + time_cache["first"][k] for k in keys])))
    full, pos = time_cache[tkey]
    where = pos[idx]          # the rows' places in the key's columns, found once
    return {k: col[where] for k, col in full.items()}


def _step_times(space: Space, grid: dict, m_, f_, l_, asked: list) -> list:
    """``(columns, position of each grid row in them)`` of each ``(rows, recompute, SP,
    scheme)`` of ``asked``: the step time of those rows (:func:`_step_time_call`), priced
    together."""
    n, t_ = len(grid["t"]), grid["t"]
    calls, out = [], []
    for rows_t, rc, spf, scheme in asked:
        # the expert-TP size is t where the grid gives none; every other knob is in the grid
        knobs = {k: (grid.get(k, t_) if k == "t_e" else grid[k])[rows_t] for k in KNOBS}
        calls.append(_step_time_call(space, knobs, m_[rows_t], f_[rows_t], l_[rows_t], rc, spf,
                                     states_scheme(scheme)))
    priced = iter(step_time_grids([kw for kw in calls if kw is not None]))
    for (rows_t, *_), kw in zip(asked, calls):
        pos = np.full(n, -1, dtype=np.int64)
        pos[rows_t] = np.arange(len(rows_t))
        out.append((_step_time_columns(next(priced) if kw is not None else None, len(rows_t)),
                    pos))
    return out


def time_choices(ordered: list) -> dict:
    """``time key -> (recompute, SP, scheme)``: the first of the ``ordered`` choices (those
    some row takes, in the order they are priced) of each :func:`_time_key`, the one its
    step time is priced as."""
    first: dict = {}
    for rc, spf, _, _, scheme in ordered:
        first.setdefault(_time_key(rc, spf, states_scheme(scheme)), (rc, spf, scheme))
    return first


def time_rows(combos, sels) -> dict:
    """``time key -> rows``: the step time is priced once per :func:`_time_key` over the
    rows some choice of it takes (a row every choice rule of the key refuses, a MoE row
    without SP at t > 1, is never priced)."""
    need: dict = {}
    for (rc, spf, _, _, scheme), sel in zip(combos, sels):
        key = _time_key(rc, spf, scheme)
        need[key] = need.get(key, False) | sel
    return need


def _time_key(rc, spf, scheme) -> tuple:
    """What a row's step time depends on among its discrete choices: recompute, SP and DDP /
    ZeRO-2 / ZeRO-3 / FSDP / a sharded optimizer (a Megatron-FSDP strategy row priced as the
    scheme whose states it keeps)."""
    scheme = states_scheme(scheme)
    return (rc, spf, scheme if scheme in ("ddp", "zero2", "zero3", "fsdp") else "sharded")


#: The step-time breakdown columns of a search [s]: the decoder layers' GEMM and attention
#: compute, memory-bound operations, exposed communication (TP, EP, CP, PP, DP), pipeline
#: bubble, optimizer step, and the rest (embedding, output layer and loss on the end stages)
#: (:func:`memsym.timing.step.step_time_grid`; they add up to the step).
TIME_PARTS = ("time_compute", "time_memory", "time_comm", "time_bubble", "time_optimizer",
              "time_other")


def launch_overlaps(framework: str, sharding: str) -> dict:
    """The overlap options every row is priced with, as :func:`memsym.job.job` options.

    The search proposes layouts to launch, so it prices them with the data-parallel overlaps
    the framework can run: Megatron-LM's ``--overlap-grad-reduce`` and, with a sharded
    optimizer, ``--overlap-param-gather`` (off unless given); DeepSpeed's ``overlap_comm``,
    which overlaps the gradient reduction and, under ZeRO-3 only, prefetches the parameter
    all-gather (ZeRO-1/2 gather the updated parameters inside the step); torchtitan's FSDP2
    and DDP overlap by default.  A row fed back to ``memsym estimate`` with these gets its
    step time.

    Examples
    --------
    >>> launch_overlaps("megatron", "distributed-optimizer")
    {'overlap_grad_reduce': True, 'overlap_param_gather': True}
    >>> launch_overlaps("megatron", "ddp"), launch_overlaps("torchtitan", "fsdp")
    ({'overlap_grad_reduce': True}, {})
    >>> launch_overlaps("deepspeed", "zero2")
    {'overlap_grad_reduce': True, 'overlap_param_gather': False}
    >>> launch_overlaps("megatron", "no_shard")       # Megatron-FSDP no_shard: DDP's states
    {'overlap_grad_reduce': True}
    """
    return FRAMEWORK[framework].launch_overlap_options(states_scheme(sharding))


def _search_overlap(space: Space, sharding: str, comm: dict | None = None):
    """The :class:`memsym.timing.step.Overlap` of :func:`launch_overlaps` (or of the space's
    own ``overlaps``, a job's) and ``comm`` (the row's carried communication fields:
    :meth:`Space.comm_fields`), as the job with those options gets it
    (:func:`memsym.timing.step_settings.overlap_of`)."""
    framework = space.framework
    given = launch_overlaps(framework, sharding) if space.overlaps is None \
        else row_overlaps(space.overlaps, framework, sharding)
    held = {k: v for k, v in space.held if k in ("overlap_moe_expert_parallel_comm",
                                                  "overlap_p2p_comm")}   # a job's own
    return overlap_of(Training(framework=framework, sharding=sharding, **given, **held,
                               **(comm or {})))


def _step_time_call(space: Space, knobs: dict, m_, f_, l_, rc: str, spf: bool,
                    scheme: str) -> dict | None:
    """The :func:`memsym.timing.step.step_time_grid` keywords of the step time of each row
    (None: no rows), whose breakdown :func:`_step_time_columns` reads: per-stage GEMMs after the TP/SP/CP/EP splits
    on the GPU's efficiency curve (``efficiency``, when given, is the explicit achieved GEMM
    efficiency ``eta_gemm``), memory-bound work at HBM bandwidth, collectives on the links
    their groups cross with Megatron's default overlaps, the exact schedule's bubble (uneven
    end stages included), the exposed DP sync and the optimizer step.

    Sharding enters as Megatron's distributed optimizer (gradient reduce-scatter + parameter
    all-gather once per step, overlapped) for ZeRO-1/2, as an all-reduce for DDP.  ZeRO-3 /
    FSDP gathers the parameters in every micro-batch's forward and again in its backward and
    reduce-scatters the gradients in every backward (DeepSpeed stage 3, FSDP2's
    reshard_after_forward): m (AG + AG + RS), hidden behind the pipeline's compute where it
    fits (prefetching), the rest exposed (assumption: the collectives' un-overlapped times
    from :func:`memsym.timing.step.step_time_grid` with :meth:`Overlap.none`, AG = RS 2/b_g)."""

    x = space.arch
    L_ = x.num_layers
    if len(knobs["t"]) == 0:
        return None
    p_ = knobs["p"]
    method, n_layers = recompute_layers(rc) or (None, None)
    frac = 1.0
    if method == "block":
        # block N reruns min(N, chunk) of each chunk's layers (step_time's mean chunk L/(p v))
        chunk = L_ / (p_ * knobs["v"])
        frac = np.minimum(n_layers, chunk) / chunk
    elif method == "every":
        # every N-th block of the rank with the most layers (as step_time prices it)
        n_rank = most_layers_per_rank(L_, p_, f_, l_)
        frac = np.floor(n_rank / n_layers) / n_rank
    st = Settings(seq_length=space.seq_length, micro_batch_size=int(knobs["b"][0]),
                  recompute="full" if method is not None else rc,
                  recompute_fraction=frac, sequence_parallel=bool(spf),
                  # block skips the MTP layer's recompute (multi_token_prediction.py:1630)
                  mtp_recompute=method != "block",
                  flash_attention=space.flash_attention, dropout=space.dropout,
                  # autocast over fp32 weights runs its matmuls at the autocast dtype (as
                  # memsym.timing.step_settings prices a job's)
                  precision=_matmul_precision(space),
                  fp8_recipe=space.fp8_recipe if space.precision == "fp8" else None,
                  distributed_optimizer=scheme != "ddp",
                  gather_per_microbatch=scheme in ("zero3", "fsdp"),
                  reduce_per_microbatch=scheme == "zero2",
                  whole_embedding=FRAMEWORK[space.framework].tp_whole_embedding,
                  gathered_logits=FRAMEWORK[space.framework].tp_gathered_logits,
                  pipelined_fsdp=scheme == "fsdp" and FRAMEWORK[space.framework].torch_pipelining,
                  torch_rounds=FRAMEWORK[space.framework].torch_pipelining,
                  schedule="gpipe" if space.schedule == "gpipe" else "1f1b",
                  # the carried dispatcher prices its all-to-all as estimate does (DeepEP /
                  # HybridEP send a token once per rank and NVLink domain: timing.flex_dispatch)
                  moe_dispatcher=space.moe_dispatcher, optimizer=space.optimizer,
                  # the carried userbuffers config, where the row runs the TP overlap
                  tp_overlap_cfg=space.comm_fields(bool(spf)).get("tp_comm_overlap_cfg"),
                  **_held_settings(space, rc))
    even = (f_ == 0) & (l_ == 0)
    # the even split as explicit end stages of L/p layers (the middle then holds L/p too)
    first = np.where(f_ > 0, f_, L_ / p_)
    last = np.where(l_ > 0, l_, L_ / p_)
    one_given = ~even & ((f_ == 0) | (l_ == 0))
    if one_given.any():        # one end given: the others split the rest evenly
        inner = p_ - 1
        rest = np.where(f_ > 0, (L_ - f_) / np.maximum(inner, 1), (L_ - l_) / np.maximum(inner, 1))
        first = np.where(one_given & (f_ == 0), rest, first)
        last = np.where(one_given & (l_ == 0), rest, last)
    eta = None if space.efficiency is None else float(space.efficiency)
    return dict(arch=x, gpu_name=space.gpu.name, t=knobs["t"], p=p_, d=knobs["d"], c=knobs["c"],
                e=knobs["e"], t_e=knobs["t_e"], v=knobs["v"], b=knobs["b"], m=np.maximum(m_, 1),
                settings=st, cluster=space.cluster,
                overlap=_search_overlap(space, scheme, space.comm_fields(bool(spf))),
                eta_gemm=eta, first_stage_layers=first, last_stage_layers=last,
                mtp_layers=x.mtp_num_layers or 0)


def _step_time_columns(out: dict | None, n: int) -> dict:
    """Seconds per step [s] of each of ``n`` rows and its breakdown (:data:`TIME_PARTS`) from
    :func:`memsym.timing.step.step_time_grid`'s ``out`` (None: no rows)."""
    if out is None:
        return {k: np.zeros(0) for k in ("step_time",) + TIME_PARTS}
    col = {k: np.broadcast_to(np.asarray(out[k], dtype=float), (n,)) for k in (
        "step", "compute", "memory", "bubble", "optimizer", "tp", "ep", "cp", "pp", "dp",
        "pipeline")}
    res = {"step_time": col["step"], "time_compute": col["compute"], "time_memory": col["memory"],
           "time_comm": col["tp"] + col["ep"] + col["cp"] + col["pp"] + col["dp"],
           "time_bubble": col["bubble"], "time_optimizer": col["optimizer"]}
    other = res["step_time"] - sum(res[k] for k in TIME_PARTS[:-1])
    # what the named parts leave (the exact schedule's makespan beyond them); a float
    # residue of the subtraction is not a part
    res["time_other"] = np.where(np.abs(other) <= 1e-9 * np.abs(res["step_time"]), 0.0, other)
    return res


def _matmul_precision(space: Space) -> str:
    """The precision the rows' matmuls run at: a held autocast dtype over fp32 weights, else
    the space's precision (bf16 where it names none the step time prices)."""
    autocast = dict(space.held).get("autocast")
    if autocast:
        return autocast
    return space.precision if space.precision in ("bf16", "fp16", "fp8", "fp32", "fp4") \
        else "bf16"


def _held_settings(space: Space, rc: str) -> dict:
    """The :class:`memsym.timing.records.Settings` fields a job's held settings give
    (:data:`memsym.search.job_fields.HELD_FIELDS`), as the job's step time reads them: FP8
    parameter gathers, the reduced gradient's width, the selective recompute's modules, Muon's
    TP mode, Newton-Schulz steps and Nesterov, MLA's down-projection fusion, the bias-activation
    fusion (off: a clamped GLU's eager kernels, memsym.timing.moe_eager), the fp32 residual
    stream's fp32 p2p messages and the BF16 first / last layers of an FP8 / FP4 run."""
    held = dict(space.held)
    out = {"fp8_param_gather": bool(held.get("fp8_param_gather", False)),
           "grad_bytes": 2 if held.get("grad_dtype") in ("bf16", "fp16") else 4}
    # Muon's and MLA's switches, as memsym.timing.step reads a job's (Settings' defaults
    # are the Training's: a field not held keeps it)
    for field, name in (("muon_tp_mode", "muon_tp_mode"), ("muon_num_ns_steps", "muon_ns_steps"),
                        ("muon_nesterov", "muon_nesterov"),
                        ("mla_down_proj_fusion", "mla_down_proj_fusion"),
                        ("bias_activation_fusion", "bias_activation_fusion"),
                        ("fp32_residual_connection", "fp32_residual_connection")):
        if field in held:
            out[name] = held[field]
    if rc == "selective" and held.get("recompute_modules") is not None:
        out["recompute_modules"] = recompute_modules_of(space.training(recompute=rc))
    if space.precision in ("fp8", "fp4") and any(held.get("bf16_layers", ())):
        out["bf16_layers"] = tuple(held["bf16_layers"])   # first_last_layers_bf16, as step.py
    return out
