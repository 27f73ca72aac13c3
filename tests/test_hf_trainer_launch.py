"""A pasted Hugging Face Trainer launch read as the job it runs (memsym.readers.hf_trainer,
memsym.cli.hf_launch).

The expectations come from transformers 5.25.0's own source (training_args.py,
integrations/deepspeed.py), from transformers itself where it is installed (its argument
parser and ``trainer_config_process`` as independent oracles), and from by-hand counts written
out below.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import types

import pytest

from memsym.cli import main
from memsym.cli.reading import prepare_argv, subparser
from memsym.cli import build_parser
from memsym.errors import InvalidValueError
from memsym.readers import read_deepspeed_config
from memsym.readers.hf_trainer import is_hf_trainer_launch, read_hf_trainer_launch
from memsym.readers.hf_trainer_args import FIELDS, IGNORED, READ, REFUSED
from memsym.readers.megatron_arguments import TABLE

#: A Hugging Face example DeepSpeed ZeRO-3 config (transformers' docs/source/en/deepspeed.md
#: "ZeRO-3" example shape): every batch, precision and hidden-size value "auto".
ZERO3_AUTO = {
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                              "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto",
                                                 "warmup_max_lr": "auto",
                                                 "warmup_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                          "sub_group_size": 1e9, "reduce_bucket_size": "auto",
                          "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto",
                          "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                          "stage3_gather_16bit_weights_on_model_save": True},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": False,
}

#: Llama 3 8B's parameters by hand (vocabulary 128256, h 4096, 32 layers, 8 KV heads of 128,
#: FFN 14336, untied embeddings): embeddings and output layer, per layer q, o (h^2 each), k, v
#: (h x 1024 each), the SwiGLU's three matrices and two norms, and the final norm.
LLAMA3_8B = 2 * 128256 * 4096 + 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
                                      + 2 * 4096) + 4096


@pytest.fixture
def ds_config(tmp_path):
    path = tmp_path / "ds_config_zero3.json"
    path.write_text(json.dumps(ZERO3_AUTO), encoding="utf-8")
    return str(path)


def _estimate(capsys, argv):
    code = main(["estimate", *argv, "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return json.loads(out)


def _launch(cfg, *extra):
    return ["deepspeed", "--num_gpus", "8", "run_clm.py", "--deepspeed", cfg,
            "--model_name_or_path", "llama3-8b", "--block_size", "4096", "--bf16",
            "--gradient_checkpointing", "--output_dir", "out", "--learning_rate", "2e-5",
            "--logging_steps", "10", "--save_strategy", "no", "--report_to", "none", *extra]


def test_a_zero3_launch_is_the_same_job_as_memsyms_options(capsys, ds_config):
    """The launch and the same job as memsym's own options give the same bytes; the batch is
    trainer_config_process's world x per_device x accumulation = 8 x 4 x 2 = 64, and ZeRO-3
    keeps 2 + 2 + 12 bytes per parameter over d = 8 (bf16 weights and gradients, fp32 master
    and AdamW's two moments)."""
    hf = _estimate(capsys, _launch(ds_config, "--per_device_train_batch_size", "4",
                                   "--gradient_accumulation_steps", "2", "--gpu", "h100-80gb"))
    own = _estimate(capsys, ["llama3-8b", "--deepspeed-config", ds_config, "--world-size", "8",
                             "--micro-batch-size", "4", "--num-microbatches", "2",
                             "--precision", "bf16", "--recompute-granularity", "full",
                             "--seq-length", "4096", "--gpu", "h100-80gb"])
    assert hf["bytes"] == own["bytes"]
    assert hf["global_batch"] == 64 and hf["layout"]["dp"] == 8
    assert hf["bytes"]["weights"] == 2 * LLAMA3_8B // 8
    assert hf["bytes"]["gradients"] == 2 * LLAMA3_8B // 8
    assert hf["bytes"]["optimizer"] == 12 * LLAMA3_8B // 8
    assert hf["read_as"].startswith("a Hugging Face Trainer launch (run_clm.py with the "
                                    f"DeepSpeed config {ds_config};")
    assert {"--output_dir", "--learning_rate", "--logging_steps", "--save_strategy",
            "--report_to"} <= set(hf["ignored"])


def test_per_device_batch_defaults_to_eight_as_transformers_says(capsys, ds_config):
    """No --per_device_train_batch_size: TrainingArguments' default 8 (training_args.py:777),
    cited; the accumulation's default 1 (:849)."""
    rep = _estimate(capsys, _launch(ds_config, "--gpu", "h100-80gb"))
    assert rep["training"]["micro_batch_size"] == 8 and rep["global_batch"] == 8 * 1 * 8
    rows = {row["option"]: row for row in rep["defaults"]}
    assert rows["per_device_train_batch_size"]["value"] == 8
    assert "training_args.py" in rows["per_device_train_batch_size"]["source"]
    assert "line 777" in rows["per_device_train_batch_size"]["source"]
    assert rows["gradient_accumulation_steps"]["value"] == 1


def test_torchrun_gives_the_world_size_and_plain_ddp_is_refused(capsys, ds_config):
    """torchrun's --nproc_per_node x --nnodes is the world size (2 x 8 = 16); without
    --deepspeed (plain DDP) and without --dtype, a preset names no checkpoint whose dtype
    transformers 5.25 would load ("auto"): one line says why memsym does not read it
    (tests/test_hf_trainer_ddp.py reads the fp32 and 16-bit ones)."""
    rep = _estimate(capsys, ["torchrun", "--nnodes", "2", "--nproc_per_node", "8",
                             "--master_port", "29500", "run_clm.py", "--deepspeed", ds_config,
                             "--model_name_or_path", "llama3-8b", "--block_size", "2048",
                             "--bf16", "--gpu", "h100-80gb"])
    assert rep["layout"]["dp"] == 16 and rep["global_batch"] == 8 * 16
    code = main(["estimate", "torchrun", "--nproc_per_node", "8", "run_clm.py",
                 "--model_name_or_path", "llama3-8b", "--block_size", "2048", "--bf16",
                 "--per_device_train_batch_size", "2"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "plain DDP" in err and '(dtype "auto"' in err and "give run_clm.py's --dtype" in err


@pytest.mark.parametrize("extra, said", [
    (["--per_device_train_batchsize", "2"], "did you mean --per_device_train_batch_size"),
    (["--label_smoothing_factor", "0.1"], "LabelSmoother"),
    # the Trainer refuses FSDP beside DeepSpeed (trainer.py:472-476); FSDP alone:
    # tests/test_hf_trainer_fsdp.py
    (["--fsdp"], "--fsdp with --deepspeed"),
    (["--fsdp", "full_shard auto_wrap"], "--fsdp with --deepspeed"),
    (["--torch_compile"], "torch.compile"),
    (["--use_liger_kernel", "true"], "Liger"),
    (["--micro-batch-size", "2"], "--micro-batch-size beside a Hugging Face Trainer launch"),
    (["--per_device_train_batch_size", "0"], "--per_device_train_batch_size"),
    (["--fp16", "maybe"], "a Trainer script takes options only"),
    (["--fp16"], "--bf16 and --fp16 both given"),
    (["--use_peft", "--lora_r", "16"], "TRL's argument"),
    (["--max_length", "2048"], "TRL's argument"),
])
def test_a_launch_memsym_cannot_read_is_refused_in_one_line(capsys, ds_config, extra, said):
    code = main(["estimate", *_launch(ds_config, *extra)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1 and said in err


@pytest.mark.parametrize("launcher, said", [
    (["deepspeed"], "does not say how many processes"),
    (["accelerate", "launch", "--config_file", "a.yaml"], "--num_processes"),
    (["accelerate", "launch", "--num_processes", "8", "--use_fsdp"], "--use_fsdp"),
    (["torchrun", "--nproc_per_node", "gpu"], "count of GPUs"),
    (["trl", "dpo"], "memsym reads `trl sft ...`"),
])
def test_a_launcher_that_does_not_say_the_gpus_is_refused(capsys, ds_config, launcher, said):
    code = main(["estimate", *launcher, "train.py", "--deepspeed", ds_config,
                 "--model_name_or_path", "llama3-8b", "--block_size", "2048"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1 and said in err


def test_an_optimizer_memsym_cannot_count_is_refused_unless_the_config_has_its_own(
        capsys, tmp_path):
    """Under DeepSpeed the Trainer's --optim is used only where the config has no optimizer
    section (transformers 5.25 integrations/deepspeed.py:578-591, deepspeed_optim_sched)."""
    bare = {k: v for k, v in ZERO3_AUTO.items() if k != "optimizer"}
    for name, cfg in (("bare.json", bare), ("own.json", ZERO3_AUTO)):
        (tmp_path / name).write_text(json.dumps(cfg), encoding="utf-8")
    code = main(["estimate", *_launch(str(tmp_path / "bare.json"), "--optim", "adamw_bnb_8bit")])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1 and "--optim adamw_bnb_8bit" in err
    rep = _estimate(capsys, _launch(str(tmp_path / "own.json"), "--optim", "adamw_bnb_8bit"))
    assert "--optim" in rep["ignored"]
    assert any("--optim adamw_bnb_8bit unused" in note for note in rep["notes"])


@pytest.mark.parametrize("config, extra, said", [
    ({"train_micro_batch_size_per_gpu": 4}, [], "--per_device_train_batch_size (default 8): 8"),
    ({"train_micro_batch_size_per_gpu": "auto", "fp16": {"enabled": True}}, [],
     "fp16.enabled True differs from the launch's --fp16"),
    ({"train_micro_batch_size_per_gpu": 8, "train_batch_size": 32}, [],
     "train_batch_size 32 differs"),
])
def test_a_config_value_the_launch_contradicts_is_refused_as_the_trainer_does(
        capsys, tmp_path, config, extra, said):
    """trainer_config_process's fill_match (transformers 5.25 integrations/deepspeed.py:110-134)
    collects every config value, not "auto", that differs from the argument filling it, and
    trainer_config_finalize refuses them; the per-device default 8 counts (training_args.py:777)."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**config, "zero_optimization": {"stage": 2}}), encoding="utf-8")
    code = main(["estimate", "deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", str(path),
                 "--model_name_or_path", "llama3-8b", "--seq-length", "1024", *extra])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1 and said in err


def test_a_later_spelling_wins_as_in_argparse():
    """HfArgumentParser is argparse: an option given twice takes its later value."""
    r = read_hf_trainer_launch(["python", "train.py", "--per_device_train_batch_size", "4",
                                "--per-device-train-batch-size", "2"])
    assert r.micro_batch_size == 2 and r.world_size == 1


@pytest.mark.parametrize("head, world", [
    (["python", "-m", "torch.distributed.run", "--nproc_per_node=4", "--nnodes=2", "train.py"], 8),
    (["CUDA_VISIBLE_DEVICES=0,1", "python3", "-u", "train.py"], 1),
    (["deepspeed", "--num_gpus=8", "--num_nodes=2", "--hostfile", "hosts", "train.py"], 16),
    ([], None),
])
def test_each_launcher_spelling_gives_its_world_size(head, world):
    r = read_hf_trainer_launch([*head, "--deepspeed=ds.json", "--per_device_train_batch_size=2"])
    assert (r.world_size, r.micro_batch_size, r.deepspeed) == (world, 2, "ds.json")


def test_a_trl_script_other_than_sft_is_not_read_with_the_trainers_defaults():
    """TRL's configs change the Trainer's defaults (gradient checkpointing and bf16 on): a TRL
    script other than SFT (tests/test_trl_sft_launch.py) is refused rather than read with
    TrainingArguments' defaults."""
    with pytest.raises(InvalidValueError, match="other TRL trainers are not read"):
        read_hf_trainer_launch(["python", "-m", "trl.scripts.dpo", "--deepspeed", "ds.json"])


def test_accelerate_num_processes_is_every_process():
    """accelerate launch --num_processes counts every process over every machine
    (accelerate commands/launch.py); --num_machines does not multiply it."""
    r = read_hf_trainer_launch(["accelerate", "launch", "--num_processes", "16",
                                "--num_machines", "2", "train.py", "--deepspeed", "ds.json"])
    assert r.world_size == 16 and r.deepspeed == "ds.json"


def test_a_megatron_launch_is_still_megatrons():
    """No Megatron-LM argument or torchrun option is taken for a Trainer argument, and a pasted
    Megatron-LM launch is sorted for Megatron's reader."""
    assert not [name for name in TABLE if is_hf_trainer_launch([name])]
    parser = build_parser("estimate")
    _, words = prepare_argv(parser, ["estimate", "torchrun", "--nproc_per_node", "8",
                                     "pretrain_gpt.py", "--num-layers", "2", "--bf16",
                                     "--micro-batch-size", "1", "--recompute-granularity",
                                     "full"])
    assert words.hf_trainer is None and "--num-layers" in words.megatron
    assert subparser(parser, "estimate") is not None


def test_megatron_deepspeeds_switch_stays_with_megatrons_reader(capsys):
    """Megatron-DeepSpeed's pretrain_gpt.py takes a --deepspeed switch of its own: the launch
    is Megatron's (its script), refused there in one line that names both readings."""
    assert not is_hf_trainer_launch(["deepspeed", "pretrain_gpt.py", "--deepspeed",
                                     "--deepspeed_config", "ds.json"])
    code = main(["estimate", "deepspeed", "pretrain_gpt.py", "--deepspeed", "--num-layers", "2"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1 and "Megatron-DeepSpeed" in err


def test_the_tables_sort_every_field_once():
    assert READ | set(REFUSED) | IGNORED == set(FIELDS)
    assert not (READ & set(REFUSED)) and not (READ & IGNORED) and not (set(REFUSED) & IGNORED)


# ---------------------------------------------------------------------------------------------
# transformers itself as the oracle (skipped where it is not installed)
# ---------------------------------------------------------------------------------------------

def _transformers():
    transformers = pytest.importorskip("transformers")
    if transformers.__version__ != "5.25.0":
        pytest.skip("the tables cite transformers 5.25.0")
    return transformers


def test_every_field_and_line_is_transformers_own():
    """Each field in the table is a TrainingArguments field, defined at the line cited, and
    no field is missing."""
    transformers = _transformers()
    from transformers import training_args

    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments) if f.init}
    assert fields == set(FIELDS)
    lines = inspect.getsource(training_args).splitlines()
    for name, (_, line) in FIELDS.items():
        assert lines[line - 1].startswith(f"    {name}:"), (name, line)
    defaults = {f.name: f.default for f in dataclasses.fields(transformers.TrainingArguments)}
    assert defaults["per_device_train_batch_size"] == 8
    assert defaults["gradient_accumulation_steps"] == 1
    assert defaults["bf16"] is False and defaults["fp16"] is False


ARGVS = [
    ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2", "--bf16",
     "--gradient_checkpointing", "--output_dir", "o"],
    ["--output_dir", "o"],
    ["--fp16", "--gradient_checkpointing", "false", "--per_device_train_batch_size", "1"],
    ["--bf16_full_eval", "--per-device-train-batch-size", "3", "--activation_checkpointing"],
]


@pytest.mark.parametrize("argv", ARGVS)
def test_the_reading_agrees_with_transformers_parser_and_auto_filling(argv):
    """HfArgumentParser reads the same argv to the same batch, accumulation, precision and
    checkpointing; HfTrainerDeepSpeedConfig.trainer_config_process (transformers' own method,
    run over Accelerate's config holder since DeepSpeed is not installed) fills the ZeRO-3
    config's "auto"s to what memsym's DeepSpeed reader fills them with."""
    _transformers()
    accelerate_deepspeed = pytest.importorskip("accelerate.utils.deepspeed")
    from transformers import HfArgumentParser, TrainingArguments
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig as Hf

    ns, rest = HfArgumentParser(TrainingArguments).parse_known_args(argv)
    assert rest == []
    r = read_hf_trainer_launch(["torchrun", "--nproc_per_node", "8", "train.py",
                                "--deepspeed", "ds.json", *argv])
    assert r.micro_batch_size == ns.per_device_train_batch_size
    assert r.gradient_accumulation_steps == ns.gradient_accumulation_steps
    assert r.recompute == bool(ns.gradient_checkpointing or ns.activation_checkpointing)

    class Oracle(accelerate_deepspeed.HfDeepSpeedConfig):
        trainer_config_process, fill_match, fill_only = (
            Hf.trainer_config_process, Hf.fill_match, Hf.fill_only)

    oracle = Oracle(copy.deepcopy(ZERO3_AUTO))
    oracle.mismatches = []
    oracle.trainer_config_process(types.SimpleNamespace(**vars(ns), world_size=8))
    filled = oracle.config
    cfg = read_deepspeed_config(copy.deepcopy(ZERO3_AUTO), 8, micro_batch_size=r.micro_batch_size,
                                gradient_accumulation_steps=r.gradient_accumulation_steps,
                                precision=r.precision)
    assert cfg["training"]["micro_batch_size"] == filled["train_micro_batch_size_per_gpu"]
    assert cfg["training"]["gradient_accumulation_steps"] == filled["gradient_accumulation_steps"]
    assert cfg["training"]["global_batch_size"] == filled["train_batch_size"]
    dtype = ("bf16" if filled["bf16"]["enabled"] else "fp16" if filled["fp16"]["enabled"]
             else "fp32")
    assert cfg["precision"]["params_dtype"] == dtype == r.precision
    assert oracle.mismatches == []


def test_a_config_value_that_differs_from_the_argument_is_refused_as_transformers_does():
    """A numeric train_micro_batch_size_per_gpu beside a different per_device_train_batch_size
    is a mismatch trainer_config_finalize refuses; memsym refuses it too."""
    r = read_hf_trainer_launch(["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed",
                                "ds.json", "--per_device_train_batch_size", "4"])
    with pytest.raises(InvalidValueError, match="contradicts"):
        read_deepspeed_config({**ZERO3_AUTO, "train_micro_batch_size_per_gpu": 2}, 8,
                              micro_batch_size=r.micro_batch_size,
                              gradient_accumulation_steps=r.gradient_accumulation_steps,
                              precision=r.precision)


def test_a_search_holds_the_launchs_global_batch_and_varies_the_micro_batch(capsys, ds_config):
    """Under ``memsym search`` the per-device batch is the searched one: the launch gives the
    global batch held, per_device 4 x accumulation 2 x 8 GPUs = 64."""
    code = main(["search", *_launch(ds_config, "--per_device_train_batch_size", "4",
                                    "--gradient_accumulation_steps", "2"),
                 "--gpu", "h100-80gb", "--gpus", "8", "--top", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "B = 64" in out.splitlines()[0]


@pytest.mark.parametrize("config", [
    {"train_micro_batch_size_per_gpu": 4}, {"train_micro_batch_size_per_gpu": 8},
    {"bf16": {"enabled": True}}, {"bf16": {"enabled": False}}, {"fp16": {"enabled": True}},
    {"train_batch_size": 64}, {"train_batch_size": 32}, {"gradient_accumulation_steps": 1},
    {"gradient_accumulation_steps": 4},
])
def test_transformers_and_memsym_refuse_the_same_mismatches(tmp_path, config):
    """transformers' own fill_match (its mismatches list) and memsym's reading refuse the same
    configs beside ``torchrun --nproc_per_node 8 train.py`` with the Trainer's defaults
    (per-device 8, accumulation 1, fp32)."""
    _transformers()
    accelerate_deepspeed = pytest.importorskip("accelerate.utils.deepspeed")
    from transformers import HfArgumentParser, TrainingArguments
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig as Hf

    from memsym.cli.hf_launch import hf_trainer_words

    class Oracle(accelerate_deepspeed.HfDeepSpeedConfig):
        trainer_config_process, fill_match, fill_only = (
            Hf.trainer_config_process, Hf.fill_match, Hf.fill_only)

    full = {**config, "zero_optimization": {"stage": 2}}
    oracle = Oracle(copy.deepcopy(full))
    oracle.mismatches = []
    ns, _ = HfArgumentParser(TrainingArguments).parse_known_args(["--output_dir", "o"])
    oracle.trainer_config_process(types.SimpleNamespace(**vars(ns), world_size=8))
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(full), encoding="utf-8")
    launch = ["torchrun", "--nproc_per_node", "8", "train.py", "--deepspeed", str(path),
              "--model_name_or_path", "llama3-8b", "--seq-length", "1024"]
    try:
        hf_trainer_words({"--seq-length": 1}, launch)
        refused = False
    except InvalidValueError:
        refused = True
    assert refused == bool(oracle.mismatches), oracle.mismatches
