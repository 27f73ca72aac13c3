"""A hybrid layer pattern pasted beside a MODEL (issue 32): ``memsym estimate MODEL
--hybrid-layer-pattern ...`` means what Megatron-LM means, the pattern defines the layers.

Sources (every expected value is from them or hand arithmetic written here):

* Megatron-LM d98e8a64dd ``megatron/training/arguments.py:743-797``: the deprecated
  ``--hybrid-override-pattern`` forwarded to ``--hybrid-layer-pattern``; "hybrid_layer_pattern
  always overrides --num-layers" (``args.num_layers = num_layers_in_pattern``, with a warning
  when they differ); ``megatron/core/models/hybrid/hybrid_layer_allocation.py:128-142``
  (``get_hybrid_total_layer_count``: the main part's characters) and ``:200-298``
  (``parse_hybrid_pattern``: ``main/mtp/mtp``, one depth per ``/`` part).
* One layer per symbol, each with one pre-norm (HybridStack's Mamba, attention, MLP and MoE
  layers; the presets' ``norms_per_layer = 1``): Megatron's ``MambaMixer``
  (``ssm/mamba_mixer.py``: in_proj to 2 d_inner + 2 groups x state + heads, a depthwise conv
  of kernel 4 with bias over d_inner + 2 groups x state, dt_bias / A_log / D per head, the
  gated RMSNorm over d_inner, out_proj), the attention's fused QKV and projection, squared-ReLU
  MLPs (fc1, fc2; no biases), the router (experts x h, no bias).
* Nemotron 3 Nano's sizes: Megatron-Bridge 067f987df0 ``recipes/nemotronh/h100/
  nemotron_3_nano.py`` (hidden 2688, 64 Mamba heads of 64, state 128, 8 groups, 32 heads,
  2 query groups of 128, 128 experts of 1856, shared expert 3712, vocabulary 131072, untied).
* Llama 3 8B's sizes: Meta's config.json (hidden 4096, 32 heads, 8 KV heads, SwiGLU 14336,
  vocabulary 128256, untied).
"""

from __future__ import annotations

import json

import pytest

from memsym.readers.megatron import read_megatron_overrides
from in_process import run

GPU = "h100-80gb"


def params(capsys, *argv):
    code, out, err = run(capsys, "estimate", *argv, "--gpu", GPU, "--json")
    assert code == 0, err
    est = json.loads(out)
    return est["params"], est


def nano_by_hand() -> dict:
    """Nemotron 3 Nano's layers, one pre-norm each, and its embedding/output/final norm."""
    h, heads, groups, kv, v = 2688, 32, 2, 128, 131072
    inner, state, ngroups, mheads = 64 * 64, 128, 8, 64
    conv = inner + 2 * ngroups * state
    mamba = (h * (2 * inner + 2 * ngroups * state + mheads)   # in_proj
             + conv * 4 + conv                                # conv1d weight and bias
             + 3 * mheads                                     # dt_bias, A_log, D
             + inner                                          # gated RMSNorm
             + inner * h + h)                                 # out_proj, pre-norm
    attention = h * (heads + 2 * groups) * kv + heads * kv * h + h
    mlp = 2 * h * 1856 + h
    moe_dense = 128 * h + 2 * h * 3712 + h                    # router, shared expert, norm
    experts = 128 * 2 * h * 1856
    return {"M": mamba, "*": attention, "-": mlp, "E": moe_dense + experts,
            "rest": 2 * v * h + h}


def test_pattern_over_nemotron_nano_is_its_layers_counted_by_hand(capsys):
    n = nano_by_hand()
    want = n["rest"] + n["M"] + n["*"] + n["-"] + n["E"]
    assert want == 2_074_238_272          # the hand sum, written out
    got, _ = params(capsys, "nemotron-3-nano", "--hybrid-layer-pattern", "M*-E")
    assert got == want
    # the deprecated spelling is forwarded to the same pattern (args:743-755)
    assert params(capsys, "nemotron-3-nano", "--hybrid-override-pattern", "M*-E")[0] == want
    # the pattern's count wins over --num-layers, said in a note (args:787-797)
    got, est = params(capsys, "nemotron-3-nano", "--num-layers", 52,
                      "--hybrid-layer-pattern", "M*-E")
    assert got == want
    assert any("num_layers 52 ignored" in note for note in est["notes"])


def test_attention_and_mlp_pattern_over_llama3_8b(capsys):
    h, v = 4096, 128256
    attention = h * (32 + 2 * 8) * 128 + 32 * 128 * h + h
    mlp = 3 * h * 14336 + h
    want = 2 * v * h + h + 2 * attention + 2 * mlp
    assert want == 1_486_901_248
    assert params(capsys, "llama3-8b", "--hybrid-layer-pattern", "*-*-")[0] == want


def test_pattern_mtp_depths_and_moe_layers():
    # parse_hybrid_pattern: "M*E" main, two "/*E" depths; E the MoE layer
    o = read_megatron_overrides(["--hybrid-layer-pattern", "M*E/*E/*E"], num_layers=52,
                                has_experts=True, mamba=True)
    opts = o.options
    assert opts["num_layers"] == 3
    assert opts["layer_mixers"] == ("mamba", "attention", "none")
    assert opts["moe_layer_freq"] == (0, 0, 1)
    assert (opts["mtp_num_layers"], opts["mtp_layer_pattern"]) == (2, "*E")
    # without '/' HybridModel builds no MTP (hybrid_model.py:219-222)
    assert read_megatron_overrides(["--hybrid-layer-pattern", "M*E"], num_layers=52,
                                   has_experts=True, mamba=True).options["mtp_num_layers"] == 0


@pytest.mark.parametrize("model, pattern, said", [
    ("llama3-8b", "*E*E", "no experts"),
    ("llama3-8b", "M*M*", "no Mamba sizes"),
    ("nemotron-3-nano", "M*|M*", "pipeline-stage boundaries"),
])
def test_pattern_the_model_cannot_build_is_one_line(capsys, model, pattern, said):
    code, out, err = run(capsys, "estimate", model, "--gpu", GPU,
                         "--hybrid-layer-pattern", pattern)
    assert (code, out) == (2, "") and err.count("\n") == 1 and said in err
