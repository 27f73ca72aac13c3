"""Read a DeepSpeed config's ``zero_optimization`` section: stage, buckets, offload, notes.

The defaults are those of DeepSpeed 0.19.6 (deepspeedai/DeepSpeed ``edaa722126``:
``runtime/zero/config.py``, ``runtime/zero/offload_config.py``, ``runtime/config_utils.py``),
and the hidden-size ``"auto"`` sizes are filled as the Hugging Face Trainer fills them
(:data:`memsym.readers.deepspeed_values.HF_TRAINER`).  Every key is either modelled, read into
a note (:data:`memsym.readers.deepspeed_notes.NOTED_ZERO`), or listed as ignored.
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..limits import check_limit
from ..text import short
from ._values import MAX_GPUS
from .deepspeed_notes import NOTED_ZERO
from .deepspeed_values import HF_TRAINER, deepspeed_count, deepspeed_flag, deepspeed_object

__all__ = ["read_zero_optimization", "resolve_hidden_autos", "ZERO_DEFAULTS",
           "HIDDEN_AUTO_KEYS"]

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

#: The ZeRO keys the Hugging Face Trainer fills from the model's hidden size h
#: (``trainer_config_finalize``): h^2, int(0.9 h^2) and 10 h; the last two only under ZeRO-3
#: (``if self.is_zero3()``), elsewhere DeepSpeed drops the "auto" and keeps its default.
HIDDEN_AUTO_KEYS = ("reduce_bucket_size", "stage3_prefetch_bucket_size",
                    "stage3_param_persistence_threshold")

_OFFLOAD_KEYS = ("offload_optimizer", "offload_param", "cpu_offload", "cpu_offload_param")


def resolve_hidden_autos(sharding: dict, hidden_size: int, defaults: list) -> dict:
    """Fill the ``"auto"`` ZeRO sizes of ``sharding`` from the hidden size h, as the Hugging
    Face Trainer does (``HfTrainerDeepSpeedConfig.trainer_config_finalize``):

    .. math:: N_{\\text{reduce}} = h^2, \\quad N_{\\text{prefetch}} = \\lfloor 0.9\\, h^2
       \\rfloor, \\quad N_{\\text{persist}} = 10\\, h

    [elements]; the last two only under ZeRO-3 (elsewhere DeepSpeed drops the "auto",
    ``config_utils.py:DeepSpeedConfigModel.__init__``, and keeps its default, unused below
    stage 3).  HF writes ``int(0.9 * hidden_size * hidden_size)``: for every h up to memsym's
    hidden limit this is the exact ``(9 h^2) // 10`` used here (tests check real widths).

    Parameters
    ----------
    sharding : dict
        The ``sharding`` of :func:`memsym.readers.deepspeed.read_deepspeed_config` (changed
        in place and returned).
    hidden_size : int
        The model's hidden size h.
    defaults : list
        Where one ``(key, value, source)`` row is appended per value filled.

    Examples
    --------
    >>> sh = {"zero_stage": 3, "reduce_bucket_size": "auto",
    ...       "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}
    >>> rows = []
    >>> sh = resolve_hidden_autos(sh, 4096, rows)
    >>> [sh[k] for k in HIDDEN_AUTO_KEYS]
    [16777216, 15099494, 40960]
    """
    h = check_limit("hidden", hidden_size, "hidden_size")
    filled = {"reduce_bucket_size": (h * h, "hidden_size^2"),
              "stage3_prefetch_bucket_size": ((9 * h * h) // 10, "int(0.9 hidden_size^2)"),
              "stage3_param_persistence_threshold": (10 * h, "10 hidden_size")}
    for key in HIDDEN_AUTO_KEYS:
        if sharding.get(key) != "auto":
            continue
        if key != "reduce_bucket_size" and sharding["zero_stage"] != 3:
            sharding[key] = ZERO_DEFAULTS[key]
            defaults.append((f"zero_optimization.{key}", ZERO_DEFAULTS[key],
                             'DeepSpeed config "auto" below ZeRO-3: the Trainer leaves it, '
                             "DeepSpeed drops it and keeps its default (runtime/config_utils.py)"))
            continue
        value, expr = filled[key]
        sharding[key] = value
        defaults.append((f"zero_optimization.{key}", value,
                         f'DeepSpeed config "auto" = {expr} (h = {h}; {HF_TRAINER}.'
                         "trainer_config_finalize)"))
    return sharding


def read_zero_optimization(data: dict, hidden_size: int | None, notes: list, ignored: list,
                           defaults: list) -> dict:
    """The ``sharding`` of a DeepSpeed config: its ``zero_optimization`` section, typed.

    ZeRO's stage, the sizes of :data:`ZERO_DEFAULTS` [elements] and its booleans (DeepSpeed's
    default where absent), the offload devices, and the hidden-size ``"auto"`` sizes filled by
    :func:`resolve_hidden_autos` when ``hidden_size`` is given (left ``"auto"`` without it).

    Parameters
    ----------
    data : dict
        The whole DeepSpeed config.
    hidden_size : int, optional
        The model's hidden size, for the hidden-size ``"auto"`` sizes.
    notes, ignored, defaults : list
        Where the notes, the ignored keys and the ``(key, value, source)`` rows of the values
        filled are appended, in the order read.

    Examples
    --------
    >>> notes, ignored, defaults = [], [], []
    >>> sh = read_zero_optimization({"zero_optimization": {"stage": 3, "offload_param":
    ...     {"device": "cpu"}}}, None, notes, ignored, defaults)
    >>> sh["zero_stage"], sh["offload_param"], sh["overlap_comm"]
    (3, 'cpu', True)
    """
    zero = deepspeed_object(data.get("zero_optimization", {}), "zero_optimization")
    sh = _zero_values(zero, defaults)
    for part, old in (("offload_optimizer", "cpu_offload"), ("offload_param", "cpu_offload_param")):
        _read_offload(zero, part, old, sh, notes, ignored)
    if sh["offload_param"] != "none" and sh["zero_stage"] != 3:
        raise InvalidValueError("offload_param needs ZeRO stage 3 (DeepSpeed)")
    if "nvme" in (sh["offload_param"], sh["offload_optimizer"]):
        notes.append("offload to NVMe counted as offload to CPU memory: the GPU holds the same")
    if hidden_size is not None:
        resolve_hidden_autos(sh, hidden_size, defaults)

    # what the ZeRO keys given change, said once each (stage-3 keys only under stage 3)
    for key in zero:
        _note_zero_key(key, zero[key], sh, notes, ignored, defaults)
    return sh


def _zero_values(zero: dict, defaults: list) -> dict:
    """The stage and the keys of :data:`ZERO_DEFAULTS`, typed, DeepSpeed's default where absent."""
    sh = {}
    stage = zero.get("stage", 0)
    sh["zero_stage"] = deepspeed_count(stage, "zero_optimization.stage", 0, 3)
    for key, default in ZERO_DEFAULTS.items():
        if key == "stage":
            continue
        alias = key[len("stage3_"):] if key.startswith("stage3_") else None
        v = zero.get(key, zero.get(alias, default) if alias else default)
        if v == "auto" and key in HIDDEN_AUTO_KEYS:
            pass                                    # filled from the hidden size later
        elif v == "auto":
            # DeepSpeedConfigModel.__init__ drops "auto" (no Trainer fills this key)
            v = default
            defaults.append((f"zero_optimization.{key}", v, 'DeepSpeed config "auto" that no '
                             "Hugging Face code fills: DeepSpeed drops it and keeps its default "
                             "(runtime/config_utils.py)"))
        elif key in _ZERO_BOOL:
            v = None if v is None else deepspeed_flag(v, f"zero_optimization.{key}")
        else:
            v = deepspeed_count(v, f"zero_optimization.{key}", 0, 2**62, "parameters")
        sh[key] = v
    if sh["overlap_comm"] is None:   # zero/config.py:overlap_comm_valid
        sh["overlap_comm"] = sh["zero_stage"] == 3
        defaults[:] = [(k, sh["overlap_comm"], why) if k == "zero_optimization.overlap_comm"
                       else (k, v, why) for k, v, why in defaults]
    return sh


def _read_offload(zero: dict, part: str, old: str, sh: dict, notes: list, ignored: list):
    """Set ``sh[part]`` to the offload device of ``part`` (or of its deprecated switch ``old``)."""
    sec = zero.get(part)
    if sec is None and zero.get(old) is not None:
        # the deprecated switches: new_param_fn makes {"device": "cpu"} when true
        sec = {"device": "cpu"} if deepspeed_flag(zero[old], f"zero_optimization.{old}") else None
    if sec is None:
        sh[part] = "none"
        return
    deepspeed_object(sec, f"zero_optimization.{part}")
    dev = sec.get("device", "none")
    if dev not in _OFFLOAD_DEVICES:
        raise InvalidValueError(f"DeepSpeed zero_optimization.{part}.device must be one of "
                                f"{', '.join(_OFFLOAD_DEVICES)}, got {dev!r:.40}")
    sh[part] = dev
    ignored += [f"zero_optimization.{part}.{k}" for k in sec if k not in ("device", "ratio")]
    if part == "offload_optimizer":
        ratio = sec.get("ratio", 1.0)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise InvalidValueError("offload_optimizer.ratio must be between 0 and 1")
        if ratio < 1 and sh["zero_stage"] != 3:   # zero/config.py:offload_ratio_check
            raise InvalidValueError("partial optimizer offload (ratio < 1) needs ZeRO stage 3")
        sh["offload_optimizer_ratio"] = ratio
        if ratio < 1 and dev != "none":
            notes.append(f"offload_optimizer.ratio {ratio} read, not modelled: memsym "
                         "offloads the whole optimizer state")


def _note_zero_key(key: str, value, sh: dict, notes: list, ignored: list, defaults: list):
    """Say once what the ZeRO key ``key`` given changes, or list it as ignored."""
    # stage3_* keys may be spelled without the prefix (their pydantic aliases)
    canon = "stage3_" + key if "stage3_" + key in {**ZERO_DEFAULTS, **NOTED_ZERO} else key
    if key in ("stage", "overlap_comm") or key in _OFFLOAD_KEYS:
        return
    if canon == "reduce_bucket_size" and sh["zero_stage"] == 3:
        # ZeRO-1/2 and ZeRO-3's prefetch feed memsym's bucket terms (sharding_buckets);
        # ZeRO-3's own gradient bucket has none beyond the gathered layer's gradients
        notes.append(f"zero_optimization.reduce_bucket_size = {short(sh[canon])} read: "
                     "ZeRO-3's gradient bucket has no term in memsym beyond the largest "
                     "layer's gradients")
        return
    if canon in ("reduce_bucket_size", "stage3_prefetch_bucket_size"):
        return
    if canon not in NOTED_ZERO:
        if canon not in ZERO_DEFAULTS:
            ignored.append(f"zero_optimization.{key}")
        return
    if canon in ZERO_DEFAULTS:
        value = sh[canon]                       # typed above
    elif value == "auto":
        # DeepSpeedConfigModel.__init__ drops "auto": DeepSpeed's default, what memsym counts
        defaults.append((f"zero_optimization.{key}", "DeepSpeed's default", 'DeepSpeed '
                         'config "auto" that no Hugging Face code fills: dropped by '
                         "DeepSpeed (runtime/config_utils.py)"))
        return
    elif key in ("zero_hpz_partition_size", "mics_shard_size"):
        value = deepspeed_count(value, f"zero_optimization.{key}", -1, MAX_GPUS, "gpus")
    elif key == "stage3_model_persistence_threshold" or key == "model_persistence_threshold":
        value = deepspeed_count(value, f"zero_optimization.{key}", 0, 2**62, "parameters")
    elif key == "zenflow":
        if value is not None:
            deepspeed_object(value, "zero_optimization.zenflow")
    else:
        value = deepspeed_flag(value, f"zero_optimization.{key}")
    if _changes_memory(canon, value, sh["zero_stage"]):
        shown = "{...}" if isinstance(value, dict) else short(value)
        notes.append(f"zero_optimization.{key} = {shown} read: {NOTED_ZERO[canon]}")


def _changes_memory(key, value, stage) -> bool:
    """Whether a noted ZeRO key, as given, departs from what memsym counts."""
    if key.startswith("stage3_") or key in ("sub_group_size",):
        return stage == 3
    if key in ("zero_hpz_partition_size",):
        return value not in (0, 1)
    if key == "mics_shard_size":
        return value not in (-1, 0)
    if key in ("contiguous_gradients", "reduce_scatter"):
        return value is False
    if key == "allgather_bucket_size":
        return stage in (1, 2)
    return bool(value)
