"""The model states of one pipeline stage: its exact parameter counts and the weights,
gradients and optimizer states they make on one GPU.

:func:`stage_counts` gives the stage's counts as values of the count symbols
(``N_tp``, ``N_rep``, ``N_exp``, ...); :func:`state_terms` builds the model-state Terms in
those symbols (cached: they depend only on a few training fields, :func:`state_training`).
"""

from __future__ import annotations

import functools
from dataclasses import replace

import sympy as sp

from ..errors import choose
from ..job import Job, Layout, Training
from .. import model as models
from ..model.muon_matrices import scalar_adam_parameters
from ..symbols import (N_a, N_ae, N_exp, N_lin, N_ll, N_q, N_rep, N_sc, N_tp, N_u, N_xq, b_g, b_m,
                       b_mg, b_o, c, d, e, t, t_e)
from ..terms import muon
from ..terms.torch_ddp import ddp_bucket_copy, torch_adamw_widths, torch_ddp_states
from ..terms.accelerate_fsdp import accelerate_fsdp_states, accelerate_fsdp_widths
from ..terms import recipe_buffers as rb
from ..frameworks import framework as framework_record
from ..terms.adapters import LORA_TARGETS, adapter_state, lora
from ..terms.megatron_lora import megatron_adapter_widths, quantized_frozen_base
from ..terms.megatron_fsdp import megatron_fsdp_state
from ..terms.model_state import CONVENTIONS, OPTIMIZERS, byte_widths, model_state, te_weight_cache
from ..term import Total
from ..terms.widths import default_grad_dtype
from ..unchecked_job import UncheckedJob
from .bf16_layers import rank_bf16_layers
from .traits import DEEPSPEED_ZERO, output_stage

#: Model-state Terms that the frameworks allocate at the optimizer step and free before the
#: next forward (``convention="framework"``): the fp32 copy of a 16-bit gradient the optimizer
#: steps on.  Megatron-core makes it in ``_copy_model_grads_to_main_grads``
#: (``shard_main_param.grad = shard_model_grad.float()``) and frees it in ``zero_grad``
#: (``set_to_none`` on ``shard_fp32_from_float16_groups``) at the start of the next step;
def _adapter_state_terms(experts: bool, training: Training, non_tn_fp8_gemm: bool) -> tuple:
    """:func:`state_terms` of a LoRA / QLoRA job: the frozen base and the adapters' states as
    the framework that trains them keeps them (PEFT's fp32 adapters, Megatron-Bridge's, or
    DeepSpeed's engine: :func:`_deepspeed_adapter_terms`)."""
    # adapters train in fp32 with the optimizer's moments (PEFT); ZeRO-3/FSDP shards the
    # frozen base over data parallel, every other scheme keeps it whole on each GPU
    widths = {b_g: 4, b_m: 0, b_o: OPTIMIZERS[training.states.optimizer]}
    dtype, base = "fp32", "bf16"
    megatron = framework_record(training.framework).megatron_options \
        and training.adapters.finetune == "lora"
    if megatron:
        # Megatron-Bridge: frozen base and adapters in the model's dtype, Megatron-core's
        # gradient buffer and (distributed) optimizer with their fp32 copies (byte_widths).
        # QLoRA keeps PEFT's widths: Bridge (067f987df0) has no 4-bit base (no NF4 or
        # bitsandbytes in src/), so a QLoRA job is the bitsandbytes + PEFT one whatever
        # the framework named
        st = training.states
        widths = megatron_adapter_widths(
            st.precision, st.grad_dtype, optimizer=st.optimizer, scheme=st.sharding,
            shards=d * c if st.sharding == "distributed-optimizer" else 1,
            precision_aware=st.precision_aware, fp8_recipe=st.fp8_recipe,
            non_tn_fp8_gemm=non_tn_fp8_gemm,
            **{n: training.value(n) for n in rb.OPTIMIZER_DTYPES})
        dtype, base = widths.pop("adapter_dtype"), widths.pop("base_dtype")
    quant = training.adapters.quantization or ("nf4-dq" if training.adapters.finetune == "qlora" else base)
    if training.states.sharding in DEEPSPEED_ZERO:   # the engine's cast: base in its dtype
        return _deepspeed_adapter_terms(training, quant if quant != base
                                        else training.states.precision)
    tot = lora(quant, dtype, params=N_q, adapters=N_a, unquantized=N_u,
               sharded=training.states.sharding in ("zero3", "fsdp"),
               main_grads=megatron, unquantized_dtype=base,
               params_dtype_base=megatron)
    if megatron and experts:
        tot = _expert_adapters(tot, training, dtype)
    st = training.states
    if megatron and st.precision in ("fp8", "fp4"):
        fmt = "MXFP8 " if st.fp8_recipe == "mxfp8" else "NVFP4 " if st.precision == "fp4" \
            else "FP8 "
        if ((st.fp8_param_gather and st.precision == "fp8") or st.fp4_param_gather) \
                and st.sharding not in ("zero3", "fsdp"):
            # fp8_param / fp4_param: the frozen linears (N_lin) are FP8 / NVFP4 parameters,
            # b_f8 bytes each and no 16-bit copy; the rest of N_q + N_u stays 16-bit
            quant = quantized_frozen_base(N_lin, N_q + N_u - N_lin, fmt, base)
            tot = Total(tot.name, quant.terms + tuple(
                term for term in tot.terms if term.key not in ("weights", "weights_unquantized")))
        else:
            # the frozen base runs through TE's linears under the FP8 / NVFP4 autocast: each
            # weight cast and cached as a trained one, rowwise and columnwise, since dgrad
            # reads it (te_weight_cache); b_f8 from megatron_adapter_widths
            tot = Total(tot.name, tot.terms + (te_weight_cache(
                N_lin, fmt, frozen=True, transpose=not non_tn_fp8_gemm),))
    terms = tuple(tot.subs(widths).terms)
    return _adapter_buckets(terms) if training.states.torch_ddp_buckets else terms


#: DeepSpeed ZeRO-1/2 sets ``single_partition_of_fp32_groups[i].grad = None`` right after
#: the step.  The textbook conventions keep them in the steady sum as published.
STEP_STATE_KEYS = ("main_gradients", "expert_main_gradients")


def job_stage_parameters(j: Job | UncheckedJob, stage: int):
    """The :class:`memsym.model.StageParameters` of pipeline rank ``stage`` in this job: the
    layout's split (uneven ends, an explicit pipeline layout) and the rank that holds the output
    layer under the training's stage placement (:func:`output_stage`: rank 0 under torch's V
    schedules).

    Examples
    --------
    >>> from memsym.job import job as make_job
    >>> v = Training(framework="torchtitan", sharding="fsdp", stage_placement="v")
    >>> job_stage_parameters(make_job("llama2-7b", layout=Layout(p=2, v=2), training=v), 0).output_layer
    True
    """
    layout = j.layout
    return models.stage_parameters(
        j.model, layout.t, layout.p, stage, e=layout.e, t_e=layout.t_e,
        first_stage_layers=layout.first_stage_layers, last_stage_layers=layout.last_stage_layers,
        pipeline_layout=layout.pipeline_layout, output_stage=output_stage(layout, j.training),
        split_embedding=not framework_record(j.training.framework).tp_whole_embedding)


def stage_counts(j: Job | UncheckedJob, stage: int) -> dict:
    """The parameter counts of one pipeline stage, as values of the total's count symbols.

    Full training: ``N_tp`` (the stage's tensor-split parameters, all t ranks together),
    ``N_rep`` (replicated on every TP rank) and ``N_exp`` (routed experts, all e t_e ranks
    together), so one GPU holds ``N_tp/t + N_rep`` dense and ``N_exp/(e t_e)`` expert
    parameters (:func:`memsym.model.stage_parameters`, exact, vocabulary padded at t).
    ``N_lin``: the dense linear weights per GPU whose FP8 or NVFP4 casts Transformer Engine
    keeps (the decoder layers', and under fp8 the MTP layers').
    LoRA/QLoRA: ``N_q`` (frozen linear weights per GPU), ``N_u`` (frozen, unquantized) and
    ``N_a`` (adapters) per GPU; a Megatron LoRA job under fp8 or fp4 adds ``N_lin``, the
    frozen linear weights per GPU whose casts TE keeps (or that are FP8 / NVFP4 parameters
    under ``fp8_param_gather`` / ``fp4_param_gather``, ``N_q + N_u - N_lin`` staying 16-bit):
    ``N_q`` (routed experts included) less the BF16 layers' and, under fp8, the MTP layers'
    linear weights (in ``N_u`` otherwise).

    Examples
    --------
    >>> from memsym.job import job as make_job
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
    counts = models.stages.kind_counts(pattern, sp_.layers)
    lin = sum(models.layer_parameters(x, kind)["tp"] * n for kind, n in counts.items())
    largest = largest_layer(x, sp_.layers, layout.t, layout.e, layout.expert_tp)
    # the MTP layers run their TE linears under the FP8 autocast (and are built under
    # fp8_model_init with --fp8-param-gather), but not under FP4: Megatron-core enters
    # get_fp8_context only when config.fp8 ("currently ignoring FP4 in MTP layers",
    # multi_token_prediction.py:1385-1402, 1927-1929 at d98e8a64dd)
    mtp = models.stages.mtp_parameters(x, layout.t) if sp_.mtp and training.states.precision == "fp8" \
        else {"tp": 0, "experts": 0}
    # the rank's BF16 layers (first_last_layers_bf16): 16-bit weights, no FP8 / NVFP4 copy
    bf16 = [models.layer_parameters(x, pattern[i])
            for _, _, i in rank_bf16_layers(x, layout, training, stage)]
    bf16_lin, bf16_experts = (sum(q[k] for q in bf16) for k in ("tp", "experts"))
    if training.adapters.finetune == "full":
        # N_lin: the dense linear weights whose casts TE keeps (the MTP layers' experts are in
        # N_exp, whose copies model_state counts apart)
        counts = {N_tp: sp.Integer(sp_.tp), N_rep: sp.Integer(sp_.replicated),
                  N_exp: sp.Integer(sp_.experts),
                  N_lin: sp.Rational(lin - bf16_lin + mtp["tp"], layout.t), N_ll: largest}
        if bf16_experts_apart(training) and x.num_experts:   # state_terms' N_xq
            counts[N_xq] = sp.Integer(sp_.experts - bf16_experts)
        if training.states.optimizer == "muon":     # Muon's scalar-Adam parameters
            sc = scalar_adam_parameters(x, sp_, layout.t)
            counts[N_sc] = sp.Rational(sc.numerator, sc.denominator)
        return counts

    targets = LORA_TARGETS if training.adapters.lora_targets == "all" else training.adapters.lora_targets
    # Megatron's fused linear_qkv and linear_fc1 carry one adapter each, and a layer's grouped
    # experts one shared adapter (lora_layer_adapters); a QLoRA job is the bitsandbytes + PEFT
    # one whatever the framework (state_terms), with an adapter on each of transformers'
    # separate projections and per-expert adapters on the fused experts
    fused = bool(framework_record(training.framework).megatron_options) \
        and training.adapters.finetune == "lora"
    # N_q: the frozen linear weights the base's format applies to.  Under PEFT the base is
    # transformers 5.25.0's model, whose routed experts are fused 3-D parameters, not
    # nn.Linear: bitsandbytes replaces nn.Linear (and Conv1D) modules only
    # (integrations/bitsandbytes.py:189, quantizer_bnb_4bit.py:83-87 at 5.25.0), so they
    # stay 16-bit, in N_u (bitsandbytes issue 1849).  Megatron's experts are frozen as built
    # with the linears.
    quant = sp.Rational(lin, layout.t) + (sp_.experts_per_gpu if fused else 0)
    per_kind = {kind: models.lora_layer_adapters(
        x, training.adapters.lora_rank, targets, fused=fused, moe=kind,
        dora=training.adapters.dora, expert_params=training.adapters.lora_expert_params)
        for kind in set(pattern)}
    part = {key: sum(per_kind[pattern[i]][key] for i in sp_.layers)
            for key in ("tp", "expert", "experts")}
    if fused and sp_.mtp:
        # Bridge's ModuleMatcher matches the MTP layers' linears by name too (their
        # mtp_model_layer is a decoder layer of the same spec, multi_token_prediction.py:
        # 1203-1229 at d98e8a64dd); one block's weights when repeated
        n_mtp = 1 if x.mtp_repeated else x.mtp_num_layers
        for kind in models.stages.mtp_layer_kinds(x):
            mtp_part = models.lora_layer_adapters(x, training.adapters.lora_rank, targets,
                                                  fused=True, moe=kind)
            part = {key: part[key] + n_mtp * mtp_part[key] for key in part}
    # N_a: TP-split adapters over t, PEFT's per-expert ones as the experts (e t_e); N_ae:
    # Bridge's shared expert adapter, split over expert TP and whole on every EP rank
    adapters = sp.Rational(part["tp"], layout.t) \
        + sp.Rational(part["experts"], layout.e * layout.expert_tp)
    counts = {N_q: quant, N_u: sp_.per_gpu - quant, N_a: adapters,
              N_ae: sp.Rational(part["expert"], layout.expert_tp), N_ll: largest}
    if fused and training.states.precision in ("fp8", "fp4"):
        # Megatron LoRA: TE casts and caches the frozen linear weights as trained ones
        # (state_terms): the decoder's linears and experts, and the MTP layers' under FP8
        mtp_experts = sp.Rational(mtp["experts"], layout.e * layout.expert_tp)
        counts[N_lin] = quant + sp.Rational(mtp["tp"], layout.t) + mtp_experts \
            - sp.Rational(bf16_lin, layout.t) - sp.Rational(bf16_experts, layout.e * layout.expert_tp)
    return counts


def bf16_experts_apart(training: Training) -> bool:
    """Whether the stage's routed experts are counted apart from their FP8 / NVFP4 ones
    (``N_xq`` of :func:`stage_counts`): full training in fp8 or fp4 with BF16 layers.

    Examples
    --------
    >>> bf16_experts_apart(Training(precision="fp8", bf16_layers=(1, 1)))
    True
    """
    st = training.states
    return training.adapters.finetune == "full" and st.precision in ("fp8", "fp4") \
        and any(st.bf16_layers)


def largest_layer(x, layers, t: int, e: int, t_e: int) -> sp.Rational:
    r"""The parameters of the largest of ``layers`` on one GPU [parameters]: what FSDP2 and
    ZeRO-3 gather at once (the count ``N_ll`` of :func:`stage_counts`).

    .. math:: N_{ll} = \max_{\text{kinds}} \Bigl(\frac{N^{tp}}{t} + N^{rep}
        + \frac{N^{exp}}{e\,t_e}\Bigr)

    over the layer kinds among ``layers`` (:func:`memsym.model.layer_parameters`); 0 for no
    layer.

    Parameters
    ----------
    x : memsym.model.Architecture
        The model.
    layers : iterable of int
        The decoder layers' indices (a stage's ``range``).
    t, e, t_e : int
        Tensor-, expert- and expert-tensor-parallel sizes [GPUs].

    Examples
    --------
    >>> from memsym.model import preset
    >>> largest_layer(preset("llama2-7b"), range(4), 2, 1, 2) == 202375168 // 2 + 8192
    True

    References
    ----------
    The gathers this count prices: :func:`memsym.terms.sharding_transients.fsdp2_transients`
    and its sources.
    """
    pattern = models.stages.layer_kind_pattern(x)
    return _largest_of_kinds(x, frozenset(models.stages.kind_counts(pattern, layers)), t, e, t_e)


@functools.lru_cache(maxsize=4096)
def _largest_of_kinds(x, kinds: frozenset, t, e, t_e) -> sp.Rational:
    # largest_layer by the layer kinds present: a search asks for each stage of each layout
    per_kind = (models.layer_parameters(x, kind) for kind in kinds)
    return max((sp.Rational(q["tp"], t) + q["replicated"] + sp.Rational(q["experts"], e * t_e)
                for q in per_kind), default=sp.Integer(0))


def stage_has_experts(x, layout: Layout, stage: int) -> bool:
    """Whether pipeline rank ``stage`` holds an MoE layer (routed experts).

    Examples
    --------
    >>> from memsym.model import preset
    >>> stage_has_experts(preset("llama2-7b"), Layout(), 0)
    False
    """
    if not x.num_experts:
        return False
    pattern = models.moe_layer_pattern(x)
    return any(pattern[i] for i in models.stage_layers(
        x, layout.p, stage, layout.first_stage_layers, layout.last_stage_layers,
        layout.pipeline_layout))


def state_training(training: Training) -> Training:
    """The fields of ``training`` that model states depend on (the cache key of
    :func:`state_terms`), one record per distinct ``training`` (a cold search asks once per
    stage template, hundreds of times, and building the record costs more than hashing it).

    Examples
    --------
    >>> state_training(Training(seq_length=4096)) == state_training(Training(seq_length=8192))
    True
    """
    return _state_training(training)     # Training holds no list (memsym.job_record)


@functools.lru_cache(maxsize=1024)
def _state_training(training: Training) -> Training:
    keep = ("framework", "finetune", "sharding", "convention", "precision", "optimizer", "offload",
            "quantization", "grad_dtype", "precision_aware", "fp8_param_gather", "fp8_recipe",
            "fp4_param_gather", "megatron_fsdp", "bf16_layers", "torch_ddp_buckets",
            "accelerate_fsdp", *rb.OPTIMIZER_DTYPES)
    return Training(**{name: training.value(name) for name in keep})


@functools.lru_cache(maxsize=1024)
def state_terms(experts: bool, training: Training, non_tn_fp8_gemm: bool = False) -> tuple:
    """The model-state Terms of one stage, in the count symbols of :func:`stage_counts`
    (``experts``: the stage holds routed experts, :func:`stage_has_experts`; ``training``:
    :func:`state_training` of the job's; ``non_tn_fp8_gemm``: the job's GPU runs FP8 GEMMs in
    non-TN layouts, :attr:`memsym.hardware.GPU.non_tn_fp8_gemm`, so per-tensor FP8 caches no
    transpose).

    Examples
    --------
    >>> [term.key for term in state_terms(False, state_training(Training()))]
    ['weights', 'gradients', 'optimizer']
    """
    # cached: the search builds one stage total per discrete choice and pipeline template,
    # and the model states depend only on these fields
    if training.adapters.finetune != "full":
        return _adapter_state_terms(experts, training, non_tn_fp8_gemm)
    conv = choose("convention", training.states.convention, CONVENTIONS)
    if training.states.megatron_fsdp and training.states.precision not in ("fp8", "fp4") \
            and conv == "framework":
        return _megatron_fsdp_terms(experts, training)
    grad_dtype = training.states.grad_dtype
    if training.states.megatron_fsdp and grad_dtype is None:   # FP8 under Megatron-FSDP
        grad_dtype = default_grad_dtype(training.states.sharding, training.states.precision,
                                        megatron_fsdp=True)
    framework, recipe, widths = _framework_widths(training, conv, grad_dtype, non_tn_fp8_gemm)
    if training.states.torch_ddp_buckets:
        # torch DDP + torch.optim.AdamW: every state in the parameters' dtype, no master copy
        widths = torch_adamw_widths(training.states.precision)
    elif training.states.accelerate_fsdp:
        # Accelerate's FSDP2: fp32 shards under mixed precision, else the weights' dtype
        widths = accelerate_fsdp_widths(training.states.accelerate_fsdp, training.states.precision)
    fp8 = dict(precision=training.states.precision, optimizer=training.states.optimizer, **framework,
               **recipe)
    # t, e and t_e stay symbols (N_tp/t + N_rep, N_exp/(e t_e)): equal to the stage's exact
    # per-GPU counts at the layout's values, and differentiable in t for sensitivities.
    # FP8 caches cover the linear-layer weights only (N_lin of the stage's dense part).
    states = model_state(training.states.sharding, convention=conv, offload=training.states.offload,
                         params=N_tp / t + N_rep, dp=d * c,
                         linear_params=N_lin if training.states.precision in ("fp8", "fp4") else None,
                         **fp8).subs(widths)
    terms = list(states.terms)
    if training.states.optimizer == "muon":
        # the scalar Adam's second moment; the layer-wise distributed optimizer splits the
        # states over d c (Megatron-LM arguments.py:1735-1736), plain DDP keeps them whole
        terms.append(muon.muon_scalar_moment(N_sc, 1 if training.states.sharding == "ddp"
                                             else d * c))
    if experts:
        edp = d * c * t / (e * t_e)
        # the BF16 layers' experts are 16-bit: FP8 / NVFP4 only N_xq of them (stage_counts)
        lin_x = N_xq / (e * t_e) if bf16_experts_apart(training) else None
        ex = model_state(training.states.sharding, convention=conv, offload=training.states.offload,
                         params=N_exp / (e * t_e), dp=edp, linear_params=lin_x, **fp8).subs(widths)
        terms += [replace(term, key="expert_" + term.key, label="expert " + term.label,
                          description="routed experts: " + term.description) for term in ex]
    if training.states.optimizer == "muon":   # cited where Muon makes its states
        return muon.muon_states(terms, layer_wise=training.states.sharding != "ddp")
    if training.states.torch_ddp_buckets:      # torch DDP: the reducer's bucket copy
        return torch_ddp_states(terms, N_tp / t + N_rep)
    if training.states.accelerate_fsdp:        # cited where Accelerate makes them
        return accelerate_fsdp_states(terms, training.states.accelerate_fsdp)
    return tuple(terms)


def _framework_widths(training: Training, conv: str, grad_dtype, non_tn_fp8_gemm: bool) -> tuple:
    """(framework keywords, recipe keywords, :func:`byte_widths`) of :func:`state_terms`."""
    framework = dict(grad_dtype=grad_dtype, precision_aware=training.states.precision_aware,
                     fp8_param_gather=training.states.fp8_param_gather,
                     fp4_param_gather=training.states.fp4_param_gather,
                     non_tn_fp8_gemm=non_tn_fp8_gemm)
    recipe = dict(fp8_recipe=training.states.fp8_recipe) if training.states.fp8_recipe else {}
    widths = byte_widths(training.states.sharding, training.states.precision, training.states.optimizer, conv,
                         **framework, **recipe, **{n: training.value(n) for n in rb.OPTIMIZER_DTYPES})
    return framework, recipe, widths


def moment_share(training: Training) -> sp.Expr:
    r"""The moments' share of the ``optimizer`` state Term, :math:`b_o / (b_m + b_o)` of
    :func:`byte_widths` for ``training`` (0 when it holds nothing).

    Examples
    --------
    >>> moment_share(Training(optimizer="adam"))     # fp32 master 4 B, moments 8 B
    2/3
    """
    st = training.states
    conv = choose("convention", st.convention, CONVENTIONS)
    _, _, widths = _framework_widths(training, conv, st.grad_dtype, False)
    held = widths[b_m] + widths[b_o]
    return sp.Integer(0) if held == 0 else widths[b_o] / held


def _deepspeed_adapter_terms(training: Training, quant: str) -> tuple:
    """The model-state Terms of PEFT's adapters trained by DeepSpeed's ZeRO engine.

    The engine casts every floating-point parameter, the adapters PEFT made fp32 included, to
    the mixed-precision dtype (DeepSpeed edaa72212 ``runtime/engine.py:1537-1544``,
    ``_cast_module_mixed_precision``, called at :1755-1762), and the Trainer hands DeepSpeed's
    optimizer the parameters that require a gradient (transformers 5.25.0
    ``integrations/deepspeed.py:671``): the adapters are ZeRO's trained parameters, with its
    widths and sharding (:func:`memsym.terms.model_state.model_state` over ``N_a``), and the
    frozen base lies outside its optimizer, whole on each GPU under ZeRO-1/2 and partitioned
    under ZeRO-3, which partitions every parameter (:func:`memsym.terms.adapters.lora`)."""
    st = training.states
    conv = choose("convention", st.convention, CONVENTIONS)
    widths = byte_widths(st.sharding, st.precision, st.optimizer, conv)
    base = lora(quant, params=N_q, adapters=sp.Integer(0), unquantized=N_u,
                sharded=st.sharding == "zero3", unquantized_dtype=st.precision)
    trained = model_state(st.sharding, convention=conv, offload=st.offload, params=N_a,
                          dp=d * c, precision=st.precision, optimizer=st.optimizer)
    renamed = {"weights": ("adapter_weights", "adapter weights")}
    adapters = tuple(replace(term, key=renamed[term.key][0], label=renamed[term.key][1])
                     if term.key in renamed else term for term in trained.subs(widths))
    return tuple(term for term in base.subs(widths) if term.expr != 0) + adapters


def _adapter_buckets(terms: tuple) -> tuple:
    """``terms`` of a PEFT LoRA job under torch DDP with the reducer's bucket copy added: DDP
    buckets only the parameters that require a gradient (reducer.cpp
    ``Reducer::initialize_buckets``), the adapters, the base frozen."""
    grads = next(term for term in terms if term.key == "gradients")
    return terms + (replace(ddp_bucket_copy(N_a), expr=grads.expr,
                            description="the reducer's bucket copy of the adapters' gradients "
                                        "(only they require a gradient)"),)


def _expert_adapters(tot: Total, training: Training, dtype: str) -> Total:
    """``tot`` with Megatron-Bridge's shared expert adapters ``N_ae`` added to its adapter
    Terms: ``is_expert`` Megatron-core linears (``allreduce`` False under EP or t_e != t,
    tensor_parallel/layers.py:1032-1090 at d98e8a64dd) live in DDP's expert buffers, reduced
    and, under the distributed optimizer, split over expert data parallel, d c t / (e t_e)
    ranks (distributed_data_parallel.py:191, 285-286, 711-714), as the experts' own states."""
    st = training.states
    widths = megatron_adapter_widths(
        st.precision, st.grad_dtype, optimizer=st.optimizer, scheme=st.sharding,
        shards=d * c * t / (e * t_e) if st.sharding == "distributed-optimizer" else 1,
        precision_aware=st.precision_aware, fp8_recipe=st.fp8_recipe,
        **{n: training.value(n) for n in rb.OPTIMIZER_DTYPES})
    widths.pop("adapter_dtype"), widths.pop("base_dtype")
    extra = {term.key: term.expr for term in adapter_state(dtype, N_ae, main_grads=True).subs(widths)}
    return Total(tot.name, tuple(
        replace(term, expr=term.expr + extra[term.key],
                description=term.description + " (and the experts' shared adapters, N_ae)")
        if term.key in extra else term for term in tot.terms))


def _megatron_fsdp_terms(experts: bool, training: Training) -> tuple:
    """:func:`state_terms` of a 16-bit Megatron-FSDP job
    (:func:`memsym.terms.megatron_fsdp.megatron_fsdp_state`): the distributed optimizer's
    widths with Megatron-FSDP's main-grad dtype (:func:`default_grad_dtype`), the fp32
    ``main_weight_buffer`` always (``megatron_fsdp_main_params_dtype`` fp32), and the fp32
    cast of a 16-bit main grad at the step unless the precision-aware optimizer takes it
    decoupled (``megatron_fsdp_use_decoupled_grad``, training.py:2650)."""
    st = training.states
    gdt = default_grad_dtype(st.sharding, st.precision, st.grad_dtype, megatron_fsdp=True)
    widths = byte_widths("distributed-optimizer", st.precision, st.optimizer, "framework",
                         grad_dtype=gdt, precision_aware=st.precision_aware,
                         **{n: training.value(n) for n in rb.OPTIMIZER_DTYPES})
    widths[b_m] = sp.Integer(4)
    main_copy = st.optimizer != "none" and bool(widths[b_mg])
    states = megatron_fsdp_state(st.megatron_fsdp, params=N_tp / t + N_rep, dp=d * c,
                                 main_copy=main_copy).subs(widths)
    terms = list(states.terms)
    if experts:
        ex = megatron_fsdp_state(st.megatron_fsdp, params=N_exp / (e * t_e),
                                 dp=d * c * t / (e * t_e), main_copy=main_copy).subs(widths)
        terms += [replace(term, key="expert_" + term.key, label="expert " + term.label,
                          description="routed experts: " + term.description) for term in ex]
    if training.states.optimizer == "muon":   # cited where Muon makes its states
        return muon.muon_states(terms, layer_wise=training.states.sharding != "ddp")
    if training.states.torch_ddp_buckets:      # torch DDP: the reducer's bucket copy
        return torch_ddp_states(terms, N_tp / t + N_rep)
    return tuple(terms)
