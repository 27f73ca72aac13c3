"""The framework rules on a job's parallel layout, its sequence and its batch.

:data:`LAYOUT_RULES` check the layout against the architecture and the pipeline schedule: the
world size, tensor parallelism dividing the heads and every FFN, the pipeline stages (even,
uneven, virtual), the micro-batches an interleaved schedule and torch's pipelining need, GPipe
and the V placement.  :data:`SEQUENCE_RULES` check the sequence (its split over t and c, its
length) and the global batch.  Both join :data:`memsym.rules.RULES`, which keeps the table's
order.
"""

from __future__ import annotations

from .errors import InvalidValueError
from .model.layer_patterns import is_hybrid, layer_kinds
from .rule import MLM_CONFIG_POST_INIT, MLM_VALIDATE_ARGS, Rule, negate
from .term import Source

__all__ = ["LAYOUT_RULES", "SEQUENCE_RULES"]


def _ffn_sizes(x) -> tuple:
    """(size, which) of every FFN a tensor-parallel split divides: the dense layers' ffn, the
    shared experts' ffn (split over t), the routed experts' ffn (split over t_e)."""
    kinds = layer_kinds(x)    # cached: asked once per pipeline stage
    out = []
    if False in kinds:
        out.append((x.ffn_hidden_size, "t", "ffn size (ffn_hidden_size"))
    if True in kinds:
        if x.moe_shared_expert_intermediate_size:
            out.append((x.moe_shared_expert_intermediate_size, "t",
                        "shared-expert ffn size (moe_shared_expert_intermediate_size"))
        out.append((x.moe_ffn_hidden_size, "t_e", "expert ffn size (moe_ffn_hidden_size"))
    return tuple(out)


def _tp_ffn(x, k):
    bad = False
    for size, which, _ in _ffn_sizes(x):
        bad = bad | (size % k[which] != 0)
    return bad


def _tp_ffn_msg(x, k):
    for size, which, what in _ffn_sizes(x):
        if size % k[which]:
            name = "tensor-parallel size t" if which == "t" else "expert tensor-parallel size t_e"
            return f"{name}={k[which]} must divide the {what}={size})"
    return ""


def _stage_sizes(x, k):
    """(layers per middle stage, whether the split is impossible) for even or uneven stages."""
    import numpy as np

    L_, p_ = x.num_layers, k["p"]
    fst, lst = k.get("first_stage_layers"), k.get("last_stage_layers")
    if fst is None and lst is None:
        return L_ // p_, L_ % p_ != 0
    rest = L_ - (fst or 0) - (lst or 0)
    middle = p_ - (fst is not None) - (lst is not None)
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(middle > 0, rest // np.maximum(middle, 1), 0)
        bad = np.where(middle > 0, rest % np.maximum(middle, 1) != 0, rest != 0)
    return per, bad | (p_ == 1) | (rest < 0)


def _pp_msg(x, k):
    fst, lst = k.get("first_stage_layers"), k.get("last_stage_layers")
    if fst is None and lst is None:
        return (f"pipeline-parallel size p={k['p']} must divide the layers "
                f"(num_layers={x.num_layers}) unless first/last stage sizes are given")
    if k["p"] == 1:
        return "first/last pipeline stage sizes need p > 1"
    rest = x.num_layers - (fst or 0) - (lst or 0)
    if rest < 0:
        return f"first/last stage sizes exceed num_layers={x.num_layers}"
    middle = k["p"] - (fst is not None) - (lst is not None)
    if middle == 0:
        return (f"first and last stages hold {x.num_layers - rest} layers, not "
                f"num_layers={x.num_layers}")
    return f"the {middle} remaining pipeline stages must split the remaining {rest} layers evenly"


def _vpp_layers(x, k):
    if k.get("torchtitan", False) or k.get("pipeline_layout"):
        return False     # torchtitan's stages and a custom layout split the layers themselves
    v_ = k["v"]
    per, _ = _stage_sizes(x, k)
    bad = per % v_ != 0
    for end in ("first_stage_layers", "last_stage_layers"):
        if k.get(end) is not None:
            bad = bad | (k[end] % v_ != 0)
    return (v_ > 1) & bad


def _vpp_layers_msg(x, k):
    fst, lst = k.get("first_stage_layers"), k.get("last_stage_layers")
    if fst is None and lst is None:
        return (f"virtual pipeline size v={k['v']} must divide the layers per pipeline stage "
                f"({x.num_layers // k['p']})")
    per, _ = _stage_sizes(x, k)
    sizes = [fst if fst is not None else int(per)] + [int(per)] * max(0, k["p"] - 2) \
        + [lst if lst is not None else int(per)]
    stage = next(i for i, n in enumerate(sizes) if n % k["v"])
    return (f"virtual pipeline size v={k['v']} must divide the layers of every pipeline stage "
            f"(stage {stage} has {sizes[stage]})")


def _group(k):
    """Megatron's microbatch_group_size_per_vp_stage (default: the pipeline size)."""
    return k["p"] if k.get("microbatch_group_size") is None else k["microbatch_group_size"]


def _vpp_microbatches(x, k):
    m_ = k.get("m")
    if m_ is None or k.get("torchtitan", False):   # torch.distributed.pipelining: no such rule
        return False
    n_ = _group(k)
    rem = m_ % n_
    return (k["v"] > 1) & ((n_ < k["p"]) | (n_ > m_) | ((rem != 0) & (rem < k["p"])))


def _vpp_microbatches_msg(x, k):
    n_, m_ = _group(k), k["m"]
    return (f"the interleaved schedule needs p <= N <= m and m mod N = 0 or >= p (N = "
            f"microbatch group size {n_}, p = {k['p']}, m = {m_} micro-batches); give a global "
            f"batch with m a multiple of p")


def _torch_pp_microbatches(x, k):
    # torch.distributed.pipelining (torchtitan): Schedule1F1B needs m >= p; the interleaved
    # schedules run max(1, m // p) rounds and need m a multiple of them; GPipe has no rule
    m_ = k.get("m")
    if m_ is None or not k.get("torchtitan", False):
        return False
    p_, v_ = k["p"], k["v"]
    q = m_ // p_
    rounds = q + (q == 0)              # max(1, m // p), for ints and numpy arrays alike
    gpipe = k.get("gpipe", False)      # GPipe and LoopedBFS: no micro-batch rule
    single = (v_ == 1) & (p_ > 1) & (m_ < p_) & negate(gpipe)
    return single | ((v_ > 1) & (m_ % rounds != 0) & negate(gpipe))


def _torch_pp_microbatches_msg(x, k):
    p_, m_ = k["p"], k["m"]
    if k["v"] == 1:
        return (f"torch's Schedule1F1B needs at least as many micro-batches as stages "
                f"(m = {m_} < p = {p_}); give a larger global batch or a smaller p")
    rounds = max(1, m_ // p_)
    return (f"torch's ScheduleInterleaved1F1B needs m a multiple of its rounds max(1, m // p) "
            f"= {rounds} (m = {m_}, p = {p_})")


def _mixed_layers(x) -> bool:
    # dense and MoE layers in one model: which a V-placed rank holds depends on where its two
    # stages sit, which memsym's contiguous stage ranges do not follow
    return len(layer_kinds(x)) > 1 or is_hybrid(x)


#: The rules on the parallel layout and the pipeline schedule, in the order the table checks
#: them.
LAYOUT_RULES = (
    Rule("world-size", "t*p*c*d must equal the number of GPUs",
         lambda x, k: (k["t"] * k["p"] * k["c"] * k["d"] != k["gpus"]) if k.get("gpus") else False,
         lambda x, k: (f"world size {k['gpus']} != t*p*c*d = {k['t']}*{k['p']}*{k['c']}*{k['d']}"
                       f" = {k['t'] * k['p'] * k['c'] * k['d']}"),
         Source("megatron-lm", "megatron/core/parallel_state.py, initialize_model_parallel"),
         InvalidValueError),
    Rule("tp-per-node", "t must not exceed the GPUs per node (TP's all-reduces stay on NVLink)",
         lambda x, k: (k["t"] > k["gpus_per_node"]) if k.get("gpus_per_node") else False,
         lambda x, k: f"t={k['t']} exceeds the {k['gpus_per_node']} GPUs of a node",
         Source("narayanan", "§3.2, Takeaway #1 (tensor model parallelism up to degree g "
                             "on g-GPU servers)"), InvalidValueError, "preference"),
    Rule("tp-heads", "t must divide the attention heads",
         lambda x, k: x.num_attention_heads % k["t"] != 0,
         lambda x, k: (f"tensor-parallel size t={k['t']} must divide the attention heads "
                       f"(num_attention_heads={x.num_attention_heads})"),
         Source("megatron-lm", MLM_VALIDATE_ARGS
                + " (num_attention_heads % tensor_model_parallel_size)")),
    Rule("tp-kv-heads", "t must divide the KV heads (query groups)",
         lambda x, k: False if x.multi_latent_attention else (x.num_query_groups % k["t"] != 0),
         lambda x, k: (f"tensor-parallel size t={k['t']} must divide the KV heads "
                       f"(num_query_groups={x.num_query_groups})"),
         Source("megatron-lm", MLM_VALIDATE_ARGS
                + " (num_query_groups % tensor_model_parallel_size)")),
    Rule("tp-global-kv-heads", "t must divide the global attention layers' KV heads",
         lambda x, k: False if not x.global_num_query_groups
         else (x.global_num_query_groups % k["t"] != 0),
         lambda x, k: (f"tensor-parallel size t={k['t']} must divide the global attention "
                       f"layers' KV heads (num_global_key_value_heads="
                       f"{x.global_num_query_groups})"),
         Source("megatron-lm", MLM_VALIDATE_ARGS
                + " (num_query_groups % tensor_model_parallel_size; the global layers' KV heads "
                "split alike, derived)")),
    # DeepSpeed Ulysses (sequence_parallel_size = c): UlyssesSPAttentionHF's own refusals and
    # what memsym does not model of it (memsym.readers.deepspeed_ulysses)
    Rule("ulysses-heads", "DeepSpeed Ulysses: c must divide the attention heads, and the KV "
         "heads must divide by c or c by them",
         lambda x, k: (k.get("deepspeed", False) & (k["c"] > 1)
                       & ((x.num_attention_heads % k["c"] != 0)
                          | ((x.num_query_groups % k["c"] != 0)
                             & (k["c"] % x.num_query_groups != 0)))),
         lambda x, k: (f"DeepSpeed Ulysses sequence_parallel_size c={k['c']} must divide the "
                       f"attention heads (num_attention_heads={x.num_attention_heads}) and the "
                       f"KV heads (num_key_value_heads={x.num_query_groups}) or be a multiple of "
                       "them (UlyssesSPAttentionHF refuses it)"),
         Source("deepspeed-ulysses", "ulysses_sp.py:145-150, UlyssesSPAttentionHF.__init__")),
    Rule("ulysses-kv-replication", "DeepSpeed Ulysses with c above the KV heads replicates "
         "them (not modelled)",
         lambda x, k: k.get("deepspeed", False) & (k["c"] > x.num_query_groups),
         lambda x, k: (f"DeepSpeed Ulysses sequence_parallel_size c={k['c']} above the KV heads "
                       f"({x.num_query_groups}): Ulysses replicates each KV head "
                       f"c/{x.num_query_groups} times before its all-to-all, which memsym does "
                       "not model"),
         Source("deepspeed-ulysses", "ulysses_sp.py:131-136, :182-184 (kv_replication_factor, "
                "repeat_interleave)"), InvalidValueError),
    Rule("ulysses-eager", "DeepSpeed Ulysses refuses eager attention (c > 1 needs flash)",
         lambda x, k: (k.get("deepspeed", False) & (k["c"] > 1)
                       & negate(k.get("flash_attention", True))),
         lambda x, k: (f"DeepSpeed Ulysses (c={k['c']}) refuses eager attention (its 4D mask "
                       "of s^2 elements): drop --no-flash-attn"),
         Source("deepspeed-ulysses", "ulysses_sp.py, register_with_transformers "
                "(unsupported_attn_implementation eager, :461-468)"), InvalidValueError),
    Rule("ulysses-autotp", "DeepSpeed Ulysses beside AutoTP (c > 1 with t > 1) is not modelled",
         lambda x, k: k.get("deepspeed", False) & (k["c"] > 1) & (k["t"] > 1),
         lambda x, k: (f"DeepSpeed Ulysses (c={k['c']}) beside AutoTP (t={k['t']}) is not "
                       "modelled by memsym: Ulysses' mpu and AutoTP's (data, tensor) mesh are "
                       "set up apart; drop one of them"),
         Source("deepspeed-ulysses", "parallel_state_sp.py, initialize_sequence_parallel "
                "(data and sequence groups only)"), InvalidValueError),
    Rule("tp-ffn", "t must divide every ffn size (t_e the routed experts')", _tp_ffn, _tp_ffn_msg,
         Source("megatron-lm", "megatron/core/tensor_parallel/layers.py, ColumnParallelLinear "
                               "(divide(output_size, world_size))")),
    Rule("pp-layers", "p must divide the layers (or the rest after the given first/last stages)",
         lambda x, k: False if k.get("pipeline_layout") else _stage_sizes(x, k)[1], _pp_msg,
         Source("megatron-lm", MLM_CONFIG_POST_INIT
                + " (num_layers % pipeline_model_parallel_size)")),
    Rule("vpp-stages", "virtual stages v > 1 need p > 1",
         lambda x, k: (k["v"] > 1) & (k["p"] == 1),
         lambda x, k: "virtual pipeline stages (v > 1) need p > 1",
         Source("megatron-lm", MLM_VALIDATE_ARGS + " (interleaved schedule only with PP > 1)"),
         InvalidValueError),
    Rule("vpp-layers", "v must divide the layers of every pipeline stage (Megatron-Core)",
         _vpp_layers, _vpp_layers_msg,
         Source("megatron-lm", MLM_CONFIG_POST_INIT
                + " (layers per stage divisible by the virtual size)")),
    Rule("vpp-microbatches", "interleaving needs p <= N <= m and m mod N in {0} or >= p "
         "(N = microbatch group size, default p)", _vpp_microbatches, _vpp_microbatches_msg,
         Source("megatron-lm", "megatron/core/pipeline_parallel/schedules.py, "
                               "forward_backward_pipelining_with_interleaving")),
    Rule("gpipe-chunks", "GPipe runs one stage per rank (v = 1); v stages per rank "
         "breadth-first is torch's ScheduleLoopedBFS (torchtitan)",
         lambda x, k: (k["v"] > 1) & k.get("gpipe", False) & negate(k.get("torchtitan", False)),
         lambda x, k: (f"GPipe runs one stage per rank, got v={k['v']}; looping v stages per "
                       f"rank breadth-first is torch's ScheduleLoopedBFS "
                       f"(framework=\"torchtitan\", pipeline_parallel_schedule = \"LoopedBFS\")"),
         Source("gpipe", "§2.2 (one partition per accelerator); torch/distributed/pipelining/"
                "schedules.py, ScheduleGPipe (a single stage) and ScheduleLoopedBFS"),
         InvalidValueError),
    Rule("v-placement", "the V placement (stages r and 2p - 1 - r on rank r) is torch's "
         "ZBVZeroBubble / DualPipeV: torchtitan, p > 1, 2 stages per rank, 1F1B",
         lambda x, k: k.get("v_placement", False) & (
             (k["v"] != 2) | (k["p"] < 2) | k.get("gpipe", False)
             | negate(k.get("torchtitan", False)) | _mixed_layers(x)),
         lambda x, k: (f"the V stage placement runs 2 stages per rank on a pipeline (torch's "
                       f"ZBVZeroBubble / DualPipeV under torchtitan, schedule 1f1b), got p="
                       f"{k['p']}, v={k['v']}" + (", GPipe" if k.get("gpipe") else "")
                       + ("" if k.get("torchtitan") else ", framework not torchtitan")
                       + ("; memsym places V stages only for models whose layers are all "
                          "alike (this one mixes dense and MoE layers)" if _mixed_layers(x)
                          else "")),
         Source("pytorch-pipelining", "torch/distributed/pipelining/schedules.py, "
                "ScheduleZBVZeroBubble / ScheduleDualPipeV (stage_index_to_group_rank: 'v' "
                "style, 2 stages per rank); torchtitan distributed/pipeline_parallel.py"),
         InvalidValueError),
    Rule("torch-pp-microbatches", "torch.distributed.pipelining (torchtitan): 1F1B needs "
         "m >= p, the interleaved schedules m a multiple of max(1, m // p)",
         _torch_pp_microbatches, _torch_pp_microbatches_msg,
         Source("pytorch-pipelining", "torch/distributed/pipelining/schedules.py, "
                "Schedule1F1B.__init__ (n_microbatches >= number of stages) and "
                "ScheduleInterleaved1F1B.__init__ (n_microbatches % number_of_rounds)")),
    Rule("bf16-layers-stage", "under FP8 the BF16 first / last layers are at most the layers "
         "per pipeline stage, floor(L/p) each",
         lambda x, k: (k.get("precision") == "fp8")
         & (max(k.get("bf16_layers", (0, 0))) > x.num_layers // k["p"]),
         lambda x, k: (f"num_layers_at_{'start' if k['bf16_layers'][0] > x.num_layers // k['p'] else 'end'}"
                       f"_in_bf16 ({max(k['bf16_layers'])}) must be between 0 and number of "
                       f"layers per pipeline stage ({x.num_layers // k['p']})"),
         Source("megatron-lm", MLM_CONFIG_POST_INIT + " (transformer_config.py:1538-1557 at "
                "d98e8a64dd: num_layers_at_start_in_bf16 / _end_ against num_layers // "
                "pipeline_model_parallel_size under fp8)"),
         InvalidValueError),
)

#: The rules on the sequence and the batch, in the order the table checks them.
SEQUENCE_RULES = (
    Rule("torchtitan-tp-sp", "torchtitan's tensor parallelism is sequence parallel (t > 1 "
         "needs sequence parallelism)",
         lambda x, k: ((k["t"] > 1) & negate(k["sequence_parallel"])
                       & k.get("tp_sequence_parallel", k.get("torchtitan", False))),
         lambda x, k: ("torchtitan's tensor parallelism always shards the norms and the block "
                       "outputs over the sequence: t > 1 needs sequence parallelism"),
         Source("torchtitan", "models/llama3/infra/parallelize.py, apply_tp (SequenceParallel "
                "norms, RowwiseParallel output_layouts=Shard(1))"), InvalidValueError),
    Rule("cp-seq", "2c must divide the sequence length (Megatron splits it into 2c chunks for "
         "causal load balancing; DeepSpeed Ulysses into c)",
         lambda x, k: (k["c"] != 1) & (k["s"] % ((1 if k.get("deepspeed", False) else 2)
                                                * k["c"]) != 0),
         lambda x, k: (f"DeepSpeed Ulysses sequence_parallel_size c={k['c']} must divide the "
                       f"sequence length s={k['s']} (UlyssesSPDataLoaderAdapter, ulysses_sp.py:"
                       "697-698)" if k.get("deepspeed", False) else
                       f"context parallelism c={k['c']} needs 2c to divide the sequence length "
                       f"s={k['s']} (Megatron cuts it into 2c chunks)"),
         Source("megatron-lm", "megatron/training/utils.py, get_batch_on_this_cp_rank")),
    # a transformers model under DeepSpeed computes RoPE's angles for any position
    # (LlamaRotaryEmbedding.forward: inv_freq x position_ids): only a learned table bounds s
    Rule("seq-positions", "the sequence must not exceed max_position_embeddings",
         lambda x, k: ((k["s"] > x.max_position_embeddings)
                       and not (k.get("deepspeed", False)
                                and x.position_embedding_type == "rope"))
         if x.max_position_embeddings else False,
         lambda x, k: (f"sequence length s={k['s']} exceeds max_position_embeddings="
                       f"{x.max_position_embeddings} of {x.name} (Megatron-LM asserts "
                       f"max_position_embeddings >= seq_length)"),
         Source("megatron-lm", MLM_VALIDATE_ARGS + " (max_position_embeddings >= seq_length)"),
         InvalidValueError),
    Rule("batch", "the global batch must be a multiple of micro-batch x d",
         lambda x, k: (k["B"] % (k["b"] * k["d"]) != 0) if k.get("B") is not None else False,
         lambda x, k: (f"global batch size B={k['B']} must be a multiple of micro-batch size x "
                       f"data-parallel size b*d={k['b'] * k['d']}"),
         Source("megatron-lm", "megatron/core/num_microbatches_calculator.py "
                               "(global_batch_size % (micro_batch_size x data_parallel_size))")),
)
