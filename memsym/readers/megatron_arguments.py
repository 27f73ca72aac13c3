"""Megatron-LM's argument table, its argv grammar and the reader of the parsed values.

This module owns what ``pretrain_gpt.py`` accepts (the generated flag table of
:mod:`memsym.readers._megatron_flags` plus torchrun's options, memsym's ``--world-size`` and the
legacy spellings), which destinations memsym models, refuses or only notes, Megatron's defaults
that decide memory or time, the parser that turns the words of a command into raw values
(argparse's grammar; nothing is evaluated), and :class:`MegatronArguments`, which reads those
values with bounds and names them as the command spelled them.  The rules that turn them into a
model, a layout and a training run are :mod:`memsym.readers.megatron_architecture` and
:mod:`memsym.readers.megatron_training`; :mod:`memsym.readers.megatron` holds the entry points.

Revision read: NVIDIA/Megatron-LM ``d98e8a64dd`` (main, 2026-08-22).  ``args`` below means
``megatron/training/arguments.py``, ``TC`` ``megatron/core/transformer/transformer_config.py``.
"""

from __future__ import annotations

import difflib
import re
from typing import Sequence

from ..errors import InvalidValueError, MemsymError, UnknownNameError
from ..text import looks_like_option, option_values   # argparse's rules, shared with the CLI's reading
# re-exported: Megatron-FSDP's strategy -> the scheme that shards the same states
from ..vocabulary import MEGATRON_FSDP_SCHEMES
from ._megatron_flags import FLAGS
from ._megatron_modelopt_flags import MODELOPT
# the reviewed classification of every argument memsym does not read (re-exported)
from .megatron_effects import (INERT, MEGATRON_REFUSES, MEMORY_NOT_MODELLED,
                               STRUCTURE_NOT_MODELLED, TIME_NOT_MODELLED, VALUE_NOT_MODELLED,
                               no_effect_reason, same_value)
from ._values import MAX_ARGS, MAX_GPUS, MAX_SEQ, MAX_WORD, whole

__all__ = ["MEGATRON_FSDP_SCHEMES", "MEGATRON_DEFAULTS", "TABLE", "MODELLED",
           "STRUCTURE_NOT_MODELLED", "MEMORY_NOT_MODELLED", "TIME_NOT_MODELLED",
           "VALUE_NOT_MODELLED", "KNOWN_TOKENIZER_VOCAB",
           "RECOMPUTE_MODULES", "SCHEDULE_ENTRY", "megatron_arity", "ArgumentError",
           "parse_megatron_argv", "MegatronArguments"]


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
    ("flash_attention", ("attention_backend", "transformer_impl"), True,
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

#: Every argument accepted: its spelling -> (dest, arity, const), as argparse stores it.
TABLE = {**FLAGS, **MODELOPT, **_TORCHRUN, **_MEMSYM, **_LEGACY}

#: Destinations whose value this reader models; every other accepted argument is "ignored".
MODELLED = {
    "num_layers", "encoder_num_layers", "hidden_size", "num_attention_heads",
    "group_query_attention", "num_query_groups", "attention_output_gate",
    "kv_channels", "ffn_hidden_size", "swiglu", "quick_geglu", "squared_relu", "normalization",
    "activation_func_clamp_value",
    "vocab_size", "make_vocab_size_divisible_by", "tokenizer_type", "tokenizer_model", "vocab_file",
    "pad_vocab_size", "padded_vocab_size", "untie_embeddings_and_output_weights",
    "position_embedding_type",
    "use_rotary_position_embeddings", "add_position_embedding", "max_position_embeddings",
    "add_bias_linear", "add_qkv_bias", "num_experts", "moe_router_topk", "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size", "moe_shared_expert_gate", "moe_layer_freq",
    "moe_latent_size",
    "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
    "v_head_dim", "mtp_num_layers", "mtp_use_repeated_layer", "qk_layernorm",
    "hybrid_layer_pattern", "hybrid_override_pattern", "mtp_hybrid_override_pattern",
    "mamba_state_dim", "mamba_head_dim", "mamba_num_groups", "mamba_num_heads",
    "moe_router_enable_expert_bias",
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
    "attention_backend", "transformer_impl", "hidden_dropout",
    "attention_dropout",
    "bf16", "fp16", "fp8", "fp8_recipe", "fp8_param_gather", "fp4", "fp4_recipe", "fp4_param_gather",
    "first_last_layers_bf16", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16",
    "grad_reduce_in_bf16",
    "accumulate_allreduce_grads_in_fp32", "use_precision_aware_optimizer", "main_grads_dtype",
    "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype",
    "optimizer", "use_distributed_optimizer", "use_megatron_fsdp", "megatron_fsdp_version",
    "data_parallel_sharding_strategy", "megatron_fsdp_main_grads_dtype",
    "megatron_fsdp_main_params_dtype", "megatron_fsdp_grad_comm_dtype", "use_torch_fsdp2",
    "fsdp_double_buffer", "megatron_fsdp_max_pool_double_buffer", "nccl_ub",
    "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
    "overlap_moe_expert_parallel_comm", "defer_embedding_wgrad_compute", "wgrad_deferral_limit",
    "cp_comm_type", "cpu_offloading_num_layers", "cross_entropy_loss_fusion", "cross_entropy_fusion_impl",
    "cuda_graph_impl", "cuda_graph_modules", "cuda_graph_scope_deprecated", "enable_cuda_graph",
    "optimizer_cuda_graph",
    "external_cuda_graph", "create_attention_mask_in_dataloader", "check_for_nan_in_loss_and_grad",
    "moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "moe_enable_deepep",
    "moe_flex_dispatcher_num_sms", "muon_tp_mode", "muon_num_ns_steps", "muon_nesterov",
    "mla_down_proj_fusion", "fp32_residual_connection", "softmax_type",
}

#: ModelOpt's other options: read only by its model builder (post_training/model_builder.py)
#: or its own scripts (examples/post_training/modelopt), so without effect on pretrain_gpt.py
#: unless ModelOpt is enabled (noted, not listed as without effect).
MODELOPT_NOTE = ("a ModelOpt option, read only once ModelOpt is enabled (--modelopt-enabled, "
                 "--export-kd-teacher-load, or a ModelOpt checkpoint at --load, which memsym "
                 "assumes absent): not modelled")

#: Cited vocabulary sizes of tokenizers a launch script names but memsym cannot open.
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


#: The modules ``--recompute-modules`` accepts (args: the choices of ``--recompute-modules``).
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                     "shared_experts", "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc")


def megatron_arity(name: str):
    """How many values the Megatron-LM argument (or torchrun option) ``name`` takes: 0, 1,
    ``'+'``/``'*'`` or a count; None when Megatron does not accept it.

    >>> megatron_arity("--bf16"), megatron_arity("--lr"), megatron_arity("--recompute-modules")
    (0, 1, '+')
    """
    row = TABLE.get(name)
    return None if row is None else row[1]


#: TransformerConfig fields Megatron-LM keeps off its command line ("no CLI argument exists
#: for these", arguments.py:2306-2329 at d98e8a64dd), by the spelling a user may try: where
#: memsym takes each instead.
CONFIG_ONLY = {
    "--activation-func-fp8-input-store": "TransformerConfig.activation_func_fp8_input_store "
    "has no Megatron-LM argument (arguments.py:2329 at d98e8a64dd); memsym takes it as the job "
    "option activation_func_fp8_input_store or Bridge's model.activation_func_fp8_input_store",
    **{f"--fp8-{name.replace('_', '-')}": f"TransformerConfig.fp8_{name} has no Megatron-LM "
       f"argument (arguments.py:2333-2334 at d98e8a64dd); Megatron-Bridge sets it "
       f"(--bridge-recipe ... mixed_precision.fp8_{name}=true)"
       for name in ("dot_product_attention", "multi_head_attention")},
}


#: The Hugging Face Trainer's arguments (transformers 5.25 training_args.py, TrainingArguments:
#: ``deepspeed`` :1463, ``per_device_train_batch_size`` :777, ``gradient_accumulation_steps``
#: :849, ``gradient_checkpointing`` :926) given to Megatron-LM's reader: a script of the
#: user's, not pretrain_gpt.py.  A job command reads a pasted Trainer launch with the Trainer's
#: own reader (memsym.readers.hf_trainer, chosen by memsym.cli.reading), so this hint is what
#: a caller of :func:`memsym.readers.megatron.read_megatron_args` with such words sees.
_HF_TRAINER = ("a Hugging Face Trainer script's argument, not Megatron-LM's: paste the whole "
               "launch (launcher, script and its arguments) to a job command, which reads it as "
               "the Trainer's job (memsym.readers.hf_trainer)")
FOREIGN = {f"--{name}": _HF_TRAINER for name in (
    "per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing")}
#: ``--gpus`` is memsym's own option of ``search``, ``min-gpus`` and ``time``; a job command
#: reading Megatron-LM's arguments takes the GPUs as ``--world-size`` (the launcher's world
#: size, which pretrain_gpt.py reads from torchrun, not from an argument)
FOREIGN["--gpus"] = ("memsym's option of search, min-gpus and time, not Megatron-LM's: a job "
                     "command takes the GPUs as --world-size G")
#: ``--deepspeed`` is also Megatron-DeepSpeed's switch beside its ``--deepspeed_config``.
FOREIGN["--deepspeed"] = (
    "not Megatron-LM's: a Hugging Face Trainer script's (paste the whole launch to a job "
    "command, which reads it as the Trainer's job) or Megatron-DeepSpeed's (not read: name "
    "the MODEL and give --deepspeed-config FILE)")


class ArgumentError(UnknownNameError):
    """An argument pretrain_gpt.py does not accept (with the closest spellings)."""

    def __init__(self, name: str):
        MemsymError.__init__(self, "")
        self.kind, self.name = "Megatron-LM argument", name
        self.accepted = sorted(TABLE)
        self.suggestions = difflib.get_close_matches(name, self.accepted, n=3, cutoff=0.6)
        where = {**CONFIG_ONLY, **FOREIGN}
        hint = (f": {where[name]}" if name in where else
                f"; did you mean {' or '.join(self.suggestions)}?" if self.suggestions else
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


def _command_words(argv: Sequence[str]) -> list:
    """The words of ``argv`` that are arguments: checked for kind and size, with the launcher
    and the script's name (``torchrun [options] pretrain_gpt.py``) left out but the
    launcher's options kept."""
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
    return words + argv[start:]


def _option_value(w: str, words: list, i: int):
    """The dest, spelling and value of the option word ``w``, whose values (if it takes any
    and none is inline) start at ``words[i]``; returns ``(dest, name, value, next i)``."""
    if not looks_like_option(w):
        raise InvalidValueError(
            f"unexpected word {w[:60]!r}: pretrain_gpt.py takes no positional arguments "
            "(is it the value of a flag that takes none, or a value with a space in it?)")
    name, eq, inline = w.partition("=")
    if name not in TABLE:
        raise ArgumentError(name)
    dest, arity, const = TABLE[name]
    if arity == 0:
        if eq:
            raise InvalidValueError(f"{name} takes no value, got {w[:60]!r}")
        return dest, name, const, i
    got = [inline] if eq else []
    if not eq or arity in ("+", "*"):
        got, i = option_values(words, i, arity, got)
    if arity == 1:
        if len(got) != 1:
            raise InvalidValueError(f"{name} needs a value")
        return dest, name, got[0], i
    if arity == "+" and not got:
        raise InvalidValueError(f"{name} needs one or more values")
    if isinstance(arity, int) and arity > 1 and len(got) != arity:
        raise InvalidValueError(f"{name} needs {arity} values, got {len(got)}")
    return dest, name, tuple(got), i


def parse_megatron_argv(argv: Sequence[str]):
    """The raw values of a Megatron-LM argument list, by argparse's grammar for :data:`TABLE`.

    Nothing is evaluated: a value stays the word given (a flag's value is its ``const``), and
    the last occurrence of an argument wins, as in argparse.  A ``--step-batch-size-schedule``
    split into several words by an unquoted shell array is joined back and marked with the
    key ``"_split_schedule"``.

    Parameters
    ----------
    argv : sequence of str
        The words of the command (optionally after ``torchrun`` and its options), as a
        shell splits them.

    Returns
    -------
    values : dict
        Each dest given -> its raw value.
    order : list of str
        The spellings given, each once, in the order first given.
    spelled : dict
        Each dest -> the spelling last given.

    Raises
    ------
    ArgumentError
        An argument Megatron does not accept.
    InvalidValueError
        A positional word, a missing value, or a list too long.

    References
    ----------
    Megatron-LM ``megatron/training/arguments.py`` at ``d98e8a64dd`` (its argparse parser).

    Examples
    --------
    >>> values, order, spelled = parse_megatron_argv(["torchrun", "--nproc_per_node", "8",
    ...     "pretrain_gpt.py", "--bf16", "--num-layers=2"])
    >>> values
    {'torchrun_nproc_per_node': '8', 'bf16': True, 'num_layers': '2'}
    >>> order
    ['--nproc_per_node', '--bf16', '--num-layers']
    """
    words = _command_words(argv)
    values, order, spelled, split_schedule = {}, [], {}, []
    i = 0
    while i < len(words):
        dest, name, val, i = _option_value(words[i], words, i + 1)
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
# the reader of the parsed values
# ----------------------------------------------------------------------------------------------

class MegatronArguments:
    """The parsed values of a Megatron-LM command, read with bounds and named as spelled.

    Every rule of :mod:`memsym.readers.megatron_architecture` and
    :mod:`memsym.readers.megatron_training` reads through it, and records here what the user
    should know (each note once, in order).

    Parameters
    ----------
    raw : dict
        Dest -> raw value, from :func:`parse_megatron_argv`.
    spelled : dict
        Dest -> the spelling given, from :func:`parse_megatron_argv`.

    Attributes
    ----------
    notes : list of str
        Defaults applied and rules used, in the order read.

    Examples
    --------
    >>> r = MegatronArguments(*parse_megatron_argv(["--tensor-model-parallel-size", "2",
    ...                                             "--bf16"])[::2])
    >>> r.int("tensor_model_parallel_size", 1), r.flag("bf16"), r.flag("fp16")
    (2, True, False)
    """

    def __init__(self, raw: dict, spelled: dict):
        self.raw, self.spelled, self.notes = raw, spelled, []

    def note(self, text: str):
        """Record ``text`` for the user, once."""
        if text not in self.notes:
            self.notes.append(text)

    def given(self, dest) -> bool:
        """Whether the command gives ``dest``."""
        return dest in self.raw

    def flag(self, dest) -> bool:
        """``dest``'s value as a switch (False when not given)."""
        return bool(self.raw.get(dest, False))

    def name(self, dest) -> str:
        """The spelling of ``dest`` the command used (its long form when not given)."""
        return self.spelled.get(dest, "--" + dest.replace("_", "-"))

    def int(self, dest, default=None, lo=1, hi=MAX_GPUS):
        """``dest`` as a whole number in [lo, hi], or ``default`` when not given."""
        if dest not in self.raw:
            return default
        return whole(self.raw[dest], self.name(dest), lo, hi)

    def choice(self, dest, accepted, default=None):
        """``dest``'s value, one of ``accepted``, or ``default`` when not given."""
        if dest not in self.raw:
            return default
        val = self.raw[dest]
        if val not in accepted:
            raise UnknownNameError(f"value of {self.name(dest)}", val, accepted)
        return val

    def require(self, dest, hi):
        """``dest`` as a whole number in [1, hi]; an argument Megatron requires."""
        if dest not in self.raw:
            raise InvalidValueError(f"{self.name(dest)} is required (Megatron's validate_args)")
        return self.int(dest, lo=1, hi=hi)

    def seq_length(self) -> int:
        """The sequence length [tokens]: ``--seq-length`` or its alias ``--encoder-seq-length``."""
        # args: seq_length or its alias encoder_seq_length (exactly one).
        if self.given("seq_length") and self.given("encoder_seq_length"):
            raise InvalidValueError("give --seq-length or --encoder-seq-length, not both")
        dest = "seq_length" if self.given("seq_length") else "encoder_seq_length"
        if not self.given(dest):
            raise InvalidValueError("--seq-length is required")
        return self.int(dest, hi=MAX_SEQ)

    def world_size(self):
        """The world size [GPUs]: memsym's ``--world-size``, else torchrun's; None if unknown."""
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
        """torchrun's ``--nproc_per_node`` x ``--nnodes`` [GPUs]; None when they do not fix it."""
        if not self.given("torchrun_nproc_per_node"):
            return None
        n = str(self.raw["torchrun_nproc_per_node"])
        nodes = str(self.raw.get("torchrun_nnodes", "1"))
        if n in ("gpu", "cuda", "auto", "cpu") or ":" in nodes:
            self.note(f"torchrun --nproc_per_node {n} --nnodes {nodes} does not fix the world "
                      "size: add --world-size N")
            return None
        return whole(n, "--nproc_per_node", 1, MAX_GPUS) * whole(nodes, "--nnodes", 1, MAX_GPUS)

    def not_modelled(self, name: str, dest: str) -> bool:
        """Refuse an argument Megatron refuses or that changes the model's structure beyond
        memsym's Architecture; note one that changes memory or time in a way memsym does not
        model, or that :mod:`memsym.readers.megatron_effects` does not classify (True when
        noted).  False: read (MODELLED), without effect, or given at Megatron's default."""
        if dest in MEGATRON_REFUSES:
            raise InvalidValueError(MEGATRON_REFUSES[dest])
        if dest in VALUE_NOT_MODELLED:
            value, what = VALUE_NOT_MODELLED[dest]
            if same_value(self.raw[dest], value):
                self.note(f"{name}: {what} is not modelled")
                return True
            return False
        if dest in STRUCTURE_NOT_MODELLED:
            if self.raw[dest] in (None, False):
                return False
            raise InvalidValueError(f"{name} ({STRUCTURE_NOT_MODELLED[dest]}) changes the model "
                                    "in a way memsym does not model")
        for noted, effect in ((MEMORY_NOT_MODELLED, "memory"), (TIME_NOT_MODELLED, "step time")):
            if dest in noted:
                # a switch given stores its non-default constant; a value at Megatron's
                # default (INERT) changes nothing
                if dest in INERT and same_value(self.raw[dest], INERT[dest]):
                    return False
                self.note(f"{name}: {noted[dest]} changes {effect} and is not modelled")
                return True
        if name in MODELOPT:
            self.note(f"{name}: {MODELOPT_NOTE}")
            return True
        if dest not in MODELLED and no_effect_reason(dest) is None:
            self.note(f"{name}: not classified by memsym (its effect on memory and time is "
                      "unknown): not modelled")
            return True
        return False


def encoder_layers_alias(raw: dict, spelled: dict):
    """``--encoder-num-layers`` read as ``--num-layers``, as Megatron's ``validate_args`` reads
    it (training/arguments.py:1304-1311 at d98e8a64dd: one of the two, copied to the other).

    >>> raw, spelled = {"encoder_num_layers": "4"}, {"encoder_num_layers": "--encoder-num-layers"}
    >>> encoder_layers_alias(raw, spelled); raw["num_layers"], spelled["num_layers"]
    ('4', '--encoder-num-layers')
    """
    if "encoder_num_layers" not in raw:
        return
    if "num_layers" in raw:
        raise InvalidValueError("give --num-layers or --encoder-num-layers, not both "
                                "(Megatron's validate_args)")
    raw["num_layers"] = raw["encoder_num_layers"]
    spelled["num_layers"] = spelled["encoder_num_layers"]
