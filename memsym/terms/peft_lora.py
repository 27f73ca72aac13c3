r"""What Hugging Face PEFT's LoRA and DoRA adapters keep for the backward, on transformers' layers.

PEFT 0.20.0 wraps each adapted ``nn.Linear`` in ``lora.Linear``, whose forward runs
(``src/peft/tuners/lora/layer.py:1044-1058``)::

    result = self.base_layer(x)
    x = self._cast_input_dtype(x, lora_A.weight.dtype)
    result = result + lora_B(lora_A(dropout(x))) * scaling

with ``dropout`` an ``nn.Dropout(p=lora_dropout)``, or ``nn.Identity`` at ``lora_dropout = 0``
(``layer.py:251-254``; PEFT's ``LoraConfig`` default 0.0, ``lora/config.py:567``; TRL's
``ModelConfig`` 0.05).  What autograd keeps, per adapted matrix of input width
:math:`d_{in}`, output width :math:`d_{out}`, rank r, over :math:`\tau = sb/c` tokens at the
compute width :math:`w`:

* the frozen base keeps nothing for its own weight (torch saves a ``mm`` operand only for the
  other operand's gradient: a frozen weight needs no input), and the frozen norm weight keeps
  no normalised tensor (:func:`peft_frozen_base`);
* ``lora_A`` keeps its input for its weight gradient: the dropout's output, a new tensor
  :math:`w\tau d_{in}`; without dropout the input itself, a new tensor too when the adapters'
  dtype is not the compute dtype (PEFT's fp32 adapters under the Trainer's 16-bit autocast:
  ``x.to(float32)``, then autocast's 16-bit cast for the GEMM, which is kept), else the
  group's own input (q, k and v share the norm output);
* ``nn.Dropout`` keeps its mask: torch's fused CUDA kernel (``native_dropout``, taken when
  :math:`0 < p < 1` on CUDA: ``Dropout.cpp`` ``is_fused_kernel_acceptable``) saves a bool
  mask, 1 byte an element, :math:`\tau d_{in}`;
* ``lora_B`` keeps ``lora_A``'s output, :math:`w\tau r`;
* under autocast each fp32 adapter weight is cast to 16 bits once (autocast caches casts of
  fp32 leaves that require grad) and kept by its GEMM for the input gradient,
  :math:`w\,r\,(d_{in} + d_{out})`.

The output layer is frozen too (PEFT trains the adapters alone; TRL refuses what would make
``lm_head`` trainable): the final norm's weight product keeps no normalised tensor and
``lm_head`` no input (:func:`peft_frozen_output`).  Under gradient checkpointing autocast's
cache holds every adapter weight's 16-bit cast through the forward (:func:`peft_cached_casts`).

DoRA (``use_dora=True``: ``DoraLinearVariant.forward``, ``variants.py:219-246``, and
``DoraLinearLayer.forward``, ``dora.py:132-165``) adds a trainable magnitude vector of
:math:`d_{out}` per adapted matrix and, each forward:

* ``get_lora_weight`` runs ``lora_B(lora_A(eye(d_in)))`` (``dora.py:93-99``): the identity
  (or its 16-bit cast) kept by ``lora_A``, :math:`w d_{in}^2`, and ``lora_A``'s output kept by
  ``lora_B``, :math:`w d_{in} r`; the weight norm it feeds is computed under ``detach``
  (nothing kept) and kept by ``magnitude / weight_norm`` in fp32, :math:`4 d_{out}`, as are
  ``mag_norm_scale`` and ``mag_norm_scale - 1`` kept by the two products, :math:`2 \cdot 4
  d_{out}`;
* ``(mag_norm_scale - 1) * base_result`` keeps the base result and ``mag_norm_scale *
  lora_result`` the LoRA result, :math:`2 w \tau d_{out}`;
* with dropout the base result is recomputed on the dropped input, ``F.linear(x, weight)``
  (``dora.py:158-162``), which keeps the frozen weight for the input gradient: under autocast
  its 16-bit cast of the fp32 copy ``weight.to(x.dtype)``, a new tensor :math:`w d_{out}
  d_{in}` (the parameter itself, not counted, when no cast is made).

References
----------
.. [peft] huggingface/peft v0.20.0: src/peft/tuners/lora/layer.py:251-254 (``nn.Dropout`` or
   ``nn.Identity``), :1030-1071 (``Linear.forward``); src/peft/tuners/tuners_utils.py:1777-1792
   (``_cast_input_dtype``); src/peft/tuners/lora/variants.py:219-246; src/peft/tuners/lora/dora.py:
   85-165 (``get_weight_norm``, ``get_lora_weight``, ``update_layer``: the magnitude
   ``nn.Parameter(weight_norm)``, ``forward``).
.. [pytorch-dropout] torch 2.13.0 aten/src/ATen/native/Dropout.cpp ``is_fused_kernel_acceptable``
   (CUDA, 0 < p < 1: ``native_dropout``, whose backward keeps the bool mask); autocast_mode.cpp
   ``cached_cast`` (fp32 leaves that require grad: one cached cast).
"""

from __future__ import annotations

import sympy as sp

from ..symbols import E, a, b, c, d_h, f, f_e, g, h, r_lora, s, t
from ..term import Source, Term, Total
from .adapters import LORA_TARGETS

__all__ = ["peft_matrix_shapes", "peft_lora_activations", "peft_frozen_base",
           "peft_frozen_output", "peft_cached_casts", "peft_head_input_held",
           "peft_expert_weights"]

_PEFT = Source("peft", "v0.20.0 src/peft/tuners/lora/layer.py:1044-1058 (Linear.forward: "
               "lora_B(lora_A(dropout(x))) after _cast_input_dtype, tuners_utils.py:1777-1792)")
_DROPOUT = Source("peft", "v0.20.0 src/peft/tuners/lora/layer.py:251-254 (nn.Dropout(p=lora_dropout)); "
                  "torch 2.13.0 Dropout.cpp is_fused_kernel_acceptable: CUDA native_dropout "
                  "keeps a bool mask")
_DORA = Source("peft", "v0.20.0 src/peft/tuners/lora/dora.py:93-99 (lora_B(lora_A(eye))), "
               ":132-165 (DoraLinearLayer.forward), variants.py:219-246")

#: The matrix groups whose GEMM input a frozen transformers layer keeps only for the weight
#: gradient (:func:`memsym.terms.activations.layer_activations`' keys); the output projection's
#: input is the attention output, which the attention kernel keeps anyway.
_GROUP_INPUTS = ((("q", "k", "v"), "qkv_input"), (("gate", "up"), "mlp_input"),
                 (("down",), "fc2_input"))


def peft_matrix_shapes() -> dict:
    r"""Each LoRA target's (input, output) width on one tensor-parallel rank [elements].

    .. math:: q: (h, a d_h/t),\ k, v: (h, g d_h/t),\ o: (a d_h/t, h),\ \text{gate, up}:
       (h, f/t),\ \text{down}: (f/t, h)

    Examples
    --------
    >>> peft_matrix_shapes()["o"]
    (a*d_h/t, h)

    References
    ----------
    .. [peft] v0.20.0 src/peft/tuners/lora/layer.py (``lora_A = nn.Linear(in_features, r)``,
       ``lora_B = nn.Linear(r, out_features)``).
    """
    q, kv, ff = a * d_h / t, g * d_h / t, f / t
    return {"q": (h, q), "k": (h, kv), "v": (h, kv), "o": (q, h), "gate": (h, ff),
            "up": (h, ff), "down": (ff, h)}


def peft_lora_activations(targets, *, dropout: bool = False, dora: bool = False,
                          cast: bool = True, width: int = 2, quantized: bool = False) -> Total:
    r"""Activations PEFT's LoRA (or DoRA) adapters of one layer keep for the backward [bytes].

    Per micro-batch and layer, summed over the adapted matrices :math:`m` with
    :math:`(d_{in}, d_{out})` of :func:`peft_matrix_shapes`, :math:`\tau = sb/c`, compute
    width :math:`w`, :math:`[\cdot]` 1 when its condition holds, else 0:

    .. math::

        M = \sum_m \Bigl([\text{copy}]\,w\tau d_{in} + [p > 0]\,\tau d_{in} + w\tau r
            + [\text{cast}]\,w r (d_{in} + d_{out})\Bigr)
            + [\text{DoRA}] \sum_m \Bigl(w d_{in}^2 + w d_{in} r + 12 d_{out} + 2 w\tau d_{out}
            + [p > 0][\text{cast}]\,w d_{out} d_{in}\Bigr)

    with copy = (p > 0 or cast, not quantized): otherwise ``lora_A`` keeps the group's own
    input, which :func:`peft_frozen_base` leaves counted.

    Parameters
    ----------
    targets : sequence of str
        The adapted matrices (:data:`memsym.terms.adapters.LORA_TARGETS`).
    dropout : bool
        PEFT's ``lora_dropout`` > 0 (an ``nn.Dropout``; 0 is ``nn.Identity``).
    dora : bool
        ``use_dora=True``.
    cast : bool
        The adapters' dtype is not the compute dtype (PEFT's fp32 adapters, its
        ``autocast_adapter_dtype``, under a 16-bit autocast): the input and weight casts.
    width : int
        Bytes per element of the compute dtype [bytes] (the autocast dtype; 4 in fp32).
    quantized : bool
        A bitsandbytes base (QLoRA's ``Linear4bit``, ``Linear8bitLt``): PEFT's ``lora.bnb``
        layers cast the input to the adapters' dtype only outside autocast
        (``requires_conversion = not torch.is_autocast_enabled()``, bnb.py:543-546, :260), so
        under autocast ``lora_A`` keeps the input itself without dropout.

    Examples
    --------
    Llama-3-8B's q and v at r = 16, TRL's dropout 0.05 under bf16 autocast, s = 1024, b = 1:
    per matrix 2·1024·4096 (the dropped input's cast) + 1024·4096 (the mask) + 2·1024·16
    (lora_A's output) + 2·16·(4096 + d_out) (the weight casts), d_out 4096 and 1024:

    >>> M = peft_lora_activations(("q", "v"), dropout=True)
    >>> M.evaluate(s=1024, b=1, c=1, t=1, h=4096, a=32, g=8, d_h=128, r_lora=16) == (
    ...     2 * (3 * 1024 * 4096 + 2 * 1024 * 16) + 2 * 16 * (2 * 4096 + 4096 + 1024))
    True

    References
    ----------
    .. [peft] huggingface/peft v0.20.0 src/peft/tuners/lora/layer.py:251-254, :1030-1071;
       tuners_utils.py:1777-1792; variants.py:219-246; dora.py:85-165.
    .. [pytorch-dropout] torch 2.13.0 aten/src/ATen/native/Dropout.cpp
       (``is_fused_kernel_acceptable``); autocast_mode.cpp (``cached_cast``).
    """
    shapes = peft_matrix_shapes()
    chosen = [m for m in LORA_TARGETS if m in set(targets)]
    tok, w = s * b / c, sp.Integer(width)
    copy = dropout or (cast and not quantized)
    ins = sp.Add(*(shapes[m][0] for m in chosen))
    outs = sp.Add(*(shapes[m][1] for m in chosen))
    n = len(chosen)
    terms = []
    if copy and n:
        terms.append(Term("lora_inputs", w * tok * ins, "each lora_A's own input copy "
                          + ("(the dropped input" + (", cast to the compute dtype)" if cast
                                                      and not quantized else ")")
                             if dropout else "(autocast's cast of PEFT's fp32 input copy)"),
                          _PEFT, label="LoRA-A inputs"))
    if dropout and n:
        terms.append(Term("lora_dropout_masks", tok * ins, "lora_dropout's bool masks (1 byte "
                          "an element)", _DROPOUT, label="LoRA dropout masks"))
    if n:
        terms.append(Term("lora_a_outputs", w * tok * n * r_lora, "lora_A's outputs (r wide), "
                          "kept by lora_B", _PEFT, label="LoRA-A outputs"))
    if cast and n:
        terms.append(Term("lora_weight_casts", w * r_lora * (ins + outs), "autocast's cached "
                          "16-bit casts of the fp32 adapter weights, kept by their GEMMs", _PEFT,
                          label="LoRA weight casts"))
    if dora and n:
        terms += _dora_terms(chosen, shapes, tok, w, dropout, cast)
    return Total("PEFT LoRA activations", tuple(terms))


def _dora_terms(chosen, shapes, tok, w, dropout: bool, cast: bool) -> list:
    """DoRA's kept tensors beyond LoRA's (:func:`peft_lora_activations`)."""
    ins2 = sp.Add(*(shapes[m][0] ** 2 for m in chosen))
    ins = sp.Add(*(shapes[m][0] for m in chosen))
    outs = sp.Add(*(shapes[m][1] for m in chosen))
    out = [Term("dora_identity", w * (ins2 + ins * r_lora), "get_lora_weight's identity "
                "(d_in x d_in) kept by lora_A and lora_A's output on it kept by lora_B",
                _DORA, label="DoRA identity"),
           Term("dora_scales", 3 * 4 * outs, "the fp32 weight norm, mag_norm_scale and "
                "mag_norm_scale - 1 (d_out each)", _DORA, label="DoRA scales"),
           Term("dora_results", 2 * w * tok * outs, "the base result and the LoRA result "
                "kept by their products with the magnitude scale", _DORA, label="DoRA results")]
    if dropout and cast:
        both = sp.Add(*(shapes[m][0] * shapes[m][1] for m in chosen))
        out.append(Term("dora_base_weight", w * both, "the frozen weight's 16-bit cast kept by "
                        "F.linear on the dropped input", _DORA, label="DoRA base weight"))
    return out


def peft_frozen_base(layer: Total, targets, *, shared_inputs: bool, norms: bool = True,
                     mlp: bool = True, qk_norms: bool = False, width: int = 2,
                     frozen_moe: bool = False, expert_params=()) -> sp.Expr:
    r"""Activations a frozen transformers layer under PEFT does not keep [bytes].

    .. math:: \Delta M = [\text{norms}]\,M_{\text{norm\_inputs}} + \sum_{g} M_g
              + [\text{qk\_norms}]\,\frac{w\,\tau\,(a + g)\,d_h}{t}

    over the GEMM-input terms :math:`M_g` of the matrix groups (QKV, gate/up, down; the MLP's
    only with ``mlp``) whose frozen ``nn.Linear`` keeps no input (torch's ``mm`` saves an
    operand only for the other's gradient), except, with ``shared_inputs``, the groups whose
    adapter's ``lora_A`` keeps that input itself (no dropout, no cast); and ``norm_inputs``,
    the normalised 16-bit tensor ``LlamaRMSNorm``'s ``self.weight * hidden_states`` keeps only
    for the weight's gradient (``memsym.terms.hf_norms``), and, with ``qk_norms``, the same
    tensor of the per-head Q and K norms (Qwen3's ``q_norm`` and ``k_norm``, ``LlamaRMSNorm``'s
    code: the 16-bit part of ``qk_norm_inputs``).

    Parameters
    ----------
    layer : Total
        One layer's activations (:func:`memsym.terms.activations.layer_activations`) [bytes].
    targets : sequence of str
        The adapted matrices.
    shared_inputs : bool
        ``lora_A`` keeps its input itself (no dropout, adapters in the compute dtype).
    norms : bool
        The layer's norms are ``LlamaRMSNorm``-like (a weight product keeping the normalised
        16-bit tensor).
    mlp : bool
        The MLP is a dense one of frozen ``nn.Linear`` layers (False in an MoE layer, whose
        terms are left as counted).
    qk_norms : bool
        The layer has ``LlamaRMSNorm``-like per-head Q and K norms.
    frozen_moe : bool
        An MoE layer whose MLP carries no adapter: its frozen router, experts and shared
        experts keep no GEMM input either (``moe_input``, ``routed_tokens``,
        ``expert_fc2_input``; the shared experts' fc2 input, inside ``shared_expert``, stays
        counted).
    expert_params : tuple of str
        With ``frozen_moe``, the experts' parameters PEFT adapts through ``target_parameters``
        (``gate_up``, ``down``): their merged weight requires a gradient, so ``grouped_mm``
        keeps that projection's input (``routed_tokens``, ``expert_fc2_input``), the router
        staying frozen.
    width : int
        Bytes per element of the compute dtype [bytes].

    Examples
    --------
    >>> from memsym.terms.activations import layer_activations
    >>> lay = layer_activations(gated=True, flash=True, sequence_parallel=False, hf_norms=True)
    >>> peft_frozen_base(lay, ("q", "v"), shared_inputs=False) == sum(
    ...     lay[k].expr for k in ("norm_inputs", "qkv_input", "mlp_input", "fc2_input"))
    True
    >>> peft_frozen_base(lay, ("q", "v"), shared_inputs=True, norms=False, mlp=False)
    0

    References
    ----------
    .. [pytorch-autograd] torch 2.13.0 tools/autograd/derivatives.yaml (``mm``: ``self`` saved
       for ``mat2``'s gradient only), measured by tests/test_peft_activations.py.
    .. [hf-transformers-5-25] modeling_llama.py (``LlamaRMSNorm.forward``).
    """
    chosen = set(targets)
    keys = {key for group, key in _GROUP_INPUTS
            if (mlp or key == "qkv_input") and not (shared_inputs and chosen & set(group))}
    if norms:
        keys.add("norm_inputs")
    if frozen_moe:
        keys |= {"moe_input"} | {key for name, key in (("gate_up", "routed_tokens"), (
            "down", "expert_fc2_input")) if name not in expert_params}
    qk = width * s * b / c * (a + g) * d_h / t if qk_norms else 0
    return sp.Add(*(term.expr for term in layer.terms if term.key in keys)) + qk


_FROZEN_OUT = Source("hf-transformers-5-25", "models/llama/modeling_llama.py LlamaRMSNorm.forward "
                     "(line 67: self.weight * hidden_states.to(input_dtype)), LlamaModel.forward "
                     "(line 404: self.norm), LlamaForCausalLM.forward (line 471: self.lm_head); "
                     "models/gemma/modeling_gemma.py GemmaRMSNorm.forward (line 77: output * (1.0 "
                     "+ self.weight.float())); models/olmo2/modeling_olmo2.py Olmo2RMSNorm.forward "
                     "(line 63: (self.weight * hidden_states).to(input_dtype)); torch 2.13.0 "
                     "derivatives.yaml (mul, mm: an operand saved for the other's gradient only)")


def peft_frozen_output(tok, sig, *, norm: str | None, head_input: bool,
                       width: int = 2) -> Term:
    r"""What a frozen final norm and ``lm_head`` under PEFT do not keep [bytes] (a negative Term).

    .. math::

        -\left([\text{norm}]\,\frac{w_n \tau h}{\sigma}
        + [\text{head}]\,\frac{w \tau h}{\sigma}\right)

    PEFT leaves every base weight frozen, the final norm's and ``lm_head``'s with them, and
    torch saves a product's operand only for the other operand's gradient.  The final norm's
    weight product keeps the normalised tensor only for the weight's gradient:
    ``LlamaRMSNorm``'s 16-bit ``hidden_states.to(input_dtype)`` (:math:`w_n = w`, the compute
    width: the fp32 product itself in fp32), the fp32 normalised tensor of a norm scaling by
    ``1 + weight.float()`` (Gemma's) or multiplying its weight in fp32 (OLMo 2's)
    (:math:`w_n = 4`); Gemma's fp32 ``1 + weight`` (4h) stays, kept for the input's gradient.
    ``lm_head`` keeps its input (the final norm's output) only for its weight's gradient: gone
    under ``nll``; TRL's chunked loss keeps no such input anyway (``head_input`` False).

    Parameters
    ----------
    tok : sympy.Expr
        Tokens of one micro-batch, :math:`\tau = sb/c` [tokens].
    sig : int or sympy.Expr
        The sequence-parallel divisor :math:`\sigma` [1].
    norm : {"llama", "fp32", None}
        The final norm's kind: ``LlamaRMSNorm``'s code, one keeping an fp32 normalised tensor
        (``norm_fp32_scale`` or ``norm_fp32_product``), or one whose frozen weight changes
        nothing counted (``nn.LayerNorm``'s kernel keeps its input and statistics for the
        input's gradient).
    head_input : bool
        ``lm_head``'s input is counted (``output_input``).
    width : int
        Bytes per element of the compute dtype [bytes].

    Examples
    --------
    Llama under ``nll`` in bf16, s = 128, b = 2, h = 256: the 16-bit normalised tensor and
    ``lm_head``'s input, 2 x 2 x 256 x 256 bytes:

    >>> from memsym.symbols import s, b
    >>> peft_frozen_output(s * b, 1, norm="llama", head_input=True).evaluate(s=128, b=2, h=256)
    -262144

    References
    ----------
    .. [hf-transformers-5-25] modeling_llama.py 62-67, 404, 471; modeling_gemma.py 73-78;
       modeling_olmo2.py 58-63 (transformers 5.25.0).
    .. [pytorch-autograd] torch 2.13.0 tools/autograd/derivatives.yaml (``mul.Tensor``, ``mm``).
    """
    w_norm = {"llama": sp.Integer(width), "fp32": sp.Integer(4), None: sp.Integer(0)}[norm]
    dropped = (w_norm + (width if head_input else 0)) * tok * h / sig
    return Term("frozen_output_layer", -dropped, "what the frozen final norm weight and lm_head "
                "do not keep: the norm's normalised tensor" + (" and lm_head's input"
                                                               if head_input else ""),
                _FROZEN_OUT, label="frozen output layer")


def peft_cached_casts(layers, targets, *, width: int = 2) -> Term:
    r"""Autocast's cached 16-bit casts of PEFT's adapter weights in a checkpointed forward [bytes].

    .. math:: n_L\, w\, r \sum_m (d_{in} + d_{out})

    Autocast caches the cast of an fp32 leaf that requires grad (``cached_cast``, on CUDA as on
    the CPU) until the outermost autocast context exits, at the end of the model's forward
    (Accelerate wraps the forward, loss included).  Without checkpointing each cast is kept by
    its GEMM and counted with the layer (``lora_weight_casts``); under gradient checkpointing
    no graph keeps them, but the cache holds the casts of every layer run so far: through the
    loss's forward (nll or TRL's chunked loss, inside the model's forward) all
    :math:`n_L` layers' (the recomputation in the backward enters and leaves its own autocast
    context per layer, whose casts the working set counts).

    Parameters
    ----------
    layers : int or sympy.Expr
        The adapted layers run before the loss [layers].
    targets : sequence of str
        The adapted matrices.
    width : int
        Bytes per element of the autocast dtype [bytes].

    Examples
    --------
    Two layers, q and v at r = 8, h = 256 (d_out = h): 2 x 2 x 8 x (256 + 256) x 2 bytes:

    >>> from memsym.symbols import r_lora
    >>> peft_cached_casts(2, ("q", "v")).evaluate(h=256, a=4, g=4, d_h=64, t=1, r_lora=8)
    32768

    References
    ----------
    .. [pytorch-autocast] torch 2.13.0 aten/src/ATen/autocast_mode.cpp ``cached_cast`` (fp32
       leaves that require grad), torch/amp/autocast_mode.py ``__exit__``
       (``clear_autocast_cache`` when the nesting reaches 0); torch/utils/checkpoint.py (the
       recomputation under the forward's autocast state).
    """
    # no adapted matrix (the experts' target parameters alone): nothing cached, as the expert
    # adapters reach the einsum reshaped (ParamWrapper, peft v0.20.0 lora/layer.py:2423-2431),
    # not as the leaves cached_cast caches (each call casts anew: checked on the CPU)
    casts = peft_lora_activations(targets, cast=True, width=width)["lora_weight_casts"].expr \
        if set(targets) & set(LORA_TARGETS) else sp.Integer(0)
    return Term("lora_cached_casts", layers * casts, "autocast's cache of the adapters' 16-bit "
                "weight casts, held until the model's forward returns (gradient checkpointing: "
                "kept by no graph)", Source("pytorch-autocast", "torch 2.13.0 aten/src/ATen/"
                "autocast_mode.cpp cached_cast; torch/amp/autocast_mode.py __exit__ "
                "(clear_autocast_cache at nesting 0)"), label="LoRA cached casts")


def peft_head_input_held(tok, sig, *, width: int = 2) -> Term:
    r"""The final norm's output through the loss's forward under PEFT [bytes].

    .. math:: \frac{w \tau h}{\sigma}

    A frozen ``lm_head`` saves no input (:func:`peft_frozen_output`), but the causal LM's
    forward holds it, ``hidden_states = outputs.last_hidden_state``, until it returns, the
    loss included (transformers 5.25.0 ``modeling_llama.py`` 459-475, the same in every
    ``*ForCausalLM``): the forward's peak, in the loss, still sees it.

    Parameters
    ----------
    tok : sympy.Expr
        Tokens of one micro-batch, :math:`\tau = sb/c` [tokens].
    sig : int or sympy.Expr
        The sequence-parallel divisor :math:`\sigma` [1].
    width : int
        Bytes per element of the compute dtype [bytes].

    Examples
    --------
    >>> from memsym.symbols import s, b
    >>> peft_head_input_held(s * b, 1).evaluate(s=128, b=2, h=256)
    131072

    References
    ----------
    .. [hf-transformers-5-25] ``models/llama/modeling_llama.py`` ``LlamaForCausalLM.forward``
       (lines 459-475).
    """
    return Term("head_input_held", width * tok * h / sig, "the final norm's output, which the "
                "causal LM's forward holds through the loss (a frozen lm_head saves none)",
                Source("hf-transformers-5-25", "models/llama/modeling_llama.py LlamaForCausalLM."
                       "forward (lines 459-475: hidden_states = outputs.last_hidden_state, "
                       "lm_head, then self.loss_function)"), label="lm_head input held")


def peft_expert_weights(names, *, param_width: int = 2, cast: bool = True,
                        width: int = 2) -> Term:
    r"""What PEFT's ``ParamWrapper`` on the fused experts keeps per MoE layer [bytes].

    .. math::

        \sum_{p} \Big(w_p\,E\,d^p_{in} d^p_{out} + [\text{cast}]\,w\,E\,r\,(d^p_{in}
        + d^p_{out})\Big),\quad p \in \{\text{gate\_up}: (h, 2 f_e),\ \text{down}:
        (f_e, h)\}

    Each forward ``_activate_lora`` computes the delta weight, ``einsum("o r e, e r i ->
    e i o", B, A) * scaling`` cast to the parameter's dtype, and registers ``W + delta`` as
    a parametrization of the experts' parameter under ``parametrize.cached()`` (peft v0.20.0
    src/peft/tuners/lora/layer.py:2400-2465, 2221-2224): the experts' ``grouped_mm`` saves
    that merged weight, a new tensor of the parameter's shape [E, in, out] and dtype
    :math:`w_p`, for its input gradient, once per layer and micro-batch, whatever the tokens
    (the delta itself is freed when the forward leaves the context; ``W + delta`` saves
    nothing).  Under autocast PEFT's fp32 adapters enter the einsum's ``bmm`` as 16-bit
    copies, which it saves: :math:`w\,E\,r\,(d_{in} + d_{out})` each (none when the
    adapters are already the compute dtype, DeepSpeed's cast).  An MoE layer's term only: a
    dense layer's MLP and the shared expert(s) beside the routed ones are frozen
    ``nn.Linear`` modules no ``target_parameters`` name reaches, so they keep what they kept
    without it.  Measured with saved-tensor hooks on transformers 5.25.0's Qwen3-MoE and on
    types with shared experts and dense layers (Qwen2-MoE, GLM-4-MoE, Ernie-4.5-MoE,
    Hunyuan-MoE among them; ``tests/test_peft_expert_params.py``).
    Not counted (no phase of memsym's is inside a layer): the delta weights themselves,
    :math:`\sum_p w_p E d^p_{in} d^p_{out}` alive through the experts' forward beside the
    merged ones, and in the backward the merged weight's gradient and its scaled copy
    (``MulBackward``), :math:`2 w E d_{in} d_{out}` a parameter at a time.

    Parameters
    ----------
    names : iterable of str
        The adapted expert parameters, from ``("gate_up", "down")``.
    param_width : int
        Bytes per element of the loaded parameters, :math:`w_p` [bytes].
    cast : bool
        Autocast casts PEFT's fp32 adapters to the compute dtype.
    width : int
        Bytes per element of the compute dtype, :math:`w` [bytes].

    Examples
    --------
    >>> peft_expert_weights(("gate_up", "down")).evaluate(E=8, h=64, f_e=48, r_lora=4)
    164864

    References
    ----------
    .. [peft] v0.20.0 src/peft/tuners/lora/layer.py:2193-2224, 2236-2465 (ParamWrapper).
    """
    shapes = {"gate_up": (h, 2 * f_e), "down": (f_e, h)}
    chosen = [shapes[p] for p in names]
    merged = sum((param_width * E * i * o for i, o in chosen), sp.Integer(0))
    casts = sum((width * E * r_lora * (i + o) for i, o in chosen), sp.Integer(0)) if cast else 0
    return Term("peft_expert_weights", merged + casts, "PEFT's merged expert weights W + "
                "delta that grouped_mm saves (and the adapters' 16-bit casts the einsum saves)",
                Source("peft", "v0.20.0 src/peft/tuners/lora/layer.py:2400-2465 "
                       "(ParamWrapper.get_delta_weight, _activate_lora), 2221-2224 "
                       "(_LoraParameterProxy.forward: W + delta_weight)"),
                label="PEFT merged expert weights")
