"""The command line's contract under random argument lists and config files (issue 15).

Whatever the arguments: exit 0 with output, 1 with "nothing fits", or 2 with one line on
stderr; never a traceback, never partial output on a failure, never a non-finite number in
JSON, and within a bounded time (Hypothesis' deadline per example).
"""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, given, settings, strategies as st

from memsym.cli import main

MODELS = ["llama2-7b", "mixtral-8x7b", "gpt3-175b", "deepseek-v3", "nosuchmodel", "", "-"]
NUMBERS = ["0", "1", "2", "3", "7", "8", "64", "4096", "100000", "1e30", "-1", "1.5", "nan", "inf",
           "1e1000", "9" * 60, "0x10", "٨", "8GB", "80GiB", "1/0", "__import__('os')", "\x1b[2J"]
OPTIONS = ["--tp", "--pp", "--dp", "--cp", "--ep", "--vpp", "--seq-length", "--micro-batch-size",
           "--global-batch-size", "--num-microbatches", "--world-size", "--gpu-memory",
           "--fragmentation", "--workspace", "--hidden-dropout", "--attention-dropout",
           "--num-layers", "--hidden-size", "--num-attention-heads", "--vocab-size",
           "--max-position-embeddings", "--moe-expert-capacity-factor", "--params",
           "--recompute-granularity", "--sharding", "--convention", "--precision", "--gpu",
           "--tensor-model-parallel-size", "--lr", "--bf16", "--fp16", "--sequence-parallel",
           "--use-distributed-optimizer", "--no-flash-attn", "--json", "--tensor-model-paralel-size"]
WORDS = NUMBERS + ["selective", "full", "zero3", "ddp", "framework", "seed000", "megatron-lm",
                   "fp8", "h100-80gb", "a100-80gb", "x" * 200]

SET = settings(max_examples=120, deadline=6000, derandomize=True, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def contract(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code in (0, 1, 2), (argv, code)
    assert "Traceback" not in err and "Traceback" not in out, (argv, err)
    if code == 0:
        assert out, argv
        if "--json" in argv:
            # strict JSON: Python's json accepts NaN/Infinity, so parse them as errors
            json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        for token in ("inf", "nan"):
            assert f" {token} " not in out.lower(), (argv, out[:200])
    else:
        assert out == "", (argv, out[:200])
        assert err.count("\n") == 1 and err.endswith("\n"), (argv, err)
        assert "\x1b" not in err, (argv, err)


@SET
@given(command=st.sampled_from(["estimate", "time", "solve dp", "solve micro-batch-size"]),
       model=st.sampled_from(MODELS), pairs=st.lists(
           st.tuples(st.sampled_from(OPTIONS), st.sampled_from(WORDS)), max_size=5))
def test_random_argument_lists_keep_the_contract(capsys, command, model, pairs):
    argv = command.split()
    if command == "time":
        argv += [model or "7B", "--tokens", "1T"]
    elif model:
        argv.append(model)
    for opt, val in pairs:
        argv += [opt] if opt in ("--bf16", "--fp16", "--sequence-parallel",
                                 "--use-distributed-optimizer", "--no-flash-attn", "--json") \
            else [opt, val]
    contract(capsys, argv)


CONFIG_KEYS = ["model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "intermediate_size", "vocab_size", "max_position_embeddings",
               "num_local_experts", "num_experts_per_tok", "tie_word_embeddings", "_name_or_path",
               "head_dim"]
CONFIG_VALUES = st.one_of(
    st.integers(-2, 10**12), st.sampled_from([10**8, 10**10, 10**300, 2**31 + 1]),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.sampled_from(["llama", "mixtral", "qwen3", "gemma", "nope", "x\n\x1b[31mfits"]),
    st.lists(st.integers(0, 2), max_size=3))


@SET
@given(cfg=st.dictionaries(st.sampled_from(CONFIG_KEYS), CONFIG_VALUES, max_size=10),
       base=st.booleans())
def test_random_config_files_keep_the_contract(capsys, tmp_path_factory, cfg, base):
    data = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100} if base else {}
    data.update(cfg)
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    try:
        text = json.dumps(data, allow_nan=True)
    except (TypeError, ValueError):
        return
    path.write_text(text, encoding="utf-8")
    contract(capsys, ["estimate", str(path), "--seq-length", "64", "--json"])


def test_the_contract_holds_for_the_listed_edge_inputs(capsys):
    # issue 15's list, each one line and the right exit code (no hang: in-process, bounded)
    for argv in (["estimate", "llama2-7b", "--fragmentation", "1e1000"],
                 ["estimate", "llama2-7b", "--params", "70B"],
                 ["estimate", "llama2-7b", "--hidden-dropout", "2"],
                 ["estimate", "gpt3-175b", "--seq-length", "100000"],
                 ["time", "7e9", "--tokens", "1e12", "--tflops", "1e-300"],
                 ["time", "7e9", "--tokens", "1e12", "--mfu", "1e-320"],
                 ["time", "7e9", "--tokens", "1e12", "--price-per-gpu-hour", "1e308", "--json"],
                 ["solve", "dp", "--params", "175B", "--gpu-memory", "80GB"]):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code in (1, 2) and out == "" and err.count("\n") == 1, (argv, code, err)
    assert math.isfinite(1.0)


def test_search_edges_one_line_exit_2(capsys):
    # issue 15: sizes past the limits and impossible restrictions are bad input (exit 2, the
    # rule in words), not tracebacks, hangs or "nothing fits"
    for argv, needle in (
            (["search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "1000000000000000000"], "2^40"),
            (["search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8", "--micro-batch-size",
              "1" + "0" * 30], "limit"),
            (["search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8", "--cp", "2",
              "--seq-length", "4095"], "cp-seq"),
            (["search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8", "--ep", "2"], "ep-experts"),
            (["min-gpus", "llama2-7b", "--gpu", "h100-80gb", "--global-batch-size",
              "1000000000000000000"], "limit")):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, (argv, err)


def test_search_flags_must_be_booleans():
    import pytest

    from memsym.errors import InvalidValueError
    from memsym.search import search

    for key in ("flash_attention", "dropout"):
        with pytest.raises(InvalidValueError, match=key):
            search("llama2-7b", "h100-80gb", 8, **{key: "false"})
