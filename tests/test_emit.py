"""Out as a launch command (issue 32, item 5): ``memsym search --emit`` and :mod:`memsym.emit`.

The contract is the round trip: a searched layout, emitted in a framework's own arguments and
read back by ``memsym estimate``, is the same layout with the same per-GPU bytes (and step
time).  Two memsym paths meet here (the vectorized search and the reader -> job -> total
path), so each test can fail on either side.  The spellings themselves are asserted against the frameworks' sources:
Megatron-LM ``megatron/training/arguments.py`` (``d98e8a64dd``), Megatron-FSDP's
``--data-parallel-sharding-strategy`` values, DeepSpeed 0.19.6's batch rule
(``runtime/config.py:_batch_assertion``: train_batch_size = micro-batch x accumulation x d)
and torchtitan v0.2.2 ``job_config.py`` / ``pipeline_parallel.py`` (local batch split into
micro-batches of ``pipeline_parallel_microbatch_size``).

Each search is restricted (one preset, 8-16 GPUs, a few t/p sizes) so that one search takes
about a second; the test file stays within seconds per framework.
"""

from __future__ import annotations

import json
import os
import shlex

import pytest

from memsym.cli.search_report import bytes_json
from memsym.emit import Emitted, NotExpressible, emit
from memsym.search import search
from in_process import run

GPU = "h100-80gb"


def searched(capsys, tmp_path, framework, model, gpus, *options):
    """``memsym search --emit FRAMEWORK --emit-dir DIR --json``: the rows, each with its
    ``emit`` entry (the file written, the read-back command, or the refusal)."""
    code, out, err = run(capsys, "search", model, "--gpu", GPU, "--gpus", gpus,
                         "--emit", framework, "--emit-dir", tmp_path, "--json", *options)
    assert code == 0, err
    return json.loads(out)


def read_back(capsys, command):
    """Run the read-back command the search printed (``memsym estimate ... --json``)."""
    words = shlex.split(command)
    assert words[:2] == ["memsym", "estimate"]
    code, out, err = run(capsys, *words[1:])
    assert code == 0, (command, err)
    return json.loads(out)


def assert_same(row, est):
    """The layout and the per-GPU bytes the search priced are what the estimate reads."""
    lay, got = row["layout"], est["layout"]
    for key in ("tp", "pp", "cp", "dp", "ep", "etp"):
        assert got[key] == lay[key], (key, row["emit"]["read_back"])
    assert (got["vpp"] or 1) == lay["vpp"]
    assert got["sequence_parallel"] == lay["sequence_parallel"]
    assert got["world_size"] == row["gpus"]
    trn = est["training"]
    assert trn["micro_batch_size"] == lay["micro_batch_size"]
    assert est["stage"]["index"] == row["stage"]
    # every term and the total, in the whole bytes both JSON outputs round to (each term up,
    # the total the sum of the rounded terms)
    assert est["bytes"] == row["bytes"], row["emit"]["read_back"]
    # and the total of the exact sum, rounded once, of the most-loaded stage
    assert est["stage"]["stage_totals"][row["stage"]] - row["bytes"]["total"] in \
        range(-len(row["bytes"]), 1)
    # the step time too: the read-back names the GPU, and the emitted overlaps are the ones
    # the search priced (memsym.search.launch_overlaps); both print a float of one value
    assert est["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-12)
    return trn


def emitted_rows(rows):
    done = [r for r in rows if "file" in r["emit"]]
    assert done, [r["emit"] for r in rows]
    return done


# ---------------------------------------------------------------------------------------------
# Megatron-LM
# ---------------------------------------------------------------------------------------------
MEGATRON_CASES = {
    # plain DDP (no flag in Megatron) under interleaving (--num-virtual-stages-per-pipeline-
    # rank), full recompute spelled with Megatron's required method
    "ddp-vpp-full": ("llama2-7b", 8, "--tp", 2, "--pp", 2, "--sharding", "ddp",
                     "--recompute", "full", "--global-batch-size", 64),
    # the distributed optimizer and uneven stages
    "distopt-uneven": ("llama3-8b", 16, "--tp", 1, "--pp", 2, "--vpp", 1,
                       "--decoder-first-pipeline-num-layers", 17,
                       "--decoder-last-pipeline-num-layers", 15,
                       "--sharding", "distributed-optimizer", "--recompute", "selective",
                       "--global-batch-size", 64),
    # block-N recompute
    "block": ("llama3-8b", 16, "--tp", 2, "--pp", 2, "--sharding", "distributed-optimizer",
              "--recompute", "block-2", "--global-batch-size", 64),
    # ZeRO-2 as Megatron-FSDP optim_grads, selective recompute, context parallelism
    "zero2-selective": ("llama3-8b", 16, "--tp", 2, "--pp", 1, "--cp", 1, 2,
                        "--sharding", "zero2", "--recompute", "selective",
                        "--global-batch-size", 64),
    # FSDP as Megatron-FSDP optim_grads_params (--use-megatron-fsdp, its own buffers), beside
    # the distributed optimizer, with and without recompute
    "megatron-fsdp": ("llama3-8b", 16, "--tp", 1, 2, "--pp", 1, "--sharding", "fsdp",
                      "distributed-optimizer", "--recompute", "none", "full",
                      "--global-batch-size", 64, "--top", 6),
    # Megatron-FSDP's strategies asked for by their own names: no_shard (DDP's states) under
    # PP and interleaving, optim (the distributed optimizer's) beside the distributed optimizer
    # itself, optim_grads (the zero2 row) with PP -- validate_args checks no PP size under
    # --use-megatron-fsdp (arguments.py l. 1118-1187 at d98e8a64dd)
    "mfsdp-no_shard-pp": ("llama3-8b", 16, "--tp", 2, "--pp", 2, "--sharding", "no_shard",
                          "--recompute", "full", "--global-batch-size", 64),
    "mfsdp-optim": ("llama3-8b", 16, "--tp", 2, "--pp", 1, "--cp", 1, "--sharding", "optim",
                    "distributed-optimizer", "--recompute", "full", "--global-batch-size", 64,
                    "--top", 6),
    "mfsdp-optim_grads-pp": ("llama3-8b", 16, "--tp", 1, "--pp", 2, "--cp", 1, "--sharding",
                             "optim_grads", "--recompute", "selective",
                             "--global-batch-size", 64),
    # --fsdp-double-buffer carried to every Megatron-FSDP row (and to none other)
    "mfsdp-double-buffer": ("llama3-8b", 16, "--tp", 2, "--pp", 1, "--cp", 1, "--sharding",
                            "optim_grads_params", "optim", "distributed-optimizer",
                            "--fsdp-double-buffer", "--recompute", "full",
                            "--global-batch-size", 64, "--top", 8),
    # a mixture of experts: expert parallelism (expert TP = t, Megatron's default)
    "moe-ep": ("qwen3-30b-a3b", 16, "--tp", 2, "--pp", 1, "--ep", 4,
               "--sharding", "distributed-optimizer", "--recompute", "full", "--top", 1,
               "--global-batch-size", 64),
    # the experts' own TP searched: --expert-tensor-parallel-size 1 beside the default t_e = t
    # (the top 4 of this search hold both)
    "moe-etp": ("qwen3-30b-a3b", 16, "--tp", 2, "--pp", 1, "--ep", 4,
                "--sharding", "distributed-optimizer", "--recompute", "full", "--top", 4,
                "--global-batch-size", 64),
    # the settings Megatron's defaults and memsym's differ on: fp32/fp16, dropout, attention
    "fp16-dropout-unfused-sgd": ("llama2-7b", 8, "--tp", 2, "--pp", 1, "--sharding", "ddp",
                                 "--precision", "fp16", "--dropout", "--no-flash-attn",
                                 "--optimizer", "sgd", "--global-batch-size", 32,
                                 "--recompute", "full"),
    "fp32": ("llama2-7b", 8, "--tp", 4, "--pp", 2, "--sharding", "distributed-optimizer",
             "--precision", "fp32", "--recompute", "full", "--global-batch-size", 32),
}


@pytest.mark.parametrize("case", sorted(MEGATRON_CASES))
def test_megatron_round_trip(capsys, tmp_path, case):
    model, gpus, *options = MEGATRON_CASES[case]
    rows = searched(capsys, tmp_path, "megatron", model, gpus,
                    *(() if "--top" in options else ("--top", 2)), *options)
    if case == "megatron-fsdp":
        assert {row["layout"]["sharding"] for row in rows} == {"fsdp", "distributed-optimizer"}
    if case == "moe-etp":
        # t_e = t = 2 (validate_args' default, no flag) and t_e = 1 (the flag emitted)
        assert {row["layout"]["etp"] for row in rows} == {1, 2}
        for row in rows:
            assert ("--expert-tensor-parallel-size 1" in " ".join(row["emit"]["arguments"])) \
                == (row["layout"]["etp"] == 1)
    if case.startswith("mfsdp-"):
        # the strategy rows asked for are searched (optim_grads is the zero2 row), with PP
        wanted = {"mfsdp-no_shard-pp": {"no_shard"}, "mfsdp-optim": {"optim",
                  "distributed-optimizer"}, "mfsdp-optim_grads-pp": {"zero2"},
                  "mfsdp-double-buffer": {"fsdp", "optim", "distributed-optimizer"}}[case]
        assert {row["layout"]["sharding"] for row in rows} == wanted
        if case.endswith("-pp"):
            assert {row["layout"]["pp"] for row in rows} == {2}
    for row in emitted_rows(rows):
        path = row["emit"]["file"]
        assert os.path.basename(path).startswith("layout_") and path.endswith(".txt")
        # the argument file holds exactly the arguments printed
        with open(path, encoding="utf-8") as fh:
            assert shlex.split(fh.read()) == row["emit"]["arguments"]
        trn = assert_same(row, read_back(capsys, row["emit"]["read_back"]))
        rc = row["layout"]["recompute"]
        assert trn["recompute"] == ("full" if rc.startswith("block-") else rc)
        if rc.startswith("block-"):
            assert (trn["recompute_method"], trn["recompute_num_layers"]) == ("block", 2)
        for key in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
            side = key.split("_")[1]
            assert trn[f"{side}_stage_layers"] == row["layout"][key]
        strategy = {"zero2": "optim_grads", "fsdp": "optim_grads_params",
                    "no_shard": "no_shard", "optim": "optim"}.get(row["layout"]["sharding"])
        text = " ".join(row["emit"]["arguments"])
        assert trn["megatron_fsdp"] == strategy
        if strategy is not None:
            # Megatron-FSDP, with the checkpoint format validate_args asserts under it
            assert ("--use-megatron-fsdp --data-parallel-sharding-strategy "
                    f"{strategy} --ckpt-format fsdp_dtensor") in text
            # the states of the scheme memsym.vocabulary.MEGATRON_FSDP_SCHEMES names
            assert trn["sharding"] == {"no_shard": "ddp", "optim": "distributed-optimizer",
                                       "optim_grads": "zero2",
                                       "optim_grads_params": "fsdp"}[strategy]
        else:
            assert "--use-megatron-fsdp" not in text
        double = case == "mfsdp-double-buffer" and strategy is not None
        assert bool(trn["fsdp_double_buffer"]) == double
        assert ("--fsdp-double-buffer" in row["emit"]["arguments"]) == double
        # the same words pasted, not from the file, read back the same
        words = ["estimate", model, *row["emit"]["arguments"], "--gpu", GPU, "--json"]
        words += [w for w in shlex.split(row["emit"]["read_back"])
                  if w in ("--sharding", "ddp", "--precision", "fp32")]
        code, out, err = run(capsys, *words)
        assert code == 0, err
        assert json.loads(out)["bytes"] == row["bytes"]


#: Precisions a Blackwell GPU (GB200: its datasheet has an FP4 peak) trains in, as (search options,
#: the Megatron-LM words the emitted layout must carry, memsym's own options for the same job).
PRECISION_CASES = {
    "fp8-mxfp8": (("--precision", "fp8", "--fp8-recipe", "mxfp8"),
                  "--bf16 --fp8-format e4m3 --fp8-recipe mxfp8"),
    "fp8-tensorwise": (("--precision", "fp8", "--fp8-recipe", "tensorwise"),
                       "--bf16 --fp8-format hybrid --fp8-recipe tensorwise"),
    "fp8": (("--precision", "fp8"), "--bf16 --fp8-format hybrid"),
    "fp4": (("--precision", "fp4"), "--bf16 --fp4-format e2m1"),
}


@pytest.mark.parametrize("case", sorted(PRECISION_CASES))
def test_megatron_precision_round_trip(capsys, case):
    """The search's precision and FP8 recipe are emitted as Megatron-LM's own flags (MXFP8 is
    E4M3 only: Transformer Engine's MXFP8BlockScaling), and the emitted command reads back
    the bytes the search priced, the same as memsym's own --precision/--fp8-recipe options
    give for the layout (two paths: Megatron's reader, memsym's options)."""
    options, words = PRECISION_CASES[case]
    code, out, err = run(capsys, "search", "llama3-8b", "--gpu", "gb200", "--gpus", 16,
                         "--tp", 2, "--pp", 1, "--sharding", "distributed-optimizer",
                         "--recompute", "selective", "--global-batch-size", 64, "--top", 1,
                         "--emit", "megatron", "--json", *options)
    assert code == 0, err
    (row,) = emitted_rows(json.loads(out))
    assert words in " ".join(row["emit"]["arguments"])
    est = read_back(capsys, row["emit"]["read_back"])
    assert_same(row, est)
    lay = row["layout"]
    own = ["estimate", "llama3-8b", "--gpu", "gb200", "--tp", lay["tp"], "--pp", lay["pp"],
           "--world-size", row["gpus"], "--micro-batch-size", lay["micro_batch_size"],
           "--global-batch-size", 64, "--recompute", "selective", "--json", *options]
    if lay["sequence_parallel"]:
        own.append("--sequence-parallel")
    code, out, err = run(capsys, *own)
    assert code == 0, err
    assert json.loads(out)["bytes"] == est["bytes"]
    if case == "fp8-mxfp8":
        # the recipe is what the read-back carries: per-tensor FP8 is a different count
        plain = [w for w in shlex.split(row["emit"]["read_back"])[1:]
                 if w not in ("mxfp8", "--fp8-recipe")]
        plain[plain.index("e4m3")] = "hybrid"
        code, out, err = run(capsys, *plain)
        assert code == 0, err
        assert json.loads(out)["bytes"]["total"] != est["bytes"]["total"]


def test_megatron_spellings_follow_megatron_arguments():
    """Each memsym choice in Megatron-LM's own flags (arguments.py): the recompute method and
    count, VPP as stages per rank, uneven ends, ZeRO-2 as Megatron-FSDP optim_grads, and the
    overlaps the search priced (--overlap-param-gather only with a sharded optimizer)."""
    res = search("llama3-8b", GPU, 16, global_batch_size=64, tp=[2], pp=[2], vpp=[2],
                 sharding=["distributed-optimizer"], recompute=["block-3"],
                 sequence_parallel=[True], micro_batch_sizes=[2])
    row = res.row(int(res.order()[0]))
    words = emit("megatron", dict(row, first_stage_layers=15, last_stage_layers=17), res.space,
                 16, "llama3-8b").arguments
    text = " ".join(words)
    for flags in ("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2",
                  "--num-virtual-stages-per-pipeline-rank 2",
                  "--decoder-first-pipeline-num-layers 15",
                  "--decoder-last-pipeline-num-layers 17", "--sequence-parallel",
                  "--world-size 16", "--seq-length 4096", "--micro-batch-size 2",
                  "--global-batch-size 64", "--bf16", "--use-distributed-optimizer",
                  "--recompute-granularity full --recompute-method block "
                  "--recompute-num-layers 3",
                  "--hidden-dropout 0.0 --attention-dropout 0.0",
                  "--overlap-grad-reduce --overlap-param-gather"):
        assert flags in text
    zero2 = emit("megatron", dict(row, sharding="zero2"), res.space, 16).arguments
    assert " ".join(zero2).count("--use-megatron-fsdp --data-parallel-sharding-strategy "
                                 "optim_grads ") == 1
    ddp = emit("megatron", dict(row, sharding="ddp"), res.space, 16)
    assert "--overlap-param-gather" not in ddp.arguments
    assert not {"--use-distributed-optimizer", "--use-megatron-fsdp"} & set(ddp.arguments)


@pytest.mark.parametrize("scheme", ["zero1", "zero3"])
def test_megatron_refuses_deepspeed_zero_it_cannot_spell(scheme):
    """ZeRO-1 and ZeRO-3 as the search prices them have no Megatron-LM flag that memsym
    reads back the same (Megatron-FSDP optim_grads_params is read as fsdp, the distributed
    optimizer as itself): one line, not a launch command, and ZeRO-3's names the scheme
    that is (--sharding fsdp: Megatron-FSDP)."""
    res = search("llama3-8b", GPU, 16, global_batch_size=64, tp=[2], pp=[1], sharding=[scheme],
                 recompute=["none"])
    with pytest.raises(NotExpressible) as exc:
        emit("megatron", res.row(int(res.order()[0])), res.space, 16)
    assert "\n" not in str(exc.value) and scheme in str(exc.value)
    if scheme == "zero3":
        assert "--sharding fsdp" in str(exc.value)


def test_megatron_text_lists_refused_rows_in_one_line(capsys):
    code, out, err = run(capsys, "search", "llama3-8b", "--gpu", GPU, "--gpus", 16, "--tp", 2,
                         "--pp", 1, "--cp", 1, "--sharding", "zero3", "distributed-optimizer",
                         "--recompute", "none", "--global-batch-size", 64, "--top", 4,
                         "--emit", "megatron")
    assert code == 0, err
    refused = [ln for ln in out.splitlines() if "not emitted:" in ln]
    assert refused and all("sharding zero3" in ln for ln in refused)
    assert "--use-distributed-optimizer" in out
    assert out.count("# read back: memsym estimate llama3-8b ") == 4 - len(refused)


def test_megatron_job_with_param_gather_overlap_emits_its_ddp_rows_without_it(capsys,
                                                                             tmp_path):
    """A pasted job with ``--overlap-param-gather`` (the distributed optimizer's) searched over
    DDP too: Megatron-LM's validate_args asserts ``--overlap-param-gather`` only with
    ``--use-distributed-optimizer`` / Megatron-FSDP (arguments.py:1024-1027 at d98e8a64dd), so
    a DDP row is written without it (it was written with it, and did not read back); DDP
    gathers no parameters, so it reads back the bytes and step time the search priced.  The
    distributed optimizer's rows carry both overlaps."""
    args = tmp_path / "args.txt"
    args.write_text("--tensor-model-parallel-size 2\n--world-size 8\n--seq-length 4096\n"
                    "--micro-batch-size 1\n--global-batch-size 64\n--bf16\n"
                    "--use-distributed-optimizer\n--overlap-grad-reduce\n"
                    "--overlap-param-gather\n")
    code, out, err = run(capsys, "search", "llama2-7b", "--args-file", args, "--gpu", GPU,
                         "--tp", 2, "--pp", 1, "--cp", 1, "--sharding", "ddp",
                         "distributed-optimizer", "--recompute", "full", "--top", 8,
                         "--emit", "megatron", "--json")
    assert code == 0, err
    rows = json.loads(out)
    by = {s: [r for r in rows if r["layout"]["sharding"] == s]
          for s in ("ddp", "distributed-optimizer")}
    assert by["ddp"] and by["distributed-optimizer"]
    for row in rows:
        words = row["emit"]["arguments"]
        assert "--overlap-grad-reduce" in words
        assert ("--overlap-param-gather" in words) == \
            ("--use-distributed-optimizer" in words) == \
            (row["layout"]["sharding"] == "distributed-optimizer")
        est = read_back(capsys, row["emit"]["read_back"])
        assert_same(row, est)
        assert bool(est["training"]["overlap_param_gather"]) == \
            (row["layout"]["sharding"] == "distributed-optimizer")


# ---------------------------------------------------------------------------------------------
# DeepSpeed
# ---------------------------------------------------------------------------------------------
DEEPSPEED_CASES = {
    "zero3": ("llama2-7b", 8, "--sharding", "zero3", "--top", 2, "--global-batch-size", 64),
    # plain data parallelism holds 7B's states only on a larger GPU (the bytes read back do
    # not depend on the capacity)
    "ddp": ("llama2-7b", 8, "--sharding", "ddp", "--top", 1, "--global-batch-size", 64,
            "--gpu-memory", "200GB"),
    "zero1": ("llama2-7b", 8, "--sharding", "zero1", "--top", 1, "--global-batch-size", 64),
    "offload": ("llama2-7b", 8, "--sharding", "zero3", "--offload", "optimizer",
                "optimizer+params", "--top", 2, "--global-batch-size", 64),
    "fp16": ("llama2-7b", 8, "--sharding", "zero2", "--precision", "fp16", "--top", 2,
             "--global-batch-size", 32),
    # Mixtral's 8 experts split by AutoEP's expert_parallel section (the search's e)
    "autoep": ("mixtral-8x7b", 16, "--ep", 2, 8, "--sharding", "zero2", "zero3", "--seq-length",
               1024, "--top", 3, "--global-batch-size", 64),
}


@pytest.mark.parametrize("case", sorted(DEEPSPEED_CASES))
def test_deepspeed_round_trip(capsys, tmp_path, case):
    model, gpus, *options = DEEPSPEED_CASES[case]
    rows = searched(capsys, tmp_path, "deepspeed", model, gpus, "--tp", 1, "--pp", 1, "--cp", 1,
                    "--recompute", "none", *options)
    for row in emitted_rows(rows):
        with open(row["emit"]["file"], encoding="utf-8") as fh:
            cfg = json.load(fh)
        lay = row["layout"]
        # DeepSpeed's _batch_assertion: train_batch_size = micro-batch x accumulation x d
        assert cfg["train_micro_batch_size_per_gpu"] == lay["micro_batch_size"]
        assert cfg["gradient_accumulation_steps"] == lay["num_microbatches"]
        assert cfg["train_batch_size"] == lay["micro_batch_size"] * lay["num_microbatches"] \
            * lay["dp"]
        assert cfg["zero_optimization"]["stage"] == \
            {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}[lay["sharding"]]
        assert ("offload_param" in cfg["zero_optimization"]) == \
            (lay["offload"] == "optimizer+params")
        # DeepSpeed's AutoEP section (runtime/config.py get_expert_parallel_config ->
        # module_inject/auto_ep_config.py parse_autoep_config: enabled, autoep_size), with the
        # note that it needs a model AutoEP detects (a JSON config holds no comment)
        assert cfg.get("expert_parallel") == \
            ({"enabled": True, "autoep_size": lay["ep"]} if lay["ep"] > 1 else None)
        assert bool(row["emit"].get("notes")) == (lay["ep"] > 1)
        trn = assert_same(row, read_back(capsys, row["emit"]["read_back"]))
        assert trn["recompute"] == "none"


#: DeepSpeed 0.19.6's reduce_bucket_size default [elements] (runtime/zero/config.py,
#: DeepSpeedZeroConfig: pp_int(5e8)) and bf16's 2 bytes: one IPG bucket buffer
#: (runtime/zero/stage_1_and_2.py:2502-2504, torch.empty(reduce_bucket_size, dtype=self.dtype)).
ONE_IPG_BUCKET = 500_000_000 * 2


@pytest.mark.parametrize("stage", ["zero1", "zero2"])
def test_deepspeed_zero12_row_is_the_emitted_overlap_comm_job(capsys, tmp_path, stage):
    """A ZeRO-1/2 row is priced with overlap_comm on and the emitted config says so: estimating
    that config gives the row's bytes exactly, and DeepSpeed's default (overlap_comm off for
    stages 1/2, zero/config.py:383-385 overlap_comm_valid at edaa722126) holds one IPG bucket
    less (stage_1_and_2.py:2508-2514 allocates buf_1 only with overlap_comm).  The search
    says it in a note, so a plain estimate's smaller total is explained."""
    rows = searched(capsys, tmp_path, "deepspeed", "llama2-7b", 8, "--sharding", stage,
                    "--top", 1, "--global-batch-size", 64)
    row, = emitted_rows(rows)
    with open(row["emit"]["file"], encoding="utf-8") as fh:
        cfg = json.load(fh)
    assert cfg["zero_optimization"] == {"stage": int(stage[-1]), "overlap_comm": True}
    est = read_back(capsys, row["emit"]["read_back"])
    assert_same(row, est)                 # the row's bytes, term by term, and its step time
    # the same job under DeepSpeed's default: the config without the key, read the same way
    del cfg["zero_optimization"]["overlap_comm"]
    plain = tmp_path / "default.json"
    plain.write_text(json.dumps(cfg), encoding="utf-8")
    off = read_back(capsys, row["emit"]["read_back"].replace(row["emit"]["file"], str(plain)))
    assert off["training"]["overlap_grad_reduce"] is False
    # the second bucket is a transient of the peak phase; the states are the same
    assert est["bytes"]["transients"] - off["bytes"].get("transients", 0) == ONE_IPG_BUCKET
    for key in ("weights", "gradients", "optimizer", "workspace", "nccl"):
        assert est["bytes"][key] == off["bytes"][key], key
    # and a plain estimate of the layout (--framework deepspeed --sharding) is that default
    lay = row["layout"]
    code, out, err = run(capsys, "estimate", "llama2-7b", "--framework", "deepspeed",
                         "--sharding", stage, "--world-size", 8, "--seq-length", 4096,
                         "--micro-batch-size", lay["micro_batch_size"],
                         "--global-batch-size", 64, "--gpu", GPU, "--json")
    assert code == 0, err
    assert json.loads(out)["bytes"] == off["bytes"]
    # the row says so: 2 buckets of 1 GB where DeepSpeed's default keeps one
    note = [n for n in row["notes"] if "overlap_comm" in n]
    assert len(note) == 1 and "2 GB" in note[0] and "one bucket, 1 GB" in note[0]
    code, out, err = run(capsys, "search", "llama2-7b", "--gpu", GPU, "--gpus", 8, "--sharding",
                         stage, "--top", 1, "--global-batch-size", 64, "--emit", "deepspeed")
    assert code == 0, err
    assert f"# note: {note[0]}" in out.split("\n# layout 1:")[0]


def test_deepspeed_emit_search_ranks_only_what_its_config_holds(capsys):
    """Unnamed, the sizes memsym's DeepSpeed reader does not read from a ds_config.json (or
    searches only where named: AutoTP's autotp_size, deepspeed/__init__.py:210-212) are held
    at 1, and recompute at the model's own
    gradient checkpointing or none; the output says so, naming the reader: every ranked row
    is written, Mixtral's experts split by AutoEP (the search's e divides its 8 experts,
    auto_ep_config.py:285).  Without --emit the same search ranks the same rows: the held
    sizes are DeepSpeed's (Framework.searched_sizes), not the emitter's."""
    words = ("search", "mixtral-8x7b", "--framework", "deepspeed", "--gpu", GPU, "--gpus", 16,
             "--seq-length", 1024, "--global-batch-size", 64, "--top", 4)
    code, out, err = run(capsys, *words, "--emit", "deepspeed")
    assert code == 0, err
    assert "# held by --emit deepspeed: tp 1, pp 1, cp 1, vpp 1, recompute none or full: " \
        "memsym's DeepSpeed reader reads ZeRO data parallelism" in out
    code, plain, err = run(capsys, *words, "--json")
    assert code == 0, err
    keys = ("tp", "pp", "cp", "dp", "ep", "micro_batch_size", "recompute", "sharding")
    rows = [tuple(r["layout"][k] for k in keys) for r in json.loads(plain)]
    emitted = [line.split(":")[1].split(", SP")[0] for line in out.splitlines()
               if line.startswith("# layout ")]
    assert emitted == [f" t={t} p={p} c={c} d={d} e={e} v=1 b={b}, recompute {rc}, sharding {sh}"
                       for t, p, c, d, e, b, rc, sh in rows]
    heads = [line for line in out.splitlines() if line.startswith("# layout ")]
    assert len(heads) == 4 and not any("not emitted" in line for line in heads)
    assert all(" t=1 p=1 c=1 " in line and " v=1 " in line for line in heads)
    assert '"autoep_size": 8' in out and "# note: expert_parallel is DeepSpeed's AutoEP" in out


def test_deepspeed_refuses_what_its_config_cannot_hold(capsys):
    """Pipeline parallelism and selective recompute are not read from a ds_config.json by
    memsym: every row refused is one stderr line and exit 2 when none is left; a full
    recompute is the model's gradient checkpointing, read back beside the config with its
    note.  (Tensor parallelism is AutoTP's autotp_size: tests/test_deepspeed_autotp.py.)"""
    code, out, err = run(capsys, "search", "llama2-7b", "--gpu", GPU, "--gpus", 8, "--tp", 1,
                         "--pp", 2, "--global-batch-size", 64, "--top", 2,
                         "--emit", "deepspeed")
    assert (code, out) == (2, "") and err.count("\n") == 1 and "p = 2" in err
    res = search("llama2-7b", GPU, 8, framework="deepspeed", global_batch_size=64, tp=[1],
                 pp=[1], cp=[1], recompute=["selective"], sharding=["zero2"])
    with pytest.raises(NotExpressible, match="recompute selective"):
        emit("deepspeed", res.row(int(res.order()[0])), res.space, 8, "llama2-7b")
    res = search("llama2-7b", GPU, 8, framework="deepspeed", global_batch_size=64,
                 recompute=["full"], sharding=["zero2"])
    got = emit("deepspeed", res.row(int(res.order()[0])), res.space, 8, "llama2-7b")
    assert got.read_back("ds.json")[-2:] == ["--recompute-granularity", "full"]
    assert "gradient_checkpointing_enable()" in got.notes[0]


def test_deepspeed_emit_no_fit_hints_only_what_its_config_can_hold(capsys):
    """Nothing fits: the hint names no larger TP/PP and no recompute, which a ds_config.json
    cannot spell (deepspeed/__init__.py:213 pipelines only a PipelineModule); the offload it
    can (zero_optimization.offload_optimizer) stays."""
    code, out, err = run(capsys, "search", "llama2-70b", "--gpu", GPU, "--gpus", 8,
                         "--global-batch-size", 64, "--emit", "deepspeed")
    assert (code, out) == (1, "")
    hint = [line for line in err.splitlines() if "hint" in line]
    assert len(hint) == 1 and "--offload optimizer" in hint[0]
    assert "--tp" not in hint[0] and "--recompute" not in hint[0]


# ---------------------------------------------------------------------------------------------
# torchtitan
# ---------------------------------------------------------------------------------------------
TORCHTITAN_CASES = {
    # FSDP2 and replicas, pipeline schedules with 1, 2 and more stages per rank
    "pipeline": ("llama3-8b", 16, "--tp", 1, 2, "--pp", 2, "--cp", 1, "--top", 4,
                 "--global-batch-size", 64),
    "replicas-every-2": ("llama3-8b", 16, "--tp", 1, "--pp", 2, "--sharding", "ddp",
                         "--recompute", "every-2", "full", "--top", 2,
                         "--global-batch-size", 64),
    "per-op": ("llama3-8b", 8, "--tp", 1, "--pp", 1, "--cp", 1, "--recompute", "selective-op",
               "--top", 1, "--global-batch-size", 64),
    # expert parallelism: expert_parallel_degree, with the experts' TP t_e = t or 1
    # (expert_tensor_parallel_degree, which ParallelDims takes as tp or 1)
    "experts": ("mixtral-8x7b", 16, "--tp", 1, 2, "--pp", 1, "--top", 4,
                "--global-batch-size", 64),
    "experts-tp2": ("mixtral-8x7b", 16, "--tp", 2, "--pp", 1, "--sharding", "fsdp", "--top", 4,
                    "--global-batch-size", 64),
}


@pytest.mark.parametrize("case", sorted(TORCHTITAN_CASES))
def test_torchtitan_round_trip(capsys, tmp_path, case):
    import tomllib

    model, gpus, *options = TORCHTITAN_CASES[case]
    rows = searched(capsys, tmp_path, "torchtitan", model, gpus, *options)
    if case == "experts-tp2":
        # both expert TPs v0.2.2 takes under EP (parallel_dims.py:59: etp = tp or 1)
        assert {row["layout"]["etp"] for row in rows} == {1, 2}
    for row in emitted_rows(rows):
        with open(row["emit"]["file"], "rb") as fh:
            cfg = tomllib.load(fh)
        lay, par, trn_cfg = row["layout"], cfg["parallelism"], cfg["training"]
        assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == \
            lay["dp"]
        if lay["pp"] > 1:
            # pipeline_parallel.py: the local batch is split into micro-batches
            assert par["pipeline_parallel_microbatch_size"] == lay["micro_batch_size"]
            assert trn_cfg["local_batch_size"] == lay["micro_batch_size"] * \
                lay["num_microbatches"]
        assert trn_cfg["global_batch_size"] == lay["micro_batch_size"] * \
            lay["num_microbatches"] * lay["dp"]
        if lay["ep"] > 1:
            # job_config.py v0.2.2: expert_parallel_degree, expert_tensor_parallel_degree =
            # the search's expert TP, tp or 1 (parallel_dims.py:59); parallel_dims.py:138
            # efsdp = dp_shard*cp*tp // (etp*ep) must be whole
            assert (par["expert_parallel_degree"], par["expert_tensor_parallel_degree"]) == \
                (lay["ep"], lay["etp"])
            assert lay["etp"] in (lay["tp"], 1)
            assert par["data_parallel_shard_degree"] * lay["cp"] * lay["tp"] % \
                (lay["ep"] * lay["etp"]) == 0
        else:
            assert "expert_parallel_degree" not in par
        trn = assert_same(row, read_back(capsys, row["emit"]["read_back"]))
        rc = lay["recompute"]
        if rc.startswith("every-"):
            assert cfg["activation_checkpoint"] == {"mode": "selective",
                                                    "selective_ac_option": rc[6:]}
            assert (trn["recompute"], trn["recompute_method"]) == ("full", "every")


def test_torchtitan_emits_experts_of_a_moe_search(capsys):
    """A MoE search emitted for torchtitan writes every ranked row (it failed on all of them
    when expert_parallel_degree was refused): Mixtral's 8 experts over EP 8."""
    code, out, err = run(capsys, "search", "mixtral-8x7b", "--framework", "torchtitan",
                         "--emit", "torchtitan", "--top", 3, "--gpu", GPU, "--gpus", 16,
                         "--global-batch-size", 64)
    assert code == 0, err
    heads = [line for line in out.splitlines() if line.startswith("# layout ")]
    assert len(heads) == 3 and not any("not emitted" in line for line in heads)
    assert out.count("expert_parallel_degree = 8") == 3


def test_torchtitan_masks_experts_over_replicas():
    """torchtitan wraps an expert-parallel model in FSDP2 (v0.2.2 llama4/infra/parallelize.py
    :181 applies FSDP when ep_enabled; b5bcd76c6 keeps the efsdp mesh whenever ep > 1), so a
    search under sharding ddp offers no e > 1 row: the rule torchtitan-ep-replicas masks them
    and the output counts them.  By hand, Mixtral (8 experts) on 16 GPUs at t = 2, p = c = 1
    (d = 8): e in {2, 4, 8} x t_e in {2, 1} (e t_e divides t c d = 16 for all six) x b in
    {1, 2, 4, 8} (64 = b x 8 x m) = 24 launchable rows with e > 1, refused under the one
    SP-off choice the count reads.  A row spelled by hand is still refused by the emitter
    (efsdp = dp_shard*cp*tp // (etp*ep), parallel_dims.py:138)."""
    res = search("mixtral-8x7b", GPU, 16, framework="torchtitan", global_batch_size=64,
                 tp=[2], pp=[1], cp=[1], sharding=["ddp"])
    assert res.excluded["torchtitan-ep-replicas"] == 3 * 2 * 4
    assert all(res.row(int(i))["e"] == 1 for i in range(len(res)))
    row = dict(res.row(0), e=8, t_e=2)
    with pytest.raises(NotExpressible, match="e = 8 over data_parallel_shard_degree 1"):
        emit("torchtitan", row, res.space, 16, "mixtral-8x7b")


def test_torchtitan_refuses_fsdp_over_one_rank():
    """data_parallel_shard_degree 1 is no FSDP2 sharding: memsym reads it back as replicas."""
    res = search("llama3-8b", GPU, 8, framework="torchtitan", global_batch_size=64, tp=[1],
                 pp=[2], cp=[4], sharding=["fsdp"], recompute=["none"])
    row = next(res.row(int(i)) for i in res.order() if res.row(int(i))["d"] == 1)
    with pytest.raises(NotExpressible, match="d = 1"):
        emit("torchtitan", row, res.space, 8, "llama3-8b")


# ---------------------------------------------------------------------------------------------
# the command line's refusals: one stderr line, exit 2, nothing on stdout
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options, says", [
    (("--emit-dir", "x"), "--emit-dir needs --emit"),
    (("--emit", "deepspeed", "--framework", "megatron"), "--framework megatron contradicts"),
    (("--emit", "megatron", "--finetune", "lora"), "lora fine-tuning"),
    (("--emit", "torchtitan", "--no-flash-attn"), "flash"),
    (("--emit", "torchtitan", "--precision", "fp32"), "bf16"),
    (("--emit", "deepspeed", "--optimizer", "sgd"), "Adam"),
])
def test_cli_refusals(capsys, tmp_path, monkeypatch, options, says):
    # each is refused before any searching: a progress line shown at once (not after 0.5 s,
    # which a loaded machine reaches) would come before the refusal otherwise
    import functools

    import memsym.cli.search as cli_search

    monkeypatch.setattr(cli_search, "Progress", functools.partial(cli_search.Progress, after=0))
    options = tuple(str(tmp_path / o) if o == "x" else o for o in options)
    code, out, err = run(capsys, "search", "llama2-7b", "--gpu", GPU, "--gpus", 8, "--tp", 1,
                         "--pp", 1, "--cp", 1, "--recompute", "none", "--sharding", "ddp",
                         "fsdp" if "torchtitan" in options else "zero2", "--top", 1, *options)
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    assert says in err and "Traceback" not in err
    assert not os.path.exists(tmp_path / "x")


def test_emit_dir_refuses_a_planted_link(capsys, tmp_path):
    """A link at layout_1.json is not written through (O_NOFOLLOW): exit 2, the target
    untouched."""
    target = tmp_path / "target"
    target.write_text("keep")
    (tmp_path / "out").mkdir()
    os.symlink(target, tmp_path / "out" / "layout_1.json")
    code, out, err = run(capsys, "search", "llama2-7b", "--gpu", GPU, "--gpus", 8, "--tp", 1,
                         "--pp", 1, "--cp", 1, "--recompute", "none", "--sharding", "zero2",
                         "--top", 1, "--emit", "deepspeed", "--emit-dir", tmp_path / "out")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert target.read_text() == "keep"


def test_read_back_needs_the_file_for_config_frameworks():
    e = Emitted("torchtitan", "", (), ("--gpu", GPU), 8, 4096)
    assert e.read_back("a.toml") == ["--torchtitan-config", "a.toml", "--world-size", "8",
                                     "--gpu", GPU]
    with pytest.raises(ValueError):
        e.read_back()


def test_json_without_emit_dir_carries_the_text(capsys):
    """Without --emit-dir each JSON row carries the text; its read-back names the file the
    text is to be saved as."""
    code, out, err = run(capsys, "search", "llama2-7b", "--gpu", GPU, "--gpus", 8, "--tp", 1,
                         "--pp", 1, "--cp", 1, "--recompute", "none", "--sharding", "zero2",
                         "--top", 1, "--emit", "deepspeed", "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["emit"]["file"] is None
    assert "--deepspeed-config layout_1.json --world-size 8" in row["emit"]["read_back"]
    assert json.loads(row["emit"]["text"])["zero_optimization"]["stage"] == 2


@pytest.mark.parametrize("field, value", [("fp4_param_gather", True)])
def test_search_refuses_a_job_setting_it_does_not_carry(field, value):
    """A job's NVFP4 parameters are no searched setting: searching (and so emitting) the job
    is refused in one line, never priced without them (the MoE dispatcher, tp_comm_overlap
    and its userbuffers config, Megatron-FSDP's strategy and double buffer are carried:
    test_search_carries_the_moe_dispatcher, test_search_carries_a_megatron_fsdp_job,
    test_search_carries_the_userbuffers_config; FP8 parameter gathers and the optimizer's
    CUDA graph are held, tests/test_search_job.py)."""
    from memsym.errors import InvalidValueError
    from memsym.job import job

    base = "llama3-8b"
    extra = {"fp4_param_gather": dict(precision="fp4"),
             "fp8_param_gather": dict(precision="fp8")}
    kw = {**extra.get(field, {}), field: value}
    j = job(base, gpu=GPU, global_batch_size=64, **kw)
    with pytest.raises(InvalidValueError) as exc:
        search(j, gpus=16)
    assert "\n" not in str(exc.value) and field in str(exc.value)


#: The MoE token dispatchers a search holds fixed, each with a layout whose most-loaded GPU
#: holds its buffers: (GPU, GPUs, search options).  GB200's NVLink domain (72) sizes
#: HybridEP's buffers over an expert group beyond 8 ranks.
DISPATCHER_CASES = {
    "deepep": ("h100-80gb", 16, "--tp", 1, 2, "--pp", 1),
    "hybridep-nvl72": ("gb200", 16, "--tp", 1, "--pp", 1, "--ep", 16),
    "allgather": ("h100-80gb", 16, "--tp", 2, "--pp", 1, 2),
    "alltoall": ("h100-80gb", 16, "--tp", 1, "--pp", 1, "--cp", 1),
}


@pytest.mark.parametrize("case", sorted(DISPATCHER_CASES))
def test_search_carries_the_moe_dispatcher(capsys, tmp_path, case):
    """The MoE token dispatcher is held fixed over the searched layouts: each row's total
    holds its buffers (DeepEP's and HybridEP's outside PyTorch's allocator, after the
    allowances; allgather's gathered tokens among the activations) exactly as ``memsym
    estimate`` adds them at that layout, to the byte; and the emitted Megatron-LM arguments
    (``--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend ...``) read back the
    same bytes and step time."""
    from memsym.job import job
    from memsym.training import job_memory

    name = case.split("-")[0]
    gpu, gpus, *options = DISPATCHER_CASES[case]
    code, out, err = run(capsys, "search", "qwen3-30b-a3b", "--gpu", gpu, "--gpus", gpus,
                         "--moe-dispatcher", name, "--sharding", "distributed-optimizer",
                         "--recompute", "full", "--global-batch-size", 64, "--top", 2,
                         "--emit", "megatron", "--emit-dir", tmp_path, "--json", *options)
    assert code == 0, err
    for row in emitted_rows(json.loads(out)):
        lay = row["layout"]
        key = {"deepep": "deepep_buffers", "hybridep": "hybridep_buffers"}.get(name)
        assert (key in row["bytes"]) == (key is not None)
        words = " ".join(row["emit"]["arguments"])
        assert ("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend " + name
                if key else "--moe-token-dispatcher-type " + name) in words
        # the search's total is estimate's at that layout, to the byte (memsym's own options)
        j = job("qwen3-30b-a3b", gpu=gpu, t=lay["tp"], p=lay["pp"], c=lay["cp"], e=lay["ep"],
                d=lay["dp"], t_e=lay["etp"],
                v=lay["vpp"] if lay["vpp"] > 1 else None, micro_batch_size=lay["micro_batch_size"],
                global_batch_size=64, recompute="full", sharding="distributed-optimizer",
                sequence_parallel=lay["sequence_parallel"], moe_dispatcher=name)
        est = job_memory(j)
        assert est.stage == row["stage"]
        assert est.bytes_total == sum(est.grouped()[k] for k in est.grouped() if k != "total")
        assert bytes_json(est.grouped()) == row["bytes"]
        # and the emitted command reads back the same (the round trip)
        assert_same(row, read_back(capsys, row["emit"]["read_back"]))


def test_search_carries_tp_comm_overlap(capsys, tmp_path):
    """--tp-comm-overlap is held fixed: on in every row with sequence parallelism (Megatron's
    validate_args asserts SP under it, and turns SP off at t = 1), with Transformer Engine's
    userbuffers outside PyTorch's allocator and the overlapped TP time; the emitted arguments
    carry it exactly there and read back the same bytes and step time."""
    code, out, err = run(capsys, "search", "llama3-8b", "--gpu", GPU, "--gpus", 16,
                         "--tp", 1, 2, "--pp", 1, "--cp", 1, "--sharding",
                         "distributed-optimizer", "--recompute", "selective",
                         "--global-batch-size", 64, "--top", 8, "--tp-comm-overlap",
                         "--emit", "megatron", "--emit-dir", tmp_path, "--json")
    assert code == 0, err
    rows = emitted_rows(json.loads(out))
    assert {row["layout"]["sequence_parallel"] for row in rows} == {True, False}
    for row in rows:
        on = row["layout"]["sequence_parallel"]
        assert ("tp_comm_userbuffers" in row["bytes"]) == on
        assert ("--tp-comm-overlap" in row["emit"]["arguments"]) == on
        trn = assert_same(row, read_back(capsys, row["emit"]["read_back"]))
        assert trn["tp_comm_overlap"] == on


def test_search_takes_a_megatron_fsdp_job_it_spells():
    """A Megatron-FSDP optim_grads_params job is searched (its scheme is the search's fsdp,
    priced with the same buffers): the fsdp row of its layout is its estimate."""
    from memsym.job import job
    from memsym.training import job_memory

    j = job("llama3-8b", gpu=GPU, global_batch_size=64, sharding="fsdp",
            megatron_fsdp="optim_grads_params", recompute="full", d=16)
    res = search(j, gpus=16, tp=[1], pp=[1], cp=[1], sharding=["fsdp"], micro_batch_sizes=[1])
    i = int(res.order()[0])
    assert res.row(i)["sharding"] == "fsdp"
    assert res.exact(i)["bytes"]["total"] == job_memory(j).bytes_total


def test_search_carries_the_dispatcher_of_a_job():
    """A job's dispatcher is the search's (not refused): its best layout's exact total is the
    estimate of that layout; DeepEP's group sizes are a named rule (deepep-group)."""
    from memsym.job import job
    from memsym.search import explain
    from memsym.training import job_memory

    j = job("qwen3-30b-a3b", gpu=GPU, e=4, d=4, moe_dispatcher="deepep", global_batch_size=64,
            recompute="full")
    res = search(j, gpus=16, tp=[1], pp=[1], sharding=["distributed-optimizer"])
    assert res.space.moe_dispatcher == "deepep" and res.excluded["deepep-group"] > 0
    i = int(res.order()[0])
    row, exact = res.row(i), res.exact(i)
    assert row["e"] * row["t"] in (2, 4, 8, 16)
    got = job_memory(j.replace(t=row["t"], p=row["p"], e=row["e"], d=row["d"],
                               micro_batch_size=row["b"], sequence_parallel=False))
    assert exact["bytes"]["total"] == got.bytes_total
    assert row["memory"] == pytest.approx(float(got.bytes_total), rel=1e-12)
    assert explain(res.space, {"t": 1, "d": 16, "e": 1}) == ["deepep-group"]


def test_search_refuses_a_dispatcher_without_experts_in_one_line(capsys):
    code, out, err = run(capsys, "search", "llama3-8b", "--gpu", GPU, "--gpus", 8,
                         "--moe-dispatcher", "deepep", "--emit", "megatron")
    assert code == 2 and out == "" and "needs an MoE model" in err
    assert err.strip().count("\n") == 0


@pytest.mark.parametrize("strategy", ["no_shard", "optim", "optim_grads", "optim_grads_params"])
def test_search_carries_a_megatron_fsdp_job(strategy):
    """A Megatron-FSDP job (any strategy, with its double buffer) is searched over Megatron-
    FSDP's strategies, its double buffer held fixed: the row of its own layout and strategy
    is its estimate, to the byte, and emits its strategy and --fsdp-double-buffer."""
    from memsym.job import job
    from memsym.training import job_memory
    from memsym.vocabulary import MEGATRON_FSDP_SCHEMES

    j = job("llama3-8b", gpu=GPU, global_batch_size=64, t=2, p=2, d=4, sequence_parallel=True,
            sharding=MEGATRON_FSDP_SCHEMES[strategy], megatron_fsdp=strategy,
            fsdp_double_buffer=True, recompute="full", micro_batch_size=1)
    res = search(j, gpus=16, tp=[2], pp=[2], cp=[1], vpp=[1], micro_batch_sizes=[1],
                 sequence_parallel=[True], recompute=["full"])
    assert res.space.fsdp_double_buffer
    assert set(res.space.sharding) == {"no_shard", "optim", "zero2", "fsdp"}
    row_name = {"optim_grads": "zero2", "optim_grads_params": "fsdp"}.get(strategy, strategy)
    (i,) = [i for i in range(len(res)) if res.row(i)["sharding"] == row_name
            and not res.row(i).get("first_stage_layers")
            and not res.row(i).get("last_stage_layers")]
    assert res.exact(i)["bytes"]["total"] == job_memory(j).bytes_total
    words = emit("megatron", res.row(i), res.space, 16, "llama3-8b").arguments
    assert " ".join(words).count(f"--data-parallel-sharding-strategy {strategy} ") == 1
    assert "--fsdp-double-buffer" in words


#: A user's userbuffers config (Megatron-LM's --tp-comm-overlap-cfg YAML): entries that differ
#: from Transformer Engine's defaults (memsym.timing.userbuffers UB_CONFIGS "te-default"), so
#: that the overlapped TP time depends on it.
USER_UB = """\
proj_fprop:
  method: pipeline
  num_sm: 32
  num_splits: 8
fc2_fprop:
  method: pipeline
  num_sm: 32
  num_splits: 8
"""


def test_search_carries_the_userbuffers_config(capsys, tmp_path):
    """--tp-comm-overlap-cfg is held fixed with --tp-comm-overlap: the rows running the TP
    overlap are timed with it (not with TE's default), and each emitted layout names the
    config, written beside it, so that the read-back prices the same bytes and step time."""
    cfg = tmp_path / "mine.yaml"
    cfg.write_text(USER_UB, encoding="utf-8")
    base = ("search", "llama3-8b", "--gpu", GPU, "--gpus", 16, "--tp", 2, 4, "--pp", 1, "--cp", 1,
            "--sharding", "distributed-optimizer", "--recompute", "selective",
            "--global-batch-size", 64, "--top", 6, "--tp-comm-overlap", "--json")
    code, out, err = run(capsys, *base)
    assert code == 0, err
    plain = {json.dumps(r["layout"], sort_keys=True): r["step_time_s"] for r in json.loads(out)}
    folder = tmp_path / "out"
    code, out, err = run(capsys, *base, "--tp-comm-overlap-cfg", cfg, "--emit", "megatron",
                         "--emit-dir", folder)
    assert code == 0, err
    rows = emitted_rows(json.loads(out))
    assert any(r["layout"]["sequence_parallel"] for r in rows)
    compared = 0
    for row in rows:
        on = row["layout"]["sequence_parallel"]
        words = row["emit"]["arguments"]
        assert ("--tp-comm-overlap-cfg" in words) == on
        if on:
            path = words[words.index("--tp-comm-overlap-cfg") + 1]
            assert path == str(folder / "tp_comm_overlap_cfg.yaml") and os.path.isfile(path)
            assert "tp_comm_overlap_cfg.yaml" in row["emit"]["files"]
            key = json.dumps(row["layout"], sort_keys=True)
            if key in plain:      # the same layout with TE's default config: another time
                assert row["step_time_s"] != pytest.approx(plain[key], rel=1e-9)
                compared += 1
        assert_same(row, read_back(capsys, row["emit"]["read_back"]))
    assert compared


def test_search_carries_a_jobs_userbuffers_config(capsys, tmp_path):
    """A job's userbuffers config (a Megatron-Bridge config's name) is carried through the
    search into the emitted arguments, as a YAML file Megatron-LM reads: the read-back gives
    the bytes and step time the search priced."""
    from memsym.job import job

    name = "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"
    j = job("llama3-8b", gpu=GPU, t=4, d=4, sequence_parallel=True, tp_comm_overlap=True,
            tp_comm_overlap_cfg=name, global_batch_size=64, recompute="selective")
    res = search(j, gpus=16, tp=[4], pp=[1], cp=[1], sequence_parallel=[True],
                 sharding=["distributed-optimizer"], recompute=["selective"])
    assert res.space.tp_comm_overlap_cfg == name
    row = res.row(int(res.order()[0]))
    got = emit("megatron", row, res.space, 16, "llama3-8b", folder=str(tmp_path))
    (file_name, text), = got.files
    (tmp_path / file_name).write_text(text, encoding="utf-8")
    assert got.arguments[got.arguments.index("--tp-comm-overlap-cfg") + 1] == \
        str(tmp_path / file_name)
    code, out, err = run(capsys, "estimate", "llama3-8b", *got.read_back(), "--json")
    assert code == 0, err
    est = json.loads(out)
    assert est["bytes"]["total"] == bytes_json(res.exact(int(res.order()[0]))["bytes"])["total"]
    assert est["step_time_s"] == pytest.approx(row["step_time"], rel=1e-12)


@pytest.mark.parametrize("options, says", [
    (("--sharding", "no_shard", "--framework", "torchtitan"), "Megatron-FSDP's strategy"),
    (("--sharding", "optim", "--emit", "deepspeed"), "Megatron-FSDP's strategy"),
    (("--sharding", "ddp", "--fsdp-double-buffer"), "fsdp_double_buffer is Megatron-FSDP's"),
    (("--tp-comm-overlap-cfg", "x.yaml"), "tp_comm_overlap, which is off"),
    (("--sharding", "optim", "--optimizer", "adafactor"), "does not support the adafactor"),
])
def test_megatron_fsdp_search_settings_refused_in_one_line(capsys, tmp_path, options, says):
    """Megatron-FSDP's strategies are a Megatron-LM search's only, with Adam or SGD (validate_args
    l. 1150); its double buffer needs one of them searched, and a userbuffers config needs
    --tp-comm-overlap."""
    if "x.yaml" in options:
        (tmp_path / "x.yaml").write_text(USER_UB, encoding="utf-8")
        options = ("--tp-comm-overlap-cfg", tmp_path / "x.yaml")
    code, out, err = run(capsys, "search", "llama3-8b", "--gpu", GPU, "--gpus", 8, *options)
    assert code == 2 and out == "" and says in err and err.strip().count("\n") == 0


def test_megatron_search_leaves_megatron_fsdp_out_under_another_optimizer():
    """Under an optimizer Megatron-FSDP does not step (validate_args l. 1150: sgd or adam), a
    Megatron search's default schemes hold no Megatron-FSDP row (its zero2); with Adam they do."""
    from memsym.search import make_space

    assert "zero2" not in make_space("llama3-8b", GPU, optimizer="adafactor").sharding
    assert "zero2" in make_space("llama3-8b", GPU).sharding


def test_megatron_emit_names_the_script_of_the_model(capsys, tmp_path):
    """A hybrid layer pattern is a HybridModel, built by Megatron-LM's pretrain_hybrid.py
    (d98e8a64dd pretrain_hybrid.py:44 imports HybridModel; pretrain_gpt.py builds GPTModel):
    the emitted arguments say which script they are for, in the text and the JSON."""
    for model, script in (("nemotron-3-nano", "pretrain_hybrid.py"),
                          ("llama3-8b", "pretrain_gpt.py")):
        code, out, err = run(capsys, "search", model, "--gpu", GPU, "--gpus", 16, "--tp", 1,
                             "--pp", 1, "--global-batch-size", 64, "--top", 1,
                             "--emit", "megatron")
        assert code == 0, err
        assert f"\n# arguments of {script}\n" in out
        rows = searched(capsys, tmp_path / model, "megatron", model, 16, "--tp", 1, "--pp", 1,
                        "--global-batch-size", 64, "--top", 1)
        assert rows[0]["emit"]["script"] == script


def test_the_autoep_note_says_which_presets_check_transformers():
    # DeepSpeed edaa722126: the detector takes legacy nn.ModuleList experts beside transformers
    # 5's fused tensors (module_inject/auto_ep.py:310-312); only the deepseek_v2/v3 (>= 5.0) and
    # qwen3_5_moe (>= 5.2) adapters check the installed transformers (their
    # _requires_transformers_version_validation returns True; the default adapter's False,
    # auto_ep_presets/base.py:223-226), so mixtral and qwen3_moe need no transformers 5
    from memsym.emit_rules import AUTOEP_NOTE

    assert "legacy nn.ModuleList" in AUTOEP_NOTE
    assert "transformers >= 5.0 for deepseek_v2/v3 and >= 5.2 for qwen3_5_moe" in AUTOEP_NOTE
    assert "with transformers >= 5.0;" not in AUTOEP_NOTE
