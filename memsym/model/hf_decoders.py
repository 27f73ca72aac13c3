"""The Llama-like ``config.json`` families: one reader for the decoders that spell their sizes as
Llama does (and differ in biases, norms and built-in MoE blocks), and Llama 4's interleaved MoE.

Each reader returns :class:`~memsym.model.architecture.Architecture` keyword arguments read with
the defaults of transformers' config class and the modules its ``modeling_<type>.py`` builds
(transformers 5.24.0), so that the parameter count equals ``sum(p.numel())`` of
``AutoModelForCausalLM.from_config``.  :func:`memsym.model.hf_config.from_hf_config` dispatches
here.
"""

from __future__ import annotations

from .hf_fields import ConfigFields

__all__ = ["DECODER_DEFAULTS", "decoder_fields", "read_llama_like", "read_llama4"]


# model_type -> the config class's defaults that matter when the file omits the field:
# (tie_word_embeddings, num_key_value_heads (None: = num_attention_heads), head_dim (None: h/a),
#  max_position_embeddings).  REF: transformers 5.24.0 models/<type>/configuration_<type>.py,
# the dataclass field defaults and __post_init__.
DECODER_DEFAULTS = {
    "llama": (False, None, None, 2048),
    "mistral": (False, 8, None, 131072),
    "mixtral": (False, 8, None, 131072),
    "qwen2": (False, 32, None, 32768),
    "qwen3": (False, 32, 128, 32768),
    "qwen2_moe": (False, 16, None, 32768),
    "qwen3_moe": (False, 4, None, 32768),
    "deepseek_v2": (False, None, None, 2048),
    "deepseek_v3": (False, None, None, 4096),
    "gpt_oss": (False, 8, 64, 131072),
    "gpt2": (True, None, None, 1024),
    "gpt_neox": (False, None, None, 2048),
    "gemma": (True, 16, 256, 8192),
    "gemma2": (True, 4, 256, 8192),
    "gemma3_text": (True, 4, 256, 131072),
    "phi3": (False, None, None, 4096),
    "phimoe": (False, 8, None, 131072),
    "olmo": (False, None, None, 2048),
    "olmo2": (False, None, None, 2048),
    "gptj": (False, None, None, 2048),
    "falcon": (True, None, None, 2048),
    "bloom": (True, None, None, None),
    "starcoder2": (True, 2, None, 4096),
    "cohere": (True, None, None, 8192),
    "granite": (False, None, None, 2048),
    "granitemoe": (False, None, None, 2048),
    # the newer families (issue 32)
    "llama4_text": (False, 8, 128, 131072),
    "olmoe": (False, None, None, 4096),
    "smollm3": (True, 4, None, 32768),
    "glm4": (False, 2, 128, 131072),
    "glm4_moe": (False, 8, None, 131072),
    "ernie4_5": (True, 2, 128, 131072),
    "ernie4_5_moe": (True, 4, None, 131072),
    "seed_oss": (False, 8, 128, 524288),
    "exaone4": (False, 32, None, 2048),
    "hunyuan_v1_dense": (False, None, None, 2048),
    "apertus": (False, None, None, 65536),
    "arcee": (False, None, None, 4096),
    "dots1": (False, 32, None, 2048),
    "olmo3": (False, None, None, 2048),
    "cohere2": (True, None, None, 8192),
    # CohereCompassTextConfig (configuration_cohere_compass.py:86-110, :112-117)
    "cohere_compass_text": (True, None, None, 8192),
    "ctrl": (True, None, None, 256),          # CTRLConfig (configuration_ctrl.py:52-66)
    "ministral": (False, 8, None, 131072),
    "ministral3": (False, 8, 128, 262144),
    "helium": (False, 20, 128, 4096),
    "glm": (False, 2, 128, 131072),
    "cwm": (False, 8, 128, 131072),
    "vaultgemma": (True, 4, 256, 8192),
    "hunyuan_v1_moe": (False, None, None, 2048),
    "flex_olmo": (False, None, None, 4096),
    "minimax_m2": (False, 8, 128, 196608),
    "granitemoeshared": (False, None, None, 2048),
    "nemotron": (False, None, None, 4096),
    "phi": (False, None, None, 2048),
    "stablelm": (False, 32, None, 4096),
    "gpt_bigcode": (True, None, None, 1024),
    "glm4_moe_lite": (False, 20, None, 202752),
    "exaone": (False, 8, None, 4096),
    "internlm3": (False, 2, 128, 32768),
    "deepseek_v32": (False, None, None, 163840),
    "dbrx": (False, 1, None, 2048),
    "exaone_moe": (False, 32, None, 2048),
    "glm_moe_dsa": (False, None, None, 202752),
    # the classic families of transformers 5.25.0 (issue 32): OPTConfig, GPTNeoConfig,
    # CodeGenConfig (n_positions), MptConfig (max_seq_len), PersimmonConfig
    "opt": (True, None, None, 2048),
    "gpt_neo": (True, None, None, 2048),
    "codegen": (False, None, None, 2048),
    "mpt": (True, None, None, 2048),
    "persimmon": (False, None, None, 16384),
    # and its MoE / MLA families: Cohere2MoeConfig, AfmoeConfig, MiniCPM3Config,
    # SolarOpenConfig
    "cohere2_moe": (True, None, 128, 8192),
    "afmoe": (False, None, 128, 16384),
    "minicpm3": (True, None, None, 32768),
    "solar_open": (False, 8, 128, 131072),
    # GraniteSWAConfig, GraniteMoeSWAConfig (Granite Swash), IQuestCoderConfig (a LlamaConfig:
    # AutoModelForCausalLM builds LlamaForCausalLM of it)
    "granite_swa": (True, 4, None, 8192),
    "granitemoe_swa": (False, None, None, 2048),
    "iquestcoder": (False, 8, 128, 131072),
    # Jais2Config, NanoChatConfig, YoutuConfig
    "jais2": (False, None, None, 8192),
    "nanochat": (False, None, None, 2048),
    "youtu": (True, None, None, 131072),
    # AriaTextConfig (rhymes-ai/Aria's language model)
    "aria_text": (False, None, None, 2048),
    # XGLMConfig, BioGptConfig (transformers 5.25.0): both tie lm_head to the embedding
    "xglm": (True, None, None, 2048),
    "biogpt": (True, None, None, 1024),
    # Gemma4TextConfig (transformers 5.25.0): read by memsym.model.hf_gemma4
    "gemma4_text": (True, 4, 256, 131072),
    # Gemma4UnifiedTextConfig (modular_gemma4_unified.py:457-459)
    "gemma4_unified_text": (True, 4, 256, 262144),
    # Emu3TextConfig (configuration_emu3.py:105-118, transformers 5.25.0): an emu3 file's
    # language model, and the config Emu3ForCausalLM saves
    "emu3_text_model": (False, 8, None, 9216),
    # Param2MoeConfig, SarvamMoEConfig (Glm4MoeForCausalLM of them) and SarvamMLAConfig
    # (DeepseekV3ForCausalLM of it), transformers 5.25.0
    "param2moe": (True, 8, 64, 32768),
    "sarvam_moe": (False, 4, 64, 131072),
    "sarvam_mla": (False, None, None, 4096),
    # HYV3Config (Hy3)
    "hy_v3": (False, 8, 128, 131072),
    # MiniCPM5MoeConfig (head_dim null: h // a; num_key_value_heads null: a)
    "minicpm5_moe": (False, 2, 128, 524288),
    # MellumConfig (Mellum2)
    "mellum": (False, 4, 128, 131072),
    # Kolibri1Config (Kolibri 1)
    "kolibri1": (False, 4, 128, 262144),
    # HyperCLOVAXConfig (head_dim null: h // a; num_key_value_heads null: a)
    "hyperclovax": (False, None, None, 2048),
    # Apertus1p5TextConfig (Apertus 1.5's language model; num_key_value_heads null: a)
    "apertus1p5_text": (False, None, None, 65536),
    # FlintConfig
    "flint": (False, 4, 128, 262144),
}
# model_type of a vision-language file -> (the model_type of its text_config, the text config
# class's defaults of the core sizes, which the released files omit).  REF: transformers 5.24.0


def decoder_fields(fields: ConfigFields, mtype: str, gated: bool = True, norm: str = "RMSNorm") -> dict:
    """The Architecture keyword arguments every Llama-like config spells the same way.

    The core sizes (layers, hidden size, heads, MLP size, vocabulary) are required; the KV
    heads, head dim and positions default as ``DECODER_DEFAULTS[mtype]`` says.

    Examples
    --------
    >>> c = ConfigFields({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...                   "intermediate_size": 96, "vocab_size": 128}, "config.json")
    >>> kw = decoder_fields(c, "mistral")
    >>> kw["num_query_groups"], kw["max_position_embeddings"]
    (8, 131072)
    """
    c = fields
    _, kv_default, hd_default, pos_default = DECODER_DEFAULTS[mtype]
    heads = c.int("num_attention_heads")
    # ExaoneConfig.attribute_map: num_layers -> num_hidden_layers (EXAONE 3.x files spell it so)
    layers = ("num_hidden_layers", "num_layers") if mtype == "exaone" else "num_hidden_layers"
    return dict(num_layers=c.int(layers), hidden_size=c.int("hidden_size"),
                num_attention_heads=heads,
                num_query_groups=c.int("num_key_value_heads",
                                       heads if kv_default is None else kv_default, null=heads),
                # modeling: getattr(config, "head_dim", h // a); a null head_dim is h // a too
                kv_channels=c.int("head_dim", hd_default, null=None),
                ffn_hidden_size=c.int("intermediate_size"), swiglu=gated, normalization=norm,
                vocab_size=c.int("vocab_size"), position_embedding_type="rope",
                max_position_embeddings=c.int("max_position_embeddings", pos_default),
                add_bias_linear=False)


def read_llama_like(fields: ConfigFields, mtype: str, notes: list) -> dict:
    """The Llama-like families' Architecture keyword arguments: the shared sizes, then each
    type's biases, its norms and MLP variants, and its built-in MoE block.

    Parameters
    ----------
    fields : ConfigFields
        The parsed config.json.
    mtype : str
        Its ``model_type``, a key of :data:`DECODER_DEFAULTS`.
    notes : list
        Where what transformers builds differently from the file is said (appended to).

    Returns
    -------
    dict
        :class:`~memsym.model.architecture.Architecture` keyword arguments.

    References
    ----------
    transformers ``models/<model_type>/{configuration,modeling}_<model_type>.py`` (5.24.0;
    5.25.0 for the types of ``tests/test_hf_more_types.py``), the attention, MLP and decoder
    layer ``__init__`` (hf-transformers-5).

    Examples
    --------
    >>> c = ConfigFields({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...                   "intermediate_size": 96, "vocab_size": 128}, "config.json")
    >>> kw = read_llama_like(c, "olmo3", [])
    >>> kw["qk_layernorm"], kw["qk_norm_width"], kw["attention_bias"]
    (True, 'full', False)
    """
    c = fields
    kw = decoder_fields(c, mtype)
    _biases(c, mtype, kw)
    _norms_and_mlp(c, mtype, kw)
    _builtin_moe(c, mtype, kw)
    return kw


#: model_type -> the bias switches its attention and MLP modules read: Architecture field ->
#: (the config field, or its aliases, and transformers' default), or a constant.  Types not
#: listed (mistral, mixtral, phi3, exaone4, ministral, ministral3, minimax_m2) build every
#: projection with bias=False whatever the file says.
_LLAMA_BIASES = {"attention_bias": ("attention_bias", False),
                 "add_bias_linear": ("mlp_bias", False)}
_BIASES = {
    # LlamaAttention / GraniteAttention / SmolLM3Attention / ArceeAttention: q, k, v, o with
    # bias=config.attention_bias; their MLPs' projections with bias=config.mlp_bias.
    # AutoModelForCausalLM builds LlamaForCausalLM of ExaoneConfig / InternLM3Config
    # (InternLM3Config.attribute_map: qkv_bias -> attention_bias, bias -> mlp_bias);
    # Emu3Attention / Emu3MLP alike (modeling_emu3.py:144-155, :226-228), the config's
    # attention_bias and mlp_bias False unless the file sets them (configuration_emu3.py:114-115)
    **dict.fromkeys(("llama", "granite", "smollm3", "arcee", "exaone", "granite_swa",
                     "iquestcoder", "hyperclovax", "emu3_text_model"), _LLAMA_BIASES),
    "internlm3": {"attention_bias": (("attention_bias", "qkv_bias"), False),
                  "add_bias_linear": (("mlp_bias", "bias"), False)},
    # q, k, v, o bias=config.attention_bias; the MLP / experts never biased
    **dict.fromkeys(("qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text", "olmo", "olmo2",
                     "cohere", "phimoe", "granitemoe", "olmoe", "hunyuan_v1_dense", "apertus",
                     "apertus1p5_text",
                     "olmo3", "cohere2", "vaultgemma", "hunyuan_v1_moe", "flex_olmo",
                     "granitemoeshared", "granitemoe_swa"),
                    {"attention_bias": ("attention_bias", False)}),
    "qwen2": {"add_qkv_bias": True},     # Qwen2Attention: q, k, v with bias=True, o without
    "qwen2_moe": {"add_qkv_bias": ("qkv_bias", True)},
    # Glm4Attention / GlmAttention: q, k, v with bias=config.attention_bias (default True),
    # o_proj bias=False
    **dict.fromkeys(("glm4", "glm"), {"add_qkv_bias": ("attention_bias", True)}),
    # HeliumAttention: q, k, v bias=config.attention_bias, o_proj bias=False; HeliumMLP:
    # bias=config.mlp_bias
    "helium": {"add_qkv_bias": ("attention_bias", False), "attention_bias": False,
               "add_bias_linear": ("mlp_bias", False)},
    # CwmAttention: q, k, v, o bias=False; CwmMLP: bias=config.mlp_bias
    "cwm": {"attention_bias": False, "add_bias_linear": ("mlp_bias", False)},
    # Ernie4_5Attention q, k, v, o and Ernie4_5MLP gate, up, down: bias=config.use_bias
    "ernie4_5": {"add_bias_linear": ("use_bias", False)},
    # Jais2Attention q, k, v, o: bias=config.attention_bias; Jais2MLP up, down:
    # bias=config.mlp_bias (both default True)
    "jais2": {"attention_bias": ("attention_bias", True), "add_bias_linear": ("mlp_bias", True)},
    # NanoChatAttention q, k, v, o: bias=config.attention_bias; NanoChatMLP fc1, fc2 never
    "nanochat": {"attention_bias": ("attention_bias", False)},
}


def _biases(c: ConfigFields, mtype: str, kw: dict) -> None:
    for field_, read in _BIASES.get(mtype, {}).items():
        kw[field_] = read if isinstance(read, bool) else c.bool(*read)
    if mtype == "seed_oss":
        # SeedOssAttention: q, k, v bias=config.attention_bias, o bias=config.attention_out_bias;
        # SeedOssMLP: bias=config.mlp_bias
        qkv, out = c.bool("attention_bias", True), c.bool("attention_out_bias", False)
        if out and not qkv:
            raise c._bad("attention_out_bias true with attention_bias false (an output-projection "
                         "bias without q, k, v biases) is not modelled")
        kw.update(attention_bias=out, add_qkv_bias=qkv, add_bias_linear=c.bool("mlp_bias", False))


#: (model types, the Architecture fields their norms and MLPs fix), applied in order
_NORM_FLAGS = (
    # Qwen3 / Exaone4 / Apertus q_norm, k_norm and HunYuan's query_layernorm, key_layernorm:
    # an RMSNorm(head_dim) each on q and on k
    (("qwen3", "qwen3_moe", "exaone4", "hunyuan_v1_dense", "apertus", "hunyuan_v1_moe",
      "apertus1p5_text"),
     {"qk_layernorm": True}),
    # ArceeMLP / ApertusMLP: up_proj, act, down_proj (no gate)
    (("arcee", "apertus", "apertus1p5_text"), {"swiglu": False}),
    # input, post_attention, pre_feedforward and post_feedforward norms (Glm4DecoderLayer:
    # input, post_self_attn, post_attention and post_mlp)
    (("gemma2", "gemma3_text", "glm4"), {"norms_per_layer": 4}),
    # GemmaRMSNorm, Gemma2RMSNorm, Gemma3RMSNorm, VaultGemmaRMSNorm: output * (1.0 +
    # weight.float()) in fp32; HeliumRMSNorm: weight.to(torch.float32) * hidden_states
    (("gemma", "gemma2", "gemma3_text", "vaultgemma", "helium"), {"norm_fp32_scale": True}),
    # GptOssRMSNorm, Olmo2/Olmo3/FlexOlmoRMSNorm: (self.weight * hidden_states) in fp32,
    # then .to(input_dtype): the multiply keeps the fp32 normalised tensor (Q/K norms too)
    (("gpt_oss", "olmo2", "olmo3", "flex_olmo"), {"norm_fp32_product": True}),
    # Gemma3RMSNorm(head_dim) on q and on k, its output * (1.0 + weight.float()) in fp32
    (("gemma3_text",), {"qk_layernorm": True, "qk_norm_fp32_scale": True}),
    # OlmoLayerNorm: F.layer_norm(x, shape, None, None)
    (("olmo",), {"norm_affine": False, "normalization": "LayerNorm"}),
    # Olmo2RMSNorm / Olmo3RMSNorm / FlexOlmoRMSNorm / MiniMaxM2RMSNorm (a*d_h) on q and
    # (g*d_h) on k; OLMo's post_attention and post_feedforward norms (Olmo3's sliding-window
    # layers change no parameter)
    (("olmo2", "olmo3", "flex_olmo", "minimax_m2"),
     {"qk_layernorm": True, "qk_norm_width": "full"}),
    # CohereLayerNorm / Cohere2LayerNorm: a weight, no bias; one input norm feeding attention
    # and MLP in parallel
    (("cohere", "cohere2"), {"normalization": "LayerNorm", "norm_bias": False,
                             "norms_per_layer": 1, "parallel_attention": True}),
    # PhiMoE: nn.LayerNorm(elementwise_affine=True) norms
    (("phimoe",), {"normalization": "LayerNorm"}),
    # Jais2MLP (NemotronMLP): up_proj, relu2, down_proj (no gate); nn.LayerNorm norms
    (("jais2",), {"swiglu": False, "normalization": "LayerNorm"}),
    # NanoChatRMSNorm has no weight (input, post-attention, final, q_norm and k_norm);
    # NanoChatMLP: fc1, relu2, fc2 (no gate)
    (("nanochat",), {"swiglu": False, "norm_affine": False, "qk_layernorm": True}),
    # GraniteSWAAttention / GraniteMoeSWAAttention: a learned sink logit per head (sinks, an
    # nn.Parameter of a) in every layer, sliding or full
    (("granite_swa", "granitemoe_swa"), {"attention_sinks": True}),
)


def _norms_and_mlp(c: ConfigFields, mtype: str, kw: dict) -> None:
    for types, fields in _NORM_FLAGS:
        if mtype in types:
            kw.update(fields)
    if mtype in ("hunyuan_v1_dense", "hunyuan_v1_moe", "ministral") and kw["kv_channels"] is None:
        # HunYuanDenseV1Attention / HunYuanMoEV1Attention / MinistralAttention take
        # getattr(config, "head_dim", h // a), and the config class's head_dim is None, so
        # transformers 5.25.0 fails on its own defaults at self.head_dim**-0.5
        # (modeling_hunyuan_v1_dense.py:163, modeling_hunyuan_v1_moe.py:162,
        # modeling_ministral.py:147): nothing to count until the file gives it
        cls = {"hunyuan_v1_dense": "HunYuanDenseV1", "hunyuan_v1_moe": "HunYuanMoEV1"}.get(
            mtype, "Ministral")
        raise c._bad(f"missing field 'head_dim': transformers builds no model without it "
                     f"({cls}Config's default None fails in {cls}Attention); give head_dim")
    if mtype == "apertus1p5_text":
        # Apertus1p5TextForCausalLM's lm_head is h x (output_vocab_size or vocab_size), a prefix
        # of the vocabulary when set (modeling_apertus1p5.py:737, transformers 5.25.0)
        out_v = c.int("output_vocab_size", None, null=None)
        if out_v not in (None, kw["vocab_size"]):
            raise c._bad(f"output_vocab_size {out_v} below vocab_size {kw['vocab_size']} (an LM "
                         "head pruned to a prefix of the vocabulary, narrower than the "
                         "embedding) is not in memsym's Architecture")
    if mtype in ("apertus", "apertus1p5_text"):
        # ApertusMLP / Apertus1p5TextMLP replace the activation by XIELU (learned alpha_p,
        # alpha_n) iff hidden_act == "xielu"; every other ACT2FN activation has no parameter
        kw["xielu_activation"] = c.str("hidden_act", "xielu") == "xielu"
    if mtype == "olmoe":
        # OlmoeAttention: q_norm = RMSNorm(h), k_norm = RMSNorm((h // a) * g), which are a*d_h
        # and g*d_h only when d_h = h / a; OlmoeSparseMoeBlock in every layer: a router h x E
        # (no bias) and E gated experts of intermediate_size
        hs, heads = kw["hidden_size"], kw["num_attention_heads"]
        if kw["kv_channels"] not in (None, hs // heads) or hs % heads:
            raise c._bad("an OLMoE head_dim other than hidden_size / num_attention_heads is not "
                         "modelled (its q and k norms keep the hidden size)")
        kw.update(qk_layernorm=True, qk_norm_width="full", num_experts=c.int("num_experts", 64),
                  moe_router_topk=c.int("num_experts_per_tok", 8),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"], moe_router_bias=False)
    if mtype == "helium":
        hs, heads = kw["hidden_size"], kw["num_attention_heads"]
        if heads * (kw["kv_channels"] or hs // heads) != hs:
            # HeliumAttention's o_proj is h x h: it takes a*d_h inputs only when a*d_h = h
            raise c._bad("a Helium head_dim * num_attention_heads other than hidden_size is not "
                         "modelled (transformers' o_proj keeps the hidden size)")
    if mtype == "cohere" and c.bool("use_qk_norm", False):
        # use_qk_norm (Cohere only): CohereLayerNorm((a, d_h)) on q and ((g, d_h)) on k
        kw.update(qk_layernorm=True, qk_norm_width="full")
    if mtype == "hyperclovax":
        # HyperCLOVAXDecoderLayer: post_norm1 after attention and post_norm2 after the MLP, two
        # RMSNorms more beside input_layernorm and post_attention_layernorm iff use_post_norm
        # (else nn.Identity) (modeling_hyperclovax.py:272-281, transformers 5.25.0)
        kw["norms_per_layer"] = 4 if c.bool("use_post_norm", True) else 2
    if mtype == "phimoe":
        # lm_head bias=config.lm_head_bias
        kw["output_layer_bias"] = c.bool("lm_head_bias", False)


#: model_type -> (its expert-count field or aliases, their default, the top-k default) of the
#: types whose every layer is one MoE block: a router E x h (no bias; MiniMax-M2's
#: e_score_correction_bias is an nn.Buffer) and E gated experts of intermediate_size
#: (MixtralSparseMoeBlock, PhimoeSparseMoeBlock, GraniteMoeMoE, FlexOlmoSparseMoeBlock,
#: MiniMaxM2SparseMoeBlock); a null count or top-k reads as the default
_EVERY_LAYER_MOE = {
    "mixtral": ("num_local_experts", 8, 2),
    "phimoe": ("num_local_experts", 16, 2),
    "granitemoe": ("num_local_experts", 8, 2),
    "granitemoeshared": ("num_local_experts", 8, 2),
    "granitemoe_swa": ("num_local_experts", 8, 2),
    "flex_olmo": (("num_experts", "num_local_experts"), 7, 5),
    "minimax_m2": (("num_local_experts", "num_experts"), 256, 8),
}


def _builtin_moe(c: ConfigFields, mtype: str, kw: dict) -> None:
    if mtype in _EVERY_LAYER_MOE:
        keys, experts, topk = _EVERY_LAYER_MOE[mtype]
        kw.update(num_experts=c.int(keys, experts),
                  moe_router_topk=c.int("num_experts_per_tok", topk),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"], moe_router_bias=False)
    if mtype in ("granitemoeshared", "granitemoe_swa"):
        # GraniteMoeSharedDecoderLayer / GraniteMoeSWADecoderLayer: a gated shared_mlp
        # (input_linear h -> 2 f_sh, output_linear, no bias) beside the experts unless
        # shared_intermediate_size is 0
        kw["moe_shared_expert_intermediate_size"] = c.int(
            "shared_intermediate_size", 0, allow_zero=True) or None
    if mtype == "hunyuan_v1_moe":
        # HunYuanMoEV1Moe in every layer: a gate wg h x E (no bias), E gated experts and one
        # gated shared_mlp, all of intermediate_size; num_experts a number (HunYuanMoEV1Config
        # refuses a list), moe_topk a number or, as the published Hunyuan-A13B config writes
        # it, one per layer (HunYuanMoEV1Moe reads config.moe_topk[layer_idx]):
        # ConfigFields.layer_int takes a list of one repeated value
        kw.update(num_experts=c.int(("num_experts", "num_local_experts"), 1),
                  moe_router_topk=c.layer_int(("moe_topk", "num_experts_per_tok"), 1),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"],
                  moe_shared_expert_intermediate_size=kw["ffn_hidden_size"],
                  moe_router_bias=False)
    if mtype in ("qwen2_moe", "qwen3_moe"):
        n_layers = kw["num_layers"]
        n_exp = c.int("num_experts", 60 if mtype == "qwen2_moe" else 128)
        pattern = c.sparse_step_layers(n_layers)
        kw.update(num_experts=n_exp,
                  moe_router_topk=c.int("num_experts_per_tok", 4 if mtype == "qwen2_moe" else 8),
                  moe_ffn_hidden_size=c.int("moe_intermediate_size",
                                            1408 if mtype == "qwen2_moe" else 768),
                  moe_layer_freq=pattern, moe_router_bias=False)
        if mtype == "qwen2_moe":
            kw.update(moe_shared_expert_intermediate_size=c.int(
                "shared_expert_intermediate_size", 5632, allow_zero=True) or None,
                moe_shared_expert_gate=True)
    if mtype == "gpt_oss":
        kw.update(add_bias_linear=c.bool("attention_bias", True), attention_sinks=True,
                  num_experts=c.int("num_local_experts", 128),
                  moe_router_topk=c.int(("num_experts_per_tok", "experts_per_token"), 4),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"],
                  # GptOssExperts clamps gate (max) and up (both sides) at config.swiglu_limit
                  # (GptOssConfig default 7.0): kept where the gpt-oss-120b preset keeps it,
                  # which the time model reads (memsym.timing.gemm.shape_of expert_clamp)
                  # and the Bridge sets YaRN's factor 32.0 whatever the file says
                  # (gpt_oss_bridge.py:94), which runs RoPE eager (memsym.timing.rope)
                  extra={"swiglu_limit": c.positive("swiglu_limit", 7.0),
                         "yarn_rotary_scaling_factor": 32.0})


def read_llama4(fields: ConfigFields, mtype: str, notes: list) -> dict:
    """Llama 4's text model (``llama4_text``): dense and MoE layers interleaved.

    Parameters and result as :func:`read_llama_like`'s (``mtype`` is ``"llama4_text"``).

    Examples
    --------
    >>> c = ConfigFields({"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
    ...                   "intermediate_size": 32, "vocab_size": 128,
    ...                   "interleave_moe_layer_step": 2}, "config.json")
    >>> read_llama4(c, "llama4_text", [])["moe_layer_freq"]
    (0, 1, 0, 1)
    """
    c = fields
    # Llama4TextDecoderLayer: Llama4TextMoe iff layer_idx in config.moe_layers (default
    # range(step - 1, L, step), step = interleave_moe_layer_step), else Llama4TextMLP of
    # intermediate_size_mlp.  Llama4TextMoe: router h x E (no bias), E gated experts and one
    # gated shared expert, all of intermediate_size.  The q/k norm (Llama4TextL2Norm) has no
    # weight; no_rope_layers and attention_chunk_size change no parameter.
    kw = decoder_fields(c, mtype)
    n_layers, f_expert = kw["num_layers"], kw["ffn_hidden_size"]
    if c.data.get("moe_layers") is not None:
        listed = set(c.int_list("moe_layers"))
        pattern = tuple(int(i in listed) for i in range(n_layers))
    else:
        step = c.int("interleave_moe_layer_step", 1)
        pattern = tuple(int(i % step == step - 1) for i in range(n_layers))
    kw.update(attention_bias=c.bool("attention_bias", False),
              ffn_hidden_size=c.int("intermediate_size_mlp", 16384),
              num_experts=c.int("num_local_experts", 16),
              moe_router_topk=c.int("num_experts_per_tok", 1), moe_ffn_hidden_size=f_expert,
              moe_shared_expert_intermediate_size=f_expert, moe_layer_freq=pattern,
              moe_router_bias=False)
    return kw

