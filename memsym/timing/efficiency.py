r"""GEMM time from a documented roofline with tile and wave quantisation, per GPU class.

A GEMM :math:`[M, K] \times [K, N]` costs the larger of its math time at the class's
large-GEMM ceiling and its HBM time, after tile quantisation (the output is computed in
whole tiles) and wave quantisation (tiles run in waves of one tile per SM), plus a fixed
launch overhead.  This is the model of NVIDIA's *Matrix Multiplication Background User's
Guide* (tile and wave quantisation, arithmetic intensity vs the ops:byte ratio).

The ceiling (fraction of the dense datasheet peak a large, well-shaped GEMM sustains under
training's power and clock limits) is the one calibrated constant per class and precision;
:data:`GEMM_CEILING` says which published run fixed each (``docs/time-accuracy.md``).

References
----------
.. [nvidia-gemm-guide] NVIDIA Deep Learning Performance docs, "Matrix Multiplication
   Background User's Guide" (tile quantisation, wave quantisation, math vs memory bound).
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidValueError, choose
from ..hardware import GPU, gpu as _gpu

__all__ = ["GEMM_CEILING", "SHARED_CEILING", "GEMM_PRECISIONS", "GEMM_INPUT_BYTES", "TILES",
           "LAUNCH_OVERHEAD", "EXP_RATE", "gemm_time", "gemm_efficiency", "gemm_precision",
           "peak_precision", "ceiling", "ceiling_key", "exp_time", "as_array", "ArrayMemo"]

#: Large-GEMM ceiling as a fraction of the dense datasheet peak, per class and precision.
#: Each was fixed on ONE published run (the calibration points of docs/time-accuracy.md):
#: ampere/bf16 on Korthikanti Table 5, 175B with selective recompute (13.75 s);
#: hopper/bf16 on Llama 3 Table 4 row 1 (8,192 GPUs, 430 TFLOP/s);
#: hopper/fp8 on seed 001's baseline (TP4 PP4 VPP5, core_attn recompute, 709.93 TFLOP/s);
#: blackwell/bf16 (B200, B300, GB200, GB300) on Megatron-Bridge's 25.11 DGX-GB200 DeepSeek-V3
#: BF16 row (256 GPUs, PP4 VP4 EP64, 3139 tokens/s/GPU); blackwell/fp8 on its 25.11 DGX-B200
#: Llama 3 8B FP8-CS row (8 GPUs, MBS 2, 30624 tokens/s/GPU) (formulas/measured_time.toml).
#: Both Blackwell values re-derived by tools/time_accuracy.calibrate when memsym.timing.moe
#: priced the MoE layer as Megatron-core runs it (the bf16 run is MoE: 0.506 -> 0.510; the fp8
#: run's bf16 output layer follows it: 0.501 -> 0.499), and again when memsym.timing.recompute
#: priced the bf16 run's --recompute-modules (mla_up_proj, moe_act; issue 31): 0.510 -> 0.523,
#: the fp8 run's bf16 output layer following: 0.499 -> 0.492; and again when
#: memsym.timing.flex_dispatch priced the bf16 run's flex dispatcher (HybridEP: a token sent
#: once per EP rank its experts sit on, which the recipe inherits from its base's
#: apply_flex_dispatcher_backend): 0.523 -> 0.520, the ceilings whose runs' bf16 output
#: layer follows it 0.492 -> 0.493 (blackwell/fp8), 0.593 -> 0.595 (blackwell-ultra/fp8),
#: 0.422 -> 0.424 (blackwell-ultra/fp4).  Every fp8 / fp4 ceiling re-derived again when
#: memsym.timing.quantize priced Transformer Engine's casts of each quantized GEMM's input and
#: output gradient (issue 31): hopper/fp8 0.548 -> 0.570, blackwell/fp8 0.493 -> 0.519,
#: blackwell-ultra/fp8 0.595 -> 0.638, blackwell-ultra/fp4 0.424 -> 0.450.  And again when
#: tools/time_accuracy priced the bf16 run's recipe layout (DeepSeek-V3's PP4 VP4 layout: the
#: embedding beside four decoder layers, the loss beside one and the MTP layer, where the even
#: split had put 3.8 layers beside the output layer): blackwell/bf16 0.520 -> 0.507, the
#: ceilings whose runs' bf16 output layer follows it 0.519 -> 0.527 (blackwell/fp8), 0.638 ->
#: 0.650 (blackwell-ultra/fp8), 0.450 -> 0.461 (blackwell-ultra/fp4).  The row trained
#: without MTP ("w/o MTP"): its layout's MTP layer dropped as the builder drops it at
#: mtp_num_layers = 0 (the loss beside one decoder layer only), blackwell/bf16 stays 0.507
#: (calibrate gives 0.5072).  And again when memsym.timing.moe_copies priced the dispatcher's
#: row copies as gathers at the fraction of HBM bandwidth a published permute kernel reaches
#: (memsym.hardware.kernel_fraction, 0.4998) and the flex dispatcher's as it runs them (each
#: landed token permuted into its experts' rows on arrival, no chunk sort): blackwell/bf16
#: 0.507 -> 0.510, the ceilings whose runs' bf16 output layer follows it 0.527 -> 0.525
#: (blackwell/fp8), 0.650 -> 0.647 (blackwell-ultra/fp8), 0.461 -> 0.458 (blackwell-ultra/fp4).
#: And again when memsym.timing.quantize priced per-tensor FP8's casts on GPUs with non-TN FP8
#: GEMMs as Transformer Engine d0067d0da6 runs them (one row-wise copy, no transpose: 2 + w
#: bytes an element, not 2 + 2w; both calibration runs are FP8-CS): blackwell/fp8
#: 0.525 -> 0.518, blackwell-ultra/fp8 0.647 -> 0.636.  And again when memsym.timing.quantize
#: priced FP8 current scaling's amax pass (Transformer Engine d0067d0da6
#: Float8CurrentScalingQuantizer: the input read once more per cast, and the norm-fused inputs
#: cast from the norm's bf16 output) and the FP8-CS runs were priced as fp8_recipe tensorwise
#: (both calibration runs are FP8-CS): blackwell/fp8 0.518 -> 0.535, blackwell-ultra/fp8
#: 0.636 -> 0.664 (hopper/fp8's seed 001 run names no recipe, delayed: 0.570 stays).
#: blackwell-ultra (B300, GB300: Blackwell Ultra, its own class since GB300's FP8 rows were
#: seen priced 11-27 % too slow at Blackwell's values, memsym.hardware says why) has its fp8
#: ceiling fixed on Megatron-Bridge's 25.11 DGX-GB300 Llama 3 8B FP8-CS row (8 GPUs, MBS 2,
#: 37556 tokens/s/GPU; the analogue of the B200 run) and shares blackwell's bf16 value
#: (SHARED_CEILING): no Blackwell Ultra BF16 row meets the rule the blackwell/bf16 run was
#: chosen by.
#: blackwell-ultra/fp4 (NVFP4 GEMMs at the datasheet FP4 peak, GB200 and GB300 only: the GPUs
#: whose FP4 peak memsym lists) on Megatron-Bridge's 26.04.01 DGX-GB300 Llama 3 70B NVFP4 row
#: (64 GPUs, PP4 VP5, 7296 tokens/s/GPU), 0.458 (0.484 with NVFP4's amax passes); GB200 (blackwell) shares it (SHARED_CEILING).
#: blackwell/mxfp8 and blackwell-ultra/mxfp8 (FP8 GEMMs with an E8M0 scale per 32 elements,
#: Transformer Engine's MXFP8BlockScaling, at the datasheet FP8 peak: the block-scaled
#: tcgen05 MMA) on the MXFP8 value of the same two rows as the fp8 ceilings, the
#: parenthesised FP8-MX throughput of Megatron-Bridge's 25.11 DGX-B200 and DGX-GB300
#: Llama 3 8B FP8-CS (FP8-MX) rows (29521 and 36108 tokens/s/GPU; the recipes
#: llama3_8b_pretrain_8gpu_{b200,gb300}_fp8mx_config): what the block scaling costs beyond
#: the casts and scale bytes memsym prices is this ceiling's gap to the fp8 one (0.493 and
#: 0.600 when fixed; 0.496 and 0.606 once memsym.timing.quantize.cast_kernels priced MXFP8's
#: norm outputs cast by a kernel of their own, as Transformer Engine runs them; that change
#: also priced NVFP4's amax pass on every cast: blackwell-ultra/fp4 0.458 -> 0.484; 0.512 and
#: 0.632 once memsym.timing.quantize.cast_rate priced the MXFP8 casts at the fraction of HBM
#: bandwidth Transformer Engine's cast kernel is measured at, memsym.hardware.kernel_fraction,
#: 0.6511, not the datasheet rate; the fp8, fp4 and bf16 ceilings stay).  Hopper
#: has no MXFP8 (Transformer Engine's _compute_mxfp8_support: compute capability 10.0+).
#: The other classes (ada, cdna3) carry the Hopper value (an assumption, not a calibration;
#: say so when quoting them).  fp16 = bf16; fp32 runs as TF32 at the class's bf16 value.
GEMM_CEILING = {
    ("ampere", "bf16"): 0.811, ("ampere", "fp32"): 0.811,
    ("hopper", "bf16"): 0.587, ("hopper", "fp32"): 0.587, ("hopper", "fp8"): 0.570,
    ("ada", "bf16"): 0.587, ("ada", "fp32"): 0.587, ("ada", "fp8"): 0.570,
    ("blackwell", "bf16"): 0.510, ("blackwell", "fp32"): 0.510, ("blackwell", "fp8"): 0.535,
    ("blackwell", "mxfp8"): 0.512,
    ("blackwell-ultra", "fp8"): 0.664, ("blackwell-ultra", "mxfp8"): 0.632,
    ("blackwell-ultra", "fp4"): 0.484,
    ("cdna3", "bf16"): 0.587, ("cdna3", "fp32"): 0.587, ("cdna3", "fp8"): 0.570,
}
#: The GEMM precisions: the datasheet's tensor-core rates (memsym.devices.PRECISIONS) and
#: mxfp8, FP8 under MXFP8 block scaling (the FP8 rate, its own ceiling).
GEMM_PRECISIONS = ("bf16", "fp16", "fp8", "mxfp8", "fp32", "fp4")
#: Bytes per input element a GEMM streams, by precision (2 where not listed).
GEMM_INPUT_BYTES = {"fp8": 1, "mxfp8": 1, "fp4": 0.5, "fp32": 4}
#: Keys priced at another key's ceiling (a stated sharing, not a calibration): the key's own
#: entry in GEMM_CEILING, where one is set, comes first.
SHARED_CEILING = {("blackwell-ultra", "bf16"): ("blackwell", "bf16"),
                  ("blackwell-ultra", "fp32"): ("blackwell", "fp32"),
                  ("blackwell", "fp4"): ("blackwell-ultra", "fp4")}
#: Softmax exponentials per second per GPU (``MUFU.EX2`` on the special function units), per
#: class, where NVIDIA prints the rate: Blackwell 5, Blackwell Ultra 10.7 TeraExponentials/s
#: (twice the SFU throughput: "Inside NVIDIA Blackwell Ultra" and "Making Softmax More
#: Efficient with NVIDIA Blackwell Ultra", NVIDIA technical blog 2025).  A hardware rate, not
#: fitted; classes without a printed rate have no exponential bound.
EXP_RATE = {"blackwell": 5e12, "blackwell-ultra": 10.7e12}
#: Output tiles a cuBLAS/CUTLASS kernel can use, with its relative mainloop efficiency
#: (smaller tiles reuse operands less).  The best one for the shape is taken, as cuBLAS's
#: heuristics do.  REF: nvidia-gemm-guide (tile sizes 256x128 ... 64x64); the relative
#: efficiencies are memsym's assumption.
TILES = ((256, 128, 1.0), (128, 256, 1.0), (128, 128, 0.95), (64, 128, 0.85), (64, 64, 0.7))
#: Fixed cost of one kernel launch + prologue/epilogue [s] (assumption: a few microseconds).
LAUNCH_OVERHEAD = 4e-6
#: K below ~this many elements leaves the mainloop pipeline partly empty: factor K/(K + K0).
K0 = 64



def as_array(x):
    r"""``x`` as a float numpy array (the layout knobs broadcast together).

    .. math:: x \mapsto (x_1, \dots, x_n) \in \mathbb{R}^n

    Parameters
    ----------
    x : array_like
        A parallel size or a grid of them [GPUs].

    Examples
    --------
    >>> as_array([1, 2]).dtype
    dtype('float64')

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §3 (the parallel sizes t, p, d a grid spans).
    """
    return np.asarray(x, dtype=float)

def _dev(device) -> GPU:
    dev = _gpu(device)
    if dev.arch_class is None or dev.sm_count is None or dev.hbm_bandwidth is None:
        raise InvalidValueError(f"GPU {dev.name} has no timing data (arch_class, sm_count, "
                                "hbm_bandwidth); give them in its GPU record")
    return dev


def ceiling(device, precision: str = "bf16") -> float:
    r"""The large-GEMM ceiling of ``device`` at ``precision`` [1].

    .. math:: \eta_{\max} = \text{GEMM\_CEILING}[\text{class}, \text{precision}]

    Parameters
    ----------
    device : str or GPU
        The GPU (a :mod:`memsym.hardware` name or record).
    precision : str
        The GEMM's input precision (fp16 shares bf16's ceiling).

    Examples
    --------
    >>> ceiling("a100-80gb") == GEMM_CEILING[("ampere", "bf16")]
    True

    References
    ----------
    .. [nvidia-gemm-guide] "Matrix Multiplication Background User's Guide" (large GEMMs
       reach a fraction of the dense peak).
    """
    dev = _dev(device)
    key = ceiling_key(dev.arch_class, precision)
    if key not in GEMM_CEILING:
        raise InvalidValueError(f"no GEMM ceiling for {dev.name} at {precision} "
                                f"(classes and precisions: {sorted(GEMM_CEILING)})")
    return GEMM_CEILING[key]


def ceiling_key(klass: str, precision: str) -> tuple:
    r"""The :data:`GEMM_CEILING` key that prices ``klass`` at ``precision``.

    Its own key, or the one :data:`SHARED_CEILING` names where it has none; fp16 is priced
    as bf16 (the same tensor-core rate):

    .. math:: k = (\text{class}, \text{precision}) \text{ if measured, else }
       \text{SHARED\_CEILING}[k]

    Parameters
    ----------
    klass : str
        The GPU's ``arch_class``.
    precision : str
        The GEMM's input precision.

    Examples
    --------
    Blackwell Ultra's bf16 is priced at Blackwell's ceiling (:data:`SHARED_CEILING`), its
    fp8 at its own entry:

    >>> ceiling_key("blackwell-ultra", "fp16"), ceiling_key("blackwell-ultra", "fp8")
    (('blackwell', 'bf16'), ('blackwell-ultra', 'fp8'))

    References
    ----------
    .. [nvidia-blackwell-ultra] HGX B300 platform page (the class's dense rates).
    """
    key = (klass, "bf16" if precision == "fp16" else precision)
    return key if key in GEMM_CEILING else SHARED_CEILING.get(key, key)


def gemm_precision(precision: str, fp8_recipe=None) -> str:
    r"""The GEMM precision of a run at ``precision`` under ``fp8_recipe`` [1].

    .. math:: \text{gemm precision} = \begin{cases} \text{mxfp8} & \text{fp8 under MXFP8
       block scaling} \\ \text{precision} & \text{otherwise} \end{cases}

    MXFP8's GEMMs run at the FP8 tensor-core rate (:func:`peak_precision`) with a ceiling of
    their own (:data:`GEMM_CEILING`); delayed, tensorwise (current) and the recipes memsym
    counts as tensorwise share the fp8 one.

    Parameters
    ----------
    precision : {"bf16", "fp16", "fp8", "fp32", "fp4"}
        The run's precision.
    fp8_recipe : {None, "delayed", "tensorwise", "mxfp8", "nvfp4"}
        Megatron's ``--fp8-recipe`` under fp8.

    Examples
    --------
    >>> gemm_precision("fp8", "mxfp8"), gemm_precision("fp8", "tensorwise")
    ('mxfp8', 'fp8')
    >>> gemm_precision("bf16", "mxfp8")       # the recipe applies only under fp8
    'bf16'

    References
    ----------
    .. [transformer-engine] Transformer Engine d0067d0da6, ``common/recipe/__init__.py``
       (``MXFP8BlockScaling``: E8M0 scales per 32 elements).
    """
    return "mxfp8" if precision == "fp8" and fp8_recipe == "mxfp8" else precision


def peak_precision(precision: str) -> str:
    r"""The datasheet rate a GEMM precision runs at: FP8's for mxfp8, else its own [1].

    .. math:: F(\text{mxfp8}) = F(\text{fp8})

    Parameters
    ----------
    precision : {"bf16", "fp16", "fp8", "mxfp8", "fp32", "fp4"}
        The GEMM precision.

    Examples
    --------
    >>> peak_precision("mxfp8"), peak_precision("bf16")
    ('fp8', 'bf16')

    References
    ----------
    .. [nvidia-datasheets] HGX and DGX B200 datasheets (one dense FP8/FP6 rate; MXFP8's
       block scaling runs in the tensor core).
    """
    return "fp8" if precision == "mxfp8" else precision


def _quantisation(M, N, sms):
    """Best over TILES of (useful outputs / outputs computed in whole waves) x tile efficiency."""
    # each tile edge's count once (TILES repeat them), and the computed outputs as one
    # product: waves, SMs and tile sizes are whole numbers far below 2**53, so the product
    # is exact in any order (the same numbers to the last bit as tile by tile)
    rows = {tm: np.ceil(M / tm) for tm in {tm for tm, _, _ in TILES}}
    cols = {tn: np.ceil(N / tn) for tn in {tn for _, tn, _ in TILES}}
    useful = M * N
    best = np.zeros(np.broadcast(M, N).shape)
    for tm, tn, rel in TILES:
        waves = np.ceil(rows[tm] * cols[tn] / sms)
        best = np.maximum(best, (useful if rel == 1 else rel * useful) / (waves * (sms * tm * tn)))
    return best


def gemm_efficiency(M, N, K, device, precision: str = "bf16", *, eta_gemm=None):
    r"""Achieved fraction of the dense peak for GEMMs of shape ``[M, K] x [K, N]`` [1].

    .. math::

        \eta(M, N, K) = \frac{2MNK}{F_{\text{peak}}\; t_{\text{GEMM}}(M, N, K)}

    Vectorised: ``M``, ``N``, ``K`` broadcast as numpy arrays.

    Parameters
    ----------
    M, N, K : array_like
        GEMM dimensions [elements] (``N`` here is a GEMM dimension, not a parameter count).
    device : str or GPU
        The GPU (a :mod:`memsym.hardware` name or record).
    precision : {"bf16", "fp16", "fp8", "mxfp8", "fp32", "fp4"}
        The GEMM's input precision (sets the peak and the ceiling).
    eta_gemm : float, optional
        Override: a fixed achieved GEMM efficiency in (0, 1] [1] (the symbol ``eta_gemm``);
        the curve is then not used.

    Returns
    -------
    numpy.ndarray
        Achieved fraction of the dense peak [1].

    Examples
    --------
    Big square GEMMs approach the ceiling; skinny ones fall far below it:

    >>> big = float(gemm_efficiency(8192, 8192, 8192, "h100"))
    >>> small = float(gemm_efficiency(512, 1024, 1024, "h100"))
    >>> big > 0.55 > 0.3 > small
    True

    References
    ----------
    .. [nvidia-gemm-guide] "Matrix Multiplication Background User's Guide" (tile and wave
       quantisation).
    """
    dev = _dev(device)
    t = gemm_time(M, N, K, dev, precision, eta_gemm=eta_gemm)
    return 2.0 * np.asarray(M, float) * N * K / (dev.peak(peak_precision(precision)) * t)


class ArrayMemo:
    """Results of a pure function of numpy arrays, kept by the arrays' shape, type and bytes.

    A search prices every (recompute, sequence-parallel, sharding) group of its layouts
    apart (:mod:`memsym.search.evaluate`), and the groups share most GEMM shapes: each
    distinct call is computed once and its result handed out again (a copy: the caller may
    change it), the same numbers to the last bit.  ``key`` gives None (not kept) for an
    array above ``largest`` elements or an argument that cannot be hashed; beyond ``limit``
    entries or ``budget`` bytes the memo starts afresh.

    Parameters
    ----------
    limit : int
        The most results kept [1].
    largest : int
        The most elements of an array whose call is kept [1].
    budget : int
        The most bytes of inputs and results kept [bytes].

    Examples
    --------
    >>> memo = ArrayMemo()
    >>> key = memo.key(("h100",), (np.array([1.0, 2.0]),))
    >>> memo.get(key) is None
    True
    >>> memo.put(key, np.array([3.0])).tolist(), memo.get(key).tolist()
    ([3.0], [3.0])
    """

    def __init__(self, limit: int = 4096, largest: int = 1 << 16, budget: int = 1 << 26):
        self.limit, self.largest, self.budget, self.seen, self.held = limit, largest, budget, {}, 0

    def key(self, args: tuple, arrays: tuple):
        """The key of a call with hashable ``args`` and numpy ``arrays`` (None: not kept)."""
        parts = [args]
        for a in arrays:
            if a.size > self.largest or a.dtype == object:
                return None
            parts.append((a.shape, a.dtype.str, a.tobytes()))
        key = tuple(parts)
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def get(self, key):
        """The result kept under ``key`` (a copy), or None."""
        got = None if key is None else self.seen.get(key)
        return got.copy() if isinstance(got, np.ndarray) else got

    def put(self, key, value):
        """Keep ``value`` (a copy) under ``key`` and return ``value``."""
        if key is not None:
            size = sum(len(part[2]) for part in key[1:]) + np.asarray(value).nbytes
            if len(self.seen) >= self.limit or self.held + size > self.budget:
                self.seen.clear()
                self.held = 0
            self.seen[key] = value.copy() if isinstance(value, np.ndarray) else value
            self.held += size
        return value


#: :func:`gemm_time`'s results already computed (:class:`ArrayMemo`).
_GEMM_SEEN = ArrayMemo()


def _constants(dev, precision: str, eta_gemm) -> tuple | None:
    # the module constants a GEMM's time reads (the ceiling: a calibration re-derives it);
    # None where the GPU has no ceiling (the call then refuses it, in its own order)
    try:
        ceil = None if eta_gemm is not None else ceiling(dev, precision)
    except InvalidValueError:
        return None
    return ceil, TILES, K0, LAUNCH_OVERHEAD, GEMM_INPUT_BYTES.get(precision, 2)


def gemm_time(M, N, K, device, precision: str = "bf16", *, eta_gemm=None, count=1):
    r"""Seconds for ``count`` GEMMs ``[M, K] x [K, N]`` on one GPU [s].

    .. math::

        t = \max\!\Bigl(\frac{2MNK}{\eta_{\max} F\, q(M,N)\, K/(K+K_0)},\;
            \frac{b\,(MK + KN + MN)}{B_{\text{HBM}}}\Bigr) + t_{\text{launch}}

    with :math:`q` the best tile/wave quantisation factor over :data:`TILES`, :math:`b` the
    bytes per element (1 for fp8, 4 for fp32, else 2).  ``eta_gemm`` replaces the whole
    math-side efficiency :math:`\eta_{\max} q K/(K+K_0)` by one number.

    Parameters
    ----------
    M, N, K : array_like
        GEMM dimensions [elements] (``N`` here is a GEMM dimension, not a parameter count).
    device : str or GPU
        The GPU (a :mod:`memsym.hardware` name or record).
    precision : {"bf16", "fp16", "fp8", "mxfp8", "fp32", "fp4"}
        The GEMM's input precision (sets the peak, the ceiling and the bytes per element;
        :func:`gemm_precision` names a run's).
    eta_gemm : float, optional
        Override: a fixed achieved math-side GEMM efficiency in (0, 1] [1].
    count : int or array_like
        How many such GEMMs [GEMMs].

    Returns
    -------
    numpy.ndarray
        Time [s].

    Examples
    --------
    A 4096-cube bf16 GEMM on an A100 (0.137 TFLOP) at the ceiling and full quantisation:

    >>> t = float(gemm_time(4096, 4096, 4096, "a100-80gb"))
    >>> round(2 * 4096**3 / t / 312e12, 2) <= 0.800
    True

    References
    ----------
    .. [nvidia-gemm-guide] "Matrix Multiplication Background User's Guide" (math vs memory
       bound, tile and wave quantisation).
    """
    dev = _dev(device)
    precision = choose("precision", precision, GEMM_PRECISIONS)
    M, N, K = (np.asarray(x, dtype=float) for x in (M, N, K))
    # a search prices the same GEMMs in each of its step-time groups: the result of these
    # very inputs (and of every constant it reads, the ceiling included) is computed once
    consts = _constants(dev, precision, eta_gemm)
    key = None if consts is None else _GEMM_SEEN.key((dev, precision, eta_gemm, consts),
                                                     (M, N, K, np.asarray(count)))
    got = _GEMM_SEEN.get(key)
    if got is not None:
        return got
    if not (np.all(np.isfinite(M)) and np.all(np.isfinite(N)) and np.all(np.isfinite(K))) \
            or np.any(M <= 0) or np.any(N <= 0) or np.any(K <= 0):
        raise InvalidValueError("GEMM dimensions must be finite and > 0")
    flops = 2.0 * M * N * K
    if eta_gemm is not None:
        eff = float(eta_gemm)
        if not 0 < eff <= 1:
            raise InvalidValueError(f"eta_gemm must be in (0, 1], got {eta_gemm}")
    else:
        eff = ceiling(dev, precision) * _quantisation(M, N, dev.sm_count) * K / (K + K0)
    width = GEMM_INPUT_BYTES.get(precision, 2)
    t_math = flops / (dev.peak(peak_precision(precision)) * eff)
    t_mem = width * (M * K + K * N + M * N) / dev.hbm_bandwidth
    return _GEMM_SEEN.put(key, count * (np.maximum(t_math, t_mem) + LAUNCH_OVERHEAD))


def memory_time(nbytes, device):
    r"""Seconds to stream ``nbytes`` through HBM (memory-bound operations) [s].

    .. math:: t = \frac{B}{B_{HBM}}

    Parameters
    ----------
    nbytes : array_like
        Bytes read and written [bytes].
    device : str or GPU
        The GPU; its ``hbm_bandwidth`` [bytes/s].

    Examples
    --------
    3.35 TB at the H100 SXM's 3.35 TB/s (its datasheet) is one second:

    >>> round(float(memory_time(3.35e12, "h100")), 3)
    1.0

    References
    ----------
    .. [nvidia-datasheets] H100 SXM datasheet (3.35 TB/s HBM3).
    """
    return np.asarray(nbytes, float) / _dev(device).hbm_bandwidth


def exp_time(count, device):
    r"""Seconds for ``count`` softmax exponentials at the class's SFU rate [s] (0 without one).

    .. math::

        t_{\exp} = \frac{n_{\exp}}{R_{\exp}}

    A flash-attention kernel computes one exponential per attention score it keeps, in the
    forward and again in the backward (which recomputes the probabilities), on the special
    function units beside the tensor cores; :func:`memsym.timing.layer.layer_time` takes the
    larger of this and the attention's matrix time (the kernels overlap the softmax of one
    tile with the matrix products of another: FlashAttention-3 and -4, cuDNN).

    Parameters
    ----------
    count : array_like
        Exponentials [1].
    device : str or GPU
        The GPU; its ``arch_class`` keys :data:`EXP_RATE`.

    Returns
    -------
    numpy.ndarray
        Time [s].

    Examples
    --------
    >>> float(exp_time(10.7e12, "gb300")), float(exp_time(5e12, "gb200")), float(exp_time(1e12, "h100"))
    (1.0, 1.0, 0.0)

    References
    ----------
    .. [nvidia-blackwell-ultra] NVIDIA technical blog (2025), "Inside NVIDIA Blackwell Ultra: The Chip Powering the AI
    Factory Era" (attention-layer acceleration) and "Making Softmax More Efficient with NVIDIA
    Blackwell Ultra" (MUFU.EX2 throughput doubled over Blackwell).
    """
    rate = EXP_RATE.get(_dev(device).arch_class)
    return np.asarray(count, float) * (0.0 if rate is None else 1.0 / rate)
