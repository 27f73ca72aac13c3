r"""What to change so that a job fits: one lever per knob, each found on the symbolic total by
the solver and verified on the estimate.

For a job whose device total :math:`M` exceeds the capacity :math:`C`, each lever is the
smallest change of one knob that brings the most-loaded GPU under it, the others fixed:

.. math::

    d^\star = \min\{d : M(d) \le C\}, \quad t^\star, p^\star, c^\star \text{ likewise},
    \qquad b^\star = \max\{b : M(b) \le C\}

(:func:`memsym.job_solver.solve_job`: the closed form over the reals, then the integer under the
framework's launch rules) and the discrete choices (recomputation, sharding, CPU offload,
Megatron's bf16 gradient buffer and FP8-only weights) tried in turn.  Every lever's job is built and estimated again (:func:`memsym.training.job_memory`)
before it is offered: it fits, on the device's count.
"""

from __future__ import annotations

from dataclasses import dataclass

from .job_solver import solve_job
from .errors import InvalidValueError, MemsymError
from .frameworks import FRAMEWORK
from .job import Job
from .timing.job_step import job_step_time
from .training import job_memory

__all__ = ["Lever", "levers", "recipe_levers", "tried_changes"]

#: The layout sizes a lever may change: (solver unknown, Layout field, flag, words).
_SIZES = (("dp", "d", "--dp", "data-parallel size d"),
          ("tp", "t", "--tp", "tensor-parallel size t"),
          ("pp", "p", "--pp", "pipeline-parallel size p"),
          ("cp", "c", "--cp", "context-parallel size c"))
#: The schemes a sharding lever offers, by framework.
_OFFERED = {"megatron": ("distributed-optimizer", "fsdp"),
            "deepspeed": ("zero1", "zero2", "zero3"), "torchtitan": ("fsdp",)}


@dataclass(frozen=True)
class Lever:
    """One change that makes a job fit, verified.

    Attributes
    ----------
    knob : str
        What changes (``"dp"``, ``"tp"``, ``"recompute"``, ...).
    change : str
        The change in words (``"d 1 -> 8"``).
    flags : tuple of str
        The command-line options that make it (memsym's own, honoured with a pasted command).
    job : memsym.job.Job
        The changed job.
    bytes_total : int
        Its per-GPU total on the device's count [bytes] (it fits).
    saved : int
        Bytes less than the original job [bytes].
    gpus : int
        Its world size [GPUs].
    step_time : float or None
        Its step time [s] (:func:`memsym.timing.job_step.job_step_time`), when the job has a
        GPU and a number of micro-batches.
    """

    knob: str
    change: str
    flags: tuple
    job: Job
    bytes_total: int
    saved: int
    gpus: int
    step_time: float | None


def _device_total(j: Job) -> int:
    j = j if j.training.memory.metric == "device" else j.replace(metric="device")
    return int(-(-job_memory(j).bytes_total // 1))


def _seconds(j: Job):
    if j.gpu is None or j.m is None:
        return None
    try:
        return float(job_step_time(j).total)
    except MemsymError:
        return None


def _solved(j: Job, unknown: str, capacity: int):
    """The job with ``unknown`` at the solver's answer (None when nothing fits)."""
    try:
        sol = solve_job(j, unknown, capacity, tidied=False)    # the value only: no printed form
    except MemsymError:
        return None
    name = {"dp": "d", "tp": "t", "pp": "p", "cp": "c", "micro-batch-size": "micro_batch_size",
            "seq-length": "seq_length"}[unknown]
    try:
        return j.replace(**{name: int(sol.value)})
    except MemsymError:
        return None


def recipe_levers(j: Job):
    """(knob, change, flags, job) of the Megatron settings a performance table does not print.

    Megatron's 16-bit training reduces gradients in fp32 unless told (``validate_args``
    forces ``accumulate_allreduce_grads_in_fp32`` under ``--bf16``) and keeps a bf16 copy of
    every FP8 weight beside Transformer Engine's FP8 cache unless ``--fp8-param-gather``.
    NVIDIA's performance recipes, the runs behind its published tables, set both, so each is a
    lever where it applies (Megatron's own sharding, the framework convention).  These are
    candidates: :func:`levers` estimates each and offers only those that fit.

    Examples
    --------
    >>> from memsym.job import job
    >>> [c[2] for c in recipe_levers(job("llama2-7b", precision="fp8", d=8))]
    [('--grad-reduce-in-bf16',), ('--fp8-param-gather',)]
    >>> [c[2] for c in recipe_levers(job("llama2-7b", grad_dtype="bf16"))]
    []
    """
    trn = j.training
    # REF: Megatron-Bridge 067f987df0 perf_recipes/_common.py, _benchmark_common and
    # _perf_precision (grad_reduce_in_fp32 = False), training/mixed_precision.py (every FP8
    # config sets fp8_param_gather = True); NeMo 2.0's performance scripts set
    # grad_reduce_in_fp32 = False, and NeMo-Framework-Launcher's H100 FP8 examples
    # optim.grad_sync_dtype=bf16 (examples/training/llama/h100/llama2_7b_fp8.sh, 7d6e2df9d9)
    megatron_states = (FRAMEWORK[trn.framework].megatron_options
                       and trn.states.convention == "framework"
                       and trn.states.sharding in ("ddp", "distributed-optimizer")
                       and trn.states.optimizer != "none")
    if megatron_states and trn.states.precision in ("bf16", "fp8") and trn.states.grad_dtype in (None, "fp32"):
        try:
            yield ("grad-dtype", "gradient buffer fp32 -> bf16", ("--grad-reduce-in-bf16",),
                   j.replace(grad_dtype="bf16"))
        except MemsymError:
            pass
    if megatron_states and trn.states.precision == "fp8" and trn.states.sharding == "distributed-optimizer" \
            and not trn.states.fp8_param_gather:
        try:
            yield ("fp8-param-gather", "linear weights in FP8 only", ("--fp8-param-gather",),
                   j.replace(fp8_param_gather=True))
        except MemsymError:
            pass


def _held(j: Job) -> dict:
    """The sizes and recompute modes the job's framework runs, as a search holds them
    (:attr:`memsym.frameworks.Framework.searched_sizes`: DeepSpeed's model code has no pipeline
    or context parallelism of memsym's and checkpoints whole layers): the advice offers no
    change a search of the same job would not try.  A size the job already sets outside the
    held ones (AutoTP's ``--tp``) is the user's to change."""
    held = dict(FRAMEWORK[j.training.framework].searched_sizes)
    now = {"tp": j.layout.t, "pp": j.layout.p, "cp": j.layout.c}
    return {k: v for k, v in held.items() if k not in now or now[k] in v}


def _candidates(j: Job, capacity: int):
    """(knob, change, flags, job) of every lever tried."""
    lay, trn = j.layout, j.training
    held = _held(j)
    for unknown, field, flag, word in _SIZES:
        new = _solved(j, unknown, capacity) if held.get(unknown, (0,)) != (1,) else None
        if new is not None and getattr(new.layout, field) != getattr(lay, field):
            value = getattr(new.layout, field)
            yield (unknown, f"{word} {getattr(lay, field)} -> {value}", (flag, str(value)), new)
    if trn.batch.micro_batch_size > 1:
        new = _solved(j, "micro-batch-size", capacity)
        if new is not None and new.training.batch.micro_batch_size < trn.batch.micro_batch_size:
            b = new.training.batch.micro_batch_size
            yield ("micro-batch-size", f"micro-batch size {trn.batch.micro_batch_size} -> {b}",
                   ("--micro-batch-size", str(b)), new)
    if trn.memory.recompute != "full":
        tries = [("selective", ("--recompute-granularity", "selective"), {})] \
            if trn.memory.recompute == "none" and "selective" in held.get(
                "recompute", ("selective",)) else []
        # every layer checkpointed on its own: Megatron's uniform 1
        tries.append(("full", ("--recompute-granularity", "full", "--recompute-method",
                               "uniform", "--recompute-num-layers", "1"),
                      {"recompute_method": "uniform", "recompute_num_layers": 1}))
        for mode, flags, extra in tries:
            try:
                yield ("recompute", f"recompute {trn.memory.recompute} -> {mode}", flags,
                       j.replace(recompute=mode, **extra))
            except MemsymError:
                pass
    for scheme in _OFFERED.get(trn.framework, ()):
        if scheme != trn.states.sharding:
            try:
                yield ("sharding", f"sharding {trn.states.sharding} -> {scheme}",
                       ("--sharding", scheme), j.replace(sharding=scheme))
            except MemsymError:
                pass
    yield from recipe_levers(j)
    if trn.states.offload == "none" and lay.p == 1:
        try:
            yield ("offload", "optimizer states on the host", ("--offload", "optimizer"),
                   j.replace(offload="optimizer"))
        except MemsymError:
            pass


def tried_changes(j: Job) -> tuple:
    """The knobs the levers of ``j`` change, in words, as :func:`levers` tries them: the sizes
    its framework's search would change (:func:`_held`: no p or c for a DeepSpeed job that
    sets none), the micro-batch above 1, recomputation short of full, another sharding
    scheme, and the optimizer offload without a pipeline.

    Examples
    --------
    >>> from memsym.job import job
    >>> tried_changes(job("llama2-7b", framework="deepspeed", micro_batch_size=2))
    ('d', 'the micro-batch', 'recomputation', 'sharding', 'offload')
    >>> tried_changes(job("llama2-7b", recompute="full"))[:4]
    ('d', 't', 'p', 'c')
    """
    lay, trn, held = j.layout, j.training, _held(j)
    out = [field for unknown, field, _, _ in _SIZES if held.get(unknown, (0,)) != (1,)]
    out += [word for word, tried in (
        ("the micro-batch", trn.batch.micro_batch_size > 1),
        ("recomputation", trn.memory.recompute != "full"),
        ("sharding", any(x != trn.states.sharding for x in _OFFERED.get(trn.framework, ()))),
        ("offload", trn.states.offload == "none" and lay.p == 1)) if tried]
    return tuple(out)


def levers(j: Job, capacity: int | None = None) -> list:
    r"""The changes of one knob each that make ``j`` fit ``capacity``, verified and ranked.

    .. math:: M_{\text{device}}(\text{job with one knob changed}) \le C

    Parameters
    ----------
    j : memsym.job.Job
        The job.
    capacity : int, optional
        GPU memory [bytes]; default the job's (its GPU's, :attr:`memsym.job.Job.capacity`).

    Returns
    -------
    list of Lever
        Ranked by step time where it is known (fastest first), then by the GPUs they need
        and the bytes they leave free; empty when no single change fits.

    Examples
    --------
    >>> from memsym.job import job
    >>> j = job("llama2-7b", seq_length=4096, gpu="h100-80gb")
    >>> best = levers(j)
    >>> all(lever.bytes_total <= j.capacity for lever in best), best[0].knob in {l.knob for l in best}
    (True, True)

    References
    ----------
    The solver (:func:`memsym.job_solver.solve_job`) on the total of :mod:`memsym.training`;
    the step time of :mod:`memsym.timing.step`.
    """
    cap = j.capacity if capacity is None else int(capacity)
    if cap is None:
        raise InvalidValueError("levers need a capacity: give the job a GPU or --gpu-memory")
    before = _device_total(j)
    out = []
    for knob, change, flags, new in _candidates(j, cap):
        try:
            total = _device_total(new)
        except MemsymError:      # a combination the model refuses (fp8 under FSDP): no lever
            continue
        if total > cap:          # verified on the estimate: only a change that fits is offered
            continue
        if new.world_size != j.world_size:   # the GPUs it needs, as the command line says it
            flags = (*flags, "--world-size", str(new.world_size))
        out.append(Lever(knob, change, tuple(flags), new, total, before - total,
                         new.world_size, _seconds(new)))
    inf = float("inf")
    out.sort(key=lambda lv: (inf if lv.step_time is None else lv.step_time, lv.gpus,
                             lv.bytes_total))
    return out
