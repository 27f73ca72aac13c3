"""The switches of ``memsym``'s job commands: Megatron's and torchtitan's plain store_true /
store_false flags, one row each, as :mod:`memsym.cli.option_rows` lists them (split from it to
keep each module readable; the rows' schema: :class:`memsym.cli.option_schema.Option`).
"""

from __future__ import annotations

__all__ = ["SWITCH_ROWS"]

# (flag, the job option it sets, the value it sets, help): Megatron's and torchtitan's
# switches that are plain store_true flags here as in the framework.
SWITCH_ROWS = (
    ("--compiled-loss", "compiled_loss", True, "the loss runs under torch.compile (torchtitan's "
     "compile.enable with 'loss' in components): 16-bit logits kept, no fp32 copy", "memory"),
    ("--chunked-loss", "chunked_loss", True, "TRL's chunked cross-entropy (SFTConfig's default "
     "loss_type chunked_nll, on the Trainer's plain DDP): no logits kept, the output layer's "
     "matmul and the loss run in checkpointed chunks of 256 positions", "memory"),
    ("--compiled-model", "compiled_model", True, "each block runs under torch.compile "
     "(torchtitan's 'model' in compile.components): per-op SAC keeps only what the backward "
     "reads, no w2 output", "memory"),
    ("--sac-recomputes-attention", "sac_saves_attention", False, "per-op SAC recomputes the "
     "SDPA output (torchtitan before b39377f9f on compute capability 10: cuDNN attention, not "
     "on its _save_list)", "memory"),
    ("--disable-loss-parallel", "loss_parallel", False, "torchtitan's flag (--framework "
     "torchtitan, --tp > 1): the logits are gathered and the loss is eager F.cross_entropy, not "
     "torch's loss_parallel", "memory"),
    ("--overlap-grad-reduce", "overlap_grad_reduce", True, "Megatron's flag: the data-parallel "
     "gradient reduce-scatter runs in buckets during the backward (off unless given, as in "
     "Megatron)", "time"),
    ("--overlap-param-gather", "overlap_param_gather", True, "Megatron's flag (needs "
     "--overlap-grad-reduce and the distributed optimizer): the parameter all-gather runs "
     "during the next forward", "time"),
    ("--tp-comm-overlap", "tp_comm_overlap", True, "Megatron's flag (needs --sequence-parallel): "
     "Transformer Engine pipelines the TP all-gather / reduce-scatter with the GEMMs", "time"),
    ("--overlap-moe-expert-parallel-comm", "overlap_moe_expert_parallel_comm", True,
     "Megatron's flag (EP > 1, interleaving where PP > 1, no full recompute): the EP "
     "all-to-all hides behind another micro-batch's compute", "memory, time"),
    ("--no-overlap-p2p-communication", "overlap_p2p_comm", False, "Megatron's flag: the "
     "interleaved schedule's p2p sends are exposed (and interleaving needs PP > 2)", "time"),
    ("--use-precision-aware-optimizer", "precision_aware", True, "Megatron's flag (distributed "
     "optimizer, Adam): Transformer Engine's FusedAdam keeps the master weights and moments in "
     "the dtypes --main-params-dtype, --exp-avg-dtype, --exp-avg-sq-dtype", "memory"),
    ("--defer-embedding-wgrad-compute", "defer_embedding_wgrad_compute", True, "Megatron's "
     "flag (PP > 1): the output layer's weight gradients wait for the pipeline flush, and the "
     "last stage keeps each micro-batch's output-layer input and logits gradient until then",
     "memory, time"),
    ("--muon-nesterov", "muon_nesterov", True, "Megatron's flag (--optimizer muon; off "
     "unless given, arguments.py:2633): Nesterov momentum, one more element-wise pass per Muon "
     "parameter in the optimizer step and one more fp32 copy of the matrix it orthogonalizes",
     "memory, time"),
    ("--mla-down-proj-fusion", "mla_down_proj_fusion", True, "Megatron's flag (needs "
     "--multi-latent-attention; arguments.py:3566-3572): MLA's input norm fused into the q/kv "
     "down-projection, not rerun by --recompute-modules layernorm in the step time", "time"),
    ("--fp32-residual-connection", "fp32_residual_connection", True, "Megatron's flag (needs "
     "--bf16 or --fp16; arguments.py:1374-1376): the residual stream and the pipeline's p2p "
     "tensors in fp32; each stage input received is kept in fp32 beside the first layer's "
     "16-bit copy, and a full-recompute checkpoint's input is fp32", "memory"),
    ("--no-bias-swiglu-fusion", "bias_activation_fusion", False, "Megatron's flag (fused "
     "unless given; arguments.py:2896-2898, argument_utils.py:314-317): the SwiGLU runs "
     "eagerly and keeps silu(gate) and the up product, two more f/t-wide 16-bit tensors per "
     "dense layer (three per expert copy); ignored without a SwiGLU (GPT-OSS's quick-GeGLU "
     "reads --no-bias-gelu-fusion, argument_utils.py:318-319)", "memory"),
    ("--optimizer-cuda-graph", "optimizer_cuda_graph", True, "Megatron's flag: the optimizer "
     "step captured in a CUDA graph, whose pool keeps what the step allocates (the fp32 "
     "main-gradient shard under --grad-reduce-in-bf16) reserved through forward and backward",
     "memory"),
    ("--first-iteration", "first_iteration", True, "the first iteration's peak (Megatron-core's "
     "Adam, no checkpoint loaded): its forward and backward run before the first step makes the "
     "moments, as a memory log printed once after it reads", "memory"),
    ("--torch-ddp-buckets", "torch_ddp_buckets", True, "torch DistributedDataParallel's "
     "reducer with gradient_as_bucket_view False (torch's and the Hugging Face Trainer's "
     "default): its flat buckets keep a second copy of every gradient; torch.optim.AdamW "
     "keeps its moments in the parameters' dtype, no master copy (--framework deepspeed "
     "--sharding ddp --precision fp32, bf16 or fp16, the weights' dtype: a Trainer launch "
     "without --deepspeed)", "memory"),
    ("--fsdp-keep-gathered", "fsdp_keep_gathered", True, "FSDP2's reshard_after_forward=False "
     "on every group (with --accelerate-fsdp: the Trainer's --fsdp shard_grad_op, or "
     "fsdp_config reshard_after_forward false): every parameter stays all-gathered from its "
     "forward to its backward", "memory, time"),
)
