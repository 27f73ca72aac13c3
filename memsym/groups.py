"""The keys of the per-GPU total's terms by group: model states, activations, allowances.

The one list every report, document, plot and the search read (:mod:`memsym.training` builds
the terms under these keys; :mod:`memsym.printing` groups a derivation by them).  Plain
strings, so that the printers below the training total can group one without importing it.
"""

__all__ = ["STATE_KEYS", "ACTIVATION_KEYS", "BUFFER_KEYS", "ALLOWANCE_KEYS"]

#: Model states (weights, gradients, optimizer states and their expert and FP8 variants; torch
#: DDP's bucket copy of the gradients, memsym.terms.torch_ddp).
STATE_KEYS = ("weights", "weights_unquantized", "adapter_weights", "gradients", "ddp_buckets",
              "main_gradients", "optimizer", "muon_adam_moment", "fp8_weights", "expert_weights",
              "expert_gradients", "expert_main_gradients", "expert_optimizer", "expert_fp8_weights")
#: Activations, phase transients included.
ACTIVATION_KEYS = ("layer_activations", "lora_gathered_inputs", "embedding_activations",
                   "output_activations", "mtp_activations", "mtp_input_activations",
                   "pipeline_buffers", "recompute_working_set", "phase_transient",
                   "cpu_offloaded_activations", "dispatcher_gather_buffer",
                   "bf16_layer_activations")
#: Framework buffers allocated through PyTorch's allocator beside states and activations, one
#: row each: the CUDA graphs' static buffers and pools (memsym.terms.cuda_graphs), FSDP2's
#: side-stream pools (memsym.terms.sharding_transients.fsdp2_stream_pools).
BUFFER_KEYS = ("cuda_graph_static_inputs", "cuda_graph_static_batches", "cuda_graph_pool",
               "optimizer_graph_pool", "reduce_scatter_pool", "all_gather_pool")
from .vocabulary import ALLOWANCE_KEYS  # the named allowances (memsym.terms.allowances)
