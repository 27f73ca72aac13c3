"""The MoE dispatcher's row copies priced as gathers (memsym.timing.moe_copies, issue 31).

Every expected value is derived here by hand from the published measurement (tile-ai/TileOPs
PR #2125, Benchmark, MoePrePermuteFwdOp on an NVIDIA H200, bf16) and from the dispatchers'
source at Megatron-LM d98e8a64dd, never copied from memsym's output.
"""

import pytest

from memsym.hardware import KERNEL_FRACTION, cluster, kernel_fraction
from memsym.model import preset
from memsym.timing import moe, moe_copies
from memsym.timing.flex_dispatch import destinations_per_token
from memsym.timing.gemm import layer_gemms, shape_of


def test_gather_fraction_is_the_published_permute_rate():
    # PR #2125's row (tokens 4096, top_k 8, experts 128, hidden 7168): 0.220384 ms, printed as
    # 2.399 TB/s; its byte count is (4096 + 4096 x 8) rows x 7168 x 2 bytes = 528,482,304
    # bytes, 2.398 TB/s at the printed time: the printed rate counts each token row read once
    moved = (4096 + 4096 * 8) * 7168 * 2
    assert moved / 0.220384e-3 / 1e12 == pytest.approx(2.399, abs=1e-3)
    # against the H200 datasheet's 4.8 TB/s, measured on the hopper class; every class takes it
    assert kernel_fraction("gather") == pytest.approx(2.399 / 4.8, rel=1e-12)
    assert KERNEL_FRACTION["gather"][0] == "hopper"


def test_measured_permute_is_priced_at_its_measured_time():
    # the measured kernel alone on the H200 (no router: E = 0; one local expert: no sort); the
    # unpermute mirrors the permute's rows, so half of the gathered seconds is the permute:
    # 528,482,304 bytes at 2.399 TB/s = 0.2203 ms (the PR prints 0.220384 ms)
    t = float(moe_copies.dispatch_seconds(4096, 32768, 32768, 7168, 0, 1, "h200"))
    assert t / 2 == pytest.approx((4096 + 32768) * 7168 * 2 / 2.399e12, rel=1e-12)
    assert t / 2 == pytest.approx(0.220384e-3, rel=2e-3)


def test_router_streams_at_the_datasheet_rate():
    # the router's 15 bytes per logit are a streaming pass, not a gather: no rows moved
    # (0 sent, 0 received, 0 tokens landed) leaves 15 x 1000 x 8 bytes at 3.35 TB/s (H100)
    t = float(moe_copies.dispatch_seconds(1000, 0, 0, 10, 8, 1, "h100", landed=0))
    assert t == pytest.approx(15 * 1000 * 8 / 3.35e12, rel=1e-12)


def test_flex_dispatcher_permutes_the_landed_tokens_without_a_chunk_sort():
    # MoEFlexTokenDispatcher (token_dispatcher.py at d98e8a64dd): DeepEP's dispatch lands each
    # token once on every EP rank its experts sit on, then get_permuted_hidden_states_by_experts
    # permutes the landed tokens into the local experts' rows and
    # get_restored_hidden_states_by_experts gathers them back; HybridEP does both inside
    # dispatch_with_permute / combine_with_unpermute; no sort_chunks_by_idxs either way.
    # Qwen3-30B-A3B (h 2048, top-8 of 128) at EP 8 in one DGX-B200, 4,096 tokens, bf16: a
    # token misses one rank's 16 experts with probability C(112, 8) / C(128, 8), so it lands
    # on 8 x (1 - that) ranks; this GPU's experts receive 32,768 rows
    from math import comb
    R = 8 * (1 - comb(112, 8) / comb(128, 8))
    assert float(destinations_per_token(128, 8, 8)) == pytest.approx(R, rel=1e-12)
    T, rows = 4096, 4096 * 8
    x = shape_of(preset("qwen3-30b-a3b"))
    gemms = layer_gemms(x, 4096, 1, 1, 1, 8, moe=True)
    flex = moe.moe_layer_extras(gemms, T, 8, 8, 1, cluster("dgx-b200"), "b200", "bf16",
                                dispatcher="hybridep")
    a2a = moe.moe_layer_extras(gemms, T, 8, 8, 1, cluster("dgx-b200"), "b200", "bf16")
    gather = 8e12 * 2.399 / 4.8
    router = 15 * T * 128 / 8e12
    flex_rows = 2 * 2048 * (T * R + rows + rows + T * R)
    a2a_rows = 2 * 2048 * ((T + rows) + 4 * rows + (rows + T))
    # bf16: no cast, no eager pass; the backward's copies mirror the forward's
    assert float(flex[4]) == pytest.approx(router + flex_rows / gather, rel=1e-12)
    assert float(a2a[4]) == pytest.approx(router + a2a_rows / gather, rel=1e-12)
    assert float(flex[5]) == float(flex[4])
