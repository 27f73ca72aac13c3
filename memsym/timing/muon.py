r"""Muon's optimizer step: the Newton-Schulz GEMMs each GPU runs on its matrices.

Per matrix (:func:`memsym.model.muon_matrices.muon_matrices`), oriented so that
:math:`m \le n` (under ``--muon-tp-mode distributed`` by the TP split instead,
:func:`newton_schulz_time`), ``--muon-num-ns-steps`` k iterations of ``A = X X^T`` (:math:`[m, n]
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

Its memory-bound work (Emerging-Optimizers fd77292 ``orthogonalized_optimizer.py:185-210``
in Megatron's ``Float16OptimizerWithFloat16Params``, which keeps fp32 main weights, gradients
and momentum): :func:`muon_step_bytes` per parameter a GPU steps, and
:data:`NS_ELEMENT_BYTES` per element of each matrix as its iteration sees it.  The parameters
Muon leaves to Adam (embeddings, output layer, norms, biases;
``emerging_optimizers.py:140-147``) keep Adam's bytes
(:data:`memsym.timing.data_parallel.OPTIMIZER_BYTES`).

References
----------
.. [emerging-optimizers] ``muon_utils.py`` (``newton_schulz``, ``newton_schulz_tp``,
   ``newton_schulz_step``), ``orthogonalized_optimizer.py`` (``step``), ``mixin.py``
   (``_apply_weight_decay_inplace``).
.. [muon-blog] Jordan et al. 2024.
"""

from __future__ import annotations

import numpy as np

from ..errors import choose
from ..model import moe_layer_pattern
from ..model.architecture import lenient
from ..model.muon_matrices import muon_matrices
from ..terms.muon import TE_DUPLICATED
from ..vocabulary import MUON_TP_MODES
from .collectives import collective_time, group_bandwidth
from .efficiency import gemm_time, memory_time

__all__ = ["MUON_TP_MODES", "MUON_STEP_BYTES", "NESTEROV_BYTES", "NS_ELEMENT_BYTES",
           "TP_MODE_BYTES", "QKV_SPLIT_BYTES", "muon_step_bytes", "newton_schulz_time",
           "muon_parameters", "muon_step_time"]


#: HBM bytes per parameter Muon steps on a GPU [bytes/parameter], all fp32: the grad-norm
#: read (4, clip_grads.py); decoupled weight decay ``p.add_(p, alpha=-wd lr)`` reads and writes
#: p (8, mixin.py:48; Megatron's weight_decay 0.01); ``momentum_buffer.lerp_(grad)`` reads m
#: and g and writes m (12, orthogonalized_optimizer.py:193); the update's two scalings
#: ``orth_grad * scale_factor * extra_scale_factor`` read and write it twice (16,
#: emerging_optimizers.py:237); ``p.add_(orth_grad)`` reads p and the update and writes p (12,
#: :208); the fp32 -> bf16 copy (6, optimizer.py ``_copy_main_params_to_model_params``);
#: zeroing the grad buffer (4).  Memsym's count, as Adam's 42.
MUON_STEP_BYTES = 62
#: ``--muon-nesterov`` (off in Megatron-LM, optimizer_config.py:266): ``grad.lerp(m)`` reads
#: g and m and writes a new tensor (orthogonalized_optimizer.py:197) [bytes/parameter].
NESTEROV_BYTES = 12
#: HBM bytes per element of a matrix as its Newton-Schulz iteration sees it [bytes/element]:
#: ``F.normalize`` reads it for the norm and reads and writes it to divide (12,
#: muon_utils.py:216), the casts to bf16 (4 + 2, :262) and back to fp32 (2 + 4, :269).
NS_ELEMENT_BYTES = 24
#: Added per such element of a TP-split matrix by ``--muon-tp-mode`` [bytes/element]:
#: duplicated ``torch.cat`` of the gathered shards (read + write, muon_utils.py:330);
#: distributed ``distributed_normalize_p2`` (``x * x`` 8, ``sum`` 4, ``x / norm`` 8: 20 for
#: 12, :140-146).  At TP size 1 too: Transformer Engine sets ``partition_dim`` on every linear
#: weight whatever the TP size (TE d0067d0da linear.py:1857-1862), ``orthogonalize`` passes it
#: on unless blockwise (Megatron-LM d98e8a64dd emerging_optimizers.py:403) and
#: ``newton_schulz_tp`` takes its TP branch on the one-rank group (muon_utils.py:317-343): the
#: ``torch.cat`` of one shard and the distributed normalization still run; only the
#: collectives' time is nothing (the ring's (n - 1)/n, :func:`muon_step_time`).
TP_MODE_BYTES = {"blockwise": 0, "duplicated": 8, "distributed": 8}
#: Per element of split Q, K, V [bytes/element]: each block's ``reshape`` copies it and
#: ``torch.cat`` joins them again (emerging_optimizers.py:426-437).
QKV_SPLIT_BYTES = 16


def muon_step_bytes(nesterov: bool = False) -> int:
    r"""HBM bytes per parameter of Muon's element-wise step [bytes/parameter].

    .. math:: c_{Muon} = 62 + 12\,[\text{nesterov}]

    Parameters
    ----------
    nesterov : bool
        ``--muon-nesterov`` (Megatron-LM's default off; Megatron-Bridge's recipes on).

    Examples
    --------
    4 + 8 + 12 + 16 + 12 + 6 + 4 by hand, Nesterov's ``lerp`` 12 more:

    >>> muon_step_bytes(), muon_step_bytes(nesterov=True)
    (62, 74)

    References
    ----------
    .. [emerging-optimizers] ``orthogonalized_optimizer.py:185-210``.
    """
    return MUON_STEP_BYTES + (NESTEROV_BYTES if nesterov else 0)


def _layer_matrices(arch):
    """Each matrix of a mean decoder layer: (share of layers, name, rows, cols, split, count,
    expert) (a mixed MoE model's dense and MoE layers weighted by their share)."""
    x = lenient(arch)
    L = float(x.num_layers)
    n_moe = float(sum(moe_layer_pattern(x))) if arch.num_experts else 0.0
    for kind, share in ((False, (L - n_moe) / L), (True, n_moe / L)):
        if share == 0:
            continue
        for name, rows, cols, split, count in muon_matrices(arch, kind):
            yield share, name, rows, cols, split, count, bool(split) and split.startswith("expert")


def muon_parameters(arch, layers, *, t, e, t_e) -> tuple:
    r"""(dense, expert) parameters Muon steps on one GPU of the busiest stage [parameters].

    .. math:: N_{Muon} = L_{max} \sum_{matrices} \frac{r\,c\,n}{w}

    with :math:`w` the TP (expert: expert-TP) size for a split matrix, 1 for a replicated one,
    and :math:`n` its count (routed experts: :math:`E/e`).

    Parameters
    ----------
    arch : Architecture
        The model.
    layers : array_like
        Decoder layers of the busiest stage [layers].
    t, e, t_e : array_like
        TP, EP and expert-TP sizes [GPUs].

    Examples
    --------
    Llama-2-7B, one layer at TP 2: Q, K, V, proj 4 x 4096^2 and fc1, fc2 3 x 4096 x 11008,
    halved (by hand):

    >>> from memsym.model import preset
    >>> dense, expert = muon_parameters(preset("llama2-7b"), 1, t=2, e=1, t_e=1)
    >>> float(dense) == (4 * 4096**2 + 3 * 4096 * 11008) / 2, float(expert)
    (True, 0.0)

    References
    ----------
    .. [megatron-core] ``core/optimizer/emerging_optimizers.py:140-147`` (2-D, not an
       embedding or the output layer: Muon).
    """
    t, e, t_e = (np.asarray(v, dtype=float) for v in (t, e, t_e))
    dense = expert = np.zeros_like(t * e * t_e)
    for share, _, rows, cols, split, count, is_expert in _layer_matrices(arch):
        if is_expert:
            expert = expert + share * rows * cols * count / (e * t_e)
        else:
            dense = dense + share * rows * cols * count / (t if split else 1)
    layers = np.asarray(layers, dtype=float)
    return layers * dense, layers * expert


def newton_schulz_time(rows, cols, dev, *, steps: int = 5, split=1, partition_dim=None, count=1,
                       eta_gemm=None):
    r"""Seconds of ``count`` matrices' Newton-Schulz iterations on one GPU [s].

    .. math:: t = k\,\bigl(t_{GEMM}(m, m, n/\sigma) + t_{GEMM}(m, m, m)
       + t_{GEMM}(m, n/\sigma, m)\bigr), \quad m = \min(r, c),\; n = \max(r, c)

    (``split`` :math:`\sigma`: ``--muon-tp-mode distributed``'s ranks; 1 otherwise).  With a
    ``partition_dim`` the orientation is the split's, not the shorter side's:
    ``newton_schulz_tp`` transposes exactly when ``partition_dim`` is 0
    (``muon_utils.py:336-341``), so :math:`m = c,\ n = r` for 0 (column-parallel) and
    :math:`m = r,\ n = c` for 1 (row-parallel), the Gram on the long side when the split one
    is the shorter (its docstring's warning, :291-293).

    Parameters
    ----------
    rows, cols : array_like
        The matrix as the iteration sees it [elements].
    dev : GPU
        The GPU.
    steps : int
        ``--muon-num-ns-steps`` [1].
    split : array_like
        Ranks the matrix is split over [GPUs].
    partition_dim : {None, 0, 1}
        The split dimension (0 rows, 1 columns), fixing the orientation; None: the Gram
        matrix on the shorter side.
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

    A 1024 x 8192 column-parallel matrix (Llama-3-70B's K) split over 8 ranks: the Gram is
    8192 x 8192 of 128-long rows (by hand: each GEMM the slower of its FLOPs at 50 % of
    989.4 TFLOP/s and its bf16 bytes at 3.35 TB/s, plus 4 us):

    >>> def g(M, N, K):
    ...     return max(2 * M * N * K / 494.7e12, 2 * (M * K + K * N + M * N) / 3.35e12) + 4e-6
    >>> sec = float(newton_schulz_time(1024, 8192, gpu("h100"), split=8, partition_dim=0,
    ...                                eta_gemm=0.5))
    >>> round(sec * 1e3, 3), round(5 * (2 * g(8192, 8192, 128) + g(8192, 8192, 8192)) * 1e3, 3)
    (11.586, 11.586)

    References
    ----------
    .. [emerging-optimizers] ``muon_utils.py:348-378`` (``newton_schulz_step``), :277-345
       (``newton_schulz_tp``).
    """
    if partition_dim is None:
        m, n = np.minimum(rows, cols), np.maximum(rows, cols) / split
    else:
        m, n = (cols, rows / split) if partition_dim == 0 else (rows, cols / split)
    one = (gemm_time(m, m, n, dev, "bf16", eta_gemm=eta_gemm)
           + gemm_time(m, m, m, dev, "bf16", eta_gemm=eta_gemm)
           + gemm_time(m, n, m, dev, "bf16", eta_gemm=eta_gemm))
    return steps * count * one


def muon_step_time(arch, dev, clu, layers, *, t, e, t_e, ndp, edp, layer_wise: bool,
                   tp_mode: str = "duplicated", steps: int = 5):
    r"""Seconds of Muon's orthogonalization in one GPU's optimizer step [s].

    .. math:: t_{Muon} = L_{max}\Bigl(\frac{\sum_{dense} t_{NS} + t_{ew}}{d_{share}}
       + \frac{\sum_{expert} (t_{NS} + t_{ew})\,E/e}{e_{share}}\Bigr) + t_{TP}, \quad
       t_{ew} = \frac{(c_{NS} + c_{mode})\,m\,n/\sigma + c_{qkv}\,N_{local}}{B_{HBM}}

    with :math:`d_{share} = d\,c` and :math:`e_{share} = e_{dp}` under the layer-wise
    distributed optimizer (1 under DDP), :math:`L_{max}` the busiest stage's decoder layers
    (a mixed MoE model's layers priced as its mean layer), :math:`t_{ew}` the element-wise
    passes around each matrix's iteration (:data:`NS_ELEMENT_BYTES`, :data:`TP_MODE_BYTES` for
    a TP-split one, :data:`QKV_SPLIT_BYTES` per local element of Q, K, V), and :math:`t_{TP}`
    the TP-mode's collectives (``duplicated``: an all-gather of each fp32 shard;
    ``distributed``: k all-reduces of the bf16 Gram matrix), none at TP size 1, where the
    TP-mode's element-wise passes still run (:data:`TP_MODE_BYTES`).  MLA's replicated
    down-projections carry ``partition_dim`` 0 (:data:`memsym.terms.muon.TE_DUPLICATED`):
    outside blockwise, their TP group's t copies are the row shards of a :math:`t r \times c`
    matrix.  The per-parameter step is
    :func:`muon_step_bytes`'s (:func:`memsym.timing.data_parallel.data_parallel_sync`).

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
    Llama-2-7B's 32 layers on one H100: 0.662 PFLOP of Newton-Schulz GEMMs (by hand: 5 steps
    of :math:`4 m^2 n + 2 m^3` for m 4096 and n 4096 (Q, K, V, proj), 22016 (fc1), 11008
    (fc2)), about 1.2 s at the efficiency curve's ~56 % of 989 TFLOP/s, 1.3 s with the
    element-wise passes; 8 times less with the states split over 8 data-parallel ranks:

    >>> from memsym.hardware import cluster_for, gpu
    >>> from memsym.model import preset
    >>> dev = gpu("h100")
    >>> one = [float(muon_step_time(preset("llama2-7b"), dev, cluster_for(dev.name), 32, t=1,
    ...        e=1, t_e=1, ndp=n, edp=1, layer_wise=True)) for n in (1, 8)]
    >>> flops = 32 * 5 * sum(4 * 4096**2 * n + 2 * 4096**3 for n in [4096] * 4 + [22016, 11008])
    >>> round(flops / 1e15, 3), round(one[0], 1), round(one[0] / one[1], 6)
    (0.662, 1.3, 8.0)

    References
    ----------
    .. [megatron-core] ``core/optimizer/layer_wise_optimizer.py`` (whole parameters per DP
       rank), ``emerging_optimizers.py`` (``TensorParallelMuon``).
    """
    tp_mode = choose("muon_tp_mode", tp_mode, MUON_TP_MODES)
    t, e, t_e = (np.asarray(v, dtype=float) for v in (t, e, t_e))
    total = np.zeros_like(t * e * np.asarray(layers, dtype=float))
    comm = np.zeros_like(total)
    nbytes_ns = np.zeros_like(total)
    for share, name, rows, cols, split, count, expert in _layer_matrices(arch):
        if split is None and name in TE_DUPLICATED and tp_mode != "blockwise":
            # MLA's down-projections: replicated, yet partition_dim 0 (TE_DUPLICATED), so
            # newton_schulz_tp takes the TP group's copies for a column-parallel matrix's shards
            rows, split = rows * t, "rows"
        ways = (t_e if expert else t) if split else np.ones_like(t)
        cnt = count / e if expert else count
        r = rows / ways if split and split.endswith("rows") and tp_mode == "blockwise" else rows
        c = cols / ways if split and split.endswith("cols") and tp_mode == "blockwise" else cols
        distributed = bool(split) and tp_mode == "distributed"
        part = np.where(ways > 1, ways, 1) if distributed else 1
        # distributed: newton_schulz_tp orients by partition_dim (0 for a row split)
        pdim = (0 if split.endswith("rows") else 1) if distributed else None
        sec = newton_schulz_time(r, c, dev, steps=steps, split=part, partition_dim=pdim,
                                 count=cnt)
        owner = np.where(layer_wise, edp if expert else ndp, 1)
        total = total + share * sec / owner
        # the element-wise passes around the iteration: the matrix it sees, and the local
        # Q, K, V blocks' split copies
        per = NS_ELEMENT_BYTES + (TP_MODE_BYTES[tp_mode] if split else 0)
        qkv = QKV_SPLIT_BYTES * rows * cols / ways if name in ("q", "gate", "k", "v") else 0.0
        nbytes_ns = nbytes_ns + share * cnt * (per * r * c / part + qkv) / owner
        if split and tp_mode != "blockwise":
            bw, lat = group_bandwidth("tp", ways, clu, t=ways, c=np.ones_like(ways),
                                      d=np.ones_like(ways))
            nbytes = (4.0 * rows * cols if tp_mode == "duplicated"
                      else 2.0 * steps * (cols if pdim == 0 else rows) ** 2)
            kind_ = "all-gather" if tp_mode == "duplicated" else "all-reduce"
            comm = comm + share * cnt * np.where(
                ways > 1, collective_time(kind_, nbytes, ways, bw, lat), 0.0) / owner
    return np.asarray(layers, dtype=float) * (total + memory_time(nbytes_ns, dev) + comm)
