"""The classic causal-LM types of current transformers (issue 32, item 4): OPT, GPT-Neo, CodeGen,
MPT, Persimmon, XGLM, BioGPT, against transformers' own models; GPT-1, BitNet, DiffLlama and Kimi
Linear refused in one line naming what memsym does not model.

Same oracle as ``tests/test_hf_newer_types.py``: transformers (5.25.0 when checked) builds
``AutoModelForCausalLM.from_config`` of the very file memsym reads, on the meta device, and
``sum(p.numel())`` of its parameters (a tied weight once) must equal memsym's count.  Small configs
keep every structural switch with small sizes; one full-size config per family carries the values
of its published config.json (hub page cited) and is checked against transformers and against a
hand count written out from the modules the modeling file builds.  No network: every config is
written here.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError, UnknownNameError
from memsym.model import from_hf_config, parameter_count, parameter_counts
from memsym.model.hf_config import class_dropout

from hf_oracle import TOKENS, assert_masks_follow_dropout, one_case_per_type, write_config
from in_process import estimate

# the model types this file covers
TYPES = {"opt", "gpt_neo", "codegen", "mpt", "persimmon", "xglm", "biogpt"}

_OPT = {"model_type": "opt", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
        "ffn_dim": 96, "vocab_size": 128, "max_position_embeddings": 64, **TOKENS}
_NEO = {"model_type": "gpt_neo", "hidden_size": 64, "num_layers": 4, "num_heads": 4,
        "vocab_size": 128, "max_position_embeddings": 64, "window_size": 8,
        "attention_types": [[["global", "local"], 2]], **TOKENS}
_CODEGEN = {"model_type": "codegen", "n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 64,
            "rotary_dim": 8, "vocab_size": 128, **TOKENS}
_MPT = {"model_type": "mpt", "d_model": 64, "n_layers": 3, "n_heads": 4, "max_seq_len": 64,
        "vocab_size": 128, **TOKENS}
_PERSIMMON = {"model_type": "persimmon", "hidden_size": 64, "num_hidden_layers": 3,
              "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 128,
              "max_position_embeddings": 64, **TOKENS}
_XGLM = {"model_type": "xglm", "d_model": 64, "num_layers": 3, "attention_heads": 4,
         "ffn_dim": 96, "vocab_size": 128, "max_position_embeddings": 64, **TOKENS}
_BIOGPT = {"model_type": "biogpt", "hidden_size": 64, "num_hidden_layers": 3,
           "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 128,
           "max_position_embeddings": 64, **TOKENS}

SMALL = {
    # OPT: learned positions with 2 offset rows, biased projections and LayerNorms, ReLU MLP,
    # tied; or no biases, LayerNorms without weight and bias, untied
    "opt": _OPT,
    "opt-no-bias-no-affine-untied": {**_OPT, "enable_bias": False,
                                     "layer_norm_elementwise_affine": False,
                                     "tie_word_embeddings": False, "word_embed_proj_dim": 64},
    # GPT-Neo: q, k, v unbiased and out_proj biased, global/local layers, learned positions,
    # tied; or an MLP width of its own, other layer kinds, untied
    "gpt_neo": _NEO,
    "gpt_neo-intermediate-untied": {**_NEO, "intermediate_size": 96, "tie_word_embeddings": False,
                                    "attention_types": [[["global"], 1], [["local"], 3]]},
    # CodeGen: GPT-J's parallel block with a fused qkv_proj, lm_head with bias, untied; or
    # n_inner and tied
    "codegen": _CODEGEN,
    "codegen-n-inner-tied": {**_CODEGEN, "n_inner": 96, "tie_word_embeddings": True},
    # MPT: fused Wqkv, no biases anywhere, bias-free LayerNorms, ALiBi, tied; or the fields
    # transformers does not read (expansion_ratio, no_bias) set otherwise, untied, dropout
    "mpt": _MPT,
    "mpt-ignored-fields-untied": {**_MPT, "expansion_ratio": 2, "no_bias": False,
                                  "learned_pos_emb": True, "tie_word_embeddings": False,
                                  "attn_config": {"attn_pdrop": 0, "alibi": True}},
    # Persimmon: fused biased qkv, q/k LayerNorms of h / a, squared-ReLU MLP, untied; or no q/k
    # norms, tied
    "persimmon": _PERSIMMON,
    "persimmon-no-qk-norm-tied": {**_PERSIMMON, "qk_layernorm": False,
                                  "tie_word_embeddings": True},
    # XGLM: sinusoidal positions (a buffer), biased projections, LayerNorms, a final one, tied;
    # or untied, no embedding scale (no parameter either way)
    "xglm": _XGLM,
    "xglm-untied-unscaled": {**_XGLM, "tie_word_embeddings": False, "scale_embedding": False},
    # BioGPT: learned positions with 2 offset rows, biased projections, LayerNorms, tied; or
    # untied
    "biogpt": _BIOGPT,
    "biogpt-untied": {**_BIOGPT, "tie_word_embeddings": False},
}


# --------------------------------------------------------------------------------------------
# full-size configs: the published config.json values (the fields that matter)
# --------------------------------------------------------------------------------------------

# No network to the hub: each file's values as public copies quote it (December 2026), where
# one was found; the hand counts below are derived from the modeling files
REAL = {
    # https://huggingface.co/facebook/opt-125m/blob/main/config.json: every field here is in
    # public copies of the file (transformers_version 4.21.0.dev0); a public test states its
    # fp16 weights as 250,478,592 bytes, twice the 125,239,296 parameters counted below
    "opt-125m": {"architectures": ["OPTForCausalLM"], "model_type": "opt",
                 "activation_function": "relu", "attention_dropout": 0.0, "dropout": 0.1,
                 "do_layer_norm_before": True, "enable_bias": True, "ffn_dim": 3072,
                 "hidden_size": 768, "layerdrop": 0.0, "max_position_embeddings": 2048,
                 "num_attention_heads": 12, "num_hidden_layers": 12, "vocab_size": 50272,
                 "word_embed_proj_dim": 768, "pad_token_id": 1, "bos_token_id": 2,
                 "eos_token_id": 2},
    # https://huggingface.co/EleutherAI/gpt-neo-125m/blob/main/config.json: every field here is
    # in public copies of the file (they also carry attention_layers, which GPTNeoConfig derives
    # from attention_types, left out)
    "gpt-neo-125m": {"architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo",
                     "activation_function": "gelu_new", "attention_dropout": 0,
                     "attention_types": [[["global", "local"], 6]], "embed_dropout": 0,
                     "hidden_size": 768, "intermediate_size": None,
                     "max_position_embeddings": 2048, "num_heads": 12, "num_layers": 12,
                     "resid_dropout": 0, "vocab_size": 50257, "window_size": 256,
                     "bos_token_id": 50256, "eos_token_id": 50256},
    # https://huggingface.co/Salesforce/codegen-350M-mono/blob/main/config.json: no copy found;
    # values not checked against the hub file: all (the total, 356,712,448, is the "350M")
    "codegen-350m-mono": {"architectures": ["CodeGenForCausalLM"], "model_type": "codegen",
                          "activation_function": "gelu_new", "attn_pdrop": 0.0,
                          "embd_pdrop": 0.0, "resid_pdrop": 0.0, "n_ctx": 2048, "n_embd": 1024,
                          "n_head": 16, "n_inner": None, "n_layer": 20, "n_positions": 2048,
                          "rotary_dim": 32, "tie_word_embeddings": False, "vocab_size": 51200,
                          "bos_token_id": 1, "eos_token_id": 50256},
    # https://huggingface.co/mosaicml/mpt-7b/blob/main/config.json (its remote-code fields
    # auto_map, init_config, tokenizer_name left out: no parameter); no copy found; values not
    # checked against the hub file: all (vocab_size 50432 is the padded GPT-NeoX-20B tokenizer's,
    # as public MPT configs write it)
    "mpt-7b": {"architectures": ["MPTForCausalLM"], "model_type": "mpt", "d_model": 4096,
               "n_heads": 32, "n_layers": 32, "max_seq_len": 2048, "vocab_size": 50432,
               "expansion_ratio": 4, "no_bias": True, "learned_pos_emb": True,
               "emb_pdrop": 0, "resid_pdrop": 0, "embedding_fraction": 1.0,
               "norm_type": "low_precision_layernorm",
               "attn_config": {"alibi": True, "alibi_bias_max": 8, "attn_impl": "torch",
                               "attn_pdrop": 0, "attn_type": "multihead_attention",
                               "attn_uses_sequence_id": False, "clip_qkv": None,
                               "prefix_lm": False, "qk_ln": False, "softmax_scale": None}},
    # https://huggingface.co/adept/persimmon-8b-base/blob/main/config.json: no copy found;
    # values not checked against the hub file: all (PersimmonConfig's defaults, whose docstring
    # names adept/persimmon-8b-base, give the same sizes)
    "persimmon-8b-base": {"architectures": ["PersimmonForCausalLM"], "model_type": "persimmon",
                          "hidden_act": "relu2", "hidden_size": 4096,
                          "intermediate_size": 16384, "layer_norm_eps": 1e-05,
                          "max_position_embeddings": 16384, "num_attention_heads": 64,
                          "num_hidden_layers": 36, "partial_rotary_factor": 0.5,
                          "qk_layernorm": True, "rope_theta": 25000.0,
                          "tie_word_embeddings": False, "vocab_size": 262144,
                          "bos_token_id": 1, "eos_token_id": 2},
    # XGLMConfig's and BioGptConfig's defaults are their docstrings' checkpoints
    # (@auto_docstring(checkpoint="facebook/xglm-564M"), checkpoint="microsoft/biogpt"),
    # written out here with the sizes that matter
    "xglm-564m": {"architectures": ["XGLMForCausalLM"], "model_type": "xglm", "d_model": 1024,
                  "num_layers": 24, "attention_heads": 16, "ffn_dim": 4096,
                  "vocab_size": 256008, "max_position_embeddings": 2048,
                  "activation_function": "gelu", "scale_embedding": True},
    "biogpt": {"architectures": ["BioGptForCausalLM"], "model_type": "biogpt",
               "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
               "intermediate_size": 4096, "vocab_size": 42384, "max_position_embeddings": 1024,
               "hidden_act": "gelu"},
}


def _read(tmp_path, case):
    return from_hf_config(write_config(tmp_path, REAL[case], case))


def test_opt_125m_hand_count(tmp_path):
    # modeling_opt.py (h=768, f=3072, L=12, V=50272, 2048 positions + 2 offset rows, tied):
    # q, k, v, out_proj and fc1, fc2 with bias; two LayerNorms a layer (weight, bias); the final
    # LayerNorm.  The total is the 125,239,296 usually quoted for OPT-125m
    h, f, L, V, P = 768, 3072, 12, 50272, 2048 + 2
    layer = 4 * (h * h + h) + h * f + f + f * h + h + 2 * 2 * h
    arch = _read(tmp_path, "opt-125m")
    counts = parameter_counts(arch)
    assert counts["position_embedding"] == P * h
    assert counts["attention"] == L * 4 * (h * h + h)
    assert counts["output_layer"] == 0
    assert parameter_count(arch) == V * h + P * h + L * layer + 2 * h == 125_239_296
    assert arch.extra["hf_dropout"] == {"attention_dropout": 0.0, "dropout": 0.1}


def test_gpt_neo_125m_hand_count(tmp_path):
    # modeling_gpt_neo.py (h=768, f=4h, L=12, V=50257, 2048 positions, tied): q, k, v without
    # bias, out_proj with; c_fc, c_proj with bias; ln_1, ln_2 (weight, bias); ln_f
    h, L, V, P = 768, 12, 50257, 2048
    layer = 3 * h * h + h * h + h + 2 * 4 * h * h + 4 * h + h + 2 * 2 * h
    arch = _read(tmp_path, "gpt-neo-125m")
    assert parameter_counts(arch)["attention"] == L * (4 * h * h + h)
    assert parameter_count(arch) == V * h + P * h + L * layer + 2 * h == 125_198_592


def test_codegen_350m_hand_count(tmp_path):
    # modeling_codegen.py (h=1024, f=4h, L=20, V=51200, untied): qkv_proj 3h^2 and out_proj h^2
    # without bias; fc_in, fc_out with bias; ln_1 only; ln_f; lm_head with bias
    h, L, V = 1024, 20, 51200
    layer = 4 * h * h + 2 * 4 * h * h + 4 * h + h + 2 * h
    arch = _read(tmp_path, "codegen-350m-mono")
    assert parameter_count(arch) == 2 * V * h + V + L * layer + 2 * h == 356_712_448


def test_mpt_7b_hand_count(tmp_path):
    # modeling_mpt.py (h=4096, L=32, V=50432, tied): Wqkv 3h^2, out_proj h^2, up_proj and
    # down_proj 4h^2 each, no bias; norm_1, norm_2 and norm_f weights only; no position table
    h, L, V = 4096, 32, 50432
    arch = _read(tmp_path, "mpt-7b")
    assert parameter_counts(arch)["position_embedding"] == 0
    assert parameter_count(arch) == V * h + L * (12 * h * h + 2 * h) + h == 6_649_286_656


def test_xglm_564m_hand_count(tmp_path):
    # modeling_xglm.py (h=1024, f=4096, L=24, V=256008, tied): q, k, v, out_proj h^2 + h each;
    # fc1, fc2 with bias; two LayerNorms a layer and the final one; no position parameter
    # (XGLMSinusoidalPositionalEmbedding's table is a buffer): the checkpoint's "564M"
    h, f, L, V = 1024, 4096, 24, 256008
    layer = 4 * (h * h + h) + 2 * h * f + f + h + 2 * 2 * h
    arch = _read(tmp_path, "xglm-564m")
    assert parameter_count(arch) == V * h + L * layer + 2 * h
    assert round(parameter_count(arch) / 10**6) == 564


def test_biogpt_hand_count(tmp_path):
    # modeling_biogpt.py (h=1024, f=4096, L=24, V=42384, 1024 positions + 2 offset rows,
    # tied): the layer as XGLM's, a learned position table; BioGPT's paper (Luo et al. 2022,
    # arXiv:2210.10341) gives the model 347M parameters
    h, f, L, V, P = 1024, 4096, 24, 42384, 1024 + 2
    layer = 4 * (h * h + h) + 2 * h * f + f + h + 2 * 2 * h
    arch = _read(tmp_path, "biogpt")
    assert parameter_count(arch) == V * h + P * h + L * layer + 2 * h
    assert round(parameter_count(arch) / 10**6) == 347


@pytest.mark.parametrize("case, total, vocab, padded", [
    # the hand counts above (564,463,616 and 346,763,264); Megatron's default padding of the
    # tied table to a multiple of 128 rows: 256008 -> 256128, 42384 -> 42496
    ("xglm-564m", 564_463_616, 256008, 256128), ("biogpt", 346_763_264, 42384, 42496)])
def test_an_xglm_and_a_biogpt_estimate_runs(tmp_path, capsys, case, total, vocab, padded):
    code, out, err = estimate(capsys, write_config(tmp_path, REAL[case], case),
                              "--seq-length", 1024)
    assert code == 0, err
    weights = next(line for line in out.splitlines() if line.startswith("weights"))
    assert f"{2 * (total + (padded - vocab) * 1024):,}" in weights


def test_persimmon_8b_hand_count(tmp_path):
    # modeling_persimmon.py (h=4096, f=16384, a=64, d_h=64, L=36, V=262144, untied):
    # query_key_value 3h^2 + 3h, dense h^2 + h; q_layernorm, k_layernorm (weight, bias) of d_h;
    # dense_h_to_4h, dense_4h_to_h with bias; two LayerNorms; final_layernorm
    h, f, d, L, V = 4096, 16384, 64, 36, 262144
    layer = 4 * h * h + 4 * h + 2 * 2 * d + 2 * h * f + f + h + 2 * 2 * h
    arch = _read(tmp_path, "persimmon-8b-base")
    assert parameter_count(arch) == 2 * V * h + L * layer + 2 * h


def test_an_opt_estimate_runs(tmp_path, capsys):
    path = write_config(tmp_path, REAL["opt-125m"], "opt")
    code, out, err = estimate(capsys, path, "--seq-length", 2048)
    assert code == 0, err
    # 16-bit weights of the 125,239,296 parameters, the tied table padded from 50272 to
    # Megatron's multiple of 128 (50304 rows) as memsym's estimate counts it by default
    weights = next(line for line in out.splitlines() if line.startswith("weights"))
    assert f"{2 * (125_239_296 + (50304 - 50272) * 768):,}" in weights


# --------------------------------------------------------------------------------------------
# refusals, notes, dropout
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg,match", [
    ({**_OPT, "word_embed_proj_dim": 32}, "word_embed_proj_dim other than hidden_size"),
    ({**_OPT, "do_layer_norm_before": False}, "without the final LayerNorm"),
    ({**_OPT, "_remove_final_layer_norm": True}, "without the final LayerNorm"),
    ({**_NEO, "attention_types": [[["global", "local"], 3]]}, "must expand to num_layers=4"),
    ({**_NEO, "attention_types": "global"}, "must expand to num_layers=4"),
    ({**_NEO, "num_heads": 5}, "multiple of num_heads"),
    ({**_PERSIMMON, "num_attention_heads": 5}, "multiple of num_attention_heads"),
    ({k: v for k, v in _OPT.items() if k != "ffn_dim"}, "missing field 'ffn_dim'"),
    ({**_XGLM, "add_cross_attention": True}, "add_cross_attention true in an XGLM config"),
    # types transformers builds with modules memsym does not model (each checked below)
    ({**_OPT, "model_type": "openai-gpt"}, "GPT-1's post-norm blocks"),
    ({**_PERSIMMON, "model_type": "bitnet"}, "BitNet's sub-norms"),
    ({**_PERSIMMON, "model_type": "diffllama"}, "DiffLlama's differential attention"),
    ({**_PERSIMMON, "model_type": "kimi_linear"}, "Kimi Delta Attention"),
])
def test_what_transformers_cannot_build_or_memsym_does_not_model(tmp_path, cfg, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("typo,near", [("opt2", "opt"), ("gpt-neo", "gpt_neo"),
                                       ("code_gen", "codegen"), ("persimon", "persimmon"),
                                       ("xlgm", "xglm")])
def test_a_misspelt_type_is_refused_not_read_as_the_suggestion(tmp_path, typo, near):
    with pytest.raises(UnknownNameError) as err:
        from_hf_config(write_config(tmp_path, {**_OPT, "model_type": typo}))
    msg = str(err.value)
    assert "\n" not in msg and f"{typo!r}" in msg and near in msg
    assert "never reads one in place of the other" in msg


def test_what_transformers_ignores_is_said(tmp_path):
    arch = from_hf_config(write_config(tmp_path, SMALL["mpt-ignored-fields-untied"]))
    assert any(n.startswith("expansion_ratio=2 ignored") for n in arch.extra["notes"])
    # the nested attn_pdrop is the one read (transformers 5.25's MptAttentionConfig types it
    # as an int: 0 or 1), a top-level one ignored as transformers ignores it
    cfg = {**_MPT, "attn_pdrop": 0, "attn_config": {"attn_pdrop": 1}}
    arch = from_hf_config(write_config(tmp_path, cfg, "nested"))
    assert arch.extra["hf_dropout"] == {"attn_pdrop": 1}
    arch = from_hf_config(write_config(tmp_path, _OPT))
    assert any("offset of 2" in n for n in arch.extra["notes"])


def test_the_dropout_defaults_are_the_config_classes():
    # configuration_opt.py: dropout 0.1, attention_dropout 0.0; the others 0
    assert class_dropout("opt") == {"attention_dropout": 0.0, "dropout": 0.1}
    # configuration_xglm.py: dropout, attention_dropout 0.1, activation_dropout 0.0;
    # configuration_biogpt.py: hidden_dropout_prob, attention_probs_dropout_prob 0.1,
    # activation_dropout 0.0
    assert class_dropout("xglm") == {"attention_dropout": 0.1, "dropout": 0.1,
                                     "activation_dropout": 0.0}
    assert class_dropout("biogpt") == {"attention_probs_dropout_prob": 0.1,
                                       "hidden_dropout_prob": 0.1, "activation_dropout": 0.0}
    assert not any(class_dropout(t)[k] for t in TYPES - {"opt", "xglm", "biogpt"}
                   for k in class_dropout(t))


@pytest.mark.torch
@pytest.mark.parametrize("case", one_case_per_type(SMALL))
def test_dropout_masks_follow_the_transformers_model(tmp_path, case):
    # oracle: transformers' model in training mode keeps a dropout mask exactly when the
    # probabilities memsym read are not all zero (MPT's from its attn_config)
    cfg = dict(SMALL[case])
    dropout_fields = from_hf_config(write_config(tmp_path, cfg, "probe")).extra["hf_dropout"]
    if case != "mpt":
        # (MptAttentionConfig types attn_pdrop as an int in transformers 5.25: 0, or 1, which
        # zeroes the tensor without drawing a mask; only its zero case is built)
        cfg.update({k: 0.1 for k in dropout_fields})
        assert assert_masks_follow_dropout(write_config(tmp_path, cfg)) != {}
    zero = {**SMALL[case], **{k: 0.0 for k in dropout_fields}}
    zero.pop("attn_config", None)
    assert_masks_follow_dropout(write_config(tmp_path, zero, "zero"))


@pytest.mark.torch
def test_the_refused_types_build_what_memsym_lacks():
    # the oracle of the refusals above: transformers' own models of the config classes'
    # defaults hold the modules each refusal names
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    def names(mtype):
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(mtype))
        return {n for n, _ in model.named_parameters()}

    gpt1 = names("openai-gpt")
    assert not any(n.startswith("transformer.ln_f") for n in gpt1)   # no final LayerNorm
    bitnet = names("bitnet")
    assert {"model.layers.0.self_attn.attn_sub_norm.weight",
            "model.layers.0.mlp.ffn_sub_norm.weight"} <= bitnet
    assert "model.layers.0.self_attn.lambda_q1" in names("diffllama")
    kimi = names("kimi_linear")
    assert any(".self_attn.forget_gate.f_a_proj." in n for n in kimi)
