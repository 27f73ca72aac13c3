"""FP8 current scaling's amax pass (memsym.timing.quantize, issue 31), by hand.

Transformer Engine d0067d0da6 ``Float8CurrentScalingQuantizer::quantize_impl``
(transformer_engine/pytorch/csrc/quantizer.cpp:980-1033) runs ``nvte_compute_amax_with_config``
over the bf16 input (1009-1012), ``nvte_compute_scale_from_amax`` (1024), then the cast
(1028): one more 2-byte read an element per cast.  A norm-fused GEMM's input under current
scaling is the norm's bf16 output with its amax (csrc/extensions/normalization.cpp:114-118,
``FUSED_NORM_AMAX_FP8``), cast by ``quantize_with_amax`` (200-204; no amax pass): a 2-byte
read and the copies, which delayed scaling's fully fused norm writes itself.  Megatron-LM's
``--fp8-recipe tensorwise`` is that recipe (megatron/core/fp8_utils.py:777-780 at d98e8a64dd).
"""

from __future__ import annotations

import dataclasses

import pytest

from memsym.hardware import cluster_for, gpu
from memsym.model import preset
from memsym.timing.collectives import group_bandwidth
from memsym.timing.gemm import layer_gemms, shape_of
from memsym.timing.layer import layer_time
from memsym.timing.moe import grouped_quantize_bytes
from memsym.timing.quantize import amax_pass, cast_bytes, cast_kernels, current_scaling
from memsym.timing.records import Overlap, Settings

# Llama 3 8B (h 4096, f 14336, 32 heads, 8 KV heads of 128), b = 1, s = 8192, no TP: the
# forward GEMMs' inputs qkv [8192, 4096] (norm-fused), proj [8192, 4096], fc1 [8192, 4096]
# (norm-fused), fc2 [8192, 14336]; the output gradients qkv [8192, 6144], proj [8192, 4096],
# fc1 [8192, 28672], fc2 [8192, 4096].
CAST_FWD = 8192 * (4096 + 14336)          # proj's and fc2's inputs [elements]
NORMED = 8192 * (4096 + 4096)             # qkv's and fc1's inputs [elements]
GRADS = 8192 * (6144 + 4096 + 28672 + 4096)


def test_only_tensorwise_fp8_runs_current_scaling():
    assert [current_scaling("fp8", r) for r in (None, "delayed", "tensorwise", "mxfp8")] == \
        [False, False, True, False]
    assert not current_scaling("fp4", "tensorwise") and not current_scaling("bf16")


def test_one_dense_layer_casts_with_and_without_the_amax_pass():
    g = layer_gemms(shape_of(preset("llama3-8b")), 8192, 1)
    # delayed (Hopper: row-wise and transpose copies): 2 + 2 x 1 = 4 bytes an element of
    # proj's and fc2's inputs and of the four output gradients; qkv's and fc1's none
    f, b = cast_bytes(g, 1, 2)
    assert (float(f), float(b)) == (4 * CAST_FWD, 4 * GRADS)
    # current scaling: the amax read makes those 2 + 2 + 2 = 6; qkv's and fc1's inputs are
    # cast from the norm's bf16 output at 2 + 2 = 4 (their amax is the norm kernel's)
    f, b = cast_bytes(g, 1, 2, **cast_kernels("fp8", "tensorwise"))
    assert (float(f), float(b)) == (6 * CAST_FWD + 4 * NORMED, 6 * GRADS)
    # on a non-TN GPU (one row-wise copy): 2 + 1 + 2 = 5 and 2 + 1 = 3
    f, b = cast_bytes(g, 1, 1, amax=True, norm_cast=True)
    assert (float(f), float(b)) == (5 * CAST_FWD + 3 * NORMED, 5 * GRADS)
    # NVFP4 (two copies of 1/2 + 1/16 bytes): an amax pass on every cast, the norm outputs'
    # included (their Hadamard-transformed amax is not the norm's): 2 + 2 + 9/8 everywhere
    f, b = cast_bytes(g, 0.5 + 1 / 16, 2, **cast_kernels("fp4"))
    assert (float(f), float(b)) == (5.125 * (CAST_FWD + NORMED), 5.125 * GRADS)


def test_which_recipes_cast_how():
    # TE d0067d0da6 normalization.cpp:95-130: the norm writes FP8 itself only for
    # Float8Quantizer (delayed); current scaling hands the cast its amax, MXFP8 and NVFP4
    # (with the recipe's Hadamard transform) run the quantizer on the bf16 output
    assert [cast_kernels("fp8", r) for r in (None, "delayed", "tensorwise", "mxfp8")] == [
        dict(amax=False, norm_cast=False, norm_amax=False),
        dict(amax=False, norm_cast=False, norm_amax=False),
        dict(amax=True, norm_cast=True, norm_amax=False),
        dict(amax=False, norm_cast=True, norm_amax=False)]
    assert cast_kernels("fp4") == dict(amax=True, norm_cast=True, norm_amax=True)
    assert [amax_pass(p) for p in ("bf16", "fp8", "fp4")] == [False, False, True]


def test_the_routed_rows_cast_reads_them_once_more_for_the_amax():
    # split_quantize of 32,768 routed rows of 2,048 (csrc/extensions/cast.cpp:907-940: each
    # split's quantize, amax pass included): Hopper 2 + 2 + 2 = 6 bytes an element
    assert grouped_quantize_bytes(32768, 2048, "tensorwise") == 6 * 32768 * 2048
    assert grouped_quantize_bytes(32768, 2048, "delayed") == 4 * 32768 * 2048


def test_a_tensorwise_layers_memory_time_grows_by_the_amax_bytes_at_hbm_bandwidth():
    # the layer above on one H100 (3.35 TB/s): tensorwise less delayed is the amax reads and
    # the norm outputs' casts, forward 2 x CAST_FWD + 4 x NORMED, backward 2 x GRADS bytes
    dev = gpu("h100-80gb")
    x = shape_of(preset("llama3-8b"))
    st = Settings(seq_length=8192, micro_batch_size=1, precision="fp8", fp8_recipe="delayed")
    kw = dict(moe=False, eta_gemm=None, overlap=Overlap(), dp=1.0)
    fd, bd = layer_time(x, st, dev, cluster_for(dev.name), 1.0, 1.0, 1.0, 1.0, 1.0, **kw)
    ft, bt = layer_time(x, dataclasses.replace(st, fp8_recipe="tensorwise"), dev,
                        cluster_for(dev.name), 1.0, 1.0, 1.0, 1.0, 1.0, **kw)
    assert float(ft["memory"] - fd["memory"]) == pytest.approx(
        (2 * CAST_FWD + 4 * NORMED) / 3.35e12, rel=1e-12)
    assert float(bt["memory"] - bd["memory"]) == pytest.approx(2 * GRADS / 3.35e12, rel=1e-12)


def test_the_amax_all_reduce_under_sequence_parallelism_is_exposed_tp_time():
    # TE d0067d0da6 module/linear.py:351-355, 818-825: under SP the column-parallel input's and
    # the row-parallel output gradient's quantizers all-reduce their fp32 amax (4 bytes, MAX)
    # over the TP group (csrc/quantizer.cpp:1015-1021) before the cast, the stream waiting on
    # it.  Llama 3 8B at t = 2 with SP: two blocks (attention, MLP), one all-reduce each way
    # per block, by the ring form 2 (t - 1)/t S / beta + 2 (t - 1) alpha with S = 4 bytes
    dev = gpu("h100-80gb")
    clu = cluster_for(dev.name)
    x = shape_of(preset("llama3-8b"))
    st = Settings(seq_length=8192, micro_batch_size=1, precision="fp8", fp8_recipe="delayed",
                  sequence_parallel=True)
    kw = dict(moe=False, eta_gemm=None, overlap=Overlap(), dp=1.0)
    fd, bd = layer_time(x, st, dev, clu, 2.0, 1.0, 1.0, 2.0, 1.0, **kw)
    ft, bt = layer_time(x, dataclasses.replace(st, fp8_recipe="tensorwise"), dev, clu,
                        2.0, 1.0, 1.0, 2.0, 1.0, **kw)
    beta, alpha = group_bandwidth("tp", 2, clu, t=2, c=1, d=1)
    one = 2 * (2 - 1) / 2 * 4 / beta + 2 * (2 - 1) * alpha
    assert float(ft["tp"] - fd["tp"]) == pytest.approx(2 * one, rel=1e-9)
    assert float(bt["tp"] - bd["tp"]) == pytest.approx(2 * one, rel=1e-9)
    # without SP no quantizer reduces its amax (set_quantizer_amax_reduction_group(..., None))
    no_sp = dataclasses.replace(st, sequence_parallel=False)
    f0, _ = layer_time(x, no_sp, dev, clu, 2.0, 1.0, 1.0, 2.0, 1.0, **kw)
    f1, _ = layer_time(x, dataclasses.replace(no_sp, fp8_recipe="tensorwise"), dev, clu,
                       2.0, 1.0, 1.0, 2.0, 1.0, **kw)
    assert float(f1["tp"]) == float(f0["tp"])
