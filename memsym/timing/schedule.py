"""The exact pipeline schedule, under the name the step-time code and users know.

The simulator is a pure function of the schedule's sizes (p, m, v, N) with no job behind it,
so it lives with the formula families, in :mod:`memsym.terms.pipeline_order` (each rank's
op order in :mod:`memsym.terms.pipeline_rank_order`), where the bubble term and the training
total use it; this module re-exports it.
"""

from ..terms.pipeline_order import (MAX_OPS, SCHEDULES, Simulation, bubble_fraction,
                                    chunk_peak, live_by_held_gradients, schedule_rule, simulate)
from ..terms.pipeline_rank_order import rank_order, schedule_table

__all__ = ["SCHEDULES", "MAX_OPS", "schedule_rule", "schedule_table", "rank_order",
           "live_by_held_gradients", "simulate",
           "Simulation", "bubble_fraction", "chunk_peak"]
