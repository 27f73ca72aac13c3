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

from ..symbols import E, k
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["HF_ROUTERS", "hf_routing_indices"]

#: transformers ``model_type`` -> (the router normalises its top-k weights: True, or None
#: where ``config.norm_topk_prob`` says; the sorted weights stay fp32): the MoE families
#: whose router is ``softmax -> topk [-> /= sum]`` ahead of the ``@use_experts_implementation``
#: experts.  Qwen3-MoE ``modeling_qwen3_moe.py:259-268`` and Qwen2-MoE
#: ``modeling_qwen2_moe.py:320-329``, OLMoE ``modeling_olmoe.py:327-336`` (``norm_topk_prob``,
#: then ``.to(router_logits.dtype)``); Mixtral ``modeling_mixtral.py:104-111`` (always
#: normalised, left in fp32).  Other families (DeepSeek's grouped sigmoid router, GPT-OSS's
#: top-k then softmax) keep other tensors and are not counted.
HF_ROUTERS = {"qwen3_moe": (None, False), "qwen2_moe": (None, False), "olmoe": (None, False),
              "mixtral": (True, True)}

_SOURCE = Source("hf-transformers-5-25",
                 "integrations/moe.py:424-533 (grouped_mm_experts_forward: sort at :440, "
                 "hidden_states[perm // num_top_k] :441, sample_weights[perm] :442, int32 "
                 "offsets :450, proj_out * sample_weights_g :524, weighted_out[inv_perm] :529); "
                 "models/qwen3_moe/modeling_qwen3_moe.py:259-268 (Qwen3MoeTopKRouter: topk "
                 ":263, norm_topk_prob's in-place division :265, cast back :266); "
                 "models/mixtral/modeling_mixtral.py:104-111; modeling_utils.py:1893-1915 "
                 "(grouped_mm by default)")


def hf_routing_indices(routed: bool = True, *, normalized: bool = True,
                       weight_width: int = 2) -> Term:
    r"""The routing tensors transformers' MoE block keeps beyond torchtitan's [bytes per layer].

    Per MoE layer and micro-batch, :math:`\tau = sb/c`:

    .. math::

        32\tau k + [\text{normalized}]\,(4\tau k + 4\tau) + w_r \tau k + 4E

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
            + ((4 * tok * k + 4 * tok) if normalized else 0)
    return Term("hf_routing_indices", expr, "the index tensors, top-k weights and expert offsets "
                "transformers' MoE routing keeps (grouped_mm path)", _SOURCE,
                label="transformers MoE routing")
