"""The keys of the per-GPU total's terms by group: model states, activations, allowances.

The one list every report, document, plot and the search read (:mod:`memsym.training` builds
the terms under these keys; :mod:`memsym.printing` groups a derivation by them).  Plain
strings, so that the printers below the training total can group one without importing it.
"""

__all__ = ["STATE_KEYS", "ACTIVATION_KEYS", "TRANSIENT_KEYS", "BUFFER_KEYS", "ALLOWANCE_KEYS",
           "ABSENT_STATES", "held_rows"]

#: Model states (weights, gradients, optimizer states and their expert and FP8 variants; torch
#: DDP's bucket copy of the gradients, memsym.terms.torch_ddp).
STATE_KEYS = ("weights", "weights_unquantized", "adapter_weights", "gradients", "ddp_buckets",
              "main_gradients", "optimizer", "muon_adam_moment", "fp8_weights", "expert_weights",
              "expert_gradients", "expert_main_gradients", "expert_optimizer", "expert_fp8_weights")
#: Activations: what the micro-batches in flight keep for their backward at the end of the
#: forward (the steady activations every phase but the optimizer step holds).
ACTIVATION_KEYS = ("layer_activations", "lora_gathered_inputs", "embedding_activations",
                   "output_activations", "mtp_activations", "mtp_input_activations",
                   "pipeline_buffers", "recompute_working_set",
                   "cpu_offloaded_activations", "dispatcher_gather_buffer",
                   "bf16_layer_activations", "fp32_stage_inputs")
#: The peak phase's change to the steady states and activations, a row of its own: the
#: buffers that phase adds (logits, the loss's, gathered layers, the step's temporaries) less
#: what is not held in it (the activations freed before the optimizer step, the Adam moments
#: before the first step, torchtitan's gradients before the blocks' backward), so it can be
#: negative (memsym.training.transients.phase_transients; the estimate's ``peak_parts``
#: itemise it).
TRANSIENT_KEYS = ("phase_transient",)
#: The negative transients that are model states not yet made in a phase -> the state keys they
#: are a share of (the first iteration's Adam moments, torchtitan's gradients before the
#: blocks' backward).
ABSENT_STATES = {"moments_not_yet_made": ("optimizer", "expert_optimizer"),
                 "gradients_not_yet_made": ("gradients", "expert_gradients")}
#: Framework buffers allocated through PyTorch's allocator beside states and activations, one
#: row each: the CUDA graphs' static buffers and pools (memsym.terms.cuda_graphs), FSDP2's
#: side-stream pools (memsym.terms.sharding_transients.fsdp2_stream_pools).
BUFFER_KEYS = ("cuda_graph_static_inputs", "cuda_graph_static_batches", "cuda_graph_pool",
               "optimizer_graph_pool", "reduce_scatter_pool", "all_gather_pool")
from .vocabulary import ALLOWANCE_KEYS  # the named allowances (memsym.terms.allowances)


def held_rows(rows: dict, parts: dict) -> dict:
    """The rows of one phase as held, every one >= 0 (for stacked bars): ``rows`` (term key ->
    bytes: states, ``activations``, allowances, buffers; no transients) with the phase's
    transient ``parts`` (key -> bytes) placed.  A state not yet made (:data:`ABSENT_STATES`) is
    taken off those states in proportion; the rest is netted as ``transients`` (after
    ``activations``, where above zero), and where that net is negative (the output layer's
    activations freed in backward, every activation freed before the step) it is taken off
    ``activations`` instead.

    Examples
    --------
    >>> held_rows({"optimizer": 12, "activations": 30, "nccl": 1},
    ...           {"moments_not_yet_made": -8, "logits": 2, "output_freed": -5})
    {'optimizer': 4.0, 'activations': 27, 'nccl': 1}
    """
    out, net = dict(rows), 0
    for key, val in parts.items():
        kept = [k for k in ABSENT_STATES.get(key, ()) if out.get(k, 0) > 0]
        if val < 0 and kept:
            whole = sum(out[k] for k in kept)
            for k in kept:
                out[k] += val * out[k] / whole
        else:
            net += val
    # the rows' order, the transients (where above zero) right after the activations
    before = list(rows)[:list(rows).index("activations")] if "activations" in rows else list(rows)
    after = [k for k in rows if k not in before and k != "activations"]
    out.update(activations=out.get("activations", 0) + min(net, 0), transients=max(net, 0))
    keys = before + ["activations"] + (["transients"] if net > 0 else []) + after
    return {k: out[k] for k in keys}
