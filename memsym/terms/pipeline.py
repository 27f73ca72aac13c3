r"""Pipeline bubble and the batch identity that ties micro-batches, microbatches and d.

The bubble is the idle time of a pipeline flush relative to the ideal compute time
(Narayanan et al. 2021 §2.2.1): :math:`(p-1)/m`, and :math:`(p-1)/(v\,m)` with the
interleaved schedule (§2.2.2).  The global batch is :math:`B = b\,m\,d` (§3, whose notation it is: at a fixed
number of GPUs, changing t changes d and therefore the global batch, a hyper-parameter change).

References
----------
.. [narayanan2021] Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
   Clusters Using Megatron-LM", SC21, arXiv:2104.04473, §2.2.
"""

from __future__ import annotations

import sympy as sp

from ..symbols import b, d, m, p, v
from ..term import Source, Term
from ..values import as_expr

__all__ = ["bubble_fraction", "bubble_term", "global_batch", "data_parallel_for"]

_BUBBLE = Source("narayanan", "§2.2.1 (bubble (p-1)/m), §2.2.2 (interleaved (p-1)/(v m))")


def bubble_fraction(interleaved: bool = False, stages=p, microbatches=m, chunks=v) -> sp.Expr:
    r"""Pipeline bubble as a fraction of the ideal compute time [1].

    .. math::

        \frac{p-1}{m} \quad\text{(1F1B / GPipe)}, \qquad
        \frac{p-1}{v\,m} \quad\text{(interleaved, } v \text{ chunks per rank)}

    It can exceed 1: with 8 stages and 4 microbatches the pipeline idles 175 % of the
    useful time (seed 002).  The interleaved form holds only where Megatron-LM launches the
    layout with N | m (m >= p); :func:`memsym.terms.pipeline_order.bubble_fraction` prices
    every other case as it runs (m < p interleaved is about (p - 1)/m, not (p - 1)/(v m)),
    and takes this closed form where it holds (the one place it is written).

    Parameters
    ----------
    interleaved : bool
        Use the interleaved schedule (``v`` model chunks per pipeline rank).
    stages : sympy.Expr
        Pipeline stages :math:`p` [GPUs].
    microbatches : sympy.Expr
        Microbatches per step :math:`m` [1].
    chunks : sympy.Expr
        Model chunks per pipeline rank :math:`v` [1].

    Examples
    --------
    Narayanan's :math:`t_{pb}/t_{id} = (p-1)/m` (§2.2.1) and :math:`(p-1)/(v\,m)` (§2.2.2):

    >>> bubble_fraction()
    (p - 1)/m
    >>> bubble_fraction(True)
    (p - 1)/(m*v)

    By hand, 8 stages: 7/4 = 1.75, 7/8, 7/16, 7/32, 7/64 for m = 4 ... 64:

    >>> [float(bubble_fraction(stages=8, microbatches=mm)) for mm in (4, 8, 16, 32, 64)]
    [1.75, 0.875, 0.4375, 0.21875, 0.109375]

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §2.2.1 (bubble time fraction
       :math:`(p-1)/m`), §2.2.2 (interleaved: :math:`(p-1)/(v\,m)`).
    """
    frac = (as_expr(stages) - 1) / as_expr(microbatches)
    return frac / as_expr(chunks) if interleaved else frac


def bubble_term(interleaved: bool = False) -> Term:
    r"""The bubble fraction as a cited term (unit ``1``) [1].

    .. math::

        \frac{p-1}{m} \quad\text{or, interleaved,}\quad \frac{p-1}{v\,m}

    Parameters
    ----------
    interleaved : bool
        Use the interleaved schedule (``v`` model chunks per pipeline rank).

    Examples
    --------
    By hand, :math:`(8-1)/16 = 7/16` and, with two chunks, :math:`7/(2 \cdot 16) = 7/32`:

    >>> bubble_term().evaluate(p=8, m=16), bubble_term(True).evaluate(p=8, m=16, v=2)
    (7/16, 7/32)

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §2.2.1-2.2.2.
    """
    return Term("bubble", bubble_fraction(interleaved),
                "pipeline bubble relative to the ideal compute time"
                + (" (interleaved schedule)" if interleaved else ""), _BUBBLE, unit="1")


def global_batch(micro_batch=b, microbatches=m, data_parallel=d) -> sp.Expr:
    r"""Global batch size :math:`B = b\,m\,d` [sequences].

    .. math::

        B = b\,m\,d

    Narayanan's notation (§3.1): :math:`m = B/(b\,d)` microbatches per pipeline.

    Parameters
    ----------
    micro_batch : sympy.Expr
        Micro-batch size :math:`b` [sequences].
    microbatches : sympy.Expr
        Microbatches per step and pipeline :math:`m` [1].
    data_parallel : sympy.Expr
        Data-parallel size :math:`d` [GPUs].

    Examples
    --------
    >>> global_batch()
    b*d*m

    By hand, :math:`1 \cdot 8 \cdot 16 = 128` sequences:

    >>> global_batch(1, 8, 16)
    128

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §3.1 (notation:
       :math:`m = B/(b\,d)`).
    """
    return as_expr(micro_batch) * as_expr(microbatches) * as_expr(data_parallel)


def data_parallel_for(gpus, t=1, p=1, c=1) -> sp.Expr:
    r"""Data-parallel size left when ``gpus`` are split by t, p and c: :math:`d = G/(t\,p\,c)`.

    Seed 002: halving t doubles d and therefore the global batch.

    Parameters
    ----------
    gpus : int or sympy.Expr
        World size G [GPUs].
    t, p, c : int or sympy.Expr
        Tensor-, pipeline- and context-parallel sizes [GPUs].

    Returns
    -------
    sympy.Expr
        Data-parallel size d [GPUs].

    .. math::

        d = \frac{G}{t\,p\,c}

    Examples
    --------
    By hand, 64 / 8 = 8 and 64 / 4 = 16:

    >>> data_parallel_for(64, t=8), data_parallel_for(64, t=4)
    (8, 16)

    Narayanan Table 1's 1T row: 3072 GPUs with t = 8 and p = 64 leave d = 6 (its
    :math:`n = p \cdot t \cdot d`):

    >>> data_parallel_for(3072, t=8, p=64)
    6

    References
    ----------
    .. [narayanan] Narayanan et al. 2021, arXiv:2104.04473, §3.1 (:math:`n = p\cdot t\cdot d`),
       Table 1.
    """
    return as_expr(gpus) / (as_expr(t) * as_expr(p) * as_expr(c))
