"""Megatron-LM's op order on one pipeline rank: which forward and backward passes it issues,
in which order (the interleaved schedule table; 1F1B's warm-up, steady state and cool-down;
GPipe's and torch's breadth-first ``ScheduleLoopedBFS`` order).

:mod:`memsym.terms.pipeline_order` runs these orders on their data dependencies (the exact
bubble, what a rank holds in flight); :mod:`memsym.timing.interleaved` prices the
interleaved schedule's longest path over them.

References
----------
.. [megatron-lm] megatron/core/pipeline_parallel/schedules.py (rev d98e8a6):
   get_pp_rank_microbatches (num_warmup_microbatches = 2(p - rank - 1) + (v - 1) N, capped at
   m v; 1F1B: p - rank - 1 capped at m), get_schedule_table.
.. [torch] torch/distributed/pipelining/schedules.py: ScheduleGPipe, ScheduleLoopedBFS
   (``_calculate_single_rank_operations``).
"""

from __future__ import annotations

__all__ = ["schedule_table", "rank_order"]


def schedule_table(m: int, v: int, N: int) -> list:
    """Megatron's ``get_schedule_table``: (microbatch, chunk) of each virtual forward.

    Parameters
    ----------
    m : int
        Micro-batches per step [1].
    v : int
        Model chunks per rank [1].
    N : int
        ``microbatch_group_size_per_vp_stage``: micro-batches per group (not parameters).

    Returns
    -------
    list of (int, int)
        ``(microbatch, chunk)`` in issue order.

    Examples
    --------
    The docstring example of schedules.py (PP2, N3, M5, VP2):

    >>> [mb for mb, _ in schedule_table(5, 2, 3)], [ch for _, ch in schedule_table(5, 2, 3)]
    ([0, 1, 2, 0, 1, 2, 3, 4, 3, 4], [0, 0, 0, 1, 1, 1, 0, 0, 1, 1])
    """
    out = []
    for lo in range(0, m, N):
        hi = m if lo + N >= m else lo + N
        out.extend((mb, ch) for ch in range(v) for mb in range(lo, hi))
    return out


def rank_order(rank: int, p: int, m: int, v: int = 1, N=None, gpipe: bool = False) -> list:
    """Ops of one rank in issue order: ('F'|'B', microbatch, chunk).

    GPipe (``gpipe=True``, v = 1): every forward, then every backward in micro-batch order
    (torch.distributed.pipelining ScheduleGPipe).  With v > 1 chunks, breadth-first as torch's
    ``ScheduleLoopedBFS`` orders it (``_calculate_single_rank_operations``): every micro-batch
    through chunk 0, then chunk 1, ...; then the backwards chunk by chunk from the last, each
    chunk's micro-batches in reverse.

    Parameters
    ----------
    rank : int
        The pipeline rank, 0 .. p−1.
    p : int
        Pipeline-parallel size (stages) [GPUs].
    m : int
        Micro-batches per step [1].
    v : int
        Model chunks per rank [1].
    N : int, optional
        ``microbatch_group_size_per_vp_stage``: micro-batches per group (default p; not
        parameters).
    gpipe : bool
        GPipe's order (breadth-first over the chunks when v > 1) instead of (interleaved)
        1F1B.

    Returns
    -------
    list of (str, int, int)
        ``('F'|'B', microbatch, chunk)`` in issue order.

    Examples
    --------
    >>> rank_order(0, 2, 3)
    [('F', 0, 0), ('F', 1, 0), ('B', 0, 0), ('F', 2, 0), ('B', 1, 0), ('B', 2, 0)]
    >>> rank_order(0, 2, 2, gpipe=True)
    [('F', 0, 0), ('F', 1, 0), ('B', 0, 0), ('B', 1, 0)]
    >>> rank_order(0, 2, 2, 2, gpipe=True)    # LoopedBFS
    [('F', 0, 0), ('F', 1, 0), ('F', 0, 1), ('F', 1, 1), ('B', 1, 1), ('B', 0, 1), ('B', 1, 0), ('B', 0, 0)]
    """
    N = p if N is None else N
    if gpipe and v == 1:
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if gpipe:
        return [("F", i, ch) for ch in range(v) for i in range(m)] + \
            [("B", i, ch) for ch in reversed(range(v)) for i in reversed(range(m))]
    total = m * v
    if v == 1:
        table = [(i, 0) for i in range(m)]
        warm = min(p - rank - 1, m)
    else:
        table = schedule_table(m, v, N)
        warm = 2 * (p - rank - 1) + (v - 1) * N
    warm = min(warm, total)
    fwd = [("F", mb, ch) for mb, ch in table]
    bwd = [("B", mb, v - 1 - ch) for mb, ch in table]
    order = fwd[:warm]
    for i in range(total - warm):
        order.append(fwd[warm + i])
        order.append(bwd[i])
    order.extend(bwd[total - warm:])
    return order
