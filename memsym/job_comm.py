"""The communication-overlap part of a job record (:class:`memsym.job_record.Training`'s
``comm``): which communications run hidden behind compute, and how context parallelism
exchanges keys and values."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CommOverlap"]


@dataclass(frozen=True)
class CommOverlap:
    """Which communications run hidden behind compute (for the step time).

    Attributes
    ----------
    overlap_grad_reduce, overlap_param_gather : bool or None
        Megatron's ``--overlap-grad-reduce`` (the DP gradient reduction in buckets during the
        backward) and ``--overlap-param-gather`` (the parameter all-gather during the next
        forward).  None: the framework's default
        (:meth:`memsym.frameworks.Framework.overlaps_by_default`).
    tp_comm_overlap, tp_comm_overlap_cfg : bool, str, tuple or None
        Megatron's ``--tp-comm-overlap`` (TE userbuffers: TP all-gather / reduce-scatter
        pipelined with their GEMMs; needs SP) and the userbuffers config: a Bridge recipe's name
        or ``--tp-comm-overlap-cfg``'s entries (None: TE's default; memsym.timing.userbuffers).
    overlap_moe_expert_parallel_comm : bool
        Megatron's ``--overlap-moe-expert-parallel-comm`` (default off): the EP all-to-all
        hidden behind another micro-batch's compute (``TransformerConfig``'s conditions).
    cp_comm_type : str or None
        How context-parallel attention exchanges keys and values (memory and time): Megatron's
        ``--cp-comm-type`` p2p, allgather or a2a, torchtitan's rotate method allgather or
        alltoall; None = the framework's default (:mod:`memsym.terms.context_parallel`).
    """

    overlap_grad_reduce: bool | None = None
    overlap_param_gather: bool | None = None
    tp_comm_overlap: bool = False
    overlap_moe_expert_parallel_comm: bool = False
    cp_comm_type: str | None = None
    tp_comm_overlap_cfg: str | tuple | None = None
