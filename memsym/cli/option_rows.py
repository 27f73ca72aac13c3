"""Every option of every ``memsym`` subcommand, one row each (issue 28: one table of options).

The rows of :mod:`memsym.cli.option_table` (the schema: :class:`memsym.cli.option_schema.Option`).
A row spelling a Megatron-LM argument uses Megatron's name first and Megatron's meaning.
"""

from __future__ import annotations

from ..vocabulary import (CE_FUSION_IMPLS, CONVENTIONS, CP_METHODS, CUDA_GRAPH_IMPLS,
                          CUDA_GRAPH_MODULES, FINETUNES, MOE_DISPATCHERS, MUON_TP_MODES,
                          FRAMEWORK_CONVENTIONS, FRAMEWORKS, METRIC_NAMES, OFFLOADS,
                          OPTIMIZER_DTYPES, RECOMPUTE, RECOMPUTE_METHODS, RECOMPUTE_MODULES,
                          SCHEDULES, SCHEMES, SEARCH_SHARDING)
from ..vocabulary import ACCELERATE_FSDP_MODES, FP8_RECIPES
from ..vocabulary import OPTIMIZER_NAMES as OPTIMIZERS, PRECISION_NAMES as PRECISIONS
from . import options as T
from .command_rows import check_rows, command_rows, model_rows, time_rows
from .switch_rows import SWITCH_ROWS as _SWITCH_ROWS
from .option_schema import (ALLOWANCES_SOURCE, JOB, JOB_AND_SEARCH, JOB_DEFAULTS,
                            MEGATRON_ARGS, RECIPE_SOURCE, SEARCH, flag, option)

__all__ = ["OPTIONS", "SWITCH_FLAGS", "TIME_JOB_OPTIONS"]


_ARCH_HELP = {
    "num_layers": "transformer layers L", "hidden_size": "hidden size h",
    "num_attention_heads": "attention heads a", "num_query_groups": "KV heads (with "
    "--group-query-attention)", "kv_channels": "head dimension (the MODEL's, else h / a)",
    "ffn_hidden_size": "MLP hidden size", "vocab_size": "vocabulary size V",
    "make_vocab_size_divisible_by": "pad V to a multiple of this x t (Megatron)",
    "num_experts": "routed experts", "moe_router_topk": "experts per token",
    "moe_ffn_hidden_size": "expert MLP hidden size",
    "moe_shared_expert_intermediate_size": "shared expert MLP size",
    "q_lora_rank": "MLA query rank", "kv_lora_rank": "MLA key/value rank",
    "qk_head_dim": "MLA q/k head dim", "qk_pos_emb_head_dim": "MLA rotary head dim",
    "v_head_dim": "MLA value head dim", "mtp_num_layers": "multi-token-prediction layers",
    "max_position_embeddings": "position table size",
}


def _arch_rows():
    out = []
    for name, text in _ARCH_HELP.items():
        out.append(option("--" + name.replace("_", "-"), name, group="model", type=T.positive_int,
                      metavar="N", field=name, help=text, source="the MODEL",
                      commands=JOB_AND_SEARCH, search="same"))
        if name == "num_experts":
            out.append(option("--moe-layer-freq", "moe_layer_freq", group="model", metavar="Q|PATTERN",
                          field="moe_layer_freq", commands=JOB_AND_SEARCH, search="same",
                          help="MoE every q-th layer, or a 0/1 pattern such as '([0]*3+[1]*58)' "
                          "(Megatron's moe_freq_type; parsed, not evaluated)", source="the MODEL"))
    out += [
        flag("--group-query-attention", group="model", commands=JOB_AND_SEARCH, search="same",
              help="GQA: --num-query-groups KV heads (without it Megatron ignores "
              "--num-query-groups)"),
        flag("--swiglu", group="model", field="swiglu", value=True, commands=JOB_AND_SEARCH,
              search="same", help="gated (SwiGLU) MLP"),
        flag("--untie-embeddings-and-output-weights", group="model",
              field="untie_embeddings_and_output_weights", value=True, commands=JOB_AND_SEARCH,
              search="same", help="a separate output layer"),
        flag("--multi-latent-attention", group="model", field="multi_latent_attention",
              value=True, commands=JOB_AND_SEARCH, search="same", help="MLA (DeepSeek-V2/V3)"),
        option("--normalization", group="model", type=T.choice("normalization",
                                                              ("LayerNorm", "RMSNorm")),
           field="normalization", commands=JOB_AND_SEARCH, search="same", help="LayerNorm or RMSNorm"),
        flag("--should-pad-vocab", group="model", default=False,
              source="Megatron-Bridge GPTModelProvider.should_pad_vocab",
              help="pad the vocabulary to a multiple of 128 x TP, as Megatron-Bridge does when "
              "the vocabulary comes from the tokenizer (--convention megatron-bridge)"),
    ]
    return out


def _state_rows():
    return [
        option("--params", group="states", type=T.count, metavar="N", effect="memory",
           help="total parameter count N (7000000000, 7e9, 7B, 1.5T) for the model states alone"),
        option(("--dp", "--data-parallel-size"), "dp", group="states", type=T.positive_int,
           metavar="D", field="d", default=1, source=JOB_DEFAULTS + " (no --world-size)",
           help="data-parallel size d"),
        option(("--tensor-model-parallel-size", "--tp"), "tp", group="states", type=T.positive_int,
           metavar="T", field="t", default=1, source=JOB_DEFAULTS, commands=JOB_AND_SEARCH,
           search="list", help="tensor-parallel size t",
           search_help="the tensor-parallel sizes tried (default: every size the launch rules allow)"),
        option(("--pipeline-model-parallel-size", "--pp"), "pp", group="states",
           type=T.positive_int, metavar="P", field="p", default=1, source=JOB_DEFAULTS,
           commands=JOB_AND_SEARCH, search="list", help="pipeline-parallel size p",
           search_help="the pipeline-parallel sizes tried (default: every size the launch rules allow)"),
        option("--sharding", group="states", type=T.choice("sharding", SCHEMES), field="sharding",
           default="distributed-optimizer", commands=JOB_AND_SEARCH, search="list",
           source=JOB_DEFAULTS + " (Megatron-core's distributed optimizer, as the recipes); a "
           "Megatron-LM command without MODEL: ddp unless --use-distributed-optimizer",
           help="how model states are sharded over data parallel: " + ", ".join(SCHEMES),
           search_type=T.choice("sharding", SEARCH_SHARDING),
           search_help="sharding schemes to try (default: those the framework launches, for "
           "Megatron-LM ddp, distributed-optimizer, zero2 and fsdp, the last two Megatron-FSDP; "
           "also by name DeepSpeed's zero1, zero3 and Megatron-FSDP's no_shard, optim, "
           "optim_grads, optim_grads_params)"),
        flag("--use-distributed-optimizer", group="states",
              help="Megatron's flag: same as --sharding distributed-optimizer"),
        option("--convention", group="states",
           type=T.choice("convention", CONVENTIONS + FRAMEWORK_CONVENTIONS),
           parser_default="framework", default="framework", source="memsym: what the "
           "frameworks allocate", commands=JOB_AND_SEARCH, search="same",
           help="framework (what Megatron-core / DeepSpeed / FSDP2 allocate; the distributed "
           "optimizer keeps the whole fp32 gradient buffer, 6 + 12/d bytes/param), seed000 "
           "(2 + 16/d; alias memsym), zero-paper (ZeRO §5), megatron-lm or megatron-bridge "
           "(the frameworks' estimators)"),
        option("--precision", group="states", type=T.choice("precision", PRECISIONS),
           field="precision", default="bf16", commands=JOB_AND_SEARCH, search="same",
           source=JOB_DEFAULTS + " (bf16 mixed precision, as the recipes); a Megatron-LM "
           "command without MODEL: fp32 unless --bf16/--fp16",
           help="weight precision: " + ", ".join(PRECISIONS)),
        option("--autocast", group="states", type=T.choice("autocast dtype", ("bf16", "fp16")),
           field="autocast", commands=JOB_AND_SEARCH, search="same", effect="memory, time",
           source="memsym.job.DEFAULTS: no autocast (a Hugging Face Trainer launch: --bf16 / "
           "--fp16 over fp32 weights, and over bf16 weights of LayerNorm models measured)",
           help="torch.autocast over --precision fp32 weights, as the Hugging Face Trainer's "
           "--bf16 / --fp16 runs a float32 checkpoint (plain DDP, --framework deepspeed "
           "--sharding ddp; transformers' Llama, Mistral, Qwen2, Qwen3, GPT-2, GPT-NeoX layers): a "
           "cached 16-bit copy of every linear weight, an fp32 residual stream, matmuls at that "
           "dtype; over 16-bit weights of its own dtype, the fp32 LayerNorms (and gelu_new's "
           "pow) CUDA's autocast runs on the 16-bit tensors of GPT-2, GPT-NeoX, Phi, StableLM, "
           "GPT-J, CodeGen, GPTBigCode, StarCoder2, OPT, Falcon, nothing more on the Llama "
           "family's"),
        option("--accelerate-fsdp", group="states",
           type=T.choice("Accelerate FSDP mode", ACCELERATE_FSDP_MODES), field="accelerate_fsdp",
           effect="memory, time", source="memsym.job.DEFAULTS: not Accelerate's (a Hugging Face "
           "Trainer launch with --fsdp: mixed under --bf16 / --fp16, else plain)",
           help="--sharding fsdp as Accelerate's FSDP2 plugin runs transformers' model under the "
           "Hugging Face Trainer (--framework deepspeed): mixed (--bf16 / --fp16: the parameters "
           "upcast to fp32 shards, 4 + 4 + 8 bytes over d, gathered and reduced in --precision "
           "bf16 or fp16) or plain (no mixed precision: every tensor in --precision, the "
           "weights' dtype); [final norm, output] its own group kept gathered to the backward "
           "(with a tied embedding, through it), the unsharded gradients kept across "
           "--num-microbatches, fused AdamW"),
        option("--fp8-recipe", group="states", type=T.choice("FP8 recipe", FP8_RECIPES),
           field="fp8_recipe", commands=JOB_AND_SEARCH, search="same", effect="memory, time",
           source="memsym.job.DEFAULTS: per-tensor scaling (delayed and tensorwise counted alike)",
           help="Megatron's --fp8-recipe under --precision fp8: " + ", ".join(FP8_RECIPES)
           + " (mxfp8: Transformer Engine's MXFP8, a scale byte per 32 elements and rowwise + "
           "columnwise weight copies; Blackwell only)"),
        option("--optimizer", group="states", type=T.optimizer_choice(OPTIMIZERS),
           field="optimizer", default="adam", source=JOB_DEFAULTS + " (Megatron-LM's "
           "--optimizer adam)", commands=JOB_AND_SEARCH, search="same",
           help="optimizer: " + ", ".join(OPTIMIZERS) + "; dist_muon (Megatron-LM's "
           "deprecated spelling) is muon with the distributed optimizer, under muon the "
           "layer-wise one"),
        option("--muon-tp-mode", group="states", choices=MUON_TP_MODES, field="muon_tp_mode",
           default="duplicated", source=MEGATRON_ARGS, effect="memory, time", **_MUON_HELD,
           help="Megatron's (--optimizer muon): how a TP-split matrix is orthogonalized: "
           "blockwise (each shard), duplicated (gathered whole on every TP rank) or "
           "distributed (the Gram matrices all-reduced); the Newton-Schulz workspace is "
           "the shard's, the gathered shards' with the whole matrix's, or the shard's with "
           "the Gram matrix of its unsplit side"),
        option("--muon-num-ns-steps", group="states", type=T.positive_int, metavar="K",
           field="muon_num_ns_steps", default=5, source=MEGATRON_ARGS, effect="time",
           **_MUON_HELD,
           help="Megatron's (--optimizer muon): Newton-Schulz iterations per matrix and step"),
        option("--offload", group="states", type=T.choice("offload", OFFLOADS), field="offload",
           default="none", source=JOB_DEFAULTS, commands=JOB_AND_SEARCH, search="list",
           help="CPU offload: " + ", ".join(OFFLOADS), search_help="CPU offload modes to try (default none)"),
        *(option("--" + name.replace("_", "-"), group="states", choices=OPTIMIZER_DTYPES[name],
                 field=name, default="fp32", source=MEGATRON_ARGS, help=f"Megatron's flag "
                 f"(needs --use-precision-aware-optimizer): the {what} dtype") for name, what in (
            ("main_params_dtype", "master-weight"), ("exp_avg_dtype", "first Adam moment"),
            ("exp_avg_sq_dtype", "second Adam moment"))),
        option("--gpu-memory", group="states", type=T.capacity, metavar="C", field="capacity",
           effect="output", commands=JOB_AND_SEARCH, search="same", source="--gpu's capacity",
           help="GPU memory capacity: 80GB (1e9), 80GiB (2^30) or bytes"),
    ]


def _layout_rows():
    return [
        option(("--context-parallel-size", "--cp"), "cp", group="layout", type=T.positive_int,
           field="c", default=1, source=JOB_DEFAULTS, commands=JOB_AND_SEARCH, search="list",
           metavar="C", help="context-parallel size c",
           search_help="the context-parallel sizes tried (default: every size the launch rules allow)"),
        option(("--expert-model-parallel-size", "--ep"), "ep", group="layout", type=T.positive_int,
           field="e", default=1, source=JOB_DEFAULTS, commands=JOB_AND_SEARCH, search="list",
           metavar="E", help="expert-parallel size e",
           search_help="the expert-parallel sizes tried (default: every size the launch rules allow)"),
        option(("--expert-tensor-parallel-size", "--etp"), "etp", group="layout",
           type=T.positive_int, field="t_e", metavar="T_E", source=MEGATRON_ARGS + ": t",
           commands=JOB_AND_SEARCH, search="list",
           help="expert tensor-parallel size (default t, as Megatron-core)",
           search_help="the expert tensor-parallel sizes tried (default: t and 1 for a model "
                       "with experts)"),
        option(("--virtual-pipeline-model-parallel-size", "--vpp"), "vpp", group="layout",
           type=T.positive_int, field="v", metavar="V", commands=JOB_AND_SEARCH, search="list",
           source="no interleaving (one model chunk per rank)",
           help="model chunks per pipeline rank v",
           search_help="the virtual-pipeline sizes tried (default: every size the launch rules allow)"),
        flag("--sequence-parallel", group="layout", field="sequence_parallel", value=True,
              default=False, source=JOB_DEFAULTS,
              help="Megatron sequence parallelism (with t > 1)"),
        option("--world-size", group="layout", type=T.positive_int, metavar="G",
           field="world_size", help="number of GPUs G = t*p*c*d (gives d when --dp is absent)"),
        option("--decoder-first-pipeline-num-layers", "first_stage_layers", group="layout",
           type=T.positive_int, metavar="N", field="first_stage_layers", commands=JOB_AND_SEARCH,
           search="same", source=MEGATRON_ARGS + ": the layers split evenly",
           help="layers on the first pipeline stage"),
        option("--decoder-last-pipeline-num-layers", "last_stage_layers", group="layout",
           type=T.positive_int, metavar="N", field="last_stage_layers", commands=JOB_AND_SEARCH,
           search="same", source=MEGATRON_ARGS + ": the layers split evenly",
           help="layers on the last pipeline stage"),
        option("--pipeline-model-parallel-layout", "pipeline_layout", group="layout",
           metavar="LAYOUT", field="pipeline_layout",
           help="Megatron-Core's layout: the layers of each pipeline stage, e.g. "
           "'Et*4|(tttt|)*14,tmL' (E embedding, t decoder layer, m MTP, L loss)"),
        flag("--account-for-embedding-in-pipeline-split", group="layout",
              field="account_for_embedding_in_pipeline_split", value=True,
              help="count the embedding as one layer of the pipeline split (Megatron)"),
        flag("--account-for-loss-in-pipeline-split", group="layout",
              field="account_for_loss_in_pipeline_split", value=True,
              help="count the loss as one layer of the pipeline split (Megatron)"),
        flag("--no-uneven-stages", group="search", commands=SEARCH,
              help="do not offer uneven first/last pipeline stages (default: offered where the "
              "other stages split the rest evenly)"),
        flag("--no-sequence-parallel", group="search", commands=SEARCH,
              help="do not try Megatron sequence parallelism"),
        # a job reads it as Megatron's own flag (memsym.readers.megatron_precision)
        flag("--fsdp-double-buffer", group="search", commands=SEARCH,
              help="Megatron's flag, held fixed: every Megatron-FSDP row (sharding no_shard, "
              "optim, zero2, fsdp) keeps its buckets in persistent double-buffered pools"),
    ]


#: The switches a search holds fixed over its layouts (memsym.search.Space).
_SEARCH_SWITCHES = ("--tp-comm-overlap",)

#: Muon's options as ``min-gpus`` takes them too: held fixed over its layouts
#: (memsym.search.job_fields.HELD_FIELDS), the meaning estimate's.  ``search`` reads them as a
#: job's words through estimate's parser (memsym.cli.search_job), so it is not listed here.
_MUON_HELD = {"commands": JOB | {"min-gpus"}}
_MUON_SWITCHES = ("--muon-nesterov",)

#: The switches' flags (memsym.cli.option_table.switches).
SWITCH_FLAGS = tuple(row[0] for row in _SWITCH_ROWS)


def _training_rows():
    return [*_batch_rows(), *_recompute_rows(), *_run_rows()]


def _batch_rows():
    """The batch's options: sequence length, micro-batch and global batch sizes."""
    return [
        option("--seq-length", group="training", type=T.positive_int, metavar="S",
           field="seq_length", default=4096, commands=JOB_AND_SEARCH, search="same",
           source=JOB_DEFAULTS + " (capped by the model's position table)",
           help="sequence length s [tokens]"),
        option("--micro-batch-size", group="training", type=T.positive_int, metavar="B",
           field="micro_batch_size", default=1, source=JOB_DEFAULTS, commands=JOB_AND_SEARCH,
           search="list", help="sequences per micro-batch b",
           search_help="micro-batch sizes to try (default 1 2 4 8, at most the global batch)"),
        option("--global-batch-size", group="training", type=T.positive_int, metavar="GB",
           field="global_batch_size", commands=JOB_AND_SEARCH, search="same",
           source="b x d (one micro-batch per step); search: about 4M tokens per step",
           effect="memory, time", help="sequences per optimizer step"),
        option("--num-microbatches", group="training", type=T.positive_int, metavar="M",
           field="num_microbatches", effect="memory, time",
           help="micro-batches per step m (instead of --global-batch-size)"),
    ]


def _recompute_rows():
    """The activation recomputation options (Megatron's and torchtitan's)."""
    return [
        option(("--recompute-granularity", "--recompute"), "recompute_granularity",
           group="training", choices=RECOMPUTE,
           field="recompute", default="none", source=JOB_DEFAULTS + " (Megatron-LM without "
           "--recompute-granularity)", commands=JOB_AND_SEARCH, search="list",
           search_type=T.recompute_mode, effect="memory, time",
           help="activation recomputation (selective-op: torchtitan's per-op SAC, dense "
           "gated-MLP layers with flash attention; beside --deepspeed-config only none or "
           "full, the Hugging Face model's gradient checkpointing of every decoder layer)",
           search_help="recompute modes to try (default all the framework offers; "
           "selective-op: torchtitan's per-op SAC; block-N: Megatron's --recompute-method "
           "block --recompute-num-layers N; every-N: torchtitan's selective_ac_option = \"N\")"),
        option("--recompute-modules", group="training", nargs="+", metavar="MODULE",
               field="recompute_modules", effect="memory, time",
               source=MEGATRON_ARGS + ": core_attn with --recompute-granularity selective",
               help="Megatron-Core's modules recomputed under selective recompute: "
               + " ".join(RECOMPUTE_MODULES)),
        option("--recompute-method", group="training", choices=RECOMPUTE_METHODS,
           field="recompute_method", effect="memory, time",
           source="every layer recomputed on its own",
           help="Megatron's: with full recompute, uniform = groups of --recompute-num-layers "
           "checkpointed, block = only the first N layers of each chunk; every = torchtitan's "
           "selective_ac_option N, every N-th block of a rank (--framework torchtitan)"),
        option("--recompute-num-layers", group="training", type=T.layer_count, metavar="N",
           field="recompute_num_layers", effect="memory, time",
           help="Megatron's: layers per checkpointed group (uniform) or checkpointed layers "
           "per chunk (block; 0 checkpoints none, as Megatron runs it)"),
    ]


def _run_rows():
    """The attention kernel, dropout, pipeline schedule, framework and Megatron's switches."""
    return [
        flag("--use-flash-attn", group="training", field="flash_attention", value=True,
              default=True, source=JOB_DEFAULTS + " (Megatron-core's --attention-backend auto "
              "picks a fused kernel)", commands=JOB_AND_SEARCH, search="same",
              help="flash/fused attention, no s^2 scores"),
        flag(("--no-flash-attn", "--no-flash-attention"), "no_flash_attn", group="training",
              field="flash_attention", value=False, commands=JOB_AND_SEARCH, search="same",
              help="unfused attention: keep the s^2 scores"),
        flag("--dropout", group="training", field="dropout", value=True, commands=JOB_AND_SEARCH,
              search="same", source=RECIPE_SOURCE,
              help="keep dropout masks (as --hidden-dropout 0.1 --attention-dropout 0.1)"),
        option("--hidden-dropout", group="training", type=T.dropout_option, field="dropout", metavar="P",
           commands=JOB_AND_SEARCH, search="same", source=RECIPE_SOURCE,
           help="0 keeps no dropout masks"),
        option("--attention-dropout", group="training", type=T.dropout_option, field="dropout",
           metavar="P",
           commands=JOB_AND_SEARCH, search="same", source=RECIPE_SOURCE,
           help="0 keeps no dropout masks (memsym models one dropout setting)"),
        option("--schedule", group="training", choices=SCHEDULES, field="schedule",
           default="1f1b", source=JOB_DEFAULTS + " (Megatron's; interleaved with v > 1)",
           commands=JOB_AND_SEARCH, search="same", effect="memory, time",
           help="pipeline schedule (gpipe: torch's ScheduleGPipe, with v > 1 "
           "ScheduleLoopedBFS: --framework torchtitan)"),
        option("--cp-comm-type", group="training", choices=CP_METHODS, field="cp_comm_type",
           nargs="+", metavar="TYPE",
           source="the framework's: Megatron-LM's p2p (--cp-comm-type default), torch's "
           "allgather (_cp_options.rotate_method)", commands=JOB_AND_SEARCH, search="same",
           effect="memory", help="how context-parallel attention exchanges K and V (--cp > 1): "
           "Megatron's p2p, all_gather, a2a or a2a+p2p (Transformer Engine; one per layer "
           "only if all the same); torchtitan's allgather or alltoall (torch's rotate method): "
           + " ".join(CP_METHODS)),
        flag("--grad-reduce-in-bf16", group="training", field="grad_dtype", value="bf16",
              effect="memory, time",
              source=MEGATRON_ARGS + ": fp32 gradients under --bf16",
              help="Megatron's flag: a bf16 gradient buffer and bf16 data-parallel reduction; "
              "the optimizer step then makes an fp32 copy of the rank's shard"),
        flag("--fp8-param-gather", group="training", field="fp8_param_gather", value=True,
              help="Megatron's flag (--precision fp8, distributed optimizer): the linear "
              "weights are kept in FP8 only"),
        flag("--fp4-param-gather", group="training", field="fp4_param_gather", value=True,
              help="Megatron's flag (--precision fp4, distributed optimizer): the linear "
              "weights are kept in NVFP4 only, gathered in NVFP4"),
        flag("--first-last-layers-bf16", group="training", field="bf16_layers", value=(1, 1),
              effect="memory, time", help="Megatron's flag (--precision fp8 or fp4, not the "
              "delayed recipe): the first and last decoder layers run in BF16 (16-bit weights, "
              "no FP8 copy, 16-bit saved inputs, BF16 GEMMs); how many: the two options below"),
        *(option(f"--num-layers-at-{end}-in-bf16", group="training", type=T.layer_count,
                 metavar="N", field="bf16_layers", effect="memory, time",
                 source=MEGATRON_ARGS + ": 1 (TransformerConfig)", help=f"Megatron's: with "
                 f"--first-last-layers-bf16, the {which} N decoder layers in BF16")
          for end, which in (("start", "first"), ("end", "last"))),
        option("--framework", group="training", choices=FRAMEWORKS,
           field="framework", default="megatron", source=JOB_DEFAULTS, commands=JOB_AND_SEARCH,
           search="same", effect="memory, time",
           help="whose launch rules and runtime apply (torchtitan: FSDP2 with pipeline "
           "parallelism on torchtitan's own layer split)"),
        *(flag(name, group="training", field=field, value=value, help=text, effect=effect,
               **({"commands": JOB_AND_SEARCH, "search": "same"} if name in _SEARCH_SWITCHES
                  else _MUON_HELD if name in _MUON_SWITCHES else {}))
          for name, field, value, text, effect in _SWITCH_ROWS),
        option("--wgrad-deferral-limit", group="training", type=T.layer_count, metavar="N",
           field="wgrad_deferral_limit", default=0, source=JOB_DEFAULTS + " (Megatron's: "
           "all)", help="Megatron's: with --defer-embedding-wgrad-compute, the most "
           "micro-batches deferred (0: all)"),
        option("--cross-entropy-fusion-impl", group="training", choices=CE_FUSION_IMPLS,
           field="cross_entropy_fusion_impl", default="native", source="Megatron-core "
           "model_parallel_config.py:325 (d98e8a64dd)", effect="memory",
           help="Megatron-core's loss under cross_entropy_loss_fusion: native (fp32 softmax "
           "kept) or te, Transformer Engine's (16-bit logits kept, overwritten with their "
           "gradient; TE <= 2.17), as Megatron-Bridge sets it (Megatron-LM's own arguments "
           "refuse --cross-entropy-loss-fusion with te)"),
        option("--cpu-offloading-num-layers", group="training", type=T.layer_count, metavar="N",
           field="cpu_offloading_num_layers", default=0, source=MEGATRON_ARGS, effect="memory",
           help="Megatron's flag (p = 1, no recompute): the first N decoder layers' activations "
           "go to the host between forward and backward (the host's buffers not counted)"),
        option("--cuda-graph-impl", group="training", choices=CUDA_GRAPH_IMPLS,
           field="cuda_graph_impl", default="none", source=MEGATRON_ARGS, effect="memory",
           help="Megatron-core's CUDA graphs: transformer_engine keeps a static input per "
           "graphed layer and micro-batch in flight, full_iteration the step's micro-batches "
           "and its pool through the optimizer step (local: not sized)"),
        option("--cuda-graph-modules", group="training", nargs="+", metavar="MODULE",
           field="cuda_graph_modules", source=MEGATRON_ARGS + ": the whole layer",
           effect="memory", help="the parts of each layer captured: " + " ".join(CUDA_GRAPH_MODULES)),
        flag("--no-create-attention-mask-in-dataloader", group="training",
              field="batch_attention_mask", value=False, effect="memory",
              help="Megatron's flag: the data loader's batches carry no s x s mask (what the "
              "full-iteration graph keeps per micro-batch)"),
        option("--moe-dispatcher", group="training", choices=MOE_DISPATCHERS,
           field="moe_dispatcher", default="alltoall", source=MEGATRON_ARGS, effect="memory",
           commands=JOB_AND_SEARCH, search="same",
           help="Megatron-core's MoE token dispatcher: alltoall, allgather, or the flex "
           "dispatcher's deepep / hybridep backend, whose buffers (outside PyTorch's "
           "allocator) are counted"),
        option("--moe-expert-capacity-factor", group="training", type=T.capacity_factor,
           field="capacity_factor", default=1, source="memsym: balanced routing",
           help="routed-token load of the busiest expert rank"),
    ]


def _finetune_rows():
    return [
        # Megatron-LM's --finetune (a flag) is full fine-tuning: the bare flag means full
        option("--finetune", group="finetune", nargs="?", const="full",
           choices=FINETUNES, field="finetune", default="full",
           source=JOB_DEFAULTS, commands=JOB_AND_SEARCH, search="same",
           help="full training (the bare flag, as Megatron-LM's --finetune), LoRA (a frozen "
           "bf16 base) or QLoRA (an NF4 base)"),
        option("--lora-rank", group="finetune", type=T.positive_int, metavar="R", field="lora_rank",
           default=16, source=JOB_DEFAULTS, commands=JOB_AND_SEARCH, search="same",
           help="the adapters' rank"),
        option("--lora-targets", group="finetune", type=T.lora_targets, metavar="LIST",
           field="lora_targets", source="every linear layer",
           help="adapted matrices, comma-separated from q,k,v,o,gate,up,down; none beside "
           "--lora-expert-params (PEFT's target_parameters alone)"),
        option("--lora-expert-params", group="finetune", type=T.lora_targets, metavar="LIST",
           field="lora_expert_params", help="PEFT's target_parameters on the fused MoE experts, "
           "from gate_up,down: rank-r adapters per expert, the merged weights (HF frameworks)"),
        option("--lora-quantization", "quantization", group="finetune", metavar="FORMAT",
           field="quantization", source="bf16 for LoRA, nf4-dq for QLoRA",
           help="the frozen base's format (memsym.terms.adapters.QUANTIZATIONS)"),
        flag("--lora-regather", group="finetune", field="lora_regather", value=True,
              help="Megatron-Bridge's LoRA(sequence_parallel_input_regather=True): LoRA-A keeps "
              "the local norm-output shard and re-gathers it in backward"),
        flag("--lora-dropout", group="finetune", field="lora_dropout", value=True,
              help="PEFT's lora_dropout > 0 (TRL's 0.05): a dropped input copy and mask per matrix"),
        flag("--dora", group="finetune", field="dora", value=True,
              help="PEFT's use_dora: a magnitude vector per adapted matrix, what DoRA's forward keeps"),
    ]


def _allowance_rows():
    return [
        option("--metric", group="allowances", choices=METRIC_NAMES,
           field="metric", default="device", source=JOB_DEFAULTS, effect="output",
           commands=JOB_AND_SEARCH, search="same",
           help="which memory the total counts: device (nvidia-smi / cudaMemGetInfo, what must "
           "fit), reserved (torch.cuda.max_memory_reserved: no CUDA context, no NCCL buffers) "
           "or allocated (torch.cuda.max_memory_allocated: also no allocator reserve); whether "
           "the job fits is always judged on the device metric"),
        option("--workspace", group="allowances", type=T.bytes_or_zero, field="workspace",
           default=564 * 2**20, source=ALLOWANCES_SOURCE + ": 500 MiB CUDA context + 2 x 32 MiB "
           "cuBLAS / Transformer Engine workspaces", commands=JOB_AND_SEARCH, search="same",
           metavar="BYTES", help="CUDA context and kernels + GEMM workspaces"),
        option("--nccl-buffers", group="allowances", type=T.bytes_or_zero, field="nccl",
           default=512 * 2**20, source=ALLOWANCES_SOURCE + ": 4 communicators x 32 channels x 4 MiB",
           commands=JOB_AND_SEARCH, search="same", metavar="BYTES", help="NCCL communicator buffers"),
        option("--fragmentation", group="allowances", type=T.fragmentation, field="fragmentation",
           default="1/10", source=ALLOWANCES_SOURCE + ": Megatron-Bridge's memory-tuning guide",
           commands=JOB_AND_SEARCH, search="same", metavar="F",
           help="allocator fragmentation margin as a fraction of the peak-phase allocation "
           "(estimate calls a job within the capacity only without it \"tight\")"),
        option("--margin", group="allowances", type=T.margin, metavar="F|BYTES",
           commands=frozenset({"estimate", "solve", "plot"}) | SEARCH, search="same",
           effect="output", default=0, source="memsym: none, the --fragmentation allowance already covers the "
           "allocator",
           help="a safety margin a job must leave free to fit: a fraction 0..0.5 of the "
           "capacity (0.05) or a size (4GB); estimate judges fits against capacity - margin, "
           "search and min-gpus keep only the layouts within it, solve solves against it, plot "
           "breakdown and timeline draw capacity - margin"),
    ]


#: The commands that read a job from a file or recipe (search: the job whose layout it looks
#: for, memsym.cli.search_job).
_JOB_IN = JOB | {"search"}


def _input_rows():
    return [
        option("--args-file", group="framework", metavar="FILE", effect="input", commands=_JOB_IN,
           help="a file of pretrain_gpt.py or pretrain_hybrid.py arguments"),
        option("--launch-script", group="framework", metavar="SCRIPT.sh", effect="input",
           commands=_JOB_IN,
           help="a bash launch script: its torchrun pretrain_*.py command is read "
           "(assignments, arrays and $VAR substituted; never executed)"),
        option("--deepspeed-config", group="framework", metavar="ds_config.json", effect="input",
           commands=_JOB_IN,
           help="a DeepSpeed config (ZeRO stage, offload, bf16/fp16, batch) for MODEL; "
           "--world-size gives the data-parallel size"),
        option("--torchtitan-config", group="framework", metavar="JOB.toml|JOB.py[:FUNC]",
           effect="input", commands=_JOB_IN,
           help="a torchtitan job: a v0.2 TOML ([parallelism], [training], "
           "[activation_checkpoint], [float8]) or a newer Python config (config_registry.py"
           ":llama3_8b, read with ast, never run); the model from MODEL or the config's"),
        option(("--bridge-recipe", "--recipe"), "bridge_recipe", group="framework",
           metavar="NAME", effect="input", commands=frozenset({"estimate", "search"}),
           help="a Megatron-Bridge pretrain, SFT or PEFT (LoRA) recipe (run_recipe.py --recipe "
           "NAME, e.g. llama3_8b_pretrain_config, llama3_70b_peft_config); section.field=VALUE words and run_recipe.py's -tp/-gb/... "
           "override it, with Bridge's meaning; its model is memsym's preset for the recipe's "
           "checkpoint, else the checkpoint's config.json from the Hugging Face Hub (or its "
           "cache), else a MODEL given beside it, which replaces the recipe's"),
    ]


def _cluster_rows():
    pricing = frozenset({"estimate", "check"}) | SEARCH
    # plot (step-time, feasibility) and latex (the step-time section) price the step too
    drawn = frozenset({"plot", "latex"})
    return [
        option("--gpu", group="cluster", metavar="NAME", field="gpu", effect="memory, time",
           commands=JOB_AND_SEARCH, search="same",
           help="GPU from the catalogue (memsym gpus): the capacity is the total CUDA reports "
           "for it where cited (h100-80gb: 79.11 GiB), else its datasheet figure, unless "
           "--gpu-memory is given"),
        option("--gpus-per-node", group="cluster", type=T.positive_int, metavar="K",
           field="gpus_per_node", default=8, source="memsym.hardware (an HGX node; "
           "a gb200 or gb300 step is priced on the NVL72 compute tray of 4, its 72 GPUs one "
           "NVLink domain; a search keeps 8)",
           commands=pricing | drawn, search="same", effect="time",
           help="GPUs per node (t may not exceed it in a search)"),
        option("--intra-node-bandwidth", group="cluster", type=T.bandwidth, metavar="GB/s",
           commands=frozenset({"estimate", "check"}) | drawn, effect="time",
           source="the --gpu's NVLink",
           help="intra-node (NVLink) bandwidth per GPU [GB/s = 1e9 bytes/s]"),
        option("--inter-node-bandwidth", group="cluster", type=T.bandwidth, metavar="GB/s",
           commands=frozenset({"estimate", "check"}) | drawn, effect="time", default=50,
           source="memsym.hardware: 400 Gb/s InfiniBand per GPU",
           help="inter-node (InfiniBand/RoCE) bandwidth per GPU [GB/s]"),
        option("--efficiency", group="cluster", type=T.efficiency, metavar="ETA",
           commands=pricing | drawn, search="same", effect="time",
           source="memsym.timing: GEMM efficiency by shape and GPU class",
           help="override: every GEMM at this fraction of peak FLOP/s, 0.01 <= ETA <= 1"),
    ]


def _all_rows() -> tuple:
    return (*model_rows(), *_state_rows(), *_arch_rows(), *_layout_rows(), *_training_rows(),
            *_finetune_rows(), *_allowance_rows(), *_input_rows(), *_cluster_rows(),
            *time_rows(), *command_rows(), *check_rows()[1:])


#: The job options ``memsym time`` also takes (the same rows): with them it prices the job's
#: step with the step-time model (memsym.timing) instead of Narayanan's Eq. 4.
TIME_JOB_OPTIONS = frozenset({
    "tp", "pp", "cp", "ep", "etp", "vpp", "sequence_parallel", "seq_length", "micro_batch_size",
    "global_batch_size", "sharding", "no_flash_attn", "overlap_grad_reduce",
    "overlap_param_gather", "tp_comm_overlap", "gpus_per_node", "efficiency", "optimizer",
    "muon_tp_mode", "muon_num_ns_steps", "muon_nesterov", "mla_down_proj_fusion",
    # every other job option the step time reads (effect "time"), as estimate reads it
    "framework", "autocast", "fp8_recipe", "accelerate_fsdp", "fsdp_keep_gathered",
    "num_microbatches", "recompute_modules", "recompute_method", "recompute_num_layers",
    "schedule", "grad_reduce_in_bf16", "first_last_layers_bf16", "num_layers_at_start_in_bf16",
    "num_layers_at_end_in_bf16", "overlap_moe_expert_parallel_comm",
    "no_overlap_p2p_communication", "defer_embedding_wgrad_compute", "intra_node_bandwidth",
    "inter_node_bandwidth"})


def _with_time(rows) -> tuple:
    import dataclasses

    return tuple(dataclasses.replace(o, commands=o.commands | {"time"})
                 if o.dest in TIME_JOB_OPTIONS and "estimate" in o.commands else o for o in rows)


#: Every option of every subcommand (built once, at import: plain data and type functions).
OPTIONS: tuple = _with_time(_all_rows())


