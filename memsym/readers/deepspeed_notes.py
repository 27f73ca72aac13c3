"""The DeepSpeed config keys memsym reads into a note: they change memory or time, memsym does
not model them, and a report says so rather than dropping them (DeepSpeed 0.19.6,
deepspeedai/DeepSpeed ``edaa722126``: ``runtime/config.py``, ``runtime/zero/config.py``).
"""

from __future__ import annotations

__all__ = ["MODEL_CHECKPOINTING", "NOTED_TOP", "NOTED_ZERO"]

#: Top-level sections that change memory or time but that memsym does not model: read into
#: a note, never dropped silently (DeepSpeed runtime/config.py reads each).
NOTED_TOP = {
    "activation_checkpointing": "DeepSpeed's activation checkpointing acts only where the "
    "model calls deepspeed.checkpointing (Megatron-DeepSpeed); memsym counts no recompute from "
    "it (the model's own gradient checkpointing: --recompute-granularity full beside the "
    "config)",
    "communication_data_type": "the gradient reduction's dtype changes the traffic, not "
    "modelled (memsym reduces in the gradient dtype)",
    "amp": "apex AMP is not modelled (memsym counts the bf16/fp16 sections only)",
    "pipeline": "DeepSpeed's PipelineModule settings: memsym counts p = 1",
    "compile": "torch.compile changes the activations kept: not modelled",
    "compression_training": "compression training (quantization-aware, pruning) is not "
    "modelled",
    "data_efficiency": "data efficiency (random-LTD, curriculum) changes the tokens per layer: "
    "not modelled",
    "curriculum_learning": "curriculum learning changes the sequence length: not modelled",
    "sparse_attention": "sparse attention kernels are not modelled",
    "progressive_layer_drop": "progressive layer dropping skips layers: the time counts every "
    "layer",
    "sparse_gradients": "sparse embedding gradients are not modelled (memsym counts dense ones)",
    "torch_autocast": "torch.autocast computes in its own dtype beside the parameters' (fp32 "
    "without a bf16 / fp16 section): memsym counts activations in the parameters' precision",
    "hybrid_engine": "the hybrid engine's inference containers (DeepSpeed-Chat) are not "
    "modelled",
    "elasticity": "elastic training chooses the batch itself: memsym counts the config's",
    "quantize_training": "quantization-aware training is not modelled",
}
#: zero_optimization keys read into a note: what each would change.
NOTED_ZERO = {
    "allgather_bucket_size": "ZeRO-1/2 parameter all-gather bucket: no term in memsym",
    "sub_group_size": "ZeRO-3 optimizer-step sub-group (offload tile): no term in memsym",
    "stage3_max_live_parameters": "ZeRO-3 cap on gathered parameters: no term in memsym",
    "stage3_max_reuse_distance": "ZeRO-3 reuse distance: no term in memsym",
    "stage3_param_persistence_threshold": "ZeRO-3 parameters kept gathered: memsym's "
    "persistent-parameter term is not counted",
    "stage3_model_persistence_threshold": "ZeRO-3 persistent-parameter cap: not modelled",
    "zero_quantized_weights": "ZeRO++ qwZ (int8 weight all-gather): not modelled",
    "zero_quantized_nontrainable_weights": "ZeRO++ quantized frozen weights: not modelled",
    "zero_quantized_gradients": "ZeRO++ qgZ (int4 gradient reduce-scatter): not modelled",
    "zero_hpz_partition_size": "ZeRO++ hpZ secondary parameter partition: not modelled",
    "mics_shard_size": "MiCS shards within a sub-group: memsym shards across all of d",
    "mics_hierarchical_params_gather": "MiCS hierarchical gather: not modelled",
    "zenflow": "ZenFlow's stall-free offload: not modelled",
    "contiguous_gradients": "memsym counts ZeRO's contiguous gradient buffer (the "
    "fragmentation without it is not modelled)",
    "reduce_scatter": "gradients all-reduced, not reduce-scattered: the time counts a "
    "reduce-scatter",
}

#: A DeepSpeed job's recompute, given beside its config (``--recompute-granularity full``):
#: the model's own gradient checkpointing, which no ds_config key switches on.  transformers
#: 5.25 wraps every decoder layer's ``forward`` in a checkpoint once
#: ``gradient_checkpointing_enable`` (``modeling_utils.py:3202``) has run
#: (``GradientCheckpointingLayer``, ``modeling_layers.py:55-90``): each layer keeps its input
#: and reruns in the backward, memsym's full recompute of every layer; the Trainer's
#: ``gradient_checkpointing`` argument (``training_args.py:926``) calls it.
MODEL_CHECKPOINTING = ("recompute full: the model's own gradient checkpointing of every decoder "
                       "layer (transformers' model.gradient_checkpointing_enable(), the "
                       "Trainer's --gradient_checkpointing; GradientCheckpointingLayer, "
                       "modeling_layers.py), which DeepSpeed's config does not switch on")
