r"""Activations a Mamba-2 layer keeps for its backward, as Megatron-core trains it.

Megatron-core's ``MambaLayer`` (``megatron/core/ssm/mamba_layer.py`` at d98e8a64dd) is a norm,
the ``MambaMixer`` and a bias-dropout-add; its training path (``MambaMixer._ssm_training``,
``megatron/core/ssm/mamba_mixer.py``) runs in_proj (Transformer Engine's
``TELayerNormColumnParallelLinear``, the norm fused in: ``models/hybrid/hybrid_layer_specs.py``),
then mamba_ssm's fused kernel ``mamba_split_conv1d_scan_combined`` on the in_proj output
``zxBCdt``, then the gated RMSNorm (``ExtendedRMSNorm``) and out_proj.  What each keeps:

======================================  ===================================  =================
tensor kept for backward                 elements per token                   memsym key
======================================  ===================================  =================
norm input, norm output = in_proj input  2h                                   ``norm_inputs``
in_proj output zxBCdt (kernel input)     2 d_ssm + 2 G N + H                  ``zxbcdt``
the scan's output before the z gate      d_ssm                                ``scan_output``
gated output = RMSNorm input; rstd       d_ssm; G fp32                        ``norm_input``
RMSNorm output = out_proj input          d_ssm                                ``out_proj_input``
hidden dropout mask (1 byte)             h                                    ``dropout_mask``
======================================  ===================================  =================

Under Transformer Engine FP8 the two GEMM inputs (in_proj's, the fused norm's output, and
out_proj's) are saved quantized, 1 byte per element (MXFP8 :math:`1 + 1/32`), as the
attention's and MLP's (:mod:`memsym.terms.transformer_layer`); the other tensors stay 16-bit.

The kernel saves ``zxbcdt`` and ``out_x`` only (``MambaSplitConv1dScanCombinedFn.forward``,
``ctx.save_for_backward``); its backward recomputes the depthwise conv1d output and the
chunked scan's states from them, so neither the conv1d output nor any SSM state
(:math:`H \cdot P \cdot N` per chunk) is kept between forward and backward.  Mamba-2 (Dao & Gu
2024 §7) names the projections: x, z of d_ssm = H·P, B and C of G·N each, dt of H.

transformers' mixers (Nemotron-H, Zamba2, Bamba) hand the gated norm's and out_proj's weights to
the same kernel in training, which then keeps the norm's rstd only: its output is recomputed in
backward and its input rebuilt from ``out_x`` and ``z``, so ``norm_input`` and
``out_proj_input`` give way to ``gated_norm_rstd`` under the model's own code (``hf_norms``).
This assumes transformers' fused path runs: its ``mamba2_split_conv1d_scan_combined`` is the
Hub kernel or mamba_ssm's (``use_kernel_func_from_hub_with_fallback("mamba_split_conv1d_scan_
combined", "mamba_ssm")``, transformers 5.25.0 ``modeling_nemotron_h.py`` lines 542-564); with
neither installed it is a stub returning None and the mixer falls back to its torch path
(lines 692-693, from 699 on: the conv1d output, the chunked scan's per-chunk states and the
norm's fp32 copies kept by autograd), which keeps far more than memsym counts.

Conventions as :mod:`memsym.terms.activations`: 2 bytes per 16-bit element, 1 per dropout-mask
element, per micro-batch of ``b`` sequences of ``s`` tokens on one GPU; tensor parallelism
divides the d_ssm-, G- and H-wide tensors by t (Megatron shards heads and groups), sequence
parallelism divides the h-wide ones by t too.
"""

from __future__ import annotations

from ..symbols import G_ssm, H_ssm, N_ssm, b, d_ssm, h, s, t
from ..term import Source, Term, Total
from .low_precision import saved_input_bytes

__all__ = ["mamba_layer_activations"]

_MIXER = "megatron/core/ssm/mamba_mixer.py at d98e8a64dd, MambaMixer._ssm_training"
_TE_LN = ("pytorch/module/layernorm_linear.py:478-487, :526-536 at d0067d0da6 (the fused "
          "norm's output ln_out saved quantized, columnwise only)")
_TE_LIN = ("pytorch/module/linear.py:616-621 at d0067d0da6 (saved_inputmat: the quantized "
           "input, columnwise only)")
_KERNEL = "ops/triton/ssd_combined.py MambaSplitConv1dScanCombinedFn.forward, ctx.save_for_backward"


def _projection_sources(fp8: bool) -> tuple:
    """The sources of in_proj's and out_proj's saved inputs: Transformer Engine's under FP8."""
    if fp8:
        return (Source("transformer-engine", _TE_LN + "; megatron-core models/hybrid/"
                       "hybrid_layer_specs.py (in_proj=TELayerNormColumnParallelLinear)"),
                Source("transformer-engine", _TE_LIN + "; megatron-core " + _MIXER
                       + " (self.out_proj(y), out_proj=TERowParallelLinear)"))
    return (Source("megatron-core", "megatron/core/models/hybrid/hybrid_layer_specs.py "
                   "(in_proj=TELayerNormColumnParallelLinear); mamba_layer.py MambaLayer.forward"),
            Source("megatron-core", _MIXER + " (self.out_proj(y))"))


def mamba_layer_activations(*, sequence_parallel: bool = False, dropout: bool = False,
                            gated_norm: bool = True, fp8_inputs: bool | str = False) -> Total:
    r"""Activations one Mamba-2 layer keeps for its backward, term by term [bytes].

    Per micro-batch and GPU, with :math:`\sigma = t` under sequence parallelism (else 1):

    .. math::

        \frac{(2 + b_x)\,sbh}{\sigma} + \frac{2sb\,(2d_{ssm} + 2GN + H)}{t}
        + \frac{2sb\,d_{ssm}}{t} + \frac{(2 d_{ssm} + 4G)\,sb}{t} + \frac{b_x\,sb\,d_{ssm}}{t}
        + \frac{\delta\, sbh}{\sigma}

    (:math:`\delta` = 1 with hidden dropout; without the gated RMSNorm, out_proj keeps the
    kernel's gated output and the norm terms drop).  :math:`b_x` is the width of the two
    GEMM inputs in_proj and out_proj save (:func:`~memsym.terms.low_precision.saved_input_bytes`):
    2 in 16 bits; under Transformer Engine FP8 the fused norm's output is saved quantized
    (``_LayerNormLinear``: ``ln_out``, columnwise only) and out_proj's input too (``_Linear``:
    ``saved_inputmat``), 1 byte (MXFP8 :math:`1 + 1/32`, NVFP4 :math:`1/2 + 1/16`); the norm
    input, ``zxBCdt`` (in_proj's 16-bit output), the kernel's ``out_x`` and the gated
    RMSNorm's input are no GEMM input and stay 16-bit.

    Parameters
    ----------
    sequence_parallel : bool
        Megatron sequence parallelism (the h-wide tensors divided by t).
    dropout : bool
        Hidden dropout after the mixer (its 1-byte mask; Megatron's ``hidden_dropout``).
    gated_norm : bool
        The gated RMSNorm over d_ssm before out_proj (Megatron's ``rmsnorm``, default True).
    fp8_inputs : bool or {"mxfp8", "nvfp4"}
        Transformer Engine FP8 compute (as :func:`~memsym.terms.activations.layer_activations`;
        another value raises InvalidValueError).

    Returns
    -------
    Total
        Cited terms in ``s, b, h, t, d_ssm, G_ssm, N_ssm, H_ssm`` [bytes].

    References
    ----------
    Megatron-core ``megatron/core/ssm/mamba_mixer.py`` and ``mamba_layer.py`` (megatron-core);
    mamba_ssm ``ops/triton/ssd_combined.py`` (mamba-ssm); Dao & Gu 2024 §7 (mamba2);
    Transformer Engine ``pytorch/module/linear.py`` and ``layernorm_linear.py`` at d0067d0da6
    (transformer-engine).

    Examples
    --------
    >>> tot = mamba_layer_activations()
    >>> [term.key for term in tot]
    ['norm_inputs', 'zxbcdt', 'scan_output', 'norm_input', 'out_proj_input']
    >>> tot.expr.subs({s: 1, b: 1, t: 1, h: 4, d_ssm: 8, G_ssm: 1, N_ssm: 2, H_ssm: 2})
    112

    Under FP8 in_proj's 4 and out_proj's 8 saved inputs take 1 byte each, 12 fewer:

    >>> mamba_layer_activations(fp8_inputs=True).expr.subs(
    ...     {s: 1, b: 1, t: 1, h: 4, d_ssm: 8, G_ssm: 1, N_ssm: 2, H_ssm: 2})
    100
    """
    sigma = t if sequence_parallel else 1
    tok = s * b
    bx = saved_input_bytes(fp8_inputs)
    fp8 = " (FP8)" if fp8_inputs else ""
    norm_src, out_src = _projection_sources(bool(fp8_inputs))
    terms = [
        Term("norm_inputs", (2 + bx) * tok * h / sigma,
             "the fused norm's input (16-bit) and its output = in_proj's input" + fp8, norm_src,
             label="norm"),
        Term("zxbcdt", 2 * tok * (2 * d_ssm + 2 * G_ssm * N_ssm + H_ssm) / t,
             "in_proj output z, x, B, C, dt, saved by the fused kernel (conv1d recomputed)",
             Source("mamba-ssm", _KERNEL + " (zxbcdt)"), label="zxBCdt"),
        Term("scan_output", 2 * tok * d_ssm / t,
             "the chunked scan's output before the z gate, saved by the fused kernel",
             Source("mamba-ssm", _KERNEL + " (out_x); the chunk states recomputed in backward"),
             label="scan"),
    ]
    if gated_norm:
        terms += [
            Term("norm_input", (2 * d_ssm + 4 * G_ssm) * tok / t,
                 "the gated RMSNorm's input (16-bit) and per-group fp32 rstd",
                 Source("mamba-ssm", "ops/triton/layernorm_gated.py LayerNormFn.forward, "
                        "ctx.save_for_backward(x, ..., rstd) (rstd: ngroups fp32 per token); "
                        + _MIXER + " (self.norm)"), label="RMSNorm"),
            Term("out_proj_input", bx * tok * d_ssm / t,
                 "out_proj's input (the norm's output)" + fp8,
                 out_src, label="out_proj"),
        ]
    else:
        terms.append(Term("out_proj_input", bx * tok * d_ssm / t,
                          "out_proj's input (the kernel's gated output)" + fp8,
                          out_src, label="out_proj"))
    if dropout:
        terms.append(Term("dropout_mask", tok * h / sigma, "hidden dropout mask (1 byte)",
                          Source("megatron-core", "megatron/core/ssm/mamba_layer.py "
                                 "MambaLayer.forward (mamba_bda with hidden_dropout)"),
                          label="dropout"))
    return Total("activations of one Mamba-2 layer", tuple(terms))
