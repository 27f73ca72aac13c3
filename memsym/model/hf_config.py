"""The Hugging Face ``config.json`` reader: one local file in, the :class:`Architecture` out.

Each accepted ``model_type`` is read with the defaults of transformers' own config class and the
modules its ``modeling_<type>.py`` builds, so that the parameter count equals
``sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())`` (transformers 5.24.0,
checked by ``tests/test_hf_configs.py``).  Nothing in the file is evaluated; every size is bounded.
"""

from __future__ import annotations

import json
import os

from .. import limits as _limits
from ..errors import InvalidValueError, UnknownNameError
from .architecture import LIMITS, Architecture, check_limit, printable, resolve

__all__ = ["from_hf_config", "HF_MODEL_TYPES"]


# a config.json is a few KB; refuse anything far larger (memsym.limits, documented there)
from ..limits import MAX_CONFIG_JSON_BYTES as _MAX_CONFIG_BYTES  # noqa: E402


# model_type -> the config class's defaults that matter when the file omits the field:
# (tie_word_embeddings, num_key_value_heads (None: = num_attention_heads), head_dim (None: h/a),
#  max_position_embeddings).  REF: transformers 5.24.0 models/<type>/configuration_<type>.py,
# the dataclass field defaults and __post_init__.
_DEFAULTS = {
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
}
# model_type -> the dropout probabilities its causal LM applies, with the config class's
# defaults.  REF: transformers 5.24.0 modeling_<type>.py (the config fields its nn.Dropout
# modules and attention's dropout read; gpt2's hidden_dropout and the classifier/summary
# dropouts belong to other heads) and configuration_<type>.py (the defaults).
_ATTENTION_ONLY = {"attention_dropout": 0.0}
_DROPOUT = {mtype: _ATTENTION_ONLY for mtype in _DEFAULTS}
_DROPOUT.update({
    "gpt2": {"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1},
    "gptj": {"attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0},
    "phi3": {"attention_dropout": 0.0, "resid_pdrop": 0.0},
    "gpt_neox": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    "bloom": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    "falcon": {"attention_dropout": 0.0, "hidden_dropout": 0.0},
    "starcoder2": {"attention_dropout": 0.0, "residual_dropout": 0.0, "embedding_dropout": 0.0},
})
HF_MODEL_TYPES = tuple(sorted(_DEFAULTS))
"""The ``model_type`` values :func:`from_hf_config` reads."""

_HF_ARCHS = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
             "MixtralForCausalLM": "mixtral", "Qwen2ForCausalLM": "qwen2",
             "Qwen3ForCausalLM": "qwen3", "Qwen2MoeForCausalLM": "qwen2_moe",
             "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV2ForCausalLM": "deepseek_v2",
             "DeepseekV3ForCausalLM": "deepseek_v3", "GptOssForCausalLM": "gpt_oss",
             "GPT2LMHeadModel": "gpt2", "GPTNeoXForCausalLM": "gpt_neox",
             "GemmaForCausalLM": "gemma", "Gemma2ForCausalLM": "gemma2",
             "Gemma3ForCausalLM": "gemma3_text", "Phi3ForCausalLM": "phi3",
             "PhimoeForCausalLM": "phimoe", "OlmoForCausalLM": "olmo",
             "Olmo2ForCausalLM": "olmo2", "GPTJForCausalLM": "gptj",
             "FalconForCausalLM": "falcon", "BloomForCausalLM": "bloom",
             "Starcoder2ForCausalLM": "starcoder2", "CohereForCausalLM": "cohere",
             "GraniteForCausalLM": "granite", "GraniteMoeForCausalLM": "granitemoe"}

# config.json field -> the LIMITS entry that bounds it (checked as the value is read, before
# anything, such as a per-layer pattern, is built from it)
_FIELD_LIMITS = {
    "num_hidden_layers": "num_layers", "n_layer": "num_layers",
    "first_k_dense_replace": "num_layers", "moe_layer_freq": "num_layers",
    "decoder_sparse_step": "num_layers",
    "hidden_size": "hidden_size", "n_embd": "hidden_size", "n_embed": "hidden_size",
    "num_attention_heads": "num_attention_heads", "n_head": "num_attention_heads",
    "num_key_value_heads": "num_query_groups", "num_kv_heads": "num_query_groups",
    "head_dim": "kv_channels",
    "intermediate_size": "ffn_hidden_size", "ffn_hidden_size": "ffn_hidden_size",
    "n_inner": "ffn_hidden_size", "moe_intermediate_size": "moe_ffn_hidden_size",
    "shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "vocab_size": "vocab_size",
    "max_position_embeddings": "max_position_embeddings", "n_positions": "max_position_embeddings",
    "num_local_experts": "num_experts", "num_experts": "num_experts",
    "n_routed_experts": "num_experts", "n_shared_experts": "num_experts",
    "num_experts_per_tok": "moe_router_topk", "experts_per_token": "moe_router_topk",
    "q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_head_dim", "qk_rope_head_dim": "qk_pos_emb_head_dim",
    "v_head_dim": "v_head_dim", "num_nextn_predict_layers": "mtp_num_layers",
    "num_ln_in_parallel_attn": "norms_per_layer",
}

# the fields that are a config.json's decoder-layer count: bounded by memsym.limits'
# "config_layers" (2^8) besides "layers" (a per-layer pattern makes every stage distinct)
_LAYER_COUNTS = frozenset({"num_hidden_layers", "n_layer"})

_MISSING = object()


class _Cfg:
    """Typed access to a parsed config dict; every refusal names the field and the file."""

    def __init__(self, data: dict, where: str):
        self.data, self.where = data, where

    def _bad(self, msg: str):
        return InvalidValueError(f"{self.where}: {msg}")

    def _get(self, keys):
        """The value of the first of ``keys`` present (aliases as transformers' attribute_map);
        two spellings with different values are refused."""
        keys = (keys,) if isinstance(keys, str) else tuple(keys)
        found = [(k, self.data[k]) for k in keys if k in self.data]
        if len(found) > 1 and any(v != found[0][1] for _, v in found[1:]):
            raise self._bad(f"fields {found[0][0]!r} and {found[1][0]!r} name the same size "
                            "with different values")
        return found[0] if found else (keys[0], _MISSING)

    def int(self, keys, default=..., allow_zero=False, null=_MISSING):
        """A whole number; ``default`` when absent (``...``: required), ``null`` when given as
        null (default: as absent), bounded by the field's entry of LIMITS."""
        key, val = self._get(keys)
        if val is _MISSING or val is None:
            if val is None and null is not _MISSING:
                return null
            if default is ...:
                raise self._bad(f"missing field {key!r}")
            return default
        if isinstance(val, bool) or not isinstance(val, int):
            raise self._bad(f"field {key!r} must be a whole number, got {type(val).__name__} "
                            f"{printable(repr(val), 40)}")
        if val < 0 or (val == 0 and not allow_zero):
            raise self._bad(f"field {key!r} must be {'>= 0' if allow_zero else '> 0'}, got "
                            f"{val if abs(val) < 10**30 else 'a huge number'}")
        try:
            check_limit(_FIELD_LIMITS[key], val, f"field {key!r}")
            if key in _LAYER_COUNTS:
                # a config.json model may carry a per-layer pattern: its own, lower bound
                _limits.check_limit("config_layers", val, f"field {key!r}")
            return val
        except InvalidValueError as exc:
            raise self._bad(str(exc)) from None

    def bool(self, key, default):
        key, val = self._get(key)
        if val is _MISSING or val is None:
            return default
        if not isinstance(val, bool):
            raise self._bad(f"field {key!r} must be true or false, got {printable(repr(val), 40)}")
        return val

    def probability(self, key, default):
        """A dropout probability in [0, 1]; ``default`` when absent or null."""
        key, val = self._get(key)
        if val is _MISSING or val is None:
            return default
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not 0 <= val <= 1:
            raise self._bad(f"field {key!r} must be a probability between 0 and 1, got "
                            f"{printable(repr(val), 40)}")
        return float(val)

    def str(self, key, default):
        key, val = self._get(key)
        if val is _MISSING or val is None:
            return default
        if not isinstance(val, str):
            raise self._bad(f"field {key!r} must be a string, got {type(val).__name__}")
        return val

    def int_list(self, key):
        """A list of layer indices, at most the config_layers limit long (memsym.limits)."""
        val = self.data.get(key) or []
        most = _limits.LIMITS["config_layers"].maximum
        if (not isinstance(val, list) or len(val) > most
                or any(isinstance(v, bool) or not isinstance(v, int) for v in val)):
            raise self._bad(f"field {key!r} must be a list of at most {most} whole numbers "
                            "(layer indices)")
        return val


def _read_json(path) -> dict:
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidValueError(f"a config path must be a string, got {type(path).__name__}")
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    shown = printable(path, 200)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
        shown = printable(path, 200)
    if not os.path.exists(path):
        raise InvalidValueError(f"no such config file: {shown!r}")
    if not os.path.isfile(path):
        # a FIFO or a device (/dev/zero) would block or never end: refuse before opening it
        raise InvalidValueError(f"config file {shown!r} is not a regular file (a device, FIFO or "
                                "socket): give a config.json file")
    size = os.path.getsize(path)
    if size > _MAX_CONFIG_BYTES:
        raise InvalidValueError(f"{shown!r} is {size} bytes; a config.json is refused above "
                                f"{_MAX_CONFIG_BYTES} bytes")

    def _no_constants(name):  # NaN / Infinity are not JSON and not sizes
        raise ValueError(f"non-finite number {name}")

    from ..limits import MAX_NUMBER_CHARS
    from ..readers._values import check_text

    def _bounded_int(digits):  # check_text bounds every number; this keeps it for the parser
        if len(digits) > MAX_NUMBER_CHARS:
            raise ValueError(f"a number of {len(digits)} digits")
        return int(digits)

    try:
        with open(path, "rb") as fh:
            raw = fh.read(_MAX_CONFIG_BYTES + 1)
        if len(raw) > _MAX_CONFIG_BYTES:
            raise InvalidValueError(f"{shown!r} is refused above {_MAX_CONFIG_BYTES} bytes")
        text = raw.decode("utf-8")
        # nesting, number lengths and value counts on the text, before json recurses or
        # converts a 5000-digit integer (memsym.limits MAX_NESTING, MAX_NUMBER_CHARS, ...)
        check_text(text, repr(shown), "json")
        data = json.loads(text, parse_constant=_no_constants, parse_int=_bounded_int)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        if isinstance(exc, InvalidValueError):
            raise
        first = (str(exc).splitlines() or [""])[0]
        raise InvalidValueError(f"{shown!r} is not valid JSON ({printable(first, 80)})") from None
    except OSError as exc:
        raise InvalidValueError(f"cannot read {shown!r}: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise InvalidValueError(f"{shown!r} must hold a JSON object, got {type(data).__name__}")
    return data, path


# ----------------------------------------------------------------------------------------------
# one reader per family; each returns Architecture keyword arguments
# ----------------------------------------------------------------------------------------------

def _decoder(c: _Cfg, mtype: str, gated: bool = True, norm: str = "RMSNorm") -> dict:
    """The fields every Llama-like config spells the same way (core sizes required)."""
    _, kv_default, hd_default, pos_default = _DEFAULTS[mtype]
    heads = c.int("num_attention_heads")
    return dict(num_layers=c.int("num_hidden_layers"), hidden_size=c.int("hidden_size"),
                num_attention_heads=heads,
                num_query_groups=c.int("num_key_value_heads",
                                       heads if kv_default is None else kv_default, null=heads),
                # modeling: getattr(config, "head_dim", h // a); a null head_dim is h // a too
                kv_channels=c.int("head_dim", hd_default, null=None),
                ffn_hidden_size=c.int("intermediate_size"), swiglu=gated, normalization=norm,
                vocab_size=c.int("vocab_size"), position_embedding_type="rope",
                max_position_embeddings=c.int("max_position_embeddings", pos_default),
                add_bias_linear=False)


def _read_llama_like(c: _Cfg, mtype: str, notes: list) -> dict:
    kw = _decoder(c, mtype)
    if mtype in ("llama", "granite"):
        # LlamaAttention / GraniteAttention: q, k, v, o with bias=config.attention_bias;
        # LlamaMLP / GraniteMLP: gate, up, down with bias=config.mlp_bias
        kw["attention_bias"] = c.bool("attention_bias", False)
        kw["add_bias_linear"] = c.bool("mlp_bias", False)
    elif mtype in ("qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text", "olmo", "olmo2",
                   "cohere", "phimoe", "granitemoe"):
        kw["attention_bias"] = c.bool("attention_bias", False)   # MLP / experts never biased
    elif mtype == "qwen2":
        kw["add_qkv_bias"] = True           # Qwen2Attention: q, k, v with bias=True, o without
    elif mtype == "qwen2_moe":
        kw["add_qkv_bias"] = c.bool("qkv_bias", True)
    # mistral, mixtral, phi3: every projection bias=False whatever the file says
    if mtype in ("qwen3", "qwen3_moe"):
        kw["qk_layernorm"] = True           # Qwen3RMSNorm(head_dim) on q and on k
    if mtype in ("gemma2", "gemma3_text"):
        # input, post_attention, pre_feedforward and post_feedforward norms
        kw["norms_per_layer"] = 4
    if mtype == "gemma3_text":
        kw["qk_layernorm"] = True           # Gemma3RMSNorm(head_dim) on q and on k
    if mtype == "olmo":
        kw["norm_affine"] = False           # OlmoLayerNorm: F.layer_norm(x, shape, None, None)
        kw["normalization"] = "LayerNorm"
    if mtype == "olmo2":
        # Olmo2RMSNorm(a*d_h) on q and (g*d_h) on k; post_attention and post_feedforward norms
        kw.update(qk_layernorm=True, qk_norm_width="full")
    if mtype == "cohere":
        # CohereLayerNorm: a weight, no bias; one input norm feeding attention and MLP in
        # parallel; use_qk_norm: CohereLayerNorm((a, d_h)) on q and ((g, d_h)) on k
        kw.update(normalization="LayerNorm", norm_bias=False, norms_per_layer=1,
                  parallel_attention=True)
        if c.bool("use_qk_norm", False):
            kw.update(qk_layernorm=True, qk_norm_width="full")
    if mtype == "phimoe":
        # nn.LayerNorm(elementwise_affine=True) norms; lm_head bias=config.lm_head_bias
        kw.update(normalization="LayerNorm", output_layer_bias=c.bool("lm_head_bias", False))
    if mtype == "mixtral":
        kw.update(num_experts=c.int("num_local_experts", 8),
                  moe_router_topk=c.int("num_experts_per_tok", 2),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"], moe_router_bias=False)
    if mtype == "phimoe":
        kw.update(num_experts=c.int("num_local_experts", 16),
                  moe_router_topk=c.int("num_experts_per_tok", 2),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"], moe_router_bias=False)
    if mtype == "granitemoe":
        kw.update(num_experts=c.int("num_local_experts", 8, null=8),
                  moe_router_topk=c.int("num_experts_per_tok", 2, null=2),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"], moe_router_bias=False)
    if mtype in ("qwen2_moe", "qwen3_moe"):
        n_layers = kw["num_layers"]
        n_exp = c.int("num_experts", 60 if mtype == "qwen2_moe" else 128)
        step = c.int("decoder_sparse_step", 1)
        dense_only = set(c.int_list("mlp_only_layers"))
        # DecoderLayer: sparse iff i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
        pattern = tuple(int(i not in dense_only and (i + 1) % step == 0) for i in range(n_layers))
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
                  moe_ffn_hidden_size=kw["ffn_hidden_size"])
    return kw


def _read_deepseek(c: _Cfg, mtype: str, notes: list) -> dict:
    v3 = mtype == "deepseek_v3"
    kw = _decoder(c, mtype)
    heads = kw["num_attention_heads"]
    if c.bool("attention_bias", False) or c.bool("mlp_bias", False):
        raise c._bad("attention_bias / mlp_bias true in a DeepSeek MLA config is not modelled "
                     "(no released DeepSeek model uses them)")
    n_layers = kw["num_layers"]
    first_dense = c.int("first_k_dense_replace", 3 if v3 else 0, allow_zero=True,
                        null=3 if v3 else 0)
    freq = c.int("moe_layer_freq", 1)
    if freq != 1:
        notes.append(f"moe_layer_freq={freq} ignored: transformers' DeepSeek decoder layer is MoE "
                     "from layer first_k_dense_replace on")
    n_shared = c.int("n_shared_experts", 1 if v3 else 2, allow_zero=True)
    moe_f = c.int("moe_intermediate_size", 2048 if v3 else 1407)
    # DeepseekV{2,3}DecoderLayer: MoE iff layer_idx >= config.first_k_dense_replace
    pattern = tuple(int(i >= first_dense) for i in range(n_layers))
    topk = c.int("num_experts_per_tok", 8) if v3 else c.int("num_experts_per_tok")
    v_head = c.int("v_head_dim", 128, null=128)
    kw.update(num_query_groups=heads, kv_channels=v_head,
              num_experts=c.int("n_routed_experts", 256 if v3 else 64), moe_router_topk=topk,
              moe_ffn_hidden_size=moe_f, moe_layer_freq=pattern,
              moe_shared_expert_intermediate_size=n_shared * moe_f or None,
              multi_latent_attention=True, q_lora_rank=c.int("q_lora_rank", 1536, null=None),
              kv_lora_rank=c.int("kv_lora_rank", 512), qk_head_dim=c.int("qk_nope_head_dim", 128),
              qk_pos_emb_head_dim=c.int("qk_rope_head_dim", 64), v_head_dim=v_head,
              # DeepseekV3TopkRouter keeps e_score_correction_bias as an nn.Buffer (not a
              # parameter) in transformers 5; DeepSeek-V2's router has no bias
              moe_router_bias=False, mtp_num_layers=0)
    if v3 and any(pattern):
        notes.append(f"e_score_correction_bias ({sum(pattern)} x {kw['num_experts']}) not counted: "
                     "a buffer, not a parameter, in transformers' DeepseekV3TopkRouter")
    n_mtp = c.int("num_nextn_predict_layers", 0, allow_zero=True)
    if n_mtp:
        notes.append(f"num_nextn_predict_layers={n_mtp} not counted: transformers' "
                     "DeepseekV3ForCausalLM builds no MTP layer (count it with --mtp-num-layers "
                     "when the training framework builds one)")
    return kw


def _read_gpt2(c: _Cfg, mtype: str, notes: list) -> dict:
    hs = c.int(("n_embd", "hidden_size"))
    return dict(num_layers=c.int(("n_layer", "num_hidden_layers")), hidden_size=hs,
                num_attention_heads=c.int(("n_head", "num_attention_heads")),
                ffn_hidden_size=c.int("n_inner", 4 * hs), vocab_size=c.int("vocab_size"),
                max_position_embeddings=c.int(("n_positions", "max_position_embeddings"), 1024),
                add_bias_linear=True)


def _read_gpt_neox(c: _Cfg, mtype: str, notes: list) -> dict:
    # GPTNeoXAttention: query_key_value and dense with bias=config.attention_bias;
    # GPTNeoXMLP: dense_h_to_4h, dense_4h_to_h with nn.Linear's default bias
    return dict(num_layers=c.int("num_hidden_layers"), hidden_size=c.int("hidden_size"),
                num_attention_heads=c.int("num_attention_heads"),
                ffn_hidden_size=c.int("intermediate_size"), vocab_size=c.int("vocab_size"),
                position_embedding_type="rope",
                max_position_embeddings=c.int("max_position_embeddings", 2048),
                add_bias_linear=True, attention_bias=c.bool("attention_bias", True),
                parallel_attention=c.bool("use_parallel_residual", True))


def _read_gptj(c: _Cfg, mtype: str, notes: list) -> dict:
    # GPTJBlock: one ln_1 feeding attention and MLP in parallel; q, k, v, out_proj bias=False;
    # fc_in, fc_out with bias; GPTJForCausalLM.lm_head = nn.Linear(n_embd, vocab) with bias
    hs = c.int(("n_embd", "hidden_size"))
    return dict(num_layers=c.int(("n_layer", "num_hidden_layers")), hidden_size=hs,
                num_attention_heads=c.int(("n_head", "num_attention_heads")),
                ffn_hidden_size=c.int("n_inner", 4 * hs, null=4 * hs),
                vocab_size=c.int("vocab_size"), position_embedding_type="rope",
                max_position_embeddings=c.int(("n_positions", "max_position_embeddings"), 2048),
                add_bias_linear=True, attention_bias=False, output_layer_bias=True,
                norms_per_layer=1, parallel_attention=True)


def _read_falcon(c: _Cfg, mtype: str, notes: list) -> dict:
    hs, heads = c.int(("hidden_size", "n_embed")), c.int("num_attention_heads")
    new_arch = c.bool("new_decoder_architecture", False)
    parallel = c.bool("parallel_attn", True)
    # FalconAttention: fused qkv of (2 g + a) d_h rows with the new decoder architecture,
    # h + 2 d_h with multi_query (one KV head), 3h otherwise
    if new_arch:
        groups = c.int("num_kv_heads", heads, null=heads)
    elif c.bool("multi_query", True):
        groups = 1
    else:
        groups = heads
    # FalconDecoderLayer: two norms unless parallel_attn with num_ln_in_parallel_attn != 2
    # (None becomes 2 with the new decoder architecture)
    n_ln = c.int("num_ln_in_parallel_attn", None, allow_zero=True)
    if n_ln is None and new_arch:
        n_ln = 2
    norms = 2 if (not parallel or n_ln == 2) else 1
    bias = c.bool("bias", False)
    return dict(num_layers=c.int("num_hidden_layers"), hidden_size=hs, num_attention_heads=heads,
                num_query_groups=groups, ffn_hidden_size=c.int("ffn_hidden_size", 4 * hs, null=4 * hs),
                vocab_size=c.int("vocab_size"),
                position_embedding_type="none" if c.bool("alibi", False) else "rope",
                max_position_embeddings=c.int("max_position_embeddings", 2048),
                add_bias_linear=bias, norms_per_layer=norms, parallel_attention=parallel)


def _read_bloom(c: _Cfg, mtype: str, notes: list) -> dict:
    # BloomModel: word_embeddings_layernorm after the embedding; fused qkv 3h and dense with
    # bias; 4h MLP with bias; input and post-attention LayerNorms; ALiBi (no position table)
    hs = c.int(("hidden_size", "n_embed"))
    return dict(num_layers=c.int(("n_layer", "num_hidden_layers")), hidden_size=hs,
                num_attention_heads=c.int(("n_head", "num_attention_heads")),
                ffn_hidden_size=4 * hs, vocab_size=c.int("vocab_size"),
                position_embedding_type="none", add_bias_linear=True, embedding_norm=True)


def _read_starcoder2(c: _Cfg, mtype: str, notes: list) -> dict:
    # Starcoder2: q, k, v, o and c_fc, c_proj with bias=config.use_bias; nn.LayerNorm norms;
    # head_dim = getattr(config, "head_dim", None) or h // a
    kw = _decoder(c, mtype, gated=False, norm="LayerNorm")
    kw["add_bias_linear"] = c.bool("use_bias", True)
    return kw


_READERS = {"gpt2": _read_gpt2, "gpt_neox": _read_gpt_neox, "gptj": _read_gptj,
            "falcon": _read_falcon, "bloom": _read_bloom, "starcoder2": _read_starcoder2,
            "deepseek_v2": _read_deepseek, "deepseek_v3": _read_deepseek}


def from_hf_config(path) -> Architecture:
    """Read a local Hugging Face ``config.json`` into an :class:`Architecture` (no network).

    Accepted ``model_type`` (or, without one, ``architectures[0]``): bloom, cohere, deepseek_v2,
    deepseek_v3, falcon (both decoder architectures), gemma, gemma2, gemma3_text, gpt2, gpt_neox,
    gpt_oss, gptj, granite, granitemoe, llama, mistral, mixtral, olmo, olmo2, phi3 (Phi-3 and
    Phi-4), phimoe, qwen2, qwen2_moe, qwen3, qwen3_moe, starcoder2.  The core sizes (hidden size,
    layers, heads, vocabulary, MLP size) must be in the file; every other field defaults as
    transformers' config class defaults it, and the modules are those the transformers model
    builds, so the parameter count equals ``sum(p.numel())`` of
    ``AutoModelForCausalLM.from_config`` (transformers 5.24.0).  Where transformers builds less
    than the file describes (DeepSeek-V3's MTP layer) the difference is said in
    ``arch.extra["notes"]``.  The file is parsed as JSON only; nothing in it is evaluated, every
    size is checked against :data:`~memsym.model.architecture.LIMITS` as it is read, and the
    name (``_name_or_path``) is stored escaped (:func:`~memsym.model.architecture.printable`).

    Parameters
    ----------
    path : str or os.PathLike
        The ``config.json`` file, or a directory holding one.

    Returns
    -------
    Architecture
        Resolved; ``extra`` holds ``hf_model_type``, ``hf_dropout`` (the dropout
        probabilities the transformers model applies, by config field) and ``notes`` (a tuple
        of strings).

    Raises
    ------
    InvalidValueError
        Missing, unreadable or non-regular file, not JSON, not an object, over 4 MiB, a missing
        field (named), a field of the wrong type (booleans are not numbers), a size above its
        limit (named).
    UnknownNameError
        An unsupported model type (the accepted ones are listed).

    References
    ----------
    transformers 5.24.0 ``models/<model_type>/configuration_<model_type>.py`` and
    ``modeling_<model_type>.py`` (hf-transformers-5).

    Examples
    --------
    >>> import json, tempfile, os
    >>> from memsym.model import parameter_count
    >>> cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    ...        "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     fn = os.path.join(tmp, "config.json")
    ...     with open(fn, "w") as fh:
    ...         json.dump(cfg, fh)
    ...     parameter_count(from_hf_config(fn))
    6738415616
    """
    data, where = _read_json(path)
    c = _Cfg(data, printable(os.path.basename(os.path.dirname(where)) + "/config.json"
                             if os.path.dirname(where) else where, 120))
    mtype = data.get("model_type")
    archs = data.get("architectures")
    if not isinstance(mtype, str) or mtype not in _DEFAULTS:
        if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] in _HF_ARCHS:
            mtype = _HF_ARCHS[archs[0]]
        elif mtype is None:
            raise c._bad("missing field 'model_type' (and no known 'architectures' entry); "
                         f"accepted: {', '.join(HF_MODEL_TYPES)}")
        elif not isinstance(mtype, str):
            raise c._bad(f"field 'model_type' must be a string, got {type(mtype).__name__}; "
                         f"accepted: {', '.join(HF_MODEL_TYPES)}")
        elif mtype == "gemma3":
            raise c._bad("model_type 'gemma3' is the vision-language model; give its text part "
                         "(model_type 'gemma3_text', the fields of text_config)")
        else:
            raise UnknownNameError("config.json model_type", mtype, HF_MODEL_TYPES,
                                   limit=len(HF_MODEL_TYPES))
    raw_name = data.get("_name_or_path")
    if raw_name is not None and not isinstance(raw_name, str):
        raise c._bad(f"field '_name_or_path' must be a string, got {type(raw_name).__name__}")
    name = printable(raw_name or mtype, 64)
    tied = c.bool("tie_word_embeddings", _DEFAULTS[mtype][0])
    notes: list = []
    kw = _READERS.get(mtype, _read_llama_like)(c, mtype, notes)
    dropout = {k: c.probability(k, dflt) for k, dflt in _DROPOUT[mtype].items()}
    kw.update(name=name, untie_embeddings_and_output_weights=not tied,
              extra={"hf_model_type": mtype, "hf_dropout": dropout, "notes": tuple(notes)})
    return resolve(Architecture(**kw))
