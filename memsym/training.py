"""The per-GPU training-memory total on the most-loaded GPU.

Model states (:func:`memsym.terms.model_state.model_state` with the exact parameter count of
the stage) + activations (:mod:`memsym.terms.activations` and :mod:`memsym.terms.schedule`)
+ named allowances (workspace, NCCL buffers, allocator fragmentation), each a registered
symbol with a documented default that a user can set to 0 or to a measured value.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Mapping

import sympy as sp

from .errors import InvalidValueError, choose
from .frameworks import framework as framework_record
from .groups import ACTIVATION_KEYS, ALLOWANCE_KEYS, STATE_KEYS
from .limits import LIMITS
from .symbols import (E, L, N_a, N_bkt, N_exp, N_lin, N_ll, N_pf, N_q, N_rep, N_tp, N_u, V, a, b,
                      b_g, b_hp, b_m, b_o, b_r, b_u, c, c_f, d, d_h, e, f, f_e, f_sh, g, h, k, m,
                      n_ag, n_bkt, p, s, t, t_e, v)
from .terms.allowances import (ALLOWANCE_TERMS, ALLOWANCES, METRICS, WORKSPACES, Allowance,
                                allowance_terms, allowance_values)
from .term import Source, Term, Total
from .terms.activations import (RECOMPUTE, embedding_activations, layer_activations,
                                lora_gathered_inputs, output_activations)
from .terms.model_state import CONVENTIONS, OPTIMIZERS, byte_widths, model_state
from .terms.schedule import (SCHEDULES, embedding_microbatches, logits_microbatches,
                             stage_microbatches, torch_round_size, v_stage_microbatches)
from .values import as_expr, exact
from .job import (Job, Layout, Training, check_fields, dropout_kept, job as make_job,
                  microbatches, recompute_modules_of, validate as _validate_job)
from .unchecked_job import UncheckedJob, unchecked
from . import model as models
from .terms.pipeline_order import chunk_peak
from .terms.pipelining_buffers import pipelining_buffers, pipelining_recv_buffers
from .terms.adapters import LORA_TARGETS, lora
from .terms import (context_parallel as cp, mamba as hybrid_terms, recipe_buffers as rb,
                     torch_moments as tm, transients as tr)

__all__ = ["Layout", "Training", "Allowance", "ALLOWANCES", "ALLOWANCE_TERMS", "WORKSPACES",
           "PHASES", "TrainingEstimate", "allowance_values", "phase_totals", "phase_transients",
           "STEP_STATE_KEYS", "allowance_terms", "arch_values", "microbatches", "output_stage",
           "validate", "job_memory", "stage_activations", "stage_total", "training_values",
           "training_memory", "STATE_KEYS", "ACTIVATION_KEYS", "ALLOWANCE_KEYS", "RECOMPUTE",
           "SCHEDULES"]

# ---------------------------------------------------------------------------------------------
# allowances (memsym.terms.allowances): named, cited, each a registered symbol with a default
# ---------------------------------------------------------------------------------------------
#: Keys of the buffers a framework allocates outside PyTorch's allocator (:func:`_outside_allocator`).
OUTSIDE_ALLOCATOR_KEYS = ("tp_comm_userbuffers",)


# ---------------------------------------------------------------------------------------------
# the architecture's sizes as symbol values
# ---------------------------------------------------------------------------------------------
def _resolve(arch, training):
    """An Architecture, preset name or config.json path, with Megatron's defaults filled in."""
    return models.resolve(models.resolve_model(arch), seq_length=training.batch.seq_length)


def arch_values(arch, t_: int = 1) -> dict:
    """Registry symbol -> exact value for a resolved architecture (padded vocabulary at t).

    Examples
    --------
    >>> from memsym.model import preset
    >>> vals = arch_values(preset("llama2-7b"))
    >>> vals[h], vals[g], vals[f], vals[V]
    (4096, 32, 11008, 32000)
    """
    x = models.resolve(arch, seq_length=1) if arch.max_position_embeddings is None else models.resolve(arch)
    vals = {h: x.hidden_size, a: x.num_attention_heads, g: x.num_query_groups,
            d_h: x.kv_channels, f: x.ffn_hidden_size, L: x.num_layers,
            V: models.padded_vocab_size(x.vocab_size, t_, x.make_vocab_size_divisible_by)}
    if x.num_experts:
        vals.update({E: x.num_experts, k: x.moe_router_topk, f_e: x.moe_ffn_hidden_size,
                     f_sh: x.moe_shared_expert_intermediate_size or 0})
    return {key: sp.Integer(val) for key, val in {**vals, **models.stages.mamba_values(x)}.items()}


def _mla(x) -> dict | None:
    names = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
    return {name: getattr(x, name) for name in names} if x.multi_latent_attention else None


# ---------------------------------------------------------------------------------------------
# one stage
# ---------------------------------------------------------------------------------------------
def output_stage(layout: Layout, training: Training) -> int:
    """The pipeline rank that holds the final norm, the output layer and the loss.

    The last (stage i on rank i mod p), or 0 under torch's V placement
    (``training.stage_placement == "v"``: stages r and 2p - 1 - r on rank r, so rank 0
    holds the first and the last stage).

    Examples
    --------
    >>> output_stage(Layout(p=4), Training()), output_stage(
    ...     Layout(p=4, v=2), Training(framework="torchtitan", stage_placement="v"))
    (3, 0)
    """
    return 0 if training.pipeline.stage_placement == "v" else layout.p - 1


def _role(i: int, pp: int) -> str:
    return "only" if pp == 1 else "first" if i == 0 else "last" if i == pp - 1 else "middle"


def stage_activations(arch, layout: Layout = Layout(), training: Training = Training(),
                      stage: int = 0) -> Total:
    r"""Activations pipeline stage ``stage`` holds at its peak [bytes].

    .. math::

        M_{\mathrm{act}} = n_{\mathrm{mb}}(i)\,\frac{L_i}{v}\,A_{\mathrm{layer}}
            + [i = 0]\,n_{\mathrm{emb}}\,A_{\mathrm{emb}}
            + [i = p - 1]\,n_{\mathrm{logits}}\,(A_{\mathrm{out}} + n_{\mathrm{mtp}}(A_{\mathrm{layer}} + A_{\mathrm{out}}))
            + [\text{full}]\,A_{\mathrm{layer}}^{\mathrm{none}}

    with :math:`n_{\mathrm{mb}}(i)` from :func:`memsym.terms.schedule.stage_microbatches`
    (L_i/v layers per model chunk; an even split of a uniform model keeps the symbolic L/p),
    the embedding on the first stage, the output layer, logits and MTP layers on the last.
    Under full recompute the layer being recomputed briefly holds all its activations again
    (the ``recompute_working_set``, once per stage).

    Returns
    -------
    Total
        Terms ``layer_activations``, and where they apply ``embedding_activations``,
        ``output_activations``, ``mtp_activations``, ``recompute_working_set``.

    Examples
    --------
    Seed 002's 7B-class stack without recompute, one micro-batch, no pipeline: L layers of
    Eq. 1 plus the embedding and the output layer:

    >>> from memsym.model import Architecture
    >>> gpt = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...                    vocab_size=32000, position_embedding_type="rope")
    >>> A = stage_activations(gpt, Layout(), Training(seq_length=4096))
    >>> A.keys
    ('layer_activations', 'embedding_activations', 'output_activations')
    """
    check_fields(layout, training)
    return resolved_stage_activations(unchecked(_resolve(arch, training), layout, training), stage)


def _output_layer(x, layout: Layout, training: Training) -> Total:
    """One micro-batch's activations of the final norm, the output layer and the loss
    (:func:`memsym.terms.activations.output_activations` for this job)."""
    sp_on = _sequence_parallel(layout)
    # torchtitan's output layer: torch's ColwiseParallel (saves the gathered input), fp32 norm
    titan = framework_record(training.framework).torch_output_layer
    out = output_activations(sequence_parallel=sp_on, norm=x.normalization.lower(),
                             compiled_loss=training.memory.compiled_loss,
                             gathered_output_input=sp_on and titan,
                             fp32_norm=titan and x.normalization.lower() == "rmsnorm")
    if _loss_kind(layout, training) == "te":
        return rb.with_te_logits(out)
    return Total(out.name, tm.gathered_logits(out.terms)) if _logits_gathered(layout, training) \
        else out


def _logits_gathered(layout: Layout, training: Training) -> bool:
    """Whether every TP rank holds all logits (DTensor TP without loss_parallel)."""
    return framework_record(training.framework).dtensor_tp and layout.t > 1 \
        and not training.memory.loss_parallel


def _activation_width(training: Training) -> int:
    """Bytes per element of the 16-bit activations and buffers (4 when training in fp32)."""
    return 4 if training.states.precision == "fp32" else 2


def _sequence_parallel(layout: Layout) -> bool:
    """Whether sequence parallelism is on: Megatron turns it off at t = 1."""
    return bool(layout.sequence_parallel and layout.t > 1)


def _boundary_bytes(sp_on: bool, training: Training) -> sp.Expr:
    """One micro-batch's hidden states at a pipeline-stage boundary [bytes]: 2 tau h / sigma
    (4 in fp32), sequence-sharded over t under sequence parallelism."""
    width = _activation_width(training)
    return width * b * s * h / (c * (t if sp_on else 1))


#: Where each full-recompute method's split of a chunk's layers is defined.
_RECOMPUTE_METHOD_SOURCES = {
    "uniform": "Megatron-LM transformer_block.py _checkpointed_forward",
    "block": "Megatron-LM transformer_block.py _checkpointed_forward",
    "every": "torchtitan distributed/activation_checkpoint.py _apply_layer_sac",
}


def _chunk_activations(stack, per_chunk, training: Training, chunks=1) -> sp.Expr:
    """One model chunk's activations, ``stack(mode)`` under the training's recompute, with
    Megatron's ``_checkpointed_forward`` methods under full recompute: block N checkpoints the
    first N layers of the chunk (the rest keep everything); uniform N keeps one input per
    group of N; torchtitan's ``every`` N checkpoints floor(n/N) of the n blocks of a rank of
    ``chunks`` model chunks (its counter runs on across them: the rank's share per chunk).
    ``per_chunk``: the chunk's layers (a number or an expression)."""
    act = stack(training.memory.recompute)
    method, n_rec = training.memory.recompute_method, training.memory.recompute_num_layers
    if training.memory.recompute != "full" or method is None:
        return act
    if method == "uniform":
        return act * sp.ceiling(per_chunk / n_rec) / per_chunk
    if method == "block":
        frac = sp.Min(n_rec, per_chunk) / per_chunk
    else:
        # torchtitan's _apply_layer_sac: block k (from 1, one counter per process) is wrapped
        # when k % N == 0
        n_rank = per_chunk * chunks
        frac = sp.floor(n_rank / n_rec) / n_rank
    return frac * act + (1 - frac) * stack("none")


def _layout_in_flight(layout: Layout, training: Training, stage: int, pattern, per_layer,
                      group, m_num) -> tuple:
    """(chunk micro-batches at the peak, Σ over chunks of their activations x micro-batches)
    for a custom pipeline layout: each chunk's own layers (dense and MoE) and recompute
    (:func:`_chunk_activations`), weighted by its micro-batches in flight at the rank's peak
    (:func:`memsym.timing.schedule.chunk_peak`; m unknown: enough micro-batches that the
    warm-up is not cut short)."""
    pl = layout.pipeline_layout
    ids = pl.layer_ids(stage)
    n_grp = group or layout.p
    if m_num is None:   # "enough": past the warm-up and a whole steady round
        m_num = n_grp * (pl.v + 2 + -(-2 * layout.p // n_grp))
    live = chunk_peak(stage, layout.p, int(m_num), pl.v, [len(c) for c in ids], group,
                      gpipe=training.pipeline.schedule == "gpipe")
    total = sp.Integer(0)
    for n_mb, chunk in zip(live, ids):
        if not chunk or not n_mb:
            continue
        moe = sum(pattern[i] for i in chunk)

        def stack(mode, moe=moe, dense=len(chunk) - moe):
            return dense * per_layer(False, mode) + moe * per_layer(True, mode)

        total += n_mb * _chunk_activations(stack, sp.Integer(len(chunk)), training)
    return live, total


def _in_flight_chunks(layout: Layout, training: Training, stage: int, schedule: str, *,
                      pp, vv, mm) -> tuple:
    """(chunk passes pipeline rank ``stage`` holds at its peak, the interleaved warm-up's
    micro-batch group N or None), in ``pp``, ``vv``, ``mm`` (symbols or numbers)."""
    where = "first" if stage == 0 else "last" if stage == layout.p - 1 else stage
    # Megatron's microbatch_group_size_per_vp_stage N (None: p) sets the interleaved warm-up
    group = training.pipeline.microbatch_group_size if vv is not None else None
    if vv is not None and group is None and mm is not None and framework_record(training.framework).torch_pipelining:
        group = torch_round_size(mm, pp)       # torch's rounds of m // max(1, m // p)
    if training.pipeline.stage_placement == "v":
        # torch's V schedules (ZBVZeroBubble, DualPipeV): their own count, not interleaved
        # 1F1B's (tests/test_timing.py compares it with torch's schedule tables)
        return v_stage_microbatches(where, pp=pp, mm=mm), group
    return stage_microbatches(where, schedule, pp=pp, vv=vv, mm=mm, group=group), group


def resolved_stage_activations(j: Job | UncheckedJob, stage: int) -> Total:
    """:func:`stage_activations` of a job (its m: a number, the symbol m or None = unknown)."""
    x, layout, training = j.model, j.layout, j.training
    pp = layout.p
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < pp:
        raise InvalidValueError(f"stage must be a whole number in 0..{pp - 1}, got {stage!r}")
    recompute = choose("recompute mode", training.memory.recompute, RECOMPUTE)
    schedule = choose("pipeline schedule", training.pipeline.schedule, SCHEDULES)
    if pp == 1:
        # no pipeline: each micro-batch's backward follows its forward (gradient accumulation),
        # whatever the schedule is called; GPipe's "all m in flight" needs stages
        schedule = "1f1b"
    sp_on = _sequence_parallel(layout)
    interleaved = layout.v is not None and layout.v > 1
    vv = v if interleaved else None
    mm = m if j.m is not None else None
    # FP8 (TE under Megatron) saves GEMM inputs quantized; textbook conventions count 16 bits
    fp8_in = training.states.precision == "fp8" and training.states.convention == "framework"
    common = dict(gated=x.swiglu, flash=training.memory.flash_attention, sequence_parallel=sp_on,
                  dropout=dropout_kept(training), norm=x.normalization.lower(), mla=_mla(x),
                  **({"fp8_inputs": True} if fp8_in else {}))
    if getattr(x, "qk_layernorm", False) and recompute != "selective-op":
        common["qk_norm"] = getattr(x, "qk_norm_width", "head")
    shared = bool(x.moe_shared_expert_intermediate_size)

    # Megatron's --recompute-modules (default core_attn) under selective recompute
    mods = recompute_modules_of(training)
    gathered_in = sp_on and framework_record(training.framework).dtensor_tp   # ColwiseParallel's inputs

    def per_layer(moe: bool, mode: str = recompute) -> sp.Expr:
        return layer_activations(recompute=mode, moe=moe, shared_expert=shared and moe,
                                 modules=mods if mode == "selective" else None, **common).expr \
            + (tm.dtensor_gathered_inputs(moe) if mode == "none" and gathered_in else 0)

    pattern = models.moe_layer_pattern(x)
    pl = layout.pipeline_layout
    rng = models.stage_layers(x, pp, stage, layout.first_stage_layers, layout.last_stage_layers,
                              pl)
    kinds, hybrid = [pattern[i] for i in rng], models.stages.hybrid_kinds(x, rng)
    n_moe = sum(kinds)
    uniform = (layout.first_stage_layers is None and layout.last_stage_layers is None
               and pl is None and len(set(pattern)) == 1 and not hybrid)
    chunks, group = _in_flight_chunks(layout, training, stage, schedule, pp=p, vv=vv, mm=mm)
    def layer_stack(mode: str):
        if uniform or hybrid:   # a hybrid's layers by their kinds (memsym/terms/mamba.py)
            return hybrid_terms.hybrid_stack(hybrid, mode, mods, shared, layout.c > 1, common) \
                if hybrid else per_chunk * per_layer(pattern[0], mode)
        out = (sp.Integer(len(kinds) - n_moe) * per_layer(False, mode) if len(kinds) > n_moe
               else 0) + (sp.Integer(n_moe) * per_layer(True, mode) if n_moe else 0)
        return out / (1 if vv is None else vv)

    per_chunk = (L / p if vv is None else L / (p * v)) if uniform \
        else sp.Integer(len(kinds)) / (1 if vv is None else vv)
    method, n_rec = training.memory.recompute_method, training.memory.recompute_num_layers
    stack = _chunk_activations(layer_stack, per_chunk, training, 1 if vv is None else vv) \
        if kinds else layer_stack(recompute)
    derived = Source("memsym-derivation", "memsym/training.py, stage_activations")
    live, held_layers = None, chunks * stack
    if pl is not None and pp > 1:
        # a custom layout's chunks differ in size: each chunk's micro-batches in flight when
        # the rank holds the most decoder layers, walking Megatron's op order
        live, held_layers = _layout_in_flight(layout, training, stage, pattern, per_layer, group,
                                              j.m if isinstance(j.m, int) else None)
    terms = [Term("layer_activations", held_layers,
                  f"{len(kinds)} decoder layers x in-flight micro-batches ({schedule}"
                  + (", interleaved" if interleaved else "") + f", recompute {recompute}"
                  + (f" ({', '.join(mods) or 'no module'})" if recompute == "selective" else "")
                  + (f", {method} {n_rec}: " + _RECOMPUTE_METHOD_SOURCES[method]
                     if recompute == "full" and method else "") + ")",
                  Source("korthikanti", "§4.2.3, Eq. 5 (first stage holds L layers' worth)" + (
                      "; hybrid layers: memsym/terms/mamba.py" if hybrid else "")), label="layers")]
    terms += rb.offloaded_layers(pattern[:training.memory.cpu_offloading_num_layers], per_layer)
    if framework_record(training.framework).torch_pipelining and pp > 1 and mm is not None:
        terms.append(pipelining_buffers(stage, pp, vv, mm, group, _boundary_bytes(sp_on, training),
                                        _activation_width(training), training.pipeline.schedule,
                                        training.pipeline.stage_placement))
    if training.adapters.finetune != "full" and sp_on and not training.adapters.lora_regather:
        targets = set(LORA_TARGETS if training.adapters.lora_targets == "all" else training.adapters.lora_targets)
        qkv = int(bool(targets & {"q", "k", "v"}))
        fc1 = int(bool(targets & {"gate", "up"}))     # dense layers only: expert adapters fall back
        eligible = (sp.Integer(len(kinds) - n_moe) * (qkv + fc1) + sp.Integer(n_moe) * qkv)
        if uniform:
            eligible = (L / p) * (qkv + fc1 * (1 - int(pattern[0])))
        eligible = eligible / (1 if vv is None else vv)
        held = chunks
        if live is not None:       # a custom layout: the layers in flight, not chunks x L/v
            eligible, held = sp.Integer(1), sum(
                n * sum((qkv + fc1 * (1 - int(pattern[i]))) for i in ids)
                for n, ids in zip(live, pl.layer_ids(stage)))
        gathered = lora_gathered_inputs(eligible, sequence_parallel=True)
        if gathered.expr != 0:
            terms.append(replace(gathered, expr=held * gathered.expr))
    if stage == 0:
        n_emb = embedding_microbatches(schedule, pp=p, vv=vv, mm=mm, group=group) \
            if live is None else sp.Integer(live[0])     # the embedding is in chunk 0
        terms.append(Term("embedding_activations",
                          n_emb * embedding_activations(sequence_parallel=sp_on,
                                                        dropout=dropout_kept(training)).expr,
                          "input ids and embedding dropout of the in-flight micro-batches",
                          Source("korthikanti", "§4.3 (embedding dropout sbhp/t); Megatron-LM 8sbp"),
                          label="embedding"))
    if stage == output_stage(layout, training):
        n_out = logits_microbatches(schedule, mm=mm)
        out_total = _output_layer(x, layout, training)
        out = out_total.expr
        # the logits dominate: the Term carries their source (Korthikanti's fp32 softmax, or
        # torchtitan's compiled loss keeping the 16-bit logits)
        terms.append(Term("output_activations", n_out * out,
                          "final norm, output-layer input and the logits kept for the loss",
                          out_total["logits"].source if _loss_kind(layout, training) in ("compiled", "te")
                          else Source("korthikanti", "§4.3 (2sbh/t, 2sbh/t, 4sbv/t)"),
                          label="output layer"))
        if x.mtp_num_layers:
            last_kind = pattern[-1]
            terms.append(Term("mtp_activations",
                              n_out * x.mtp_num_layers * (per_layer(last_kind) + out),
                              "multi-token-prediction layers: one layer and one more logits each",
                              derived, label="MTP"))
    # block 0 checkpoints no layer (core/recompute.py: layer_idx < 0 is never true): nothing
    # is rematerialised, so no working set
    if recompute == "full" and kinds and not (method == "block" and n_rec == 0):
        if pl is not None:
            per_chunk = sp.Integer(max(pl.chunk_layers(stage)))
        group = sp.Min(n_rec, per_chunk) if method == "uniform" else 1
        terms.append(Term("recompute_working_set", group * per_layer(any(kinds), "none"),
                          "one checkpointed group's activations (one layer unless "
                          "recompute_method uniform N) rematerialised during its backward",
                          derived, label="recompute working set"))
    return Total(f"activations of pipeline stage {stage} ({_role(stage, pp)})", tuple(terms))


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
    return resolved_stage_total(unchecked(_resolve(arch, training), layout, training), stage)


def job_stage_parameters(j: Job | UncheckedJob, stage: int):
    """The :class:`memsym.model.StageParameters` of pipeline rank ``stage`` in this job: the
    layout's split (uneven ends, an explicit pipeline layout) and the rank that holds the output
    layer under the training's stage placement (:func:`output_stage`: rank 0 under torch's V
    schedules).

    Examples
    --------
    >>> from memsym.model import preset
    >>> v = Training(framework="torchtitan", sharding="fsdp", stage_placement="v")
    >>> job_stage_parameters(make_job("llama2-7b", layout=Layout(p=2, v=2), training=v), 0).output_layer
    True
    """
    layout = j.layout
    return models.stage_parameters(
        j.model, layout.t, layout.p, stage, e=layout.e, t_e=layout.t_e,
        first_stage_layers=layout.first_stage_layers, last_stage_layers=layout.last_stage_layers,
        pipeline_layout=layout.pipeline_layout, output_stage=output_stage(layout, j.training))


def stage_counts(j: Job | UncheckedJob, stage: int) -> dict:
    """The parameter counts of one pipeline stage, as values of the total's count symbols.

    Full training: ``N_tp`` (the stage's tensor-split parameters, all t ranks together),
    ``N_rep`` (replicated on every TP rank) and ``N_exp`` (routed experts, all e t_e ranks
    together), so one GPU holds ``N_tp/t + N_rep`` dense and ``N_exp/(e t_e)`` expert
    parameters (:func:`memsym.model.stage_parameters`, exact, vocabulary padded at t).
    LoRA/QLoRA: ``N_q`` (frozen linear weights per GPU), ``N_u`` (frozen, unquantized) and
    ``N_a`` (adapters) per GPU.

    Examples
    --------
    >>> from memsym.model import preset
    >>> from memsym.symbols import N_tp, N_rep
    >>> c = stage_counts(make_job("llama2-7b", tp=2), 0)
    >>> c[N_tp] + c[N_rep] == 6738415616     # Llama-2 7B (vocabulary 32000 is already padded)
    True
    """
    x, layout, training = j.model, j.layout, j.training
    sp_ = job_stage_parameters(j, stage)
    pattern = models.stages.layer_kind_pattern(x)
    # the decoder layers' tensor-split weights (the GEMMs FP8 and LoRA act on), per GPU; one
    # layer_parameters call per kind (dense, MoE, a hybrid's), not per layer (memsym.search)
    per_kind = {kind: models.layer_parameters(x, kind) for kind in {pattern[i] for i in sp_.layers}}
    lin = sum(per_kind[pattern[i]]["tp"] for i in sp_.layers)
    # the largest layer's parameters on one GPU: what FSDP2 / ZeRO-3 gather at once
    largest = max((sp.Rational(q["tp"], layout.t) + q["replicated"]
                   + sp.Rational(q["experts"], layout.e * layout.expert_tp)
                   for q in per_kind.values()), default=sp.Integer(0))
    if training.adapters.finetune == "full":
        return {N_tp: sp.Integer(sp_.tp), N_rep: sp.Integer(sp_.replicated),
                N_exp: sp.Integer(sp_.experts), N_lin: sp.Rational(lin, layout.t), N_ll: largest}

    quant = sp.Rational(lin, layout.t) + sp_.experts_per_gpu
    targets = LORA_TARGETS if training.adapters.lora_targets == "all" else training.adapters.lora_targets
    adapters = sp.Rational(models.lora_parameter_count(x, training.adapters.lora_rank, targets) * len(sp_.layers),
                           x.num_layers * layout.t)
    return {N_q: quant, N_u: sp_.per_gpu - quant, N_a: adapters, N_ll: largest}


def _stage_has_experts(x, layout: Layout, stage: int) -> bool:
    if not x.num_experts:
        return False
    pattern = models.moe_layer_pattern(x)
    return any(pattern[i] for i in models.stage_layers(
        x, layout.p, stage, layout.first_stage_layers, layout.last_stage_layers,
        layout.pipeline_layout))


def states_and_transients(j: Job | UncheckedJob, stage: int) -> tuple:
    """(steady model-state Terms, phase -> transient Terms) of one stage, in the count symbols
    of :func:`stage_counts`: the model states held through forward and backward, and
    :func:`phase_transients` with the step-only states (:data:`STEP_STATE_KEYS`) in the
    optimizer phase."""
    training = j.training
    terms = _state_terms(_stage_has_experts(j.model, j.layout, stage), _state_training(training))
    step = tuple(term for term in terms
                 if training.states.convention == "framework" and term.key in STEP_STATE_KEYS)
    trans = phase_transients(j, stage)
    if step:
        trans = {**trans, "optimizer": step + tuple(trans["optimizer"])}
    return [term for term in terms if term not in step], trans


#: Model-state Terms that the frameworks allocate at the optimizer step and free before the
#: next forward (``convention="framework"``): the fp32 copy of a 16-bit gradient the optimizer
#: steps on.  Megatron-core makes it in ``_copy_model_grads_to_main_grads``
#: (``shard_main_param.grad = shard_model_grad.float()``) and frees it in ``zero_grad``
#: (``set_to_none`` on ``shard_fp32_from_float16_groups``) at the start of the next step;
#: DeepSpeed ZeRO-1/2 sets ``single_partition_of_fp32_groups[i].grad = None`` right after
#: the step.  The textbook conventions keep them in the steady sum as published.
STEP_STATE_KEYS = ("main_gradients", "expert_main_gradients")


def _state_training(training: Training) -> Training:
    """The fields of ``training`` that model states depend on (the cache key)."""
    keep = ("finetune", "sharding", "convention", "precision", "optimizer", "offload",
            "quantization", "grad_dtype", "precision_aware", "fp8_param_gather", *rb.OPTIMIZER_DTYPES)
    return Training(**{name: training.value(name) for name in keep})


@functools.lru_cache(maxsize=1024)
def _state_terms(experts: bool, training: Training) -> tuple:
    # cached: the search builds one stage total per discrete choice and pipeline template,
    # and the model states depend only on these fields
    if training.adapters.finetune != "full":
        # adapters train in fp32 with the optimizer's moments (PEFT); ZeRO-3/FSDP shards the
        # frozen base over data parallel, every other scheme keeps it whole on each GPU
        widths = {b_g: 4, b_m: 0, b_o: OPTIMIZERS[training.states.optimizer]}
        quant = training.adapters.quantization or ("nf4-dq" if training.adapters.finetune == "qlora" else "bf16")
        tot = lora(quant, "fp32", params=N_q, adapters=N_a, unquantized=N_u,
                   sharded=training.states.sharding in ("zero3", "fsdp")).subs(widths)
        return tuple(tot.terms)
    conv = choose("convention", training.states.convention, CONVENTIONS)
    framework = dict(grad_dtype=training.states.grad_dtype, precision_aware=training.states.precision_aware,
                     fp8_param_gather=training.states.fp8_param_gather)
    widths = byte_widths(training.states.sharding, training.states.precision, training.states.optimizer, conv,
                         **framework, **{n: training.value(n) for n in rb.OPTIMIZER_DTYPES})
    fp8 = dict(precision=training.states.precision, optimizer=training.states.optimizer, **framework)
    # t, e and t_e stay symbols (N_tp/t + N_rep, N_exp/(e t_e)): equal to the stage's exact
    # per-GPU counts at the layout's values, and differentiable in t for sensitivities.
    # FP8 caches cover the linear-layer weights only (N_lin of the stage's dense part).
    states = model_state(training.states.sharding, convention=conv, offload=training.states.offload,
                         params=N_tp / t + N_rep, dp=d * c,
                         linear_params=N_lin if training.states.precision == "fp8" else None,
                         **fp8).subs(widths)
    terms = list(states.terms)
    if experts:
        edp = d * c * t / (e * t_e)
        ex = model_state(training.states.sharding, convention=conv, offload=training.states.offload,
                         params=N_exp / (e * t_e), dp=edp, **fp8).subs(widths)
        terms += [replace(term, key="expert_" + term.key, label="expert " + term.label,
                          description="routed experts: " + term.description) for term in ex]
    return tuple(terms)


#: The phases of one training step whose peaks memsym compares (on the most-loaded stage):
#: the end of the forward, the loss's backward (the first of the backward: every activation
#: still alive), the blocks' backward (the loss's buffers and the output layer's activations
#: freed, the sharding schemes' backward buffers) and the optimizer step.
PHASES = ("forward", "loss-backward", "backward", "optimizer")

_PHASE_SRC = Source("memsym-derivation", "memsym/training.py, phase_transients (peak over the "
                    "step's phases)")


def _transient_widths(training: Training) -> dict:
    """Knob values of the transient Terms: the libraries' defaults
    (:data:`memsym.terms.transients.DEFAULTS`), the 16-bit width from the precision."""
    half = _activation_width(training)
    vals = {sym: sp.Integer(tr.DEFAULTS[sym]) for sym in (N_bkt, N_pf, b_r, n_ag, n_bkt)}
    overlap_buffers = framework_record(training.framework).overlap_ipg_buffers
    if overlap_buffers is not None and training.comm.overlap_grad_reduce:
        vals[n_bkt] = sp.Integer(overlap_buffers)   # DeepSpeed's overlap_comm: a second one
    # DeepSpeed's buffers as its config sets them (readers.jobs.deepspeed_job)
    knobs = {"reduce_bucket_size": N_bkt, "stage3_prefetch_bucket_size": N_pf,
             "ipg_buffers": n_bkt}
    vals.update({knobs[name]: sp.Integer(value) for name, value in training.states.zero_buckets})
    vals.update({b_u: sp.Integer(half), b_hp: sp.Integer(half)})
    return vals


def _loss_kind(layout: Layout, training: Training) -> str:
    """Which cross-entropy the last stage runs: ``"compiled"`` (torch.compile'd), ``"loss-parallel"``
    (torchtitan, t > 1: DTensor ``loss_parallel``), ``"torch"`` (eager ``F.cross_entropy`` of a
    ``.float()`` copy: torchtitan, memsym's FSDP2), ``"te"`` (:mod:`memsym.terms.recipe_buffers`)
    or ``"vocab-parallel"`` (Megatron-core's fused vocab-parallel cross-entropy)."""
    if training.memory.compiled_loss:
        return "compiled"
    if framework_record(training.framework).torch_loss:
        return "loss-parallel" if layout.t > 1 and training.memory.loss_parallel else "torch"
    if training.memory.cross_entropy_fusion_impl == "te":
        return "te"
    if training.states.sharding == "fsdp" and training.states.convention == "framework":
        return "torch"
    return "vocab-parallel"


def _loss_transients(kind: str) -> tuple:
    """(forward Terms, loss-backward Terms) of the cross-entropy ``kind`` beyond its saved
    tensors (the ``logits`` of :func:`memsym.terms.activations.output_activations`)."""
    if kind == "vocab-parallel":
        fwd = tr.cross_entropy_transient()
        # the fp32 softmax turned gradient in place; autograd casts it to the 16-bit input
        grad = replace(fwd["logits_16bit"], key="logits_grad_16bit", label="bf16 logits grad",
                       description="16-bit gradient of the logits, made from the fp32 "
                       "softmax-turned-gradient before it is freed")
        return tuple(fwd.terms), (grad,)
    if kind == "compiled":
        # Inductor fuses the cast: nothing beyond the saved 16-bit logits in forward, their
        # 16-bit gradient in backward (tests/test_transients.py measures both)
        grad = replace(tr.torch_cross_entropy_transient()["logits_16bit"], key="logits_grad_16bit",
                       label="bf16 logits grad", description="16-bit gradient of the logits "
                       "(one fused backward kernel)")
        return (), (grad,)
    if kind == "loss-parallel":
        return tuple(tr.loss_parallel_transient().terms), tuple(tr.loss_parallel_backward().terms)
    if kind == "te":    # its gradient is written into the kept 16-bit logits: nothing more
        return (rb.te_cross_entropy()["ce_per_token"],), ()
    return (tuple(tr.torch_cross_entropy_transient().terms),
            tuple(tr.torch_cross_entropy_backward().terms))


def _gradients_not_yet_made(training: Training) -> bool:
    r"""Whether the sharded gradients are absent from the forward to the loss's backward.

    torchtitan calls ``optimizers.zero_grad()`` (``set_to_none=True``, torch's default) at the
    start of every train step, and FSDP2 makes each sharded gradient in the block's
    post-backward reduce-scatter (``foreach_reduce``): until the first block's backward
    there is none.  In the blocks' backward they are made as the blocks' activations are
    freed: without pipelining the peak is at its start or its end,
    :math:`-\min(G, A_{\mathrm{layers}})`; under pipelining (gradients reduce-scattered
    after the last micro-batch) the whole sharded gradient is kept, an upper bound.
    Megatron's gradient buffer and DeepSpeed's partitions persist."""
    return (framework_record(training.framework).grads_set_to_none and training.states.sharding == "fsdp"
            and training.states.convention == "framework" and training.adapters.finetune == "full")


def phase_transients(j: Job | UncheckedJob, stage: int) -> dict:
    r"""The transient Terms of each phase of the step on pipeline stage ``stage`` [bytes].

    ``forward`` (end of the forward of the last micro-batch: every in-flight micro-batch's
    activations are held), ``loss-backward`` (the start of the backward: the loss's
    gradients while every activation is alive), ``backward`` (the blocks' backward: the
    output layer's activations freed, the sharding scheme's backward buffers) and
    ``optimizer`` (all activations freed):

    * last stage: the loss's buffers beyond what it saves, by implementation
      (:func:`_loss_kind`): Megatron-core's fused cross-entropy
      (:func:`memsym.terms.transients.cross_entropy_transient`; its 16-bit logits gradient in
      the loss's backward), eager ``F.cross_entropy`` on a ``.float()`` copy (torchtitan,
      FSDP2: :func:`memsym.terms.transients.torch_cross_entropy_transient` and
      :func:`memsym.terms.transients.torch_cross_entropy_backward`), torch's
      ``loss_parallel`` (torchtitan with t > 1:
      :func:`memsym.terms.transients.loss_parallel_transient`,
      :func:`memsym.terms.transients.loss_parallel_backward`) or a compiled loss (only the
      16-bit gradient); in ``backward`` the output layer's activations are freed (a negative
      Term, ``output_freed``);
    * FSDP2 (``sharding="fsdp"``): forward and loss-backward, ``n_ag`` blocks all-gathered;
      backward, :func:`memsym.terms.transients.fsdp2_transients` (torchtitan with PP: the
      whole stage kept gathered from forward on, and its unsharded gradients accumulated in
      backward, :func:`memsym.terms.transients.fsdp2_pipeline_unsharded`); optimizer, torch
      AdamW's foreach ``sqrt(exp_avg_sq)`` copy
      (:func:`memsym.terms.transients.optimizer_step_transient`); under torchtitan the sharded
      gradients do not exist before the blocks' backward (:func:`_gradients_not_yet_made`: a
      negative Term, ``gradients_not_yet_made``, in forward and loss-backward, and
      ``gradients_as_activations_freed`` in backward) and its embedding / output groups are
      :func:`memsym.terms.transients.fsdp2_io_groups` (``fsdp_root_group`` by release);
      since its own groups, the first block's backward prefetches the embedding
      (:func:`memsym.terms.torch_moments.first_block_gathered`) and the loss-backward phase
      is the larger of the loss's and the output group's own backward
      (:func:`memsym.terms.torch_moments.output_group_backward`);
    * full recompute: the working set exists only in the blocks' backward
      (:func:`memsym.terms.torch_moments.working_set_absent` in forward and loss-backward);
    * torchtitan with PP: the receive buffers of ``torch.distributed.pipelining``
      (:func:`memsym.terms.pipelining_buffers.pipelining_recv_buffers`) in the optimizer phase (the other phases count them
      with the activations, ``pipeline_buffers``);
    * DeepSpeed ZeRO-3: :func:`memsym.terms.transients.zero3_transients` in forward and
      both backward phases; ZeRO-1/2: the IPG buckets
      (:func:`memsym.terms.transients.deepspeed_ipg_buckets`) from the first backward on;
    * Megatron-core (distributed optimizer, DDP): buckets are views of the gradient and
      parameter buffers (:func:`memsym.terms.transients.megatron_buckets`) and TE/Apex
      FusedAdam steps in chunks: no transient beyond the loss's.  (With ``tp_comm_overlap``,
      Transformer Engine's userbuffers are held throughout, outside PyTorch's allocator:
      :func:`_outside_allocator`.)

    The model states that exist only in the step (:data:`STEP_STATE_KEYS`) are not among
    these Terms: the total adds them to the optimizer phase.

    The sharding buffers apply under ``convention="framework"`` (the default); the textbook
    conventions keep only the loss's transients.  Knobs take
    :data:`memsym.terms.transients.DEFAULTS` (``n_ag`` = 2, fp32 reduce, ...);
    ``N_ll`` is the largest layer on one GPU (:func:`stage_counts`).

    Returns
    -------
    dict
        Phase name (:data:`PHASES`) -> tuple of Terms.

    Examples
    --------
    >>> from memsym.model import preset
    >>> ph = phase_transients(make_job("llama2-7b"), 0)
    >>> [t_.key for t_ in ph["forward"]], [t_.key for t_ in ph["loss-backward"]]
    (['logits_16bit', 'ce_per_token'], ['logits_grad_16bit'])
    >>> [t_.key for t_ in ph["backward"]], ph["optimizer"]
    (['output_freed'], ())
    """
    x, layout, training = j.model, j.layout, j.training
    out = {ph: [] for ph in PHASES}
    acts, start_excess, own_groups = resolved_stage_activations(j, stage).terms, 0, False
    for ph in ("forward", "loss-backward"):    # only the blocks' backward rematerialises
        out[ph] += [tm.working_set_absent(a_) for a_ in acts if a_.key == "recompute_working_set"]
    if stage == output_stage(layout, training):
        fwd, bwd = _loss_transients(_loss_kind(layout, training))
        if _logits_gathered(layout, training):
            fwd, bwd = tm.gathered_logits(fwd), tm.gathered_logits(bwd)
        out["forward"] += list(fwd)
        out["loss-backward"] += list(bwd)
        if training.pipeline.defer_embedding_wgrad_compute:
            # kept from the step's first micro-batch to the flush, before the optimizer step
            for ph in ("forward", "loss-backward", "backward"):
                out[ph].append(tr.deferred_wgrad_buffers(
                    limit=training.pipeline.wgrad_deferral_limit,
                    width=_activation_width(training),
                    sequence_parallel=_sequence_parallel(layout),
                    last_pending=ph != "backward"))
        o = _output_layer(x, layout, training).expr
        out["backward"].append(Term("output_freed", -o, "the output layer's activations and "
                                    "the saved logits, freed by the loss's and the output "
                                    "layer's backward", _PHASE_SRC, label="output layer freed"))
    if framework_record(training.framework).torch_pipelining and layout.p > 1 and j.m is not None:
        # the pipeline's receive buffers outlive the step: the optimizer step sees them
        out["optimizer"].append(pipelining_recv_buffers(
            stage, layout.p, v if (layout.v or 1) > 1 else None, m,
            _boundary_bytes(_sequence_parallel(layout), training), training.pipeline.stage_placement))
    # the sharding schemes' buffers are the frameworks' own (FSDP2, DeepSpeed): they join the
    # default convention "framework"; the textbook conventions (seed000, zero-paper, ...)
    # keep their published model-state forms and only the loss's transients
    scheme = training.states.sharding if training.states.convention == "framework" else None
    if scheme == "fsdp" and layout.p > 1 and framework_record(training.framework).torch_pipelining:
        # torch.distributed.pipelining: nothing reshards and gradients accumulate unsharded
        # until the last micro-batch's backward reduce-scatters them, one block at a time
        fs = tr.fsdp2_transients(N_ll, d * c)
        pipe = tr.fsdp2_pipeline_unsharded(N_tp / t + N_rep)
        held = [pipe["kept_unsharded"],
                tm.grads_as_stages_run(layout, training, pipe["accumulated_grads"])]
        out["forward"].append(pipe["kept_unsharded"])
        out["loss-backward"] += held
        out["backward"] += held + [fs["unsharded_grads"], fs["reduce_scatter"]]
    elif scheme == "fsdp":
        fs = tr.fsdp2_transients(N_ll, d * c)
        out["forward"].append(fs["unsharded_params"])
        out["loss-backward"].append(fs["unsharded_params"])
        out["backward"] += list(fs.terms)
        if framework_record(training.framework).fsdp_io_groups and training.adapters.finetune == "full":
            # torchtitan's embedding / output groups (its apply_fsdp, by release)
            io = tr.fsdp2_io_groups(training.memory.fsdp_root_group,
                                    bool(x.untie_embeddings_and_output_weights), N_ll)
            for ph, terms in io.items():
                out[ph] += list(terms)
            if not training.memory.fsdp_root_group and x.untie_embeddings_and_output_weights:
                # the first block's backward prefetches the embedding group, not a block
                first = tm.first_block_gathered(fs["unsharded_params"], N_ll)
                out["backward"][out["backward"].index(fs["unsharded_params"])] = first
                start_excess, own_groups = fs["unsharded_params"].expr - first.expr, True
        if training.states.optimizer == "adam":
            out["optimizer"] += list(tr.optimizer_step_transient((N_tp / t + N_rep) / (d * c)).terms)
    elif scheme == "zero3":
        z3 = tr.zero3_transients(N_ll)
        for ph in ("forward", "loss-backward", "backward"):
            out[ph] += list(z3.terms)
    elif scheme in ("zero1", "zero2"):
        ipg = tr.deepspeed_ipg_buckets().terms
        for ph in ("loss-backward", "backward", "optimizer"):
            out[ph] += list(ipg)
    if _gradients_not_yet_made(training):
        grads = [term for term in _state_terms(_stage_has_experts(x, layout, stage),
                                               _state_training(training))
                 if term.key in ("gradients", "expert_gradients")]
        absent = Term("gradients_not_yet_made", -sp.Add(*(term.expr for term in grads)),
                      "sharded gradients, set to None by the step's zero_grad and made by the "
                      "blocks' backward", Source("torchtitan", "train.py, train_step "
                      "(optimizers.zero_grad() first; torch.optim set_to_none=True)"),
                      label="gradients not yet made")
        out["forward"].append(absent)
        out["loss-backward"].append(absent)
        if layout.p == 1:
            # the blocks' backward makes each block's gradient shard as it frees the block's
            # activations: live bytes are linear in the blocks done, so the peak is at the
            # start (no gradient) or the end (no layer activation): -min(G, A_layers)
            a_l = sp.Add(*(term.expr for term in acts if term.key == "layer_activations"))
            out["backward"].append(Term(   # start_excess: the last block's prefetch (fsdp2)
                "gradients_as_activations_freed", -sp.Min(-absent.expr - start_excess, a_l),
                "sharded gradients made block by block as the blocks' activations are freed "
                "(the peak at the backward's start or end)", absent.source,
                label="gradients made as freed"))
    if own_groups and stage == output_stage(layout, training):   # FSDP2's [norm, output] backward
        out["loss-backward"].append(tm.output_group_backward(out["loss-backward"],
                                                             _output_layer(x, layout, training)))
    cp.add_phase_buffers(out, None if isinstance(j, UncheckedJob) else layout.c, training.framework,
                         training.comm.cp_comm_type, _activation_width(training))
    widths = _transient_widths(training)
    # widths are symbols -> integers: xreplace, not subs' pattern matching (cold search)
    return {ph: tuple(replace(term, expr=as_expr(term.expr).xreplace(widths)) for term in terms)
            for ph, terms in out.items()}


def _phase_parts(j: Job | UncheckedJob, stage: int):
    states, trans = states_and_transients(j, stage)
    act = list(resolved_stage_activations(j, stage).terms)
    return states, act, trans


def _phase_term(act: list, trans: dict):
    r"""The one Term that turns the steady sum into the peak over phases, or None.

    .. math:: M_{\mathrm{tr}} = \max(T_{\mathrm{fwd}},\; T_{\mathrm{loss}},\; T_{\mathrm{bwd}},\;
        T_{\mathrm{opt}} - M_{\mathrm{act}})

    so that :math:`M_{\mathrm{states}} + M_{\mathrm{act}} + M_{\mathrm{tr}}` is the largest
    phase: the optimizer step runs after every activation is freed.  A phase without Terms
    counts as 0 (the steady sum itself)."""
    *running, to = (sp.Add(*(term.expr for term in trans[ph])) for ph in PHASES)
    A = sp.Add(*(term.expr for term in act))
    cands = list(dict.fromkeys(running + ([to - A] if to != 0 else [])))
    if cands == [0]:
        return None
    peak = sp.Max(*cands)
    return Term("phase_transient", peak, "transient peak of the step's largest phase "
                "(end of forward: logits and CE buffers, all-gathered layers; loss backward: "
                "the logits' gradients; blocks' backward: reduce-scatter buffers; optimizer "
                "step: its temporaries)", _PHASE_SRC, label="peak-phase transients")


def _outside_allocator(training: Training) -> tuple:
    """Buffers a framework allocates outside PyTorch's caching allocator for the whole run,
    beside the ``workspace`` and ``nccl`` allowances (no fragmentation margin on them):
    Transformer Engine's userbuffers under ``tp_comm_overlap``
    (:func:`memsym.terms.transients.tp_comm_userbuffers`)."""
    if training.comm.tp_comm_overlap and training.states.convention == "framework" \
            and training.memory.metric == "device":   # PyTorch's counters miss them
        return (tr.tp_comm_userbuffers(training.states.precision == "fp8"),)
    return ()


def _beyond_allocated(terms, training: Training) -> tuple:
    """What a total adds to its allocated ``terms``: the allowances (fragmentation a fraction
    of their sum) and the buffers outside PyTorch's allocator."""
    allocated = sp.Add(*(term.expr for term in terms))
    return tuple(allowance_terms(allocated)) + _outside_allocator(training)


def resolved_stage_total(j: Job | UncheckedJob, stage: int) -> Total:
    """:func:`stage_total` of a resolved architecture: the one composition of the per-GPU
    peak (model states + activations + the peak phase's transients + allowances), in the
    count symbols of :func:`stage_counts`; ``memsym.search`` compiles this same total over
    its grid."""
    states, act, trans = _phase_parts(j, stage)
    terms = states + act
    peak = _phase_term(act, trans)
    if peak is not None:
        terms.append(peak)
    terms += list(_beyond_allocated(terms, j.training))
    return Total(f"training memory per GPU, pipeline stage {stage} ({_role(stage, j.layout.p)})",
                 tuple(terms))


def phase_totals(j: Job | UncheckedJob, stage: int) -> dict:
    r"""Each phase's per-GPU total on stage ``stage`` [bytes]: phase name -> Total.

    .. math::

        M_{\mathrm{fwd}} = S + A + T_{\mathrm{fwd}},\quad
        M_{\mathrm{loss}} = S + A + T_{\mathrm{loss}},\quad
        M_{\mathrm{bwd}} = S + A + T_{\mathrm{bwd}},\quad
        M_{\mathrm{opt}} = S + T_{\mathrm{opt}}

    each with its allowances (fragmentation a fraction of that phase's allocation); the
    largest equals :func:`stage_total`.

    Examples
    --------
    >>> from memsym.model import preset
    >>> tots = phase_totals(make_job("llama2-7b"), 0)
    >>> sorted(tots)
    ['backward', 'forward', 'loss-backward', 'optimizer']
    """
    states, act, trans = _phase_parts(j, stage)
    out = {}
    for ph in PHASES:
        terms = list(states) + (list(act) if ph != "optimizer" else []) + list(trans[ph])
        out[ph] = Total(f"{ph} phase, pipeline stage {stage}",
                        tuple(terms) + _beyond_allocated(terms, j.training))
    return out


def training_values(arch, layout: Layout = Layout(), training: Training = Training(),
                    allowances: Mapping | None = None, stage: int = 0) -> dict:
    """Symbol -> exact value for every symbol a :func:`stage_total` can contain.

    Examples
    --------
    >>> vals = training_values("llama2-7b", Layout(t=2, d=4), Training(seq_length=4096,
    ...                                                              global_batch_size=32))
    >>> vals[t], vals[d], vals[m], vals[L]
    (2, 4, 8, 32)
    """
    check_fields(layout, training)
    j = unchecked(_resolve(arch, training), layout, training)
    return {**_training_values(j.model, layout, training, allowances, j.m),
            **stage_counts(j, stage)}


_UNSET = object()


def _training_values(x, layout: Layout, training: Training, allowances: Mapping | None = None,
                     m_=_UNSET) -> dict:
    """:func:`training_values` of a resolved architecture (``m_`` if already worked out)."""
    vals = arch_values(x, layout.t)     # already exact Integers
    vals.update({key: sp.Integer(val) for key, val in (
        (s, training.batch.seq_length), (b, training.batch.micro_batch_size), (t, layout.t), (p, layout.p),
        (d, layout.d), (c, layout.c), (e, layout.e), (t_e, layout.expert_tp))})
    vals[c_f] = exact(training.memory.capacity_factor, "capacity_factor")
    if not 0 < vals[c_f] <= LIMITS["experts"].maximum:    # a load ratio, bounded as the CLI's
        raise InvalidValueError(f"capacity_factor must be in (0, 2^20], got {vals[c_f]}"[:90])
    if m_ is _UNSET:
        m_ = microbatches(layout, training)
    if m_ is not None:
        vals[m] = sp.Integer(m_)
    if layout.v is not None and layout.v > 1:
        vals[v] = sp.Integer(layout.v)
    # the memory metric's view (memsym.terms.allowances.METRICS): a user's allowances win
    metric = METRICS[training.memory.metric][0]
    vals.update(allowance_values({**metric, **dict(allowances or {})}))
    return vals


# short names for the groups' keys (memsym.groups)
_STATE_KEYS, _ACT_KEYS = STATE_KEYS, ACTIVATION_KEYS


@dataclass(frozen=True)
class TrainingEstimate:
    """The per-GPU training memory on the most-loaded GPU, and how it was found.

    Attributes
    ----------
    total : Total
        The most-loaded stage's total, symbolic (registry symbols).
    values : dict
        Symbol -> exact value used to evaluate it.
    stage : int
        The most-loaded pipeline stage (0 = first).
    role : str
        ``"only"`` (p = 1), ``"first"``, ``"last"`` or ``"middle"``.
    stage_bytes : tuple
        Exact total [bytes] of every candidate stage (:func:`candidate_stages`: first, last and
        the lowest stage of each distinct middle make-up), in stage order.
    notes : tuple of str
        Adjustments made, e.g. sequence parallelism switched off at t = 1.
    phase : str
        The phase of the step the peak occurs in (:data:`PHASES`; the earliest on a tie).
    phase_bytes : tuple of (str, sympy.Expr)
        (phase, exact total [bytes]) of the most-loaded stage in each phase, with its
        allowances (:meth:`phases` as a dict); the largest equals ``bytes_total``.
    step_bytes : tuple of (str, sympy.Expr)
        (key, exact bytes) of the model states that exist only during the optimizer step
        (:data:`STEP_STATE_KEYS`, e.g. the fp32 main gradients made from a bf16 gradient
        buffer): part of the ``optimizer`` phase, not of the steady states.
    defaults : tuple of (str, object, str)
        The defaults the job applied, with where each comes from (:attr:`memsym.job.Job.defaults`).
    """

    total: Total
    values: dict
    stage: int
    role: str
    stage_bytes: tuple
    notes: tuple = ()
    phase: str = "forward"
    phase_bytes: tuple = ()
    step_bytes: tuple = ()
    defaults: tuple = ()

    @cached_property
    def _breakdown(self) -> dict:
        # evaluated once: bytes_total, grouped() and activations() all read it
        return self.total.breakdown(self.values)

    def breakdown(self) -> dict:
        """Exact bytes per term and ``total``."""
        return dict(self._breakdown)

    @property
    def bytes_total(self) -> sp.Expr:
        return self._breakdown["total"]

    def grouped(self) -> dict:
        """Exact bytes grouped as the command line reports them: model-state keys,
        ``activations`` (all activation terms), ``workspace``, ``nccl``, ``fragmentation``,
        the buffers outside PyTorch's allocator where the job has them
        (``tp_comm_userbuffers``) and ``total`` (their sum)."""
        bd = self._breakdown
        out = {key: bd[key] for key in _STATE_KEYS if key in bd}
        out["activations"] = sp.Add(*(bd[key] for key in _ACT_KEYS if key in bd))
        for key in ALLOWANCE_TERMS:
            out[key] = bd[key]
        for key in OUTSIDE_ALLOCATOR_KEYS:
            if key in bd:
                out[key] = bd[key]
        out["total"] = bd["total"]
        return out

    def phases(self) -> dict:
        """Phase -> exact total [bytes] of the most-loaded stage (:data:`PHASES`)."""
        return dict(self.phase_bytes)

    def activations(self) -> dict:
        """Exact bytes of each activation term."""
        bd = self._breakdown
        return {key: bd[key] for key in _ACT_KEYS if key in bd}


def training_memory(arch, layout: Layout | None = None, training: Training | None = None, *,
                    allowances: Mapping | None = None, stage: int | None = None) -> TrainingEstimate:
    r"""Per-GPU training memory on the most-loaded GPU [bytes].

    Every pipeline stage is evaluated (model states of its exact parameters, its in-flight
    activations, the embedding on the first and the output layer and logits on the last,
    the allowances) and the largest is returned: the first stage is *not* assumed.

    .. math:: M_{\max} = \max_{i} M_i,\qquad M_i = M_{\mathrm{states},i} + M_{\mathrm{act},i}
        + M_{\mathrm{ws}} + M_{\mathrm{nccl}} + \varphi_{\mathrm{frag}}(M_{\mathrm{states},i} + M_{\mathrm{act},i})

    Parameters
    ----------
    arch : Job, Architecture, str or path
        A :class:`~memsym.job.Job` (then ``layout``, ``training`` and ``allowances`` come from
        it), or an architecture, preset name or config.json path (str or :class:`pathlib.Path`).
    layout : Layout
    training : Training
    allowances : mapping, optional
        Overrides of the allowance defaults (see :data:`ALLOWANCES`), e.g. ``{"workspace": 0}``.
    stage : int, optional
        Evaluate this stage instead of searching for the most loaded.

    Examples
    --------
    >>> est = training_memory("llama2-7b", Layout(t=1, p=4, d=2),
    ...                       Training(seq_length=4096, micro_batch_size=1, recompute="selective",
    ...                                flash_attention=True, dropout=False, global_batch_size=64))
    >>> est.stage, est.role
    (0, 'first')
    """
    if isinstance(arch, Job):
        if layout is not None or training is not None:
            raise InvalidValueError("a Job carries its layout and training: pass the Job alone "
                                    "(job.replace(...) changes it)")
        return job_memory(arch, stage=stage, allowances=allowances)

    return job_memory(make_job(arch, layout=layout, training=training, allowances=allowances),
                      stage=stage)


def candidate_stages(x, layout: Layout) -> tuple:
    """The pipeline stages whose memory can be the largest, lowest index first.

    The first stage (embedding, the most micro-batches in flight) and the last (output layer,
    logits) always.  Between them, stages of the same make-up (the MoE/dense kind of each of
    their layers) hold the same parameters and the same activations per micro-batch, and the
    lower index keeps at least as many micro-batches in flight (1F1B: min(p - i, m);
    interleaved: 2(p - i - 1) + (v - 1) p + 1; GPipe: m), so the lowest index of each make-up
    stands for all of them: at most 2 + (distinct make-ups) stages, whatever p.

    Examples
    --------
    >>> from memsym.model import preset
    >>> candidate_stages(preset("llama2-7b"), Layout(p=32))
    (0, 1, 31)
    """
    pp = layout.p
    if pp <= 2:
        return tuple(range(pp))
    pattern = models.stages.layer_kind_pattern(x)
    if layout.pipeline_layout is not None:
        # a custom layout: the lowest middle rank of each chunk structure holds the most
        pl, lowest = layout.pipeline_layout, {}
        for i in range(1, pp - 1):
            key = tuple(tuple(pattern[j] for j in ids) for ids in pl.layer_ids(i))
            lowest.setdefault(key, i)
        return (0, *sorted(lowest.values()), pp - 1)
    if len(set(pattern)) == 1:
        return (0, 1, pp - 1)
    f, l_ = layout.first_stage_layers, layout.last_stage_layers
    L_ = x.num_layers
    if f is None and l_ is None:
        size, first = L_ // pp, L_ // pp
    else:
        middle = pp - (f is not None) - (l_ is not None)
        size = (L_ - (f or 0) - (l_ or 0)) // middle
        first = f if f is not None else size
    lowest = {}
    for i in range(1, pp - 1):              # O(L) in all: each stage's layers read once
        start = first + (i - 1) * size
        lowest.setdefault(tuple(pattern[start:start + size]), i)
    return (0, *sorted(lowest.values()), pp - 1)


def job_memory(j: Job, *, stage: int | None = None, allowances: Mapping | None = None) -> TrainingEstimate:
    """:func:`training_memory` of a validated :class:`~memsym.job.Job`."""
    x, layout, training = j.model, j.layout, j.training
    alw = dict(j.allowances)
    alw.update(allowances or {})
    vals = _training_values(x, layout, training, alw, j.m)
    stages = candidate_stages(x, layout) if stage is None else [stage]
    results = {}
    for i in stages:
        tot = resolved_stage_total(j, i)
        vals_i = {**vals, **stage_counts(j, i)}
        results[i] = (tot, tot.evaluate(vals_i), vals_i)
    best = max(results, key=lambda i: (results[i][1], -i))
    phases = phase_totals(j, best)
    pb = {ph: tot.evaluate(results[best][2]) for ph, tot in phases.items()}
    phase = max(PHASES, key=lambda ph: (pb[ph], -PHASES.index(ph)))
    opt = states_and_transients(j, best)[1]["optimizer"]
    step = tuple((term.key, term.evaluate(results[best][2]))
                 for term in opt if term.key in STEP_STATE_KEYS)
    return TrainingEstimate(results[best][0], results[best][2], best, _role(best, layout.p),
                            tuple(results[i][1] for i in sorted(results)), j.notes, phase,
                            tuple(pb.items()), step, j.defaults)


def validate(arch, layout: Layout, training: Training) -> None:
    """Refuse settings the framework would refuse, one line naming the rule
    (:mod:`memsym.rules`); ``arch`` may be an Architecture, a preset name or a config.json path.

    Examples
    --------
    >>> validate("llama2-70b", Layout(t=16), Training(seq_length=4096))
    Traceback (most recent call last):
    ...
    memsym.errors.DivisibilityError: tensor-parallel size t=16 must divide the KV heads (num_query_groups=8)
    """
    check_fields(layout, training)
    _validate_job(_resolve(arch, training), layout, training)
