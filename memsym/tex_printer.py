r"""memsym's LaTeX printer: the registry's symbol names (``b_{\mathrm{hp}}``), placeholders
``M_key`` as :math:`M_{\mathrm{key}}`, and text escaped for ``\text{}``.

Nothing is patched globally: :func:`latex` prints through :class:`MemsymLatexPrinter`.  It
reads only the symbol registry and the exact values, so every printing module (the grouped
derivation of :mod:`memsym.tex_grouped`, the documents of :mod:`memsym.printing`) and a
:class:`~memsym.term.Total` print through it.

References
----------
.. [sympy] SymPy, ``sympy.printing.latex.LatexPrinter`` (``printmethod``, ``_print_Symbol``).
"""

from __future__ import annotations

import re

from sympy.printing.latex import LatexPrinter

from .symbols import registry
from .values import as_expr

__all__ = ["MemsymLatexPrinter", "latex", "escape", "escape_inline"]


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


def escape_inline(piece: str) -> str:
    r"""A piece of running text escaped for LaTeX (:func:`escape`), keeping one space at each
    end where it had white space there.

    :func:`escape` strips its ends; a piece between two set names (a ``\url``, a ``\code``)
    keeps the spaces that part it from them.  A blank piece becomes one space (none at its
    end).

    Examples
    --------
    >>> escape_inline(" see b_hp & "), escape_inline("50% "), escape_inline("   ")
    (' see b\\_hp \\& ', '50\\% ', ' ')
    """
    lead = " " if piece[:1].isspace() else ""
    tail = " " if piece[-1:].isspace() and piece.strip() else ""
    return lead + escape(piece) + tail
