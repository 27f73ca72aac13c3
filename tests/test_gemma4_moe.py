"""Gemma 4's MoE block (``enable_moe_block``) under transformers' own code
(memsym.terms.gemma4_moe): measured on ``Gemma4TextDecoderLayer`` and counted per layer of a
DeepSpeed job.

The measurement: autograd's saved tensors of one decoder layer's forward in bf16 on the CPU
(``memsym.measure.saved_bytes``, one storage once, parameters left out), the experts on
transformers' default ``grouped_mm`` path (``modeling_utils.py:1893-1894`` sets it when
``experts_implementation`` is left unset), as tests/test_hf_gemma4.py measures the dense layer:
the layer must keep memsym's dense Gemma 4 layer plus the term, plus the two differences that
file names (the activation's output the product with up_proj keeps, 2 tau f, and RoPE's cos
and sin tables, computed once per model).  The term is also checked by hand, part by part, on
the measured submodules.
"""

from __future__ import annotations

import pytest
import sympy as sp

from memsym.model import from_hf_config
from memsym.symbols import E, L, a, b, c, d_h, d_hg, f, f_e, g, g_g, h, k, p, s, t
from memsym.terms.activations import layer_activations
from memsym.terms.gemma4_moe import gemma4_moe_block
from memsym.terms.gemma4_norms import gemma4_norm_excess

from hf_oracle import TOKENS, write_config

_TAU = s * b / c
_FLAGS = dict(gated=True, flash=True, norm="rmsnorm", dropout=False, qk_norm=True,
              qk_norm_fp32=True, norm_fp32=True, post_norms=True, hf_norms=True)
# (s, b, a, g, d_h, f, E, k, f_e): grouped_mm wants rows of 16 bytes (h and f_e multiples of 8)
_SHAPES = [(5, 2, 4, 2, 8, 12, 4, 2, 24), (3, 1, 2, 1, 8, 4, 8, 3, 16),
           (4, 3, 6, 3, 16, 8, 5, 1, 8), (7, 1, 4, 4, 8, 6, 6, 4, 8)]


def _moe_config(shape, **extra):
    transformers = pytest.importorskip("transformers")
    s_, b_, a_, g_, d_, f_, e_, k_, fe_ = shape
    conf = transformers.Gemma4TextConfig(
        hidden_size=a_ * d_, num_attention_heads=a_, num_key_value_heads=g_, head_dim=d_,
        intermediate_size=f_, num_hidden_layers=2, vocab_size=16, max_position_embeddings=64,
        layer_types=["sliding_attention", "full_attention"], hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=16, enable_moe_block=True, num_experts=e_,
        top_k_experts=k_, moe_intermediate_size=fe_, **{"global_head_dim": d_, **extra})
    conf._attn_implementation = "sdpa"
    # what a model's from_pretrained sets when experts_implementation is left unset
    conf._experts_implementation = "grouped_mm"
    return conf


def _measured(conf, index: int, shape):
    """The saved bytes of layer ``index`` of ``conf`` (groups by submodule)."""
    torch = pytest.importorskip("torch")
    from transformers.models.gemma4 import modeling_gemma4 as g4

    from test_hf_gemma4 import layer_saved_bytes

    s_, b_ = shape[:2]
    torch.manual_seed(0)
    layer = g4.Gemma4TextDecoderLayer(conf, index).to(torch.bfloat16)
    for weight in layer.experts.parameters():      # torch.empty: give the experts values
        weight.data.zero_()     # (what autograd saves does not depend on them; zero is cheap)
    x = torch.randn(b_, s_, conf.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    return layer_saved_bytes(layer, conf, conf.layer_types[index], x)


def _at(shape):
    s_, b_, a_, g_, d_, f_, e_, k_, fe_ = shape
    return {s: s_, b: b_, a: a_, g: g_, d_h: d_, f: f_, E: e_, k: k_, f_e: fe_, h: a_ * d_,
            c: 1, t: 1}


@pytest.mark.torch
@pytest.mark.parametrize("shape", _SHAPES)
def test_the_moe_decoder_layer_is_the_dense_layer_plus_the_term(shape):
    got = _measured(_moe_config(shape), 0, shape)
    ours = layer_activations(**_FLAGS).expr + gemma4_norm_excess(_TAU, 1).expr \
        + gemma4_moe_block().expr
    named = 2 * _TAU * f + 2 * 2 * _TAU * d_h
    assert got.total == (ours + named).xreplace(_at(shape))
    # the term by hand, part by part, at this shape: each norm of h 8 tau h + 8 tau + 4h;
    # the router's norm 4 tau h + 8 tau, two bf16 h-wide products, the fp32 softmax, topk's
    # int64 indices, the division's numerator copy and sum, the scaled weights (fp32 and
    # bf16); the experts' three int64 index tensors, int32 offsets, gathered rows, gate-up
    # output, activation and product, down output, sorted fp32 weights
    s_, b_, a_, g_, d_, f_, e_, k_, fe_ = shape
    tau, h_ = s_ * b_, a_ * d_
    norm = 8 * tau * h_ + 8 * tau + 4 * h_
    for name in ("post_feedforward_layernorm_1", "pre_feedforward_layernorm_2",
                 "post_feedforward_layernorm_2"):
        assert got.groups[f"layer.{name}"] == norm
    assert got.groups["layer.router"] == (4 * tau * h_ + 8 * tau) + 2 * (2 * tau * h_) \
        + 4 * tau * e_ + 8 * tau * k_ + (4 * tau * k_ + 4 * tau) + (4 + 2) * tau * k_
    assert got.groups["layer.experts"] == 3 * 8 * tau * k_ + 4 * e_ + 2 * tau * k_ * h_ \
        + 4 * tau * k_ * fe_ + 2 * (2 * tau * k_ * fe_) + 2 * tau * k_ * h_ + 4 * tau * k_


def _arch(tmp_path, shape, moe=True, **extra):
    s_, b_, a_, g_, d_, f_, e_, k_, fe_ = shape
    return from_hf_config(write_config(tmp_path, {
        "model_type": "gemma4_text", "hidden_size": a_ * d_, "num_hidden_layers": 2,
        "num_attention_heads": a_, "num_key_value_heads": g_, "head_dim": d_,
        "global_head_dim": d_, "intermediate_size": f_, "vocab_size": 128,
        "max_position_embeddings": 64, "hidden_size_per_layer_input": 0,
        "enable_moe_block": moe, "num_experts": e_, "top_k_experts": k_,
        "moe_intermediate_size": fe_, **TOKENS, **extra}, sub=f"moe-{moe}"))


def _job_layers(arch, shape, framework="deepspeed", more=None):
    from memsym.training import Training, stage_activations

    training = Training(framework=framework, dropout=False)
    expr = stage_activations(arch, training=training)["layer_activations"].expr
    # one expert tensor-parallel rank, capacity factor 1 (no expert parallelism here)
    ones = {sym: 1 for sym in expr.free_symbols if sym.name in ("c_f", "t_e")}
    return expr.xreplace({**_at(shape), L: 2, p: 1, **(more or {}), **ones})


@pytest.mark.torch
@pytest.mark.parametrize("shape", _SHAPES[:2])
def test_a_deepspeed_job_keeps_the_measured_layers(tmp_path, shape):
    # both layers (sliding, then full attention) of the model's shapes, measured, against the
    # job's two layers (which count the eager activation's output the product keeps): equal
    # but for RoPE's tables, 4 tau d_h a layer, computed once per model
    conf = _moe_config(shape)
    measured = sum(_measured(conf, i, shape).total for i in (0, 1))
    named = 2 * (2 * 2 * _TAU * d_h)
    assert _job_layers(_arch(tmp_path, shape), shape) + named.xreplace(_at(shape)) == measured


@pytest.mark.torch
@pytest.mark.parametrize("shape", _SHAPES[:2])
def test_the_26b_a4b_layout_keeps_the_measured_layers(tmp_path, shape):
    # google/gemma-4-26B-A4B's layout at small widths: a full-attention layer of twice the
    # head width, one KV head and no v_proj (attention_k_eq_v) beside the MoE block; memsym's
    # hybrid path (a "global" layer) against both layers measured
    glob = dict(global_head_dim=2 * shape[4], attention_k_eq_v=True,
                num_global_key_value_heads=1)
    conf = _moe_config(shape, **glob)
    measured = sum(_measured(conf, i, shape).total for i in (0, 1))
    arch = _arch(tmp_path, shape, **glob)
    assert arch.layer_mixers == ("attention", "global")
    tau_ = shape[0] * shape[1]
    # RoPE's tables, d_h wide on the sliding layer, 2 d_h on the global one
    named = 4 * tau_ * shape[4] + 4 * tau_ * 2 * shape[4]
    assert _job_layers(arch, shape, more={d_hg: 2 * shape[4], g_g: 1}) + named == measured


def test_the_block_adds_the_term_to_each_moe_layer_of_a_job(tmp_path):
    shape = _SHAPES[0]
    arch, dense = _arch(tmp_path, shape), _arch(tmp_path, shape, moe=False)
    # two layers, each its dense layer plus the term (by hand: 18,480 bytes at this shape)
    assert _job_layers(arch, shape) - _job_layers(dense, shape) == 2 * 18_480
    # Megatron-LM runs its own MoE layer: no term
    assert _job_layers(arch, shape, "megatron") != _job_layers(dense, shape, "megatron") \
        + 2 * 18_480


def test_the_term_by_hand():
    # 10 tokens, h = 32, E = 4, k = 2, f_e = 24: norms 3 (2560 + 80 + 128), router 1280 + 80
    # + 1280 + 160 + 160 + 120 + 120, experts 480 + 16 + 1280 + 1920 + 1920 + 1280 + 80
    assert gemma4_moe_block().evaluate(s=5, b=2, c=1, h=32, E=4, k=2, f_e=24) == \
        3 * 2768 + 3200 + 6976
    assert sp.expand(gemma4_moe_block().expr.subs(k, 0)) == sp.expand(
        32 * _TAU * h + 36 * _TAU + 12 * h + 4 * _TAU * E + 4 * E)


def test_tensor_or_expert_parallelism_is_refused_in_one_line(tmp_path):
    from memsym.errors import InvalidValueError
    from memsym.job import job

    arch = _arch(tmp_path, _SHAPES[0])
    with pytest.raises(InvalidValueError, match="Gemma 4's MoE block") as err:
        job(arch, framework="deepspeed", sharding="zero1", d=2, e=2, seq_length=8,
            micro_batch_size=1, global_batch_size=2)
    assert "\n" not in str(err.value)
    assert job(arch, framework="deepspeed", sharding="zero1", d=1, seq_length=8,
               micro_batch_size=1, global_batch_size=1) is not None


@pytest.mark.torch
@pytest.mark.parametrize("gg", [1, 2])
def test_a_global_layer_wider_than_sdpas_gqa_limit_keeps_repeated_kv(tmp_path, gg):
    # a 512-wide global layer: transformers' SDPA repeats its KV heads to the a query heads
    # (use_gqa_in_sdpa: head widths up to 256 only); by hand 4 tau d_hg (a - g_g) bytes more
    # than the same layer's count at GQA, which memsym adds; of one KV head the repeat is a
    # view (no copy), nothing more
    from memsym.terms.global_attention import sdpa_repeated_kv

    shape = (4, 1, 4, 2, 8, 8, 4, 2, 8)
    glob = dict(global_head_dim=512, attention_k_eq_v=True, num_global_key_value_heads=gg)
    measured = sum(_measured(_moe_config(shape, **glob), i, shape).total for i in (0, 1))
    arch = _arch(tmp_path, shape, **glob)
    named = 4 * 4 * shape[4] + 4 * 4 * 512
    assert _job_layers(arch, shape, more={d_hg: 512, g_g: gg}) + named == measured
    ours = _job_layers(arch, shape, more={d_hg: 512, g_g: gg})
    at_gqa = _job_layers(_arch(tmp_path, shape, **{**glob, "global_head_dim": 256}), shape,
                         more={d_hg: 512, g_g: gg})
    assert ours - at_gqa == (4 * 4 * 512 * (4 - gg) if gg > 1 else 0)
    assert sdpa_repeated_kv().evaluate(s=4, b=1, c=1, t=1, d_hg=512, a=4, g_g=gg) == \
        4 * 4 * 512 * (4 - gg)


@pytest.mark.torch
@pytest.mark.slow
def test_the_26b_a4b_shapes_keep_the_measured_layers(tmp_path):
    # google/gemma-4-26B-A4B's text_config (tests/test_hf_gemma4.py's _26B_SHAPED) at s = 8:
    # a sliding MoE layer and a global one measured at full width, against the DeepSpeed
    # job's 30 layers (25 sliding, 5 global), but for RoPE's tables a layer
    transformers = pytest.importorskip("transformers")
    from test_hf_gemma4 import _26B_SHAPED

    text = {k: v for k, v in _26B_SHAPED["text_config"].items() if k != "model_type"}
    conf = transformers.Gemma4TextConfig(**{
        **text, "num_hidden_layers": 6, "vocab_size": 16, "vocab_size_per_layer_input": 16,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"]})
    conf._attn_implementation = "sdpa"
    conf._experts_implementation = "grouped_mm"
    shape = (8, 1, 16, 8, 256, 2112, 128, 8, 704)
    sliding, full = (_measured(conf, i, shape).total for i in (0, 5))
    arch = from_hf_config(write_config(tmp_path, _26B_SHAPED))
    rope = 25 * 4 * 8 * 256 + 5 * 4 * 8 * 512
    ours = _job_layers(arch, shape, more={d_hg: 512, g_g: 2, L: 30, h: 2816})
    assert ours == 25 * sliding + 5 * full - rope == 107_323_840


def test_plain_fp32_under_transformers_code_is_refused_in_one_line(tmp_path, capsys):
    # the norms' and the MoE block's terms were measured with bf16 activations; a plain fp32
    # run keeps other widths (its fp32 inputs are the norms' fp32 copies): refused
    from in_process import refused_line

    path = write_config(tmp_path, {"model_type": "gemma4_text", "hidden_size": 64,
                          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                          "global_head_dim": 16, "intermediate_size": 96,
                          "num_hidden_layers": 2, "vocab_size": 32,
                          "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 32})
    err = refused_line(capsys, ["estimate", str(path), "--framework", "deepspeed",
                                "--precision", "fp32"])
    assert "16-bit activations" in err and "plain fp32" in err
