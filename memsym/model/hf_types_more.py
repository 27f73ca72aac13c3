"""More current ``config.json`` types of transformers 5.25.0 that memsym's Architecture expresses
(issue 32, item 4): Lara Mini (``lara_mini``: Qwen3.5's Gated DeltaNet beside Qwen3's attention,
sliding or full, and a MoE with an ungated shared expert in every layer) and Cohere Compass's
language model (``cohere_compass_text``: Command R7B's parallel block); CTRL (``ctrl``: GPT-2's
block with a ReLU FFN, sinusoidal positions and a biased, tied LM head) and Gemma 4 Unified's
language model (``gemma4_unified_text``: Gemma 4's text model without per-layer inputs or MoE);
Emu3's language model (``emu3_text_model``: Llama's layers; an ``emu3`` file's ``text_config``).

Each reader returns :class:`~memsym.model.architecture.Architecture` keyword arguments read with
the defaults of transformers' config class and the modules its ``modeling_<type>.py`` builds
(transformers 5.25.0), so that the parameter count equals ``sum(p.numel())`` of
``AutoModelForCausalLM.from_config`` (``tests/test_hf_types_more.py``).
:func:`memsym.model.hf_config.from_hf_config` dispatches here.
"""

from __future__ import annotations

from .hf_decoders import read_llama_like
from .hf_fields import ConfigFields
from .hf_gemma4 import read_gemma4
from .hf_hybrid import gdn_fields, layer_types_field

__all__ = ["MORE_LAYERED_READERS", "MORE_DECODER_READERS"]

# LaraMiniConfig.__post_init__'s released pattern, period 5 (configuration_lara_mini.py:119-128)
_LARA_PATTERN = ("linear_attention", "sliding_attention", "linear_attention", "full_attention",
                 "sliding_attention")
_LARA_KINDS = ("linear_attention", "sliding_attention", "full_attention")


def _lara_layer_types(c: ConfigFields, n_layers: int) -> list:
    """Lara Mini's per-layer kinds: the file's ``layer_types`` or the period-5 pattern."""
    if c.data.get("layer_types") is None:
        return [_LARA_PATTERN[i % len(_LARA_PATTERN)] for i in range(n_layers)]
    return layer_types_field(c, "layer_types", n_layers, _LARA_KINDS)


def _read_lara_mini(c: ConfigFields, notes: list) -> dict:
    # transformers 5.25.0 modeling_lara_mini.py: LaraMiniDecoderLayer (:907-917):
    # LaraMiniGatedDeltaNet iff layer_types[i] == "linear_attention" (Qwen3.5's mixer, :628-670:
    # in_proj_qkv h -> 2 hk dk + hv dv, in_proj_z h -> hv dv, in_proj_b and in_proj_a h -> hv,
    # a bias-free depthwise conv1d over 2 hk dk + hv dv, dt_bias and A_log of hv, a gated
    # RMSNorm of dv, out_proj hv dv -> h), else LaraMiniAttention (Qwen3's, :213-240: q, k, v,
    # o bias=config.attention_bias, q_norm and k_norm RMSNorm(head_dim), no output gate; its
    # sliding-window layers change no parameter, its full-attention layers take no RoPE); a
    # LaraMiniSparseMoeBlock in every layer (:890-903: a router E x h without bias, E gated
    # experts of moe_intermediate_size, a gated shared_expert of
    # shared_expert_intermediate_size added without a gate); input and post-attention
    # LaraMiniRMSNorm (HeliumRMSNorm: weight.to(float32) * x, q/k norms too).
    # LaraMiniConfig (configuration_lara_mini.py:84-116) has no intermediate_size: the experts'
    # width stands in for the (never built) dense MLP
    heads = c.int("num_attention_heads")
    moe_f = c.int("moe_intermediate_size", 512)
    kw = dict(num_layers=c.int("num_hidden_layers"), hidden_size=c.int("hidden_size"),
              num_attention_heads=heads,
              num_query_groups=c.int("num_key_value_heads", 4),
              kv_channels=c.int("head_dim", 128), ffn_hidden_size=moe_f, swiglu=True,
              normalization="RMSNorm", vocab_size=c.int("vocab_size"),
              position_embedding_type="rope",
              max_position_embeddings=c.int("max_position_embeddings", 131072),
              add_bias_linear=False, attention_bias=c.bool("attention_bias", False),
              qk_layernorm=True, qk_norm_fp32_scale=True, norm_fp32_scale=True)
    if heads % kw["num_query_groups"]:
        # LaraMiniConfig.validate_architecture refuses it: transformers builds no model
        raise c._bad("num_attention_heads must be a multiple of num_key_value_heads "
                     "(LaraMiniConfig refuses it otherwise)")
    kinds = _lara_layer_types(c, kw["num_layers"])
    kw.update(layer_mixers=tuple("gdn" if k == "linear_attention" else "attention"
                                 for k in kinds), **gdn_fields(c, 8, 16))
    n_exp = c.int("num_experts", 128)
    kw.update(num_experts=n_exp, moe_router_topk=c.int("num_experts_per_tok", 4),
              moe_ffn_hidden_size=moe_f,
              moe_shared_expert_intermediate_size=c.int("shared_expert_intermediate_size", 512,
                                                        allow_zero=True) or None,
              moe_layer_freq=(1,) * kw["num_layers"], moe_router_bias=False)
    notes.append("lara_mini's Gated DeltaNet activations take Qwen3-Next's derivation "
                 "(memsym/terms/gated_deltanet.py) and its router the generic count, not "
                 "measured in LaraMiniGatedDeltaNet / LaraMiniTopKRouter")
    return kw


def _read_cohere_compass_text(c: ConfigFields, mtype: str, notes: list) -> dict:
    # transformers 5.25.0 modeling_cohere_compass.py: CohereCompassDecoderLayer (:323-329) is
    # Cohere2's parallel block: one bias-free CohereCompassLayerNorm feeding CohereCompassAttention
    # (q, k, v, o bias=config.attention_bias, no q/k norm, :266-277; its sliding-window layers
    # change no parameter) and a gated CohereCompassMLP of intermediate_size without bias
    # (:155-157); tied by default.  CohereCompassTextConfig.__post_init__ sets head_dim to
    # hidden_size // num_attention_heads (configuration_cohere_compass.py:117) before
    # PreTrainedConfig.__post_init__ sets the file's own head_dim, which wins; a null
    # num_key_value_heads reads as num_attention_heads
    n_layers = c.int("num_hidden_layers")
    kinds = c.data.get("layer_types") or ["full_attention"] * n_layers
    rope = c.data.get("rope_parameters")
    if not isinstance(kinds, list) or len(kinds) != n_layers or any(
            k not in ("full_attention", "sliding_attention") for k in kinds):
        raise c._bad(f"field 'layer_types' must list {n_layers} layer types, each one of "
                     "full_attention, sliding_attention")
    if not isinstance(rope, dict) or any(k not in rope for k in set(kinds)):
        # CohereCompassRotaryEmbedding reads config.rope_parameters[layer_type] for each layer
        # type (modeling_cohere_compass.py:79-80): transformers builds no model without them
        raise c._bad("a cohere_compass_text config needs 'rope_parameters' keyed by layer type "
                     f"({', '.join(sorted(set(kinds)))}): transformers' "
                     "CohereCompassRotaryEmbedding reads one entry per layer type")
    return read_llama_like(c, "cohere2", notes)


def _read_ctrl(c: ConfigFields, mtype: str, notes: list) -> dict:
    # transformers 5.25.0 modeling_ctrl.py: CTRLModel: the word embedding w (V x h, scaled by
    # sqrt(h)) plus a sinusoidal pos_encoding buffer (no parameter, :230); EncoderLayer
    # (:155-166): MultiHeadAttention Wq, Wk, Wv, dense h -> h each with bias (:107-111), the
    # ungated point-wise FFN Linear(h, dff) -> ReLU -> Linear(dff, h) with biases (:151-152),
    # layernorm1, layernorm2 nn.LayerNorm(h); a final nn.LayerNorm; CTRLLMHeadModel.lm_head
    # nn.Linear(h, V, bias=True) (:354), its weight tied to w by default
    hs = c.int(("n_embd", "hidden_size"))
    heads = c.int(("n_head", "num_attention_heads"))
    if hs % heads:
        raise c._bad("n_embd must be a multiple of n_head (CTRL's MultiHeadAttention splits "
                     "the hidden size into the heads)")
    notes.append("ctrl's sinusoidal position encoding is a buffer, not a parameter: not counted")
    return dict(num_layers=c.int(("n_layer", "num_hidden_layers")), hidden_size=hs,
                num_attention_heads=heads, ffn_hidden_size=c.int("dff", 8192),
                vocab_size=c.int("vocab_size"), position_embedding_type="none",
                max_position_embeddings=c.int(("n_positions", "max_position_embeddings"), 256),
                add_bias_linear=True, swiglu=False, normalization="LayerNorm",
                output_layer_bias=True, extra={"hf_activation": "relu"})


def _read_gemma4_unified_text(c: ConfigFields, mtype: str, notes: list) -> dict:
    # transformers 5.25.0 modular_gemma4_unified.py: Gemma4UnifiedTextConfig is
    # Gemma4TextConfig without per-layer input embeddings or the MoE block (its
    # hidden_size_per_layer_input, vocab_size_per_layer_input, enable_moe_block, num_experts,
    # top_k_experts and moe_intermediate_size are AttributeError(), :462-467) and with
    # sliding_window 1024, max_position_embeddings 262144 (:457-459); its decoder layer is
    # Gemma 4's attention and MLP in Gemma 2's four-norm layer (:581-587: layer_scalar a
    # buffer); Gemma4UnifiedTextModel builds no per-layer input embedding (:649-658).  Read
    # as Gemma 4's text model with those fields fixed
    fixed = {"hidden_size_per_layer_input": 0, "enable_moe_block": False}
    dropped = sorted(k for k in ("hidden_size_per_layer_input", "vocab_size_per_layer_input",
                                 "enable_moe_block", "num_experts", "top_k_experts",
                                 "moe_intermediate_size") if c.data.get(k) not in (None, 0, False))
    if dropped:
        notes.append(f"{', '.join(dropped)} not read: Gemma4UnifiedTextConfig has none "
                     "(transformers' Gemma4UnifiedForCausalLM builds no per-layer input "
                     "embedding or MoE block)")
    data = {"sliding_window": 1024, "max_position_embeddings": 262144, **c.data, **fixed}
    return read_gemma4(ConfigFields(data, c.where), "gemma4_text", notes)


def _read_emu3_text_model(c: ConfigFields, mtype: str, notes: list) -> dict:
    # transformers 5.25.0 modeling_emu3.py: Emu3TextModel (:1176-1190) is Llama's: an
    # embedding, Emu3DecoderLayer (:236-246: Emu3Attention q, k, v, o bias=attention_bias,
    # head_dim = getattr(config, "head_dim", h // a), :138-155; the gated Emu3MLP
    # bias=mlp_bias, :226-228; input and post-attention Emu3RMSNorm, weight * x), a final
    # norm; Emu3ForCausalLM.lm_head (:1264).  Emu3TextConfig has no head_dim field and
    # num_key_value_heads may be None (configuration_emu3.py:105): either null in the file
    # reaches Emu3Attention as None, which fails (head_dim ** -0.5, heads // None)
    for key in ("head_dim", "num_key_value_heads"):
        if key in c.data and c.data[key] is None:
            raise c._bad(f"{key} null in an emu3 text config: transformers builds no model of "
                         "it (Emu3Attention computes with the None); give a number or leave "
                         "the field out")
    return read_llama_like(c, mtype, notes)


# model_type -> (reader (c, notes), tie_word_embeddings default, the dropout probabilities its
# causal LM applies with their defaults): LaraMiniConfig tie_word_embeddings True,
# attention_dropout 0.0 (configuration_lara_mini.py:95, :98)
MORE_LAYERED_READERS = {"lara_mini": (_read_lara_mini, True, {"attention_dropout": 0.0})}
"""model_type -> (reader, tie default, dropout) of the layered types read here."""

MORE_DECODER_READERS = {"cohere_compass_text": _read_cohere_compass_text, "ctrl": _read_ctrl,
                        "gemma4_unified_text": _read_gemma4_unified_text,
                        "emu3_text_model": _read_emu3_text_model}
"""model_type -> its reader ``(c, mtype, notes)`` (rows in DECODER_DEFAULTS)."""
