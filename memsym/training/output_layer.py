"""The activations of the final norm, the output layer and the loss of one micro-batch, for a job.

:func:`output_layer_activations` applies a job's framework, precision, PEFT and loss kind to
:func:`memsym.terms.activations.output_activations`; the stage's peak
(:mod:`memsym.training.activations`, the output stage's in-flight micro-batches) and the
loss's backward transient (:mod:`memsym.training.transients`) both read it.
"""

from __future__ import annotations

from ..frameworks import framework as framework_record
from ..job import Layout, Training
from ..model.architecture import norm_params
from ..term import Total
from ..terms import recipe_buffers as rb, torch_moments as tm
from ..terms.activations import output_activations
from ..terms.autocast import autocast_output
from ..terms.autocast16 import AUTOCAST16_LAYERS, autocast16_output
from ..terms.chunked_loss import chunked_loss_activations
from ..terms.hf_norms import final_norm_excess
from ..terms.peft_lora import peft_frozen_output
from ..terms.transformer_layer import token_split
from .traits import (activation_width, autotp_logits, logits_gathered, loss_kind,
                     residual_width, sequence_parallel_on)

__all__ = ["output_layer_activations"]


def output_layer_activations(x, layout: Layout, training: Training) -> Total:
    """One micro-batch's activations of the final norm, the output layer and the loss
    (:func:`memsym.terms.activations.output_activations` for this job).  Under PEFT (LoRA,
    QLoRA, DoRA on transformers' model code) the final norm's weight and ``lm_head`` are
    frozen: the norm keeps no normalised tensor for its weight's gradient and ``lm_head`` no
    input (:func:`memsym.terms.peft_lora.peft_frozen_output`).

    Examples
    --------
    >>> from memsym.model import preset, resolve
    >>> output_layer_activations(resolve(preset("llama2-7b"), seq_length=4096), Layout(),
    ...                          Training()).keys
    ('final_norm_input', 'final_norm_statistics', 'output_input', 'logits')
    """
    sp_on = sequence_parallel_on(layout)
    # torchtitan's output layer: torch's ColwiseParallel (saves the gathered input), fp32 norm
    titan = framework_record(training.framework).torch_output_layer
    # transformers' model code (DeepSpeed): its final LlamaRMSNorm keeps the same fp32 copy
    hf = framework_record(training.framework).hf_model_code
    out = output_activations(sequence_parallel=sp_on, norm=x.normalization.lower(),
                             compiled_loss=training.memory.compiled_loss,
                             gathered_output_input=sp_on and titan,
                             fp32_norm=x.normalization.lower() == "rmsnorm" and (
                                 "torchtitan" if titan else "transformers" if hf else False),
                             width=activation_width(training))
    if hf and x.normalization.lower() == "rmsnorm":
        # the final norm is the model's own RMSNorm class, of the layers' kind
        out = Total(out.name, (*out.terms, *final_norm_excess(
            *token_split(sp_on), scale=getattr(x, "norm_fp32_scale", False),
            product=getattr(x, "norm_fp32_product", False), width=activation_width(training))))
    chunked = loss_kind(layout, training) == "chunked"
    if hf and training.adapters.finetune != "full":
        # PEFT: the final norm's weight and lm_head frozen, kept for no weight gradient
        rms = x.normalization.lower() == "rmsnorm"
        fp32_normed = getattr(x, "norm_fp32_scale", False) or getattr(x, "norm_fp32_product",
                                                                      False)
        out = Total(out.name, (*out.terms, peft_frozen_output(
            *token_split(sp_on), norm=("fp32" if fp32_normed else "llama") if rms else None,
            head_input=not chunked, width=activation_width(training))))
    if training.states.autocast and training.states.precision != "fp32":
        if AUTOCAST16_LAYERS.get((x.extra or {}).get("hf_model_type")) is not None:
            out = Total(out.name, (*out.terms, autocast16_output(norm_params(x))))   # fp32 norm
    elif training.states.autocast:   # the final norm's fp32 input (memsym.terms.autocast)
        out = Total(out.name, (*out.terms, autocast_output(
            tied=not x.untie_embeddings_and_output_weights, weight_cast=not chunked)))
    if chunked:   # TRL's chunked loss: no lm_head input or logits kept, the packed rows instead
        kept = tuple(term for term in out.terms if term.key not in ("output_input", "logits"))
        return Total(out.name, (*kept, *chunked_loss_activations(residual_width(training)).terms))
    if loss_kind(layout, training) == "te":
        return rb.with_te_logits(out)
    return Total(out.name, tm.gathered_logits(out.terms, autotp_logits(training))) \
        if autotp_logits(training) or logits_gathered(layout, training) else out
