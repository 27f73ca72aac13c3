"""LaTeX and Markdown output: registry-aware printing, derivations, solve results, documents.

The printer knows the registry's LaTeX names (``b_{\\mathrm{hp}}``); nothing is patched
globally.  Everything produced here compiles inside a standalone ``amsmath`` document.
"""

from __future__ import annotations

import re
from typing import Mapping

from sympy.printing.latex import LatexPrinter

from .symbols import registry
from .values import as_expr

__all__ = ["MemsymLatexPrinter", "latex", "derivation_latex", "document", "escape",
           "term_table_latex", "snippet_latex", "solution_lines", "design_document",
           "markdown_report", "references_latex"]


class MemsymLatexPrinter(LatexPrinter):
    """A :class:`~sympy.printing.latex.LatexPrinter` that prints registered symbols by
    their registered LaTeX (roman subscripts) and placeholders ``M_key`` as
    :math:`M_{\\mathrm{key}}`."""

    printmethod = "_memsym_latex"

    def _print_Symbol(self, expr, style="plain"):
        meta = registry().get(expr.name)
        if meta is not None and meta.symbol == expr:
            return meta.latex
        if expr.name.startswith("M_"):
            return r"M_{\mathrm{%s}}" % escape(expr.name[2:])
        return super()._print_Symbol(expr, style=style)


def latex(expr, **settings) -> str:
    r"""LaTeX of an expression with memsym's symbol names.

    Examples
    --------
    >>> from memsym.symbols import N, b_hp, d, p, t
    >>> latex(N / (p * t) * (b_hp + 16 / d))
    '\\frac{N \\left(b_{\\mathrm{hp}} + \\frac{16}{d}\\right)}{p t}'
    """
    return MemsymLatexPrinter(settings).doprint(as_expr(expr))


_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
            "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def escape(text: str) -> str:
    r"""Text escaped for LaTeX (descriptions and labels inside ``\text{}``).

    Characters pdflatex's default fonts cannot typeset (the Japanese section names some
    locators quote, say) are dropped, with the brackets that held only them.

    Examples
    --------
    >>> escape("seed000, summary formula (まとめ) 50% & b_hp")
    'seed000, summary formula 50\\% \\& b\\_hp'
    """
    kept = "".join(_ESCAPES.get(ch, ch) for ch in str(text) if ord(ch) < 0x250)
    return re.sub(r"\s*\(\s*\)", "", kept).strip()


_STATE_KEYS = {"weights", "gradients", "optimizer"}


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
    if "fragmentation" in keys and keys & _STATE_KEYS:
        from .document import _FILL, _align_lines, job_parts

        class _Bare:  # a total without an estimate: no values, so no named stage counts
            pass

        bare = _Bare()
        bare.total, bare.values, bare.stage, bare.role = sub, {}, 0, "only"
        parts = job_parts(bare, budget=_FILL * 345)  # LaTeX's article at 10 pt: 345 pt text
        lines = _align_lines(parts)
        if lhs is not None:
            lines[0] = lines[0].replace(parts.lhs, lhs, 1)
        return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"
    if lhs is None:
        lhs = r"M_{\mathrm{model}}" if keys <= _STATE_KEYS else "M"
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
        "\\documentclass{article}\n"
        "\\usepackage{amsmath}\n"
        "\\usepackage{amssymb}\n"
        "\\usepackage[utf8]{inputenc}\n"
        "\\usepackage{booktabs}\n"
        "\\usepackage{tabularx}\n"
        "\\usepackage[hyphens]{url}\n"
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
    from .document import _clean_locator

    loc = _clean_locator(source.locator)
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
    from .values import as_values

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
    from .document import _bibliography, _entry_text, _tex_entry

    bib = _bibliography()
    items = [r"\item[{[%d]}] %s" % (n, _tex_entry(_entry_text(key, bib)))
             for key, n in _numbers(total).items()]
    return "{\\raggedright\n\\begin{enumerate}\n" + "\n".join(items) + "\n\\end{enumerate}}"


def solution_lines(solution) -> list[str]:
    r"""A solve result as ``align`` lines, the relation in the ``&`` column and no leading
    minus in the closed form: ``d &\geq \frac{16 N}{C p t - 2 N}``, ``&= 9.66``,
    ``\Rightarrow\; d &= 10``.

    Examples
    --------
    >>> from memsym import model_state, byte_widths, smallest
    >>> seed = dict(convention="seed000")      # seed 000's 2 + 16/d bytes per parameter
    >>> sol = smallest(model_state(**seed).subs(byte_widths(**seed)), "d", 80 * 10**9,
    ...                {"N": 175 * 10**9, "t": 4, "p": 2})
    >>> solution_lines(sol)[0]
    'd &\\geq \\frac{16 N}{C p t - 2 N}'
    """
    from .document import _solve_lines

    return _solve_lines(solution)


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
    from .values import as_values

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
    from .values import as_values

    vals = {**(as_values(widths) if widths else {}), **(as_values(values) if values else {})}
    from .document import _bibliography, _entry_text

    numbers = _numbers(total)
    out = [f"### {total.name}", "", "$$", derivation_latex(total, widths), "$$", "",
           "| term | expression | GB (1e9 bytes) | source |", "| --- | --- | ---: | --- |"]
    for key, tex, val, src in _term_rows(total, vals):
        shown = "–" if val is None else f"{float(val) / 1e9:.3f}"
        out.append(f"| {key} | ${tex}$ | {shown} | {_cite(src, numbers)} |")
    if solution is not None:
        out += ["", "$$", "\\begin{aligned}\n" + " \\\\\n".join(solution_lines(solution))
                + "\n\\end{aligned}", "$$"]
    bib = _bibliography()
    out += ["", "References:", ""] + [f"{n}. {_entry_text(key, bib)}" for key, n in numbers.items()]
    return "\n".join(out) + "\n"
