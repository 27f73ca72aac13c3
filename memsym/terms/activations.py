r"""Activation memory per transformer layer, as Korthikanti et al. printed it and as real models differ.

Two families live here.  :func:`korthikanti` returns the paper's per-layer formulas exactly as
printed (Eq. 1, Eq. 2, Eq. 4 and the Table 2 rows), each its own cited :class:`~memsym.term.Term`.
:func:`layer_activations`, :func:`embedding_activations` and :func:`output_activations` derive
the same bytes tensor by tensor, so that each departure from the paper's GPT layer (gated MLP,
GQA, flash attention, RMSNorm, context parallelism, MoE layers, MLA, the logits) is a named term
and not a fudge factor; with the paper's settings they reduce to the paper's formulas
(``tests/test_activations.py`` proves it).

Conventions (Korthikanti §4.1): 2 bytes per 16-bit element, 1 byte per dropout-mask element,
per micro-batch of ``b`` sequences of ``s`` tokens, for one GPU.

Derivation of the GPT layer (Korthikanti §4.1), the base of every variant:

================================  ====================  ==========================================
tensor kept for backward           bytes                 memsym key
================================  ====================  ==========================================
input of each of the 2 norms       2·2sbh                ``norm_inputs``
norm output = QKV GEMM input       2sbh                  ``qkv_input``
Q and K (for QK^T)                 2sb(a + g)d_h         ``qk``          (4sbh for g = a)
V (for softmax·V)                  2sb·g·d_h             ``v``           (2sbh)
softmax out, dropout mask, out     (2 + 1 + 2)as²b       ``scores``      (flash: ``softmax_stats``)
attention output = proj input      2sb·a·d_h             ``proj_input``  (2sbh)
attention dropout mask             sbh                   ``attn_dropout_mask``
norm output = fc1 input            2sbh                  ``mlp_input``
fc1 output = activation input      2sbf (gated: 4sbf)    ``mlp_activation``  (8sbh for f = 4h)
activation output = fc2 input      2sbf                  ``fc2_input``   (8sbh)
MLP dropout mask                   sbh                   ``mlp_dropout_mask``
================================  ====================  ==========================================

Sum: 34sbh + 5as²b = sbh(34 + 5as/h) (Eq. 1).  Tensor parallelism divides the head- and
f-sized tensors by t (Eq. 2: 10 + 24/t), sequence parallelism divides the rest by t too (Eq. 4),
and context parallelism divides every token count by c (each rank keeps s/c queries; its
scores are (s/c)×s per head).

References
----------
.. [korthikanti] Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
   Models", arXiv:2205.05198, §4.1 (Eq. 1), §4.2 (Eq. 2, 4), Table 2, §4.3.
.. [flash-attention] Dao et al. 2022, arXiv:2205.14135 §3.1; Dao 2023, arXiv:2307.08691.
.. [megatron-lm] theoretical_memory_usage.py (8sbp int64 input ids).
"""

from __future__ import annotations

import sympy as sp

from ..errors import choose
from ..symbols import E, V, a, b, c, c_f, d_h, f, f_e, f_sh, g, h, k, s, t, t_e
from ..term import Source, Term, Total
from ..values import as_expr
from ..vocabulary import RECOMPUTE, RECOMPUTE_MODULES, recompute_modules  # noqa: F401
from .korthikanti import PARALLEL, korthikanti, korthikanti_terms
from .op_sac import op_sac_layer
from .schedule import first_stage_layers

__all__ = [
    "PARALLEL", "RECOMPUTE", "NORMS", "RECOMPUTE_MODULES", "RECOMPUTE_MODULE_SOURCES",
    "recompute_modules", "korthikanti", "korthikanti_terms",
    "layer_activations", "embedding_activations", "output_activations", "lora_gathered_inputs",
    "paper_layer", "paper_first_stage",
]

#: Normalisations and the fp32 statistics per token each keeps for its backward [bytes].
#: LayerNorm keeps mean and 1/sigma, RMSNorm only 1/rms (``torch.native_layer_norm`` and
#: Transformer Engine save exactly these; the paper neglects them).
NORMS = {"layernorm": 8, "rmsnorm": 4}

_K = "korthikanti"
_DERIVED = Source("memsym-derivation", "memsym/terms/activations.py module docstring")

#: Megatron-Core's ``--recompute-modules`` that memsym models, in Megatron's order
#: (``TransformerConfig.recompute_modules`` in ``megatron/core/transformer/transformer_config.py``
#: at d98e8a64dd; the default under ``--recompute-granularity selective`` is ``core_attn``):
#: :data:`memsym.vocabulary.RECOMPUTE_MODULES`.

_MC = "megatron-core"
#: Where each module's recompute is implemented (Megatron-LM at d98e8a64dd): the checkpoint's
#: input stays saved, what runs inside it is recomputed in backward.
RECOMPUTE_MODULE_SOURCES = {
    "core_attn": Source(_MC, "megatron/core/transformer/attention.py, Attention."
                        "_checkpointed_attention_forward (tensor_parallel.checkpoint of "
                        "core_attention; q, k, v kept)"),
    "moe_act": Source(_MC, "megatron/core/transformer/moe/experts.py, TEGroupedMLP.forward "
                      "(CheckpointWithoutOutput of bias_act_func; its output, the linear_fc2 "
                      "input, discarded once fc2 ran; fc1 output kept)"),
    "layernorm": Source(_MC, "megatron/core/transformer/transformer_layer.py, TransformerLayer."
                        "__init__ (only a norm that is not IdentityOp) and _run_input_layernorm / "
                        "_forward_pre_mlp_layernorm (CheckpointWithoutOutput: the norm output "
                        "discarded, its input kept); models/gpt/gpt_layer_specs.py, "
                        "get_gpt_layer_with_transformer_engine_submodules (TENorm before MLA and "
                        "before an MoE layer, fused into linear_qkv / linear_fc1 otherwise)"),
    "mla_up_proj": Source(_MC, "megatron/core/transformer/multi_latent_attention.py, "
                          "MLASelfAttention.get_query_key_value_tensors (CheckpointWithoutOutput "
                          "of qkv_up_proj_and_rope_apply on the compressed latents) and "
                          "MultiLatentAttention.forward (q, k, v discarded after core attention)"),
    "mlp": Source(_MC, "megatron/core/transformer/transformer_layer.py, TransformerLayer._run_mlp "
                  "(tensor_parallel.checkpoint of the dense MLP on pre_mlp_layernorm_output, the "
                  "layer's hidden states under the TE spec's fused fc1 norm; not MoE layers)"),
    "moe": Source(_MC, "megatron/core/transformer/moe/moe_layer.py, MoELayer.forward "
                  "(tensor_parallel.checkpoint of custom_forward: router, dispatch, experts, "
                  "combine; input hidden_states kept)"),
    "shared_experts": Source(_MC, "megatron/core/transformer/moe/moe_layer.py, MoELayer."
                             "shared_experts_compute (tensor_parallel.checkpoint of the shared "
                             "experts on hidden_states)"),
}


# --- memsym's derivation, term by term --------------------------------------------------------
def _common(sp_on: bool, recompute: str):
    recompute = choose("recompute mode", recompute, RECOMPUTE)
    tok = s * b / c                   # tokens of one micro-batch on this context-parallel rank
    sp_div = t if sp_on else 1        # sequence parallelism splits the h-wide tensors over t
    return recompute, tok, sp_div


def layer_activations(*, gated: bool = False, flash: bool = False, sequence_parallel: bool = False,
                      recompute: str = "none", dropout: bool = True, norm: str = "layernorm",
                      moe: bool = False, shared_expert: bool = False, mla: dict | None = None,
                      attention_dropout: bool | None = None, norm_statistics: bool = True,
                      qk_norm: bool = False, fp8_inputs: bool = False,
                      modules=None) -> Total:
    r"""Activations one transformer layer keeps for its backward, term by term [bytes].

    Per micro-batch and GPU, with :math:`\tau = sb/c` tokens on this context-parallel rank and
    :math:`\sigma = t` under sequence parallelism (else 1):

    .. math::

        \begin{aligned}
        \text{attention:}\;& \tfrac{4\tau h}{\sigma} + \tfrac{2\tau h}{\sigma}
            + \tfrac{2\tau (a+g) d_h}{t} + \tfrac{2\tau g d_h}{t}
            + \tfrac{(2 + 3\delta)\,a s \tau}{t} + \tfrac{2\tau a d_h}{t}
            + \tfrac{\delta\,\tau h}{\sigma} \\
        \text{dense MLP:}\;& \tfrac{2\tau h}{\sigma} + \tfrac{(2 + 2\gamma)\,\tau f}{t}
            + \tfrac{2\tau f}{t} + \tfrac{\delta\,\tau h}{\sigma}
        \end{aligned}

    (:math:`\delta` = 1 with dropout, :math:`\gamma` = 1 for a gated MLP).  Flash attention
    replaces the :math:`(2+3\delta)as\tau/t` scores by one fp32 logsumexp per query row and
    head, :math:`4a\tau/t`: its backward reads Q, K, V, the output and the logsumexp, and
    regenerates the dropout mask from the RNG state (FlashAttention §3.1; PyTorch's
    ``_flash_attention_backward`` signature).  Norm statistics add :math:`8\tau/\sigma`
    (LayerNorm: mean, 1/σ) or :math:`4\tau/\sigma` (RMSNorm) per norm.

    An MoE layer replaces the dense MLP: the router keeps fp32 probabilities (:math:`4\tau
    E/\sigma`), each expert GPU receives :math:`R = c_f\,k\,\tau\,t_e/t` routed token copies
    (top-k, the ETP all-gather, the capacity factor :math:`c_f` for the busiest rank; Switch
    Transformer §2.2) and keeps for each its fc1 input :math:`2h`, activation input
    :math:`(2 + 2\gamma) f_e/t_e`, fc2 input :math:`2f_e/t_e` and the expert output for the
    probability-weighted combine :math:`2h`; shared experts keep a dense MLP of width
    :math:`f_{sh}` (their input is the router's input, counted once).

    FP8 compute in Transformer Engine (``fp8_inputs``) saves each GEMM's input for the
    weight gradient as the quantized FP8 tensor it multiplied, 1 byte per element instead of
    2: the QKV, fc1 (their norm outputs), output-projection and fc2 inputs and the experts'
    fc1/fc2 inputs.  The fused attention still keeps its own 16-bit output for its backward,
    so without recompute the output projection's input costs :math:`2 + 1` bytes.  (MXFP8
    adds one E8M0 scale per 32 elements, 1/32 byte, neglected here.)

    Selective recompute drops what the recomputed modules (Megatron's ``--recompute-modules``,
    ``modules``; default ``core_attn``) keep for their backward; each checkpoint's input stays
    saved (:data:`RECOMPUTE_MODULE_SOURCES`, Transformer Engine's layer spec):

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

    Full recompute keeps only the layer input :math:`2\tau h/\sigma` (Table 2: 2sbh);
    ``selective-op`` is torchtitan's per-op policy (:func:`_op_sac_layer`).

    Parameters
    ----------
    gated : bool
        Gated MLP (SwiGLU): fc1 produces gate and up projections, both kept.
    flash : bool
        Memory-efficient (flash) attention: no :math:`s^2` tensors.
    sequence_parallel : bool
        Megatron sequence parallelism (the h-wide tensors divided by t).
    recompute : {"none", "selective", "full"}
    modules : sequence of str, optional
        Under ``recompute="selective"``: Megatron's ``--recompute-modules``
        (:func:`recompute_modules`; None = Megatron's default ``("core_attn",)``).  Ignored
        under the other modes.
    dropout : bool
        Hidden dropout masks kept (1 byte per element; none at dropout 0).
    attention_dropout : bool, optional
        Attention-probability dropout; defaults to ``dropout``.
    norm : {"layernorm", "rmsnorm"}
    norm_statistics : bool
        Count the norms' fp32 per-token statistics (False reproduces the paper, which neglects them).
    moe : bool
        An MoE layer instead of a dense MLP.
    shared_expert : bool
        The MoE layer has shared experts of width ``f_sh``.
    qk_norm : bool or {"head", "full"}
        Norms on Q and K (``qk_layernorm``): they keep their inputs and fp32 statistics,
        :math:`2\tau(a+g)d_h/t + 4\tau(a+g)/t` per head (True or ``"head"``, Qwen3) or
        :math:`+\,8\tau` over the whole projection (``"full"``, OLMo 2) (``qk_norm_inputs``;
        the normalised Q and K are the ``qk`` term).
    fp8_inputs : bool
        Transformer Engine FP8 compute: the saved GEMM inputs are FP8 (1 byte).
    mla : dict, optional
        Multi-latent attention sizes ``q_lora_rank`` (may be None), ``kv_lora_rank``,
        ``qk_head_dim``, ``qk_pos_emb_head_dim``, ``v_head_dim`` (exact integers): Q and K are
        :math:`a(d_{qk} + d_r)` wide, V :math:`a d_v`, and the latents (the inputs of the q/kv
        up-projections and their norms, :math:`4\tau r` each) are replicated over t.

    Returns
    -------
    Total
        Per layer, per micro-batch, per GPU [bytes].

    Examples
    --------
    The paper's GPT layer (t = c = 1, g = a, d_h = h/a, f = 4h) is Eq. 1 plus the norm
    statistics the paper neglects:

    >>> A = layer_activations().without("norm_statistics")
    >>> gpt = {c: 1, t: 1, g: a, d_h: h / a, f: 4 * h}
    >>> sp.simplify(A.expr.subs(gpt) - b*h*s*(34 + 5*a*s/h))
    0

    Recomputing the dense MLP as well keeps neither its fc1 input, nor the GeLU input and
    output (2sbh + 8sbh + 8sbh) nor the fused norm's statistics:

    >>> B = layer_activations(recompute="selective", modules=["core_attn", "mlp"])
    >>> keys = lambda T: {term.key for term in T.terms}
    >>> sorted(keys(layer_activations(recompute="selective")) - keys(B))
    ['fc2_input', 'mlp_activation', 'mlp_input']

    References
    ----------
    Korthikanti et al. 2022 §4.1–4.3; FlashAttention (arXiv:2205.14135, 2307.08691);
    Switch Transformers (arXiv:2101.03961) §2.2; Transformer Engine ``pytorch/module/linear.py``
    and ``layernorm_linear.py`` (``saved_inputmat`` / ``ln_out`` quantized before
    ``save_for_backward``).
    """
    recompute, tok, sig = _common(sequence_parallel, recompute)
    mods = (("core_attn",) if modules is None else recompute_modules(modules)) \
        if recompute == "selective" else ()
    # what each recomputed module no longer keeps (RECOMPUTE_MODULE_SOURCES): under the TE
    # spec only the norms before MLA and before an MoE layer are TENorm modules that
    # "layernorm" checkpoints; the others are fused into linear_qkv / linear_fc1
    drop_core = recompute == "selective" and "core_attn" in mods
    drop_in_norm = "layernorm" in mods and bool(mla)
    drop_pre_mlp_norm = "layernorm" in mods and moe
    drop_up_proj = "mla_up_proj" in mods and bool(mla)
    drop_mlp = "mlp" in mods and not moe
    drop_moe = "moe" in mods and moe
    drop_moe_act = ("moe_act" in mods or "moe" in mods) and moe
    drop_shared = ("shared_experts" in mods or "moe" in mods) and moe
    # bytes per element of a saved GEMM input: FP8 under Transformer Engine, else 16-bit
    gx = 1 if fp8_inputs else 2
    te = Source("transformer-engine", "pytorch/module/linear.py, _Linear.forward (saved_inputmat: "
                "the quantized input); layernorm_linear.py (ln_out quantized by the fused norm)")
    norm = choose("normalization", norm, NORMS)
    att_drop = dropout if attention_dropout is None else attention_dropout
    delta = 1 if dropout else 0
    gam = 1 if gated else 0
    tk = Source(_K, "§4.1 (attention block, MLP, LayerNorm)")
    gsrc = te if fp8_inputs else tk
    terms: list[Term] = []

    def add(key, expr, what, source=tk):
        if expr != 0:
            terms.append(Term(key, expr, what, source, label=key.replace("_", " ")))

    if recompute == "full":
        add("layer_input", 2 * tok * h / sig, "layer input, the only tensor kept under full recompute",
            Source(_K, "Table 2, full activation recomputation"))
        return Total("activations per layer (full recompute)", tuple(terms))
    if recompute == "selective-op":
        return op_sac_layer(tok, sig, gated=gated, flash=flash, moe=moe, mla=mla,
                             sequence_parallel=sequence_parallel)

    # attention block
    add("norm_inputs", 2 * 2 * tok * h / sig, "inputs of the two norms (attention and MLP)",
        Source(_K, "§4.1, LayerNorm: 4sbh"))
    # norms whose statistics the backward keeps: a recomputed norm ("layernorm", or the
    # fc1-fused norm inside a recomputed dense MLP) rebuilds them
    n_stats = 2 - drop_in_norm - drop_pre_mlp_norm - drop_mlp
    stat_mods = [m for m, on in (("layernorm", drop_in_norm or drop_pre_mlp_norm),
                                 ("mlp", drop_mlp)) if on]
    add("norm_statistics", (n_stats * NORMS[norm] * tok / sig) if norm_statistics else 0,
        f"fp32 per-token statistics of {'the two' if n_stats == 2 else 'one'} {norm} "
        "norm" + ("s" if n_stats == 2 else "") + " (the paper neglects them"
        + (f"; recomputed: {', '.join(stat_mods)}" if stat_mods else "") + ")",
        RECOMPUTE_MODULE_SOURCES[stat_mods[-1]] if stat_mods else _DERIVED)
    if not drop_in_norm:
        add("qkv_input", gx * tok * h / sig, "norm output, input of the QKV projection"
            + (" (FP8)" if fp8_inputs else ""), gsrc)
    if mla:
        r_q, r_kv = mla.get("q_lora_rank"), mla["kv_lora_rank"]
        d_qk, d_r, d_v = (sp.Integer(mla[x]) for x in ("qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"))
        rank = sp.Integer(r_kv) + (sp.Integer(r_q) if r_q else 0)
        if drop_up_proj:
            add("mla_latents", 2 * tok * rank, "MLA compressed latents, the input of the "
                "recomputed up-projections (mla_up_proj: their norm outputs are rebuilt)",
                RECOMPUTE_MODULE_SOURCES["mla_up_proj"])
        else:
            add("mla_latents", 4 * tok * rank, "MLA latents: inputs of the q/kv up-projections "
                "and of their norms (down-projections are replicated over t)", _DERIVED)
            add("qk", 2 * tok * 2 * a * (d_qk + d_r) / t,
                "MLA queries and keys, a(d_qk + d_r) wide each", _DERIVED)
            add("v", 2 * tok * a * d_v / t, "MLA values, a d_v wide", _DERIVED)
        proj_width = a * d_v
    else:
        add("qk", 2 * tok * (a + g) * d_h / t, "queries (a d_h wide) and keys (g d_h: GQA) for QK^T")
        if qk_norm:
            # one fp32 statistic per head and token ("head", Qwen3), or per token for Q and
            # for K when the norm spans the whole projection ("full", OLMo 2)
            stats = 8 * tok if qk_norm == "full" else 4 * tok * (a + g) / t
            add("qk_norm_inputs", 2 * tok * (a + g) * d_h / t + stats,
                "inputs of the per-head Q and K norms and their fp32 statistics (qk_layernorm)",
                Source("megatron-core", "core/transformer/attention.py, SelfAttention."
                       "get_query_key_value_tensors (q_layernorm, k_layernorm before RoPE)"))
        add("v", 2 * tok * g * d_h / t, "values (g d_h wide: GQA) for softmax times V")
        proj_width = a * d_h
    if not drop_core:
        if flash:
            add("softmax_stats", 4 * a * tok / t,
                "flash attention: one fp32 logsumexp per query row and head (no s^2 tensors)",
                Source("flash-attention", "FlashAttention-2 §3.1.1 (logsumexp); FlashAttention §3.1"))
        else:
            adelta = 1 if att_drop else 0
            add("scores", (2 + 3 * adelta) * a * s * tok / t,
                "softmax output" + (", its dropout mask and dropout output" if att_drop else "")
                + " (a x s/c x s per micro-batch)", Source(_K, "§4.1, attention: 5as^2b"))
    # FP8: the projection keeps an FP8 copy; the fused attention's own 16-bit output stays
    # saved for its backward unless the attention is recomputed (core_attn)
    o_bytes = gx + (2 if fp8_inputs and flash and not drop_core else 0)
    add("proj_input", o_bytes * tok * proj_width / t, "attention output, input of the output "
        "projection" + (" (FP8 copy" + (" beside the attention's 16-bit output)" if o_bytes > 1
                                         else ")") if fp8_inputs else ""), gsrc)
    add("attn_dropout_mask", delta * tok * h / sig, "dropout mask after the attention block")

    what = recompute + (f": {', '.join(mods) or 'no module'}" if recompute == "selective" else "")
    if not moe:
        if not drop_mlp:
            add("mlp_input", gx * tok * h / sig, "norm output, input of fc1"
                + (" (FP8)" if fp8_inputs else ""), gsrc)
            add("mlp_activation", (2 + 2 * gam) * tok * f / t,
                "fc1 output, input of the " + ("SwiGLU (gate and up, 2f wide)" if gated else "GeLU"),
                _DERIVED if gated else tk)
            add("fc2_input", gx * tok * f / t, "activation output, input of fc2"
                + (" (FP8)" if fp8_inputs else ""), gsrc)
        add("mlp_dropout_mask", delta * tok * h / sig, "dropout mask after the MLP")
        return Total(f"activations per layer (dense, recompute {what})", tuple(terms))

    routed = c_f * k * tok * t_e / t   # token copies one expert GPU receives per micro-batch
    moe_src = Source("memsym-derivation", "layer_activations docstring (MoE layer)")
    if not drop_pre_mlp_norm:
        add("moe_input", 2 * tok * h / sig,
            "norm output, input of the router and the shared experts")
    if not drop_moe:
        add("router", 4 * tok * E / sig, "fp32 router probabilities over the E experts", moe_src)
        add("routed_tokens", gx * routed * h, "dispatched token copies, input of the expert fc1 "
            "(top-k, capacity factor c_f)" + (", FP8" if fp8_inputs else ""),
            te if fp8_inputs else Source("shazeer-switch", "§2.2, expert capacity"))
        add("expert_activation", (2 + 2 * gam) * routed * f_e / t_e,
            "expert fc1 outputs, input of the expert activation", moe_src)
        if not drop_moe_act:
            add("expert_fc2_input", gx * routed * f_e / t_e, "expert activation outputs, input "
                "of fc2" + (" (FP8)" if fp8_inputs else ""), te if fp8_inputs else moe_src)
        add("combine", 2 * routed * h, "expert outputs kept for the probability-weighted combine",
            moe_src)
    if shared_expert and not drop_shared:
        add("shared_expert", (4 + 2 * gam) * tok * f_sh / t,
            "shared-expert activation and fc2 inputs", moe_src)
    add("mlp_dropout_mask", delta * tok * h / sig, "dropout mask after the MoE block")
    return Total(f"activations per layer (MoE, recompute {what})", tuple(terms))


def embedding_activations(*, sequence_parallel: bool = False, dropout: bool = True) -> Total:
    r"""Activations of the input embedding on the first pipeline stage [bytes per micro-batch].

    .. math:: 8\,\frac{sb}{c} + \delta\,\frac{sbh}{c\,\sigma}

    int64 token ids (Megatron-LM's ``8sbp`` for p in-flight micro-batches) and the embedding
    dropout mask (Korthikanti §4.3: ``sbhp/t`` with SP).  The embedding lookup's backward
    needs only the ids, so its output is not counted (it is the first layer's norm input).

    Examples
    --------
    >>> embedding_activations(dropout=False).expr
    8*b*s/c

    References
    ----------
    .. [megatron-lm] ``theoretical_memory_usage.py``, ``compute_activation_memory`` (8sbp).
    .. [korthikanti] arXiv:2205.05198, §4.3 (embedding dropout mask sbhp/t).
    """
    _, tok, sig = _common(sequence_parallel, "none")
    terms = [Term("input_ids", 8 * tok, "int64 token ids",
                  Source("megatron-lm", "theoretical_memory_usage.py, compute_activation_memory "
                         "(8sbp: input to embedding)"), label="input ids")]
    if dropout:
        terms.append(Term("embedding_dropout_mask", tok * h / sig, "embedding dropout mask",
                          Source(_K, "§4.3 (sbhp/t)"), label="embedding dropout"))
    return Total("activations of the input embedding", tuple(terms))


def output_activations(*, sequence_parallel: bool = False, norm: str = "layernorm",
                       norm_statistics: bool = True, compiled_loss: bool = False,
                       gathered_output_input: bool = False, fp32_norm: bool = False) -> Total:
    r"""Activations of the final norm, the output layer and the loss on the last stage [bytes].

    .. math::

        \frac{2\tau h}{\sigma} + \frac{2\tau h}{\sigma} + \frac{4\tau V}{t}
        \;(+\;\text{norm statistics})
        \qquad\text{or, with a compiled loss,}\qquad
        \ldots + \frac{2\tau V}{t} + 8\tau

    The final norm's input, the output layer's input, and the fp32 logits the cross-entropy
    keeps (Korthikanti §4.3: 2sbh/t, 2sbh/t, 4sbv/t; Megatron's vocab-parallel cross entropy
    keeps the fp32 softmax).  These are not recomputed under full recompute, and with a large
    vocabulary the logits alone reach tens of GB (seed 002, failure pattern 3: s·b·V).
    The bf16 logits (2τV/t) exist only transiently during the forward and are not counted.

    ``compiled_loss``: torchtitan compiles its loss (``F.cross_entropy(pred.float(), labels)``)
    when ``compile.enable`` and ``"loss"`` is in ``compile.components`` (the default
    components).  Inductor fuses the fp32 cast into the softmax reductions and its partitioner
    keeps the *16-bit* logits and two fp32 statistics per token (row max and log-sum-exp,
    8 bytes) for backward, which rebuilds the softmax from them: :math:`2\tau V/t + 8\tau`
    instead of the fp32 log-softmax (``tests/test_engine_compile.py`` runs it on CPU).

    ``gathered_output_input``: torch's ``ColwiseParallel`` (torchtitan's output layer under
    sequence parallelism, ``input_layouts=Shard(1)``) all-gathers the final norm's output as
    a DTensor redistribute and the local matmul saves that gathered input, :math:`2\tau h`
    rather than Megatron's :math:`2\tau h/t` (its linear layers save the shard and re-gather
    in backward); measured on a gloo group in ``tests/test_transients.py``.

    ``fp32_norm``: torchtitan's final RMSNorm runs eagerly in fp32 (its ``RMSNorm`` until
    5078e92e4: ``_norm(x.float()).type_as(x) * weight``; the ``torch.rms_norm`` it uses since
    decomposes the same way): autograd keeps the fp32 copy :math:`4\tau h/\sigma`, the rstd
    :math:`4\tau/\sigma` and the 16-bit normalised output :math:`2\tau h/\sigma`, not the 16-bit
    input, where Megatron's fused norm keeps the input and the statistics
    (``tests/test_transients.py`` hooks a port; torch 2.13's ``nn.RMSNorm`` keeps the
    normalised output in fp32, :math:`8\tau h/\sigma` in all).

    Examples
    --------
    >>> float(output_activations()["logits"].evaluate(s=8192, b=8, c=1, t=1, V=128256)) / 1e9
    33.621540864
    >>> output_activations(compiled_loss=True)["logits"].expr
    2*V*b*s/(c*t) + 8*b*s/c

    References
    ----------
    .. [korthikanti] arXiv:2205.05198, §4.3 (final norm 2sbh/t, output input 2sbh/t, 4sbv/t).
    .. [torchtitan] ``models/norms.py`` ``RMSNorm.forward`` at 9dec370; ``components/loss.py``.
    .. [pytorch-tensor-parallel] ``distributed/tensor/parallel/style.py``, ``ColwiseParallel``.
    """
    _, tok, sig = _common(sequence_parallel, "none")
    norm = choose("normalization", norm, NORMS)
    src = Source(_K, "§4.3 (final LayerNorm 2sbh/t, output-layer input 2sbh/t, logits 4sbv/t)")
    fp32_src = Source("torchtitan", "torchtitan/models/norms.py RMSNorm.forward at 9dec370 "
                      "(_norm(x.float()).type_as(x) * weight)")
    terms = (
        Term("final_norm_input", 2 * tok * h / sig, "input of the final norm", src)
        if not fp32_norm else
        Term("final_norm_input", 6 * tok * h / sig, "the final norm's fp32 copy of its input and "
             "its 16-bit normalised output (eager RMSNorm)", fp32_src),
        Term("final_norm_statistics", NORMS[norm] * tok / sig if norm_statistics else 0,
             "fp32 statistics of the final norm", _DERIVED),
        Term("output_input", 2 * tok * h / sig, "final norm output, input of the output layer", src)
        if not gathered_output_input else
        Term("output_input", 2 * tok * h, "final norm output all-gathered over the sequence, "
             "saved by the output layer's matmul (torch ColwiseParallel)",
             Source("pytorch-tensor-parallel", "torch/distributed/tensor/parallel/style.py, "
                    "ColwiseParallel (input redistributed to Replicate before the local mm)")),
        Term("logits", 4 * tok * V / t, "fp32 logits (softmax) kept by the cross-entropy loss", src)
        if not compiled_loss else
        Term("logits", 2 * tok * V / t + 8 * tok, "16-bit logits and fp32 row max and log-sum-exp "
             "kept by the compiled cross-entropy (Inductor rebuilds the softmax in backward)",
             Source("torchtitan", "torchtitan/components/loss.py, build_cross_entropy_loss "
                    "(torch.compile(loss_fn) when compile.enable and 'loss' in components)")),
    )
    return Total("activations of the output layer and loss", tuple(x for x in terms if x.expr != 0))


def lora_gathered_inputs(eligible=1, *, sequence_parallel: bool = True,
                         regather: bool = False) -> Term:
    r"""The gathered norm output each column-parallel LoRA-A keeps under sequence parallelism [bytes].

    Per micro-batch, layer and eligible adapter (Megatron-Bridge: LoRA-A of ``linear_qkv`` and of
    a dense layer's ``linear_fc1``), with :math:`\tau = sb/c`:

    .. math:: n_{\mathrm{el}}\; 2\tau h

    Without ``sequence_parallel_input_regather`` the adapter consumes the *gathered* 16-bit
    LayerNorm output (all :math:`\tau` tokens, not the :math:`\tau/t` shard the base layer
    keeps, counted in ``qkv_input`` / ``mlp_input``) and keeps it for its weight gradient; with it
    the adapter keeps only the local shard (the same tensor the base layer keeps) and gathers
    again in backward, so the term is 0.  Also 0 without sequence parallelism (nothing is
    gathered) and for expert, row-parallel adapters (they fall back, seed 001).

    Parameters
    ----------
    eligible : int or sympy.Expr
        Eligible column-parallel LoRA-A adapters of one layer (2 in a dense layer with
        qkv and fc1 targeted, 1 in an MoE layer).
    sequence_parallel : bool
        Sequence parallelism on (t > 1).
    regather : bool
        Bridge's ``LoRA(sequence_parallel_input_regather=True)``.

    Examples
    --------
    Qwen3-8B (h = 4096, 36 layers), s = 8192, b = 1: the saving of the regather is
    36 x 2 x 2 s h = 4.83 GB (seed 001 measured 4.731 GB):

    >>> per_layer = lora_gathered_inputs(2).evaluate(s=8192, b=1, c=1, h=4096)
    >>> 36 * per_layer == 36 * 2 * 2 * 8192 * 4096
    True

    References
    ----------
    Megatron-Bridge ``src/megatron/bridge/peft/lora.py`` (LoRA.sequence_parallel_input_regather:
    "the full LayerNorm output consumed by LoRA-A is gathered temporarily in forward, released
    after the LoRA-A computation, and gathered again during backward"), ``peft/utils.py``
    (get_adapter_attributes_from_linear, ParallelLinearAdapter); seed 001 (LoRA + SP table).
    """
    _, tok, _ = _common(False, "none")
    on = sequence_parallel and not regather
    expr = as_expr(eligible) * 2 * tok * h if on else sp.Integer(0)
    return Term("lora_gathered_inputs", expr, "gathered 16-bit norm output kept by each "
                "column-parallel LoRA-A until backward (no sequence_parallel_input_regather)",
                Source("megatron-bridge-peft", "src/megatron/bridge/peft/lora.py, LoRA "
                       "(sequence_parallel_input_regather); peft/utils.py, ParallelLinearAdapter"),
                label="LoRA-A gathered inputs")


def paper_layer(parallel: str = "none", recompute: str = "none") -> Total:
    r"""memsym's derivation specialised to the paper's setting [bytes per layer].

    :func:`layer_activations` for a GPT layer (g = a, d_h = h/a, f = 4h, LayerNorm, dropout,
    no flash attention, c = 1; t = 1 for ``parallel="none"``; SP for ``"tp+sp"``) without the
    norm statistics the paper neglects.  The catalogue proves it equals :func:`korthikanti`
    row by row, i.e. that the term-by-term derivation reproduces the printed formulas:

    .. math:: A_{\mathrm{layer}}\big|_{g=a,\,d_h=h/a,\,f=4h,\,c=1} = M_{\mathrm{Table\,2}}

    Examples
    --------
    >>> sp.factor_terms(sp.expand(paper_layer().expr))    # Korthikanti Eq. 1: sbh(34 + 5as/h)
    b*s*(5*a*s + 34*h)

    References
    ----------
    .. [korthikanti] arXiv:2205.05198, §4.1 (Eq. 1), §4.2 (Eq. 2, 4), Table 2.
    """
    parallel = choose("parallel setting", parallel, PARALLEL)
    recompute = choose("recompute mode", recompute, RECOMPUTE)
    A = layer_activations(sequence_parallel=parallel == "tp+sp", recompute=recompute,
                          norm_statistics=False)
    gpt = {g: a, d_h: h / a, f: 4 * h, c: sp.Integer(1)}
    if parallel == "none":
        gpt[t] = sp.Integer(1)
    return A.map(lambda x: sp.cancel(x.xreplace(gpt)))


def paper_first_stage(interleaved: bool = False) -> Term:
    r"""The first pipeline stage's activations, TP + SP, no recompute (Korthikanti Eq. 5) [bytes].

    .. math:: \frac{sbhL}{t}\left(34 + \frac{5as}{h}\right)\,\phi,\qquad
        \phi = 1 \text{ (1F1B)},\; 1 + \frac{p - 1}{p\,v} \text{ (interleaved)}

    Examples
    --------
    >>> paper_first_stage().expr
    L*b*h*s*(5*a*s/h + 34)/t

    References
    ----------
    .. [korthikanti] arXiv:2205.05198, §4.2.3, Eq. 5 and the interleaved factor.
    """
    return Term("korthikanti.first_stage" + (".interleaved" if interleaved else ""),
                first_stage_layers(interleaved=interleaved) * korthikanti("tp+sp").expr,
                "first pipeline stage: L layers' worth of TP+SP activations",
                Source(_K, "§4.2.3, Eq. 5" + (" and the interleaved factor" if interleaved else "")))
