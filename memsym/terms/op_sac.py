"""torchtitan's per-op selective activation checkpointing of one dense block.

:func:`memsym.terms.activations.layer_activations` with ``recompute="selective-op"``.
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError
from ..symbols import a, d_h, f, g, h, t
from ..term import Source, Term, Total

__all__ = ["op_sac_layer", "sac_attention_recomputed"]


_TT_SAC = Source("torchtitan", "torchtitan/distributed/activation_checkpoint.py, "
                 "_apply_op_sac / _custom_policy (_save_list: aten.mm, SDPA flash/efficient, "
                 "reduce_scatter_tensor, abs, max; every second mm recomputed)")
_SAC_CACHE = Source("pytorch-checkpoint-sac", "torch/utils/checkpoint.py, "
                    "_CachingTorchDispatchMode.__torch_dispatch__ (eager: every MUST_SAVE "
                    "output stored until the recompute pops it)")
_PARTITION = Source("pytorch-aot-partitioner", "torch/_functorch/partitioners.py, "
                    "min_cut_rematerialization_partition (compiled: saves only what the "
                    "backward graph reads; must_recompute for PREFER_RECOMPUTE)")


def op_sac_layer(tok, sig, *, gated, flash, moe, mla, sequence_parallel,
                 compiled=False, width=2) -> Total:
    r"""torchtitan's per-op selective activation checkpointing of one dense block [bytes].

    The policy saves the outputs of ``aten.mm`` except every second one (counted per block and
    per forward), of the SDPA kernels and of ``reduce_scatter_tensor``, and recomputes the
    rest (norms, RoPE, SiLU, products).  A torchtitan Llama block calls its matmuls in the
    order wq, wk, wv, wo, w1, w3, w2, so mm 1, 3, 5, 7 are kept:

    .. math::

        \underbrace{\tfrac{2\tau h}{\sigma}}_{\text{block input}}
        + \underbrace{\tfrac{2\tau a d_h}{t}}_{w_q}
        + \underbrace{\tfrac{2\tau g d_h}{t}}_{w_v}
        + \underbrace{\tfrac{2\tau a d_h}{t} + \tfrac{4 a\tau}{t}}_{\text{SDPA out, logsumexp}}
        + \underbrace{\tfrac{2\tau f}{t}}_{w_1}
        + \underbrace{2\tau h}_{w_2}
        + [\mathrm{SP}]\,\underbrace{\tfrac{2\cdot 2\tau h}{\sigma}}_{\text{reduce-scatters of } w_o, w_2}

    (under tensor parallelism the row-parallel ``w2`` matmul output is the full-token partial
    sum before its reduce-scatter; each 2 is the compute dtype's bytes, ``width`` = 4 in fp32).  Dense layers with a gated MLP and flash/efficient
    attention only: other blocks raise :class:`memsym.errors.InvalidValueError`.

    That is what *eager* SAC keeps: PyTorch's ``_CachingTorchDispatchMode`` stores the output
    of every op the policy marks ``MUST_SAVE`` from the forward to the recompute, whether or
    not the backward reads it.  The ``w2`` output (mm 7) and, under SP, its reduce-scatter
    are read by no backward (they only feed the residual add, whose backward keeps nothing).
    With the block under ``torch.compile`` (``compiled=True``: torchtitan's
    ``apply_compile``, each checkpointed ``TransformerBlock`` compiled) the SAC tags become
    partitioner constraints and AOTAutograd's min-cut partition saves only tensors the
    backward graph reads, so the compiled block keeps

    .. math::

        A_\text{compiled} = A_\text{eager} - 2\tau h
            - [\mathrm{SP}]\,\tfrac{2\tau h}{\sigma}

    (``tests/test_engine_sac.py`` runs a port of torchtitan's block both ways: eager, measured
    with torch's ``MemTracker`` under ``FakeTensorMode``; compiled, the forward graph's saved
    outputs under the Inductor partition).

    Examples
    --------
    Llama-3 8B (h = 4096, a = 32, g = 8, d_h = 128, f = 14336), one 8192-token sequence, t = 1:

    >>> from memsym.terms.activations import layer_activations
    >>> A = layer_activations(gated=True, flash=True, recompute="selective-op")
    >>> A.evaluate(s=8192, b=1, c=1, t=1, h=4096, a=32, g=8, d_h=128, f=14336) == \
    ...     8192 * (2 * 4096 * 4 + 2 * 1024 + 4 * 32 + 2 * 14336)
    True

    Compiled, the w2 output is not kept:

    >>> C = layer_activations(gated=True, flash=True, recompute="selective-op", compiled=True)
    >>> A.evaluate(s=8192, b=1, c=1, t=1, h=4096, a=32, g=8, d_h=128, f=14336) - \
    ...     C.evaluate(s=8192, b=1, c=1, t=1, h=4096, a=32, g=8, d_h=128, f=14336) == 2 * 8192 * 4096
    True

    References
    ----------
    torchtitan ``torchtitan/distributed/activation_checkpoint.py`` (``_apply_op_sac``);
    PyTorch ``torch/utils/checkpoint.py`` (``_CachingTorchDispatchMode``) and
    ``torch/_functorch/partitioners.py`` (``min_cut_rematerialization_partition``).
    """
    if moe or mla or not gated or not flash:
        raise InvalidValueError("recompute 'selective-op' (torchtitan per-op SAC) is modelled for "
                                "dense gated-MLP layers with flash attention only")
    terms = [
        Term("layer_input", width * tok * h / sig, "block input (the checkpoint's input)", _TT_SAC,
             label="layer input"),
        Term("q", width * tok * a * d_h / t, "wq output (mm 1, saved)", _TT_SAC, label="q"),
        Term("v", width * tok * g * d_h / t, "wv output (mm 3, saved; wk, mm 2, recomputed)", _TT_SAC,
             label="v"),
        Term("attention_output", width * tok * a * d_h / t + 4 * a * tok / t,
             "SDPA output and fp32 logsumexp (saved; wo, mm 4, recomputed)", _TT_SAC,
             label="attention output"),
        Term("w1_output", width * tok * f / t, "w1 output (mm 5, saved; w3, mm 6, recomputed)",
             _TT_SAC, label="w1 output"),
    ]
    if not compiled:   # eager: the SAC cache holds it though no backward reads it
        terms.append(Term("w2_output", width * tok * h, "w2 output (mm 7, saved by eager SAC's "
                          "cache; no backward reads it)", _SAC_CACHE, label="w2 output"))
    if sequence_parallel:
        n_rs = 1 if compiled else 2
        terms.append(Term("reduce_scatter_outputs", n_rs * width * tok * h / sig,
                          "reduce-scatter outputs of wo" + ("" if compiled else " and w2")
                          + " (saved)", _PARTITION if compiled else _TT_SAC,
                          label="reduce-scatter outputs"))
    return Total("activations per layer (torchtitan per-op SAC)", tuple(terms))


def sac_attention_recomputed(layer: Total) -> sp.Expr:
    r"""What a per-op SAC block does not keep when SDPA runs a kernel off the save list [bytes].

    :func:`op_sac_layer` keeps the SDPA output because torchtitan's ``_save_list`` names the
    flash and efficient kernels.  At 6fc499f ``models/attention.py:205-211`` puts cuDNN
    attention first on compute capability 10.0 (B200; since #1196) and the llama3 list
    (``models/llama3/infra/parallelize.py:234-243``) does not name
    ``_scaled_dot_product_cudnn_attention`` (b39377f9f, #2095, added it in December 2025 "to
    avoid recomputing attention during backward"): the policy recomputes the attention and
    the block keeps neither its 16-bit output nor its fp32 logsumexp:

    .. math:: \Delta A = \tfrac{2\tau a d_h}{t} + \tfrac{4 a \tau}{t}

    Parameters
    ----------
    layer : Total
        One block's :func:`op_sac_layer` [bytes].

    Returns
    -------
    sympy.Expr
        The bytes it no longer keeps [bytes].

    Examples
    --------
    Llama-3 8B (a = 32 heads of d_h = 128), one 8192-token sequence, t = 1: the bf16 output,
    8192 x 4096 x 2 bytes, and the logsumexp, 8192 x 32 x 4 bytes.

    >>> from memsym.symbols import a, b, c, d_h, s, t
    >>> from memsym.terms.activations import layer_activations
    >>> A = layer_activations(gated=True, flash=True, recompute="selective-op", compiled=True)
    >>> sac_attention_recomputed(A).subs({s: 8192, b: 1, c: 1, t: 1, a: 32, d_h: 128}) == \
    ...     8192 * 4096 * 2 + 8192 * 32 * 4
    True

    References
    ----------
    torchtitan ``models/attention.py`` and ``models/llama3/infra/parallelize.py`` at 6fc499f;
    b39377f9f (#2095); #1196 (B200 memory 46.39 GiB before, 44.59 GiB after cuDNN).
    """
    return sp.Add(*(term.expr for term in layer if term.key == "attention_output"))
