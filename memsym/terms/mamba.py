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
norm input, norm output = in_proj input  2h                                   ``norm_inputs``,
                                                                              ``in_proj_input``
in_proj output zxBCdt (kernel input)     2 d_ssm + 2 G N + H                  ``zxbcdt``
the scan's output before the z gate      d_ssm                                ``scan_output``
gated output = RMSNorm input; rstd       d_ssm; G fp32                        ``norm_input``
RMSNorm output = out_proj input          d_ssm                                ``out_proj_input``
hidden dropout mask (1 byte)             h                                    ``dropout_mask``
======================================  ===================================  =================

The kernel saves ``zxbcdt`` and ``out_x`` only (``MambaSplitConv1dScanCombinedFn.forward``,
``ctx.save_for_backward``); its backward recomputes the depthwise conv1d output and the
chunked scan's states from them, so neither the conv1d output nor any SSM state
(:math:`H \cdot P \cdot N` per chunk) is kept between forward and backward.  Mamba-2 (Dao & Gu
2024 §7) names the projections: x, z of d_ssm = H·P, B and C of G·N each, dt of H.

Conventions as :mod:`memsym.terms.activations`: 2 bytes per 16-bit element, 1 per dropout-mask
element, per micro-batch of ``b`` sequences of ``s`` tokens on one GPU; tensor parallelism
divides the d_ssm-, G- and H-wide tensors by t (Megatron shards heads and groups), sequence
parallelism divides the h-wide ones by t too.
"""

from __future__ import annotations

from ..symbols import G_ssm, H_ssm, N_ssm, b, d_ssm, h, s, t
from ..term import Source, Term, Total

__all__ = ["mamba_layer_activations"]

_MIXER = "megatron/core/ssm/mamba_mixer.py at d98e8a64dd, MambaMixer._ssm_training"
_KERNEL = "ops/triton/ssd_combined.py MambaSplitConv1dScanCombinedFn.forward, ctx.save_for_backward"


def mamba_layer_activations(*, sequence_parallel: bool = False, dropout: bool = False,
                            gated_norm: bool = True) -> Total:
    r"""Activations one Mamba-2 layer keeps for its backward, term by term [bytes].

    Per micro-batch and GPU, with :math:`\sigma = t` under sequence parallelism (else 1):

    .. math::

        \frac{4sbh}{\sigma} + \frac{2sb\,(2d_{ssm} + 2GN + H)}{t} + \frac{2sb\,d_{ssm}}{t}
        + \frac{(2 d_{ssm} + 4G)\,sb}{t} + \frac{2sb\,d_{ssm}}{t} + \frac{\delta\, sbh}{\sigma}

    (:math:`\delta` = 1 with hidden dropout; without the gated RMSNorm, out_proj keeps the
    kernel's gated output and the norm terms drop).

    Parameters
    ----------
    sequence_parallel : bool
        Megatron sequence parallelism (the h-wide tensors divided by t).
    dropout : bool
        Hidden dropout after the mixer (its 1-byte mask; Megatron's ``hidden_dropout``).
    gated_norm : bool
        The gated RMSNorm over d_ssm before out_proj (Megatron's ``rmsnorm``, default True).

    Returns
    -------
    Total
        Cited terms in ``s, b, h, t, d_ssm, G_ssm, N_ssm, H_ssm`` [bytes].

    References
    ----------
    Megatron-core ``megatron/core/ssm/mamba_mixer.py`` and ``mamba_layer.py`` (megatron-core);
    mamba_ssm ``ops/triton/ssd_combined.py`` (mamba-ssm); Dao & Gu 2024 §7 (mamba2).

    Examples
    --------
    >>> tot = mamba_layer_activations()
    >>> [term.key for term in tot]
    ['norm_inputs', 'zxbcdt', 'scan_output', 'norm_input', 'out_proj_input']
    >>> tot.expr.subs({s: 1, b: 1, t: 1, h: 4, d_ssm: 8, G_ssm: 1, N_ssm: 2, H_ssm: 2})
    112
    """
    sigma = t if sequence_parallel else 1
    tok = s * b
    terms = [
        Term("norm_inputs", 2 * 2 * tok * h / sigma,
             "the fused norm's input and its output = in_proj's input (16-bit)",
             Source("megatron-core", "megatron/core/models/hybrid/hybrid_layer_specs.py "
                    "(in_proj=TELayerNormColumnParallelLinear); mamba_layer.py MambaLayer.forward"),
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
            Term("out_proj_input", 2 * tok * d_ssm / t, "out_proj's input (the norm's output)",
                 Source("megatron-core", _MIXER + " (self.out_proj(y))"), label="out_proj"),
        ]
    else:
        terms.append(Term("out_proj_input", 2 * tok * d_ssm / t,
                          "out_proj's input (the kernel's gated output)",
                          Source("megatron-core", _MIXER + " (self.out_proj(y))"),
                          label="out_proj"))
    if dropout:
        terms.append(Term("dropout_mask", tok * h / sigma, "hidden dropout mask (1 byte)",
                          Source("megatron-core", "megatron/core/ssm/mamba_layer.py "
                                 "MambaLayer.forward (mamba_bda with hidden_dropout)"),
                          label="dropout"))
    return Total("activations of one Mamba-2 layer", tuple(terms))
