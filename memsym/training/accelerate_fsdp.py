"""The step's FSDP2 buffers as Accelerate's plugin lays them out under the Hugging Face Trainer.

:func:`add_accelerate_fsdp_transients` is :func:`memsym.training.transients.phase_transients`'s
``fsdp`` branch for ``accelerate_fsdp`` jobs (:mod:`memsym.terms.accelerate_fsdp`): the blocks'
gathers and reduce-scatters of :func:`memsym.terms.transients.fsdp2_transients`, Accelerate's
output group (untied: the groups torchtitan builds since 83e694105; tied: held through the
backward), every parameter kept gathered under ``fsdp_keep_gathered``, the unsharded gradients
``no_sync`` keeps across micro-batches, and no optimizer-step copy (fused AdamW).
:func:`accelerate_fsdp_groups` lists the same groups' parameters for the step time, which
prices each group's all-gathers and its one reduce-scatter
(:class:`memsym.timing.records.Settings`, ``fsdp_groups``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import sympy as sp

from ..job import Training
from ..model import (PRESET_MODEL_TYPES, layer_parameters, parameter_values, resolve,
                     stage_parameters)
from ..model.architecture import norm_params
from ..model.counts import as_int
from ..model.hybrid_layers import layer_kind_pattern
from ..symbols import N_ll, N_rep, N_tp, V, c, d, h, m, t
from ..terms import torch_moments as tm
from ..terms import transients as tr
from ..terms.accelerate_fsdp import (ACCELERATE_ROOT_NORM, accelerate_accumulated_grads,
                                     accelerate_output_group, accelerate_root_group,
                                     accelerate_root_norm_grad)

__all__ = ["uses_accelerate_groups", "add_accelerate_fsdp_transients", "root_group_params",
           "accelerate_fsdp_groups", "final_norm_in_root", "tail_norm_params"]


def uses_accelerate_groups(training: Training) -> bool:
    """Whether the job's FSDP2 groups are Accelerate's (``accelerate_fsdp`` under ``fsdp``).

    Examples
    --------
    >>> uses_accelerate_groups(Training(framework="deepspeed", sharding="fsdp",
    ...                                 accelerate_fsdp="mixed"))
    True
    """
    return training.states.sharding == "fsdp" and training.states.accelerate_fsdp is not None


def final_norm_in_root(x) -> bool:
    """Whether Accelerate's ``_find_final_norm`` misses the model's final norm, which then stays
    in the root group (:data:`memsym.terms.accelerate_fsdp.ACCELERATE_ROOT_NORM`, by the
    ``model_type`` read from the config, or the preset's).

    Examples
    --------
    >>> from memsym.model import preset
    >>> final_norm_in_root(preset("llama3-8b"))
    False

    References
    ----------
    hf-accelerate: Accelerate 1.16.0 ``utils/fsdp_utils.py:722-737``.
    """
    kind = (x.extra or {}).get("hf_model_type") or PRESET_MODEL_TYPES.get(x.name)
    return kind in ACCELERATE_ROOT_NORM


def tail_norm_params(x):
    """Parameter vectors of the final norm in the ``[norm, output]`` tail group: the model's,
    or 0 where the norm stays in the root (:func:`final_norm_in_root`) [1].

    Examples
    --------
    >>> from memsym.model import preset
    >>> tail_norm_params(preset("gpt3-175b"))
    2
    """
    return 0 if final_norm_in_root(x) else norm_params(x)


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
            out["backward"].append(accelerate_output_group(True, tail_norm_params(x), N_ll)[
                "backward"][1])
    else:
        out["forward"].append(fs["unsharded_params"])
        out["loss-backward"].append(fs["unsharded_params"])
        out["backward"] += list(fs.terms)
        if full:
            io = accelerate_output_group(not untied, tail_norm_params(x), N_ll)
            for ph, terms in io.items():
                out[ph] += list(terms)
        if full and untied:
            # the first block's backward prefetches the embedding's group, not a block
            first = tm.first_block_gathered(fs["unsharded_params"], N_ll)
            out["backward"][out["backward"].index(fs["unsharded_params"])] = first
            start_excess, own_groups = fs["unsharded_params"].expr - first.expr, True
    if final_norm_in_root(x) and norm_params(x):
        # no post-backward hook on the root: the norm's gradient, made first, waits for the end
        out["backward"].append(accelerate_root_norm_grad(norm_params(x)))
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
    (``max_position_embeddings`` x h), BLOOM's embedding norm
    (:func:`memsym.model.stages.stage_parameters` counts both on the first stage) and a final
    norm ``_find_final_norm`` misses (:func:`final_norm_in_root`: OPT's) [parameters].

    Examples
    --------
    >>> from memsym.model import preset
    >>> root_group_params(preset("llama3-8b")), root_group_params(preset("gpt3-175b"))
    (0, 2048*h)
    """
    out = (sp.Integer(x.max_position_embeddings) * h
           if x.position_embedding_type == "learned_absolute" else sp.Integer(0))
    return out + (norm_params(x) * h if x.embedding_norm else 0) + (
        norm_params(x) * h if final_norm_in_root(x) else 0)


def accelerate_fsdp_groups(x, training: Training) -> tuple:
    r"""Accelerate's FSDP2 groups on one GPU, as the step time prices their collectives:
    ``((parameters, groups, regathered), ...)``, one entry per group size and kind [parameters,
    1, bool].

    ``fsdp2_prepare_model`` (Accelerate 1.16.0 ``utils/fsdp_utils.py:850-904``) makes a group of
    each decoder layer (the plugin's ``reshard_after_forward``), of an untied embedding (the
    same), of ``[final norm, (tied embedding,) output]`` (``reshard_after_forward=False``,
    :884-898; the final norm only where ``_find_final_norm``, :722-737, finds it among the base
    model's direct children: :func:`final_norm_in_root`) and of the root, which holds what is
    left (a position table, an embedding norm, a final norm found deeper; ``reshard_after_forward``
    None, False for the root: torch
    ``_fsdp_state.py:203-207``).  Every group is all-gathered in each micro-batch's forward
    (each backward reshards it, ``reshard_after_backward`` True: ``_fsdp_param_group.py:223,
    607-609, 637-638``); a group resharded after its forward (``regathered``) is all-gathered
    again by its backward (``pre_backward``, :576-586); each group's gradients are
    reduce-scattered once a step, in the last micro-batch's backward (the Trainer's
    ``no_sync`` before it, :func:`memsym.terms.accelerate_fsdp.accelerate_accumulated_grads`).
    With ``fsdp_keep_gathered`` no group is regathered.  A group of no parameters (the root of
    most models) issues nothing and is left out.

    .. math:: \sum_g n_g P_g = N

    Parameters
    ----------
    x : Architecture
        The model (resolved), every GPU data-parallel (``check_accelerate_fsdp``).
    training : Training
        The job's training (``fsdp_keep_gathered``).

    Returns
    -------
    tuple
        ``(parameters, groups, regathered)``: parameters of one group [parameters], groups of
        that size and kind [1], whether each backward all-gathers it again.

    Examples
    --------
    Llama 3 8B: 32 blocks of 218112000, the embedding 128256 x 4096 = 525336576 and
    ``[norm, output]`` 4096 more; GPT-3 175B (tied, vocabulary padded to 50304): 96 blocks of
    12 h^2 + 13 h = 1812099072, ``[ln_f, wte, lm_head]`` 50304 h + 2 h and the root's position
    table 2048 h (by hand, h = 12288):

    >>> from memsym.model import preset, resolve
    >>> trn = Training(framework="deepspeed", sharding="fsdp", accelerate_fsdp="mixed")
    >>> accelerate_fsdp_groups(resolve(preset("llama3-8b")), trn)
    ((218112000, 32, True), (525336576, 1, True), (525340672, 1, False))
    >>> accelerate_fsdp_groups(resolve(preset("gpt3-175b")), trn)
    ((1812099072, 96, True), (618160128, 1, False), (25165824, 1, False))

    References
    ----------
    hf-accelerate: ``utils/fsdp_utils.py:722-737, 850-904``; pytorch-fsdp2: ``_fsdp_state.py:203-207``,
    ``_fsdp_param_group.py:223, 576-638``.
    """
    x, again = resolve(x), not training.memory.fsdp_keep_gathered
    kinds = Counter(layer_kind_pattern(x))
    blocks = Counter()
    for kind, n in kinds.items():
        blocks[sum(layer_parameters(x, kind).values())] += n
    vh = as_int(V * h, parameter_values(x, 1, True))       # as stage_parameters counts it
    untied = bool(x.untie_embeddings_and_output_weights)
    tail = vh + tail_norm_params(x) * x.hidden_size + (
        as_int(V, parameter_values(x, 1, True)) if x.output_layer_bias else 0)
    out = [(size, n, again) for size, n in blocks.items()]
    if untied:
        out.append((vh, 1, again))
    out.append((tail, 1, False))
    # the root holds what no other group took (fsdp_utils.py:900-904)
    root = stage_parameters(x).total - sum(size * n for size, n, _ in out)
    if root:
        out.append((root, 1, False))
    return tuple(out)
