"""What a checkpointed core attention keeps alive beyond the tensors it names: the fused QKV
output behind the V view Megatron-core's selective recompute saves.

REF: Megatron-LM d98e8a64dd ``megatron/core/transformer/attention.py`` and
``tensor_parallel/random.py``; Transformer Engine d0067d0da6 ``dot_product_attention/utils.py``.
"""

from __future__ import annotations

import sympy as sp

from ..symbols import a, d_h, g, t
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["checkpointed_qkv_storage"]


def checkpointed_qkv_storage(kept: bool = True, width: int = 2) -> Term:
    r"""The fused QKV output a checkpointed core attention keeps beyond V [bytes per layer].

    Per micro-batch and layer, with :math:`\tau = sb/c`:

    .. math:: 2\tau\,(a + g)\,d_h / t

    Megatron-core splits the QKV projection's output into query, key and value with
    ``torch.split`` (or Transformer Engine's ``SplitAlongDim``): views of one
    :math:`(a + 2g)d_h/t`-wide storage per token.  The query's reshape to heads copies it
    and RoPE makes new Q and K, but V stays a view (``value.squeeze(1)`` under packed
    sequences too).  Selective recompute of ``core_attn`` runs the attention under
    ``tensor_parallel.checkpoint``, whose ``CheckpointFunction.forward`` calls
    ``ctx.save_for_backward(*args)`` on query, key and value: the saved V view keeps the whole
    QKV storage until the backward, Q and K widths more than the ``v`` term counts.  Without
    the checkpoint Transformer Engine's attention makes the strided V contiguous
    (``get_qkv_layout``: its strides fit no supported layout) and saves the copy, so the view's
    storage is freed: 0 then.  Measured on a CPU port in ``tests/test_qkv_view_storage.py``.
    (With fewer query groups than t, Megatron all-gathers the QKV output first, a wider
    storage, not modelled.)

    Parameters
    ----------
    kept : bool
        Megatron-core's layer with ``core_attn`` checkpointed (selective recompute) [1].

    width : {2, 4}
        Bytes of an element in the compute dtype (each 2 above; 4 in fp32) [bytes/element].
    Examples
    --------
    Llama 3 70B (a = 64, g = 8, d_h = 128) at t = 4, s = 4096, b = 1: 2 x 4096 x 72 x 128 / 4
    bytes, 18.9 MB per layer:

    >>> checkpointed_qkv_storage().evaluate(s=4096, b=1, c=1, a=64, g=8, d_h=128, t=4)
    18874368
    >>> checkpointed_qkv_storage(False).expr
    0

    References
    ----------
    .. [megatron-core] megatron/core/transformer/attention.py:1824-1930 at d98e8a64dd
       (``SelfAttention.get_query_key_value_tensors``: ``mixed_qkv.view``, ``SplitAlongDim`` /
       ``torch.split``, ``query.reshape``), :1470-1472 (``value.squeeze(1)``), :446-494
       (``_checkpointed_attention_forward``), tensor_parallel/random.py:628
       (``ctx.save_for_backward(*args)``).
    .. [transformer-engine] transformer_engine/pytorch/attention/dot_product_attention/
       utils.py:2421-2616 at d0067d0da6 (``get_qkv_layout``: ``check_strides_kv``, "force
       q,k,v to be contiguous").
    """
    tok, _ = token_split(False)
    expr = width * tok * (a + g) * d_h / t if kept else sp.Integer(0)
    return Term("checkpointed_qkv_storage", expr, "the QKV projection's output, whose V view "
                "the checkpointed core attention saves (Q and K widths beyond the v term)",
                Source("megatron-core", "transformer/attention.py:1824-1930, :446-494, "
                       "tensor_parallel/random.py:628 at d98e8a64dd"),
                label="QKV storage")
