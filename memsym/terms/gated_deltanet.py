r"""Activations a Gated DeltaNet mixer (Qwen3-Next) keeps for its backward.

transformers' ``Qwen3NextGatedDeltaNet.forward`` (``models/qwen3_next/modeling_qwen3_next.py``,
5.25.0, lines 720-856; ``Qwen3NextRMSNormGated.forward`` lines 66-76) projects the input with
``in_proj_qkvz`` and ``in_proj_ba``, concatenates q, k, v (:math:`C = 2H_{gk}d_{gk} +
H_{gv}d_{gv}` channels) and convolves them depthwise over
:math:`k_{gdn}` taps with SiLU (``causal_conv1d_fn``: without the optional ``causal_conv1d``
kernel, ``F.conv1d`` padded by :math:`k_{gdn} - 1`, sliced to the sequence), computes
``beta = b.sigmoid()`` and ``g = -exp(A_log) * softplus(a.float() + dt_bias)`` (fp32), runs the
chunked gated delta rule, then the gated RMSNorm ``Qwen3NextRMSNormGated`` (per value head, fp32
inside) with the gate z, and out_proj.  With flash-linear-attention installed the rule is fla's
``chunk_gated_delta_rule`` (the kernel training runs; transformers' own
``torch_chunk_gated_delta_rule`` is a per-token reference loop that keeps every step).

What autograd keeps, per token (bytes; a 16-bit model):

=============================================  ==============================  ==================
tensor kept for backward                        bytes per token                 memsym key
=============================================  ==============================  ==================
in_proj_qkvz / in_proj_ba input (one tensor)    2h                              ``in_proj_input``
conv input (the concatenated q, k, v)           2C                              ``conv_input``
conv output before SiLU (padded rows)           2C (+ 2(k_gdn - 1)C per seq.)   ``conv_output``
beta = sigmoid(b) (the kernel's beta too)       2 H_gv                          ``beta``
softplus input and output (fp32)                8 H_gv                          ``gate_softplus``
exp(A_log) and its negation (fp32, per layer)   8 H_gv per layer                ``decay_rates``
gated RMSNorm: fp32 input, 1/rms, bf16 normed,  16 H_gv d_gv + 4 H_gv           ``gated_norm``
fp32 z, fp32 SiLU(z), bf16 weighted
out_proj input                                  2 H_gv d_gv                     ``out_proj_input``
kernel: l2-normalised q and k                   4 H_gk d_gk                     ``kernel_qk``
kernel: their 1/norm (fp32, per head)           8 H_gk                          ``kernel_qk_rstd``
kernel: v (a contiguous copy)                   2 H_gv d_gv                     ``kernel_v``
kernel: chunk-local cumsum of g (fp32)          4 H_gv                          ``kernel_g``
kernel: WY matrix A, 64 columns per value head  128 H_gv                        ``kernel_a``
=============================================  ==============================  ==================

The module's part (all but the ``kernel_`` keys) is measured in transformers' own layer
(``tests/test_hf_layer_kinds.py``: CPU, bf16, ``saved_tensors_hooks``, the rule replaced by a
stand-in that keeps nothing).  The kernel's part is derived from fla's source at bc3b101dcb
(``fla/ops/gated_delta_rule/chunk.py``, ``ChunkGatedDeltaRuleFunction.forward``, lines
281-326): with transformers' arguments (``use_qk_l2norm_in_kernel=True``, g and beta computed
outside, no initial state, the default chunk size 64) it saves q and k after ``l2norm_fwd``
(new tensors of the input dtype, with an fp32 rstd per row: ``fla/modules/l2norm.py`` lines
148-168), v (``input_guard`` makes the strided view of the conv output contiguous: a copy),
g after ``chunk_local_cumsum`` (fp32: ``fla/ops/utils/cumsum.py``), beta (the sigmoid's output,
already contiguous: the same storage) and A, ``torch.zeros(B, T, HV, BT, dtype=k.dtype)``
(``fla/ops/gated_delta_rule/chunk_fwd.py`` line 385).  The chunk states h are not kept: the
backward recomputes them (``chunk.py`` line 160, ``chunk_gated_delta_rule_fwd_h``).  Not
modelled: the optional ``causal_conv1d`` CUDA kernel (it keeps the conv input only), fla's
fused gated norm, Megatron-core's GatedDeltaNet module.

Conventions as :mod:`memsym.terms.mamba2`: per micro-batch of b sequences of s tokens on one
GPU; tensor parallelism divides the heads' tensors by t (derived, as the parameters in
:func:`memsym.model.token_mixers.gdn_parts`), sequence parallelism the h-wide input by t too.
"""

from __future__ import annotations

from ..symbols import H_gk, H_gv, b, d_gk, d_gv, h, k_gdn, s, t
from ..term import Source, Term, Total

__all__ = ["gdn_activations", "GDN_KERNEL_KEYS", "FLA_CHUNK"]

FLA_CHUNK = 64   # fla's default chunk size (chunk_gated_delta_rule's kwargs.pop('chunk_size', 64))
GDN_KERNEL_KEYS = ("kernel_qk", "kernel_qk_rstd", "kernel_v", "kernel_g", "kernel_a")

_FORWARD = "models/qwen3_next/modeling_qwen3_next.py Qwen3NextGatedDeltaNet.forward"
_NORM = "models/qwen3_next/modeling_qwen3_next.py Qwen3NextRMSNormGated.forward"
_SAVE = "fla/ops/gated_delta_rule/chunk.py ChunkGatedDeltaRuleFunction.forward, " \
        "ctx.save_for_backward (lines 310-326)"


def gdn_activations(*, sequence_parallel: bool = False) -> Total:
    r"""Activations one Gated DeltaNet mixer keeps for its backward, fla's kernel included [bytes].

    Per micro-batch and GPU, with :math:`\sigma = t` under sequence parallelism (else 1),
    :math:`C = 2H_{gk}d_{gk} + H_{gv}d_{gv}`:

    .. math::

        \frac{2sbh}{\sigma} + \frac{2sbC + 2b\,(s + k_{gdn} - 1)\,C}{t}
        + \frac{sb\,(2 + 8 + 4 + 128 + 4)\,H_{gv} + 8H_{gv}}{t}
        + \frac{sb\,(16 + 2 + 2)\,H_{gv}d_{gv}}{t}
        + \frac{sb\,(4H_{gk}d_{gk} + 8H_{gk})}{t}

    Parameters
    ----------
    sequence_parallel : bool
        Megatron-style sequence parallelism (the h-wide input divided by t).

    Returns
    -------
    Total
        Cited terms in ``s, b, h, t, H_gk, H_gv, d_gk, d_gv, k_gdn`` [bytes].

    References
    ----------
    transformers 5.25.0 ``models/qwen3_next/modeling_qwen3_next.py`` (hf-transformers-5-25);
    flash-linear-attention at bc3b101dcb ``fla/ops/gated_delta_rule/chunk.py`` (fla).

    Examples
    --------
    >>> tot = gdn_activations()
    >>> [term.key for term in tot][:3]
    ['in_proj_input', 'conv_input', 'conv_output']
    >>> tot.expr.subs({s: 1, b: 1, t: 1, h: 8, H_gk: 1, H_gv: 1, d_gk: 2, d_gv: 2, k_gdn: 1})
    250
    """
    sigma = t if sequence_parallel else 1
    tok = s * b
    conv = 2 * H_gk * d_gk + H_gv * d_gv
    hv, vd = H_gv, H_gv * d_gv
    fwd = Source("hf-transformers-5-25", _FORWARD + " (line 737)")
    return Total("activations of one Gated DeltaNet mixer", (
        Term("in_proj_input", 2 * tok * h / sigma, "the projections' input (the pre-norm's "
             "output; in_proj_qkvz and in_proj_ba share it)", fwd, label="in_proj"),
        Term("conv_input", 2 * tok * conv / t, "the depthwise conv's input, q k v concatenated",
             Source("hf-transformers-5-25", "models/qwen3_next/modeling_qwen3_next.py "
                    "causal_conv1d_fn (F.conv1d, line 350)"), label="conv in"),
        Term("conv_output", 2 * b * (s + k_gdn - 1) * conv / t, "the conv's output before SiLU, "
             "k_gdn - 1 padded rows per sequence (kept by SiLU)",
             Source("hf-transformers-5-25", "models/qwen3_next/modeling_qwen3_next.py "
                    "causal_conv1d_fn (F.conv1d(..., padding)[:, :, :seq_len], ACT2FN)"),
             label="conv out"),
        Term("beta", 2 * tok * hv / t, "beta = sigmoid(b), kept by the sigmoid and the kernel "
             "(one storage)", Source("hf-transformers-5-25", _FORWARD + " (b.sigmoid(), line 768)"),
             label="beta"),
        Term("gate_softplus", 8 * tok * hv / t, "softplus(a + dt_bias)'s fp32 input and output "
             "(the output kept by the product with -exp(A_log))",
             Source("hf-transformers-5-25", _FORWARD + " (line 770)"),
             label="g softplus"),
        Term("decay_rates", 8 * hv / t, "exp(A_log) and its negation, fp32, once per layer",
             Source("hf-transformers-5-25", _FORWARD + " (line 770)"),
             label="decay rates"),
        Term("gated_norm", tok * (16 * vd + 4 * hv) / t, "the gated RMSNorm's fp32 input copy, "
             "fp32 1/rms per head, bf16 normed input, fp32 z, fp32 SiLU(z), bf16 weighted input",
             Source("hf-transformers-5-25", _NORM), label="gated norm"),
        Term("out_proj_input", 2 * tok * vd / t, "out_proj's input",
             Source("hf-transformers-5-25", _FORWARD + " (line 855)"),
             label="out_proj"),
        Term("kernel_qk", 4 * tok * H_gk * d_gk / t, "fla: q and k after l2norm_fwd (new "
             "16-bit tensors)", Source("fla", _SAVE), label="fla q k"),
        Term("kernel_qk_rstd", 8 * tok * H_gk / t, "fla: the fp32 1/norm of q and k per head "
             "and token", Source("fla", _SAVE + "; fla/modules/l2norm.py l2norm_fwd (rstd)"),
             label="fla rstd"),
        Term("kernel_v", 2 * tok * vd / t, "fla: v, made contiguous by input_guard (a copy of "
             "the conv output's strided view)", Source("fla", _SAVE), label="fla v"),
        Term("kernel_g", 4 * tok * hv / t, "fla: the chunk-local cumsum of g (fp32)",
             Source("fla", _SAVE + "; fla/ops/utils/cumsum.py (output_dtype=torch.float)"),
             label="fla g"),
        Term("kernel_a", 2 * FLA_CHUNK * tok * hv / t, "fla: the WY matrix A, [b, s, H_gv, 64] "
             "of the input dtype (the chunk states h are recomputed in the backward)",
             Source("fla", _SAVE + "; fla/ops/gated_delta_rule/chunk_fwd.py line 385"),
             label="fla A"),
    ))
