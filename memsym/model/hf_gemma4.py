"""Gemma 4's text model (``gemma4_text``, and the language model of a ``gemma4`` file), read as
transformers 5.25.0 builds it (``models/gemma4/modeling_gemma4.py``), where memsym's
:class:`~memsym.model.architecture.Architecture` can hold it.

A Gemma 4 decoder layer (``Gemma4TextDecoderLayer``) is a Gemma 3 layer (input,
post-attention, pre- and post-feedforward RMSNorms; a gated MLP; q_norm and k_norm of the head
width) with a weightless v_norm and a ``layer_scalar`` buffer, neither a parameter.

The full-attention layers' own head width and KV heads (``global_head_dim``, with
``attention_k_eq_v`` ``num_global_key_value_heads``, or an explicit ``per_layer_config``) and
their missing v_proj under ``attention_k_eq_v`` make them ``"global"`` entries of
``layer_mixers`` (:func:`memsym.model.counts.global_attention_parts`), the sliding layers
``"attention"`` of the model's shape.  Per-layer input embeddings
(``hidden_size_per_layer_input`` p, default 256: a packed ``vocab_size_per_layer_input`` x L p
table, a model projection h -> L p with a norm of p, each layer's gate h -> p, projection
p -> h and norm of h) are ``per_layer_input_size`` and ``per_layer_input_vocab``
(:func:`memsym.model.per_layer_inputs.per_layer_model_parts`, their activations
:mod:`memsym.terms.gemma4_ple`).  ``num_kv_shared_layers`` (the last layers reuse an earlier
layer's keys and values and build no k_proj, v_proj, k_norm; with ``use_double_wide_mlp``
their MLP is twice as wide) are ``"kv_reuse"`` / ``"global_kv_reuse"`` layers
(:mod:`memsym.model.kv_sharing`, their activations :mod:`memsym.terms.kv_sharing`).

``enable_moe_block`` is every layer alike: the dense MLP beside the experts is held as a
shared expert of ``intermediate_size`` (no gate), ``Gemma4TextRouter``'s weightless norm times
its learned ``scale`` of h is an RMSNorm of h (a norm), its ``per_expert_scale`` E values per
router (counted where a router bias is), and the three more norms
(``post_feedforward_layernorm_1``/``_2``, ``pre_feedforward_layernorm_2``) are norms.  Under
transformers' own code its activations are the dense layer's plus
:func:`memsym.terms.gemma4_moe.gemma4_moe_block` (``memsym.training.layer_model``).
"""

from __future__ import annotations

from .hf_decoders import decoder_fields
from .hf_fields import ConfigFields

__all__ = ["read_gemma4"]

_TYPES = ("sliding_attention", "full_attention")
# Gemma4TextConfig.__post_init__: global_head_dim = kwargs.pop("global_head_dim", 512)
_GLOBAL_HEAD_DIM = 512
# the per_layer_config overrides Gemma4TextAttention reads (layer_config.head_dim,
# layer_config.num_key_value_heads); Gemma4TextMLP and the decoder layer read the global config
_LAYER_KEYS = ("head_dim", "num_key_value_heads")


def _layer_types(c: ConfigFields, n_layers: int) -> list:
    """``layer_types``, or Gemma4TextConfig's default (every 6th layer full attention); the
    last layer forced to full attention as ``__post_init__`` forces it."""
    val = c.data.get("layer_types")
    if val is None:
        kinds = [_TYPES[int((i + 1) % 6 == 0)] for i in range(n_layers)]
    elif (not isinstance(val, list) or len(val) != n_layers
          or any(not isinstance(v, str) or v not in _TYPES for v in val)):
        raise c._bad(f"field 'layer_types' must list {n_layers} layer types, each one of "
                     f"{', '.join(_TYPES)}")
    else:
        kinds = list(val)
    kinds[-1] = "full_attention"
    return kinds


def _layer_sizes(c: ConfigFields, kinds: list, head_dim: int, kv_heads: int,
                 k_eq_v: bool) -> list:
    """Each layer's (head width, KV heads) as Gemma4TextAttention reads them from
    ``config.per_layer_config[layer_idx]``."""
    sizes = [(head_dim, kv_heads)] * len(kinds)
    plc = c.data.get("per_layer_config")
    if "per_layer_config" in c.data and plc is None:
        # a per_layer_config key, null included, skips __post_init__'s global overrides
        # (configuration_gemma4.py:207): every layer keeps head_dim and its KV heads
        return sizes
    if plc is None:
        # __post_init__: the full-attention layers get global_head_dim and, with
        # attention_k_eq_v, num_global_key_value_heads (when given)
        glob_hd = c.int("global_head_dim", _GLOBAL_HEAD_DIM)
        glob_kv = c.int("num_global_key_value_heads", None) if k_eq_v else None
        full = (glob_hd, kv_heads if glob_kv is None else glob_kv)
        return [full if k == "full_attention" else s for k, s in zip(kinds, sizes)]
    if not isinstance(plc, dict):
        raise c._bad(f"field 'per_layer_config' must be an object, got {type(plc).__name__}")
    for key, over in plc.items():
        # _apply_heterogeneous_config: int(layer_idx) of each key, in [0, L)
        if not (isinstance(key, str) and key.isdigit() and len(key) <= 6
                and int(key) < len(kinds)):
            raise c._bad(f"field 'per_layer_config' keys must be layer indices below "
                         f"{len(kinds)}, got {key[:20]!r}")
        if not isinstance(over, dict) or any(k not in _LAYER_KEYS for k in over):
            raise c._bad(f"per_layer_config[{key}] overrides other than {', '.join(_LAYER_KEYS)} "
                         "are not modelled")
        fields = ConfigFields(over, f"{c.where} per_layer_config[{key}]")
        i = int(key)
        sizes[i] = (fields.int("head_dim", head_dim), fields.int("num_key_value_heads", kv_heads))
    return sizes


def _global_layers(c: ConfigFields, kinds: list, sizes: list, k_eq_v: bool) -> dict:
    """Architecture keyword arguments of the layer shapes: the sliding layers' head width and
    KV heads as the model's, and the full-attention layers as ``"global"`` entries of
    ``layer_mixers`` where their shape differs or they build no v_proj (none where every layer
    is alike)."""
    by_type: dict = {}
    for i, (kind, size) in enumerate(zip(kinds, sizes)):
        if by_type.setdefault(kind, size) != size:
            # Gemma4TextRotaryEmbedding reads config.get_full_layer_config(layer_type), which
            # transformers refuses where one type's layers differ
            raise c._bad(f"per_layer_config gives layer {i} ({kind}) another head size than "
                         "the other layers of its type; transformers refuses it (not "
                         "homogeneous across layers)")
    # __post_init__ forces the last layer to full attention: there is always one
    full = by_type["full_attention"]
    base = by_type.get("sliding_attention", full)
    # Gemma4TextAttention: use_alternative_attention = attention_k_eq_v and not is_sliding
    kw = dict(kv_channels=base[0], num_query_groups=base[1])
    if full != base or k_eq_v:
        kw.update(layer_mixers=tuple("global" if k == "full_attention" else "attention"
                                     for k in kinds),
                  global_kv_channels=full[0], global_num_query_groups=full[1],
                  global_v_proj=not k_eq_v)
    return kw


def _kv_sharing(c: ConfigFields, kinds: list, kw: dict, notes: list) -> None:
    """``num_kv_shared_layers``: the last layers reuse the keys and values of the last earlier
    layer of their type (``Gemma4TextConfig.kv_sharing_modes``), ``"kv_reuse"`` (or
    ``"global_kv_reuse"`` where the full-attention layers are ``"global"``) entries of
    ``layer_mixers``; ``use_double_wide_mlp`` makes their MLP 2f wide."""
    n_layers = len(kinds)
    shared = c.int("num_kv_shared_layers", 0, allow_zero=True)
    if not shared:
        return
    first = n_layers - shared
    if first <= 0:
        # configuration_gemma4.py:225-227 (kv_sharing_modes): every layer "reuse", none
        # computing keys and values to reuse
        raise c._bad(f"num_kv_shared_layers {shared} of {n_layers} layers leaves no layer "
                     "computing the keys and values the shared layers reuse")
    missing = sorted(set(kinds) - set(kinds[:first]))
    if missing:
        # configuration_gemma4.py:223-238 (kv_sharing_modes) raises ValueError on it
        raise c._bad(f"num_kv_shared_layers {shared}: no layer before the shared ones is "
                     f"{missing[0]}; transformers refuses it (the layer types producing a "
                     "cache differ from those using it)")
    mixers = kw.get("layer_mixers") or ("attention",) * n_layers
    # Gemma4TextAttention: a "reuse" layer builds q_proj, q_norm, o_proj alone; Gemma4TextMLP:
    # intermediate_size * 2 where use_double_wide_mlp and the layer reuses (lines 1051-1060)
    kw.update(layer_mixers=tuple(("global_kv_reuse" if m == "global" else "kv_reuse")
                                 if i >= first else m for i, m in enumerate(mixers)),
              kv_reuse_wide_mlp=c.bool("use_double_wide_mlp", False))
    notes.append(f"num_kv_shared_layers {shared}: the last {shared} layers reuse keys and "
                 "values without k_proj, v_proj, k_norm; what they keep as transformers' "
                 "Gemma4TextDecoderLayer keeps it, under any framework")


def _per_layer_inputs(c: ConfigFields, kw: dict, notes: list) -> None:
    """Per-layer input embeddings (``hidden_size_per_layer_input`` p, Gemma4TextConfig's
    default 256; 0 or null builds none): Architecture's ``per_layer_input_size`` and
    ``per_layer_input_vocab`` (``vocab_size_per_layer_input``, default 262144)."""
    # Gemma4TextModel.__init__ / Gemma4TextDecoderLayer.__init__ build them where
    # config.hidden_size_per_layer_input is truthy (modeling_gemma4.py:1346, 1566)
    ple = c.int("hidden_size_per_layer_input", 256, allow_zero=True, null=0)
    if ple:
        kw.update(per_layer_input_size=ple,
                  per_layer_input_vocab=c.int("vocab_size_per_layer_input", 262144))
        notes.append(f"per-layer input embeddings (hidden_size_per_layer_input {ple}): "
                     "their activations as transformers' Gemma4TextModel keeps them, under "
                     "any framework; their GEMMs and the table's gather are not in the step "
                     "time")


def read_gemma4(fields: ConfigFields, mtype: str, notes: list) -> dict:
    """Gemma 4's text model as transformers 5.25.0 builds it: Architecture keyword arguments.

    Parameters and result as :func:`~memsym.model.hf_decoders.read_llama_like`'s (``mtype`` is
    ``"gemma4_text"``).  Full-attention layers of their own head sizes or without v_proj are
    ``"global"`` mixers, KV-sharing layers ``"kv_reuse"`` / ``"global_kv_reuse"``, per-layer
    input embeddings ``per_layer_input_size``.

    References
    ----------
    transformers 5.25.0 ``models/gemma4/configuration_gemma4.py`` (Gemma4TextConfig's defaults
    and ``__post_init__``) and ``modeling_gemma4.py`` (Gemma4TextAttention, Gemma4TextMLP,
    Gemma4TextRouter, Gemma4TextExperts, Gemma4TextDecoderLayer, Gemma4TextModel)
    (hf-transformers-5-25).

    Examples
    --------
    >>> c = ConfigFields({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    ...                   "intermediate_size": 96, "vocab_size": 128, "head_dim": 16,
    ...                   "global_head_dim": 16, "hidden_size_per_layer_input": 0},
    ...                  "config.json")
    >>> kw = read_gemma4(c, "gemma4_text", [])
    >>> kw["kv_channels"], kw["num_query_groups"], kw["norms_per_layer"]
    (16, 4, 4)
    """
    c = fields
    kw = decoder_fields(c, mtype)
    if kw["kv_channels"] is None:
        # Gemma4TextConfig's head_dim is a strict int: transformers refuses a null one
        raise c._bad("field 'head_dim' is null: Gemma4TextConfig takes a whole number (its "
                     "default 256)")
    n_layers = kw["num_layers"]
    kinds = _layer_types(c, n_layers)
    k_eq_v = c.bool("attention_k_eq_v", False)
    sizes = _layer_sizes(c, kinds, kw["kv_channels"], kw["num_query_groups"], k_eq_v)
    kw.update(_global_layers(c, kinds, sizes, k_eq_v))
    _kv_sharing(c, kinds, kw, notes)
    _per_layer_inputs(c, kw, notes)
    # Gemma4TextAttention: q, k, v, o bias=config.attention_bias; q_norm, k_norm
    # Gemma4RMSNorm(head_dim), v_norm with_scale=False (no weight); Gemma4RMSNorm: the fp32
    # normalised tensor times weight.float().  Gemma4TextMLP: gate, up, down, bias=False.
    kw.update(attention_bias=c.bool("attention_bias", False), norms_per_layer=4,
              norm_fp32_scale=True, qk_layernorm=True, qk_norm_fp32_scale=True)
    if c.bool("enable_moe_block", False):
        _moe_block(c, kw, notes)
    return kw


def _moe_block(c: ConfigFields, kw: dict, notes: list) -> None:
    """``enable_moe_block``: Gemma4TextRouter and Gemma4TextExperts beside the dense MLP in
    every layer, three more norms."""
    # Gemma4TextExperts: gate_up_proj E x 2 f_e x h, down_proj E x h x f_e (no bias);
    # its sizes default to None, on which transformers builds no model
    for key in ("num_experts", "top_k_experts", "moe_intermediate_size"):
        if c.data.get(key) is None:
            raise c._bad(f"enable_moe_block without {key!r}: Gemma4TextConfig's default None "
                         "builds no experts")
    kw.update(num_experts=c.int("num_experts"), moe_router_topk=c.int("top_k_experts"),
              moe_ffn_hidden_size=c.int("moe_intermediate_size"),
              # the dense Gemma4TextMLP beside the experts, of intermediate_size, no gate
              moe_shared_expert_intermediate_size=kw["ffn_hidden_size"],
              # Gemma4TextRouter.per_expert_scale: E learned values per router, where a
              # router's E biases are counted (its proj h x E has no bias)
              moe_router_bias=True,
              # 4 + post_feedforward_layernorm_1, post_feedforward_layernorm_2,
              # pre_feedforward_layernorm_2, and the router's norm (with_scale=False) times
              # its learned scale of h: an RMSNorm of h
              norms_per_layer=8)
    notes.append("enable_moe_block: the dense MLP beside the experts is held as a shared expert "
                 "of intermediate_size, the router's scale as an RMSNorm of h and its "
                 "per_expert_scale where a router bias is")
