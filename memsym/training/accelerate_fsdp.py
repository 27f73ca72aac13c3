"""The step's FSDP2 buffers as Accelerate's plugin lays them out under the Hugging Face Trainer.

:func:`add_accelerate_fsdp_transients` is :func:`memsym.training.transients.phase_transients`'s
``fsdp`` branch for ``accelerate_fsdp`` jobs (:mod:`memsym.terms.accelerate_fsdp`): the blocks'
gathers and reduce-scatters of :func:`memsym.terms.transients.fsdp2_transients`, Accelerate's
output group (untied: the groups torchtitan builds since 83e694105; tied: held through the
backward), every parameter kept gathered under ``fsdp_keep_gathered``, the unsharded gradients
``no_sync`` keeps across micro-batches, and no optimizer-step copy (fused AdamW).
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..job import Training
from ..model.architecture import norm_params
from ..symbols import N_ll, N_rep, N_tp, c, d, h, m, t
from ..terms import torch_moments as tm
from ..terms import transients as tr
from ..terms.accelerate_fsdp import (accelerate_accumulated_grads, accelerate_output_group,
                                     accelerate_root_group)

__all__ = ["uses_accelerate_groups", "add_accelerate_fsdp_transients", "root_group_params"]


def uses_accelerate_groups(training: Training) -> bool:
    """Whether the job's FSDP2 groups are Accelerate's (``accelerate_fsdp`` under ``fsdp``).

    Examples
    --------
    >>> uses_accelerate_groups(Training(framework="deepspeed", sharding="fsdp",
    ...                                 accelerate_fsdp="mixed"))
    True
    """
    return training.states.sharding == "fsdp" and training.states.accelerate_fsdp is not None


def add_accelerate_fsdp_transients(out: dict, x, training: Training) -> tuple:
    r"""Add Accelerate's FSDP2 buffers to ``out`` (phase -> list of Terms); return
    ``(start excess [bytes], own output group)`` as
    :func:`memsym.training.transients.phase_transients` reads them.

    With :math:`\Psi = N_{tp}/t + N_{rep}` the GPU's parameters, whole:

    .. math::

        \text{resharded}:\; n_{ag} N_{ll} b_u\ (\text{forward}),\quad
        \text{kept gathered}:\; \Psi\, b_u\ (\text{forward to backward}),\quad
        \text{accumulating}:\; + \Psi\, b_r \min(m - 1, 1)

    beside the backward's unsharded block gradient and reduce-scatter buffers, the output
    group (:func:`memsym.terms.accelerate_fsdp.accelerate_output_group`) and the root's
    parameters (:func:`memsym.terms.accelerate_fsdp.accelerate_root_group`).

    Parameters
    ----------
    out : dict
        Phase name -> list of Terms, extended in place.
    x : Architecture
        The model (whether its output layer is tied).
    training : Training
        The job's training (``fsdp_keep_gathered``, the finetune mode).

    Returns
    -------
    tuple
        The first block's backward's excess over a block's all-gather [bytes], whether the
        untied ``[norm, output]`` group is its own.

    Examples
    --------
    >>> from memsym.model import preset
    >>> out = {ph: [] for ph in ("forward", "loss-backward", "backward", "optimizer")}
    >>> trn = Training(framework="deepspeed", sharding="fsdp", accelerate_fsdp="mixed")
    >>> _ = add_accelerate_fsdp_transients(out, preset("llama3-8b"), trn)
    >>> [x.key for x in out["forward"]][1:3], out["optimizer"]
    (['output_group_gathered', 'blocks_gathered_at_the_loss'], [])

    References
    ----------
    hf-accelerate: Accelerate 1.16.0 ``utils/fsdp_utils.py:850-904``; pytorch-fsdp2.
    """
    fs = tr.fsdp2_transients(N_ll, d * c)
    stage = N_tp / t + N_rep
    untied = bool(x.untie_embeddings_and_output_weights)
    full = training.adapters.finetune == "full"
    start_excess, own_groups = 0, False
    if training.memory.fsdp_keep_gathered:
        # reshard_after_forward=False on every group: all of the GPU's parameters stay
        # gathered from their forward to their backward (the tied group's gradient as below)
        kept = tr.fsdp2_kept_unsharded(stage)
        out["forward"].append(kept)
        out["loss-backward"].append(kept)
        out["backward"] += [kept, fs["unsharded_grads"], fs["reduce_scatter"]]
        if not untied and full:
            out["backward"].append(accelerate_output_group(True, norm_params(x), N_ll)[
                "backward"][1])
    else:
        out["forward"].append(fs["unsharded_params"])
        out["loss-backward"].append(fs["unsharded_params"])
        out["backward"] += list(fs.terms)
        if full:
            io = accelerate_output_group(not untied, norm_params(x), N_ll)
            for ph, terms in io.items():
                out[ph] += list(terms)
        if full and untied:
            # the first block's backward prefetches the embedding's group, not a block
            first = tm.first_block_gathered(fs["unsharded_params"], N_ll)
            out["backward"][out["backward"].index(fs["unsharded_params"])] = first
            start_excess, own_groups = fs["unsharded_params"].expr - first.expr, True
    root = root_group_params(x)
    if root != 0 and not training.memory.fsdp_keep_gathered:   # else in kept_unsharded
        for ph in ("forward", "loss-backward", "backward"):
            out[ph].append(accelerate_root_group(root))
    # more than one micro-batch: every one but the last under no_sync keeps the unsharded
    # gradients until the last's backward (min(m - 1, 1): 0 at m = 1, else 1)
    acc = accelerate_accumulated_grads(stage)
    acc = replace(acc, expr=acc.expr * sp.Min(m - 1, 1))
    for ph in ("forward", "loss-backward", "backward"):
        out[ph].append(acc)
    return start_excess, own_groups


def root_group_params(x):
    """The parameters Accelerate leaves in the root group: a learned position table
    (``max_position_embeddings`` x h) and BLOOM's embedding norm
    (:func:`memsym.model.stages.stage_parameters` counts both on the first stage) [parameters].

    Examples
    --------
    >>> from memsym.model import preset
    >>> root_group_params(preset("llama3-8b")), root_group_params(preset("gpt3-175b"))
    (0, 2048*h)
    """
    out = (sp.Integer(x.max_position_embeddings) * h
           if x.position_embedding_type == "learned_absolute" else sp.Integer(0))
    return out + (norm_params(x) * h if x.embedding_norm else 0)
