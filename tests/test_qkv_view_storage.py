"""The fused QKV output a checkpointed core attention keeps alive, measured on a CPU port.

Ported (test-only) from Megatron-LM d98e8a64dd and Transformer Engine d0067d0da6:

* ``SelfAttention.get_query_key_value_tensors`` (megatron/core/transformer/attention.py
  :1824-1930): ``mixed_qkv.view(sq, b, ng, (np/ng + 2) hn)``, ``torch.split`` into query, key,
  value (TE's ``SplitAlongDim``, transformer_engine/pytorch/utils.py:386-440, returns the same
  ``torch.split`` views), ``query.reshape(sq, b, -1, hn)``; packed sequences squeeze the batch
  dimension (attention.py:1470-1472, ``value.squeeze(1)``);
* the fused RoPE (``apply_rope_fusion``; TE attention/rope.py ``FusedRoPEFunc.forward``:
  a new output, ``ctx.save_for_backward(freqs, cu_seqlens, start_positions)``);
* selective recompute of ``core_attn``: ``_checkpointed_attention_forward`` (attention.py
  :446-494) runs ``tensor_parallel.checkpoint``, whose ``CheckpointFunction.forward`` runs the
  attention under ``torch.no_grad()`` and calls ``ctx.save_for_backward(*args)``
  (tensor_parallel/random.py:601-631);
* without it, TE's ``get_qkv_layout`` (attention/dot_product_attention/utils.py:2421-2616)
  finds no layout for a strided V beside contiguous Q and K (``check_strides_kv``) and makes
  all three contiguous; the fused attention saves those and its output.

Shapes: 6 packed tokens, np = 4 heads, ng = 2 query groups, hn = 4, bf16 (2 bytes).  The QKV
output is 6 x 2 x (2 + 2) x 4 = 192 elements (384 bytes); Q 6 x 4 x 4 = 96 (192 bytes), K and
V 6 x 2 x 4 = 48 each (96 bytes), the attention output 96 (192 bytes).
"""

from __future__ import annotations

import pytest

from memsym.terms.qkv_storage import checkpointed_qkv_storage
from tests.framework_ports import saved_storage_bytes

torch = pytest.importorskip("torch")

SQ, NP, NG, HN = 6, 4, 2, 4


def _split(mixed):
    """get_query_key_value_tensors's split (attention.py:1879-1920) and the THD squeeze."""
    per_group = NP // NG
    mixed = mixed.view(SQ, 1, NG, (per_group + 2) * HN)
    query, key, value = torch.split(mixed, [per_group * HN, HN, HN], dim=3)
    query = query.reshape(query.size(0), query.size(1), -1, HN)
    return query.squeeze(1), key.squeeze(1), value.squeeze(1)


class _FusedRoPE(torch.autograd.Function):
    """TE's FusedRoPEFunc: a new output, only the frequencies saved."""

    @staticmethod
    def forward(ctx, x, freqs):
        ctx.save_for_backward(freqs)
        rotated = torch.cat((-x[..., HN // 2:], x[..., :HN // 2]), dim=-1)
        return x * freqs.cos() + rotated * freqs.sin()

    @staticmethod
    def backward(ctx, grad):      # pragma: no cover - the tests count the forward's saves
        raise NotImplementedError


def _attention(q, k, v):
    """softmax(Q K^T) V over the GQA groups, [tokens, heads, hn]."""
    k = k.repeat_interleave(NP // NG, dim=1)
    v = v.repeat_interleave(NP // NG, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()).softmax(-1)
    return torch.einsum("hqk,khd->qhd", scores, v.float()).to(q.dtype)


class _Checkpoint(torch.autograd.Function):
    """CheckpointFunction.forward: run under no_grad, then save_for_backward(*args)."""

    @staticmethod
    def forward(ctx, q, k, v):
        with torch.no_grad():
            out = _attention(q, k, v)
        ctx.save_for_backward(q, k, v)
        return out

    @staticmethod
    def backward(ctx, grad):      # pragma: no cover
        raise NotImplementedError


class _FusedAttention(torch.autograd.Function):
    """TE's DotProductAttention: get_qkv_layout's contiguous copies, then q, k, v, out saved."""

    @staticmethod
    def forward(ctx, q, k, v):
        if tuple(s // k.shape[-1] for s in k.stride()[:-1]) != \
                tuple(s // v.shape[-1] for s in v.stride()[:-1]):   # check_strides_kv
            q, k, v = (x.contiguous() for x in (q, k, v))
        out = _attention(q, k, v)
        ctx.save_for_backward(q, k, v, out)
        return out

    @staticmethod
    def backward(ctx, grad):      # pragma: no cover
        raise NotImplementedError


def _layer(checkpointed):
    mixed = torch.randn(SQ, 1, NG * (NP // NG + 2) * HN, dtype=torch.bfloat16, requires_grad=True)
    freqs = torch.randn(SQ, 1, HN, dtype=torch.bfloat16)
    saved_ptrs = []

    def run():
        query, key, value = _split(mixed)
        query, key = _FusedRoPE.apply(query, freqs), _FusedRoPE.apply(key, freqs)
        (_Checkpoint if checkpointed else _FusedAttention).apply(query, key, value)

    def watch():
        with torch.autograd.graph.saved_tensors_hooks(
                lambda x: saved_ptrs.append(x.untyped_storage().data_ptr()) or x, lambda x: x):
            run()
    return saved_storage_bytes(run, own=(freqs,)), mixed, saved_ptrs, watch


def test_checkpointed_core_attention_keeps_the_qkv_storage():
    got, mixed, ptrs, watch = _layer(True)
    watch()
    # Q' 192 + K' 96 (RoPE outputs) + the whole QKV output 384 bytes (the saved V view)
    assert got == 192 + 96 + 384
    assert mixed.untyped_storage().data_ptr() in ptrs
    # memsym's qk and v terms count Q', K' and a V of 96 bytes: 2 tau (a + g) hn more is kept,
    # 2 x 6 x (4 + 2) x 4 = 288 bytes
    assert got - (192 + 96 + 96) == 2 * SQ * (NP + NG) * HN == 288
    assert checkpointed_qkv_storage().evaluate(s=SQ, b=1, c=1, a=NP, g=NG, d_h=HN, t=1) == 288


def test_uncheckpointed_attention_saves_a_v_copy():
    got, mixed, ptrs, watch = _layer(False)
    watch()
    # Q' 192, K' 96, V's contiguous copy 96, the output 192 bytes; the QKV output is freed
    assert got == 192 + 96 + 96 + 192
    assert mixed.untyped_storage().data_ptr() not in ptrs
    assert checkpointed_qkv_storage(False).expr == 0
