"""The discrete choices a search enumerates beside its knobs: the sharding schemes (by name,
as the search's rows, per framework) and the recompute choices (the framework's modes,
Megatron's layer-wise ``block-N`` and torchtitan's ``every-N``), each name checked
(:func:`memsym.search.space.make_space` builds the search's space from them).
"""

from __future__ import annotations

import re

from ..errors import InvalidValueError, choose
from ..frameworks import FRAMEWORK, FRAMEWORK_SCHEMES
from ..terms.model_state import SCHEMES as ALL_SCHEMES
from ..vocabulary import MEGATRON_FSDP_SCHEMES, SEARCH_SHARDING

__all__ = ["SCHEMES", "TORCHTITAN_SCHEMES", "TORCHTITAN_RECOMPUTE", "recompute_layers",
           "recompute_fields", "recompute_choices", "matched_choices", "scheme_row",
           "framework_choices"]

#: Sharding schemes searched by default (fsdp: ZeRO-3's states, or FSDP2 in a torchtitan search and
#: Megatron-FSDP optim_grads_params in a Megatron one, asked for by name: scheme_row).
SCHEMES = ("ddp", "zero1", "zero2", "zero3", "distributed-optimizer")


#: Layer-wise recompute choices, asked for by name: Megatron's ``--recompute-granularity full
#: --recompute-method block --recompute-num-layers N`` as ``"block-N"`` (the first N layers of
#: each model chunk checkpointed, the others keep their activations) and torchtitan's
#: ``selective_ac_option = "N"`` as ``"every-N"`` (every N-th block of a rank checkpointed,
#: the default ``every-2`` of a torchtitan search).
_LAYERWISE = re.compile(r"(block|every)-([1-9][0-9]{0,6})")


def recompute_layers(rc) -> tuple | None:
    """``(recompute_method, N)`` of a ``"block-N"`` or ``"every-N"`` recompute choice, else
    None (the method's name is the choice's prefix).

    Examples
    --------
    >>> recompute_layers("block-2"), recompute_layers("every-3"), recompute_layers("full")
    (('block', 2), ('every', 3), None)
    """
    match = _LAYERWISE.fullmatch(rc) if isinstance(rc, str) else None
    return (match.group(1), int(match.group(2))) if match else None


def recompute_fields(rc) -> dict:
    """The :class:`memsym.training.Training` fields of a search's recompute choice.

    Examples
    --------
    >>> recompute_fields("block-2")["recompute_method"], recompute_fields("none")
    ('block', {'recompute': 'none'})
    >>> recompute_fields("every-2")["recompute_method"]
    'every'
    """
    got = recompute_layers(rc)
    if got is None:
        return {"recompute": rc}
    return {"recompute": "full", "recompute_method": got[0], "recompute_num_layers": got[1]}


def recompute_choices(given, modes, titan: bool, num_layers: int) -> tuple:
    """The recompute choices, each checked: the framework's modes, Megatron's block-N and
    torchtitan's every-N."""
    out = []
    for item in given:
        got = recompute_layers(item)
        if got is None:
            out.append(choose("recompute mode", item, modes))
            continue
        method, n = got
        if titan and method == "block":
            raise InvalidValueError("block-N is Megatron's --recompute-method block; torchtitan "
                                    "checkpoints every N-th block (every-N: selective_ac_option)")
        if not titan and method == "every":
            raise InvalidValueError("every-N is torchtitan's selective_ac_option = \"N\"; "
                                    "Megatron checkpoints the first N layers of a chunk (block-N)")
        if method == "every" and n == 1:
            raise InvalidValueError("every-1 checkpoints every block: that is recompute full")
        if n > num_layers:
            raise InvalidValueError(f"recompute {item}: N must be 1..{num_layers} (the model's "
                                    "layers)")
        out.append(item)
    return tuple(dict.fromkeys(out))


def matched_choices(kind, given, accepted) -> tuple:
    """Each name of ``given`` matched by :func:`memsym.errors.choose`, duplicates dropped."""
    return tuple(dict.fromkeys(choose(kind, item, accepted) for item in given))


def scheme_row(name, framework: str = "megatron") -> str:
    """A sharding scheme by name, as the search's row; FSDP keeps the same states as ZeRO-3,
    so it is one row, except in a torchtitan search, where FSDP2 is the scheme (its own
    transients, with PP), and in a Megatron search, where it is Megatron-FSDP
    ``optim_grads_params`` (its own buffers, :data:`MEGATRON_FSDP_STRATEGY`).  A Megatron
    search also takes Megatron-FSDP's strategies by name: ``optim_grads`` is its zero2 row,
    ``optim_grads_params`` its fsdp row, ``no_shard`` and ``optim`` rows of their own.

    Examples
    --------
    >>> scheme_row("fsdp", "megatron"), scheme_row("fsdp", "deepspeed")
    ('fsdp', 'zero3')
    >>> scheme_row("optim_grads"), scheme_row("no_shard")
    ('zero2', 'no_shard')
    """
    fw = FRAMEWORK[framework]
    if not fw.megatron_options and isinstance(name, str) \
            and name.strip() in MEGATRON_FSDP_SCHEMES:
        raise InvalidValueError(f"sharding {name.strip()} is Megatron-FSDP's strategy: a "
                                f"Megatron-LM search's, not {fw.title}'s")
    key = choose("sharding", name, SEARCH_SHARDING if fw.megatron_options else ALL_SCHEMES)
    if key in MEGATRON_FSDP_SCHEMES:       # Megatron-FSDP's strategy: its row's name
        return {"optim_grads": "zero2", "optim_grads_params": "fsdp"}.get(key, key)
    # FSDP2 with its own groups and transients (torchtitan's), Megatron-FSDP (Megatron's),
    # else ZeRO-3's states
    return "zero3" if key == "fsdp" and not (fw.fsdp_io_groups or fw.megatron_options) else key


#: What a torchtitan job can run: FSDP2 (data_parallel_shard_degree) or replicas
#: (data_parallel_replicate_degree), and activation checkpointing none / per-op / every
#: second block (its default selective_ac_option "2") / full.
TORCHTITAN_SCHEMES = ("fsdp", "ddp")
TORCHTITAN_RECOMPUTE = ("none", "selective-op", "every-2", "full")


def framework_choices(framework, arch, sharding, recompute, finetune, flash_attention,
                       precision="bf16") -> tuple:
    """``(sharding, recompute, modes)``: the schemes and recompute choices searched, what
    the framework offers where not given, and the recompute modes it runs.  Under FP8 / FP4
    Megatron's default schemes are those its Transformer Engine precision is modelled under
    (DDP and the distributed optimizer, memsym.terms.widths); a scheme named explicitly, or
    another framework's default, is priced or refused as given."""
    titan = FRAMEWORK[framework].layer_selective_ac     # torchtitan's AC and FSDP2 choices
    dense_op = bool(arch.swiglu and not arch.num_experts and not arch.multi_latent_attention
                    and flash_attention)
    if sharding is None:   # what the framework launches (Framework.searched_schemes)
        sharding = TORCHTITAN_SCHEMES if titan else (
            FRAMEWORK[framework].searched_schemes or FRAMEWORK_SCHEMES.get(framework, SCHEMES))
        if precision in ("fp8", "fp4") and FRAMEWORK[framework].megatron_options:
            sharding = tuple(x for x in sharding if x in ("ddp", "distributed-optimizer"))
    if recompute is None:
        recompute = (tuple(r for r in TORCHTITAN_RECOMPUTE if r != "selective-op" or dense_op)
                     if titan else ("none", "selective", "full"))
    shard = tuple(dict.fromkeys(scheme_row(x, framework) for x in
                                ([sharding] if isinstance(sharding, str) else sharding)))
    if titan and set(shard) - set(TORCHTITAN_SCHEMES):
        raise InvalidValueError("torchtitan shards with FSDP2 or replicates: sharding fsdp or "
                                f"ddp, not {', '.join(sorted(set(shard) - set(TORCHTITAN_SCHEMES)))}")
    offered = FRAMEWORK_SCHEMES.get(framework)
    if offered and not titan and set(shard) - set(offered):
        raise InvalidValueError(f"{framework} shards with {', '.join(offered)}, not "
                                f"{', '.join(sorted(set(shard) - set(offered)))}")
    modes = tuple(r for r in TORCHTITAN_RECOMPUTE if recompute_layers(r) is None) if titan \
        else ("none", "selective", "full")
    if finetune != "full":
        # adapters' states are tiny: sharding them changes nothing worth a row; keep the
        # schemes that change where the frozen weights live (replicated or ZeRO-3 sharded)
        shard = tuple(dict.fromkeys("zero3" if x == "zero3" else "ddp" for x in shard))
    return shard, recompute, modes
