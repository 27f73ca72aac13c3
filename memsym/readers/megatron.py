"""Read a Megatron-LM ``pretrain_gpt.py`` argument list with Megatron's own defaults and rules.

This module owns the translation of a pasted command (optionally preceded by ``torchrun`` and its
options) into plain data: the architecture (``memsym.model.Architecture`` field names), the
layout, training, precision and optimizer settings, the arguments ignored and the defaults applied
(:func:`read_megatron_args`), or, with a model memsym already knows, the changes the arguments
make to its recipe (:func:`read_megatron_overrides`).  The parts it composes live beside it:
the argument table, the parser and the reader of values in
:mod:`memsym.readers.megatron_arguments`, the model's rules in
:mod:`memsym.readers.megatron_architecture`, the layout and training rules in
:mod:`memsym.readers.megatron_training`, and the precision and optimizer rules in
:mod:`memsym.readers.megatron_precision`; the names other modules import from here are
re-exported.

Revision read: NVIDIA/Megatron-LM ``d98e8a64dd`` (main, 2026-08-22).  ``args`` below means
``megatron/training/arguments.py``, ``TC`` ``megatron/core/transformer/transformer_config.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import InvalidValueError
from ..text import looks_like_option   # argparse's rule, shared with the CLI's reading
from ..vocabulary import FP8_RECIPE_COUNTED_AS, recompute_modules
from ._values import (MAX_GPUS, MAX_HEADS, MAX_HIDDEN, MAX_LAYERS, MAX_SEQ,
                      MAX_VOCAB)
from .megatron_architecture import (POSITION_EMBEDDING_TYPES, counted_position_type,
                                    megatron_padded_vocab,
                                    hybrid_override, megatron_architecture)
from .megatron_arguments import (KNOWN_TOKENIZER_VOCAB, MEGATRON_DEFAULTS,
                                 MEGATRON_FSDP_SCHEMES, MODELLED, SCHEDULE_ENTRY, TABLE,
                                 MegatronArguments, encoder_layers_alias,
                                 megatron_arity, parse_megatron_argv)
from .megatron_numerics import megatron_softmax
from .megatron_pattern import MAX_PATTERN_CHARS, parse_moe_layer_freq
from .megatron_precision import (FP4_FORMATS, FP4_RECIPES, FP8_FORMATS, MEGATRON_FP8_RECIPES,
                                 MUON_DESTS, megatron_bf16_layers, megatron_fsdp_options,
                                 megatron_muon, megatron_optimizer, megatron_precision)
from .megatron_training import (attention_kernels, checked_recompute_modules, keeps_no_scores,
                                megatron_layout, megatron_training)
from .megatron_userbuffers import UB_DEST, megatron_ub_option
from .recipe_mechanisms import CUDA_GRAPH_DESTS, megatron_cuda_graph_options, megatron_dispatcher

# Besides the entry points, the names the command line, the job builder, the Bridge reader and
# the emitter import from here (the argument table's arity, ArgumentError, SCHEDULE_ENTRY,
# MEGATRON_FSDP_SCHEMES, the bounds) are re-exported from the modules that own them.
__all__ = ["MegatronJob", "MegatronOverrides", "read_megatron_args", "read_megatron_overrides", "megatron_arity", "looks_like_option", "SCHEDULE_ENTRY", "parse_moe_layer_freq", "KNOWN_TOKENIZER_VOCAB",
           "MAX_LAYERS", "MAX_HIDDEN", "MAX_HEADS", "MAX_VOCAB", "MAX_SEQ", "MAX_GPUS",
           "MAX_PATTERN_CHARS"]


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


def read_megatron_args(argv: Sequence[str], *, tp_comm_overlap: bool = False) -> MegatronJob:
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
    tp_comm_overlap : bool
        TP overlap is on beside ``argv`` (memsym's own ``--tp-comm-overlap``, which the
        command line reads itself): ``--tp-comm-overlap-cfg FILE`` is then read
        (:func:`memsym.readers.megatron_userbuffers.megatron_ub_option`), as it is under
        ``argv``'s own ``--tp-comm-overlap``; otherwise it is ignored, as Megatron ignores it.

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
    raw, order, spelled = parse_megatron_argv(argv)
    encoder_layers_alias(raw, spelled)
    r = MegatronArguments(raw, spelled)
    arch = megatron_architecture(r)
    layout = megatron_layout(r, arch)
    training = megatron_training(r, arch, layout)
    precision = megatron_precision(r)
    optimizer = megatron_optimizer(r, arch, layout, precision)
    ub = megatron_ub_option(r, optimizer["tp_comm_overlap"] or tp_comm_overlap)
    if ub is not None:
        optimizer["tp_comm_overlap_cfg"] = ub
    training["bias_activation_fusion"] = _glu_fusion(r)
    if r.flag("quick_geglu") and training["bias_activation_fusion"] and _dense_mlp(arch):
        raise InvalidValueError(
            "--quick-geglu with the bias-GELU fusion on (give --no-bias-gelu-fusion or "
            "--disable-bias-linear) fails in a dense or shared-expert MLP: Megatron-core's "
            "MLP fuses only gelu and swiglu (transformer/mlp.py:299-319 at d98e8a64dd)")
    ignored = []
    for name in order:
        dest = TABLE[name][0]
        if (dest == UB_DEST and ub is not None) or (dest == _SWIGLU_FUSION and r.flag("swiglu")) \
                or (dest == _GELU_FUSION and r.flag("quick_geglu")):
            continue        # read here, where it acts
        if dest == _GELU_FUSION and r.flag("swiglu"):
            ignored.append(name)    # a SwiGLU's fusion is bias_swiglu_fusion's (:314-317)
            continue
        if r.not_modelled(name, dest):
            continue        # noted: it changes memory or time, so it is not "without effect"
        if dest not in MODELLED:
            ignored.append(name)
    defaults = tuple((option, value, where) for option, dests, value, where in MEGATRON_DEFAULTS
                     if not any(r.given(d) for d in dests))
    return MegatronJob(architecture=arch, layout=layout, training=training, precision=precision,
                       optimizer=optimizer, ignored=tuple(ignored), notes=tuple(r.notes),
                       defaults=defaults)


#: ``--no-bias-swiglu-fusion``'s dest (store_false, args:2895-2898 at d98e8a64dd: fused unless
#: given), the fusion of a ``--swiglu`` model (argument_utils.py:314-317).
_SWIGLU_FUSION = "bias_swiglu_fusion"
#: ``--no-bias-gelu-fusion``'s dest (store_false, args:2892-2894), the fusion of a model without
#: ``--swiglu`` (argument_utils.py:318-319): a ``--quick-geglu`` model's gated unit.
_GELU_FUSION = "bias_gelu_fusion"


def _glu_fusion(r: MegatronArguments) -> bool:
    """``TransformerConfig.bias_activation_fusion`` of a gated model (True without a gated unit).

    ``core_transformer_config_from_args`` (argument_utils.py:314-319 at d98e8a64dd) sets it to
    ``args.bias_swiglu_fusion`` under ``--swiglu``, else to ``args.bias_gelu_fusion``, which
    ``validate_args`` turns off with ``--disable-bias-linear`` (args:1604-1606); a
    ``--quick-geglu`` model's experts then run the eager ``glu`` (moe/experts.py:995-1016).

    >>> from .megatron_arguments import parse_megatron_argv
    >>> def fusion(*argv):
    ...     raw, _, spelled = parse_megatron_argv(list(argv))
    ...     return _glu_fusion(MegatronArguments(raw, spelled))
    >>> fusion("--swiglu", "--no-bias-swiglu-fusion"), fusion("--swiglu", "--disable-bias-linear")
    (False, True)
    >>> fusion("--quick-geglu"), fusion("--quick-geglu", "--disable-bias-linear")
    (True, False)
    """
    if r.flag("swiglu"):
        return r.raw.get(_SWIGLU_FUSION, True) is not False
    if not r.flag("quick_geglu"):
        return True         # no gated unit: the non-gated activations keep what they keep
    return _gelu_fusion(r)


def _gelu_fusion(r: MegatronArguments) -> bool:
    """``args.bias_gelu_fusion`` after ``validate_args`` (off with --disable-bias-linear)."""
    return r.raw.get(_GELU_FUSION, True) is not False \
        and r.raw.get("add_bias_linear", True) is not False


def _dense_mlp(arch: dict) -> bool:
    """Whether a layer runs Megatron-core's ``MLP`` (a dense layer, a hybrid pattern's ``-``
    or shared experts, whose ``SharedExpertMLP.forward`` is ``MLP.forward``)."""
    experts = bool(arch.get("num_experts"))
    freq = arch.get("moe_layer_freq", 1)
    ffn = arch.get("ffn_layers")
    if ffn is not None:       # a hybrid pattern: its '-' layers are the dense MLPs
        moe = freq if isinstance(freq, (tuple, list)) else (0,) * len(ffn)
        dense = any(f and not m for f, m in zip(ffn, moe))
    else:
        dense = not experts or (0 in freq if isinstance(freq, (tuple, list)) else freq != 1)
    return dense or (experts and bool(arch.get("moe_shared_expert_intermediate_size")))


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
    "mla_down_proj_fusion": ("mla_down_proj_fusion", True),
    "recompute_activations": ("recompute", "selective"),
    # transformer_config.py:82: one MTP layer built and run mtp_num_layers times
    "mtp_use_repeated_layer": ("mtp_repeated", True),
    # attention.py:1689-1691: linear_qkv's output grows by a*d_h, the sigmoid output gate
    "attention_output_gate": ("attention_output_gate", True),
    # memsym.terms.fp32_residual (validate_args' 16-bit rule: memsym.job_checks)
    "fp32_residual_connection": ("fp32_residual_connection", True),
}

#: Accepted with a model and changing nothing memsym counts (the model's own vocabulary and
#: fp32 gradient accumulation stand; grouped GEMMs, the expert-bias buffer, and the native
#: fused loss, which keeps the fp32 softmax memsym counts).
_OVERRIDE_NO_EFFECT = {"accumulate_allreduce_grads_in_fp32", "moe_grouped_gemm", "moe_router_enable_expert_bias", "tokenizer_type",
                       "tokenizer_model", "vocab_file", "cross_entropy_loss_fusion"}


#: Megatron-LM's token-dispatcher arguments (:func:`megatron_dispatcher`).
_DISPATCHER_DESTS = ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend",
                     "moe_enable_deepep", "moe_flex_dispatcher_num_sms")

#: The dests :func:`read_megatron_overrides` reads into options or notes itself.
_OVERRIDE_HANDLED = set(_OVERRIDE_SWITCHES) | {
    "add_bias_linear", "position_embedding_type", "add_position_embedding", "moe_layer_freq",
    "encoder_seq_length", "decoder_seq_length", "encoder_num_layers", "fp8", "attention_backend",
    "transformer_impl", "recompute_modules", "moe_layer_recompute", "use_megatron_fsdp",
    "data_parallel_sharding_strategy", "num_layers_per_virtual_pipeline_stage",
    "num_virtual_stages_per_pipeline_rank", "torchrun_nproc_per_node", "torchrun_nnodes",
    "rampup_batch_size", "step_batch_size_schedule", "pad_vocab_size", "padded_vocab_size", "fp8_recipe", "fp4",
    "fp4_recipe", "megatron_fsdp_main_grads_dtype", "megatron_fsdp_main_params_dtype",
    "fsdp_double_buffer", "megatron_fsdp_max_pool_double_buffer", "nccl_ub", "softmax_type",
    *CUDA_GRAPH_DESTS,
    *(d for d, _ in MUON_DESTS)}


def read_megatron_overrides(argv: Sequence[str], *, num_layers: int, p: int = 1,
                            has_experts: bool = False, mamba: bool = False, mtp_layers: int = 0,
                            tp_comm_overlap: bool = False, quick_geglu: bool = False,
                            gated: bool = True) -> MegatronOverrides:
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
        Whether the model has experts (``--disable-bias-linear`` also drops router biases;
        a hybrid pattern's ``E`` needs them).
    mamba : bool
        Whether the model has Mamba mixer sizes (a hybrid pattern's ``M`` needs them).
    mtp_layers : int
        The model's MTP depths [layers] (the legacy ``--mtp-hybrid-override-pattern``).
    tp_comm_overlap : bool
        TP overlap is on (memsym's ``--tp-comm-overlap``): ``--tp-comm-overlap-cfg FILE`` is
        read (:func:`memsym.readers.megatron_userbuffers.megatron_ub_option`), else ignored.
    quick_geglu : bool
        The model's gated unit is Megatron's quick-GeGLU (GPT-OSS's clamped one), whose fusion
        is ``bias_gelu_fusion``'s (argument_utils.py:318-319), not ``--no-bias-swiglu-fusion``'s.
    gated : bool
        The model's MLP is gated (``Architecture.swiglu``): ``--no-bias-gelu-fusion`` is then
        without effect unless the unit is a quick-GeGLU; a non-gated GELU MLP's is noted.

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
    raw, order, spelled = parse_megatron_argv(argv)
    r = MegatronArguments(raw, spelled)
    opts = {}
    if r.given("encoder_num_layers"):   # validate_args' alias of --num-layers (args:1304-1311)
        num_layers = opts["num_layers"] = r.int("encoder_num_layers", hi=MAX_LAYERS)
    _override_switches(r, opts, has_experts)
    # a hybrid layer pattern defines the layers over the MODEL's sizes (hybrid_override)
    hybrid = hybrid_override(r, num_experts=has_experts, mamba=mamba, mtp_layers=mtp_layers)
    if hybrid is not None:
        opts.update(hybrid)
        if hybrid["num_layers"] != num_layers:
            # validate_args (arguments.py:787-797 at d98e8a64dd): the pattern's layer count
            # replaces --num-layers, with a warning; the MODEL's sizes are kept
            r.note(f"{r.name(_pattern_dest(r))} sets {hybrid['num_layers']} layers: the "
                   f"model's {num_layers} are not the ones priced (Megatron's validate_args)")
        num_layers = hybrid["num_layers"]
        if r.given("moe_layer_freq"):
            r.note("--moe-layer-freq ignored: the hybrid pattern's E symbols are the MoE layers")
    _override_model(r, opts, num_layers, hybrid is None)
    _override_precision(r, opts)
    _override_attention(r, opts)
    _override_recompute(r, opts)
    _override_sharding(r, opts)
    _override_layout(r, opts, num_layers, p)
    if any(r.given(dest) for dest in CUDA_GRAPH_DESTS):
        opts.update(megatron_cuda_graph_options(r))
    # Muon's arguments given change the job's (checked as Megatron's argparse checks them)
    opts.update({k: v for k, v in megatron_muon(r, True).items() if r.given(k)})
    if has_experts and any(r.given(dest) for dest in _DISPATCHER_DESTS):
        # the MODEL's experts are dispatched as the command says (a dense model builds no
        # token dispatcher: the flags are then ignored, as Megatron-core ignores them)
        opts.update(megatron_dispatcher(r))
    # the MODEL's layout is the job's (memsym's options beside these): the tensor-parallel size
    # is checked against the rows where the two meet (memsym.cli.training_options)
    megatron_padded_vocab(r, opts, 1)
    ub = megatron_ub_option(r, tp_comm_overlap or r.flag("tp_comm_overlap"))
    if ub is not None:
        opts["tp_comm_overlap_cfg"] = ub
    fusion, inert = _override_fusion(r, opts, quick_geglu, gated)
    ignored = _override_ignored(r, order, (_DISPATCHER_DESTS if has_experts else ())
                                + ((UB_DEST,) if ub is not None else ()) + fusion, inert)
    return MegatronOverrides(options=opts, ignored=tuple(ignored), notes=tuple(r.notes))


def _override_switches(r: MegatronArguments, opts: dict, has_experts: bool):
    """The switches that set one option each, and --disable-bias-linear."""
    if r.flag("bf16") and r.flag("fp16"):
        raise InvalidValueError("--bf16 and --fp16 are mutually exclusive")
    for dest, (option, value) in _OVERRIDE_SWITCHES.items():
        if r.flag(dest):
            opts[option] = value
    if r.given("add_bias_linear") and r.raw["add_bias_linear"] is False:   # --disable-bias-linear
        opts["add_bias_linear"] = False
        if has_experts:   # router.py: the router's bias exists iff add_bias_linear
            opts["moe_router_bias"] = False


def _override_model(r: MegatronArguments, opts: dict, num_layers: int, moe_freq: bool = True):
    """The positions, the MoE layer pattern (``moe_freq``: not a hybrid pattern's) and the
    sequence length."""
    if r.given("position_embedding_type"):
        pos = r.choice("position_embedding_type", POSITION_EMBEDDING_TYPES)
        opts["position_embedding_type"] = counted_position_type(r, pos)
    if r.raw.get("add_position_embedding", True) is False \
            and opts.get("position_embedding_type") != "rope":
        raise InvalidValueError("--no-position-embedding is refused by Megatron unless the "
                                "positions are rope; use --position-embedding-type")
    if moe_freq and r.given("moe_layer_freq"):
        opts["moe_layer_freq"] = parse_moe_layer_freq(r.raw["moe_layer_freq"], num_layers)
    for dest in ("encoder_seq_length", "decoder_seq_length"):
        if r.given(dest):
            opts["seq_length"] = r.int(dest, hi=MAX_SEQ)


def _override_precision(r: MegatronArguments, opts: dict):
    """FP8 (memsym's fp8 precision) and its recipe."""
    if r.given("fp8"):
        r.choice("fp8", FP8_FORMATS)
        opts["precision"] = "fp8"
        if not (r.given("bf16") or r.given("fp16")):
            r.note("--fp8-format without --bf16: the weights are counted as bf16 with FP8 "
                   "GEMMs (memsym's fp8 precision)")
    if r.given("fp4"):      # --fp4-format e2m1 (--fp4-recipe nvfp4): memsym's fp4
        r.choice("fp4", FP4_FORMATS)
        r.choice("fp4_recipe", FP4_RECIPES, "nvfp4")
        opts["precision"] = "fp4"
    if r.given("fp8_recipe") and r.given("fp8"):
        recipe = r.choice("fp8_recipe", MEGATRON_FP8_RECIPES)
        opts["fp8_recipe"] = FP8_RECIPE_COUNTED_AS[recipe]
    if r.given("first_last_layers_bf16"):   # the preset's own recipe counts as given
        pair = megatron_bf16_layers(r, r.given("fp8") or r.given("fp4"),
                                    r.raw.get("fp8_recipe", "delayed") if r.given("fp8") else None)
        if any(pair):
            opts["bf16_layers"] = pair


def _override_attention(r: MegatronArguments, opts: dict):
    """Whether the attention keeps no s x s score matrix (backend and implementation), and
    what ``--softmax-type`` changes (:func:`memsym.readers.megatron_numerics.megatron_softmax`)."""
    if r.given("attention_backend") or r.given("transformer_impl"):
        opts["flash_attention"] = keeps_no_scores(*attention_kernels(r))
    if r.given("softmax_type"):   # the sink's parameter and attention backend
        opts.update(megatron_softmax(r, backend=attention_kernels(r)[0]))


def _override_recompute(r: MegatronArguments, opts: dict):
    """Selective recompute of the modules named (and the deprecated --moe-layer-recompute)."""
    if r.given("recompute_modules") or r.flag("moe_layer_recompute"):
        mods = checked_recompute_modules(r.raw.get("recompute_modules") or ("core_attn",))
        if r.flag("moe_layer_recompute") and "moe" not in mods:
            mods += ("moe",)   # TC.__post_init__: the deprecated flag appends "moe"
        # the modules are read under selective granularity (memsym's --recompute-granularity
        # may say so too; a contradiction is refused by the caller)
        opts["recompute"] = "selective"
        opts["recompute_modules"] = recompute_modules(mods)


def _override_sharding(r: MegatronArguments, opts: dict):
    """Megatron-FSDP's sharding strategy as the scheme that shards the same states."""
    if r.flag("use_megatron_fsdp"):
        if r.flag("use_torch_fsdp2"):
            raise InvalidValueError("--use-megatron-fsdp and --use-torch-fsdp2 are exclusive")
        strategy = r.choice("data_parallel_sharding_strategy", MEGATRON_FSDP_SCHEMES,
                            "optim_grads_params")
        opts["sharding"] = MEGATRON_FSDP_SCHEMES[strategy]
        opts["megatron_fsdp"] = strategy
        r.note(f"Megatron-FSDP {strategy}: its own buffers, sharded as sharding "
               f"{opts['sharding']} shards them")
        opts.update(megatron_fsdp_options(r))
    elif r.given("data_parallel_sharding_strategy"):
        r.note("--data-parallel-sharding-strategy has effect only with --use-megatron-fsdp")


def _override_layout(r: MegatronArguments, opts: dict, num_layers: int, p: int):
    """The virtual pipeline stages, the launcher's world size and the batch-size ramp-up."""
    if r.given("rampup_batch_size") or r.given("step_batch_size_schedule"):
        r.note("batch-size ramp-up or schedule: memory and time are estimated at the final "
               "global batch size (--global-batch-size)")
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


#: The hybrid layer patterns: the layers of a whole command or over a MODEL's sizes
#: (memsym.readers.megatron_architecture.hybrid_override), read by read_megatron_overrides.
_HYBRID_DESTS = ("hybrid_layer_pattern", "hybrid_override_pattern", "mtp_hybrid_override_pattern")


def _override_fusion(r: MegatronArguments, opts: dict, quick_geglu: bool,
                     gated: bool = True) -> tuple:
    """The gated unit's ``bias_activation_fusion`` the arguments turn off over the MODEL's
    (argument_utils.py:314-319: ``--no-bias-swiglu-fusion`` a SwiGLU's, ``bias_gelu_fusion``
    the command's or the MODEL's quick-GeGLU's); returns the dests so read, and those without
    effect on this model (``bias_gelu_fusion`` beside a SwiGLU)."""
    geglu = (r.flag("quick_geglu") or quick_geglu) and not r.flag("swiglu") \
        and not r.flag("squared_relu")
    swiglu_off = r.given(_SWIGLU_FUSION) and not geglu
    if swiglu_off or (geglu and not _gelu_fusion(r)):
        opts["bias_activation_fusion"] = False     # the MODEL's gated unit runs eagerly
    gated = (gated or r.flag("swiglu") or r.flag("quick_geglu")) and not r.flag("squared_relu")
    return (((_SWIGLU_FUSION,) if swiglu_off else ()) + ((_GELU_FUSION,) if geglu else ()),
            (_GELU_FUSION,) if gated and not geglu else ())


def _pattern_dest(r: MegatronArguments) -> str:
    """The hybrid layer pattern's dest as given (its deprecated spelling included)."""
    return next(d for d in _HYBRID_DESTS[:2] if r.given(d)) \
        if any(r.given(d) for d in _HYBRID_DESTS[:2]) else _HYBRID_DESTS[0]


def _override_ignored(r: MegatronArguments, order: list, read=(), inert=()) -> list:
    """The arguments given that change nothing memsym counts; the others not read are noted
    (or refused, when they change the model's structure).  ``read``: dests read for this
    model beside :data:`_OVERRIDE_HANDLED`; ``inert``: dests without effect on this model."""
    ignored = []
    for name in order:
        dest = TABLE[name][0]
        if dest in inert:
            ignored.append(name)
        elif r.not_modelled(name, dest):
            pass
        elif dest in _OVERRIDE_HANDLED or dest in read or dest in _HYBRID_DESTS:
            continue
        elif dest in _OVERRIDE_NO_EFFECT or dest not in MODELLED:
            # not_modelled noted every dest neither read nor without effect (NO_EFFECT)
            ignored.append(name)
        else:
            # the optimizer-state dtypes of the precision-aware optimizer, Megatron-FSDP's
            # buffer dtypes, distributed saved activations: not in memsym's model
            r.note(f"{name}: changes memory and is not modelled")
    return ignored
