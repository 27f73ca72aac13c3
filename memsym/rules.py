"""The framework rules a training job must satisfy, each written once, as data.

A :class:`Rule` has a name (what ``memsym search`` shows under "excluded by rule"), a check
that works on Python integers and on numpy arrays alike (True where the rule is broken), the
line a refusal prints, and the source it comes from.  :func:`check` raises the first broken
rule for one job (estimate, solve, conventions); :func:`masks` evaluates every rule over a
grid of layouts (search); :func:`broken` names the rules one layout breaks.
"""

from __future__ import annotations

from typing import Mapping

from .errors import InvalidValueError
from .frameworks import framework
from .model.architecture import is_hybrid, layer_kinds, mixer_counts
from .model.hybrid_layers import layer_kind_pattern, mtp_layer_kinds
from .rule import Rule, negate
from .rules_states import STATE_RULES
from .term import Source
from .terms.dispatcher_buffers import DEEPEP_DISPATCH_CONFIGS
from .text import shared_doc

__all__ = ["Rule", "RULES", "LAUNCH", "PREFERENCES", "knobs", "masks", "broken", "check"]

_doc = shared_doc(rule_params="""
    x : memsym.model.Resolved
        The model.
    k : mapping
        The job's knobs (:func:`knobs`).
    names : iterable of str, optional
        The rules to test (default: the launch rules, :data:`LAUNCH`).
    """)

_MLM_ARGS = "megatron/training/arguments.py, validate_args"
_MLM_TC = "megatron/core/transformer/transformer_config.py, TransformerConfig.__post_init__"




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


def _moe(x) -> bool:
    return bool(x.num_experts)


def _mixed_layers(x) -> bool:
    # dense and MoE layers in one model: which a V-placed rank holds depends on where its two
    # stages sit, which memsym's contiguous stage ranges do not follow
    return len(layer_kinds(x)) > 1 or is_hybrid(x)


_MAMBA_MIXER = ("megatron/core/ssm/mamba_mixer.py at d98e8a64dd, MambaMixer.__init__ "
                "(assert self.{} % tp_size == 0)")


def _deepep_group(k):
    """True where e*t_e is no group size DeepEP has a config for (scalars or arrays)."""
    import numpy as np

    return ~np.isin(k["e"] * k["t_e"], tuple(DEEPEP_DISPATCH_CONFIGS))


def _mamba2(x) -> bool:
    # Megatron-core builds Mamba-2 mixers only (MambaMixer); its TP rules apply to them
    return bool(mixer_counts(x)[1]) and x.mamba_version == 2


def _mamba_tp(x, k, field: str):
    return (getattr(x, field) % k["t"] != 0) if _mamba2(x) else False


#: The hybrid layers' mixers whose activations memsym prices at c = 1 only (the refusal of
#: memsym.terms.mamba.hybrid_layer_activations under context parallelism); Mamba-1 and
#: side-by-side mixers are refused at any c.
_CP_UNMODELLED = {"mamba": "Mamba mixers", "shared": "a shared transformer block (Zamba2)",
                  "conv": "short-convolution mixers", "gdn": "Gated DeltaNet mixers",
                  "lightning": "lightning-attention mixers"}


def _cp_unmodelled_mixers(x) -> tuple:
    """The :data:`_CP_UNMODELLED` mixers of a hybrid model's layers (its MTP block's too), in
    the order they first appear."""
    if not is_hybrid(x):
        return ()
    kinds = layer_kind_pattern(x) + (mtp_layer_kinds(x) if x.mtp_num_layers else ())
    return tuple(dict.fromkeys(m for m, _ in kinds if m in _CP_UNMODELLED))


def _hybrid_cp_msg(x, k):
    what = " and ".join(_CP_UNMODELLED[m] for m in _cp_unmodelled_mixers(x))
    return (f"context parallelism (c={k['c']} > 1) of {what} is not modelled (memsym prices "
            "these hybrid layers' activations at c = 1 only)")


def _hybrid_pipeline(x, k):
    if not is_hybrid(x):
        return False
    return (k.get("v", 1) > 1) | k.get("pipeline_layout", False)



RULES: dict = {r.name: r for r in (
    # first: no other knob makes such a job describable, so no other refusal is worth reading
    Rule("mamba1-framework", "Zamba (Mamba-1 mixers and a shared transformer block) runs as "
         "transformers' own model code only (--framework deepspeed)",
         lambda x, k: (not k["deepspeed"]) if x.mamba_version == 1 and x.shared_blocks
         else False,
         lambda x, k: ("Zamba's Mamba-1 mixers and shared transformer block run as "
                       "transformers' own model code only (--framework deepspeed): "
                       "Megatron-core builds neither (its MambaMixer is Mamba-2's, its hybrid "
                       "layers have no shared block), nor does torchtitan"),
         Source("megatron-lm", "megatron/core/ssm/mamba_mixer.py at d98e8a64dd, lines 71-74 "
                "and 645 (MambaMixer runs mamba_ssm's Mamba-2 ssd_combined scan); "
                "megatron/core/models/hybrid/hybrid_layer_allocation.py:17-26 (Symbols."
                "VALID_LAYERS: Mamba, GDN, attention, MLA, MLP, MoE; no shared block)"),
         InvalidValueError),
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
         Source("megatron-lm", _MLM_ARGS + " (num_attention_heads % tensor_model_parallel_size)")),
    Rule("tp-kv-heads", "t must divide the KV heads (query groups)",
         lambda x, k: False if x.multi_latent_attention else (x.num_query_groups % k["t"] != 0),
         lambda x, k: (f"tensor-parallel size t={k['t']} must divide the KV heads "
                       f"(num_query_groups={x.num_query_groups})"),
         Source("megatron-lm", _MLM_ARGS + " (num_query_groups % tensor_model_parallel_size)")),
    Rule("tp-ffn", "t must divide every ffn size (t_e the routed experts')", _tp_ffn, _tp_ffn_msg,
         Source("megatron-lm", "megatron/core/tensor_parallel/layers.py, ColumnParallelLinear "
                               "(divide(output_size, world_size))")),
    Rule("pp-layers", "p must divide the layers (or the rest after the given first/last stages)",
         lambda x, k: False if k.get("pipeline_layout") else _stage_sizes(x, k)[1], _pp_msg,
         Source("megatron-lm", _MLM_TC + " (num_layers % pipeline_model_parallel_size)")),
    Rule("vpp-stages", "virtual stages v > 1 need p > 1",
         lambda x, k: (k["v"] > 1) & (k["p"] == 1),
         lambda x, k: "virtual pipeline stages (v > 1) need p > 1",
         Source("megatron-lm", _MLM_ARGS + " (interleaved schedule only with PP > 1)"),
         InvalidValueError),
    Rule("vpp-layers", "v must divide the layers of every pipeline stage (Megatron-Core)",
         _vpp_layers, _vpp_layers_msg,
         Source("megatron-lm", _MLM_TC + " (layers per stage divisible by the virtual size)")),
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
    Rule("ep-experts", "e must divide the experts (e = 1 without experts)",
         lambda x, k: (x.num_experts % k["e"] != 0) if _moe(x) else (k["e"] != 1),
         lambda x, k: (f"expert-parallel size e={k['e']} must divide the experts "
                       f"(num_experts={x.num_experts})") if _moe(x) else
         f"expert-parallel size e={k['e']} needs a model with experts ({x.name} has none); use e=1",
         Source("megatron-lm", _MLM_ARGS + " (num_experts % expert_model_parallel_size)")),
    Rule("ep-group", "e*t_e must divide t*c*d (the expert data-parallel size is a whole number "
         ">= 1)",
         lambda x, k: ((k["t"] * k["c"] * k["d"]) % (k["e"] * k["t_e"]) != 0) if _moe(x) else False,
         lambda x, k: (f"expert-parallel x expert-tensor-parallel size e*t_e={k['e'] * k['t_e']} "
                       f"must divide t*c*d={k['t'] * k['c'] * k['d']}"),
         Source("megatron-lm", "megatron/core/parallel_state.py, initialize_model_parallel "
                               "(expert data-parallel size = world/(ETP EP PP))")),
    Rule("moe-bias-etp", "Megatron-core runs biased experts (add_bias_linear) with t_e = 1 only",
         lambda x, k: ((k["t_e"] != 1) & bool(k.get("megatron_options", False))
                       & bool(x.add_bias_linear)) if _moe(x) else False,
         lambda x, k: (f"{x.name}'s experts have biases (add_bias_linear): Megatron-core needs "
                       f"expert tensor parallelism 1, got t_e = {k['t_e']} "
                       "(--expert-tensor-parallel-size 1)"),
         Source("megatron-lm", _MLM_TC + " (transformer_config.py:2612-2615 at d98e8a64dd: "
                "\"Bias in Moe is only supported when ETP==1\")"), InvalidValueError),
    Rule("torchtitan-etp", "torchtitan's expert TP is t_e = t, or t_e = 1 under EP (v0.2.2)",
         lambda x, k: (k["t_e"] != k["t"]) & ((k["e"] == 1) | (k["t_e"] != 1))
         & k.get("torchtitan", False),
         lambda x, k: (f"torchtitan splits the experts over t_e = t, or t_e = 1 with e > 1 "
                       f"(got t = {k['t']}, e = {k['e']}, t_e = {k['t_e']})"),
         Source("torchtitan", "v0.2.2 distributed/parallel_dims.py:58-59 (ETP=TP or ETP=1 with "
                "ep > 1); models/llama4/infra/parallelize.py:561-563 (without EP the experts "
                "take the TP mesh)"), InvalidValueError),
    Rule("moe-tp-sp", "MoE with t > 1 needs sequence parallelism (Megatron-LM)",
         lambda x, k: ((k["t"] > 1) & negate(k["sequence_parallel"])) if _moe(x) else False,
         lambda x, k: ("MoE with tensor parallelism needs sequence parallelism (Megatron-LM "
                       "refuses t > 1 without --sequence-parallel in training; add it)"),
         Source("megatron-lm", "megatron/core/transformer/moe/moe_layer.py, MoELayer.forward "
                               "(raises in training with TP > 1 and no sequence parallelism)"),
         InvalidValueError),
    Rule("torchtitan-tp-sp", "torchtitan's tensor parallelism is sequence parallel (t > 1 "
         "needs sequence parallelism)",
         lambda x, k: ((k["t"] > 1) & negate(k["sequence_parallel"])
                       & k.get("tp_sequence_parallel", k.get("torchtitan", False))),
         lambda x, k: ("torchtitan's tensor parallelism always shards the norms and the block "
                       "outputs over the sequence: t > 1 needs sequence parallelism"),
         Source("torchtitan", "models/llama3/infra/parallelize.py, apply_tp (SequenceParallel "
                "norms, RowwiseParallel output_layouts=Shard(1))"), InvalidValueError),
    Rule("cp-seq", "2c must divide the sequence length (Megatron splits it into 2c chunks for "
         "causal load balancing)",
         lambda x, k: (k["c"] != 1) & (k["s"] % (2 * k["c"]) != 0),
         lambda x, k: (f"context parallelism c={k['c']} needs 2c to divide the sequence length "
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
         Source("megatron-lm", _MLM_ARGS + " (max_position_embeddings >= seq_length)"),
         InvalidValueError),
    Rule("batch", "the global batch must be a multiple of micro-batch x d",
         lambda x, k: (k["B"] % (k["b"] * k["d"]) != 0) if k.get("B") is not None else False,
         lambda x, k: (f"global batch size B={k['B']} must be a multiple of micro-batch size x "
                       f"data-parallel size b*d={k['b'] * k['d']}"),
         Source("megatron-lm", "megatron/core/num_microbatches_calculator.py "
                               "(global_batch_size % (micro_batch_size x data_parallel_size))")),
    *STATE_RULES,
    Rule("deepep-group", "the flex dispatcher's DeepEP backend needs e*t_e among DeepEP's "
         "configured group sizes",
         lambda x, k: _deepep_group(k) if _moe(x) and k.get("moe_dispatcher") == "deepep"
         else False,
         lambda x, k: (f"DeepEP has no dispatch config for {k['e'] * k['t_e']} ranks (e t_e must "
                       f"be one of {', '.join(map(str, DEEPEP_DISPATCH_CONFIGS))})"),
         Source("deepep", "deep_ep/buffer.py:228-282 (Buffer.get_dispatch_config / "
                "get_combine_config: a config per group size, else an assertion)"),
         InvalidValueError),
    Rule("tp-mamba-heads", "t must divide the Mamba-2 heads (Megatron-core's MambaMixer)",
         lambda x, k: _mamba_tp(x, k, "mamba_num_heads"),
         lambda x, k: (f"tensor-parallel size t={k['t']} must divide the Mamba heads "
                       f"(mamba_num_heads={x.mamba_num_heads})"),
         Source("megatron-lm", _MAMBA_MIXER.format("nheads"))),
    Rule("tp-mamba-groups", "t must divide the Mamba-2 B/C groups (Megatron-core's MambaMixer)",
         lambda x, k: _mamba_tp(x, k, "mamba_num_groups"),
         lambda x, k: (f"tensor-parallel size t={k['t']} must divide the Mamba groups "
                       f"(mamba_num_groups={x.mamba_num_groups})"),
         Source("megatron-lm", _MAMBA_MIXER.format("ngroups"))),
    Rule("hybrid-pipeline", "a hybrid Mamba / attention model splits its layers evenly (or by "
         "first/last stage sizes) over p stages: no virtual stages, no custom layout",
         _hybrid_pipeline,
         lambda x, k: ("a hybrid Mamba/attention model takes no virtual pipeline stages (v > 1) "
                       "or custom pipeline layout: Megatron-core splits its layer pattern over "
                       "the p stages evenly or by first/last stage sizes, and takes virtual "
                       "stages only from '|' separators in hybrid_override_pattern, which a "
                       "config.json does not carry"),
         Source("megatron-lm", "megatron/core/models/hybrid/hybrid_layer_allocation.py at "
                "d98e8a64dd, select_pipeline_segment (VPP without '|' separators raises)"),
         InvalidValueError),
    Rule("shared-block-pipeline", "a model with shared transformer blocks (Zamba, Zamba2) runs "
         "on one pipeline stage (p = 1)",
         lambda x, k: (k["p"] > 1) if x.shared_blocks else False,
         lambda x, k: ("pipeline parallelism (p > 1) of a model with shared transformer blocks "
                       "(Zamba, Zamba2) is not modelled: transformers builds no pipeline stages, "
                       "and a block serving layers on several stages has no documented owner"),
         Source("hf-transformers", "transformers 5.25 models/zamba2/configuration_zamba2.py:26 "
                "and zamba/configuration_zamba.py:26 (no base_model_pp_plan, which "
                "llama/configuration_llama.py:57 sets)"), InvalidValueError),
    Rule("mamba1-tp", "Zamba's Mamba-1 mixers run on one tensor-parallel rank (t = 1)",
         lambda x, k: (k["t"] > 1) if x.mamba_version == 1 and x.shared_blocks else False,
         lambda x, k: ("tensor parallelism (t > 1) of Zamba's Mamba-1 mixers is not modelled "
                       "(transformers does not shard them)"),
         Source("hf-transformers", "transformers 5.25 models/zamba/configuration_zamba.py (no "
                "base_model_tp_plan, which llama/configuration_llama.py:48 sets)"),
         InvalidValueError),
    Rule("hybrid-cp", "a hybrid model's Mamba, shared-block, short-convolution, Gated DeltaNet "
         "and lightning-attention layers are priced at c = 1 only",
         lambda x, k: (k.get("c", 1) > 1) & bool(_cp_unmodelled_mixers(x)),
         _hybrid_cp_msg,
         Source("memsym-derivation", "memsym/terms/mamba.py, _refuse_unmodelled and "
                "_refuse_shared (Megatron-core's all-to-all context parallelism of a Mamba "
                "mixer, megatron/core/ssm/mamba_context_parallel.py at d98e8a64dd, is not "
                "modelled)"),
         InvalidValueError),
)}

#: The rules a framework refuses to launch against, and memsym's search preferences.
LAUNCH = tuple(n for n, r in RULES.items() if r.kind == "launch")
PREFERENCES = tuple(n for n, r in RULES.items() if r.kind == "preference")
#: The rules on the micro-batch count m (checked once the batch rule has given it).
NEED_M = ("vpp-microbatches", "torch-pp-microbatches")


def knobs(layout, training=None, *, gpus=None, gpus_per_node=None, m=None) -> dict:
    """The knob values the rules read, from a :class:`~memsym.training.Layout` and
    :class:`~memsym.training.Training`.

    Parameters
    ----------
    layout : Layout
        The parallel layout (``t p c d e t_e v``, sequence parallelism, uneven stages).
    training : Training, optional
        The training step (``s b B``, offload, sharding); without it the batch rules are
        skipped.
    gpus : int, optional
        World size G [GPUs], when the rules should check it.
    gpus_per_node : int, optional
        GPUs per node [GPUs].
    m : int, optional
        Micro-batches per step and pipeline [1], when known.

    Returns
    -------
    dict
        Knob name -> value, as :data:`RULES` read them.

    Examples
    --------
    >>> from memsym.training import Layout
    >>> knobs(Layout(t=2, p=4))["t_e"]
    2
    """
    k = {"t": layout.t, "p": layout.p, "c": layout.c, "d": layout.d, "e": layout.e,
         "t_e": layout.expert_tp, "v": layout.v or 1,
         "sequence_parallel": bool(layout.sequence_parallel),
         "first_stage_layers": layout.first_stage_layers,
         "last_stage_layers": layout.last_stage_layers, "gpus": gpus,
         "pipeline_layout": getattr(layout, "pipeline_layout", None) is not None,
         "gpus_per_node": gpus_per_node, "m": m}
    if training is not None:
        fw = framework(getattr(training, "framework", "megatron"))
        # the knobs "torchtitan" and "deepspeed" (memsym.search.grid builds them too) are the
        # behaviours memsym.frameworks records: torch's pipelining, the transformers model code
        k.update({"s": training.batch.seq_length, "b": training.batch.micro_batch_size,
                  "B": training.batch.global_batch_size, "offload": training.states.offload != "none",
                  "shards_gradients": training.states.sharding in ("zero2", "zero3", "fsdp"),
                  "zero1": training.states.sharding == "zero1",
                  # Megatron-FSDP (any strategy), and Megatron-LM's other FSDP: Torch-FSDP2
                  "megatron_fsdp": training.states.megatron_fsdp is not None,
                  "torch_fsdp2": (fw.megatron_options and training.states.sharding == "fsdp"
                                  and training.states.megatron_fsdp is None),
                  "torchtitan": fw.torch_pipelining, "deepspeed": fw.hf_model_code,
                  "megatron_options": fw.megatron_options,
                  "tp_sequence_parallel": fw.tp_sequence_parallel,
                  "gpipe": training.pipeline.schedule == "gpipe",
                  "v_placement": training.pipeline.stage_placement == "v",
                  "microbatch_group_size": training.pipeline.microbatch_group_size,
                  "moe_dispatcher": training.memory.moe_dispatcher,
                  "precision": training.states.precision,
                  "muon": training.states.optimizer == "muon",
                  "fp4_param_gather": bool(training.states.fp4_param_gather),
                  "fp8_param_gather": bool(training.states.fp8_param_gather)})
    return k


def masks(x, k: Mapping, names=None) -> dict:
    """``rule name -> boolean array`` (True where broken) over a grid of knob arrays.

    Parameters
    ----------
    x : memsym.model.Resolved
        The model.
    k : mapping
        Knob name -> numpy array (or scalar), as :func:`knobs` names them; a rule whose
        inputs are missing is left out.
    names : iterable of str, optional
        The rules to test (default: all of :data:`RULES`).

    Returns
    -------
    dict of str to numpy.ndarray
        Rule name -> boolean array of the grid's shape, True where the rule is broken.

    Examples
    --------
    >>> import numpy as np
    >>> from memsym.model import preset
    >>> k = {"t": np.array([8, 16]), "p": np.array([1, 1]), "e": 1, "t_e": np.array([8, 16])}
    >>> masks(preset("llama2-70b"), k, ["tp-kv-heads"])["tp-kv-heads"].tolist()
    [False, True]
    """
    import numpy as np

    shape = np.shape(k["t"])
    out = {}
    for name in (RULES if names is None else names):
        rule = RULES[name]
        need = ("s", "b") if name in ("cp-seq", "batch") else ()
        if any(n not in k for n in need):
            continue
        out[name] = np.broadcast_to(np.asarray(rule.test(x, k), dtype=bool), shape)
    return out


@_doc
def broken(x, k: Mapping, names=None) -> list:
    """The names of the rules one job breaks, in table order (empty when it is valid).

    Parameters
    ----------
    {rule_params}

    Returns
    -------
    list of str
        Names of the broken rules.

    Examples
    --------
    >>> from memsym.model import preset
    >>> from memsym.training import Layout, Training
    >>> broken(preset("llama2-70b"), knobs(Layout(t=16), Training(seq_length=4096)))
    ['tp-kv-heads']
    """
    out = []
    for name in (LAUNCH if names is None else names):
        rule = RULES[name]
        try:
            bad = rule.test(x, k)
        except KeyError:          # a rule whose inputs this job does not carry
            continue
        if bool(bad):
            out.append(name)
    return out


@_doc
def check(x, k: Mapping, names=None) -> None:
    """Raise the first broken launch rule (its own error class and message).

    Parameters
    ----------
    {rule_params}

    Raises
    ------
    memsym.errors.InvalidValueError
        The first broken rule's error (its :class:`~memsym.errors.DivisibilityError` for the
        divisibility rules), with its message.

    Examples
    --------
    >>> from memsym.model import preset
    >>> from memsym.training import Layout, Training
    >>> check(preset("llama2-70b"), knobs(Layout(t=16), Training(seq_length=4096)))
    Traceback (most recent call last):
    ...
    memsym.errors.DivisibilityError: tensor-parallel size t=16 must divide the KV heads (num_query_groups=8)
    """
    for name in broken(x, k, names):
        rule = RULES[name]
        raise rule.error(rule.message(x, k))
