r"""Collective times from bandwidth and latency, on the link each parallel group crosses.

A ring collective over :math:`n` ranks of a buffer of :math:`S` bytes takes
:math:`f(n)\,S/\beta + k(n)\,\alpha` with NCCL's bus factors (all-reduce :math:`2(n-1)/n`
and :math:`2(n-1)` steps; all-gather, reduce-scatter and all-to-all :math:`(n-1)/n` and
:math:`n-1` steps; point-to-point 1 and 1).  Those factors and steps are written once, in
:data:`memsym.terms.collectives.COLLECTIVES`; the numpy functions here are its closed forms
compiled (:func:`memsym.numeric.compile_expr`), so the step time and the symbolic
communication price a collective alike.  Ranks are laid out in Megatron-LM's default
order ``tp-cp-ep-dp-pp`` (innermost first); a group whose span (stride x size) fits in the
cluster's NVLink domain (:attr:`memsym.hardware.Cluster.domain`: the node, or the 72 GPUs of
an NVL72 rack) runs on NVLink, otherwise its ring crosses the inter-node network, which sets
the pace.

References
----------
.. [nccl-tests] NVIDIA nccl-tests doc/PERFORMANCE.md (bus bandwidth factors).
.. [nccl-nvlink-efficiency] NVIDIA/nccl-tests issue #212, NCCL maintainer's comment (NVLink:
   370 GB/s effective of the 450 GB/s line rate).
.. [megatron-lm] megatron/core/parallel_state.py, initialize_model_parallel(order="tp-cp-ep-dp-pp").
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import InvalidValueError, choose
from ..numeric import compile_expr
from ..symbols import S, alpha, beta, n as _n
from ..terms import collectives as _closed

__all__ = ["KINDS", "LINK_LATENCY", "NVLINK_NCCL_EFFICIENCY", "intra_bandwidth",
           "nvlink_domain", "collective_time",
           "collective_bytes", "group_stride", "group_link", "group_bandwidth", "link_name"]

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "p2p")
#: Per-step latency [s] of one ring step on each tier.  Assumption (order of magnitude of
#: NCCL's small-message times on NVLink and InfiniBand; nccl-tests reports tens of
#: microseconds for an 8-rank all-reduce of a few KB).  Named so a user can replace it.
LINK_LATENCY = {"intra": 5e-6, "inter": 10e-6}
#: Fraction of an NVLink's per-direction line rate NCCL's ring protocol delivers [1]: the
#: NCCL maintainer's figure for H100 (NVIDIA/nccl-tests issue #212: "450GB/s is the line
#: rate. With the protocol overhead (~20%) NCCL can get an effective NVLink bandwidth of
#: 370GB/s", without NVLink SHARP), taken as the protocol's overhead on every NVLink
#: generation (an assumption for A100 and B200).  Links that are not NVLink (InfiniBand,
#: PCIe, Infinity Fabric) keep their line rate: no such figure is cited for them.  The
#: seed's and the papers' closed forms (``memsym.terms.collectives``) use the line rate, as
#: they print it.  Named so a user can replace it (1.0: line rate).
NVLINK_NCCL_EFFICIENCY = 370 / 450


def collective_time(kind: str, nbytes, n, bandwidth, latency=0.0):
    r"""Seconds for one collective of ``nbytes`` over ``n`` ranks [s].

    .. math::

        t = f(n)\,\frac{S}{\beta} + k(n)\,\alpha, \quad
        (f, k) = \begin{cases} (2(n-1)/n,\; 2(n-1)) & \text{all-reduce}\\
        ((n-1)/n,\; n-1) & \text{all-gather, reduce-scatter, all-to-all}\\
        (1,\; 1) & \text{p2p}\end{cases}

    ``nbytes`` is the full buffer (the all-gathered output, the reduce-scattered input, all
    of a rank's all-to-all payload); 0 for n = 1.  Vectorised over numpy arrays: the closed
    form :func:`memsym.terms.collectives.collective_time`, compiled once per kind.

    Parameters
    ----------
    kind : {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "p2p"}
    nbytes : array_like
        [bytes]
    n : array_like
        Ranks in the group [GPUs].
    bandwidth : array_like
        Per GPU, one direction [bytes/s].
    latency : array_like
        Per ring step [s].

    Examples
    --------
    Seed 002's 7.5 GB of TP all-reduce over 8 GPUs at 450 GB/s per direction (one call):

    >>> round(float(collective_time("all-reduce", 7.516e9 / 1.75, 8, 450e9)), 4)
    0.0167

    References
    ----------
    nccl-tests doc/PERFORMANCE.md.
    """
    kind = choose("collective", kind, KINDS)
    n = np.asarray(n, float)
    nbytes = np.asarray(nbytes, float)
    if not np.all(np.isfinite(n)) or np.any(n < 1) or not np.all(np.isfinite(nbytes)) \
            or np.any(nbytes < 0):
        raise InvalidValueError("a collective needs n >= 1 ranks and bytes >= 0")
    out = _evaluate("time", kind, nbytes=nbytes, n=n, bandwidth=bandwidth, latency=latency)
    return np.where(n > 1, out, 0.0) if kind != "p2p" else out


def collective_bytes(kind: str, nbytes, n):
    r"""Bytes one rank sends in one collective of ``nbytes`` over ``n`` ranks [bytes].

    .. math:: f(n)\,S, \quad f = 2(n-1)/n \text{ (all-reduce)},\ (n-1)/n
       \text{ (all-gather, reduce-scatter, all-to-all)},\ 1 \text{ (p2p)}

    The bandwidth term of :func:`collective_time` times the bandwidth (0 for n = 1 but p2p).

    Parameters
    ----------
    kind : {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "p2p"}
    nbytes : array_like
        The full buffer, as :func:`collective_time` takes it [bytes].
    n : array_like
        Ranks in the group [GPUs].

    Returns
    -------
    numpy.ndarray
        Bytes one rank sends [bytes].

    Examples
    --------
    All-reduce of 8 GB over 8 ranks: 2 (8 - 1) / 8 x 8e9 = 14e9 bytes (by hand); a group of 1
    sends nothing:

    >>> float(collective_bytes("all-reduce", 8e9, 8)), float(collective_bytes("all-gather", 8e9, 1))
    (14000000000.0, 0.0)

    References
    ----------
    .. [nccl-tests] doc/PERFORMANCE.md (bus bandwidth factors).
    """
    kind = choose("collective", kind, KINDS)
    return _evaluate("bytes", kind, nbytes=np.asarray(nbytes, float), n=np.asarray(n, float))


@functools.lru_cache(maxsize=None)
def _compiled(what: str, kind: str):
    """The numpy function of :mod:`memsym.terms.collectives`' closed form of ``kind`` (its
    bytes or its time), compiled once: the factors and steps are written only there."""
    expr = (_closed.collective_bytes(kind) if what == "bytes"
            else _closed.collective_time(kind))
    return compile_expr(expr)


def _evaluate(what: str, kind: str, *, nbytes, n, bandwidth=1.0, latency=0.0):
    """The compiled closed form at these arrays, broadcast over all of them (p2p has no n)."""
    fn, names = _compiled(what, kind)
    args = {S.name: nbytes, _n.name: n}
    if what == "time":
        args.update({beta.name: bandwidth, alpha.name: latency})
    out = np.asarray(fn(*(args[name] for name in names))[0], float)
    if len(names) == len(args):       # every argument in the formula: numpy broadcast them
        return out
    shape = np.broadcast_shapes(*(np.shape(a) for a in args.values()))
    return np.broadcast_to(out, shape).copy() if out.shape != shape else out


def group_stride(group: str, t=1, c=1, d=1, e=1, t_e=None):
    r"""Stride between neighbouring ranks of ``group`` in the order tp-cp-ep-dp-pp [GPUs].

    .. math:: \sigma_{tp} = 1,\ \sigma_{cp} = t,\ \sigma_{ep} = t_e,\
       \sigma_{dp} = t\,c,\ \sigma_{pp} = t\,c\,d

    The dense mesh is tp-cp-dp-pp (Megatron folds EP into DP for non-expert layers); the
    expert mesh is expert-tp, ep, expert-dp, pp, so EP's stride is the expert TP size.

    Parameters
    ----------
    group : {"tp", "cp", "ep", "dp", "pp"}
        The process group.
    t, c, d, e : array_like
        Tensor-, context-, data- and expert-parallel sizes [GPUs].
    t_e : array_like, optional
        Expert tensor-parallel size [GPUs] (default t).

    Returns
    -------
    numpy.ndarray
        The stride [GPUs].

    Examples
    --------
    t = 8, c = 2, d = 4: strides 1, t = 8, t c = 16, t c d = 64 (by hand):

    >>> [int(group_stride(g, t=8, c=2, d=4)) for g in ("tp", "cp", "dp", "pp")]
    [1, 8, 16, 64]

    References
    ----------
    .. [megatron-lm] megatron/core/parallel_state.py, initialize_model_parallel
       (order="tp-cp-ep-dp-pp").
    """
    group = choose("group", group, ("tp", "cp", "ep", "dp", "pp"))
    t, c, d = (np.asarray(x, float) for x in (t, c, d))
    t_e = t if t_e is None else np.asarray(t_e, float)
    return {"tp": np.ones_like(t * c), "cp": t, "ep": t_e, "dp": t * c,
            "pp": t * c * d}[group]


def group_link(group: str, size, gpus_per_node: int, **layout):
    r"""Whether each group runs inside a node (True) or crosses nodes (False).

    .. math:: \text{inside} = \sigma_{group}\, n \le G_{node}

    ``gpus_per_node`` is the GPUs that share the intra-node link: pass
    :attr:`memsym.hardware.Cluster.domain` (72 on an NVL72 rack).

    Parameters
    ----------
    group : {"tp", "cp", "ep", "dp", "pp"}
        The process group.
    size : array_like
        Ranks in the group [GPUs].
    gpus_per_node : int
        GPUs on the intra-node link [GPUs].
    **layout
        ``t``, ``c``, ``d``, ``e``, ``t_e`` as :func:`group_stride` [GPUs].

    Examples
    --------
    >>> bool(group_link("tp", 8, 8, t=8)), bool(group_link("dp", 2, 8, t=4, d=2))
    (True, True)
    >>> bool(group_link("pp", 4, 8, t=4, d=2, c=1))     # stride t d = 8, span 32 > 8
    False

    References
    ----------
    .. [megatron-lm] megatron/core/parallel_state.py, initialize_model_parallel
       (order="tp-cp-ep-dp-pp").
    """
    stride = group_stride(group, **layout)
    return stride * np.asarray(size, float) <= gpus_per_node


def group_bandwidth(group: str, size, cluster, **layout):
    r"""(bandwidth [bytes/s], latency [s]) for each group: NVLink inside a node, else the NIC.

    .. math:: \beta = \begin{cases} \eta_{NCCL}\,\beta_{intra} & \text{inside (NVLink)}\\
       \beta_{inter} & \text{otherwise}\end{cases}, \quad
       \eta_{NCCL} = 370/450

    Inside an NVLink node the bandwidth is what NCCL delivers of the line rate
    (:data:`NVLINK_NCCL_EFFICIENCY`).

    Parameters
    ----------
    group : {"tp", "cp", "ep", "dp", "pp"}
        The process group.
    size : array_like
        Ranks in the group [GPUs].
    cluster : Cluster
        The interconnect.
    **layout
        ``t``, ``c``, ``d``, ``e``, ``t_e`` as :func:`group_stride` [GPUs].

    Examples
    --------
    >>> from memsym.hardware import cluster
    >>> bw, lat = group_bandwidth("tp", 8, cluster("dgx-h100"), t=8)
    >>> round(float(bw) / 1e9, 6), float(lat)      # 450 GB/s line rate, NCCL's 370
    (370.0, 5e-06)

    References
    ----------
    .. [nccl-nvlink-efficiency] NVIDIA/nccl-tests issue #212 (370 GB/s effective of 450).
    """
    inside = group_link(group, size, nvlink_domain(cluster), **layout)
    bw = np.where(inside, intra_bandwidth(cluster), float(cluster.inter_node_bandwidth))
    lat = np.where(inside, LINK_LATENCY["intra"], LINK_LATENCY["inter"])
    return bw, lat


def intra_bandwidth(cluster) -> float:
    r"""The bandwidth NCCL delivers on the cluster's intra-node link [bytes/s].

    .. math:: \beta = \begin{cases} \eta_{NCCL}\,\beta_{intra} & \text{NVLink}\\
       \beta_{intra} & \text{otherwise}\end{cases}, \quad \eta_{NCCL} = 370/450

    Parameters
    ----------
    cluster : Cluster
        Its intra-node link kind and line rate are read.

    Examples
    --------
    >>> from memsym.hardware import cluster
    >>> round(intra_bandwidth(cluster("dgx-h100")) / 1e9, 6)     # 450 GB/s line rate
    370.0

    References
    ----------
    .. [nccl-nvlink-efficiency] NVIDIA/nccl-tests issue #212 (370 GB/s effective of 450).
    """
    intra = float(cluster.intra_node_bandwidth)
    if getattr(cluster, "intra_link", "nvlink") == "nvlink":
        intra *= NVLINK_NCCL_EFFICIENCY
    return intra


def nvlink_domain(cluster) -> int:
    r"""GPUs on the cluster's intra-node link [GPUs]: its NVLink domain where wider than a node.

    .. math:: G_{domain} = \begin{cases} \text{the cluster's domain} & \text{given}\\
       G_{node} & \text{otherwise}\end{cases}

    Parameters
    ----------
    cluster : Cluster
        Its NVLink domain (when it names one) or its GPUs per node are read.

    Examples
    --------
    >>> from memsym.hardware import cluster
    >>> nvlink_domain(cluster("gb200-nvl72")), nvlink_domain(cluster("dgx-h100"))
    (72, 8)

    References
    ----------
    .. [nvidia-gb200-nvl72] NVIDIA GB200 NVL72: 72 GPUs in one NVLink domain.
    """
    return int(getattr(cluster, "domain", cluster.gpus_per_node))


def link_name(group: str, size, cluster, **layout) -> str:
    r"""``"intra"`` or ``"inter"``: the link :func:`group_bandwidth` prices one group on.

    .. math:: \text{intra} \iff \sigma_{group}\, n \le G_{domain}

    Parameters
    ----------
    group : {"tp", "cp", "ep", "dp", "pp"}
        The process group.
    size : int
        Ranks in the group [GPUs].
    cluster : Cluster
        The interconnect.
    **layout
        ``t``, ``c``, ``d``, ``e``, ``t_e`` as :func:`group_stride` [GPUs].

    Examples
    --------
    >>> from memsym.hardware import cluster
    >>> link_name("dp", 2, cluster("dgx-h100"), t=4, c=1, d=2)     # t d = 8: one node
    'intra'
    >>> link_name("dp", 16, cluster("gb200-nvl72"), t=4, c=1, d=16)  # 64 of the rack's 72
    'intra'

    References
    ----------
    .. [megatron-lm] megatron/core/parallel_state.py, initialize_model_parallel
       (order="tp-cp-ep-dp-pp").
    """
    inside = group_link(group, size, nvlink_domain(cluster), **layout)
    return "intra" if bool(np.asarray(inside).ravel()[0]) else "inter"
