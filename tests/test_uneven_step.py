"""Step time of uneven pipeline layouts (issue 31): each rank's, each chunk's own layers.

Megatron-LM builds ``get_num_layers_to_build`` decoder layers on chunk j of rank r
(megatron/core/transformer/transformer_block.py, and
pipeline_parallel_layer_layout.py for ``--pipeline-model-parallel-layout``, rev d98e8a6), the
embedding in the first virtual stage and the output layer in the last (training/training.py
``get_model``: ``pre_process`` / ``post_process``).  The schedule's makespan then follows the
slowest stage, not the stages' mean.  Hand-traced schedules pin the simulator with per-rank
and per-chunk durations; a layout spelling an even or first/last split prices as the job
without one.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.model import preset
from memsym.model.pipeline_layout import PipelineLayout
from memsym.terms.pipeline_order import simulate
from memsym.timing.job_step import job_step_time
from memsym.timing.pipeline import chunk_times, simulated_pipeline
from memsym.timing.records import Settings
from memsym.timing.step import step_time_grid

#: Layer counts of the hand-derived 1F1B case: 4 stages of 3, 5, 5, 3 layers.
LAYERS = (3, 5, 5, 3)


def test_one_f_one_b_makespan_of_3_5_5_3_by_hand():
    r"""1F1B on 4 ranks of 3, 5, 5, 3 layers, a layer's forward 1 and backward 2 (units):
    f = (3, 5, 5, 3), b = (6, 10, 10, 6), tau = f + b = (9, 15, 15, 9).

    Megatron's order (schedules.py ``forward_backward_pipelining_without_interleaving``):
    rank r runs min(p - r - 1, m) warm-up forwards, then F(k+1) B(k) pairs, then the
    cool-down backwards.

    * m = 1: the micro-batch goes down and back once: sum(f) + sum(b) = 16 + 32 = 48.
    * m = 2, traced: rank 0 F0 [0,3] F1 [3,6]; rank 1 F0 [3,8] F1 [8,13]; rank 2 F0 [8,13]
      F1 [13,18]; rank 3 F0 [13,16] B0 [16,22] F1 [22,25] B1 [25,31]; rank 2 B0 [22,32]
      B1 [32,42]; rank 1 B0 [32,42] B1 [42,52]; rank 0 B0 [42,48] B1 [52,58]: 58.
    * m >= 2 in general: micro-batch 0 reaches rank 3 at 3 + 5 + 5 = 13 and comes back to
      rank 2 at 13 + 3 + 6 = 22 (rank 2 meanwhile ran F1, [13,18]).  From 22 rank 2 never
      idles: rank 3 returns each B(k) within f3 + b3 = 9 of F(k), under rank 2's 10 of
      B(k-1), and rank 1, as loaded (15 per micro-batch) and two warm-ups ahead, hands over
      F(k) as rank 2 ends B(k-2) (m = 4 traced: rank 1 F2 [13,18], F3 [42,47]; rank 2 B0
      [22,32] F2 [32,37] B1 [37,47] F3 [47,52] B2 [52,62] B3 [62,72]).  Rank 2 runs its m
      backwards and its m - 2 remaining forwards, 10 m + 5 (m - 2) = 15 m - 10, to
      15 m + 12; B(m-1) then drains through rank 1 (10) and rank 0 (6):

      makespan = 15 m + 28 = (m - 1) max(tau) + 43.

      The (m - 1) max(tau) + sum(tau) = 15 (m - 1) + 48 of a pipeline whose fill does not
      overlap is 5 above it: rank 2's F1 runs while micro-batch 0 is still in rank 3.
    """
    f = list(LAYERS)
    b = [2 * n for n in LAYERS]
    assert simulate(4, 1, forward=f, backward=b).makespan == 48
    assert simulate(4, 2, forward=f, backward=b).makespan == 58
    for m in range(2, 13):
        sim = simulate(4, m, forward=f, backward=b)
        assert sim.makespan == 15 * m + 28, m
        assert sim.makespan <= (m - 1) * 15 + 48
        assert sim.busy == 15 * m            # the busiest rank's work
    # the same through the step's per-chunk durations (unit layer times, no end layers, no
    # p2p): chunk_times then the simulation, seconds in floats
    fw, bw = chunk_times(Settings(), tuple((n,) for n in LAYERS), 1.0, 2.0, 0.0, 0.0, 0.0, 0.0)
    assert fw == [[3.0], [5.0], [5.0], [3.0]] and bw == [[6.0], [10.0], [10.0], [6.0]]
    tau = {"first": (3.0, 6.0), "middle": (5.0, 10.0), "last": (3.0, 6.0)}
    got = simulated_pipeline(Settings(), np.array(0.0), tau, 0.0, np.array(4), np.array(4),
                             np.array(1), (fw, bw))
    assert float(got) == 88.0


def test_interleaved_uneven_chunks_by_hand():
    """p = 2, v = 2, m = 2, layout ``Et|tt|tt|tL``: rank 0's chunks hold 1 and 2 layers,
    rank 1's 2 and 1 (virtual stages 0..3 = r0c0, r1c0, r0c1, r1c1); a layer's forward 1,
    backward 2.  Megatron's interleaved order (get_schedule_table, warm-up 2 (p - r - 1) +
    (v - 1) N with N = p = 2): rank 0 F0c0 F1c0 F0c1 F1c1 B0c1 B1c1 B0c0 B1c0; rank 1 F0c0
    F1c0 F0c1 B0c1 F1c1 B1c1 B0c0 B1c0.  Traced:

    rank 0: F0c0 [0,1] F1c0 [1,2] F0c1 [3,5] F1c1 [5,7] B0c1 [8,12] B1c1 [12,16] B0c0 [16,18]
            B1c0 [20,22]
    rank 1: F0c0 [1,3] F1c0 [3,5] F0c1 [5,6] B0c1 [6,8] F1c1 [8,9] B1c1 [9,11] B0c0 [12,16]
            B1c0 [16,20]

    makespan 22.  Spread evenly over the chunks (each rank's 3 layers as 1.5 + 1.5, the
    whole-stage model) the same schedule takes 45/2.
    """
    sim = simulate(2, 2, 2, forward=[(1, 2), (2, 1)], backward=[(2, 4), (4, 2)])
    assert sim.makespan == 22
    assert sim.busy == 2 * (3 + 6)
    assert simulate(2, 2, 2, forward=[3, 3], backward=[6, 6]).makespan == Fraction(45, 2)
    # the layout reads those chunks
    lay = PipelineLayout.from_spec("Et|tt|tt|tL", 2)
    assert [lay.chunk_layers(r) for r in range(2)] == [(1, 2), (2, 1)]


def test_chunk_durations_follow_megatrons_account_for_split():
    """Llama 3 405B on 16 ranks, v = 4, both account-for switches: (126 + 2)/16 = 8 per rank,
    2 per chunk, one fewer in rank 0's first chunk (beside the embedding) and rank 15's last
    (beside the output layer) (transformer_block.py get_num_layers_to_build).  A layer's
    forward 1, backward 2; the embedding 0.5 [forward]; the output layer 3 forward, 6 backward:
    rank 0 chunk 0 = 1 + 0.5, rank 15 chunk 3 = 1 + 3 forward, 2 + 6 backward; all others 2, 4.
    """
    lay = PipelineLayout.from_account_flags(126, 16, 4, embedding=True, loss=True)
    chunks = tuple(lay.chunk_layers(r) for r in range(16))
    fw, bw = chunk_times(Settings(), chunks, 1.0, 2.0, 0.5, 3.0, 6.0, 0.0)
    assert fw[0] == [1.5, 2.0, 2.0, 2.0] and bw[0] == [2.0, 4.0, 4.0, 4.0]
    assert fw[15] == [2.0, 2.0, 2.0, 4.0] and bw[15] == [4.0, 4.0, 4.0, 8.0]
    assert all(fw[r] == [2.0] * 4 and bw[r] == [4.0] * 4 for r in range(1, 15))
    # the exposed p2p of one stage-micro-batch (v passes) is one pass's per chunk
    fw, _ = chunk_times(Settings(), chunks, 1.0, 2.0, 0.0, 0.0, 0.0, 0.4)
    assert fw[5] == pytest.approx([2.1] * 4)


def test_simulate_refuses_bad_chunk_durations():
    with pytest.raises(InvalidValueError, match="one per chunk"):
        simulate(2, 2, 2, forward=[(1, 2, 3), (1, 1)], backward=[2])
    with pytest.raises(InvalidValueError, match="one per chunk"):
        simulate(2, 2, 2, forward=[(0, 0), (1, 1)], backward=[2])
    # an empty chunk (a virtual stage of the embedding alone) is fine
    assert simulate(2, 2, 2, forward=[(0, 1), (1, 1)], backward=[(0, 2), (2, 2)]).makespan > 0
    # the step's chunk layers describe one layout: p ranks of v chunks
    with pytest.raises(InvalidValueError, match="p ranks of v chunks"):
        step_time_grid(preset("llama3-8b"), "h100", p=4, m=8, chunk_layers=((8,), (8,), (16,)))
    with pytest.raises(InvalidValueError, match="p ranks of v chunks"):
        step_time_grid(preset("llama3-8b"), "h100", p=[2, 4], m=8, chunk_layers=((16,), (16,)))


_LLAMA8 = dict(p=4, d=2, seq_length=4096, global_batch_size=64, gpu="h100")


def test_layout_spelled_as_the_even_or_first_last_split_prices_the_same():
    # one chunk per rank: the layout's per-rank path and the even / first-last path are two
    # computations of one schedule (Megatron builds the same layers either way)
    even = job_step_time(job("llama3-8b", **_LLAMA8))
    spelled = job_step_time(job("llama3-8b", pipeline_model_parallel_layout="Et*8|t*8|t*8|t*8L",
                                **_LLAMA8))
    assert spelled.total == even.total and spelled.parts == even.parts
    ends = job_step_time(job("llama3-8b", first_stage_layers=6, last_stage_layers=6, **_LLAMA8))
    spelled = job_step_time(job("llama3-8b", pipeline_model_parallel_layout="Et*6|t*10|t*10|t*6L",
                                **_LLAMA8))
    assert spelled.total == ends.total and spelled.parts == ends.parts


def test_heaviest_middle_rank_governs_the_step():
    # 6, 6, 14, 6 layers: the busiest stage holds 14 layers (before: the middle ranks' mean,
    # 10).  Its compute part is that stage's m 14 layers against the even split's m 8 (the
    # same layer), and the pipeline runs at least m micro-batches through it (1F1B's steady
    # state): m 14 (forward + backward of a layer) <= pipeline
    even = job_step_time(job("llama3-8b", **_LLAMA8))
    heavy = job_step_time(job("llama3-8b", pipeline_model_parallel_layout="Et*6|t*6|t*14|t*6L",
                              **_LLAMA8))
    m = even.assumptions["microbatches"]
    assert heavy.parts["compute"] / even.parts["compute"] == pytest.approx(14 / 8, rel=1e-12)
    layer = sum(even.parts[k] for k in ("compute", "memory", "tp", "ep", "cp")) / (m * 8)
    assert heavy.parts["pipeline"] >= m * 14 * layer
    assert heavy.total > even.total


#: Jobs without a custom layout and the ``--pipeline-model-parallel-layout`` that spells
#: the same split (Megatron builds the same model: transformer_block.py
#: get_num_layers_to_build and pipeline_parallel_layer_layout.py at d98e8a6, the embedding in
#: the first virtual stage, the loss in the last): even 1F1B, GPipe, MoE with full
#: recompute, Megatron's first/last sizes, one stage.
SPELLED = {
    "llama3-8b p4": (dict(model="llama3-8b", **_LLAMA8), "Et*8|t*8|t*8|t*8L"),
    "llama3-70b p8 gpipe": (dict(model="llama3-70b", t=4, p=8, d=1, sequence_parallel=True,
                                 seq_length=4096, global_batch_size=12, gpu="h100",
                                 schedule="gpipe"), "Et*10|(t*10|)*6,t*10L"),
    "llama3-405b p16 7/7": (dict(model="llama3-405b", t=8, p=16, first_stage_layers=7,
                                 last_stage_layers=7, sequence_parallel=True, seq_length=8192,
                                 global_batch_size=32, gpu="h100"), "Et*7|(t*8|)*14,t*7L"),
    "mixtral p4 e8": (dict(model="mixtral-8x7b", t=2, p=4, e=8, d=8, sequence_parallel=True,
                           seq_length=4096, global_batch_size=256, gpu="h100", recompute="full"),
                      "Et*8|t*8|t*8|t*8L"),
    "llama3-8b p1": (dict(model="llama3-8b", t=2, d=4, seq_length=4096, global_batch_size=32,
                          gpu="h100"), "Et*32L"),
}


def _without_split(kw: dict) -> dict:
    return {k: v for k, v in kw.items() if k not in ("first_stage_layers", "last_stage_layers")}


@pytest.mark.parametrize("name", sorted(SPELLED))
def test_a_layout_spelling_the_split_prices_as_the_job_without_one(name):
    # the same ranks holding the same layers, the embedding on the first and the loss on the
    # last: the per-chunk path (the layout) and the per-stage path (first / middle / last)
    # are one schedule of the same durations, to the last bit
    kw, layout = SPELLED[name]
    kw = dict(kw)
    model = kw.pop("model")
    plain = job_step_time(job(model, **kw))
    spelled = job_step_time(job(model, pipeline_model_parallel_layout=layout,
                                **_without_split(kw)))
    assert (spelled.total, spelled.bubble) == (plain.total, plain.bubble)
    assert spelled.parts == plain.parts


def test_account_for_embedding_and_loss_is_first_last_seven():
    # --account-for-embedding/loss-in-pipeline-split on Llama 3 405B, p = 16: Megatron counts
    # the embedding and the loss as one layer each, (126 + 2) / 16 = 8 per stage, so the
    # first and the last stage build 8 - 1 = 7 decoder layers (transformer_block.py
    # get_num_layers_to_build): the job of first / last sizes 7 and 7
    kw = dict(model="llama3-405b", t=8, p=16, sequence_parallel=True, seq_length=8192,
              global_batch_size=32, gpu="h100")
    model = kw.pop("model")
    account = job_step_time(job(model, account_for_embedding_in_pipeline_split=True,
                                account_for_loss_in_pipeline_split=True, **kw))
    sizes = job_step_time(job(model, first_stage_layers=7, last_stage_layers=7, **kw))
    assert (account.total, account.bubble, account.parts) == (sizes.total, sizes.bubble,
                                                               sizes.parts)


def test_interleaved_layout_moves_only_the_end_layers_chunk():
    # Llama 3 70B, p = 4, v = 5: 20 virtual stages of 4 layers, spelled and not.  Every layer
    # part, the DP sync and the optimizer step are the same work; the layout runs the
    # embedding in the first virtual stage and the output layer in the last only, where the
    # per-stage path spreads them over a rank's v chunk passes, so the makespan moves by a
    # small share of the end layers' time (here under 1e-4 of the step), nothing else
    kw = dict(t=4, p=4, v=5, d=2, sequence_parallel=True, seq_length=4096,
              global_batch_size=64, gpu="h100")
    plain = job_step_time(job("llama3-70b", **kw))
    spelled = job_step_time(job("llama3-70b", pipeline_model_parallel_layout="Et*4|(t*4|)*18,t*4L",
                                **kw))
    for part in ("compute", "memory", "tp", "ep", "cp", "pp", "dp", "optimizer"):
        assert spelled.parts[part] == plain.parts[part], part
    assert spelled.total == pytest.approx(plain.total, rel=1e-4)


def test_mtp_layer_runs_as_one_more_decoder_layer_on_its_stage():
    r"""Megatron-LM's ``MultiTokenPredictionLayer`` (multi_token_prediction.py, rev d98e8a6)
    holds one ``TransformerLayer`` of the decoder's spec beside its norms and ``eh_proj``;
    the layout's ``m`` puts it in the loss's stage.  Layout ``Et|tmL``, p = 2, v = 1: rank 0
    runs 1 layer, rank 1 the decoder layer and the MTP layer, 2.

    1F1B on 2 ranks, a layer's forward 1 and backward 2, no end layers: f = (1, 2),
    b = (2, 4).  Rank 1 never idles once micro-batch 0 arrives at f0 = 1 (rank 0 hands over
    F(k+1) within b0 + f0 = 3 of B(k) reaching it, under rank 1's f1 + b1 = 6), so with m
    micro-batches the makespan is f0 + m (f1 + b1) + b0 = 1 + 6 m + 2; m = 4: 27.  Without
    the MTP layer both ranks hold 1 layer: (m - 1) 3 + (3 + 3) = 15.
    """
    lay = PipelineLayout.from_spec("Et|tmL", 2)
    assert [lay.chunk_layers(r) for r in range(2)] == [(1,), (1,)]
    assert [lay.chunk_timed_layers(r) for r in range(2)] == [(1,), (2,)]
    fw, bw = chunk_times(Settings(), ((1,), (2,)), 1.0, 2.0, 0.0, 0.0, 0.0, 0.0)
    assert fw == [[1.0], [2.0]] and bw == [[2.0], [4.0]]
    assert simulate(2, 4, forward=[1, 2], backward=[2, 4]).makespan == 27
    assert simulate(2, 4, forward=[1, 1], backward=[2, 2]).makespan == 15
    # DeepSeek-V3 on 16 ranks (Megatron-Bridge's layout, recipes/deepseek/h100/deepseek_v3.py
    # _get_deepseek_v3_pipeline_layout at 067f987df0): the last rank runs its decoder layer
    # and the MTP layer
    bridge = PipelineLayout.from_spec("Et*4|(tttt|)*14,tmL", 16)
    assert bridge.chunk_timed_layers(15) == (2,) and bridge.chunk_layers(15) == (1,)
    # the job's step: a last rank of 16 decoder layers (and the MTP layer) is the busiest, its
    # decoder layers' compute 16 mean layers' against the 4 of the Bridge layout's busiest
    # rank (m micro-batches each); the MTP layer adds one layer of the last layer's kind, an
    # MoE layer, dearer than the mean of DeepSeek-V3's 3 dense and 58 MoE layers
    kw = dict(p=16, d=1, e=1, seq_length=4096, global_batch_size=64, gpu="h100")
    four = job_step_time(job("deepseek-v3", pipeline_model_parallel_layout=bridge.text, **kw))
    heavy = job_step_time(job("deepseek-v3", pipeline_model_parallel_layout="Et*3|(ttt|)*14,t*16mL",
                              **kw))
    plain = job_step_time(job("deepseek-v3", mtp_num_layers=0,
                              pipeline_model_parallel_layout="Et*3|(ttt|)*14,t*16L", **kw))
    assert plain.parts["compute"] / four.parts["compute"] == pytest.approx(16 / 4, rel=1e-12)
    assert heavy.parts["compute"] - plain.parts["compute"] > four.parts["compute"] / 4
