"""memsym: the memory and communication cost of LLM training, derived symbolically.

Every term is a cited SymPy expression in the registry's symbols; terms compose into
totals that simplify, differentiate, solve, print as LaTeX and compile for numeric sweeps.

>>> from memsym import model_state, byte_widths
>>> model_state("distributed-optimizer", convention="seed000").factored({"b_g": 4, "b_m": 4, "b_o": 8})
N*(b_hp + 16/d)/(p*t)
"""

from .analysis import Solution, largest, smallest, smallest_gpus
from .errors import DivisibilityError, InvalidValueError, MemsymError, NoFitError, UnknownNameError
from .term import Source, Term, Total
from .terms.model_state import byte_widths, host_state, model_state
from .values import as_values, exact
from .terms.communication import communication_per_step, communication_time  # issue 4
from .terms.pipeline import bubble_fraction, global_batch  # issue 4
from .terms.compute import (flops_per_iteration, gpu_hours, hfu, mfu, step_report,  # issue 4
                            step_time, training_cost, training_time)
from .model import (Architecture, from_hf_config, parameter_count, preset,  # issue 3: models
                     resolve_model)
from .conventions import convention_breakdown, megatron_bridge, megatron_lm  # issue 3: conventions
from .training import Layout, Training, training_memory  # issue 3: training total
from .terms.activations import korthikanti, layer_activations  # issue 3: activations

__version__ = "0.1.0"

__all__ = [
    "Source", "Term", "Total", "Solution",
    "model_state", "host_state", "byte_widths",
    "smallest", "largest", "smallest_gpus", "as_values", "exact",
    "MemsymError", "InvalidValueError", "UnknownNameError", "DivisibilityError", "NoFitError",
    "Architecture", "preset", "from_hf_config", "resolve_model", "parameter_count",
    "communication_per_step", "communication_time", "bubble_fraction", "global_batch",  # issue 4
    "flops_per_iteration", "step_time", "mfu", "hfu", "training_time", "gpu_hours",
    "training_cost", "step_report",
    "convention_breakdown", "megatron_lm", "megatron_bridge",  # issue 3: conventions
    "Layout", "Training", "training_memory", "korthikanti", "layer_activations",  # issue 3
]
