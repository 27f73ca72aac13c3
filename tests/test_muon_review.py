"""Muon review fixes, checked against hand derivations from Emerging-Optimizers fd77292."""

from memsym.hardware import gpu
from memsym.timing.muon import newton_schulz_time

H100_PEAK, H100_HBM, LAUNCH = 989.4e12, 3.35e12, 4e-6


def _gemm(M, N, K, eta=0.5):
    """By hand: the slower of the FLOPs and the bf16 bytes, plus one launch."""
    return max(2 * M * N * K / (eta * H100_PEAK), 2 * (M * K + K * N + M * N) / H100_HBM) + LAUNCH


def test_distributed_orientation_follows_partition_dim():
    # newton_schulz_tp (muon_utils.py:336-341): partition_dim 0 -> transpose=True, so the
    # column-parallel K of Llama-3-70B (1024 x 8192, TP 8) iterates X^T: [8192, 1024/8],
    # Gram 8192 x 8192.
    m, n = 8192, 1024 // 8
    want = 5 * (_gemm(m, m, n) + _gemm(m, m, m) + _gemm(m, n, m))
    got = float(newton_schulz_time(1024, 8192, gpu("h100"), split=8, partition_dim=0,
                                   eta_gemm=0.5))
    assert abs(got - want) < 1e-12 * want + 1e-15
    # partition_dim 1 (row-parallel): no transpose, Gram rows x rows = 1024 x 1024
    m, n = 1024, 8192 // 8
    want = 5 * (_gemm(m, m, n) + _gemm(m, m, m) + _gemm(m, n, m))
    got = float(newton_schulz_time(1024, 8192, gpu("h100"), split=8, partition_dim=1,
                                   eta_gemm=0.5))
    assert abs(got - want) < 1e-9 * want


def test_muon_terms_refuse_bad_sizes():
    import pytest
    from memsym.errors import MemsymError
    from memsym.terms.muon import muon_scalar_moment, newton_schulz_flops, newton_schulz_peak
    for call in (lambda: muon_scalar_moment(10, 0), lambda: newton_schulz_flops(4, 6, -1),
                 lambda: newton_schulz_peak(-2, 3, tp_mode="blockwise"),
                 lambda: newton_schulz_peak(2, 3, tp_mode="sideways"),
                 lambda: newton_schulz_peak(2, 3, tp_mode="duplicated", partition_dim=2)):
        with pytest.raises(MemsymError):
            call()
    assert newton_schulz_flops(4, 6, steps=1) == 4 * 16 * 6 + 2 * 64


def test_output_gate_is_a_fourth_qkv_block():
    # Megatron _get_qkv_split_shapes (emerging_optimizers.py:150-160): [q, gate, k, v], per
    # group a/g d, d, d; whole layer: q and gate a d rows each, k and v g d rows each.
    from dataclasses import replace
    from memsym.model import preset
    from memsym.model.muon_matrices import muon_matrices
    x = replace(preset("llama2-7b"), attention_output_gate=True)
    got = [(n, r, c) for n, r, c, _, _ in muon_matrices(x, False)][:4]
    assert got == [("q", 32 * 128, 4096), ("gate", 32 * 128, 4096), ("k", 32 * 128, 4096),
                   ("v", 32 * 128, 4096)]
    (name, rows, cols, _, _), = [m for m in muon_matrices(x, False, split_qkv=False)
                                 if m[0] == "qkv"]
    assert rows == (2 * 32 + 2 * 32) * 128


def test_muon_options_that_change_the_step_are_noted_not_ignored():
    # Lion (Emerging-Optimizers scalar_optimizers/base.py:171, state_keys ("exp_avg",)) keeps
    # one moment where Adam keeps two, and --muon-no-split-qkv orthogonalizes linear_qkv whole
    # (megatron/core/optimizer/emerging_optimizers.py:407-437): neither is "without effect"
    from memsym.readers.megatron import read_megatron_args
    base = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
            "--seq-length", "128", "--max-position-embeddings", "128", "--micro-batch-size", "1",
            "--vocab-size", "1000", "--tokenizer-type", "NullTokenizer", "--optimizer", "muon"]
    job = read_megatron_args(base + ["--muon-scalar-optimizer", "lion", "--muon-no-split-qkv"])
    assert not {"--muon-scalar-optimizer", "--muon-no-split-qkv"} & set(job.ignored)
    said = " ".join(job.notes)
    assert "Lion" in said and "unsplit QKV" in said
    # Adam, the default, changes nothing
    assert "--muon-scalar-optimizer" in read_megatron_args(
        base + ["--muon-scalar-optimizer", "adam"]).ignored
