r"""Activations a lightning-attention mixer (MiniMax-01) keeps for its backward.

transformers' ``MiniMaxLightningAttention.forward`` (``models/minimax/modeling_minimax.py``,
5.25.0, lines 177-270) is pure PyTorch: ``qkv = silu(qkv_proj(x))`` (a heads of d_h each for q,
k and v), then, block by block of :math:`B_{lin}` tokens (``block_size``), the intra-block
product ``(Q K^T * diagonal_decay) V`` and the inter-block product ``(Q * query_decay) S`` with
the running state S (a d_h-by-d_h matrix per head), ``S <- S * block_decay + (K *
key_decay)^T V``; then an RMSNorm over a d_h, the sigmoid gate ``output_gate(x)`` and out_proj.
The 4-d matmuls reshape their strided block views of q, k and v into copies, which autograd
keeps (the SiLU output itself is not kept).  Per micro-batch of b sequences of s tokens, s a
multiple of :math:`B_{lin}` (:math:`N = s/B_{lin}` blocks per sequence):

=============================================  ===========================  ===================
tensor kept for backward                        bytes                        memsym key
=============================================  ===========================  ===================
qkv_proj / output_gate input (one tensor)       2sbh                         ``in_proj_input``
SiLU input (the qkv_proj output)                6 sb a d_h                   ``qkv_silu_input``
copies of q, k, v for each intra product        6 sb a d_h                   ``block_copies``
decayed-Q copy (every block but the first:      6 b a d_h (s - B_lin)        ``inter_copies``
the first state is zero), decayed-K and V
copies of the state update (every block but
the last: its state is the returned cache)
intra scores times the decay, per block         2 sb a B_lin                 ``intra_scores``
the state before each block                     2 b a d_h^2 s / B_lin        ``block_states``
RMSNorm: fp32 input copy, bf16 cast; 1/rms      6 sb a d_h; 4 sb             ``norm``
RMSNorm output (kept by the gate product)       2 sb a d_h                   ``norm_output``
sigmoid(output_gate(x))                         2 sb a d_h                   ``gate``
out_proj input                                  2 sb a d_h                   ``out_proj_input``
=============================================  ===========================  ===================

Measured in transformers' own layer (``tests/test_hf_layer_kinds.py``: CPU, bf16, what the
backward graph of the output holds), exact for s a multiple of :math:`B_{lin}`, b >= 2 and
a >= 2, but for the block decay ``exp(-slope_rate * B_lin)`` each block from the third keeps
(2a bytes; left out).  At b = 1 the matmuls fold their batch dimensions without copying: q, k
and v stay views of the SiLU output (kept instead of the block copies, the same bytes) and the
state updates' V copies, :math:`2ad_h(s - B_{lin})`, are not made: the term over-counts them
(measured too).
A last partial block keeps less (its scores are :math:`r^2`, r < B_lin); not modelled.
MiniMax's own training kernels are not public in transformers: this is the module as
transformers runs it.  Tensor parallelism divides the heads' tensors by t (derived: no
Megatron-core lightning layer to check against), sequence parallelism the h-wide input.
"""

from __future__ import annotations

from ..symbols import B_lin, a, b, d_h, h, s, t
from ..term import Source, Term, Total

__all__ = ["lightning_activations"]

_FORWARD = "models/minimax/modeling_minimax.py MiniMaxLightningAttention.forward"


def lightning_activations(*, sequence_parallel: bool = False) -> Total:
    r"""Activations one lightning-attention mixer keeps for its backward [bytes].

    Per micro-batch and GPU, with :math:`\sigma = t` under sequence parallelism (else 1) and s
    a multiple of :math:`B_{lin}`:

    .. math::

        \frac{2sbh}{\sigma} + \frac{30\,sb\,a d_h + 2sb\,aB_{lin}
        + 2ab\,d_h^2\,s/B_{lin} - 6ab\,d_h B_{lin}}{t} + 4sb

    Parameters
    ----------
    sequence_parallel : bool
        Megatron-style sequence parallelism (the h-wide input divided by t).

    Returns
    -------
    Total
        Cited terms in ``s, b, h, t, a, d_h, B_lin`` [bytes].

    References
    ----------
    transformers 5.25.0 ``models/minimax/modeling_minimax.py``, ``MiniMaxLightningAttention``
    and ``MiniMaxRMSNorm`` (hf-transformers-5-25); Qin et al. 2024, *Lightning Attention-2*,
    arXiv:2401.04658 (the intra/inter-block split).

    Examples
    --------
    >>> tot = lightning_activations()
    >>> tot.expr.subs({s: 3, b: 2, t: 1, h: 3, a: 3, d_h: 8, B_lin: 3})
    4392
    """
    sigma = t if sequence_parallel else 1
    tok, n = s * b, a * d_h
    fwd = Source("hf-transformers-5-25", _FORWARD)
    norm = Source("hf-transformers-5-25",
                  "models/minimax/modeling_minimax.py MiniMaxRMSNorm.forward")
    return Total("activations of one lightning-attention mixer", (
        Term("in_proj_input", 2 * tok * h / sigma, "qkv_proj's and output_gate's input (the "
             "pre-norm's output)", fwd, label="in_proj"),
        Term("qkv_silu_input", 6 * tok * n / t, "the SiLU's input, qkv_proj's output",
             Source("hf-transformers-5-25", _FORWARD + " (self.act_fn(self.qkv_proj(...)), "
                    "line 188)"), label="qkv"),
        Term("block_copies", 6 * tok * n / t, "q, k, v block copies the intra products keep",
             Source("hf-transformers-5-25", _FORWARD + " (lines 229-230)"), label="blocks"),
        Term("inter_copies", 6 * b * n * (s - B_lin) / t, "the decayed-q copies of the inter "
             "products (not the first block's: its state is zero) and the decayed-k and v "
             "copies of the state updates (not the last block's)",
             Source("hf-transformers-5-25", _FORWARD + " (lines 233, 240-243)"), label="inter"),
        Term("intra_scores", 2 * tok * a * B_lin / t, "Q K^T times the diagonal decay, "
             "B_lin by B_lin per block and head", Source("hf-transformers-5-25", _FORWARD +
                                                          " (line 230)"), label="scores"),
        Term("block_states", 2 * a * b * d_h**2 * s / (B_lin * t), "the running state "
             "before each block (d_h by d_h per head), kept by the inter product",
             Source("hf-transformers-5-25", _FORWARD + " (line 233)"), label="states"),
        Term("norm", 6 * tok * n / t + 4 * tok, "the RMSNorm's fp32 input copy and bf16 cast, "
             "and its fp32 1/rms per token", norm, label="norm"),
        Term("norm_output", 2 * tok * n / t, "the RMSNorm's output, kept by the gate product",
             Source("hf-transformers-5-25", _FORWARD + " (line 266)"), label="norm out"),
        Term("gate", 2 * tok * n / t, "sigmoid(output_gate(x)), kept by the sigmoid and the "
             "product", Source("hf-transformers-5-25", _FORWARD + " (line 266)"), label="gate"),
        Term("out_proj_input", 2 * tok * n / t, "out_proj's input",
             Source("hf-transformers-5-25", _FORWARD + " (line 267)"), label="out_proj"),
    ))
