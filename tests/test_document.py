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

from tex import compile_tex, needs_pdftotext, needs_tex, pdf_pages

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
    from memsym.job import job

    lay, tr = Layout(t=8, p=4, d=4), Training(seq_length=8192, global_batch_size=256)
    args = argparse.Namespace(gpu="h100-80gb", efficiency=None, gpus_per_node=None,
                              intra_node_bandwidth=None, inter_node_bandwidth=None)
    return lay, tr, communication_report(args, job("llama3-70b", layout=lay, training=tr))


@needs_tex
def test_cluster_section_compiles():
    lay, tr, rep = _cluster_report()
    est = training_memory("llama3-70b", lay, tr)
    doc = job_document(est, cluster=rep, arch="llama3-70b", layout=lay, training=tr)
    sec = doc[doc.index(r"\section*{Step time and communication}"):]
    # every collective group of the report is a row: bytes in GB, time and exposed time in ms
    names = {"tp": "TP (tensor)", "pp": "PP (pipeline)", "dp": "DP (data)"}
    for key, row in rep["communication"].items():
        assert (f"{names[key]} & {row['bytes'] / 1e9:.3f} & {row['seconds'] * 1e3:.2f} & "
                f"{row['exposed_seconds'] * 1e3:.2f} & ") in sec
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
    from memsym.job_solver import solve_job
    from memsym.job import job

    j = job("gpt3-175b", tp=8, pp=4, dp=8, seq_length=2048, recompute="full", num_microbatches=16)
    sol = solve_job(j, "pp", 80 * 10**9)
    md = job_markdown(sol.job, solve=sol)
    sec = md[md.index("### Solving for p"):md.index("### References")]
    assert "too long for a line" not in sec and "No closed form in p" in sec
    assert r"\Rightarrow\; p &= %d" % sol.value in sec and "Check: at $p = %d$" % sol.value in sec
    # the enumeration named with its range (GPT-3's 96 layers), the symbol not capitalised
    assert r"by enumerating $p = 1, 2, \dots, 96$ upwards" in sec and "P enumerated" not in sec


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


# ---------------------------------------------------------------------------------------------
# the compiled document read back (issue 33): filled pages, unbroken paths, the step time
# ---------------------------------------------------------------------------------------------
_SOLVE_GPU = ["latex", "gpt3-175b", "--tp", "8", "--pp", "4", "--seq-length", "2048",
              "--recompute-granularity", "full", "--num-microbatches", "16", "--use-flash-attn",
              "--gpu", "h100-80gb"]


def _cli_text(tmp_path, argv) -> str:
    from memsym.cli import main

    out = tmp_path / "doc.tex"
    assert main(argv + ["-o", str(out)]) == 0
    return out.read_text()


def _paths(tex: str) -> list[str]:
    # every path and URL the references set with \url or \code, as the reader sees it
    return [p.replace(r"\%", "%").replace(r"\#", "#")
            for p in re.findall(r"\\(?:url|code)\{([^}]*)\}", tex)]


@needs_pdftotext
@pytest.mark.parametrize("paper", ["a4", "letter"])
def test_reference_paths_break_only_after_a_separator(tmp_path, paper):
    # a path may break after '/', '.' or '_' (url's break points), never inside a word, at a
    # hyphen ("Megatron-" / "LM" reads as a hyphenated word) or after "https:"
    tex = _cli_text(tmp_path, _SOLVE_GPU + ["--solve", "dp", "--document", "--paper", paper])
    refs_tex = tex[tex.index(r"\section*{References}"):]
    text = "".join(page["text"] for page in pdf_pages(tex))
    refs = text[text.index("References"):]
    # the lines as read, page numbers and form feeds dropped, joined by a bare newline
    lines = [ln.strip() for ln in refs.splitlines() if ln.strip() and not ln.strip().isdigit()]
    joined = "\n".join(lines)
    paths = _paths(refs_tex)
    assert len(paths) >= 8, paths          # the Megatron-LM files and the vendors' URLs
    for path in paths:
        pattern = "".join(re.escape(ch) + ("\n?" if ch in "/._" else "") for ch in path)
        assert re.search(pattern, joined), f"{path!r} split inside a word"
    # one long URL does break (at a slash): the test sees breaks at all
    assert "\n" in re.search("".join(re.escape(ch) + ("\n?" if ch in "/._" else "") for ch in
                                     max(paths, key=len)), joined).group(0)


@needs_pdftotext
@pytest.mark.parametrize("paper", ["a4", "letter"])
def test_first_pages_are_filled(tmp_path, paper):
    # the text block ends 2.5 cm above the page's foot: at 1 - 25/297 = 0.916 of an A4 page,
    # 1 - 25/279.4 = 0.911 of a Letter page.  Tables that could not break across pages
    # (tabularx) moved whole to the next page and left pages 1 and 2 ending at 0.64-0.77.
    # A heading whose table's first rows do not fit goes to the next page with them (Letter:
    # page 1 ends at 0.815 then), so a page is filled when it reaches 0.8
    tex = _cli_text(tmp_path, _ISSUE + ["--document", "--paper", paper])
    pages = pdf_pages(tex)
    assert len(pages) >= 3
    for page in pages[:2]:
        assert page["bottom"] >= 0.8, [round(p["bottom"], 3) for p in pages]


def test_solve_section_is_a_paragraph_with_the_method(tmp_path):
    tex = _cli_text(tmp_path, _SOLVE_GPU + ["--solve", "dp", "--document"])
    sec = tex[tex.index(r"\section*{Solving for $d$}"):tex.index(r"\section*{Step time")]
    # no solver note left as raw text; the range and the method in words and math
    assert "integer found" not in sec and "1..1048576" not in sec and "checked:" not in sec
    assert "galloping" in sec and "bisection" in sec and r"$1 \leq d \leq 1048576$" in sec
    # the bound and its ceiling: d = 2 at the H100's CUDA total (tests/test_solve_job.py)
    bound = float(re.search(r"\$d \\geq ([\d.]+)\$", sec).group(1))
    assert 1 < bound <= 2 and rf"\lceil {bound:.6g} \rceil = 2$" in sec
    assert "Check: at $d = 2$ the total is $" in sec and "the next admissible $d = 1$" in sec


def test_step_time_section_matches_the_estimate_json(tmp_path, capsys):
    # the document's step time and traffic are the numbers `memsym estimate --json` reports
    import json

    from memsym.cli import main

    job = _SOLVE_GPU[1:] + ["--dp", "2"]
    assert main(["estimate"] + job + ["--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    tex = _cli_text(tmp_path, ["latex"] + job + ["--document"])
    sec = tex[tex.index(r"\section*{Step time and communication}"):tex.index(
        r"\section*{References}")]
    parts = rep["step_time_parts_s"]
    symbols = {"compute": "gemm", "memory": "mem", "tp": "tp", "ep": "ep", "cp": "cp",
               "pp": "pp", "bubble": "bubble", "dp": "dp", "optimizer": "opt"}
    for key, name in symbols.items():
        share = 100 * parts[key] / rep["step_time_s"]
        assert rf"$T_{{\mathrm{{{name}}}}}$ & {parts[key]:.4f} & {share:.1f} &" in sec, key
    # the sum: m tau_max = pipeline - bubble, then the bubble, the exposed DP and the optimizer
    outer = [parts["pipeline"] - parts["bubble"], parts["bubble"], parts["dp"],
             parts["optimizer"]]
    assert abs(sum(outer) - rep["step_time_s"]) < 1e-9
    assert (" + ".join(f"{x:.4f}" for x in outer) + rf"\ \mathrm{{s}} = "
            f"{rep['step_time_s']:.4f}") in sec
    assert f"Step time {rep['step_time_s']:.3f} s" in sec
    # GPT-3 at p = 4, m = 16 under full recompute: the bubble (p - 1)/m = 3/16 = 18.75 %
    assert rep["bubble"] == 3 / 16 and r"pipeline bubble 18.8 \%" in sec
    names = {"tp": "TP (tensor)", "pp": "PP (pipeline)", "dp": "DP (data)"}
    bw = {"intra": rep["assumptions"]["intra_node_bandwidth_bytes_per_s"],
          "inter": rep["assumptions"]["inter_node_bandwidth_bytes_per_s"]}
    assert set(rep["communication"]) == set(names)
    for key, row in rep["communication"].items():
        assert (f"{names[key]} & {row['bytes'] / 1e9:.3f} & {row['seconds'] * 1e3:.2f} & "
                f"{row['exposed_seconds'] * 1e3:.2f} & {row['link']}-node, "
                f"{bw[row['link']] / 1e9:g} GB/s") in sec, key
    # the Markdown carries the same rows
    from memsym.cli import main as main_

    assert main_(["latex"] + job + ["--markdown"]) == 0
    md = capsys.readouterr().out
    assert f"| $T_{{\\mathrm{{gemm}}}}$ | {parts['compute']:.4f} |" in md
    assert f"| TP (tensor) | {rep['communication']['tp']['bytes'] / 1e9:.3f} |" in md


def test_cli_latex_step_time_section_takes_the_cluster_options(capsys):
    # issue 33: latex prices the step on the cluster the options describe, as estimate does:
    # the document's step time is estimate --json's step_time_s with the same options
    import json

    from memsym.cli import main

    job = ["llama3-8b", "--seq-length", "8192", "--tp", "2", "--dp", "4", "--gpu", "h100-80gb"]
    flags = ["--efficiency", "0.3", "--inter-node-bandwidth", "25",
             "--intra-node-bandwidth", "100", "--gpus-per-node", "4"]
    steps = []
    for extra in ([], flags):
        assert main(["estimate", *job, *extra, "--json"]) in (0, 1)
        steps.append(json.loads(capsys.readouterr().out)["step_time_s"])
        assert main(["latex", *job, *extra, "--markdown"]) == 0
        md = capsys.readouterr().out
        assert f"Step time {steps[-1]:.3f} s" in md
    assert steps[1] > steps[0]      # GEMMs at 0.3 of peak, DP over 25 GB/s: slower
    # the cluster the section states is the one given
    assert "4 per node" in md and "GEMM efficiency 0.3" in md and "25 GB/s" in md


def test_a_tight_capacity_shows_the_total_without_the_margin():
    # between M - phi M_alloc and M: "tight" (memsym.terms.allowances.reserve_verdict), the
    # relation goes on to the total without the fragmentation margin
    est, kw = _job("gpt3-175b")
    total, frag = est.bytes_total, est.grouped()["fragmentation"]
    lines = job_snippet(est, capacity=total - frag / 2, **kw).splitlines()
    assert lines[-3].endswith(r"> C = " + f"{float(total - frag / 2) / 1e9:.2f}" + r"\ \mathrm{GB} \\")
    assert lines[-2] == (r"&\geq M_{\mathrm{GPU}}^{(0)} - \varphi_{\mathrm{frag}}\, M_{\mathrm{alloc}} = "
                         f"{float(total - frag) / 1e9:.2f}" + r"\ \mathrm{GB}")
    # below the total without the margin, or at the total: no such line
    for cap in (total - 2 * frag, total):
        assert "varphi_{\\mathrm{frag}}\\, M_{\\mathrm{alloc}} =" not in job_snippet(
            est, capacity=cap, **kw)
