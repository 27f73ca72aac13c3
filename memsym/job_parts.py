r"""The structure of a job's total, worked out once for the whole-job document's renderers.

Owns :class:`JobParts` and :func:`job_parts`: the most-loaded GPU's total grouped into model
states, activations and allowances, the stage's parameter counts as named symbols, the
assumptions stated as sentences and the inputs table's rows.  :mod:`memsym.document` prints
them as LaTeX or Markdown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy as sp

from .errors import InvalidValueError
from .tex_grouped import NamedPrinter, shown_terms
from .tex_printer import latex
from .tex_width import BUDGET
from .values import exact
from .symbols import M_alloc, N, N_a, N_ae, N_exp, N_lin, N_q, N_rep, N_tp, N_u, registry
from .training import Layout, STATE_KEYS, Training, job_memory, job_stage_parameters
from .job import Job, dropout_kept, recompute_modules_of
from .unchecked_job import UncheckedJob
from .terms.allowances import METRICS
from . import model as models
from .model import moe_layer_pattern, parameter_count, stage_parameters

__all__ = ["JobParts", "job_parts"]   # layout_text, arch_of, capacity_of: shared with document

_GB = 10**9


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
    metric : str
        The memory the total counts (``device``, ``reserved`` or ``allocated``:
        :data:`memsym.terms.allowances.METRICS`); only the device's count is compared with
        the capacity.
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
    metric: str = "device"


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


def capacity_of(estimate, solve, capacity):
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


def _named_counts(total, vals, x, layout, stage, training=None):
    """The stage's parameter counts the total is written in (N_tp, N_rep, N_exp; LoRA N_q,
    N_u, N_a, N_ae; N_lin for FP8 caches, :func:`memsym.training.stage_counts`), with their values.

    Returns (exprs by key, counts, stage parameters) or None when the total carries no
    count symbol with a value (a hand-built total in N).
    """
    named = (N_tp, N_rep, N_exp, N_lin, N_q, N_u, N_a, N_ae)
    free = total.expr.free_symbols
    counts = {sym: vals[sym] for sym in named if sym in free and sym in vals}
    if not counts or any(sym in free and sym not in vals for sym in named):
        return None
    sp_ = None
    if x is not None and isinstance(layout, Layout) and isinstance(training, Training):
        # the job's own split and output rank (V schedules hold the output on rank 0)
        sp_ = job_stage_parameters(UncheckedJob(x, layout, training), stage)
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
    ('M_{\\\\mathrm{GPU}}', ['states', 'act', 'tr', 'allow'])
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
    metric = getattr(getattr(training, "memory", None), "metric", "device")
    # the metric names the total where it is not the device's count (what must fit)
    marks = ([] if pp == 1 else ["(%d)" % stage]) + ([] if metric == "device" else
                                                     [r"\mathrm{%s}" % metric])
    lhs = r"M_{\mathrm{GPU}}" + (r"^{%s}" % r",\,".join(marks) if marks else "")
    name = getattr(x, "name", None) or "model"
    if title is None:
        title = f"Per-GPU training memory: {name}, {layout_text(vals, layout)}"
    parts = JobParts(lhs, title, terms, defs, total=sp.Add(*(s.value for s in terms)),
                     named_counts=named is not None,
                     count_symbols=tuple(counts), metric=metric)
    if pp > 1:
        parts.stage_note = (f"pipeline stage {stage} of {pp} ({role}), the most-loaded GPU"
                            if getattr(estimate, "stage_bytes", None) and
                            len(estimate.stage_bytes) > 1 else f"pipeline stage {stage} of {pp} ({role})")
    else:
        parts.stage_note = "every GPU holds the whole depth of the model (p = 1)"
    parts.context = _context(training, estimate, sp_)
    parts.inputs = _inputs(parts, vals, pr, sp_, x)
    parts.printer = pr
    parts.values = vals
    parts.expr = total.expr
    parts.budget = budget
    return parts


def _context(training, estimate, sp_) -> list[str]:
    """Plain-text sentences stating the assumptions (training knobs, notes, stage contents)."""
    out = []
    if training is not None:
        mods = recompute_modules_of(training)
        act = [f"recompute {training.memory.recompute}" + (f" ({', '.join(mods) or 'no module'})"
                                                    if training.memory.recompute == "selective" else ""),
               "flash attention" if training.memory.flash_attention else "attention scores kept (no flash attention)",
               "dropout masks kept" if dropout_kept(training) else "no dropout masks",
               f"{training.pipeline.schedule} schedule"]
        out.append(f"Training: {training.states.precision} weights, {training.states.optimizer} optimizer, "
                   f"{training.states.sharding} sharding ({training.states.convention} convention"
                   + (f", offload {training.states.offload}" if training.states.offload != "none" else "")
                   + f"); activations: {', '.join(act)}.")
        metric = training.memory.metric
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
