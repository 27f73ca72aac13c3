"""A Megatron-Bridge recipe's precision and data-parallel sharding as memsym's job options.

:func:`recipe_precision` reads ``mixed_precision`` (a named recipe of
``training/mixed_precision.py`` at 067f987df0, or its fields overridden) into memsym's
precision, ``fp8_param_gather``, ``fp8_recipe``, ``fp4_param_gather`` and gradient dtype;
:func:`recipe_sharding` reads the DDP config (distributed optimizer, synced with the optimizer
config's, Megatron-FSDP and its strategy) into memsym's sharding scheme, saying in ``notes``
what it counts otherwise.
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ._values import recipe_flag
from .bridge_optimizer import synced_flag
from ..vocabulary import (FP8_RECIPE_COUNTED_AS, FP8_RECIPES, MEGATRON_FSDP_SCHEMES,
                          fp8_recipe_note)

__all__ = ["PRECISION_RECIPES", "recipe_precision", "recipe_sharding", "recipe_fp8_attention"]

#: MixedPrecisionConfig's own defaults of the fields memsym reads (training/mixed_precision.py
#: at 067f987df0): grad_reduce_in_fp32 True (:47), fp8 None (:49), fp8_recipe "tensorwise"
#: (:50-52), fp8_param_gather False (:61), fp4 None (:63), fp4_param_gather False (:66), no
#: BF16 layers (first_last_layers_bf16 False :53, num_layers_at_start/end_in_bf16 0 :73-74).
_CONFIG_DEFAULTS = {"fp8": None, "fp8_recipe": "tensorwise", "fp8_param_gather": False,
                    "fp4": None, "fp4_param_gather": False, "grad_reduce_in_fp32": True,
                    "bf16_layers": (0, 0)}

#: training/mixed_precision.py's named precision configs (at 067f987df0) -> their base dtype and
#: the fields memsym reads that each sets (the rest are :data:`_CONFIG_DEFAULTS`); the line of
#: each value beside it.  ``bf16_layers``: num_layers_at_start_in_bf16, _at_end_ (with
#: first_last_layers_bf16 True).
_NAMED_CONFIGS = {
    "bf16_mixed": ("bf16", {}),                                                 # :185-197
    "fp16_mixed": ("fp16", {"grad_reduce_in_fp32": False}),                     # :201-213 (:212)
    "bf16_with_fp8_delayed_scaling_mixed": ("bf16", {                            # :217-232
        "fp8": "hybrid", "fp8_recipe": "delayed", "fp8_param_gather": True}),   # :226, :227, :231
    "bf16_with_mxfp8_mixed": ("bf16", {                                          # :255-266
        "fp8": "e4m3", "fp8_recipe": "mxfp8", "fp8_param_gather": True}),       # :262-264
    "bf16_with_fp8_current_scaling_mixed": ("bf16", {                            # :285-303
        "fp8": "hybrid", "fp8_recipe": "tensorwise", "bf16_layers": (1, 1),     # :297-301
        "fp8_param_gather": True}),                                              # :302
    "nemotron_h_bf16_with_fp8_current_scaling_mixed": ("bf16", {                 # :307-325
        "fp8": "hybrid", "fp8_recipe": "tensorwise", "bf16_layers": (2, 2),     # :319-323
        "fp8_param_gather": True}),                                              # :324
    "nanov2_bf16_with_fp8_current_scaling_mixed": ("bf16", {                     # :329-347
        "fp8": "hybrid", "fp8_recipe": "blockwise", "bf16_layers": (2, 2),      # :341-345
        "fp8_param_gather": True}),                                              # :346
    "bf16_with_fp8_subchannel_scaling_mixed": ("bf16", {                         # :373-385
        "fp8": "hybrid", "fp8_recipe": "blockwise", "fp8_param_gather": False}),  # :382-384
    "bf16_with_nvfp4_mixed": ("bf16", {                                          # :405-417
        "fp4": "e2m1", "fp8_param_gather": False, "fp4_param_gather": True}),   # :413-416
    "nemotron_3_super_bf16_with_nvfp4_mixed": ("bf16", {                         # :421-429
        "fp4": "e2m1", "fp8_param_gather": False, "fp4_param_gather": True,     # (:426)
        "bf16_layers": (0, 14)}),                                                # :427-428
}
#: Each fp16 config is ``fp16_mixed()`` (grad_reduce_in_fp32 False, :212) with the FP8 fields
#: of its bf16 twin, set line for line alike (fp16 -> bf16 twin, the fp16 function's lines).
_FP16_TWINS = {"fp16_with_fp8_delayed_scaling_mixed": "bf16_with_fp8_delayed_scaling_mixed",  # :236-251
               "fp16_with_mxfp8_mixed": "bf16_with_mxfp8_mixed",                              # :270-281
               "fp16_with_fp8_current_scaling_mixed": "bf16_with_fp8_current_scaling_mixed",  # :351-369
               "fp16_with_fp8_subchannel_scaling_mixed":
                   "bf16_with_fp8_subchannel_scaling_mixed"}                                  # :389-401
_NAMED_CONFIGS.update({fp16: ("fp16", {"grad_reduce_in_fp32": False, **_NAMED_CONFIGS[bf16][1]})
                       for fp16, bf16 in _FP16_TWINS.items()})

#: MixedPrecisionConfig's counts of BF16 layers (:73-74), in bf16_layers' order.
_BF16_COUNTS = ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16")

#: The named configs memsym reads -> (precision, whether its FP8/FP4 parameters are gathered):
#: fp8 for any fp8 format (bf16 or fp16 16-bit weights with FP8 GEMMs), fp4 for NVFP4 (e2m1:
#: memsym.terms.low_precision.nvfp4_weight_bytes).
PRECISION_RECIPES = {
    name: ("fp8" if f.get("fp8") else "fp4" if f.get("fp4") else base,
           bool(f.get("fp4_param_gather") if f.get("fp4") else f.get("fp8_param_gather")))
    for name, (base, f) in _NAMED_CONFIGS.items()}

def _config_fields(values) -> tuple:
    """``(config name, base dtype, fields)`` of a recipe's ``mixed_precision``: the named
    config's fields (or MixedPrecisionConfig's defaults), then the recipe's field overrides."""
    recipe = values.get("mixed_precision", "bf16_mixed")
    if isinstance(recipe, str):   # get_mixed_precision_config reads bf16-mixed as bf16_mixed (:443)
        recipe = recipe.replace("-", "_")
    if recipe == "MixedPrecisionConfig":          # a recipe's own config: its keywords
        base = "bf16" if values.get("mixed_precision.bf16") else \
            "fp16" if values.get("mixed_precision.fp16") else "fp32"
        fields = dict(_CONFIG_DEFAULTS)
    elif recipe in _NAMED_CONFIGS:
        base, own = _NAMED_CONFIGS[recipe]
        fields = {**_CONFIG_DEFAULTS, **own}
    else:
        raise InvalidValueError(f"mixed_precision={str(recipe)[:60]}: memsym reads "
                                f"{', '.join(_NAMED_CONFIGS)}")
    fields.update(first_last_layers_bf16=any(fields["bf16_layers"]),
                  **dict(zip(_BF16_COUNTS, fields["bf16_layers"])))
    for key in ("fp8", "fp8_recipe", "fp4", "fp8_param_gather", "fp4_param_gather",
                "grad_reduce_in_fp32", "first_last_layers_bf16", *_BF16_COUNTS):
        if "mixed_precision." + key in values:   # the recipe's overrides of the config's fields
            fields[key] = values["mixed_precision." + key]
    return recipe, base, fields


def recipe_fp8_attention(values) -> str | None:
    """The Transformer Engine recipe under which a recipe's dot-product attention runs in FP8
    (``delayed``, ``tensorwise``, ``mxfp8`` or ``nvfp4``), None where it does not.

    ``mixed_precision.fp8_dot_product_attention`` (MixedPrecisionConfig, training/
    mixed_precision.py:58, False) reaches the model config (update_config_with_precision_
    overrides, :138-157) and Megatron-core hands it to TE's recipe as ``fp8_dpa``: delayed
    (core/extensions/transformer_engine.py:3350), tensorwise and mxfp8 (core/fp8_utils.py:777-
    788), NVFP4 (core/fp4_utils.py:224-226); blockwise's Float8BlockScaling gets none
    (fp8_utils.py:781-784), and without FP8 or FP4 no recipe runs (Megatron-LM d98e8a64dd).

    >>> recipe_fp8_attention({"mixed_precision": "bf16_with_mxfp8_mixed",
    ...                       "mixed_precision.fp8_dot_product_attention": True})
    'mxfp8'
    >>> recipe_fp8_attention({"mixed_precision": "bf16_mixed",
    ...                       "mixed_precision.fp8_dot_product_attention": True}) is None
    True
    """
    if not recipe_flag(values, "mixed_precision.fp8_dot_product_attention", False):
        return None
    _, _, fields = _config_fields(values)
    if fields["fp8"] not in (None, False):
        recipe = fields["fp8_recipe"]
        return recipe if recipe in ("delayed", "tensorwise", "mxfp8") else None
    return "nvfp4" if fields["fp4"] not in (None, False) else None


def recipe_precision(values, notes) -> dict:
    """The job's precision options from a recipe's ``mixed_precision`` values.

    The named config's fields (or MixedPrecisionConfig's defaults for a recipe's own config),
    then the recipe's field overrides; FP8's recipe is the config's ``fp8_recipe`` (the model
    config takes it, update_config_with_precision_overrides, mixed_precision.py:138-157).

    Examples
    --------
    >>> recipe_precision({"mixed_precision": "bf16_with_mxfp8_mixed"}, [])
    {'precision': 'fp8', 'fp8_param_gather': True, 'fp8_recipe': 'mxfp8'}
    >>> recipe_precision({"mixed_precision": "bf16_with_fp8_current_scaling_mixed"}, [])["fp8_recipe"]
    'tensorwise'
    """
    recipe, base, fields = _config_fields(values)
    fp8, fp4 = (fields[k] not in (None, False) for k in ("fp8", "fp4"))
    if fp8 and fp4:
        raise InvalidValueError(f"mixed_precision {str(recipe)[:60]} with fp8 and fp4: Bridge "
                                "refuses both (MixedPrecisionConfig.finalize, "
                                "mixed_precision.py:107-108)")
    prec = "fp8" if fp8 else "fp4" if fp4 else base
    gather = recipe_flag(values, f"mixed_precision.{prec}_param_gather",
                         fields[f"{prec}_param_gather"]) if prec in ("fp8", "fp4") else False
    out = {"precision": prec}
    # first_last_layers_bf16 with its counts reach TransformerConfig (update_config_with_
    # precision_overrides, :138-157): memsym.training.bf16_layers; without it, none
    pair = tuple(int(fields[k]) for k in _BF16_COUNTS) \
        if recipe_flag(values, "mixed_precision.first_last_layers_bf16",
                       fields["first_last_layers_bf16"]) else (0, 0)
    if prec in ("fp8", "fp4") and any(pair):
        out["bf16_layers"] = pair
        if base == "fp16":
            notes.append(f"{recipe}: its BF16 layers (first_last_layers_bf16) run in FP16, "
                         "the run's 16-bit dtype: the same 2 bytes and rate")
    if prec in ("fp8", "fp4") and gather:
        out[prec + "_param_gather"] = True
    if recipe_fp8_attention(values) in FP8_RECIPES:
        out["fp8_attention"] = True     # NVFP4's: counted 16-bit (memsym.terms.fp8_attention)
    if prec == "fp8":
        fp8_recipe = fields["fp8_recipe"]
        if fp8_recipe not in FP8_RECIPE_COUNTED_AS:
            raise InvalidValueError(f"mixed_precision.fp8_recipe={str(fp8_recipe)[:40]}: memsym "
                                    f"reads {', '.join(FP8_RECIPE_COUNTED_AS)}")
        out["fp8_recipe"] = FP8_RECIPE_COUNTED_AS[fp8_recipe]
        if fp8_recipe_note(fp8_recipe, "mixed_precision.fp8_recipe"):
            notes.append(fp8_recipe_note(fp8_recipe, "mixed_precision.fp8_recipe"))
    # the precision config's grad_reduce_in_fp32 (True in the bf16 configs, False in the fp16
    # ones) replaces the DDP config's (update_config_with_precision_overrides)
    fp32 = fields["grad_reduce_in_fp32"]
    if not fp32 and prec in ("bf16", "fp8", "fp4"):
        out["grad_dtype"] = "fp16" if base == "fp16" else "bf16"
    if values.get("ddp.grad_reduce_in_fp32", fp32) != fp32:
        notes.append("ddp.grad_reduce_in_fp32 is replaced by the precision config's "
                     f"grad_reduce_in_fp32 ({fp32}) in Bridge")
    return out


def recipe_sharding(values, prec: dict, notes) -> str:
    """memsym's sharding scheme from a recipe's DDP values; ``prec`` (from
    :func:`recipe_precision`) falls back to bf16 where FP8 under that sharding is not modelled.

    Examples
    --------
    >>> recipe_sharding({}, {"precision": "bf16"}, [])
    'distributed-optimizer'
    """
    if recipe_flag(values, "ddp.use_megatron_fsdp"):
        strategy = values.get("ddp.data_parallel_sharding_strategy", "optim_grads_params")
        if strategy not in MEGATRON_FSDP_SCHEMES:
            raise InvalidValueError(f"ddp.data_parallel_sharding_strategy must be one of "
                                    f"{', '.join(MEGATRON_FSDP_SCHEMES)}, got {strategy!r:.40}")
        scheme = MEGATRON_FSDP_SCHEMES[strategy]
        notes.append(f"Megatron-FSDP {strategy}: its own buffers, sharded as sharding {scheme} "
                     "shards them")
        # nccl_ub forces the double buffer (param_and_grad_buffer.py:2046-2053 at 2a75ac12c5)
        prec.update(megatron_fsdp=strategy, fsdp_double_buffer=any(recipe_flag(
            values, "ddp." + k) for k in ("fsdp_double_buffer", "nccl_ub",
                                          "megatron_fsdp_max_pool_double_buffer")))
        prec.pop("grad_dtype", None)  # no grad_reduce_in_fp32: main grads in the params' dtype
        grads = str(values.get("ddp.megatron_fsdp_main_grads_dtype")).replace("torch.", "")
        if grads != "None":   # or megatron_fsdp_main_grads_dtype's (2313-2322)
            prec["grad_dtype"] = grads.replace("bfloat16", "bf16").replace("float", "fp")
        mxfp8 = prec.get("fp8_recipe") == "mxfp8"
        if prec["precision"] == "fp8" and scheme == "fsdp" and prec.get("fp8_param_gather") \
                and not mxfp8:
            # Megatron-FSDP's per-tensor FP8 parameters (Megatron-LM 2a75ac12c5, Bridge's pin:
            # megatron_fsdp/param_and_grad_buffer.py:2804 init_param_with_fp8 from
            # fp8_param_gather, 2632 a uint8 model_weight_buffer): memsym.terms.model_state
            notes.append("Megatron-FSDP with FP8 parameters (fp8_param_gather): the sharded "
                         "fp32 main weights and FP8 model weights, the layers gathered in FP8")
        elif prec["precision"] in ("fp8", "fp4") and scheme not in ("ddp", "distributed-optimizer"):
            # not modelled: NVFP4 under FSDP, bf16 parameters with FP8 GEMMs (TE quantizes each
            # gathered weight), a partial sharding with FP8, and MXFP8's second (columnwise)
            # weight buffer
            # (param_and_grad_buffer.py:2634-2681 transpose_weight_buffer, "only mxfp8 needs it")
            why = ("with NVFP4" if prec["precision"] == "fp4"
                   else "with MXFP8 parameters (their columnwise transpose_weight_buffer is not "
                   "modelled)" if mxfp8 and scheme == "fsdp" and prec.get("fp8_param_gather")
                   else "with FP8 without fp8_param_gather" if scheme == "fsdp"
                   else "with FP8")
            prec.update(precision="bf16")
            for key in ("fp8_param_gather", "fp8_recipe", "fp4_param_gather", "bf16_layers"):
                prec.pop(key, None)
            notes.append(f"Megatron-FSDP {strategy} {why} (supported by Bridge): memsym counts "
                         "the job as bf16, without the FP8 weights and FP8 saved inputs")
        return scheme
    # Bridge sets both sections' flags when either is set (training/config.py:2101-2123)
    distributed = synced_flag(values, "use_distributed_optimizer", True, notes)
    gather = prec.pop("fp4_param_gather", None)
    if gather and distributed:
        prec["fp4_param_gather"] = True   # NVFP4 parameters: the distributed optimizer's
    elif gather:
        notes.append("fp4_param_gather without the distributed optimizer is not modelled: "
                     "counted as bf16 weights with TE's NVFP4 copies")
    return "distributed-optimizer" if distributed else "ddp"
