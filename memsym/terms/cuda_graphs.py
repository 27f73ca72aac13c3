r"""What CUDA-graph capture keeps on a GPU in Megatron-core training (``cuda_graph_impl``).

Megatron-core (``TransformerConfig.cuda_graph_impl``, Megatron-LM ``--cuda-graph-impl``,
Megatron-Bridge ``model.cuda_graph_impl``) captures the training step in one of three ways;
each keeps buffers the eager step does not:

* ``transformer_engine``: Transformer Engine's ``make_graphed_callables`` captures one graph
  per decoder layer (or per part of it, ``cuda_graph_modules``) and micro-batch of the
  pipeline schedule.  Megatron's ``TECudaGraphHelper`` gives every (layer, micro-batch) a
  static input, allocated outside the graphs' pool and kept for the whole run: replay copies
  the layer's input into it (:func:`te_static_inputs`, :func:`te_graph_inputs`).  What that
  adds to the eager step: the causal mask, a buffer of its own per (layer, micro-batch), and
  for whole-layer graphs the hidden states, copied from the previous graph's output, which
  the pool keeps until that graph's backward; a partial graph's hidden input is copied from
  a tensor the eager code does not keep, so its copy replaces the input the eager layer
  saves.
* ``full_iteration``: ``FullCudaGraphWrapper`` captures the whole forward-backward of a step
  into one private memory pool; its ``StaticBufferLoader`` copies each of the step's ``m``
  micro-batches from the data loader to the GPU and keeps them
  (:func:`full_iteration_batches`), and the pool keeps the forward-backward's peak reserved
  while the optimizer step runs outside it (:func:`full_iteration_pool`).
* ``--optimizer-cuda-graph`` (beside any of them): ``OptimizerCudaGraphWrapper`` captures
  the optimizer step into a pool of its own, which keeps what the step allocates reserved
  through forward and backward (:func:`optimizer_graph_pool`).
* ``local``: Megatron-core's ``CudaGraphManager`` allocates its graphs' inputs and outputs
  inside one shared pool and reuses them between layers; the source fixes no size short of
  replaying the capture (:func:`cuda_graph_notes` says so).

The activations the captured code saves are allocated in the graphs' pool in the order the
schedule runs (Transformer Engine captures in ``_order``), so the pool holds what the eager
step holds; memsym counts them once, as activations.

Sources: Megatron-LM ``d98e8a64dd`` (``megatron/core/transformer/cuda_graphs.py``,
``megatron/core/full_cuda_graph.py``, ``megatron/core/transformer/module.py``,
``megatron/core/transformer/transformer_layer.py``, ``megatron/core/datasets/gpt_dataset.py``,
``megatron/training/training.py``, ``megatron/training/arguments.py``, ``pretrain_gpt.py``);
Transformer Engine ``d0067d0da`` (``transformer_engine/pytorch/graph.py``).
"""

from __future__ import annotations


from ..errors import InvalidValueError, choose
from ..symbols import b, c, h, m, s, t
from ..term import Source, Term, Total
from ..vocabulary import CUDA_GRAPH_IMPLS, CUDA_GRAPH_MODULES

__all__ = ["CUDA_GRAPH_IMPLS", "CUDA_GRAPH_MODULES", "BATCH_BYTES_PER_TOKEN", "te_static_inputs",
           "te_graph_inputs", "graphed_layer", "full_iteration_batches", "full_iteration_pool",
           "optimizer_graph_pool", "check_cuda_graphs", "cuda_graph_notes", "cuda_graph_settings"]

#: Bytes per token of one micro-batch of Megatron's GPT data loader without the attention
#: mask: tokens and labels (int64), loss_mask (float32), position_ids (int64).
BATCH_BYTES_PER_TOKEN = 8 + 8 + 4 + 8

_TE_INPUTS = Source("megatron-core", "transformer/cuda_graphs.py:2322-2448 "
                    "TECudaGraphHelper._get_sample_arguments (one static input per (layer, "
                    "micro-batch), reused once that micro-batch's backward is done); "
                    "transformer/module.py:256-271 (hidden_states: bf16, [s/c (/t under SP), "
                    "b, h]); transformer/transformer_layer.py:1222-1232 (attention_mask: bool, "
                    "[b, 1, s/c, s], when attention is captured); cuda_graphs.py:2597-2603 "
                    "(p = 1: one micro-batch captured); transformer-engine pytorch/graph.py:729, "
                    "883 (a graph's outputs held until its backward is captured)")
_FULL_BATCHES = Source("megatron-core", "full_cuda_graph.py:99-135 StaticBufferLoader and "
                       ":151-164 data_read (each of the step's micro-batches copied to the GPU "
                       "and kept); datasets/gpt_dataset.py:280-286, 370-392, 834-872 (tokens, "
                       "labels int64, loss_mask float32, position_ids int64, attention_mask "
                       "bool [1, s, s]); pretrain_gpt.py:374-386 (the data on TP rank 0 of the "
                       "first and last stages)")
_OPT_POOL = Source("megatron-core-optimizer-cuda-graph", "optimizer/optimizer_cuda_graph.py:"
                   "26-52 (the step captured once, after cuda_graph_warmup_steps, into the pool "
                   "of full_cuda_graph.py:44-52 get_graph_pool, then replayed); training/"
                   "training.py:4449-4454; optimizer/distrib_optimizer.py:2756-2792 (the fp32 "
                   "main-grad shard made by .float() inside the step)")
_FULL_POOL = Source("megatron-core", "full_cuda_graph.py:226-234 (the forward-backward "
                    "captured into the pool of get_graph_pool, :44-52) and training/"
                    "training.py:4433-4438 (the optimizer step outside it)")


def te_static_inputs(attention: bool = True, sequence_parallel: bool = True,
                     whole_layer: bool = True) -> Total:
    r"""What one static input of Transformer Engine's per-layer graphs adds [bytes].

    One (graphed layer, micro-batch).

    ``TECudaGraphHelper._get_sample_arguments`` asks each graphed layer for
    ``get_layer_static_inputs(seq_length, micro_batch_size)``: the bf16 hidden states, and
    when the graph captures the attention (``cuda_graph_modules`` empty or with ``attn``)
    a boolean causal mask of the whole sequence, per context-parallel rank:

    .. math::

        \underbrace{2\,\frac{s\,b\,h}{c\,t_{\mathrm{sp}}}}_{\text{hidden\_states (bf16)}}
        + \underbrace{\frac{b\,s^2}{c}}_{\text{attention\_mask (bool)}}

    with :math:`t_{\mathrm{sp}} = t` under sequence parallelism, 1 without.  The mask is
    built whatever the attention backend (MLA and flash attention included).  The hidden
    states add to the eager step only for whole-layer graphs (``cuda_graph_modules`` empty):
    there they copy the previous graph's output, which the pool keeps reserved until that
    graph's backward (``make_graphed_callables`` holds ``per_callable_static_outputs`` until
    the backward is captured, graph.py:729, 880-890); a partial graph copies a tensor the
    eager code keeps no reference to, so the copy stands for the input the eager layer would
    save (counted with the activations).

    Parameters
    ----------
    attention : bool
        Whether the graph captures the layer's attention (the mask is made).
    sequence_parallel : bool
        Sequence parallelism (the hidden states split over the t ranks).
    whole_layer : bool
        Whether the graph captures the whole layer (the hidden states count).

    Returns
    -------
    Total
        ``graph_hidden_states`` and ``graph_attention_mask`` [bytes].

    Examples
    --------
    >>> te_static_inputs().expr
    2*b*h*s/(c*t) + b*s**2/c

    By hand, s = 4096, b = 1, h = 7168, no TP or CP: 2 x 4096 x 7168 = 58,720,256 B of hidden
    states and 4096^2 = 16,777,216 B of mask:

    >>> te_static_inputs().evaluate(s=4096, b=1, h=7168, c=1, t=1)
    75497472

    References
    ----------
    Megatron-LM d98e8a64dd ``megatron/core/transformer/cuda_graphs.py``,
    ``megatron/core/transformer/module.py``, ``megatron/core/transformer/transformer_layer.py``
    (megatron-core).
    """
    hidden = 2 * s * b * h / (c * (t if sequence_parallel else 1))
    terms = [Term("graph_hidden_states", hidden, "bf16 static hidden-state input of one "
                  "graphed layer and micro-batch", _TE_INPUTS, label="graph hidden states")
             ] if whole_layer else []
    if attention:
        terms.append(Term("graph_attention_mask", b * s ** 2 / c, "boolean causal mask "
                          "[b, 1, s/c, s] of one graphed layer and micro-batch", _TE_INPUTS,
                          label="graph attention mask"))
    return Total("static inputs of one Transformer Engine graph", tuple(terms))


def graphed_layer(modules, moe: bool) -> bool:
    """Whether Megatron graphs a decoder layer (``_layer_is_graphable``, cuda_graphs.py:2134-2174).

    Parameters
    ----------
    modules : sequence of str
        ``cuda_graph_modules`` (empty: every layer, whole).
    moe : bool
        An MoE layer (else dense).

    Examples
    --------
    >>> graphed_layer((), False), graphed_layer(("moe_router",), False)
    (True, False)
    >>> graphed_layer(("attn", "moe_router"), False), graphed_layer(("mlp",), True)
    (True, False)
    """
    if not modules or "attn" in modules:
        return True
    return bool(moe and {"moe", "moe_router", "moe_preprocess"} & set(modules)) or \
        (not moe and "mlp" in modules)


def te_graph_inputs(layers_in_flight, attention: bool = True, sequence_parallel: bool = True,
                    whole_layer: bool = True) -> Term:
    r"""The static inputs Transformer Engine's per-layer graphs keep on one GPU [bytes].

    .. math:: n_{\mathrm{lm}}\,\Bigl([\mathrm{whole}]\,2\,\frac{s\,b\,h}{c\,t_{\mathrm{sp}}}
        + [\mathrm{attn}]\,\frac{b\,s^2}{c}\Bigr)

    :math:`n_{\mathrm{lm}}`: the (graphed layer, micro-batch) pairs in flight at the
    schedule's peak.  ``_get_sample_arguments`` walks the schedule's order and hands a new
    forward the inputs of a pass whose backward is done (same signature), so the buffers
    are as many as the layer passes in flight, the count memsym's layer activations use
    (p = 1: one micro-batch, one per layer).  They are made before capture and kept for the
    whole run, in every phase.

    Parameters
    ----------
    layers_in_flight : sympy.Expr
        Graphed layers x micro-batches in flight [1].
    attention, sequence_parallel, whole_layer : bool
        As :func:`te_static_inputs`.

    Examples
    --------
    >>> import sympy as sp
    >>> te_graph_inputs(sp.Integer(4), attention=False).expr
    8*b*h*s/(c*t)
    >>> te_graph_inputs(sp.Integer(4), whole_layer=False).expr   # a partial graph: the masks
    4*b*s**2/c

    References
    ----------
    Megatron-LM d98e8a64dd ``transformer/cuda_graphs.py`` (megatron-core).
    """
    one = te_static_inputs(attention, sequence_parallel, whole_layer)
    kept = " and ".join(["hidden states"] * whole_layer + ["attention mask"] * attention)
    return Term("cuda_graph_static_inputs", layers_in_flight * one.expr,
                f"Transformer Engine graphs' static inputs ({kept or 'none beyond eager'}) per "
                "graphed layer and micro-batch in flight", _TE_INPUTS, label="CUDA graph inputs")


def full_iteration_batches(mask: bool = True, microbatches=m) -> Term:
    r"""The micro-batches ``FullCudaGraphWrapper``'s static loader keeps on the GPU [bytes].

    .. math:: m\,b\,s\,\bigl(28 + [\mathrm{mask}]\,s\bigr)

    ``data_read`` copies each of the step's :math:`m` micro-batches from the data loader into
    its own static buffer (``copy_tensors_in_struct``: ``clone().cuda()``), kept from the
    first step on: tokens and labels (int64), loss_mask (float32) and position_ids (int64),
    28 B per token, and the boolean causal mask :math:`[b, 1, s, s]` when the data loader
    makes it (Megatron-LM's default; ``--no-create-attention-mask-in-dataloader`` drops it).
    Only ranks with a data loader read it: TP rank 0 of the first and last pipeline stages.

    Parameters
    ----------
    mask : bool
        Whether the data loader's batches carry the attention mask.
    microbatches : sympy.Expr
        The step's micro-batches (default the symbol m).

    Examples
    --------
    >>> full_iteration_batches().expr
    b*m*s*(s + 28)

    By hand, m = 8, b = 1, s = 1024, no mask: 8 x 1024 x 28 = 229,376 B:

    >>> full_iteration_batches(False).expr.subs({m: 8, b: 1, s: 1024})
    229376

    References
    ----------
    Megatron-LM d98e8a64dd ``megatron/core/full_cuda_graph.py``,
    ``megatron/core/datasets/gpt_dataset.py`` (megatron-core).
    """
    per_token = BATCH_BYTES_PER_TOKEN + (s if mask else 0)
    return Term("cuda_graph_static_batches", microbatches * b * s * per_token,
                "the step's micro-batches copied to static buffers by the full-iteration "
                "graph's loader" + (" (with the attention mask)" if mask else ""),
                _FULL_BATCHES, label="CUDA graph batches")


def full_iteration_pool(held) -> Term:
    r"""The forward-backward's pool, still reserved while the optimizer step runs [bytes].

    .. math:: M_{\mathrm{pool}} = M_{\mathrm{act}} + \max(T_{\mathrm{fwd}}, T_{\mathrm{loss}},
        T_{\mathrm{bwd}})

    ``FullCudaGraphWrapper`` captures the whole forward-backward into one private pool; the
    caching allocator keeps a private pool's blocks for the graph's replays, so the
    activations and transients at the forward-backward's peak stay reserved when the
    optimizer step (not captured unless ``--optimizer-cuda-graph``) allocates beside them.
    ``torch.cuda.max_memory_allocated`` does not see them after capture (replays allocate
    nothing), the reserved and device counts do.

    Parameters
    ----------
    held : sympy.Expr
        :math:`M_{\mathrm{pool}}`, the forward-backward's peak beyond the model states [bytes].

    Examples
    --------
    >>> import sympy as sp
    >>> full_iteration_pool(sp.Integer(7)).expr
    7

    References
    ----------
    Megatron-LM d98e8a64dd ``megatron/core/full_cuda_graph.py`` (megatron-core).
    """
    return Term("cuda_graph_pool", held, "the full-iteration graph's private pool: the "
                "forward-backward's activations and transients, held through the optimizer "
                "step", _FULL_POOL, label="CUDA graph pool")


def optimizer_graph_pool(step_bytes) -> Term:
    r"""What the optimizer step allocates, held in its CUDA graph's pool in every phase [bytes].

    .. math:: M_{\mathrm{opt\,pool}} = T_{\mathrm{opt}}

    Megatron's ``--optimizer-cuda-graph`` (Bridge ``optimizer.optimizer_cuda_graph``) wraps
    ``optimizer.step`` in ``OptimizerCudaGraphWrapper``: after ``cuda_graph_warmup_steps`` the
    step is captured into a private pool (``get_graph_pool``; shared with the full-iteration
    graph under ``cuda_graph_use_single_mempool``) and replayed from then on.  Every tensor the
    captured step allocates lives in that pool, whose blocks the caching allocator keeps for
    the graph's replays, so the eager step's temporaries, :math:`T_{\mathrm{opt}}`, stay
    reserved through forward and backward instead of reusing the activations' freed blocks.
    Of what memsym counts in the step that is the fp32 main-gradient shard made from a 16-bit
    gradient buffer (``shard_model_grad.float()``, ``--grad-reduce-in-bf16``) and the
    framework's step buffers; with Megatron's default fp32 gradient buffer under bf16 the
    main gradients are views and the pool is empty (Adam's ``capturable`` kernels keep a
    step and a learning-rate tensor per group, the gradient norm a few scalars: neglected).
    ``torch.cuda.max_memory_allocated`` does not see the pool after capture (replays allocate
    nothing), the reserved and device counts do.

    Parameters
    ----------
    step_bytes : sympy.Expr
        :math:`T_{\mathrm{opt}}`, the optimizer phase's allocations beyond the model states
        [bytes].

    Returns
    -------
    Term
        ``optimizer_graph_pool`` [bytes].

    Examples
    --------
    Llama 3 8B at d = 8 with ``--grad-reduce-in-bf16``: the fp32 main-gradient shard,
    8030261248 x 4 / 8 bytes:

    >>> import sympy as sp
    >>> optimizer_graph_pool(sp.Integer(8030261248 * 4 // 8)).expr
    4015130624

    References
    ----------
    Megatron-LM d98e8a64dd ``megatron/core/optimizer/optimizer_cuda_graph.py``,
    ``megatron/core/full_cuda_graph.py``, ``megatron/training/training.py``
    (megatron-core-optimizer-cuda-graph).
    """
    return Term("optimizer_graph_pool", step_bytes, "the optimizer step's CUDA graph pool "
                "(--optimizer-cuda-graph): what the captured step allocates (the fp32 "
                "main-gradient shard), reserved through forward and backward", _OPT_POOL,
                label="optimizer graph pool")


def cuda_graph_settings(impl, scopes) -> tuple:
    """``(cuda_graph_impl, cuda_graph_modules)`` as Megatron-core normalises them.

    ``normalize_cuda_graph_modules`` (cuda_graph_config.py:25-58): ``"full"`` alone is the
    whole layer (empty); the deprecated ``"full_iteration"`` scope sets ``cuda_graph_impl``
    to full_iteration (``CUDA_GRAPH_MODULES_DEPRECATIONS``, :10-13; with impl none, local or
    full_iteration, :107-110); ``"full_iteration_inference"`` is an inference setting (no
    training graph).  ``scopes``: a list, a comma-separated string or None.

    Examples
    --------
    >>> cuda_graph_settings("transformer_engine", ["attn", "moe_router", "moe_preprocess"])
    ('transformer_engine', ('attn', 'moe_router', 'moe_preprocess'))
    >>> cuda_graph_settings("none", ["full_iteration"]), cuda_graph_settings("local", "full")
    (('full_iteration', ()), ('local', ()))
    """
    impl = choose("cuda_graph_impl", impl or "none", CUDA_GRAPH_IMPLS)
    raw = scopes.split(",") if isinstance(scopes, str) else list(scopes or [])
    raw = [getattr(x, "name", x) for x in raw]     # CudaGraphModule enums by their names
    if "full" in raw:
        if raw != ["full"]:
            raise InvalidValueError("full scope cannot be used with other scopes (Megatron's "
                                    "normalize_cuda_graph_modules)")
        return impl, ()
    mods = []
    for name in raw:
        if name == "full_iteration":
            if impl not in ("none", "local", "full_iteration"):
                raise InvalidValueError(f"cuda_graph_modules full_iteration cannot be combined "
                                        f"with cuda_graph_impl {impl}")
            impl = "full_iteration"
        elif name != "full_iteration_inference":
            mods.append(choose("cuda_graph_modules entry", name, CUDA_GRAPH_MODULES))
    return impl, tuple(mods)


def check_cuda_graphs(impl: str, modules, framework_is_megatron: bool, cpu_offloading: bool,
                      moe: bool) -> None:
    """Refuse CUDA-graph settings Megatron-core refuses (transformer_config.py:2716-2830).

    Parameters
    ----------
    impl : str
        ``cuda_graph_impl`` (:data:`CUDA_GRAPH_IMPLS`).
    modules : sequence of str
        ``cuda_graph_modules`` (:data:`CUDA_GRAPH_MODULES`; empty: the whole layer).
    framework_is_megatron : bool
        Whether the job runs Megatron-core.
    cpu_offloading : bool
        ``cpu_offloading_num_layers`` > 0.
    moe : bool
        Whether the model has routed experts.

    Examples
    --------
    >>> check_cuda_graphs("transformer_engine", ("attn",), True, False, False)
    >>> check_cuda_graphs("full_iteration", ("attn",), True, False, False)
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: cuda_graph_modules must be empty with cuda_graph_impl full_iteration (Megatron's TransformerConfig)
    """
    impl = choose("cuda_graph_impl", impl, CUDA_GRAPH_IMPLS)
    for name in modules:
        choose("cuda_graph_modules entry", name, CUDA_GRAPH_MODULES)
    if impl == "none":
        return
    if not framework_is_megatron:
        raise InvalidValueError(f"cuda_graph_impl {impl} is Megatron-core's")
    if impl == "full_iteration" and modules:
        raise InvalidValueError("cuda_graph_modules must be empty with cuda_graph_impl "
                                "full_iteration (Megatron's TransformerConfig)")
    if cpu_offloading and impl != "full_iteration":
        raise InvalidValueError("CUDA graphs not supported with CPU offloading (Megatron's "
                                "TransformerConfig)")
    if "moe" in modules and "moe_router" in modules:
        raise InvalidValueError("cuda_graph_modules must not contain both moe and moe_router")
    if "moe_preprocess" in modules and "moe_router" not in modules and impl != "local":
        raise InvalidValueError("moe_preprocess cuda graph is only supported with moe_router")
    if not moe and {"moe", "moe_router", "moe_preprocess"} & set(modules):
        raise InvalidValueError("moe cuda graph is only supported for MoE")


def cuda_graph_notes(impl: str, modules=()) -> list:
    """One line for each part of the graphs' memory the source does not size.

    Examples
    --------
    >>> cuda_graph_notes("none")
    []
    >>> len(cuda_graph_notes("transformer_engine", ("attn",)))
    2
    """
    if impl == "none":
        return []
    notes = ["CUDA graphs: the graph executables' own device memory (cudaGraphInstantiate, "
             "outside PyTorch's allocator) is not counted"]
    if impl == "local":
        notes.append("cuda_graph_impl local: the graphs' inputs and outputs in CudaGraphManager's "
                     "shared pool (reused between layers) are not counted")
    if impl == "transformer_engine":
        notes.append("cuda_graph_impl transformer_engine: the graphed " + (
            "parts' (" + ", ".join(modules) + ")" if modules else "layers'") + " transients "
            "live in the graphs' private pool, apart from the eager transients; their sum "
            "is not counted, nor the shared static grad-output buffers and rotary table")
    return notes
