"""A Megatron-Bridge recipe's optimizer as memsym's job options: the flags Bridge keeps in
sync between its ``ddp`` and ``optimizer`` sections, and Muon (``optimizer.optimizer``
``muon`` or ``dist_muon`` with its ``optimizer.muon_*`` fields).

Sources: Megatron-Bridge 067f987df0 ``training/config.py:2101-2137``
(``_validate_and_sync_distributed_optimizer_settings``, which ``ConfigContainer.validate``
runs, config.py:1504) and ``training/optim.py:103-110``; Megatron-LM 2a75ac12c5, the commit
Bridge pins as ``3rdparty/Megatron-LM``: ``megatron/core/optimizer/optimizer_config.py``
(OptimizerConfig's defaults), ``__init__.py:742-754, 946-952`` and
``emerging_optimizers.py:197-201, 467-473``.
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..vocabulary import MUON_TP_MODES
from ._values import MAX_BATCH, recipe_flag

__all__ = ["MUON_FIELDS", "synced_flag", "recipe_muon"]

#: Bridge's Muon fields memsym reads -> (memsym's job option, OptimizerConfig's default at
#: Megatron-LM 2a75ac12c5): muon_nesterov False (optimizer_config.py:266), muon_num_ns_steps 5
#: (:279), muon_tp_mode "blockwise" (:282; Megatron-LM d98e8a64dd, which memsym's Megatron-LM
#: reader follows, made it "duplicated").  They become TensorParallelMuon's ``nesterov``,
#: ``num_ns_steps`` and ``tp_mode`` (emerging_optimizers.py:467-473, ``_kwargs_from_config``).
MUON_FIELDS = {"optimizer.muon_tp_mode": ("muon_tp_mode", "blockwise"),
               "optimizer.muon_num_ns_steps": ("muon_num_ns_steps", 5),
               "optimizer.muon_nesterov": ("muon_nesterov", False)}


def synced_flag(values, name: str, ddp_default: bool, notes: list) -> bool:
    """``ddp.<name>`` as Bridge runs it, after syncing it with ``optimizer.<name>``.

    ``_validate_and_sync_distributed_optimizer_settings`` (training/config.py:2101-2137 at
    067f987df0) sets both sections' ``use_distributed_optimizer`` true when either is, and
    the same for ``overlap_param_gather``, warning when they differed; it raises nothing.
    So the flag is the two sections' OR.  ``optimizer.<name>`` is OptimizerConfig's False
    when not set (Megatron-LM 2a75ac12c5 optimizer_config.py:324, :333); a note says when it
    turns on what the ddp section has off.

    Parameters
    ----------
    values : dict
        The recipe's values (``section.field`` -> value).
    name : str
        ``use_distributed_optimizer`` or ``overlap_param_gather``.
    ddp_default : bool
        ``ddp.<name>`` when the recipe does not set it.
    notes : list of str
        Appended to.

    Examples
    --------
    >>> notes = []
    >>> synced_flag({"ddp.use_distributed_optimizer": False,
    ...              "optimizer.use_distributed_optimizer": True},
    ...             "use_distributed_optimizer", False, notes), notes[0][:46]
    (True, 'ddp.use_distributed_optimizer false is turned ')
    >>> synced_flag({"ddp.overlap_param_gather": True}, "overlap_param_gather", False, [])
    True
    """
    ddp = bool(recipe_flag(values, "ddp." + name, ddp_default))
    opt = bool(recipe_flag(values, "optimizer." + name, False))
    if opt and not ddp:
        notes.append(f"ddp.{name} false is turned on by optimizer.{name} true (Bridge sets "
                     "both when either is, training/config.py:2101-2137)")
    return ddp or opt


def recipe_muon(values, opts: dict, notes: list) -> None:
    """Set Muon's job options in ``opts`` as Megatron-Bridge builds the optimizer.

    ``optimizer.optimizer`` ``dist_muon`` (or ``muon`` with
    ``optimizer.use_layer_wise_distributed_optimizer``) is Megatron-core's layer-wise
    distributed optimizer (training/optim.py:103-110, ``layer_wise_distributed_optimizer="dist"
    in name``; Megatron-LM 2a75ac12c5 optimizer/__init__.py:742-754), whose states memsym
    counts as the distributed optimizer's, split over d c.  Plain ``muon`` keeps them whole
    (ddp) even under ``use_distributed_optimizer``: the emerging-optimizer path builds its
    other groups with it off (__init__.py:946-952).  ``optimizer.muon_tp_mode``,
    ``muon_num_ns_steps`` and ``muon_nesterov`` (:data:`MUON_FIELDS`, OptimizerConfig's
    defaults when not set) become memsym's; under another optimizer they are noted as
    without effect.

    Parameters
    ----------
    values : dict
        The recipe's values.
    opts : dict
        The job options so far (``optimizer``, ``sharding``, ``t``); updated.
    notes : list of str
        Appended to.

    Examples
    --------
    >>> opts = {"optimizer": "dist_muon", "sharding": "ddp"}
    >>> recipe_muon({"optimizer.muon_nesterov": True}, opts, [])
    >>> opts["optimizer"], opts["sharding"], opts["muon_tp_mode"], opts["muon_nesterov"]
    ('muon', 'distributed-optimizer', 'blockwise', True)
    """
    given = [k for k in MUON_FIELDS if k in values]
    if opts.get("optimizer") not in ("muon", "dist_muon"):
        if given:
            notes.append(f"{', '.join(given)}: Muon-only fields, without effect under "
                         f"optimizer.optimizer {str(opts.get('optimizer'))[:20]}")
        return
    layer_wise = opts["optimizer"] == "dist_muon" or recipe_flag(
        values, "optimizer.use_layer_wise_distributed_optimizer", False)
    if not layer_wise and opts.get("sharding") == "distributed-optimizer":
        notes.append("optimizer.optimizer muon with use_distributed_optimizer: Megatron-core "
                     "keeps Muon's states whole (optimizer/__init__.py:946-952); counted as DDP")
    opts["optimizer"] = "muon"
    opts["sharding"] = "distributed-optimizer" if layer_wise else "ddp"
    mode = values.get("optimizer.muon_tp_mode", "blockwise")
    if mode not in MUON_TP_MODES:
        raise InvalidValueError(f"optimizer.muon_tp_mode must be one of "
                                f"{', '.join(MUON_TP_MODES)}, got {mode!r:.40}")
    steps = values.get("optimizer.muon_num_ns_steps", 5)
    if not (isinstance(steps, int) and not isinstance(steps, bool) and 1 <= steps <= MAX_BATCH):
        # TensorParallelMuon raises below 1 step (emerging_optimizers.py:200-201)
        raise InvalidValueError(f"optimizer.muon_num_ns_steps must be a whole number of at "
                                f"least 1, got {steps!r:.40}")
    opts.update(muon_tp_mode=mode, muon_num_ns_steps=steps,
                muon_nesterov=bool(recipe_flag(values, "optimizer.muon_nesterov", False)))
