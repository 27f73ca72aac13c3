"""One decoder layer's activations under a job's settings, built once per model and setting.

:func:`layer_model_of` gives the per-layer activations (:func:`memsym.terms.activations.layer_activations`
with the framework's and the recipe's additions) that every pipeline stage of a job multiplies
by its layers in flight (:mod:`memsym.training.activations`).  They depend on the model, the
training settings, the recompute mode and whether sequence parallelism is on, not on the
stage, the pipeline size or the sharding scheme: a search building hundreds of stage
templates (:mod:`memsym.search.templates`) builds each layer's expression once.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from types import MappingProxyType

import sympy as sp

from ..frameworks import framework as framework_record
from ..job import Training, dropout_kept, recompute_modules_of
from ..model.architecture import norm_params
from ..model.presets import PRESET_MODEL_TYPES
from ..symbols import c, f, r_lora
from ..term import Total
from ..terms import torch_moments as tm
from ..terms.activations import (clamped_glu_copy, fp8_glu_input, layer_activations,
                                 unfused_glu_products)
from ..terms.adapters import LORA_TARGETS, quantization_bits
from ..terms.megatron_lora import frozen_linear_inputs
from ..terms.autocast import AUTOCAST_LAYERS, autocast_layer_excess
from ..terms.autocast16 import (AUTOCAST16_LAYERS, autocast16_layer_excess,
                                autocast16_qk_norms)
from ..terms.context_parallel import a2a_attention_output
from ..terms.fp32_residual import fp32_checkpoint_input
from ..terms.gemma4_norms import GEMMA4_NORM_TYPES, gemma4_norm_excess
from ..terms.gemma4_moe import gemma4_moe_block
from ..terms.gemma4_ple import gemma4_ple_layer
from ..terms.kv_sharing import kv_reuse_saving
from ..terms.hf_eager_attention import hf_eager_softmax_fp32
from ..terms.eager_glu import eager_clamped_glu_input, eager_silu_output, eager_tanh_gelu
from ..terms.global_attention import SDPA_GQA_MAX_HEAD_DIM, as_global, sdpa_repeated_kv
from ..terms.hf_moe_routing import (HF_FP32_ROUTER_WEIGHT, HF_GROUPED_ROUTERS, HF_ROUTERS,
                                    HF_SHARED_GATES, HF_TOPK_SOFTMAX_ROUTERS, HF_UNCAST_ROUTERS,
                                    hf_grouped_router, hf_router_casts, hf_routing_indices,
                                    hf_shared_gate, hf_topk_softmax_router,
                                    hf_uncast_router)
from ..terms.mamba import ATTENTION_KEYS, MLP_KEYS, MOE_KEYS
from ..terms.op_sac import sac_attention_recomputed
from ..terms.peft_lora import peft_expert_weights, peft_frozen_base, peft_lora_activations
from ..terms.qkv_storage import checkpointed_qkv_storage
from ..terms.transformer_layer import token_split
from .traits import DEEPSPEED_ZERO, activation_width

__all__ = ["layer_model_of", "mla_sizes"]


def mla_sizes(x) -> dict | None:
    """Multi-latent attention's sizes of model ``x`` as :func:`layer_activations` takes them
    (``mla``), None without MLA.

    Examples
    --------
    >>> from memsym.model import preset
    >>> mla_sizes(preset("llama3-8b")) is None, sorted(mla_sizes(preset("deepseek-v3")))[0]
    (True, 'kv_lora_rank')
    """
    names = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
    return {name: getattr(x, name) for name in names} if x.multi_latent_attention else None


def layer_model_of(x, sp_on: bool, training: Training, recompute: str,
                   nvfp4: bool = True, cp_a2a: bool | None = False) -> tuple:
    """(per_layer, common, mods, shared, addons): ``per_layer(moe, mode)``, one decoder
    layer's activations of one micro-batch [bytes] under the job's settings (``sp_on``:
    sequence parallelism on; ``nvfp4`` False: an FP4 job's layer run in bf16, as its MTP layers
    are; ``cp_a2a``: an all-to-all context-parallel attention at c > 1, None: a2a at a symbolic
    c); the keyword arguments of :func:`memsym.terms.activations.layer_activations` it passes
    (read only); the modules selective recompute recomputes; whether MoE layers have a shared
    expert; ``addons(kind, mode)``, what the framework and the recipe add to
    :func:`layer_activations` for a layer ``kind = (mixer, ffn)`` [bytes]: the attention
    part's if the mixer is ``"attention"``, the MLP's (ffn False) or MoE's (True) if it has
    one, as :func:`memsym.terms.mamba.hybrid_stack` adds them to a hybrid layer's kinds (a
    plain layer is ``("attention", moe)``).

    Built once per (model, ``sp_on``, training, recompute, ``nvfp4``) and each layer once per
    (MoE or dense, recompute mode): the same expressions however many stages ask.

    Examples
    --------
    >>> from memsym.model import preset
    >>> per_layer, common, mods, shared, addons = layer_model_of(
    ...     preset("llama3-8b"), False, Training(seq_length=4096, framework="deepspeed"), "none")
    >>> per_layer(False) is per_layer(False), common["gated"], shared
    (True, True, False)

    transformers' eager SwiGLU keeps SiLU's output, 2 s b f / (c t) bytes, in an MLP part only:

    >>> addons(("attention", None)), addons(("gdn", False))
    (0, 2*b*f*s/(c*t))
    """
    # the model's extras (a clamped GLU's limit) are outside its equality and hash: in the key
    return _layer_model(x, repr(x.extra), sp_on, training, recompute, nvfp4, cp_a2a)


def _layer_options(x, sp_on: bool, training: Training, recompute: str, nvfp4: bool) -> dict:
    """The keyword arguments of :func:`layer_activations` a job's model and settings give (the
    framework's norms and gate, FP8 inputs, the compute width), before the MoE ones."""
    # FP8 (TE under Megatron) saves GEMM inputs quantized; textbook conventions count 16 bits
    quantized = ("fp8", "fp4") if nvfp4 else ("fp8",)
    fp8_in = training.states.precision in quantized and training.states.convention == "framework"
    common = dict(gated=x.swiglu, flash=training.memory.flash_attention, sequence_parallel=sp_on,
                  dropout=dropout_kept(training), norm=x.normalization.lower(), mla=mla_sizes(x),
                  **({"fp8_inputs": "nvfp4" if training.states.precision == "fp4" else
                      "mxfp8" if training.states.fp8_recipe == "mxfp8" else True}
                     if fp8_in else {}))
    if fp8_in and training.memory.fp8_attention and training.states.precision == "fp8":
        # TE's fp8_dpa under the FP8 recipe (None: Megatron's default, delayed); NVFP4: 16-bit
        common["fp8_attention"] = training.states.fp8_recipe or "delayed"
    if activation_width(training) != 2:
        common["width"] = activation_width(training)     # fp32 compute: every tensor 4 bytes
    if getattr(x, "qk_layernorm", False) and recompute != "selective-op":
        common["qk_norm"] = getattr(x, "qk_norm_width", "head")
        if getattr(x, "qk_norm_fp32_scale", False) and \
                framework_record(training.framework).hf_model_code:
            common["qk_norm_fp32"] = True     # the model's own fp32 (1 + weight) Q/K norms
    if framework_record(training.framework).hf_model_code:
        # the model's own norms (memsym.terms.hf_norms): RMSNorms' fp32 input copies, fp32
        # (1 + weight) products, post-norms
        common.update(hf_norms="fp32_product" if getattr(x, "norm_fp32_product", False) else True,
                      norm_fp32=getattr(x, "norm_fp32_scale", False),
                      # Gemma 4's MoE layer: four norms of h and a post-norm of each part as
                      # its dense layer's, the MoE block's own in memsym.terms.gemma4_moe
                      post_norms=getattr(x, "norms_per_layer", 2) == 4 or _gemma4_moe(x, training))
    if getattr(x, "attention_output_gate", False) and recompute != "selective-op":
        common["output_gate"] = True     # Qwen3-Next's sigmoid gate on the attention output
        if framework_record(training.framework).hf_model_code:
            # the model's own transformers code: Qwen3NextAttention, the one class with the
            # gate (its fp32 Q/K norm products and its copied attention output)
            common["hf_qwen3_next"] = True
    return common


@functools.lru_cache(maxsize=256)
def _layer_model(x, extra: str, sp_on: bool, training: Training, recompute: str,
                 nvfp4: bool, cp_a2a: bool | None) -> tuple:
    # layer_model_of, keyed by the model's extras too
    common = _layer_options(x, sp_on, training, recompute, nvfp4)
    shared = bool(x.moe_shared_expert_intermediate_size)
    # Megatron-core weights the expert activation by the probabilities before fc2 and
    # combines by a sum: no expert output kept (Framework.moe_combine_keeps_outputs)
    common["combine_kept"] = framework_record(training.framework).moe_combine_keeps_outputs
    if getattr(x, "moe_latent_size", None):
        common["latent"] = True          # latent MoE: dispatch and experts h_lat wide
    # Megatron's --recompute-modules (default core_attn) under selective recompute
    mods = recompute_modules_of(training)
    attention_side, ffn_side = _part_addons(x, sp_on, training, recompute, cp_a2a, common,
                                            mods, shared)
    autocast = _autocast_excess(x, training)
    if training.memory.fp32_residual_connection:
        # Megatron's fp32 residual stream: a full-recompute checkpoint saves fp32 hidden states
        # (the other modes' saved tensors are Transformer Engine's 16-bit casts:
        # memsym.terms.fp32_residual); job_checks refuses it for hybrid and MTP models
        autocast = {"full": autocast.get("full", 0)
                    + fp32_checkpoint_input(sequence_parallel=sp_on).expr,
                    **{k: val for k, val in autocast.items() if k != "full"}}

    @functools.lru_cache(maxsize=None)
    def layer_of(moe: bool, mode: str) -> Total:
        return layer_activations(recompute=mode, moe=moe, shared_expert=shared and moe,
                                 modules=mods if mode == "selective" else None,
                                 compiled=training.memory.compiled_model, **common)

    own_norms = _own_norms(x, sp_on, training)
    g4_moe = _gemma4_moe(x, training)
    # transformers' SDPA repeats the KV heads of heads wider than 256 (memsym.terms.
    # global_attention.sdpa_repeated_kv): Gemma 4's 512-wide global layers; one KV head's
    # repeat is a view of it, no copy
    repeated_kv = framework_record(training.framework).hf_model_code and (
        getattr(x, "global_kv_channels", None) or 0) > SDPA_GQA_MAX_HEAD_DIM and (
        getattr(x, "global_num_query_groups", None) or x.num_query_groups) > 1
    w = activation_width(training)
    # Gemma 4 with global layers is a hybrid: its norms go with each attention layer's
    # add-ons (every Gemma 4 layer holds attention and an MLP), a plain layer's in per_layer
    hybrid_norms = own_norms if x.layer_mixers is not None else 0
    # Gemma 4's per-layer input path (memsym.terms.gemma4_ple), in every layer, at the
    # compute width it was measured in (Gemma 4 in plain fp32 under transformers' code is
    # refused: memsym.job_checks_hf.check_gemma4_moe)
    frozen = training.adapters.finetune != "full"       # PEFT's frozen base: LoRA, QLoRA
    ple = {mode: gemma4_ple_layer(mode, frozen=frozen).expr
           if getattr(x, "per_layer_input_size", None) else 0 for mode in ("none", "full")}

    @functools.lru_cache(maxsize=None)   # (kind, mode): a handful per layer model
    def addons(kind: tuple, mode: str = recompute) -> sp.Expr:
        # a layer's add-ons, its attention mixer's and its MLP's or MoE's: a plain layer is
        # ("attention", moe), a hybrid layer any (mixer, ffn) (memsym.terms.mamba); another
        # mixer's own terms hold what its module keeps (a shared block's too); a global
        # attention layer's at its own head width and KV heads
        mixer, ffn = kind
        if mixer in _KV_REUSE:
            # a layer reusing an earlier layer's keys and values: its base layer's add-ons
            # less what it does not keep (memsym.terms.kv_sharing), its MLP 2f wide where
            # kv_reuse_wide_mlp (the f-wide MLP part once more: its terms are linear in f)
            base, saving = _KV_REUSE[mixer], kv_reuse_saving(mode).expr
            wide = _wide_mlp(layer_of(False, mode), ffn_side(layer_of(False, mode), False, mode)) \
                if x.kv_reuse_wide_mlp and ffn is False and mode != "full" else 0
            return addons((base, ffn), mode) + wide \
                - (as_global(saving) if base == "global" else saving)
        if ffn and g4_moe:
            # Gemma 4's MoE layer under transformers' code: its dense layer (attention, the
            # gated MLP of intermediate_size) and, beside it, the MoE block's own tensors
            return addons((mixer, False), mode) + layer_of(False, mode).expr \
                - layer_of(True, mode).expr + (gemma4_moe_block().expr if mode != "full" else 0)
        layer = layer_of(bool(ffn), mode)
        att = attention_side(layer, mode) + (hybrid_norms if mode != "full" else 0) \
            if mixer in ("attention", "global") else 0
        if mixer == "global" and mode != "full" and repeated_kv:
            att = att + sdpa_repeated_kv(w).expr      # already at the global layer's shapes
        return (as_global(att) if mixer == "global" else att) \
            + (ffn_side(layer, bool(ffn), mode) if ffn is not None else 0) \
            + (ple["full" if mode == "full" else "none"] if mixer in ("attention", "global")
               else 0)

    @functools.lru_cache(maxsize=None)   # (moe, mode): a handful per layer model
    def per_layer(moe: bool, mode: str = recompute) -> sp.Expr:
        # autocast's excess is the whole layer's (norms, residual): AUTOCAST_LAYERS holds no
        # hybrid model type, which job_checks_hf.check_autocast refuses, so addons has none;
        # Gemma 4's norms here for a plain Gemma 4 (in addons where it has global layers),
        # none kept under full recompute, which keeps the layer's input alone
        return layer_of(moe, mode).expr + addons(("attention", moe), mode) \
            + autocast.get(mode, 0) + (own_norms if mode != "full" else 0)

    return per_layer, MappingProxyType(common), mods, shared, addons


#: the mixers reusing an earlier layer's keys and values, and their base layer's mixer
_KV_REUSE = {"kv_reuse": "attention", "global_kv_reuse": "global"}


def _wide_mlp(layer: Total, side) -> sp.Expr:
    """What an MLP 2f wide keeps beyond the f-wide one of ``layer`` (its MLP terms and the
    framework's MLP add-ons ``side``, all linear in f) [bytes]."""
    part = _layer_part(layer, MLP_KEYS).expr + side
    return sp.expand(part.xreplace({f: 2 * f}) - part)


def _part_addons(x, sp_on: bool, training: Training, recompute: str, cp_a2a: bool | None,
                 common: dict, mods, shared: bool) -> tuple:
    """(attention(layer, mode), ffn(layer, moe, mode)): what the framework and the recipe add
    to the attention part and to the MLP or MoE part of a layer whose
    :func:`layer_activations` is ``layer`` under recompute ``mode`` [bytes]."""
    fw = framework_record(training.framework)
    gathered_in = sp_on and fw.dtensor_tp   # ColwiseParallel's inputs
    # LoRA on Transformer Engine's linears: a frozen linear without an adapter keeps no
    # input for a weight gradient (memsym.terms.megatron_lora.frozen_linear_inputs)
    targets = training.adapters.lora_targets
    frozen = training.adapters.finetune != "full" and targets != "all" \
        and fw.frozen_linear_keeps_no_input
    # PEFT's adapters on transformers' own layers (memsym.terms.peft_lora): the frozen base
    # keeps fewer inputs, each adapter its own copies
    peft = training.adapters.finetune != "full" and fw.hf_model_code
    w = activation_width(training)       # the add-ons' bytes an element (4 in fp32)
    glu_kept, shared_fp8 = _glu_addons(x, training, recompute, mods, shared)
    kept = {False: ("mlp",), True: ("moe", "moe_act")}    # the selective modules that drop them
    # Megatron-core's checkpointed core attention saves the V view, so the whole fused QKV
    # output (not MLA's, nor a gated one's, which split otherwise) stays saved
    qkv_view = checkpointed_qkv_storage(bool(
        fw.megatron_options and "core_attn" in (mods or ())
        and not common.get("mla") and not common.get("output_gate")), w).expr
    # an a2a CP attention keeps its kernel's output beside the output projection's copy
    # (memsym.terms.context_parallel.a2a_attention_output), unless core_attn is recomputed
    a2a_out = a2a_attention_output(cp_a2a is not False, mla=common.get("mla"), width=w).expr
    if cp_a2a is None:           # c a symbol (a search template): nothing at c = 1
        a2a_out = sp.Piecewise((0, sp.Eq(c, 1)), (a2a_out, True))

    # BLOOM's and MPT's eager softmax kept in fp32 beside its 16-bit cast (XGLM's in fp16:
    # modeling_xglm.py:218-219); memsym.terms.hf_eager_attention
    kind = (x.extra or {}).get("hf_model_type")
    eager_fp32 = hf_eager_softmax_fp32(bool(
        fw.hf_model_code and not training.memory.flash_attention and w == 2 and (
            kind in ("bloom", "mpt") or (kind == "xglm" and training.states.precision == "fp16"))
    )).expr

    def attention(layer: Total, mode: str) -> sp.Expr:
        part = _layer_part(layer, ATTENTION_KEYS)
        # torchtitan's SAC recomputes a cuDNN SDPA off its _save_list (memsym.terms.op_sac)
        attn = sac_attention_recomputed(layer) if mode == "selective-op" \
            and not training.memory.sac_saves_attention else 0
        return (_peft_adapters(x, part, training, common, None) if peft and mode == "none"
                else 0) - attn - (frozen_linear_inputs(part, targets) if frozen else 0) \
            + (qkv_view if mode == "selective" else 0) + (a2a_out if mode == "none" or (
                mode == "selective" and "core_attn" not in (mods or ())) else 0) \
            + (tm.dtensor_gathered_inputs(None, w) if mode == "none" and gathered_in else 0) \
            + (eager_fp32 if mode == "none" else 0)

    def ffn(layer: Total, moe: bool, mode: str) -> sp.Expr:
        part = _layer_part(layer, MOE_KEYS if moe else MLP_KEYS)
        glu = glu_kept[moe] if mode == "none" or mode == "selective" and not set(
            kept[moe]) & set(mods or ()) else 0
        return glu - (frozen_linear_inputs(part, targets) if frozen else 0) \
            + (_peft_adapters(x, part, training, common, moe) if peft and mode == "none"
               else 0) \
            + (shared_fp8 if moe and mode in ("none", "selective") else 0) \
            + (tm.dtensor_gathered_inputs(moe, w, attention=False)
               if mode == "none" and gathered_in else 0) \
            + (_hf_routing(x, training, w) if moe and mode == "none" else 0) \
            + (_expert_weights(x, training) if moe and peft and mode == "none" else 0)

    return attention, ffn


def _layer_part(layer: Total, keys) -> Total:
    """The terms of ``layer`` among ``keys`` (one part's: memsym.terms.mamba's key sets) and
    that part's pre-norm input, half the layer's two ``norm_inputs`` [bytes]."""
    return Total(f"{layer.name}, one part", tuple(
        replace(term, expr=term.expr / 2) if term.key == "norm_inputs" else term
        for term in layer if term.key in keys or term.key == "norm_inputs"))


def _glu_addons(x, training: Training, recompute: str, mods, shared: bool) -> tuple:
    """({moe: what an MLP (False) or MoE (True) part's activation function keeps beyond the
    fused one}, the kept shared expert's own FP8 input) [bytes]."""
    fw = framework_record(training.framework)
    # Megatron's eager SwiGLU (bias_activation_fusion off) keeps more products, in a dense MLP
    # and in the grouped experts, where their activations are kept (not recomputed)
    fused = training.memory.bias_activation_fusion or not x.swiglu or not fw.megatron_options
    # and Megatron-core's clamped GLU (GPT-OSS's swiglu_limit, the Bridge's
    # activation_func_clamp_value): the fused quick-GeGLU keeps a clamped copy of the experts'
    # fc1 output, the eager one (--no-bias-gelu-fusion) the clamped gate half, dense or MoE;
    # a clamped --swiglu (swiglu_clamp) clamps inside its fused kernel (nothing kept), and its
    # eager glu (--no-bias-swiglu-fusion) keeps the clamped gate half as quick-GeGLU's does
    extra = x.extra or {}
    megatron_clamp = x.swiglu and fw.moe_glu_clamp_copy
    limit = bool(megatron_clamp and extra.get("swiglu_limit") is not None)   # 0 clamps too
    eager_limit = bool(megatron_clamp and (extra.get("swiglu_limit") is not None
                                           or extra.get("swiglu_clamp") is not None))
    w = activation_width(training)
    clamp = {moe: (clamped_glu_copy(limit and moe, width=w) if fused
                   else eager_clamped_glu_input(eager_limit, moe=moe, width=w)).expr
             for moe in (False, True)}
    # activation_func_fp8_input_store: the fused SwiGLU saves its input in FP8 (Megatron-core
    # refuses it for another activation, which memsym.job_checks mirrors)
    fp8_glu = bool(fused and x.swiglu and training.memory.activation_func_fp8_input_store)
    shared_kept = shared and not (recompute == "selective"
                                  and {"shared_experts", "moe"} & set(mods or ()))
    glu_kept = {moe: unfused_glu_products(fused, moe=moe, width=w).expr + clamp[moe]
                + fp8_glu_input(fp8_glu, moe=moe, width=w).expr for moe in (False, True)}
    # the kept shared expert's own FP8 saving: moe_act does not reach the shared experts
    # (d98e8a64dd moe_layer.py:252-255 and :517-529 checkpoint them on "shared_experts" only;
    # moe_act is read by the routed experts, experts.py:271), so it stays outside glu_kept[True]
    shared_fp8 = (fp8_glu_input(fp8_glu, moe=True, shared=True, width=w).expr
                  - fp8_glu_input(fp8_glu, moe=True, width=w).expr) if shared_kept else 0
    # torchtitan's and transformers' eager SwiGLU keeps SiLU's output (compiled_model is read
    # only under per-op SAC, which counts what it saves itself: memsym.terms.op_sac)
    eager = bool(x.swiglu and fw.eager_swiglu)
    glu_kept = {moe: glu_kept[moe] + eager_silu_output(
        eager, moe=moe, shared=moe and shared_kept, width=w).expr
        for moe in (False, True)}
    # transformers' gelu_new (GPT-2's) runs op by op: three more f-wide tensors kept
    tanh_gelu = bool(not x.swiglu and fw.hf_model_code
                     and extra.get("hf_activation") == "gelu_new")
    glu_kept[False] = glu_kept[False] + eager_tanh_gelu(tanh_gelu, width=w).expr
    return glu_kept, shared_fp8


def _own_norms(x, sp_on: bool, training: Training) -> sp.Expr:
    """What a model type's own norm class keeps beyond the norms memsym's layer counts, under
    a framework running transformers' code: Gemma 4's (memsym.terms.gemma4_norms); 0 else."""
    if not (framework_record(training.framework).hf_model_code
            and (x.extra or {}).get("hf_model_type") in GEMMA4_NORM_TYPES):
        return sp.Integer(0)
    # an MoE layer's three more norms of h and its router's are memsym.terms.gemma4_moe's
    return gemma4_norm_excess(*token_split(sp_on), n_norms=4 if _gemma4_moe(x, training)
                              else x.norms_per_layer).expr


def _gemma4_moe(x, training: Training) -> bool:
    """Gemma 4's MoE block (enable_moe_block) run as transformers' code."""
    return bool(x.num_experts and framework_record(training.framework).hf_model_code
                and (x.extra or {}).get("hf_model_type") in GEMMA4_NORM_TYPES)


def _autocast_excess(x, training: Training) -> dict:
    """torch.autocast over fp32 weights, by the layer's recompute: the fp32 residual stream's
    norms, each projection's own 16-bit cast of it, the weights' casts, as the model type's
    layer meets autocast (memsym.terms.autocast; job_checks admits AUTOCAST_LAYERS); under a
    parallel residual both norms read one residual.  Over 16-bit weights: the LayerNorms' fp32
    copies and gelu_new's fp32 tensors alone (AUTOCAST16_LAYERS)."""
    kind = (x.extra or {}).get("hf_model_type")
    if training.states.autocast and training.states.precision != "fp32":
        shape16 = AUTOCAST16_LAYERS.get(kind)      # None: the layer keeps nothing more
        norms = x.norms_per_layer
        # Phi's q and k LayerNorms (job_checks admits qk_layernorm on Phi alone)
        qk = x.qk_layernorm and shape16 is not None
        if shape16 is not None and training.adapters.finetune != "full":
            # PEFT: the frozen linears keep no input, the fp32 adapters the same casts either
            # way: no reader keeps more than without autocast
            shape16 = {**shape16, "readers": norms}
        return {mode: autocast16_layer_excess(mode, **shape16, norms=norms, norm_tensors=1 if
                                              x.parallel_attention else norms,
                                              norm_weights=norm_params(x)).expr
                + (autocast16_qk_norms(mode).expr if qk else 0)
                if shape16 is not None else 0 for mode in ("none", "full")}
    shape = dict(AUTOCAST_LAYERS.get((x.extra or {}).get("hf_model_type"), {}),
                 norm_tensors=1 if x.parallel_attention else 2)
    return {mode: autocast_layer_excess(mode, **shape).expr if training.states.autocast
            else 0 for mode in ("none", "full")}


def _peft_adapters(x, part: Total, training: Training, common: dict, moe) -> sp.Expr:
    """What PEFT's LoRA / DoRA changes in one part of a transformers layer kept whole, the
    attention (``moe`` None: q, k, v, o) or the MLP / MoE (``moe`` False / True: gate, up,
    down), ``part`` its terms (:func:`_layer_part`): the adapters' own tensors
    (:func:`memsym.terms.peft_lora.peft_lora_activations`, a sum over the adapted matrices)
    less what the frozen base no longer keeps (:func:`memsym.terms.peft_lora.peft_frozen_base`,
    a sum over the part's terms).  PEFT's adapters are fp32 (its ``autocast_adapter_dtype``, as
    the model states count them), cast under a 16-bit compute width; an MoE layer's MLP
    adapters (PEFT's expert ParamWrapper) are not counted here, nor, under them, its MLP's
    frozen inputs removed."""
    ad = training.adapters
    w = activation_width(training)
    targets = LORA_TARGETS if ad.lora_targets == "all" else ad.lora_targets
    # the part's own matrices of the layer's targets: q, k, v, o on the attention part
    # (moe None), gate, up, down on a dense MLP (an MoE layer's experts: none here)
    chosen = [m for m in peft_layer_targets(x, training, bool(moe))
              if (m in ("q", "k", "v", "o")) == (moe is None)]
    frozen_moe = bool(moe) and not set(targets) & {"gate", "up", "down"}
    cast = peft_adapters_cast(training)
    # a bitsandbytes base (QLoRA): PEFT's lora.bnb layers skip the input cast under autocast
    quantized = ad.finetune == "qlora" or (ad.quantization is not None
                                           and quantization_bits(ad.quantization) < 16)
    plain_norms = common.get("hf_norms") is True and common.get("norm") == "rmsnorm" \
        and not common.get("norm_fp32") and not common.get("post_norms")
    copy = ad.lora_dropout or (cast and not quantized)    # lora_A keeps a copy of its input
    return peft_lora_activations(chosen, dropout=ad.lora_dropout, dora=ad.dora, cast=cast,
                                 width=w, quantized=quantized).expr.xreplace(
        {r_lora: sp.Integer(ad.lora_rank)}) \
        - peft_frozen_base(part, chosen, shared_inputs=not copy, norms=plain_norms,
                           mlp=moe is False, width=w, frozen_moe=frozen_moe,
                           expert_params=ad.lora_expert_params,
                           qk_norms=moe is None and plain_norms
                           and common.get("qk_norm") == "head" and not common.get("qk_norm_fp32"))


def _expert_weights(x, training: Training) -> sp.Expr:
    """PEFT's merged expert weights of the adapted expert parameters (``lora_expert_params``:
    :func:`memsym.terms.peft_lora.peft_expert_weights`), at the loaded parameters' width (4
    over fp32 weights, else 2), of an MoE layer (the caller's ``moe``: a dense layer and a
    shared expert have no 3-D parameter to wrap) [bytes]."""
    ad = training.adapters
    if not ad.lora_expert_params:
        return sp.Integer(0)
    return peft_expert_weights(
        ad.lora_expert_params, param_width=4 if training.states.precision == "fp32" else 2,
        cast=peft_adapters_cast(training), width=activation_width(training)).expr.xreplace(
        {r_lora: sp.Integer(ad.lora_rank)})


def peft_layer_targets(x, training: Training, moe: bool) -> list:
    """The matrices PEFT adapts in one layer of the job: its targets less an MoE layer's MLP
    (PEFT's expert ParamWrapper, not counted here) and a gate the MLP does not have."""
    ad = training.adapters
    targets = LORA_TARGETS if ad.lora_targets == "all" else ad.lora_targets
    return [m for m in targets
            if (m in ("q", "k", "v", "o") or not moe) and (m != "gate" or x.swiglu)]


def peft_adapters_cast(training: Training) -> bool:
    """Whether autocast casts PEFT's fp32 adapters to a 16-bit compute dtype: unless DeepSpeed's
    engine cast them to the config's dtype (DeepSpeed edaa72212 runtime/engine.py:1537-1544; no
    autocast there)."""
    return activation_width(training) != 4 and training.states.sharding not in DEEPSPEED_ZERO


# --- transformers' own MoE routing (memsym.terms.hf_moe_routing) ---------------------------
def _hf_routing(x, training: Training, width: int) -> sp.Expr:
    """What an MoE layer of transformers' model code keeps for its routing beyond torchtitan's
    router (its top-k indices, sort permutations, top-k weights, grouped_mm offsets; a grouped
    sigmoid router's group indices and mask; autocast's casts of an fp32 router; Qwen2-MoE's
    shared-expert gate), for the model types whose router was derived and measured
    (HF_ROUTERS, HF_GROUPED_ROUTERS); 0 otherwise.  With full recompute the block keeps only
    its input: counted at recompute none only."""
    if not (x.num_experts and framework_record(training.framework).hf_model_code):
        return sp.Integer(0)
    extra = x.extra or {}
    mtype = extra.get("hf_model_type") or PRESET_MODEL_TYPES.get(x.name)
    # the fp32 router's input and weight cast back by autocast; none in fp32
    casts = hf_router_casts(mtype in HF_FP32_ROUTER_WEIGHT and width != 4).expr
    gate = hf_shared_gate(mtype in HF_SHARED_GATES, width).expr
    if mtype in HF_GROUPED_ROUTERS:
        # a config.json read gives them (memsym.model.hf_config), a preset its file's groups
        # (memsym.model.presets: DeepSeek-V3's 8 and 4) and its config class's norm_topk_prob
        return casts + gate + hf_grouped_router(
            groups=int(extra.get("hf_n_group", 1)), topk_groups=int(extra.get("hf_topk_group", 1)),
            normalized=bool(extra.get("hf_norm_topk_prob", HF_GROUPED_ROUTERS[mtype])),
            width=width).expr
    if mtype in HF_TOPK_SOFTMAX_ROUTERS:
        # the fp32 softmax of the k logits and the fp32 weights it hands the experts
        return hf_topk_softmax_router().expr + hf_routing_indices(
            normalized=False, weight_width=4).expr
    if mtype in HF_UNCAST_ROUTERS:
        # fp32 outside autocast: the top-k weights and their sum fp32, cast to the compute
        # dtype for the experts
        return hf_uncast_router(width != 4).expr + hf_routing_indices(
            weight_width=width, norm_width=4).expr
    router = HF_ROUTERS.get(mtype)
    if router is None:
        return sp.Integer(0)
    normalized, fp32_weights = router
    if normalized is None:
        # a config.json read says (memsym.model.hf_config); the Qwen3-MoE presets' published
        # config.json (Qwen/Qwen3-30B-A3B, Qwen/Qwen3-235B-A22B) set norm_topk_prob true
        normalized = bool(extra.get("hf_norm_topk_prob", True))
    return casts + gate + hf_routing_indices(normalized=normalized,
                                             weight_width=4 if fp32_weights else width).expr
