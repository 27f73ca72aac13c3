"""Saved activations of Hugging Face transformers' own decoder layers against memsym's formula.

Each test builds transformers' real layer class (``LlamaDecoderLayer``, ``Qwen2DecoderLayer``,
``Qwen3DecoderLayer``, ``GPT2Block``) from a small config (no download; through
``memsym.reference_layers.hf_layer``, which calls it as the model does), runs its forward in
bf16 on the CPU under ``torch.autograd.graph.saved_tensors_hooks`` (``memsym.measure``), fits
the exact per-layer polynomial over many shapes (verified on held-back shapes), and proves

    measured = memsym's layer_activations(architecture flags) + the named differences

where every difference is derived by hand below from what transformers' code saves.
memsym's flags are the ones a framework running transformers' code (DeepSpeed) sets:
``hf_norms`` counts each LlamaRMSNorm's fp32 copy of its input (``memsym.terms.hf_norms``).  Bytes
per layer and micro-batch; t = c = 1; h = a d_h.
"""

from __future__ import annotations

import pytest
import sympy as sp

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from memsym.measure import derive_saved_bytes  # noqa: E402
from memsym.reference_layers import hf_layer  # noqa: E402
from memsym.symbols import a, b, c, d_h, f, g, h, s, t  # noqa: E402
from memsym.terms.activations import layer_activations  # noqa: E402

H = a * d_h
LLAMA_SYMBOLS = ("s", "b", "a", "g", "d_h", "f")
LLAMA_FIT = dict(degree=4, max_degree=dict(b=1, a=1, g=1, d_h=1, f=1),
                 ranges=dict(s=(1, 6), b=(1, 3), a=(2, 8), g=(2, 4), d_h=(2, 4), f=(1, 6)),
                 # GQA needs g | a; RoPE's rotate_half needs an even head dimension
                 valid=lambda x: x["a"] % x["g"] == 0 and x["d_h"] % 2 == 0,
                 extra=2, holdout=3)  # fewer extra shapes: the suite budget is < 30 s


def _memsym(**flags) -> sp.Expr:
    """memsym's per-layer formula at t = c = 1 in the fit's symbols."""
    expr = layer_activations(**flags).expr
    return sp.expand(expr.xreplace({t: sp.Integer(1), c: sp.Integer(1), h: H}))


# --- memsym's fp32 copies, derived by hand (modeling_llama.py lines 62-67) -----------------
# LlamaRMSNorm upcasts its input to fp32 and keeps that copy (4sbh, saved by pow and mul:
# one storage) and the bf16 cast multiplied by the weight (2sbh), where a fused norm keeps the
# bf16 input (2sbh); both keep the fp32 1/rms per token (4sb).  Per norm: +4sbh, two norms.
RMSNORM_FP32 = 2 * 4 * s * b * H


def test_hf_norms_counts_llama_rmsnorm_fp32_copies():
    plain = layer_activations(**LLAMA_FLAGS).expr
    hf = layer_activations(**LLAMA_FLAGS, hf_norms=True).expr
    assert sp.expand((hf - plain).xreplace({t: 1, c: 1, h: H}) - RMSNORM_FP32) == 0
    # nn.LayerNorm (native_layer_norm) keeps the bf16 input and fp32 mean and rstd: no copy
    ln = dict(LLAMA_FLAGS, norm="layernorm")
    assert layer_activations(**ln, hf_norms=True).expr == layer_activations(**ln).expr
    # Qwen3's per-head q_norm and k_norm: 4 bytes a head element more, a + g heads
    qk = dict(LLAMA_FLAGS, qk_norm=True)
    extra = layer_activations(**qk, hf_norms=True).expr - layer_activations(**qk).expr
    assert sp.expand(extra.xreplace({t: 1, c: 1, h: H})
                     - RMSNORM_FP32 - 4 * s * b * (a + g) * d_h) == 0


# --- differences, each derived from transformers' code (modeling_llama.py & co.) -------------
# Unfused SwiGLU: down_proj(act(gate) * up) keeps SiLU's output for the product's backward
# (2sbf); Megatron's fused bias_swiglu keeps only the fc1 output and recomputes it.
SILU_OUTPUT = 2 * s * b * f
# apply_rotary_pos_emb multiplies by cos and sin (bf16, [b, s, d_h]), which autograd keeps:
# 4 s b d_h.  The tables are one storage shared by every layer of a model (computed once in
# the model's forward), so they belong to the model, not to each layer; memsym leaves them out.
ROPE_TABLES = 2 * 2 * s * b * d_h
# Eager attention: repeat_kv materialises K and V at all a heads (2sbh each instead of
# 2 s b g d_h each: GQA saves nothing in eager mode) ...
REPEAT_KV = 2 * (2 * s * b * H - 2 * s * b * g * d_h)
# ... and the softmax runs in fp32 (4 a s^2 b kept) and is cast to bf16 for the matmul with V
# (2 a s^2 b kept), where memsym counts one bf16 softmax output (2 a s^2 b).
SOFTMAX_FP32 = 4 * a * s**2 * b

LLAMA_FLAGS = dict(gated=True, norm="rmsnorm", dropout=False, sequence_parallel=False)


@pytest.mark.parametrize("family, attention, differences", [
    ("llama", "sdpa", SILU_OUTPUT + ROPE_TABLES),
    ("llama", "eager", SILU_OUTPUT + ROPE_TABLES + REPEAT_KV + SOFTMAX_FP32),
    # Qwen2 is Llama with biases on q, k and v: biases save nothing more
    ("qwen2", "sdpa", SILU_OUTPUT + ROPE_TABLES),
    # Qwen3's per-head q_norm and k_norm (memsym's qk_norm, each with its fp32 copy)
    ("qwen3", "sdpa", SILU_OUTPUT + ROPE_TABLES),
])
def test_rope_decoder_layer_is_memsym_plus_named_differences(family, attention, differences):
    make, inputs = hf_layer(family, attention=attention)
    fit = derive_saved_bytes(make, inputs, LLAMA_SYMBOLS, **LLAMA_FIT)
    # SDPA on the CPU runs the flash kernel (Q, K, V at g heads, output, fp32 logsumexp 4asb):
    # memsym's flash=True terms; eager keeps the s^2 softmax: flash=False
    ours = _memsym(flash=attention == "sdpa", hf_norms=True, qk_norm=family == "qwen3",
                   **LLAMA_FLAGS)
    assert sp.expand(fit.expr - ours - differences) == 0, sp.factor_terms(
        sp.expand(fit.expr - ours - differences))
    if attention == "sdpa":
        assert sp.Poly(fit.expr, s).degree() == 1          # no s^2 tensor at all


def test_gpt2_block_with_dropout_is_memsym_plus_named_differences():
    make, inputs = hf_layer("gpt2", attention="eager", dropout=0.1)
    fit = derive_saved_bytes(make, inputs, ("s", "b", "a", "d_h"), degree=4,
                             max_degree=dict(b=1, a=1, d_h=1),
                             ranges=dict(s=(1, 6), b=(1, 3), a=(1, 4), d_h=(1, 4)))
    # memsym: Korthikanti's GPT layer (LayerNorm, 4h GeLU MLP, dropout, softmax attention)
    ours = _memsym(gated=False, flash=False, norm="layernorm", dropout=True, hf_norms=True,
                   sequence_parallel=False).xreplace({g: a, f: 4 * H})
    # F.dropout on the CPU keeps a bf16 scaled-noise tensor (2 bytes per element) where the
    # fused CUDA kernel keeps a 1-byte mask: +1 byte per element of the attention
    # probabilities (a s^2 b) and of the two residual dropouts (2 sbh)
    cpu_dropout = a * s**2 * b + 2 * s * b * H
    # native_layer_norm on the CPU keeps mean and rstd in the input dtype (bf16: 2 + 2 bytes
    # per token) where CUDA and memsym keep fp32 (4 + 4): -4sb per LayerNorm, two of them
    cpu_layernorm = -2 * 4 * s * b
    # GPT-2's gelu_new is the unfused tanh formula 0.5 x (1 + tanh(√(2/π)(x + 0.044715 x³))):
    # autograd keeps tanh's output, 0.5 x and (1 + tanh(...)) besides x (4h wide, bf16 each):
    # 3 x 8sbh more than memsym's GeLU input (a transformers job adds them:
    # memsym.terms.eager_glu.eager_tanh_gelu, measured in tests/test_autocast_gpt2.py)
    tanh_gelu = 3 * 2 * s * b * 4 * H
    differences = cpu_dropout + cpu_layernorm + tanh_gelu
    assert sp.expand(fit.expr - ours - differences) == 0, sp.factor_terms(
        sp.expand(fit.expr - ours - differences))
    # and the paper's Eq. 1 is inside it: with the CPU quirks and gelu_new removed and the
    # norm statistics dropped, the measurement is sbh(34 + 5as/h)
    eq1 = s * b * H * (34 + 5 * a * s / H)
    assert sp.expand(fit.expr - differences - 2 * 8 * s * b - eq1) == 0


# --- fp32 training (no autocast): the same layers built in float32 --------------------------
# Every tensor the layer computes is fp32: memsym's width=4 doubles each 16-bit term, keeps the
# fp32 statistics and the 1-byte masks.  The named differences are the same tensors at 4 bytes
# an element, and two of them vanish: LlamaRMSNorm's ``to(torch.float32)`` returns its input,
# which pow and mul then keep (4 bytes, the copy memsym's hf_norms term already counts at 4),
# and eager attention's fp32 softmax is the softmax memsym counts (no bf16 cast beside it).
def test_llama_layer_in_fp32_is_memsym_at_width_4_plus_named_differences():
    make, inputs = hf_layer("llama", attention="eager", dtype="float32")
    fit = derive_saved_bytes(make, inputs, LLAMA_SYMBOLS, **LLAMA_FIT)
    ours = _memsym(flash=False, hf_norms=True, width=4, **LLAMA_FLAGS)
    # SiLU output, the cos and sin tables, repeat_kv's K and V at all heads: fp32 each
    differences = 2 * SILU_OUTPUT + 2 * ROPE_TABLES + 2 * REPEAT_KV
    assert sp.expand(fit.expr - ours - differences) == 0, sp.factor_terms(
        sp.expand(fit.expr - ours - differences))
    # and it is not the 16-bit count: the layer keeps about twice the bf16 bytes
    assert sp.expand(ours - _memsym(flash=False, hf_norms=True, **LLAMA_FLAGS)) != 0


def test_gpt2_block_in_fp32_keeps_twice_eq1_but_its_masks_and_statistics():
    make, inputs = hf_layer("gpt2", attention="eager", dropout=0.1, dtype="float32")
    fit = derive_saved_bytes(make, inputs, ("s", "b", "a", "d_h"), degree=4,
                             max_degree=dict(b=1, a=1, d_h=1),
                             ranges=dict(s=(1, 6), b=(1, 3), a=(1, 4), d_h=(1, 4)))
    ours = _memsym(gated=False, flash=False, norm="layernorm", dropout=True, hf_norms=True,
                   sequence_parallel=False, width=4).xreplace({g: a, f: 4 * H})
    # CPU dropout keeps an fp32 scaled-noise tensor (4 bytes) where CUDA keeps a 1-byte mask:
    # +3 per element of the probabilities and the two residual dropouts; native_layer_norm
    # keeps fp32 mean and rstd, as memsym counts; gelu_new's three extra tensors in fp32
    differences = 3 * (a * s**2 * b + 2 * s * b * H) + 3 * 4 * s * b * 4 * H
    assert sp.expand(fit.expr - ours - differences) == 0, sp.factor_terms(
        sp.expand(fit.expr - ours - differences))
    # Eq. 1 at fp32, by hand: sbh(34 + 5as/h) with every 2-byte tensor at 4 bytes (the 1-byte
    # masks, 2sbh + as^2b, unchanged): 2 x (34sbh + 5as^2b) - (2sbh + as^2b)
    eq1_fp32 = 2 * s * b * H * (34 + 5 * a * s / H) - (2 * s * b * H + a * s**2 * b)
    assert sp.expand(ours - 2 * 8 * s * b - eq1_fp32) == 0
