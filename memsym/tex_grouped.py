r"""A training total as its grouped LaTeX derivation shows it: the groups (model states,
activations, peak-phase transients, framework buffers, allowances), each term under its brace,
the long sums inside a term named by placeholders (``A_{\mathrm{layer}}``) until the line fits
the width budget, and the ``align`` lines.

:mod:`memsym.printing` prints a bare total's derivation with it and :mod:`memsym.document` a
whole job's; :mod:`memsym.job_parts` builds the parts of a job's total on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import sympy as sp

from .groups import ACTIVATION_KEYS, ALLOWANCE_KEYS, BUFFER_KEYS, STATE_KEYS, TRANSIENT_KEYS
from .rational import is_zero
from .symbols import E as E_, L as L_, M_alloc, phi_frag
from .tex_printer import MemsymLatexPrinter, escape, latex
from .tex_width import break_sum, tex_width


#: (group, label, term keys) of a training total's groups, in the order they are printed.
GROUPS = (("states", "model states", STATE_KEYS), ("act", "activations", ACTIVATION_KEYS),
          ("tr", "peak-phase transients", TRANSIENT_KEYS),
          ("buf", "framework buffers", BUFFER_KEYS), ("allow", "allowances", ALLOWANCE_KEYS))


@dataclass
class Shown:
    """One term as a grouped derivation shows it."""

    key: str
    label: str
    group: str
    expr: sp.Expr          # in named symbols (N_tp, N_rep, N_exp, M_alloc, placeholders)
    value: sp.Expr         # exact bytes
    source: object
    description: str
    tex: str = ""          # LaTeX to print instead of the expression (keeps phi before M_alloc)


#: term key -> (the subscript, the meaning) of the placeholder of a long sum inside it
_PLACEHOLDERS = {
    "recompute_working_set": ("rc", "one layer's activations rematerialised during its backward"),
    "output_activations": ("out", "output layer and logits activations for one micro-batch"),
    "embedding_activations": ("emb", "embedding activations for one micro-batch"),
    "cpu_offloaded_activations": ("off", "activations of the CPU-offloaded layers for one "
                                         "micro-batch"),
}


def placeholder(term_key: str, sub: sp.Expr, index: int, taken: set):
    """A named symbol for a long sum inside a term, with its meaning."""
    if term_key in ("layer_activations", "mtp_activations"):
        short = "moe" if sub.has(E_) else "layer"
        meaning = (f"activations of one {'MoE ' if sub.has(E_) else ''}decoder layer for one "
                   "micro-batch")
    else:
        short, meaning = _PLACEHOLDERS.get(
            term_key, (escape(term_key.replace("_", " ")), f"part of {term_key}"))
    name = r"A_{\mathrm{%s}}" % short
    k = 2
    while name in taken:
        name = r"A_{\mathrm{%s},%d}" % (short, k)
        k += 1
    taken.add(name)
    return sp.Symbol(f"_A{index}", positive=True), name, meaning


class NamedPrinter:
    """latex() with placeholder names (``names``: symbol -> LaTeX) for long sums."""

    def __init__(self):
        self.names = {}

    def __call__(self, expr) -> str:
        names = self.names

        class P(MemsymLatexPrinter):
            def _print_Symbol(self, sym, style="plain"):
                if sym in names:
                    return names[sym]
                return super()._print_Symbol(sym, style=style)

        return P().doprint(expr)


def shorten(key: str, expr: sp.Expr, pr: NamedPrinter, defs: list, taken: set, budget: float,
             counts: dict | None = None):
    """Replace the widest long sums inside ``expr`` by placeholders until it fits.

    ``counts`` ({"dense": n, "moe": n}) are the stage's decoder layers of each kind: a stage
    whose layers are counted one by one (an uneven split, a dense/MoE mix) carries the count as
    a coefficient of the per-layer sum, which is pulled out so that the placeholder is one layer.
    """
    for _ in range(8):  # bounded: each pass removes one sum
        if tex_width(pr(expr)) <= budget:
            return expr
        adds = [x for x in sp.preorder_traversal(expr) if x.is_Add and len(x.args) > 2]
        if not adds:
            return expr
        widest = max(adds, key=lambda x: tex_width(pr(x)))
        inner, n = widest, sp.Integer(1)
        if key == "layer_activations" and counts and not expr.has(L_):
            cnt = counts.get("moe" if widest.has(E_) else "dense", 0)
            content = widest.as_content_primitive()[0]
            if cnt > 1 and (content / cnt).is_integer:
                n = sp.Integer(cnt)
                inner = sp.expand(widest / n)
        sym, name, meaning = placeholder(key, inner, len(pr.names), taken)
        pr.names[sym] = name
        defs.append((sym, name, meaning, inner))
        expr = expr.xreplace({widest: n * sym})
    return expr


def _vanishes(expr: sp.Expr) -> bool:
    """``sympy.cancel(expr) == 0``: shown on sparse polynomials where it holds
    (:func:`memsym.rational.is_zero`; a whole stage's sum takes ``cancel`` tens of ms)."""
    return bool(is_zero(expr)) or sp.cancel(expr) == 0


def shown_terms(total, values: Mapping, budget: float, printer: NamedPrinter,
                shown: Mapping | None = None, layer_counts: dict | None = None):
    """The terms of a total as a grouped derivation shows them.

    Parameters
    ----------
    total : memsym.term.Total
    values : mapping
        Symbol -> exact value, for each term's value [bytes].
    budget : float
        Width [pt] of a line's right-hand side; long sums inside a term are named
        (:func:`shorten`) until the term fits within ``budget - 20``.
    printer : NamedPrinter
        Collects the names given to long sums.
    shown : mapping, optional
        Term key -> the expression to show instead of the term's (model states in the stage's
        named parameter counts).
    layer_counts : dict, optional
        The stage's decoder layers of each kind (see :func:`shorten`).

    Returns
    -------
    (list of Shown, list of definitions, sympy.Expr)
        The shown terms, the named sums (symbol, LaTeX name, meaning, expression) and the
        allocation the fragmentation allowance is a fraction of (model states + activations).
    """
    shown = shown or {}
    states = [tm for tm in total if tm.key in STATE_KEYS]
    acts = [tm for tm in total if tm.key in ACTIVATION_KEYS + TRANSIENT_KEYS + BUFFER_KEYS]
    allocated = sp.Add(*(tm.expr for tm in states + acts))
    terms, defs, taken = [], [], set()
    for tm in total:
        group = next((g for g, _, ks in GROUPS if tm.key in ks), "other")
        expr = shown.get(tm.key, tm.expr)
        if tm.key == "fragmentation" and _vanishes(tm.expr - phi_frag * allocated):
            expr = phi_frag * M_alloc
        elif group != "states":
            expr = shorten(tm.key, expr, printer, defs, taken, budget - 20, layer_counts)
        value = tm.expr.xreplace(values)
        tex = latex(phi_frag) + r"\, " + latex(M_alloc) if expr == phi_frag * M_alloc else ""
        terms.append(Shown(tm.key, tm.label or tm.key, group, expr, value, tm.source,
                           tm.description, tex))
    return terms, defs, allocated


def underbraced(s_: Shown, pr) -> str:
    label = escape(s_.label)
    return r"\underbrace{%s}_{\text{%s}}" % (s_.tex or pr(s_.expr), label)


def align_lines(parts) -> list[str]:
    """The derivation as align lines (``LHS &= ...``), each within the width budget."""
    pr = parts.printer
    present = [g for g, _, _ in GROUPS if any(s_.group == g for s_ in parts.terms)]
    extra = [s_ for s_ in parts.terms if s_.group == "other"]
    names = {g: r"M_{\mathrm{%s}}" % g for g, _, _ in GROUPS}
    labels = dict((g, lab) for g, lab, _ in GROUPS)
    top = [r"\underbrace{%s}_{\text{%s}}" % (names[g], labels[g]) for g in present]
    top += [underbraced(s_, pr) for s_ in extra]
    lines = []
    for i, line in enumerate(break_sum([top[0]] + ["+ " + x for x in top[1:]], parts.budget)):
        lines.append(parts.lhs + " &= " + line if i == 0 else "&" + line)
    for g in present:
        shown = [s_ for s_ in parts.terms if s_.group == g]
        braces = [underbraced(s_, pr) for s_ in shown]
        for i, line in enumerate(break_sum([braces[0]] + ["+ " + x for x in braces[1:]],
                                           parts.budget)):
            lines.append(names[g] + " &= " + line if i == 0 else "&" + line)
    if any(s_.key == "fragmentation" for s_ in parts.terms):
        lines.append(r"M_{\mathrm{alloc}} &= " + " + ".join(names[g] for g in present
                                                           if g != "allow"))
    for sym, name, meaning, expr in parts.definitions:
        for i, line in enumerate(break_sum(placeholder_parts(expr, pr), parts.budget)):
            lines.append(name + " &= " + line if i == 0 else "&" + line)
    return lines


def placeholder_parts(expr, pr) -> list[str]:
    out = []
    for i, term in enumerate(expr.as_ordered_terms() if expr.is_Add else [expr]):
        tex = pr(term)
        if i and tex.startswith("-"):
            out.append("- " + tex[1:].lstrip())
        elif i:
            out.append("+ " + tex)
        else:
            out.append(tex)
    return out
