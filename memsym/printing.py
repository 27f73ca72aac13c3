"""LaTeX and Markdown output: derivations, solve results, term tables, references, documents.

Expressions print through :func:`latex` (:mod:`memsym.tex_printer`: the registry's LaTeX
names such as ``b_{\\mathrm{hp}}``, nothing patched globally), a training total's grouped
derivation through :mod:`memsym.tex_grouped`.  Everything produced here compiles inside a
standalone ``amsmath`` document.  It reads only the core (symbols, values, the bibliography,
the width estimate of :mod:`memsym.tex_width`), so that a :class:`~memsym.term.Total`
prints itself through it; :mod:`memsym.document` builds the whole-job document on the
grouped derivation and the reference entries.
"""

from __future__ import annotations

import functools
import re
from typing import Mapping

import sympy as sp

from .bibliography import clean_locator, entry_text, references
from .rational import limit_at_infinity, plain_cancel
from .symbols import C
from .tex_grouped import NamedPrinter, align_lines, shown_terms
# the printer and escaping live in memsym.tex_printer; printing.latex / escape stay public
from .tex_printer import MemsymLatexPrinter, escape, escape_inline, latex
from .tex_width import BUDGET, FILL, tex_width
from .values import as_values, cached_max, cached_min

__all__ = ["MemsymLatexPrinter", "latex", "derivation_latex", "document", "escape",
           "term_table_latex", "snippet_latex", "solution_lines", "design_document",
           "markdown_report", "references_latex"]


# ---------------------------------------------------------------------------------------------
# references (an entry's text and a clean locator: memsym.bibliography)
# ---------------------------------------------------------------------------------------------


def tex_entry(text: str) -> str:
    """An entry in LaTeX: escaped, with URLs set by ``\\url`` so that they break."""
    # URLs and file paths (no spaces, a slash) as \url so that they break at / and _
    pieces = re.split(r"(https?://[^\s;,)]*[^\s;,).]|[\w.-]+(?:/[\w.-]+)+\.[A-Za-z]\w*"
                      r"|[\w.-]+/[\w.-]+/[\w./-]*[\w/])", text)
    out = []
    for i, piece in enumerate(pieces):
        if i % 2:
            out.append(r"\url{%s}" % piece.replace("%", r"\%").replace("#", r"\#"))
        else:
            out.append(escape_inline(piece))     # the spaces around the URLs kept
    return "".join(out)


# --- solve results -------------------------------------------------------------------------
_GB = 10**9


def gb(val) -> str:
    return f"{float(val) / _GB:.2f}"


def linear_form(solve, parts):
    """(kind, M_0, M_1) when the total at the job's other values is M_0 + M_1/x ("inverse",
    memory falls with x) or M_0 + M_1 x ("linear"); None otherwise or without the parts."""
    if parts is None or parts.values is None:
        return None
    x = solve.unknown
    vals = tuple((k, v) for k, v in parts.values.items() if k != x)
    return _linear_parts(parts.expr, vals, x, solve.relation)


@functools.lru_cache(maxsize=64)    # a document asks twice (its solve lines and their sentence)
def _linear_parts(expr, vals: tuple, x, relation: str):
    fixed = expr.xreplace(dict(vals))
    if fixed.free_symbols != {x}:
        return None
    try:
        if relation == ">=":
            # a polynomial over a power of x on sparse polynomials, else SymPy's gruntz
            m0 = limit_at_infinity(fixed, x)
            m0 = sp.limit(fixed, x, sp.oo) if m0 is None else m0
            m1 = sp.cancel((fixed - m0) * x)
            kind = "inverse"
        else:
            m0 = fixed.xreplace({x: 0})
            m1 = sp.cancel((fixed - m0) / x)
            kind = "linear"
    except (NotImplementedError, ValueError, TypeError):  # pragma: no cover - sympy gaps
        return None
    if m1.free_symbols or not m1.is_positive or not m0.is_finite:
        return None
    return kind, m0, m1


def solution_lines(solution, parts=None) -> list[str]:
    r"""The solve result as align lines with the relation in the ``&`` column:
    ``d &\geq closed form``, ``&= bound``, ``\Rightarrow\ d &= value``.

    A closed form too long for a line is shown in the form the total takes at the job's
    other values, :math:`M = M_\infty + M_1/x` (so :math:`x \geq M_1/(C - M_\infty)`) or
    :math:`M = M_0 + M_1 x`, with the two parts in GB.

    Examples
    --------
    >>> from memsym import model_state, byte_widths, smallest
    >>> seed = dict(convention="seed000")      # seed 000's 2 + 16/d bytes per parameter
    >>> sol = smallest(model_state(**seed).subs(byte_widths(**seed)), "d", 80 * 10**9,
    ...                {"N": 175 * 10**9, "t": 4, "p": 2})
    >>> solution_lines(sol)[0]
    'd &\\geq \\frac{16 N}{C p t - 2 N}'
    """
    x = latex(solution.unknown)
    rel = r"\geq" if solution.relation == ">=" else r"\leq"
    lines = []
    closed = getattr(solution, "closed_form", None)
    bound = getattr(solution, "bound", None)
    budget = parts.budget if parts is not None else BUDGET
    if closed is not None and (tex := _closed_tex(closed, budget)) is not None:
        if tex_width(tex) <= budget:
            lines.append(f"{x} &{rel} {tex}")
    if not lines:
        lin = linear_form(solution, parts)
        cap = gb(solution.capacity)
        if lin is not None and lin[0] == "inverse":
            _, m0, m1 = lin
            lines.append(rf"{x} &{rel} \frac{{M_{{1}}}}{{C - M_{{\infty}}}} = "
                         rf"\frac{{{gb(m1)}}}{{{cap} - {gb(m0)}}}")
        elif lin is not None:
            _, m0, m1 = lin
            lines.append(rf"{x} &{rel} \frac{{C - M_{{0}}}}{{M_{{1}}}} = "
                         rf"\frac{{{cap} - {gb(m0)}}}{{{gb(m1)}}}")
    if bound is not None:
        head = "" if lines else x
        op = "=" if lines else rel
        lines.append(f"{head} &{op} {float(bound):.6g}")
    word = "smallest" if solution.relation == ">=" else "largest"
    lines.append(rf"\Rightarrow\; {x} &= {int(solution.value)} \quad \text{{(the {word} whole "
                 rf"number that fits)}}")
    return lines


@functools.lru_cache(maxsize=256)   # a job's solution printed again (each option's test): once
def _closed_tex(closed, budget: float):
    """The tidied closed form's LaTeX; None for a maximum (minimum) of branches too wide for a line
    together: they are tidy's output (memsym.analysis.closed_bound) and a maximum keeps each one
    SymPy cannot prove smaller, so tidying drops none, after 50 s of comparisons for 8 (torchtitan)."""
    # the extremum as SymPy evaluates it (cached_max is Max without its hopeless proofs)
    extremum = cached_max if isinstance(closed, sp.Max) else cached_min
    if isinstance(closed, (sp.Max, sp.Min)) and isinstance(kept := extremum(*closed.args),
                                                          type(closed)):
        if sum(tex_width(latex(arg)) for arg in kept.args) > budget:
            return None
    return latex(tidy(closed))


#: tidy's answers, kept (a whole job's closed form takes it tens of milliseconds; the solve and
#: its printed line ask twice); a bounded cache: emptied when full
_TIDIED: dict = {}
_TIDIED_MAX = 512


def tidy(expr: sp.Expr) -> sp.Expr:
    """A closed form as a person writes it: common factors out, no minus sign leading the
    numerator and the denominator (``-16N/(-Cpt + 2N)`` becomes ``16N/(Cpt - 2N)``).

    ``sympy.cancel`` first brings the expression to one form (on sparse polynomials where it
    can, :func:`memsym.rational.plain_cancel`), so that equal closed forms tidy alike and a
    tidied form tidies to itself (remembered as such).

    >>> from memsym.symbols import C, N, p, t
    >>> tidy(-16 * N / (-C * p * t + 2 * N))
    16*N/(C*p*t - 2*N)
    """
    if (done := _TIDIED.get(expr)) is not None:
        return done
    canceled = plain_cancel(expr)
    out = _tidy_canceled(sp.cancel(expr) if canceled is None else canceled)
    if len(_TIDIED) >= _TIDIED_MAX:
        _TIDIED.clear()
    _TIDIED[expr] = out
    if canceled is not None:
        # the form depends only on the canonical P/Q, which the tidied form has too
        _TIDIED[out] = out
    return out


def _tidy_canceled(expr: sp.Expr) -> sp.Expr:
    expr = sp.factor_terms(expr)
    num, den = sp.fraction(expr)
    # the capacity enters the denominator with a plus sign where it does (C p t - 2 N), else
    # no leading minus (could_extract_minus_sign counts the negative terms of a sum)
    lead = sp.expand(den).coeff(C) if den.has(C) else 0
    if (lead != 0 and lead.could_extract_minus_sign()) or (lead == 0 and den.could_extract_minus_sign()):
        num, den = -num, -den
    return sp.factor_terms(num) / sp.factor_terms(den)


_MODEL_STATE_KEYS = {"weights", "gradients", "optimizer"}


def derivation_latex(total, values: Mapping | None = None, *, lhs: str | None = None,
                     **kwargs) -> str:
    r"""An ``aligned`` derivation of a total: one underbrace per term, then its factored form.

    With ``values``, the widths (or any symbols) are substituted before factoring, e.g. the
    fp32 widths of seed 000, giving :math:`\frac{N}{pt}(b_{hp} + 16/d)`.

    A training total (model states, activations and allowances, from
    :func:`memsym.training.stage_total`) is printed grouped, as the design document prints it
    (:func:`memsym.document.job_snippet`): one line per group, long sums named and broken over
    lines, the fragmentation allowance as :math:`\varphi_{\mathrm{frag}} M_{\mathrm{alloc}}`.

    Parameters
    ----------
    total : memsym.term.Total
    values : mapping, optional
        Symbols to substitute first.
    lhs : str, optional
        LaTeX of the left-hand side; default :math:`M_{\mathrm{model}}` for model states alone,
        :math:`M_{\mathrm{GPU}}` for a training total, :math:`M` otherwise.

    Examples
    --------
    >>> from memsym import model_state
    >>> tex = derivation_latex(model_state(), {"b_g": 4, "b_m": 4, "b_o": 8})
    >>> tex.startswith(r"\begin{aligned}") and r"\underbrace" in tex
    True
    """
    keys = set(total.keys)
    sub = total.subs(values, **kwargs) if (values or kwargs) else total
    if "fragmentation" in keys and keys & _MODEL_STATE_KEYS:
        class _Bare:  # a total without an estimate: no values, so no named stage counts
            lhs = r"M_{\mathrm{GPU}}"
            budget = FILL * 345      # LaTeX's article at 10 pt: 345 pt text

        parts = _Bare()
        parts.printer = NamedPrinter()
        parts.terms, parts.definitions, _ = shown_terms(sub, {}, parts.budget, parts.printer)
        lines = align_lines(parts)
        if lhs is not None:
            lines[0] = lines[0].replace(parts.lhs, lhs, 1)
        return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"
    if lhs is None:
        lhs = r"M_{\mathrm{model}}" if keys <= _MODEL_STATE_KEYS else "M"
    parts = [r"\underbrace{%s}_{\text{%s}}" % (latex(term.expr), escape(term.label or term.key))
             for term in total]
    lines = [f"{lhs} &= " + " + ".join(parts)]
    if values or kwargs:
        lines.append("&= " + " + ".join(latex(term.expr) for term in sub))
    lines.append("&= " + latex(sub.factored()))
    return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"


def document(body: str, title: str = "memsym derivation") -> str:
    """A standalone amsmath LaTeX document around ``body``."""
    return (
        "\\documentclass{article}\n\\usepackage{amsmath}\n\\usepackage{amssymb}\n"
        "\\usepackage[utf8]{inputenc}\n\\usepackage{booktabs}\n\\usepackage{tabularx}\n"
        # paths break after / . _ only, never at a hyphen or after "https:" (issue 33)
        "\\usepackage{url}\n\\def\\UrlBigBreaks{}\n"
        "\\expandafter\\def\\expandafter\\UrlOrds\\expandafter{\\UrlOrds\\do\\:}\n"
        f"\\title{{{escape(title)}}}\n"
        "\\date{}\n"
        "\\begin{document}\n\\maketitle\n"
        f"{body}\n"
        "\\end{document}\n"
    )


def _term_rows(total, values):
    """(key, LaTeX expression, exact value or None, source) per term."""
    rows = []
    for term in total:
        val = None
        if values:
            sub = term.expr.xreplace(values)
            val = sub if sub.is_number else None
        rows.append((term.key, latex(term.expr), val, term.source))
    return rows


def _numbers(total) -> dict:
    """Reference key -> its number [1], [2], ... in order of first use."""
    out = {}
    for term in total:
        out.setdefault(term.source.key, len(out) + 1)
    return out


def _cite(source, numbers) -> str:
    loc = clean_locator(source.locator)
    return f"[{numbers[source.key]}]" + (f", {loc}" if loc else "")


def term_table_latex(total, values: Mapping | None = None) -> str:
    r"""A ``booktabs`` table of the terms: expression, value [GB = 1e9 bytes] and the source
    as its number in :func:`references_latex` with the locator (needs ``tabularx``).

    Examples
    --------
    >>> from memsym import model_state
    >>> r"[1], summary formula" in term_table_latex(model_state(convention="seed000"))
    True
    """
    vals = as_values(values) if values else {}
    numbers = _numbers(total)
    lines = [r"\begin{tabularx}{\textwidth}{@{}llr>{\raggedright\arraybackslash}X@{}}", r"\toprule",
             r"term & expression & GB & source \\", r"\midrule"]
    grand = 0
    for key, tex, val, src in _term_rows(total, vals):
        shown = "--" if val is None else f"{float(val) / 1e9:.3f}"
        grand = None if val is None or grand is None else grand + val
        lines.append(rf"{escape(key)} & ${tex}$ & {shown} & {escape(_cite(src, numbers))} \\")
    if vals and grand is not None:
        lines.append(r"\midrule")
        lines.append(rf"total & & {float(grand) / 1e9:.3f} & \\")
    lines += [r"\bottomrule", r"\end{tabularx}"]
    return "\n".join(lines)


def references_latex(total) -> str:
    r"""The references of a total's terms as full entries from ``memsym/references.toml``
    (authors, title, year, venue), numbered as :func:`term_table_latex` cites them.

    Examples
    --------
    >>> from memsym import model_state
    >>> "NeMo distributed optimizer" in references_latex(model_state(convention="seed000"))
    True
    """
    bib = references()
    items = [r"\item[{[%d]}] %s" % (n, tex_entry(entry_text(key, bib)))
             for key, n in _numbers(total).items()]
    return "{\\raggedright\n\\begin{enumerate}\n" + "\n".join(items) + "\n\\end{enumerate}}"


def snippet_latex(total, widths: Mapping | None = None, solution=None) -> str:
    r"""An ``align*`` block for ``\input`` into a design document (needs amsmath).

    The solve result's relation sits in the ``&`` column like the ``=`` above it.

    Examples
    --------
    >>> from memsym import model_state, smallest
    >>> snip = snippet_latex(model_state(), {"b_g": 4, "b_m": 4, "b_o": 8})
    >>> snip.splitlines()[0], snip.splitlines()[-1]
    ('\\begin{align*}', '\\end{align*}')
    """
    body = derivation_latex(total, widths).replace(r"\begin{aligned}", "").replace(r"\end{aligned}", "").strip()
    if solution is not None:
        body += " \\\\\n" + " \\\\\n".join(solution_lines(solution))
    return "\\begin{align*}\n" + body + "\n\\end{align*}"


def design_document(total, widths: Mapping | None = None, values: Mapping | None = None,
                    solution=None, title: str = "Per-GPU memory") -> str:
    r"""A standalone amsmath document: derivation, per-term table with sources, solve result.

    Examples
    --------
    >>> from memsym import model_state
    >>> doc = design_document(model_state(), {"b_g": 4, "b_m": 4, "b_o": 8})
    >>> doc.startswith(r"\documentclass") and r"\end{document}" in doc
    True
    """
    vals = {**(as_values(widths) if widths else {}), **(as_values(values) if values else {})}
    parts = [r"\section*{Derivation}", f"Per-GPU memory, {escape(total.name)}:",
             "\\begin{equation*}\n" + derivation_latex(total, widths) + "\n\\end{equation*}",
             r"\section*{Terms and sources}", r"\noindent", term_table_latex(total, vals), "",
             r"Units: bytes; GB means $10^9$ bytes, GiB $2^{30}$ bytes."]
    if solution is not None:
        word = "Smallest" if solution.relation == ">=" else "Largest"
        parts += [rf"\section*{{{word} configuration that fits}}",
                  rf"With capacity $C = {float(solution.capacity) / 1e9:.3f}$\,GB:",
                  "\\begin{align*}\n" + " \\\\\n".join(solution_lines(solution))
                  + "\n\\end{align*}"]
    parts += [r"\section*{References}", references_latex(total)]
    return document("\n".join(parts), title)


def markdown_report(total, widths: Mapping | None = None, values: Mapping | None = None,
                    solution=None) -> str:
    """The same content as :func:`design_document` in Markdown with ``$$`` math (renders on
    code-hosting sites)."""
    vals = {**(as_values(widths) if widths else {}), **(as_values(values) if values else {})}
    numbers = _numbers(total)
    out = [f"### {total.name}", "", "$$", derivation_latex(total, widths), "$$", "",
           "| term | expression | GB (1e9 bytes) | source |", "| --- | --- | ---: | --- |"]
    for key, tex, val, src in _term_rows(total, vals):
        shown = "–" if val is None else f"{float(val) / 1e9:.3f}"
        out.append(f"| {key} | ${tex}$ | {shown} | {_cite(src, numbers)} |")
    if solution is not None:
        out += ["", "$$", "\\begin{aligned}\n" + " \\\\\n".join(solution_lines(solution))
                + "\n\\end{aligned}", "$$"]
    bib = references()
    out += ["", "References:", ""] + [f"{n}. {entry_text(key, bib)}" for key, n in numbers.items()]
    return "\n".join(out) + "\n"
