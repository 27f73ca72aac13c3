"""Megatron-LM's parallel, batch, recompute, precision and optimizer arguments, with its rules.

This module owns what a ``pretrain_gpt.py`` command says about the job around its model: the
layout (tensor, pipeline, context, expert and data parallelism, virtual pipeline stages, the
uneven or custom pipeline split, the world size) and the training run (sequence, micro- and
global batch, recompute, attention backend, dropouts), each with Megatron's defaults and the
checks of ``validate_args`` and ``TransformerConfig.__post_init__``; the precision and the
optimizer are :mod:`memsym.readers.megatron_precision`'s.  The values are read through
:class:`memsym.readers.megatron_arguments.MegatronArguments`; the architecture they check
against is :func:`memsym.readers.megatron_architecture.megatron_architecture`'s.

Revision read: NVIDIA/Megatron-LM ``d98e8a64dd`` (main, 2026-08-22).  ``args`` below means
``megatron/training/arguments.py``, ``TC`` ``megatron/core/transformer/transformer_config.py``.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import InvalidValueError, UnknownNameError
from ._values import MAX_BATCH, MAX_LAYERS, fraction
from .megatron_arguments import RECOMPUTE_MODULES, MegatronArguments
from .megatron_numerics import megatron_fp32_residual, megatron_softmax
from .recipe_mechanisms import megatron_dispatcher, megatron_mechanism_options

__all__ = ["checked_recompute_modules", "megatron_layout", "megatron_training",
           "attention_kernels", "keeps_no_scores"]


# ----------------------------------------------------------------------------------------------
# layout
# ----------------------------------------------------------------------------------------------

def megatron_layout(r: MegatronArguments, arch: dict) -> dict:
    """The parallel layout of a Megatron-LM command.

    Sizes default to 1 (the expert tensor-parallel size to the tensor-parallel size);
    ``--sequence-parallel`` is dropped at TP 1, as Megatron drops it; the data-parallel size
    is world / (t p c) when the world size is known (``--world-size``, else torchrun's).

    Parameters
    ----------
    r : MegatronArguments
        The command's values; the rules used are noted there.
    arch : dict
        The architecture read (:func:`memsym.readers.megatron_architecture.megatron_architecture`).

    Returns
    -------
    dict
        ``t, p, c, e, t_e, sequence_parallel, first_stage_layers, last_stage_layers, v,
        world_size``, ``pipeline_layout`` and the account-for flags when given, and ``d``
        (data-parallel size [GPUs]) when the world size is known.

    Raises
    ------
    InvalidValueError
        A layout ``validate_args`` refuses.

    References
    ----------
    Megatron-LM ``megatron/training/arguments.py`` (``validate_args``) at ``d98e8a64dd``.

    Examples
    --------
    >>> from memsym.readers.megatron_arguments import parse_megatron_argv
    >>> r = MegatronArguments(*parse_megatron_argv(["--seq-length", "128", "--world-size", "8",
    ...     "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"])[::2])
    >>> lay = megatron_layout(r, {"num_layers": 4})
    >>> lay["t"], lay["p"], lay["d"], lay["v"]
    (2, 2, 2, None)
    """
    L = arch["num_layers"]
    t = r.int("tensor_model_parallel_size", 1)
    p = r.int("pipeline_model_parallel_size", 1)
    c = r.int("context_parallel_size", 1)
    e = r.int("expert_model_parallel_size", 1)
    t_e = r.int("expert_tensor_parallel_size", t)   # args: defaults to TP
    lay = {"t": t, "p": p, "c": c, "e": e, "t_e": t_e}
    E = arch.get("num_experts")
    if e > 1 and (not E or E % e):   # args: "Number of experts should be a multiple of ..."
        raise InvalidValueError(f"--expert-model-parallel-size {e} needs --num-experts a "
                                f"multiple of it (got {E})")
    seq = r.seq_length()
    if c > 1 and seq % (2 * c):       # args: seq-length a multiple of 2 * CP
        raise InvalidValueError(f"--seq-length {seq} must be a multiple of 2 x "
                                f"--context-parallel-size {c}")
    sp = r.flag("sequence_parallel")
    if sp and t == 1:   # args: "Disabling sequence parallelism because tensor ... disabled"
        sp = False
        r.note("--sequence-parallel has no effect at tensor-parallel size 1 (Megatron turns "
               "it off)")
    lay["sequence_parallel"] = sp
    _pipeline_split(r, lay, L)
    _data_parallel(r, arch, lay)
    return lay


def _pipeline_split(r: MegatronArguments, lay: dict, L: int):
    """The uneven first/last stages, the custom layout and the virtual stages."""
    p = lay["p"]
    first = r.int("decoder_first_pipeline_num_layers", None, lo=0, hi=MAX_LAYERS)
    last = r.int("decoder_last_pipeline_num_layers", None, lo=0, hi=MAX_LAYERS)
    lay["first_stage_layers"], lay["last_stage_layers"] = first, last
    layout_text = r.raw.get("pipeline_model_parallel_layout") \
        if r.given("pipeline_model_parallel_layout") else None
    account = {k: True for k in ("account_for_embedding_in_pipeline_split",
                                 "account_for_loss_in_pipeline_split") if r.flag(k)}
    custom = layout_text is not None or bool(account)
    lay["v"] = _virtual_stages(r, L, p, first, last, custom)
    if not custom and first is None and last is None and lay["v"] is None and L % p:
        raise InvalidValueError(f"--num-layers {L} is not divisible by "
                                f"--pipeline-model-parallel-size {p} (Megatron's validate_args)")
    if layout_text is not None:
        # transformer_config.py: the layout string, parsed and validated by memsym.job
        lay["pipeline_layout"] = str(layout_text)
    lay.update(account)


def _data_parallel(r: MegatronArguments, arch: dict, lay: dict):
    """The world size and the data-parallel size it gives."""
    t, p, c, e, t_e = lay["t"], lay["p"], lay["c"], lay["e"], lay["t_e"]
    world = r.world_size()
    lay["world_size"] = world
    if world is not None:
        # a launch script's world size is often one node's GPUs (its node count from the
        # scheduler's environment, which memsym does not read)
        hint = "" if r.given("world_size") else \
            "; add --world-size N (launch scripts give one node's GPUs)"
        model = t * p * c
        if world % model:   # args: "world size ... is not divisible by total_model_size"
            raise InvalidValueError(f"world size {world} is not divisible by t*p*c = {model}{hint}")
        lay["d"] = world // model     # args: data_parallel_size excludes CP
        if arch.get("num_experts") and world % (t_e * e * p):
            raise InvalidValueError(f"world size {world} is not divisible by expert t_e*e*p = "
                                    f"{t_e * e * p}{hint}")
    else:
        r.note("world size unknown: add --world-size N for the data-parallel size")


def _virtual_stages(r: MegatronArguments, L, p, first, last, custom=False):
    """The virtual pipeline stages per rank (None without interleaving)."""
    n_layers = r.int("num_layers_per_virtual_pipeline_stage", None, hi=MAX_LAYERS)
    n_stages = r.int("num_virtual_stages_per_pipeline_rank", None, hi=MAX_LAYERS)
    legacy = r.int("virtual_pipeline_model_parallel_size", None, hi=MAX_LAYERS)
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
        r.note("--virtual-pipeline-model-parallel-size is the legacy spelling of "
               "--num-virtual-stages-per-pipeline-rank")
    if v == 1:
        v = None
    if v is not None:
        # args: interleaving needs PP > 1 (PP > 2 with --no-overlap-p2p-communication)
        overlap = r.raw.get("overlap_p2p_comm", True)
        if p <= (1 if overlap else 2):
            raise InvalidValueError(f"the interleaved schedule needs --pipeline-model-parallel-"
                                    f"size > {1 if overlap else 2}, got {p}")
    return v


# ----------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------

def megatron_training(r: MegatronArguments, arch: dict, lay: dict) -> dict:
    """The training settings of a Megatron-LM command.

    The global batch defaults to micro-batch x DP (one microbatch); recompute follows
    ``validate_args`` and ``TransformerConfig`` (selective with ``core_attn`` by default,
    full with a method and a layer count); the attention backend defaults to ``auto``
    (Transformer Engine's fused or flash kernel, no s x s score matrix); dropouts 0.1.

    Parameters
    ----------
    r : MegatronArguments
        The command's values; the defaults applied are noted there.
    arch : dict
        The architecture read.
    lay : dict
        The layout read (:func:`megatron_layout`).

    Returns
    -------
    dict
        ``seq_length`` [tokens], ``micro_batch_size``/``global_batch_size`` [sequences],
        ``num_microbatches``, ``recompute`` (granularity, method, num_layers, modules), the
        attention backend, ``flash_attention``, dropouts (Fractions), the expert-bias switch
        and the mechanism options (CPU offloading, the fused loss).

    Raises
    ------
    InvalidValueError
        A combination ``validate_args`` or ``TransformerConfig`` refuses.

    References
    ----------
    Megatron-LM ``megatron/training/arguments.py`` (``validate_args``),
    ``megatron/core/transformer/transformer_config.py`` (``__post_init__``),
    ``megatron/core/num_microbatches_calculator.py`` at ``d98e8a64dd``.

    Examples
    --------
    >>> from memsym.readers.megatron_arguments import parse_megatron_argv
    >>> r = MegatronArguments(*parse_megatron_argv(["--seq-length", "128",
    ...     "--micro-batch-size", "2", "--global-batch-size", "16"])[::2])
    >>> tr = megatron_training(r, {"num_layers": 4, "multi_latent_attention": False},
    ...                        {"p": 1, "d": 2})
    >>> tr["num_microbatches"], tr["recompute"]["granularity"], tr["flash_attention"]
    (4, None, True)
    """
    tr = {"seq_length": r.seq_length(), **megatron_mechanism_options(r)}
    if arch.get("num_experts"):   # a dense model builds no token dispatcher
        tr.update(megatron_dispatcher(r))
    _batch(r, tr, lay)
    tr["recompute"] = _recompute(r, arch, lay)
    _attention_backend(r, tr)
    if megatron_softmax(r, backend=tr["attention_backend"]).get(
            "flash_attention") is False:
        tr["flash_attention"] = False    # TE's unfused attention runs the sink
    tr["fp32_residual_connection"] = megatron_fp32_residual(r)
    tr["hidden_dropout"] = fraction(r.raw.get("hidden_dropout", "0.1"), "--hidden-dropout")
    tr["attention_dropout"] = fraction(r.raw.get("attention_dropout", "0.1"),
                                       "--attention-dropout")
    tr["moe_router_enable_expert_bias"] = bool(arch.get("num_experts")) and \
        r.flag("moe_router_enable_expert_bias")
    # --mla-down-proj-fusion (store_true, arguments.py:3566-3572 at d98e8a64dd)
    if r.flag("mla_down_proj_fusion") and not arch.get("multi_latent_attention"):
        raise InvalidValueError("--mla-down-proj-fusion requires --multi-latent-attention "
                                "(Megatron's validate_args)")
    tr["mla_down_proj_fusion"] = r.flag("mla_down_proj_fusion")
    return tr


def _batch(r: MegatronArguments, tr: dict, lay: dict):
    """The micro- and global batch, the microbatches, and the batch schedules noted."""
    if not r.given("micro_batch_size"):
        raise InvalidValueError("--micro-batch-size is required")
    b = tr["micro_batch_size"] = r.int("micro_batch_size", hi=MAX_BATCH)
    gbs = r.int("global_batch_size", None, hi=MAX_BATCH)
    d = lay.get("d")
    if gbs is None and d is not None:   # args: global_batch_size = micro_batch_size * DP
        gbs = b * d
        r.note(f"--global-batch-size absent: Megatron uses micro-batch x DP = {gbs}")
    tr["global_batch_size"] = gbs
    tr["num_microbatches"] = None
    if gbs is not None and d is not None:
        if gbs % (b * d):   # num_microbatches_calculator.py: exact division asserted
            raise InvalidValueError(f"--global-batch-size {gbs} is not divisible by "
                                    f"micro-batch x DP = {b} x {d}")
        tr["num_microbatches"] = gbs // (b * d)
    if r.raw.get("_split_schedule"):
        r.note("--step-batch-size-schedule arrived as several words (an unquoted ${ARR[@]} "
               "split it); Megatron's argparse refuses them: quote the value")
    if r.given("step_batch_size_schedule"):
        if r.given("global_batch_size"):
            r.note("--step-batch-size-schedule with --global-batch-size: Megatron's "
                   "validate_args raises ValueError; memsym estimates at "
                   f"--global-batch-size {gbs}")
        else:
            r.note("--step-batch-size-schedule: give --global-batch-size (the final "
                   "batch) for the estimate")
    if r.given("rampup_batch_size"):
        r.note("--rampup-batch-size: memory and time are estimated at the final global "
               "batch size")


def checked_recompute_modules(mods: Sequence[str]) -> tuple:
    """The ``--recompute-modules`` values ``mods`` as a tuple, each one Megatron accepts.

    Parameters
    ----------
    mods : sequence of str
        The module names given.

    Returns
    -------
    tuple of str

    Raises
    ------
    UnknownNameError
        A name not in :data:`memsym.readers.megatron_arguments.RECOMPUTE_MODULES`.

    References
    ----------
    Megatron-LM ``megatron/training/arguments.py`` at ``d98e8a64dd``
    (``--recompute-modules``).

    Examples
    --------
    >>> checked_recompute_modules(["core_attn", "mlp"])
    ('core_attn', 'mlp')
    """
    for m in mods:
        if m not in RECOMPUTE_MODULES:
            raise UnknownNameError("--recompute-modules value", m, RECOMPUTE_MODULES)
    return tuple(mods)


def _recompute(r: MegatronArguments, arch: dict, lay: dict) -> dict:
    """The recompute settings: args (validate_args) and TC.__post_init__."""
    gran = r.choice("recompute_granularity", ("full", "selective"), None)
    if r.flag("recompute_activations"):   # args: --recompute-activations = selective
        if gran == "full":
            raise InvalidValueError("--recompute-activations means selective recompute; it "
                                    "conflicts with --recompute-granularity full")
        gran = "selective"
    method = r.choice("recompute_method", ("uniform", "block"), None)
    # 0 is accepted (TransformerConfig checks only None); uniform 0 is refused by memsym.job
    nrec = r.int("recompute_num_layers", None, lo=0, hi=MAX_LAYERS)
    mods = r.raw.get("recompute_modules")
    if mods is not None:
        mods = checked_recompute_modules(mods)
    else:
        mods = ("core_attn",)   # TC: recompute_modules None -> ["core_attn"]
    if r.flag("moe_layer_recompute"):
        # TC.__post_init__: the deprecated flag is selective recompute with "moe" added
        if gran == "full":
            raise InvalidValueError("--moe-layer-recompute cannot be set with full recompute "
                                    "granularity (Megatron's TransformerConfig)")
        gran = "selective"
        mods = mods if "moe" in mods else mods + ("moe",)
        r.note("--moe-layer-recompute is deprecated: read as --recompute-granularity "
               f"selective --recompute-modules {' '.join(mods)} (as TransformerConfig does)")
    if gran == "selective":
        _check_selective(r, arch, method, nrec, mods)
    elif gran == "full":
        if method is None or nrec is None:
            raise InvalidValueError("full recompute needs --recompute-method (uniform or block) "
                                    "and --recompute-num-layers (TransformerConfig)")
        per_rank = arch["num_layers"] // lay["p"]
        if nrec > per_rank:   # TC: between 1 and num_layers_per_pipeline_rank
            raise InvalidValueError(f"--recompute-num-layers {nrec} exceeds the {per_rank} "
                                    "layers of a pipeline rank")
    else:
        if method is not None or nrec is not None or r.given("recompute_modules"):
            raise InvalidValueError("--recompute-method/--recompute-num-layers/--recompute-"
                                    "modules need --recompute-granularity (or "
                                    "--recompute-activations)")
    return {"granularity": gran, "method": method, "num_layers": nrec,
            "modules": mods if gran == "selective" else ()}


def _check_selective(r: MegatronArguments, arch: dict, method, nrec, mods: tuple):
    """Selective recompute's rules (validate_args, TransformerConfig) and notes."""
    if method is not None:
        raise InvalidValueError("--recompute-method is not supported with selective "
                                "recompute (Megatron's validate_args)")
    if nrec is not None:
        raise InvalidValueError("--recompute-num-layers must be absent with selective "
                                "recompute (TransformerConfig)")
    if "mla_up_proj" in mods and not arch["multi_latent_attention"]:
        raise InvalidValueError("--recompute-modules mla_up_proj needs --multi-latent-attention")
    if "moe_act" in mods and not r.flag("moe_grouped_gemm"):
        raise InvalidValueError("--recompute-modules moe_act needs --moe-grouped-gemm")
    if "shared_experts" in mods and r.flag("moe_shared_expert_overlap") \
            and arch.get("moe_shared_expert_intermediate_size"):
        raise InvalidValueError("--recompute-modules shared_experts cannot work with "
                                "--moe-shared-expert-overlap (Megatron's TransformerConfig)")
    if r.given("fp8") and {"moe_act", "layernorm"} & set(mods) and \
            r.raw.get("fp8_recipe", "delayed") == "delayed":
        raise InvalidValueError("--recompute-modules moe_act and layernorm are refused "
                                "with FP8 delayed scaling (Megatron's TransformerConfig; "
                                "--fp8-recipe defaults to delayed)")
    # memsym's layers are Transformer Engine's spec (the default --transformer-impl)
    if {"layernorm", "mlp"} & set(mods) and r.raw.get("transformer_impl") == "local":
        r.note("--recompute-modules layernorm/mlp counted as under Transformer "
               "Engine's layer spec (fused norms); with --transformer-impl local "
               "each norm is its own module and its output is kept or recomputed "
               "differently")
    if "layernorm" in mods and r.flag("mla_down_proj_fusion"):
        # the step time prices it (memsym.timing.recompute.norms_recomputed); the activations
        # (memsym.terms.transformer_layer) still drop the MLA input norm's output
        r.note("--mla-down-proj-fusion fuses the MLA input norm into the down "
               "projection, so layernorm does not recompute it: priced in the step time; "
               "the memory counts the unfused norm's output as recomputed")
    if not r.given("recompute_modules"):
        r.note("selective recompute with Megatron's default --recompute-modules core_attn")


def attention_kernels(r: MegatronArguments) -> tuple:
    """``(--attention-backend, --transformer-impl)`` as Megatron reads them (defaults auto and
    transformer_engine: TE picks a fused or flash kernel)."""
    return (r.choice("attention_backend", ("flash", "fused", "unfused", "local", "auto"), "auto"),
            r.choice("transformer_impl", ("local", "transformer_engine", "inference_optimized"),
                     "transformer_engine"))


def keeps_no_scores(backend: str, impl: str) -> bool:
    """Whether the attention keeps no s x s score matrix: a flash or fused kernel, not the
    local implementation."""
    return backend in ("flash", "fused", "auto") and impl != "local"


def _attention_backend(r: MegatronArguments, tr: dict):
    """The attention backend and whether it keeps no s x s score matrix."""
    # attention: --attention-backend (default auto: TE chooses fused or flash, no s^2 matrix)
    # and the layer spec (--transformer-impl local builds Megatron-core's DotProductAttention,
    # which keeps the scores).  --use-flash-attn is parsed and read by nothing at d98e8a64dd
    # (arguments.py:2910; its one other mention, determinism.py:150, is a comment): it is
    # listed as ignored, and it neither picks nor contradicts a backend.
    backend, impl = attention_kernels(r)
    if r.flag("use_flash_attn") and not keeps_no_scores(backend, impl):
        r.note(f"--use-flash-attn has no effect in Megatron-LM (arguments.py:2910 defines it, "
               f"nothing reads it): the kernel is --attention-backend {backend}'s with "
               f"--transformer-impl {impl}, which keeps the s x s scores")
    if not r.given("attention_backend"):
        r.note("--attention-backend auto (Megatron's default): Transformer Engine picks a "
               "fused/flash kernel, so no s x s score matrix is stored"
               if impl != "local" else "--transformer-impl local: Megatron-core's "
               "DotProductAttention keeps the s x s scores (no fused kernel)")
    tr["attention_backend"] = backend
    tr["transformer_impl"] = impl
    tr["flash_attention"] = keeps_no_scores(backend, impl)
