"""Activations of a job trained in fp32 (no autocast): every tensor the model computes is 4
bytes an element, the 1-byte dropout masks and the fp32 statistics unchanged.

tests/test_hf_activations.py measures transformers' Llama and GPT-2 layers built in float32
against ``layer_activations(width=4)``; here the job-level sums are derived by hand for
Llama 3 8B (h 4096, 32 heads and 8 KV heads of 128, FFN 14336, vocabulary 128256) under
Megatron at s = 4096, b = 1, t = p = d = 1, flash attention, no dropout.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.terms.activations import layer_activations, output_activations
from memsym.terms.mamba import hybrid_layer_activations
from memsym.training.estimate import job_memory

TAU, H, A, G, DH, F, V = 4096, 4096, 32, 8, 128, 14336, 128256


def _megatron(precision: str):
    return job("llama3-8b", framework="megatron", precision=precision, t=1, p=1, d=1,
               micro_batch_size=1, seq_length=TAU, num_layers=2, bias_activation_fusion=False,
               gpu="h100-80gb")


def test_megatron_llama_layer_in_fp32_by_hand():
    """Each layer keeps, in fp32: two norm inputs, the QKV input, q and k (a + g heads), v (g),
    the output projection's input, fc1's input, gate and up, fc2's input, and the eager
    SwiGLU's silu output and offset product (Megatron's unfused glu); the RMSNorms' fp32 1/rms
    (4 bytes a token each) and the flash logsumexp (4 bytes a head and token) as in bf16."""
    per_layer = (2 * 4 * TAU * H + 2 * 4 * TAU + 4 * TAU * H + 4 * TAU * (A + G) * DH
                 + 4 * TAU * G * DH + 4 * A * TAU + 4 * TAU * H + 4 * TAU * H
                 + 2 * 4 * TAU * F + 4 * TAU * F + 2 * 4 * TAU * F)
    got = job_memory(_megatron("fp32")).activations()
    assert got["layer_activations"] == 2 * per_layer == 3_222_339_584
    # the final norm's input and statistics, the output layer's input, the fp32 softmax
    assert got["output_activations"] == 4 * TAU * H + 4 * TAU + 4 * TAU * H + 4 * TAU * V
    # against bf16: twice each 16-bit tensor, the statistics and logsumexp once
    bf16 = job_memory(_megatron("bf16")).activations()["layer_activations"]
    assert got["layer_activations"] == 2 * bf16 - 2 * (2 * 4 * TAU + 4 * A * TAU)


def test_output_activations_in_fp32():
    """transformers' eager final LlamaRMSNorm in fp32: ``to(float32)`` returns the input, which
    pow and mul keep, and ``weight *`` keeps the fp32 normalised tensor: 8 bytes a token and
    feature, where bf16 keeps the fp32 copy and the bf16 product, 6."""
    values = dict(s=TAU, b=1, c=1, t=1, h=H, V=V)
    for width, norm_bytes in ((2, 6), (4, 8)):
        out = output_activations(norm="rmsnorm", fp32_norm="transformers", width=width)
        assert out["final_norm_input"].evaluate(**values) == norm_bytes * TAU * H
        assert out["logits"].evaluate(**values) == 4 * TAU * V          # fp32 either way


def test_a_hybrids_mixer_in_fp32_is_refused_not_undercounted():
    with pytest.raises(InvalidValueError, match="fp32 activations of a Mamba mixer"):
        hybrid_layer_activations(("mamba", None), width=4)
    with pytest.raises(InvalidValueError, match="2 .16-bit. or 4 .fp32."):
        layer_activations(width=3)
    # the attention part of a hybrid is the transformer layer's: it widens
    att = hybrid_layer_activations(("attention", None), gated=False, flash=True, width=4)
    assert att.expr != hybrid_layer_activations(("attention", None), gated=False,
                                                flash=True).expr


def test_the_layer_models_add_ons_at_the_fp32_width():
    """Each add-on's tensors in fp32, by hand at s = 4096, b = 1, t = 1 (Llama 3 8B sizes):
    Megatron's eager glu keeps two f-wide tensors (8 bytes a token and feature), the
    checkpointed QKV storage (a + g) d_h elements at 4 bytes, and an FP8-stored SwiGLU input
    (2f wide) saves 3 bytes an element where 16-bit saves 1."""
    from memsym.terms.activations import fp8_glu_input, unfused_glu_products
    from memsym.terms.qkv_storage import checkpointed_qkv_storage

    one = dict(s=TAU, b=1, c=1, t=1, f=F, a=A, g=G, d_h=DH)
    assert unfused_glu_products(False, width=4).evaluate(**one) == 2 * 4 * TAU * F
    assert checkpointed_qkv_storage(width=4).evaluate(**one) == 4 * TAU * (A + G) * DH
    assert fp8_glu_input(width=4).evaluate(**one) == -3 * TAU * 2 * F
    assert fp8_glu_input().evaluate(**one) == -1 * TAU * 2 * F
