r"""What a MoE layer runs beyond its GEMM FLOPs: grouped expert GEMMs, the dispatcher's copies,
the router in the input precision, and the expert-parallel all-to-all by where its ranks sit.

Megatron-core's MoE layer with the all-to-all dispatcher (``MoEAlltoAllTokenDispatcher``,
megatron/core/transformer/moe/token_dispatcher.py at Megatron-LM d98e8a64dd, the class
docstring lists the steps) runs, per layer and micro-batch on one GPU holding :math:`T` tokens
with top-:math:`k` routing over :math:`E` experts, :math:`E/e` of them local:

1. the router: ``router_gating_linear(input, weight, bias, router_dtype)`` in the *input*
   dtype (router.py ``gating``: bf16 unless ``moe_router_dtype`` is fp32/fp64; never an FP8
   GEMM), then the score function and top-k over the :math:`[T, E]` logits;
2. permutation 1 (moe_utils.py ``permute``): ``tokens.index_select(0, sorted_indices)``, the
   :math:`Tk` routed copies of the hidden states gathered into expert order;
3. the all-to-all of those rows over the EP group (``all_to_all(self.ep_group, ...)``);
4. permutation 2 (``sort_chunks_by_idxs``, only when ``num_local_experts > 1``): the received
   rows re-sorted from (source rank, expert) to (expert, source rank);
5. the experts: TE's ``GroupedLinear`` (experts.py ``TEGroupedMLP``), one GEMM per local expert
   with its token count (``m_splits``);
6. the mirror on the way back: un-sort (``sort_chunks_by_idxs`` with
   ``restore_output_by_local_experts``), the all-to-all, and ``unpermute`` (the :math:`Tk` rows
   scattered back with ``index_add_`` / ``scatter_add_`` into :math:`[T, h]`).

This module prices 2, 4 and 6's copies as gathers (:mod:`memsym.timing.moe_copies`), 5 as TE
launches it (:func:`grouped_gemm_time`), 1's GEMM at the input precision
(:func:`gemm_seconds`), and 3 with the part of the EP group inside this GPU's NVLink domain on
NVLink and the rest through its NIC (:func:`ep_alltoall_time`).

References
----------
.. [megatron-moe] Megatron-LM d98e8a64dd: megatron/core/transformer/moe/token_dispatcher.py
   (``MoEAlltoAllTokenDispatcher``: ``dispatch_preprocess``, ``token_dispatch``,
   ``dispatch_postprocess``, ``combine_preprocess``, ``token_combine``, ``combine_postprocess``),
   moe_utils.py (``permute``, ``unpermute``, ``sort_chunks_by_idxs``), router.py (``gating``,
   ``routing``), experts.py (``TEGroupedMLP``), transformer_config.py (``moe_router_dtype``
   default None, ``moe_token_dispatcher_type`` default "allgather", ``moe_router_fusion``).
.. [te-multistream] NVIDIA/TransformerEngine transformer_engine/common/util/multi_stream.cpp
   (``num_compute_streams = 4``) and transformer_engine/common/gemm/cublaslt_gemm.cu
   (``nvte_multi_stream_cublas_gemm``: GEMM i of a group on compute stream i mod 4), the path
   of ``GroupedLinear`` (read through the code index; no pinned commit).
.. [nccl-nvlink-efficiency] NVIDIA/nccl-tests issue #212, NCCL maintainer's comment: the
   370 GB/s effective NVLink bandwidth of H100 is what "BusBw" shows "when running
   non-allreduce operations": the all-to-all included, so the all-to-all inside NVLink is
   priced at the same efficiency as the ring collectives
   (:data:`memsym.timing.collectives.NVLINK_NCCL_EFFICIENCY`).
"""

from __future__ import annotations

import numpy as np

from ..hardware import gpu as _gpu
from .collectives import (LINK_LATENCY, collective_bytes, collective_time, group_bandwidth,
                          intra_bandwidth, nvlink_domain)
from .efficiency import (GEMM_INPUT_BYTES, K0, LAUNCH_OVERHEAD, TILES, ArrayMemo, as_array,
                         ceiling, gemm_time, memory_time, peak_precision)
from .expert_casts import unfused_seconds
from .flex_dispatch import FLEX_DISPATCHERS, destinations_per_token, flex_alltoall_time
from .moe_copies import ROUTER_BYTES_PER_LOGIT, dispatch_bytes, dispatch_seconds
from .moe_eager import eager_seconds
from .quantize import cast_copies, cast_rate, current_scaling

__all__ = ["TE_GEMM_STREAMS", "ROUTER_BYTES_PER_LOGIT", "grouped_gemm_time", "gemm_seconds",
           "dispatch_bytes", "grouped_quantize_bytes", "ep_ranks_inside", "ep_alltoall_time",
           "expert_tp_collectives", "token_count_gather_time", "moe_layer_extras"]

#: Compute streams Transformer Engine spreads a grouped GEMM's per-expert cuBLAS calls over
#: ([te-multistream]: ``num_compute_streams = 4``, GEMM i on stream i mod 4).
TE_GEMM_STREAMS = 4


def grouped_gemm_time(M, N, K, count, device, precision: str = "bf16", *, eta_gemm=None,
                      streams: int = TE_GEMM_STREAMS):
    r"""Seconds of ``count`` GEMMs ``[M, K] x [K, N]`` launched as TE's grouped GEMM [s].

    ``GroupedLinear`` issues one cuBLAS GEMM per local expert, round-robin over
    :data:`TE_GEMM_STREAMS` compute streams [te-multistream], so up to
    :math:`S = \min(\text{streams}, \text{count})` experts' GEMMs share the SMs at once: their
    output tiles run in common waves (tile quantisation per expert, wave quantisation over the
    :math:`S` experts' tiles together), :math:`\text{count}/S` such rounds, and one launch
    per GEMM:

    .. math::

        t = \frac{\text{count}}{S}\max\Bigl(\frac{2SMNK}{\eta_{\max}F\,q_S\,K/(K+K_0)},\;
            \frac{S\,b\,(MK + KN + MN)}{B_{\text{HBM}}}\Bigr)
            + \text{count}\cdot t_{\text{launch}},\quad
        q_S = \max_{\text{tile}} \frac{r\,S M N}{\lceil S\lceil M/t_m\rceil\lceil N/t_n\rceil
              / n_{\text{SM}}\rceil\, n_{\text{SM}}\, t_m t_n}

    With ``count`` = 1 this is :func:`memsym.timing.efficiency.gemm_time`.

    Parameters
    ----------
    M, N, K : array_like
        One expert's GEMM dimensions [elements] (M: that expert's routed rows).
    count, streams : array_like, int
        Local experts [1]; concurrent compute streams [1].
    device : str or GPU
        The GPU.
    precision : {"bf16", "fp16", "fp8", "mxfp8", "fp32", "fp4"}
        The GEMM's input precision.
    eta_gemm : float, optional
        A fixed achieved math-side efficiency replacing the ceiling and quantisation [1].

    Returns
    -------
    numpy.ndarray
        Time [s].

    Examples
    --------
    Hand count: 8 experts of [256, 2048] x [2048, 1536] on an H100 (132 SMs) in bf16, each
    math-bound.  Alone, an expert's best tile is 64 x 64 (4 x 24 = 96 tiles in one wave:
    q = 0.7 x 96/132; 128 x 128 gives 24 tiles, 0.95 x 24/132); four at once, 128 x 128 fills
    one wave with 4 x 24 = 96 tiles (q = 0.95 x 96/132, above 64 x 64's 384 tiles in 3 waves,
    0.7 x 384/396).  The math time per expert falls by 0.95/0.7:

    >>> one = float(gemm_time(256, 1536, 2048, "h100", count=8))
    >>> grouped = float(grouped_gemm_time(256, 1536, 2048, 8, "h100"))
    >>> launch = 8 * LAUNCH_OVERHEAD
    >>> round((one - launch) / (grouped - launch), 9) == round(0.95 / 0.7, 9)
    True
    >>> bool(grouped_gemm_time(4096, 4096, 4096, 1, "h100") == gemm_time(4096, 4096, 4096, "h100"))
    True

    References
    ----------
    Megatron-LM d98e8a64dd moe/experts.py (``TEGroupedMLP``), [transformer-engine] GroupedLinear.
    """
    dev = _gpu(device)
    M, N, K, count = (as_array(x) for x in (M, N, K, count))
    S = np.minimum(float(streams), count)
    if eta_gemm is not None:
        # the override fixes the math-side efficiency: the grouping changes nothing then
        return gemm_time(M, N, K, dev, precision, eta_gemm=eta_gemm, count=count)
    # each distinct call once (a search's step-time groups share their experts' GEMMs)
    key = _GROUPED_SEEN.key((dev, precision, streams, ceiling(dev, precision), TILES, K0,
                             LAUNCH_OVERHEAD, GEMM_INPUT_BYTES.get(precision, 2)),
                            (M, N, K, count))
    got = _GROUPED_SEEN.get(key)
    if got is not None:
        return got
    sms = dev.sm_count
    q = np.zeros(np.broadcast(M, N, S).shape)
    for tm, tn, rel in TILES:
        tiles = S * np.ceil(M / tm) * np.ceil(N / tn)
        waves = np.ceil(tiles / sms)
        q = np.maximum(q, rel * S * M * N / (waves * sms * tm * tn))
    eff = ceiling(dev, precision) * q * K / (K + K0)
    width = GEMM_INPUT_BYTES.get(precision, 2)
    t_math = 2.0 * S * M * N * K / (dev.peak(peak_precision(precision)) * eff)
    t_mem = width * S * (M * K + K * N + M * N) / dev.hbm_bandwidth
    return _GROUPED_SEEN.put(key, count / S * np.maximum(t_math, t_mem) + count * LAUNCH_OVERHEAD)


#: :func:`grouped_gemm_time`'s results already computed (memsym.timing.efficiency.ArrayMemo).
_GROUPED_SEEN = ArrayMemo()


def gemm_seconds(q, which: str, device, precision: str, *, eta_gemm=None):
    r"""Seconds of one forward GEMM record ``q`` (:class:`memsym.timing.gemm.Gemm`) in one pass.

    .. math:: t_{fwd} = t(M, N, K),\ t_{dgrad} = t(M, K, N),\ t_{wgrad} = t(K, N, M)

    ``which``: ``"forward"`` (``[M, K] x [K, N]``), ``"dgrad"`` (``[M, N] x [N, K]``) or
    ``"wgrad"`` (``[K, M] x [M, N]``).  The routed experts (``expert_fc1``, ``expert_fc2``)
    run as TE's grouped GEMM (:func:`grouped_gemm_time`); the router runs in the input dtype,
    bf16 under an FP8 recipe (router.py ``gating``: ``router_gating_linear`` with
    ``router_dtype = input.dtype``); every other GEMM as :func:`memsym.timing.efficiency.
    gemm_time`.

    Parameters
    ----------
    q : memsym.timing.gemm.Gemm
        One forward GEMM of the layer.
    which : {"forward", "dgrad", "wgrad"}
        The pass.
    device : str or GPU
        The GPU.
    precision : {"bf16", "fp16", "fp8", "mxfp8", "fp32", "fp4"}
        The layer's GEMM precision.
    eta_gemm : float, optional
        A fixed achieved GEMM efficiency in (0, 1] [1].

    Returns
    -------
    numpy.ndarray
        Time [s].

    Examples
    --------
    >>> from memsym.timing.gemm import Gemm
    >>> r = Gemm("router", 4096, 128, 2048)
    >>> fp8 = gemm_seconds(r, "forward", "h100", "fp8")
    >>> bool(fp8 == gemm_time(4096, 128, 2048, "h100", "bf16"))
    True

    References
    ----------
    Megatron-LM d98e8a64dd moe/router.py (``gating``); [narayanan] arXiv:2104.04473 §5.1.
    """
    M, N, K = {"forward": (q.M, q.N, q.K), "dgrad": (q.M, q.K, q.N),
               "wgrad": (q.K, q.N, q.M)}[which]
    if q.name.startswith("expert_"):
        return grouped_gemm_time(M, N, K, q.count, device, precision, eta_gemm=eta_gemm)
    if q.name == "router" and precision in ("fp8", "mxfp8", "fp4"):
        precision = "bf16"
    return gemm_time(M, N, K, device, precision, eta_gemm=eta_gemm, count=q.count)


def grouped_quantize_bytes(rows, k_dim, fp8_recipe=None, non_tn_fp8_gemm=False):
    r"""HBM bytes of FP8-quantising the routed rows entering the grouped fc1 GEMM [bytes].

    .. math:: (2 + n w)\,R\,h:\quad 4\,R\,h \;(\text{MXFP8: } + 2 R h / 32;\
       \text{per-tensor on a non-TN GPU: } 3\,R\,h)

    TE's ``GroupedLinear`` (grouped_linear.py ``_GroupedLinear.forward``: ``split_quantize``,
    one split per expert) reads the bf16 rows (2 bytes), writes the FP8 row-wise and
    column-wise copies (1 + 1; MXFP8: a scale byte per 32 elements each), or under per-tensor
    FP8 on a GPU with non-TN FP8 GEMMs the row-wise copy alone (n = 1,
    :func:`memsym.timing.quantize.cast_copies`: TE d0067d0da6 csrc/quantizer.cpp:546-547,
    799-800, no transpose); a dense fc1's input comes quantised from the fused norm (cast
    after it under current scaling: :func:`memsym.timing.quantize.cast_bytes`).  Under
    current scaling (``tensorwise``) each split's ``quantize`` first reads its rows for the
    amax (TE d0067d0da6 csrc/extensions/cast.cpp:907-940, csrc/quantizer.cpp:1009-1012): 2
    more bytes an element (:func:`memsym.timing.quantize.current_scaling`); so under NVFP4
    (``nvte_group_hadamard_transform_amax`` before the grouped cast, TE d0067d0da6
    csrc/extensions/cast.cpp:146-200; :func:`memsym.timing.quantize.amax_pass`).

    Parameters
    ----------
    rows : array_like
        Routed rows R entering the grouped GEMM [rows].
    k_dim : float
        Their width h [elements].
    fp8_recipe : {None, "delayed", "tensorwise", "mxfp8", "nvfp4"}
        The quantization recipe (``"nvfp4"``: precision fp4).
    non_tn_fp8_gemm : bool
        Whether the GPU takes non-TN FP8 GEMMs (:attr:`memsym.devices.GPU.non_tn_fp8_gemm`).

    Examples
    --------
    >>> int(grouped_quantize_bytes(32768, 2048)) == 4 * 32768 * 2048
    True
    >>> int(grouped_quantize_bytes(32768, 2048, "mxfp8")) == (4 + 1 / 16) * 32768 * 2048
    True
    >>> int(grouped_quantize_bytes(32768, 2048, "delayed", True)) == 3 * 32768 * 2048
    True

    Current scaling adds the amax read: 2 + 1 + 2 = 5 bytes an element on a non-TN GPU:

    >>> int(grouped_quantize_bytes(32768, 2048, "tensorwise", True)) == 5 * 32768 * 2048
    True

    References
    ----------
    [transformer-engine] ``GroupedLinear`` (the input cast, one split per expert).
    """
    # NVFP4 (precision fp4): a 2-byte read, two copies of 1/2 + 1/16 bytes written
    per = (2 + 2 * (0.5 + 1 / 16) if fp8_recipe == "nvfp4"
           else 4 + (2 / 32 if fp8_recipe == "mxfp8" else 0))
    if cast_copies("fp8", fp8_recipe, non_tn_fp8_gemm) == 1:
        per = 3       # per-tensor FP8, non-TN GPU: the 1-byte row-wise copy alone
    if current_scaling("fp8", fp8_recipe) or fp8_recipe == "nvfp4":
        per += 2      # current scaling, NVFP4: each split's amax pass reads its bf16 rows
    return per * as_array(rows) * k_dim


def ep_ranks_inside(e, t_e, domain: int):
    r"""Ranks of an EP group inside one NVLink domain (this GPU's included) [GPUs].

    .. math:: e_{in} = \min\!\bigl(e, \max(1, \lfloor D / t_e \rfloor)\bigr)

    EP ranks sit ``t_e`` apart (expert TP innermost, Megatron's expert mesh order, as
    :func:`memsym.timing.collectives.group_stride`), so a domain of ``domain`` GPUs holds
    ``domain // t_e`` of them, at most ``e``.  An EP group wider than the domain whose size
    the domain does not divide leaves some GPUs with fewer; this counts the full domain.

    Parameters
    ----------
    e : array_like
        Expert-parallel size [GPUs].
    t_e : array_like
        Expert tensor-parallel size [GPUs].
    domain : int
        GPUs on one NVLink domain [GPUs].

    Returns
    -------
    numpy.ndarray
        EP ranks in the domain [GPUs].

    Examples
    --------
    >>> [int(ep_ranks_inside(e, t_e, d)) for e, t_e, d in ((16, 1, 8), (8, 1, 8), (64, 2, 72))]
    [8, 8, 36]

    References
    ----------
    [megatron-lm] megatron/core/parallel_state.py (the expert mesh: EP ranks ``t_e`` apart).
    """
    e, t_e = as_array(e), as_array(t_e)
    return np.clip(np.floor(domain / t_e), 1, e)


def ep_alltoall_time(nbytes, e, t_e, cluster):
    r"""Seconds of one EP all-to-all of ``nbytes`` per GPU over ``e`` ranks [s].

    Each rank sends :math:`S/e` to every other; of its :math:`e - 1` peers
    :math:`n_{in} - 1` share its NVLink domain (:func:`ep_ranks_inside`) and :math:`e - n_{in}`
    do not.  NCCL runs the all-to-all as concurrent point-to-point sends, the NVLink ones at
    NCCL's effective NVLink rate [nccl-nvlink-efficiency], the others through the GPU's NIC,
    so the slower side sets the time:

    .. math::

        t = \max\Bigl(\frac{n_{in} - 1}{e}\frac{S}{\beta_{\text{NVLink}}},\;
            \frac{e - n_{in}}{e}\frac{S}{\beta_{\text{NIC}}}\Bigr) + (e - 1)\,\alpha

    with :math:`\alpha` the intra-node step latency when the group fits the domain, else the
    network's (:data:`memsym.timing.collectives.LINK_LATENCY`).  A group inside one domain
    gives the ring all-to-all :func:`memsym.timing.collectives.collective_time` prices.

    Parameters
    ----------
    nbytes : array_like
        All of a rank's all-to-all payload [bytes].
    e : array_like
        EP size [GPUs].
    t_e : array_like
        Expert tensor-parallel size [GPUs] (the EP stride).
    cluster : Cluster
        The interconnect (:attr:`memsym.hardware.Cluster.domain`, its two bandwidths).

    Returns
    -------
    numpy.ndarray
        Time [s].

    Examples
    --------
    Qwen3-30B-A3B's EP 16 over two DGX-H100 nodes: half of the 15/16 leaves through the
    400 Gb/s NIC (50 GB/s), 7/16 over NVLink at 370 GB/s:

    >>> from memsym.hardware import cluster
    >>> S = 1e9
    >>> t = float(ep_alltoall_time(S, 16, 1, cluster("dgx-h100")))
    >>> round(t - 15 * 10e-6, 6) == round(8 / 16 * S / 50e9, 6)
    True

    References
    ----------
    Megatron-LM d98e8a64dd moe/token_dispatcher.py (``token_dispatch``); [nccl-nvlink-efficiency].
    """
    e, t_e = as_array(e), as_array(t_e)
    nbytes = as_array(nbytes)
    domain, intra = nvlink_domain(cluster), intra_bandwidth(cluster)
    inter = float(cluster.inter_node_bandwidth)
    inside = ep_ranks_inside(e, t_e, domain)
    fits = inside >= e
    crossing = np.maximum((inside - 1) / e * nbytes / intra,
                          (e - inside) / e * nbytes / inter) + (e - 1) * LINK_LATENCY["inter"]
    ring = collective_time("all-to-all", nbytes, e, intra, LINK_LATENCY["intra"])
    return np.where(e > 1, np.where(fits, ring, crossing), 0.0)


def expert_tp_collectives(nbytes, t_e, cluster):
    r"""(seconds, bytes one GPU sends) of one MoE layer's forward expert-TP collectives.

    .. math:: t = t_{AG}(S, t_e) + t_{RS}(S, t_e), \quad B = 2\,(t_e - 1)\,S / t_e

    With expert tensor parallelism (``t_e > 1``) the all-to-all dispatcher all-gathers the
    received rows over the expert-TP group before the experts
    (``dispatch_postprocess``: ``gather_from_sequence_parallel_region(global_input_tokens,
    group=self.tp_group)``, ``self.tp_group = pg_collection.expt_tp``) and reduce-scatters
    their output after (``combine_preprocess``: ``reduce_scatter_to_sequence_parallel_region``)
    [megatron-moe]; the backward runs the mirror pair.  The group is the expert mesh's
    innermost (stride 1), priced on its link as the TP group is.

    Parameters
    ----------
    nbytes : array_like
        The gathered rows, all of the expert-TP group's [bytes].
    t_e : array_like
        Expert tensor-parallel size [GPUs].
    cluster : Cluster
        The interconnect.

    Returns
    -------
    tuple of numpy.ndarray
        Seconds [s] and bytes one GPU sends [bytes]; 0 at ``t_e = 1``.

    Examples
    --------
    4 GB gathered and scattered over 4 GPUs of a DGX-H100 (370 GB/s): each moves 3/4 of it:

    >>> from memsym.hardware import cluster
    >>> s, b = expert_tp_collectives(4e9, 4, cluster("dgx-h100"))
    >>> float(b), round(float(s), 6) == round(2 * (3 / 4 * 4e9 / 370e9 + 3 * 5e-6), 6)
    (6000000000.0, True)

    References
    ----------
    Megatron-LM d98e8a64dd moe/token_dispatcher.py (``dispatch_postprocess``).
    """
    t_e = as_array(t_e)
    bw, lat = group_bandwidth("tp", t_e, cluster, t=t_e)
    seconds = (collective_time("all-gather", nbytes, t_e, bw, lat)
               + collective_time("reduce-scatter", nbytes, t_e, bw, lat))
    sent = (collective_bytes("all-gather", nbytes, t_e)
            + collective_bytes("reduce-scatter", nbytes, t_e))
    return seconds, sent


def token_count_gather_time(E, e, t_e, cluster):
    r"""Seconds of the dispatcher's all-gather of per-expert token counts, one MoE layer [s].

    Before each forward all-to-all the dispatcher all-gathers every rank's ``[E]`` int64 token
    counts over the expert-TP x EP group (token_dispatcher.py ``preprocess``, lines 570-572:
    ``gather_from_sequence_parallel_region(num_local_tokens_per_expert,
    group=self.tp_ep_group)``) to size the all-to-all, then waits for them on the host
    (``_maybe_update_cuda_sync_point("before_ep_alltoall")``, line 596) [megatron-moe]: a few
    kB, whose :math:`n - 1` ring steps' latency is the cost (on the network when the
    :math:`n = t_e e` ranks leave the NVLink domain).  The backward reuses the splits.

    Parameters
    ----------
    E : int
        Routed experts [1].
    e, t_e : array_like
        Expert-parallel and expert tensor-parallel sizes [GPUs].
    cluster : Cluster
        The interconnect.

    Returns
    -------
    numpy.ndarray
        Time [s]; 0 for a group of one.

    Examples
    --------
    EP 16 over two DGX-H100 nodes, 128 experts: 16 x 128 x 8 bytes gathered, 15 steps of
    10 us on the network and 15/16 of 16 kB at 50 GB/s:

    >>> from memsym.hardware import cluster
    >>> t = float(token_count_gather_time(128, 16, 1, cluster("dgx-h100")))
    >>> t == 15 / 16 * 16 * 128 * 8 / 50e9 + 15 * 10e-6
    True

    References
    ----------
    Megatron-LM d98e8a64dd megatron/core/transformer/moe/token_dispatcher.py:501-596
    (``preprocess``; gathers only if ep or tp > 1, 557), 87 (tp_ep), 702-704 (host wait).
    """
    n = as_array(e) * as_array(t_e)
    domain, intra = nvlink_domain(cluster), intra_bandwidth(cluster)
    fits = n <= domain
    bw = np.where(fits, intra, float(cluster.inter_node_bandwidth))
    lat = np.where(fits, LINK_LATENCY["intra"], LINK_LATENCY["inter"])
    return collective_time("all-gather", 8.0 * E * n, n, bw, lat)


def _dispatch_traffic(tokens, h, E, k, e, t_e, cluster, dispatcher):
    """The dispatch and combine all-to-alls (seconds, bytes sent) and the tokens landed on
    this GPU under the flex dispatcher (None for the others); E is the model's, one value
    broadcast over a search's grid."""
    if dispatcher in FLEX_DISPATCHERS:
        domain = nvlink_domain(cluster)
        one_s, one_b = flex_alltoall_time(tokens * h * 2, E, k, e,
                                          ep_ranks_inside(e, t_e, domain), cluster)
        # each token lands once on every EP rank its experts sit on, and is permuted there
        return 2 * one_s, 2 * one_b, tokens * destinations_per_token(E, k, e)
    held = tokens * k * h * 2
    return (2 * ep_alltoall_time(held, e, t_e, cluster),
            2 * collective_bytes("all-to-all", held, e), None)


def moe_layer_extras(gemms, tokens, k, e, t_e, cluster, device, precision: str, *,
                     fp8_recipe: str | None = None, dispatcher: str = "alltoall",
                     expert_quantize: str = "per-expert"):
    r"""What one MoE layer adds on one GPU beyond its GEMMs and memory-bound bytes [s, bytes].

    .. math:: t_{fwd} = 2\,t_{a2a} + t_{etp} + t_{count},\ t_{bwd} = 2\,t_{a2a} + t_{etp},
       \ t_{mem} = t_{copies} + (B_{cast} + B_{eager}) / B_{HBM}

    Beyond :func:`memsym.timing.gemm.memory_bytes` (what :mod:`memsym.timing.step` prices).
    Returns ``(forward s, backward s, forward bytes, backward bytes, forward memory s,
    backward memory s)``:

    * communication: the dispatch and combine all-to-alls (:func:`ep_alltoall_time`) and the
      expert-TP all-gather and reduce-scatter (:func:`expert_tp_collectives`) each way, the
      forward's token-count all-gather (:func:`token_count_gather_time`; the backward reuses
      the splits), and the bytes one GPU sends in them;
    * memory-bound work: the dispatcher's copies, the rows moved by index at the fraction of
      HBM bandwidth a gather reaches (:func:`memsym.timing.moe_copies.dispatch_seconds`),
      whose backward is their mirror (permute's gradient is an unpermute and the reverse,
      sort's is the un-sort: the same bytes), and under FP8 the forward's cast of the routed
      rows into the grouped fc1 GEMM (:func:`grouped_quantize_bytes`; the backward reads the
      saved column-wise copy), and the experts' eager element-wise passes
      (:attr:`memsym.timing.gemm.Gemm.eager`, :func:`memsym.timing.moe_eager.eager_seconds`):
      the clamp before a clamped GLU and the probability-scaled fc2 bias added outside the
      GEMM, each forward and backward.

    Parameters
    ----------
    gemms : list of memsym.timing.gemm.Gemm
        The layer's forward GEMMs (:func:`memsym.timing.gemm.layer_gemms`, ``moe=True``).
    tokens : array_like
        Tokens entering the MoE layer on this GPU, T (T/t under sequence parallelism) [1].
    k : int
        Experts per token, top-k [1].
    e, t_e : array_like
        Expert-parallel and expert tensor-parallel sizes [GPUs].
    cluster : Cluster
        The interconnect.
    device : str or GPU
        The GPU.
    precision : str
        The GEMM precision.
    fp8_recipe : {None, "delayed", "tensorwise", "mxfp8"}
        Under fp8, the recipe (MXFP8 writes scale bytes in the cast, :func:`grouped_quantize_bytes`,
        priced at the bandwidth its cast kernel reaches, :func:`memsym.timing.quantize.cast_rate`).
    dispatcher : {"alltoall", "allgather", "deepep", "hybridep"}
        The token dispatcher: the flex backends send a token once per rank and per NVLink
        domain it reaches (:func:`memsym.timing.flex_dispatch.flex_alltoall_time`), the
        others one row per routed expert.
    expert_quantize : {"per-expert", "grouped"}
        Under MXFP8, a cast kernel per local expert or one for all (:mod:`.expert_casts`).

    Examples
    --------
    Qwen3-30B-A3B-like: 4,096 tokens, top-8 of 128 experts, h = 2048, EP 8 in a DGX-H100
    (16 local experts of 2,048 rows), FP8:

    >>> from memsym.hardware import cluster
    >>> from memsym.timing.gemm import Gemm
    >>> g = [Gemm("router", 4096, 128, 2048), Gemm("expert_fc1", 2048, 1536, 2048, 16)]
    >>> fs, bs, fb, bb, fm, bm = moe_layer_extras(g, 4096, 8, 8, 1, cluster("dgx-h100"),
    ...                                           "h100", "fp8")
    >>> held = 4096 * 8 * 2048 * 2
    >>> float(bb) == 2 * 7 / 8 * held, float(fb - bb) == 7 / 8 * 8 * 128 * 8
    (True, True)
    >>> abs(float(fs - bs) - (7 / 8 * 8 * 128 * 8 / 370e9 + 7 * 5e-6)) < 1e-15
    True
    >>> router, rows = 15 * 4096 * 128, 2 * 2048 * (2 * (4096 + 32768) + 4 * 32768)
    >>> copies = router / 3.35e12 + rows / (3.35e12 * 2.399 / 4.8)   # gathers at 0.4998
    >>> abs(float(bm) / copies - 1) < 1e-12
    True
    >>> abs(float(fm - bm) - 4 * 32768 * 2048 / 3.35e12) < 1e-15
    True

    References
    ----------
    Megatron-LM d98e8a64dd moe/token_dispatcher.py (MoEAlltoAllTokenDispatcher).
    """
    t_e = as_array(t_e)
    tokens = as_array(tokens)
    fc1 = next(q for q in gemms if q.name == "expert_fc1")
    E = as_array(next(q for q in gemms if q.name == "router").N)      # the router's N is E
    h = as_array(fc1.K)
    held = tokens * k * h * 2
    seconds, sent, landed = _dispatch_traffic(tokens, h, int(np.ravel(E)[0]), k, e, t_e,
                                              cluster, dispatcher)
    etp_s, etp_b = expert_tp_collectives(held * t_e, t_e, cluster)
    counts = token_count_gather_time(E, e, t_e, cluster)
    counts_b = collective_bytes("all-gather", 8.0 * E * as_array(e) * t_e, as_array(e) * t_e)
    received = as_array(fc1.M) * fc1.count
    copies = dispatch_seconds(tokens, tokens * k, received, h, E, fc1.count, device,
                              landed=landed)
    cast = 0.0 if precision not in ("fp8", "fp4") else memory_time(grouped_quantize_bytes(
        received, h, fp8_recipe, _gpu(device).non_tn_fp8_gemm), device) / cast_rate(
        precision, fp8_recipe)
    eager_f, eager_b = eager_seconds(gemms, device)
    # under MXFP8, the expert path's cast kernels beyond their bytes and the weights' swizzles
    un_f, un_b = unfused_seconds(gemms, device, precision, fp8_recipe, expert_quantize)
    return (seconds + etp_s + counts, seconds + etp_s, sent + etp_b + counts_b, sent + etp_b,
            copies + cast + eager_f + un_f, copies + eager_b + un_b)
