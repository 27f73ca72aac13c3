"""Granite Swash (``granite_swa``, ``granitemoe_swa``) and IQuest-Coder (``iquestcoder``) against
transformers' own models (issue 32, item 4).

Same oracle as ``tests/test_hf_newer_types.py``: transformers (5.25.0 when checked) builds
``AutoModelForCausalLM.from_config`` of the very file memsym reads, on the meta device, and
``sum(p.numel())`` of its parameters (a tied weight once) must equal memsym's count, for small
configs (every structural switch), the config classes' defaults and the published config of
granite-swash-2b, which is also counted by hand.  No network: every config is written here.
"""

from __future__ import annotations


from memsym.model import from_hf_config, parameter_count, parameter_counts

from hf_oracle import TOKENS, write_config

# the model types this file covers
TYPES = {"granite_swa", "granitemoe_swa", "iquestcoder"}

_BASE = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 128,
         "max_position_embeddings": 64, **TOKENS}
_SWA = {"model_type": "granite_swa", **_BASE, "sliding_window": 8}
_MOE_SWA = {"model_type": "granitemoe_swa", **_BASE, "intermediate_size": 32,
            "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 8}
_IQUEST = {"model_type": "iquestcoder", **_BASE, "head_dim": 16}

SMALL = {
    # Granite Swash: Granite's layers with a learned sink logit per head in every layer, tied;
    # or biased projections, listed layer kinds, untied
    "granite_swa": _SWA,
    "granite_swa-biases-listed-untied": {
        **_SWA, "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False,
        "layer_types": ["full_attention", "sliding_attention"] * 2},
    # Granite Swash MoE: sinks, MoE in every layer, no shared MLP; or a shared MLP, biased
    # attention, tied
    "granitemoe_swa": _MOE_SWA,
    "granitemoe_swa-shared-bias-tied": {**_MOE_SWA, "shared_intermediate_size": 48,
                                        "attention_bias": True, "tie_word_embeddings": True},
    # IQuest-Coder: LlamaForCausalLM of its config; or every bias, tied, the default head_dim
    "iquestcoder": _IQUEST,
    "iquestcoder-biases-tied": {**_IQUEST, "attention_bias": True, "mlp_bias": True,
                                "tie_word_embeddings": True, "head_dim": 32},
}


# https://huggingface.co/ibm-granite/granite-swash-2b/blob/main/config.json at revision
# af1e3227100b61088eead48389ab5409b5d0e39c: every field below as a public test pins the file
GRANITE_SWASH_2B = {
    "model_type": "granite_swa", "architectures": ["GraniteSWAForCausalLM"],
    "vocab_size": 100352, "hidden_size": 2560, "intermediate_size": 8192,
    "num_hidden_layers": 24, "num_attention_heads": 20, "num_key_value_heads": 4,
    "hidden_act": "silu", "max_position_embeddings": 8192, "rms_norm_eps": 1e-05,
    "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True,
    "initializer_range": 0.1, "bos_token_id": 100257, "eos_token_id": 100257,
    "pad_token_id": 100256, "sliding_window": 128,
    "layer_types": ["full_attention"] + (["sliding_attention"] * 3 + ["full_attention"]) * 5
    + ["sliding_attention"] * 3,
    "embedding_multiplier": 12, "residual_multiplier": 0.28, "logits_scaling": 10,
    "attention_multiplier": 0.0078125, "rope_theta": 10000}

#: the published configs this file checks against transformers (tests/test_hf_type_tables.py)
REAL = {"granite-swash-2b": GRANITE_SWASH_2B}


def test_granite_swash_2b_hand_count(tmp_path):
    # modeling_granite_swa.py (h=2560, a=20, g=4, d=128, f=8192, L=24, V=100352, tied):
    # q, o h a d each, k, v h g d each, sinks a; gate, up, down; two RMSNorms; the final norm
    h, a, g, d, f, L, V = 2560, 20, 4, 128, 8192, 24, 100352
    att = 2 * h * a * d + 2 * h * g * d + a
    arch = from_hf_config(write_config(tmp_path, GRANITE_SWASH_2B, "swash"))
    assert len(GRANITE_SWASH_2B["layer_types"]) == L
    assert parameter_counts(arch)["attention"] == L * att
    assert parameter_count(arch) == V * h + L * (att + 3 * h * f + 2 * h) + h
