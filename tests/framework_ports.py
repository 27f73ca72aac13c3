"""TEST-ONLY CODE: literal transcriptions of NVIDIA's published memory estimators.

This module is *not* part of memsym.  It is a line-by-line port of

* Megatron-LM core 0.19 ``megatron/training/theoretical_memory_usage.py``
  (``compute_weight_and_optimizer_memory`` with its TP-sharded / replicated / expert buckets,
  ``compute_activation_memory``, ``compute_activation_memory_without_sp`` and the path choice of
  ``report_theoretical_memory``), plus ``_vocab_size_with_padding`` of
  ``megatron/training/tokenizer`` that produces ``args.padded_vocab_size``;
* Megatron-Bridge 0.6 ``src/megatron/bridge/training/utils/theoretical_memory_utils.py``
  (``estimate_training_memory`` and its private helpers) and ``calculate_padded_vocab_size``,

kept as close to the published text as possible so that tests/test_conventions.py can compare
memsym's symbolic conventions against an independent implementation, to the byte; and

* torchtitan's per-op selective activation-checkpointing policy
  (:func:`torchtitan_op_sac_context`), shared by tests/test_op_sac_compile.py and
  tests/test_engine_sac.py, each with its version's save set; and

* the saved-tensor measurement of transformers' code (:func:`saved_storage_bytes`), shared by
  tests/test_zamba2_activations.py, tests/test_qwen3_next_gate.py and tests/test_hf_norms.py,
  and storage by storage (:func:`saved_storages`) by tests/test_clamped_glu.py.

The only departures from the published text, all made so that the arithmetic is exact:

* inputs are ``fractions.Fraction`` (so ``a / b`` is exact true division);
* float literals of the source are written as Fractions: ``3 / 2`` -> ``Fraction(3, 2)``,
  ``1.05`` -> ``Fraction(105, 100)``, ``18.0`` -> ``Fraction(18)``, ``6.0 + 12.0 / n`` ->
  ``6 + Fraction(12) / n``, ``0.0`` -> ``0``, and Megatron-LM's ``12 / data_parallel_size``
  -> ``Fraction(12) / ...`` (the expert DP size comes from ``//`` as an int); each is marked
  ``# src:``;
* printing (``verbose``) and ``print_rank_0`` calls are left out, and the report returns bytes.
"""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace

F = Fraction


# ================================================================================================
# Megatron-LM: megatron/training/tokenizer/tokenizer.py
# ================================================================================================
def _vocab_size_with_padding(orig_vocab_size, args):
    """Pad vocab size so it is divisible by model parallel size and still having GPU friendly size."""
    after = orig_vocab_size
    multiple = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size
    after = int(math.ceil(after / multiple) * multiple)
    return after


# ================================================================================================
# Megatron-LM core 0.19: megatron/training/theoretical_memory_usage.py
# ================================================================================================
def _get_moe_layer_counts(args):
    if args.num_experts is None:
        return args.num_layers, 0, 0, [0] * args.num_layers

    if isinstance(args.moe_layer_freq, int):
        moe_layer_pattern = [
            1 if (i % args.moe_layer_freq == 0) else 0 for i in range(args.num_layers)
        ]
    elif isinstance(args.moe_layer_freq, list):
        moe_layer_pattern = args.moe_layer_freq
        assert len(moe_layer_pattern) == args.num_layers
    else:
        raise ValueError(f"Invalid moe_layer_freq: {args.moe_layer_freq}")

    num_moe_layers = sum(moe_layer_pattern)
    num_dense_layers = args.num_layers - num_moe_layers
    return num_dense_layers, num_moe_layers, args.moe_ffn_hidden_size, moe_layer_pattern


def lm_compute_weight_and_optimizer_memory(args, verbose=False):
    # Attention projection size.
    query_projection_size = args.kv_channels * args.num_attention_heads
    query_projection_to_hidden_size_ratio = query_projection_size / args.hidden_size
    # Group Query Attention.
    if not args.group_query_attention:
        args.num_query_groups = args.num_attention_heads
    # MoE.
    num_experts = 1 if args.num_experts is None else args.num_experts
    gated_linear_multiplier = F(3, 2) if args.swiglu else 1  # src: 3 / 2

    shared_expert_ffn_hidden_size = (
        0
        if args.moe_shared_expert_intermediate_size is None
        else args.moe_shared_expert_intermediate_size
    )

    num_dense_layers, num_moe_layers, moe_ffn_hidden_size, moe_layer_pattern = (
        _get_moe_layer_counts(args)
    )
    if args.mtp_num_layers is not None:
        mtp_layer_is_moe = moe_layer_pattern[-1]
        mtp_num_moe_layers = mtp_layer_is_moe * args.mtp_num_layers
        mtp_num_dense_layers = (1 - mtp_layer_is_moe) * args.mtp_num_layers
    else:
        mtp_num_moe_layers = 0
        mtp_num_dense_layers = 0

    # RMSNorm does not have bias, but LayerNorm has.
    norm_size = 1 if args.normalization == "RMSNorm" else 2

    if args.multi_latent_attention:
        assert not args.group_query_attention
        if args.q_lora_rank is None:
            q_term = (
                args.hidden_size
                * args.num_attention_heads
                * (args.qk_head_dim + args.qk_pos_emb_head_dim)
            )
        else:
            ## q lora + rope + q norm
            q_term = args.q_lora_rank * (
                args.hidden_size
                + args.num_attention_heads * (args.qk_head_dim + args.qk_pos_emb_head_dim)
                + norm_size
            )
        self_attn_term = (
            q_term
            ## kv lora + rope + kv norm
            + args.kv_lora_rank
            * (
                args.hidden_size
                + args.num_attention_heads * (args.qk_head_dim + args.v_head_dim)
                + norm_size
            )
            + args.hidden_size * args.qk_pos_emb_head_dim
            ## o proj
            + (args.num_attention_heads * args.v_head_dim) * args.hidden_size
        )
    else:
        self_attn_term = (
            2
            * args.hidden_size
            * args.hidden_size
            * (
                # Attention.
                (
                    (1 + (args.num_query_groups / args.num_attention_heads))
                    * query_projection_to_hidden_size_ratio
                )
            )
        )

    embedding_size = args.hidden_size * args.padded_vocab_size
    final_layernorm = norm_size * args.hidden_size

    attention_params = self_attn_term
    dense_mlp_params = 2 * args.hidden_size * args.ffn_hidden_size * gated_linear_multiplier
    shared_expert_params = (
        2 * args.hidden_size * shared_expert_ffn_hidden_size * gated_linear_multiplier
    )
    routed_expert_hidden_size = (
        args.moe_latent_size if args.moe_latent_size is not None else args.hidden_size
    )
    routed_expert_params = (
        2 * routed_expert_hidden_size * moe_ffn_hidden_size * num_experts * gated_linear_multiplier
    )
    latent_projection_params = (
        2 * args.hidden_size * args.moe_latent_size
        if args.num_experts is not None and args.moe_latent_size is not None
        else 0
    )
    layernorm_params = 2 * args.hidden_size * norm_size
    router_params = (
        (args.hidden_size * num_experts) + (num_experts if args.add_bias_linear else 0)
        if args.num_experts is not None
        else 0
    )
    shared_expert_gate_params = (
        args.hidden_size
        if shared_expert_ffn_hidden_size > 0 and getattr(args, "moe_shared_expert_gate", False)
        else 0
    )

    expert_tensor_parallel_size = args.expert_tensor_parallel_size
    expert_model_parallel_size = args.expert_model_parallel_size
    expert_tensor_model_pipeline_parallel_size = (
        expert_tensor_parallel_size
        * expert_model_parallel_size
        * args.pipeline_model_parallel_size
    )
    expert_data_parallel_size = args.world_size // expert_tensor_model_pipeline_parallel_size

    # Split params by how they are held on each rank: regular TP, replicated, or EP/ETP.
    tp_sharded_params_in_transformer_block = (
        (attention_params + dense_mlp_params) * num_dense_layers
        + (attention_params + shared_expert_params) * num_moe_layers
    )
    replicated_params_in_transformer_block = (
        layernorm_params * num_dense_layers
        + (
            layernorm_params
            + latent_projection_params
            + router_params
            + shared_expert_gate_params
        )
        * num_moe_layers
        + final_layernorm
    )
    expert_sharded_params_in_transformer_block = routed_expert_params * num_moe_layers
    tp_sharded_params_in_mtp_block = (
        (attention_params + dense_mlp_params) * mtp_num_dense_layers
        + (attention_params + shared_expert_params) * mtp_num_moe_layers
    )
    replicated_params_in_mtp_block = (
        layernorm_params * mtp_num_dense_layers
        + (
            layernorm_params
            + latent_projection_params
            + router_params
            + shared_expert_gate_params
        )
        * mtp_num_moe_layers
    )
    expert_sharded_params_in_mtp_block = routed_expert_params * mtp_num_moe_layers

    # Most loaded model shard has 1/pp_size transformer layers, 1 mtp block, and 1 embedding layer.
    tp_sharded_params_on_most_loaded_shard = (
        (tp_sharded_params_in_transformer_block / args.pipeline_model_parallel_size)
        + tp_sharded_params_in_mtp_block
        + embedding_size
    ) / args.tensor_model_parallel_size
    replicated_params_on_most_loaded_shard = (
        replicated_params_in_transformer_block / args.pipeline_model_parallel_size
    ) + replicated_params_in_mtp_block
    expert_sharded_params_on_most_loaded_shard = (
        (expert_sharded_params_in_transformer_block / args.pipeline_model_parallel_size)
        + expert_sharded_params_in_mtp_block
    ) / (expert_tensor_parallel_size * expert_model_parallel_size)
    num_parameters_on_most_loaded_model_shard = (
        tp_sharded_params_on_most_loaded_shard
        + replicated_params_on_most_loaded_shard
        + expert_sharded_params_on_most_loaded_shard
    )
    if args.untie_embeddings_and_output_weights and args.pipeline_model_parallel_size == 1:
        tp_sharded_params_on_most_loaded_shard += embedding_size / args.tensor_model_parallel_size
        num_parameters_on_most_loaded_model_shard += (
            embedding_size / args.tensor_model_parallel_size
        )

    def num_bytes_per_parameter(data_parallel_size):
        # This estimator assumes bf16 training: bf16 model params, fp32 main gradients,
        # fp32 main params, and fp32 Adam states. See docs/user-guide/features/dist_optimizer.md.
        # src: 6 + (12 / data_parallel_size); `//` below gives an int, so 12 is made exact
        return 18 if not args.use_distributed_optimizer else 6 + (F(12) / data_parallel_size)

    weight_and_optimizer_memory = (
        tp_sharded_params_on_most_loaded_shard + replicated_params_on_most_loaded_shard
    ) * num_bytes_per_parameter(
        args.data_parallel_size
    ) + expert_sharded_params_on_most_loaded_shard * num_bytes_per_parameter(
        expert_data_parallel_size
    )

    return weight_and_optimizer_memory


def lm_compute_activation_memory(args, num_microbatches, verbose=False):
    # Using formula in Table 2 of https://arxiv.org/pdf/2205.05198.pdf.
    # We are trying to compute the maximum activation footprint, so all calculations in this
    # function are for the first pipeline stage.

    # Memory footprint from transformer layer (self-attention and MLP).
    activation_memory = (args.seq_length * args.micro_batch_size * args.hidden_size) * (
        18 + (4 * (args.ffn_hidden_size / args.hidden_size))
    )
    activation_memory *= args.num_layers

    # Input to embedding (pp_size microbatches in flight).
    activation_memory += (
        8 * args.seq_length * args.micro_batch_size * args.pipeline_model_parallel_size
    )
    # Dropout in embedding layer (pp_size microbatches in flight).
    activation_memory += (
        args.seq_length
        * args.micro_batch_size
        * args.hidden_size
        * args.pipeline_model_parallel_size
    )

    # Multiply by interleaved PP memory factor.
    if args.virtual_pipeline_model_parallel_size is not None:
        interleaved_schedule_memory_penalty = 1 + (
            (args.pipeline_model_parallel_size - 1)
            / (args.pipeline_model_parallel_size * args.virtual_pipeline_model_parallel_size)
        )
        activation_memory *= interleaved_schedule_memory_penalty

    # If using non-interleaved schedule, number of microbatches in pipeline can be less than
    # pp_size, so discount accordingly.
    if args.virtual_pipeline_model_parallel_size is None and args.pipeline_model_parallel_size > 1:
        if num_microbatches is not None:
            activation_memory *= min(1, num_microbatches / args.pipeline_model_parallel_size)

    if args.pipeline_model_parallel_size == 1:
        # Inputs to output layer and CE loss.
        activation_memory += (
            args.seq_length
            * args.micro_batch_size
            * args.hidden_size
            * 4
            * (1 + (args.padded_vocab_size / args.hidden_size))
        )

    # Activation memory is partitioned by TP size due to tensor and sequence model parallelism.
    return activation_memory / args.tensor_model_parallel_size


def lm_compute_activation_memory_without_sp(args, num_microbatches, verbose=False):
    """Compute activation memory without sequence parallelism"""

    # 4. Compute per-layer memory
    per_layer_memory = (
        args.seq_length
        * args.micro_batch_size
        * args.hidden_size
        * (10 + (24 / args.tensor_model_parallel_size))
    )

    # 5. Multiply by number of layers
    total_activation_memory = per_layer_memory * args.num_layers

    # 6. Add embedding activations
    total_activation_memory += (
        8 * args.seq_length * args.micro_batch_size * args.pipeline_model_parallel_size
    )
    total_activation_memory += (
        args.seq_length
        * args.micro_batch_size
        * args.hidden_size
        * args.pipeline_model_parallel_size
    )

    # 7. Handle pipeline parallelism schedules
    if args.virtual_pipeline_model_parallel_size is not None:
        interleaved_schedule_memory_penalty = 1 + (
            (args.pipeline_model_parallel_size - 1)
            / (args.pipeline_model_parallel_size * args.virtual_pipeline_model_parallel_size)
        )
        total_activation_memory *= interleaved_schedule_memory_penalty

    if args.virtual_pipeline_model_parallel_size is None and args.pipeline_model_parallel_size > 1:
        if num_microbatches is not None:
            total_activation_memory *= min(1, num_microbatches / args.pipeline_model_parallel_size)

    # 8. Add output layer memory if needed
    if args.pipeline_model_parallel_size == 1:
        # Logits calculation
        logits_size = args.seq_length * args.micro_batch_size * args.padded_vocab_size
        # The output projection is partitioned across TP
        logits_size /= args.tensor_model_parallel_size

        # Outputs from final layer norm
        final_ln_output = args.seq_length * args.micro_batch_size * args.hidden_size

        total_activation_memory += (logits_size + final_ln_output) * 2  # multiply by 2 for bytes

    # 9. Add buffer for optimizer and miscellaneous temporaries (5% overhead)
    overhead_factor = F(105, 100)  # src: 1.05
    total_activation_memory *= overhead_factor

    return total_activation_memory


def lm_report_theoretical_memory_bytes(args, num_microbatches=None):
    """``report_theoretical_memory`` without printing, in bytes: (weights+optimizer, activation)."""
    weight_and_optimizer_memory = lm_compute_weight_and_optimizer_memory(args)
    # Choose the appropriate activation memory calculation based on parallelism strategy
    if args.sequence_parallel and args.recompute_granularity == "selective":
        activation_memory = lm_compute_activation_memory(args, num_microbatches=num_microbatches)
    else:
        activation_memory = lm_compute_activation_memory_without_sp(
            args, num_microbatches=num_microbatches
        )
    return weight_and_optimizer_memory, activation_memory


def lm_args(arch, *, t=1, p=1, d=1, c=1, e=1, t_e=None, v=None, s, b,
            sequence_parallel=False, recompute="selective", distributed_optimizer=True):
    """An argparse-like Namespace as Megatron's ``validate_args`` leaves it (test helper).

    Resolutions done here, as Megatron does them: kv_channels = h/a, num_query_groups,
    group_query_attention, ffn_hidden_size = 4h, moe_ffn_hidden_size = ffn_hidden_size,
    expert_tensor_parallel_size = TP, sequence_parallel off at TP = 1, world size, and
    padded_vocab_size from the tokenizer builder.  Every value is a Fraction.
    """
    h, a = arch.hidden_size, arch.num_attention_heads
    ffn = arch.ffn_hidden_size if arch.ffn_hidden_size is not None else 4 * h
    args = SimpleNamespace(
        hidden_size=F(h), num_layers=arch.num_layers, num_attention_heads=F(a),
        kv_channels=F(arch.kv_channels if arch.kv_channels is not None else h // a),
        group_query_attention=arch.num_query_groups is not None and arch.num_query_groups != a,
        num_query_groups=F(arch.num_query_groups) if arch.num_query_groups is not None else None,
        ffn_hidden_size=F(ffn), swiglu=arch.swiglu, normalization=arch.normalization,
        untie_embeddings_and_output_weights=arch.untie_embeddings_and_output_weights,
        num_experts=F(arch.num_experts) if arch.num_experts is not None else None,
        moe_ffn_hidden_size=(F(arch.moe_ffn_hidden_size if arch.moe_ffn_hidden_size is not None
                               else ffn) if arch.num_experts is not None else None),
        moe_layer_freq=(arch.moe_layer_freq if isinstance(arch.moe_layer_freq, int)
                        else list(arch.moe_layer_freq)),
        moe_router_topk=F(arch.moe_router_topk),
        moe_shared_expert_intermediate_size=(F(arch.moe_shared_expert_intermediate_size)
                                             if arch.moe_shared_expert_intermediate_size else None),
        moe_latent_size=F(arch.moe_latent_size) if arch.moe_latent_size else None,
        add_bias_linear=arch.add_bias_linear,
        mtp_num_layers=arch.mtp_num_layers if arch.mtp_num_layers else None,
        multi_latent_attention=arch.multi_latent_attention,
        q_lora_rank=F(arch.q_lora_rank) if arch.q_lora_rank is not None else None,
        kv_lora_rank=F(arch.kv_lora_rank) if arch.kv_lora_rank is not None else None,
        qk_head_dim=F(arch.qk_head_dim) if arch.qk_head_dim is not None else None,
        qk_pos_emb_head_dim=F(arch.qk_pos_emb_head_dim) if arch.qk_pos_emb_head_dim else None,
        v_head_dim=F(arch.v_head_dim) if arch.v_head_dim is not None else None,
        tensor_model_parallel_size=F(t), pipeline_model_parallel_size=F(p),
        virtual_pipeline_model_parallel_size=F(v) if v is not None else None,
        expert_model_parallel_size=F(e), expert_tensor_parallel_size=F(t_e if t_e else t),
        world_size=F(t * p * c * d), data_parallel_size=F(d),
        use_distributed_optimizer=distributed_optimizer,
        seq_length=F(s), micro_batch_size=F(b),
        sequence_parallel=sequence_parallel and t > 1, recompute_granularity=recompute,
        make_vocab_size_divisible_by=F(arch.make_vocab_size_divisible_by),
    )
    args.padded_vocab_size = F(_vocab_size_with_padding(F(arch.vocab_size), args))
    return args


# ================================================================================================
# Megatron-Bridge 0.6: src/megatron/bridge/utils/vocab_utils.py
# ================================================================================================
def calculate_padded_vocab_size(vocab_size, make_vocab_size_divisible_by,
                                tensor_model_parallel_size, logging_enabled=True):
    """Pad vocab size so it is divisible by model parallel size and still having GPU friendly size."""
    after = vocab_size
    multiple = make_vocab_size_divisible_by * tensor_model_parallel_size
    after = int(math.ceil(after / multiple) * multiple)
    return after


# ================================================================================================
# Megatron-Bridge 0.6: src/megatron/bridge/training/utils/theoretical_memory_utils.py
# ================================================================================================
SILU = "torch.nn.functional.silu"  # stands for F.silu (compared by identity in the source)


def bridge_estimate_training_memory(config, num_microbatches=None, *, include_activation=True):
    """Returns (dense bytes, routed-expert bytes or None, activation bytes or None)."""
    model_config = config.model
    parameter_counts = _count_parameters(model_config)

    tensor_parallel_size = _positive_int_attr(model_config, "tensor_model_parallel_size", 1)
    pipeline_parallel_size = _positive_int_attr(model_config, "pipeline_model_parallel_size", 1)
    context_parallel_size = _positive_int_attr(model_config, "context_parallel_size", 1)
    expert_parallel_size = _positive_int_attr(model_config, "expert_model_parallel_size", 1)
    expert_tensor_parallel_size = _positive_int_attr(model_config, "expert_tensor_parallel_size", 1)

    dense_parameters_per_gpu = _dense_parameters_on_most_loaded_shard(
        model_config,
        parameter_counts,
        pipeline_parallel_size=pipeline_parallel_size,
        tensor_parallel_size=tensor_parallel_size,
    )
    dense_optimizer_shard_size = (
        _positive_int_attr(config, "data_parallel_size", 1) * context_parallel_size
    )
    dense_bytes_per_parameter = _bytes_per_parameter(config, dense_optimizer_shard_size)
    dense = dense_parameters_per_gpu * dense_bytes_per_parameter

    routed = None
    if parameter_counts["routed_experts"] > 0:
        routed_expert_parameters_per_gpu = _routed_expert_parameters_on_most_loaded_shard(
            model_config,
            parameter_counts,
            pipeline_parallel_size=pipeline_parallel_size,
            expert_parallel_size=expert_parallel_size,
            expert_tensor_parallel_size=expert_tensor_parallel_size,
        )
        expert_optimizer_shard_size = _expert_optimizer_shard_size(
            config,
            tensor_parallel_size=tensor_parallel_size,
            context_parallel_size=context_parallel_size,
            expert_parallel_size=expert_parallel_size,
            expert_tensor_parallel_size=expert_tensor_parallel_size,
        )
        expert_bytes_per_parameter = _bytes_per_parameter(config, expert_optimizer_shard_size)
        routed = routed_expert_parameters_per_gpu * expert_bytes_per_parameter

    activation = None
    if include_activation:
        activation = _compute_activation_memory_bytes(config, num_microbatches=num_microbatches)
    return dense, routed, activation


def _compute_activation_memory_bytes(config, *, num_microbatches, verbose=False):
    model_config = config.model
    train_config = config.train

    tensor_parallel_size = _positive_int_attr(model_config, "tensor_model_parallel_size", 1)
    pipeline_parallel_size = _positive_int_attr(model_config, "pipeline_model_parallel_size", 1)
    context_parallel_size = _positive_int_attr(model_config, "context_parallel_size", 1)
    virtual_pipeline_parallel_size = getattr(
        model_config, "virtual_pipeline_model_parallel_size", None
    )

    layer_counts = _get_layer_counts(model_config)
    ffn_activation_ratio = _ffn_activation_ratio(model_config, layer_counts)

    # Memory footprint from transformer layer (self-attention and MLP).
    activation_memory = (
        model_config.seq_length
        * train_config.micro_batch_size
        * model_config.hidden_size
        * (18 + (4 * ffn_activation_ratio))
    )
    activation_memory *= layer_counts["total"]

    # Input to embedding (pp_size microbatches in flight).
    activation_memory += (
        8 * model_config.seq_length * train_config.micro_batch_size * pipeline_parallel_size
    )
    # Dropout in embedding layer (pp_size microbatches in flight).
    activation_memory += (
        model_config.seq_length
        * train_config.micro_batch_size
        * model_config.hidden_size
        * pipeline_parallel_size
    )

    # Multiply by interleaved PP memory factor.
    if virtual_pipeline_parallel_size is not None:
        interleaved_schedule_memory_penalty = 1 + (
            (pipeline_parallel_size - 1)
            / (pipeline_parallel_size * virtual_pipeline_parallel_size)
        )
        activation_memory *= interleaved_schedule_memory_penalty

    if virtual_pipeline_parallel_size is None and pipeline_parallel_size > 1:
        if num_microbatches is not None:
            activation_memory *= min(1, num_microbatches / pipeline_parallel_size)

    if pipeline_parallel_size == 1:
        # Inputs to output layer and CE loss.
        activation_memory += (
            model_config.seq_length
            * train_config.micro_batch_size
            * model_config.hidden_size
            * 4
            * (1 + (_get_vocab_size(model_config) / model_config.hidden_size))
        )

    # Activation memory is partitioned by TP/SP and CP.
    return activation_memory / (tensor_parallel_size * context_parallel_size)


def _count_parameters(model_config):
    hidden_size = model_config.hidden_size
    moe_layer_pattern = _get_moe_layer_pattern(model_config)
    ffn_projection_factor = _ffn_projection_factor(model_config)

    query_projection_size = model_config.kv_channels * model_config.num_attention_heads
    query_projection_to_hidden_size_ratio = query_projection_size / hidden_size
    num_query_groups = (
        model_config.num_query_groups
        if model_config.num_query_groups
        else model_config.num_attention_heads
    )

    attention_parameters_per_layer = (
        2
        * hidden_size
        * hidden_size
        * (
            (1 + (num_query_groups / model_config.num_attention_heads))
            * query_projection_to_hidden_size_ratio
        )
    )
    layernorm_parameters_per_layer = 4 * hidden_size
    final_layernorm_parameters = 2 * hidden_size
    dense_mlp_parameters_per_layer = (
        ffn_projection_factor * hidden_size * model_config.ffn_hidden_size
    )

    shared_expert_intermediate_size = _optional_positive_int_attr(
        model_config, "moe_shared_expert_intermediate_size", 0
    )
    shared_expert_parameters_per_layer = (
        ffn_projection_factor * hidden_size * shared_expert_intermediate_size
    )

    routed_expert_parameters_per_layer = 0  # src: 0.0
    latent_projection_parameters_per_layer = 0  # src: 0.0
    if _has_moe(model_config) and any(moe_layer_pattern):
        moe_ffn_hidden_size = _optional_positive_int_attr(
            model_config, "moe_ffn_hidden_size", model_config.ffn_hidden_size
        )
        moe_latent_size = getattr(model_config, "moe_latent_size", None)
        if moe_latent_size is None:
            routed_expert_parameters_per_layer = (
                ffn_projection_factor * hidden_size * moe_ffn_hidden_size
                * model_config.num_moe_experts
            )
        else:
            routed_expert_parameters_per_layer = (
                ffn_projection_factor * moe_latent_size * moe_ffn_hidden_size
                * model_config.num_moe_experts
            )
            latent_projection_parameters_per_layer = 2 * hidden_size * moe_latent_size

    dense_transformer_by_layer = tuple(
        attention_parameters_per_layer
        + layernorm_parameters_per_layer
        + (
            shared_expert_parameters_per_layer + latent_projection_parameters_per_layer
            if is_moe_layer
            else dense_mlp_parameters_per_layer
        )
        for is_moe_layer in moe_layer_pattern
    )
    routed_experts_by_layer = tuple(
        routed_expert_parameters_per_layer if is_moe_layer else 0  # src: 0.0
        for is_moe_layer in moe_layer_pattern
    )
    dense_transformer_parameters = sum(dense_transformer_by_layer) + final_layernorm_parameters
    routed_expert_parameters = sum(routed_experts_by_layer)

    embedding_size = hidden_size * _get_vocab_size(model_config)
    embedding_parameters = embedding_size
    if not model_config.share_embeddings_and_output_weights:
        embedding_parameters += embedding_size

    return dict(
        dense_transformer=dense_transformer_parameters,
        routed_experts=routed_expert_parameters,
        embeddings=embedding_parameters,
        dense_transformer_by_layer=dense_transformer_by_layer,
        routed_experts_by_layer=routed_experts_by_layer,
        final_layernorm=final_layernorm_parameters,
    )


def _get_layer_counts(model_config):
    moe_layer_pattern = _get_moe_layer_pattern(model_config)
    num_moe_layers = sum(moe_layer_pattern)
    return dict(dense=len(moe_layer_pattern) - num_moe_layers, moe=num_moe_layers,
                total=len(moe_layer_pattern))


def _get_moe_layer_pattern(model_config):
    num_layers = _positive_int_attr(model_config, "num_layers", 1)
    if not _has_moe(model_config):
        moe_layer_pattern = (False,) * num_layers
    else:
        moe_layer_freq = getattr(model_config, "moe_layer_freq", 1)
        if isinstance(moe_layer_freq, int):
            if moe_layer_freq <= 0:
                raise ValueError("moe_layer_freq must be positive")
            moe_layer_pattern = tuple(
                layer_idx % moe_layer_freq == 0 for layer_idx in range(num_layers)
            )
        elif isinstance(moe_layer_freq, (list, tuple)):
            if len(moe_layer_freq) != num_layers:
                raise ValueError("Invalid moe_layer_freq length")
            moe_layer_pattern = tuple(bool(layer) for layer in moe_layer_freq)
        else:
            raise ValueError(f"Unsupported moe_layer_freq value: {moe_layer_freq}")

    mtp_num_layers = getattr(model_config, "mtp_num_layers", None) or 0
    if mtp_num_layers > 0:
        moe_layer_pattern += (moe_layer_pattern[-1],) * mtp_num_layers
    return moe_layer_pattern


def _embedding_parameters_on_most_loaded_shard(model_config):
    embedding_size = model_config.hidden_size * _get_vocab_size(model_config)
    tensor_parallel_size = _positive_int_attr(model_config, "tensor_model_parallel_size", 1)
    pipeline_parallel_size = _positive_int_attr(model_config, "pipeline_model_parallel_size", 1)

    embedding_parameters = embedding_size / tensor_parallel_size
    if not model_config.share_embeddings_and_output_weights and pipeline_parallel_size == 1:
        embedding_parameters += embedding_size / tensor_parallel_size
    return embedding_parameters


def _dense_parameters_on_most_loaded_shard(model_config, parameter_counts, *,
                                           pipeline_parallel_size, tensor_parallel_size):
    pipeline_stage_layer_counts = _uneven_pipeline_stage_layer_counts(
        model_config, pipeline_parallel_size
    )
    if pipeline_stage_layer_counts is None:
        return parameter_counts["dense_transformer"] / (
            pipeline_parallel_size * tensor_parallel_size
        ) + _embedding_parameters_on_most_loaded_shard(model_config)

    pipeline_stage_layer_indices = _uneven_pipeline_stage_layer_indices(
        model_config, pipeline_stage_layer_counts
    )
    dense_parameters_by_stage = [
        sum(parameter_counts["dense_transformer_by_layer"][layer_idx]
            for layer_idx in stage_layer_indices)
        for stage_layer_indices in pipeline_stage_layer_indices
    ]

    num_layers = _positive_int_attr(model_config, "num_layers", 1)
    dense_parameters_by_stage[-1] += sum(parameter_counts["dense_transformer_by_layer"][num_layers:])
    dense_parameters_by_stage[-1] += parameter_counts["final_layernorm"]

    embedding_parameters = model_config.hidden_size * _get_vocab_size(model_config)
    dense_parameters_by_stage[0] += embedding_parameters
    dense_parameters_by_stage[-1] += embedding_parameters
    return max(dense_parameters_by_stage) / tensor_parallel_size


def _routed_expert_parameters_on_most_loaded_shard(model_config, parameter_counts, *,
                                                   pipeline_parallel_size, expert_parallel_size,
                                                   expert_tensor_parallel_size):
    pipeline_stage_layer_counts = _uneven_pipeline_stage_layer_counts(
        model_config, pipeline_parallel_size
    )
    if pipeline_stage_layer_counts is None:
        return parameter_counts["routed_experts"] / (
            pipeline_parallel_size * expert_parallel_size * expert_tensor_parallel_size
        )

    routed_parameters_by_stage = [
        sum(parameter_counts["routed_experts_by_layer"][layer_idx]
            for layer_idx in stage_layer_indices)
        for stage_layer_indices in _uneven_pipeline_stage_layer_indices(
            model_config, pipeline_stage_layer_counts
        )
    ]
    num_layers = _positive_int_attr(model_config, "num_layers", 1)
    routed_parameters_by_stage[-1] += sum(parameter_counts["routed_experts_by_layer"][num_layers:])
    return max(routed_parameters_by_stage) / (expert_parallel_size * expert_tensor_parallel_size)


def _uneven_pipeline_stage_layer_counts(model_config, pipeline_parallel_size):
    first_stage_layers = getattr(model_config, "num_layers_in_first_pipeline_stage", None)
    last_stage_layers = getattr(model_config, "num_layers_in_last_pipeline_stage", None)
    if first_stage_layers is None and last_stage_layers is None:
        return None
    if pipeline_parallel_size <= 1:
        raise ValueError("Uneven pipeline stages require pipeline_model_parallel_size greater than 1")

    layers_to_distribute = _positive_int_attr(model_config, "num_layers", 1)
    pipeline_stages_left = pipeline_parallel_size
    if first_stage_layers is not None:
        first_stage_layers = _positive_int_attr(model_config, "num_layers_in_first_pipeline_stage", 1)
        layers_to_distribute -= first_stage_layers
        pipeline_stages_left -= 1
    if last_stage_layers is not None:
        last_stage_layers = _positive_int_attr(model_config, "num_layers_in_last_pipeline_stage", 1)
        layers_to_distribute -= last_stage_layers
        pipeline_stages_left -= 1

    if pipeline_stages_left == 0:
        if layers_to_distribute != 0:
            raise ValueError("Uneven pipeline stage layer counts do not cover all model layers")
        middle_stage_layers = 0
    else:
        if layers_to_distribute <= 0 or layers_to_distribute % pipeline_stages_left != 0:
            raise ValueError("Model layers must divide evenly over the remaining pipeline stages")
        middle_stage_layers = layers_to_distribute // pipeline_stages_left

    stage_layer_counts = [middle_stage_layers] * pipeline_parallel_size
    if first_stage_layers is not None:
        stage_layer_counts[0] = first_stage_layers
    if last_stage_layers is not None:
        stage_layer_counts[-1] = last_stage_layers
    return tuple(stage_layer_counts)


def _uneven_pipeline_stage_layer_indices(model_config, pipeline_stage_layer_counts):
    virtual_pipeline_size = getattr(model_config, "virtual_pipeline_model_parallel_size", None)
    if virtual_pipeline_size is None:
        stage_layer_indices = []
        layer_offset = 0
        for stage_layer_count in pipeline_stage_layer_counts:
            stage_layer_indices.append(tuple(range(layer_offset, layer_offset + stage_layer_count)))
            layer_offset += stage_layer_count
        return tuple(stage_layer_indices)

    virtual_pipeline_size = _positive_int_attr(model_config, "virtual_pipeline_model_parallel_size", 1)
    if any(stage_layer_count % virtual_pipeline_size != 0
           for stage_layer_count in pipeline_stage_layer_counts):
        raise ValueError("Each uneven pipeline stage layer count must divide over virtual pipeline stages")

    stage_layer_indices = [[] for _ in pipeline_stage_layer_counts]
    layer_offset = 0
    for _ in range(virtual_pipeline_size):
        for pipeline_rank, stage_layer_count in enumerate(pipeline_stage_layer_counts):
            chunk_size = stage_layer_count // virtual_pipeline_size
            stage_layer_indices[pipeline_rank].extend(range(layer_offset, layer_offset + chunk_size))
            layer_offset += chunk_size
    return tuple(tuple(indices) for indices in stage_layer_indices)


def _bytes_per_parameter(config, optimizer_shard_size):
    if not getattr(config.optimizer, "use_distributed_optimizer", False):
        return F(18)  # src: 18.0
    return 6 + (F(12) / max(1, optimizer_shard_size))  # src: 6.0 + (12.0 / max(1, ...))


def _expert_optimizer_shard_size(config, *, tensor_parallel_size, context_parallel_size,
                                 expert_parallel_size, expert_tensor_parallel_size):
    data_parallel_size = _positive_int_attr(config, "data_parallel_size", 1)
    shard_size = data_parallel_size * tensor_parallel_size * context_parallel_size
    shard_size //= max(1, expert_parallel_size * expert_tensor_parallel_size)
    return max(1, shard_size)


def _ffn_projection_factor(model_config):
    # SwiGLU: h->2*ffn_h and ffn_h->h = 3 projections; otherwise two projections.
    if getattr(model_config, "gated_linear_unit", False) and getattr(
        model_config, "activation_func", None
    ) == SILU:
        return 3  # src: 3.0
    return 2  # src: 2.0


def _ffn_activation_ratio(model_config, layer_counts):
    if layer_counts["total"] == 0:
        return 0  # src: 0.0
    dense_ffn = layer_counts["dense"] * model_config.ffn_hidden_size
    moe_ffn = 0  # src: 0.0
    if _has_moe(model_config) and layer_counts["moe"] > 0:
        routed_to = _optional_positive_int_attr(
            model_config,
            "moe_router_topk",
            _optional_positive_int_attr(model_config, "num_experts_routed_to", 1),
        )
        moe_ffn_hidden_size = _optional_positive_int_attr(
            model_config, "moe_ffn_hidden_size", model_config.ffn_hidden_size
        )
        shared_expert_intermediate_size = _optional_positive_int_attr(
            model_config, "moe_shared_expert_intermediate_size", 0
        )
        moe_ffn = layer_counts["moe"] * (
            (moe_ffn_hidden_size * routed_to) + shared_expert_intermediate_size
        )
    return (dense_ffn + moe_ffn) / (layer_counts["total"] * model_config.hidden_size)


def _has_moe(model_config):
    num_experts = getattr(model_config, "num_moe_experts", None)
    return num_experts is not None and num_experts > 0


def _positive_int_attr(config, name, default):
    value = getattr(config, name, default)
    if value is None:
        return default
    value = int(value)
    if value <= 0:
        raise ValueError(f"{name} must be positive")
    return value


def _optional_positive_int_attr(config, name, default):
    value = getattr(config, name, None)
    if value is None:
        return default
    value = int(value)
    if value < 0:
        raise ValueError(f"{name} must be non-negative")
    return value


def _get_vocab_size(model_cfg):
    if getattr(model_cfg, "should_pad_vocab", True):
        return calculate_padded_vocab_size(
            model_cfg.vocab_size,
            model_cfg.make_vocab_size_divisible_by,
            model_cfg.tensor_model_parallel_size,
            logging_enabled=False,
        )
    else:
        return model_cfg.vocab_size


def bridge_config(arch, *, t=1, p=1, d=1, c=1, e=1, t_e=None, v=None, s, b,
                  distributed_optimizer=True, should_pad_vocab=False,
                  first_stage_layers=None, last_stage_layers=None):
    """A duck-typed ConfigContainer as the upstream tests build one (test helper).

    ``kv_channels`` and ``expert_tensor_parallel_size`` are resolved as a real
    ``TransformerConfig.__post_init__`` resolves them (h/a and TP); ``data_parallel_size`` is
    set as ``ConfigContainer.set_data_parallel_size`` sets it.
    """
    ffn = arch.ffn_hidden_size if arch.ffn_hidden_size is not None else 4 * arch.hidden_size
    opt = lambda x: F(x) if x is not None else None  # noqa: E731
    model = SimpleNamespace(
        num_layers=F(arch.num_layers), hidden_size=F(arch.hidden_size), seq_length=F(s),
        ffn_hidden_size=F(ffn),
        num_attention_heads=F(arch.num_attention_heads),
        num_query_groups=opt(arch.num_query_groups),
        kv_channels=F(arch.kv_channels if arch.kv_channels is not None
                      else arch.hidden_size // arch.num_attention_heads),
        vocab_size=F(arch.vocab_size),
        make_vocab_size_divisible_by=F(arch.make_vocab_size_divisible_by),
        should_pad_vocab=should_pad_vocab,
        share_embeddings_and_output_weights=not arch.untie_embeddings_and_output_weights,
        tensor_model_parallel_size=F(t), pipeline_model_parallel_size=F(p),
        num_layers_in_first_pipeline_stage=opt(first_stage_layers),
        num_layers_in_last_pipeline_stage=opt(last_stage_layers),
        virtual_pipeline_model_parallel_size=opt(v), context_parallel_size=F(c),
        expert_model_parallel_size=F(e), expert_tensor_parallel_size=F(t_e if t_e else t),
        num_moe_experts=opt(arch.num_experts),
        moe_layer_freq=arch.moe_layer_freq, moe_router_topk=F(arch.moe_router_topk),
        moe_ffn_hidden_size=opt(arch.moe_ffn_hidden_size),
        moe_shared_expert_intermediate_size=opt(arch.moe_shared_expert_intermediate_size),
        moe_latent_size=opt(arch.moe_latent_size), mtp_num_layers=arch.mtp_num_layers or None,
        gated_linear_unit=arch.swiglu, activation_func=SILU if arch.swiglu else "gelu",
    )
    return SimpleNamespace(
        model=model,
        train=SimpleNamespace(micro_batch_size=F(b)),
        optimizer=SimpleNamespace(use_distributed_optimizer=distributed_optimizer),
        data_parallel_size=F(d),
    )


# --- torchtitan's per-op selective AC --------------------------------------------------------

def torchtitan_op_sac_context(save_ops):
    """A ``context_fn`` for ``torch.utils.checkpoint.checkpoint``: torchtitan's per-op SAC
    policy over the ops ``save_ops`` (test-only port; torch needed).

    The same rule at both torchtitan versions the tests port: count the ``aten.mm`` calls
    apart in the forward and in the recompute; save the output of every op of the save set
    except every second mm (``MUST_SAVE``); recompute the rest (``PREFER_RECOMPUTE``); fresh
    counters for each checkpointed call.

    * 9dec370 ``torchtitan/parallelisms/parallelize_llama.py``: ``_save_list`` lines 214-223
      (mm, the efficient and flash SDPA kernels, reduce_scatter_tensor, abs and max, the last
      two for float8's amax), ``_get_custom_policy`` lines 250-266 and
      ``selective_checkpointing_context_fn`` lines 268-270 (``meta = defaultdict(int)``);
    * b5bcd76c6 ``torchtitan/distributed/activation_checkpoint.py``: ``_get_default_save_ops``
      lines 31-94 and ``_get_custom_policy`` lines 243-274 (``meta`` per context).  The
      branches this port leaves out never fire in the tests' CPU blocks: the forced-recompute
      mm shapes (``force_recompute_mm_shapes_by_fqns``, empty by default), the CUDA-to-CPU
      ``_to_copy`` always saved, and ``aten.linear`` as a leaf op (CPU decomposes it into mm).

    Parameters
    ----------
    save_ops : iterable of torch op overloads
        The save set (each version's, as its test transcribes it).
    """
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    import torch

    mm = torch.ops.aten.mm.default
    save = frozenset(save_ops)

    def context_fn():
        meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

        def policy(ctx, func, *args, **kwargs):
            key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
            if func == mm:
                meta[key] += 1
            keep = func in save and not (func == mm and meta[key] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
        return create_selective_checkpoint_contexts(policy)
    return context_fn


# --- the bytes autograd keeps while transformers' code runs ----------------------------------

def saved_storages(run, own=()) -> dict:
    """Call ``run()`` and return ``{storage address: bytes}`` of the distinct storages autograd
    saves meanwhile, the storages of the tensors in ``own`` (the model's parameters, RoPE tables
    computed once per model) left out.

    Every tensor saved through ``torch.autograd.graph.saved_tensors_hooks`` is traced to its
    storage; each storage is counted once and in full (a saved view keeps its whole base
    alive).
    """
    import torch

    left_out = {tensor.untyped_storage().data_ptr() for tensor in own}
    kept = {}

    def pack(tensor):
        ptr = tensor.untyped_storage().data_ptr()
        if ptr not in left_out:
            kept[ptr] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run()
    return kept


def saved_storage_bytes(run, own=()) -> int:
    """The bytes of :func:`saved_storages`, summed [bytes]."""
    return sum(saved_storages(run, own).values())
