"""What ``memsym search --emit`` holds for a framework's file: the searched sizes the file
cannot spell so that memsym's reader of that framework reads them back, and what an emitted
DeepSpeed expert split needs beside its config (:mod:`memsym.emit` writes the files).
"""

from __future__ import annotations

from .frameworks import FRAMEWORK

__all__ = ["AUTOEP_NOTE", "UNSPELLED", "held_for_emit"]

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
    ("tp 1, cp 1, vpp 1, recompute none: memsym's Deep", [1], [2])
    >>> held_for_emit("torchtitan", opts) is None
    True
    """
    sizes, why = UNSPELLED.get(framework, ({}, ""))
    held = [key for key, value in sizes.items() if options.get(key) is None]
    options.update({key: list(sizes[key]) for key in held})
    said = ", ".join(f"{key} {' or '.join(map(str, sizes[key]))}" for key in held)
    return f"{said}: {why}" if held else None
