"""The main norms of Gemma and Qwen3-Next, and Gemma 2/3's post-norms, under the model's own code.

transformers 5.25.0 ``Gemma3RMSNorm.forward`` (``models/gemma3/modeling_gemma3.py`` lines
128-133; ``Qwen3NextRMSNorm`` lines 135-140 of ``modeling_qwen3_next.py`` is the same code)::

    output = self._norm(x.float())   # x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    output = output * (1.0 + self.weight.float())
    return output.type_as(x)

What autograd keeps, by op, for a bf16 input of width w over tau tokens:

* ``x.float()`` keeps nothing; ``pow(2)`` keeps its input, the fp32 copy (4 tau w);
* ``mean`` and ``+ eps`` keep nothing; ``rsqrt`` keeps its output, the fp32 statistic (4 tau);
* ``x * rsqrt(...)`` keeps both operands: the fp32 copy and the statistic again (one storage
  each);
* ``output * (1.0 + weight.float())`` keeps both operands: the fp32 normalised tensor (4 tau w)
  and ``1 + weight``, a fresh fp32 tensor (4 w);
* ``type_as`` keeps nothing.

Per norm: 8 tau w + 4 tau + 4 w.  Llama's ``LlamaRMSNorm`` keeps the fp32 copy, the statistic
and a bf16 normalised tensor (``weight * x.to(bf16)``): 6 tau w + 4 tau.  memsym counts a norm
as Megatron's fused kernel keeps it, its 16-bit input and its statistic, 2 tau w + 4 tau; the
fp32 copy's excess over that, 4 tau w per norm, which every transformers RMSNorm has, is
``norm_fp32_input`` (w = h) and ``qk_norm_fp32_input`` (w = d_h per head) under ``hf_norms``
(``tests/test_hf_activations.py`` measures Llama's).  Beyond Llama's norm the ``1 + weight``
norm keeps

    2 tau w + 4 w   [bytes]   (the normalised tensor in fp32, not bf16, and 1 + weight)

which memsym counts for the Q and K norms (``qk_norm_fp32_output``, w = d_h per head) and, here,
for the layer's main norms (``norm_fp32_output``, w = h).

Gemma 2/3 run four norms per layer (``Gemma3DecoderLayer.forward`` lines 384-401):
input_layernorm and pre_feedforward_layernorm before attention and MLP (memsym's two), and
post_attention_layernorm and post_feedforward_layernorm on the attention and MLP outputs
before the residual adds.  Each post-norm keeps what memsym counts for a norm, its input and
statistic, 2 tau h + 4 tau (``post_norms``); its output goes to the residual add, which keeps
nothing.  GLM-4's post_self_attn_layernorm and post_mlp_layernorm (``modeling_glm4.py`` lines
103, 109) are the same two.

The oracle: transformers' own ``Gemma3DecoderLayer`` and ``Qwen3NextDecoderLayer`` (and
``Glm4DecoderLayer``'s post-norms, ``DeepseekV3Attention``'s latent norms) built from tiny
configs, run in bf16 on the CPU under ``torch.autograd.graph.saved_tensors_hooks``
(``memsym.measure.saved_bytes``: distinct storages, parameters left out), equal memsym's
per-layer formula plus the named differences derived below, exactly.
"""

from __future__ import annotations

import dataclasses

import pytest
import sympy as sp

from memsym.model import from_hf_config
from memsym.symbols import L, a, b, c, d_h, d_ssm, f, g, h, p, s, t
from memsym.terms.activations import layer_activations
from memsym.terms.mamba import hybrid_layer_activations

from hf_oracle import write_config
from framework_ports import saved_storage_bytes
from test_hf_configs import REAL
from test_hf_layer_kinds import REAL as HYBRID

TAU = s * b / c
FP32_NORM = 2 * TAU * h + 4 * h                 # one 1 + weight norm beyond a bf16 one
POST_NORM = 2 * TAU * h + 4 * TAU               # one RMSNorm: its input and fp32 statistic
COPY = 4 * TAU * h                              # one transformers RMSNorm's fp32 input copy
BASE = dict(gated=True, flash=True, norm="rmsnorm", dropout=False)


def test_the_terms_by_hand():
    def extra(recompute="none", **kw):
        return sp.simplify(layer_activations(**BASE, recompute=recompute, **kw).expr
                           - layer_activations(**BASE, recompute=recompute).expr)

    assert sp.simplify(extra(norm_fp32=True) - 2 * FP32_NORM) == 0
    assert sp.simplify(extra(post_norms=True) - 2 * POST_NORM) == 0
    # Gemma 2/3 under the model's code: four 1 + weight norms and two of them post-norms
    assert sp.simplify(extra(norm_fp32=True, post_norms=True)
                       - 4 * FP32_NORM - 2 * POST_NORM) == 0
    # LayerNorm statistics are 8 bytes a token (mean and 1/sigma)
    ln = layer_activations(post_norms=True, norm="layernorm")["post_norms"].expr
    assert sp.simplify(ln - 2 * (2 * TAU * h + 8 * TAU)) == 0
    # every transformers RMSNorm's fp32 copy: four norms with the post-norms, Q and K per head
    assert sp.simplify(extra(hf_norms=True, post_norms=True) - 2 * POST_NORM - 4 * COPY) == 0
    qk = extra(hf_norms=True, qk_norm=True) - extra(qk_norm=True)
    assert sp.simplify(qk - 2 * COPY - 4 * TAU * (a + g) * d_h / t) == 0
    # full recompute keeps the layer input alone
    assert extra(norm_fp32=True, post_norms=True, hf_norms=True, recompute="full") == 0
    # a recomputed dense MLP rebuilds its fused norm (Megatron's "mlp" module): one kept
    mlp = dict(recompute="selective", modules=["core_attn", "mlp"])
    assert sp.simplify(layer_activations(**BASE, **mlp, norm_fp32=True, hf_norms=True).expr
                       - layer_activations(**BASE, **mlp).expr - FP32_NORM - COPY) == 0


def test_the_hybrid_parts_split_the_norms():
    # Qwen3-Next's layers: each part's pre-norm keeps one norm's product
    flags = dict(BASE, norm_fp32=True, qk_norm=True)
    # and Nemotron-H's / Bamba's: a Mamba layer's pre-norm, an MLP-only layer's one norm
    for kind, parts in ((("attention", True), ("attn", "moe")), (("gdn", True), ("gdn", "moe")),
                        (("gdn", False), ("gdn", "mlp")), (("mamba", None), ("mamba",)),
                        (("mamba", False), ("mamba", "mlp")), (("none", False), ("mlp",))):
        total = hybrid_layer_activations(kind, **flags)
        for part in parts:
            assert sp.simplify(total[f"{part}_norm_fp32_output"].expr - FP32_NORM) == 0
        plain = hybrid_layer_activations(kind, **dict(flags, norm_fp32=False))
        assert sp.simplify(total.expr - plain.expr - len(parts) * FP32_NORM) == 0


def test_the_configs_read(tmp_path):
    gemma3 = from_hf_config(write_config(tmp_path, REAL["gemma-3-1b"], "g3"))
    assert gemma3.norm_fp32_scale and gemma3.norms_per_layer == 4
    q3n = from_hf_config(write_config(tmp_path, HYBRID["qwen3-next-80b-a3b"], "q3n"))
    assert q3n.norm_fp32_scale and q3n.norms_per_layer == 2
    # Qwen3RMSNorm multiplies weight * x.to(input_dtype): a bf16 product
    qwen3 = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 128}
    assert not from_hf_config(write_config(tmp_path, qwen3, "q3")).norm_fp32_scale


def _layers(x, framework):
    from memsym.training import Training, stage_activations

    return stage_activations(x, training=Training(framework=framework))["layer_activations"].expr


def test_deepspeed_keeps_gemma3_norms(tmp_path):
    arch = from_hf_config(write_config(tmp_path, REAL["gemma-3-1b"], "g3"))
    plain = dataclasses.replace(arch, norm_fp32_scale=False, norms_per_layer=2)
    # gemma-3-1b: 26 layers; the first 1F1B stage holds L layer copies in all; the two
    # post-norms keep their fp32 input copies too
    per_layer = 4 * FP32_NORM + 2 * POST_NORM + 2 * COPY
    extra = (_layers(arch, "deepspeed") - _layers(plain, "deepspeed")).subs(L, 26)
    assert sp.simplify(extra - 26 * per_layer) == 0
    # Megatron-LM runs its own layer (Transformer Engine's norms): neither term
    assert sp.simplify(_layers(arch, "megatron") - _layers(plain, "megatron")) == 0


def test_deepspeed_keeps_qwen3_next_norms(tmp_path):
    arch = from_hf_config(write_config(tmp_path, HYBRID["qwen3-next-80b-a3b"], "q3n"))
    plain = dataclasses.replace(arch, norm_fp32_scale=False)
    # 48 layers (36 Gated DeltaNet, 12 attention) of two 1 + weight norms each; the first
    # stage holds p micro-batches of each
    extra = _layers(arch, "deepspeed") - _layers(plain, "deepspeed")
    assert sp.simplify(extra - 48 * p * 2 * FP32_NORM) == 0
    assert sp.simplify(_layers(arch, "megatron") - _layers(plain, "megatron")) == 0


# --- the measurement ---------------------------------------------------------------------------
# Named differences between transformers' layer and memsym's, each derived from the code:
# the activation's output, which the product with up_proj keeps (GELU-tanh in Gemma 3,
# SiLU in Qwen3-Next; Megatron's fused kernel recomputes it): 2 tau f ...
ACT_OUTPUT = 2 * TAU * f


# ... and RoPE's cos and sin tables (bf16, [b, s, d_rot]) its multiplies keep, computed once
# per model for all layers: Gemma 3 rotates all of d_h, Qwen3-Next a quarter
# (partial_rotary_factor 0.25).
def _rope_tables(d_rot):
    return 2 * 2 * TAU * d_rot


SHAPES = [(5, 2, 4, 2, 8, 12), (3, 1, 2, 1, 8, 4), (4, 3, 6, 3, 16, 8), (7, 1, 4, 4, 8, 6)]


def _measure(layer, rope, s_, b_, h_, **rope_kw):
    """Saved bytes of one call of ``layer`` as its model calls it (RoPE tables without grad)."""
    import torch

    from memsym.measure import saved_bytes

    x = torch.randn(b_, s_, h_, dtype=torch.bfloat16, requires_grad=True)
    pos = torch.arange(s_)[None].expand(b_, s_)

    class Called(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            with torch.no_grad():
                tables = rope(x, pos, **rope_kw)
            return self.layer(x, position_embeddings=tables, position_ids=pos)

    return saved_bytes(Called(), (x,), depth=2)


def _at(shape):
    s_, b_, a_, g_, d_, f_ = shape
    return {s: s_, b: b_, a: a_, g: g_, d_h: d_, f: f_, h: a_ * d_, c: 1, t: 1}


@pytest.mark.torch
@pytest.mark.parametrize("shape", SHAPES)
def test_gemma3_decoder_layer_is_memsym_plus_named_differences(shape):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.gemma3 import modeling_gemma3 as g3

    s_, b_, a_, g_, d_, f_ = shape
    conf = transformers.Gemma3TextConfig(
        hidden_size=a_ * d_, num_attention_heads=a_, num_key_value_heads=g_, head_dim=d_,
        intermediate_size=f_, num_hidden_layers=1, vocab_size=16, max_position_embeddings=64,
        layer_types=["full_attention"])
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = g3.Gemma3DecoderLayer(conf, 0).to(torch.bfloat16)
    got = _measure(layer, g3.Gemma3RotaryEmbedding(conf), s_, b_, a_ * d_,
                   layer_type="full_attention")
    # each of the four norms by hand (module docstring): 8 tau h + 4 tau + 4 h
    tau, h_ = s_ * b_, a_ * d_
    for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm"):
        assert got.groups[f"layer.{norm}"] == 8 * tau * h_ + 4 * tau + 4 * h_
    # memsym under the model's code (SDPA on the CPU is the flash kernel): four 1 + weight
    # norms, two of them post-norms, and 1 + weight Q and K norms
    ours = layer_activations(**BASE, qk_norm=True, qk_norm_fp32=True, norm_fp32=True,
                             post_norms=True, hf_norms=True).expr
    named = ACT_OUTPUT + _rope_tables(d_h)
    assert got.total == (ours + named).xreplace(_at(shape))


@pytest.mark.torch
@pytest.mark.parametrize("shape", SHAPES)
def test_qwen3_next_decoder_layer_is_memsym_plus_named_differences(shape):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3_next import modeling_qwen3_next as q3n

    s_, b_, a_, g_, d_, f_ = shape
    # a full-attention layer with a dense MLP (num_experts 0): the norms around the attention
    conf = transformers.Qwen3NextConfig(
        hidden_size=a_ * d_, num_attention_heads=a_, num_key_value_heads=g_, head_dim=d_,
        intermediate_size=f_, num_hidden_layers=1, vocab_size=16,
        layer_types=["full_attention"], num_experts=0)
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = q3n.Qwen3NextDecoderLayer(conf, 0).to(torch.bfloat16)
    assert isinstance(layer.mlp, q3n.Qwen3NextMLP)
    got = _measure(layer, q3n.Qwen3NextRotaryEmbedding(conf), s_, b_, a_ * d_)
    tau, h_ = s_ * b_, a_ * d_
    for norm in ("input_layernorm", "post_attention_layernorm"):
        assert got.groups[f"layer.{norm}"] == 8 * tau * h_ + 4 * tau + 4 * h_
    # memsym's transformers Qwen3NextAttention (gate, fp32 Q/K norms, copied SDPA output) and
    # its two 1 + weight norms
    ours = layer_activations(**BASE, qk_norm=True, output_gate=True, hf_qwen3_next=True,
                             norm_fp32=True, hf_norms=True).expr
    named = ACT_OUTPUT + _rope_tables(d_h / 4)
    assert got.total == (ours + named).xreplace(_at(shape))


def _part_norm(total, part):
    """A hybrid part's pre-norm as memsym splits it: input, statistics, fp32 product, copy."""
    return sum(total[f"{part}_norm_{key}"].expr for key in ("input", "statistics",
                                                             "fp32_output", "fp32_input"))


@pytest.mark.torch
@pytest.mark.parametrize("block", ["full_attention", "linear_attention"])
def test_qwen3_next_hybrid_parts_are_measured(block):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3_next import modeling_qwen3_next as q3n

    s_, b_, a_, g_, d_, f_ = shape = SHAPES[0]
    conf = transformers.Qwen3NextConfig(
        hidden_size=a_ * d_, num_attention_heads=a_, num_key_value_heads=g_, head_dim=d_,
        intermediate_size=f_, num_hidden_layers=1, vocab_size=16, layer_types=[block],
        num_experts=0, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=8, linear_conv_kernel_dim=4)
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = q3n.Qwen3NextDecoderLayer(conf, 0).to(torch.bfloat16)
    got = _measure(layer, q3n.Qwen3NextRotaryEmbedding(conf), s_, b_, a_ * d_)
    mixer, prefix = {"full_attention": ("attention", "attn"),
                     "linear_attention": ("gdn", "gdn")}[block]
    flags = dict(BASE, qk_norm=True, output_gate=True, hf_qwen3_next=True, norm_fp32=True,
                 hf_norms=True)
    ours = hybrid_layer_activations((mixer, False), **flags)
    # each part's pre-norm, by hand: 8 tau h + 4 tau + 4 h (module docstring), which memsym's
    # part keeps as its input, statistics, fp32 product and fp32 input copy
    tau, h_ = s_ * b_, a_ * d_
    for group, part in (("input_layernorm", prefix), ("post_attention_layernorm", "mlp")):
        assert got.groups[f"layer.{group}"] == 8 * tau * h_ + 4 * tau + 4 * h_
        assert _part_norm(ours, part).xreplace(_at(shape)) == got.groups[f"layer.{group}"]
    if block == "full_attention":    # the whole layer, Q and K norms' copies included
        named = ACT_OUTPUT + _rope_tables(d_h / 4)
        assert got.total == (ours.expr + named).xreplace(_at(shape))


def test_glm4_reads_two_post_norms_in_bf16(tmp_path):
    glm4 = {"model_type": "glm4", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 128}
    arch = from_hf_config(write_config(tmp_path, glm4, "glm4"))
    # Glm4RMSNorm is LlamaRMSNorm (weight * x.to(input_dtype)): post-norms, no fp32 product
    assert arch.norms_per_layer == 4 and not arch.norm_fp32_scale
    extra = _layers(arch, "deepspeed") - _layers(dataclasses.replace(arch, norms_per_layer=2),
                                                 "deepspeed")
    assert sp.simplify(extra.subs(L, 2) - 2 * 2 * (POST_NORM + COPY)) == 0


@pytest.mark.torch
def test_glm4_post_norms_are_measured():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.glm4 import modeling_glm4 as glm4

    s_, b_, a_, g_, d_, f_ = shape = SHAPES[0]
    conf = transformers.Glm4Config(
        hidden_size=a_ * d_, num_attention_heads=a_, num_key_value_heads=g_, head_dim=d_,
        intermediate_size=f_, num_hidden_layers=1, vocab_size=16, pad_token_id=0)
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = glm4.Glm4DecoderLayer(conf, 0).to(torch.bfloat16)
    got = _measure(layer, glm4.Glm4RotaryEmbedding(conf), s_, b_, a_ * d_)
    # one post-norm: memsym's input and statistic plus its fp32 copy (a quarter of the four
    # norms' norm_fp32_input): 6 tau h + 4 tau, the fp32 copy, the rsqrt and the bf16
    # normalised tensor that weight * keeps
    ours = layer_activations(post_norms=True, norm="rmsnorm", hf_norms=True)
    one = (ours["post_norms"].expr / 2 + ours["norm_fp32_input"].expr / 4).xreplace(_at(shape))
    assert one == 6 * s_ * b_ * a_ * d_ + 4 * s_ * b_
    for norm in ("post_self_attn_layernorm", "post_mlp_layernorm"):
        assert got.groups[f"layer.{norm}"] == one


@pytest.mark.torch
def test_deepseek_v3_latent_norms_are_measured():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    s_, b_, h_, r_q, r_kv = 5, 2, 32, 12, 8
    conf = transformers.DeepseekV3Config(
        hidden_size=h_, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=r_q,
        kv_lora_rank=r_kv, qk_nope_head_dim=4, qk_rope_head_dim=2, v_head_dim=4,
        intermediate_size=16, num_hidden_layers=1, vocab_size=16)
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)

    class Attention(ds.DeepseekV3Attention):   # as DeepseekV3DecoderLayer calls its self_attn
        def forward(self, x, position_embeddings, position_ids):
            return super().forward(x, position_embeddings, attention_mask=None)[0]

    attn = Attention(conf, 0).to(torch.bfloat16)
    got = _measure(attn, ds.DeepseekV3RotaryEmbedding(conf), s_, b_, h_)
    tau = s_ * b_
    # DeepseekV3RMSNorm is LlamaRMSNorm: the fp32 copy, the rsqrt, the bf16 normalised tensor
    for norm, r in (("q_a_layernorm", r_q), ("kv_a_layernorm", r_kv)):
        assert got.groups[f"layer.{norm}"] == 6 * tau * r + 4 * tau
        up_proj = norm.split("_a_")[0] + "_b_proj"             # it keeps its input, 2 tau r
        assert got.groups[f"layer.{up_proj}"] == 2 * tau * r
    # memsym's latents (each norm's input and the up-projection's input, 4 tau r) and the fp32
    # copies, against the four groups; named: the latent norms' fp32 statistics (4 tau each),
    # which memsym leaves out under every framework
    mla = dict(q_lora_rank=r_q, kv_lora_rank=r_kv, qk_head_dim=4, qk_pos_emb_head_dim=2,
               v_head_dim=4)
    ours = layer_activations(**BASE, mla=mla, hf_norms=True)
    kept = (ours["mla_latents"].expr + ours["mla_latent_norm_fp32_input"].expr).xreplace(
        {s: s_, b: b_, c: 1, t: 1})
    measured = sum(got.groups[f"layer.{m}"] for m in ("q_a_layernorm", "kv_a_layernorm",
                                                     "q_b_proj", "kv_b_proj"))
    assert measured == kept + 2 * 4 * tau


def test_deepspeed_final_norm_keeps_its_fp32_copy():
    from memsym.job import Layout, Training
    from memsym.model import preset, resolve
    from memsym.training.output_layer import output_layer_activations

    x = resolve(preset("llama2-7b"), seq_length=4096)

    def final(framework):
        out = output_layer_activations(x, Layout(), Training(framework=framework))
        return out["final_norm_input"]

    # LlamaModel.forward's self.norm is a LlamaRMSNorm (module docstring): its fp32 copy (4 tau h)
    # and the bf16 normalised tensor weight * keeps (2 tau h), not the bf16 input
    ds = final("deepspeed")
    assert sp.simplify(ds.expr - 6 * TAU * h) == 0
    assert ds.source.key == "hf-transformers-5-25"
    # Megatron-LM's fused norm keeps the bf16 input (Korthikanti §4.3: 2sbh/t, no SP here)
    assert sp.simplify(final("megatron").expr - 2 * TAU * h) == 0


@pytest.mark.torch
def test_llama_final_norm_is_measured():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.llama import modeling_llama as llama

    from memsym.measure import saved_bytes
    from memsym.terms.activations import output_activations

    s_, b_, h_ = 5, 3, 24
    norm = llama.LlamaRMSNorm(h_).to(torch.bfloat16)
    x = torch.randn(b_, s_, h_, dtype=torch.bfloat16, requires_grad=True)
    got = saved_bytes(norm, (x,)).total
    tau = s_ * b_
    assert got == 6 * tau * h_ + 4 * tau       # fp32 copy, bf16 product, fp32 rsqrt, by hand
    out = output_activations(norm="rmsnorm", fp32_norm="transformers")
    kept = out["final_norm_input"].expr + out["final_norm_statistics"].expr
    assert kept.xreplace({s: s_, b: b_, c: 1, h: h_}) == got


# --- the reader's norm kinds, by class ------------------------------------------------------
# transformers 5.25.0, each class's forward after the fp32 copy and the rsqrt multiply:
# "product": (self.weight * hidden_states).to(input_dtype) with a bf16 weight and an fp32
#   normalised tensor: the multiply keeps the fp32 tensor (4 tau w), the weight is a parameter;
#   beyond Llama's bf16 normalised tensor (2 tau w) that is 2 tau w.
# "scale": output * (1.0 + self.weight.float()) or self.weight.to(torch.float32) * x: the
#   multiply keeps the fp32 tensor and a fresh fp32 weight, 2 tau w + 4 w beyond Llama's.
# "plain": Llama's own self.weight * hidden_states.to(input_dtype) (MiniMaxM2RMSNorm lines
#   137-142 of modeling_minimax_m2.py, OlmoeRMSNorm lines 53-58 of modeling_olmoe.py): the
#   bf16 normalised tensor, nothing beyond Llama's.
NORM_KINDS = [("gpt_oss", "GptOssRMSNorm", "product", {}),
              ("olmo2", "Olmo2RMSNorm", "product", {}),
              ("olmo3", "Olmo3RMSNorm", "product", {}),
              ("flex_olmo", "FlexOlmoRMSNorm", "product", dict(num_experts=4,
                                                                    num_experts_per_tok=2)),
              ("helium", "HeliumRMSNorm", "scale", {}),
              ("vaultgemma", "VaultGemmaRMSNorm", "scale", {}),
              ("nemotron_h", "NemotronHRMSNorm", "scale", dict(
                  layers_block_type=["mamba", "attention", "mlp"], num_hidden_layers=3,
                  mamba_num_heads=4, mamba_head_dim=8, n_groups=1, ssm_state_size=8)),
              ("minimax_m2", "MiniMaxM2RMSNorm", "plain", dict(num_local_experts=4,
                                                               num_experts_per_tok=2)),
              ("olmoe", "OlmoeRMSNorm", "plain", dict(num_experts=4, num_experts_per_tok=2))]
EXCESS = {"plain": lambda tau, w: 0, "product": lambda tau, w: 2 * tau * w,
          "scale": lambda tau, w: 2 * tau * w + 4 * w}


TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, vocab_size=64)


def _tiny_model(mtype, extra):
    """transformers' own model of ``_tiny_config``'s sizes, in bf16."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    # no padding row (FlexOlmo's default pad_token_id lies past the tiny vocabulary)
    conf = transformers.AutoConfig.for_model(mtype, **{**TINY, **extra}, pad_token_id=None)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(conf).to(torch.bfloat16)


def _tiny_config(tmp_path, mtype, extra):
    transformers = pytest.importorskip("transformers")
    conf = transformers.AutoConfig.for_model(mtype, **{**TINY, **extra}).to_dict()
    # JSON has no Infinity (NemotronH's time_step_limit): leave such entries out
    conf = {k: v for k, v in conf.items() if not (isinstance(v, float) and abs(v) == float("inf"))
            and not (isinstance(v, (list, tuple)) and float("inf") in v)}
    return from_hf_config(write_config(tmp_path, conf, mtype))


@pytest.mark.torch
@pytest.mark.parametrize("mtype, cls, kind, extra", NORM_KINDS)
def test_each_norm_kind_is_read_and_measured(tmp_path, mtype, cls, kind, extra):
    import importlib

    torch = pytest.importorskip("torch")
    from memsym.measure import saved_bytes

    arch = _tiny_config(tmp_path, mtype, extra)
    assert (arch.norm_fp32_product, arch.norm_fp32_scale) == (kind == "product", kind == "scale")
    module = importlib.import_module(f"transformers.models.{mtype}.modeling_{mtype}")
    s_, b_, w = 5, 3, 24
    x = torch.randn(b_, s_, w, dtype=torch.bfloat16, requires_grad=True)
    got = saved_bytes(getattr(module, cls)(w).to(torch.bfloat16), (x,)).total
    tau = s_ * b_
    # by hand: Llama's 6 tau w + 4 tau, plus the class's excess (comment above)
    assert got == 6 * tau * w + 4 * tau + EXCESS[kind](tau, w)
    # memsym's one norm under the model's code: half of the layer's two norms' terms
    ours = layer_activations(**BASE, hf_norms="fp32_product" if kind == "product" else True,
                             norm_fp32=kind == "scale")
    one = sum(ours[k].expr for k in ("norm_inputs", "norm_statistics", "norm_fp32_input",
                                     "norm_fp32_output") if k in ours) / 2
    assert one.xreplace({s: s_, b: b_, c: 1, h: w}) == got


def test_olmo2_q_and_k_norms_keep_the_fp32_product(tmp_path):
    pytest.importorskip("transformers")
    arch = _tiny_config(tmp_path, "olmo2", {})
    plain = dataclasses.replace(arch, norm_fp32_product=False)
    # two layers; per layer two h-wide norms and the whole-projection Q and K norms
    # (Olmo2Attention: q_norm of a d_h, k_norm of g d_h), each 2 tau w more
    extra = (_layers(arch, "deepspeed") - _layers(plain, "deepspeed")).subs(L, 2)
    assert sp.simplify(extra - 2 * (2 * 2 * TAU * h + 2 * TAU * (a + g) * d_h / t)) == 0
    assert sp.simplify(_layers(arch, "megatron") - _layers(plain, "megatron")) == 0


# --- the Mamba layers' pre-norms ----------------------------------------------------------------
# Each Mamba layer of a transformers hybrid model normalises its input with the model's RMSNorm
# class and feeds the mixer's in_proj: NemotronHBlock.forward (self.norm, then self.mixer;
# modeling_nemotron_h.py lines 1064-1081), Zamba2MambaDecoderLayer.forward (input_layernorm,
# then self.mamba; modeling_zamba2.py 1116-1118), BambaDecoderLayer.forward (input_layernorm,
# then self.mamba).  In training the mixer hands in_proj's output to mamba_ssm's fused
# mamba_split_conv1d_scan_combined with the gated norm's weight (rmsnorm_weight=self.norm.weight,
# modeling_nemotron_h.py 670-690): that norm runs in the Triton kernel, which keeps its rstd,
# not an fp32 copy, so the gated norm classes' torch forward (an fp32 upcast) does not run.
# The pre-norm and in_proj keep, by hand: the fp32 copy (4 tau h), the rsqrt (4 tau), the
# class's normalised tensor (Llama's bf16 2 tau h; NemotronHRMSNorm's fp32 4 tau h and a fresh
# fp32 weight 4 h) and in_proj's bf16 input (2 tau h).
MAMBA_PRE_NORMS = [
    ("zamba2", "plain", dict(
        num_hidden_layers=2, layers_block_type=["mamba", "hybrid"], n_mamba_heads=4,
        mamba_headdim=16, mamba_d_state=8, num_mem_blocks=1, adapter_rank=4),
     lambda layer: (layer.input_layernorm, layer.mamba.in_proj)),
    ("nemotron_h", "scale", dict(
        layers_block_type=["mamba", "attention", "mlp"], num_hidden_layers=3, mamba_num_heads=4,
        mamba_head_dim=8, n_groups=1, ssm_state_size=8),
     lambda layer: (layer.norm, layer.mixer.in_proj)),
    ("bamba", "plain", dict(
        num_hidden_layers=2, attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=16,
        mamba_d_state=8, mamba_n_groups=1),
     lambda layer: (layer.input_layernorm, layer.mamba.in_proj))]


@pytest.mark.torch
@pytest.mark.parametrize("mtype, kind, extra, parts", MAMBA_PRE_NORMS)
def test_the_mamba_layers_pre_norm_is_measured(tmp_path, mtype, kind, extra, parts):
    torch = pytest.importorskip("torch")

    arch = _tiny_config(tmp_path, mtype, extra)
    assert (arch.norm_fp32_product, arch.norm_fp32_scale) == (False, kind == "scale")
    model = _tiny_model(mtype, extra)
    norm, in_proj = parts(model.model.layers[0])
    s_, b_, h_ = 5, 3, 32
    x = torch.randn(b_, s_, h_, dtype=torch.bfloat16, requires_grad=True)
    got = saved_storage_bytes(lambda: in_proj(norm(x)), list(model.parameters()))
    tau = s_ * b_
    assert got == 6 * tau * h_ + 4 * tau + EXCESS[kind](tau, h_) + 2 * tau * h_
    # memsym's Mamba layer under the model's code: its pre-norm's terms
    ours = hybrid_layer_activations(("mamba", None), **BASE, hf_norms=True,
                                    norm_fp32=kind == "scale")
    pre_norm = ("mamba_norm_inputs", "mamba_norm_statistics", "mamba_norm_fp32_output",
                "mamba_norm_fp32_input")     # mamba_norm_input is the gated norm's
    mine = sum(ours[key].expr for key in pre_norm if key in ours)
    assert mine.xreplace({s: s_, b: b_, c: 1, t: 1, h: h_}) == got
    # Megatron's Mamba layer (Transformer Engine's fused norm) keeps its input, output, rstd
    megatron = hybrid_layer_activations(("mamba", None), **BASE)
    assert sum(megatron[key].expr for key in pre_norm if key in megatron).xreplace(
        {s: s_, b: b_, c: 1, t: 1, h: h_}) == 4 * tau * h_ + 4 * tau


def test_deepspeed_keeps_every_nemotron_h_layers_norm(tmp_path):
    pytest.importorskip("transformers")
    arch = _tiny_config(tmp_path, "nemotron_h", MAMBA_PRE_NORMS[1][2])
    plain = dataclasses.replace(arch, norm_fp32_scale=False)
    # three layers (Mamba, attention, MLP) of one NemotronHRMSNorm each, the Mamba layer's
    # included; the first stage holds p micro-batches of each
    extra = _layers(arch, "deepspeed") - _layers(plain, "deepspeed")
    assert sp.simplify(extra - 3 * p * FP32_NORM) == 0
    # and each keeps its fp32 input copy beyond Megatron-LM's layer; the Mamba mixer's gated
    # norm and out_proj run inside mamba_ssm's fused kernel (NemotronHMamba2Mixer.forward,
    # rmsnorm_weight and outproj_weight), which keeps neither the norm's bf16 input nor
    # out_proj's (d_ssm wide each, split over t) that Megatron's ExtendedRMSNorm and out_proj keep
    # (at c = 1: at a symbolic c DeepSpeed's attention layer holds its Ulysses all-to-all
    # output too, memsym.terms.context_parallel; c > 1 is refused for a Mamba hybrid)
    assert sp.simplify((_layers(plain, "deepspeed") - _layers(plain, "megatron")
                        - 3 * p * COPY + p * 2 * 2 * s * b * d_ssm / t).xreplace({c: 1})) == 0


@pytest.mark.torch
@pytest.mark.parametrize("mtype, cls, kind, extra", NORM_KINDS)
def test_deepspeed_final_norm_follows_the_norm_kind(tmp_path, mtype, cls, kind, extra):
    torch = pytest.importorskip("torch")
    from memsym.job import Layout, Training
    from memsym.training.output_layer import output_layer_activations

    # the model's final norm (self.norm; NemotronHModel's norm_f) is the layers' class
    model = _tiny_model(mtype, extra)
    norm = getattr(model.model, "norm_f", None) or model.model.norm
    assert type(norm).__name__ == cls
    s_, b_, h_ = 5, 3, TINY["hidden_size"]
    x = torch.randn(b_, s_, h_, dtype=torch.bfloat16, requires_grad=True)
    got = saved_storage_bytes(lambda: norm(x), list(model.parameters()))
    tau = s_ * b_
    assert got == 6 * tau * h_ + 4 * tau + EXCESS[kind](tau, h_)     # by hand, as above
    out = output_layer_activations(_tiny_config(tmp_path, mtype, extra), Layout(),
                                   Training(framework="deepspeed"))
    kept = sum(term.expr for term in out if term.key.startswith("final_norm"))
    assert kept.xreplace({s: s_, b: b_, c: 1, h: h_}) == got
