"""Latent MoE (Megatron-core ``moe_latent_size``) and the Nemotron 3 Super preset.

Every expected value is hand arithmetic from the shapes Megatron-core builds at d98e8a64dd
(moe_layer.py:266-304 the latent projections, experts.py:217-245 the experts at the latent
width, mlp.py:215-244 the shared experts at the hidden width, router.py:64 the router at the
hidden width) or a number Megatron-Bridge prints (067f987df0).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from memsym.errors import InvalidValueError
from memsym.model import (Architecture, active_parameter_count, parameter_count,
                          parameter_counts, preset, symbolic_parameters)

# Nemotron 3 Super's sizes (Megatron-LM nemotron3_super_release_gb200/model_config.yaml)
H, LAT, V, E, K, F_E, F_SH = 4096, 1024, 131072, 512, 22, 2688, 5376
D_SSM, N_SSM, G_SSM, H_SSM, K_CONV = 128 * 64, 128, 8, 128, 4
A, G, D_H = 32, 2, 128


def _mamba():
    # NemotronHMamba2Mixer / Megatron's MambaMixer: in_proj h -> 2 d + 2 G N + H, conv1d over
    # d + 2 G N channels with bias, dt_bias, A_log, D per head, gated norm over d, out_proj
    proj = 2 * D_SSM + 2 * G_SSM * N_SSM + H_SSM
    conv = D_SSM + 2 * G_SSM * N_SSM
    return H * proj + conv * K_CONV + conv + 3 * H_SSM + D_SSM + D_SSM * H + H   # + its norm


def _attention():
    return H * (A + 2 * G) * D_H + A * D_H * H + H                                 # + its norm


def _moe(experts=E):
    router = E * H
    latent = H * LAT + LAT * H
    routed = experts * (LAT * F_E + F_E * LAT)          # squared ReLU: fc1 and fc2
    shared = H * F_SH + F_SH * H
    return router + latent + routed + shared + H                                   # + its norm


def test_nemotron_3_super_count_is_the_hand_count_and_the_checkpoint_card():
    main = 40 * _mamba() + 8 * _attention() + 40 * _moe() + 2 * V * H + H   # + final norm
    arch = preset("nemotron-3-super")
    assert parameter_count(arch) == main == 120_668_687_360
    # the Bridge's verification card (examples/model_verification_cards/
    # nemotron-3-super-120b-a12b/card.yaml): its export "reproduces all 42,683 source
    # tensors and 123,611,033,088 elements, including the 41 FP32 router correction-bias
    # tensors": the main model, one MTP block (eh_proj 2h -> h, enorm, hnorm, an attention
    # and a latent-MoE layer, a final norm) and 40 + 1 routers' E biases
    mtp = 2 * H * H + 2 * H + _attention() + _moe() + H
    assert main + mtp + 41 * E == 123_611_033_088
    # the recipe's MTP (nemotron_3_super.py:98, 102: two passes of one repeated "*E" block):
    # memsym counts the block once; the 41 expert biases are buffers (Megatron-LM d98e8a64dd
    # router.py:181-195 register_buffer), in the checkpoint but not parameters
    recipe = replace(arch, mtp_num_layers=2, mtp_repeated=True)
    assert parameter_count(recipe) == main + mtp
    assert parameter_count(recipe) + 41 * E == 123_611_033_088
    assert parameter_count(replace(recipe, mtp_repeated=False)) == main + 2 * mtp
    # docs/models/nemotron/nemotron3-super.md: "12B active parameters and 120B parameters in
    # total" (the name's A12B: 22 of 512 experts, without the input embedding)
    assert int(parameter_count(arch) / 1e9) == 120
    active = main - 40 * (E - K) * (2 * LAT * F_E) - V * H
    assert active_parameter_count(arch, embedding=False) == active
    assert int(active / 1e9) == 12


def test_nemotron_3_super_layer_kinds():
    arch = preset("nemotron-3-super")
    assert arch.layer_mixers.count("mamba") == 40 and arch.layer_mixers.count("attention") == 8
    assert sum(arch.moe_layer_freq) == 40 and arch.moe_latent_size == LAT


def test_latent_projections_are_replicated_and_the_experts_latent():
    arch = preset("nemotron-3-super")
    counts = parameter_counts(arch)
    assert counts["latent_projections"] == 40 * 2 * H * LAT
    assert counts["experts"] == 40 * E * 2 * LAT * F_E
    assert counts["router"] == 40 * E * H and counts["shared_experts"] == 40 * 2 * H * F_SH
    assert str(symbolic_parameters(arch, "latent_projections", per_layer=True)) == "2*h*h_lat"


def test_latent_without_experts_is_refused():
    arch = Architecture(num_layers=1, hidden_size=64, num_attention_heads=2,
                        position_embedding_type="rope", moe_latent_size=16)
    with pytest.raises(InvalidValueError, match="moe_latent_size"):
        parameter_count(arch)


def test_a_nemotron_h_config_with_moe_latent_size_is_read(tmp_path):
    from hf_oracle import small_config, write_config
    from memsym.model import from_hf_config
    cfg = small_config("nemotron_h", hybrid_override_pattern="M*E", mamba_num_heads=8,
                 mamba_head_dim=16, ssm_state_size=16, n_groups=2, n_routed_experts=4,
                 moe_intermediate_size=32, moe_shared_expert_intermediate_size=48,
                 head_dim=16, moe_latent_size=24)
    plain = from_hf_config(write_config(tmp_path, {**cfg, "moe_latent_size": None}))
    arch = from_hf_config(write_config(tmp_path, cfg))
    h = arch.hidden_size
    assert arch.moe_latent_size == 24
    # two latent projections h x 24 added; four experts of 2 x 32 x (24 instead of h)
    assert parameter_count(arch) - parameter_count(plain) == 2 * h * 24 + 4 * 2 * 32 * (24 - h)


def test_latent_moe_activations_by_hand():
    # per micro-batch: tau = s b / c tokens, R = c_f k tau t_e / t routed copies; a latent
    # MoE keeps its routed copies (the experts' fc1 input) and the expert outputs for the
    # combine h_lat wide instead of h (the dispatcher moves fc1_latent_proj's output,
    # moe_layer.py:489-493) and fc2_latent_proj keeps its input, the combined [tau, h_lat]
    # (moe_layer.py:591-592; TE's linear.py saves the input of a weight's GEMM)
    import sympy as sp
    from memsym.symbols import b, c, c_f, h, h_lat, k, s, t, t_e
    from memsym.terms.activations import layer_activations
    tau, R = s * b / c, c_f * k * (s * b / c) * t_e / t
    plain = layer_activations(moe=True, flash=True, sequence_parallel=True)
    lat = layer_activations(moe=True, flash=True, sequence_parallel=True, latent=True)
    assert sp.simplify(lat["routed_tokens"].expr - 2 * R * h_lat) == 0
    assert sp.simplify(lat["combine"].expr - 2 * R * h_lat) == 0
    assert sp.simplify(lat["latent_fc2_input"].expr - 2 * tau * h_lat / t) == 0
    assert "latent_fc1_input" not in lat            # bf16: the norm output moe_input holds
    assert sp.simplify(lat.expr - plain.expr
                       - (4 * R * (h_lat - h) + 2 * tau * h_lat / t)) == 0
    # FP8: fc1_latent_proj keeps its own 1-byte copy of the norm output
    fp8 = layer_activations(moe=True, flash=True, latent=True, fp8_inputs=True)
    assert sp.simplify(fp8["latent_fc1_input"].expr - tau * h) == 0
    assert sp.simplify(fp8["latent_fc2_input"].expr - tau * h_lat) == 0
    # "moe" recompute checkpoints the whole MoELayer forward (moe_layer.py:700-717), the
    # latent projections with it
    rec = layer_activations(moe=True, latent=True, recompute="selective", modules=("moe",))
    assert "latent_fc2_input" not in rec and "routed_tokens" not in rec


def test_a_hybrid_latent_moe_layer_keeps_the_latent_terms():
    from memsym.terms.mamba import hybrid_layer_activations
    layer = hybrid_layer_activations(("none", True), latent=True)
    assert "moe_latent_fc2_input" in layer and "moe_routed_tokens" in layer


def test_latent_moe_gemms_by_hand():
    # T = 4096 tokens, t = 2 (sequence parallel: T/t = 2048 on each rank), EP 64 (8 local of
    # 512 experts), t_e = 1: fc1_latent_proj [2048, 4096] x [4096, 1024] and fc2_latent_proj
    # [2048, 1024] x [1024, 4096] (duplicated, moe_layer.py:276-304); the experts' fc1 reads
    # 1024 and fc2 writes 1024 (experts.py:217-245); the shared expert keeps h (mlp.py:215-244)
    from memsym.timing.gemm import layer_gemms, shape_of
    x = shape_of(preset("nemotron-3-super"))
    g = {q.name: (float(q.M), float(q.N), float(q.K))
         for q in layer_gemms(x, 4096, 1, t=2, e=64, t_e=1, moe=True, mixer="none")}
    assert g["latent_fc1"] == (2048, LAT, H) and g["latent_fc2"] == (2048, H, LAT)
    rows = 4096 * K / 2 / (E / 64)           # b s k t_e / (t c) rows over E/e local experts
    assert g["expert_fc1"] == (rows, F_E, LAT) and g["expert_fc2"] == (rows, LAT, F_E)
    # the router scores the SP shard, T/t = 2048 tokens (router.py:111, :614-624)
    assert g["shared_fc1"] == (4096, F_SH / 2, H) and g["router"] == (2048, E, H)


def test_latent_moe_dispatches_latent_rows():
    # the all-to-all dispatcher sends each token's k copies h_lat wide (token_dispatcher.py:
    # the dispatcher sees fc1_latent_proj's output, moe_layer.py:489-493): per GPU and way
    # (e - 1)/e of T k h_lat 2 bytes, dispatch and combine
    from memsym.hardware import cluster
    from memsym.timing.gemm import layer_gemms, shape_of
    from memsym.timing.moe import moe_layer_extras
    x = shape_of(preset("nemotron-3-super"))
    T, e = 8192, 8
    gemms = layer_gemms(x, T, 1, t=1, e=e, t_e=1, moe=True, mixer="none")
    _, _, fwd_b, bwd_b, _, _ = moe_layer_extras(gemms, T, K, e, 1, cluster("dgx-b200"), "b200",
                                                "bf16")
    assert float(bwd_b) == pytest.approx(2 * (e - 1) / e * T * K * LAT * 2)


def test_a_megatron_command_with_moe_latent_size_is_read():
    # --moe-latent-size (Megatron-LM arguments.py:1980-1981, argument_utils.py:363): 4 layers
    # of h 64, 8 experts of 128 (not gated): the latent width 16 adds 2 x 64 x 16 per layer
    # and takes each expert's fc1 / fc2 from 64 to 16 wide
    from memsym.readers.megatron import read_megatron_args
    base = ["--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "8",
            "--seq-length", "128", "--max-position-embeddings", "128", "--micro-batch-size",
            "1", "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000",
            "--num-experts", "8", "--moe-ffn-hidden-size", "128"]
    plain = Architecture(**read_megatron_args(base).architecture)
    lat = Architecture(**read_megatron_args(base + ["--moe-latent-size", "16"]).architecture)
    assert lat.moe_latent_size == 16
    # Megatron's default add_bias_linear: the projections' biases (16 + 64, moe_layer.py:284,
    # 296) and each expert's fc2 bias 16 wide instead of 64 (experts.py:238-246)
    assert parameter_count(lat) - parameter_count(plain) == 4 * (
        2 * 64 * 16 + 8 * 2 * 128 * (16 - 64) + (16 + 64) + 8 * (16 - 64))


def test_the_shared_expert_under_mxfp8_by_hand():
    # Megatron-core d98e8a64dd builds the shared expert of TE linears without a fused norm
    # (models/gpt/moe_module_specs.py:74-84) and runs Nemotron's squared ReLU unfused
    # (transformer/mlp.py:336; activations.py:9-11: pow(relu(x), 2), both keeping relu's
    # output, 2 f_sh bytes a token); TE's linear keeps the quantized input of each GEMM, under
    # MXFP8 a byte an element and an E8M0 scale per 32 (TransformerEngine d0067d0da6
    # pytorch/module/linear.py:616-621): fc2 its input, f_sh wide, and fc1 its own copy of the
    # h-wide norm output; in 16 bits fc1 reads the norm output the layer already keeps and fc2
    # keeps the 16-bit activation output
    from memsym.symbols import b, c, f_sh, h, s, t
    from memsym.terms.activations import layer_activations
    one = {s: 1, b: 1, c: 1, t: 1, h: H, f_sh: F_SH}
    mx = layer_activations(moe=True, flash=True, shared_expert=True, fp8_inputs="mxfp8")
    bf = layer_activations(moe=True, flash=True, shared_expert=True)
    assert mx["shared_expert"].expr.subs(one) == \
        2 * F_SH + F_SH + F_SH // 32 + H + H // 32 == 20_520
    assert bf["shared_expert"].expr.subs(one) == 2 * F_SH + 2 * F_SH == 21_504
