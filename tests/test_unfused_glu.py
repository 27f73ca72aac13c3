"""Megatron's eager SwiGLU (``bias_activation_fusion`` off) keeps two more f-wide products (issue 30).

Megatron-core ``transformer/mlp.py:320-334`` at d98e8a64dd: without the fusion ``MLP.forward``
computes ``silu(x_glu) * (x_linear + glu_linear_offset)``.  Autograd keeps silu's input (a view
of the fc1 output, already counted), and the product's two operands: the 16-bit silu output
(s b f / t elements) and ``x_linear + 0.0`` (a new tensor of s b f / t elements).  Every
expected value below is that count written out by hand.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.terms.activations import unfused_glu_products
from memsym.training import Layout, Training, training_memory

GB = 10**9


def test_two_products_per_dense_layer_by_hand():
    # two bf16 tensors of s x f/t elements each: 2 tensors x 2 bytes x s b f / t
    s, b, f, t = 8192, 1, 12288, 2
    per_layer = unfused_glu_products(False).evaluate(s=s, b=b, c=1, f=f, t=t)
    assert per_layer == 2 * 2 * s * b * f // t
    assert unfused_glu_products(True).expr == 0


def _activations(fused: bool, recompute: str = "none") -> float:
    layout = Layout(t=2, d=4, sequence_parallel=True)
    training = Training(seq_length=8192, micro_batch_size=1, global_batch_size=8,
                        finetune="lora", lora_rank=32, recompute=recompute,
                        bias_activation_fusion=fused, metric="allocated")
    grouped = training_memory("qwen3-8b", layout, training).grouped()
    return grouped["activations"] + grouped.get("transients", 0)    # held at the peak


def test_qwen3_8b_lora_row_gains_the_eager_gate():
    # seed 001's Qwen3-8B LoRA run (TP 2, s 8192, mbs 1): 36 dense layers x 2 x 2 x 8192 x
    # 12288 / 2 bytes = 7.248 GB more held at the forward's end
    delta = _activations(False) - _activations(True)
    assert delta == 36 * 2 * 2 * 8192 * 12288 // 2
    assert round(float(delta) / GB, 2) == 7.25


def test_full_recompute_keeps_no_gate_products():
    # a fully recomputed layer keeps only its input: no SwiGLU products either way
    assert _activations(False, "full") == _activations(True, "full")


def test_the_flag_must_be_a_bool():
    with pytest.raises(InvalidValueError):
        training_memory("qwen3-8b", Layout(t=2, d=4, sequence_parallel=True),
                        Training(seq_length=8192, bias_activation_fusion="no"))


def test_experts_keep_three_products_by_hand():
    # Megatron-core moe/experts.py:995-1016: the eager glu keeps silu(x_glu) and x_linear + 0.0,
    # and ``* permuted_probs`` keeps the glu output: 3 bf16 tensors of R x f_e / t_e elements.
    # Qwen3-30B-A3B (48 MoE layers, top-8, f_e = 768) at TP 4, ETP 1, s = 2048, b = 1: a rank
    # receives R = 8 x 2048 x 1 / 4 = 4096 routed copies (balanced, capacity factor 1)
    R, f_e = 8 * 2048 // 4, 768
    per_layer = unfused_glu_products(False, moe=True).evaluate(
        s=2048, b=1, c=1, c_f=1, k=8, t=4, t_e=1, f_e=f_e)
    assert per_layer == 3 * 2 * R * f_e
    layout = Layout(t=4, d=2, e=4, t_e=1, sequence_parallel=True)

    def acts(fused):
        tr = Training(seq_length=2048, micro_batch_size=1, global_batch_size=32, finetune="lora",
                      lora_rank=8, lora_targets=("q", "k", "v", "o"),
                      bias_activation_fusion=fused, metric="allocated")
        return training_memory("qwen3-30b-a3b", layout, tr).grouped()["activations"]

    delta = acts(False) - acts(True)
    assert delta == 48 * 3 * 2 * R * f_e
    assert round(float(delta) / GB, 2) == 0.91
