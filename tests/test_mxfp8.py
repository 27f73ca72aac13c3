"""MXFP8 (Megatron ``--fp8-recipe mxfp8``, Bridge ``bf16_with_mxfp8_mixed``) as memsym counts
and prices it (issue 31, memory side issue 30).

The expected values are worked out here by hand from Transformer Engine's MXFP8 layout at
d0067d0da6 (pytorch/tensor/mxfp8_tensor.py, ``MXFP8Quantizer.inner_tensor_specs`` and
``get_scale_shape``; pytorch/constants.py ``MXFP8_BLOCK_SCALING_SIZE = 32``): an MXFP8 tensor
of shape [M, K] holds ``rowwise_data`` [M, K] uint8 with ``rowwise_scale_inv`` [M, K/32]
uint8, and ``columnwise_data`` [M, K] uint8 with ``columnwise_scale_inv`` [M/32, K] uint8
(the scale tensors' [128, 4] / [4, 128] padding is neglected, as memsym does; the shapes
below are multiples of it).  A weight keeps both usages (linear.py: the weight quantizer's
columnwise usage is set whenever the input needs a gradient); a saved GEMM input keeps only
the columnwise one (linear.py: ``update_usage(rowwise_usage=False, columnwise_usage=True)``).
"""

from __future__ import annotations

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError, UnknownNameError
from memsym.job import job
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.timing.efficiency import GEMM_CEILING, LAUNCH_OVERHEAD, gemm_time
from memsym.timing.job_step import job_step_time
from memsym.timing.moe import grouped_quantize_bytes
from memsym.training.estimate import job_memory

from tiny_megatron import tiny_megatron_states

#: Llama 3 8B (hidden 4096, 32 heads of 128, 8 KV groups, FFN 14336, 32 layers).
H, KV, F, L = 4096, 8 * 128, 14336, 32


def _mx_bytes(rows: int, cols: int, *, rowwise=True, columnwise=True) -> int:
    """Bytes of one MXFP8 tensor [rows, cols], TE's layout, by hand."""
    out = 0
    if rowwise:
        out += rows * cols + rows * (cols // 32)      # data + one scale per 32 along a row
    if columnwise:
        out += rows * cols + (rows // 32) * cols      # data + one scale per 32 down a column
    return out


def _llama8b(recipe, **kw):
    return job("llama3-8b", tp=1, dp=8, seq_length=8192, micro_batch_size=1, precision="fp8",
               fp8_recipe=recipe, global_batch_size=128, **kw)


def test_the_weight_copies_are_te_mxfp8_tensors():
    # one layer's TE linear weights [out, in]: QKV, proj, fc1 (gate + up), fc2
    shapes = [(H + 2 * KV, H), (H, H), (2 * F, H), (H, F)]
    per_layer = sum(_mx_bytes(o, i) for o, i in shapes)
    assert per_layer == 449_839_104          # 218,103,808 weights x (2 + 2/32)
    fp8 = job_memory(_llama8b("mxfp8")).breakdown()["fp8_weights"]
    # the output layer is Megatron's ColumnParallelLinear, not a TE module: no FP8 copy
    assert int(fp8) == L * per_layer == 14_394_851_328
    # per-tensor scaling: rowwise + transpose, 2 bytes a weight
    assert int(job_memory(_llama8b(None)).breakdown()["fp8_weights"]) == L * 2 * 218_103_808


def test_fp8_param_gather_keeps_both_mxfp8_usages():
    # Bridge's bf16_with_mxfp8_mixed: fp8_param_gather with the MXFP8 parameter (rowwise
    # and columnwise data with their scales) in place of the bf16 linear weights
    got = job_memory(_llama8b("mxfp8", fp8_param_gather=True)).breakdown()["fp8_weights"]
    assert int(got) == L * 449_839_104
    tensorwise = job_memory(_llama8b("tensorwise", fp8_param_gather=True)).breakdown()
    # 1 byte and, with no GPU given (TN-only, as Hopper), its transpose made after each gather
    assert int(tensorwise["fp8_weights"]) == L * 2 * 218_103_808


def test_saved_gemm_inputs_carry_their_columnwise_scales():
    # each layer saves the inputs of QKV and fc1 (norm outputs), proj and fc2, [tokens, K]:
    # MXFP8 keeps the columnwise copy only, with one scale per 32 tokens of a column
    tokens = 8192
    saved = [H, H, H, F]
    mx = sum(_mx_bytes(tokens, k, rowwise=False) for k in saved)
    per_tensor = sum(tokens * k for k in saved)
    act = {r: job_memory(_llama8b(r)).activations()["layer_activations"] for r in (None, "mxfp8")}
    assert int(act["mxfp8"] - act[None]) == L * (mx - per_tensor) == 218_103_808


def test_recipe_is_refused_without_fp8_and_on_hopper():
    with pytest.raises(InvalidValueError, match="needs precision fp8"):
        job("llama3-8b", precision="bf16", fp8_recipe="mxfp8")
    with pytest.raises(UnknownNameError, match="unknown FP8 recipe"):
        job("llama3-8b", precision="fp8", fp8_recipe="nvfp4")
    with pytest.raises(InvalidValueError, match="compute capability 10.0"):
        job_step_time(_llama8b("mxfp8", gpu="h100"))


def test_mxfp8_differs_from_per_tensor_fp8_by_its_casts_and_its_ceiling(monkeypatch):
    # MXFP8 GEMMs run at the FP8 peak with a ceiling of their own, fixed on the FP8-MX value
    # of the row the fp8 one is fixed on (Megatron-Bridge 25.11, DGX-B200 Llama 3 8B:
    # 30624 tokens/s/GPU FP8-CS, 29521 FP8-MX); a compute-bound GEMM's math time scales by
    # their ratio
    big = [gemm_time(8192, 8192, 8192, "b200", p) - LAUNCH_OVERHEAD for p in ("fp8", "mxfp8")]
    assert big[1] / big[0] == pytest.approx(GEMM_CEILING[("blackwell", "fp8")]
                                            / GEMM_CEILING[("blackwell", "mxfp8")], rel=1e-12)
    assert GEMM_CEILING[("blackwell", "mxfp8")] < GEMM_CEILING[("blackwell", "fp8")]
    # at one ceiling, dense, no TP: the only difference is what Transformer Engine's casts write
    # (memsym.timing.quantize): MXFP8 two copies, each with a scale byte per 32 elements,
    # 2 x (1 + 1/32); per-tensor FP8 (the default, delayed) on the B200, whose FP8 GEMMs take
    # non-TN layouts, the 1-byte row-wise copy alone (TE d0067d0da6 csrc/quantizer.cpp:375,
    # no transpose): 1 + 1/16 bytes more an element, over proj's and fc2's inputs
    # (4096 + 14336 per token) and the four output gradients (6144 + 4096 + 28672 + 4096),
    # 8192 tokens, 32 layers x 16 micro-batches, at the B200's 8 TB/s; and the norm outputs
    # (qkv's and fc1's inputs, 4096 + 4096 per token), which delayed scaling's norm writes in
    # FP8 itself and MXFP8's casts from bf16 (TE d0067d0da6 csrc/extensions/normalization.cpp:
    # 106-113), 2 + 2 (1 + 1/32) bytes an element.  The MXFP8 casts run at the rate Transformer
    # Engine's MXFP8 cast kernel is timed at on a B200 (ROCm/TransformerEngine PR #598, CAST_ONLY,
    # "B200 (us)", BF16 both 8192x8192: 52.34 us for (2 + 2 + 2/32) x 8192^2 bytes), the
    # per-tensor casts (another kernel) at the 8 TB/s datasheet rate
    monkeypatch.setitem(GEMM_CEILING, ("blackwell", "mxfp8"), GEMM_CEILING[("blackwell", "fp8")])
    a, b = (job_step_time(_llama8b(r, gpu="b200")).total for r in (None, "mxfp8"))
    cast = 8192 * (4096 + 14336 + 6144 + 4096 + 28672 + 4096)
    delayed = (2 + 1) * cast
    mxfp8 = (2 + 2 * (1 + 1 / 32)) * (cast + 8192 * (4096 + 4096))
    mxfp8_rate = (2 + 2 + 2 / 32) * 8192 ** 2 / 52.34e-6
    assert b - a == pytest.approx(32 * 16 * (mxfp8 / mxfp8_rate - delayed / 8e12), rel=1e-9)


def test_the_grouped_cast_writes_both_copies_and_their_scales():
    rows, k = 4096, 2048
    bf16_read, fp8_written = 2 * rows * k, 2 * rows * k
    scales = rows * (k // 32) + (rows // 32) * k
    assert grouped_quantize_bytes(rows, k, "mxfp8") == bf16_read + fp8_written + scales


def test_readers_set_the_recipe():
    reading = read_bridge_recipe("llama3_70b_pretrain_64gpu_gb300_fp8mx_config")
    _, opts, notes = bridge_job_options(reading)
    assert opts["precision"] == "fp8" and opts["fp8_recipe"] == "mxfp8"
    assert opts["fp8_param_gather"] is True
    assert not [n for n in notes if "per-tensor" in n]
    cs = bridge_job_options(read_bridge_recipe("llama3_70b_pretrain_64gpu_h100_fp8cs_config"))[1]
    # bf16_with_fp8_current_scaling_mixed sets fp8_recipe "tensorwise"
    # (Megatron-Bridge 067f987df0 training/mixed_precision.py:298)
    assert cs["precision"] == "fp8" and cs["fp8_recipe"] == "tensorwise"
    assert tiny_megatron_states("--fp8-format e4m3 --fp8-recipe mxfp8").fp8_recipe == "mxfp8"


def test_cli_fp8_recipe(capsys):
    base = ["estimate", "llama3-8b", "--dp", "8", "--seq-length", "8192", "--precision", "fp8"]
    assert main(base + ["--fp8-recipe", "mxfp8"]) == 0
    assert "fp8_weights        14,394,851,328" in capsys.readouterr().out
    assert main(["estimate", "llama3-8b", "--fp8-recipe", "mxfp8"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "needs precision fp8" in err


def test_search_carries_the_recipe(capsys):
    from memsym.search import make_space

    space = make_space("llama3-8b", "b200", precision="fp8", fp8_recipe="mxfp8",
                       global_batch_size=64, seq_length=4096)
    assert space.training().states.fp8_recipe == "mxfp8"
    argv = ["search", "llama3-8b", "--gpus", "8", "--seq-length", "4096", "--global-batch-size",
            "64", "--precision", "fp8", "--fp8-recipe", "mxfp8", "--gpu", "h100", "--sharding",
            "distributed-optimizer", "--tp", "1", "--pp", "1"]
    assert main(argv) == 2
    assert "compute capability 10.0" in capsys.readouterr().err


# --- NVFP4 (precision fp4) ------------------------------------------------------------------
# By hand from TE's NVFP4 layout (pytorch/tensor/nvfp4_tensor.py, NVFP4Quantizer at d0067d0da6:
# ``convert_shape_for_fp4`` packs two 4-bit values a byte, ``get_scale_shape`` one E4M3 scale
# byte per 16 elements along the usage's direction; the per-tensor fp32 amax and the scale
# padding neglected).


def _nv_bytes(rows: int, cols: int, *, rowwise=True, columnwise=True) -> int:
    out = 0
    if rowwise:
        out += rows * cols // 2 + rows * (cols // 16)
    if columnwise:
        out += rows * cols // 2 + (rows // 16) * cols
    return out


def _llama8b_fp4(**kw):
    return job("llama3-8b", tp=1, dp=8, seq_length=8192, micro_batch_size=1, precision="fp4",
               global_batch_size=128, **kw)


def test_nvfp4_weight_copies_and_saved_inputs():
    shapes = [(H + 2 * KV, H), (H, H), (2 * F, H), (H, F)]
    per_layer = sum(_nv_bytes(o, i) for o, i in shapes)
    assert per_layer == 245_366_784                      # 218,103,808 weights x 9/8
    est = job_memory(_llama8b_fp4())
    assert int(est.breakdown()["fp8_weights"]) == L * per_layer
    assert int(est.breakdown()["weights"]) == 2 * 8_030_261_248   # the bf16 weights stay
    tokens, saved = 8192, [H, H, H, F]
    nv = sum(_nv_bytes(tokens, k, rowwise=False) for k in saved)
    per_tensor = sum(tokens * k for k in saved)
    fp8 = job_memory(_llama8b(None)).activations()["layer_activations"]
    assert int(fp8 - est.activations()["layer_activations"]) == L * (per_tensor - nv)


def test_nvfp4_runs_at_the_fp4_peak_where_the_vendor_prints_one():
    # GB200 NVL72 and HGX B200 print one (1,440 PFLOPS sparse / 72 GPUs; 18 PFLOPS sparse a
    # GPU), the H100 none: 9 PFLOPS dense on the B200 is 10/9 of the GB200's time for the
    # same FP4 math
    assert job_step_time(_llama8b_fp4(gpu="gb200")).total > 0
    assert job_step_time(_llama8b_fp4(gpu="b200")).total > 0
    with pytest.raises(InvalidValueError, match="no fp4 tensor-core peak"):
        job_step_time(_llama8b_fp4(gpu="h100"))


def test_readers_and_cli_read_nvfp4(capsys):
    _, opts, notes = bridge_job_options(
        read_bridge_recipe("llama3_70b_pretrain_64gpu_gb300_nvfp4_config"))
    assert opts["precision"] == "fp4" and "fp8_param_gather" not in opts
    assert opts["fp4_param_gather"] is True     # bf16_with_nvfp4_mixed: NVFP4 parameters
    assert tiny_megatron_states("--fp4-format e2m1").precision == "fp4"
    assert main(["estimate", "llama3-8b", "--dp", "8", "--seq-length", "8192",
                 "--precision", "fp4"]) == 0
    assert "fp8_weights         7,851,737,088" in capsys.readouterr().out
