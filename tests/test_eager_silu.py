"""The SiLU output an eager SwiGLU keeps: torchtitan's and transformers' own MLPs.

torchtitan's ``FeedForward.forward`` (``models/common/feed_forward.py:53-54`` at b5bcd76c6) and
transformers' ``LlamaMLP.forward`` (5.25.0 ``modeling_llama.py:163-165``) both run
``w2(silu(w1 x) * w3 x)``: silu keeps the gate projection's output, the product keeps SiLU's
output and the up projection's output, w2 keeps the product.  A fused SwiGLU (Megatron's
``bias_activation_fusion``) keeps only the fc1 output and the product, so these frameworks keep
one f-wide tensor more per layer.  Expectations are written out by hand, or measured on
transformers' own layer.
"""

from __future__ import annotations

import pytest
import sympy as sp

from memsym.job import Training, job
from memsym.model import preset
from memsym.symbols import a, b, c, d_h, f, g, h, s, t
from memsym.training.estimate import job_memory
from memsym.training.layer_model import layer_model_of

# Llama 3 8B: h 4096, 32 heads and 8 KV heads of 128, FFN 14336; s = 8192, b = 1, t = 1
TAU, H, A, G, DH, F = 8192, 4096, 32, 8, 128, 14336


def _layers(framework: str, **kw) -> int:
    extra = dict(sharding="fsdp") if framework == "torchtitan" else {}
    j = job("llama3-8b", framework=framework, t=1, p=1, d=8, micro_batch_size=1,
            global_batch_size=8, seq_length=TAU, num_layers=2, recompute="none",
            gpu="h100-80gb", dropout=False, **extra, **kw)
    return int(job_memory(j).activations()["layer_activations"])


def test_torchtitan_llama_layer_by_hand():
    """Two RMSNorm inputs and fp32 1/rms, the QKV input, q and k, v, the flash logsumexp, the
    output projection's input, w1's input, the gate and up outputs, w2's input (the product)
    and SiLU's output, all bf16 but the statistics."""
    per_layer = (2 * 2 * TAU * H + 2 * 4 * TAU + 2 * TAU * H + 2 * TAU * (A + G) * DH
                 + 2 * TAU * G * DH + 4 * A * TAU + 2 * TAU * H + 2 * TAU * H
                 + 2 * 2 * TAU * F + 2 * TAU * F + 2 * TAU * F)
    assert _layers("torchtitan") == 2 * per_layer


def test_megatron_fused_swiglu_keeps_no_silu_output():
    # the same layer under Megatron-LM's fused bias_swiglu (its default --bias-swiglu-fusion)
    assert _layers("torchtitan") - _layers("megatron") == 2 * 2 * TAU * F


def test_deepspeed_layer_is_transformers_measured_layer():
    """DeepSpeed trains transformers' model code: memsym's layer under it is the layer that
    tests/test_hf_activations.py measures (saved-tensor hooks on LlamaDecoderLayer in bf16),
    less the RoPE cos/sin tables the model computes once for every layer."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from memsym.measure import derive_saved_bytes
    from memsym.reference_layers import hf_layer

    make, inputs = hf_layer("llama", attention="sdpa")
    fit = derive_saved_bytes(
        make, inputs, ("s", "b", "a", "g", "d_h", "f"), degree=4,
        max_degree=dict(b=1, a=1, g=1, d_h=1, f=1),
        ranges=dict(s=(1, 6), b=(1, 3), a=(2, 8), g=(2, 4), d_h=(2, 4), f=(1, 6)),
        valid=lambda x: x["a"] % x["g"] == 0 and x["d_h"] % 2 == 0, extra=2, holdout=3)
    per_layer, *_ = layer_model_of(preset("llama3-8b"), False,
                                   Training(framework="deepspeed", seq_length=4096,
                                            dropout=False), "none")
    ours = sp.expand(per_layer(False).xreplace({t: 1, c: 1, h: a * d_h}))
    rope_tables = 2 * 2 * s * b * d_h
    assert sp.expand(fit.expr - ours - rope_tables) == 0, sp.expand(fit.expr - ours)
