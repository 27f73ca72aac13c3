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
5) Newton-Schulz iterations, each ``A = X X^T``, ``B = b A + c A A``, ``X = a X + B X``
(``newton_schulz_step``, 348-378), in bf16 under ``--muon-fp32-matmul-prec medium`` (the
default; 245-262).  The orientation follows ``--muon-tp-mode`` (:func:`newton_schulz_peak`):
rows <= columns (``muon_utils.py:205-208``) for a blockwise shard, a replicated matrix and the
gathered whole matrix under duplicated; the TP split under distributed (336-341).
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..errors import InvalidValueError, choose
from ..symbols import N_sc, t as t_sym, t_e as t_e_sym
from ..term import Source, Term, Total
from ..values import positive
from ..vocabulary import MUON_TP_MODES

def _size(value, what, *, allow_zero=False):
    """A symbol as it is; a number checked > 0 (>= 0 with ``allow_zero``), memsym's error."""
    if isinstance(value, sp.Basic) and not value.is_number:
        return value
    return positive(value, what, allow_zero=allow_zero)


__all__ = ["largest_muon_elements", "muon_scalar_moment", "muon_states", "newton_schulz_flops",
           "newton_schulz_peak", "newton_schulz_workspace", "QKV_BLOCKS", "TE_DUPLICATED"]

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
_WORK = Source("emerging-optimizers", "orthogonalized_optimizer.py:193-208 (Nesterov lerp, "
               "orthogonalize); muon_utils.py:204-274 (orientation, fp32 normalize, bf16 X, A, "
               "B, fp32 result), 317-345 (newton_schulz_tp: duplicated all-gathers and cats, "
               "distributed orients by partition_dim); Megatron-LM d98e8a64dd "
               "emerging_optimizers.py:227-237 (scaled copies), 403 (blockwise: partition_dim "
               "None)")

#: MLA's q and kv down-projections, replicated over TP, yet with a ``partition_dim``: Megatron
#: builds them as ``TELinear(parallel_mode="duplicated")`` (Megatron-LM d98e8a64dd
#: ``multi_latent_attention.py:526-527, 573-574``), which hands Transformer Engine
#: ``parallel_mode=None`` (``transformer_engine.py:1251-1258``) and only marks the weight
#: ``tensor_model_parallel`` False (1313-1318); TE marks every linear weight ``partition_dim``
#: 1 if row-parallel else 0 (TE d0067d0da ``linear.py:1857-1862``).  Muon's ``orthogonalize``
#: passes that 0 on (``emerging_optimizers.py:403``), so ``newton_schulz_tp`` treats the replicated
#: weight as the TP group's row shards: duplicated stacks t copies, distributed orients by it.
#: The router's weight is a plain ``nn.Parameter`` (``moe/router.py:64``): no partition_dim.
TE_DUPLICATED = ("q_down", "kv_down")
#: ``linear_qkv``'s blocks in the order Megatron splits them (``_get_qkv_split_shapes``,
#: ``emerging_optimizers.py:150-162``; the output gate after Q)
QKV_BLOCKS = ("q", "gate", "k", "v")


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


def newton_schulz_peak(rows, cols, *, tp_mode: str, partition_dim=None, ways=1,
                       nesterov: bool = False) -> sp.Expr:
    r"""The optimizer step's peak beside the states while Muon orthogonalizes one matrix [bytes].

    The matrix one GPU holds is :math:`r \times c`, :math:`s = r c` elements, its
    ``partition_dim`` :math:`\pi` (None: no such attribute) over a TP group of :math:`w`
    ranks.  Every tensor that is alive at once, in bytes (fp32 4, bf16 2), :math:`\nu` for
    ``--muon-nesterov`` (the new fp32 ``grad.lerp`` of the shard, alive through the step):

    - **blockwise, or no partition_dim** (``emerging_optimizers.py:403``,
      ``muon_utils.py:317-319``): ``newton_schulz`` on the shard, transposed to rows <=
      columns (205-208), so the Gram side is :math:`m = \min(r, c) \le n`.  The fp32
      normalized copy and its bf16 cast (:math:`6s`), then per iteration the old and new bf16
      X and the bf16 A and B (:math:`4s + 4m^2 \le 8s`), the fp32 result and the bf16 X
      (:math:`6s`), and at the end the result with its two scaled copies
      ``orth_grad * scale_factor * extra_scale_factor`` (:math:`12s`, 236-237):

      .. math:: P = 4\nu s + 12 s

    - **distributed**: ``newton_schulz`` on the shard, transposed exactly when
      :math:`\pi = 0` (``muon_utils.py:334-341``), so :math:`m = c` for :math:`\pi = 0`,
      :math:`m = r` for :math:`\pi = 1`, which may exceed :math:`n` (its docstring's
      warning, 292-294); the iteration's :math:`4s + 4m^2` then may top the end's
      :math:`12s`:

      .. math:: P = 4\nu s + 4s + \max(8s,\ 4m^2)

    - **duplicated**: ``newton_schulz_tp`` all-gathers the :math:`w` fp32 shards
      (``x_shards``, :math:`4W`, :math:`W = w s`) and ``torch.cat``'s them (:math:`4W`), both
      alive until it returns (327-333), while ``newton_schulz`` runs on the whole matrix in the
      rows <= columns orientation (:math:`m = \min` of the gathered shape): its fp32
      normalized copy and bf16 cast (:math:`6W`), its iteration (:math:`4W + 4m^2`) or its fp32
      result and bf16 X (:math:`6W`); afterwards the whole result (the returned chunk is a view
      of it) and the shard's two scaled copies (:math:`4W + 8s`):

      .. math:: P = 4\nu s + 12W + \max(2W,\ 4m^2)

    Parameters
    ----------
    rows, cols : int or sympy.Expr
        The matrix (TP shard) one GPU holds [elements].
    tp_mode : {"blockwise", "duplicated", "distributed"}
        ``--muon-tp-mode``.
    partition_dim : {None, 0, 1}
        The weight's ``partition_dim`` (0 rows, 1 columns; None: a plain parameter).
    ways : int or sympy.Expr
        Ranks of its TP (expert: expert-TP) group [GPUs].
    nesterov : bool
        ``--muon-nesterov`` (Megatron-LM's default off: ``optimizer_config.py:266``, and the
        config's value is what Megatron passes, ``emerging_optimizers.py:533-556``, not
        ``TensorParallelMuon``'s own default True, 185).

    Examples
    --------
    A 1 x 4 row shard over 2 ranks (s = 4), by hand: blockwise 12 x 4 = 48; distributed
    transposes it to 4 x 1, m = 4 > n = 1: 16 + max(32, 64) = 80; duplicated gathers 2 x 4
    (W = 8, m = 2): 96 + max(16, 16) = 112; with Nesterov 16 more each:

    >>> [newton_schulz_peak(1, 4, tp_mode=mode, partition_dim=0, ways=2)
    ...  for mode in ("blockwise", "distributed", "duplicated")]
    [48, 80, 112]
    >>> newton_schulz_peak(1, 4, tp_mode="duplicated", partition_dim=0, ways=2, nesterov=True)
    128

    References
    ----------
    .. [emerging-optimizers] ``muon_utils.py`` (``newton_schulz``, ``newton_schulz_tp``,
       ``newton_schulz_step``), ``orthogonalized_optimizer.py`` (``step``).
    .. [megatron-core] ``core/optimizer/emerging_optimizers.py`` (``TensorParallelMuon``).
    """
    mode = choose("muon_tp_mode", tp_mode, MUON_TP_MODES)
    r, c, w = _size(rows, "rows"), _size(cols, "cols"), _size(ways, "ways")
    if partition_dim not in (None, 0, 1):
        raise InvalidValueError(f"partition_dim must be None, 0 or 1, got {partition_dim!r}")
    s = r * c
    nest = 4 * s if nesterov else 0
    if mode == "blockwise" or partition_dim is None:
        return nest + 12 * s
    if mode == "distributed":
        m = c if partition_dim == 0 else r
        return nest + 4 * s + sp.Max(8 * s, 4 * m**2)
    whole = w * s
    m = sp.Min(w * r, c) if partition_dim == 0 else sp.Min(r, w * c)
    return nest + 12 * whole + sp.Max(2 * whole, 4 * m**2)


def _shard(name, rows, cols, split) -> tuple:
    """``(rows, cols, partition_dim, ways)`` of the matrix one GPU holds, in the symbols t and
    t_e (:func:`newton_schulz_workspace`)."""
    if split is None:
        return (rows, cols) + ((0, t_sym) if name in TE_DUPLICATED else (None, 1))
    ways = t_e_sym if split.startswith("expert") else t_sym
    if split.endswith("rows"):
        return sp.Integer(rows) / ways, cols, 0, ways
    return rows, sp.Integer(cols) / ways, 1, ways


def _split_qkv_peak(blocks, mode: str, nesterov: bool, groups) -> sp.Expr:
    """The step's peak of ``linear_qkv`` orthogonalized as its blocks (``QKV_BLOCKS`` order,
    each ``(rows, cols, partition_dim, ways)``) [bytes] (:func:`newton_schulz_workspace`)."""
    sizes = [r * c for r, c, _, _ in blocks]
    fused, ways = sum(sizes), blocks[0][3]
    # the blocks' reshape copies: 1 when more than one KV group is local (g/t an integer > 1),
    # 0 when one is (g = t: each block is contiguous, a view) or fewer (t > g)
    copies = 4 * fused * sp.Min(1, sp.Max(0, sp.Integer(groups) / ways - 1))
    cands, done = [8 * fused], 0
    for (r, c, pdim, w), size in zip(blocks, sizes):
        cands.append(copies + 4 * done + newton_schulz_peak(r, c, tp_mode=mode,
                                                             partition_dim=pdim, ways=w))
        done += size
    return (4 * fused if nesterov else 0) + sp.Max(*cands)


def newton_schulz_workspace(matrices, *, tp_mode: str = "duplicated", nesterov: bool = False,
                            qkv_groups=None) -> Total:
    r"""The largest of the optimizer step's peaks over the matrices one GPU orthogonalizes [bytes].

    .. math:: W_{NS} = \max\Bigl(\max_{matrices} P,\; P_{qkv}\Bigr)

    of each matrix's :func:`newton_schulz_peak` on the shard it is held as, in the symbols
    :math:`t` (TP) and :math:`t_e` (expert TP, routed experts), so that one expression serves
    every TP size: a column-parallel matrix (``"rows"``) is :math:`r/w \times c` with
    ``partition_dim`` 0, a row-parallel one (``"cols"``) :math:`r \times c/w` with 1, a
    replicated one whole, with ``partition_dim`` 0 over :math:`t` for MLA's down-projections
    (:data:`TE_DUPLICATED`) and none for the router.

    With ``qkv_groups`` (:math:`g`, KV groups), ``linear_qkv`` is one parameter orthogonalized
    as its blocks :data:`QKV_BLOCKS` (Megatron-LM ``emerging_optimizers.py:407-437``; shards
    :math:`s_q, (s_{gate},) s_k, s_v`, :math:`s_f` their sum): the view
    :math:`(g/t,\ \ldots,\ h)` split by block and each ``reshape``'d, a copy unless one
    group is local (:math:`\kappa = [g/t > 1]`), alive while every block is orthogonalized,
    the blocks done so far kept as their scaled results, and the ``torch.cat`` of them at the
    end; the Nesterov copy is the fused shard's:

    .. math:: P_{qkv} = 4\nu s_f + \max\Bigl(8 s_f,\ \max_b \bigl(4\kappa s_f
       + 4\textstyle\sum_{b' < b} s_{b'} + P_b|_{\nu=0}\bigr)\Bigr)

    Parameters
    ----------
    matrices : iterable of tuple
        ``(name, rows, cols, split, count)`` of each matrix
        (:func:`memsym.model.muon_matrices.muon_matrices`) [elements].
    tp_mode : {"blockwise", "duplicated", "distributed"}
        ``--muon-tp-mode`` (Megatron-LM's default duplicated).
    nesterov : bool
        ``--muon-nesterov`` (Megatron-LM's default off).
    qkv_groups : int, optional
        The model's KV groups [1] when ``q``, ``gate``, ``k``, ``v`` are blocks of one
        ``linear_qkv`` (not MLA); None: each matrix its own parameter.

    Examples
    --------
    A 2 x 3 column-parallel matrix at t = 1 (by hand): blockwise 12 x 6 = 72; distributed
    keeps it 2 x 3 transposed to 3 x 2, m = 3: 24 + max(48, 36) = 72; duplicated gathers the
    one shard, m = 2: 72 + max(12, 16) = 88:

    >>> from memsym.symbols import t
    >>> [newton_schulz_workspace([("a", 2, 3, "rows", 1)], tp_mode=mode).evaluate({t: 1})
    ...  for mode in ("blockwise", "distributed", "duplicated")]
    [72, 72, 88]

    Q 4 x 2, K and V 2 x 2 of 2 KV groups at t = 1, blockwise: the copies 4 x 16, then
    max(12 x 8, 32 + 12 x 4, 48 + 12 x 4) = 96 (Q's and V's), 160 in all, over the
    cat's 8 x 16 (by hand):

    >>> qkv = [("q", 4, 2, "rows", 1), ("k", 2, 2, "rows", 1), ("v", 2, 2, "rows", 1)]
    >>> newton_schulz_workspace(qkv, tp_mode="blockwise", qkv_groups=2).evaluate({t: 1})
    160

    References
    ----------
    .. [emerging-optimizers] ``orthogonalized_optimizer.py`` (``step``), ``muon_utils.py``
       (``newton_schulz``, ``newton_schulz_tp``).
    .. [megatron-core] ``core/optimizer/emerging_optimizers.py:382-440`` (``orthogonalize``).
    """
    mode = choose("muon_tp_mode", tp_mode, MUON_TP_MODES)
    peaks, blocks = set(), []
    for name, rows, cols, split, _ in matrices:
        if qkv_groups is not None and name in QKV_BLOCKS:
            blocks.append(_shard(name, rows, cols, split))
            continue
        r, c, pdim, ways = _shard(name, rows, cols, split)
        peaks.add(newton_schulz_peak(r, c, tp_mode=mode, partition_dim=pdim, ways=ways,
                                     nesterov=nesterov))
    if blocks:
        peaks.add(_split_qkv_peak(blocks, mode, nesterov, _size(qkv_groups, "qkv_groups")))
    # the numbers reduced here; the symbolic peaks left unevaluated (SymPy would try to order
    # every pair of them, slowly; each is bound to numbers later)
    numbers = [p for p in peaks if p.is_number]
    rest = [p for p in peaks if not p.is_number] + ([max(numbers)] if numbers else [])
    expr = sp.Max(*rest, evaluate=False) if len(rest) > 1 else (rest[0] if rest else sp.Integer(0))
    what = {"blockwise": "its TP shard", "distributed": "its TP shard, oriented by the split",
            "duplicated": "the all-gathered shards and the whole matrix"}[mode]
    words = (f"Newton-Schulz workspace of the costliest Muon matrix ({what}; bf16 X, A, B, the "
             f"fp32 result and its two scaled copies" + ("; the Nesterov lerp)" if nesterov
                                                         else ")"))
    return Total("Muon step transient", (Term("newton_schulz_workspace", expr, words, _WORK,
                                              label="NS workspace"),))
