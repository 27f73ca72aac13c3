"""Exact trainable LoRA parameters of an architecture (split from :mod:`memsym.model.counts`,
which re-exports :func:`lora_parameter_count`, so that the counts module keeps room)."""

from __future__ import annotations

from ..errors import InvalidValueError
from ..terms.adapters import LORA_TARGETS, lower_choice
from .architecture import is_hybrid, lenient

__all__ = ["lora_parameter_count"]


def lora_parameter_count(arch, rank: int, targets=("q", "v"), *, fused: bool = False) -> int:
    """Exact trainable LoRA parameters of an architecture: r(d_in + d_out) per adapted matrix.

    Equals :func:`lora_parameters` when every target is square (d_in = d_out = h).  Under
    Megatron (``fused``) Q, K and V are one module, linear_qkv (h -> q + 2kv), and a gated
    MLP's gate and up one, linear_fc1 (h -> 2f): Megatron-Bridge puts one adapter on each
    module (``LoRA.transform``, src/megatron/bridge/peft/lora.py:159-250 at 067f987df0:
    one ``ParallelLinearAdapter`` of the module's in and out features), so the fused group is
    one matrix there.

    Parameters
    ----------
    arch : memsym.model.Architecture
    rank : int
        LoRA rank r.
    targets : iterable of str
        Subset of :data:`LORA_TARGETS` (``"all"`` for every linear layer); dense layers only.

    Examples
    --------
    >>> from memsym.model import preset
    >>> lora_parameter_count(preset("gpt3-175b"), 8)
    37748736

    Llama-3 8B at r = 8 on Bridge's four modules: r(h + q + 2kv) + r(q + h) + r(h + 2f) +
    r(f + h) = 8 (10240 + 8192 + 32768 + 18432) = 557056 per layer, 32 layers:

    >>> lora_parameter_count(preset("llama3-8b"), 8, "all", fused=True)
    17825792
    """
    if isinstance(rank, bool) or int(rank) != rank or rank < 1:
        raise InvalidValueError(f"LoRA rank must be a whole number >= 1, got {rank!r}")
    x = lenient(arch)
    if is_hybrid(x):    # its layers differ: the per-layer adapter below would miscount them
        raise InvalidValueError(f"LoRA adapters of {x.name!r}, a hybrid Mamba/attention model, "
                                "are not modelled (its layers hold different projections)")
    if targets == "all":
        targets = LORA_TARGETS
    hs, q = x.hidden_size, x.num_attention_heads * x.kv_channels
    kv = x.num_query_groups * x.kv_channels
    f = x.ffn_hidden_size
    shapes = {"q": (hs, q), "k": (hs, kv), "v": (hs, kv), "o": (q, hs),
              "gate": (hs, f), "up": (hs, f), "down": (f, hs)}
    keys = {lower_choice("LoRA target", name, LORA_TARGETS) for name in targets}
    if not x.swiglu:
        keys.discard("gate")  # an ungated MLP has no gate projection
    groups = [(k,) for k in LORA_TARGETS if k in keys]
    if fused:   # Megatron's linear_qkv and linear_fc1: one adapter for the whole module;
        # part of one (q and v alone) is Bridge's CanonicalLoRA (peft/canonical_lora.py:180 at
        # 067f987df0: linear_q, linear_k, linear_v adapters of their own), one per matrix
        whole = [g for g in (("q", "k", "v"), ("gate", "up") if x.swiglu else ("up",))
                 if set(g) <= keys]
        groups = whole + [(k,) for k in LORA_TARGETS
                          if k in keys and not any(k in g for g in whole)]
    total = 0
    for group in groups:
        chosen = [k for k in group if k in keys]
        din = shapes[chosen[0]][0]
        total += int(rank) * (din + sum(shapes[k][1] for k in chosen))
    return total * x.num_layers
