"""memsym against torch's FSDP2 memory tracker on a Qwen3-MoE (30B-A3B shapes), faked on a CPU.

As tests/test_fake_tracker_dense.py (its docstring states the oracle, the reduced depth and
the tolerance), for transformers' ``Qwen3MoeForCausalLM``: 128 experts of FFN 768, top-8, QK
norm, vocabulary 151936, the experts run by transformers' ``grouped_mm`` path (static shapes,
which ``FakeTensorMode`` can run; the eager loop's ``nonzero`` cannot).  FSDP2 shards each
block whole, experts included (no expert parallelism), as torchtitan does with EP = 1.

The named differences add, per MoE layer, what transformers' MoE keeps beyond torchtitan's:
the fp32 copies of the QK norms and the routing's index tensors
(:func:`fake_tracker.hf_differences`); with them memsym agrees to 0.01 %, as for the dense
models.
"""

import pytest

from fake_tracker import tracker_marks, check_against_tracker

pytestmark = tracker_marks()     # skips the module without torch and transformers

MOE = [
    ("qwen3-30b-a3b", 2, 8, 1, 4096, "none"),
    ("qwen3-30b-a3b", 2, 8, 2, 4096, "none"),
    ("qwen3-30b-a3b", 3, 8, 1, 4096, "none"),
    ("qwen3-30b-a3b", 2, 32, 1, 8192, "none"),
    ("qwen3-30b-a3b", 2, 128, 2, 8192, "none"),
    ("qwen3-30b-a3b", 2, 8, 1, 4096, "full"),
    ("qwen3-30b-a3b", 2, 16, 1, 8192, "full"),
    ("qwen3-30b-a3b", 2, 64, 1, 4096, "full"),
]


@pytest.mark.parametrize("name,layers,world,batch,seq,recompute", MOE)
def test_moe_peak_matches_the_tracker(name, layers, world, batch, seq, recompute):
    got = check_against_tracker(name, layers, world, batch, seq, recompute)
    # the experts are memsym's expert terms: sharded with the block over all d ranks
    assert got["terms"]["expert_weights"] > got["terms"]["weights"]
