"""The names a job is spelled with: choice lists and key tuples, in one place, free of SymPy.

The library validates against these (:mod:`memsym.job`, :mod:`memsym.terms`) and the command
line builds its choices from them (:mod:`memsym.cli.option_table`) without importing SymPy, so
a name means the same thing on every path and ``memsym --help`` stays fast.

>>> "distributed-optimizer" in SCHEMES, SCHEDULES
(True, ('1f1b', 'gpipe'))
"""

from __future__ import annotations

from .errors import InvalidValueError, choose
from .limits import check_limit

__all__ = ["FP8_RECIPE_COUNTED_AS", "fp8_recipe_note", "SCHEMES", "MEGATRON_FSDP_SCHEMES", "SEARCH_SHARDING", "MEGATRON_FSDP_OPTIMIZERS",
           "CONVENTIONS",
           "CONVENTION_ALIASES", "CONVENTION_NAMES",
           "FRAMEWORK_CONVENTIONS", "OFFLOADS", "GRAD_DTYPES", "PRECISION_NAMES", "FP8_RECIPES",
           "OPTIMIZER_NAMES", "RECOMPUTE", "RECOMPUTE_MODULES",
           "RECOMPUTE_METHODS",
           "SCHEDULES", "STAGE_PLACEMENTS", "FRAMEWORKS", "FINETUNES", "METRIC_NAMES",
           "ALLOWANCE_KEYS", "OPTIMIZER_DTYPES", "CE_FUSION_IMPLS", "MOE_DISPATCHERS",
           "CUDA_GRAPH_IMPLS", "CUDA_GRAPH_MODULES", "MUON_TP_MODES", "recompute_modules",
           "ACCELERATE_FSDP_MODES"]

#: How model states are sharded over data parallelism (memsym.terms.model_state).
SCHEMES = ("ddp", "zero1", "zero2", "zero3", "fsdp", "distributed-optimizer")
#: Megatron-FSDP's ``--data-parallel-sharding-strategy`` -> the scheme that shards the same
#: states (no_shard keeps everything, optim shards the optimizer states, optim_grads also the
#: gradients, optim_grads_params also the weights): the job's ``sharding`` beside its
#: ``megatron_fsdp`` (:func:`memsym.terms.megatron_fsdp.megatron_fsdp_state`).
MEGATRON_FSDP_SCHEMES = {"no_shard": "ddp", "optim": "distributed-optimizer",
                         "optim_grads": "zero2", "optim_grads_params": "fsdp"}
#: The optimizers Megatron-FSDP steps (Megatron-LM arguments.py at d98e8a64dd, validate_args
#: l. 1150: ``args.optimizer in ('sgd', 'adam')``; Megatron's adam is AdamW, memsym's adamw).
MEGATRON_FSDP_OPTIMIZERS = ("adam", "adamw", "sgd")
#: The sharding a search can be asked for: every scheme, and (in a Megatron-LM search)
#: Megatron-FSDP's strategies by their own names (memsym.search.choices.scheme_row).
SEARCH_SHARDING = SCHEMES + tuple(MEGATRON_FSDP_SCHEMES)
#: How model states are counted.  ``framework`` (default): what the framework's code allocates
#: (ddp and distributed-optimizer: Megatron-core; zero1/2/3: DeepSpeed; fsdp: FSDP2).
#: ``seed000``: seed 000's distributed optimizer (fp32 gradients sharded, 2 + 16/d) and ZeRO's
#: forms for the other schemes.  ``zero-paper``: ZeRO §5 for every scheme (distributed-optimizer
#: = P_os).  ``megatron-lm``: Megatron-LM's estimator.  ``memsym`` is the old name of seed000.
CONVENTIONS = ("framework", "seed000", "zero-paper", "megatron-lm", "memsym")
#: Old names that mean a current convention exactly.
CONVENTION_ALIASES = {"memsym": "seed000"}
#: Memory conventions reported by a framework's own estimator (memsym.conventions).
FRAMEWORK_CONVENTIONS = ("megatron-bridge",)
#: The conventions :mod:`memsym.conventions` computes as the frameworks' own estimators do
#: (Megatron-LM's and Megatron-Bridge's), not memsym's term-by-term total.
CONVENTION_NAMES = ("megatron-lm", "megatron-bridge")
#: Offload of model states to host memory (ZeRO-Offload / ZeRO-Infinity).
OFFLOADS = ("none", "optimizer", "optimizer+params")
#: How Accelerate's FSDP2 plugin holds the parameters under the Hugging Face Trainer
#: (memsym.terms.accelerate_fsdp): ``mixed`` (--bf16 / --fp16: fp32 shards, 16-bit gathers
#: and reductions), ``plain`` (no mixed precision: every tensor in the weights' dtype).
ACCELERATE_FSDP_MODES = ("mixed", "plain")
#: Gradient-buffer dtypes (Megatron ``--grad-reduce-in-bf16``; ``None``: the framework's default).
GRAD_DTYPES = ("fp32", "bf16", "fp16")
#: The precision-aware optimizer's dtypes, each with Megatron's choices (arguments.py:
#: ``--main-params-dtype``, ``--exp-avg-dtype``, ``--exp-avg-sq-dtype``; memsym.terms.recipe_buffers).
OPTIMIZER_DTYPES = {"main_params_dtype": ("fp32", "fp16"),
                    "exp_avg_dtype": ("fp32", "fp16", "bf16", "fp8"),
                    "exp_avg_sq_dtype": ("fp32", "fp16", "bf16", "fp8")}
#: Megatron-core's ``cross_entropy_fusion_impl`` (model_parallel_config.py:325).
CE_FUSION_IMPLS = ("native", "te")
#: Megatron-core's ``cuda_graph_impl`` (transformer_config.py:1075) and ``cuda_graph_modules``
#: (transformer_config.py:1090; empty: the whole layer) at d98e8a64dd.
CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")
CUDA_GRAPH_MODULES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
#: Megatron-core's MoE token dispatchers: alltoall, allgather, and the flex dispatcher with its
#: DeepEP or HybridEP backend (memsym.terms.dispatcher_buffers).
MOE_DISPATCHERS = ("alltoall", "allgather", "deepep", "hybridep")
#: Megatron-LM's ``--muon-tp-mode`` (arguments.py:2650-2655 at d98e8a64dd; default duplicated):
#: how Muon orthogonalizes a TP-split matrix (memsym.timing.muon).
MUON_TP_MODES = ("blockwise", "duplicated", "distributed")
#: Weight precisions (their byte widths: memsym.terms.model_state.PRECISIONS).
PRECISION_NAMES = ("fp32", "bf16", "fp16", "fp8", "fp4")
#: The ``--fp8-recipe`` values memsym counts under fp8 (None: the default, delayed; mxfp8:
#: memsym.terms.widths.FP8_RECIPES says what it changes).
FP8_RECIPES = ("delayed", "tensorwise", "mxfp8")
#: Megatron-core's ``fp8_recipe`` values (transformer_config.py at d98e8a64dd: delayed,
#: tensorwise, mxfp8, blockwise, custom) -> the recipe memsym counts, one table for every
#: reader (Megatron-LM arguments, Megatron-Bridge recipes).  ``blockwise`` (TE's
#: Float8BlockScaling: 1x128 activation and 128x128 weight scales taken from the current
#: tensor, no amax history) and ``custom`` (a user's quantizer factory) are counted as
#: tensorwise, the per-tensor current-scaling recipe, with a note: their scales are not modelled.
FP8_RECIPE_COUNTED_AS = {"delayed": "delayed", "tensorwise": "tensorwise", "mxfp8": "mxfp8",
                         "blockwise": "tensorwise", "custom": "tensorwise"}


def fp8_recipe_note(recipe: str, spelling: str) -> str | None:
    """The note a reader adds when ``recipe`` is counted as another (None when it is memsym's).

    Examples
    --------
    >>> fp8_recipe_note("blockwise", "--fp8-recipe")
    '--fp8-recipe blockwise: counted as FP8 tensorwise (per-tensor current scaling); its own scales are not modelled'
    >>> fp8_recipe_note("mxfp8", "--fp8-recipe") is None
    True
    """
    counted = FP8_RECIPE_COUNTED_AS[recipe]
    if counted == recipe:
        return None
    return (f"{spelling} {recipe}: counted as FP8 {counted} (per-tensor current scaling); its "
            "own scales are not modelled")
#: Optimizers (their state bytes: memsym.terms.model_state.OPTIMIZERS).
OPTIMIZER_NAMES = ("adam", "adamw", "sgd", "muon", "adam8bit", "adafactor", "none")
#: Activation recomputation: none, Megatron's selective (core attention) and full, torchtitan's
#: per-op selective AC.
RECOMPUTE = ("none", "selective", "full", "selective-op")
#: Megatron-Core's ``--recompute-modules`` (TransformerConfig.recompute_modules), in its order.
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                     "shared_experts")
#: Full recompute's methods (``Training.recompute_method``): Megatron's uniform and block,
#: torchtitan's every-N.
RECOMPUTE_METHODS = ("uniform", "block", "every")
#: Pipeline schedules; ``1f1b`` becomes interleaved when v > 1 (Megatron's VPP).
SCHEDULES = ("1f1b", "gpipe")
#: Where a rank's pipeline stages sit (``Training.stage_placement``): loop (stage i on rank
#: i mod p) or v (stages r and 2p - 1 - r on rank r, torch's ZBVZeroBubble / DualPipeV).
STAGE_PLACEMENTS = ("loop", "v")
#: The frameworks whose launch rules and runtime a job follows (``Training.framework``).
FRAMEWORKS = ("megatron", "deepspeed", "torchtitan")
#: Context-parallel attention methods, each in its framework's spelling: Megatron's
#: --cp-comm-type as Transformer Engine takes it (p2p, all_gather, a2a, a2a+p2p) and torch's
#: rotate methods (allgather, alltoall); memsym.frameworks.FRAMEWORK's cp_attention says whose.
CP_METHODS = ("p2p", "all_gather", "a2a", "a2a+p2p", "allgather", "alltoall")
#: Full training or adapters on a frozen base.
FINETUNES = ("full", "lora", "qlora")
#: The memory a total counts (what each sees: memsym.terms.allowances.METRICS).
METRIC_NAMES = ("allocated", "reserved", "device")
#: The named allowances (:data:`memsym.terms.allowances.ALLOWANCES`).
ALLOWANCE_KEYS = ("workspace", "nccl", "fragmentation")

#: Megatron's other names: they recompute parts of layers memsym does not build.
_UNMODELLED_MODULES = {
    "gdn_norm_out": "the GatedDeltaNet output norm (experimental attention variant gdn)",
    "gdp_in_proj": "the GatedDeltaProduct input projection (experimental attention variant)",
    "gdp_qkv": "the GatedDeltaProduct causal conv and QKV preparation (experimental attention "
               "variant)",
    "mhc": "hyper-connection activations (--enable-mhc-connections)",
}


def recompute_modules(names) -> tuple:
    """Megatron's ``--recompute-modules`` names, checked, without repeats, in Megatron's order.

    Parameters
    ----------
    names : sequence of str
        Names of :data:`RECOMPUTE_MODULES` (a repeated name changes nothing, as Megatron
        tests membership only).

    Returns
    -------
    tuple of str

    Raises
    ------
    InvalidValueError
        A bare string, more names than :data:`memsym.limits.LIMITS` ``"recompute_modules"``,
        or one of Megatron's names for layers memsym does not build (``gdn_norm_out``,
        ``gdp_in_proj``, ``gdp_qkv``, ``mhc``).
    UnknownNameError
        Any other name.

    Examples
    --------
    >>> recompute_modules(["mlp", "core_attn", "mlp"])
    ('core_attn', 'mlp')
    >>> recompute_modules(["mhc"])
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: recompute module 'mhc' recomputes hyper-connection activations (--enable-mhc-connections), which memsym does not model
    """
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        raise InvalidValueError("recompute_modules must be a list of names of "
                                + ", ".join(RECOMPUTE_MODULES) + f", got {names!r:.60}")
    check_limit("recompute_modules", len(names), "recompute_modules (names given)")
    got = set()
    for name in names:
        key = name.strip().lower() if isinstance(name, str) else None
        if key in _UNMODELLED_MODULES:
            raise InvalidValueError(f"recompute module {key!r} recomputes "
                                    f"{_UNMODELLED_MODULES[key]}, which memsym does not model")
        got.add(choose("recompute module", name, RECOMPUTE_MODULES))
    return tuple(m for m in RECOMPUTE_MODULES if m in got)
