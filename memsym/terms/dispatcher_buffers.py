r"""The communication buffers of Megatron-core's flex MoE token dispatcher (DeepEP, HybridEP).

Megatron-core's ``MoEFlexTokenDispatcher`` (``--moe-token-dispatcher-type flex``) runs its
all-to-all over the ETP x EP group (``tp_ep_group``, :math:`G = e\,t_e` ranks) through one
library buffer per process, allocated on the first dispatch and kept for the whole run,
outside PyTorch's caching allocator (``cudaMalloc``, CUDA IPC and NVSHMEM memory: only the
device's own count sees it, :data:`memsym.terms.allowances.METRICS`):

* **DeepEP** (``--moe-flex-dispatcher-backend deepep``, :func:`deepep_buffer`):
  ``fused_a2a.get_buffer`` sizes ``deep_ep.Buffer(group, num_nvl_bytes, num_rdma_bytes)``
  with the larger of ``Config.get_nvl_buffer_size_hint`` / ``get_rdma_buffer_size_hint``
  of DeepEP's dispatch and combine configs for :math:`G` ranks, at ``hidden_bytes = 2h``
  (``get_hidden_bytes``: ``x.size(1) * max(element_size, 2)``) and the SM count Megatron sets
  (``moe_flex_dispatcher_num_sms``, else 20).  The buffer adds DeepEP's 32 MiB workspace.
* **HybridEP** (``--moe-flex-dispatcher-backend hybridep``, :func:`hybridep_buffer`):
  ``fused_a2a.init_hybrid_ep_buffer`` builds ``HybridEPBuffer(group, hidden_dim,
  max_num_of_tokens_per_rank, num_local_experts)``; its NVLink coordinator keeps the tokens
  and probabilities of :math:`T G` token slots (the worst case: every token to one rank) and
  the routing-map all-gather; when the group spans NVLink domains
  (:math:`G > R`) its RDMA coordinator adds the inter-node staging buffers
  (:func:`hybridep_rdma_buffer`).

* **allgather** (``--moe-token-dispatcher-type allgather``, :func:`allgather_dispatch_buffer`):
  ``MoEAllGatherTokenDispatcher.token_dispatch`` gathers the hidden states of the whole
  group into Megatron's global memory buffer (``use_global_buffer=True``: the ``"mpu"``
  tensor of ``GlobalMemoryBuffer``, kept and reused for the whole run, inside PyTorch's
  allocator).

The alltoall dispatcher keeps no buffer of its own: what it permutes and exchanges is the
MoE layer's activations (:func:`memsym.terms.activations.layer_activations`:
``routed_tokens``, the fp32 ``router`` probabilities); the permuted local tokens before the
all-to-all and the sorted copy after it (``sort_chunks_by_idxs``) live within one layer's
forward and are not counted, nor are the permutation's integer index maps it keeps for the
unpermute (``moe_utils.permute``; ``moe_permute_fusion`` swaps them for Transformer Engine's
``row_id_map``), a few bytes per token and expert against :math:`2h` per routed token.

Sources: Megatron-LM ``d98e8a64dd`` ``megatron/core/transformer/moe/token_dispatcher.py``
(``MoEAllGatherTokenDispatcher.token_dispatch`` 281-303), ``tensor_parallel/mappings.py``
(``_gather_along_first_dim`` 118-156), ``utils.py`` (``GlobalMemoryBuffer`` 727-753),
``megatron/core/transformer/moe/fused_a2a.py``
(``get_hidden_bytes`` 24-33, ``get_buffer`` 36-69, ``set_deepep_num_sms`` 261-263,
``init_hybrid_ep_buffer`` 285-347) and ``token_dispatcher.py`` (``_DeepepManager.__init__``
1287-1292: 20 SMs when ``moe_flex_dispatcher_num_sms`` is unset; ``MoEFlexTokenDispatcher``
1834-1852: the ``tp_ep_group``); DeepEP's ``hybrid-ep`` branch ``94a9f8f6b1`` (the branch
Megatron-LM's ``docker/Dockerfile.ci.lts`` installs; the ``Config`` size hints are the same in
v1.2.1 and in main's ``csrc/legacy/config.hpp``, the config tables differ for 24 to 128 ranks).
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError
from ..symbols import E, b, c, e, h, s, t, t_e
from ..term import Source, Term
from ..values import whole

__all__ = ["DEEPEP_DISPATCH_CONFIGS", "DEEPEP_COMBINE_CONFIGS", "DEEPEP_WORKSPACE",
           "NVL_PEERS", "deepep_nvl_bytes", "deepep_rdma_bytes", "deepep_buffer_bytes",
           "deepep_group_bytes", "deepep_buffer", "hybridep_buffer", "hybridep_rdma_buffer",
           "HYBRIDEP_CHUNK_TOKENS", "check_deepep_group",
           "dispatcher_buffers", "allgather_dispatch_buffer"]

#: DeepEP's ``Buffer.get_dispatch_config`` (``deep_ep/buffer.py:228-254``, hybrid-ep
#: ``94a9f8f6b1``): ranks -> (nvl send, nvl recv, rdma send, rdma recv) chunked tokens.
DEEPEP_DISPATCH_CONFIGS = {2: (24, 256, 6, 128), 4: (6, 256, 6, 128), 8: (6, 256, 6, 128),
                           16: (36, 288, 20, 128), 24: (8, 288, 32, 128), 32: (32, 288, 32, 128),
                           64: (20, 288, 28, 128), 128: (20, 560, 32, 128),
                           144: (32, 720, 12, 128), 160: (28, 720, 12, 128)}
#: DeepEP's ``Buffer.get_combine_config`` (``deep_ep/buffer.py:256-282``).
DEEPEP_COMBINE_CONFIGS = {2: (10, 256, 6, 128), 4: (9, 256, 6, 128), 8: (4, 256, 6, 128),
                          16: (4, 288, 12, 128), 24: (1, 288, 8, 128), 32: (1, 288, 8, 128),
                          64: (1, 288, 20, 128), 128: (1, 560, 12, 128),
                          144: (2, 720, 8, 128), 160: (2, 720, 8, 128)}
#: DeepEP's ``NUM_WORKSPACE_BYTES`` (``csrc/kernels/configs.cuh:5``), ``cudaMalloc``'d by every
#: ``Buffer`` (``csrc/deep_ep.cpp:187``) [bytes].
DEEPEP_WORKSPACE = 32 * 2**20
#: DeepEP's ``NUM_MAX_NVL_PEERS`` (``configs.cuh:3``): ranks of one NVLink domain.
NVL_PEERS = 8
# kNumMaxTopK = kNumMaxScales = 128; topk_idx int64, weights and scales fp32; SourceMeta 2 ints
_PER_TOKEN_META = 8 + 128 * 8 + 128 * 4 + 128 * 4
# the barrier signals and the peer pointer tables allocated behind num_nvl_bytes (deep_ep.cpp:145-147)
_NVL_TAIL = NVL_PEERS * (4 + 8 + 8)

_MC = "megatron-core"
_DEEPEP = Source("deepep", "csrc/config.hpp:51-100 (Config.get_nvl_buffer_size_hint, "
                 "get_rdma_buffer_size_hint); deep_ep/buffer.py:228-282 (dispatch / combine "
                 "configs); csrc/deep_ep.cpp:145-188 (the NVL tail, the 32 MiB workspace); "
                 "Megatron-LM d98e8a64dd megatron/core/transformer/moe/fused_a2a.py:36-69 get_buffer")
#: HybridEP's tokens per chunk of the dispatch and combine APIs (``Configurer``,
#: ``csrc/hybrid_ep/config.cuh:383-384``: ``NUM_OF_TOKENS_PER_CHUNK_*_API``, default 64): the
#: RDMA flags count one per chunk and remote node.
HYBRIDEP_CHUNK_TOKENS = 64
_HYBRIDEP_RDMA = Source("deepep-hybrid-ep-rdma", "csrc/hybrid_ep/buffer/internode_doca.cu:383-432 "
                        "(RDMACoordinator::allocate_dispatch_buffers), 557-592 "
                        "(allocate_combine_buffers); the same sizes in internode_nixl.cu:158-221; "
                        "hybrid_ep.cu:61-97 (allocated when num_of_nodes > 1); config.cuh:383-384")
_HYBRIDEP = Source("deepep", "csrc/hybrid_ep/buffer/intranode.cu:127-129, 193-213, 253-261 "
                   "(NVLCoordinator: T G token slots, shared dispatch / combine buffers); "
                   "csrc/hybrid_ep/extension/allgather.cu:142-147 (the gathered routing map); "
                   "Megatron-LM d98e8a64dd megatron/core/transformer/moe/fused_a2a.py:285-347")


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def deepep_nvl_bytes(hidden_bytes: int, num_ranks: int, num_sms: int, recv_tokens: int) -> int:
    r"""DeepEP's ``Config.get_nvl_buffer_size_hint`` [bytes] (``csrc/config.hpp:51-73``).

    .. math::

        \Bigl\lceil \tfrac{C\,n_{\mathrm{nvl}}}{128}\bigl(4(2 n_{\mathrm{rdma}} + 3)
        + R\,(H + 8 + 128\cdot 8 + 2\cdot 128\cdot 4)\bigr)\Bigr\rceil \cdot 128

    with :math:`C` = ``num_sms / 2`` channels, :math:`n_{\mathrm{nvl}} = \min(G, 8)`,
    :math:`n_{\mathrm{rdma}} = \max(G/8, 1)`, :math:`R` the config's NVLink receive tokens and
    :math:`H` = ``hidden_bytes``: per channel and NVLink peer, a queue of R tokens with their
    source metadata (8 B), top-k indices (int64) and weights (fp32) and FP8 scales (fp32), at
    DeepEP's maxima of 128 each.

    Parameters
    ----------
    hidden_bytes : int
        Bytes of one token's hidden state [bytes].
    num_ranks : int
        Ranks of the group [GPUs].
    num_sms : int
        ``Buffer.num_sms`` [1].
    recv_tokens : int
        ``num_max_nvl_chunked_recv_tokens`` [tokens].

    Examples
    --------
    >>> deepep_nvl_bytes(2 * 2048, 8, 20, 256)   # 10 x 8 x (20 + 256 x 6152), 128-aligned
    125994624
    """
    channels, nvl, rdma = num_sms // 2, min(num_ranks, NVL_PEERS), max(num_ranks // NVL_PEERS, 1)
    n = channels * nvl * (2 * rdma + 3) * 4 + channels * nvl * recv_tokens * (hidden_bytes
                                                                               + _PER_TOKEN_META)
    return _align(n, 128)


def deepep_rdma_bytes(hidden_bytes: int, num_ranks: int, num_sms: int, rdma_send: int,
                      rdma_recv: int) -> int:
    r"""DeepEP's ``Config.get_rdma_buffer_size_hint`` [bytes] (``csrc/config.hpp:75-100``): 0
    within one NVLink domain (:math:`G \le 8`), else

    .. math::

        \Bigl\lceil \tfrac{C\,n_{\mathrm{rdma}}}{128}\bigl(8(2\cdot 8 + 2)
        + 2R'(H + 8 + 128\cdot 8 + 2\cdot 128\cdot 4 + 16)\bigr)\Bigr\rceil \cdot 128

    with :math:`R'` the RDMA receive tokens rounded up to a multiple of the send chunk
    (``Config``'s constructor): a send and a receive queue per channel and RDMA peer.

    Parameters
    ----------
    hidden_bytes, num_ranks, num_sms
        As :func:`deepep_nvl_bytes`.
    rdma_send, rdma_recv : int
        ``num_max_rdma_chunked_send_tokens`` and ``..._recv_tokens`` [tokens].

    Examples
    --------
    >>> deepep_rdma_bytes(4096, 8, 20, 6, 128)
    0
    >>> deepep_rdma_bytes(4096, 16, 20, 20, 128)    # 10 x 2 x (144 + 280 x 6168), R' = 140
    34543744
    """
    if num_ranks <= NVL_PEERS:
        return 0
    channels, rdma = num_sms // 2, num_ranks // NVL_PEERS
    recv = _align(rdma_recv, rdma_send)
    n = channels * rdma * (NVL_PEERS * 2 + 2) * 2 * 4 \
        + channels * rdma * recv * 2 * (hidden_bytes + _PER_TOKEN_META + 16)
    return _align(n, 128)


def check_deepep_group(num_ranks: int, num_sms: int = 20) -> None:
    """Refuse a group size or SM count DeepEP refuses.

    Examples
    --------
    >>> check_deepep_group(8)
    >>> check_deepep_group(12)
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: DeepEP has no dispatch config for 12 ranks (e t_e must be one of 2, 4, 8, 16, 24, 32, 64, 128, 144, 160)
    """
    if num_ranks not in DEEPEP_DISPATCH_CONFIGS:
        raise InvalidValueError(f"DeepEP has no dispatch config for {num_ranks} ranks (e t_e must "
                                f"be one of {', '.join(map(str, DEEPEP_DISPATCH_CONFIGS))})")
    if isinstance(num_sms, bool) or not isinstance(num_sms, int) or num_sms <= 0 or num_sms % 2:
        raise InvalidValueError(f"DeepEP's SM count must be a positive even number, got "
                                f"{num_sms!r:.40}")


def deepep_buffer_bytes(hidden_bytes: int, num_ranks: int, num_sms: int = 20) -> tuple:
    """``(num_nvl_bytes, num_rdma_bytes)`` as Megatron's ``get_buffer`` asks them: the larger
    of the dispatch and the combine config's hints.

    Examples
    --------
    >>> deepep_buffer_bytes(4096, 8)
    (125994624, 0)
    """
    check_deepep_group(num_ranks, num_sms)
    cfgs = (DEEPEP_DISPATCH_CONFIGS[num_ranks], DEEPEP_COMBINE_CONFIGS[num_ranks])
    return (max(deepep_nvl_bytes(hidden_bytes, num_ranks, num_sms, cf[1]) for cf in cfgs),
            max(deepep_rdma_bytes(hidden_bytes, num_ranks, num_sms, cf[2], cf[3]) for cf in cfgs))


def deepep_group_bytes(group: int, num_sms: int = 20) -> sp.Expr:
    r"""DeepEP's buffer for a group of ``group`` ranks, symbolic in h [bytes].

    The NVLink (and, beyond 8 ranks, RDMA) hints at ``hidden_bytes = 2h``, 128-aligned as
    DeepEP aligns them, with the 160-byte NVLink tail and the 32 MiB workspace
    (:func:`deepep_buffer`'s branch for :math:`G` = ``group``).

    .. math:: 128\Bigl\lceil\frac{N_{\mathrm{nvl}}}{128}\Bigr\rceil + 160 + 2^{25}
        + 128\Bigl\lceil\frac{N_{\mathrm{rdma}}}{128}\Bigr\rceil

    Parameters
    ----------
    group : int
        Ranks of the ETP x EP group [GPUs].
    num_sms : int
        ``Buffer.num_sms`` [1].

    Examples
    --------
    >>> deepep_group_bytes(8).subs(h, 2048) == deepep_buffer_bytes(4096, 8)[0] + 160 + 2**25
    True

    References
    ----------
    .. [deepep] DeepEP hybrid-ep ``94a9f8f6b1`` ``csrc/config.hpp:51-100``,
       ``deep_ep/buffer.py:228-282``, ``csrc/deep_ep.cpp:145-188``.
    """
    check_deepep_group(group, num_sms)
    hb = 2 * h
    channels = num_sms // 2
    nvl, rdma = min(group, NVL_PEERS), max(group // NVL_PEERS, 1)
    cfgs = (DEEPEP_DISPATCH_CONFIGS[group], DEEPEP_COMBINE_CONFIGS[group])
    recv = max(cf[1] for cf in cfgs)
    nvl_b = channels * nvl * (2 * rdma + 3) * 4 + channels * nvl * recv * (hb + _PER_TOKEN_META)
    out = 128 * sp.ceiling(nvl_b / 128) + _NVL_TAIL + DEEPEP_WORKSPACE
    if group > NVL_PEERS:
        rr = max(_align(cf[3], cf[2]) for cf in cfgs)
        rdma_b = channels * rdma * (NVL_PEERS * 2 + 2) * 2 * 4 \
            + channels * rdma * rr * 2 * (hb + _PER_TOKEN_META + 16)
        out += 128 * sp.ceiling(rdma_b / 128)
    return out


def deepep_buffer(num_sms: int = 20) -> Term:
    r"""DeepEP's buffer on every GPU of a flex-dispatched MoE model [bytes].

    .. math:: M_{\mathrm{DeepEP}} = N_{\mathrm{nvl}}(2h, G) + 160 + 32\,\mathrm{MiB}
        + N_{\mathrm{rdma}}(2h, G), \qquad G = e\,t_e

    :math:`N_{\mathrm{nvl}}` and :math:`N_{\mathrm{rdma}}` the larger of the dispatch and
    combine configs' hints (:func:`deepep_nvl_bytes`, :func:`deepep_rdma_bytes`); 160 B of
    barrier signals and peer pointers follow the NVLink buffer.  A piecewise expression over
    DeepEP's supported group sizes (:data:`DEEPEP_DISPATCH_CONFIGS`; any other :math:`G` is
    refused, :func:`check_deepep_group`, and counts 0 here).  Not counted: NVSHMEM's own heap
    reservation beyond ``num_rdma_bytes`` (DeepEP maps it in 512 MiB granules,
    ``NVSHMEM_CUMEM_GRANULARITY``) and the mapped host counters.

    Parameters
    ----------
    num_sms : int
        ``Buffer.num_sms``: Megatron's ``moe_flex_dispatcher_num_sms`` (default 20) [1].

    Returns
    -------
    Term
        ``deepep_buffers`` [bytes].

    Examples
    --------
    Qwen3-30B-A3B (h = 2048) over e t_e = 4: 10 x 4 x (20 + 256 x 6152) = 62997280 B,
    128-aligned, then 160 B and 32 MiB:

    >>> deepep_buffer().evaluate({h: 2048, e: 4, t_e: 1})
    96551968

    References
    ----------
    .. [deepep] DeepEP hybrid-ep ``94a9f8f6b1``: ``csrc/config.hpp``, ``deep_ep/buffer.py``,
       ``csrc/deep_ep.cpp``; Megatron-LM d98e8a64dd ``fused_a2a.py`` (megatron-core).
    """
    check_deepep_group(2, num_sms)
    group = e * t_e
    expr = sp.Piecewise(*((deepep_group_bytes(g, num_sms), sp.Eq(group, g))
                          for g in DEEPEP_DISPATCH_CONFIGS), (0, True))
    return Term("deepep_buffers", expr, f"DeepEP's NVLink / RDMA buffers ({num_sms} SMs) and its "
                "32 MiB workspace for the flex dispatcher's e t_e group, outside PyTorch's "
                "allocator", _DEEPEP, label="DeepEP buffers")


def _hybridep_group(ranks_per_domain) -> tuple:
    """(ranks per NVLink domain checked, tokens of one GPU s b / (c t), the flex dispatcher's
    e t_e group, its ranks in one domain min(e t_e, ranks per domain)) of the HybridEP buffers."""
    ranks_per_domain = whole(ranks_per_domain, "ranks_per_domain", limit="gpus")
    tokens, group = s * b / (c * t), e * t_e
    return ranks_per_domain, tokens, group, sp.Min(group, ranks_per_domain)


def hybridep_buffer(ranks_per_domain: int = NVL_PEERS) -> Term:
    r"""HybridEP's buffers on every GPU of a flex-dispatched MoE model [bytes].

    With :math:`T = s\,b/(c\,t)` tokens on one rank (Megatron needs sequence parallelism for
    MoE under t > 1), :math:`G = e\,t_e` ranks, :math:`E/e` local experts and
    :math:`R = \min(G, 8)` ranks per NVLink domain (``detect_accessible_ranks``):

    .. math:: M_{\mathrm{HybridEP}} = T\,G\,\Bigl(2h + 4\,\frac{E}{e}R
        + 4\Bigl\lfloor\frac{h}{128}\Bigr\rfloor\Bigr) + T\,G\cdot E\,t_e

    The NVLink coordinator sizes its token slots for the worst case, every token of the
    group to one rank (``max_num_of_tokens = T R n_{\mathrm{nodes}}``): the 16-bit tokens and
    fp32 probabilities (dispatch and combine share them, ``use_shared_buffer``) and fp32
    scaling factors; the routing-map all-gather keeps one bool per token slot and expert of the
    group.  Not counted: across NVLink domains the RDMA coordinator's buffers
    (``internode_doca.cu`` / ``internode_nixl.cu``: :func:`hybridep_rdma_buffer`), the
    preprocessing scratch (a few
    bytes per block and expert), and the rounding of :math:`T` up to a multiple of 16 that
    ``update_template_config`` applies before a dispatch (``hybrid_ep_buffer.py``; none for
    the usual token counts).

    Parameters
    ----------
    ranks_per_domain : int
        GPUs one NVLink domain holds (8 on HGX; an NVL72 rack holds 72) [GPUs].

    Returns
    -------
    Term
        ``hybridep_buffers`` [bytes].

    Examples
    --------
    DeepSeek-V3 (h = 7168, E = 256) at e = 8, s = 4096, b = 1, t = c = 1:
    T G = 32768 slots of 14336 + 4 x 32 x 8 + 4 x 56 bytes, and 32768 x 256 map bytes:

    >>> hybridep_buffer().evaluate({h: 7168, E: 256, e: 8, t_e: 1, s: 4096, b: 1, c: 1, t: 1})
    519045120

    References
    ----------
    .. [deepep] DeepEP hybrid-ep ``94a9f8f6b1`` ``csrc/hybrid_ep/buffer/intranode.cu``,
       ``csrc/hybrid_ep/extension/allgather.cu``; Megatron-LM d98e8a64dd ``fused_a2a.py``.
    """
    ranks_per_domain, tokens, group, per_domain = _hybridep_group(ranks_per_domain)
    slots = tokens * group
    expr = slots * (2 * h + 4 * E / e * per_domain + 4 * sp.floor(h / 128)) + slots * E * t_e
    return Term("hybridep_buffers", expr, "HybridEP's NVLink token / probability slots and "
                "gathered routing map for the flex dispatcher's e t_e group, outside PyTorch's "
                "allocator", _HYBRIDEP, label="HybridEP buffers")


def hybridep_rdma_buffer(ranks_per_domain: int = NVL_PEERS) -> Term:
    r"""HybridEP's RDMA buffers on every GPU when its group spans NVLink domains [bytes].

    With :math:`T = s\,b/(c\,t)` tokens on one rank (``max_num_of_tokens_per_rank``, what
    Megatron's ``init_hybrid_ep_buffer`` passes), :math:`G = e\,t_e` ranks, :math:`R =
    \min(G, R_{\max})` ranks per NVLink domain, :math:`n = G/R` domains (``num_of_nodes``),
    :math:`L = E/e` local experts, :math:`k = \lfloor h/128\rfloor` fp32 scaling factors per
    token and the 64-token chunks :math:`C` of the dispatch and combine APIs, the RDMA
    coordinator ``cudaMalloc``\ s, when :math:`n > 1`:

    .. math::

        M_{\mathrm{RDMA}} = \underbrace{T\,(2h + 4 L R n + 4k)}_{\text{dispatch: the rank's
        input}} + \underbrace{(n-1)\,T\,(2h + 4 L R + 4k)}_{\text{dispatch: from each remote
        node}} + \underbrace{2\,(n-1)\,T\,(2h + 4 L R)}_{\text{combine: reduced and received}}
        + 2\cdot 2\cdot 8\,(n-1)\bigl(\lceil T/C\rceil + 2\bigr) + 2\cdot 8

    (the bf16 tokens, fp32 probabilities and scaling factors; two uint64 flag arrays per
    direction with a barrier slot per chunk and remote node plus two per node, and one
    expected-flag word each).  Megatron does not dispatch in FP8 (``fp8_dispatch = False``),
    so the tokens are ``UINT16``.  None within one NVLink domain.

    Parameters
    ----------
    ranks_per_domain : int
        GPUs one NVLink domain holds, :math:`R_{\max}` (8 on HGX, 72 on an NVL72 rack) [GPUs].

    Returns
    -------
    Term
        ``hybridep_rdma_buffers`` [bytes].

    Examples
    --------
    DeepSeek-V3 (h = 7168, E = 256) at t = 2 (SP), e = 64 on HGX nodes: T = 2048, n = 8,
    L = 4: 2048 x (14336 + 1024 + 224) + 7 x 2048 x (14336 + 128 + 224) + 14 x 2048 x
    (14336 + 128) + 32 x 7 x 34 + 16:

    >>> hybridep_rdma_buffer().evaluate({h: 7168, E: 256, e: 64, t_e: 1, s: 4096, b: 1,
    ...                                  c: 1, t: 2})
    657202640
    >>> hybridep_rdma_buffer().evaluate({h: 7168, E: 256, e: 8, t_e: 1, s: 4096, b: 1,
    ...                                  c: 1, t: 1})    # one NVLink domain: none
    0

    References
    ----------
    .. [deepep] DeepEP hybrid-ep ``94a9f8f6b1`` ``csrc/hybrid_ep/buffer/internode_doca.cu``
       (``RDMACoordinator::allocate_dispatch_buffers``, ``allocate_combine_buffers``),
       ``csrc/hybrid_ep/hybrid_ep.cu`` (``HybridEPBuffer::allocate_buffer``),
       ``csrc/hybrid_ep/config.cuh`` (``Configurer``); Megatron-LM d98e8a64dd
       ``fused_a2a.py:285-347, 400-414``.
    """
    ranks_per_domain, tokens, group, per_domain = _hybridep_group(ranks_per_domain)
    nodes, local = group / per_domain, E / e
    scales = sp.floor(h / 128)
    remote = nodes - 1
    dispatch = tokens * (2 * h + 4 * local * per_domain * nodes + 4 * scales) \
        + remote * tokens * (2 * h + 4 * local * per_domain + 4 * scales)
    combine = 2 * remote * tokens * (2 * h + 4 * local * per_domain)
    flags = 2 * 2 * 8 * remote * (sp.ceiling(tokens / HYBRIDEP_CHUNK_TOKENS) + 2) + 2 * 8
    expr = sp.Piecewise((dispatch + combine + flags, sp.Gt(group, ranks_per_domain)), (0, True))
    return Term("hybridep_rdma_buffers", expr, "HybridEP's RDMA staging buffers (dispatch and "
                "combine tokens, probabilities, scaling factors, flags) when the flex "
                "dispatcher's e t_e group spans NVLink domains, outside PyTorch's allocator",
                _HYBRIDEP_RDMA, label="HybridEP RDMA buffers")


def dispatcher_buffers(dispatcher: str, num_sms: int = 20, ranks_per_domain=None) -> tuple:
    """The buffer Terms of a MoE token dispatcher: DeepEP's or HybridEP's (its NVLink domain
    ``ranks_per_domain``, None: 8), none for alltoall and allgather.

    Examples
    --------
    >>> [term.key for term in dispatcher_buffers("deepep")], dispatcher_buffers("alltoall")
    (['deepep_buffers'], ())
    """
    if dispatcher == "deepep":
        return (deepep_buffer(num_sms),)
    if dispatcher == "hybridep":
        domain = ranks_per_domain or NVL_PEERS
        return (hybridep_buffer(domain), hybridep_rdma_buffer(domain))
    return ()


def allgather_dispatch_buffer() -> Term:
    r"""The allgather dispatcher's gathered hidden states, kept in Megatron's global buffer [bytes].

    .. math:: M_{\mathrm{gather}} = 2\,\frac{s\,b}{c\,t}\,e\,t_e\,h

    ``gather_from_sequence_parallel_region(hidden_states, group=tp_ep_group,
    use_global_buffer=True)`` writes the :math:`T\,G` gathered 16-bit tokens
    (:math:`T = s b/(c t)` on each of the :math:`G = e\,t_e` ranks) into the
    ``GlobalMemoryBuffer`` tensor named ``"mpu"``, which grows to the largest request and is
    never freed; the dispatcher permutes out of it, so autograd keeps no reference (the MoE
    layer's own activations are counted apart).  Its backward's reduce-scatter writes a
    :math:`T`-token slice of the same buffer.

    Returns
    -------
    Term
        ``dispatcher_gather_buffer`` [bytes].

    Examples
    --------
    >>> allgather_dispatch_buffer().evaluate({s: 4096, b: 1, c: 1, t: 2, e: 4, t_e: 2, h: 2048})
    67108864

    References
    ----------
    .. [megatron-core] Megatron-LM d98e8a64dd ``moe/token_dispatcher.py:281-303``,
       ``tensor_parallel/mappings.py:118-156``, ``utils.py:727-753``.
    """
    # a group of one rank gathers nothing (token_dispatch: tp_size > 1 or ep_size > 1)
    gathered = sp.Piecewise((0, sp.Eq(e * t_e, 1)), (2 * s * b / (c * t) * e * t_e * h, True))
    return Term("dispatcher_gather_buffer", gathered,
                "the allgather dispatcher's gathered 16-bit hidden states of the e t_e group, in "
                "Megatron's global memory buffer for the whole run",
                Source(_MC, "transformer/moe/token_dispatcher.py:281-303 (MoEAllGatherToken"
                       "Dispatcher.token_dispatch, use_global_buffer=True); tensor_parallel/"
                       "mappings.py:118-156; utils.py:727-753 GlobalMemoryBuffer"),
                label="allgather dispatch buffer")
