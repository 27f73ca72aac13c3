"""The transients of each phase of a training step on one pipeline stage: the loss's
buffers, the sharding schemes' gathered parameters and gradient buckets, the optimizer step's
temporaries, and the step-only model states.

:func:`phase_transients` gives each phase (:data:`PHASES`) its Terms beyond the steady model
states and activations; :func:`states_and_transients` splits the model states of
:mod:`memsym.training.model_states` into the steady ones and those of the optimizer step.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import sympy as sp

from ..errors import InvalidValueError
from ..frameworks import framework as framework_record
from ..job import Job, Layout, Training
from ..symbols import (N_bkt, N_exp, N_lin, N_ll, N_pf, N_rep, N_tp, N_xq, b_hp, b_r, b_u, c, d, m,
                       n_ag, n_bkt, r_lora, t, v)
from ..term import Source, Term, Total
from ..terms import (context_parallel as cp, recipe_buffers as rb, torch_moments as tm,
                     transients as tr)
from ..model.layer_patterns import moe_layer_count
from ..model.muon_matrices import muon_matrices
from ..terms import muon
from ..terms.autocast import autocast_cached_casts, layer_linear_biases
from ..terms.chunked_loss import chunked_loss_backward, chunked_loss_forward
from ..terms.peft_lora import peft_cached_casts, peft_head_input_held
from ..terms.pipelining_buffers import pipelining_recv_buffers
from ..terms.sharding_transients import fsdp2_stream_pools
from ..terms.transformer_layer import token_split
from ..terms.widths import STATE_DTYPES, default_grad_dtype
from ..unchecked_job import UncheckedJob
from ..values import as_expr
from .activations import resolved_stage_activations
from .output_layer import output_layer_activations
from .layer_model import peft_adapters_cast, peft_layer_targets
from ..terms.accelerate_fsdp import TRAINER_ZERO_GRAD
from .accelerate_fsdp import add_accelerate_fsdp_transients, uses_accelerate_groups
from .model_states import (STEP_STATE_KEYS, bf16_experts_apart, moment_share, stage_has_experts,
                           state_terms, state_training)
from .traits import (DEEPSPEED_ZERO, activation_width, autotp_logits, boundary_bytes,
                     logits_gathered, loss_kind, output_stage, residual_width, sequence_parallel_on)

#: The phases of one training step whose peaks memsym compares (on the most-loaded stage):
#: the end of the forward, the loss's backward (the first of the backward: every activation
#: still alive), the blocks' backward (the loss's buffers and the output layer's activations
#: freed, the sharding schemes' backward buffers) and the optimizer step.
PHASES = ("forward", "loss-backward", "backward", "optimizer")

#: memsym's own derivation of the peak over the step's phases.
PHASE_SOURCE = Source("memsym-derivation", "memsym/training/transients.py, phase_transients "
                      "(peak over the step's phases)")


def _transient_widths(training: Training) -> dict:
    """Knob values of the transient Terms: the libraries' defaults
    (:data:`memsym.terms.transients.DEFAULTS`), the 16-bit width from the precision."""
    half = activation_width(training)
    vals = {sym: sp.Integer(tr.DEFAULTS[sym]) for sym in (N_bkt, N_pf, b_r, n_ag, n_bkt)}
    overlap_buffers = framework_record(training.framework).overlap_ipg_buffers
    if overlap_buffers is not None and training.comm.overlap_grad_reduce:
        vals[n_bkt] = sp.Integer(overlap_buffers)   # DeepSpeed's overlap_comm: a second one
    # DeepSpeed's buffers as its config sets them (readers.jobs.deepspeed_job)
    knobs = {"reduce_bucket_size": N_bkt, "stage3_prefetch_bucket_size": N_pf,
             "ipg_buffers": n_bkt}
    vals.update({knobs[name]: sp.Integer(value) for name, value in training.states.zero_buckets})
    vals.update({b_u: sp.Integer(half), b_hp: sp.Integer(half)})
    if uses_accelerate_groups(training):     # reduce_dtype = param_dtype (Accelerate's policy)
        vals[b_r] = sp.Integer(half)
    return vals


def _width_items(training: Training) -> tuple:
    """:func:`_transient_widths` as ``(symbol, value)`` pairs, once per distinct training (a
    cold search asks once per stage template)."""
    return _cached_width_items(training)     # Training holds no list (memsym.job_record)


@functools.lru_cache(maxsize=1024)
def _cached_width_items(training: Training) -> tuple:
    return tuple(_transient_widths(training).items())


def _loss_transients(kind: str, training: Training, cp_size) -> tuple:
    """(forward Terms, loss-backward Terms) of the cross-entropy ``kind`` beyond its saved
    tensors (the ``logits`` of :func:`memsym.terms.activations.output_activations`);
    ``cp_size`` None: c left a symbol (a search template)."""
    if kind == "transformers":
        # ForCausalLMLoss: the logits in the compute dtype (autocast's under autocast), their
        # fp32 copy when 16-bit, the labels' int64 copies (none under Ulysses: shift_labels)
        dtype = "fp32" if activation_width(training) == 4 else (
            training.states.autocast or training.states.precision)
        fwd = tr.hf_cross_entropy_transient(dtype=dtype, shifted=None if cp_size is None
                                            else cp_size == 1)
        return tuple(fwd.terms), tuple(tr.torch_cross_entropy_backward().terms)
    if kind == "vocab-parallel":
        fwd = tr.cross_entropy_transient()
        # the fp32 softmax turned gradient in place; autograd casts it to the 16-bit input
        grad = replace(fwd["logits_16bit"], key="logits_grad_16bit", label="bf16 logits grad",
                       description="16-bit gradient of the logits, made from the fp32 "
                       "softmax-turned-gradient before it is freed")
        return tuple(fwd.terms), (grad,)
    if kind == "compiled":
        # Inductor fuses the cast: nothing beyond the saved 16-bit logits in forward, their
        # 16-bit gradient in backward, a new buffer: the logits are the compiled graph's input,
        # not donated to it (tests/test_engine_compile.py runs both)
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
    # the Trainer's model.zero_grad() after every step does the same (TRAINER_ZERO_GRAD)
    return ((framework_record(training.framework).grads_set_to_none
             or uses_accelerate_groups(training)) and training.states.sharding == "fsdp"
            and training.states.convention == "framework" and training.adapters.finetune == "full")


def _pools_apart(training: Training) -> bool:
    """Whether the total counts FSDP2's side-stream pools apart (:func:`stream_pools`): a
    reserved or device count of the sharded gradients torchtitan sets to None each step."""
    return training.memory.metric != "allocated" and _gradients_not_yet_made(training)


def stream_pools(j: Job | UncheckedJob, stage: int) -> tuple:
    r"""FSDP2's side-stream pools on stage ``stage`` where the count sees them [bytes].

    .. math:: M_{\mathrm{rs}} + M_{\mathrm{ag}}

    (:func:`memsym.terms.sharding_transients.fsdp2_stream_pools`).  Under torchtitan's FSDP2
    the reserved and device counts hold the sharded gradients' blocks in the reduce-scatter
    stream's pool in every phase, the default stream never re-using them: the stage's
    gradient states and their absence before the blocks' backward
    (:func:`_gradients_not_yet_made`) leave the phases, whose peak the fragmentation margin
    is a fraction of, and come back here, after the allowances, with the all-gather pool.
    Empty for an ``allocated`` count and for other runtimes.

    Parameters
    ----------
    j : Job or UncheckedJob
        The job.
    stage : int
        The pipeline stage.

    Returns
    -------
    tuple of Term
        ``reduce_scatter_pool`` and ``all_gather_pool``, or none.

    Examples
    --------
    >>> from memsym.job import job as make_job
    >>> [t_.key for t_ in stream_pools(make_job("llama3-8b", d=8, framework="torchtitan",
    ...                                         sharding="fsdp", metric="reserved"), 0)]
    ['reduce_scatter_pool', 'all_gather_pool']
    >>> stream_pools(make_job("llama3-8b", d=8, framework="torchtitan", sharding="fsdp",
    ...                       metric="allocated"), 0)
    ()

    References
    ----------
    .. [pytorch-fsdp2] ``foreach_reduce``, ``foreach_all_gather``.
    """
    training = j.training
    if not _pools_apart(training):
        return ()
    x, layout = j.model, j.layout
    grads = sp.Add(*(term.expr for term in state_terms(stage_has_experts(x, layout, stage),
                                                       state_training(training))
                     if term.key in _GRAD_KEYS))
    io = framework_record(training.framework).fsdp_io_groups or uses_accelerate_groups(training)
    pools = fsdp2_stream_pools(grads, N_ll, root_group=training.memory.fsdp_root_group,
                               untied=bool(x.untie_embeddings_and_output_weights),
                               first=io and stage == 0,
                               last=io and stage == output_stage(layout, training))
    widths = _width_items(training)
    return tuple(_widened(term, widths) for term in pools)


#: The sharded-gradient state keys (FSDP2's reduce-scatter outputs).
_GRAD_KEYS = ("gradients", "expert_gradients")


def phase_transients(j: Job | UncheckedJob, stage: int, activations: Total | None = None) -> dict:
    r"""The transient Terms of each phase of the step on pipeline stage ``stage`` [bytes].

    ``forward`` (the last micro-batch's forward ends: every in-flight activation held),
    ``loss-backward`` (the loss's gradients while every activation is alive), ``backward``
    (the blocks' backward: the output layer's activations freed, the sharding scheme's
    backward buffers) and ``optimizer`` (all activations freed):

    * last stage: the loss's buffers beyond what it saves, by implementation
      (:func:`memsym.training.traits.loss_kind`): Megatron-core's fused cross-entropy
      (:func:`memsym.terms.transients.cross_entropy_transient`; its 16-bit logits gradient in
      the loss's backward), eager ``F.cross_entropy`` on a ``.float()`` copy (torchtitan,
      FSDP2: :func:`memsym.terms.transients.torch_cross_entropy_transient` and
      :func:`memsym.terms.transients.torch_cross_entropy_backward`), torch's
      ``loss_parallel`` (torchtitan with t > 1:
      :func:`memsym.terms.transients.loss_parallel_transient`,
      :func:`memsym.terms.transients.loss_parallel_backward`), transformers' (DeepSpeed:
      :func:`memsym.terms.transients.hf_cross_entropy_transient`) or a compiled loss (only the
      16-bit gradient); in ``backward`` the output layer's activations are freed (``output_freed``);
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
      PEFT's: :func:`_add_recompute_absences`, :func:`_add_loss_transients`;
    * torchtitan with PP: the receive buffers of ``torch.distributed.pipelining``
      (:func:`memsym.terms.pipelining_buffers.pipelining_recv_buffers`) in the optimizer
      phase (the others count them with the activations, ``pipeline_buffers``);
    * DeepSpeed ZeRO-3: :func:`memsym.terms.transients.zero3_transients` in forward and
      both backward phases; ZeRO-1/2: the IPG buckets
      (:func:`memsym.terms.transients.deepspeed_ipg_buckets`) from the first backward on;
    * Megatron-core (distributed optimizer, DDP): buckets are views of the gradient and
      parameter buffers (:func:`memsym.terms.transients.megatron_buckets`) and TE/Apex
      FusedAdam steps in chunks: no transient beyond the loss's (TP overlap's userbuffers sit
      outside PyTorch's allocator: :func:`memsym.training.totals.outside_allocator`).

    The model states that exist only in the step (:data:`STEP_STATE_KEYS`) are not among
    these Terms: the total adds them to the optimizer phase.

    The sharding buffers apply under ``convention="framework"`` (the default); the textbook
    conventions keep only the loss's transients.  Knobs take
    :data:`memsym.terms.transients.DEFAULTS`; ``N_ll`` is the largest layer on one GPU.

    Parameters
    ----------
    j : Job or UncheckedJob
        The job.
    stage : int
        The pipeline stage.
    activations : Total, optional
        The stage's activations where the caller already built them (the costliest part of a
        cold search's templates); :func:`resolved_stage_activations` when None.

    Returns
    -------
    dict
        Phase name (:data:`PHASES`) -> tuple of Terms.

    Examples
    --------
    >>> from memsym.job import job as make_job
    >>> ph = phase_transients(make_job("llama2-7b"), 0)
    >>> [t_.key for t_ in ph["forward"]], [t_.key for t_ in ph["loss-backward"]]
    (['logits_16bit', 'ce_per_token'], ['logits_grad_16bit'])
    >>> [t_.key for t_ in ph["backward"]], ph["optimizer"]
    (['output_freed'], ())
    """
    x, layout, training = j.model, j.layout, j.training
    out = {ph: [] for ph in PHASES}
    acts = (resolved_stage_activations(j, stage) if activations is None else activations).terms
    _add_recompute_absences(out, acts, x, training)
    if stage == output_stage(layout, training):
        _add_loss_transients(out, j)
    if framework_record(training.framework).torch_pipelining and layout.p > 1 and j.m is not None:
        # the pipeline's receive buffers outlive the step: the optimizer step sees them
        out["optimizer"].append(pipelining_recv_buffers(
            stage, layout.p, v if (layout.v or 1) > 1 else None, m,
            boundary_bytes(sequence_parallel_on(layout), training), training.pipeline.stage_placement))
    start_excess, own_groups = _add_sharding_transients(out, x, layout, training)
    _add_master_weight_cast(out, j, stage)
    if _gradients_not_yet_made(training) and not _pools_apart(training):
        _add_gradients_not_yet_made(out, j, stage, acts, start_excess)
    if own_groups and stage == output_stage(layout, training):   # FSDP2's [norm, output] backward
        out["loss-backward"].append(tm.output_group_backward(
            out["loss-backward"], output_layer_activations(x, layout, training)))
    cp.add_phase_buffers(out, None if isinstance(j, UncheckedJob) else layout.c, training.framework,
                         training.comm.cp_comm_type, activation_width(training))
    widths = _width_items(training)
    return {ph: tuple(_widened(term, widths) for term in terms) for ph, terms in out.items()}


def _add_master_weight_cast(out: dict, j: Job | UncheckedJob, stage: int) -> None:
    """Add to ``out["optimizer"]`` the 16-bit casts of the master shards that Transformer
    Engine holds while Megatron-core's distributed optimizer requantizes FP8 / NVFP4 parameters
    after the step (:func:`memsym.terms.transients.master_weight_cast`): the rank's share of
    the quantized dense linear weights (``N_lin`` over d c) and of its routed experts' (over
    the expert data-parallel group d c t / (e t_e)).  Not where the optimizer makes the
    cast itself: the precision-aware optimizer with delayed scaling or a 16-bit master
    (``use_precision_aware_optimizer_no_fp8_or_ds_fp8``, optimizer_config.py:407-413 at
    d98e8a64dd, returns before ``quantize_param_shard``) nor MXFP8, whose parameters are
    staged through the gradient buffer."""
    training = j.training
    st = training.states
    quantized = (st.precision == "fp8" and st.fp8_param_gather) or st.fp4_param_gather
    if not (quantized and st.convention == "framework" and st.sharding == "distributed-optimizer"
            and not st.megatron_fsdp and st.optimizer != "none" and st.offload == "none"
            and training.adapters.finetune == "full" and st.fp8_recipe != "mxfp8"):
        return
    if st.precision_aware and (st.fp8_recipe in (None, "delayed")
                               or st.main_params_dtype != "fp32"):
        return
    shard = N_lin / (d * c)
    if stage_has_experts(j.model, j.layout, stage):
        experts = N_xq if bf16_experts_apart(training) else N_exp
        shard = shard + experts / (d * c * t)     # N/(e t_e) per GPU over d c t/(e t_e)
    out["optimizer"].append(tr.master_weight_cast(shard, b_hp))


def _add_recompute_absences(out: dict, acts, x, training: Training) -> None:
    """Add to ``out`` (phase -> Terms) full recompute's phases: only the blocks' backward
    rematerialises a layer (``working_set_absent`` in forward and loss-backward), and under
    autocast its cache holds until the forward ends every layer's weight casts (full
    recompute) and bias casts (p = 1: :func:`memsym.terms.autocast.autocast_cached_casts`),
    PEFT's fp32 adapters' casts too (:func:`memsym.terms.peft_lora.peft_cached_casts`)."""
    for ph in ("forward", "loss-backward"):
        out[ph] += [tm.working_set_absent(a_) for a_ in acts if a_.key == "recompute_working_set"]
    if training.memory.recompute == "full" and training.adapters.finetune != "full" \
            and framework_record(training.framework).hf_model_code \
            and peft_adapters_cast(training):
        # PEFT's fp32 adapters' casts, in autocast's cache until the model's forward returns
        n_moe = moe_layer_count(x)
        w = activation_width(training)
        casts = [peft_cached_casts(n, peft_layer_targets(x, training, moe), width=w)
                 for n, moe in ((x.num_layers - n_moe, False), (n_moe, True)) if n]
        out["forward"].append(replace(casts[0], expr=sp.Add(*(c_.expr for c_ in casts)).xreplace(
            {r_lora: sp.Integer(training.adapters.lora_rank)})))
    if not training.states.autocast or training.states.precision != "fp32":
        return           # autocast caches casts of fp32 leaves alone: none of 16-bit weights
    # the linears' biases (GPT-2's Conv1D, Qwen2's q, k, v) are cast and cached, kept by no
    # backward; Q, K, V and O follow attention_bias, else add_bias_linear (as the counts do)
    attn = x.add_bias_linear if x.attention_bias is None else x.attention_bias
    o_bias = attn if x.attention_out_bias is None else x.attention_out_bias
    biases = layer_linear_biases(bool(attn or x.add_qkv_bias), bool(o_bias),
                                 bool(x.add_bias_linear), x.gated)
    if training.memory.recompute == "full":
        out["forward"].append(autocast_cached_casts(x.num_layers, gated=x.gated, biases=biases))
    elif biases != 0:
        out["forward"].append(autocast_cached_casts(x.num_layers, weights=False, biases=biases))


@functools.lru_cache(maxsize=4096)
def _widened(term: Term, widths: tuple) -> Term:
    # the Term with the knobs' values in: widths are symbols -> integers, so xreplace, not
    # subs' pattern matching; remembered, since a cold search asks for the same loss and
    # sharding Terms in each of its hundreds of stage templates
    return replace(term, expr=as_expr(term.expr).xreplace(dict(widths)))


def _add_loss_transients(out: dict, j: Job | UncheckedJob) -> None:
    """Add the output stage's transients to ``out`` (phase -> Terms): the loss's buffers
    beyond what it saves (:func:`_loss_transients`, all logits per TP rank where they are
    gathered; under PEFT ``lm_head``'s input, which the causal LM's forward holds through the
    loss: :func:`memsym.terms.peft_lora.peft_head_input_held`), the deferred embedding weight-gradient buffers, and in the blocks' backward the
    output layer's activations freed (``output_freed``)."""
    x, layout, training = j.model, j.layout, j.training
    cp_size = None if isinstance(j, UncheckedJob) else layout.c     # None: c a symbol
    kind = loss_kind(layout, training)
    amp = bool(training.states.autocast) and training.states.precision == "fp32"
    if kind == "chunked":    # TRL's chunked loss at t = 1 (memsym.job_checks)
        # DeepSpeed's engine: 16-bit weights, no autocast; ZeRO-3 gathers lm_head per chunk
        ds = training.states.sharding in DEEPSPEED_ZERO
        if ds and amp:
            raise InvalidValueError("the chunked loss under DeepSpeed's engine runs over 16-bit "
                                    "weights without autocast: not with autocast over fp32 ones")
        run = "no_autocast" if ds else "fp32_autocast" if amp else "autocast"
        gathered = training.states.sharding == "zero3"
        fwd = (chunked_loss_forward(run, residual_width(training), gathered=gathered),)
        # LoRA/QLoRA: lm_head frozen (TRL refuses it as an adapter target)
        bwd = (chunked_loss_backward(run, frozen_head=training.adapters.finetune != "full",
                                     gathered=gathered),)
    else:
        fwd, bwd = _loss_transients(kind, training, cp_size)
        if autotp_logits(training):
            fwd, bwd = tm.gathered_logits(fwd, autotp=True), tm.gathered_logits(bwd, autotp=True)
        elif logits_gathered(layout, training):
            fwd, bwd = tm.gathered_logits(fwd), tm.gathered_logits(bwd)
    out["forward"] += list(fwd)
    out["loss-backward"] += list(bwd)
    if kind != "chunked" and training.adapters.finetune != "full" \
            and framework_record(training.framework).hf_model_code:
        # PEFT: lm_head's input, saved by no frozen weight, still held through the loss
        out["forward"].append(peft_head_input_held(
            *token_split(sequence_parallel_on(layout)), width=activation_width(training)))
    if training.pipeline.defer_embedding_wgrad_compute:
        # kept from the step's first micro-batch to the flush, before the optimizer step
        for ph in ("forward", "loss-backward", "backward"):
            out[ph].append(tr.deferred_wgrad_buffers(
                limit=training.pipeline.wgrad_deferral_limit,
                width=activation_width(training),
                sequence_parallel=sequence_parallel_on(layout),
                last_pending=ph != "backward"))
    o = output_layer_activations(x, layout, training).expr
    out["backward"].append(Term("output_freed", -o, "the output layer's activations and "
                                "the saved logits, freed by the loss's and the output "
                                "layer's backward", PHASE_SOURCE, label="output layer freed"))


def _add_sharding_transients(out: dict, x, layout: Layout, training: Training) -> tuple:
    """Add the sharding scheme's buffers to ``out`` (phase -> Terms); (the first block's
    backward's excess over a block's all-gather [bytes], whether torchtitan's embedding and
    output groups are their own) for FSDP2, (0, False) otherwise."""
    # the sharding schemes' buffers are the frameworks' own (FSDP2, DeepSpeed): they join the
    # default convention "framework"; the textbook conventions (seed000, zero-paper, ...)
    # keep their published model-state forms and only the loss's transients
    scheme = training.states.sharding if training.states.convention == "framework" else None
    if scheme is not None and training.states.megatron_fsdp:
        _add_megatron_fsdp_transients(out, training)
        return 0, False
    if scheme in ("ddp", "distributed-optimizer") and training.states.optimizer == "muon":
        _add_muon_workspace(out, x, layout, training)   # Muon runs under these two only
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
    elif scheme == "fsdp" and uses_accelerate_groups(training):
        return add_accelerate_fsdp_transients(out, x, training)
    elif scheme == "fsdp":
        return _add_fsdp2_transients(out, x, training)
    elif scheme == "zero3":
        z3 = tr.zero3_transients(N_ll)
        for ph in ("forward", "loss-backward", "backward"):
            out[ph] += list(z3.terms)
    elif scheme in ("zero1", "zero2"):
        ipg = tr.deepspeed_ipg_buckets().terms
        for ph in ("loss-backward", "backward", "optimizer"):
            out[ph] += list(ipg)
    return 0, False


def _add_muon_workspace(out: dict, x, layout: Layout, training: Training) -> None:
    """Add to ``out["optimizer"]`` Muon's Newton-Schulz workspace, the largest over the matrices
    one GPU orthogonalizes (:func:`memsym.terms.muon.newton_schulz_workspace`), as
    ``--muon-tp-mode`` runs each (its shard; under duplicated the gathered whole matrix; under
    distributed oriented by the split) with the Nesterov copy under ``--muon-nesterov``, and
    ``linear_qkv`` as its Q, K, V blocks (not MLA, whose projections are weights of their
    own).  In the symbols t and t_e: the search's templates, which stand for every t, bind
    them per layout."""
    mats = [mat for moe in {False, bool(x.num_experts)} for mat in muon_matrices(x, moe)]
    out["optimizer"] += list(muon.newton_schulz_workspace(
        mats, tp_mode=training.states.muon_tp_mode, nesterov=training.states.muon_nesterov,
        qkv_groups=None if x.multi_latent_attention else x.num_query_groups).terms)


def _add_megatron_fsdp_transients(out: dict, training: Training) -> None:
    """Add Megatron-FSDP's unsharded buckets to ``out`` (phase -> Terms,
    :func:`memsym.terms.transients.megatron_fsdp_buckets`): the gathered layers in the
    parameters' width (one byte with FP8 parameters, the uint8 ``model_weight_buffer``), the
    gradient buckets in the main grads' (:func:`default_grad_dtype`).  Megatron's optimizer
    (Transformer Engine's or Apex's FusedAdam) steps in chunks: no step temporary."""
    st = training.states
    gdt = default_grad_dtype(st.sharding, st.precision, st.grad_dtype, megatron_fsdp=True)
    phases = tr.megatron_fsdp_buckets(st.megatron_fsdp, STATE_DTYPES[gdt],
                                      double_buffer=st.fsdp_double_buffer, group_params=N_ll,
                                      param_width=1 if st.precision == "fp8" else b_u)
    for ph, terms in phases.items():
        out[ph] += list(terms)


def _add_fsdp2_transients(out: dict, x, training: Training) -> tuple:
    """Add FSDP2's buffers without pipelining to ``out`` (phase -> Terms): the all-gathered
    blocks, the backward's reduce-scatter, torchtitan's embedding / output groups and torch
    AdamW's step temporary; (start excess [bytes], own groups) as
    :func:`_add_sharding_transients` returns them."""
    start_excess, own_groups = 0, False
    fs = tr.fsdp2_transients(N_ll, d * c)
    if training.states.precision == "fp8":
        # fp8 under fsdp is Megatron-FSDP's FP8 parameters (byte_widths): gathered in FP8
        fs = Total(fs.name, tuple(tr.megatron_fsdp_fp8_unsharded(N_ll)
                                  if term.key == "unsharded_params" else term for term in fs))
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
    return start_excess, own_groups


def _add_gradients_not_yet_made(out: dict, j: Job | UncheckedJob, stage: int, acts,
                                start_excess) -> None:
    """Add to ``out`` (phase -> Terms) the sharded gradients' absence before the blocks'
    backward (:func:`_gradients_not_yet_made`) and, without pipelining, their making as the
    blocks' activations ``acts`` are freed."""
    x, layout, training = j.model, j.layout, j.training
    grads = [term for term in state_terms(stage_has_experts(x, layout, stage),
                                          state_training(training))
             if term.key in ("gradients", "expert_gradients")]
    absent = Term("gradients_not_yet_made", -sp.Add(*(term.expr for term in grads)),
                  "sharded gradients, set to None by the step's zero_grad and made by the "
                  "blocks' backward", TRAINER_ZERO_GRAD if uses_accelerate_groups(training)
                  else Source("torchtitan", "train.py, train_step (optimizers.zero_grad() first; "
                              "torch.optim set_to_none=True)"),
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


def states_and_transients(j: Job | UncheckedJob, stage: int,
                          activations: Total | None = None) -> tuple:
    """(steady model-state Terms, phase -> transient Terms) of one stage, in the count symbols
    of :func:`stage_counts`: the model states held through forward and backward, and
    :func:`phase_transients` (given the stage's ``activations`` where the caller has them)
    with the step-only states (:data:`STEP_STATE_KEYS`) in the optimizer phase."""
    training = j.training
    # the GPU decides whether per-tensor FP8 keeps a transpose (none given: TN-only, Hopper)
    terms = state_terms(stage_has_experts(j.model, j.layout, stage), state_training(training),
                        bool(getattr(j.gpu, "non_tn_fp8_gemm", False)))
    if _pools_apart(training):   # the gradients are in the reduce-scatter pool (stream_pools)
        terms = tuple(term for term in terms if term.key not in _GRAD_KEYS)
    step = tuple(term for term in terms
                 if training.states.convention == "framework" and term.key in STEP_STATE_KEYS)
    trans = phase_transients(j, stage, activations)
    if step:
        trans = {**trans, "optimizer": step + tuple(trans["optimizer"])}
    if training.memory.first_iteration:
        absent = _moments_not_yet_made(terms, training)
        if absent is not None:
            trans = {ph: tuple(trans[ph]) + ((absent,) if ph != "optimizer" else ())
                     for ph in PHASES}
    return [term for term in terms if term not in step], trans


def _moments_not_yet_made(terms, training: Training) -> Term | None:
    r"""The Adam moments' absence before the first optimizer step [bytes] (a negative Term
    for the forward and backward phases of ``first_iteration``):
    :math:`-\frac{b_o}{b_m + b_o}\,M_{\mathrm{opt}}` of the stage's ``optimizer`` and
    ``expert_optimizer`` Terms.  Megatron-core's ``init_state_fn`` runs only when an
    optimizer state is loaded (``optimizer/optimizer.py:1127-1129, 1145-1146`` at d98e8a64dd), and
    Transformer Engine's ``FusedAdam`` makes ``exp_avg`` and ``exp_avg_sq`` in its first
    ``step`` (``optimizers/fused_adam.py:629-630`` at d0067d0da6): the first iteration's
    forward and backward run without them; the step holds them."""
    held = sp.Add(*(term.expr for term in terms if term.key in ("optimizer", "expert_optimizer")))
    share = moment_share(training)
    if held == 0 or share == 0:
        return None
    return Term("moments_not_yet_made", -share * held, "Adam moments not yet made: the first "
                "optimizer step makes them", Source("transformer-engine", "pytorch/optimizers/"
                "fused_adam.py:629-630 (step: initialize_state when the state is empty); "
                "Megatron-core d98e8a64dd optimizer/optimizer.py:1127-1129, 1145-1146 (init_state_fn "
                "only on loading)"), label="moments not yet made")
