"""The hybrid Mamba / attention model types (issue 32) against transformers' own models.

Same oracle as ``tests/test_hf_configs.py``: transformers 5.24.0 builds
``AutoModelForCausalLM.from_config`` of the very file memsym reads, on the meta device, and
``sum(p.numel())`` of its parameters must equal memsym's count.  The small configs keep every
structural switch of the published files (the layer patterns, Mamba-1 and Mamba-2 mixers, the
bias and norm switches, MoE and dense layers) with small sizes; one full-size config per family
carries the values of its published config.json (hub page cited) and is checked against the
total its model card states, rounded as the card rounds it.  The per-layer record
(``layer_mixers``, ``ffn_layers``) is checked against the pattern written out by hand, and one
Mamba-2 mixer against the modules counted by hand.  No network: every config is written here.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError, UnknownNameError
from memsym.model import active_parameter_count, from_hf_config, parameter_count, parameter_counts
from memsym.model.layer_patterns import layer_kinds, mixer_counts
from memsym.model.symbolic_counts import symbolic_parameters

from hf_oracle import TOKENS, small_config, transformers_count, write_config
from in_process import estimate

_MAMBA2 = {"mamba_n_heads": 8, "mamba_d_state": 16}

SMALL = {
    # Jamba (Mamba-1): attention every 2nd layer from 1, MoE every 2nd from 0, explicit dt_rank
    "jamba": small_config("jamba", num_hidden_layers=4, num_experts=4, attn_layer_period=2,
                          attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=0,
                          mamba_dt_rank=8, mamba_proj_bias=True, mamba_conv_bias=False),
    # the config class's defaults: attention at 4 of 9 layers, 16 experts on odd layers,
    # dt_rank "auto" = ceil(64 / 16)
    "jamba-defaults": small_config("jamba", num_hidden_layers=9),
    "jamba-dense-tied": small_config("jamba", num_experts=1, tie_word_embeddings=True),
    # Bamba: attention at the listed indices, biases, two B/C groups
    "bamba": small_config("bamba", num_hidden_layers=4, attn_layer_indices=[1, 3], mamba_n_groups=2,
                          attention_bias=True, mlp_bias=True, mamba_proj_bias=True, **_MAMBA2),
    "bamba-all-mamba": small_config("bamba", mamba_conv_bias=False, mamba_d_conv=3, **_MAMBA2),
    # Falcon-H1: attention and Mamba side by side in every layer
    "falcon_h1": small_config("falcon_h1", mamba_d_ssm=None, mamba_rms_norm=True, mamba_n_groups=2,
                              projectors_bias=True, mamba_proj_bias=True, head_dim=32, **_MAMBA2),
    "falcon_h1-defaults": small_config("falcon_h1", **_MAMBA2),
    # Nemotron-H: one mixer per layer, all four kinds, by the legacy pattern string
    "nemotron_h": small_config("nemotron_h", hybrid_override_pattern="M-M*EM", mamba_num_heads=8,
                               mamba_head_dim=16, ssm_state_size=16, n_groups=2, n_routed_experts=4,
                               moe_intermediate_size=32, moe_shared_expert_intermediate_size=48,
                               head_dim=16, num_nextn_predict_layers=1),
    # ... and by the list (legacy names), dense with biases and a bias-free conv
    "nemotron_h-list-dense": small_config("nemotron_h", layers_block_type=[
        "mamba", "mlp", "attention", "mlp", "mamba"], mamba_num_heads=4, mamba_head_dim=32,
        ssm_state_size=8, n_groups=1, mlp_bias=True, use_bias=True, use_conv_bias=False),
    # Granite 4.0: MoE with a shared MLP in every layer, or the shared MLP alone
    "granitemoehybrid": small_config("granitemoehybrid", num_hidden_layers=4,
                                     layer_types=["mamba", "attention", "mamba", "mamba"],
                                     num_local_experts=4, shared_intermediate_size=48, **_MAMBA2),
    "granitemoehybrid-dense": small_config("granitemoehybrid", num_local_experts=0,
                                           attention_bias=True, mamba_proj_bias=True,
                                           layer_types=["linear_attention", "full_attention",
                                                  "linear_attention"], **_MAMBA2),
}


@pytest.mark.parametrize("case", sorted(SMALL))
def test_small_configs_count_as_transformers_builds_them(tmp_path, case):
    path = write_config(tmp_path, SMALL[case])
    arch = from_hf_config(path)
    assert arch.extra["hf_model_type"] == SMALL[case]["model_type"]
    assert parameter_count(arch) == transformers_count(path)


def test_the_layer_record_follows_the_nemotron_pattern(tmp_path):
    # "M-M*EM", by hand: Mamba, MLP, Mamba, attention, MoE, Mamba
    arch = from_hf_config(write_config(tmp_path, SMALL["nemotron_h"]))
    assert arch.num_layers == 6
    assert arch.layer_mixers == ("mamba", "none", "mamba", "attention", "none", "mamba")
    assert arch.ffn_layers == (0, 1, 0, 0, 1, 0)
    assert arch.moe_layer_freq == (0, 0, 0, 0, 1, 0)
    assert mixer_counts(arch) == (1, 3, 2)
    notes = " ".join(arch.extra["notes"])
    assert "num_nextn_predict_layers=1 not counted" in notes
    assert "e_score_correction_bias (1 x 4)" in notes


def test_the_layer_record_follows_the_jamba_periods(tmp_path):
    # attn_layer_period 8, offset 4 and expert_layer_period 2, offset 1 over 9 layers
    arch = from_hf_config(write_config(tmp_path, SMALL["jamba-defaults"]))
    assert arch.layer_mixers == ("mamba",) * 4 + ("attention",) + ("mamba",) * 4
    assert arch.moe_layer_freq == (0, 1, 0, 1, 0, 1, 0, 1, 0)
    assert (arch.mamba_version, arch.mamba_dt_rank, arch.mamba_inner_size) == (1, 4, 128)


def test_falcon_h1_layers_hold_both_mixers(tmp_path):
    arch = from_hf_config(write_config(tmp_path, SMALL["falcon_h1"]))
    assert set(arch.layer_mixers) == {"parallel"} and mixer_counts(arch) == (3, 3, 3)


def test_one_mamba2_mixer_counted_by_hand(tmp_path):
    # Bamba, h = 64, d_inner = 2 * 64 = 128, H = 8, G = 2, N = 16, kernel 4, proj biases:
    # in_proj 64 x (2*128 + 2*2*16 + 8) + bias, conv1d (128 + 64) x 4 + bias, dt_bias, A_log, D,
    # the gated norm over 128, out_proj 128 x 64 + bias
    proj = 2 * 128 + 2 * 2 * 16 + 8
    by_hand = 64 * proj + proj + 192 * 4 + 192 + 3 * 8 + 128 + 128 * 64 + 64
    arch = from_hf_config(write_config(tmp_path, SMALL["bamba"]))
    counts = parameter_counts(arch)
    assert counts["mamba"] == 2 * by_hand            # layers 0 and 2
    expr = symbolic_parameters(arch, "mamba", per_layer=True)
    assert "d_ssm" in str(expr) and "N_ssm" in str(expr)


# --------------------------------------------------------------------------------------------
# one full-size published config per family, against its model card
# --------------------------------------------------------------------------------------------

# The four configs below were written out without network access (from copies of the published
# files and the model cards' stated structure, not read from the hub at a pinned revision), so
# each is checked against the total its card states: a wrong field would show as a mismatch.
# https://huggingface.co/ai21labs/Jamba-v0.1 config.json; card: "52B parameters", "12B active"
JAMBA_V01 = {"model_type": "jamba", "hidden_size": 4096, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
             "vocab_size": 65536, "num_experts": 16, "num_experts_per_tok": 2,
             "expert_layer_period": 2, "expert_layer_offset": 1, "attn_layer_period": 8,
             "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
             "mamba_dt_rank": 256, "mamba_conv_bias": True, "mamba_proj_bias": False,
             "tie_word_embeddings": False, **TOKENS}
# https://huggingface.co/nvidia/Nemotron-H-8B-Base-8K config.json (pattern and sizes as
# Megatron-Bridge's 8B recipe, src/megatron/bridge/recipes/nemotronh/h100/nemotronh.py at
# 067f987df0, states them); card: an 8B model
NEMOTRON_H_8B = {"model_type": "nemotron_h", "hidden_size": 4096, "num_hidden_layers": 52,
                 "hybrid_override_pattern":
                     "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
                 "intermediate_size": 21504, "num_attention_heads": 32, "num_key_value_heads": 8,
                 "attention_head_dim": 128, "vocab_size": 131072, "ssm_state_size": 128,
                 "conv_kernel": 4, "expand": 2, "n_groups": 8, "mamba_num_heads": 128,
                 "mamba_head_dim": 64, "mamba_proj_bias": False, "mlp_bias": False,
                 "use_bias": False, "use_conv_bias": True, "tie_word_embeddings": False,
                 "max_position_embeddings": 8192, **TOKENS}
# https://huggingface.co/ibm-ai-platform/Bamba-9B config.json; card: a 9B model, the hub
# page's parameter count 9.78B
BAMBA_9B = {"model_type": "bamba", "hidden_size": 4096, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
            "vocab_size": 128256, "attn_layer_indices": [9, 18, 27], "mamba_n_heads": 128,
            "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_expand": 2,
            "mamba_d_conv": 4, "tie_word_embeddings": False, **TOKENS}
# https://huggingface.co/tiiuae/Falcon-H1-7B-Base config.json; card: a 7B model (the name
# only: checked to lie between 7 and 8 billion)
FALCON_H1_7B = {"model_type": "falcon_h1", "hidden_size": 3072, "num_hidden_layers": 44,
                "num_attention_heads": 12, "num_key_value_heads": 2, "head_dim": 128,
                "intermediate_size": 12288, "vocab_size": 130048, "mamba_d_state": 256,
                "mamba_n_groups": 1, "mamba_n_heads": 24, "mamba_d_head": 128,
                "mamba_d_ssm": 3072, "mamba_expand": 2, "mamba_d_conv": 4,
                "tie_word_embeddings": False, **TOKENS}


@pytest.mark.parametrize("cfg,card,digits", [
    (JAMBA_V01, 52e9, 1e9), (NEMOTRON_H_8B, 8e9, 1e9), (BAMBA_9B, 9.78e9, 1e7),
    (FALCON_H1_7B, 7.5e9, 1e9),
])
def test_full_size_configs_match_their_model_cards(tmp_path, cfg, card, digits):
    arch = from_hf_config(write_config(tmp_path, cfg))
    # the card's rounding: |N - card| at most half its last digit
    assert abs(parameter_count(arch) - card) <= digits / 2


def test_jamba_active_parameters_match_the_card(tmp_path):
    # Jamba-v0.1 card: "12B active parameters" (2 of 16 experts in the 16 MoE layers)
    arch = from_hf_config(write_config(tmp_path, JAMBA_V01))
    assert abs(active_parameter_count(arch) - 12e9) <= 0.5e9


# --------------------------------------------------------------------------------------------
# refusals, each in one line
# --------------------------------------------------------------------------------------------

def test_a_hybrids_layer_kinds_are_its_mlp_kinds(tmp_path):
    # the MLP / MoE blocks only: Nemotron-H's "M-M*EM" has one dense MLP and one MoE block,
    # Bamba a dense MLP in every layer (the mixers: memsym.model.stages.layer_kind_pattern)
    assert layer_kinds(from_hf_config(write_config(tmp_path, SMALL["nemotron_h"]))) == {False, True}
    assert layer_kinds(from_hf_config(write_config(tmp_path, SMALL["bamba"], "b"))) == {False}


def test_the_cli_refuses_a_mamba1_estimate_in_one_line(tmp_path, capsys):
    # estimates of Mamba-2 hybrids: tests/test_hybrid_estimate.py
    path = write_config(tmp_path, SMALL["jamba"])
    code, out, err = estimate(capsys, path, "--seq-length", 64)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "not modelled" in err
    assert "Mamba-1" in err



# zamba and zamba2 (shared transformer blocks) are read: tests/test_hf_zamba.py


def test_a_misspelt_hybrid_type_is_refused_not_read(tmp_path):
    with pytest.raises(UnknownNameError) as err:
        from_hf_config(write_config(tmp_path, {**SMALL["jamba"], "model_type": "jambba"}))
    msg = str(err.value)
    assert "\n" not in msg and "'jambba'" in msg and "never reads one in place" in msg


@pytest.mark.parametrize("cfg,match", [
    ({**SMALL["nemotron_h"], "hybrid_override_pattern": "M-X"}, "hybrid_override_pattern"),
    ({**SMALL["nemotron_h"], "mlp_bias": True}, "mlp_bias true with MoE"),
    ({**SMALL["nemotron_h"], "hybrid_override_pattern": "M" * 257}, "config_layers|at most"),
    ({**SMALL["granitemoehybrid"], "layer_types": ["mamba"]}, "must list 4 layer types"),
    ({**SMALL["jamba"], "attn_layer_offset": 2}, "smaller than their period"),
    ({**SMALL["jamba"], "mamba_dt_rank": "big"}, "mamba_dt_rank"),
    ({**SMALL["bamba"], "mamba_n_groups": 3}, "not a multiple of its 3 groups"),
    ({**SMALL["bamba"], "mamba_d_state": 2 ** 40}, "mamba_d_state"),
])
def test_what_transformers_cannot_build_or_memsym_does_not_model(tmp_path, cfg, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------------------------
# the Mamba-2 layer's activations (memsym/terms/mamba2.py; composed: test_hybrid_estimate.py)
# --------------------------------------------------------------------------------------------

def test_mamba_layer_activations_of_nemotron_h_8b_by_hand():
    from memsym.symbols import G_ssm, H_ssm, N_ssm, b, d_ssm, h, s, t
    from memsym.terms.mamba2 import mamba_layer_activations

    # Nemotron-H-8B (above), s = 8192, b = 1, t = 1, bf16, written out from the tensors the
    # sources save: the fused norm's input and output [s, b, 4096] each; zxBCdt
    # [b, s, 2*8192 + 2*8*128 + 128]; out_x [b, s, 128, 64]; the gated RMSNorm's input
    # [s*b, 8192] and rstd [8 * s*b] fp32; out_proj's input [s, b, 8192]
    tokens = 8192
    by_hand = (2 * 2 * tokens * 4096 + 2 * tokens * (2 * 8192 + 2 * 8 * 128 + 128)
               + 2 * tokens * 128 * 64 + 2 * tokens * 8192 + 4 * 8 * tokens + 2 * tokens * 8192)
    vals = {s: tokens, b: 1, t: 1, h: 4096, d_ssm: 128 * 64, G_ssm: 8, N_ssm: 128, H_ssm: 128}
    assert mamba_layer_activations().expr.subs(vals) == by_hand
    # tensor parallelism splits every d_ssm-, G- and H-wide tensor; sequence parallelism also
    # the h-wide ones; hidden dropout adds a 1-byte mask of h per token
    sp8 = mamba_layer_activations(sequence_parallel=True, dropout=True).expr.subs({**vals, t: 8})
    assert sp8 * 8 == by_hand + tokens * 4096
    keys = [term.key for term in mamba_layer_activations(gated_norm=False)]
    assert keys == ["norm_inputs", "zxbcdt", "scan_output", "out_proj_input"]


def test_the_record_refuses_patterns_that_do_not_fit():
    from memsym.model import Architecture, resolve

    base = dict(num_layers=2, hidden_size=8, num_attention_heads=2, position_embedding_type="rope",
                mamba_inner_size=16, mamba_state_dim=4, mamba_num_heads=2)
    with pytest.raises(InvalidValueError, match="layer_mixers must list 2 entries"):
        resolve(Architecture(**base, layer_mixers=("mamba", "ssm")))
    with pytest.raises(InvalidValueError, match="ffn_layers says has no"):
        resolve(Architecture(**base, layer_mixers=("mamba", "attention"), ffn_layers=(0, 1),
                             num_experts=2, moe_router_topk=1, moe_layer_freq=(1, 1)))
    with pytest.raises(InvalidValueError, match="need mamba_dt_rank"):
        resolve(Architecture(**base, layer_mixers=("mamba", "attention"), mamba_version=1))
    with pytest.raises(InvalidValueError, match="mamba_state_dim"):
        resolve(Architecture(**{**base, "mamba_state_dim": 2 ** 40},
                             layer_mixers=("mamba", "attention")))


def test_a_hybrid_has_no_single_layer_count(tmp_path):
    arch = from_hf_config(write_config(tmp_path, SMALL["bamba"]))
    with pytest.raises(InvalidValueError, match="layers differ"):
        symbolic_parameters(arch, "layer", per_layer=True)
