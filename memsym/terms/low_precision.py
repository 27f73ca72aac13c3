"""Bytes per element of Transformer Engine's low-precision tensors: FP8, MXFP8 and NVFP4.

The model-state widths (:func:`memsym.terms.widths.byte_widths`) take ``b_f8``, the bytes of
the FP8 or NVFP4 copies kept per linear-layer weight, from :func:`fp8_weight_bytes` and
:func:`nvfp4_weight_bytes`; the activation terms take the bytes of a saved GEMM input from
:func:`saved_input_bytes`.  This module owns the block sizes of the scaled formats
(:data:`MXFP8_BLOCK`, :data:`NVFP4_BLOCK`) and the per-element bytes built on them.

References
----------
.. [transformer-engine] ``pytorch/constants.py``, ``pytorch/tensor/mxfp8_tensor.py``,
   ``pytorch/tensor/nvfp4_tensor.py``, ``pytorch/module/linear.py`` at d0067d0da6.
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError, choose
from ..vocabulary import FP8_RECIPES

__all__ = ["MXFP8_BLOCK", "NVFP4_BLOCK", "fp8_weight_bytes", "nvfp4_element_bytes",
           "nvfp4_weight_bytes", "saved_input_bytes"]

#: Elements that share one MXFP8 scale byte.  Of Megatron's ``--fp8-recipe`` values
#: (:data:`FP8_RECIPES`, from memsym.vocabulary) only ``mxfp8`` changes a count: Transformer
#: Engine's MXFP8BlockScaling keeps one E8M0 scale byte per 32 consecutive elements
#: (``MXFP8_BLOCK_SCALING_SIZE = 32``, pytorch/constants.py) and a rowwise and a columnwise
#: FP8 copy, each with its own scales (``MXFP8Quantizer.inner_tensor_specs`` and
#: ``get_scale_shape``, pytorch/tensor/mxfp8_tensor.py at d0067d0da6; the [128, 4] padding of
#: the scale tensors is neglected).  TE refuses MXFP8 below compute capability 10.0
#: (``_compute_mxfp8_support``, pytorch/quantization.py): no Hopper.
MXFP8_BLOCK = 32

#: Elements that share one NVFP4 scale (precision fp4: Transformer Engine's NVFP4BlockScaling,
#: ``NVFP4_BLOCK_SCALING_SIZE = 16``, pytorch/constants.py): 4-bit E2M1 data, two values a byte,
#: one E4M3 scale byte per 16 elements and one fp32 amax per tensor, rowwise and columnwise
#: copies each quantized from the 16-bit tensor (``NVFP4Quantizer.inner_tensor_specs``,
#: pytorch/tensor/nvfp4_tensor.py at d0067d0da6; the scale padding and the amax neglected).
NVFP4_BLOCK = 16


def fp8_weight_bytes(fp8_recipe: str | None = None, fp8_param_gather: bool = False,
                     non_tn_fp8_gemm: bool = False, sharded_params: bool = False) -> sp.Expr:
    r"""Bytes of Transformer Engine's FP8 copies per linear-layer weight [bytes/parameter].

    They are kept beside (or, with ``fp8_param_gather``, instead of) the 16-bit weight.
    Per-tensor scaling (delayed, tensorwise): the rowwise FP8 copy and its transpose, 1 + 1;
    FP8 parameters (``fp8_param_gather``) too: each parameter all-gather ends in TE's
    ``post_all_gather_processing``, which makes the transpose on TN-only GPUs, and nothing
    drops it (Megatron-FSDP's FP8 shards, ``sharded_params``: 1).  Non-TN FP8 GEMMs
    (``non_tn_fp8_gemm``: compute capability 10.x, 11.x, >= 13): no transpose, 1.  MXFP8:
    rowwise and columnwise data, each with an E8M0 scale byte per 32 elements (``linear.py``
    asks columnwise usage whenever the input needs a gradient), on any GPU:

    .. math:: b_{f8} = 2\ \text{(TN-only)},\quad 1\ \text{(non-TN)},\quad
              2\,(1 + 1/32) = 33/16\ \text{(MXFP8)}

    Examples
    --------
    >>> [fp8_weight_bytes(*a) for a in ((), (None, True), ("tensorwise", True, True), (None, True, False, True), ("mxfp8", True, True))]
    [2, 2, 1, 1, 33/16]

    References
    ----------
    transformer-engine at d0067d0da6: pytorch/tensor/mxfp8_tensor.py (MXFP8Quantizer.get_scale_shape),
    module/linear.py:467-475 (weight_quantizer.set_usage), module/base.py:757-767, 792-885
    (quantize_weight), csrc/quantizer.cpp:363, 375, 679, 689 (``_transpose`` only when
    ``columnwise_usage && !is_non_tn_fp8_gemm_supported``), float8_tensor_storage.py:267-277
    (``_create_transpose``, ``out=self._transpose``), 292-317 (dropped only for columnwise usage
    False, never asked of a weight: linear.py:490, 1051), tensor/utils.py:1423-1427 (TN-only
    transpose after the gather); megatron-core d98e8a64dd param_and_grad_buffer.py:301-343.
    """
    recipe = None if fp8_recipe is None else choose("FP8 recipe", fp8_recipe, FP8_RECIPES)
    if recipe == "mxfp8":
        return 2 * (1 + sp.Rational(1, MXFP8_BLOCK))
    return sp.Integer(1 if (fp8_param_gather and sharded_params) or non_tn_fp8_gemm else 2)


def nvfp4_element_bytes() -> sp.Expr:
    r"""Bytes of one NVFP4 copy of a tensor per element [bytes/element].

    4-bit data and an E4M3 scale byte per 16 elements.  A weight keeps the rowwise and the columnwise copy (twice this), a saved GEMM input the
    columnwise one (TE ``linear.py``, as for MXFP8).

    .. math:: b = 1/2 + 1/16 = 9/16

    Examples
    --------
    >>> nvfp4_element_bytes(), 2 * nvfp4_element_bytes()
    (9/16, 9/8)

    References
    ----------
    transformer-engine: pytorch/tensor/nvfp4_tensor.py (NVFP4Quantizer.inner_tensor_specs,
    get_scale_shape), common/recipe/__init__.py (NVFP4BlockScaling).
    """
    return sp.Rational(1, 2) + sp.Rational(1, NVFP4_BLOCK)


def saved_input_bytes(fp8_inputs: bool | str = False) -> sp.Expr:
    r"""Bytes per element of a GEMM input a Transformer Engine linear saves for its backward.

    .. math:: b_x = 2 \ (\text{16-bit}),\quad 1 \ (\text{FP8}),\quad
              1 + 1/32 \ (\text{MXFP8}),\quad 1/2 + 1/16 \ (\text{NVFP4})

    Under FP8 the weight gradient reads the quantized input: ``_Linear.forward`` keeps it as
    ``saved_inputmat`` with only the columnwise usage (``update_usage(rowwise_usage=False,
    columnwise_usage=True)``), ``_LayerNormLinear.forward`` keeps the fused norm's quantized
    output ``ln_out`` the same way (``ln_out.update_usage(rowwise_usage=False)``), each with its
    block scales (MXFP8: an E8M0 byte per 32 elements; NVFP4: 4-bit data, an E4M3 byte per 16).

    Parameters
    ----------
    fp8_inputs : bool or {"mxfp8", "nvfp4"}
        False (or None): 16-bit compute; True: per-tensor FP8; ``"mxfp8"``; ``"nvfp4"``;
        anything else raises InvalidValueError.

    Returns
    -------
    sympy.Expr
        [bytes/element].

    Examples
    --------
    >>> [saved_input_bytes(x) for x in (False, True, "mxfp8", "nvfp4")]
    [2, 1, 33/32, 9/16]

    References
    ----------
    transformer-engine at d0067d0da6: pytorch/module/linear.py:616-621 (saved_inputmat),
    pytorch/module/layernorm_linear.py:478-487, :526-536 (ln_out saved columnwise).
    """
    if fp8_inputs not in (None, False, True, "mxfp8", "nvfp4"):
        # a misspelt recipe would otherwise be truthy, priced as per-tensor FP8
        raise InvalidValueError(f"fp8_inputs must be False (16-bit), True (FP8), 'mxfp8' or "
                                f"'nvfp4', got {fp8_inputs!r:.40}")
    if fp8_inputs == "mxfp8":
        return 1 + sp.Rational(1, MXFP8_BLOCK)
    if fp8_inputs == "nvfp4":
        return nvfp4_element_bytes()
    return sp.Integer(1 if fp8_inputs else 2)


def nvfp4_weight_bytes(fp4_param_gather: bool = False) -> sp.Expr:
    r"""Bytes of Transformer Engine's NVFP4 copies per linear-layer weight [bytes/parameter].

    Without ``fp4_param_gather`` the GEMMs quantize the bf16 weight and TE caches the rowwise
    and columnwise NVFP4 copies beside it.  With Megatron's ``--fp4-param-gather`` the weight
    *is* an NVFP4Tensor (``quantized_model_init``; the bf16 initial value is kept on the CPU,
    ``preserve_high_precision_init_val``; the fp32 master copy is the distributed optimizer's
    main-param shard): its packed rowwise data (``numel/2`` uint8) lives in the DDP buffer's
    ``param_data`` and is what the all-gather moves; its rowwise E4M3 scales, its amax and its
    columnwise data and scales stay TE's (``post_all_gather_processing`` transposes the
    16x16-block rowwise copy into them after each gather).  Either way, one copy is 4-bit data
    and one scale byte per 16 elements, twice (:func:`nvfp4_element_bytes`; the per-tensor fp32
    amax and the scales' 128 x 4 padding neglected):

    .. math:: b_{f8} = 2\,\bigl(1/2 + 1/16\bigr) = 9/8

    what changes is the 2-byte weight beside it (:func:`memsym.terms.model_state.model_state`).

    Parameters
    ----------
    fp4_param_gather : bool
        Megatron ``--fp4-param-gather`` (the same bytes: the parameter keeps both directions).

    Returns
    -------
    sympy.Rational
        ``b_f8`` [bytes/parameter].

    Examples
    --------
    >>> nvfp4_weight_bytes(), nvfp4_weight_bytes(True)
    (9/8, 9/8)

    References
    ----------
    megatron-core-nvfp4-params: distributed/param_and_grad_buffer.py:1084-1187 (NVFP4 params: uint8
    param_data of nvfp4_packed_numel = numel/2), fp4_utils.py:80-108 (only the rowwise bytes
    remapped into the buffer; scales, amax and columnwise stay the tensor's),
    optimizer/distrib_optimizer.py:2853-2857 (quantize_nvfp4_param_shard);
    transformer-engine-nvfp4-params: pytorch/module/base.py:1838-1849 (reset_parameters: rowwise and
    columnwise usage, the high-precision init value on the CPU),
    pytorch/tensor/utils.py:1451-1520 (_nvfp4_2d_multi_tensor_transpose),
    pytorch/tensor/nvfp4_tensor.py:273-307 (get_scale_shape).
    """
    # the same bytes with or without the flag: the NVFP4 parameter holds both directions
    del fp4_param_gather
    return 2 * nvfp4_element_bytes()
