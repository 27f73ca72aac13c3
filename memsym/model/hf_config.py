"""The Hugging Face ``config.json`` reader."""

from __future__ import annotations

import json
import os



from ..errors import InvalidValueError, UnknownNameError
from .architecture import Architecture, resolve

# ----------------------------------------------------------------------------------------------
# Hugging Face config.json
# ----------------------------------------------------------------------------------------------

__all__ = ["from_hf_config"]


_MAX_CONFIG_BYTES = 4 * 1024 * 1024   # a config.json is a few KB; refuse anything far larger

# model_type -> default of tie_word_embeddings when the file omits it (transformers' config classes)
_HF_TYPES = {"llama": False, "mistral": False, "mixtral": False, "qwen2": False, "qwen3": False,
             "qwen2_moe": False, "qwen3_moe": False, "deepseek_v2": False, "deepseek_v3": False,
             "gpt_oss": False,
             "gpt2": True, "gpt_neox": False}
_HF_ARCHS = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
             "MixtralForCausalLM": "mixtral", "Qwen2ForCausalLM": "qwen2",
             "Qwen3ForCausalLM": "qwen3", "Qwen2MoeForCausalLM": "qwen2_moe",
             "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV2ForCausalLM": "deepseek_v2",
             "DeepseekV3ForCausalLM": "deepseek_v3",
             "GptOssForCausalLM": "gpt_oss", "GPT2LMHeadModel": "gpt2",
             "GPTNeoXForCausalLM": "gpt_neox"}


class _Cfg:
    """Typed access to a parsed config dict; every refusal names the field and the file."""

    def __init__(self, data: dict, where: str):
        self.data, self.where = data, where

    def _bad(self, msg: str):
        return InvalidValueError(f"{self.where}: {msg}")

    def int(self, key, default=..., allow_zero=False):
        if key not in self.data or self.data[key] is None:
            if default is ...:
                raise self._bad(f"missing field {key!r}")
            return default
        val = self.data[key]
        if isinstance(val, bool) or not isinstance(val, int):
            raise self._bad(f"field {key!r} must be a whole number, got {type(val).__name__} "
                            f"{str(val)[:40]!r}")
        if val < 0 or (val == 0 and not allow_zero):
            raise self._bad(f"field {key!r} must be {'>= 0' if allow_zero else '> 0'}, got {val}")
        return val

    def bool(self, key, default):
        if key not in self.data or self.data[key] is None:
            return default
        val = self.data[key]
        if not isinstance(val, bool):
            raise self._bad(f"field {key!r} must be true or false, got {str(val)[:40]!r}")
        return val

    def int_list(self, key):
        val = self.data.get(key) or []
        if not isinstance(val, list) or any(isinstance(v, bool) or not isinstance(v, int)
                                            for v in val):
            raise self._bad(f"field {key!r} must be a list of whole numbers")
        return val


def _read_json(path) -> dict:
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidValueError(f"a config path must be a string, got {type(path).__name__}")
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not os.path.isfile(path):
        raise InvalidValueError(f"no such config file: {path[:200]!r}")
    size = os.path.getsize(path)
    if size > _MAX_CONFIG_BYTES:
        raise InvalidValueError(f"{path[:200]!r} is {size} bytes; a config.json is refused above "
                                f"{_MAX_CONFIG_BYTES} bytes")

    def _no_constants(name):  # NaN / Infinity are not JSON and not sizes
        raise ValueError(f"non-finite number {name}")

    try:
        with open(path, "rb") as fh:
            raw = fh.read(_MAX_CONFIG_BYTES + 1)
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidValueError(f"{path[:200]!r} is not valid JSON ({str(exc).splitlines()[0][:80]})")
    except OSError as exc:
        raise InvalidValueError(f"cannot read {path[:200]!r}: {exc.strerror}")
    if not isinstance(data, dict):
        raise InvalidValueError(f"{path[:200]!r} must hold a JSON object, got {type(data).__name__}")
    return data, path


def from_hf_config(path) -> Architecture:
    """Read a local Hugging Face ``config.json`` into an :class:`Architecture` (no network).

    Supported ``model_type`` (or ``architectures[0]``): llama, mistral, mixtral, qwen2, qwen3,
    qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss, gpt2, gpt_neox.  The file is parsed
    as JSON only; nothing in it is evaluated.

    Parameters
    ----------
    path : str or os.PathLike
        The ``config.json`` file, or a directory holding one.

    Raises
    ------
    InvalidValueError
        Missing or unreadable file, not JSON, not an object, over 4 MiB, a missing field (named),
        a field of the wrong type (booleans are not numbers), an unsupported model type.

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
    c = _Cfg(data, os.path.basename(os.path.dirname(where)) + "/config.json"
             if os.path.dirname(where) else where)
    mtype = data.get("model_type")
    archs = data.get("architectures")
    if not isinstance(mtype, str) or mtype not in _HF_TYPES:
        if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] in _HF_ARCHS:
            mtype = _HF_ARCHS[archs[0]]
        elif mtype is None:
            raise c._bad("missing field 'model_type' (and no known 'architectures' entry); "
                         f"accepted: {', '.join(sorted(_HF_TYPES))}")
        else:
            raise UnknownNameError("config.json model_type", mtype, list(_HF_TYPES))
    name = str(data.get("_name_or_path") or mtype)[:80] or mtype
    tied = c.bool("tie_word_embeddings", _HF_TYPES[mtype])

    if mtype == "gpt2":
        hs = c.int("n_embd")
        return resolve(Architecture(
            name=name, num_layers=c.int("n_layer"), hidden_size=hs,
            num_attention_heads=c.int("n_head"), ffn_hidden_size=c.int("n_inner", 4 * hs),
            vocab_size=c.int("vocab_size"), max_position_embeddings=c.int("n_positions"),
            untie_embeddings_and_output_weights=not tied, add_bias_linear=True))
    if mtype == "gpt_neox":
        return resolve(Architecture(
            name=name, num_layers=c.int("num_hidden_layers"), hidden_size=c.int("hidden_size"),
            num_attention_heads=c.int("num_attention_heads"),
            ffn_hidden_size=c.int("intermediate_size"), vocab_size=c.int("vocab_size"),
            untie_embeddings_and_output_weights=not tied, position_embedding_type="rope",
            max_position_embeddings=c.int("max_position_embeddings", None),
            add_bias_linear=c.bool("attention_bias", True)))

    hs, heads = c.int("hidden_size"), c.int("num_attention_heads")
    kw = dict(name=name, num_layers=c.int("num_hidden_layers"), hidden_size=hs,
              num_attention_heads=heads, num_query_groups=c.int("num_key_value_heads", heads),
              kv_channels=c.int("head_dim", None), ffn_hidden_size=c.int("intermediate_size"),
              swiglu=True, normalization="RMSNorm", vocab_size=c.int("vocab_size"),
              untie_embeddings_and_output_weights=not tied, position_embedding_type="rope",
              max_position_embeddings=c.int("max_position_embeddings", None),
              add_bias_linear=False)
    if mtype in ("llama", "mistral", "mixtral", "qwen3", "qwen3_moe"):
        attn_bias = c.bool("attention_bias", False)
        mlp_bias = c.bool("mlp_bias", False)
        if attn_bias != mlp_bias:
            raise c._bad("attention_bias and mlp_bias differ; memsym models biases on all linear "
                         "layers or on none (add_bias_linear)")
        kw["add_bias_linear"] = attn_bias
    if mtype in ("qwen2", "qwen2_moe"):
        kw["add_qkv_bias"] = True          # Qwen2 attention: q, k, v with bias, o without
    if mtype in ("qwen3", "qwen3_moe"):
        kw["qk_layernorm"] = True
    if mtype == "mixtral":
        kw.update(num_experts=c.int("num_local_experts"), moe_router_topk=c.int("num_experts_per_tok"),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"], moe_router_bias=False)
    if mtype in ("qwen2_moe", "qwen3_moe"):
        n_layers = kw["num_layers"]
        n_exp = c.int("num_experts")
        step = c.int("decoder_sparse_step", 1)
        dense_only = set(c.int_list("mlp_only_layers"))
        # transformers: layer i is sparse iff i not in mlp_only_layers and (i + 1) % step == 0
        pattern = tuple(int(i not in dense_only and (i + 1) % step == 0) for i in range(n_layers))
        kw.update(num_experts=n_exp, moe_router_topk=c.int("num_experts_per_tok"),
                  moe_ffn_hidden_size=c.int("moe_intermediate_size"), moe_layer_freq=pattern,
                  moe_router_bias=False)
        if mtype == "qwen2_moe":
            kw.update(moe_shared_expert_intermediate_size=c.int(
                "shared_expert_intermediate_size", 0, allow_zero=True) or None,
                moe_shared_expert_gate=True)
    if mtype in ("deepseek_v2", "deepseek_v3"):
        n_layers = kw["num_layers"]
        first_dense = c.int("first_k_dense_replace", 0, allow_zero=True)
        freq = c.int("moe_layer_freq", 1)
        n_shared = c.int("n_shared_experts", 0, allow_zero=True)
        moe_f = c.int("moe_intermediate_size")
        pattern = tuple(int(i >= first_dense and i % freq == 0) for i in range(n_layers))
        kw.update(num_query_groups=heads, kv_channels=c.int("v_head_dim"),
                  num_experts=c.int("n_routed_experts"), moe_router_topk=c.int("num_experts_per_tok"),
                  moe_ffn_hidden_size=moe_f, moe_layer_freq=pattern,
                  moe_shared_expert_intermediate_size=n_shared * moe_f or None,
                  multi_latent_attention=True, q_lora_rank=c.int("q_lora_rank", None),
                  kv_lora_rank=c.int("kv_lora_rank"), qk_head_dim=c.int("qk_nope_head_dim"),
                  qk_pos_emb_head_dim=c.int("qk_rope_head_dim"), v_head_dim=c.int("v_head_dim"),
                  mtp_num_layers=c.int("num_nextn_predict_layers", 0, allow_zero=True),
                  # noaux_tc routing keeps a learned per-expert score bias (a parameter in HF)
                  moe_router_bias=data.get("topk_method") == "noaux_tc")
    if mtype == "gpt_oss":
        n_exp = c.int("num_local_experts")
        kw.update(add_bias_linear=c.bool("attention_bias", True), attention_sinks=True,
                  num_experts=n_exp,
                  moe_router_topk=c.int("num_experts_per_tok", None) or c.int("experts_per_token"),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"])
    return resolve(Architecture(**kw))
