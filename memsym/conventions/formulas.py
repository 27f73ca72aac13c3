"""The frameworks' printed formulas: bytes per parameter, activation paths, pipeline factor,
vocabulary padding (Megatron-LM core 0.19 and Megatron-Bridge 0.6, as MEGATRON-ESTIMATORS.md
transcribes them)."""

from __future__ import annotations


import sympy as sp

from ..errors import UnknownNameError, choose
from ..symbols import L, V, b, c, d, f, f_e, f_sh, h, k, m, p, s, t, v
from ..term import Source
from ..values import as_expr


LM_WO = Source("megatron-lm", "theoretical_memory_usage.py, compute_weight_and_optimizer_memory")
LM_A = Source("megatron-lm", "theoretical_memory_usage.py, compute_activation_memory "
                              "(Korthikanti et al. 2022 Table 2, TP + SP + selective)")
LM_B = Source("megatron-lm", "theoretical_memory_usage.py, compute_activation_memory_without_sp")
BR_WO = Source("megatron-bridge", "theoretical_memory_utils.py, estimate_training_memory "
                                   "(model_state_components)")
BR_A = Source("megatron-bridge", "theoretical_memory_utils.py, _compute_activation_memory_bytes")

_R = sp.Rational


# ------------------------------------------------------------------------------------------------
# Formula-level functions (registry symbols; these are what formulas/conventions.toml checks)
# ------------------------------------------------------------------------------------------------
def megatron_bytes_per_parameter(distributed_optimizer: bool = True, shard=None) -> sp.Expr:
    r"""Megatron-LM's bytes per parameter: 18, or :math:`6 + 12/n` with the distributed optimizer.

    .. math::

        \beta(n) = \begin{cases} 18 & \text{without the distributed optimizer}\\
                                 6 + 12/n & \text{with it} \end{cases}

    18 = 2 (bf16 weight) + 4 (fp32 gradient) + 4 (fp32 main weight) + 8 (Adam moments); the
    distributed optimizer shards only the 12 bytes of main weight and moments over the
    data-parallel group of size ``n`` (the fp32 gradient buffer stays whole, issue #654).

    Parameters
    ----------
    distributed_optimizer : bool
        ``--use-distributed-optimizer``.
    shard : sympy.Expr, optional
        The group the optimizer is sharded over [GPUs]; default ``d``.

    Returns
    -------
    sympy.Expr
        Bytes per parameter [bytes/parameter].

    Examples
    --------
    >>> megatron_bytes_per_parameter()
    6 + 12/d
    >>> megatron_bytes_per_parameter(False)
    18

    References
    ----------
    Megatron-LM ``theoretical_memory_usage.py`` (``num_bytes_per_parameter``);
    ``docs/user-guide/features/dist_optimizer.md``.
    """
    # REF: megatron-lm, compute_weight_and_optimizer_memory, num_bytes_per_parameter
    if not distributed_optimizer:
        return sp.Integer(18)
    n = d if shard is None else as_expr(shard)
    return 6 + 12 / n


def bridge_bytes_per_parameter(distributed_optimizer: bool = True, shard=None) -> sp.Expr:
    r"""Megatron-Bridge's bytes per parameter: 18, or :math:`6 + 12/\max(1, n)`.

    The dense optimizer is sharded over DP x CP (``n = d c``), unlike Megatron-LM's ``d``.

    .. math::

        \beta_{\mathrm{Bridge}}(n) = 6 + \frac{12}{\max(1, n)}, \qquad n = d\,c

    Parameters
    ----------
    distributed_optimizer : bool
        ``config.optimizer.use_distributed_optimizer``.
    shard : sympy.Expr, optional
        The optimizer group [GPUs]; default ``d c`` (for which the max is a no-op).

    Returns
    -------
    sympy.Expr
        Bytes per parameter [bytes/parameter].

    Examples
    --------
    >>> bridge_bytes_per_parameter()
    6 + 12/(c*d)

    References
    ----------
    Megatron-Bridge ``theoretical_memory_utils.py``, ``_bytes_per_parameter``.
    """
    if not distributed_optimizer:
        return sp.Integer(18)
    if shard is None:
        return 6 + 12 / (d * c)  # max(1, d c) = d c: both are positive integers
    return 6 + 12 / sp.Max(1, as_expr(shard))


def pipeline_factor(schedule: str = "none") -> sp.Expr:
    r"""The pipeline factor :math:`\phi` both frameworks apply to the stage-0 activations.

    .. math::

        \phi = \begin{cases} 1 + \dfrac{p - 1}{p\,v} & \text{interleaved (VPP)}\\
                             \min(1, m/p) & \text{p > 1 and the number of microbatches given}\\
                             1 & \text{otherwise} \end{cases}

    Parameters
    ----------
    schedule : {"none", "interleaved", "microbatches"}
        Which branch the framework takes.

    Returns
    -------
    sympy.Expr
        The factor [1].

    Examples
    --------
    >>> pipeline_factor("interleaved")
    1 + (p - 1)/(p*v)
    >>> pipeline_factor("microbatches")
    Min(1, m/p)

    References
    ----------
    Megatron-LM ``compute_activation_memory`` ("interleaved_schedule_memory_penalty").
    """
    schedule = choose("pipeline schedule", schedule, ("none", "interleaved", "microbatches"))
    if schedule == "interleaved":
        return 1 + (p - 1) / (p * v)
    if schedule == "microbatches":
        return sp.Min(1, m / p)
    return sp.Integer(1)


def megatron_lm_activation(path: str = "A", schedule: str = "none",
                           output_layer: bool = True) -> sp.Expr:
    r"""Megatron-LM's activation bytes on pipeline stage 0 (its two paths).

    Path A (sequence parallel + selective recompute, Korthikanti Table 2 with the MLP widened
    to ``f``), path B (``compute_activation_memory_without_sp``, 5 % buffer included):

    .. math::

        A = \frac{1}{t}\Big\{\phi\,[\,s b h (18 + 4f/h) L + 8 s b p + s b h p\,]
            + [p=1]\, 4 s b h (1 + V/h)\Big\}

        B = \tfrac{21}{20}\Big\{\phi\,[\,s b h (10 + 24/t) L + 8 s b p + s b h p\,]
            + [p=1]\, 2 (s b V/t + s b h)\Big\}

    Parameters
    ----------
    path : {"A", "B"}
        A = ``compute_activation_memory``, B = ``compute_activation_memory_without_sp``.
    schedule : str
        The branch of :func:`pipeline_factor`.
    output_layer : bool
        Include the output-layer term (the source adds it only when ``p = 1``).

    Returns
    -------
    sympy.Expr
        Activation memory [bytes].

    Examples
    --------
    >>> megatron_lm_activation("A", output_layer=False).subs({f: 4 * h, p: 1})
    (34*L*b*h*s + b*h*s + 8*b*s)/t

    References
    ----------
    Megatron-LM ``theoretical_memory_usage.py``; Korthikanti et al. (2022), Table 2.
    """
    phi = pipeline_factor(schedule)
    if path == "A":
        stage = s * b * h * (18 + 4 * f / h) * L + 8 * s * b * p + s * b * h * p
        out = 4 * s * b * h * (1 + V / h) if output_layer else 0
        return (phi * stage + out) / t
    if path == "B":
        stage = s * b * h * (10 + 24 / t) * L + 8 * s * b * p + s * b * h * p
        out = 2 * (s * b * V / t + s * b * h) if output_layer else 0
        # REF: megatron-lm, compute_activation_memory_without_sp, "overhead_factor = 1.05"
        return _R(105, 100) * (phi * stage + out)
    raise UnknownNameError("Megatron-LM activation path", path, ("A", "B"))


def megatron_bridge_activation(schedule: str = "none", output_layer: bool = True,
                               moe: bool = False, ratio=None, layers=None) -> sp.Expr:
    r"""Megatron-Bridge's activation bytes (one formula whatever the recompute and SP settings).

    .. math::

        A = \frac{\phi\,[\,s b h (18 + 4 r) L_{\mathrm{tot}} + 8 s b p + s b h p\,]
                  + [p=1]\, 4 s b h (1 + V/h)}{t\,c},
        \qquad r = \frac{L_d f + L_m (k f_e + f_{sh})}{L_{\mathrm{tot}}\,h}

    Parameters
    ----------
    schedule : str
        The branch of :func:`pipeline_factor`.
    output_layer : bool
        Include the output-layer term (``p = 1`` only in the source).
    moe : bool
        Every layer is an MoE layer (``r = (k f_e + f_sh)/h``); default all dense (``r = f/h``).
    ratio, layers : sympy.Expr, optional
        Explicit ``r`` and :math:`L_{\mathrm{tot}}` (mixed dense/MoE models, MTP layers).

    Returns
    -------
    sympy.Expr
        Activation memory [bytes].

    Examples
    --------
    >>> megatron_bridge_activation(output_layer=False).subs({f: 4 * h, p: 1})
    (34*L*b*h*s + b*h*s + 8*b*s)/(c*t)

    References
    ----------
    Megatron-Bridge ``theoretical_memory_utils.py``, ``_compute_activation_memory_bytes`` and
    ``_ffn_activation_ratio``.
    """
    phi = pipeline_factor(schedule)
    r = ratio if ratio is not None else ((k * f_e + f_sh) / h if moe else f / h)
    n_layers = L if layers is None else layers
    stage = s * b * h * (18 + 4 * r) * n_layers + 8 * s * b * p + s * b * h * p
    out = 4 * s * b * h * (1 + V / h) if output_layer else 0
    return (phi * stage + out) / (t * c)


def padded_vocab(vocab_size: int, divisible_by: int = 128, tp=t) -> sp.Expr:
    r"""Megatron's padded vocabulary :math:`\lceil V/(128 t)\rceil \cdot 128 t` [tokens].

    Parameters
    ----------
    vocab_size : int
        Unpadded vocabulary size V [tokens].
    divisible_by : int, optional
        ``--make-vocab-size-divisible-by`` [tokens], default 128.
    tp : int or sympy.Expr, optional
        Tensor-parallel size t [GPUs]; the symbol ``t`` by default.

    Returns
    -------
    sympy.Expr
        The padded vocabulary [tokens].

    Examples
    --------
    >>> padded_vocab(128256, tp=4), padded_vocab(50257, tp=8)
    (128512, 51200)
    """
    mult = divisible_by * tp
    return sp.ceiling(sp.Integer(vocab_size) / mult) * mult
