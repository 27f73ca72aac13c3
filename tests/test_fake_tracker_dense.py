"""memsym against torch's FSDP2 memory tracker on Llama-3 8B and 70B shapes, faked on a CPU.

The oracle (tests/fake_tracker.py): torchtitan's estimation recipe (``FakeTensorMode``, a fake
process group, ``FSDPMemTracker``) running transformers' own ``LlamaForCausalLM`` at the real
hidden sizes, heads, FFN widths and the real 128256-token vocabulary, FSDP2 grouped as
torchtitan's ``apply_fsdp`` does, one AdamW step; no memory is allocated.  memsym predicts the
same job (``framework="torchtitan"``, ``sharding="fsdp"``, metric ``allocated``, no
allowances: the tracker counts tensors).

Layers: 2 or 3 decoder layers instead of 32 / 80.  Every block is its own FSDP group of the
same shapes, so what a block adds is the same for each (the tests at 2 and 3 layers check it
through the per-layer terms) and the output layer, whose logits dominate, is kept whole.

Tolerance, and why.  memsym counts torchtitan's Llama code; the tracker sees transformers'.
The differences are named and derived, one by one, in :func:`fake_tracker.hf_differences`
(the fp32 copies of ``LlamaRMSNorm``, ``repeat_kv`` and the bf16 cast
of the fp32 causal mask that transformers builds under fake tensors, the shared RoPE tables,
the labels), and memsym counts its full-recompute working set in the loss's backward where it
does not exist yet (reported: memsym/training.py:380-387).  With those,

    |memsym + named differences - tracker| <= 0.01 % of the tracker's peak

which leaves room for a few KiB only: AdamW's fp32 ``step`` counters (4 bytes per parameter
tensor, which memsym leaves out) and the model's ``inv_freq`` buffer.  The state terms are
checked to the byte besides: sharded parameters, the gathered ``[norm, output]`` group, the
logits' gradients (which place the peak in the loss's backward, as memsym's phase says), and
the optimizer states.  memsym's raw total, without the named differences, is within
``fake_tracker.RAW_TOL`` (15 %) of the tracker's at these layer counts.  Where they disagree
beyond the named differences, tests/test_fake_tracker_gaps.py pins each disagreement.
"""

import pytest

from fake_tracker import tracker_marks, CONFIGS, check_against_tracker, compare

pytestmark = tracker_marks()     # skips the module without torch and transformers

# (model, layers, world, batch, seq, recompute): batch, sequence, recompute, world size and the
# model's size each varied from the first
DENSE = [
    ("llama3-8b", 2, 8, 1, 4096, "none"),
    ("llama3-8b", 2, 8, 1, 8192, "none"),
    ("llama3-8b", 2, 8, 2, 4096, "none"),
    ("llama3-8b", 3, 8, 1, 4096, "none"),
    ("llama3-8b", 2, 64, 1, 4096, "none"),
    ("llama3-8b", 2, 256, 1, 4096, "none"),
    ("llama3-8b", 2, 32, 4, 2048, "none"),
    ("llama3-8b", 2, 8, 1, 4096, "full"),
    ("llama3-8b", 2, 8, 1, 8192, "full"),
    ("llama3-8b", 3, 8, 2, 4096, "full"),
    ("llama3-70b", 2, 8, 1, 8192, "none"),
    ("llama3-70b", 3, 16, 1, 8192, "none"),
    ("llama3-70b", 2, 8, 2, 8192, "full"),
    ("llama3-70b", 2, 32, 1, 8192, "full"),
]


def test_presets_are_the_harness_shapes():
    # memsym's presets are the same models as the harness's config dicts (Meta's and Qwen's
    # config.json): a comparison of different shapes would prove nothing
    from memsym.model import preset

    for name, cfg in CONFIGS.items():
        x = preset(name)
        assert (x.hidden_size, x.num_attention_heads, x.num_query_groups, x.vocab_size) == (
            cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["vocab_size"]), name
        assert x.num_layers == cfg["num_hidden_layers"]
        assert (x.kv_channels or x.hidden_size // x.num_attention_heads) == cfg.get(
            "head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
        ffn = x.moe_ffn_hidden_size if x.num_experts else x.ffn_hidden_size
        assert ffn == cfg.get("moe_intermediate_size", cfg["intermediate_size"])
        assert x.untie_embeddings_and_output_weights and not cfg["tie_word_embeddings"]


@pytest.mark.parametrize("name,layers,world,batch,seq,recompute", DENSE)
def test_dense_peak_matches_the_tracker(name, layers, world, batch, seq, recompute):
    check_against_tracker(name, layers, world, batch, seq, recompute)


def test_per_layer_terms_repeat_exactly():
    # the reduced depth is sound: a third block adds the same bytes to the tracker's peak as
    # to memsym's prediction plus the named per-layer differences
    two, three = (compare("llama3-8b", layers=n, world=8, seq=4096) for n in (2, 3))
    step = three["tracker"]["peak"] - two["tracker"]["peak"]
    per_layer_memsym = three["terms"]["layer_activations"] - two["terms"]["layer_activations"]
    named = {k: three["named"][k] - two["named"][k] for k in three["named"]}
    states = sum(three["terms"][k] - two["terms"][k] for k in ("weights", "optimizer"))
    steps_counters = 4 * (three["tracker"]["tensors"] - two["tracker"]["tensors"])
    assert step == per_layer_memsym + sum(named.values()) + states + steps_counters
