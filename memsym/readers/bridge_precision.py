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
from ..vocabulary import MEGATRON_FSDP_SCHEMES

__all__ = ["PRECISION_RECIPES", "recipe_precision", "recipe_sharding"]

#: training/mixed_precision.py's precision recipes memsym reads -> (precision, whether FP8
#: parameters are gathered, the line): bf16_mixed 185, fp16_mixed 201,
#: bf16_with_fp8_delayed_scaling_mixed 217 (fp8_param_gather 231), bf16_with_mxfp8_mixed 255
#: (264; fp8_recipe "mxfp8" 263: memsym's fp8_recipe mxfp8), bf16_with_fp8_current_scaling_mixed
#: 285 (302), bf16_with_nvfp4_mixed 405 (fp4 "e2m1": memsym's fp4; fp4_param_gather 416,
#: NVFP4 parameters, memsym.terms.widths.nvfp4_weight_bytes); nemotron_3_super_bf16_with_nvfp4_mixed
#: 421-429 is bf16_with_nvfp4_mixed with the last 14 layers in BF16 (said in a note).
PRECISION_RECIPES = {
    "bf16_mixed": ("bf16", False), "fp16_mixed": ("fp16", False),
    "bf16_with_fp8_delayed_scaling_mixed": ("fp8", True),
    "bf16_with_mxfp8_mixed": ("fp8", True),
    "bf16_with_fp8_current_scaling_mixed": ("fp8", True),
    "bf16_with_nvfp4_mixed": ("fp4", True),
    "nemotron_3_super_bf16_with_nvfp4_mixed": ("fp4", True),
}


def recipe_precision(values, notes) -> dict:
    """The job's precision options from a recipe's ``mixed_precision`` values.

    Examples
    --------
    >>> recipe_precision({"mixed_precision": "bf16_with_mxfp8_mixed"}, [])
    {'precision': 'fp8', 'fp8_param_gather': True, 'fp8_recipe': 'mxfp8'}
    """
    recipe = values.get("mixed_precision", "bf16_mixed")
    if recipe == "MixedPrecisionConfig":          # a recipe's own config: its keywords
        prec = "bf16" if values.get("mixed_precision.bf16") else \
            "fp16" if values.get("mixed_precision.fp16") else "fp32"
        gather = False
    elif recipe in PRECISION_RECIPES:
        prec, gather = PRECISION_RECIPES[recipe]
        if recipe.startswith("nemotron_3_super"):     # first_last_layers_bf16, 14 at the end
            notes.append(f"{recipe}: its last 14 layers run in BF16 (mixed_precision.py:421-429); "
                         "counted at the run's NVFP4 like the others")
    else:
        raise InvalidValueError(f"mixed_precision={str(recipe)[:60]}: memsym reads "
                                f"{', '.join(PRECISION_RECIPES)}")
    if "mixed_precision.fp8" in values:     # fp8="hybrid"/"e4m3" turns FP8 on, null off
        if values["mixed_precision.fp8"] not in (None, False):
            prec = "fp8"
        elif prec == "fp8":
            prec, gather = ("fp16" if str(recipe).startswith("fp16") else "bf16"), False
    key = "mixed_precision.fp4_param_gather" if prec == "fp4" else "mixed_precision.fp8_param_gather"
    if key in values:   # the gather of the precision's own parameters
        gather = recipe_flag(values, key)
    # MixedPrecisionConfig.fp8_recipe (bf16_with_mxfp8_mixed sets "mxfp8"); delayed and
    # tensorwise are counted alike (memsym.vocabulary.FP8_RECIPES), blockwise as they are
    fp8_recipe = values.get("mixed_precision.fp8_recipe",
                            "mxfp8" if recipe == "bf16_with_mxfp8_mixed" else None)
    out = {"precision": prec}
    if prec in ("fp8", "fp4") and gather:
        out[prec + "_param_gather"] = True
    if prec == "fp8" and fp8_recipe == "mxfp8":
        out["fp8_recipe"] = "mxfp8"
    elif prec == "fp8" and fp8_recipe not in (None, "delayed", "tensorwise"):
        notes.append(f"mixed_precision.fp8_recipe {str(fp8_recipe)[:40]}: counted as FP8 with "
                     "per-tensor scales")
    # the precision config's grad_reduce_in_fp32 (True in every named recipe) replaces the DDP
    # config's (update_config_with_precision_overrides)
    fp32 = values.get("mixed_precision.grad_reduce_in_fp32", True)
    if not fp32 and prec in ("bf16", "fp8", "fp4"):
        out["grad_dtype"] = "bf16"
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
            for key in ("fp8_param_gather", "fp8_recipe", "fp4_param_gather"):
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
