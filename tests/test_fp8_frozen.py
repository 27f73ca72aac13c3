"""Transformer Engine's FP8 / NVFP4 weight copies of a frozen LoRA base and of the MTP layers.

Frozen base (issue 30).  Megatron-Bridge's LoRA only sets ``requires_grad = False`` on the
base (peft/base.py:176-193 at 067f987df0) and runs it through its own TE module
(adapter_wrapper.py:171, ``self.to_wrap(x)``).  TE's ``Linear`` asks for the weight's
columnwise copy (the transpose under per-tensor scaling) whenever the GEMM's *input* needs a
gradient, ``is_grad_enabled and inp.requires_grad`` (module/linear.py:467-475 at d0067d0da6),
since dgrad reads the weight whether or not the weight itself is trained;
``LayerNormLinear`` whenever grad is enabled (layernorm_linear.py:345-348) and
``GroupedLinear`` as ``Linear`` (grouped_linear.py:715-729).  The cast is cached in
``_fp8_workspaces`` whenever ``is_first_microbatch`` is given (linear.py:1958-1961,
2068-2071), which Megatron-core's wrappers pass unless ``disable_parameter_transpose_cache``
(extensions/transformer_engine.py:1338-1345 at d98e8a64dd) and set under fp8 or fp4
(transformer/module.py:114-125).  So each frozen linear weight keeps the trained weight's two
copies: 1 + 1 bytes under delayed/tensorwise scaling, 2 (1 + 1/32) under MXFP8 and
2 (1/2 + 1/16) under NVFP4.

FP8 parameters (issue 30).  Under ``--fp8-param-gather`` (Bridge's ``fp8_param_gather``, which
sets ``fp8_param``) or ``--fp4-param-gather`` the frozen linear weights are built as FP8 /
NVFP4 parameters (``fp8_model_init``, fp8_utils.py:848 at d98e8a64dd): TE quantizes each at
init with ``quantizer.set_usage(rowwise=True, columnwise=torch.is_grad_enabled())``
(module/base.py:1835-1864 at d0067d0da6) and the forward uses the parameter itself
(``quantize_weight``, base.py:836-845), so the same two copies and no cache, and no 16-bit copy
of the linear weights: only the embedding, output layer and norms stay 16-bit, as in a full
fine-tune over FP8 parameters.

MTP.  ``MultiTokenPredictionLayer`` enters ``get_fp8_context`` around ``eh_proj`` and its
transformer layer when ``config.fp8`` and ``nullcontext()`` otherwise ("currently ignoring FP4
in MTP layers", multi_token_prediction.py:1385-1402 at d98e8a64dd), and builds its layers under
``get_fp8_context(config, is_init=True)`` (1927-1929: ``fp8_model_init`` under
``--fp8-param-gather``, since ``need_fp8_context = config.fp8_param``, fp8_utils.py:848).  So
under FP8 the MTP layers' linear weights get the decoder's copies (or are FP8 parameters); under
FP4 they stay bf16, no NVFP4 copy.

Every number below is counted by hand from the architecture.
"""

from __future__ import annotations

import pytest
import sympy as sp

from memsym.job import Layout, Training
from memsym.model import Architecture
from memsym.training import training_memory
from memsym.training.model_states import state_terms, state_training

# Meta-Llama-3-8B config.json: hidden_size 4096, intermediate_size 14336,
# num_attention_heads 32, num_key_value_heads 8 (head_dim 128), num_hidden_layers 32
H8, F8, A8, G8, L8 = 4096, 14336, 32, 8, 32
# q and o (h x h), k and v (h x g d_h), gate, up and down (h x f): the decoder's linear weights
LLAMA3_LINEAR = L8 * (2 * H8 * H8 + 2 * H8 * G8 * (H8 // A8) + 3 * H8 * F8)


def _grouped(model, layout, **kw):
    training = Training(seq_length=2048, micro_batch_size=1, global_batch_size=8, **kw)
    return training_memory(model, layout, training).grouped()


def test_llama3_8b_hand_count():
    # 32 (2 * 4096^2 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert LLAMA3_LINEAR == 6979321856


@pytest.mark.parametrize("kw, width", [
    (dict(precision="fp8"), 2),                                       # rowwise + transpose
    (dict(precision="fp8", fp8_recipe="tensorwise"), 2),
    (dict(precision="fp8", fp8_recipe="mxfp8"), 2 * (1 + sp.Rational(1, 32))),
    (dict(precision="fp4"), 2 * (sp.Rational(1, 2) + sp.Rational(1, 16))),
])
def test_megatron_lora_keeps_the_frozen_base_copies(kw, width):
    # Llama-3 8B, LoRA on every matrix, t = 2: each GPU holds half of every linear weight and
    # TE keeps its rowwise and columnwise casts, as for a trained weight
    g = _grouped("llama3-8b", Layout(t=2, d=4), finetune="lora", lora_rank=16, **kw)
    assert g["fp8_weights"] == width * sp.Integer(LLAMA3_LINEAR) / 2
    # the same bytes as a full fine-tune's copies: one mechanism
    assert _grouped("llama3-8b", Layout(t=2, d=4), **kw)["fp8_weights"] == g["fp8_weights"]


def test_bf16_lora_has_no_copies_and_the_base_is_unchanged():
    bf16 = _grouped("llama3-8b", Layout(t=2, d=4), finetune="lora", lora_rank=16)
    fp8 = _grouped("llama3-8b", Layout(t=2, d=4), finetune="lora", lora_rank=16,
                   precision="fp8")
    assert "fp8_weights" not in bf16
    # the bf16 base, 2 bytes a weight over t = 2: the linear layers, and in the same row the
    # embedding and output layer (V h each, split over t) and the 2L + 1 norms (whole)
    assert fp8["weights"] == bf16["weights"] == \
        LLAMA3_LINEAR + 2 * (2 * V8 * H8 // 2 + (2 * L8 + 1) * H8)
    assert "weights_unquantized" not in bf16 and "weights_unquantized" not in fp8


def test_frozen_copies_cite_the_usage_rule():
    training = Training(finetune="lora", lora_rank=16, precision="fp8")
    term = {t.key: t for t in state_terms(False, state_training(training))}["fp8_weights"]
    assert term.source.key == "transformer-engine"
    assert term.source.locator.startswith("pytorch/module/linear.py:467-475")


# a tiny gated model without biases, so that every TP-split weight is a GEMM weight:
# h = 64, 4 heads of 16, 2 KV groups, f = 128, 2 layers and one MTP layer
H, A, G, D, F = 64, 4, 2, 16, 128
TINY = Architecture(num_layers=2, hidden_size=H, num_attention_heads=A, num_query_groups=G,
                    ffn_hidden_size=F, vocab_size=1000, position_embedding_type="rope",
                    max_position_embeddings=2048, mtp_num_layers=1, add_bias_linear=False,
                    swiglu=True, normalization="RMSNorm")
LAYER = A * D * H + 2 * G * D * H + A * D * H + 2 * H * F + F * H   # q, k v, o, gate up, down
EH_PROJ = 2 * H * H                                                  # the MTP's 2h -> h


def test_tiny_hand_counts():
    assert (LAYER, EH_PROJ) == (36864, 8192)


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_fp8_mtp_layers_get_copies(finetune):
    # 2 decoder layers and the MTP layer (its block and eh_proj), 2 bytes each weight
    lora = dict(finetune="lora", lora_rank=4) if finetune == "lora" else {}
    g = _grouped(TINY, Layout(), precision="fp8", **lora)
    assert g["fp8_weights"] == 2 * (2 * LAYER + LAYER + EH_PROJ)
    # halved per GPU at t = 2
    g2 = _grouped(TINY, Layout(t=2), precision="fp8", **lora)
    assert g2["fp8_weights"] == (2 * LAYER + LAYER + EH_PROJ)


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_fp4_mtp_layers_stay_bf16(finetune):
    # NVFP4 copies of the decoder layers only: (1/2 + 1/16) x 2 bytes
    lora = dict(finetune="lora", lora_rank=4) if finetune == "lora" else {}
    g = _grouped(TINY, Layout(), precision="fp4", **lora)
    assert g["fp8_weights"] == sp.Rational(9, 8) * 2 * LAYER


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_fp8_param_gather_makes_the_mtp_weights_fp8(finetune):
    # fp8_model_init over the MTP layers too: their linear weights are FP8 parameters (1 byte
    # and, with no GPU given (TN-only), the 1-byte transpose made after each gather, or at
    # init with the columnwise usage when frozen), out of the 16-bit weights; the rest
    # (embedding padded to 1024 rows, norms) stays 2 bytes, frozen or not
    lora = dict(finetune="lora", lora_rank=4) if finetune == "lora" else {}
    g = _grouped(TINY, Layout(), precision="fp8", fp8_param_gather=True, **lora)
    assert g["fp8_weights"] == 2 * (2 * LAYER + LAYER + EH_PROJ)
    norms = 2 * 2 * H + 3 * H + 2 * H + H   # 2 per layer, the MTP's 3 and its block's 2, final
    assert g["weights"] == 2 * (1024 * H + norms)


# Meta-Llama-3-8B's other weights: vocabulary 128256 (embedding and untied output layer, each
# split over t) and 2 RMSNorms per layer plus the final one
V8 = 128256


@pytest.mark.parametrize("kw, width", [
    (dict(precision="fp8", fp8_param_gather=True), 2),                  # rowwise + transpose
    (dict(precision="fp8", fp8_recipe="tensorwise", fp8_param_gather=True), 2),
    (dict(precision="fp8", fp8_recipe="mxfp8", fp8_param_gather=True),
     2 * (1 + sp.Rational(1, 32))),
    (dict(precision="fp4", fp4_param_gather=True), 2 * (sp.Rational(1, 2) + sp.Rational(1, 16))),
])
def test_megatron_lora_over_quantized_parameters(kw, width):
    # Llama-3 8B, LoRA on every matrix, t = 2, the linear weights FP8 / NVFP4 parameters
    # (fp8_param, fp4_param): each GPU holds half of every linear weight, rowwise and
    # columnwise as built under fp8_model_init, and no 16-bit copy of it
    g = _grouped("llama3-8b", Layout(t=2, d=4), finetune="lora", lora_rank=16, **kw)
    assert g["fp8_weights"] == width * sp.Integer(LLAMA3_LINEAR) / 2
    assert g["weights"] == 2 * (2 * V8 * H8 // 2 + (2 * L8 + 1) * H8)
    assert "weights_unquantized" not in g
    # the same model as a full fine-tune over FP8 / NVFP4 parameters builds
    full = _grouped("llama3-8b", Layout(t=2, d=4), **kw)
    assert (full["fp8_weights"], full["weights"]) == (g["fp8_weights"], g["weights"])
    # frozen: no gradient slot and no main copy; the adapters' states as over cached casts
    cached = {k: v for k, v in kw.items() if not k.endswith("param_gather")}
    cast = _grouped("llama3-8b", Layout(t=2, d=4), finetune="lora", lora_rank=16, **cached)
    for key in ("adapter_weights", "gradients", "optimizer"):
        assert g[key] == cast[key]
