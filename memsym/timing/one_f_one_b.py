r"""The exact makespan of 1F1B (v = 1) with a first, middle and last stage of their own.

Megatron-LM's non-interleaved 1F1B (``forward_backward_pipelining_without_interleaving``,
memsym's op order :func:`memsym.terms.pipeline_rank_order.rank_order`) run on its data
dependencies is a longest path through a DAG of 2 p m passes.  Where the first stage, the
p - 2 middle stages and the last stage each take their own forward f and backward b of a
micro-batch (the step time's stages, :func:`memsym.timing.pipeline.stage_times`), that longest
path is the largest of a few sums of those six durations, each with whole coefficients in p
and m (:func:`one_f_one_b_makespan`), so a grid of layouts is priced exactly at numpy speed
instead of a simulation per layout (:func:`memsym.timing.pipeline.simulated_pipeline`).  The
search and ``memsym estimate`` then price the same makespan.

References
----------
.. [megatron-lm] core/pipeline_parallel/schedules.py
   (forward_backward_pipelining_without_interleaving: warm-up min(p - r - 1, m) forwards,
   then one forward and one backward, then the cool-down backwards), rev d98e8a64dd.
.. [narayanan] arXiv:2104.04473 §2.2.1 (1F1B).
"""

from __future__ import annotations

import numpy as np

__all__ = ["one_f_one_b_makespan", "pass_durations", "exact_one_f_one_b", "alike_ranks"]


def one_f_one_b_makespan(p, m, fwd: tuple, bwd: tuple):
    r"""Makespan of 1F1B (v = 1) with its own first, middle and last stage durations [s].

    With :math:`q = p - 2` middle stages, :math:`\tau = f + b`,
    :math:`h_f = \max(f_1, f_{\text{mid}}, \tau_L)` and :math:`h_b = \max(b_1, b_{\text{mid}},
    \tau_L)`, the longest path through the schedule is the largest of

    .. math::

        T_{\text{last}} &= \tau_1 + q\,\tau_{\text{mid}} + m\,\tau_L \\
        T_{\text{mid}} &= \tau_1 + (m + q - 1)\,\tau_{\text{mid}} + (h_f - f_{\text{mid}})
            + (h_b - b_{\text{mid}}) \quad (p \ge 3,\ m \ge 2) \\
        T_{\text{first}} &= m\,\tau_1 + \max\bigl((q + 1) f_1,\ q\,\tau_{\text{mid}} + h_f\bigr)
            - (q + 1) f_1 + \max\bigl((q + 1) b_1,\ q\,\tau_{\text{mid}} + h_b\bigr)
            - (q + 1) b_1 \quad (m \ge p) \\
        T_{\text{first}} &= \max\bigl(m\,\tau_1 + (p - m)\,\tau_{\text{mid}},\
            q\,\tau_{\text{mid}} + \max(m\,b_1 + f_1 + h_f,\ m\,f_1 + b_1 + h_b)\bigr)
            \quad (2 \le m < p)

    each a path: along the stage that runs most (the last, a middle one, the first) with the
    fill and drain through the others and, where it pays, a detour down the pipeline at the
    start (the forwards) or the end (the backwards) that skips some of the dwelling stage's
    passes.  m = 1: the one micro-batch through every stage, :math:`T_{\text{last}}`.  Where
    the last stage is the slowest, forward and backward, :math:`T_{\text{last}}` is the
    largest: Narayanan's :math:`m\,\tau_{\max} + \sum_r \tau_r - \tau_{\max}`.  Otherwise
    the makespan differs from that form, below it (the first stage heavier in both passes:
    its fill overlaps) or above it (p = 3, m = 4, forward 0.1, 5, 1 and backward 10, 0.1, 1:
    50.3 against 47.5).  Equal to the simulated schedule (the longest
    path, :func:`memsym.terms.pipeline_order.simulate`) to floating rounding:
    tests/test_one_f_one_b.py checks it on random durations for p = 2..16 and m = 1..4p + 5.

    Parameters
    ----------
    p, m : array_like
        Pipeline-parallel size [GPUs] (>= 2) and micro-batches [1] (>= 1).
    fwd, bwd : tuple of array_like
        ``(first, middle, last)``: each stage's forward / backward of one micro-batch [s]
        (the middle one ignored at p = 2).

    Returns
    -------
    numpy.ndarray
        The makespan [s].

    Examples
    --------
    p = 2, m = 2, first stage f = 2, b = 4, last f = b = 1 (traced by hand: rank 0 F0
    [0, 2] F1 [2, 4]; rank 1 F0 [2, 3] B0 [3, 4]; rank 0 B0 [4, 8]; rank 1 F1 [4, 5]
    B1 [5, 6]; rank 0 B1 [8, 12]): 12, below Narayanan's 2 x 6 + 2 = 14.

    >>> float(one_f_one_b_makespan(2, 2, (2.0, 0.0, 1.0), (4.0, 0.0, 1.0)))
    12.0

    References
    ----------
    .. [megatron-schedules] forward_backward_pipelining_without_interleaving (rev d98e8a6).
    .. [narayanan] arXiv:2104.04473 §2.2.1.
    """
    p, m = np.asarray(p, dtype=float), np.asarray(m, dtype=float)
    f1, fl = (np.asarray(x, dtype=float) for x in (fwd[0], fwd[2]))
    b1, bl = (np.asarray(x, dtype=float) for x in (bwd[0], bwd[2]))
    # no middle stage at p = 2: its durations take no part
    fm, bm = (np.where(p > 2, np.asarray(x, dtype=float), 0.0) for x in (fwd[1], bwd[1]))
    q = np.maximum(p - 2, 0)
    t1, tm, tl = f1 + b1, fm + bm, fl + bl
    qtm = q * tm
    # max(f_1, f_mid, tau_L): the detours' best turn, the forwards' and the backwards'
    hf, hb = np.maximum(np.maximum(f1, fm), tl), np.maximum(np.maximum(b1, bm), tl)
    last = t1 + qtm + m * tl
    middle = t1 + (m + q - 1) * tm + (hf - fm) + (hb - bm)
    # T_first, m >= p: each detour max(0, ...) written as max((q + 1) x_1, q tau_mid + h)
    # less (q + 1) x_1, the three non-zero terms' common q tau_mid taken out
    steady = (m * t1 + (np.maximum((q + 1) * f1, qtm + hf) - (q + 1) * f1)
              + (np.maximum((q + 1) * b1, qtm + hb) - (q + 1) * b1))
    short = np.maximum(m * t1 + (p - m) * tm, qtm + np.maximum(m * b1 + f1 + hf, m * f1 + b1 + hb))
    out = np.maximum(last, np.where((p > 2) & (m >= 2), middle, -np.inf))
    return np.maximum(out, np.where(m >= 2, np.where(m >= p, steady, short), -np.inf))


def pass_durations(pipeline, tau: dict, p2p_exposed, p, m, v) -> tuple:
    r"""The common grid of a pipeline's rows and each stage role's pass seconds on it [s].

    .. math:: d^{F}_r = \tau^{F}_r + \pi,\qquad d^{B}_r = \tau^{B}_r + \pi,\qquad
        r \in (\text{first}, \text{middle}, \text{last})

    a forward or backward of one micro-batch through the role's stage with its exposed PP
    p2p seconds :math:`\pi` added, broadcast to the shape of ``pipeline``, ``p``, ``m``,
    ``v``, ``p2p_exposed`` and ``tau`` together.

    Parameters
    ----------
    pipeline : numpy.ndarray
        Only its shape is read: one row per layout [s].
    tau : dict
        Role name to its stage's (forward, backward) of one micro-batch [s].
    p2p_exposed : array_like
        What every pass adds: exposed p2p [s].
    p, m, v : array_like
        Their shapes only: stages [GPUs], micro-batches [1], chunks [1].

    Returns
    -------
    tuple
        (shape, forward seconds of the three roles, backward seconds of the three roles) [s].

    Examples
    --------
    >>> tau = {"first": (2.0, 4.0), "middle": (1.0, 2.0), "last": (1.0, 1.0)}
    >>> shape, fwd, bwd = pass_durations(np.zeros(3), tau, 0.5, 2, 4, 1)
    >>> shape, [float(x[0]) for x in fwd], [float(x[0]) for x in bwd]
    ((3,), [2.5, 1.5, 1.5], [4.5, 2.5, 1.5])

    References
    ----------
    .. [megatron-schedules] forward_backward_pipelining_without_interleaving (rev d98e8a6).
    """
    roles = ("first", "middle", "last")
    shape = np.broadcast_shapes(np.shape(pipeline), np.shape(p), np.shape(m), np.shape(v),
                                np.shape(p2p_exposed),
                                *(np.shape(x) for r in roles for x in tau[r]))
    fwd = [np.broadcast_to(tau[r][0] + p2p_exposed, shape) for r in roles]
    bwd = [np.broadcast_to(tau[r][1] + p2p_exposed, shape) for r in roles]
    return shape, fwd, bwd


def exact_one_f_one_b(st, pipeline, tau: dict, p2p_exposed, p, m, v):
    r"""The pipeline seconds of a grid, its 1F1B rows priced exactly [s].

    ``pipeline`` with its 1F1B rows (v = 1, p > 1, not GPipe) replaced by the exact makespan
    of their stages:

    .. math:: T = \text{one\_f\_one\_b\_makespan}(p, m;\ f_r + t^{\text{p2p}},\
        b_r + t^{\text{p2p}})

    each stage's forward and backward from ``tau`` (:func:`memsym.timing.pipeline.
    stage_times`: ``first``, ``middle``, ``last``) plus the exposed p2p, as the simulated
    schedule takes them (:func:`memsym.timing.pipeline.simulated_pipeline`).

    Parameters
    ----------
    st : memsym.timing.records.Settings
        The schedule (GPipe rows are left as given).
    pipeline : array_like
        The pipeline seconds of every row, kept where the form does not apply [s].
    tau : dict
        Each stage's (forward, backward) seconds [s].
    p2p_exposed : array_like
        Exposed PP p2p seconds per direction and stage-microbatch [s].
    p, m, v : array_like
        Pipeline-parallel size [GPUs], micro-batches [1] and model chunks per rank [1].

    Returns
    -------
    numpy.ndarray
        The pipeline seconds [s].

    Examples
    --------
    >>> from memsym.timing.records import Settings
    >>> tau = {"first": (2.0, 4.0), "middle": (0.0, 0.0), "last": (1.0, 1.0)}
    >>> float(exact_one_f_one_b(Settings(), 14.0, tau, 0.0, 2, 2, 1))   # hand: see above
    12.0

    References
    ----------
    .. [megatron-schedules] forward_backward_pipelining_without_interleaving (rev d98e8a6).
    """
    pipeline = np.asarray(pipeline, dtype=float)
    if st.schedule == "gpipe":
        return pipeline
    shape, fwd, bwd = pass_durations(pipeline, tau, p2p_exposed, p, m, v)
    out = np.array(np.broadcast_to(pipeline, shape))
    # the 1F1B rows only, by index (a boolean mask gathers several times slower)
    rows = np.flatnonzero((np.broadcast_to(v, shape) == 1) & (np.broadcast_to(p, shape) > 1))
    if rows.size:
        def take(x):
            return np.broadcast_to(x, shape).ravel().take(rows)
        out.reshape(-1)[rows] = one_f_one_b_makespan(
            take(p), np.maximum(take(m), 1), [take(x) for x in fwd], [take(x) for x in bwd])
    return out


def alike_ranks(chunk_tau: tuple):
    r"""One chunk per rank whose middle ranks run alike as a first, middle and last stage [s].

    .. math:: \tau = \{\text{first}: (f_0, b_0),\ \text{middle}: (f_1, b_1),\
        \text{last}: (f_{p-1}, b_{p-1})\}

    from :func:`memsym.timing.pipeline.chunk_times`' per-rank durations of a custom layout
    (``--pipeline-model-parallel-layout`` with one chunk per rank), or None where the ranks
    are not one chunk each or ranks 1 .. p - 2 differ.

    Parameters
    ----------
    chunk_tau : tuple
        ``(forward, backward)``: per rank, a list of its chunks' seconds [s].

    Returns
    -------
    dict or None
        Each stage's (forward, backward) seconds [s].

    Examples
    --------
    >>> alike_ranks(([[1.0], [2.0], [2.0], [1.5]], [[2.0], [4.0], [4.0], [3.0]]))
    {'first': (1.0, 2.0), 'middle': (2.0, 4.0), 'last': (1.5, 3.0)}
    >>> alike_ranks(([[1.0], [2.0], [3.0], [1.5]], [[2.0], [4.0], [4.0], [3.0]])) is None
    True

    References
    ----------
    Megatron-LM pipeline_parallel_layer_layout.py ``get_num_layers_to_build`` (rev d98e8a6).
    """
    fw, bw = chunk_tau
    if any(len(row) != 1 for row in (*fw, *bw)) or len(fw) < 2:
        return None
    f, b = [row[0] for row in fw], [row[0] for row in bw]
    mid = 1 if len(f) > 2 else 0
    if not all(np.array_equal(f[r], f[mid]) and np.array_equal(b[r], b[mid])
               for r in range(1, len(f) - 1)):
        return None
    return {"first": (f[0], b[0]), "middle": (f[mid], b[mid]), "last": (f[-1], b[-1])}
