"""The weights' dtype of a pasted Hugging Face Trainer launch and its checkpoint's config.json.

Shared by the launch's plain-DDP job (:mod:`memsym.cli.hf_launch`) and its FSDP job
(:mod:`memsym.cli.hf_fsdp_launch`): run_clm.py's ``--dtype``, else the checkpoint's own dtype
that ``from_pretrained(dtype="auto")`` loads (:func:`weights_dtype`), and the config.json
read once for it and for the model type (:func:`checkpoint_config`).
"""

from __future__ import annotations

import os

from ..errors import InvalidValueError
from ..readers.hf_trainer import load_dtype
from ..readers.hf_trainer_args import RUN_CLM

__all__ = ["DTYPES", "DTYPE_NAMES", "checkpoint_config", "weights_dtype"]

#: The weights' dtype (run_clm.py's --dtype choices, ModelArguments.dtype, or a checkpoint's
#: config.json dtype) -> memsym's precision of the parameters.
DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
#: memsym's precision -> torch's dtype name (in the notes).
DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def checkpoint_config(model) -> dict:
    """The model's config.json (a directory, a file or a Hub id), {} for a preset.

    Examples
    --------
    >>> checkpoint_config("llama3-8b"), checkpoint_config(None)
    ({}, {})
    """
    from ..model.hf_fields import read_config_json
    from ..model.hub import hub_config_path, is_hub_spelling, parse_hub_id

    if model is None:
        return {}
    if model.lower().endswith(".json") or os.path.exists(model):
        return read_config_json(model)[0]
    if is_hub_spelling(model):
        return read_config_json(hub_config_path(parse_hub_id(model)))[0]
    return {}


def weights_dtype(r, what: str = "plain DDP") -> tuple:
    """(the dtype the model is loaded in, how the launch says it): run_clm.py's ``--dtype``
    (``ModelArguments.dtype``, choices auto, bfloat16, float16, float32; passed to
    ``from_pretrained(dtype=...)``, transformers 00d481d18f run_clm.py ``main``), else
    ``"auto"`` (transformers 5.25.0 modeling_utils.py:4236-4237), which takes the checkpoint's
    config.json ``dtype`` (``torch_dtype`` in older files: configuration_utils.py:440-442;
    modeling_utils.py:830-832); a checkpoint whose config.json names none is read from its
    weights (:835-845), which memsym does not open: refused in one line.

    Parameters
    ----------
    r : HfTrainerLaunch
        The launch read (its default ``dtype`` is added to ``r.defaults`` when taken).
    what : str
        The job named in a refusal (``"plain DDP"``, ``"FSDP without --bf16 / --fp16"``).

    Examples
    --------
    >>> from memsym.readers.hf_trainer import HfTrainerLaunch
    >>> weights_dtype(HfTrainerLaunch(values={"dtype": ["bfloat16"]}))
    ('bfloat16', '--dtype bfloat16')
    """
    given = load_dtype(r)
    if given is not None and given != "auto":
        return given, f"--dtype {given[:20]}"
    if given is None:
        r.defaults.append(("dtype", "auto", f"{RUN_CLM}: ModelArguments.dtype default None, "
                           'which from_pretrained reads as "auto" (transformers 5.25.0 '
                           "modeling_utils.py:4236-4237)"))
    if r.model is None:
        raise InvalidValueError(f"{what} without --dtype or --model_name_or_path: the weights' "
                                "dtype is unknown; give run_clm.py's --dtype")
    cfg = checkpoint_config(r.model)     # a preset: {}, no checkpoint to read a dtype from
    dtype = cfg.get("dtype") if cfg.get("dtype") is not None else cfg.get("torch_dtype")
    if not isinstance(dtype, str):
        raise InvalidValueError(
            f"{what} without --dtype: from_pretrained loads {r.model[:60]}'s own dtype "
            '(dtype "auto", transformers 5.25.0 modeling_utils.py:830-845), which memsym reads '
            "only from a config.json's dtype or torch_dtype (none here); give run_clm.py's "
            "--dtype (float32, bfloat16 or float16)")
    return dtype, f'no --dtype: config.json dtype {dtype[:20]}, loaded as "auto"'
