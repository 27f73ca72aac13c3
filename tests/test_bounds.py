"""Issue 34: hostile input on the new surfaces ends in one clear line, in bounded time and memory.

Each reproduction of the issue is run as it was reported (the command line, or the API call)
and must end with memsym's own exception (API) or one line on stderr, exit status 2 and nothing
on stdout (CLI), within the issue's bound of 20 s and 3 GB (``bounded.run_python`` for the
cases that blew the interpreter's stack or memory before, :func:`bounded.time_limit` in-process).
The limits checked are the documented rows and constants of :mod:`memsym.limits`.
"""

from __future__ import annotations

import io
import json
import math
import random
import re
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bounded import run_python, time_limit
from memsym import errors, limits
from memsym.readers import read_deepspeed_config, read_torchtitan_toml
from memsym.readers._values import check_text
from in_process import run as cli


def refused_one_line(capsys, *argv, said=()):
    """The command is refused as bad input: exit 2, nothing on stdout, one line on stderr."""
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == "", (argv, code, out[:200], err[:300])
    assert err.count("\n") == 1 and "Traceback" not in err, err[:500]
    for frag in said:
        assert frag in err, (frag, err)
    return err


def api_refused(fn, *said):
    with pytest.raises(errors.MemsymError) as info:
        fn()
    msg = str(info.value)
    assert isinstance(info.value, ValueError) and "\n" not in msg and len(msg) < 400, msg
    for frag in said:
        assert frag in msg, (frag, msg)
    return msg


HUGE_INT = "9" * 5000
DEEP_JSON = "[" * 100_000 + "]" * 100_000


# ------------------------------------------------------------------------------------------------
# 1. config readers: digits, nesting, values, dotted keys, file size, before parsing
# ------------------------------------------------------------------------------------------------
def _named_llama(folder, name):
    """``folder`` made, holding the config.json of a two-layer Llama (h 256, 4 heads, f 512,
    V 1000) whose ``_name_or_path`` is ``name``."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "_name_or_path": name, "hidden_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512,
        "vocab_size": 1000, "max_position_embeddings": 4096}))
    return folder


def test_the_structure_limits_are_documented_constants():
    # the values the docstrings of memsym.limits give (each far above real configs)
    assert limits.MAX_NESTING == 64 and limits.MAX_KEY_PARTS == 64
    assert limits.MAX_ELEMENTS == 2**16 and limits.MAX_NUMBER_CHARS == limits.MAX_DIGITS == 60
    assert limits.MAX_INPUT_BYTES == 2**20 and limits.MAX_CONFIG_JSON_BYTES == 2**22


@pytest.mark.parametrize("syntax", ["json", "toml"])
def test_check_text_refuses_one_past_each_limit_and_accepts_the_limit(syntax):
    n = limits.MAX_NESTING
    check_text("[" * n + "]" * n, "x", syntax)
    with pytest.raises(errors.InvalidValueError, match="nests deeper than 64"):
        check_text("[" * (n + 1) + "]" * (n + 1), "x", syntax)
    check_text("1" * limits.MAX_NUMBER_CHARS, "x", syntax)
    with pytest.raises(errors.InvalidValueError, match="a number of 61 characters"):
        check_text("1" * 61, "x", syntax)
    check_text("[" + "0," * limits.MAX_ELEMENTS + "]", "x", syntax)
    with pytest.raises(errors.InvalidValueError, match="more than 65536 values"):
        check_text("[" + "0," * (limits.MAX_ELEMENTS + 1) + "]", "x", syntax)
    # inside strings (and TOML comments) nothing counts
    check_text('"' + "[" * 1000 + "9" * 1000 + '"', "x", syntax)
    if syntax == "toml":
        check_text("# " + "[" * 1000 + "\n" + "'''" + "{" * 1000 + "'''", "x", syntax)
        check_text("a" + ".a" * limits.MAX_KEY_PARTS + " = 1", "x", syntax)
        with pytest.raises(errors.InvalidValueError, match="more than 64 dotted parts"):
            check_text("a" + ".a" * (limits.MAX_KEY_PARTS + 1) + " = 1", "x", syntax)


def test_deepspeed_api_huge_int_deep_nesting_nan(tmp_path):
    for text, said in ((f'{{"train_batch_size": {HUGE_INT}}}', "a number of 5000 characters"),
                       (DEEP_JSON, "nests deeper than 64 levels"),
                       ('{"a": ' + DEEP_JSON + "}", "nests deeper than 64 levels"),
                       ('{"train_batch_size": NaN}', "NaN is not a JSON number"),
                       ('{"train_batch_size": -Infinity}', "-Infinity is not a JSON number")):
        with time_limit(20):
            api_refused(lambda: read_deepspeed_config(text, 8), "DeepSpeed config", said)
            path = tmp_path / "ds.json"
            path.write_text(text)
            api_refused(lambda: read_deepspeed_config(path, 8), said)
    # a dict given to the API: a 5000-digit int is described, not converted to text
    api_refused(lambda: read_deepspeed_config({"train_batch_size": 10**5000}, 8),
                "train_batch_size", "(5001 digits)")


def test_torchtitan_api_huge_int_deep_nesting_dotted_keys(tmp_path):
    cases = ((f"[training]\nseq_len = {HUGE_INT}\n", "a number of 5000 characters"),
             ("[training]\nseq_len = 0x" + "F" * 5000 + "\n", "a number of 5002 characters"),
             ("a = " + DEEP_JSON + "\n", "nests deeper than 64 levels"),
             ("a = " + "{b = " * 1000 + "1" + "}" * 1000 + "\n", "nests deeper than 64 levels"),
             # 10^5 dotted parts: tomllib alone ran out of memory (quadratic in the parts)
             ("a" + ".a" * 100_000 + " = 1\n", "more than 64 dotted parts"),
             ("[" + ".".join(["a"] * 100_000) + "]\n", "more than 64 dotted parts"))
    for text, said in cases:
        with time_limit(20):
            api_refused(lambda: read_torchtitan_toml(text, 8), "torchtitan TOML", said)
            path = tmp_path / "job.toml"
            path.write_text(text)
            api_refused(lambda: read_torchtitan_toml(path, 8), said)


def test_the_readers_cli_in_bounded_time_and_memory(tmp_path):
    # the issue's commands in a fresh interpreter under 3 GB and 20 s (before: tracebacks)
    files = {"ds_int.json": f'{{"train_batch_size": {HUGE_INT}}}', "ds_deep.json": DEEP_JSON,
             "job_int.toml": f"[training]\nseq_len = {HUGE_INT}\n",
             "job_deep.toml": "a = " + DEEP_JSON + "\n",
             "job_keys.toml": "a" + ".a" * 100_000 + " = 1\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        flag = "--deepspeed-config" if name.endswith(".json") else "--torchtitan-config"
        res = run_python(None, seconds=20, args=("estimate", "llama2-7b", flag,
                                                  str(tmp_path / name), "--world-size", "8"))
        assert res.returncode == 2 and res.stdout == "", (name, res.stderr[-500:])
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr[-500:]


def test_config_json_huge_int_and_deep_nesting(tmp_path, capsys):
    from memsym.model import from_hf_config

    for name, text, said in (("int", '{"model_type": "llama", "num_hidden_layers": ' + HUGE_INT
                              + "}", "a number of 5000 characters"),
                             ("deep", '{"model_type": "llama", "x": ' + DEEP_JSON + "}",
                              "nests deeper than 64 levels")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(text)
        api_refused(lambda: from_hf_config(tmp_path / name), said)
        refused_one_line(capsys, "estimate", str(tmp_path / name), "--seq-length", "128",
                         said=(said,))


# ------------------------------------------------------------------------------------------------
# 2. a config.json's layers: bounded for the per-layer work of estimate and search
# ------------------------------------------------------------------------------------------------
def _qwen2_moe(tmp_path, layers, dense_only=0, seed=34):
    rng = random.Random(seed)
    cfg = {"model_type": "qwen2_moe", "hidden_size": 1024, "num_hidden_layers": layers,
           "num_attention_heads": 16, "intermediate_size": 2816, "vocab_size": 32000,
           "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
           "max_position_embeddings": 4096,
           "mlp_only_layers": sorted(rng.sample(range(layers), dense_only))}
    folder = tmp_path / f"qwen2_moe_{layers}_{dense_only}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


def test_config_layers_limit_is_a_documented_row():
    lim = limits.LIMITS["config_layers"]
    # generous: above the deepest published LLM (Llama 3 405B: 126 layers, arXiv:2407.21783)
    assert lim.maximum == 2**8 and lim.maximum >= 2 * 126 and lim.shown == "2^8"
    assert lim.maximum < limits.LIMITS["layers"].maximum


def test_200000_layers_with_mlp_only_layers_refused_before_any_work(tmp_path, capsys):
    # issue 34: over 180 s in estimate --pp 10000, over 180 s and 1.36 GB in search --gpus 4096
    path = _qwen2_moe(tmp_path, 200_000, dense_only=1000)
    with time_limit(20):
        refused_one_line(capsys, "estimate", path, "--pp", "10000", "--seq-length", "1024",
                         said=("num_hidden_layers", "2^8 layers", "config_layers"))
        refused_one_line(capsys, "search", path, "--gpu", "h100-80gb", "--gpus", "4096",
                         said=("num_hidden_layers", "2^8 layers"))


def test_config_layers_at_the_limit_read_and_one_above_refused(tmp_path):
    from memsym.model import from_hf_config, moe_layer_pattern

    top = limits.LIMITS["config_layers"].maximum
    arch = from_hf_config(_qwen2_moe(tmp_path, top, dense_only=top // 2))
    pattern = moe_layer_pattern(arch)
    assert len(pattern) == top and sum(pattern) == top - top // 2   # mlp_only_layers are dense
    api_refused(lambda: from_hf_config(_qwen2_moe(tmp_path, top + 1)), "2^8 layers")
    # a layer list longer than the limit is refused as well (before a pattern is built)
    path = _qwen2_moe(tmp_path, 8)
    cfg = json.loads((tmp_path / "qwen2_moe_8_0" / "config.json").read_text())
    cfg["mlp_only_layers"] = list(range(top + 1))
    (tmp_path / "qwen2_moe_8_0" / "config.json").write_text(json.dumps(cfg))
    api_refused(lambda: from_hf_config(path), "mlp_only_layers", f"at most {top}")


# ------------------------------------------------------------------------------------------------
# 3. every user text reaches matplotlib literally
# ------------------------------------------------------------------------------------------------
def _drawn_literally(fig, *texts):
    from matplotlib.text import Text

    fig.savefig(io.BytesIO(), format="png")          # draws every text (mathtext raised here)
    shown = [t for t in fig.findobj(Text) if t.get_text()]
    for want in texts:
        hits = [t for t in shown if want in t._preprocess_math(t.get_text())[0]]
        assert hits, (want, [t.get_text() for t in shown])
        assert all(t._preprocess_math(t.get_text())[1] is False for t in hits)


def test_plot_text_escapes_every_dollar():
    from memsym.plotting import MAX_TEXT, plot_text

    assert plot_text("$") == "\\$" and plot_text("a$b$c") == "a\\$b\\$c"
    assert plot_text("\\$") == "\\\\$"                      # drawn as typed: backslash, dollar
    assert plot_text("a\x1bb\nc") == "a\\x1bb\nc"            # a newline stays a line break
    assert len(plot_text("x" * 10**5)) == MAX_TEXT + 3


def test_mathtext_titles_and_names_are_drawn_as_typed():
    from memsym import plotting
    from memsym.search import search

    title, name = r"$\frac{$", "a$^{$b"
    fig = plotting.breakdown({name: {"weights": 14e9}}, capacity=80e9, title=title)
    _drawn_literally(fig, title, name)
    fig = plotting.breakdown_bars({name: {r"\sqrt{$x$": 3e9}}, capacity=80e9, title=title)
    _drawn_literally(fig, title, name, r"\sqrt{$x$")
    res = search("llama2-7b", "h100-80gb", 8, seq_length=2048, recompute=["full"],
                 sharding=["zero3"])
    _drawn_literally(plotting.feasibility(res, title=title), title)


def test_plot_cli_with_a_mathtext_title_and_model_name(tmp_path, capsys):
    # issue 34: both gave ParseSyntaxException tracebacks from matplotlib's mathtext
    out = tmp_path / "t.png"
    code, stdout, err = cli(capsys, "plot", "breakdown", "llama2-7b", "--seq-length", "4096",
                            "--title", r"$\frac{$", "-o", str(out))
    assert code == 0 and err == "" and out.stat().st_size > 0
    folder = _named_llama(tmp_path / "a$^{$b", "a$^{$b")
    for kind in ("breakdown", "feasibility"):
        out = tmp_path / f"{kind}.png"
        code, stdout, err = cli(capsys, "plot", kind, str(folder), "--seq-length", "4096",
                                "--gpu", "h100-80gb", "--world-size", "8", "-o", str(out))
        assert code == 0 and err == "" and out.stat().st_size > 0, err


# ------------------------------------------------------------------------------------------------
# 4, 5. --top, --efficiency, bandwidths, --tflops, --price: documented ranges
# ------------------------------------------------------------------------------------------------
def test_top_is_bounded(capsys):
    from memsym.cli.options import top_count

    assert limits.MAX_TOP == limits.LIMITS["top"].maximum == 1000 and top_count("1000") == 1000
    with time_limit(10):   # issue 34: --top 1000000 ran 84 s
        refused_one_line(capsys, "search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8",
                         "--top", "1000000", said=("--top", "1 <= K <= 1000"))
    for bad in ("0", "1001", "-1", "1e3", "10" * 40, "٨"):
        refused_one_line(capsys, "search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8",
                         "--top", bad, said=("--top",))


@pytest.mark.parametrize("argv", [
    ["estimate", "llama2-7b", "--seq-length", "4096", "--gpu", "h100-80gb",
     "--efficiency", "1e-310"],
    ["estimate", "llama2-7b", "--seq-length", "4096", "--gpu", "h100-80gb",
     "--efficiency", "0.009"],
    ["estimate", "llama2-7b", "--seq-length", "4096", "--gpu", "h100-80gb",
     "--inter-node-bandwidth", "1e-300"],
    ["estimate", "llama2-7b", "--seq-length", "4096", "--gpu", "h100-80gb",
     "--intra-node-bandwidth", "1e300"],
    ["search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8", "--efficiency", "1e-310"],
    ["search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8", "--efficiency", "nan"],
    ["time", "7B", "--tokens", "1T", "--tflops", "1e-300"],
    ["time", "7B", "--tokens", "1T", "--mfu", "1e-310"],
    ["time", "7B", "--tokens", "1T", "--price-per-gpu-hour", "1e308"],
])
def test_out_of_range_numbers_are_refused_in_one_line(capsys, argv):
    refused_one_line(capsys, *argv, said=(argv[-2],))


def test_the_lowest_efficiency_gives_finite_times_without_numpy_warnings(capsys):
    # issue 34: --efficiency 1e-310 printed "step time: inf s", inf and nan in search tables,
    # and numpy's overflow RuntimeWarnings on stderr; at the range's ends all is finite
    from memsym.search import search

    lo, hi = limits.EFFICIENCY_RANGE
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # any RuntimeWarning fails the test
        for eta in (lo, hi):
            res = search("llama2-7b", "h100-80gb", 8, seq_length=2048, global_batch_size=64,
                         efficiency=eta)
            times = res.columns["step_time"]
            assert len(times) and all(math.isfinite(float(x)) and x > 0 for x in times)
    code, out, err = cli(capsys, "estimate", "llama2-7b", "--seq-length", "4096", "--gpu",
                         "h100-80gb", "--efficiency", str(lo), "--inter-node-bandwidth",
                         str(limits.BANDWIDTH_RANGE[0]))
    # (exit 1: a 7B model with d = 1 does not fit an H100; the report is printed all the same)
    assert code in (0, 1) and err == "" and "inf" not in out.split("step time:")[1].split("\n")[0]
    code, out, err = cli(capsys, "search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8",
                         "--efficiency", str(lo), "--top", "3")
    assert code == 0 and "Warning" not in err and " inf" not in out and " nan" not in out


def test_a_cluster_bandwidth_outside_the_range_is_refused():
    # the API's way to the same inf: a cluster whose link moves 1e-300 bytes/s
    from memsym.hardware import cluster_for

    dgx = cluster_for("h100-80gb")
    lo, hi = (x * 10**9 for x in limits.BANDWIDTH_RANGE)
    assert dgx.with_(inter_node_bandwidth=lo).inter_node_bandwidth == lo
    for bad in (1e-300, lo / 2, hi * 2, math.inf, math.nan, True):
        api_refused(lambda: dgx.with_(inter_node_bandwidth=bad), "inter_node_bandwidth",
                    "0.1 to 1e5 GB/s")


def test_search_api_refuses_an_efficiency_outside_the_range():
    from memsym.search import search

    for bad in (1e-310, 0.009, 1.01):
        api_refused(lambda: search("llama2-7b", "h100-80gb", 8, efficiency=bad), "efficiency",
                    "0.01 <= efficiency <= 1")


# ------------------------------------------------------------------------------------------------
# 6. validation before the work
# ------------------------------------------------------------------------------------------------
ISSUE_6 = ["estimate", "--num-layers", "1000000", "--hidden-size", "1024",
           "--num-attention-heads", "16", "--seq-length", "1024",
           "--max-position-embeddings", "1024", "--vocab-size", "50257",
           "--micro-batch-size", "1", "--global-batch-size", "1000000"]


def test_the_issue_6_job_is_answered_quickly(capsys):
    # 1000 stages of 1000 layers: the per-stage parameters took 51 s (the MoE pattern of 10^6
    # layers rebuilt, set and summed several times per stage) before the schedule check.
    # Interleaved, its 4 x 10^9 passes are refused before any simulating
    with time_limit(20):
        refused_one_line(capsys, *ISSUE_6, "--pp", "1000", "--world-size", "1000", "--gpu",
                         "h100-80gb", "--num-virtual-stages-per-pipeline-rank", "2",
                         said=("passes exceeds",))
    # plain 1F1B is priced in closed form (memsym.timing.one_f_one_b, no simulation): an
    # honest "does not fit" (exit 1), 1000 layers of h 1024 being 12.6 GB of weights alone
    with time_limit(40):
        code, out, err = cli(capsys, *ISSUE_6, "--pp", "1000", "--world-size", "1000",
                             "--gpu", "h100-80gb")
    assert code == 1 and out.startswith("does NOT fit"), err
    assert not re.search(r"\b(nan|inf)\b", out, re.IGNORECASE)
    # more stages than the documented limit are refused before anything is built
    assert limits.LIMITS["stages"].maximum == 2**12
    with time_limit(5):
        refused_one_line(capsys, *ISSUE_6, "--pp", "100000", "--world-size", "100000",
                         "--gpu", "h100-80gb", said=("p = 100000", "2^12 stages"))


def test_the_pattern_helpers_agree_with_the_pattern():
    from memsym.model import preset, resolve
    from memsym.model.layer_patterns import layer_kinds, moe_layer_count, moe_layer_pattern

    # DeepSeek-V3: 3 dense layers then 58 MoE (config.json first_k_dense_replace = 3, 61 layers)
    want = {"deepseek-v3": (61, 58), "mixtral-8x7b": (32, 32), "llama2-7b": (32, 0)}
    for name, (layers, moe) in want.items():
        arch = resolve(preset(name))           # what a job carries
        pattern = moe_layer_pattern(arch)
        assert len(pattern) == layers and sum(pattern) == moe == moe_layer_count(arch)
        assert layer_kinds(arch) == set(pattern)
        assert moe_layer_pattern(arch) is pattern           # computed once, not per stage


# ------------------------------------------------------------------------------------------------
# Hypothesis: random trees and values never escape as anything but memsym's one-line errors.
# Budgets: max_examples 40-60 per test, deadline 3-5 s per example, derandomized, no database
# (well under 20 s per test on the shared CI cores).
# ------------------------------------------------------------------------------------------------
FUZZ = settings(max_examples=40, deadline=5000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

_leaves = st.one_of(st.integers(-10**80, 10**80), st.booleans(), st.none(),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                    st.just("auto"))
_trees = st.recursive(_leaves, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.sampled_from(
        ["train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
         "zero_optimization", "stage", "bf16", "enabled", "x"]), kids, max_size=4)),
    max_leaves=20)


def _nest(value, depth, kind):
    for _ in range(depth):
        value = [value] if kind == "list" else {"zero_optimization": value}
    return value


@FUZZ
@given(tree=_trees, depth=st.integers(0, 200), kind=st.sampled_from(["list", "dict"]),
       digits=st.integers(1, 6000))
def test_fuzz_deepspeed_json(tree, depth, kind, digits):
    text = json.dumps({"train_batch_size": 8, "x": _nest(tree, depth, kind)})
    text = text.replace('"train_batch_size": 8', '"train_batch_size": ' + "7" * digits, 1)
    try:
        read_deepspeed_config(text, 8)
    except errors.MemsymError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400
    else:   # accepted only within the documented limits (the object itself is one level)
        assert depth + 1 <= limits.MAX_NESTING and digits <= limits.MAX_NUMBER_CHARS


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) and "e" not in repr(value) else "1.5"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"k{i} = {_toml_value(v)}" for i, v in enumerate(value.values())) + "}"
    return '"none"'


@FUZZ
@given(tree=_trees, depth=st.integers(0, 200), parts=st.integers(1, 300),
       digits=st.integers(1, 6000))
def test_fuzz_torchtitan_toml(tree, depth, parts, digits):
    text = ("[training]\nseq_len = " + "7" * digits + "\n[parallelism]\n"
            + "a" + ".b" * (parts - 1) + " = " + _toml_value(_nest(tree, depth, "list")) + "\n")
    try:
        read_torchtitan_toml(text, 8)
    except errors.MemsymError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400
    else:
        assert digits <= limits.MAX_NUMBER_CHARS and depth <= limits.MAX_NESTING


@settings(max_examples=60, deadline=3000, derandomize=True, database=None)
@given(text=st.text(alphabet=st.sampled_from('[]{},:="\'#.\n 0123456789abx\\'), max_size=400))
def test_fuzz_check_text_never_fails_otherwise(text):
    for syntax in ("json", "toml"):
        try:
            check_text(text, "x", syntax)
        except errors.InvalidValueError as exc:
            assert "\n" not in str(exc)


@settings(max_examples=60, deadline=3000, derandomize=True, database=None)
@given(text=st.one_of(st.text(max_size=30), st.floats().map(repr),
                      st.integers(-10**9, 10**9).map(str)))
def test_fuzz_numeric_options_stay_in_their_ranges(text):
    import argparse

    from memsym.cli.options import bandwidth, efficiency, price, tflops, top_count

    for parse, (lo, hi) in ((efficiency, limits.EFFICIENCY_RANGE),
                            (bandwidth, limits.BANDWIDTH_RANGE),
                            (tflops, limits.TFLOPS_RANGE), (price, limits.PRICE_RANGE),
                            (top_count, (1, limits.MAX_TOP))):
        try:
            value = parse(text)
        except argparse.ArgumentTypeError as exc:
            assert "\n" not in str(exc)
        else:
            assert math.isfinite(value) and lo <= value <= hi


def test_a_model_name_with_a_backslash_is_estimated(tmp_path, capsys):
    # found with issue 34's names: resolve() escaped the name again on every copy of a resolved
    # model, so a config.json named C:\models\llama was refused by every estimate
    from memsym.model import from_hf_config, resolve
    from memsym.training import Layout, Training, training_memory

    folder = _named_llama(tmp_path / "bs", "C:\\models\\llama")
    arch = from_hf_config(folder)
    assert resolve(arch).name == arch.name
    training_memory(arch, Layout(p=2), Training(seq_length=1024))
    code, out, err = cli(capsys, "estimate", str(folder), "--seq-length", "1024")
    assert code == 0 and err == "" and "models" in out
    # a hidden character is still shown escaped, and stays so on every copy
    import dataclasses

    from memsym.model import preset

    hidden = resolve(dataclasses.replace(preset("llama2-7b"), name="a\x1b[2Jb"))
    assert hidden.name == "a\\x1b[2Jb" and resolve(dataclasses.replace(hidden)).name == hidden.name
