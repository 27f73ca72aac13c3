"""A Hugging Face ``config.json`` file read safely, and typed access to its fields.

:func:`read_config_json` reads one local file as JSON only (bounded size, nesting and number
lengths; a directory means its ``config.json``; devices and FIFOs refused);
:class:`ConfigFields` gives each field typed, bounded and with the file named in every
refusal.  Split from :mod:`memsym.model.hf_config` (which reads the families) so that the
hybrid Mamba readers (:mod:`memsym.model.hf_hybrid`) share them.
"""

from __future__ import annotations

import json
import os

from .. import limits as _limits
from ..limits import MAX_NUMBER_CHARS, check_text
from ..errors import InvalidValueError
from .architecture import check_limit, printable

__all__ = ["ConfigFields", "read_config_json", "FIELD_LIMITS", "yarn_fields"]
# a config.json is a few KB; refuse anything far larger (memsym.limits, documented there)
from ..limits import MAX_CONFIG_JSON_BYTES as _MAX_CONFIG_BYTES  # noqa: E402

# config.json field -> the LIMITS entry that bounds it (checked as the value is read, before
# anything, such as a per-layer pattern, is built from it)
FIELD_LIMITS = {
    "num_hidden_layers": "num_layers", "n_layer": "num_layers", "num_layers": "num_layers",
    "first_k_dense_replace": "num_layers", "moe_layer_freq": "num_layers",
    "decoder_sparse_step": "num_layers",
    "hidden_size": "hidden_size", "n_embd": "hidden_size", "n_embed": "hidden_size",
    "num_attention_heads": "num_attention_heads", "n_head": "num_attention_heads",
    "num_key_value_heads": "num_query_groups", "num_kv_heads": "num_query_groups",
    "head_dim": "kv_channels",
    "intermediate_size": "ffn_hidden_size", "ffn_hidden_size": "ffn_hidden_size",
    "n_inner": "ffn_hidden_size", "dff": "ffn_hidden_size",
    "moe_intermediate_size": "moe_ffn_hidden_size",
    "shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "vocab_size": "vocab_size", "output_vocab_size": "vocab_size",
    "max_position_embeddings": "max_position_embeddings", "n_positions": "max_position_embeddings",
    "original_max_position_embeddings": "max_position_embeddings",
    "num_local_experts": "num_experts", "num_experts": "num_experts",
    "n_routed_experts": "num_experts", "n_shared_experts": "num_experts",
    "num_shared_experts": "num_experts", "num_dense_layers": "num_layers",
    "index_topk_freq": "num_layers", "index_skip_topk_offset": "num_layers",
    "num_experts_per_tok": "moe_router_topk", "experts_per_token": "moe_router_topk",
    # a grouped router's expert groups and the groups a token keeps: at most the experts
    "n_group": "num_experts", "topk_group": "num_experts",
    "q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_head_dim", "qk_rope_head_dim": "qk_pos_emb_head_dim",
    "v_head_dim": "v_head_dim", "num_nextn_predict_layers": "mtp_num_layers",
    "num_mtp_layers": "mtp_num_layers",
    "num_ln_in_parallel_attn": "norms_per_layer",
    "intermediate_size_mlp": "ffn_hidden_size", "interleave_moe_layer_step": "num_layers",
    "moe_num_experts": "num_experts", "moe_k": "moe_router_topk",
    "moe_num_shared_experts": "num_experts", "moe_layer_start_index": "num_layers",
    "moe_layer_end_index": "num_layers", "moe_layer_interval": "num_layers",
    # the hybrid Mamba / attention families (memsym.model.hf_hybrid)
    "mamba_d_state": "mamba_state_dim", "ssm_state_size": "mamba_state_dim",
    "mamba_n_heads": "mamba_num_heads", "mamba_num_heads": "mamba_num_heads",
    "mamba_n_groups": "mamba_num_groups", "n_groups": "mamba_num_groups",
    "mamba_d_conv": "mamba_conv_kernel", "conv_kernel": "mamba_conv_kernel",
    "mamba_dt_rank": "mamba_dt_rank", "mamba_expand": "mamba_num_groups",
    "expand": "mamba_num_groups", "mamba_d_ssm": "mamba_inner_size",
    "mamba_head_dim": "mamba_inner_size",
    # the pure Mamba / Mamba-2 spellings (memsym.model.hf_ssm)
    "state_size": "mamba_state_dim", "time_step_rank": "mamba_dt_rank",
    "num_heads": "mamba_num_heads",
    "moe_topk": "moe_router_topk",  # HunYuan MoE
    "shared_intermediate_size": "ffn_hidden_size",
    "moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "moe_latent_size": "moe_latent_size",
    "expert_layer_period": "num_layers", "expert_layer_offset": "num_layers",
    "attn_layer_period": "num_layers", "attn_layer_offset": "num_layers",
    # DBRX (top-level and its attn_config / ffn_config) and DeepSeek-V3.2's indexer
    "d_model": "hidden_size", "n_heads": "num_attention_heads", "n_layers": "num_layers",
    "attention_heads": "num_attention_heads",   # XGLM
    "max_seq_len": "max_position_embeddings", "kv_n_heads": "num_query_groups",
    "moe_top_k": "moe_router_topk",
    "index_n_heads": "dsa_index_heads", "index_head_dim": "dsa_index_head_dim",
    # Qwen3-Next's Gated DeltaNet layers
    "linear_num_key_heads": "gdn_key_heads", "linear_num_value_heads": "gdn_value_heads",
    "linear_key_head_dim": "gdn_key_head_dim", "linear_value_head_dim": "gdn_value_head_dim",
    "linear_conv_kernel_dim": "gdn_conv_kernel", "full_attention_interval": "num_layers",
    # LFM2's short-convolution layers and MLP width
    "conv_L_cache": "short_conv_kernel", "block_ff_dim": "ffn_hidden_size",
    "block_multiple_of": "ffn_hidden_size",
    # MiniMax-01's lightning-attention block
    "block_size": "lightning_block_size",
    # Zamba / Zamba2's shared blocks and Mamba layers (memsym.model.hf_zamba)
    "attention_head_dim": "kv_channels", "attention_hidden_size": "hidden_size",
    "n_mamba_heads": "mamba_num_heads", "mamba_ngroups": "mamba_num_groups",
    "num_mem_blocks": "shared_blocks", "adapter_rank": "shared_adapter_rank",
    # OPT
    "ffn_dim": "ffn_hidden_size", "word_embed_proj_dim": "hidden_size",
    # Command A MoE's dense layers
    "prefix_dense_intermediate_size": "ffn_hidden_size",
    # Gemma 4 (memsym.model.hf_gemma4)
    "global_head_dim": "kv_channels", "num_global_key_value_heads": "num_query_groups",
    "num_kv_shared_layers": "num_layers", "hidden_size_per_layer_input": "hidden_size",
    "vocab_size_per_layer_input": "vocab_size",
    "top_k_experts": "moe_router_topk",
}

# the fields that are a config.json's decoder-layer count: bounded by memsym.limits'
# "config_layers" (2^8) besides "layers" (a per-layer pattern makes every stage distinct)
_LAYER_COUNTS = frozenset({"num_hidden_layers", "n_layer", "num_layers", "n_layers"})

_MISSING = object()


class NonFinite:
    """A config.json's ``NaN`` / ``Infinity`` / ``-Infinity`` (Python's JSON dialect): no
    number, string or list to any accessor of :class:`ConfigFields` (each refuses it naming
    its key), harmless in a field memsym does not read."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


def _real(value) -> bool:
    """An int or a float, not a boolean (JSON's numbers)."""
    return not isinstance(value, bool) and isinstance(value, (int, float))


class ConfigFields:
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
            check_limit(FIELD_LIMITS[key], val, f"field {key!r}")
            if key in _LAYER_COUNTS:
                # a config.json model may carry a per-layer pattern: its own, lower bound
                _limits.check_limit("config_layers", val, f"field {key!r}")
            return val
        except InvalidValueError as exc:
            raise self._bad(str(exc)) from None

    def _value(self, key, default, ok, kind, convert=None, shown=None):
        """The field's value if ``ok(value)``, converted; ``default`` when absent or null; else
        an error saying it must be ``kind`` (and what it is: ``shown(value)``, default its
        repr)."""
        key, val = self._get(key)
        if val is _MISSING or val is None:
            return default
        if not ok(val):
            got = shown(val) if shown else printable(repr(val), 40)
            raise self._bad(f"field {key!r} must be {kind}, got {got}")
        return convert(val) if convert else val

    def bool(self, key, default):
        return self._value(key, default, lambda v: isinstance(v, bool), "true or false")

    def probability(self, key, default):
        """A dropout probability in [0, 1]; ``default`` when absent or null."""
        return self._value(key, default, lambda v: _real(v) and 0 <= v <= 1,
                           "a probability between 0 and 1", float)

    def positive(self, key, default):
        """A finite number > 0 (an int or a float, not a boolean); ``default`` when absent or
        null (GPT-OSS's ``swiglu_limit``)."""
        return self._value(key, default, lambda v: _real(v) and 0 < v < 1e30, "a number > 0",
                           float)

    def str(self, key, default):
        return self._value(key, default, lambda v: isinstance(v, str), "a string",
                           shown=lambda v: type(v).__name__)

    def object(self, key) -> dict:
        """A nested object (a JSON object: DBRX's ``attn_config``, a multimodal file's
        ``text_config``); an empty dict when absent or null."""
        return self._value(key, {}, lambda v: isinstance(v, dict), "an object",
                           shown=lambda v: type(v).__name__)

    def layer_int(self, keys, default=...):
        """A whole number that a config may also give once per layer (transformers'
        HunYuan MoE reads ``moe_topk[layer_idx]`` when it is a list): a list of one repeated
        value reads as that value; different values per layer are refused in one line, since
        memsym's Architecture holds one value for every layer."""
        key, val = self._get(keys)
        if not isinstance(val, list):
            return self.int(keys, default)
        most = _limits.LIMITS["config_layers"].maximum
        if not val or len(val) > most:
            raise self._bad(f"field {key!r} as a per-layer list must hold 1 to {most} values")
        if any(v != val[0] or isinstance(v, bool) != isinstance(val[0], bool) for v in val):
            raise self._bad(f"field {key!r} differs between layers "
                            f"({printable(repr(val), 40)}): memsym models one value for every "
                            "layer")
        return ConfigFields({key: val[0]}, self.where).int(key, default)

    def int_list(self, key):
        """A list of layer indices, at most the config_layers limit long (memsym.limits)."""
        val = self.data.get(key) or []
        most = _limits.LIMITS["config_layers"].maximum
        if (not isinstance(val, list) or len(val) > most
                or any(isinstance(v, bool) or not isinstance(v, int) for v in val)):
            raise self._bad(f"field {key!r} must be a list of at most {most} whole numbers "
                            "(layer indices)")
        return val

    def sparse_step_layers(self, n_layers: int) -> tuple:
        """Qwen's MoE pattern (1: an MoE layer): layer i is sparse iff i is not in
        ``mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0`` (transformers'
        Qwen2MoeDecoderLayer, Qwen3MoeDecoderLayer, Qwen3NextDecoderLayer)."""
        step = self.int("decoder_sparse_step", 1)
        dense_only = set(self.int_list("mlp_only_layers"))
        return tuple(int(i not in dense_only and (i + 1) % step == 0) for i in range(n_layers))


#: Megatron-core's MLATransformerConfig defaults of the YaRN fields a DeepSeek-style
#: (multi-latent attention) config's ``rope_scaling`` leaves out (transformer_config.py:3315,
#: 3327, 3330 at Megatron-LM d98e8a64dd): the Bridge sets only the keys the file gives.
_MLA_YARN_DEFAULTS = {"factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.0}


def yarn_fields(fields: ConfigFields, mla: bool) -> dict:
    """A config's YaRN ``rope_scaling`` as Megatron-core's ``yarn_*`` fields of ``extra`` [1].

    Megatron-Bridge maps a ``rope_scaling`` (or transformers 5's ``rope_parameters``) whose
    ``type`` / ``rope_type`` is ``"yarn"`` onto the provider key by key
    (``YARN_ROPE_SCALING_MAPPING``: factor, original_max_position_embeddings, mscale,
    mscale_all_dim to ``yarn_rotary_scaling_factor``, ... ``yarn_mscale_all_dim``; a key the
    file leaves out stays None, GPTModelProvider's default), and a multi-latent-attention
    model's onto MLATransformerConfig's ``rotary_scaling_factor``, ``mscale``,
    ``mscale_all_dim`` (``MLA_ROPE_SCALING_MAPPING``; a key left out keeps that config's
    default 40, 1.0, 0.0).  Both reach RoPE as the same concentration factor
    (:func:`memsym.timing.rope.yarn_concentration`, which reads the ``yarn_*`` names).  Any
    other rope type: nothing.

    Parameters
    ----------
    fields : ConfigFields
        The config (its ``rope_scaling`` or ``rope_parameters`` object).
    mla : bool
        The model has multi-latent attention (the Bridge's MLA provider).

    Returns
    -------
    dict
        ``yarn_rotary_scaling_factor`` [1], ``yarn_mscale`` [1], ``yarn_mscale_all_dim`` [1],
        ``yarn_original_max_position_embeddings`` [tokens], where set.

    Examples
    --------
    DeepSeek-V3's config.json (factor 40, mscale 1.0, mscale_all_dim 1.0):

    >>> c = ConfigFields({"rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0,
    ...     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}}, "config.json")
    >>> sorted(yarn_fields(c, True).items())  # doctest: +NORMALIZE_WHITESPACE
    [('yarn_mscale', 1.0), ('yarn_mscale_all_dim', 1.0),
     ('yarn_original_max_position_embeddings', 4096), ('yarn_rotary_scaling_factor', 40.0)]

    References
    ----------
    .. [megatron-bridge] Megatron-Bridge 067f987df0 models/conversion/model_bridge.py:501-523,
       590-632 (the mappings, rope_type "yarn" only).
    """
    scaling = fields.data.get("rope_scaling") or fields.data.get("rope_parameters")
    if not isinstance(scaling, dict) or (scaling.get("type")
                                         or scaling.get("rope_type")) != "yarn":
        return {}
    rs = ConfigFields(scaling, f"{fields.where} rope_scaling")
    dflt = _MLA_YARN_DEFAULTS if mla else {}

    def number(key):  # mscale 0 is Megatron's mscale_all_dim default: >= 0
        return rs._value(key, dflt.get(key), lambda v: _real(v) and 0 <= v < 1e30,
                         "a number >= 0", float)
    out = {"yarn_rotary_scaling_factor": rs.positive("factor", dflt.get("factor")),
           "yarn_mscale": number("mscale"), "yarn_mscale_all_dim": number("mscale_all_dim"),
           "yarn_original_max_position_embeddings": rs.int("original_max_position_embeddings",
                                                           None)}
    return {k: v for k, v in out.items() if v is not None}


def read_config_json(path) -> dict:
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

    def _no_constants(name):
        # NaN / Infinity are not JSON but Python's json.dump writes them, and published files
        # carry them (nvidia/Nemotron-H-8B-Base-8K's "time_step_limit": [0.0, Infinity]): kept
        # as a marker no size accessor accepts, so a field memsym reads is refused by name
        return NonFinite(name)

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

