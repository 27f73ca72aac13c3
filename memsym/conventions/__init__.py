"""Compatibility conventions: NVIDIA's own memory estimators, reproduced exactly as cited terms.

``megatron-lm`` reproduces Megatron-LM core 0.19 ``megatron/training/theoretical_memory_usage.py``
and ``megatron-bridge`` reproduces Megatron-Bridge 0.6 ``estimate_training_memory``, quirks
included: each framework counts parameters its own way (norms, routers, MLA, MTP, vocabulary
padding), shards them its own way, and has its own activation formula.  The results are exact
SymPy numbers (the frameworks compute the same quantities in floating point).  Where memsym's
own model differs, and why, is tabulated in ``docs/conventions.md``.

The formulas are transcribed in ``shared/guide/MEGATRON-ESTIMATORS.md`` (§2 Megatron-LM, §3
Megatron-Bridge) and were checked against the published source.

References
----------
.. [megatron-lm] NVIDIA, Megatron-LM core 0.19, ``megatron/training/theoretical_memory_usage.py``.
.. [megatron-bridge] NVIDIA, Megatron-Bridge 0.6,
   ``src/megatron/bridge/training/utils/theoretical_memory_utils.py``.
"""


from __future__ import annotations

import sympy as sp

from ..errors import choose

from ..vocabulary import CONVENTION_NAMES
from .formulas import (bridge_bytes_per_parameter, megatron_bridge_activation,
                       megatron_bytes_per_parameter, megatron_lm_activation, padded_vocab,
                       pipeline_factor)
from .knobs import ConventionResult
from .megatron_bridge import megatron_bridge
from .megatron_lm import megatron_lm


__all__ = [
    "CONVENTION_NAMES",
    "ConventionResult",
    "convention_breakdown",
    "megatron_lm",
    "megatron_bridge",
    "megatron_bytes_per_parameter",
    "bridge_bytes_per_parameter",
    "pipeline_factor",
    "megatron_lm_activation",
    "megatron_bridge_activation",
    "padded_vocab",
]


# ------------------------------------------------------------------------------------------------
# One entry point for the command line
# ------------------------------------------------------------------------------------------------
def convention_breakdown(convention: str, arch, layout=None, training=None, **knobs) -> dict:
    """Bytes per GPU under a framework's convention, as a plain dict (for ``memsym estimate``).

    Parameters
    ----------
    convention : {"megatron-lm", "megatron-bridge"}
    arch : memsym.model.Architecture
    layout, training : mapping or object
        Knobs as for :func:`megatron_lm`.
    **knobs
        Overrides (``num_microbatches``, ``should_pad_vocab`` for Bridge, ...).

    Returns
    -------
    dict
        ``weights_and_optimizer``, ``weights_and_optimizer_dense``,
        ``weights_and_optimizer_experts``, ``activations``, ``total``: exact SymPy numbers
        [bytes] (the frameworks' formulas can give fractions of a byte, e.g. the x1.05 of
        path B); ``bytes``: the same rounded up to whole bytes (ints, JSON-ready);
        ``terms``: exact bytes per term; ``path``, ``assumptions``, ``parameters``,
        ``units`` and ``result`` (the :class:`ConventionResult`).

    Examples
    --------
    >>> from memsym.model import Architecture
    >>> gpt = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1000)
    >>> out = convention_breakdown("megatron-lm", gpt, dict(t=2), dict(s=32, b=1))
    >>> out["path"], out["bytes"]["total"]
    ('B', 1621824)
    """
    key = choose("convention", convention, CONVENTION_NAMES)
    fn = megatron_lm if key == "megatron-lm" else megatron_bridge
    res = fn(arch, layout, training, **knobs)
    bd = res.breakdown()
    dense = sum((bd[k_] for k_ in bd if k_.startswith("weights_and_optimizer")
                 and k_ != "weights_and_optimizer_experts"), sp.Integer(0))
    experts = bd.get("weights_and_optimizer_experts", sp.Integer(0))
    out = {
        "convention": key,
        "weights_and_optimizer": dense + experts,
        "weights_and_optimizer_dense": dense,
        "weights_and_optimizer_experts": experts,
        "activations": bd["activations"],
        "total": bd["total"],
        "terms": {k_: val for k_, val in bd.items() if k_ != "total"},
        "path": res.path,
        "assumptions": list(res.assumptions),
        "parameters": res.parameters,
        "units": "bytes (exact); the frameworks print MiB (2^20) as 'MB' and Bridge's GB is GiB",
        "result": res,
    }
    out["bytes"] = {k_: int(sp.ceiling(out[k_])) for k_ in (
        "weights_and_optimizer", "weights_and_optimizer_dense", "weights_and_optimizer_experts",
        "activations", "total")}
    return out
