"""The settings of :mod:`memsym.terms.recipe_buffers` as job options, read from a
Megatron-LM command (:func:`megatron_mechanism_options`) or a Megatron-Bridge recipe
(:func:`recipe_mechanism_options`): the precision-aware optimizer's dtypes
(``optimizer.main_params_dtype``, ``exp_avg_dtype``, ``exp_avg_sq_dtype``), Transformer
Engine's fused cross-entropy (``model.cross_entropy_loss_fusion`` with
``cross_entropy_fusion_impl``; the perf recipes' ``_benchmark_common`` sets "te",
``perf_recipes/_common.py:31,70`` at Megatron-Bridge 067f987df0) and CPU activation offloading
(``model.cpu_offloading``, ``cpu_offloading_num_layers``, ``cpu_offloading_activations``;
Megatron-LM d98e8a64dd ``model_parallel_config.py:458-480``), and the fp32 residual stream
and softmax sink (``model.fp32_residual_connection``, ``model.softmax_type``).
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..terms.cuda_graphs import cuda_graph_notes, cuda_graph_settings
from ..vocabulary import CE_FUSION_IMPLS, CUDA_GRAPH_IMPLS
from ._values import MAX_LAYERS, recipe_flag
from .megatron_numerics import SOFTMAX_TYPES

__all__ = ["recipe_mechanism_options", "megatron_mechanism_options", "megatron_cuda_graph_options",
           "CUDA_GRAPH_DESTS", "TE_LOSS_REFUSED", "recipe_dispatcher", "megatron_dispatcher"]

#: Megatron-LM's refusal of Transformer Engine's fused loss (arguments.py:1697-1702).
TE_LOSS_REFUSED = ("--cross-entropy-loss-fusion with --cross-entropy-fusion-impl te is refused "
                   "by Megatron-LM (arguments.py validate_args: Transformer Engine's fused loss "
                   "is disabled); Megatron-Bridge runs it (--bridge-recipe)")


#: Bridge's torch dtype names (OptimizerConfig) -> Megatron's command-line names (arguments.py
#: map_dtype: fp8 is stored as torch.uint8).
_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "uint8": "fp8"}


def recipe_mechanism_options(values: dict, opts: dict) -> dict:
    """The job options of the precision-aware optimizer's dtypes, the cross-entropy fusion and
    CPU activation offloading, as the recipe's ``values`` set them (``opts``: the job options
    read so far; :mod:`memsym.terms.recipe_buffers` counts them).

    Examples
    --------
    >>> recipe_mechanism_options({"optimizer.exp_avg_dtype": "bfloat16",
    ...     "model.cross_entropy_loss_fusion": True, "model.cross_entropy_fusion_impl": "te",
    ...     "model.cpu_offloading": True, "model.cpu_offloading_num_layers": 20},
    ...     {"precision_aware": True}) == {"main_params_dtype": "fp32", "exp_avg_dtype": "bf16",
    ...     "exp_avg_sq_dtype": "fp32", "cross_entropy_fusion_impl": "te",
    ...     "cpu_offloading_num_layers": 20}
    True
    """
    out = {}
    for name in ("main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
        value = values.get("optimizer." + name, "float32")
        if value not in _DTYPES:
            raise InvalidValueError(f"optimizer.{name} must be one of {', '.join(_DTYPES)}, got "
                                    f"{value!r:.40}")
        if _DTYPES[value] != "fp32" or opts.get("precision_aware"):
            out[name] = _DTYPES[value]
    # model_parallel_config.py:320-325: the impl takes effect under cross_entropy_loss_fusion.
    # A recipe that leaves the flag unset keeps its model provider's: True in every provider
    # memsym reads (Megatron-Bridge 067f987df0 models/gpt_provider.py:205, MLAModelProvider
    # through it, models/hybrid/hybrid_provider.py:149, the one Nemotron 3 Super's AutoBridge
    # builds, nemotron_h_bridge.py:236), not TransformerConfig's False
    if recipe_flag(values, "model.cross_entropy_loss_fusion", True):
        impl = values.get("model.cross_entropy_fusion_impl", "native")
        if impl not in ("native", "te"):
            raise InvalidValueError(f"model.cross_entropy_fusion_impl must be native or te, got "
                                    f"{impl!r:.40}")
        out["cross_entropy_fusion_impl"] = impl
    # transformer_block.py:304-318: TE's offload context, activations only (weights: no effect)
    if recipe_flag(values, "model.cpu_offloading", False) and \
            recipe_flag(values, "model.cpu_offloading_activations", True):
        k = values.get("model.cpu_offloading_num_layers", 0)
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InvalidValueError(f"model.cpu_offloading_num_layers must be a whole number, "
                                    f"got {k!r:.40}")
        out["cpu_offloading_num_layers"] = k
    # transformer_config.py:2698-2830 (the deprecated "full_iteration" scope promotes the impl)
    impl, mods = cuda_graph_settings(values.get("model.cuda_graph_impl"),
                                     values.get("model.cuda_graph_scope"))
    if recipe_flag(values, "optimizer.optimizer_cuda_graph", False):
        out["optimizer_cuda_graph"] = True   # train.py:321-326 wraps optimizer.step
    if impl != "none":
        out.update(cuda_graph_impl=impl, cuda_graph_modules=mods)
        # GPTDatasetConfig.create_attention_mask (Megatron-core gpt_dataset.py:38, default True)
        mask = recipe_flag(values, "dataset.create_attention_mask", True)
        if not mask:
            out["batch_attention_mask"] = False
    out.update(_numerics(values))
    return out


def _numerics(values: dict) -> dict:
    """``model.fp32_residual_connection`` and ``model.softmax_type`` as Megatron-LM's
    ``--fp32-residual-connection`` and ``--softmax-type`` are read
    (:mod:`memsym.readers.megatron_numerics`): the fp32 residual stream, and a learnable sink
    as one parameter per head and layer, off-by-one as the architecture's
    ``off_by_one_softmax`` (no parameter; the attention backends of a sink).  A model bridge's
    own setting (GPT-OSS's ``provider.softmax_type = "learnable"``,
    models/gpt_oss/gpt_oss_bridge.py:86) is its preset's; a recipe or override that sets the
    field replaces it."""
    out = {}
    if recipe_flag(values, "model.fp32_residual_connection", False):
        out["fp32_residual_connection"] = True
    kind = values.get("model.softmax_type")
    if kind is not None:
        if kind not in SOFTMAX_TYPES:
            raise InvalidValueError(f"model.softmax_type must be one of "
                                    f"{', '.join(SOFTMAX_TYPES)}, got {kind!r:.40}")
        out["attention_sinks"] = kind == "learnable"
        out["off_by_one_softmax"] = kind == "off-by-one"
    return out


def megatron_mechanism_options(r) -> dict:
    """The job options of ``--cpu-offloading-num-layers`` and the cross-entropy fusion, read
    from a Megatron-LM command (``r``: :mod:`memsym.readers.megatron`'s argument reader) with
    Megatron's meaning; the optimizer dtypes are read with the precision flags.

    ``--cpu-offloading-num-layers N`` > 0 turns ``cpu_offloading`` on (arguments.py:1950-1951;
    Megatron-LM has no ``--cpu-offloading`` flag, and offloads activations, not weights, by
    ``TransformerConfig``'s defaults).  ``--cross-entropy-loss-fusion`` with
    ``--cross-entropy-fusion-impl te`` is refused, as ``validate_args`` refuses it
    (arguments.py:1697-1702: Transformer Engine's fused loss is disabled there); the native
    fused loss keeps what memsym counts by default.
    """
    out = {}
    k = r.int("cpu_offloading_num_layers", 0, lo=0, hi=MAX_LAYERS)
    if k:
        out["cpu_offloading_num_layers"] = k
    out.update(megatron_cuda_graph_options(r))
    impl = r.choice("cross_entropy_fusion_impl", CE_FUSION_IMPLS, "native")
    if impl == "te" and r.flag("cross_entropy_loss_fusion"):
        raise InvalidValueError(TE_LOSS_REFUSED)
    if impl == "te":
        r.note("--cross-entropy-fusion-impl te has effect only with --cross-entropy-loss-fusion")
    return out


#: The Megatron-LM destinations :func:`megatron_cuda_graph_options` reads.
CUDA_GRAPH_DESTS = ("cuda_graph_impl", "enable_cuda_graph", "external_cuda_graph",
                    "cuda_graph_modules", "cuda_graph_scope_deprecated", "optimizer_cuda_graph",
                    "create_attention_mask_in_dataloader", "check_for_nan_in_loss_and_grad")


def megatron_cuda_graph_options(r) -> dict:
    """``cuda_graph_impl``, ``cuda_graph_modules``, ``batch_attention_mask`` and
    ``optimizer_cuda_graph`` of a Megatron-LM command, as ``validate_args`` sets them (arguments.py:611-641: the deprecated
    ``--enable-cuda-graph`` is local, ``--external-cuda-graph`` transformer_engine, neither
    with ``--cuda-graph-impl``; ``--cuda-graph-scope`` is ``--cuda-graph-modules``;
    :1235-1237: full_iteration needs ``--no-check-for-nan-in-loss-and-grad``)."""
    impl = r.choice("cuda_graph_impl", CUDA_GRAPH_IMPLS, "none")
    for dest, old in (("enable_cuda_graph", "local"),
                      ("external_cuda_graph", "transformer_engine")):
        if r.flag(dest):
            if impl != "none":
                raise InvalidValueError("Do not use --enable-cuda-graph or --external-cuda-graph "
                                        "with --cuda-graph-impl (Megatron's validate_args)")
            impl = old
    if r.flag("enable_cuda_graph") and r.flag("external_cuda_graph"):
        raise InvalidValueError("--enable-cuda-graph and --external-cuda-graph cannot be enabled "
                                "at the same time (Megatron's validate_args)")
    scopes = r.raw.get("cuda_graph_modules") or r.raw.get("cuda_graph_scope_deprecated")
    impl, mods = cuda_graph_settings(impl, scopes)
    if impl == "full_iteration" and r.raw.get("check_for_nan_in_loss_and_grad", True):
        raise InvalidValueError("--no-check-for-nan-in-loss-and-grad should be set with "
                                "--cuda-graph-impl=full_iteration (Megatron's validate_args)")
    out = {"cuda_graph_impl": impl, "cuda_graph_modules": mods} if impl != "none" else {}
    if r.flag("optimizer_cuda_graph"):   # training.py:4449-4454 (memsym.terms.cuda_graphs)
        out["optimizer_cuda_graph"] = True
    if not r.raw.get("create_attention_mask_in_dataloader", True):
        out["batch_attention_mask"] = False
    for line in cuda_graph_notes(impl, mods):
        r.note(line)
    return out
def _dispatcher(kind, backend, where: str) -> str:
    """memsym's ``moe_dispatcher`` of Megatron's dispatcher type and flex backend."""
    if kind in (None, "alltoall", "allgather"):
        return kind or "alltoall"
    if kind != "flex":
        raise InvalidValueError(f"{where} moe_token_dispatcher_type must be alltoall, allgather or "
                                f"flex, got {kind!r:.40}")
    if backend not in ("deepep", "hybridep"):
        # token_dispatcher.py:1868-1872 (an unset backend is refused); NCCL EP is not modelled
        raise InvalidValueError(f"{where} flex dispatcher backend {backend!r:.40}: memsym models "
                                "deepep and hybridep")
    return backend


def recipe_dispatcher(values: dict, computed=()) -> dict:
    """The ``moe_dispatcher`` job option of a Megatron-Bridge recipe (its ``values`` and the
    ``computed`` lines its snapshot records).

    A recipe that calls ``apply_flex_dispatcher_backend(cfg.model, backend)`` (Megatron-Bridge
    ``training/flex_dispatcher_backend.py``) runs the flex dispatcher with that backend on the
    GPUs the perf recipes target (DeepEP: compute capability 8 or 9, B200, B300; HybridEP:
    8, 9, 10), whatever ``moe_token_dispatcher_type`` the recipe's config held before.

    Examples
    --------
    >>> recipe_dispatcher({"model.moe_token_dispatcher_type": "alltoall",
    ...     "model.moe_flex_dispatcher_backend": "hybridep"},
    ...     ("410: apply_flex_dispatcher_backend(cfg.model, cfg.model.moe_flex_dispatcher_backend)",))
    {'moe_dispatcher': 'hybridep'}
    >>> recipe_dispatcher({"model.moe_token_dispatcher_type": "flex",
    ...                    "model.moe_flex_dispatcher_backend": "deepep"})
    {'moe_dispatcher': 'deepep'}
    """
    kind = values.get("model.moe_token_dispatcher_type")
    backend = values.get("model.moe_flex_dispatcher_backend")
    if backend in ("deepep", "hybridep") and any("apply_flex_dispatcher_backend" in str(line)
                                                 for line in computed):
        kind = "flex"
    return {"moe_dispatcher": _dispatcher(kind, backend, "model.")}


def megatron_dispatcher(r) -> dict:
    """The ``moe_dispatcher`` job option of a Megatron-LM command: ``--moe-token-dispatcher-type``
    with ``--moe-flex-dispatcher-backend`` (or the deprecated ``--moe-enable-deepep``,
    transformer_config.py:1743-1753); the SM count is DeepEP's default 20 unless
    ``--moe-flex-dispatcher-num-sms`` says otherwise (noted: memsym counts 20)."""
    kind = r.choice("moe_token_dispatcher_type", ("alltoall", "allgather", "flex"), "alltoall")
    backend = r.choice("moe_flex_dispatcher_backend", ("deepep", "hybridep", "ncclep"), None)
    if r.flag("moe_enable_deepep"):
        backend = "deepep"
    if kind == "flex" and backend == "deepep" and r.int("moe_flex_dispatcher_num_sms", 20) != 20:
        r.note("--moe-flex-dispatcher-num-sms: DeepEP's buffers are counted at its default 20 SMs")
    return {"moe_dispatcher": _dispatcher(kind, backend, "--")}
