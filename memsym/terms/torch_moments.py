"""What torch's own parallelism (FSDP2, DTensor plans, its checkpoint) holds at each moment.

Terms that :func:`memsym.training.phase_transients` and
:func:`memsym.training.resolved_stage_activations` add where a job runs torch's FSDP2 and
DTensor tensor parallelism as torchtitan applies them, and the one moment every activation
checkpoint shares.  Each was found by torch's ``FSDPMemTracker`` under ``FakeTensorMode``
(``tests/fake_tracker.py``; each pinned in ``tests/test_fake_tracker_gaps.py``).

Sources:

- torchtitan ``torchtitan/models/llama3/infra/parallelize.py`` at
  018740b7aae7846d24954539244c78215dbd181f (``apply_fsdp``: the embedding, each block and
  ``[norm, output]`` their own groups, the last ``reshard_after_forward=False``; ``apply_tp``:
  ``PrepareModuleInput`` to ``Replicate()`` before the attention and the feed-forward, the
  output ``ColwiseParallel(output_layouts=Shard(-1) if loss_parallel else Replicate())``).
- PyTorch ``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py`` (``post_backward``:
  reshard, then ``foreach_reduce``), ``_fsdp_collectives.py`` (``foreach_reduce``: the fp32
  reduce-scatter input and output), ``_fsdp_state.py`` (backward prefetch of the group run
  before in forward), ``torch/distributed/tensor/parallel/style.py`` (``ColwiseParallel``),
  ``torch/utils/checkpoint.py`` and Megatron-LM ``megatron/core/tensor_parallel/random.py`` at
  d98e8a64dd (``CheckpointFunction.forward`` runs the block under ``torch.no_grad()``).
"""

from __future__ import annotations

import sympy as sp

from ..symbols import N_lin, N_ll, N_rep, N_tp, V, b, b_r, b_u, c, d, h, m, p, s, t, v
from ..term import Source, Term
from ..values import cached_max

__all__ = ["working_set_absent", "gathered_logits", "dtensor_gathered_inputs",
           "first_block_gathered", "output_group_backward",
           "grads_as_stages_run"]

_CKPT = Source("megatron-core", "megatron/core/tensor_parallel/random.py, CheckpointFunction."
               "forward (run_function under torch.no_grad()); torch/utils/checkpoint.py keeps "
               "only the inputs likewise (tests/test_fake_tracker_gaps.py measures it)")
_TT = "torchtitan/models/llama3/infra/parallelize.py at 018740b7aae7"
_OUT = Source("torchtitan", f"{_TT}, apply_tp (output ColwiseParallel with output_layouts "
              "Replicate() unless loss_parallel: every TP rank holds every logit)")
_AUTOTP = Source("deepspeed-autotp", "module_inject/tp_plan_converter.py:48-50 (the output "
                 "layer's colwise_gather_output), module_inject/layers.py:861-869 (LinearLayer "
                 "all-gathers its output shards): every TP rank holds every logit")
_FSDP = Source("pytorch-fsdp2", f"{_TT}, apply_fsdp (tok_embeddings, each block and [norm, "
               "output] their own groups); torch _fully_shard/_fsdp_state.py (the backward "
               "prefetches the group that ran before in forward), _fsdp_param_group.py "
               "post_backward and _fsdp_collectives.py foreach_reduce (fp32 reduce-scatter "
               "input and output)")


def working_set_absent(working_set: Term) -> Term:
    r"""The full-recompute working set, absent outside the blocks' backward [bytes].

    A checkpointed block's forward keeps only its input (torch's checkpoint, Megatron's
    ``CheckpointFunction`` under ``no_grad``); its activations are rematerialised by its own
    backward.  The steady sum counts one block's (``recompute_working_set``); this negative
    Term takes it off the forward and the loss's backward:

    .. math:: -A_{\mathrm{ws}}

    References
    ----------
    Megatron-LM d98e8a64dd ``megatron/core/tensor_parallel/random.py``
    (``CheckpointFunction.forward`` under ``torch.no_grad()``) (megatron-core); PyTorch
    ``torch/utils/checkpoint.py``.

    >>> w = Term("recompute_working_set", 5 * h, "one layer", _CKPT)
    >>> working_set_absent(w).expr
    -5*h
    """
    return Term("working_set_not_rematerialised", -working_set.expr, "no block rematerialised: "
                "the checkpointed blocks keep their inputs only until their own backward",
                _CKPT, label="recompute working set not built yet")


def gathered_logits(terms, autotp: bool = False) -> tuple:
    """The loss's Terms with every TP rank holding all logits (torchtitan without
    ``loss_parallel``; DeepSpeed AutoTP with ``autotp``): :math:`V/t` becomes :math:`V`.

    >>> gathered_logits((Term("logits", 4 * s * b * V / t, "x", _OUT),))[0].expr
    4*V*b*s
    """
    why, src = ((" (whole on every TP rank: AutoTP's colwise_gather_output)", _AUTOTP) if autotp
                else (" (gathered over TP: output_layouts Replicate())", _OUT))
    return tuple(Term(term.key, term.expr.xreplace({t: 1}), term.description + why, src,
                      label=term.label)
                 if term.expr.has(V) else term for term in terms)


def dtensor_gathered_inputs(moe: bool | None, width: int = 2,
                            attention: bool = True) -> sp.Expr:
    r"""What torch's DTensor TP saves beyond Megatron's sequence parallelism, per layer [bytes].

    Torch's ColwiseParallel after ``PrepareModuleInput(Replicate())``, per layer and
    micro-batch:

    .. math:: n\,2\tau h\,(1 - 1/t)

    :math:`n` = 2 (the attention's and the dense MLP's inputs, all-gathered and saved whole
    where Megatron keeps :math:`2\tau h/t` and gathers again in backward), one each part
    (a hybrid layer's attention or MLP alone); an MoE layer's feed-forward input is left at
    Megatron's count (not measured).

    Parameters
    ----------
    moe : bool or None
        An MoE layer (only the attention's input counted); None: a layer with no
        feed-forward part (a hybrid's attention layer) [1].
    width : {2, 4}
        Bytes of an element in the compute dtype (each 2 above; 4 in fp32) [bytes/element].
    attention : bool
        The layer holds an attention (False: a hybrid layer's MLP part alone) [1].

    References
    ----------
    torchtitan ``apply_tp`` (``PrepareModuleInput`` to ``Replicate()`` before ``attention``
    and ``feed_forward``; ``wq``/``wk``/``wv``, ``w1``/``w3`` ``ColwiseParallel``); torch
    ``distributed/tensor/parallel/style.py`` ``ColwiseParallel`` (the local matmul saves its
    replicated input); measured in ``tests/test_fake_tracker_gaps.py``.

    >>> dtensor_gathered_inputs(False).subs({s: 8, b: 1, c: 1, h: 4, t: 2})
    64
    """
    return (int(attention) + int(moe is False)) * width * s * b * h / c * (1 - 1 / t)


def first_block_gathered(unsharded: Term, group_params=None) -> Term:
    r"""FSDP2's gathered parameters in the first block's backward [bytes].

    The last block the backward reaches holds itself and the prefetched embedding group,
    not two blocks (nothing runs before the embedding in forward):

    .. math:: (N_{ll} + Vh/t)\, b_u

    References
    ----------
    torchtitan ``models/llama3/infra/parallelize.py`` at 018740b7aae7 (``apply_fsdp``); PyTorch
    ``distributed/fsdp/_fully_shard/_fsdp_state.py`` and ``_fsdp_param_group.py`` (the
    backward prefetch, ``post_backward``) (pytorch-fsdp2).

    >>> first_block_gathered(Term("unsharded_params", 2 * N_ll * b_u, "x", _FSDP)).expr
    b_u*(N_ll + V*h/t)
    """
    n = N_ll if group_params is None else group_params
    return Term(unsharded.key, b_u * (n + V * h / t), "the first block's parameters and the "
                "embedding's, prefetched by its backward, in param_dtype", _FSDP,
                label=unsharded.label)


def output_group_backward(loss_terms, output, group_params=None) -> Term:
    r"""The output group's own backward, as an excess over the loss's backward [bytes].

    FSDP2's post-backward hook of ``[norm, output]`` fires on the output projection's input
    gradient: its unsharded gradient goes to the reduce-scatter, whose ``reduce_dtype`` input
    :math:`b_r V h/t` and output :math:`b_r V h/(t d)` stay alive while the final norm runs its
    backward, the group still gathered (``output_group_gathered``) and the last block
    prefetched by the backward (:math:`N_{ll} b_u`); the loss's buffers, the logits and the
    output projection's saved input are freed, every block's activations alive.  The final
    RMSNorm's eager fp32 backward (``x.float()``, ``pow``, ``mean``, ``rsqrt``, ``mul``,
    ``type_as``, ``* weight``) holds its saved fp32 input and rstd beside
    :math:`20\tau h/\sigma` of gradients in flight (bf16 incoming gradient and fp32
    intermediates) and the rstd's fp32 gradient (measured by
    ``tests/test_fake_tracker_gaps.py`` on transformers' ``LlamaRMSNorm``, the same ops as
    torchtitan's eager ``RMSNorm``): four times the ``final_norm_input`` it counts
    (:math:`6\tau h/\sigma`) plus twice the statistics.

    Returned as :math:`\max(0,\,M_{\mathrm{out}} - T_{\mathrm{loss}})`, so that the
    loss-backward phase is the larger of the two moments.

    Parameters
    ----------
    loss_terms : sequence of Term
        The loss-backward phase's transients (the groups' and gradients' carry over).
    output : Total
        The output layer's activations (:func:`memsym.terms.activations.output_activations`
        with ``fp32_norm``), all freed but the final norm's.
    group_params : sympy.Expr, optional
        Parameters of one block on one GPU; default ``N_ll``.

    Returns
    -------
    Term
        ``output_group_backward`` [bytes], zero where the loss's backward is larger.

    References
    ----------
    torchtitan ``models/llama3/infra/parallelize.py`` at 018740b7aae7 (``apply_fsdp``); PyTorch
    ``distributed/fsdp/_fully_shard/_fsdp_state.py`` and ``_fsdp_param_group.py`` (the
    backward prefetch, ``post_backward``) (pytorch-fsdp2).

    Where the loss's own moment dwarfs everything (a loss buffer of 10^30 bytes), the output
    group's backward adds nothing:

    >>> from memsym.terms.activations import output_activations
    >>> big = Term("loss_buffers", sp.Integer(10)**30, "x", _FSDP)
    >>> vals = {N_ll: 10**9, b_u: 2, b_r: 4, V: 128256, h: 4096, t: 1, d: 8, c: 1, s: 8192, b: 1}
    >>> output_group_backward([big], output_activations(fp32_norm=True)).expr.subs(vals)
    0
    """
    n = N_ll if group_params is None else group_params
    loss = sp.Add(*(term.expr for term in loss_terms))
    held = sp.Add(*(term.expr for term in loss_terms if term.key in _KEPT_AT_OUTPUT))
    norm = 4 * output["final_norm_input"].expr + 2 * output["final_norm_statistics"].expr
    moment = (held + n * b_u + b_r * V * h / t * (1 + 1 / (d * c))
              - sp.Add(*(term.expr for term in output.terms)) + norm)
    return Term("output_group_backward", cached_max(0, moment - loss), "the output group's own "
                "backward beyond the loss's: the last block prefetched, the output's "
                "reduce-scatter input and output and the final norm's backward (the loss's "
                "buffers and logits freed)", _FSDP, label="output group backward")


#: The loss-backward transients still held in the output group's backward.
_KEPT_AT_OUTPUT = ("output_group_gathered", "gradients_not_yet_made", "unsharded_params",
                   "working_set_not_rematerialised", "blocks_gathered_at_the_loss",
                   # Accelerate's no_sync: the earlier micro-batches' unsharded gradients
                   "accumulated_grads")


def grads_as_stages_run(layout, training, accumulated: Term) -> Term:
    r"""FSDP2's unsharded gradients under torch's pipelining with v stages per rank [bytes].

    A stage's unsharded gradients live from its first backward to its last, which
    reduce-scatters and frees them before the rank's next op.

    Where a rank runs all m backwards of one stage before the next stage's first (torch's
    ``ScheduleLoopedBFS``; ``ScheduleInterleaved1F1B`` with one round, m < 2p, whose round
    is m // max(1, m // p) micro-batches) it never holds two stages' gradients, and at its
    peak (all warm-up passes in flight, the first backward) holds one:

    .. math::

        b_r\Big(\frac{N_{\mathrm{lin}}}{v} + \frac{N_{\mathrm{tp}}}{t} - N_{\mathrm{lin}}
            + N_{\mathrm{rep}}\Big)

    (:math:`N_{\mathrm{lin}}` the decoder layers' split weights, the embedding, output and
    replicated weights' gradients counted whole: an upper bound where they sit in a later
    stage).  With more rounds the stages' gradients overlap in the steady state: all of
    ``accumulated``.  :func:`memsym.timing.schedule.live_by_held_gradients` walks the op
    order (tests prove this form on it); ``tests/test_engine_fsdp2.py`` watches the gradients
    come and go on a gloo pipeline.

    References
    ----------
    PyTorch ``torch/distributed/pipelining/stage.py`` (``backward_maybe_with_nosync``) and
    ``schedules.py`` (``ScheduleLoopedBFS``, ``ScheduleInterleaved1F1B``) (pytorch-pipelining).

    Without interleaving nothing changes; looped breadth-first (GPipe) holds one stage's:

    >>> from types import SimpleNamespace as NS
    >>> acc = Term("accumulated_grads", 4 * N_lin, "x", _FSDP)
    >>> grads_as_stages_run(NS(v=None), None, acc) is acc
    True
    >>> trn = NS(pipeline=NS(stage_placement="loop", schedule="gpipe"))
    >>> grads_as_stages_run(NS(v=2, t=1), trn, acc).expr
    b_r*(-N_lin + N_lin/v + N_rep + N_tp/t)
    """
    if (layout.v or 1) == 1 or training.pipeline.stage_placement == "v":
        return accumulated
    one = b_r * (N_lin / v + N_tp / t - N_lin + N_rep)
    if training.pipeline.schedule == "gpipe":
        held = one                                    # LoopedBFS: stage by stage
    else:
        held = sp.Piecewise((one, sp.StrictLessThan(m, 2 * p)), (accumulated.expr, True))
    return Term("accumulated_grads", held, accumulated.description + "; each stage's live "
                "from its first backward to its last: one stage's at a time where the rank "
                "runs its stages' backwards one after the other (LoopedBFS, or one "
                "interleaved round: m < 2p)",
                Source("pytorch-pipelining", "stage.py, backward_maybe_with_nosync (gradient "
                       "sync off until a stage's last micro-batch); schedules.py, "
                       "ScheduleInterleaved1F1B (rounds of m // max(1, m // p))"),
                label=accumulated.label)

