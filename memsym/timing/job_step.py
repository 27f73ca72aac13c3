"""The step time of a validated :class:`~memsym.job.Job`: its model, layout, training step,
GPU, cluster and micro-batch count m, each as the job was built (nothing resolved or
recomputed again).

:func:`memsym.timing.step.step_time` takes the parts loosely, for records no rule validated
(a layout written by hand, a benchmark row); code that holds a Job calls :func:`job_step_time`.
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..job import Job
from .step import Overlap, StepTime, step_time

__all__ = ["job_step_time"]


def job_step_time(j: Job, *, overlap: Overlap | None = None, eta_gemm=None,
                  flops_per_token=None) -> StepTime:
    """:func:`memsym.timing.step.step_time` of ``j`` on its GPU and cluster, with its m.

    Parameters
    ----------
    j : Job
        A validated job with its GPU (``job(..., gpu=NAME)``) and m (a global batch or m).
    overlap : Overlap, optional
        The overlaps priced (default: the job's own, :func:`memsym.timing.step_settings.overlap_of`).
    eta_gemm : float, optional
        A fixed achieved GEMM efficiency in (0, 1] [1] instead of the shape-dependent curve.
    flops_per_token : float, optional
        Model FLOPs per token [FLOP/token] (adds the MFU).

    Returns
    -------
    StepTime
        The step time [s] with its breakdown.

    Examples
    --------
    >>> from memsym.job import job
    >>> j = job("llama3-8b", tp=2, dp=4, sequence_parallel=True, seq_length=4096,
    ...         global_batch_size=32, gpu="h100")
    >>> job_step_time(j).assumptions["microbatches"]      # m = 32/4, the job's
    8

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §3.1 (m = B / (d b) micro-batches per step).
    """
    if j.gpu is None:
        raise InvalidValueError("the step time needs the job's GPU (job(..., gpu=NAME), --gpu)")
    if j.m is None:
        raise InvalidValueError("give num_microbatches or global_batch_size to price a step")
    return step_time(j.model, j.layout, j.training, j.gpu.name, j.cluster, overlap=overlap,
                     eta_gemm=eta_gemm, flops_per_token=flops_per_token, m=j.m)
