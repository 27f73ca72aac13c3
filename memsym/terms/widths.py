"""Bytes per parameter of each model state: the precisions, optimizers and frameworks' dtypes.

:func:`byte_widths` turns a precision, an optimizer and a convention into the widths
``b_hp``, ``b_g``, ``b_mg``, ``b_m``, ``b_o``, ``b_f8`` that the terms of
:func:`memsym.terms.model_state.model_state` multiply; this module owns the tables
(:data:`PRECISIONS`, :data:`OPTIMIZERS`, :data:`STATE_DTYPES`) and the framework dtype rules
both read; ``b_f8``, the bytes of Transformer Engine's FP8 or NVFP4 weight copies, comes from
:mod:`memsym.terms.low_precision`.  Its names are re-exported by :mod:`memsym.terms.model_state`.

References
----------
.. [zero] Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
   Models", arXiv:1910.02054, §3.1.
.. [megatron-core] Megatron-LM ``megatron/core`` at d98e8a64dd: ``_ParamAndGradBuffer``,
   ``DistributedOptimizer._copy_model_grads_to_main_grads``, ``optimizer_config.py``.
.. [transformer-engine] ``pytorch/optimizers/fused_adam.py`` (``store_param_remainders``).
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError, choose
from ..symbols import b_f8, b_g, b_hp, b_m, b_mg, b_o
from ..vocabulary import CONVENTION_ALIASES, CONVENTIONS, FP8_RECIPES, GRAD_DTYPES, SCHEMES
from .low_precision import fp8_weight_bytes, nvfp4_weight_bytes

__all__ = ["PRECISIONS", "OPTIMIZERS", "STATE_DTYPES", "FP8_RECIPES", "byte_widths",
           "param_gather_bytes", "normalize_scheme", "normalize_convention"]

#: Bytes of the precision-aware optimizer's state dtypes (Megatron ``optimizer_config.py``).
STATE_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

#: Weight precision -> (bytes per weight used in forward/backward, fp32 master copy bytes),
#: as the textbook conventions count them.  fp8 there means fp8 primary weights.
PRECISIONS = {
    "fp32": (4, 0),
    "bf16": (2, 4),
    "fp16": (2, 4),
    "fp8": (1, 4),
    "fp4": (2, 4),   # the bf16 weights NVFP4 GEMMs quantize (no FP4 primary weights)
}

#: Optimizer -> bytes per parameter of its moments (beyond the master copy).
#: REF: zero §3.1 (Adam: momentum + variance, fp32); seed 002 (SGD with momentum: 12 B/param
#: in total); Dettmers et al. 2022 arXiv:2110.02861 (8-bit Adam: two 1-byte states; its
#: block-wise fp32 scales, 8 bytes per 2048 parameters, are neglected); Shazeer & Stern 2018
#: arXiv:1804.04235 (Adafactor without momentum: the factored second moment is O(rows+cols)
#: per matrix, about 8/h bytes per parameter of an h x h matrix, counted as 0 here).  Muon:
#: one fp32 ``momentum_buffer`` (``torch.zeros_like(p.data)`` of the fp32 main parameter,
#: Emerging-Optimizers fd77292 orthogonalized_optimizer.py:154) on every parameter it steps;
#: the parameters Megatron routes to its scalar Adam (embeddings, output layer, 1-D: the
#: second moment beyond this) are :func:`memsym.terms.model_state.muon_scalar_moment`.
OPTIMIZERS = {
    "adam": 8,
    "adamw": 8,
    "sgd": 4,
    "muon": 4,
    "adam8bit": 2,
    "adafactor": 0,
    "none": 0,
}


def normalize_scheme(scheme: str) -> str:
    """The canonical scheme name (``fsdp`` stays, it is a documented alias of ZeRO-3)."""
    return choose("sharding", scheme, SCHEMES)


def normalize_convention(convention: str) -> str:
    """The convention a name means: ``memsym`` (the old default) is ``seed000``.

    Examples
    --------
    >>> normalize_convention("memsym"), normalize_convention("Zero_Paper")
    ('seed000', 'zero-paper')
    """
    name = choose("convention", convention, CONVENTIONS)
    return CONVENTION_ALIASES.get(name, name)


def default_grad_dtype(scheme: str, precision: str, grad_dtype: str | None = None, *,
                       megatron_fsdp: bool = False) -> str:
    """The gradient-buffer dtype the framework uses when the user does not say.

    Megatron-core keeps an fp32 gradient buffer under bf16
    (``accumulate_allreduce_grads_in_fp32`` unless ``--grad-reduce-in-bf16``) and fp16 under
    fp16; DeepSpeed the model dtype (``data_types.grad_accum_dtype``); FSDP2 the parameter's
    original dtype (fp32); Megatron-FSDP's FP8 parameters (fsdp, fp8) bf16.

    Parameters
    ----------
    scheme : str
        One of :data:`SCHEMES`, already normalised (:func:`normalize_scheme`).
    precision : str
        One of :data:`PRECISIONS`.
    grad_dtype : {"fp32", "bf16", "fp16"}, optional
        The dtype asked for, returned as it is (checked); None for the framework's default.
    megatron_fsdp : bool
        Megatron-FSDP (any strategy): its ``main_grad_buffer`` takes
        ``megatron_fsdp_main_grads_dtype``, by default (``auto``) the parameters' dtype
        (param_and_grad_buffer.py:2313-2322 at d98e8a64dd); it reads no
        ``grad_reduce_in_fp32``.

    Examples
    --------
    >>> default_grad_dtype("distributed-optimizer", "bf16"), default_grad_dtype("zero2", "bf16")
    ('fp32', 'bf16')
    >>> default_grad_dtype("fsdp", "bf16"), default_grad_dtype("fsdp", "fp8")  # FSDP2; Megatron-FSDP FP8
    ('fp32', 'bf16')
    >>> default_grad_dtype("zero2", "bf16", megatron_fsdp=True)  # Megatron-FSDP optim_grads
    'bf16'

    References
    ----------
    Megatron-LM ``megatron/training/arguments.py`` (``validate_args``); DeepSpeed
    ``runtime/zero/stage_1_and_2.py``; PyTorch ``_fsdp_collectives.py`` (``foreach_reduce``).
    """
    if grad_dtype is not None:
        return choose("grad_dtype", grad_dtype, GRAD_DTYPES)
    if precision == "fp32":
        return "fp32"
    if megatron_fsdp:
        # the 16-bit parameters' dtype (Float16Module casts before Megatron-FSDP wraps,
        # training.py:2468-2470); an FP8 group's grads are bf16 (2322)
        return "fp16" if precision == "fp16" else "bf16"
    if scheme in ("ddp", "distributed-optimizer"):
        # REF: megatron-lm arguments.py validate_args: bf16 forces
        # accumulate_allreduce_grads_in_fp32 unless --grad-reduce-in-bf16; fp16 does not.
        return "fp16" if precision == "fp16" else "fp32"
    if scheme == "fsdp" and precision == "fp8":
        # Megatron-FSDP's FP8 parameters: an FP8 group's main_grad_buffer is bf16 unless
        # megatron_fsdp_main_grads_dtype says otherwise (param_and_grad_buffer.py:2322 at
        # 2a75ac12c5; Megatron-FSDP does not read grad_reduce_in_fp32)
        return "bf16"
    # DeepSpeed: data_types.grad_accum_dtype defaults to the model dtype; FSDP2: the
    # sharded grads keep the parameter's original dtype (fp32 under MixedPrecisionPolicy).
    return "fp32" if scheme == "fsdp" else ("fp16" if precision == "fp16" else "bf16")


def has_main_grad_copy(scheme: str, precision: str, grad_dtype: str,
                       precision_aware: bool) -> bool:
    """Whether the framework keeps a separate fp32 copy of the gradients for the optimizer.

    Parameters
    ----------
    scheme : str
        One of :data:`SCHEMES`, already normalised (:func:`normalize_scheme`).
    precision : str
        One of :data:`PRECISIONS`.
    grad_dtype : str
        The gradient buffer's dtype (:func:`default_grad_dtype`).
    precision_aware : bool
        Megatron ``--use-precision-aware-optimizer``.

    Examples
    --------
    >>> has_main_grad_copy("distributed-optimizer", "bf16", "bf16", False)
    True
    >>> has_main_grad_copy("distributed-optimizer", "bf16", "fp32", False)
    False

    References
    ----------
    Megatron-LM ``megatron/core/optimizer/distrib_optimizer.py``
    (``_copy_model_grads_to_main_grads``) at d98e8a64dd.
    """
    if precision == "fp32" or grad_dtype == "fp32":
        return False
    if scheme == "fsdp":
        # FSDP2 steps on its fp32 shard; fp8 under fsdp is Megatron-FSDP's FP8 parameters,
        # whose update_main_grads casts the 16-bit main grad to the fp32 main weights' dtype
        # (megatron_fsdp/param_and_grad_buffer.py:3381 at d98e8a64dd)
        return precision == "fp8"
    # Megatron's precision-aware optimizer reads shard_main_param.decoupled_grad, a view of
    # the grad buffer (no copy): distrib_optimizer.py _copy_model_grads_to_main_grads.
    return not (precision_aware and scheme == "distributed-optimizer")


def _check_fp4_param_gather(fp4_param_gather: bool, precision: str, scheme: str) -> None:
    """Refuse ``fp4_param_gather`` outside NVFP4 under the distributed optimizer: only
    DistributedOptimizer casts its fp32 shards back to NVFP4 (distrib_optimizer.py:2853-2857
    quantize_nvfp4_param_shard); optimizer.py, the DDP optimizer, has no NVFP4 path."""
    if fp4_param_gather and (precision != "fp4" or scheme != "distributed-optimizer"):
        raise InvalidValueError(f"fp4_param_gather needs precision fp4 and the distributed "
                                f"optimizer, not {precision} under {scheme} (Megatron: "
                                "--fp4-param-gather needs --fp4-format)")


def byte_widths(scheme: str = "distributed-optimizer", precision: str = "bf16",
                optimizer: str = "adam", convention: str = "framework", *,
                grad_dtype: str | None = None, fp8_param_gather: bool = False,
                precision_aware: bool = False, main_params_dtype: str = "fp32",
                exp_avg_dtype: str = "fp32", exp_avg_sq_dtype: str = "fp32",
                store_param_remainders: bool = True, fp8_recipe: str | None = None,
                fp4_param_gather: bool = False, non_tn_fp8_gemm: bool = False) -> dict:
    """Bytes per parameter of weights, gradients, main-gradient copy, master copy and moments.

    Under ``convention="framework"`` the widths are the framework's tensors: Megatron-core
    (ddp, distributed-optimizer) keeps bf16 params and an fp32 gradient buffer (bf16 forces
    ``grad_reduce_in_fp32``), fp16 params an fp16 buffer plus an fp32 ``.float()`` shard;
    DeepSpeed (zero1/2/3) 16-bit params and grads plus an fp32 gradient partition; FSDP2
    (fsdp) keeps fp32 sharded params and grads (they are the master copy) and only the
    moments beside them.  FP8 (Transformer Engine): bf16 weights with cached FP8 copies, or FP8
    weights under ``fp8_param_gather`` (``b_f8 = 2``, rowwise + transpose, either way; 1 where
    ``non_tn_fp8_gemm`` or Megatron-FSDP's shards); MXFP8 rowwise + columnwise data with a scale
    byte per 32 each (``b_f8 = 2 + 2/32``, :func:`fp8_weight_bytes`).  NVFP4 (fp4) keeps
    rowwise and columnwise copies, 4-bit with a scale byte per 16 elements each (``b_f8 = 9/8``,
    :func:`nvfp4_weight_bytes`), beside the bf16 weight or, with ``fp4_param_gather``, instead
    of it.  Textbook conventions: ZeRO fp16 gradients, seed 000 fp32 sharded, Megatron-LM fp32.

    Parameters
    ----------
    scheme : str
        One of :data:`SCHEMES`.
    precision : str
        One of :data:`PRECISIONS`.
    optimizer : str
        One of :data:`OPTIMIZERS`; ``"none"`` means frozen weights (no gradients either).
    convention : str
        One of :data:`CONVENTIONS`.
    grad_dtype : {"fp32", "bf16", "fp16"}, optional
        Gradient-buffer dtype (framework only); default the framework's (see above).
    fp8_param_gather : bool
        Megatron ``--fp8-param-gather``: FP8 weights only, gathered in FP8 (framework, fp8; under
        ``fsdp`` Megatron-FSDP's: ``b_hp = 4`` fp32 main-weight, ``b_f8 = 1`` FP8 weight shards).
    precision_aware : bool
        Megatron ``--use-precision-aware-optimizer`` (distributed-optimizer, Adam).
    fp8_recipe, non_tn_fp8_gemm : {None, "delayed", "tensorwise", "mxfp8"}, bool
        Megatron ``--fp8-recipe`` (framework, fp8; :data:`FP8_RECIPES`); the GPU's FP8 GEMMs take
        non-TN layouts (:attr:`memsym.hardware.GPU.non_tn_fp8_gemm`).
    fp4_param_gather : bool
        Megatron ``--fp4-param-gather`` (Bridge ``fp4_param_gather``): NVFP4 linear weights only,
        gathered in NVFP4 (framework, fp4, distributed optimizer).  The widths are those without
        it; :func:`memsym.terms.model_state.model_state` drops the 16-bit linear weights.
    main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype : str
        The precision-aware optimizer's dtypes, keys of :data:`STATE_DTYPES`.
    store_param_remainders : bool
        With bf16 params and fp32 main params, keep only the 16-bit remainder (2 B) [TE FusedAdam].

    Returns
    -------
    dict
        ``{b_hp, b_g, b_m, b_o}`` and, under ``framework``, ``b_mg`` and ``b_f8``, as exact
        integers [bytes/parameter].

    Examples
    --------
    >>> w = byte_widths()  # Megatron distributed optimizer, bf16: 2 + 4 + (0 + 4 + 8)/d
    >>> [int(w[x]) for x in (b_hp, b_g, b_mg, b_m, b_o, b_f8)]
    [2, 4, 0, 4, 8, 0]
    >>> w = byte_widths(grad_dtype="bf16")  # --grad-reduce-in-bf16: 2 + 2 + (4 + 4 + 8)/d
    >>> [int(w[x]) for x in (b_hp, b_g, b_mg, b_m, b_o)]
    [2, 2, 4, 4, 8]
    >>> sorted((str(k), v) for k, v in byte_widths("zero1", convention="zero-paper").items())
    [('b_g', 2), ('b_hp', 2), ('b_m', 4), ('b_o', 8)]
    >>> byte_widths("ddp", convention="megatron-lm")[b_g]
    4
    >>> w = byte_widths("fsdp", "fp8", grad_dtype="bf16", fp8_param_gather=True)  # Megatron-FSDP
    >>> [int(w[x]) for x in (b_hp, b_g, b_mg, b_m, b_o, b_f8)]
    [4, 2, 4, 0, 8, 1]
    >>> byte_widths(precision="fp8", fp8_recipe="mxfp8")[b_f8]  # MXFP8: (1 + 1/32) x 2
    33/16
    """
    scheme = normalize_scheme(scheme)
    precision = choose("precision", precision, PRECISIONS)
    optimizer = choose("optimizer", optimizer, OPTIMIZERS)
    convention = normalize_convention(convention)
    if fp8_recipe is not None and precision != "fp8":
        raise InvalidValueError(f"fp8_recipe {fp8_recipe} needs precision fp8, not {precision} "
                                "(Megatron reads --fp8-recipe only with --fp8-format)")
    if convention == "framework":
        _check_fp4_param_gather(fp4_param_gather, precision, scheme)
        widths = _framework_widths(scheme, precision, optimizer, grad_dtype, fp8_param_gather,
                                   precision_aware, main_params_dtype, exp_avg_dtype,
                                   exp_avg_sq_dtype, store_param_remainders)
        if precision == "fp8":
            widths[b_f8] = fp8_weight_bytes(fp8_recipe, fp8_param_gather, non_tn_fp8_gemm,
                                            sharded_params=scheme == "fsdp")
        if precision == "fp4":   # NVFP4 rowwise + columnwise, beside or instead of the bf16 weight
            widths[b_f8] = nvfp4_weight_bytes(fp4_param_gather)
        return widths
    if fp8_recipe is not None or grad_dtype is not None or fp8_param_gather or precision_aware \
            or fp4_param_gather:
        raise InvalidValueError(f"fp8_recipe, grad_dtype, fp8_param_gather, fp4_param_gather and "
                                f"precision_aware describe a framework's tensors; convention "
                                f"{convention} has fixed widths (use convention='framework')")
    return _convention_widths(scheme, precision, optimizer, convention)


def _convention_widths(scheme, precision, optimizer, convention) -> dict:
    # the textbook conventions' fixed widths (see byte_widths)
    weight, master = PRECISIONS[precision]
    fp32_grads = (scheme == "distributed-optimizer" and convention == "seed000") or \
        convention == "megatron-lm"
    grad = 4 if fp32_grads else max(weight, 2)  # fp8 weights still get bf16 gradients
    if convention == "megatron-lm" and precision == "fp16":
        # REF: megatron-distopt-doc, table row fp16 param / fp16 grads: 20, or 4 + 16/d.
        # The backward writes fp16 gradients; the optimizer keeps fp32 main weights *and*
        # fp32 main gradients (4 + 4), sharded with the moments under the distributed optimizer.
        grad, master = 2, 8
    if optimizer == "none":  # frozen or inference: no gradients, no optimizer
        grad, master = 0, 0
    return {b_hp: sp.Integer(weight), b_g: sp.Integer(grad), b_m: sp.Integer(master),
            b_o: sp.Integer(OPTIMIZERS[optimizer])}


def param_gather_bytes(precision: str = "bf16", fp8_recipe: str | None = None,
                       fp8_param_gather: bool = False, fp4_param_gather: bool = False, *,
                       linear: bool = True) -> sp.Expr:
    r"""Bytes per parameter the distributed optimizer's all-gather moves [bytes/parameter].

    The parameter all-gather moves the DDP buffer's ``param_data``, whose dtype is the parameter's
    storage dtype (``group_params_for_buffers``): the 16-bit weight (2 B; fp32 weights 4 B),
    with ``--fp8-param-gather`` under per-tensor scaling the uint8 FP8 weight (1 B; the
    per-tensor scale is an all-reduced amax, not gathered), with ``--fp4-param-gather`` the
    NVFP4 weight's packed rowwise bytes (``numel/2`` uint8, 1/2 B; its E4M3 block scales stay
    outside the buffer: every rank recomputes them from the fp32 amax of each 16 x 16 tile,
    all-reduced over DP in the optimizer step, 4 B per 256 parameters, not priced here).
    MXFP8 parameters cannot be remapped into the buffer (TE ``replace_raw_data`` refuses
    MXFP8Tensor), so Megatron gathers them as bf16 through the gradient buffer
    (``reuse_grad_buf_for_mxfp8_param_ag``: the fp32 main shards copied in as bf16) and
    re-quantizes after the gather: 2 B, scales included, with or without the flag.  Only
    Transformer Engine's linear weights are quantized; the others (``linear=False``:
    embeddings, the output layer, norms) gather at the 16-bit (fp32) width.

    .. math::
        b_{ag} = \begin{cases} 1 & \text{fp8, fp8\_param\_gather, per-tensor scaling}\\
        1/2 & \text{fp4, fp4\_param\_gather}\\
        4 & \text{fp32}\\ 2 & \text{otherwise (bf16, fp16, MXFP8)} \end{cases}

    A ring all-gather of :math:`N` parameters over :math:`d` ranks then sends
    :math:`(d-1)/d\cdot N\,b_{ag}` bytes per GPU
    (:func:`memsym.timing.collectives.collective_bytes`).

    Parameters
    ----------
    precision : {"bf16", "fp16", "fp8", "fp32", "fp4"}
        The training precision.
    fp8_recipe : {None, "delayed", "tensorwise", "mxfp8"}
        Megatron's ``--fp8-recipe`` (fp8 only).
    fp8_param_gather, fp4_param_gather : bool
        Megatron's ``--fp8-param-gather`` (fp8 only) and ``--fp4-param-gather`` (fp4 only).
    linear : bool
        A Transformer Engine linear-layer weight (True) or another weight (False).

    Returns
    -------
    sympy.Rational
        :math:`b_{ag}` [bytes/parameter].

    Examples
    --------
    >>> param_gather_bytes(), param_gather_bytes("fp8", None, True)
    (2, 1)
    >>> param_gather_bytes("fp4", fp4_param_gather=True)   # packed nibbles, numel/2 uint8
    1/2
    >>> param_gather_bytes("fp8", "mxfp8", True), param_gather_bytes("fp8", None, True, linear=False)
    (2, 2)

    References
    ----------
    megatron-core: distributed/param_and_grad_buffer.py:888-923 (param_dtype uint8 for FP8 /
    NVFP4 parameters), 1160-1187 (MXFP8: param_data a bf16 view of the gradient buffer; NVFP4:
    ``nvfp4_packed_numel``), 301-326 (_post_param_sync re-quantizes the gathered MXFP8 weights);
    optimizer/distrib_optimizer.py:2904-2930 (_copy_main_params_to_param_buffer);
    transformer-engine: pytorch/tensor/utils.py:30-84 (replace_raw_data: MXFP8Tensor not
    supported), 752-848 (_cast_master_weights_to_nvfp4_2d: 16 x 16 tile amaxes all-reduced).
    """
    precision = choose("precision", precision, PRECISIONS)
    recipe = None if fp8_recipe is None else choose("FP8 recipe", fp8_recipe, FP8_RECIPES)
    if precision == "fp32":
        return sp.Integer(4)
    if linear and precision == "fp8" and fp8_param_gather and recipe != "mxfp8":
        return sp.Integer(1)
    if linear and precision == "fp4" and fp4_param_gather:
        return sp.Rational(1, 2)
    return sp.Integer(2)


def _framework_widths(scheme, precision, optimizer, grad_dtype, fp8_param_gather,
                      precision_aware, main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype,
                      store_param_remainders) -> dict:
    # fp8 under fsdp is Megatron-FSDP's FP8 parameters (its uint8 model_weight_buffer,
    # fp8_param_gather); FSDP2 itself has no FP8 weights memsym models
    megatron_fsdp_fp8 = precision == "fp8" and scheme == "fsdp" and fp8_param_gather
    if precision in ("fp8", "fp4") and scheme not in ("ddp", "distributed-optimizer") \
            and not megatron_fsdp_fp8:
        raise InvalidValueError(
            f"{precision} is modelled as Transformer Engine under Megatron (ddp, "
            f"distributed-optimizer, or fp8 under fsdp as Megatron-FSDP with fp8_param_gather), "
            f"not {scheme}"
            + (" without fp8_param_gather" if scheme == "fsdp" and precision == "fp8" else "")
            + "; use precision bf16 or convention='zero-paper'")
    if fp8_param_gather and (precision != "fp8"
                             or scheme not in ("distributed-optimizer", "fsdp")):
        raise InvalidValueError("fp8_param_gather needs precision fp8 and the distributed optimizer "
                                "or fsdp (Megatron: --fp8-param-gather needs DistOpt or FSDP)")
    if precision_aware and (scheme != "distributed-optimizer" or optimizer not in ("adam", "adamw")):
        raise InvalidValueError("precision_aware needs the distributed optimizer with Adam "
                                "(Megatron --use-precision-aware-optimizer)")
    gdt = default_grad_dtype(scheme, precision, grad_dtype)
    weight = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 2, "fp4": 2}[precision]
    if scheme == "fsdp":
        weight = 4  # sharded params stay in their original fp32; param_dtype is the compute copy
    # b_f8 of fp8 (and fp4) is set by byte_widths (fp8_weight_bytes: TE's cached FP8 copies, or
    # with fp8_param_gather the FP8 weight, under Megatron-FSDP its uint8 model_weight_buffer shard)
    f8 = 0
    grad = STATE_DTYPES[gdt]
    main_grad = 4 if has_main_grad_copy(scheme, precision, gdt, precision_aware) else 0
    # fp32 masters: none for fp32 Megatron params (they are the main params) and none for
    # FSDP2 (the fp32 shard is updated in place); DeepSpeed clones even fp32 partitions.
    if scheme == "fsdp" or (precision == "fp32" and scheme in ("ddp", "distributed-optimizer")):
        master = 0
    else:
        master = 4
    moments = OPTIMIZERS[optimizer]
    if precision_aware:
        for name, value in (("main_params_dtype", main_params_dtype), ("exp_avg_dtype", exp_avg_dtype),
                            ("exp_avg_sq_dtype", exp_avg_sq_dtype)):
            choose(name, value, tuple(STATE_DTYPES))
        master = STATE_DTYPES[choose("main_params_dtype", main_params_dtype, ("fp32", "fp16"))]
        if master == 4 and precision in ("bf16", "fp8", "fp4") and store_param_remainders:
            # REF: TE optimizers/fused_adam.py store_param_remainders: the bf16 param plus a
            # 16-bit remainder reconstruct the fp32 master exactly.
            master = 2
        if precision == "fp32":
            master = 0
        moments = STATE_DTYPES[exp_avg_dtype.strip().lower()] + STATE_DTYPES[exp_avg_sq_dtype.strip().lower()]
    if optimizer == "none":
        grad, main_grad, master, moments = 0, 0, 0, 0
    return {b_hp: sp.Integer(weight), b_g: sp.Integer(grad), b_mg: sp.Integer(main_grad),
            b_m: sp.Integer(master), b_o: sp.Integer(moments), b_f8: sp.Integer(f8)}
