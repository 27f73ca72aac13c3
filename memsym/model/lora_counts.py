"""Exact trainable LoRA parameters of an architecture (split from :mod:`memsym.model.counts`,
which re-exports :func:`lora_parameter_count`, so that the counts module keeps room)."""

from __future__ import annotations

from ..errors import InvalidValueError
from ..terms.adapters import LORA_TARGETS, lower_choice
from .architecture import is_hybrid, lenient

__all__ = ["lora_parameter_count"]


def lora_parameter_count(arch, rank: int, targets=("q", "v")) -> int:
    """Exact trainable LoRA parameters of an architecture: r(d_in + d_out) per adapted matrix.

    Equals :func:`lora_parameters` when every target is square (d_in = d_out = h).

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
    total = 0
    for name in targets:
        key = lower_choice("LoRA target", name, LORA_TARGETS)
        if key == "gate" and not x.swiglu:
            continue  # an ungated MLP has no gate projection
        din, dout = shapes[key]
        total += int(rank) * (din + dout)
    return total * x.num_layers
