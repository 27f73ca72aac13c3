r"""Activations a gated short-convolution mixer (LFM2) keeps for its backward.

transformers' ``Lfm2ShortConv.forward`` (``models/lfm2/modeling_lfm2.py``, 5.25.0) runs
``BCx = in_proj(x)``, splits it into B, C and x (views of one h-by-3 tensor), convolves
``B * x`` depthwise over ``k_sc`` taps (``causal_conv1d_fn``: without the optional
``causal_conv1d`` kernel, ``F.conv1d`` with ``k_sc - 1`` padding, its output sliced to the
sequence), multiplies by C and projects with out_proj.  What autograd keeps:

======================================  ===================================  ================
tensor kept for backward                 elements per token                   memsym key
======================================  ===================================  ================
in_proj input (the norm's output)        h                                    ``in_proj_input``
in_proj output B, C, x (one storage)     3h                                   ``bcx``
conv input B x                           h                                    ``conv_input``
conv output (padded: s + k_sc - 1 rows)  h (+ (k_sc - 1) h per sequence)      ``conv_output``
out_proj input C y (made contiguous)     h                                    ``out_proj_input``
======================================  ===================================  ================

(B and x for the product B x, C and the conv output for C y; the slice of the conv output
keeps its whole padded storage.)  Derived from the code; ``tests/test_hf_layer_kinds.py``
measures it in transformers' own layer (CPU, bf16, ``saved_tensors_hooks``).  The optional
CUDA kernel ``causal_conv1d_fn`` keeps other tensors: not modelled.

Conventions as :mod:`memsym.terms.mamba2`: 2 bytes per 16-bit element, per micro-batch of b
sequences of s tokens on one GPU; tensor parallelism divides the mixer's inner tensors by t
(in_proj by columns, the conv per channel, out_proj by rows: derived), sequence parallelism
the h-wide input by t too.
"""

from __future__ import annotations

from ..symbols import b, h, k_sc, s, t
from ..term import Source, Term, Total

__all__ = ["short_conv_activations"]

_FORWARD = "models/lfm2/modeling_lfm2.py Lfm2ShortConv.forward"


def short_conv_activations(*, sequence_parallel: bool = False) -> Total:
    r"""Activations one gated short-convolution mixer keeps for its backward [bytes].

    Per micro-batch and GPU, with :math:`\sigma = t` under sequence parallelism (else 1):

    .. math::

        \frac{2sbh}{\sigma} + \frac{6sbh}{t} + \frac{2sbh}{t}
        + \frac{2b\,(s + k_{\mathrm{sc}} - 1)\,h}{t} + \frac{2sbh}{t}

    Parameters
    ----------
    sequence_parallel : bool
        Megatron-style sequence parallelism (the h-wide input divided by t).

    Returns
    -------
    Total
        Cited terms in ``s, b, h, t, k_sc`` [bytes].

    References
    ----------
    transformers 5.25.0 ``models/lfm2/modeling_lfm2.py``, ``Lfm2ShortConv.forward`` and
    ``causal_conv1d_fn`` (hf-transformers-5-25).

    Examples
    --------
    >>> tot = short_conv_activations()
    >>> [term.key for term in tot]
    ['in_proj_input', 'bcx', 'conv_input', 'conv_output', 'out_proj_input']
    >>> tot.expr.subs({s: 4, b: 1, t: 1, h: 8, k_sc: 3})
    480
    """
    sigma = t if sequence_parallel else 1
    tok = s * b
    return Total("activations of one short-convolution mixer", (
        Term("in_proj_input", 2 * tok * h / sigma, "in_proj's input (the pre-norm's output)",
             Source("hf-transformers-5-25", _FORWARD + " (self.in_proj(hidden_states))"),
             label="in_proj"),
        Term("bcx", 2 * tok * 3 * h / t, "in_proj output B, C, x (one storage), kept by the "
             "products B x and C y", Source("hf-transformers-5-25", _FORWARD + " (B * x, C * ...)"),
             label="BCx"),
        Term("conv_input", 2 * tok * h / t, "the depthwise conv's input B x",
             Source("hf-transformers-5-25", "models/lfm2/modeling_lfm2.py causal_conv1d_fn "
                    "(F.conv1d)"), label="conv in"),
        Term("conv_output", 2 * b * (s + k_sc - 1) * h / t,
             "the conv's output, k_sc - 1 padded rows per sequence (kept by C y)",
             Source("hf-transformers-5-25", "models/lfm2/modeling_lfm2.py causal_conv1d_fn "
                    "(F.conv1d(..., padding=k - 1)[:, :, :seq_len])"), label="conv out"),
        Term("out_proj_input", 2 * tok * h / t, "out_proj's input C y (made contiguous)",
             Source("hf-transformers-5-25", _FORWARD + " (self.out_proj(y))"), label="out_proj"),
    ))
