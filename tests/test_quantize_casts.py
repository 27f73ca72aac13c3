"""Transformer Engine's casts around quantized GEMMs (memsym.timing.quantize), by hand.

TE quantizes a GEMM's input in the forward (transformer_engine/pytorch/module/linear.py
``_Linear.forward``: ``input_quantizer(inputmat)``; grouped_linear.py ``tex.split_quantize``)
unless a fused norm writes it quantized (layernorm_linear.py ``with_quantized_norm``), and
its output gradient in the backward (base.py ``grad_output_preprocess``, row-wise and
column-wise): a 2-byte read and two w-byte copies per element.
"""

from __future__ import annotations

import dataclasses

import pytest

from memsym.hardware import cluster_for, gpu
from memsym.model import preset
from memsym.timing.gemm import layer_gemms, shape_of
from memsym.timing.layer import layer_time
from memsym.timing.quantize import cast_bytes
from memsym.timing.records import Overlap, Settings


def test_qwen3_moe_layer_casts_by_hand():
    # Qwen3-30B-A3B (h 2048, 32 query heads and 4 KV heads of 128, 128 experts of 768, top-8),
    # one MoE layer at b = 1, s = 4096, EP 8, no TP: T = 4096 tokens, 16 local experts
    # receiving 4096 x 8 = 32,768 rows (2,048 each).  Forward casts: proj's input
    # [4096, 32 x 128] and the experts' fc2 input [32768, 768] (qkv: fused norm; router:
    # bf16; experts' fc1: the dispatcher's cast).  Backward: the output gradients of qkv
    # [4096, (32 + 2 x 4) x 128], proj [4096, 2048], experts' fc1 [32768, 2 x 768] and fc2
    # [32768, 2048].  FP8: 2 + 2 x 1 = 4 bytes an element.
    g = layer_gemms(shape_of(preset("qwen3-30b-a3b")), 4096, 1, 1, 1, 8, moe=True)
    f, b = cast_bytes(g, 1)
    assert float(f) == 4 * (4096 * 4096 + 32768 * 768)
    assert float(b) == 4 * (4096 * 5120 + 4096 * 2048 + 32768 * 1536 + 32768 * 2048)


def test_dense_layer_memory_grows_by_the_casts_at_hbm_bandwidth():
    # Llama 3 8B (h 4096, f 14336, 32 heads, 8 KV heads of 128), b = 1, s = 8192, one H100
    # (3.35 TB/s): forward casts proj's input [8192, 4096] and fc2's [8192, 14336]; backward
    # the gradients [8192, 6144], [8192, 4096], [8192, 28672], [8192, 4096]; 4 bytes each in
    # FP8, none in bf16 (the bf16 layer's memory-bound time is the FP8 one's without them).
    dev = gpu("h100-80gb")
    x = shape_of(preset("llama3-8b"))
    st = Settings(seq_length=8192, micro_batch_size=1, precision="fp8")
    kw = dict(moe=False, eta_gemm=None, overlap=Overlap(), dp=1.0)
    f8, b8 = layer_time(x, st, dev, cluster_for(dev.name), 1.0, 1.0, 1.0, 1.0, 1.0, **kw)
    f16, b16 = layer_time(x, dataclasses.replace(st, precision="bf16"), dev,
                          cluster_for(dev.name), 1.0, 1.0, 1.0, 1.0, 1.0, **kw)
    fwd = 4 * 8192 * (4096 + 14336)
    bwd = 4 * 8192 * (6144 + 4096 + 28672 + 4096)
    assert float(f8["memory"] - f16["memory"]) == pytest.approx(fwd / 3.35e12, rel=1e-12)
    assert float(b8["memory"] - b16["memory"]) == pytest.approx(bwd / 3.35e12, rel=1e-12)


def test_mxfp8_copies_carry_their_block_scales():
    # MXFP8: one E8M0 scale byte per 32 elements on each copy, 2 + 2 x (1 + 1/32) = 4.0625
    g = layer_gemms(shape_of(preset("llama3-8b")), 8192, 1)
    f1, b1 = cast_bytes(g, 1)
    fm, bm = cast_bytes(g, 1 + 1 / 32)
    assert float(fm / f1) == float(bm / b1) == 4.0625 / 4
