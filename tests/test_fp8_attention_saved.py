"""What Transformer Engine's fused attention saves for its backward under FP8 attention.

Read from Transformer Engine 2.14.1 (366798ef8a, Megatron-Bridge v0.4.2's pin; release_v2.9,
Bridge v0.2.2's, saves the same, backends.py:1240-1243 there),
``transformer_engine/pytorch/attention/dot_product_attention/backends.py``
``FusedAttnFunc.forward``:

* ``:1211`` ``is_bwd_fp8 = fp8 and int(os.getenv("NVTE_FP8_DPA_BWD", "1"))``: an FP8 backward;
* ``:1314-1326``: with it, ``fp8_tensors = (q_fp8, k_fp8, v_fp8, out_fp8)`` under delayed
  scaling, ``(q_fp8, k_fp8, v_fp8, None)`` with ``qkvo_tensors = (None, None, None, out)`` (the
  16-bit output) under current scaling (``NVTE_DPA_FP8CS_O_in_F16``, default "1", ``:154``);
  no 16-bit Q, K, V; ``:1395`` ``ctx.save_for_backward``.  Under delayed scaling the output the
  projection gets is ``out_.dequantize()`` (``:1291``), a 16-bit copy the projection quantizes
  for itself and frees.
* ``csrc/extensions/attention.cpp:263-276``: the FP8 backend's aux tensors are
  ``M [b, h, sq, 1]`` and ``ZInv [b, h, sq, 1]``, both fp32 (``common/fused_attn/
  fused_attn_fp8.cu:2448-2461``), and a 2-element int64 rng state; the 16-bit backend's one
  fp32 ``S [b, h, sq, 1]``.

MXFP8 attention is refused there (``dot_product_attention.py:676-680``, "DotProductAttention does
not support ... recipe" for any recipe but delayed and current scaling); Transformer Engine main
(d0067d0da6) runs it: ``get_attention_quantizers`` turns on the columnwise usage of the QKV
quantizer (utils.py:2720-2724), ``combine_and_quantize(..., used_in_backward=is_training)``
keeps rowwise and columnwise copies (backends.py:1484, utils.py:3059-3072), backends.py:1583-1584
save them with the 16-bit O, and the FP8 backend keeps one fp32 ``S`` (attention.cpp:275).

Each expectation below is that list written out by hand for Llama 3 8B's GQA shapes (a = 32
query heads, g = 8 key/value heads, d_h = 128, 32 layers), per layer and micro-batch at TP 1,
CP 1, s = 8192, b = 1: tokens = 8192.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.readers.te_attention import fp8_attention_notes
from memsym.training import Layout, Training, training_memory

A, G, D_H, LAYERS, TOKENS = 32, 8, 128, 32, 8192
QKV = TOKENS * (A + 2 * G) * D_H      # elements of Q (a heads), K and V (g heads each)
O = TOKENS * A * D_H                  # elements of the attention output
ROWS = TOKENS * A                     # query rows x heads: one statistic each per tensor


def _activations(precision: str, fp8_attention: bool, *more) -> tuple:
    """(activation bytes, job options, notes) of Bridge's llama3_8b_pretrain_config at CP 1
    under ``precision`` with or without FP8 attention."""
    model, opts, notes = bridge_job_options(read_bridge_recipe("llama3_8b_pretrain_config", [
        f"mixed_precision={precision}", "model.context_parallel_size=1",
        f"mixed_precision.fp8_dot_product_attention={'true' if fp8_attention else 'false'}",
        *more]))
    assert (opts["t"], opts.get("c", 1), opts["seq_length"]) == (1, 1, 8192)
    return training_memory(job(model, **opts)).grouped()["activations"], opts, notes


def _saved_difference(precision: str, *more) -> int:
    return _activations(precision, False, *more)[0] - _activations(precision, True, *more)[0]


def test_delayed_scaling_saves_fp8_q_k_v_and_output_and_two_fp32_statistics():
    # 16-bit: Q, K, V and O 2 bytes each, one fp32 Stats; FP8 (delayed): 1 byte each, M and
    # ZInv fp32.  The output projection's own FP8 copy of its input is there either way.
    per_layer = QKV * (2 - 1) + O * (2 - 1) - ROWS * (8 - 4)
    assert per_layer == 82_837_504
    assert _saved_difference("bf16_with_fp8_delayed_scaling_mixed") == LAYERS * per_layer


def test_current_scaling_keeps_the_16_bit_output():
    # NVTE_DPA_FP8CS_O_in_F16=1: O stays 16-bit; the config runs its first and last layers in
    # BF16 (num_layers_at_start/end_in_bf16 = 1, mixed_precision.py:297-301), attention too
    per_layer = QKV * (2 - 1) - ROWS * (8 - 4)
    assert _saved_difference("bf16_with_fp8_current_scaling_mixed") == (LAYERS - 2) * per_layer


def test_mxfp8_keeps_rowwise_and_columnwise_copies_with_their_scales():
    # TE main: two FP8 copies of Q, K, V, each with an E8M0 byte per 32 elements; O 16-bit;
    # one fp32 S as the 16-bit backend's: 1/16 byte an element more than 16 bits
    per_layer = QKV * (2 - 2 * (1 + Fraction(1, 32)))
    assert per_layer == -3_145_728
    assert _saved_difference("bf16_with_mxfp8_mixed") == LAYERS * per_layer


def test_recomputed_core_attention_keeps_its_16_bit_inputs():
    # selective recompute of core_attn: the checkpoint saves its 16-bit Q, K, V inputs and
    # the attention's own FP8 tensors are rebuilt in the backward: nothing changes
    assert _saved_difference("bf16_with_fp8_delayed_scaling_mixed",
                             "model.recompute_granularity=selective") == 0


def test_nvfp4_attention_is_counted_in_16_bits_and_said():
    # NVFP4 runs FP8 attention only where NVTE_DPA_FP8_RECIPE picks an FP8 recipe
    # (dot_product_attention.py:615-680): memsym counts 16 bits and says so
    assert _saved_difference("bf16_with_nvfp4_mixed") == 0
    _, opts, _ = _activations("bf16_with_nvfp4_mixed", True)
    assert "fp8_attention" not in opts
    assert "NVTE_DPA_FP8_RECIPE" in fp8_attention_notes("vanilla", "nvfp4")[0]


def test_the_note_says_what_is_counted():
    delayed = fp8_attention_notes("vanilla", "delayed")[0]
    assert "Q, K, V and output in FP8" in delayed and "M and ZInv" in delayed
    assert "16 bits" in fp8_attention_notes("vanilla", "tensorwise")[0]
    assert "refuse MXFP8 attention" in fp8_attention_notes("vanilla", "mxfp8")[0]
    assert "not modelled" not in delayed


def test_refused_outside_an_fp8_recipe_and_outside_megatron():
    def acts(**kw):
        tr = Training(seq_length=4096, micro_batch_size=1, global_batch_size=8, **kw)
        return training_memory("llama3-8b", Layout(d=8), tr)

    with pytest.raises(InvalidValueError, match="precision fp8"):
        acts(fp8_attention=True)
    with pytest.raises(InvalidValueError, match="framework megatron"):
        acts(fp8_attention=True, precision="fp8", framework="torchtitan", sharding="fsdp")
