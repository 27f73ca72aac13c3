"""Current decoder types of transformers 5.25.0 that memsym's Architecture expresses (issue 32,
item 4): Param2 MoE (``param2moe``) and Sarvam (``sarvam_moe``, ``sarvam_mla``), which
transformers builds as GLM-4.5 and DeepSeek-V3 models of their own config classes; Hy3
(``hy_v3``), MiniCPM5 MoE (``minicpm5_moe``: gated attention), Mellum2 (``mellum``), Kolibri 1
(``kolibri1``: four norms a layer), HyperCLOVA X (``hyperclovax``: post-norms), Apertus 1.5's
language model (``apertus1p5_text``), Flint (``flint``: sinks, an ungated shared expert) and
OLMo Hybrid (``olmo_hybrid``: Gated DeltaNet mixers beside OLMo 3's attention); and the decoder types whose layers memsym does not
model, refused in one line naming what is missing.

Oracle (``tests/hf_oracle.py``, run over these tables by ``tests/test_hf_type_tables.py``):
transformers builds ``AutoModelForCausalLM.from_config`` of the very file memsym reads, on the
meta device, and ``sum(p.numel())`` of its parameters (a tied weight once) must equal memsym's
count, for the small configs below (every structural switch) and the config classes' own
defaults; each default is also counted here by hand from the modules its modeling file builds.
No network: every config is written here.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.model import from_hf_config, parameter_count
from memsym.model.hf_config import HF_MODEL_TYPES

from hf_oracle import TOKENS, class_defaults, write_config
from in_process import estimate

# the model types this file covers
TYPES = {"param2moe", "sarvam_moe", "sarvam_mla", "hy_v3", "minicpm5_moe", "mellum",
         "kolibri1", "hyperclovax", "apertus1p5_text", "olmo_hybrid", "flint", "aria_text"}

_BASE = {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64, **TOKENS}
_MOE = {**_BASE, "head_dim": 16, "intermediate_size": 96, "moe_intermediate_size": 16,
        "num_experts_per_tok": 2}
_PARAM2 = {"model_type": "param2moe", **_MOE, "n_routed_experts": 4}
_SARVAM = {"model_type": "sarvam_moe", **_MOE, "n_routed_experts": 4}
# (MLA keys have a heads: DeepseekV3Attention's repeat_kv by a / num_key_value_heads fails at
# the forward unless they are equal, SarvamMLAConfig's default)
_SARVAM_MLA = {"model_type": "sarvam_mla", **_BASE, "num_key_value_heads": 4,
               "intermediate_size": 96,
               "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
               "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
               "v_head_dim": 8}
_HY3 = {"model_type": "hy_v3", **_MOE, "num_experts": 4}
_MINICPM5 = {"model_type": "minicpm5_moe", **_MOE, "n_routed_experts": 4}
_MELLUM = {"model_type": "mellum", **_MOE, "num_experts": 4}
_KOLIBRI = {"model_type": "kolibri1", **{k: v for k, v in _MOE.items()
                                         if k != "intermediate_size"},
            "num_experts": 4, "shared_expert_intermediate_size": 24}
_CLOVA = {"model_type": "hyperclovax", **_BASE, "intermediate_size": 96}
_APERTUS = {"model_type": "apertus1p5_text", **_BASE, "intermediate_size": 96}
_FLINT = {"model_type": "flint", **_MOE, "num_hidden_layers": 4, "num_experts": 4,
          "shared_expert_intermediate_size": 24}
_ARIA = {"model_type": "aria_text", **_BASE, "intermediate_size": 24, "moe_num_experts": 4,
         "moe_topk": 2}
_OLMO_HYBRID = {"model_type": "olmo_hybrid", **_BASE, "intermediate_size": 96,
                "num_hidden_layers": 4}

SMALL = {
    # Param2: GLM-4.5's model with q/k norms, a dense first layer, two shared experts, tied; or
    # the attribute_map's spellings (use_qkv_bias, num_experts, num_shared_experts), every
    # layer MoE, untied
    "param2moe": _PARAM2,
    "param2moe-aliases-all-moe-untied": {
        **{k: v for k, v in _PARAM2.items() if k != "n_routed_experts"},
        "num_experts": 4, "num_shared_experts": 1, "use_qkv_bias": True,
        "first_k_dense_replace": 0, "tie_word_embeddings": False},
    # Sarvam-30B's kind: GLM-4.5's model, q/k norms, one shared expert, untied; or no q/k norm,
    # no shared expert, two dense layers, q, k, v biased
    "sarvam_moe": _SARVAM,
    "sarvam_moe-no-norm-no-shared-2-dense-bias": {
        **_SARVAM, "use_qk_norm": False, "n_shared_experts": 0, "first_k_dense_replace": 2,
        "attention_bias": True},
    # Sarvam-105B's kind: DeepSeek-V3's model without q LoRA; or with it, every layer MoE, the
    # experts named num_local_experts
    "sarvam_mla": _SARVAM_MLA,
    "sarvam_mla-q-lora-all-moe-alias": {
        **{k: v for k, v in _SARVAM_MLA.items() if k != "n_routed_experts"},
        "q_lora_rank": 24, "first_k_dense_replace": 0, "num_local_experts": 4},
    # Hy3: q/k norms, a dense first layer, one shared expert; or all four projections biased,
    # the MLP kinds listed, num_shared_experts 0 (a shared expert of intermediate_size all the
    # same: HYV3MLP's "intermediate_size or config.intermediate_size"), tied
    "hy_v3": _HY3,
    "hy_v3-bias-listed-no-shared-tied": {
        **_HY3, "attention_bias": True, "mlp_layer_types": ["sparse", "dense", "sparse"],
        "num_shared_experts": 0, "tie_word_embeddings": True},
    # MiniCPM5 MoE: gated attention (q and gate in one projection), a dense first layer, a
    # shared expert; or biased projections, the MLP kinds listed, head_dim and KV heads null
    "minicpm5_moe": _MINICPM5,
    "minicpm5_moe-bias-listed-nulls": {
        **_MINICPM5, "attention_bias": True, "mlp_layer_types": ["dense", "dense", "sparse"],
        "head_dim": None, "num_key_value_heads": None},
    # Mellum2: q/k norms, every layer MoE (no shared expert); or sliding-window layers, a dense
    # layer listed, biased projections, tied, an MTP layer in the file (transformers builds none)
    "mellum": _MELLUM,
    "mellum-swa-dense-bias-tied-mtp": {
        **_MELLUM, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "sliding_window": 8, "mlp_layer_types": ["dense", "sparse", "sparse"],
        "attention_bias": True, "tie_word_embeddings": True, "num_mtp_layers": 1},
    # Kolibri 1: four norms a layer, MoE with a shared MLP in every layer; or the experts as
    # num_local_experts, tied
    "kolibri1": _KOLIBRI,
    "kolibri1-alias-tied": {**{k: v for k, v in _KOLIBRI.items() if k != "num_experts"},
                            "num_local_experts": 4, "tie_word_embeddings": True},
    # HyperCLOVA X: post-norms (four a layer); or none, every projection biased, tied
    "hyperclovax": _CLOVA,
    "hyperclovax-no-post-norm-biases-tied": {
        **_CLOVA, "use_post_norm": False, "attention_bias": True, "mlp_bias": True,
        "tie_word_embeddings": True},
    # Apertus 1.5: xIELU MLP, q/k norms; or SiLU, the full LM head spelt out, biased attention
    "apertus1p5_text": _APERTUS,
    "apertus1p5_text-silu-full-head-bias": {
        **_APERTUS, "hidden_act": "silu", "output_vocab_size": 128, "attention_bias": True},
}

# no published config.json is copied here (no network): the config classes' defaults, which
# the docstrings name as the checkpoints' (Param2-17B-A2.4B, sarvam-30b, sarvam-105b,
# Hy3-preview, MiniCPM5-15B-A2.5B, Mellum2-12B-A2.5B, Kolibri-1), are counted by hand below
REAL: dict = {}
SMALL.update({
    # OLMo Hybrid: Gated DeltaNet layers (heads a, key head int(0.75 h / a), value head twice
    # that) with every fourth layer OLMo 3's attention; or the layers listed, linear heads and
    # sizes of their own (two value heads per key head), biased attention, tied
    "olmo_hybrid": _OLMO_HYBRID,
    "olmo_hybrid-listed-linear-sizes-bias-tied": {
        **_OLMO_HYBRID, "layer_types": ["full_attention", "linear_attention",
                                        "linear_attention", "full_attention"],
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
        "linear_value_head_dim": 12, "linear_conv_kernel_dim": 3, "attention_bias": True,
        "tie_word_embeddings": True},
    # Flint: sinks in every layer, q/k norms, two dense layers (mlp_only_layers' default) then
    # MoE with an ungated shared MLP; or every other layer MoE, none dense-only, no shared MLP,
    # biased attention, tied; or no experts at all
    "flint": _FLINT,
    "flint-step-2-no-shared-bias-tied": {
        **_FLINT, "decoder_sparse_step": 2, "mlp_only_layers": [],
        "shared_expert_intermediate_size": 0, "attention_bias": True,
        "tie_word_embeddings": True},
    "flint-dense": {**_FLINT, "num_experts": 0},
    # Aria's language model: every layer MoE, routed experts and two shared ones of
    # intermediate_size; or one shared, biased attention, top-1, tied, head_dim given; or no
    # shared experts, GELU (the shared MLP follows hidden_act, the routed experts stay SiLU)
    "aria_text": _ARIA,
    "aria_text-one-shared-bias-top1-tied": {
        **_ARIA, "moe_num_shared_experts": 1, "attention_bias": True, "moe_topk": 1,
        "tie_word_embeddings": True, "head_dim": 8},
    "aria_text-no-shared-gelu": {**_ARIA, "moe_num_shared_experts": 0, "hidden_act": "gelu"},
})


def _count(tmp_path, mtype, **over):
    return parameter_count(from_hf_config(write_config(
        tmp_path, {**class_defaults(mtype), **over}, mtype)))


def _gqa(h, a, g, d, qk_norm=True):
    """q, o of a d x h each, k, v of g d x h, per-head q/k RMSNorms (no bias)."""
    return 2 * h * a * d + 2 * h * g * d + (2 * d if qk_norm else 0)


def _moe(h, E, fe, shared):
    """A router E x h, E gated experts of fe, a gated shared MLP of ``shared``."""
    return E * h + E * 3 * h * fe + 3 * h * shared


@pytest.mark.torch
def test_param2moe_and_sarvam_moe_defaults_by_hand(tmp_path):
    # Glm4MoeForCausalLM of Param2MoeConfig: h 2048, 21 layers, a 32, g 8, d 64, f 9216, one
    # dense layer, E 64 of 2048, 2 shared, V 128000, tied; q/k norms (use_qk_norm true)
    h, L, a, g, d, f, E, fe, V = 2048, 21, 32, 8, 64, 9216, 64, 2048, 128000
    total = (V * h + L * (_gqa(h, a, g, d) + 2 * h) + 3 * h * f
             + (L - 1) * _moe(h, E, fe, 2 * fe) + h)
    assert _count(tmp_path, "param2moe") == total == 17_151_124_096
    # SarvamMoEConfig: h 4096, 19 layers, a 64, g 4, d 64, f 8192, E 128 of 1024, 1 shared,
    # V 262144, untied
    h, L, a, g, d, f, E, fe, V = 4096, 19, 64, 4, 64, 8192, 128, 1024, 262144
    total = (2 * V * h + L * (_gqa(h, a, g, d) + 2 * h) + 3 * h * f
             + (L - 1) * _moe(h, E, fe, fe) + h)
    assert _count(tmp_path, "sarvam_moe") == total


@pytest.mark.torch
def test_sarvam_mla_defaults_by_hand(tmp_path):
    # DeepseekV3ForCausalLM of SarvamMLAConfig: h 4096, 32 layers, a 64, no q LoRA (q_proj
    # h -> a (128 + 64)), kv_a h -> 512 + 64, its norm 512, kv_b 512 -> a (128 + 128), o a 128 -> h;
    # one dense layer of 16384, then E 128 of 2048 with one shared; V 262144, untied
    h, L, a, r, nope, rope, v, f, E, fe, V = 4096, 32, 64, 512, 128, 64, 128, 16384, 128, 2048, 262144
    att = h * a * (nope + rope) + h * (r + rope) + r + r * a * (nope + v) + a * v * h
    total = 2 * V * h + L * (att + 2 * h) + 3 * h * f + (L - 1) * _moe(h, E, fe, fe) + h
    assert _count(tmp_path, "sarvam_mla") == total == 106_031_763_456


@pytest.mark.torch
def test_hy_v3_defaults_by_hand(tmp_path):
    # HYV3Config (Hy3-preview): h 4096, 80 layers, a 64, g 8, d 128, q/k norms, one dense layer
    # of 13312, then E 192 of 1536 with one shared; V 120832, untied
    h, L, a, g, d, f, E, fe, V = 4096, 80, 64, 8, 128, 13312, 192, 1536, 120832
    total = (2 * V * h + L * (_gqa(h, a, g, d) + 2 * h) + 3 * h * f
             + (L - 1) * _moe(h, E, fe, fe) + h)
    arch = from_hf_config(write_config(tmp_path, class_defaults("hy_v3"), "hy"))
    assert parameter_count(arch) == total == 295_033_528_320
    assert any("e_score_correction_bias (79 x 192) not counted" in n
               for n in arch.extra["notes"])


@pytest.mark.torch
def test_minicpm5_moe_defaults_by_hand(tmp_path):
    # MiniCPM5MoeConfig: h 2048, 28 layers, a 32, g 2, d 128; q_gate_proj h -> 2 a d (query and
    # output gate), k, v, o; no q/k norm; one dense layer of 8192, then E 160 of 512 with one
    # shared; V 130560, untied
    h, L, a, g, d, f, E, fe, V = 2048, 28, 32, 2, 128, 8192, 160, 512, 130560
    att = _gqa(h, a, g, d, qk_norm=False) + h * a * d
    total = 2 * V * h + L * (att + 2 * h) + 3 * h * f + (L - 1) * _moe(h, E, fe, fe) + h
    assert _count(tmp_path, "minicpm5_moe") == total == 15_002_552_320


@pytest.mark.torch
def test_mellum_kolibri1_hyperclovax_defaults_by_hand(tmp_path):
    # MellumConfig: h 2304, 28 layers, a 32, g 4, d 128, q/k norms, every layer E 64 of 896
    # (no shared), V 98304, untied
    h, L, a, g, d, E, fe, V = 2304, 28, 32, 4, 128, 64, 896, 98304
    total = 2 * V * h + L * (_gqa(h, a, g, d) + 2 * h + _moe(h, E, fe, 0)) + h
    assert _count(tmp_path, "mellum") == total == 12_149_923_072
    # Kolibri1Config: h 2560, 50 layers, a 48, g 4, d 128, q/k norms, four norms a layer,
    # every layer E 384 of 512 and a shared MLP of 512, V 128000, untied
    h, L, a, g, d, E, fe, V = 2560, 50, 48, 4, 128, 384, 512, 128000
    total = 2 * V * h + L * (_gqa(h, a, g, d) + 4 * h + _moe(h, E, fe, 512)) + h
    assert _count(tmp_path, "kolibri1") == total == 78_103_055_360
    # HyperCLOVAXConfig: Llama-7B's sizes (h 4096, 32 layers, MHA, f 11008, V 32000, untied)
    # and four norms a layer (use_post_norm true)
    h, L, f, V = 4096, 32, 11008, 32000
    total = 2 * V * h + L * (4 * h * h + 3 * h * f + 4 * h) + h
    assert _count(tmp_path, "hyperclovax") == total == 6_738_677_760


@pytest.mark.torch
def test_olmo_hybrid_defaults_by_hand(tmp_path):
    # OlmoHybridConfig (Olmo-Hybrid-7B): h 3840, 32 layers (8 attention: i % 4 == 3), MHA a 30
    # (d 128) with q/k norms of a d each, f 11008, V 100352, untied.  Gated DeltaNet: hk = hv =
    # 30, dk = int(0.75 * 3840 / 30) = 96, dv = 192: q, k h hk dk each, v, g h hv dv each, a, b
    # h hv each, o hv dv h, conv1d (2 hk dk + hv dv) 4, A_log, dt_bias hv each, o_norm dv
    h, L, a, d, f, V, hk, dk, hv, dv = 3840, 32, 30, 128, 11008, 100352, 30, 96, 30, 192
    att = 4 * h * a * d + 2 * a * d
    gdn = (2 * h * hk * dk + 2 * h * hv * dv + 2 * h * hv + hv * dv * h
           + (2 * hk * dk + hv * dv) * 4 + 2 * hv + dv)
    total = 2 * V * h + 8 * att + 24 * gdn + L * (3 * h * f + 2 * h) + h
    assert _count(tmp_path, "olmo_hybrid") == total == 7_430_870_688


def test_olmo_hybrid_estimate_runs(tmp_path, capsys):
    code, out, err = estimate(capsys, write_config(tmp_path, SMALL["olmo_hybrid"]),
                              "--seq-length", 64)
    assert code == 0, err


@pytest.mark.torch
def test_flint_defaults_by_hand(tmp_path):
    # FlintConfig: h 2048, 49 layers, a 32, g 4, d 128, q/k norms, a sink per head; layers 0 and 1
    # dense (f 6144), then E 256 of 512 with an ungated shared MLP of 1024; V 150144, untied
    h, L, a, g, d, f, E, fe, V = 2048, 49, 32, 4, 128, 6144, 256, 512, 150144
    total = (2 * V * h + L * (_gqa(h, a, g, d) + a + 2 * h) + 2 * 3 * h * f
             + (L - 2) * _moe(h, E, fe, 1024) + h)
    assert _count(tmp_path, "flint") == total == 39_785_287_456


@pytest.mark.torch
def test_apertus1p5_text_defaults_by_hand(tmp_path):
    # Apertus1p5TextConfig: h 4096, 32 layers, MHA a 32 (d 128), q/k norms, ungated xIELU MLP of
    # 14336 (alpha_p, alpha_n per layer), two norms a layer, V 266752, untied
    h, L, a, d, f, V = 4096, 32, 32, 128, 14336, 266752
    total = 2 * V * h + L * (_gqa(h, a, a, d) + 2 * h * f + 2 + 2 * h) + h
    assert _count(tmp_path, "apertus1p5_text") == total == 8_091_086_912


@pytest.mark.torch
def test_aria_text_defaults_by_hand(tmp_path):
    # AriaTextConfig: h 4096, 32 layers, MHA a 32 (d 128, no q/k norm), every layer MoE: a router
    # 8 x h, 8 SiLU-gated experts of f 4096 and a gated shared MLP of 2 x 4096; V 32000, untied
    h, L, a, d, f, E, V = 4096, 32, 32, 128, 4096, 8, 32000
    total = 2 * V * h + L * (_gqa(h, a, a, d, qk_norm=False) + _moe(h, E, f, 2 * f) + 2 * h) + h
    assert _count(tmp_path, "aria_text") == total == 18_517_069_824


def test_an_estimate_runs(tmp_path, capsys):
    code, out, err = estimate(capsys, write_config(tmp_path, SMALL["hy_v3"]), "--seq-length", 64)
    assert code == 0, err


# --------------------------------------------------------------------------------------------
# refusals
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg,match", [
    ({**_HY3, "mlp_bias": True}, "mlp_bias true in a hy_v3 config"),
    ({**_ARIA, "mlp_bias": True}, "mlp_bias true in an aria_text config"),
    ({**_HY3, "num_experts": None}, "field 'num_experts' null"),
    ({**_APERTUS, "output_vocab_size": 64}, "output_vocab_size 64 below vocab_size 128"),
    ({**_PARAM2, "num_experts": 8}, "fields 'n_routed_experts' and 'num_experts' name the same"),
    ({**_HY3, "mlp_layer_types": ["dense"]}, "'mlp_layer_types' must list"),
    ({**_OLMO_HYBRID, "layer_types": ["linear_attention"] * 4}, "at least one"),
    ({**_OLMO_HYBRID, "linear_num_key_heads": 3}, "must be a multiple of linear_num_key_heads"),
])
def test_what_transformers_cannot_build_or_memsym_does_not_model(tmp_path, cfg, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value)


#: the current decoder types whose layers memsym has no field for -> what the refusal names
REFUSED = {"longcat_flash": "two attentions and two MLPs per layer",
           "mimo_v2_flash": "value head size other than",
           "hy_v4": "hyper-connection residual streams",
           "laguna": "per-layer head counts",
           "lfm3": "per-head attention output gate",
           "qwen4_exp_text": "per-layer n-gram embeddings",
           "qwen4_exp": "sparse-attention indexer",
           "gemma3n_text": "AltUp streams", "gemma3n": "LAuReL residuals",
           "dots3_note_text": "per-head attention gate", "dots3_note": "rope-key norm",
           "bailing_hybrid": "per-channel forget gate",
           "doge": "dynamic-mask attention", "zaya": "delayed values",
           "kolibri1_1": "key/value sharing across layers",
           "axk1": "RMSNorm on the MoE block's output", "axk2": "gated RMSNorms",
           "beam": "per-head bias on its attention output gate",
           "dory": "normalised-transformer scale vectors", "ergo": "learned residual gates",
           "minimax_m3_vl_text": "block-sparse attention layers",
           "inkling_text": "relative-position logits"}


@pytest.mark.parametrize("mtype", sorted(REFUSED))
def test_unmodelled_decoder_types_are_refused_in_one_line(tmp_path, mtype):
    with pytest.raises(InvalidValueError, match=REFUSED[mtype]) as err:
        from_hf_config(write_config(tmp_path, {"model_type": mtype, **_BASE,
                                               "intermediate_size": 96}))
    msg = str(err.value)
    assert "\n" not in msg and "did you mean" not in msg and mtype not in HF_MODEL_TYPES


@pytest.mark.torch
@pytest.mark.parametrize("mtype", ["longcat_flash", "mimo_v2_flash", "laguna", "lfm3",
                                   "gemma3n_text", "doge", "zaya", "kolibri1_1", "axk1",
                                   "axk2", "beam", "dory", "ergo", "inkling_text"])
def test_the_refused_types_build_modules_memsym_has_no_field_for(mtype):
    # the oracle: transformers' model of the config class's defaults holds the parameters the
    # refusal names (a module memsym's count would miss)
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(mtype))
    names = {n for n, _ in model.named_parameters()}
    marker = {"longcat_flash": "self_attn.1.", "mimo_v2_flash": "self_attn.sinks",
              "laguna": "self_attn.g_proj", "lfm3": "self_attn.g_proj",
              "gemma3n_text": "altup.", "doge": "input_residual", "zaya": "v_proj_delayed",
              "kolibri1_1": "layers.0.self_attn.k_proj",
              "axk1": "mlp.post_mlp_layernorm", "axk2": "input_layernorm.mlp.fc1",
              "beam": "self_attn.gate_bias", "dory": "lm_head.logit_scale",
              "ergo": "attention_residual_gate", "inkling_text": "rel_logits_proj"}[mtype]
    assert any(marker in n for n in names)
    if mtype == "kolibri1_1":
        # layers that reuse an earlier layer's keys and values build no k_proj
        n_layers = model.config.num_hidden_layers
        with_k = {n.split(".")[2] for n in names if n.endswith("self_attn.k_proj.weight")}
        assert len(with_k) < n_layers
