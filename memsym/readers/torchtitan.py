"""Read a torchtitan job TOML (v0.2.x) as the layout, training and precision part of a job.

This module owns torchtitan's meaning of the keys of ``torchtitan/config/job_config.py`` at tag
v0.2.2 (pytorch/torchtitan ``73a0e6979d``) and the degree rule of
``torchtitan/distributed/parallel_dims.py:ParallelDims._validate``.  Newer torchtitan moved to
Python configs: :mod:`memsym.readers.torchtitan_python` reads them (with ast) into these keys,
and :func:`torchtitan_settings` checks both forms alike.

The expert tensor parallelism is the one key the two releases spell differently: a v0.2.2
TOML takes ``parallelism.expert_tensor_parallel_degree`` (etp = tp or 1 under EP,
``parallel_dims.py:58-59``), while the newest torchtitan (b5bcd76c6) has no such key (EP
borrows from dp_shard x cp x tp and the experts are split over EP only, which is etp = 1):
its Python config is refused in one line when it names the key.
"""

from __future__ import annotations

import os

from ..errors import InvalidValueError
from ._values import (MAX_BATCH, MAX_BYTES_INPUT, MAX_GPUS, MAX_LAYERS, MAX_SEQ, load_toml,
                      read_bounded)

__all__ = ["read_torchtitan_toml", "torchtitan_settings", "TORCHTITAN_KEYS", "SCHEDULES", "V_SCHEDULES"]

# (section, key) -> (type, default) as job_config.py v0.2.2 declares them.
TORCHTITAN_KEYS = {
    ("parallelism", "data_parallel_replicate_degree"): (int, 1),
    ("parallelism", "data_parallel_shard_degree"): (int, -1),
    ("parallelism", "fsdp_reshard_after_forward"): (str, "default"),
    ("parallelism", "tensor_parallel_degree"): (int, 1),
    ("parallelism", "pipeline_parallel_degree"): (int, 1),
    ("parallelism", "pipeline_parallel_microbatch_size"): (int, 1),
    ("parallelism", "pipeline_parallel_schedule"): (str, "1F1B"),
    ("parallelism", "pipeline_parallel_first_stage_less_layers"): (int, 1),
    ("parallelism", "pipeline_parallel_last_stage_less_layers"): (int, 1),
    ("parallelism", "pipeline_parallel_layers_per_stage"): (int, None),
    ("parallelism", "context_parallel_degree"): (int, 1),
    ("parallelism", "expert_parallel_degree"): (int, 1),
    ("parallelism", "expert_tensor_parallel_degree"): (int, 1),
    ("parallelism", "disable_loss_parallel"): (bool, False),
    ("activation_checkpoint", "mode"): (str, "selective"),
    ("activation_checkpoint", "selective_ac_option"): (str, "2"),
    ("training", "seq_len"): (int, 2048),
    ("training", "local_batch_size"): (int, 8),
    ("training", "global_batch_size"): (int, -1),
    ("training", "dtype"): (str, "float32"),
    ("training", "mixed_precision_param"): (str, "bfloat16"),
    ("training", "mixed_precision_reduce"): (str, "float32"),
    ("training", "enable_cpu_offload"): (bool, False),
    ("compile", "enable"): (bool, False),
    ("compile", "components"): (list, ["model", "loss"]),
    ("model", "name"): (str, "llama3"),
    ("model", "flavor"): (str, "debugmodel"),
    ("model", "converters"): (list, []),
    ("quantize.linear.float8", "enable_fsdp_float8_all_gather"): (bool, False),
    ("quantize.linear.float8", "precompute_float8_dynamic_scale_for_fsdp"): (bool, False),
    ("quantize.linear.float8", "recipe_name"): (str, None),
}
_CHOICES = {
    ("parallelism", "fsdp_reshard_after_forward"): ("default", "always", "never"),
    ("activation_checkpoint", "mode"): ("selective", "full", "memory_budget", "none"),
    ("training", "dtype"): ("bfloat16", "float32"),
    ("training", "mixed_precision_param"): ("bfloat16", "float32"),
    ("training", "mixed_precision_reduce"): ("float32",),
    ("quantize.linear.float8", "recipe_name"): ("tensorwise", "rowwise", "rowwise_with_gw_hp"),
}
#: torch.distributed.pipelining get_schedule_class (names case-insensitive): the concrete
#: schedules, single-stage first; the V schedules place a rank's two stages as r, 2p-1-r
SCHEDULES = ("1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble",
             "ZBVZeroBubble", "DualPipeV")
V_SCHEDULES = ("ZBVZeroBubble", "DualPipeV")
#: keys that set the pipeline split torchtitan would otherwise generate (not read: the split
#: memsym counts is the generated one, said in the notes when one of them is given)
_SPLIT_KEYS = ("parallelism.module_fqns_per_model_part",
               "parallelism.pipeline_parallel_split_points")


def _flatten(data, prefix="", depth=0):
    # sections nest ([quantize.linear.float8]); a leaf is any non-table value
    if depth > 8:
        raise InvalidValueError("torchtitan TOML nested too deeply")
    for k, v in data.items():
        name = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            yield from _flatten(v, name, depth + 1)
        else:
            sec, _, key = name.rpartition(".")
            yield sec, key, v


def read_torchtitan_toml(source, world_size: int | None = None) -> dict:
    """A torchtitan v0.2.x job TOML as plain data: ``layout``, ``training``, ``precision``.

    ``data_parallel_shard_degree = -1`` takes the leftover ranks (``ParallelDims._validate``):

    .. math:: d_{\\text{shard}} = \\frac{W}{d_{\\text{rep}}\\,c\\,t\\,p}, \\qquad
              d_{\\text{rep}}\\,d_{\\text{shard}}\\,c\\,t\\,p = W

    Parameters
    ----------
    source : str or path
        A path to the TOML file, or its text.
    world_size : int, optional
        W [GPUs]; needed when a degree is -1.

    Returns
    -------
    dict
        ``layout`` (dp_replicate, dp_shard, t, p, c, e, t_e, d, world_size,
        fsdp_reshard_after_forward as torchtitan resolves "default"), ``training`` (seq_len
        [tokens], local/global batch [sequences], activation checkpointing, whether the loss
        is compiled), ``precision``
        (param/reduce dtypes, float8), ``model`` (name, flavor), ``ignored`` and ``notes``.

    References
    ----------
    torchtitan v0.2.2 ``torchtitan/config/job_config.py``, ``distributed/parallel_dims.py``,
    ``models/llama3/infra/parallelize.py`` (reshard_after_forward "default" = not PP).

    Examples
    --------
    >>> c = read_torchtitan_toml('[parallelism]\\ntensor_parallel_degree = 8\\n'
    ...                          '[training]\\nlocal_batch_size = 2\\nseq_len = 8192\\n', 128)
    >>> c["layout"]["dp_shard"], c["training"]["global_batch_size"], c["training"]["ac_mode"]
    (16, 32, 'selective')
    """
    text = source
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source
                                           and "=" not in source):
        text = read_bounded(source, "torchtitan TOML")
    if not isinstance(text, str):
        raise InvalidValueError("a torchtitan config is a path or TOML text")
    if len(text) > MAX_BYTES_INPUT:
        raise InvalidValueError(f"torchtitan TOML larger than {MAX_BYTES_INPUT} bytes")
    # nesting, number lengths, dotted keys and value counts are checked on the text first
    data = load_toml(text, "torchtitan TOML")
    return torchtitan_settings(_flatten(data), world_size)


def torchtitan_settings(pairs, world_size: int | None = None, notes=()) -> dict:
    """The plain data of :func:`read_torchtitan_toml` from ``(section, key, value)`` triples in
    the v0.2 TOML's key space (the Python-config reader translates its keys into it), with
    torchtitan's types, choices and degree rule checked.

    Parameters
    ----------
    pairs : iterable of (str, str, object)
        ``(section, key, value)`` triples.
    world_size : int, optional
        The number of GPUs G [GPUs].
    notes : sequence of str
        Notes already made by the caller.

    Examples
    --------
    >>> c = torchtitan_settings([("parallelism", "tensor_parallel_degree", 2)], 4)
    >>> c["layout"]["dp_shard"], c["layout"]["t"]
    (2, 2)
    """
    notes = list(notes)
    values, ignored = _typed_values(pairs)
    rep, shard, t, p, c, e, t_e, world_size = _degrees(values, world_size, notes)
    reshard = _value(values, "parallelism", "fsdp_reshard_after_forward")
    # models/llama3/infra/parallelize.py: "default" reshards after forward unless PP is used
    resolved = {"always": True, "never": False, "default": p == 1}[reshard]
    d = rep * shard
    local, gbs = _batch_sizes(values, d)
    seq = _value(values, "training", "seq_len")
    if not 1 <= seq <= MAX_SEQ:
        raise InvalidValueError(f"torchtitan training.seq_len must be between 1 and {MAX_SEQ}")
    schedule, less, per_stage, pp_mbs = _pipeline_settings(values, p, local, ignored, notes)
    compiled_loss = _compiled_loss(values)
    converters = _value(values, "model", "converters")
    float8 = any(x in ("float8", "quantize.linear.float8") for x in converters)
    return {
        "layout": {"dp_replicate": rep, "dp_shard": shard, "t": t, "p": p, "c": c, "e": e,
                   "t_e": t_e, "d": d, "world_size": world_size,
                   "fsdp_reshard_after_forward": resolved,
                   "pipeline_parallel_schedule": schedule,
                   "pipeline_parallel_stage_less_layers": less,
                   "pipeline_parallel_layers_per_stage": per_stage,
                   "pipeline_parallel_microbatch_size": pp_mbs},
        "training": {"seq_len": seq, "local_batch_size": local, "global_batch_size": gbs,
                     "gradient_accumulation_steps": gbs // (local * d),
                     "ac_mode": _value(values, "activation_checkpoint", "mode"),
                     "selective_ac_option": _value(values, "activation_checkpoint", "selective_ac_option"),
                     "enable_cpu_offload": _value(values, "training", "enable_cpu_offload"),
                     "compiled_loss": compiled_loss,
                     # apply_compile: each TransformerBlock under torch.compile
                     "compiled_model": bool(_value(values, "compile", "enable"))
                     and "model" in _value(values, "compile", "components"),
                     # parallel_dims.py loss_parallel_enabled: tp > 1 and not disabled
                     "loss_parallel": not _value(values, "parallelism", "disable_loss_parallel")},
        "precision": {"mixed_precision_param": _value(values, "training", "mixed_precision_param"),
                      "mixed_precision_reduce": _value(values, "training", "mixed_precision_reduce"),
                      "dtype": _value(values, "training", "dtype"), "float8": float8,
                      "float8_recipe": _value(values, "quantize.linear.float8", "recipe_name"),
                      "enable_fsdp_float8_all_gather":
                          _value(values, "quantize.linear.float8", "enable_fsdp_float8_all_gather")},
        "model": {"name": _value(values, "model", "name"), "flavor": _value(values, "model", "flavor")},
        "ignored": tuple(ignored), "notes": tuple(notes),
    }


def _typed_values(pairs):
    """The values of the known keys among ``(section, key, value)`` triples, with torchtitan's
    types and choices checked, and the names of the unknown keys: ``(values, ignored)``."""
    values, ignored = {}, []
    for sec, key, v in pairs:
        spec = TORCHTITAN_KEYS.get((sec, key))
        if spec is None:
            ignored.append(f"{sec}.{key}" if sec else key)
            continue
        typ = spec[0]
        ok = isinstance(v, typ) and not (typ is int and isinstance(v, bool))
        if typ is str and key == "selective_ac_option" and isinstance(v, int) and not isinstance(v, bool):
            v, ok = str(v), True
        if not ok:
            raise InvalidValueError(f"torchtitan [{sec}] {key} must be a {typ.__name__}, got "
                                    f"{v!r:.40}")
        ch = _CHOICES.get((sec, key))
        if ch and v not in ch:
            raise InvalidValueError(f"torchtitan [{sec}] {key} must be one of {', '.join(ch)}, "
                                    f"got {v!r:.40}")
        values[(sec, key)] = v
    return values, ignored


def _value(values, sec, key):
    """A key's value as given, else job_config.py's default."""
    return values.get((sec, key), TORCHTITAN_KEYS[(sec, key)][1])


def _degree(values, key):
    """A parallelism degree, checked between 1 and MAX_GPUS (-1 allowed for the shard)."""
    v = _value(values, "parallelism", key)
    if not (1 <= v <= MAX_GPUS) and not (key == "data_parallel_shard_degree" and v == -1):
        raise InvalidValueError(f"torchtitan parallelism.{key} must be >= 1, got {v}")
    return v


def _degrees(values, world_size, notes):
    """The degrees ``(rep, shard, t, p, c, e, t_e, world_size)`` by ParallelDims' rule: a shard
    degree -1 takes the leftover GPUs (noted), and the product must be the world size
    (the product when no world size is given)."""
    rep = _degree(values, "data_parallel_replicate_degree")
    shard = _degree(values, "data_parallel_shard_degree")
    t, p = _degree(values, "tensor_parallel_degree"), _degree(values, "pipeline_parallel_degree")
    c, e = _degree(values, "context_parallel_degree"), _degree(values, "expert_parallel_degree")
    t_e = _degree(values, "expert_tensor_parallel_degree")
    if world_size is not None:
        if isinstance(world_size, bool) or not isinstance(world_size, int) or \
                not 1 <= world_size <= MAX_GPUS:
            raise InvalidValueError(f"world size must be a whole number of GPUs, got {world_size!r}")
    if shard == -1:
        if world_size is None:
            raise InvalidValueError("data_parallel_shard_degree = -1 takes the leftover GPUs: give "
                                    "the world size")
        shard = world_size // (rep * c * t * p)
        if shard < 1:
            raise InvalidValueError(f"world size {world_size} leaves no GPUs for "
                                    f"data_parallel_shard_degree (rep*cp*tp*pp = {rep * c * t * p})")
        notes.append(f"data_parallel_shard_degree -1: {shard} (the leftover GPUs)")
    product = rep * shard * c * t * p
    if world_size is None:
        world_size = product
    elif product != world_size:   # parallel_dims.py: the product must equal WORLD_SIZE
        raise InvalidValueError(f"torchtitan degrees dp_replicate {rep} x dp_shard {shard} x cp {c} "
                                f"x tp {t} x pp {p} = {product} != world size {world_size}")
    if e > 1 and t_e not in (t, 1):     # parallel_dims.py:58-59 (v0.2.2)
        raise InvalidValueError("torchtitan supports expert_tensor_parallel_degree = TP or 1")
    if e > 1 and (shard * c * t) % (t_e * e):
        # build_mesh (v0.2.2 parallel_dims.py:138, 154-157): the expert mesh (pp,
        # dp_replicate, efsdp, ep, etp) with efsdp = dp_shard*cp*tp // (etp*ep) covers the
        # world only when the division is whole
        raise InvalidValueError(f"torchtitan expert_parallel_degree {e} x "
                                f"expert_tensor_parallel_degree {t_e} must divide "
                                f"dp_shard x cp x tp = {shard * c * t}")
    # without EP the experts are tensor-parallel over the TP mesh (llama4/infra/parallelize.py
    # apply_moe_ep_tp: experts_plan = TensorParallel() when ep_mesh is None): etp is unused
    return rep, shard, t, p, c, e, (t_e if e > 1 else t), world_size


def _batch_sizes(values, d):
    """The local and global batch sizes [sequences], checked (global -1: local x d)."""
    local = _value(values, "training", "local_batch_size")
    if not 1 <= local <= MAX_BATCH:
        raise InvalidValueError(f"torchtitan training.local_batch_size must be >= 1, got {local}")
    gbs = _value(values, "training", "global_batch_size")
    if gbs == -1:   # job_config.py: defaults to local_batch_size * data-parallel degree
        gbs = local * d
    elif gbs < 1 or gbs % (local * d):
        raise InvalidValueError(f"torchtitan global_batch_size {gbs} must be a multiple of "
                                f"local_batch_size x dp = {local * d}")
    return local, gbs


def _pipeline_settings(values, p, local, ignored, notes):
    """The pipeline keys, checked: ``(schedule, less, per_stage, microbatch_size)``, the
    schedule's name as torch spells it, and a note for each split key given when p > 1."""
    schedule = {x.lower(): x for x in SCHEDULES}.get(
        _value(values, "parallelism", "pipeline_parallel_schedule").lower())
    if schedule is None:
        raise InvalidValueError("torchtitan pipeline_parallel_schedule must be one of "
                                f"{', '.join(SCHEDULES)} (any case), got "
                                f"{_value(values, 'parallelism', 'pipeline_parallel_schedule')!r:.40}")
    less = tuple(_value(values, "parallelism", f"pipeline_parallel_{end}_stage_less_layers")
                 for end in ("first", "last"))
    if any(not 0 <= w <= MAX_LAYERS for w in less):
        raise InvalidValueError(f"torchtitan pipeline_parallel_first/last_stage_less_layers must "
                                f"be between 0 and {MAX_LAYERS}, got {less}")
    notes += [f"{k} given: memsym counts torchtitan's generated pipeline split"
              for k in _SPLIT_KEYS if k in ignored and p > 1]
    per_stage = _value(values, "parallelism", "pipeline_parallel_layers_per_stage")
    if per_stage is not None and not 1 <= per_stage <= MAX_LAYERS:
        raise InvalidValueError(f"torchtitan pipeline_parallel_layers_per_stage must be between "
                                f"1 and {MAX_LAYERS}, got {per_stage}")
    pp_mbs = _value(values, "parallelism", "pipeline_parallel_microbatch_size")
    if not 1 <= pp_mbs <= MAX_BATCH:
        raise InvalidValueError(f"torchtitan pipeline_parallel_microbatch_size must be between 1 "
                                f"and {MAX_BATCH}, got {pp_mbs}")
    if p > 1 and local % pp_mbs:   # pipeline_parallel.py build_pipeline_schedule
        raise InvalidValueError(f"torchtitan local_batch_size {local} must be divisible by "
                                f"pipeline_parallel_microbatch_size {pp_mbs}")
    return schedule, less, per_stage, pp_mbs


def _compiled_loss(values):
    """Whether the loss is compiled: [compile] enable with "loss" among the components."""
    components = _value(values, "compile", "components")
    if len(components) > 2 or any(x not in ("model", "loss") for x in components):
        raise InvalidValueError("torchtitan [compile] components must list \"model\" and/or "
                                "\"loss\"")
    # components/loss.py build_cross_entropy_loss: torch.compile(loss_fn) when enabled
    return _value(values, "compile", "enable") and "loss" in components
