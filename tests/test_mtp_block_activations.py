"""A hybrid model's MTP layer keeps the activations of its own block, ``mtp_layer_pattern``.

Megatron-core builds each hybrid MTP layer's block as a ``HybridStack`` of the pattern's
letters (megatron/core/transformer/multi_token_prediction.py:1199-1214 at d98e8a64dd), so one
MTP pass keeps what those layers keep, plus one more final norm, output layer and logits.
Here the main stack is one Mamba layer and one MLP layer (``M-``) and the MTP block is the
same two letters, so each pass keeps exactly the main stack's activations and one more
output layer: ``mtp = n_mtp (A_layers + A_out)``.  A block of the last decoder layer's kind
alone (the GPT path) would keep only the MLP layer's.
"""

from __future__ import annotations

from dataclasses import replace

from memsym.job import Layout, Training
from memsym.model import Architecture
from memsym.model.stages import mamba_values
from memsym.training import stage_activations

HYBRID = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4,
                      ffn_hidden_size=128, vocab_size=1000, position_embedding_type="rope",
                      layer_mixers=("mamba", "none"), ffn_layers=(0, 1),
                      mamba_inner_size=128, mamba_state_dim=16, mamba_num_heads=4,
                      mamba_num_groups=1, mamba_conv_kernel=4,
                      max_position_embeddings=128)


def _breakdown(arch, recompute="none"):
    training = Training(seq_length=128, micro_batch_size=1, recompute=recompute)
    return stage_activations(arch, Layout(), training).breakdown(
        s=128, b=1, t=1, c=1, p=1, L=2, h=64, a=4, g=4, d_h=16, f=128, V=1000,
        **{str(k): v for k, v in mamba_values(arch).items()})


def test_each_mtp_pass_keeps_its_blocks_layers():
    for n_mtp in (1, 2):
        got = _breakdown(replace(HYBRID, mtp_num_layers=n_mtp, mtp_layer_pattern="M-"))
        assert got["mtp_activations"] == n_mtp * (got["layer_activations"]
                                                  + got["output_activations"])


def test_the_block_is_more_than_the_last_layer():
    # a one-letter block "-" keeps the MLP layer's activations only; "M-" adds the Mamba layer's
    one = _breakdown(replace(HYBRID, mtp_num_layers=1, mtp_layer_pattern="-"))
    two = _breakdown(replace(HYBRID, mtp_num_layers=1, mtp_layer_pattern="M-"))
    mamba_layer = two["mtp_activations"] - one["mtp_activations"]
    assert 0 < mamba_layer < two["layer_activations"]
