"""Megatron-Bridge 0.6 ``estimate_training_memory``, reproduced exactly."""

from __future__ import annotations


import sympy as sp

from ..errors import DivisibilityError, InvalidValueError
from ..symbols import V, c, d, e, h, p, t, t_e
from ..term import Term, Total
from .formulas import (BR_A, BR_WO, bridge_bytes_per_parameter, megatron_bridge_activation,
                       padded_vocab)
from .knobs import ConventionResult, knob_values, megatron_knobs, schedule_name
from .megatron_lm import precision_note, schedule_notes

# ------------------------------------------------------------------------------------------------
# Megatron-Bridge 0.6
# ------------------------------------------------------------------------------------------------
def _stage_layers(kn: dict, n_layers: int):
    """Bridge's uneven-PP layer indices per pipeline rank, or None for an even split."""
    first, last, pp = kn["first_stage_layers"], kn["last_stage_layers"], kn["p"]
    if first is None and last is None:
        return None
    if pp <= 1:
        raise InvalidValueError("uneven pipeline stages need p > 1")
    rest, left = n_layers, pp
    if first is not None:
        rest, left = rest - first, left - 1
    if last is not None:
        rest, left = rest - last, left - 1
    if left == 0:
        if rest != 0:
            raise DivisibilityError("first/last stage layers do not add up to num_layers")
        middle = 0
    else:
        if rest <= 0 or rest % left:
            raise DivisibilityError(f"{rest} remaining layers do not divide over {left} middle stages")
        middle = rest // left
    counts = [middle] * pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    vpp = kn["v"]
    if vpp is None:
        out, start = [], 0
        for n in counts:
            out.append(list(range(start, start + n)))
            start += n
        return out
    if any(n % vpp for n in counts):
        raise DivisibilityError("each pipeline stage's layers must divide over the virtual stages")
    out, start = [[] for _ in counts], 0
    for _ in range(vpp):  # interleaved chunks: rank r holds chunk j of every round
        for rank, n in enumerate(counts):
            out[rank].extend(range(start, start + n // vpp))
            start += n // vpp
    return out


def megatron_bridge(arch, layout=None, training=None, *, num_microbatches=None,
                    should_pad_vocab: bool | None = None, **knobs) -> ConventionResult:
    r"""Megatron-Bridge 0.6 ``estimate_training_memory`` on its most-loaded GPU [bytes], exactly.

    .. math::

        M = N_d\,\beta(d c) + N_x\,\beta(\max(1, \lfloor d t c/(e t_e)\rfloor)) + A,\qquad
        N_d = \frac{P_{\mathrm{dense}}}{p t} + \frac{hV}{t}\,(1 + [\text{untied} \wedge p=1]),
        \quad N_x = \frac{P_{\mathrm{routed}}}{p\,e\,t_e}

    (uneven PP: the largest stage, with :math:`hV` on both the first and the last stage) and
    :math:`A` from :func:`megatron_bridge_activation` (MoE layers weighted by top-k, divided by
    :math:`t c`, no x1.05, the same formula for every recompute mode).  Bridge counts 4h of norm
    per layer + 2h (divided by t), no router parameters, no MLA (attention from ``kv_channels``
    and query groups), a gated MLP only for SwiGLU, and the unpadded vocabulary unless
    ``should_pad_vocab``.

    Parameters
    ----------
    arch : memsym.model.Architecture
        The model (Megatron argument names).
    layout, training : mapping or object, optional
        As for :func:`megatron_lm`; ``first_stage_layers`` / ``last_stage_layers`` select uneven PP.
    num_microbatches : int, optional
        Micro-batches per step m [1], as for :func:`megatron_lm`.
    should_pad_vocab : bool, optional
        Default False (``GPTModelProvider``'s default).

    Returns
    -------
    ConventionResult

    Examples
    --------
    >>> from memsym.model import Architecture
    >>> gpt = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1000)
    >>> megatron_bridge(gpt, dict(t=2, d=2), dict(s=32, b=1)).breakdown()["total"]
    1116544

    References
    ----------
    Megatron-Bridge ``src/megatron/bridge/training/utils/theoretical_memory_utils.py`` (0.6).
    """
    kn, arch, A, te_val, assumptions = megatron_knobs(
        arch, layout, training, knobs, "TransformerConfig does (a hand-built Bridge config would "
        "use 1)", m=num_microbatches, should_pad_vocab=should_pad_vocab)
    moe = A.E is not None and A.E > 0
    kappa = 3 if A.swiglu else 2  # gated_linear_unit and activation_func is F.silu
    h_ = A.h
    pad = bool(kn["should_pad_vocab"])
    V_used = padded_vocab(A.vocab, A.divisible_by, t) if pad else sp.Integer(A.vocab)

    # --- Bridge's own parameter counts -------------------------------------------------------
    pattern, P_attn, dense_by_layer, routed_by_layer = _layer_counts(A, moe, kappa)
    final_norm = 2 * h_
    dense_total = sum(dense_by_layer) + final_norm
    routed_total = sum(routed_by_layer)
    emb = h_ * V_used
    N_d, N_x, pp_note = _most_loaded_counts(kn, A, dense_by_layer, routed_by_layer, final_norm,
                                            emb)
    terms = _weight_terms(N_d, N_x, kn, routed_total)

    # --- activations -------------------------------------------------------------------------
    L_tot = len(pattern)
    L_m = sum(pattern) if moe else 0
    L_d = L_tot - L_m
    ratio = (sp.Integer(L_d * A.f + L_m * (A.f_e * A.k + A.f_sh)) / (L_tot * h_))
    schedule = schedule_name(kn)
    act = megatron_bridge_activation(schedule, output_layer=kn["p"] == 1, ratio=ratio,
                                     layers=L_tot)
    act = act.xreplace({h: h_, V: V_used})
    terms.append(Term("activations", act,
                      "stage-0 activations, MoE layers weighted by top-k, / (t c)", BR_A,
                      label="activations"))

    _note_assumptions(kn, A, moe, pad, pp_note, schedule, assumptions)

    vals = knob_values(kn, with_te=te_val)
    params = {
        "total": (sp.Integer(dense_total + routed_total) + (2 if A.untied else 1) * emb).xreplace(vals),
        "most_loaded_shard": (N_d + N_x).xreplace(vals),
        "vocab": V_used.xreplace(vals),
        "attention_per_layer": sp.Integer(P_attn),
    }
    total = Total("megatron-bridge 0.6 estimate_training_memory (most-loaded GPU)", tuple(terms))
    return ConventionResult("megatron-bridge", total, vals, "bridge", tuple(assumptions), params)


def _layer_counts(A, moe, kappa) -> tuple:
    """``(pattern, P_attn, dense, routed)``: each layer's MoE flag (MTP layers last), the
    attention parameters of a layer, and each layer's dense and routed-expert parameters."""
    h_ = A.h
    pattern = A.pattern if moe else (0,) * A.L
    pattern = pattern + (pattern[-1],) * A.n_mtp  # MTP layers: copies of the last layer's type
    P_attn = 2 * A.kv * h_ * (A.a + A.g)  # no MLA branch: 2h^2(1 + g/a)(a d/h) = 2 d h (a + g)
    P_norm = 4 * h_  # always 4h per layer, RMSNorm not distinguished
    P_mlp = kappa * h_ * A.f
    P_sh = kappa * h_ * A.f_sh
    if moe and any(pattern[:A.L]):
        P_exp = kappa * (A.latent if A.latent is not None else h_) * A.f_e * A.E
        P_lat = 2 * h_ * A.latent if A.latent is not None else 0
    else:
        P_exp, P_lat = 0, 0
    dense_by_layer = [P_attn + P_norm + ((P_sh + P_lat) if is_moe else P_mlp) for is_moe in pattern]
    routed_by_layer = [P_exp if is_moe else 0 for is_moe in pattern]
    return pattern, P_attn, dense_by_layer, routed_by_layer


def _most_loaded_counts(kn, A, dense_by_layer, routed_by_layer, final_norm, emb) -> tuple:
    """``(N_d, N_x, note)``: the dense and routed-expert parameters of the most-loaded GPU,
    and what uneven stages make of it (None for an even split)."""
    stages = _stage_layers(kn, A.L)
    if stages is None:
        N_d = sp.Integer(sum(dense_by_layer) + final_norm) / (p * t) + emb / t + (
            emb / t if (A.untied and kn["p"] == 1) else 0)
        N_x = sp.Integer(sum(routed_by_layer)) / (p * e * t_e)
        return N_d, N_x, None
    dense_st = [sum(dense_by_layer[i] for i in idx) for idx in stages]
    routed_st = [sum(routed_by_layer[i] for i in idx) for idx in stages]
    dense_st[-1] += sum(dense_by_layer[A.L:]) + final_norm  # MTP + final norm: last stage
    routed_st[-1] += sum(routed_by_layer[A.L:])
    # hV on the first and on the last stage, tied or not (the value depends on t only
    # through padding; max taken at the layout's t).
    vals_t = {t: kn["t"]}
    dense_st = [sp.Integer(x) for x in dense_st]
    dense_st[0] += emb
    dense_st[-1] += emb
    best = max(dense_st, key=lambda x: x.xreplace(vals_t))
    N_d = best / t
    N_x = sp.Integer(max(routed_st)) / (e * t_e)
    return N_d, N_x, f"uneven pipeline stages {[len(i) for i in stages]}; the largest stage counted"


def _weight_terms(N_d, N_x, kn, routed_total) -> list:
    """The weight-and-optimizer terms: dense at beta(d c), routed experts at beta(EDP)."""
    beta_dense = bridge_bytes_per_parameter(kn["distributed_optimizer"])
    edp = sp.Max(1, sp.floor(d * t * c / (e * t_e)))
    beta_exp = bridge_bytes_per_parameter(kn["distributed_optimizer"], edp)
    opt = "6 + 12/(d c)" if kn["distributed_optimizer"] else "18"
    terms = [Term("weights_and_optimizer_dense", N_d * beta_dense,
                  f"dense parameters and optimizer (norms / t, embeddings) x {opt} bytes", BR_WO,
                  label="dense x beta(d c)")]
    if routed_total > 0:
        terms.append(Term("weights_and_optimizer_experts", N_x * beta_exp,
                          "routed expert parameters and optimizer over e t_e, x beta(EDP)", BR_WO,
                          label="experts x beta(EDP)"))
    return terms


def _note_assumptions(kn, A, moe, pad, pp_note, schedule, assumptions) -> None:
    """What the framework assumes here, appended to ``assumptions``."""
    assumptions.append("activations: one formula (SP + selective assumed) whatever the recompute "
                       "and sequence-parallel settings; no x1.05")
    if kn["recompute"] != "selective" or not kn["sequence_parallel"]:
        assumptions.append(f"recompute {kn['recompute']}, sequence_parallel "
                           f"{kn['sequence_parallel']}: not modelled (Bridge's report prints the "
                           "activation line only with SP + selective)")
    assumptions.append("vocabulary " + ("padded to a multiple of 128 t" if pad else
                                        "unpadded (should_pad_vocab False, the provider default)"))
    if A.mla:
        assumptions.append("multi-latent attention not modelled: attention counted from "
                           "kv_channels and query groups")
    if moe:
        assumptions.append("router and shared-expert-gate parameters not counted")
    if pp_note:
        assumptions.append(pp_note)
    schedule_notes(kn, schedule, assumptions)
    precision_note(kn, assumptions)
