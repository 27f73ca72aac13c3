"""One table of options (issue 28): every subcommand's parser, its help and docs/options.md come
from memsym.cli.option_table; the defaults it states are the code's; no option is declared
anywhere else; search and min-gpus take the job's options by the same names."""

from __future__ import annotations

import argparse
import ast
import json
import pathlib

import pytest
import sympy as sp

from memsym.cli import build_parser, main
from memsym.cli import option_table as table
from tools.option_reference import reference_markdown
from source_trees import parsed

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _subparsers():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    out = dict(sub.choices)
    for outer in ("solve", "plot"):          # solve's unknowns and plot's kinds: parsers each
        parser = out.pop(outer)
        inner = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        out.update({f"{outer} {k}": v for k, v in inner.choices.items()})
    return out


def test_the_option_reference_is_current():
    # docs/options.md is generated: `python -m tools.option_reference` rewrites it
    doc = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert doc == reference_markdown() + "\n", "run python -m tools.option_reference"


def test_no_option_is_declared_outside_the_table():
    # every add_argument of memsym/cli is in option_table.py (the top-level --version aside)
    found = []
    for path in sorted((ROOT / "memsym" / "cli").glob("*.py")):
        if path.name == "option_table.py":
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                first = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) \
                    else None
                if first != "--version":
                    found.append(f"{path.name}:{node.lineno} {first}")
    assert found == []


def test_every_parser_is_the_table():
    # each subcommand's options are exactly the table's rows for it, with the table's help
    for name, parser in _subparsers().items():
        command = name.split()[0]
        rows = table.rows(command)
        want = {n for o in rows for n in o.names if not o.positional}
        if name in ("solve dp", "solve gpus"):
            want -= {"--dp", "--data-parallel-size"}        # the unknown is not an option
        if command == "plot":                               # a kind's options only
            from memsym.cli.plot import KIND_HELP

            skip = KIND_HELP[name.split()[1]][2]
            want -= {n for o in rows if o.dest in skip for n in o.names}
        have = {s for a in parser._actions for s in a.option_strings} - {"-h", "--help"}
        assert have == want, name
        helps = {s: a.help for a in parser._actions for s in a.option_strings}
        for o in rows:
            if not o.positional and o.names[0] in have:
                assert helps[o.names[0]] == table.help_text(o, command), (name, o.names[0])


def test_the_stated_defaults_are_the_codes():
    from memsym.hardware import cluster_for
    from memsym.job import DEFAULTS, FRAMEWORKS, RECOMPUTE_METHODS
    from memsym.terms.allowances import ALLOWANCES, METRICS
    from memsym.terms.compute import DEFAULT_EFFICIENCY
    from memsym.terms.schedule import SCHEDULES

    keys = {"workspace": "workspace", "nccl": "nccl", "fragmentation": "fragmentation"}
    checked = 0
    for o in table.OPTIONS:
        if o.source.startswith("memsym.job.DEFAULTS"):
            assert DEFAULTS[o.field] == o.default, o.names
            checked += 1
        elif o.source.startswith("memsym.training.ALLOWANCES"):
            assert ALLOWANCES[keys[o.field]].default == sp.Rational(o.default), o.names
            checked += 1
    assert checked >= 20
    row = {(o.names[0], frozenset(o.commands)): o for o in table.OPTIONS}
    by_name = {}
    for (name, _), o in row.items():
        by_name.setdefault(name, []).append(o)
    # the choices the parser spells itself (building it imports no SymPy) are the code's
    assert tuple(by_name["--recompute-method"][0].choices) == RECOMPUTE_METHODS
    assert set(by_name["--metric"][0].choices) == set(METRICS)
    assert all(tuple(o.choices) == FRAMEWORKS for o in by_name["--framework"])
    assert set(by_name["--schedule"][0].choices) == set(SCHEDULES)
    # the cluster's defaults: 8 GPUs per node, 50 GB/s per GPU between nodes
    clu = cluster_for("h100-80gb")
    gpn = by_name["--gpus-per-node"][0]
    assert gpn.default == clu.gpus_per_node
    assert by_name["--inter-node-bandwidth"][0].default * 10**9 == clu.inter_node_bandwidth
    # memsym time's efficiency: Narayanan et al.'s 52 %, rounded to the 1/2 the code uses
    time_eff = by_name["--mfu"][0]
    assert sp.Rational(time_eff.default) == DEFAULT_EFFICIENCY


def test_every_row_says_what_it_changes_and_the_job_field_exists():
    import dataclasses

    from memsym.job import DEFAULTS
    from memsym.model import Architecture

    arch = {f.name for f in dataclasses.fields(Architecture)}
    extra = {"world_size", "gpu", "capacity", "gpus_per_node", "workspace", "nccl",
             "fragmentation", "account_for_embedding_in_pipeline_split",
             "account_for_loss_in_pipeline_split"}
    for o in table.OPTIONS:
        assert o.effect in table.EFFECTS, o.names
        assert o.help, o.names
        if o.field:
            assert o.field in DEFAULTS or o.field in arch or o.field in extra, o.names


def test_search_takes_the_job_options_by_the_same_names(capsys):
    parsers = _subparsers()
    est = {s for a in parsers["estimate"]._actions for s in a.option_strings}
    for cmd in ("search", "min-gpus"):
        have = {s for a in parsers[cmd]._actions for s in a.option_strings}
        for o in table.OPTIONS:
            if o.search and "estimate" in o.commands:
                assert set(o.names) <= have and set(o.names) <= est, (cmd, o.names)
    # the Megatron-LM spelling and memsym's shorthand are one option in a search too
    code = main(["search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8",
                 "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "1",
                 "--micro-batch-size", "1", "--recompute", "none", "--sharding",
                 "distributed-optimizer", "--seq-length", "4096", "--top", "1", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and rows[0]["layout"]["tp"] == 2 and rows[0]["layout"]["pp"] == 1


def test_search_applies_the_architecture_and_allowance_options(capsys):
    # --num-layers 16 halves Llama 2 7B's 32 layers: the weights of the one layout searched
    # are then the 16-layer model's (counted by hand: 16 x 202,383,360 per layer + embeddings
    # and output 2 x 32000 x 4096 + final norm 4096 = 3,500,281,856 parameters), and
    # --workspace 0 --nccl-buffers 0 --fragmentation 0 leave only states and activations
    base = ["search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8", "--tp", "1",
            "--pp", "1", "--micro-batch-size", "1", "--recompute", "full", "--sharding",
            "distributed-optimizer", "--top", "1", "--json"]
    main(base + ["--num-layers", "16", "--workspace", "0", "--nccl-buffers", "0",
                 "--fragmentation", "0"])
    row = json.loads(capsys.readouterr().out)[0]
    params = 16 * 202_383_360 + 2 * 32000 * 4096 + 4096
    assert row["bytes"]["weights"] == 2 * params   # bf16 weights (distributed optimizer)
    assert row["bytes"]["workspace"] == row["bytes"]["nccl"] == row["bytes"]["fragmentation"] == 0
    main(base)
    full = json.loads(capsys.readouterr().out)[0]
    assert full["bytes"]["weights"] == 2 * 6_738_415_616  # Llama 2 7B (Touvron et al. 2023)


@pytest.mark.parametrize("command", ["search", "min-gpus"])
def test_search_refuses_an_option_it_cannot_honour(capsys, command):
    from memsym.cli import main as cli

    extra = ["--gpus", "8"] if command == "search" else []
    code = cli([command, "llama2-7b", "--gpu", "h100-80gb", *extra, "--world-size", "8"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "--world-size" in err


def test_the_vocabulary_names_what_the_library_defines():
    # memsym.vocabulary spells the names without SymPy; the tables that give them meaning
    # (byte widths, optimizer states, metrics, allowances) define exactly those names
    from memsym import vocabulary as v
    from memsym.terms.allowances import ALLOWANCES, METRICS
    from memsym.terms.model_state import OPTIMIZERS, PRECISIONS

    assert tuple(PRECISIONS) == v.PRECISION_NAMES and tuple(OPTIMIZERS) == v.OPTIMIZER_NAMES
    assert tuple(METRICS) == v.METRIC_NAMES and tuple(ALLOWANCES) == v.ALLOWANCE_KEYS


def test_time_prices_the_same_job_as_estimate(capsys):
    # memsym time with a layout: the tokens take ceil(T / (B s)) steps, each the step time
    # estimate reports for the same job (one job description, one step-time model)
    import math

    job = ["--tp", "2", "--global-batch-size", "64", "--seq-length", "4096",
           "--recompute", "full"]
    assert main(["estimate", "llama2-7b", *job, "--world-size", "16", "--gpu", "h100-80gb",
                 "--json"]) in (0, 1)
    step = json.loads(capsys.readouterr().out)["step_time_s"]
    assert main(["time", "llama2-7b", "--tokens", "2T", "--gpus", "16", *job, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    steps = math.ceil(2 * 10**12 / (64 * 4096))
    assert rep["steps"] == steps and rep["step_time_s"] == step
    assert rep["seconds"] == pytest.approx(steps * step, rel=1e-12)
    assert rep["gpu_hours"] == pytest.approx(steps * step * 16 / 3600, rel=1e-12)


def test_time_takes_every_job_option_the_step_time_reads(capsys):
    # one word on every path: each option estimate says changes the time (effect "time")
    # is a job option of memsym time too (but MODEL, --gpu and --recompute-granularity, which
    # time has its own rows for under the same spellings, and check's --calibration); a job
    # of several of them is priced as estimate prices it
    from memsym.cli.option_rows import OPTIONS, TIME_JOB_OPTIONS

    timed = {o.dest for o in OPTIONS if "estimate" in o.commands and "time" in (o.effect or "")}
    assert timed - TIME_JOB_OPTIONS == {"model", "gpu", "recompute_granularity", "calibration"}
    assert all("time" in o.commands for o in table.rows("time") if o.dest in TIME_JOB_OPTIONS)
    job = ["--tp", "2", "--global-batch-size", "256", "--seq-length", "4096", "--precision",
           "fp8", "--fp8-recipe", "mxfp8", "--recompute", "selective", "--recompute-modules",
           "core_attn", "mlp", "--inter-node-bandwidth", "25"]
    assert main(["estimate", "llama3-8b", *job, "--world-size", "64", "--gpu", "b200",
                 "--json"]) in (0, 1)
    step = json.loads(capsys.readouterr().out)["step_time_s"]
    assert main(["time", "llama3-8b", "--tokens", "1T", "--gpus", "64", "--gpu", "b200", *job,
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == step
    # Eq. 4 (no layout) prices full or no recomputation only
    assert main(["time", "llama3-8b", "--tokens", "1T", "--recompute", "selective"]) == 2
    assert "selective recompute needs a layout" in capsys.readouterr().err


def test_time_of_m_microbatches_is_the_job_of_that_global_batch(capsys):
    # --num-microbatches without --global-batch-size: B = m b d (4 x 2 x 32 = 256), not the
    # assumed 4M-token batch it once contradicted
    runs = []
    for batch in (["--num-microbatches", "4"], ["--global-batch-size", "256"]):
        assert main(["time", "llama3-8b", "--tokens", "1T", "--gpus", "64", "--tp", "2",
                     "--micro-batch-size", "2", *batch, "--json"]) == 0
        runs.append(json.loads(capsys.readouterr().out))
    assert runs[0]["global_batch_size"] == 256
    assert runs[0]["step_time_s"] == runs[1]["step_time_s"] and runs[0]["steps"] == runs[1]["steps"]


def test_time_takes_the_precisions_a_job_takes(capsys):
    # one word on every path: time's --precision accepts estimate's (fp32 and fp4 were
    # refused); Eq. 4 by hand at the H100's fp32 (TF32) datasheet peak, 494.7 TFLOP/s (the
    # catalogue's source), half of it achieved: 8 T N / (G F eta)
    from memsym.cli import UsageError
    from memsym.vocabulary import PRECISION_NAMES

    for name in PRECISION_NAMES + ("fp64",):
        took = []
        for words in (["time", "llama3-8b", "--tokens", "1T"], ["estimate", "llama3-8b"]):
            try:
                took.append(build_parser().parse_args(words + ["--precision", name]).precision)
            except UsageError:
                took.append(None)
        assert took == ([name, name] if name != "fp64" else [None, None])
    n = 8_030_261_248                      # Llama 3 8B's parameters (Meta's model card: 8.03B)
    assert main(["time", "llama3-8b", "--tokens", "1T", "--gpus", "64", "--precision", "fp32",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["seconds"] == pytest.approx(8 * 10**12 * n / (64 * 494.7e12 * 0.5), rel=1e-12)
    # a GPU without the peak: one line
    assert main(["time", "llama3-8b", "--tokens", "1T", "--precision", "fp4"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "no fp4 tensor-core peak" in err


@pytest.mark.parametrize("argv, said", [
    (["7B", "--tokens", "1T", "--tp", "2"], "parameter count"),
    (["llama2-7b", "--tokens", "1T", "--tp", "2", "--mfu", "0.5"], "--mfu"),
    (["llama2-7b", "--tokens", "1T", "--efficiency", "0.5"], "--mfu for Eq. 4"),
])
def test_time_refuses_what_a_layout_cannot_use(capsys, argv, said):
    code = main(["time", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and said in err


def test_time_with_a_layout_takes_the_jobs_default_recompute(capsys):
    # --recompute absent means the same on both commands with a layout: the job's default
    # (no recomputation, memsym.job.DEFAULTS), not Eq. 4's printed full recomputation
    job = ["--tp", "2", "--global-batch-size", "64", "--seq-length", "4096"]
    assert main(["estimate", "llama2-7b", *job, "--world-size", "16", "--gpu", "h100-80gb",
                 "--json"]) in (0, 1)
    step = json.loads(capsys.readouterr().out)["step_time_s"]
    assert main(["time", "llama2-7b", "--tokens", "1T", "--gpus", "16", *job, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == step


#: Each new job field: (MODEL, base options and their job() keywords, the field's job()
#: keywords, memsym's own options for it or None, Megatron-LM's flags for it).
_FIELD_SPELLINGS = {
    "fp8_recipe": ("llama3-8b", ["--tp", "2", "--world-size", "16"], dict(t=2, world_size=16),
                   dict(precision="fp8", fp8_recipe="mxfp8"),
                   ["--precision", "fp8", "--fp8-recipe", "mxfp8"],
                   ["--bf16", "--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"]),
    "precision": ("llama3-8b", ["--tp", "2", "--world-size", "16"], dict(t=2, world_size=16),
                  dict(precision="fp4"), ["--precision", "fp4"],
                  ["--bf16", "--fp4-format", "e2m1"]),
    "moe_dispatcher": ("qwen3-30b-a3b", ["--ep", "4", "--world-size", "8"],
                       dict(e=4, world_size=8), dict(moe_dispatcher="deepep"),
                       ["--moe-dispatcher", "deepep"],
                       ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend",
                        "deepep"]),
    "megatron_fsdp": ("llama3-8b", ["--world-size", "16"], dict(world_size=16),
                      dict(sharding="fsdp", megatron_fsdp="optim_grads_params",
                           fsdp_double_buffer=True),
                      None,   # memsym's --sharding fsdp is FSDP2; Megatron's flags say this
                      ["--bf16", "--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                       "optim_grads_params", "--fsdp-double-buffer"]),
}


@pytest.mark.parametrize("name", sorted(_FIELD_SPELLINGS))
def test_a_field_is_one_job_by_its_api_keyword_and_its_options(capsys, name):
    """The Python API's keyword (the job-record field's name), memsym's option of the same
    name and Megatron-LM's flags build one job: the report names the field as the record
    does, with the same value, and every spelling gives the same per-stage bytes."""
    from memsym.job import job
    from memsym.training.estimate import job_memory

    model, base, base_kw, kw, own, megatron = _FIELD_SPELLINGS[name]
    est = job_memory(job(model, gpu="gb200", **base_kw, **kw))
    for words in (own, megatron):
        if words is None:
            continue
        code = main(["estimate", model, "--gpu", "gb200", *base, *words, "--json"])
        out, err = capsys.readouterr()
        assert code in (0, 1), (words, err)
        rep = json.loads(out)
        for field, value in kw.items():
            assert rep["training"][field] == value, (words, field)
        assert est.stage == rep["stage"]["index"], words
        assert [float(x) for x in est.stage_bytes] == \
            pytest.approx(rep["stage"]["stage_totals"], abs=1), words
    # the option's name is the field's (the table's row says so)
    if own is not None:
        row = next(o for o in table.OPTIONS if own[-2] in o.names)
        assert row.field == own[-2].lstrip("-").replace("-", "_") or row.field == name
