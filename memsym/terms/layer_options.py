r"""One transformer layer's options as its activation terms read them, and the list of terms.

:func:`memsym.terms.transformer_layer.layer_activations` checks its options once into a
:class:`LayerOptions` (:func:`layer_options`: the sizes, the precision, and what each module
recomputed under Megatron's ``--recompute-modules`` no longer keeps) and each family of terms
(norms, Q/K/V, attention, the dense MLP, the MoE block) appends to one :class:`LayerTerms`.
This module owns that record, the list, and the two sources every family cites: Korthikanti
et al.'s §4.1 (:data:`LAYER_SOURCE`) and Transformer Engine's quantized saved inputs
(:data:`TE_SAVED_INPUT`).

References
----------
.. [korthikanti] Korthikanti et al., arXiv:2205.05198, §4.1.
.. [transformer-engine] transformer_engine/pytorch/module/linear.py, layernorm_linear.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..errors import InvalidValueError
from ..term import Source, Term
from .fp8_attention import fp8_attention_widths
from .low_precision import saved_input_bytes

__all__ = ["LAYER_SOURCE", "TE_SAVED_INPUT", "LayerTerms", "LayerOptions", "layer_options"]

#: Korthikanti et al.'s per-layer derivation, the default source of an activation term.
LAYER_SOURCE = Source("korthikanti", "§4.1 (attention block, MLP, LayerNorm)")
#: Transformer Engine's linears save their GEMM input as the quantized tensor they multiplied.
TE_SAVED_INPUT = Source("transformer-engine", "pytorch/module/linear.py, _Linear.forward "
                        "(saved_inputmat: the quantized input); layernorm_linear.py (ln_out "
                        "quantized by the fused norm)")


class LayerTerms(list):
    """The terms of one layer in order; a zero contribution is left out."""

    def add(self, key, expr, what, source=LAYER_SOURCE):
        """Append a bytes term labelled by its key, unless its expression is 0."""
        if expr != 0:
            self.append(Term(key, expr, what, source, label=key.replace("_", " ")))


@dataclass(frozen=True)
class LayerOptions:
    """One layer's options, sizes and what its recomputed modules drop, read by each family."""

    tok: sp.Expr
    sig: object
    gated: bool
    flash: bool
    fp8: object
    norm: str
    norm_statistics: bool
    dropout: bool
    att_drop: bool
    qk_norm: object
    output_gate: bool
    hf_qwen3_next: bool
    qk_fp32: bool
    mla: dict | None
    moe: bool
    shared_expert: bool
    drop_core: bool
    drop_in_norm: bool
    drop_pre_mlp_norm: bool
    drop_up_proj: bool
    drop_mlp: bool
    drop_moe: bool
    drop_moe_act: bool
    drop_shared: bool
    combine_kept: bool
    latent: bool = False
    norm_fp32: bool = False        # main norms scale by 1 + weight in fp32 (transformers' Gemma)
    post_norms: bool = False       # post-attention and post-MLP norms (Gemma 2/3, GLM-4)
    w: int = 2                     # bytes of a 16-bit-compute tensor (4 training in fp32)
    fp8_dpa: str | None = None     # TE's FP8 attention recipe (memsym.terms.fp8_attention)

    @property
    def dpa(self):
        """(Q/K/V, O, statistics) widths of FP8 attention; None: 16-bit or none kept."""
        kept = self.fp8_dpa is not None and self.flash and not self.drop_core
        return fp8_attention_widths(self.fp8_dpa) if kept else None

    @property
    def gx(self):
        """Bytes per element of a saved GEMM input: FP8 under Transformer Engine (MXFP8: one
        E8M0 scale byte per 32 elements more), else 16-bit."""
        return saved_input_bytes(self.fp8) if self.fp8 else self.w

    @property
    def gsrc(self) -> Source:
        """The source of a saved GEMM input's width."""
        return TE_SAVED_INPUT if self.fp8 else LAYER_SOURCE

    @property
    def delta(self) -> int:
        """1 when the hidden dropout masks are kept."""
        return 1 if self.dropout else 0

    @property
    def gam(self) -> int:
        """1 for a gated MLP (fc1 makes gate and up projections)."""
        return 1 if self.gated else 0


def layer_options(recompute, mods, tok, sig, *, gated, flash, fp8, norm, norm_statistics,
                  dropout, att_drop, qk_norm, output_gate, hf_qwen3_next, qk_fp32, mla, moe,
                  shared, combine_kept, latent=False, norm_fp32=False, post_norms=False, width=2,
                  dpa=None) -> LayerOptions:
    """The options of one layer with what each recomputed module no longer keeps.

    The arguments are :func:`memsym.terms.transformer_layer.layer_activations`' options,
    already checked (``recompute`` a mode of :data:`memsym.vocabulary.RECOMPUTE`, ``mods`` its
    modules under ``"selective"``, ``tok`` and ``sig`` the tokens and the sequence-parallel
    divisor of :func:`memsym.terms.transformer_layer.token_split`); ``att_drop`` None takes
    ``dropout``, ``dpa`` is Transformer Engine's FP8 attention recipe (refused without an FP8
    recipe, :class:`memsym.errors.InvalidValueError`).

    >>> from memsym.symbols import b, c, s
    >>> ly = layer_options("selective", ("core_attn", "mlp"), s * b / c, 1, gated=True,
    ...                    flash=True, fp8=False, norm="rmsnorm", norm_statistics=True,
    ...                    dropout=False, att_drop=None, qk_norm=False, output_gate=False,
    ...                    hf_qwen3_next=False, qk_fp32=False, mla=None, moe=False, shared=False,
    ...                    combine_kept=True)
    >>> ly.drop_core, ly.drop_mlp, ly.drop_moe, ly.gx, ly.gam
    (True, True, False, 2, 1)
    """
    if dpa is not None and fp8 not in (True, "mxfp8"):
        raise InvalidValueError("fp8_attention: Transformer Engine's FP8 attention runs under "
                                "an FP8 recipe (fp8_inputs True or 'mxfp8')")
    # what each recomputed module no longer keeps (RECOMPUTE_MODULE_SOURCES): under the TE
    # spec only the norms before MLA and before an MoE layer are TENorm modules that
    # "layernorm" checkpoints; the others are fused into linear_qkv / linear_fc1
    return LayerOptions(
        tok, sig, gated, flash, fp8, norm, norm_statistics, dropout,
        dropout if att_drop is None else att_drop, qk_norm, output_gate,
        hf_qwen3_next, qk_fp32 or hf_qwen3_next, mla, moe, shared,
        drop_core=recompute == "selective" and "core_attn" in mods,
        drop_in_norm="layernorm" in mods and bool(mla),
        drop_pre_mlp_norm="layernorm" in mods and moe,
        drop_up_proj="mla_up_proj" in mods and bool(mla),
        drop_mlp="mlp" in mods and not moe,
        drop_moe="moe" in mods and moe,
        drop_moe_act=("moe_act" in mods or "moe" in mods) and moe,
        drop_shared=("shared_experts" in mods or "moe" in mods) and moe,
        combine_kept=combine_kept, latent=latent, norm_fp32=norm_fp32, post_norms=post_norms,
        w=width, fp8_dpa=dpa)
