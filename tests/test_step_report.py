"""Estimate's step-time block: memsym.timing's predicted step (exact schedule) and the MFU on
GEMM-count FLOPs (issue 17); the 6N convention kept as a named option."""

import json

import pytest

from memsym.cli import main
from memsym.model import preset
from memsym.timing.step import step_time
from memsym.training import Layout, Training

ARGS = ["estimate", "llama3-8b", "--gpu", "h100-80gb", "--tp", "2", "--pp", "2", "--dp", "2",
        "--seq-length", "4096", "--global-batch-size", "32", "--sequence-parallel",
        "--use-flash-attn", "--json"]


def _report(capsys, extra=()):
    assert main(ARGS + list(extra)) == 0
    return json.loads(capsys.readouterr().out)


def _layout_training(rep):
    lay = Layout(t=2, p=2, d=2, sequence_parallel=True)
    tr = Training(seq_length=4096, micro_batch_size=1, global_batch_size=32,
                  flash_attention=True, dropout=rep["training"]["dropout"],
                  recompute=rep["training"]["recompute"])
    return lay, tr


def test_estimate_step_time_is_the_timing_model(capsys):
    rep = _report(capsys)
    lay, tr = _layout_training(rep)
    one = step_time(preset("llama3-8b"), lay, tr, "h100-80gb")
    assert rep["step_time_s"] == pytest.approx(one.total, rel=1e-9)
    assert rep["assumptions"]["efficiency"] is None          # predicted, not an assumed eta
    assert rep["assumptions"]["mfu_flops"] == "gemm"
    # 1F1B with p = 2, m = 32/2 = 16 micro-batches: (p - 1)/m
    assert rep["bubble"] == pytest.approx(1 / 16, rel=1e-12)
    # the explicit override: every GEMM at the given fraction of peak
    slow = _report(capsys, ["--efficiency", "0.3"])
    one = step_time(preset("llama3-8b"), lay, tr, "h100-80gb", eta_gemm=0.3)
    assert slow["step_time_s"] == pytest.approx(one.total, rel=1e-9)
    assert slow["step_time_s"] > rep["step_time_s"]


def test_estimate_mfu_counts_gemm_flops_by_hand(capsys):
    # Llama 3 8B (arXiv:2407.21783 Table 3): 32 layers, h 4096, 8 KV heads of 128, SwiGLU
    # ffn 14336, vocabulary 128256.  Forward FLOPs per token: 2 x every matmul weight
    # (q, o: h^2; k, v: h x 1024; gate, up, down: h x 14336) + causal attention (QK^T and AV
    # over half the s x s scores: 2 s h per layer) + the logits 2 h V.
    L, h, kv, f, V, s, B, G = 32, 4096, 1024, 14336, 128256, 4096, 32, 8
    per_layer = 2 * (2 * h * h + 2 * h * kv + 3 * h * f) + 2 * s * h
    fwd = L * per_layer + 2 * h * V
    rep = _report(capsys)
    assert rep["flops"]["model_gemm"] == pytest.approx(3 * fwd * B * s, rel=1e-12)
    assert rep["mfu"] == pytest.approx(3 * fwd * B * s / (G * 989.4e12 * rep["step_time_s"]),
                                       rel=1e-9)


def test_six_n_convention_is_a_named_option():
    from memsym.model import active_parameter_count
    from memsym.timing.report import step_report
    from memsym.training import arch_values

    arch = preset("llama3-8b")
    lay = Layout(t=2, d=4, sequence_parallel=True)
    tr = Training(seq_length=4096, global_batch_size=32, flash_attention=True, dropout=False)
    values = {str(k): int(v) for k, v in arch_values(arch, 2).items()}
    values.update({"N": int(active_parameter_count(arch)), "s": 4096, "b": 1, "m": 8, "t": 2,
                   "d": 4})
    kw = dict(gpu="h100-80gb", sequence_parallel=True, formula="6n", arch=arch, layout=lay,
              training=tr)
    gemm = step_report(values, **kw)
    six = step_report(values, mfu_flops="6n", **kw)
    assert six["step_time_s"] == gemm["step_time_s"]
    n = active_parameter_count(arch)
    assert six["flops"]["model"] == pytest.approx(6 * n * 32 * 4096, rel=1e-12)
    assert six["mfu"] == pytest.approx(6 * n * 32 * 4096 / (8 * 989.4e12 * six["step_time_s"]),
                                       rel=1e-9)
    from memsym.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="unknown MFU FLOP count"):
        step_report(values, mfu_flops="72blsh2", **kw)
