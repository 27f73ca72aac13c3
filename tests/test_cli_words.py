"""The command line's words: what its lines say under Muon, for a Megatron-FSDP search row and
on an NVL72 rack, and bad input as one line (exit 2, nothing on stdout).

Each expected string comes from the framework's or the vendor's own wording, cited beside it.
"""

import argparse
import json

import pytest

from in_process import run

#: A 32-layer, 4096-wide GPT as a Megatron-LM command pasted with its launcher (8 GPUs).
PASTED = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
          "--num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 "
          "--micro-batch-size 1 --bf16 --vocab-size 32000").split()


def refused(capsys, *argv) -> str:
    """The one stderr line of a refused command (exit 2, nothing on stdout)."""
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    return err


# ----------------------------------------------------------------------------------------------
# 1. Muon: --optimizer dist_muon and the distributed optimizer under muon
# ----------------------------------------------------------------------------------------------
def test_pasted_dist_muon_is_not_reported_as_ddp_by_default(capsys):
    # Megatron-LM arguments.py:1727-1733 (d98e8a64dd): --optimizer dist_muon becomes muon with
    # use_layer_wise_distributed_optimizer, so no DDP default applies to its sharding
    code, out, _ = run(capsys, "estimate", *PASTED, "--optimizer", "dist_muon", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["training"]["sharding"] == "distributed-optimizer"
    assert [r for r in data["defaults"] if r["option"] == "sharding"] == []
    code, out, _ = run(capsys, "estimate", *PASTED, "--optimizer", "dist_muon", "--wide")
    assert "default: sharding = ddp" not in out


def test_pasted_muon_without_the_flag_keeps_megatrons_ddp_default(capsys):
    # plain --optimizer muon: --use-distributed-optimizer is store_true, so DDP (arguments.py)
    code, out, _ = run(capsys, "estimate", *PASTED, "--optimizer", "muon", "--json")
    rows = [r for r in json.loads(out)["defaults"] if r["option"] == "sharding"]
    assert [r["value"] for r in rows] == ["ddp"]


def test_the_distributed_optimizer_under_muon_is_said_to_be_the_layer_wise_one(capsys):
    code, out, _ = run(capsys, "estimate", "llama2-7b", "--optimizer", "muon",
                       "--world-size", "16", "--wide")
    assert code == 0
    line = next(l for l in out.splitlines() if l.startswith("default: sharding"))
    # Megatron-LM arguments.py:1735-1737: --use-distributed-optimizer under an emerging
    # optimizer turns use_layer_wise_distributed_optimizer on; Megatron-Bridge optim.py:103-110
    # builds the muon optimizer with layer_wise_distributed_optimizer="dist" in its name
    assert "layer-wise distributed optimizer" in line
    assert "arguments.py:1724-1737" in line and "training/optim.py:103-110" in line
    assert "sharding distributed-optimizer (layer-wise under muon)" in out


def test_dist_muon_option_is_muon_with_the_distributed_optimizer(capsys):
    # Megatron-LM's deprecation message (arguments.py:1729-1730): "Use --optimizer muon
    # --use-distributed-optimizer instead": the two spellings are one job
    def model_states(*extra):
        code, out, _ = run(capsys, "estimate", "--params", "7B", "--dp", "8", *extra, "--json")
        assert code == 0
        return json.loads(out)

    old = model_states("--optimizer", "dist_muon")
    new = model_states("--optimizer", "muon", "--use-distributed-optimizer")
    assert old == new
    assert old["optimizer"] == "muon" and old["sharding"] == "distributed-optimizer"
    code, out, _ = run(capsys, "estimate", "--params", "7B", "--optimizer", "dist_muon")
    assert out.startswith("memsym estimate: distributed-optimizer (layer-wise under muon)")


def test_dist_muon_with_another_sharding_is_one_line(capsys):
    err = refused(capsys, "estimate", "--params", "7B", "--optimizer", "dist_muon",
                  "--sharding", "ddp")
    assert "dist_muon" in err and "--sharding ddp" in err


@pytest.mark.parametrize("extra", [["--sharding", "zero3"], ["--precision", "fp16"]])
def test_muon_model_states_alone_are_refused_as_a_jobs_are(capsys, extra):
    # Megatron-LM arguments.py:1739-1740 ("Emerging optimizer does not support Torch-FSDP2 /
    # Megatron-FSDP") and core/optimizer/__init__.py:774-775 (no fp16): refused with --params
    # as with a MODEL, in the same words
    alone = refused(capsys, "estimate", "--params", "8B", "--optimizer", "muon", *extra)
    job = refused(capsys, "estimate", "llama3-8b", "--optimizer", "muon", *extra)
    assert alone == job and "muon" in alone


# ----------------------------------------------------------------------------------------------
# 2. A Megatron-FSDP row in Megatron-LM's words, in search's text as in min-gpus'
# ----------------------------------------------------------------------------------------------
def test_search_text_names_megatron_fsdp_rows_in_megatrons_words(capsys):
    # Megatron-LM arguments.py:3190-3192: --data-parallel-sharding-strategy optim_grads_params
    # (the default) shards parameters, gradients and optimizer states: memsym's fsdp
    code, out, _ = run(capsys, "search", "llama3-8b", "--gpus", "16", "--gpu", "h100-80gb",
                       "--sharding", "fsdp", "--top", "2")
    assert code == 0
    rows = [l for l in out.splitlines() if l[:3].strip().isdigit()]
    assert rows and all("fsdp (Megatron-FSDP optim_grads_params)" in r for r in rows)
    code, out, _ = run(capsys, "min-gpus", "llama3-8b", "--gpu", "h100-80gb",
                       "--sharding", "fsdp")
    assert "sharding fsdp (Megatron-FSDP optim_grads_params)" in out


def test_search_text_keeps_deepspeeds_scheme_plain(capsys):
    # DeepSpeed's ZeRO-3 is no Megatron-FSDP strategy: the scheme's own name
    code, out, _ = run(capsys, "search", "llama3-8b", "--gpus", "16", "--gpu", "h100-80gb",
                       "--framework", "deepspeed", "--sharding", "zero3", "--top", "1")
    assert code == 0
    row = next(l for l in out.splitlines() if l[:3].strip() == "1")
    assert " zero3 " in row and "Megatron-FSDP" not in out


# ----------------------------------------------------------------------------------------------
# 4. NVL72: 4 GPUs per compute tray, 72 on one NVLink domain
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gpu", ["gb300", "gb200"])
def test_nvl72_estimate_says_the_tray_and_the_domain(capsys, gpu):
    # NVIDIA Multi-Node NVLink tuning guide, "Understanding Your Grace-Blackwell Systems":
    # GB200 72x1, 18 compute trays, 4 GPUs per compute tray; NVIDIA NVL72 AI Factory reference
    # architecture, "System Hardware & Components": GB300 NVL compute tray with 4 Blackwell
    # Ultra GPUs, 9 NVSwitch trays joining all 72
    argv = ("estimate", "llama3-8b", "--gpu", gpu, "--world-size", "16", "--tp", "2")
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert f"communication per GPU per step ({gpu}, 4 GPUs per node, NVLink domain 72):" in out
    # the dp group of 8 spans two trays of 4 and stays in the domain: not "intra-node"
    assert any(l.startswith("dp ") and l.endswith("intra (NVLink domain)")
               for l in out.splitlines())
    code, out, _ = run(capsys, *argv, "--json")
    data = json.loads(out)
    assert data["assumptions"]["gpus_per_node"] == 4
    # 16 GPUs are one NVLink domain of 72: every group on the NVLink link, the tray size
    # changes no second (the --gpus-per-node 8 of an HGX node prices the same step)
    assert {row["link"] for row in data["communication"].values()} == {"intra"}
    code, out8, _ = run(capsys, *argv, "--gpus-per-node", "8", "--json")
    assert json.loads(out8)["step_time_s"] == data["step_time_s"]


def test_an_hgx_node_is_still_eight(capsys):
    # DGX H100 user guide: 8 GPUs per node, the NVLink domain the node
    code, out, _ = run(capsys, "estimate", "llama3-8b", "--gpu", "h100-80gb",
                       "--world-size", "16", "--tp", "2")
    assert "communication per GPU per step (h100-80gb, 8 GPUs per node):" in out


# ----------------------------------------------------------------------------------------------
# 5. Lines a user met
# ----------------------------------------------------------------------------------------------
def test_a_pasted_dense_command_gets_no_note_for_an_expert_argument_it_never_gave(capsys):
    # Megatron-LM arguments.py:587-588 (d98e8a64dd): expert_tensor_parallel_size None is TP's size:
    # a dense command that leaves it out has nothing to be told about it
    code, out, _ = run(capsys, "estimate", *PASTED, "--wide")
    assert code == 0 and "expert_tensor_parallel_size" not in out
    code, out, _ = run(capsys, "estimate", *PASTED, "--expert-tensor-parallel-size", "1",
                       "--wide")
    assert "expert_tensor_parallel_size (--expert-tensor-parallel-size) has effect only" in out


def test_an_unknown_argument_is_named_by_its_command(capsys):
    # argparse's own wording ("unrecognized arguments"), prog as for every other bad argument
    err = refused(capsys, "models", "--json", "--x")
    assert err.startswith("memsym models: error: unrecognized arguments: --x")


def test_search_without_gpus_names_the_option_it_takes(capsys):
    err = refused(capsys, "search", "llama3-8b", "--gpu", "h100-80gb")
    assert "--gpus N" in err and "--world-size" not in err
    err = refused(capsys, "search", "llama3-8b", "--gpu", "h100-80gb", "--world-size", "16")
    assert "unrecognized arguments: --world-size 16" in err and "--gpus N" in err


@pytest.mark.parametrize("quoted", [" ".join(PASTED), "python pretrain_gpt.py --num-layers 32"])
def test_a_command_pasted_in_quotes_is_one_clear_line(capsys, quoted):
    # one shell word holding the whole command: before, its launcher word was dropped and the
    # rest with it ("give the parameter count with --params N")
    err = refused(capsys, "estimate", quoted)
    assert "without the quotes" in err and "--params" not in err


def test_arguments_pasted_in_quotes_are_one_clear_line(capsys):
    err = refused(capsys, "estimate", "llama3-8b", "--tp 2")
    assert "several arguments ('--tp 2')" in err and "without the quotes" in err


@pytest.mark.parametrize("command", ["estimate", "solve", "latex"])
def test_search_s_gpus_on_a_job_command_names_the_world_size(capsys, command):
    # --gpus is memsym's option of search / min-gpus / time (their --help); pretrain_gpt.py
    # has no such argument, and the job commands take the GPUs as --world-size
    args = [command, *(["dp"] if command == "solve" else []), "llama3-8b", "--gpus", "8"]
    err = refused(capsys, *args)
    assert "'--gpus'" in err and "--world-size" in err


def test_time_takes_the_world_size_as_the_job_commands_spell_it(capsys):
    # --world-size is the job's GPU count on estimate / solve / latex; on time it is the same
    # count as its --gpus: 8 T N / (G X) at G = 64 either way (Narayanan et al. 2021 Eq. 4,
    # X = MFU 0.5 x the H100 SXM's 989.4 TFLOP/s dense BF16 of memsym gpus)
    runs = []
    for flag in ("--gpus", "--world-size"):
        code, out, _ = run(capsys, "time", "llama3-8b", flag, "64", "--tokens", "1T", "--json")
        assert code == 0
        runs.append(json.loads(out))
    assert runs[0] == runs[1] and runs[0]["gpus"] == 64
    assert runs[0]["seconds"] == pytest.approx(8 * 10**12 * 8_030_261_248 / (64 * 494.7e12))


def test_no_memsym_option_is_an_argument_megatron_removed():
    # a pasted launch is read word by word: memsym's --warmup (check's log lines) was read as
    # Megatron-LM's removed --warmup, which validate_args refuses (arguments.py:590-605)
    from memsym.cli import build_parser
    from memsym.readers.megatron_effects import MEGATRON_REFUSES

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    ours = {o for parser in sub.choices.values() for a in parser._actions
            for o in a.option_strings}
    removed = {"--" + name.replace("_", "-") for name in MEGATRON_REFUSES}
    assert "--warmup" in removed and not ours & removed


def test_check_s_warmup_lines_beside_a_launch_script(capsys, tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join(
        f" [2026-01-10 10:00:00] iteration {i:8d}/    1000 | consumed samples: {i * 8:12d} | "
        "elapsed time per iteration (ms): 1000.0 | learning rate: 3.000000E-04 | global batch "
        "size:     8 | lm loss: 7.8E+00 | loss scale: 1.0 | grad norm: 2.3 | number of skipped "
        "iterations:   0 | number of nan iterations:   0 |\n" for i in (10, 20)), encoding="utf-8")
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\ntorchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 "
                      "--hidden-size 256 --num-attention-heads 4 --seq-length 128 "
                      "--max-position-embeddings 128 --vocab-size 1000 --micro-batch-size 1 "
                      "--global-batch-size 8 --bf16\n", encoding="utf-8")
    code, out, err = run(capsys, "check", str(log), "--launch-script", str(script),
                         "--warmup-lines", "1", "--gpu", "h100-80gb")
    assert code == 0, err
    assert "warm-up: 1 iteration lines skipped (--warmup-lines)" in " ".join(out.split())
