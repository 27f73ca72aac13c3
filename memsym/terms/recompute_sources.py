"""Where Megatron-core implements each module that selective recompute recomputes.

:data:`RECOMPUTE_MODULE_SOURCES` cites, for each of Megatron's ``--recompute-modules`` that
memsym models, the code that checkpoints it: the checkpoint's input stays saved, what runs
inside it is recomputed in backward.  :func:`memsym.terms.transformer_layer.layer_activations`
drops those terms and cites these sources.

References
----------
.. [megatron-core] ``megatron/core/transformer`` at d98e8a64dd.
"""

from __future__ import annotations

from ..term import Source

__all__ = ["RECOMPUTE_MODULE_SOURCES"]

#: Megatron-Core's ``--recompute-modules`` that memsym models, in Megatron's order
#: (``TransformerConfig.recompute_modules`` in ``megatron/core/transformer/transformer_config.py``
#: at d98e8a64dd; the default under ``--recompute-granularity selective`` is ``core_attn``):
#: :data:`memsym.vocabulary.RECOMPUTE_MODULES`.

_MC = "megatron-core"
#: Where each module's recompute is implemented (Megatron-LM at d98e8a64dd): the checkpoint's
#: input stays saved, what runs inside it is recomputed in backward.
RECOMPUTE_MODULE_SOURCES = {
    "core_attn": Source(_MC, "megatron/core/transformer/attention.py, Attention."
                        "_checkpointed_attention_forward (tensor_parallel.checkpoint of "
                        "core_attention; q, k, v kept)"),
    "moe_act": Source(_MC, "megatron/core/transformer/moe/experts.py, TEGroupedMLP.forward "
                      "(CheckpointWithoutOutput of bias_act_func; its output, the linear_fc2 "
                      "input, discarded once fc2 ran; fc1 output kept)"),
    "layernorm": Source(_MC, "megatron/core/transformer/transformer_layer.py, TransformerLayer."
                        "__init__ (only a norm that is not IdentityOp) and _run_input_layernorm / "
                        "_forward_pre_mlp_layernorm (CheckpointWithoutOutput: the norm output "
                        "discarded, its input kept); models/gpt/gpt_layer_specs.py, "
                        "get_gpt_layer_with_transformer_engine_submodules (TENorm before MLA and "
                        "before an MoE layer, fused into linear_qkv / linear_fc1 otherwise)"),
    "mla_up_proj": Source(_MC, "megatron/core/transformer/multi_latent_attention.py, "
                          "MLASelfAttention.get_query_key_value_tensors (CheckpointWithoutOutput "
                          "of qkv_up_proj_and_rope_apply on the compressed latents) and "
                          "MultiLatentAttention.forward (q, k, v discarded after core attention)"),
    "mlp": Source(_MC, "megatron/core/transformer/transformer_layer.py, TransformerLayer._run_mlp "
                  "(tensor_parallel.checkpoint of the dense MLP on pre_mlp_layernorm_output, the "
                  "layer's hidden states under the TE spec's fused fc1 norm; not MoE layers)"),
    "moe": Source(_MC, "megatron/core/transformer/moe/moe_layer.py, MoELayer.forward "
                  "(tensor_parallel.checkpoint of custom_forward: router, dispatch, experts, "
                  "combine; input hidden_states kept)"),
    "shared_experts": Source(_MC, "megatron/core/transformer/moe/moe_layer.py, MoELayer."
                             "shared_experts_compute (tensor_parallel.checkpoint of the shared "
                             "experts on hidden_states)"),
}
