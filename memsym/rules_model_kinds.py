"""The framework rules a model's kind brings: experts (MoE), hybrid Mamba / attention layers,
and Zamba's Mamba-1 mixers and shared transformer blocks.

:data:`FRAMEWORK_RULES` name the frameworks that build a model at all (the table checks them
first); :data:`EXPERT_RULES` check expert parallelism against the experts;
:data:`DISPATCHER_RULES` the DeepEP dispatcher's group size; :data:`HYBRID_RULES` tensor,
pipeline and context parallelism of a hybrid model's mixers; :data:`ATTENTION_RULES` the
context parallelism of attention with sinks.  They join
:data:`memsym.rules.RULES`, which keeps the table's order.
"""

from __future__ import annotations

from .errors import InvalidValueError
from .model.layer_patterns import is_hybrid, mixer_counts
from .model.hybrid_layers import layer_kind_pattern, mtp_layer_kinds
from .rule import MLM_CONFIG_POST_INIT, MLM_VALIDATE_ARGS, Rule, negate
from .term import Source
from .terms.dispatcher_buffers import DEEPEP_DISPATCH_CONFIGS

__all__ = ["FRAMEWORK_RULES", "EXPERT_RULES", "DISPATCHER_RULES", "HYBRID_RULES",
           "ATTENTION_RULES"]


def _moe(x) -> bool:
    return bool(x.num_experts)


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


#: The rules on which framework builds a model at all: no other knob makes such a job
#: describable, so the table checks them first.
FRAMEWORK_RULES = (
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
)

#: The rules on expert parallelism, in the order the table checks them.
EXPERT_RULES = (
    Rule("ep-experts", "e must divide the experts (e = 1 without experts)",
         lambda x, k: (x.num_experts % k["e"] != 0) if _moe(x) else (k["e"] != 1),
         lambda x, k: (f"expert-parallel size e={k['e']} must divide the experts "
                       f"(num_experts={x.num_experts})") if _moe(x) else
         f"expert-parallel size e={k['e']} needs a model with experts ({x.name} has none); use e=1",
         Source("megatron-lm", MLM_VALIDATE_ARGS + " (num_experts % expert_model_parallel_size)")),
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
         Source("megatron-lm", MLM_CONFIG_POST_INIT
                + " (transformer_config.py:2612-2615 at d98e8a64dd: "
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
)

#: The rule on the flex dispatcher's DeepEP backend.
DISPATCHER_RULES = (
    Rule("deepep-group", "the flex dispatcher's DeepEP backend needs e*t_e among DeepEP's "
         "configured group sizes",
         lambda x, k: _deepep_group(k) if _moe(x) and k.get("moe_dispatcher") == "deepep"
         else False,
         lambda x, k: (f"DeepEP has no dispatch config for {k['e'] * k['t_e']} ranks (e t_e must "
                       f"be one of {', '.join(map(str, DEEPEP_DISPATCH_CONFIGS))})"),
         Source("deepep", "deep_ep/buffer.py:228-282 (Buffer.get_dispatch_config / "
                "get_combine_config: a config per group size, else an assertion)"),
         InvalidValueError),
)

#: The rules on a hybrid model's mixers and shared blocks, in the order the table checks them.
HYBRID_RULES = (
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
)


#: The rules on an attention kind: sinks (gpt-oss's, softmax_type learnable, and off-by-one's
#: zero sink, :attr:`memsym.model.Architecture.off_by_one_softmax`, however the job was given:
#: a pasted --context-parallel-size, memsym's --cp, a search's c) under Transformer Engine's
#: context parallelism, which runs them only with the a2a method: TE turns FlashAttention off
#: for any softmax_type but vanilla, fused attention under another CP method, and its unfused
#: attention runs no CP, so no backend is left ("te_cp_without_a2a": a TE-attention framework
#: whose CP method is not a2a, memsym.rules.knobs).
ATTENTION_RULES = (
    Rule("sinks-cp", "attention sinks (softmax_type learnable or off-by-one) under Transformer "
         "Engine's context parallelism need cp_comm_type a2a",
         lambda x, k: (k.get("c", 1) > 1) & bool((x.attention_sinks or x.off_by_one_softmax)
                                                  and k.get("te_cp_without_a2a", False)),
         lambda x, k: ("context parallelism with "
                       f"{'attention sinks' if x.attention_sinks else 'an off-by-one softmax'} "
                       "needs cp_comm_type a2a (Megatron-LM's --cp-comm-type a2a): Transformer "
                       "Engine runs a sink in no other CP attention"),
         Source("transformer-engine", "attention/dot_product_attention/utils.py:1122-1124, "
                "1148-1155, 1169-1173 at d0067d0da6 (get_attention_backend)"),
         InvalidValueError),
    Rule("dsa-cp", "DeepSeek-V3.2's sparse attention (DSA) under Megatron-core's context "
         "parallelism needs cp_comm_type allgather",
         lambda x, k: (k.get("c", 1) > 1) & bool(x.dsa_index_heads and k.get("megatron_options")
                                                  and not k.get("cp_allgather", False)),
         lambda x, k: ("context parallelism of DeepSeek-V3.2's sparse attention (DSA) needs "
                       "cp_comm_type allgather (Megatron-LM's --cp-comm-type all_gather; "
                       "Megatron-Bridge's model.cp_comm_type allgather)"),
         Source("megatron-lm", "megatron/core/transformer/transformer_config.py:3162-3177 at "
                "d98e8a64dd (TransformerConfig.__post_init__: \"DSAttention context "
                "parallelism currently supports cp_comm_type=allgather only\")"),
         InvalidValueError),
    Rule("te-cp-allgather", "Transformer Engine's context-parallel attention takes all_gather, "
         "not allgather",
         lambda x, k: (k.get("c", 1) > 1) & bool(not x.dsa_index_heads
                                                  and k.get("cp_spelt_allgather", False)),
         lambda x, k: ("cp_comm_type allgather is Megatron-core's DSA spelling; Transformer "
                       "Engine's context-parallel attention takes all_gather (it raises "
                       "\"Unsupported communication type: allgather\")"),
         Source("transformer-engine", "attention/dot_product_attention/context_parallel.py:"
                "5096-5139 at d0067d0da6 (attn_forward_func_with_cp)"),
         InvalidValueError),
)
