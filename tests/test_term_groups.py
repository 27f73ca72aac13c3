"""Every term of a per-GPU total belongs to one of the report's groups (memsym.groups), so the
report's rows add up to the peak it judges: a term under a key no group lists would count in
the peak phase and the verdict but vanish from the printed activations and total (as the BF16
layers' saved inputs once did).  Checked over jobs that switch on the optional terms: LoRA,
MoE, FP8 with BF16 end layers, MLA with MTP, DeepSpeed ZeRO-3, torchtitan, CUDA graphs,
context parallelism, offloading, pipeline stages."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from memsym.cli import main
from memsym.groups import (ACTIVATION_KEYS, ALLOWANCE_KEYS, BUFFER_KEYS, STATE_KEYS,
                           TRANSIENT_KEYS)
from memsym.training.totals import OUTSIDE_ALLOCATOR_KEYS

GROUPED = set(STATE_KEYS) | set(ACTIVATION_KEYS) | set(BUFFER_KEYS) | set(ALLOWANCE_KEYS) \
    | set(OUTSIDE_ALLOCATOR_KEYS) | set(TRANSIENT_KEYS)

JOBS = {
    "dense": ["llama3-8b", "--world-size", "8"],
    "tp-pp-selective": ["llama3-70b", "--tp", "8", "--pp", "4", "--world-size", "64",
                        "--sequence-parallel", "--recompute-granularity", "selective"],
    "moe-lora": ["qwen3-30b-a3b", "--ep", "8", "--world-size", "8", "--finetune", "lora"],
    "fp8-bf16-ends": ["mixtral-8x7b", "--ep", "8", "--world-size", "16", "--fp8-format",
                      "hybrid", "--fp8-recipe", "tensorwise", "--first-last-layers-bf16",
                      "--use-distributed-optimizer"],
    "mla-mtp-full": ["deepseek-v3", "--ep", "64", "--world-size", "64", "--recompute-granularity",
                     "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"],
    "deepspeed-zero3": ["llama2-7b", "--framework", "deepspeed", "--sharding", "zero3",
                        "--world-size", "8"],
    "torchtitan": ["llama3-8b", "--framework", "torchtitan", "--world-size", "8"],
    "cuda-graphs": ["llama3-8b", "--cuda-graph-impl", "transformer_engine", "--world-size", "8"],
    "cp-offload": ["llama3-8b", "--cp", "2", "--world-size", "8", "--offload", "optimizer"],
    # the first iteration's forward and backward lack the Adam moments the step makes: the step,
    # with no Terms of its own, is the peak (85.6 GB against 80.9 at the forward's end)
    "first-iteration-step": ["qwen3-30b-a3b", "--ep", "8", "--world-size", "8", "--seq-length",
                             "4096", "--global-batch-size", "8", "--first-iteration"],
    # a captured step: the optimizer phase's pool and Newton-Schulz workspace itemised
    "muon-full-iteration-graph": ["llama3-8b", "--world-size", "8", "--seq-length", "256",
                                  "--global-batch-size", "8", "--optimizer", "muon",
                                  "--cuda-graph-impl", "full_iteration"],
}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_term_is_grouped_and_the_rows_add_up(name):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(["estimate", *JOBS[name], "--gpu", "h100-80gb", "--json"])   # 0 or 1 (fits or not)
    out = json.loads(buf.getvalue())
    assert set(out["sources"]) - {"total"} <= GROUPED | {"activations", "transients"}, name
    assert out["bytes"]["activations"] == sum(out["activation_bytes"].values())
    assert out["bytes"]["total"] == out["phases"][out["phases"]["peak"]]
    # the transients row is the peak phase's own Terms (and the activations it frees), summed
    # apart from the total's max over the phases
    assert out["bytes"].get("transients", 0) == sum(p["bytes"] for p in out["peak_parts"]), name


#: The jobs above as the library's job() takes them, for the held rows.
LIBRARY_JOBS = {
    "first-iteration-step": ("qwen3-30b-a3b", dict(ep=8, world_size=8, seq_length=4096,
                                                   global_batch_size=8, first_iteration=True)),
    "muon-full-iteration-graph": ("llama3-8b", dict(world_size=8, seq_length=256,
                                                    global_batch_size=8, optimizer="muon",
                                                    cuda_graph_impl="full_iteration")),
    "torchtitan": ("llama3-8b", dict(framework="torchtitan", world_size=8)),
    "cuda-graphs": ("llama3-8b", dict(cuda_graph_impl="transformer_engine", world_size=8)),
}


@pytest.mark.parametrize("name", sorted(LIBRARY_JOBS))
def test_the_held_rows_are_the_total_and_none_is_negative(name):
    """The stacked bars' rows (TrainingEstimate.held: the transients placed) add up to the
    total, each >= 0, and the first iteration's step holds the moments its forward lacked."""
    from memsym.job import job
    from memsym.training.estimate import job_memory

    model, kw = LIBRARY_JOBS[name]
    est = job_memory(job(model, **kw))
    held = est.held()
    assert sum(v for k, v in held.items() if k != "total") == held["total"] == est.bytes_total
    assert all(v >= 0 for v in held.values()), held
    parts = sum((val for _, _, val in est.peak_parts), 0)
    assert parts == est.grouped().get("transients", 0)
    if name == "first-iteration-step":
        assert est.phase == "optimizer" and est.bytes_total == est.phases()["optimizer"]


def test_the_terms_of_the_totals_are_grouped():
    """The same at the library's level: each Term key of the estimates' totals is listed."""
    from memsym.job import job
    from memsym.training.estimate import job_memory

    for kw in (dict(world_size=8), dict(tp=2, pp=2, world_size=8, sequence_parallel=True),
               dict(world_size=8, precision="fp8", fp8_recipe="tensorwise",
                    bf16_layers=(1, 1), sharding="distributed-optimizer")):
        keys = {t.key for t in job_memory(job("llama3-8b", **kw)).total.terms}
        assert keys <= GROUPED, sorted(keys - GROUPED)
