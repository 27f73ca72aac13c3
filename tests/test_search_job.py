"""``memsym search`` of a whole job (issue 32, "every framework's job in, and the layout out").

The oracles are two independent paths through the command line: ``memsym estimate`` of the
same job (its reading, its Job, ``memsym.training.job_memory`` and the one-layout step time)
against the search's row of exactly the layout the job sets (the vectorized templates and the
grid step time), and the read-back of each ``--emit megatron`` layout by ``memsym estimate``.
The layouts pinned are typed from the scripts themselves (NVIDIA/Megatron-LM examples at
d98e8a64dd, held verbatim in tests/test_readers_megatron.py), never from memsym's output.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from test_readers_megatron import SCRIPTS
from in_process import run

GPU = ("--gpu", "h100-80gb")

# a DeepSpeed config of ZeRO-2 with a batch of 64 = 2 per GPU x 4 steps x 8 GPUs
DS_ZERO2 = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
            "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 2, "overlap_comm": True}}


def as_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    assert code in (0, 1) and out, err
    return json.loads(out)


@pytest.fixture
def script(tmp_path):
    def write(key):
        path = tmp_path / f"{key}.sh"
        path.write_text(SCRIPTS[key][2], encoding="utf-8")
        return str(path)
    return write


def _same_row(capsys, job, pins, estimate_job=None):
    """The search's row of the pinned layout and estimate's report of the same job (or of
    ``estimate_job``, the same job written with the pinned choice)."""
    est = as_json(capsys, "estimate", *(estimate_job or job), *GPU)
    rows = as_json(capsys, "search", *job, *GPU, *pins, "--no-uneven-stages", "--top", "1")
    assert len(rows) == 1
    return rows[0], est


# the layouts the scripts set, typed from them: train_mixtral_8x7b_distributed.sh passes
# --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 --expert-model-parallel-size 8
# --micro-batch-size 1 --use-distributed-optimizer (64 GPUs: its README's 8 nodes);
# train_llama3_8b_h100_fp8.sh TP_SIZE=1 CP_SIZE=1 (no PP), MICRO_BATCH_SIZE=1,
# --use-distributed-optimizer, on its torchrun's 8 x 1 GPUs.  With the FP8 parameters'
# transpose on Hopper (memsym.terms.low_precision.fp8_weight_bytes) its layout is tight: 91.7 GB with
# the fragmentation margin, within the H100 without it; the search lists only layouts that fit,
# so both sides price it with --fragmentation 0 (the row and the estimate must still agree)
PINNED = {
    "mixtral_8x7b": (["--world-size", "64", "--vocab-size", "32000"],
                     ["--tp", 1, "--pp", 4, "--cp", 1, "--ep", 8, "--vpp", 1,
                      "--micro-batch-size", 1, "--sharding", "distributed-optimizer"]),
    "llama3_8b_fp8": (["--fragmentation", "0"],
                      ["--tp", 1, "--pp", 1, "--cp", 1, "--ep", 1, "--vpp", 1,
                       "--micro-batch-size", 1, "--sharding", "distributed-optimizer"]),
}


@pytest.mark.parametrize("key", sorted(PINNED))
def test_the_scripts_layout_row_equals_estimate(capsys, script, key):
    extra, pins = PINNED[key]
    job = ["--launch-script", script(key), *extra]
    row, est = _same_row(capsys, job, pins)
    assert row["bytes"]["total"] == est["bytes"]["total"]
    assert {k: v for k, v in row["bytes"].items()} == est["bytes"]
    assert row["step_time_s"] == pytest.approx(est["step_time_s"], rel=1e-12)
    # the job's own world size is searched when --gpus is not given, and said so
    assert row["gpus"] == est["layout"]["world_size"]
    assert row["job"]["gpus_from"] == "the job's world size"
    assert row["job"]["read_as"] == est["read_as"]
    assert row["job"]["source"] == f"--launch-script {job[1]}"


def test_the_fp8_scripts_settings_are_held(capsys, script):
    # train_llama3_8b_h100_fp8.sh: --seq-length 8192, --global-batch-size 128,
    # --fp8-format hybrid, --fp8-param-gather, --grad-reduce-in-bf16, the overlaps
    rows = as_json(capsys, "search", "--launch-script", script("llama3_8b_fp8"), *GPU,
                   "--top", "3")
    held = rows[0]["job"]["held"]
    assert (held["seq_length"], held["global_batch_size"], held["precision"]) == (8192, 128, "fp8")
    assert held["fp8_param_gather"] is True and held["grad_dtype"] == "bf16"
    assert held["overlap_grad_reduce"] is True and held["overlap_param_gather"] is True
    # --fp8-param-gather needs the distributed optimizer (Megatron's validate_args)
    assert {r["layout"]["sharding"] for r in rows} == {"distributed-optimizer"}


def test_the_jobs_layout_is_not_pinned_unless_asked(capsys, script):
    job = ["--launch-script", script("mixtral_8x7b"), "--world-size", "64",
           "--vocab-size", "32000"]
    # twenty rows each (of ~40,000 and ~27,500): a pin narrows the space every row comes from,
    # and the top twenty already span eight (pp, dp); each --json row is priced exactly
    # (memsym.search.exact): 360 rows fewer, 5.7 s of CPU less
    rows = as_json(capsys, "search", *job, *GPU, "--top", "20")
    assert len({(r["layout"]["pp"], r["layout"]["dp"]) for r in rows}) > 1
    assert rows[0]["job"]["job_layout"]["pp"] == 4      # the script's, reported
    pinned = as_json(capsys, "search", *job, *GPU, "--pp", "2", "--top", "20")
    assert {r["layout"]["pp"] for r in pinned} == {2}
    # the job read at its --world-size, the search on --gpus
    wider = as_json(capsys, "search", *job, *GPU, "--gpus", "128", "--top", "1")
    assert wider[0]["gpus"] == 128 and wider[0]["job"]["gpus_from"] == "--gpus"
    assert wider[0]["job"]["job_layout"]["world_size"] == 64


def test_a_pasted_commands_layout_is_the_jobs_not_a_pin(capsys):
    # after torchrun ... pretrain_gpt.py the words are the job's: its
    # --tensor-model-parallel-size 2 is its own layout (8 GPUs: d = 4), not the search's pin
    command = ["torchrun", "--nproc_per_node", 8, "pretrain_gpt.py", "--num-layers", 16,
               "--hidden-size", 2048, "--num-attention-heads", 16, "--seq-length", 4096,
               "--max-position-embeddings", 4096, "--vocab-size", 32000, "--bf16",
               "--micro-batch-size", 1, "--global-batch-size", 64,
               "--tensor-model-parallel-size", 2, "--use-distributed-optimizer"]
    rows = as_json(capsys, "search", *GPU, *command, "--top", "100")
    assert rows[0]["job"]["job_layout"]["tp"] == 2 and rows[0]["job"]["job_layout"]["dp"] == 4
    assert rows[0]["job"]["source"] == "pasted Megatron-LM arguments"
    assert len({r["layout"]["tp"] for r in rows}) > 1 and rows[0]["gpus"] == 8
    # the same words before the launcher are the search's: a pin
    pinned = as_json(capsys, "search", "--tp", 2, *GPU, *command, "--top", "100")
    assert {r["layout"]["tp"] for r in pinned} == {2}


def test_a_bridge_recipe_is_searched(capsys):
    # llama3_8b_pretrain_config: t = p = 1, c = 2, micro-batch 1, the distributed optimizer
    # (tests/test_bridge_recipes.py checks it against the explicit command); on 8 GPUs d = 4
    job = ["--bridge-recipe", "llama3_8b_pretrain_config", "--world-size", "8"]
    row, est = _same_row(capsys, job, ["--tp", 1, "--pp", 1, "--cp", 2, "--vpp", 1,
                                       "--micro-batch-size", 1, "--sharding",
                                       "distributed-optimizer"])
    assert row["bytes"] == est["bytes"] and row["layout"]["dp"] == 4
    assert row["step_time_s"] == pytest.approx(est["step_time_s"], rel=1e-12)
    assert row["job"]["source"] == "--bridge-recipe llama3_8b_pretrain_config"
    assert "Megatron-Bridge recipe" in row["job"]["read_as"]


def test_a_deepspeed_config_is_searched(capsys, tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(DS_ZERO2), encoding="utf-8")
    job = ["llama2-7b", "--deepspeed-config", path, "--world-size", "8", "--seq-length", "2048"]
    row, est = _same_row(capsys, job, ["--tp", 1, "--pp", 1, "--cp", 1,
                                       "--micro-batch-size", 2, "--sharding", "zero2"])
    assert row["bytes"] == est["bytes"] and row["layout"]["num_microbatches"] == 4
    assert row["step_time_s"] == pytest.approx(est["step_time_s"], rel=1e-12)
    held = row["job"]["held"]
    assert held["framework"] == "deepspeed" and held["global_batch_size"] == 64
    assert held["overlap_grad_reduce"] is True                  # its overlap_comm
    assert row["job"]["source"] == f"MODEL llama2-7b, --deepspeed-config {path}"


def test_a_torchtitan_config_is_searched(capsys):
    # torchtitan v0.2.2 llama3_8b.toml: FSDP2 over the data-parallel ranks (no TP/PP/CP),
    # local_batch_size 1, activation_checkpoint mode "selective" with selective_ac_option "op"
    path = "tests/data/torchtitan/v0.2.2/llama3__llama3_8b.toml"
    job = ["llama3-8b", "--torchtitan-config", path, "--world-size", "8"]
    row, est = _same_row(capsys, job, ["--tp", 1, "--pp", 1, "--cp", 1, "--vpp", 1,
                                       "--micro-batch-size", 1, "--sharding", "fsdp"])
    assert row["bytes"] == est["bytes"] and row["layout"]["recompute"] == "selective-op"
    assert row["step_time_s"] == pytest.approx(est["step_time_s"], rel=1e-12)
    assert row["job"]["read_as"] == est["read_as"] == "a torchtitan job TOML (v0.2 keys)"
    assert row["job"]["held"]["framework"] == "torchtitan"


def test_a_compiled_torchtitan_job_searches_every_recompute(capsys, tmp_path):
    """torch.compile of the model ([compile] enable, components "model") changes what per-op
    SAC saves only (memsym.readers.jobs.torchtitan_job reads it so): a row that recomputes
    otherwise is the same job without it, where the search used to refuse the whole job
    ("compiled_model changes only recompute 'selective-op'").  A full-recompute row equals the
    estimate of the job's TOML with mode "full"."""
    text = Path("tests/data/torchtitan/v0.2.2/llama3__llama3_8b.toml").read_text()
    compiled = text.replace("enable=false", "enable=true")
    assert compiled != text
    (tmp_path / "sac.toml").write_text(compiled)
    (tmp_path / "full.toml").write_text(compiled.replace('mode = "selective"', 'mode = "full"'))
    row, est = _same_row(capsys, ["llama3-8b", "--torchtitan-config", tmp_path / "sac.toml",
                                  "--world-size", "8"],
                         ["--tp", 1, "--pp", 1, "--cp", 1, "--vpp", 1, "--micro-batch-size", 1,
                          "--sharding", "fsdp", "--recompute-granularity", "full"],
                         estimate_job=["llama3-8b", "--torchtitan-config", tmp_path / "full.toml",
                                       "--world-size", "8"])
    assert row["layout"]["recompute"] == "full" and row["bytes"] == est["bytes"]
    assert row["step_time_s"] == pytest.approx(est["step_time_s"], rel=1e-12)


def test_emit_megatron_from_a_script_reads_back_the_same(capsys, script):
    job = ["--launch-script", script("mixtral_8x7b"), "--world-size", "64",
           "--vocab-size", "32000"]
    rows = as_json(capsys, "search", *job, *GPU, "--top", "3", "--emit", "megatron")
    for row in rows:
        words = shlex.split(row["emit"]["read_back"])
        assert words[:2] == ["memsym", "estimate"] and "--launch-script" not in words
        back = json.loads(run(capsys, *words[1:])[1])
        assert back["bytes"]["total"] == row["bytes"]["total"]
        assert back["layout"]["tp"] == row["layout"]["tp"]
        assert back["layout"]["pp"] == row["layout"]["pp"]
        assert back["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-12)


def test_emit_from_a_model_with_an_args_file_and_a_deepspeed_config(capsys, tmp_path):
    args = tmp_path / "args.txt"
    args.write_text("--seq-length 4096 --micro-batch-size 1 --global-batch-size 64 "
                    "--use-distributed-optimizer --overlap-grad-reduce --lr 3e-4", encoding="utf-8")
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps(DS_ZERO2), encoding="utf-8")
    for job, emit in ((["llama3-8b", "--args-file", args, "--gpus", 16], "megatron"),
                      (["llama2-7b", "--deepspeed-config", config, "--world-size", 8,
                        "--seq-length", 2048, "--cp", 1], "deepspeed")):
        rows = as_json(capsys, "search", *job, *GPU, "--top", "2", "--emit", emit,
                       "--emit-dir", tmp_path / emit)
        for row in rows:
            words = shlex.split(row["emit"]["read_back"])
            assert str(args) not in words and str(config) not in words
            back = json.loads(run(capsys, *words[1:])[1])
            assert back["bytes"]["total"] == row["bytes"]["total"]
            assert back["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-12)


@pytest.mark.parametrize("extra", [
    ("--precision", "fp16"),                 # the script says --bf16 (estimate's rule)
    ("--fp16",),                             # beside the script's --bf16 (Megatron's rule)
    ("--sharding", "ddp"),                   # a pin the script's --fp8-param-gather refuses
    ("--not-a-megatron-flag", "1"),
    ("--emit", "torchtitan"),                # a Megatron-LM job priced under torchtitan
])
def test_conflicts_are_one_line_and_exit_2(capsys, script, extra):
    code, out, err = run(capsys, "search", "--launch-script", script("llama3_8b_fp8"), *GPU,
                         *extra)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err


def test_the_same_conflict_is_refused_as_estimate_refuses_it(capsys, script):
    path = script("llama3_8b_fp8")
    _, _, by_estimate = run(capsys, "estimate", "--launch-script", path, "--precision", "fp16")
    code, out, by_search = run(capsys, "search", "--launch-script", path, *GPU,
                               "--precision", "fp16")
    assert code == 2 and out == "" and by_search == by_estimate


@pytest.mark.parametrize("argv", [
    ("--bridge-recipe", "llama3_8b_pretrain_config", "llama3-8x"),   # no override, no MODEL
    ("--bridge-recipe", "llama3_8b_pretrain_config", "--emit", "deepspeed"),  # Megatron's
    ("--gpus", "8"),                                                  # no MODEL, no job
])
def test_bad_job_inputs_are_one_line(capsys, argv):
    code, out, err = run(capsys, "search", *GPU, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err


def test_an_moe_rows_bytes_do_not_depend_on_the_other_rows():
    # ZeRO-2 / FSDP buffers hold the largest layer on one GPU (N_ll), which depends on e:
    # the row e = 8 is the job e = 8's (memsym.training.job_memory), whatever e was met first
    from memsym.job import job
    from memsym.search import search
    from memsym.training import job_memory

    res = search("mixtral-8x7b", "h100-80gb", 64, global_batch_size=256, seq_length=4096,
                 tp=[1], pp=[1], cp=[1], ep=[4, 8], micro_batch_sizes=[1],
                 sharding=["zero2"], recompute=["none"])
    i = next(int(i) for i in res.order() if res.row(int(i))["e"] == 8)
    j = job("mixtral-8x7b", gpu="h100-80gb", t=1, p=1, c=1, e=8, d=64, micro_batch_size=1,
            global_batch_size=256, seq_length=4096, sharding="zero2",
            megatron_fsdp="optim_grads", recompute="none",
            overlap_grad_reduce=True, overlap_param_gather=True)
    assert res.exact(i)["bytes"]["total"] == job_memory(j).bytes_total


@pytest.mark.parametrize("kw", [dict(precision="fp8", fp8_param_gather=True),
                                dict(optimizer_cuda_graph=True)])
def test_search_of_a_job_holds_its_other_settings(kw):
    # search(job) holds the job's FP8 parameter gathers / optimizer CUDA graph: each row is
    # the job at that layout (memsym.training.job_memory, estimate's path); FP8 parameter
    # gathers need the distributed optimizer (Megatron's validate_args): no DDP row
    from memsym.job import job
    from memsym.search import search
    from memsym.training import job_memory

    base = dict(gpu="h100-80gb", global_batch_size=64, overlap_grad_reduce=True,
                overlap_param_gather=True, **kw)
    res = search(job("llama3-8b", **base), gpus=16, recompute=["selective"],
                 overlaps={"overlap_grad_reduce": True, "overlap_param_gather": True})
    for i in res.order()[:4]:
        r = res.row(int(i))
        fsdp = {"zero2": "optim_grads", "fsdp": "optim_grads_params"}.get(r["sharding"])
        assert r["sharding"] != "ddp"
        at = job("llama3-8b", **base, t=r["t"], p=r["p"], c=r["c"], d=r["d"],
                 v=r["v"] if r["v"] > 1 else None, micro_batch_size=r["b"],
                 recompute="selective", sequence_parallel=r["sequence_parallel"],
                 first_stage_layers=r["first_stage_layers"],
                 last_stage_layers=r["last_stage_layers"],
                 sharding=r["sharding"], **({} if fsdp is None else {"megatron_fsdp": fsdp}))
        assert res.exact(int(i))["bytes"]["total"] == job_memory(at).bytes_total


# ---------------------------------------------------------------------------------------------
# A Hugging Face DeepSpeed config: "auto" batch values
# ---------------------------------------------------------------------------------------------
def _hf_config(tmp_path, name):
    from test_deepspeed_configs import HF_ZERO2, HF_ZERO3

    path = tmp_path / f"{name}.json"
    path.write_text({"zero2": HF_ZERO2, "zero3": HF_ZERO3}[name], encoding="utf-8")
    return path


@pytest.mark.parametrize("name, sharding", [("zero2", "zero2"), ("zero3", "zero3")])
def test_an_auto_micro_batch_is_searched(capsys, tmp_path, name, sharding):
    # transformers' ds_config_zero2/3.json: train_micro_batch_size_per_gpu, train_batch_size
    # and gradient_accumulation_steps "auto".  The Trainer fills them from its arguments
    # (trainer_config_process: micro-batch <- --per_device_train_batch_size, train_batch_size
    # = world x micro x accumulation), so the search varies b and holds B = 64: its row
    # b = 2 on 8 GPUs is the estimate of --per_device_train_batch_size 2 with 64 / (2 x 8) = 4
    # accumulation steps (train_batch_size 2 x 4 x 8 = 64)
    path = _hf_config(tmp_path, name)
    common = ["llama2-7b", "--deepspeed-config", path, "--world-size", 8, "--seq-length", 2048,
              "--precision", "bf16"]
    est = as_json(capsys, "estimate", *common, "--micro-batch-size", 2,
                  "--num-microbatches", 4, *GPU)
    rows = as_json(capsys, "search", *common, "--global-batch-size", 64, *GPU,
                   "--tp", 1, "--pp", 1, "--cp", 1, "--micro-batch-size", 2,
                   "--sharding", sharding, "--top", 1)
    row = rows[0]
    assert row["layout"]["micro_batch_size"] == 2 and row["layout"]["num_microbatches"] == 4
    assert row["bytes"] == est["bytes"]
    assert row["step_time_s"] == pytest.approx(est["step_time_s"], rel=1e-12)
    job = row["job"]
    assert job["job_layout"]["micro_batch_size"] == "auto"
    assert job["held"]["global_batch_size"] == 64 and job["held"]["framework"] == "deepspeed"
    # unpinned, the micro-batch is searched (the largest the 64 sequences allow on d = 8: 8)
    free = as_json(capsys, "search", *common, "--global-batch-size", 64, *GPU, "--top", 300)
    assert len({r["layout"]["micro_batch_size"] for r in free}) > 1


def test_an_auto_micro_batch_reads_back_from_the_emitted_config(capsys, tmp_path):
    path = _hf_config(tmp_path, "zero2")
    rows = as_json(capsys, "search", "llama2-7b", "--deepspeed-config", path, "--world-size", 8,
                   "--seq-length", 2048, "--precision", "bf16", "--global-batch-size", 64,
                   "--cp", 1, *GPU, "--top", 2, "--emit", "deepspeed", "--emit-dir",
                   tmp_path / "out")
    for row in rows:
        words = shlex.split(row["emit"]["read_back"])
        assert str(path) not in words
        back = json.loads(run(capsys, *words[1:])[1])
        assert back["bytes"]["total"] == row["bytes"]["total"]
        assert back["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-12)


@pytest.mark.parametrize("extra, named", [
    ((), "--global-batch-size"),                       # train_batch_size "auto": B unknown
    (("--global-batch-size", 64, "--num-microbatches", 4), "--num-microbatches"),
])
def test_an_auto_batch_without_its_global_batch_is_one_line(capsys, tmp_path, extra, named):
    path = _hf_config(tmp_path, "zero2")
    code, out, err = run(capsys, "search", "llama2-7b", "--deepspeed-config", path,
                         "--world-size", 8, "--precision", "bf16", *extra, *GPU)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert named in err


def test_a_numeric_train_batch_is_held_under_an_auto_micro_batch(capsys, tmp_path):
    # DeepSpeedExamples autotuning/hf/dsconfigs style: micro-batch "auto", a train batch of 64
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto",
                                "train_batch_size": 64, "bf16": {"enabled": True},
                                "zero_optimization": {"stage": 2}}), encoding="utf-8")
    rows = as_json(capsys, "search", "llama2-7b", "--deepspeed-config", path, "--gpus", 8,
                   "--seq-length", 2048, *GPU, "--top", 1)
    assert rows[0]["job"]["held"]["global_batch_size"] == 64 and rows[0]["gpus"] == 8
    code, out, err = run(capsys, "search", "llama2-7b", "--deepspeed-config", path, "--gpus", 8,
                         "--global-batch-size", 32, *GPU)
    assert code == 2 and "train_batch_size 64" in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# A Megatron-Bridge recipe out: run_recipe.py's --recipe NAME and section.field=value overrides
# ---------------------------------------------------------------------------------------------
def test_a_bridge_layout_is_emitted_as_run_recipe_overrides(capsys, tmp_path):
    # llama3_8b_pretrain_2gpu_h100_bf16_config (recipes/llama/h100/llama3.py:235-263 at
    # 067f987df0): t = 1, c = 2, seq 8192, global batch 512, micro-batch 1.  The layout
    # pinned here, t = 2 with SP and c = 1 under the distributed optimizer, is written as
    # run_recipe.py takes it (scripts/training/run_recipe.py: --recipe, --mode, trailing
    # KEY=VALUE overrides) with the global batch the recipe holds
    job = ["--bridge-recipe", "llama3_8b_pretrain_config", "--world-size", 8]
    rows = as_json(capsys, "search", *job, *GPU, "--tp", 2, "--pp", 1, "--cp", 1, "--vpp", 1,
                   "--micro-batch-size", 1, "--sharding", "distributed-optimizer",
                   "--top", 1, "--emit", "megatron")
    emitted = rows[0]["emit"]
    words = emitted["arguments"]
    assert words[:4] == ["--recipe", "llama3_8b_pretrain_config", "--mode", "pretrain"]
    for override in ("model.tensor_model_parallel_size=2", "model.pipeline_model_parallel_size=1",
                     "model.context_parallel_size=1", "model.sequence_parallel=true",
                     "train.micro_batch_size=1", "train.global_batch_size=512",
                     "ddp.use_distributed_optimizer=true", "ddp.use_megatron_fsdp=false"):
        assert override in words, override
    assert not any(w.startswith("--") for w in words[4:])    # no Megatron-LM argument
    assert emitted["text"].splitlines()[0] == "--recipe llama3_8b_pretrain_config"


@pytest.mark.parametrize("job, pins", [
    (["--bridge-recipe", "llama3_8b_pretrain_config", "--world-size", 8],
     ["--sharding", "ddp", "distributed-optimizer", "fsdp"]),
    # the job's own overrides are kept (those the layout sets are replaced), and a searched
    # recompute is written out
    (["--bridge-recipe", "llama3_8b_pretrain_config", "-tp", 2, "mixed_precision=bf16_mixed",
      "--world-size", 8], ["--recompute", "selective", "full"]),
    # a TP-overlapped recipe (t = 4, SP, comm_overlap.tp_comm_overlap) at other layouts
    (["--bridge-recipe", "llama3_70b_pretrain_config", "--world-size", 64],
     ["--tp", 1, 8, "--sharding", "ddp", "distributed-optimizer"]),
    # the same at t = 1 (-tp 1): the search holds no TP overlap, so a t = 8 layout is
    # written with comm_overlap.tp_comm_overlap=false (Bridge would turn it on at t > 1 with SP)
    (["--bridge-recipe", "llama3_70b_pretrain_config", "-tp", 1, "--world-size", 64],
     ["--tp", 8]),
    # an MoE recipe (expert parallelism, the precision-aware optimizer held)
    (["--bridge-recipe", "qwen3_30b_a3b_pretrain_config", "--gpus", 32], []),
    # fine-tuning recipes, relaunched in the mode they were read in (run_recipe.py refuses
    # --mode pretrain for them, _validate_recipe_mode :300-304 at 067f987df0): a perf SFT
    # recipe (perf_recipes/llama/h100/llama3.py), a perf LoRA one (its name's _peft_: lora,
    # recipe_metadata.py:223-224), and a library LoRA recipe with its mode given
    (["--bridge-recipe", "llama3_8b_sft_8gpu_h100_bf16_config"], ["--tp", 1, 2]),
    (["--bridge-recipe", "llama3_70b_peft_8gpu_h100_fp8cs_config"], []),
    (["--bridge-recipe", "llama3_8b_peft_1gpu_h100_bf16_config", "--mode", "lora",
      "--world-size", 8], ["--tp", 1, 2]),
])
def test_a_bridge_layout_reads_back_the_same(capsys, tmp_path, job, pins):
    for where in (None, tmp_path / str(len(pins))):
        rows = as_json(capsys, "search", *job, *GPU, *pins, "--top", 4, "--emit", "megatron",
                       *([] if where is None else ["--emit-dir", where]))
        for row in rows:
            words = shlex.split(row["emit"]["read_back"])
            assert "--bridge-recipe" not in words
            # one mode, the job's: given, or run_recipe.py's inference from the name
            # (infer_recipe_mode, recipe_metadata.py:214-225: _pretrain_, _sft_, _peft_ lora)
            task = re.search(r"_(pretrain|sft|peft)_", job[1]).group(1)
            mode = job[job.index("--mode") + 1] if "--mode" in job else \
                {"pretrain": "pretrain", "sft": "sft", "peft": "lora"}[task]
            arguments = row["emit"]["arguments"]
            assert arguments[2:4] == ["--mode", mode]
            assert not any(w.startswith("--mode") for w in arguments[4:])
            if where is None:
                assert "--recipe" in words
            else:       # the file is run_recipe.py's argument list, read back as one
                path = words[words.index("--args-file") + 1]
                assert open(path, encoding="utf-8").read().startswith("--recipe ")
            code, out, err = run(capsys, *words[1:])
            assert code in (0, 1), err
            back = json.loads(out)
            assert back["bytes"] == row["bytes"]
            assert back["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-12)
            lay = row["layout"]
            if job[1] == "llama3_70b_pretrain_config" and "-tp" in job and lay["sequence_parallel"]:
                assert "comm_overlap.tp_comm_overlap=false" in row["emit"]["arguments"]
            assert (back["layout"]["tp"], back["layout"]["pp"], back["layout"]["cp"],
                    back["layout"]["ep"]) == (lay["tp"], lay["pp"], lay["cp"], lay["ep"])


# ---------------------------------------------------------------------------------------------
# A job that places its layers itself: emitted as the even (or first/last) split it was priced
# ---------------------------------------------------------------------------------------------
#: Llama 3 8B as a Megatron-LM argument file that counts the embedding and the loss as layers
#: in the pipeline split (arguments.py --account-for-embedding/loss-in-pipeline-split at
#: d98e8a64dd): 32 + 2 units, 17 per stage at p = 2, none at p = 2 with v = 16.
_ACCOUNTED = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
              "--group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 --swiglu "
              "--seq-length 4096 --max-position-embeddings 8192 --position-embedding-type rope "
              "--normalization RMSNorm --untie-embeddings-and-output-weights "
              "--disable-bias-linear --vocab-size 128256 --tokenizer-type NullTokenizer "
              "--micro-batch-size 1 --global-batch-size 64 --bf16 --tensor-model-parallel-size 2 "
              "--pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split "
              "--account-for-loss-in-pipeline-split --use-distributed-optimizer --world-size 16")


@pytest.mark.parametrize("job, pins, said", [
    # the layouts the search prices (t = p = 2, v = 16: one layer per virtual stage) would
    # not launch beside the accounting (34 units over 32 virtual stages): it is left out
    ("args", ["--gpus", 16, "--tp", 2, "--pp", 2, "--vpp", 16, "--no-uneven-stages"],
     "--account-for-embedding-in-pipeline-split"),
    # Llama 3.1 405B's perf recipe counts the embedding and loss in its split
    # (perf_recipes llama31_405b 256gpu h100: account_for_*_in_pipeline_split True)
    (["--bridge-recipe", "llama31_405b_pretrain_256gpu_h100_bf16_config"],
     ["--gpus", 256, "--tp", 8, "--pp", 8, "--cp", 4, "--gpu-memory", "2000GB"],
     "model.account_for_loss_in_pipeline_split"),
    # DeepSeek-V3's recipe builds its layout for each (PP, VP) (recipes/deepseek/h100/
    # deepseek_v3.py:154-155), and the perf recipe run_recipe.py runs for this name keeps
    # that builder from its base (perf_recipes/deepseek/h100/deepseek_v3.py:30): written null,
    # which run_recipe.py's sync_model_pipeline_layout keeps
    (["--bridge-recipe", "deepseek_v3_pretrain_1024gpu_h100_bf16_config"],
     ["--gpus", 1024, "--tp", 2, "--pp", 8, "--cp", 1, "--ep", 64, "--gpu-memory", "2000GB"],
     "model._pipeline_model_parallel_layout_builder"),
])
def test_a_job_placing_its_layers_is_emitted_as_searched(capsys, tmp_path, job, pins, said):
    if job == "args":
        path = tmp_path / "args.txt"
        path.write_text(_ACCOUNTED + "\n", encoding="utf-8")
        job = ["--args-file", path]
    rows = as_json(capsys, "search", *job, *GPU, *pins, "--top", 2, "--emit", "megatron")
    for row in rows:
        emitted = row["emit"]
        assert any(said in note for note in emitted["notes"]), emitted
        words = emitted["arguments"]
        assert not any(w.startswith("--account-for") for w in words)
        if "--recipe" in words:
            for off in ("model.pipeline_model_parallel_layout=null",
                        "model.account_for_embedding_in_pipeline_split=false",
                        "model.account_for_loss_in_pipeline_split=false"):
                assert off in words
        code, out, err = run(capsys, *shlex.split(emitted["read_back"])[1:])
        assert code in (0, 1), err
        back = json.loads(out)
        assert back["bytes"] == row["bytes"]
        lay = row["layout"]
        assert (back["layout"]["tp"], back["layout"]["pp"], back["layout"]["vpp"] or 1) == \
            (lay["tp"], lay["pp"], lay["vpp"])


def test_a_recipe_with_its_own_expert_tp_reads_back_as_searched(capsys):
    # DeepSeek-V3's GB300 FSDP recipe sets expert_tensor_parallel_size 1; the search prices
    # its own t_e (t or 1) and writes it: 1 as model.expert_tensor_parallel_size=1, t as
    # null (Megatron-core's None default is t, model_parallel_config.py:506-507), never the
    # recipe's value left in place; both read back as searched
    job = ["--bridge-recipe", "deepseek_v3_pretrain_64gpu_gb300_bf16_fsdp_config"]
    rows = as_json(capsys, "search", *job, "--gpu", "gb300", "--gpus", 64, "--tp", 2, "--pp", 1,
                   "--cp", 1, "--no-uneven-stages", "--top", 4, "--emit", "megatron")
    # the recipe's own etp (1) is reported and searched, not pinned
    assert rows[0]["job"]["job_layout"]["etp"] == 1 and "etp" in rows[0]["job"]["searched"]
    for row in rows:
        words = row["emit"]["arguments"]
        said = "1" if row["layout"]["etp"] == 1 else "null"
        assert row["layout"]["etp"] in (1, 2)
        assert f"model.expert_tensor_parallel_size={said}" in words
        code, out, err = run(capsys, *shlex.split(row["emit"]["read_back"])[1:])
        assert code in (0, 1), err
        back = json.loads(out)
        assert back["bytes"] == row["bytes"]
        assert back["layout"]["etp"] == row["layout"]["etp"]


def test_gpus_is_the_world_size_of_an_args_file_without_one(capsys, tmp_path):
    # search's --gpus is "the number of GPUs (world size)" (memsym.cli.command_rows): a
    # Megatron argument file without --world-size or a launcher is read on those GPUs, the
    # same rows as the file with --world-size 8 in it
    words = ["--num-layers", "16", "--hidden-size", "2048", "--num-attention-heads", "16",
             "--seq-length", "4096", "--max-position-embeddings", "4096", "--vocab-size",
             "32000", "--bf16", "--micro-batch-size", "1", "--global-batch-size", "64",
             "--use-distributed-optimizer"]
    bare, sized = tmp_path / "bare.txt", tmp_path / "sized.txt"
    bare.write_text(" ".join(words), encoding="utf-8")
    sized.write_text(" ".join(words + ["--world-size", "8"]), encoding="utf-8")
    def searched(path):
        rows = as_json(capsys, "search", "--args-file", path, "--gpus", 8, *GPU, "--top", 5)
        for row in rows:
            assert row["job"].pop("source") == f"--args-file {path}"
        return rows

    rows = searched(bare)
    assert rows[0]["gpus"] == 8 and rows[0]["job"]["job_layout"]["world_size"] == 8
    assert rows == searched(sized)
