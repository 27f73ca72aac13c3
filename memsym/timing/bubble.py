r"""The pipeline bubble in stage units of every layout of a grid, and whether Megatron launches it.

:func:`bubble_in_stages` prices each distinct (p, m, v, micro-batch group, backward/forward
ratio) of a grid once with the schedule's exact bubble
(:func:`memsym.terms.pipeline_order.bubble_fraction`) and Megatron's interleaving rule
(:func:`memsym.terms.pipeline_order.schedule_rule`), and remembers the grids a search prices
again; the stages, their times and the simulated schedule are :mod:`memsym.timing.pipeline`'s.

References
----------
.. [narayanan] arXiv:2104.04473 §2.2.
.. [megatron-schedules] core/pipeline_parallel/schedules.py at d98e8a64dd.
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import InvalidValueError
from ..distinct_rows import unique_rows
from ..terms.pipeline_order import bubble_fraction, schedule_rule
from .pipeline import microbatch_group
from .records import Settings

__all__ = ["bubble_in_stages"]


def bubble_in_stages(st: Settings, p, m, v) -> tuple:
    r"""The exact bubble in stage units of every layout, and whether Megatron launches it.

    .. math:: \beta = m\,\text{bubble\_fraction}(p, m, v, N, 2 + r)

    one schedule per distinct (p, m, v, backward/forward ratio :math:`2 + r`, r the full
    recompute fraction); 1F1B gives :math:`p - 1`, the interleaved schedule
    :math:`(p - 1)/v`.  ``launchable``: Megatron's interleaving rule (GPipe has none).

    Parameters
    ----------
    st : Settings
        The schedule, the micro-batch group size and the full recompute fraction.
    p, m, v : numpy.ndarray
        Pipeline-parallel size [GPUs], micro-batches [1] and model chunks per rank [1].

    Examples
    --------
    >>> # hand: 1F1B, p = 4: (p - 1) = 3 stage units of bubble (arXiv:2104.04473 §2.2.1)
    >>> beta, ok = bubble_in_stages(Settings(), np.array([4.0]), np.array([8.0]), np.array([1.0]))
    >>> float(beta[0]), bool(ok[0])
    (3.0, True)

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §2.2.1 (1F1B), §2.2.2 (interleaved: (p - 1)/v).
    .. [megatron-schedules] forward_backward_pipelining_with_interleaving (its rule).
    """
    frac = np.broadcast_to(np.asarray(st.recompute_fraction if st.recompute == "full" else 0.0,
                                      dtype=float), p.shape)
    # what the bubble reads of the settings (the schedule, microbatch_group's two) and of
    # the grid: a search prices the same (p, m, v) under each of its choices
    key = (st.schedule, st.torch_rounds, st.group_size,
           *((a.shape, a.dtype.str, a.tobytes()) for a in map(np.asarray, (p, m, v, frac))))
    if key not in _BUBBLES:
        if len(_BUBBLES) >= 8:     # a search's few grids; each key holds its arrays' bytes
            _BUBBLES.clear()
        _BUBBLES[key] = _bubble_grid(st, p, m, v, frac)
    beta, launchable = _BUBBLES[key]
    return beta.copy(), launchable.copy()


#: :func:`bubble_in_stages`' results by its inputs (the settings it reads, the arrays' bytes).
_BUBBLES: dict = {}


def _bubble_grid(st: Settings, p, m, v, frac) -> tuple:
    # exact bubble in stage units per unique (p, m, v, N, backward/forward ratio)
    ratios = 2 + frac
    uniq, inv = unique_rows(p.ravel().astype(int), m.ravel().astype(int), v.ravel().astype(int),
                            np.round(frac.ravel() * 2**24).astype(np.int64))
    if len(uniq) > 20_000:
        raise InvalidValueError(f"{len(uniq)} distinct (p, m, v) exceed 20,000")
    first_of = np.zeros(len(uniq), dtype=np.int64)
    first_of[inv.ravel()[::-1]] = np.arange(inv.size)[::-1]     # a row of each distinct key
    vals = np.empty(len(uniq))
    ok = np.empty(len(uniq), dtype=bool)
    for i, (pp_, mm_, vv_, _) in enumerate(uniq):
        ratio = float(ratios.ravel()[first_of[i]])
        N = microbatch_group(st, int(pp_), int(mm_), int(vv_))
        sched = "gpipe" if st.schedule == "gpipe" else ("1f1b" if vv_ == 1 else "interleaved")
        vals[i], ok[i] = _bubble_entry(sched, int(pp_), int(mm_), int(vv_), N, ratio)
    beta = vals[inv.ravel()].reshape(p.shape)
    launchable = ok[inv.ravel()].reshape(p.shape)
    return beta, launchable


@functools.lru_cache(maxsize=65536)
def _bubble_entry(sched: str, pp_: int, mm_: int, vv_: int, N, ratio: float) -> tuple:
    # (bubble in stage units, launchable) of one distinct layout: remembered, since a search
    # prices the same (p, m, v) under each of its recompute / SP / sharding choices
    val = float(bubble_fraction(sched, pp_, mm_, vv_, N, backward_ratio=ratio)) * mm_
    # Megatron's interleaving rule; GPipe / torch's LoopedBFS have none
    return val, sched == "gpipe" or schedule_rule(pp_, mm_, vv_, N) is None
