"""The model of a Megatron-Bridge recipe, as Bridge builds it.

A recipe names its model by its Hugging Face checkpoint (``cfg.model =
AutoBridge.from_hf_pretrained("meta-llama/Llama-3.2-1B")...``).  memsym takes it

* from one of its presets when it has one for the checkpoint (:data:`HF_PRESETS`);
* else from the checkpoint's ``config.json`` read through the Hugging Face Hub
  (:func:`memsym.model.hub.from_hub`, what ``memsym estimate org/name`` reads: downloaded once,
  then from the cache), changed where Bridge's model bridge for that ``model_type`` builds the
  model differently from the file (:data:`BRIDGE_MODEL_TYPES`);
* else, or in place of either, from the MODEL given beside the recipe (a preset, a config.json
  or a Hub id), which replaces the recipe's checkpoint (said in the notes).

Every Bridge model bridge sets the vocabulary padding from the checkpoint's vocabulary:
``make_vocab_size_divisible_by`` is the largest power of two up to 128 that divides it
(Megatron-Bridge 067f987df0 ``models/conversion/model_bridge.py:634-637``, ``:1716-1747``),
unless the bridge fixes it.  A ``model_type`` whose bridge memsym has not compared with its own
reading of the file, a recipe that builds its model in code, and a checkpoint that cannot be
read are refused in one line saying what to give instead.
"""

from __future__ import annotations

import dataclasses
import os
import re

from ..errors import InvalidValueError, MemsymError, catalogue_key
from ..model import PRESETS, from_hub, resolve_model
from ..model.hub import is_hub_spelling

__all__ = ["HF_PRESETS", "BRIDGE_MODEL_TYPES", "recipe_model", "bridge_vocab_divisor",
           "is_model_word"]

#: Hugging Face model of a recipe -> (memsym preset, architecture fields that differ from the
#: preset's).  The Llama 3.1 checkpoints have Llama 3's layers with a 131072-token position
#: table (meta-llama/Llama-3.1-8B and -70B config.json "max_position_embeddings": 131072).
HF_PRESETS = {
    "meta-llama/Meta-Llama-3-8B": ("llama3-8b", {}),
    "meta-llama/Meta-Llama-3-70B": ("llama3-70b", {}),
    "meta-llama/Meta-Llama-3.1-8B": ("llama3-8b", {"max_position_embeddings": 131072}),
    "meta-llama/Meta-Llama-3.1-70B": ("llama3-70b", {"max_position_embeddings": 131072}),
    "meta-llama/Meta-Llama-3.1-405B": ("llama3-405b", {}),
    "Qwen/Qwen3-8B": ("qwen3-8b", {}),
    "Qwen/Qwen3-30B-A3B": ("qwen3-30b-a3b", {}),
    "Qwen/Qwen3-235B-A22B": ("qwen3-235b-a22b", {}),
    "deepseek-ai/DeepSeek-V3": ("deepseek-v3", {}),
    "openai/gpt-oss-120b": ("gpt-oss-120b", {}),
    # recipes/nemotronh/h100/nemotron_3_nano.py:34, :78-126 (the recipe's inline provider)
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ("nemotron-3-nano", {}),
    # recipes/kimi/h100/kimi_k2.py:99-101 (AutoBridge, KimiK2Bridge)
    "moonshotai/Kimi-K2-Instruct": ("kimi-k2", {}),
    # recipes/nemotronh/h100/nemotron_3_super.py:29, :44 (AutoBridge from the checkpoint)
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16": ("nemotron-3-super", {}),
}

#: The presets whose model bridge leaves ``bias_activation_fusion`` unset, so that
#: TransformerConfig's False (Megatron-LM transformer_config.py:496 at d98e8a64dd) applies when
#: the recipe does not set it: qwen/qwen3_bridge.py:43-55 and qwen3_moe_bridge.py:51-68
#: (``provider_bridge``).  The others' bridges set it True (llama_bridge.py:56,
#: deepseek_v3_bridge.py:80, gpt_oss_bridge.py:73, kimi_bridge.py:68); Nemotron's have no SwiGLU.
UNFUSED_GLU_PRESETS = frozenset({"qwen3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b"})

#: config.json ``model_type`` -> (Bridge's model bridge for it at 067f987df0, under
#: ``src/megatron/bridge/models/``; its ``bias_activation_fusion``; the
#: ``make_vocab_size_divisible_by`` it fixes, None: from the vocabulary; whether it builds
#: ``num_nextn_predict_layers`` MTP layers).  Each bridge maps the file's sizes, biases, norms
#: and tying as transformers' model has them (CONFIG_MAPPING, conversion/model_bridge.py:
#: 456-499, ``tie_word_embeddings`` -> ``share_embeddings_and_output_weights`` at :471), which
#: is what memsym reads; what it sets beyond that is here.  A bridge that leaves
#: ``bias_activation_fusion`` unset has TransformerConfig's False (Megatron-LM
#: transformer_config.py:496 at d98e8a64dd).
BRIDGE_MODEL_TYPES = {
    "llama": ("llama/llama_bridge.py:36, bias_activation_fusion=True at :56", True, None, False),
    "qwen2": ("qwen/qwen2_bridge.py:28, :46-57 (q/k/v biases, no fusion set)", False, None, False),
    "qwen3": ("qwen/qwen3_bridge.py:28, :43-55 (QK norms, no fusion set)", False, None, False),
    "qwen3_moe": ("qwen/qwen3_moe_bridge.py:28, :51-70", False, None, False),
    "gemma2": ("gemma/gemma2_bridge.py:36-66 (tied embeddings at :63)", False, None, False),
    "gpt_oss": ("gpt_oss/gpt_oss_bridge.py:43, bias_activation_fusion=True at :73", True, None,
                False),
    # provider.mtp_num_layers = num_nextn_predict_layers: the MTP layer transformers leaves out
    "glm4_moe": ("glm/glm45_bridge.py:43, :82 (fusion), :86 (MTP layers)", True, None, True),
    "deepseek_v2": ("deepseek/deepseek_v2_bridge.py:35-37, :66 (fusion), :76 (vocabulary "
                    "padding 3200)", True, 3200, False),
}


def bridge_vocab_divisor(vocab_size: int) -> int:
    """Bridge's ``make_vocab_size_divisible_by`` for a checkpoint's vocabulary: the largest
    power of two up to 128 that divides it (``models/conversion/model_bridge.py:1716-1747`` at
    Megatron-Bridge 067f987df0).

    >>> bridge_vocab_divisor(128256), bridge_vocab_divisor(50257), bridge_vocab_divisor(151655)
    (128, 1, 1)
    """
    base = 128
    while vocab_size % base:
        base //= 2
    return base


def is_model_word(word: str) -> bool:
    """Whether a word beside ``--bridge-recipe`` names a MODEL: a config.json or an existing
    path, a Hub id spelling (``org/name``) or a preset.

    >>> is_model_word("llama3-8b"), is_model_word("Qwen/Qwen2.5-7B"), is_model_word("x.y=1")
    (True, True, False)
    """
    return (word.lower().endswith(".json") or os.path.exists(word) or is_hub_spelling(word)
            or catalogue_key(word) in PRESETS)


def _built_in_code(recipe: str, computed) -> str:
    """One line for a recipe whose model is built in code, naming the statement."""
    stmt = next((c for c in computed if "cfg.model = " in c), None)
    how = f" ({stmt.split(': ', 1)[-1].split('(', 1)[0][:70]}(...), line {stmt.split(':')[0]})" \
        if stmt else ""
    return (f"{recipe[:80]}: the recipe builds its model in code{how}, not from a Hugging Face "
            "checkpoint memsym can read: give the model beside it (a preset, a config.json or a "
            "Hub id, e.g. memsym estimate --bridge-recipe NAME path/config.json)")


def recipe_model(reading: dict, model=None) -> tuple:
    """``(model, architecture options, bias_activation_fusion default, notes)`` of a Bridge
    recipe reading (:func:`memsym.readers.bridge.read_bridge_recipe`): ``model`` a preset name
    or an Architecture for :func:`memsym.job.job`.

    ``model`` (a preset, a config.json path or a Hub id) replaces the recipe's checkpoint; a
    config.json of a ``model_type`` of :data:`BRIDGE_MODEL_TYPES` is built as its bridge builds
    it, anything else as memsym reads it, with TransformerConfig's unfused bias and activation.

    >>> recipe_model({"hf_model": "Qwen/Qwen3-8B", "recipe": "r"})[:3]
    ('qwen3-8b', {}, False)
    """
    hf, recipe = reading["hf_model"], reading["recipe"]
    if model is not None:
        arch = resolve_model(model)
        kind = (arch.extra or {}).get("hf_model_type")
        said = str(model)[:100] if isinstance(model, (str, os.PathLike)) else arch.name
        given = [f"the model is {said} as given, in place of the recipe's "
                 f"{hf or 'model built in code'}"]
        if kind in BRIDGE_MODEL_TYPES:
            arch, opts, fusion, notes = _as_bridge_builds(arch, kind, said)
            return arch, opts, fusion, given + notes
        ours = {p for p, _ in HF_PRESETS.values()} - UNFUSED_GLU_PRESETS
        return arch, {}, arch.name in ours, given
    if hf in HF_PRESETS:
        preset, arch = HF_PRESETS[hf]
        return preset, dict(arch), preset not in UNFUSED_GLU_PRESETS, []
    if hf is None:
        raise InvalidValueError(_built_in_code(recipe, reading.get("computed") or ()))
    try:
        arch = from_hub(hf)
    except MemsymError as exc:
        raise InvalidValueError(f"{recipe[:80]} names the Hub model {hf} (AutoBridge."
                                f"from_hf_pretrained): {exc.args[0] if exc.args else exc} (a "
                                "MODEL beside --bridge-recipe replaces the recipe's)") from None
    kind = arch.extra.get("hf_model_type")
    if kind not in BRIDGE_MODEL_TYPES:
        raise InvalidValueError(
            f"{recipe[:80]}: {hf} is a {kind} model, whose Megatron-Bridge model bridge memsym "
            f"does not follow (it follows {', '.join(sorted(BRIDGE_MODEL_TYPES))}): give the "
            "model beside the recipe (a preset or a config.json) to count it as that model")
    return _as_bridge_builds(arch, kind, f"{hf}'s config.json")


_MTP_NOTE = re.compile(r"num_nextn_predict_layers=([0-9]+) not counted")


def _as_bridge_builds(arch, kind: str, label: str) -> tuple:
    """``(arch, options, bias_activation_fusion, notes)``: a config.json's architecture as
    Bridge's model bridge for ``kind`` builds it (:data:`BRIDGE_MODEL_TYPES`)."""
    where, fusion, divisor, mtp = BRIDGE_MODEL_TYPES[kind]
    opts = {"make_vocab_size_divisible_by": divisor or bridge_vocab_divisor(arch.vocab_size)}
    notes = [f"{label} as Megatron-Bridge's {kind} model bridge builds it "
             f"(models/{where}); a padded vocabulary (should_pad_vocab) is a multiple of "
             f"{opts['make_vocab_size_divisible_by']} x TP (conversion/model_bridge.py:634-637)"]
    kept = []
    for note in arch.extra.get("notes", ()):
        found = _MTP_NOTE.search(note)
        if mtp and found:     # transformers leaves the MTP layers out; Bridge builds them
            opts["mtp_num_layers"] = int(found.group(1))
            notes.append(f"{found.group(1)} MTP layer(s) (num_nextn_predict_layers), as Bridge "
                         "builds them")
        else:
            kept.append(note)
    arch = dataclasses.replace(arch, extra={**arch.extra, "notes": tuple(kept)})
    return arch, opts, fusion, notes
