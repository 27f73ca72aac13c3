"""Every Megatron-LM argument memsym does not read is classified, and "ignored" means no effect.

Issue 32: an argument memsym neither read nor knew was listed as "ignored (no effect on memory
or time)", which is false for many (``--fp32-residual-connection``, the offloading options,
SHARP...).  :mod:`memsym.readers.megatron_effects` is the reviewed table; these tests walk
every option of Megatron's parser through the reader and check that what it lists as ignored
is on that table's no-effect list, that the others are noted or refused (on a whole command
and beside a MODEL alike), and that the defaults the table relies on are Megatron's own (its
parser, built by tools/megatron_flags.py from the pinned files).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess

import pytest

from in_process import run
from memsym.errors import InvalidValueError
from memsym.model import Architecture, parameter_count, preset
from memsym.readers.megatron import read_megatron_args, read_megatron_overrides
from memsym.readers.megatron_arguments import MODELLED, MODELOPT, TABLE
from memsym.readers.megatron_effects import (INERT, MEGATRON_REFUSES, MEMORY_NOT_MODELLED,
                                             NO_EFFECT, STRUCTURE_NOT_MODELLED,
                                             TIME_NOT_MODELLED, VALUE_NOT_MODELLED,
                                             no_effect_reason, same_value)

BASE = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
        "--seq-length", "128", "--micro-batch-size", "1", "--vocab-size", "1000",
        "--tokenizer-type", "NullTokenizer"]
CLASSES = {"modelled": set(MODELLED), "memory": set(MEMORY_NOT_MODELLED),
           "time": set(TIME_NOT_MODELLED), "structure": set(STRUCTURE_NOT_MODELLED),
           "value": set(VALUE_NOT_MODELLED), "refused by Megatron": set(MEGATRON_REFUSES),
           **{f"no effect: {reason}": set(dests) for reason, dests in NO_EFFECT.items()}}
#: ModelOpt's options (noted as read only once ModelOpt is on) beside the two that turn it on
MODELOPT_DESTS = {TABLE[n][0] for n in MODELOPT} - set(STRUCTURE_NOT_MODELLED)


def test_every_argument_is_classified_once():
    dests = {dest for name, (dest, _, _) in TABLE.items() if name not in MODELOPT}
    for dest in sorted(dests):
        where = [c for c, members in CLASSES.items() if dest in members]
        assert len(where) == 1, (dest, where)
    classified = set().union(*CLASSES.values())
    # no stale names: each classified dest is an argument Megatron (or torchrun) accepts
    assert classified - dests - {TABLE[n][0] for n in MODELOPT} == set()


def _words(name: str) -> list:
    """``name`` with a value of its arity: "7", which no INERT value nor VALUE value is."""
    arity = TABLE[name][1]
    return [name] if arity == 0 else [name] + ["7"] * (arity if isinstance(arity, int) else 1)


UNREAD = sorted(n for n, (dest, _, _) in TABLE.items() if dest not in MODELLED)


@pytest.mark.parametrize("name", UNREAD)
def test_an_argument_is_ignored_only_when_on_the_reviewed_list(name):
    """Each option of the parser that memsym does not read, given alone on a small command."""
    dest = TABLE[name][0]
    try:
        job = read_megatron_args(BASE + _words(name))
    except InvalidValueError as err:
        assert dest in STRUCTURE_NOT_MODELLED or dest in MEGATRON_REFUSES, err
        return
    assert dest not in STRUCTURE_NOT_MODELLED and dest not in MEGATRON_REFUSES
    if name in job.ignored:
        assert no_effect_reason(dest) is not None or dest in VALUE_NOT_MODELLED, name
    else:
        assert any(note.startswith(f"{name}: ") for note in job.notes), (name, job.notes)
        assert dest in MEMORY_NOT_MODELLED or dest in TIME_NOT_MODELLED \
            or dest in VALUE_NOT_MODELLED or dest in MODELOPT_DESTS


# --no-bias-swiglu-fusion is read beside a MODEL with a SwiGLU (the command line drops it for
# another, memsym.cli.training_options), and ignored on a command without --swiglu, as Megatron
# reads it (argument_utils.py:314-319): the one argument whose verdict depends on the model
@pytest.mark.parametrize("name", [n for n in UNREAD if n != "--no-bias-swiglu-fusion"])
def test_one_verdict_beside_a_model_and_on_a_whole_command(name):
    """read_megatron_overrides (a MODEL's changes) gives each the whole command's verdict
    (BASE's MLP is a GELU one, so the MODEL's is not gated)."""
    words = _words(name)
    try:
        whole = read_megatron_args(BASE + words)
    except InvalidValueError as err:
        with pytest.raises(InvalidValueError, match=re.escape(str(err))):
            read_megatron_overrides(words, num_layers=2, gated=False)
        return
    over = read_megatron_overrides(words, num_layers=2, gated=False)
    assert (name in over.ignored) == (name in whole.ignored)
    assert [n for n in over.notes if n.startswith(name)] == \
        [n for n in whole.notes if n.startswith(name)]


def test_noted_arguments_say_what_they_change():
    job = read_megatron_args(BASE + ["--delay-wgrad-compute", "--use-sharp"])
    notes = "\n".join(job.notes)
    assert "--delay-wgrad-compute: the weight gradients computed later" in notes
    assert "changes memory and is not modelled" in notes
    assert "--use-sharp: SHARP in-network reductions" in notes
    assert "changes step time and is not modelled" in notes
    assert job.ignored == ()


def test_a_noted_option_at_megatrons_default_changes_nothing():
    # --mlp-chunks-for-training 1, --num-distributed-optimizer-instances 1 (spelled 1.0)
    job = read_megatron_args(BASE + ["--mlp-chunks-for-training", "1",
                                     "--num-distributed-optimizer-instances", "1.0"])
    assert job.ignored == ("--mlp-chunks-for-training", "--num-distributed-optimizer-instances")
    assert not any("--mlp-chunks-for-training" in n for n in job.notes)


def test_fp32_residual_and_softmax_type_are_read_not_noted():
    # issue 32: both read (memsym.readers.megatron_numerics), neither noted nor ignored
    job = read_megatron_args(BASE + ["--bf16", "--fp32-residual-connection",
                                     "--softmax-type", "learnable"])
    assert job.ignored == ()
    assert not any(n.startswith(("--fp32-residual-connection", "--softmax-type"))
                   for n in job.notes)
    assert job.training["fp32_residual_connection"] and job.architecture["attention_sinks"]
    # Megatron's default vanilla is read too: it changes nothing, and is not "ignored"
    vanilla = read_megatron_args(BASE + ["--softmax-type", "vanilla"])
    assert vanilla.ignored == () and "attention_sinks" not in vanilla.architecture


@pytest.fixture(scope="module")
def megatron_defaults():
    from tools import megatron_flags

    return megatron_flags.defaults()


def test_inert_values_are_megatrons_defaults(megatron_defaults):
    for dest, value in INERT.items():
        assert same_value(str(megatron_defaults[dest]), value), (dest, megatron_defaults[dest])
    # the one value VALUE_NOT_MODELLED notes is not the default (else every command has it)
    for dest, (value, _) in VALUE_NOT_MODELLED.items():
        assert not same_value(megatron_defaults[dest], value), dest


def test_a_noted_switch_given_is_never_megatrons_default(megatron_defaults):
    """A switch (no value) in a noted set is noted whenever given: its stored constant must then
    differ from the parser's default (no --x whose default is already True)."""
    for name, (dest, arity, const) in TABLE.items():
        if arity == 0 and (dest in MEMORY_NOT_MODELLED or dest in TIME_NOT_MODELLED):
            assert const != megatron_defaults[dest], name


MIRROR = "/work/.mirror/NVIDIA+Megatron-LM/repo"
CITED = re.compile(r"([\w/]+\.py):(\d+)(?:-(\d+))?\)$")


@pytest.mark.skipif(not os.path.isdir(MIRROR), reason="no Megatron-LM git directory here")
def test_each_cited_line_is_where_megatron_reads_the_argument():
    files = {}
    for dest, phrase in {**MEMORY_NOT_MODELLED, **TIME_NOT_MODELLED}.items():
        found = CITED.search(phrase)
        assert found is not None, (dest, phrase)     # each names where Megatron reads it
        path, first, last = found.group(1), int(found.group(2)), found.group(3)
        if path not in files:
            files[path] = subprocess.run(
                ["git", "-C", MIRROR, "show", "d98e8a64dd:" + (
                    path if path == "pretrain_gpt.py" else f"megatron/{path}")], check=True,
                capture_output=True, text=True).stdout.splitlines()
        lines = files[path][first - 4:int(last or first) + 3]
        assert any(dest in line for line in lines), (dest, path, first)


# --- what is now read ----------------------------------------------------------------------

def _params(*extra) -> int:
    return parameter_count(Architecture(**read_megatron_args(BASE + list(extra)).architecture))


def test_encoder_num_layers_is_num_layers():
    """validate_args (training/arguments.py:1304-1311): --encoder-num-layers is --num-layers.
    h = 64, ffn 4h, biases, LayerNorm, learned positions (128), tied embedding of 1000 rows
    padded to 1024 (make_vocab_size_divisible_by 128): a layer holds 12h^2 + 13h."""
    h, layers = 64, 6
    per_layer = 12 * h * h + 13 * h
    expected = layers * per_layer + 2 * h + 1024 * h + 128 * h
    base = BASE[2:]
    assert BASE[:2] == ["--num-layers", "2"]
    job = read_megatron_args(base + ["--encoder-num-layers", str(layers)])
    assert parameter_count(Architecture(**job.architecture), pad_vocab=True) == expected
    assert "--encoder-num-layers" not in job.ignored
    with pytest.raises(InvalidValueError, match="not both"):
        read_megatron_args(BASE + ["--encoder-num-layers", "2"])
    assert read_megatron_overrides(["--encoder-num-layers", "6"], num_layers=2).options == \
        {"num_layers": 6}


def test_attention_output_gate_widens_linear_qkv():
    """attention.py:1689-1691: linear_qkv's output grows by kv_channels x heads = 64 rows of
    h = 64 weights and their bias (biases on), in each of the 2 layers."""
    assert _params("--attention-output-gate") - _params() == 2 * (64 * 64 + 64)
    assert read_megatron_overrides(["--attention-output-gate"], num_layers=2).options == \
        {"attention_output_gate": True}


def test_attention_output_gate_beside_a_model(capsys, tmp_path):
    argfile = tmp_path / "args.txt"
    argfile.write_text("--attention-output-gate\n", encoding="utf-8")
    code, out, err = run(capsys, "estimate", "llama2-7b", "--world-size", 8, "--args-file",
                         argfile, "--json")
    assert code == 0, err
    # Llama 2 7B: 32 layers, 32 heads of 128, no biases: 32 x 4096 x 4096 more weights
    gated = dataclasses.replace(preset("llama2-7b"), attention_output_gate=True)
    assert json.loads(out)["params"] == parameter_count(preset("llama2-7b")) + 32 * 4096 * 4096
    assert json.loads(out)["params"] == parameter_count(gated)


# --- through the command line ----------------------------------------------------------------

PASTED = ["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", *BASE,
          "--max-position-embeddings", "128", "--bf16", "--lr", "1e-4"]


def test_a_pasted_command_notes_what_it_does_not_model(capsys):
    code, out, err = run(capsys, "estimate", "--world-size", 8, "--json", "--", *PASTED,
                         "--delay-wgrad-compute", "--overlap-param-gather-with-optimizer-step")
    assert code == 0, err
    data = json.loads(out)
    assert data["ignored"] == ["--lr"]
    assert any(n.startswith("--delay-wgrad-compute: ") and "changes memory" in n
               for n in data["notes"])
    assert any(n.startswith("--overlap-param-gather-with-optimizer-step: ")
               and "changes step time" in n for n in data["notes"])


@pytest.mark.parametrize("extra", [["--enable-mhc-connections"], ["--spec", "a.b", "c"],
                                   ["--yaml-cfg", "x.yaml"], ["--mtp-standalone"],
                                   ["--batch-size", "4"]])
def test_a_refused_argument_is_one_line_on_both_paths(capsys, tmp_path, extra):
    code, out, err = run(capsys, "estimate", "--world-size", 8, "--", *PASTED, *extra)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert extra[0] in err
    argfile = tmp_path / "args.txt"
    argfile.write_text(" ".join(extra) + "\n", encoding="utf-8")
    code, out, err2 = run(capsys, "estimate", "llama2-7b", "--world-size", 8, "--args-file",
                          argfile)
    assert code == 2 and out == "" and err2.count("\n") == 1, err2
    assert err2.split(": ", 1)[1] == err.split(": ", 1)[1]


def test_gelu_fusion_beside_a_model_follows_its_mlp(capsys, tmp_path):
    """argument_utils.py:314-319: under a SwiGLU the fusion is bias_swiglu_fusion's, so
    --no-bias-gelu-fusion is without effect on Llama 2; GPT-3's non-gated GELU MLP runs the
    bias add and the GELU apart (one elementwise pass more), which is noted."""
    argfile = tmp_path / "args.txt"
    argfile.write_text("--no-bias-gelu-fusion\n", encoding="utf-8")
    seen = {}
    for model in ("llama2-7b", "gpt3-175b"):
        code, out, err = run(capsys, "estimate", model, "--world-size", 64, "--tp", 8,
                             "--args-file", argfile, "--json")
        assert code in (0, 1), err
        seen[model] = json.loads(out)
    assert seen["llama2-7b"]["ignored"] == ["--no-bias-gelu-fusion"]
    assert "--no-bias-gelu-fusion" not in seen["gpt3-175b"].get("ignored", [])
    assert any(n.startswith("--no-bias-gelu-fusion: ") and "changes step time" in n
               for n in seen["gpt3-175b"]["notes"])
