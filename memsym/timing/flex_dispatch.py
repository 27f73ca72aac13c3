r"""The expert-parallel traffic of Megatron-core's flex token dispatcher (DeepEP, HybridEP).

The all-to-all dispatcher (``MoEAlltoAllTokenDispatcher``) permutes each token into one row per
routed expert before its all-to-all, so a rank sends :math:`k` copies of every token
(:func:`memsym.timing.moe.ep_alltoall_time`).  The flex dispatcher
(``--moe-token-dispatcher-type flex``: ``MoEFlexTokenDispatcher`` in
megatron/core/transformer/moe/token_dispatcher.py at Megatron-LM d98e8a64dd, through
``fused_dispatch`` / ``fused_combine`` of moe/fused_a2a.py) hands DeepEP the tokens and
their top-k indices instead: ``Buffer.get_dispatch_layout`` counts, per token, the ranks
(``is_token_in_rank``) and the nodes (``num_tokens_per_rdma_rank``) holding at least one of
its experts, and ``Buffer.dispatch`` sends the token once to each such rank, and across
nodes once per node (RDMA to one GPU of the node, which forwards it over NVLink); the
combine reduces in the mirror order.  HybridEP does the same with NVLink domains for nodes.

So per token a rank sends :math:`R` copies (the EP ranks its experts fall on) of which
:math:`D` cross between NVLink domains (the other domains its experts fall on), not
:math:`k` and :math:`k(e - n_{in})/e`.  With the router forced to balance (the Bridge perf
recipes' ``moe_router_force_load_balancing``: random logits, router.py ``forward``) each
token's :math:`k` experts are taken as :math:`k` distinct experts drawn uniformly from the
:math:`E` (memsym's assumption; DeepSeek-V3's group-limited routing would put them on fewer
domains still).

References
----------
.. [megatron-flex] Megatron-LM d98e8a64dd: megatron/core/transformer/moe/fused_a2a.py
   (``FusedDispatch.forward``: ``get_dispatch_layout`` then ``dispatch`` with
   ``num_tokens_per_rank``, ``num_tokens_per_rdma_rank``, ``is_token_in_rank``),
   token_dispatcher.py (``MoEFlexTokenDispatcher``), router.py (``apply_random_logits`` under
   ``moe_router_force_load_balancing``).
"""

from __future__ import annotations

from math import comb

import numpy as np

from .collectives import LINK_LATENCY, collective_bytes, collective_time, intra_bandwidth

__all__ = ["FLEX_DISPATCHERS", "destinations_per_token", "flex_alltoall_time"]

#: The flex dispatcher's backends (``moe_flex_dispatcher_backend``), each sending a token once
#: per destination rank and once per destination node or NVLink domain.
FLEX_DISPATCHERS = ("deepep", "hybridep")


def destinations_per_token(E, k, groups):
    r"""Expected groups a token's experts fall on, of ``groups`` equal groups of experts [1].

    A token's :math:`k` distinct experts drawn uniformly from :math:`E` miss one group of
    :math:`E/g` experts with probability :math:`\binom{E - E/g}{k} / \binom{E}{k}`:

    .. math::

        R(g) = g\left(1 - \binom{E - E/g}{k}\Big/\binom{E}{k}\right)

    Parameters
    ----------
    E : int
        Routed experts [1].
    k : int
        Experts per token, top-k [1].
    groups : array_like
        Equal groups the experts are split into (EP ranks, or NVLink domains of them) [1].

    Returns
    -------
    numpy.ndarray
        Expected groups per token [1].

    Examples
    --------
    Qwen3-30B-A3B (top-8 of 128) over EP 8: a token reaches 5.3 of the 8 ranks, not 8;
    one group holds every expert:

    >>> round(float(destinations_per_token(128, 8, 8)), 2), float(destinations_per_token(128, 8, 1))
    (5.34, 1.0)

    References
    ----------
    Megatron-LM d98e8a64dd megatron/core/transformer/moe/fused_a2a.py (``FusedDispatch``),
    token_dispatcher.py (``MoEFlexTokenDispatcher``); [deepep] (the kernels it calls).
    """
    g = np.asarray(groups, dtype=float)
    out = np.empty(g.shape)
    for idx, n in np.ndenumerate(g):
        per = E / n
        miss = comb(E - int(round(per)), k) / comb(E, k) if per < E else 0.0
        out[idx] = n * (1.0 - miss)
    return out


def flex_alltoall_time(row_bytes, E, k, e, inside, cluster):
    r"""Seconds of one flex dispatch (or combine) and the bytes one GPU sends in it.

    ``row_bytes`` is one token's hidden state [bytes] times the tokens of this GPU.  Inside
    one NVLink domain (:math:`n_{in} \ge e`) the token goes once to each of its
    :math:`R(e)` ranks (:func:`destinations_per_token`), a ring all-to-all of
    :math:`R(e)\cdot` ``row_bytes``.  Across :math:`n_d = e/n_{in}` domains it crosses once
    to each other domain it reaches, :math:`D = R(n_d)(n_d - 1)/n_d`, through the NIC, while
    NVLink carries its rank copies (own and forwarded), :math:`R(e)(e - 1)/e`:

    .. math::

        t = \max\Bigl(\frac{R(e)\,(e-1)/e\;S}{\beta_{\text{NVLink}}},\;
            \frac{D\,S}{\beta_{\text{NIC}}}\Bigr) + (e - 1)\,\alpha_{\text{inter}}

    with :math:`S` = ``row_bytes``.

    Parameters
    ----------
    row_bytes : array_like
        This GPU's tokens times one token's hidden-state bytes [bytes].
    E : int
        Routed experts [1].
    k : int
        Experts per token, top-k [1].
    e : array_like
        EP size [GPUs].
    inside : array_like
        EP ranks inside this GPU's NVLink domain (:func:`memsym.timing.moe.ep_ranks_inside`)
        [GPUs].
    cluster : Cluster
        The interconnect.

    Returns
    -------
    tuple of numpy.ndarray
        ``(seconds, bytes sent)`` [s], [bytes].

    Examples
    --------
    DeepSeek-V3 (top-8 of 256) over EP 32 on four DGX-B200 nodes: a token crosses to 2.7 of
    the 3 other nodes (DeepEP), where the all-to-all dispatcher sends 8 x 24/32 = 6 copies
    through the NIC:

    >>> from memsym.hardware import cluster
    >>> S = 4096 * 7168 * 2
    >>> t, b = flex_alltoall_time(S, 256, 8, 32, 8, cluster("dgx-b200"))
    >>> D = float(destinations_per_token(256, 8, 4)) * 3 / 4
    >>> round(D, 2), abs(float(t) - (D * S / 50e9 + 31 * 10e-6)) < 1e-12
    (2.71, True)

    References
    ----------
    Megatron-LM d98e8a64dd megatron/core/transformer/moe/fused_a2a.py (``FusedDispatch``),
    token_dispatcher.py (``MoEFlexTokenDispatcher``); [deepep] (the kernels it calls).
    """
    S = np.asarray(row_bytes, dtype=float)
    e, inside = np.asarray(e, dtype=float), np.asarray(inside, dtype=float)
    intra = intra_bandwidth(cluster)
    inter = float(cluster.inter_node_bandwidth)
    ranks = destinations_per_token(E, k, e)
    domains = np.maximum(e / np.maximum(inside, 1), 1)
    # the (n - 1)/n of an all-to-all's payload that leaves its sender: of the domains a token
    # reaches, those not its own; of the ranks, those not itself
    crossing = collective_bytes("all-to-all", destinations_per_token(E, k, domains), domains)
    near = collective_bytes("all-to-all", ranks, e)
    fits = inside >= e
    ring = collective_time("all-to-all", ranks * S, e, intra, LINK_LATENCY["intra"])
    spread = np.maximum(near * S / intra, crossing * S / inter) + (e - 1) * LINK_LATENCY["inter"]
    seconds = np.where(e > 1, np.where(fits, ring, spread), 0.0)
    sent = np.where(e > 1, np.where(fits, near, near + crossing) * S, 0.0)
    return seconds, sent
