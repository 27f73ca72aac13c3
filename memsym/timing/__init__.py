"""Step time that predicts: GEMM shapes, efficiency curves, collectives, overlap, schedule.

The package prices one training step from the work it does (per-layer GEMMs after the TP/SP/
CP/EP splits, attention, memory-bound operations, collectives on the links they cross, the
exact pipeline schedule) instead of dividing FLOPs by one global efficiency.

Entry points: :func:`memsym.timing.step.step_time` (one layout, with a breakdown),
:func:`memsym.timing.step.step_time_grid` (numpy arrays of layout knobs, for search),
:func:`memsym.timing.schedule.bubble_fraction` (exact schedule).  The published measured
runs are predicted by the repository's ``tools/time_accuracy.py`` (not installed: it reads the
checkout's ``formulas/measured_time.toml``).
"""

from .efficiency import gemm_time, gemm_efficiency, GEMM_CEILING  # noqa: F401
from .collectives import collective_time, group_link, LINK_LATENCY  # noqa: F401
from ..terms.pipeline_order import bubble_fraction, simulate, schedule_rule  # noqa: F401
from .step import Overlap, StepTime, step_time, step_time_grid  # noqa: F401

__all__ = ["gemm_time", "gemm_efficiency", "GEMM_CEILING", "collective_time", "group_link",
           "LINK_LATENCY", "bubble_fraction", "simulate", "schedule_rule", "Overlap",
           "StepTime", "step_time", "step_time_grid"]
