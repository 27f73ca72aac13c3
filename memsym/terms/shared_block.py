r"""Activations one use of a Zamba / Zamba2 shared transformer block keeps for its backward.

A Zamba2 hybrid layer (transformers 5.25.0 ``models/zamba2/modeling_zamba2.py``,
``Zamba2HybridLayer.forward``, lines 1140-1193) runs one of the model's shared blocks
(``Zamba2AttentionDecoderLayer``) on its input, projects the block's output with its own
h-by-h ``linear`` (line 1180) and adds it to the input of its Mamba layer's pre-norm.  The
block (lines 1060-1074) concatenates the hidden state with the word embeddings
(``torch.concatenate``, 2h wide), normalises that (``input_layernorm``, an RMSNorm of 2h),
runs the attention on it (``Zamba2Attention``: a heads of :math:`d_h = 2h/a`, Q, K, V read
the 2h-wide input, o_proj writes h), normalises the attention output (``pre_ff_layernorm``)
and runs the gated MLP (``Zamba2MLP``); no residual is added inside the block.  Each use has
its own LoRA-style adapters of rank r: on the MLP's gate/up projection always (Zamba2), on
Q, K and V with ``use_shared_attention_adapter`` (lines 294-298, 1011-1019).  What one use
keeps, counted with memsym's conventions for a transformer layer
(:func:`memsym.terms.activations.layer_activations`: a norm keeps its 16-bit input and fp32
per-token statistics, a linear its 16-bit input, SwiGLU its fc1 output, flash attention Q, K,
V, its output and the fp32 logsumexp):

======================================  ===================================  =====================
tensor kept for backward                 elements per token                   memsym key
======================================  ===================================  =====================
the concatenation = input_layernorm's    2h; 1 fp32                           ``concat_norm_input``,
input; its statistics                                                         ``norm_statistics``
the norm's output = Q, K, V's input      2h                                   ``qkv_input``
(and the adapters' down-projections')
each Q, K, V adapter's up-proj. input    r each (with attention adapters)     ``attention_adapters``
Q, K; V; logsumexp; o_proj input         (a + g) d_h; g d_h; a fp32; a d_h    as layer_activations
pre_ff_layernorm's input; statistics     h; 1 fp32                            ``ff_norm_input``
its output = gate_up_proj's input        h                                    ``mlp_input``
the gate/up adapter's up-proj. input     r                                    ``mlp_adapter``
gate_up output (+ adapter) = SwiGLU in   2f                                   ``mlp_activation``
down_proj input                          f                                    ``fc2_input``
the per-use linear's input               h                                    ``linear_input``
======================================  ===================================  =====================

The adapters' down-projections read the norm's output that Q, K, V (or gate_up) keep
already, one storage.  Zamba (``modeling_zamba.py``, ``ZambaAttentionDecoderLayer.forward``
and ``ZambaHybridLayer.forward``) builds the same block without adapters (r = 0).

transformers' own code keeps more than these conventions count, as for every model it runs
(``tests/test_hf_activations.py``): ``Zamba2RMSNorm`` (lines 81-86) keeps an fp32 copy of its
input and the 16-bit normalised product besides the statistics (:math:`+4\,\mathrm{width}`
bytes per token and norm, ``norm_fp32_input`` with ``hf_norms``, as
:mod:`memsym.terms.hf_norms` counts every transformers RMSNorm: :math:`4\tau (2h + h)/\sigma`
for input_layernorm and pre_ff_layernorm), the unfused SwiGLU keeps SiLU's output
(:math:`+2f`), and RoPE (``use_mem_rope``) the model's cos and sin tables;
``tests/test_zamba2_activations.py`` measures a use under ``saved_tensors_hooks`` and finds
exactly these differences.

Conventions as :mod:`memsym.terms.mamba2`: 2 bytes per 16-bit element, per micro-batch of
``b`` sequences of ``s`` tokens on one GPU; tensor parallelism divides the head- and
f-wide tensors by t, sequence parallelism the h- and 2h-wide ones; the rank-r adapter inputs
are not divided (derived: the adapters are not sharded by any framework memsym reads).
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..symbols import b, h, s, t
from ..term import Source, Term, Total
from ..values import as_expr
from .activations import layer_activations

__all__ = ["shared_block_activations"]

_ZAMBA2 = "models/zamba2/modeling_zamba2.py"
_ATTENTION_KEYS = ("qk", "v", "softmax_stats", "scores", "proj_input")
_MLP_KEYS = ("mlp_activation", "fc2_input")


def _src(where: str) -> Source:
    return Source("hf-transformers-5-25", f"{_ZAMBA2}:{where}")


def _rank(adapter_rank):
    """The adapters' rank as an expression; a number must be a whole count >= 0 (a negative or
    fractional rank would price negative or fractional bytes)."""
    rank = as_expr(adapter_rank, "adapter_rank")
    if rank.is_number and not (rank.is_integer and rank >= 0):
        raise InvalidValueError(f"adapter_rank must be a whole number >= 0 (0: no adapters) "
                                f"or a SymPy symbol, got {adapter_rank!r:.40}")
    return rank


def shared_block_activations(*, adapter_rank=0, attention_adapters: bool = False,
                             sequence_parallel: bool = False, flash: bool = True,
                             hf_norms: bool = False) -> Total:
    r"""Activations one use of a shared transformer block keeps for its backward [bytes].

    Per micro-batch and GPU, with :math:`\sigma = t` under sequence parallelism (else 1),
    flash attention, adapter rank r (:math:`[\cdot]` 1 with attention adapters, else 0):

    .. math::

        \frac{8sbh + 8sb}{\sigma} + 2sb\,r\,(1 + 3\,[\mathrm{att}])
        + \frac{2sb\,d_h\,(a + 2g) + 4asb + 2asb\,d_h + 6sbf}{t} + \frac{6sbh}{\sigma}

    (the 2h-wide concatenation and the norm's output, 4sbh each, and two norms' fp32
    statistics; the adapters' rank-r inputs; Q, K, V, the logsumexp, o_proj's input, the
    SwiGLU input and fc2's input as :func:`~memsym.terms.activations.layer_activations`; the
    pre-MLP norm's input and output; the per-use linear's input).  Without flash attention
    the :math:`s^2` terms of ``layer_activations`` replace the logsumexp.

    Parameters
    ----------
    adapter_rank : int or sympy.Expr
        The adapters' rank r [1] (0: no adapters, Zamba); a whole number or a symbol.
    attention_adapters : bool
        Q, K and V have per-use adapters too (Zamba2's ``use_shared_attention_adapter``).
    sequence_parallel : bool
        Megatron-style sequence parallelism (the h- and 2h-wide tensors divided by t).
    flash : bool
        Flash attention (the SDPA kernel) rather than the materialised softmax.
    hf_norms : bool
        transformers' own ``Zamba2RMSNorm`` runs (DeepSpeed): each norm's fp32 input copy,
        :math:`4\tau (2h + h)/\sigma` more (``norm_fp32_input``).

    Returns
    -------
    Total
        Cited terms in ``s, b, h, a, g, d_h, f, t`` [bytes].

    References
    ----------
    transformers 5.25.0 ``models/zamba2/modeling_zamba2.py`` (Zamba2AttentionDecoderLayer,
    Zamba2Attention, Zamba2MLP, Zamba2HybridLayer) and ``models/zamba/modeling_zamba.py``
    (hf-transformers-5-25); the attention and MLP terms of
    :func:`~memsym.terms.activations.layer_activations` (korthikanti).

    Examples
    --------
    >>> from memsym.symbols import a, d_h, f, g, r_lora
    >>> tot = shared_block_activations(adapter_rank=r_lora, attention_adapters=True)
    >>> [term.key for term in tot][:4]
    ['concat_norm_input', 'norm_statistics', 'qkv_input', 'attention_adapters']

    h = 4, a = g = 2 heads of d_h = 2h/a = 4, f = 8, r = 2, one token (c = 1): 16 + 8
    (concatenation, statistics) + 16 (QKV input) + 12 (adapters) + 48 (Q, K, V) + 8
    (logsumexp) + 16 (o_proj input) + 8 + 8 (pre-MLP norm in, out) + 4 (MLP adapter) + 32 + 16
    (SwiGLU, fc2 inputs) + 8 (linear input) = 200 bytes

    >>> from memsym.symbols import c
    >>> tot.expr.subs({s: 1, b: 1, t: 1, c: 1, h: 4, a: 2, g: 2, d_h: 4, f: 8, r_lora: 2})
    200

    """
    sigma = t if sequence_parallel else 1
    tok, rank = s * b, _rank(adapter_rank)
    dense = layer_activations(gated=True, flash=flash, norm="rmsnorm", dropout=False,
                              sequence_parallel=sequence_parallel)
    terms = [
        Term("concat_norm_input", 2 * tok * 2 * h / sigma,
             "the 2h-wide concatenation of hidden state and embeddings, input_layernorm's input",
             _src("1060-1061 (torch.concatenate, self.input_layernorm)"), label="concat"),
        Term("norm_statistics", 2 * 4 * tok / sigma, "fp32 per-token statistics of the two "
             "RMSNorms (input_layernorm, pre_ff_layernorm)", _src("81-86 (Zamba2RMSNorm)"),
             label="norm stats"),
        Term("qkv_input", 2 * tok * 2 * h / sigma, "the norm's 2h-wide output, input of Q, K, V "
             "and of their adapters' down-projections", _src("291-293 (q_proj, k_proj, v_proj)"),
             label="QKV in"),
    ]
    if attention_adapters and rank != 0:
        terms.append(Term("attention_adapters", 3 * 2 * tok * rank,
                          "the rank-r inputs of the Q, K, V adapters' up-projections",
                          _src("294-298 (linear_q/k/v_adapter_list)"), label="QKV adapters"))
    terms += [dense[k] for k in _ATTENTION_KEYS if k in dense]
    terms += [
        Term("ff_norm_input", 2 * tok * h / sigma, "o_proj's output, pre_ff_layernorm's input",
             _src("327, 1071 (self.o_proj, self.pre_ff_layernorm)"), label="ff norm"),
        Term("mlp_input", 2 * tok * h / sigma, "the norm's output, input of gate_up_proj and of "
             "its adapter's down-projection", _src("1012 (self.gate_up_proj)"), label="MLP in"),
    ]
    if rank != 0:
        terms.append(Term("mlp_adapter", 2 * tok * rank, "the rank-r input of the gate/up "
                          "adapter's up-projection", _src("1014 (gate_up_proj_adapter_list)"),
                          label="MLP adapter"))
    terms += [dense[k] for k in _MLP_KEYS]
    if hf_norms:
        terms.append(_fp32_copies(tok, sigma))
    terms.append(Term("linear_input", 2 * tok * h / sigma, "the block's output, input of the "
                      "use's own h-by-h linear", _src("1180 (self.linear)"), label="linear"))
    return Total("activations of one use of a shared transformer block", tuple(terms))


def _fp32_copies(tok, sigma) -> Term:
    r"""What the block's two ``Zamba2RMSNorm`` keep beyond 16-bit inputs: fp32 copies [bytes].

    .. math:: \frac{4\tau (2h + h)}{\sigma}

    ``hidden_states.to(torch.float32)`` is kept by ``pow(2)`` and by the rsqrt multiply, and the
    16-bit ``self.weight *`` product is kept: 4 bytes an element beyond the 16-bit input
    (:mod:`memsym.terms.hf_norms`), on input_layernorm (2h wide) and pre_ff_layernorm (h).

    Parameters
    ----------
    tok : sympy.Expr
        Tokens of one micro-batch on this rank, :math:`\tau = sb` [tokens].
    sigma : int or sympy.Expr
        The sequence-parallel divisor :math:`\sigma` [1].

    Examples
    --------
    >>> _fp32_copies(s * b, 1).expr.subs({s: 1, b: 1, h: 4})
    48

    References
    ----------
    hf-transformers-5-25: transformers 5.25.0 ``models/zamba2/modeling_zamba2.py`` lines 81-86.
    """
    return Term("norm_fp32_input", 4 * tok * (2 * h + h) / sigma,
                "the fp32 input copies and 16-bit normalised tensors of input_layernorm (2h "
                "wide) and pre_ff_layernorm (h), beyond their 16-bit inputs",
                _src("81-86 (Zamba2RMSNorm.forward: hidden_states.to(torch.float32); "
                     "self.weight * hidden_states.to(input_dtype))"), label="norm fp32 input")
