"""The MoE host floor is a forward-only floor (memsym.timing.moe_host).

Megatron-core's dispatchers wait on the host in the forward's dispatch only
(token_dispatcher.py ``_maybe_dtoh_and_synchronize``, ``_HybridEPManager.dispatch``:
``tokens_per_expert.sum()``); the backward reuses the split sizes saved in the autograd
context (tensor_parallel/mappings.py ``_AllToAll.backward``; moe/fused_a2a.py
``HybridEPDispatch.backward``, ``HybridEPCombine.backward``, Megatron-LM d98e8a64dd), so
raising the host time H lengthens each MoE layer's forward only, by the same amount, once
every layer's forward sits below it.  Under the EP overlap's combined 1F1B the backward is
issued between the forward's syncs, and the floor holds on the forward-backward pair.
"""

import pytest

from memsym.model import preset
from memsym.timing import moe_host
from memsym.timing.records import Overlap, Settings
from memsym.timing.step import step_time_grid


def _qwen_step(m, ep_a2a=False):
    # Qwen3-30B-A3B (48 layers, every one MoE) on 8 B200s, EP 8, MBS 1, no PP, nothing else
    # overlapped: the step is the m micro-batches' forward + backward of the 48 layers plus
    # what does not depend on H (embedding, output layer, optimizer)
    st = Settings(seq_length=4096, micro_batch_size=1, sequence_parallel=False)
    ov = Overlap(grad_reduce=False, param_gather=False, ep_a2a=ep_a2a)
    return float(step_time_grid(preset("qwen3-30b-a3b"), "b200", t=1, p=1, d=8, e=8, m=m,
                                settings=st, overlap=ov)["step"])


def test_host_time_adds_once_per_layer_and_micro_batch(monkeypatch):
    # with H = 1 s and 2 s every layer's forward is floored (its GPU work is milliseconds), so
    # by hand the step grows by (2 - 1) s x 48 MoE layers x m micro-batches: once per layer
    # and micro-batch (the forward), not twice (a floor on the backward as well)
    layers, m = 48, 3
    steps = {}
    for host in (1.0, 2.0):
        monkeypatch.setattr(moe_host, "MOE_LAYER_HOST", host)
        steps[host] = _qwen_step(m)
    assert steps[2.0] - steps[1.0] == pytest.approx((2.0 - 1.0) * layers * m, rel=1e-9)


def test_host_floor_is_the_forward_max():
    # t_fwd = max(G, H): a forward of 3 ms under a 6.8 ms host floor waits 3.8 ms, one of
    # 9 ms none; the growth of a floored forward by 1 ms of GPU work is 0 below the floor
    got = moe_host.host_exposed([3e-3, 9e-3], 6.8e-3)
    assert [round(float(x), 6) for x in got] == [3.8e-3, 0.0]
    assert float(moe_host.floored_growth(3e-3, 1e-3, 6.8e-3)) == pytest.approx(0.0, abs=1e-15)
    assert float(moe_host.floored_growth(9e-3, 1e-3, 6.8e-3)) == pytest.approx(1e-3)


def test_combined_1f1b_exposes_the_backward_host_time(monkeypatch):
    # Under the EP overlap, combined 1F1B (combined_1f1b.py, TransformerLayerSchedulePlan.run
    # at d98e8a64dd) runs the first micro-batch's forward alone, then m - 1 pairs of one
    # micro-batch's forward beside another's backward, issued from one thread between the
    # forward's syncs, then the last backward alone.  With every layer host-bound (H = 1 s,
    # 2 s against milliseconds of GPU work), by hand per MoE layer: H (the lone forward)
    # + (m - 1) x 2H (the pairs, the backward's host time H too) + 0 (the lone backward:
    # nothing syncs) = (2m - 1) H, so the step grows by 48 x (2m - 1) x 1 s
    layers, m = 48, 3
    steps = {}
    for host in (1.0, 2.0):
        monkeypatch.setattr(moe_host, "MOE_LAYER_HOST", host)
        steps[host] = _qwen_step(m, ep_a2a=True)
    assert steps[2.0] - steps[1.0] == pytest.approx((2.0 - 1.0) * layers * (2 * m - 1),
                                                    rel=1e-9)


def test_pair_floor_by_hand():
    # max(G_f + G_b, 2H) - (G_f + G_b): H = 6.7 ms; a pair of 3 + 4 ms waits 13.4 - 7 =
    # 6.4 ms, one of 5 + 9 = 14 ms none (the forward-only floor would wait 1.7 ms there)
    got = moe_host.paired_host_exposed([3e-3, 5e-3], [4e-3, 9e-3], 6.7e-3)
    assert [round(float(x), 9) for x in got] == [6.4e-3, 0.0]
    # alone, a 3 ms forward with 1 ms of all-to-all unhidden waits for H: 6.7 ms, and its
    # backward (4 + 1 ms) has no floor: 11.7 ms against the pair's 13.4 ms, -1.7 ms; above
    # every floor (9 + 14 ms) the lone passes add just the 2 ms of all-to-alls
    grow = moe_host.unpaired_growth([3e-3, 9e-3], [4e-3, 14e-3], 1e-3, 1e-3, 6.7e-3)
    assert [round(float(x), 9) for x in grow] == [-1.7e-3, 2e-3]
