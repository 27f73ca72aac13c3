r"""Mamba-2's state-space dual (SSD) scan on one GPU: its matmul FLOPs and its memory-bound
bytes, as Megatron-core trains a Mamba layer.

Megatron-core's ``MambaMixer._ssm_training`` (``megatron/core/ssm/mamba_mixer.py`` at Megatron-LM
d98e8a64dd) runs in_proj (column-parallel, to ``zxBCdt``), mamba_ssm's
``mamba_split_conv1d_scan_combined`` (the depthwise causal conv1d on x, B, C, then the chunked
SSD scan with chunk length ``chunk_size`` = 128, the mixer's default, the z gate applied in the
kernel), the group-wise RMSNorm ``ExtendedRMSNorm`` (``group_size = d_inner_local_tp /
ngroups_local_tp``: no TP communication, as ``ngroups % tp_size == 0``) and out_proj
(row-parallel); in_proj and out_proj are priced with the layer's other GEMMs
(:func:`memsym.timing.gemm.layer_gemms`).  Tensor parallelism splits the heads H and the groups
G (``nheads_local_tp``, ``ngroups_local_tp``), so every d_ssm-, G- and H-wide count below is
divided by t.

The chunked algorithm (Dao & Gu 2024, arXiv:2405.21060, §6 and Listing 1 ``ssd_minimal``), per
chunk of Q tokens, head of P = d_ssm/H channels and state N:

1. the intra-chunk (diagonal) blocks: :math:`CB^\top` (:math:`Q\times N\cdot N\times Q`, per
   group) and the masked :math:`(L\circ CB^\top)X` (:math:`Q\times Q\cdot Q\times P`, per head):
   :math:`2Q(GN + d_{ssm})` FLOPs per token;
2. the chunk states :math:`B^\top X` (:math:`N\times Q\cdot Q\times P`): :math:`2N d_{ssm}`;
3. the state passing between chunks (a scan of the T/Q chunk states, elementwise):
   memory-bound, the fp32 states read and written in ``state_dtype`` (bf16), read by step 4;
4. the output from the states :math:`C\,S` (:math:`Q\times N\cdot N\times P`): :math:`2N d_{ssm}`.

:func:`ssd_kernels` lists every kernel the fused op and the norm launch, forward and
backward, with its FLOPs and the bytes of the buffers it reads and writes; the step prices a
matmul kernel at the longer of its FLOPs at :func:`ssd_rate` (:data:`SSD_FRACTION` of the
16-bit peak, at most the measured rate per SM) and its bytes at HBM bandwidth, the others at
HBM bandwidth (:mod:`memsym.timing.layer`).

References
----------
.. [mamba2] Dao and Gu 2024, arXiv:2405.21060 §6 (the SSD algorithm: block decomposition,
   chunk length Q), §7 (the Mamba-2 block).
.. [megatron-lm] megatron/core/ssm/mamba_mixer.py at d98e8a64dd (MambaMixer: ``chunk_size=128``,
   in_proj ColumnParallel, out_proj RowParallel, ``_ssm_training``).
.. [mamba-ssm] mamba_ssm/ops/triton/ssd_combined.py (``MambaSplitConv1dScanCombinedFn``: the
   forward saves zxBCdt and the output only; ``_mamba_chunk_scan_combined_bwd`` recomputes
   ``CB`` (``_bmm_chunk_fwd``) and the chunk states (``_chunk_state_fwd``,
   ``_state_passing_fwd``) before the gradients).
"""

from __future__ import annotations

import numpy as np

from ..text import shared_doc

__all__ = ["MAMBA_CHUNK", "SSD_TRITON_H800", "H800_BF16_PEAK", "H800_SMS", "SSD_FRACTION",
           "ssd_rate", "ssd_flops", "ssd_kernel_flops", "ssd_kernels", "layout_copy_bytes"]

#: Megatron-core MambaMixer's SSD chunk length Q [tokens] (``chunk_size=128``,
#: megatron/core/ssm/mamba_mixer.py at d98e8a64dd; the Nemotron-H specs keep it).
MAMBA_CHUNK = 128

#: mamba_ssm's Triton ``_chunk_scan_fwd`` measured on one H800 SXM at sequence length 8192
#: (batch 8, 80 heads of 64, 1 group, state 128, chunk 256), counted as
#: :math:`T(Qd_{ssm} + 2Nd_{ssm})` FLOPs (the causal half of the intra-chunk block plus
#: :math:`CS`) [FLOP/s]: tile-ai/tilelang benchmark/mamba2/README.md and
#: mamba_benchmark_result.png at a35008a42 (Triton v3.5.0, mamba-ssm 2.2.6.post3; the red
#: "Triton" bar of config CC3 = seq_len 8192, read off the figure: about 91 TFLOP/s).
SSD_TRITON_H800 = 91e12

#: The H800 SXM's dense BF16 tensor-core peak [FLOP/s] (NVIDIA's H800 datasheet: 1,979
#: TFLOPS with sparsity, half of it dense, the H100 SXM's rate).
H800_BF16_PEAK = 989.4e12

#: The SSD kernels' achieved share of the 16-bit peak [1]: the one published Triton
#: measurement, applied to every SSD matmul kernel; a ceiling on GPUs whose tensor cores
#: are no faster per SM than Hopper's (:func:`ssd_rate`).
SSD_FRACTION = SSD_TRITON_H800 / H800_BF16_PEAK

#: The H800 SXM's streaming multiprocessors [SMs]: the H100 SXM's GH100 configuration
#: (132 SMs, memsym.hardware's h100-80gb; the H800 differs in NVLink only).
H800_SMS = 132


def ssd_rate(peak16, sms) -> np.ndarray:
    r"""FLOP rate of mamba_ssm's Triton SSD matmul kernels on one GPU [FLOP/s].

    .. math::

        R = \min\Bigl(\frac{R_{H800}}{F_{H800}}\,F_{16},\;
            \frac{R_{H800}}{132}\,n_{SM}\Bigr)

    The one measurement (:data:`SSD_TRITON_H800`, 91 TFLOP/s on an H800, 9 % of its dense
    BF16 peak) bounds the rate two ways.  The kernels' tensor-core share of the 16-bit peak
    :math:`F_{16}`: what a GPU with Hopper's or slower tensor cores per SM reaches (A100:
    0.092 x 312 = 28.7 TFLOP/s).  And their rate per SM: at 9 % of the peak the tensor cores
    are not what bounds them on Hopper, but the rest of each SM's work per element of the
    chunk's :math:`QQ` block (``_chunk_scan_fwd``: an ``exp`` of the ``dA_cumsum`` difference,
    the ``dt`` scaling, the causal mask, the cast before ``tl.dot``, the loads), which a GPU
    does at its number of SMs :math:`n_{SM}` (the same clock assumed).  Blackwell's 16-bit
    tensor rate per SM is twice Hopper's (B200 2,250 TFLOP/s over 148 SMs against H100's
    989.4 over 132: 2.03 times) and the rest of the SM is assumed as fast as Hopper's (the
    twice faster exponential of Blackwell Ultra's special-function units, memsym.hardware,
    not counted): B200 / GB200 (148 SMs) 102 TFLOP/s, not 9 % of 2.25-2.5 PFLOP/s
    (207-230); B300 / GB300 (160 SMs) 110.  Hopper (132 SMs, 989 TFLOP/s) meets both bounds
    at 91.

    Parameters
    ----------
    peak16 : array_like
        The GPU's dense 16-bit tensor-core peak [FLOP/s].
    sms : array_like
        Its streaming multiprocessors [SMs].

    Returns
    -------
    numpy.ndarray
        The kernels' rate [FLOP/s].

    Examples
    --------
    H100 (989.4 TFLOP/s, 132 SMs) at the measured 91, B200 (2,250, 148 SMs) at 91 x 148 /
    132 = 102.03 TFLOP/s, A100 (312, 108 SMs) at 312 x 91 / 989.4 = 28.70:

    >>> [round(float(ssd_rate(p * 1e12, n)) / 1e12, 2)
    ...  for p, n in ((989.4, 132), (2250, 148), (312, 108))]
    [91.0, 102.03, 28.7]

    References
    ----------
    .. [tilelang-mamba2] tile-ai/tilelang benchmark/mamba2/README.md and
       mamba_benchmark_result.png at a35008a42 (:data:`SSD_TRITON_H800`).
    .. [mamba-ssm] mamba_ssm/ops/triton/ssd_chunk_scan.py:136-150 at e9594ce
       (``_chunk_scan_fwd_kernel``'s loop over the chunk: per element of ``cb`` an ``exp``, a
       ``minimum``, two products, the mask and a cast before ``tl.dot``).
    .. [mamba-904] state-spaces/mamba issue #904 (2026-04-06), "Training throughput": a
       Mamba-2 LM (d_model 2048, 48 layers, batch 4, seq 4096, bf16) trains at 239.2 TFLOP/s
       on H200 and 360.4 on GB200, 1.51 times faster, where the GB200's 16-bit peak is 2.5
       times the H200's.
    """
    frac = SSD_FRACTION * np.asarray(peak16, float)
    return np.minimum(frac, SSD_TRITON_H800 / H800_SMS * np.asarray(sms, float))

_doc = shared_doc(flops_params="""
    Parameters
    ----------
    ssm : tuple
        ``(d_ssm, N, H, G, conv kernel)``: the mixer's inner width, state size, heads, B/C
        groups [1] and conv taps [1].
    T : array_like
        Tokens of one micro-batch on the GPU's context-parallel rank [tokens].
    t : array_like
        Tensor-parallel size [GPUs].
    chunk : int
        Chunk length Q [tokens].

    Returns
    -------
    tuple of numpy.ndarray
        Forward and backward FLOPs [FLOP].
    """)


@_doc
def ssd_flops(ssm: tuple, T, t=1, chunk: int = MAMBA_CHUNK) -> tuple:
    r"""Matmul FLOPs of one Mamba-2 layer's SSD scan on one GPU, forward and backward.

    .. math::

        F_{\text{fwd}} = \frac{T}{t}\bigl(2Q\,(GN + d_{ssm}) + 4N d_{ssm}\bigr),\qquad
        F_{\text{bwd}} = 2F_{\text{fwd}} + \frac{T}{t}\bigl(2QGN + 2Nd_{ssm}\bigr)

    The backward takes both operands' gradients of each forward matmul (twice its FLOPs) and
    first recomputes :math:`CB^\top` and the chunk states, which the fused kernel does not
    keep.  The intra-chunk blocks are counted whole (the masked half included, as the paper's
    block matmuls).

    {flops_params}

    Examples
    --------
    Hand count: d_ssm = 64, N = 16, H = 2, G = 1, Q = 4, T = 8, t = 1: forward
    8 (2 * 4 * (16 + 64) + 4 * 16 * 64) = 8 * 4736; backward twice that plus
    8 (2 * 4 * 16 + 2 * 16 * 64) = 8 * 2176.

    >>> f, b = ssd_flops((64, 16, 2, 1, 4), 8, chunk=4)
    >>> float(f) == 8 * 4736, float(b) == 2 * 8 * 4736 + 8 * 2176
    (True, True)

    References
    ----------
    .. [mamba2] arXiv:2405.21060 §6 (the SSD algorithm: chunks of length Q).
    """
    d, N, _, G, _ = ssm
    per = np.asarray(T, float) / np.asarray(t, float)
    fwd = per * (2 * chunk * (G * N + d) + 4 * N * d)
    return fwd, 2 * fwd + per * (2 * chunk * G * N + 2 * N * d)


@_doc
def ssd_kernel_flops(ssm: tuple, T, t=1, chunk: int = MAMBA_CHUNK) -> tuple:
    r"""FLOPs of the SSD matmul kernels mamba_ssm launches for one Mamba-2 layer on one GPU.

    .. math::

        F_{\text{fwd}} = \frac{T}{t}\bigl(2QGN + Qd_{ssm} + 4Nd_{ssm}\bigr),\qquad
        F_{\text{bwd}} = \frac{T}{t}\bigl(6QGN + 3Qd_{ssm} + 10Nd_{ssm}\bigr)

    The sum over :func:`ssd_kernels`' matmul kernels, as the kernels run them (mamba_ssm
    ``ssd_combined.py``): forward ``_bmm_chunk_fwd``
    (:math:`CB^\top`, whole, ``causal=False``), ``_chunk_state_fwd`` (:math:`B^\top X`) and
    ``_chunk_scan_fwd`` (causal: its K loop stops at the diagonal, :math:`Qd` and :math:`CS`);
    backward the recomputed ``_bmm_chunk_fwd`` and ``_chunk_state_fwd``, then
    ``_chunk_scan_bwd_dstates``, ``_chunk_scan_chunk_state_bwd_dx`` (causal half plus
    :math:`B\,dS`), ``_chunk_state_bwd_db``, ``_chunk_scan_bwd_dC``, ``_chunk_scan_bwd_dcb``
    (causal half), two ``_bmm_chunk_bwd`` and ``_chunk_scan_bwd_ddAcs_stable`` (causal half).

    {flops_params}

    Examples
    --------
    d_ssm = 64, N = 16, G = 1, Q = 4, T = 8: forward 8 (128 + 256 + 4096) = 8 * 4480,
    backward 8 (384 + 768 + 10240) = 8 * 11392.

    >>> f, b = ssd_kernel_flops((64, 16, 2, 1, 4), 8, chunk=4)
    >>> float(f) == 8 * 4480, float(b) == 8 * 11392
    (True, True)

    References
    ----------
    .. [mamba-ssm] mamba_ssm/ops/triton/ssd_combined.py, ssd_chunk_scan.py, ssd_chunk_state.py,
       ssd_bmm.py (state-spaces/mamba e9594ce).
    """
    # one list of kernels: the FLOPs summed here are the ones the step prices kernel by kernel
    per = np.asarray(T, float) / np.asarray(t, float)
    return tuple(per * sum(fl for _, fl, _ in ks) for ks in ssd_kernels(ssm, chunk))


def ssd_kernels(ssm: tuple, chunk: int = MAMBA_CHUNK, width: int = 2) -> tuple:
    r"""Per-token FLOPs and HBM bytes of each kernel one Mamba-2 mixer launches (t = 1).

    Forward and backward, as mamba_ssm's ``MambaSplitConv1dScanCombinedFn`` and
    Megatron-core's ``ExtendedRMSNorm`` run them on one GPU.  With :math:`w` bytes per 16-bit element, fp32 (4-byte) chunk states of
    :math:`S = d_{ssm}N/Q` values per token, ``CB`` and ``dCB`` in fp32 (:math:`GQ` per
    token) and ``dB``, ``dC`` accumulated in fp32, the kernels read and write (bytes per
    token; the matmul kernels' FLOPs sum to :func:`ssd_kernel_flops`):

    .. math::

        \begin{aligned}
        &\text{conv1d}: 2w(d + 2GN),\quad \text{chunk\_state}: w(d + GN) + 4S,\quad
        \text{state\_passing}: (4 + w)S,\\
        &\text{bmm\_chunk}: 2wGN + 4GQ,\quad
        \text{chunk\_scan}: w(4d + GN) + 4GQ + wS,\quad \text{norm}: 2wd
        \end{aligned}

    forward (chunk_scan reads CB, x, z, C and the bf16 states and writes the gated output
    and ``out_x``), and backward the norm's :math:`3wd`, the recomputed conv1d, bmm_chunk,
    chunk_state and fp32 state passing (:math:`8S`), ``bwd_dz`` :math:`6wd`, ``dstates``
    :math:`w(d + GN) + 4S`, ``state_passing_bwd`` :math:`(8 + 2w)S`, ``dx``
    :math:`w(3d + GN) + 4GQ + wS`, ``dB`` and ``dC`` :math:`w(d + GN) + 4GN + wS` each,
    ``dC.sum`` :math:`8GN`, ``dcb`` :math:`2wd + 4GQ`, ``dcb.sum`` :math:`8GQ`, two
    ``bmm_chunk_bwd`` :math:`2wGN + 4GQ + 4GN` each, ``ddAcs_stable`` :math:`2wd + 4GQ`
    and the conv1d backward :math:`3w(d + 2GN)`.  The per-head vectors (dt, dA_cumsum,
    ddA: H wide) are left out (1 to 2 % of the bytes at Nemotron 3 Nano's shape).  Every
    count is linear in :math:`d, G, H`, so a TP rank's share is the count over t.

    Parameters
    ----------
    ssm : tuple
        ``(d_ssm, N, H, G, conv kernel)`` [1].
    chunk : int
        Chunk length Q [tokens].
    width : int
        Bytes per 16-bit activation element [bytes/element].

    Returns
    -------
    tuple
        ``(forward, backward)``, each a tuple of ``(kernel, FLOPs per token [FLOP],
        bytes per token [bytes])``; FLOPs 0 for the memory-bound kernels.

    Examples
    --------
    d_ssm = 64, N = 16, G = 1, Q = 4 (S = 256): the forward chunk scan moves
    2 (256 + 16) + 16 + 2 * 256 = 1072 bytes per token for 4 * 64 + 2 * 16 * 64 FLOPs; the
    backward's kernels take 6 * 4 * 16 + 3 * 4 * 64 + 10 * 16 * 64 = 11392 FLOPs per token.

    >>> f, b = ssd_kernels((64, 16, 2, 1, 4), chunk=4)
    >>> dict((k, (fl, by)) for k, fl, by in f)["chunk_scan"]
    (2304, 1072.0)
    >>> sum(fl for _, fl, _ in b)
    11392

    References
    ----------
    .. [mamba-ssm] mamba_ssm/ops/triton/ssd_combined.py at e9594ce
       (``MambaSplitConv1dScanCombinedFn.forward`` / ``backward``,
       ``_mamba_chunk_scan_combined_fwd`` / ``_bwd``), ssd_chunk_scan.py,
       ssd_chunk_state.py, ssd_state_passing.py, ssd_bmm.py (the buffers' dtypes).
    .. [megatron-lm] megatron/core/ssm/mamba_mixer.py at d98e8a64dd (``_ssm_training``:
       ``state_dtype`` = params_dtype, the norm after the fused kernel).
    """
    d, N, _, G, _ = ssm
    w, Q = width, chunk
    gn, gq, S = G * N, G * Q, d * N / Q
    conv = 2 * w * (d + 2 * gn)
    state = ("chunk_state", 2 * N * d, w * (d + gn) + 4 * S)
    bmm = ("bmm_chunk", 2 * Q * gn, 2 * w * gn + 4 * gq)
    grads = w * (d + gn) + 4 * gn + w * S          # dB or dC: x or dY, B or C, states
    fwd = (("conv1d", 0, conv), state, ("state_passing", 0, (4 + w) * S), bmm,
           ("chunk_scan", Q * d + 2 * N * d, w * (4 * d + gn) + 4 * gq + w * S),
           ("norm", 0, 2 * w * d))
    bwd = (("norm", 0, 3 * w * d), ("conv1d", 0, conv), bmm, state,
           ("state_passing", 0, 8 * S), ("dz", 0, 6 * w * d),
           ("dstates", 2 * N * d, w * (d + gn) + 4 * S),
           ("state_passing_bwd", 0, (8 + 2 * w) * S),
           ("dx", Q * d + 2 * N * d, w * (3 * d + gn) + 4 * gq + w * S),
           ("db", 2 * N * d, grads), ("dc", 2 * N * d, grads), ("dc_sum", 0, 8 * gn),
           ("dcb", Q * d, 2 * w * d + 4 * gq), ("dcb_sum", 0, 8 * gq),
           ("bmm_chunk_bwd", 4 * Q * gn, 2 * (2 * w * gn + 4 * gq + 4 * gn)),
           ("ddacs", Q * d, 2 * w * d + 4 * gq), ("conv1d_bwd", 0, 1.5 * conv))
    return fwd, bwd


def layout_copy_bytes(ssm: tuple, width: int = 2) -> tuple:
    r"""Per-token HBM bytes of Megatron-core's layout copies around the fused kernel [bytes].

    Forward and backward, at micro-batch size b > 1 (t = 1):

    .. math::

        B_{\text{fwd}} = 2w\,(2d_{ssm} + 2GN + H) + 2w\,d_{ssm},\qquad
        B_{\text{bwd}} = 2w\,(2d_{ssm} + 2GN + H)

    ``_ssm_training`` copies in_proj's ``zxBCdt`` from ``[s, b, .]`` to ``[b, s, .]``
    (``rearrange(...).contiguous()``) and the kernel's output back; in the backward
    Transformer Engine's ``grad_output_preprocess`` makes in_proj's permuted output gradient
    contiguous (``reshape``, ``contiguous``).  At b = 1 the permuted tensors are already
    contiguous (PyTorch ignores a size-1 dimension's stride): no copy.

    Parameters
    ----------
    ssm : tuple
        ``(d_ssm, N, H, G, conv kernel)`` [1].
    width : int
        Bytes per activation element [bytes/element].

    Returns
    -------
    tuple of float
        Forward and backward bytes per token [bytes].

    Examples
    --------
    d_ssm = 64, N = 16, H = 2, G = 1: in_proj's output is 2 * 64 + 32 + 2 = 162 wide.

    >>> layout_copy_bytes((64, 16, 2, 1, 4))
    (904, 648)

    References
    ----------
    .. [megatron-lm] megatron/core/ssm/mamba_mixer.py at d98e8a64dd (``_ssm_training``: the
       two ``rearrange(...).contiguous()``).
    .. [transformer-engine] transformer_engine/pytorch/module/base.py at d0067d0da6
       (``grad_output_preprocess``: ``reshape`` then ``contiguous``).
    """
    d, N, H, G, _ = ssm
    zx = 2 * width * (2 * d + 2 * G * N + H)
    return zx + 2 * width * d, zx
