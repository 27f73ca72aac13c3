r"""Element-wise passes Megatron-core's MoE experts run in eager PyTorch, outside any fused
kernel: the clamp before a clamped GLU (or, unfused, the whole eager GLU) and the routed
experts' fc2 bias.

Each is priced by the HBM bytes its kernels move, forward and backward (the backward as
autograd runs the same graph), at the GPU's HBM bandwidth; a GEMM record says which passes
follow it (:attr:`memsym.timing.gemm.Gemm.eager`).  GPT-OSS (biases on every linear layer,
``swiglu_limit`` 7.0) runs both; the other presets neither.  :mod:`memsym.timing.moe` adds
them to the MoE layer's memory-bound time.

References
----------
.. [megatron-moe-eager] Megatron-LM core_v0.15.0 ... core_v0.17.0 (the Megatron-core of
   Megatron-Bridge 25.11 ... 26.04): megatron/core/transformer/moe/experts.py
   (``TEGroupedMLP``), megatron/core/fusions/fused_bias_geglu.py.
"""

from __future__ import annotations

from .efficiency import as_array, memory_time

__all__ = ["expert_bias_bytes", "glu_clamp_bytes", "eager_glu_bytes", "swiglu_clamp_bytes",
           "eager_seconds"]


def expert_bias_bytes(rows, h, *, width: int = 2):
    r"""HBM bytes (forward, backward) of adding the routed experts' fc2 bias, one MoE layer [bytes].

    ``TEGroupedMLP`` builds ``linear_fc2`` with ``skip_bias_add=True``, so the grouped GEMM
    returns the per-expert biases unapplied, and ``_apply_bias`` adds them scaled by each
    row's routing probability, one expert at a time in eager PyTorch [megatron-moe-bias]::

        torch.cat([t + b * p for t, b, p in zip(torch.split(out, tokens_per_expert),
                                                bias, torch.split(probs, tokens_per_expert))])

    (``.to(dtype)`` after it is a no-op: output, bias and the router's probabilities are all
    bf16; the router's fused top-k returns the logits' dtype).  Per element of the
    :math:`[R, h]` output, forward: ``b * p`` writes a product (1), the add reads two and
    writes one (3), ``torch.cat`` reads and writes (2): 6 element passes.  Backward
    (autograd of the same graph): the output gradient reaches ``out`` through the split's
    backward, which concatenates the pieces again (read + write: 2); ``b * p``'s backward
    forms ``grad * p`` and ``grad * b`` (each a write and a read back for its reduction
    over rows or columns, reading the gradient once each: 6): 8 element passes.

    .. math:: (6\,R\,h\,w,\; 8\,R\,h\,w)

    Parameters
    ----------
    rows : array_like
        Routed rows the GPU's experts process, R [rows].
    h : int
        fc2's output width, the hidden size [1].
    width : int
        Bytes per element [bytes] (bf16: 2).

    Returns
    -------
    tuple of numpy.ndarray
        Forward and backward HBM bytes [bytes].

    References
    ----------
    .. [megatron-moe-bias] Megatron-LM core_v0.15.0 ... core_v0.17.0 (the containers of
       Megatron-Bridge 25.11 ... 26.04): megatron/core/transformer/moe/experts.py,
       ``TEGroupedMLP.__init__`` (``linear_fc2``: ``bias=config.add_bias_linear,
       skip_bias_add=True``) and ``TEGroupedMLP._apply_bias``; ``add_bias_linear`` in
       transformer_config.py [megatron-lm-arguments].

    Examples
    --------
    GPT-OSS 120B on one B200 with EP 8 and 4 x 4,096 tokens: 65,536 rows of 2,880:

    >>> f, b = expert_bias_bytes(65536, 2880)
    >>> int(f) == 6 * 65536 * 2880 * 2, int(b) == 8 * 65536 * 2880 * 2
    (True, True)
    """
    elems = as_array(rows) * h
    return 6 * width * elems, 8 * width * elems


def glu_clamp_bytes(rows, f, *, width: int = 2):
    r"""HBM bytes (forward, backward) of clamping the routed experts' GLU input [bytes].

    One MoE layer's.

    With ``activation_func_clamp_value`` set (GPT-OSS: 7.0, the Bridge's
    ``activation_func_clamp_value`` from ``swiglu_limit``), ``weighted_bias_quick_geglu_impl``
    clamps the fc1 output before the compiled GLU kernel, in eager PyTorch
    [megatron-glu-clamp] (a clamped SwiGLU has no such pass: at d98e8a64dd its fused kernel
    clamps in place, ``fused_bias_swiglu.py:266-276``)::

        x_glu, x_linear = input.chunk(2, -1)
        input = torch.cat((x_glu.clamp(max=c), x_linear.clamp(min=-c, max=c)), -1)

    Per row of the :math:`[R, 2f]` fc1 output, forward: each clamp reads and writes its half
    (:math:`2f`), ``torch.cat`` reads and writes both (:math:`4f`): :math:`8f` elements.
    Backward: ``cat``'s gradient is two views; each clamp's backward reads the gradient and
    its saved input and writes the masked gradient (:math:`3f` each), and ``chunk``'s backward
    concatenates the two halves again (:math:`4f`): :math:`10f`.  The GLU kernel itself (read
    :math:`2f`, write :math:`f`) is the activation :func:`memsym.timing.gemm.memory_bytes`
    already counts.

    .. math:: (8\,R\,f\,w,\; 10\,R\,f\,w)

    Parameters
    ----------
    rows : array_like
        Routed rows the GPU's experts process, R [rows].
    f : array_like
        The expert's hidden size on this GPU (f_e / t_e), half of fc1's output width [1].
    width : int
        Bytes per element [bytes] (bf16: 2).

    Returns
    -------
    tuple of numpy.ndarray
        Forward and backward HBM bytes [bytes].

    References
    ----------
    .. [megatron-glu-clamp] Megatron-LM core_v0.15.0 ... core_v0.17.0:
       megatron/core/fusions/fused_bias_geglu.py ``weighted_bias_quick_geglu_impl`` (a plain
       function; only ``weighted_quick_geglu`` and its backward are ``jit_fuser``-compiled),
       called from experts.py ``TEGroupedMLP`` with ``activation_func_clamp_value`` (a
       transformer_config.py field [megatron-lm-arguments]).

    Examples
    --------
    GPT-OSS 120B on one B200 with EP 8 and 4 x 4,096 tokens: 65,536 rows, f = 2,880:

    >>> f, b = glu_clamp_bytes(65536, 2880)
    >>> int(f) == 8 * 65536 * 2880 * 2, int(b) == 10 * 65536 * 2880 * 2
    (True, True)
    """
    elems = as_array(rows) * as_array(f)
    return 8 * width * elems, 10 * width * elems


def eager_glu_bytes(rows, f, *, clamp: bool = True, width: int = 2):
    r"""HBM bytes (forward, backward) of the experts' eager quick-GeGLU beyond its kernel [bytes].

    One MoE layer's, beyond the fused kernel's.  Without ``bias_activation_fusion`` ``TEGroupedMLP`` runs its ``glu`` in
    eager PyTorch, then weights it by the routing probabilities (moe/experts.py:995-1016 at
    d98e8a64dd)::

        x_glu, x_linear = torch.chunk(x, 2, dim=-1)
        x_glu = x_glu.clamp(min=None, max=val)              # when val is not None (0 too)
        x_linear = x_linear.clamp(min=-val, max=val)
        out = quick_gelu(x_glu) * (x_linear + glu_linear_offset)
        out = (out * permuted_probs).to(out.dtype)

    Per row of the :math:`[R, 2f]` fc1 output, in 16-bit elements (the probabilities are the
    logits' dtype, ``probs.type_as(logits)`` in moe_utils.py, so ``.to`` is no kernel):
    forward, each clamp reads and writes its half (:math:`2f`, :math:`c` = 1 when clamped),
    ``quick_gelu`` (``jit_fuser``, one kernel, activations.py:14-17) :math:`2f`, the offset add
    :math:`2f`, the product reads two and writes one (:math:`3f`), the weighting reads
    :math:`f` and one probability and writes :math:`f`: :math:`(9 + 4c) f + 1`.  Backward
    (autograd of the same graph): the weighting's two gradients (:math:`2f + 1` and the
    product :math:`g \cdot out` reduced over the row, :math:`4f + 1`), the product's two
    (:math:`3f` each), ``quick_gelu``'s (reads gradient and input, writes one: :math:`3f`),
    each clamp's (:math:`3f`), ``chunk``'s concatenation of the halves (:math:`4f`):
    :math:`(19 + 6c) f + 2`.  The fused kernel's :math:`3f` forward and
    :func:`memsym.timing.layer` ``BACKWARD_MEMORY`` (1.5) times it backward are already in
    :func:`memsym.timing.gemm.memory_bytes`, so this is the rest:

    .. math:: \left(((6 + 4c) f + 1)\,R\,w,\; \left(\tfrac{29 + 12c}{2} f + 2\right) R\,w\right)

    Parameters
    ----------
    rows : array_like
        Routed rows the GPU's experts process, R [rows].
    f : array_like
        The expert's hidden size on this GPU (f_e / t_e), half of fc1's output width [1].
    clamp : bool
        ``activation_func_clamp_value`` is set [1].
    width : int
        Bytes per element [bytes] (bf16: 2).

    Returns
    -------
    tuple of numpy.ndarray
        Forward and backward HBM bytes [bytes].

    References
    ----------
    Megatron-LM d98e8a64dd megatron/core/transformer/moe/experts.py:995-1016 (``glu``),
    megatron/core/activations.py:14-17 (``quick_gelu``), moe_utils.py
    ``topk_routing_with_score_function`` (``probs.type_as(logits)``).

    Examples
    --------
    GPT-OSS 120B, 65,536 rows of f = 2,880, clamped: (10 f + 1) and (20.5 f + 2) elements:

    >>> f, b = eager_glu_bytes(65536, 2880)
    >>> int(f) == (10 * 2880 + 1) * 65536 * 2, int(b) == (41 * 1440 + 2) * 65536 * 2
    (True, True)
    """
    c = 1 if clamp else 0
    elems = as_array(rows)
    return (((6 + 4 * c) * as_array(f) + 1) * elems * width,
            ((29 + 12 * c) * as_array(f) / 2 + 2) * elems * width)


def swiglu_clamp_bytes(rows, f, *, width: int = 2):
    r"""HBM bytes (forward, backward) of the eager SwiGLU's two clamps [bytes].

    .. math:: \bigl(4 f R\,w,\; 6 f R\,w\bigr)

    A clamped ``--swiglu`` (``activation_func_clamp_value``, memsym's ``swiglu_clamp``) under
    ``--no-bias-swiglu-fusion`` runs the eager ``glu`` (mlp.py:321-334, moe/experts.py:995-1016
    at Megatron-LM d98e8a64dd), whose clamps are eager torch ops (mlp.py:327-329,
    experts.py:1004-1006): ``x_glu.clamp(max=c)`` and ``x_linear.clamp(-c, c)`` each read and
    write their half of the :math:`[R, 2f]` fc1 output (:math:`2f` per row each, forward),
    and each backward reads the gradient and the input and writes a gradient (:math:`3f`
    each).  The rest of the eager SwiGLU (chunk, ``F.silu``, the product) is the fused
    kernel's count in :func:`memsym.timing.gemm.memory_bytes`; the clamps are the passes the
    quick-GeGLU's :func:`eager_glu_bytes` counts with :math:`c` = 1.

    Parameters
    ----------
    rows : array_like
        Rows of the fc1 output, R [rows] (tokens, or the experts' routed rows).
    f : array_like
        Half of fc1's output width on this GPU (f / t, or f_e / t_e) [1].
    width : int
        Bytes per element [bytes] (bf16: 2).

    Returns
    -------
    tuple of numpy.ndarray
        Forward and backward HBM bytes [bytes].

    Examples
    --------
    By hand, 4,096 rows of f = 2,048 in bf16: 4 x 4096 x 2048 x 2 and 6 x 4096 x 2048 x 2:

    >>> f, b = swiglu_clamp_bytes(4096, 2048)
    >>> int(f), int(b)
    (67108864, 100663296)

    References
    ----------
    Megatron-LM d98e8a64dd megatron/core/transformer/mlp.py:327-329,
    megatron/core/transformer/moe/experts.py:1004-1006.
    """
    elems = as_array(rows) * as_array(f)
    return 4 * width * elems, 6 * width * elems


def eager_seconds(gemms, device, *, experts: bool = True):
    r"""(forward, backward) seconds of the eager passes on a MoE layer's expert GEMM outputs [s].

    .. math:: t_{fwd} = \frac{\sum_q B^{fwd}_{eager}(q)}{B_{HBM}}, \quad
       t_{bwd} = \frac{\sum_q B^{bwd}_{eager}(q)}{B_{HBM}}

    For each routed-expert GEMM record (``expert_fc1``, ``expert_fc2``) its ``eager`` passes,
    over the rows its local experts produce (``M`` times ``count``): ``"clamp"`` on fc1's
    output (``N`` = 2f wide, :func:`glu_clamp_bytes`), ``"glu"`` the eager clamped GLU in its
    place (:func:`eager_glu_bytes`), ``"swiglu_clamp"`` the eager SwiGLU's clamps
    (:func:`swiglu_clamp_bytes`), ``"bias"`` on fc2's (``N`` = h,
    :func:`expert_bias_bytes`), at HBM bandwidth.  With ``experts`` False, the other GEMMs'
    passes instead (a dense or shared MLP's fc1: the eager SwiGLU's clamps).

    Parameters
    ----------
    gemms : list of memsym.timing.gemm.Gemm
        The layer's forward GEMMs.
    device : str or GPU
        The GPU.
    experts : bool
        Price the routed experts' GEMMs (else every other GEMM's).

    Returns
    -------
    tuple of numpy.ndarray
        Forward and backward time [s]; 0 where no GEMM has eager passes.

    Examples
    --------
    >>> from memsym.timing.gemm import Gemm
    >>> g = [Gemm("expert_fc1", 4096, 5760, 2880, 16, eager=("clamp",)),
    ...      Gemm("expert_fc2", 4096, 2880, 2880, 16, eager=("bias",))]
    >>> f, b = eager_seconds(g, "b200")
    >>> rows = 4096 * 16
    >>> bool(f == (8 * 2 * rows * 2880 + 6 * 2 * rows * 2880) / 8e12)
    True

    References
    ----------
    [megatron-lm-arguments] transformer_config.py (``add_bias_linear``,
    ``activation_func_clamp_value``: the passes these enable).
    """
    fwd = bwd = 0.0
    for q in gemms:
        if q.name.startswith("expert_") != experts:
            continue
        rows = as_array(q.M) * q.count
        for op in q.eager:
            nb = (glu_clamp_bytes(rows, as_array(q.N) / 2) if op == "clamp"
                  else eager_glu_bytes(rows, as_array(q.N) / 2) if op == "glu"
                  else swiglu_clamp_bytes(rows, as_array(q.N) / 2) if op == "swiglu_clamp"
                  else expert_bias_bytes(rows, as_array(q.N)))
            fwd = fwd + memory_time(nb[0], device)
            bwd = bwd + memory_time(nb[1], device)
    return fwd, bwd
