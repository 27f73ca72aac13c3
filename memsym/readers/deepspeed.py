"""Read a DeepSpeed config JSON as the layout, training and sharding part of a job.

This module owns DeepSpeed's meaning of its config keys: the batch triple and its consistency
rule, bf16/fp16, and ``zero_optimization`` with the defaults of DeepSpeed 0.19.6
(deepspeedai/DeepSpeed ``edaa722126``: ``runtime/config.py``, ``runtime/zero/config.py``,
``runtime/zero/offload_config.py``, ``runtime/precision_config.py``).
"""

from __future__ import annotations

import os

from ..errors import InvalidValueError
from ..text import short
from ._values import MAX_BATCH, MAX_BYTES_INPUT, MAX_GPUS, load_json, read_bounded

__all__ = ["read_deepspeed_config", "ZERO_DEFAULTS"]

# runtime/zero/config.py:DeepSpeedZeroConfig field defaults (in elements where a size).
ZERO_DEFAULTS = {
    "stage": 0,
    "contiguous_gradients": True,
    "reduce_scatter": True,
    "reduce_bucket_size": 500_000_000,          # pp_int(5e8)
    "allgather_partitions": True,
    "allgather_bucket_size": 500_000_000,       # pp_int(5e8)
    "overlap_comm": None,                       # validator overlap_comm_valid: stage == 3
    "sub_group_size": 1_000_000_000,
    "stage3_prefetch_bucket_size": 50_000_000,  # prefetch_bucket_size, pp_int(5e7)
    "stage3_param_persistence_threshold": 100_000,
    "stage3_max_live_parameters": 1_000_000_000,
    "stage3_max_reuse_distance": 1_000_000_000,
}
_ZERO_BOOL = ("contiguous_gradients", "reduce_scatter", "allgather_partitions", "overlap_comm")
_OFFLOAD_DEVICES = ("none", "cpu", "nvme")      # offload_config.py:OffloadDeviceEnum
_TOP_MODELLED = {"train_batch_size", "train_micro_batch_size_per_gpu",
                 "gradient_accumulation_steps", "bf16", "fp16", "zero_optimization", "data_types"}


def _load(source):
    if isinstance(source, dict):
        return source
    # JSON text starts with an object or array ('[' is then refused as not an object): never
    # a 200 KB "file name"
    if isinstance(source, os.PathLike) or (isinstance(source, str)
                                           and not source.lstrip().startswith(("{", "["))):
        source = read_bounded(source, "DeepSpeed config")
    if not isinstance(source, str):
        raise InvalidValueError(f"a DeepSpeed config is a path, JSON text or a dict, got "
                                f"{type(source).__name__}")
    if len(source) > MAX_BYTES_INPUT:
        raise InvalidValueError(f"DeepSpeed config larger than {MAX_BYTES_INPUT} bytes")
    # nesting, number lengths and value counts are checked on the text before json parses it
    data = load_json(source, "DeepSpeed config")
    if not isinstance(data, dict):
        raise InvalidValueError("a DeepSpeed config is a JSON object")
    return data


def _count(value, key, lo=0, hi=MAX_BATCH):
    # DeepSpeed's pydantic int fields accept integral JSON numbers such as 5e8 (pp_int).
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidValueError(f"DeepSpeed {key} must be a whole number, got {value!r:.40}")
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidValueError(f"DeepSpeed {key} must be a whole number, got {value!r}")
        value = int(value)
    if not lo <= value <= hi:

        # short(): a dict given to the API may hold a 5000-digit int, which str() refuses
        raise InvalidValueError(f"DeepSpeed {key} must be between {lo} and {hi}, got "
                                f"{short(value)}")
    return value


def _flag(value, key):
    if not isinstance(value, bool):
        raise InvalidValueError(f"DeepSpeed {key} must be true or false, got {value!r:.40}")
    return value


def read_deepspeed_config(source, world_size: int | None = None) -> dict:
    """A DeepSpeed config as plain data: ``layout``, ``training``, ``precision``, ``sharding``.

    The batch triple is completed and checked as ``DeepSpeedConfig._set_batch_related_parameters``
    and ``_batch_assertion`` do:

    .. math:: B_{\\text{train}} = b \\cdot \\text{GAS} \\cdot d

    with d the data-parallel size [GPUs] (DeepSpeed's ``world_size`` divided by model/sequence
    parallelism).  ``"auto"`` values (the Hugging Face Trainer integration) are left unknown.

    Parameters
    ----------
    source : str, path or dict
        A path to the JSON file, its text, or the parsed object.
    world_size : int, optional
        The data-parallel size d [GPUs]; without it, d is derived from the full triple if given.

    Returns
    -------
    dict
        ``layout`` (d), ``training`` (micro_batch_size [sequences], gradient_accumulation_steps,
        global_batch_size [sequences]), ``precision`` (params_dtype, grad_accum_dtype),
        ``sharding`` (zero_stage, offload devices, buckets [elements], overlap_comm,
        stage3_*), ``ignored`` and ``notes``.

    References
    ----------
    DeepSpeed 0.19.6 ``deepspeed/runtime/config.py``, ``deepspeed/runtime/zero/config.py``;
    ``docs/_tutorials/zero.md`` for the example configs.

    Examples
    --------
    >>> c = read_deepspeed_config('{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,'
    ...     ' "gradient_accumulation_steps": 2, "bf16": {"enabled": true},'
    ...     ' "zero_optimization": {"stage": 2}}')
    >>> c["layout"]["d"], c["sharding"]["zero_stage"], c["sharding"]["overlap_comm"]
    (8, 2, False)
    """
    data = _load(source)
    notes, ignored = [], []
    if world_size is not None:
        world_size = _count(world_size, "world size", 1, MAX_GPUS)

    def get(key):
        v = data.get(key)
        if v == "auto":
            notes.append(f'{key} is "auto" (set by the Hugging Face Trainer): left unknown')
            return None
        return v

    tb, mb, gas = (get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                    "gradient_accumulation_steps"))
    tb = None if tb is None else _count(tb, "train_batch_size", 1)
    mb = None if mb is None else _count(mb, "train_micro_batch_size_per_gpu", 1)
    gas = None if gas is None else _count(gas, "gradient_accumulation_steps", 1)
    d = world_size
    if d is None and None not in (tb, mb, gas):
        if tb % (mb * gas):
            raise InvalidValueError(f"train_batch_size {tb} is not micro-batch {mb} x accumulation "
                                    f"{gas} x the data-parallel size (DeepSpeed's _batch_assertion)")
        d = tb // (mb * gas)
        notes.append(f"data-parallel size {d} from train_batch_size / (micro-batch x accumulation)")
    if d is not None:
        # runtime/config.py:_set_batch_related_parameters, with DeepSpeed's floor divisions
        if None not in (tb, mb, gas):
            pass
        elif tb is not None and mb is not None:
            gas = tb // mb // d
        elif tb is not None and gas is not None:
            mb = tb // d // gas
        elif mb is not None and gas is not None:
            tb = mb * gas * d
        elif tb is not None:
            gas, mb = 1, tb // d
        elif mb is not None:
            tb, gas = mb * d, 1
        else:
            raise InvalidValueError("DeepSpeed needs train_batch_size or "
                                    "train_micro_batch_size_per_gpu")
        # runtime/config.py:_batch_assertion
        if not (tb > 0 and mb > 0 and gas > 0) or tb != mb * gas * d:
            raise InvalidValueError(f"DeepSpeed's batch rule fails: train_batch_size {tb} != "
                                    f"micro-batch {mb} x accumulation {gas} x data-parallel {d}")
    elif tb is None and mb is None:
        raise InvalidValueError("DeepSpeed needs train_batch_size or train_micro_batch_size_per_gpu")
    else:
        notes.append("data-parallel size unknown: give the world size to complete the batch")

    # precision: runtime/precision_config.py, bf16/fp16 {"enabled": false} by default
    def enabled(key):
        sec = data.get(key, {})
        if not isinstance(sec, dict):
            raise InvalidValueError(f"DeepSpeed {key} must be an object such as {{\"enabled\": true}}")
        v = sec.get("enabled", False)
        return False if v == "auto" else _flag(v, f"{key}.enabled")

    bf16, fp16 = enabled("bf16"), enabled("fp16")
    if bf16 and fp16:
        raise InvalidValueError("DeepSpeed config enables both bf16 and fp16; enable one")
    params = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    dtypes = data.get("data_types", {})
    if not isinstance(dtypes, dict):
        raise InvalidValueError("DeepSpeed data_types must be an object")
    gad = dtypes.get("grad_accum_dtype")
    grad_accum = {None: params, "fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}.get(gad)
    if grad_accum is None:
        raise InvalidValueError(f"DeepSpeed data_types.grad_accum_dtype must be fp32, fp16 or "
                                f"bf16, got {gad!r:.40}")

    zero = data.get("zero_optimization", {})
    if not isinstance(zero, dict):
        raise InvalidValueError("DeepSpeed zero_optimization must be an object")
    sh = {}
    stage = zero.get("stage", 0)
    sh["zero_stage"] = _count(stage, "zero_optimization.stage", 0, 3)
    for key, default in ZERO_DEFAULTS.items():
        if key == "stage":
            continue
        alias = key[len("stage3_"):] if key.startswith("stage3_") else None
        v = zero.get(key, zero.get(alias, default) if alias else default)
        if key in _ZERO_BOOL:
            v = None if v is None else _flag(v, f"zero_optimization.{key}")
        else:
            v = _count(v, f"zero_optimization.{key}", 0, 2**62)
        sh[key] = v
    if sh["overlap_comm"] is None:   # zero/config.py:overlap_comm_valid
        sh["overlap_comm"] = sh["zero_stage"] == 3
    for part in ("offload_optimizer", "offload_param"):
        sec = zero.get(part)
        if sec is None:
            sh[part] = "none"
            continue
        if not isinstance(sec, dict):
            raise InvalidValueError(f"DeepSpeed zero_optimization.{part} must be an object")
        dev = sec.get("device", "none")
        if dev not in _OFFLOAD_DEVICES:
            raise InvalidValueError(f"DeepSpeed zero_optimization.{part}.device must be one of "
                                    f"{', '.join(_OFFLOAD_DEVICES)}, got {dev!r:.40}")
        sh[part] = dev
        if part == "offload_optimizer":
            ratio = sec.get("ratio", 1.0)
            if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
                raise InvalidValueError("offload_optimizer.ratio must be between 0 and 1")
            if ratio < 1 and sh["zero_stage"] != 3:   # zero/config.py:offload_ratio_check
                raise InvalidValueError("partial optimizer offload (ratio < 1) needs ZeRO stage 3")
            sh["offload_optimizer_ratio"] = ratio
    if sh["offload_param"] != "none" and sh["zero_stage"] != 3:
        raise InvalidValueError("offload_param needs ZeRO stage 3 (DeepSpeed)")
    for key in zero:
        if key not in ZERO_DEFAULTS and key not in ("stage", "offload_optimizer", "offload_param",
                                                    "prefetch_bucket_size",
                                                    "param_persistence_threshold",
                                                    "max_live_parameters", "max_reuse_distance"):
            ignored.append(f"zero_optimization.{key}")
    ignored += [k for k in data if k not in _TOP_MODELLED]
    return {"layout": {"d": d}, "training": {"micro_batch_size": mb,
                                             "gradient_accumulation_steps": gas,
                                             "global_batch_size": tb},
            "precision": {"params_dtype": params, "grad_accum_dtype": grad_accum},
            "sharding": sh, "ignored": tuple(ignored), "notes": tuple(notes)}
