r"""What Transformer Engine's unfused MXFP8 expert path launches per local expert, beyond the
cast bytes :mod:`memsym.timing.quantize` and :func:`memsym.timing.moe.grouped_quantize_bytes`
already price.

Through Transformer Engine 2.14 (the NeMo containers through 26.04.01; Megatron-Bridge issue
#2885: the expert path's casts and GEMMs unfused, the fused grouped path "delayed to 26.06")
``GroupedLinear`` casts each local expert's tensors in a kernel of its own [te-mxfp8-per-expert]:

* ``tex.split_quantize`` of the input (forward) and of the output gradient (backward) ends in
  ``multi_tensor_quantize_impl``, whose one fused multi-tensor kernel is for per-tensor FP8
  (``Float8Quantizer``) only; MXFP8 quantizes "kernels individually", one per expert
  (``quantizer_cpp_list[i]->quantize``);
* the weights: ``get_weight_workspace`` per expert, on the step's first micro-batch (Megatron
  passes ``is_first_microbatch``, the cache is reused after it [megatron-schedules]), one cast
  of each expert's fc1 and fc2 weight, row-wise and column-wise;
* the scale swizzle: the inputs' and output gradients' quantizers write GEMM-swizzled scales
  (``optimize_for_gemm = True``), so only the weights' scales are swizzled, in one
  multi-tensor kernel per grouped GEMM (``multi_tensor_swizzle_scales_for_gemm``): its bytes
  (each expert's scales read and written, forward and data gradient) are priced here, its
  launch is not (no measurement of that kernel).

A cast kernel of :math:`B` bytes takes the longer of its bytes at the cast kernel's
measured bandwidth (:func:`memsym.hardware.kernel_fraction`, ``"cast"``) and the measured
time of a small cast (:data:`CAST_FLOOR`), which the bytes do not move:

.. math:: t_{cast}(B) = \max\Bigl(t_0,\ \frac{B}{f_{cast} B_{HBM}}\Bigr)

What the unfused path costs beyond the bytes already priced, per MoE layer and micro-batch,
with :math:`n` local experts of :math:`M` rows each and :math:`w = 1 + 1/32` (MXFP8):

.. math:: \Delta t = \sum_{q} n \bigl(t_{cast}(b_q) - b_q / (f_{cast} B_{HBM})\bigr),
   \quad b_q = (2 + 2w)\, M\, D_q

over the forward's fc1 and fc2 inputs (:math:`D_q = K_q`) and the backward's two output
gradients (:math:`D_q = N_q`).  The grouped path casts each tensor of all :math:`n` experts
in one kernel: :math:`\max(t_0, n b_q / \ldots) - n b_q / \ldots`.  The weights' casts,
once per step, take :math:`\sum_q n\, t_{cast}((2 + 2w) K_q N_q)` per MoE layer.

References
----------
.. [te-mxfp8-per-expert] NVIDIA/TransformerEngine v2.14 (f031cf87b):
   pytorch/csrc/extensions/cast.cpp: 316-366 (``multi_tensor_quantize_impl``: "Note: Currently only have fused kernel for FP8
   delayed scaling"; else "Quantize kernels individually"), 1451-1463 (``split_quantize``:
   the general multi-tensor quantization for MXFP8); pytorch/module/grouped_linear.py
   (``_GroupedLinear.forward``: ``tex.split_quantize``, ``module.get_weight_workspace`` for
   ``i in range(num_gemms)`` with ``update_workspace = is_first_microbatch is None or
   is_first_microbatch``; ``_get_quantizers``: ``optimize_for_gemm = True`` for the input and
   output-gradient quantizers, 1227-1240); pytorch/csrc/extensions/gemm.cpp:540-547
   (``te_general_grouped_gemm``: ``multi_tensor_swizzle_scales_for_gemm`` of A and B);
   pytorch/csrc/extensions/swizzle.cpp:144-250 (tensors already swizzled skipped, one
   ``nvte_multi_tensor_swizzle_scaling_factors`` launch for the rest).  The grouped path
   (``tex.group_quantize``, GEMM + SwiGLU + quantize fused) is TE pull request #2769, first in
   v2.15.
.. [megatron-schedules] Megatron-LM d98e8a64dd megatron/core/extensions/transformer_engine.py:
   2721-2728 (``TEGroupedLinear.forward`` passes ``is_first_microbatch``, then sets it False);
   pipeline_parallel/schedules.py:496-497 (``set_is_first_microbatch`` on the step's first).
.. [mbridge-issue-2885] NVIDIA-NeMo/Megatron-Bridge issue #2885 (labels 26.04.01, performance):
   "Unfused expert GEMMs and cast functions"; "Delayed to 26.06"; "enabled with #3983".
.. [te-mxfp8-small-cast] NVIDIA/TransformerEngine pull request #2634 (merged), comment 2026-05-14:
   B200, ``MXFP8Quantizer.update_quantized``; "Small 512/1024-row shapes are launch-bound at
   roughly 8-10 us"; bf16 512x4096 bidirectional 1D (before the PR) 0.009059 ms, 512x8192
   0.009011 ms (twice the bytes, the same time).
"""

from __future__ import annotations

import numpy as np

from ..errors import choose
from ..hardware import gpu as _gpu, kernel_fraction
from .efficiency import as_array, memory_time

__all__ = ["EXPERT_QUANTIZE", "CAST_FLOOR", "cast_seconds", "per_expert_excess",
           "weight_scale_swizzle_bytes", "unfused_seconds", "expert_weight_cast_seconds"]

#: How Transformer Engine casts the routed experts' tensors under MXFP8: ``"per-expert"``, a
#: kernel per local expert (TE through 2.14, the NeMo / Megatron-Bridge releases through
#: 26.04.01, [mbridge-issue-2885]); ``"grouped"``, one kernel for all (TE pull request #2769, 2.15).
EXPERT_QUANTIZE = ("per-expert", "grouped")
#: Seconds of one small MXFP8 cast on a B200, which its bytes do not move [s]
#: ([te-mxfp8-small-cast]: bf16 512x4096, row-wise and column-wise, 0.009059 ms; 512x8192 takes
#: 0.009011 ms).  Every class takes the one measurement (stated, not measured).
CAST_FLOOR = 9.059e-6


def _grouped(path) -> bool:
    # the canonical spelling (memsym.errors.choose: a fixed table, never parsed), refused else
    return choose("expert quantize path", path, EXPERT_QUANTIZE) == "grouped"


def _width():
    # MXFP8: a 1-byte element and an E8M0 scale per 32 (memsym.terms.low_precision.MXFP8_BLOCK)
    return 1 + 1 / 32


def cast_seconds(nbytes, device):
    r"""Seconds of one MXFP8 cast kernel of ``nbytes`` HBM bytes [s].

    .. math:: t = \max\Bigl(t_0,\ \frac{B}{f_{cast}\,B_{HBM}}\Bigr)

    Parameters
    ----------
    nbytes : array_like
        Bytes the cast reads and writes [bytes].
    device : str or GPU
        The GPU.

    Returns
    -------
    numpy.ndarray
        Time [s].

    Examples
    --------
    A B200 (8 TB/s): 512 x 4096 bf16 cast both ways, (4 + 1/16) B an element, takes the
    floor; 8192 x 8192 its bytes at 0.6511 of HBM (52.34 us, the measurement that fraction
    comes from):

    >>> float(cast_seconds(4.0625 * 512 * 4096, "b200")) == CAST_FLOOR
    True
    >>> round(float(cast_seconds(4.0625 * 8192 ** 2, "b200")) * 1e6, 2)
    52.34

    References
    ----------
    [te-mxfp8-small-cast]; [rocm-te-mxfp8-quantize] (:func:`memsym.hardware.kernel_fraction`).
    """
    return np.maximum(CAST_FLOOR, memory_time(as_array(nbytes), device) / kernel_fraction("cast"))


def _expert_tensors(gemms):
    """(rows M, forward width K, backward width N, local experts) of the routed experts'
    GEMMs among a layer's ``gemms``."""
    return [(as_array(q.M), q.K, q.N, q.count) for q in gemms if q.name.startswith("expert_")]


def per_expert_excess(gemms, device, path: str = "per-expert"):
    r"""Seconds (forward, backward) the experts' MXFP8 casts take beyond their bytes [s].

    .. math:: \Delta t = \sum_q c\,\bigl(t_{cast}(b_q) - b_q/(f_{cast} B_{HBM})\bigr)
       \ \text{(per-expert)},\quad
       t_{cast}(c\,b_q) - c\,b_q/(f_{cast} B_{HBM})\ \text{(grouped)}

    with :math:`b_q = (2 + 2w) M D_q`: per MoE layer and micro-batch, the forward's fc1 and
    fc2 inputs (:math:`D = K`), the backward's two output gradients (:math:`D = N`), each a
    kernel per local expert (``"per-expert"``) or one for all :math:`c` (``"grouped"``).

    Parameters
    ----------
    gemms : list of memsym.timing.gemm.Gemm
        The MoE layer's forward GEMMs (``expert_fc1``, ``expert_fc2``: M rows per expert,
        ``count`` local experts).
    device : str or GPU
        The GPU.
    path : {"per-expert", "grouped"}
        :data:`EXPERT_QUANTIZE`.

    Returns
    -------
    tuple of numpy.ndarray
        Forward and backward seconds [s].

    Examples
    --------
    Hand count, Qwen3-30B-A3B on a B200 with EP 8 and MBS 4: 16 local experts of 8,192 rows
    (4 x 4,096 tokens x top-8 / 16); fc1 [8192, 2048] x [2048, 1536], fc2 [8192, 768] x
    [768, 2048].  fc2's input, 8192 x 768 x 4.0625 B = 25.6 MB, takes 4.9 us at 0.6511 x
    8 TB/s, under the floor; the other three (fc1's input and fc2's output gradient, 8192 x
    2048; fc1's output gradient, 8192 x 1536) are above it:

    >>> from memsym.timing.gemm import Gemm
    >>> g = [Gemm("expert_fc1", 8192, 1536, 2048, 16), Gemm("expert_fc2", 8192, 2048, 768, 16)]
    >>> f, b = per_expert_excess(g, "b200")
    >>> rate = 8e12 * kernel_fraction("cast")
    >>> abs(float(f) - 16 * (CAST_FLOOR - 4.0625 * 8192 * 768 / rate)) < 1e-15, float(b)
    (True, 0.0)

    The grouped path: one kernel of 16 x 25.6 MB, above the floor:

    >>> [float(x) for x in per_expert_excess(g, "b200", "grouped")]
    [0.0, 0.0]

    References
    ----------
    [te-mxfp8-per-expert], [te-mxfp8-small-cast] in this module.
    """
    dev = _gpu(device)
    per = 2 + 2 * _width()
    rate = kernel_fraction("cast")
    grouped = _grouped(path)
    out = []
    for side in (1, 2):                       # the forward's inputs, the backward's gradients
        total = np.zeros(())
        for M, K, N, c in _expert_tensors(gemms):
            nbytes = per * M * (K if side == 1 else N)
            if not grouped:
                total = total + c * (cast_seconds(nbytes, dev)
                                     - memory_time(nbytes, dev) / rate)
            else:
                total = total + (cast_seconds(c * nbytes, dev)
                                 - memory_time(c * nbytes, dev) / rate)
        out.append(total)
    return out[0], out[1]


def weight_scale_swizzle_bytes(gemms):
    r"""HBM bytes of swizzling the expert weights' MXFP8 scales, one pass [bytes].

    .. math:: B = 2 \sum_q c_q\,K_q N_q / 32

    Each grouped GEMM swizzles its weights' E8M0 scales into cuBLAS's layout before it runs
    (the forward the row-wise scales, the data gradient the column-wise ones), one byte per 32
    elements read and written, every micro-batch [te-mxfp8-per-expert]; the inputs' and output
    gradients' scales come swizzled from their casts.

    Parameters
    ----------
    gemms : list of memsym.timing.gemm.Gemm
        The MoE layer's forward GEMMs.

    Returns
    -------
    numpy.ndarray
        Bytes of one pass (the forward's; the backward's data gradient the same) [bytes].

    Examples
    --------
    >>> from memsym.timing.gemm import Gemm
    >>> g = [Gemm("expert_fc1", 8192, 1536, 2048, 16), Gemm("expert_fc2", 8192, 2048, 768, 16)]
    >>> int(weight_scale_swizzle_bytes(g)) == 2 * 16 * (2048 * 1536 + 768 * 2048) // 32
    True

    References
    ----------
    [te-mxfp8-per-expert] in this module.
    """
    return sum((2.0 * c * K * N / 32 for _, K, N, c in _expert_tensors(gemms)), np.zeros(()))


def unfused_seconds(gemms, device, precision: str, fp8_recipe=None, path: str = "per-expert"):
    r"""Seconds (forward, backward) the MXFP8 expert path adds to its cast bytes [s].

    Per MoE layer and micro-batch:

    .. math:: t_{fwd} = \Delta t_{fwd} + \frac{B_{swz}}{B_{HBM}},\quad
       t_{bwd} = \Delta t_{bwd} + \frac{B_{swz}}{B_{HBM}}

    The casts' floor beyond their bytes (:func:`per_expert_excess`) and the weights' scale
    swizzle for the forward and the data gradient (:func:`weight_scale_swizzle_bytes`, at the
    datasheet rate: no measurement of that kernel); zero but under MXFP8.

    Parameters
    ----------
    gemms : list of memsym.timing.gemm.Gemm
        The MoE layer's forward GEMMs.
    device : str or GPU
        The GPU.
    precision : str
        The GEMM precision.
    fp8_recipe : {None, "delayed", "tensorwise", "mxfp8"}
        The FP8 recipe.
    path : {"per-expert", "grouped"}
        :data:`EXPERT_QUANTIZE`.

    Returns
    -------
    tuple
        Forward and backward seconds [s].

    Examples
    --------
    >>> from memsym.timing.gemm import Gemm
    >>> g = [Gemm("expert_fc1", 8192, 1536, 2048, 16), Gemm("expert_fc2", 8192, 2048, 768, 16)]
    >>> unfused_seconds(g, "b200", "bf16"), unfused_seconds(g, "b200", "fp8", "tensorwise")
    ((0.0, 0.0), (0.0, 0.0))
    >>> f, b = unfused_seconds(g, "b200", "fp8", "mxfp8")
    >>> swizzle = 2 * 16 * 3 * 2048 * 768 / 32 / 8e12
    >>> bool(abs(float(b) - swizzle) < 1e-18), bool(f > b)
    (True, True)

    References
    ----------
    [te-mxfp8-per-expert], [te-mxfp8-small-cast] in this module.
    """
    if not (precision == "fp8" and fp8_recipe == "mxfp8"):
        return 0.0, 0.0
    f, b = per_expert_excess(gemms, device, path)
    swizzle = memory_time(weight_scale_swizzle_bytes(gemms), device)
    return f + swizzle, b + swizzle


def expert_weight_cast_seconds(gemms, device, path: str = "per-expert"):
    r"""Seconds of casting one MoE layer's local expert weights to MXFP8, once a step [s].

    .. math:: t = \sum_q c_q\, t_{cast}\bigl((2 + 2w) K_q N_q\bigr)\ \text{(per-expert)},
       \quad \sum_q t_{cast}\bigl(c_q (2 + 2w) K_q N_q\bigr)\ \text{(grouped)}

    Each expert's fc1 and fc2 weight, read in bf16 and written row-wise and column-wise, in a
    kernel of its own on the step's first micro-batch [te-mxfp8-per-expert], [megatron-schedules].

    Parameters
    ----------
    gemms : list of memsym.timing.gemm.Gemm
        The MoE layer's forward GEMMs.
    device : str or GPU
        The GPU.
    path : {"per-expert", "grouped"}
        :data:`EXPERT_QUANTIZE`.

    Returns
    -------
    numpy.ndarray
        Time [s].

    Examples
    --------
    Qwen3-30B-A3B's 16 local experts on a B200: fc1's weight 1536 x 2048 (12.8 MB cast, 2.5
    us) and fc2's 2048 x 768 (6.4 MB) both take the floor, 32 kernels:

    >>> from memsym.timing.gemm import Gemm
    >>> g = [Gemm("expert_fc1", 8192, 1536, 2048, 16), Gemm("expert_fc2", 8192, 2048, 768, 16)]
    >>> float(expert_weight_cast_seconds(g, "b200")) == 32 * CAST_FLOOR
    True

    References
    ----------
    [te-mxfp8-per-expert], [megatron-schedules] in this module.
    """
    dev = _gpu(device)
    per = 2 + 2 * _width()
    grouped = _grouped(path)
    total = np.zeros(())
    for _, K, N, c in _expert_tensors(gemms):
        one = per * K * N
        total = total + (cast_seconds(c * one, dev) if grouped else c * cast_seconds(one, dev))
    return total
