r"""How the per-GPU total moves with each knob of a job: the exact partial derivative of the
symbolic total at the job, and the exact change when the knob is doubled.

For the most-loaded stage's total :math:`M` (:func:`memsym.training.job_memory`, the terms as
``memsym estimate`` reports them) and each knob :math:`x \in \{d, t, p, c, b, s, v\}`:

.. math::

    \left.\frac{\partial M}{\partial x}\right|_{\text{job}}
    \quad\text{and}\quad
    \Delta_{2x} = M(\text{job with } 2x) - M(\text{job})

The derivative is taken on the formula with every other symbol held at the job's value: the
stage's parameter and layer counts (which change with t and p in steps: vocabulary padding, the
stage split) and the micro-batches in flight m are held, so it is the local slope of the terms
as written.  The doubling is not a derivative: the doubled job is built and estimated again
(its counts, stage and rules included), and a doubling a launch rule refuses says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import sympy as sp

from .errors import MemsymError
from .job import Job
from .symbols import lookup
from .training import job_memory

__all__ = ["KNOBS", "Sensitivity", "derivatives", "sensitivity", "report_total"]

#: Knob -> the job option that sets it (:meth:`memsym.job.Job.replace`).
KNOBS = {"d": "d", "t": "t", "p": "p", "c": "c", "b": "micro_batch_size", "s": "seq_length",
         "v": "v"}


@dataclass(frozen=True)
class Sensitivity:
    """One knob's effect on the per-GPU total.

    Attributes
    ----------
    knob : str
        The symbol (``"d"``, ``"t"``, ...).
    value : int
        Its value in the job.
    derivative : sympy.Expr or None
        :math:`\\partial M/\\partial x` at the job [bytes per unit of the knob], exact; None
        where the total is not differentiable there (a ``Max`` at a tie).
    by_term : dict
        Term (as ``memsym estimate`` groups them) -> its exact partial derivative [bytes per
        unit]; the terms sum to ``derivative``.
    doubled : int or None
        The report's total [bytes] of the job with the knob doubled minus the job's (each
        estimated: whole bytes per term, as ``memsym estimate --json``); None when refused.
    note : str
        Why the doubling is missing, or empty.
    """

    knob: str
    value: int
    derivative: object
    by_term: dict = field(default_factory=dict)
    doubled: int | None = None
    note: str = ""


def _at(expr, x, values):
    """``d expr / d x`` at ``values``, exact, or None where it is not a finite number."""
    val = sp.diff(expr, x).xreplace(values)
    if not val.is_number:
        val = val.doit()
    if not val.is_number or val.has(sp.Heaviside, sp.DiracDelta) or not val.is_finite:
        return None
    return val


def derivatives(total, values, knobs, *, group=None) -> dict:
    """Knob -> ``(dM/dknob, {term: dterm/dknob})`` at ``values``, exact [bytes per unit].

    Parameters
    ----------
    total : memsym.term.Total
        A symbolic total (registry symbols).
    values : mapping
        Symbol -> exact value (every free symbol of the total).
    knobs : iterable of str
        Symbol names.
    group : callable, optional
        Term key -> the row it is reported in (default: the key itself).

    Examples
    --------
    >>> from memsym import byte_widths, model_state
    >>> M = model_state("zero3", convention="zero-paper").subs(byte_widths("zero3", convention="zero-paper"))
    >>> from memsym.symbols import N, d, p, t
    >>> tot, parts = derivatives(M, {N: 7 * 10**9, d: 8, t: 1, p: 1}, ["d"])["d"]
    >>> tot == -16 * 7 * 10**9 // 64, sorted(parts)     # ZeRO §5: 16 N / d bytes; d/dd
    (True, ['gradients', 'optimizer', 'weights'])
    """
    vals = {lookup(getattr(k, "name", k)) if isinstance(k, str) else k: v
            for k, v in dict(values).items()}
    group = group or (lambda key: key)
    out = {}
    for name in knobs:
        x = lookup(name)
        parts = {}
        for term in total:
            slope = _at(term.expr, x, vals)
            key = group(term.key)
            if slope is None or parts.get(key, 0) is None:
                parts[key] = None
                continue
            parts[key] = parts.get(key, 0) + slope
        whole = None if any(v is None for v in parts.values()) else sp.Add(*parts.values())
        out[name] = (whole, parts)
    return out


def report_total(j: Job) -> int:
    """The total ``memsym estimate --json`` reports for a job: each term rounded up to whole
    bytes, then summed [bytes]."""
    grouped = job_memory(j).grouped()
    return sum(int(math.ceil(v)) for k, v in grouped.items() if k != "total")


def sensitivity(j: Job) -> list:
    """Each knob's :class:`Sensitivity` at the job: d, t, p, c, b, s, and v with pipeline
    parallelism (interleaving needs p > 1).

    Examples
    --------
    >>> from memsym.job import job
    >>> rows = {r.knob: r for r in sensitivity(job("llama2-7b", d=8, seq_length=2048))}
    >>> rows["d"].derivative < 0 < rows["s"].derivative, "v" in rows
    (True, False)
    """
    est = job_memory(j)
    grouped = set(est.grouped()) - {"total"}
    lay, trn = j.layout, j.training
    now = {"d": lay.d, "t": lay.t, "p": lay.p, "c": lay.c, "b": trn.batch.micro_batch_size,
           "s": trn.batch.seq_length, "v": lay.v or 1}
    knobs = [k for k in KNOBS if k != "v" or lay.p > 1]
    slopes = derivatives(est.total, est.values, knobs,
                         group=lambda key: key if key in grouped else "activations")
    base = report_total(j)
    rows = []
    for k in knobs:
        whole, parts = slopes[k]
        try:
            doubled, note = report_total(j.replace(**{KNOBS[k]: 2 * now[k]})) - base, ""
        except MemsymError as exc:     # a launch rule refuses the doubled job
            doubled, note = None, str(exc).split("\n")[0]
        rows.append(Sensitivity(k, int(now[k]), whole, parts, doubled, note))
    return rows
