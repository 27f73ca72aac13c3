r"""LoRA under Megatron-core, Megatron-Bridge and Transformer Engine: the adapters' byte widths,
a frozen base built as FP8 or NVFP4 parameters, and the GEMM inputs frozen linears do not keep.

:mod:`memsym.terms.adapters` owns the framework-neutral LoRA and QLoRA terms (frozen weights
at their storage width, the adapters' states); this module owns what Megatron-Bridge's LoRA
does differently: adapters built as Megatron-core linears in the model's ``params_dtype``
(:func:`megatron_adapter_widths`), a frozen base of Transformer Engine FP8 / NVFP4 parameters
(:func:`quantized_frozen_base`) and Transformer Engine's linears keeping no input for a frozen
weight (:func:`frozen_linear_inputs`).

References
----------
.. [megatron-bridge-peft] src/megatron/bridge/peft/base.py, lora.py, utils.py at 067f987df0.
.. [transformer-engine] transformer_engine/pytorch/module/ at d0067d0da6.
"""

from __future__ import annotations

import sympy as sp

from ..symbols import b_f8, b_g, b_hp, b_m, b_mg, b_o
from ..term import Source, Term, Total
from ..values import as_expr  # library arguments: text refused, never parsed
from .adapters import frozen_weights
from .widths import byte_widths

__all__ = ["FROZEN_LINEAR_INPUTS", "frozen_linear_inputs", "megatron_adapter_widths",
           "quantized_frozen_base"]


# LoRA over FP8 / NVFP4 parameters (fp8_param / fp4_param): Megatron-core builds the TE
# linears' weights under fp8_model_init, each cast once at init with both usages, and the
# forward uses the parameter itself (no cached cast); frozen, no buffer slot, no master copy
_QUANT_FROZEN = Source("transformer-engine", "pytorch/module/base.py:1835-1864 (reset_parameters "
                       "under fp8_model_init: quantizer.set_usage(rowwise=True, columnwise="
                       "torch.is_grad_enabled()), param = quantizer(param), the 16-bit "
                       "initial value kept on the CPU), 836-845 (quantize_weight returns a "
                       "quantized parameter itself, no _fp8_workspaces copy); tensor/storage/"
                       "float8_tensor_storage.py:279-317 (update_usage keeps the transpose "
                       "where FP8 GEMMs are TN-only, none on non-TN GPUs), mxfp8_tensor_storage."
                       "py:276-316 and nvfp4_tensor_storage.py:353-375 (usages only disabled, "
                       "never on a weight); Megatron-core d98e8a64dd fp8_utils.py:848 and "
                       "fp4_utils.py:258 (need_fp8_context = config.fp8_param at init), "
                       "distributed/distributed_data_parallel.py:180 and optimizer/__init__.py:"
                       "332 (frozen parameters: no buffer slot, no main copy)")
_QUANT_REST = Source("megatron-bridge-peft", "peft/base.py:176-193 at 067f987df0 (frozen as "
                     "built); Megatron-core d98e8a64dd fp8_utils.py:848 (fp8_model_init around "
                     "the decoder layers but the BF16 first/last ones): the embedding and output "
                     "layer (not TE modules), the norms and biases (no fp8_meta_index, TE "
                     "base.py:1837) stay in params_dtype")

#: Per adapted matrix group, the terms of :func:`memsym.terms.activations.layer_activations`
#: that hold the GEMM input only for the weight gradient: Transformer Engine keeps them only
#: when the weight is trained or a LoRA adapter reads them.  linear_qkv and linear_fc1 keep
#: their norm output only for the weight gradient, or when LoRA sets
#: ``return_layernorm_output``; linear_fc2 and the experts' GEMMs keep their input only for it.
#: linear_proj's input is the attention output, which the attention kernel keeps anyway.
FROZEN_LINEAR_INPUTS = (
    (("q", "k", "v"), ("qkv_input",)),
    (("gate", "up"), ("mlp_input", "routed_tokens")),
    (("down",), ("fc2_input", "expert_fc2_input")),
)


def frozen_linear_inputs(layer: Total, targets) -> sp.Expr:
    r"""Activations of one layer that frozen linears without a LoRA adapter do not keep [bytes].

    Under Transformer Engine (Megatron's linears).

    .. math:: \Delta M = \sum_{g \notin T} \sum_{k \in K_g} M_k

    over the matrix groups :math:`g` of :data:`FROZEN_LINEAR_INPUTS` with no adapted matrix in
    the targets :math:`T`, of the layer terms :math:`M_k` that hold group :math:`g`'s GEMM
    input only for its weight gradient.  A frozen weight needs no input in backward: TE's
    ``Linear`` and ``GroupedLinear`` save none (``backward_needs_input = is_grad_enabled and
    weight_requires_grad``), and ``LayerNormLinear`` frees its norm output unless LoRA asked for
    it (``if not weight.requires_grad and not return_layernorm_output: clear_tensor_data``).

    Parameters
    ----------
    layer : Total
        One layer's activations (:func:`memsym.terms.activations.layer_activations`) [bytes].
    targets : sequence of str
        The adapted matrices (:data:`memsym.terms.adapters.LORA_TARGETS`).

    Examples
    --------
    An MoE layer with adapters on attention only keeps neither expert GEMM input:

    >>> from memsym.terms.activations import layer_activations
    >>> from memsym.terms.adapters import LORA_TARGETS
    >>> moe = layer_activations(gated=True, flash=True, sequence_parallel=True, moe=True)
    >>> frozen_linear_inputs(moe, ("q", "k", "v", "o")) == (
    ...     moe["routed_tokens"].expr + moe["expert_fc2_input"].expr)
    True
    >>> frozen_linear_inputs(moe, LORA_TARGETS)
    0

    References
    ----------
    .. [transformer-engine] transformer_engine/pytorch/module/linear.py at d0067d0da
       (``backward_needs_input``, lines 303 and 619-621), module/grouped_linear.py
       (``input_to_save = None`` unless ``weight_requires_grad``, lines 538-550),
       module/layernorm_linear.py (lines 427-429).
    .. [megatron-bridge] src/megatron/bridge/peft/utils.py at 33655ef845,
       ``get_adapter_attributes_from_linear`` (``m.return_layernorm_output = True`` for an
       adapted ``TELayerNormColumnParallelLinear``).
    """
    chosen = set(targets)
    names = {k for group, keys in FROZEN_LINEAR_INPUTS if not chosen & set(group) for k in keys}
    return sp.Add(*(term.expr for term in layer.terms if term.key in names))


def megatron_adapter_widths(precision: str = "bf16", grad_dtype: str | None = None, *,
                            optimizer: str = "adam", scheme: str = "distributed-optimizer",
                            shards=1, fp8_recipe: str | None = None, **optimizer_dtypes) -> dict:
    r"""Byte widths of a Megatron-Bridge LoRA job: frozen base, adapter weight, gradient, optimizer.

    .. math:: M = N_a\,\Bigl(b_a + b_g + \frac{b_{mg} + b_m + b_o}{n}\Bigr)

    The widths are :func:`memsym.terms.widths.byte_widths` of the framework for the adapters' own
    dtype. Megatron-Bridge builds the adapters as Megatron-core linear layers on the model's config
    (not Transformer Engine's, so no FP8 or NVFP4 copy): their dtype is the model's ``params_dtype``
    (fp32, fp16 under fp16_mixed, bf16 under bf16_mixed and every FP8 or NVFP4 recipe built on it).
    Megatron-core's DDP gives every trainable parameter a slot in its gradient buffer, fp32 under
    ``grad_reduce_in_fp32`` (bf16_mixed's), else the parameter's dtype (fp16_mixed sets it False);
    its optimizer keeps an fp32 main copy of a 16-bit parameter, an fp32 ``.float()`` copy of a
    16-bit gradient and the moments, split over the data-parallel ranks by the distributed optimizer
    (``shards`` = d c), whole otherwise. The frozen base has no gradient slot (requires_grad False)
    and stays at the parameters' width, ``b_hp``. Each width is per adapter parameter except
    ``"base_dtype"``, the frozen base's storage (a key of
    :data:`memsym.terms.adapters.QUANTIZATIONS`), and, under fp8 and fp4, ``b_f8``: the bytes per
    frozen linear weight of TE's cached copies (:func:`memsym.terms.model_state.te_weight_cache`) or
    FP8 parameters.

    Parameters
    ----------
    precision : str
        The job's precision [1] (a key of :data:`memsym.terms.widths.PRECISIONS`; fp8 and fp4
        train bf16 adapters).
    grad_dtype : {"fp32", "bf16", "fp16"}, optional
        The gradient buffer's dtype [1]; None: the framework's
        (:func:`memsym.terms.widths.default_grad_dtype`: fp32 under bf16, fp16 under fp16).
    optimizer : str
        A key of :data:`memsym.terms.widths.OPTIMIZERS` [1].
    scheme : {"distributed-optimizer", "ddp"}
        Megatron-core's data parallelism [1].
    shards : sympy.Expr or int
        Ranks that split the main copies and the moments [1] (d c under the distributed
        optimizer, 1 otherwise).
    fp8_recipe : {None, "delayed", "tensorwise", "mxfp8"}
        Megatron ``--fp8-recipe`` (fp8 only): the frozen base's cached copies [1].
    **optimizer_dtypes
        ``precision_aware``, the precision-aware optimizer's dtypes and ``non_tn_fp8_gemm`` (the
        base's cache: no FP8 transpose), passed to :func:`memsym.terms.widths.byte_widths`.

    Returns
    -------
    dict
        ``"adapter_dtype"``, ``"base_dtype"`` and ``{b_g, b_mg, b_m, b_o}`` (and ``b_f8``
        under fp8 and fp4) [bytes/parameter].

    Examples
    --------
    Qwen3-8B's LoRA (bf16, fp32 gradient buffer, Adam, distributed optimizer over d = 4):
    2 + 4 + (0 + 4 + 8)/4 = 9 bytes per adapter parameter; under fp16 the gradient is fp16 and
    its fp32 copy a shard: 2 + 2 + (4 + 4 + 8)/4 = 8:

    >>> w = megatron_adapter_widths(shards=4)
    >>> w["adapter_dtype"], w["base_dtype"], w[b_g] + (w[b_mg] + w[b_m] + w[b_o])
    ('bf16', 'bf16', 7)
    >>> from memsym.terms.adapters import adapter_state
    >>> widths = {k: v for k, v in w.items() if not isinstance(k, str)}
    >>> adapter_state(w["adapter_dtype"], main_grads=True).subs(widths).evaluate(N_a=1)
    9
    >>> w = megatron_adapter_widths("fp16", shards=4)
    >>> w[b_g], w[b_mg], w[b_g] + w[b_mg] + w[b_m] + w[b_o]
    (2, 1, 6)
    >>> [megatron_adapter_widths(x)[b_f8] for x in ("fp8", "fp4")]
    [2, 9/8]
    >>> megatron_adapter_widths("fp8", fp8_recipe="mxfp8")[b_f8]
    33/16

    References
    ----------
    .. [megatron-bridge] src/megatron/bridge/peft/lora.py:236 (``model_parallel_config=
       module.config``) and peft/utils.py:1033-1080 (the adapters' ColumnParallelLinear /
       RowParallelLinear on that config), training/mixed_precision.py:185-197 (bf16_mixed:
       ``params_dtype=torch.bfloat16``, ``grad_reduce_in_fp32=True``), :201-213 (fp16_mixed:
       ``params_dtype=torch.half``, ``grad_reduce_in_fp32=False``), :217-415 (the FP8 and
       NVFP4 recipes start from bf16_mixed or fp16_mixed), :138-160 (``setup`` writes the
       fields into the model, optimizer and DDP configs) at 067f987df0.
    .. [megatron-core] megatron/core/distributed/distributed_data_parallel.py:180 (frozen
       parameters skipped) and :192, param_and_grad_buffer.py:924 (``grad_dtype = torch.float
       if grad_reduce_in_fp32 else param.dtype``), optimizer/distrib_optimizer.py:445
       (``shard_model_param.clone().float()``, the fp32 main shard) and :2792
       (``shard_main_param.grad = shard_model_grad.float()``), optimizer/optimizer.py:1097
       (the DDP optimizer's whole ``main_grad.float()``) at d98e8a64dd.
    """
    # Bridge's adapters: plain Megatron-core linears in params_dtype (bf16 under FP8, NVFP4)
    dtype = precision if precision in ("fp32", "fp16") else "bf16"
    adapter = byte_widths(scheme, dtype, optimizer, grad_dtype=grad_dtype, **optimizer_dtypes)
    base = byte_widths(scheme, dtype, "none")[b_hp]
    n = as_expr(shards)
    out = {"adapter_dtype": dtype, "base_dtype": "fp32" if base == 4 else dtype, b_g: adapter[b_g],
           **{k: adapter[k] / n for k in (b_mg, b_m, b_o)}}
    if precision in ("fp8", "fp4"):
        # the frozen base's TE casts are a trained weight's (te_weight_cache): the same widths
        out[b_f8] = byte_widths(scheme, precision, "none", fp8_recipe=fp8_recipe, non_tn_fp8_gemm=
                                optimizer_dtypes.get("non_tn_fp8_gemm", False))[b_f8]
    elif fp8_recipe is not None:
        byte_widths(scheme, precision, "none", fp8_recipe=fp8_recipe)   # its one-line refusal
    return out


def quantized_frozen_base(linear_params, other_params, fmt: str = "FP8 ",
                          dtype: str = "bf16") -> Total:
    r"""The frozen base of a LoRA job over FP8 or NVFP4 parameters [bytes].

    .. math:: M = b_{f8}\,\Psi_{\mathrm{lin}} + b_{hp}\,\Psi_{\mathrm{other}}

    Under ``fp8_param`` (Megatron-Bridge's ``fp8_param_gather``) or ``fp4_param``,
    Megatron-core builds the decoder layers' Transformer Engine linears inside
    ``fp8_model_init``: each weight is initialised in 16 bits and quantized once, with the
    rowwise and the columnwise usage (the transpose under per-tensor scaling on TN-only GPUs,
    none on GPUs whose FP8 GEMMs take any layout; MXFP8 and NVFP4 columnwise data with its
    scales), and the forward uses the parameter itself.  Frozen by LoRA, it has no gradient
    slot and no fp32 main copy: the :math:`\Psi_{\mathrm{lin}}` linear weights hold
    :math:`b_{f8}` bytes each and no 16-bit copy.  The embedding, the output layer, the
    norms and any BF16 first/last layer stay in the model's ``params_dtype``.  Neglected:
    per-tensor scaling's fp32 ``scale_inv`` (4 bytes per weight tensor) and the quantizer's
    amax.

    Parameters
    ----------
    linear_params : sympy.Expr
        Frozen linear weights built as FP8 / NVFP4 parameters, per GPU [parameters].
    other_params : sympy.Expr
        The other frozen parameters per GPU, kept 16-bit [parameters].
    fmt : {"FP8 ", "MXFP8 ", "NVFP4 "}
        The format named in the description.
    dtype : {"bf16", "fp16"}
        The model's ``params_dtype``.

    Examples
    --------
    Llama-3 8B's decoder linears (6979321856 weights) as per-tensor FP8 parameters on an
    H100 (rowwise + transpose, 2 bytes) beside its 1050939392 other weights in bf16:

    >>> from memsym.symbols import N_lin
    >>> M = quantized_frozen_base(N_lin, 1050939392).subs({b_f8: 2})
    >>> M.evaluate(N_lin=6979321856) == 2 * 6979321856 + 2 * 1050939392
    True

    References
    ----------
    transformer-engine (d0067d0da6): pytorch/module/base.py:1835-1864 (reset_parameters),
    836-845 (quantize_weight); tensor/storage/float8_tensor_storage.py:279-317,
    mxfp8_tensor_storage.py:276-316, nvfp4_tensor_storage.py:353-375.  megatron-core
    (d98e8a64dd): fp8_utils.py:848, fp4_utils.py:258, distributed_data_parallel.py:180,
    optimizer/__init__.py:332.
    """
    rest = frozen_weights(dtype, other_params)
    return Total(f"frozen {fmt}base", (
        Term("weights", rest.expr, f"frozen embeddings, norms, output layer and any BF16 "
             f"layers, kept at {dtype} (outside fp8_model_init)", _QUANT_REST,
             label=f"{dtype} weights"),
        Term("fp8_weights", as_expr(linear_params) * b_f8, "frozen linear weights built as "
             + fmt + "parameters (fp8_model_init: rowwise + columnwise, no 16-bit copy, no "
             "master)", _QUANT_FROZEN, label="fp8 weights")))
