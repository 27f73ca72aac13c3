"""LaTeX and Markdown output: registry-aware printing, derivations, solve results, documents.

The printer knows the registry's LaTeX names (``b_{\\mathrm{hp}}``); nothing is patched
globally.  Everything produced here compiles inside a standalone ``amsmath`` document.
"""

from __future__ import annotations

from typing import Mapping

import sympy as sp
from sympy.printing.latex import LatexPrinter

from .symbols import registry

__all__ = ["MemsymLatexPrinter", "latex", "derivation_latex", "document", "escape"]


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
    return MemsymLatexPrinter(settings).doprint(sp.sympify(expr))


_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
            "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def escape(text: str) -> str:
    """Text escaped for LaTeX (for descriptions and labels inside ``\\text{}``)."""
    return "".join(_ESCAPES.get(ch, ch) for ch in str(text))


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
        "\\usepackage[T1]{fontenc}\n"
        "\\usepackage[utf8]{inputenc}\n"
        "\\usepackage{booktabs}\n"
        f"\\title{{{escape(title)}}}\n"
        "\\date{}\n"
        "\\begin{document}\n\\maketitle\n"
        f"{body}\n"
        "\\end{document}\n"
    )
