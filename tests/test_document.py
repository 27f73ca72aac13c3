"""The whole-job design document (issue 16, part 2): compiled by pdflatex on A4 and Letter,
nothing overfull, every input stated, every source printed as a full reference."""

from __future__ import annotations

import re

import pytest

from memsym.analysis import smallest
from memsym.document import job_document, job_markdown, job_parts, job_snippet
from memsym.printing import document
from memsym.symbols import d, registry
from memsym.training import Layout, Training, training_memory

from tex import compile_tex, needs_tex

JOBS = {
    "llama3-70b": (Layout(t=8, p=4, d=4), Training(seq_length=8192)),
    "mixtral-8x7b": (Layout(t=2, d=8, e=8, sequence_parallel=True), Training(seq_length=4096)),
    "deepseek-v3": (Layout(t=2, p=16, d=32, e=64, t_e=1, sequence_parallel=True,
                           first_stage_layers=3, last_stage_layers=2),
                    Training(seq_length=4096, recompute="full", flash_attention=True)),
    "gpt3-175b": (Layout(t=8, p=8, d=8, v=2), Training(seq_length=2048, global_batch_size=1536)),
}


def _job(name):
    lay, tr = JOBS[name]
    return training_memory(name, lay, tr), dict(arch=name, layout=lay, training=tr)


def _overfull(log: str) -> list[float]:
    return [float(x) for x in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\)", log)]


@needs_tex
@pytest.mark.parametrize("paper", ["a4", "letter"])
@pytest.mark.parametrize("name", list(JOBS))
def test_document_compiles_and_fits_the_page(name, paper):
    est, kw = _job(name)
    log = compile_tex(job_document(est, paper=paper, **kw))
    assert all(w <= 3 for w in _overfull(log)), _overfull(log)


def test_named_stage_counts_reproduce_the_estimate():
    # the document's expressions in N_tp, N_rep, N_exp, M_alloc give the estimate's bytes
    for name in JOBS:
        est, kw = _job(name)
        parts = job_parts(est, **kw)
        assert parts.named_counts
        bd = est.breakdown()
        for shown in parts.terms:
            assert shown.value == bd[shown.key], (name, shown.key)
        assert parts.total == est.bytes_total


def test_stage_counts_against_hand_count():
    # Llama-3-70B, t = 8, p = 4, stage 0: 20 layers + the padded embedding (V = 128256 padded
    # to a multiple of 128 t = 1024 -> 129024). Per layer (by hand, h = 8192, GQA 64/8 heads of
    # 128, SwiGLU f = 28672, RMSNorm): TP-sharded q,o 2*8192^2, k,v 2*8192*1024, MLP 3*8192*28672;
    # replicated: two norms 2*8192.
    est, kw = _job("llama3-70b")
    vals = job_parts(est, **kw).values
    layer_tp = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672
    byname = {getattr(k, "name", k): v for k, v in vals.items()}
    assert byname["N_tp"] == 20 * layer_tp + 129024 * 8192
    assert byname["N_rep"] == 20 * 2 * 8192


@pytest.mark.parametrize("name", list(JOBS))
def test_inputs_table_states_every_symbol(name):
    est, kw = _job(name)
    parts = job_parts(est, **kw)
    stated = {row[0] for row in parts.inputs}
    reg = registry()
    used = set()
    for shown in parts.terms:
        used |= shown.expr.free_symbols
    for _, _, _, expr in parts.definitions:
        used |= expr.free_symbols
    for sym in used:
        if sym.name in reg:
            assert reg[sym.name].latex in stated, sym
    # the inputs a reader expects even where the derivation hides them in the counts
    for name_ in ("N", "t", "p", "d", "s", "b", "h", "a", "L", "V"):
        assert reg[name_].latex in stated, name_
    placeholders = {name for _, name, _, _ in parts.definitions}
    assert placeholders <= stated


def test_references_are_full_entries_not_keys():
    est, kw = _job("llama3-70b")
    doc = job_document(est, **kw)
    refs = doc[doc.index(r"\section*{References}"):]
    # Korthikanti et al. (memsym/references.toml: korthikanti) with its title and venue
    assert "Reducing Activation Recomputation in Large Transformer Models" in refs
    assert "arXiv:2205.05198" in refs
    assert "seed000," not in doc and "korthikanti," not in doc
    # each term's locator beside its reference number
    assert r"[2], §4.2.3, Eq. 5" in doc


def test_fragmentation_is_phi_times_allocated():
    est, kw = _job("gpt3-175b")
    snip = job_snippet(est, **kw)
    assert r"\underbrace{\varphi_{\mathrm{frag}}\, M_{\mathrm{alloc}}}_{\text{fragmentation}}" in snip
    assert r"M_{\mathrm{alloc}} &= M_{\mathrm{states}} + M_{\mathrm{act}}" in snip
    # the left-hand side names the most-loaded stage (stage 0 of 8 here)
    assert snip.splitlines()[1].startswith(r"M_{\mathrm{GPU}}^{(0)} &=")
    assert "M_{\\mathrm{model}}" not in snip


def test_title_names_model_and_layout():
    est, kw = _job("mixtral-8x7b")
    doc = job_document(est, **kw)
    title = re.search(r"\\title\{(.*)\}", doc).group(1)
    assert "mixtral-8x7b" in title and "EP 8" in title
    assert r"TP 2 $\times$ PP 1 $\times$ DP 8 (16 GPUs)" in title


def _solved():
    # GPT-3 175B, t = 8, p = 4, full recompute, 16 micro-batches: smallest d on 80 GB.
    # Under the framework default (Megatron-core's distributed optimizer keeps the whole
    # bf16 weights and fp32 gradient buffer, 6 + 12/d bytes per parameter) the stage's
    # ~175e9/32 = 5.5e9 parameters hold 33 GB that no d removes, so a d exists (t = 4, p = 2
    # would need 6 * 175e9/8 = 131 GB for weights and gradients alone).
    lay, tr = Layout(t=8, p=4, d=8), Training(seq_length=2048, recompute="full", num_microbatches=16)
    est = training_memory("gpt3-175b", lay, tr)
    vals = {k: v for k, v in est.values.items() if k != d}
    sol = smallest(est.total, "d", 80 * 10**9, vals)
    return est, sol, dict(arch="gpt3-175b", layout=lay, training=tr)


def test_snippet_align_columns_and_solve_line():
    est, sol, kw = _solved()
    snip = job_snippet(est, solve=sol, **kw)
    lines = snip.split("\\\\\n")
    body = [ln.strip() for ln in lines]
    assert body[0].startswith("\\begin{align*}")
    # exactly one & per line; the relation right after it, the left-hand side before it
    for ln in body:
        ln = ln.replace("\\begin{align*}\n", "").replace("\n\\end{align*}", "")
        assert ln.count("&") == 1, ln
        after = ln.split("&", 1)[1].lstrip()
        assert after.startswith(("=", r"\geq", r"\leq", r"\quad")), ln
    solve_line = next(ln for ln in body if r"\geq" in ln)
    assert solve_line.startswith("d &\\geq")
    assert any(ln.startswith(r"\Rightarrow\; d &= %d" % sol.value) for ln in body)
    # the smallest d fits and d - 1 does not (checked here against the estimate itself)
    fits = [training_memory("gpt3-175b", Layout(t=8, p=4, d=n), kw["training"]).bytes_total
            <= 80 * 10**9 for n in (sol.value - 1, sol.value)]
    assert fits == [False, True]
    # no double negative in the closed form
    assert "- -" not in snip and r"\frac{-" not in snip


def test_solve_short_form_by_hand():
    # the total is M_inf + M_1/d; the printed ratio M_1/(C - M_inf) is the bound
    est, sol, kw = _solved()
    snip = job_snippet(est, solve=sol, **kw)
    m = re.search(r"\\frac\{([\d.]+)\}\{([\d.]+) - ([\d.]+)\}", snip)
    m1, cap, m0 = (float(x) for x in m.groups())
    assert cap == 80.0
    assert abs(m1 / (cap - m0) - float(sol.bound)) < 0.01


@needs_tex
def test_snippet_and_solve_compile():
    est, sol, kw = _solved()
    log = compile_tex(document(job_snippet(est, solve=sol, **kw)))
    assert all(w <= 3 for w in _overfull(log))
    log = compile_tex(job_document(est, solve=sol, paper="letter", **kw))
    assert all(w <= 3 for w in _overfull(log))


def test_markdown_has_the_same_content():
    est, sol, kw = _solved()
    md = job_markdown(est, solve=sol, **kw)
    assert md.count("$$") == 4
    assert md.startswith("## Per-GPU training memory: gpt3-175b, TP 8 × PP 4 × DP 8 (256 GPUs)")
    assert "| model states | weights |" in md and "### References" in md
    assert "Reducing Activation Recomputation" in md


def test_bad_input_is_refused():
    from memsym.errors import InvalidValueError

    est, kw = _job("llama3-70b")
    with pytest.raises(InvalidValueError, match="paper must be one of a4, letter"):
        job_document(est, paper="a5", **kw)
    with pytest.raises(InvalidValueError, match="needs a TrainingEstimate"):
        job_document({"total": 1})


def _cluster_report():
    # the step report the estimate command prints with --gpu (memsym.timing.report.step_report)
    import argparse

    from memsym.cli.job_report import communication_report
    from memsym.model import preset, resolve

    lay, tr = Layout(t=8, p=4, d=4), Training(seq_length=8192, global_batch_size=256)
    args = argparse.Namespace(gpu="h100-80gb", efficiency=None, gpus_per_node=None,
                              intra_node_bandwidth=None, inter_node_bandwidth=None)
    return lay, tr, communication_report(args, resolve(preset("llama3-70b")), lay, tr)


@needs_tex
def test_cluster_section_compiles():
    lay, tr, rep = _cluster_report()
    est = training_memory("llama3-70b", lay, tr)
    doc = job_document(est, cluster=rep, arch="llama3-70b", layout=lay, training=tr)
    sec = doc[doc.index(r"\section*{Communication and step time}"):]
    # every collective group of the report is a row, with its bytes in GB and time in ms
    for key, row in rep["communication"].items():
        assert f"{key} & {row['bytes'] / 1e9:.3f} & {row['seconds'] * 1e3:.2f}" in sec
    assert f"Step time {rep['step_time_s']:.3f} s" in sec
    # the bubble (p-1)/m at p = 4, m = 256/(1*4) = 64: 3/64 = 4.7 % (by hand)
    assert r"pipeline bubble 4.7 \%" in sec
    assert "Efficient Large-Scale Language Model Training" in doc   # Narayanan et al., cited
    log = compile_tex(doc)
    assert all(w <= 3 for w in _overfull(log))


def test_uneven_stage_placeholder_is_one_layer():
    # Llama-3 405B, p = 16 with 7 layers on the first and last stages: the middle stages hold
    # (126 - 14)/14 = 8 layers each (by hand). The stage's sum carries the 8 as a coefficient;
    # the document pulls it out, so A_layer is one layer's activations.
    lay = Layout(t=8, p=16, d=4, c=2, first_stage_layers=7, last_stage_layers=7,
                 sequence_parallel=True)
    tr = Training(seq_length=8192, flash_attention=True, global_batch_size=256)
    est = training_memory("llama3-405b", lay, tr)
    parts = job_parts(est, arch="llama3-405b", layout=lay, training=tr)
    assert est.stage not in (0, 15)
    (sym, name, meaning, expr), = parts.definitions
    assert name == r"A_{\mathrm{layer}}" and "one decoder layer" in meaning
    layers = next(s for s in parts.terms if s.key == "layer_activations")
    assert r"8 A_{\mathrm{layer}}" in parts.printer(layers.expr)
    # in flight on a middle stage under 1F1B: min(m, p - 1) with m = 256/(1*4) = 64 -> 15
    one_layer = expr.xreplace(parts.values)
    assert 8 * 15 * one_layer == est.breakdown()["layer_activations"]


# ---------------------------------------------------------------------------------------------
# memsym latex JOB ... --document | --snippet | --markdown (the command line)
# ---------------------------------------------------------------------------------------------
_ISSUE = ["latex", "llama3-70b", "--tp", "8", "--pp", "4", "--dp", "4", "--seq-length", "8192"]


@needs_tex
@pytest.mark.parametrize("paper", ["a4", "letter"])
def test_cli_latex_job_document_compiles(tmp_path, paper):
    # the issue's command, as a new user types it
    from memsym.cli import main

    out = tmp_path / "doc.tex"
    assert main(_ISSUE + ["--document", "--paper", paper, "-o", str(out)]) == 0
    text = out.read_text()
    title = re.search(r"\\title\{(.*)\}", text).group(1)
    assert "llama3-70b" in title and r"TP 8 $\times$ PP 4 $\times$ DP 4 (128 GPUs)" in title
    assert ("a4paper" if paper == "a4" else "letterpaper") in text
    assert r"\section*{Inputs}" in text and r"\section*{References}" in text
    assert "N_{\\mathrm{tp}}" in text
    log = compile_tex(text)
    assert all(w <= 3 for w in _overfull(log)), _overfull(log)


@needs_tex
def test_cli_latex_job_solve_dp_compiles(tmp_path):
    from memsym.cli import main

    out = tmp_path / "doc.tex"
    assert main(["latex", "gpt3-175b", "--tp", "8", "--pp", "4", "--seq-length", "2048",
                 "--recompute-granularity", "full", "--num-microbatches", "16",
                 "--use-flash-attn", "--gpu", "h100-80gb", "--solve", "dp", "--document",
                 "--paper", "letter", "-o", str(out)]) == 0
    text = out.read_text()
    # smallest d = 2 at the H100's CUDA total (tests/test_solve_job.py, by hand); the document
    # shows the job at d = 2
    assert r"\Rightarrow\; d &= 2" in text and "DP 2 (64 GPUs)" in text
    log = compile_tex(text)
    assert all(w <= 3 for w in _overfull(log)), _overfull(log)


def test_cli_latex_job_snippet_and_markdown(capsys):
    from memsym.cli import main

    assert main(_ISSUE + ["--snippet"]) == 0
    snip = capsys.readouterr().out
    assert snip.startswith("\\begin{align*}") and snip.splitlines()[1].startswith(
        r"M_{\mathrm{GPU}}^{(0)} &=")
    assert main(_ISSUE + ["--markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("## Per-GPU training memory: llama3-70b, TP 8 × PP 4 × DP 4 (128 GPUs)")
    assert "### References" in md


def test_job_document_accepts_a_job():
    from memsym.job import job

    j = job("llama3-70b", tp=8, pp=4, dp=4, seq_length=8192)
    est, kw = _job("llama3-70b")
    assert job_snippet(j) == job_snippet(est, **kw)


def test_solve_without_closed_form_says_how_it_was_found():
    # p has no closed form (the stage's counts change with p in steps): the document says so
    # and how the integer was found, never "too long for a line"
    from memsym.analysis import solve_job
    from memsym.job import job

    j = job("gpt3-175b", tp=8, pp=4, dp=8, seq_length=2048, recompute="full", num_microbatches=16)
    sol = solve_job(j, "pp", 80 * 10**9)
    md = job_markdown(sol.job, solve=sol)
    sec = md[md.index("### Solving for p"):md.index("### References")]
    assert "too long for a line" not in sec and "no closed form in p" in sec
    assert r"\Rightarrow\; p &= %d" % sol.value in sec and "checked: p = " in sec


def test_v_schedule_document_puts_the_output_layer_on_rank_0():
    # torch's ZBVZeroBubble / DualPipeV: rank 0 holds stages 0 and 2p - 1, so the embedding
    # and the output layer (the document once placed the output on the last rank)
    from memsym.job import job
    from memsym.training import job_memory

    j = job("llama3-8b", framework="torchtitan", p=2, v=2, d=4, seq_length=4096,
            num_microbatches=4, stage_placement="v")

    def held(stage):
        parts = job_parts(job_memory(j, stage=stage), arch=j.model, layout=j.layout,
                          training=j.training)
        return next(line for line in parts.context if line.startswith("The stage holds"))

    assert held(0) == ("The stage holds decoder layers 0-14, the input embedding, the final "
                       "norm and output layer.")
    assert held(1) == "The stage holds decoder layers 15-31."
