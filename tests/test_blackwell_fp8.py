"""Per-tensor FP8 on Blackwell keeps no FP8 transpose (issue 30, "Blackwell per-tensor FP8
transpose may be overcounted").

Transformer Engine at d0067d0da6 asks the device whether its FP8 GEMMs take non-TN layouts
(``pytorch/utils.py:657-663``, ``is_non_tn_fp8_gemm_supported``: compute capability in
[10.0, 12.0) or >= 13.0; ``common/transformer_engine.cpp:1191-1204`` the same in C++).  Where
they do, a per-tensor quantizer (delayed ``Float8Quantizer``, current-scaling
``Float8CurrentScalingQuantizer``) allocates the rowwise ``_data`` for either usage and never
a ``_transpose`` (``csrc/quantizer.cpp:363, 375`` and ``679, 689``: ``with_transpose =
columnwise_usage && !is_non_tn_fp8_gemm_supported``), ``update_usage`` keeps ``_data`` for
columnwise use and drops the transpose (``tensor/storage/float8_tensor_storage.py:292-297``),
and a cached weight workspace needs no transpose to be valid (``module/base.py:762-767``).
So a cached FP8 weight is 1 byte per element on Blackwell (B200 and GB200 10.0, B300 and GB300
10.3: NVIDIA's CUDA GPUs table), 1 + 1 on Hopper (9.0).

A saved GEMM input is 1 byte on both: Hopper quantizes rowwise + transpose and, before saving,
drops the rowwise data (``module/linear.py:600-621``: ``update_usage(rowwise_usage=False,
columnwise_usage=True)``), keeping the 1-byte transpose; Blackwell keeps the 1-byte ``_data``.
MXFP8 keeps rowwise and columnwise data with their own block scales on any GPU
(``MXFP8Quantizer::create_tensor``, ``csrc/quantizer.cpp:1502``, has no non-TN branch).
"""

from __future__ import annotations

import dataclasses

import pytest
import sympy as sp

from memsym.hardware import gpu
from memsym.job import job
from memsym.terms.low_precision import fp8_weight_bytes, saved_input_bytes
from memsym.training import job_memory

# Llama-3 8B (meta-llama/Meta-Llama-3-8B config.json): hidden 4096, 32 layers, FFN 14336,
# 32 query heads and 8 KV heads of 128.
H, L, F, KV, HEAD = 4096, 32, 14336, 8, 128
#: Transformer Engine linear weights per layer: linear_qkv h x (h + 2 g d_head), linear_proj
#: h x h, linear_fc1 (SwiGLU gate and up) h x 2f, linear_fc2 f x h.
PER_LAYER = H * (H + 2 * KV * HEAD) + H * H + H * 2 * F + F * H
N_LIN = L * PER_LAYER   # 6,979,321,856: the output layer is Megatron-core's, no FP8 cache
SEQ = 8192


def _estimate(gpu_name, **options):
    """Llama-3 8B, TP 1, DP 8, s 8192, b 1, FP8; no fragmentation margin, so a byte the model
    states drop is a byte the total drops."""
    opts = dict(precision="fp8", fp8_recipe="tensorwise", tp=1, dp=8, seq_length=SEQ,
                fragmentation=0)
    opts.update(options)
    return job_memory(job("llama3-8b", gpu=gpu_name, **opts)).breakdown()


def test_the_catalogue_reads_compute_capability_as_transformer_engine_does():
    # NVIDIA CUDA GPUs table; TE's test (10, 0) <= cc < (12, 0) or cc >= (13, 0)
    expected = {"h100-80gb": False, "h200-141gb": False, "a100-80gb": False,
                "l40s-48gb": False, "b200": True, "gb200": True, "b300": True, "gb300": True,
                "mi300x-192gb": False}
    assert {name: gpu(name).non_tn_fp8_gemm for name in expected} == expected
    assert gpu("b300").compute_capability == (10, 3) and gpu("b200").compute_capability == (10, 0)
    h100 = gpu("h100-80gb")
    for cc, non_tn in (((12, 0), False), ((12, 1), False), ((13, 0), True), ((11, 0), True)):
        assert dataclasses.replace(h100, compute_capability=cc).non_tn_fp8_gemm is non_tn


def test_widths_per_tensor_fp8_weight_cache_per_architecture():
    # Hopper: _data + _transpose; Blackwell: _data only; FP8 parameters the same (their
    # transpose made after each gather on Hopper), Megatron-FSDP's FP8 shards 1 byte
    assert fp8_weight_bytes("delayed") == 2 and fp8_weight_bytes("tensorwise") == 2
    assert fp8_weight_bytes("delayed", False, True) == 1
    assert fp8_weight_bytes("tensorwise", False, True) == 1
    assert fp8_weight_bytes("tensorwise", True, True) == 1
    assert fp8_weight_bytes("tensorwise", True) == 2 == fp8_weight_bytes("delayed", True)
    assert fp8_weight_bytes("tensorwise", True, False, sharded_params=True) == 1
    # MXFP8: 2 x (1 + 1/32) on any GPU
    assert fp8_weight_bytes("mxfp8", False, True) == fp8_weight_bytes("mxfp8") \
        == 2 * (1 + sp.Rational(1, 32))
    assert saved_input_bytes(True) == 1   # the transpose (Hopper) or the data (Blackwell)


@pytest.mark.parametrize("sharding", ["ddp", "distributed-optimizer"])
@pytest.mark.parametrize("recipe", ["delayed", "tensorwise"])
def test_b200_drops_one_byte_per_linear_weight(sharding, recipe):
    assert N_LIN == 6_979_321_856
    hopper = _estimate("h100-80gb", sharding=sharding, fp8_recipe=recipe)
    blackwell = _estimate("b200", sharding=sharding, fp8_recipe=recipe)
    assert hopper["fp8_weights"] == 2 * N_LIN          # rowwise + transpose
    assert blackwell["fp8_weights"] == 1 * N_LIN       # rowwise only
    assert hopper["total"] - blackwell["total"] == N_LIN   # 6.98 GB per GPU
    # the saved FP8 inputs are 1 byte per element on both: nothing else moves
    changed = {k for k in hopper if hopper[k] != blackwell[k]}
    assert changed == {"fp8_weights", "total"}


def test_fp8_parameters_keep_their_transpose_on_hopper():
    # Megatron-core d98e8a64dd param_and_grad_buffer.py:301-343: after each FP8 parameter
    # all-gather _post_param_sync calls TE's post_all_gather_processing, which on a TN-only GPU
    # runs Float8Tensor._create_transpose (TE d0067d0da6 tensor/utils.py:1423-1427) into
    # out=self._transpose (float8_tensor_storage.py:267-277); the master-weight cast only marks
    # it invalid (utils.py:563 _reset_caches) and linear.py never asks a weight for
    # columnwise_usage=False (:490 rowwise, :1051 columnwise), the only way update_usage drops
    # it (float8_tensor_storage.py:299-317).  So the FP8 parameter is 1 + 1 bytes on Hopper,
    # 1 on Blackwell, where no transpose is made.
    hopper = _estimate("h100-80gb", fp8_param_gather=True)
    blackwell = _estimate("b200", fp8_param_gather=True)
    assert hopper["fp8_weights"] == 2 * N_LIN and blackwell["fp8_weights"] == N_LIN
    assert hopper["total"] - blackwell["total"] == N_LIN          # 6.98 GB per GPU
    assert {k for k in hopper if hopper[k] != blackwell[k]} == {"fp8_weights", "total"}


def test_saved_fp8_inputs_are_the_same_on_both_gpus():
    # a saved linear input is 1 byte per element on either GPU (Hopper keeps the transpose,
    # Blackwell the data), so the activations do not move, and neither does what FP8 saves
    # against bf16 on them
    hopper, blackwell = _estimate("h100-80gb"), _estimate("b200")
    for key in ("layer_activations", "embedding_activations", "output_activations",
                "phase_transient"):
        assert hopper[key] == blackwell[key], key
    saving = {name: _estimate(name, precision="bf16", fp8_recipe=None)["layer_activations"]
              - _estimate(name)["layer_activations"] for name in ("h100-80gb", "b200")}
    assert saving["h100-80gb"] == saving["b200"] > 0


def test_mxfp8_unchanged_on_b200():
    hopper = _estimate("h100-80gb", fp8_recipe="mxfp8")
    blackwell = _estimate("b200", fp8_recipe="mxfp8")
    assert blackwell["fp8_weights"] == N_LIN * 2 * (1 + sp.Rational(1, 32))
    assert hopper == blackwell


def test_hopper_is_counted_as_without_a_gpu():
    # no --gpu is read as TN-only (the count before Blackwell was modelled): H100 and H200 agree
    for sharding in ("ddp", "distributed-optimizer"):
        none = _estimate(None, sharding=sharding)
        assert _estimate("h100-80gb", sharding=sharding) == none
        assert _estimate("h200-141gb", sharding=sharding) == none
        assert none["fp8_weights"] == 2 * N_LIN


def test_lora_frozen_base_cache_follows_the_gpu():
    opts = dict(finetune="lora")
    hopper = _estimate("h100-80gb", **opts)
    blackwell = _estimate("gb200", **opts)
    assert hopper["fp8_weights"] == 2 * N_LIN and blackwell["fp8_weights"] == N_LIN


def test_the_default_is_said_without_a_gpu_and_a_note_with_blackwell():
    base = dict(precision="fp8", tp=1, dp=8, seq_length=SEQ)
    assert any(n.startswith("no --gpu: FP8 GEMMs read as TN-only") for n in job("llama3-8b", **base).notes)
    on_b200 = job("llama3-8b", gpu="b200", **base)
    assert any("keeps no FP8 transpose" in n for n in on_b200.notes)
    assert not any("TN-only" in n for n in on_b200.notes)
    # the job's Training is the GPU's to leave alone (a search of the job refuses no field)
    assert on_b200.training == job("llama3-8b", gpu="h100", **base).training
    assert not any("FP8" in n for n in job("llama3-8b", gpu="h100", **base).notes)
    assert not any("TN-only" in n for n in job("llama3-8b", **base, fp8_recipe="mxfp8").notes)


def test_the_search_prices_blackwell_fp8_caches_as_the_estimate():
    """One reading on both paths: a search row on a B200 carries the rowwise-only FP8 cache the
    estimate of the same layout counts (the template job is given the GPU where a term reads
    it, memsym.search.templates)."""
    from memsym.job import job
    from memsym.search import search
    from memsym.training.estimate import job_memory

    res = search("llama3-8b", "b200", 8, tp=[1], pp=[1], cp=[1], sharding=["distributed-optimizer"],
                 recompute=["none"], micro_batch_sizes=[1], precision="fp8",
                 fp8_recipe="tensorwise", sequence_parallel=[False])
    row = res.row(int(res.order()[0]))
    est = job_memory(job("llama3-8b", gpu="b200", world_size=8, precision="fp8",
                         fp8_recipe="tensorwise", sharding="distributed-optimizer"))
    assert row["memory"] == pytest.approx(float(est.bytes_total), rel=1e-12)   # 96,037,472,460.8
