r"""FLOPs per iteration, step time, MFU / HFU (a whole training's time, GPU-hours and cost:
:mod:`memsym.terms.training_cost`).

FLOPs count the dense matrix multiplies of a GPT layer (Narayanan et al. 2021 §5.1;
Korthikanti et al. 2022 App. A); :math:`B` is the global batch [sequences] of one
iteration.  Step time is compute at an efficiency :math:`\eta` of the peak :math:`F`, plus
the pipeline bubble, plus the communication not hidden behind compute; the overlap is an
explicit assumption (none, full, or a fraction :math:`\omega`).

References
----------
.. [narayanan2021] Narayanan et al. 2021, arXiv:2104.04473, §5.1 Eq. (2)-(4).
.. [korthikanti2022] Korthikanti et al. 2022, arXiv:2205.05198, Appendix A, §6.3 (MFU, HFU).
.. [kaplan2020] Kaplan et al. 2020, arXiv:2001.08361, §2.1 (C = 6 N per token).
"""

from __future__ import annotations

import sympy as sp

from ..errors import choose
from ..symbols import B, F, G, L, N, V, a, d_h, eta, f, g, h, omega, s
from ..term import Source, Term, Total
from ..values import as_expr, positive_or_symbolic
from .activations import RECOMPUTE
from .pipeline import bubble_fraction

__all__ = ["FLOP_KINDS", "OVERLAPS", "RECOMPUTE", "parameters_narayanan", "flops_per_iteration",
           "gemm_flops_per_token", "flops_per_iteration_gemm",
           "step_time", "mfu", "hfu", "DEFAULT_EFFICIENCY"]

FLOP_KINDS = ("model", "hardware")
#: FLOP formulas: Korthikanti App. A / Narayanan Eq. 3 as printed; ``memsym``: the same, but
#: selective recomputation counted term by term (see :func:`flops_per_iteration`); 6N per token.
FORMULAS = ("korthikanti", "memsym", "6n")
OVERLAPS = ("none", "full", "fraction")
#: Default efficiency when none is given: Narayanan et al. 2021 Table 1 reach 163 of the
#: A100's 312 TFLOP/s (52 %) at 1T parameters.  REF: narayanan2021, Table 1.
DEFAULT_EFFICIENCY = sp.Rational(1, 2)

_EQ3 = Source("narayanan", "§5.1, Eq. (3)")
_APPA = Source("korthikanti", "Appendix A")
_EQ4 = Source("narayanan", "§5.1, Eq. (4)")
_KAPLAN = Source("kaplan2020", "§2.1 (C ≈ 6N per token)")


def parameters_narayanan() -> sp.Expr:
    r"""Parameters of a GPT model (Narayanan Eq. 2) [parameters].

    .. math::

        P = 12\,L\,h^2\left(1 + \frac{13}{12h} + \frac{V + s}{12\,L\,h}\right)

    Examples
    --------
    The 1T configuration of Narayanan Table 1 (L = 128, h = 25600, V = 51200, s = 2048):

    >>> round(float(parameters_narayanan().subs({L: 128, h: 25600, V: 51200, s: 2048})) / 1e12, 3)
    1.008

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §5.1 Eq. (2), Table 1 (1008B).
    """
    return 12 * L * h**2 * (1 + sp.Rational(13, 12) / h + (V + s) / (12 * L * h))


_GEMM_COUNT = Source("memsym-derivation", "GEMM count: 2 x rows x cols per weight matrix, "
                     "2 s (d_qk + d_v) per head for attention (Narayanan §5.1 generalised)")


def gemm_flops_per_token(*, gated: bool = True, causal: bool = True) -> Total:
    r"""Forward FLOPs per token of one decoder layer, counted GEMM by GEMM [FLOP].

    .. math::

        \underbrace{2h(a + 2g)d_h}_{QKV} + \underbrace{2\,a d_h h}_{\text{proj}}
        + \underbrace{2\,(2|3)\,h f}_{\text{MLP}} + \underbrace{4\,s\,a\,d_h\,\kappa}_{\text{attention}}

    with :math:`\kappa = 1/2` for causal attention computed block-sparsely (flash) and 1
    otherwise (Megatron's unfused softmax computes the full square).  With
    :math:`g = a`, :math:`a d_h = h`, :math:`f = 4h`, ungated and non-causal it is
    Narayanan's :math:`24 h^2 + 4 s h` per token (§5.1).

    Parameters
    ----------
    gated : bool
        Gated MLP (SwiGLU: three h x f matrices).
    causal : bool
        Count only the causal half of the attention square.

    Examples
    --------
    Narayanan's forward FLOPs of a layer, :math:`24Bsh^2 + 4Bs^2h`, per token (B s tokens):

    >>> sp.expand(gemm_flops_per_token(gated=False, causal=False).expr.subs(
    ...     {g: a, d_h: h / a, f: 4 * h}))
    24*h**2 + 4*h*s

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, Appendix (the GEMMs of a layer).
    """
    kappa = sp.Rational(1, 2) if causal else 1
    terms = (
        Term("qkv", 2 * h * (a + 2 * g) * d_h, "QKV projection (GQA: g key/value heads)",
             _GEMM_COUNT, unit="FLOP"),
        Term("proj", 2 * a * d_h * h, "attention output projection", _GEMM_COUNT, unit="FLOP"),
        Term("mlp", (6 if gated else 4) * h * f, "MLP (gated: 3 matrices, else 2)",
             _GEMM_COUNT, unit="FLOP"),
        Term("attention", 4 * s * a * d_h * kappa,
             "QK^T and attention x V" + (" (causal half)" if causal else ""), _GEMM_COUNT,
             unit="FLOP"),
    )
    return Total("forward FLOPs per token and layer (GEMM count)", terms, unit="FLOP")


def flops_per_iteration_gemm(kind: str = "model", recompute: str = "none", *,
                             gated: bool = True, causal: bool = True, batch=B) -> Total:
    r"""FLOPs of one iteration from the GEMM count (the default convention) [FLOP].

    .. math::

        F = B\,s\,\bigl(L\,(3\,\phi + \phi_{\text{re}}) + 6\,h V\bigr)

    :math:`\phi` the forward FLOPs per token and layer (:func:`gemm_flops_per_token`);
    :math:`\phi_{\text{re}}` the recomputed forward (hardware FLOPs only): :math:`\phi`
    with full recomputation, its attention term with selective; :math:`6hV` the logits.

    Parameters
    ----------
    kind : {"model", "hardware"}
    recompute : {"none", "selective", "full"}
    gated, causal : bool
        As :func:`gemm_flops_per_token`.
    batch : sympy.Expr
        Sequences per iteration [sequences].

    Examples
    --------
    GPT-3 shapes give Korthikanti App. A's :math:`72BLsh^2(1 + s/(6h) + V/(12hL))`:

    >>> e = flops_per_iteration_gemm(gated=False, causal=False).expr
    >>> sp.simplify(e.subs({g: a, d_h: h / a, f: 4 * h})
    ...             - 72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L)))
    0

    References
    ----------
    .. [korthikanti] Korthikanti et al. 2022, arXiv:2205.05198, Appendix A (model FLOPs).
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, Appendix (FLOPs of a layer).
    """
    kind = choose("FLOP kind", kind, FLOP_KINDS)
    recompute = choose("recompute", recompute, RECOMPUTE)
    per = gemm_flops_per_token(gated=gated, causal=causal)
    layer = per.expr
    att = per["attention"].expr
    effective = recompute if kind == "hardware" else "none"
    # selective-op (torchtitan's per-op SAC) reruns every second forward matmul: wk, wo and
    # w3 of a Llama block, or k, o and fc2 of a GPT block (2hf either way); tests/test_engine_sac.py
    rerun = 2 * h * g * d_h + per["proj"].expr + 2 * h * f
    extra = {"none": 0, "full": layer, "selective": att, "selective-op": rerun}[effective]
    Bq = as_expr(batch)
    expr = Bq * s * (L * (3 * layer + extra) + 6 * h * V)
    return Total(f"{kind} FLOPs per iteration (GEMM count, {recompute} recompute)",
                 (Term("flops", expr, f"{kind} FLOPs: 3 x forward GEMMs (+ recomputed forward) "
                       "+ logits", _GEMM_COUNT, unit="FLOP"),), unit="FLOP")


def flops_per_iteration(kind: str = "model", recompute: str = "none",
                        formula: str = "memsym", batch=B) -> Total:
    r"""Floating-point operations of one training iteration on ``batch`` sequences [FLOP].

    .. math::

        \begin{aligned}
        \text{model}:&\; 72\,B L s h^2\left(1 + \tfrac{s}{6h} + \tfrac{V}{12hL}\right)
            &&\text{(Korthikanti App. A)}\\
        \text{hardware, selective}:&\; 72\,B L s h^2\left(1 + \tfrac{s}{3h} + \tfrac{V}{12hL}\right)
            &&\text{(Korthikanti App. A, as printed)}\\
        \text{hardware, full}:&\; 96\,B L s h^2\left(1 + \tfrac{s}{6h} + \tfrac{V}{16Lh}\right)
            &&\text{(Narayanan Eq. 3)}\\
        \text{6n}:&\; 6\,N\,B\,s \;\; (8\,N\,B\,s \text{ hardware with full recompute})
        \end{aligned}

    Model FLOPs ignore recomputation (what MFU counts); hardware FLOPs include it (HFU).
    Hand check of the selective line: recomputing :math:`QK^T` and the attention over V
    adds :math:`4Bs^2h` per layer, i.e. :math:`1 + 2s/(9h)`; the paper prints
    :math:`s/(3h)` (hardware/model ratio :math:`\approx 1 + s/(6h)`), which
    ``formula="korthikanti"`` keeps as the cited form; the default ``"memsym"`` counts the
    recomputed forward (the two differ below 1 % for :math:`s \ll h`, more as s/h grows).
    The formulas agree for model FLOPs and for full recomputation.

    Parameters
    ----------
    kind : {"model", "hardware"}
    recompute : {"none", "selective", "full"}
    formula : {"memsym", "korthikanti", "6n"}
        ``memsym`` (default, the same default as :func:`step_time`, :func:`mfu` and
        :func:`hfu`), ``korthikanti`` (App. A as printed) or ``6n`` (Kaplan).
    batch : sympy.Expr
        Sequences per iteration (default the global batch ``B``) [sequences].

    Examples
    --------
    Narayanan's Eq. (3) and Kaplan's :math:`C = 6N` per token, as printed:

    >>> flops_per_iteration("hardware", "full").expr
    96*B*L*h**2*s*(1 + s/(6*h) + V/(16*L*h))
    >>> flops_per_iteration("model", formula="6n").expr
    6*B*N*s

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §5.1 Eq. (3).
    .. [korthikanti] Korthikanti et al. 2022, arXiv:2205.05198, Appendix A.
    .. [kaplan2020] Kaplan et al. 2020, arXiv:2001.08361, §2.1 (:math:`C \approx 6N` per token).
    """
    kind = choose("FLOP kind", kind, FLOP_KINDS)
    recompute = choose("recompute", recompute, RECOMPUTE)
    formula = choose("FLOP formula", formula, FORMULAS)
    Bq = positive_or_symbolic(batch, "batch", limit="global_batch")
    effective = recompute if kind == "hardware" else "none"
    if formula == "6n":
        # selective-op on GPT shapes reruns k, o and fc2, 12h^2 of the 24h^2 forward: +N
        factor = {"full": 8, "selective-op": 7}.get(effective, 6)
        if effective == "selective":  # attention core only: Korthikanti's ratio 1 + s/(6h)
            expr = 6 * N * Bq * s * (1 + s / (6 * h))
        else:
            expr = factor * N * Bq * s
        term = Term("flops", expr, f"{kind} FLOPs per iteration, {factor if effective != 'selective' else 6}"
                    "·N·tokens", _KAPLAN, unit="FLOP")
    elif effective == "full":
        expr = 96 * Bq * L * s * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
        term = Term("flops", expr, "hardware FLOPs per iteration with full recomputation", _EQ3,
                    unit="FLOP")
    elif effective == "selective-op":
        # torchtitan's per-op SAC on a GPT block reruns k (2h^2), o (2h^2) and fc2 (8h^2) per
        # token and layer: 12h^2 = 72h^2/6 (tests/test_engine_sac.py runs the policy)
        expr = 72 * Bq * L * s * h**2 * (1 + s / (6 * h) + sp.Rational(1, 6) + V / (12 * h * L))
        term = Term("flops", expr, "hardware FLOPs per iteration with torchtitan's per-op "
                    "selective recomputation (every second forward matmul rerun)",
                    Source("torchtitan", "torchtitan/distributed/activation_checkpoint.py, "
                           "_custom_policy (mm_count % 2 == 0 recomputed)"), unit="FLOP")
    elif effective == "selective" and formula == "memsym":
        # Recomputing the attention core re-runs only the forward QK^T and attention*V:
        # 2Bs^2h + 2Bs^2h = 4Bs^2h FLOPs per layer = 72BLsh^2 * s/(18h) per iteration, so the
        # hardware/model ratio is 1 + s/(6h) + s/(18h) = 1 + 2s/(9h).  App. A prints 1 + s/(3h)
        # (three times the recomputed forward) and its "2.7 %" overhead for GPT-3 follows from
        # that; "korthikanti" reproduces the paper, "memsym" is what a GPU executes.
        expr = 72 * Bq * L * s * h**2 * (1 + 2 * s / (9 * h) + V / (12 * h * L))
        term = Term("flops", expr, "hardware FLOPs per iteration with selective recomputation "
                    "(recomputed attention forward counted)",
                    Source("memsym-derivation", "selective-recompute FLOPs: + 4Bs^2h per layer"),
                    unit="FLOP")
    elif effective == "selective":
        expr = 72 * Bq * L * s * h**2 * (1 + s / (3 * h) + V / (12 * h * L))
        term = Term("flops", expr, "hardware FLOPs per iteration with selective recomputation",
                    _APPA, unit="FLOP")
    else:
        expr = 72 * Bq * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
        term = Term("flops", expr, "model FLOPs per iteration (no recomputation counted)", _APPA,
                    unit="FLOP")
    return Total(f"{kind} FLOPs per iteration ({recompute} recompute, {formula})", (term,),
                 unit="FLOP")


def step_time(*, recompute: str = "none", communication: Total | None = None,
              overlap: str = "none", interleaved: bool = False, pipeline: bool = True,
              formula: str = "memsym", batch=B, gpus=G) -> Total:
    r"""Seconds per training step on one GPU [s].

    .. math::

        t_{\text{step}} = \underbrace{\frac{F_{\text{hw}}}{G\,F_{\text{peak}}\,\eta}}_{\text{compute}}
            \Bigl(1 + \underbrace{\tfrac{p-1}{m}}_{\text{bubble}}\Bigr)
            + (1-\omega)\sum_{\text{groups}} t_{\text{comm}}

    ``overlap``: ``none`` (:math:`\omega = 0`), ``fraction`` (symbol :math:`\omega`), or
    ``full`` (communication hides entirely behind compute up to the compute time:
    :math:`\max(0, t_\text{comm} - t_\text{compute})` is exposed).

    Parameters
    ----------
    recompute : {"none", "selective", "full"}
        Which hardware FLOPs are executed.
    communication : Total, optional
        Seconds per group (:func:`memsym.terms.communication.communication_time`) [s].
    overlap : {"none", "full", "fraction"}
    interleaved, pipeline : bool
        Bubble with the interleaved schedule; leave the bubble out (no pipeline).
    formula : {"memsym", "korthikanti", "6n"}
        FLOP count (:func:`flops_per_iteration`); the default is shared with :func:`mfu`
        and :func:`hfu`.
    batch : sympy.Expr
        Sequences per iteration :math:`B` (default: the symbol) [sequences].
    gpus : sympy.Expr
        GPUs :math:`G` (default: the symbol) [GPUs].

    Examples
    --------
    >>> st = step_time(pipeline=False, formula="6n")
    >>> st.expr
    6*B*N*s/(F*G*eta)

    Narayanan §5.1's GPT-3 run (175B, batch 1536, 1024 GPUs at 140 TFLOP/s, recomputation),
    by hand :math:`8 \cdot 175\mathrm{e}9 \cdot 1536 \cdot 2048/(1024 \cdot 140\mathrm{e}12) = 30.72` s:

    >>> step_time(recompute="full", pipeline=False, formula="6n").evaluate(
    ...     B=1536, N=175 * 10**9, s=2048, F=140 * 10**12, G=1024, eta=1)
    768/25

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §5.1 Eq. (4), §2.2.1-2.2.2 (bubble).
    .. [nccl-tests] NVIDIA nccl-tests ``doc/PERFORMANCE.md`` at a0b82b2260 (communication time).
    """
    overlap = choose("overlap", overlap, OVERLAPS)
    flops = flops_per_iteration("hardware", recompute, formula, batch).expr
    compute = flops / (positive_or_symbolic(gpus, "gpus", limit="gpus") * F * eta)
    terms = [Term("compute", compute, "hardware FLOPs per GPU at efficiency eta of peak",
                  _EQ4, unit="s")]
    if pipeline:
        terms.append(Term("bubble", bubble_fraction(interleaved) * compute,
                          "pipeline bubble: idle time relative to the ideal compute time",
                          Source("narayanan", "§2.2.1-2.2.2"), unit="s"))
    if communication is not None and len(communication):
        if overlap == "full":
            busy = sp.Add(*(term.expr for term in terms))
            exposed = sp.Max(0, communication.expr - busy)
            terms.append(Term("communication", exposed,
                              "communication not hidden behind compute (full overlap assumed)",
                              Source("nccl-tests", "doc/PERFORMANCE.md"), unit="s"))
        else:
            keep = 1 if overlap == "none" else 1 - omega
            for term in communication:
                terms.append(Term(f"comm_{term.key}", keep * term.expr,
                                  term.description + (" (exposed fraction 1 - omega)"
                                                      if overlap == "fraction" else ""),
                                  term.source, unit="s", label=term.label))
    return Total("step time per GPU", tuple(terms), unit="s")


def mfu(step: Total | sp.Expr, formula: str = "memsym", batch=B, gpus=G) -> sp.Expr:
    r"""Model FLOPs utilisation: model FLOPs over the peak the GPUs could do in the step [1].

    .. math::

        \mathrm{MFU} = \frac{F_{\text{model}}}{G\,F_{\text{peak}}\,t_{\text{step}}}

    Parameters
    ----------
    step : Total or sympy.Expr
        The step time :math:`t_{\text{step}}` [s].
    formula : {"memsym", "korthikanti", "6n"}
        FLOP count (:func:`flops_per_iteration`).
    batch : sympy.Expr
        Sequences per iteration :math:`B` [sequences].
    gpus : int
        Number of GPUs (world size) [GPUs].

    Examples
    --------
    A step of only :math:`F_{\text{model}}/(G F_{\text{peak}} \eta)` has MFU :math:`\eta`:

    >>> mfu(step_time(pipeline=False))
    eta

    Korthikanti Table 5, 175B (Table 3 shapes, 64 A100s): 13.75 s per iteration, MFU 51.4 %:

    >>> from memsym.symbols import F, L, V, h, s
    >>> u = mfu(sp.Rational("13.75"), "korthikanti", batch=64, gpus=64)
    >>> round(100 * float(u.subs({L: 96, h: 12288, s: 2048, V: 51200, F: 312 * 10**12})), 1)
    51.4

    References
    ----------
    .. [korthikanti] Korthikanti et al. 2022, arXiv:2205.05198, §6.3, Table 5, Appendix A.
    """
    return _utilisation(step, lambda: flops_per_iteration("model", "none", formula, batch), gpus)


def hfu(step: Total | sp.Expr, recompute: str = "none", formula: str = "memsym",
        batch=B, gpus=G) -> sp.Expr:
    r"""Hardware FLOPs utilisation: executed FLOPs (recomputation included) over peak [1].

    .. math::

        \mathrm{HFU} = \frac{F_{\text{hw}}}{G\,F_{\text{peak}}\,t_{\text{step}}}

    ``formula`` defaults to ``"memsym"`` like :func:`step_time`, so the HFU of a step
    computed with the defaults is :math:`\eta` when nothing else takes time.

    Parameters
    ----------
    step : Total or sympy.Expr
        The step time :math:`t_{\text{step}}` [s].
    recompute : {"none", "selective", "full"}
        The recomputation the executed FLOPs include.
    formula : {"memsym", "korthikanti", "6n"}
        FLOP count (:func:`flops_per_iteration`).
    batch : sympy.Expr
        Sequences per iteration :math:`B` [sequences].
    gpus : int
        Number of GPUs (world size) [GPUs].

    Examples
    --------
    >>> hfu(step_time(recompute="full", pipeline=False), "full")
    eta
    >>> hfu(step_time(recompute="selective", pipeline=False), "selective")
    eta

    Korthikanti Table 5, 175B, selective recomputation (App. A as printed): HFU 52.8 %:

    >>> from memsym.symbols import F, L, V, h, s
    >>> u = hfu(sp.Rational("13.75"), "selective", "korthikanti", batch=64, gpus=64)
    >>> round(100 * float(u.subs({L: 96, h: 12288, s: 2048, V: 51200, F: 312 * 10**12})), 1)
    52.8

    References
    ----------
    .. [korthikanti] Korthikanti et al. 2022, arXiv:2205.05198, §6.3, Table 5, Appendix A.
    """
    return _utilisation(step, lambda: flops_per_iteration("hardware", recompute, formula, batch), gpus)


def _utilisation(step, flops, gpus) -> sp.Expr:
    """``flops()`` over the peak FLOPs of ``gpus`` GPUs in ``step``; not cancelled with a Max."""
    t_step = step.expr if isinstance(step, Total) else as_expr(step)
    out = flops().expr / (positive_or_symbolic(gpus, "gpus", limit="gpus") * F * t_step)
    return out if t_step.has(sp.Max) else sp.cancel(out)
