r"""The whole-job design document: a training estimate as LaTeX or Markdown to paste.

Owns :func:`job_document` (a standalone ``article``), :func:`job_snippet` (an ``align*``
block) and :func:`job_markdown`: the derivation of the most-loaded GPU's total, grouped into
model states, activations and allowances (and communication and time when a cluster report
is given), with the stage's parameter counts as named symbols, an inputs table, the solve
result and a references section generated from ``memsym/references.toml``.  What they
print is worked out once by :func:`memsym.job_parts.job_parts` (re-exported here with
:class:`~memsym.job_parts.JobParts`, ``layout_text`` and ``arch_of``).
"""

from __future__ import annotations

import re

import sympy as sp

from .errors import InvalidValueError
# package data: works from an installed wheel
from .bibliography import clean_locator, entry_text, references
from .printing import (FILL, GROUPS, align_lines, escape, gb, latex, linear_form,
                       solution_lines, tex_entry)
from .tex_width import break_sum, tex_width
from .values import exact
# arch_of and layout_text stay importable from here (memsym.cli.plot)
from .job_parts import JobParts, arch_of, capacity_of, job_parts, layout_text  # noqa: F401

__all__ = ["job_document", "job_snippet", "job_markdown", "job_parts", "JobParts", "PAPERS",
           "tex_width", "break_sum"]

#: Paper sizes: geometry option and text width [pt] with 2.5 cm margins (1 in = 72.27 pt).
PAPERS = {"a4": ("a4paper", (210 - 50) / 25.4 * 72.27),
          "letter": ("letterpaper", (215.9 - 50) / 25.4 * 72.27)}

_GB = 10**9
_GIB = 2**30


# ---------------------------------------------------------------------------------------------
# references
# ---------------------------------------------------------------------------------------------


def _cited(parts: JobParts, solve=None, cluster=None) -> list[str]:
    keys = []
    for s_ in parts.terms:
        if s_.source.key not in keys:
            keys.append(s_.source.key)
    if cluster is not None:
        for key in ("narayanan", "nccl-tests"):
            if key not in keys:
                keys.append(key)
    return keys


def _tex_locator(text: str) -> str:
    r"""A locator in LaTeX: escaped, with long code names (``param_and_grad_buffer.py``,
    ``DistributedOptimizer._build_model_and_main_param_groups``) set by ``\code`` (the url
    package in the text font) so that they break at ``/``, ``.`` and ``_``.

    >>> _tex_locator("core/optimizer/distrib_optimizer.py, Eq. 5")
    '\\code{core/optimizer/distrib_optimizer.py}, Eq. 5'
    """
    pieces = re.split(r"([A-Za-z0-9_./-]{16,})", text)
    out = []
    for i, piece in enumerate(pieces):
        if i % 2 and re.search(r"[/_.]", piece):
            out.append(r"\code{%s}" % piece)
        else:
            lead = " " if piece[:1].isspace() else ""
            tail = " " if piece[-1:].isspace() and piece.strip() else ""
            out.append(lead + escape(piece) + tail if piece.strip() else piece)
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# renderers
# ---------------------------------------------------------------------------------------------


def _numeric_lines(parts: JobParts, capacity=None) -> list[str]:
    """The total at the job's values, group by group [GB]."""
    groups = []
    for g, lab, _ in GROUPS:
        vals = [s_.value for s_ in parts.terms if s_.group == g]
        if vals:
            groups.append(gb(sp.Add(*vals)))
    groups += [gb(s_.value) for s_ in parts.terms if s_.group == "other"]
    line = (parts.lhs + r" &= " + " + ".join(groups) + r"\ \mathrm{GB} = "
            + gb(parts.total) + r"\ \mathrm{GB}")
    if capacity is not None:
        cap = exact(capacity, "capacity")
        rel = r"\leq" if parts.total <= cap else ">"
        line += rf" {rel} C = {gb(cap)}\ \mathrm{{GB}}"
    return [line]


def _solve_form_text(solve, parts) -> str:
    """One sentence defining the parts of the short solve form, when it was used."""
    closed = getattr(solve, "closed_form", None)
    if closed is None:       # no closed form: _solve_text and the solve's notes say how it was found
        return ""
    if tex_width(latex(closed)) <= parts.budget:
        return ""
    lin = linear_form(solve, parts)
    x = solve.unknown.name
    if lin is None:
        return ("The closed form is too long for a line; it is the root of M(%s) = C in the "
                "symbols of the derivation." % x)
    if lin[0] == "inverse":
        return (f"At the other inputs' values the total is M = M_inf + M_1/{x} [GB]: M_inf = "
                f"{gb(lin[1])} GB is the memory no {x} removes, M_1 = {gb(lin[2])} GB the part "
                f"divided by {x}.")
    return (f"At the other inputs' values the total is M = M_0 + M_1 {x} [GB]: M_0 = "
            f"{gb(lin[1])} GB does not grow with {x}, M_1 = {gb(lin[2])} GB per unit of {x}.")


def _solve_text(solve) -> list[str]:
    """Plain sentences on how the integer was found (verified against the estimate)."""
    x = solve.unknown.name
    out = [f"At {x} = {int(solve.value)} the total is {float(solve.memory) / _GB:.3f} GB against "
           f"C = {float(solve.capacity) / _GB:.3f} GB."]
    for attr in ("method", "note", "explanation"):
        val = getattr(solve, attr, None)
        if isinstance(val, str) and val:
            out.append(val)
    for attr in ("notes", "implicit"):
        val = getattr(solve, attr, None)
        if isinstance(val, (list, tuple)):
            out += [str(v) for v in val if v]
    if getattr(solve, "closed_form", None) is None:
        out.append("No closed form exists for this total in the unknown; the integer was found "
                   "by searching and checked against the estimate.")
    return out


def _terms_table(parts: JobParts, numbers: dict) -> list[str]:
    lines = [r"\begin{tabularx}{\textwidth}{@{}llrr>{\raggedright\arraybackslash}X@{}}", r"\toprule",
             r"group & term & GB & GiB & source \\", r"\midrule"]
    labels = dict((g, lab) for g, lab, _ in GROUPS)
    for s_ in parts.terms:
        loc = clean_locator(s_.source.locator)
        src = f"[{numbers[s_.source.key]}]" + (", " + _tex_locator(loc) if loc else "")
        lines.append(rf"{labels.get(s_.group, 'other')} & {escape(s_.label)} & "
                     rf"{float(s_.value) / _GB:.3f} & {float(s_.value) / _GIB:.3f} & {src} \\")
    lines += [r"\midrule",
              rf"total & & {float(parts.total) / _GB:.3f} & {float(parts.total) / _GIB:.3f} & \\",
              r"\bottomrule", r"\end{tabularx}"]
    return lines


def _inputs_table(parts: JobParts) -> list[str]:
    lines = [r"\begin{tabularx}{\textwidth}{@{}l>{\raggedright\arraybackslash}Xll@{}}", r"\toprule",
             r"symbol & meaning & value & unit \\", r"\midrule"]
    for sym, meaning, val, unit in parts.inputs:
        val_tex = val if val in ("symbolic", "derived") else f"${val}$".replace(" (", "$ (").replace(" GB)$", " GB)")
        lines.append(rf"${sym}$ & {escape(meaning)} & {val_tex} & {escape(unit)} \\")
    lines += [r"\bottomrule", r"\end{tabularx}"]
    return lines


def _cluster_table(cluster: dict) -> list[str]:
    lines = [r"\begin{tabularx}{\textwidth}{@{}>{\raggedright\arraybackslash}Xrrl@{}}", r"\toprule",
             r"collective (per step) & GB & ms & link \\", r"\midrule"]
    for key, row in (cluster.get("communication") or {}).items():
        lines.append(rf"{escape(key)} & {float(row['bytes']) / _GB:.3f} & "
                     rf"{float(row['seconds']) * 1e3:.2f} & {escape(row.get('link', ''))} \\")
    lines += [r"\bottomrule", r"\end{tabularx}"]
    return lines


def _cluster_sentences(cluster: dict) -> list[str]:
    out = []
    a_ = cluster.get("assumptions") or {}
    if a_:
        out.append(f"Cluster: {a_.get('cluster', '')}, {a_.get('gpu', '')} GPUs, "
                   f"{a_.get('gpus_per_node', '')} per node, efficiency "
                   f"{a_.get('efficiency', '')} of the {a_.get('precision', '')} peak; bandwidths "
                   f"per direction ({a_.get('bandwidth_convention', '')}).")
    if "step_time_s" in cluster:
        out.append(f"Step time {float(cluster['step_time_s']):.3f} s, pipeline bubble "
                   f"{100 * float(cluster.get('bubble', 0)):.1f} %, MFU "
                   f"{100 * float(cluster.get('mfu', 0)):.1f} %.")
    for warn in cluster.get("warnings") or ():
        out.append(str(warn))
    return out


def _align(lines: list[str]) -> str:
    return "\\begin{align*}\n" + " \\\\\n".join(lines) + "\n\\end{align*}"


def _table(lines: list[str]) -> str:
    return "\\noindent\n" + "\n".join(lines)


def _check_paper(paper: str) -> tuple:
    if paper not in PAPERS:
        raise InvalidValueError(f"paper must be one of {', '.join(PAPERS)}, got {paper!r}")
    return PAPERS[paper]


def _intro(parts: JobParts) -> str:
    return (f"Memory on one GPU of {escape(parts.stage_note)}, term by term. "
            r"Units: bytes; GB means $10^9$ bytes and GiB $2^{30}$ bytes. "
            r"The fragmentation allowance is a fraction $\varphi_{\mathrm{frag}}$ of the memory "
            r"the allocator hands out, $M_{\mathrm{alloc}}$."
            + (" The stage's parameter counts are named ("
               + ", ".join("$%s$" % latex(sym) for sym in parts.count_symbols)
               + ") and their values are in the inputs table." if parts.named_counts else ""))


def job_document(estimate, *, title: str | None = None, solve=None, cluster: dict | None = None,
                 paper: str = "a4", arch=None, layout=None, training=None,
                 capacity=None) -> str:
    r"""A standalone LaTeX design document of a whole training job (pdflatex, amsmath).

    Sections: the derivation of the most-loaded GPU's total (model states, activations and
    allowances, one underbrace per term, the fragmentation allowance as
    :math:`\varphi_{\mathrm{frag}} M_{\mathrm{alloc}}`), the numbers term by term with their
    sources, every input with its value and unit, the solve result when given, communication
    and step time when a cluster report is given, and the references.

    .. math:: M_{\mathrm{GPU}} = M_{\mathrm{states}} + M_{\mathrm{act}} + M_{\mathrm{ws}}
        + M_{\mathrm{nccl}} + \varphi_{\mathrm{frag}}\,M_{\mathrm{alloc}}

    Parameters
    ----------
    estimate : memsym.training.TrainingEstimate
        From :func:`memsym.training.training_memory`.
    title : str, optional
        Default: the model and the layout.
    solve : memsym.analysis.Solution, optional
        A solve result (unknown, closed form, bound, integer) to state.
    cluster : dict, optional
        A report of :func:`memsym.timing.report.step_report` (communication per group, step
        time, bubble, MFU).
    paper : {"a4", "letter"}
        Paper size (2.5 cm margins).
    arch, layout, training : optional
        The job's architecture (preset name, config.json path or Architecture), Layout and
        Training, when the estimate does not carry them; the architecture names the model and
        the stage's parameter counts.
    capacity : number, optional
        GPU memory [bytes] to compare the total with (default: the solve's capacity).

    Examples
    --------
    >>> from memsym.training import Layout, Training, training_memory
    >>> est = training_memory("llama2-7b", Layout(t=2, d=4), Training(seq_length=4096))
    >>> doc = job_document(est, arch="llama2-7b")
    >>> doc.startswith(r"\documentclass") and r"\section*{References}" in doc
    True

    References
    ----------
    Sources of each term are listed from ``memsym/references.toml``.
    """
    geo, width = _check_paper(paper)
    parts = job_parts(estimate, arch=arch, layout=layout, training=training, title=title,
                      budget=FILL * width)
    bib = references()
    keys = _cited(parts, solve, cluster)
    numbers = {k: i + 1 for i, k in enumerate(keys)}
    cap = capacity_of(estimate, solve, capacity)
    body = [_intro(parts)]
    body += [escape(x) for x in parts.context]
    body += [r"\section*{Derivation}", _align(align_lines(parts)),
             "At the values of the inputs table:", _align(_numeric_lines(parts, cap)),
             r"\section*{Terms and sources}", _table(_terms_table(parts, numbers))]
    body += [r"\section*{Inputs}", _table(_inputs_table(parts))]
    if solve is not None:
        body += [r"\section*{Solving for $%s$}" % latex(solve.unknown),
                 rf"With capacity $C = {float(solve.capacity) / _GB:.3f}$\,GB:",
                 _align(solution_lines(solve, parts))]
        form = _solve_form_text(solve, parts)
        body += [escape(x) for x in ([form] if form else []) + _solve_text(solve)]
    if cluster is not None:
        body += [r"\section*{Communication and step time}", _table(_cluster_table(cluster))]
        body += [escape(x) for x in _cluster_sentences(cluster)]
    body += [r"\section*{References}", r"{\raggedright", r"\begin{enumerate}"]
    body += [r"\item[{[%d]}] %s" % (numbers[k], tex_entry(entry_text(k, bib))) for k in keys]
    body += [r"\end{enumerate}}"]
    title_tex = escape(parts.title).replace(" x ", r" $\times$ ")
    return (
        "\\documentclass[10pt]{article}\n"
        f"\\usepackage[{geo},margin=2.5cm]{{geometry}}\n"
        "\\usepackage{amsmath}\n\\usepackage{amssymb}\n\\usepackage[utf8]{inputenc}\n"
        "\\usepackage[T1]{fontenc}\n\\usepackage{booktabs}\n\\usepackage{tabularx}\n"
        "\\usepackage[hyphens]{url}\n\\DeclareUrlCommand\\code{\\urlstyle{same}}\n"
        "\\allowdisplaybreaks\n"
        f"\\title{{{title_tex}}}\n\\date{{}}\n"
        "\\begin{document}\n\\maketitle\n" + "\n\n".join(body) + "\n\\end{document}\n")


def job_snippet(estimate, *, solve=None, arch=None, layout=None, training=None,
                capacity=None, textwidth: float = 345.0) -> str:
    r"""An ``align*`` block of the job's derivation, its numbers and the solve result, to
    ``\input`` into a document (needs amsmath).

    The relation of the solve line sits in the ``&`` column (``d &\geq ...``), like every
    ``&=`` above it.  Lines are broken for a text ``textwidth`` [pt] wide (default 345 pt,
    LaTeX's ``article`` at 10 pt).


    Parameters
    ----------
    estimate : memsym.training.TrainingEstimate or memsym.job.Job
        The job, estimated (a Job is estimated here).
    capacity : number, optional
        GPU memory [bytes] for the "fits" line (a Job's GPU by default).
    solve, arch, layout, training
        As in :func:`job_document`.

    Examples
    --------
    >>> from memsym.training import Layout, Training, training_memory
    >>> est = training_memory("llama2-7b", Layout(t=2, d=4), Training(seq_length=4096))
    >>> job_snippet(est, arch="llama2-7b").splitlines()[0]
    '\\begin{align*}'
    """
    if not 100 <= float(textwidth) <= 2000:
        raise InvalidValueError(f"textwidth must be between 100 and 2000 pt, got {textwidth}")
    parts = job_parts(estimate, arch=arch, layout=layout, training=training,
                      budget=FILL * float(textwidth))
    cap = capacity_of(estimate, solve, capacity)
    lines = align_lines(parts) + _numeric_lines(parts, cap)
    if solve is not None:
        lines += solution_lines(solve, parts)
    return "\\begin{align*}\n" + " \\\\\n".join(lines) + "\n\\end{align*}"


def job_markdown(estimate, *, title: str | None = None, solve=None, cluster: dict | None = None,
                 arch=None, layout=None, training=None, capacity=None) -> str:
    """The content of :func:`job_document` as Markdown with ``$$`` math (GitHub, GitLab, MyST).


    Parameters
    ----------
    estimate : memsym.training.TrainingEstimate or memsym.job.Job
        The job, estimated (a Job is estimated here).
    capacity : number, optional
        GPU memory [bytes] for the "fits" line (a Job's GPU by default).
    solve, arch, layout, training
        As in :func:`job_document`.

    Examples
    --------
    >>> from memsym.training import Layout, Training, training_memory
    >>> est = training_memory("llama2-7b", Layout(t=2, d=4), Training(seq_length=4096))
    >>> job_markdown(est, arch="llama2-7b").startswith("## Per-GPU training memory: llama2-7b")
    True
    """
    parts = job_parts(estimate, arch=arch, layout=layout, training=training, title=title)
    bib = references()
    keys = _cited(parts, solve, cluster)
    numbers = {k: i + 1 for i, k in enumerate(keys)}
    cap = capacity_of(estimate, solve, capacity)
    labels = dict((g, lab) for g, lab, _ in GROUPS)
    out = [f"## {parts.title.replace(' x ', ' × ')}", "",
           f"Memory on one GPU of {parts.stage_note}. Units: bytes; GB means 10^9 bytes, "
           "GiB 2^30.", ""]
    out += [x for x in parts.context] + [""]
    out += ["$$", r"\begin{aligned}", " \\\\\n".join(align_lines(parts) + _numeric_lines(parts, cap)),
            r"\end{aligned}", "$$", "",
            "| group | term | GB | GiB | source |", "| --- | --- | ---: | ---: | --- |"]
    for s_ in parts.terms:
        loc = clean_locator(s_.source.locator)
        out.append(f"| {labels.get(s_.group, 'other')} | {s_.label} | {float(s_.value) / _GB:.3f} | "
                   f"{float(s_.value) / _GIB:.3f} | [{numbers[s_.source.key]}]"
                   + (f", {loc}" if loc else "") + " |")
    out.append(f"| total | | {float(parts.total) / _GB:.3f} | {float(parts.total) / _GIB:.3f} | |")
    out += ["", "### Inputs", "", "| symbol | meaning | value | unit |", "| --- | --- | --- | --- |"]
    for sym, meaning, val, unit in parts.inputs:
        shown = val if val in ("symbolic", "derived") else f"${val}$".replace(" (", "$ (").replace(" GB)$", " GB)")
        out.append(f"| ${sym}$ | {meaning} | {shown} | {unit} |")
    if solve is not None:
        out += ["", f"### Solving for {solve.unknown.name}", "", "$$", r"\begin{aligned}",
                " \\\\\n".join(solution_lines(solve, parts)), r"\end{aligned}", "$$", ""]
        form = _solve_form_text(solve, parts)
        out += ([form] if form else []) + _solve_text(solve)
    if cluster is not None:
        out += ["", "### Communication and step time", "", "| collective | GB | ms | link |",
                "| --- | ---: | ---: | --- |"]
        for key, row in (cluster.get("communication") or {}).items():
            out.append(f"| {key} | {float(row['bytes']) / _GB:.3f} | "
                       f"{float(row['seconds']) * 1e3:.2f} | {row.get('link', '')} |")
        out += [""] + _cluster_sentences(cluster)
    out += ["", "### References", ""]
    out += [f"{numbers[k]}. {entry_text(k, bib)}" for k in keys]
    return "\n".join(out) + "\n"
