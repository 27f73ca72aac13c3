r"""What a Gemma 4 layer that reuses an earlier layer's keys and values
(``num_kv_shared_layers``) does not keep, against a layer that computes its own.

transformers 5.25.0 ``Gemma4TextAttention.forward`` (``models/gemma4/modeling_gemma4.py``
lines 1213-1231): a ``"reuse"`` layer reads ``shared_kv_states[self.layer_type]``, the keys and
values the last earlier layer of its type stored, and runs no k_proj, k_norm, RoPE on the keys,
v_proj or v_norm.  Against the layer of its shapes that computes them it keeps, per layer and
micro-batch with :math:`\tau = sb/c` tokens:

* no ``k_norm`` (``Gemma4RMSNorm`` of d_h over the :math:`\tau g` key rows, lines 196-214):
  its input's fp32 copy and fp32 product with the fp32 weight, the mean square and its inverse
  root per row, the weight's cast, :math:`8\tau g d_h + 8\tau g + 4 d_h`;
* no ``v_norm`` (``with_scale=False``): its input's fp32 copy and the two statistics per row,
  :math:`4\tau g d_h + 8\tau g`;
* no keys and values of its own: the ones attention keeps are the storing layer's, counted
  there, :math:`4\tau g d_h`.

.. math::

    \Delta_{\mathrm{kvr}} = \frac{16\tau g d_h}{t} + \frac{16\tau g}{t} + 4 d_h
        \quad [\text{bytes}]

(at a global layer's :math:`g_g, d_{hg}`; over t TP ranks the KV heads split).  Its queries,
attention, output projection, MLP and norms keep what the other layers' do (its MLP at
``use_double_wide_mlp``'s 2f).  Measured with saved-tensor hooks on ``Gemma4TextDecoderLayer``
(``tests/test_gemma4_kv_sharing.py``).  Under a framework that runs its own layer memsym counts
it as transformers' code keeps it, and says so in the model's notes.

References
----------
.. [hf-transformers-5-25] transformers 5.25.0 ``models/gemma4/modeling_gemma4.py``.
"""

from __future__ import annotations

from ..symbols import d_h, g, t
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["kv_reuse_saving"]

_SOURCE = Source("hf-transformers-5-25",
                 "models/gemma4/modeling_gemma4.py Gemma4TextAttention.__init__ lines 1160-1189 "
                 "(a reuse layer builds no k_proj, v_proj, k_norm, v_norm) and forward lines "
                 "1213-1231 (shared_kv_states[self.layer_type]); Gemma4RMSNorm lines 196-214")


def kv_reuse_saving(recompute: str = "none", tok=None) -> Term:
    r"""What a KV-reusing Gemma 4 layer does not keep beside its base layer [bytes].

    .. math::

        \frac{16\tau g d_h}{t} + \frac{16\tau g}{t} + 4 d_h
        \quad (\text{full recompute: } 0)

    Parameters
    ----------
    recompute : str
        The layer's recompute mode: ``"full"`` keeps the layer's input alone, as any layer.
    tok : sympy.Expr, optional
        Tokens of one micro-batch on this context-parallel rank, :math:`\tau = sb/c`
        [tokens]; default :math:`sb/c`.

    Returns
    -------
    Term
        ``kv_reuse_saving``, per layer and micro-batch, per GPU [bytes] (subtracted).

    References
    ----------
    hf-transformers-5-25: transformers 5.25.0 ``modeling_gemma4.py`` lines 196-214 and
    1160-1231.

    Examples
    --------
    10 tokens, 2 KV heads of 8: 2,912 bytes.

    >>> kv_reuse_saving().evaluate(s=5, b=2, c=1, t=1, g=2, d_h=8)
    2912
    """
    if tok is None:
        tok, _ = token_split(False)
    expr = 0 if recompute == "full" else \
        16 * tok * g * d_h / t + 16 * tok * g / t + 4 * d_h
    return Term("kv_reuse_saving", expr,
                "what a layer reusing an earlier layer's keys and values does not keep: k_norm, "
                "v_norm and its own keys and values", _SOURCE, label="kv reuse saving")
