"""The per-GPU training memory of a job on its most-loaded GPU, and the values it is
evaluated at.

:func:`training_memory` and :func:`job_memory` evaluate the total of every pipeline stage that
can be the largest (:func:`candidate_stages`) at :func:`training_values` and return a
:class:`TrainingEstimate`; :func:`validate` refuses the settings a framework would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Mapping

import sympy as sp

from ..errors import InvalidValueError
from ..groups import ACTIVATION_KEYS, BUFFER_KEYS, STATE_KEYS, TRANSIENT_KEYS, held_rows
from ..job import (Job, Layout, Training, check_fields, job as make_job, microbatches,
                   validate as _validate_job)
from ..limits import LIMITS
from .. import model as models
from ..symbols import (E, L, V, a, b, c, c_f, d, d_h, e, f, f_e, f_sh, g, h, h_lat, k, m, p,
                       p_pl, s, t, t_e, v)
from ..term import Total
from ..terms.allowances import ALLOWANCE_TERMS, METRICS, allowance_values
from ..unchecked_job import unchecked
from ..values import exact
from .model_states import STEP_STATE_KEYS, stage_counts
from .totals import OUTSIDE_ALLOCATOR_KEYS, phase_parts, phase_totals, resolved_stage_total
from .traits import resolve_arch, stage_role
from .transients import PHASES, states_and_transients


#: The architecture symbols a training total holds beyond the hybrid mixers' (those
#: memsym.model.stages.mamba_values picks): the dense sizes, the padded vocabulary, the MoE
#: sizes and Gemma 4's per-layer input width (memsym.terms.gemma4_ple), in this order.
_ARCH_SYMBOLS = (h, a, g, d_h, f, L, V, E, k, f_e, f_sh, h_lat, p_pl)


def arch_values(arch, t_: int = 1) -> dict:
    """Registry symbol -> exact value for a resolved architecture (padded vocabulary at t).

    Examples
    --------
    >>> from memsym.model import preset
    >>> vals = arch_values(preset("llama2-7b"))
    >>> vals[h], vals[g], vals[f], vals[V]
    (4096, 32, 11008, 32000)
    """
    x = models.architecture.lenient(arch)
    # memsym.model.parameter_values builds every value once (the MoE ones for an MoE model
    # alone, h_lat with a latent size, p_pl with per-layer inputs): the total's are taken
    vals = models.parameter_values(x, t_, pad_vocab=True)
    return {**{sym: vals[sym] for sym in _ARCH_SYMBOLS if sym in vals},
            **models.stages.mamba_values(x)}


def training_values(arch, layout: Layout = Layout(), training: Training = Training(),
                    allowances: Mapping | None = None, stage: int = 0) -> dict:
    """Symbol -> exact value for every symbol a :func:`stage_total` can contain.

    Examples
    --------
    >>> vals = training_values("llama2-7b", Layout(t=2, d=4), Training(seq_length=4096,
    ...                                                              global_batch_size=32))
    >>> vals[t], vals[d], vals[m], vals[L]
    (2, 4, 8, 32)
    """
    check_fields(layout, training)
    j = unchecked(resolve_arch(arch, training), layout, training)
    return {**_training_values(j.model, layout, training, allowances, j.m),
            **stage_counts(j, stage)}


_UNSET = object()


def _training_values(x, layout: Layout, training: Training, allowances: Mapping | None = None,
                     m_=_UNSET) -> dict:
    """:func:`training_values` of a resolved architecture (``m_`` if already worked out)."""
    vals = arch_values(x, layout.t)     # already exact Integers
    vals.update({key: sp.Integer(val) for key, val in (
        (s, training.batch.seq_length), (b, training.batch.micro_batch_size), (t, layout.t), (p, layout.p),
        (d, layout.d), (c, layout.c), (e, layout.e), (t_e, layout.expert_tp))})
    vals[c_f] = exact(training.memory.capacity_factor, "capacity_factor")
    if not 0 < vals[c_f] <= LIMITS["experts"].maximum:    # a load ratio, bounded as the CLI's
        raise InvalidValueError(f"capacity_factor must be in (0, 2^20], got {vals[c_f]}"[:90])
    if m_ is _UNSET:
        m_ = microbatches(layout, training)
    if m_ is not None:
        vals[m] = sp.Integer(m_)
    if layout.v is not None and layout.v > 1:
        vals[v] = sp.Integer(layout.v)
    # the memory metric's view (memsym.terms.allowances.METRICS): a user's allowances win
    metric = METRICS[training.memory.metric][0]
    vals.update(allowance_values({**metric, **dict(allowances or {})}))
    return vals


# short names for the groups' keys (memsym.groups)
_STATE_KEYS, _ACT_KEYS = STATE_KEYS, ACTIVATION_KEYS


@dataclass(frozen=True)
class TrainingEstimate:
    """The per-GPU training memory on the most-loaded GPU, and how it was found.

    Attributes
    ----------
    total : Total
        The most-loaded stage's total, symbolic (registry symbols).
    values : dict
        Symbol -> exact value used to evaluate it.
    stage : int
        The most-loaded pipeline stage (0 = first).
    role : str
        ``"only"`` (p = 1), ``"first"``, ``"last"`` or ``"middle"``.
    stage_bytes : tuple
        Exact total [bytes] of every candidate stage (:func:`candidate_stages`: first, last and
        the lowest stage of each distinct middle make-up), in stage order.
    notes : tuple of str
        Adjustments made, e.g. sequence parallelism switched off at t = 1.
    phase : str
        The phase of the step the peak occurs in (:data:`PHASES`; the earliest on a tie).
    phase_bytes : tuple of (str, sympy.Expr)
        (phase, exact total [bytes]) of the most-loaded stage in each phase, with its
        allowances (:meth:`phases` as a dict); the largest equals ``bytes_total``.
    step_bytes : tuple of (str, sympy.Expr)
        (key, exact bytes) of the model states that exist only during the optimizer step
        (:data:`STEP_STATE_KEYS`, e.g. the fp32 main gradients made from a bf16 gradient
        buffer): part of the ``optimizer`` phase, not of the steady states; and the buckets
        that persist through the step (Megatron-FSDP's ``fsdp_double_buffer`` pools,
        ``unsharded_params`` and ``unsharded_grads``:
        :func:`memsym.terms.transients.megatron_fsdp_buckets`).
    defaults : tuple of (str, object, str)
        The defaults the job applied, with where each comes from (:attr:`memsym.job.Job.defaults`).
    peak_parts : tuple of (str, str, sympy.Expr)
        (key, label, exact bytes) of what the peak phase adds to the steady states and
        activations or takes from them, in the order the phase lists them: its transient
        Terms (:func:`memsym.training.phase_transients`, the step-only states in the optimizer
        phase) and, when the peak is the optimizer step, ``activations_freed`` (every
        activation is freed before the step).  Their sum is the ``transients`` row of
        :meth:`grouped`.
    """

    total: Total
    values: dict
    stage: int
    role: str
    stage_bytes: tuple
    notes: tuple = ()
    phase: str = "forward"
    phase_bytes: tuple = ()
    step_bytes: tuple = ()
    defaults: tuple = ()
    peak_parts: tuple = ()

    @cached_property
    def _breakdown(self) -> dict:
        # evaluated once: bytes_total, grouped() and activations() all read it
        return self.total.breakdown(self.values)

    def breakdown(self) -> dict:
        """Exact bytes per term and ``total``."""
        return dict(self._breakdown)

    @property
    def bytes_total(self) -> sp.Expr:
        return self._breakdown["total"]

    def grouped(self) -> dict:
        """Exact bytes grouped as the command line reports them: model-state keys,
        ``activations`` (the activation terms: what the micro-batches in flight keep),
        ``transients`` where the peak phase changes them (:attr:`peak_parts`; negative where
        the phase holds less, e.g. the first iteration's forward without the Adam moments),
        ``workspace``, ``nccl``, ``fragmentation``, the framework's buffers
        (:data:`memsym.groups.BUFFER_KEYS`: the CUDA graphs') and those outside PyTorch's
        allocator where the job has them (``tp_comm_userbuffers``) and ``total`` (their
        sum)."""
        bd = self._breakdown
        out = {key: bd[key] for key in _STATE_KEYS if key in bd}
        out["activations"] = sp.Add(*(bd[key] for key in _ACT_KEYS if key in bd))
        for key in TRANSIENT_KEYS:
            if bd.get(key, 0) != 0:
                out["transients"] = bd[key]
        for key in ALLOWANCE_TERMS:
            out[key] = bd[key]
        for key in BUFFER_KEYS + OUTSIDE_ALLOCATOR_KEYS:
            if key in bd:
                out[key] = bd[key]
        out["total"] = bd["total"]
        return out

    def held(self) -> dict:
        """:meth:`grouped` as the peak phase holds it, every row >= 0 (stacked bars): the
        transients placed by :func:`memsym.groups.held_rows` (the first iteration's Adam
        moments taken off ``optimizer``, freed activations off ``activations``)."""
        rows = {k: v for k, v in self.grouped().items() if k not in ("transients", "total")}
        out = held_rows(rows, {key: val for key, _, val in self.peak_parts})
        out["total"] = self.bytes_total
        return out

    def phases(self) -> dict:
        """Phase -> exact total [bytes] of the most-loaded stage (:data:`PHASES`)."""
        return dict(self.phase_bytes)

    def activations(self) -> dict:
        """Exact bytes of each activation term."""
        bd = self._breakdown
        return {key: bd[key] for key in _ACT_KEYS if key in bd}


def training_memory(arch, layout: Layout | None = None, training: Training | None = None, *,
                    allowances: Mapping | None = None, stage: int | None = None) -> TrainingEstimate:
    r"""Per-GPU training memory on the most-loaded GPU [bytes].

    Every pipeline stage is evaluated (model states of its exact parameters, its in-flight
    activations, the embedding on the first and the output layer and logits on the last,
    the allowances) and the largest is returned: the first stage is *not* assumed.

    .. math:: M_{\max} = \max_{i} M_i,\qquad M_i = M_{\mathrm{states},i} + M_{\mathrm{act},i}
        + M_{\mathrm{ws}} + M_{\mathrm{nccl}} + \varphi_{\mathrm{frag}}(M_{\mathrm{states},i} + M_{\mathrm{act},i})

    Parameters
    ----------
    arch : Job, Architecture, str or path
        A :class:`~memsym.job.Job` (then ``layout``, ``training`` and ``allowances`` come from
        it), or an architecture, preset name or config.json path (str or :class:`pathlib.Path`).
    layout : Layout
    training : Training
    allowances : mapping, optional
        Overrides of the allowance defaults (see :data:`ALLOWANCES`), e.g. ``{"workspace": 0}``.
    stage : int, optional
        Evaluate this stage instead of searching for the most loaded.

    Examples
    --------
    >>> est = training_memory("llama2-7b", Layout(t=1, p=4, d=2),
    ...                       Training(seq_length=4096, micro_batch_size=1, recompute="selective",
    ...                                flash_attention=True, dropout=False, global_batch_size=64))
    >>> est.stage, est.role
    (0, 'first')
    """
    if isinstance(arch, Job):
        if layout is not None or training is not None:
            raise InvalidValueError("a Job carries its layout and training: pass the Job alone "
                                    "(job.replace(...) changes it)")
        return job_memory(arch, stage=stage, allowances=allowances)

    return job_memory(make_job(arch, layout=layout, training=training, allowances=allowances),
                      stage=stage)


def candidate_stages(x, layout: Layout) -> tuple:
    """The pipeline stages whose memory can be the largest, lowest index first.

    The first stage (embedding, the most micro-batches in flight) and the last (output layer,
    logits) always.  Between them, stages of the same make-up (the MoE/dense kind of each of
    their layers) hold the same parameters and the same activations per micro-batch, and the
    lower index keeps at least as many micro-batches in flight (1F1B: min(p - i, m);
    interleaved: 2(p - i - 1) + (v - 1) p + 1; GPipe: m), so the lowest index of each make-up
    stands for all of them: at most 2 + (distinct make-ups) stages, whatever p.

    Examples
    --------
    >>> from memsym.model import preset
    >>> candidate_stages(preset("llama2-7b"), Layout(p=32))
    (0, 1, 31)
    """
    pp = layout.p
    if pp <= 2:
        return tuple(range(pp))
    pattern = models.stages.layer_kind_pattern(x)
    if layout.pipeline_layout is not None:
        # a custom layout: the lowest middle rank of each chunk structure holds the most
        pl, lowest = layout.pipeline_layout, {}
        for i in range(1, pp - 1):
            key = tuple(tuple(pattern[j] for j in ids) for ids in pl.layer_ids(i))
            lowest.setdefault(key, i)
        return (0, *sorted(lowest.values()), pp - 1)
    if len(set(pattern)) == 1:
        return (0, 1, pp - 1)
    f, l_ = layout.first_stage_layers, layout.last_stage_layers
    L_ = x.num_layers
    if f is None and l_ is None:
        size, first = L_ // pp, L_ // pp
    else:
        middle = pp - (f is not None) - (l_ is not None)
        size = (L_ - (f or 0) - (l_ or 0)) // middle
        first = f if f is not None else size
    lowest = {}
    for i in range(1, pp - 1):              # O(L) in all: each stage's layers read once
        start = first + (i - 1) * size
        lowest.setdefault(tuple(pattern[start:start + size]), i)
    return (0, *sorted(lowest.values()), pp - 1)


def job_memory(j: Job, *, stage: int | None = None, allowances: Mapping | None = None) -> TrainingEstimate:
    """:func:`training_memory` of a validated :class:`~memsym.job.Job`."""
    x, layout, training = j.model, j.layout, j.training
    alw = dict(j.allowances)
    alw.update(allowances or {})
    vals = _training_values(x, layout, training, alw, j.m)
    stages = candidate_stages(x, layout) if stage is None else [stage]
    results = {}
    for i in stages:
        tot = resolved_stage_total(j, i)
        vals_i = {**vals, **stage_counts(j, i)}
        results[i] = (tot, tot.evaluate(vals_i), vals_i)
    best = max(results, key=lambda i: (results[i][1], -i))
    parts = phase_parts(j, best)
    phases = phase_totals(j, best, parts)
    pb = {ph: tot.evaluate(results[best][2]) for ph, tot in phases.items()}
    phase = max(PHASES, key=lambda ph: (pb[ph], -PHASES.index(ph)))
    total, vals = results[best][0], results[best][2]
    opt = states_and_transients(j, best)[1]["optimizer"]
    step = tuple((term.key, val) for term in opt
                 if term.key in STEP_STATE_KEYS + ("unsharded_params", "unsharded_grads")
                 and (val := term.evaluate(vals)) != 0)
    peak = _peak_parts(total, parts, phase, vals)
    return TrainingEstimate(total, vals, best, stage_role(best, layout.p),
                            tuple(results[i][1] for i in sorted(results)), notes=j.notes,
                            phase=phase, phase_bytes=tuple(pb.items()), step_bytes=step,
                            defaults=j.defaults, peak_parts=peak)


def _peak_parts(total: Total, parts: tuple, phase: str, vals: dict) -> tuple:
    """(key, label, exact bytes) of the peak phase's change to the steady sum
    (:attr:`TrainingEstimate.peak_parts`) from the stage's :func:`phase_parts` (what the
    total's ``phase_transient`` is the largest of), the Terms of the same key added together;
    none where the total has no ``phase_transient`` (the steady sum is the peak)."""
    if not any(term.key in TRANSIENT_KEYS for term in total):
        return ()
    _, act, trans = parts
    out: dict = {}
    for term in trans[phase]:
        label, val = out.get(term.key, (term.label or term.key.replace("_", " "), 0))
        out[term.key] = (label, val + term.evaluate(vals))
    if phase == "optimizer":     # the step runs after every activation is freed
        out["activations_freed"] = ("activations freed before the step",
                                    -sp.Add(*(term.evaluate(vals) for term in act)))
    return tuple((key, label, val) for key, (label, val) in out.items() if val != 0)


def validate(arch, layout: Layout, training: Training) -> None:
    """Refuse settings the framework would refuse, one line naming the rule
    (:mod:`memsym.rules`); ``arch`` may be an Architecture, a preset name or a config.json path.

    Examples
    --------
    >>> validate("llama2-70b", Layout(t=16), Training(seq_length=4096))
    Traceback (most recent call last):
    ...
    memsym.errors.DivisibilityError: tensor-parallel size t=16 must divide the KV heads (num_query_groups=8)
    """
    check_fields(layout, training)
    _validate_job(resolve_arch(arch, training), layout, training)
