"""Read a Megatron-LM ``pretrain_gpt.py`` argument list with Megatron's own defaults and rules.

This module owns the translation of a pasted command (optionally preceded by ``torchrun`` and its
options) into plain data: the architecture (``memsym.model.Architecture`` field names), the
layout, training, precision and optimizer settings, the arguments ignored and the defaults applied.

Revision read: NVIDIA/Megatron-LM ``d98e8a64dd`` (main, 2026-08-22).  ``args`` below means
``megatron/training/arguments.py``, ``TC`` ``megatron/core/transformer/transformer_config.py``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Sequence

from ..errors import InvalidValueError, MemsymError, UnknownNameError
from ..text import looks_like_option   # argparse's rule, shared with the CLI's reading
from ..vocabulary import recompute_modules
from ._megatron_flags import FLAGS
from .megatron_pattern import MAX_PATTERN_CHARS, parse_moe_layer_freq
from .recipe_mechanisms import megatron_mechanism_options
from ._values import (MAX_ARGS, MAX_BATCH, MAX_GPUS, MAX_HEADS, MAX_HIDDEN, MAX_LAYERS, MAX_SEQ,
                      MAX_VOCAB, MAX_WORD, fraction, whole)

__all__ = ["MegatronJob", "MegatronOverrides", "read_megatron_args", "read_megatron_overrides", "megatron_arity", "looks_like_option", "SCHEDULE_ENTRY", "parse_moe_layer_freq", "KNOWN_TOKENIZER_VOCAB",
           "MAX_LAYERS", "MAX_HIDDEN", "MAX_HEADS", "MAX_VOCAB", "MAX_SEQ", "MAX_GPUS",
           "MAX_PATTERN_CHARS"]


#: Megatron-FSDP's --data-parallel-sharding-strategy -> the scheme that shards the same
#: states (megatron/core/distributed/fsdp: no_shard keeps everything, optim shards the
#: optimizer states, optim_grads also the gradients, optim_grads_params also the weights).
MEGATRON_FSDP_SCHEMES = {"no_shard": "ddp", "optim": "distributed-optimizer",
                         "optim_grads": "zero2", "optim_grads_params": "fsdp"}


@dataclass(frozen=True)
class MegatronJob:
    """A Megatron-LM job as plain data, read from its argument list.

    Attributes
    ----------
    architecture : dict
        Keyword arguments of :class:`memsym.model.Architecture` (Megatron's names).
    layout : dict
        ``t, p, c, e, t_e, v, sequence_parallel, first_stage_layers, last_stage_layers,
        world_size`` and ``d`` (data-parallel size [GPUs], only when the world size is known).
    training : dict
        ``seq_length`` [tokens], ``micro_batch_size``/``global_batch_size`` [sequences],
        ``num_microbatches``, the recompute settings, attention backend, dropouts (Fractions).
    precision : dict
        Parameter, gradient-reduce and main-parameter dtypes, FP8 and the precision-aware optimizer.
    optimizer : dict
        Optimizer, distributed optimizer, Megatron-FSDP / torch FSDP2, overlaps and buckets.
    ignored : tuple of str
        Arguments accepted that do not change memory or time, each listed once.
    notes : tuple of str
        Defaults applied and rules used that the user should know.
    defaults : tuple of (str, object, str)
        Megatron's argument defaults that decide memory and time and were not given:
        ``(job option, value, where)`` (:data:`MEGATRON_DEFAULTS`).
    """

    architecture: dict
    layout: dict
    training: dict
    precision: dict
    optimizer: dict
    ignored: tuple
    notes: tuple
    defaults: tuple = ()


_ARGS = "Megatron-LM megatron/training/arguments.py (d98e8a64dd)"

#: Megatron's defaults that decide memory or time, reported when a command leaves them out:
#: (job option, the arguments that set it, its value by default, where the default is).
MEGATRON_DEFAULTS = (
    ("precision", ("bf16", "fp16", "fp8"), "fp32", f"{_ARGS}: --bf16 and --fp16 are store_true"),
    ("sharding", ("use_distributed_optimizer", "use_megatron_fsdp", "use_torch_fsdp2"), "ddp",
     f"{_ARGS}: --use-distributed-optimizer is store_true (plain DDP)"),
    ("dropout", ("hidden_dropout", "attention_dropout"), True,
     f"{_ARGS}: --hidden-dropout and --attention-dropout default 0.1"),
    ("recompute", ("recompute_granularity", "recompute_activations"), "none",
     f"{_ARGS}: --recompute-granularity default None"),
    ("flash_attention", ("attention_backend", "use_flash_attn", "transformer_impl"), True,
     f"{_ARGS}: --attention-backend auto (Transformer Engine picks a fused kernel)"),
    ("optimizer", ("optimizer",), "adam", f"{_ARGS}: --optimizer adam"),
    ("position_embedding_type", ("position_embedding_type", "use_rotary_position_embeddings"),
     "learned_absolute", f"{_ARGS}: --position-embedding-type learned_absolute"),
    ("add_bias_linear", ("add_bias_linear",), True,
     f"{_ARGS}: biases unless --disable-bias-linear"),
    ("untie_embeddings_and_output_weights", ("untie_embeddings_and_output_weights",), False,
     f"{_ARGS}: the output layer shares the embedding unless "
     "--untie-embeddings-and-output-weights"),
)


# ----------------------------------------------------------------------------------------------
# the argument table
# ----------------------------------------------------------------------------------------------

# torchrun's own options (torch/distributed/run.py:get_args_parser): both spellings are accepted
# by torchrun; the values are the launcher's, not the training script's.
_TORCHRUN = {
    "--nproc_per_node": ("torchrun_nproc_per_node", 1, None),
    "--nproc-per-node": ("torchrun_nproc_per_node", 1, None),
    "--nnodes": ("torchrun_nnodes", 1, None),
    "--node_rank": ("torchrun_node_rank", 1, None), "--node-rank": ("torchrun_node_rank", 1, None),
    "--master_addr": ("torchrun_master_addr", 1, None),
    "--master-addr": ("torchrun_master_addr", 1, None),
    "--master_port": ("torchrun_master_port", 1, None),
    "--master-port": ("torchrun_master_port", 1, None),
    "--rdzv_backend": ("torchrun_rdzv", 1, None), "--rdzv-backend": ("torchrun_rdzv", 1, None),
    "--rdzv_endpoint": ("torchrun_rdzv", 1, None), "--rdzv-endpoint": ("torchrun_rdzv", 1, None),
    "--rdzv_id": ("torchrun_rdzv", 1, None), "--rdzv-id": ("torchrun_rdzv", 1, None),
    "--max_restarts": ("torchrun_max_restarts", 1, None),
    "--max-restarts": ("torchrun_max_restarts", 1, None),
    "--standalone": ("torchrun_standalone", 0, True),
}

# memsym's own additions: Megatron reads the world size from the WORLD_SIZE environment variable
# (args: parse_args, ``int(os.getenv("WORLD_SIZE", '1'))``), so a pasted command never carries it.
_MEMSYM = {"--world-size": ("world_size", 1, None)}

# Flags of older Megatron releases still seen in scripts: the legacy VPP spelling.
_LEGACY = {"--virtual-pipeline-model-parallel-size": ("virtual_pipeline_model_parallel_size", 1, None),
           # examples/rl/model_configs/qwen3_30b_a3b_moe.sh passes it; the parser at d98e8a64dd
           # does not define it (train_rl.py parses with its extra provider), so it is accepted
           # here as a tokenizer option without effect on memory.
           "--tokenizer-hf-include-special-tokens": ("tokenizer_hf_include_special_tokens", 0, True)}

_TABLE = {**FLAGS, **_TORCHRUN, **_MEMSYM, **_LEGACY}

# Destinations whose value this reader models; every other accepted argument is "ignored".
_MODELLED = {
    "num_layers", "hidden_size", "num_attention_heads", "group_query_attention", "num_query_groups",
    "kv_channels", "ffn_hidden_size", "swiglu", "quick_geglu", "squared_relu", "normalization",
    "vocab_size", "make_vocab_size_divisible_by", "tokenizer_type", "tokenizer_model", "vocab_file",
    "pad_vocab_size", "untie_embeddings_and_output_weights", "position_embedding_type",
    "use_rotary_position_embeddings", "add_position_embedding", "max_position_embeddings",
    "add_bias_linear", "add_qkv_bias", "num_experts", "moe_router_topk", "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size", "moe_shared_expert_gate", "moe_layer_freq",
    "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
    "v_head_dim", "mtp_num_layers", "qk_layernorm", "moe_router_enable_expert_bias",
    "moe_grouped_gemm",
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
    "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel",
    "num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
    "virtual_pipeline_model_parallel_size", "pipeline_model_parallel_layout",
    "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers", "world_size",
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
    "torchrun_nproc_per_node", "torchrun_nnodes", "overlap_p2p_comm",
    "seq_length", "encoder_seq_length", "decoder_seq_length", "micro_batch_size",
    "global_batch_size", "rampup_batch_size", "step_batch_size_schedule", "recompute_activations", "recompute_granularity",
    "recompute_method", "recompute_num_layers", "recompute_modules", "moe_layer_recompute",
    "distribute_saved_activations",
    "attention_backend", "use_flash_attn", "transformer_impl", "hidden_dropout",
    "attention_dropout",
    "bf16", "fp16", "fp8", "fp8_recipe", "fp8_param_gather", "grad_reduce_in_bf16",
    "accumulate_allreduce_grads_in_fp32", "use_precision_aware_optimizer", "main_grads_dtype",
    "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype",
    "optimizer", "use_distributed_optimizer", "use_megatron_fsdp", "megatron_fsdp_version",
    "data_parallel_sharding_strategy", "megatron_fsdp_main_grads_dtype",
    "megatron_fsdp_main_params_dtype", "megatron_fsdp_grad_comm_dtype", "use_torch_fsdp2",
    "overlap_grad_reduce", "overlap_param_gather", "ddp_bucket_size", "tp_comm_overlap",
    "overlap_moe_expert_parallel_comm", "defer_embedding_wgrad_compute", "wgrad_deferral_limit",
    "cp_comm_type", "cpu_offloading_num_layers", "cross_entropy_loss_fusion", "cross_entropy_fusion_impl",
}

# Accepted, but they change the model's structure in ways memsym's Architecture cannot express:
# refused rather than silently dropped (the count would be wrong).
_STRUCTURE_NOT_MODELLED = {
    "moe_latent_size": "latent MoE projections",
    "hybrid_layer_pattern": "hybrid Mamba/attention layer patterns",
    "heterogeneous_layers_config_path": "heterogeneous per-layer configurations",
    "experimental_attention_variant": "gated-delta-net / DSA attention variants",
    "num_experts_per_layer": "per-layer expert counts",
}

# Accepted and listed, but they change memory in ways memsym does not model (said in the notes).
_MEMORY_NOT_MODELLED = {
    "optimizer_cpu_offload": "optimizer CPU offload", "fp4": "FP4 (NVFP4) training",
    "enable_cuda_graph": "CUDA graphs", "external_cuda_graph": "CUDA graphs",
    "fine_grained_activation_offloading": "fine-grained activation offloading",
    "moe_expert_capacity_factor": "expert capacity (token dropping)",
}

# Cited vocabulary sizes of tokenizers a launch script names but memsym cannot open.
KNOWN_TOKENIZER_VOCAB = {
    # GPT-2 BPE: gpt2-vocab.json (encoder.json) has 50257 entries; Hugging Face openai-community/gpt2
    # config.json "vocab_size": 50257.  Megatron's GPT2BPETokenizer.vocab_size = len(encoder).
    "GPT2BPETokenizer": 50257,
    # Hugging Face config.json "vocab_size" of each repository (the embedding rows published).
    "meta-llama/Llama-2-7b-hf": 32000,
    "meta-llama/Meta-Llama-3-8B": 128256,
    "meta-llama/Llama-3.1-8B": 128256,
    "mistralai/Mixtral-8x7B-v0.1": 32000,
    "deepseek-ai/DeepSeek-V3": 129280,
    "Qwen/Qwen3-30B-A3B": 151936,
}


def _tokenizer_vocab_note(name: str, size: int) -> str:
    return (f"vocabulary {size} for tokenizer {name!r} (the published config.json vocab_size; "
            "Megatron's HuggingFaceTokenizer uses len(tokenizer), which can be smaller: add "
            "--vocab-size N to use another)")


def _not_modelled(r, name: str, dest: str) -> bool:
    """Refuse an argument that changes the model's structure beyond memsym's Architecture;
    note one that changes memory in a way memsym does not model (True when noted)."""
    if r.raw[dest] in (None, False):
        return False
    if dest in _STRUCTURE_NOT_MODELLED:
        raise InvalidValueError(f"{name} ({_STRUCTURE_NOT_MODELLED[dest]}) changes the model in "
                                "a way memsym does not model")
    if dest in _MEMORY_NOT_MODELLED:
        r.note(f"{name}: {_MEMORY_NOT_MODELLED[dest]} changes memory and is not modelled")
        return True
    return False


def megatron_arity(name: str):
    """How many values the Megatron-LM argument (or torchrun option) ``name`` takes: 0, 1,
    ``'+'``/``'*'`` or a count; None when Megatron does not accept it.

    >>> megatron_arity("--bf16"), megatron_arity("--lr"), megatron_arity("--recompute-modules")
    (0, 1, '+')
    """
    row = _TABLE.get(name)
    return None if row is None else row[1]


class ArgumentError(UnknownNameError):
    """An argument pretrain_gpt.py does not accept (with the closest spellings)."""

    def __init__(self, name: str):
        MemsymError.__init__(self, "")
        self.kind, self.name = "Megatron-LM argument", name
        self.accepted = sorted(_TABLE)
        self.suggestions = difflib.get_close_matches(name, self.accepted, n=3, cutoff=0.6)
        hint = (f"; did you mean {' or '.join(self.suggestions)}?" if self.suggestions else
                " (see `python pretrain_gpt.py --help` for the accepted arguments)")
        self.args = (f"unknown Megatron-LM argument {name[:80]!r}{hint}",)

    def __str__(self):
        return self.args[0]


# ----------------------------------------------------------------------------------------------
# the argv parser (argparse's grammar for this table; nothing is evaluated)
# ----------------------------------------------------------------------------------------------

#: One entry of ``--step-batch-size-schedule`` ("2.4B:320"): the words an unquoted array
#: split off its value, taken back by the readers.
SCHEDULE_ENTRY = re.compile(r"[0-9]+(?:\.[0-9]+)?[KMBT]?:[0-9]+")

_PROGRAMS = {"torchrun", "python", "python3", "-m", "torch.distributed.run",
             "torch.distributed.launch", "-u", "uv", "run"}


def _parse(argv: Sequence[str]):
    if isinstance(argv, (str, bytes)):
        raise InvalidValueError("read_megatron_args takes a list of arguments, not one string "
                                "(split it first, e.g. with shlex.split)")
    argv = list(argv)
    if len(argv) > MAX_ARGS:
        raise InvalidValueError(f"argument list too long: {len(argv)} words (at most {MAX_ARGS})")
    for w in argv:
        if not isinstance(w, str):
            raise InvalidValueError(f"arguments must be strings, got {type(w).__name__}")
        if len(w) > MAX_WORD:
            raise InvalidValueError(f"argument longer than {MAX_WORD} characters: {w[:40]!r}...")
    # A pasted command line: `torchrun [options] pretrain_gpt.py [args]`.  The launcher part is
    # what precedes the first word naming a Python script.
    start = 0
    launched = bool(argv) and (argv[0] in _PROGRAMS or argv[0].endswith(("torchrun", ".py"))
                               or argv[0].rsplit("/", 1)[-1].startswith("python"))
    for i, w in enumerate(argv if launched else ()):
        if not w.startswith("-") and w.endswith(".py"):
            start = i + 1
            break
    words = [w for w in argv[:start - 1] if w not in _PROGRAMS and not w.endswith("torchrun")] \
        if start else []
    words += argv[start:]
    values, order, spelled, split_schedule = {}, [], {}, []
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if not looks_like_option(w):
            raise InvalidValueError(
                f"unexpected word {w[:60]!r}: pretrain_gpt.py takes no positional arguments "
                "(is it the value of a flag that takes none, or a value with a space in it?)")
        name, eq, inline = w.partition("=")
        if name not in _TABLE:
            raise ArgumentError(name)
        dest, arity, const = _TABLE[name]
        if arity == 0:
            if eq:
                raise InvalidValueError(f"{name} takes no value, got {w[:60]!r}")
            val = const
        else:
            got = [inline] if eq else []
            if not eq or arity in ("+", "*"):
                while i < len(words) and not looks_like_option(words[i]):
                    if isinstance(arity, int) and len(got) == arity:
                        break
                    got.append(words[i])
                    i += 1
            if arity == 1:
                if len(got) != 1:
                    raise InvalidValueError(f"{name} needs a value")
                val = got[0]
            elif arity == "+" and not got:
                raise InvalidValueError(f"{name} needs one or more values")
            elif isinstance(arity, int) and arity > 1 and len(got) != arity:
                raise InvalidValueError(f"{name} needs {arity} values, got {len(got)}")
            else:
                val = tuple(got)
        if dest == "step_batch_size_schedule":
            # `--step-batch-size-schedule "0:16 2.4B:320 ..."` passed through an unquoted
            # ${ARR[@]} (examples/gpt3/train_gpt3_175b_distributed.sh) reaches argparse as
            # several words, which Megatron refuses; the schedule's own words are taken back.
            extra = 0
            while i < len(words) and SCHEDULE_ENTRY.fullmatch(words[i]):
                val += " " + words[i]
                i += 1
                extra += 1
            if extra:
                split_schedule.append(name)
        if dest not in values:
            order.append(name)
        values[dest] = val                # argparse: the last occurrence wins
        spelled[dest] = name
    if split_schedule:
        values["_split_schedule"] = True
    return values, order, spelled


# ----------------------------------------------------------------------------------------------
# resolution: validate_args and TransformerConfig.__post_init__, in plain data
# ----------------------------------------------------------------------------------------------

_RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                      "shared_experts", "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc")


def read_megatron_args(argv: Sequence[str]) -> MegatronJob:
    """Read a ``pretrain_gpt.py`` argument list (optionally after ``torchrun`` and its options).

    Defaults and checks are Megatron-LM's (``validate_args``, ``TransformerConfig``): biases on
    unless ``--disable-bias-linear``, learned absolute positions, ``ffn_hidden_size`` 4h (swiglu:
    ``int(4h·2/3/64)·64``), GQA only with ``--group-query-attention``, the distributed optimizer
    only with its flag, and so on; ``--world-size`` (memsym's; Megatron reads WORLD_SIZE from
    the environment) or torchrun's ``--nproc_per_node`` × ``--nnodes`` give the world size [GPUs].

    Parameters
    ----------
    argv : sequence of str
        The words of the command, as a shell splits them.

    Returns
    -------
    MegatronJob

    Raises
    ------
    UnknownNameError
        An argument Megatron does not accept (with the closest spellings).
    InvalidValueError
        A value of the wrong kind or range, or a combination ``validate_args`` refuses.

    References
    ----------
    Megatron-LM ``megatron/training/arguments.py`` (``validate_args``, ``moe_freq_type``),
    ``megatron/core/transformer/transformer_config.py`` (``__post_init__``),
    ``megatron/core/tokenizers/utils/build_tokenizer.py`` at ``d98e8a64dd``.

    Examples
    --------
    >>> job = read_megatron_args(["--num-layers", "2", "--hidden-size", "64",
    ...     "--num-attention-heads", "4", "--seq-length", "128", "--micro-batch-size", "1",
    ...     "--vocab-size", "1000", "--tokenizer-type", "NullTokenizer", "--lr", "1e-4"])
    >>> job.architecture["max_position_embeddings"], job.architecture["add_bias_linear"]
    (128, True)
    >>> job.ignored
    ('--lr',)
    """
    raw, order, spelled = _parse(argv)
    r = _Reader(raw, spelled)
    arch = r.architecture()
    layout = r.layout(arch)
    training = r.training(arch, layout)
    precision = r.precision(layout)
    optimizer = r.optimizer(arch, layout, precision)
    ignored = []
    for name in order:
        dest = _TABLE[name][0]
        _not_modelled(r, name, dest)
        if dest not in _MODELLED:
            ignored.append(name)
    defaults = tuple((option, value, where) for option, dests, value, where in MEGATRON_DEFAULTS
                     if not any(r.given(d) for d in dests))
    return MegatronJob(architecture=arch, layout=layout, training=training, precision=precision,
                       optimizer=optimizer, ignored=tuple(ignored), notes=tuple(r.notes),
                       defaults=defaults)


@dataclass(frozen=True)
class MegatronOverrides:
    """Megatron-LM arguments read as changes to a model's recipe (a preset or config.json).

    Attributes
    ----------
    options : dict
        :func:`memsym.job.job` options (Architecture, Layout and Training fields) the
        arguments set, each with Megatron's meaning.
    ignored : tuple of str
        Arguments accepted that do not change memory or time, each listed once.
    notes : tuple of str
        What was assumed, and arguments that change memory in ways memsym does not model.
    """

    options: dict
    ignored: tuple
    notes: tuple


#: Megatron's switches that set one job option to a constant when given (dest -> (option,
#: value)); ``add_bias_linear`` is ``--disable-bias-linear``'s dest (store_false).
_OVERRIDE_SWITCHES = {
    "bf16": ("precision", "bf16"), "fp16": ("precision", "fp16"),
    "add_qkv_bias": ("add_qkv_bias", True), "qk_layernorm": ("qk_layernorm", True),
    "moe_shared_expert_gate": ("moe_shared_expert_gate", True),
    "quick_geglu": ("swiglu", True), "squared_relu": ("swiglu", False),
    "use_rotary_position_embeddings": ("position_embedding_type", "rope"),
    "use_precision_aware_optimizer": ("precision_aware", True),
    "use_torch_fsdp2": ("sharding", "fsdp"),
    "recompute_activations": ("recompute", "selective"),
}

#: Accepted with a model and changing nothing memsym counts (the model's own vocabulary and
#: fp32 gradient accumulation stand; buckets, grouped GEMMs, the expert-bias buffer, and the
#: native fused loss, which keeps the fp32 softmax memsym counts).
_OVERRIDE_NO_EFFECT = {"accumulate_allreduce_grads_in_fp32", "ddp_bucket_size",
                       "moe_grouped_gemm", "moe_router_enable_expert_bias", "tokenizer_type",
                       "tokenizer_model", "vocab_file", "cross_entropy_loss_fusion"}


def read_megatron_overrides(argv: Sequence[str], *, num_layers: int, p: int = 1,
                            has_experts: bool = False) -> MegatronOverrides:
    """Read Megatron-LM arguments as changes to a model memsym already knows.

    With a MODEL (a preset or config.json) the model's recipe is the baseline and each
    argument given changes what it means in Megatron-LM; an argument not given changes
    nothing (Megatron's own defaults apply only to a command read without a model,
    :func:`read_megatron_args`).  Arguments without effect on memory or time are listed as
    ignored, ones whose effect memsym does not model are noted, and ones that change the
    model's structure beyond memsym's Architecture are refused.

    Parameters
    ----------
    argv : sequence of str
        Megatron-LM arguments (and torchrun's options) that memsym's own options do not
        spell; the words as a shell splits them.
    num_layers : int
        The model's decoder layers [layers] (``--moe-layer-freq`` patterns, VPP sizes).
    p : int
        Pipeline-parallel size [GPUs] (``--num-layers-per-virtual-pipeline-stage``).
    has_experts : bool
        Whether the model has experts (``--disable-bias-linear`` also drops router biases).

    Returns
    -------
    MegatronOverrides

    References
    ----------
    Megatron-LM ``megatron/training/arguments.py`` at ``d98e8a64dd`` (each option's dest and
    ``validate_args``).

    Examples
    --------
    >>> o = read_megatron_overrides(["--bf16", "--lr", "3e-4", "--position-embedding-type",
    ...                              "rope", "--moe-layer-freq", "[0]*1+[1]*3"], num_layers=4)
    >>> o.options["precision"], o.options["position_embedding_type"], o.options["moe_layer_freq"]
    ('bf16', 'rope', (0, 1, 1, 1))
    >>> o.ignored
    ('--lr',)
    """
    raw, order, spelled = _parse(argv)
    r = _Reader(raw, spelled)
    opts, ignored = {}, []
    if r.flag("bf16") and r.flag("fp16"):
        raise InvalidValueError("--bf16 and --fp16 are mutually exclusive")
    for dest, (option, value) in _OVERRIDE_SWITCHES.items():
        if r.flag(dest):
            opts[option] = value
    if r.given("add_bias_linear") and raw["add_bias_linear"] is False:   # --disable-bias-linear
        opts["add_bias_linear"] = False
        if has_experts:   # router.py: the router's bias exists iff add_bias_linear
            opts["moe_router_bias"] = False
    if r.given("position_embedding_type"):
        pos = r.choice("position_embedding_type", ("learned_absolute", "rope", "yarn", "mrope",
                                                   "relative", "none"))
        if pos == "relative":
            raise InvalidValueError("--position-embedding-type relative (a learned relative-"
                                    "attention bias) is not modelled")
        if pos in ("yarn", "mrope"):
            r.note(f"--position-embedding-type {pos}: counted as rope (no position parameters)")
        opts["position_embedding_type"] = "rope" if pos in ("yarn", "mrope") else pos
    if raw.get("add_position_embedding", True) is False \
            and opts.get("position_embedding_type") != "rope":
        raise InvalidValueError("--no-position-embedding is refused by Megatron unless the "
                                "positions are rope; use --position-embedding-type")
    if r.given("moe_layer_freq"):
        opts["moe_layer_freq"] = parse_moe_layer_freq(raw["moe_layer_freq"], num_layers)
    for dest in ("encoder_seq_length", "decoder_seq_length"):
        if r.given(dest):
            opts["seq_length"] = r.int(dest, hi=MAX_SEQ)
    if r.given("fp8"):
        r.choice("fp8", ("e4m3", "hybrid"))
        opts["precision"] = "fp8"
        if not (r.given("bf16") or r.given("fp16")):
            r.note("--fp8-format without --bf16: the weights are counted as bf16 with FP8 "
                   "GEMMs (memsym's fp8 precision)")
    if r.given("fp8_recipe"):
        r.note(f"--fp8-recipe {raw['fp8_recipe']}: Transformer Engine's per-recipe FP8 caches "
               "are not modelled")
    if r.given("attention_backend") or r.given("transformer_impl"):
        backend = r.choice("attention_backend", ("flash", "fused", "unfused", "local", "auto"),
                           "auto")
        impl = r.choice("transformer_impl", ("local", "transformer_engine",
                                             "inference_optimized"), "transformer_engine")
        opts["flash_attention"] = backend in ("flash", "fused", "auto") and impl != "local"
    if r.given("recompute_modules") or r.flag("moe_layer_recompute"):
        mods = tuple(raw.get("recompute_modules") or ("core_attn",))
        for m in mods:
            if m not in _RECOMPUTE_MODULES:
                raise UnknownNameError("--recompute-modules value", m, _RECOMPUTE_MODULES)
        if r.flag("moe_layer_recompute") and "moe" not in mods:
            mods += ("moe",)   # TC.__post_init__: the deprecated flag appends "moe"
        # the modules are read under selective granularity (memsym's --recompute-granularity
        # may say so too; a contradiction is refused by the caller)
        opts["recompute"] = "selective"
        opts["recompute_modules"] = recompute_modules(mods)
    if r.flag("use_megatron_fsdp"):
        if r.flag("use_torch_fsdp2"):
            raise InvalidValueError("--use-megatron-fsdp and --use-torch-fsdp2 are exclusive")
        strategy = r.choice("data_parallel_sharding_strategy",
                            ("no_shard", "optim", "optim_grads", "optim_grads_params"),
                            "optim_grads_params")
        opts["sharding"] = MEGATRON_FSDP_SCHEMES[strategy]
        r.note(f"Megatron-FSDP {strategy}: counted as sharding {opts['sharding']} (the same "
               "states sharded)")
    elif r.given("data_parallel_sharding_strategy"):
        r.note("--data-parallel-sharding-strategy has effect only with --use-megatron-fsdp")
    n_layers = r.int("num_layers_per_virtual_pipeline_stage", None, hi=MAX_LAYERS)
    n_stages = r.int("num_virtual_stages_per_pipeline_rank", None, hi=MAX_LAYERS)
    if n_layers is not None and n_stages is not None:
        raise InvalidValueError("give one of --num-layers-per-virtual-pipeline-stage and "
                                "--num-virtual-stages-per-pipeline-rank (Megatron's validate_args)")
    if n_layers is not None:
        if num_layers % p or (num_layers // p) % n_layers:
            raise InvalidValueError(f"{num_layers} layers on {p} pipeline stages are not "
                                    "divisible by --num-layers-per-virtual-pipeline-stage "
                                    f"{n_layers}")
        opts["v"] = (num_layers // p) // n_layers or None
    elif n_stages is not None:
        opts["v"] = n_stages if n_stages > 1 else None
    world = r.torchrun_world()
    if world is not None:
        opts["world_size"] = world
        r.note(f"world size {world} from the launcher's GPUs per node x nodes")
    if r.given("rampup_batch_size") or r.given("step_batch_size_schedule"):
        r.note("batch-size ramp-up or schedule: memory and time are estimated at the final "
               "global batch size (--global-batch-size)")
    if raw.get("pad_vocab_size", True) is False:
        raise InvalidValueError("--no-pad-vocab-size: the unpadded vocabulary then comes from a "
                                "checkpoint, which memsym cannot read")
    handled = set(_OVERRIDE_SWITCHES) | {
        "add_bias_linear", "position_embedding_type", "add_position_embedding", "moe_layer_freq",
        "encoder_seq_length", "decoder_seq_length", "fp8", "attention_backend",
        "transformer_impl", "recompute_modules", "moe_layer_recompute", "use_megatron_fsdp",
        "data_parallel_sharding_strategy", "num_layers_per_virtual_pipeline_stage",
        "num_virtual_stages_per_pipeline_rank", "torchrun_nproc_per_node", "torchrun_nnodes",
        "rampup_batch_size", "step_batch_size_schedule", "pad_vocab_size", "fp8_recipe"}
    for name in order:
        dest = _TABLE[name][0]
        if _not_modelled(r, name, dest):
            pass
        elif dest in handled:
            continue
        elif dest in _OVERRIDE_NO_EFFECT or dest not in _MODELLED:
            ignored.append(name)
        else:
            # the optimizer-state dtypes of the precision-aware optimizer, Megatron-FSDP's
            # buffer dtypes, distributed saved activations: not in memsym's model
            r.note(f"{name}: changes memory and is not modelled")
    return MegatronOverrides(options=opts, ignored=tuple(ignored), notes=tuple(r.notes))


class _Reader:
    def __init__(self, raw: dict, spelled: dict):
        self.raw, self.spelled, self.notes = raw, spelled, []

    def note(self, text: str):
        if text not in self.notes:
            self.notes.append(text)

    def given(self, dest) -> bool:
        return dest in self.raw

    def flag(self, dest) -> bool:
        return bool(self.raw.get(dest, False))

    def name(self, dest) -> str:
        return self.spelled.get(dest, "--" + dest.replace("_", "-"))

    def int(self, dest, default=None, lo=1, hi=MAX_GPUS):
        if dest not in self.raw:
            return default
        return whole(self.raw[dest], self.name(dest), lo, hi)

    def choice(self, dest, accepted, default=None):
        if dest not in self.raw:
            return default
        val = self.raw[dest]
        if val not in accepted:
            raise UnknownNameError(f"value of {self.name(dest)}", val, accepted)
        return val

    def require(self, dest, lo, hi):
        if dest not in self.raw:
            raise InvalidValueError(f"{self.name(dest)} is required (Megatron's validate_args)")
        return self.int(dest, lo=lo, hi=hi)

    # -- architecture ---------------------------------------------------------------------
    def architecture(self) -> dict:
        a = {}
        L = a["num_layers"] = self.require("num_layers", 1, MAX_LAYERS)
        h = a["hidden_size"] = self.require("hidden_size", 1, MAX_HIDDEN)
        heads = a["num_attention_heads"] = self.require("num_attention_heads", 1, MAX_HEADS)
        mla = a["multi_latent_attention"] = self.flag("multi_latent_attention")
        # argument_utils.py (core_transformer_config_from_args): num_query_groups only with
        # --group-query-attention, else None (= multi-head attention).
        if self.flag("group_query_attention"):
            if mla:   # args: "Group query attention is mutually exclusive with multi latent attention."
                raise InvalidValueError("--group-query-attention and --multi-latent-attention are "
                                        "mutually exclusive (Megatron's validate_args)")
            if not self.given("num_query_groups"):
                self.note("--num-query-groups absent: Megatron's default 1 (one KV head) applies")
            g = self.int("num_query_groups", 1, hi=MAX_HEADS)
            if heads % g:
                raise InvalidValueError(f"--num-query-groups {g} must divide --num-attention-heads {heads}")
            a["num_query_groups"] = g
        elif self.given("num_query_groups"):
            self.note("--num-query-groups has no effect without --group-query-attention "
                      "(Megatron uses multi-head attention)")
        if self.given("kv_channels"):
            a["kv_channels"] = self.int("kv_channels", hi=MAX_HIDDEN)
        else:   # args: validate_args, "assert args.hidden_size % args.num_attention_heads == 0"
            if h % heads:
                raise InvalidValueError(f"--hidden-size {h} is not a multiple of "
                                        f"--num-attention-heads {heads}; give --kv-channels")
            a["kv_channels"] = h // heads
        gated = self.flag("swiglu") or self.flag("quick_geglu")
        if self.flag("swiglu") and (self.flag("squared_relu") or self.flag("quick_geglu")):
            raise InvalidValueError("--swiglu cannot be combined with --squared-relu or --quick-geglu")
        a["swiglu"] = gated
        if self.given("ffn_hidden_size"):
            a["ffn_hidden_size"] = self.int("ffn_hidden_size", hi=MAX_HIDDEN * 64)
        elif self.flag("swiglu"):
            # args: validate_args, int((4 * h * 2 / 3) / 64) * 64 (exact: 8h // 192 * 64)
            a["ffn_hidden_size"] = (8 * h) // 192 * 64
            self.note(f"--ffn-hidden-size absent: Megatron's swiglu rule int(4h*2/3/64)*64 = "
                      f"{a['ffn_hidden_size']}")
        else:
            a["ffn_hidden_size"] = 4 * h
        a["normalization"] = self.choice("normalization", ("LayerNorm", "RMSNorm"), "LayerNorm")
        a["add_bias_linear"] = bool(self.raw.get("add_bias_linear", True))
        a["add_qkv_bias"] = self.flag("add_qkv_bias")
        a["untie_embeddings_and_output_weights"] = self.flag("untie_embeddings_and_output_weights")
        a["qk_layernorm"] = self.flag("qk_layernorm")
        # positions: default learned_absolute; --use-rotary-position-embeddings is the legacy
        # spelling of rope; --no-position-embedding without rope is a RuntimeError (args).
        pos = self.choice("position_embedding_type",
                          ("learned_absolute", "rope", "yarn", "mrope", "relative", "none"),
                          "learned_absolute")
        if self.flag("use_rotary_position_embeddings"):
            pos = "rope"
        if self.raw.get("add_position_embedding", True) is False and pos != "rope":
            raise InvalidValueError("--no-position-embedding is deprecated and refused by Megatron "
                                    "unless the positions are rope; use --position-embedding-type")
        if pos == "relative":
            raise InvalidValueError("--position-embedding-type relative (a learned relative-"
                                    "attention bias) is not modelled")
        if pos in ("yarn", "mrope"):
            self.note(f"--position-embedding-type {pos}: counted as rope (no position parameters)")
            pos = "rope"
        a["position_embedding_type"] = pos
        seq = self.seq_length()
        if self.given("max_position_embeddings"):
            a["max_position_embeddings"] = self.int("max_position_embeddings", hi=MAX_SEQ)
        else:   # Megatron requires it (required_args); the practitioner's evident intent
            a["max_position_embeddings"] = seq
            self.note(f"--max-position-embeddings absent (Megatron requires it): set to "
                      f"--seq-length {seq}")
        for dest in ("seq_length", "decoder_seq_length"):
            n = seq if dest == "seq_length" else self.int(dest, hi=MAX_SEQ)
            if n is not None and a["max_position_embeddings"] < n:
                raise InvalidValueError(
                    f"--max-position-embeddings {a['max_position_embeddings']} is smaller than "
                    f"{self.name(dest)} {n} (Megatron's validate_args asserts >=)")
        self.vocab(a)
        # MoE: --num-experts 0 means dense (args: "if args.num_experts == 0: None").
        E = self.int("num_experts", None, lo=0, hi=MAX_HEADS)
        if E:
            a["num_experts"] = E
            a["moe_router_topk"] = self.int("moe_router_topk", 2, hi=E)
            if self.given("moe_ffn_hidden_size"):
                a["moe_ffn_hidden_size"] = self.int("moe_ffn_hidden_size", hi=MAX_HIDDEN * 64)
            else:   # args: validate_args, moe_ffn_hidden_size = ffn_hidden_size
                a["moe_ffn_hidden_size"] = a["ffn_hidden_size"]
                self.note("--moe-ffn-hidden-size absent: Megatron uses --ffn-hidden-size "
                          f"{a['ffn_hidden_size']}")
            if self.given("moe_shared_expert_intermediate_size"):
                a["moe_shared_expert_intermediate_size"] = self.int(
                    "moe_shared_expert_intermediate_size", hi=MAX_HIDDEN * 64)
                a["moe_shared_expert_gate"] = self.flag("moe_shared_expert_gate")
            a["moe_layer_freq"] = parse_moe_layer_freq(self.raw.get("moe_layer_freq", 1), L)
            # router.py: the router's bias Parameter exists iff add_bias_linear; the expert bias
            # (--moe-router-enable-expert-bias) is an fp32 buffer, not a parameter.
            a["moe_router_bias"] = a["add_bias_linear"]
        if mla:
            # MLA defaults are the argparse defaults of MLATransformerConfig's fields.
            if self.given("q_lora_rank"):
                a["q_lora_rank"] = self.int("q_lora_rank", hi=MAX_HIDDEN)
            a["kv_lora_rank"] = self.int("kv_lora_rank", 32, hi=MAX_HIDDEN)
            a["qk_head_dim"] = self.int("qk_head_dim", 128, hi=MAX_HIDDEN)
            a["qk_pos_emb_head_dim"] = self.int("qk_pos_emb_head_dim", 64, hi=MAX_HIDDEN)
            a["v_head_dim"] = self.int("v_head_dim", 128, hi=MAX_HIDDEN)
            if not a["qk_layernorm"]:
                self.note("--multi-latent-attention without --qk-layernorm: Megatron builds no "
                          "norms on the q/kv latents, memsym's MLA count includes them")
        a["mtp_num_layers"] = self.int("mtp_num_layers", 0, lo=0, hi=MAX_LAYERS)
        return a

    def seq_length(self) -> int:
        # args: seq_length or its alias encoder_seq_length (exactly one).
        if self.given("seq_length") and self.given("encoder_seq_length"):
            raise InvalidValueError("give --seq-length or --encoder-seq-length, not both")
        dest = "seq_length" if self.given("seq_length") else "encoder_seq_length"
        if not self.given(dest):
            raise InvalidValueError("--seq-length is required")
        return self.int(dest, hi=MAX_SEQ)

    def vocab(self, a: dict):
        # build_tokenizer.py: NullTokenizer/TikTokenizer take --vocab-size; the others read their
        # files (GPT2BPE: len(encoder); HuggingFace: len(tokenizer)) and ignore --vocab-size.
        kind = self.raw.get("tokenizer_type")
        model = self.raw.get("tokenizer_model")
        a["make_vocab_size_divisible_by"] = self.int("make_vocab_size_divisible_by", 128,
                                                     hi=MAX_VOCAB)
        if self.raw.get("pad_vocab_size", True) is False:
            raise InvalidValueError("--no-pad-vocab-size: the unpadded vocabulary then comes from a "
                                    "checkpoint, which memsym cannot read")
        if self.given("vocab_size"):
            a["vocab_size"] = self.int("vocab_size", hi=MAX_VOCAB)
            if kind not in ("NullTokenizer", "TikTokenizer", "NullMultimodalTokenizer", None):
                self.note(f"--vocab-size {a['vocab_size']} taken as the tokenizer's vocabulary "
                          f"(Megatron's {kind} reads it from its file; it must equal that length)")
            return
        if kind == "NullTokenizer":
            raise InvalidValueError("--tokenizer-type NullTokenizer needs --vocab-size N")
        if model in KNOWN_TOKENIZER_VOCAB:
            a["vocab_size"] = KNOWN_TOKENIZER_VOCAB[model]
            self.note(_tokenizer_vocab_note(model, a["vocab_size"]))
            return
        if kind == "GPT2BPETokenizer":
            a["vocab_size"] = KNOWN_TOKENIZER_VOCAB[kind]
            self.note("vocabulary 50257 of GPT2BPETokenizer (gpt2-vocab.json)")
            return
        source = (f"the tokenizer {model!r}" if model else
                  f"--vocab-file {self.raw['vocab_file']!r}" if self.given("vocab_file") else
                  "a tokenizer the command does not name")
        raise InvalidValueError(f"the vocabulary comes from {source}, which memsym cannot read: "
                                "add --vocab-size N (the tokenizer's length, e.g. 50257 for "
                                "gpt2-vocab.json)")

    # -- layout ---------------------------------------------------------------------------
    def layout(self, arch: dict) -> dict:
        L = arch["num_layers"]
        t = self.int("tensor_model_parallel_size", 1)
        p = self.int("pipeline_model_parallel_size", 1)
        c = self.int("context_parallel_size", 1)
        e = self.int("expert_model_parallel_size", 1)
        t_e = self.int("expert_tensor_parallel_size", t)   # args: defaults to TP
        lay = {"t": t, "p": p, "c": c, "e": e, "t_e": t_e}
        E = arch.get("num_experts")
        if e > 1 and (not E or E % e):   # args: "Number of experts should be a multiple of ..."
            raise InvalidValueError(f"--expert-model-parallel-size {e} needs --num-experts a "
                                    f"multiple of it (got {E})")
        seq = self.seq_length()
        if c > 1 and seq % (2 * c):       # args: seq-length a multiple of 2 * CP
            raise InvalidValueError(f"--seq-length {seq} must be a multiple of 2 x "
                                    f"--context-parallel-size {c}")
        sp = self.flag("sequence_parallel")
        if sp and t == 1:   # args: "Disabling sequence parallelism because tensor ... disabled"
            sp = False
            self.note("--sequence-parallel has no effect at tensor-parallel size 1 (Megatron turns "
                      "it off)")
        lay["sequence_parallel"] = sp
        first = self.int("decoder_first_pipeline_num_layers", None, lo=0, hi=MAX_LAYERS)
        last = self.int("decoder_last_pipeline_num_layers", None, lo=0, hi=MAX_LAYERS)
        lay["first_stage_layers"], lay["last_stage_layers"] = first, last
        layout_text = self.raw.get("pipeline_model_parallel_layout") \
            if self.given("pipeline_model_parallel_layout") else None
        account = {k: True for k in ("account_for_embedding_in_pipeline_split",
                                     "account_for_loss_in_pipeline_split") if self.flag(k)}
        custom = layout_text is not None or bool(account)
        lay["v"] = self.vpp(L, p, first, last, custom)
        if not custom and first is None and last is None and lay["v"] is None and L % p:
            raise InvalidValueError(f"--num-layers {L} is not divisible by "
                                    f"--pipeline-model-parallel-size {p} (Megatron's validate_args)")
        if layout_text is not None:
            # transformer_config.py: the layout string, parsed and validated by memsym.job
            lay["pipeline_layout"] = str(layout_text)
        lay.update(account)
        world = self.world_size()
        lay["world_size"] = world
        if world is not None:
            model = t * p * c
            if world % model:   # args: "world size ... is not divisible by total_model_size"
                raise InvalidValueError(
                    f"world size {world} is not divisible by t*p*c = {model}"
                    + ("; add --world-size N (launch scripts give one node's GPUs)"
                       if not self.given("world_size") else ""))
            lay["d"] = world // model     # args: data_parallel_size excludes CP
            if arch.get("num_experts") and world % (t_e * e * p):
                raise InvalidValueError(f"world size {world} is not divisible by expert t_e*e*p = "
                                        f"{t_e * e * p}")
        else:
            self.note("world size unknown: add --world-size N for the data-parallel size")
        return lay

    def vpp(self, L, p, first, last, custom=False):
        n_layers = self.int("num_layers_per_virtual_pipeline_stage", None, hi=MAX_LAYERS)
        n_stages = self.int("num_virtual_stages_per_pipeline_rank", None, hi=MAX_LAYERS)
        legacy = self.int("virtual_pipeline_model_parallel_size", None, hi=MAX_LAYERS)
        if custom and n_layers is not None:
            raise InvalidValueError("with --pipeline-model-parallel-layout or --account-for-"
                                    "embedding/loss-in-pipeline-split give VPP as "
                                    "--num-virtual-stages-per-pipeline-rank")
        if (n_layers is not None) + (n_stages is not None) + (legacy is not None) > 1:
            raise InvalidValueError("give one of --num-layers-per-virtual-pipeline-stage and "
                                    "--num-virtual-stages-per-pipeline-rank (Megatron's validate_args)")
        v = None
        if n_layers is not None:
            # args: the uneven split needs --num-virtual-stages-per-pipeline-rank
            if first is not None or last is not None:
                raise InvalidValueError("with --decoder-first/last-pipeline-num-layers give VPP as "
                                        "--num-virtual-stages-per-pipeline-rank (Megatron's rule)")
            if L % p:
                raise InvalidValueError(f"--num-layers {L} is not divisible by "
                                        f"--pipeline-model-parallel-size {p}")
            if (L // p) % n_layers:
                raise InvalidValueError(f"layers per pipeline stage {L // p} not divisible by "
                                        f"--num-layers-per-virtual-pipeline-stage {n_layers}")
            v = (L // p) // n_layers
        elif n_stages is not None:
            v = n_stages
        elif legacy is not None:
            v = legacy
            self.note("--virtual-pipeline-model-parallel-size is the legacy spelling of "
                      "--num-virtual-stages-per-pipeline-rank")
        if v == 1:
            v = None
        if v is not None:
            # args: interleaving needs PP > 1 (PP > 2 with --no-overlap-p2p-communication)
            overlap = self.raw.get("overlap_p2p_comm", True)
            if p <= (1 if overlap else 2):
                raise InvalidValueError(f"the interleaved schedule needs --pipeline-model-parallel-"
                                        f"size > {1 if overlap else 2}, got {p}")
        return v

    def world_size(self):
        if self.given("world_size"):
            world = self.int("world_size", hi=MAX_GPUS)
            tr = self.torchrun_world()
            if tr is not None and tr != world:
                self.note(f"--world-size {world} used; torchrun's options would give {tr}")
            return world
        tr = self.torchrun_world()
        if tr is not None:
            self.note(f"world size {tr} from torchrun --nproc_per_node x --nnodes")
        return tr

    def torchrun_world(self):
        if not self.given("torchrun_nproc_per_node"):
            return None
        n = str(self.raw["torchrun_nproc_per_node"])
        nodes = str(self.raw.get("torchrun_nnodes", "1"))
        if n in ("gpu", "cuda", "auto", "cpu") or ":" in nodes:
            self.note(f"torchrun --nproc_per_node {n} --nnodes {nodes} does not fix the world "
                      "size: add --world-size N")
            return None
        return whole(n, "--nproc_per_node", 1, MAX_GPUS) * whole(nodes, "--nnodes", 1, MAX_GPUS)

    # -- training -------------------------------------------------------------------------
    def training(self, arch: dict, lay: dict) -> dict:
        tr = {"seq_length": self.seq_length(), **megatron_mechanism_options(self)}
        if not self.given("micro_batch_size"):
            raise InvalidValueError("--micro-batch-size is required")
        b = tr["micro_batch_size"] = self.int("micro_batch_size", hi=MAX_BATCH)
        gbs = self.int("global_batch_size", None, hi=MAX_BATCH)
        d = lay.get("d")
        if gbs is None and d is not None:   # args: global_batch_size = micro_batch_size * DP
            gbs = b * d
            self.note(f"--global-batch-size absent: Megatron uses micro-batch x DP = {gbs}")
        tr["global_batch_size"] = gbs
        tr["num_microbatches"] = None
        if gbs is not None and d is not None:
            if gbs % (b * d):   # num_microbatches_calculator.py: exact division asserted
                raise InvalidValueError(f"--global-batch-size {gbs} is not divisible by "
                                        f"micro-batch x DP = {b} x {d}")
            tr["num_microbatches"] = gbs // (b * d)
        if self.raw.get("_split_schedule"):
            self.note("--step-batch-size-schedule arrived as several words (an unquoted ${ARR[@]} "
                      "split it); Megatron's argparse refuses them: quote the value")
        if self.given("step_batch_size_schedule"):
            if self.given("global_batch_size"):
                self.note("--step-batch-size-schedule with --global-batch-size: Megatron's "
                          "validate_args raises ValueError; memsym estimates at "
                          f"--global-batch-size {gbs}")
            else:
                self.note("--step-batch-size-schedule: give --global-batch-size (the final "
                          "batch) for the estimate")
        if self.given("rampup_batch_size"):
            self.note("--rampup-batch-size: memory and time are estimated at the final global "
                      "batch size")
        # recompute: args (validate_args) and TC.__post_init__
        gran = self.choice("recompute_granularity", ("full", "selective"), None)
        if self.flag("recompute_activations"):   # args: --recompute-activations = selective
            if gran == "full":
                raise InvalidValueError("--recompute-activations means selective recompute; it "
                                        "conflicts with --recompute-granularity full")
            gran = "selective"
        method = self.choice("recompute_method", ("uniform", "block"), None)
        # 0 is accepted (TransformerConfig checks only None); uniform 0 is refused by memsym.job
        nrec = self.int("recompute_num_layers", None, lo=0, hi=MAX_LAYERS)
        mods = self.raw.get("recompute_modules")
        if mods is not None:
            for m in mods:
                if m not in _RECOMPUTE_MODULES:
                    raise UnknownNameError("--recompute-modules value", m, _RECOMPUTE_MODULES)
            mods = tuple(mods)
        else:
            mods = ("core_attn",)   # TC: recompute_modules None -> ["core_attn"]
        if self.flag("moe_layer_recompute"):
            # TC.__post_init__: the deprecated flag is selective recompute with "moe" added
            if gran == "full":
                raise InvalidValueError("--moe-layer-recompute cannot be set with full recompute "
                                        "granularity (Megatron's TransformerConfig)")
            gran = "selective"
            mods = mods if "moe" in mods else mods + ("moe",)
            self.note("--moe-layer-recompute is deprecated: read as --recompute-granularity "
                      f"selective --recompute-modules {' '.join(mods)} (as TransformerConfig does)")
        if gran == "selective":
            if method is not None:
                raise InvalidValueError("--recompute-method is not supported with selective "
                                        "recompute (Megatron's validate_args)")
            if nrec is not None:
                raise InvalidValueError("--recompute-num-layers must be absent with selective "
                                        "recompute (TransformerConfig)")
            if "mla_up_proj" in mods and not arch["multi_latent_attention"]:
                raise InvalidValueError("--recompute-modules mla_up_proj needs --multi-latent-attention")
            if "moe_act" in mods and not self.flag("moe_grouped_gemm"):
                raise InvalidValueError("--recompute-modules moe_act needs --moe-grouped-gemm")
            if "shared_experts" in mods and self.flag("moe_shared_expert_overlap") \
                    and arch.get("moe_shared_expert_intermediate_size"):
                raise InvalidValueError("--recompute-modules shared_experts cannot work with "
                                        "--moe-shared-expert-overlap (Megatron's TransformerConfig)")
            if self.given("fp8") and {"moe_act", "layernorm"} & set(mods) and \
                    self.raw.get("fp8_recipe", "delayed") == "delayed":
                raise InvalidValueError("--recompute-modules moe_act and layernorm are refused "
                                        "with FP8 delayed scaling (Megatron's TransformerConfig; "
                                        "--fp8-recipe defaults to delayed)")
            # memsym's layers are Transformer Engine's spec (the default --transformer-impl)
            if {"layernorm", "mlp"} & set(mods) and self.raw.get("transformer_impl") == "local":
                self.note("--recompute-modules layernorm/mlp counted as under Transformer "
                          "Engine's layer spec (fused norms); with --transformer-impl local "
                          "each norm is its own module and its output is kept or recomputed "
                          "differently")
            if "layernorm" in mods and self.flag("mla_down_proj_fusion"):
                self.note("--mla-down-proj-fusion fuses the MLA input norm into the down "
                          "projection, so layernorm does not recompute it; memsym counts the "
                          "unfused norm's output as recomputed")
            if not self.given("recompute_modules"):
                self.note("selective recompute with Megatron's default --recompute-modules core_attn")
        elif gran == "full":
            if method is None or nrec is None:
                raise InvalidValueError("full recompute needs --recompute-method (uniform or block) "
                                        "and --recompute-num-layers (TransformerConfig)")
            per_rank = arch["num_layers"] // lay["p"]
            if nrec > per_rank:   # TC: between 1 and num_layers_per_pipeline_rank
                raise InvalidValueError(f"--recompute-num-layers {nrec} exceeds the {per_rank} "
                                        "layers of a pipeline rank")
        else:
            if method is not None or nrec is not None or self.given("recompute_modules"):
                raise InvalidValueError("--recompute-method/--recompute-num-layers/--recompute-"
                                        "modules need --recompute-granularity (or "
                                        "--recompute-activations)")
        tr["recompute"] = {"granularity": gran, "method": method, "num_layers": nrec,
                           "modules": mods if gran == "selective" else ()}
        # attention: --attention-backend (default auto: TE chooses fused or flash, no s^2 matrix);
        # --use-flash-attn is the legacy spelling of flash.
        backend = self.choice("attention_backend", ("flash", "fused", "unfused", "local", "auto"),
                              "auto")
        impl = self.choice("transformer_impl", ("local", "transformer_engine",
                                                "inference_optimized"), "transformer_engine")
        if self.flag("use_flash_attn"):
            if self.given("attention_backend") and backend not in ("flash", "auto"):
                raise InvalidValueError(f"--use-flash-attn conflicts with --attention-backend {backend}")
            backend = "flash"
        if not self.given("attention_backend") and not self.flag("use_flash_attn"):
            self.note("--attention-backend auto (Megatron's default): Transformer Engine picks a "
                      "fused/flash kernel, so no s x s score matrix is stored")
        tr["attention_backend"] = backend
        tr["transformer_impl"] = impl
        tr["flash_attention"] = backend in ("flash", "fused", "auto") and impl != "local"
        tr["hidden_dropout"] = fraction(self.raw.get("hidden_dropout", "0.1"), "--hidden-dropout")
        tr["attention_dropout"] = fraction(self.raw.get("attention_dropout", "0.1"),
                                           "--attention-dropout")
        tr["moe_router_enable_expert_bias"] = bool(arch.get("num_experts")) and \
            self.flag("moe_router_enable_expert_bias")
        return tr

    # -- precision ------------------------------------------------------------------------
    def precision(self, lay: dict) -> dict:
        bf16, fp16 = self.flag("bf16"), self.flag("fp16")
        if bf16 and fp16:   # args: "assert not args.bf16" under fp16 (and the converse)
            raise InvalidValueError("--bf16 and --fp16 are mutually exclusive")
        params = "bf16" if bf16 else "fp16" if fp16 else "fp32"
        main_grads = self.choice("main_grads_dtype", ("fp32", "bf16"), "fp32")
        accumulate = self.flag("accumulate_allreduce_grads_in_fp32")
        if bf16:
            # args: bf16 forces accumulate_allreduce_grads_in_fp32 unless --grad-reduce-in-bf16
            if accumulate and main_grads != "fp32":
                raise InvalidValueError("--main-grads-dtype can only be fp32 with "
                                        "--accumulate-allreduce-grads-in-fp32")
            if self.flag("grad_reduce_in_bf16"):
                accumulate = False
            elif not accumulate and main_grads == "fp32":
                accumulate = True
        elif self.flag("grad_reduce_in_bf16"):
            self.note("--grad-reduce-in-bf16 has effect only with --bf16")
        grad = "fp32" if accumulate or params == "fp32" else params
        pa = self.flag("use_precision_aware_optimizer")
        dtypes = {k: self.choice(k, ch, "fp32") for k, ch in (
            ("main_params_dtype", ("fp32", "fp16")), ("exp_avg_dtype", ("fp32", "fp16", "bf16", "fp8")),
            ("exp_avg_sq_dtype", ("fp32", "fp16", "bf16", "fp8")))}
        bad = [k for k, v in (("main_grads_dtype", main_grads), *dtypes.items()) if v != "fp32"]
        if bad and not pa:   # optimizer_config.py:468-480: OptimizerConfig asserts fp32 without it
            raise InvalidValueError(f"--{bad[0].replace('_', '-')} needs --use-precision-aware-"
                                    "optimizer (Megatron's OptimizerConfig: fp32 otherwise)")
        fp8 = self.choice("fp8", ("e4m3", "hybrid"), None)
        recipe = self.choice("fp8_recipe", ("tensorwise", "delayed", "mxfp8", "blockwise", "custom"),
                             "delayed")
        fp8_pg = self.flag("fp8_param_gather")
        if fp8_pg and not fp8:
            raise InvalidValueError("--fp8-param-gather needs --fp8-format")
        return {"params_dtype": params, "grad_reduce_in_fp32": accumulate, "grad_dtype": grad,
                "main_grads_dtype": main_grads, "main_params_dtype": dtypes["main_params_dtype"]
                if params != "fp32" else "fp32", "exp_avg_dtype": dtypes["exp_avg_dtype"],
                "exp_avg_sq_dtype": dtypes["exp_avg_sq_dtype"], "precision_aware_optimizer": pa,
                "fp8": fp8, "fp8_recipe": recipe if fp8 else None, "fp8_param_gather": fp8_pg}

    # -- optimizer ------------------------------------------------------------------------
    def optimizer(self, arch: dict, lay: dict, prec: dict) -> dict:
        opt = self.choice("optimizer", ("adam", "sgd", "muon", "dist_muon", "lion", "soap",
                                        "adaptive_muon"), "adam")
        if opt not in ("adam", "sgd"):
            self.note(f"--optimizer {opt}: memsym models adam and sgd states only")
        distopt = self.flag("use_distributed_optimizer")
        mfsdp = self.flag("use_megatron_fsdp")
        fsdp2 = self.flag("use_torch_fsdp2")
        if mfsdp and fsdp2:
            raise InvalidValueError("--use-megatron-fsdp and --use-torch-fsdp2 are exclusive")
        if fsdp2 and not arch["untie_embeddings_and_output_weights"]:
            raise InvalidValueError("--use-torch-fsdp2 requires --untie-embeddings-and-output-weights"
                                    " (Megatron's validate_args)")
        strategy = self.choice("data_parallel_sharding_strategy",
                               ("no_shard", "optim", "optim_grads", "optim_grads_params"),
                               "optim_grads_params") if mfsdp else None
        if mfsdp and not self.given("data_parallel_sharding_strategy"):
            self.note("Megatron-FSDP with the command line's default sharding optim_grads_params")
        og, opg = self.flag("overlap_grad_reduce"), self.flag("overlap_param_gather")
        if opg:   # args: needs DistOpt or Megatron-FSDP (or dist_muon) and --overlap-grad-reduce
            if not (distopt or mfsdp or opt == "dist_muon"):
                raise InvalidValueError("--overlap-param-gather needs --use-distributed-optimizer or "
                                        "--use-megatron-fsdp")
            if not og:
                raise InvalidValueError("--overlap-param-gather needs --overlap-grad-reduce")
        if prec["fp8_param_gather"] and not (distopt or mfsdp or fsdp2):
            raise InvalidValueError("--fp8-param-gather needs the distributed optimizer or FSDP "
                                    "(Megatron's validate_args)")
        if prec["precision_aware_optimizer"] and not (distopt and opt == "adam"):
            raise InvalidValueError("--use-precision-aware-optimizer needs "
                                    "--use-distributed-optimizer and adam")
        tpo = self.flag("tp_comm_overlap")
        if tpo and not lay["sequence_parallel"]:
            raise InvalidValueError("--tp-comm-overlap needs --sequence-parallel (Megatron's "
                                    "validate_args)")
        if not distopt and not mfsdp and not fsdp2:
            self.note("no --use-distributed-optimizer: Megatron keeps the whole optimizer state on "
                      "every data-parallel rank")
        out = {"optimizer": opt, "use_distributed_optimizer": distopt, "use_megatron_fsdp": mfsdp,
               "data_parallel_sharding_strategy": strategy, "use_torch_fsdp2": fsdp2,
               "overlap_grad_reduce": og, "overlap_param_gather": opg,
               "ddp_bucket_size": self.int("ddp_bucket_size", None, hi=MAX_BATCH),
               "tp_comm_overlap": tpo, "cp_comm_type": self.raw.get("cp_comm_type"),
               "overlap_moe_expert_parallel_comm": self.flag("overlap_moe_expert_parallel_comm"),
               "overlap_p2p_comm": bool(self.raw.get("overlap_p2p_comm", True)),
               "defer_embedding_wgrad_compute": self.flag("defer_embedding_wgrad_compute"),
               "wgrad_deferral_limit": self.int("wgrad_deferral_limit", 0, lo=0, hi=MAX_BATCH)}
        if mfsdp:
            # argparse defaults: main params fp32, main grads and grad communication auto
            for k, default in (("megatron_fsdp_main_grads_dtype", "auto"),
                               ("megatron_fsdp_main_params_dtype", "fp32"),
                               ("megatron_fsdp_grad_comm_dtype", "auto")):
                out[k] = self.choice(k, ("fp32", "bf16", "fp16", "auto"), default)
            out["megatron_fsdp_version"] = int(self.choice("megatron_fsdp_version", ("1", "2"), "1"))
        return out
