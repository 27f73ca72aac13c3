"""Sharding transients: what data-parallel sharding gathers and buckets for one phase.

FSDP2's unsharded parameters and reduce-scatter buffers (and torchtitan's embedding and output
groups, and what a pipelined FSDP2 stage keeps unsharded), DeepSpeed ZeRO-3's gathered layer
and prefetch bucket, ZeRO-1/2's gradient buckets, Megatron-core's bucket size and
Megatron-FSDP's gathered layers and gradient buckets (persistent under its double buffer); each a
cited :class:`~memsym.term.Term` with its knobs as symbols (their defaults are
:data:`memsym.terms.transients.DEFAULTS`).  Re-exported by :mod:`memsym.terms.transients`.
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..errors import InvalidValueError
from ..symbols import N, N_bkt, N_ll, N_pf, V, b_hp, b_r, b_u, d, h, n_ag, n_bkt, p, t
from ..term import Source, Term, Total
from ..values import as_expr, cached_max
from .megatron_fsdp import MEGATRON_FSDP_STRATEGIES

__all__ = ["fsdp2_transients", "fsdp2_io_groups", "fsdp2_stream_pools", "fsdp2_reshards_after_forward",
           "fsdp2_kept_unsharded", "fsdp2_pipeline_unsharded", "zero3_transients",
           "deepspeed_ipg_buckets", "megatron_buckets", "megatron_fsdp_fp8_unsharded",
           "megatron_fsdp_buckets"]

_FSDP_PG = Source("pytorch-fsdp2", "_fsdp_param_group.py, FSDPParamGroup (Note on overlapping "
                  "all-gather copy-in and all-gather: next group's all-gather overlaps the current)")
_FSDP_RS = Source("pytorch-fsdp2", "_fsdp_collectives.py, foreach_reduce (reduce_scatter_input of "
                  "the padded unsharded numel, reduce_output of 1/world of it, in reduce_dtype)")
_DS_EST = Source("deepspeed-zero", "runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs "
                 "(largest_layer_memory = 4 * largest_layer_params); "
                 "partitioned_param_coordinator.py (prefetch bucket)")
_DS_IPG = Source("deepspeed-zero", "runtime/zero/stage_1_and_2.py, DeepSpeedZeroOptimizer."
                 "setup_buckets (buf_0, and buf_1 with overlap_comm: torch.empty("
                 "reduce_bucket_size, dtype=self.dtype))")


def fsdp2_transients(group_params=None, dp=None) -> Total:
    r"""FSDP2's unsharded parameters (current + prefetched groups) and reduce-scatter buffers.

    With :math:`N_{\mathrm{ll}}` the parameters of the largest ``fully_shard`` group (one
    transformer block), :math:`n_{\mathrm{ag}}` groups unsharded at once:

    .. math::

        n_{\mathrm{ag}} N_{\mathrm{ll}} b_u \;+\; N_{\mathrm{ll}}\,b_u
        \;+\; N_{\mathrm{ll}}\,b_r\,(1 + 1/d)

    (all-gathered params; the block's unsharded gradients in param_dtype; reduce-scatter input
    and output in reduce_dtype).  Dim-0 padding to a multiple of :math:`d` is neglected here;
    :func:`memsym.terms.framework_state.fsdp2_padded_numel` counts it exactly.

    Parameters
    ----------
    dp : int
        Data-parallel size [GPUs].

    Examples
    --------
    >>> fsdp2_transients().evaluate(N_ll=10**6, n_ag=2, b_u=2, b_r=4, d=4)
    11000000

    References
    ----------
    .. [pytorch-fsdp2] ``_fsdp_param_group.py``, ``_fsdp_collectives.py:foreach_reduce``.
    """
    n = N_ll if group_params is None else as_expr(group_params)
    dp = d if dp is None else as_expr(dp)
    return Total("FSDP2 transients (backward of one block)", (
        Term("unsharded_params", n_ag * n * b_u, "all-gathered parameters of the current and "
             "prefetched groups, in param_dtype", _FSDP_PG, label="all-gathered params"),
        Term("unsharded_grads", n * b_u, "the block's unsharded gradients before copy-in",
             _FSDP_RS, label="unsharded grads"),
        Term("reduce_scatter", n * b_r * (1 + 1 / dp), "reduce-scatter input (unsharded) and "
             "output (1/d), in reduce_dtype", _FSDP_RS, label="reduce-scatter buffers"),
    ))


_TT_FSDP = Source("torchtitan", "models/llama3/infra/parallelize.py, apply_fsdp (since 83e694105: "
                  "tok_embeddings and [norm, output] their own groups, the latter "
                  "reshard_after_forward=False; before: the root fully_shard(model) holds them); "
                  "torch _fsdp_state.py _lazy_init (the root is never resharded after forward)")


def fsdp2_io_groups(root_group: bool = False, untied: bool = True, group_params=None) -> dict:
    r"""torchtitan's FSDP2 embedding / output groups beyond the blocks' (:func:`fsdp2_transients`).

    With :math:`P_{\mathrm{out}} = Vh/t + h` (output projection and final norm) and
    :math:`P_{\mathrm{io}} = P_{\mathrm{out}} + [\text{untied}]\,Vh/t` (with the embedding),
    in ``param_dtype`` (:math:`b_u`); at the loss and its backward no block is gathered since
    83e694105 and one (the last, not resharded) before, not :math:`n_{\mathrm{ag}}`:

    .. math::

        \text{since 83e694105:}\quad T_{\mathrm{fwd}} = T_{\mathrm{loss}} = P_{\mathrm{out}} b_u
        - n_{\mathrm{ag}} N_{\mathrm{ll}} b_u,\qquad T_{\mathrm{bwd}} = 0

        \text{root group (before):}\quad T_{\mathrm{fwd}} = T_{\mathrm{loss}} =
        P_{\mathrm{io}} b_u - (n_{\mathrm{ag}} - 1) N_{\mathrm{ll}} b_u,\qquad
        T_{\mathrm{bwd}} = P_{\mathrm{io}} b_u + (Vh/t) b_u

    Since 83e694105 ``[norm, output]`` is kept gathered after forward (FSDP2 would prefetch it at
    once for backward), every block is resharded (the last re-gathered by that group's pre-backward
    prefetch, after the loss's backward); the embedding is resharded after its forward.  Before, the
    root ``fully_shard(model)`` held the embedding, norm and output, unsharded from the forward's
    start to the root's post-backward at the end of the backward, with the output projection's
    unsharded gradient (made in the output layer's backward) waiting for it; the last block was not
    resharded after forward.

    Parameters
    ----------
    root_group : bool
        torchtitan's grouping before 83e694105 (the root holds embedding, norm and output).
    untied : bool
        Whether the output projection is its own matrix (not the embedding's).
    group_params : sympy.Expr, optional
        Parameters of one block on one GPU [parameters]; default ``N_ll``.

    Returns
    -------
    dict
        Phase name (``forward``, ``loss-backward``, ``backward``) -> tuple of Terms.

    Examples
    --------
    Llama-3 8B (h = 4096, V = 128256, t = 1), one block of 218112000 parameters:

    >>> ph = fsdp2_io_groups()
    >>> sum(t_.evaluate(V=128256, h=4096, t=1, b_u=2, n_ag=2, N_ll=218112000)
    ...     for t_ in ph["forward"]) == 2 * (128256 * 4096 + 4096) - 2 * 2 * 218112000
    True

    References
    ----------
    torchtitan ``apply_fsdp`` at 9dec370 and at 73a0e6979d (v0.2.2); PyTorch
    ``_fsdp_state.py`` (``_lazy_init``: ``post_forward_mesh_info = None`` for the root).
    """
    n = N_ll if group_params is None else as_expr(group_params)
    out_params = V * h / t + h
    io = out_params + (V * h / t if untied else 0)
    if not root_group:
        # every block resharded after forward; the output group's pre-backward prefetches the
        # last one only after the loss's backward
        none = Term("blocks_gathered_at_the_loss", -n_ag * n * b_u, "no block gathered at the "
                    "loss and its backward (all resharded after forward)", _TT_FSDP,
                    label="blocks' all-gathers freed at the loss")
        kept = Term("output_group_gathered", out_params * b_u, "[norm, output] kept gathered "
                    "after forward (reshard_after_forward=False)", _TT_FSDP,
                    label="[norm, output] kept gathered")
        return {"forward": (kept, none), "loss-backward": (kept, none), "backward": ()}
    one_block = Term("blocks_gathered_at_the_loss", -(n_ag - 1) * n * b_u, "one block gathered "
                     "at the loss and its backward, not n_ag: the last one, not resharded "
                     "after forward", _TT_FSDP, label="blocks' all-gathers freed at the loss but one")
    root = Term("root_group_gathered", io * b_u, "the root group (embedding, final norm, "
                "output) gathered from the forward's start to the backward's end", _TT_FSDP,
                label="root group gathered")
    grad = Term("output_grad_unsharded", V * h / t * b_u, "the output projection's unsharded "
                "gradient, until the root's reduce-scatter at the backward's end", _TT_FSDP,
                label="output grad unsharded")
    return {"forward": (root, one_block), "loss-backward": (root, one_block),
            "backward": (root, grad)}


_POOLS = Source("pytorch-fsdp2", "_fsdp_collectives.py foreach_reduce (reduce_output allocated "
                "under reduce_scatter_stream), foreach_all_gather (all_gather_output under "
                "all_gather_copy_in_stream); _fsdp_param_group.py AllGatherState (freed after the "
                "next group's all-gather); c10/cuda/CUDACachingAllocator.cpp: a freed block is "
                "re-used only on the stream that allocated it; pytorch/pytorch#129721")


def fsdp2_stream_pools(grads, group_params=None, *, root_group: bool = False,
                       untied: bool = True, first: bool = True, last: bool = True) -> tuple:
    r"""The caching allocator's FSDP2 side-stream pools, reserved beside the default stream's [bytes].

    PyTorch's caching allocator re-uses a freed block only on the stream that allocated it.
    FSDP2 allocates the reduce-scatter outputs, which become the sharded gradients, in its
    reduce-scatter stream: freed together by the next step's ``zero_grad()``, their blocks
    stay reserved for that stream while the default stream runs the forward and the loss
    (pytorch/pytorch#129721 keeps them there and moved the reduce-scatter *input* to the
    default stream for that reason).  It allocates each group's all-gather output in its
    copy-in stream, and in forward frees it only after the next group's all-gather, so that
    pool holds the largest two consecutive groups in ``param_dtype``.  With :math:`G` the
    sharded gradients (``reduce_dtype``), :math:`N_{\mathrm{ll}}` a block,
    :math:`P_e = Vh/t` the embedding and :math:`P_o = Vh/t + h` the ``[norm, output]`` group
    on the stages that hold them:

    .. math::

        M_{\mathrm{rs}} = G,\qquad
        M_{\mathrm{ag}} = b_u \max\bigl(2N_{\mathrm{ll}},\; P_e + N_{\mathrm{ll}},\;
        N_{\mathrm{ll}} + P_o\bigr)

    and with torchtitan's root group (before 83e694105), gathered first,
    :math:`M_{\mathrm{ag}} = b_u (P_{\mathrm{root}} + N_{\mathrm{ll}})`.

    Parameters
    ----------
    grads : sympy.Expr
        The sharded gradients :math:`G` on one GPU [bytes].
    group_params : sympy.Expr, optional
        Parameters of one block on one GPU [parameters]; default ``N_ll``.
    root_group, untied, first, last : bool
        torchtitan's root group; an output projection of its own; the stage holds the
        embedding; the stage holds the final norm and output.

    Returns
    -------
    tuple of Term
        ``reduce_scatter_pool`` and ``all_gather_pool``.

    Examples
    --------
    Llama-3 8B on 8 GPUs (V = 128256, h = 4096, a block of 218112000 parameters, bf16): the
    fp32 gradient shard, 4 x 8030261248 / 8 bytes, and the ``[norm, output]`` group with one
    block, 2 x (128256 x 4096 + 4096 + 218112000) bytes:

    >>> rs, ag = fsdp2_stream_pools(sp.Integer(4 * 8030261248 // 8))
    >>> rs.expr, ag.evaluate(V=128256, h=4096, t=1, N_ll=218112000, b_u=2)
    (4015130624, 1486905344)

    References
    ----------
    .. [pytorch-fsdp2] ``_fsdp_collectives.py`` (``foreach_reduce``, ``foreach_all_gather``).
    .. [pytorch-cuda-allocator] caching per stream.
    """
    n = N_ll if group_params is None else as_expr(group_params)
    emb = V * h / t if first and untied else 0
    out = V * h / t + h if last else 0
    pairs = [(emb + out + n)] if root_group and (emb or out) else \
        [2 * n] + ([emb + n] if emb else []) + ([n + out] if last else [])
    return (Term("reduce_scatter_pool", as_expr(grads), "the reduce-scatter stream's cached "
                 "outputs: the sharded gradients, freed by zero_grad and kept reserved for "
                 "that stream", _POOLS, label="reduce-scatter pool"),
            Term("all_gather_pool", b_u * cached_max(*pairs), "the all-gather copy-in stream's "
                 "cached outputs: two consecutive groups in param_dtype", _POOLS,
                 label="all-gather pool"))


def fsdp2_reshards_after_forward(setting="default", *, is_root=False, pp_enabled=False,
                                 torchtitan=True) -> bool:
    """Whether FSDP2 frees a group's unsharded parameters after its forward.

    FSDP2 (``fully_shard(reshard_after_forward=None)``, the default): True except for the root
    module, whose parameters would be re-gathered at once (``FSDPState._lazy_init``).
    torchtitan's ``fsdp_reshard_after_forward``: ``"always"`` True, ``"never"`` False,
    ``"default"`` ``not pp_enabled`` (with pipeline parallelism no block reshards: per-microbatch
    all-gathers would not overlap).

    Examples
    --------
    >>> fsdp2_reshards_after_forward(pp_enabled=True), fsdp2_reshards_after_forward()
    (False, True)
    >>> fsdp2_reshards_after_forward(None, is_root=True, torchtitan=False)
    False

    References
    ----------
    PyTorch ``_fully_shard.py`` and ``_fsdp_state.py:_lazy_init``; torchtitan
    ``torchtitan/distributed/fsdp.py:get_fsdp_reshard_after_forward_policy`` (b5bcd76c66).
    """
    if torchtitan:
        if setting not in ("always", "never", "default"):
            raise InvalidValueError(f"torchtitan's fsdp_reshard_after_forward is always, never or "
                                    f"default, not {setting!r}")
        return {"always": True, "never": False}.get(setting, not pp_enabled)
    if setting is None or setting == "default":
        return not is_root
    if isinstance(setting, bool):
        return setting
    raise InvalidValueError(f"reshard_after_forward is None, True or False here, not {setting!r}")


_MFSDP_AG = Source("megatron-core", "core/distributed/fsdp/src/megatron_fsdp/ at 2a75ac12c5 "
                   "(Bridge's pin; the same lines at d98e8a64dd): param_and_grad_buffer.py:2526 "
                   "UB_BUFFER_NUM = 2 (fsdp_double_buffer's weight_alloc), 2632 the FP8 groups' "
                   "model_weight_buffer in uint8; megatron_fsdp.py:498 the transpose made only "
                   "in backward (fp8_create_transpose_cache), 626 discarded on release without "
                   "keep_fp8_transpose_cache")


def megatron_fsdp_fp8_unsharded(group_params=None) -> Term:
    r"""Megatron-FSDP's all-gathered FP8 parameters: the current and prefetched layer [bytes].

    .. math:: n_{\mathrm{ag}}\, N_{\mathrm{ll}} \cdot 1

    With FP8 parameters (``fp8_param_gather``) Megatron-FSDP all-gathers the uint8
    ``model_weight_buffer`` of a layer into one of its two buckets (``fsdp_double_buffer``:
    the layer computing and the one prefetched, :math:`n_{\mathrm{ag}} = 2`), one byte per
    parameter where FSDP2's bf16 gather (:func:`fsdp2_transients`) takes :math:`b_u = 2`;
    the layer's norms (bf16, :math:`2h` parameters) are counted at one byte too.  The FP8
    transpose Transformer Engine makes for the backward's GEMMs exists only where FP8 GEMMs
    need the TN layout (Hopper); it is discarded when the layer is released
    (``keep_fp8_transpose_cache`` false) and is not counted (Blackwell makes none).

    Parameters
    ----------
    group_params : sympy.Expr or int, optional
        Parameters of one gathered layer on this GPU [parameters]; default ``N_ll``.

    Returns
    -------
    Term
        The gathered FP8 weights of ``n_ag`` layers [bytes].

    Examples
    --------
    Llama 3 70B at t = 1: 855,654,400 parameters per layer, two layers gathered, 1.71 GB:

    >>> megatron_fsdp_fp8_unsharded(855654400).evaluate(n_ag=2)
    1711308800

    References
    ----------
    .. [megatron-core] ``megatron_fsdp/param_and_grad_buffer.py`` at 2a75ac12c5: 2526
       (``UB_BUFFER_NUM = 2``), 2632 (uint8 model weights); ``megatron_fsdp.py`` 498, 626.
    .. [transformer-engine] ``pytorch/tensor/utils.py`` ``post_all_gather_processing``
       at d0067d0da6.
    """
    n = N_ll if group_params is None else as_expr(group_params)
    return Term("unsharded_params", n_ag * n, "all-gathered FP8 parameters of the current and "
                "prefetched layers (Megatron-FSDP's uint8 buckets)", _MFSDP_AG,
                label="all-gathered fp8 params")


_MFSDP_BUF = Source("megatron-core", "core/distributed/fsdp/src/megatron_fsdp/"
                    "param_and_grad_buffer.py at d98e8a64dd (the same code at 2a75ac12c5): "
                    "2329-2345 which buffers a strategy shards; 2524-2576 fsdp_double_buffer: "
                    "FixedPoolAllocator weight_alloc and main_grad_alloc of UB_BUFFER_NUM = 2 "
                    "units, 857 get_global_memory_buffer().get_tensor (persistent, by name); "
                    "else 527 StorageResizeBasedBucketAllocator (freed on release); 3924-3953 "
                    "wait_for_previous_grad_reduce: one bucket reducing beside the one filled")


def megatron_fsdp_buckets(strategy: str = "optim_grads_params", grad_width=4, *,
                          double_buffer: bool = False, group_params=None,
                          param_width=b_u) -> dict:
    r"""Megatron-FSDP's unsharded buckets, by phase [bytes].

    A sharded ``model_weight_buffer`` (``optim_grads_params``) is all-gathered one FSDP unit
    (transformer layer) at a time into a bucket, the layer computing and the one prefetched,
    :math:`n_{\mathrm{ag}} N_{\mathrm{ll}} b_u`; a sharded ``main_grad_buffer``
    (``optim_grads``, ``optim_grads_params``) takes the backward's gradients in an unsharded
    bucket per layer, reduce-scattered into the shard, one reducing beside the one filled,
    :math:`2 N_{\mathrm{ll}} b_g`.  Without ``fsdp_double_buffer`` the buckets are freed on
    release (the gathered weights in forward and backward, the gradient buckets in backward);
    with it they are two persistent pools of each, held in every phase, the optimizer step
    included:

    .. math::

        \text{double buffer:}\quad 2 N_{\mathrm{ll}} b_u\,[\text{weights sharded}]
        + 2 N_{\mathrm{ll}} b_g\,[\text{grads sharded}]

    Parameters
    ----------
    strategy : {"no_shard", "optim", "optim_grads", "optim_grads_params"}
        Megatron-FSDP's ``--data-parallel-sharding-strategy``.
    grad_width : int or sympy.Expr
        Bytes per element of the main grads, :math:`b_g` [bytes].
    double_buffer : bool
        ``--fsdp-double-buffer`` (also set by ``--use-nccl-ub`` and
        ``--megatron-fsdp-max-pool-double-buffer``).
    group_params : sympy.Expr or int, optional
        Parameters of one layer on this GPU [parameters]; default ``N_ll``.
    param_width : int or sympy.Expr
        Bytes per gathered weight [bytes]; default :math:`b_u` (1 for FP8 parameters).

    Returns
    -------
    dict
        Phase (``forward``, ``loss-backward``, ``backward``, ``optimizer``) -> tuple of Terms.

    Examples
    --------
    By hand, a 10^6-parameter layer in bf16 with bf16 main grads: without the double buffer
    the backward holds 2 gathered layers and 2 gradient buckets, 8 MB, the step nothing; with
    it every phase holds both pools:

    >>> ph = megatron_fsdp_buckets(grad_width=2, group_params=10**6)
    >>> [sum(t.evaluate(n_ag=2, b_u=2) for t in ph[k]) for k in ("forward", "backward", "optimizer")]
    [4000000, 8000000, 0]
    >>> ph = megatron_fsdp_buckets(grad_width=2, double_buffer=True, group_params=10**6)
    >>> sum(t.evaluate(b_u=2) for t in ph["optimizer"])
    8000000

    References
    ----------
    .. [megatron-core] ``megatron_fsdp/param_and_grad_buffer.py`` at d98e8a64dd: 527, 647-857
       (``FixedPoolAllocator``), 2329-2345, 2524-2576, 3924-3953.
    """
    shard_w, _, shard_g = MEGATRON_FSDP_STRATEGIES[strategy]
    n = N_ll if group_params is None else as_expr(group_params)
    grads = Term("unsharded_grads", 2 * n * as_expr(grad_width), "the layer's unsharded "
                 "gradient bucket and the one reduce-scattering (main_grad dtype)", _MFSDP_BUF,
                 label="unsharded grad buckets")
    if double_buffer:
        pools = ((Term("unsharded_params", 2 * n * as_expr(param_width), "fsdp_double_buffer's two persistent "
                       "weight buckets (gathered layers)", _MFSDP_BUF,
                       label="double-buffer params"),) if shard_w else ()) + (
            (replace(grads, description="fsdp_double_buffer's two persistent gradient "
                     "buckets", label="double-buffer grads"),) if shard_g else ())
        return {ph: pools for ph in ("forward", "loss-backward", "backward", "optimizer")}
    gathered = (Term("unsharded_params", n_ag * n * as_expr(param_width), "all-gathered parameters of the "
                     "current and prefetched layers (freed on release)", _MFSDP_BUF,
                     label="all-gathered params"),) if shard_w else ()
    return {"forward": gathered, "loss-backward": gathered,
            "backward": gathered + ((grads,) if shard_g else ()), "optimizer": ()}


def fsdp2_kept_unsharded(stage_params=None) -> Term:
    r"""Unsharded parameters kept from forward to backward when FSDP2 does not reshard.

    .. math:: \Psi_{\mathrm{stage}}\, b_u

    on top of the sharded copy of :func:`memsym.terms.model_state.model_state` (the all-gather
    output is its own full-size buffer in ``param_dtype``): every block of the stage stays
    gathered (torchtitan with PP, ``reshard_after_forward=False``, or the root).

    Examples
    --------
    >>> fsdp2_kept_unsharded(8 * 10**9).evaluate(b_u=2)
    16000000000

    References
    ----------
    .. [pytorch-fsdp2] ``_fsdp_param_group.py``, ``FSDPParamGroup`` (all-gather output buffer).
    """
    n = N / (p * t) if stage_params is None else as_expr(stage_params)
    return Term("kept_unsharded", n * b_u, "unsharded parameters kept between "
                "forward and backward (no reshard after forward)", _FSDP_PG,
                label="params kept gathered")


def fsdp2_pipeline_unsharded(stage_params=None) -> Total:
    r"""What an FSDP2 pipeline stage keeps unsharded through the pipelined step [bytes].

    With :math:`\Psi_{\mathrm{stage}}` the stage's parameters on one GPU:

    .. math::

        \underbrace{\Psi_{\mathrm{stage}}\, b_u}_{\text{parameters kept gathered}}
        \;+\; \underbrace{\Psi_{\mathrm{stage}}\, b_r}_{\text{accumulated gradients}}

    ``torch.distributed.pipelining`` runs each micro-batch's backward of an FSDP2 stage with
    ``set_reshard_after_backward(False)`` and ``set_requires_gradient_sync(False)`` and
    reduce-scatters once after the last: the all-gathered parameters stay (torchtitan also
    skips the reshard after forward under PP) and each parameter's unsharded gradient is
    accumulated, in ``reduce_dtype`` when it differs from ``param_dtype``
    (``FSDPParam.to_accumulated_grad_if_needed``: the fp32 copy of a bf16 gradient).  Both are
    on top of the sharded states of :func:`memsym.terms.model_state.model_state`.

    Examples
    --------
    A 405B stage of 16 layers at t = 8 (6.3e9 parameters per GPU) keeps 6 bytes each:

    >>> fsdp2_pipeline_unsharded(10**9).evaluate(b_u=2, b_r=4)
    6000000000

    References
    ----------
    PyTorch ``torch/distributed/pipelining/stage.py`` (``backward_maybe_with_nosync``),
    ``_fsdp_param.py`` (``to_accumulated_grad_if_needed``, ``accumulate_unsharded_grad_if_needed``);
    torchtitan ``distributed/fsdp.py`` (no reshard after forward with PP).
    """
    kept = fsdp2_kept_unsharded(stage_params)
    n = kept.expr / b_u
    return Total("FSDP2 under pipeline parallelism: unsharded stage", (
        kept,
        Term("accumulated_grads", n * b_r, "unsharded gradients accumulated over the "
             "micro-batches (reduce_dtype) until the last backward reduce-scatters them",
             Source("pytorch-pipelining", "stage.py, backward_maybe_with_nosync; _fsdp_param.py "
                    "to_accumulated_grad_if_needed"), label="accumulated grads"),
    ))


def zero3_transients(largest_layer=None, persistent_params=None) -> Total:
    r"""DeepSpeed ZeRO-3: the gathered largest layer and the prefetch bucket.

    .. math:: 4 N_{\mathrm{ll}} + b_u N_{\mathrm{pf}}

    (16-bit parameters and gradients of the largest layer, DeepSpeed's estimator; the
    ``stage3_prefetch_bucket_size`` elements fetched ahead).  Parameters below
    ``stage3_param_persistence_threshold`` (1e5 elements: norms, biases) stay gathered on every
    rank: pass their count as ``persistent_params`` for a ``persistent`` term
    :math:`b_u N_{\mathrm{persist}}(1 - 1/d)` beyond their shard.  A parameter reused within
    ``stage3_max_reuse_distance`` (1e9) is not released, and ``stage3_max_live_parameters``
    (1e9) caps what is gathered: neither is modelled.

    Examples
    --------
    >>> zero3_transients().evaluate(N_ll=10**8, N_pf=5 * 10**7, b_u=2)
    500000000

    References
    ----------
    DeepSpeed ``runtime/zero/stage3.py``, ``partitioned_param_coordinator.py``.
    """
    n = N_ll if largest_layer is None else as_expr(largest_layer)
    terms = [
        Term("gathered_layer", 4 * n, "16-bit parameters and gradients of the largest layer",
             _DS_EST, label="gathered layer"),
        Term("prefetch", b_u * N_pf, "parameters prefetched ahead (stage3_prefetch_bucket_size)",
             _DS_EST, label="prefetch bucket"),
    ]
    if persistent_params is not None:
        terms.append(Term("persistent", b_u * as_expr(persistent_params) * (1 - 1 / d),
                          "parameters under stage3_param_persistence_threshold, kept whole",
                          Source("deepspeed-zero", "runtime/zero/config.py "
                                 "(stage3_param_persistence_threshold 1e5); "
                                 "partitioned_param_coordinator.py"), label="persistent params"))
    return Total("ZeRO-3 transients", tuple(terms))


def deepspeed_ipg_buckets() -> Total:
    r"""DeepSpeed ZeRO-1/2 independent-partition gradient buckets.

    .. math:: n_{\mathrm{bkt}}\, N_{\mathrm{bkt}}\, b_{hp}

    ``reduce_bucket_size`` elements in the optimizer's 16-bit dtype, two buffers with
    ``overlap_comm``: 1 GB (2 GB) at the defaults with bf16.

    Examples
    --------
    >>> deepspeed_ipg_buckets().evaluate(n_bkt=2, N_bkt=5 * 10**8, b_hp=2)
    2000000000

    References
    ----------
    DeepSpeed ``runtime/zero/stage_1_and_2.py``.
    """
    return Total("DeepSpeed IPG buckets", (
        Term("ipg_buckets", n_bkt * N_bkt * b_hp, "contiguous gradient buckets "
             "(reduce_bucket_size, x2 with overlap_comm)", _DS_IPG, label="IPG buckets"),
    ))


def megatron_buckets(dp=None) -> sp.Expr:
    r"""Megatron-core's bucket size [parameters]: views into the buffers, no extra memory.

    .. math:: \max(4\cdot10^7,\; 10^6\, d)

    Gradient buckets are slices of ``grad_data`` and the distributed optimizer all-gathers
    parameters in place into ``param_data``, so the buckets add no memory beyond the model
    states; they size NCCL's messages.  Buckets exist only with ``overlap_grad_reduce`` and on
    pipeline rank 0.

    Parameters
    ----------
    dp : int
        Data-parallel size [GPUs].

    Examples
    --------
    >>> megatron_buckets(64)
    64000000
    >>> megatron_buckets(8)
    40000000

    References
    ----------
    Megatron-LM ``megatron/core/distributed/distributed_data_parallel.py`` at d98e8a64dd.
    """
    dp = d if dp is None else as_expr(dp)
    return sp.Max(40 * 10**6, 10**6 * dp)

