"""The checks of jobs that run transformers' own model code (the Hugging Face Trainer, TRL,
DeepSpeed): PEFT's LoRA variants, torch DDP's bucket copy and autocast over fp32 weights, each
refused in one line where memsym does not count it (called by :func:`memsym.job_checks.validate`).
"""

from __future__ import annotations

from .errors import InvalidValueError, choose
from .frameworks import framework as framework_record
from .job_record import Layout, Training
from .terms.accelerate_fsdp import ACCELERATE_FSDP_MODES, ACCELERATE_PRECISIONS
from .terms.adapters import quantization_bits
from .terms.autocast import AUTOCAST_ACTIVATIONS, AUTOCAST_MODEL_TYPES
from .terms.autocast16 import AUTOCAST16_LAYERS
from .terms.gemma4_norms import GEMMA4_NORM_TYPES
from .terms.hf_eager_attention import EAGER_ONLY
from .terms.torch_ddp import TORCH_DDP_PRECISIONS
from .text import printable

__all__ = ["check_peft_variants", "check_expert_params_alone", "check_torch_ddp",
           "check_accelerate_fsdp",
           "check_autocast", "check_chunked_loss", "check_gemma4_moe", "check_gemma4_layers"]


def check_peft_variants(training: Training, x=None) -> None:
    """PEFT's ``lora_dropout`` and DoRA are read where PEFT runs (a framework running
    transformers' model code); a Megatron-Bridge LoRA, a torchtitan job or QLoRA's 4-bit base
    (DoRA dequantizes it each forward) refuse them in one line; so are the expert parameters'
    conditions, on the architecture ``x`` where given (:func:`check_expert_params_alone`)."""
    ad = training.adapters
    _check_expert_params(training)
    if x is not None:
        check_expert_params_alone(x, training)
    asked = [n for n in ("lora_dropout", "dora") if getattr(ad, n)]
    if not asked:
        return
    if ad.finetune == "full":
        raise InvalidValueError(f"{asked[0]} describes PEFT's LoRA adapters: give finetune lora "
                                "or qlora (--finetune lora)")
    if not framework_record(training.framework).hf_model_code:
        raise InvalidValueError(f"{asked[0]} is PEFT's (Hugging Face) LoRA option: memsym reads "
                                f"it for the deepspeed framework, not {training.framework}")
    if ad.dora and ad.finetune == "qlora":
        raise InvalidValueError("dora with QLoRA: DoRA dequantizes the 4-bit weight every "
                                "forward (dequantize_module_weight), not modelled")


def _check_expert_params(training: Training) -> None:
    """PEFT's ``target_parameters`` on the fused experts (``lora_expert_params``): a LoRA (not
    QLoRA: not modelled) of a framework running transformers' model code, without dropout or
    DoRA, which ``ParamWrapper`` raises on (peft v0.20.0 src/peft/tuners/lora/layer.py:2265-
    2275)."""
    ad = training.adapters
    if not ad.lora_expert_params:
        return
    names = ad.lora_expert_params
    if isinstance(names, str) or any(n not in ("gate_up", "down") for n in names) \
            or len(set(names)) != len(names):
        raise InvalidValueError(f"lora_expert_params {printable(str(names))[:40]}: give "
                                "gate_up and/or down once each")
    if ad.finetune != "lora" or not framework_record(training.framework).hf_model_code:
        raise InvalidValueError("lora_expert_params (PEFT's target_parameters) is read for a "
                                "LoRA (finetune lora, not qlora) of transformers' model code")
    if ad.lora_dropout or ad.dora:
        raise InvalidValueError("lora_expert_params with lora_dropout > 0 or DoRA: PEFT's "
                                "ParamWrapper raises on both (lora/layer.py:2265-2275); give "
                                "--lora_dropout 0")


def check_expert_params_alone(x, training: Training) -> None:
    """PEFT's ``target_parameters`` without target modules (``lora_targets`` none): the whole
    attention frozen, no adapter on it.  Refused on an MLA model: transformers' frozen
    DeepseekV3Attention (measured with saved-tensor hooks on a tiny deepseek_v3,
    tests/test_peft_expert_params_only.py) keeps the latent norms' fp32 inputs and statistics
    but neither normalised latent nor up-projection input (memsym's ``mla_latents``), and its
    value, a view of ``kv_b_proj``'s output, keeps that whole output (the no-RoPE keys too),
    which memsym's ``v`` does not count; the attention kernel of DeepSeek's unequal query and
    value head widths (SDPA's math path on the CPU) was not measured on a GPU."""
    ad = training.adapters
    if ad.finetune != "full" and ad.lora_expert_params and not ad.lora_targets \
            and x.multi_latent_attention:
        raise InvalidValueError("lora_expert_params alone on an MLA model: its frozen MLA "
                                "attention under PEFT keeps what memsym's MLA terms do not "
                                "count (fp32 latent-norm inputs only, v viewing kv_b_proj's "
                                "whole output), not modelled")


def check_torch_ddp(training: Training) -> None:
    """torch DDP's bucket copy (``torch_ddp_buckets``, :mod:`memsym.terms.torch_ddp`) is counted
    for the whole model trained with torch.optim.AdamW under plain DDP, as the Hugging Face
    Trainer runs the transformers model (framework deepspeed: the model code; Megatron's DDP
    keeps its own gradient buffer), without offload; the parameters fp32, bf16 or
    fp16, and the gradients in the parameters' dtype (autograd's ``param.grad``); with PEFT's
    LoRA / QLoRA adapters (not Megatron's) the buckets hold the adapters' gradients alone."""
    st = training.states
    if not st.torch_ddp_buckets:
        return
    said = (f"sharding {st.sharding}" if st.sharding != "ddp" else
            f"framework {training.framework}"
            if not framework_record(training.framework).hf_model_code else
            f"precision {st.precision}" if st.precision not in TORCH_DDP_PRECISIONS else
            f"optimizer {st.optimizer}" if st.optimizer != "adam" else
            f"convention {st.convention}" if st.convention != "framework" else
            f"finetune {training.adapters.finetune} under {training.framework}"
            if training.adapters.finetune != "full"
            and framework_record(training.framework).megatron_options else
            f"offload {st.offload}" if st.offload != "none" else
            f"grad_dtype {st.grad_dtype} beside precision {st.precision}"
            if st.grad_dtype not in (None, st.precision) else None)
    if said is not None:
        raise InvalidValueError(f"torch_ddp_buckets (torch DDP's bucket copy of the gradients) is "
                                "counted for an fp32, bf16 or fp16 model under sharding ddp with "
                                "AdamW (param.grad in the parameters' dtype), framework "
                                "deepspeed (the transformers model code; PEFT's adapters "
                                f"bucketed alone), no offload; not {said}")


def check_accelerate_fsdp(x, layout: Layout, training: Training) -> None:
    """Accelerate's FSDP2 (``accelerate_fsdp``, :mod:`memsym.terms.accelerate_fsdp`) is counted
    as the Hugging Face Trainer runs it: transformers' model code (framework deepspeed) under
    sharding fsdp, full training with AdamW, no offload, every GPU a data-parallel rank, the
    mixed mode over bf16 or fp16 and the plain one over fp32, bf16 or fp16 weights, on the
    architecture ``x`` without parameters Accelerate's groups leave in its root beyond a
    position table and an embedding norm (Gemma 4's per-layer inputs, Zamba's shared blocks);
    ``fsdp_keep_gathered`` only there."""
    st, mode = training.states, training.states.accelerate_fsdp
    if mode is None:
        if training.memory.fsdp_keep_gathered:
            raise InvalidValueError("fsdp_keep_gathered (reshard_after_forward=False) is read "
                                    "for Accelerate's FSDP2 (accelerate_fsdp mixed or plain)")
        return
    mode = choose("accelerate_fsdp", mode, ACCELERATE_FSDP_MODES)
    said = (f"framework {training.framework}" if not framework_record(
                training.framework).hf_model_code else
            f"sharding {st.sharding}" if st.sharding != "fsdp" else
            f"precision {st.precision}" if st.precision not in ACCELERATE_PRECISIONS[mode] else
            f"optimizer {st.optimizer}" if st.optimizer != "adam" else
            f"convention {st.convention}" if st.convention != "framework" else
            f"offload {st.offload}" if st.offload != "none" else
            f"finetune {training.adapters.finetune}" if training.adapters.finetune != "full" else
            f"t {layout.t}, p {layout.p}, c {layout.c}, e {layout.e}"
            if layout.world_size != layout.d or layout.e != 1 else
            f"autocast {st.autocast}" if st.autocast is not None else
            "torch_ddp_buckets" if st.torch_ddp_buckets else
            f"grad_dtype {st.grad_dtype}" if st.grad_dtype is not None else
            # left in Accelerate's root group, gathered through the step, not counted
            "Gemma 4's per-layer input embeddings" if getattr(x, "per_layer_input_size", None)
            else "Zamba's shared blocks" if getattr(x, "shared_blocks", None) else None)
    if said is not None:
        raise InvalidValueError(
            f"accelerate_fsdp {mode} (Accelerate's FSDP2 under the Hugging Face Trainer) is "
            "counted for transformers' model code (framework deepspeed) under sharding fsdp, "
            "full training with AdamW, no offload, every GPU data-parallel, "
            + ("bf16 or fp16 (mixed precision)" if mode == "mixed" else
               "the weights' dtype fp32, bf16 or fp16") + f"; not {said}")


def check_autocast(x, layout: Layout, training: Training) -> None:
    """``torch.autocast`` over fp32 weights (:mod:`memsym.terms.autocast`) is counted as the
    Hugging Face Trainer runs it: plain DDP of transformers' model code (framework deepspeed,
    sharding ddp), fp32 weights, full training, one GPU per replica, SDPA, no recompute or
    full, on the decoder layers it was measured on (:data:`AUTOCAST_MODEL_TYPES`), with the
    activation measured where the config names one (:data:`AUTOCAST_ACTIVATIONS`); over 16-bit
    weights of the autocast's own dtype on the layers of :data:`AUTOCAST16_LAYERS`, full
    training or PEFT's LoRA under full recompute (:func:`_lora16_refused`)."""
    dtype = training.states.autocast
    if dtype is None:
        return
    choose("autocast dtype", dtype, ("bf16", "fp16"))
    kind = (x.extra or {}).get("hf_model_type")
    activation = (x.extra or {}).get("hf_activation")
    precision = training.states.precision
    types = AUTOCAST_MODEL_TYPES if precision == "fp32" else tuple(AUTOCAST16_LAYERS)
    said = (f"precision {precision} (autocast here is over fp32 weights, or 16-bit weights "
            "of its own dtype)" if precision not in ("fp32", dtype) else
            f"framework {training.framework}" if not framework_record(
                training.framework).hf_model_code else
            f"sharding {training.states.sharding}" if training.states.sharding != "ddp" else
            f"finetune {training.adapters.finetune}" + (
                f" under recompute {training.memory.recompute}" if precision != "fp32" else "")
            if training.adapters.finetune != "full"
            and (precision == "fp32" or _lora16_refused(training)) else
            f"t {layout.t}, p {layout.p}, c {layout.c}" if layout.world_size != layout.d else
            f"recompute {training.memory.recompute}"
            if training.memory.recompute not in ("none", "full") else
            # BLOOM and MPT run eager attention alone (memsym.terms.hf_eager_attention)
            "eager attention (flash_attention off)" if not training.memory.flash_attention
            and kind not in EAGER_ONLY else
            (f"a {printable(str(kind), 40)} model" if kind else
             "a model not read from a config.json (a preset or options)")
            + (" (MoE layers)" if kind in types else "")
            if kind not in types or x.num_experts else
            # Phi's q and k LayerNorms measured over 16-bit weights (memsym.terms.autocast16)
            "qk_layernorm (LayerNorms on q and k, not measured)" if x.qk_layernorm and not (
                kind == "phi" and precision != "fp32") else
            "LayerNorms without weight and bias (not measured)" if not x.norm_affine else
            # Falcon's alibi is a 16-bit mask both ways: measured over 16-bit weights
            "alibi (not measured)" if kind == "falcon" and x.position_embedding_type != "rope"
            and precision == "fp32" else
            # the activation measured (gelu_new's pow is fp32 under CUDA's autocast, F.gelu not)
            f"a {kind} model of activation {printable(str(activation), 40)} ("
            f"{AUTOCAST_ACTIVATIONS[kind][1]} is counted)" if kind in AUTOCAST_ACTIVATIONS
            and activation != AUTOCAST_ACTIVATIONS[kind][1] else None)
    if said is not None:
        raise InvalidValueError(
            f"autocast {dtype} over {'fp32' if precision == 'fp32' else dtype} weights is "
            f"counted for transformers' {'/'.join(types)} layers under plain DDP "
            "(framework deepspeed, sharding ddp, full training, SDPA, recompute none or full"
            + ("; plain LoRA at full" if precision != "fp32" else "")
            + f"), as measured; not {said}"
            + ("; load the weights in 16 bits (--dtype bfloat16)" if precision == "fp32"
               else ""))


def _lora16_refused(training: Training) -> bool:
    """PEFT's LoRA under autocast over 16-bit weights, not as measured: only plain LoRA
    (no DoRA, no quantized base, no expert parameters) under full recompute, where the
    Trainer's enable_input_require_grads gives every norm an input needing a gradient
    (without it the first layer's norms on the embedding keep nothing: not counted)."""
    ad = training.adapters
    quantized = ad.quantization is not None and quantization_bits(ad.quantization) < 16
    return bool(ad.finetune != "lora" or ad.dora or quantized
                or ad.lora_expert_params or training.memory.recompute != "full")


def check_chunked_loss(x, layout: Layout, training: Training) -> None:
    """TRL's chunked loss (:mod:`memsym.terms.chunked_loss`) as TRL runs it and as measured:
    under plain DDP, or under DeepSpeed's engine (ZeRO-1/2/3: 16-bit weights, no autocast;
    ZeRO-3's lm_head gathered per chunk, refused with the parameters offloaded, whose gather
    first copies the host partition to the GPU, and with tied embeddings, whose weight
    ``embed_tokens`` keeps gathered: trl/trainer/utils.py:198-220 then gathers nothing)."""
    st = training.states
    kind = (x.extra or {}).get("hf_model_type")
    zero = st.sharding in ("zero1", "zero2", "zero3")
    said = (f"framework {training.framework}" if not framework_record(
                training.framework).hf_model_code else
            f"sharding {st.sharding}" if st.sharding != "ddp" and not zero else
            f"t {layout.t}, p {layout.p}, c {layout.c}" if layout.world_size != layout.d else
            f"precision {st.precision}" + (" without autocast" if st.precision == "fp32" else "")
            if st.precision not in ("bf16", "fp16") and not st.autocast else
            f"finetune {training.adapters.finetune} under autocast"
            if training.adapters.finetune != "full" and st.autocast else
            # CUDA's autocast runs the final LayerNorm in fp32: its fp32 output is what the loss
            # packs (measured 2 n h more than 16-bit rows; its chunks' peaks not measured)
            f"autocast over {st.precision} weights on a {str(kind)[:40]} model (its final "
            "LayerNorm's fp32 output packed: not measured)" if st.autocast
            and st.precision != "fp32" and AUTOCAST16_LAYERS.get(kind) is not None else
            "sharding ddp without torch_ddp_buckets (DeepSpeed's ZeRO stage 0)"
            if st.sharding == "ddp" and not st.torch_ddp_buckets else
            f"sharding zero3 with offload {st.offload}"
            if st.sharding == "zero3" and "params" in st.offload else
            "sharding zero3 with tied embeddings" if st.sharding == "zero3"
            and not x.untie_embeddings_and_output_weights else None)
    if training.memory.chunked_loss and said is not None:
        raise InvalidValueError("chunked_loss (TRL's chunked_nll) is counted for transformers' "
                                "model code under plain DDP or ZeRO-1/2/3 (no offload_param, "
                                "lm_head untied under ZeRO-3), bf16/fp16 weights (full or LoRA) "
                                "or fp32 under autocast (full), one GPU per replica; not "
                                f"{said} (a TRL launch: give --loss_type nll)")


def check_gemma4_moe(x, layout, training: Training) -> None:
    """Gemma 4's ``enable_moe_block`` under transformers' own code is counted on one GPU's
    whole experts and hidden size (memsym.terms.gemma4_moe, measured on
    ``Gemma4TextDecoderLayer``); AutoTP's or AutoEP's split of its router, experts and the
    block's norms is not measured: refused in one line."""
    gemma4_code = framework_record(training.framework).hf_model_code \
        and (x.extra or {}).get("hf_model_type") in GEMMA4_NORM_TYPES
    if gemma4_code and training.states.precision == "fp32" and training.states.autocast is None:
        # the norms' and the MoE block's terms are measured with 16-bit activations (an fp32
        # run keeps its fp32 tensors once, no copies: their widths differ)
        raise InvalidValueError("Gemma 4 under transformers' own code is counted with 16-bit "
                                "activations (bf16 / fp16, or autocast over fp32 weights), "
                                "not plain fp32: give --precision bf16 or an autocast")
    if x.num_experts and gemma4_code and (layout.t > 1 or layout.e > 1):
        raise InvalidValueError("the activations of Gemma 4's MoE block (enable_moe_block) "
                                "under transformers' own code are counted without tensor or "
                                f"expert parallelism, not t={layout.t}, e={layout.e}: "
                                f"framework {training.framework} runs that code; a Megatron "
                                "framework's layer of the same shapes is counted")


def check_gemma4_layers(x, layout, training: Training) -> None:
    """Gemma 4's per-layer input embeddings and KV-sharing layers are counted as transformers'
    code keeps them in 16-bit activations (memsym.terms.gemma4_ple, memsym.terms.kv_sharing);
    a pipeline stage of KV-sharing layers away from the layers storing their keys and values
    (transformers' pipeline plan passes the hidden states alone) is refused in one line, as is
    plain fp32."""
    reuse = any(m in ("kv_reuse", "global_kv_reuse") for m in (x.layer_mixers or ()))
    if not (reuse or getattr(x, "per_layer_input_size", None)):
        return
    if not framework_record(training.framework).hf_model_code:
        # Megatron-Bridge builds its own (models/gemma/modeling_gemma4.py:321-347, 560-568 at
        # 067f987df0, Transformer Engine's norms): not transformers' module these terms measure
        what = "KV-sharing layers" if reuse else "per-layer input embeddings"
        raise InvalidValueError(f"Gemma 4's {what} under {training.framework}: memsym counts "
                                "them as "
                                "transformers' code builds them (--framework deepspeed, a "
                                "Trainer or TRL launch); Megatron-Bridge's own Gemma 4 module "
                                "is not modelled")
    if training.states.precision == "fp32" and training.states.autocast is None:
        raise InvalidValueError("Gemma 4's per-layer inputs and KV-sharing layers are counted "
                                "with 16-bit activations, not plain fp32: give --precision "
                                "bf16 or an autocast")
    if getattr(x, "per_layer_input_size", None) and training.adapters.finetune != "full" and \
            training.adapters.lora_targets == "all":
        # PEFT's all-linear reaches per_layer_input_gate, per_layer_projection and the model's
        # per_layer_model_projection (nn.Linear: modeling_gemma4.py:1348-1349, 1574)
        raise InvalidValueError("LoRA on every linear layer of a Gemma 4 model with per-layer "
                                "inputs: PEFT's all-linear also adapts per_layer_input_gate, "
                                "per_layer_projection and per_layer_model_projection, which "
                                "memsym does not count; name the targets (--lora-targets "
                                "q,k,v,o,gate,up,down)")
    if reuse and layout.p > 1:
        raise InvalidValueError(f"Gemma 4's KV-sharing layers (num_kv_shared_layers) over "
                                f"pipeline stages (p={layout.p}) are not modelled: their keys "
                                "and values come from an earlier layer's stage; give --pp 1")
