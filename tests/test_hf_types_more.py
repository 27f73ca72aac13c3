"""More current causal-LM types of transformers 5.25.0 that memsym's Architecture expresses (issue
32, item 4): Lara Mini (``lara_mini``: Qwen3.5's Gated DeltaNet beside Qwen3's attention and a
MoE with an ungated shared expert), Cohere Compass's language model (``cohere_compass_text``:
Cohere2's parallel block), CTRL (``ctrl``) and Gemma 4 Unified's language model
(``gemma4_unified_text``: Gemma 4's text model without per-layer inputs or MoE); and the causal-LM types of
``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` whose layers memsym does not model, refused in one line
naming what is missing.

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

from hf_oracle import TOKENS, assert_masks_follow_dropout, class_defaults, write_config
from in_process import estimate

# the model types this file covers
TYPES = {"lara_mini", "cohere_compass_text", "ctrl", "gemma4_unified_text"}

_BASE = {"hidden_size": 64, "num_hidden_layers": 5, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 64, **TOKENS}
_LARA = {"model_type": "lara_mini", **_BASE, "head_dim": 16, "moe_intermediate_size": 16,
         "num_experts": 4, "num_experts_per_tok": 2, "shared_expert_intermediate_size": 24,
         "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
         "linear_value_head_dim": 12, "linear_conv_kernel_dim": 3}
_ROPE = {"rope_type": "default", "rope_theta": 10000.0}
_COMPASS = {"model_type": "cohere_compass_text", **_BASE, "intermediate_size": 96,
            "rope_parameters": {"full_attention": _ROPE}}
_CTRL = {"model_type": "ctrl", "n_embd": 64, "n_layer": 3, "n_head": 4, "dff": 96,
         "vocab_size": 128, "n_positions": 32, **TOKENS}
_GEMMA4U = {"model_type": "gemma4_unified_text", **_BASE, "num_hidden_layers": 6, "head_dim": 16,
            "global_head_dim": 16, "intermediate_size": 96}

SMALL = {
    # Lara Mini: the released period-5 pattern (linear, sliding, linear, full, sliding), tied;
    # or the layers listed (a legacy "attention" name among them), no shared expert, biased
    # attention, untied
    "lara_mini": _LARA,
    "lara_mini-listed-no-shared-bias-untied": {
        **_LARA, "num_hidden_layers": 3, "layer_types": ["attention", "linear_attention",
                                                         "sliding_attention"],
        "shared_expert_intermediate_size": 0, "attention_bias": True,
        "tie_word_embeddings": False},
    # Cohere Compass's language model: every layer full attention, tied; or sliding layers (a
    # NoPE full layer), biased attention, a head_dim of its own, MHA (null KV heads), untied
    "cohere_compass_text": _COMPASS,
    "cohere_compass_text-swa-bias-head-dim-mha-untied": {
        **_COMPASS, "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
        "rope_parameters": {"full_attention": None, "sliding_attention": _ROPE},
        "attention_bias": True, "head_dim": 8, "num_key_value_heads": None,
        "tie_word_embeddings": False},
    # CTRL: tied (the LM head's bias its own); or untied, 8 heads of 8
    "ctrl": _CTRL,
    "ctrl-untied": {**_CTRL, "n_layer": 2, "n_head": 8, "dff": 40, "vocab_size": 100,
                    "tie_word_embeddings": False},
    # Gemma 4 Unified's language model: five sliding layers and a full one of Gemma 4's
    # attention, four norms a layer, tied; or the full layer of its own head size with keys as
    # values and its own KV heads, biased attention, untied; or KV sharing across layers
    "gemma4_unified_text": _GEMMA4U,
    "gemma4_unified_text-global-k-eq-v-bias-untied": {
        **_GEMMA4U, "global_head_dim": 32, "attention_k_eq_v": True,
        "num_global_key_value_heads": 1, "attention_bias": True, "tie_word_embeddings": False},
    "gemma4_unified_text-kv-shared": {**_GEMMA4U, "num_hidden_layers": 8,
                                      "num_kv_shared_layers": 2},
    # Gemma 4's per-layer input and MoE fields in the file: the unified model builds neither
    "gemma4_unified_text-gemma4-fields-ignored": {
        **_GEMMA4U, "hidden_size_per_layer_input": 16, "vocab_size_per_layer_input": 128,
        "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2,
        "moe_intermediate_size": 8},
}
# no published config.json is copied here (no network): the config classes' defaults
# (Lara-4-Mini-Base, Salesforce/ctrl, the docstrings' checkpoints) are counted by hand below
REAL: dict = {}


def _count(tmp_path, mtype, **over):
    return parameter_count(from_hf_config(write_config(
        tmp_path, {**class_defaults(mtype), **over}, mtype)))


@pytest.mark.torch
def test_lara_mini_defaults_by_hand(tmp_path):
    # LaraMiniConfig: h 1024, 34 layers in the period-5 pattern (14 Gated DeltaNet, 20
    # attention), a 16, g 4, d 128; V 151936, tied.  Attention: q, o h x a d, k, v h x g d, q/k
    # norms of d.  Gated DeltaNet: hk 8, dk 128, hv 16, dv 128: in_proj_qkv h (2 hk dk + hv dv),
    # in_proj_z h hv dv, in_proj_b, in_proj_a h hv, conv1d (2 hk dk + hv dv) 4, dt_bias, A_log
    # hv, a gated norm dv, out_proj hv dv h.  Every layer: a router E x h, E 128 gated experts
    # of 512, a gated shared MLP of 512, two norms
    h, L, a, g, d, V, E, fe = 1024, 34, 16, 4, 128, 151936, 128, 512
    hk, dk, hv, dv = 8, 128, 16, 128
    n_gdn = sum(1 for i in range(L) if i % 5 in (0, 2))
    att = 2 * h * a * d + 2 * h * g * d + 2 * d
    conv = 2 * hk * dk + hv * dv
    gdn = h * conv + h * hv * dv + 2 * h * hv + conv * 4 + 2 * hv + dv + hv * dv * h
    moe = E * h + E * 3 * h * fe + 3 * h * fe
    total = V * h + n_gdn * gdn + (L - n_gdn) * att + L * (moe + 2 * h) + h
    assert n_gdn == 14
    assert _count(tmp_path, "lara_mini") == total == 7_281_684_672


@pytest.mark.torch
def test_ctrl_defaults_by_hand(tmp_path):
    # CTRLConfig: h 1280, 48 layers, 16 heads, dff 8192, V 246534, tied; Wq, Wk, Wv, dense with
    # biases, the FFN's two biased linears, two LayerNorms (weight and bias) a layer, a final
    # LayerNorm, the LM head's bias V
    h, L, f, V = 1280, 48, 8192, 246534
    total = V * h + L * (4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h) + 2 * h + V
    assert _count(tmp_path, "ctrl") == total == 1_637_964_550


@pytest.mark.torch
def test_gemma4_unified_text_defaults_by_hand(tmp_path):
    # Gemma4UnifiedTextConfig: h 2304, 30 layers (every sixth full attention, head_dim 512 there
    # by per_layer_config; 256 elsewhere), a 8, g 4, q/k norms of the head size (v_norm has no
    # weight), f 9216, four norms a layer, V 262144, tied; no per-layer input embedding
    h, L, a, g, d, D, f, V = 2304, 30, 8, 4, 256, 512, 9216, 262144

    def att(dh):
        return 2 * h * a * dh + 2 * h * g * dh + 2 * dh

    total = V * h + 25 * att(d) + 5 * att(D) + L * (3 * h * f + 4 * h) + h
    assert _count(tmp_path, "gemma4_unified_text") == total == 3_010_758_400


def test_cohere_compass_text_class_defaults_by_hand(tmp_path):
    # CohereCompassTextConfig's own defaults name no rope_parameters per layer type, which
    # CohereCompassRotaryEmbedding reads (transformers builds no model of them); with one for
    # its full-attention layers: h 8192, 40 layers, MHA a 64 (d 128), f 22528, one bias-free
    # LayerNorm (h) a layer and a final one, V 256000, tied
    h, L, f, V = 8192, 40, 22528, 256000
    total = V * h + L * (4 * h * h + 3 * h * f + h) + h
    assert _count(tmp_path, "cohere_compass_text",
                  rope_parameters={"full_attention": _ROPE}) == total == 34_980_831_232
    with pytest.raises(InvalidValueError, match="keyed by layer type"):
        _count(tmp_path, "cohere_compass_text")


def test_estimates_run(tmp_path, capsys):
    for case in ("lara_mini", "cohere_compass_text", "ctrl", "gemma4_unified_text"):
        code, out, err = estimate(capsys, write_config(tmp_path, SMALL[case], case),
                                  "--seq-length", 32)
        assert code == 0, err


@pytest.mark.torch
@pytest.mark.parametrize("p", [0.0, 0.1])
def test_ctrl_dropout_is_resid_and_embd_pdrop(tmp_path, p):
    # transformers' model in training mode draws a mask exactly when memsym reads a probability
    # above zero (EncoderLayer's dropout1 / dropout2, CTRLModel's embedding dropout)
    path = write_config(tmp_path, {**_CTRL, "resid_pdrop": p, "embd_pdrop": p})
    assert assert_masks_follow_dropout(path) == {"resid_pdrop": p, "embd_pdrop": p}


# --------------------------------------------------------------------------------------------
# refusals
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg,match", [
    ({**_LARA, "layer_types": ["linear_attention"] * 4}, "must list 5 layer types"),
    ({**_LARA, "linear_num_key_heads": 3}, "must be a multiple of linear_num_key_heads"),
    ({**_LARA, "num_key_value_heads": 3}, "must be a multiple of num_key_value_heads"),
    ({**_COMPASS, "rope_parameters": _ROPE}, "needs 'rope_parameters' keyed by layer type"),
    ({**_COMPASS, "layer_types": ["sliding_attention"] * 5},
     "needs 'rope_parameters' keyed by layer type"),
    ({**_COMPASS, "layer_types": ["linear_attention"] * 5}, "must list 5 layer types"),
    ({**_CTRL, "n_head": 5}, "n_embd must be a multiple of n_head"),
])
def test_what_transformers_cannot_build(tmp_path, cfg, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value)


#: the causal-LM types whose layers memsym has no field for -> what the refusal names
REFUSED = {"inkling2_text": "relative-position bias", "inkling2_loop_text": "message gates",
           "hrm_text": "two recurrent stacks", "gemma4_assistant": "assistant drafter",
           "gemma4_unified_assistant": "assistant drafter",
           "modernbert-decoder": "prediction head", "recurrent_gemma": "RG-LRU",
           "rwkv": "time-mixing", "xlstm": "mLSTM", "blt": "byte-level local encoder",
           "cpmant": "relative-position attention bias", "mllama": "gated cross-attention",
           "gpt_neox_japanese": "last layer only", "reformer": "LSH"}


@pytest.mark.parametrize("mtype", sorted(REFUSED))
def test_unmodelled_causal_lm_types_are_refused_in_one_line(tmp_path, mtype):
    with pytest.raises(InvalidValueError, match=REFUSED[mtype]) as err:
        from_hf_config(write_config(tmp_path, {"model_type": mtype, **_BASE,
                                               "intermediate_size": 96}))
    msg = str(err.value)
    assert "\n" not in msg and "did you mean" not in msg and mtype not in HF_MODEL_TYPES


#: the parameter a refused type's model holds that memsym's count would miss (the oracle);
#: gemma4_assistant's and reformer's config classes build no model at their defaults
_MARKER = {"inkling2_text": "self_attn.relative_position_bias.",
           "inkling2_loop_text": "k_message_gate.", "hrm_text": "model.H_module.",
           "gemma4_unified_assistant": "pre_projection.",
           "modernbert-decoder": "lm_head.dense.", "recurrent_gemma": "rg_lru.",
           "rwkv": "attention.time_decay", "xlstm": "mlstm_layer.", "blt": "local_encoder.",
           "cpmant": "position_bias.relative_attention_bias", "mllama": "cross_attn_attn_gate",
           "gpt_neox_japanese": "attention.dense_bias"}


@pytest.mark.torch
@pytest.mark.parametrize("mtype", sorted(_MARKER))
def test_the_refused_types_build_modules_memsym_has_no_field_for(mtype):
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(mtype))
    names = [n for n, _ in model.named_parameters()]
    assert any(_MARKER[mtype] in n for n in names)
    if mtype == "gpt_neox_japanese":
        # the output bias is in the last layer alone
        assert sum("dense_bias" in n for n in names) == 1
