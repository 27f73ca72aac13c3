"""memsym: the memory and communication cost of LLM training, derived symbolically.

Cited SymPy terms (model states, activations, communication, compute) in one symbol registry;
architectures and presets; the per-GPU total of a training job; solvers for the smallest layout
that fits; step time and cost. Totals simplify, solve, print as LaTeX and compile for sweeps.

>>> from memsym import model_state, byte_widths
>>> model_state("distributed-optimizer", convention="seed000").factored({"b_g": 4, "b_m": 4, "b_o": 8})
N*(b_hp + 16/d)/(p*t)
"""

import importlib

# --- memsym's errors and version load with the package; everything else on first use ----------
from .errors import DivisibilityError, InvalidValueError, MemsymError, NoFitError, UnknownNameError
from .version import __version__

#: name -> the module that defines it, imported on first use (PEP 562): ``import memsym`` and
#: the command line load only what a run uses (``memsym estimate --params`` needs no model,
#: job or activation modules; ``memsym --help`` no SymPy).  terms and exact values; model
#: (architectures, presets, config.json, parameter counts); job and training (the per-GPU
#: total of a layout) and the frameworks' conventions; analysis (the smallest degree or
#: largest size that fits); hardware and time (communication, pipeline bubble, FLOPs, step
#: time, cost).
_LAZY = {
    **dict.fromkeys(("Source", "Term", "Total"), ".term"),
    **dict.fromkeys(("as_values", "exact"), ".values"),
    **dict.fromkeys(("byte_widths", "host_state", "model_state"), ".terms.model_state"),
    **dict.fromkeys(("korthikanti", "layer_activations"), ".terms.activations"),
    **dict.fromkeys(("Architecture", "from_hf_config", "parameter_count", "preset",
                     "resolve_model"), ".model"),
    **dict.fromkeys(("Layout", "Training", "training_memory"), ".training"),
    **dict.fromkeys(("convention_breakdown", "megatron_bridge", "megatron_lm"), ".conventions"),
    **dict.fromkeys(("Solution", "largest", "smallest", "smallest_gpus"), ".analysis"),
    **dict.fromkeys(("communication_per_step", "communication_time"), ".terms.communication"),
    **dict.fromkeys(("bubble_fraction", "global_batch"), ".terms.pipeline"),
    **dict.fromkeys(("flops_per_iteration", "hfu", "mfu", "step_time"), ".terms.compute"),
    **dict.fromkeys(("gpu_hours", "training_cost", "training_time"), ".terms.training_cost"),
    "step_report": ".timing.report",
}


def __getattr__(name):

    if name not in _LAZY:
        # a submodule (``memsym.symbols`` after a bare ``import memsym``), as when the
        # package imported its terms eagerly
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'memsym' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    # terms, exact values and errors
    "Source", "Term", "Total", "as_values", "exact",
    "model_state", "host_state", "byte_widths", "korthikanti", "layer_activations",
    "MemsymError", "InvalidValueError", "UnknownNameError", "DivisibilityError", "NoFitError",
    # model
    "Architecture", "preset", "from_hf_config", "resolve_model", "parameter_count",
    # job and training
    "Layout", "Training", "training_memory",
    "convention_breakdown", "megatron_lm", "megatron_bridge",
    # analysis and search
    "Solution", "smallest", "largest", "smallest_gpus",
    # hardware and time
    "communication_per_step", "communication_time", "bubble_fraction", "global_batch",
    "flops_per_iteration", "step_time", "mfu", "hfu", "training_time", "gpu_hours",
    "training_cost", "step_report",
]
