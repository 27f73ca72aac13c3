r"""The host floor of an MoE layer: the CPU time to issue one MoE layer, which the
dispatcher's per-layer host synchronisation exposes when the GPU work is shorter.

Every token dispatcher of Megatron-core (the runs' ``alltoall`` and ``flex``) waits on the
host in each MoE layer's forward: the all-to-all dispatcher copies the token counts to the
host and blocks on them (``_maybe_dtoh_and_synchronize``: the DtoH copies on
``cuda_dtoh_stream``, then ``self.d2h_event.synchronize()`` at the ``cuda_sync_point`` that
``preprocess`` sets: ``"before_ep_alltoall"`` whenever EP > 1 or TP > 1; with EP = TP = 1
``"before_permutation_2"`` when a rank holds more than one local expert and
``moe_permute_fusion`` is off (lines 607-616), else ``"before_finish"``; earlier still,
``"before_permutation_1"``, with token dropping or router padding; the earliest point set
wins, ``_maybe_update_cuda_sync_point`` lines 910-919; ``token_dispatcher.py`` lines 545-616
at ``d98e8a64dd``; CUDA graphs of ``moe_preprocess`` only move the copies, the wait stays), and the flex dispatcher's HybridEP path resolves the received-row count on the
host (``_HybridEPManager.dispatch``: ``num_permuted_tokens = tokens_per_expert.sum()``, "CPU
sync in dispatch") [megatron-moe-host].  Two settings skip it: dropping and padding to
capacity (``moe_pad_expert_input_to_capacity``: ``preprocess`` returns the token counts it
computes on the CPU before any sync point is set, lines 517-540), and HybridEP's static
budget (``moe_expert_rank_capacity_factor``: ``num_permuted_tokens`` fixed on the host,
lines 1098-1111); no validation run sets either (``moe_host_sync`` off,
:class:`memsym.timing.records.Settings`).

At the wait the GPU's queue drains, so the CPU cannot run ahead of the GPU across MoE
layers in the forward: issuing one MoE layer's forward (router, dispatcher pre-processing
and copies, the all-to-alls, TE's grouped GEMMs one cuBLAS call per local expert, the
combine) takes :math:`H` seconds of host time that the GPU waits through whenever its own
forward work on the layer, :math:`G`, is shorter.  Per MoE layer and micro-batch:

.. math::

    t_{fwd} = \max(G_{fwd}, H) = G_{fwd} + \max(0,\; H - G_{fwd}),\qquad t_{bwd} = G_{bwd}

The backward waits on nothing: every sync above sits in the forward's dispatch
(``dispatch_preprocess``, ``token_dispatch``, ``dispatch_postprocess`` and
``_HybridEPManager.dispatch``), and the backward reuses the sizes the forward resolved, on
the host, in its autograd context: ``_AllToAll.backward`` swaps ``ctx.input_split_sizes``
and ``ctx.output_split_sizes`` (megatron/core/tensor_parallel/mappings.py),
``HybridEPDispatch.backward`` runs ``combine_with_unpermute`` with the saved ``handle`` and
``HybridEPCombine.backward`` the dispatch with ``ctx.num_permuted_tokens``
(moe/fused_a2a.py) [megatron-moe-host].  With no sync between the last forward layer and
the backward's end, the CPU runs ahead of the GPU through the backward, as through a dense
layer, and no floor is priced there.

:math:`H` is one constant, :data:`MOE_LAYER_HOST`, fixed on one published run (below), the
same for every GPU, dispatcher and CUDA-graph scope: a stated simplification.  Dense layers
have no host synchronisation inside the step: the CPU runs ahead over layers and
micro-batches and their issue (one attention block and one MLP, some twenty kernels) hides
behind the GPU, so no floor is priced for them.  The same :math:`H` as a floor on dense
layers (on their forward plus backward, as no sync separates them) would price seed 001's
H100 FP8 run +23 % and the GPT-3 / Llama 2 NeMo 24.07 rows up to +30 %: a dense layer's host
time is far below an MoE layer's.

Under the EP overlap (``overlap_moe_expert_parallel_comm``) the backward loses that
freedom.  Megatron-core's combined 1F1B runs one micro-batch's forward of a layer beside
another's backward from the one Python thread, sub-module by sub-module
(``TransformerLayerSchedulePlan.run``, megatron/core/models/common/
model_chunk_schedule_plan.py:236-305: combine backward, pre-dispatch forward, MLP backward,
dispatch forward, ...), and each backward node is issued by a blocking
``Variable._execution_engine.run_backward`` call (``ScheduleNode.default_backward_func``,
megatron/core/pipeline_parallel/utils.py:225-236): the host issues the backward's kernels
between the forward's syncs, one layer pair per sync, so the CPU cannot run ahead of the
GPU by more than one pair.  A pair of a layer's forward and backward then takes

.. math::

    t_{fwd} + t_{bwd} = \max(G_{fwd} + G_{bwd},\; H + H_{bwd}),\qquad H_{bwd} = H

with the backward's host time taken as the forward's (a stated simplification: each forward
kernel has its backward counterparts, the GEMMs' dgrad and wgrad, the copies' and
all-to-alls' mirrors, issued through the same Python sub-modules; not measured here), and
the backward's GPU work fills the forward's wait.  The warm-up forwards and cool-down
backwards that run alone (:func:`memsym.timing.makespan.ep_alone_passes`) keep the
forward-only floor (:func:`unpaired_growth`).

References
----------
.. [megatron-moe-host] Megatron-LM d98e8a64dd (2026-08-22):
   megatron/core/transformer/moe/token_dispatcher.py, ``MoEAlltoAllTokenDispatcher``
   (``__init__``: ``cuda_sync_point``, ``cuda_dtoh_point``; ``preprocess``:
   ``_maybe_update_cuda_sync_point("before_ep_alltoall")``; ``_maybe_dtoh_and_synchronize``:
   ``self.d2h_event.synchronize()``) and ``_HybridEPManager.dispatch``
   (``self.num_permuted_tokens = self.tokens_per_expert.sum()``); the backward's sizes from
   the forward's context: megatron/core/tensor_parallel/mappings.py:424-483
   (``_AllToAll.backward``), megatron/core/transformer/moe/fused_a2a.py:449-476
   (``HybridEPDispatch.backward``), 502-519 (``HybridEPCombine.backward``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["MOE_LAYER_HOST", "MOE_HOST_RUN", "host_exposed", "floored_growth",
           "paired_host_exposed", "unpaired_growth"]

#: Host seconds to issue one MoE layer's forward for one micro-batch [s] (the backward has
#: no floor).  Fixed on ONE published run, :data:`MOE_HOST_RUN` (Megatron-Bridge 26.02,
#: DGX-B200, Qwen3-30B-A3B MXFP8, MBS 1: the validation run whose GPU work per MoE layer is
#: the smallest, 48 MoE layers of 3B active parameters on 4,096 tokens, so the host floor
#: sets most of its step), by bisection on its measured step (tools/time_accuracy.py
#: ``calibrate_moe_host``); not fitted to any other run.  Chosen after the H100 GPT-OSS
#: MBS 1 row had been tried (docs/time-accuracy.md, Known gaps).  Refixed on the same run
#: when the floor left the backward (it was 4.31 ms a direction with a floor each way), and
#: again when memsym.timing.moe_copies priced the dispatcher's row copies as gathers (6.813 ->
#: 6.724 ms: the run's permutes and sorts take longer on the GPU, the host less of the step),
#: and again when MXFP8 GEMMs got their own ceiling (memsym.timing.efficiency.GEMM_CEILING,
#: blackwell/mxfp8: the run's GEMMs take longer, 6.724 -> 6.694 ms; 6.697 ms once its norm
#: outputs' MXFP8 casts were priced, memsym.timing.quantize.cast_kernels), and again when the
#: MXFP8 casts were priced at the bandwidth Transformer Engine's cast kernel is measured at
#: (memsym.timing.quantize.cast_rate, 0.6511 of HBM, blackwell/mxfp8 0.496 -> 0.512 with it):
#: 6.697 -> 6.672 ms; and again when the unfused MXFP8 expert path's per-expert casts were
#: priced (memsym.timing.expert_casts: the run's 2,048-row experts' casts take the measured
#: small-cast time, the GPU more of the step): 6.672 -> 6.469 ms.
MOE_LAYER_HOST = 6.469e-3
#: The run :data:`MOE_LAYER_HOST` is fixed on (formulas/measured_time.toml).
MOE_HOST_RUN = "mbridge.26.02.b200.qwen3-30b-a3b.mxfp8"


def host_exposed(gpu_seconds, host=None):
    r"""Seconds the GPU waits for the host in one MoE layer's forward, one micro-batch [s].

    .. math::

        t_{\text{host}} = \max(0,\; H - G)

    with :math:`G` the layer's forward GPU seconds (GEMMs, attention, memory-bound
    work, exposed communication) and :math:`H` the host seconds to issue it
    (:data:`MOE_LAYER_HOST` unless given): the layer then takes :math:`\max(G, H)`.

    Parameters
    ----------
    gpu_seconds : array_like
        The layer's forward GPU seconds, G [s].
    host : float, optional
        Host seconds to issue it, H [s] (default :data:`MOE_LAYER_HOST`).

    Returns
    -------
    numpy.ndarray
        The exposed host seconds [s]; 0 where the GPU work is the longer.

    Examples
    --------
    A layer of 1 ms on the GPU issued in 4.31 ms waits 3.31 ms; one of 9 ms waits none:

    >>> [round(float(s), 5) for s in host_exposed([1e-3, 9e-3], 4.31e-3)]
    [0.00331, 0.0]

    References
    ----------
    .. [megatron-moe-host] token_dispatcher.py at d98e8a64dd (the dispatcher's host sync).
    """
    h = MOE_LAYER_HOST if host is None else host
    return np.maximum(0.0, h - np.asarray(gpu_seconds, dtype=float))


def floored_growth(gpu_seconds, extra, host=None):
    r"""How much one MoE layer's forward lengthens when its GPU work grows by ``extra`` [s].

    Under the host floor the layer takes :math:`\max(G, H)`, so ``extra`` GPU seconds (the
    all-to-all the EP overlap hides in steady state but not in the first forward and last
    backward, :func:`memsym.timing.step.step_time_grid`) add

    .. math::

        \Delta t = \max(G + x,\; H) - \max(G,\; H)

    Parameters
    ----------
    gpu_seconds : array_like
        The layer's forward GPU seconds, G [s].
    extra : array_like
        The GPU seconds added, x [s].
    host : float, optional
        Host seconds to issue the layer, H [s] (default :data:`MOE_LAYER_HOST`).

    Returns
    -------
    numpy.ndarray
        The growth [s]: x where G is above the floor, less (down to 0) where it is below.

    Examples
    --------
    >>> [round(float(s), 5) for s in floored_growth([1e-3, 3e-3, 6e-3], 2e-3, 4e-3)]
    [0.0, 0.001, 0.002]

    References
    ----------
    .. [megatron-moe-host] token_dispatcher.py at d98e8a64dd (the dispatcher's host sync).
    """
    g = np.asarray(gpu_seconds, dtype=float)
    x = np.asarray(extra, dtype=float)
    return (g + x + host_exposed(g + x, host)) - (g + host_exposed(g, host))


def paired_host_exposed(forward_gpu, backward_gpu, host=None):
    r"""Seconds one MoE layer's forward-backward pair waits for the host under combined 1F1B [s].

    .. math::

        t_{\text{host}} = \max\bigl(0,\; 2H - (G_{fwd} + G_{bwd})\bigr)

    Under the EP overlap Megatron-core issues one micro-batch's backward of a layer between
    the syncs of another's forward (``TransformerLayerSchedulePlan.run``; module docstring),
    so the pair takes :math:`\max(G_{fwd} + G_{bwd}, H + H_{bwd})` with :math:`H_{bwd} = H`
    (:data:`MOE_LAYER_HOST` unless given): the backward's GPU work fills the forward's wait,
    and the backward's host time is exposed with the forward's.

    Parameters
    ----------
    forward_gpu, backward_gpu : array_like
        The layer's forward and backward GPU seconds, G_fwd and G_bwd [s].
    host : float, optional
        Host seconds to issue one direction of the layer, H [s] (default
        :data:`MOE_LAYER_HOST`).

    Returns
    -------
    numpy.ndarray
        The pair's exposed host seconds [s]; 0 where its GPU work is the longer.

    Examples
    --------
    By hand, H = 6.7 ms: a pair of 3 + 4 ms waits 13.4 - 7 = 6.4 ms (the forward-only floor
    would wait 3.7 ms); one of 5 + 9 ms none, where the forward-only floor waits 1.7 ms:

    >>> [round(float(s), 6) for s in paired_host_exposed([3e-3, 5e-3], [4e-3, 9e-3], 6.7e-3)]
    [0.0064, 0.0]

    References
    ----------
    .. [megatron-moe-host] model_chunk_schedule_plan.py:236-305, pipeline_parallel/utils.py:
       225-236 at d98e8a64dd (the combined 1F1B's lockstep issue).
    """
    h = MOE_LAYER_HOST if host is None else host
    g = np.asarray(forward_gpu, dtype=float) + np.asarray(backward_gpu, dtype=float)
    return np.maximum(0.0, 2.0 * h - g)


def unpaired_growth(forward_gpu, backward_gpu, extra_forward, extra_backward, host=None):
    r"""How much one MoE layer's forward and backward run alone take beyond a priced pair [s].

    Under the EP overlap every layer's forward and backward are priced as a combined 1F1B
    pair (:func:`paired_host_exposed`), but the first forward and last backward run alone
    (combined_1f1b.py, :func:`memsym.timing.makespan.ep_alone_passes`): their all-to-alls
    exposed (``extra``: the issued less the hidden seconds), the forward under its own floor,
    the backward with none (nothing syncs while it is issued):

    .. math::

        \Delta t = \bigl(G_f + x_f + \max(0, H - G_f - x_f)\bigr) + (G_b + x_b)
            - \bigl(G_f + G_b + \max(0, 2H - G_f - G_b)\bigr)

    negative where the pair's host wait exceeds the lone passes'.

    Parameters
    ----------
    forward_gpu, backward_gpu : array_like
        The layer's forward and backward GPU seconds with its exposed all-to-alls [s].
    extra_forward, extra_backward : array_like
        The all-to-all seconds the overlap hides, forward and backward, x_f and x_b [s].
    host : float, optional
        Host seconds to issue one direction of the layer, H [s] (default
        :data:`MOE_LAYER_HOST`).

    Returns
    -------
    numpy.ndarray
        The growth [s].

    Examples
    --------
    By hand, H = 6.7 ms, a pair of 3 + 4 ms GPU work with 1 ms of all-to-all hidden each way:
    alone, 6.7 + 5 = 11.7 ms; as a pair, 13.4 ms: -1.7 ms.  Above every floor (9 + 14 ms)
    the growth is the 2 ms of all-to-alls:

    >>> [round(float(s), 6) for s in unpaired_growth([3e-3, 9e-3], [4e-3, 14e-3], 1e-3, 1e-3,
    ...                                              6.7e-3)]
    [-0.0017, 0.002]

    References
    ----------
    .. [megatron-moe-host] combined_1f1b.py, model_chunk_schedule_plan.py at d98e8a64dd.
    """
    f, b = np.asarray(forward_gpu, dtype=float), np.asarray(backward_gpu, dtype=float)
    xf, xb = np.asarray(extra_forward, dtype=float), np.asarray(extra_backward, dtype=float)
    alone = f + xf + host_exposed(f + xf, host) + b + xb
    return alone - (f + b + paired_host_exposed(f, b, host))
