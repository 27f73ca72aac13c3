"""The distinct rows of a grid, priced once and spread back on every row.

A search prices hundreds of thousands of layouts of which far fewer are distinct in the knobs a
price reads: :func:`unique_rows` numbers the distinct rows of integer columns (densely in O(n)
where the code space is small), :func:`distinct` the distinct values of one array,
:func:`distinct_layouts` the distinct combinations of float knobs, and :func:`spread` puts a
value priced once per distinct row back on every row.  Only the step time and the search,
which load numpy anyway, import it (:mod:`memsym.numeric` keeps ``import memsym`` free of
numpy).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["distinct", "unique_rows", "distinct_layouts", "spread"]


#: The largest code space :func:`unique_rows` numbers densely [codes] (a 4 MiB mask).
_DENSE_CODES = 1 << 22


def distinct(values):
    """The sorted distinct values of an array, as ``np.unique(values)`` gives them.

    Small non-negative integers (a search's knobs, template ids) are marked in a dense mask in
    O(n); anything else goes through ``np.unique`` with ``return_inverse``, which skips the
    masked-array check that makes numpy 2's plain ``np.unique`` import ``numpy.ma`` on its
    first call (a thirtieth of a second in a new process, in every search).

    Examples
    --------
    >>> import numpy as np
    >>> distinct(np.array([4, 1, 4, 2])).tolist(), distinct(np.array([2.5, -1.0, 2.5])).tolist()
    ([1, 2, 4], [-1.0, 2.5])
    """
    a = np.asarray(values).ravel()
    if a.dtype.kind in "iu" and a.size and a.min() >= 0 and a.max() < _DENSE_CODES:
        present = np.zeros(int(a.max()) + 1, dtype=bool)
        present[a] = True
        return np.flatnonzero(present).astype(a.dtype)
    return np.unique(a, return_inverse=True)[0]


def unique_rows(*cols):
    """(distinct rows as a 2-D int array, inverse) of equal-length non-negative int columns.

    The rows are encoded as one integer each (``np.unique`` on 1-D data is much faster than
    ``axis=0``); a small code space is numbered densely in O(n) (mark the codes present, count
    them in order), where ``np.unique``'s sort of ~300k codes costs milliseconds a call.

    Examples
    --------
    >>> uq, inv = unique_rows([2, 0, 2, 1], [5, 3, 5, 3])
    >>> uq.tolist(), inv.tolist()
    ([[0, 3], [1, 3], [2, 5]], [2, 0, 2, 1])
    >>> unique_rows([-1, 4, -1])[1].tolist()
    [0, 1, 0]
    >>> uq, inv = unique_rows([4096, 1, 4096], [2048, 7, 2048], [9, 9, 3])  # sparse codes
    >>> uq.tolist(), inv.tolist()
    ([[1, 7, 9], [4096, 2048, 3], [4096, 2048, 9]], [2, 0, 1])
    """
    mat = np.stack([np.asarray(c_, dtype=np.int64) for c_ in cols])
    if mat.size and mat.min() < 0:     # not codes: the general (slower) path
        uq, inv = np.unique(mat.T, axis=0, return_inverse=True)
        return uq, inv.ravel()
    dims = tuple(int(r.max()) + 1 if r.size else 1 for r in mat)
    values = None
    if math.prod(dims) > _DENSE_CODES:
        # a sparse code space (columns of few, large values: a search's c up to 4,096, m up
        # to 2,048): each column numbered by its values' ranks, in their order, so that the
        # codes stay dense and sort as the rows do
        values = [distinct(r) for r in mat]
        mat = np.stack([np.searchsorted(v, r) for v, r in zip(values, mat)])
        dims = tuple(len(v) for v in values)
    code = np.ravel_multi_index(tuple(mat), dims)
    if math.prod(dims) <= _DENSE_CODES:
        present = np.zeros(math.prod(dims), dtype=bool)
        present[code] = True
        uq = np.flatnonzero(present)
        # each code's rank among the present ones: a binary search in the (short) sorted
        # list, where a running count over the whole code space writes 8 bytes per code
        inv = np.searchsorted(uq, code)
    else:
        uq, inv = np.unique(code, return_inverse=True)
    rows = np.stack(np.unravel_index(uq, dims), axis=1)
    if values is not None:       # the ranks back to the values
        rows = np.stack([v[rows[:, i]] for i, v in enumerate(values)], axis=1)
    return rows, inv.ravel()


def distinct_layouts(*cols):
    """``(distinct rows, inverse)`` of broadcast columns of whole, non-negative numbers where
    at most half the rows are distinct, else None: a grid of many layouts priced once per
    distinct combination of the knobs a price reads (:func:`unique_rows`), then spread back
    on every row (:func:`spread`; elementwise arithmetic: the same numbers to the last bit).

    Examples
    --------
    >>> import numpy as np
    >>> uq, inv = distinct_layouts(np.tile([1.0, 2.0], 40), 8.0)
    >>> uq.tolist(), inv[:4].tolist()
    ([[1, 8], [2, 8]], [0, 1, 0, 1])
    >>> distinct_layouts(np.arange(100.0)) is None      # all distinct: nothing to share
    True
    """
    knobs = np.broadcast_arrays(*cols)
    if knobs[0].size <= 64 or not all(np.array_equal(k, np.floor(k)) and np.all(k >= 0)
                                      for k in knobs):
        return None
    uq, inv = unique_rows(*(k.ravel() for k in knobs))
    return (uq, inv) if 2 * len(uq) <= knobs[0].size else None


def spread(value, inv, shape):
    """``value`` priced once per distinct row (:func:`distinct_layouts`) back on every row of
    ``shape``: each array indexed by ``inv``, through dicts, tuples and lists; numbers stay.
    A dict or array met twice (a dense model's mean layer is also its last layer's kind) is
    spread once and met twice in the result, as it was in ``value``.

    Examples
    --------
    >>> import numpy as np
    >>> spread({"a": (np.array([1.0, 2.0]), 3.0)}, np.array([1, 0, 1]), (3,))
    {'a': (array([2., 1., 2.]), 3.0)}
    >>> part = {"a": np.array([1.0, 2.0])}
    >>> out = spread((part, part), np.array([1, 0]), (2,))
    >>> out[0] is out[1], out[0]["a"].tolist()
    (True, [2.0, 1.0])
    """
    seen: dict = {}     # id of a dict or array of ``value`` -> its spread

    def one(val):
        if isinstance(val, (tuple, list)):
            return type(val)(one(v) for v in val)
        if not isinstance(val, dict) and not np.ndim(val):
            return val
        got = seen.get(id(val))
        if got is None:
            got = seen[id(val)] = {k: one(v) for k, v in val.items()} if isinstance(val, dict) \
                else val[inv].reshape(shape)
        return got

    return one(value)
