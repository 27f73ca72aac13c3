"""A Trainer launch's ``--fsdp`` / ``--fsdp_config``, read as transformers 5.25.0 reads them.

``TrainingArguments._process_fsdp_args`` (training_args.py:2775-2885) turns them into the
keyword arguments of Accelerate 1.16.0's ``FullyShardedDataParallelPlugin``:

* ``--fsdp`` (:1447-1454, ``nargs="?"``, ``const=True``): bare, FSDP on; an empty value, off
  (``if not self.fsdp``: :2776-2777); any other value a space-separated list of the legacy
  options (:2901-2912, ``_apply_legacy_fsdp_to_config``), each setting a ``fsdp_config`` key
  it does not already hold: ``full_shard`` ``reshard_after_forward`` True, ``shard_grad_op``
  False (FSDP2; :2918-2925), ``hybrid_shard``, ``hybrid_shard_zero2``, ``no_shard`` (and any
  case but lowercase) FSDP1's only (:2926-2930), ``offload`` ``cpu_offload`` True
  (:2933-2934), ``auto_wrap`` nothing (:2935-2936), any other word refused (:2937-2938);
* ``--fsdp_config`` (:1455-1460): a JSON object inline (``{...}``: :1526-1531, strings
  ``"true"`` / ``"false"`` and digits converted by ``_convert_str_dict``, :161-176) or a JSON
  file (:2781-2783); an ``fsdp_`` prefix is dropped from its keys (:2784-2786); read only with
  ``--fsdp``.  Its keys: ``version`` (default 2, FSDP2: :2826), ``reshard_after_forward``
  (default True: :2860-2861), ``activation_checkpointing`` (:2854-2857),
  ``auto_wrap_policy`` (default ``TRANSFORMER_BASED_WRAP``: :2833-2846) with
  ``transformer_layer_cls_to_wrap`` or ``min_num_params``, ``cpu_offload`` (:2830-2831),
  ``xla`` (:2807-2819), ``cpu_ram_efficient_loading`` and ``state_dict_type`` (loading and
  saving only: :2847-2852), FSDP1's ``forward_prefetch``, ``backward_prefetch``,
  ``use_orig_params``, ``sync_module_states``, ``limit_all_gathers`` (passed under version 1
  only: :2863-2883); any other key the Trainer never passes.

memsym reads FSDP2 as :mod:`memsym.terms.accelerate_fsdp` counts it; FSDP1 (FlatParameter
units, the root kept gathered), the hybrid strategies, ``no_shard``, CPU offload, XLA and the
size-based or no wrapping are refused in one line each, as is the Trainer's own activation
checkpointing beside ``fsdp_config``'s (trainer.py:879-884) and ``--fsdp`` with
``--deepspeed`` (:472-476).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InvalidValueError
from ..text import printable
from ._values import load_json, read_bounded

__all__ = ["FsdpReading", "read_fsdp", "FSDP_LINES"]

_TA = "transformers 5.25.0 training_args.py"
#: Where each reading is defined (training_args.py at transformers 5.25.0).
FSDP_LINES = {"version": f"{_TA}:2826 (fsdp_config version, default 2: FSDP2)",
              "reshard_after_forward": f"{_TA}:2859-2861 (FSDP2: fsdp_config "
                                       "reshard_after_forward, default True)",
              "auto_wrap_policy": f"{_TA}:2833 (default TRANSFORMER_BASED_WRAP); Accelerate "
                                  "1.16.0 utils/fsdp_utils.py:960-970 (the model's "
                                  "_no_split_modules: each decoder layer its own group)",
              "activation_checkpointing": f"{_TA}:2854-2857 (passed only when fsdp_config "
                                          "names it); Accelerate utils/dataclasses.py "
                                          "(FullyShardedDataParallelPlugin: False)",
              "cpu_offload": f"{_TA}:2830-2831 (passed only when fsdp_config cpu_offload is "
                             "set); Accelerate utils/dataclasses.py (False)"}
_WRAPS = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")   # accelerate constants.py:39
_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
_TRUTH = {"y": True, "yes": True, "t": True, "true": True, "on": True, "1": True,
          "n": False, "no": False, "f": False, "false": False, "off": False, "0": False}
#: fsdp_config keys read for loading, saving or FSDP1 only: no effect on an FSDP2 step.
_NO_EFFECT = {
    "cpu_ram_efficient_loading": "loading the checkpoint on the first process only",
    "state_dict_type": "the checkpoint's format when saving",
    "min_num_params": "read with SIZE_BASED_WRAP only",
    "xla_fsdp_v2": "read with xla only", "xla_fsdp_grad_ckpt": "read with xla only",
    "xla_fsdp_settings": "read with xla only", "transformer_layer_cls_to_wrap": "",
    **{k: "FSDP1's, passed under version 1 only (training_args.py:2863-2883)" for k in (
        "forward_prefetch", "backward_prefetch", "use_orig_params", "sync_module_states",
        "limit_all_gathers")}}
_READ = ("version", "reshard_after_forward", "activation_checkpointing", "auto_wrap_policy",
         "cpu_offload", "xla")


@dataclass
class FsdpReading:
    """What the Trainer's FSDP arguments say, as memsym counts them.

    Attributes
    ----------
    reshard_after_forward : bool
        FSDP2's ``reshard_after_forward`` on every group but the output one.
    activation_checkpointing : bool
        ``fsdp_config``'s ``activation_checkpointing`` (Accelerate's checkpoint wrapper on
        each decoder layer).
    layer_classes : tuple of str or None
        ``transformer_layer_cls_to_wrap`` as given (None: the model's ``_no_split_modules``).
    ignored : list of str
        ``fsdp_config`` keys read that change nothing here.
    notes, defaults : list
        What the reading says; ``(name, value, source)`` of each default taken.
    """

    reshard_after_forward: bool = True
    activation_checkpointing: bool = False
    layer_classes: tuple | None = None
    ignored: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    defaults: list = field(default_factory=list)


def read_fsdp(values: dict, recompute: bool) -> FsdpReading | None:
    """The FSDP reading of a Trainer launch's fields ``values`` (field -> its words), or None
    when FSDP is off (``--fsdp`` absent or empty; a ``--fsdp_config`` alone is then unread).

    Parameters
    ----------
    values : dict
        The launch's TrainingArguments fields (``fsdp``: [] bare, else [value]).
    recompute : bool
        The Trainer's own ``--activation_checkpointing`` / ``--gradient_checkpointing``.

    Returns
    -------
    FsdpReading or None

    Examples
    --------
    >>> r = read_fsdp({"fsdp": ["full_shard auto_wrap"]}, False)
    >>> r.reshard_after_forward, r.activation_checkpointing
    (True, False)
    >>> read_fsdp({"fsdp": ["shard_grad_op"]}, True).reshard_after_forward
    False
    >>> read_fsdp({"fsdp": [""]}, False) is None
    True
    """
    if "fsdp" not in values or (values["fsdp"] and not values["fsdp"][0]):
        return None
    if "deepspeed" in values:
        raise InvalidValueError("--fsdp with --deepspeed: the Trainer refuses both (trainer.py:"
                                "472-476, 'Using --fsdp xxx together with --deepspeed is not "
                                "possible')")
    out = FsdpReading()
    cfg = _config(values["fsdp_config"][0]) if "fsdp_config" in values else {}
    for key in list(cfg):
        if key.startswith("fsdp_"):            # training_args.py:2784-2786
            cfg[key[5:]] = cfg.pop(key)
    given = set(cfg)
    if values["fsdp"]:
        _legacy(values["fsdp"][0], cfg, out)
    _check(cfg)
    out.reshard_after_forward = _truth(cfg.get("reshard_after_forward", True),
                                       "reshard_after_forward")
    out.activation_checkpointing = ("activation_checkpointing" in cfg and _truth(
        cfg["activation_checkpointing"], "activation_checkpointing"))
    if out.activation_checkpointing and recompute:
        raise InvalidValueError("fsdp_config activation_checkpointing with --activation_"
                                "checkpointing / --gradient_checkpointing: the Trainer refuses "
                                "both (trainer.py:879-884); keep fsdp_config's")
    cls = cfg.get("transformer_layer_cls_to_wrap")
    if cls is not None:                        # training_args.py:2805-2806
        cls = [cls] if isinstance(cls, str) else cls
        if not isinstance(cls, list) or not cls or not all(isinstance(c, str) for c in cls):
            raise InvalidValueError("fsdp_config transformer_layer_cls_to_wrap: a class name "
                                    "or a list of them")
        out.layer_classes = tuple(printable(c, 80) for c in cls)
    if "cpu_ram_efficient_loading" in cfg:
        _truth(cfg["cpu_ram_efficient_loading"], "cpu_ram_efficient_loading")   # :2847-2848
    _said(cfg, given, out)
    return out


def _config(text: str) -> dict:
    """The ``--fsdp_config`` object: inline JSON (converted as ``_convert_str_dict`` converts
    it) or a JSON file's: inline only where the text's first character is ``{``
    (training_args.py:1528, ``passed_value.startswith("{")``): with a leading space it is a
    file's path to transformers, as here."""
    inline = text.startswith("{")
    cfg = load_json(text if inline else read_bounded(text, "fsdp_config"), "fsdp_config")
    if not isinstance(cfg, dict):
        raise InvalidValueError("fsdp_config: a JSON object (a file or {...})")
    if inline:                                 # training_args.py:161-176
        for key, value in cfg.items():
            if isinstance(value, str) and value.lower() in ("true", "false"):
                cfg[key] = value.lower() == "true"
            elif isinstance(value, str) and value.isdigit():
                cfg[key] = int(value)
    return cfg


def _legacy(words: str, cfg: dict, out: FsdpReading) -> None:
    """``--fsdp``'s legacy words into ``cfg``, as ``_apply_legacy_fsdp_to_config`` sets them."""
    version = _version(cfg)
    for item in words.split():
        if item.upper() in _STRATEGIES:
            if version != 2:
                cfg.setdefault("reshard_after_forward", item)
            elif item in ("full_shard", "shard_grad_op"):
                cfg.setdefault("reshard_after_forward", item == "full_shard")
            else:
                raise InvalidValueError(
                    f"--fsdp {printable(item, 30)}: only FSDP1 runs it (training_args.py:"
                    "2926-2930), which memsym does not model; FSDP2 shards with full_shard or "
                    "shard_grad_op")
        elif item == "offload":
            cfg.setdefault("cpu_offload", True)
        elif item != "auto_wrap":
            raise InvalidValueError(f"--fsdp {printable(item, 30)}: not an fsdp option (full_"
                                    "shard, shard_grad_op, offload, auto_wrap: training_args.py:"
                                    "2937-2938, 'Unknown `fsdp` option')")
    out.notes.append(f"--fsdp {printable(words, 60)!r} read as fsdp_config entries "
                     "(training_args.py:2901-2936: full_shard reshard_after_forward true, "
                     "shard_grad_op false, offload cpu_offload, auto_wrap nothing), unless "
                     "fsdp_config sets them")


def _version(cfg: dict) -> int:
    value = cfg.get("version", 2)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidValueError(f"fsdp_config version {printable(str(value), 20)}: 1 or 2 "
                                "(training_args.py:2826 int(...))") from None


def _check(cfg: dict) -> None:
    """Refuse what memsym does not model, in one line each."""
    version = _version(cfg)
    if version == 1:
        raise InvalidValueError("fsdp_config version 1: FSDP1 (deprecated, training_args.py:"
                                "2864-2868) keeps FlatParameter units and its root gathered, "
                                "which memsym does not model; FSDP2 is the default (version 2)")
    if version != 2:
        raise InvalidValueError(f"fsdp_config version {version}: Accelerate's plugin runs 1 or "
                                "2 (utils/dataclasses.py set_mixed_precision)")
    if cfg.get("xla"):                         # training_args.py:2812 (truthiness)
        raise InvalidValueError("fsdp_config xla: PyTorch/XLA's FSDP (TPU) is not modelled")
    if cfg.get("cpu_offload"):                 # training_args.py:2830 (truthiness)
        raise InvalidValueError("fsdp offload (fsdp_config cpu_offload): FSDP2's "
                                "CPUOffloadPolicy keeps the shards, gradients and optimizer "
                                "step on the host and copies each group in and out, not "
                                "modelled")
    wrap = cfg.get("auto_wrap_policy", _WRAPS[0])
    if wrap not in _WRAPS:
        raise InvalidValueError(f"fsdp_config auto_wrap_policy {printable(str(wrap), 30)}: one "
                                f"of {', '.join(_WRAPS)} (training_args.py:2834-2835)")
    if wrap != _WRAPS[0]:
        raise InvalidValueError(f"fsdp_config auto_wrap_policy {wrap}: groups other than one "
                                "per decoder layer (TRANSFORMER_BASED_WRAP, the default) are "
                                "not modelled")


def _truth(value, key: str) -> bool:
    """``str_to_bool(str(value).lower())`` (training_args.py:2950-2962)."""
    word = str(value).lower()
    if word not in _TRUTH:
        raise InvalidValueError(f"fsdp_config {key} {printable(str(value), 20)}: invalid truth "
                                "value (training_args.py str_to_bool)")
    return _TRUTH[word]


def _said(cfg: dict, given: set, out: FsdpReading) -> None:
    """The ignored keys, the notes and the defaults taken."""
    for key in cfg:
        if key in _READ:
            continue
        why = _NO_EFFECT.get(key, "not passed to Accelerate's plugin by the Trainer "
                                  "(training_args.py:2823-2885)")
        if why:
            out.ignored.append(f"fsdp_config {printable(key, 40)} ({why})")
    for key in ("version", "reshard_after_forward", "auto_wrap_policy",
                "activation_checkpointing", "cpu_offload"):
        if key not in cfg:
            value = {"version": 2, "reshard_after_forward": True,
                     "auto_wrap_policy": _WRAPS[0]}.get(key, False)
            out.defaults.append((f"fsdp {key}", value, FSDP_LINES[key]))
    if not out.reshard_after_forward:
        out.notes.append("reshard_after_forward false" + ("" if "reshard_after_forward" in given
                         else " (shard_grad_op)") + ": every parameter stays gathered from its "
                         "forward to its backward (--fsdp-keep-gathered)")
