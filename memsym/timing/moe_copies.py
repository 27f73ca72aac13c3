r"""The MoE dispatcher's memory-bound copies: the router's score pass and the token rows moved
by index (permute, chunk sort, unpermute), and their seconds.

The all-to-all dispatcher (``MoEAlltoAllTokenDispatcher``, megatron/core/transformer/moe/
token_dispatcher.py at Megatron-LM d98e8a64dd; :mod:`memsym.timing.moe` lists its steps)
moves whole hidden rows by an index three times a direction: ``permute`` gathers each token's
row into expert order (``index_select``), ``sort_chunks_by_idxs`` re-sorts the received rows
before and after the experts when a GPU holds more than one, and ``unpermute`` gathers the
returned rows back onto their tokens (``scatter_add_`` / ``index_add_``) [megatron-moe].  A
gather reads rows at scattered addresses one row per slot, and reaches about half of the HBM
bandwidth a streaming kernel does: the one published measurement, an MoE permute of 4,096
tokens, top-8, hidden 7168 on an H200, moves (4,096 + 32,768) rows of 14 KB in 0.220 ms,
2.40 TB/s of the datasheet's 4.8 [tileops-moe-permute] (:func:`memsym.hardware.kernel_fraction`).
Its bytes count each token row read once (its :math:`k` copies come from cache) and each
routed row written once; the permute here is counted the same way, so the measured kernel is
priced at its measured time.  The router's score function and top-k stream the logits, at
the full HBM bandwidth.

References
----------
.. [megatron-moe] Megatron-LM d98e8a64dd moe/token_dispatcher.py, moe_utils.py (``permute``,
   ``unpermute``, ``sort_chunks_by_idxs``), router.py (``routing``).
.. [tileops-moe-permute] tile-ai/TileOPs PR #2125, Benchmark, MoePrePermuteFwdOp (H200).
"""

from __future__ import annotations

import numpy as np

from ..hardware import gpu, kernel_fraction
from .efficiency import as_array, memory_time

__all__ = ["ROUTER_BYTES_PER_LOGIT", "router_bytes", "gathered_bytes", "dispatch_bytes",
           "dispatch_seconds"]

#: HBM bytes per router logit [bytes] of the score function, top-k and aux-loss scores
#: (router.py ``routing``; fused under ``moe_router_fusion``): read the bf16 logit (2), write
#: the fp32 probability (4) and the 1-byte routing-map entry (1), and the aux-loss scores'
#: fp32 softmax written and read back for the per-expert sum (8).  Memsym's count.
ROUTER_BYTES_PER_LOGIT = 15


def router_bytes(tokens, E):
    r"""HBM bytes of the router's score function, top-k and aux-loss pass, one MoE layer [bytes].

    .. math:: B = c_r\,T E

    Parameters
    ----------
    tokens : array_like
        Tokens entering the MoE layer on this GPU, T [tokens].
    E : int
        Routed experts [1].

    Returns
    -------
    numpy.ndarray
        HBM bytes [bytes].

    Examples
    --------
    >>> int(router_bytes(4096, 128)) == 15 * 4096 * 128
    True

    References
    ----------
    Megatron-LM d98e8a64dd moe/router.py (``routing``).
    """
    return ROUTER_BYTES_PER_LOGIT * as_array(tokens) * E


def gathered_bytes(tokens, sent, received, h, local, *, width: int = 2, landed=None):
    r"""HBM bytes of the rows the dispatcher moves by index, one MoE layer forward [bytes].

    .. math::

        w\,h\,\bigl(\underbrace{T + R_s}_{\text{permute}}
        + \underbrace{4R_r\,[E/e > 1]}_{\text{sort, un-sort}}
        + \underbrace{R_s + T}_{\text{unpermute}}\bigr),\qquad
        \text{flex: } w\,h\,\bigl(\underbrace{L + R_r}_{\text{permute}}
        + \underbrace{R_r + L}_{\text{unpermute}}\bigr)

    with :math:`T` the tokens on the GPU, :math:`R_s = Tk` the routed rows it sends and
    :math:`R_r` the rows its experts receive: the permute reads each token row once and
    writes its :math:`k` routed copies (the measured kernel's count, [tileops-moe-permute]),
    each sort reads and writes the received rows, the unpermute reads the returned rows and
    writes the :math:`[T, h]` sum.  The flex dispatcher (DeepEP, HybridEP) sends each token
    once per destination rank and permutes on arrival: the :math:`L` tokens landed on the
    GPU are gathered into its experts' :math:`R_r` rows and back (``_DeepepManager.
    get_permuted_hidden_states_by_experts`` / ``get_restored_hidden_states_by_experts``;
    HybridEP's ``dispatch_with_permute`` / ``combine_with_unpermute``), with no chunk sort.

    Parameters
    ----------
    tokens, sent, received : array_like
        T, R_s and R_r [rows].
    h : int
        Hidden size [1].
    local : array_like
        Local experts, E / e [1].
    width : int
        Bytes per hidden-state element [bytes].
    landed : array_like, optional
        Under the flex dispatcher, the tokens landed on this GPU, L [rows] (None: the
        all-to-all dispatcher's copies).

    Returns
    -------
    numpy.ndarray
        HBM bytes [bytes].

    Examples
    --------
    Qwen3-30B-A3B (h 2048, top-8) with EP 8, 4,096 tokens, 16 local experts:

    >>> int(gathered_bytes(4096, 32768, 32768, 2048, 16)) == 2 * 2048 * (2 * 36864 + 4 * 32768)
    True

    Under the flex dispatcher the 4,096 x 5.34 tokens landed (a token reaches 5.34 of the 8
    ranks, :func:`memsym.timing.flex_dispatch.destinations_per_token`) go to 32,768 rows and
    back:

    >>> L = 4096 * 5.34
    >>> float(gathered_bytes(4096, 32768, 32768, 2048, 16, landed=L)) == 2 * 2048 * 2 * (L + 32768)
    True

    References
    ----------
    Megatron-LM d98e8a64dd moe_utils.py (``permute``, ``sort_chunks_by_idxs``, ``unpermute``).
    """
    tokens, sent, received, local = (as_array(x) for x in (tokens, sent, received, local))
    if landed is not None:
        return width * h * 2 * (as_array(landed) + received)
    sort = np.where(local > 1, 4 * received, 0.0)
    return width * h * (2 * (tokens + sent) + sort)


def dispatch_bytes(tokens, sent, received, h, E, local, *, width: int = 2):
    r"""HBM bytes of the all-to-all dispatcher's memory-bound forward work, one MoE layer [bytes].

    .. math:: B = c_r\,T E + w\,h\,\bigl(2(T + R_s) + 4R_r\,[E/e > 1]\bigr)

    :func:`router_bytes` plus :func:`gathered_bytes`.  The expert activation (SwiGLU with the
    routing probabilities, experts.py) is counted with the layer's other activations
    (:func:`memsym.timing.gemm.memory_bytes`).  The backward moves the same bytes
    (:func:`memsym.timing.moe.moe_layer_extras`).

    Parameters
    ----------
    tokens, sent, received : array_like
        Tokens on this GPU T, routed rows it sends (T k), rows its experts receive [rows].
    h : int
        Hidden size [1].
    E : int
        Routed experts [1].
    local : array_like
        Local experts, E / e [1].
    width : int
        Bytes per hidden-state element [bytes].

    Returns
    -------
    numpy.ndarray
        HBM bytes [bytes].

    Examples
    --------
    Hand count, Qwen3-30B-A3B (h 2048, 128 experts, top-8) with EP 8, 4,096 tokens: 32,768
    rows each way, 16 local experts; router 15 x 4096 x 128 bytes, rows
    2 x 2048 x (2 x (4096 + 32768) + 4 x 32768):

    >>> int(dispatch_bytes(4096, 32768, 32768, 2048, 128, 16))
    846725120
    >>> 15 * 4096 * 128 + 2 * 2048 * (2 * 36864 + 4 * 32768)
    846725120

    References
    ----------
    Megatron-LM d98e8a64dd moe/token_dispatcher.py, moe_utils.py (``permute``, ``unpermute``).
    """
    return router_bytes(tokens, E) + gathered_bytes(tokens, sent, received, h, local,
                                                    width=width)


def dispatch_seconds(tokens, sent, received, h, E, local, device, *, width: int = 2,
                     landed=None):
    r"""Seconds of the dispatcher's memory-bound forward work on one GPU, one MoE layer [s].

    .. math:: t = \frac{B_{router}}{B_{HBM}} + \frac{B_{gathered}}{f\,B_{HBM}}

    the router's pass streaming at the datasheet HBM bandwidth, the rows moved by index
    (:func:`gathered_bytes`) at the fraction :math:`f` a gather reaches
    (:func:`memsym.hardware.kernel_fraction`, 0.4998 measured on an H200).

    Parameters
    ----------
    tokens, sent, received : array_like
        T, R_s and R_r [rows].
    h : int
        Hidden size [1].
    E : int
        Routed experts [1].
    local : array_like
        Local experts, E / e [1].
    device : str or GPU
        The GPU (its HBM bandwidth and efficiency class).
    width : int
        Bytes per hidden-state element [bytes].
    landed : array_like, optional
        Tokens landed on this GPU under the flex dispatcher [rows] (:func:`gathered_bytes`).

    Returns
    -------
    numpy.ndarray
        Seconds [s].

    Examples
    --------
    The measured permute alone (4,096 tokens, top-8, h 7168, bf16 on an H200: no router, no
    sort, no unpermute counted) takes what its printed 2.399 TB/s gives, 0.2203 ms (printed:
    0.220384 ms); the unpermute mirrors it:

    >>> rows = 2 * 7168 * 2 * (4096 + 32768)
    >>> t = dispatch_seconds(4096, 32768, 32768, 7168, 0, 1, "h200")
    >>> round(float(t) * 1e3 / 2, 4), round(rows / 2 / 2.399e12 * 1e3, 4)
    (0.2203, 0.2203)

    References
    ----------
    .. [tileops-moe-permute] tile-ai/TileOPs PR #2125 (the H200 permute measurement).
    """
    dev = gpu(device)
    rows = gathered_bytes(tokens, sent, received, h, local, width=width, landed=landed)
    return (memory_time(router_bytes(tokens, E), dev)
            + memory_time(rows, dev) / kernel_fraction("gather"))
