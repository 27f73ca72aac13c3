"""The adapters part of a job record (:class:`memsym.job_record.Training`'s ``adapters``): full
training, or LoRA on a frozen base, with the options each framework's LoRA reads."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Adapters"]


@dataclass(frozen=True)
class Adapters:
    """Full training, or LoRA adapters on a frozen base.

    Attributes
    ----------
    finetune : {"full", "lora", "qlora"}
        Full training, or LoRA adapters on a frozen base (QLoRA: an NF4 base).
    lora_rank, lora_targets, quantization
        LoRA rank, adapted matrices (``"all"`` or names of
        :data:`memsym.terms.adapters.LORA_TARGETS`) and the frozen base's format (None: bf16
        for LoRA, nf4-dq for QLoRA; :data:`memsym.terms.adapters.QUANTIZATIONS`).
    lora_regather : bool
        Megatron-Bridge's ``LoRA(sequence_parallel_input_regather=...)`` (default False): under
        sequence parallelism LoRA-A keeps only the local norm-output shard and re-gathers it in
        backward (:func:`memsym.terms.activations.lora_gathered_inputs`).
    lora_dropout, dora : bool
        PEFT's ``lora_dropout`` > 0 and ``use_dora`` (Hugging Face frameworks only:
        :func:`memsym.terms.peft_lora.peft_lora_activations`).
    lora_expert_params : tuple of str
        PEFT's ``target_parameters`` on transformers 5's fused routed experts, from
        ``("gate_up", "down")`` (``mlp.experts.gate_up_proj`` / ``down_proj``): a
        ``ParamWrapper`` of rank ``lora_rank`` per parameter
        (:func:`memsym.model.lora_counts.lora_layer_adapters`,
        :func:`memsym.terms.peft_lora.peft_expert_weights`).
    """

    finetune: str = "full"
    lora_rank: int = 16
    lora_targets: str | tuple[str, ...] = "all"
    quantization: str | None = None
    lora_regather: bool = False
    lora_dropout: bool = False
    dora: bool = False
    lora_expert_params: tuple[str, ...] = ()
