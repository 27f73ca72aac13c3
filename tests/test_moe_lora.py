"""LoRA on MoE layers, counted as the frameworks build the adapters.

Megatron-Bridge (067f987df0), LoRA's defaults (peft/lora.py:155-157: share_expert_adapters
True, normalize_moe_lora and experts_shared_outer_loras False): a grouped expert linear
(``mlp.experts.linear_fc1`` / ``linear_fc2``, peft/utils.py:682-706) gets one
ParallelLinearAdapter of the expert linear's in and out features (utils.py:603-655), shared by
the rank's local experts, split over expert TP (its tp_group is the expert-TP group,
utils.py:1022) and held whole by every EP rank (broadcast over EP, gradient summed over EP,
utils.py:1294-1349); its parameters are ``is_expert`` Megatron-core linears (``allreduce``
False under EP, tensor_parallel/layers.py:1032-1090 at d98e8a64dd), so the distributed
optimizer splits their states over expert data parallel, d c t / (e t_e).

Hugging Face PEFT (v0.20.0) on transformers 5.25.0: the routed experts are fused 3-D
parameters, gate_up_proj [E, 2f, h] and down_proj [E, h, f]; PEFT's v5 target conversion
(utils/transformers_weight_conversion.py:332-482) maps gate + up to the parameter gate_up_proj
at rank 2r and down to down_proj at rank r, and ParamWrapper builds lora_A (in -> r E) and
lora_B (r E -> out): E r (in + out) per fused matrix.

The two PEFT oracles at the end skip without ``peft``; they were run (and passed) with PEFT
v0.20.0's and accelerate v1.14.0's sources (``git archive`` of their tags) on PYTHONPATH over
transformers 5.25.0.  The same run showed PEFT building no adapter on a tiny GPT-OSS's experts
(gate/up/down name no module there) nor on a tiny DeepSeek-V3's dense-layer and shared-expert
MLPs (the conversion moves gate/up/down to the routed experts' parameters): the two cases
memsym refuses below rather than count.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.job import job as make_job
from memsym.model import lora_layer_adapters, lora_parameter_count, preset
from memsym.readers.bridge_peft import recipe_peft
from memsym.symbols import N_a, N_ae, N_q, N_u
from memsym.training.model_states import stage_counts

ALL = ("q", "k", "v", "o", "gate", "up", "down")

# Qwen3-30B-A3B (config.json): h 2048, 32 heads and 4 groups of 128 (q 4096, kv 512),
# moe_intermediate_size 768, 128 experts, 48 layers, every layer MoE.
QH, QQ, QKV, QF, QE, QL = 2048, 4096, 512, 768, 128, 48
# Mixtral 8x7B (config.json): h 4096, 32 heads and 8 groups of 128 (q 4096, kv 1024),
# intermediate_size 14336, 8 experts, 32 layers, every layer MoE.
MH, MQ, MKV, MF, ME, ML = 4096, 4096, 1024, 14336, 8, 32


def test_qwen3_30b_a3b_bridge_default_by_hand():
    """r = 8 on Bridge's four modules: linear_qkv 8 (2048 + 4096 + 2 * 512) = 57344,
    linear_proj 8 (4096 + 2048) = 49152 (TP-split); the experts' shared adapters
    linear_fc1 8 (2048 + 2 * 768) = 28672 and linear_fc2 8 (768 + 2048) = 22528 (one per layer,
    not one per expert, not the dense 6144 width)."""
    r = 8
    tp = r * (QH + QQ + 2 * QKV) + r * (QQ + QH)
    expert = r * (QH + 2 * QF) + r * (QF + QH)
    assert (tp, expert) == (106496, 51200)
    got = lora_layer_adapters(preset("qwen3-30b-a3b"), r, ALL, fused=True, moe=True)
    assert got == {"tp": tp, "expert": expert, "experts": 0}
    assert lora_parameter_count(preset("qwen3-30b-a3b"), r, "all", fused=True) \
        == QL * (tp + expert) == 7_569_408


def test_qwen3_30b_a3b_peft_per_expert_by_hand():
    """r = 8 under PEFT: q 8 (2048 + 4096), k and v 8 (2048 + 512), o 8 (4096 + 2048) = 139264;
    each of the 128 experts: gate_up_proj at rank 16, 16 (2048 + 2 * 768) = 57344, and
    down_proj 8 (768 + 2048) = 22528: 128 * 79872 = 10223616 per layer."""
    r = 8
    tp = r * (QH + QQ) * 2 + 2 * r * (QH + QKV)
    experts = QE * (2 * r * (QH + 2 * QF) + r * (QF + QH))
    assert (tp, experts) == (139264, 10_223_616)
    assert lora_layer_adapters(preset("qwen3-30b-a3b"), r, ALL, moe=True) \
        == {"tp": tp, "expert": 0, "experts": experts}
    assert lora_parameter_count(preset("qwen3-30b-a3b"), r, ALL) == QL * (tp + experts) \
        == 497_418_240


def test_mixtral_8x7b_both_frameworks_by_hand():
    """r = 8.  Bridge: linear_qkv 8 (4096 + 4096 + 2048) = 81920, linear_proj 8 * 8192 =
    65536; shared expert adapters 8 (4096 + 2 * 14336) = 262144 and 8 (14336 + 4096) = 147456.
    PEFT: attention 8 (8192 + 5120 + 5120 + 8192) = 212992; 8 experts of
    16 (4096 + 28672) + 8 (14336 + 4096) = 671744."""
    r, x = 8, preset("mixtral-8x7b")
    bridge = {"tp": r * (MH + MQ + 2 * MKV) + r * (MQ + MH),
              "expert": r * (MH + 2 * MF) + r * (MF + MH), "experts": 0}
    peft = {"tp": r * (2 * (MH + MQ) + 2 * (MH + MKV)), "expert": 0,
            "experts": ME * (2 * r * (MH + 2 * MF) + r * (MF + MH))}
    assert (bridge["tp"], bridge["expert"], peft["tp"], peft["experts"]) \
        == (147456, 409600, 212992, 5_373_952)
    assert lora_layer_adapters(x, r, ALL, fused=True, moe=True) == bridge
    assert lora_layer_adapters(x, r, ALL, moe=True) == peft
    assert lora_parameter_count(x, r, ALL, fused=True) == ML * 557056 == 17_825_792
    assert lora_parameter_count(x, r, ALL) == ML * (212992 + 5_373_952) == 178_782_208


def test_per_gpu_counts_after_ep_and_per_stage():
    """Mixtral under Bridge at t = 2, e = 4, t_e = 1, p = 2 (16 layers a stage), r = 8:
    N_a = 16 * 147456 / 2 (TP-split), N_ae = 16 * 409600 / 1 (whole on each EP rank: not
    divided by e).  Under PEFT (DeepSpeed, t = e = 1) the per-expert adapters are all there."""
    j = make_job("mixtral-8x7b", tp=2, pp=2, ep=4, etp=1, world_size=16, finetune="lora",
                 lora_rank=8, lora_targets=ALL, framework="megatron", sequence_parallel=True)
    for stage in (0, 1):
        c = stage_counts(j, stage)
        assert (c[N_a], c[N_ae]) == (16 * 147456 // 2, 16 * 409600)
    j = make_job("mixtral-8x7b", world_size=8, finetune="lora", lora_rank=8, lora_targets=ALL,
                 framework="deepspeed")
    c = stage_counts(j, 0)
    assert (c[N_a], c[N_ae]) == (ML * (212992 + 5_373_952), 0)


def test_qlora_keeps_transformers_5_fused_experts_unquantized():
    """bitsandbytes replaces nn.Linear modules only (transformers 5.25.0
    integrations/bitsandbytes.py:189; bitsandbytes issue 1849): Mixtral's fused experts,
    32 layers x 8 experts x 3 x 4096 x 14336 = 45097156608 weights, stay bf16 (N_u); N_q is
    the attention's linear weights, 32 x (4096 (4096 + 2 * 1024) + 4096 * 4096)."""
    j = make_job("mixtral-8x7b", world_size=8, finetune="qlora", framework="deepspeed")
    c = stage_counts(j, 0)
    assert c[N_q] == ML * (MH * (MQ + 2 * MKV) + MQ * MH) == 1_342_177_280
    # N_u: the experts, the untied embedding and output layer 2 x 32000 x 4096, the norms
    # (2 x 4096 a layer and the final 4096) and the routers 32 x 8 x 4096
    experts = ML * ME * 3 * MH * MF
    assert experts == 45_097_156_608
    assert c[N_u] == experts + 2 * 32000 * MH + (2 * ML + 1) * MH + ML * ME * MH \
        == 45_360_615_424


def test_dense_layers_and_shared_experts_keep_their_widths():
    """Bridge on a model whose odd layers are dense (moe_layer_freq 2) with a shared expert
    of 1024: a dense layer's linear_fc1/fc2 have the dense 6144 width, an MoE layer's shared
    experts (``mlp.shared_experts.linear_fc1``, not an expert linear) their 1024, TP-split."""
    x = replace(preset("qwen3-30b-a3b"), moe_layer_freq=2, moe_shared_expert_intermediate_size=1024)
    r, f, fs = 4, 6144, 1024
    attention = r * (QH + QQ + 2 * QKV) + r * (QQ + QH)
    dense = lora_layer_adapters(x, r, ALL, fused=True, moe=False)
    moe = lora_layer_adapters(x, r, ALL, fused=True, moe=True)
    assert dense == {"tp": attention + r * (QH + 2 * f) + r * (f + QH), "expert": 0, "experts": 0}
    assert moe == {"tp": attention + r * (QH + 2 * fs) + r * (fs + QH),
                   "expert": r * (QH + 2 * QF) + r * (QF + QH), "experts": 0}
    assert lora_parameter_count(x, r, ALL, fused=True) \
        == 24 * sum(dense.values()) + 24 * sum(moe.values())


def test_canonical_lora_splits_dense_fc1_not_the_grouped_experts():
    """q and v alone need CanonicalLoRA (a part of linear_qkv), which splits a dense linear_fc1
    into gate and up adapters (canonical_lora.py:396-403) but keeps the grouped experts'
    linear_fc1 whole (``_should_treat_linear_fc1_as_unfused``, canonical_lora.py:43-46)."""
    x, r, f = preset("qwen3-30b-a3b"), 2, 6144
    targets = ("q", "v", "gate", "up", "down")
    attention = r * (QH + QQ) + r * (QH + QKV)
    assert lora_layer_adapters(x, r, targets, fused=True)["tp"] \
        == attention + 2 * r * (QH + f) + r * (f + QH)
    assert lora_layer_adapters(x, r, targets, fused=True, moe=True)["expert"] \
        == r * (QH + 2 * QF) + r * (QF + QH)


def test_cli_adapter_bytes_by_hand(capsys):
    """memsym's default r = 16, t = 4, e = 4, t_e = t = 4 (Megatron-core's default
    expert_tensor_parallel_size), d = 16 / 4 = 4, bf16_mixed.  Per layer: q and v
    (CanonicalLoRA) 16 (2048 + 4096) + 16 (2048 + 512) = 139264 TP-split; the experts' shared
    linear_fc1 16 (2048 + 1536) and linear_fc2 16 (768 + 2048) = 102400, split over t_e.
    Per GPU: N_a = 48 * 139264 / 4 = 1671168, N_ae = 48 * 102400 / 4 = 1228800.
    adapter weights bf16: 2 (N_a + N_ae); fp32 gradient buffer: 4 (N_a + N_ae); fp32 main copy
    and Adam moments, 12 bytes, split over d = 4 for N_a and over expert data parallel
    d t / (e t_e) = 1 for N_ae."""
    n_a, n_ae = 48 * 139264 // 4, 48 * 102400 // 4
    assert (n_a, n_ae) == (1_671_168, 1_228_800)
    code = main(["estimate", "qwen3-30b-a3b", "--finetune", "lora", "--lora-targets",
                 "q,v,gate,up,down", "--tp", "4", "--ep", "4", "--sequence-parallel",
                 "--world-size", "16", "--gpu", "h100-80gb", "--framework", "megatron", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    got = json.loads(out)["bytes"]
    assert got["adapter_weights"] == 2 * (n_a + n_ae) == 5_799_936
    assert got["gradients"] == 4 * (n_a + n_ae)
    assert got["optimizer"] == 12 * n_a // 4 + 12 * n_ae == 19_759_104


def test_deepseek_v3_bridge_mlp_by_hand_with_its_mtp_layer():
    """DeepSeek-V3 (h 7168, dense ffn 18432 on the first 3 layers, 58 MoE layers of 256
    experts of 2048 and one shared expert of 2048, one MTP layer of the MoE kind) at r = 8 on
    linear_fc1 and linear_fc2.  Dense layer: 8 (7168 + 2 * 18432) + 8 (18432 + 7168) = 557056;
    MoE layer: shared experts 8 (7168 + 4096) + 8 (2048 + 7168) = 163840 TP-split, and the same
    163840 in the grouped experts' shared adapters.  Bridge's matcher adapts the MTP layer's
    linears too: one more MoE layer's worth, on the stage holding MTP (here the only one)."""
    r, h, f, fe = 8, 7168, 18432, 2048
    dense = r * (h + 2 * f) + r * (f + h)
    moe = r * (h + 2 * fe) + r * (fe + h)
    assert (dense, moe) == (557056, 163840)
    x = preset("deepseek-v3")
    assert lora_parameter_count(x, r, ("gate", "up", "down"), fused=True) \
        == 3 * dense + 58 * 2 * moe == 20_676_608
    j = make_job("deepseek-v3", ep=8, etp=1, world_size=8, finetune="lora", lora_rank=r,
                 lora_targets=("gate", "up", "down"), framework="megatron")
    c = stage_counts(j, 0)
    assert (c[N_a], c[N_ae]) == (3 * dense + 59 * moe, 59 * moe)


@pytest.mark.parametrize("targets, fused, words", [
    (("q", "v"), True, "MLA"),                       # DeepSeek-V3's attention is MLA
    (("gate", "up", "down"), False, "shared-expert"),
])
def test_deepseek_v3_refusals_in_one_line(targets, fused, words):
    with pytest.raises(InvalidValueError) as err:
        lora_parameter_count(preset("deepseek-v3"), 8, targets, fused=fused)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_peft_experts_outside_the_converted_types_are_refused():
    """GPT-OSS (model_type gpt_oss) is not among the types PEFT 0.20.0's v5 conversion
    handles: its gate/up/down targets name no module of its fused experts."""
    with pytest.raises(InvalidValueError, match="gpt_oss"):
        lora_parameter_count(preset("gpt-oss-120b"), 8, ("q", "gate", "up", "down"))
    assert lora_parameter_count(preset("gpt-oss-120b"), 8, ("q", "v")) > 0


def test_peft_gate_without_up_is_refused():
    with pytest.raises(InvalidValueError, match="gate and up"):
        lora_parameter_count(preset("qwen3-30b-a3b"), 8, ("q", "gate"))


@pytest.mark.parametrize("key, value", [("peft.share_expert_adapters", False),
                                        ("peft.normalize_moe_lora", True),
                                        ("peft.experts_shared_outer_loras", True)])
def test_bridge_moe_switches_refused_naming_the_key(key, value):
    with pytest.raises(InvalidValueError, match=key):
        recipe_peft({"peft": "LoRA", key: value}, preset("qwen3-30b-a3b"), {}, [])


def _tiny_qwen3_moe():
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers < 5 builds nn.Linear experts")
    return transformers.Qwen3MoeConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[],
        tie_word_embeddings=False)


def test_transformers_5_fuses_the_experts():
    """transformers 5's Qwen3-MoE experts are two 3-D parameters, no nn.Linear (the shapes
    the PEFT count above is built on)."""
    torch = pytest.importorskip("torch")
    cfg = _tiny_qwen3_moe()
    from transformers import Qwen3MoeForCausalLM
    with torch.device("meta"):
        model = Qwen3MoeForCausalLM(cfg)
    experts = model.model.layers[0].mlp.experts
    assert tuple(experts.gate_up_proj.shape) == (4, 2 * 32, 64)
    assert tuple(experts.down_proj.shape) == (4, 64, 32)
    assert not any(isinstance(m, torch.nn.Linear) for m in experts.modules())


def _peft_trainable(peft, model, targets) -> int:
    """PEFT's own count: the parameters left trainable once LoRA r = 2 wraps ``targets``."""
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=2, lora_alpha=4, target_modules=targets))
    return sum(p.numel() for p in wrapped.parameters() if p.requires_grad)


def _tiny_moe_arch(ffn: int, model_type: str):
    """memsym's description of the tiny MoE models below (2 layers, h 64, 4 heads of 16 over 2
    KV groups, 4 experts of width 32, top-2; ``ffn`` the dense width the config names)."""
    from memsym.model import Architecture
    return Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                        kv_channels=16, ffn_hidden_size=ffn, swiglu=True, normalization="RMSNorm",
                        vocab_size=128, position_embedding_type="rope", add_bias_linear=False,
                        num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=32,
                        extra={"hf_model_type": model_type})


@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed")
def test_peft_oracle_on_a_tiny_qwen3_moe():
    """PEFT's own trainable count on a meta-device model equals memsym's."""
    torch = pytest.importorskip("torch")
    import peft
    from transformers import Qwen3MoeForCausalLM
    cfg = _tiny_qwen3_moe()
    with torch.device("meta"):
        model = Qwen3MoeForCausalLM(cfg)
    trainable = _peft_trainable(peft, model, ["q_proj", "v_proj", "gate_proj", "up_proj",
                                              "down_proj"])
    x = _tiny_moe_arch(96, "qwen3_moe")
    assert trainable == lora_parameter_count(x, 2, ("q", "v", "gate", "up", "down"))


@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed")
def test_peft_oracle_on_a_tiny_mixtral():
    """Mixtral's v4 names w1 (gate), w3 (up), w2 (down), which PEFT's Mixtral conversion maps
    to the fused gate_up_proj and down_proj: PEFT's trainable count equals memsym's."""
    torch = pytest.importorskip("torch")
    import peft
    import transformers
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers < 5 builds nn.Linear experts")
    with torch.device("meta"):
        model = transformers.MixtralForCausalLM(transformers.MixtralConfig(
            vocab_size=128, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
            num_experts_per_tok=2))
    trainable = _peft_trainable(peft, model, ["q_proj", "k_proj", "v_proj", "o_proj", "w1",
                                              "w3", "w2"])
    assert trainable == lora_parameter_count(_tiny_moe_arch(32, "mixtral"), 2, "all")
