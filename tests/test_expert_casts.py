"""Transformer Engine's unfused MXFP8 expert path: a cast kernel per local expert (issue 31).

Through TE 2.14 (the NeMo containers through 26.04.01) ``split_quantize`` of MXFP8 tensors
runs ``multi_tensor_quantize_impl``, whose fused multi-tensor kernel is for per-tensor FP8
only: MXFP8 quantizes "kernels individually", one per expert (TE v2.14
``pytorch/csrc/extensions/cast.cpp:316-366``); the weights are cast per expert on the step's
first micro-batch (``grouped_linear.py``, ``get_weight_workspace`` in ``for i in
range(num_gemms)``).  A small MXFP8 cast on a B200 takes 9.059 us whatever its bytes (TE pull
request #2634: bf16 512x4096 both ways 0.009059 ms, 512x8192 0.009011 ms).  The expectations
below are counted by hand from those byte counts and that time, not read from memsym.
"""

from __future__ import annotations

import copy

import pytest

from memsym.errors import MemsymError
from memsym.hardware import cluster
from memsym.model import preset
from memsym.timing.expert_casts import (CAST_FLOOR, expert_weight_cast_seconds,
                                        per_expert_excess, weight_scale_swizzle_bytes)
from memsym.timing.gemm import Gemm
from memsym.timing.moe import moe_layer_extras
from memsym.timing.records import Settings
from memsym.timing.step import step_time_grid
from tools import time_accuracy

#: TE PR #2634's small B200 cast [s], and the B200's MXFP8 cast bandwidth [B/s]: ROCm/TE PR
#: #598 times NVIDIA TE's cast of a bf16 8192 x 8192 tensor both ways at 52.34 us on a B200,
#: (2 + 2 x 33/32) bytes an element.
FLOOR = 9.059e-6
CAST_BW = (4 + 1 / 16) * 8192 ** 2 / 52.34e-6
#: MXFP8 bytes an element of one cast: a bf16 read, a row-wise and a column-wise copy of a
#: byte and an E8M0 scale per 32.
PER = 2 + 2 * (1 + 1 / 32)


def _qwen3_experts(n, rows_total):
    # Qwen3-30B-A3B's experts (h 2048, moe_intermediate_size 768, SwiGLU): rows_total routed
    # rows over n local experts
    m = rows_total // n
    return [Gemm("expert_fc1", m, 1536, 2048, n), Gemm("expert_fc2", m, 2048, 768, n)]


def test_the_floor_is_the_measurement():
    assert CAST_FLOOR == FLOOR


@pytest.mark.parametrize("n", [8, 16, 32, 64])
def test_per_expert_cast_cost_grows_with_local_experts(n):
    # 4,096 routed rows: every expert's four casts (fc1 and fc2 inputs, fc2 and fc1 output
    # gradients) are below the floor (at most 512 x 2048 x 4.0625 B = 4.3 MB, 0.8 us), so
    # each of the 4 n kernels takes the floor; the bytes are the same for every n
    rows = 4096
    f, b = per_expert_excess(_qwen3_experts(n, rows), "b200")
    fwd_bytes = PER * rows * (2048 + 768)
    bwd_bytes = PER * rows * (1536 + 2048)
    assert float(f) == pytest.approx(2 * n * FLOOR - fwd_bytes / CAST_BW, rel=1e-9)
    assert float(b) == pytest.approx(2 * n * FLOOR - bwd_bytes / CAST_BW, rel=1e-9)
    # the grouped path: one kernel per tensor, the same for every n
    gf, gb = per_expert_excess(_qwen3_experts(n, rows), "b200", "grouped")
    assert float(gf) == pytest.approx(2 * FLOOR - fwd_bytes / CAST_BW, rel=1e-9)
    assert float(gb) == pytest.approx(2 * FLOOR - bwd_bytes / CAST_BW, rel=1e-9)


def test_large_experts_cost_their_bytes_only():
    # 16 experts of 16,384 rows (MBS 8 x 4,096 tokens x top-8 / 16 experts on EP 8): every
    # cast moves at least 16384 x 768 x 4.0625 B = 51 MB, 9.8 us at the cast bandwidth
    f, b = per_expert_excess(_qwen3_experts(16, 16 * 16384), "b200")
    assert (float(f), float(b)) == (0.0, 0.0)


@pytest.mark.parametrize("n", [16, 64])
def test_weight_casts_scale_with_local_experts(n):
    # each expert's fc1 (2048 x 1536) and fc2 (768 x 2048) weight in a kernel of its own, 12.8
    # and 6.4 MB: both below the floor
    got = float(expert_weight_cast_seconds(_qwen3_experts(n, 4096 * n), "b200"))
    assert got == pytest.approx(2 * n * FLOOR, rel=1e-12)
    grouped = float(expert_weight_cast_seconds(_qwen3_experts(n, 4096 * n), "b200", "grouped"))
    assert grouped == pytest.approx(PER * n * 3 * 2048 * 768 / CAST_BW, rel=1e-9)


def test_weight_scale_swizzle_bytes():
    # one byte per 32 weight elements, read and written: 16 x (2048 x 1536 + 768 x 2048) / 16
    assert float(weight_scale_swizzle_bytes(_qwen3_experts(16, 4096))) == 16 * 3 * 2048 * 768 / 16


def test_moe_layer_prices_the_per_expert_casts_under_mxfp8_only():
    # fc2's input cast of each of 16 experts of 8,192 rows, 8192 x 768 x 4.0625 B = 25.6 MB,
    # 4.9 us at the cast bandwidth, is the one kernel under the floor: the per-expert path
    # costs 16 (floor - 4.9 us) more forward seconds than the grouped one
    g = [Gemm("router", 16384, 128, 2048)] + _qwen3_experts(16, 16 * 8192)
    args = (g, 16384, 8, 8, 1, cluster("dgx-b200"), "b200")
    per = moe_layer_extras(*args, "fp8", fp8_recipe="mxfp8")
    grouped = moe_layer_extras(*args, "fp8", fp8_recipe="mxfp8", expert_quantize="grouped")
    assert float(per[4] - grouped[4]) == pytest.approx(
        16 * (FLOOR - PER * 8192 * 768 / CAST_BW), rel=1e-9)
    assert float(per[5] - grouped[5]) == pytest.approx(0.0, abs=1e-15)
    bf16 = moe_layer_extras(*args, "bf16", expert_quantize="grouped")
    assert bf16 == moe_layer_extras(*args, "bf16")


def test_unknown_expert_quantize_path_is_refused():
    with pytest.raises(ValueError, match="expert quantize path") as err:
        step_time_grid(preset("qwen3-30b-a3b"), "b200", e=8, d=8,
                       settings=Settings(seq_length=4096, precision="fp8", fp8_recipe="mxfp8",
                                         expert_quantize="fused"))
    assert isinstance(err.value, MemsymError) and "\n" not in str(err.value)


def test_issue_4439_mxfp8_against_bf16_on_one_dgx_b200():
    """NVIDIA-NeMo/Megatron-Bridge issue #4439: on one DGX-B200 with the 26.04.01 container
    (Megatron-Bridge v0.4.2), Qwen3-30B-A3B with QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1
    (MBS 4, GBS 512, EP 8, HybridEP, CUDA graphs of attn / moe_router / moe_preprocess,
    moe_a2a_overlap False) runs at ~562 TFLOP/s/GPU under MXFP8 and ~552 under BF16: the same
    model FLOPs, so the MXFP8 step is 552/562 of the BF16 one.  The issue prints only the
    MXFP8 config; the BF16 run is taken as the same job at bf16 (stated).  The run is the
    validation row ``mbridge.26.04.01.b200.qwen3-30b-a3b.mxfp8`` (the same release and
    config).  Tolerance: 10 % of the ratio, issue 31's bar for a class's mean error; memsym's
    ratio is 0.906 (its MXFP8 step 9.4 % below its BF16 one, against the measured 1.8 %),
    with or without the per-expert casts (a known gap: memsym's BF16 step for this job is
    about 12 % above the measured one, 11.05 s against 9.84 s)."""
    run = next(r for r in time_accuracy.runs()
               if r["id"] == "mbridge.26.04.01.b200.qwen3-30b-a3b.mxfp8")
    st = run["settings"]
    assert (st["b"], st["B"], run["layout"]["e"], run["gpu"], run["release"]) == (
        4, 512, 8, "b200", "26.04.01")
    assert not st["ep_comm_overlap"]
    bf16 = copy.deepcopy(run)
    bf16["settings"]["precision"] = "bf16"
    del bf16["settings"]["fp8_recipe"]
    ratio = time_accuracy.predict(run)["step"] / time_accuracy.predict(bf16)["step"]
    assert ratio == pytest.approx(552 / 562, rel=0.10)
