"""What each Megatron-LM argument memsym does not read does to a training step: the reviewed table.

Every argument ``pretrain_gpt.py`` accepts is either read (:data:`memsym.readers.
megatron_arguments.MODELLED`) or classified here by what Megatron-LM does with its ``dest`` at
``d98e8a64dd`` (each located at its use, ``file:line`` under ``megatron/``, or
``pretrain_gpt.py`` at the root):

* :data:`NO_EFFECT` (:mod:`memsym.readers._megatron_no_effect`): no effect on a training step's
  memory or time, grouped by reason (logging, the learning-rate schedule, checkpoint I/O, data,
  inference, RL, ...); listed as "ignored".
* :data:`MEMORY_NOT_MODELLED` / :data:`TIME_NOT_MODELLED`: they change memory (and often time),
  or the step time only, in a way memsym does not model; noted, never listed as without effect.
* :data:`STRUCTURE_NOT_MODELLED`: they change the model's structure beyond memsym's
  Architecture; refused in one line.
* :data:`VALUE_NOT_MODELLED`: one value of theirs changes memory or time (noted at that value).
* :data:`MEGATRON_REFUSES`: Megatron's ``validate_args`` stops on them; refused as it refuses.

``tests/test_megatron_effects.py`` walks the argument table: a new Megatron-LM argument fails it
until it is classified here, so none becomes "no effect" unreviewed.  Paths are under
``megatron/`` of NVIDIA/Megatron-LM ``d98e8a64dd`` (``pretrain_gpt.py`` at its root).
"""

from __future__ import annotations

# the no-effect list is data of its own (memsym.readers._megatron_no_effect), re-exported here
from ._megatron_no_effect import NO_EFFECT

__all__ = ["NO_EFFECT", "MEMORY_NOT_MODELLED", "TIME_NOT_MODELLED", "STRUCTURE_NOT_MODELLED",
           "VALUE_NOT_MODELLED", "MEGATRON_REFUSES", "INERT", "same_value",
           "no_effect_reason"]


#: Accepted, and they change memory (and often the step time) in a way memsym does not model.
MEMORY_NOT_MODELLED = {
    "optimizer_cpu_offload": "optimizer CPU offload (core/optimizer/__init__.py:504)",
    "fine_grained_activation_offloading": "fine-grained activation offloading "
                                          "(core/transformer/transformer_layer.py:1546)",
    "moe_expert_capacity_factor": "expert capacity (token dropping; "
                                  "core/transformer/moe/router.py:793)",
    "activation_offload_fraction": "the fraction of activations offloaded "
                                  "(core/pipeline_parallel/fine_grained_activation_offload.py:749)",
    "offload_modules": "activation offloading of the modules named "
                       "(core/transformer/transformer_layer.py:1547)",
    "delay_offload_until_cuda_graph": "activation offloading deferred to the CUDA graph "
                                      "(core/transformer/transformer_layer.py:1344)",
    "delta_offload_bytes_across_pp_ranks": "per-stage activation offload amounts "
                              "(core/pipeline_parallel/fine_grained_activation_offload.py:748)",
    "fine_grained_offloading_max_inflight_offloads": "offloads in flight "
                              "(core/pipeline_parallel/fine_grained_activation_offload.py:764)",
    "min_offloaded_tensor_size": "which activations are offloaded "
                              "(core/pipeline_parallel/fine_grained_activation_offload.py:747)",
    "optimizer_offload_fraction": "the share of optimizer states offloaded to the CPU "
                                  "(core/optimizer/__init__.py:536)",
    "fp16_lm_cross_entropy": "the loss on half-precision logits, without their fp32 copy "
                             "(training/models/gpt.py:171)",
    "logit_dtype": "the output layer's logits dtype (training/models/gpt.py:172)",
    "attention_softmax_in_fp32": "fp32 attention probabilities in the unfused softmax "
                                 "(core/transformer/dot_product_attention.py:106)",
    "masked_softmax_fusion": "the unfused attention's softmax kernel "
                             "(core/transformer/dot_product_attention.py:104)",
    "apply_rope_fusion": "the rotary embedding's fused kernel "
                         "(core/models/common/embeddings/rope_utils.py:340)",
    "bias_dropout_fusion": "the fused bias-dropout-add (core/transformer/transformer_layer.py:754)",
    "clone_scatter_output_in_embedding": "the embedding output's clone under sequence "
        "parallelism (core/models/common/embeddings/language_model_embedding.py:151)",
    "disable_jit_fuser": "the JIT-fused elementwise kernels (training/global_vars.py:15)",
    "fused_residual_rmsnorm": "the fused residual-add RMSNorm "
                              "(core/extensions/transformer_engine.py:1054)",
    "use_te_activation_func": "Transformer Engine's activation modules "
                              "(training/models/gpt.py:117)",
    "use_transformer_engine_op_fuser": "Transformer Engine's op fuser "
                                       "(training/models/gpt.py:106)",
    "use_fused_weighted_squared_relu": "the fused weighted squared-ReLU of the experts "
                                       "(core/transformer/moe/experts.py:424)",
    "gradient_accumulation_fusion": "the fused wgrad accumulation into main_grad "
                                    "(core/extensions/transformer_engine.py:1293)",
    "qk_l2_norm": "L2-normalised queries and keys (training/models/gpt.py:63)",
    "mlp_chunks_for_training": "the MLP run in chunks (core/transformer/transformer_layer.py:982)",
    "empty_unused_memory_level": "torch.cuda.empty_cache() in each step "
                                 "(training/training.py:3149)",
    "freeze_all_layers": "forward-only steps without gradients (training/training.py:2353)",
    "logits_load_dir": "distillation from cached top-k logits (training/training.py:2772)",
    "logits_save_dir": "top-k logits saved each step (training/training.py:2760)",
    **{dest: "a parameter of the top-k logits saved (--logits-save-dir; "
             "training/training.py:2763-2767)"
       for dest in ("logits_save_top_k", "logits_save_top_p", "logits_save_top_p_min_k",
                    "logits_save_dtype")},
    **{dest: "a parameter of distillation from cached logits (--logits-load-dir; "
             "pretrain_gpt.py:242-249)"
       for dest in ("logits_load_decode_threads", "logits_load_prefetch_factor",
                    "logits_load_msc_prefetch_depth", "logits_load_kd_loss_alpha",
                    "logits_load_ignore_errors")},
    "delay_wgrad_compute": "the weight gradients computed later, their inputs kept "
                           "(core/extensions/transformer_engine.py:1170)",
    "ep_overlap_early_attn_memory_release": "attention's memory released early under EP "
                        "overlap (core/models/common/model_chunk_schedule_plan.py:280)",
    "microbatch_group_size_per_vp_stage": "micro-batches in flight per virtual stage "
                                          "(core/pipeline_parallel/schedules.py:932)",
    "decoder_num_layers": "the layer count split into virtual stages without --num-layers "
                          "(training/arguments.py:957-960)",
    "hybrid_context_parallel": "dynamic context parallelism (training/training.py:2968)",
    "max_seqlen_per_dp_cp_rank": "dynamic context-parallel sequence packing "
                                 "(core/datasets/data_schedule.py:88)",
    "sft": "packed variable-length SFT sequences (training/training.py:2967)",
    "dataloader_inter_document_masking": "attention masked between packed documents "
                                         "(training/training.py:2967)",
    "num_distributed_optimizer_instances": "optimizer states sharded within each of several "
                                           "instances (training/initialize.py:391)",
    "torch_fsdp2_reshard_after_forward": "FSDP2 parameters kept gathered after forward "
                                         "(training/training.py:2628)",
    "outer_dp_sharding_strategy": "HSDP's outer data-parallel sharding "
                              "(core/distributed/fsdp/src/megatron_fsdp/mixed_precision.py:403)",
    "suggested_communication_unit_size": "Megatron-FSDP's bucket size "
                              "(core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py:420)",
    "keep_fp8_transpose_cache": "FP8 transpose caches kept by Megatron-FSDP "
                        "(core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py:2931)",
    "fsdp_db_use_persist_buf_on_alloc_fail": "Megatron-FSDP's fallback persistent buffer "
                        "(core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py:723)",
    "megatron_fsdp_enable_fine_grained_param_gather": "Megatron-FSDP's per-module gathers "
                        "(core/distributed/fsdp/mcore_fsdp_adapter.py:224)",
    "reuse_grad_buf_for_mxfp8_param_ag": "the gradient buffer reused for the MXFP8 parameter "
                                         "all-gather (training/training.py:3071)",
    # read by no part of memsym's estimate (its DDP and distributed-optimizer buffers are
    # unbucketed), so noted beside a MODEL and on a whole command alike
    "ddp_bucket_size": "the DDP buckets' size, their padding and the overlap's granularity "
                       "(training/training.py:2639)",
    "ddp_num_buckets": "the DDP bucket size from a bucket count (training/training.py:2638)",
    "ddp_pad_buckets_for_high_nccl_busbw": "padded DDP buckets (training/training.py:2640)",
    "ddp_param_name_patterns_for_fp32_local_accumulation": "fp32 gradients of the parameters "
                                                           "named (training/training.py:2643)",
    "ddp_reduce_scatter_with_fp32_accumulation": "fp32 accumulation in the gradient "
                                                 "reduce-scatter (training/training.py:2641)",
    "use_layer_wise_param_layout": "the layer-wise optimizer's parameter layout "
                                   "(training/training.py:2203)",
    "tensor_parallel_num_weight_shards": "weights sharded beyond TP and rematerialised "
                                         "(core/model_parallel_config.py:12-21)",
    "expert_tensor_parallel_num_weight_shards": "expert weights sharded beyond ETP and "
        "rematerialised (core/model_parallel_config.py:135)",
    "gtp_remat_opt_in_modules": "the modules whose weights are rematerialised "
                                "(core/transformer/moe/moe_layer.py:276)",
    "gtp_remat_nccl_ub": "user buffers for weight rematerialisation (training/training.py:2140)",
    "gtp_expert_remat_nccl_ub": "user buffers for expert weight rematerialisation "
                                "(training/training.py:2140)",
    "gtp_remat_reduce_scatter_with_fp32_accumulation": "fp32 accumulation in the remat "
                                                       "reduce-scatter (training/training.py:2735)",
    "use_mup": "muP's logits scaled, a second logits tensor at the loss "
               "(core/models/common/language_module/language_module.py:339-342)",
    "moe_input_jitter_eps": "a jittered copy of the router's input, kept for its GEMM "
                            "(core/transformer/moe/router.py:721-728)",
    "moe_router_dtype": "the router's logits and probabilities in fp32/fp64 "
                        "(core/transformer/moe/router.py:107)",
    "moe_router_padding_for_fp8": "tokens per expert padded for FP8 "
                                  "(core/transformer/transformer_config.py:776)",
    "moe_router_padding_for_quantization": "tokens per expert padded for quantized GEMMs "
                                           "(core/transformer/moe/moe_utils.py:1500)",
    "moe_pad_expert_input_to_capacity": "expert inputs padded to capacity "
                                        "(core/transformer/moe/router.py:800)",
    "moe_expert_rank_capacity_factor": "a per-rank expert capacity (training/training.py:4440)",
    "moe_dispatch_fwd_dtype": "the token dispatch in a lower precision "
                              "(core/transformer/moe/experts.py:541)",
    "moe_combine_bwd_dtype": "the combine's backward in a lower precision "
                             "(core/transformer/moe/experts.py:649)",
    "moe_paged_stash": "expert activations stashed in pages "
                       "(core/pipeline_parallel/schedules.py:765)",
    "moe_paged_stash_buffer_size_factor_cpu": "the paged stash's host buffer "
                                              "(core/transformer/moe/paged_stash.py:554)",
    "moe_paged_stash_buffer_size_factor_cuda": "the paged stash's device buffer "
                                               "(core/transformer/moe/paged_stash.py:553)",
    "moe_paged_stash_page_size": "the paged stash's page size "
                                 "(core/transformer/moe/paged_stash.py:898)",
    "moe_permute_fusion": "the fused token permutation (core/transformer/moe/moe_utils.py:1489)",
    "moe_permute_fusion_into_hybridep": "the permutation fused into HybridEP "
                                        "(core/transformer/moe/token_dispatcher.py:1163)",
    "moe_router_fusion": "the fused router kernels (core/transformer/moe/router.py:328)",
    "moe_apply_probs_on_input": "routing probabilities applied to the experts' input "
                                "(core/transformer/moe/experts.py:401)",
    "moe_hybridep_pad_uneven_dispatch_inputs": "HybridEP's padded dispatch inputs "
                                               "(core/transformer/moe/token_dispatcher.py:1073)",
    "moe_ncclep_zero_copy": "NCCL-EP's zero-copy buffers (core/models/common/utils.py:255)",
    "mtp_detach_heads": "MTP heads on a detached output weight "
                        "(core/transformer/multi_token_prediction.py:990)",
    "mtp_hsm": "MTP inputs mixed from the earlier depths' hidden states "
               "(core/transformer/multi_token_prediction.py:1889)",
    "use_mamba_mem_eff_path": "Mamba's memory-efficient fused path (core/ssm/mamba_mixer.py:228)",
    "mamba_training_ssm_states_dtype": "the Mamba SSM states' dtype (core/ssm/mamba_mixer.py:229)",
    "fp8_wgrad": "the weight-gradient GEMM outside FP8 (core/fp8_utils.py:775)",
    "fp8_output_proj": "the attention output projection's MXFP8 input (core/fp8_utils.py:733)",
    "fp8_amax_history_len": "the delayed-scaling amax history's length "
                            "(core/extensions/transformer_engine.py:3361)",
    "fp8_quantizer_factory": "a custom FP8 quantizer (core/fp8_utils.py:318)",
    "fp4_quantizer_factory": "a custom FP4 quantizer (core/fp4_utils.py:234)",
    "te_precision_config_file": "per-module precisions from a file "
                                "(training/argument_utils.py:365)",
}

#: Accepted, and they change the step time only, in a way memsym does not model.
TIME_NOT_MODELLED = {
    "align_grad_reduce": "when the gradient reduce of each virtual stage starts "
                         "(training/training.py:4356)",
    "align_param_gather": "when the parameter gather of each virtual stage starts "
                          "(training/training.py:4360)",
    "overlap_param_gather_with_optimizer_step": "the parameter gather overlapped with the "
                                                "optimizer step (training/training.py:2509)",
    "overlap_p2p_comm_warmup_flush": "p2p overlap in the pipeline's warm-up and flush "
                                     "(core/pipeline_parallel/schedules.py:1576)",
    "overlap_dispatch_backward_with_experts_wgrad": "the dispatch backward overlapped with "
        "the experts' wgrad (core/extensions/transformer_engine.py:2426)",
    "overlap_cpu_optimizer_d2h_h2d": "the offloaded optimizer's copies overlapped "
                                     "(core/optimizer/cpu_offloading/hybrid_optimizer.py:35)",
    "pin_cpu_grads": "pinned host gradients (core/optimizer/cpu_offloading/hybrid_optimizer.py:52)",
    "pin_cpu_params": "pinned host parameters "
                      "(core/optimizer/cpu_offloading/hybrid_optimizer.py:53)",
    "use_torch_optimizer_for_cpu_offload": "torch's optimizer on the offloaded states "
                                           "(core/optimizer/__init__.py:515)",
    "cpu_offloading_retain_pinned_cpu_buffers": "pinned host buffers kept between steps "
                                                "(core/transformer/transformer_block.py:313)",
    "moe_shared_expert_overlap": "shared experts overlapped with the dispatch "
                                 "(training/training.py:2756)",
    "high_priority_a2a_comm_stream": "a high-priority all-to-all stream "
                                     "(core/pipeline_parallel/combined_1f1b.py:67)",
    "high_priority_stream_groups": "high-priority NCCL streams (training/initialize.py:399)",
    "create_all_gather_group": "a separate all-gather communicator (training/training.py:2365)",
    "hierarchical_context_parallel_sizes": "hierarchical context-parallel groups "
                                           "(training/initialize.py:388)",
    "use_tp_pp_dp_mapping": "ranks ordered tp-pp-dp, which places the groups on other links "
                            "(training/training.py:1866)",
    "use_ring_exchange_p2p": "ring-exchange p2p (core/pipeline_parallel/p2p_communication.py:231)",
    "pipeline_model_parallel_comm_backend": "the pipeline's communication backend "
                                            "(training/initialize.py:381)",
    "nccl_communicator_config_path": "NCCL options per communicator (training/initialize.py:394)",
    "use_sharp": "SHARP in-network reductions (training/initialize.py:382)",
    "sharp_enabled_group": "the group SHARP runs on (training/initialize.py:400)",
    "symmetric_ar_type": "symmetric-memory all-reduce (core/extensions/transformer_engine.py:1136)",
    "disable_symmetric_registration": "buffers not registered for symmetric collectives "
                                      "(core/distributed/param_and_grad_buffer.py:1140)",
    "gradient_reduce_div_fusion": "the gradient scaling fused into the reduce "
                        "(core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py:4754)",
    "ddp_average_in_collective": "the gradient average taken in the collective "
                                 "(training/training.py:2644)",
    "fsdp_manual_registration": "Megatron-FSDP's buffers registered by hand "
                                "(training/training.py:4789)",
    "tp_comm_bulk_dgrad": "TP overlap's bulk dgrad overlap "
                          "(core/extensions/transformer_engine.py:1459)",
    "tp_comm_bulk_wgrad": "TP overlap's bulk wgrad overlap "
                          "(core/extensions/transformer_engine.py:1458)",
    "tp_comm_overlap_ag": "TP overlap's all-gather overlap "
                          "(core/extensions/transformer_engine.py:1193)",
    "tp_comm_overlap_rs": "TP overlap's reduce-scatter overlap "
                          "(core/extensions/transformer_engine.py:1198)",
    "tp_comm_overlap_rs_dgrad": "TP overlap's reduce-scatter of dgrad "
                                "(core/extensions/transformer_engine.py:1469)",
    "tp_comm_split_ag": "TP overlap's split all-gather "
                        "(core/extensions/transformer_engine.py:1195)",
    "tp_comm_split_rs": "TP overlap's split reduce-scatter "
                        "(core/extensions/transformer_engine.py:1200)",
    "moe_hybridep_num_blocks_permute": "HybridEP's permute blocks "
                                       "(core/transformer/moe/token_dispatcher.py:1159)",
    "moe_hybridep_num_blocks_unpermute": "HybridEP's unpermute blocks "
                                         "(core/transformer/moe/token_dispatcher.py:1160)",
    "moe_hybridep_num_sms_preprocessing": "HybridEP's preprocessing SMs "
                                          "(core/transformer/moe/token_dispatcher.py:1164)",
    "moe_hybridep_num_sms": "the dispatcher's SMs (deprecated for --moe-flex-dispatcher-num-sms, "
                            "core/transformer/transformer_config.py:1792-1797)",
    "moe_deepep_num_sms": "the dispatcher's SMs (deprecated for --moe-flex-dispatcher-num-sms, "
                          "core/transformer/transformer_config.py:1792-1797)",
    "moe_use_grouped_tensor": "grouped tensors in the experts' GEMMs "
                              "(core/extensions/transformer_engine.py:2497)",
    # node-limited routing (DeepSeek-V3's): fewer groups a token reaches, so a different
    # all-to-all traffic than memsym's balanced routing over all expert ranks
    "moe_router_num_groups": "group-limited routing (core/transformer/moe/router.py:783)",
    "moe_router_group_topk": "group-limited routing (core/transformer/moe/router.py:784)",
    "moe_router_force_biased": "routing skewed towards some experts "
                               "(core/transformer/moe/router.py:865)",
    "use_grouped_gemm_for_dense_mlp": "a grouped GEMM for the dense MLP "
                                      "(training/models/gpt.py:121)",
    "use_grouped_gemm_for_shared_expert": "a grouped GEMM for the shared experts "
                                          "(core/models/gpt/moe_module_specs.py:32)",
    # under --swiglu the fusion is bias_swiglu_fusion's and under --quick-geglu memsym reads
    # it (memsym.readers.megatron): this is a non-gated GELU MLP's, whose fused and eager
    # paths keep the same f-wide tensor (mlp.py: bias_gelu_impl saves fc1's output, the eager
    # gelu the biased one) but run one elementwise pass more
    "bias_gelu_fusion": "the bias add and GELU of a non-gated MLP run apart "
                        "(training/argument_utils.py:319)",
    "no_persist_layer_norm": "the non-persistent LayerNorm kernel "
                             "(training/argument_utils.py:304)",
    "openai_gelu": "the tanh-approximated GELU (core/transformer/utils.py:66)",
    "window_size": "sliding-window attention's FLOPs (core/extensions/transformer_engine.py:2164)",
    "window_attn_skip_freq": "which layers run sliding-window attention "
                             "(core/extensions/transformer_engine.py:2164)",
    "flash_attention_version": "the flash-attention version "
                               "(core/models/common/language_module/language_module.py:154)",
    "deterministic_mode": "deterministic kernels (core/extensions/transformer_engine.py:2155)",
    "batch_invariant_mode": "batch-invariant kernels (training/initialize.py:102)",
    "batch_invariant_backend": "the batch-invariant kernels' backend "
                               "(training/initialize.py:102)",
    "disable_bf16_reduced_precision_matmul": "bf16 GEMMs without reduced-precision "
        "reductions (core/transformer/transformer_config.py:1443)",
    "fp8_amax_compute_algo": "how the delayed-scaling amax is taken "
                             "(core/extensions/transformer_engine.py:3360)",
    "muon_fp32_matmul_prec": "the Newton-Schulz step's fp32 matmul precision "
                             "(core/optimizer/optimizer_config.py:272)",
    "muon_use_syrk": "the Newton-Schulz step's SYRK kernel "
                     "(core/optimizer/optimizer_config.py:288)",
    "qk_clip": "QK-clip's max-logit pass and weight rescale (training/training.py:3174)",
    "qk_clip_alpha": "QK-clip's rescale of the query and key weights "
                     "(core/transformer/attention.py:2061-2062)",
    "qk_clip_threshold": "the logit QK-clip rescales above (core/transformer/attention.py:2000)",
    "log_max_attention_logit": "attention's max logit taken each step "
                               "(training/training.py:3174)",
    "manual_gc": "Python's garbage collection at fixed steps (training/training.py:4030)",
    "manual_gc_eval": "Python's garbage collection around evaluation "
                      "(training/training.py:4923)",
    "manual_gc_interval": "Python's garbage collection at fixed steps "
                          "(training/training.py:4030)",
    "test_mode": "Megatron's own checks run in each attention forward "
                 "(core/transformer/attention.py:1938)",
    "log_num_zeros_in_grad": "a count of the zero gradients each step "
                             "(core/optimizer/optimizer.py:840)",
    "log_params_norm": "the parameters' norm, a blocking all-reduce each step "
                       "(training/training.py:4874)",
    "check_for_large_grads": "a check of the gradients each step "
                             "(core/distributed/param_and_grad_buffer.py:655)",
    "timing_log_level": "timers of that level, each a CUDA synchronize "
                        "(training/global_vars.py:332)",
    "barrier_with_L1_time": "no barrier in the level-1 timers (training/training.py:3159)",
    "no_rope_freq": "layers without RoPE (core/transformer/attention.py:1322)",
    # under --position-embedding-type yarn: a concentration other than 1 sends RoPE to the
    # unfused kernel (rope_utils.py:351-356; memsym.timing.rope)
    "rotary_scaling_factor": "YaRN's scaling factor, which decides the RoPE kernel "
                             "(training/argument_utils.py:407)",
    "mscale": "YaRN's mscale, which decides the RoPE kernel (training/argument_utils.py:411)",
    "mscale_all_dim": "YaRN's mscale_all_dim, which decides the RoPE kernel "
                      "(training/argument_utils.py:412)",
    "record_memory_history": "the allocator's history recorded, a stack trace per allocation "
                             "(training/utils/utils.py:27-33)",
    "fake_process_group": "a fake process group, so no collective runs "
                          "(training/initialize.py:349)",
}

#: Accepted, but they change the model's structure in ways memsym's Architecture cannot express:
#: refused rather than silently dropped (the count would be wrong).
STRUCTURE_NOT_MODELLED = {
    "heterogeneous_layers_config_path": "heterogeneous per-layer configurations",
    # training/arguments.py:190-201: the same configuration given as a JSON string
    "heterogeneous_layers_config_encoded_json": "heterogeneous per-layer configurations",
    "experimental_attention_variant": "gated-delta-net / DSA attention variants",
    # ModelOpt's options (pretrain_gpt.py:83-90, :525-526): these two switch on its model
    # builder (model_provider.py:55-57; post_training/utils.py:19-30), a distillation teacher
    "modelopt_enabled": "ModelOpt's model builder",
    "export_kd_teacher_load": "a ModelOpt distillation teacher beside the model",
    # core/transformer/transformer_block.py:327-329: n residual streams mixed per layer
    "enable_mhc_connections": "hyper-connection residual streams",
    # training/training.py:1314 (gpt_builders.py): the layer spec imported from a module
    "spec": "a layer spec imported from a module",
    # training/argument_utils.py:446: every argument replaced by a YAML file's
    "yaml_cfg": "arguments read from a YAML file",
    # core/pipeline_parallel/p2p_communication.py:327: the MTP layers on a stage of their own
    "mtp_standalone": "MTP layers on a pipeline stage of their own",
}

#: Accepted, but one value of theirs changes memory or time in a way memsym does not model
#: (said in the notes, not listed as without effect): (value, what it does).
VALUE_NOT_MODELLED = {
    # Emerging-Optimizers scalar_optimizers/base.py:171 (fd77292): Lion keeps exp_avg only,
    # where memsym counts --muon-scalar-optimizer adam's two moments
    "muon_scalar_optimizer": ("lion", "Lion as Muon's scalar optimizer (one moment; memsym "
                                      "counts Adam's two)"),
    # emerging_optimizers.py:407-437 at d98e8a64dd: linear_qkv orthogonalized whole
    "muon_split_qkv": (False, "one unsplit QKV matrix in Muon's Newton-Schulz step (memsym "
                              "times Q, K and V apart)"),
    # core/optimizer/optimizer.py:830: no clip, no gradient norm (memsym's step reads the
    # gradients once for it, memsym.timing.data_parallel.OPTIMIZER_BYTES)
    "clip_grad": ("0", "no gradient clipping, so no gradient-norm pass (memsym times one)"),
    # core/optimizer/__init__.py:532: torch.optim.SGD keeps no momentum buffer at momentum 0
    "sgd_momentum": ("0", "SGD without momentum (no momentum buffer; memsym counts one)"),
}

#: Megatron's ``validate_args`` stops on these (training/arguments.py:590-605): refused as it
#: refuses them, with its way through.
MEGATRON_REFUSES = {
    "batch_size": "--batch-size is no longer valid in Megatron-LM: use --micro-batch-size",
    "warmup": "--warmup is no longer valid in Megatron-LM: use --lr-warmup-fraction",
    "model_parallel_size": "--model-parallel-size is no longer valid in Megatron-LM: use "
                           "--tensor-model-parallel-size",
    "checkpoint_activations": "--checkpoint-activations is no longer valid in Megatron-LM: use "
                              "--recompute-activations or --recompute-granularity",
}

#: A noted option's value that is Megatron's default, which then changes nothing (the defaults
#: of ``training/arguments.py`` at d98e8a64dd, as its parser holds them); a switch given always
#: stores its non-default constant.
INERT = {
    "qk_clip_alpha": "0.5", "qk_clip_threshold": "100",
    "fp8_amax_history_len": "1", "fp8_amax_compute_algo": "most_recent",
    "moe_hybridep_num_sms_preprocessing": "108", "moe_dispatch_fwd_dtype": "bf16",
    "moe_combine_bwd_dtype": "bf16", "batch_invariant_backend": "te_native",
    "mlp_chunks_for_training": "1", "min_offloaded_tensor_size": "1048576",
    "delta_offload_bytes_across_pp_ranks": "0", "activation_offload_fraction": "1.0",
    "moe_paged_stash_page_size": "64", "moe_paged_stash_buffer_size_factor_cuda": "1.1",
    "moe_paged_stash_buffer_size_factor_cpu": "0.0", "muon_fp32_matmul_prec": "medium",
    "empty_unused_memory_level": "0", "manual_gc_interval": "0",
    "optimizer_offload_fraction": "1.0", "outer_dp_sharding_strategy": "no_shard",
    "num_distributed_optimizer_instances": "1", "timing_log_level": "0",
    "rotary_scaling_factor": "1.0", "mscale": "1.0", "mscale_all_dim": "0.0",
}


def same_value(given, value) -> bool:
    """Whether the word ``given`` is ``value`` (numbers compared as numbers: "1" is "1.0").

    >>> same_value("1", "1.0"), same_value("0.", 0), same_value("bf16", "bf16")
    (True, True, True)
    >>> same_value("x", "1")
    False
    """
    if given == value:
        return True
    try:
        return float(given) == float(value)
    except (TypeError, ValueError):
        return False


_REASON = {dest: reason for reason, dests in NO_EFFECT.items() for dest in dests}


def no_effect_reason(dest: str):
    """Why ``dest`` has no effect on a training step (its :data:`NO_EFFECT` group), or None.

    >>> no_effect_reason("lr")
    'learning-rate, weight-decay and loss-scale schedules, optimizer coefficients'
    >>> no_effect_reason("fp32_residual_connection") is None   # read (MODELLED)
    True
    """
    return _REASON.get(dest)
