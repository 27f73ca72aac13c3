"""A hybrid model's multi-token-prediction block pattern (``mtp_layer_pattern``): read from a
Hugging Face config.json, from Megatron-LM's ``--hybrid-layer-pattern``, and priced layer by
layer in the step time.

Sources (every expected value is from them or hand arithmetic written here):

* transformers 5.25.0 ``NemotronHConfig.__post_init__`` (configuration_nemotron_h.py:189-199):
  ``mtp_layers_block_type`` (default ``["full_attention", "moe"]``); the legacy
  ``mtp_hybrid_override_pattern`` replaces only that default, one layer per character
  (``_pattern_to_list``: M linear_attention, E moe, * full_attention, - mlp).
* Megatron-LM d98e8a64dd ``megatron/core/models/hybrid/hybrid_layer_allocation.py:200-298``
  (``parse_hybrid_pattern``, ``_validate_pattern``) and ``megatron/training/arguments.py:743-923``
  (the deprecated spellings, the legacy MTP pattern joined on, the MTP depths inferred);
  ``megatron/core/transformer/multi_token_prediction.py:1199-1214`` (a hybrid MTP layer is a
  ``HybridStack`` of its pattern's layers).
* The published patterns: Megatron-LM's Nemotron 3 Super release test
  (tests/functional_tests/test_cases/nemotron/nemotron3_super_release_gb200/model_config.yaml:
  57-103, ``--hybrid-layer-pattern "...EMEMEME/*E/*E"``, ``--mtp-num-layers 2``) and
  Megatron-Bridge 067f987df0's Nemotron 3 Super recipe test
  (tests/functional_tests/test_groups/recipes/test_nemotronh_recipes_pretrain.py:72-77:
  ``"hybrid_layer_pattern": "M*E"``, ``"mtp_num_layers": 2``,
  ``"mtp_hybrid_override_pattern": "*E"``).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from bounded import run_python
from memsym import errors
from memsym.hardware import cluster_for, gpu
from memsym.model import Architecture, parameter_count, preset
from memsym.model.hf_config import from_hf_config
from memsym.readers.megatron import read_megatron_args
from memsym.readers.megatron_pattern import (HybridPattern, parse_hybrid_pattern,
                                             unified_hybrid_pattern)
from memsym.timing.gemm import shape_of
from memsym.timing.layer import layer_time
from memsym.timing.mean_layer import mean_layer
from memsym.timing.mtp import mtp_block
from memsym.timing.records import Overlap, Settings
from memsym.timing.step import step_time_grid

SUPER_MAIN = ("MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*"
              "EMEMEMEME")                                 # model_config.yaml:65, before "/"
# Nemotron 3 Super's sizes (the same model_config.yaml:57-100)
H, LAT, V, E, K, F_E, F_SH, A, G, D_H = 4096, 1024, 131072, 512, 22, 2688, 5376, 32, 2, 128


def refused(fn, *said):
    """memsym's own ValueError subclass, one line, naming what is wrong."""
    with pytest.raises(errors.MemsymError) as info:
        fn()
    msg = str(info.value)
    assert isinstance(info.value, ValueError) and "\n" not in msg, msg
    for frag in said:
        assert frag in msg, (frag, msg)


# --- Hugging Face config.json ----------------------------------------------------------------

def _nemotron_h(tmp_path, **extra):
    cfg = {"model_type": "nemotron_h", "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16, "mamba_num_heads": 4, "mamba_head_dim": 16,
           "n_groups": 2, "ssm_state_size": 8, "vocab_size": 1000, "intermediate_size": 128,
           "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
           "moe_shared_expert_intermediate_size": 32, "hybrid_override_pattern": "M*E", **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_hf_legacy_mtp_pattern_is_read(tmp_path):
    # the Bridge's Super recipe test: "M*E" with mtp_hybrid_override_pattern "*E"
    arch = from_hf_config(_nemotron_h(tmp_path, num_nextn_predict_layers=2,
                                      mtp_hybrid_override_pattern="*E"))
    assert arch.mtp_layer_pattern == "*E"
    # transformers' NemotronHForCausalLM builds no MTP layer: nothing more is counted
    assert arch.mtp_num_layers == 0
    plain = from_hf_config(_nemotron_h(tmp_path))
    assert parameter_count(arch) == parameter_count(plain)
    assert plain.mtp_layer_pattern is None


def test_hf_mtp_block_type_list_and_its_default(tmp_path):
    # an explicit list wins over the legacy pattern; a legacy-named default list
    # (["attention", "moe"] remaps to the default) lets the legacy pattern replace it
    got = from_hf_config(_nemotron_h(tmp_path, num_nextn_predict_layers=1,
                                     mtp_layers_block_type=["mamba", "mlp", "moe"],
                                     mtp_hybrid_override_pattern="*E"))
    assert got.mtp_layer_pattern == "M-E"
    got = from_hf_config(_nemotron_h(tmp_path, num_nextn_predict_layers=1,
                                     mtp_layers_block_type=["attention", "moe"],
                                     mtp_hybrid_override_pattern="M*"))
    assert got.mtp_layer_pattern == "M*"
    # neither given: transformers' default ["full_attention", "moe"]
    got = from_hf_config(_nemotron_h(tmp_path, num_nextn_predict_layers=1))
    assert got.mtp_layer_pattern == "*E"


def test_hf_bad_mtp_patterns_are_refused(tmp_path):
    refused(lambda: from_hf_config(_nemotron_h(
        tmp_path, num_nextn_predict_layers=1, mtp_hybrid_override_pattern="*X")),
        "mtp_hybrid_override_pattern")
    refused(lambda: from_hf_config(_nemotron_h(
        tmp_path, num_nextn_predict_layers=1, mtp_layers_block_type=["attention", "conv"])),
        "mtp_layers_block_type")
    # an MoE MTP layer in a model without MoE layers: no expert sizes to build it from
    refused(lambda: from_hf_config(_nemotron_h(
        tmp_path, hybrid_override_pattern="M*-", num_nextn_predict_layers=1)), "MoE")


# --- Megatron-LM's unified hybrid pattern ---------------------------------------------------

@pytest.mark.parametrize("text, want", [
    # parse_hybrid_pattern's own examples (hybrid_layer_allocation.py:221-231)
    ("M*M*", HybridPattern("M*M*", None, 0)),
    ("M*M*/MM/MM", HybridPattern("M*M*", "MM", 2)),
    ("MMMM/*M/*M/*M", HybridPattern("MMMM", "*M", 3)),
    ("M-M-|M-M*-/MM/MM", HybridPattern("M-M-|M-M*-", "MM", 2)),
    # parts after "/" all empty: no MTP (lines 252-256)
    ("M*M*//", HybridPattern("M*M*", None, 0)),
    (SUPER_MAIN + "/*E/*E", HybridPattern(SUPER_MAIN, "*E", 2)),
])
def test_megatron_pattern_grammar(text, want):
    assert parse_hybrid_pattern(text) == want


@pytest.mark.parametrize("text, said", [
    ("M*M*/MM/M*", "identical"),             # lines 258-266
    ("M*X", "'X' is not a valid layer symbol"),   # _validate_pattern, lines 288-294
    ("M*/M|M", "'|' is not a valid layer symbol"),  # no pipe in an MTP pattern
    ("M*+M", "MLA/DSA"),                      # lines 296-298
    ("MM/*D", "MLA/DSA"),
])
def test_megatron_pattern_errors(text, said):
    refused(lambda: parse_hybrid_pattern(text), said)


def test_megatron_legacy_spellings():
    # arguments.py:774-785: main + "/" + "/".join([mtp] * mtp_num_layers)
    assert unified_hybrid_pattern("M*E", None, "*E", 2) == "M*E/*E/*E"
    # a unified pattern that has its own "/" keeps it (line 779)
    assert unified_hybrid_pattern("M*E/*E", None, "M", 3) == "M*E/*E"
    # without --mtp-num-layers the legacy pattern is not joined (line 777)
    assert unified_hybrid_pattern("M*E", None, "*E", None) == "M*E"
    assert unified_hybrid_pattern(None, "M*E", None, None) == "M*E"      # lines 745-755
    refused(lambda: unified_hybrid_pattern("M*E", "M*E", None, None), "cannot both")


def _super_command(pattern=SUPER_MAIN + "/*E/*E", *more):
    # model_config.yaml:57-100 (network, MoE and MTP arguments), with a vocabulary size
    return ["--mamba-num-heads", "128", "--num-layers", "88", "--hidden-size", "4096",
            "--ffn-hidden-size", "2688", "--num-attention-heads", "32",
            "--group-query-attention", "--num-query-groups", "2", "--kv-channels", "128",
            "--hybrid-layer-pattern", pattern, "--position-embedding-type", "none",
            "--normalization", "RMSNorm", "--untie-embeddings-and-output-weights",
            "--disable-bias-linear", "--squared-relu", "--seq-length", "8192",
            "--max-position-embeddings", "8192", "--tokenizer-type", "NullTokenizer",
            "--vocab-size", "131072", "--num-experts", "512", "--moe-router-topk", "22",
            "--moe-latent-size", "1024", "--moe-shared-expert-intermediate-size", "5376",
            "--moe-ffn-hidden-size", "2688", "--micro-batch-size", "1", *more]


def test_megatron_super_release_command():
    job = read_megatron_args(_super_command())
    a = job.architecture
    assert a["num_layers"] == 88 and a["mtp_num_layers"] == 2 and a["mtp_layer_pattern"] == "*E"
    assert a["mtp_repeated"] is False
    # the pattern's letters: 40 Mamba, 8 attention, 40 MoE
    assert a["layer_mixers"].count("mamba") == 40 and a["layer_mixers"].count("attention") == 8
    assert sum(a["moe_layer_freq"]) == 40 and sum(a["ffn_layers"]) == 40
    assert a["mamba_num_heads"] == 128 and a["mamba_inner_size"] == 128 * 64   # head dim 64
    # hand count: the main model (120,668,687,360, tests/test_latent_moe.py) and one MTP block
    # per depth (eh_proj 2h -> h, enorm, hnorm, an attention and a latent-MoE layer each with
    # its norm, a final norm); the Bridge's card counts main + one block + 41 x 512 router
    # biases = 123,611,033,088 (examples/model_verification_cards/nemotron-3-super-120b-a12b)
    attention = H * (A + 2 * G) * D_H + A * D_H * H + H
    moe = E * H + 2 * H * LAT + E * 2 * LAT * F_E + 2 * H * F_SH + H
    block = 2 * H * H + 2 * H + attention + moe + H
    main = 120_668_687_360
    assert main + block + 41 * E == 123_611_033_088
    assert parameter_count(Architecture(name="super", **a)) == main + 2 * block
    # --mtp-use-repeated-layer: one block's weights for the two depths
    rep = read_megatron_args(_super_command(SUPER_MAIN + "/*E/*E",
                                            "--mtp-use-repeated-layer")).architecture
    assert parameter_count(Architecture(name="super", **rep)) == main + block


def test_megatron_depths_and_legacy_mtp_pattern():
    # the legacy spelling gives the same model (arguments.py:774-785)
    legacy = read_megatron_args(_super_command(SUPER_MAIN, "--mtp-hybrid-override-pattern",
                                               "*E", "--mtp-num-layers", "2")).architecture
    unified = read_megatron_args(_super_command()).architecture
    assert legacy == unified
    # the pattern's depths win over --mtp-num-layers (arguments.py:864-879), noted
    job = read_megatron_args(_super_command(SUPER_MAIN + "/*E/*E", "--mtp-num-layers", "3"))
    assert job.architecture["mtp_num_layers"] == 2
    assert any("--mtp-num-layers 3 ignored" in n for n in job.notes)
    # --mtp-num-layers without a pattern's MTP part: HybridModel builds no MTP block
    job = read_megatron_args(_super_command(SUPER_MAIN, "--mtp-num-layers", "1"))
    assert job.architecture["mtp_num_layers"] == 0


@pytest.mark.parametrize("pattern, said", [
    (SUPER_MAIN + "/*E/*-", "identical"),
    (SUPER_MAIN + "/*G", "Gated DeltaNet (G)"),
    ("MEM|EM*E/*E", "'|' pipeline-stage boundaries"),
    ("/*E/*E", "no decoder layers"),
    (SUPER_MAIN.replace("*", "+"), "MLA (+)"),
])
def test_megatron_bad_hybrid_commands(pattern, said):
    refused(lambda: read_megatron_args(_super_command(pattern)), said)


def test_megatron_mtp_needs_rope_or_no_positions():
    cmd = _super_command()
    cmd[cmd.index("--position-embedding-type") + 1] = "learned_absolute"
    refused(lambda: read_megatron_args(cmd), "rope or none")


def test_cli_bad_pattern_is_one_line_exit_2():
    res = run_python(None, seconds=60, args=("estimate", *_super_command(SUPER_MAIN + "/*E/E*"),
                                             "--world-size", "64"))
    assert res.returncode == 2 and res.stdout == "", res.stderr[-500:]
    assert res.stderr.count("\n") == 1 and "identical" in res.stderr
    # beside a MODEL the pattern defines its layers (tests/test_hybrid_override.py); one it
    # cannot build is one line too
    res = run_python(None, seconds=60, args=("estimate", "nemotron-3-super",
                                             "--hybrid-layer-pattern", "M*E/*E/E*",
                                             "--world-size", "64"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr[-500:]


# --- the step time ---------------------------------------------------------------------------

KW = dict(eta_gemm=0.5, overlap=Overlap())
ONE = np.array(1.0)


def _layer(x, st, mixer, ffn):
    dev = gpu("h100")
    return layer_time(x, st, dev, cluster_for(dev.name), ONE, ONE, ONE, ONE, ONE, moe=bool(ffn),
                      dp=ONE, mixer=mixer, mlp=ffn is not None, **KW)


def test_mtp_depth_prices_its_pattern_layers():
    # multi_token_prediction.py:1199-1214: the "*E" block is an attention-only layer and an
    # MoE-only layer, not a layer of the decoder's mean (or last) kind
    st = Settings(seq_length=4096)
    x = shape_of(replace(preset("nemotron-3-super"), mtp_num_layers=2))
    dev = gpu("h100")
    lf, lb, _, _, (mf, mb) = mean_layer(x, st, dev, cluster_for(dev.name), ONE, ONE, ONE, ONE,
                                        ONE, ONE, mtp_layers=2, **KW)
    af, ab = _layer(x, st, "attention", None)
    ef, eb = _layer(x, st, "none", True)
    for key in mf:
        assert np.isclose(mf[key], af[key] + ef[key]) and np.isclose(mb[key], ab[key] + eb[key])
    assert not np.isclose(sum(mf.values()), sum(lf.values()))


def test_mtp_block_layer_counts_and_precision():
    st = Settings(seq_length=4096)
    dev = gpu("h100")
    args = (dev, cluster_for(dev.name), ONE, ONE, ONE, ONE, ONE, ONE)
    arch = replace(preset("nemotron-3-super"), mtp_num_layers=1)
    one, _ = mtp_block(shape_of(arch), st, *args, **KW)
    two, _ = mtp_block(shape_of(replace(arch, mtp_layer_pattern="*E*E")), st, *args, **KW)
    swapped, _ = mtp_block(shape_of(replace(arch, mtp_layer_pattern="E*")), st, *args, **KW)
    for key in one:
        assert np.isclose(two[key], 2 * one[key]) and np.isclose(swapped[key], one[key])
    # a Mamba letter is the decoder's Mamba-2 layer
    m, _ = mtp_block(shape_of(replace(arch, mtp_layer_pattern="M")), st, *args, **KW)
    mamba_f, _ = _layer(shape_of(arch), st, "mamba", None)
    assert all(np.isclose(m[k], mamba_f[k]) for k in m)
    # FP4 runs: the MTP block at 16 bits (multi_token_prediction.py:1386-1394)
    gb = gpu("gb200")
    fp4 = Settings(seq_length=4096, precision="fp4")
    x = shape_of(replace(arch, mtp_num_layers=2))
    *_, (mf, _) = mean_layer(x, fp4, gb, cluster_for(gb.name), ONE, ONE, ONE, ONE, ONE,
                             ONE, mtp_layers=2, **KW)
    bf16, _ = mtp_block(x, st, gb, cluster_for(gb.name), *args[2:], **KW)
    four, _ = mtp_block(x, fp4, gb, cluster_for(gb.name), *args[2:], **KW)
    assert all(np.isclose(mf[k], bf16[k]) for k in mf)
    assert not np.isclose(bf16["gemm"], four["gemm"])


def test_step_grows_by_the_pattern_block_per_mtp_layer():
    # one stage, m = 4 micro-batches: each MTP layer runs its block once per micro-batch
    # forward and backward, so doubling the block ("*E" -> "*E*E") lengthens the pipeline by
    # m x n_MTP x (the "*E" block's forward + backward seconds)
    arch = replace(preset("nemotron-3-super"), num_layers=4, layer_mixers=("mamba", "none") * 2,
                   ffn_layers=(0, 1) * 2, moe_layer_freq=(0, 1) * 2)
    st, m, n = Settings(seq_length=4096), 4, 2
    kw = dict(p=1, m=m, e=8, d=8, settings=st, eta_gemm=0.5, mtp_layers=n)

    def pipeline(pattern):
        return float(step_time_grid(replace(arch, mtp_layer_pattern=pattern), "h100",
                                    **kw)["pipeline"])
    dev = gpu("h100")
    f, b = mtp_block(shape_of(arch), st, dev, cluster_for(dev.name), ONE, ONE, np.array(8.0),
                     ONE, ONE, np.array(8.0), eta_gemm=0.5, overlap=Overlap())
    block = sum(float(v) for v in f.values()) + sum(float(v) for v in b.values())
    assert pipeline("*E*E") - pipeline("*E") == pytest.approx(m * n * block, rel=1e-9)
