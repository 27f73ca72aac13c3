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
from ..symbols import L_lora, N_a, b_g, b_m, b_mg, b_o, d, h, r_lora
from ..term import Source, Term, Total
from ..values import as_expr  # library arguments: text refused, never parsed
from .model_state import shard_params

__all__ = ["QUANTIZATIONS", "ADAPTER_DTYPES", "quantization_bits", "quantization_bytes",
           "lora_parameters", "frozen_weights", "adapter_state", "lora", "qlora", "LORA_TARGETS"]

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
        :func:`memsym.terms.megatron_lora.megatron_adapter_widths`).

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
