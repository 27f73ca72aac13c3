"""Published models as presets, each equal to its published total."""

from __future__ import annotations

import os



from ..errors import InvalidValueError, UnknownNameError, catalogue_key
from .architecture import Architecture
from .hf_config import class_dropout, from_hf_config
from .hub import from_hub, is_hub_spelling

# ----------------------------------------------------------------------------------------------
# presets
# ----------------------------------------------------------------------------------------------

__all__ = ["PRESETS", "RECIPES", "PRESET_MODEL_TYPES", "preset", "preset_names", "recipe",
           "preset_dropout", "resolve_model"]


def _llama(name, L_, h_, a_, g_, f_, V_, **kw):
    return Architecture(name=name, num_layers=L_, hidden_size=h_, num_attention_heads=a_,
                        num_query_groups=g_, ffn_hidden_size=f_, swiglu=True,
                        normalization="RMSNorm", vocab_size=V_,
                        untie_embeddings_and_output_weights=True, position_embedding_type="rope",
                        add_bias_linear=False, **kw)


# Values are the Hugging Face config.json files of each model (hidden_size, num_hidden_layers,
# num_attention_heads, num_key_value_heads, intermediate_size, vocab_size, ...); see
# tests/test_models.py for the published totals each one reproduces.
PRESETS: dict = {
    # REF: Brown et al. 2020 (arXiv 2005.14165) Table 2.1: 96 layers, d_model 12288, 96 heads,
    # d_head 128, context 2048; GPT-2 vocabulary 50257, learned positions, tied, biases.
    "gpt3-175b": Architecture(name="gpt3-175b", num_layers=96, hidden_size=12288,
                              num_attention_heads=96, vocab_size=50257,
                              max_position_embeddings=2048),
    "llama2-7b": _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, max_position_embeddings=4096),
    "llama2-13b": _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000,
                         max_position_embeddings=4096),
    "llama2-70b": _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000,
                         max_position_embeddings=4096),
    "llama3-8b": _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, max_position_embeddings=8192),
    "llama3-70b": _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256,
                         max_position_embeddings=8192),
    "llama3-405b": _llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256,
                          max_position_embeddings=131072),
    "mistral-7b": _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000,
                         max_position_embeddings=32768, extra={"sliding_window": 4096}),
    "mixtral-8x7b": _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000,
                           max_position_embeddings=32768, num_experts=8, moe_router_topk=2,
                           moe_ffn_hidden_size=14336),
    "deepseek-v3": Architecture(
        name="deepseek-v3", num_layers=61, hidden_size=7168, num_attention_heads=128,
        ffn_hidden_size=18432, swiglu=True, normalization="RMSNorm", vocab_size=129280,
        untie_embeddings_and_output_weights=True, position_embedding_type="rope",
        max_position_embeddings=163840, add_bias_linear=False,
        num_experts=256, moe_router_topk=8, moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048, moe_layer_freq=(0,) * 3 + (1,) * 58,
        multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
        qk_pos_emb_head_dim=64, v_head_dim=128, kv_channels=128, mtp_num_layers=1,
        moe_router_bias=True,   # e_score_correction_bias (noaux_tc routing), a parameter in HF
        # the router's groups, deepseek-ai/DeepSeek-V3 config.json n_group 8, topk_group 4
        extra={"first_k_dense_replace": 3, "n_shared_experts": 1, "hf_n_group": 8,
               "hf_topk_group": 4}),
    # moonshotai/Kimi-K2-Instruct config.json (model_type kimi_k2, DeepseekV3ForCausalLM's
    # modules; Megatron-Bridge 067f987df0 models/kimi/kimi_bridge.py builds it as MLA with
    # moe_layer_freq [0] * first_k_dense_replace + [1] * 60, shared expert
    # moe_intermediate_size x n_shared_experts, untied, expert bias): DeepSeek-V3's shapes with
    # 64 heads, 384 routed experts (top-8, one shared), one dense layer, vocabulary 163840 and
    # num_nextn_predict_layers 0 (no MTP layer).
    "kimi-k2": Architecture(
        name="kimi-k2", num_layers=61, hidden_size=7168, num_attention_heads=64,
        ffn_hidden_size=18432, swiglu=True, normalization="RMSNorm", vocab_size=163840,
        untie_embeddings_and_output_weights=True, position_embedding_type="rope",
        max_position_embeddings=131072, add_bias_linear=False,
        num_experts=384, moe_router_topk=8, moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048, moe_layer_freq=(0,) + (1,) * 60,
        multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
        qk_pos_emb_head_dim=64, v_head_dim=128, kv_channels=128, mtp_num_layers=0,
        moe_router_bias=True,   # e_score_correction_bias (noaux_tc routing), in the checkpoint
        extra={"first_k_dense_replace": 1, "n_shared_experts": 1}),
    "qwen3-8b": _llama("qwen3-8b", 36, 4096, 32, 8, 12288, 151936, kv_channels=128,
                       qk_layernorm=True, max_position_embeddings=40960),
    "qwen3-30b-a3b": _llama("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, kv_channels=128,
                            qk_layernorm=True, max_position_embeddings=40960, num_experts=128,
                            moe_router_topk=8, moe_ffn_hidden_size=768),
    # Qwen/Qwen3-235B-A22B config.json: 94 layers, all MoE (decoder_sparse_step 1, no
    # mlp_only_layers; intermediate_size 12288 unused), 128 experts top-8 of width 1536, GQA
    # 64/4 heads of 128, q/k RMSNorm, untied.
    "qwen3-235b-a22b": _llama("qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 151936,
                              kv_channels=128, qk_layernorm=True, max_position_embeddings=40960,
                              num_experts=128, moe_router_topk=8, moe_ffn_hidden_size=1536),
    # Nemotron (NeMo 24.07 nemo/collections/llm/gpt/model/nemotron.py at 8e3d65dcfe,
    # NemotronConfig and its sizes): LayerNorm (zero-centred gamma: a weight and a bias),
    # squared-ReLU MLP without a gate, no linear biases, RoPE on half of each head
    # (rotary_percent 0.5, no parameters), untied embeddings, sequence 4096; the Nemotron
    # tokenizer's 256,000 tokens (Nemotron-4 340B report, arXiv:2406.11704, Table 1).  8B
    # (Nemotron3Config8B) and 22B (Nemotron4Config22B) leave num_query_groups None: MHA.
    "nemotron3-8b": Architecture(
        name="nemotron3-8b", num_layers=32, hidden_size=4096, num_attention_heads=32,
        ffn_hidden_size=16384, normalization="LayerNorm", vocab_size=256000,
        untie_embeddings_and_output_weights=True, position_embedding_type="rope",
        max_position_embeddings=4096, add_bias_linear=False,
        extra={"activation": "squared_relu", "rotary_percent": 0.5}),
    "nemotron4-22b": Architecture(
        name="nemotron4-22b", num_layers=40, hidden_size=6144, num_attention_heads=48,
        ffn_hidden_size=24576, normalization="LayerNorm", vocab_size=256000,
        untie_embeddings_and_output_weights=True, position_embedding_type="rope",
        max_position_embeddings=4096, add_bias_linear=False,
        extra={"activation": "squared_relu", "rotary_percent": 0.5}),
    # Nemotron4Config340B; arXiv:2406.11704 Table 1: 96 layers, hidden 18432, 96 heads, 8 KV
    # heads, sequence 4096, vocabulary 256,000 (ffn 73728 from the NeMo config).
    "nemotron4-340b": Architecture(
        name="nemotron4-340b", num_layers=96, hidden_size=18432, num_attention_heads=96,
        num_query_groups=8, ffn_hidden_size=73728, normalization="LayerNorm",
        vocab_size=256000, untie_embeddings_and_output_weights=True,
        position_embedding_type="rope", max_position_embeddings=4096, add_bias_linear=False,
        extra={"activation": "squared_relu", "rotary_percent": 0.5}),
    # gpt-oss-120b: 36 layers, all MoE (128 experts, top-4, expert ffn 2880), GQA 64/8 heads of 64,
    # biases on every linear layer (attention, experts, router), one sink logit per head, untied.
    # Sliding-window (128) attention on alternate layers changes activations, not parameters.
    "gpt-oss-120b": Architecture(
        name="gpt-oss-120b", num_layers=36, hidden_size=2880, num_attention_heads=64,
        num_query_groups=8, kv_channels=64, ffn_hidden_size=2880, swiglu=True,
        normalization="RMSNorm", vocab_size=201088, untie_embeddings_and_output_weights=True,
        position_embedding_type="rope", max_position_embeddings=131072, add_bias_linear=True,
        num_experts=128, moe_router_topk=4, moe_ffn_hidden_size=2880, attention_sinks=True,
        extra={"sliding_window": 128, "layer_types": "sliding/full alternating",
               "swiglu_limit": 7.0,
               # YaRN: config.json rope_scaling factor 32; the Bridge sets
               # yarn_rotary_scaling_factor 32.0 (gpt_oss_bridge.py:94)
               "yarn_rotary_scaling_factor": 32.0}),
}


#: Each preset's training recipe where it decides memory and differs from memsym's defaults
#: (:data:`memsym.job.DEFAULTS`): preset -> (job options, where they come from).  Megatron-
#: Bridge trains these models without dropout (its bridges set hidden_dropout 0.0 and take
#: attention_dropout from config.json, 0.0 in each), as their transformers classes do; GPT-3
#: 175B keeps Megatron-LM's 0.1 dropouts (examples/gpt3/train_gpt3_175b_distributed.sh sets
#: none).
_NO_DROPOUT = ({"dropout": False},
               "megatron-bridge-recipes: the model's bridge sets hidden_dropout 0.0 and takes "
               "attention_dropout 0.0 from its config.json")
RECIPES: dict = {name: _NO_DROPOUT for name in (
    "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b",
    "mistral-7b", "mixtral-8x7b", "deepseek-v3", "qwen3-8b", "qwen3-30b-a3b", "gpt-oss-120b",
    "qwen3-235b-a22b", "kimi-k2")}


#: The transformers ``model_type`` of each preset's published config.json: the class that a
#: framework running the model's own code builds (DeepSpeed, a Hugging Face Trainer launch) and
#: PEFT wraps.  Left out: GPT-3 (no checkpoint) and the Nemotron 3 8B / Nemotron-4 presets
#: (published as NeMo checkpoints).
PRESET_MODEL_TYPES = {
    **{name: "llama" for name in ("llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b",
                                  "llama3-70b", "llama3-405b")},
    "mistral-7b": "mistral", "mixtral-8x7b": "mixtral", "qwen3-8b": "qwen3",
    "qwen3-30b-a3b": "qwen3_moe", "qwen3-235b-a22b": "qwen3_moe", "gpt-oss-120b": "gpt_oss",
    "deepseek-v3": "deepseek_v3", "kimi-k2": "kimi_k2", "nemotron-3-nano": "nemotron_h",
    "nemotron-3-super": "nemotron_h"}


def preset_dropout(name) -> dict | None:
    """The dropout probabilities the transformers class of the preset called ``name`` applies
    (each published config.json leaves ``attention_dropout`` at its class default, 0.0): what
    reading the config.json gives (``extra["hf_dropout"]`` of :func:`from_hf_config`).  None
    for a name that is no preset, or whose class is not in transformers (Kimi K2: remote code).

    Examples
    --------
    >>> preset_dropout("llama3-8b"), preset_dropout("gpt3-175b"), preset_dropout("kimi-k2")
    ({'attention_dropout': 0.0}, None, None)
    """
    mtype = PRESET_MODEL_TYPES.get(catalogue_key(str(name or "")))
    return None if mtype is None else class_dropout(mtype)


def recipe(model) -> tuple:
    """``(job options, source)`` of a preset's training recipe: ``model`` a preset name or the
    preset's own Architecture (``({}, None)`` when memsym's defaults are its recipe, or for any
    other model: a config.json's or a changed architecture's recipe is not the preset's).

    Examples
    --------
    >>> recipe("Llama3-70B")[0], recipe("gpt3-175b"), recipe(preset("llama2-7b"))[0]
    ({'dropout': False}, ({}, None), {'dropout': False})
    """
    if isinstance(model, Architecture):
        key = catalogue_key(model.name)
        if PRESETS.get(key) is not model:
            return {}, None
    elif isinstance(model, str):
        key = catalogue_key(model)
    else:
        return {}, None
    options, source = RECIPES.get(key, ({}, None))
    return dict(options), source


def preset_names() -> list:
    """The preset names, sorted."""
    return sorted(PRESETS)


def preset(name: str) -> Architecture:
    """The preset architecture called ``name`` (case-insensitive; ``_`` reads as ``-``).

    Raises
    ------
    UnknownNameError
        When no preset has that name; the message suggests the closest.

    Examples
    --------
    >>> preset("Llama2-7B").num_layers
    32
    >>> preset("llama2-7")
    Traceback (most recent call last):
    ...
    memsym.errors.UnknownNameError: unknown model 'llama2-7'; did you mean llama2-7b or llama2-70b or llama3-70b? (accepted: deepseek-v3, gpt-oss-120b, gpt3-175b, kimi-k2, llama2-13b, llama2-70b, llama2-7b, llama3-405b, llama3-70b, llama3-8b, mistral-7b, mixtral-8x7b, ...)
    """
    if not isinstance(name, str):
        raise InvalidValueError(f"a model name must be a string, got {type(name).__name__}")
    key = catalogue_key(name)
    if key not in PRESETS:
        raise UnknownNameError("model", name, list(PRESETS))
    return PRESETS[key]



def resolve_model(name_or_path) -> Architecture:
    """A preset name, a path to a ``config.json`` (or its directory) or a Hugging Face Hub
    model id (``org/name`` or ``org/name@revision``), as the CLI's MODEL.

    Anything that names an existing file or directory, or ends in ``.json``, is read as a
    config (a local path always wins over a Hub id of the same spelling); anything else with
    a ``/`` is a Hub id, checked before any network use and read through huggingface_hub
    (:func:`memsym.model.hub.from_hub`, an optional dependency); everything else is looked up
    among the presets.

    Examples
    --------
    >>> resolve_model("MIXTRAL-8x7B").num_experts
    8
    """
    if isinstance(name_or_path, Architecture):
        return name_or_path
    if isinstance(name_or_path, os.PathLike):
        return from_hf_config(name_or_path)
    if not isinstance(name_or_path, str):
        raise InvalidValueError(f"a model must be a preset name, a config.json path or a "
                                f"Hub model id, got {type(name_or_path).__name__}")
    if name_or_path.lower().endswith(".json") or os.path.exists(name_or_path):
        return from_hf_config(name_or_path)
    if is_hub_spelling(name_or_path):
        return from_hub(name_or_path)
    return preset(name_or_path)


#: Nemotron 3 Nano (30B-A3B), as Megatron-Bridge's recipe builds it
#: (recipes/nemotronh/h100/nemotron_3_nano.py nemotron_3_nano_pretrain_8gpu_h100_bf16_config at
#: Megatron-Bridge 067f987df0: HybridModelProvider with hybrid_layer_pattern
#: "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", hidden 2688, 64 Mamba heads of 64,
#: state 128, 8 groups, 32 attention heads, 2 query groups, kv_channels 128, 128 experts of
#: 1856, a shared expert of 3712, top-6, squared ReLU; the provider's defaults: RMSNorm, no
#: biases, no position embedding, untied output, dropout 0) and the checkpoint's config.json
#: (vocab_size 131072, tie_word_embeddings false: the Bridge's AutoBridge test fixture,
#: tests/unit_tests/models/nemotronh/test_nemotron_h_bridge.py).  One norm per layer
#: (NemotronHBlock / Megatron's MambaLayer and the hybrid specs); the router's expert bias
#: (moe_router_enable_expert_bias) is a buffer, not a parameter.
_NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
PRESETS["nemotron-3-nano"] = Architecture(
    name="nemotron-3-nano", num_layers=len(_NANO_PATTERN), hidden_size=2688,
    num_attention_heads=32, num_query_groups=2, kv_channels=128, ffn_hidden_size=1856,
    swiglu=False, normalization="RMSNorm", vocab_size=131072,
    untie_embeddings_and_output_weights=True, position_embedding_type="none",
    add_bias_linear=False, norms_per_layer=1, num_experts=128, moe_router_topk=6,
    moe_ffn_hidden_size=1856, moe_shared_expert_intermediate_size=3712,
    moe_layer_freq=tuple(int(ch == "E") for ch in _NANO_PATTERN),
    layer_mixers=tuple({"M": "mamba", "*": "attention"}.get(ch, "none") for ch in _NANO_PATTERN),
    ffn_layers=tuple(int(ch in "E-") for ch in _NANO_PATTERN),
    mamba_inner_size=64 * 64, mamba_state_dim=128, mamba_num_heads=64, mamba_num_groups=8,
    mamba_conv_kernel=4)
RECIPES["nemotron-3-nano"] = (
    {"dropout": False},
    "megatron-bridge-recipes: HybridModelProvider's hidden_dropout and attention_dropout 0.0 "
    "(models/hybrid/hybrid_provider.py)")


#: Nemotron 3 Super (120B-A12B), as Megatron-Bridge builds it: the recipe
#: recipes/nemotronh/h100/nemotron_3_super.py:44 at 067f987df0 takes its model from the
#: checkpoint nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16 (line 29) through
#: models/nemotronh/nemotron_h_bridge.py provider_bridge (lines 287-332: no position embedding,
#: squared ReLU, moe_latent_size from the config, line 321) into a HybridModelProvider.  The
#: config's values, as Megatron-LM d98e8a64dd launches the same model
#: (tests/functional_tests/test_cases/nemotron/nemotron3_super_release_gb200/model_config.yaml
#: 57-100 and examples/post_training/modelopt/conf/nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16.sh
#: 20-52): hidden 4096, 88 layers of pattern
#: "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
#: 128 Mamba heads of 64, 32 attention heads, 2 query groups, kv_channels 128, 512 experts of
#: 2688 at the latent width 1024, a shared expert of 5376, top-22, squared ReLU, RMSNorm, no
#: biases, untied; Mamba state 128 and 8 groups are Megatron-core's defaults
#: (transformer_config.py:1259, 1265), d_conv 4 (mamba_mixer.py:179); the Bridge's recipe test
#: (tests/unit_tests/recipes/nemotronh/test_nemotron_3_super.py:349-354) asserts the MoE sizes.
#: Vocabulary 131072 (the Nemotron-H tokenizer of Nano): the Bridge's verification card
#: (examples/model_verification_cards/nemotron-3-super-120b-a12b/card.yaml) counts
#: 123,611,033,088 checkpoint elements, which these sizes give with the MTP block and the 41
#: routers' e_score_correction_bias buffers (tests/test_models.py checks it by hand).  The
#: recipe's multi-token prediction (mtp_num_layers 2 passes of one shared "*E" block,
#: mtp_use_repeated_layer, recipe lines 96-102) is not in the preset: the recipe's reading
#: sets mtp_num_layers 2 and mtp_repeated (one block's weights, two passes' activations).  The
#: block's pattern "*E" (an attention and a latent-MoE layer) is the checkpoint's
#: mtp_hybrid_override_pattern (Bridge nemotron_h_bridge.py:281-285, 325-326) and Megatron-LM's
#: "...EMEMEME/*E/*E" (the release test's model_config.yaml:65, "/": the MTP depths).
_SUPER_PATTERN = ("MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*"
                  "EMEMEMEME")
PRESETS["nemotron-3-super"] = Architecture(
    name="nemotron-3-super", num_layers=len(_SUPER_PATTERN), hidden_size=4096,
    num_attention_heads=32, num_query_groups=2, kv_channels=128, ffn_hidden_size=2688,
    swiglu=False, normalization="RMSNorm", vocab_size=131072,
    untie_embeddings_and_output_weights=True, position_embedding_type="none",
    add_bias_linear=False, norms_per_layer=1, num_experts=512, moe_router_topk=22,
    moe_ffn_hidden_size=2688, moe_shared_expert_intermediate_size=5376, moe_latent_size=1024,
    moe_layer_freq=tuple(int(ch == "E") for ch in _SUPER_PATTERN),
    layer_mixers=tuple({"M": "mamba", "*": "attention"}.get(ch, "none") for ch in _SUPER_PATTERN),
    ffn_layers=tuple(int(ch in "E-") for ch in _SUPER_PATTERN),
    mamba_inner_size=128 * 64, mamba_state_dim=128, mamba_num_heads=128, mamba_num_groups=8,
    mamba_conv_kernel=4, mtp_layer_pattern="*E")
RECIPES["nemotron-3-super"] = (
    {"dropout": False},
    "megatron-bridge-recipes: HybridModelProvider's hidden_dropout and attention_dropout 0.0 "
    "(models/hybrid/hybrid_provider.py)")
