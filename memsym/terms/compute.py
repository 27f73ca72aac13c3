r"""FLOPs per iteration, step time, MFU / HFU, training time, GPU-hours and cost.

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
.. [seed004] shared/seeds/004: cost = price x estimated training time.
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError, choose
from ..symbols import B, F, G, L, N, T, V, a, d_h, eta, f, g, h, omega, price, s
from ..term import Source, Term, Total
from ..values import as_expr, positive
from .activations import RECOMPUTE
from .pipeline import bubble_fraction

__all__ = ["FLOP_KINDS", "OVERLAPS", "RECOMPUTE", "parameters_narayanan", "flops_per_iteration",
           "gemm_flops_per_token", "flops_per_iteration_gemm", "FLOP_CONVENTIONS",
           "step_time", "mfu", "hfu", "training_time", "training_time_from_steps",
           "gpu_hours", "training_cost", "step_report", "DEFAULT_EFFICIENCY"]

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
    """
    return 12 * L * h**2 * (1 + sp.Rational(13, 12) / h + (V + s) / (12 * L * h))


#: Named FLOP conventions: ``gemm-count`` (default: every GEMM of a GQA / gated-MLP layer
#: counted from its shapes, attention included) and ``6n`` (Kaplan's 6 N per token, no
#: attention term) — kept so a user can reproduce numbers quoted with it.
FLOP_CONVENTIONS = ("gemm-count", "6n")
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
    >>> sp.expand(gemm_flops_per_token(gated=False, causal=False).expr.subs(
    ...     {g: a, d_h: h / a, f: 4 * h}))
    24*h**2 + 4*h*s

    References
    ----------
    Narayanan et al. 2021 §5.1 (the GEMMs of a layer).
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
    Korthikanti et al. 2022 App. A; Narayanan et al. 2021 §5.1.
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
        Sequences per iteration (default the global batch ``B``).

    Examples
    --------
    >>> flops_per_iteration("hardware", "full").expr
    96*B*L*h**2*s*(1 + s/(6*h) + V/(16*L*h))
    >>> flops_per_iteration("model", formula="6n").expr
    6*B*N*s

    References
    ----------
    Narayanan et al. 2021 Eq. 3; Korthikanti et al. 2022 App. A; Kaplan et al. 2020 §2.1.
    """
    kind = choose("FLOP kind", kind, FLOP_KINDS)
    recompute = choose("recompute", recompute, RECOMPUTE)
    formula = choose("FLOP formula", formula, FORMULAS)
    Bq = _arg(batch, "batch", "global_batch")
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
        Seconds per group (:func:`memsym.terms.communication.communication_time`).
    overlap : {"none", "full", "fraction"}
    interleaved, pipeline : bool
        Bubble with the interleaved schedule; leave the bubble out (no pipeline).
    formula : {"memsym", "korthikanti", "6n"}
        FLOP count (:func:`flops_per_iteration`); the default is shared with :func:`mfu`
        and :func:`hfu`.
    batch, gpus : sympy.Expr
        Sequences per iteration :math:`B` and GPUs :math:`G` (defaults: the symbols) [GPUs].

    Examples
    --------
    >>> st = step_time(pipeline=False, formula="6n")
    >>> st.expr
    6*B*N*s/(F*G*eta)
    >>> st.evaluate(B=1024, N=175 * 10**9, s=2048, F=312 * 10**12, G=1024, eta=1) > 0
    True
    """
    overlap = choose("overlap", overlap, OVERLAPS)
    flops = flops_per_iteration("hardware", recompute, formula, batch).expr
    compute = flops / (_arg(gpus, "gpus", "gpus") * F * eta)
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
    gpus : int
        Number of GPUs (world size) [GPUs].


    Examples
    --------
    Without pipeline, communication or recomputation MFU is the efficiency itself:

    >>> mfu(step_time(pipeline=False))
    eta

    References
    ----------
    Korthikanti et al. 2022 §6.3 (after PaLM).
    """
    t_step = step.expr if isinstance(step, Total) else as_expr(step)
    model = flops_per_iteration("model", "none", formula, batch).expr
    gpus = _arg(gpus, "gpus", "gpus")
    return sp.cancel(model / (gpus * F * t_step)) if not t_step.has(sp.Max) \
        else model / (gpus * F * t_step)


def hfu(step: Total | sp.Expr, recompute: str = "none", formula: str = "memsym",
        batch=B, gpus=G) -> sp.Expr:
    r"""Hardware FLOPs utilisation: executed FLOPs (recomputation included) over peak [1].

    .. math::

        \mathrm{HFU} = \frac{F_{\text{hw}}}{G\,F_{\text{peak}}\,t_{\text{step}}}

    ``formula`` defaults to ``"memsym"`` like :func:`step_time`, so the HFU of a step
    computed with the defaults is :math:`\eta` when nothing else takes time.

    Parameters
    ----------
    gpus : int
        Number of GPUs (world size) [GPUs].


    Examples
    --------
    >>> hfu(step_time(recompute="full", pipeline=False), "full")
    eta
    >>> hfu(step_time(recompute="selective", pipeline=False), "selective")
    eta

    References
    ----------
    Korthikanti et al. 2022 §6.3.
    """
    t_step = step.expr if isinstance(step, Total) else as_expr(step)
    hw = flops_per_iteration("hardware", recompute, formula, batch).expr
    out = hw / (_arg(gpus, "gpus", "gpus") * F * t_step)
    return out if t_step.has(sp.Max) else sp.cancel(out)


def _arg(value, what: str, limit: str | None = None, allow_zero: bool = False) -> sp.Expr:
    """A public function's argument: a symbol or expression passes through; a number must be
    exact, finite, > 0 (>= 0 with ``allow_zero``) and within ``limit`` (issue 15: refuse at
    the entry, naming the input, instead of returning ``inf`` later)."""
    if isinstance(value, sp.Basic) and not value.is_number:
        return as_expr(value, what)
    return positive(value, what, limit=limit, allow_zero=allow_zero)


def training_time(recompute: bool = True, tokens=T, params=N, gpus=G) -> Total:
    r"""End-to-end training time for ``tokens`` tokens (Narayanan Eq. 4) [s].

    .. math::

        t \approx \frac{8\,T\,P}{n\,X} \quad\text{(with recomputation; } 6\,T P/(n X)
        \text{ without)}, \qquad X = \eta\,F_{\text{peak}}

    Parameters
    ----------
    params : int
        Total number of model parameters [parameters].

    gpus : int
        Number of GPUs (world size) [GPUs].

    Examples
    --------
    GPT-3 175B on 300B tokens, 1024 GPUs at 140 TFLOP/s: about 34 days.

    >>> tt = training_time()
    >>> days = tt.evaluate(T=300 * 10**9, N=175 * 10**9, G=1024, F=140 * 10**12, eta=1) / 86400
    >>> round(float(days), 1)
    33.9

    References
    ----------
    Narayanan et al. 2021 §5.1, Eq. (4).
    """
    factor = 8 if recompute else 6
    expr = factor * _arg(tokens, "tokens", "tokens") * _arg(params, "params", "parameters") \
        / (_arg(gpus, "gpus", "gpus") * F * eta)
    return Total("training time", (Term("training", expr, f"{factor}·T·P / (n·X), X = eta·F",
                                        _EQ4, unit="s"),), unit="s")


def training_time_from_steps(step: Total, tokens=T, batch=B) -> Total:
    r"""Training time as steps x step time: :math:`T/(B\,s)\cdot t_{\text{step}}` [s].

    Examples
    --------
    >>> training_time_from_steps(step_time(pipeline=False, formula="6n")).expr
    6*N*T/(F*G*eta)
    """
    steps = _arg(tokens, "tokens", "tokens") / (_arg(batch, "batch", "global_batch") * s)
    return Total("training time", tuple(
        Term(term.key, sp.cancel(steps * term.expr) if not term.expr.has(sp.Max) else steps * term.expr,
             term.description + "; times the T/(B s) steps", term.source, unit="s",
             label=term.label) for term in step), unit="s")


def gpu_hours(time: Total, gpus=G) -> Total:
    r"""GPU-hours: :math:`G\cdot t/3600` [GPU h].

    Parameters
    ----------
    gpus : int
        Number of GPUs (world size) [GPUs].


    Examples
    --------
    >>> gpu_hours(training_time()).expr
    N*T/(450*F*eta)
    """
    gpus = _arg(gpus, "gpus", "gpus")
    return Total("GPU-hours", tuple(
        Term(term.key, sp.cancel(gpus * term.expr / 3600) if not term.expr.has(sp.Max)
             else gpus * term.expr / 3600,
             term.description + "; in GPU-hours", Source("seed004", "チェックリスト 1 (単価 × 推定学習時間)"),
             unit="GPU h", label=term.label) for term in time), unit="GPU h")


def training_cost(time: Total, gpus=G, rate=price) -> Total:
    r"""Cost: price per GPU-hour x GPU-hours (seed 004's checklist) [currency].

    Parameters
    ----------
    gpus : int
        Number of GPUs (world size) [GPUs].


    Examples
    --------
    >>> cost = training_cost(training_time())
    >>> cost.expr
    N*T*price/(450*F*eta)
    """
    hours = gpu_hours(time, gpus)
    rate = _arg(rate, "price per GPU-hour", allow_zero=True)
    return Total("training cost", tuple(
        Term(term.key, rate * term.expr, "price per GPU-hour x GPU-hours",
             Source("seed004", "チェックリスト 1 (単価 × 推定学習時間)"), unit="currency",
             label=term.label) for term in hours), unit="currency")


# --- plain-number report ---------------------------------------------------------------------

def _num(x, what: str = "result", inputs=None):
    """An exact result as a plain number: ints exactly, others as finite floats (a result
    past float range is refused naming the extreme inputs, never returned as ``inf``)."""
    from ..numeric import finite_float

    x = as_expr(x)
    if x.is_Integer:
        return int(x)
    return finite_float(x, what, inputs)


def step_report(values: dict, *, cluster=None, gpu=None, precision: str = "bf16",
                sharding: str | None = "distributed-optimizer", recompute: str = "none",
                sequence_parallel: bool = False, context: str | None = None,
                expert: bool = False, interleaved: bool = False, scatter_gather: bool = False,
                overlap: str = "none", efficiency=None, formula: str = "memsym",
                gpus_per_node=None, intra_node_bandwidth=None, inter_node_bandwidth=None,
                dp_params=None, arch=None, layout=None, training=None,
                mfu_flops: str = "gemm", pipelined_fsdp: bool = False) -> dict:
    """Communication, bubble, FLOPs, step time and MFU of one configuration, as plain numbers.

    Parameters
    ----------
    values : dict
        Registry names to numbers: the model (``N``, ``s``, ``h``, ``L``, ``V``; ``g``,
        ``d_h`` for CP; ``k``, ``L_m`` for EP), the layout (``t``, ``p``, ``d``, ``c``,
        ``e``, ``v``), ``b`` and ``m``; optional ``b_c`` (default 2), ``b_g`` / ``b_hp``
        (default from the sharding's byte widths), ``eta``, ``omega``.
    cluster : str or Cluster, optional
        A preset (:func:`memsym.hardware.cluster`); or ``gpu`` with the bandwidth keywords.
    precision : {"bf16", "fp16", "fp8", "fp32"}
        Byte widths (:func:`memsym.terms.model_state.byte_widths`) and the peak
        (:meth:`memsym.hardware.GPU.peak`; fp32 is priced at the TF32 tensor-core peak, which
        ``assumptions["peak_note"]`` says).
    efficiency : number, optional
        :math:`\\eta`; default ``values["eta"]`` or :data:`DEFAULT_EFFICIENCY` (1/2).
    dp_params : int, optional
        Parameters whose gradients the data-parallel group reduces, before the :math:`p\\,t`
        split (default ``values["N"]``).  ``N`` prices the FLOPs, which for a mixture of
        experts follow the *active* parameters; every expert's gradients are reduced, so pass
        the total count there (Mixtral 8x7B: 46.7e9 total against 12.9e9 active).
    pipelined_fsdp : bool
        FSDP2 stages under ``torch.distributed.pipelining`` (torchtitan with PP): the DP
        traffic is one all-gather and one reduce-scatter per step
        (:func:`memsym.terms.communication.communication_per_step`).
    arch, layout, training : optional
        A resolved architecture with its :class:`memsym.training.Layout` and
        :class:`memsym.training.Training`: then the step time, the bubble and the MFU are
        predicted by :func:`memsym.timing.step.step_time` (GEMMs after the splits on the
        GPU's efficiency curve, collectives with overlap, Megatron's exact schedule; the
        breakdown in ``step_time_parts_s``), ``efficiency`` being the explicit achieved GEMM
        efficiency override (None: predicted); without them, the closed form
        :func:`step_time` at ``efficiency``.
    mfu_flops : {"gemm", "6n"}
        The MFU numerator with ``arch``: ``"gemm"`` the model FLOPs counted from the GEMM
        shapes and causal attention (:func:`memsym.timing.gemm.forward_flops_per_token`
        x 3, as Meta and docs/time-accuracy.md count them), ``"6n"`` the 6N-per-token
        convention of :func:`flops_per_iteration`.
    Other keywords as :func:`memsym.terms.communication.communication_per_step` and
    :func:`step_time`.

    Returns
    -------
    dict
        JSON-ready: ``communication`` {group: {"bytes", "seconds", "link"}}, ``bubble``,
        ``flops`` {"model", "hardware"} per iteration, ``step_time_s``, ``mfu``, ``hfu``,
        ``global_batch``, ``tokens_per_step``, ``warnings``, ``assumptions``.

    Examples
    --------
    >>> rep = step_report({"N": 7 * 10**9, "s": 4096, "b": 1, "h": 4096, "L": 32, "V": 32000,
    ...                    "t": 8, "p": 1, "d": 1, "m": 1}, cluster="dgx-h100", sharding=None)
    >>> rep["communication"]["tp"]["bytes"], rep["communication"]["tp"]["link"]
    (7516192768, 'intra')
    >>> round(rep["communication"]["tp"]["seconds"] * 1000, 2)  # 7.5 GB at 450 GB/s each way
    16.7
    >>> rep["assumptions"]["layout_order"]
    'tp, cp, pp, dp'
    """
    from .. import hardware
    from ..values import as_values
    from .communication import (LAYOUT_ORDER, communication_per_step, communication_time,
                                layout_warnings, placement)
    from .model_state import byte_widths

    vals = dict(values)
    precision_key = choose("precision", precision, hardware.PRECISIONS)
    defaults = {"t": 1, "p": 1, "d": 1, "c": 1, "e": 1, "v": 1, "m": 1, "b": 1, "b_c": 2}
    for key, val in defaults.items():
        vals.setdefault(key, val)
    if sharding is not None:
        widths = byte_widths(sharding, precision, convention="seed000")  # unknown precision refused there
        for sym, width in widths.items():
            vals.setdefault(sym.name, width)
    if cluster is not None:
        clu = hardware.cluster(cluster)
    else:
        dev = hardware.gpu(gpu) if gpu is not None else None
        if dev is None:
            raise InvalidValueError("step_report needs a cluster (e.g. dgx-h100) or a gpu")
        clu = hardware.cluster_for(dev, gpus_per_node or 8, intra_node_bandwidth, inter_node_bandwidth)
    changes = {}
    if gpus_per_node is not None:
        changes["gpus_per_node"] = int(gpus_per_node)
    if intra_node_bandwidth is not None:
        changes["intra_node_bandwidth"] = intra_node_bandwidth
    if inter_node_bandwidth is not None:
        changes["inter_node_bandwidth"] = inter_node_bandwidth
    if changes:
        clu = clu.with_(**changes)
    for key, val in clu.values(precision).items():
        vals.setdefault(key, val)
    eff = efficiency if efficiency is not None else vals.get("eta", DEFAULT_EFFICIENCY)
    vals["eta"] = positive(eff, "efficiency")
    if vals["eta"] > 1:
        raise InvalidValueError(f"efficiency must be in (0, 1], got {vals['eta']}")
    if context is None and int(vals["c"]) > 1:
        context = "ring"
    expert = expert or int(vals["e"]) > 1
    if expert:
        vals.setdefault("L_m", vals.get("L"))
    gpus_total = int(vals["t"]) * int(vals["p"]) * int(vals["c"]) * int(vals["d"])
    batch = int(vals["b"]) * int(vals["m"]) * int(vals["d"])
    vals.setdefault("G", gpus_total)
    vals.setdefault("B", batch)
    pipe = int(vals["p"]) > 1
    opts = dict(sequence_parallel=sequence_parallel, pipeline=pipe, scatter_gather=scatter_gather,
                interleaved=interleaved, sharding=sharding, context=context, expert=expert,
                recompute=recompute, dp_params=dp_params, pipelined_fsdp=pipelined_fsdp)
    links = placement(vals, clu.gpus_per_node)
    byte_total = communication_per_step(**opts)
    time_total = communication_time(placement_map=links, **opts)
    step = step_time(recompute=recompute, communication=time_total, overlap=overlap,
                     interleaved=interleaved, pipeline=pipe, formula=formula)
    needed = (byte_total.free_symbols | step.free_symbols)
    exact_vals = as_values({k: v for k, v in vals.items()
                            if any(sym.name == getattr(k, "name", k) for sym in needed)})
    bytes_bd = byte_total.breakdown(exact_vals)
    secs_bd = time_total.breakdown(exact_vals)
    t_step = step.evaluate(exact_vals)
    model = flops_per_iteration("model", "none", formula).evaluate(exact_vals)
    hardware_flops = flops_per_iteration("hardware", recompute, formula).evaluate(exact_vals)
    peak = exact_vals[F] * gpus_total
    bubble = bubble_fraction(interleaved).xreplace(exact_vals) if pipe else sp.Integer(0)
    given = {k.name: v for k, v in exact_vals.items()}

    def num(x, what):
        return _num(x, what, given)

    if arch is not None:
        return _predicted_report(locals(), arch, layout, training, clu, efficiency, mfu_flops,
                                 num)
    return {
        "communication": {key: {"bytes": num(bytes_bd[key], f"{key} bytes"),
                                "seconds": num(secs_bd[key], f"{key} time [s]"),
                                "link": links[key]} for key in byte_total.keys},
        "bubble": num(bubble, "bubble"),
        "flops": {"model": num(model, "model FLOPs"), "hardware": num(hardware_flops, "hardware FLOPs")},
        "step_time_s": num(t_step, "step time [s]"),
        "mfu": num(model / (peak * t_step), "MFU"),
        "hfu": num(hardware_flops / (peak * t_step), "HFU"),
        "global_batch": batch,
        "tokens_per_step": batch * int(vals["s"]),
        "gpus": gpus_total,
        "warnings": layout_warnings(vals, clu.gpus_per_node),
        "assumptions": {
            "cluster": clu.name, "gpu": clu.gpu.name, "precision": precision_key,
            "peak_flops_per_gpu": _num(exact_vals[F]), "efficiency": _num(exact_vals[eta]),
            "gpus_per_node": clu.gpus_per_node,
            "intra_node_bandwidth_bytes_per_s": _num(clu.intra_node_bandwidth),
            "inter_node_bandwidth_bytes_per_s": _num(clu.inter_node_bandwidth),
            "overlap": overlap, "recompute": recompute, "layout_order": ", ".join(LAYOUT_ORDER),
            "bandwidth_convention": "per direction (NVLink: half the vendor figure; NIC per port)",
            **({"peak_note": hardware.FP32_PEAK_NOTE} if precision_key == "fp32" else {}),
        },
    }


def _predicted_report(ctx: dict, arch, layout, training, clu, efficiency, mfu_flops, num) -> dict:
    """:func:`step_report` with the step time of :func:`memsym.timing.step.step_time` (exact
    schedule) and the MFU on GEMM-count (or 6N) model FLOPs."""
    from dataclasses import replace as _replace

    from ..timing.gemm import forward_flops_per_token, shape_of
    from ..timing.schedule import bubble_fraction as schedule_bubble
    from ..timing.step import step_time as predicted_step
    from ..training import microbatches

    kind = choose("MFU FLOP count", mfu_flops, ("gemm", "6n"))
    if microbatches(layout, training) is None:     # one micro-batch per step when none given
        training = _replace(training, num_microbatches=1, global_batch_size=None)
    eta_gemm = None if efficiency is None else float(positive(efficiency, "efficiency"))
    st = predicted_step(arch, layout, training, clu.gpu.name, clu, eta_gemm=eta_gemm)
    batch, gpus_total = ctx["batch"], ctx["gpus_total"]
    s_ = training.seq_length
    peak = float(clu.gpu.peak(training.precision)) * gpus_total
    six_n = float(ctx["model"])
    gemm = 3.0 * forward_flops_per_token(shape_of(arch), s_, causal=True) * batch * s_
    model = gemm if kind == "gemm" else six_n
    # hardware FLOPs: full recomputation runs every forward twice (4 passes, not 3);
    # selective recomputes attention's core only (priced in the step, not counted here)
    hardware_ = model * (sp.Rational(4, 3) if training.recompute == "full" else 1)
    busy = st.parts["pipeline"] - st.bubble
    base = ctx["bytes_bd"], ctx["secs_bd"], ctx["byte_total"], ctx["links"]
    bytes_bd, secs_bd, byte_total, links = base
    return {
        "communication": {key: {"bytes": num(bytes_bd[key], f"{key} bytes"),
                                "seconds": num(secs_bd[key], f"{key} time [s]"),
                                "exposed_seconds": float(st.parts.get(key, 0.0)),
                                "link": links[key]} for key in byte_total.keys},
        # the schedule's idle fraction on uniform stages (Megatron's order simulated: (p-1)/m
        # for 1F1B, (p-1)/(v m) interleaved where that holds); its seconds with the real
        # stage times (embedding, output layer, uneven ends) are step_time_parts_s["bubble"]
        "bubble": float(schedule_bubble(
            "gpipe" if training.schedule == "gpipe" else "1f1b", layout.p,
            st.assumptions["microbatches"], layout.v or 1,
            backward_ratio=3 if training.recompute == "full" else 2)),
        "bubble_of_busy_time": float(st.bubble / busy) if busy > 0 else 0.0,
        "flops": {"model": float(model), "hardware": float(hardware_), "model_6n": six_n,
                  "model_gemm": float(gemm)},
        "step_time_s": float(st.total),
        "step_time_parts_s": {k: float(v) for k, v in st.parts.items()},
        "mfu": float(model / (peak * st.total)),
        "hfu": float(hardware_ / (peak * st.total)),
        "global_batch": batch,
        "tokens_per_step": batch * int(s_),
        "gpus": gpus_total,
        "warnings": ctx["layout_warnings"](ctx["vals"], clu.gpus_per_node),
        "assumptions": {
            "cluster": clu.name, "gpu": clu.gpu.name, "precision": training.precision,
            "peak_flops_per_gpu": float(clu.gpu.peak(training.precision)),
            "efficiency": None if eta_gemm is None else eta_gemm,
            "step_model": "memsym.timing.step.step_time: GEMM shapes on the efficiency curve, "
                          "collectives with overlap, exact pipeline schedule",
            "mfu_flops": kind, "microbatches": st.assumptions["microbatches"],
            "overlap": {k: getattr(st.assumptions["overlap"], k)
                        for k in st.assumptions["overlap"].__dataclass_fields__},
            "gpus_per_node": clu.gpus_per_node,
            "intra_node_bandwidth_bytes_per_s": float(clu.intra_node_bandwidth),
            "inter_node_bandwidth_bytes_per_s": float(clu.inter_node_bandwidth),
            "recompute": training.recompute,
            "launchable": st.assumptions["launchable"],
        },
    }
