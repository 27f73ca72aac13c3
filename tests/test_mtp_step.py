"""Step time of multi-token prediction (MTP) without a custom pipeline layout.

Megatron-LM puts every MTP layer on the last pipeline stage unless a
``--pipeline-model-parallel-layout`` places it (megatron/core/transformer/
multi_token_prediction.py ``mtp_on_this_rank`` / ``get_mtp_num_layers_to_build``, rev
d98e8a64dd).  Each MTP depth runs one ``TransformerLayer`` of the decoder's spec, its
``eh_proj`` (a column-parallel ``2h -> h`` linear, ``MultiTokenPredictionLayer.__init__``),
the embedding of the shifted tokens (``_get_embeddings``) and one more output layer + loss
(``process_mtp_loss``).  A layout spelling the even (or first / last) split with the MTP
layer beside the loss is the same job, and prices the same.
"""

from __future__ import annotations

import dataclasses

import pytest

from memsym.hardware import gpu
from memsym.job import job
from memsym.model import preset
from memsym.timing.efficiency import gemm_time, memory_time
from memsym.timing.job_step import job_step_time
from memsym.timing.records import Settings
from memsym.timing.step import step_time_grid

_LAYER_PARTS = ("compute", "memory", "tp", "ep", "cp")


def _mtp_depth_by_hand(s, h, V):
    """One MTP depth's work beside its decoder layer on one H100, t = c = b = 1, bf16 [s]:
    eh_proj [s, 2h] x [2h, h] forward, dgrad [s, h] x [h, 2h] and wgrad [2h, s] x [s, h];
    the embedding lookup + gradient scatter (4 s h bytes); the output layer [s, h] x [h, V]
    forward (+ 6 bytes per fp32 logit) and its dgrad and wgrad (+ 10 bytes per logit);
    enorm, hnorm and final_layernorm each reading and writing the bf16 [s, h] (4 s h bytes)
    forward and 1.5 times that backward (MultiTokenPredictionLayer.__init__ :1157-1167,
    :1247 at d98e8a64dd; memsym's backward memory ratio)."""
    dev = gpu("h100")
    eh = (gemm_time(s, h, 2 * h, dev) + gemm_time(s, 2 * h, h, dev)
          + gemm_time(2 * h, h, s, dev))
    emb = memory_time(4 * s * h, dev)
    out = (gemm_time(s, V, h, dev) + memory_time(6 * s * V, dev)
           + gemm_time(s, h, V, dev) + gemm_time(h, V, s, dev) + memory_time(10 * s * V, dev))
    norms = (1 + 1.5) * 3 * memory_time(4 * s * h, dev)
    return eh + emb + out + norms


@pytest.mark.parametrize("p", [1, 2])
def test_mtp_layer_lengthens_the_last_stage_by_hand(p):
    r"""p = 2, layers 2 + 2, one MTP layer, 1F1B, m = 4 (the closed form, no simulation):
    the pipeline is :math:`m\,\tau_{\text{last}} + \tau_{\text{first}}` (bubble p - 1 = 1
    stage, the last stage the slower: it holds the output layer).  The MTP layer adds one
    decoder layer's forward + backward :math:`\ell` and one depth's eh_proj, embedding and
    output layer + loss :math:`x` to the last stage only, so the pipeline grows by
    :math:`m(\ell + x)`.  p = 1: the pipeline is :math:`m\,\tau` of the one stage, the same
    growth.  :math:`\ell` is the layer's share of the no-MTP breakdown (its parts over the
    busiest stage's m 4/p layers), :math:`x` from the shapes above."""
    arch = dataclasses.replace(preset("llama3-8b"), num_layers=4)
    s, m = 4096, 4
    kw = dict(p=p, m=m, settings=Settings(seq_length=s))
    base = step_time_grid(arch, "h100", **kw)
    mtp = step_time_grid(arch, "h100", mtp_layers=1, **kw)
    layers = 4 // p
    ell = sum(float(base[k]) for k in _LAYER_PARTS) / (m * layers)
    x = float(_mtp_depth_by_hand(s, 4096, 128256))
    grown = float(mtp["pipeline"]) - float(base["pipeline"])
    assert grown == pytest.approx(m * (ell + x), rel=1e-9)
    # the busiest stage's layer parts count the MTP layer: m (layers + 1) layers
    assert float(mtp["compute"]) / float(base["compute"]) == pytest.approx((layers + 1) / layers,
                                                                          rel=1e-12)


def test_no_mtp_layers_prices_as_before():
    # mtp_layers = 0 (the default) leaves the step alone, to the last bit
    arch = dataclasses.replace(preset("llama3-8b"), num_layers=4)
    kw = dict(p=2, m=4, settings=Settings(seq_length=4096))
    a, b = step_time_grid(arch, "h100", **kw), step_time_grid(arch, "h100", mtp_layers=0, **kw)
    assert all(float(a[k]) == float(b[k]) for k in a)


_SMALL = dict(num_layers=4, mtp_num_layers=1, pp=2, dp=2, seq_length=4096,
              global_batch_size=16, gpu="h100")


def test_even_split_and_its_layout_price_the_same_with_mtp():
    # p = 2, layers 2 + 2 and the MTP layer on the last stage, spelled both ways
    even = job_step_time(job("llama3-8b", **_SMALL))
    spelled = job_step_time(job("llama3-8b", pipeline_model_parallel_layout="Ett|ttmL", **_SMALL))
    assert spelled.total == pytest.approx(even.total, rel=1e-12)
    assert spelled.parts == pytest.approx(even.parts, rel=1e-12)
    # and the MTP layer costs something: the model without it is faster
    plain = job_step_time(job("llama3-8b", **{**_SMALL, "mtp_num_layers": 0}))
    assert plain.total < even.total


def test_one_stage_prices_the_mtp_layer_with_or_without_a_layout():
    kw = {**_SMALL, "pp": 1, "dp": 4}
    even = job_step_time(job("llama3-8b", **kw))
    spelled = job_step_time(job("llama3-8b", pipeline_model_parallel_layout="EttttmL", **kw))
    plain = job_step_time(job("llama3-8b", **{**kw, "mtp_num_layers": 0}))
    assert spelled.total == even.total and spelled.parts == even.parts
    assert plain.total < even.total


def test_deepseek_v3_first_last_split_and_the_bridge_layout_price_the_same():
    # Megatron-Bridge's DeepSeek-V3 layout on 16 ranks (recipes/deepseek/h100/deepseek_v3.py
    # _get_deepseek_v3_pipeline_layout at 067f987df0): 4 layers on the first rank, 4 on each
    # middle one, 1 and the MTP layer on the last; Megatron's first / last sizes 4 and 1 with
    # the MTP layer on the last stage build the same model
    kw = dict(p=16, d=1, e=1, seq_length=4096, global_batch_size=64, gpu="h100")
    split = job_step_time(job("deepseek-v3", first_stage_layers=4, last_stage_layers=1, **kw))
    spelled = job_step_time(job("deepseek-v3",
                                pipeline_model_parallel_layout="Et*4|(tttt|)*14,tmL", **kw))
    assert spelled.total == pytest.approx(split.total, rel=1e-12)
    assert spelled.parts == pytest.approx(split.parts, rel=1e-12)


def test_search_rows_price_the_mtp_layer_as_the_estimate_does():
    # a search row of a model with an MTP layer is the estimate of that job (memsym.search's
    # grid prices the MTP layer on the last stage as step_time does)
    from memsym.search import launch_overlaps, search
    from memsym.timing.step import step_time

    arch = dataclasses.replace(preset("llama3-8b"), mtp_num_layers=1)
    res = search(arch, "h100-80gb", 8, seq_length=4096, global_batch_size=32, pp=[1, 2],
                 tp=[2], sharding=["distributed-optimizer"], recompute=["none"])
    rows = [res.row(i) for i in range(len(res))]
    assert {r["p"] for r in rows} == {1, 2}
    for r in rows[:6]:
        j = job(arch, t=r["t"], p=r["p"], c=r["c"], d=r["d"], e=r["e"],
                v=r["v"] if r["v"] > 1 else None, micro_batch_size=r["b"], recompute="none",
                sharding=r["sharding"], sequence_parallel=r["sequence_parallel"],
                first_stage_layers=r["first_stage_layers"],
                last_stage_layers=r["last_stage_layers"], gpu="h100-80gb", seq_length=4096,
                global_batch_size=32, **launch_overlaps("megatron", r["sharding"]))
        assert step_time(j.model, j.layout, j.training, "h100-80gb").total == \
            pytest.approx(r["step_time"], rel=1e-9), r


def _mtp_growth(moe_layer_freq):
    # one stage, m = 4: the pipeline is m tau, so one MTP layer grows it by m (its layer + x)
    arch = dataclasses.replace(preset("mixtral-8x7b"), num_layers=4,
                               moe_layer_freq=moe_layer_freq)
    kw = dict(p=1, m=4, settings=Settings(seq_length=4096))
    return float(step_time_grid(arch, "h100", mtp_layers=1, **kw)["pipeline"]) \
        - float(step_time_grid(arch, "h100", **kw)["pipeline"])


@pytest.mark.parametrize("mixed, alike, other", [
    ((0, 1, 1, 1), (1, 1, 1, 1), (0, 0, 0, 0)),     # DeepSeek-V3's kind: dense first, MoE last
    ((1, 1, 1, 0), (0, 0, 0, 0), (1, 1, 1, 1)),     # the last layer dense
])
def test_mtp_layer_runs_the_last_layers_kind(mixed, alike, other):
    # Megatron-LM builds each MTP layer's TransformerLayer from the decoder block's last layer
    # spec (get_gpt_mtp_block_spec_for_backend, models/gpt/gpt_layer_specs.py at d98e8a64dd):
    # its cost is the last layer's kind's, whatever the other layers are, so a mixed model's
    # MTP layer costs what it costs in the model whose every layer is of that kind (where the
    # mean layer is that kind); eh_proj, embedding and output layer are the same in all three
    grown = _mtp_growth(mixed)
    assert grown == pytest.approx(_mtp_growth(alike), rel=1e-12)
    assert grown != pytest.approx(_mtp_growth(other), rel=1e-3)     # not the other kind's
