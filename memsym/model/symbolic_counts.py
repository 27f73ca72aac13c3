r"""The textbook symbolic parameter counts: the GPT count in h, L, V, s_max and one component's
count (a whole model's, or one decoder layer's share) as a SymPy expression in the registry's
symbols, for a preset name or an :class:`~memsym.model.architecture.Architecture`.

Both are built on :func:`memsym.model.counts.parameter_expression` and its per-layer parts
(:func:`memsym.model.counts.layer_parts`, :func:`memsym.model.counts.mamba_parts`), which own
the counting; this module owns only the symbolic forms a reader compares with a paper's.
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError, UnknownNameError
from ..symbols import L, a, d_h, f, g, h  # noqa: F401  (L: the doctest's)
from .architecture import Architecture, lenient
from .counts import ZERO, layer_parts, mamba_parts, parameter_expression
from .layer_patterns import is_hybrid, mixer_counts
from .presets import preset

__all__ = ["gpt_parameter_expression", "symbolic_parameters"]


def gpt_parameter_expression(final_norm: bool = True) -> sp.Expr:
    """The GPT count in h, L, V, s_max only (f = 4h, d_h = h/a, tied, biases, learned positions).

    .. math:: N = 12Lh^2 + 13Lh + (V + s_{\\max})h \\;[+\\,2h]

    Narayanan et al. 2021 Eq. 2 omits the final LayerNorm (``final_norm=False`` reproduces it).

    Examples
    --------
    >>> sp.factor(gpt_parameter_expression(final_norm=False) - 12*L*h**2)
    h*(13*L + V + s_max)
    """
    arch = Architecture(name="gpt", num_layers=2, hidden_size=64, num_attention_heads=8,
                        vocab_size=128, max_position_embeddings=16)
    total = sum(parameter_expression(arch).values(), ZERO)
    total = total.subs({f: 4 * h, d_h: h / a, g: a})
    if not final_norm:
        total -= 2 * h
    return sp.expand(total)


_PER_LAYER = {"attention": False, "mamba": False, "norms": False, "mlp": False, "layer": False,
              "per_layer_inputs": False,
              "router": True, "latent_projections": True, "shared_experts": True,
              "experts": True, "moe_layer": True}


def symbolic_parameters(model, component: str = "total", per_layer: bool = False) -> sp.Expr:
    """One component's parameter count as a SymPy expression, for a preset name or Architecture.

    ``per_layer=True`` gives one decoder layer's share: ``attention``, ``norms``, ``mlp``,
    ``layer`` (a dense layer), ``router``, ``latent_projections``, ``shared_experts``,
    ``experts``, ``moe_layer``.
    Otherwise a key of :data:`COMPONENTS` or ``"total"``.

    Examples
    --------
    >>> symbolic_parameters("llama3-8b", "layer", per_layer=True)
    2*a*d_h*h + 2*d_h*g*h + 3*f*h + 2*h
    """
    arch = model if isinstance(model, Architecture) else preset(model)
    x = lenient(arch)
    if per_layer:
        if component not in _PER_LAYER:
            raise UnknownNameError("per-layer component", component, list(_PER_LAYER))
        moe = _PER_LAYER[component]
        if component == "mamba":
            if not mixer_counts(x)[1]:
                raise InvalidValueError(f"{x.name} has no Mamba layers (asked for mamba)")
            return sp.expand(sum(mamba_parts(x), ZERO))
        if component in ("layer", "moe_layer") and is_hybrid(x):
            raise InvalidValueError(f"{x.name} is a hybrid model whose layers differ: ask for "
                                    "attention, mamba, mlp, norms or the MoE parts")
        if moe and not x.is_moe:
            raise InvalidValueError(f"{x.name} has no MoE layers (asked for {component})")
        parts = layer_parts(x, moe)
        if component in ("layer", "moe_layer"):
            return sp.expand(sum((sum(q, ZERO) for q in parts.values()), ZERO))
        return sp.expand(sum(parts.get(component, (ZERO,)), ZERO))
    exprs = parameter_expression(x)
    if component == "total":
        return sum(exprs.values(), ZERO)
    if component not in exprs:
        raise UnknownNameError("parameter component", component, list(exprs) + ["total"])
    return exprs[component]
