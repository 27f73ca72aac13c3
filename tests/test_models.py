"""Architectures -> exact parameter counts, presets, stages and the config.json reader.

Every expected total is a published number (Hugging Face safetensors metadata "Num parameters",
model cards, papers); the source of each is cited next to it.  Per-layer checks are derived by
hand from the tensor shapes of the checkpoints, written out in the test.
"""

from __future__ import annotations

import json
from math import ceil

import pytest
import sympy as sp

from memsym.errors import DivisibilityError, InvalidValueError, UnknownNameError
from memsym.model import (COMPONENTS, PRESETS, Architecture, active_parameter_count,
                           check_layout, from_hf_config, gpt_parameter_expression,
                           layer_parameters, moe_layer_pattern, padded_vocab_size,
                           parameter_count, parameter_counts, parameter_expression,
                           parameter_values, preset, resolve, resolve_model,
                           stage_layers, stage_parameters, symbolic_parameters)
from memsym.symbols import L, V, h, registry, s_max

# --------------------------------------------------------------------------------------------
# published totals
# --------------------------------------------------------------------------------------------

PUBLISHED = {
    # Hugging Face safetensors metadata (model page "Model size" / API safetensors.total) of
    # meta-llama/Llama-2-7b-hf, -13b-hf, -70b-hf: 6,738,415,616 / 13,015,864,320 / 68,976,648,192.
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    # HF safetensors of meta-llama/Meta-Llama-3-8B, Meta-Llama-3-70B, Llama-3.1-405B.
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3-405b": 405_853_388_800,
    # HF safetensors of mistralai/Mistral-7B-v0.1 (vocab 32000; v0.3 with 32768 has 7,248,023,552).
    "mistral-7b": 7_241_732_096,
    # HF safetensors of mistralai/Mixtral-8x7B-v0.1 ("46.7B").
    "mixtral-8x7b": 46_702_792_704,
    # HF safetensors of Qwen/Qwen3-30B-A3B ("30.5B") and Qwen/Qwen3-8B ("8.2B").
    "qwen3-30b-a3b": 30_532_122_624,
    "qwen3-8b": 8_190_735_360,
    # HF safetensors of Qwen/Qwen3-235B-A22B ("235B"; API safetensors.total 235,093,634,560).
    "qwen3-235b-a22b": 235_093_634_560,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_totals_equal_published(name):
    assert parameter_count(preset(name)) == PUBLISHED[name]


def test_deepseek_v3_main_model_and_mtp():
    arch = preset("deepseek-v3")
    # DeepSeek-V3 README: "671B of the Main Model weights and 14B of the MTP Module weights";
    # the exact main-model count 671,026,419,200 is the sum of the checkpoint's layer 0-60 tensors.
    assert parameter_count(arch, mtp=False) == 671_026_419_200
    # HF safetensors metadata of deepseek-ai/DeepSeek-V3 reports 684,531,386,000 stored elements.
    # Independent reconciliation by hand: the stored MTP layer (model.layers.61) also keeps its
    # own copies of embed_tokens and shared_head.head (V*h each), and every FP8 linear weight of
    # the decoder and MTP layers has one fp32 weight_scale_inv per 128x128 block.
    hd, V_ = 7168, 129280

    def blocks(r, c):
        return ceil(r / 128) * ceil(c / 128)

    attn = (blocks(1536, hd) + blocks(128 * 192, 1536) + blocks(512 + 64, hd)
            + blocks(128 * 256, 512) + blocks(hd, 128 * 128))
    dense_mlp = 3 * blocks(18432, hd)
    moe_mlp = (256 + 1) * 3 * blocks(2048, hd)
    scales = 62 * attn + 3 * dense_mlp + 59 * moe_mlp          # 61 layers + the MTP layer
    assert scales == 41_540_496
    assert parameter_count(arch) + 2 * V_ * hd + scales == 684_531_386_000
    # README's "685B = 671B + 14B MTP" is 684.5B rounded minus 671.0B: the MTP layer itself
    # holds 11.6B (13.5B with its stored embedding/head copies)
    counts = parameter_counts(arch)
    assert round((counts["mtp"] + counts["mtp_experts"]) / 1e8) == 116
    # "37B activated" (paper abstract): routed experts 8 of 256, without the input embedding
    assert round(active_parameter_count(arch, embedding=False) / 1e9) == 37


def test_mla_attention_per_layer():
    # DeepSeek-V3 layer-0 self_attn tensors: q_a_proj 1536x7168, q_a_layernorm 1536,
    # q_b_proj (128*192)x1536, kv_a_proj_with_mqa (512+64)x7168, kv_a_layernorm 512,
    # kv_b_proj (128*256)x512, o_proj 7168x(128*128).
    by_hand = (1536 * 7168 + 1536 + 128 * 192 * 1536 + 576 * 7168 + 512 + 128 * 256 * 512
               + 7168 * 128 * 128)
    assert by_hand == 187_107_328
    expr = symbolic_parameters("deepseek-v3", "attention", per_layer=True)
    assert expr.xreplace(parameter_values(preset("deepseek-v3"))) == 187_107_328
    # the per-layer split: down projections and latent norms are duplicated across TP ranks
    lp = layer_parameters(preset("deepseek-v3"), moe=False)
    dup = 1536 * 7168 + 1536 + 576 * 7168 + 512
    assert lp["replicated"] == dup + 2 * 7168


def test_gpt3_175b():
    # Brown et al. 2020 Table 2.1: n_layers 96, d_model 12288, n_heads 96, context 2048, vocab
    # 50257, "175.0B". Counted by hand: 96 (12 h^2 + 13 h) + (V + s) h + 2h (final LayerNorm).
    hd = 12288
    by_hand = 96 * (12 * hd**2 + 13 * hd) + (50257 + 2048) * hd + 2 * hd
    assert parameter_count(preset("gpt3-175b")) == by_hand == 174_604_259_328
    assert round(by_hand / 1e9) == 175


def test_gpt2_small_from_config(tmp_path):
    # openai-community/gpt2 config.json; HF safetensors: 124,439,808 (tied lm_head not stored).
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768,
           "n_head": 12, "n_layer": 12, "n_positions": 1024, "n_ctx": 1024, "vocab_size": 50257,
           "n_inner": None, "activation_function": "gelu_new"}
    assert parameter_count(from_hf_config(_write(tmp_path, cfg))) == 124_439_808


def test_gpt_oss_120b():
    # OpenAI gpt-oss model card (2025), Table 1: 116.83B total; 5.13B active excluding the
    # embedding; checkpoint bias, sinks and router shapes from the HF config.json (hidden 2880,
    # 36 layers, 64 heads of 64, 8 KV heads, 128 experts of 2880, top-4, vocab 201088, untied).
    arch = preset("gpt-oss-120b")
    total = parameter_count(arch)
    assert round(total / 1e7) == 11_683
    assert round(active_parameter_count(arch, embedding=False) / 1e7) == 513
    # by hand: attention with q/k/v/o biases and 64 sinks; experts with gate_up (2f) and down (h)
    # biases; router with bias; 2 RMSNorms per layer; final norm; untied embeddings.
    hd, f = 2880, 2880
    attn = hd * 4096 + 4096 + 2 * (hd * 512 + 512) + 4096 * hd + hd + 64
    experts = 128 * (3 * hd * f + 2 * f + hd)
    router = hd * 128 + 128
    assert total == 36 * (attn + experts + router + 2 * hd) + hd + 2 * 201088 * hd


def test_active_parameters_mixtral():
    # Mistral AI: "12.9B active parameters"; by hand: total - 32 layers x 6 unused experts
    by_hand = 46_702_792_704 - 32 * 6 * 3 * 4096 * 14336
    assert active_parameter_count(preset("mixtral-8x7b")) == by_hand == 12_879_925_248


def test_qwen3_30b_a3b_active():
    # Qwen/Qwen3-30B-A3B model card: "30.5B in total and 3.3B activated".  Counted with the
    # embedding, 8 of 128 experts: 3,353,032,704, i.e. 3.3B truncated (3.4B rounded) - the card
    # truncates; without the input embedding it would be 3.04B.
    active = active_parameter_count(preset("qwen3-30b-a3b"))
    assert active == 30_532_122_624 - 48 * 120 * 3 * 2048 * 768 == 3_353_032_704
    assert int(active / 1e8) == 33


def test_qwen3_235b_a22b_by_hand_and_active():
    # Qwen/Qwen3-235B-A22B config.json by hand: per layer q, o 2 * 4096 * 64 * 128, k, v
    # 2 * 4096 * 4 * 128, q/k norms 2 * 128, 2 norms 2 * 4096, router 4096 * 128, experts
    # 128 * 3 * 4096 * 1536; 94 layers; untied embedding and head 2 * 151936 * 4096; final norm
    per_layer = (2 * 4096 * 8192 + 2 * 4096 * 512 + 256 + 8192 + 4096 * 128
                 + 128 * 3 * 4096 * 1536)
    total = 94 * per_layer + 2 * 151936 * 4096 + 4096
    assert parameter_count(preset("qwen3-235b-a22b")) == total == 235_093_634_560
    # model card: "235B in total and 22B activated" (8 of 128 experts)
    active = active_parameter_count(preset("qwen3-235b-a22b"))
    assert active == total - 94 * 120 * 3 * 4096 * 1536
    assert round(active / 1e9) == 22


def test_kimi_k2_by_hand_and_published():
    # moonshotai/Kimi-K2-Instruct config.json by hand (DeepSeek-V3's MLA and MoE shapes):
    # MLA per layer q_a 7168 x 1536 + its norm, q_b 1536 x 64 x (128 + 64), kv_a 7168 x (512
    # + 64) + its norm 512, kv_b 512 x 64 x (128 + 128), o 64 x 128 x 7168
    attn = (7168 * 1536 + 1536 + 1536 * 64 * 192 + 7168 * 576 + 512 + 512 * 64 * 256
            + 64 * 128 * 7168)
    assert attn == 101_124_096
    dense_mlp = 3 * 7168 * 18432                         # first_k_dense_replace 1
    moe = (384 + 1) * 3 * 7168 * 2048 + 384 * 7168 + 384   # routed + shared, router + bias
    norms = 2 * 7168
    total = (61 * (attn + norms) + dense_mlp + 60 * moe + 2 * 163840 * 7168 + 7168)
    arch = preset("kimi-k2")
    assert parameter_count(arch) == total
    # the Kimi-K2-Instruct checkpoint's tensors (less the FP8 weight_scale_inv blocks, with
    # e_score_correction_bias) hold 1,026,408,232,448 elements, as counted from its shard
    # headers; the model card's "1 trillion total parameters" (the tech report's "1.04T")
    assert total == 1_026_408_232_448
    assert arch.mtp_num_layers == 0 and moe_layer_pattern(arch) == (False,) + (True,) * 60
    # "32 billion activated parameters" (model card): 8 of 384 routed experts, the shared one
    assert round(active_parameter_count(arch, embedding=False) / 1e9) == 32
    assert active_parameter_count(arch) == total - 60 * 376 * 3 * 7168 * 2048


@pytest.mark.torch
@pytest.mark.parametrize("name", ["qwen3-235b-a22b", "kimi-k2"])
def test_new_moe_presets_match_transformers(name):
    """transformers' own model of the release's config, on the meta device: sum(p.numel()).
    Kimi K2's config.json names model_type kimi_k2 with remote code (DeepseekV3ForCausalLM's
    modules); the same fields are built here as transformers' DeepseekV3Config, which keeps
    e_score_correction_bias as a buffer (60 MoE layers x 384 not counted)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("memsym reads the models of transformers 5")
    if name == "qwen3-235b-a22b":
        conf = transformers.Qwen3MoeConfig(
            hidden_size=4096, intermediate_size=12288, head_dim=128, num_attention_heads=64,
            num_key_value_heads=4, num_hidden_layers=94, num_experts=128,
            num_experts_per_tok=8, moe_intermediate_size=1536, decoder_sparse_step=1,
            mlp_only_layers=[], vocab_size=151936, tie_word_embeddings=False,
            attention_bias=False, max_position_embeddings=40960)
        buffers = 0
    else:
        conf = transformers.DeepseekV3Config(
            hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
            num_hidden_layers=61, num_attention_heads=64, num_key_value_heads=64,
            n_shared_experts=1, n_routed_experts=384, kv_lora_rank=512, q_lora_rank=1536,
            qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, num_experts_per_tok=8,
            n_group=1, topk_group=1, first_k_dense_replace=1, vocab_size=163840,
            max_position_embeddings=131072, tie_word_embeddings=False, attention_bias=False)
        buffers = 60 * 384
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(conf)
    counted = sum(p.numel() for p in model.parameters())
    assert counted == parameter_count(preset(name)) - buffers


def _nemotron_by_hand(L_, h_, a_, g_, f_, V_=256000):
    """NeMo's Nemotron layer from its config (hand): q and o h x h, k and v h x g d_h (d_h =
    h / a), up and down h x f (squared ReLU, no gate), two LayerNorms of weight and bias, no
    linear biases; untied embedding and head V x h; the final LayerNorm 2h."""
    d_h = h_ // a_
    per_layer = 2 * h_ * h_ + 2 * h_ * g_ * d_h + 2 * h_ * f_ + 2 * 2 * h_
    return L_ * per_layer + 2 * V_ * h_ + 2 * h_


def test_nemotron_presets_by_hand_and_published():
    assert parameter_count(preset("nemotron3-8b")) == _nemotron_by_hand(32, 4096, 32, 32, 16384)
    assert parameter_count(preset("nemotron4-22b")) == _nemotron_by_hand(40, 6144, 48, 48, 24576)
    arch = preset("nemotron4-340b")
    total = _nemotron_by_hand(96, 18432, 96, 8, 73728)
    assert parameter_count(arch) == total
    # Nemotron-4 340B report (arXiv:2406.11704, section 2): "9.4 billion embedding parameters
    # and 331.6 billion non-embedding parameters"
    embedding = 2 * 256000 * 18432
    assert round(embedding / 1e8) == 94 and round((total - embedding) / 1e8) == 3316
    # the names' sizes, counted: "8B" 8.5B (2.1B of it embedding and head), "22B" 21.3B
    assert int(parameter_count(preset("nemotron3-8b")) / 1e8) == 85
    assert int(parameter_count(preset("nemotron4-22b")) / 1e8) == 212


@pytest.mark.torch
@pytest.mark.parametrize("name,g", [("nemotron3-8b", 32), ("nemotron4-22b", 48),
                                    ("nemotron4-340b", 8)])
def test_nemotron_presets_match_transformers(name, g):
    """transformers' NemotronForCausalLM (NemotronLayerNorm1P, relu2 MLP without a gate) built
    from the preset's fields on the meta device: sum(p.numel())."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    arch = preset(name)
    conf = transformers.NemotronConfig(
        hidden_size=arch.hidden_size, intermediate_size=arch.ffn_hidden_size,
        num_hidden_layers=arch.num_layers, num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=g, vocab_size=256000, partial_rotary_factor=0.5,
        max_position_embeddings=4096, tie_word_embeddings=False, attention_bias=False,
        mlp_bias=False)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(conf)
    assert sum(p.numel() for p in model.parameters()) == parameter_count(arch)


# --------------------------------------------------------------------------------------------
# symbolic forms
# --------------------------------------------------------------------------------------------

def test_narayanan_eq2_equals_gpt_count():
    # Narayanan et al. 2021 Eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), no final norm.
    eq2 = 12 * L * h**2 * (1 + sp.Rational(13, 12) / h + (V + s_max) / (12 * L * h))
    assert sp.expand(eq2 - gpt_parameter_expression(final_norm=False)) == 0
    assert sp.expand(gpt_parameter_expression() - eq2) == 2 * h


def test_symbols_come_from_registry():
    names = set(registry())
    for name in PRESETS:
        for expr in parameter_expression(preset(name)).values():
            assert {s.name for s in sp.sympify(expr).free_symbols} <= names
            assert all(s is registry()[s.name].symbol for s in sp.sympify(expr).free_symbols)


def test_components_sum_to_the_count():
    arch = preset("deepseek-v3")
    counts = parameter_counts(arch)
    assert set(counts) == set(COMPONENTS)
    assert sum(counts.values()) == parameter_count(arch)


def test_llama_expression_shape():
    ex = parameter_expression(preset("llama2-70b"))
    assert ex["embedding"] == V * h and ex["output_layer"] == V * h
    assert ex["position_embedding"] == 0
    tied = parameter_expression(preset("gpt3-175b"))
    assert tied["output_layer"] == 0 and tied["position_embedding"] == s_max * h


def test_bias_switch_changes_count_by_hand():
    base = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100,
                        max_position_embeddings=16, add_bias_linear=False)
    with_bias = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100,
                             max_position_embeddings=16, add_bias_linear=True)
    # per layer: qkv 3h + o h + fc1 4h + fc2 h = 9h biases
    assert parameter_count(with_bias) - parameter_count(base) == 2 * 9 * 64
    qkv_only = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100,
                            max_position_embeddings=16, add_bias_linear=False, add_qkv_bias=True)
    assert parameter_count(qkv_only) - parameter_count(base) == 2 * 3 * 64


# --------------------------------------------------------------------------------------------
# vocabulary padding, layer patterns, stages
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("vocab,t,expect", [
    (50257, 1, 50304), (50257, 2, 50432), (50257, 8, 51200), (32000, 1, 32000),
    (32000, 8, 32768), (128256, 8, 129024), (151936, 4, 152064)])
def test_padded_vocab(vocab, t, expect):
    # Megatron-LM _vocab_size_with_padding: multiple of 128*t; expected values by hand.
    assert padded_vocab_size(vocab, t) == expect
    assert expect % (128 * t) == 0 and expect - vocab < 128 * t


def test_padded_count_gpt3():
    # 50304 - 50257 = 47 padding rows of h
    arch = preset("gpt3-175b")
    assert parameter_count(arch, pad_vocab=True) - parameter_count(arch) == 47 * 12288


def test_moe_layer_patterns():
    assert moe_layer_pattern(preset("deepseek-v3")) == (False,) * 3 + (True,) * 58
    every_other = Architecture(num_layers=4, hidden_size=64, num_attention_heads=4,
                               vocab_size=10, position_embedding_type="rope", num_experts=4,
                               moe_layer_freq=2)
    assert moe_layer_pattern(every_other) == (True, False, True, False)
    assert not any(moe_layer_pattern(preset("llama2-7b")))


def test_stage_parameters_even_split():
    arch = preset("llama2-7b")
    p, t = 4, 2
    stages = [stage_parameters(arch, t=t, p=p, stage=i, pad_vocab=False) for i in range(p)]
    layer = 202_383_360  # 4h^2 + 3hf + 2h for h = 4096, f = 11008
    assert [s.layers for s in stages] == [range(0, 8), range(8, 16), range(16, 24), range(24, 32)]
    assert stages[0].total == 8 * layer + 32000 * 4096
    assert stages[1].total == stages[2].total == 8 * layer
    assert stages[3].total == 8 * layer + 32000 * 4096 + 4096
    assert sum(s.total for s in stages) == PUBLISHED["llama2-7b"]
    # per GPU: norms replicated over t, everything else halves
    assert stages[1].per_gpu == sp.Rational(8 * (layer - 2 * 4096), t) + 8 * 2 * 4096


def test_stage_parameters_tied_copy_and_uneven():
    arch = preset("gpt3-175b")
    last = stage_parameters(arch, t=8, p=16, stage=15)
    assert last.output_layer and not last.embedding
    assert last.tp >= 51200 * 12288       # the tied output weight copy (padded to 128*8)
    no_copy = stage_parameters(arch, t=8, p=16, stage=15, tied_output_copy=False)
    assert last.tp - no_copy.tp == 51200 * 12288
    # Llama 3 405B: 126 layers on 16 stages with one layer less on the first and the last
    assert stage_layers(preset("llama3-405b"), 16, 15, 7, 7) == range(119, 126)


def test_stage_parameters_experts_and_mtp():
    arch = preset("deepseek-v3")
    p, t, e = 8, 1, 8
    st = [stage_parameters(arch, t=t, p=p, stage=i, e=e, first_stage_layers=5,
                           last_stage_layers=8) for i in range(p)]
    assert sum(s.total for s in st) == parameter_count(arch, pad_vocab=True)
    assert st[-1].mtp and not st[0].mtp
    per_expert_layer = 256 * 3 * 7168 * 2048
    assert st[1].experts == 8 * per_expert_layer
    assert st[1].experts_per_gpu == st[1].experts // 8


# --------------------------------------------------------------------------------------------
# layout checks
# --------------------------------------------------------------------------------------------

def test_divisibility_rules_named():
    with pytest.raises(DivisibilityError, match="attention heads"):
        check_layout(preset("llama2-7b"), t=3)
    with pytest.raises(DivisibilityError, match="KV heads"):
        check_layout(preset("llama3-8b"), t=16)
    with pytest.raises(DivisibilityError, match="must divide the layers"):
        check_layout(preset("llama3-405b"), p=16)
    check_layout(preset("llama3-405b"), p=16, first_stage_layers=7, last_stage_layers=7)
    with pytest.raises(DivisibilityError, match="experts"):
        check_layout(preset("mixtral-8x7b"), e=3)
    with pytest.raises(DivisibilityError, match="needs a model with experts"):
        check_layout(preset("llama2-7b"), e=2)
    check_layout(preset("deepseek-v3"), t=8, p=1, e=64)


def test_resolve_defaults_and_bad_fields():
    r = resolve(Architecture(num_layers=2, hidden_size=64, num_attention_heads=8,
                             vocab_size=10), seq_length=128)
    assert (r.num_query_groups, r.kv_channels, r.ffn_hidden_size, r.max_position_embeddings) \
        == (8, 8, 256, 128)
    with pytest.raises(InvalidValueError, match="num_layers"):
        resolve(Architecture(num_layers=True, position_embedding_type="rope"))
    with pytest.raises(InvalidValueError, match="num_layers"):
        resolve(Architecture(num_layers=0, position_embedding_type="rope"))
    with pytest.raises(UnknownNameError):
        resolve(Architecture(normalization="batchnorm", position_embedding_type="rope"))
    with pytest.raises(InvalidValueError, match="max_position_embeddings"):
        parameter_count(Architecture())


@pytest.mark.parametrize("field,value,limit", [
    ("num_layers", 10**6 + 1, 10**6), ("num_layers", 10**300, 10**6),
    ("hidden_size", 2**24 + 8, 2**24), ("num_attention_heads", 2**20 + 1, 2**20),
    ("vocab_size", 2**31 + 1, 2**31), ("num_experts", 2**20 + 1, 2**20),
    ("max_position_embeddings", 2**31 + 1, 2**31),
], ids=lambda v: v if isinstance(v, str) else None)
def test_resolve_refuses_sizes_over_the_limits(field, value, limit):
    from memsym.limits import FIELD_LIMITS, limit_of
    kw = dict(num_layers=2, hidden_size=64, num_attention_heads=8, vocab_size=10,
              position_embedding_type="rope")
    arch = Architecture(**{**kw, field: value})
    with pytest.raises(InvalidValueError) as err:
        resolve(arch)
    msg = str(err.value)
    lim = limit_of(FIELD_LIMITS[field])         # the documented limit is the one checked
    assert field in msg and lim.shown in msg and lim.maximum == limit and len(msg) < 250


def test_new_structure_fields_checked_and_counted_by_hand():
    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                ffn_hidden_size=96, swiglu=True, normalization="RMSNorm", vocab_size=100,
                position_embedding_type="rope", add_bias_linear=False)
    n0 = parameter_count(Architecture(**base))
    # four norms per layer instead of two: 2 layers x 2 x 64 more
    assert parameter_count(Architecture(**base, norms_per_layer=4)) - n0 == 2 * 2 * 64
    # full-width q/k norms: (a + g) d_h = (4 + 2) x 16 per layer
    assert parameter_count(Architecture(**base, qk_layernorm=True, qk_norm_width="full")) - n0 \
        == 2 * 96
    # output-layer bias: V; embedding norm: h
    assert parameter_count(Architecture(**base, output_layer_bias=True)) - n0 == 100
    assert parameter_count(Architecture(**base, embedding_norm=True)) - n0 == 64
    # non-affine norms: no norm parameters (2 x 2 x 64 per-layer + 64 final)
    assert n0 - parameter_count(Architecture(**base, norm_affine=False)) == 2 * 2 * 64 + 64
    # attention biases without MLP biases: (a + 2g) d_h + h per layer
    assert parameter_count(Architecture(**base, attention_bias=True)) - n0 == 2 * (128 + 64)
    for bad, match in ((dict(norms_per_layer=True), "norms_per_layer"),
                       (dict(norms_per_layer=9), "limit of 2\\^3 norms"),
                       (dict(norm_bias="no"), "norm_bias"),
                       (dict(attention_bias=1), "attention_bias"),
                       (dict(embedding_norm=None), "embedding_norm")):
        with pytest.raises(InvalidValueError, match=match):
            resolve(Architecture(**{**base, **bad}))
    with pytest.raises(UnknownNameError, match="qk_norm_width"):
        resolve(Architecture(**base, qk_norm_width="wide"))


def test_names_are_kept_printable():
    arch = resolve(Architecture(name="a\n\x1b[31mfits\x07" + "z" * 200, num_layers=1,
                                hidden_size=8, num_attention_heads=2, vocab_size=4,
                                position_embedding_type="rope"))
    # escaped (memsym.text.printable) and cut after 80 characters with a marker
    assert arch.name.isprintable() and "\\x1b" in arch.name and arch.name.endswith("chars)")
    assert len(arch.name) <= 80 + len("...(+999 chars)")
    assert preset("llama2-7b").name == resolve(preset("llama2-7b")).name


# --------------------------------------------------------------------------------------------
# names
# --------------------------------------------------------------------------------------------

def test_preset_names_case_insensitive():
    assert preset("LLAMA3-70B") is PRESETS["llama3-70b"]
    assert preset("gpt_oss_120b") is PRESETS["gpt-oss-120b"]
    assert all(n == n.lower() and " " not in n and "_" not in n for n in PRESETS)
    for required in ("gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b",
                     "llama3-70b", "llama3-405b", "mistral-7b", "mixtral-8x7b", "deepseek-v3",
                     "qwen3-30b-a3b", "gpt-oss-120b", "qwen3-235b-a22b", "kimi-k2",
                     "nemotron3-8b", "nemotron4-22b", "nemotron4-340b"):
        assert required in PRESETS


def test_unknown_preset_suggests():
    with pytest.raises(UnknownNameError) as err:
        preset("lama3-8b")
    assert "llama3-8b" in err.value.suggestions
    assert "\n" not in str(err.value)
    with pytest.raises(UnknownNameError) as err:
        resolve_model("mixtral-8x22")
    assert "mixtral-8x7b" in err.value.suggestions


# --------------------------------------------------------------------------------------------
# config.json
# --------------------------------------------------------------------------------------------

def _write(tmp_path, obj, name="config.json", raw=None):
    path = tmp_path / name
    path.write_text(raw if raw is not None else json.dumps(obj))
    return path


# meta-llama/Llama-2-7b-hf config.json (fields that matter)
LLAMA2_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
             "num_key_value_heads": 32, "max_position_embeddings": 4096, "vocab_size": 32000,
             "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "torch_dtype": "float16"}


HF_CASES = {
    # meta-llama/Meta-Llama-3-8B config.json
    "llama3-8b": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                   "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                   "max_position_embeddings": 8192, "tie_word_embeddings": False,
                   "rope_theta": 500000.0}, 8_030_261_248),
    # mistralai/Mixtral-8x7B-v0.1 config.json
    "mixtral": ({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                 "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                 "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
                 "num_local_experts": 8, "vocab_size": 32000, "sliding_window": None,
                 "tie_word_embeddings": False}, 46_702_792_704),
    # Qwen/Qwen3-30B-A3B config.json
    "qwen3-moe": ({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                   "hidden_size": 2048, "intermediate_size": 6144, "head_dim": 128,
                   "num_attention_heads": 32, "num_key_value_heads": 4, "num_hidden_layers": 48,
                   "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                   "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
                   "tie_word_embeddings": False, "attention_bias": False}, 30_532_122_624),
    # Qwen/Qwen3-0.6B config.json (tied embeddings).  The expected count follows from the config
    # by hand, the output layer sharing the embedding (the HF checkpoint also stores lm_head):
    # embedding V h = 151936 * 1024 = 155,582,464; per layer q,o 2 * 1024 * 2048 + k,v
    # 2 * 1024 * 1024 + q/k norms 2 * 128 + SwiGLU 3 * 1024 * 3072 + 2 norms 2 * 1024 =
    # 15,730,944, x 28 = 440,466,432; final norm 1024 -> 596,049,920 (card: 0.44B non-embedding)
    "qwen3-0.6b": ({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                    "hidden_size": 1024, "intermediate_size": 3072, "head_dim": 128,
                    "num_attention_heads": 16, "num_key_value_heads": 8, "num_hidden_layers": 28,
                    "vocab_size": 151936, "tie_word_embeddings": True}, 596_049_920),
    # Qwen/Qwen2.5-0.5B (q/k/v biases, tied) HF safetensors 494,032,768
    "qwen2.5-0.5b": ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                      "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
                      "num_key_value_heads": 2, "num_hidden_layers": 24, "vocab_size": 151936,
                      "tie_word_embeddings": True}, 494_032_768),
    # Qwen/Qwen2.5-7B-Instruct HF safetensors 7,615,616,512
    "qwen2.5-7b": ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                    "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
                    "num_key_value_heads": 4, "num_hidden_layers": 28, "vocab_size": 152064,
                    "tie_word_embeddings": False}, 7_615_616_512),
    # deepseek-ai/DeepSeek-V3 config.json (num_nextn_predict_layers 1).  Main model 671,026,419,200
    # (checkpoint layers 0-60) less the router's e_score_correction_bias, 58 MoE layers x 256,
    # which transformers 5 keeps as a buffer, not a parameter: 671,026,419,200 - 14,848.
    "deepseek-v3": ({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                     "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
                     "num_hidden_layers": 61, "num_nextn_predict_layers": 1,
                     "num_attention_heads": 128, "num_key_value_heads": 128,
                     "n_shared_experts": 1, "n_routed_experts": 256, "kv_lora_rank": 512,
                     "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
                     "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "num_experts_per_tok": 8,
                     "moe_layer_freq": 1, "first_k_dense_replace": 3, "vocab_size": 129280,
                     "max_position_embeddings": 163840, "tie_word_embeddings": False,
                     "attention_bias": False}, 671_026_419_200 - 58 * 256),
    # EleutherAI/pythia-70m-deduped config.json (GPT-NeoX: LayerNorm, biases, rotary, untied);
    # HF safetensors 70,426,624
    "pythia-70m": ({"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
                    "hidden_size": 512, "intermediate_size": 2048, "num_attention_heads": 8,
                    "num_hidden_layers": 6, "vocab_size": 50304, "rotary_pct": 0.25,
                    "max_position_embeddings": 2048, "tie_word_embeddings": False,
                    "use_parallel_residual": True}, 70_426_624),
    # openai/gpt-oss-120b config.json; model card 116.83B
    "gpt-oss-120b": ({"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
                      "hidden_size": 2880, "intermediate_size": 2880, "head_dim": 64,
                      "num_attention_heads": 64, "num_key_value_heads": 8,
                      "num_hidden_layers": 36, "num_local_experts": 128,
                      "experts_per_token": 4, "num_experts_per_tok": 4, "vocab_size": 201088,
                      "attention_bias": True, "sliding_window": 128,
                      "tie_word_embeddings": False}, 116_829_156_672),
}


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_hf_config_counts(tmp_path, case):
    cfg, expect = HF_CASES[case]
    arch = from_hf_config(_write(tmp_path, cfg))
    assert parameter_count(arch, mtp=False) == expect


def test_hf_config_matches_presets(tmp_path):
    assert parameter_count(from_hf_config(_write(tmp_path, LLAMA2_7B))) == 6_738_415_616
    ds = from_hf_config(_write(tmp_path, HF_CASES["deepseek-v3"][0]))
    # transformers builds neither the MTP layer nor a router-bias parameter; the reader says so
    assert ds.mtp_num_layers == 0
    assert parameter_count(ds) == parameter_count(preset("deepseek-v3"), mtp=False) - 58 * 256
    assert any("num_nextn_predict_layers=1 not counted" in n for n in ds.extra["notes"])
    # a directory holding config.json works too, and resolve_model reads paths
    assert resolve_model(str(tmp_path)).num_layers == 61
    assert resolve_model(str(tmp_path / "config.json")).num_experts == 256


@pytest.mark.parametrize("raw,match", [
    ("{not json", "not valid JSON"),
    ("[1, 2, 3]", "JSON object"),
    ('"a string"', "JSON object"),
    ('{"model_type": "llama", "hidden_size": NaN, "num_attention_heads": 4, "vocab_size": 100, '
     '"num_hidden_layers": 2, "intermediate_size": 64}', "'hidden_size' must be a whole number"),
    ("\xff\xfe", "not valid JSON"),
])
def test_hf_config_malformed(tmp_path, raw, match):
    path = tmp_path / "config.json"
    path.write_bytes(raw.encode("latin-1"))
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("change,match", [
    ({"hidden_size": None}, "missing field 'hidden_size'"),
    ({"num_hidden_layers": True}, "'num_hidden_layers' must be a whole number"),
    ({"vocab_size": "32000"}, "'vocab_size' must be a whole number"),
    ({"intermediate_size": 11008.0}, "'intermediate_size' must be a whole number"),
    ({"num_attention_heads": -4}, "'num_attention_heads' must be > 0"),
    ({"tie_word_embeddings": "no"}, "'tie_word_embeddings' must be true or false"),
])
def test_hf_config_bad_fields(tmp_path, change, match):
    cfg = {**LLAMA2_7B, **change}
    cfg = {k: v for k, v in cfg.items() if not (k == "hidden_size" and v is None)}
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(_write(tmp_path, cfg))
    assert "\n" not in str(err.value)


def test_hf_config_llama_attention_bias_without_mlp_bias(tmp_path):
    # LlamaAttention: q, k, v, o with bias=config.attention_bias; the MLP keeps mlp_bias=False.
    # By hand: per layer q, k, v biases 3 * 4096 + o bias 4096 = 16,384; x 32 layers = 524,288.
    arch = from_hf_config(_write(tmp_path, {**LLAMA2_7B, "attention_bias": True}))
    assert parameter_count(arch) == 6_738_415_616 + 32 * 4 * 4096


def test_hf_config_missing_file_huge_and_unknown(tmp_path):
    with pytest.raises(InvalidValueError, match="no such config file"):
        from_hf_config(tmp_path / "nope.json")
    big = tmp_path / "big.json"
    big.write_text('{"pad": "' + "x" * (5 * 1024 * 1024) + '"}')
    with pytest.raises(InvalidValueError, match="refused above"):
        from_hf_config(big)
    with pytest.raises(UnknownNameError, match="bert"):
        from_hf_config(_write(tmp_path, {"model_type": "bert", "hidden_size": 768}))
    with pytest.raises(InvalidValueError, match="model_type"):
        from_hf_config(_write(tmp_path, {"hidden_size": 768}))
    with pytest.raises(InvalidValueError):
        from_hf_config(12)


def test_hf_config_is_never_evaluated(tmp_path):
    # strings that would do something if evaluated are refused as wrong types
    cfg = {**LLAMA2_7B, "hidden_size": "__import__('os').system('false')"}
    with pytest.raises(InvalidValueError, match="whole number"):
        from_hf_config(_write(tmp_path, cfg))
