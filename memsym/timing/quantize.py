r"""HBM traffic of Transformer Engine's casts of each GEMM's input and output gradient under
FP8, MXFP8 or NVFP4: separate kernels, priced at HBM bandwidth (MXFP8's at the fraction of it
Transformer Engine's MXFP8 cast kernel is measured at, :func:`cast_rate`).

Transformer Engine quantizes what a low-precision GEMM reads itself, one kernel per tensor
[te-quantize]:

* forward, the input: ``_Linear.forward`` runs ``inputmat = input_quantizer(inputmat)``
  (row-wise for the forward GEMM, column-wise for the weight gradient, saved for backward);
  ``_GroupedLinear.forward`` runs ``tex.split_quantize`` over the experts' rows;
  ``_LayerNormLinear`` hands its norm the quantizer (``with_quantized_norm``), and under
  delayed scaling the norm writes its output quantized, so a norm-fused GEMM's input costs no
  cast of its own there (the other recipes: below);
* backward, the output gradient: ``grad_output_preprocess`` quantizes it with
  ``set_usage(rowwise=True, columnwise=True)``, the row-wise copy for the data gradient and the
  column-wise one for the weight gradient (``tex.split_quantize`` per expert in
  ``_GroupedLinear.backward``).

Each cast reads the bf16 tensor (2 bytes an element) and writes :math:`n` quantized copies of
:math:`w` bytes an element (:func:`memsym.timing.layer.fp8_element_bytes`: 1, MXFP8
:math:`1 + 1/32`, NVFP4 :math:`1/2 + 1/16`; :func:`cast_copies`).  :math:`n = 2`, a row-wise
and a column-wise copy, in general: MXFP8 and NVFP4 always (their scales run along one
dimension), and per-tensor FP8 (delayed, tensorwise) on a TN-only GPU (Hopper), where the
column-wise copy is the FP8 transpose the weight-gradient GEMM reads (``cast_transpose``,
[te-non-tn]; on the all-gathered input path the forward asks ``columnwise=False`` and the
backward transposes instead, the same bytes within one read, not told apart here).
:math:`n = 1` for per-tensor FP8 where FP8 GEMMs take non-TN layouts
(:attr:`memsym.devices.GPU.non_tn_fp8_gemm`: B200, GB200, B300, GB300): the quantizer
allocates no transpose, the cast writes the row-wise data alone and the weight-gradient GEMM
reads it in place [te-non-tn].  Per layer:

.. math::

    B_{\text{fwd}} = (2 + n w)\sum_{g \notin F} M_g K_g c_g,\qquad
    B_{\text{bwd}} = (2 + n w)\sum_{g \notin U} M_g N_g c_g

over the layer's forward GEMMs :math:`g = [M, K] \times [K, N]`, :math:`c_g` of them (local
experts); :math:`F` the GEMMs whose input is not cast here (:data:`NOT_CAST_FORWARD`),
:math:`U` those that do not run quantized (:data:`UNQUANTIZED`).  A GEMM of shape
:math:`M, N, K` runs :math:`6MNK` FLOPs for :math:`(2 + n w)(MK + MN)` cast bytes: the casts
weigh :math:`\tfrac{1}{6}(1/N + 1/K)(2 + n w)` bytes per FLOP, three to six times more on
Qwen3-30B-A3B's experts (K, N of 768-2048) than on Llama 3's layers (4096-28672).

Under FP8 current scaling (Megatron's ``--fp8-recipe tensorwise``, TE's
``Float8CurrentScalingQuantizer``; :func:`current_scaling`) each cast computes its tensor's
amax first, in a pass of its own over the bf16 input (``nvte_compute_amax_with_config``),
then the scale from it and then the cast [te-current-scaling]: 2 more bytes read an element,
:math:`4 + n w`.  A norm-fused GEMM's input is not written quantized by the norm under
current scaling: the norm kernel writes its bf16 output and the amax beside it, and
``quantize_with_amax`` casts it (no amax pass): :math:`2 + n w` an element that delayed
scaling's fully fused norm does not spend.  Per layer:

.. math::

    B_{\text{fwd}} = (4 + n w)\sum_{g \notin F} M_g K_g c_g
        + (2 + n w)\sum_{g \in N} M_g K_g c_g,\qquad
    B_{\text{bwd}} = (4 + n w)\sum_{g \notin U} M_g N_g c_g

(:math:`N` the norm-fused GEMMs, :data:`NORM_FUSED`).  The norm writes its output quantized
only under delayed scaling (``Float8Quantizer``: ``FULLY_FUSED``) [te-norm-paths]: under MXFP8
it writes bf16 and a quantize kernel of its own casts it (``UNFUSED``, cuDNN's fused MXFP8 norm
only with ``NVTE_NORM_FWD_USE_CUDNN``), :math:`2 + n w` an element, no amax pass (each block's
scale comes from inside the cast); under NVFP4 every cast first runs an amax pass (the
post-Hadamard amax, ``nvte_hadamard_transform_amax``: the recipe applies the random Hadamard
transform to the column-wise copies of inputs and output gradients), the norm-fused inputs
included (``UNFUSED`` under the Hadamard transform), :math:`4 + n w` an element everywhere
(:func:`cast_kernels`).  Under sequence parallelism TE
all-reduces each amax of the column-parallel inputs and the row-parallel output gradients
over the TP group (``amax_reduction_group``): one fp32, 4 bytes, per cast, two a block
(attention, dense MLP), a latency-bound all-reduce the stream waits on, priced as exposed TP
time (:mod:`memsym.timing.layer`).

References
----------
.. [te-quantize] NVIDIA/TransformerEngine v2.8: transformer_engine/pytorch/module/linear.py
   (``_Linear.forward``: ``inputmat = input_quantizer(inputmat)``; ``_Linear.backward``:
   ``quantizer.set_usage(rowwise=True, columnwise=True)`` for the output gradient),
   module/base.py (``grad_output_preprocess``: ``grad_output = quantizer(grad_output)``),
   module/layernorm_linear.py (``with_quantized_norm``: the norm writes the quantized
   input), module/grouped_linear.py (``tex.split_quantize`` of the inputs and of the output
   gradients).
.. [te-non-tn] NVIDIA/TransformerEngine d0067d0da6: pytorch/module/linear.py:428-436 (the input
   quantizer asks ``rowwise=True, columnwise=backward_needs_input``), 905 (the output
   gradient's ``set_usage(rowwise=True, columnwise=True)``; layernorm_linear.py:726,
   grouped_linear.py:1072-1075 the same), 1177 and 1219 (``update_usage(columnwise_usage=True)``
   before the weight-gradient GEMM, ``layout="NT"``, 1261); csrc/quantizer.cpp:363, 375
   (``Float8Quantizer``), 679, 689 (``Float8CurrentScalingQuantizer``), 546-547 and 799-800
   (their grouped and in-place forms): row-wise data ``rowwise_usage ||
   is_non_tn_fp8_gemm_supported``, a transpose only ``columnwise_usage &&
   !is_non_tn_fp8_gemm_supported``; common/cast/dispatch/quantize.cuh:64-83, 247-262
   (per-tensor scaling runs ``cast_transpose`` only when the output holds column-wise data,
   else ``fp8::quantize``, row-wise alone); tensor/storage/float8_tensor_storage.py:292-297
   (``update_usage`` on a non-TN GPU keeps ``_data`` for either usage, never makes a
   transpose); common/gemm/cublaslt_gemm.cu:123-157, 220-247 (a per-tensor FP8 operand is
   read from its row-wise data with the GEMM's own transpose flag where non-TN GEMMs run; the
   column-wise copy only on TN-only GPUs); common/transformer_engine.cpp:1191-1204
   (``nvte_is_non_tn_fp8_gemm_supported``: sm_arch 100-119 or >= 130).
.. [te-current-scaling] NVIDIA/TransformerEngine d0067d0da6: pytorch/csrc/quantizer.cpp:980-1033
   (``Float8CurrentScalingQuantizer::quantize_impl``: ``nvte_compute_amax_with_config`` over the
   input where ``compute_amax``, the amax all-reduce (``ReduceOp::MAX``) where
   ``with_amax_reduction``, ``nvte_compute_scale_from_amax``, then ``nvte_quantize_v2``),
   1035-1040 (``quantize``: ``compute_amax`` true), 1042-1048 (``quantize_with_amax``: false);
   pytorch/csrc/extensions/normalization.cpp:114-118, 154-160, 200-204 (a current-scaling
   quantizer runs the norm as ``FUSED_NORM_AMAX_FP8``: a bf16 output with its amax, then
   ``quantize_with_amax``); pytorch/csrc/extensions/cast.cpp:907-940 (``split_quantize``'s
   per-tensor path: each split's ``quantize``, amax pass included); pytorch/module/linear.py:
   351-355, 818-825 (``set_quantizer_amax_reduction_group``: the TP group under sequence
   parallelism, the column-parallel input and the row-parallel output gradient);
   pytorch/tensor/float8_tensor.py:197-256 (``Float8CurrentScalingQuantizer``,
   ``with_amax_reduction``, ``amax_reduction_group``).
.. [te-norm-paths] NVIDIA/TransformerEngine d0067d0da6: pytorch/csrc/extensions/normalization.cpp:
   95-130 (the forward norm's path by quantizer: ``FULLY_FUSED`` for none or
   ``Float8Quantizer``; ``MXFP8Quantizer`` ``UNFUSED`` unless ``NVTE_NORM_FWD_USE_CUDNN`` and
   128-aligned; ``FUSED_NORM_AMAX_FP8`` for current scaling; ``NVFP4Quantizer`` ``UNFUSED``
   with the Hadamard transform and post-transform amax, else ``FUSED_NORM_AMAX_NVFP4``), 195-208
   (``UNFUSED``: ``quantizer_cpp->quantize`` of the bf16 output); pytorch/csrc/quantizer.cpp:
   2629-2675 (``NVFP4Quantizer::quantize_impl``: ``nvte_hadamard_transform_amax`` or
   ``nvte_compute_amax_with_config`` over the input before the cast); pytorch/quantization.py:
   1730-1736 (every NVFP4 quantizer ``with_rht`` and ``with_post_rht_amax`` =
   ``random_hadamard_transform``); common/recipe/__init__.py:558, 590-600
   (``NVFP4BlockScaling``: the transform on unless ``NVTE_NVFP4_DISABLE_RHT``);
   pytorch/csrc/extensions/cast.cpp:146-200 (grouped NVFP4: ``nvte_group_hadamard_transform_amax``
   before the grouped cast).
.. [megatron-specs] Megatron-LM core_v0.17.0 megatron/core/models/gpt/gpt_layer_specs.py:
   ``linear_qkv`` and the dense ``linear_fc1`` are ``column_parallel_layer_norm_linear``, MLA's
   ``linear_q_up_proj`` / ``linear_kv_up_proj`` too under ``qk_layernorm``;
   ``linear_proj``, ``linear_fc2``, MLA's down projections and the shared experts are plain
   TE linears.
"""

from __future__ import annotations

import numpy as np

from ..hardware import kernel_fraction

__all__ = ["NORM_FUSED", "UNQUANTIZED", "NOT_CAST_FORWARD", "PER_TENSOR_RECIPES", "cast_copies",
           "current_scaling", "amax_pass", "cast_kernels", "cast_bytes", "cast_rate"]

#: GEMMs whose input Transformer Engine's fused norm writes quantized ([megatron-specs]:
#: ``TELayerNormColumnParallelLinear``; MLA's up projections with their q / kv layernorm).
NORM_FUSED = ("qkv", "fc1", "q_up", "kv_up")
#: GEMMs that run in the input dtype, no cast (the router, ``router_gating_linear``,
#: :func:`memsym.timing.moe.gemm_seconds`).
UNQUANTIZED = ("router",)
#: GEMMs whose forward input cast is not counted here: the norm-fused ones, the unquantized
#: ones and the experts' fc1, whose cast :func:`memsym.timing.moe.grouped_quantize_bytes`
#: prices with the MoE layer.
NOT_CAST_FORWARD = NORM_FUSED + UNQUANTIZED + ("expert_fc1",)
#: FP8 recipes with one scale per tensor (``None``: Megatron's default ``--fp8-recipe delayed``),
#: TE's ``Float8Quantizer`` and ``Float8CurrentScalingQuantizer``.
PER_TENSOR_RECIPES = (None, "delayed", "tensorwise")


def cast_copies(precision: str, fp8_recipe=None, non_tn_fp8_gemm: bool = False) -> int:
    r"""Quantized copies one Transformer Engine cast writes, n [1].

    .. math:: n = \begin{cases} 1 & \text{per-tensor FP8 on a non-TN GPU} \\
       2 & \text{otherwise (row-wise and column-wise)} \end{cases}

    Per-tensor FP8 (delayed, tensorwise) where FP8 GEMMs take non-TN layouts writes the
    row-wise data alone, which both GEMMs read; a TN-only GPU (Hopper) also writes its
    transpose, MXFP8 and NVFP4 a column-wise copy with its own scales on any GPU.

    Parameters
    ----------
    precision : {"fp8", "fp4", ...}
        The GEMM precision (``"fp4"``: NVFP4).
    fp8_recipe : {None, "delayed", "tensorwise", "mxfp8"}
        The FP8 recipe (None: Megatron's default, delayed).
    non_tn_fp8_gemm : bool
        Whether the GPU takes non-TN FP8 GEMMs (:attr:`memsym.devices.GPU.non_tn_fp8_gemm`).

    Returns
    -------
    int
        1 or 2 [1].

    Examples
    --------
    >>> [cast_copies("fp8", r, True) for r in (None, "tensorwise", "mxfp8")]
    [1, 1, 2]
    >>> cast_copies("fp8", "tensorwise", False), cast_copies("fp4", None, True)
    (2, 2)

    References
    ----------
    .. [te-cast-copies] transformer-engine d0067d0da6 csrc/quantizer.cpp:363, 375, 679, 689;
       common/cast/dispatch/quantize.cuh:64-83 ([te-non-tn] in this module).
    """
    per_tensor = precision == "fp8" and fp8_recipe in PER_TENSOR_RECIPES
    return 1 if per_tensor and non_tn_fp8_gemm else 2


def current_scaling(precision: str, fp8_recipe=None) -> bool:
    r"""Whether Transformer Engine's casts run current scaling, an amax pass each [1].

    .. math:: [\text{precision} = \text{fp8} \wedge \text{recipe} = \text{tensorwise}]

    Megatron-LM's ``--fp8-recipe tensorwise`` is TE's ``Float8CurrentScaling``: each cast
    computes the amax of the tensor it casts in a pass of its own before the cast (delayed
    scaling takes the scale from the amax history; MXFP8 computes each block's scale inside
    the cast kernel).

    Parameters
    ----------
    precision : str
        The GEMM precision.
    fp8_recipe : {None, "delayed", "tensorwise", "mxfp8"}
        The FP8 recipe (None: Megatron's default, delayed).

    Returns
    -------
    bool
        True under FP8 current scaling [1].

    Examples
    --------
    >>> [current_scaling("fp8", r) for r in (None, "delayed", "tensorwise", "mxfp8")]
    [False, False, True, False]

    References
    ----------
    .. [te-current-scaling] transformer-engine d0067d0da6 pytorch/csrc/quantizer.cpp:1009-1012
       (``nvte_compute_amax_with_config`` before the cast; [te-current-scaling] in this module);
       Megatron-LM d98e8a64dd megatron/core/fp8_utils.py:777-780 (``tensorwise``:
       ``Float8CurrentScaling``).
    """
    return precision == "fp8" and fp8_recipe == "tensorwise"


def amax_pass(precision: str, fp8_recipe=None) -> bool:
    r"""Whether each Transformer Engine cast first reads its input for the amax [1].

    .. math:: [\text{FP8 current scaling}] \vee [\text{NVFP4}]

    Current scaling (:func:`current_scaling`) and NVFP4 (``NVFP4Quantizer``: the tensor's
    amax, after the recipe's Hadamard transform, for its per-tensor FP32 scale) compute the
    amax in a pass of their own; delayed scaling takes it from the history, MXFP8 each block's
    inside the cast.

    Parameters
    ----------
    precision : str
        The GEMM precision (``"fp4"``: NVFP4).
    fp8_recipe : {None, "delayed", "tensorwise", "mxfp8"}
        The FP8 recipe (None: Megatron's default, delayed).

    Returns
    -------
    bool
        True where every cast reads its input once more [1].

    Examples
    --------
    >>> [amax_pass(p, r) for p, r in (("fp8", None), ("fp8", "tensorwise"), ("fp8", "mxfp8"),
    ...                               ("fp4", None))]
    [False, True, False, True]

    References
    ----------
    .. [te-norm-paths] transformer-engine d0067d0da6 pytorch/csrc/quantizer.cpp:1009-1012
       (current scaling), 2629-2675 (NVFP4); [te-norm-paths] in this module.
    """
    return current_scaling(precision, fp8_recipe) or precision == "fp4"


def cast_kernels(precision: str, fp8_recipe=None) -> dict:
    r"""How Transformer Engine casts under a recipe: :func:`cast_bytes`' switches [1].

    .. math:: \text{amax} = \text{amax\_pass},\quad
       \text{norm\_cast} = [\text{not delayed}],\quad
       \text{norm\_amax} = [\text{NVFP4}]

    ``amax``: every cast's own amax pass (:func:`amax_pass`); ``norm_cast``: the norm-fused
    GEMMs' inputs quantized by a kernel of their own from the norm's bf16 output (current
    scaling, MXFP8, NVFP4: the norm writes FP8 itself only under delayed scaling);
    ``norm_amax``: that kernel's amax pass (NVFP4, whose Hadamard-transformed amax the norm
    does not give; current scaling's norm writes the amax beside its output).

    Parameters
    ----------
    precision : str
        The GEMM precision (``"fp4"``: NVFP4; bf16 and fp32 cast nothing).
    fp8_recipe : {None, "delayed", "tensorwise", "mxfp8"}
        The FP8 recipe (None: Megatron's default, delayed).

    Returns
    -------
    dict
        ``amax``, ``norm_cast``, ``norm_amax`` [1].

    Examples
    --------
    >>> [tuple(cast_kernels("fp8", r).values()) for r in (None, "tensorwise", "mxfp8")]
    [(False, False, False), (True, True, False), (False, True, False)]
    >>> tuple(cast_kernels("fp4").values())
    (True, True, True)

    References
    ----------
    .. [te-norm-paths] transformer-engine d0067d0da6 pytorch/csrc/extensions/normalization.cpp:
       95-130; [te-norm-paths] in this module.
    """
    fp4 = precision == "fp4"
    return {"amax": amax_pass(precision, fp8_recipe),
            "norm_cast": fp4 or (precision == "fp8" and fp8_recipe in ("tensorwise", "mxfp8")),
            "norm_amax": fp4}


def cast_rate(precision: str, fp8_recipe) -> float:
    r"""Fraction of the datasheet HBM bandwidth a recipe's casts are priced at [1].

    .. math:: f = \begin{cases} f_{MXFP8} & \text{FP8 under MXFP8 block scaling} \\
       1 & \text{otherwise} \end{cases}

    Transformer Engine's MXFP8 quantize kernel (row-wise and column-wise copies with their
    E8M0 scales) is timed at 65 % of the B200's HBM bandwidth
    (:func:`memsym.hardware.kernel_fraction`); every MXFP8 cast memsym prices (the GEMM inputs
    and output gradients, the norm outputs, the experts' grouped input) runs it.  The
    per-tensor FP8 casts (``cast_transpose``, the unary cast, the amax pass) and NVFP4's are
    other kernels with no published timing found, priced at the datasheet rate.

    Parameters
    ----------
    precision : str
        The GEMM precision (``"fp4"``: NVFP4).
    fp8_recipe : {None, "delayed", "tensorwise", "mxfp8"}
        The FP8 recipe (None: Megatron's default, delayed).

    Returns
    -------
    float
        The fraction [1].

    Examples
    --------
    >>> round(cast_rate("fp8", "mxfp8"), 4)
    0.6511
    >>> cast_rate("fp8", "tensorwise"), cast_rate("fp4", None)
    (1.0, 1.0)

    References
    ----------
    .. [rocm-te-mxfp8-quantize] ROCm/TransformerEngine PR #598 (the B200 timing of NVIDIA
       Transformer Engine's MXFP8 cast: :data:`memsym.hardware.KERNEL_FRACTION`).
    """
    return kernel_fraction("cast") if precision == "fp8" and fp8_recipe == "mxfp8" else 1.0


def cast_bytes(gemms, width, copies=2, amax=False, norm_cast=False, norm_amax=False):
    r"""HBM bytes (forward, backward) of one layer's input and output-gradient casts [bytes].

    .. math:: B_{fwd} = (2 + n w) \sum_q M_q K_q c_q, \quad
       B_{bwd} = (2 + n w) \sum_q M_q N_q c_q

    (each cast reads the bf16 tensor, 2 B, and writes :math:`n` copies of :math:`w` B, a
    row-wise and a column-wise one, or the row-wise one alone under per-tensor FP8 on a non-TN
    GPU, :func:`cast_copies`; the sums over the GEMMs whose input, resp. output gradient, is
    cast, :math:`c_q` of each).

    Parameters
    ----------
    gemms : list of memsym.timing.gemm.Gemm
        The layer's forward GEMMs (:func:`memsym.timing.gemm.layer_gemms`).
    width : float
        Bytes per element of one quantized copy, w [bytes] (1 FP8, 1 + 1/32 MXFP8).
    copies : int
        Quantized copies written per cast, n [1] (:func:`cast_copies`; default 2).
    amax : bool
        Each cast reads its input once more for the amax, 2 more bytes an element
        (:func:`amax_pass`: current scaling, NVFP4).
    norm_cast : bool
        The norm-fused GEMMs' inputs are cast from the norm's bf16 output, :math:`2 + n w`
        (current scaling, MXFP8, NVFP4; :func:`cast_kernels`).
    norm_amax : bool
        With an amax pass of their own, 2 more (NVFP4).

    Returns
    -------
    tuple of numpy.ndarray
        Forward and backward HBM bytes [bytes].

    Examples
    --------
    Hand count, one dense GPT layer (h 4096, f 16384, 4 x 2048 = 8192 tokens, no TP) in FP8:
    the forward casts proj's input [8192, 4096] and fc2's [8192, 16384] (qkv's and fc1's come
    from the fused norms), 4 bytes an element; the backward casts the four output gradients,
    [8192, 12288], [8192, 4096], [8192, 16384], [8192, 4096]:

    >>> from memsym.timing.gemm import Gemm
    >>> g = [Gemm("qkv", 8192, 12288, 4096), Gemm("proj", 8192, 4096, 4096),
    ...      Gemm("fc1", 8192, 16384, 4096), Gemm("fc2", 8192, 4096, 16384)]
    >>> f, b = cast_bytes(g, 1)
    >>> int(f) == 4 * 8192 * (4096 + 16384), int(b) == 4 * 8192 * (12288 + 4096 + 16384 + 4096)
    (True, True)

    MoE: the router is not cast, the experts' fc1 input is cast with the dispatcher
    (:func:`memsym.timing.moe.grouped_quantize_bytes`), fc2's input and both output gradients
    here, over all 16 local experts' 2,048 rows, MXFP8 (w = 1 + 1/32):

    >>> g = [Gemm("router", 4096, 128, 2048), Gemm("expert_fc1", 2048, 1536, 2048, 16),
    ...      Gemm("expert_fc2", 2048, 2048, 768, 16)]
    >>> f, b = cast_bytes(g, 1 + 1 / 32)
    >>> rows = 16 * 2048
    >>> float(f) == (2 + 2 * 33 / 32) * rows * 768, float(b) == 4.0625 * rows * (1536 + 2048)
    (True, True)

    The dense layer in per-tensor FP8 on a B200 (non-TN FP8 GEMMs): one copy, 3 bytes an
    element:

    >>> f, b = cast_bytes([Gemm("proj", 8192, 4096, 4096)], 1, copies=1)
    >>> int(f) == 3 * 8192 * 4096, int(b) == 3 * 8192 * 4096
    (True, True)

    Current scaling on the dense layer (Hopper, two copies): proj's and fc2's inputs and the
    output gradients 2 + 2 + 2 = 6 bytes an element, qkv's and fc1's norm outputs cast at 4:

    >>> g = [Gemm("qkv", 8192, 12288, 4096), Gemm("proj", 8192, 4096, 4096),
    ...      Gemm("fc1", 8192, 16384, 4096), Gemm("fc2", 8192, 4096, 16384)]
    >>> f, b = cast_bytes(g, 1, **cast_kernels("fp8", "tensorwise"))
    >>> int(f) == 6 * 8192 * (4096 + 16384) + 4 * 8192 * (4096 + 4096)
    True
    >>> int(b) == 6 * 8192 * (12288 + 4096 + 16384 + 4096)
    True

    MXFP8: no amax pass, the norm outputs cast too, all at 2 + 2 (1 + 1/32) bytes an element:

    >>> f, b = cast_bytes(g, 1 + 1 / 32, **cast_kernels("fp8", "mxfp8"))
    >>> float(f) == (2 + 2 * 33 / 32) * 8192 * (4096 + 16384 + 4096 + 4096)
    True

    References
    ----------
    .. [transformer-engine] csrc/extensions/cast.cu (rowwise data and data_transpose);
       common/cast/dispatch/quantize.cuh:64-83 at d0067d0da6 ([te-non-tn] in this module).
    """
    per = 2.0 + copies * float(width)
    fwd = sum((np.asarray(q.M, float) * q.K * q.count for q in gemms
               if q.name not in NOT_CAST_FORWARD), np.zeros(()))
    bwd = sum((np.asarray(q.M, float) * q.N * q.count for q in gemms
               if q.name not in UNQUANTIZED), np.zeros(()))
    own = per + (2 if amax else 0)          # an amax pass reads each cast tensor once more
    if not norm_cast:
        return own * fwd, own * bwd
    # the norm writes bf16 and a kernel of its own casts it (under current scaling with the
    # norm's amax; under NVFP4 after an amax pass of its own)
    normed = sum((np.asarray(q.M, float) * q.K * q.count for q in gemms
                  if q.name in NORM_FUSED), np.zeros(()))
    return own * fwd + (per + (2 if norm_amax else 0)) * normed, own * bwd
