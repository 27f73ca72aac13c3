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
           "term_table_latex", "snippet_latex", "design_document", "markdown_report"]


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


def derivation_latex(total, values: Mapping | None = None, **kwargs) -> str:
    r"""An ``aligned`` derivation of a total: one underbrace per term, then its factored form.

    With ``values``, the widths (or any symbols) are substituted before factoring, e.g. the
    fp32 widths of seed 000, giving :math:`\frac{N}{pt}(b_{hp} + 16/d)`.

    Examples
    --------
    >>> from memsym import model_state
    >>> tex = derivation_latex(model_state(), {"b_g": 4, "b_m": 4, "b_o": 8})
    >>> tex.startswith(r"\begin{aligned}") and r"\underbrace" in tex
    True
    """
    lhs = r"M_{\mathrm{%s}}" % "model"
    parts = [r"\underbrace{%s}_{\text{%s}}" % (latex(term.expr), escape(term.label or term.key))
             for term in total]
    lines = [f"{lhs} &= " + " + ".join(parts)]
    sub = total.subs(values, **kwargs) if (values or kwargs) else total
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
        rows.append((term.key, latex(term.expr), val, str(term.source)))
    return rows


def term_table_latex(total, values: Mapping | None = None) -> str:
    r"""A ``booktabs`` table of the terms: expression, value [GB = 1e9 bytes] and source."""
    from .values import as_values

    vals = as_values(values) if values else {}
    lines = [r"\begin{tabular}{llrl}", r"\toprule",
             r"term & expression & GB ($10^9$ bytes) & source \\", r"\midrule"]
    grand = 0
    for key, tex, val, src in _term_rows(total, vals):
        shown = "--" if val is None else f"{float(val) / 1e9:.3f}"
        grand = None if val is None or grand is None else grand + val
        lines.append(rf"{escape(key)} & ${tex}$ & {shown} & {escape(src)} \\")
    if vals and grand is not None:
        lines.append(r"\midrule")
        lines.append(rf"total & & {float(grand) / 1e9:.3f} & \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def snippet_latex(total, widths: Mapping | None = None, solution=None) -> str:
    r"""An ``align*`` block for ``\input`` into a design document (needs amsmath)."""
    body = derivation_latex(total, widths).replace(r"\begin{aligned}", "").replace(r"\end{aligned}", "").strip()
    if solution is not None:
        body += " \\\\\n& " + solution.latex().replace(r"\;\Rightarrow\;", r"&&\Rightarrow\;", 1)
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
             r"\section*{Terms and sources}", r"\begin{center}", term_table_latex(total, vals),
             r"\end{center}",
             r"Units: bytes; GB means $10^9$ bytes, GiB $2^{30}$ bytes."]
    if solution is not None:
        parts += [r"\section*{Smallest configuration that fits}",
                  rf"With capacity $C = {float(solution.capacity) / 1e9:.3f}$\,GB:",
                  "\\begin{equation*}\n" + solution.latex() + "\n\\end{equation*}"]
    return document("\n".join(parts), title)


def markdown_report(total, widths: Mapping | None = None, values: Mapping | None = None,
                    solution=None) -> str:
    """The same content as :func:`design_document` in Markdown with ``$$`` math (renders on
    code-hosting sites)."""
    from .values import as_values

    vals = {**(as_values(widths) if widths else {}), **(as_values(values) if values else {})}
    out = [f"### {total.name}", "", "$$", derivation_latex(total, widths), "$$", "",
           "| term | expression | GB (1e9 bytes) | source |", "| --- | --- | ---: | --- |"]
    for key, tex, val, src in _term_rows(total, vals):
        shown = "–" if val is None else f"{float(val) / 1e9:.3f}"
        out.append(f"| {key} | ${tex}$ | {shown} | {src} |")
    if solution is not None:
        out += ["", "$$", solution.latex(), "$$"]
    return "\n".join(out) + "\n"
