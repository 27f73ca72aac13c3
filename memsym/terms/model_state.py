"""Model-state memory per GPU: weights, gradients and optimizer states under every sharding.

Byte widths are symbols (``b_hp``, ``b_g``, ``b_m``, ``b_o``), so precisions and optimizers
are substitutions (:func:`byte_widths`), and the parameters held by one model-parallel
shard default to the seed-000 approximation ``N/(p t)``.

References
----------
.. [zero] Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
   Models", arXiv:1910.02054, §3.1 and §5.
.. [seed000] shared/seeds/000: NeMo distributed optimizer, ``N/(p t)·(b_hp + 16/d)``.
.. [megatron-lm] Megatron-LM ``megatron/training/theoretical_memory_usage.py`` and
   ``docs/user-guide/features/dist_optimizer.md``: 18, or 6 + 12/d, bytes per parameter.
.. [zero-offload] Ren et al., "ZeRO-Offload", arXiv:2101.06840, §4.
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError, choose
from ..symbols import N, b_g, b_hp, b_m, b_o, d, p, t
from ..term import Source, Term, Total
from ..values import as_expr

__all__ = [
    "SCHEMES",
    "CONVENTIONS",
    "PRECISIONS",
    "OPTIMIZERS",
    "OFFLOADS",
    "model_state",
    "byte_widths",
    "normalize_scheme",
]

#: Sharding schemes; ``fsdp`` is PyTorch FSDP/FSDP2 full shard, identical to ZeRO-3.
SCHEMES = ("ddp", "zero1", "zero2", "zero3", "fsdp", "distributed-optimizer")
#: How the distributed optimizer's fp32 gradient buffer is counted (seed 000 vs Megatron-LM).
CONVENTIONS = ("memsym", "megatron-lm")
#: Offload of model states to host memory (ZeRO-Offload / ZeRO-Infinity).
OFFLOADS = ("none", "optimizer", "optimizer+params")

#: Weight precision -> (bytes per weight used in forward/backward, fp32 master copy bytes).
#: fp32 training needs no separate master copy.  fp8 means fp8 primary weights.
PRECISIONS = {
    "fp32": (4, 0),
    "bf16": (2, 4),
    "fp16": (2, 4),
    "fp8": (1, 4),
}

#: Optimizer -> bytes per parameter of its moments (beyond the master copy).
#: REF: zero §3.1 (Adam: momentum + variance, fp32); seed 002 (SGD with momentum: 12 B/param
#: in total); Dettmers et al. 2022 arXiv:2110.02861 (8-bit Adam: two 1-byte states; its
#: block-wise fp32 scales, 8 bytes per 2048 parameters, are neglected); Shazeer & Stern 2018
#: arXiv:1804.04235 (Adafactor without momentum: the factored second moment is O(rows+cols)
#: per matrix, about 8/h bytes per parameter of an h x h matrix, counted as 0 here).
OPTIMIZERS = {
    "adam": 8,
    "adamw": 8,
    "sgd": 4,
    "adam8bit": 2,
    "adafactor": 0,
    "none": 0,
}

_ZERO = Source("zero", "§5, Figure 1")
_SEED = Source("seed000", "summary formula (まとめ)")
_MEGATRON = Source("megatron-lm", "theoretical_memory_usage.py, compute_weight_and_optimizer_memory")
_OFFLOAD = Source("zero-offload", "§4")


def normalize_scheme(scheme: str) -> str:
    """The canonical scheme name (``fsdp`` stays, it is a documented alias of ZeRO-3)."""
    return choose("sharding", scheme, SCHEMES)


def byte_widths(scheme: str = "distributed-optimizer", precision: str = "bf16",
                optimizer: str = "adam", convention: str = "memsym") -> dict:
    """Bytes per parameter of weights, gradients, master copy and optimizer moments.

    Defaults follow each scheme's source: ZeRO keeps gradients in the training precision
    (fp16 gradients, ZeRO §3.1), the distributed optimizer keeps fp32 "main" gradients
    (seed 000, Megatron-Core), and Megatron-LM's estimator always counts fp32 gradients.

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

    Returns
    -------
    dict
        ``{b_hp, b_g, b_m, b_o}`` as exact integers [bytes/parameter].

    Examples
    --------
    >>> sorted((str(k), v) for k, v in byte_widths("zero1").items())
    [('b_g', 2), ('b_hp', 2), ('b_m', 4), ('b_o', 8)]
    >>> byte_widths("ddp", convention="megatron-lm")[b_g]
    4
    """
    scheme = normalize_scheme(scheme)
    precision = choose("precision", precision, PRECISIONS)
    optimizer = choose("optimizer", optimizer, OPTIMIZERS)
    convention = choose("convention", convention, CONVENTIONS)
    weight, master = PRECISIONS[precision]
    fp32_grads = scheme == "distributed-optimizer" or convention == "megatron-lm"
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


def model_state(scheme: str = "distributed-optimizer", *, convention: str = "memsym",
                offload: str = "none", params=None, dp=None) -> Total:
    r"""Per-GPU memory of weights, gradients and optimizer states [bytes].

    With :math:`\Psi` the parameters of one model-parallel shard (default
    :math:`N/(p\,t)`) and :math:`d` the data-parallel size:

    .. math::

        \begin{aligned}
        \text{ddp}:\;& \Psi\,(b_{hp} + b_g + b_m + b_o) \\
        \text{zero1}:\;& \Psi\,(b_{hp} + b_g) + \Psi\,(b_m + b_o)/d \\
        \text{zero2}:\;& \Psi\,b_{hp} + \Psi\,(b_g + b_m + b_o)/d \\
        \text{zero3, fsdp}:\;& \Psi\,(b_{hp} + b_g + b_m + b_o)/d \\
        \text{distributed-optimizer}:\;& \Psi\,b_{hp} + \Psi\,(b_g + b_m + b_o)/d
            \quad\text{(seed 000)}\\
        \text{distributed-optimizer, megatron-lm}:\;& \Psi\,(b_{hp} + b_g) + \Psi\,(b_m + b_o)/d
        \end{aligned}

    Parameters
    ----------
    scheme : str
        One of :data:`SCHEMES`.
    convention : {"memsym", "megatron-lm"}
        ``megatron-lm`` keeps the distributed optimizer's fp32 gradient buffer unsharded,
        as Megatron-LM's estimator does (6 + 12/d bytes per parameter); ``memsym`` follows
        seed 000 (gradients reduce-scattered, 2 + 16/d).
    offload : {"none", "optimizer", "optimizer+params"}
        ZeRO-Offload: master copy and moments move to host memory, and so do the gradient
        partitions under ZeRO-2/3 (the update runs on the CPU); ``optimizer+params``
        (ZeRO-Infinity, ZeRO-3/FSDP only) moves the weights too.
    params : sympy.Expr, optional
        Parameters held by this GPU's model-parallel shard [parameters]; default ``N/(p t)``.
    dp : sympy.Expr, optional
        The group the states are sharded over; default ``d``.

    Returns
    -------
    Total
        Terms ``weights``, ``gradients`` and ``optimizer`` (master copy + moments); a term
        that is zero on the GPU (offloaded) is left out.

    Examples
    --------
    >>> from memsym import model_state, byte_widths
    >>> M = model_state("zero2").subs(byte_widths("zero2"))
    >>> M.evaluate(N=7 * 10**9, d=8, p=1, t=1) / 10**9
    105/4

    References
    ----------
    ZeRO §3.1, §5 (Figure 1); seed 000; Megatron-LM theoretical_memory_usage.py; ZeRO-Offload §4.
    """
    scheme = normalize_scheme(scheme)
    convention = choose("convention", convention, CONVENTIONS)
    offload = choose("offload", offload, OFFLOADS)
    psi = N / (p * t) if params is None else as_expr(params)
    dp = d if dp is None else as_expr(dp)
    if convention == "megatron-lm" and scheme not in ("ddp", "distributed-optimizer"):
        raise InvalidValueError(
            f"convention megatron-lm covers ddp and distributed-optimizer only, not {scheme} "
            "(Megatron-LM's estimator has no ZeRO-2/3 accounting); use --convention memsym")
    if offload == "optimizer+params" and scheme not in ("zero3", "fsdp"):
        raise InvalidValueError(
            f"offload optimizer+params needs sharded parameters (zero3 or fsdp), not {scheme}")

    # Which of the three states are divided by the data-parallel group.
    shard_w = scheme in ("zero3", "fsdp")
    shard_g = scheme in ("zero2", "zero3", "fsdp") or (
        scheme == "distributed-optimizer" and convention == "memsym")
    shard_o = scheme != "ddp"
    if scheme == "ddp":
        src = Source("zero", "§3.1") if convention == "memsym" else _MEGATRON
    elif scheme == "distributed-optimizer":
        src = _SEED if convention == "memsym" else _MEGATRON
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
    return Total(f"model states per GPU ({scheme}, {convention}, offload {offload})", tuple(terms))


def host_state(scheme: str = "zero3", *, offload: str = "optimizer", params=None, dp=None) -> Total:
    r"""Host (CPU) memory per GPU's share of the offloaded model states [bytes].

    The complement of :func:`model_state`: what ZeRO-Offload moves out of the GPU.

    Examples
    --------
    >>> host_state("zero2").subs(b_g=2, b_m=4, b_o=8).evaluate(N=10**9, d=4, p=1, t=1) / 10**9
    7/2
    """
    scheme = normalize_scheme(scheme)
    offload = choose("offload", offload, OFFLOADS)
    full = model_state(scheme, params=params, dp=dp)
    on_gpu = model_state(scheme, offload=offload, params=params, dp=dp)
    moved = tuple(
        Term(term.key, term.expr, term.description + ", offloaded to host memory", _OFFLOAD, label=term.label)
        for term in full if term.key not in on_gpu)
    return Total(f"host memory of offloaded states ({scheme}, offload {offload})", moved)
