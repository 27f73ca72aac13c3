"""Exact per-rank model-state bytes as a framework lays out concrete tensors.

Integer counts for given parameter shapes (FSDP2's dim-0 shards with their padding, PyTorch
optimizer states), the exact companions of :func:`memsym.terms.model_state.model_state`'s
per-parameter forms; the engine tests compare them with real PyTorch tensors.
"""

from __future__ import annotations

from math import ceil, prod

from ..errors import InvalidValueError

__all__ = ["fsdp2_local_rows", "fsdp2_padded_numel", "fsdp2_rank_bytes", "adam_state_bytes",
           "sgd_state_bytes"]

_MAX_TENSORS = 100_000  # bound on the shapes a caller may pass


def _check_shapes(shapes):
    shapes = [tuple(int(x) for x in shape) for shape in shapes]
    if len(shapes) > _MAX_TENSORS:
        raise InvalidValueError(f"at most {_MAX_TENSORS} parameter shapes, got {len(shapes)}")
    for shape in shapes:
        if not shape or any(x < 0 for x in shape):
            raise InvalidValueError(f"a parameter shape is a non-empty tuple of sizes >= 0, got {shape}")
    return shapes


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
    numels = [int(n) for n in numels]
    if len(numels) > _MAX_TENSORS or any(n < 0 for n in numels):
        raise InvalidValueError("numels: at most 100000 sizes, each >= 0")
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
    numels = [int(n) for n in numels]
    if len(numels) > _MAX_TENSORS or any(n < 0 for n in numels):
        raise InvalidValueError("numels: at most 100000 sizes, each >= 0")
    return {"moments": state_bytes * sum(numels), "step": 0}
