r"""The whole-job design document: a training estimate as LaTeX or Markdown to paste.

Owns :func:`job_document` (a standalone ``article``), :func:`job_snippet` (an ``align*``
block) and :func:`job_markdown`: the derivation of the most-loaded GPU's total, grouped into
model states, activations and allowances (and communication and time when a cluster report
is given), with the stage's parameter counts as named symbols, an inputs table, the solve
result and a references section generated from ``memsym/references.toml``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy as sp

from .errors import InvalidValueError
from .bibliography import references   # package data: works from an installed wheel
from .printing import (BUDGET, FILL, GROUPS, NamedPrinter, align_lines, break_sum,
                       clean_locator, entry_text, escape, gb, latex, linear_form, shown_terms,
                       solution_lines, tex_entry, tex_width)
from .values import exact
from .symbols import M_alloc, N, N_a, N_exp, N_lin, N_q, N_rep, N_tp, N_u, registry
from .training import Layout, STATE_KEYS, Training, job_memory, job_stage_parameters
from .job import Job, dropout_kept, recompute_modules_of
from .terms.allowances import METRICS
from . import model as models
from .model import moe_layer_pattern, parameter_count, stage_parameters

__all__ = ["job_document", "job_snippet", "job_markdown", "job_parts", "JobParts", "PAPERS",
           "tex_width", "break_sum"]

#: Paper sizes: geometry option and text width [pt] with 2.5 cm margins (1 in = 72.27 pt).
PAPERS = {"a4": ("a4paper", (210 - 50) / 25.4 * 72.27),
          "letter": ("letterpaper", (215.9 - 50) / 25.4 * 72.27)}

_GB = 10**9
_GIB = 2**30


# ---------------------------------------------------------------------------------------------
# the structure of a job's total
# ---------------------------------------------------------------------------------------------


@dataclass
class JobParts:
    r"""Everything the three renderers print, worked out once from an estimate.

    Attributes
    ----------
    lhs : str
        LaTeX of the left-hand side (:math:`M_{\mathrm{GPU}}` or its stage-indexed form).
    title : str
        Plain-text title naming the model and the layout.
    terms : list
        The shown terms (key, label, group, expression in named symbols, exact bytes, source).
    definitions : list of (str, str, sympy.Expr)
        Placeholders introduced to keep lines short: (LaTeX name, meaning, expression).
    inputs : list of (str, str, str, str)
        (LaTeX symbol, meaning, value, unit) for every symbol the derivation uses.
    total : sympy.Expr
        Exact bytes of the whole total.
    """

    lhs: str
    title: str
    terms: list
    definitions: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    total: sp.Expr = sp.Integer(0)
    context: list = field(default_factory=list)
    stage_note: str = ""
    named_counts: bool = False
    count_symbols: tuple = ()   # the stage's parameter-count symbols the derivation uses
    printer: object = None
    values: dict = None       # symbol -> exact value (the estimate's, with the named counts)
    expr: sp.Expr = None      # the estimate's total expression (registry symbols)
    budget: float = BUDGET   # width [pt] one line's right-hand side may take


def layout_text(vals: dict, layout=None) -> str:
    """``TP 8 x PP 4 x DP 4 (128 GPUs)`` from the layout's values."""
    def get(name, default=1):
        for key, val in vals.items():
            if getattr(key, "name", key) == name:
                return int(val)
        return default

    tt, pp, dd, cc, ee = (get(x) for x in ("t", "p", "d", "c", "e"))
    parts = [f"TP {tt}", f"PP {pp}", f"DP {dd}"]
    if cc > 1:
        parts.insert(2, f"CP {cc}")
    text = " x ".join(parts) + f" ({tt * pp * cc * dd} GPUs)"
    extra = []
    if ee > 1:
        extra.append(f"EP {ee}")
    te_ = get("t_e", tt)
    if ee > 1 and te_ != tt:
        extra.append(f"ETP {te_}")
    vv = get("v", 1)
    if vv > 1:
        extra.append(f"VPP {vv}")
    if layout is not None and getattr(layout, "sequence_parallel", False) and tt > 1:
        extra.append("SP")
    return text + (", " + ", ".join(extra) if extra else "")


def _unpack(estimate, arch, layout, training):
    """(estimate, arch, layout, training) from a :class:`memsym.job.Job` (its estimate is
    :func:`memsym.training.job_memory`) or from an estimate and the parts given beside it."""
    if isinstance(estimate, Job):
        j = estimate
        return (job_memory(j), j.model if arch is None else arch,
                j.layout if layout is None else layout,
                j.training if training is None else training)
    return estimate, arch, layout, training


def _capacity_of(estimate, solve, capacity):
    """The capacity to compare with [bytes]: given, the solve's, or the Job's (its GPU's)."""
    if capacity is not None:
        return capacity
    if getattr(solve, "capacity", None) is not None:
        return solve.capacity

    return estimate.capacity if isinstance(estimate, Job) else None


def arch_of(estimate, arch):
    arch = arch if arch is not None else getattr(estimate, "arch", None)
    if arch is None:
        return None

    return models.resolve(models.resolve_model(arch), seq_length=1) \
        if getattr(arch, "max_position_embeddings", 1) is None else models.resolve(models.resolve_model(arch))


def _val(vals: dict, name: str):
    for key, val in vals.items():
        if getattr(key, "name", key) == name:
            return val
    return None


def _small(expr: sp.Expr) -> bool:
    """Whether an expression holds only small integers (widths, not parameter counts)."""
    return all(abs(x.p) < 10**4 and abs(x.q) < 10**4 for x in expr.atoms(sp.Rational))


def _named_counts(total, vals, x, layout, stage, training=None):
    """The stage's parameter counts the total is written in (N_tp, N_rep, N_exp; LoRA N_q,
    N_u, N_a; N_lin for FP8 caches, :func:`memsym.training.stage_counts`), with their values.

    Returns (exprs by key, counts, stage parameters) or None when the total carries no
    count symbol with a value (a hand-built total in N).
    """
    named = (N_tp, N_rep, N_exp, N_lin, N_q, N_u, N_a)
    free = total.expr.free_symbols
    counts = {sym: vals[sym] for sym in named if sym in free and sym in vals}
    if not counts or any(sym in free and sym not in vals for sym in named):
        return None
    sp_ = None
    if x is not None and isinstance(layout, Layout) and isinstance(training, Training):
        # the job's own split and output rank (V schedules hold the output on rank 0)
        sp_ = job_stage_parameters(x, layout, training, stage)
    elif x is not None:
        tt, pp, ee = (int(_val(vals, n) or 1) for n in ("t", "p", "e"))
        te_ = _val(vals, "t_e")
        first = getattr(layout, "first_stage_layers", None) if layout is not None else None
        last = getattr(layout, "last_stage_layers", None) if layout is not None else None
        try:
            sp_ = stage_parameters(x, tt, pp, stage, e=ee, t_e=None if te_ is None else int(te_),
                                   first_stage_layers=first, last_stage_layers=last)
        except ValueError:
            sp_ = None
    out = {term.key: term.expr for term in total if term.key in STATE_KEYS}
    return out, counts, sp_


def job_parts(estimate, *, arch=None, layout=None, training=None, title=None,
              budget: float = BUDGET) -> JobParts:
    """The structure every renderer prints (see :class:`JobParts`).

    ``arch``, ``layout`` and ``training`` default to the estimate's attributes of those
    names when it has them; without the architecture the stage's parameter counts stay
    numbers.

    Examples
    --------
    >>> from memsym.training import Layout, Training, training_memory
    >>> est = training_memory("llama2-7b", Layout(t=2, d=4), Training(seq_length=4096))
    >>> parts = job_parts(est, arch="llama2-7b")
    >>> parts.lhs, [g for g in dict.fromkeys(s.group for s in parts.terms)]
    ('M_{\\\\mathrm{GPU}}', ['states', 'act', 'allow'])
    """
    estimate, arch, layout, training = _unpack(estimate, arch, layout, training)
    total = getattr(estimate, "total", None)
    vals = getattr(estimate, "values", None)
    if total is None or vals is None:
        raise InvalidValueError("job_document needs a TrainingEstimate (memsym.training."
                                f"training_memory(...)), got {type(estimate).__name__}")
    layout = layout if layout is not None else getattr(estimate, "layout", None)
    training = training if training is not None else getattr(estimate, "training", None)
    x = arch_of(estimate, arch)
    stage = int(getattr(estimate, "stage", 0))
    role = getattr(estimate, "role", "only")
    pp = int(_val(vals, "p") or 1)
    vals = dict(vals)
    pr = NamedPrinter()
    named = _named_counts(total, vals, x, layout, stage, training)
    shown_state = {}
    counts = {}
    sp_ = None
    if named is not None:
        shown_state, counts, sp_ = named
        vals.update(counts)
    layer_counts = None
    if sp_ is not None:
        kinds = [moe_layer_pattern(x)[i] for i in sp_.layers]
        layer_counts = {"moe": sum(kinds), "dense": len(kinds) - sum(kinds)}
    keys = set(total.keys)
    terms, defs, allocated = shown_terms(total, vals, budget, pr, shown_state, layer_counts)
    alloc_val = allocated.xreplace(vals)
    if "fragmentation" in keys and alloc_val.is_number:
        vals[M_alloc] = alloc_val
    lhs = r"M_{\mathrm{GPU}}" if pp == 1 else r"M_{\mathrm{GPU}}^{(%d)}" % stage
    name = getattr(x, "name", None) or "model"
    if title is None:
        title = f"Per-GPU training memory: {name}, {layout_text(vals, layout)}"
    parts = JobParts(lhs, title, terms, defs, total=sp.Add(*(s.value for s in terms)),
                     named_counts=named is not None,
                     count_symbols=tuple(counts))
    if pp > 1:
        parts.stage_note = (f"pipeline stage {stage} of {pp} ({role}), the most-loaded GPU"
                            if getattr(estimate, "stage_bytes", None) and
                            len(estimate.stage_bytes) > 1 else f"pipeline stage {stage} of {pp} ({role})")
    else:
        parts.stage_note = "every GPU holds the whole depth of the model (p = 1)"
    parts.context = _context(training, estimate, vals, sp_, x)
    parts.inputs = _inputs(parts, vals, pr, sp_, x)
    parts.printer = pr
    parts.values = vals
    parts.expr = total.expr
    parts.budget = budget
    return parts


def _context(training, estimate, vals, sp_, x) -> list[str]:
    """Plain-text sentences stating the assumptions (training knobs, notes, stage contents)."""
    out = []
    if training is not None:
        mods = recompute_modules_of(training)
        act = [f"recompute {training.recompute}" + (f" ({', '.join(mods) or 'no module'})"
                                                    if training.recompute == "selective" else ""),
               "flash attention" if training.flash_attention else "attention scores kept (no flash attention)",
               "dropout masks kept" if dropout_kept(training) else "no dropout masks",
               f"{training.schedule} schedule"]
        out.append(f"Training: {training.precision} weights, {training.optimizer} optimizer, "
                   f"{training.sharding} sharding ({training.convention} convention"
                   + (f", offload {training.offload}" if training.offload != "none" else "")
                   + f"); activations: {', '.join(act)}.")
        metric = getattr(training, "metric", "device")
        out.append(f"Memory counted as {metric}: {METRICS[metric][1]}.")
    if sp_ is not None:
        held = [f"decoder layers {sp_.layers.start}-{sp_.layers.stop - 1}"
                if len(sp_.layers) else "no decoder layers"]
        if sp_.embedding:
            held.append("the input embedding")
        if sp_.output_layer:
            held.append("the final norm and output layer")
        if sp_.mtp:
            held.append("the MTP layers")
        out.append("The stage holds " + ", ".join(held) + ".")
    for note in getattr(estimate, "notes", ()) or ():
        out.append(str(note)[:1].upper() + str(note)[1:] + ".")
    # the defaults applied, grouped by where they come from (the source's name before its
    # reason): "memsym.job.DEFAULTS", Megatron-LM's arguments.py, a preset's recipe
    groups = {}
    for name, value, source in getattr(estimate, "defaults", ()) or ():
        groups.setdefault(str(source).split(":")[0], []).append(
            f"{name.replace('_', ' ')} {value}")
    for source, rows in groups.items():
        out.append(f"Defaults applied (not given), from {source}: {', '.join(rows)}.")
    return out


def _fmt_value(val) -> str:
    """An exact value for the inputs table: integers with thin-space groups, fractions as is."""
    val = exact(val, "input value") if not isinstance(val, sp.Basic) else val
    if val.is_Integer:
        n = int(val)
        if abs(n) >= 10**4:
            return "{,}".join(re.findall(r"\d{1,3}(?=(?:\d{3})*$)", str(abs(n)))) if n > 0 else str(n)
        return str(n)
    if val.is_Rational:
        return r"%d/%d" % (val.p, val.q)
    return latex(val)


_BYTES_SYMS = ("M_ws", "M_nccl", "M_alloc", "C")
#: Sizes every job states in its inputs table even where the derivation no longer shows them
#: (V and L live inside the stage's parameter counts); MoE and allowance symbols appear when
#: the derivation uses them.
_CORE = ("t", "p", "d", "c", "s", "b", "m", "v", "h", "a", "g", "d_h", "f", "L", "V")
_MOE = ("E", "k", "f_e", "f_sh", "e", "t_e", "c_f")


def _inputs(parts, vals, pr, sp_, x) -> list[tuple]:
    """(LaTeX symbol, meaning, value, unit) for every symbol the derivation uses."""
    reg = registry()
    used = set()
    for s_ in parts.terms:
        used |= s_.expr.free_symbols
    for sym, _, _, expr in parts.definitions:
        used |= expr.free_symbols
    used = {u for u in used if u not in pr.names}
    # every layout and model size the job was evaluated at, even where the derivation no longer
    # shows it (V and L live inside the stage counts): the reader can reproduce the counts
    for key in vals:
        name = getattr(key, "name", key)
        if name in _CORE or (name in _MOE and _val(vals, "E") is not None):
            used.add(reg[name].symbol)
    if x is not None:
        vals = {**vals, N: sp.Integer(parameter_count(x))}
        used.add(N)
    order = list(reg)
    rows = []
    for sym in sorted(used, key=lambda s_: order.index(s_.name) if s_.name in reg else 10**6):
        meta = reg.get(sym.name)
        if meta is None:
            continue
        val = vals.get(sym)
        if val is None or not (isinstance(val, sp.Basic) and val.is_number):
            shown = "symbolic"
        elif sym.name in _BYTES_SYMS:
            shown = rf"{_fmt_value(val)} ({float(val) / _GB:.4g} GB)"
        else:
            shown = _fmt_value(val)
        meaning = meta.meaning
        if sym is N_tp and sp_ is not None and sp_.embedding:
            meaning += "; includes the input embedding V h"
        rows.append((meta.latex, meaning, shown, meta.unit))
    for sym, name, meaning, expr in parts.definitions:
        rows.append((name, meaning + " (defined in the derivation)", "derived", "bytes"))
    return rows


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
    cap = _capacity_of(estimate, solve, capacity)
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
    cap = _capacity_of(estimate, solve, capacity)
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
    cap = _capacity_of(estimate, solve, capacity)
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
