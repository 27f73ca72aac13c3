"""The models torchtitan ships, as the architectures its own model classes build.

A torchtitan job names its model by module and flavor (``[model] name = "llama3"``, ``flavor =
"8B"`` in a v0.2 TOML; ``model_registry("8B")`` inside ``torchtitan/models/llama3`` in a Python
config).  :data:`TORCHTITAN_FLAVORS` is that registry as a data table: (name, flavor) ->
:class:`memsym.model.Architecture` fields, each shape read from torchtitan's flavor registry
and counted as its model code builds it:

* llama3/llama4: ``FeedForward`` hidden = multiple_of * ceil(int(m * int(8 h / 3)) /
  multiple_of) (``ffn_dim_multiplier`` m; llama4's MoE layers divide by top_k + shared
  experts first), untied output, no biases, RMSNorm;
* deepseek_v3: MLA (``wq`` directly when ``q_lora_rank = 0``), the first ``n_dense_layers``
  dense, shared experts of ``moe_inter_dim * num_shared_experts``; the router's
  ``expert_bias`` is a buffer, not a parameter, and no multi-token-prediction layer is built
  (v0.2.2 has none; at the newest snapshot ``model_registry(num_mtp_layers=0)`` by default);
* qwen3: head_dim 128, per-head q/k RMSNorm, tied embeddings where
  ``enable_weight_tying=True`` (0.6B/1.7B/4B, debugmodel), every layer MoE in the MoE flavors;
* gpt_oss: the gpt-oss layer (biases on attention, router and experts, one sink per head).

torchtitan pads no vocabulary, so ``make_vocab_size_divisible_by = 1``.  Variants that change
only the attention kernel or mask (``_flex``, ``_varlen``, ``_irope``, ``non_fused_qkv``) build
the same parameters and map to their base flavor (:data:`TORCHTITAN_ALIASES`).

Sources: pytorch/torchtitan v0.2.2 (73a0e6979dd1) ``torchtitan/models/{llama3,llama4,
deepseek_v3,qwen3,gpt_oss}/__init__.py`` (the ``*_args``/``*_configs`` dicts) and
``model/{args,model}.py``, ``models/moe/moe.py``; the newest snapshot b5bcd76c66d0
(2026-08-21) ``torchtitan/models/*/__init__.py`` (``*_configs`` and ``model_registry``: the
same shapes, plus llama3 1B/3B; llama4 removed).
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..model import Architecture

__all__ = ["TORCHTITAN_FLAVORS", "TORCHTITAN_ALIASES", "NOT_COUNTED", "TORCHTITAN_SOURCES",
           "torchtitan_architecture"]

V022 = "pytorch/torchtitan v0.2.2 (73a0e6979dd1)"
HEAD = "pytorch/torchtitan b5bcd76c66d0 (2026-08-21)"

#: module -> where its flavors are read
TORCHTITAN_SOURCES = {
    "llama3": f"{V022} torchtitan/models/llama3/__init__.py llama3_args, model/model.py "
              f"FeedForward; {HEAD} torchtitan/models/llama3/__init__.py llama3_configs "
              "(_1b, _3b: enable_weight_tying=True), models/common/feed_forward.py "
              "compute_ffn_hidden_dim",
    "llama4": f"{V022} torchtitan/models/llama4/__init__.py llama4_args, model/model.py "
              "TransformerBlock (MoE hidden dim auto-scaled by top_k + shared experts), "
              "model/args.py (vocab 202048, interleave_moe_layer_step 2)",
    "deepseek_v3": f"{V022} torchtitan/models/deepseek_v3/__init__.py deepseekv3_args, "
                   f"model/model.py, models/moe/moe.py; {HEAD} torchtitan/models/deepseek_v3/"
                   "__init__.py deepseekv3_configs, model_registry(num_mtp_layers=0)",
    "qwen3": f"{V022} torchtitan/models/qwen3/__init__.py qwen3_args, model/args.py "
             f"(enable_weight_tying False by default); {HEAD} torchtitan/models/qwen3/"
             "__init__.py qwen3_configs",
    "gpt_oss": f"{V022} torchtitan/models/gpt_oss/__init__.py gptoss_configs, model/args.py "
               "(dim 2880, head_dim 64, 64/8 heads, vocab 201088), model/model.py (sinks), "
               "model/moe.py (expert biases)",
}

_LLAMA = dict(swiglu=True, normalization="RMSNorm", untie_embeddings_and_output_weights=True,
              position_embedding_type="rope", add_bias_linear=False,
              make_vocab_size_divisible_by=1)


def _dense(L, h, a, g, f, V, **kw):
    return {**_LLAMA, "num_layers": L, "hidden_size": h, "num_attention_heads": a,
            "num_query_groups": g, "ffn_hidden_size": f, "vocab_size": V, **kw}


def _qwen3(L, h, a, g, f, tied=False, V=151936, **kw):
    return _dense(L, h, a, g, f, V, kv_channels=128, qk_layernorm=True,
                  untie_embeddings_and_output_weights=not tied, **kw)


def _dsv3(V, h, f, f_e, L, dense, a, E, shared, k, q_lora):
    return _dense(L, h, a, a, f, V, kv_channels=128, num_experts=E, moe_router_topk=k,
                  moe_ffn_hidden_size=f_e, moe_shared_expert_intermediate_size=f_e * shared,
                  moe_layer_freq=(0,) * dense + (1,) * (L - dense), moe_router_bias=False,
                  multi_latent_attention=True, q_lora_rank=q_lora or None, kv_lora_rank=512,
                  qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128, mtp_num_layers=0)


def _llama4(L, h, a, g, f, f_e, E, V=202048, step=2):
    # TransformerBlock: layer i is MoE iff (i + 1) % interleave_moe_layer_step == 0; one shared
    # expert of the routed experts' width, top-1 routing (MoEArgs defaults)
    return _dense(L, h, a, g, f, V, num_experts=E, moe_router_topk=1, moe_ffn_hidden_size=f_e,
                  moe_shared_expert_intermediate_size=f_e, moe_router_bias=False,
                  moe_layer_freq=tuple(int((i + 1) % step == 0) for i in range(L)))


def _gpt_oss(L, h, E):
    return {**_dense(L, h, 64, 8, 2880, 201088, kv_channels=64, add_bias_linear=True,
                     attention_sinks=True),
            "num_experts": E, "moe_router_topk": 4, "moe_ffn_hidden_size": 2880}


# (name, flavor) -> Architecture fields.  The llama FFN widths worked out from the registry's
# (multiple_of, ffn_dim_multiplier):  8B  int(1.3 * 10922) = 14198 -> 14336 (1024);
# 70B int(1.3 * 21845) = 28398 -> 28672 (4096); 405B int(1.2 * 43690) = 52428 -> 53248 (4096);
# 1B int(1.5 * 5461) = 8191 -> 8192 (1024); 3B int(1.0 * 8192) = 8192; debugmodel 682 -> 768
# (256).  llama4 17B: dense int(1.2 * 13653) = 16383 -> 16384 (2048), MoE 16383 // 2 = 8191
# -> 8192; debugmodel: dense 768, MoE 682 // 2 = 341 -> 512 (256).
TORCHTITAN_FLAVORS = {
    ("llama3", "debugmodel"): _dense(6, 256, 16, 16, 768, 2048),
    ("llama3", "1B"): _dense(16, 2048, 32, 8, 8192, 128256,
                             untie_embeddings_and_output_weights=False),
    ("llama3", "3B"): _dense(28, 3072, 24, 8, 8192, 128256,
                             untie_embeddings_and_output_weights=False),
    ("llama3", "8B"): _dense(32, 4096, 32, 8, 14336, 128256),
    ("llama3", "70B"): _dense(80, 8192, 64, 8, 28672, 128256),
    ("llama3", "405B"): _dense(126, 16384, 128, 8, 53248, 128256),
    ("llama4", "debugmodel"): _llama4(6, 256, 16, 16, 768, 512, 8, V=2048),
    ("llama4", "17bx16e"): _llama4(48, 5120, 40, 8, 16384, 8192, 16, step=1),
    ("llama4", "17bx128e"): _llama4(48, 5120, 40, 8, 16384, 8192, 128),
    ("deepseek_v3", "debugmodel"): _dsv3(2048, 256, 1024, 256, 6, 1, 16, 8, 2, 3, 0),
    ("deepseek_v3", "16B"): _dsv3(102400, 2048, 10944, 1408, 27, 1, 16, 64, 2, 6, 0),
    ("deepseek_v3", "236B"): _dsv3(102400, 5120, 12288, 1536, 60, 1, 128, 160, 2, 6, 1536),
    ("deepseek_v3", "671B"): _dsv3(129280, 7168, 18432, 2048, 61, 3, 128, 256, 1, 8, 1536),
    ("qwen3", "debugmodel"): _qwen3(8, 256, 16, 8, 3072, tied=True, V=2048),
    ("qwen3", "0.6B"): _qwen3(28, 1024, 16, 8, 3072, tied=True),
    ("qwen3", "1.7B"): _qwen3(28, 2048, 16, 8, 6144, tied=True),
    ("qwen3", "4B"): _qwen3(36, 2560, 32, 8, 9728, tied=True),
    ("qwen3", "8B"): _qwen3(36, 4096, 32, 8, 12288),
    ("qwen3", "14B"): _qwen3(40, 5120, 40, 8, 17408),
    ("qwen3", "32B"): _qwen3(64, 5120, 64, 8, 25600),
    ("qwen3", "debugmodel_moe"): _qwen3(8, 256, 16, 8, 3072, V=2048, num_experts=64,
                                        moe_router_topk=8, moe_ffn_hidden_size=768,
                                        moe_router_bias=False),
    ("qwen3", "30B-A3B"): _qwen3(48, 2048, 32, 4, 6144, num_experts=128, moe_router_topk=8,
                                 moe_ffn_hidden_size=768, moe_router_bias=False),
    ("qwen3", "235B-A22B"): _qwen3(94, 4096, 64, 4, 12288, num_experts=128, moe_router_topk=8,
                                   moe_ffn_hidden_size=1536, moe_router_bias=False),
    ("gpt_oss", "debugmodel"): _gpt_oss(4, 256, 8),
    ("gpt_oss", "20b"): _gpt_oss(24, 2880, 32),
    ("gpt_oss", "120b"): _gpt_oss(36, 2880, 128),
}

#: flavors that change the attention kernel, mask or QKV fusion only: the same parameters
TORCHTITAN_ALIASES = {
    ("llama3", "debugmodel_flex_attn"): ("llama3", "debugmodel"),
    ("llama3", "debugmodel_varlen_attn"): ("llama3", "debugmodel"),
    ("llama3", "8B_flex"): ("llama3", "8B"),
    ("llama3", "8B_varlen"): ("llama3", "8B"),
    ("llama4", "debugmodel_irope"): ("llama4", "debugmodel"),
    ("llama4", "17bx16e_irope"): ("llama4", "17bx16e"),
    ("llama4", "17bx128e_irope"): ("llama4", "17bx128e"),
    ("deepseek_v3", "debugmodel_flex_attn"): ("deepseek_v3", "debugmodel"),
    ("qwen3", "debugmodel_non_fused_qkv"): ("qwen3", "debugmodel"),
}

#: torchtitan models that are not decoder language models memsym counts (one line each)
NOT_COUNTED = {
    "flux": "FLUX, a diffusion transformer (image generation)",
    "qwen3_5": "Qwen3.5, a vision-language model with linear-attention layers",
    "kimi_k2_7": "Kimi K2.5, a vision-language model",
    "muse_glimmer": "a multimodal model",
    "llama3_ft": "a torchft fault-tolerance wrapper (its TOML names llama3)",
}


def torchtitan_architecture(name: str, flavor: str, mtp_layers: int = 0) -> Architecture:
    """The :class:`Architecture` torchtitan builds for model ``name``, flavor ``flavor``.

    Parameters
    ----------
    name, flavor : str
        As a torchtitan job names them (``"deepseek_v3"``, ``"671B"``); the flavor is
        matched ignoring case.
    mtp_layers : int
        DeepSeek-V3 multi-token-prediction layers (the newest torchtitan's
        ``model_registry(num_mtp_layers=...)``, 0 by default).

    Raises
    ------
    InvalidValueError
        For a name or flavor not in the table (one line: a config.json MODEL would do).

    Examples
    --------
    >>> from memsym.model.counts import parameter_count
    >>> a = torchtitan_architecture("deepseek_v3", "671B")
    >>> a.name, a.mtp_num_layers, round(parameter_count(a) / 1e9, 1)
    ('torchtitan deepseek_v3 671B', 0, 671.0)
    """
    name, flavor = str(name)[:60], str(flavor)[:60]
    if name in NOT_COUNTED:
        raise InvalidValueError(f"torchtitan model {name!r} is {NOT_COUNTED[name]}: memsym counts "
                                "the decoder language models; give a MODEL (a preset or a "
                                "Hugging Face config.json) if it is one")
    by_case = {(n, f.lower()): (n, f) for n, f in (*TORCHTITAN_FLAVORS, *TORCHTITAN_ALIASES)}
    key = by_case.get((name, flavor.lower()))
    if key is None:
        known = sorted({n for n, _ in TORCHTITAN_FLAVORS})
        flavors = sorted(f for n, f in (*TORCHTITAN_FLAVORS, *TORCHTITAN_ALIASES) if n == name)
        said = (f"its flavors: {', '.join(flavors)}" if flavors
                else f"known models: {', '.join(known)}")
        raise InvalidValueError(f"torchtitan model {name!r} flavor {flavor!r} is not in memsym's "
                                f"table ({said}); give the MODEL as a Hugging Face config.json "
                                "(or a preset) instead")
    base = TORCHTITAN_ALIASES.get(key, key)
    fields = dict(TORCHTITAN_FLAVORS[base])
    if mtp_layers:
        if base[0] != "deepseek_v3":
            raise InvalidValueError(f"num_mtp_layers: torchtitan builds multi-token prediction "
                                    f"for deepseek_v3 only, not {name}")
        fields["mtp_num_layers"] = mtp_layers
    return Architecture(name=f"torchtitan {key[0]} {key[1]}", **fields,
                        extra={"source": TORCHTITAN_SOURCES[base[0]]})
