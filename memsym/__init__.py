"""memsym: the memory and communication cost of LLM training, derived symbolically.

Every term is a cited SymPy expression in the registry's symbols; terms compose into
totals that simplify, differentiate, solve, print as LaTeX and compile for numeric sweeps.

>>> from memsym import model_state, byte_widths
>>> model_state("distributed-optimizer").factored({"b_g": 4, "b_m": 4, "b_o": 8})
N*(b_hp + 16/d)/(p*t)
"""

from .analysis import Solution, largest, smallest, smallest_gpus
from .errors import DivisibilityError, InvalidValueError, MemsymError, NoFitError, UnknownNameError
from .term import Source, Term, Total
from .terms.model_state import byte_widths, host_state, model_state
from .values import as_values, exact

__version__ = "0.1.0"

__all__ = [
    "Source", "Term", "Total", "Solution",
    "model_state", "host_state", "byte_widths",
    "smallest", "largest", "smallest_gpus", "as_values", "exact",
    "MemsymError", "InvalidValueError", "UnknownNameError", "DivisibilityError", "NoFitError",
]
