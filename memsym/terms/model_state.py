"""Model-state memory per GPU: weights, gradients and optimizer states under every sharding.

Byte widths are symbols (``b_hp``, ``b_g``, ``b_mg``, ``b_m``, ``b_o``, ``b_f8``), so precisions
and optimizers are substitutions (:func:`byte_widths`).  The default convention,
``"framework"``, is what each framework's code allocates (Megatron-core, DeepSpeed, FSDP2);
``"seed000"`` and ``"zero-paper"`` keep the textbook forms by name.

References
----------
.. [zero] Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
   Models", arXiv:1910.02054, §3.1 and §5.
.. [nemo-distributed-optimizer] Megatron Core developer guide, Distributed Optimizer (the
   ``seed000`` convention's ``N/(p t)·(b_hp + 16/d)``: gradients reduce-scattered and kept as
   fp32 shards, fp32 main parameters and Adam states sharded, 16-bit weights replicated).
.. [megatron-lm] Megatron-LM ``megatron/training/theoretical_memory_usage.py`` and
   ``docs/user-guide/features/dist_optimizer.md``: 18, or 6 + 12/d, bytes per parameter.
.. [megatron-core] Megatron-LM ``megatron/core`` at d98e8a64dd: ``_ParamAndGradBuffer``,
   ``DistributedOptimizer._copy_model_grads_to_main_grads``.
.. [deepspeed-zero] DeepSpeed ``runtime/zero/stage_1_and_2.py``, ``stage3.py`` at edaa722126.
.. [pytorch-fsdp2] PyTorch ``torch/distributed/fsdp/_fully_shard/`` (torch 2.13).
.. [zero-offload] Ren et al., "ZeRO-Offload", arXiv:2101.06840, §4.
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError, choose
from ..symbols import N, b_f8, b_g, b_hp, b_m, b_mg, b_o, d, p, t
from ..term import Source, Term, Total
from ..values import as_expr

# the names (sharding schemes: fsdp is PyTorch FSDP2's fully_shard, ZeRO-3 in the textbook
# forms), shared with the command line without SymPy
from ..vocabulary import (CONVENTION_ALIASES, CONVENTIONS, GRAD_DTYPES, MEGATRON_FSDP_SCHEMES,
                          OFFLOADS, SCHEMES)
# the byte widths and their tables, re-exported: every name stays importable from here
from .widths import (OPTIMIZERS, PRECISIONS, STATE_DTYPES, byte_widths, default_grad_dtype,
                     has_main_grad_copy, normalize_convention, normalize_scheme)

__all__ = ["SCHEMES", "CONVENTIONS", "CONVENTION_ALIASES", "PRECISIONS", "OPTIMIZERS", "OFFLOADS",
           "GRAD_DTYPES", "STATE_DTYPES", "model_state", "byte_widths", "normalize_scheme",
           "normalize_convention", "deepspeed_allows_pipeline", "MEGATRON_FSDP_SCHEMES",
           "te_weight_cache", "shard_params", "MEGATRON_FSDP_CAST_SOURCE"]

_ZERO = Source("zero", "§5, Figure 1")
# the "seed000" convention: the ZeRO-2 reading of the distributed optimizer that the
# project's design note seed 000 derives; cited to the public page it reads
_SEED = Source("nemo-distributed-optimizer",
               "summary formula N/(p t)(b_hp + 16/d): Data Flow read as ZeRO stage 2")
_MEGATRON = Source("megatron-lm", "theoretical_memory_usage.py, compute_weight_and_optimizer_memory")
_OFFLOAD = Source("zero-offload", "§4")
# Framework sources (revisions in memsym/references.toml).
_MC_BUF = Source("megatron-core", "core/distributed/param_and_grad_buffer.py, _ParamAndGradBuffer."
                 "__init__ (grad_data and param_data: numel of the whole buffer on every rank)")
_MC_MAIN = Source("megatron-core", "core/optimizer/distrib_optimizer.py, DistributedOptimizer."
                  "_copy_model_grads_to_main_grads (shard_main_param.grad = shard_model_grad.float())")
_MC_SHARD = Source("megatron-core", "core/optimizer/distrib_optimizer.py, DistributedOptimizer."
                   "_build_model_and_main_param_groups (fp32 main params of the rank's shard); "
                   "optimizer_config.py (precision-aware dtypes)")
_MC_DDP = Source("megatron-core", "core/optimizer/optimizer.py, Float16OptimizerWithFloat16Params "
                 "(fp32 main params of every param; main_grad.float())")
_TE_FP8 = Source("transformer-engine", "pytorch/module/base.py, quantize_weight with "
                 "is_first_microbatch (_fp8_workspaces); csrc/extensions/cast.cu, cast (rowwise data "
                 "+ data_transpose for columnwise usage); csrc/quantizer.cpp:363, 375, 679, 689 "
                 "(no data_transpose where FP8 GEMMs take non-TN layouts, compute capability 10.x, "
                 "11.x, >= 13.0: pytorch/utils.py:657-663); MXFP8: tensor/mxfp8_tensor.py, "
                 "MXFP8Quantizer.inner_tensor_specs")
# the same cache for a frozen weight: neither the usages nor the caching read the weight's
# requires_grad (lines at d0067d0da6; Megatron-core's wrappers at d98e8a64dd)
_TE_FROZEN = Source("transformer-engine", "pytorch/module/linear.py:467-475 (the weight's "
                    "columnwise usage is is_grad_enabled and inp.requires_grad: dgrad, not the "
                    "weight's requires_grad), 479-489 and 1958-1961, 2068-2071 (the cast cached "
                    "in _fp8_workspaces whenever is_first_microbatch is given); "
                    "layernorm_linear.py:345-348 (columnwise whenever grad is enabled), 352-361, "
                    "1763; grouped_linear.py:715-729, 837-846, 2259-2312; base.py:757-789, "
                    "792-880 (quantize_weight, _is_weight_workspace_valid); Megatron-core "
                    "extensions/transformer_engine.py:1338-1345, 1587-1600, 2721-2727 "
                    "(is_first_microbatch passed unless disable_parameter_transpose_cache), "
                    "transformer/module.py:114-125 (set under fp8 or fp4)")
_NVFP4_PARAMS = Source("megatron-core-nvfp4-params", "core/distributed/param_and_grad_buffer.py:"
                       "1084-1187 (NVFP4 params: uint8 param_data of numel/2, the grads at full "
                       "numel); fp4_utils.py:80-108 (scales, amax and columnwise stay TE's); "
                       "optimizer/distrib_optimizer.py:2853-2857 (fp32 shards quantized back); "
                       "TE pytorch/tensor/utils.py:1451-1520 (columnwise after the gather)")
_MFSDP_FP8 = Source("megatron-core", "core/distributed/fsdp/src/megatron_fsdp/"
                    "param_and_grad_buffer.py at 2a75ac12c5 (Bridge's pin; the same lines at "
                    "d98e8a64dd): 2804 init_param_with_fp8 from fp8_param_gather; 1798 and 2632 "
                    "the model_weight_buffer of an FP8 group is uint8 (1 B), of the others "
                    "param.dtype, sharded under optim_grads_params; 2322 an FP8 group's "
                    "gradients bf16; main_weight_buffer in main_params_dtype (fp32)")
_DS_12 = Source("deepspeed-zero", "runtime/zero/stage_1_and_2.py, DeepSpeedZeroOptimizer.__init__ "
                "(bit16_groups whole, single_partition_of_fp32_groups) and step "
                "(single_grad_partition .to(fp32)); estimate_zero2_model_states_mem_needs 2 + 18/N")
_DS_3 = Source("deepspeed-zero", "runtime/zero/stage3.py, DeepSpeedZeroOptimizer_Stage3 "
               "(fp16 partitions, fp32 partition and its grad); estimate_zero3_model_states_mem_needs "
               "18/N")
_FSDP2 = Source("pytorch-fsdp2", "_fsdp_param.py, FSDPParam._init_sharded_param (dim-0 shard in "
                "the original dtype); _fsdp_collectives.py, foreach_reduce (sharded grad in the "
                "original dtype); _fsdp_api.py MixedPrecisionPolicy (no extra fp32 copy)")
#: Megatron-FSDP casts the rank's 16-bit main-grad shard to fp32 for the optimizer (its
#: ``main_gradients``; :mod:`memsym.terms.megatron_fsdp`, and an FP8 job's here).
MEGATRON_FSDP_CAST_SOURCE = Source(
    "megatron-core", "core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py at "
    "d98e8a64dd: 3351 update_main_grads, 3381 optimizer_grad.to(param.dtype) (the fp32 main "
    "weights' dtype) unless megatron_fsdp_use_decoupled_grad; 3209 zero_grad sets param.grad = "
    "None")


def shard_params(params=None) -> sp.Expr:
    r"""The parameters one GPU's model-parallel shard holds, :math:`\Psi` [parameters].

    .. math:: \Psi = \frac{N}{p\,t}

    unless ``params`` gives the shard itself (an uneven pipeline stage, frozen weights).

    Parameters
    ----------
    params : int, sympy.Expr or None
        The shard's parameters [parameters] (None: :math:`N/(p\,t)`).

    Returns
    -------
    sympy.Expr
        :math:`\Psi` [parameters].

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §2.2-2.3: p pipeline stages of
       L/p layers, each layer's weights split over t tensor-parallel ranks.

    Examples
    --------
    >>> shard_params(), shard_params(7 * 10**9)
    (N/(p*t), 7000000000)
    """
    return N / (p * t) if params is None else as_expr(params)


def model_state(scheme: str = "distributed-optimizer", *, convention: str = "framework",
                offload: str = "none", params=None, dp=None, precision: str = "bf16",
                grad_dtype: str | None = None, precision_aware: bool = False,
                fp8_param_gather: bool = False, linear_params=None,
                optimizer: str = "adam", fp8_recipe: str | None = None,
                fp4_param_gather: bool = False, non_tn_fp8_gemm: bool = False) -> Total:
    r"""Per-GPU memory of weights, gradients and optimizer states [bytes].

    With :math:`\Psi` the parameters of one model-parallel shard (default
    :math:`N/(p\,t)`), :math:`d` the group the states are sharded over (Megatron: DP·CP
    for dense, expert-DP for experts) and ``convention="framework"``:

    .. math::

        \begin{aligned}
        \text{ddp (Megatron DDP)}:\;& \Psi\,(b_{hp} + b_g + b_{mg} + b_m + b_o) \\
        \text{distributed-optimizer (Megatron)}:\;& \Psi\,(b_{hp} + b_g)
            + \Psi\,(b_{mg} + b_m + b_o)/d \\
        \text{zero1 (DeepSpeed)}:\;& \Psi\,(b_{hp} + b_g) + \Psi\,(b_{mg} + b_m + b_o)/d \\
        \text{zero2 (DeepSpeed)}:\;& \Psi\,b_{hp} + \Psi\,(b_g + b_{mg} + b_m + b_o)/d \\
        \text{zero3 (DeepSpeed)}:\;& \Psi\,(b_{hp} + b_g + b_{mg} + b_m + b_o)/d \\
        \text{fsdp (FSDP2)}:\;& \Psi\,(b_{hp} + b_g + b_o)/d \quad (b_{hp} = b_g = 4)
        \end{aligned}

    plus, with Transformer Engine FP8, :math:`b_{f8}\,\Psi_{\mathrm{lin}}` for the cached FP8
    copies of the linear weights (``fp8_param_gather``: the linear weights are FP8 only,
    :math:`b_{hp}(\Psi - \Psi_{\mathrm{lin}}) + b_{f8}\Psi_{\mathrm{lin}}`; under ``fsdp``,
    Megatron-FSDP's FP8 parameters, the model weights
    :math:`(b_{f8}\Psi_{\mathrm{lin}} + 2(\Psi - \Psi_{\mathrm{lin}}))/d` beside the fp32
    shard; ``fp4_param_gather``: the linear weights are NVFP4 only, counted as under
    ``fp8_param_gather`` with :math:`b_{f8} = 9/8`).  The bf16 distributed optimizer is 6 + 12/d bytes per parameter, the whole fp32
    gradient buffer on every rank (NVIDIA/Megatron-LM#654); ``seed000`` shards it (2 + 16/d), ``zero-paper``
    counts ZeRO §5's forms (distributed-optimizer = :math:`P_{os}`: 4 + 12/d).

    Parameters
    ----------
    scheme : str
        One of :data:`SCHEMES`.
    convention : str
        One of :data:`CONVENTIONS` (``memsym`` = ``seed000``).
    offload : {"none", "optimizer", "optimizer+params"}
        ZeRO-Offload: master copy and moments move to host memory, and so do the gradient
        partitions under ZeRO-2/3 (the update runs on the CPU); ``optimizer+params``
        (ZeRO-Infinity, ZeRO-3/FSDP only) moves the weights too.
    params : sympy.Expr, optional
        Parameters held by this GPU's model-parallel shard [parameters]; default ``N/(p t)``.
    dp : sympy.Expr, optional
        The group the states are sharded over [GPUs]; default ``d``.
    precision, grad_dtype, precision_aware, fp8_param_gather, optimizer, fp8_recipe, fp4_param_gather, non_tn_fp8_gemm :
        Which framework tensors exist (framework only; pass the same to :func:`byte_widths`): a
        ``main_gradients`` term when the framework copies 16-bit grads to fp32, an ``fp8_weights``
        term for fp8 (MXFP8 under ``fp8_recipe="mxfp8"``; no transpose if ``non_tn_fp8_gemm``).
    linear_params : sympy.Expr, optional
        Of ``params``, those in linear-layer weights [parameters]; default all of ``params``
        (FP8 only; an over-count by the embeddings and norms).

    Returns
    -------
    Total
        Terms ``weights``, ``gradients``, ``main_gradients`` (when copied), ``optimizer``
        (master copy + moments) and ``fp8_weights`` (fp8); a term that is zero on the GPU
        (offloaded) is left out.

    Examples
    --------
    >>> from memsym import model_state, byte_widths
    >>> M = model_state().subs(byte_widths())  # Megatron DistOpt, bf16: 6 + 12/d
    >>> M.evaluate(N=1, d=8, p=1, t=1)
    15/2
    >>> S = model_state(convention="seed000").subs(byte_widths(convention="seed000"))
    >>> S.evaluate(N=1, d=8, p=1, t=1)
    4
    >>> Z = model_state("zero2", convention="zero-paper").subs(byte_widths("zero2", convention="zero-paper"))
    >>> Z.evaluate(N=7 * 10**9, d=8, p=1, t=1) / 10**9
    105/4

    References
    ----------
    megatron-core: param_and_grad_buffer.py, distrib_optimizer.py; deepspeed-zero: stage_1_and_2.py,
    stage3.py; pytorch-fsdp2: _fully_shard; zero: §3.1, §5 (Figure 1); nemo-distributed-optimizer:
    Distributed Optimizer; megatron-lm: theoretical_memory_usage.py; zero-offload: §4.
    """
    scheme = normalize_scheme(scheme)
    given = choose("convention", convention, CONVENTIONS)  # the title keeps the name asked for
    convention = normalize_convention(convention)
    offload = choose("offload", offload, OFFLOADS)
    psi = shard_params(params)
    dp = d if dp is None else as_expr(dp)
    if convention == "megatron-lm" and scheme not in ("ddp", "distributed-optimizer"):
        raise InvalidValueError(
            f"convention megatron-lm covers ddp and distributed-optimizer only, not {scheme} "
            "(Megatron-LM's estimator has no ZeRO-2/3 accounting); use convention framework")
    if offload == "optimizer+params" and scheme not in ("zero3", "fsdp"):
        raise InvalidValueError(
            f"offload optimizer+params needs sharded parameters (zero3 or fsdp), not {scheme}")
    if convention == "framework":
        return _framework_state(scheme, offload, psi, dp, precision, grad_dtype, precision_aware,
                                fp8_param_gather, linear_params, optimizer, fp8_recipe,
                                fp4_param_gather, non_tn_fp8_gemm)
    return _textbook_state(scheme, given, convention, offload, psi, dp)


def _textbook_state(scheme, given, convention, offload, psi, dp) -> Total:
    """:func:`model_state` under a textbook convention (seed000, zero-paper, megatron-lm)."""
    # which of the three states are divided by the data-parallel group
    shard_w = scheme in ("zero3", "fsdp")
    shard_g = scheme in ("zero2", "zero3", "fsdp") or (
        scheme == "distributed-optimizer" and convention == "seed000")
    shard_o = scheme != "ddp"
    if scheme == "ddp":
        src = _MEGATRON if convention == "megatron-lm" else Source("zero", "§3.1")
    elif scheme == "distributed-optimizer":
        src = {"seed000": _SEED, "megatron-lm": _MEGATRON}.get(convention, _ZERO)
    else:
        src = _ZERO

    def per_gpu(width, sharded):
        return psi * width / dp if sharded else psi * width

    on_gpu_g = not (offload != "none" and scheme in ("zero2", "zero3", "fsdp"))
    terms = []
    if offload != "optimizer+params":
        terms.append(Term("weights", per_gpu(b_hp, shard_w),
                          "weights used in forward and backward" +
                          (", sharded over data parallel" if shard_w else ", replicated over data parallel"),
                          src, label="weights"))
    if on_gpu_g:
        terms.append(Term("gradients", per_gpu(b_g, shard_g),
                          "gradients" + (", reduce-scattered over data parallel" if shard_g
                                         else ", full copy on every data-parallel rank"),
                          src, label="gradients"))
    if offload == "none":
        terms.append(Term("optimizer", per_gpu(b_m + b_o, shard_o),
                          "fp32 master weights and optimizer moments" +
                          (", sharded over data parallel" if shard_o else ", replicated"),
                          src, label="master + moments"))
    return Total(f"model states per GPU ({scheme}, {given}, offload {offload})", tuple(terms))


def _quantized_weights(lin, mx: str, fp4_param_gather: bool, fp8_param_gather: bool,
                       transpose: bool = True) -> Term:
    """The low-precision linear weights of :func:`_framework_state`: NVFP4 parameters, FP8 /
    MXFP8 parameters, or Transformer Engine's cached copies beside the 16-bit weights."""
    if fp4_param_gather:
        return Term("fp8_weights", lin * b_f8, "NVFP4 linear-layer weights "
                    "(quantized_model_init: packed rowwise data in the buffer's "
                    "uint8 param_data, gathered in NVFP4; columnwise copy made "
                    "after the gather)", _NVFP4_PARAMS, label="fp4 weights")
    elif fp8_param_gather:
        return Term("fp8_weights", lin * b_f8, mx + "linear-layer weights (fp8_model_init, "
                    "gathered in FP8; per-tensor FP8 keeps the transpose TE makes after each "
                    "gather where FP8 GEMMs are TN-only)", _TE_FP8, label="fp8 weights")
    else:
        return te_weight_cache(lin, mx, transpose=transpose)


def te_weight_cache(linear_params, fmt: str = "FP8 ", *, frozen: bool = False,
                    transpose: bool = True) -> Term:
    r"""Transformer Engine's cached low-precision copies of the linear weights [bytes].

    .. math:: M = b_{f8}\,\Psi_{\mathrm{lin}}

    A TE ``Linear``, ``LayerNormLinear`` or ``GroupedLinear`` casts its weight for the
    forward GEMM and, given ``is_first_microbatch`` (Megatron-core passes it unless
    ``disable_parameter_transpose_cache``), keeps the cast in ``_fp8_workspaces`` across the
    micro-batches, recast on the first.  The cast holds the rowwise copy and the columnwise one
    (the transpose under per-tensor scaling) that dgrad reads: TE asks for it whenever the
    GEMM's input needs a gradient, whether or not the weight does, so a frozen base weight
    under LoRA keeps the same two copies as a trained one (``frozen``: that is what it
    cites).  :math:`b_{f8}` is :func:`memsym.terms.low_precision.fp8_weight_bytes` or
    :func:`memsym.terms.low_precision.nvfp4_weight_bytes`.  Neglected: on the stage that holds the
    embedding, without full recompute (Megatron-Bridge's peft/recompute.py makes the block
    input require grad only then), a frozen ``Linear`` or ``GroupedLinear`` of the first layer
    with no adapter upstream of its input (linear_proj when q, k and v carry none) keeps the
    rowwise cast only; ``LayerNormLinear`` (linear_qkv, linear_fc1) keeps both whatever its
    input, so LoRA on every matrix leaves no such weight.

    Parameters
    ----------
    linear_params : sympy.Expr
        Linear-layer weights whose casts are kept [parameters].
    fmt : {"FP8 ", "MXFP8 ", "NVFP4 "}
        The format named in the description.
    frozen : bool
        The weights are frozen (cite why frozen weights keep the same cache).
    transpose : bool
        Per-tensor FP8 keeps the transpose (False where the GPU's FP8 GEMMs take non-TN
        layouts: the rowwise data serves dgrad, ``b_f8 = 1``); MXFP8 and NVFP4 ignore it.

    Examples
    --------
    >>> from memsym.symbols import N_lin
    >>> te_weight_cache(N_lin).subs({b_f8: 2}).expr
    2*N_lin
    >>> te_weight_cache(N_lin, frozen=True).source.locator[:32]
    'pytorch/module/linear.py:467-475'

    References
    ----------
    transformer-engine (d0067d0da6): pytorch/module/base.py, quantize_weight and
    ``_fp8_workspaces``; pytorch/module/linear.py:467-475, 1958-1961;
    layernorm_linear.py:345-348; grouped_linear.py:715-729.  megatron-core:
    extensions/transformer_engine.py:1338-1345 (``is_first_microbatch`` passed).
    """
    what = {"MXFP8 ": "rowwise + columnwise, a scale byte per 32 each",
            "NVFP4 ": "rowwise + columnwise, 4-bit with a scale byte per 16 each"}.get(
                fmt, "rowwise + transpose" if transpose else "rowwise only: the GPU's FP8 GEMMs "
                "take non-TN layouts, no transpose")
    return Term("fp8_weights", as_expr(linear_params) * b_f8, "Transformer Engine's cached "
                + fmt + "copies of the " + ("frozen " if frozen else "") + "linear weights ("
                + what + ")", _TE_FROZEN if frozen else _TE_FP8, label="fp8 weight cache")


def _framework_state(scheme, offload, psi, dp, precision, grad_dtype, precision_aware,
                     fp8_param_gather, linear_params, optimizer, fp8_recipe=None,
                     fp4_param_gather=False, non_tn_fp8_gemm=False) -> Total:
    """:func:`model_state` under ``convention="framework"``."""
    precision = choose("precision", precision, PRECISIONS)
    optimizer = choose("optimizer", optimizer, OPTIMIZERS)
    # the same validation as the widths, so that structure and widths cannot disagree
    byte_widths(scheme, precision, optimizer, "framework", grad_dtype=grad_dtype,
                fp8_param_gather=fp8_param_gather, precision_aware=precision_aware,
                fp8_recipe=fp8_recipe, fp4_param_gather=fp4_param_gather)
    mx = "MXFP8 " if fp8_recipe == "mxfp8" else "NVFP4 " if precision == "fp4" else "FP8 "
    gdt = default_grad_dtype(scheme, precision, grad_dtype)
    main_copy = optimizer != "none" and has_main_grad_copy(scheme, precision, gdt, precision_aware)
    lin = psi if linear_params is None else as_expr(linear_params)
    megatron = scheme in ("ddp", "distributed-optimizer")
    if scheme == "ddp":
        src_w = src_g = _MC_BUF
        src_o = _MC_DDP
    elif scheme == "distributed-optimizer":
        src_w = src_g = _MC_BUF
        src_o = _MC_SHARD
    elif scheme == "fsdp":
        src_w = src_g = src_o = _FSDP2
    else:
        src_w = src_g = src_o = _DS_3 if scheme == "zero3" else _DS_12
    shard_w = scheme in ("zero3", "fsdp")
    shard_g = scheme in ("zero2", "zero3", "fsdp")
    shard_o = scheme != "ddp"

    def per_gpu(width, sharded, count=psi):
        return count * width / dp if sharded else count * width

    who = {"ddp": "Megatron DDP", "distributed-optimizer": "Megatron distributed optimizer",
           "fsdp": "FSDP2 fully_shard"}.get(scheme, f"DeepSpeed ZeRO stage {scheme[-1]}")
    terms = []
    if offload != "optimizer+params" and precision == "fp8" and scheme == "fsdp":
        # Megatron-FSDP's FP8 parameters (widths: fsdp needs fp8_param_gather): the fp32 shard
        # (b_hp, FSDP2's sharded parameters, Megatron-FSDP's main weights) of every parameter
        # and the model-weight shard, uint8 for the linear weights and 16-bit for the others
        # (their group's param.dtype, param_and_grad_buffer.py:1798)
        terms.append(Term("weights", per_gpu(b_hp, True), "sharded parameters in fp32 "
                          "(Megatron-FSDP's main_weight_buffer)", src_w, label="weights"))
        terms.append(Term("fp8_weights", (lin * b_f8 + (psi - lin) * 2) / dp, "model weights, "
                          "sharded: FP8 linear-layer weights, the others 16-bit (Megatron-FSDP's "
                          "model_weight_buffer)", _MFSDP_FP8, label="fp8 weights"))
    elif offload != "optimizer+params":
        if (precision == "fp8" and fp8_param_gather) or fp4_param_gather:
            terms.append(Term("weights", per_gpu(b_hp, shard_w, psi - lin),
                              "16-bit weights outside the quantized linear ones (embeddings, norms, "
                              "any BF16 layers)",
                              src_w, label="weights"))
        else:
            what = ("sharded parameters in their original dtype (dim-0 shards)" if scheme == "fsdp"
                    else "16-bit parameters" + (", sharded" if shard_w else
                                                 ", whole on every data-parallel rank"))
            if megatron:
                what += " (param_data of the buffer)" if scheme == "distributed-optimizer" else ""
            terms.append(Term("weights", per_gpu(b_hp, shard_w), what, src_w, label="weights"))
        if precision in ("fp8", "fp4"):
            terms.append(_quantized_weights(lin, mx, fp4_param_gather, fp8_param_gather,
                                            not non_tn_fp8_gemm))
    on_gpu_g = not (offload != "none" and scheme in ("zero2", "zero3", "fsdp"))
    if on_gpu_g and optimizer != "none":
        what = {"ddp": "gradient buffer (grad_data), whole on every rank",
                "distributed-optimizer": "gradient buffer (grad_data), whole on every rank: "
                                         "reduce-scatter leaves it allocated",
                "zero1": "16-bit gradients, whole until the reduction",
                "fsdp": "sharded gradients in the original dtype (reduce-scatter output)"}.get(
                    scheme, "16-bit gradient partition")
        terms.append(Term("gradients", per_gpu(b_g, shard_g), what, src_g, label="gradients"))
    if main_copy and offload == "none":
        src = _MC_DDP if scheme == "ddp" else (_MC_MAIN if megatron else (
            MEGATRON_FSDP_CAST_SOURCE if scheme == "fsdp" else src_o))   # fsdp here: Megatron-FSDP's FP8
        what = "fp32 copy of the gradients the optimizer steps on" + (", the rank's shard" if shard_o else "")
        if scheme == "zero3":
            # stage3.py _prepare_fp32_grad_for_sub_group: one sub-group at a time (config
            # sub_group_size, 1e9 elements by default), beside the persistent 16-bit
            # grad_partitions_flat_buffer; DeepSpeed's estimator (18/N) leaves one of the two out
            what += " (one sub_group_size sub-group at a time, during the step)"
        elif scheme in ("zero1", "zero2"):
            what += " (made at the step, stage_1_and_2.py step: .to(fp32))"
        terms.append(Term("main_gradients", per_gpu(b_mg, shard_o), what, src, label="fp32 main grads"))
    if offload == "none" and optimizer != "none":
        terms.append(Term("optimizer", per_gpu(b_m + b_o, shard_o),
                          ("optimizer moments" if scheme == "fsdp" else
                           "main (master) parameters and optimizer moments") +
                          (", sharded" if shard_o else ", replicated"), src_o,
                          label="master + moments"))
    return Total(f"model states per GPU ({who}, {precision}, offload {offload})", tuple(terms))


def host_state(scheme: str = "zero3", *, offload: str = "optimizer", params=None, dp=None,
               convention: str = "zero-paper") -> Total:
    r"""Host (CPU) memory per GPU's share of the offloaded model states [bytes].

    .. math:: M_{\text{host}} = M_{\text{states}} - M_{\text{states on GPU}}

    The complement of :func:`model_state`: what ZeRO-Offload moves out of the GPU.

    Parameters
    ----------
    scheme, offload, params, dp, convention : as :func:`model_state`
        The sharding scheme, what is offloaded, the shard's parameters [parameters], the
        group the states are sharded over [GPUs], and the byte-width convention.

    Examples
    --------
    By hand, ZeRO-2 moves the fp16 gradients and fp32 states, :math:`(2 + 4 + 8)\,N/d` = 3.5 GB:

    >>> host_state("zero2").subs(b_g=2, b_m=4, b_o=8).evaluate(N=10**9, d=4, p=1, t=1) / 10**9
    7/2

    References
    ----------
    .. [zero-offload] Ren et al. 2021, arXiv:2101.06840, §4 (gradients, optimizer states on CPU).
    """
    scheme = normalize_scheme(scheme)
    offload = choose("offload", offload, OFFLOADS)
    full = model_state(scheme, params=params, dp=dp, convention=convention)
    on_gpu = model_state(scheme, offload=offload, params=params, dp=dp, convention=convention)
    moved = tuple(
        Term(term.key, term.expr, term.description + ", offloaded to host memory", _OFFLOAD, label=term.label)
        for term in full if term.key not in on_gpu)
    return Total(f"host memory of offloaded states ({scheme}, offload {offload})", moved)


def deepspeed_allows_pipeline(scheme: str) -> bool:
    """Whether DeepSpeed runs ``scheme`` with pipeline parallelism (ZeRO-2/3 do not).

    ``PipelineEngine.__init__`` asserts ``zero_optimization_stage() < ZeroStageEnum.gradients``:
    "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism".

    Examples
    --------
    >>> [deepspeed_allows_pipeline(s) for s in ("zero1", "zero2", "zero3")]
    [True, False, False]

    References
    ----------
    DeepSpeed ``runtime/pipe/engine.py:PipelineEngine.__init__`` (edaa722126).
    """
    return normalize_scheme(scheme) not in ("zero2", "zero3")
