"""Gemma 4 (``gemma4_text``, and the language model of a ``gemma4`` file) from config.json.

Oracle (``tests/hf_oracle.py``): transformers 5.25.0 builds ``AutoModelForCausalLM.from_config``
of the very file memsym reads, on the meta device, and ``sum(p.numel())`` of its parameters
(the vision and audio towers and their embedders left out) must equal memsym's count; the
shared checks of ``tests/test_hf_type_tables.py`` take this file's ``SMALL``.  The
full-attention layers' own head width and KV heads and their missing v_proj under
``attention_k_eq_v`` are memsym's ``"global"`` layers; per-layer input embeddings are
``tests/test_gemma4_ple.py``'s, KV sharing ``tests/test_gemma4_kv_sharing.py``'s.  No
network: every config is written here.
"""

from __future__ import annotations

import pytest
import sympy as sp

from memsym.errors import InvalidValueError
from memsym.model import (active_parameter_count, from_hf_config, parameter_count,
                          parameter_counts, stage_parameters)
from memsym.symbols import L, a, b, c, d_h, f, g, h, s, t
from memsym.terms.activations import layer_activations
from memsym.terms.gemma4_norms import gemma4_norm_excess

from hf_oracle import TOKENS, class_defaults, language_model_count, write_config
from in_process import estimate, refused_line

TYPES = {"gemma4_text", "gemma4"}

# one head size on every layer (global_head_dim = head_dim) and no per-layer input embeddings:
# what memsym reads
_TEXT = {"model_type": "gemma4_text", "hidden_size": 64, "num_hidden_layers": 6,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "global_head_dim": 16, "intermediate_size": 96, "vocab_size": 128,
         "max_position_embeddings": 64, "hidden_size_per_layer_input": 0, **TOKENS}
_MOE = {"enable_moe_block": True, "num_experts": 4, "top_k_experts": 2,
        "moe_intermediate_size": 24}
# Gemma4VisionConfig with small sizes (its tower is not counted)
_VISION = {"hidden_size": 32, "intermediate_size": 32, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16}

SMALL = {
    "gemma4-text": _TEXT,
    "gemma4-text-bias-untied": {**_TEXT, "attention_bias": True, "tie_word_embeddings": False},
    "gemma4-text-moe": {**_TEXT, **_MOE},
    "gemma4-text-moe-untied": {**_TEXT, **_MOE, "tie_word_embeddings": False},
    # to_dict()'s spelling: per_layer_config by zero-padded layer index, no global_head_dim
    "gemma4-text-per-layer-config": {
        **{k: v for k, v in _TEXT.items() if k != "global_head_dim"},
        "per_layer_config": {"02": {"head_dim": 16}, "05": {"head_dim": 16,
                                                            "num_key_value_heads": 2}}},
    # every layer sliding but the last, which Gemma4TextConfig forces to full attention
    "gemma4-text-layer-types": {**_TEXT, "layer_types": ["sliding_attention"] * 6},
    # num_global_key_value_heads is read only with attention_k_eq_v
    "gemma4-text-global-kv-ignored": {**_TEXT, "num_global_key_value_heads": 1},
    # the shared layers' double-wide MLP needs shared layers: none here
    "gemma4-text-double-wide-unused": {**_TEXT, "use_double_wide_mlp": True},
    # the full-attention layer (5, Gemma4TextConfig's every sixth) of its own shape: memsym's
    # "global" layer
    "gemma4-text-global-head": {**_TEXT, "global_head_dim": 32},
    "gemma4-text-k-eq-v": {**_TEXT, "attention_k_eq_v": True},
    "gemma4-text-k-eq-v-global-kv": {**_TEXT, "attention_k_eq_v": True, "global_head_dim": 32,
                                     "num_global_key_value_heads": 1, "attention_bias": True},
    "gemma4-text-per-layer-kv": {**_TEXT, "per_layer_config": {"5": {"num_key_value_heads": 1}}},
    # every sliding layer of its own head width: the model's, the full-attention layers global
    "gemma4-text-per-layer-sliding": {**_TEXT, "per_layer_config": {
        str(i): {"head_dim": 8} for i in range(5)}},
    "gemma4-global-moe": {"model_type": "gemma4", "text_config": {
        **_TEXT, **_MOE, "global_head_dim": 32, "attention_k_eq_v": True,
        "num_global_key_value_heads": 1}},
    "gemma4": {"model_type": "gemma4", "vision_config": _VISION, "text_config": _TEXT},
    "gemma4-untied": {"model_type": "gemma4", "tie_word_embeddings": False,
                      "text_config": _TEXT},
    "gemma4-moe": {"model_type": "gemma4", "text_config": {**_TEXT, **_MOE}},
    # Gemma4ForConditionalGeneration ties lm_head by the top-level field (default True)
    "gemma4-text-config-tie-ignored": {"model_type": "gemma4", "text_config": {
        **_TEXT, "tie_word_embeddings": False}},
}
# no published Gemma 4 config.json is stored here (no network): the dicts shaped as the
# 26B-A4B's (below) and the E2B's and E4B's (tests/test_gemma4_kv_sharing.py) stand in
REAL: dict = {}


def test_the_small_configs_cover_the_types():
    assert {cfg["model_type"] for cfg in SMALL.values()} == TYPES


def test_a_dense_layer_counted_by_hand(tmp_path):
    # Gemma4TextAttention: q 64 x 4*16, k and v 64 x 2*16, o 4*16 x 64, q_norm and k_norm of
    # 16, v_norm without weight; Gemma4TextMLP: 3 x 64 x 96; four RMSNorms of 64; the layer's
    # layer_scalar is a buffer.  Embedding 128 x 64 (tied), final norm 64.
    layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 2 * 16 + 3 * 64 * 96 + 4 * 64
    arch = from_hf_config(write_config(tmp_path, _TEXT))
    assert parameter_count(arch) == 128 * 64 + 6 * layer + 64 == 194304


def test_the_moe_block_counted_by_hand(tmp_path):
    # beside the dense MLP: Gemma4TextExperts 4 x (2*24 x 64 + 64 x 24), Gemma4TextRouter
    # proj 64 x 4, scale 64, per_expert_scale 4 (its norm without weight), and three RMSNorms
    # of 64 (post_feedforward_layernorm_1/_2, pre_feedforward_layernorm_2)
    extra = 4 * (2 * 24 * 64 + 64 * 24) + 64 * 4 + 64 + 4 + 3 * 64
    arch = from_hf_config(write_config(tmp_path, {**_TEXT, **_MOE}))
    assert parameter_count(arch) == 194304 + 6 * extra == 307992
    counts = parameter_counts(arch)
    assert counts["experts"] == 6 * 4 * (3 * 24 * 64)
    assert counts["shared_experts"] == 6 * 3 * 64 * 96      # the dense MLP beside the experts
    assert arch.moe_router_topk == 2


@pytest.mark.torch
def test_the_26b_a4b_shapes_with_one_head_size_match_transformers(tmp_path):
    # google/gemma-4-26B-A4B's sizes with its full-attention layers' heads made the sliding
    # layers' (256 wide, 8 KV heads, a v_proj): what memsym reads, at full scale, exactly
    text = {**_26B_SHAPED["text_config"], "global_head_dim": 256,
            "num_global_key_value_heads": 8, "attention_k_eq_v": False}
    path = write_config(tmp_path, {"model_type": "gemma4", "text_config": text})
    arch = from_hf_config(path)
    assert parameter_count(arch) == language_model_count(path) == 25_161_049_600
    # 30 layers of 128 experts of 3 x 2816 x 704, top 8 of them active
    experts = 30 * 128 * 3 * 2816 * 704
    assert parameter_count(arch) - active_parameter_count(arch) == experts * 120 // 128


def test_a_vision_language_file_says_what_it_counts(tmp_path):
    arch = from_hf_config(write_config(tmp_path, {"model_type": "gemma4", "text_config": {
        k: v for k, v in _TEXT.items() if k not in ("hidden_size", "vocab_size")}}))
    notes = " ".join(arch.extra["notes"])
    assert "(text_config) only; the vision and audio encoders" in notes
    assert "Gemma4TextConfig defaults (hidden_size=2304, vocab_size=262144)" in notes
    assert arch.hidden_size == 2304 and arch.vocab_size == 262144


def test_an_estimate_runs(tmp_path, capsys):
    # the memory terms follow from the shapes: the MoE layers' estimate runs end to end
    for cfg in (_TEXT, {**_TEXT, **_MOE}, SMALL["gemma4-text-per-layer-kv"],
                SMALL["gemma4-text-k-eq-v-global-kv"]):
        path = write_config(tmp_path, cfg, f"e{len(cfg)}")
        code, out, err = estimate(capsys, str(path), "--gpu", "h100-80gb", "--seq-length",
                                  "64", "--micro-batch-size", "1")
        assert code == 0 and "GPU memory" in out, err


# shaped as google/gemma-4-26B-A4B's text_config (its sizes as public readers of that file
# transcribe them: transformers' model of this very dict, not a published total, is what any
# count here is checked against): the MoE block beside a dense MLP, full-attention
# layers of 512-wide heads and 2 KV heads, their keys used as values
_26B_SHAPED = {"model_type": "gemma4", "text_config": {
    "model_type": "gemma4_text", "hidden_size": 2816, "num_hidden_layers": 30,
    "intermediate_size": 2112, "num_attention_heads": 16, "num_key_value_heads": 8,
    "num_global_key_value_heads": 2, "head_dim": 256, "global_head_dim": 512,
    "vocab_size": 262144, "max_position_embeddings": 262144, "num_kv_shared_layers": 0,
    "hidden_size_per_layer_input": 0, "attention_k_eq_v": True, "enable_moe_block": True,
    "num_experts": 128, "top_k_experts": 8, "moe_intermediate_size": 704,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5}}


@pytest.mark.parametrize("cfg,match", [
    # one sliding layer unlike the others: Gemma4TextConfig.get_full_layer_config refuses it
    ({**_TEXT, "per_layer_config": {"1": {"head_dim": 8}}},
     "layer 1 .sliding_attention. another head size.*not homogeneous"),
    ({**_TEXT, "per_layer_config": {"5": {"intermediate_size": 8}}}, "overrides other than"),
    ({**_TEXT, "per_layer_config": {"6": {"head_dim": 16}}}, "keys must be layer indices"),
    ({**_TEXT, "per_layer_config": [1]}, "'per_layer_config' must be an object"),
    ({**_TEXT, "layer_types": ["full_attention"] * 5}, "'layer_types' must list 6"),
    ({**_TEXT, "layer_types": ["chunked_attention"] * 6}, "'layer_types' must list 6"),
    ({**_TEXT, "enable_moe_block": True}, "enable_moe_block without 'num_experts'"),
    ({**_TEXT, "head_dim": None}, "'head_dim' is null"),
    ({**_TEXT, **_MOE, "top_k_experts": None}, "without 'top_k_experts'"),
])
def test_what_memsym_does_not_model_is_refused_in_one_line(tmp_path, cfg, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value) and "did you mean" not in str(err.value)


def test_a_global_layer_counted_by_hand(tmp_path):
    # layer 5 (full attention) of 32-wide heads, 1 KV head, no v_proj (attention_k_eq_v),
    # biased: q 64 x 4*32 + 128, k 64 x 32 + 32, o 4*32 x 64 + 64, q_norm and k_norm of 32;
    # the five sliding layers as in the dense count above, biased: q 64 + k, v 32 each + o 64
    sliding = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 2 * 16 + 64 + 2 * 32 + 64
    glob = 64 * 128 + 128 + 64 * 32 + 32 + 128 * 64 + 64 + 2 * 32
    rest = 3 * 64 * 96 + 4 * 64
    arch = from_hf_config(write_config(tmp_path, SMALL["gemma4-text-k-eq-v-global-kv"]))
    assert arch.layer_mixers == ("attention",) * 5 + ("global",)
    assert parameter_count(arch) == 128 * 64 + 5 * sliding + glob + 6 * rest + 64
    assert parameter_counts(arch)["attention"] == 5 * sliding + glob


def test_the_global_layer_is_on_its_pipeline_stage(tmp_path):
    # six layers on two stages: the full-attention layer 5 on the second; the stages differ by
    # the global layer's attention (32-wide heads, as the sliding ones' 16 but for the width:
    # q, k, v, o twice as wide, q_norm and k_norm of 32) and the final norm; the first
    # stage's embedding and the last's copy of it for the tied output layer cancel
    arch = from_hf_config(write_config(tmp_path, SMALL["gemma4-text-global-head"]))
    first, last = (stage_parameters(arch, p=2, stage=i, pad_vocab=False) for i in (0, 1))
    assert tuple(first.layers) == (0, 1, 2) and tuple(last.layers) == (3, 4, 5)
    wider = (64 * 128 + 2 * 64 * 64 + 128 * 64 + 2 * 32) - (64 * 64 + 2 * 64 * 32 + 64 * 64
                                                             + 2 * 16)
    assert last.total - first.total == wider + 64


@pytest.mark.torch
def test_the_class_defaults_without_per_layer_inputs_match_transformers(tmp_path):
    # Gemma4TextConfig() with hidden_size_per_layer_input 0: 30 layers, every sixth full
    # attention of 512-wide heads beside the sliding layers' 256
    path = write_config(tmp_path, {**class_defaults("gemma4_text"),
                                   "hidden_size_per_layer_input": 0})
    arch = from_hf_config(path)
    assert parameter_count(arch) == language_model_count(path) == 3_010_758_400
    assert arch.layer_mixers.count("global") == 5
    # with its per-layer input embeddings (256): tests/test_gemma4_ple.py


@pytest.mark.torch
def test_the_26b_a4b_shapes_match_transformers(tmp_path):
    # its five full-attention layers: 512-wide heads, 2 KV heads, no v_proj
    path = write_config(tmp_path, _26B_SHAPED)
    arch = from_hf_config(path)
    assert parameter_count(arch) == language_model_count(path) == 25_233_141_760
    # by hand from the one-head-size count above (25,161,049,600): each full-attention layer
    # q 2816 x 16*512, k 2816 x 2*512, o 16*512 x 2816, q/k norms of 512, for q 2816 x 16*256,
    # k and v 2816 x 8*256, o, q/k norms of 256
    glob = 2 * 2816 * 16 * 512 + 2816 * 2 * 512 + 2 * 512
    sliding = 2 * 2816 * 16 * 256 + 2 * 2816 * 8 * 256 + 2 * 256
    assert parameter_count(arch) == 25_161_049_600 + 5 * (glob - sliding)


# --- the activations under transformers' own code ---------------------------------------------
# Gemma4TextDecoderLayer measured as tests/test_hf_norms.py measures Gemma 3's: memsym's layer
# under the model's code (four fp32 1 x weight norms, two of them post-norms, fp32 Q and K
# norms) plus Gemma 4's own norms (memsym.terms.gemma4_norms) plus the two differences that
# test names for Gemma 3: the activation's output the product with up_proj keeps, 2 tau f, and
# RoPE's bf16 cos and sin tables, computed once per model (a full-attention layer's
# "proportional" RoPE builds them d_h wide, zeros past its rotated quarter)
_TAU = s * b / c
_SHAPES = [(5, 2, 4, 2, 8, 12), (3, 1, 2, 1, 8, 4), (4, 3, 6, 3, 16, 8), (7, 1, 4, 4, 8, 6)]
_FLAGS = dict(gated=True, flash=True, norm="rmsnorm", dropout=False, qk_norm=True,
              qk_norm_fp32=True, norm_fp32=True, post_norms=True, hf_norms=True)


def layer_saved_bytes(layer, conf, layer_type: str, x):
    """The bytes transformers' ``Gemma4TextDecoderLayer`` saves for backward on input ``x``
    (``memsym.measure.saved_bytes``, by submodule), its RoPE tables made without grad as the
    model makes them once per step."""
    import torch
    from transformers.models.gemma4 import modeling_gemma4 as g4

    from memsym.measure import saved_bytes

    rope = g4.Gemma4TextRotaryEmbedding(conf)
    b_, s_ = x.shape[:2]
    pos = torch.arange(s_)[None].expand(b_, s_)

    class Called(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            with torch.no_grad():
                tables = rope(x, pos, layer_type=layer_type)
            return self.layer(x, position_embeddings=tables, position_ids=pos,
                              shared_kv_states={}, attention_mask=None)

    return saved_bytes(Called(), (x,), depth=2)


@pytest.mark.torch
@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("layer_type", ["full_attention", "sliding_attention"])
def test_the_decoder_layer_is_memsym_plus_named_differences(shape, layer_type):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.gemma4 import modeling_gemma4 as g4

    s_, b_, a_, g_, d_, f_ = shape
    conf = transformers.Gemma4TextConfig(
        hidden_size=a_ * d_, num_attention_heads=a_, num_key_value_heads=g_, head_dim=d_,
        global_head_dim=d_, intermediate_size=f_, num_hidden_layers=2, vocab_size=16,
        max_position_embeddings=64, layer_types=[layer_type, "full_attention"],
        hidden_size_per_layer_input=0, vocab_size_per_layer_input=16)
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = g4.Gemma4TextDecoderLayer(conf, 0).to(torch.bfloat16)
    x = torch.randn(b_, s_, a_ * d_, dtype=torch.bfloat16, requires_grad=True)
    got = layer_saved_bytes(layer, conf, layer_type, x)
    # one norm of h by hand: Gemma 3's 8 tau h + 4 tau + 4 h and torch.pow's mean square
    tau, h_ = s_ * b_, a_ * d_
    assert got.groups["layer.input_layernorm"] == 8 * tau * h_ + 8 * tau + 4 * h_
    ours = layer_activations(**_FLAGS).expr + gemma4_norm_excess(_TAU, 1).expr
    named = 2 * _TAU * f + 2 * 2 * _TAU * d_h
    at = {s: s_, b: b_, a: a_, g: g_, d_h: d_, f: f_, h: h_, c: 1, t: 1}
    assert got.total == (ours + named).xreplace(at)


def _layers(arch, framework):
    from memsym.training import Training, stage_activations

    return stage_activations(arch, training=Training(framework=framework))[
        "layer_activations"].expr


def test_a_job_of_transformers_code_keeps_gemma4s_norms(tmp_path):
    import dataclasses

    arch = from_hf_config(write_config(tmp_path, _TEXT))
    # the same shapes read as another Gemma's layer: Gemma 3's norms, not Gemma 4's
    gemma3 = dataclasses.replace(arch, extra={**arch.extra, "hf_model_type": "gemma3_text"})
    extra = _layers(arch, "deepspeed") - _layers(gemma3, "deepspeed")
    # six layers, each 16 tau + 4 tau (a + g) + 4 tau g d_h + 8 tau g (t = 1, no SP)
    per_layer = 16 * _TAU + 4 * _TAU * (a + g) + 4 * _TAU * g * d_h + 8 * _TAU * g
    assert sp.simplify((extra - 6 * per_layer).subs({t: 1, L: 6})) == 0
    # Megatron-LM runs its own layer: no Gemma 4 norm
    assert sp.simplify(_layers(arch, "megatron") - _layers(gemma3, "megatron")) == 0


@pytest.mark.parametrize("case,extra,words", [
    ("gemma4-text-per-layer-kv", ("--optimizer", "muon"), "optimizer muon on a model whose layers differ (attention, global)"),
    ("gemma4-text-per-layer-kv", ("--tp", "2"),
     "t=2 must divide the global attention layers' KV heads"),
])
def test_what_a_global_layer_lacks_is_refused_in_one_line(tmp_path, capsys, case, extra, words):
    # its parameters and activations are counted (above); Muon of its layers is not, nor a
    # tensor-parallel split of its one KV head
    path = write_config(tmp_path, SMALL[case])
    err = refused_line(capsys, ["estimate", str(path), "--gpu", "h100-80gb", "--seq-length",
                                "64", "--micro-batch-size", "1", *extra])
    assert words in err


def _step(arch, framework="megatron"):
    from memsym.job_record import Layout
    from memsym.timing.step import step_time
    from memsym.training import Training

    training = Training(framework=framework, seq_length=64, micro_batch_size=1,
                        global_batch_size=1)
    return step_time(arch, Layout(), training, "h100-80gb")


@pytest.mark.parametrize("framework", ["megatron", "deepspeed"])
def test_global_layers_of_the_models_shapes_take_the_plain_step_time(tmp_path, framework):
    import dataclasses

    from memsym.model import Architecture

    # the full-attention layer as a "global" one of the model's own shapes (KV projections
    # too): priced as the plain layer; to the last bit against the same six layers read as a
    # hybrid of attention layers, the whole step; against the plain model every layer part,
    # but for the hybrid's mean over kinds (n / L shares: the last bit of a float sum) and
    # its optimizer step (the plain time model's weights are its 2h-norm count, a hybrid's
    # each kind's exact count, memsym.timing.linear_attention.priced_kinds)
    arch = from_hf_config(write_config(tmp_path, _TEXT))
    fields = {k.name: getattr(arch, k.name) for k in dataclasses.fields(Architecture)}
    as_global = Architecture(**{**fields, "layer_mixers": ("attention",) * 5 + ("global",)})
    hybrid = Architecture(**{**fields, "layer_mixers": ("attention",) * 6})
    got = _step(as_global, framework)
    assert got.total == _step(hybrid, framework).total
    plain = _step(arch, framework).parts
    assert {k: v for k, v in got.parts.items() if k != "optimizer"} == pytest.approx(
        {k: v for k, v in plain.items() if k != "optimizer"}, rel=1e-12, abs=0)


def test_a_wider_global_layers_extra_flops_by_hand(tmp_path):
    from memsym.timing.gemm import shape_of
    from memsym.timing.model_counts import forward_flops_per_token

    # the global layer (one of six) of 2 d_h = 32 and one KV head, keys read as values:
    # qkv [T, h] x [h, (a + g_g) d_hg], o_proj [T, a d_hg] x [a d_hg, h], the attention core
    # 2 s a (d_hg + d_hg) a token (no causal skip), against the plain layer's (a + 2g) d_h,
    # a d_h, 2 s a (d_h + d_h)
    plain = from_hf_config(write_config(tmp_path, _TEXT, sub="plain"))
    wide = from_hf_config(write_config(tmp_path, SMALL["gemma4-text-k-eq-v-global-kv"],
                                       sub="wide"))
    h_, a_, g_, d_, s_ = 64, 4, 2, 16, 64
    qkv = 2 * h_ * ((a_ + 1) * 2 * d_ - (a_ + 2 * g_) * d_)
    proj = 2 * (a_ * 2 * d_ - a_ * d_) * h_
    core = 2 * s_ * a_ * (2 * 2 * d_ - 2 * d_)
    got = forward_flops_per_token(shape_of(wide), s_, causal=False) \
        - forward_flops_per_token(shape_of(plain), s_, causal=False)
    assert got == qkv + proj + core    # attention_bias: its adds are no GEMM FLOPs


def test_lora_on_a_model_with_global_layers_is_refused_in_one_line(tmp_path):
    from memsym.model import lora_parameter_count

    arch = from_hf_config(write_config(tmp_path, SMALL["gemma4-text-global-head"]))
    with pytest.raises(InvalidValueError, match="LoRA adapters of 'gemma4_text'") as err:
        lora_parameter_count(arch, 8)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("framework", ["deepspeed", "megatron"])
def test_global_layers_of_the_models_shapes_keep_what_its_layers_keep(tmp_path, framework):
    import dataclasses

    from memsym.training import Training, stage_activations

    # the full-attention layer as a "global" one of the sliding layers' own shapes: the
    # hybrid path (its attention, MLP and Gemma 4's norms per layer kind) keeps what the
    # plain layer does, under transformers' code and Megatron's
    from memsym.model import Architecture
    from memsym.symbols import d_hg, g_g, p as p_

    arch = from_hf_config(write_config(tmp_path, _TEXT))
    as_global = Architecture(**{**{k.name: getattr(arch, k.name)
                                   for k in dataclasses.fields(Architecture)},
                                "layer_mixers": ("attention",) * 5 + ("global",)})
    for recompute in ("none", "selective", "full"):
        training = Training(framework=framework, recompute=recompute)
        plain, mixed = (stage_activations(m, training=training)["layer_activations"].expr
                        for m in (arch, as_global))
        # one stage (p = 1); the global symbols at the model's own head width and KV heads
        same = {L: 6, p_: 1, d_hg: d_h, g_g: g}
        assert sp.simplify((plain - mixed).subs(same)) == 0, recompute


@pytest.mark.torch
@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("k_eq_v", [False, True])
def test_a_global_decoder_layer_is_memsym_plus_named_differences(shape, k_eq_v):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.gemma4 import modeling_gemma4 as g4

    from memsym.symbols import d_hg, g_g
    from memsym.terms.global_attention import as_global
    from memsym.terms.mamba import hybrid_layer_activations

    # a full-attention layer of twice the sliding layers' head width and one KV head (through
    # per_layer_config, or attention_k_eq_v's num_global_key_value_heads without v_proj, its
    # keys' projection read by v_norm as by k_norm, each norm keeping its own fp32 copy):
    # Gemma4TextDecoderLayer against memsym's global layer
    s_, b_, a_, g_, d_, f_ = shape
    heads = (dict(attention_k_eq_v=True, num_global_key_value_heads=1) if k_eq_v else
             dict(per_layer_config={"1": {"head_dim": 2 * d_, "num_key_value_heads": 1}}))
    conf = transformers.Gemma4TextConfig(
        hidden_size=a_ * d_, num_attention_heads=a_, num_key_value_heads=g_, head_dim=d_,
        global_head_dim=2 * d_, intermediate_size=f_, num_hidden_layers=2, vocab_size=16,
        max_position_embeddings=64, layer_types=["sliding_attention", "full_attention"],
        hidden_size_per_layer_input=0, vocab_size_per_layer_input=16, **heads)
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = g4.Gemma4TextDecoderLayer(conf, 1).to(torch.bfloat16)
    assert layer.self_attn.head_dim == 2 * d_ and layer.self_attn.k_proj.out_features == 2 * d_
    assert (layer.self_attn.v_proj is None) == k_eq_v
    x = torch.randn(b_, s_, a_ * d_, dtype=torch.bfloat16, requires_grad=True)
    got = layer_saved_bytes(layer, conf, "full_attention", x)
    ours = hybrid_layer_activations(("global", False), **_FLAGS).expr \
        + as_global(gemma4_norm_excess(_TAU, 1).expr)
    named = 2 * _TAU * f + as_global(2 * 2 * _TAU * d_h)
    at = {s: s_, b: b_, a: a_, g: g_, d_h: d_, d_hg: 2 * d_, g_g: 1, f: f_, h: a_ * d_,
          c: 1, t: 1}
    assert got.total == (ours + named).xreplace(at)


@pytest.mark.torch
def test_a_null_per_layer_config_keeps_every_layer_at_head_dim(tmp_path):
    # configuration_gemma4.py:207 (transformers 5.25.0): a per_layer_config key, null
    # included, skips the global_head_dim override, so the full-attention layer keeps head_dim
    cfg = {"model_type": "gemma4_text", "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96,
           "num_hidden_layers": 2, "vocab_size": 32, "per_layer_config": None,
           "layer_types": ["sliding_attention", "full_attention"],
           "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 32}
    path = write_config(tmp_path, cfg)
    assert parameter_count(from_hf_config(path)) == language_model_count(path)
