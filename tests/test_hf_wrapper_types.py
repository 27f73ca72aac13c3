"""Emu3 (``emu3``: the language model of its ``text_config``; ``emu3_text_model``: that language
model alone, the config ``Emu3ForCausalLM`` saves), Gemma 4 Unified (``gemma4_unified``: the
language model of its ``text_config``, Gemma 4 Unified's text model) and GPT-SW3 (``gpt-sw3``:
GPT-2 under another tokenizer, read as ``gpt2``) from config.json (issue 32, item 4).

Oracle (``tests/hf_oracle.py``, run over these tables by ``tests/test_hf_type_tables.py``):
transformers 5.25.0 builds ``AutoModelForCausalLM.from_config`` of the very file memsym reads
(``Emu3ForCausalLM`` of an ``emu3_text_model`` file, which no auto mapping names), on the meta
device, and ``sum(p.numel())`` of its parameters (a tied weight once; Gemma 4 Unified's vision
and audio embedders left out, as Gemma 4's towers are) must equal memsym's count, for the small
configs below and the config classes' own defaults; each default is also counted here by hand.
What ``Emu3ForConditionalGeneration`` (the class the released emu3 files name, which TRL loads)
holds beyond that, its VQ-VAE, is shown here and said in the notes.  No network: every config
is written here.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError, UnknownNameError
from memsym.model import from_hf_config, parameter_count
from memsym.model.hf_config import HF_MODEL_TYPES

from hf_oracle import (TOKENS, assert_masks_follow_dropout, class_defaults,
                       language_model_count, write_config)
from in_process import estimate

# the model types this file covers
TYPES = {"emu3", "emu3_text_model", "gemma4_unified", "gpt-sw3"}

_LM = {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
       "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 128,
       "max_position_embeddings": 64, **TOKENS}
_EMU3 = {"model_type": "emu3", "text_config": _LM}
_EMU3_TEXT = {"model_type": "emu3_text_model", **_LM}
# Gemma 4 Unified's text model: five sliding layers and a full one, one head size
_G4U_TEXT = {**_LM, "num_hidden_layers": 6, "head_dim": 16, "global_head_dim": 16}
_G4U = {"model_type": "gemma4_unified", "text_config": _G4U_TEXT}
# Gemma4UnifiedVisionConfig / Gemma4UnifiedAudioConfig with small sizes (embedders not counted)
_VISION = {"patch_size": 4, "pooling_kernel_size": 2, "mm_embed_dim": 32, "mm_posemb_size": 16,
           "output_proj_dims": 32}
_AUDIO = {"audio_embed_dim": 24}
_SW3 = {"model_type": "gpt-sw3", "n_embd": 64, "n_layer": 3, "n_head": 4, "n_positions": 64,
        "vocab_size": 128, **TOKENS}

SMALL = {
    # Emu3: the language model of text_config, untied (Emu3TextConfig's default); or tied by
    # the text config, a head size of its own, biased attention and MLP; or MHA (no KV heads
    # given: Emu3TextConfig's 8 would not divide 4 heads, so 4 are given), the top-level
    # tie_word_embeddings ignored (AutoModelForCausalLM builds Emu3ForCausalLM of the text
    # config alone)
    "emu3": _EMU3,
    "emu3-tied-head-dim-biases": {**_EMU3, "text_config": {
        **_LM, "tie_word_embeddings": True, "head_dim": 8, "attention_bias": True,
        "mlp_bias": True}},
    "emu3-mha-top-tie-ignored": {**_EMU3, "tie_word_embeddings": True,
                                 "text_config": {**_LM, "num_key_value_heads": 4}},
    # the config Emu3ForCausalLM saves: untied; or tied with biased attention
    "emu3_text_model": _EMU3_TEXT,
    "emu3_text_model-tied-bias": {**_EMU3_TEXT, "tie_word_embeddings": True,
                                  "attention_bias": True},
    # Gemma 4 Unified: tied by the top-level tie_word_embeddings (its text config's ignored);
    # or untied there, with vision and audio embedders (not counted)
    "gemma4_unified": {**_G4U, "text_config": {**_G4U_TEXT, "tie_word_embeddings": False}},
    "gemma4_unified-untied-embedders": {**_G4U, "tie_word_embeddings": False,
                                        "vision_config": _VISION, "audio_config": _AUDIO},
    "gemma4_unified-audio-only": {**_G4U, "audio_config": _AUDIO},
    # GPT-SW3: GPT-2's model
    "gpt-sw3": _SW3,
    "gpt-sw3-n-inner-untied": {**_SW3, "n_inner": 80, "tie_word_embeddings": False},
}
# no published config.json is copied here (no network): the config classes' defaults (the
# Emu3-Chat-hf and Gemma 4 docstring checkpoints, GPT-2's) are counted by hand below
REAL: dict = {}


def _count(tmp_path, mtype, **over):
    return parameter_count(from_hf_config(write_config(
        tmp_path, {**class_defaults(mtype), **over}, mtype)))


@pytest.mark.torch
def test_emu3_defaults_by_hand(tmp_path):
    # Emu3TextConfig: h 4096, 32 layers, a 32 (d 128), g 8, f 14336 gated, two RMSNorms a
    # layer and a final one, V 184622, untied (an embedding and an LM head)
    h, L, a, g, d, f, V = 4096, 32, 32, 8, 128, 14336, 184622
    layer = 2 * h * a * d + 2 * h * g * d + 3 * h * f + 2 * h
    total = 2 * V * h + L * layer + h
    assert _count(tmp_path, "emu3") == _count(tmp_path, "emu3_text_model") == total \
        == 8_492_011_520


@pytest.mark.torch
def test_gemma4_unified_defaults_by_hand(tmp_path):
    # Gemma4UnifiedConfig: no vision_config or audio_config (no embedder), tied; its
    # Gemma4UnifiedTextConfig as gemma4_unified_text's: h 2304, 30 layers (every sixth full
    # attention of head size 512, 256 elsewhere), a 8, g 4, q/k norms of the head size, f 9216,
    # four norms a layer, V 262144
    h, L, a, g, d, D, f, V = 2304, 30, 8, 4, 256, 512, 9216, 262144

    def att(dh):
        return 2 * h * a * dh + 2 * h * g * dh + 2 * dh

    total = V * h + 25 * att(d) + 5 * att(D) + L * (3 * h * f + 4 * h) + h
    assert _count(tmp_path, "gemma4_unified") == total == 3_010_758_400


@pytest.mark.torch
def test_gpt_sw3_defaults_by_hand(tmp_path):
    # GPT2Config (AutoConfig's class for "gpt-sw3"): h 768, 12 layers, 1024 positions, V 50257,
    # tied; c_attn h -> 3h, c_proj, c_fc h -> 4h, c_proj 4h -> h with biases, two LayerNorms a
    # layer and a final one
    h, L, P, V = 768, 12, 1024, 50257
    layer = (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + (4 * h * h + h) + 4 * h
    total = V * h + P * h + L * layer + 2 * h
    assert _count(tmp_path, "gpt-sw3", model_type="gpt-sw3") == total == 124_439_808


@pytest.mark.torch
def test_gpt_sw3_is_transformers_gpt2(tmp_path):
    # the oracle: transformers reads a gpt-sw3 file with GPT2Config and builds GPT2LMHeadModel
    # of it; memsym reads it as gpt2 (every gpt2 rule then applies) and says so
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config

    path = write_config(tmp_path, _SW3)
    conf = AutoConfig.from_pretrained(str(path.parent))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(conf)
    assert type(conf) is GPT2Config and type(model).__name__ == "GPT2LMHeadModel"
    arch = from_hf_config(path)
    assert arch.extra["hf_model_type"] == "gpt2"
    assert any("'gpt-sw3' read as 'gpt2'" in n for n in arch.extra["notes"])
    gpt2 = from_hf_config(write_config(tmp_path, {**_SW3, "model_type": "gpt2"}, "gpt2"))
    assert parameter_count(arch) == parameter_count(gpt2)


@pytest.mark.torch
def test_emu3_vq_vae_is_held_by_the_conditional_generation_class_only(tmp_path):
    # AutoModelForCausalLM (run_clm.py's class) builds Emu3ForCausalLM of the text config: no
    # VQ-VAE.  Emu3ForConditionalGeneration, the class released emu3 files name and TRL's
    # create_model_from_path loads, holds the same language model plus model.vqmodel, every
    # parameter trainable by default; its text forward never runs the VQ-VAE
    # (Emu3Model.forward runs it only for pixel_values)
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM, Emu3ForConditionalGeneration

    path = write_config(tmp_path, {**_EMU3, "vocabulary_map": {"<image>": 1}})
    conf = AutoConfig.from_pretrained(str(path.parent))
    with torch.device("meta"):
        causal = AutoModelForCausalLM.from_config(conf)
        full = Emu3ForConditionalGeneration(conf)
    assert type(causal).__name__ == "Emu3ForCausalLM"
    assert not any("vqmodel" in n for n, _ in causal.named_parameters())
    vq = [p for n, p in full.named_parameters() if n.startswith("model.vqmodel.")]
    lm = sum(p.numel() for n, p in full.named_parameters() if not n.startswith("model.vqmodel."))
    assert vq and all(p.requires_grad for p in vq)
    arch = from_hf_config(path)
    assert parameter_count(arch) == lm == language_model_count(path)
    assert any("VQ-VAE" in n and "not counted" in n for n in arch.extra["notes"])


@pytest.mark.torch
def test_emu3_text_training_leaves_the_vq_vae_without_gradients():
    # one training step of Emu3ForConditionalGeneration on text alone (a small VQ-VAE, CPU):
    # every language-model parameter gets a gradient, no VQ-VAE parameter does (so torch's
    # AdamW keeps no state for them; the weights stay); and the VQ-VAE's size at
    # Emu3VQVAEConfig's defaults, which docs/validation.md quotes
    torch = pytest.importorskip("torch")
    from transformers import (AutoConfig, Emu3ForConditionalGeneration, Emu3VQVAE,
                              Emu3VQVAEConfig)

    with torch.device("meta"):
        assert sum(p.numel() for p in Emu3VQVAE(Emu3VQVAEConfig()).parameters()) == 270_740_287
    vq = {"codebook_size": 16, "embed_dim": 4, "latent_channels": 4, "base_channels": 32,
          "channel_multiplier": [1, 1], "num_res_blocks": 1, "attn_resolutions": [],
          "hidden_size": 32, "temporal_downsample_factor": 2}
    conf = AutoConfig.for_model("emu3", text_config=_LM, vq_config=vq,
                                vocabulary_map={"<image>": 1})
    torch.manual_seed(0)
    model = Emu3ForConditionalGeneration(conf).train()
    ids = torch.randint(0, 100, (1, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    named = dict(model.named_parameters())
    vq_names = [n for n in named if n.startswith("model.vqmodel.")]
    assert vq_names and all(named[n].grad is None for n in vq_names)
    assert all(p.grad is not None for n, p in named.items() if n not in vq_names)


@pytest.mark.torch
def test_gemma4_unified_has_no_tower_only_embedders(tmp_path):
    # Gemma4UnifiedModel builds no vision or audio tower: the parameters beside the language
    # model are the embedders' (embed_vision, embed_audio), which the notes name
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    path = write_config(tmp_path, SMALL["gemma4_unified-untied-embedders"])
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(path.parent)))
    assert {n.split(".")[1] for n, _ in model.named_parameters() if n != "lm_head.weight"} == {
        "language_model", "embed_vision", "embed_audio"}
    notes = from_hf_config(path).extra["notes"]
    assert any("vision and audio embedders are not counted" in n for n in notes)
    alone = from_hf_config(write_config(tmp_path, SMALL["gemma4_unified"], "alone"))
    assert not any("not counted" in n for n in alone.extra["notes"])


@pytest.mark.torch
@pytest.mark.parametrize("cls,mtype", [("Emu3ForConditionalGeneration", "emu3"),
                                       ("Emu3ForCausalLM", "emu3_text_model"),
                                       ("Gemma4UnifiedForConditionalGeneration",
                                        "gemma4_unified")])
def test_a_file_naming_only_its_class(tmp_path, cls, mtype):
    # the oracle: the class's own config class names the model_type
    import transformers

    assert getattr(transformers, cls).config_class.model_type == mtype
    typed = next(cfg for cfg in SMALL.values() if cfg["model_type"] == mtype)
    cfg = {k: v for k, v in typed.items() if k != "model_type"}
    arch = from_hf_config(write_config(tmp_path, {**cfg, "architectures": [cls]}))
    assert arch.extra["hf_model_type"] == mtype
    assert parameter_count(arch) == parameter_count(from_hf_config(write_config(
        tmp_path, typed, "typed")))


@pytest.mark.torch
@pytest.mark.parametrize("p", [None, 0.0, 0.1])
def test_emu3_dropout_is_its_text_configs_attention_dropout(tmp_path, p):
    # Emu3Attention and both residual adds of Emu3DecoderLayer read attention_dropout (default
    # 0.1): transformers' model in training mode draws masks exactly when memsym reads it > 0
    text = {**_LM} if p is None else {**_LM, "attention_dropout": p}
    path = write_config(tmp_path, {**_EMU3, "text_config": text})
    assert assert_masks_follow_dropout(path) == {"attention_dropout": 0.1 if p is None else p}


@pytest.mark.torch
@pytest.mark.parametrize("p", [0.0, 0.1])
def test_gemma4_unified_dropout_is_its_text_configs_attention_dropout(tmp_path, p):
    path = write_config(tmp_path, {**_G4U, "text_config": {**_G4U_TEXT, "attention_dropout": p}})
    assert assert_masks_follow_dropout(path) == {"attention_dropout": p}


def test_estimates_run(tmp_path, capsys):
    for case in ("emu3", "emu3_text_model", "gemma4_unified", "gpt-sw3"):
        code, out, err = estimate(capsys, write_config(tmp_path, SMALL[case], case),
                                  "--seq-length", 32)
        assert code == 0, err


# --------------------------------------------------------------------------------------------
# refusals
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg,match", [
    # Emu3Attention computes with a null head_dim or num_key_value_heads (transformers fails)
    ({**_EMU3, "text_config": {**_LM, "head_dim": None}}, "head_dim null in an emu3"),
    ({**_EMU3, "text_config": {**_LM, "num_key_value_heads": None}},
     "num_key_value_heads null in an emu3"),
    ({**_EMU3_TEXT, "head_dim": None}, "head_dim null in an emu3"),
    ({**_EMU3, "text_config": 4096}, "text_config"),
    ({**_EMU3, "text_config": {**_LM, "hidden_size": "64"}}, "hidden_size"),
    ({**_G4U, "text_config": {**_G4U_TEXT, "layer_types": ["sliding_attention"] * 2}},
     "must list 6 layer types"),
    ({**_G4U, "text_config": {**_G4U_TEXT, "num_kv_shared_layers": 6}}, "leaves no layer"),
    ({**_SW3, "n_layer": True}, "n_layer"),
])
def test_what_memsym_or_transformers_cannot_build(tmp_path, cfg, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value)


@pytest.mark.torch
@pytest.mark.parametrize("over", [{"head_dim": None}, {"num_key_value_heads": None}])
def test_transformers_fails_on_the_refused_nulls_too(tmp_path, over):
    with pytest.raises(TypeError):
        language_model_count(write_config(tmp_path, {**_EMU3, "text_config": {**_LM, **over}}))


@pytest.mark.parametrize("mtype,near", [("emu-3", "emu3"), ("gemma4-unified", "gemma4_unified"),
                                        ("gpt_sw3", "gpt-sw3"), ("emu3_text", "emu3")])
def test_a_misspelt_type_is_refused_in_one_line_and_never_read(tmp_path, mtype, near):
    with pytest.raises(UnknownNameError, match="did you mean") as err:
        from_hf_config(write_config(tmp_path, {**_EMU3, "model_type": mtype}))
    msg = str(err.value)
    assert "\n" not in msg and near in msg and mtype not in HF_MODEL_TYPES


def test_the_vq_vae_config_alone_is_not_a_language_model(tmp_path):
    # Emu3VQVAEConfig's model_type: an image tokenizer, no causal LM
    with pytest.raises(UnknownNameError) as err:
        from_hf_config(write_config(tmp_path, {"model_type": "emu3_vqgan", "hidden_size": 64}))
    assert "\n" not in str(err.value) and "emu3_vqgan" not in HF_MODEL_TYPES
