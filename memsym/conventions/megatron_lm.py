"""Megatron-LM core 0.19 ``megatron/training/theoretical_memory_usage.py``, reproduced exactly."""

from __future__ import annotations


import sympy as sp

from ..errors import InvalidValueError
from ..symbols import L, V, c, d, e, f, h, p, t, t_e
from ..term import Term, Total
from ..values import as_expr
from .formulas import (LM_A, LM_B, LM_WO, megatron_bytes_per_parameter, megatron_lm_activation,
                       padded_vocab)
from .knobs import ConventionResult, LAYOUT_IGNORED, knob_values, megatron_knobs, schedule_name

# ------------------------------------------------------------------------------------------------
# Megatron-LM core 0.19
# ------------------------------------------------------------------------------------------------
def megatron_lm(arch, layout=None, training=None, *, num_microbatches=None,
                **knobs) -> ConventionResult:
    r"""Megatron-LM core 0.19's theoretical memory on its most-loaded GPU [bytes], exactly.

    Parameters are split as the source splits them (pipeline stage 0: an even 1/p share of the
    decoder layers, the whole MTP block, the input embedding):

    .. math::

        M = (T + R)\,\beta(d) + X\,\beta(D_e) + A, \qquad
        D_e = \lfloor t\,c\,d/(t_e\,e) \rfloor = \lfloor W/(t_e e p) \rfloor

    with :math:`T` the TP-sharded parameters, :math:`R` the replicated ones (norms, routers,
    latent projections), :math:`X` the routed experts, :math:`\beta` from
    :func:`megatron_bytes_per_parameter`, and :math:`A` path A of :func:`megatron_lm_activation`
    when sequence parallelism and selective recompute are both on, path B otherwise.

    Parameters
    ----------
    arch : memsym.model.Architecture
        The model (Megatron argument names).
    layout, training : mapping or object, optional
        Knobs ``t p d c e t_e v`` and ``s b m sequence_parallel recompute sharding``
        (Megatron's argument names are accepted too); keyword ``knobs`` override both.
    num_microbatches : int, optional
        Micro-batches per step m [1], what the training loop passes (``get_num_microbatches()``);
        the offline tool passes none.

    Returns
    -------
    ConventionResult

    Examples
    --------
    >>> from memsym.model import Architecture
    >>> gpt = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1000)
    >>> r = megatron_lm(gpt, dict(t=2, p=1, d=2),
    ...                 dict(s=32, b=1, sequence_parallel=True, recompute="selective"))
    >>> r.path
    'A'
    >>> r.breakdown()["total"]
    1131136

    References
    ----------
    Megatron-LM ``megatron/training/theoretical_memory_usage.py`` (core 0.19).
    """
    kn, arch, A, te_val, assumptions = megatron_knobs(arch, layout, training, knobs,
                                                      "validate_args does", m=num_microbatches)
    moe = A.E is not None
    n = _parameter_counts(A)
    V_pad = n["V_pad"]
    untied_p1 = A.untied and kn["p"] == 1

    T_expr = ((sp.Integer(n["tp_block"]) / p + n["tp_mtp"] + n["emb"]) / t
              + (n["emb"] / t if untied_p1 else 0))
    R_expr = sp.Integer(n["rep_block"]) / p + n["rep_mtp"]
    X_expr = (sp.Integer(n["exp_block"]) / p + n["exp_mtp"]) / (t_e * e)
    terms = _weight_terms(T_expr, R_expr, X_expr, kn, moe)

    # --- activations -------------------------------------------------------------------------
    sp_on = kn["sequence_parallel"] and kn["t"] > 1
    if kn["sequence_parallel"] and kn["t"] == 1:
        assumptions.append("sequence_parallel is switched off by Megatron when TP = 1")
    path = "A" if (sp_on and kn["recompute"] == "selective") else "B"
    schedule = schedule_name(kn)
    act = megatron_lm_activation(path, schedule, output_layer=kn["p"] == 1)
    act = act.xreplace({h: A.h, f: A.f, L: A.L, V: V_pad})
    src = LM_A if path == "A" else LM_B
    desc = ("stage-0 activations, SP + selective recompute, / t" if path == "A" else
            "stage-0 activations 'without SP' (10 + 24/t per layer, x 1.05)")
    terms.append(Term("activations", act, desc, src, label=f"activations (path {path})"))
    _note_assumptions(kn, A, path, schedule, assumptions)

    vals = knob_values(kn, with_te=te_val)
    params = {
        "total": as_expr(n["total"]).xreplace(vals),
        "most_loaded_shard": (T_expr + R_expr + X_expr).xreplace(vals),
        "padded_vocab": V_pad.xreplace(vals),
        "attention_per_layer": as_expr(n["P_attn"]),
    }
    total = Total("megatron-lm core 0.19 theoretical memory (most-loaded GPU)", tuple(terms))
    return ConventionResult("megatron-lm", total, vals, path, tuple(assumptions), params)


def _parameter_counts(A) -> dict:
    """The parameter counts as the source counts them: per layer (``P_attn``), the decoder
    block's and the MTP block's TP-sharded, replicated and expert parameters, the embedding
    and the model's ``total``."""
    moe = A.E is not None
    eta = 1 if A.rmsnorm else 2  # RMSNorm has no bias (since core 0.16)
    gamma = sp.Rational(3, 2) if A.swiglu else 1
    h_, a_ = A.h, A.a
    if A.mla:
        if A.gqa:
            raise InvalidValueError("Megatron-LM asserts that multi_latent_attention is not "
                                    "combined with group query attention")
        qd = A.qk + A.qk_pos
        q_term = h_ * a_ * qd if A.q_lora is None else A.q_lora * (h_ + a_ * qd + eta)
        P_attn = (q_term + A.kv_lora * (h_ + a_ * (A.qk + A.v_head) + eta)
                  + h_ * A.qk_pos + a_ * A.v_head * h_)
    else:
        # 2h^2 (1 + g/a)(a d/h) = 2 d h (a + g); biases never counted.
        P_attn = 2 * A.kv * h_ * (a_ + A.g)
    P_mlp = 2 * gamma * h_ * A.f
    P_sh = 2 * gamma * h_ * A.f_sh
    h_hat = A.latent if A.latent is not None else h_
    P_exp = 2 * gamma * h_hat * A.f_e * A.E if moe else 0
    P_lat = 2 * h_ * A.latent if (moe and A.latent is not None) else 0
    P_rt = (h_ * A.E + (A.E if A.bias else 0)) if moe else 0
    P_gate = h_ if (A.f_sh > 0 and A.shared_gate) else 0
    P_norm = 2 * eta * h_
    L_m = sum(A.pattern)
    L_d = A.L - L_m
    mtp_moe = A.pattern[-1] * A.n_mtp  # each MTP layer copies the last decoder layer's type
    mtp_dense = A.n_mtp - mtp_moe

    V_pad = padded_vocab(A.vocab, A.divisible_by, t)  # the tokenizer pads to 128 t
    emb = h_ * V_pad
    n = {"P_attn": P_attn, "V_pad": V_pad, "emb": emb,
         "tp_block": (P_attn + P_mlp) * L_d + (P_attn + P_sh) * L_m,
         "tp_mtp": (P_attn + P_mlp) * mtp_dense + (P_attn + P_sh) * mtp_moe,
         "rep_block": P_norm * L_d + (P_norm + P_lat + P_rt + P_gate) * L_m + eta * h_,
         "rep_mtp": P_norm * mtp_dense + (P_norm + P_lat + P_rt + P_gate) * mtp_moe,
         "exp_block": P_exp * L_m, "exp_mtp": P_exp * mtp_moe}
    n["total"] = (n["tp_block"] + n["rep_block"] + n["exp_block"]
                  + (P_attn + P_mlp + P_norm) * mtp_dense
                  + (P_attn + P_sh + P_exp + P_lat + P_norm + P_rt + P_gate) * mtp_moe
                  + (2 if A.untied else 1) * emb)
    return n


def _weight_terms(T_expr, R_expr, X_expr, kn, moe) -> list:
    """The weight-and-optimizer terms: T and R at beta(d), X at beta(D_e)."""
    beta_d = megatron_bytes_per_parameter(kn["distributed_optimizer"], d)
    D_e = sp.floor(t * c * d / (t_e * e))  # W // (t_e e p) with W = t p c d
    beta_e = megatron_bytes_per_parameter(kn["distributed_optimizer"], D_e)
    opt = "6 + 12/d" if kn["distributed_optimizer"] else "18"
    terms = [
        Term("weights_and_optimizer_tp", T_expr * beta_d,
             f"TP-sharded parameters on stage 0 (layers/p, whole MTP block, embedding) x {opt} "
             "bytes", LM_WO, label="TP-sharded x beta(d)"),
        Term("weights_and_optimizer_replicated", R_expr * beta_d,
             f"norms, routers and latent projections, replicated over TP, x {opt} bytes",
             LM_WO, label="replicated x beta(d)"),
    ]
    if moe:
        terms.append(Term("weights_and_optimizer_experts", X_expr * beta_e,
                          "routed experts on stage 0 over t_e e, x beta(expert DP)", LM_WO,
                          label="experts x beta(D_e)"))
    return terms


def _note_assumptions(kn, A, path, schedule, assumptions) -> None:
    """What the framework assumes here, appended to ``assumptions``."""
    assumptions.append(f"activation path {path}: " + (
        "compute_activation_memory (SP + selective)" if path == "A" else
        "compute_activation_memory_without_sp (taken unless SP and selective are both on)"))
    if path == "B" and kn["recompute"] == "full":
        assumptions.append("full recompute is not modelled: path B keeps every layer's activations")
    if kn["c"] > 1:
        assumptions.append("context parallelism is ignored: activations are not divided by c and "
                           "the dense optimizer is sharded over d only")
    if A.E is not None:
        assumptions.append("activations ignore MoE (dense ffn_hidden_size, no top-k)")
    if A.n_mtp:
        assumptions.append("the whole MTP block is counted on stage 0; MTP activations ignored")
    if kn["first_stage_layers"] or kn["last_stage_layers"]:
        assumptions.append("uneven pipeline stages are ignored (even split assumed)")
    schedule_notes(kn, schedule, assumptions)
    if kn["p"] > 1:
        assumptions.append("most-loaded GPU taken to be pipeline stage 0; output-layer logits "
                           "(last stage) not counted")
    precision_note(kn, assumptions)


def schedule_notes(kn, schedule: str, assumptions: list) -> None:
    """Append what both Megatron estimators assume of the pipeline: the layout ignored, the
    schedule's factor (:func:`memsym.conventions.formulas.pipeline_factor`)."""
    if kn.get("pipeline_layout") is not None:
        assumptions.append(LAYOUT_IGNORED)
    if schedule == "interleaved":
        assumptions.append("interleaved schedule: activations x (1 + (p - 1)/(p v))")
    elif schedule == "microbatches":
        assumptions.append("fewer microbatches than stages discounted: x min(1, m/p)")


def precision_note(kn, assumptions):
    if kn["m_derived"]:
        assumptions.append(f"num_microbatches = B/(b d) = {kn['m']}, as the training loop passes it")
    prec = kn["precision"]
    opt = kn["optimizer"]
    if prec is not None and str(prec).lower() != "bf16":
        assumptions.append(f"precision {prec} ignored: the framework always counts bf16 weights, "
                           "fp32 gradients, fp32 main weights")
    if opt is not None and str(opt).lower() not in ("adam", "adamw"):
        assumptions.append(f"optimizer {opt} ignored: the framework always counts Adam (8 B)")
