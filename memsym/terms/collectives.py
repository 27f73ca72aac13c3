r"""Collectives as NCCL counts them: bytes each rank sends, and the time that takes.

For a buffer of :math:`S` bytes over :math:`n` ranks, nccl-tests ``doc/PERFORMANCE.md``
gives the data each rank must move (the *bus-bandwidth* correction factors).  Time is
``bytes / bandwidth + latency * steps`` (PERFORMANCE.md, "Time": overhead + size / bw).

Bus-bandwidth convention
------------------------
``beta`` here is a **per-GPU, one-direction** bandwidth, the quantity nccl-tests prints as
``busbw`` and compares with the hardware peak.  Vendors quote NVLink as the sum of both
directions (H100: "900 GB/s" = 450 GB/s each way) and InfiniBand per port and direction
(400 Gb/s = 50 GB/s).  memsym's cluster presets price links per direction, like ``busbw``:
NVLink at half the vendor figure (H100: 450 GB/s), a NIC per port (see
:mod:`memsym.hardware`).  Seed 002 prices its 7.5 GB against the vendor's both-direction
900 GB/s ("about 10 ms"); that arithmetic is reproduced by giving the bandwidth 900 GB/s
explicitly (``intra_node_bandwidth=900e9``, ``--intra-node-bandwidth 900``), and is 2x
optimistic for a ring collective.

References
----------
.. [nccl-tests] NVIDIA, nccl-tests ``doc/PERFORMANCE.md`` ("Bus bandwidth", "Summary").
"""

from __future__ import annotations

import sympy as sp

from ..errors import choose
from ..symbols import S, alpha, beta, n
from ..term import Source, Term
from ..values import as_expr
from ..text import shared_doc

__all__ = ["COLLECTIVES", "collective_bytes", "collective_steps", "collective_time",
           "collective_term"]

_doc = shared_doc(collective_params="""
    op : str
        One of :data:`COLLECTIVES`.
    size : sympy.Expr
        The buffer size :math:`S` [bytes].
    ranks : sympy.Expr
        The number of ranks :math:`n` [GPUs].
    """)

_NCCL = Source("nccl-tests", "doc/PERFORMANCE.md, Bus bandwidth / Summary")

#: Collective -> (per-rank bytes factor on S, sequential steps of a ring implementation).
#: REF: nccl-tests, doc/PERFORMANCE.md, Summary (factors); steps: a ring all-reduce is a
#: reduce-scatter then an all-gather, n-1 steps each; broadcast is pipelined along the ring.
COLLECTIVES = {
    "all-reduce": (2 * (n - 1) / n, 2 * (n - 1)),
    "reduce-scatter": ((n - 1) / n, n - 1),
    "all-gather": ((n - 1) / n, n - 1),
    "all-to-all": ((n - 1) / n, n - 1),
    "broadcast": (sp.Integer(1), n - 1),
    "reduce": (sp.Integer(1), n - 1),
    "p2p": (sp.Integer(1), sp.Integer(1)),
}


#: Other spellings of the collectives (NCCL's function names, lower-case, and p2p's).
_ALIASES = {"allreduce": "all-reduce", "allgather": "all-gather",
            "reducescatter": "reduce-scatter", "alltoall": "all-to-all", "send": "p2p",
            "send-recv": "p2p", "sendrecv": "p2p", "point-to-point": "p2p"}


def _op(name: str) -> str:
    # aliases first (a fixed table), then the one matcher for user names
    if isinstance(name, str):
        key = name.strip().lower().replace("_", "-")
        name = _ALIASES.get(key, name)
    return choose("collective", name, tuple(COLLECTIVES))


@_doc
def collective_bytes(op: str, size=S, ranks=n) -> sp.Expr:
    r"""Bytes each rank sends for one collective on a buffer of ``size`` bytes [bytes].

    .. math::

        \text{all-reduce}: \tfrac{2(n-1)}{n} S \qquad
        \text{reduce-scatter, all-gather, all-to-all}: \tfrac{n-1}{n} S \qquad
        \text{broadcast, reduce, p2p}: S

    ``S`` is the size of the *whole* array (for reduce-scatter and all-gather, the count
    per rank times ``n``), as nccl-tests defines it.

    Parameters
    ----------
    {collective_params}

    Examples
    --------
    >>> collective_bytes("all-reduce")
    2*S*(n - 1)/n

    By hand, an all-gather of 8 GB over 8 ranks: :math:`(8-1)/8 \cdot 8\cdot10^9 = 7\cdot10^9`:

    >>> collective_bytes("all-gather", 8 * 10**9, 8)
    7000000000

    References
    ----------
    .. [nccl-tests] NVIDIA nccl-tests ``doc/PERFORMANCE.md`` at a0b82b2260, "Summary".
    """
    factor, _ = COLLECTIVES[_op(op)]
    # factor_terms keeps the source's form 2*(n-1)/n instead of SymPy's (2n-2)/n
    return sp.factor_terms(as_expr(factor).xreplace({n: as_expr(ranks)}) * as_expr(size))


def collective_steps(op: str, ranks=n) -> sp.Expr:
    r"""Sequential latency-bound steps of the ring implementation of ``op`` [1].

    .. math::

        \text{all-reduce}: 2(n-1) \qquad
        \text{reduce-scatter, all-gather, all-to-all, broadcast, reduce}: n-1 \qquad
        \text{p2p}: 1

    An all-reduce on a ring is the :math:`n-1` additions then the :math:`n-1` assignments
    of nccl-tests' "AllReduce" section (:math:`2(n-1)` transfers, each on a different rank);
    a reduce-scatter is the addition half, an all-gather the assignment half; a broadcast or
    a reduce is pipelined along the ring (:math:`n-1` hops); a send/receive is one hop.

    Parameters
    ----------
    op : str
        One of :data:`COLLECTIVES`.
    ranks : sympy.Expr
        The number of ranks :math:`n` [GPUs].

    Examples
    --------
    By hand, eight ranks: :math:`2(8-1) = 14` steps for an all-reduce, :math:`8-1 = 7` for
    an all-gather, one for a send:

    >>> [collective_steps(op, 8) for op in ("all-reduce", "all-gather", "p2p")]
    [14, 7, 1]

    References
    ----------
    .. [nccl-tests] NVIDIA nccl-tests ``doc/PERFORMANCE.md`` at a0b82b2260, "AllReduce"
       (ring order, :math:`2(n-1)` data transfers), "ReduceScatter", "AllGather".
    """
    _, steps = COLLECTIVES[_op(op)]
    return as_expr(steps).xreplace({n: as_expr(ranks)})


@_doc
def collective_time(op: str, size=S, ranks=n, bandwidth=beta, latency=alpha) -> sp.Expr:
    r"""Time of one collective: bytes per rank over the bus bandwidth plus latency [s].

    .. math::

        t = \frac{\text{factor}(n)\, S}{\beta} + \alpha \cdot \text{steps}(n)

    with :math:`\text{factor}(n)` the bus-bandwidth correction of :func:`collective_bytes`
    and :math:`\text{steps}(n)` those of :func:`collective_steps` (nccl-tests: time is
    "overhead + size / bw").

    Parameters
    ----------
    {collective_params}
    bandwidth : sympy.Expr
        Per-GPU, one-direction bus bandwidth :math:`\beta` [bytes/s].
    latency : sympy.Expr
        Latency per ring step :math:`\alpha` [s].

    Examples
    --------
    By hand, 7516192768 bytes sent once (no latency) take 7516192768 / 900e9 = 0.00835 s at
    900 GB/s and 7516192768 / 50e9 = 0.1503 s at 50 GB/s:

    >>> round(float(collective_time("p2p", 7516192768, 1, 900 * 10**9, 0)), 4)
    0.0084
    >>> round(float(collective_time("p2p", 7516192768, 1, 50 * 10**9, 0)), 4)
    0.1503

    An all-reduce of 1 GB over 8 ranks at 100 GB/s with 10 us per step:
    :math:`2 \cdot 7/8 \cdot 10^9 / 10^{11} + 14 \cdot 10^{-5} = 0.0175 + 0.00014 = 0.01764` s:

    >>> collective_time("all-reduce", 10**9, 8, 10**11, sp.Rational(1, 10**5))
    441/25000

    References
    ----------
    .. [nccl-tests] NVIDIA nccl-tests ``doc/PERFORMANCE.md`` at a0b82b2260, "Time"
       (overhead + size / bw) and "Summary" (correction factors).
    """
    return (collective_bytes(op, size, ranks) / as_expr(bandwidth)
            + as_expr(latency) * collective_steps(op, ranks))


def collective_term(op: str, key: str | None = None, size=S, ranks=n) -> Term:
    r"""The per-rank bytes of ``op`` as a cited :class:`~memsym.term.Term` [bytes].

    .. math::

        \text{factor}(n)\, S \qquad (\text{all-reduce: } \tfrac{2(n-1)}{n} S;\;
        \text{reduce-scatter, all-gather, all-to-all: } \tfrac{n-1}{n} S;\; \text{else } S)

    Parameters
    ----------
    op : str
        One of :data:`COLLECTIVES`.
    key : str, optional
        The term's key (default: the collective's name).
    size : sympy.Expr
        The buffer size :math:`S` [bytes].
    ranks : sympy.Expr
        The number of ranks :math:`n` [GPUs].

    Examples
    --------
    nccl-tests' ReduceScatter time :math:`S(n-1)/(Bn)` times the bandwidth :math:`B`:

    >>> collective_term("reduce-scatter").expr
    S*(n - 1)/n

    By hand, a 1 GB all-reduce over 4 ranks: :math:`2 \cdot 3/4 \cdot 10^9 = 1.5 \cdot 10^9`:

    >>> collective_term("all-reduce", size=10**9, ranks=4).expr
    1500000000

    References
    ----------
    .. [nccl-tests] NVIDIA nccl-tests ``doc/PERFORMANCE.md`` at a0b82b2260, "Summary".
    """
    op = _op(op)
    return Term(key or op, collective_bytes(op, size, ranks),
                f"bytes each rank sends in one {op} (NCCL bus-bandwidth factor)", _NCCL)
