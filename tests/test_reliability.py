"""Bad input gets a clear answer (issue 9, part 1).

Every class of bad input is tried twice: through the Python API (an exception of memsym's own,
a subclass of ``ValueError``, one line that says what was wrong and what is accepted) and
through the command line (one line on stderr, exit status 2 -- 1 for "nothing fits" --, no
traceback, nothing on stdout, no output file).  A few cases run the real ``python -m memsym``
in a subprocess so that the whole path, interpreter start-up included, is covered.

The expected fragments of each message are what a user needs to read: the rule broken and
the numbers involved (heads, layers, experts, b*d), or the accepted spellings / closest names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import memsym
from memsym import errors
from memsym.cli import main
from in_process import run
from memsym.model import Architecture, check_layout, from_hf_config, preset, resolve_model
from memsym.terms.model_state import byte_widths, model_state
from memsym.training import Layout, Training, microbatches, training_memory
from memsym.units import parse_bytes, parse_count
from memsym.values import as_values, exact

GB = 10**9
GiB = 2**30


# ------------------------------------------------------------------------------------------------
# helpers: what "a clear answer" means, checked the same way everywhere
# ------------------------------------------------------------------------------------------------
def api_refused(fn, *fragments, kind=errors.MemsymError):
    """``fn()`` raises memsym's own ValueError subclass with a one-line message."""
    with pytest.raises(kind) as info:
        fn()
    exc = info.value
    assert isinstance(exc, errors.MemsymError) and isinstance(exc, ValueError)
    msg = str(exc)
    assert msg and "\n" not in msg, msg
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    return msg


def cli_refused(capsys, argv, *fragments, code=2):
    """``memsym argv`` fails with one stderr line, the exit status, nothing on stdout."""
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == code, (rc, out, err)
    assert out == "", out
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for frag in fragments:
        assert frag in err, f"{frag!r} not in {err!r}"
    return err


def cli_ok(capsys, argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, (out, err)
    return out, err


LLAMA = ["llama2-7b", "--seq-length", "4096"]


# ------------------------------------------------------------------------------------------------
# 1. zero, negative, fractional or non-numeric degrees and sizes
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["0", "-2", "1.5", "two", "", "²", "0x8", "1e1"])
@pytest.mark.parametrize("option", ["--tp", "--pp", "--dp", "--seq-length", "--micro-batch-size",
                                    "--global-batch-size", "--context-parallel-size", "--ep",
                                    "--world-size"])
def test_cli_degrees_and_sizes_must_be_whole_and_positive(capsys, option, bad):
    cli_refused(capsys, ["estimate", *LLAMA, f"{option}={bad}"],
                "expected a whole number >= 1", option.split("=")[0])


@pytest.mark.parametrize("bad, said", [
    ("0", "must be > 0"), ("-7B", "expected a whole number such as 7000000000, 7e9, 7B"),
    ("1.5", "must be a whole number"), ("seven", "expected a whole number such as"),
    ("nan", "cannot read parameter count"), ("inf", "cannot read parameter count"),
    ("1e100", "cannot read parameter count"), ("7b", "7B"),
])
def test_cli_parameter_count_refused(capsys, bad, said):
    cli_refused(capsys, ["estimate", f"--params={bad}"], "--params", said)


def test_cli_negative_count_without_equals_sign_is_still_one_line(capsys):
    # argparse reads "-7B" as an option name; the answer is still one line, exit 2
    cli_refused(capsys, ["estimate", "--params", "-7B"], "--params")


@pytest.mark.parametrize("name, bad, said", [
    ("t", 0, "must be > 0"), ("d", -1, "must be > 0"), ("p", 1.5, "must be a whole number"),
    ("t", "2", "must be a number"), ("N", 0, "must be > 0"), ("N", -7e9, "must be > 0"),
    ("d", True, "must be a number"), ("C", 0, "must be > 0"),
])
def test_api_symbol_values_checked_by_domain(name, bad, said):
    M = model_state("zero3", convention="seed000").subs(byte_widths("zero3", convention="seed000"))
    vals = {"N": 7 * GB, "d": 8, "t": 1, "p": 1, name: bad}
    api_refused(lambda: M.evaluate(vals), said, name, kind=errors.InvalidValueError)
    api_refused(lambda: as_values({name: bad}), said, kind=errors.InvalidValueError)


@pytest.mark.parametrize("field, bad", [("t", 0), ("p", -1), ("d", 1.5), ("c", "2"), ("e", True),
                                        ("t", 2.0)])
def test_api_layout_degrees(field, bad):
    layout = Layout(**{field: bad})
    api_refused(lambda: training_memory("llama2-7b", layout, Training(seq_length=128)),
                f"layout {field} must be a whole number >= 1", kind=errors.InvalidValueError)


@pytest.mark.parametrize("field, bad", [("seq_length", 0), ("seq_length", 4096.0),
                                        ("micro_batch_size", -1), ("micro_batch_size", "1")])
def test_api_training_sizes(field, bad):
    api_refused(lambda: training_memory("llama2-7b", Layout(), Training(**{field: bad})),
                f"{field} must be a whole number >= 1", kind=errors.InvalidValueError)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_api_virtual_pipeline_size(bad):
    # v = 0 or -1 must not silently mean "not interleaved"; "2" must not be a TypeError
    api_refused(lambda: training_memory("llama2-7b", Layout(p=2, v=bad), Training(seq_length=128)),
                "v", "whole number", kind=errors.InvalidValueError)


@pytest.mark.parametrize("where, field, bad", [
    ("training", "flash_attention", "no"), ("training", "dropout", "false"),
    ("layout", "sequence_parallel", "yes"), ("training", "flash_attention", 1.0)])
def test_api_flags_must_be_booleans(where, field, bad):
    # a non-empty string is truthy in Python: "false" must not switch dropout on silently
    layout = Layout(t=2, **({field: bad} if where == "layout" else {}))
    training = Training(seq_length=128, **({field: bad} if where == "training" else {}))
    api_refused(lambda: training_memory("llama2-7b", layout, training), field, "true or false",
                kind=errors.InvalidValueError)


@pytest.mark.parametrize("field, bad", [("global_batch_size", 0), ("global_batch_size", "8"),
                                        ("global_batch_size", 8.0), ("num_microbatches", 1.5),
                                        ("num_microbatches", -2)])
def test_api_batch_sizes(field, bad):
    api_refused(lambda: training_memory("llama2-7b", Layout(), Training(seq_length=128, **{field: bad})),
                field, "whole number", kind=errors.InvalidValueError)


@pytest.mark.parametrize("field, bad, said", [("num_layers", 0, "must be > 0"),
                                              ("hidden_size", 4096.0, "must be a whole number"),
                                              ("num_attention_heads", -32, "must be > 0"),
                                              ("vocab_size", "32000", "must be a whole number")])
def test_api_architecture_sizes(field, bad, said):
    kw = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, vocab_size=32000,
              position_embedding_type="rope")
    kw[field] = bad
    api_refused(lambda: training_memory(Architecture(**kw), Layout(), Training(seq_length=128)),
                field, said, kind=errors.InvalidValueError)


@pytest.mark.parametrize("bad", ["1.5", "0", "-3", "lots", "1e15.5"])
def test_api_parse_count_refusals(bad):
    api_refused(lambda: parse_count(bad), "parameter count", kind=errors.InvalidValueError)


# ------------------------------------------------------------------------------------------------
# 2-6. divisibility and world size: the rule and the numbers are named
# ------------------------------------------------------------------------------------------------
def test_t_must_divide_heads():
    # llama2-7b: 32 heads (Touvron et al. 2023, Table 2 config)
    frag = ("t=3", "attention heads", "num_attention_heads=32")
    api_refused(lambda: check_layout(preset("llama2-7b"), t=3), *frag, kind=errors.DivisibilityError)
    api_refused(lambda: training_memory("llama2-7b", Layout(t=3, sequence_parallel=True),
                                        Training(seq_length=128)), *frag,
                kind=errors.DivisibilityError)


def test_cli_t_must_divide_heads(capsys):
    cli_refused(capsys, ["estimate", *LLAMA, "--tp", "3"], "t=3", "num_attention_heads=32")


def test_t_must_divide_kv_heads():
    # llama2-70b: 64 heads, 8 KV heads (GQA): t = 16 divides the heads but not the KV heads
    frag = ("t=16", "KV heads", "num_query_groups=8")
    api_refused(lambda: check_layout(preset("llama2-70b"), t=16), *frag,
                kind=errors.DivisibilityError)
    api_refused(lambda: training_memory("llama2-70b", Layout(t=16, sequence_parallel=True),
                                        Training(seq_length=128)), *frag,
                kind=errors.DivisibilityError)


def test_cli_t_must_divide_kv_heads(capsys):
    cli_refused(capsys, ["estimate", "llama2-70b", "--seq-length", "4096", "--tp", "16",
                         "--sequence-parallel"], "t=16", "num_query_groups=8")


def test_p_must_divide_layers():
    frag = ("p=5", "num_layers=32")
    api_refused(lambda: check_layout(preset("llama2-7b"), p=5), *frag, kind=errors.DivisibilityError)
    api_refused(lambda: training_memory("llama2-7b", Layout(p=5), Training(seq_length=128)), *frag,
                kind=errors.DivisibilityError)


def test_cli_p_must_divide_layers(capsys):
    cli_refused(capsys, ["estimate", *LLAMA, "--pp", "5"], "p=5", "num_layers=32")


def test_world_size_must_equal_tpcd(capsys):
    # the Python layout has no separate world size: it is derived, so it cannot contradict
    lay = Layout(t=2, p=4, c=2, d=3)
    assert lay.world_size == 2 * 4 * 2 * 3
    cli_refused(capsys, ["estimate", *LLAMA, "--tp", "2", "--dp", "2", "--world-size", "8"],
                "world size 8", "t*p*c*d", "= 4")
    cli_refused(capsys, ["estimate", *LLAMA, "--tp", "4", "--pp", "2", "--world-size", "12"],
                "world size 12", "multiple of", "t*p*c = 8")
    # the model-state path (--params, no MODEL) must not ignore a contradicting world size
    cli_refused(capsys, ["estimate", "--params", "7B", "--tp", "2", "--dp", "2", "--world-size", "8"],
                "world size 8")


def test_api_world_size_in_the_search():
    # the search takes a world size G and layouts restricted to tp/pp lists: none multiply to G
    from memsym.search import search

    api_refused(lambda: search("llama2-7b", "h100-80gb", 8, tp=[4], pp=[4], seq_length=128),
                "8 GPUs", kind=errors.InvalidValueError)
    api_refused(lambda: search("llama2-7b", "h100-80gb", 0, seq_length=128),
                "gpus must be a whole number >= 1", kind=errors.InvalidValueError)


@pytest.mark.parametrize("field, bad", [("seq_length", float("nan")), ("seq_length", float("inf")),
                                        ("seq_length", "4096"), ("seq_length", None),
                                        ("capacity", "80GB"), ("capacity", -1)])
def test_api_search_options_checked(field, bad):
    from memsym.search import make_space

    api_refused(lambda: make_space("llama2-7b", "h100-80gb", **{field: bad}), field.split("_")[0],
                kind=errors.InvalidValueError)


def test_api_min_gpus_nothing_fits_names_the_binding_term():
    from memsym.search import min_gpus

    with pytest.raises(errors.NoFitError) as info:
        min_gpus("llama2-7b", "h100-80gb", capacity=10**9, max_gpus=64, seq_length=2048)
    assert "nothing fits" in str(info.value) and "binding term" in str(info.value)


def test_cli_training_options_without_a_model_are_refused(capsys):
    # with --params alone only model states are estimated: nothing is silently ignored
    cli_refused(capsys, ["estimate", "--params", "7B", "--seq-length", "4096"],
                "--seq-length needs a MODEL")
    cli_refused(capsys, ["estimate", "--params", "7B", "--sequence-parallel", "--ep", "2"],
                "--expert-model-parallel-size, --sequence-parallel need a MODEL")
    # the framework switches (loss and overlap flags) change a job's memory or step time:
    # without a model each is refused, not dropped
    for flag in ("--compiled-loss", "--chunked-loss", "--disable-loss-parallel",
                 "--overlap-grad-reduce",
                 "--overlap-param-gather", "--tp-comm-overlap",
                 "--overlap-moe-expert-parallel-comm", "--no-overlap-p2p-communication"):
        cli_refused(capsys, ["estimate", "--params", "7B", flag], f"{flag} needs a MODEL")
    out, _ = cli_ok(capsys, ["estimate", "--params", "175B", "--tp", "8", "--pp", "8",
                             "--world-size", "512", "--json"])
    assert json.loads(out)["layout"] == {"dp": 8, "tp": 8, "pp": 8}   # d = G/(t p)


def test_cli_world_size_gives_d(capsys):
    out, _ = cli_ok(capsys, ["estimate", *LLAMA, "--tp", "2", "--pp", "2", "--world-size", "16",
                             "--json"])
    lay = json.loads(out)["layout"]
    assert (lay["dp"], lay["world_size"]) == (4, 16)


def test_e_must_divide_experts(capsys):
    # Mixtral 8x7B: 8 experts (Jiang et al. 2024)
    frag = ("e=3", "num_experts=8")
    api_refused(lambda: check_layout(preset("mixtral-8x7b"), e=3), *frag,
                kind=errors.DivisibilityError)
    api_refused(lambda: training_memory("mixtral-8x7b", Layout(e=3, d=3), Training(seq_length=128)),
                *frag, kind=errors.DivisibilityError)
    cli_refused(capsys, ["estimate", "mixtral-8x7b", "--seq-length", "128", "--ep", "3", "--dp", "3"],
                *frag)


def test_expert_parallel_needs_experts(capsys):
    api_refused(lambda: check_layout(preset("llama2-7b"), e=2), "e=2", "needs a model with experts",
                kind=errors.DivisibilityError)
    cli_refused(capsys, ["estimate", *LLAMA, "--ep", "2", "--dp", "2"], "needs a model with experts")


def test_global_batch_divisible_by_micro_batch_times_d(capsys):
    frag = ("B=16", "b*d=6")
    api_refused(lambda: microbatches(Layout(d=3), Training(micro_batch_size=2, global_batch_size=16)),
                *frag, kind=errors.DivisibilityError)
    api_refused(lambda: training_memory("llama2-7b", Layout(d=3),
                                        Training(seq_length=128, micro_batch_size=2,
                                                 global_batch_size=16)),
                *frag, kind=errors.DivisibilityError)
    cli_refused(capsys, ["estimate", *LLAMA, "--dp", "3", "--micro-batch-size", "2",
                         "--global-batch-size", "16"], *frag)


def test_num_microbatches_contradicting_global_batch(capsys):
    # B = m b d: 32 = m * 1 * 2 gives m = 16, not 3
    api_refused(lambda: microbatches(Layout(d=2), Training(global_batch_size=32, num_microbatches=3)),
                "num_microbatches 3", "16", kind=errors.InvalidValueError)
    cli_refused(capsys, ["estimate", *LLAMA, "--dp", "2", "--global-batch-size", "32",
                         "--num-microbatches", "3"], "num_microbatches 3", "16")


def test_virtual_pipeline_must_divide_layers_per_stage(capsys):
    # seed 001: "number of layers on each middle pipeline rank ... must be divisible by virtual
    # pipeline parallel degree"; llama2-7b, p = 2: 16 layers per stage, v = 3 does not divide
    api_refused(lambda: training_memory("llama2-7b", Layout(p=2, v=3), Training(seq_length=128)),
                "v=3", "16", kind=errors.DivisibilityError)
    cli_refused(capsys, ["estimate", *LLAMA, "--pp", "2", "--vpp", "3"], "v=3", "(16)")


# ------------------------------------------------------------------------------------------------
# 7. capacity <= 0, or below the replicated floor (the floor named)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cap", [0, -80 * GB, float("nan"), float("inf")])
def test_api_capacity_must_be_positive_and_finite(cap):
    M = model_state("distributed-optimizer", convention="seed000").subs(byte_widths(convention="seed000"))
    api_refused(lambda: memsym.smallest(M, "d", cap, {"N": 7 * GB, "t": 1, "p": 1}), "capacity",
                kind=errors.InvalidValueError)


@pytest.mark.parametrize("cap, said", [("0GB", "must be > 0 bytes"), ("-80GB", "cannot read"),
                                       ("0", "ambiguous")])
def test_cli_capacity_must_be_positive(capsys, cap, said):
    cli_refused(capsys, ["solve", "dp", "--params", "7B", f"--gpu-memory={cap}"], "--gpu-memory", said)
    cli_refused(capsys, ["estimate", "--params", "7B", f"--gpu-memory={cap}"], said)


def test_api_capacity_below_replicated_floor_names_the_floor():
    # distributed optimizer: 2N/(pt) weights stay whatever d (seed 000); 175e9 * 2 = 350 GB
    M = model_state("distributed-optimizer", convention="seed000").subs(byte_widths(convention="seed000"))
    with pytest.raises(errors.NoFitError) as info:
        memsym.smallest(M, "d", 80 * GB, {"N": 175 * GB, "t": 1, "p": 1})
    exc = info.value
    assert isinstance(exc, ValueError) and "\n" not in str(exc)
    assert exc.binding == ("weights",) and exc.floor == 350 * GB
    assert "weights" in str(exc) and "350 GB" in str(exc) and "80 GB" in str(exc)


def test_cli_capacity_below_floor_is_exit_1_with_the_floor(capsys):
    # "nothing fits" is an answer, not a usage error: exit 1 (memsym.cli contract), one line
    # Megatron's distributed optimizer keeps bf16 weights and the whole fp32 gradient buffer
    # whatever d: (2 + 4) x 175e9 = 1050 GB
    cli_refused(capsys, ["solve", "dp", "--params", "175B", "--gpu-memory", "80GB"],
                "nothing fits", "weights + gradients", "1050 GB", code=1)


def test_api_ddp_cannot_be_solved_for_d():
    # DDP replicates everything: memory does not depend on d, so "smallest d" has no meaning
    M = model_state("ddp", convention="seed000").subs(byte_widths("ddp", convention="seed000"))
    api_refused(lambda: memsym.smallest(M, "d", 80 * GB, {"N": 7 * GB, "t": 1, "p": 1}),
                "does not depend on d", kind=errors.InvalidValueError)


# ------------------------------------------------------------------------------------------------
# 8. unknown names: the closest valid names are suggested
# ------------------------------------------------------------------------------------------------
def test_api_unknown_names_suggest_closest():
    from memsym.hardware import gpu

    cases = [
        (lambda: preset("llama2-7"), "model", "llama2-7b"),
        (lambda: resolve_model("mixtral-8x7"), "model", "mixtral-8x7b"),
        (lambda: gpu("h100x"), "GPU", "h100"),
        (lambda: model_state("fdsp"), "sharding", "fsdp"),
        (lambda: byte_widths("zero3", optimizer="adm"), "optimizer", "adam"),
        (lambda: byte_widths("zero3", precision="bf61"), "precision", "bf16"),
        (lambda: model_state("zero3", convention="megatrn"), "convention", "megatron-lm"),
        (lambda: training_memory("llama2-7b", Layout(), Training(recompute="selectve")),
         "recompute", "selective"),
        (lambda: training_memory("llama2-7b", Layout(), Training(sharding="zer03")), "sharding",
         "zero3"),
    ]
    for fn, kind, close in cases:
        msg = api_refused(fn, f"unknown {kind}", "did you mean", close, "accepted:",
                          kind=errors.UnknownNameError)
        hint = msg.split("did you mean", 1)[1].split("?", 1)[0]
        assert close in [x.strip() for x in hint.split(" or ")], msg


@pytest.mark.parametrize("argv, kind, close", [
    (["estimate", "llama2-7", "--seq-length", "128"], "model", "llama2-7b"),
    (["time", "7B", "--tokens", "1T", "--gpu", "h100x"], "GPU", "h100"),
    (["estimate", "--params", "7B", "--sharding", "fdsp"], "sharding", "fsdp"),
    (["estimate", "--params", "7B", "--optimizer", "adm"], "optimizer", "adam"),
    (["estimate", "--params", "7B", "--precision", "bf61"], "precision", "bf16"),
    (["estimate", "--params", "7B", "--convention", "megatron"], "convention", "megatron-lm"),
    (["estimate", "--params", "7B", "--offload", "optimiser"], "offload", "optimizer"),
])
def test_cli_unknown_names_suggest_closest(capsys, argv, kind, close):
    cli_refused(capsys, argv, f"unknown {kind}", "did you mean", close, "accepted:")


def test_names_are_case_and_separator_tolerant(capsys):
    # the accepted spellings: case-insensitive, "_" for "-" (what people paste from configs)
    assert preset("LLAMA2_7B").num_layers == 32
    out, _ = cli_ok(capsys, ["estimate", "--params", "7B", "--sharding", "Distributed_Optimizer",
                             "--json"])
    assert json.loads(out)["sharding"] == "distributed-optimizer"


# ------------------------------------------------------------------------------------------------
# 9. unit strings: the common unambiguous spellings are accepted, the rest refused
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, value", [
    ("80GB", 80 * GB), ("80 GB", 80 * GB), ("80GiB", 80 * GiB), ("80 GiB", 80 * GiB),
    ("1.5TB", 1500 * GB), ("80.5GB", 80_500_000_000), ("141GB", 141 * GB),
    ("  80GB ", 80 * GB), ("85899345920", 80 * GiB), ("512MiB", 512 * 2**20), (80 * GB, 80 * GB),
])
def test_units_accepted(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text, said", [
    ("80", "ambiguous"),                  # 80 bytes is surely a forgotten unit
    ("80gb", "case-sensitive"),           # could be gigabits
    ("80Gb", "could mean bits"),
    ("80 gib", "did you mean GiB"),
    ("1e3TB", "cannot read"),             # exponents are not a size spelling
    ("80 G", "unknown unit"), ("80GBs", "unknown unit"), ("GB80", "cannot read"),
    ("-80GB", "cannot read"), ("+80GB", "cannot read"), ("0GB", "must be > 0"),
    ("0.1B", "whole number of bytes"), ("80,5GB", "cannot read"), ("80  GB", "cannot read"),
    ("80\tGB", "cannot read"), ("nan GB", "cannot read"), ("inf", "cannot read"),
    ("", "cannot read"), ("٨٠GB", "cannot read"), (True, "memory size"),
])
def test_units_refused(text, said):
    msg = api_refused(lambda: parse_bytes(text), said, kind=errors.InvalidValueError)
    assert "GB" in msg or "GiB" in msg or "bytes" in msg  # says what is accepted


@pytest.mark.parametrize("text", ["80", "80gb", "1e3TB"])
def test_cli_units_refused(capsys, text):
    cli_refused(capsys, ["estimate", "--params", "7B", "--gpu-memory", text], "--gpu-memory")


def test_cli_units_accepted(capsys):
    out, _ = cli_ok(capsys, ["estimate", "--params", "7B", "--gpu-memory", "80 GiB", "--json"])
    assert json.loads(out)["gpu_memory_bytes"] == 80 * GiB


# ------------------------------------------------------------------------------------------------
# 10. NaN, infinity, 1e15 parameters: refused or exact, never overflowing
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_api_non_finite_refused(bad):
    api_refused(lambda: exact(bad, "N"), "must be finite", kind=errors.InvalidValueError)
    M = model_state("zero3", convention="seed000").subs(byte_widths("zero3", convention="seed000"))
    api_refused(lambda: M.evaluate(N=bad, d=1, t=1, p=1), "N", kind=errors.InvalidValueError)


def test_api_1e15_parameters_exact():
    # 1e15 as a float is read through its decimal repr: exactly 10**15
    assert exact(1e15) == 10**15 and exact(1e15).is_Integer
    M = model_state("zero3", convention="seed000").subs(byte_widths("zero3", convention="seed000"))
    # ZeRO-3, 16 bytes/param over d = 7: 16e15/7 exactly, not a rounded float
    val = M.evaluate(N=1e15, d=7, t=1, p=1)
    assert val * 7 == 16 * 10**15
    # the compiled numeric path stays finite
    f = M.compile()
    assert abs(f(N=1e15, d=7, t=1, p=1) - 16e15 / 7) <= 1e-12 * 16e15 / 7
    # 10**30 does not overflow the exact path either
    assert M.evaluate(N=10**30, d=1, t=1, p=1) == 16 * 10**30


def test_cli_1e15_parameters_exact(capsys):
    out, _ = cli_ok(capsys, ["estimate", "--params", "1e15", "--sharding", "ddp", "--json"])
    data = json.loads(out)
    assert data["params"] == 10**15
    # Megatron DDP: 18 bytes per parameter (bf16 weights, fp32 gradients, fp32 master + Adam)
    assert data["bytes"]["total"] == 18 * 10**15 and isinstance(data["bytes"]["total"], int)


@pytest.mark.parametrize("argv", [
    ["estimate", *LLAMA, "--fragmentation", "nan"],
    ["estimate", *LLAMA, "--fragmentation", "inf"],
    ["estimate", *LLAMA, "--hidden-dropout", "NaN"],
    ["estimate", *LLAMA, "--moe-expert-capacity-factor", "-inf"],
    ["time", "7B", "--tokens", "1T", "--mfu", "nan"],
    ["time", "7B", "--tokens", "1T", "--price-per-gpu-hour", "inf"],
])
def test_cli_non_finite_options_refused(capsys, argv):
    cli_refused(capsys, argv, "expected")


# ------------------------------------------------------------------------------------------------
# 11. config.json: missing, not JSON, wrong types, huge, fields designed to be evaluated
# ------------------------------------------------------------------------------------------------
LLAMA_CFG = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
             "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000}


def write_cfg(tmp_path, content, name="config.json"):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return str(path)


def test_config_missing(tmp_path, capsys):
    missing = str(tmp_path / "nope" / "config.json")
    api_refused(lambda: from_hf_config(missing), "no such config file", kind=errors.InvalidValueError)
    api_refused(lambda: resolve_model(missing), "no such config file")
    cli_refused(capsys, ["estimate", missing, "--seq-length", "128"], "no such config file")


@pytest.mark.parametrize("text, said", [
    ("{not json", "not valid JSON"), ("", "not valid JSON"), ("[1, 2]", "JSON object"),
    # Python's JSON dialect (transformers writes it): a non-finite size is refused by name
    ('{"model_type": "llama", "hidden_size": NaN, "num_attention_heads": 4, "vocab_size": 100, '
     '"num_hidden_layers": 2, "intermediate_size": 64}', "'hidden_size' must be a whole number"),
    ('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100, '
     '"num_hidden_layers": Infinity, "intermediate_size": 64}',
     "'num_hidden_layers' must be a whole number"),
    # refused on the text before json recurses (memsym.limits.MAX_NESTING)
    ("[" * 100000 + "]" * 100000, "nests deeper than 64 levels"),
])
def test_config_not_json(tmp_path, capsys, text, said):
    path = write_cfg(tmp_path, text)
    api_refused(lambda: from_hf_config(path), said, kind=errors.InvalidValueError)
    cli_refused(capsys, ["estimate", path, "--seq-length", "128"], said)


def test_config_binary_garbage(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    api_refused(lambda: from_hf_config(str(path)), "not valid JSON", kind=errors.InvalidValueError)


@pytest.mark.parametrize("field, value, said", [
    ("hidden_size", "4096", "must be a whole number"),
    ("hidden_size", 4096.0, "must be a whole number"),
    ("num_hidden_layers", True, "must be a whole number"),
    ("num_attention_heads", -32, "must be > 0"),
    ("vocab_size", [32000], "must be a whole number"),
    ("tie_word_embeddings", "false", "must be true or false"),
    ("num_hidden_layers", None, "missing field"),
])
def test_config_wrong_types(tmp_path, capsys, field, value, said):
    cfg = dict(LLAMA_CFG, **{field: value})
    path = write_cfg(tmp_path, cfg)
    api_refused(lambda: from_hf_config(path), field, said, kind=errors.InvalidValueError)
    cli_refused(capsys, ["estimate", path, "--seq-length", "128"], field, said)


def test_config_unsupported_model_type(tmp_path):
    path = write_cfg(tmp_path, dict(LLAMA_CFG, model_type="lama"))
    api_refused(lambda: from_hf_config(path), "model_type", "did you mean llama",
                kind=errors.UnknownNameError)


def test_config_huge_refused_before_reading(tmp_path, capsys):
    path = tmp_path / "config.json"
    with open(path, "wb") as fh:       # sparse: 5 MiB on paper, nothing on disk
        fh.truncate(5 * 2**20)
    api_refused(lambda: from_hf_config(str(path)), "refused above", kind=errors.InvalidValueError)
    cli_refused(capsys, ["estimate", str(path), "--seq-length", "128"], "refused above")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_config_that_is_a_device_is_refused_without_reading(capsys):
    # an endless "file" must not hang the reader: only regular files are read, and at most 4 MiB
    # issue 15: said "no such config file" although it exists; now the reason in words
    api_refused(lambda: resolve_model("/dev/zero"), "not a regular file")
    cli_refused(capsys, ["estimate", "/dev/zero", "--seq-length", "128"], "not a regular file")


def test_config_directory_without_config(tmp_path):
    api_refused(lambda: from_hf_config(str(tmp_path)), "no such config file")


def test_config_valid_reads(tmp_path):
    # the same file, well formed, reads (so the refusals above are about the defect alone);
    # 6738415616 parameters: Llama-2-7B's published count (Touvron et al. 2023, HF card)
    path = write_cfg(tmp_path, LLAMA_CFG)
    assert memsym.parameter_count(from_hf_config(path)) == 6738415616


# ------------------------------------------------------------------------------------------------
# 12. contradictory flags
# ------------------------------------------------------------------------------------------------
def test_cli_offload_with_pipeline_refused(capsys):
    # seed 001: "Currently there is no support for Pipeline parallelism with CPU offloading"
    cli_refused(capsys, ["estimate", "--params", "7B", "--pp", "2", "--offload", "optimizer"],
                "CPU offload", "--pp 1")


def test_cli_offload_with_pipeline_refused_for_models(capsys):
    # the same rule on the model path (MODEL given)
    cli_refused(capsys, ["estimate", *LLAMA, "--pp", "2", "--offload", "optimizer"],
                "offload", "pipeline")


def test_api_offload_with_pipeline_refused():
    api_refused(lambda: training_memory("llama2-7b", Layout(p=2),
                                        Training(seq_length=128, offload="optimizer")),
                "offload", "pipeline", kind=errors.InvalidValueError)


def test_min_gpus_when_every_layout_breaks_a_rule(capsys):
    # offload with p = 2 only: every candidate layout is excluded by the offload-pp rule
    from memsym.search import min_gpus

    for batch in (None, 64):   # both paths of min_gpus (with and without a global batch)
        api_refused(lambda: min_gpus("llama2-7b", "h100-80gb", offload=["optimizer"], pp=[2],
                                     seq_length=128, global_batch_size=batch), "offload-pp",
                    kind=errors.NoFitError)
    cli_refused(capsys, ["min-gpus", "llama2-7b", "--gpu", "h100-80gb", "--offload", "optimizer",
                         "--pp", "2", "--seq-length", "128"], "offload", code=1)


def test_cli_distributed_optimizer_flag_contradicts_sharding(capsys):
    cli_refused(capsys, ["estimate", "--params", "7B", "--use-distributed-optimizer",
                         "--sharding", "zero3"], "--use-distributed-optimizer contradicts")


def test_cli_dropout_settings_must_agree(capsys):
    cli_refused(capsys, ["estimate", *LLAMA, "--hidden-dropout", "0", "--attention-dropout", "0.1"],
                "dropout")


def test_sequence_parallel_at_t1_warns_once_and_answers(capsys):
    # Megatron-LM silently turns --sequence-parallel off when t = 1: memsym answers, and says so
    out, err = cli_ok(capsys, ["estimate", *LLAMA, "--sequence-parallel", "--json"])
    assert err.count("\n") == 1 and err.startswith("memsym: warning:") and "Traceback" not in err
    assert "sequence-parallel" in err and "tensor-parallel size 1" in err
    assert json.loads(out)["layout"]["sequence_parallel"] is False
    # ... and the answer equals the one without the flag (it had no effect)
    plain, err2 = cli_ok(capsys, ["estimate", *LLAMA, "--json"])
    assert err2 == "" and json.loads(plain)["bytes"] == json.loads(out)["bytes"]
    # the Python API records the adjustment as a note, not a warning on stderr
    est = training_memory("llama2-7b", Layout(sequence_parallel=True), Training(seq_length=128))
    assert any("sequence parallelism is off at t = 1" in n for n in est.notes)


def test_moe_with_tp_needs_sequence_parallel():
    # Megatron-LM arguments.py: "When using MoE and tensor parallelism, sequence parallelism
    # must be used."
    api_refused(lambda: training_memory("mixtral-8x7b", Layout(t=2), Training(seq_length=128)),
                "sequence parallelism", kind=errors.InvalidValueError)


# ------------------------------------------------------------------------------------------------
# nothing is written or partially printed on failure
# ------------------------------------------------------------------------------------------------
def test_output_file_not_created_on_failure(tmp_path, capsys):
    target = tmp_path / "derivation.tex"
    cli_refused(capsys, ["latex", "--params", "175B", "--gpu-memory", "80GB", "--output",
                         str(target)], "nothing fits", code=1)
    assert not target.exists()
    cli_refused(capsys, ["latex", "--params", "7B", "--tp", "0", "--output", str(target)], "--tp")
    assert not target.exists()
    cli_refused(capsys, ["latex", "--params", "7B", "--sharding", "nope", "--output", str(target)],
                "unknown sharding")
    assert not target.exists()


def test_output_into_missing_folder_is_one_line(tmp_path, capsys):
    target = tmp_path / "no" / "such" / "dir" / "x.tex"
    cli_refused(capsys, ["latex", "--params", "7B", "--output", str(target)], "No such file")
    assert not target.exists()


def test_output_written_on_success(tmp_path, capsys):
    target = tmp_path / "x.tex"
    rc = main(["latex", "--params", "7B", "--output", str(target)])
    out, err = capsys.readouterr()
    assert rc == 0 and out == "" and err == ""
    assert target.read_text().startswith("\\begin{equation*}")


def test_failure_after_valid_options_prints_nothing(capsys):
    # everything is computed before the first line is printed: a late refusal leaves stdout empty
    cli_refused(capsys, ["estimate", *LLAMA, "--tp", "2", "--pp", "2", "--dp", "2",
                         "--global-batch-size", "3"], "B=3")


# ------------------------------------------------------------------------------------------------
# the real command: a fresh interpreter, exit status and streams as a shell sees them
# ------------------------------------------------------------------------------------------------
def _run(*argv, cwd=None):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "memsym", *argv], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


#: A refusal of each kind: argparse's type check, an unknown model, a unit's spelling, a rule
#: of the layout.
REFUSALS = [
    (["estimate", "--params", "7B", "--tp", "0"], "expected a whole number >= 1"),
    (["estimate", "llama2-7", "--seq-length", "128"], "did you mean llama2-7b"),
    (["estimate", "--params", "7B", "--gpu-memory", "80gb"], "case-sensitive"),
    (["estimate", "llama2-7b", "--seq-length", "128", "--tp", "3"], "must divide the attention heads"),
]


@pytest.mark.parametrize("argv, fragment", REFUSALS)
def test_refusals_are_one_line_and_exit_2(capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert code == 2, err
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert fragment in err


@pytest.mark.parametrize("argv, fragment", [REFUSALS[0], REFUSALS[3]])
def test_subprocess_refusals(argv, fragment):
    # the same contract from a new interpreter's exit status and streams (``python -m
    # memsym``): argparse's own refusal and one of memsym's, each a process of about 1 s; the
    # other kinds are refused through the same main (test_refusals_are_one_line_and_exit_2)
    proc = _run(*argv)
    assert proc.returncode == 2, proc
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert fragment in proc.stderr


def test_subprocess_bad_config_and_no_output_file(tmp_path):
    bad = write_cfg(tmp_path, "{'hidden_size': 4096}")  # Python, not JSON
    out = tmp_path / "out.tex"
    proc = _run("estimate", bad, "--seq-length", "128")
    assert proc.returncode == 2 and proc.stdout == "" and "not valid JSON" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    proc = _run("latex", "--params", "175B", "--gpu-memory", "80GB", "--output", str(out))
    assert proc.returncode == 1 and proc.stdout == "" and not out.exists()
    assert proc.stderr.count("\n") == 1 and "1050 GB" in proc.stderr


def test_subprocess_sequence_parallel_warning():
    proc = _run("estimate", "llama2-7b", "--seq-length", "128", "--sequence-parallel", "--json")
    assert proc.returncode == 0
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("memsym: warning:")
    assert json.loads(proc.stdout)["layout"]["sequence_parallel"] is False


# ------------------------------------------------------------------------------------------------
# docs/validation.md shows the real messages: every console block is run here
# ------------------------------------------------------------------------------------------------
def _doc_examples():
    import pathlib
    import re
    import shlex

    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "validation.md").read_text(
        encoding="utf-8")
    out = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        lines = block.rstrip("\n").split("\n")
        for i, line in enumerate(lines):
            if line.startswith("$ memsym "):
                expected = lines[i + 1]
                assert not expected.startswith("$ "), line
                out.append((shlex.split(line[2:])[1:], expected))
    return out


DOC_EXAMPLES = _doc_examples()


def test_doc_has_examples_of_every_kind():
    assert len(DOC_EXAMPLES) >= 20
    kinds = " ".join(e for _, e in DOC_EXAMPLES)
    for frag in ("must divide", "world size", "unknown model", "unknown GPU", "ambiguous",
                 "nothing fits", "offload", "warning", "cannot read"):
        assert frag in kinds, frag


@pytest.mark.parametrize("argv, expected", DOC_EXAMPLES, ids=[" ".join(a)[:60] for a, _ in DOC_EXAMPLES])
def test_doc_examples_are_the_real_messages(capsys, tmp_path, monkeypatch, argv, expected):
    monkeypatch.chdir(tmp_path)   # relative paths in the examples (missing/config.json) stay missing
    rc = main(argv)
    out, err = capsys.readouterr()
    assert err == expected + "\n"
    if expected.startswith("memsym: warning:"):
        assert rc == 0 and out
    else:
        assert rc == (1 if "nothing fits" in expected else 2) and out == ""


# ================================================================================================
# issue 15: names are data, output is finite, failed writes are errors, results stay in range
# ================================================================================================
import math  # noqa: E402
import pathlib  # noqa: E402
import shlex  # noqa: E402
import stat  # noqa: E402
import unicodedata  # noqa: E402

import numpy as np  # noqa: E402
import sympy as sp  # noqa: E402

from bounded import GiB, run_python, time_limit  # noqa: E402

from memsym import text as mtext  # noqa: E402
from memsym.cli import output as mout  # noqa: E402
from memsym.numeric import finite_float  # noqa: E402
from memsym.terms import training_cost  # noqa: E402
from memsym.timing import report  # noqa: E402

FORGED = "meta-llama/x\nllama2-7b: fits on 1 GPU\x1b[2J\x1b[31mred\x1b]0;title\x07\u202eevil\r"


def _no_raw_controls(shown: str):
    bad = [ch for ch in shown if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")]
    assert not bad, (shown, bad)


def test_printable_escapes_a_forged_line_and_ansi_escapes():
    # issue 15: a config's _name_or_path with a newline and ANSI escapes printed a fake
    # "...: fits" line and live terminal escapes
    shown = mtext.printable(FORGED, limit=200)
    _no_raw_controls(shown)
    assert "\\n" in shown and "\\x1b[2J" in shown and "\\u202e" in shown and "\\x07" in shown
    assert shown.startswith("meta-llama/x\\nllama2-7b: fits")


def test_printable_cannot_be_forged_by_a_typed_backslash():
    # a name that *contains* the text "\n" must not look like an escaped newline
    assert mtext.printable("a\\nb") == "a\\\\nb" and mtext.printable("a\nb") == "a\\nb"


def test_printable_truncates_with_a_marker():
    shown = mtext.printable("x" * 10_000, limit=80)
    assert shown == "x" * 80 + "...(+9920 chars)"
    # the escape of a control character is never cut in half
    shown = mtext.printable("a" * 79 + "\x1b", limit=80)
    assert shown == "a" * 79 + "...(+1 chars)"


def test_short_echo_of_a_5000_digit_value():
    # issue 15: "5,000-digit values are echoed in full"; str() of them raises in Python 3.11+
    for value in (10**5000, -(10**5000), "9" * 5000, sp.Integer(10)**5000,
                  sp.Rational(1, 10**5000)):
        shown = mtext.short(value)
        assert len(shown) <= 80, shown
    assert mtext.short(10**5000) == "100000000000...(5001 digits)"
    assert mtext.short(12345) == "12345" and mtext.short(True) == "True"


def test_finite_json_refuses_infinity_naming_the_key():
    # issue 15: `--efficiency 1e-320` gave `Infinity` in --json (invalid JSON) with exit 0
    for bad, where in (({"time": {"days": math.inf}}, "time.days"),
                       ({"rows": [1.0, math.nan]}, "rows[1]"),
                       ({"b": sp.Integer(10)**400 / 3}, "b"), ({"x": sp.zoo}, "x"),
                       ({"x": np.float64("inf")}, "x")):
        with pytest.raises(errors.InvalidValueError) as info:
            mtext.finite_json(bad)
        assert str(info.value).startswith(where), str(info.value)


def test_finite_json_keeps_exact_integers_exact():
    data = json.loads(mtext.finite_json({"bytes": sp.Integer(10)**30 + 1, "n": np.int64(7),
                                         "r": sp.Rational(1, 4), "ok": True, "none": None}))
    assert data == {"bytes": 10**30 + 1, "n": 7, "r": 0.25, "ok": True, "none": None}


def test_approx_of_a_number_beyond_float_range():
    assert mtext.approx(sp.Integer(10) ** 400 * 2) == "2e+400"



# --- results outside float range: refused naming the input (compute, numeric) -------------------
H100 = dict(N=7 * 10**9, G=8, F=989 * 10**12, eta=sp.Rational(1, 2))


def test_time_with_1e200_tokens_is_refused_naming_the_input():
    # issue 15: `time 1e200 --tokens 1e200` printed inf
    with pytest.raises(errors.LimitError, match="tokens .*10\\^18 tokens"):
        training_cost.training_time(tokens=10**200)
    with pytest.raises(errors.LimitError, match="params .*10\\^16 parameters"):
        training_cost.training_time(params=10**200)
    vals = {**H100, "N": 10**200, "T": 10**200}
    secs = training_cost.training_time().evaluate(vals)     # exact and finite: 8 T N / (G F eta)
    assert secs == 8 * 10**400 / (8 * 989 * 10**12 * sp.Rational(1, 2))
    with pytest.raises(errors.InvalidValueError, match="outside the float range.*(N|T) = 1000") as info:
        finite_float(secs, "training time [s]", vals)
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


def test_time_with_tflops_1e_300_is_refused_naming_the_peak():
    # issue 15: `time --tflops 1e-300` printed inf; 1e-300 TFLOP/s = 1e-288 FLOP/s
    vals = {**H100, "T": 10**12, "F": sp.Rational(1, 10**288)}
    secs = training_cost.training_time().evaluate(vals)
    with pytest.raises(errors.InvalidValueError, match="F = 1/1000"):
        finite_float(secs, "training time [s]", vals)


def test_step_report_with_efficiency_1e_320_is_refused_naming_eta():
    # issue 15: `--efficiency 1e-320` gave inf in text and Infinity in --json, exit 0
    values = {"N": 7 * 10**9, "s": 4096, "b": 1, "h": 4096, "L": 32, "V": 32000, "t": 8, "p": 1,
              "d": 1, "m": 1}
    with pytest.raises(errors.InvalidValueError, match="eta = 1/1000") as info:
        report.step_report(values, cluster="dgx-h100", sharding=None, efficiency=1e-320)
    assert "outside the float range" in str(info.value)
    for bad in (0, -0.5, 1.5, float("nan"), float("inf"), "0.5", True):
        with pytest.raises(errors.InvalidValueError, match="efficiency"):
            report.step_report(values, cluster="dgx-h100", sharding=None, efficiency=bad)
    # a sane efficiency still answers with finite numbers (no change to the happy path)
    rep = report.step_report(values, cluster="dgx-h100", sharding=None, efficiency=0.5)
    assert math.isfinite(rep["step_time_s"]) and 0 < rep["mfu"] <= 1


def test_cost_at_a_price_of_1e308_is_refused_naming_the_price():
    # issue 15: "a price of 1e308" gave inf
    cost = training_cost.training_cost(training_cost.training_time())
    vals = {**H100, "T": 10**13, "price": 10**308}
    exact_cost = cost.evaluate(vals)
    assert exact_cost.is_Rational and exact_cost > 10**308
    with pytest.raises(errors.InvalidValueError, match="price = 1000"):
        finite_float(exact_cost, "training cost", vals)
    with pytest.raises(errors.InvalidValueError, match="price per GPU-hour must be >= 0"):
        training_cost.training_cost(training_cost.training_time(), rate=-1)
    with pytest.raises(errors.InvalidValueError, match="finite"):
        training_cost.training_cost(training_cost.training_time(), rate=float("inf"))


def test_compiled_total_refuses_an_overflowing_float_result():
    M = model_state("zero3", convention="zero-paper").subs(
        byte_widths("zero3", convention="zero-paper")).compile()
    assert M(N=7.5e9, d=64, p=1, t=1) == 16 * 7.5e9 / 64
    with pytest.raises(errors.InvalidValueError, match="outside the float range.*N = 1e\\+308"):
        M(N=1e308, d=1e-300, p=1, t=1)


# --- output in one go; a failed write is an error ------------------------------------------------
WRITER = r"""
import sys
from memsym.cli.output import OutputError, write_stdout
try:
    write_stdout("".join(f"row {i}\n" for i in range(%d)))
except OutputError as exc:
    print("memsym: error:", exc, file=sys.stderr)
    sys.exit(2)
"""


def _writer(rows: int, redirect: str) -> subprocess.CompletedProcess:
    code = WRITER % rows
    cmd = f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} {redirect}"
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[1])}
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60, env=env)


def test_closed_stdout_is_an_error_exit():
    # issue 15: `memsym estimate --params 7B >&-` exited 0 with the output lost
    proc = _writer(10, ">&-")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "stdout: it is closed" in proc.stderr and "Traceback" not in proc.stderr


def test_full_disk_is_an_error_exit():
    proc = _writer(10, "> /dev/full")
    assert proc.returncode == 2 and "no space left" in proc.stderr and "Traceback" not in proc.stderr


def test_broken_pipe_is_an_error_exit_without_a_traceback():
    # the reader closes its end at once; 2 MB cannot sit in a pipe buffer
    code = WRITER % 200_000
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[1])}
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
    writer.stdout.close()                                       # nobody reads: EPIPE
    _, err = writer.communicate(timeout=60)
    assert writer.returncode == 2, err
    assert "pipe was closed" in err and "Traceback" not in err and "Exception ignored" not in err


def test_output_file_is_written_whole_and_atomically(tmp_path):
    target = tmp_path / "out.txt"
    mout.write_file(target, "a\n" * 1000)
    assert target.read_text() == "a\n" * 1000
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]     # no temporary left behind


def test_output_to_a_fifo_is_refused_without_blocking(tmp_path):
    # issue 15: `--output` to a FIFO hung (open() waits for a reader)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with time_limit(10):
        with pytest.raises(mout.OutputError, match="it is a FIFO"):
            mout.write_file(fifo, "x\n")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize("path, kind", [("/dev/null", "a device"), ("/dev/zero", "a device"),
                                        ("/", "a directory")])
def test_output_to_a_device_or_directory_is_refused(path, kind):
    with pytest.raises(mout.OutputError, match=kind):
        mout.write_file(path, "x\n")


def test_output_into_a_missing_folder_is_one_line(tmp_path):
    with pytest.raises(mout.OutputError, match="cannot write the output to .*No such file") as info:
        mout.write_file(tmp_path / "missing" / "out.txt", "x")
    assert "\n" not in str(info.value)


def test_output_path_with_control_characters_is_shown_escaped(tmp_path):
    with pytest.raises(mout.OutputError) as info:
        mout.write_file(tmp_path / "no\n\x1b[2Jdir" / "out", "x")
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)


def test_output_json_refuses_infinity_before_writing_anything():
    with pytest.raises(errors.InvalidValueError, match="step_time_s"):
        mtext.finite_json({"step_time_s": math.inf})


# --- the hostile sizes into the lower layers, bounded time and memory --------------------
HOSTILE_VALUES = r"""
from memsym import errors
from memsym.units import parse_bytes, parse_count, parse_number
from memsym.values import whole, positive, exact
from memsym.limits import check_limit
from memsym.text import short, printable, finite_json
cases = [
    lambda: parse_count("7" * 4300), lambda: parse_count("1" * 100000),
    lambda: parse_bytes("1e1000"), lambda: parse_bytes("9" * 400 + "GB"),
    lambda: parse_bytes(str(10**309)), lambda: parse_number("1e1000", "--fragmentation", high=1),
    lambda: parse_number("1e-9999", "--efficiency", include_low=False, high=1),
    lambda: whole(10**8, "num_hidden_layers", limit="layers"),
    lambda: whole(10**300, "num_hidden_layers", limit="layers"),
    lambda: whole(10**100000, "num_hidden_layers", limit="layers"),
    lambda: positive(10**100000, "tokens"), lambda: exact(10**100000),
    lambda: check_limit("gpus", 10**18, "--gpus"), lambda: check_limit("global_batch", 10**11),
    lambda: short(10**100000), lambda: printable("\x1b" * 10**6),
    lambda: finite_json({"x": [1e308 * 10]}),
]
for case in cases:
    try:
        out = case()
    except errors.MemsymError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400, str(exc)[:500]
    else:
        assert out is None or len(str(out)) < 400 or isinstance(out, int)
print("ok")
"""


def test_hostile_values_in_bounded_time_and_memory():
    with time_limit(90):
        proc = run_python(HOSTILE_VALUES, seconds=60, memory=2 * GiB)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_finite_json_error_shows_a_hostile_key_escaped():
    # found by tests/test_fuzz.py: a key from a file is data in the error message too
    with pytest.raises(errors.InvalidValueError) as info:
        mtext.finite_json({"a\n\x1b[2Jb": math.inf})
    msg = str(info.value)
    assert msg.startswith("a\\n\\x1b[2Jb would be inf") and "\n" not in msg and "\x1b" not in msg
