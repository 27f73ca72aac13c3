r"""A whole training's time, GPU-hours and cost, from its FLOPs or from its step time.

The time of ``T`` tokens is Narayanan's Eq. (4) (the FLOPs at an efficiency :math:`\eta` of
the peak :math:`F`) or the steps times a step's time (:func:`memsym.terms.compute.step_time`);
GPU-hours and the cost follow term by term (DeepSeek-V3's Table 1).

References
----------
.. [narayanan2021] Narayanan et al. 2021, arXiv:2104.04473, §5.1 Eq. (4).
.. [kaplan2020] Kaplan et al. 2020, arXiv:2001.08361, §2.1 (C = 6 N per token).
.. [deepseek-v3] DeepSeek-AI 2024, arXiv:2412.19437, Table 1 (cost = GPU hours x price).
"""

from __future__ import annotations

import sympy as sp

from ..symbols import B, F, G, N, T, eta, price, s
from ..term import Source, Term, Total
from ..values import positive_or_symbolic

__all__ = ["training_time", "training_time_from_steps", "gpu_hours", "training_cost"]

_EQ4 = Source("narayanan", "§5.1, Eq. (4)")


def training_time(recompute: bool = True, tokens=T, params=N, gpus=G) -> Total:
    r"""End-to-end training time for ``tokens`` tokens (Narayanan Eq. 4) [s].

    .. math::

        t \approx \frac{8\,T\,P}{n\,X} \quad\text{(with recomputation; } 6\,T P/(n X)
        \text{ without)}, \qquad X = \eta\,F_{\text{peak}}

    Parameters
    ----------
    recompute : bool
        Count the recomputed forward (8 instead of 6 FLOPs per parameter and token).
    tokens : int
        Training tokens :math:`T` [tokens].
    params : int
        Total number of model parameters [parameters].
    gpus : int
        Number of GPUs (world size) [GPUs].

    Examples
    --------
    Narayanan §5.1: GPT-3 175B on 300B tokens, 1024 GPUs at 140 TFLOP/s, "34 days":

    >>> tt = training_time()
    >>> days = tt.evaluate(T=300 * 10**9, N=175 * 10**9, G=1024, F=140 * 10**12, eta=1) / 86400
    >>> round(float(days))
    34

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §5.1 Eq. (4).
    """
    factor = 8 if recompute else 6
    expr = factor * positive_or_symbolic(tokens, "tokens", limit="tokens") \
        * positive_or_symbolic(params, "params", limit="parameters") \
        / (positive_or_symbolic(gpus, "gpus", limit="gpus") * F * eta)
    return Total("training time", (Term("training", expr, f"{factor}·T·P / (n·X), X = eta·F",
                                        _EQ4, unit="s"),), unit="s")


def training_time_from_steps(step: Total, tokens=T, batch=B) -> Total:
    r"""Training time as steps x step time: :math:`T/(B\,s)\cdot t_{\text{step}}` [s].

    .. math:: t = \frac{T}{B\,s}\, t_{\text{step}} \quad\text{(term by term)}

    Parameters
    ----------
    step : Total
        Seconds per step (:func:`step_time`) [s].
    tokens : sympy.Expr
        Training tokens :math:`T` [tokens].
    batch : sympy.Expr
        Sequences per step :math:`B` [sequences].

    Examples
    --------
    By hand, :math:`T/(Bs) \cdot 6NBs/(G F \eta) = 6NT/(G F \eta)`, Kaplan's
    :math:`C = 6NT` at :math:`G F \eta` FLOP/s:

    >>> from memsym.terms.compute import step_time
    >>> training_time_from_steps(step_time(pipeline=False, formula="6n")).expr
    6*N*T/(F*G*eta)

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §5.1 Eq. (4).
    .. [kaplan2020] Kaplan et al. 2020, arXiv:2001.08361, §2.1 (:math:`C \approx 6NBS`).
    """
    steps = positive_or_symbolic(tokens, "tokens", limit="tokens") \
        / (positive_or_symbolic(batch, "batch", limit="global_batch") * s)
    return Total("training time", tuple(
        Term(term.key, sp.cancel(steps * term.expr) if not term.expr.has(sp.Max) else steps * term.expr,
             term.description + "; times the T/(B s) steps", term.source, unit="s",
             label=term.label) for term in step), unit="s")


def gpu_hours(time: Total, gpus=G) -> Total:
    r"""GPU-hours: :math:`G\cdot t/3600` [GPU h].

    .. math:: H = \frac{G\, t}{3600} \quad\text{(term by term)}

    Parameters
    ----------
    time : Total
        Training time (:func:`training_time`) [s].
    gpus : int
        Number of GPUs (world size) [GPUs].

    Examples
    --------
    By hand, :math:`G \cdot 8TN/(G F \eta)/3600 = NT/(450 F \eta)`:

    >>> gpu_hours(training_time()).expr
    N*T/(450*F*eta)

    DeepSeek-V3 §1: a trillion tokens takes "180K H800 GPU hours, i.e., 3.7 days" on 2048 GPUs:

    >>> from memsym.term import Source, Term, Total
    >>> run = Total("t", (Term("run", sp.Rational(37, 10) * 86400, "3.7 days",
    ...                        Source("deepseek-v3", "§1"), unit="s"),), unit="s")
    >>> round(float(gpu_hours(run, 2048).expr), -4)
    180000.0

    References
    ----------
    .. [deepseek-v3] DeepSeek-AI 2024, arXiv:2412.19437, §1 and Table 1 (GPU hours of training).
    """
    gpus = positive_or_symbolic(gpus, "gpus", limit="gpus")
    return Total("GPU-hours", tuple(
        Term(term.key, sp.cancel(gpus * term.expr / 3600) if not term.expr.has(sp.Max)
             else gpus * term.expr / 3600,
             term.description + "; in GPU-hours", Source("deepseek-v3", "§1 and Table 1 (GPU hours = GPUs x wall-clock hours)"),
             unit="GPU h", label=term.label) for term in time), unit="GPU h")


def training_cost(time: Total, gpus=G, rate=price) -> Total:
    r"""Cost: price per GPU-hour x GPU-hours (DeepSeek-V3's Table 1) [currency].

    .. math:: C = \pi \cdot \frac{G\, t}{3600} \quad\text{(term by term)}

    Parameters
    ----------
    time : Total
        Training time (:func:`training_time`) [s].
    gpus : int
        Number of GPUs (world size) [GPUs].
    rate : sympy.Expr
        Price per GPU-hour :math:`\pi` [currency/GPU h].

    Examples
    --------
    >>> cost = training_cost(training_time())
    >>> cost.expr
    N*T*price/(450*F*eta)

    DeepSeek-V3 Table 1: 2788K H800 GPU hours (on 2048 GPUs) at $2 per GPU hour: $5.576M:

    >>> from memsym.term import Source, Term, Total
    >>> run = Total("t", (Term("run", sp.Rational(2788000 * 3600, 2048), "2788K GPU hours",
    ...                        Source("deepseek-v3", "Table 1"), unit="s"),), unit="s")
    >>> training_cost(run, 2048, 2).expr
    5576000

    References
    ----------
    .. [deepseek-v3] DeepSeek-AI 2024, arXiv:2412.19437, Table 1 (training costs).
    """
    hours = gpu_hours(time, gpus)
    rate = positive_or_symbolic(rate, "price per GPU-hour", allow_zero=True)
    return Total("training cost", tuple(
        Term(term.key, rate * term.expr, "price per GPU-hour x GPU-hours",
             Source("deepseek-v3", "Table 1 (training cost = GPU hours x rental price per GPU "
                                   "hour)"), unit="currency",
             label=term.label) for term in hours), unit="currency")
