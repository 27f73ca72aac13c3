"""The framework rules a training job must satisfy, each written once, as data.

A :class:`Rule` has a name (what ``memsym search`` shows under "excluded by rule"), a check
that works on Python integers and on numpy arrays alike (True where the rule is broken), the
line a refusal prints, and the source it comes from.  :func:`check` raises the first broken
rule for one job (estimate, solve, conventions); :func:`masks` evaluates every rule over a
grid of layouts (search); :func:`broken` names the rules one layout breaks.

This module assembles the one table, :data:`RULES`, from the modules that own the rules by
what they guard: the parallel layout, the sequence and the batch (:mod:`memsym.rules_layout`),
the training states (:mod:`memsym.rules_states`) and a model's kind, its experts and hybrid
layers (:mod:`memsym.rules_model_kinds`).
"""

from __future__ import annotations

from typing import Mapping

from .frameworks import framework
from .rule import Rule
from .rules_layout import LAYOUT_RULES, SEQUENCE_RULES
from .rules_model_kinds import (ATTENTION_RULES, DISPATCHER_RULES, EXPERT_RULES,
                                FRAMEWORK_RULES, HYBRID_RULES)
from .rules_states import STATE_RULES
from .text import shared_doc

__all__ = ["Rule", "RULES", "LAUNCH", "PREFERENCES", "knobs", "masks", "broken", "check",
           "te_cp_without_a2a", "cp_spellings"]

_doc = shared_doc(rule_params="""
    x : memsym.model.Resolved
        The model.
    k : mapping
        The job's knobs (:func:`knobs`).
    names : iterable of str, optional
        The rules to test (default: the launch rules, :data:`LAUNCH`).
    """)

#: Every rule, by name, in the order :func:`check` tests them.
RULES: dict = {r.name: r for r in (
    # first: no other knob makes such a job describable, so no other refusal is worth reading
    *FRAMEWORK_RULES,
    *LAYOUT_RULES,
    *EXPERT_RULES,
    *SEQUENCE_RULES,
    *STATE_RULES,
    *DISPATCHER_RULES,
    *HYBRID_RULES,
    *ATTENTION_RULES,
)}

#: The rules a framework refuses to launch against, and memsym's search preferences.
LAUNCH = tuple(n for n, r in RULES.items() if r.kind == "launch")
PREFERENCES = tuple(n for n, r in RULES.items() if r.kind == "preference")
#: The rules on the micro-batch count m (checked once the batch rule has given it).
NEED_M = ("vpp-microbatches", "torch-pp-microbatches")


def knobs(layout, training=None, *, gpus=None, gpus_per_node=None, m=None) -> dict:
    """The knob values the rules read, from a :class:`~memsym.training.Layout` and
    :class:`~memsym.training.Training`.

    Parameters
    ----------
    layout : Layout
        The parallel layout (``t p c d e t_e v``, sequence parallelism, uneven stages).
    training : Training, optional
        The training step (``s b B``, offload, sharding); without it the batch rules are
        skipped.
    gpus : int, optional
        World size G [GPUs], when the rules should check it.
    gpus_per_node : int, optional
        GPUs per node [GPUs].
    m : int, optional
        Micro-batches per step and pipeline [1], when known.

    Returns
    -------
    dict
        Knob name -> value, as :data:`RULES` read them.

    Examples
    --------
    >>> from memsym.training import Layout
    >>> knobs(Layout(t=2, p=4))["t_e"]
    2
    """
    k = {"t": layout.t, "p": layout.p, "c": layout.c, "d": layout.d, "e": layout.e,
         "t_e": layout.expert_tp, "v": layout.v or 1,
         "sequence_parallel": bool(layout.sequence_parallel),
         "first_stage_layers": layout.first_stage_layers,
         "last_stage_layers": layout.last_stage_layers, "gpus": gpus,
         "pipeline_layout": getattr(layout, "pipeline_layout", None) is not None,
         "gpus_per_node": gpus_per_node, "m": m}
    if training is not None:
        fw = framework(getattr(training, "framework", "megatron"))
        # the knobs "torchtitan" and "deepspeed" (memsym.search.grid builds them too) are the
        # behaviours memsym.frameworks records: torch's pipelining, the transformers model code
        k.update({"s": training.batch.seq_length, "b": training.batch.micro_batch_size,
                  "B": training.batch.global_batch_size, "offload": training.states.offload != "none",
                  "shards_gradients": training.states.sharding in ("zero2", "zero3", "fsdp"),
                  "zero1": training.states.sharding == "zero1",
                  # Megatron-FSDP (any strategy), and Megatron-LM's other FSDP: Torch-FSDP2
                  "megatron_fsdp": training.states.megatron_fsdp is not None,
                  "torch_fsdp2": (fw.megatron_options and training.states.sharding == "fsdp"
                                  and training.states.megatron_fsdp is None),
                  "torchtitan": fw.torch_pipelining, "deepspeed": fw.hf_model_code,
                  "megatron_options": fw.megatron_options,
                  "tp_sequence_parallel": fw.tp_sequence_parallel,
                  "gpipe": training.pipeline.schedule == "gpipe",
                  "flash_attention": bool(training.value("flash_attention")),
                  "v_placement": training.pipeline.stage_placement == "v",
                  "microbatch_group_size": training.pipeline.microbatch_group_size,
                  "moe_dispatcher": training.memory.moe_dispatcher,
                  "precision": training.states.precision,
                  "muon": training.states.optimizer == "muon",
                  "fp4_param_gather": bool(training.states.fp4_param_gather),
                  "fp8_param_gather": bool(training.states.fp8_param_gather),
                  "bf16_layers": tuple(training.states.bf16_layers),
                  "te_cp_without_a2a": te_cp_without_a2a(fw, training.comm.cp_comm_type),
                  **cp_spellings(fw, training.comm.cp_comm_type)})
    return k


def _te_cp_types(fw, cp_comm_type):
    """The CP types of a framework whose context parallelism is Transformer Engine's, one per
    layer or one for all (None: Megatron's default, p2p); None for another framework."""
    if not (fw.cp_attention and fw.cp_attention[0] == "transformer-engine"):
        return None
    return (cp_comm_type,) if isinstance(cp_comm_type, str) or cp_comm_type is None \
        else tuple(cp_comm_type)


def te_cp_without_a2a(fw, cp_comm_type) -> bool:
    """Whether a framework's context parallelism is Transformer Engine's and its method not
    a2a (``cp_comm_type``: one name or Megatron's one per layer; None the default, p2p).

    >>> from memsym.frameworks import FRAMEWORK
    >>> te_cp_without_a2a(FRAMEWORK["megatron"], None), te_cp_without_a2a(FRAMEWORK["megatron"], "a2a")
    (True, False)
    """
    types = _te_cp_types(fw, cp_comm_type)
    return types is not None and any(kind != "a2a" for kind in types)


def cp_spellings(fw, cp_comm_type) -> dict:
    """Of a Transformer Engine framework's CP types (one name or Megatron's one per layer;
    None the default, p2p): ``cp_allgather``, every layer's an all-gather however spelt
    (Megatron-core's DSA attention drops the underscore, transformer_config.py:3172 at
    d98e8a64dd); ``cp_spelt_allgather``, any spelt ``allgather``, which Transformer Engine's
    attention refuses (context_parallel.py:5139 at d0067d0da6).

    >>> from memsym.frameworks import FRAMEWORK
    >>> cp_spellings(FRAMEWORK["megatron"], "all_gather"), cp_spellings(FRAMEWORK["megatron"], None)
    ({'cp_allgather': True, 'cp_spelt_allgather': False}, {'cp_allgather': False, 'cp_spelt_allgather': False})
    """
    types = _te_cp_types(fw, cp_comm_type)
    if types is None:
        return {"cp_allgather": False, "cp_spelt_allgather": False}
    spelt = [str(kind).replace("_", "").lower() for kind in types]
    return {"cp_allgather": all(kind == "allgather" for kind in spelt),
            "cp_spelt_allgather": "allgather" in types}


def masks(x, k: Mapping, names=None) -> dict:
    """``rule name -> boolean array`` (True where broken) over a grid of knob arrays.

    Parameters
    ----------
    x : memsym.model.Resolved
        The model.
    k : mapping
        Knob name -> numpy array (or scalar), as :func:`knobs` names them; a rule whose
        inputs are missing is left out.
    names : iterable of str, optional
        The rules to test (default: all of :data:`RULES`).

    Returns
    -------
    dict of str to numpy.ndarray
        Rule name -> boolean array of the grid's shape, True where the rule is broken.

    Examples
    --------
    >>> import numpy as np
    >>> from memsym.model import preset
    >>> k = {"t": np.array([8, 16]), "p": np.array([1, 1]), "e": 1, "t_e": np.array([8, 16])}
    >>> masks(preset("llama2-70b"), k, ["tp-kv-heads"])["tp-kv-heads"].tolist()
    [False, True]
    """
    import numpy as np

    shape = np.shape(k["t"])
    out = {}
    for name in (RULES if names is None else names):
        rule = RULES[name]
        need = ("s", "b") if name in ("cp-seq", "batch") else ()
        if any(n not in k for n in need):
            continue
        out[name] = np.broadcast_to(np.asarray(rule.test(x, k), dtype=bool), shape)
    return out


@_doc
def broken(x, k: Mapping, names=None) -> list:
    """The names of the rules one job breaks, in table order (empty when it is valid).

    Parameters
    ----------
    {rule_params}

    Returns
    -------
    list of str
        Names of the broken rules.

    Examples
    --------
    >>> from memsym.model import preset
    >>> from memsym.training import Layout, Training
    >>> broken(preset("llama2-70b"), knobs(Layout(t=16), Training(seq_length=4096)))
    ['tp-kv-heads']
    """
    out = []
    for name in (LAUNCH if names is None else names):
        rule = RULES[name]
        try:
            bad = rule.test(x, k)
        except KeyError:          # a rule whose inputs this job does not carry
            continue
        if bool(bad):
            out.append(name)
    return out


@_doc
def check(x, k: Mapping, names=None) -> None:
    """Raise the first broken launch rule (its own error class and message).

    Parameters
    ----------
    {rule_params}

    Raises
    ------
    memsym.errors.InvalidValueError
        The first broken rule's error (its :class:`~memsym.errors.DivisibilityError` for the
        divisibility rules), with its message.

    Examples
    --------
    >>> from memsym.model import preset
    >>> from memsym.training import Layout, Training
    >>> check(preset("llama2-70b"), knobs(Layout(t=16), Training(seq_length=4096)))
    Traceback (most recent call last):
    ...
    memsym.errors.DivisibilityError: tensor-parallel size t=16 must divide the KV heads (num_query_groups=8)
    """
    for name in broken(x, k, names):
        rule = RULES[name]
        raise rule.error(rule.message(x, k))
