"""LaTeX output: registry names, derivations, solve results; compiled by pdflatex."""

import sympy as sp

from memsym import byte_widths, model_state, smallest
from memsym.printing import derivation_latex, document, latex
from memsym.symbols import N, b_hp, d, p, t

from tex import compile_tex, needs_tex


def test_registry_latex_names():
    assert latex(b_hp) == r"b_{\mathrm{hp}}"
    assert latex(N / (p * t) * (b_hp + sp.Integer(16) / d)) == \
        r"\frac{N \left(b_{\mathrm{hp}} + \frac{16}{d}\right)}{p t}"


def test_derivation_has_one_underbrace_per_term():
    total = model_state("distributed-optimizer")
    tex = derivation_latex(total, {"b_g": 4, "b_m": 4, "b_o": 8})
    assert tex.count(r"\underbrace") == len(total) == 3
    assert tex.rstrip().endswith(r"\end{aligned}")
    assert r"\frac{16}{d}" in tex


@needs_tex
def test_term_total_derivation_and_solve_compile():
    total = model_state("distributed-optimizer")
    sol = smallest(total.subs(b_g=4, b_m=4, b_o=8), "d", 80 * 10**9,
                   {"N": 175 * 10**9, "t": 4, "p": 2, "b_hp": 2})
    body = "\n".join([
        r"\[" + total["weights"].latex() + r"\]",
        r"\[" + total.latex() + r"\]",
        r"\[" + total.latex(factored=True) + r"\]",
        r"\[" + derivation_latex(total, {"b_g": 4, "b_m": 4, "b_o": 8}) + r"\]",
        r"\[" + sol.latex() + r"\]",
    ])
    compile_tex(document(body, "memsym: model states & the smallest d"))
