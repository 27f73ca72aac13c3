"""Megatron-LM's arguments for a searched row's settings: its sharding, MoE dispatcher,
recompute and precision (:mod:`memsym.emit` writes them into a launch's arguments).

Each setting is spelled only where memsym's Megatron reader (:mod:`memsym.readers.megatron`)
reads the words back as the same thing; a setting Megatron-LM cannot spell so is refused with
:class:`memsym.emit_held.NotExpressible`.  The flags are Megatron-LM's
``megatron/training/arguments.py`` at ``d98e8a64dd``.
"""

from __future__ import annotations

from .emit_held import NotExpressible
from .search.choices import recompute_layers
from .search.space import MEGATRON_FSDP_STRATEGY

__all__ = ["sharding_flags", "dispatcher_flags", "recompute_flags", "precision_flags"]


def sharding_flags(scheme: str, double_buffer: bool = False) -> list:
    """Megatron-LM's sharding arguments of a row's scheme: none for DDP, the distributed
    optimizer's flag, or Megatron-FSDP's strategy (:data:`MEGATRON_FSDP_STRATEGY`: ``no_shard``
    and ``optim`` rows by name, zero2 and fsdp as ``optim_grads`` / ``optim_grads_params``)
    with its double buffer where the search carried it.

    Examples
    --------
    >>> sharding_flags("no_shard", double_buffer=True)[:4]
    ['--use-megatron-fsdp', '--data-parallel-sharding-strategy', 'no_shard', '--ckpt-format']
    >>> sharding_flags("optim", double_buffer=True)[-1]
    '--fsdp-double-buffer'
    """
    if scheme == "ddp":
        return []                     # Megatron-LM's DDP: no flag (arguments.py store_true)
    if scheme == "distributed-optimizer":
        return ["--use-distributed-optimizer"]
    strategy = MEGATRON_FSDP_STRATEGY.get(scheme)
    if strategy is None:
        spelled = {"zero3": "Megatron-FSDP optim_grads_params reads back as fsdp with its own "
                            "buffers, not as ZeRO-3; search --sharding fsdp prices it so",
                   "zero1": "--use-distributed-optimizer reads back as Megatron's distributed "
                            "optimizer (its whole fp32 gradient buffer), not as ZeRO-1"}
        raise NotExpressible(f"sharding {scheme} (DeepSpeed's ZeRO, as the search priced it) has "
                             f"no Megatron-LM flag: {spelled.get(scheme, 'none reads it back')}")
    # validate_args asserts the fsdp_dtensor checkpoint format under Megatron-FSDP (and
    # turns the distributed optimizer on itself: Megatron-FSDP v1)
    return ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy,
            "--ckpt-format", "fsdp_dtensor"] + (["--fsdp-double-buffer"] if double_buffer else [])


def dispatcher_flags(space) -> list:
    """Megatron-LM's MoE token dispatcher arguments of the search's dispatcher, on an MoE
    model (none on a dense one): written out even for alltoall, since Megatron's own default
    is allgather (``TransformerConfig.moe_token_dispatcher_type``); DeepEP and HybridEP as
    the flex dispatcher with that backend (``--moe-flex-dispatcher-backend``).

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> dispatcher_flags(NS(arch=NS(num_experts=8), moe_dispatcher="deepep"))
    ['--moe-token-dispatcher-type', 'flex', '--moe-flex-dispatcher-backend', 'deepep']
    >>> dispatcher_flags(NS(arch=NS(num_experts=None), moe_dispatcher="alltoall"))
    []
    """
    if not space.arch.num_experts:
        return []
    name = space.moe_dispatcher
    if name in ("deepep", "hybridep"):
        return ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", name]
    return ["--moe-token-dispatcher-type", name]


def recompute_flags(rc: str) -> list:
    """Megatron-LM's recompute arguments of a row's recompute mode: none, selective, a full
    recompute as uniform chunks of 1 layer (``transformer_block.py`` raises without a method)
    or Megatron's block method over N layers of each stage (``block-N``); torchtitan's per-op
    modes are refused.

    Examples
    --------
    >>> recompute_flags("selective"), recompute_flags("none")
    (['--recompute-granularity', 'selective'], [])
    """
    got = recompute_layers(rc)
    if got is not None:
        method, n = got
        if method != "block":
            raise NotExpressible(f"recompute {rc} is torchtitan's; Megatron-LM recomputes "
                                 "blocks (block-N) or uniform chunks")
        return ["--recompute-granularity", "full", "--recompute-method", "block",
                "--recompute-num-layers", str(n)]
    if rc == "none":
        return []
    if rc == "selective":
        return ["--recompute-granularity", "selective"]
    if rc == "full":
        # Megatron's full recompute needs a method (transformer_block.py raises without
        # one): uniform chunks of 1 layer checkpoint every layer's input
        return ["--recompute-granularity", "full", "--recompute-method", "uniform",
                "--recompute-num-layers", "1"]
    raise NotExpressible(f"recompute {rc} is torchtitan's per-op checkpointing; Megatron-LM "
                         "has none")


def precision_flags(precision: str, fp8_recipe) -> list:
    """Megatron-LM's precision arguments: ``--bf16``/``--fp16`` (fp32 has none), FP8 with
    its recipe, NVFP4 as ``--fp4-format e2m1`` (whose ``--fp4-recipe`` defaults to nvfp4).

    MXFP8 is E4M3 only (Transformer Engine's MXFP8BlockScaling: ``fp8_format=E4M3``), so it
    is spelled ``--fp8-format e4m3 --fp8-recipe mxfp8``; a per-tensor recipe keeps hybrid and
    names itself unless it is Megatron's default (``--fp8-recipe delayed``).

    Examples
    --------
    >>> precision_flags("fp8", "mxfp8")
    ['--bf16', '--fp8-format', 'e4m3', '--fp8-recipe', 'mxfp8']
    >>> precision_flags("fp8", None)
    ['--bf16', '--fp8-format', 'hybrid']
    """
    if precision == "fp8":
        if fp8_recipe == "mxfp8":
            return ["--bf16", "--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"]
        recipe = [] if fp8_recipe in (None, "delayed") else ["--fp8-recipe", fp8_recipe]
        return ["--bf16", "--fp8-format", "hybrid", *recipe]
    return {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp32": [],
            "fp4": ["--bf16", "--fp4-format", "e2m1"]}[precision]
