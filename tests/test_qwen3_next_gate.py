"""Qwen3-Next's gated attention: the gate's parameters and the activations it keeps.

transformers v5.25.0 ``models/qwen3_next/modeling_qwen3_next.py`` ``Qwen3NextAttention``:
``q_proj`` is ``h -> 2 a d_h`` (query and gate, split per head), and the output is
``o_proj(attn_output * torch.sigmoid(gate))``.  The parameters: q_proj's gate half, ``h a d_h``
per full-attention layer (bias-free).  The activations, derived by hand from that code: the
sigmoid keeps its output (``2 s b a d_h`` bytes, 16-bit), the product keeps its two operands
(that output again, one storage, and the ungated attention output, ``2 s b a d_h``), and o_proj
keeps the gated product where an ungated layer's o_proj keeps the attention output: ``4 s b a
d_h`` more per layer at t = c = 1.  Measured against transformers' own layer (CPU, bf16,
``saved_tensors_hooks``) as the difference to Qwen3's ungated ``Qwen3Attention``.

Transformers' own Qwen3NextAttention (``hf_qwen3_next``: what a framework that trains the
model's code, DeepSpeed, runs) differs from Qwen3Attention in two more ways, read from the same
file.  Qwen3NextRMSNorm (q_norm, k_norm) computes ``(x.float() normalised) * (1.0 +
weight.float())`` and casts after: that multiply keeps its fp32 input, the normalised Q and K (4
bytes where Qwen3RMSNorm's ``weight * x.to(bf16)`` keeps 2), and ``1 + weight`` (fp32, d_h per
norm): ``2 s b (a + g) d_h + 8 d_h`` more.  Its ``apply_rotary_pos_emb`` concatenates the rotated
and the pass-through parts (``torch.cat``, a fresh contiguous [b, a, s, d_h] tensor), so SDPA's
flash output is [b, a, s, d_h]-contiguous too and ``sdpa_attention_forward``'s ``transpose(1,
2).contiguous()`` copies it (Qwen3's Q, a transposed view, gives an output already [b, s, a,
d_h] in memory, so its copy is a no-op): the kernel keeps its output and the product keeps the
copy, ``2 s b a d_h`` more.  Eager attention keeps no output of its matmul, so no copy there.
"""

from __future__ import annotations

import dataclasses

import pytest
import sympy as sp

from memsym.model import from_hf_config, parameter_count
from memsym.symbols import a, b, c, d_h, g, p, s, t
from memsym.terms.activations import layer_activations
from memsym.terms.mamba import hybrid_layer_activations

from hf_oracle import write_config
from test_hf_layer_kinds import REAL
from framework_ports import saved_storage_bytes

GATE = 4 * s * b * a * d_h / (c * t)        # the hand derivation above, per layer [bytes]
QK_FP32 = 2 * s * b * (a + g) * d_h / (c * t) + 2 * 4 * d_h      # Qwen3NextRMSNorm on Q and K
OUT_COPY = 2 * s * b * a * d_h / (c * t)    # SDPA's copy of the head-major flash output


def test_the_gate_half_of_q_proj_is_counted(tmp_path):
    # Qwen3-Next-80B-A3B: 12 full-attention layers, h = 2048, a = 16, d_h = 256: the gate half
    # of each q_proj is h a d_h
    arch = from_hf_config(write_config(tmp_path, REAL["qwen3-next-80b-a3b"], "q3n"))
    assert arch.attention_output_gate and arch.layer_mixers.count("attention") == 12
    ungated = dataclasses.replace(arch, attention_output_gate=False)
    assert parameter_count(arch) - parameter_count(ungated) == 12 * 2048 * 16 * 256


def test_the_gate_term_by_hand():
    def gate(**kw):
        return sp.simplify(layer_activations(output_gate=True, **kw).expr
                           - layer_activations(**kw).expr)

    assert gate() == GATE
    assert layer_activations(output_gate=True)["output_gate"].expr == GATE
    # the product is outside core attention: recomputing core_attn keeps it
    assert gate(recompute="selective", flash=True) == GATE
    assert gate(recompute="full") == 0
    # FP8 with flash: proj_input already holds the attention's 16-bit output beside its FP8
    # copy; the gate adds the sigmoid's output only
    assert gate(flash=True, fp8_inputs=True) == GATE / 2
    # a hybrid model's attention layer holds it too
    hybrid = hybrid_layer_activations(("attention", True), output_gate=True, norm="rmsnorm")
    assert hybrid["attn_output_gate"].expr == GATE


def test_transformers_qwen3_next_attention_terms_by_hand():
    def extra(**kw):          # what hf_qwen3_next adds, less ``expected``: 0 when they agree
        expected = kw.pop("expected")
        kw.update(qk_norm=True, output_gate=True)
        return sp.simplify(layer_activations(hf_qwen3_next=True, **kw).expr
                           - layer_activations(**kw).expr - expected)

    assert extra(flash=True, expected=QK_FP32 + OUT_COPY) == 0
    full = layer_activations(hf_qwen3_next=True, qk_norm=True, output_gate=True, flash=True)
    assert full["qk_norm_fp32_output"].expr == QK_FP32
    assert full["sdpa_output_copy"].expr == OUT_COPY
    # eager attention keeps no matmul output: nothing to copy
    assert extra(expected=QK_FP32) == 0
    # a recomputed core attention keeps no kernel output either; the norms run before it
    assert extra(flash=True, recompute="selective", expected=QK_FP32) == 0
    assert extra(flash=True, recompute="full", expected=0) == 0
    # without Q/K norms there is no Qwen3NextRMSNorm to keep its product
    assert sp.simplify(layer_activations(hf_qwen3_next=True, flash=True).expr
                       - layer_activations(flash=True).expr - OUT_COPY) == 0
    hybrid = hybrid_layer_activations(("attention", True), output_gate=True, norm="rmsnorm",
                                      qk_norm=True, hf_qwen3_next=True, flash=True)
    assert hybrid["attn_qk_norm_fp32_output"].expr == QK_FP32
    assert hybrid["attn_sdpa_output_copy"].expr == OUT_COPY


def test_a_qwen3_next_stage_holds_the_gate_of_its_attention_layers(tmp_path):
    from memsym.training import Training, stage_activations

    arch = from_hf_config(write_config(tmp_path, REAL["qwen3-next-80b-a3b"], "q3n"))
    ungated = dataclasses.replace(arch, attention_output_gate=False)
    trn = Training()

    def layers(x):
        return stage_activations(x, training=trn)["layer_activations"].expr

    # the first stage of 1F1B holds p micro-batches of its 12 attention layers' gates
    assert sp.simplify(layers(arch) - layers(ungated) - 12 * p * GATE) == 0


def test_deepspeed_runs_transformers_qwen3_next_attention(tmp_path):
    from memsym.training import Training, stage_activations

    arch = from_hf_config(write_config(tmp_path, REAL["qwen3-next-80b-a3b"], "q3n"))
    # without the gate and without the fp32 (1 + weight) Q/K norms (qk_norm_fp32_scale)
    ungated = dataclasses.replace(arch, attention_output_gate=False, qk_norm_fp32_scale=False)

    def layers(x, framework):
        trn = Training(framework=framework)
        flash = trn.memory.flash_attention
        return stage_activations(x, training=trn)["layer_activations"].expr, flash

    # DeepSpeed trains the model's own code: Qwen3NextAttention's norms and copy besides the
    # gate; Megatron-LM runs its own attention (the gate alone, as above)
    gated, flash = layers(arch, "deepspeed")
    extra = GATE + QK_FP32 + (OUT_COPY if flash else 0)
    assert sp.simplify(gated - layers(ungated, "deepspeed")[0] - 12 * p * extra) == 0
    assert sp.simplify(layers(arch, "megatron")[0] - layers(ungated, "megatron")[0]
                       - 12 * p * GATE) == 0


def _saved_bytes(attention, rope, s_, b_, h_):
    """Bytes of the distinct storages autograd keeps for one call of ``attention`` on a
    [b, s, h] bf16 input, its parameters and the RoPE tables (one per model) left out."""
    import torch

    x = torch.randn(b_, s_, h_, dtype=torch.bfloat16, requires_grad=True)
    with torch.no_grad():
        cos, sin = rope(x, torch.arange(s_)[None].expand(b_, s_))
    return saved_storage_bytes(lambda: attention(x, (cos, sin), None),
                               [*attention.parameters(), cos, sin])


@pytest.mark.torch
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("shape", [(4, 1, 2, 1, 4), (5, 2, 4, 2, 8), (3, 3, 4, 1, 6),
                                   (7, 2, 2, 2, 4), (6, 1, 6, 3, 2)])
def test_the_gate_is_measured_in_transformers_layer(shape, attention):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3 import modeling_qwen3 as q3
    from transformers.models.qwen3_next import modeling_qwen3_next as q3n

    s_, b_, a_, g_, d_ = shape
    sizes = dict(hidden_size=a_ * d_, num_attention_heads=a_, num_key_value_heads=g_,
                 head_dim=d_, vocab_size=8, intermediate_size=8, num_hidden_layers=1)
    nxt = transformers.Qwen3NextConfig(**sizes, layer_types=["full_attention"], num_experts=0)
    old = transformers.Qwen3Config(**sizes)
    for conf in (nxt, old):
        conf._attn_implementation = attention
    torch.manual_seed(0)
    gated = q3n.Qwen3NextAttention(nxt, 0).to(torch.bfloat16)
    assert tuple(gated.q_proj.weight.shape) == (2 * a_ * d_, a_ * d_)   # query and gate
    measured = (_saved_bytes(gated, q3n.Qwen3NextRotaryEmbedding(nxt), s_, b_, a_ * d_)
                - _saved_bytes(q3.Qwen3Attention(old, 0).to(torch.bfloat16),
                               q3.Qwen3RotaryEmbedding(old), s_, b_, a_ * d_))
    # memsym's transformers' Qwen3NextAttention less its Qwen3 attention (per-head Q/K norms):
    # the gate, the fp32 norm products and, under SDPA's flash kernel, the copied output
    flags = dict(flash=attention == "sdpa", qk_norm=True, norm="rmsnorm", dropout=False)
    ours = (layer_activations(output_gate=True, hf_qwen3_next=True, **flags).expr
            - layer_activations(**flags).expr)
    at = {s: s_, b: b_, a: a_, g: g_, d_h: d_, c: 1, t: 1}
    assert measured == ours.xreplace(at)
    # and the hand derivation of the module docstring
    assert measured == (GATE + QK_FP32 + (OUT_COPY if attention == "sdpa" else 0)).xreplace(at)
