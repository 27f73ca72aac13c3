r"""The exact makespan of the interleaved schedule (v > 1) of a grid of layouts, vectorised.

Megatron-LM's ``forward_backward_pipelining_with_interleaving`` run on its data dependencies
(:func:`memsym.terms.pipeline_order.simulate`) is a longest path through a DAG of 2 p m v
chunk passes whose shape depends on (p, m, v, N) alone: the durations only weight it.  So
each distinct (p, m, v, N) is ordered once (:func:`schedule_levels`, remembered) into
levels of passes whose predecessors all lie in earlier levels, and the longest path of every
layout of that shape is then one numpy step per level over all of them
(:func:`interleaved_makespan`): each pass ends at the later of its rank's previous pass and
its dependency, plus its own duration, in the simulation's own arithmetic, so the search and
``memsym estimate`` price the same makespan to the last bit.  A level's step costs about the
same for one layout as for thousands, but a schedule has about 2 m v + 2 p v levels and a
search prices each of its (recompute, SP, sharding) groups apart, so only schedules of at
most :data:`MAX_PASSES` passes take it; larger ones keep the closed form
(:func:`exact_interleaved`), off the simulated schedule by up to a few per cent where the
end stages differ (no closed form of the interleaved longest path with unequal stages is
known to memsym: the critical paths found for p = 2 alone fall into a dozen families).

References
----------
.. [megatron-lm] core/pipeline_parallel/schedules.py (forward_backward_pipelining_with_
   interleaving: num_warmup_microbatches = (p - rank - 1) * 2 + (v - 1) *
   microbatch_group_size_per_vp_stage, capped at m v; get_schedule_table), rev d98e8a64dd.
.. [narayanan] arXiv:2104.04473 §2.2.2 (the interleaved schedule).
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np

from .. import compile_cache
from ..errors import InvalidValueError
from ..distinct_rows import unique_rows
from ..terms.pipeline_rank_order import rank_order
from .one_f_one_b import pass_durations
from .pipeline import microbatch_group

__all__ = ["MAX_PASSES", "schedule_levels", "interleaved_makespan", "exact_interleaved",
           "exact_interleaved_many", "priced_together"]

#: The most chunk passes (2 p m v) of one (p, m, v, N) shape priced by its exact longest
#: path in a grid; larger shapes keep the closed form (their levels, one numpy step each,
#: would outweigh the rest of a search).  1024 (was 128): pp 4, vpp 2 up to m = 64, where a
#: search row with uneven end stages was ~0.4 % off ``memsym estimate`` (the closed form);
#: a default search of llama3-70b on 64 / 256 H100s took ~1.5 s before, ~2-3 s after (two
#: shared cores; unlimited: 28 s / 70 s).
MAX_PASSES = 1024


@functools.lru_cache(maxsize=512)
def schedule_levels(p: int, m: int, v: int, group: int) -> tuple:
    r"""The passes of one interleaved schedule in levels of its DAG, for vectorised pricing.

    .. math:: \ell(\pi) = 1 + \max\bigl(\ell(\pi^{-}_{r}),\ \ell(\operatorname{dep}\pi)\bigr)

    each pass :math:`\pi` (a forward or backward of one micro-batch through one chunk) one
    level after its rank's previous pass and its dependency (the previous virtual stage's
    forward; the next one's backward, or its own forward on the last), in Megatron's op order
    (:func:`memsym.terms.pipeline_rank_order.rank_order`).

    Parameters
    ----------
    p, m, v : int
        Pipeline-parallel size [GPUs], micro-batches [1] and model chunks per rank [1].
    group : int
        ``microbatch_group_size_per_vp_stage`` N [1].

    Returns
    -------
    tuple
        ``(levels, ends, n)``, the passes numbered in level order: per level ``(lo, hi,
        rank_previous, dependency, duration)``, its passes ``lo .. hi - 1`` and their
        predecessors' and duration's index arrays [1] (a missing predecessor is pass ``n``,
        which ends at 0; the duration index 0..5 is forward of the first, middle, last rank,
        then backward); ``ends`` the last pass of each rank [1]; ``n`` the number of passes
        [1].  None where the order
        deadlocks (some layouts Megatron refuses: m mod N in (0, p)).

    Examples
    --------
    >>> levels, ends, n = schedule_levels(2, 2, 2, 2)
    >>> n, len(levels)          # by hand: 2 p m v = 16 passes; rank 0's 8 in a row at least
    (16, 10)

    References
    ----------
    .. [megatron-schedules] forward_backward_pipelining_with_interleaving (rev d98e8a64dd).
    """
    shape = (p, m, v, group)
    if 2 * p * m * v > MAX_PASSES:       # not a search's: ordered, not kept
        return _ordered(p, m, v, group)
    kept = _kept()["table"]
    if shape in kept:               # ordered by an earlier process (the compile cache)
        _kept()["used"].add(shape)
        try:
            return _unpacked(kept[shape])
        except (TypeError, ValueError):    # another layout of the entry: ordered again
            pass
    got = _ordered(p, m, v, group)
    kept[shape] = _packed(got)
    _kept()["used"].add(shape)
    _kept()["dirty"] = True
    return got


def _ordered(p: int, m: int, v: int, group: int):
    # schedule_levels of a shape no process kept: the schedule's passes in levels
    orders = [rank_order(r, p, m, v, group) for r in range(p)]
    index, level = {}, []
    rows = []          # (pass, rank previous, dependency, duration index)
    # terms.pipeline_order.ready_passes inlined (a tenth of a new process's search runs
    # here): the ranks in turn, each as far as its next pass's dependency
    # (pass_dependency) has run, the same passes in the same order
    prev, pos, last, progressed = [-1] * p, [0] * p, p * v - 1, True
    while progressed:
        progressed = False
        for r in range(p):
            order, k, pr = orders[r], pos[r], prev[r]
            role = 0 if r == 0 else (2 if r == p - 1 else 1)
            while k < len(order):
                kind, mb, ch = order[k]
                gs = ch * p + r
                if kind == "F":
                    dep = ("F", mb, gs - 1) if gs > 0 else None
                else:
                    dep = ("B", mb, gs + 1) if gs < last else ("F", mb, gs)
                d = -1 if dep is None else index.get(dep)
                if d is None:
                    break           # its dependency has not run yet
                i = len(level)
                level.append(1 + max(level[pr] if pr >= 0 else -1, level[d] if d >= 0 else -1))
                rows.append((i, pr, d, role + (3 if kind == "B" else 0)))
                index[(kind, mb, gs)] = pr = i
                k += 1
                progressed = True
            pos[r], prev[r] = k, pr
    if len(rows) < 2 * p * m * v:
        return None      # a layout Megatron refuses (m mod N below p) can deadlock
    n = len(rows)
    # renumbered in level order, each level a contiguous run: a level's step writes a slice
    lev = np.array(level)
    order = np.argsort(lev, kind="stable")
    pos = np.empty(n + 1, dtype=np.intp)
    pos[order], pos[n] = np.arange(n), n
    arr = np.array(rows, dtype=np.intp)[order]
    arr[arr < 0] = n
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(lev[order])) + 1, [n]]).tolist()
    # each column renumbered once, each level a slice of it (as _unpacked gives them)
    prev_, dep_, which = pos[arr[:, 1]], pos[arr[:, 2]], np.ascontiguousarray(arr[:, 3])
    levels = tuple((lo, hi, prev_[lo:hi], dep_[lo:hi], which[lo:hi])
                   for lo, hi in zip(bounds[:-1], bounds[1:]))
    return levels, pos[np.array(prev, dtype=np.intp)], n


#: The schedules ordered so far and those the compile cache kept (memsym.compile_cache.
#: store_data: ordering a search's schedules, tens of thousands of passes in Python, is a
#: tenth of a second of a new process): ``digest`` (None: no cache), ``table`` (shape ->
#: packed levels), ``used`` (the shapes this process asked for), ``dirty``.
_KEPT: dict = {}


def _kept() -> dict:
    if not _KEPT:
        digest = None if compile_cache.cache_dir() is None else \
            compile_cache.input_key("interleaved schedule levels 1")
        table = None if digest is None else compile_cache.load_data(digest)
        _KEPT.update(digest=digest, table=table if isinstance(table, dict) else {}, used=set(),
                     dirty=False)
    return _KEPT


def _packed(got):
    # schedule_levels' value as marshal writes it: level bounds and index columns as bytes
    if got is None:
        return None
    levels, ends, n = got
    bounds = [lo for lo, *_ in levels] + [n]
    cols = (np.concatenate([lv[i] for lv in levels]).astype(np.int32).tobytes()
            for i in (2, 3, 4))
    return (np.array(bounds, dtype=np.int32).tobytes(), *cols,
            np.asarray(ends, dtype=np.int32).tobytes(), n)


def _unpacked(kept):
    # _packed's value back as schedule_levels returns it (the same index values and types)
    if kept is None:
        return None
    bounds, prev, dep, which, ends, n = kept
    b = np.frombuffer(bounds, dtype=np.int32).tolist()
    prev, dep, which, ends = (np.frombuffer(x, dtype=np.int32).astype(np.intp)
                              for x in (prev, dep, which, ends))
    return tuple((lo, hi, prev[lo:hi], dep[lo:hi], which[lo:hi])
                 for lo, hi in zip(b[:-1], b[1:])), ends, n


def _save_levels() -> None:
    # the schedules ordered in this process, kept in the compile cache for the next one: all
    # those kept, or where they exceed its size bound the ones this process used
    kept = _kept()
    if not kept["dirty"] or kept["digest"] is None:
        return
    table = kept["table"]
    if not compile_cache.store_data(kept["digest"], table):
        compile_cache.store_data(kept["digest"], {k: table[k] for k in kept["used"]})
    kept["dirty"] = False


def interleaved_makespan(p: int, m: int, v: int, group: int, fwd: tuple, bwd: tuple):
    r"""Makespan of the interleaved schedule of many layouts of one shape [s].

    .. math:: e(\pi) = \max\bigl(e(\pi^{-}_{r}),\ e(\operatorname{dep}\pi)\bigr)
        + \frac{d_r}{v},\qquad T = \max_\pi e(\pi)

    the simulated schedule's recurrence (:func:`memsym.terms.pipeline_order.simulate`) with
    rank r's whole-stage forward or backward :math:`d_r` split evenly over its v chunks, the
    ranks the first, p - 2 middle ones and the last, run level by level
    (:func:`schedule_levels`) over all layouts at once.

    Parameters
    ----------
    p, m, v, group : int
        Pipeline-parallel size [GPUs], micro-batches [1], model chunks per rank [1] and the
        micro-batch group size N [1].
    fwd, bwd : tuple of array_like
        ``(first, middle, last)``: each stage's forward / backward of one micro-batch [s],
        arrays of the layouts, broadcast together.

    Returns
    -------
    numpy.ndarray
        The makespan of each layout [s].

    Examples
    --------
    Equal stages, m a multiple of p: :math:`(m v + p - 1)(f + b)/v` (Narayanan §2.2.2; by
    hand: (4 x 2 + 2 - 1) x 3 / 2 = 13.5):

    >>> float(interleaved_makespan(2, 4, 2, 2, (1.0, 1.0, 1.0), (2.0, 2.0, 2.0)))
    13.5

    References
    ----------
    .. [megatron-schedules] forward_backward_pipelining_with_interleaving (rev d98e8a64dd).
    """
    got = _level_plan(p, m, v, group)
    if got is None:
        raise InvalidValueError(f"schedule p={p} m={m} v={v} N={group} deadlocks")
    levels, ends, n = got
    # the simulation's chunk durations: the whole stage's float over v
    vals = np.broadcast_arrays(*(np.asarray(x, dtype=float) / v for x in (*fwd, *bwd)))
    dur = np.stack([x.ravel() for x in vals])
    end = np.zeros((n + 1, dur.shape[1]))
    rows, dur_rows = list(end), list(dur)     # each pass's row (a view): one-pass steps
    maximum, add = np.maximum, np.add
    for dst, prev, dep, which in levels:
        if type(dst) is int:                  # one pass (_level_plan): its rows as they are
            step = rows[dst]
            maximum(rows[prev], rows[dep], out=step)
            add(step, dur_rows[which], out=step)
            continue
        step = end[dst]
        maximum(end[prev], end[dep], out=step)
        add(step, dur[which], out=step)
    return end[ends].max(axis=0).reshape(vals[0].shape)


@functools.lru_cache(maxsize=512)
def _level_plan(p: int, m: int, v: int, group: int):
    # schedule_levels with each level's rows as basic indices where they are evenly spaced
    # (views, no copy: a level's step is a few numpy calls, and a search runs tens of
    # thousands); the same rows, so the same arithmetic to the last bit
    # (p = 2: a level holds one or two passes, each a step on its own rows, two numpy calls
    # where indexing the level's rows takes as many again)
    got = schedule_levels(p, m, v, group)
    if got is None:
        return None
    levels, ends, n = got
    if p == 2:
        # the passes are numbered in level order, the levels contiguous runs of 0 .. n - 1:
        # their columns joined once, not listed level by level (a thousand levels a shape)
        prev, dep, which = (np.concatenate([lv[i] for lv in levels]).tolist() for i in (2, 3, 4))
        return tuple(zip(range(n), prev, dep, which)), ends, n
    return tuple((slice(lo, hi), _rows(prev), _rows(dep), _rows(which))
                 for lo, hi, prev, dep, which in levels), ends, n


def _rows(index):
    # the rows ``index`` (an index array) as a slice where evenly spaced (one row repeated:
    # a one-row slice the level broadcasts), else the array itself
    rows = index.tolist()
    first, step = rows[0], (rows[1] - rows[0] if len(rows) > 1 else 0)
    if step == 0:
        return slice(first, first + 1) if rows.count(first) == len(rows) else index
    if rows != list(range(first, first + step * len(rows), step)):
        return index
    stop = rows[-1] + (1 if step > 0 else -1)
    return slice(first, stop if stop >= 0 else None, step)


def exact_interleaved(st, pipeline, tau: dict, p2p_exposed, p, m, v):
    r"""The pipeline seconds of a grid, its interleaved rows of a small shape priced exactly [s].

    ``pipeline`` with its interleaved rows (v > 1, p > 1, not GPipe, 2 p m v <=
    :data:`MAX_PASSES`, an order that does not deadlock) replaced by their schedule's longest
    path, at the group size the simulated schedule runs (Megatron's N, p where it is below p):

    .. math:: T = \text{interleaved\_makespan}(p, m, v, N;\ f_r + t^{\text{p2p}},\
        b_r + t^{\text{p2p}})

    each stage's forward and backward from ``tau`` (``first``, ``middle``, ``last``) plus
    the exposed p2p, as the simulated schedule takes them
    (:func:`memsym.timing.pipeline.simulated_pipeline`).

    Parameters
    ----------
    st : memsym.timing.records.Settings
        The schedule and the micro-batch group size.
    pipeline : array_like
        The pipeline seconds of every row, kept where the longest path is not taken [s].
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
    >>> tau = {r: (1.0, 2.0) for r in ("first", "middle", "last")}
    >>> float(exact_interleaved(Settings(), 0.0, tau, 0.0, 2, 4, 2))    # hand: see above
    13.5

    References
    ----------
    .. [megatron-schedules] forward_backward_pipelining_with_interleaving (rev d98e8a64dd).
    """
    return exact_interleaved_many([(st, pipeline, tau, p2p_exposed, p, m, v)])[0]


def exact_interleaved_many(requests: list) -> list:
    r"""Each request's :func:`exact_interleaved`, the rows of one schedule shape priced at once.

    .. math:: T_i = \text{exact\_interleaved}(\text{request}_i)

    the rows of every request that share a shape (p, m, v, N) run through one
    :func:`interleaved_makespan`: a level's step costs about the same for one layout as for
    thousands, and a search prices the same shapes under each of its (recompute, SP,
    sharding) groups.  Each layout's column is its own, so each value is the one the
    request alone gets, to the bit.

    Parameters
    ----------
    requests : list of tuple
        :func:`exact_interleaved`'s arguments ``(st, pipeline, tau, p2p_exposed, p, m, v)``,
        one tuple a grid (seconds [s], sizes [GPUs], micro-batches and chunks [1]).

    Returns
    -------
    list of numpy.ndarray
        Each request's pipeline seconds [s].

    Examples
    --------
    >>> from memsym.timing.records import Settings
    >>> tau = {r: (1.0, 2.0) for r in ("first", "middle", "last")}
    >>> [float(x) for x in exact_interleaved_many([(Settings(), 0.0, tau, 0.0, 2, 4, 2),
    ...                                             (Settings(), 0.0, tau, 0.0, 2, 8, 2)])]
    [13.5, 25.5]

    By hand, :math:`(m v + p - 1)(f + b)/v`: 9 x 3 / 2 = 13.5 and 17 x 3 / 2 = 25.5.

    References
    ----------
    .. [megatron-schedules] forward_backward_pipelining_with_interleaving (rev d98e8a64dd).
    """
    outs, jobs = [], {}    # jobs: shape -> [(request, its rows, forward, backward columns)]
    for st, pipeline, tau, p2p_exposed, p, m, v in requests:
        pipeline = np.asarray(pipeline, dtype=float)
        if st.schedule == "gpipe":
            outs.append(pipeline)
            continue
        shape, fwd, bwd = pass_durations(pipeline, tau, p2p_exposed, p, m, v)
        P, M, V = (np.broadcast_to(x, shape).ravel() for x in (p, m, v))
        rows = np.flatnonzero((V > 1) & (P > 1) & (2 * P * M * V <= MAX_PASSES))
        outs.append(np.array(np.broadcast_to(pipeline, shape)))
        if not rows.size:
            continue
        fwd, bwd = [x.ravel() for x in fwd], [x.ravel() for x in bwd]
        # the distinct (p, m, v), in np.unique's order, one integer code each (np.unique over
        # the rows of a 3 x n array sorts void views: a tenth of a search's step time)
        uniq, inv = unique_rows(P[rows], M[rows], V[rows])
        # each shape's rows in ascending order: one stable sort, not a pass over every row
        # per shape (tens of shapes a request)
        by_shape = np.split(rows[np.argsort(inv.ravel(), kind="stable")],
                            np.cumsum(np.bincount(inv.ravel(), minlength=len(uniq)))[:-1])
        for j, (pp_, mm_, vv_) in enumerate(uniq.tolist()):
            N = microbatch_group(st, pp_, mm_, vv_)
            if schedule_levels(pp_, mm_, vv_, N) is None:
                continue         # deadlocks: the closed form stands (Megatron refuses it)
            sel = by_shape[j]
            jobs.setdefault((pp_, mm_, vv_, N), []).append(
                (len(outs) - 1, sel, [x[sel] for x in fwd], [x[sel] for x in bwd]))
    for shape, items in jobs.items():
        spans = _remembered(*shape, [(fwd, bwd) for _, _, fwd, bwd in items])
        for (i, sel, _, _), span in zip(items, spans):
            outs[i].reshape(-1)[sel] = span
    if jobs:
        _save_levels()
    return outs


def priced_together(steps: list) -> list:
    """The values of generators of :func:`exact_interleaved` requests, priced together.

    Each generator (:func:`memsym.timing.makespan.pipeline_parts` with ``steps``) yields
    the arguments of :func:`exact_interleaved` and takes back its value; each round of their
    requests is priced at once (:func:`exact_interleaved_many`), and each generator's return
    value is its entry of the list: what it returns run alone.

    Parameters
    ----------
    steps : list of generator
        Generators yielding :func:`exact_interleaved`'s arguments (seconds [s], sizes
        [GPUs], micro-batches and chunks [1]).

    Returns
    -------
    list
        Each generator's return value.

    Examples
    --------
    >>> from memsym.timing.records import Settings
    >>> def steps(f):
    ...     tau = {r: (f, 2 * f) for r in ("first", "middle", "last")}
    ...     return float((yield (Settings(), 0.0, tau, 0.0, 2, 4, 2)))
    >>> priced_together([steps(1.0), steps(2.0)])     # (m v + p - 1)(f + b)/v, as above
    [13.5, 27.0]

    References
    ----------
    .. [megatron-schedules] forward_backward_pipelining_with_interleaving (rev d98e8a64dd).
    """
    values, requests = [None] * len(steps), {}

    def advance(i, sent):
        try:
            requests[i] = steps[i].send(sent)
        except StopIteration as done:
            values[i] = done.value

    for i in range(len(steps)):
        advance(i, None)
    while requests:
        order = list(requests)
        asked = [requests.pop(i) for i in order]
        # a request several generators share (the same object: step.py's grids that differ
        # in the data-parallel sync alone) is priced once, each of them given its value
        where: dict = {}
        for req in asked:
            where.setdefault(id(req), len(where))
        unique = list({id(req): req for req in asked}.values())
        priced = exact_interleaved_many(unique)
        for i, req in zip(order, asked):
            advance(i, priced[where[id(req)]])
    return values


#: Makespans already run, by shape and a digest of the durations: a search prices the same
#: stages under each sharding choice (their durations do not depend on it), so most of its
#: calls repeat one.  At most :data:`_SEEN_LIMIT` makespans are kept [1].
_SEEN: dict = {}
_SEEN_LIMIT = 1_000_000
_SEEN_SIZE = [0]     # the makespans _SEEN holds, kept beside it (no sum over it per insert)


def _remembered(p: int, m: int, v: int, group: int, durations: list) -> list:
    # interleaved_makespan of each (forward, backward) of ``durations``, run once per distinct
    # bytes: those not met before joined side by side in one run (each layout's column is its
    # own, so the same values to the bit)
    keyed = []
    for fwd, bwd in durations:
        dur = np.stack([np.asarray(x, dtype=float) for x in (*fwd, *bwd)])
        keyed.append(((p, m, v, group, dur.shape,
                       hashlib.blake2b(dur.tobytes(), digest_size=16).digest()), dur))
    new = {}
    for key, dur in keyed:
        if key not in _SEEN:
            new.setdefault(key, dur)
    if new:
        if _SEEN_SIZE[0] + sum(dur.shape[-1] for dur in new.values()) > _SEEN_LIMIT:
            _SEEN.clear()
            _SEEN_SIZE[0] = 0
        joined = np.concatenate(list(new.values()), axis=-1)
        spans = interleaved_makespan(p, m, v, group, tuple(joined[:3]), tuple(joined[3:]))
        cuts = np.cumsum([dur.shape[-1] for dur in new.values()])[:-1]
        for key, span in zip(new, np.split(spans, cuts)):
            _SEEN[key] = span
            _SEEN_SIZE[0] += np.size(span)
    return [_SEEN[key] for key, _ in keyed]
