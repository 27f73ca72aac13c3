"""CUDA graphs (issue 30): what Megatron-core's capture keeps, by hand from the source.

Megatron-LM d98e8a64dd: ``TECudaGraphHelper._get_sample_arguments`` (cuda_graphs.py:2322-2566)
gives each graphed layer and micro-batch in flight a static input, the bf16 hidden states
``[s/c (/t under SP), b, h]`` (module.py:256-271) and, when the attention is captured, a bool
mask ``[b, 1, s/c, s]`` (transformer_layer.py:1222-1232); the hidden states add to the eager
step only when the whole layer is one graph (the previous graph's output, which they copy, is
held in the pool until its backward: Transformer Engine graph.py:729, 883); ``FullCudaGraphWrapper``'s
``StaticBufferLoader`` (full_cuda_graph.py:99-182) keeps each of the step's micro-batches
(tokens, labels int64, loss_mask float32, position_ids int64, attention_mask bool [1, s, s],
gpt_dataset.py) on TP rank 0 of the first and last stages (pretrain_gpt.py:374-386), and
its pool stays reserved through the optimizer step.  The numbers below are worked out from
those shapes, not from memsym's formulas.
"""

from __future__ import annotations

import pytest
import sympy as sp

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.readers.jobs import megatron_job
from memsym.readers.megatron import read_megatron_args, read_megatron_overrides
from memsym.training import phase_totals, training_memory
from memsym.training.totals import resolved_stage_total

from tiny_megatron import tiny_megatron_job

GB64 = dict(seq_length=4096, world_size=8, global_batch_size=64)


def _bytes(j, stage, key):
    tot = resolved_stage_total(j, stage)
    return int(tot[key].expr.xreplace(training_memory(j).values)) if key in tot.keys else 0


def test_transformer_engine_inputs_by_hand():
    """Llama-2-7B (L 32, h 4096), s 4096, b 1, p 2: stage 0 holds 2 micro-batches x 16 layers
    = 32 layer passes in flight, each with 2 x 4096 x 4096 B of bf16 hidden states and
    4096 x 4096 B of mask: 32 x 50,331,648 = 1,610,612,736 B."""
    j = job("llama2-7b", pp=2, cuda_graph_impl="transformer_engine", **GB64)
    assert _bytes(j, 0, "cuda_graph_static_inputs") == 32 * (2 * 4096 * 4096 + 4096 * 4096)
    # stage 1 (last) holds one micro-batch of its 16 layers
    assert _bytes(j, 1, "cuda_graph_static_inputs") == 16 * (2 * 4096 * 4096 + 4096 * 4096)
    # the MLP alone captured: no mask, and its hidden input copies the eager attention's
    # output, which nothing else keeps: nothing beyond the eager step
    j = job("llama2-7b", pp=2, cuda_graph_impl="transformer_engine", cuda_graph_modules=("mlp",),
            **GB64)
    assert _bytes(j, 0, "cuda_graph_static_inputs") == 0
    # the attention alone: the masks only
    j = job("llama2-7b", pp=2, cuda_graph_impl="transformer_engine", cuda_graph_modules=("attn",),
            **GB64)
    assert _bytes(j, 0, "cuda_graph_static_inputs") == 32 * 4096 * 4096
    # TP 2 with SP halves the hidden states, not the mask
    j = job("llama2-7b", pp=2, tp=2, sequence_parallel=True, cuda_graph_impl="transformer_engine",
            **GB64)
    assert _bytes(j, 0, "cuda_graph_static_inputs") == 32 * (4096 * 4096 + 4096 * 4096)


def test_transformer_engine_moe_scope_graphs_moe_layers_only():
    """DeepSeek-V3 (61 layers, the first 3 dense), p 1: one micro-batch captured
    (cuda_graphs.py:2597-2603); with the attention all 61 layers are graphed, one mask each:
    61 x 4096^2 B; moe_router alone graphs the 58 MoE layers (_layer_is_graphable,
    :2134-2174), partial graphs without the mask: nothing beyond the eager step."""
    opts = dict(seq_length=4096, world_size=1024, ep=64, global_batch_size=1024)
    j = job("deepseek-v3", cuda_graph_impl="transformer_engine",
            cuda_graph_modules=("attn", "moe_router", "moe_preprocess"), **opts)
    assert _bytes(j, 0, "cuda_graph_static_inputs") == 61 * 4096 * 4096
    j = job("deepseek-v3", cuda_graph_impl="transformer_engine",
            cuda_graph_modules=("moe_router", "moe_preprocess"), **opts)
    assert _bytes(j, 0, "cuda_graph_static_inputs") == 0


def test_graphs_add_to_every_phase_and_the_total():
    """The static inputs are made before capture and kept: the total grows by them plus the
    fragmentation margin's 10 %, in every phase (the optimizer step too)."""
    base = job("llama2-7b", pp=2, **GB64)
    te = job("llama2-7b", pp=2, cuda_graph_impl="transformer_engine", **GB64)
    graph = 32 * 3 * 4096 * 4096
    assert training_memory(te).bytes_total - training_memory(base).bytes_total == \
        sp.Rational(11, 10) * graph
    vals = training_memory(te).values
    for ph, tot in phase_totals(te, 0).items():
        assert tot["cuda_graph_static_inputs"].expr.xreplace(vals) == graph, ph
    # the estimate's rows sum to the total (the graph buffers have their own row)
    grouped = training_memory(te).grouped()
    assert grouped["cuda_graph_static_inputs"] == graph
    assert sum(v for k, v in grouped.items() if k != "total") == grouped["total"]


def test_full_iteration_batches_and_pool_by_hand():
    """p 4, d 2, GBS 64, b 1: m = 32 micro-batches, each 4096 x (8 + 8 + 4 + 8) B of tokens,
    labels, loss mask and positions plus 4096^2 B of mask, on the first and last stages only;
    the pool holds the forward-backward's activations and transient peak in the optimizer
    phase (reserved and device counts), not in max_memory_allocated."""
    opts = dict(pp=4, seq_length=4096, world_size=8, global_batch_size=64)
    j = job("llama2-7b", cuda_graph_impl="full_iteration", **opts)
    per_mb = 4096 * 28 + 4096 * 4096
    assert [_bytes(j, i, "cuda_graph_static_batches") for i in range(4)] == \
        [32 * per_mb, 0, 0, 32 * per_mb]
    j = job("llama2-7b", cuda_graph_impl="full_iteration", batch_attention_mask=False, **opts)
    assert _bytes(j, 0, "cuda_graph_static_batches") == 32 * 4096 * 28
    vals = training_memory(j).values
    tots = phase_totals(j, 0)
    fwd, opt = (tots[ph] for ph in ("forward", "optimizer"))
    pool = opt["cuda_graph_pool"].expr.xreplace(vals)
    base = phase_totals(job("llama2-7b", batch_attention_mask=False, **opts), 0)
    acts = sum(t_.expr for t_ in base["forward"] if t_.key in ("layer_activations",
                                                                  "embedding_activations"))
    assert pool == acts.xreplace(vals)          # stage 0: no loss transient, the pool = A
    assert opt.evaluate(vals) == fwd.evaluate(vals)  # no step transient: the same peak
    # bf16 gradients: the step makes the fp32 main-gradient shard beside the held pool, and
    # the peak moves to the optimizer step by exactly that shard
    bf16 = job("llama2-7b", cuda_graph_impl="full_iteration", batch_attention_mask=False,
               grad_dtype="bf16", **opts)
    est = training_memory(bf16)
    tots = phase_totals(bf16, est.stage)
    step = sum(v_ for _, v_ in est.step_bytes)
    assert est.phase == "optimizer" and step > 0
    assert tots["optimizer"].evaluate(est.values) - tots["forward"].evaluate(est.values) == \
        sp.Rational(11, 10) * step
    alloc = job("llama2-7b", cuda_graph_impl="full_iteration", metric="allocated", **opts)
    assert "cuda_graph_pool" not in phase_totals(alloc, 0)["optimizer"].keys


def test_megatron_flags_reach_the_job():
    """arguments.py:611-641: --enable-cuda-graph is local, --external-cuda-graph
    transformer_engine, --cuda-graph-scope the old --cuda-graph-modules; "full_iteration" in
    the scope sets the impl (cuda_graph_config.py:10-13); :1235-1237 full_iteration needs
    --no-check-for-nan-in-loss-and-grad."""
    base = ("--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 1024 "
            "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16 "
            "--vocab-size 32000 --tokenizer-type NullTokenizer --world-size 1").split()
    j = megatron_job(read_megatron_args(base + ["--cuda-graph-impl", "transformer_engine",
                                                "--cuda-graph-modules", "attn"]))
    assert (j.training.memory.cuda_graph_impl, j.training.memory.cuda_graph_modules) == \
        ("transformer_engine", ("attn",))
    assert _bytes(j, 0, "cuda_graph_static_inputs") == 4 * 1024 * 1024   # 4 masks
    j = megatron_job(read_megatron_args(base + ["--external-cuda-graph"]))
    # by hand: 4 whole-layer graphs x (2 x 1024 x 256 + 1024^2) B
    assert _bytes(j, 0, "cuda_graph_static_inputs") == 4 * (2 * 1024 * 256 + 1024 * 1024)
    assert any("not counted" in n for n in j.notes)
    assert read_megatron_overrides(["--enable-cuda-graph"], num_layers=4).options[
        "cuda_graph_impl"] == "local"
    assert read_megatron_overrides(["--external-cuda-graph", "--cuda-graph-scope", "mlp"],
                                   num_layers=4).options["cuda_graph_modules"] == ("mlp",)
    o = read_megatron_overrides(["--cuda-graph-scope", "full_iteration",
                                 "--no-check-for-nan-in-loss-and-grad",
                                 "--no-create-attention-mask-in-dataloader"], num_layers=4)
    assert o.options == {"cuda_graph_impl": "full_iteration", "cuda_graph_modules": (),
                         "batch_attention_mask": False}
    with pytest.raises(InvalidValueError, match="no-check-for-nan"):
        read_megatron_overrides(["--cuda-graph-impl", "full_iteration"], num_layers=4)
    with pytest.raises(InvalidValueError, match="--cuda-graph-impl"):
        read_megatron_overrides(["--enable-cuda-graph", "--cuda-graph-impl", "local"],
                                num_layers=4)


def test_megatron_refusals():
    """transformer_config.py:2790-2830: no modules with full_iteration; no CPU offloading
    with per-layer graphs; MoE scopes need experts."""
    with pytest.raises(InvalidValueError, match="must be empty"):
        job("llama2-7b", cuda_graph_impl="full_iteration", cuda_graph_modules=("attn",))
    with pytest.raises(InvalidValueError, match="CPU offloading"):
        job("llama2-7b", cuda_graph_impl="transformer_engine", cpu_offloading_num_layers=4)
    with pytest.raises(InvalidValueError, match="only supported for MoE"):
        job("llama2-7b", cuda_graph_impl="transformer_engine", cuda_graph_modules=("moe_router",))
    with pytest.raises(InvalidValueError, match="Megatron-core's"):
        job("llama2-7b", framework="torchtitan", cuda_graph_impl="transformer_engine")


def test_bridge_recipes_with_graphs():
    """perf_recipes/deepseek/gb200/deepseek_v3.py (bf16: transformer_engine, scope attn,
    moe_router, moe_preprocess), deepseek/gb300/deepseek_v3.py (fp8mx: full_iteration);
    llama3 gb200 8B (local with the deprecated scope full_iteration, promoted to
    full_iteration, cuda_graph_config.py:10-13)."""
    model, opts, notes = bridge_job_options(read_bridge_recipe(
        "deepseek_v3_pretrain_256gpu_gb200_bf16_config"))
    assert (opts["cuda_graph_impl"], opts["cuda_graph_modules"]) == (
        "transformer_engine", ("attn", "moe_router", "moe_preprocess"))
    j = job(model, **opts, _notes=tuple(notes))
    assert "cuda_graph_static_inputs" in training_memory(j).grouped()
    model, opts, notes = bridge_job_options(read_bridge_recipe(
        "deepseek_v3_pretrain_256gpu_gb300_fp8mx_config"))
    assert opts["cuda_graph_impl"] == "full_iteration" and "batch_attention_mask" not in opts
    j = job(model, **opts, _notes=tuple(notes))
    assert "cuda_graph_static_batches" in resolved_stage_total(j, 0).keys
    _, opts, notes = bridge_job_options(read_bridge_recipe(
        "llama3_8b_pretrain_8gpu_gb200_fp8cs_config"))
    assert opts["cuda_graph_impl"] == "full_iteration"
    assert any("graph executables" in n for n in notes)


def test_optimizer_graph_keeps_the_step_allocations_reserved():
    """--optimizer-cuda-graph (optimizer_cuda_graph.py:26-52, training.py:4449-4454): the step
    is captured in a pool of its own.  Llama 3 8B (8030261248 parameters) at d = 8 with
    --grad-reduce-in-bf16: the step's .float() main-gradient shard (distrib_optimizer.py:2792),
    8030261248 x 4 / 8 = 4,015,130,624 B, stays reserved through forward and backward; with
    the default fp32 gradient buffer the main gradients are views and the step allocates
    nothing memsym counts: no pool.  max_memory_allocated does not see a replayed pool."""
    kw = dict(dp=8, seq_length=4096, global_batch_size=64)
    shard = 8_030_261_248 * 4 // 8
    assert shard == 4_015_130_624
    graphed = job("llama3-8b", grad_dtype="bf16", optimizer_cuda_graph=True, **kw)
    assert _bytes(graphed, 0, "optimizer_graph_pool") == shard
    eager = training_memory(job("llama3-8b", grad_dtype="bf16", **kw)).breakdown()
    more = training_memory(graphed).breakdown()["total"] - eager["total"]
    assert more == shard + sp.Rational(shard, 10)   # and its 10 % fragmentation allowance
    assert _bytes(job("llama3-8b", optimizer_cuda_graph=True, **kw), 0,
                  "optimizer_graph_pool") == 0
    assert _bytes(job("llama3-8b", grad_dtype="bf16", optimizer_cuda_graph=True,
                      metric="allocated", **kw), 0, "optimizer_graph_pool") == 0


def test_optimizer_graph_read_from_megatron_bridge_and_the_cli(capsys):
    j = tiny_megatron_job("--optimizer-cuda-graph")
    assert j.training.memory.optimizer_cuda_graph is True
    assert read_megatron_overrides(["--optimizer-cuda-graph"], num_layers=4).options[
        "optimizer_cuda_graph"] is True
    _, opts, _ = bridge_job_options(read_bridge_recipe(
        "llama3_8b_pretrain_config", ["optimizer.optimizer_cuda_graph=True"]))
    assert opts["optimizer_cuda_graph"] is True
    from memsym.cli import main
    from memsym.search.space import refuse_unsearched

    assert main(["estimate", "llama3-8b", "--dp", "8", "--grad-reduce-in-bf16",
                 "--optimizer-cuda-graph", "--json"]) == 0
    import json

    got = json.loads(capsys.readouterr().out)
    assert got["training"]["optimizer_cuda_graph"] is True
    assert got["bytes"]["optimizer_graph_pool"] == 8_030_261_248 * 4 // 8
    with pytest.raises(InvalidValueError, match="optimizer_cuda_graph"):
        refuse_unsearched(j.training)


def test_optimizer_graph_is_megatrons():
    with pytest.raises(InvalidValueError, match="optimizer_cuda_graph"):
        job("llama3-8b", dp=8, framework="torchtitan", sharding="fsdp", optimizer_cuda_graph=True)
