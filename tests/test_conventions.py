"""Framework parity: memsym's megatron-lm / megatron-bridge conventions, to the byte.

Each worked case is computed twice, independently:

* by memsym (memsym/conventions/: SymPy terms in the layout symbols, evaluated exactly), and
* by tests/framework_ports.py, a literal line-by-line port of Megatron-LM core 0.19
  ``theoretical_memory_usage.py`` and Megatron-Bridge 0.6 ``estimate_training_memory`` run on
  exact Fractions,

and the two must agree exactly.  A few cases are also worked out by hand below (the arithmetic
is written out in the test, from the formulas in shared/guide/MEGATRON-ESTIMATORS.md).

Architectures are written out from the Hugging Face config.json files (GPT-3 from Brown et al.
2020 Table 2.1), not taken from memsym's presets, so that this file does not depend on
memsym's own parameter counting.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy as sp

import framework_ports as port
from memsym.conventions import (
    CONVENTION_NAMES, convention_breakdown, megatron_bridge, megatron_lm,
    megatron_bytes_per_parameter, padded_vocab,
)
from memsym.errors import DivisibilityError, InvalidValueError, UnknownNameError
from memsym.model import Architecture
from memsym.symbols import d

# --- architectures (Hugging Face config.json values) ----------------------------------------------
GPT3_175B = Architecture(name="gpt3-175b", num_layers=96, hidden_size=12288,
                         num_attention_heads=96, vocab_size=50257)  # LayerNorm, GeLU 4h, tied
LLAMA = dict(swiglu=True, normalization="RMSNorm", untie_embeddings_and_output_weights=True,
             add_bias_linear=False, position_embedding_type="rope")
LLAMA2_7B = Architecture(name="llama2-7b", num_layers=32, hidden_size=4096, num_attention_heads=32,
                         ffn_hidden_size=11008, vocab_size=32000, **LLAMA)
LLAMA3_70B = Architecture(name="llama3-70b", num_layers=80, hidden_size=8192,
                          num_attention_heads=64, num_query_groups=8, ffn_hidden_size=28672,
                          vocab_size=128256, **LLAMA)
MIXTRAL_8X7B = Architecture(name="mixtral-8x7b", num_layers=32, hidden_size=4096,
                            num_attention_heads=32, num_query_groups=8, ffn_hidden_size=14336,
                            vocab_size=32000, num_experts=8, moe_router_topk=2,
                            moe_ffn_hidden_size=14336, **LLAMA)
DEEPSEEK_V3 = Architecture(
    name="deepseek-v3", num_layers=61, hidden_size=7168, num_attention_heads=128,
    ffn_hidden_size=18432, vocab_size=129280, num_experts=256, moe_router_topk=8,
    moe_ffn_hidden_size=2048, moe_shared_expert_intermediate_size=2048,
    moe_layer_freq=(0,) * 3 + (1,) * 58, multi_latent_attention=True, q_lora_rank=1536,
    kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128, kv_channels=128,
    mtp_num_layers=1, **LLAMA)

# --- worked cases -----------------------------------------------------------------------------------
# (id, arch, layout, training).  Together they cover TP/PP/VPP/CP/EP/ETP, the distributed
# optimizer on and off, SP + selective (path A) against no/full recompute and SP off (path B),
# fewer microbatches than stages, MLA + MTP + a dense/MoE layer pattern, and (Bridge) uneven PP.
SEL = dict(sequence_parallel=True, recompute="selective")
CASES = [
    # GPT-3 175B on 1024 GPUs, Megatron's reference recipe shape: path A, no m given.
    ("gpt3-t8p8d16-sp-sel", GPT3_175B, dict(t=8, p=8, d=16), dict(s=2048, b=1, **SEL)),
    # Interleaved schedule, 96/(16*2) = 3 layers per chunk, plain DDP (18 B/param).
    ("gpt3-t8p16v2-ddp", GPT3_175B, dict(t=8, p=16, v=2, d=4),
     dict(s=2048, b=1, m=64, sharding="ddp", **SEL)),
    # Single-node data parallel: t = 1 switches SP off -> path B with the output-layer term.
    ("llama2-7b-d8-norecompute", LLAMA2_7B, dict(t=1, p=1, d=8),
     dict(s=4096, b=1, recompute="none")),
    # One microbatch on two stages: min(1, m/p) = 1/2.
    ("llama2-7b-t2p2d2-m1", LLAMA2_7B, dict(t=2, p=2, d=2), dict(s=4096, b=2, m=1, **SEL)),
    # Llama-3 70B, the hand-checked layout below, m = 8 >= p.
    ("llama3-70b-t4p4d2", LLAMA3_70B, dict(t=4, p=4, d=2), dict(s=8192, b=1, m=8, **SEL)),
    # CP = 2 with full recompute and VPP: path B; Megatron-LM ignores c, Bridge divides by it.
    ("llama3-70b-t8p4v5c2d2-full", LLAMA3_70B, dict(t=8, p=4, v=5, c=2, d=2),
     dict(s=16384, b=1, recompute="full", sequence_parallel=True)),
    # SP on but no recompute -> path B.
    ("llama3-70b-t8p2d4-sp-none", LLAMA3_70B, dict(t=8, p=2, d=4),
     dict(s=8192, b=1, recompute="none", sequence_parallel=True)),
    # Mixtral: EP 8 with ETP 1 over 64 GPUs (expert DP = 64/(1*8*4) = 2).
    ("mixtral-t2p4e8te1d8", MIXTRAL_8X7B, dict(t=2, p=4, e=8, t_e=1, d=8),
     dict(s=4096, b=1, m=16, **SEL)),
    # Mixtral with CP and ETP = 2, p = 1 (output-layer term), distributed optimizer.
    ("mixtral-t4c2e4te2d4", MIXTRAL_8X7B, dict(t=4, p=1, c=2, e=4, t_e=2, d=4),
     dict(s=8192, b=1, **SEL)),
    # Mixtral, DDP, ETP left unset (resolves to TP), SP off (t = 1: MoE with t > 1 needs SP,
    # memsym.rules moe-tp-sp) -> path B.
    ("mixtral-t1p2e2-ddp", MIXTRAL_8X7B, dict(t=1, p=2, e=2, d=4),
     dict(s=4096, b=1, sharding="ddp", recompute="selective")),
    # DeepSeek-V3 as trained: PP 16, EP 64 on 2048 GPUs; MLA, MTP, 3 dense + 58 MoE layers.
    # 16 stages cannot split 61 layers evenly (memsym.rules pp-layers): the end stages hold
    # 3 and 2 (Megatron's --decoder-first/last-pipeline-num-layers), 14 x 4 in between.
    ("deepseek-v3-p16e64d128", DEEPSEEK_V3, dict(t=1, p=16, e=64, t_e=1, d=128,
                                                 first_stage_layers=3, last_stage_layers=2),
     dict(s=4096, b=1, m=4, recompute="full")),
    # DeepSeek-V3 with TP 2 (SP + selective), EP 32 on 1024 GPUs; end stages of 7 and 6
    # layers, 6 x 8 in between (no VPP: 61 layers cannot give every stage an even count).
    ("deepseek-v3-t2p8e32d64", DEEPSEEK_V3, dict(t=2, p=8, e=32, t_e=1, d=64,
                                                 first_stage_layers=7, last_stage_layers=6),
     dict(s=4096, b=1, m=32, **SEL)),
]
CASE_IDS = [case[0] for case in CASES]

# Bridge-only layouts: uneven pipeline stages (with and without VPP) and a padded vocabulary.
BRIDGE_EXTRA = [
    ("deepseek-v3-uneven-last1", DEEPSEEK_V3,
     dict(t=1, p=16, e=64, t_e=1, d=128, last_stage_layers=1), dict(s=4096, b=1, m=32), False),
    ("llama3-70b-uneven-vpp", LLAMA3_70B,
     dict(t=8, p=4, v=2, d=2, first_stage_layers=18, last_stage_layers=22),
     dict(s=8192, b=1, m=8, **SEL), False),
    ("llama3-70b-uneven-first", LLAMA3_70B, dict(t=4, p=4, d=2, first_stage_layers=14),
     dict(s=8192, b=1, **SEL), True),
    ("gpt3-padded", GPT3_175B, dict(t=8, p=1, d=128), dict(s=2048, b=1, **SEL), True),
]


def exact(x):
    """A port result as a SymPy Rational; refuses floats (the comparison must be exact)."""
    assert isinstance(x, (int, Fraction)), f"port produced {type(x).__name__} {x!r}"
    x = Fraction(x)
    return sp.Rational(x.numerator, x.denominator)


def _port_kwargs(layout, training):
    kw = {k: layout[k] for k in ("t", "p", "d", "c", "e", "t_e", "v") if k in layout}
    kw.update(s=training["s"], b=training["b"])
    kw["distributed_optimizer"] = training.get("sharding", "distributed-optimizer") != "ddp"
    return kw


def lm_port(arch, layout, training):
    kw = _port_kwargs(layout, training)
    args = port.lm_args(arch, **kw, sequence_parallel=training.get("sequence_parallel", False),
                        recompute=training.get("recompute", "selective"))
    m = training.get("m")
    wo, act = port.lm_report_theoretical_memory_bytes(args, None if m is None else Fraction(m))
    return exact(wo), exact(act)


def bridge_port(arch, layout, training, pad=False):
    kw = _port_kwargs(layout, training)
    cfg = port.bridge_config(arch, **kw, should_pad_vocab=pad,
                             first_stage_layers=layout.get("first_stage_layers"),
                             last_stage_layers=layout.get("last_stage_layers"))
    m = training.get("m")
    dense, routed, act = port.bridge_estimate_training_memory(
        cfg, None if m is None else Fraction(m))
    return exact(dense), exact(routed) if routed is not None else sp.Integer(0), exact(act)


# --- parity with the literal ports ---------------------------------------------------------------
@pytest.mark.parametrize("name,arch,layout,training", CASES, ids=CASE_IDS)
def test_megatron_lm_matches_port_to_the_byte(name, arch, layout, training):
    out = convention_breakdown("megatron-lm", arch, layout, training)
    wo, act = lm_port(arch, layout, training)
    assert out["weights_and_optimizer"] == wo
    assert out["activations"] == act
    assert out["total"] == wo + act


@pytest.mark.parametrize("name,arch,layout,training", CASES, ids=CASE_IDS)
def test_megatron_bridge_matches_port_to_the_byte(name, arch, layout, training):
    out = convention_breakdown("megatron-bridge", arch, layout, training)
    dense, routed, act = bridge_port(arch, layout, training)
    assert out["weights_and_optimizer_dense"] == dense
    assert out["weights_and_optimizer_experts"] == routed
    assert out["activations"] == act
    assert out["total"] == dense + routed + act


@pytest.mark.parametrize("name,arch,layout,training,pad", BRIDGE_EXTRA,
                         ids=[c[0] for c in BRIDGE_EXTRA])
def test_megatron_bridge_uneven_and_padded_match_port(name, arch, layout, training, pad):
    out = convention_breakdown("megatron-bridge", arch, layout, training, should_pad_vocab=pad)
    dense, routed, act = bridge_port(arch, layout, training, pad)
    assert (out["weights_and_optimizer_dense"], out["weights_and_optimizer_experts"],
            out["activations"]) == (dense, routed, act)


def test_paths_taken():
    """Path A exactly when SP and selective recompute are both on (and t > 1)."""
    paths = {name: convention_breakdown("megatron-lm", arch, lay, tr)["path"]
             for name, arch, lay, tr in CASES}
    assert paths["gpt3-t8p8d16-sp-sel"] == "A"
    assert paths["llama2-7b-d8-norecompute"] == "B"
    assert paths["llama3-70b-t8p4v5c2d2-full"] == "B"
    assert paths["llama3-70b-t8p2d4-sp-none"] == "B"
    assert paths["mixtral-t1p2e2-ddp"] == "B"          # selective but SP off
    sp_t1 = convention_breakdown("megatron-lm", LLAMA2_7B, dict(t=1), dict(s=4096, b=1, **SEL))
    assert sp_t1["path"] == "B"                         # Megatron turns SP off at t = 1
    assert any("switched off" in a for a in sp_t1["assumptions"])


# --- hand arithmetic ----------------------------------------------------------------------------
def test_hand_llama3_70b_weights_and_optimizer():
    """Llama-3 70B, TP 4, PP 4, DP 2 (32 GPUs), distributed optimizer, Megatron-LM 0.19.

    padded V = ceil(128256 / 512) * 512 = 251 * 512 = 128512
    attention 2 d h (a + g) = 2*128*8192*72 = 150,994,944; SwiGLU MLP 3 h f = 704,643,072
    T = [(150,994,944 + 704,643,072) * 80/4 + 8192*128512] / 4
      = [17,112,760,320 + 1,052,770,304] / 4 = 4,541,382,656
    R = (2*1*8192 * 80 + 8192) / 4 = 1,318,912 / 4 = 329,728       (RMSNorm: eta = 1)
    beta(2) = 6 + 12/2 = 12  ->  (T + R) * 12 = 54,500,548,608 bytes (50.76 GiB)
    """
    V_pad = -(-128256 // 512) * 512
    assert V_pad == 128512
    attn, mlp = 2 * 128 * 8192 * (64 + 8), 3 * 8192 * 28672
    T = ((attn + mlp) * 80 // 4 + 8192 * V_pad) // 4
    R = (2 * 8192 * 80 + 8192) // 4
    assert (T, R) == (4_541_382_656, 329_728)
    expected = (T + R) * 12
    assert expected == 54_500_548_608
    out = convention_breakdown("megatron-lm", LLAMA3_70B, dict(t=4, p=4, d=2),
                               dict(s=8192, b=1, **SEL))
    assert out["weights_and_optimizer"] == expected
    assert out["parameters"]["padded_vocab"] == V_pad
    # Without the distributed optimizer: 18 bytes per parameter.
    ddp = convention_breakdown("megatron-lm", LLAMA3_70B, dict(t=4, p=4, d=2),
                               dict(s=8192, b=1, sharding="ddp", **SEL))
    assert ddp["weights_and_optimizer"] == (T + R) * 18


def test_hand_gpt3_path_a_activations():
    """GPT-3 175B, t = 8, p = 8, s = 2048, b = 1, SP + selective, no m (offline report).

    A = [s b h (18 + 4*4) * L + 8 s b p + s b h p] / t    (f = 4h: the paper's 34 s b h / t)
      = [25,165,824 * 34 * 96 + 8*2048*8 + 25,165,824*8] / 8
      = [82,141,249,536 + 131,072 + 201,326,592] / 8 = 10,292,838,400 bytes
    """
    sbh = 2048 * 1 * 12288
    assert sbh == 25_165_824
    expected = (sbh * 34 * 96 + 8 * 2048 * 8 + sbh * 8) // 8
    assert expected == 10_292_838_400
    out = convention_breakdown("megatron-lm", GPT3_175B, dict(t=8, p=8, d=16),
                               dict(s=2048, b=1, **SEL))
    assert out["activations"] == expected


def test_hand_llama2_7b_bridge():
    """Llama-2 7B on 8 GPUs (t = p = 1, d = 8), Megatron-Bridge, unpadded vocabulary 32000.

    per layer: attention 2*128*4096*(32+32) = 67,108,864, norms 4h = 16,384,
               MLP 3 h f = 3*4096*11008 = 135,266,304             -> 202,391,552
    dense = 32 * 202,391,552 + 2h = 6,476,529,664 + 8,192 = 6,476,537,856
    embeddings (untied, p = 1): 2 * 4096 * 32000 = 262,144,000
    N_d = 6,738,681,856;  beta(8) = 6 + 12/8 = 15/2  ->  50,540,113,920 bytes
    """
    layer = 2 * 128 * 4096 * 64 + 4 * 4096 + 3 * 4096 * 11008
    assert layer == 202_391_552
    n_d = 32 * layer + 2 * 4096 + 2 * 4096 * 32000
    assert n_d == 6_738_681_856
    out = convention_breakdown("megatron-bridge", LLAMA2_7B, dict(t=1, p=1, d=8),
                               dict(s=4096, b=1))
    assert out["weights_and_optimizer_dense"] == sp.Rational(15, 2) * n_d == 50_540_113_920


def test_hand_mixtral_expert_bucket():
    """Mixtral 8x7B, t = 2, p = 4, e = 8, t_e = 1, 64 GPUs (d = 8), distributed optimizer.

    routed experts per layer 2 * 3/2 * h * f_e * E = 3*4096*14336*8 = 1,409,286,144
    X = 1,409,286,144 * 32/4 / (1*8) = 1,409,286,144;  expert DP = 64 // (1*8*4) = 2
    beta(2) = 12  ->  16,911,433,728 bytes
    """
    per_layer = 3 * 4096 * 14336 * 8
    X = per_layer * 32 // 4 // 8
    assert X == 1_409_286_144
    res = megatron_lm(MIXTRAL_8X7B, dict(t=2, p=4, e=8, t_e=1, d=8), dict(s=4096, b=1, **SEL))
    assert res.breakdown()["weights_and_optimizer_experts"] == X * 12 == 16_911_433_728


def test_hand_deepseek_v3_mla_attention():
    """Megatron-LM's MLA count equals DeepSeek-V3's real per-layer attention parameters.

    q: 1536*(7168 + 128*(128+64) + 1) = 48,760,320; kv: 512*(7168 + 128*(128+128) + 1)
    = 20,447,744; rope key 7168*64 = 458,752; output 128*128*7168 = 117,440,512 -> 187,107,328.
    Bridge has no MLA branch: 2 d h (a + g) = 2*128*7168*256 = 469,762,048.
    """
    q = 1536 * (7168 + 128 * 192 + 1)
    kv = 512 * (7168 + 128 * 256 + 1)
    assert q + kv + 7168 * 64 + 128 * 128 * 7168 == 187_107_328
    lay = dict(p=16, first_stage_layers=3, last_stage_layers=2)   # 61 = 3 + 14 x 4 + 2
    lm = megatron_lm(DEEPSEEK_V3, lay, dict(s=4096, b=1))
    br = megatron_bridge(DEEPSEEK_V3, lay, dict(s=4096, b=1))
    assert lm.parameters["attention_per_layer"] == 187_107_328
    assert br.parameters["attention_per_layer"] == 2 * 128 * 7168 * 256


# --- structural properties of the conventions ----------------------------------------------------
def test_bridge_equals_path_a_for_dense_models_without_cp():
    """Guide §3.4: for a dense model with c = 1 Bridge's activation is numerically path A."""
    lay, tr = dict(t=8, p=1, d=4), dict(s=4096, b=1, **SEL)
    lm = convention_breakdown("megatron-lm", LLAMA3_70B, lay, tr)
    br = convention_breakdown("megatron-bridge", LLAMA3_70B, lay, tr, should_pad_vocab=True)
    assert lm["path"] == "A" and lm["activations"] == br["activations"]


def test_cp_quirks():
    """Megatron-LM ignores c in activations; Bridge divides by it and shards over d*c."""
    lay1, lay2 = dict(t=8, p=4, d=4), dict(t=8, p=4, c=2, d=2)
    tr = dict(s=8192, b=1, **SEL)
    lm1, lm2 = (convention_breakdown("megatron-lm", LLAMA3_70B, x, tr) for x in (lay1, lay2))
    br1, br2 = (convention_breakdown("megatron-bridge", LLAMA3_70B, x, tr) for x in (lay1, lay2))
    assert lm2["activations"] == lm1["activations"]
    assert br2["activations"] * 2 == br1["activations"]
    # Bridge: d*c = 4 in both layouts -> same optimizer shard; Megatron-LM: d = 2 < 4.
    assert br2["weights_and_optimizer"] == br1["weights_and_optimizer"]
    # by hand: Megatron-LM prices (6 + 12/d) bytes per parameter with the distributed
    # optimizer, on the same t = 8, p = 4 parameter shard: (6 + 12/2) / (6 + 12/4) = 12/9 = 4/3
    assert lm2["weights_and_optimizer"] / lm1["weights_and_optimizer"] == sp.Rational(4, 3)
    assert any("context parallelism is ignored" in a for a in lm2["assumptions"])


def test_total_is_symbolic_in_d_and_valid_across_d():
    """The returned Total is a function of d: evaluating it at another d equals the port there."""
    lay, tr = dict(t=4, p=4, d=2), dict(s=8192, b=1, m=8, **SEL)
    res = megatron_lm(LLAMA3_70B, lay, tr)
    assert d in res.total.free_symbols
    for other in (1, 4, 16):
        vals = {**res.values, d: sp.Integer(other)}
        wo, act = lm_port(LLAMA3_70B, {**lay, "d": other}, tr)
        assert res.total.evaluate(vals) == wo + act
    assert res.total.sensitivity("d", res.values) < 0   # more DP ranks, fewer optimizer bytes


def test_bytes_per_parameter_forms():
    assert megatron_bytes_per_parameter(False) == 18
    assert megatron_bytes_per_parameter(True).subs(d, 1) == 18   # d = 1: nothing to shard
    assert sp.limit(megatron_bytes_per_parameter(True), d, sp.oo) == 6
    assert padded_vocab(50257, tp=8) == 51200 and padded_vocab(32000, tp=1) == 32000


def test_breakdown_dict_api():
    out = convention_breakdown("Megatron-LM", MIXTRAL_8X7B, dict(t=2, p=4, e=8, t_e=1, d=8),
                               dict(s=4096, b=1, m=16, **SEL))
    for key in ("weights_and_optimizer", "weights_and_optimizer_dense",
                "weights_and_optimizer_experts", "activations", "total", "bytes", "path",
                "assumptions", "parameters", "terms", "result"):
        assert key in out
    assert out["total"] == out["weights_and_optimizer"] + out["activations"]
    assert out["weights_and_optimizer"] == (out["weights_and_optimizer_dense"]
                                            + out["weights_and_optimizer_experts"])
    assert all(isinstance(v, int) for v in out["bytes"].values())
    assert out["bytes"]["total"] == sp.ceiling(out["total"])
    assert sum(out["terms"].values()) == out["total"]
    for term in out["result"].total:
        assert term.source.key in ("megatron-lm", "megatron-bridge")
    assert CONVENTION_NAMES == ("megatron-lm", "megatron-bridge")


def test_refusals():
    tr = dict(s=4096, b=1)
    with pytest.raises(UnknownNameError, match="megatron-lm"):
        convention_breakdown("megatron", LLAMA2_7B, {}, tr)
    with pytest.raises(UnknownNameError):
        megatron_lm(LLAMA2_7B, {}, tr, tensor_parallel=2)
    with pytest.raises(UnknownNameError):
        megatron_lm(LLAMA2_7B, {}, dict(tr, recompute="partial"))
    with pytest.raises(InvalidValueError, match="zero3"):
        megatron_lm(LLAMA2_7B, {}, dict(tr, sharding="zero3"))
    with pytest.raises(InvalidValueError):
        megatron_lm(LLAMA2_7B, dict(t=0), tr)
    with pytest.raises(InvalidValueError, match="sequence length"):
        megatron_lm(LLAMA2_7B, {}, dict(b=1))
    with pytest.raises(DivisibilityError):
        megatron_bridge(LLAMA3_70B, dict(p=4, first_stage_layers=15), tr)
    with pytest.raises(InvalidValueError):
        megatron_bridge(LLAMA3_70B, dict(p=1, first_stage_layers=15), tr)


def test_presets_agree_with_the_configs_written_here():
    """When memsym's presets exist, the conventions give the same bytes for them."""
    from memsym import model as models

    for name, arch in (("llama3-70b", LLAMA3_70B), ("mixtral-8x7b", MIXTRAL_8X7B),
                       ("llama2-7b", LLAMA2_7B), ("gpt3-175b", GPT3_175B)):
        # e = 2 only with experts (rule ep-experts); GPT-3's position table is 2048
        lay = dict(t=4, p=2, d=2, e=2 if arch.num_experts else 1)
        tr = dict(s=2048 if name == "gpt3-175b" else 4096, b=1, **SEL)
        for conv in CONVENTION_NAMES:
            assert (convention_breakdown(conv, models.preset(name), lay, tr)["total"]
                    == convention_breakdown(conv, arch, lay, tr)["total"]), (name, conv)


def test_accepts_memsym_layout_and_training_objects():
    """memsym.training.Layout / Training (Megatron argument names) drive the conventions too."""
    from memsym import training as training_mod

    lay = training_mod.Layout(t=4, p=4, d=2, sequence_parallel=True)
    tr = training_mod.Training(seq_length=8192, micro_batch_size=1, global_batch_size=16,
                               recompute="selective")
    out = convention_breakdown("megatron-lm", LLAMA3_70B, lay, tr)
    # m = B/(b d) = 16/(1*2) = 8, as the training loop's get_num_microbatches() returns.
    wo, act = lm_port(LLAMA3_70B, dict(t=4, p=4, d=2), dict(s=8192, b=1, m=8, **SEL))
    assert (out["weights_and_optimizer"], out["activations"]) == (wo, act)
    assert any("B/(b d) = 8" in a_ for a_ in out["assumptions"])
    br = convention_breakdown("megatron-bridge", LLAMA3_70B, lay, tr)
    dense, routed, bact = bridge_port(LLAMA3_70B, dict(t=4, p=4, d=2), dict(s=8192, b=1, m=8))
    assert (br["weights_and_optimizer_dense"], br["activations"]) == (dense, bact)


def test_names_go_through_errors_choose():
    # one matcher for user names: case and "_" for "-" are forgiven, misses suggest
    from memsym.conventions import convention_breakdown, pipeline_factor
    from memsym.symbols import p, v
    assert pipeline_factor("Interleaved") == 1 + (p - 1) / (p * v)
    with pytest.raises(UnknownNameError) as err:
        pipeline_factor("interleave")
    assert "interleaved" in err.value.suggestions
    tr = dict(s=4096, b=1)
    same = convention_breakdown("megatron-lm", LLAMA2_7B, {}, tr)["bytes"]
    assert convention_breakdown("Megatron_LM", LLAMA2_7B, {}, tr)["bytes"] == same
    assert megatron_lm(LLAMA2_7B, {}, dict(tr, recompute="Selective")).breakdown() == \
        megatron_lm(LLAMA2_7B, {}, dict(tr, recompute="selective")).breakdown()
    assert megatron_lm(LLAMA2_7B, {}, dict(tr, sharding="ZeRO1")).breakdown() == \
        megatron_lm(LLAMA2_7B, {}, dict(tr, sharding="distributed-optimizer")).breakdown()
    with pytest.raises(UnknownNameError):
        megatron_lm(LLAMA2_7B, {}, dict(tr, sharding="zero7"))   # not a sharding at all
    with pytest.raises(InvalidValueError, match="FSDP"):
        megatron_lm(LLAMA2_7B, {}, dict(tr, sharding="FSDP"))     # known, not Megatron's
