"""The Hugging Face ``config.json`` reader: one local file in, the :class:`Architecture` out.

Each accepted ``model_type`` is read with the defaults of transformers' own config class and the
modules its ``modeling_<type>.py`` builds, so that the parameter count equals
``sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())`` (transformers 5.24.0,
checked by ``tests/test_hf_configs.py`` and ``tests/test_hf_newer_types.py``).  Nothing in the
file is evaluated; every size is bounded.
"""

from __future__ import annotations

import os

from ..errors import UnknownNameError
from ..terms.hf_moe_routing import HF_GROUPED_ROUTERS, HF_ROUTERS
from .architecture import Architecture, printable, resolve
from .hf_classic import CLASSIC_READERS
from .hf_decoders import DECODER_DEFAULTS, read_llama4, read_llama_like
from .hf_fields import ConfigFields, read_config_json, yarn_fields
from .hf_gemma4 import read_gemma4
from .hf_hybrid import HYBRID_READERS, HYBRID_TYPES
from .hf_moe import MOE_READERS
from .hf_moe_more import MORE_MOE_READERS
from .hf_refused import NOT_MODELLED
from .hf_ssm import SSM_READERS, SSM_TYPES
from .hf_types_more import MORE_DECODER_READERS, MORE_LAYERED_READERS
from .hf_zamba import ZAMBA_READERS, ZAMBA_TYPES

__all__ = ["from_hf_config", "HF_MODEL_TYPES", "class_dropout"]


# configuration_gemma3.py Gemma3TextConfig, configuration_llama4.py Llama4TextConfig.
_TEXT_CONFIG = {
    "gemma3": ("gemma3_text", {"hidden_size": 2304, "intermediate_size": 9216,
                               "num_hidden_layers": 26, "num_attention_heads": 8,
                               "vocab_size": 262208}),
    "llama4": ("llama4_text", {"hidden_size": 5120, "intermediate_size": 8192,
                               "num_hidden_layers": 48, "num_attention_heads": 40,
                               "vocab_size": 202048}),
    # Qwen3_5TextConfig / Qwen3_5MoeTextConfig (transformers 5.25.0)
    "qwen3_5": ("qwen3_5_text", {"hidden_size": 4096, "intermediate_size": 12288,
                                 "num_hidden_layers": 32, "num_attention_heads": 16,
                                 "vocab_size": 248320}),
    "qwen3_5_moe": ("qwen3_5_moe_text", {"hidden_size": 2048, "num_hidden_layers": 40,
                                         "num_attention_heads": 16, "vocab_size": 248320}),
    # Gemma4TextConfig (transformers 5.25.0)
    "gemma4": ("gemma4_text", {"hidden_size": 2304, "intermediate_size": 9216,
                               "num_hidden_layers": 30, "num_attention_heads": 8,
                               "vocab_size": 262144}),
    # Gemma4UnifiedTextConfig (configuration_gemma4_unified.py:123-127) and Emu3TextConfig
    # (configuration_emu3.py:100-104), transformers 5.25.0
    "gemma4_unified": ("gemma4_unified_text", {"hidden_size": 2304, "intermediate_size": 9216,
                                               "num_hidden_layers": 30,
                                               "num_attention_heads": 8, "vocab_size": 262144}),
    "emu3": ("emu3_text_model", {"hidden_size": 4096, "intermediate_size": 14336,
                                 "num_hidden_layers": 32, "num_attention_heads": 32,
                                 "vocab_size": 184622}),
}
# which tie_word_embeddings a vision-language type's causal LM reads: the top-level one
# (AutoModelForCausalLM builds Gemma3ForConditionalGeneration, whose tie_weights reads its own
# config) or the text_config's (it builds Llama4ForCausalLM, Qwen3_5ForCausalLM,
# Qwen3_5MoeForCausalLM of the text config alone); the text config class named in the notes
_TEXT_TIE = {"gemma3": ("top", True, "Gemma3TextConfig"),
             # Gemma4ForConditionalGeneration: lm_head tied to the language model's
             # embed_tokens by Gemma4Config.tie_word_embeddings (default True)
             "gemma4": ("top", True, "Gemma4TextConfig"),
             "llama4": ("text", None, "Llama4TextConfig"),
             "qwen3_5": ("text", None, "Qwen3_5TextConfig"),
             "qwen3_5_moe": ("text", None, "Qwen3_5MoeTextConfig"),
             # Gemma4UnifiedForConditionalGeneration._tied_weights_keys (lm_head to the
             # language model's embed_tokens, modeling_gemma4_unified.py:1340) read against
             # Gemma4UnifiedConfig.tie_word_embeddings (default True,
             # configuration_gemma4_unified.py:341; modeling_utils.py:2494 reads the model's
             # own config); AutoModelForCausalLM builds Emu3ForCausalLM of the text config
             # alone (auto_factory.py:234-242, 458-465: its config_class is Emu3TextConfig),
             # tied by Emu3TextConfig.tie_word_embeddings (default False, :118)
             "gemma4_unified": ("top", True, "Gemma4UnifiedTextConfig"),
             "emu3": ("text", None, "Emu3TextConfig")}
# what a vision-language type's causal LM holds beside its language model, not counted (said
# in the notes): Gemma4Model's towers and embedders (modeling_gemma4.py); Emu3's VQ-VAE image
# tokenizer (Emu3Model.vqmodel, modeling_emu3.py:1333), which AutoModelForCausalLM does not
# build but Emu3ForConditionalGeneration, the class the released files name, holds
_LEFT_OUT = {
    "gemma4": "the vision and audio encoders and their multimodal embedders are",
    "emu3": "the VQ-VAE image tokenizer, which AutoModelForCausalLM does not build and "
            "Emu3ForConditionalGeneration (the files' architectures[0]) holds, is"}


def _left_out(c: ConfigFields, mtype: str):
    """What a vision-language file's causal LM holds beside its language model (None: nothing).

    Gemma 4 Unified has no tower: Gemma4UnifiedModel builds an embedder of raw patches where
    the file has a vision_config and one of audio frames where it has an audio_config
    (modeling_gemma4_unified.py:949-959)."""
    if mtype != "gemma4_unified":
        return _LEFT_OUT.get(mtype, "the vision encoder and the multimodal projector are")
    parts = [k for k in ("vision", "audio") if c.data.get(f"{k}_config") is not None]
    return (f"the {' and '.join(parts)} embedder{'s are' if len(parts) > 1 else ' is'}"
            if parts else None)
# a model_type transformers reads as another: AutoConfig maps "gpt-sw3" to GPT2Config (its
# model_type "gpt2") and AutoModelForCausalLM to GPT2LMHeadModel (configuration_auto.py:51-53,
# modeling_auto.py:867)
_ALIASES = {"gpt-sw3": "gpt2"}
# model_type -> the dropout probabilities its causal LM applies, with the config class's
# defaults.  REF: transformers 5.24.0 modeling_<type>.py (the config fields its nn.Dropout
# modules and attention's dropout read; gpt2's hidden_dropout and the classifier/summary
# dropouts belong to other heads) and configuration_<type>.py (the defaults).
_ATTENTION_ONLY = {"attention_dropout": 0.0}
_DROPOUT = {mtype: _ATTENTION_ONLY for mtype in DECODER_DEFAULTS}
_DROPOUT.update({
    "ernie4_5": {}, "ernie4_5_moe": {},          # attention dropout fixed at 0.0 in modeling
    # Emu3Attention's dropout and Emu3DecoderLayer's residual dropout, after attention and
    # after the MLP, both read attention_dropout (modeling_emu3.py:141, :246, :271, :276;
    # Emu3TextConfig's default 0.1, configuration_emu3.py:116)
    "emu3_text_model": {"attention_dropout": 0.1},
    "seed_oss": {"attention_dropout": 0.1, "residual_dropout": 0.1},
    "gpt2": {"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1},
    # CTRL: EncoderLayer's dropout1 / dropout2 (resid_pdrop) and CTRLModel's embd_pdrop; its
    # attention applies none (modeling_ctrl.py:142, :165-166, :226)
    "ctrl": {"resid_pdrop": 0.1, "embd_pdrop": 0.1},
    "gptj": {"attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0},
    "phi3": {"attention_dropout": 0.0, "resid_pdrop": 0.0},
    "gpt_neox": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    "bloom": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    "falcon": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    "starcoder2": {"attention_dropout": 0.0, "residual_dropout": 0.0, "embedding_dropout": 0.0},
    "phi": {"attention_dropout": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0},
    "gpt_bigcode": {"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1},
    "stablelm": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    # DbrxBlock: resid_pdrop, DbrxModel: emb_pdrop, DbrxAttention: attn_config.attn_pdrop (read
    # at the top level, where the DBRX reader puts the nested fields)
    "dbrx": {"attn_pdrop": 0.0, "resid_pdrop": 0.0, "emb_pdrop": 0.0},
    # OPTDecoderLayer's dropout (after attention and fc2) and attention's attention_dropout
    "opt": {"attention_dropout": 0.0, "dropout": 0.1},
    "gpt_neo": {"attention_dropout": 0.0, "embed_dropout": 0.0, "resid_dropout": 0.0},
    "codegen": {"attn_pdrop": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0},
    # MptAttention, MptMLP and MptBlock read attn_config.attn_pdrop (MptAttentionConfig's
    # default 0), which the MPT reader puts at the top level
    "mpt": {"attn_pdrop": 0},
    "persimmon": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    # cohere2_moe, afmoe, minicpm3, solar_open: attention_dropout only (the default above)
    # XGLMDecoderLayer: dropout, activation_dropout, attention's attention_dropout;
    # BioGptDecoderLayer: hidden_dropout_prob, activation_dropout, attention_probs_dropout_prob
    "xglm": {"attention_dropout": 0.1, "dropout": 0.1, "activation_dropout": 0.0},
    "biogpt": {"attention_probs_dropout_prob": 0.1, "hidden_dropout_prob": 0.1,
               "activation_dropout": 0.0},
})
# model_type -> (reader (c, notes), tie_word_embeddings default, dropout) of the families whose
# modules are not a Llama-like decoder's: hybrid Mamba / attention and pure Mamba
_LAYERED_READERS = {**HYBRID_READERS, **SSM_READERS, **ZAMBA_READERS, **MORE_LAYERED_READERS}
_DROPOUT.update({mtype: row[2] for mtype, row in _LAYERED_READERS.items()})
HF_MODEL_TYPES = tuple(sorted(set(DECODER_DEFAULTS) | set(_TEXT_CONFIG) | set(HYBRID_TYPES)
                              | set(SSM_TYPES) | set(ZAMBA_TYPES) | set(MORE_LAYERED_READERS)
                              | set(_ALIASES)))
"""The ``model_type`` values :func:`from_hf_config` reads."""

def class_dropout(model_type: str) -> dict | None:
    """The dropout probabilities transformers' causal LM of ``model_type`` applies, at its config
    class's defaults (``{}``: none; None: a type not in the table).

    Examples
    --------
    >>> class_dropout("llama"), class_dropout("gpt2")["resid_pdrop"], class_dropout("kimi_k2")
    ({'attention_dropout': 0.0}, 0.1, None)
    """
    return dict(_DROPOUT[model_type]) if model_type in _DROPOUT else None


_HF_ARCHS = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
             "MixtralForCausalLM": "mixtral", "Qwen2ForCausalLM": "qwen2",
             "Qwen3ForCausalLM": "qwen3", "Qwen2MoeForCausalLM": "qwen2_moe",
             "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV2ForCausalLM": "deepseek_v2",
             "DeepseekV3ForCausalLM": "deepseek_v3", "GptOssForCausalLM": "gpt_oss",
             "GPT2LMHeadModel": "gpt2", "GPTNeoXForCausalLM": "gpt_neox",
             "GemmaForCausalLM": "gemma", "Gemma2ForCausalLM": "gemma2",
             "Gemma3ForCausalLM": "gemma3_text", "Phi3ForCausalLM": "phi3",
             "PhimoeForCausalLM": "phimoe", "OlmoForCausalLM": "olmo",
             "Olmo2ForCausalLM": "olmo2", "GPTJForCausalLM": "gptj",
             "FalconForCausalLM": "falcon", "BloomForCausalLM": "bloom",
             "Starcoder2ForCausalLM": "starcoder2", "CohereForCausalLM": "cohere",
             "GraniteForCausalLM": "granite", "GraniteMoeForCausalLM": "granitemoe",
             "Llama4ForCausalLM": "llama4_text", "Llama4ForConditionalGeneration": "llama4",
             "Gemma3ForConditionalGeneration": "gemma3", "OlmoeForCausalLM": "olmoe",
             "SmolLM3ForCausalLM": "smollm3", "Glm4ForCausalLM": "glm4",
             "Glm4MoeForCausalLM": "glm4_moe", "Ernie4_5ForCausalLM": "ernie4_5",
             "Ernie4_5_MoeForCausalLM": "ernie4_5_moe", "SeedOssForCausalLM": "seed_oss",
             "Exaone4ForCausalLM": "exaone4", "HunYuanDenseV1ForCausalLM": "hunyuan_v1_dense",
             "ApertusForCausalLM": "apertus", "ArceeForCausalLM": "arcee",
             "Dots1ForCausalLM": "dots1", "JambaForCausalLM": "jamba",
             "BambaForCausalLM": "bamba", "FalconH1ForCausalLM": "falcon_h1",
             "NemotronHForCausalLM": "nemotron_h",
             "GraniteMoeHybridForCausalLM": "granitemoehybrid", "Olmo3ForCausalLM": "olmo3",
             "Cohere2ForCausalLM": "cohere2", "MinistralForCausalLM": "ministral",
             "Ministral3ForCausalLM": "ministral3", "HeliumForCausalLM": "helium",
             "GlmForCausalLM": "glm", "CwmForCausalLM": "cwm",
             "VaultGemmaForCausalLM": "vaultgemma", "MambaForCausalLM": "mamba",
             "FalconMambaForCausalLM": "falcon_mamba", "Mamba2ForCausalLM": "mamba2",
             "HunYuanMoEV1ForCausalLM": "hunyuan_v1_moe", "FlexOlmoForCausalLM": "flex_olmo",
             "MiniMaxM2ForCausalLM": "minimax_m2",
             "GraniteMoeSharedForCausalLM": "granitemoeshared",
             "NemotronForCausalLM": "nemotron", "PhiForCausalLM": "phi",
             "GPTBigCodeForCausalLM": "gpt_bigcode", "StableLmForCausalLM": "stablelm",
             "Glm4MoeLiteForCausalLM": "glm4_moe_lite", "DbrxForCausalLM": "dbrx",
             "DeepseekV32ForCausalLM": "deepseek_v32", "Qwen3NextForCausalLM": "qwen3_next",
             "Qwen3_5ForCausalLM": "qwen3_5_text", "Qwen3_5MoeForCausalLM": "qwen3_5_moe_text",
             "Qwen3_5ForConditionalGeneration": "qwen3_5", "ExaoneMoeForCausalLM": "exaone_moe",
             "Lfm2MoeForCausalLM": "lfm2_moe", "GlmMoeDsaForCausalLM": "glm_moe_dsa",
             "Qwen3_5MoeForConditionalGeneration": "qwen3_5_moe",
             "Lfm2ForCausalLM": "lfm2", "MiniMaxForCausalLM": "minimax",
             "ZambaForCausalLM": "zamba", "Zamba2ForCausalLM": "zamba2",
             "OPTForCausalLM": "opt", "GPTNeoForCausalLM": "gpt_neo",
             "CodeGenForCausalLM": "codegen", "MptForCausalLM": "mpt",
             "PersimmonForCausalLM": "persimmon", "Cohere2MoeForCausalLM": "cohere2_moe",
             "AfmoeForCausalLM": "afmoe", "MiniCPM3ForCausalLM": "minicpm3",
             "SolarOpenForCausalLM": "solar_open", "GraniteSWAForCausalLM": "granite_swa",
             "GraniteMoeSWAForCausalLM": "granitemoe_swa", "Jais2ForCausalLM": "jais2",
             "NanoChatForCausalLM": "nanochat", "YoutuForCausalLM": "youtu",
             "XGLMForCausalLM": "xglm", "BioGptForCausalLM": "biogpt",
             "Gemma4ForCausalLM": "gemma4_text",
             "Gemma4ForConditionalGeneration": "gemma4",
             "HYV3ForCausalLM": "hy_v3", "MiniCPM5MoeForCausalLM": "minicpm5_moe",
             "MellumForCausalLM": "mellum", "Kolibri1ForCausalLM": "kolibri1",
             "HyperCLOVAXForCausalLM": "hyperclovax",
             "Apertus1p5TextForCausalLM": "apertus1p5_text",
             "OlmoHybridForCausalLM": "olmo_hybrid", "FlintForCausalLM": "flint",
             "AriaTextForCausalLM": "aria_text", "LaraMiniForCausalLM": "lara_mini",
             "CohereCompassForCausalLM": "cohere_compass_text", "CTRLLMHeadModel": "ctrl",
             "Gemma4UnifiedForCausalLM": "gemma4_unified_text",
             "Gemma4UnifiedForConditionalGeneration": "gemma4_unified",
             # the class emu3 files name; Emu3ForCausalLM's config_class is Emu3TextConfig
             # (the config it saves: model_type emu3_text_model)
             "Emu3ForConditionalGeneration": "emu3", "Emu3ForCausalLM": "emu3_text_model"}
# (EXAONE 3.x and InternLM3 name LlamaForCausalLM or remote-code classes: never a guess)



# model_type -> its reader (c, mtype, notes); every other DECODER_DEFAULTS type is Llama-like
_READERS = {**CLASSIC_READERS, **MOE_READERS, **MORE_MOE_READERS, **MORE_DECODER_READERS,
            "llama4_text": read_llama4,
            "gemma4_text": read_gemma4}


def from_hf_config(path) -> Architecture:
    """Read a local Hugging Face ``config.json`` into an :class:`Architecture` (no network).

    Accepted ``model_type`` (or, only when the file has none, the type of ``architectures[0]``):
    :data:`HF_MODEL_TYPES` (listed by family in docs/validation.md, "config.json"): the
    Llama-like decoders and MoE families (:mod:`memsym.model.hf_decoders`,
    :mod:`memsym.model.hf_moe`), the pure state-space types (:mod:`memsym.model.hf_ssm`), the
    hybrid types (:mod:`memsym.model.hf_hybrid`: mixers in ``layer_mixers``), zamba and zamba2
    (:mod:`memsym.model.hf_zamba`), and the vision-language files whose language model is read
    from ``text_config`` (what their causal LM holds beside it, a vision encoder, Gemma 4
    Unified's embedders or Emu3's VQ-VAE, is not counted: said in the notes); ``gpt-sw3`` is
    read as ``gpt2``, as transformers reads it (GPT2Config).  The core sizes (hidden size, layers, heads, vocabulary, MLP size)
    must be in the file (a vision-language file's text_config takes its text config class's
    defaults, as the released gemma3 files need, and says so in the notes); every other field defaults as transformers' config class defaults it,
    and the modules are those the transformers model builds, so the parameter count equals
    ``sum(p.numel())`` of ``AutoModelForCausalLM.from_config`` (transformers 5.24.0, and 5.25.0
    for the types of ``tests/test_hf_more_types.py`` and ``tests/test_hf_layer_kinds.py``; for
    gemma3, of its language model).  Where transformers builds less than the file describes
    (DeepSeek-V3's and GLM-4.5's MTP layer, a vision encoder) the difference is said in
    ``arch.extra["notes"]``.  Any other ``model_type`` is refused; a near name may be suggested
    but is never read in its place.  The file is parsed as JSON only; nothing in it is
    evaluated, every size is checked against :data:`~memsym.model.architecture.LIMITS` as it is
    read, and the name (``_name_or_path``) is stored escaped
    (:func:`~memsym.model.architecture.printable`).

    Parameters
    ----------
    path : str or os.PathLike
        The ``config.json`` file, or a directory holding one.

    Returns
    -------
    Architecture
        Resolved; ``extra`` holds ``hf_model_type``, ``hf_dropout`` (the dropout
        probabilities the transformers model applies, by config field) and ``notes`` (a tuple
        of strings).

    Raises
    ------
    InvalidValueError
        Missing, unreadable or non-regular file, not JSON, not an object, over 4 MiB, a missing
        field (named), a field of the wrong type (booleans are not numbers), a size above its
        limit (named), a structure of a type that is not modelled (named).
    UnknownNameError
        An unsupported model type (the accepted ones are listed).

    References
    ----------
    transformers 5.24.0 ``models/<model_type>/configuration_<model_type>.py`` and
    ``modeling_<model_type>.py`` (hf-transformers-5).

    Examples
    --------
    >>> import json, tempfile, os
    >>> from memsym.model import parameter_count
    >>> cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    ...        "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     fn = os.path.join(tmp, "config.json")
    ...     with open(fn, "w") as fh:
    ...         json.dump(cfg, fh)
    ...     parameter_count(from_hf_config(fn))
    6738415616
    """
    data, where = read_config_json(path)
    # refusals name the file as "<its folder>/<its name>" (a model folder's config.json, or a
    # file of another name such as hunyuan.json), never a name the file does not have
    folder = os.path.basename(os.path.dirname(where))
    c = ConfigFields(data, printable(f"{folder}/{os.path.basename(where)}" if folder else where,
                                     120))
    mtype = _model_type(c)
    raw_name = data.get("_name_or_path")
    if raw_name is not None and not isinstance(raw_name, str):
        raise c._bad(f"field '_name_or_path' must be a string, got {type(raw_name).__name__}")
    name = printable(raw_name or mtype, 64)
    file_type, notes = mtype, []
    if data.get("model_type") in _ALIASES:
        notes.append(f"model_type {data['model_type']!r} read as {mtype!r}, as transformers "
                     f"reads it (its config class is {mtype}'s)")
    if mtype in _TEXT_CONFIG:
        c, mtype, tied = _text_config(c, mtype, notes)
    elif mtype not in _LAYERED_READERS:
        tied = c.bool("tie_word_embeddings", DECODER_DEFAULTS[mtype][0])
    if mtype in _LAYERED_READERS:
        # the hybrid families (memsym.model.hf_hybrid) and pure Mamba (memsym.model.hf_ssm);
        # tied read after the reader, which spells an alias as transformers reads it (LFM2)
        kw = _LAYERED_READERS[mtype][0](c, notes)
        if file_type == mtype:     # (a vision-language file's was read by _text_config)
            tied = c.bool("tie_word_embeddings", _LAYERED_READERS[mtype][1])
    else:
        kw = _READERS.get(mtype, read_llama_like)(c, mtype, notes)
    dropout = {k: c.probability(k, dflt) for k, dflt in _DROPOUT[mtype].items()}
    kw.update(name=name, untie_embeddings_and_output_weights=not tied,
              extra={**_with_yarn(c, kw), "hf_model_type": file_type, "hf_dropout": dropout,
                     "notes": tuple(notes), **_router_fields(c, mtype, kw.get("num_experts"))})
    return resolve(Architecture(**kw))


def _router_fields(c: ConfigFields, mtype: str, experts) -> dict:
    # whether the router divides its top-k weights by their sum, where config.norm_topk_prob
    # says so (memsym.terms.hf_moe_routing.HF_ROUTERS; the config classes' default False:
    # transformers 5.25.0 configuration_qwen3_moe.py:98, configuration_qwen2_moe.py:97,
    # configuration_olmoe.py:82; True: configuration_mellum.py:99, _NORM_TOPK_DEFAULTS)
    if HF_ROUTERS.get(mtype, (True,))[0] is None:
        return {"hf_norm_topk_prob": c.bool("norm_topk_prob",
                                            _NORM_TOPK_DEFAULTS.get(mtype, False))}
    if mtype in HF_GROUPED_ROUTERS:
        return {"hf_norm_topk_prob": c.bool("norm_topk_prob", HF_GROUPED_ROUTERS[mtype]),
                **_router_groups(c, mtype, experts)}
    return {}


#: The routers whose config.norm_topk_prob decides, where the config class's default is not
#: False: transformers 5.25.0 configuration_mellum.py:99.
_NORM_TOPK_DEFAULTS = {"mellum": True}

#: The grouped routers' config-class defaults of (n_group, topk_group) where they are not
#: (1, 1): transformers 5.25.0 configuration_deepseek_v3.py:99-100 and
#: configuration_deepseek_v32.py:99-100 (8, 4); the others 1, 1
#: (configuration_glm4_moe.py:108-109, configuration_dots1.py:89-90,
#: configuration_solar_open.py:79-80, configuration_exaone_moe.py:119-120,
#: configuration_glm4_moe_lite.py:94-95, configuration_glm_moe_dsa.py:104-105).
_GROUP_DEFAULTS = {"deepseek_v3": (8, 4), "deepseek_v32": (8, 4)}


def _router_groups(c: ConfigFields, mtype: str, experts: int) -> dict:
    """A grouped router's ``n_group`` and ``topk_group``, refused in one line where
    transformers' router cannot run them: it views the E expert scores as ``n_group`` groups of
    ``E // n_group``, sums each group's top 2 and keeps the ``topk_group`` best groups
    (``DeepseekV3TopkRouter.forward``, modeling_deepseek_v3.py:137-142), so ``n_group`` must
    divide E into groups of at least 2 experts and ``topk_group <= n_group``; a null value
    reaches ``view`` as None."""
    groups_default, topk_default = _GROUP_DEFAULTS.get(mtype, (1, 1))
    for key in ("n_group", "topk_group"):
        if key in c.data and c.data[key] is None:
            raise c._bad(f"field {key!r} is null: transformers' {mtype} router splits the "
                         "experts into that many groups and needs a whole number")
    groups, topk = c.int("n_group", groups_default), c.int("topk_group", topk_default)
    if experts % groups or experts // groups < 2:
        raise c._bad(f"n_group {groups} must divide the {experts} routed experts into groups "
                     "of at least 2 (transformers' router sums each group's top 2 scores)")
    if topk > groups:
        raise c._bad(f"topk_group {topk} is more than n_group {groups} (transformers' router "
                     "keeps the topk_group best of the n_group groups)")
    return {"hf_n_group": groups, "hf_topk_group": topk}


def _with_yarn(c: ConfigFields, kw: dict) -> dict:
    """The reader's ``extra`` with the file's YaRN fields (:func:`yarn_fields`), unless the
    reader sets YaRN itself: GPT-OSS's bridge overrides the file's rope_scaling (factor 32,
    yarn_mscale None: gpt_oss_bridge.py:94-100)."""
    extra = dict(kw.get("extra", {}))
    if "yarn_rotary_scaling_factor" not in extra:
        extra.update(yarn_fields(c, bool(kw.get("multi_latent_attention"))))
    return extra


def _model_type(c: ConfigFields) -> str:
    """The file's model_type, refused in one line unless it is one memsym reads."""
    data = c.data
    mtype = data.get("model_type")
    archs = data.get("architectures")
    if mtype is None:
        # no model_type: the file's own architectures[0] names the class (never a guess)
        if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] in _HF_ARCHS:
            return _HF_ARCHS[archs[0]]
        raise c._bad("missing field 'model_type' (and no known 'architectures' entry); "
                     f"accepted: {', '.join(HF_MODEL_TYPES)}")
    if not isinstance(mtype, str):
        raise c._bad(f"field 'model_type' must be a string, got {type(mtype).__name__}; "
                     f"accepted: {', '.join(HF_MODEL_TYPES)}")
    if mtype in NOT_MODELLED:
        raise c._bad(f"model_type {mtype!r} is refused: {NOT_MODELLED[mtype]} (accepted: "
                     f"{', '.join(HF_MODEL_TYPES)})")
    if mtype in _ALIASES:
        return _ALIASES[mtype]
    if mtype not in HF_MODEL_TYPES:
        # refused even when architectures[0] or a near name is a known type: a near name is
        # another model with another count, so memsym suggests it and never reads it instead
        err = UnknownNameError("config.json model_type", mtype, HF_MODEL_TYPES,
                               limit=len(HF_MODEL_TYPES))
        hint = (f"; did you mean {' or '.join(err.suggestions)}? (another type is another "
                "model: memsym never reads one in place of the other)" if err.suggestions else "")
        # the hint before the long list, which a terminal line may cut
        err.args = (f"unknown config.json model_type {mtype[:80]!r}{hint}; accepted: "
                    f"{', '.join(HF_MODEL_TYPES)}",)
        raise err
    return mtype


def _text_config(c: ConfigFields, mtype: str, notes: list) -> tuple:
    """A vision-language file's language model: ``(fields of its text_config, its text type,
    tied)``, read with the text config class's defaults for the sizes the released files leave
    out (and said in ``notes``)."""
    text_type, core = _TEXT_CONFIG[mtype]
    text = c.object("text_config")
    defaulted = sorted(k for k in core if text.get(k) is None)
    tie_from, tie_default, text_class = _TEXT_TIE[mtype]
    left_out = _left_out(c, mtype)
    if tie_from == "top":
        tied = c.bool("tie_word_embeddings", tie_default)
    c = ConfigFields({**text, **{k: core[k] for k in defaulted}}, f"{c.where} text_config")
    if tie_from == "text":
        tied = c.bool("tie_word_embeddings", _LAYERED_READERS[text_type][1]
                      if text_type in _LAYERED_READERS else DECODER_DEFAULTS[text_type][0])
    if left_out:
        notes.append(f"model_type {mtype!r}: the language model (text_config) only; "
                     f"{left_out} not counted")
    if defaulted:
        notes.append("text_config without " + ", ".join(defaulted) + f": transformers' "
                     f"{text_class} defaults ("
                     + ", ".join(f"{k}={core[k]}" for k in defaulted) + ")")
    return c, text_type, tied
