r"""LoRA, QLoRA and frozen layers: memory when only part of the model is trained.

The base weights are frozen and held at their storage precision (bf16, int8, or NF4 4-bit
with double-quantized constants); gradients and optimizer states exist only for the
trainable parameters (the adapters, or the layers left unfrozen); activations are still
kept for the backward pass (it must run through the frozen layers to reach the adapters).

References
----------
.. [lora] Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", arXiv:2106.09685,
   §4.1 and §5.1 (|Θ| = 2 × L̂_LoRA × d_model × r), Table 4.
.. [qlora] Dettmers et al., "QLoRA: Efficient Finetuning of Quantized LLMs", arXiv:2305.14314,
   §3 (4-bit NormalFloat, blocks of 64; double quantization: 8-bit constants in blocks of
   256, 32/64 = 0.5 bits -> 8/64 + 32/(64·256) = 0.127 bits per parameter).

The unquantized and plain-integer storages (bf16: 2 bytes, int4: 0.5 bytes per weight) are the
format's bits / 8 per weight.
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..errors import UnknownNameError
from ..symbols import L_lora, N_a, b_f8, b_g, b_hp, b_m, b_mg, b_o, d, h, r_lora
from ..term import Source, Term, Total
from ..values import as_expr  # library arguments: text refused, never parsed
from .model_state import shard_params
from .widths import byte_widths

__all__ = ["QUANTIZATIONS", "ADAPTER_DTYPES", "megatron_adapter_widths", "quantization_bits", "quantization_bytes",
           "lora_parameters", "frozen_weights", "adapter_state",
           "lora", "qlora", "LORA_TARGETS", "FROZEN_LINEAR_INPUTS", "frozen_linear_inputs",
           "quantized_frozen_base"]

_R = sp.Rational
_LORA = Source("lora", "§4.1; §5.1 (|Θ| = 2 × L̂_LoRA × d_model × r)")
_QLORA = Source("qlora", "§3, Double Quantization (0.127 bits per parameter)")
# frozen weights at their storage width (bits / 8 bytes each), with no gradient or optimizer
# state: LoRA's §4.2 (the rule of thumb "LoRA 2P GB" of seed 004 at bf16)
# the optimizer's fp32 copy of a 16-bit gradient (Megatron-core: distributed optimizer and DDP)
_MAIN_GRADS = Source("megatron-core", "optimizer/distrib_optimizer.py:2792 "
                     "(shard_main_param.grad = shard_model_grad.float()); optimizer/optimizer.py:1097")
# Megatron-Bridge's LoRA freezes the base as built: requires_grad False, no cast, no
# quantization, so every frozen weight (embeddings, norms and output layer as the linear
# layers) stays in the model's params_dtype; the adapters default to that dtype too
_BRIDGE_FROZEN = Source("megatron-bridge-peft", "peft/base.py:176-193 at 067f987df0 (freeze_model: "
                        "requires_grad = False, nothing cast: the frozen base stays in "
                        "params_dtype); peft/lora.py:128, 154 (lora_dtype None: the model's dtype)")
# the quantized base's other weights: bitsandbytes (QLoRA's quantizer, through transformers)
# replaces nn.Linear layers only, and leaves the output layer out (get_keys_to_not_convert)
_QLORA_UNQUANTIZED = Source("qlora", "§3, Eq. 5 (NF4 linear layers): bitsandbytes quantizes "
                            "nn.Linear layers only, the embedding, norms and output layer stay "
                            "16-bit (and transformers 5's fused MoE experts, 3-D parameters)")
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
_FROZEN = Source("lora", "§4.2, Practical Benefits (frozen W_0: no gradients or optimizer "
                 "states); storage width = the format's bits / 8 per weight")

#: Storage of frozen base weights -> (bits per weight, bits of quantization constants per weight).
#: REF: qlora §3: NF4 with block size 64 and fp32 absmax constants costs 32/64 = 0.5 extra bits;
#: double quantization stores them as 8-bit values (8/64) plus one fp32 constant per 256 of them
#: (32/(64*256)), 0.127 bits in all.  int8 (LLM.int8, bitsandbytes) keeps one fp32 scale per row,
#: neglected here (4 bytes per row of thousands of weights).
QUANTIZATIONS = {
    "fp32": (_R(32), _R(0)),
    "bf16": (_R(16), _R(0)),
    "fp16": (_R(16), _R(0)),
    "int8": (_R(8), _R(0)),
    # 4 bits = 0.5 bytes per weight, block constants neglected (seed 004's rule of thumb)
    "int4": (_R(4), _R(0)),
    "fp4": (_R(4), _R(0)),
    "nf4": (_R(4), _R(32, 64)),
    "nf4-dq": (_R(4), _R(8, 64) + _R(32, 64 * 256)),
}

#: Adapter weight precision -> bytes per adapter weight.  PEFT keeps adapters in fp32 by
#: default (``autocast_adapter_dtype=True``), so fp32 is the default.
ADAPTER_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}

#: LoRA target modules of a Llama-style layer and their (input, output) widths in terms of
#: h (hidden), q = a*d_h, kv = g*d_h, f (ffn); LoRA adds r*(d_in + d_out) per matrix.
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")


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


def lower_choice(kind, value, accepted) -> str:
    """``str(value)``, stripped and lower-cased, if it is among ``accepted``; else
    :class:`~memsym.errors.UnknownNameError`."""
    key = str(value).strip().lower()
    if key not in accepted:
        raise UnknownNameError(kind, value, accepted)
    return key


def quantization_bits(kind: str = "nf4-dq") -> sp.Rational:
    r"""Bits per frozen weight, quantization constants included [bits/parameter].

    .. math:: b_{\mathrm{NF4+DQ}} = 4 + \frac{8}{64} + \frac{32}{64 \cdot 256} = 4 + 0.127

    Parameters
    ----------
    kind : str
        A storage format of :data:`QUANTIZATIONS` (``"nf4-dq"``, ``"nf4"``, ``"bf16"`` ...).

    Examples
    --------
    QLoRA §3: double quantization costs :math:`8/64 + 32/(64 \cdot 256) = 0.127` bits per
    parameter, against :math:`32/64 = 0.5` for NF4's fp32 constants alone:

    >>> quantization_bits("nf4-dq") - 4, float(quantization_bits("nf4-dq") - 4)
    (65/512, 0.126953125)
    >>> quantization_bits("nf4")
    9/2

    References
    ----------
    .. [qlora] Dettmers et al. 2023, arXiv:2305.14314, §3 (4-bit NormalFloat, Double Quantization).
    """
    bits, extra = QUANTIZATIONS[lower_choice("quantization", kind, QUANTIZATIONS)]
    return bits + extra


def quantization_bytes(kind: str = "nf4-dq") -> sp.Rational:
    r"""Bytes per frozen weight: :func:`quantization_bits` / 8 [bytes/parameter].

    .. math:: \frac{b_{\text{weight}} + b_{\text{constants}}}{8}

    Parameters
    ----------
    kind : str
        A storage format of :data:`QUANTIZATIONS`.

    Examples
    --------
    By hand, 16/8 = 2, 8/8 = 1 and QLoRA's :math:`(4 + 65/512)/8 = 2113/4096`:

    >>> quantization_bytes("bf16"), quantization_bytes("int8"), quantization_bytes("nf4-dq")
    (2, 1, 2113/4096)

    References
    ----------
    .. [qlora] Dettmers et al. 2023, arXiv:2305.14314, §3 (Double Quantization: 0.127 bits).
    """
    return quantization_bits(kind) / 8


def lora_parameters() -> sp.Expr:
    r"""Trainable LoRA parameters as the LoRA paper prints them [parameters].

    .. math:: |\Theta| = 2\,\hat{L}_{\mathrm{LoRA}}\,d_{\mathrm{model}}\,r

    for :math:`\hat{L}_{\mathrm{LoRA}}` adapted square :math:`d_{\mathrm{model}} \times
    d_{\mathrm{model}}` matrices (:math:`d_{\mathrm{model}} = h`).

    Examples
    --------
    LoRA Table 4 (GPT-3 175B, W_q and W_v in 96 layers, r = 1 and r = 8: 4.7M and 37.7M):

    >>> e = lora_parameters()
    >>> [int(e.subs({L_lora: 192, h: 12288, r_lora: r})) for r in (1, 8)]
    [4718592, 37748736]

    References
    ----------
    Hu et al. 2021, arXiv:2106.09685, §5.1 and Table 4.
    """
    return 2 * L_lora * h * r_lora


def frozen_weights(quantization: str = "bf16", params=None, *, sharded: bool = False) -> Term:
    r"""The frozen base weights at their storage precision [bytes].

    .. math:: M_{\mathrm{frozen}} = \frac{N}{p\,t}\,\frac{\text{bits}}{8}

    Parameters
    ----------
    quantization : str
        One of :data:`QUANTIZATIONS` (``nf4-dq`` is QLoRA's NF4 with double quantization).
    params : sympy.Expr, optional
        Frozen parameters held by this GPU's model-parallel shard (default ``N/(p t)``) [parameters].
    sharded : bool
        Frozen weights sharded over data parallel too (FSDP / ZeRO-3): divided by d.

    Examples
    --------
    70B at bf16 is 2P = 140 GB, at 4-bit 0.5P = 35 GB (QLoRA adds 0.127 bits):

    >>> [float(frozen_weights(q).evaluate(N=70e9, p=1, t=1)) / 1e9 for q in ("bf16", "nf4", "nf4-dq")]
    [140.0, 39.375, 36.11083984375]

    References
    ----------
    .. [lora] arXiv:2106.09685, §4.2 (frozen weights: no gradients or optimizer states).
    .. [qlora] arXiv:2305.14314, §3, Double Quantization (0.127 bits per parameter).
    """
    key = lower_choice("quantization", quantization, QUANTIZATIONS)
    expr = shard_params(params) * quantization_bytes(key) / (d if sharded else 1)
    src = _QLORA if key.startswith("nf4") else _FROZEN
    return Term("weights", expr, f"frozen base weights stored as {key}"
                + (", sharded over data parallel" if sharded else ""), src, label="frozen weights")


def adapter_state(adapter_dtype: str = "fp32", params=N_a, *, main_grads: bool = False) -> Total:
    r"""Weights, gradients and optimizer states of the trainable adapter parameters [bytes].

    .. math:: M = N_a\,(b_a + b_g + b_m + b_o)\quad(+\,N_a\,b_{mg}\text{ with main\_grads})

    with :math:`b_a` the adapter weight bytes (fp32: 4, PEFT's default) and the byte widths
    :math:`b_g, b_m, b_o` of :func:`memsym.terms.model_state.byte_widths` (fp32 adapters need
    no separate master copy: substitute ``b_m = 0``).

    Parameters
    ----------
    adapter_dtype : {"fp32", "bf16", "fp16"}
        Precision of the adapter weights.
    params : sympy.Expr
        Trainable adapter parameters [parameters] (default the symbol ``N_a``).
    main_grads : bool
        Add the optimizer's fp32 copy of 16-bit gradients, ``N_a b_mg`` (Megatron-core's:
        :func:`megatron_adapter_widths`).

    Examples
    --------
    >>> adapter_state().subs(b_g=4, b_m=0, b_o=8).evaluate(N_a=4718592)
    75497472

    References
    ----------
    .. [lora] arXiv:2106.09685, §4.1; §5.1 (|Θ| = 2 × L̂_LoRA × d_model × r).
    """
    width = ADAPTER_DTYPES[lower_choice("adapter dtype", adapter_dtype, ADAPTER_DTYPES)]
    psi = as_expr(params)
    main = (Term("main_gradients", psi * b_mg, "fp32 copy of the adapters' 16-bit gradients the "
                 "optimizer steps on", _MAIN_GRADS, label="fp32 main grads"),) if main_grads else ()
    return Total("trainable adapter states", (
        Term("adapter_weights", psi * width, f"LoRA adapter weights ({adapter_dtype})", _LORA,
             label="adapters"),
        Term("gradients", psi * b_g, "gradients of the adapter parameters only (the base is frozen)",
             _LORA, label="gradients"),
    ) + main + (
        Term("optimizer", psi * (b_m + b_o), "optimizer states of the adapter parameters only",
             _LORA, label="optimizer"),
    ))


def lora(quantization: str = "bf16", adapter_dtype: str = "fp32", *, params=None,
         adapters=N_a, unquantized=None, sharded: bool = False, main_grads: bool = False,
         unquantized_dtype: str = "bf16", params_dtype_base: bool = False) -> Total:
    r"""Model memory of LoRA fine-tuning per GPU (activations are added separately) [bytes].

    .. math::

        M = \frac{N}{p\,t}\,\frac{\text{bits}}{8} + N_a\,(b_a + b_g + b_m + b_o)

    Parameters
    ----------
    quantization : str
        Storage of the frozen base (``bf16`` for LoRA, ``nf4-dq`` for QLoRA).
    adapter_dtype : {"fp32", "bf16", "fp16"}
    params : sympy.Expr, optional
        Frozen parameters per GPU (default ``N/(p t)``) [parameters].
    adapters : sympy.Expr
        Trainable adapter parameters per GPU (default the symbol ``N_a``; the paper's form
        is :func:`lora_parameters`).
    unquantized : sympy.Expr, optional
        Frozen parameters that stay at bf16 whatever ``quantization`` says, e.g. the symbol
        ``N_u``; default none.  Under a quantized base (QLoRA, int8) bitsandbytes quantizes
        ``nn.Linear`` layers only: the embedding, the norms and the output layer stay 16-bit
        (cited to QLoRA); under a 16/32-bit base (LoRA) nothing is quantized and they are
        frozen as built like the linear layers (cited to LoRA, §4.2): stored in the base's
        own dtype, they join its one ``weights`` Term; in another dtype they are a Term of
        their own.
    sharded : bool
        Frozen weights sharded over data parallel (FSDP / ZeRO-3 with QLoRA).
    main_grads : bool
        The adapters' fp32 main-gradient copy (:func:`adapter_state`).
    unquantized_dtype : {"bf16", "fp16", "fp32"}
        Storage of the ``unquantized`` parameters (Megatron: the model's ``params_dtype``).
    params_dtype_base : bool
        The whole frozen base stays in the model's ``params_dtype`` (Megatron-Bridge's LoRA:
        frozen as built, no bitsandbytes): the ``unquantized`` Term cites that, not QLoRA.

    Examples
    --------
    7B with LoRA at bf16 holds 2P = 14 GB of weights plus a small adapter:

    >>> M = lora().subs(b_g=4, b_m=0, b_o=8)
    >>> float(M.evaluate(N=7e9, p=1, t=1, N_a=4e6)) / 1e9
    14.064
    >>> lora(unquantized=N_a, params_dtype_base=True).terms[0].source.key
    'megatron-bridge-peft'
    >>> lora(unquantized=N_a).terms[0].key, qlora(unquantized=N_a).terms[1].source.key
    ('weights', 'qlora')

    References
    ----------
    .. [lora] arXiv:2106.09685, §4.1; §4.2; §5.1 (|Θ| = 2 × L̂_LoRA × d_model × r).
    .. [qlora] arXiv:2305.14314, §3, Double Quantization (0.127 bits per parameter).
    """
    folded = unquantized is not None and lower_choice(
        "quantization", quantization, QUANTIZATIONS) == unquantized_dtype
    base = () if folded else (frozen_weights(quantization, params, sharded=sharded),)
    if folded:
        # nothing quantized: the embeddings, norms and output layer are stored as the frozen
        # linear layers are, so the frozen base is one row, not a "weights" and an
        # "unquantized" row of the same dtype
        whole = frozen_weights(quantization, shard_params(params) + as_expr(unquantized),
                               sharded=sharded)
        src = _BRIDGE_FROZEN if params_dtype_base else _FROZEN
        said = " (the model's params_dtype)" if params_dtype_base else ""
        base = (replace(whole, description=f"{whole.description}{said}: linear layers, "
                        "embeddings, norms and output layer alike (frozen as built, nothing "
                        "quantized)", source=src),)
    elif unquantized is not None:
        keep = frozen_weights(unquantized_dtype, unquantized, sharded=sharded)
        why = (("in the model's params_dtype, as the frozen linear layers (frozen as built, "
                "not quantized)", _BRIDGE_FROZEN) if params_dtype_base
               else ("(bitsandbytes quantizes linear layers only)", _QLORA_UNQUANTIZED)
               if quantization_bits(quantization) < 16
               else ("as the frozen linear layers (LoRA freezes the base as built, nothing "
                     "quantized)", _FROZEN))
        base += (Term("weights_unquantized", keep.expr, "frozen embeddings, norms and output layer "
                      f"kept at {unquantized_dtype} {why[0]}", why[1],
                      label=f"{unquantized_dtype} weights"),)
    return Total(f"LoRA model memory ({quantization} base, {adapter_dtype} adapters)",
                 base + adapter_state(adapter_dtype, adapters, main_grads=main_grads).terms)


def qlora(adapter_dtype: str = "fp32", *, double_quant: bool = True, params=None,
          adapters=N_a, unquantized=None, sharded: bool = False) -> Total:
    r"""QLoRA: :func:`lora` with an NF4 base (with or without double quantization) [bytes].

    .. math:: M = \frac{N}{p\,t}\,\Bigl(\frac{4 + 0.127}{8}\Bigr) + N_a\,(b_a + b_g + b_m + b_o)

    Parameters
    ----------
    params : sympy.Expr, optional
        Frozen parameters per GPU (default ``N/(p t)``) [parameters]; the other parameters
        are :func:`lora`'s.

    Examples
    --------
    QLoRA abstract: a 65B model fine-tunes in under 48 GB; the NF4 weights take 33.5 GB:

    >>> round(float(qlora().terms[0].evaluate(N=65.2e9, p=1, t=1)) / 1e9, 1)
    33.6

    References
    ----------
    .. [qlora] arXiv:2305.14314, §3, Double Quantization (0.127 bits per parameter).
    .. [lora] arXiv:2106.09685, §4.1; §5.1 (|Θ| = 2 × L̂_LoRA × d_model × r).
    """
    return lora("nf4-dq" if double_quant else "nf4", adapter_dtype, params=params,
                adapters=adapters, unquantized=unquantized, sharded=sharded)


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
        The adapted matrices (:data:`LORA_TARGETS`).

    Examples
    --------
    An MoE layer with adapters on attention only keeps neither expert GEMM input:

    >>> from memsym.terms.activations import layer_activations
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

    The widths are :func:`memsym.terms.widths.byte_widths` of the framework for the adapters'
    own dtype.  Megatron-Bridge builds the adapters as Megatron-core linear layers on the
    model's config (not Transformer Engine's, so no FP8 or NVFP4 copy): their dtype is the
    model's ``params_dtype`` (fp32, fp16 under fp16_mixed, bf16 under bf16_mixed and every
    FP8 or NVFP4 recipe built on it).  Megatron-core's DDP gives every trainable parameter a
    slot in its gradient buffer, fp32 under ``grad_reduce_in_fp32`` (bf16_mixed's), else the
    parameter's dtype (fp16_mixed sets it False); its optimizer keeps an fp32 main copy of a
    16-bit parameter, an fp32 ``.float()`` copy of a 16-bit gradient and the moments, split over
    the data-parallel ranks by the distributed optimizer (``shards`` = d c), whole otherwise.
    The frozen base has no gradient slot (requires_grad False) and stays at the parameters' width,
    ``b_hp``.  Each width is per adapter parameter except ``"base_dtype"``, the frozen base's
    storage (a key of :data:`QUANTIZATIONS`), and, under fp8 and fp4, ``b_f8``: the bytes per frozen
    linear weight of TE's cached copies (:func:`memsym.terms.model_state.te_weight_cache`) or FP8 parameters.

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
    # Bridge's adapters are plain Megatron-core linears in params_dtype: bf16 under the FP8
    # and NVFP4 recipes (no quantized copy, no FP8 parameters)
    dtype = precision if precision in ("fp32", "fp16") else "bf16"
    adapter = byte_widths(scheme, dtype, optimizer, grad_dtype=grad_dtype, **optimizer_dtypes)
    base = byte_widths(scheme, dtype, "none")[b_hp]
    n = as_expr(shards)
    out = {"adapter_dtype": dtype, "base_dtype": "fp32" if base == 4 else dtype,
           b_g: adapter[b_g], b_mg: adapter[b_mg] / n, b_m: adapter[b_m] / n,
           b_o: adapter[b_o] / n}
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
