"""Current MoE and multi-latent-attention causal-LM types of transformers (issue 32, item 4):
Command A MoE (``cohere2_moe``), AFMoE (Trinity), MiniCPM3 and Solar Open, against transformers'
own models; JetMoE refused in one line.

Same oracle as ``tests/test_hf_newer_types.py``: transformers (5.25.0 when checked) builds
``AutoModelForCausalLM.from_config`` of the very file memsym reads, on the meta device, and
``sum(p.numel())`` of its parameters (a tied weight once) must equal memsym's count, for small
configs (every structural switch), the config classes' defaults and published full-size configs,
each also counted by hand from the modules its modeling file builds.  No network: every config is
written here.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.model import active_parameter_count, from_hf_config, parameter_count, parameter_counts
from memsym.model.hf_config import HF_MODEL_TYPES

from hf_oracle import TOKENS, billions, write_config
from in_process import estimate

# the model types this file covers
TYPES = {"cohere2_moe", "afmoe", "minicpm3", "solar_open"}

_BASE = {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
         "vocab_size": 128, "max_position_embeddings": 64, **TOKENS}
_COHERE = {"model_type": "cohere2_moe", **_BASE, "num_key_value_heads": 2, "head_dim": 16,
           "intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2}
_AFMOE = {"model_type": "afmoe", **_BASE, "num_key_value_heads": 2, "head_dim": 16,
          "intermediate_size": 96, "moe_intermediate_size": 16, "num_experts": 4,
          "num_experts_per_tok": 2, "num_shared_experts": 1, "num_dense_layers": 1,
          "global_attn_every_n_layers": 2, "sliding_window": 8}
_MINICPM3 = {"model_type": "minicpm3", **_BASE, "num_key_value_heads": 4,
             "intermediate_size": 96, "q_lora_rank": 24, "kv_lora_rank": 16,
             "qk_nope_head_dim": 8, "qk_rope_head_dim": 8}
_SOLAR = {"model_type": "solar_open", **_BASE, "num_key_value_heads": 2, "head_dim": 16,
          "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
          "n_shared_experts": 1}

SMALL = {
    # Command A MoE: one bias-free LayerNorm feeding attention and MoE in parallel, every layer
    # MoE, tied; or a dense first layer of its own width, shared experts, RMSNorm, biases,
    # untied; or the MLP kinds listed
    "cohere2_moe": _COHERE,
    "cohere2_moe-dense-shared-rms-bias-untied": {
        **_COHERE, "first_k_dense_replace": 1, "prefix_dense_intermediate_size": 96,
        "num_shared_experts": 2, "rms_norm_eps": 1e-6, "attention_bias": True,
        "tie_word_embeddings": False},
    "cohere2_moe-listed": {**_COHERE, "mlp_layer_types": ["sparse", "dense", "sparse"],
                           "prefix_dense_intermediate_size": 48},
    # AFMoE: gated attention with q/k norms, four norms a layer, a dense first layer, then MoE
    # with a shared expert and the expert_bias parameter; or every layer MoE, no shared, tied
    "afmoe": _AFMOE,
    "afmoe-all-moe-no-shared-tied": {**_AFMOE, "num_dense_layers": 0, "num_shared_experts": 0,
                                     "tie_word_embeddings": True},
    # MiniCPM3: multi-latent attention with q LoRA, a dense gated MLP, tied; or no q LoRA, a
    # v_head_dim of its own, MLP biases, untied
    "minicpm3": _MINICPM3,
    "minicpm3-no-q-lora-v-head-mlp-bias-untied": {
        **_MINICPM3, "q_lora_rank": None, "v_head_dim": 8, "mlp_bias": True,
        "tie_word_embeddings": False},
    # Solar Open: MoE with a shared expert in every layer, untied; or q, k, v biased, two shared
    # experts, tied
    "solar_open": _SOLAR,
    "solar_open-bias-2-shared-tied": {**_SOLAR, "attention_bias": True, "n_shared_experts": 2,
                                      "tie_word_embeddings": True},
}


# --------------------------------------------------------------------------------------------
# full-size configs
# --------------------------------------------------------------------------------------------

REAL = {
    # https://huggingface.co/arcee-ai/Trinity-Nano-Preview/blob/main/config.json: every field
    # below as a public test copies the file ("matches arcee-ai/Trinity-Nano-Preview/
    # config.json"); its remote-code auto_map and the routing fields (no parameter) left out
    "trinity-nano-preview": {
        "architectures": ["AfmoeForCausalLM"], "model_type": "afmoe", "attention_dropout": 0.0,
        "global_attn_every_n_layers": 4, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 1024, "intermediate_size": 3072, "max_position_embeddings": 131072,
        "moe_intermediate_size": 256, "mup_enabled": True, "num_attention_heads": 8,
        "num_dense_layers": 2, "num_experts": 128, "num_experts_per_tok": 8,
        "num_hidden_layers": 56, "num_key_value_heads": 2, "num_shared_experts": 1,
        "rms_norm_eps": 1e-05, "rope_theta": 10000, "route_scale": 2.826,
        "sliding_window": 2048, "tie_word_embeddings": False, "vocab_size": 200192},
    # https://huggingface.co/upstage/Solar-Open-100B/blob/main/config.json: the fields below as
    # several public copies quote the file ("a faithful slice of the real upstage/Solar-Open-100B
    # config.json"); its yarn rope_scaling (no parameter) left out
    "solar-open-100b": {
        "architectures": ["SolarOpenForCausalLM"], "model_type": "solar_open",
        "hidden_size": 4096, "num_hidden_layers": 48, "num_attention_heads": 64,
        "head_dim": 128, "num_key_value_heads": 8, "vocab_size": 196608,
        "intermediate_size": 10240, "moe_intermediate_size": 1280, "rms_norm_eps": 1e-05,
        "rope_theta": 1000000, "max_position_embeddings": 131072, "n_routed_experts": 128,
        "n_shared_experts": 1, "norm_topk_prob": True, "routed_scaling_factor": 1.0,
        "num_experts_per_tok": 8, "tie_word_embeddings": False, "first_k_dense_replace": 0},
    # https://huggingface.co/openbmb/MiniCPM3-4B/blob/main/config.json: the sizes as a public
    # test quotes them (MINICPM3_4B_HF); no tie_word_embeddings there (MiniCPM3Config's default
    # true: "MiniCPM3-4B ties embeddings (no lm_head.weight)", a public conversion script); its
    # longrope rope_scaling (no parameter) left out
    "minicpm3-4b": {
        "architectures": ["MiniCPM3ForCausalLM"], "model_type": "minicpm3", "hidden_size": 2560,
        "num_hidden_layers": 62, "num_attention_heads": 40, "num_key_value_heads": 40,
        "intermediate_size": 6400, "vocab_size": 73448, "q_lora_rank": 768,
        "kv_lora_rank": 256, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32,
        "max_position_embeddings": 32768, "scale_emb": 12, "dim_model_base": 256,
        "scale_depth": 1.4},
    # a published cohere2_moe checkpoint's config.json as a public repository pins it for its
    # artifact check ("North" mini code model; the Hub repository is not named there):
    # hidden 2048, 49 layers, a dense first layer of 3072, 128 experts of 768, top-8, no shared
    # expert, RMSNorm (rms_norm_eps set); its tie_word_embeddings is null there (the class
    # default, true, applies); use_parallel_block / use_qk_norm are not transformers' fields
    "cohere2-moe-north": {
        "architectures": ["Cohere2MoeForCausalLM"], "model_type": "cohere2_moe",
        "hidden_size": 2048, "head_dim": 128, "num_hidden_layers": 49,
        "intermediate_size": 768, "prefix_dense_intermediate_size": 3072,
        "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 262144,
        "num_experts": 128, "num_experts_per_tok": 8, "num_shared_experts": 0,
        "first_k_dense_replace": 1, "prefix_dense_sliding_window_pattern": 1,
        "expert_selection_fn": "sigmoid", "sliding_window": 4096, "rope_theta": 50000,
        "max_position_embeddings": 500000, "norm_topk_prob": False, "rms_norm_eps": 1e-06,
        "layer_norm_eps": 1e-05,
        "layer_types": ["full_attention" if i % 4 == 0 else "sliding_attention"
                        for i in range(49)]},
}


def _read(tmp_path, case):
    return from_hf_config(write_config(tmp_path, REAL[case], case))


def test_trinity_nano_hand_count(tmp_path):
    # modeling_afmoe.py (h=1024, a=8, g=2, d=128, f=3072, f_e=256, E=128, one shared, 2 dense
    # layers of 56, V=200192, untied): q, o, gate_proj h a d each, k, v h g d each, q_norm and
    # k_norm d each; four RMSNorms a layer; router h E, expert_bias E, E experts 3 h f_e, the
    # shared MLP 3 h f_e; dense MLP 3 h f
    h, a, g, d, f, fe, E, L, V = 1024, 8, 2, 128, 3072, 256, 128, 56, 200192
    att = 3 * h * a * d + 2 * h * g * d + 2 * d
    moe = h * E + E + E * 3 * h * fe + 3 * h * fe
    total = 2 * V * h + L * (att + 4 * h) + 2 * 3 * h * f + (L - 2) * moe + h
    arch = _read(tmp_path, "trinity-nano-preview")
    assert parameter_count(arch) == total
    assert parameter_counts(arch)["router"] == (L - 2) * (h * E + E)
    # the model card: Trinity Nano "6B parameters, 1B active" (rounded; the active count
    # without the embedding and lm_head)
    assert billions(parameter_count(arch)) == 6
    assert billions(active_parameter_count(arch) - 2 * V * h) == 1


def test_solar_open_100b_hand_count_and_card(tmp_path):
    # modeling_solar_open.py (h=4096, a=64, g=8, d=128, f_e=1280, E=128, one shared, L=48,
    # V=196608, untied): q, k, v, o without bias; router E x h; E gated experts and the shared
    # MLP of f_e; two RMSNorms a layer
    h, a, g, d, fe, E, L, V = 4096, 64, 8, 128, 1280, 128, 48, 196608
    layer = 2 * h * a * d + 2 * h * g * d + E * h + (E + 1) * 3 * h * fe + 2 * h
    arch = _read(tmp_path, "solar-open-100b")
    assert parameter_count(arch) == 2 * V * h + L * layer + h
    # the model card: "102.6B total parameters, 12B active" (102.65B, cut to tenths)
    assert parameter_count(arch) // 10**8 == 1026
    assert billions(active_parameter_count(arch)) == 12
    assert any("e_score_correction_bias" in n for n in arch.extra["notes"])


def test_minicpm3_4b_hand_count(tmp_path):
    # modeling_minicpm3.py (h=2560, a=40, r_q=768, r_kv=256, d_nope=64, d_rope=32, d_v=h/a=64,
    # f=6400, L=62, V=73448, tied): q_a_proj h r_q, q_a_layernorm r_q, q_b_proj r_q a (d_nope +
    # d_rope), kv_a_proj_with_mqa h (r_kv + d_rope), kv_a_layernorm r_kv, kv_b_proj r_kv a
    # (d_nope + d_v), o_proj a d_v h; gated MLP; two RMSNorms
    h, a, rq, rkv, dn, dr, dv, f, L, V = 2560, 40, 768, 256, 64, 32, 64, 6400, 62, 73448
    att = h * rq + rq + rq * a * (dn + dr) + h * (rkv + dr) + rkv + rkv * a * (dn + dv) + a * dv * h
    arch = _read(tmp_path, "minicpm3-4b")
    assert parameter_count(arch) == V * h + L * (att + 3 * h * f + 2 * h) + h
    # the model card: "MiniCPM3-4B" (4B, cut)
    assert parameter_count(arch) // 10**9 == 4


def test_cohere2_moe_north_hand_count(tmp_path):
    # modeling_cohere2_moe.py (h=2048, a=32, g=4, d=128, f_dense=3072, f_e=768, E=128, L=49,
    # one dense layer, V=262144, tied): q, k, v, o without bias; one RMSNorm a layer; router
    # E x h; E gated experts of f_e; the final norm
    h, a, g, d, fd, fe, E, L, V = 2048, 32, 4, 128, 3072, 768, 128, 49, 262144
    att = 2 * h * a * d + 2 * h * g * d
    total = V * h + L * (att + h) + 3 * h * fd + (L - 1) * (E * h + E * 3 * h * fe) + h
    arch = _read(tmp_path, "cohere2-moe-north")
    assert parameter_count(arch) == total
    assert arch.normalization == "RMSNorm" and arch.parallel_attention


@pytest.mark.parametrize("case", ["solar-open-100b", "minicpm3-4b"])
def test_an_estimate_runs(tmp_path, case, capsys):
    path = write_config(tmp_path, REAL[case], case)
    code, out, err = estimate(capsys, path, "--seq-length", 4096)
    assert code == 0, err


# --------------------------------------------------------------------------------------------
# refusals, dropout
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg,match", [
    ({**_AFMOE, "attention_bias": True}, "attention_bias true in an AFMoE config"),
    ({**_MINICPM3, "attention_bias": True}, "attention_bias true in a MiniCPM3 config"),
    ({**_COHERE, "first_k_dense_replace": 1}, "missing field 'prefix_dense_intermediate_size'"),
    ({**_COHERE, "mlp_layer_types": ["dense"]}, "'mlp_layer_types' must list"),
    ({"model_type": "jetmoe", **_BASE}, "JetMoE's mixture of attention heads"),
])
def test_what_transformers_cannot_build_or_memsym_does_not_model(tmp_path, cfg, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value)


def test_jetmoe_is_refused_with_no_near_type_offered(tmp_path):
    with pytest.raises(InvalidValueError) as err:
        from_hf_config(write_config(tmp_path, {"model_type": "jetmoe", **_BASE}))
    assert "did you mean" not in str(err.value) and "jetmoe" not in HF_MODEL_TYPES
