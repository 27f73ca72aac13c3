"""Every option of every ``memsym`` subcommand, one row each (issue 28: one table of options).

A row says everything about one option: its names, how many values it takes and of what type,
the job option it sets (:data:`memsym.job.DEFAULTS` names), the value used when it is absent
and where that default comes from, whether it changes memory or time (or only what is shown),
and which subcommands take it (``memsym search`` and ``min-gpus`` take the same job options,
some of them as a list of values to try).  The argparse parsers of the subcommands
(:func:`add_options`), their ``--help`` text and the option reference
(``docs/options.md``, :func:`reference_markdown`) are generated from :data:`OPTIONS`; a test
fails when the reference is stale or when an option is declared anywhere else.

The Megatron-LM arguments a pasted launch command may carry are Megatron's own table
(:data:`memsym.readers._megatron_flags.FLAGS`, generated from Megatron-LM's ``arguments.py``);
the rows here that spell a Megatron-LM argument use Megatron's name first and its meaning.

Building a parser imports no SymPy.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..vocabulary import (CONVENTIONS, FINETUNES, FRAMEWORK_CONVENTIONS, FRAMEWORKS,
                          METRIC_NAMES, OFFLOADS, RECOMPUTE, RECOMPUTE_METHODS, SCHEDULES, SCHEMES)
from ..vocabulary import OPTIMIZER_NAMES as OPTIMIZERS
from ..vocabulary import PRECISION_NAMES as PRECISIONS
from . import options as T

__all__ = ["Option", "OPTIONS", "GROUPS", "JOB_COMMANDS", "SEARCH_COMMANDS", "add_options",
           "rows", "reference_markdown", "job_fields", "switches", "arch_options",
           "memsym_spellings", "PLOT_KINDS", "PLOT_UNKNOWNS", "SOLVE_UNKNOWNS", "help_text"]

#: The subcommands that take a whole job (MODEL, layout, training, allowances).
JOB_COMMANDS = ("estimate", "solve", "plot", "latex")
#: The subcommands that search layouts: the same job options, lists of values to try on top.
SEARCH_COMMANDS = ("search", "min-gpus")
_JOB = frozenset(JOB_COMMANDS)
_SEARCH = frozenset(SEARCH_COMMANDS)
_BOTH = _JOB | _SEARCH

#: Effects: what an option changes.
EFFECTS = ("memory", "time", "memory, time", "output", "input", "none")

#: Plot kinds, as the command line names them.
PLOT_KINDS = ("breakdown", "memory-vs", "feasibility")
#: Unknowns ``plot memory-vs`` draws against (registry names; b and s grow memory).
PLOT_UNKNOWNS = {"dp": "d", "d": "d", "tp": "t", "t": "t", "pp": "p", "p": "p", "cp": "c",
                 "c": "c", "micro-batch-size": "b", "b": "b", "seq-length": "s", "s": "s"}
#: ``memsym solve UNKNOWN``: unknown -> help (the unknowns of memsym.analysis.solve_job).
SOLVE_UNKNOWNS = {
    "dp": "smallest data-parallel size d that fits",
    "tp": "smallest tensor-parallel size t that fits",
    "pp": "smallest pipeline-parallel size p that fits",
    "cp": "smallest context-parallel size c that fits",
    "gpus": "fewest GPUs G = t p c d that fit (t, p, c fixed; d solved)",
    "micro-batch-size": "largest micro-batch size b that fits",
    "seq-length": "largest sequence length s that fits",
}

# Where defaults come from (cited once; a row names one of these or its own).
_JOB_DEFAULTS = "memsym.job.DEFAULTS"
_ALLOWANCES = "memsym.training.ALLOWANCES"
_MEGATRON = "Megatron-LM megatron/training/arguments.py (d98e8a64dd)"
_RECIPE = "the MODEL's recipe (memsym.model.RECIPES), else Megatron-LM's 0.1"


@dataclass(frozen=True)
class Option:
    """One option of the command line.

    Attributes
    ----------
    names : tuple of str
        Its spellings; the first is the one shown (Megatron-LM's where it has one).
    dest : str
        The argparse destination.
    group : str
        The help group (:data:`GROUPS`).
    commands : frozenset
        The subcommands that take it.
    effect : str
        What it changes (:data:`EFFECTS`).
    help : str
        What it means.
    type : callable, optional
        The value's type (validates; never evaluates text).
    nargs, const, choices, metavar, action, required
        As argparse's.
    field : str, optional
        The job option it sets (a :class:`memsym.job.Layout` / :class:`~memsym.job.Training`
        field, or an architecture field).
    value : object, optional
        For a flag: the value it sets ``field`` to.
    default : object, optional
        The value the job uses when the option is absent (documented; the parser's own default
        is None, so an absent option never looks given).
    source : str
        Where ``default`` comes from.
    search : str, optional
        How ``search`` / ``min-gpus`` take it: ``"list"`` (values to try), ``"same"``.
    search_help, search_type
        The list form's help and type, where they differ.
    exclusive : str, optional
        A mutually exclusive group's name.
    parser_default : object
        argparse's default, for the few output options whose default is a plain value.
    """

    names: tuple
    dest: str
    group: str
    commands: frozenset
    effect: str
    help: str
    type: object = None
    nargs: object = None
    const: object = None
    choices: tuple | None = None
    metavar: str | None = None
    action: str | None = None
    required: bool = False
    field: str | None = None
    value: object = None
    default: object = None
    source: str = ""
    search: str | None = None
    search_help: str | None = None
    search_type: object = None
    exclusive: str | None = None
    parser_default: object = None
    positional: bool = False


def _o(names, dest=None, *, group, commands=_JOB, effect="memory", help="", **kw) -> Option:
    names = (names,) if isinstance(names, str) else tuple(names)
    if dest is None:
        dest = names[0].lstrip("-").replace("-", "_")
    return Option(names=names, dest=dest, group=group, commands=frozenset(commands),
                  effect=effect, help=help, **kw)


def _flag(names, dest=None, **kw) -> Option:
    return _o(names, dest, action="store_true", **kw)


#: Help groups, in the order ``--help`` shows them.
GROUPS = {
    "input": "the job",
    "states": "model states (without MODEL: --params N)",
    "model": "model (Megatron-LM argument names)",
    "layout": "layout",
    "training": "training",
    "finetune": "fine-tuning (LoRA / QLoRA adapters on a frozen base)",
    "allowances": "allowances (set 0 to drop one)",
    "framework": "a framework's job (pretrain_gpt.py arguments pasted whole, with Megatron's "
                 "defaults: docs/howto-paste-launch-command.md; or a config file)",
    "cluster": "cluster (communication, bubble, FLOPs, step time, MFU)",
    "search": "search (values to try)",
    "time": "training time",
    "output": "output",
}

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
        out.append(_o("--" + name.replace("_", "-"), name, group="model", type=T.positive_int,
                      metavar="N", field=name, help=text, source="the MODEL",
                      commands=_BOTH, search="same"))
        if name == "num_experts":
            out.append(_o("--moe-layer-freq", "moe_layer_freq", group="model", metavar="Q|PATTERN",
                          field="moe_layer_freq", commands=_BOTH, search="same",
                          help="MoE every q-th layer, or a 0/1 pattern such as '([0]*3+[1]*58)' "
                          "(Megatron's moe_freq_type; parsed, not evaluated)", source="the MODEL"))
    out += [
        _flag("--group-query-attention", group="model", commands=_BOTH, search="same",
              help="GQA: --num-query-groups KV heads (without it Megatron ignores "
              "--num-query-groups)"),
        _flag("--swiglu", group="model", field="swiglu", value=True, commands=_BOTH,
              search="same", help="gated (SwiGLU) MLP"),
        _flag("--untie-embeddings-and-output-weights", group="model",
              field="untie_embeddings_and_output_weights", value=True, commands=_BOTH,
              search="same", help="a separate output layer"),
        _flag("--multi-latent-attention", group="model", field="multi_latent_attention",
              value=True, commands=_BOTH, search="same", help="MLA (DeepSeek-V2/V3)"),
        _o("--normalization", group="model", type=T.choice("normalization",
                                                              ("LayerNorm", "RMSNorm")),
           field="normalization", commands=_BOTH, search="same", help="LayerNorm or RMSNorm"),
        _flag("--should-pad-vocab", group="model", default=False,
              source="Megatron-Bridge GPTModelProvider.should_pad_vocab",
              help="pad the vocabulary to a multiple of 128 x TP, as Megatron-Bridge does when "
              "the vocabulary comes from the tokenizer (--convention megatron-bridge)"),
    ]
    return out


def _state_rows():
    return [
        _o("--params", group="states", type=T.count, metavar="N", effect="memory",
           help="total parameter count N (7000000000, 7e9, 7B, 1.5T) for the model states alone"),
        _o(("--dp", "--data-parallel-size"), "dp", group="states", type=T.positive_int,
           metavar="D", field="d", default=1, source=_JOB_DEFAULTS + " (no --world-size)",
           help="data-parallel size d"),
        _o(("--tensor-model-parallel-size", "--tp"), "tp", group="states", type=T.positive_int,
           metavar="T", field="t", default=1, source=_JOB_DEFAULTS, commands=_BOTH,
           search="list", help="tensor-parallel size t",
           search_help="the tensor-parallel sizes tried"),
        _o(("--pipeline-model-parallel-size", "--pp"), "pp", group="states",
           type=T.positive_int, metavar="P", field="p", default=1, source=_JOB_DEFAULTS,
           commands=_BOTH, search="list", help="pipeline-parallel size p",
           search_help="the pipeline-parallel sizes tried"),
        _o("--sharding", group="states", type=T.choice("sharding", SCHEMES), field="sharding",
           default="distributed-optimizer", commands=_BOTH, search="list",
           source=_JOB_DEFAULTS + " (Megatron-core's distributed optimizer, as the recipes); a "
           "Megatron-LM command without MODEL: ddp unless --use-distributed-optimizer",
           help="how model states are sharded over data parallel: " + ", ".join(SCHEMES),
           search_help="sharding schemes to try (default every scheme the framework has)"),
        _flag("--use-distributed-optimizer", group="states",
              help="Megatron's flag: same as --sharding distributed-optimizer"),
        _o("--convention", group="states",
           type=T.choice("convention", CONVENTIONS + FRAMEWORK_CONVENTIONS),
           parser_default="framework", default="framework", source="memsym: what the "
           "frameworks allocate", commands=_BOTH, search="same",
           help="framework (what Megatron-core / DeepSpeed / FSDP2 allocate; the distributed "
           "optimizer keeps the whole fp32 gradient buffer, 6 + 12/d bytes/param), seed000 "
           "(2 + 16/d; alias memsym), zero-paper (ZeRO §5), megatron-lm or megatron-bridge "
           "(the frameworks' estimators)"),
        _o("--precision", group="states", type=T.choice("precision", PRECISIONS),
           field="precision", default="bf16", commands=_BOTH, search="same",
           source=_JOB_DEFAULTS + " (bf16 mixed precision, as the recipes); a Megatron-LM "
           "command without MODEL: fp32 unless --bf16/--fp16",
           help="weight precision: " + ", ".join(PRECISIONS)),
        _o("--optimizer", group="states", type=T.choice("optimizer", OPTIMIZERS),
           field="optimizer", default="adam", source=_JOB_DEFAULTS + " (Megatron-LM's "
           "--optimizer adam)", commands=_BOTH, search="same",
           help="optimizer: " + ", ".join(OPTIMIZERS)),
        _o("--offload", group="states", type=T.choice("offload", OFFLOADS), field="offload",
           default="none", source=_JOB_DEFAULTS, commands=_BOTH, search="list",
           help="CPU offload: " + ", ".join(OFFLOADS), search_help="CPU offload modes to try"),
        _o("--gpu-memory", group="states", type=T.capacity, metavar="C", field="capacity",
           effect="output", commands=_BOTH, search="same", source="--gpu's capacity",
           help="GPU memory capacity: 80GB (1e9), 80GiB (2^30) or bytes"),
    ]


def _layout_rows():
    return [
        _o(("--context-parallel-size", "--cp"), "cp", group="layout", type=T.positive_int,
           field="c", default=1, source=_JOB_DEFAULTS, commands=_BOTH, search="list",
           metavar="C", help="context-parallel size c",
           search_help="the context-parallel sizes tried"),
        _o(("--expert-model-parallel-size", "--ep"), "ep", group="layout", type=T.positive_int,
           field="e", default=1, source=_JOB_DEFAULTS, commands=_BOTH, search="list",
           metavar="E", help="expert-parallel size e",
           search_help="the expert-parallel sizes tried"),
        _o(("--expert-tensor-parallel-size", "--etp"), "etp", group="layout",
           type=T.positive_int, field="t_e", metavar="T_E", source=_MEGATRON + ": t",
           help="expert tensor-parallel size (default t, as Megatron-core)"),
        _o(("--virtual-pipeline-model-parallel-size", "--vpp"), "vpp", group="layout",
           type=T.positive_int, field="v", metavar="V", commands=_BOTH, search="list",
           source="no interleaving (one model chunk per rank)",
           help="model chunks per pipeline rank v",
           search_help="the virtual-pipeline sizes tried"),
        _flag("--sequence-parallel", group="layout", field="sequence_parallel", value=True,
              default=False, source=_JOB_DEFAULTS,
              help="Megatron sequence parallelism (with t > 1)"),
        _o("--world-size", group="layout", type=T.positive_int, metavar="G",
           field="world_size", help="number of GPUs G = t*p*c*d (gives d when --dp is absent)"),
        _o("--decoder-first-pipeline-num-layers", "first_stage_layers", group="layout",
           type=T.positive_int, metavar="N", field="first_stage_layers", commands=_BOTH,
           search="same", source=_MEGATRON + ": the layers split evenly",
           help="layers on the first pipeline stage"),
        _o("--decoder-last-pipeline-num-layers", "last_stage_layers", group="layout",
           type=T.positive_int, metavar="N", field="last_stage_layers", commands=_BOTH,
           search="same", source=_MEGATRON + ": the layers split evenly",
           help="layers on the last pipeline stage"),
        _o("--pipeline-model-parallel-layout", "pipeline_layout", group="layout",
           metavar="LAYOUT", field="pipeline_layout",
           help="Megatron-Core's layout: the layers of each pipeline stage, e.g. "
           "'Et*4|(tttt|)*14,tmL' (E embedding, t decoder layer, m MTP, L loss)"),
        _flag("--account-for-embedding-in-pipeline-split", group="layout",
              field="account_for_embedding_in_pipeline_split", value=True,
              help="count the embedding as one layer of the pipeline split (Megatron)"),
        _flag("--account-for-loss-in-pipeline-split", group="layout",
              field="account_for_loss_in_pipeline_split", value=True,
              help="count the loss as one layer of the pipeline split (Megatron)"),
        _flag("--no-uneven-stages", group="search", commands=_SEARCH,
              help="do not offer uneven first/last pipeline stages (default: offered where the "
              "other stages split the rest evenly)"),
        _flag("--no-sequence-parallel", group="search", commands=_SEARCH,
              help="do not try Megatron sequence parallelism"),
    ]


# (flag, the job option it sets, the value it sets, help): Megatron's and torchtitan's
# switches that are plain store_true flags here as in the framework.
_SWITCH_ROWS = (
    ("--compiled-loss", "compiled_loss", True, "the loss runs under torch.compile (torchtitan's "
     "compile.enable with 'loss' in components): 16-bit logits kept, no fp32 copy", "memory"),
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
    ("--defer-embedding-wgrad-compute", "defer_embedding_wgrad_compute", True, "Megatron's "
     "flag (PP > 1): the output layer's weight gradients wait for the pipeline flush, and the "
     "last stage keeps each micro-batch's output-layer input and logits gradient until then",
     "memory, time"),
)


def _training_rows():
    return [
        _o("--seq-length", group="training", type=T.positive_int, metavar="S",
           field="seq_length", default=4096, commands=_BOTH, search="same",
           source=_JOB_DEFAULTS + " (capped by the model's position table)",
           help="sequence length s [tokens]"),
        _o("--micro-batch-size", group="training", type=T.positive_int, metavar="B",
           field="micro_batch_size", default=1, source=_JOB_DEFAULTS, commands=_BOTH,
           search="list", help="sequences per micro-batch b",
           search_help="micro-batch sizes to try (default 1 2 4 8)"),
        _o("--global-batch-size", group="training", type=T.positive_int, metavar="GB",
           field="global_batch_size", commands=_BOTH, search="same",
           source="b x d (one micro-batch per step); search: about 4M tokens per step",
           effect="memory, time", help="sequences per optimizer step"),
        _o("--num-microbatches", group="training", type=T.positive_int, metavar="M",
           field="num_microbatches", effect="memory, time",
           help="micro-batches per step m (instead of --global-batch-size)"),
        _o(("--recompute-granularity", "--recompute"), "recompute_granularity",
           group="training", choices=RECOMPUTE,
           field="recompute", default="none", source=_JOB_DEFAULTS + " (Megatron-LM without "
           "--recompute-granularity)", commands=_BOTH, search="list",
           search_type=T.recompute_mode, effect="memory, time",
           help="activation recomputation (selective-op: torchtitan's per-op SAC, dense "
           "gated-MLP layers with flash attention)",
           search_help="recompute modes to try (default all the framework offers; "
           "selective-op: torchtitan's per-op SAC; block-N: Megatron's --recompute-method "
           "block --recompute-num-layers N; every-N: torchtitan's selective_ac_option = \"N\")"),
        _o("--recompute-method", group="training", choices=RECOMPUTE_METHODS,
           field="recompute_method", effect="memory, time",
           source="every layer recomputed on its own",
           help="Megatron's: with full recompute, uniform = groups of --recompute-num-layers "
           "checkpointed, block = only the first N layers of each chunk; every = torchtitan's "
           "selective_ac_option N, every N-th block of a rank (--framework torchtitan)"),
        _o("--recompute-num-layers", group="training", type=T.layer_count, metavar="N",
           field="recompute_num_layers", effect="memory, time",
           help="Megatron's: layers per checkpointed group (uniform) or checkpointed layers "
           "per chunk (block; 0 checkpoints none, as Megatron runs it)"),
        _flag("--use-flash-attn", group="training", field="flash_attention", value=True,
              default=True, source=_JOB_DEFAULTS + " (Megatron-core's --attention-backend auto "
              "picks a fused kernel)", commands=_BOTH, search="same",
              help="flash/fused attention, no s^2 scores"),
        _flag(("--no-flash-attn", "--no-flash-attention"), "no_flash_attn", group="training",
              field="flash_attention", value=False, commands=_BOTH, search="same",
              help="unfused attention: keep the s^2 scores"),
        _flag("--dropout", group="training", field="dropout", value=True, commands=_BOTH,
              search="same", source=_RECIPE,
              help="keep dropout masks (as --hidden-dropout 0.1 --attention-dropout 0.1)"),
        _o("--hidden-dropout", group="training", type=T.dropout_option, field="dropout",
           commands=_BOTH, search="same", default=0.1, source=_RECIPE,
           help="0 keeps no dropout masks"),
        _o("--attention-dropout", group="training", type=T.dropout_option, field="dropout",
           commands=_BOTH, search="same", default=0.1, source=_RECIPE,
           help="0 keeps no dropout masks (memsym models one dropout setting)"),
        _o("--schedule", group="training", choices=SCHEDULES, field="schedule",
           default="1f1b", source=_JOB_DEFAULTS + " (Megatron's; interleaved with v > 1)",
           commands=_BOTH, search="same", effect="memory, time",
           help="pipeline schedule (gpipe: torch's ScheduleGPipe, with v > 1 "
           "ScheduleLoopedBFS: --framework torchtitan)"),
        _flag("--grad-reduce-in-bf16", group="training", field="grad_dtype", value="bf16",
              effect="memory, time",
              source=_MEGATRON + ": fp32 gradients under --bf16",
              help="Megatron's flag: a bf16 gradient buffer and bf16 data-parallel reduction; "
              "the optimizer step then makes an fp32 copy of the rank's shard"),
        _flag("--fp8-param-gather", group="training", field="fp8_param_gather", value=True,
              help="Megatron's flag (--precision fp8, distributed optimizer): the linear "
              "weights are kept in FP8 only"),
        _o("--framework", group="training", choices=FRAMEWORKS,
           field="framework", default="megatron", source=_JOB_DEFAULTS, commands=_BOTH,
           search="same", effect="memory, time",
           help="whose launch rules and runtime apply (torchtitan: FSDP2 with pipeline "
           "parallelism on torchtitan's own layer split)"),
        *(_flag(flag, group="training", field=field, value=value, help=text, effect=effect)
          for flag, field, value, text, effect in _SWITCH_ROWS),
        _o("--wgrad-deferral-limit", group="training", type=T.layer_count, metavar="N",
           field="wgrad_deferral_limit", default=0, source=_JOB_DEFAULTS + " (Megatron's: "
           "all)", help="Megatron's: with --defer-embedding-wgrad-compute, the most "
           "micro-batches deferred (0: all)"),
        _o("--moe-expert-capacity-factor", group="training", type=T.capacity_factor,
           field="capacity_factor", default=1, source="memsym: balanced routing",
           help="routed-token load of the busiest expert rank"),
    ]


def _finetune_rows():
    return [
        # Megatron-LM's --finetune (a flag: start from a checkpoint without its optimizer
        # state) is full fine-tuning, memory as training: the bare flag means --finetune full
        _o("--finetune", group="finetune", nargs="?", const="full",
           choices=FINETUNES, field="finetune", default="full",
           source=_JOB_DEFAULTS, commands=_BOTH, search="same",
           help="full training (the bare flag, as Megatron-LM's --finetune), LoRA (a frozen "
           "bf16 base) or QLoRA (an NF4 base)"),
        _o("--lora-rank", group="finetune", type=T.positive_int, metavar="R", field="lora_rank",
           default=16, source=_JOB_DEFAULTS, commands=_BOTH, search="same",
           help="the adapters' rank"),
        _o("--lora-targets", group="finetune", type=T.lora_targets, metavar="LIST",
           field="lora_targets", source="every linear layer",
           help="adapted matrices, comma-separated from q,k,v,o,gate,up,down"),
        _o("--lora-quantization", "quantization", group="finetune", metavar="FORMAT",
           field="quantization", source="bf16 for LoRA, nf4-dq for QLoRA",
           help="the frozen base's format (memsym.terms.adapters.QUANTIZATIONS)"),
        _flag("--lora-regather", group="finetune", field="lora_regather", value=True,
              help="Megatron-Bridge's LoRA(sequence_parallel_input_regather=True): LoRA-A keeps "
              "the local norm-output shard and re-gathers it in backward"),
    ]


def _allowance_rows():
    return [
        _o("--metric", group="allowances", choices=METRIC_NAMES,
           field="metric", default="device", source=_JOB_DEFAULTS, effect="output",
           commands=_BOTH, search="same",
           help="which memory the total counts: device (nvidia-smi / cudaMemGetInfo, what must "
           "fit), reserved (torch.cuda.max_memory_reserved: no CUDA context, no NCCL buffers) "
           "or allocated (torch.cuda.max_memory_allocated: also no allocator reserve); whether "
           "the job fits is always judged on the device metric"),
        _o("--workspace", group="allowances", type=T.bytes_or_zero, field="workspace",
           default=564 * 2**20, source=_ALLOWANCES + ": 500 MiB CUDA context + 2 x 32 MiB "
           "cuBLAS / Transformer Engine workspaces", commands=_BOTH, search="same",
           metavar="BYTES", help="CUDA context and kernels + GEMM workspaces"),
        _o("--nccl-buffers", group="allowances", type=T.bytes_or_zero, field="nccl",
           default=512 * 2**20, source=_ALLOWANCES + ": 4 communicators x 32 channels x 4 MiB",
           commands=_BOTH, search="same", metavar="BYTES", help="NCCL communicator buffers"),
        _o("--fragmentation", group="allowances", type=T.fragmentation, field="fragmentation",
           default="1/10", source=_ALLOWANCES + ": Megatron-Bridge's memory-tuning guide",
           commands=_BOTH, search="same", metavar="F",
           help="allocator fragmentation margin as a fraction of the peak"),
    ]


def _input_rows():
    return [
        _o("--args-file", group="framework", metavar="FILE", effect="input",
           help="a file of pretrain_gpt.py arguments"),
        _o("--launch-script", group="framework", metavar="SCRIPT.sh", effect="input",
           help="a bash launch script: its torchrun/pretrain_gpt.py command is read "
           "(assignments, arrays and $VAR substituted; never executed)"),
        _o("--deepspeed-config", group="framework", metavar="ds_config.json", effect="input",
           help="a DeepSpeed config (ZeRO stage, offload, bf16/fp16, batch) for MODEL; "
           "--world-size gives the data-parallel size"),
        _o("--torchtitan-config", group="framework", metavar="JOB.toml", effect="input",
           help="a torchtitan job TOML (v0.2 keys: [parallelism], [training], "
           "[activation_checkpoint], [float8]); the model from MODEL or its [model]"),
    ]


def _cluster_rows():
    pricing = frozenset({"estimate"}) | _SEARCH
    return [
        _o("--gpu", group="cluster", metavar="NAME", field="gpu", effect="memory, time",
           commands=_BOTH, search="same",
           help="GPU from the catalogue (memsym gpus): the capacity is the total CUDA reports "
           "for it where cited (h100-80gb: 79.11 GiB), else its datasheet figure, unless "
           "--gpu-memory is given"),
        _o("--gpus-per-node", group="cluster", type=T.positive_int, metavar="K",
           field="gpus_per_node", default=8, source="memsym.hardware (an HGX node)",
           commands=pricing, search="same", effect="time",
           help="GPUs per node (t may not exceed it in a search)"),
        _o("--intra-node-bandwidth", group="cluster", type=T.bandwidth, metavar="GB/s",
           commands=frozenset({"estimate"}), effect="time", source="the --gpu's NVLink",
           help="intra-node (NVLink) bandwidth per GPU [GB/s = 1e9 bytes/s]"),
        _o("--inter-node-bandwidth", group="cluster", type=T.bandwidth, metavar="GB/s",
           commands=frozenset({"estimate"}), effect="time", default=50,
           source="memsym.hardware: 400 Gb/s InfiniBand per GPU",
           help="inter-node (InfiniBand/RoCE) bandwidth per GPU [GB/s]"),
        _o("--efficiency", group="cluster", type=T.efficiency, metavar="ETA",
           commands=pricing, search="same", effect="time",
           source="memsym.timing: GEMM efficiency by shape and GPU class",
           help="override: every GEMM at this fraction of peak FLOP/s, 0.01 <= ETA <= 1"),
    ]


def _command_rows():
    """The options of one subcommand alone: what it asks or how it shows the answer."""
    est, plot, latex = frozenset({"estimate"}), frozenset({"plot"}), frozenset({"latex"})
    search, ming = frozenset({"search"}), frozenset({"min-gpus"})
    json_cmds = _BOTH | {"time", "models", "gpus"}
    return [
        _o("--gpus", group="search", type=T.positive_int, metavar="N", commands=search,
           required=True, effect="memory, time", help="number of GPUs (world size)"),
        _o("--top", group="output", type=T.top_count, metavar="K", commands=search,
           parser_default=10, default=10, source="memsym", effect="output",
           help="how many layouts to show, 1..1000 (memsym.limits.MAX_TOP)"),
        _o("--emit", group="output", choices=("megatron", "torchtitan", "deepspeed"),
           commands=search, effect="output",
           help="print each top layout as the framework's own input instead of the table: "
           "pretrain_gpt.py arguments, a torchtitan v0.2 job TOML fragment or a "
           "ds_config.json, and the memsym estimate command that reads it back; prices the "
           "layouts under that framework's rules (--framework); a layout the framework cannot "
           "spell is named in one line, not emitted"),
        _o("--emit-dir", group="output", metavar="DIR", commands=search, effect="output",
           help="with --emit: write one file per layout into DIR (created if missing; at most "
           "--top files): layout_N.txt (Megatron-LM argument file), layout_N.toml or "
           "layout_N.json"),
        _o("--max-gpus", group="search", type=T.positive_int, metavar="N", commands=ming,
           parser_default=1 << 17, default=1 << 17, source="memsym", effect="none",
           help="search bound"),
        _flag("--wide", group="output", commands=est, effect="output",
              help="each term's source on its line (wider than 100 columns)"),
        _flag("--advise", group="output", commands=est, effect="output",
              help="list the single changes that make the job fit (always when it does not): "
              "each knob's smallest change, solved and verified"),
        _o(("--output", "-o"), group="output", metavar="FILE", commands=plot, required=True,
           effect="output", help="FILE.png, FILE.pdf or FILE.svg"),
        _o(("--output", "-o"), group="output", metavar="FILE", commands=latex | {"bench"},
           effect="output", help="write to FILE instead of stdout"),
        _o("--vs", group="output", type=T.choice("unknown", tuple(PLOT_UNKNOWNS)),
           parser_default="dp", default="dp", source="memsym", commands=plot, effect="output",
           help="memory-vs: the unknown on the x axis (dp, tp, pp, cp, micro-batch-size, "
           "seq-length)"),
        _o("--candidates", group="output", type=T.candidates, metavar="LIST", commands=plot,
           effect="output", source="around the solution; powers of two for tp, pp, cp, "
           "seq-length", help="memory-vs: values to draw, 1,2,4,8 or 1:32"),
        _o("--x", "map_x", group="output", choices=("t", "p", "c", "d", "e", "v", "b"),
           parser_default="p", default="p", source="memsym", commands=plot, effect="output",
           help="feasibility: knob on the x axis"),
        _o("--y", "map_y", group="output", choices=("t", "p", "c", "d", "e", "v", "b"),
           parser_default="t", default="t", source="memsym", commands=plot, effect="output",
           help="feasibility: knob on the y axis"),
        _o("--map", "map_value", group="output", choices=("fits", "step_time", "headroom"),
           commands=plot, effect="output",
           source="step time with a global batch, else fits",
           help="feasibility: what a cell shows"),
        _o("--title", group="output", commands=plot, effect="output", source="the job",
           help="the plot's title"),
        _flag("--document", group="output", commands=latex, effect="output",
              exclusive="form", help="a standalone amsmath document"),
        _flag("--snippet", group="output", commands=latex, effect="output", exclusive="form",
              help="an align* block to \\input"),
        _flag("--markdown", group="output", commands=latex, effect="output", exclusive="form",
              help="Markdown with $$ math"),
        _o("--paper", group="output", type=T.choice("paper", ("a4", "letter")),
           parser_default="a4", default="a4", source="memsym", commands=latex,
           effect="output", help="--document: paper size, a4 or letter (2.5 cm margins)"),
        _o("--solve", group="output", type=T.choice("unknown", tuple(SOLVE_UNKNOWNS)),
           metavar="UNKNOWN", commands=latex, effect="output",
           help="also solve for " + ", ".join(SOLVE_UNKNOWNS) + " (needs --gpu-memory or "
           "--gpu)"),
        _flag("--quick", group="output", commands=frozenset({"bench"}), effect="output",
              help="small sizes (seconds): proves it runs"),
        _flag("--suite", group="output", commands=frozenset({"bench"}), effect="output",
              help="also time the full test suite"),
        _flag("--json", group="output", commands=json_cmds, effect="output",
              help="one JSON object on stdout"),
    ]


def _time_rows():
    tm = frozenset({"time"})
    return [
        _o("model", group="time", metavar="MODEL-or-PARAMS", commands=tm, positional=True,
           effect="time", help="a model preset name, a Hugging Face config.json, or a "
           "parameter count (7B, 175e9, 1T)"),
        _o("--tokens", group="time", type=T.tokens, metavar="T", commands=tm, required=True,
           effect="time", help="training tokens (300B, 15T, 3e11)"),
        _o("--gpu", group="time", metavar="NAME", commands=tm, parser_default="h100-80gb",
           default="h100-80gb", source="memsym", effect="time",
           help="GPU from the catalogue (memsym gpus): its peak dense FLOP/s"),
        _o("--gpus", group="time", type=T.positive_int, metavar="G", commands=tm,
           parser_default=8, default=8, source="memsym: one node", effect="time",
           help="number of GPUs"),
        _o("--precision", group="time", type=T.choice("precision", ("bf16", "fp16", "fp8")),
           commands=tm, field="precision", parser_default="bf16", default="bf16", source=_JOB_DEFAULTS,
           effect="time", help="which peak to use"),
        _o("--efficiency", group="time", type=T.efficiency, metavar="ETA", commands=tm,
           effect="time", default="1/2",
           source="memsym.terms.compute.DEFAULT_EFFICIENCY: Narayanan et al. 2021 Table 1 "
           "reaches 52% of A100 peak", help="achieved fraction of peak FLOP/s end to end "
           "(model FLOPs utilisation), 0.01 <= ETA <= 1"),
        _o("--tflops", group="time", type=T.tflops, metavar="X", commands=tm, effect="time",
           help="achieved TFLOP/s per GPU (overrides --gpu peak and --efficiency)"),
        _o(("--recompute-granularity", "--recompute"), "recompute", group="time",
           type=T.choice("recompute", ("full", "none")), commands=tm, parser_default="full",
           default="full", source="Narayanan et al. 2021 Eq. 4 as printed (8TN)",
           effect="time", help="full: 8*T*N; none: 6*T*N"),
        _o("--price-per-gpu-hour", group="time", type=T.price, metavar="X", commands=tm,
           effect="output", help="price of one GPU-hour (any currency) for the cost"),
    ]


def _model_rows():
    return (_o("kind", group="input", type=T.choice("plot", PLOT_KINDS), metavar="KIND",
               commands={"plot"}, effect="output", positional=True,
               help="breakdown, memory-vs or feasibility"),
            _o("model", group="input", metavar="MODEL", positional=True, commands=_BOTH,
              effect="memory, time", nargs="?",
              help="preset name (memsym models: llama3-70b, mixtral-8x7b, ...) or path to a "
              "Hugging Face config.json; its recipe (memsym.model.RECIPES) is the baseline"))


def _all_rows() -> tuple:
    return (*_model_rows(), *_state_rows(), *_arch_rows(), *_layout_rows(), *_training_rows(),
            *_finetune_rows(), *_allowance_rows(), *_input_rows(), *_cluster_rows(),
            *_time_rows(), *_command_rows())


#: Every option of every subcommand (built once, at import: plain data and type functions).
OPTIONS: tuple = _all_rows()


def rows(command: str) -> tuple:
    """The rows of ``command`` in help order."""
    order = list(GROUPS)
    mine = [o for o in OPTIONS if command in o.commands]
    return tuple(sorted(mine, key=lambda o: order.index(o.group)))


def _shown(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int) and value >= 2**20 and value % 2**20 == 0:
        return f"{value // 2**20} MiB"
    return str(value)


def help_text(o: Option, command: str) -> str:
    """The ``--help`` line of ``o`` in ``command``: its meaning and its default with the source."""
    listed = command in _SEARCH and o.search == "list"
    text = (o.search_help if listed and o.search_help else o.help)
    if o.default is not None and o.source:
        text += f" (default {_shown(o.default)}: {o.source})"
    elif o.source:
        text += f" (default: {o.source})"
    return text.replace("%", "%%")


def add_options(parser, command: str, *, skip=()) -> None:
    """Add the options of ``command`` (:data:`OPTIONS`) to an argparse ``parser``.

    Options absent from the command line are None (or False for a flag), never a value that
    looks given: a job's defaults are the job's (:data:`memsym.job.DEFAULTS`), the recipe's or
    the framework's, and reported as such.
    """
    groups, exclusive = {}, {}
    for o in rows(command):
        if o.dest in skip:
            continue
        if o.group not in groups:
            groups[o.group] = parser.add_argument_group(GROUPS[o.group])
        target = groups[o.group]
        if o.exclusive:
            if o.exclusive not in exclusive:
                exclusive[o.exclusive] = target.add_mutually_exclusive_group()
            target = exclusive[o.exclusive]
        listed = command in _SEARCH and o.search == "list"
        kw = {"help": help_text(o, command)}
        if o.action:
            kw["action"] = o.action
        else:
            kw["type"] = (o.search_type or o.type) if listed else o.type
            if kw["type"] is None:
                kw.pop("type")
            kw["nargs"] = "+" if listed else o.nargs
            if o.const is not None:
                kw["const"] = o.const
            if o.choices is not None and not (listed and o.search_type):
                kw["choices"] = o.choices
            if o.metavar:
                kw["metavar"] = o.metavar
        if o.positional:
            # MODEL is optional for a job (--params N estimates the model states alone),
            # required for a search
            kw.pop("nargs", None)
            if o.nargs is not None and command not in _SEARCH:
                kw.update(nargs=o.nargs, default=None)
            target.add_argument(o.dest, **kw)
            continue
        if command in _SEARCH and o.dest in ("gpu",):
            kw["required"] = True
        elif o.required:
            kw["required"] = True
        target.add_argument(*o.names, dest=o.dest, default=o.parser_default, **kw)


# ---------------------------------------------------------------------------------------------
# what the rest of the CLI reads from the table
# ---------------------------------------------------------------------------------------------
def job_fields(command: str = "estimate") -> tuple:
    """``(dest, job option)`` of the valued (non-flag) options that set one job option each."""
    skip = {"hidden_dropout", "attention_dropout", "sharding", "gpu", "gpu_memory",
            "gpus_per_node", "metric", "workspace", "nccl_buffers", "fragmentation",
            "world_size", "framework", "convention"}
    return tuple((o.dest, o.field) for o in rows(command)
                 if o.field and not o.action and o.dest not in skip and o.group not in
                 ("model",) and not o.positional)


def switches() -> tuple:
    """``(flag, dest, job option, value)`` of the framework switches (plain store_true flags)."""
    names = {r[0] for r in _SWITCH_ROWS}
    return tuple((o.names[0], o.dest, o.field, o.value) for o in OPTIONS if o.names[0] in names)


def arch_options() -> tuple:
    """The destinations of the valued architecture options (Megatron-LM's names)."""
    return tuple(o.dest for o in OPTIONS if o.group == "model" and not o.action
                 and o.dest != "normalization")


def memsym_spellings() -> dict:
    """memsym's shorthand of a Megatron-LM argument -> Megatron's spelling (``--tp`` ->
    ``--tensor-model-parallel-size``): rows whose first name is Megatron's."""
    out = {}
    for o in OPTIONS:
        if len(o.names) > 1 and _JOB & o.commands and o.names[0].startswith("--") \
                and o.dest not in ("no_flash_attn", "dp"):
            for alias in o.names[1:]:
                if alias.startswith("--"):
                    out[alias] = o.names[0]
    return out


def reference_markdown() -> str:
    """``docs/options.md``: every option of every subcommand, generated from :data:`OPTIONS`."""
    lines = ["# Options reference", "",
             "Generated from `memsym/cli/option_table.py` (`python -m tools.option_reference`);",
             "`tests/test_option_table.py` fails when this page is stale. Every option is one row",
             "of that table: its names, the job option it sets, its default and where the",
             "default comes from, what it changes, and the subcommands that take it. A pasted",
             "Megatron-LM launch command may also carry any argument of Megatron-LM's own table",
             "(`memsym/readers/_megatron_flags.py`), read with Megatron's meaning",
             "(docs/howto-paste-launch-command.md).", ""]
    for key, title in GROUPS.items():
        members = [o for o in OPTIONS if o.group == key]
        if not members:
            continue
        lines += [f"## {title[0].upper() + title[1:]}", "",
                  "| option | sets | default | changes | commands | meaning |",
                  "|---|---|---|---|---|---|"]
        for o in members:
            names = ", ".join(f"`{n}`" for n in o.names) if not o.positional \
                else f"`{o.metavar or o.dest.upper()}`"
            dflt = "" if o.default is None else f"{_shown(o.default)}"
            if o.source:
                dflt = f"{dflt} ({o.source})" if dflt else o.source
            cmds = " ".join(c + ("[list]" if c in _SEARCH and o.search == "list" else "")
                            for c in _ordered(o.commands))
            cells = [names, f"`{o.field}`" if o.field else "", dflt, o.effect, cmds, o.help]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _ordered(commands) -> list:
    order = list(JOB_COMMANDS) + list(SEARCH_COMMANDS) + ["time", "bench", "models", "gpus"]
    return sorted(commands, key=lambda c: order.index(c) if c in order else len(order))
