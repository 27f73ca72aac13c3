r"""What eager gated MLPs keep beyond a fused SwiGLU.

:func:`eager_clamped_glu_input`: the clamped gate half an eager clamped GLU keeps,
Megatron-core's ``glu`` without ``bias_activation_fusion`` (GPT-OSS's quick-GeGLU under
``--no-bias-gelu-fusion`` or ``--disable-bias-linear``; a clamped ``--swiglu`` under
``--no-bias-swiglu-fusion``), beside :func:`memsym.terms.activations.unfused_glu_products` (its
unclamped products) and :func:`memsym.terms.activations.clamped_glu_copy` (the fused path's).
:func:`eager_silu_output`: the SiLU output that torchtitan's and transformers' own
``w2(silu(w1 x) * w3 x)`` keeps.  :func:`eager_tanh_gelu`: the three tensors transformers'
unfused tanh GELU (``gelu_new``, GPT-2's) keeps beyond a fused GeLU's input.
:func:`glu_elements`: the size of one f-wide tensor of a layer's MLP, which these terms and
:mod:`memsym.terms.activations`' GLU terms count in.
"""

from __future__ import annotations

import sympy as sp

from ..symbols import c_f, f, f_e, f_sh, k, t, t_e
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["eager_clamped_glu_input", "eager_silu_output", "eager_tanh_gelu", "glu_elements"]


def glu_elements(moe: bool = False, shared: bool = False) -> sp.Expr:
    r"""Elements of one f-wide tensor of a layer's MLP, one micro-batch [elements].

    .. math:: \text{dense: } \tau f / t, \qquad
              \text{MoE: } R f_e / t_e \; (+\, \tau f_{sh} / t \text{ with shared experts})

    with :math:`\tau = sb/c` and :math:`R = c_f k \tau t_e / t` the routed token copies an
    expert rank receives (:mod:`memsym.terms.transformer_layer`).

    Parameters
    ----------
    moe : bool
        An MoE layer's routed experts instead of a dense MLP [1].
    shared : bool
        With ``moe``, the shared experts' tensor of the same kind too [1].

    Examples
    --------
    >>> glu_elements(), glu_elements(moe=True, shared=True)
    (b*f*s/(c*t), b*c_f*f_e*k*s/(c*t) + b*f_sh*s/(c*t))

    References
    ----------
    .. [shazeer-switch] arXiv:2101.03961, §2.2 (expert capacity: the routed copies).
    """
    tok, _ = token_split(False)
    if not moe:
        return tok * f / t
    return (c_f * k * tok * t_e / t) * f_e / t_e + (tok * f_sh / t if shared else 0)


def eager_clamped_glu_input(clamped: bool = True, *, moe: bool = False, width: int = 2) -> Term:
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
    width : {2, 4}
        Bytes of an element in the compute dtype (each 2 above; 4 in fp32) [bytes/element].

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
    expr = width * glu_elements(moe) if clamped else sp.Integer(0)
    return Term("eager_clamped_glu_input", expr, "16-bit clamped gate half kept by the "
                "activation of an eager clamped GLU (bias_activation_fusion False)",
                Source("megatron-core", "moe/experts.py:995-1016, transformer/mlp.py:320-334, "
                       "fusions/fused_bias_geglu.py:184-187, core/jit.py:16-21, :33 at "
                       "d98e8a64dd"),
                label="eager clamped GLU input")


def eager_silu_output(eager: bool = True, *, moe: bool = False, shared: bool = False,
                      width: int = 2) -> Term:
    r"""The SiLU output an eager SwiGLU keeps for its product's backward [bytes per layer].

    Per micro-batch and layer, with :math:`\tau = sb/c`, the routed token copies
    :math:`R = c_f k \tau t_e / t` an expert rank receives and :math:`w` bytes an element:

    .. math:: \text{dense: } w\tau f / t, \qquad
              \text{MoE: } w R f_e / t_e \; (+\, w\tau f_{sh} / t \text{ with shared experts})

    torchtitan's ``FeedForward`` and its grouped experts, and transformers' own MLPs and
    grouped-mm experts, run the gate in eager PyTorch: ``w2(F.silu(w1(x)) * w3(x))``.
    ``silu`` keeps its input (the gate projection's output), the product keeps both operands
    (SiLU's output and the up projection's output) and ``w2`` keeps the product.
    :func:`memsym.terms.activations.layer_activations` counts the gate and up outputs
    (``mlp_activation``, ``expert_activation``, ``shared_expert``) and the product (``fc2_input``)
    as a fused SwiGLU keeps them; the SiLU output is one more :math:`f`-wide tensor.  0 when the
    gate is fused (Megatron's ``bias_activation_fusion``; Megatron's eager ``glu`` is
    :func:`memsym.terms.activations.unfused_glu_products`).

    Parameters
    ----------
    eager : bool
        The gated MLP runs the eager ``silu(w1 x) * w3 x`` [1].
    moe : bool
        An MoE layer's grouped experts instead of a dense MLP [1].
    shared : bool
        The MoE layer's shared experts (eager too) keep theirs [1].
    width : {2, 4}
        Bytes of an element in the compute dtype (4 in fp32) [bytes/element].

    Examples
    --------
    Llama 3 8B (f = 14336) at s = 8192, b = 1, t = 1: one 16-bit 8192 x 14336 tensor a layer.

    >>> eager_silu_output().evaluate(s=8192, b=1, c=1, f=14336, t=1) == 2 * 8192 * 14336
    True
    >>> eager_silu_output(False).expr
    0

    References
    ----------
    .. [torchtitan] ``torchtitan/models/common/feed_forward.py:53-54`` (``FeedForward.forward``)
       and ``models/common/moe.py:94-107`` (``GroupedExperts``: ``F.silu`` of the w1 grouped mm
       times the w3 one) at b5bcd76c6.
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/llama/modeling_llama.py:163-165``
       (``LlamaMLP.forward``) and ``integrations/moe.py:498-504``
       (``grouped_mm_experts_forward``: the experts' ``_apply_gate``, ``act_fn(gate) * up``);
       ``tests/test_hf_activations.py`` and ``tests/fake_tracker.py`` measure it.
    """
    expr = width * glu_elements(moe, shared) if eager else sp.Integer(0)
    return Term("eager_silu_output", expr, "SiLU output kept by the product of an eager SwiGLU "
                "(silu(w1 x) * w3 x)", _EAGER_SILU, label="eager SiLU output")


_EAGER_SILU = Source("torchtitan", "torchtitan/models/common/feed_forward.py:53-54 and "
                     "models/common/moe.py:94-107 at b5bcd76c6; transformers 5.25.0 "
                     "models/llama/modeling_llama.py:163-165 (LlamaMLP.forward), "
                     "integrations/moe.py:498-504")


def eager_tanh_gelu(eager: bool = True, *, width: int = 2) -> Term:
    r"""What transformers' unfused tanh GELU keeps beyond a fused GeLU's input [bytes per layer].

    Per micro-batch and layer, with :math:`\tau = sb/c` and :math:`w` bytes an element:

    .. math:: 3\,w\,\tau f / t

    ``NewGELUActivation`` (``gelu_new``, the default activation of GPT-2, GPT-J and Phi)
    computes
    ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3))))`` op by op: ``pow`` keeps
    its input (the fc1 output, which :func:`memsym.terms.activations.layer_activations` counts
    as the GeLU's input), ``tanh`` its output, and the product its two operands ``0.5 * x`` and
    ``1 + tanh(...)``; the scalar multiplies and adds keep nothing.  Three more :math:`f`-wide
    tensors than a fused GeLU, which keeps only its input.  0 for any other activation.

    Parameters
    ----------
    eager : bool
        The MLP runs transformers' ``gelu_new`` [1].
    width : {2, 4}
        Bytes of an element in the compute dtype (4 in fp32) [bytes/element].

    Examples
    --------
    GPT-2 small (f = 3072) at s = 1024, b = 4: three 16-bit 4096 x 3072 tensors a layer.

    >>> eager_tanh_gelu().evaluate(s=1024, b=4, c=1, f=3072, t=1) == 3 * 2 * 4096 * 3072
    True
    >>> eager_tanh_gelu(False).expr
    0

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``activations.py:59-66``
       (``NewGELUActivation.forward``) and ``models/gpt2/modeling_gpt2.py:231-245``
       (``GPT2MLP``: ``act`` between ``c_fc`` and ``c_proj``); ``tests/test_hf_activations.py``
       measures it on ``GPT2Block``, ``tests/test_autocast_gpt2.py`` on GPT-2, GPT-J and Phi.
    """
    expr = 3 * width * glu_elements() if eager else sp.Integer(0)
    return Term("eager_tanh_gelu", expr, "gelu_new's tanh output, 0.5 x and 1 + tanh, kept by "
                "its op-by-op backward", _TANH_GELU, label="eager tanh GELU")


_TANH_GELU = Source("hf-transformers-5-25", "activations.py:59-66 (NewGELUActivation.forward); "
                    "models/gpt2/modeling_gpt2.py:231-245 (GPT2MLP)")
