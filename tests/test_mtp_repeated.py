"""Multi-token prediction with a repeated layer (Megatron-core ``mtp_use_repeated_layer``).

Megatron-LM d98e8a64dd, megatron/core/transformer/multi_token_prediction.py: with
``mtp_use_repeated_layer`` the block builds ONE MultiTokenPredictionLayer (lines 1960-1969 for
a hybrid pattern, 1985-1996 otherwise) and its forward runs ``layers[0]`` for each of the
``mtp_num_layers`` depths (line 2049 ``layer_idx = 0 if self.mtp_use_repeated_layer``), each
on that depth's own inputs: one layer's weights, gradients and optimizer states, and one set
of activations per pass.  A MultiTokenPredictionLayer is enorm and hnorm (lines 1157-1168),
eh_proj 2h -> h (1174), one transformer layer (1203-1230) and a final norm (1247).
Megatron-Bridge 067f987df0 recipes/nemotronh/h100/nemotron_3_super.py:96-102 sets
``mtp_num_layers = 2`` with ``mtp_use_repeated_layer = True``.
"""

from __future__ import annotations

from dataclasses import replace

from memsym.job import Layout, Training
from memsym.model import Architecture, parameter_count, preset
from memsym.model.stages import stage_parameters
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.readers.megatron import read_megatron_args, read_megatron_overrides
from memsym.training.activations import stage_activations

# a small dense GPT: RMSNorm (one scale per element), no biases, tied embeddings
H, A, D_H, F, V, LAYERS = 256, 8, 32, 1024, 1000, 4
GPT = Architecture(num_layers=LAYERS, hidden_size=H, num_attention_heads=A, ffn_hidden_size=F,
                   vocab_size=V, normalization="RMSNorm", add_bias_linear=False,
                   position_embedding_type="rope")
LAYER = H * 3 * A * D_H + A * D_H * H + 2 * H * F + 2 * H      # QKV, proj, fc1/fc2, 2 norms
MAIN = LAYERS * LAYER + V * H + H                              # + embedding, final norm
MTP_BLOCK = 2 * H * H + 3 * H + LAYER                          # eh_proj, 3 norms, the layer


def test_hand_counts():
    assert LAYER == 786_944 and MTP_BLOCK == 918_784 and MAIN == 3_404_032
    assert parameter_count(GPT) == MAIN


def test_repeated_layer_counts_one_blocks_weights():
    two = replace(GPT, mtp_num_layers=2)
    assert parameter_count(two) == MAIN + 2 * MTP_BLOCK == 5_241_600
    assert parameter_count(replace(two, mtp_repeated=True)) == MAIN + MTP_BLOCK == 4_322_816


def test_repeated_layer_on_the_last_stage():
    # p = 2: the last stage holds 2 layers, the final norm, the output copy of the tied
    # embedding (tied_output_copy) and the MTP block's weights once
    kw = dict(t=1, p=2, stage=1, pad_vocab=False)
    plain = stage_parameters(replace(GPT, mtp_num_layers=0), **kw).total
    rep = stage_parameters(replace(GPT, mtp_num_layers=2, mtp_repeated=True), **kw).total
    sep = stage_parameters(replace(GPT, mtp_num_layers=2), **kw).total
    assert rep - plain == MTP_BLOCK and sep - plain == 2 * MTP_BLOCK


def test_each_pass_keeps_its_activations():
    # p = 1, one micro-batch (s = 128, b = 1): the last stage keeps, per MTP pass, one layer's
    # activations and one more final norm / output layer / logits; a repeated layer's two passes
    # keep two sets, as two layers do.  The output layer per micro-batch (RMSNorm, t = 1):
    # final-norm input 2sbh, its fp32 rstd 4sb (RMSNorm keeps no mean), output input 2sbh,
    # fp32 logits 4sbV
    s = 128
    out = 2 * s * H + 4 * s + 2 * s * H + 4 * s * V
    assert out == 643_584
    training = Training(seq_length=s, micro_batch_size=1)
    acts = {rep: stage_activations(replace(GPT, mtp_num_layers=2, mtp_repeated=rep), Layout(),
                                   training) for rep in (False, True)}
    sizes = dict(s=s, b=1, h=H, a=A, g=A, d_h=D_H, f=F, V=V, t=1, c=1, L=LAYERS, p=1)
    values = {rep: total.breakdown(**sizes) for rep, total in acts.items()}
    for got in values.values():
        assert got["output_activations"] == out
        layer = got["layer_activations"] / LAYERS
        assert got["mtp_activations"] == 2 * (layer + out)
    assert values[True]["total"] == values[False]["total"]


def test_megatron_lm_argument_is_read():
    base = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
            "--seq-length", "128", "--max-position-embeddings", "128", "--micro-batch-size", "1",
            "--vocab-size", "1000", "--tokenizer-type", "NullTokenizer",
            "--position-embedding-type", "rope", "--mtp-num-layers", "2"]
    assert read_megatron_args(base).architecture["mtp_repeated"] is False
    job = read_megatron_args(base + ["--mtp-use-repeated-layer"])
    assert job.architecture["mtp_repeated"] is True
    assert "--mtp-use-repeated-layer" not in job.ignored
    over = read_megatron_overrides(["--mtp-use-repeated-layer"], num_layers=4)
    assert over.options == {"mtp_repeated": True} and over.ignored == ()


def test_super_recipe_reads_one_repeated_block():
    # nemotron_3_super.py:98 mtp_num_layers = 2, :102 mtp_use_repeated_layer = True; the
    # 64-GPU recipe (the legacy name's) builds on the 16-GPU one (line 171)
    for name in ("nemotron_3_super_pretrain_config",
                 "nemotron_3_super_pretrain_16gpu_h100_bf16_config"):
        model, opts, _ = bridge_job_options(read_bridge_recipe(name))
        assert (model, opts["mtp_num_layers"], opts["mtp_repeated"]) == \
            ("nemotron-3-super", 2, True)
    _, opts, _ = bridge_job_options(read_bridge_recipe(
        "nemotron_3_super_pretrain_config", ["model.mtp_use_repeated_layer=false"]))
    assert opts["mtp_repeated"] is False
    # a DeepSeek-V3 recipe leaves TransformerConfig's default False (transformer_config.py:82)
    _, opts, _ = bridge_job_options(read_bridge_recipe("deepseek_v3_pretrain_config"))
    assert not opts.get("mtp_repeated")


def test_super_with_the_recipes_mtp_counts_one_block():
    arch = preset("nemotron-3-super")
    one = parameter_count(replace(arch, mtp_num_layers=1))
    assert parameter_count(replace(arch, mtp_num_layers=2, mtp_repeated=True)) == one
    assert parameter_count(replace(arch, mtp_num_layers=2)) - parameter_count(arch) \
        == 2 * (one - parameter_count(arch))


def test_super_recipe_estimate_holds_one_block_on_its_last_stage():
    # the 64-GPU recipe: t = 1, p = 2, e = 32 (nemotron_3_super.py:175-182); the last stage
    # holds the MTP block once.  The block by hand (tests/test_latent_moe.py's shapes): eh_proj
    # 2h x h, enorm, hnorm and the final norm, an attention layer with its norm, a latent-MoE
    # layer with its norm (router, latent projections, shared expert; 512 experts apart)
    from test_latent_moe import H, E, LAT, F_E, _attention, _moe
    block = 2 * H * H + 3 * H + _attention() + _moe(experts=0)
    experts = E * 2 * LAT * F_E
    arch = preset("nemotron-3-super")
    kw = dict(t=1, p=2, stage=1, e=32, pad_vocab=False)
    base = stage_parameters(arch, **kw)
    rep = stage_parameters(replace(arch, mtp_num_layers=2, mtp_repeated=True), **kw)
    assert rep.tp + rep.replicated - base.tp - base.replicated == block
    assert rep.experts - base.experts == experts


def test_mtp_layer_pattern_is_checked():
    import pytest
    from memsym.errors import InvalidValueError
    from memsym.model import resolve
    hybrid = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4,
                          position_embedding_type="none", layer_mixers=("mamba", "attention"),
                          ffn_layers=(0, 0), mamba_inner_size=128, mamba_state_dim=16,
                          mamba_num_heads=8, mtp_num_layers=1)
    assert resolve(replace(hybrid, mtp_layer_pattern="M*-")).mtp_layer_pattern == "M*-"
    for bad in ("", "*X", "*E", 3):       # E: no experts in this model
        with pytest.raises(InvalidValueError, match="mtp_layer_pattern"):
            resolve(replace(hybrid, mtp_layer_pattern=bad))
    with pytest.raises(InvalidValueError, match="mtp_layer_pattern"):
        resolve(replace(GPT, mtp_layer_pattern="*-"))       # a GPT's MTP is its last layer's kind
