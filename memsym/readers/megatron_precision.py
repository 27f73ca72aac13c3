"""Megatron-LM's precision and optimizer arguments, with its rules.

This module owns what a ``pretrain_gpt.py`` command says about the numbers a job keeps and
the optimizer that keeps them: the parameter, gradient and optimizer-state dtypes, FP8 and
its recipe, and the optimizer with its sharding (distributed optimizer, Megatron-FSDP, torch
FSDP2), overlaps and buckets, each with Megatron's defaults and the checks of
``validate_args`` and ``OptimizerConfig``.  The values are read through
:class:`memsym.readers.megatron_arguments.MegatronArguments`; the architecture and layout they
check against are :mod:`memsym.readers.megatron_architecture`'s and
:mod:`memsym.readers.megatron_training`'s.

Revision read: NVIDIA/Megatron-LM ``d98e8a64dd`` (main, 2026-08-22).  ``args`` below means
``megatron/training/arguments.py``.
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..vocabulary import MEGATRON_FSDP_SCHEMES, MUON_TP_MODES, fp8_recipe_note
from ._values import MAX_BATCH
from .megatron_arguments import MegatronArguments

__all__ = ["megatron_precision", "megatron_bf16_layers", "megatron_optimizer", "megatron_fsdp_options", "megatron_muon",
           "MUON_DESTS", "FP8_FORMATS", "MEGATRON_FP8_RECIPES", "FP4_FORMATS", "FP4_RECIPES"]

#: The values Megatron-LM's argparse accepts for --fp8-format, --fp8-recipe, --fp4-format and
#: --fp4-recipe (arguments.py at d98e8a64dd).
FP8_FORMATS = ("e4m3", "hybrid")
MEGATRON_FP8_RECIPES = ("tensorwise", "delayed", "mxfp8", "blockwise", "custom")
FP4_FORMATS = ("e2m1",)
FP4_RECIPES = ("nvfp4",)


def megatron_precision(r: MegatronArguments) -> dict:
    """The precision settings of a Megatron-LM command.

    fp32 unless ``--bf16`` or ``--fp16``; with bf16 the gradients are reduced and accumulated
    in fp32 unless ``--grad-reduce-in-bf16``; the optimizer-state dtypes other than fp32 need
    the precision-aware optimizer; FP8 with its recipe (delayed scaling by default).

    Parameters
    ----------
    r : MegatronArguments
        The command's values; the rules used are noted there.

    Returns
    -------
    dict
        ``params_dtype``, ``grad_reduce_in_fp32``, ``grad_dtype``, ``main_grads_dtype``,
        ``main_params_dtype``, ``exp_avg_dtype``, ``exp_avg_sq_dtype``,
        ``precision_aware_optimizer``, ``fp8``, ``fp8_recipe``, ``fp8_param_gather``, ``fp4``,
        ``fp4_param_gather``.

    Raises
    ------
    InvalidValueError
        A combination ``validate_args`` or ``OptimizerConfig`` refuses.

    References
    ----------
    Megatron-LM ``megatron/training/arguments.py`` (``validate_args``),
    ``megatron/core/optimizer/optimizer_config.py`` at ``d98e8a64dd``.

    Examples
    --------
    >>> from memsym.readers.megatron_arguments import parse_megatron_argv
    >>> prec = megatron_precision(MegatronArguments(*parse_megatron_argv(["--bf16"])[::2]))
    >>> prec["params_dtype"], prec["grad_dtype"], prec["grad_reduce_in_fp32"]
    ('bf16', 'fp32', True)
    """
    bf16, fp16 = r.flag("bf16"), r.flag("fp16")
    if bf16 and fp16:   # args: "assert not args.bf16" under fp16 (and the converse)
        raise InvalidValueError("--bf16 and --fp16 are mutually exclusive")
    params = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    main_grads = r.choice("main_grads_dtype", ("fp32", "bf16"), "fp32")
    accumulate = r.flag("accumulate_allreduce_grads_in_fp32")
    if bf16:
        # args: bf16 forces accumulate_allreduce_grads_in_fp32 unless --grad-reduce-in-bf16
        if accumulate and main_grads != "fp32":
            raise InvalidValueError("--main-grads-dtype can only be fp32 with "
                                    "--accumulate-allreduce-grads-in-fp32")
        if r.flag("grad_reduce_in_bf16"):
            accumulate = False
        elif not accumulate and main_grads == "fp32":
            accumulate = True
    elif r.flag("grad_reduce_in_bf16"):
        r.note("--grad-reduce-in-bf16 has effect only with --bf16")
    grad = "fp32" if accumulate or params == "fp32" else params
    pa = r.flag("use_precision_aware_optimizer")
    dtypes = {k: r.choice(k, ch, "fp32") for k, ch in (
        ("main_params_dtype", ("fp32", "fp16")), ("exp_avg_dtype", ("fp32", "fp16", "bf16", "fp8")),
        ("exp_avg_sq_dtype", ("fp32", "fp16", "bf16", "fp8")))}
    bad = [k for k, v in (("main_grads_dtype", main_grads), *dtypes.items()) if v != "fp32"]
    if bad and not pa:   # optimizer_config.py:468-480: OptimizerConfig asserts fp32 without it
        raise InvalidValueError(f"--{bad[0].replace('_', '-')} needs --use-precision-aware-"
                                "optimizer (Megatron's OptimizerConfig: fp32 otherwise)")
    fp8 = r.choice("fp8", FP8_FORMATS, None)
    recipe = r.choice("fp8_recipe", MEGATRON_FP8_RECIPES, "delayed")
    fp8_pg = r.flag("fp8_param_gather")
    # --fp4-format e2m1 with --fp4-recipe nvfp4 (its default): memsym's fp4 (TE NVFP4BlockScaling)
    fp4 = r.choice("fp4", FP4_FORMATS, None)
    if fp4 and fp8:
        raise InvalidValueError("--fp4-format and --fp8-format cannot be used simultaneously "
                                "(Megatron's validate_args)")
    if fp4:
        r.choice("fp4_recipe", FP4_RECIPES, "nvfp4")
    if fp8 and fp8_recipe_note(recipe, "--fp8-recipe"):
        r.note(fp8_recipe_note(recipe, "--fp8-recipe"))
    if fp8_pg and not fp8:
        raise InvalidValueError("--fp8-param-gather needs --fp8-format")
    fp4_pg = r.flag("fp4_param_gather")
    if fp4_pg and not fp4:   # validate_args: --fp4-param-gather needs --fp4-format
        raise InvalidValueError("--fp4-param-gather must be used together with --fp4-format "
                                "(Megatron's validate_args)")
    bf16_layers = megatron_bf16_layers(r, bool(fp8 or fp4), recipe if fp8 else None)
    return {"params_dtype": params, "grad_reduce_in_fp32": accumulate, "grad_dtype": grad,
            "main_grads_dtype": main_grads, "main_params_dtype": dtypes["main_params_dtype"]
            if params != "fp32" else "fp32", "exp_avg_dtype": dtypes["exp_avg_dtype"],
            "exp_avg_sq_dtype": dtypes["exp_avg_sq_dtype"], "precision_aware_optimizer": pa,
            "fp8": fp8, "fp8_recipe": recipe if fp8 else None, "fp8_param_gather": fp8_pg,
            "fp4": fp4, "fp4_param_gather": fp4_pg, "bf16_layers": bf16_layers}


def megatron_bf16_layers(r: MegatronArguments, quantized: bool, fp8_recipe) -> tuple:
    """``(first, last)``: the decoder layers ``--first-last-layers-bf16`` keeps in BF16, with
    ``--num-layers-at-start-in-bf16`` and ``--num-layers-at-end-in-bf16`` (TransformerConfig
    fields, argparse from the dataclass: 1 each by default, transformer_config.py:649-658 at
    d98e8a64dd); ``(0, 0)`` without the flag, or without FP8 / FP4, where every layer runs in
    BF16 anyway (``get_fp8_context`` enters no context, fp8_utils.py:848-852: noted).

    Raises
    ------
    InvalidValueError
        With the delayed recipe (Megatron's default ``--fp8-recipe``): TransformerConfig
        refuses it (transformer_config.py:1528-1530).

    Examples
    --------
    >>> from memsym.readers.megatron_arguments import parse_megatron_argv
    >>> r = MegatronArguments(*parse_megatron_argv(["--first-last-layers-bf16",
    ...                                             "--num-layers-at-end-in-bf16", "2"])[::2])
    >>> megatron_bf16_layers(r, True, "tensorwise")
    (1, 2)
    """
    if not r.flag("first_last_layers_bf16"):
        return (0, 0)
    pair = tuple(r.int(f"num_layers_at_{w}_in_bf16", 1, lo=0) for w in ("start", "end"))
    if not quantized:
        r.note(f"{r.name('first_last_layers_bf16')} without --fp8-format or --fp4-format: "
               "every layer runs in BF16 already")
        return (0, 0)
    if fp8_recipe == "delayed":
        raise InvalidValueError("Delayed scaling does not support first / last layer in BF16 "
                                "(Megatron's TransformerConfig with --first-last-layers-bf16 and "
                                "--fp8-recipe delayed, its default: transformer_config.py:"
                                "1528-1530 at d98e8a64dd)")
    return pair


def megatron_optimizer(r: MegatronArguments, arch: dict, lay: dict, prec: dict) -> dict:
    """The optimizer and its sharding and overlaps, from a Megatron-LM command.

    Adam by default; plain DDP (the whole optimizer state on every data-parallel rank) unless
    ``--use-distributed-optimizer``, ``--use-megatron-fsdp`` (sharding ``optim_grads_params``
    by default) or ``--use-torch-fsdp2``; the overlaps with the flags ``validate_args``
    requires for them.

    Parameters
    ----------
    r : MegatronArguments
        The command's values; the rules used are noted there.
    arch : dict
        The architecture read.
    lay : dict
        The layout read (:func:`memsym.readers.megatron_training.megatron_layout`).
    prec : dict
        The precision read (:func:`megatron_precision`).

    Returns
    -------
    dict
        The optimizer, its sharding (distributed optimizer, Megatron-FSDP and its strategy,
        dtypes and version, torch FSDP2), overlaps, bucket size and deferrals.

    Raises
    ------
    InvalidValueError
        A combination ``validate_args`` refuses.

    References
    ----------
    Megatron-LM ``megatron/training/arguments.py`` (``validate_args``) at ``d98e8a64dd``.

    Examples
    --------
    >>> from memsym.readers.megatron_arguments import parse_megatron_argv
    >>> r = MegatronArguments(*parse_megatron_argv(["--use-distributed-optimizer"])[::2])
    >>> out = megatron_optimizer(r, {"untie_embeddings_and_output_weights": False},
    ...     {"sequence_parallel": False}, megatron_precision(r))
    >>> out["optimizer"], out["use_distributed_optimizer"], out["use_torch_fsdp2"]
    ('adam', True, False)
    """
    opt = r.choice("optimizer", ("adam", "sgd", "muon", "dist_muon", "lion", "soap",
                                 "adaptive_muon"), "adam")
    if opt not in ("adam", "sgd", "muon", "dist_muon"):
        r.note(f"--optimizer {opt}: memsym models adam, sgd and muon states only")
    distopt = r.flag("use_distributed_optimizer")
    if opt == "dist_muon":
        # arguments.py:1727-1733: deprecated, muon with the layer-wise distributed optimizer
        # (--use-distributed-optimizer under muon is that optimizer, 1735-1737)
        r.note("--optimizer dist_muon: Megatron-LM's muon with --use-distributed-optimizer "
               "(the layer-wise distributed optimizer)")
        distopt = True
    muon = megatron_muon(r, opt in ("muon", "dist_muon"))
    mfsdp = r.flag("use_megatron_fsdp")
    fsdp2 = r.flag("use_torch_fsdp2")
    if mfsdp and fsdp2:
        raise InvalidValueError("--use-megatron-fsdp and --use-torch-fsdp2 are exclusive")
    if fsdp2 and not arch["untie_embeddings_and_output_weights"]:
        raise InvalidValueError("--use-torch-fsdp2 requires --untie-embeddings-and-output-weights"
                                " (Megatron's validate_args)")
    strategy = r.choice("data_parallel_sharding_strategy", MEGATRON_FSDP_SCHEMES,
                        "optim_grads_params") if mfsdp else None
    if mfsdp and not r.given("data_parallel_sharding_strategy"):
        r.note("Megatron-FSDP with the command line's default sharding optim_grads_params")
    og, opg, tpo = _checked_overlaps(r, lay, prec, opt, distopt or mfsdp, fsdp2)
    if not distopt and not mfsdp and not fsdp2:
        r.note("no --use-distributed-optimizer: Megatron keeps the whole optimizer state on "
               "every data-parallel rank")
    out = {"optimizer": "muon" if opt == "dist_muon" else opt,
           "use_distributed_optimizer": distopt, "use_megatron_fsdp": mfsdp,
           "data_parallel_sharding_strategy": strategy, "use_torch_fsdp2": fsdp2,
           "overlap_grad_reduce": og, "overlap_param_gather": opg,
           "ddp_bucket_size": r.int("ddp_bucket_size", None, hi=MAX_BATCH),
           "tp_comm_overlap": tpo, "cp_comm_type": r.raw.get("cp_comm_type"),
           "overlap_moe_expert_parallel_comm": r.flag("overlap_moe_expert_parallel_comm"),
           "overlap_p2p_comm": bool(r.raw.get("overlap_p2p_comm", True)),
           "defer_embedding_wgrad_compute": r.flag("defer_embedding_wgrad_compute"),
           "wgrad_deferral_limit": r.int("wgrad_deferral_limit", 0, lo=0, hi=MAX_BATCH), **muon}
    if mfsdp:
        # argparse defaults: main params fp32, main grads and grad communication auto
        for k, default in (("megatron_fsdp_main_grads_dtype", "auto"),
                           ("megatron_fsdp_main_params_dtype", "fp32"),
                           ("megatron_fsdp_grad_comm_dtype", "auto")):
            out[k] = r.choice(k, ("fp32", "bf16", "fp16", "auto"), default)
        out["megatron_fsdp_version"] = int(r.choice("megatron_fsdp_version", ("1", "2"), "1"))
        if out["megatron_fsdp_version"] == 2 and distopt:   # validate_args l. 1124-1126
            raise InvalidValueError("--megatron-fsdp-version 2 is not compatible with "
                                    "--use-distributed-optimizer (Megatron-LM's validate_args)")
        out.update(megatron_fsdp_options(r))
    return out


def megatron_fsdp_options(r: MegatronArguments) -> dict:
    """Megatron-FSDP's job options from a command with ``--use-megatron-fsdp``: the main
    grads' dtype (``grad_dtype``, given only when ``--megatron-fsdp-main-grads-dtype`` is
    not ``auto``, the parameters' dtype) and the double buffer (``--fsdp-double-buffer``, or
    ``--use-nccl-ub`` / ``--megatron-fsdp-max-pool-double-buffer``, which set it: args
    1173-1181).  A main-params dtype other than fp32 is noted (counted as fp32).

    Examples
    --------
    >>> from memsym.readers.megatron_arguments import parse_megatron_argv
    >>> r = MegatronArguments(*parse_megatron_argv(["--use-nccl-ub"])[::2])
    >>> megatron_fsdp_options(r)
    {'fsdp_double_buffer': True}

    References
    ----------
    Megatron-LM ``megatron/training/arguments.py`` at ``d98e8a64dd``: 1173-1181, 3687-3694;
    ``megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py`` 2313-2322.
    """
    out = {"fsdp_double_buffer": any(r.flag(k) for k in (
        "fsdp_double_buffer", "nccl_ub", "megatron_fsdp_max_pool_double_buffer"))}
    grads = r.choice("megatron_fsdp_main_grads_dtype", ("fp32", "bf16", "fp16", "auto"), "auto")
    if grads != "auto":
        out["grad_dtype"] = grads
    if r.choice("megatron_fsdp_main_params_dtype", ("fp32", "bf16", "fp16", "auto"),
                "fp32") != "fp32":
        r.note("--megatron-fsdp-main-params-dtype other than fp32: memsym counts the fp32 "
               "main_weight_buffer")
    return out


def _checked_overlaps(r: MegatronArguments, lay: dict, prec: dict, opt: str, sharded: bool,
                      fsdp2: bool):
    """The gradient-reduce, parameter-gather and TP-communication overlaps, with the
    sharding, precision and layout ``validate_args`` requires of them and of the optimizer
    (``sharded``: the distributed optimizer or Megatron-FSDP)."""
    og, opg = r.flag("overlap_grad_reduce"), r.flag("overlap_param_gather")
    if opg:   # args: needs DistOpt or Megatron-FSDP (or dist_muon) and --overlap-grad-reduce
        if not (sharded or opt == "dist_muon"):
            raise InvalidValueError("--overlap-param-gather needs --use-distributed-optimizer or "
                                    "--use-megatron-fsdp")
        if not og:
            raise InvalidValueError("--overlap-param-gather needs --overlap-grad-reduce")
    if prec.get("fp4_param_gather") and not r.flag("use_distributed_optimizer"):
        # memsym models NVFP4 parameters under the distributed optimizer only: its step casts
        # the fp32 shards back to NVFP4 (distrib_optimizer.py:2853-2857); optimizer.py has none
        raise InvalidValueError("--fp4-param-gather is modelled with --use-distributed-optimizer "
                                "only (Megatron-core's distributed optimizer quantizes the NVFP4 "
                                "parameters; DDP and FSDP are not modelled with them)")
    if prec["fp8_param_gather"] and not (sharded or fsdp2):
        raise InvalidValueError("--fp8-param-gather needs the distributed optimizer or FSDP "
                                "(Megatron's validate_args)")
    if prec["precision_aware_optimizer"] and not (r.flag("use_distributed_optimizer")
                                                  and opt == "adam"):
        raise InvalidValueError("--use-precision-aware-optimizer needs "
                                "--use-distributed-optimizer and adam")
    tpo = r.flag("tp_comm_overlap")
    if tpo and not lay["sequence_parallel"]:
        raise InvalidValueError("--tp-comm-overlap needs --sequence-parallel (Megatron's "
                                "validate_args)")
    return og, opg, tpo


#: Muon's arguments and Megatron-LM's defaults (arguments.py:2633, 2648-2655 at d98e8a64dd).
MUON_DESTS = (("muon_tp_mode", "duplicated"), ("muon_num_ns_steps", 5), ("muon_nesterov", False))


def megatron_muon(r: MegatronArguments, muon: bool) -> dict:
    """Muon's ``--muon-tp-mode``, ``--muon-num-ns-steps`` and ``--muon-nesterov`` with
    Megatron-LM's defaults (duplicated, 5, off), read under ``--optimizer muon`` (``muon``);
    under another optimizer they are checked, noted as without effect, and not returned.

    Examples
    --------
    >>> from memsym.readers.megatron_arguments import parse_megatron_argv
    >>> r = MegatronArguments(*parse_megatron_argv(["--muon-tp-mode", "blockwise",
    ...                                             "--muon-nesterov"])[::2])
    >>> megatron_muon(r, True)
    {'muon_tp_mode': 'blockwise', 'muon_num_ns_steps': 5, 'muon_nesterov': True}
    >>> megatron_muon(r, False), r.notes[-1][:46]
    ({}, '--muon-tp-mode, --muon-nesterov: Muon-only arg')
    """
    # argparse's choices and type=int refuse these before the optimizer is built
    out = {"muon_tp_mode": r.choice("muon_tp_mode", MUON_TP_MODES, "duplicated"),
           "muon_num_ns_steps": r.int("muon_num_ns_steps", 5, lo=1, hi=MAX_BATCH),
           "muon_nesterov": r.flag("muon_nesterov")}
    if muon:
        return out
    given = [r.name(d) for d, _ in MUON_DESTS if r.given(d) and r.raw[d] is not False]
    if given:
        r.note(f"{', '.join(given)}: Muon-only arguments, without effect under --optimizer "
               "other than muon")
    return {}
