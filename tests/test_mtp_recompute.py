"""An MTP layer under full recompute follows Megatron-core's own MTP checkpoint, not the
decoder's method.

megatron/core/transformer/multi_token_prediction.py at d98e8a64dd,
``MultiTokenPredictionLayer._checkpointed_forward`` (:1621-1648): under ``recompute_method
uniform`` it asserts ``recompute_num_layers == 1`` and checkpoints the layer; under ``block``
it warns "not supported for MTP yet. Skipping recompute" and runs the layer unchecked.  The GPT
path's one ``TransformerLayer`` then keeps everything; a hybrid's ``HybridStack``
(models/hybrid/hybrid_block.py:360-371) runs ``checkpointed_forward`` itself, whose block
method checkpoints the first N of the MTP block's layers (megatron/core/recompute.py:167-181).

Every expected byte count is derived here, per token of one micro-batch (s = 128, b = 1,
one GPU, bf16, flash attention, no dropout, LayerNorm: fp32 mean and rstd, 8 bytes a norm):

* a transformer layer kept whole (Korthikanti et al., §4.1, without the dropout masks and
  the attention scores flash attention does not keep): the two norms' inputs 2h + 2h, the
  QKV input 2h, Q 2ad, K and V 2gd each, the core-attention output 2ad, flash attention's
  fp32 logsumexp 4a, the fc1 input 2h, fc1's output and GeLU's output 2f each, the norms'
  statistics 2 x 8;
* the output layer: the final norm's input 2h and statistics 8, the output layer's input
  2h, the fp32 logits 4V;
* a checkpointed layer: its input 2h; an MTP pass under the MTP checkpoint keeps of its
  output part only the output layer's input 2h and the logits 4V (its final_layernorm runs
  inside the checkpoint, ``_postprocess`` at line 1429);
* an MTP pass's own inputs (``_get_embeddings``, ``_concat_embeddings``, lines 1279-1359):
  the rolled int64 ids 8, enorm's and hnorm's inputs 2h each and their statistics 2 x 8, the
  2h-wide concatenation eh_proj keeps 4h; under the MTP checkpoint only the checkpoint's
  arguments (the two norms' inputs) and the ids.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from memsym.errors import InvalidValueError
from memsym.job import Layout, Training, job
from memsym.model import Architecture
from memsym.model.stages import mamba_values
from memsym.symbols import b, c, h, s
from memsym.terms.activations import mtp_input_activations
from memsym.training import stage_activations

S, H, A, D, G, F, V = 128, 64, 4, 16, 4, 128, 1000
DENSE = Architecture(num_layers=2, hidden_size=H, num_attention_heads=A, ffn_hidden_size=F,
                     vocab_size=V, position_embedding_type="rope", max_position_embeddings=S,
                     mtp_num_layers=1)
HYBRID = Architecture(num_layers=2, hidden_size=H, num_attention_heads=A, ffn_hidden_size=F,
                      vocab_size=V, position_embedding_type="rope", max_position_embeddings=S,
                      layer_mixers=("mamba", "none"), ffn_layers=(0, 1),
                      mamba_inner_size=128, mamba_state_dim=16, mamba_num_heads=4,
                      mamba_num_groups=1, mamba_conv_kernel=4, mtp_num_layers=1,
                      mtp_layer_pattern="M-")
TRANSFORMER_LAYER = (2 * H + 2 * H) + 2 * H + 2 * A * D + 2 * G * D + 2 * G * D + 2 * A * D \
    + 4 * A + 2 * H + 2 * F + 2 * F + 2 * 8
OUTPUT = 2 * H + 8 + 2 * H + 4 * V
MLP_LAYER = 2 * H + 8 + 2 * H + 2 * F + 2 * F        # "-": one norm, then the MLP
CHECKPOINTED = 2 * H


def _mtp(arch, key="mtp_activations", **recompute):
    training = Training(seq_length=S, micro_batch_size=1, dropout=False, **recompute)
    return stage_activations(arch, Layout(), training).breakdown(
        s=S, b=1, t=1, c=1, p=1, L=2, h=H, a=A, g=G, d_h=D, f=F, V=V,
        **{str(k): v for k, v in mamba_values(arch).items()})[key]


def test_the_hand_counts_add_up():
    assert TRANSFORMER_LAYER == 1568 and OUTPUT == 4264 and MLP_LAYER == 776


@pytest.mark.parametrize("n", [0, 1, 2])
def test_block_recompute_keeps_the_gpt_mtp_layer_whole(n):
    # Megatron skips MTP recompute under block: the layer keeps what it keeps without recompute
    want = S * (TRANSFORMER_LAYER + OUTPUT)
    assert _mtp(DENSE, recompute="full", recompute_method="block", recompute_num_layers=n) \
        == want == _mtp(DENSE, recompute="none")


@pytest.mark.parametrize("arch", [DENSE, HYBRID])
def test_uniform_recompute_checkpoints_the_whole_mtp_layer(arch):
    # the MTP checkpoint wraps eh_proj, the block and the layer's own final_layernorm
    # (_postprocess, line 1429): those keep nothing; the pass keeps the output layer's input
    # 2h and the fp32 logits 4V; the checkpoint's arguments (the two norms' inputs) are the
    # MTP inputs' term
    full = dict(recompute="full", recompute_method="uniform", recompute_num_layers=1)
    assert _mtp(arch, **full) == S * (2 * H + 4 * V)
    assert _mtp(arch, "mtp_input_activations", **full) == S * (8 + 2 * H + 2 * H)


@pytest.mark.parametrize("recompute", [
    dict(recompute="none"), dict(recompute="selective"),
    dict(recompute="full", recompute_method="block", recompute_num_layers=1)])
def test_an_mtp_pass_keeps_its_embedding_norm_inputs_and_the_concatenation(recompute):
    # _get_embeddings: the rolled int64 ids (8 bytes a token); _concat_embeddings: enorm's and
    # hnorm's inputs (2h each), their LayerNorm mean and rstd (2 x 8), the 2h-wide concatenation
    # eh_proj keeps (2 x 2h); no dropout here
    assert _mtp(DENSE, "mtp_input_activations", **recompute) \
        == S * (8 + 2 * H + 2 * H + 2 * 8 + 2 * 2 * H) == 68_608


def test_mtp_inputs_under_sequence_parallelism_and_dropout():
    # every h-wide input is this rank's sequence shard (t = 2); the embedding's dropout mask is
    # one byte an element; the ids are whole
    training = Training(seq_length=S, micro_batch_size=1, dropout=True)
    got = stage_activations(DENSE, Layout(t=2, sequence_parallel=True), training).breakdown(
        s=S, b=1, t=2, c=1, p=1, L=2, h=H, a=A, g=G, d_h=D, f=F, V=V)["mtp_input_activations"]
    assert got == S * 8 + S * (H + 2 * H + 2 * H + 2 * 8 + 4 * H) // 2 == 38_912


@pytest.mark.parametrize("n,want", [
    (1, S * (CHECKPOINTED + MLP_LAYER + OUTPUT)),     # "M" checkpointed, "-" kept whole
    (2, S * (CHECKPOINTED + CHECKPOINTED + OUTPUT)),  # both of the block's layers checkpointed
    (5, S * (CHECKPOINTED + CHECKPOINTED + OUTPUT)),  # N past the block's two layers: both
])
def test_block_recompute_of_a_hybrid_mtp_block_checkpoints_its_first_n_layers(n, want):
    assert _mtp(HYBRID, recompute="full", recompute_method="block",
                recompute_num_layers=n) == want


def test_block_zero_keeps_the_hybrid_mtp_block_whole():
    # block 0 checkpoints none of the block's layers: what it keeps without recompute
    assert _mtp(HYBRID, recompute="full", recompute_method="block",
                recompute_num_layers=0) == _mtp(HYBRID, recompute="none")


def test_uniform_recompute_of_more_than_one_layer_with_mtp_is_refused():
    kw = dict(seq_length=S, micro_batch_size=1, recompute="full",
              recompute_method="uniform", recompute_num_layers=2)
    with pytest.raises(InvalidValueError, match="must be 1 for MTP recompute") as err:
        job(DENSE, **kw)
    assert "\n" not in str(err.value)
    # without MTP the same method is Megatron's ordinary uniform recompute
    job(replace(DENSE, mtp_num_layers=0), **kw)
    job(DENSE, **dict(kw, recompute_num_layers=1))


def test_mtp_inputs_of_nemotron_3_super_under_mxfp8():
    """Nemotron 3 Super's B200 MXFP8 run (h 4096, RMSNorm, no dropout, no SP): per token the
    rolled int64 id 8, enorm's and hnorm's 16-bit inputs 2 x 2 x 4096, their fp32 rstd 2 x 4,
    and eh_proj's columnwise MXFP8 copy of the 8192-wide concatenation, a byte an element
    and an E8M0 scale per 32 (TransformerEngine d0067d0da6 pytorch/module/linear.py:616-621):
    8192 + 8192 / 32."""
    got = mtp_input_activations(norm="rmsnorm", dropout=False, fp8_inputs="mxfp8").expr
    assert got.subs({s: 1, b: 1, c: 1, h: 4096}) == \
        8 + 2 * 2 * 4096 + 2 * 4 + 8192 + 8192 // 32 == 24_848
