"""A Hugging Face Trainer launch without ``--deepspeed`` (plain torch DDP) read as the job it
runs, and a launch's reading said alike by estimate, search, solve and plot
(memsym.cli.hf_launch, memsym.terms.torch_ddp).

The expectations are by-hand counts of the two-layer Llama of tests/tiny_llama.py, transformers 5.25.0
and Accelerate 1.16's sources (cited where asserted); tests/test_engine_ddp.py measures torch's
reducer itself.
"""

from __future__ import annotations

import json

import pytest

from in_process import json_report, refused_line, run
from tiny_llama import F, H, LAYERS, TINY, tiny_llama
from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.job import job

#: A ZeRO-2 DeepSpeed config whose batch and precision the launch fills ("auto").
ZERO2_AUTO = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
              "train_batch_size": "auto", "bf16": {"enabled": "auto"},
              "zero_optimization": {"stage": 2}}


@pytest.fixture
def tiny(tmp_path):
    return tiny_llama(tmp_path)


@pytest.fixture
def ds_config(tmp_path):
    path = tmp_path / "ds_zero2.json"
    path.write_text(json.dumps(ZERO2_AUTO), encoding="utf-8")
    return str(path)


def _ddp(model, *extra, dtype=("--dtype", "float32")):
    return ["torchrun", "--nproc_per_node", "2", "run_clm.py", "--model_name_or_path", model,
            *dtype, "--block_size", "128", "--per_device_train_batch_size", "2",
            "--gradient_accumulation_steps", "3", "--gradient_checkpointing", "--output_dir", "o",
            "--learning_rate", "1e-5", *extra]


def _ds(model, config, *extra):
    return ["deepspeed", "--num_gpus", "2", "run_clm.py", "--deepspeed", config,
            "--model_name_or_path", model, "--block_size", "128", "--bf16",
            "--per_device_train_batch_size", "2", "--output_dir", "o", *extra]


def test_plain_ddp_holds_fp32_states_and_the_buckets_copy(capsys, tiny):
    """fp32 weights (4 B), param.grad (4 B), AdamW's two fp32 moments (8 B, no master copy: the
    parameters are fp32) and the reducer's buckets (4 B), each over every parameter on every
    GPU: 20 B x 1 824 000; the batch is per-device 2 x accumulation 3 x 2 GPUs = 12."""
    rep = json_report(capsys, ["estimate", *_ddp(tiny), "--gpu", "h100-80gb"])
    got = rep["bytes"]
    assert (got["weights"], got["gradients"], got["ddp_buckets"], got["optimizer"]) == (
        4 * TINY, 4 * TINY, 4 * TINY, 8 * TINY)
    assert "main_gradients" not in got
    assert rep["layout"]["dp"] == 2 and rep["global_batch"] == 12
    # the reducer all-reduces each bucket from its autograd hooks, during the backward
    assert rep["training"]["overlap_grad_reduce"] is True
    assert rep["training"]["torch_ddp_buckets"] is True
    assert rep["training"]["recompute"] == "full" and rep["training"]["precision"] == "fp32"
    assert rep["read_as"].startswith("a Hugging Face Trainer launch (run_clm.py with torch DDP")
    assert any("gradient_as_bucket_view False" in n for n in rep["notes"])
    assert not any("DeepSpeed runs" in n for n in rep["notes"])
    # fp32 compute keeps every tensor in 4 bytes (tests/test_hf_activations.py measures the
    # layer in fp32).  tau = s b = 256 tokens; at the peak (the blocks' backward) the loss's
    # logits are freed, and the checkpoints are held beside one layer rebuilt for its backward
    tau, hd, g_dh = 128 * 2, 4 * 64, 4 * 64
    checkpoints = LAYERS * 4 * tau * H                  # each layer's fp32 input
    ids = 8 * tau                                       # int64 token ids
    one_layer = (2 * 4 * tau * H + 2 * 4 * tau          # two RMSNorms' inputs, fp32 1/rms
                 + 2 * 4 * tau * H                      # their fp32 copies (LlamaRMSNorm)
                 + 4 * tau * H + 4 * tau * (hd + g_dh) + 4 * tau * g_dh   # QKV input; q, k; v
                 + 4 * 4 * tau + 4 * tau * hd           # flash logsumexp (4 heads); o_proj input
                 + 4 * tau * H + 2 * 4 * tau * F + 4 * tau * F    # fc1 input; gate, up; fc2 in
                 + 4 * tau * F)                         # SiLU's output (LlamaMLP, eager)
    assert got["activations"] + got.get("transients", 0) == checkpoints + ids + one_layer \
        == 5_251_072
    assert {"--output_dir", "--learning_rate"} <= set(rep["ignored"])


def test_plain_ddp_is_the_same_job_as_memsyms_options(capsys, tiny):
    """The launch is written as memsym's options (the module's docstring); without
    --torch-ddp-buckets the same job lacks exactly the buckets' row."""
    hf = json_report(capsys, ["estimate", *_ddp(tiny), "--gpu", "h100-80gb"])
    own = ["estimate", tiny, "--framework", "deepspeed", "--sharding", "ddp", "--precision",
           "fp32", "--optimizer", "adam", "--world-size", "2", "--micro-batch-size", "2",
           "--num-microbatches", "3", "--recompute-granularity", "full", "--seq-length", "128",
           "--gpu", "h100-80gb"]
    assert json_report(capsys, [*own, "--torch-ddp-buckets"])["bytes"] == hf["bytes"]
    bare = json_report(capsys, own)["bytes"]
    assert "ddp_buckets" not in bare
    assert {k: bare[k] for k in ("weights", "gradients", "optimizer", "activations")} == {
        k: hf["bytes"][k] for k in ("weights", "gradients", "optimizer", "activations")}


def test_no_checkpointing_is_the_trainers_default(capsys, tiny):
    """Without --gradient_checkpointing / --activation_checkpointing (both default None:
    training_args.py:908, 926) nothing is recomputed, the default cited to the Trainer."""
    words = [w for w in _ddp(tiny) if w != "--gradient_checkpointing"]
    rep = json_report(capsys, ["estimate", *words, "--gpu", "h100-80gb"])
    assert rep["training"]["recompute"] == "none"
    rows = [r for r in rep["defaults"] if r["option"] == "recompute"]
    assert len(rows) == 1 and "(line 908)" in rows[0]["source"]


def test_ddp_bucket_cap_changes_no_byte(capsys, tiny):
    """--ddp_bucket_cap_mb (training_args.py:1404) only groups the gradients: the same bytes,
    and a note says why."""
    rep = json_report(capsys, ["estimate", *_ddp(tiny, "--ddp_bucket_cap_mb", "50"), "--gpu",
                         "h100-80gb"])
    assert rep["bytes"] == json_report(capsys, ["estimate", *_ddp(tiny), "--gpu", "h100-80gb"])["bytes"]
    assert any("--ddp_bucket_cap_mb" in n for n in rep["notes"])


@pytest.mark.parametrize("extra, dtype, said", [
    ([], (), 'dtype "auto"'),                  # tiny's config.json names no dtype
    ([], ("--dtype", "int8"), "--dtype int8"),
    (["--fp16"], ("--dtype", "bfloat16"), "at every use"),
    (["--bf16"], ("--torch_dtype", "float16"), "at every use"),
    (["--fp16"], ("--dtype", "float16"), "grad_scaler.py:275"),
    (["--optim", "adafactor"], ("--dtype", "float32"), "--optim adafactor"),
    (["--torch-ddp-buckets"], ("--dtype", "float32"), "--torch-ddp-buckets beside"),
    (["--optimizer", "adam"], ("--dtype", "float32"), "--optimizer beside"),
    (["--sharding", "zero2"], ("--dtype", "float32"), "--sharding beside"),
])
def test_a_plain_ddp_launch_memsym_does_not_count_is_refused(capsys, tiny, extra, dtype, said):
    """A dtype memsym cannot know (no --dtype, and a config.json that names none: transformers
    5.25 would read the weights' own), autocast over 16-bit weights of the other dtype (over
    fp32 ones it is --autocast: tests/test_autocast.py), --fp16 over fp16 weights (torch's GradScaler refuses
    fp16 gradients), another optimizer and memsym's own spelling of what the launch says:
    one line each, exit 2."""
    assert said in refused_line(capsys, ["estimate", *_ddp(tiny, *extra, dtype=dtype)])


@pytest.mark.parametrize("opts, said", [
    ({}, "not sharding distributed-optimizer"),
    ({"sharding": "ddp"}, "not framework megatron"),
    ({"sharding": "ddp", "framework": "deepspeed", "precision": "fp8"}, "not precision fp8"),
    ({"sharding": "ddp", "framework": "deepspeed", "grad_dtype": "fp32"},
     "not grad_dtype fp32 beside precision bf16"),
    ({"sharding": "ddp", "framework": "deepspeed", "precision": "fp32", "optimizer": "sgd"},
     "not optimizer sgd"),
])
def test_the_bucket_copy_is_refused_where_it_is_not_counted(tiny, opts, said):
    with pytest.raises(InvalidValueError, match=said):
        job(tiny, torch_ddp_buckets=True, seq_length=128, **opts)


def test_search_refuses_a_plain_ddp_launch_in_one_line(capsys, tiny):
    """The search's space does not carry the bucket copy (memsym.search.job_fields): refused,
    not priced without it."""
    err = refused_line(capsys, ["search", *_ddp(tiny), "--gpu", "h100-80gb", "--gpus", "2"])
    assert "torch_ddp_buckets" in err


def _reading_of(rep):
    """What a reading says of the launch: how it was read and the arguments ignored."""
    return rep["read_as"], rep["ignored"]


def test_every_job_command_says_the_launchs_reading(capsys, tiny, ds_config, tmp_path):
    """estimate, solve, plot and search read a DeepSpeed launch alike and say so: the launch
    read (its DeepSpeed config named), the arguments ignored, the launch's notes and the
    Trainer's defaults; search no longer says "read as a DeepSpeed config"."""
    est = json_report(capsys, ["estimate", *_ds(tiny, ds_config), "--gpu", "h100-80gb"])
    assert est["read_as"].startswith("a Hugging Face Trainer launch (run_clm.py with the "
                                     f"DeepSpeed config {ds_config};")
    launch_defaults = [row for row in est["defaults"] if "training_args.py" in row["source"]]
    assert launch_defaults and launch_defaults[0]["option"] == "gradient_accumulation_steps"
    solve = json_report(capsys, ["solve", "micro-batch-size", *_ds(tiny, ds_config), "--gpu",
                           "h100-80gb"])["reading"]
    assert _reading_of(solve) == _reading_of(est)
    assert set(solve["notes"]) <= set(est["notes"])
    assert launch_defaults[0] in solve["defaults"]
    # the text: the same lines as estimate's (plot after the file it wrote)
    code = main(["plot", "breakdown", *_ds(tiny, ds_config), "--gpu", "h100-80gb", "-o",
                 str(tmp_path / "b.png")])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == f"read as {est['read_as']}"
    assert "ignored (no effect on memory or time): " + " ".join(est["ignored"]) in lines
    code = main(["search", *_ds(tiny, ds_config), "--gpu", "h100-80gb", "--gpus", "2",
                 "--top", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "read as a DeepSpeed config" not in out
    assert (f"job: the Hugging Face Trainer launch run_clm.py, MODEL {tiny} (read as "
            f"{est['read_as']})") in out
    assert "ignored (no effect on memory or time): " + " ".join(est["ignored"]) in out
    # the Trainer's default said; estimate's line adds the config's "auto" that takes it
    # (search holds the launch's global batch: its accumulation is the layout's)
    row = launch_defaults[0]
    trainer = row["source"].split("; ")[0]
    assert f"default: {row['option']} = {row['value']} ({trainer}" in out
    rep = json_report(capsys, ["search", *_ds(tiny, ds_config), "--gpu", "h100-80gb", "--gpus", "2",
                         "--top", "1"])
    assert rep[0]["job"]["read_as"] == est["read_as"]      # one row per layout, each its job
    assert any(r["option"] == row["option"] and r["source"].startswith(trainer)
               for r in rep[0]["job"]["defaults"])


def test_solve_and_plot_say_a_plain_ddp_launchs_reading(capsys, tiny, tmp_path):
    est = json_report(capsys, ["estimate", *_ddp(tiny), "--gpu", "h100-80gb"])
    solve = json_report(capsys, ["solve", "micro-batch-size", *_ddp(tiny), "--gpu", "h100-80gb"])
    assert _reading_of(solve["reading"]) == _reading_of(est)
    code = main(["solve", "micro-batch-size", *_ddp(tiny), "--gpu", "h100-80gb"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"  read as {est['read_as']}" in out.splitlines()


@pytest.mark.parametrize("head, tail", [(["estimate"], []), (["solve", "micro-batch-size"], []),
                                        (["search"], ["--gpus", "2", "--top", "1"])])
def test_the_deepspeed_config_is_parsed_once(capsys, tiny, ds_config, monkeypatch, head, tail):
    """The launch is checked against its config (trainer_config_process's fill_match) and the
    job read from it with one read of the file, in every job command."""
    from memsym.readers import _values, deepspeed

    reads = []
    original = _values.read_bounded

    def counted(source, what, *args, **kwargs):
        if what == "DeepSpeed config":
            reads.append(source)
        return original(source, what, *args, **kwargs)

    monkeypatch.setattr(_values, "read_bounded", counted)
    monkeypatch.setattr(deepspeed, "read_bounded", counted)
    json_report(capsys, [*head, *_ds(tiny, ds_config), "--gpu", "h100-80gb", *tail])
    assert reads == [ds_config]


def test_a_deepspeed_launch_reads_back_from_the_emitted_config(capsys, tiny, ds_config,
                                                                tmp_path):
    """``search <launch> --emit deepspeed``: each ranked layout's ds_config.json, read back by
    the estimate its row names, is the same job (bytes and step time), and the launch's own
    config is not among the words read back."""
    import shlex

    code = main(["search", *_ds(tiny, ds_config, "--gradient_accumulation_steps", "2"),
                 "--gpu", "h100-80gb", "--gpus", "2", "--top", "2", "--emit", "deepspeed",
                 "--emit-dir", str(tmp_path / "out"), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = json.loads(out)
    assert rows and all(r["layout"]["micro_batch_size"] * r["layout"]["num_microbatches"]
                        * r["layout"]["dp"] == 2 * 2 * 2 for r in rows)   # B held: 2 x 2 x 2
    for row in rows:
        words = shlex.split(row["emit"]["read_back"])
        assert ds_config not in words
        back = json_report(capsys, [w for w in words[1:] if w != "--json"])
        assert back["bytes"]["total"] == row["bytes"]["total"]
        assert back["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-12)


def _checkpoint(tmp_path, name, **dtype):
    """tiny's config.json with a dtype field as a checkpoint names it (``torch_dtype`` in most
    Hub configs, ``dtype`` since transformers 5)."""
    return tiny_llama(tmp_path, name, **dtype)


def _states(rep):
    got = rep["bytes"]
    assert "main_gradients" not in got
    return got["weights"], got["gradients"], got["ddp_buckets"], got["optimizer"]


def test_a_bf16_checkpoint_with_bf16_autocast_holds_bf16_states(capsys, tmp_path):
    """The common launch: no --dtype (run_clm.py passes None, from_pretrained loads "auto":
    the config.json's torch_dtype bfloat16) and --bf16.  torch.optim.AdamW updates the bf16
    parameters in place: weights 2 B, param.grad 2 B, the buckets 2 B, exp_avg and exp_avg_sq
    2 + 2 B (zeros_like(p)), no fp32 master copy: 10 B x 1 824 000, against 20 B for fp32."""
    model = _checkpoint(tmp_path, "llama-bf16", torch_dtype="bfloat16")
    rep = json_report(capsys, ["estimate", *_ddp(model, "--bf16", dtype=()), "--gpu", "h100-80gb"])
    assert _states(rep) == (2 * TINY, 2 * TINY, 2 * TINY, 4 * TINY)
    assert rep["training"]["precision"] == "bf16" and rep["training"]["torch_ddp_buckets"]
    notes = " ".join(rep["notes"])
    assert "of bfloat16 weights (no --dtype: config.json dtype bfloat16" in notes
    assert "no fp32 master copy" in notes
    # what --bf16 adds that memsym does not count is said, with its size in words
    assert "convert_outputs_to_fp32" in notes and "4 x 2 x 128 x vocabulary bytes" in notes
    rows = {r["option"]: r for r in rep["defaults"]}
    assert rows["dtype"]["value"] == "auto" and "4236-4237" in rows["dtype"]["source"]


@pytest.mark.parametrize("dtype, precision", [("bfloat16", "bf16"), ("float16", "fp16")])
def test_run_clms_16_bit_dtype_holds_16_bit_states(capsys, tiny, dtype, precision):
    """run_clm.py's --dtype bfloat16 / float16 (ModelArguments.dtype, passed to
    from_pretrained) without autocast: the same 2 + 2 + 2 + 4 bytes per parameter, and no
    fp32 gradient copy under fp16 either (Megatron's ddp scheme would make one)."""
    rep = json_report(capsys, ["estimate", *_ddp(tiny, dtype=("--dtype", dtype)), "--gpu", "h100-80gb"])
    assert _states(rep) == (2 * TINY, 2 * TINY, 2 * TINY, 4 * TINY)
    assert rep["training"]["precision"] == precision
    assert not any("autocast" in n for n in rep["notes"])
    # --bf16 / --fp16 default False: no autocast (the precision is the weights' dtype)
    rows = {r["option"]: r["value"] for r in rep["defaults"]}
    assert rows["autocast"] == "none" and "precision" not in rows and "dtype" not in rows


@pytest.mark.parametrize("fields, dtype", [
    ({"dtype": "float32", "torch_dtype": "bfloat16"}, ()),   # configuration_utils.py:440-442
    ({"torch_dtype": "bfloat16"}, ("--dtype", "float32")),    # --dtype over the checkpoint's
    ({"torch_dtype": "bfloat16"}, ("--dtype", "auto")),
])
def test_which_dtype_the_weights_are_loaded_in(capsys, tmp_path, fields, dtype):
    """A config.json's ``dtype`` before its ``torch_dtype`` (transformers 5.25
    configuration_utils.py:440-442); run_clm.py's --dtype before the checkpoint's; --dtype
    auto is the checkpoint's (modeling_utils.py:830-832)."""
    model = _checkpoint(tmp_path, "llama", **fields)
    rep = json_report(capsys, ["estimate", *_ddp(model, dtype=dtype), "--gpu", "h100-80gb"])
    fp32 = fields.get("dtype") == "float32" or "float32" in dtype
    width = 4 if fp32 else 2
    assert _states(rep) == (width * TINY, width * TINY, width * TINY, 2 * width * TINY)


def test_a_bf16_launch_is_the_same_job_as_memsyms_options(capsys, tmp_path):
    """The 16-bit launch is memsym's --precision bf16 --torch-ddp-buckets, the rest as the
    fp32 one's (the module's docstring)."""
    model = _checkpoint(tmp_path, "llama-bf16", torch_dtype="bfloat16")
    hf = json_report(capsys, ["estimate", *_ddp(model, "--bf16", dtype=()), "--gpu", "h100-80gb"])
    own = ["estimate", model, "--framework", "deepspeed", "--sharding", "ddp", "--precision",
           "bf16", "--optimizer", "adam", "--torch-ddp-buckets", "--overlap-grad-reduce",
           "--world-size", "2", "--micro-batch-size", "2", "--num-microbatches", "3",
           "--recompute-granularity", "full", "--seq-length", "128", "--gpu", "h100-80gb"]
    assert json_report(capsys, own)["bytes"] == hf["bytes"]


def test_a_preset_without_dtype_is_refused(capsys):
    """A preset names no checkpoint whose dtype "auto" would read: give --dtype."""
    err = refused_line(capsys, ["estimate", *_ddp("llama3-8b", dtype=())])
    assert 'dtype "auto"' in err and "--dtype" in err


def test_full_eval_is_no_training_autocast_under_plain_ddp(capsys, tiny):
    """--bf16_full_eval casts the model for evaluation only: Accelerate's training autocast is
    --bf16 / --fp16 alone (transformers 5.25.0 training_args.py:1614-1618), so fp32 weights
    with --bf16_full_eval are the fp32 job, where --bf16 over them is autocast
    (tests/test_autocast.py)."""
    fp32 = ("--dtype", "float32")
    rep = json_report(capsys, ["estimate", *_ddp(tiny, "--bf16_full_eval", dtype=fp32),
                         "--gpu", "h100-80gb"])
    got = rep["bytes"]
    assert (got["weights"], got["optimizer"]) == (4 * TINY, 8 * TINY)
    assert not any("torch.autocast" in n for n in rep["notes"])
    assert rep["training"]["autocast"] is None
    auto = json_report(capsys, ["estimate", *_ddp(tiny, "--bf16", dtype=fp32), "--gpu",
                                "h100-80gb"])
    assert auto["training"]["autocast"] == "bf16"


def test_a_default_and_its_reason_are_said_once(capsys, tiny, ds_config):
    # TrainingArguments' gradient_accumulation_steps default 1 (training_args.py) is what the
    # config's "auto" takes (trainer_config_process): one line naming both; the dropout's
    # reason is said on its default's line, not again as a note
    code, out, err = run(capsys, "estimate", *_ds(tiny, ds_config), "--gpu", "h100-80gb")
    assert code == 0, err
    text = " ".join(out.split())
    accumulation = [line for line in out.splitlines()
                    if line.startswith("default: gradient_accumulation_steps")]
    assert len(accumulation) == 1
    assert "training_args.py" in text and "<- --gradient_accumulation_steps" in text
    assert text.count("DeepSpeed runs the transformers model") == 1
