r"""The clamped gate half an eager clamped GLU keeps: Megatron-core's ``glu`` without
``bias_activation_fusion`` (GPT-OSS's quick-GeGLU under ``--no-bias-gelu-fusion`` or
``--disable-bias-linear``; a clamped ``--swiglu`` under ``--no-bias-swiglu-fusion``), beside :func:`memsym.terms.activations.unfused_glu_products` (its
unclamped products) and :func:`memsym.terms.activations.clamped_glu_copy` (the fused path's).
"""

from __future__ import annotations

import sympy as sp

from ..symbols import c_f, f, f_e, k, t, t_e
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["eager_clamped_glu_input"]


def eager_clamped_glu_input(clamped: bool = True, *, moe: bool = False) -> Term:
    r"""The clamped gate half an eager clamped GLU keeps [bytes per layer].

    Per micro-batch and layer, with :math:`\tau = sb/c` and the routed token copies
    :math:`R = c_f k \tau t_e / t` an expert rank receives:

    .. math:: \text{dense: } 2\tau f / t, \qquad \text{MoE: } 2 R f_e / t_e

    Without ``bias_activation_fusion`` (Megatron-LM's ``--no-bias-gelu-fusion``, or
    ``--disable-bias-linear``, which turns it off) a clamped GLU (``activation_func_clamp_value``,
    GPT-OSS's ``swiglu_limit``) runs eagerly, in the grouped experts and in a dense MLP alike::

        x_glu = x_glu.clamp(min=None, max=val); x_linear = x_linear.clamp(min=-val, max=val)
        return activation_func(x_glu) * (x_linear + glu_linear_offset)

    The activation keeps its input, now the clamped gate half, a new 16-bit tensor :math:`f/t`
    (:math:`f_e/t_e`) wide: Megatron's ``quick_gelu`` is ``jit_fuser``-compiled
    (``torch.compile``), whose partitioner saves the input and recomputes the sigmoid, as
    ``F.silu``, ``--swiglu``'s activation, saves its input (``SiluBackward0``).  The clamped linear half only feeds ``+ glu_linear_offset``,
    which keeps no operand.  The unclamped products are
    :func:`memsym.terms.activations.unfused_glu_products` (the same for both activations);
    the fused kernel's copy is :func:`memsym.terms.activations.clamped_glu_copy`.
    0 unclamped.

    Parameters
    ----------
    clamped : bool
        The GLU input is clamped and runs eagerly under Megatron-core [1].
    moe : bool
        An MoE layer's grouped experts (``TEGroupedMLP``) instead of a dense MLP [1].

    Examples
    --------
    GPT-OSS's example shape (f_e = 2048, top-2) at s = 8192, b = 1, t = t_e = 1: R = 2 x 8192
    routed rows, each keeping 2048 more 16-bit elements:

    >>> eager_clamped_glu_input(moe=True).evaluate(s=8192, b=1, c=1, c_f=1, k=2, t=1, t_e=1,
    ...                                            f_e=2048) == 2 * 8192 * 2048 * 2
    True
    >>> eager_clamped_glu_input(False).expr
    0

    References
    ----------
    .. [megatron-core] megatron/core/transformer/moe/experts.py:995-1016 at d98e8a64dd (the
       eager ``glu``, clamps at :1004-1006), transformer/mlp.py:320-334 (clamps at :327-329),
       fusions/fused_bias_geglu.py:184-187 (``@jit_fuser def quick_gelu``), core/jit.py:16-21,
       :33 (``jit_fuser = torch.compile`` from torch 2.2); training/arguments.py:1604-1606 and
       argument_utils.py:314-319 (``bias_gelu_fusion``).
    .. [pytorch] ``tests/test_clamped_glu.py`` replays the eager code under saved-tensor hooks
       with ``quick_gelu`` compiled by a min-cut partitioning backend, and with ``F.silu``.
    """
    tok, _ = token_split(False)
    if not clamped:
        expr = sp.Integer(0)
    elif moe:
        expr = 2 * (c_f * k * tok * t_e / t) * f_e / t_e
    else:
        expr = 2 * tok * f / t
    return Term("eager_clamped_glu_input", expr, "16-bit clamped gate half kept by the "
                "activation of an eager clamped GLU (bias_activation_fusion False)",
                Source("megatron-core", "moe/experts.py:995-1016, transformer/mlp.py:320-334, "
                       "fusions/fused_bias_geglu.py:184-187, core/jit.py:16-21, :33 at "
                       "d98e8a64dd"),
                label="eager clamped GLU input")
