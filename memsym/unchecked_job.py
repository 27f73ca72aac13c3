"""An unvalidated job: what the composition reads when no validated :class:`~memsym.job.Job`
exists.

The composition (:mod:`memsym.training`: :func:`~memsym.training.stage_counts`,
:func:`~memsym.training.states_and_transients`, :func:`~memsym.training.phase_transients`,
:func:`~memsym.training.resolved_stage_total`, :func:`~memsym.training.phase_totals`, ...) takes
a job: a :class:`~memsym.job.Job` where one exists, built and validated once by
:func:`memsym.job.job`.  Two paths have no such job, and take an :class:`UncheckedJob`:

* ``memsym.search``'s symbolic templates: one template stands for a class of layouts (``t = 2``
  for "t > 1, sequence parallelism on", ``v = 2`` for "interleaved", ``m`` the symbol the search
  binds per row), so its layout is not a launchable one and the rule table
  (:mod:`memsym.rules`) would refuse it for many models (t = 2 need not divide the heads); the
  search checks every row it binds with the same rules instead (:mod:`memsym.search.grid`);
* the loose API kept for users and tests, ``stage_total(arch, layout, training, stage)`` and its
  siblings, which check the fields (:func:`memsym.job.check_fields`) but not the launch rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from .job_record import Layout, Training, microbatches
from .model import Architecture

__all__ = ["UncheckedJob", "unchecked"]


@dataclass(frozen=True)
class UncheckedJob:
    """A resolved model, a layout and a training step that no rule has validated.

    Attributes
    ----------
    model : memsym.model.Resolved
        The architecture, every default filled in (:func:`memsym.model.resolve`).
    layout : Layout
    training : Training
    m : int, sympy.Symbol or None
        Micro-batches per step and pipeline [1]: a number, the symbol ``m`` (a template the
        search binds per row), or None (not known: "enough" micro-batches).
    gpu, cluster : hardware records or None
        Where it runs, as a :class:`~memsym.job.Job` holds them (the search's GPU and cluster:
        HybridEP's buffers depend on the NVLink domain, :mod:`memsym.training.totals`).
    """

    model: Architecture
    layout: Layout = field(default_factory=Layout)
    training: Training = field(default_factory=Training)
    m: int | sp.Symbol | None = None
    gpu: object = None
    cluster: object = None


def unchecked(x: Architecture, layout: Layout, training: Training) -> UncheckedJob:
    """An :class:`UncheckedJob` of a resolved architecture, its m from the batch sizes
    (:func:`memsym.job_record.microbatches`, which refuses a batch that does not divide).

    Examples
    --------
    >>> from memsym.model import preset
    >>> unchecked(preset("llama2-7b"), Layout(d=2), Training(global_batch_size=32)).m
    16
    """
    return UncheckedJob(x, layout, training, microbatches(layout, training))
