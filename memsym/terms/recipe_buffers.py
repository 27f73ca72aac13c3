r"""Three settings of Megatron-Bridge's performance recipes that change what a GPU keeps.

* **The precision-aware optimizer's dtypes** (Megatron ``--use-precision-aware-optimizer``
  with ``--main-params-dtype``, ``--exp-avg-dtype``, ``--exp-avg-sq-dtype``): Transformer
  Engine's ``FusedAdam`` stores the master weights and the two Adam moments in the dtypes
  given; the widths are :func:`memsym.terms.model_state.byte_widths`'s, the rules what
  Megatron accepts (:func:`check_optimizer_dtypes`).
* **Transformer Engine's fused cross-entropy** (``cross_entropy_loss_fusion`` with
  ``cross_entropy_fusion_impl="te"``, :func:`te_cross_entropy`): the 16-bit logits are
  kept and overwritten with their gradient; no fp32 copy.
* **CPU activation offloading** (``cpu_offloading_num_layers``,
  :func:`offloaded_activations`): the activations of the first k decoder layers leave the
  GPU between their forward and their backward.

Sources: Megatron-LM ``d98e8a64dd`` (``megatron/training/arguments.py``,
``megatron/core/optimizer/optimizer_config.py``, ``megatron/core/transformer/
transformer_config.py``, ``megatron/core/models/common/language_module/language_module.py``);
Transformer Engine v2.17.1 ``4329ff84bf`` (``pytorch/cross_entropy.py``,
``pytorch/triton/cross_entropy.py``, ``pytorch/cpu_offload.py``).
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError, choose
from ..frameworks import framework as framework_record
from ..term import Source, Term, Total
from ..vocabulary import CE_FUSION_IMPLS, OPTIMIZER_DTYPES
from .loss_transients import logit_doc, logit_sizes

__all__ = ["OPTIMIZER_DTYPES", "CE_FUSION_IMPLS", "check_optimizer_dtypes", "te_cross_entropy",
           "offloaded_activations", "offloaded_layers", "with_te_logits", "check_cpu_offloading",
           "check_recipe_fields"]

_TE_CE = Source("transformer-engine-v2-17", "pytorch/cross_entropy.py CrossEntropyFunction.forward "
                "(ctx.save_for_backward(inp)); pytorch/triton/cross_entropy.py "
                "cross_entropy_forward (loss_1d, m_d_X_y and its TP all-gather; the gradient "
                "written into _input) and cross_entropy_backward (element_mul in place)")
_TE_OFFLOAD = Source("transformer-engine-v2-17", "pytorch/cpu_offload.py DefaultOffloadSynchronizer."
                     "_init_offload_synchronization_dicts (layers 0..k-1 offloaded; saved "
                     "activations peak at (num_layers - k) T)")


def check_optimizer_dtypes(precision_aware: bool, dtypes: dict) -> None:
    """Refuse optimizer dtypes Megatron refuses.

    Parameters
    ----------
    precision_aware : bool
        ``--use-precision-aware-optimizer``.
    dtypes : dict
        ``{"main_params_dtype": ..., "exp_avg_dtype": ..., "exp_avg_sq_dtype": ...}``.

    Raises
    ------
    memsym.errors.InvalidValueError
        A dtype outside Megatron's choices (:data:`OPTIMIZER_DTYPES`), or one other than fp32
        without the precision-aware optimizer (``OptimizerConfig.__post_init__`` asserts it).

    Examples
    --------
    >>> check_optimizer_dtypes(True, {"exp_avg_dtype": "bf16"})
    >>> check_optimizer_dtypes(False, {"exp_avg_dtype": "bf16"})
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: exp_avg_dtype bf16 needs the precision-aware optimizer (Megatron's OptimizerConfig: fp32 otherwise)
    """
    for name, value in dtypes.items():
        if name not in OPTIMIZER_DTYPES:
            raise InvalidValueError(f"unknown optimizer dtype field {name!r:.40}")
        value = choose(name, value, OPTIMIZER_DTYPES[name])
        if value != "fp32" and not precision_aware:
            raise InvalidValueError(f"{name} {value} needs the precision-aware optimizer "
                                    "(Megatron's OptimizerConfig: fp32 otherwise)")


@logit_doc
def te_cross_entropy(tokens=None, vocab=None, tp=None) -> Total:
    r"""What Transformer Engine's fused cross-entropy keeps and adds [bytes].

    With :math:`\tau = s b / c` tokens on one GPU (the output layer's sequence is whole) and
    :math:`V/t` logits per token:

    .. math::

        \underbrace{2\tau V/t}_{\text{kept: the 16-bit logits, then their gradient}}
        \qquad
        \underbrace{(4 + 12 + 12\,t)\,\tau}_{\text{forward: loss, } (m, d, X_y)
        \text{ and its TP all-gather}}

    ``CrossEntropyFunction.forward`` saves its input, the output layer's 16-bit logits, and
    the Triton kernel writes the gradient of the loss into that same buffer; its backward
    scales it in place (``element_mul_kernel``) and returns it.  So the loss keeps
    :math:`2\tau V/t` from forward to backward, makes no fp32 copy of the logits and allocates
    no second 16-bit gradient, where Megatron-core's cross-entropy keeps the fp32 softmax,
    :math:`4\tau V/t` (:func:`memsym.terms.activations.output_activations`).  In forward it
    allocates the fp32 per-token loss (4 B) and the three fp32 per-token statistics
    :math:`(m, d, X_y)` (12 B), all-gathered over the t vocabulary shards (:math:`12\,t` B; at
    t = 1 the gather is the same tensor, an upper bound of 12 B per token).

    Transformer Engine v2.18 (01bbe3eea, "Fix the numerical issue with the Fused CE loss")
    writes the gradient into a new fp32 ``grad_input`` instead, :math:`4\tau V/t` kept as
    Megatron-core's: that release is not what this term counts.  Megatron-LM's training
    arguments refuse ``--cross-entropy-loss-fusion --cross-entropy-fusion-impl te``
    (arguments.py:1697-1702, "disabled due to stability issues"); ``TransformerConfig`` only
    warns, so Megatron-Bridge's performance recipes run it (``_benchmark_common``).

    Parameters
    ----------
    {logit_params}

    Returns
    -------
    Total
        ``logits`` (kept, [bytes]) and ``ce_per_token`` (the forward's transient, [bytes]).

    Examples
    --------
    >>> ce = te_cross_entropy()
    >>> ce["logits"].expr, ce["ce_per_token"].expr
    (2*V*b*s/(c*t), b*s*(12*t + 16)/c)
    >>> ce["logits"].evaluate(s=4096, b=4, c=1, t=1, V=201088) == 2 * 4096 * 4 * 201088
    True

    References
    ----------
    Transformer Engine v2.17.1 (``4329ff84bf``) ``pytorch/cross_entropy.py``
    ``CrossEntropyFunction`` and ``pytorch/triton/cross_entropy.py`` (transformer-engine-v2-17).
    """
    tau, vocab, tp = logit_sizes(tokens, vocab, tp)
    return Total("Transformer Engine fused cross-entropy (last stage)", (
        Term("logits", 2 * tau * vocab / tp, "16-bit logits kept by Transformer Engine's fused "
             "cross-entropy, overwritten in place with their gradient", _TE_CE, label="logits"),
        Term("ce_per_token", (16 + 12 * tp) * tau, "fp32 per-token loss and (max, "
             "sum, target logit) statistics, all-gathered over tensor parallelism", _TE_CE,
             label="per-token CE buffers"),
    ))


def offloaded_activations(layers) -> Term:
    r"""The activations CPU offloading takes off the GPU: minus the first k layers' [bytes].

    With Megatron-core's ``cpu_offloading_num_layers`` :math:`k` (``TransformerBlock`` runs
    each layer under Transformer Engine's ``get_cpu_offload_context``), the default
    synchronizer offloads layers :math:`0..k-1`: layer :math:`i`'s saved tensors are copied to
    pinned host memory after its forward and released before the forward of layer
    :math:`L - k + i`; its reload starts before the backward of layer :math:`L - 1 - k + i`.
    The saved activations therefore peak at :math:`(L - k)\,T` with :math:`T` one layer's
    (the docstring's own bound), where memsym counts :math:`L\,T` without offloading:

    .. math:: -\sum_{i < k} A_i

    with :math:`A_i` the activations layer :math:`i` saves for one micro-batch (Megatron
    allows offloading only without pipelining, so one micro-batch is in flight).  Not
    modelled: the host's pinned buffers (host memory), the layer being copied while the next
    computes (released before the layer :math:`L - k + i`, inside the :math:`(L-k)\,T`
    bound), and Transformer Engine's v1 path (``NVTE_CPU_OFFLOAD_V1=1``; with Megatron's
    ``cpu_offloading_double_buffering`` it keeps two reload buffers of a layer's size).
    ``cpu_offloading_weights`` has no effect since Transformer Engine 2.10 (deprecated).

    Parameters
    ----------
    layers : sequence of sympy.Expr
        The activations of each offloaded layer, one micro-batch [bytes].

    Returns
    -------
    Term
        ``cpu_offloaded_activations``, minus their sum [bytes].

    Examples
    --------
    >>> offloaded_activations([sp.Integer(10), sp.Integer(10), sp.Integer(7)]).expr
    -27

    References
    ----------
    Megatron-LM d98e8a64dd ``megatron/core/transformer/transformer_block.py`` (megatron-core);
    Transformer Engine v2.17.1 ``pytorch/cpu_offload.py`` ``DefaultOffloadSynchronizer``
    (transformer-engine-v2-17).
    """
    return Term("cpu_offloaded_activations", -sp.Add(*layers),
                f"activations of the first {len(layers)} decoder layers offloaded to the host "
                "between their forward and backward", _TE_OFFLOAD, label="CPU-offloaded")


def check_cpu_offloading(k: int, num_layers: int, p: int, recompute: str) -> None:
    """Refuse CPU offloading Megatron-core refuses (``transformer_config.py:1884-1899``).

    Parameters
    ----------
    k : int
        ``cpu_offloading_num_layers``, a count of layers [1] (0: off).
    num_layers : int
        The model's decoder layers [layers].
    p : int
        Pipeline-parallel size [GPUs].
    recompute : str
        The job's recompute mode.

    Examples
    --------
    >>> check_cpu_offloading(40, 80, 1, "none")
    >>> check_cpu_offloading(80, 80, 1, "none")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: cpu_offloading_num_layers must be below the model's 80 layers (Megatron's TransformerConfig), got 80
    """
    if k == 0:
        return
    if not 0 <= k < num_layers:
        raise InvalidValueError(f"cpu_offloading_num_layers must be below the model's {num_layers}"
                                f" layers (Megatron's TransformerConfig), got {k}")
    if p > 1:
        raise InvalidValueError("CPU offloading needs p = 1 (Megatron's TransformerConfig: no "
                                "pipeline parallelism with CPU offloading)")
    if recompute != "none":
        raise InvalidValueError("CPU offloading does not work with activation recomputation "
                                "(Megatron's TransformerConfig)")


def check_recipe_fields(states, memory, framework: str, num_layers: int, p: int) -> None:
    """Refuse the three settings where Megatron would (a job's ``states`` and ``memory``
    sub-records, its framework, the model's decoder layers and the pipeline size).

    Parameters
    ----------
    states, memory
        The job's ``Training.states`` and ``Training.memory`` sub-records.
    framework : str
        The job's framework.
    num_layers : int
        The model's decoder layers [layers].
    p : int
        Pipeline-parallel size [GPUs].

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> st = NS(precision_aware=True, main_params_dtype="fp32", exp_avg_dtype="bf16",
    ...         exp_avg_sq_dtype="bf16")
    >>> mem = NS(cross_entropy_fusion_impl="te", cpu_offloading_num_layers=0, recompute="none",
    ...          compiled_loss=False)
    >>> check_recipe_fields(st, mem, "megatron", 61, 8)
    >>> check_recipe_fields(st, mem, "torchtitan", 61, 8)
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: cross_entropy_fusion_impl te is Megatron's (Transformer Engine's fused loss), not torchtitan's
    """
    check_optimizer_dtypes(states.precision_aware, {name: getattr(states, name)
                                                    for name in OPTIMIZER_DTYPES})
    impl = choose("cross-entropy fusion impl", memory.cross_entropy_fusion_impl, CE_FUSION_IMPLS)
    megatron = framework_record(framework).megatron_options   # Megatron-core's model, config
    if impl == "te" and (not megatron or memory.compiled_loss):
        raise InvalidValueError("cross_entropy_fusion_impl te is Megatron's (Transformer Engine's "
                                "fused loss), not " + (f"{framework}'s" if not megatron else
                                                       "a compiled loss's"))
    k = memory.cpu_offloading_num_layers
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise InvalidValueError(f"cpu_offloading_num_layers must be a whole number >= 0, got {k!r:.40}")
    if k and not megatron:
        raise InvalidValueError(f"cpu_offloading_num_layers is Megatron-core's, not {framework}'s")
    check_cpu_offloading(k, num_layers, p, memory.recompute)


def with_te_logits(output: Total) -> Total:
    r"""The output layer's activations with the logits Transformer Engine's loss keeps [bytes].

    ``output`` (:func:`memsym.terms.activations.output_activations`) with its ``logits`` Term
    replaced by :func:`te_cross_entropy`'s: the 16-bit logits, not the fp32 softmax,

    .. math:: A_{\mathrm{logits}} = 2\,\tau V / t, \qquad \tau = s\,b/c

    Parameters
    ----------
    output : Total
        The output layer's activations [bytes].

    Returns
    -------
    Total
        The same terms, the logits as Transformer Engine keeps them [bytes].

    References
    ----------
    Transformer Engine v2.17.1 ``pytorch/cross_entropy.py`` (transformer-engine-v2-17).

    Examples
    --------
    >>> from memsym.terms.activations import output_activations
    >>> with_te_logits(output_activations())["logits"].expr
    2*V*b*s/(c*t)
    """
    kept = te_cross_entropy()["logits"]
    return Total(output.name, tuple(kept if term.key == "logits" else term for term in output.terms))


def offloaded_layers(kinds, per_layer) -> list:
    """``[offloaded_activations(...)]`` of the offloaded layers, or ``[]`` when none is.

    Parameters
    ----------
    kinds : sequence
        The offloaded layers' kinds, in order (truthy: an MoE layer; the first k entries of
        :func:`memsym.model.moe_layer_pattern`).
    per_layer : callable
        ``per_layer(moe: bool)``: one micro-batch's activations of one layer of that kind [bytes].

    Examples
    --------
    >>> offloaded_layers([0, 1], lambda moe: sp.Integer(5 if moe else 3))[0].expr
    -8
    >>> offloaded_layers([], lambda moe: sp.Integer(1))
    []
    """
    return [offloaded_activations([per_layer(bool(q)) for q in kinds])] if len(kinds) else []
