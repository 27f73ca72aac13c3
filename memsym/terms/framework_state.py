"""Exact per-rank model-state bytes as a framework lays out concrete tensors.

Integer counts for given parameter shapes (FSDP2's dim-0 shards with their padding, PyTorch
optimizer states), the exact companions of :func:`memsym.terms.model_state.model_state`'s
per-parameter forms; the engine tests compare them with real PyTorch tensors.
"""

from __future__ import annotations

from math import ceil, lcm, prod

from ..errors import InvalidValueError

__all__ = ["fsdp2_local_rows", "fsdp2_padded_numel", "fsdp2_rank_bytes", "adam_state_bytes",
           "sgd_state_bytes", "megatron_buffer_layout", "megatron_distopt_rank_bytes"]

_MAX_TENSORS = 100_000  # bound on the shapes a caller may pass


def _check_shapes(shapes):
    shapes = [tuple(int(x) for x in shape) for shape in shapes]
    if len(shapes) > _MAX_TENSORS:
        raise InvalidValueError(f"at most {_MAX_TENSORS} parameter shapes, got {len(shapes)}")
    for shape in shapes:
        if not shape or any(x < 0 for x in shape):
            raise InvalidValueError(f"a parameter shape is a non-empty tuple of sizes >= 0, got {shape}")
    return shapes


def _check_numels(numels, what: str = "numels") -> list:
    """``numels`` as ints: at most :data:`_MAX_TENSORS` sizes, each >= 0 (``what`` names them)."""
    numels = [int(n) for n in numels]
    if len(numels) > _MAX_TENSORS or any(n < 0 for n in numels):
        raise InvalidValueError(f"{what}: at most {_MAX_TENSORS} sizes, each >= 0")
    return numels


def _check_world(world, rank=0):
    if int(world) != world or world < 1 or int(rank) != rank or not 0 <= rank < world:
        raise InvalidValueError(f"world must be an integer >= 1 and 0 <= rank < world, got "
                                f"world={world}, rank={rank}")


def fsdp2_local_rows(dim0: int, world: int, rank: int) -> int:
    r"""Rows of dim 0 that FSDP2 gives ``rank`` (``torch.chunk`` then empty chunks).

    .. math::

        r = \lceil n_0 / W \rceil,\qquad \text{rows}_k = \max(0, \min(r, n_0 - k r))

    Examples
    --------
    >>> [fsdp2_local_rows(5, 4, k) for k in range(4)]
    [2, 2, 1, 0]

    References
    ----------
    PyTorch ``_fsdp_common.py:_chunk_with_empty``; ``_fsdp_param.py:_init_sharded_param``.
    """
    _check_world(world, rank)
    rows = ceil(dim0 / world)
    return max(0, min(rows, dim0 - rank * rows))


def fsdp2_padded_numel(shape, world: int) -> int:
    r"""Elements FSDP2 allocates for one parameter's shard on every rank (padded chunk 0).

    .. math::

        \lceil n_0 / W \rceil \prod_{i>0} n_i

    ``padded_sharded_param_size = chunks[0].size()``: each rank's storage is the first
    (largest) chunk; the local tensor is a narrow view of it.

    Examples
    --------
    >>> fsdp2_padded_numel((5, 7), 4)
    14
    """
    _check_world(world)
    (shape,) = _check_shapes([shape])
    return ceil(shape[0] / world) * prod(shape[1:])


def fsdp2_rank_bytes(shapes, world: int, rank: int, param_bytes: int = 4,
                     grad_bytes: int | None = None, state_bytes: int = 4,
                     n_states: int = 2, step_bytes: int = 4) -> dict:
    r"""Bytes one rank holds after an FSDP2 step: params, grads, optimizer states.

    .. math::

        \text{params} = \text{grads}/\tfrac{b_g}{b_p} = b_p \sum_j \lceil n_{0j}/W\rceil
        \prod_{i>0} n_{ij},\qquad
        \text{states} = \sum_j (n_s\, b_s\, \text{rows}_{jk} \prod_{i>0} n_{ij} + b_{\text{step}})

    Parameters and gradients are padded (the gradient is a view into the group's flat
    reduce-scatter output of padded size); the optimizer's ``zeros_like`` states follow the
    unpadded local tensor, plus one 0-d fp32 ``step`` per parameter (kept on the CPU by
    non-fused AdamW, counted separately as ``step``).

    Parameters
    ----------
    shapes : iterable of tuple of int
        The unsharded parameter shapes of all groups.
    world, rank : int
        Shard group size and this rank [GPUs].
    param_bytes, grad_bytes, state_bytes : int
        Bytes per element of the sharded params (original dtype), grads (default: params)
        and each optimizer state [bytes].
    n_states, step_bytes : int
        Tensors of state per parameter (AdamW 2, SGD momentum 1) and the step scalar's bytes
        (0 for SGD) [bytes].

    Returns
    -------
    dict
        ``params``, ``grads``, ``states`` (moments), ``step`` [bytes].

    Examples
    --------
    >>> fsdp2_rank_bytes([(5, 7), (5,), (3, 5)], 4, 3)
    {'params': 84, 'grads': 84, 'states': 0, 'step': 12}
    """
    _check_world(world, rank)
    shapes = _check_shapes(shapes)
    grad_bytes = param_bytes if grad_bytes is None else grad_bytes
    padded = sum(fsdp2_padded_numel(sh, world) for sh in shapes)
    local = sum(fsdp2_local_rows(sh[0], world, rank) * prod(sh[1:]) for sh in shapes)
    return {"params": padded * param_bytes, "grads": padded * grad_bytes,
            "states": local * n_states * state_bytes, "step": len(shapes) * step_bytes}


def adam_state_bytes(numels, state_bytes: int = 4, step_bytes: int = 4) -> dict:
    r"""torch.optim.Adam/AdamW state: two moments per element and one step per tensor.

    .. math::

        \text{moments} = 2 b_s \sum_j n_j,\qquad \text{step} = 4\,|\{j\}|

    Examples
    --------
    >>> adam_state_bytes([35, 5, 15])
    {'moments': 440, 'step': 12}

    References
    ----------
    PyTorch ``torch/optim/adam.py:Adam._init_group``.
    """
    numels = _check_numels(numels)
    return {"moments": 2 * state_bytes * sum(numels), "step": step_bytes * len(numels)}


def sgd_state_bytes(numels, state_bytes: int = 4) -> dict:
    r"""torch.optim.SGD with momentum: one ``momentum_buffer`` per parameter, no step.

    .. math::

        \text{moments} = b_s \sum_j n_j

    Examples
    --------
    >>> sgd_state_bytes([35, 5])
    {'moments': 160, 'step': 0}
    """
    numels = _check_numels(numels)
    return {"moments": state_bytes * sum(numels), "step": 0}


def megatron_buffer_layout(param_numels, dp: int, bucket_size: int | None = None,
                           shared_embedding=(), pad_for_high_nccl_busbw: bool = False) -> tuple:
    r"""Megatron-core's contiguous buffer layout: (param ranges, bucket ranges, buffer numel).

    A port of ``DistributedOptimizer._compute_per_buffer_param_layout``: parameters in
    reverse (backprop) order, each start aligned to 64 elements, a bucket closed once it holds
    ``bucket_size`` elements (or at a shared embedding), each bucket end padded to
    :math:`\mathrm{lcm}(d, 128)` (:math:`\mathrm{lcm}(d, 128, 2^{16})` with
    ``pad_buckets_for_high_nccl_busbw``).  ``grad_data`` and ``param_data`` have the last
    bucket end's numel on every rank.

    Parameters
    ----------
    param_numels : sequence of int
        Elements of each parameter, in ``module.parameters()`` order.
    dp : int
        Data-parallel (DP·CP, or expert-DP) size the buffer is sharded for [GPUs].
    bucket_size : int, optional
        Elements per bucket (:func:`memsym.terms.transients.megatron_buckets`); None: one bucket.
    shared_embedding : iterable of int
        Indices of parameters flagged ``shared_embedding`` (they get a bucket of their own).

    Returns
    -------
    tuple
        ``(ranges, buckets, numel)``: per-parameter ``(start, end)`` in parameter order, the
        ``(start, end)`` of each bucket, the padded buffer size [elements].

    Examples
    --------
    >>> megatron_buffer_layout([100, 30], 4)
    ([(64, 164), (0, 30)], [(0, 256)], 256)

    References
    ----------
    Megatron-core ``core/optimizer/distrib_optimizer.py:_compute_per_buffer_param_layout``,
    ``core/optimizer/param_layout.py`` (d98e8a64dd).
    """
    numels = _check_numels(param_numels, "param_numels")
    _check_world(dp)
    if bucket_size is not None and (int(bucket_size) != bucket_size or bucket_size < 1):
        raise InvalidValueError(f"bucket_size must be a positive integer or None, got {bucket_size}")
    shared = set(int(i) for i in shared_embedding)
    divisor = lcm(dp, 128, 2**16) if pad_for_high_nccl_busbw else lcm(dp, 128)

    def pad(value, div):
        return -(-value // div) * div

    ranges = [None] * len(numels)
    buckets = []
    start = bucket_start = 0
    in_bucket = 0
    end = 0
    for i in reversed(range(len(numels))):
        start = pad(start, 64)
        if i in shared and in_bucket:
            buckets.append((bucket_start, pad(start, divisor)))
            bucket_start = start = buckets[-1][1]
            in_bucket = 0
        end = start + numels[i]
        ranges[i] = (start, end)
        in_bucket += 1
        if (bucket_size is not None and end - bucket_start >= bucket_size) or i in shared:
            buckets.append((bucket_start, pad(end, divisor)))
            bucket_start = start = buckets[-1][1]
            in_bucket = 0
        else:
            start = end
    if in_bucket:
        buckets.append((bucket_start, pad(end, divisor)))
    return ranges, buckets, (buckets[-1][1] if buckets else 0)


def megatron_distopt_rank_bytes(param_numels, dp: int, rank: int, param_bytes: int = 2,
                                grad_bytes: int = 4, main_bytes: int = 4, moment_bytes: int = 8,
                                bucket_size: int | None = None) -> dict:
    r"""Bytes one rank of Megatron's distributed optimizer holds, padding included.

    .. math::

        \text{param\_data} = b_p\,n_{\mathrm{buf}},\quad
        \text{grad\_data} = b_g\,n_{\mathrm{buf}},\quad
        \text{main} = (b_m + b_o) \sum_j |[s_j, e_j) \cap \text{shard}_k|

    Each bucket splits into :math:`d` equal shards; rank :math:`k` creates fp32 main params
    (``shard_model_param.clone().float()``) and Adam states only for the parameter elements in
    its shards, so the padding costs 16-bit + gradient bytes but no optimizer bytes.

    Parameters
    ----------
    param_numels : sequence of int
        Elements of each parameter, in ``module.parameters()`` order [parameters].
    dp : int
        Data-parallel (DP·CP, or expert-DP) size the buffer is sharded for [GPUs].
    rank : int
        The data-parallel rank k, 0 .. d−1.
    param_bytes, grad_bytes, main_bytes, moment_bytes : int
        Bytes per element of the 16-bit parameter buffer, the gradient buffer, the fp32 main
        parameters and the optimizer moments [bytes/parameter].
    bucket_size : int, optional
        Elements per bucket (:func:`megatron_buffer_layout`); None: one bucket.

    Returns
    -------
    dict of str to int
        ``param_data``, ``grad_data`` and ``main_and_moments`` [bytes].

    Examples
    --------
    >>> megatron_distopt_rank_bytes([100, 30], 4, 0)
    {'param_data': 512, 'grad_data': 1024, 'main_and_moments': 360}
    """
    _check_world(dp, rank)
    ranges, buckets, numel = megatron_buffer_layout(param_numels, dp, bucket_size)
    owned = 0
    for lo, hi in buckets:
        shard = (hi - lo) // dp
        s_lo, s_hi = lo + rank * shard, lo + (rank + 1) * shard
        owned += sum(max(0, min(e, s_hi) - max(s, s_lo)) for s, e in ranges
                     if lo <= s < hi)
    return {"param_data": numel * param_bytes, "grad_data": numel * grad_bytes,
            "main_and_moments": owned * (main_bytes + moment_bytes)}
