r"""Muon's optimizer step: the Newton-Schulz GEMMs each GPU runs on its matrices.

Per matrix (:func:`memsym.model.muon_matrices.muon_matrices`), oriented so that
:math:`m \le n`, ``--muon-num-ns-steps`` k iterations of ``A = X X^T`` (:math:`[m, n]
\times [n, m]`), ``B = bA + cAA`` (:math:`[m, m]^2`) and ``X = aX + BX`` (:math:`[m, m]
\times [m, n]`), in bf16 (``--muon-fp32-matmul-prec medium``), at the GPU's GEMM rate
(:func:`memsym.timing.efficiency.gemm_time`).  Which matrices a GPU orthogonalizes:

* plain DDP (``--optimizer muon``): all of its own;
* the layer-wise distributed optimizer (``--use-distributed-optimizer``, Megatron-Bridge's
  ``dist_muon``): each whole matrix on one data-parallel rank (dense over d c, experts over
  the expert-DP group; ``layer_wise_optimizer.py:713-762``, balanced by size): a 1/(d c) or
  1/edp share of the work;
* ``--muon-tp-mode``: ``blockwise`` (Megatron-Bridge's Muon default) orthogonalizes each TP
  shard alone; ``duplicated`` (Megatron-LM's default) all-gathers the shard over TP and every
  rank runs the whole matrix; ``distributed`` splits ``X X^T`` and ``BX`` over TP with one
  all-reduce of the m x m Gram matrix per step (Emerging-Optimizers ``muon_utils.py:277-378``).

References
----------
.. [emerging-optimizers] ``muon_utils.py`` (``newton_schulz``, ``newton_schulz_tp``,
   ``newton_schulz_step``).
.. [muon-blog] Jordan et al. 2024.
"""

from __future__ import annotations

import numpy as np

from ..errors import choose
from ..model import moe_layer_pattern, resolve
from ..model.muon_matrices import muon_matrices
from .collectives import collective_time, group_bandwidth
from .efficiency import gemm_time

__all__ = ["MUON_TP_MODES", "newton_schulz_time", "muon_step_time"]

#: ``--muon-tp-mode`` (Megatron-LM arguments.py:2650-2655, d98e8a64dd).
MUON_TP_MODES = ("blockwise", "duplicated", "distributed")


def newton_schulz_time(rows, cols, dev, *, steps: int = 5, split=1, count=1, eta_gemm=None):
    r"""Seconds of ``count`` matrices' Newton-Schulz iterations on one GPU [s].

    .. math:: t = k\,\bigl(t_{GEMM}(m, m, n/\sigma) + t_{GEMM}(m, m, m)
       + t_{GEMM}(m, n/\sigma, m)\bigr), \quad m = \min(r, c),\; n = \max(r, c)

    (``split`` :math:`\sigma`: ``--muon-tp-mode distributed``'s share of the long dimension;
    1 otherwise).

    Parameters
    ----------
    rows, cols : array_like
        The matrix as the iteration sees it [elements].
    dev : GPU
        The GPU.
    steps : int
        ``--muon-num-ns-steps`` [1].
    split : array_like
        Ranks the long dimension is split over [GPUs].
    count : array_like
        Such matrices [1].
    eta_gemm : float, optional
        A fixed achieved GEMM efficiency in (0, 1] [1] (else the efficiency curve).

    Examples
    --------
    One 4096 x 4096 matrix on an H100 at a fixed 50 % GEMM efficiency: 5 x 3 GEMMs of
    2 x 4096^3 FLOPs at 0.5 x 989 TFLOP/s, 4.17 ms plus 15 launches of 4 us (by hand):

    >>> from memsym.hardware import gpu
    >>> sec = float(newton_schulz_time(4096, 4096, gpu("h100"), eta_gemm=0.5))
    >>> round(sec * 1e3, 2), round(15 * 2 * 4096**3 / (0.5 * 989e12) * 1e3, 2)  # + launches
    (4.23, 4.17)

    References
    ----------
    .. [emerging-optimizers] ``muon_utils.py:348-378`` (``newton_schulz_step``).
    """
    m, n = np.minimum(rows, cols), np.maximum(rows, cols) / split
    one = (gemm_time(m, m, n, dev, "bf16", eta_gemm=eta_gemm)
           + gemm_time(m, m, m, dev, "bf16", eta_gemm=eta_gemm)
           + gemm_time(m, n, m, dev, "bf16", eta_gemm=eta_gemm))
    return steps * count * one


def muon_step_time(arch, dev, clu, layers, *, t, e, t_e, ndp, edp, layer_wise: bool,
                   tp_mode: str = "duplicated", steps: int = 5):
    r"""Seconds of Muon's orthogonalization in one GPU's optimizer step [s].

    .. math:: t_{Muon} = L_{max}\Bigl(\frac{\sum_{dense} t_{NS}}{d_{share}}
       + \frac{\sum_{expert} t_{NS}\,E/e}{e_{share}}\Bigr) + t_{TP}

    with :math:`d_{share} = d\,c` and :math:`e_{share} = e_{dp}` under the layer-wise
    distributed optimizer (1 under DDP), :math:`L_{max}` the busiest stage's decoder layers
    (a mixed MoE model's layers priced as its mean layer), and :math:`t_{TP}` the TP-mode's
    collectives (``duplicated``: an all-gather of each fp32 shard; ``distributed``: k
    all-reduces of the bf16 Gram matrix).

    Parameters
    ----------
    arch : Architecture
        The model.
    dev, clu : GPU, Cluster
        The GPU and its interconnect.
    layers : array_like
        Decoder layers of the busiest stage [layers].
    t, e, t_e, ndp, edp : array_like
        TP, EP, expert-TP, DP x CP and expert-DP sizes [GPUs].
    layer_wise : bool
        The layer-wise distributed optimizer (else plain DDP).
    tp_mode : {"blockwise", "duplicated", "distributed"}
        ``--muon-tp-mode``.
    steps : int
        ``--muon-num-ns-steps`` [1].

    Examples
    --------
    Llama-2-7B's 32 layers on one H100: about 0.4 s of Newton-Schulz GEMMs, 8 times less
    with the states split over 8 data-parallel ranks:

    >>> from memsym.hardware import cluster_for, gpu
    >>> from memsym.model import preset
    >>> dev = gpu("h100")
    >>> one = [float(muon_step_time(preset("llama2-7b"), dev, cluster_for(dev.name), 32, t=1,
    ...        e=1, t_e=1, ndp=n, edp=1, layer_wise=True)) for n in (1, 8)]
    >>> round(one[0] / one[1], 6)
    8.0

    References
    ----------
    .. [megatron-core] ``core/optimizer/layer_wise_optimizer.py`` (whole parameters per DP
       rank), ``emerging_optimizers.py`` (``TensorParallelMuon``).
    """
    tp_mode = choose("muon_tp_mode", tp_mode, MUON_TP_MODES)
    t, e, t_e = (np.asarray(v, dtype=float) for v in (t, e, t_e))
    moe = bool(arch.num_experts)
    total = np.zeros_like(t * e * np.asarray(layers, dtype=float))
    comm = np.zeros_like(total)
    x = resolve(arch, seq_length=1) if arch.max_position_embeddings is None else resolve(arch)
    L, n_moe = float(x.num_layers), float(sum(moe_layer_pattern(x))) if moe else 0.0
    for kind, share_of_layers in ((False, (L - n_moe) / L), (True, n_moe / L)):
        if share_of_layers == 0:
            continue
        for _, rows, cols, split, count in muon_matrices(arch, kind):
            expert = bool(split) and split.startswith("expert")
            ways = t_e if expert else t
            if split is None:
                ways = np.ones_like(t)
            cnt = count / e if expert else count
            r = rows / ways if split and split.endswith("rows") and tp_mode == "blockwise" else rows
            c = cols / ways if split and split.endswith("cols") and tp_mode == "blockwise" else cols
            part = np.where(ways > 1, ways, 1) if (split and tp_mode == "distributed") else 1
            sec = newton_schulz_time(r, c, dev, steps=steps, split=part, count=cnt)
            total = total + share_of_layers * sec / (np.where(layer_wise, edp if expert else ndp, 1))
            if split and tp_mode != "blockwise":
                bw, lat = group_bandwidth("tp", ways, clu, t=ways, c=np.ones_like(ways),
                                          d=np.ones_like(ways))
                nbytes = (4.0 * rows * cols if tp_mode == "duplicated"
                          else 2.0 * steps * min(rows, cols) ** 2)
                kind_ = "all-gather" if tp_mode == "duplicated" else "all-reduce"
                comm = comm + share_of_layers * cnt * np.where(
                    ways > 1, collective_time(kind_, nbytes, ways, bw, lat), 0.0) / np.where(
                    layer_wise, edp if expert else ndp, 1)
    return np.asarray(layers, dtype=float) * (total + comm)

