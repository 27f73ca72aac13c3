"""The Megatron-LM arguments without effect on a training step, by reason: the reviewed list.

Data of :mod:`memsym.readers.megatron_effects` (which re-exports it as ``NO_EFFECT``): the
arguments ``pretrain_gpt.py`` accepts whose ``dest`` Megatron-LM ``d98e8a64dd`` reads for
nothing that changes a training step's memory or time.  An argument is listed as "ignored"
only when it is here (or given at Megatron's default, ``megatron_effects.INERT``);
``tests/test_megatron_effects.py`` fails on an argument classified nowhere.
"""

from __future__ import annotations

__all__ = ["NO_EFFECT"]


def _words(text: str) -> frozenset:
    return frozenset(text.split())


#: Accepted and without effect on a training step's memory or time, by reason.
NO_EFFECT = {
    "logging, timers, profiling and debugging dumps": _words("""
        app_tag_run_name app_tag_run_version check_weight_hash_across_dp_replicas_interval
        config_logger_dir disable_straggler_on_startup dump_param_to_param_group_map
        enable_one_logger log_device_memory_used log_energy log_interval
        log_loss_scale_to_tensorboard log_memory_interval log_memory_to_tensorboard
        log_progress log_straggler log_throughput log_timers_to_tensorboard
        log_validation_ppl_to_tensorboard log_world_size_to_tensorboard logging_level
        memory_snapshot_path moe_per_layer_logging moe_routing_trace_capture_hidden_states
        moe_routing_trace_capture_logits moe_routing_trace_dump_weights
        moe_routing_trace_max_training_iters moe_routing_trace_path nvtx_ranges
        one_logger_async one_logger_project one_logger_run_name otel_enabled
        otel_service_name otel_span_groups profile profile_ranks profile_step_end
        profile_step_start pytorch_profiler_collect_callstack
        pytorch_profiler_collect_chakra pytorch_profiler_collect_shapes record_shapes
        run_workload_inspector_server save_activations_interval save_dgrads_interval
        save_params_interval save_tokens_per_expert_interval save_wgrads_interval
        straggler_ctrlr_port straggler_minmax_count tensorboard_dir tensorboard_log_interval
        tensorboard_queue_size timing_log_option use_pytorch_profiler wandb_entity
        wandb_exp_name wandb_project wandb_save_dir"""),
    # optimizer.py and optimizer_param_scheduler.py read them per step as scalars
    "learning-rate, weight-decay and loss-scale schedules, optimizer coefficients": _words("""
        adam_beta1 adam_beta2 adam_eps apply_wd_to_qk_layernorm calculate_per_token_loss
        decoupled_lr decoupled_min_lr end_weight_decay head_lr_mult hysteresis
        initial_loss_scale lion_beta1 lion_beta2 loss_scale loss_scale_window lr
        lr_decay_iters lr_decay_samples lr_decay_style lr_warmup_fraction lr_warmup_init
        lr_warmup_iters lr_warmup_samples lr_wsd_decay_iters lr_wsd_decay_samples
        lr_wsd_decay_style min_loss_scale min_lr moe_aux_loss_coeff
        moe_router_bias_update_rate moe_router_quantile_balancing_ema moe_z_loss_coeff
        mtp_loss_scaling_factor muon_coefficient_type muon_extra_scale_factor muon_momentum
        muon_scale_mode no_weight_decay_cond_type override_opt_param_scheduler
        start_weight_decay use_checkpoint_opt_param_scheduler weight_decay
        weight_decay_incr_style"""),
    "initialisation, seeds and numerics of the same kernels": _words("""
        apply_query_key_layer_scaling apply_residual_connection_post_layernorm
        data_parallel_random_init embedding_init_method_std fp8_interval fp8_margin
        glu_linear_offset init_method_std init_method_xavier_uniform
        init_model_with_meta_device layernorm_epsilon layernorm_zero_centered_gamma
        mhc_init_gating_factor moe_mlp_glu_interleave_size moe_router_force_load_balancing
        moe_router_load_balancing_type moe_router_pre_softmax moe_router_score_function
        moe_router_topk_scaling_factor moe_shared_expert_glu_interleave_size
        moe_single_grouped_bias moe_single_grouped_weight moe_token_drop_policy
        moe_upcycling_granularity moe_use_upcycling mrope_section mup_attn_scale_power
        mup_base_head_dim mup_base_hidden_size mup_embedding_mult mup_output_mult
        mup_width_mult perform_initialization rope_scaling_factor rope_type rotary_base
        rotary_interleaved rotary_percent rotary_seq_len_interpolation_factor seed
        te_rng_tracker use_cpu_initialization use_rope_scaling yarn_beta_fast yarn_beta_slow
        yarn_correction_range_round_to_int yarn_original_max_position_embeddings"""),
    "checkpoint save, load and conversion": _words("""
        async_ckpt_cpu_priority async_ckpt_io_priority async_ckpt_use_cpu_shm async_save
        async_strategy auto_detect_ckpt_format ckpt_assume_constant_structure
        ckpt_convert_format ckpt_convert_save ckpt_convert_update_legacy_dist_opt_format
        ckpt_drop_redundant_extra_state ckpt_format ckpt_fully_parallel_load
        ckpt_fully_parallel_load_exchange_algo ckpt_fully_parallel_load_per_rank_objects
        ckpt_fully_parallel_load_process_group ckpt_fully_parallel_save
        ckpt_fully_parallel_save_deprecated ckpt_fully_parallel_save_process_group
        ckpt_load_validate_sharding_integrity ckpt_pg_tensors_cache_create
        ckpt_pg_tensors_cache_path ckpt_step disable_msc_deprecated
        dist_ckpt_format_deprecated dist_ckpt_optim_fully_reshardable
        dist_ckpt_save_pre_mcore_014 dist_ckpt_strictness dist_ckpt_workers
        distrib_optim_fully_reshardable_mem_efficient enable_msc exit_on_missing_checkpoint
        finetune load load_main_params_from_ckpt no_load_optim no_load_rng no_save_optim
        no_save_rng non_persistent_ckpt_type non_persistent_global_ckpt_dir
        non_persistent_local_ckpt_algo non_persistent_local_ckpt_dir
        non_persistent_save_interval override_ckpt_iteration pretrained_checkpoint
        replication replication_factor replication_jump save save_interval
        save_retain_interval save_tokenizer_assets strict_fsdp_dtensor_load
        use_checkpoint_args use_dist_ckpt_deprecated use_mp_args_from_checkpoint_args
        use_persistent_ckpt_worker use_tokenizer_model_from_checkpoint_args verify_integrity"""),
    "data, tokenizer, evaluation and the run's length": _words("""
        allow_ambiguous_pad_tokens chat_template data_args_path data_cache_path data_path
        data_sharding dataloader_defer_npy_index_mmap dataloader_fast_cache_load
        dataloader_type eod_mask_loss eval_global_batch_size eval_interval eval_iters
        eval_micro_batch_size exit_duration_in_mins exit_interval exit_signal
        exit_signal_handler exit_signal_handler_for_dataloader
        exit_signal_handler_for_training fim_data fim_eod_token fim_fragment_rate
        fim_middle_token fim_no_prefix fim_pad_token fim_prefix_token fim_rate
        fim_split_sample fim_spm_rate fim_suffix_token full_validation iter_per_epoch
        merge_file metadata_path mid_level_dataset_surplus mmap_bin_files mock_data
        multiple_validation_sets null_tokenizer_eod_id null_tokenizer_pad_id
        num_dataset_builder_threads num_workers object_storage_cache_path
        per_dataset_sequences_path per_split_data_args_path phase_transition_iterations
        reset_attention_mask reset_position_ids sft_tokenizer_prompt_format skip_train
        special_tokens split start_eval_at_iter test_data_path tiktoken_num_special_tokens
        tiktoken_pattern tokenizer_hf_include_special_tokens
        tokenizer_hf_no_include_special_tokens tokenizer_hf_no_use_fast
        tokenizer_sentencepiece_ignore_extra_whitespaces tokenizer_sentencepiece_legacy
        train_data_path train_iters train_samples train_sync_interval trust_remote_code
        use_gigatoken valid_data_path validation_set_names vocab_extra_ids"""),
    # read by pretrain_bert.py, pretrain_vision_*.py, pretrain_ict.py, pretrain_t5.py or the
    # audio models, or by no code at all at this commit
    "other models' scripts (BERT, T5, vision, retrieval, audio), or unused": _words("""
        bert_binary_head bert_embedder_type bert_load biencoder_projection_dim
        biencoder_shared_query_context_model block_data_path classes_fraction
        data_per_class_fraction deprecated_use_mcore_models dino_bottleneck_size
        dino_freeze_last_layer dino_head_hidden_size dino_local_crops_number
        dino_local_img_size dino_norm_last_layer dino_teacher_temp dino_warmup_teacher_temp
        dino_warmup_teacher_temp_epochs embedding_path enable_full_sharding_in_hsdp
        evidence_data_path ict_head_size ict_load img_h img_w indexer_batch_size
        indexer_log_interval mask_factor mask_prob mask_type num_channels num_classes
        onnx_safe output_bert_embeddings patch_dim query_in_block_prob
        relative_attention_max_distance relative_attention_num_buckets
        retriever_report_topk_accuracies retriever_score_scaling sample_rate short_seq_prob
        swin_backbone_type titles_data_path use_flash_attn use_one_sent_docs
        vision_backbone_type vision_pretraining vision_pretraining_type"""),
    "inference and text generation only": _words("""
        cache_mla_latents decode_only_cuda_graphs enable_chunked_prefill flash_decode
        inference_batch_times_seqlen_threshold inference_coordinator_port
        inference_cuda_graph_all_prefills inference_cuda_graph_max_tokens
        inference_cuda_graph_scope inference_disable_ep_consensus
        inference_disable_triton_nvls_kernels inference_dynamic_batching
        inference_dynamic_batching_async_sched_mode inference_dynamic_batching_block_size
        inference_dynamic_batching_buffer_size_gb
        inference_dynamic_batching_cuda_graph_mixed_prefill_count
        inference_dynamic_batching_cuda_graph_sizing_distribution
        inference_dynamic_batching_enable_prefix_caching
        inference_dynamic_batching_logprobs_mode
        inference_dynamic_batching_mamba_memory_ratio
        inference_dynamic_batching_max_requests inference_dynamic_batching_max_tokens
        inference_dynamic_batching_num_cuda_graphs
        inference_dynamic_batching_paused_buffer_size_gb
        inference_dynamic_batching_prefix_caching_coordinator_policy
        inference_dynamic_batching_prefix_caching_eviction_policy
        inference_dynamic_batching_prefix_caching_mamba_gb
        inference_dynamic_batching_prefix_caching_routing_alpha
        inference_dynamic_batching_sampling_backend
        inference_dynamic_batching_track_generated_token_events
        inference_dynamic_batching_track_paused_request_events
        inference_dynamic_batching_unified_memory_level inference_fuse_tp_communication
        inference_grouped_gemm_backend inference_logging_step_interval
        inference_max_requests inference_max_seq_length
        inference_moe_disable_fused_quant_kernels inference_moe_token_dispatcher_type
        inference_rng_tracker inference_shards inference_text_gen_server_logging
        inference_use_synchronous_zmq_collectives inference_wandb_logging is_hybrid_model
        mamba_inference_conv_states_dtype mamba_inference_ssm_states_dtype max_tokens_to_oom
        mlp_chunks_for_prefill moe_enable_routing_replay
        moe_pad_experts_for_cuda_graph_inference nccl_all_reduce_for_prefill
        num_speculative_tokens offset_sampling_seed_by_dp_rank use_legacy_static_engine"""),
    "reinforcement learning (train_rl.py) only": _words("""
        decrease_batch_size_if_needed grpo_clamp_eps_lower grpo_clamp_eps_upper
        grpo_entropy_term_weight grpo_filter_groups_with_same_reward grpo_group_size
        grpo_iterations grpo_kl_beta grpo_prompts_per_step langrl_env_config perform_rl_step
        refit_method rl_consumption_granularity rl_default_temperature rl_default_top_k
        rl_default_top_p rl_durable_rollout_bank rl_generation_lag
        rl_importance_sampling_truncation_coef rl_inference_expert_model_parallel_size
        rl_inference_expert_tensor_model_parallel_size rl_inference_logprobs_is_correction
        rl_inference_model_unified_memory_level rl_inference_parsers
        rl_inference_pipeline_model_parallel_size rl_inference_tensor_model_parallel_size
        rl_kv_cache_management_mode rl_max_inflight_requests
        rl_offload_inference_model_weights_when_idle rl_offload_optimizer_during_inference
        rl_partial_rollouts rl_persist_cuda_graphs rl_profile rl_profile_dir
        rl_prompts_per_eval rl_rollout_bank_dir rl_rollout_bank_max_bytes
        rl_sequence_packing_algo rl_sequence_packing_max_sequences_per_bin rl_skip_bos_token
        rl_submission_granularity rl_training_cuda_graphs rl_use_sequence_packing
        rl_verify_model_weights_swap"""),
    "fault tolerance, restarts, timeouts and the launcher": _words("""
        adlr_autoresume adlr_autoresume_interval calc_ft_timeouts check_for_spiky_loss
        distributed_backend distributed_timeout_minutes
        distributed_timeout_seconds_after_init enable_experimental enable_ft_package
        error_injection_rate error_injection_type fault_injector_delay_start_iteration
        fault_injector_fault_delay fault_injector_fault_probabilities
        fault_injector_fault_types fault_injector_mtti_seconds fault_injector_num_ranks
        fault_injector_offset_seconds fault_injector_ranks fault_injector_seed
        flight_recorder_dump_on_timeout flight_recorder_dump_path
        flight_recorder_extra_dump_on_exec flight_recorder_include_only_active
        flight_recorder_include_stack_trace flight_recorder_trace_buffer_size
        ft_num_warmup_iters gpu_sniff_test_interval inprocess_active_world_size
        inprocess_barrier_timeout inprocess_completion_timeout inprocess_empty_cuda_cache
        inprocess_granularity inprocess_hard_timeout inprocess_heartbeat_interval
        inprocess_heartbeat_timeout inprocess_last_call_wait inprocess_max_iterations
        inprocess_monitor_process_interval inprocess_monitor_thread_interval
        inprocess_progress_watchdog_interval inprocess_restart inprocess_soft_timeout
        inprocess_termination_grace_time iterations_to_skip lazy_mpu_init local_rank
        rerun_mode result_rejected_tracker_filename torchrun_master_addr
        torchrun_master_port torchrun_max_restarts torchrun_node_rank torchrun_rdzv
        torchrun_standalone tp_comm_bootstrap_backend use_gloo_process_groups"""),
    # the CUDA-graph warm-up runs before the graphs are captured; Kitchen is absent at this
    # commit (HAVE_KITCHEN False), so its options build nothing
    "warm-up steps and features absent at this commit": _words("""
        cuda_graph_warmup_steps kitchen_attention_backend use_kitchen_attention"""),
    # read only by a construct memsym refuses (the experimental attention variants, the
    # hybrid pattern's G/D layers, hyper-connections): without it they build nothing
    "read only beside an argument memsym refuses": _words("""
        dsa_indexer_head_dim dsa_indexer_k_norm_epsilon dsa_indexer_k_norm_fp32
        dsa_indexer_loss_coeff dsa_indexer_n_heads dsa_indexer_rope_interleaved
        dsa_indexer_rotate_activation dsa_indexer_scoring_relu dsa_indexer_skip_topk_offset
        dsa_indexer_topk dsa_indexer_topk_freq dsa_indexer_use_sparse_loss
        dsa_kernel_backend gdp_cutedsl_kernel gdp_num_chunk_states_to_recompute
        gdp_num_householder linear_attention_freq linear_conv_kernel_dim linear_key_head_dim
        linear_num_key_heads linear_num_value_heads linear_value_head_dim
        mhc_num_residual_streams mhc_recompute_layer_num mhc_sinkhorn_iterations"""),
    # read by the reader where they act (the UB config under TP overlap, the fusion of the
    # gated unit they name: memsym.readers.megatron), else without effect as in Megatron
    "read only beside an argument memsym reads, which reads them then": _words("""
        bias_swiglu_fusion tp_comm_overlap_cfg"""),
}
