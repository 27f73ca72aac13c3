r"""Configuration search: every layout that fits, ranked; the smallest cluster; the largest batch.

The per-GPU training total (:func:`memsym.training.stage_total`: model states + activations +
allowances on each pipeline stage) is compiled once per *discrete* choice (recompute mode,
sequence parallelism, interleaving, stage role) and evaluated with numpy broadcasting over
the whole grid of *numeric* knobs (t, p, c, d, e, v, b, m, and the exact parameters each
stage holds); no SymPy runs per configuration.  Framework rules are numpy masks over the
same grid, each named (:data:`RULES`), so every excluded layout says which rule excluded it;
uneven first/last pipeline stages (:func:`stage_splits`) are part of the grid.  The predicted
step time (:func:`memsym.timing.step.step_time_grid`: GEMMs after the splits on the GPU's
efficiency curve, collectives with overlap, the exact schedule; breakdown :data:`TIME_PARTS`)
ranks the layouts that fit.  Every pipeline stage that can be the most loaded is evaluated:
first, last, and the lowest stage of each distinct middle make-up (dense/MoE layers).

Sizing questions are solved exactly where the total is monotone in the unknown: the
smallest d for a layout (hence the smallest GPU count) by :func:`memsym.analysis.smallest`
(closed form, then the integer), checked against the vectorized search.

References
----------
.. [megatron-lm-arguments] Megatron-Core ``transformer_config.py``: CPU offloading refuses
   p > 1; VPP needs (L/p) % v == 0.
.. [narayanan] arXiv:2104.04473 (layouts, bubble, step time; §3.2 Takeaway #1: tensor
   parallelism stays inside a node, t <= GPUs per node).

The package: :mod:`.space` (the problem), :mod:`.choices` (its sharding and recompute
choices), :mod:`.grid` (the raw grid and the rules),
:mod:`.templates` (compiled pieces), :mod:`.evaluate` (the vectorized evaluation),
:mod:`.step_times` (the rows' step times),
:mod:`.exact` (one layout's exact bytes), :mod:`.results` (:func:`search`), :mod:`.sizing`
(:func:`smallest_d`, :func:`min_gpus`, :func:`largest_fit`), :mod:`.fewest_gpus` (the
vectorized smallest d of every candidate layout, for :func:`min_gpus`).
"""

from __future__ import annotations

from .choices import SCHEMES
from .space import RULES, Space, make_space  # noqa: F401 (make_space: used by callers)
from .grid import explain, raw_grid, rule_masks, stage_splits  # noqa: F401
from .step_times import TIME_PARTS, launch_overlaps
from .exact import group_bytes  # noqa: F401
from .results import SearchResult, search
from .sizing import MinGpus, largest_fit, min_gpus, smallest_d

__all__ = ["RULES", "SCHEMES", "TIME_PARTS", "Space", "SearchResult", "MinGpus", "search",
           "min_gpus", "smallest_d", "largest_fit", "explain", "raw_grid", "stage_splits",
           "launch_overlaps"]
