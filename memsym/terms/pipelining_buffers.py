r"""What ``torch.distributed.pipelining`` keeps beyond the layers' activations (torchtitan's PP).

Per-micro-batch receive buffers for each stage's input and output gradient, kept between
steps, and the in-flight stage outputs ``fwd_cache`` keeps for backward; ``boundary`` is one
micro-batch's hidden states at a stage boundary, :math:`2\tau h/\sigma` bytes.
``tests/test_engine_fsdp2.py`` counts them on gloo pipelines of 2 and 3 ranks.
"""

from __future__ import annotations

from ..symbols import V, b, c, p, s, t
from ..term import Source, Term
from .schedule import embedding_microbatches, logits_microbatches
from ..text import shared_doc

__all__ = ["pipelining_buffers", "pipelining_recv_buffers"]

_doc = shared_doc(stage_params="""
    stage : int
        The pipeline rank [1].
    pp : int
        The pipeline-parallel size p [GPUs].
    vv : int or None
        Stages per rank v [1] (None: one).
    mm : int
        Micro-batches per step m [1].
    boundary : sympy.Expr
        One micro-batch's hidden states at a stage boundary [bytes].
    """)


_PIPELINING_SRC = Source("pytorch-pipelining", "stage.py, _create_act_recv_info / "
                         "_create_grad_recv_info (one buffer per micro-batch, kept), "
                         "forward_one_chunk (fwd_cache keeps the stage output)")


@_doc
def pipelining_recv_buffers(stage: int, pp: int, vv, mm, boundary, placement: str = "loop") -> Term:
    r"""The receive buffers ``torch.distributed.pipelining`` keeps between steps [bytes].

    On pipeline rank ``stage``: one per micro-batch for each stage's input (not the first global
    stage's) and output gradient (not the last's), :math:`(2v - 1) m B` on the end ranks and
    :math:`2 v m B` between them; they outlive the step, so the optimizer step sees them
    (``tests/test_engine_fsdp2.py`` counts them after a step on a 3-rank gloo pipeline).

    Parameters
    ----------
    {stage_params}
    placement : {"loop", "v"}
        Where a rank's stages sit (``Training.stage_placement``).

    Examples
    --------
    Check values counted by hand from the buffers above (B = 1): p = 3, m = 4, one stage per
    rank, (2v - 1) m = 4 on the first rank and 2 v m = 8 on the middle one; the V placement
    (p = 4, v = 2, m = 8) gives rank 0 both ends, (2v - 2) m = 16:

    >>> [pipelining_recv_buffers(r, 3, None, 4, 1).expr for r in (0, 1)]
    [4, 8]
    >>> pipelining_recv_buffers(0, 4, 2, 8, 1, placement="v").expr
    16

    References
    ----------
    .. [pytorch-pipelining] ``torch/distributed/pipelining/stage.py``, ``_create_act_recv_info``
       and ``_create_grad_recv_info`` (one buffer per micro-batch, kept).
    """
    vk = 1 if vv is None else vv
    # no input received for the first stage, no output gradient for the last (both on rank 0
    # under the V placement)
    last = 0 if placement == "v" else pp - 1
    count = 2 * vk * mm - (mm if stage == 0 else 0) - (mm if stage == last else 0)
    return Term("pipeline_recv_buffers", count * boundary,
                "torch.distributed.pipelining's per-micro-batch receive buffers (inputs, "
                "output gradients), kept between steps", _PIPELINING_SRC,
                label="pipeline receive buffers")


@_doc
def pipelining_buffers(stage: int, pp: int, vv, mm, group, boundary, width: int,
                       schedule: str = "1f1b", placement: str = "loop") -> Term:
    r"""What ``torch.distributed.pipelining`` keeps beyond the layers' activations [bytes].

    On pipeline rank ``stage`` (torchtitan's pipeline parallelism), with :math:`B = 2\tau h/\sigma`
    the hidden states of one micro-batch at a stage boundary (:math:`\tau = sb/c`,
    :math:`\sigma = t` under sequence parallelism), :math:`m` micro-batches, :math:`v` stages on the
    rank and :math:`n` in-flight micro-batches of the rank's first chunk (those whose embedding it
    holds, :func:`memsym.terms.schedule.embedding_microbatches`):

    .. math::

        \text{first rank: } ((2v - 1) m + n) B,\quad
        \text{middle: } 2 v m B,\quad
        \text{last: } ((2v - 1) m - n_\ell) B + n_\ell\, 2\tau V/t

    Under the V placement (stages r and 2p - 1 - r on rank r) rank 0 holds both ends,
    :math:`((2v - 2) m + n - n_\ell) B + n_\ell\, 2\tau V/t`, and every other rank
    :math:`2 v m B`.

    Every stage makes one receive buffer per micro-batch for its input (not on the first
    stage) and one for its output's gradient (not on the last) once, and keeps them
    (``_create_act_recv_info``, ``_create_grad_recv_info``); a received input is the stage's
    first block input, already counted for the in-flight micro-batches.  ``fwd_cache`` keeps
    each in-flight micro-batch's stage output until its backward: the hidden states, and on
    the last stage the 16-bit logits (the train step's ``del pred`` does not reach them) of
    its :math:`n_\ell` micro-batches in flight: 1 under (interleaved) 1F1B, all m under GPipe
    and LoopedBFS (:func:`memsym.terms.schedule.logits_microbatches`).
    ``tests/test_engine_fsdp2.py`` checks the buffers on gloo groups of 2 and 3 ranks.

    Parameters
    ----------
    {stage_params}
    group : int or None
        Megatron's micro-batch group size of the interleaved schedule [1] (None: p).
    width : int
        Bytes per activation element [bytes] (2 for 16-bit).
    schedule : {"1f1b", "gpipe"}
        The pipeline schedule.
    placement : {"loop", "v"}
        Where a rank's stages sit (``Training.stage_placement``).

    Examples
    --------
    Check values computed by hand from the formulas above (B = 1, 16-bit logits): p = 3,
    m = 4, 1F1B, the middle rank 2 v m = 8; the last rank ((2v - 1) m - 1) + 2τV/t with
    τ = sb/c and one micro-batch's logits in flight:

    >>> pipelining_buffers(1, 3, None, 4, None, 1, 2).expr
    8
    >>> pipelining_buffers(2, 3, None, 4, None, 1, 2).expr
    2*V*b*s/(c*t) + 3

    References
    ----------
    .. [pytorch-pipelining] ``torch/distributed/pipelining/stage.py``, ``_create_act_recv_info``
       and ``_create_grad_recv_info`` (one buffer per micro-batch, kept), ``forward_one_chunk``
       (``fwd_cache`` keeps the stage output).
    """
    vk = 1 if vv is None else vv
    count, extra = 2 * vk * mm, 0
    if stage == 0:
        # no input received for the first stage; its in-flight outputs kept
        n_first = embedding_microbatches(schedule, pp=p, vv=vv, mm=mm, group=group)
        count += n_first - mm
    if stage == (0 if placement == "v" else pp - 1):
        # no output gradient received for the last stage; fwd_cache keeps its logits
        n_logits = logits_microbatches(schedule, mm=mm)
        count -= mm + n_logits
        extra = n_logits * width * b * s * V / (c * t)
    return Term("pipeline_buffers", count * boundary + extra, "torch.distributed.pipelining's "
                "per-micro-batch receive buffers (inputs, output gradients) and the in-flight "
                "stage outputs it keeps for backward", _PIPELINING_SRC,
                label="pipeline buffers")
