"""Zamba and Zamba2 from config.json: Mamba layers with shared transformer blocks.

Same oracle as ``tests/test_hf_layer_kinds.py``: transformers (5.25.0 when checked) builds
``AutoModelForCausalLM.from_config`` of the very file memsym reads, on the meta device, and
``sum(p.numel())`` of its parameters (each tied shared block once) must equal memsym's count,
for small configs (one or several shared blocks, adapters on Q/K/V or not, tied or untied,
biases) and for the published Zamba2 1.2B, 2.7B and 7B configs (tests/data/hf, with a hand
derivation and the published sizes).  Pipeline parallelism is refused in one line; the
activations of Zamba2's shared-block uses are tested in tests/test_zamba2_activations.py.  No network: every config is written here or read from tests/data/hf.
"""

from __future__ import annotations

import pathlib

import pytest

from memsym.errors import InvalidValueError
from memsym.model import Architecture, from_hf_config, parameter_count, parameter_counts, resolve
from memsym.model.hf_config import HF_MODEL_TYPES

from hf_oracle import TOKENS, fuzz_configs, language_model_count, write_config


_HYBRID = ["mamba", "hybrid", "mamba", "hybrid", "hybrid", "mamba", "hybrid", "mamba"]
# Zamba: the default pattern (layers 2, then every attn_layer_period from attn_layer_offset)
_ZAMBA = {"model_type": "zamba", "hidden_size": 64, "num_hidden_layers": 8,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
          "vocab_size": 128, "max_position_embeddings": 64, "attn_layer_period": 3,
          "attn_layer_offset": 1, **TOKENS}
_ZAMBA2 = {"model_type": "zamba2", "hidden_size": 64, "num_hidden_layers": 8,
           "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 128,
           "max_position_embeddings": 64, "n_mamba_heads": 8, "mamba_d_state": 16,
           "layers_block_type": _HYBRID, **TOKENS}

SMALL = {
    "zamba": _ZAMBA,
    # untied: transformers 5.25 ties no shared block either (one copy per hybrid layer)
    "zamba-untied-bias-dt-rank-head-dim": {
        **_ZAMBA, "tie_word_embeddings": False, "mamba_proj_bias": True,
        "mamba_conv_bias": False, "mamba_dt_rank": 5, "attention_head_dim": 8},
    "zamba-listed-layers": {**_ZAMBA, "layers_block_type": _HYBRID},
    # the n_mamba_heads split of x_proj / dt_proj (per-head weights), other state and conv sizes
    "zamba-four-heads-state-conv": {**_ZAMBA, "n_mamba_heads": 4, "mamba_d_state": 8,
                                    "mamba_d_conv": 3, "mamba_expand": 3},
    "zamba2": _ZAMBA2,
    "zamba2-two-blocks-attention-adapters": {
        **_ZAMBA2, "num_mem_blocks": 2, "adapter_rank": 8, "use_shared_attention_adapter": True},
    "zamba2-three-blocks-bias-untied-gqa": {
        **_ZAMBA2, "num_mem_blocks": 3, "add_bias_linear": True, "tie_word_embeddings": False,
        "num_key_value_heads": 2, "mamba_ngroups": 2, "use_conv_bias": False},
    "zamba2-two-blocks-adapters-untied": {
        **_ZAMBA2, "num_mem_blocks": 2, "adapter_rank": 4, "use_shared_attention_adapter": True,
        "tie_word_embeddings": False},
    "zamba2-more-blocks-than-uses": {**_ZAMBA2, "num_mem_blocks": 5,
                                     "use_shared_attention_adapter": True},
    "zamba2-no-adapter": {**_ZAMBA2, "adapter_rank": 0},
}


def test_the_zamba_types_are_read():
    assert {"zamba", "zamba2"} <= set(HF_MODEL_TYPES)


@pytest.mark.torch
@pytest.mark.parametrize("case", sorted(SMALL))
def test_small_configs_match_transformers(tmp_path, case):
    path = write_config(tmp_path, SMALL[case])
    assert parameter_count(from_hf_config(path)) == language_model_count(path)


def test_zamba_hand_count(tmp_path):
    # h=64, a=4, g=2, d_h=2h/a=32, f=96, V=128, tied; layers 0..7 with hybrid layers 1, 4, 7
    # (i - 3) % 3 == 1 past the first three, and layer 2); Mamba-1: d=128, N=16, k=4, r=4
    h, d, n, k, r, V = 64, 128, 16, 4, 4, 128
    mamba = h * 2 * d + d * k + d + d * (r + 2 * n) + r * d + d + d * n + d + d * h + h
    block = 2 * h * 4 * 32 + 2 * (2 * h * 2 * 32) + 4 * 32 * h + 3 * h * 96 + 3 * h
    arch = from_hf_config(write_config(tmp_path, _ZAMBA))
    uses = arch.layer_mixers.count("shared")
    assert arch.layer_mixers == ("mamba", "mamba", "shared", "mamba", "shared", "mamba",
                                 "mamba", "shared")
    assert parameter_count(arch) == V * h + 8 * mamba + block + uses * h * h + h
    assert parameter_counts(arch)["mamba"] == 8 * (mamba - h)


# --------------------------------------------------------------------------------------------
# full-size configs
# --------------------------------------------------------------------------------------------

# A public third-party copy of a Zamba2-7B config.json in Zyphra's pre-transformers field
# names (transformers_version 4.43.0.dev0: lora_rank, ffn_hidden_size, mamba_headdim,
# use_shared_block_lora), found with the code search; trimmed to the fields transformers 5.25
# reads.  transformers reads it with its own names: 8 Mamba heads (n_mamba_heads absent, where
# the released model has 112 of mamba_headdim 64), adapter_rank 128, intermediate_size 4h.
_ZAMBA2_7B_FORK = {
    "model_type": "zamba2", "add_bias_linear": False, "hidden_size": 3584,
    "layers_block_type": (["mamba"] * 6 + ["hybrid"] + ["mamba"] * 4 + ["hybrid"]
                          + (["mamba"] * 5 + ["hybrid"]) * 11 + ["mamba"] * 3),
    "mamba_ngroups": 2, "max_position_embeddings": 4096, "num_attention_heads": 32,
    "num_hidden_layers": 81, "num_key_value_heads": 32, "num_mem_blocks": 2, "pad_token_id": 0,
    "use_mem_rope": True, "vocab_size": 32000, "bos_token_id": 1, "eos_token_id": 2}


def test_the_fork_format_copy_has_the_pattern_of_the_copy():
    # the copy's layers_block_type: hybrid at 6, 11, 17, 23, ..., 77 (13 uses of 81 layers)
    pattern = _ZAMBA2_7B_FORK["layers_block_type"]
    assert len(pattern) == 81 and pattern.count("hybrid") == 13
    assert [i for i, t in enumerate(pattern) if t == "hybrid"][:4] == [6, 11, 17, 23]


@pytest.mark.torch
def test_a_full_size_zamba2_copy_matches_transformers(tmp_path):
    path = write_config(tmp_path, _ZAMBA2_7B_FORK)
    assert parameter_count(from_hf_config(path)) == language_model_count(path)


# Full size from the config classes' own defaults (transformers 5.25 documents ZambaConfig
# with checkpoint Zyphra/Zamba-7B-v1 and Zamba2Config with Zyphra/Zamba2-2.7B, but they are not
# those models: Zamba2Config's 8 Mamba heads and single block against the 2.7B's 80 and 2, see
# tests/data/hf/zamba2-2.7b), written out so memsym reads them from a file.
_CLASS_DEFAULTS = {
    "zamba": {"model_type": "zamba", "hidden_size": 3712, "num_hidden_layers": 76,
              "num_attention_heads": 16, "intermediate_size": 14848, "vocab_size": 32000},
    "zamba2": {"model_type": "zamba2", "hidden_size": 2560, "num_hidden_layers": 54,
               "num_attention_heads": 32, "vocab_size": 32000},
}


@pytest.mark.torch
@pytest.mark.parametrize("mtype", sorted(_CLASS_DEFAULTS))
def test_the_config_class_defaults_match_transformers(tmp_path, mtype):
    path = write_config(tmp_path, _CLASS_DEFAULTS[mtype])
    assert parameter_count(from_hf_config(path)) == language_model_count(path)


# The published Zamba2 configs, written from the sources named in tests/data/hf/README.md
_PUBLISHED = pathlib.Path(__file__).resolve().parent / "data" / "hf"
_ZAMBA2_RELEASES = ["zamba2-1.2b", "zamba2-2.7b", "zamba2-7b"]


@pytest.mark.torch
@pytest.mark.parametrize("name", _ZAMBA2_RELEASES)
def test_the_published_zamba2_configs_match_transformers(name):
    path = _PUBLISHED / name / "config.json"
    assert parameter_count(from_hf_config(path)) == language_model_count(path)


@pytest.mark.torch
def test_the_1_2b_file_builds_the_reported_tensors():
    # the trace report the file is written from counts 406 parameter tensors (transformers
    # 5.14.1 on the Hub file): the same modules are built from this file
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(
            AutoConfig.from_pretrained(str(_PUBLISHED / "zamba2-1.2b")))
    assert len(list(model.named_parameters())) == 406


def _zamba2_by_hand(h, layers, uses, blocks, heads, groups, state, attention_adapters, V=32000,
                    r=128):
    """Zamba2ForCausalLM's parameters from transformers 5.25 modeling_zamba2.py, tied, no bias:
    a = 32 MHA heads of 2h/a on the 2h concatenation, f = 4h, Mamba-2 inner 2h, conv 4."""
    a, d_inner, f = 32, 2 * h, 4 * h
    d_h, conv = 2 * h // a, d_inner + 2 * groups * state
    mamba = (h * (2 * d_inner + 2 * groups * state + heads)   # in_proj: z, x, B, C, dt
             + conv * 4 + conv                                # depthwise conv1d and its bias
             + 3 * heads + d_inner + d_inner * h)             # dt_bias, A_log, D; norm; out_proj
    block = (2 * h + 3 * (2 * h * a * d_h) + a * d_h * h      # input norm (2h), Q, K, V, O
             + h + h * 2 * f + f * h)                         # pre-MLP norm, gate_up, down
    use = (h * h + r * h + r * 2 * f                          # linear, gate_up adapter
           + (3 * (2 * h * r + r * 2 * h) if attention_adapters else 0))
    return V * h + layers * (h + mamba) + blocks * block + uses * use + h


def test_the_published_zamba2_configs_by_hand():
    hand = {"zamba2-1.2b": _zamba2_by_hand(2048, 38, 6, 1, 64, 1, 128, True),
            "zamba2-2.7b": _zamba2_by_hand(2560, 54, 9, 2, 80, 1, 64, False),
            "zamba2-7b": _zamba2_by_hand(3584, 81, 13, 2, 112, 2, 64, False)}
    for name, expected in hand.items():
        assert parameter_count(from_hf_config(_PUBLISHED / name / "config.json")) == expected
    # the published sizes: 1.2B, 2.7B, 7.4B (arXiv:2411.15242); the 1.2B trace report's 1.22B
    assert [round(hand[n] / 10**9, 1) for n in _ZAMBA2_RELEASES] == [1.2, 2.7, 7.4]
    assert round(hand["zamba2-1.2b"] / 10**9, 2) == 1.22


# --------------------------------------------------------------------------------------------
# stages, estimate, refusals
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(SMALL))
def test_one_stage_holds_the_count(tmp_path, case):
    from memsym.model import stage_parameters

    arch = from_hf_config(write_config(tmp_path, SMALL[case]))
    assert stage_parameters(arch, t=1, p=1, pad_vocab=False).total == parameter_count(arch)


def test_pipeline_parallelism_is_refused_in_one_line(tmp_path):
    from memsym.model import stage_parameters

    arch = from_hf_config(write_config(tmp_path, SMALL["zamba2-two-blocks-attention-adapters"]))
    with pytest.raises(InvalidValueError, match="shared transformer blocks") as err:
        stage_parameters(arch, t=1, p=2, stage=0, pad_vocab=False)
    assert "\n" not in str(err.value)


def test_a_search_leaves_out_the_pipelines_by_a_named_rule(tmp_path):
    # memsym.search over 8 GPUs, even stages only, one choice of recompute / sharding / SP:
    # the (t, p, c, d) with t*p*c*d = 8 are 20; those with p > 1 are p = 2 (t*c*d = 4: 6
    # ordered triples), p = 4 (t*c*d = 2: 3), p = 8 (1): 10.  v is offered from the
    # divisors of the 8 layers {1, 2, 4, 8}, b from (1, 2, 4, 8): 4 x 4 rows per layout.
    from memsym.search import search

    res = search(write_config(tmp_path, _ZAMBA2), "h100-80gb", 8, seq_length=64, recompute=["full"],
                 sharding=["distributed-optimizer"], sequence_parallel=[False], uneven=False)
    assert res.raw == 20 * 4 * 4
    assert res.excluded["shared-block-pipeline"] == 10 * 4 * 4
    assert len(res) > 0 and set(res.columns["p"].tolist()) == {1}


@pytest.mark.parametrize("cfg,match", [
    ({**_ZAMBA, "attention_hidden_size": 64}, "attention_hidden_size must be 2"),
    ({**_ZAMBA, "n_mamba_heads": 3}, "n_mamba_heads"),
    ({**_ZAMBA2, "layers_block_type": ["hybrid"] * 3}, "'layers_block_type' must list 8"),
    ({**_ZAMBA2, "layers_block_type": ["attention"] * 8}, "'layers_block_type' must list 8"),
    ({k: v for k, v in _ZAMBA2.items() if k != "layers_block_type"}, "54-layer default"),
    ({**_ZAMBA2, "mamba_ngroups": 3}, "not a multiple of its 3 groups"),
])
def test_what_transformers_cannot_build_is_refused_in_one_line(tmp_path, cfg, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value)


def test_the_shared_block_fields_are_checked():
    base = dict(num_layers=2, hidden_size=64, num_attention_heads=4,
                position_embedding_type="rope", layer_mixers=("mamba", "shared"),
                mamba_inner_size=128, mamba_state_dim=16, mamba_num_heads=4)
    assert resolve(Architecture(**base, shared_blocks=1)).shared_blocks == 1
    for bad, match in [(dict(shared_blocks=0), "> 0"), (dict(shared_adapter_rank=-1), "> 0"),
                       (dict(layer_mixers=("shared",)), "layer_mixers must list 2")]:
        with pytest.raises(InvalidValueError, match=match):
            resolve(Architecture(**{**base, **bad}))


def test_fuzzed_configs(tmp_path):
    keys = {k for cfg in SMALL.values() for k in cfg}
    fuzz_configs(tmp_path, SMALL, keys)
