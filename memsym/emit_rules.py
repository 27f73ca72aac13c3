"""What ``memsym search --emit`` holds for a framework's file: the searched sizes the file
cannot spell so that memsym's reader of that framework reads them back, and what an emitted
DeepSpeed expert split needs beside its config (:mod:`memsym.emit` writes the files).
"""

from __future__ import annotations

from .emit_held import NotExpressible
from .frameworks import FRAMEWORK

__all__ = ["AUTOEP_NOTE", "AUTOTP_NOTE", "ULYSSES_NOTE", "UNSPELLED", "held_for_emit",
           "megatron_overlaps", "ulysses_section"]

#: What an emitted ``expert_parallel`` section needs beside the config.  DeepSpeed (edaa722126)
#: reads it as AutoEP: ``runtime/config.py:128-133`` (``get_expert_parallel_config``),
#: ``runtime/engine.py:570-643`` (``_configure_expert_parallel``: EP groups of ``autoep_size``
#: ranks, then the detected MoE blocks replaced), ``module_inject/auto_ep_config.py:270-290``
#: (``autoep_size`` divides each layer's experts); it detects the transformers blocks of its
#: presets (``module_inject/auto_ep_presets/registry.py:19-25``), whose experts may be
#: transformers 5's fused 3-D tensors or a legacy ``nn.ModuleList`` (``auto_ep.py:310-312``,
#: :153-156).  Only the deepseek_v2, deepseek_v3 and qwen3_5_moe adapters check the installed
#: transformers (``_requires_transformers_version_validation``: ``deepseek_v2.py:45-46``,
#: ``deepseek_v3.py:45-46``, ``qwen3_5_moe.py:53-54``; >= 5.0, 5.0, 5.2; the default adapter,
#: mixtral's and qwen3_moe's do not, ``auto_ep_presets/base.py:185-226``).  Without AutoEP,
#: DeepSpeed's MoE is model code: ``moe/layer.py:42`` ``MoE(..., ep_size=1, ...)``, an argument
#: no config sets.
AUTOEP_NOTE = ("expert_parallel is DeepSpeed's AutoEP: it replaces the transformers MoE blocks "
               "it detects (presets mixtral, qwen3_moe/qwen2_moe, qwen3_5_moe, deepseek_v2, "
               "deepseek_v3; experts as fused tensors or a legacy nn.ModuleList; DeepSpeed "
               "requires transformers >= 5.0 for deepseek_v2/v3 and >= 5.2 for qwen3_5_moe; "
               "another model needs its moe_layer_pattern/router_pattern/expert_pattern keys); "
               "a model built on deepspeed.moe.layer.MoE ignores it and needs MoE(ep_size=E) "
               "in its own code")


#: What an emitted ``tensor_parallel`` section needs beside the config.  DeepSpeed
#: (edaa722126) shards what the model's transformers ``tp_plan`` names
#: (``runtime/engine.py:816-848``), else a ``partition_config`` / ``preset_model``, else its
#: heuristic parser (``:849-861``), which also splits the embedding (``auto_tp.py:557-584``):
#: memsym counts the ``tp_plan`` split (:mod:`memsym.readers.deepspeed_autotp`).
AUTOTP_NOTE = ("tensor_parallel.autotp_size is DeepSpeed's AutoTP: memsym counts the split of "
               "the model's transformers tp_plan (q/k/v, gate/up by columns, o_proj, down_proj "
               "by rows, lm_head by vocabulary; the embedding whole); a model without a tp_plan "
               "falls back to DeepSpeed's heuristic parser, which splits differently")

#: What an emitted ``sequence_parallel_size`` needs beside the config: the key alone changes
#: DeepSpeed's batch rule (``runtime/config.py:713-724``); Ulysses runs once the script
#: registers its attention (:mod:`memsym.readers.deepspeed_ulysses`).
ULYSSES_NOTE = ("sequence_parallel_size is DeepSpeed Ulysses: the training script must call "
                "UlyssesSPAttentionHF.register_with_transformers and pass its mpu to "
                "deepspeed.initialize, and wrap its DataLoader in UlyssesSPDataLoaderAdapter (or "
                "give the Trainer ParallelismConfig(sp_backend=\"deepspeed\", sp_size=c)); "
                "memsym counts it as context parallelism c by all-to-all")


def ulysses_section(row) -> dict:
    """The ``sequence_parallel_size`` key of a DeepSpeed row's c (Ulysses,
    :mod:`memsym.readers.deepspeed_ulysses`), or ``{}`` at c = 1.

    >>> ulysses_section({"c": 4}), ulysses_section({"c": 1})
    ({'sequence_parallel_size': 4}, {})
    """
    return {"sequence_parallel_size": row["c"]} if row["c"] > 1 else {}


#: The searched sizes a framework's file spells only as here, and why
#: (:attr:`memsym.frameworks.Framework.searched_sizes`, where they are cited): a search holds
#: those the command line leaves unnamed whether or not it emits, so that it ranks rows its
#: file can write.  torchtitan's file spells every searched size (:mod:`memsym.emit` writes
#: its expert parallelism too).
UNSPELLED = {name: ({k: list(v) for k, v in f.searched_sizes}, f.searched_sizes_reason)
             for name, f in FRAMEWORK.items() if f.searched_sizes}


def held_for_emit(framework: str, options: dict) -> str | None:
    """Hold in ``options`` (:func:`memsym.search.search`'s keywords) the sizes ``framework``'s
    file cannot spell (:data:`UNSPELLED`) where none is given; the line saying so, or None.

    >>> opts = {"tp": None, "pp": [2], "cp": None, "vpp": None}
    >>> held_for_emit("deepspeed", opts)[:48], opts["tp"], opts["pp"]
    ('tp 1, cp 1, vpp 1, recompute none or full: memsy', [1], [2])
    >>> held_for_emit("torchtitan", opts) is None
    True
    """
    sizes, why = UNSPELLED.get(framework, ({}, ""))
    held = [key for key, value in sizes.items() if options.get(key) is None]
    options.update({key: list(sizes[key]) for key in held})
    said = ", ".join(f"{key} {' or '.join(map(str, sizes[key]))}" for key in held)
    return f"{said}: {why}" if held else None


def megatron_overlaps(over: dict, scheme: str) -> list:
    """Megatron-LM's data-parallel overlap flags of the overlaps a row was priced with
    (:func:`memsym.emit._overlaps`), as Megatron-LM's ``validate_args`` allows them
    (``megatron/training/arguments.py:1024-1029`` at ``d98e8a64dd``): ``--overlap-param-gather``
    only with ``--use-distributed-optimizer``, Megatron-FSDP (or dist_muon, which memsym does
    not emit) and only with ``--overlap-grad-reduce``.

    A plain DDP row (a job's own overlaps searched over DDP too) gathers no parameters, so
    the flag is left out, as Megatron-LM requires and as the Megatron-Bridge form writes it
    (``ddp.overlap_param_gather=false``): the row's bytes and step time are the same (memsym
    prices no parameter all-gather without the distributed optimizer,
    :mod:`memsym.timing.data_parallel`).  Refused instead: the parameter-gather overlap
    without the gradient-reduce one (Megatron-LM refuses it, and dropping it would change
    the priced step).  Megatron-FSDP ``no_shard`` (DDP's states) keeps the flag: Megatron-LM
    accepts it with ``--use-megatron-fsdp`` whatever the strategy (``arguments.py``
    l. 1024-1026 at ``d98e8a64dd``), and so does memsym's job (:mod:`memsym.job_checks`).

    Examples
    --------
    >>> megatron_overlaps({"overlap_grad_reduce": True, "overlap_param_gather": True},
    ...                    "distributed-optimizer")
    ['--overlap-grad-reduce', '--overlap-param-gather']
    >>> megatron_overlaps({"overlap_grad_reduce": True, "overlap_param_gather": True}, "ddp")
    ['--overlap-grad-reduce']
    >>> megatron_overlaps({"overlap_grad_reduce": True, "overlap_param_gather": True},
    ...                    "no_shard")
    ['--overlap-grad-reduce', '--overlap-param-gather']
    >>> try:
    ...     megatron_overlaps({"overlap_param_gather": True}, "fsdp")
    ... except NotExpressible as why:
    ...     print(str(why)[:60])
    overlap_param_gather without overlap_grad_reduce: Megatron-L
    """
    og, opg = bool(over.get("overlap_grad_reduce")), bool(over.get("overlap_param_gather"))
    if scheme == "ddp":
        opg = False               # no --use-distributed-optimizer: no parameter all-gather
    if opg and not og:
        raise NotExpressible("overlap_param_gather without overlap_grad_reduce: Megatron-LM's "
                             "--overlap-param-gather needs --overlap-grad-reduce (validate_args)")
    return ["--overlap-grad-reduce"] * og + ["--overlap-param-gather"] * opg
