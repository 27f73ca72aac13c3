"""The activations one pipeline stage holds at its peak: its decoder layers' micro-batches in
flight, the embedding, the output layer and loss, and the recompute working set.

:func:`stage_activations` (an architecture and a layout) and :func:`resolved_stage_activations`
(a job) build the Total; the helpers here count the micro-batches each model chunk keeps in
flight under the pipeline schedule and the recompute method's share of a chunk's layers.
One micro-batch's output layer and loss are :mod:`memsym.training.output_layer`'s.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import sympy as sp

from ..errors import InvalidValueError, choose
from ..frameworks import framework as framework_record
from ..job import Job, Layout, Training, check_fields, dropout_kept
from .. import model as models
from ..symbols import L, m, p, v
from ..term import Source, Term, Total
from ..terms import mamba as hybrid_terms, recipe_buffers as rb
from ..terms.gemma4_ple import gemma4_ple_model
from ..terms.activations import (RECOMPUTE, embedding_activations, lora_gathered_inputs,
                                 mtp_input_activations)
from ..terms.adapters import LORA_TARGETS
from ..terms.autocast16 import autocast16_input
from ..terms.fp32_residual import fp32_stage_input
from ..terms.pipeline_order import chunk_peak
from ..terms.pipelining_buffers import pipelining_buffers
from ..terms.dispatcher_buffers import allgather_dispatch_buffer
from ..terms.schedule import (SCHEDULES, embedding_microbatches, logits_microbatches,
                              stage_microbatches, torch_round_size, v_stage_microbatches)
from ..unchecked_job import UncheckedJob, unchecked
from ..values import cached_max
from .bf16_layers import bf16_activation_excess
from .layer_model import layer_model_of
from .output_layer import output_layer_activations
from .traits import (activation_width, boundary_bytes, cp_a2a_on, loss_kind, output_stage,
                     resolve_arch, sequence_parallel_on, stage_role)

#: memsym's own derivation of the terms without a published source (MTP, working set).
_DERIVED = Source("memsym-derivation", "memsym/training/activations.py, stage_activations")

#: Where each full-recompute method's split of a chunk's layers is defined.
_RECOMPUTE_METHOD_SOURCES = {
    **dict.fromkeys(("uniform", "block"), "Megatron-LM transformer_block.py _checkpointed_forward"),
    "every": "torchtitan distributed/activation_checkpoint.py _apply_layer_sac",
}


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
    return resolved_stage_activations(unchecked(resolve_arch(arch, training), layout, training), stage)


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


class _StageLayers(NamedTuple):
    """The decoder layers of one pipeline stage, by kind."""

    pattern: list       # MoE (True) or dense of every layer of the model
    kinds: list         # the same, of this stage's layers
    hybrid: tuple       # a hybrid model's layer kinds on the stage (models.stages.hybrid_kinds)
    uniform: bool       # an even split of one layer kind: the count stays symbolic (L/p)
    shared_block: dict | None = None   # a shared block's sizes (Zamba2: memsym.terms.mamba)


def _stage_layers(x, layout: Layout, stage: int) -> _StageLayers:
    """The decoder layers pipeline rank ``stage`` holds under the layout's split."""
    pattern = models.moe_layer_pattern(x)
    pl = layout.pipeline_layout
    rng = models.stage_layers(x, layout.p, stage, layout.first_stage_layers, layout.last_stage_layers, pl)
    kinds = models.stages.layer_kinds(pattern, rng)
    hybrid = models.stages.hybrid_kinds(x, rng)
    # one kind in the whole model: no MoE layer or every layer MoE (the pattern's cached count,
    # not a set of its 10^6 entries per stage)
    uniform = (layout.first_stage_layers is None and layout.last_stage_layers is None
               and pl is None and models.layer_patterns.moe_layer_count(x) in (0, len(pattern))
               and not hybrid)
    # Zamba's shared blocks: the per-use adapters' rank and placement, the Mamba version
    # (transformers shards no Zamba Mamba-1 mixer: memsym.terms.mamba1)
    shared_block = dict(adapter_rank=x.shared_adapter_rank or 0,
                        attention_adapters=bool(x.shared_attention_adapters),
                        mamba1=x.mamba_version == 1, tensor_parallel=layout.t != 1) \
        if x.shared_blocks else None
    return _StageLayers(pattern, kinds, hybrid, uniform, shared_block)


def _layer_stack(layers: _StageLayers, layer_model: tuple, layout: Layout, training: Training,
                 vv, recompute: str) -> tuple:
    """(layers per model chunk, one model chunk's activations of one micro-batch [bytes]):
    the stage's layers by kind (a hybrid's by :mod:`memsym.terms.mamba`), under the
    recompute method's split (:func:`_chunk_activations`)."""
    per_layer, common, mods, shared, addons = layer_model
    pattern, kinds, hybrid, uniform, shared_block = layers
    n_moe = sum(kinds)

    def layer_stack(mode: str):
        if uniform or hybrid:   # a hybrid's layers by their kinds (memsym/terms/mamba.py)
            return hybrid_terms.hybrid_stack(hybrid, mode, mods, shared, layout.c > 1, common,
                                             shared_block, addons) \
                if hybrid else per_chunk * per_layer(pattern[0], mode)
        out = (sp.Integer(len(kinds) - n_moe) * per_layer(False, mode) if len(kinds) > n_moe
               else 0) + (sp.Integer(n_moe) * per_layer(True, mode) if n_moe else 0)
        return out / (1 if vv is None else vv)

    per_chunk = (L / p if vv is None else L / (p * v)) if uniform \
        else sp.Integer(len(kinds)) / (1 if vv is None else vv)
    stack = _chunk_activations(layer_stack, per_chunk, training, 1 if vv is None else vv) \
        if kinds else layer_stack(recompute)
    return per_chunk, stack


def _layers_term(held_layers, layers: _StageLayers, schedule: str, interleaved: bool,
                 recompute: str, mods, training: Training) -> Term:
    """The ``layer_activations`` Term: ``held_layers`` [bytes], described by the schedule and
    the recompute that set it."""
    method, n_rec = training.memory.recompute_method, training.memory.recompute_num_layers
    return Term("layer_activations", held_layers,
                f"{len(layers.kinds)} decoder layers x in-flight micro-batches ({schedule}"
                + (", interleaved" if interleaved else "") + f", recompute {recompute}"
                + (f" ({', '.join(mods) or 'no module'})" if recompute == "selective" else "")
                + (f", {method} {n_rec}: " + _RECOMPUTE_METHOD_SOURCES[method]
                   if recompute == "full" and method else "") + ")",
                Source("korthikanti", "§4.2.3, Eq. 5 (first stage holds L layers' worth)" + (
                    "; hybrid layers: memsym/terms/mamba.py" if layers.hybrid else "") + (
                    "; autocast over fp32 weights: memsym/terms/autocast.py (transformers "
                    "5.25.0 modeling_llama.py:62-67, 163-164, 244-246; torch autocast_mode.cpp "
                    "cached_cast)" if training.states.autocast else "")),
                label="layers")


def _lora_terms(layers: _StageLayers, layout: Layout, training: Training, stage: int, chunks,
                live, vv) -> list:
    """The LoRA adapters' gathered inputs under sequence parallelism (none when the adapters
    regather them, or in full training): each eligible layer's, x the chunks in flight."""
    if training.adapters.finetune == "full" or not sequence_parallel_on(layout) \
            or training.adapters.lora_regather:
        return []
    pattern, kinds = layers.pattern, layers.kinds
    n_moe = sum(kinds)
    targets = set(LORA_TARGETS if training.adapters.lora_targets == "all" else training.adapters.lora_targets)
    qkv = int(bool(targets & {"q", "k", "v"}))
    fc1 = int(bool(targets & {"gate", "up"}))     # dense layers only: expert adapters fall back
    eligible = (sp.Integer(len(kinds) - n_moe) * (qkv + fc1) + sp.Integer(n_moe) * qkv)
    if layers.uniform:
        eligible = (L / p) * (qkv + fc1 * (1 - int(pattern[0])))
    eligible = eligible / (1 if vv is None else vv)
    held = chunks
    if live is not None:       # a custom layout: the layers in flight, not chunks x L/v
        eligible, held = sp.Integer(1), sum(
            n * sum((qkv + fc1 * (1 - int(pattern[i]))) for i in ids)
            for n, ids in zip(live, layout.pipeline_layout.layer_ids(stage)))
    gathered = lora_gathered_inputs(eligible, sequence_parallel=True,
                                    width=activation_width(training))
    return [replace(gathered, expr=held * gathered.expr)] if gathered.expr != 0 else []


def _embedding_count(schedule: str, stage: int, *, vv, mm, group):
    """The first model chunk's micro-batches in flight on the first stage (none elsewhere):
    they run the embedding rather than receive a stage input."""
    if stage != 0:
        return sp.Integer(0)
    return embedding_microbatches(schedule, pp=p, vv=vv, mm=mm, group=group)


def _fp32_input_terms(layout: Layout, training: Training, stage: int, chunks, live,
                      recompute: str, sp_on: bool, n_emb) -> list:
    """Under ``--fp32-residual-connection`` (pp > 1), the fp32 stage inputs the schedule
    keeps for the chunk passes in flight that received theirs from the previous stage
    (:func:`memsym.terms.fp32_residual.fp32_stage_input`): all but the first stage's first
    chunk.  Under full recompute whose first layer is checkpointed the received tensor is that
    checkpoint's input, counted by the layer (``fp32_checkpoint_input``)."""
    if not training.memory.fp32_residual_connection or layout.p == 1:
        return []
    method, n_rec = training.memory.recompute_method, training.memory.recompute_num_layers
    if recompute == "full" and not (method == "block" and n_rec == 0):
        return []
    received = sum(live) - (live[0] if stage == 0 else 0) if live is not None \
        else chunks - n_emb
    if received == 0:
        return []
    one = fp32_stage_input(sequence_parallel=sp_on)
    return [Term("fp32_stage_inputs", received * one.expr, one.description + ", x the received "
                 "micro-batches in flight", one.source, label="fp32 stage inputs")]


def _embedding_term(schedule: str, training: Training, sp_on: bool, *, vv, mm, group,
                    live) -> Term:
    """The first stage's ``embedding_activations`` of its in-flight micro-batches."""
    n_emb = embedding_microbatches(schedule, pp=p, vv=vv, mm=mm, group=group) \
        if live is None else sp.Integer(live[0])     # the embedding is in chunk 0
    return Term("embedding_activations",
                n_emb * embedding_activations(sequence_parallel=sp_on,
                                              dropout=dropout_kept(training)).expr,
                "input ids and embedding dropout of the in-flight micro-batches",
                Source("korthikanti", "§4.3 (embedding dropout sbhp/t); Megatron-LM 8sbp"),
                label="embedding")


def _per_layer_projection_term(x, schedule: str, *, vv, mm, group, live) -> Term:
    """Gemma 4's model-level per-layer input projection (memsym.terms.gemma4_ple) of the
    first stage's in-flight micro-batches, beside the embedding they run."""
    n_emb = embedding_microbatches(schedule, pp=p, vv=vv, mm=mm, group=group) \
        if live is None else sp.Integer(live[0])
    one = gemma4_ple_model(x.num_layers)
    return Term(one.key, n_emb * one.expr, one.description + ", x the micro-batches in "
                "flight on the first stage", one.source, label=one.label)


def _output_terms(x, layout: Layout, training: Training, schedule: str, mm, layer_model: tuple,
                  layers: _StageLayers, recompute: str) -> list:
    """The output stage's ``output_activations`` (final norm, output layer, logits) and, with
    multi-token prediction, ``mtp_activations``: each MTP layer's block is a hybrid's
    ``mtp_layer_pattern`` (:func:`memsym.model.stages.mtp_layer_kinds`), else one layer of the
    last decoder layer's kind."""
    n_out = logits_microbatches(schedule, mm=mm)
    out_total = output_layer_activations(x, layout, training)
    out = out_total.expr
    # the logits dominate: the Term carries their source (Korthikanti's fp32 softmax, or
    # torchtitan's compiled loss keeping the 16-bit logits; TRL's chunked loss keeps none)
    kind = loss_kind(layout, training)
    terms = [Term("output_activations", n_out * out,
                  "final norm and the packed hidden states of TRL's chunked loss" if
                  kind == "chunked" else
                  "final norm, output-layer input and the logits kept for the loss",
                  out_total["logits"].source if kind in ("compiled", "te")
                  else out_total["packed_hidden"].source if kind == "chunked"
                  else Source("korthikanti", "§4.3 (2sbh/t, 2sbh/t, 4sbv/t)" + (
                      "; autocast over fp32 weights: memsym/terms/autocast.py, autocast_output"
                      if training.states.autocast else "")),
                  label="output layer")]
    if x.mtp_num_layers:
        checkpointed = _mtp_checkpointed(training, recompute)
        # under the MTP checkpoint the layer's own final_layernorm (_postprocess, called at the
        # end of _proj_and_transformer_layer, multi_token_prediction.py:1429 at d98e8a64dd)
        # is recomputed: the pass keeps the output layer's input and the loss's logits only
        mtp_out = out - sum((out_total[k].expr for k in ("final_norm_input",
                                                         "final_norm_statistics")
                             if k in out_total.keys), sp.Integer(0)) if checkpointed else out
        # the MTP layer ignores FP4: it enters an FP8 context only under config.fp8 ("TODO:
        # currently ignoring FP4 in MTP layers", multi_token_prediction.py:1386-1394 at
        # d98e8a64dd) and runs after the decoder block, whose FP4 contexts are per layer
        # (transformer_block.py:631-634, :692-695; gpt_model.py:712): a bf16 layer
        mtp_model = layer_model if layer_model[1].get("fp8_inputs") != "nvfp4" \
            else layer_model_of(x, sequence_parallel_on(layout), training, recompute, nvfp4=False,
                                cp_a2a=cp_a2a_on(layout, training))
        # one set per pass, a repeated layer's too (mtp_use_repeated_layer runs layers[0] on
        # each pass's own inputs, multi_token_prediction.py:2048-2115 at d98e8a64dd)
        terms.append(Term("mtp_activations",
                          n_out * x.mtp_num_layers * (_mtp_block(x, layout, training,
                                                                 mtp_model, layers,
                                                                 recompute) + mtp_out),
                          "multi-token-prediction layers: one layer and one more logits each",
                          _DERIVED, label="MTP"))
        inputs = mtp_input_activations(
            sequence_parallel=sequence_parallel_on(layout), norm=x.normalization.lower(),
            dropout=dropout_kept(training), checkpointed=checkpointed,
            fp8_inputs=mtp_model[1].get("fp8_inputs", False), width=activation_width(training))
        terms.append(Term("mtp_input_activations", n_out * x.mtp_num_layers * inputs.expr,
                          "each MTP pass's embedding, enorm/hnorm inputs and statistics and "
                          "eh_proj's 2h-wide input", Source(
                              "megatron-lm", "megatron/core/transformer/multi_token_prediction.py"
                              " at d98e8a64dd, _get_embeddings and _concat_embeddings "
                              "(lines 1279-1359)"), label="MTP inputs"))
    return terms


def _mtp_checkpointed(training: Training, recompute: str) -> bool:
    # Megatron's MTP layer runs under its own checkpoint in full recompute, except with
    # recompute_method block (multi_token_prediction.py:1621-1648 at d98e8a64dd)
    return recompute == "full" and training.memory.recompute_method != "block"


def _mtp_block(x, layout: Layout, training: Training, layer_model: tuple, layers: _StageLayers,
               recompute: str) -> sp.Expr:
    """One MTP layer's block of one micro-batch [bytes]: a hybrid's pattern letters counted by
    kind (Megatron-core builds the block as a ``HybridStack`` of ``mtp_layer_pattern``,
    multi_token_prediction.py:1199-1214 at d98e8a64dd), else the last decoder layer's kind.

    Under full recompute the MTP layer runs under its own checkpoint (lines 1584-1629), so
    its block keeps nothing (the checkpoint's arguments are
    :func:`memsym.terms.activations.mtp_input_activations`), except with
    ``recompute_method`` block (lines 1630-1648: "not supported for MTP yet. Skipping
    recompute"): the GPT path's one layer keeps everything; a hybrid's ``HybridStack`` still
    runs its own ``checkpointed_forward`` (models/hybrid/hybrid_block.py:360-371), whose block
    method checkpoints the first N of its layers and keeps everything of the rest
    (megatron/core/recompute.py:167-181)."""
    per_layer, common, mods, shared, addons = layer_model
    if _mtp_checkpointed(training, recompute):
        # the whole layer is checkpointed: it keeps only the checkpoint's two arguments,
        # counted with its inputs (memsym.terms.activations.mtp_input_activations)
        return sp.Integer(0)
    block = recompute == "full"
    if not (layers.hybrid and x.mtp_layer_pattern):
        return per_layer(layers.pattern[-1], "none" if block else recompute)
    n_rec = training.memory.recompute_num_layers if block else None
    counts: dict = {}
    for i, kind in enumerate(models.stages.mtp_layer_kinds(x)):
        mode = "none" if block and i >= n_rec else recompute
        counts[(kind, mode)] = counts.get((kind, mode), 0) + 1
    total = sp.Integer(0)
    for mode in dict.fromkeys(m for _, m in counts):
        counted = tuple((kind, n, bool(x.mamba_gated_norm))
                        for (kind, m), n in counts.items() if m == mode)
        total += hybrid_terms.hybrid_stack(counted, mode, mods, shared, layout.c > 1, common,
                                           addons=addons)
    return total


def _largest_layer(layers: _StageLayers, layer_model: tuple, layout: Layout) -> sp.Expr:
    """One layer's activations without recompute, for the working set [bytes]: a hybrid
    stage's largest layer kind (a Gated DeltaNet or Mamba layer may exceed an attention one:
    :func:`memsym.terms.mamba.hybrid_stack` of each kind alone); else the model's own
    ``per_layer`` of the stage's kind (MoE where the stage holds an MoE layer)."""
    per_layer, common, mods, shared, addons = layer_model
    if not layers.hybrid:
        return per_layer(any(layers.kinds), "none")
    one = [hybrid_terms.hybrid_stack([(kind, 1, gated)], "none", mods, shared, layout.c > 1,
                                     common, layers.shared_block, addons)
           for kind, _, gated in layers.hybrid]
    return one[0] if len(one) == 1 else cached_max(*one)


def _working_set_terms(j: Job | UncheckedJob, stage: int, layers: _StageLayers, per_chunk,
                       layer_model: tuple, recompute: str) -> list:
    """Under full recompute, the ``recompute_working_set``: one checkpointed group's
    activations, rematerialised during its backward (:func:`_largest_layer`: a layer's
    activations, a hybrid stage's largest)."""
    layout, training = j.layout, j.training
    method, n_rec = training.memory.recompute_method, training.memory.recompute_num_layers
    # block 0 checkpoints no layer (core/recompute.py: layer_idx < 0 is never true): nothing
    # is rematerialised, so no working set
    if recompute != "full" or not layers.kinds or (method == "block" and n_rec == 0):
        return []
    pl = layout.pipeline_layout
    if pl is not None:
        per_chunk = sp.Integer(max(pl.chunk_layers(stage)))
    group = sp.Min(n_rec, per_chunk) if method == "uniform" else 1
    return [Term("recompute_working_set", group * _largest_layer(layers, layer_model, layout),
                 "one checkpointed group's activations (one layer unless "
                 "recompute_method uniform N) rematerialised during its backward",
                 _DERIVED, label="recompute working set")]


def resolved_stage_activations(j: Job | UncheckedJob, stage: int) -> Total:
    """:func:`stage_activations` of a job (its m: a number, the symbol m or None = unknown).

    Examples
    --------
    >>> from memsym.job import job
    >>> resolved_stage_activations(job("llama2-7b", pp=2), 1).keys
    ('layer_activations', 'output_activations')
    """
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
    sp_on = sequence_parallel_on(layout)
    interleaved = layout.v is not None and layout.v > 1
    vv = v if interleaved else None
    mm = m if j.m is not None else None
    # a search template keeps c a symbol (memsym.terms.context_parallel.a2a_attention_output)
    a2a = cp_a2a_on(layout, training, isinstance(j, UncheckedJob))
    layer_model = layer_model_of(x, sequence_parallel_on(layout), training, recompute,
                                 cp_a2a=a2a)
    per_layer = layer_model[0]
    layers = _stage_layers(x, layout, stage)
    chunks, group = _in_flight_chunks(layout, training, stage, schedule, pp=p, vv=vv, mm=mm)
    per_chunk, stack = _layer_stack(layers, layer_model, layout, training, vv, recompute)
    live, held_layers = None, chunks * stack
    if layout.pipeline_layout is not None and pp > 1:
        # a custom layout's chunks differ in size: each chunk's micro-batches in flight when
        # the rank holds the most decoder layers, walking Megatron's op order
        live, held_layers = _layout_in_flight(layout, training, stage, layers.pattern, per_layer,
                                              group, j.m if isinstance(j.m, int) else None)
    terms = [_layers_term(held_layers, layers, schedule, interleaved, recompute, layer_model[2],
                          training)] + bf16_activation_excess(   # first_last_layers_bf16
        x, layout, training, stage,
        lambda trn: layer_model_of(x, sp_on, trn, recompute, cp_a2a=a2a),
        lambda j: chunks / (vv or 1) if live is None else live[j], recompute,
        (layout.c > 1, layers.shared_block))
    terms += rb.offloaded_layers(layers.pattern[:training.memory.cpu_offloading_num_layers],
                                 per_layer)
    if framework_record(training.framework).torch_pipelining and pp > 1 and mm is not None:
        terms.append(pipelining_buffers(stage, pp, vv, mm, group, boundary_bytes(sp_on, training),
                                        activation_width(training), training.pipeline.schedule,
                                        training.pipeline.stage_placement))
    if training.memory.moe_dispatcher == "allgather" and any(layers.kinds):
        terms.append(allgather_dispatch_buffer())   # Megatron's global buffer, whole run
    terms += _lora_terms(layers, layout, training, stage, chunks, live, vv)
    terms += _fp32_input_terms(layout, training, stage, chunks, live, recompute, sp_on,
                               _embedding_count(schedule, stage, vv=vv, mm=mm, group=group))
    if stage == 0:
        terms.append(_embedding_term(schedule, training, sp_on, vv=vv, mm=mm, group=group,
                                     live=live))
        if x.embedding_norm and training.states.autocast and training.states.precision != "fp32":
            # BLOOM's embedding LayerNorm in fp32 under CUDA's autocast (check_autocast: p = 1)
            terms.append(autocast16_input(recompute,
                                          frozen=training.adapters.finetune != "full"))
        if x.per_layer_input_size and training.adapters.finetune == "full":
            # under LoRA nothing of it needs a gradient (memsym.terms.gemma4_ple)
            terms.append(_per_layer_projection_term(x, schedule, vv=vv, mm=mm, group=group,
                                                    live=live))
    if stage == output_stage(layout, training):
        terms += _output_terms(x, layout, training, schedule, mm, layer_model, layers,
                               recompute)
    terms += _working_set_terms(j, stage, layers, per_chunk, layer_model, recompute)
    return Total(f"activations of pipeline stage {stage} ({stage_role(stage, pp)})", tuple(terms))


def layers_in_flight(j: Job | UncheckedJob, stage: int, counted) -> sp.Expr:
    r"""The (decoder layer, micro-batch) pairs stage ``stage`` holds at its activation peak,
    of the layers ``counted(moe)`` keeps [1].

    :math:`n_{\mathrm{mb}}(i)\,L_i/v` (the count :func:`resolved_stage_activations` multiplies
    one layer's activations by), or for a custom layout each chunk's micro-batches in flight
    times its counted layers.  ``counted(moe: bool) -> bool`` picks the layer kinds.

    Examples
    --------
    >>> from memsym.job import job
    >>> layers_in_flight(job("llama2-7b", pp=4), 0, lambda moe: True)   # p micro-batches x L/p
    L
    """
    layout, training = j.layout, j.training
    schedule = "1f1b" if layout.p == 1 else training.pipeline.schedule
    vv = v if layout.v is not None and layout.v > 1 else None
    layers = _stage_layers(j.model, layout, stage)
    chunks, group = _in_flight_chunks(layout, training, stage, schedule, pp=p, vv=vv,
                                      mm=m if j.m is not None else None)
    if layout.pipeline_layout is not None and layout.p > 1:
        live, total = _layout_in_flight(layout, training, stage, layers.pattern,
                                        lambda moe, mode: sp.Integer(int(counted(moe))), group,
                                        j.m if isinstance(j.m, int) else None)
        return total
    if layers.uniform:
        return chunks * (L / p if vv is None else L / (p * v)) * int(counted(layers.pattern[0]))
    kept = sum(1 for q in layers.kinds if counted(bool(q)))
    return chunks * sp.Integer(kept) / (1 if vv is None else vv)
