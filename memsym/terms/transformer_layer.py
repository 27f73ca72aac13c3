r"""Activations one transformer layer keeps for its backward, term by term.

:func:`layer_activations` derives the tensors of one layer (the derivation of the GPT layer is
the module docstring of :mod:`memsym.terms.activations`, which re-exports these names); this
docstring holds what each option of it adds or drops.  The checked options and the list each
family of terms appends to are :mod:`memsym.terms.layer_options`'.

Flash attention replaces the :math:`(2+3\delta)as\tau/t` scores by one fp32 logsumexp per query
row and head, :math:`4a\tau/t`: its backward reads Q, K, V, the output and the logsumexp, and
regenerates the dropout mask from the RNG state (FlashAttention §3.1; PyTorch's
``_flash_attention_backward`` signature).  Norm statistics add :math:`8\tau/\sigma` (LayerNorm:
mean, 1/σ) or :math:`4\tau/\sigma` (RMSNorm) per norm.  Norms on Q and K (``qk_norm``) keep
their inputs and fp32 statistics, :math:`2\tau(a+g)d_h/t + 4\tau(a+g)/t` per head (True or
``"head"``, Qwen3) or :math:`+\,8\tau` over the whole projection (``"full"``, OLMo 2)
(``qk_norm_inputs``; the normalised Q and K are the ``qk`` term).  An output gate
(``output_gate``, Qwen3-Next: q_proj also makes a gate, the output is
``attn_output * sigmoid(gate)``) keeps :math:`4\tau a d_h/t` more (``output_gate``): the
sigmoid's output, kept by the sigmoid and the product (one storage), and the ungated attention
output the product keeps, the output projection now keeping the gated product
(``proj_input``; transformers v5.25.0 ``Qwen3NextAttention.forward``, measured in
``tests/test_qwen3_next_gate.py``).  Megatron-core's ``Attention._apply_output_gate``
(``--attention-output-gate``, d98e8a64dd) computes the product in fp32 under ``jit_fuser``;
what its fused kernel keeps is not measured here.  Transformers' own ``Qwen3NextAttention``
(``hf_qwen3_next``: a framework that trains the model's code, DeepSpeed) keeps two tensors
more, read from v5.25.0 ``modeling_qwen3_next.py``: its ``Qwen3NextRMSNorm`` on Q and K
multiplies by ``(1 + weight)`` in fp32, so that multiply keeps the fp32 normalised Q and K
(4 bytes where a 16-bit norm output is 2) and ``1 + weight`` (4 d_h per norm):
:math:`2\tau(a+g)d_h/t + 8d_h` (``qk_norm_fp32_output``); its partial RoPE
(``apply_rotary_pos_emb``) concatenates the rotated and the pass-through parts, which leaves Q
head-major (``[b, a, s, d_h]``-contiguous), so the flash kernel's output is head-major too and
``sdpa_attention_forward``'s ``transpose(1, 2).contiguous()`` copies it: the kernel keeps its
own output, the next op the copy, :math:`2\tau a d_h/t` (``sdpa_output_copy``; not when the
kernel is recomputed, nor without flash, where the matmul keeps no output).  Measured in
``tests/test_qwen3_next_gate.py``.  Megatron's own layer (Transformer Engine's norms, its RoPE)
runs neither class, so neither term applies there.  Gemma 3's ``Gemma3RMSNorm`` on Q and K
is the same fp32 ``(1 + weight)`` multiply: ``qk_norm_fp32`` keeps ``qk_norm_fp32_output``
alone, its full RoPE leaving Q token-major (no copy).  The same norm as the layer's main norms
(``norm_fp32``: Gemma, Qwen3-Next) keeps ``norm_fp32_output``, :math:`2\tau h/\sigma + 4h` per
norm, and Gemma 2/3's post-attention and post-MLP norms (``post_norms``) their inputs and
statistics, :math:`2(2\tau h + 4\tau)/\sigma`; every transformers RMSNorm (``hf_norms``)
keeps an fp32 copy of its input, :math:`4\tau h/\sigma` per norm, :math:`4\tau(a+g)d_h/t` on
Q and K, :math:`4\tau r` on MLA's latents (:mod:`memsym.terms.hf_norms` derives all four).
Multi-latent attention (``mla``): Q and K
are :math:`a(d_{qk} + d_r)` wide, V :math:`a d_v`, and the latents (the inputs of the q/kv
up-projections and their norms, :math:`4\tau r` each) are replicated over t.

An MoE layer replaces the dense MLP: the router keeps fp32 probabilities (:math:`4\tau
E/\sigma`), each expert GPU receives :math:`R = c_f\,k\,\tau\,t_e/t` routed token copies
(top-k, the ETP all-gather, the capacity factor :math:`c_f` for the busiest rank; Switch
Transformer §2.2) and keeps for each its fc1 input :math:`2h`, activation input
:math:`(2 + 2\gamma) f_e/t_e`, fc2 input :math:`2f_e/t_e` and, where the combine weights the
expert outputs by the router's probabilities (``combine_kept``: torchtitan), the expert output
:math:`2h`; Megatron-core multiplies the probabilities into the expert activation before fc2
and combines by a plain sum, which keeps no expert output
(:attr:`memsym.frameworks.Framework.moe_combine_keeps_outputs` cites both).  Shared experts
keep a dense MLP of width :math:`f_{sh}` (their input is the router's input, counted once).
A latent MoE (``latent``, Megatron-core's ``moe_latent_size``) projects the norm output to
:math:`h_{lat}` before the dispatch and back after the combine (moe_layer.py:489-490,
591-592): the routed copies and the combine are :math:`h_{lat}` wide, fc2_latent_proj keeps
its input :math:`2\tau h_{lat}/\sigma` and, under FP8, fc1_latent_proj its quantized input.

FP8 compute in Transformer Engine (``fp8_inputs``) saves each GEMM's input for the
weight gradient as the quantized FP8 tensor it multiplied, 1 byte per element instead of
2: the QKV, fc1 (their norm outputs), output-projection and fc2 inputs and the experts'
fc1/fc2 inputs.  The fused attention still keeps its own 16-bit output for its backward,
so without recompute the output projection's input costs :math:`2 + 1` bytes (FP8 attention,
``fp8_attention``: its own saved widths, :mod:`memsym.terms.fp8_attention`).  MXFP8
(``fp8_inputs="mxfp8"``) saves the columnwise copy the weight gradient reads with its E8M0
scales, one byte per 32 elements: :math:`1 + 1/32` bytes (TE ``linear.py``: the rowwise data
is discarded, ``update_usage(rowwise_usage=False, columnwise_usage=True)``;
``MXFP8Quantizer.get_scale_shape``).  NVFP4 (precision fp4, ``fp8_inputs="nvfp4"``) keeps the
columnwise 4-bit copy with an E4M3 scale per 16 elements: :math:`1/2 + 1/16` bytes.

Selective recompute drops what the recomputed modules (Megatron's ``--recompute-modules``,
``modules``; default ``core_attn``) keep for their backward; each checkpoint's input stays
saved (:data:`memsym.terms.recompute_sources.RECOMPUTE_MODULE_SOURCES`, Transformer Engine's layer spec):

==================  =====================================================================
module              terms dropped (or reduced)
==================  =====================================================================
``core_attn``       ``scores`` / ``softmax_stats`` (and the fused attention's own 16-bit
                    output under FP8: ``proj_input`` keeps only the FP8 copy)
``layernorm``       the output and fp32 statistics of the norms that are not fused into
                    the next GEMM: before MLA (``qkv_input``) and before an MoE layer
                    (``moe_input``); the dense layers' norms are fused (no effect)
``mla_up_proj``     ``qk``, ``v`` and the norm-output half of ``mla_latents`` (the
                    up-projections' inputs, :math:`2\tau r`; the compressed latents stay)
``mlp``             dense layers: ``mlp_input``, ``mlp_activation``, ``fc2_input`` and the
                    fused fc1 norm's statistics (the dropout mask stays)
``moe``             MoE layers: ``router``, ``routed_tokens``, ``expert_activation``,
                    ``expert_fc2_input``, ``combine``, ``shared_expert`` (``moe_input``,
                    the checkpoint's input, stays)
``moe_act``         MoE layers: ``expert_fc2_input`` (the activation output)
``shared_experts``  MoE layers: ``shared_expert``
==================  =====================================================================

Megatron-core's MoE layer keeps no expert output for its combine (``combine_kept=False``):

>>> keys = lambda T: {term.key for term in T.terms}
>>> sorted(keys(layer_activations(moe=True)) - keys(layer_activations(moe=True,
...                                                                 combine_kept=False)))
['combine']

Full recompute keeps only the layer input :math:`2\tau h/\sigma` (Table 2: 2sbh);
``selective-op`` is torchtitan's per-op policy (:func:`memsym.terms.op_sac.op_sac_layer`).
Recomputing the dense MLP as well keeps neither its fc1 input, nor the GeLU input and output
(2sbh + 8sbh + 8sbh) nor the fused norm's statistics:

>>> B = layer_activations(recompute="selective", modules=["core_attn", "mlp"])
>>> keys = lambda T: {term.key for term in T.terms}
>>> sorted(keys(layer_activations(recompute="selective")) - keys(B))
['fc2_input', 'mlp_activation', 'mlp_input']

References
----------
.. [korthikanti] Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
   Models", arXiv:2205.05198, §4.1 (Eq. 1), §4.2, Table 2.
.. [flash-attention] Dao et al. 2022, arXiv:2205.14135 §3.1; Dao 2023, arXiv:2307.08691.
.. [shazeer-switch] Fedus, Zoph, Shazeer 2021, arXiv:2101.03961, §2.2 (expert capacity).
.. [megatron-core] ``megatron/core/transformer`` at d98e8a64dd (:mod:`memsym.terms.recompute_sources`).
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError, choose
from ..symbols import E, a, b, c, c_f, d_h, f, f_e, f_sh, g, h, h_lat, k, s, t, t_e
from ..term import Source, Total
from ..vocabulary import RECOMPUTE, recompute_modules
from .fp8_attention import FP8_ATTENTION_SOURCE
from .hf_norms import fp32_input_copies, fp32_scale_norms, fp32_scale_qk_norms, post_norms
from .layer_options import (LAYER_SOURCE, TE_SAVED_INPUT, LayerOptions, LayerTerms,
                            layer_options)
from .op_sac import op_sac_layer
from .recompute_sources import RECOMPUTE_MODULE_SOURCES

__all__ = ["NORMS", "layer_activations", "token_split"]

#: Normalisations and the fp32 statistics per token each keeps for its backward [bytes].
#: LayerNorm keeps mean and 1/sigma, RMSNorm only 1/rms (``torch.native_layer_norm`` and
#: Transformer Engine save exactly these; the paper neglects them).
NORMS = {"layernorm": 8, "rmsnorm": 4}

_K = "korthikanti"
_DERIVED = Source("memsym-derivation", "memsym/terms/activations.py module docstring")

_GATE = Source("hf-transformers-5-25", "models/qwen3_next/modeling_qwen3_next.py "
               "Qwen3NextAttention.forward (lines 270-303: q_proj split into query and gate, "
               "attn_output * torch.sigmoid(gate), then o_proj)")
_Q3N = "models/qwen3_next/modeling_qwen3_next.py "
_Q3N_ROPE = Source("hf-transformers-5-25", _Q3N + "apply_rotary_pos_emb (lines 186-188: torch.cat "
                   "of q_embed and q_pass); integrations/sdpa_attention.py sdpa_attention_forward "
                   "(line 196: attn_output.transpose(1, 2).contiguous())")
_LATENT = Source("megatron-core", "megatron/core/transformer/moe/moe_layer.py:489-490 "
                 "(preprocess: fc1_latent_proj before the dispatch), 591-592 (postprocess: "
                 "fc2_latent_proj after the combine), 266-304 (TELinear, duplicated)")


def token_split(sequence_parallel: bool) -> tuple:
    r"""The tokens of one micro-batch on a context-parallel rank and the sequence-parallel divisor.

    :math:`\tau = s b / c` and :math:`\sigma = t` under sequence parallelism (which splits the
    h-wide tensors over t), else 1: every activation term is written in these two.

    Parameters
    ----------
    sequence_parallel : bool
        Megatron sequence parallelism.

    Examples
    --------
    >>> token_split(True)
    (b*s/c, t)
    """
    tok = s * b / c                   # tokens of one micro-batch on this context-parallel rank
    sp_div = t if sequence_parallel else 1   # sequence parallelism splits the h-wide tensors over t
    return tok, sp_div


def _common(sp_on: bool, recompute: str, width=2):
    """(the recompute mode checked, tokens on this context-parallel rank, the SP divisor);
    ``width`` checked: 2 bytes (16-bit compute) or 4 (fp32)."""
    if width not in (2, 4):
        raise InvalidValueError(f"activation width must be 2 (16-bit) or 4 (fp32) bytes, "
                                f"got {width!r:.40}")
    return (choose("recompute mode", recompute, RECOMPUTE), *token_split(sp_on))


def _recomputed_modules(recompute: str, modules) -> tuple:
    """The modules selective recompute reruns (None: Megatron's default ``core_attn``); none
    under another mode."""
    if recompute != "selective":
        return ()
    return ("core_attn",) if modules is None else recompute_modules(modules)


def _full_recompute(tok, sig, width=2) -> Total:
    """Full recompute: the layer input alone (Korthikanti Table 2: 2sbh; ``width`` bytes an
    element)."""
    terms = LayerTerms()
    terms.add("layer_input", width * tok * h / sig, "layer input, the only tensor kept under full "
              "recompute", Source(_K, "Table 2, full activation recomputation"))
    return Total("activations per layer (full recompute)", tuple(terms))


def _norm_terms(ly: LayerOptions, terms: LayerTerms, copies: bool = False) -> None:
    """The two norms' inputs and statistics (and, ``copies``, the fp32 copies that transformers'
    RMSNorms keep: :func:`~memsym.terms.hf_norms.fp32_input_copies`), the QKV projection's
    input."""
    tok, sig = ly.tok, ly.sig
    terms.add("norm_inputs", 2 * ly.w * tok * h / sig, "inputs of the two norms (attention and MLP)",
              Source(_K, "§4.1, LayerNorm: 4sbh"))
    # norms whose statistics the backward keeps: a recomputed norm ("layernorm", or the
    # fc1-fused norm inside a recomputed dense MLP) rebuilds them
    n_stats = 2 - ly.drop_in_norm - ly.drop_pre_mlp_norm - ly.drop_mlp
    stat_mods = [m for m, on in (("layernorm", ly.drop_in_norm or ly.drop_pre_mlp_norm),
                                 ("mlp", ly.drop_mlp)) if on]
    stats = (n_stats * NORMS[ly.norm] * tok / sig) if ly.norm_statistics else 0
    terms.add("norm_statistics", stats,
              f"fp32 per-token statistics of {'the two' if n_stats == 2 else 'one'} {ly.norm} "
              "norm" + ("s" if n_stats == 2 else "") + " (the paper neglects them"
              + (f"; recomputed: {', '.join(stat_mods)}" if stat_mods else "") + ")",
              RECOMPUTE_MODULE_SOURCES[stat_mods[-1]] if stat_mods else _DERIVED)
    if ly.post_norms:
        terms.append(post_norms(tok, sig, NORMS[ly.norm] if ly.norm_statistics else 0, ly.w))
    kept = 2 - ly.drop_in_norm - ly.drop_pre_mlp_norm - ly.drop_mlp + 2 * ly.post_norms
    if ly.norm_fp32:     # the pre-norms that stay saved and the post-norms
        terms.append(fp32_scale_norms(tok, sig, kept, ly.w))
    if copies:           # Q and K norms, or MLA's latent norms unless mla_up_proj rebuilds them
        rank = ly.mla["kv_lora_rank"] + (ly.mla.get("q_lora_rank") or 0) if ly.mla else 0
        terms.extend(fp32_input_copies(tok, sig, kept, ly.qk_norm and not ly.mla,
                                       0 if ly.drop_up_proj else sp.Integer(rank),
                                       product=copies == "fp32_product", width=ly.w))
    if not ly.drop_in_norm:
        terms.add("qkv_input", ly.gx * tok * h / sig, "norm output, input of the QKV projection"
                  + (" (FP8)" if ly.fp8 else ""), ly.gsrc)


def _qkv_terms(ly: LayerOptions, terms: LayerTerms):
    """Queries, keys and values (MLA: and its latents); returns the attention output's width."""
    tok, mla, dpa = ly.tok, ly.mla, ly.dpa
    qkw = dpa[0] if dpa else ly.w      # FP8 attention saves its own quantized Q, K, V
    fp8 = f" (FP8 attention, {ly.fp8_dpa})" if dpa else ""
    if mla:
        r_q, r_kv = mla.get("q_lora_rank"), mla["kv_lora_rank"]
        d_qk, d_r, d_v = (sp.Integer(mla[x])
                          for x in ("qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"))
        rank = sp.Integer(r_kv) + (sp.Integer(r_q) if r_q else 0)
        if ly.drop_up_proj:
            terms.add("mla_latents", ly.w * tok * rank, "MLA compressed latents, the input of the "
                      "recomputed up-projections (mla_up_proj: their norm outputs are rebuilt)",
                      RECOMPUTE_MODULE_SOURCES["mla_up_proj"])
        else:
            terms.add("mla_latents", 2 * ly.w * tok * rank, "MLA latents: inputs of the q/kv "
                      "up-projections and of their norms (down-projections are replicated over t)",
                      _DERIVED)
            src = FP8_ATTENTION_SOURCE[ly.fp8_dpa] if dpa else _DERIVED
            terms.add("qk", qkw * tok * 2 * a * (d_qk + d_r) / t,
                      "MLA queries and keys, a(d_qk + d_r) wide each" + fp8, src)
            terms.add("v", qkw * tok * a * d_v / t, "MLA values, a d_v wide" + fp8, src)
        return a * d_v
    terms.add("qk", qkw * tok * (a + g) * d_h / t,
              "queries (a d_h wide) and keys (g d_h: GQA) for QK^T" + fp8,
              FP8_ATTENTION_SOURCE[ly.fp8_dpa] if dpa else LAYER_SOURCE)
    if ly.qk_norm:
        # one fp32 statistic per head and token ("head", Qwen3), or per token for Q and
        # for K when the norm spans the whole projection ("full", OLMo 2)
        stats = 8 * tok if ly.qk_norm == "full" else 4 * tok * (a + g) / t
        terms.add("qk_norm_inputs", ly.w * tok * (a + g) * d_h / t + stats,
                  "inputs of the per-head Q and K norms and their fp32 statistics (qk_layernorm)",
                  Source("megatron-core", "core/transformer/attention.py, SelfAttention."
                         "get_query_key_value_tensors (q_layernorm, k_layernorm before RoPE)"))
        if ly.qk_fp32:
            # transformers' Qwen3NextRMSNorm and Gemma3RMSNorm: output * (1.0 + weight.float())
            terms.append(fp32_scale_qk_norms(tok, qwen3_next=ly.hf_qwen3_next, width=ly.w))
    terms.add("v", qkw * tok * g * d_h / t, "values (g d_h wide: GQA) for softmax times V" + fp8,
              FP8_ATTENTION_SOURCE[ly.fp8_dpa] if dpa else LAYER_SOURCE)
    return a * d_h


def _attention_terms(ly: LayerOptions, terms: LayerTerms, proj_width) -> None:
    """The attention scores (or flash statistics), the output projection's input, the mask."""
    tok, dpa = ly.tok, ly.dpa
    if not ly.drop_core:
        if dpa:
            terms.add("softmax_stats", dpa[2] * a * tok / t, "FP8 fused attention: fp32 softmax "
                      f"statistics per query row and head ({ly.fp8_dpa}; no s^2 tensors)",
                      FP8_ATTENTION_SOURCE[ly.fp8_dpa])
        elif ly.flash:
            terms.add("softmax_stats", 4 * a * tok / t,
                      "flash attention: one fp32 logsumexp per query row and head (no s^2 tensors)",
                      Source("flash-attention", "FlashAttention-2 §3.1.1 (logsumexp); "
                             "FlashAttention §3.1"))
        else:
            adelta = 1 if ly.att_drop else 0
            terms.add("scores", (ly.w + (ly.w + 1) * adelta) * a * s * tok / t,
                      "softmax output" + (", its dropout mask and dropout output" if ly.att_drop
                                          else "")
                      + " (a x s/c x s per micro-batch)", Source(_K, "§4.1, attention: 5as^2b"))
    # FP8: the projection keeps an FP8 copy; the fused attention's own output stays saved for
    # its backward unless the attention is recomputed (core_attn): 16-bit, or under FP8
    # attention the width its recipe saves (delayed: FP8)
    att_o = dpa[1] if dpa else ly.w if ly.fp8 and ly.flash and not ly.drop_core else 0
    o_bytes = ly.gx + att_o
    terms.add("proj_input", o_bytes * tok * proj_width / t, "attention output, input of the "
              "output projection" + (" (FP8 copy" + (f" beside the attention's {8 * att_o}-bit "
                                                     "output)" if att_o else ")")
                                     if ly.fp8 else ""),
              FP8_ATTENTION_SOURCE[ly.fp8_dpa] if dpa else ly.gsrc)
    if ly.output_gate:
        # attn_output * sigmoid(gate): the sigmoid keeps its output, the product its two
        # operands (that output and the ungated attention output); o_proj keeps the product.
        # Under FP8 with flash, proj_input already holds the attention's 16-bit output.
        ungated = 0 if att_o == ly.w else ly.w
        terms.add("output_gate", (ly.w + ungated) * tok * proj_width / t,
                  "output gate: sigmoid(gate), kept by the sigmoid and the product"
                  + (", and the ungated attention output the product keeps" if ungated else ""),
                  _GATE)
    if ly.hf_qwen3_next and ly.flash and not ly.drop_core:
        terms.add("sdpa_output_copy", ly.w * tok * proj_width / t, "a second 16-bit attention "
                  "output: partial RoPE's torch.cat leaves Q, so the kernel's output, head-major, "
                  "and SDPA's transpose(1, 2).contiguous() copies it", _Q3N_ROPE)
    terms.add("attn_dropout_mask", ly.delta * tok * h / ly.sig,
              "dropout mask after the attention block")


def _dense_mlp_terms(ly: LayerOptions, terms: LayerTerms) -> None:
    """A dense MLP's fc1 input, activation input and output, and its dropout mask."""
    tok, sig = ly.tok, ly.sig
    if not ly.drop_mlp:
        terms.add("mlp_input", ly.gx * tok * h / sig, "norm output, input of fc1"
                  + (" (FP8)" if ly.fp8 else ""), ly.gsrc)
        terms.add("mlp_activation", (1 + ly.gam) * ly.w * tok * f / t,
                  "fc1 output, input of the " + ("SwiGLU (gate and up, 2f wide)" if ly.gated
                                                 else "GeLU"),
                  _DERIVED if ly.gated else LAYER_SOURCE)
        terms.add("fc2_input", ly.gx * tok * f / t, "activation output, input of fc2"
                  + (" (FP8)" if ly.fp8 else ""), ly.gsrc)
    terms.add("mlp_dropout_mask", ly.delta * tok * h / sig, "dropout mask after the MLP")


def _moe_terms(ly: LayerOptions, terms: LayerTerms) -> None:
    """An MoE layer's router, routed tokens, experts, combine, shared experts and dropout mask."""
    tok, sig, gam = ly.tok, ly.sig, ly.gam
    routed = c_f * k * tok * t_e / t   # token copies one expert GPU receives per micro-batch
    moe_src = Source("memsym-derivation", "layer_activations docstring (MoE layer)")
    w = h_lat if ly.latent else h      # a latent MoE dispatches and combines h_lat wide
    if not ly.drop_pre_mlp_norm:
        terms.add("moe_input", ly.w * tok * h / sig,
                  "norm output, input of the router and the shared experts")
    if not ly.drop_moe:
        terms.add("router", 4 * tok * E / sig, "fp32 router probabilities over the E experts",
                  moe_src)
        terms.add("routed_tokens", ly.gx * routed * w, "dispatched token copies, input of the "
                  "expert fc1 (top-k, capacity factor c_f)" + (", FP8" if ly.fp8 else ""),
                  TE_SAVED_INPUT if ly.fp8 else Source("shazeer-switch", "§2.2, expert capacity"))
        terms.add("expert_activation", (1 + gam) * ly.w * routed * f_e / t_e,
                  "expert fc1 outputs, input of the expert activation", moe_src)
        if not ly.drop_moe_act:
            terms.add("expert_fc2_input", ly.gx * routed * f_e / t_e, "expert activation "
                      "outputs, input of fc2" + (" (FP8)" if ly.fp8 else ""),
                      TE_SAVED_INPUT if ly.fp8 else moe_src)
        if ly.combine_kept:
            terms.add("combine", ly.w * routed * w, "expert outputs kept for the probability-"
                      "weighted combine", moe_src)
        if ly.latent:
            _latent_terms(ly, terms)
    if ly.shared_expert and not ly.drop_shared:
        # SharedExpertMLP's TE linears (no fused norm): under FP8 fc1 keeps a quantized copy
        # of the norm output moe_input holds, fc2 one of the activation output
        terms.add("shared_expert", ((1 + gam) * ly.w + ly.gx) * tok * f_sh / t + (
            ly.gx * tok * h / sig if ly.fp8 else 0), "shared-expert activation and fc2 inputs"
            + (", fc1's FP8 input copy" if ly.fp8 else ""), TE_SAVED_INPUT if ly.fp8 else moe_src)
    terms.add("mlp_dropout_mask", ly.delta * tok * h / sig, "dropout mask after the MoE block")


def _latent_terms(ly: LayerOptions, terms: LayerTerms) -> None:
    """A latent MoE's projections: what fc1_latent_proj and fc2_latent_proj keep."""
    tok, sig = ly.tok, ly.sig
    if ly.fp8:
        # fc1_latent_proj's bf16 input is the norm output moe_input already holds; under FP8
        # its TELinear keeps the quantized copy it multiplied
        terms.add("latent_fc1_input", ly.gx * tok * h / sig, "FP8 copy of the norm output, "
                  "input of fc1_latent_proj (h -> h_lat)", _LATENT)
    terms.add("latent_fc2_input", ly.gx * tok * h_lat / sig, "combined expert output, input "
              "of fc2_latent_proj (h_lat -> h)" + (" (FP8)" if ly.fp8 else ""), _LATENT)


def layer_activations(*, gated: bool = False, flash: bool = False, sequence_parallel: bool = False,
                      recompute: str = "none", dropout: bool = True, norm: str = "layernorm",
                      moe: bool = False, shared_expert: bool = False, mla: dict | None = None,
                      attention_dropout: bool | None = None, norm_statistics: bool = True,
                      qk_norm: bool = False, fp8_inputs: bool | str = False, modules=None,
                      output_gate: bool = False, compiled: bool = False, norm_fp32: bool = False,
                      hf_qwen3_next: bool = False, qk_norm_fp32: bool = False, latent: bool = False,
                      post_norms: bool = False, combine_kept: bool = True, hf_norms=False,
                      width: int = 2, fp8_attention: str | None = None) -> Total:
    r"""Activations one transformer layer keeps for its backward, term by term [bytes].

    Per micro-batch and GPU, :math:`\tau = sb/c` tokens on this context-parallel rank,
    :math:`\sigma = t` under sequence parallelism (else 1), in an MoE layer :math:`R = c_f k\tau
    t_e/t` routed token copies per expert GPU (top-k, the ETP all-gather, capacity factor c_f):

    .. math::

        \begin{aligned}
        \text{attention:}\;& \tfrac{4\tau h}{\sigma} + \tfrac{2\tau h}{\sigma}
            + \tfrac{2\tau (a+g) d_h}{t} + \tfrac{2\tau g d_h}{t}
            + \tfrac{(2 + 3\delta)\,a s \tau}{t} + \tfrac{2\tau a d_h}{t}
            + \tfrac{\delta\,\tau h}{\sigma}
            + [\mathrm{gate}]\,\tfrac{4\tau a d_h}{t} \\
        \text{dense MLP:}\;& \tfrac{2\tau h}{\sigma} + \tfrac{(2 + 2\gamma)\,\tau f}{t}
            + \tfrac{2\tau f}{t} + \tfrac{\delta\,\tau h}{\sigma} \\
        \text{MoE layer:}\;& \tfrac{2\tau h}{\sigma} + \tfrac{4\tau E}{\sigma}
            + R\,\Bigl(2h + \tfrac{(2 + 2\gamma) f_e}{t_e} + \tfrac{2 f_e}{t_e}
            + [\mathrm{kept}]\,2h\Bigr)
            + \tfrac{\delta\,\tau h}{\sigma}
        \end{aligned}

    (:math:`\delta` = 1 with dropout, :math:`\gamma` = 1 gated, [kept] = ``combine_kept``; shared
    experts add a dense MLP of width :math:`f_{sh}`; under FP8 also fc1's FP8 input copy).

    Parameters
    ----------
    gated, flash, sequence_parallel : bool
        Gated MLP (SwiGLU: gate and up projections kept); flash attention (no s^2 tensors);
        Megatron sequence parallelism (the h-wide tensors divided by t).
    recompute : {"none", "selective", "selective-op", "full"}
    modules, compiled : sequence of str or None, bool
        Under ``"selective"``, Megatron's ``--recompute-modules`` (None: ``("core_attn",)``);
        ``"selective-op"`` under ``torch.compile`` (:func:`memsym.terms.op_sac.op_sac_layer`).
    dropout, attention_dropout, norm, norm_statistics : bool, bool, {"layernorm", "rmsnorm"}, bool
        Hidden dropout masks kept (1 byte an element); attention dropout (None: ``dropout``);
        the normalisation; its fp32 per-token statistics kept (False reproduces the paper).
    moe, shared_expert, combine_kept, latent : bool
        An MoE layer; shared experts (width ``f_sh``); the expert outputs kept for the combine
        (module docstring; Megatron-core keeps none); latent MoE (``moe_latent_size``).
    qk_norm : bool or {"head", "full"}
        Norms on Q and K (``qk_layernorm``), per head (True, ``"head"``) or whole (``"full"``).
    output_gate, hf_qwen3_next, qk_norm_fp32, norm_fp32, post_norms, hf_norms : bool
        Qwen3-Next's gate (``attention_output_gate``; not "selective-op"); transformers'
        ``Qwen3NextAttention`` (fp32 Q/K norms, a copied output); fp32 ``1 + w`` Q/K, main norms;
        post-norms (Gemma 2/3, GLM-4); RMSNorms' fp32 input copies (:mod:`memsym.terms.hf_norms`;
        ``"fp32_product"``: with the fp32 ``weight *`` product, OLMo 2, GPT-OSS).
    fp8_inputs, width, fp8_attention : bool or {"mxfp8", "nvfp4"}, {2, 4}, str or None
        TE FP8 compute: saved GEMM inputs in FP8 (1 byte; ``"mxfp8"`` 1 + 1/32, ``"nvfp4"`` 1/2
        + 1/16) [bytes]; a tensor's bytes (4: fp32); FP8 attention's recipe (``fp8_attention``).
    mla : dict, optional
        Multi-latent attention sizes ``q_lora_rank`` (may be None), ``kv_lora_rank``,
        ``qk_head_dim``, ``qk_pos_emb_head_dim``, ``v_head_dim`` (exact integers).

    Returns
    -------
    Total
        Per layer, per micro-batch, per GPU [bytes].

    Examples
    --------
    The GPT layer (t = c = 1, g = a, d_h = h/a, f = 4h) is Eq. 1 plus the norm statistics:

    >>> A = layer_activations().without("norm_statistics")
    >>> gpt = {c: 1, t: 1, g: a, d_h: h / a, f: 4 * h}
    >>> sp.simplify(A.expr.subs(gpt) - b*h*s*(34 + 5*a*s/h))
    0
    >>> layer_activations(output_gate=True)["output_gate"].expr   # Qwen3-Next's gate
    4*a*b*d_h*s/(c*t)

    References
    ----------
    Korthikanti et al. 2022 §4.1–4.3; FlashAttention (arXiv:2205.14135, 2307.08691); Switch
    Transformers (arXiv:2101.03961) §2.2; Transformer Engine ``linear.py``, ``layernorm_linear.py``
    (inputs saved quantized); transformers v5.25.0 ``modeling_qwen3_next.py`` (Qwen3-Next).
    """
    recompute, tok, sig = _common(sequence_parallel, recompute, width)
    mods = _recomputed_modules(recompute, modules)
    norm = choose("normalization", norm, NORMS)
    if recompute == "full":
        return _full_recompute(tok, sig, width)
    if recompute == "selective-op":
        return op_sac_layer(tok, sig, gated=gated, flash=flash, moe=moe, mla=mla,
                            sequence_parallel=sequence_parallel, compiled=compiled, width=width)
    ly = layer_options(
        recompute, mods, tok, sig, gated=gated, flash=flash, fp8=fp8_inputs, norm=norm,
        norm_statistics=norm_statistics, dropout=dropout, qk_norm=qk_norm, mla=mla,
        output_gate=output_gate, hf_qwen3_next=hf_qwen3_next, qk_fp32=qk_norm_fp32, moe=moe,
        att_drop=attention_dropout, shared=shared_expert, latent=latent, dpa=fp8_attention,
        combine_kept=combine_kept, norm_fp32=norm_fp32, post_norms=post_norms, width=width)
    return _layer_total(ly, recompute, mods, copies=hf_norms if norm == "rmsnorm" else False)


def _layer_total(ly, recompute: str, mods, copies: bool = False) -> Total:
    """The layer's terms in order (norms, Q/K/V, attention, then the MLP or MoE), named by the
    layer kind and the recompute mode (its modules under ``"selective"``); ``copies``: with
    transformers' RMSNorms' fp32 input copies (nn.LayerNorm keeps none)."""
    what = recompute + (f": {', '.join(mods) or 'no module'}" if recompute == "selective" else "")
    name = f"activations per layer ({'MoE' if ly.moe else 'dense'}, recompute {what})"
    terms = LayerTerms()
    _norm_terms(ly, terms, copies)
    _attention_terms(ly, terms, _qkv_terms(ly, terms))
    (_moe_terms if ly.moe else _dense_mlp_terms)(ly, terms)
    return Total(name, tuple(terms))
