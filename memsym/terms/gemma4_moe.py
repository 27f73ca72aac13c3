r"""What Gemma 4's MoE block (``enable_moe_block``) keeps beside its dense layer, under a
framework that runs transformers' code.

transformers 5.25.0 ``Gemma4TextDecoderLayer.forward`` (``models/gemma4/modeling_gemma4.py``
lines 1391-1405) runs the dense ``Gemma4TextMLP`` of every layer as a dense Gemma 4 layer does,
then, beside it, the router and the experts on the residual::

    hidden_states_1 = self.post_feedforward_layernorm_1(hidden_states)      # MLP's output
    _, top_k_weights, top_k_index = self.router(hidden_states_flat)         # the residual
    hidden_states_2 = self.pre_feedforward_layernorm_2(hidden_states_flat)
    hidden_states_2 = self.experts(hidden_states_2, top_k_index, top_k_weights)
    hidden_states_2 = self.post_feedforward_layernorm_2(hidden_states_2)
    hidden_states = hidden_states_1 + hidden_states_2

so the layer is the dense layer (its four norms of h, attention, gated MLP of
``intermediate_size``) plus what this term counts, per layer and micro-batch with
:math:`\tau = sb/c` tokens, in bf16 (measured with saved-tensor hooks in
``tests/test_gemma4_moe.py``, one storage once):

* three more ``Gemma4RMSNorm`` of h with a scale (lines 196-214): each its input's fp32
  copy, the fp32 product with the fp32 weight, the mean square and its inverse root per row,
  and the weight's fp32 cast, :math:`8\tau h + 8\tau + 4h` each;
* ``Gemma4TextRouter.forward`` (lines 1306-1328): its norm without a scale,
  :math:`4\tau h + 8\tau`; the bf16 norm output the product with ``scale`` keeps and the
  product ``proj`` keeps, :math:`4\tau h`; the fp32 softmax, :math:`4\tau E`; ``topk``'s
  int64 indices, :math:`8\tau k`; the in-place division by the sum, its fp32 numerator copy
  and the sum, :math:`4\tau k + 4\tau`; the product with ``per_expert_scale[top_k_index]``,
  the fp32 weights and the gathered bf16 scales, :math:`6\tau k`;
* ``Gemma4TextExperts`` on transformers' default ``grouped_mm`` path
  (``integrations/moe.py`` lines 424-537, ``grouped_mm_experts_forward``): three more int64
  index tensors of :math:`\tau k` (``perm``, ``perm // k``, ``inv_perm``), :math:`24\tau k`;
  the int32 offsets, :math:`4E`; the gathered rows, :math:`2\tau k h`; the gate-and-up output,
  :math:`4\tau k f_e`; the activation's output and the product, :math:`4\tau k f_e`; the
  down projection's output, :math:`2\tau k h`; the sorted fp32 weights, :math:`4\tau k`.

.. math::

    \Delta_{\mathrm{MoE}} = 32\tau h + 36\tau + 12h + 4\tau E + 46\tau k + 4E
        + 4\tau k h + 8\tau k f_e \quad [\text{bytes}]

No tensor or expert parallelism (one GPU holds every expert and the whole h).

References
----------
.. [hf-transformers-5-25] transformers 5.25.0 ``models/gemma4/modeling_gemma4.py`` and
   ``integrations/moe.py``.
"""

from __future__ import annotations

from ..symbols import E, f_e, h, k
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["gemma4_moe_block"]

_SOURCE = Source("hf-transformers-5-25",
                 "models/gemma4/modeling_gemma4.py Gemma4TextDecoderLayer.forward lines "
                 "1391-1405 (router, pre_feedforward_layernorm_2, experts, "
                 "post_feedforward_layernorm_1/_2); Gemma4TextRouter.forward lines 1306-1328 "
                 "(norm with_scale=False, * scale :1309, fp32 softmax :1313, topk, /= sum, "
                 "* per_expert_scale[top_k_index] :1326); Gemma4RMSNorm lines 196-214; "
                 "integrations/moe.py:424-537 grouped_mm_experts_forward (sort :440, int32 "
                 "offsets :450, proj_out * sample_weights_g :524, weighted_out[inv_perm] :529)")


def gemma4_moe_block(tok=None) -> Term:
    r"""What Gemma 4's MoE block keeps beside its dense layer, per layer and micro-batch [bytes].

    .. math::

        32\tau h + 36\tau + 12h + 4\tau E + 46\tau k + 4E + 4\tau k h + 8\tau k f_e

    Parameters
    ----------
    tok : sympy.Expr, optional
        Tokens of one micro-batch on this context-parallel rank, :math:`\tau = sb/c`
        [tokens]; default :math:`sb/c`.

    Returns
    -------
    Term
        ``gemma4_moe_block``, per layer and micro-batch, per GPU [bytes].

    References
    ----------
    hf-transformers-5-25: transformers 5.25.0 ``modeling_gemma4.py`` lines 196-214 and
    1306-1405, ``integrations/moe.py`` lines 424-537.

    Examples
    --------
    A layer of 10 tokens, h = 32, four experts of f_e = 24, top-2: 18,480 bytes.

    >>> gemma4_moe_block().evaluate(s=5, b=2, c=1, h=32, E=4, k=2, f_e=24)
    18480
    """
    if tok is None:
        tok, _ = token_split(False)
    norms = 3 * (8 * tok * h + 8 * tok + 4 * h)
    router = 8 * tok * h + 12 * tok + 4 * tok * E + 18 * tok * k
    experts = 28 * tok * k + 4 * E + 4 * tok * k * h + 8 * tok * k * f_e
    return Term("gemma4_moe_block", norms + router + experts,
                "Gemma 4's MoE block beside its dense layer: three norms of h, the router "
                "(norm, fp32 softmax, top-k weights), the grouped_mm experts", _SOURCE,
                label="gemma4 moe block")
