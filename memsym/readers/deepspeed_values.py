"""DeepSpeed's typed config values and where Hugging Face fills its ``"auto"``.

The whole numbers, booleans and sections of a DeepSpeed config are checked as DeepSpeed's pydantic
fields check them (DeepSpeed 0.19.6, deepspeedai/DeepSpeed ``edaa722126``,
``runtime/config_utils.py``), with messages that name the key; shared by
:mod:`memsym.readers.deepspeed` and :mod:`memsym.readers.deepspeed_zero`.
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..limits import check_limit
from ..text import short
from ..values import flag
from ._values import MAX_BATCH

__all__ = ["deepspeed_count", "deepspeed_flag", "deepspeed_object", "HF_TRAINER",
           "HF_ACCELERATE"]

#: Where the Hugging Face Trainer fills ``"auto"``: ``HfTrainerDeepSpeedConfig``'s
#: ``trainer_config_process`` (batch, accumulation, fp16/bf16) and ``trainer_config_finalize``
#: (the hidden-size buckets).
HF_TRAINER = ("transformers 3a80c166 src/transformers/integrations/deepspeed.py, "
              "HfTrainerDeepSpeedConfig")
#: Where Accelerate fills them: ``DeepSpeedPlugin.__post_init__`` (gradient_accumulation_steps
#: 1 when absent), ``set_mixed_precision`` and ``set_deepspeed_weakref``, and
#: ``Accelerator._prepare_deepspeed`` (accelerator.py, the same hidden-size expressions).
HF_ACCELERATE = "accelerate 16cb6eb8 src/accelerate/utils/dataclasses.py, DeepSpeedPlugin"


def deepspeed_count(value, key, lo=0, hi=MAX_BATCH, limit=None) -> int:
    """``value`` as a whole number in [lo, hi] [1], or :class:`InvalidValueError` naming ``key``.

    DeepSpeed's pydantic int fields accept integral JSON numbers such as 5e8 (``pp_int``);
    ``limit`` names a :mod:`memsym.limits` limit checked first.

    Examples
    --------
    >>> deepspeed_count(5e8, "reduce_bucket_size", 0, 2**62)
    500000000
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidValueError(f"DeepSpeed {key} must be a whole number, got {value!r:.40}")
    if isinstance(value, float):
        if not value.is_integer():
            raise InvalidValueError(f"DeepSpeed {key} must be a whole number, got {value!r}")
        value = int(value)
    if limit is not None:       # memsym.limits: a documented limit, checked before any work
        check_limit(limit, value, key)
    if not lo <= value <= hi:

        # short(): a dict given to the API may hold a 5000-digit int, which str() refuses
        raise InvalidValueError(f"DeepSpeed {key} must be between {lo} and {hi}, got "
                                f"{short(value)}")
    return value


def deepspeed_flag(value, key) -> bool:
    """``value`` if a JSON boolean, or :class:`InvalidValueError` naming ``key``.

    Examples
    --------
    >>> deepspeed_flag(True, "bf16.enabled")
    True
    """
    return flag(value, f"DeepSpeed {key}")


def deepspeed_object(value, key, example: str = "") -> dict:
    """``value`` if a JSON object (a section such as ``zero_optimization``), or
    :class:`InvalidValueError` naming ``key`` (and, where given, an ``example`` of one).

    Examples
    --------
    >>> deepspeed_object({"stage": 3}, "zero_optimization")
    {'stage': 3}
    >>> deepspeed_object(3, "optimizer", '{"type": "AdamW"}')
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: DeepSpeed optimizer must be an object such as {"type": "AdamW"}
    """
    if not isinstance(value, dict):
        raise InvalidValueError(f"DeepSpeed {key} must be an object"
                                + (f" such as {example}" if example else ""))
    return value
