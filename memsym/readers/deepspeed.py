"""Read a DeepSpeed config JSON as the layout, training and sharding part of a job.

This module owns DeepSpeed's meaning of its config keys: the batch triple and its consistency
rule, bf16/fp16, and (through :mod:`memsym.readers.deepspeed_zero`) ``zero_optimization``
with the defaults of DeepSpeed 0.19.6 (deepspeedai/DeepSpeed ``edaa722126``:
``runtime/config.py``, ``runtime/zero/config.py``, ``runtime/zero/offload_config.py``,
``runtime/precision_config.py``), and the Hugging Face meaning of ``"auto"``
(:data:`HF_TRAINER`, :data:`HF_ACCELERATE`): the Trainer and Accelerate replace each
``"auto"`` by the value of their own arguments before DeepSpeed reads the config.

Every key is either modelled, read into a note (it changes memory or time but memsym does not
model it, :data:`memsym.readers.deepspeed_notes.NOTED_TOP` and ``NOTED_ZERO``), or listed as ignored (no effect on memory or
time).
"""

from __future__ import annotations

import os

from ..errors import InvalidValueError
from ..limits import check_limit
from ..text import short
from ._values import MAX_BATCH, MAX_BYTES_INPUT, MAX_GPUS, load_json, read_bounded
from .deepspeed_autotp import autotp_data_parallel, read_tensor_parallel
from .deepspeed_notes import NOTED_TOP
from .deepspeed_ulysses import (read_sequence_parallel, ulysses_defaults, ulysses_refusals,
                                ulysses_world)
from .deepspeed_values import (HF_ACCELERATE, HF_TRAINER, deepspeed_count, deepspeed_flag,
                               deepspeed_object)
from .deepspeed_zero import (HIDDEN_AUTO_KEYS, ZERO_DEFAULTS, read_zero_optimization,
                             resolve_hidden_autos)

__all__ = ["read_deepspeed_config", "searched_deepspeed_config", "resolve_hidden_autos",
           "ZERO_DEFAULTS", "HF_TRAINER", "HF_ACCELERATE", "HIDDEN_AUTO_KEYS"]

#: precision sections: the keys that change memory (the rest: loss scaling, no memory)
_DTYPE_KEYS = {"fp16": ("fp16_master_weights_and_grads",),
               "bf16": ("bf16_master_weights_and_grads", "bf16_optimizer_states")}
_TOP_MODELLED = {"train_batch_size", "train_micro_batch_size_per_gpu",
                 "gradient_accumulation_steps", "bf16", "bfloat16", "fp16", "zero_optimization",
                 "data_types", "optimizer", "expert_parallel", "tensor_parallel",
                 "sequence_parallel_size"}
#: DeepSpeed's optimizer names with Adam's two moments (runtime/config.py's *_OPTIMIZER names)
_ADAM_LIKE = {"adam", "adamw", "fusedadam", "cpuadam", "onebitadam", "zerooneadam",
              "lamb", "onebitlamb", "muadam", "muadamw"}
#: Where the Trainer fills the batch and precision "auto"s.
_PROCESS = f"{HF_TRAINER}.trainer_config_process"
_BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu",
               "gradient_accumulation_steps")


def read_deepspeed_config(source, world_size: int | None = None, *,
                          micro_batch_size: int | None = None,
                          gradient_accumulation_steps: int | None = None,
                          precision: str | None = None,
                          hidden_size: int | None = None) -> dict:
    """A DeepSpeed config as plain data: ``layout``, ``training``, ``precision``, ``sharding``.

    The batch triple is completed and checked as ``DeepSpeedConfig._set_batch_related_parameters``
    and ``_batch_assertion`` do:

    .. math:: B_{\\text{train}} = b \\cdot \\text{GAS} \\cdot d

    with d the data-parallel size [GPUs] (DeepSpeed's ``world_size`` divided by model/sequence
    parallelism).  ``"auto"`` values are filled as the Hugging Face Trainer fills them
    (``HfTrainerDeepSpeedConfig.trainer_config_process``) from the job's options:
    ``train_micro_batch_size_per_gpu`` from ``micro_batch_size`` (refused without it),
    ``gradient_accumulation_steps`` from ``gradient_accumulation_steps`` (TrainingArguments'
    default 1), ``train_batch_size`` as b GAS d (refused without d), ``bf16.enabled`` /
    ``fp16.enabled`` from ``precision`` (neither unless given: fp32), and the ZeRO sizes from
    ``hidden_size`` (:func:`resolve_hidden_autos`; left ``"auto"`` without it, for
    :func:`memsym.readers.jobs.deepspeed_job` to fill from the model).  An option given where
    the config has its own value must agree with it, as the Trainer's ``fill_match`` demands.

    Parameters
    ----------
    source : str, path or dict
        A path to the JSON file, its text, or the parsed object.
    world_size : int, optional
        The GPUs [GPUs], DeepSpeed's world size: the data-parallel size d, or t d under AutoTP
        (``tensor_parallel.autotp_size`` t, :func:`memsym.readers.deepspeed_autotp.
        autotp_data_parallel`); without it, derived from the full triple if given.
    micro_batch_size : int, optional
        The Trainer's ``per_device_train_batch_size`` [sequences].
    gradient_accumulation_steps : int, optional
        The Trainer's ``gradient_accumulation_steps`` [1].
    precision : {"bf16", "fp16", "fp32"}, optional
        The Trainer's ``--bf16`` / ``--fp16`` (fp32: neither).
    hidden_size : int, optional
        The model's hidden size, for the hidden-size ``"auto"`` ZeRO sizes.

    Returns
    -------
    dict
        ``layout`` (d; t, AutoTP's ``autotp_size`` or 1; e, AutoEP's ``autoep_size`` when
        enabled), ``training`` (micro_batch_size [sequences], gradient_accumulation_steps,
        global_batch_size [sequences]), ``precision`` (params_dtype, grad_accum_dtype),
        ``optimizer`` (memsym's name), ``sharding`` (zero_stage, offload devices, buckets
        [elements], overlap_comm, stage3_*), ``defaults`` ((key, value, source) per "auto"
        filled), ``ignored`` and ``notes``.

    References
    ----------
    DeepSpeed 0.19.6 ``deepspeed/runtime/config.py``, ``deepspeed/runtime/zero/config.py``;
    ``docs/_tutorials/zero.md`` for the example configs; :data:`HF_TRAINER`,
    :data:`HF_ACCELERATE` for ``"auto"``.

    Examples
    --------
    >>> c = read_deepspeed_config('{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,'
    ...     ' "gradient_accumulation_steps": 2, "bf16": {"enabled": true},'
    ...     ' "zero_optimization": {"stage": 2}}')
    >>> c["layout"]["d"], c["sharding"]["zero_stage"], c["sharding"]["overlap_comm"]
    (8, 2, False)
    >>> c = read_deepspeed_config('{"train_micro_batch_size_per_gpu": "auto", "train_batch_size":'
    ...     ' "auto", "bf16": {"enabled": "auto"}}', 4, micro_batch_size=2, precision="bf16")
    >>> c["training"]["global_batch_size"], c["precision"]["params_dtype"]
    (8, 'bf16')
    """
    data = _load(source)
    notes, ignored, defaults = [], [], []
    world_size, micro_batch_size, gradient_accumulation_steps = _check_options(
        world_size, micro_batch_size, gradient_accumulation_steps, precision)
    t = read_tensor_parallel(data, notes, ignored)
    c = read_sequence_parallel(data, notes)
    # Ulysses: the batch rule's world is the data-parallel size, world / c (ulysses_world)
    world, tb, mb, gas = _read_batch(data, ulysses_world(data, world_size, c, notes),
                                     micro_batch_size, gradient_accumulation_steps, notes,
                                     defaults)
    d = autotp_data_parallel(world, t, notes)
    defaults = ulysses_defaults(defaults, c)
    params, grad_accum = _read_precision(data, precision, notes, ignored, defaults)
    optimizer = _read_optimizer(data, notes, ignored)
    sh = read_zero_optimization(data, hidden_size, notes, ignored, defaults)
    e = _read_expert_parallel(data, notes, ignored)
    if e is not None and t > 1:
        # AutoEP's experts are EP-sharded, not TP-sharded (auto_tp.py:363-365), while memsym
        # splits a DeepSpeed job's experts by t (Framework.expert_tp False)
        raise InvalidValueError(f"expert_parallel with tensor_parallel.autotp_size {t}: AutoEP "
                                "folds its experts beside AutoTP unsplit by TP, which memsym does "
                                "not model (it splits the experts by t); drop one of them")
    _read_top_keys({k: v for k, v in data.items() if c == 1 or k != "data_parallel_size"},
                   notes, ignored)
    ulysses_refusals(c, t, e, sh["zero_stage"])
    return {"layout": {"d": d, "e": e, "t": t, "c": c},
            "training": {"micro_batch_size": mb, "gradient_accumulation_steps": gas,
                         "global_batch_size": tb if t == 1 or d is None else mb * gas * d},
            "precision": {"params_dtype": params, "grad_accum_dtype": grad_accum},
            "optimizer": optimizer, "sharding": sh, "defaults": tuple(defaults),
            "ignored": tuple(ignored), "notes": tuple(notes)}


def searched_deepspeed_config(source, world_size: int | None,
                              global_batch_size: int | None = None):
    """A DeepSpeed config read for a search that varies its micro-batch size, or None.

    Under the Hugging Face Trainer a ``"auto"`` ``train_micro_batch_size_per_gpu`` is the
    ``per_device_train_batch_size`` the user picks (``trainer_config_process``), so a search
    varies it as it varies b for any job; what it holds is the global batch, which must then be
    a number: the config's ``train_batch_size``, else ``global_batch_size`` (refused in one line
    without it, since a ``"auto"`` train batch is b GAS d and changes with every layout)

    .. math:: B = b \\cdot \\text{GAS} \\cdot d \\quad\\text{(held; b, GAS and d searched)}

    Under AutoTP (``tensor_parallel.autotp_size`` t) the train batch counts every GPU while a
    TP group's ranks read the same micro-batches
    (:data:`memsym.readers.deepspeed_autotp.AUTOTP_BATCH`): B is it divided by t.  Under
    Ulysses (``sequence_parallel_size`` c) it already counts the W / c data-parallel ranks
    (:data:`memsym.readers.deepspeed_ulysses.ULYSSES_BATCH`), and so does the stand-in.

    Returns None when the config's micro-batch is a number and no ``global_batch_size`` is
    given (the config is read as ``estimate`` reads it); else ``(config, B, auto)``: the config
    with its batch triple replaced by a stand-in that DeepSpeed's batch rule accepts on
    ``world_size`` GPUs (GAS = 1, b = 1 for ``"auto"`` or the config's own, ``train_batch_size``
    = b d; each searched layout sets its own), B [sequences], and whether b was ``"auto"``.

    Parameters
    ----------
    source : str, path or dict
        The config (:func:`read_deepspeed_config`).
    world_size : int or None
        The GPUs the job is read on [GPUs] (the job's ``--world-size``, else the search's).
    global_batch_size : int, optional
        The global batch [sequences] (per_device_train_batch_size x gradient_accumulation_steps
        x GPUs), needed where ``train_batch_size`` is ``"auto"`` or absent.

    References
    ----------
    :data:`HF_TRAINER` ``.trainer_config_process`` (the batch "auto"s); DeepSpeed 0.19.6
    ``runtime/config.py`` ``_set_batch_related_parameters``, ``_batch_assertion``.

    Examples
    --------
    >>> cfg, B, auto = searched_deepspeed_config({"train_micro_batch_size_per_gpu": "auto",
    ...     "train_batch_size": 64, "gradient_accumulation_steps": "auto"}, 8)
    >>> B, auto, cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"]
    (64, True, 8, 1)
    >>> searched_deepspeed_config({"train_micro_batch_size_per_gpu": 2}, 8) is None
    True
    """
    data = _load(source)
    auto = data.get("train_micro_batch_size_per_gpu") == "auto"
    if not auto and global_batch_size is None:
        return None
    tb = data.get("train_batch_size")
    if tb not in (None, "auto"):
        tb = deepspeed_count(tb, "train_batch_size", 1, limit="global_batch")
        if global_batch_size is not None and global_batch_size != tb:
            raise InvalidValueError(f"--global-batch-size {global_batch_size} contradicts the "
                                    f"DeepSpeed config's train_batch_size {tb}; drop the option "
                                    'or set train_batch_size to "auto"')
    elif global_batch_size is None:
        said = "absent" if tb is None else '"auto"'
        raise InvalidValueError('train_micro_batch_size_per_gpu is "auto" (searched) and '
                                f"train_batch_size is {said}: "
                                "give the global batch held over the layouts, --global-batch-size "
                                "(per_device_train_batch_size x gradient_accumulation_steps x "
                                "GPUs)")
    else:
        tb = deepspeed_count(global_batch_size, "--global-batch-size", 1, limit="global_batch")
    if world_size is None:
        raise InvalidValueError('train_micro_batch_size_per_gpu is "auto": give the GPUs, '
                                "--gpus N or --world-size N")
    world_size = deepspeed_count(world_size, "world size", 1, MAX_GPUS, "gpus")
    t = read_tensor_parallel(data, [], [])
    if tb % t:      # AutoTP: every GPU counted, a TP group's ranks share (AUTOTP_BATCH)
        raise InvalidValueError(f"train batch {tb} is not a multiple of tensor_parallel."
                                f"autotp_size {t} (micro-batch x accumulation x GPUs)")
    tb //= t
    mb = 1 if auto else data.get("train_micro_batch_size_per_gpu")
    mb = 1 if mb is None else deepspeed_count(mb, "train_micro_batch_size_per_gpu", 1,
                                              limit="micro_batch")
    # Ulysses: the batch rule counts world / c ranks (deepspeed_ulysses.ulysses_world)
    ranks = ulysses_world(data, world_size, read_sequence_parallel(data, []), [])
    return {**data, "train_batch_size": mb * ranks, "train_micro_batch_size_per_gpu": mb,
            "gradient_accumulation_steps": 1}, tb, auto


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


def _section(data, key):
    return deepspeed_object(data.get(key, {}), key, '{"enabled": true}')


def _check_options(world_size, micro_batch_size, gradient_accumulation_steps, precision):
    """The job's options, checked: ``(world_size, micro_batch_size, gradient_accumulation_steps)``."""
    if world_size is not None:
        world_size = deepspeed_count(world_size, "world size", 1, MAX_GPUS, "gpus")
    if micro_batch_size is not None:
        micro_batch_size = deepspeed_count(micro_batch_size, "micro-batch size", 1, MAX_BATCH,
                                           "micro_batch")
    if gradient_accumulation_steps is not None:
        gradient_accumulation_steps = deepspeed_count(gradient_accumulation_steps,
                                                      "gradient accumulation steps", 1,
                                                      MAX_BATCH, "microbatches")
    if precision is not None and precision not in ("bf16", "fp16", "fp32"):
        raise InvalidValueError(f"precision {short(precision)}: a DeepSpeed config trains in "
                                "bf16, fp16 or fp32 (its bf16 / fp16 sections)")
    return world_size, micro_batch_size, gradient_accumulation_steps


def _read_batch(data, world_size, micro_batch_size, gradient_accumulation_steps, notes,
                defaults):
    """The data-parallel size and the batch triple ``(d, tb, mb, gas)``, "auto"s filled."""
    autos = {k for k in _BATCH_KEYS if data.get(k) == "auto"}
    tb, mb, gas = (None if k in autos else data.get(k) for k in _BATCH_KEYS)
    tb = None if tb is None else deepspeed_count(tb, "train_batch_size", 1, limit="global_batch")
    mb = None if mb is None else deepspeed_count(mb, "train_micro_batch_size_per_gpu", 1,
                                                 limit="micro_batch")
    gas = None if gas is None else deepspeed_count(gas, "gradient_accumulation_steps", 1,
                                                   limit="microbatches")
    tb, mb, gas = _fill_batch_autos(autos, tb, mb, gas, world_size, micro_batch_size,
                                    gradient_accumulation_steps, defaults)
    d = world_size
    if d is None and None not in (tb, mb, gas):
        if tb % (mb * gas):
            raise InvalidValueError(f"train_batch_size {tb} is not micro-batch {mb} x accumulation "
                                    f"{gas} x the data-parallel size (DeepSpeed's _batch_assertion)")
        d = tb // (mb * gas)
        notes.append(f"data-parallel size {d} from train_batch_size / (micro-batch x accumulation)")
    if d is not None:
        tb, mb, gas = _complete_batch(tb, mb, gas, d)
    elif tb is None and mb is None:
        raise InvalidValueError("DeepSpeed needs train_batch_size or train_micro_batch_size_per_gpu")
    else:
        notes.append("data-parallel size unknown: give the world size to complete the batch")
    # an option given beside a value of the config's own must agree (the Trainer's fill_match
    # collects the mismatch and trainer_config_finalize refuses it)
    for given, value, key, flag in ((micro_batch_size, mb, "train_micro_batch_size_per_gpu",
                                     "--micro-batch-size"),
                                    (gradient_accumulation_steps, gas,
                                     "gradient_accumulation_steps", "--num-microbatches")):
        if given is not None and value is not None and given != value:
            raise InvalidValueError(f"{flag} {given} contradicts the DeepSpeed config's {key} "
                                    f"{value} (the Trainer refuses the mismatch); set it to "
                                    '"auto" or drop the option')
        if given is not None and value is None:
            raise InvalidValueError(f"{flag}: the DeepSpeed config's {key} is not \"auto\" and "
                                    "its batch rule leaves it unknown; give --world-size")
    return d, tb, mb, gas


def _fill_batch_autos(autos, tb, mb, gas, world_size, micro_batch_size,
                      gradient_accumulation_steps, defaults):
    """The batch triple with its ``"auto"`` keys filled as the Trainer fills them."""
    if "train_micro_batch_size_per_gpu" in autos:
        if micro_batch_size is None:
            raise InvalidValueError('train_micro_batch_size_per_gpu is "auto": pass '
                                    "--micro-batch-size (the Trainer's "
                                    "--per_device_train_batch_size)")
        mb = micro_batch_size
        defaults.append(("train_micro_batch_size_per_gpu", mb,
                         f'DeepSpeed config "auto" <- --micro-batch-size ({_PROCESS})'))
    if "gradient_accumulation_steps" in autos:
        gas = 1 if gradient_accumulation_steps is None else gradient_accumulation_steps
        defaults.append(("gradient_accumulation_steps", gas,
                         'DeepSpeed config "auto" <- ' + (
                             "--num-microbatches" if gradient_accumulation_steps is not None
                             else "TrainingArguments.gradient_accumulation_steps default 1")
                         + f" ({_PROCESS})"))
    if "train_batch_size" in autos:
        if world_size is None:
            raise InvalidValueError('train_batch_size is "auto" (micro-batch x accumulation x '
                                    "data-parallel size): pass --world-size")
        if mb is None:
            raise InvalidValueError('train_batch_size is "auto" and the config has no '
                                    "train_micro_batch_size_per_gpu: pass --micro-batch-size")
        gas = 1 if gas is None else gas
        tb = check_limit("global_batch", mb * gas * world_size, "train_batch_size")
        defaults.append(("train_batch_size", tb, 'DeepSpeed config "auto" = micro-batch x '
                         f"accumulation x world size ({_PROCESS})"))
    return tb, mb, gas


def _complete_batch(tb, mb, gas, d):
    """The batch triple completed from two of its values and d, and checked."""
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
    return tb, mb, gas


def _read_precision(data, precision, notes, ignored, defaults):
    """The parameter and gradient-accumulation dtypes ``(params, grad_accum)``."""
    # precision: runtime/precision_config.py, bf16/fp16 {"enabled": false} by default;
    # "bfloat16" is DeepSpeed's older name of the bf16 section (get_bfloat16_config)
    sections = {"bf16": _section(data, "bf16" if "bf16" in data else "bfloat16"),
                "fp16": _section(data, "fp16")}
    enabled = _enabled_dtypes(data, sections, precision, defaults)
    params = "bf16" if enabled["bf16"] else "fp16" if enabled["fp16"] else "fp32"
    if params == "fp32" and precision is None and not any(
            isinstance(k, tuple) and k[0].endswith(".enabled") for k in defaults):
        defaults.append(("precision", "fp32", "DeepSpeed's default: bf16 and fp16 disabled "
                         "(runtime/precision_config.py, enabled: bool = False)"))
    if precision is not None and precision != params:
        raise InvalidValueError(f"--precision {precision} contradicts the DeepSpeed config "
                                f"({params} by its bf16 / fp16 sections; the Trainer refuses the "
                                'mismatch): set "enabled" to "auto" or drop the option')
    for key, sec in sections.items():
        for sub in sec:
            if sub in _DTYPE_KEYS[key]:
                if deepspeed_flag(sec[sub], f"{key}.{sub}") and enabled[key]:
                    notes.append(f"{key}.{sub} read, not modelled: memsym counts fp32 master "
                                 "weights, gradient partition and optimizer states "
                                 "(DeepSpeed's BF16/FP16 master-weight options, "
                                 "runtime/precision_config.py)")
            elif sub != "enabled":
                ignored.append(f"{key}.{sub}")
    dtypes = deepspeed_object(data.get("data_types", {}), "data_types")
    gad = dtypes.get("grad_accum_dtype")
    grad_accum = {None: params, "fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}.get(gad)
    if grad_accum is None:
        raise InvalidValueError(f"DeepSpeed data_types.grad_accum_dtype must be fp32, fp16 or "
                                f"bf16, got {gad!r:.40}")
    if gad is not None and gad != params:
        notes.append(f"data_types.grad_accum_dtype {gad} read, not modelled: memsym counts "
                     "the framework's gradient widths")
    return params, grad_accum


def _enabled_dtypes(data, sections, precision, defaults):
    """Whether each of bf16 and fp16 is enabled, its ``"auto"`` filled from ``precision``."""
    enabled = {}
    other = {"bf16": "fp16", "fp16": "bf16"}.get(precision)
    if other is not None and sections[other].get("enabled") is True:
        # Accelerate's set_mixed_precision refuses the other dtype enabled in the config
        raise InvalidValueError(f"--precision {precision} contradicts the DeepSpeed config, "
                                f"which enables {other} (Accelerate refuses it): drop the option "
                                f'or set {other}.enabled to "auto"')
    for key, sec in sections.items():
        v = sec.get("enabled", False)
        if precision == key and key not in data and (key != "bf16" or "bfloat16" not in data):
            # the Trainer's --bf16 / --fp16 reach DeepSpeed through Accelerate, which adds the
            # missing section (DeepSpeedPlugin.set_mixed_precision: {"enabled": True})
            enabled[key] = True
            defaults.append((f"{key}.enabled", True, f"--precision {precision}: the section "
                             f"added enabled ({HF_ACCELERATE}.set_mixed_precision)"))
        elif v == "auto":
            # trainer_config_process: fp16.enabled <- args.fp16 (amp backend), bf16.enabled <-
            # args.bf16; both False by default (Accelerate's set_mixed_precision the same)
            enabled[key] = precision == key
            defaults.append((f"{key}.enabled", enabled[key], 'DeepSpeed config "auto" <- ' + (
                f"--precision {precision}" if precision is not None else
                f"TrainingArguments.{key} default False") + f" ({_PROCESS})"))
        else:
            enabled[key] = deepspeed_flag(v, f"{key}.enabled")
    if enabled["bf16"] and enabled["fp16"]:
        raise InvalidValueError("DeepSpeed config enables both bf16 and fp16; enable one")
    return enabled


def _read_optimizer(data, notes, ignored) -> str:
    """memsym's name of the config's optimizer: ``adam`` (the default and Adam-like) or ``sgd``."""
    optimizer = "adam"
    opt = data.get("optimizer")
    if opt is not None:
        deepspeed_object(opt, "optimizer", '{"type": "AdamW"}')
        name = opt.get("type", "")
        if not isinstance(name, str):
            raise InvalidValueError(f"DeepSpeed optimizer.type must be a name, got {name!r:.40}")
        if name.lower() == "sgd":
            optimizer = "sgd"
        elif name.lower() not in _ADAM_LIKE:
            notes.append(f"optimizer {short(name)} counted as Adam (two fp32 moments)")
        ignored += [f"optimizer.{k}" for k in opt if k != "type"]
    return optimizer


def _read_expert_parallel(data, notes, ignored):
    """AutoEP's ``autoep_size`` when enabled, else None."""
    # AutoEP (runtime/config.py get_expert_parallel_config -> module_inject/auto_ep_config.py
    # parse_autoep_config: enabled False, autoep_size 1 by default): the routed experts split
    # over autoep_size ranks
    e = None
    ep = data.get("expert_parallel")
    if ep is not None:
        deepspeed_object(ep, "expert_parallel", '{"enabled": true, "autoep_size": 8}')
        if deepspeed_flag(ep.get("enabled", False), "expert_parallel.enabled"):
            e = deepspeed_count(ep.get("autoep_size", 1), "expert_parallel.autoep_size", 1,
                                MAX_GPUS, "gpus")
            notes.append(f"expert_parallel.autoep_size {e}: the routed experts split over {e} "
                         "ranks, counted as Megatron's expert parallelism (DeepSpeed AutoEP)")
        ignored += [f"expert_parallel.{k}" for k in ep if k not in ("enabled", "autoep_size")]
    return e


def _read_top_keys(data, notes, ignored):
    """Note or ignore each top-level key that no other part reads."""
    for key in data:
        if key in _TOP_MODELLED:
            continue
        if key in NOTED_TOP:
            if _section_on(data[key]):
                notes.append(f"{key} read: {NOTED_TOP[key]}")
            else:
                ignored.append(key)
            continue
        ignored.append(key)


def _section_on(value) -> bool:
    """Whether a noted section asks for anything: ``{"enabled": false}``, ``false``, 0, 1
    (a parallel size of 1) or ``{}`` ask for nothing."""
    if isinstance(value, dict):
        if value.get("enabled") is False or not value:
            return False
        sizes = [v for k, v in value.items() if k.endswith("size")]
        return not (sizes and all(v in (0, 1) for v in sizes) and len(sizes) == len(value))
    return value not in (False, None, 0, 1)
