"""The userbuffers config a Megatron-Bridge recipe names (``comm_overlap.tp_comm_overlap_cfg``)
as the job option ``tp_comm_overlap_cfg``, so that ``memsym time --bridge-recipe`` prices the
TP overlaps the recipe runs (:mod:`memsym.timing.userbuffers`), as the validation does.

Megatron-Bridge hands the named ``TransformerLayerTPOverlapCfg`` to Transformer Engine's
``initialize_ub`` (``training/comm_overlap.py`` lines 620-631 at 067f987df0); without one,
Transformer Engine's default config runs.  The perf recipes name one by its module-level name
(``comm_overlap.tp_comm_overlap_cfg = userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192``),
which the recipe table keeps as that name.
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..timing.userbuffers import UB_CONFIGS

__all__ = ["recipe_ub_option"]


def recipe_ub_option(values: dict, tp_overlap: bool, notes: list) -> dict:
    """``{"tp_comm_overlap_cfg": name}`` where the recipe names a userbuffers config memsym
    has (:data:`memsym.timing.userbuffers.UB_CONFIGS`) and runs TP overlap, else ``{}``; a
    config memsym does not have is said in ``notes`` (priced as Transformer Engine's default).

    Examples
    --------
    >>> name = "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192"
    >>> recipe_ub_option({"comm_overlap.tp_comm_overlap_cfg": name}, True, [])
    {'tp_comm_overlap_cfg': 'userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192'}
    >>> recipe_ub_option({"comm_overlap.tp_comm_overlap_cfg": name}, False, [])
    {}
    """
    name = values.get("comm_overlap.tp_comm_overlap_cfg")
    if name is None or not tp_overlap:
        return {}
    if not isinstance(name, str):
        raise InvalidValueError("comm_overlap.tp_comm_overlap_cfg: give a userbuffers config's "
                                "name (e.g. userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192)")
    if name not in UB_CONFIGS:
        notes.append(f"comm_overlap.tp_comm_overlap_cfg {name:.80}: a userbuffers config memsym "
                     "has not transcribed; the step time prices Transformer Engine's default")
        return {}
    return {"tp_comm_overlap_cfg": name}
