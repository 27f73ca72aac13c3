"""The words of a pasted Megatron-Bridge command, before any recipe is read: run_recipe.py's
convenience options and switches, Hydra-style ``section.field=value`` overrides read as
literals (never evaluated) with the config sections they may name, and the world size a
torchrun launcher's words give.

:mod:`memsym.readers.bridge` applies the overrides to a recipe; the command line
(:mod:`memsym.cli.reading`) sorts a pasted command's words with these tables.

Sources: Megatron-Bridge ``scripts/training/run_recipe.py`` at ``067f987df0``
(``COMMON_OVERRIDE_FIELDS``, ``_build_parser``); PyTorch ``torch/distributed/run.py``
(``get_args_parser``).
"""

from __future__ import annotations

import re

from ..errors import InvalidValueError
from ..limits import BRIDGE_MAX_VALUE_CHARS as _MAX_VALUE
from ._bridge_recipes import SECTION_FIELDS
from ._values import MAX_GPUS

__all__ = ["SECTIONS", "RUN_RECIPE_OPTIONS", "RUN_RECIPE_FLAGS", "looks_like_override",
           "parse_override", "launcher_world_size"]

#: ConfigContainer's sections (training/config.py:965-1010): an override naming a field of one
#: that memsym does not read is ignored (listed); another section, or a name that is no field of
#: its section's config (:data:`memsym.readers._bridge_recipes.SECTION_FIELDS`), is refused.
SECTIONS = tuple(SECTION_FIELDS) + ("env_vars",)

#: run_recipe.py's convenience options (``COMMON_OVERRIDE_FIELDS`` and their short spellings,
#: ``_build_parser``) -> the override each is converted to; ``None``: read and not modelled.
RUN_RECIPE_OPTIONS = {
    "-tp": "model.tensor_model_parallel_size", "--tensor_model_parallel_size":
    "model.tensor_model_parallel_size", "-pp": "model.pipeline_model_parallel_size",
    "--pipeline_model_parallel_size": "model.pipeline_model_parallel_size",
    "-cp": "model.context_parallel_size", "--context_parallel_size": "model.context_parallel_size",
    "-vp": "model.virtual_pipeline_model_parallel_size",
    "--virtual_pipeline_model_parallel_size": "model.virtual_pipeline_model_parallel_size",
    "-ep": "model.expert_model_parallel_size",
    "--expert_model_parallel_size": "model.expert_model_parallel_size",
    "-etp": "model.expert_tensor_parallel_size",
    "--expert_tensor_parallel_size": "model.expert_tensor_parallel_size",
    "-gb": "train.global_batch_size", "--global_batch_size": "train.global_batch_size",
    "-mb": "train.micro_batch_size", "--micro_batch_size": "train.micro_batch_size",
    "-sl": "dataset.seq_length", "--seq_length": "dataset.seq_length",
    "-ms": "train.train_iters", "--max_steps": "train.train_iters",
    "--lr": "optimizer.lr", "--min_lr": "optimizer.min_lr", "--warmup_iters": "scheduler.lr_warmup_iters",
    "--pretrained_checkpoint": "checkpoint.pretrained_checkpoint",
    "--save_dir": "checkpoint.save", "--load_dir": "checkpoint.load",
    "--save_interval": "checkpoint.save_interval",
    "--mode": None, "--dataset": None, "--step-func": None, "--step_func": None,
}

#: run_recipe.py's switches (``_build_parser``'s store_true options, run_recipe.py:257-259):
#: ``--deterministic`` is read (:func:`read_bridge_recipe`), the others change no memory.
RUN_RECIPE_FLAGS = frozenset({"--deterministic", "--dry-run", "--dry_run", "--dump-env",
                              "--dump_env"})

_OVERRIDE = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,99})((?:\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,4})=(.*)",
                       re.S)
_INT = re.compile(r"[+-]?[0-9]{1,19}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,30}\.[0-9]{0,30}|\.[0-9]{1,30}|[0-9]{1,30})(?:[eE][+-]?[0-9]{1,3})?")


def looks_like_override(word: str) -> bool:
    """Whether ``word`` is a ``section.field=value`` override (a dotted name before ``=``)."""
    m = _OVERRIDE.fullmatch(word.lstrip("+~"))
    return bool(m and m.group(2))


def _scalar(text: str):
    t = text.strip()
    low = t.lower()
    # Hydra's override grammar's BOOL, true / false in any case (hydra/grammar/Override.g4),
    # not the YAML words of megatron_userbuffers nor string_to_bool's (hf_trainer_args)
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~", ""):
        return None
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    if _INT.fullmatch(t):
        return int(t)
    if _FLOAT.fullmatch(t):
        return float(t)
    return t


def parse_override(word: str) -> tuple:
    """``(key, value)`` of one ``section.field=value`` override, the value read as a literal.

    Examples
    --------
    >>> parse_override("model.tensor_model_parallel_size=4")
    ('model.tensor_model_parallel_size', 4)
    >>> parse_override("model.sequence_parallel=True"), parse_override("model.x=[1, 2]")
    (('model.sequence_parallel', True), ('model.x', [1, 2]))
    >>> parse_override("mixed_precision=bf16_with_fp8_current_scaling_mixed")
    ('mixed_precision', 'bf16_with_fp8_current_scaling_mixed')
    """
    m = _OVERRIDE.fullmatch(word.lstrip("+~"))
    if m is None:
        raise InvalidValueError(f"{word[:60]!r} is not a Bridge override: give section.field=value "
                                "(e.g. model.tensor_model_parallel_size=4)")
    key, text = m.group(1) + m.group(2), m.group(3)
    if len(text) > _MAX_VALUE:
        raise InvalidValueError(f"{key}: a value longer than {_MAX_VALUE} characters")
    t = text.strip()
    if t.startswith("["):
        if not t.endswith("]") or "[" in t[1:-1] or "]" in t[1:-1]:
            raise InvalidValueError(f"{key}={t[:40]}: a list is [a, b, ...] (one level)")
        inner = t[1:-1].strip()
        return key, [_scalar(x) for x in inner.split(",")] if inner else []
    return key, _scalar(t)


#: torchrun's options (torch/distributed/run.py get_args_parser) a pasted ``torchrun ...
#: run_recipe.py`` carries: the two that fix the world size, and the others (no effect here).
_TORCHRUN_WORLD = {"--nproc_per_node": "n", "--nproc-per-node": "n", "--nnodes": "nodes",
                   "--world-size": "world"}
_TORCHRUN_OTHER = frozenset({"--node_rank", "--node-rank", "--master_addr", "--master-addr",
                             "--master_port", "--master-port", "--rdzv_backend", "--rdzv-backend",
                             "--rdzv_endpoint", "--rdzv-endpoint", "--rdzv_id", "--rdzv-id",
                             "--max_restarts", "--max-restarts", "--standalone"})


def launcher_world_size(words) -> int | None:
    """The world size the launcher words of a pasted Bridge command give (``WORLD_SIZE=N``
    as ``--world-size N``, or torchrun's ``--nproc_per_node`` x ``--nnodes``), None if none;
    any other argument is refused (a Bridge job takes overrides, not Megatron-LM arguments).

    >>> launcher_world_size(["--nproc_per_node", "8", "--nnodes", "2", "--master_port", "1"])
    16
    """
    got, i = {}, 0
    while i < len(words):
        name, eq, inline = words[i].partition("=")
        if name == "--standalone":
            i += 1
            continue
        if name not in _TORCHRUN_WORLD and name not in _TORCHRUN_OTHER:
            raise InvalidValueError(f"{name[:60]}: a Megatron-Bridge job takes section.field=value "
                                    "overrides, not Megatron-LM arguments")
        value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
        i += 1 if eq else 2
        if name in _TORCHRUN_WORLD:
            if not _INT.fullmatch(value) or not 1 <= int(value) <= MAX_GPUS:
                raise InvalidValueError(f"{name} {value[:20]!r}: a Bridge job needs a whole "
                                        "number of GPUs (or give --world-size N)")
            got[_TORCHRUN_WORLD[name]] = int(value)
    if "world" in got:
        return got["world"]
    return got["n"] * got.get("nodes", 1) if "n" in got else None
