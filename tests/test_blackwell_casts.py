"""Per-tensor FP8 casts on Blackwell write one quantized copy (issue 31, step time).

Transformer Engine at d0067d0da6 quantizes a GEMM's input in the forward with
``set_usage(rowwise=True, columnwise=backward_needs_input)`` (``module/linear.py:428-436``)
and its output gradient with ``set_usage(rowwise=True, columnwise=True)`` (``linear.py:905``;
``layernorm_linear.py:726``; ``grouped_linear.py:1072-1075``).  A per-tensor quantizer (delayed
``Float8Quantizer``, current-scaling ``Float8CurrentScalingQuantizer``) allocates the output's
transpose only where FP8 GEMMs are TN-only (``csrc/quantizer.cpp:375, 689``: ``with_transpose
= columnwise_usage && !is_non_tn_fp8_gemm_supported``), and the per-tensor cast kernel writes
the transpose only when the output holds one (``common/cast/dispatch/quantize.cuh:64-83``:
``cast_transpose`` with column-wise data, else ``fp8::quantize``).  On a GPU with non-TN FP8
GEMMs (B200, GB200, B300, GB300: compute capability 10.x) the weight-gradient GEMM
(``layout="NT"``, ``linear.py:1261``) reads the row-wise data of the input and of the output
gradient in place (``common/gemm/cublaslt_gemm.cu:129-157, 220-247``).  So one cast reads
2 bytes and writes 1 + 1 on Hopper, 1 on Blackwell: 2 + 2w vs 2 + w per element (w = 1).
MXFP8 writes both copies with their own scales on any GPU (``csrc/quantizer.cpp:1502``).
"""

from __future__ import annotations

import dataclasses

import pytest

from memsym.hardware import cluster_for, gpu
from memsym.model import preset
from memsym.timing.gemm import shape_of
from memsym.timing.layer import layer_time
from memsym.timing.moe import grouped_quantize_bytes
from memsym.timing.quantize import cast_copies
from memsym.timing.records import Overlap, Settings

# Llama 3 8B (meta-llama/Meta-Llama-3-8B config.json): h 4096, FFN 14336, 32 query and 8 KV
# heads of 128; one layer at b = 1, s = 8192, no TP: 8192 tokens.  Forward casts (qkv's and
# fc1's inputs come quantized from the fused norms): proj's input [8192, 4096] and fc2's
# [8192, 14336].  Backward casts: the output gradients of qkv [8192, 4096 + 2 x 8 x 128 =
# 6144], proj [8192, 4096], fc1 [8192, 2 x 14336 = 28672] and fc2 [8192, 4096].
T = 8192
FWD_ELEMENTS = T * (4096 + 14336)
BWD_ELEMENTS = T * (6144 + 4096 + 28672 + 4096)
#: HBM bandwidth [bytes/s]: H100 SXM 3.35 TB/s, B200 8 TB/s (NVIDIA datasheets).
BANDWIDTH = {"h100-80gb": 3.35e12, "b200": 8e12}


def cast_seconds(device, recipe):
    """The layer's (forward, backward) memory-bound seconds under FP8 ``recipe`` less the bf16
    layer's: the casts alone (tests/test_quantize_casts.py shows it on H100)."""
    dev = gpu(device)
    x = shape_of(preset("llama3-8b"))
    st = Settings(seq_length=T, micro_batch_size=1, precision="fp8", fp8_recipe=recipe)
    kw = dict(moe=False, eta_gemm=None, overlap=Overlap(), dp=1.0)
    clu = cluster_for(dev.name)
    f8, b8 = layer_time(x, st, dev, clu, 1.0, 1.0, 1.0, 1.0, 1.0, **kw)
    f16, b16 = layer_time(x, dataclasses.replace(st, precision="bf16", fp8_recipe=None), dev,
                          clu, 1.0, 1.0, 1.0, 1.0, 1.0, **kw)
    return float(f8["memory"] - f16["memory"]), float(b8["memory"] - b16["memory"])


@pytest.mark.parametrize("recipe", ["tensorwise", "delayed", None])
def test_per_tensor_fp8_casts_h100_vs_b200(recipe):
    # H100 (TN-only): 2 + 2 x 1 = 4 bytes an element; B200 (non-TN): 2 + 1 = 3.  Current
    # scaling (tensorwise) reads each cast input once more for its amax (+2: 6 and 5), and
    # casts qkv's and fc1's inputs [8192, 4096] each from the norm's bf16 output (the norm
    # computes their amax: 4 and 3; tests/test_quantize_amax.py)
    amax = 2 if recipe == "tensorwise" else 0
    normed = T * (4096 + 4096) if recipe == "tensorwise" else 0
    f, b = cast_seconds("h100-80gb", recipe)
    assert f == pytest.approx(((4 + amax) * FWD_ELEMENTS + 4 * normed)
                              / BANDWIDTH["h100-80gb"], rel=1e-12)
    assert b == pytest.approx((4 + amax) * BWD_ELEMENTS / BANDWIDTH["h100-80gb"], rel=1e-12)
    f, b = cast_seconds("b200", recipe)
    assert f == pytest.approx(((3 + amax) * FWD_ELEMENTS + 3 * normed) / BANDWIDTH["b200"],
                              rel=1e-12)
    assert b == pytest.approx((3 + amax) * BWD_ELEMENTS / BANDWIDTH["b200"], rel=1e-12)


#: Transformer Engine's MXFP8 cast on a B200 [bytes/s]: ROCm/TransformerEngine PR #598,
#: CAST_ONLY table, column "B200 (us)", BF16 both 8192x8192: 52.34 us for a kernel that reads
#: 2 bytes an element and writes 1 + 1 and two E8M0 scales per 32 elements:
#: (2 + 2 + 2/32) x 8192^2 = 272,629,760 bytes / 52.34 us = 5.209 TB/s (0.651 of 8 TB/s).
MXFP8_CAST_B200 = 272_629_760 / 52.34e-6


def test_mxfp8_casts_on_b200_at_the_measured_cast_rate():
    # MXFP8: row-wise and column-wise copies, each 1 byte + an E8M0 scale byte per 32
    # elements: 2 + 2 x (1 + 1/32) = 4.0625 bytes an element on B200 as on H100; the norm
    # writes bf16 and a cast of its own quantizes qkv's and fc1's inputs [8192, 4096] each
    # (TE d0067d0da6 csrc/extensions/normalization.cpp:106-113: MXFP8 UNFUSED without
    # NVTE_NORM_FWD_USE_CUDNN), no amax pass; every one at the rate TE's MXFP8 cast kernel is
    # timed at on a B200, not the 8 TB/s datasheet rate
    assert 4.0625 * 8192 ** 2 == 272_629_760
    f, b = cast_seconds("b200", "mxfp8")
    assert f == pytest.approx(4.0625 * (FWD_ELEMENTS + T * (4096 + 4096)) / MXFP8_CAST_B200,
                              rel=1e-12)
    assert b == pytest.approx(4.0625 * BWD_ELEMENTS / MXFP8_CAST_B200, rel=1e-12)


def test_the_same_b200_with_tn_only_gemms_writes_the_transpose():
    # the GPU's compute capability alone decides: B200 read as compute capability 9.0
    # (TN-only) writes the transpose again, 4 bytes an element
    b200 = gpu("b200")
    tn_only = dataclasses.replace(b200, compute_capability=(9, 0))
    assert (b200.non_tn_fp8_gemm, tn_only.non_tn_fp8_gemm) == (True, False)
    assert cast_copies("fp8", "tensorwise", tn_only.non_tn_fp8_gemm) == 2
    assert cast_copies("fp8", "tensorwise", b200.non_tn_fp8_gemm) == 1
    assert cast_copies("fp4", None, b200.non_tn_fp8_gemm) == 2     # NVFP4: both copies


def test_grouped_expert_input_cast_on_b200():
    # the routed rows into the experts' grouped fc1 (grouped_linear.py split_quantize; the
    # grouped per-tensor forms, csrc/quantizer.cpp:546-547, 799-800, allocate no transpose on
    # a non-TN GPU): 32,768 rows of h = 2048, 2 + 1 bytes an element (2 + 1 + 1 on Hopper,
    # 2 + 2 x (1 + 1/32) under MXFP8 on either); current scaling (tensorwise) reads the rows
    # once more for each split's amax: 2 more
    rows, h = 32768, 2048
    assert float(grouped_quantize_bytes(rows, h, "tensorwise", True)) == 5 * rows * h
    assert float(grouped_quantize_bytes(rows, h, None, True)) == 3 * rows * h
    assert float(grouped_quantize_bytes(rows, h, "tensorwise", False)) == 6 * rows * h
    assert float(grouped_quantize_bytes(rows, h, "delayed", False)) == 4 * rows * h
    assert float(grouped_quantize_bytes(rows, h, "mxfp8", True)) == 4.0625 * rows * h
