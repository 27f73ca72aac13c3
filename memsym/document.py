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
from .printing import gb, linear_form, solution_lines, tex_entry
from .tex_grouped import GROUPS, align_lines
from .tex_printer import escape, escape_inline, latex
from .tex_width import FILL
from .tex_width import break_sum, tex_width
from .document_time import cluster_sentences, comm_rows, step_lines, step_rows
from .terms.allowances import METRIC_COUNTERS
from .values import exact
# arch_of and layout_text stay importable from here (memsym.cli.plot)
from .job_parts import JobParts, capacity_of, job_parts  # noqa: F401
from .text import shared_doc

__all__ = ["job_document", "job_snippet", "job_markdown", "job_parts", "JobParts", "PAPERS",
           "tex_width", "break_sum"]

_doc = shared_doc(estimate_params="""
    estimate : memsym.training.TrainingEstimate or memsym.job.Job
        The job, estimated (a Job is estimated here).
    capacity : number, optional
        GPU memory [bytes] for the "fits" line (a Job's GPU by default).
    solve, arch, layout, training
        As in :func:`job_document`.
    """)

#: Paper sizes: geometry option and text width [pt] with 2.5 cm margins (1 in = 72.27 pt).
PAPERS = {"a4": ("a4paper", (210 - 50) / 25.4 * 72.27),
          "letter": ("letterpaper", (215.9 - 50) / 25.4 * 72.27)}

_GB = 10**9
_GIB = 2**30


# ---------------------------------------------------------------------------------------------
# references
# ---------------------------------------------------------------------------------------------


def _cited(parts: JobParts, cluster=None) -> tuple:
    """(the bibliography keys the document cites, in order of first citation; key -> its
    number, from 1)."""
    keys = []
    for s_ in parts.terms:
        if s_.source.key not in keys:
            keys.append(s_.source.key)
    if cluster is not None:
        for key in ("narayanan", "nccl-tests"):
            if key not in keys:
                keys.append(key)
    return keys, {k: i + 1 for i, k in enumerate(keys)}


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
            out.append(escape_inline(piece) if piece.strip() else piece)
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
    signed = groups[:1] + [f"- {x[1:]}" if x.startswith("-") else f"+ {x}" for x in groups[1:]]
    line = (parts.lhs + r" &= " + " ".join(signed) + r"\ \mathrm{GB} = "
            + gb(parts.total) + r"\ \mathrm{GB}")
    if capacity is not None and parts.metric != "device":
        # whether the job fits is judged on the device's count, which this total is not
        # (memsym.terms.allowances.METRICS): no comparison with C, said so
        return [line + r"\quad \text{(%s; the fit is judged on the device's count)}"
                % escape_inline(METRIC_COUNTERS[parts.metric])]
    if capacity is not None:
        cap = exact(capacity, "capacity")
        rel = r"\leq" if parts.total <= cap else ">"
        line += rf" {rel} C = {gb(cap)}\ \mathrm{{GB}}"
        frag = sum((s_.value for s_ in parts.terms if s_.key == "fragmentation"), sp.Integer(0))
        if parts.total > cap >= parts.total - frag and frag > 0:
            # "tight": within C only without the fragmentation margin, the allocator's
            # reserve decides (memsym.terms.allowances.reserve_verdict)
            return [line, rf"&\geq {parts.lhs} - \varphi_{{\mathrm{{frag}}}}\, "
                          rf"M_{{\mathrm{{alloc}}}} = {gb(parts.total - frag)}\ \mathrm{{GB}}"]
    return [line]


def _solve_form_text(solve, parts) -> str:
    """One sentence defining the parts of the short solve form, when it was used (math in
    ``$...$``, valid in LaTeX and in Markdown)."""
    closed = getattr(solve, "closed_form", None)
    if closed is None:       # no closed form: _solve_text and the solve's notes say how it was found
        return ""
    if tex_width(latex(closed)) <= parts.budget:
        return ""
    lin = linear_form(solve, parts)
    x = latex(solve.unknown)
    if lin is None:
        return (f"The closed form is too long for a line; it is the root of $M({x}) = C$ in "
                "the symbols of the derivation.")
    if lin[0] == "inverse":
        return (rf"At the other inputs' values the total is $M = M_{{\infty}} + M_{{1}}/{x}$: "
                rf"$M_{{\infty}} = {gb(lin[1])}$ GB is the memory no ${x}$ removes, "
                rf"$M_{{1}} = {gb(lin[2])}$ GB the part divided by ${x}$.")
    return (f"At the other inputs' values the total is $M = M_{{0}} + M_{{1}} {x}$: "
            f"$M_{{0}} = {gb(lin[1])}$ GB does not grow with ${x}$, $M_{{1}} = {gb(lin[2])}$ GB "
            f"is added per unit of ${x}$.")


_SEARCH = re.compile(r"integer found on the estimate over (?:(?P<divisors>the divisors of the "
                     r"global batch)|\w+ in 1\.\.(?P<hi>\d+) by galloping and bisection)")


_ENUMERATED = re.compile(r"(?P<x>\w+) enumerated 1, 2, \.\.\. (?P<hi>\d+); (?P<k>\d+) admissible "
                         r"smaller value\(s\) checked not to fit")


def _sentence(note: str, esc) -> str:
    """A note as a sentence: capitalised unless it opens with a symbol ("p was enumerated")."""
    text = esc(str(note).strip())
    first = text.split(" ", 1)[0]
    if len(first) > 1 and first.isalpha():
        text = text[:1].upper() + text[1:]
    return text + ("" if text.endswith(".") else ".")


def _solve_text(solve, esc=lambda t: t) -> list[str]:
    """How the integer was found and checked, as sentences with math in ``$...$`` (LaTeX
    and Markdown alike); ``esc`` escapes the solver's own notes (:func:`escape` for LaTeX).

    The solver's notes (:func:`memsym.job_solver.solve_job`) are plain text; the two it always
    writes, how the integer was searched and the check at the answer, are set as prose
    with their numbers in math, the others kept as sentences."""
    x = latex(solve.unknown)
    small = solve.relation == ">="
    value, cap = int(solve.value), float(solve.capacity) / _GB
    bound = getattr(solve, "bound", None)
    out = []
    if getattr(solve, "closed_form", None) is not None and bound is not None:
        rel, lo_, hi_ = (r"\geq", r"\lceil", r"\rceil") if small else (r"\leq", r"\lfloor",
                                                                      r"\rfloor")
        out.append(rf"Solving $M({x}) = C$ for ${x}$ gives the closed form above; at the "
                   rf"inputs' values ${x} {rel} {float(bound):.6g}$, so the "
                   rf"{'smallest' if small else 'largest'} whole number is "
                   rf"${lo_} {float(bound):.6g} {hi_} = "
                   rf"{int(sp.ceiling(bound) if small else sp.floor(bound))}$ unless a launch "
                   "rule refuses it.")
    notes = [str(n) for n in (getattr(solve, "notes", None) or ()) if n]
    for note in notes:
        found = _SEARCH.match(note)
        if found:
            where = ("over the divisors of the global batch" if found["divisors"] else
                     rf"over $1 \leq {x} \leq {found['hi']}$")
            start = ("the closed form's bound" if bound is not None else "the job's value")
            out.append(rf"The whole number was then found on the estimate itself, each "
                       rf"candidate built as a job under the launch rules (a candidate a rule "
                       rf"refuses is skipped): galloping from {start} in steps of "
                       rf"$1, 2, 4, \dots$ until the fit changes, then bisection, {where}.")
        elif _ENUMERATED.match(note):
            m_ = _ENUMERATED.match(note)
            out.append(rf"The whole number was then found on the estimate itself by enumerating "
                       rf"${x} = 1, 2, \dots, {m_['hi']}$ upwards, each candidate built as a job "
                       rf"under the launch rules: {m_['k']} admissible smaller value(s) were "
                       "checked not to fit, the others are refused by a launch rule.")
        elif not note.startswith("checked:"):
            out.append(_sentence(note, esc))
    neighbour = getattr(solve, "neighbour", None)
    check = (rf"Check: at ${x} = {value}$ the total is ${float(solve.memory) / _GB:.3f}$ GB "
             rf"$\leq C = {cap:.3f}$ GB")
    if neighbour is not None:
        check += (rf", and at the next admissible ${x} = {int(neighbour[0])}$ it is "
                  rf"${float(neighbour[1]) / _GB:.3f}$ GB $> C$.")
    elif notes:
        check += (f"; no admissible {'smaller' if small else 'larger'} ${x}$ exists.")
    else:
        check += "."
    out.append(check)
    if getattr(solve, "closed_form", None) is None and not notes:
        out.append("No closed form exists for this total in the unknown; the integer was "
                   "found by searching and checked against the estimate.")
    return out


def _longtable(cols, header: str, rows: list[str], foot: list[str] = ()) -> list[str]:
    r"""A ``longtable`` the full text width, its columns fractions of it.

    A ``tabularx`` cannot break across pages: a table taller than the rest of the page
    moved whole to the next one and left the page before it half blank (issue 33).
    ``longtable`` breaks between rows and repeats the header; its paragraph columns are
    given as fractions of the width left by the column gaps, so the table is the text's
    width exactly.

    >>> _longtable([("l", 0.5), ("r", 0.5)], "a & b", ["1 & 2"])[0]
    '\\begin{longtable}{@{}>{\\raggedright\\arraybackslash}p{0.5\\dimexpr\\linewidth-2\\tabcolsep\\relax}>{\\raggedleft\\arraybackslash}p{0.5\\dimexpr\\linewidth-2\\tabcolsep\\relax}@{}}'
    """
    gaps = 2 * (len(cols) - 1)
    spec = "".join(r">{\%s\arraybackslash}p{%s\dimexpr\linewidth-%d\tabcolsep\relax}"
                   % ("raggedleft" if a == "r" else "raggedright", f, gaps) for a, f in cols)
    return ([r"\begin{longtable}{@{}" + spec + "@{}}", r"\toprule", header + r" \\",
             r"\midrule", r"\endhead", r"\bottomrule", r"\endlastfoot"]
            # a row ending in \\* (a sub-heading) keeps the next row on its page
            + [r if r.endswith("\\\\*") else r + r" \\" for r in rows] + list(foot)
            + [r"\end{longtable}"])


def _terms_table(parts: JobParts, numbers: dict) -> list[str]:
    # each group a sub-heading row (the source column gets the group column's width, so a
    # term's row is short enough to start the table under its heading); a locator the row
    # above already gave is not repeated
    labels = dict((g, lab) for g, lab, _ in GROUPS)
    rows, group, prev = [], None, None
    for s_ in parts.terms:
        if s_.group != group:
            group = s_.group
            rows.append(r"\multicolumn{4}{@{}l}{%s:} \\*" % labels.get(group, "other"))
        loc = clean_locator(s_.source.locator)
        src = f"[{numbers[s_.source.key]}]" + (", " + _tex_locator(loc) if loc else "")
        if (s_.source.key, loc) == prev and loc:
            src = f"[{numbers[s_.source.key]}], as above"
        prev = (s_.source.key, loc)
        rows.append(rf"\quad {escape(s_.label)} & {float(s_.value) / _GB:.3f} & "
                    rf"{float(s_.value) / _GIB:.3f} & {src}")
    foot = [r"\midrule",
            rf"total & {float(parts.total) / _GB:.3f} & {float(parts.total) / _GIB:.3f} & \\"]
    return _longtable([("l", 0.22), ("r", 0.09), ("r", 0.09), ("l", 0.6)],
                      "term & GB & GiB & source", rows, foot)


def _inputs_table(parts: JobParts) -> list[str]:
    rows = []
    for sym, meaning, val, unit in parts.inputs:
        val_tex = val if val in ("symbolic", "derived") else f"${val}$".replace(" (", "$ (").replace(" GB)$", " GB)")
        rows.append(rf"${sym}$ & {escape(meaning)} & {val_tex} & {escape(unit)}")
    return _longtable([("l", 0.1), ("l", 0.5), ("l", 0.26), ("l", 0.14)],
                      "symbol & meaning & value & unit", rows)


def _cluster_tables(cluster: dict) -> list[str]:
    """The step time (its sum, then each part with its share) and the traffic per group."""
    out = []
    lines = step_lines(cluster)
    if lines:
        m_ = (cluster.get("assumptions") or {}).get("microbatches")
        out += [(r"The step time as \code{memsym.timing.step.step_time} adds it: the busiest "
                 "stage's $m" + (f" = {int(m_)}" if m_ else "") + r"$ micro-batches "
                 r"($m\,\tau_{\max}$), the pipeline bubble, the exposed data-parallel "
                 "reduction and the optimizer step:"), _align(lines)]
        rows = [rf"${sym}$ & {sec} & {share} & {escape(meaning)}"
                for sym, sec, share, meaning in step_rows(cluster)]
        out.append("\n".join(_longtable([("l", 0.12), ("r", 0.14), ("r", 0.12), ("l", 0.62)],
                                        r"part & s & \% of step & what", rows)))
    rows = [rf"{escape(g)} & {gb_} & {ms} & {exp} & {escape(link)}"
            for g, gb_, ms, exp, link in comm_rows(cluster)]
    out.append("The traffic of each parallel group per step, the bytes one GPU sends:")
    out.append("\n".join(_longtable([("l", 0.2), ("r", 0.13), ("r", 0.15), ("r", 0.15),
                                     ("l", 0.37)],
                                    "group & GB & ms & exposed ms & link", rows)))
    return out


def _align(lines: list[str]) -> str:
    return "\\begin{align*}\n" + " \\\\\n".join(lines) + "\n\\end{align*}"



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
    bib, keys, numbers = references(), *_cited(parts, cluster)
    cap = capacity_of(estimate, solve, capacity)
    body = [_intro(parts)]
    body += [escape(x) for x in parts.context]
    body += [r"\section*{Derivation}", _align(align_lines(parts)),
             "At the values of the inputs table:", _align(_numeric_lines(parts, cap)),
             r"\needlines{8}\section*{Terms and sources}", "\n".join(_terms_table(parts, numbers))]
    body += [r"\needlines{8}\section*{Inputs}", "\n".join(_inputs_table(parts))]
    if solve is not None:
        body += [r"\section*{Solving for $%s$}" % latex(solve.unknown),
                 rf"With capacity $C = {float(solve.capacity) / _GB:.3f}$\,GB:",
                 _align(solution_lines(solve, parts))]
        form = _solve_form_text(solve, parts)
        body += [" ".join(([form] if form else []) + _solve_text(solve, escape))]
    if cluster is not None:
        body += [r"\section*{Step time and communication}"]
        body += [_tex_locator(x) for x in cluster_sentences(cluster)] + _cluster_tables(cluster)
    body += [r"\section*{References}", r"{\raggedright", r"\begin{enumerate}"]
    body += [r"\item[{[%d]}] %s" % (numbers[k], tex_entry(entry_text(k, bib))) for k in keys]
    body += [r"\end{enumerate}}"]
    title_tex = escape(parts.title).replace(" x ", r" $\times$ ")
    return (
        "\\documentclass[10pt]{article}\n"
        f"\\usepackage[{geo},margin=2.5cm]{{geometry}}\n"
        "\\usepackage{amsmath}\n\\usepackage{amssymb}\n\\usepackage[utf8]{inputenc}\n"
        "\\usepackage[T1]{fontenc}\n\\usepackage{booktabs}\n\\usepackage{array}\n"
        "\\usepackage{longtable}\n\\setlength\\LTleft{0pt}\n\\setlength\\LTright{0pt}\n"
        # a heading whose table cannot start under it (longtable may break the page between
        # them) goes to the next page: \needlines{n} breaks it when fewer than n lines are left
        "\\newcommand\\needlines[1]{\\par\\ifdim\\dimexpr\\pagegoal-\\pagetotal\\relax"
        "<#1\\baselineskip\\newpage\\fi}\n"
        # url breaks paths at / . _ only: with [hyphens] it broke at '-' too, and a path
        # split after "Megatron-" read as a hyphenated word (issue 33)
        "\\usepackage{url}\n"
        # and not after the ":" of "https:" (math sets ':' as a relation: made ordinary)
        "\\def\\UrlBigBreaks{}\n\\expandafter\\def\\expandafter\\UrlOrds\\expandafter{\\UrlOrds\\do\\:}\n"
        "\\DeclareUrlCommand\\code{\\urlstyle{same}}\n"
        "\\allowdisplaybreaks\n"
        f"\\title{{{title_tex}}}\n\\date{{}}\n"
        "\\begin{document}\n\\maketitle\n" + "\n\n".join(body) + "\n\\end{document}\n")


@_doc
def job_snippet(estimate, *, solve=None, arch=None, layout=None, training=None,
                capacity=None, textwidth: float = 345.0) -> str:
    r"""An ``align*`` block of the job's derivation, its numbers and the solve result, to
    ``\input`` into a document (needs amsmath).

    The relation of the solve line sits in the ``&`` column (``d &\geq ...``), like every
    ``&=`` above it.  Lines are broken for a text ``textwidth`` [pt] wide (default 345 pt,
    LaTeX's ``article`` at 10 pt).


    Parameters
    ----------
    {estimate_params}

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


@_doc
def job_markdown(estimate, *, title: str | None = None, solve=None, cluster: dict | None = None,
                 arch=None, layout=None, training=None, capacity=None) -> str:
    """The content of :func:`job_document` as Markdown with ``$$`` math (GitHub, GitLab, MyST).


    Parameters
    ----------
    {estimate_params}

    Examples
    --------
    >>> from memsym.training import Layout, Training, training_memory
    >>> est = training_memory("llama2-7b", Layout(t=2, d=4), Training(seq_length=4096))
    >>> job_markdown(est, arch="llama2-7b").startswith("## Per-GPU training memory: llama2-7b")
    True
    """
    parts = job_parts(estimate, arch=arch, layout=layout, training=training, title=title)
    bib, keys, numbers = references(), *_cited(parts, cluster)
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
        out.append(" ".join(([form] if form else []) + _solve_text(solve)))
    if cluster is not None:
        out += ["", "### Step time and communication", ""] + cluster_sentences(cluster)
        lines = step_lines(cluster)
        if lines:
            out += ["", "$$", r"\begin{aligned}", " \\\\\n".join(lines), r"\end{aligned}", "$$",
                    "", "| part | s | % of step | what |", "| --- | ---: | ---: | --- |"]
            out += [f"| ${sym}$ | {sec} | {share} | {what} |"
                    for sym, sec, share, what in step_rows(cluster)]
        out += ["", "| group | GB | ms | exposed ms | link |", "| --- | ---: | ---: | ---: | --- |"]
        out += ["| " + " | ".join(row) + " |" for row in comm_rows(cluster)]
    out += ["", "### References", ""]
    out += [f"{numbers[k]}. {entry_text(k, bib)}" for k in keys]
    return "\n".join(out) + "\n"
