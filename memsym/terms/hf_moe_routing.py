r"""The routing tensors transformers' own MoE blocks keep beyond torchtitan's.

memsym counts an MoE layer's router as torchtitan's ``TokenChoiceTopKRouter`` keeps it (the
router's scores).  A framework that runs transformers' model code (a Hugging Face Trainer or TRL
launch, DeepSpeed) runs the model's ``TopKRouter`` and the experts' ``grouped_mm`` path
(transformers 5.25.0 ``integrations/moe.py:424-533``, ``grouped_mm_experts_forward``), which
is what a training GPU runs: ``get_correct_experts_implementation`` picks ``"grouped_mm"``
when ``experts_implementation`` is left unset (``modeling_utils.py:1893-1915``; only a class
without ``@use_experts_implementation`` falls back to the eager loop), and ``_grouped_mm``
runs ``torch.nn.functional.grouped_mm`` on any CUDA device of compute capability 8.0 or more
(``integrations/moe.py:338-348``).  The eager per-expert loop (``experts_implementation=
"eager"``: ``torch.where`` per hit expert, data-dependent shapes) keeps other tensors and is
not counted.

Per MoE layer and micro-batch, with :math:`\tau = sb/c` tokens and :math:`S = k\tau` routed
rows, autograd keeps (measured with saved-tensor hooks in ``tests/test_hf_moe_routing.py``):

* ``torch.topk`` (the router): its int64 indices, :math:`8\tau k`;
* ``router_top_value /= router_top_value.sum(...)`` (``norm_topk_prob``): the in-place
  division keeps the fp32 numerator (a copy of the top-k values) and the fp32 sum,
  :math:`4\tau k + 4\tau`; without it ``topk`` keeps no value;
* ``hidden_states[perm // num_top_k]``, ``sample_weights[perm]`` and
  ``weighted_out[inv_perm]``: three more int64 index tensors of S entries, :math:`24\tau k`;
* ``proj_out * sample_weights_g.unsqueeze(-1)``: the sorted routing weights, in the compute
  dtype where the router casts them back (``router_top_value.to(router_logits.dtype)``:
  Qwen2/3-MoE, OLMoE), in fp32 where it does not (Mixtral): :math:`w_r \tau k`;
* ``grouped_mm`` (both projections, one tensor): the int32 cumulative offsets, :math:`4E`.

.. math::

    32\tau k + [\text{norm}](4\tau k + 4\tau) + w_r \tau k + 4E \quad [\text{bytes}]

which for Qwen3-MoE in bf16 with ``norm_topk_prob`` is :math:`38\tau k + 4\tau + 4E`.

References
----------
.. [hf-transformers-5-25] transformers 5.25.0 ``integrations/moe.py``,
   ``models/qwen3_moe/modeling_qwen3_moe.py``, ``models/mixtral/modeling_mixtral.py``.
"""

from __future__ import annotations

import sympy as sp

from ..symbols import E, h, k
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["HF_FP32_ROUTER_WEIGHT", "HF_GROUPED_ROUTERS", "HF_ROUTERS", "HF_SHARED_GATES",
           "HF_TOPK_SOFTMAX_ROUTERS", "HF_UNCAST_ROUTERS", "hf_grouped_router",
           "hf_router_casts", "hf_routing_indices", "hf_shared_gate", "hf_topk_softmax_router",
           "hf_uncast_router"]

#: transformers ``model_type`` -> (the router normalises its top-k weights: True, or None
#: where ``config.norm_topk_prob`` says; the sorted weights stay fp32): the MoE families
#: whose router is ``softmax -> topk [-> /= sum]`` ahead of the ``@use_experts_implementation``
#: experts.  Qwen3-MoE ``modeling_qwen3_moe.py:259-268`` and Qwen2-MoE
#: ``modeling_qwen2_moe.py:320-329``, OLMoE ``modeling_olmoe.py:327-336`` (``norm_topk_prob``,
#: then ``.to(router_logits.dtype)``); Mixtral ``modeling_mixtral.py:104-111`` (always
#: normalised, left in fp32).  Other families (DeepSeek's grouped sigmoid router, GPT-OSS's
#: top-k then softmax) keep other tensors and are not counted.  HunYuan-MoE's
#: ``HunYuanMoEV1Gate`` (``modeling_hunyuan_v1_moe.py:234-242``) is the same: softmax, topk,
#: always normalised, cast back to the logits' dtype; AFMoE's ``AfmoeTokenChoiceRouter``
#: (``modeling_afmoe.py:141-153``: a sigmoid of the fp32 logits, topk of the biased scores,
#: always normalised, left in fp32) keeps what Mixtral's does.  Mellum's ``MellumTopKRouter``
#: (``modeling_mellum.py:323-332``) is Qwen3-MoE's.
HF_ROUTERS = {"qwen3_moe": (None, False), "qwen2_moe": (None, False), "olmoe": (None, False),
              "mixtral": (True, True), "hunyuan_v1_moe": (True, False), "afmoe": (True, True),
              "mellum": (None, False)}

#: transformers ``model_type`` -> its config class's default ``norm_topk_prob``: DeepSeek-V3's
#: grouped sigmoid router with ``e_score_correction_bias`` (``Glm4MoeTopkRouter``
#: ``modeling_glm4_moe.py:282-306``; ``Dots1TopkRouter`` ``modeling_dots1.py:284-309``;
#: ``SolarOpenTopkRouter`` ``modeling_solar_open.py:115-140``; ``ExaoneMoeTopkRouter``
#: ``modeling_exaone_moe.py:241-266``), whose defaults are ``configuration_glm4_moe.py:111``,
#: ``configuration_dots1.py:93``, ``configuration_solar_open.py:81``,
#: ``configuration_exaone_moe.py:117``; and the MLA types' copies of it
#: (``DeepseekV3TopkRouter`` ``modeling_deepseek_v3.py:132-157``, ``Glm4MoeLiteTopkRouter``
#: ``modeling_glm4_moe_lite.py:372-397``, ``DeepseekV32TopkRouter``
#: ``modeling_deepseek_v32.py:495-520``, ``GlmMoeDsaTopkRouter``
#: ``modeling_glm_moe_dsa.py:468-493``; ``norm_topk_prob`` True by default in each
#: configuration file).
HF_GROUPED_ROUTERS = {"glm4_moe": True, "dots1": False, "solar_open": True, "exaone_moe": True,
                      "deepseek_v3": True, "glm4_moe_lite": True, "deepseek_v32": True,
                      "glm_moe_dsa": True}

#: The types whose router weight stays fp32 under a 16-bit load (``_keep_in_fp32_modules_strict
#: = [..., "gate.weight"]``, ``modeling_glm4_moe.py:460``, ``modeling_dots1.py:442``,
#: ``modeling_solar_open.py:383``, ``modeling_exaone_moe.py:396``; HunYuan's
#: ``nn.Linear(..., dtype=torch.float32)``, ``modeling_hunyuan_v1_moe.py:232``) and whose router
#: casts its input to fp32 first (``hidden_states.type(torch.float32)``, ``.float()`` :236-237).
HF_FP32_ROUTER_WEIGHT = frozenset(HF_GROUPED_ROUTERS) | {"hunyuan_v1_moe"}

#: The types whose router runs outside autocast on fp32 copies: ERNIE-4.5-MoE's
#: ``Ernie4_5_MoeTopKRouter`` (``modeling_ernie4_5_moe.py:345-357``: ``maybe_autocast(enabled=
#: False)``, softmax, topk of the biased scores, gather, division by the clamped sum, always;
#: its fp32 ``gate.weight`` kept, :462).
HF_UNCAST_ROUTERS = frozenset({"ernie4_5_moe"})

#: The types whose router takes the top k of the logits, then a softmax of those k alone, with
#: no dtype (``AriaTextTopKRouter``, ``modeling_aria.py:267-271``): :func:`hf_topk_softmax_router`.
HF_TOPK_SOFTMAX_ROUTERS = frozenset({"aria_text"})

#: The types whose shared expert's output is scaled by a sigmoid gate of one output
#: (``Qwen2MoeSparseMoeBlock``, ``modeling_qwen2_moe.py:335,347``).
HF_SHARED_GATES = frozenset({"qwen2_moe"})

_SOURCE = Source("hf-transformers-5-25",
                 "integrations/moe.py:424-533 (grouped_mm_experts_forward: sort at :440, "
                 "hidden_states[perm // num_top_k] :441, sample_weights[perm] :442, int32 "
                 "offsets :450, proj_out * sample_weights_g :524, weighted_out[inv_perm] :529); "
                 "models/qwen3_moe/modeling_qwen3_moe.py:259-268 (Qwen3MoeTopKRouter: topk "
                 ":263, norm_topk_prob's in-place division :265, cast back :266); "
                 "models/mixtral/modeling_mixtral.py:104-111; modeling_utils.py:1893-1915 "
                 "(grouped_mm by default)")


def hf_routing_indices(routed: bool = True, *, normalized: bool = True,
                       weight_width: int = 2, norm_width: int = 4) -> Term:
    r"""The routing tensors transformers' MoE block keeps beyond torchtitan's [bytes per layer].

    Per MoE layer and micro-batch, :math:`\tau = sb/c`:

    .. math::

        32\tau k + [\text{normalized}]\,w_n(\tau k + \tau) + w_r \tau k + 4E

    four int64 index tensors of :math:`\tau k` entries (``topk``'s indices, ``perm``,
    ``perm // k``, ``inv_perm``), the fp32 top-k weights and their sum kept by
    ``norm_topk_prob``'s division, the sorted routing weights (:math:`w_r` bytes each) and the
    int32 per-expert offsets of ``grouped_mm`` (module docstring).

    Parameters
    ----------
    routed : bool
        The layer is an MoE layer of transformers' model code run on the ``grouped_mm`` path
        [hf-transformers-5-25]; False: 0.
    normalized : bool
        The router divides the top-k weights by their sum (``norm_topk_prob``; Mixtral always).
    weight_width : {2, 4}
        Bytes of a sorted routing weight: the compute dtype's where the router casts the
        weights back (Qwen2/3-MoE, OLMoE), 4 where they stay fp32 (Mixtral) [bytes/element].
    norm_width : {2, 4}
        Bytes of the kept top-k weights and their sum: 4 where the softmax gives fp32
        (``dtype=torch.float``), the compute dtype's where a sigmoid of autocast's 16-bit
        logits gives them (:func:`hf_grouped_router`) [bytes/element].

    Examples
    --------
    Qwen3-30B-A3B's MoE layer (128 experts, top-8) at s = 4096, b = 1, in bf16: 38 tau k +
    4 tau + 4E bytes, 1.2 MiB.

    >>> term = hf_routing_indices()
    >>> term.evaluate(s=4096, b=1, c=1, k=8, E=128) == 38 * 4096 * 8 + 4 * 4096 + 4 * 128
    True
    >>> hf_routing_indices(normalized=False, weight_width=4).expr
    4*E + 36*b*k*s/c
    >>> hf_routing_indices(False).expr
    0

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``integrations/moe.py:424-533``
       (``grouped_mm_experts_forward``),
       ``models/qwen3_moe/modeling_qwen3_moe.py:259-268`` (``Qwen3MoeTopKRouter``),
       ``models/mixtral/modeling_mixtral.py:104-111`` (``MixtralTopKRouter``),
       ``modeling_utils.py:1893-1915`` (``get_correct_experts_implementation``).
    """
    tok, _ = token_split(False)
    if not routed:
        expr = sp.Integer(0)
    else:
        expr = (32 + weight_width) * tok * k + 4 * E \
            + ((norm_width * tok * k + norm_width * tok) if normalized else 0)
    return Term("hf_routing_indices", expr, "the index tensors, top-k weights and expert offsets "
                "transformers' MoE routing keeps (grouped_mm path)", _SOURCE,
                label="transformers MoE routing")


_GROUPED = Source("hf-transformers-5-25",
                  "models/glm4_moe/modeling_glm4_moe.py:282-306 (Glm4MoeTopkRouter: sigmoid "
                  ":285, group top-2 :289, group top-k :292, masked_fill :300, topk :301, "
                  "gather :302, norm_topk_prob's in-place division :305); the same lines in "
                  "models/dots1/modeling_dots1.py:284-309, "
                  "models/solar_open/modeling_solar_open.py:115-140, "
                  "models/exaone_moe/modeling_exaone_moe.py:241-266")


def hf_grouped_router(routed: bool = True, *, groups: int = 1, topk_groups: int = 1,
                      normalized: bool = True, width: int = 2) -> Term:
    r"""DeepSeek-V3's grouped sigmoid router in transformers, beyond its scores [bytes per layer].

    What the router keeps, as transformers runs it, beyond torchtitan's router scores.

    ``router_logits.sigmoid()`` of autocast's 16-bit logits keeps its output in the compute
    dtype, :math:`w\tau E` where memsym's router term counts :math:`4\tau E`; the group
    top-2 (``view(-1, G, E // G).topk(2)``) keeps its int64 indices, :math:`16\tau G`; the
    top-k of the group scores its indices, :math:`8\tau g_k`; ``masked_fill`` its bool mask,
    :math:`\tau E`; and the routing of :func:`hf_routing_indices`, whose top-k weights
    (``scores.gather``, the division by their sum) are in the compute dtype too:

    .. math::

        (w - 3)\tau E + 16\tau G + 8\tau g_k + (32 + w)\tau k
        + [\text{normalized}]\,w(\tau k + \tau) + 4E

    Parameters
    ----------
    routed : bool
        The layer is an MoE layer of transformers' model code on the ``grouped_mm`` path;
        False: 0.
    groups : int
        ``n_group``, G [1].
    topk_groups : int
        ``topk_group``, the groups each token keeps, :math:`g_k` [1].
    normalized : bool
        ``norm_topk_prob``.
    width : {2, 4}
        The compute dtype's bytes [bytes/element].

    Examples
    --------
    GLM-4.5's MoE layer (160 experts, top-8, one group) at s = 4096, b = 1, in bf16:

    >>> t = hf_grouped_router().evaluate(s=4096, b=1, c=1, k=8, E=160)
    >>> t == -160 * 4096 + 16 * 4096 + 8 * 4096 + 36 * 4096 * 8 + 2 * 4096 + 4 * 160
    True
    >>> hf_grouped_router(False).expr
    0

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0
       ``models/glm4_moe/modeling_glm4_moe.py:282-306`` (``Glm4MoeTopkRouter``),
       ``integrations/moe.py:424-533`` (``grouped_mm_experts_forward``).
    """
    tok, _ = token_split(False)
    if not routed:
        return Term("hf_grouped_router", sp.Integer(0), "", _GROUPED)
    expr = (width - 3) * tok * E + 16 * tok * groups + 8 * tok * topk_groups \
        + hf_routing_indices(normalized=normalized, weight_width=width,
                             norm_width=width).expr
    return Term("hf_grouped_router", expr, "the grouped sigmoid router's scores, group top-k "
                "indices and mask, and the routing transformers keeps (grouped_mm path)",
                _GROUPED, label="transformers grouped router")


def hf_router_casts(cast: bool = True) -> Term:
    r"""Autocast's 16-bit casts of an fp32 router's input and weight [bytes per layer].

    A router whose weight stays fp32 under a 16-bit load and which casts its input to fp32
    (``F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))``, or
    HunYuan's ``hidden_states.float()``) runs, under autocast, on casts of both back to the
    16-bit dtype, which the linear keeps for its gradients: :math:`2\tau h + 2Eh` beside the
    layer's own MoE input (kept by the shared expert).

    .. math::

        2\tau h + 2Eh

    Parameters
    ----------
    cast : bool
        A 16-bit autocast compute dtype and a type of :data:`HF_FP32_ROUTER_WEIGHT`; False: 0
        (in fp32 the casts return their input).

    Examples
    --------
    >>> t = hf_router_casts().evaluate(s=4096, b=1, c=1, h=5120, E=160)
    >>> t == 2 * 4096 * 5120 + 2 * 160 * 5120
    True

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/glm4_moe/modeling_glm4_moe.py:284,
       460``, ``models/hunyuan_v1_moe/modeling_hunyuan_v1_moe.py:232-238``.
    """
    tok, _ = token_split(False)
    return Term("hf_router_casts", 2 * tok * h + 2 * E * h if cast else sp.Integer(0),
                "autocast's 16-bit casts of the fp32 router's input and weight",
                Source("hf-transformers-5-25",
                       "models/glm4_moe/modeling_glm4_moe.py:284 (fp32 input and weight), :460 "
                       "(_keep_in_fp32_modules_strict gate.weight); "
                       "models/hunyuan_v1_moe/modeling_hunyuan_v1_moe.py:232 (fp32 wg), "
                       ":236-238 (.float() input)"), label="transformers router casts")


def hf_shared_gate(gated: bool = True, width: int = 2) -> Term:
    r"""Qwen2-MoE's sigmoid gate on the shared expert's output [bytes per layer].

    ``F.sigmoid(self.shared_expert_gate(x)) * shared_expert_output`` keeps the sigmoid's output
    (one value a token, kept by the sigmoid and the product) and the shared expert's output
    (kept by the product): :math:`w\tau + w\tau h`.  The gate's input is the block's own input,
    already kept.

    .. math::

        w\tau (h + 1)

    Parameters
    ----------
    gated : bool
        A type of :data:`HF_SHARED_GATES`; False: 0.
    width : {2, 4}
        The compute dtype's bytes [bytes/element].

    Examples
    --------
    >>> hf_shared_gate().evaluate(s=4096, b=1, c=1, h=2048) == 2 * 4096 * 2049
    True

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0
       ``models/qwen2_moe/modeling_qwen2_moe.py:335,347`` (``Qwen2MoeSparseMoeBlock``).
    """
    tok, _ = token_split(False)
    return Term("hf_shared_gate", width * tok * (h + 1) if gated else sp.Integer(0),
                "the shared expert's output and its sigmoid gate, kept by their product",
                Source("hf-transformers-5-25",
                       "models/qwen2_moe/modeling_qwen2_moe.py:335 (shared_expert_gate), :347 "
                       "(F.sigmoid(gate) * shared_expert_output)"),
                label="transformers shared-expert gate")


def hf_uncast_router(cast: bool = True) -> Term:
    r"""An fp32 router run outside autocast, beyond :func:`hf_routing_indices` [bytes per layer].

    ERNIE-4.5-MoE's router disables autocast and runs ``F.linear(hidden_states.float(),
    self.weight.float())`` (the weight kept fp32, so its ``.float()`` is itself): the linear
    keeps the fp32 copy of its 16-bit input, :math:`4\tau h` (none in fp32, where ``.float()``
    returns its input); ``torch.clamp(sum, min=norm_min)`` keeps the fp32 sum it clamps,
    :math:`4\tau`, beside the division's numerator and clamped denominator that
    :func:`hf_routing_indices` counts (``norm_width`` 4).

    .. math::

        [\text{cast}]\,4\tau h + 4\tau

    Parameters
    ----------
    cast : bool
        A 16-bit compute dtype (the input's ``.float()`` a copy).

    Examples
    --------
    >>> hf_uncast_router().evaluate(s=4096, b=1, c=1, h=2560) == 4 * 4096 * 2560 + 4 * 4096
    True
    >>> hf_uncast_router(False).expr
    4*b*s/c

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0
       ``models/ernie4_5_moe/modeling_ernie4_5_moe.py:345-357`` (``Ernie4_5_MoeTopKRouter``).
    """
    tok, _ = token_split(False)
    return Term("hf_uncast_router", (4 * tok * h if cast else 0) + 4 * tok,
                "the fp32 router's input copy and its clamped sum, outside autocast",
                Source("hf-transformers-5-25",
                       "models/ernie4_5_moe/modeling_ernie4_5_moe.py:348 (autocast off), :349 "
                       "(F.linear of hidden_states.float()), :353-355 (division by "
                       "torch.clamp(sum, min=norm_min)), :462 (fp32 gate.weight)"),
                label="transformers fp32 router")


def hf_topk_softmax_router(routed: bool = True) -> Term:
    r"""A top-k-then-softmax router beside :func:`hf_routing_indices` [bytes per layer].

    Aria's router (``AriaTextTopKRouter``) takes ``torch.topk`` of the 16-bit logits, then
    ``softmax`` of the k values with no dtype: CUDA autocast runs ``softmax`` in fp32 (torch
    2.13 ``aten/src/ATen/autocast_mode.h``, ``AT_FORALL_FP32_SET_OPT_DTYPE``), so the
    softmax keeps its fp32 output, :math:`4\tau k`, and the weights it hands the experts
    stay fp32 (:func:`hf_routing_indices` with ``weight_width`` 4, unnormalised); no fp32
    probabilities over the E experts are kept, which memsym's layer counts as the router's
    (:math:`4\tau E`, :mod:`memsym.terms.transformer_layer`):

    .. math::

        4\tau k - 4\tau E

    Parameters
    ----------
    routed : bool
        The layer is an MoE layer of transformers' model code on the ``grouped_mm`` path;
        False: 0.

    Examples
    --------
    >>> hf_topk_softmax_router().evaluate(s=4096, b=1, c=1, k=8, E=64) == 4 * 4096 * (8 - 64)
    True

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/aria/modeling_aria.py:267-271``
       (``AriaTextTopKRouter.forward``).
    """
    tok, _ = token_split(False)
    return Term("hf_topk_softmax_router", 4 * tok * (k - E) if routed else sp.Integer(0),
                "the fp32 softmax of the top-k logits, kept instead of fp32 probabilities "
                "over every expert",
                Source("hf-transformers-5-25",
                       "models/aria/modeling_aria.py:267-271 (topk of the logits, softmax of "
                       "the k values, no dtype: fp32 under CUDA autocast)"),
                label="transformers top-k softmax router")
