"""Every job option ``memsym search`` / ``min-gpus`` accepts is read or refused (issue 32's
"one reading": a word means the same on every path).

An option a search accepts and then drops prices another job than the one the user named:
``--cp-comm-type a2a``, ``--autocast bf16`` and ``--metric allocated`` were parsed by search and
silently left out of its space (the same rows, byte for byte, as without them), while estimate
counts each (a2a's attention buffers: 2.15 GB more activations on Llama 3 8B at c 2, s 8192).
Here each option the table gives the search commands with ``search="same"`` or ``"list"`` is
given a value that is not its default; what the search reads (the model, the GPU, the GPU
count and :func:`memsym.cli.search.search_options`) must change, or the search must refuse the
option in one line (memsym's ValueError).  A new search option without a probe here fails the
first test: decide how the search reads it.
"""

from __future__ import annotations

import pytest

from memsym.cli import build_parser
from memsym.cli.option_rows import OPTIONS
from memsym.cli.search import search_model, search_options

BASE = ["search", "llama3-8b", "--gpus", "8", "--gpu", "h100"]

#: A value, other than the default, for each option the search reads (argv words after it).
PROBES = {
    "--tensor-model-parallel-size": ["2"], "--pipeline-model-parallel-size": ["2"],
    "--sharding": ["zero3"], "--convention": ["seed000"], "--precision": ["fp8"],
    "--autocast": ["bf16"], "--fp8-recipe": ["delayed"], "--optimizer": ["sgd"],
    "--offload": ["optimizer"], "--gpu-memory": ["40GB"], "--num-layers": ["16"],
    "--hidden-size": ["2048"], "--num-attention-heads": ["16"], "--num-query-groups": ["4"],
    "--kv-channels": ["64"], "--ffn-hidden-size": ["8192"], "--vocab-size": ["32000"],
    "--make-vocab-size-divisible-by": ["256"], "--num-experts": ["8"],
    "--moe-layer-freq": ["2"], "--moe-router-topk": ["1"], "--moe-ffn-hidden-size": ["1024"],
    "--moe-shared-expert-intermediate-size": ["1024"], "--q-lora-rank": ["64"],
    "--kv-lora-rank": ["64"], "--qk-head-dim": ["64"], "--qk-pos-emb-head-dim": ["32"],
    "--v-head-dim": ["64"], "--mtp-num-layers": ["1"], "--max-position-embeddings": ["2048"],
    "--group-query-attention": [], "--swiglu": [], "--untie-embeddings-and-output-weights": [],
    "--multi-latent-attention": [], "--normalization": ["LayerNorm"],
    "--context-parallel-size": ["2"], "--expert-model-parallel-size": ["2"],
    "--expert-tensor-parallel-size": ["2"], "--virtual-pipeline-model-parallel-size": ["2"],
    "--decoder-first-pipeline-num-layers": ["4"], "--decoder-last-pipeline-num-layers": ["4"],
    "--seq-length": ["8192"], "--micro-batch-size": ["4"], "--global-batch-size": ["64"],
    "--recompute-granularity": ["full"], "--no-flash-attn": [], "--dropout": [],
    "--hidden-dropout": ["0.1"], "--attention-dropout": ["0.1"], "--schedule": ["gpipe"],
    "--cp-comm-type": ["a2a"], "--framework": ["torchtitan"], "--tp-comm-overlap": [],
    "--moe-dispatcher": ["alltoall"], "--finetune": ["lora"], "--lora-rank": ["8"],
    "--metric": ["allocated"], "--workspace": ["1GB"], "--nccl-buffers": ["1GB"],
    "--fragmentation": ["0.05"], "--margin": ["1GB"], "--gpu": ["a100"],
    "--gpus-per-node": ["4"], "--efficiency": ["0.5"],
}

#: A probe read against another base: Megatron's --group-query-attention alone changes nothing
#: of a model already GQA; on a multi-head model it makes a given --num-query-groups count
#: (ignored without it, as Megatron ignores it: memsym.cli.search.search_model).
OTHER_BASE = {"--group-query-attention": ["search", "llama2-7b", "--gpus", "8", "--gpu", "h100",
                                          "--num-query-groups", "4"]}

#: Options whose only value is the default (nothing to change): Megatron's --use-flash-attn
#: (flash attention is on unless --no-flash-attn).
DEFAULT_ONLY = {"--use-flash-attn"}


def _searched() -> set:
    return {o.names[0] for o in OPTIONS if o.search in ("same", "list")
            and set(o.commands) & {"search", "min-gpus"} and not o.positional}


def _read(extra, base=BASE):
    args = build_parser("search").parse_args(base + extra)
    return repr((search_model(args), args.gpu, args.gpus, search_options(args)))


def test_every_search_option_has_a_probe():
    assert _searched() - DEFAULT_ONLY == set(PROBES)


@pytest.mark.parametrize("option", sorted(PROBES))
def test_the_search_reads_or_refuses_each_option(option):
    words = OTHER_BASE.get(option, BASE)
    base = _read([], words)
    try:
        read = _read([option, *PROBES[option]], words)
    except ValueError as err:      # refused in one line (memsym's errors subclass ValueError)
        assert "\n" not in str(err)
        return
    assert read != base, f"search accepts {option} and reads nothing of it"


@pytest.mark.parametrize("method", ["a2a", "all_gather"])
def test_a_held_cp_method_prices_the_row_as_estimate_prices_the_job(method):
    """The search's row under a held CP method is the job estimate counts with it (its
    attention buffers: memsym.terms.context_parallel), and a2a's differs from p2p's: the
    held method is priced, not dropped."""
    from memsym.job import job
    from memsym.training import job_memory

    words = ["--cp", "2", "--tp", "1", "--pp", "1", "--seq-length", "8192",
             "--micro-batch-size", "1", "--sharding", "distributed-optimizer",
             "--recompute-granularity", "none", "--no-sequence-parallel",
             "--global-batch-size", "64"]
    memory = {}
    for given in (None, method):
        args = build_parser("search").parse_args(
            ["search", "llama3-8b", "--gpus", "16", "--gpu", "h100", *words]
            + (["--cp-comm-type", given] if given else []))
        from memsym.search import search

        res = search(search_model(args), args.gpu, args.gpus, **search_options(args))
        row = res.row(int(res.order(fitting=False)[0]))
        assert (row["t"], row["p"], row["c"], row["d"], row["b"]) == (1, 1, 2, 8, 1)
        j = job("llama3-8b", t=1, p=1, c=2, d=8, seq_length=8192, micro_batch_size=1,
                global_batch_size=64, recompute="none", sharding="distributed-optimizer",
                **({"cp_comm_type": given} if given else {}))
        assert float(job_memory(j).bytes_total) == pytest.approx(row["memory"], rel=1e-12)
        memory[given] = row["memory"]
    assert (memory[method] != memory[None]) == (method == "a2a")


def test_a_held_autocast_prices_the_row_as_estimate_prices_the_job():
    """Autocast over fp32 weights held over a search of a Llama config.json: the rows are
    plain DDP with one GPU per replica (as the autocast was measured), and the best row's
    memory and step time are the job's (its matmuls at bf16: not the fp32 job's)."""
    from memsym.job import job
    from memsym.search import search
    from memsym.timing.step import step_time
    from memsym.training import job_memory

    model = "tests/data/hf/llama-3.2-1b"
    words = ["search", model, "--gpus", "8", "--gpu", "h100", "--framework", "deepspeed",
             "--precision", "fp32", "--global-batch-size", "64"]
    args = build_parser("search").parse_args(words + ["--autocast", "bf16"])
    res = search(search_model(args), args.gpu, args.gpus, **search_options(args))
    row = res.best()
    assert (row["t"], row["p"], row["c"], row["e"], row["sharding"]) == (1, 1, 1, 1, "ddp")
    times = {}
    for autocast in ("bf16", None):
        j = job(model, d=8, framework="deepspeed", sharding="ddp", precision="fp32",
                micro_batch_size=row["b"], global_batch_size=64, recompute=row["recompute"],
                overlap_grad_reduce=True, **({"autocast": autocast} if autocast else {}))
        times[autocast] = step_time(j.model, j.layout, j.training, "h100").total
        if autocast:
            assert float(job_memory(j).bytes_total) == pytest.approx(row["memory"], rel=1e-12)
    assert row["step_time"] == pytest.approx(times["bf16"], rel=1e-12)
    assert times[None] > 1.5 * times["bf16"]          # fp32 matmuls are not what it runs


@pytest.mark.parametrize("extra, said", [
    (["--tp", "2"], "not tp \\[2\\]"), (["--sharding", "zero3"], "not sharding \\[.zero3.\\]"),
    (["--recompute-granularity", "selective"], "not recompute \\[.selective.\\]")])
def test_a_held_autocast_outside_what_was_measured_is_refused(extra, said):
    args = build_parser("search").parse_args(
        ["search", "tests/data/hf/llama-3.2-1b", "--gpus", "8", "--gpu", "h100",
         "--framework", "deepspeed", "--precision", "fp32", "--autocast", "bf16", *extra])
    from memsym.search import search

    with pytest.raises(ValueError, match=said):
        search(search_model(args), args.gpu, args.gpus, **search_options(args))


def test_the_python_search_checks_a_held_autocast_as_estimate_does():
    # the library's search, not only the command line, refuses what estimate's check refuses
    # (autocast under Megatron's code), in one line
    from memsym.job import job
    from memsym.search import search

    with pytest.raises(ValueError) as est:
        job("llama3-8b", framework="megatron", precision="fp32", autocast="bf16", d=8)
    with pytest.raises(ValueError) as got:
        search("llama3-8b", "h100", 8, framework="megatron", precision="fp32",
               held={"autocast": "bf16"})
    assert str(got.value) == str(est.value) and "\n" not in str(got.value)


def test_lora_under_16bit_autocast_searches_the_recompute_it_was_measured_under(tmp_path):
    # PEFT's LoRA over 16-bit weights under autocast is counted under gradient checkpointing
    # only (memsym.job_checks_hf): the search keeps full recompute where none is named, and
    # its best row is the job estimate counts
    from memsym.job import job
    from memsym.search import search
    from memsym.training import job_memory

    import json

    model = str(tmp_path / "config.json")       # a small GPT-2 (LayerNorm, gelu_new)
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "vocab_size": 1000,
         "n_positions": 1024, "activation_function": "gelu_new"}))
    res = search(model, "h100", 2, framework="deepspeed", precision="bf16", finetune="lora",
                 held={"autocast": "bf16"}, global_batch_size=8, seq_length=512)
    row = res.best()
    assert row["recompute"] == "full" and set(res.space.recompute) == {"full"}
    j = job(model, d=2, framework="deepspeed", sharding="ddp", precision="bf16",
            autocast="bf16", finetune="lora", recompute="full", micro_batch_size=row["b"],
            global_batch_size=8, seq_length=512)
    assert float(job_memory(j).bytes_total) == pytest.approx(row["memory"], rel=1e-12)
