r"""Muon's optimizer states and its Newton-Schulz work, as Megatron-core runs them.

Megatron-LM d98e8a64dd builds ``--optimizer muon`` in
``megatron/core/optimizer/__init__.py:_get_megatron_emerging_optimizer`` (727-990): Muon
(``TensorParallelMuon``, ``emerging_optimizers.py:177``) steps every 2-D parameter that is not
an embedding or the output layer (``_is_muon_excluded``, ``emerging_optimizers.py:140-147``;
Mamba's ``in_proj`` opts out, ``ssm/mamba_mixer.py:309``), and a scalar Adam
(``--muon-scalar-optimizer adam``, the default) the rest.  Both are wrapped in
``Float16OptimizerWithFloat16Params`` (fp32 main parameters) under bf16 (899-904), or, with
``--use-distributed-optimizer`` (the layer-wise distributed optimizer,
``arguments.py:1725-1736``), after each whole parameter is assigned to one data-parallel rank
(``layer_wise_optimizer.py:614-762``).

Muon's state is one ``momentum_buffer`` per parameter, ``torch.zeros_like(p.data)`` of the
fp32 main parameter (Emerging-Optimizers ``orthogonalized_optimizer.py:154``): 4 bytes
(:data:`memsym.terms.widths.OPTIMIZERS` ``"muon"``).  Adam's parameters keep a second moment
beyond it (:func:`muon_scalar_moment`).

Each step orthogonalizes each matrix's momentum (Nesterov: ``grad.lerp(momentum_buffer)``, a
new fp32 tensor, ``orthogonalized_optimizer.py:196-197``) by ``--muon-num-ns-steps`` (default
5) Newton-Schulz iterations on the orientation with rows <= columns (``muon_utils.py:205-208``),
each ``A = X X^T``, ``B = b A + c A A``, ``X = a X + B X`` (``newton_schulz_step``, 348-378),
in bf16 under ``--muon-fp32-matmul-prec medium`` (the default; 245-262).
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..symbols import N_sc, t as t_sym, t_e as t_e_sym
from ..term import Source, Term, Total
from ..values import as_expr, positive

def _size(value, what, *, allow_zero=False):
    """A symbol as it is; a number checked > 0 (>= 0 with ``allow_zero``), memsym's error."""
    if isinstance(value, sp.Basic) and not value.is_number:
        return value
    return positive(value, what, allow_zero=allow_zero)


__all__ = ["largest_muon_elements", "muon_scalar_moment", "muon_states", "newton_schulz_flops", "newton_schulz_workspace"]

_SCALAR = Source("megatron-core", "core/optimizer/emerging_optimizers.py:140-147 "
                 "(_is_muon_excluded: embeddings, output layer, non-2-D to the scalar "
                 "optimizer), __init__.py:805-814 (muon_scalar_optimizer adam)")
#: Where Muon's optimizer states are made under DDP: Megatron-core wraps TensorParallelMuon in
#: Float16OptimizerWithFloat16Params, whose fp32 main parameter of every parameter
#: (optimizer.py:1012) the ``momentum_buffer`` copies (Emerging-Optimizers fd77292)
_STATES_DDP = Source("megatron-core", "core/optimizer/__init__.py:892-904 (TensorParallelMuon, "
                     "emerging_optimizers.py:177, in Float16OptimizerWithFloat16Params: fp32 "
                     "main params, optimizer.py:1012); Emerging-Optimizers fd77292 "
                     "orthogonalized_optimizer.py:152-154 (momentum_buffer = "
                     "torch.zeros_like(p.data))")
#: ... and under the layer-wise distributed optimizer: the wrapper is built after
#: shard_params, so main parameters and momentum exist for the rank's whole parameters only
_STATES_LAYER_WISE = Source(
    "megatron-core", "core/optimizer/layer_wise_optimizer.py:576-589 "
    "(Float16OptimizerWithFloat16Params after shard_params, 614-643: fp32 main params of the "
    "rank's own whole parameters), __init__.py:892-897, 970-988 (TensorParallelMuon "
    "in LayerWiseDistributedOptimizer); Emerging-Optimizers fd77292 "
    "orthogonalized_optimizer.py:152-154 (momentum_buffer = torch.zeros_like(p.data))")
#: The layer-wise optimizer's gradients: Megatron's DDP all-reduces them, whole on every rank
_GRADS_LAYER_WISE = Source("megatron-core", "core/optimizer/layer_wise_optimizer.py:174-180 "
                           "(DDP all-reduces the gradients; every rank keeps the full model "
                           "and gradients); core/distributed/param_and_grad_buffer.py "
                           "(grad_data)")
_NS = Source("emerging-optimizers", "orthogonalized_optimizers/muon_utils.py:348-378 "
             "(newton_schulz_step), 205-208 (transpose to rows <= columns)")
_WORK = Source("emerging-optimizers", "orthogonalized_optimizer.py:193-208 (Nesterov lerp, "
               "orthogonalize); muon_utils.py:201-273 (fp32 normalize, bf16 X, A, B, fp32 "
               "result); Megatron-LM d98e8a64dd emerging_optimizers.py:236-237 (scaled copies)")


def muon_scalar_moment(params=None, shard=1) -> Term:
    r"""The scalar Adam's second moment on the parameters Muon leaves to it [bytes].

    .. math:: \frac{4\,N_{sc}}{\sigma}

    Muon's optimizer width :math:`b_o = 4` counts one fp32 state per parameter; the
    parameters the scalar Adam steps (embedding, output layer, norms) keep
    ``exp_avg`` and ``exp_avg_sq``, the second 4 bytes here.  :math:`\sigma`: the
    data-parallel ranks the states are split over (the layer-wise distributed optimizer's
    d c; 1 without it).

    Parameters
    ----------
    params : sympy.Expr, optional
        Parameters on one GPU that the scalar Adam steps [parameters]; default
        :math:`N_{sc}`.
    shard : sympy.Expr or int
        Data-parallel ranks the optimizer states are split over [GPUs].

    Examples
    --------
    A GPU holding 1000 embedding rows of 8 and a norm of 8 (8008 scalar-Adam parameters),
    states split over 4 ranks: 4 x 8008 / 4 = 8008 bytes (by hand):

    >>> muon_scalar_moment(8008, 4).expr
    8008

    References
    ----------
    .. [megatron-core] ``core/optimizer/emerging_optimizers.py`` (``_is_muon_excluded``).
    """
    n = N_sc if params is None else _size(params, "params", allow_zero=True)
    return Term("muon_adam_moment", 4 * n / _size(shard, "shard"),
                "the scalar Adam's exp_avg_sq (fp32) on the parameters Muon does not step "
                "(embedding, output layer, norms)", _SCALAR, label="scalar-Adam 2nd moment")


def muon_states(terms, layer_wise: bool) -> tuple:
    r"""A Muon job's model-state Terms, cited where Muon's states are made [bytes].

    The values are unchanged:

    .. math:: M_{opt} = (b_{main} + b_o)\,\frac{N}{\sigma}, \quad b_o = 4

    (:math:`b_{main}` the fp32 main parameter, :math:`b_o` Muon's ``momentum_buffer``,
    :math:`\sigma` the ranks the states are split over).  The optimizer states (``optimizer``
    and ``expert_optimizer``) cite Megatron-core's Muon wrapper and Emerging-Optimizers'
    ``momentum_buffer`` in place of Megatron's ``DistributedOptimizer``; under the layer-wise
    distributed optimizer (``layer_wise``) the gradients are all-reduced whole on every rank
    (no reduce-scatter), and say so.

    Parameters
    ----------
    terms : iterable of Term
        The model-state Terms of a Muon job (:func:`memsym.terms.model_state.model_state`) [bytes].
    layer_wise : bool
        ``--use-distributed-optimizer`` (Megatron-core's layer-wise one under Muon; else DDP).

    Examples
    --------
    >>> from memsym.term import Term
    >>> opt = Term("optimizer", 8, "main (master) parameters and optimizer moments", _STATES_DDP)
    >>> [t.source.locator.split(" ")[0] for t in muon_states([opt], True)]
    ['core/optimizer/layer_wise_optimizer.py:576-589']
    >>> muon_states([opt], False)[0].expr
    8

    References
    ----------
    .. [megatron-core] ``core/optimizer/__init__.py`` (``_get_megatron_emerging_optimizer``),
       ``layer_wise_optimizer.py`` (``LayerWiseDistributedOptimizer``).
    .. [emerging-optimizers] ``orthogonalized_optimizer.py`` (``_init_group``).
    """
    states = _STATES_LAYER_WISE if layer_wise else _STATES_DDP
    where = "of the rank's own whole parameters (layer-wise)" if layer_wise else "replicated"
    out = []
    for term in terms:
        base = term.key.removeprefix("expert_")
        if base == "optimizer":
            words = (f"main parameters (fp32 under bf16) and one fp32 state each (Muon's "
                     f"momentum_buffer, the scalar Adam's exp_avg), {where}")
            term = replace(term, source=states, description=(
                "routed experts: " + words if term.key != base else words))
        elif base == "gradients" and layer_wise:
            words = "gradient buffer (grad_data), all-reduced, whole on every rank"
            term = replace(term, source=_GRADS_LAYER_WISE, description=(
                "routed experts: " + words if term.key != base else words))
        out.append(term)
    return tuple(out)


def newton_schulz_flops(rows, cols, steps=5) -> sp.Expr:
    r"""FLOPs of Muon's Newton-Schulz iterations on one matrix [FLOPs].

    With :math:`m = \min(r, c)`, :math:`n = \max(r, c)` and ``steps`` iterations
    of ``A = X X^T`` (:math:`2m^2n`), ``B = bA + cAA`` (:math:`2m^3`) and ``X = aX + BX``
    (:math:`2m^2n`):

    .. math:: F_{NS} = k\,(4m^2n + 2m^3)

    Parameters
    ----------
    rows, cols : int or sympy.Expr
        The matrix's shape as the iteration sees it [elements].
    steps : int
        ``--muon-num-ns-steps`` [1].

    Examples
    --------
    A 4 x 6 matrix, 5 steps: m = 4, n = 6; 4 x 16 x 6 + 2 x 64 = 512 per step, 2560 (by
    hand):

    >>> newton_schulz_flops(6, 4), newton_schulz_flops(4, 6, steps=1)
    (2560, 512)

    References
    ----------
    .. [emerging-optimizers] ``muon_utils.py`` (``newton_schulz_step``).
    .. [muon-blog] Jordan et al. 2024 (the quintic iteration, 5 steps).
    """
    r, c = _size(rows, "rows"), _size(cols, "cols")
    m, n = sp.Min(r, c), sp.Max(r, c)
    return _size(steps, "steps") * (4 * m**2 * n + 2 * m**3)


def largest_muon_elements(matrices, *, gathered: bool) -> sp.Expr:
    r"""Elements of the largest matrix one GPU orthogonalizes, in the TP sizes [elements].

    .. math:: n_{max} = \max\Bigl(\max_{rep} r c,\; \frac{\max_{TP} r c}{t},\;
       \frac{\max_{ETP} r c}{t_e}\Bigr)

    over the replicated matrices, the TP-split ones and the routed experts' (split over expert
    TP); every matrix whole when ``gathered`` (``--muon-tp-mode duplicated``, whose
    ``newton_schulz_tp`` all-gathers the shard, Emerging-Optimizers ``muon_utils.py:328-330``).
    Symbolic in :math:`t` and :math:`t_e`, so that one expression serves every TP size (the
    search binds it per layout, estimate at its own).

    Parameters
    ----------
    matrices : iterable of tuple
        ``(name, rows, cols, split, count)`` of each matrix
        (:func:`memsym.model.muon_matrices.muon_matrices`) [elements].
    gathered : bool
        The whole matrix rather than its TP shard.

    Examples
    --------
    A 8 x 4 column-parallel matrix, a 6 x 2 replicated one and a 16 x 4 expert matrix, at
    t = 2, t_e = 4: max(12, 32/2, 64/4) = 16; gathered: 64 (by hand):

    >>> mats = [("a", 8, 4, "rows", 1), ("r", 6, 2, None, 1), ("x", 16, 4, "expert-rows", 8)]
    >>> from memsym.symbols import t, t_e
    >>> largest_muon_elements(mats, gathered=False).subs({t: 2, t_e: 4})
    16
    >>> largest_muon_elements(mats, gathered=True)
    64

    References
    ----------
    .. [megatron-core] ``core/optimizer/emerging_optimizers.py:382-440`` (``orthogonalize``:
       the shard, or ``newton_schulz_tp``).
    """
    best = {None: 0, "tp": 0, "etp": 0}
    for _, rows, cols, split, _ in matrices:
        kind = None if gathered or split is None else (
            "etp" if split.startswith("expert") else "tp")
        best[kind] = max(best[kind], int(rows) * int(cols))
    parts = [sp.Integer(best[None])] if best[None] else []
    parts += [sp.Integer(best[k]) / w for k, w in (("tp", t_sym), ("etp", t_e_sym)) if best[k]]
    return sp.Max(*parts) if parts else sp.Integer(0)


def newton_schulz_workspace(rows, cols, *, nesterov: bool = True) -> Total:
    r"""The optimizer step's peak beside the states while Muon orthogonalizes one matrix [bytes].

    Of :math:`m = \min(r, c)`, :math:`n = \max(r, c)`, at the step's end (fp32: the Nesterov
    momentum, the orthogonalized result and the two scaled copies of
    ``orth_grad * scale_factor * extra_scale_factor``), which exceeds the iteration's own
    peak (the Nesterov copy, the old and the new bf16 X and the bf16 A and B,
    :math:`8mn + 4m^2 \le 12mn`):

    .. math:: W = 4mn\,[\text{nesterov}] + 12mn

    Parameters
    ----------
    rows, cols : int or sympy.Expr
        The largest Muon matrix on the GPU, as the iteration sees it (gathered over TP under
        ``--muon-tp-mode duplicated``) [elements].
    nesterov : bool
        ``--muon-nesterov`` (Megatron-LM's default off; Megatron-Bridge's Muon recipes on).

    Examples
    --------
    A 2 x 3 matrix with Nesterov: 16 x 6 = 96 bytes; without: 72 (by hand):

    >>> newton_schulz_workspace(2, 3).evaluate(), newton_schulz_workspace(3, 2, nesterov=False).evaluate()
    (96, 72)

    References
    ----------
    .. [emerging-optimizers] ``orthogonalized_optimizer.py`` (``step``), ``muon_utils.py``
       (``newton_schulz``).
    """
    mn = _size(rows, "rows") * _size(cols, "cols")
    terms = [Term("newton_schulz_result", 12 * mn, "the orthogonalized fp32 update and its two "
                  "scaled copies of the largest Muon matrix", _WORK, label="NS result")]
    if nesterov:
        terms.append(Term("muon_nesterov", 4 * mn, "the Nesterov momentum, a new fp32 tensor "
                          "(grad.lerp) of the largest Muon matrix", _WORK, label="Nesterov"))
    return Total("Muon step transient", tuple(terms))
