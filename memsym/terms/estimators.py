r"""Other tools' closed-form memory estimators, rebuilt from memsym's own terms.

DeepSpeed's ZeRO-2/ZeRO-3 GPU model-state estimate and QLoRA's bits per weight for the
quantization constants; ``formulas/tables.toml`` catalogues both and the published tables they
reproduce (the accuracy page's generator, ``tools/accuracy.py``, uses them).

References
----------
.. [deepspeed-estimators] microsoft/DeepSpeed docs/code-docs/source/memory.rst.
.. [qlora] Dettmers et al. 2023, arXiv:2305.14314, §3 (Double Quantization).
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError
from ..symbols import N, N_ll, d
from ..term import Source, Term, Total
from .adapters import quantization_bits
from .model_state import model_state

__all__ = ["DEEPSPEED_WIDTHS", "deepspeed_gpu", "qlora_constant_bits"]

_DS = Source("deepspeed-estimators", "memory.rst, Discussion, GPU RAM")

#: DeepSpeed's byte counts: fp16 weights (2), fp32 gradients (4: FusedAdam converts the fp16
#: gradients to fp32 before the update), fp32 weights (4) and Adam moments (8).
#: REF: deepspeed-estimators, memory.rst, Discussion ("16 and 18 multipliers").
DEEPSPEED_WIDTHS = {"b_hp": 2, "b_g": 4, "b_m": 4, "b_o": 8}


def deepspeed_gpu(stage: int = 3, offload: str = "none") -> Total:
    r"""DeepSpeed's estimator of GPU model-state memory, built from memsym's terms [bytes].

    .. math::

        \begin{aligned}
        \text{ZeRO-2}:&\; 4N + 16N/d \;\;(\text{offload: } 2N)\\
        \text{ZeRO-3}:&\; 4N_{\mathrm{ll}} + 18N/d \;\;(\text{offload optimizer: }
            4N_{\mathrm{ll}} + 2N/d;\; \text{and params: } 4N_{\mathrm{ll}})
        \end{aligned}

    memsym's :func:`~memsym.terms.model_state.model_state` with DeepSpeed's byte widths
    (2, 4, 4, 8) gives the sharded part; DeepSpeed adds, as separate terms, the largest
    layer gathered whole under ZeRO-3 (fp16 weights and gradients, :math:`4N_{\mathrm{ll}}`)
    and, under ZeRO-2 without offload, an unsharded fp16 gradient buffer (:math:`2N`), which
    memsym's ZeRO-2 (ZeRO §5.2: gradients reduce-scattered) does not hold.

    Parameters
    ----------
    stage : {2, 3}
        The ZeRO stage DeepSpeed's estimator covers.
    offload : {"none", "optimizer", "optimizer+params"}
        ``cpu_offload`` and ``cpu_offload_params`` (ZeRO-3 only).

    Returns
    -------
    Total
        Per-GPU bytes in :math:`N` [parameters], :math:`N_{\mathrm{ll}}` [parameters] and
        :math:`d` [GPUs].

    Examples
    --------
    >>> deepspeed_gpu(3).expr
    18*N/d + 4*N_ll
    >>> deepspeed_gpu(2).expr
    4*N + 16*N/d

    References
    ----------
    .. [deepspeed-estimators] ``docs/code-docs/source/memory.rst``, Discussion, GPU RAM.
    .. [zero-offload] §4.
    """
    if isinstance(stage, bool) or stage not in (2, 3):
        raise InvalidValueError(f"DeepSpeed's estimators cover ZeRO stage 2 or 3, not {stage!r}")
    scheme = "zero3" if stage == 3 else "zero2"
    total = model_state(scheme, offload=offload, params=N, dp=d,
                        convention="zero-paper").subs(DEEPSPEED_WIDTHS)
    if stage == 3:
        total = total + Term("largest_layer", 4 * N_ll,
                             "largest layer gathered whole: fp16 weights and fp16 gradients", _DS,
                             label="largest layer")
    elif offload == "none":
        total = total + Term("fp16_gradients", 2 * N,
                             "unsharded fp16 gradient buffer DeepSpeed's ZeRO-2 estimate counts",
                             _DS, label="fp16 gradients")
    return Total(f"DeepSpeed ZeRO-{stage} GPU estimate (offload {offload})", total.terms)


def qlora_constant_bits(double: bool = True) -> sp.Rational:
    r"""Bits per weight of QLoRA's quantization constants [bits/parameter].

    .. math:: \frac{32}{64} \;\text{or, double-quantized,}\; \frac{8}{64} + \frac{32}{64\cdot256}

    Parameters
    ----------
    double : bool
        Double quantization (the constants themselves quantized to 8 bits in blocks of 256).

    Examples
    --------
    >>> qlora_constant_bits(), qlora_constant_bits(False)
    (65/512, 1/2)

    References
    ----------
    Dettmers et al. 2023, arXiv:2305.14314, §3 (Double Quantization).
    """
    if not isinstance(double, bool):
        raise InvalidValueError(f"double must be True or False, not {double!r}")
    return quantization_bits("nf4-dq" if double else "nf4") - 4  # minus the NF4 weight's 4 bits
