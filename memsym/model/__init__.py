"""Model architectures (``memsym.model``): the shape description every term family reads.

Field names follow Megatron-LM's arguments (``num_layers``, ``hidden_size``, ...), so a launch
command's arguments map one to one.  Parameter counts (exact integers and SymPy forms in the
registry's symbols), per-pipeline-stage counts, presets and the Hugging Face ``config.json``
reader live here too.

Conventions (each chosen so that the counts equal the published / Hugging Face totals):

* ``vocab_size`` is the tokenizer's vocabulary as published (Llama-2: 32000); Megatron-LM pads it to
  ⌈V/(128·t)⌉·128·t (:func:`padded_vocab_size`).  Totals use the published size unless
  ``pad_vocab=True``; per-stage (memory) counts pad by default, as Megatron allocates the padded rows.
* Norms: ``LayerNorm`` has weight and bias (2h), ``RMSNorm`` a weight only (h).
* Biases follow ``add_bias_linear`` (all linear layers, experts and router included) and
  ``add_qkv_bias`` (only Q, K, V, as Qwen2 does).
* MTP layers (DeepSeek-V3) share the embedding and the output layer with the main model (as they do in
  training); each holds two norms on its inputs, the 2h→h projection, one transformer layer of the kind
  of the last decoder layer, and its own final norm.
"""

from .architecture import Architecture, Resolved, resolve, padded_vocab_size
from .layer_patterns import moe_layer_pattern
from .counts import COMPONENTS, parameter_expression, parameter_values, parameter_counts, parameter_count, active_parameter_count, lora_parameter_count
from .symbolic_counts import gpt_parameter_expression, symbolic_parameters
from .lora_counts import lora_layer_adapters
from .stages import StageParameters, check_layout, stage_layers, layer_parameters, stage_parameters
from .presets import (PRESET_MODEL_TYPES, PRESETS, RECIPES, preset, preset_dropout, preset_names,
                      recipe, resolve_model)
from .hf_config import from_hf_config
from .hub import from_hub, parse_hub_id

__all__ = ["Architecture", "Resolved", "resolve", "padded_vocab_size", "moe_layer_pattern", "COMPONENTS", "parameter_expression", "parameter_values", "parameter_counts", "parameter_count", "active_parameter_count", "gpt_parameter_expression", "symbolic_parameters", "lora_parameter_count", "lora_layer_adapters", "StageParameters", "check_layout", "stage_layers", "layer_parameters", "stage_parameters", "PRESETS", "RECIPES", "PRESET_MODEL_TYPES", "preset", "preset_dropout", "preset_names", "recipe", "resolve_model", "from_hf_config", "from_hub", "parse_hub_id"]
