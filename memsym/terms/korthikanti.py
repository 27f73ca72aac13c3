r"""Korthikanti et al. 2022's activation memory per transformer layer, as the paper prints it.

.. math:: sbh\left(34 + \frac{5as}{h}\right)

(Table 2's rows: no parallelism, tensor parallelism, tensor + sequence parallelism, each
without and with selective or full recomputation).  memsym's own derivation, term by term, is
:func:`memsym.terms.activations.layer_activations`; the catalogue proves the two equal.

References
----------
.. [korthikanti] Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
   Models", arXiv:2205.05198, §4.1 (Eq. 1), §4.2 (Eq. 2, 4), Table 2.
"""

from __future__ import annotations

from ..errors import choose
from ..symbols import a, b, h, s, t
from ..term import Source, Term
from ..vocabulary import RECOMPUTE

__all__ = ["PARALLEL", "korthikanti", "korthikanti_terms"]

#: Parallel settings of Korthikanti's Table 2.
PARALLEL = ("none", "tp", "tp+sp")
_K = "korthikanti"


def korthikanti(parallel: str = "none", recompute: str = "none") -> Term:
    r"""Korthikanti et al.'s activation memory per transformer layer, as printed [bytes].

    .. math::

        \begin{array}{lll}
        \text{none} & sbh\,(34 + 5as/h) & \text{Eq. 1} \\
        \text{tp} & sbh\,(10 + 24/t + 5as/(ht)) & \text{Eq. 2} \\
        \text{tp+sp} & \frac{sbh}{t}\,(34 + 5as/h) & \text{Eq. 4} \\
        \text{tp, selective} & sbh\,(10 + 24/t) & \text{Table 2} \\
        \text{tp+sp, selective} & 34\,sbh/t & \text{Table 2} \\
        \text{full recompute} & 2\,sbh & \text{Table 2}
        \end{array}

    ``parallel="none"`` with selective recompute is the tp row at t = 1, 34sbh (seed 002).

    Parameters
    ----------
    parallel : {"none", "tp", "tp+sp"}
        No parallelism, tensor parallelism, tensor + sequence parallelism.
    recompute : {"none", "selective", "full"}
        Activation recomputation.

    Returns
    -------
    Term
        Per layer, per micro-batch, per GPU [bytes]; GPT layer with a 4h GeLU MLP, dropout,
        no flash attention.

    Examples
    --------
    >>> korthikanti().expr
    b*h*s*(5*a*s/h + 34)
    >>> float(korthikanti("none", "full").evaluate(s=4096, b=1, h=4096) * 32 / 10**9)  # seed 002
    1.073741824

    References
    ----------
    Korthikanti et al. 2022, arXiv:2205.05198, §4.1, §4.2, Table 2.
    """
    parallel = choose("parallel setting", parallel, PARALLEL)
    recompute = choose("recompute mode", recompute, RECOMPUTE)
    sbh = s * b * h
    if recompute == "full":
        # REF: korthikanti, Table 2 (full activation recomputation: only the layer input)
        return Term("korthikanti.full", 2 * sbh, "full recompute: only the layer input is kept",
                    Source(_K, "Table 2, full activation recomputation"), label="2sbh")
    if parallel == "none" and recompute == "none":
        expr, loc = sbh * (34 + 5 * a * s / h), "§4.1, Eq. 1"
    elif parallel == "none":
        expr, loc = sbh * 34, "Table 2, tensor parallel + selective recompute, at t = 1"
    elif parallel == "tp" and recompute == "none":
        expr, loc = sbh * (10 + 24 / t + 5 * a * s / (h * t)), "§4.2.1, Eq. 2; Table 2"
    elif parallel == "tp":
        expr, loc = sbh * (10 + 24 / t), "§5, Table 2, tensor parallel + selective"
    elif recompute == "none":
        expr, loc = sbh / t * (34 + 5 * a * s / h), "§4.2.2, Eq. 4; Table 2"
    else:
        expr, loc = 34 * sbh / t, "Table 2, tensor + sequence parallel + selective"
    key = f"korthikanti.{parallel}.{recompute}"
    return Term(key, expr, f"activations per layer ({parallel}, recompute {recompute}), as printed",
                Source(_K, loc), label=key)


def korthikanti_terms() -> tuple[Term, ...]:
    r"""Every row of Korthikanti's Table 2 (and Eq. 1) as a Term, in table order.

    The rows of :func:`korthikanti` [bytes per layer]: no parallelism, tp, tp+sp without
    recompute; none, tp, tp+sp with selective recompute; full recompute:

    .. math::

        sbh\left(34 + \tfrac{5as}{h}\right),\;
        sbh\left(10 + \tfrac{24}{t} + \tfrac{5as}{ht}\right),\;
        \tfrac{sbh}{t}\left(34 + \tfrac{5as}{h}\right),\;
        34\,sbh,\; sbh\left(10 + \tfrac{24}{t}\right),\; \tfrac{34\,sbh}{t},\; 2\,sbh

    Examples
    --------
    >>> [t.key for t in korthikanti_terms()][:2]
    ['korthikanti.none.none', 'korthikanti.tp.none']

    Table 2's last row, full recompute, keeps only the layer input, 2sbh:

    >>> korthikanti_terms()[-1].expr
    2*b*h*s

    References
    ----------
    .. [korthikanti] arXiv:2205.05198, §4.1 (Eq. 1), §4.2 (Eq. 2, 4), Table 2.
    """
    rows = [("none", "none"), ("tp", "none"), ("tp+sp", "none"), ("none", "selective"),
            ("tp", "selective"), ("tp+sp", "selective"), ("none", "full")]
    return tuple(korthikanti(p_, r_) for p_, r_ in rows)
