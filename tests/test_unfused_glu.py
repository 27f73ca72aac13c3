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
    est = training_memory("qwen3-8b", layout, training)
    return est.grouped()["activations"]


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
