r"""Traffic of each parallelism per training step, and its time on the link it crosses.

Every term counts the bytes **one GPU sends** in one training step (one optimizer step of
``m`` microbatches of ``b`` sequences), with NCCL's per-rank factors
(:mod:`memsym.terms.collectives`).  With :math:`Y = s\,b\,h\,b_c` one activation tensor of
a microbatch: TP :math:`8Y(t-1)/t` per layer (Narayanan §3.2; SP the same, Korthikanti
§4.2.2); PP :math:`Y` each way per stage boundary (:math:`Y/t` scatter/gather, §4.1); DP
:math:`2(d-1)/d\cdot\Psi b_g`, ZeRO-3/FSDP 1.5x (ZeRO §7); CP K and V (ring, Llama 3's
all-gather, Ulysses' all-to-all); EP 4 all-to-alls per MoE layer.  Full recomputation repeats
the forward collectives of TP, CP and EP; a CP rank holds s/c tokens, so TP and PP tensors
are divided by c (Megatron-LM schedules.py: ``tensor_shape[0] //= cp_group.size()``).

Network tiers (the link a group's collectives cross, :mod:`memsym.terms.network`, whose names
are re-exported here): an intra-node (``beta_intra``, NVLink) and an inter-node link
(``beta_inter``, InfiniBand/RoCE); a group whose span exceeds ``n_node`` GPUs is priced on
``beta_inter``.

References
----------
.. [nccl-tests] NVIDIA nccl-tests ``doc/PERFORMANCE.md``.
.. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §3.2, §4.1.
.. [korthikanti2022] Korthikanti et al. 2022, arXiv:2205.05198, §4.2.2.
.. [zero] Rajbhandari et al. 2020, arXiv:1910.02054, §7.
.. [ring-attention] Liu, Zaharia, Abbeel 2023, arXiv:2310.01889.
.. [llama3] Llama Team 2024, arXiv:2407.21783, §3.3.2.
.. [ulysses] Jacobs et al. 2023, arXiv:2309.14509; DeepSpeed blog ``deepspeed-ulysses``.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..errors import InvalidValueError, choose
from ..symbols import L, L_m, alpha, b, b_c, b_g, b_hp, c, d, d_h, e, g, h, k, m, p, s, t, v
from ..term import Source, Term, Total
from ..values import as_expr
from .activations import RECOMPUTE
from .collectives import collective_bytes, collective_steps
from .model_state import normalize_scheme, shard_params
from .network import (GROUPS, LAYOUT_ORDER, LINKS, layout_warnings, link_for, placement,
                      tensor_parallel_fits)

__all__ = [
    "GROUPS", "LAYOUT_ORDER", "RECOMPUTE", "CP_VARIANTS", "LINKS",
    "tensor_parallel", "pipeline_parallel", "data_parallel", "context_parallel",
    "expert_parallel", "communication_per_step", "communication_time", "placement",
    "link_for", "tensor_parallel_fits", "layout_warnings", "tp_bytes_per_step",
]

CP_VARIANTS = ("ring", "all-gather", "ulysses")

_TP = Source("narayanan", "§3.2 (4 all-reduces of bsh per layer per microbatch)")
_SP = Source("korthikanti", "§4.2.2 (all-gather + reduce-scatter, same bytes as TP)")
_PP = Source("narayanan", "§4.1 (bsh per microbatch between stages; bsh/t scatter/gather)")
_DP = Source("zero", "§7 (DP all-reduce 2Ψ; P_os+g 2Ψ; P_os+g+p 3Ψ)")
_RING = Source("ring-attention", "§3 (K, V blocks passed around the ring)")
_LLAMA3 = Source("llama3", "§3.3.2 (all-gather K and V for context parallelism)")
_ULYSSES = Source("ulysses", "§3.1 (all-to-all of Q, K, V and output; 4Nh/P per link)")
_EP = Source("gshard", "§2.2 / §3.2 (dispatch and combine all-to-all per MoE layer)")


def _term(key, expr, desc, src, label):
    """A bytes term with common factors pulled out (``2*(t-1)/t``, not ``(2t-2)/t``)."""
    return Term(key, sp.factor_terms(expr), desc, src, label=label)


def _activation():
    """One activation tensor of a microbatch [bytes]: Y = s b h b_c."""
    return s * b * h * b_c


@dataclass(frozen=True)
class _Traffic:
    """A communication term and its latency-bound steps per training step (ring algorithms)."""

    term: Term
    group: str
    steps: sp.Expr


def _tp(sequence_parallel: bool, recompute: str, context: bool = False) -> _Traffic:
    recompute = choose("recompute", recompute, RECOMPUTE)
    # a context-parallel rank holds s/c of the sequence: its TP collectives move s b h / c
    # (Megatron's tensor_shape[0] //= cp_group.size() in schedules.py)
    Y = _activation() / (c if context else 1)
    layers = L / p * m  # layer passes of this stage in one step
    if not sequence_parallel:
        calls = 4 + (2 if recompute == "full" else 0)  # 2 fwd + 2 bwd (+2 recomputed fwd)
        per_call = collective_bytes("all-reduce", Y, t)
        steps = calls * collective_steps("all-reduce", t)
        desc = (f"tensor parallel: {calls} all-reduces of s·b·h per layer per microbatch"
                + (" (full recompute repeats the forward 2)" if recompute == "full" else ""))
        src = _TP
    else:
        calls = 8 + (4 if recompute == "full" else 0)  # 2 AG + 2 RS fwd, same bwd
        per_call = collective_bytes("all-gather", Y, t)   # reduce-scatter: the same
        steps = calls * collective_steps("all-gather", t)
        desc = (f"tensor + sequence parallel: {calls // 2} all-gathers + {calls // 2} "
                "reduce-scatters of s·b·h per layer per microbatch")
        src = _SP
    return _Traffic(_term("tp", calls * per_call * layers, desc, src, "TP"), "tp",
                    steps * layers)


def tensor_parallel(*, sequence_parallel: bool = False, recompute: str = "none",
                    context_parallel: bool = False) -> Term:
    r"""Bytes one GPU sends for tensor parallelism in one training step [bytes].

    .. math:: 4 \cdot \frac{2(t-1)}{t}\, s\,b\,h\,b_c \cdot \frac{L}{p}\, m

    (6 all-reduces instead of 4 with full recomputation; with sequence parallelism
    8 all-gathers / reduce-scatters of :math:`(t-1)/t\cdot Y`, the same bytes).

    Parameters
    ----------
    sequence_parallel : bool
        Megatron sequence parallelism (all-gather + reduce-scatter instead of all-reduce).
    recompute : {"none", "selective", "full"}
        Full recomputation repeats the forward collectives; selective adds none (Korthikanti §5).
    context_parallel : bool
        A CP rank holds s/c tokens: every tensor it all-reduces is s b h / c.

    Examples
    --------
    By hand, Narayanan's :math:`8bsh(t-1)/t` per layer at s = h = 4096, b = 1, t = 8, bf16,
    32 layers: :math:`8 \cdot 4096^2 \cdot 7/8 \cdot 2 \cdot 32 = 7516192768` bytes:

    >>> tensor_parallel().evaluate(s=4096, b=1, h=4096, L=32, t=8, b_c=2, p=1, m=1)
    7516192768

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §3.2 (:math:`8bsh(t-1)/t` per layer).
    .. [korthikanti] Korthikanti et al. 2022, arXiv:2205.05198, §4.2.2 (SP: the same bytes).
    """
    return _tp(sequence_parallel, recompute, context_parallel).term


def tp_bytes_per_step() -> Term:
    r"""Seed 002's ``tp_bytes_per_step``: 4 ring all-reduces of s·b·h per layer, L layers [bytes].

    .. math:: 4 \cdot \frac{2(t-1)}{t}\, s\,b\,h\,b_c \cdot L

    Examples
    --------
    By hand, :math:`8 \cdot 4096^2 \cdot 7/8 \cdot 2 \cdot 32 = 7.516192768` GB (as above):

    >>> float(tp_bytes_per_step().evaluate(s=4096, b=1, h=4096, L=32, t=8, b_c=2)) / 1e9
    7.516192768

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §3.2 (:math:`8bsh(t-1)/t` per layer).
    """
    return Term("tp", 4 * collective_bytes("all-reduce", s * b * h * b_c, t) * L,
                "tensor-parallel bytes per GPU per step (one microbatch, no pipeline)",
                _TP, label="TP")


def _pp(scatter_gather: bool, interleaved: bool, context: bool = False) -> _Traffic:
    # REF: megatron-lm schedules.py: tensor_shape = [seq_length // cp, mbs, hidden] (// tp with SP)
    Y = (_activation() / t if scatter_gather else _activation()) / (c if context else 1)
    chunks = v if interleaved else 1
    # Average over the p stages: p*v - 1 boundaries, each crossed forward and backward by
    # every microbatch (a middle stage sends 2Y; the ends send Y); zero when p = v = 1.
    sends = 2 * (p * chunks - 1) / p * m
    desc = ("pipeline parallel: activations forward and gradients backward across each stage "
            "boundary, per microbatch" + (" (scatter/gather: /t)" if scatter_gather else "")
            + (" (interleaved: v chunks per rank)" if interleaved else ""))
    return _Traffic(_term("pp", sends * Y, desc, _PP, "PP"), "pp", sends)


def pipeline_parallel(*, scatter_gather: bool = False, interleaved: bool = False,
                      context_parallel: bool = False) -> Term:
    r"""Bytes one GPU sends point-to-point for pipeline parallelism per step [bytes].

    .. math:: \frac{2(p\,v - 1)}{p}\, m \cdot s\,b\,h\,b_c \;\big/\; t_{\text{sg}}

    averaged over stages (:math:`v = 1` without interleaving; a middle stage sends :math:`2mY`);
    :math:`t_{\text{sg}} = t` with scatter/gather (and with SP, the tensor already split), else 1.

    Parameters
    ----------
    scatter_gather, interleaved, context_parallel : bool
        Narayanan's scatter/gather split (/t); v chunks per rank; s/c tokens per CP rank.

    Examples
    --------
    By hand, :math:`p - 1` boundaries crossed twice by m tensors, over p stages; p = 1 sends 0:

    >>> pipeline_parallel().expr
    2*b*b_c*h*m*s*(p - 1)/p
    >>> pipeline_parallel(scatter_gather=True).evaluate(p=1, m=8, s=1, b=1, h=1, b_c=2, t=8)
    0

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §4.1 (bsh per microbatch, bsh/t).
    """
    return _pp(scatter_gather, interleaved, context_parallel).term


def _dp(sharding: str, context_parallel: bool, params=None, pipelined_fsdp=False) -> _Traffic:
    scheme = normalize_scheme(sharding)
    psi = shard_params(params)
    nd = d * c if context_parallel else d  # Megatron reduces gradients over DP x CP
    grads, weights = psi * b_g, psi * b_hp
    # NCCL's bytes and ring steps (memsym.terms.collectives); a RS or an AG takes n-1 steps
    rs, ag = (collective_bytes(op, x, nd) for op, x in (("reduce-scatter", grads),
                                                         ("all-gather", weights)))
    ring = collective_steps("all-gather", nd)
    if scheme == "ddp":
        expr, steps = collective_bytes("all-reduce", grads, nd), 2 * ring
        desc = "data parallel: gradient all-reduce once per step"
    elif scheme in ("zero1", "distributed-optimizer"):
        expr, steps = rs + ag, 2 * ring
        desc = "data parallel (ZeRO-1 / distributed optimizer): gradient reduce-scatter + parameter all-gather"
    elif scheme == "zero2":
        # Gradients are partitioned: no full-size buffer to accumulate microbatches into, so
        # they are reduce-scattered after every microbatch's backward (DeepSpeed stage 2).
        expr, steps = m * rs + ag, (m + 1) * ring
        desc = "data parallel (ZeRO-2): gradient reduce-scatter per microbatch + parameter all-gather"
    elif scheme == "fsdp" and pipelined_fsdp:
        # torch.distributed.pipelining: no reshard and no gradient sync until the last
        # micro-batch, so the stage is all-gathered once and reduce-scattered once per step
        expr, steps = ag + rs, 2 * ring
        return _Traffic(_term("dp", expr, "data parallel (FSDP2 under pipeline parallelism): "
                              "one parameter all-gather and one gradient reduce-scatter per step",
                              Source("pytorch-pipelining", "stage.py, backward_maybe_with_nosync "
                                     "(set_reshard_after_backward(False), "
                                     "set_requires_gradient_sync(False) until the last)"), "DP"),
                        "dp", steps)
    else:  # zero3, fsdp
        # Parameters are gathered for forward and again for backward, gradients
        # reduce-scattered, for every microbatch: 1.5x an all-reduce when b_g = b_hp, m = 1.
        expr, steps = m * (2 * ag + rs), 3 * m * ring
        desc = ("data parallel (ZeRO-3 / FSDP): parameter all-gather forward and backward + "
                "gradient reduce-scatter, per microbatch")
    return _Traffic(_term("dp", expr, desc, _DP, "DP"), "dp", steps)


def data_parallel(sharding: str = "ddp", *, context_parallel: bool = False, params=None) -> Term:
    r"""Bytes one GPU sends for data-parallel gradient (and parameter) sync per step [bytes].

    With :math:`\Psi = N/(p\,t)` parameters on this GPU's model-parallel shard (or ``params``):

    .. math::

        \begin{aligned}
        \text{ddp}:&\; \tfrac{2(d-1)}{d}\,\Psi b_g \\
        \text{zero1, distributed-optimizer}:&\; \tfrac{d-1}{d}\,\Psi (b_g + b_{hp}) \\
        \text{zero2}:&\; \tfrac{d-1}{d}\,\Psi (m\,b_g + b_{hp}) \\
        \text{zero3, fsdp}:&\; m\,\tfrac{d-1}{d}\,\Psi (2 b_{hp} + b_g)
        \end{aligned}

    ZeRO §7: with :math:`b_g = b_{hp}`, :math:`m = 1` these are 2Ψ, 2Ψ, 2Ψ and 3Ψ (1.5x)
    element-bytes for large d.  With CP the gradient group is :math:`d\,c` (Megatron-LM).

    Parameters
    ----------
    sharding : {"ddp", "zero1", "distributed-optimizer", "zero2", "zero3", "fsdp"}
        How model states are sharded over the data-parallel group.
    context_parallel : bool
        Reduce over :math:`d\,c` instead of :math:`d`.
    params : sympy.Expr or int, optional
        The parameters Ψ of this GPU's model-parallel shard (default N/(p t)) [parameters].

    Examples
    --------
    >>> data_parallel("ddp").subs(b_g=2, p=1, t=1).expr
    4*N*(d - 1)/d
    >>> data_parallel("zero3").subs(b_g=2, b_hp=2, p=1, t=1, m=1).expr
    6*N*(d - 1)/d

    References
    ----------
    ZeRO (Rajbhandari et al. 2020) §7; nccl-tests PERFORMANCE.md.
    """
    return _dp(sharding, context_parallel, params).term


def _cp(variant: str, recompute: str) -> _Traffic:
    variant = choose("context-parallel variant", variant, CP_VARIANTS)
    recompute = choose("recompute", recompute, RECOMPUTE)
    full = recompute == "full"
    layers = L / p * m
    kv = 2 * s * b * g * d_h * b_c / t  # K and V of the whole sequence on one TP rank
    if variant == "ring":
        passes = 3 + (1 if full else 0)  # fwd: K,V; bwd: K,V again + dK,dV; (+fwd)
        expr = passes * (c - 1) * kv / c * layers
        steps = passes * (c - 1) * layers
        desc = (f"context parallel (ring): K and V blocks passed c-1 times, {passes} passes "
                "per layer per microbatch (fwd K,V; bwd K,V and dK,dV)")
        src = _RING
    elif variant == "all-gather":
        ops = 2 + (1 if full else 0)  # fwd all-gather K,V; bwd reduce-scatter dK,dV
        expr = ops * collective_bytes("all-gather", kv, c) * layers   # RS: the same bytes
        steps = ops * collective_steps("all-gather", c) * layers
        desc = ("context parallel (Llama 3): all-gather K and V forward, reduce-scatter their "
                "gradients backward, per layer per microbatch")
        src = _LLAMA3
    else:  # ulysses
        ops = 2 + (1 if full else 0)  # fwd: Q,K,V in + output out; bwd: the same
        local = s * b * (2 * h + 2 * g * d_h) * b_c / c  # Q, O (h wide) and K, V (g d_h wide)
        expr = ops * collective_bytes("all-to-all", local, c) * layers
        steps = ops * 4 * collective_steps("all-to-all", c) * layers
        desc = ("sequence parallel (Ulysses): all-to-all of Q, K, V and of the attention "
                "output, forward and backward, per layer per microbatch")
        src = _ULYSSES
    return _Traffic(_term("cp", expr, desc, src, "CP"), "cp", steps)


def context_parallel(variant: str = "ring", *, recompute: str = "none") -> Term:
    r"""Bytes one GPU sends for context (sequence) parallelism per step [bytes].

    With :math:`K\!V = 2\,s\,b\,g\,d_h\,b_c/t` the keys and values of the whole sequence on
    one tensor-parallel rank (``g`` KV heads of size ``d_h``; ``g d_h = h`` without GQA):

    .. math::

        \begin{aligned}
        \text{ring}:&\; 3\,(c-1)\,\tfrac{K\!V}{c}\cdot\tfrac{L}{p} m \\
        \text{all-gather (Llama 3)}:&\; 2\,\tfrac{c-1}{c}\,K\!V\cdot\tfrac{L}{p} m \\
        \text{ulysses}:&\; 2\,\tfrac{c-1}{c}\,\tfrac{s\,b\,(2h + 2 g d_h)\,b_c}{c}\cdot\tfrac{L}{p} m
        \end{aligned}

    Ring: forward passes K, V; backward K, V again and dK, dV.  All-gather: forward all-gather
    of K, V, backward reduce-scatter of their gradients.  Ulysses: all-to-all of Q, K, V and
    of the output, forward and backward (the blog's :math:`4Nh/P` per link for MHA, times
    :math:`(c-1)/c`; shown with ``t = 1``).  Full recomputation adds the forward again.

    Parameters
    ----------
    variant : {"ring", "all-gather", "ulysses"}
    recompute : {"none", "selective", "full"}

    Examples
    --------
    >>> context_parallel("all-gather").subs(t=1, p=1, m=1).expr
    4*L*b*b_c*d_h*g*s*(c - 1)/c

    References
    ----------
    Ring attention (arXiv:2310.01889); Llama 3 §3.3.2; DeepSpeed-Ulysses.
    """
    return _cp(variant, recompute).term


def _ep(recompute: str, moe_layers=None, sequence_parallel: bool = False,
        context: bool = False) -> _Traffic:
    recompute = choose("recompute", recompute, RECOMPUTE)
    ops = 4 + (2 if recompute == "full" else 0)  # dispatch + combine, fwd and bwd
    layers = (L_m if moe_layers is None else as_expr(moe_layers)) / p * m
    # every token this rank holds is sent to k experts; a rank holds s b / c tokens under
    # context parallelism, and 1/t of those under sequence parallelism (which Megatron
    # requires for MoE with t > 1), the same token count the activation terms use
    held = s * b / ((c if context else 1) * (t if sequence_parallel else 1))
    tokens = held * k * h * b_c
    expr = ops * collective_bytes("all-to-all", tokens, e) * layers
    desc = (f"expert parallel: {ops} all-to-alls (dispatch, combine) of the routed tokens per "
            "MoE layer per microbatch")
    steps = ops * collective_steps("all-to-all", e) * layers
    return _Traffic(_term("ep", expr, desc, _EP, "EP"), "ep", steps)


def expert_parallel(*, recompute: str = "none", moe_layers=None) -> Term:
    r"""Bytes one GPU sends for expert-parallel token routing per step [bytes].

    .. math:: 4\,\tfrac{e-1}{e}\, s\,b\,k\,h\,b_c \cdot \tfrac{L_m}{p}\, m

    Two all-to-alls per MoE layer forward (dispatch to the top-``k`` experts, combine) and
    two backward, on perfectly balanced routing (NCCL's all-to-all factor).

    Parameters
    ----------
    recompute : {"none", "selective", "full"}
        Full recomputation repeats the forward all-to-alls.
    moe_layers : sympy.Expr, optional
        MoE layers (default ``L_m``) [1].

    Examples
    --------
    >>> expert_parallel().subs(p=1, m=1, e=8).expr
    7*L_m*b*b_c*h*k*s/2

    References
    ----------
    GShard (Lepikhin et al. 2020) §2.2; nccl-tests PERFORMANCE.md (all-to-all).
    """
    return _ep(recompute, moe_layers).term


def _traffic(*, tensor: bool, sequence_parallel: bool, pipeline: bool, scatter_gather: bool,
             interleaved: bool, sharding: str | None, context: str | None, expert: bool,
             recompute: str, moe_layers=None, dp_params=None,
             pipelined_fsdp: bool = False) -> list[_Traffic]:
    recompute = choose("recompute", recompute, RECOMPUTE)
    out = []
    if tensor:
        out.append(_tp(sequence_parallel, recompute, context is not None))
    if context is not None:
        out.append(_cp(context, recompute))
    if pipeline:
        out.append(_pp(scatter_gather or sequence_parallel, interleaved, context is not None))
    if sharding is not None:
        # dp_params: every parameter whose gradient is reduced (a mixture of experts' total,
        # not the active count that prices its FLOPs), split over the p t model-parallel ranks
        shard = None if dp_params is None else as_expr(dp_params, "dp_params") / (p * t)
        out.append(_dp(sharding, context is not None, shard, pipelined_fsdp))
    if expert:
        out.append(_ep(recompute, moe_layers, sequence_parallel and tensor, context is not None))
    return out


def communication_per_step(*, tensor: bool = True, sequence_parallel: bool = False,
                           pipeline: bool = True, scatter_gather: bool = False,
                           interleaved: bool = False, sharding: str | None = "ddp",
                           context: str | None = None, expert: bool = False,
                           recompute: str = "none", moe_layers=None, dp_params=None,
                           pipelined_fsdp: bool = False) -> Total:
    r"""Bytes one GPU sends per training step, one term per parallel group [bytes].

    .. math:: \text{bytes} = \text{tp} + \text{cp} + \text{pp} + \text{dp} + \text{ep}

    the terms of :func:`tensor_parallel`, :func:`context_parallel`, :func:`pipeline_parallel`,
    :func:`data_parallel`, :func:`expert_parallel`; a group of size 1 contributes 0.

    Parameters
    ----------
    tensor, pipeline, expert : bool
        Include the TP, PP, EP terms.
    sequence_parallel : bool
        Megatron SP with TP (also implies the PP scatter/gather split).
    scatter_gather, interleaved : bool
        Narayanan's scatter/gather split of PP sends; interleaved schedule (``v`` chunks).
    sharding : str or None
        Data-parallel scheme (:data:`memsym.terms.model_state.SCHEMES`); None leaves DP out.
    context : {"ring", "all-gather", "ulysses"} or None
        Context-parallel variant; None leaves CP out.
    recompute : {"none", "selective", "full"}
        Full recomputation repeats the forward traffic of TP, CP and EP.
    moe_layers : sympy.Expr, optional
        MoE layers for the EP term (default ``L_m``) [1].
    dp_params : sympy.Expr or int, optional
        Parameters whose gradients the DP group reduces, before the :math:`p\,t` split
        (default ``N``; for a mixture of experts pass the total, not the active count, or
        dense + experts/e per GPU under expert parallelism) [parameters].
    pipelined_fsdp : bool
        FSDP2 under ``torch.distributed.pipelining``: one all-gather and one reduce-scatter
        per step, not per micro-batch.

    Examples
    --------
    By hand, the TP bytes of :func:`tensor_parallel` (p = d = 1 send nothing):

    >>> tot = communication_per_step(sharding="ddp")
    >>> tot.keys
    ('tp', 'pp', 'dp')
    >>> tot.evaluate(s=4096, b=1, h=4096, L=32, t=8, b_c=2, p=1, m=1, d=1, N=7 * 10**9, b_g=2)
    7516192768

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §3.2, §4.1; [zero] §7.
    """
    return Total("communication bytes per GPU per step",
                 tuple(x.term for x in _traffic(
                     tensor=tensor, sequence_parallel=sequence_parallel, pipeline=pipeline,
                     scatter_gather=scatter_gather, interleaved=interleaved, sharding=sharding,
                     context=context, expert=expert, recompute=recompute,
                     moe_layers=moe_layers, dp_params=dp_params,
                     pipelined_fsdp=pipelined_fsdp)))


def communication_time(*, placement_map: dict | None = None, latency: bool = True,
                       **options) -> Total:
    r"""Seconds one GPU spends in each group's communication per step [s].

    Each term of :func:`communication_per_step` over the bandwidth of the link its group
    crosses (``beta_intra`` or ``beta_inter``), plus ``alpha`` times its ring steps:

    .. math:: t_{\text{group}} = \text{bytes}_{\text{group}}/\beta_{\text{link}}
        + \alpha \cdot \text{steps}_{\text{group}}

    Parameters
    ----------
    placement_map : dict, optional
        Group -> ``"intra"`` / ``"inter"`` (:func:`placement`); default TP intra, rest inter.
    latency : bool
        Include the ``alpha`` terms.
    **options
        As :func:`communication_per_step`.

    Examples
    --------
    Bandwidths are per GPU and **one direction** (H100 NVLink 450 GB/s, half the vendor's
    900 GB/s; a NIC per port).  By hand, 7516192768 TP bytes (:func:`tensor_parallel`) over
    900e9 B/s = 0.00835 s (seed 002's "about 10 ms"), over 450e9 = 0.0167 s, and over one
    400 Gb/s port (50e9 B/s) 0.15 s:

    >>> T = communication_time(pipeline=False, sharding=None, latency=False)
    >>> vals = dict(s=4096, b=1, h=4096, L=32, t=8, b_c=2, p=1, m=1)
    >>> round(float(T.evaluate(vals, beta_intra=900 * 10**9)), 4)
    0.0084
    >>> round(float(T.evaluate(vals, beta_intra=450 * 10**9)), 4)
    0.0167
    >>> T2 = communication_time(pipeline=False, sharding=None, latency=False,
    ...                         placement_map={"tp": "inter"})
    >>> round(float(T2.evaluate(vals, beta_inter=50 * 10**9)), 3)
    0.15
    >>> T.sensitivity("beta_intra")
    -8*L*b*b_c*h*m*s*(t - 1)/(beta_intra**2*p*t)

    References
    ----------
    .. [nccl-tests] NVIDIA nccl-tests ``doc/PERFORMANCE.md`` at a0b82b2260, "Time", "Summary".
    """
    links = placement()
    if placement_map:
        for grp, link in placement_map.items():
            links[choose("parallel group", grp, GROUPS)] = choose("link", link, LINKS)
    terms = []
    # communication_per_step's keywords and defaults
    defaults = dict(tensor=True, sequence_parallel=False, pipeline=True, scatter_gather=False,
                    interleaved=False, sharding="ddp", context=None, expert=False,
                    recompute="none", moe_layers=None, dp_params=None, pipelined_fsdp=False)
    for item in _traffic(**{key: options.pop(key, val) for key, val in defaults.items()}):
        bw = LINKS[links[item.group]]
        expr = item.term.expr / bw + (alpha * item.steps if latency else 0)
        terms.append(Term(item.term.key, expr,
                          item.term.description + f"; time on the {links[item.group]}-node link",
                          item.term.source, unit="s", label=item.term.label))
    if options:
        raise InvalidValueError("unknown communication options: " + ", ".join(sorted(options)))
    return Total("communication time per GPU per step", tuple(terms), unit="s")
