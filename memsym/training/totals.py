"""The per-GPU total of one pipeline stage: model states, activations, the peak phase's
transients and the allowances, composed once.

:func:`resolved_stage_total` is the one composition (``memsym.search`` compiles the same total
over its grid); :func:`phase_totals` gives each phase of the step its own total.
"""

from __future__ import annotations

import sympy as sp

from .. import model as models
from ..groups import ABSENT_STATES
from ..job import Job, Layout, Training, check_fields
from ..term import Term, Total
from ..terms import cuda_graphs as cg, transients as tr
from ..terms.allowances import allowance_terms
from ..terms.dispatcher_buffers import dispatcher_buffers
from ..unchecked_job import UncheckedJob, unchecked
from ..values import cached_max
from .activations import layers_in_flight, resolved_stage_activations
from .traits import resolve_arch, sequence_parallel_on, stage_role
from .transients import PHASE_SOURCE, PHASES, states_and_transients, stream_pools

#: Keys of the buffers a framework allocates outside PyTorch's allocator (:func:`outside_allocator`).
OUTSIDE_ALLOCATOR_KEYS = ("tp_comm_userbuffers", "deepep_buffers", "hybridep_buffers",
                          "hybridep_rdma_buffers", "reduce_scatter_pool", "all_gather_pool")


def stage_total(arch, layout: Layout = Layout(), training: Training = Training(),
                stage: int = 0) -> Total:
    r"""Per-GPU training memory of pipeline stage ``stage`` [bytes], symbolic in the registry.

    .. math::

        M = M_{\mathrm{states}}(N_{\mathrm{stage}}) + M_{\mathrm{act}}
            + M_{\mathrm{ws}} + M_{\mathrm{nccl}}
            + \varphi_{\mathrm{frag}}\,(M_{\mathrm{states}} + M_{\mathrm{act}})

    Model states use the exact parameters on one GPU of the stage
    (:func:`memsym.model.stage_parameters`): the dense part sharded over the data-parallel
    group including context parallelism (d·c, as Megatron-Core's distributed optimizer does),
    routed experts over the expert data-parallel group t·c·d/(e·t_e), with keys
    ``expert_weights``, ``expert_gradients``, ``expert_optimizer``.

    Examples
    --------
    >>> stage_total("llama2-7b", Layout(), Training(seq_length=4096)).keys[:3]
    ('weights', 'gradients', 'optimizer')
    """
    check_fields(layout, training)
    return resolved_stage_total(unchecked(resolve_arch(arch, training), layout, training), stage)


def phase_parts(j: Job | UncheckedJob, stage: int, acts: Total | None = None) -> tuple:
    """(Terms kept in every phase, activation Terms, {phase: transient Terms}) of stage
    ``stage``: the model states and the framework's buffers (the CUDA graphs', the captured
    optimizer step's pool), the activations (``acts``: the stage's
    :func:`resolved_stage_activations` when None) and each phase's transients, the pieces
    :func:`resolved_stage_total` adds and ``memsym.search`` compiles over its grid.

    Examples
    --------
    >>> from memsym.job import job
    >>> states, act, trans = phase_parts(job("llama2-7b"), 0)
    >>> [term.key for term in states][:3], sorted(trans) == sorted(PHASES)
    (['weights', 'gradients', 'optimizer'], True)
    """
    acts = resolved_stage_activations(j, stage) if acts is None else acts
    states, trans = states_and_transients(j, stage, acts)   # built once: the costliest part
    act = list(acts.terms)
    step = sp.Add(*(term.expr for term in trans["optimizer"]))
    if j.training.memory.optimizer_cuda_graph and j.training.memory.metric != "allocated" \
            and step != 0:
        # the captured step's allocations stay in its graph's pool: held in every phase, and
        # a replay allocates nothing more (max_memory_allocated misses the pool)
        states = states + [cg.optimizer_graph_pool(step)]
        trans = {**trans, "optimizer": ()}
    kept, pool = _cuda_graph_buffers(j, stage, act, trans)
    if pool:
        trans = {**trans, "optimizer": tuple(trans["optimizer"]) + pool}
    return states + list(kept), act, trans


def _cuda_graph_buffers(j: Job | UncheckedJob, stage: int, act: list, trans: dict) -> tuple:
    """(Terms kept in every phase, Terms of the optimizer phase) of Megatron-core's CUDA
    graphs (:mod:`memsym.terms.cuda_graphs`): Transformer Engine's static inputs per graphed
    layer and micro-batch in flight; the full-iteration graph's static micro-batches (the
    stages with a data loader, m known) and its pool held through the optimizer step (the
    reserved and device counts)."""
    mem = j.training.memory
    if mem.cuda_graph_impl == "transformer_engine":
        mods = mem.cuda_graph_modules
        n_lm = layers_in_flight(j, stage, lambda moe: cg.graphed_layer(mods, moe))
        attn = not mods or "attn" in mods
        term = cg.te_graph_inputs(n_lm, attn, sequence_parallel_on(j.layout), not mods)
        return ((term,) if term.expr != 0 else ()), ()
    if mem.cuda_graph_impl != "full_iteration":
        return (), ()
    kept = ()
    if j.m is not None and stage in (0, j.layout.p - 1):
        kept = (cg.full_iteration_batches(mem.batch_attention_mask),)
    if mem.metric == "allocated":   # replays allocate nothing: max_memory_allocated misses it
        return kept, ()
    running = list(dict.fromkeys(sp.Add(*(term.expr for term in trans[ph]))
                                 for ph in PHASES if ph != "optimizer"))
    peak = running[0] if len(running) == 1 else cached_max(*running)
    return kept, (cg.full_iteration_pool(sp.Add(*(term.expr for term in act)) + peak),)


def _phase_term(act: list, trans: dict):
    r"""The one Term that turns the steady sum into the peak over phases, or None.

    .. math:: M_{\mathrm{tr}} = \max(T_{\mathrm{fwd}},\; T_{\mathrm{loss}},\; T_{\mathrm{bwd}},\;
        T_{\mathrm{opt}} - M_{\mathrm{act}})

    so that :math:`M_{\mathrm{states}} + M_{\mathrm{act}} + M_{\mathrm{tr}}` is the largest
    phase: the optimizer step runs after every activation is freed.  A phase without Terms
    counts as 0 (the steady sum itself).  A step without Terms of its own is left out (its
    :math:`-M_{\mathrm{act}}` is below another phase's 0) unless the running phases hold
    states not yet made (:data:`memsym.groups.ABSENT_STATES`: the first iteration's forward
    and backward without the Adam moments), which the step then holds."""
    *running, to = (sp.Add(*(term.expr for term in trans[ph])) for ph in PHASES)
    A = sp.Add(*(term.expr for term in act))
    absent = any(term.key in ABSENT_STATES for ph in PHASES[:-1] for term in trans[ph])
    cands = list(dict.fromkeys(running + ([to - A] if to != 0 or absent else [])))
    if cands == [0]:
        return None
    peak = cached_max(*cands)
    return Term("phase_transient", peak, "transient peak of the step's largest phase "
                "(end of forward: logits and CE buffers, all-gathered layers; loss backward: "
                "the logits' gradients; blocks' backward: reduce-scatter buffers; optimizer "
                "step: its temporaries)", PHASE_SOURCE, label="peak-phase transients")


def _moe_stage(j: Job | UncheckedJob, stage: int) -> bool:
    """Whether pipeline rank ``stage`` holds an MoE layer (one that dispatches tokens)."""
    x, lay = j.model, j.layout
    if not x.is_moe:
        return False
    pattern = models.moe_layer_pattern(x)
    return any(pattern[i] for i in models.stage_layers(
        x, lay.p, stage, lay.first_stage_layers, lay.last_stage_layers, lay.pipeline_layout))


def outside_allocator(j: Job | UncheckedJob, stage: int) -> tuple:
    """Buffers a framework allocates outside PyTorch's caching allocator for the whole run,
    beside the ``workspace`` and ``nccl`` allowances (no fragmentation margin on them), and
    the memory PyTorch's allocator holds outside the default stream's reach: FSDP2's
    side-stream pools in the reserved and device counts
    (:func:`memsym.training.transients.stream_pools`); Transformer Engine's userbuffers under
    ``tp_comm_overlap``
    (:func:`memsym.terms.transients.tp_comm_userbuffers`) and the flex MoE dispatcher's
    DeepEP or HybridEP buffers on a stage with MoE layers
    (:mod:`memsym.terms.dispatcher_buffers`).  ``memsym.search`` adds the same Terms to each
    row after the allowances.

    Examples
    --------
    >>> from memsym.job import job
    >>> j = job("qwen3-30b-a3b", e=4, d=4, moe_dispatcher="deepep")
    >>> [term.key for term in outside_allocator(j, 0)]
    ['deepep_buffers']
    """
    training = j.training
    out = stream_pools(j, stage)    # the reserved count holds them too
    if training.states.convention != "framework" or training.memory.metric != "device":
        return out   # PyTorch's counters miss the rest
    if training.comm.tp_comm_overlap:
        out += (tr.tp_comm_userbuffers(training.states.precision == "fp8"),)
    if training.memory.moe_dispatcher in ("deepep", "hybridep") and _moe_stage(j, stage):
        # HybridEP's NVLink domain: the cluster's or GPU's (an NVL72 rack: 72), else 8
        domain = getattr(getattr(j, "cluster", None), "nvlink_domain", None) \
            or getattr(getattr(j, "gpu", None), "nvlink_domain", None)
        out += dispatcher_buffers(training.memory.moe_dispatcher, ranks_per_domain=domain)
    return out


def _beyond_allocated(terms, j: Job | UncheckedJob, stage: int) -> tuple:
    """What a total adds to its allocated ``terms``: the allowances (fragmentation a fraction
    of their sum) and the buffers outside PyTorch's allocator."""
    allocated = sp.Add(*(term.expr for term in terms))
    return tuple(allowance_terms(allocated)) + outside_allocator(j, stage)


def resolved_stage_total(j: Job | UncheckedJob, stage: int) -> Total:
    """:func:`stage_total` of a resolved architecture: the one composition of the per-GPU
    peak (model states + activations + the peak phase's transients + allowances), in the
    count symbols of :func:`stage_counts`; ``memsym.search`` compiles this same total over
    its grid."""
    states, act, trans = phase_parts(j, stage)
    terms = states + act
    peak = _phase_term(act, trans)
    if peak is not None:
        terms.append(peak)
    terms += list(_beyond_allocated(terms, j, stage))
    return Total(f"training memory per GPU, pipeline stage {stage} "
                 f"({stage_role(stage, j.layout.p)})", tuple(terms))


def phase_totals(j: Job | UncheckedJob, stage: int, parts: tuple | None = None) -> dict:
    r"""Each phase's per-GPU total on stage ``stage`` [bytes]: phase name -> Total.

    .. math::

        M_{\mathrm{fwd}} = S + A + T_{\mathrm{fwd}},\quad
        M_{\mathrm{loss}} = S + A + T_{\mathrm{loss}},\quad
        M_{\mathrm{bwd}} = S + A + T_{\mathrm{bwd}},\quad
        M_{\mathrm{opt}} = S + T_{\mathrm{opt}}

    each with its allowances (fragmentation a fraction of that phase's allocation); the
    largest equals :func:`stage_total`.  ``parts``: the stage's :func:`phase_parts` where the
    caller has them.

    Examples
    --------
    >>> from memsym.model import preset
    >>> from memsym.job import job as make_job
    >>> tots = phase_totals(make_job("llama2-7b"), 0)
    >>> sorted(tots)
    ['backward', 'forward', 'loss-backward', 'optimizer']
    """
    states, act, trans = phase_parts(j, stage) if parts is None else parts
    out = {}
    for ph in PHASES:
        terms = list(states) + (list(act) if ph != "optimizer" else []) + list(trans[ph])
        out[ph] = Total(f"{ph} phase, pipeline stage {stage}",
                        tuple(terms) + _beyond_allocated(terms, j, stage))
    return out
