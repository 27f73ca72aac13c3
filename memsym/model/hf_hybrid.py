"""The hybrid Mamba / attention ``config.json`` families: Jamba, Bamba, Falcon-H1, Nemotron-H and
Granite 4.0 (``granitemoehybrid``); Qwen3-Next's Gated DeltaNet / gated-attention hybrid and
LFM2's short-convolution / attention hybrid; MiniMax-01's lightning / softmax attention MoE.

Each reader returns :class:`~memsym.model.architecture.Architecture` keyword arguments with the
per-layer mixers (``layer_mixers``), the layers that have an MLP or MoE block (``ffn_layers``)
and the Mamba sizes, read with the defaults of transformers' config class and the modules its
``modeling_<type>.py`` builds (transformers 5.24.0), so that the parameter count equals
``sum(p.numel())`` of ``AutoModelForCausalLM.from_config`` on the meta device
(``tests/test_hf_hybrid.py``).  :func:`memsym.model.hf_config.from_hf_config` dispatches here.
"""

from __future__ import annotations

from .. import limits as _limits
from .architecture import printable
from .hf_fields import ConfigFields

__all__ = ["HYBRID_TYPES", "HYBRID_READERS", "mamba2_fields", "gdn_fields", "layer_types_field"]

# transformers' legacy layer-type names (configuration_utils._LEGACY_LAYER_TYPE_REMAP)
_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}
# Nemotron-H's hybrid_override_pattern characters (NemotronHConfig._pattern_to_list)
_PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}


def _core(c: ConfigFields, kv_default, max_pos: int, ffn=...) -> dict:
    """The sizes every hybrid family spells the same way (core sizes required); RMSNorm, RoPE."""
    heads = c.int("num_attention_heads")
    hs = c.int("hidden_size")
    return dict(num_layers=c.int("num_hidden_layers"), hidden_size=hs, num_attention_heads=heads,
                num_query_groups=c.int("num_key_value_heads",
                                       heads if kv_default is None else kv_default, null=heads),
                # the attention modules: getattr(config, "head_dim", h // a)
                kv_channels=c.int("head_dim", None, null=None),
                ffn_hidden_size=c.int("intermediate_size", ffn), swiglu=True, normalization="RMSNorm",
                vocab_size=c.int("vocab_size"), position_embedding_type="rope",
                max_position_embeddings=c.int("max_position_embeddings", max_pos),
                add_bias_linear=False, attention_bias=False)


def mamba2_fields(fields: ConfigFields, d_inner: int, *, heads, groups, state, conv, conv_bias,
                  defaults: tuple) -> dict:
    """The Architecture keyword arguments of a Mamba-2 mixer read from a config.json.

    ``heads``, ``groups``, ``state``, ``conv`` and ``conv_bias`` name the family's fields (a
    name or a tuple of alternatives), ``defaults`` = (heads, groups, state, conv) its config
    class's defaults; ``d_inner`` must split into the groups (transformers cannot run it
    otherwise).

    Examples
    --------
    >>> c = ConfigFields({"num_heads": 8, "n_groups": 2, "state_size": 16}, "config.json")
    >>> kw = mamba2_fields(c, 128, heads="num_heads", groups="n_groups", state="state_size",
    ...                    conv="conv_kernel", conv_bias="use_conv_bias", defaults=(128, 8, 128, 4))
    >>> kw["mamba_num_heads"], kw["mamba_num_groups"], kw["mamba_state_dim"], kw["mamba_conv_kernel"]
    (8, 2, 16, 4)
    """
    c = fields
    n_heads, n_groups, n_state, n_conv = defaults
    kw = dict(mamba_version=2, mamba_inner_size=d_inner,
              mamba_num_heads=c.int(heads, n_heads), mamba_num_groups=c.int(groups, n_groups),
              mamba_state_dim=c.int(state, n_state), mamba_conv_kernel=c.int(conv, n_conv),
              mamba_conv_bias=c.bool(conv_bias, True))
    if d_inner % kw["mamba_num_groups"]:
        # the gated RMSNorm and the scan split d_inner into n_groups: transformers cannot run it
        raise c._bad(f"the Mamba inner size {d_inner} is not a multiple of its "
                     f"{kw['mamba_num_groups']} groups")
    return kw


def gdn_fields(fields: ConfigFields, key_heads: int, value_heads: int) -> dict:
    """The Gated DeltaNet's sizes of a config.json (``linear_*``), the value heads a multiple
    of the key heads (refused in one line otherwise: the layer splits the value heads over
    the key heads).

    Parameters
    ----------
    fields : ConfigFields
        The config.json's fields.
    key_heads, value_heads : int
        The config class's defaults of ``linear_num_key_heads`` / ``linear_num_value_heads``
        [heads].

    Examples
    --------
    >>> gdn_fields(ConfigFields({}, "cfg"), 16, 32)["gdn_value_heads"]
    32
    """
    kw = dict(gdn_key_heads=fields.int("linear_num_key_heads", key_heads),
              gdn_value_heads=fields.int("linear_num_value_heads", value_heads),
              gdn_key_head_dim=fields.int("linear_key_head_dim", 128),
              gdn_value_head_dim=fields.int("linear_value_head_dim", 128),
              gdn_conv_kernel=fields.int("linear_conv_kernel_dim", 4))
    if kw["gdn_value_heads"] % kw["gdn_key_heads"]:
        raise fields._bad("linear_num_value_heads must be a multiple of linear_num_key_heads "
                          "(the Gated DeltaNet splits the value heads over the key heads)")
    return kw


def layer_types_field(fields: ConfigFields, keys, n_layers: int, allowed) -> list:
    """A list of per-layer type names (legacy names remapped as transformers remaps them).

    Parameters
    ----------
    fields : ConfigFields
        The parsed config.json.
    keys : str or tuple of str
        The field's name, or its aliases.
    n_layers : int
        The decoder layers the list must name [layers].
    allowed : tuple of str
        The type names the model type builds.

    Returns
    -------
    list of str
        One name per layer; refused in one line unless the field lists ``n_layers`` of them.

    Examples
    --------
    >>> c = ConfigFields({"layer_types": ["mamba", "attention"]}, "config.json")
    >>> layer_types_field(c, "layer_types", 2, ("linear_attention", "full_attention"))
    ['linear_attention', 'full_attention']
    """
    c = fields
    key, val = c._get(keys)
    if not isinstance(val, list) or len(val) != n_layers or any(
            not isinstance(v, str) or _LEGACY.get(v, v) not in allowed for v in val):
        raise c._bad(f"field {key!r} must list {n_layers} layer types, each one of "
                     f"{', '.join(allowed)}")
    return [_LEGACY.get(v, v) for v in val]


def _read_jamba(c: ConfigFields, notes: list) -> dict:
    # JambaAttentionDecoderLayer iff i % attn_layer_period == attn_layer_offset, else
    # JambaMambaDecoderLayer; feed_forward: JambaSparseMoeBlock iff
    # i % expert_layer_period == expert_layer_offset and num_experts > 1, else JambaMLP (gated,
    # no bias).  JambaMambaMixer (Mamba-1): in_proj h -> 2 d_inner, conv1d, x_proj
    # d_inner -> dt_rank + 2N, dt_proj with bias, A_log d_inner x N, D, out_proj, RMSNorms on
    # dt, B, C; d_inner = mamba_expand * h; dt_rank "auto" = ceil(h / 16).
    kw = _core(c, 8, 262144)
    n_layers, hs = kw["num_layers"], kw["hidden_size"]
    a_per, a_off = c.int("attn_layer_period", 8), c.int("attn_layer_offset", 4, allow_zero=True)
    e_per, e_off = (c.int("expert_layer_period", 2),
                    c.int("expert_layer_offset", 1, allow_zero=True))
    if a_off >= a_per or e_off >= e_per:
        raise c._bad("attn_layer_offset / expert_layer_offset must be smaller than their period "
                     "(JambaConfig refuses it)")
    n_exp = c.int(("num_experts", "num_local_experts"), 16)
    mixers = tuple("attention" if i % a_per == a_off else "mamba" for i in range(n_layers))
    pattern = tuple(int(n_exp > 1 and i % e_per == e_off) for i in range(n_layers))
    rank = c.data.get("mamba_dt_rank", "auto")
    rank = -(-hs // 16) if rank in ("auto", None) else c.int("mamba_dt_rank")
    kw.update(layer_mixers=mixers, mamba_version=1,
              mamba_inner_size=c.int("mamba_expand", 2) * hs,
              mamba_state_dim=c.int("mamba_d_state", 16), mamba_conv_kernel=c.int("mamba_d_conv", 4),
              mamba_dt_rank=rank, mamba_conv_bias=c.bool("mamba_conv_bias", True),
              mamba_in_proj_bias=c.bool("mamba_proj_bias", False),
              mamba_out_proj_bias=c.bool("mamba_proj_bias", False), mamba_gated_norm=False,
              mamba_inner_norms=True)
    if any(pattern):
        # JambaTopKRouter: a weight E x h, no bias; JambaExperts: E gated experts of f
        kw.update(num_experts=n_exp, moe_router_topk=c.int("num_experts_per_tok", 2),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"], moe_layer_freq=pattern,
                  moe_router_bias=False)
    return kw


def _read_bamba(c: ConfigFields, notes: list) -> dict:
    # BambaDecoderLayer: BambaAttention iff i in attn_layer_indices, else BambaMixer; every
    # layer a gated BambaMLP (bias=mlp_bias) and two RMSNorms.  BambaMixer (Mamba-2):
    # d_inner = int(mamba_expand * h), in_proj and out_proj bias=mamba_proj_bias, a gated
    # RMSNorm over d_inner.
    kw = _core(c, 8, 262144)
    n_layers = kw["num_layers"]
    attn = set(c.int_list("attn_layer_indices"))
    mixers = tuple("attention" if i in attn else "mamba" for i in range(n_layers))
    proj_bias = c.bool("mamba_proj_bias", False)
    kw.update(layer_mixers=mixers, attention_bias=c.bool("attention_bias", False),
              add_bias_linear=c.bool("mlp_bias", False), mamba_in_proj_bias=proj_bias,
              mamba_out_proj_bias=proj_bias,
              **mamba2_fields(c, c.int("mamba_expand", 2) * kw["hidden_size"],
                        heads="mamba_n_heads", groups="mamba_n_groups", state="mamba_d_state",
                        conv="mamba_d_conv", conv_bias="mamba_conv_bias",
                        defaults=(128, 1, 256, 4)))
    return kw


def _read_falcon_h1(c: ConfigFields, notes: list) -> dict:
    # FalconH1DecoderLayer: FalconH1Mixer and FalconH1Attention side by side on the
    # input_layernorm's output, then pre_ff_layernorm and a gated FalconH1MLP (bias=mlp_bias).
    # FalconH1Mixer: d_inner = mamba_d_ssm (default 1024), or int(mamba_expand * h) when null;
    # in_proj bias=mamba_proj_bias, out_proj bias=projectors_bias; the gated RMSNorm only with
    # mamba_rms_norm.  The muP multipliers are scalars and a buffer, not parameters.
    kw = _core(c, 8, 8192)
    d_inner = c.int("mamba_d_ssm", 1024, null=None)
    if d_inner is None:
        d_inner = c.int("mamba_expand", 2) * kw["hidden_size"]
    kw.update(layer_mixers=("parallel",) * kw["num_layers"],
              attention_bias=c.bool("attention_bias", False),
              add_bias_linear=c.bool("mlp_bias", False),
              mamba_in_proj_bias=c.bool("mamba_proj_bias", False),
              mamba_out_proj_bias=c.bool("projectors_bias", False),
              mamba_gated_norm=c.bool("mamba_rms_norm", False),
              **mamba2_fields(c, d_inner, heads="mamba_n_heads", groups="mamba_n_groups",
                        state="mamba_d_state", conv="mamba_d_conv", conv_bias="mamba_conv_bias",
                        defaults=(128, 1, 256, 4)))
    return kw


def _read_nemotron_h(c: ConfigFields, notes: list) -> dict:
    # NemotronHBlock: one RMSNorm and one mixer per layer, by layers_block_type
    # ("linear_attention": NemotronHMamba2Mixer, "full_attention": NemotronHAttention without
    # biases, "mlp": NemotronHMLP up/down (bias=mlp_bias, not gated), "moe": NemotronHMoE: a
    # router E x h (its e_score_correction_bias a buffer), E ungated experts of
    # moe_intermediate_size without bias, a shared NemotronHMLP of
    # moe_shared_expert_intermediate_size).  num_hidden_layers is ignored: the layer list
    # decides.  The mixer: d_inner = mamba_num_heads * mamba_head_dim; in_proj and out_proj
    # bias=use_bias; a gated RMSNorm over d_inner.
    if c.data.get("layers_block_type") is not None or c.data.get("layer_types") is not None:
        raw = c._get(("layers_block_type", "layer_types"))[1]
        count = len(raw) if isinstance(raw, list) else 0
    else:
        pattern = c.data.get("hybrid_override_pattern")
        if isinstance(pattern, str):
            # bounded before a list is built from it (memsym.limits "config_layers")
            _limits.check_limit("config_layers", max(len(pattern), 1), "the Nemotron-H layer list")
        if pattern is None:
            raw = ["linear_attention", "moe", "full_attention", "mlp"]
        elif not isinstance(pattern, str) or any(ch not in _PATTERN for ch in pattern):
            raise c._bad("field 'hybrid_override_pattern' must be a string of the characters "
                         "M (Mamba), * (attention), - (MLP), E (MoE)")
        else:
            raw = [_PATTERN[ch] for ch in pattern]
        count = len(raw)
    _limits.check_limit("config_layers", max(count, 1), "the Nemotron-H layer list")
    if not count:
        raise c._bad("the Nemotron-H layer list (layers_block_type) must not be empty")
    stated = c.data.get("num_hidden_layers")
    if stated is not None and stated != count:
        notes.append(f"num_hidden_layers={printable(repr(stated), 20)} ignored: transformers' "
                     f"NemotronHConfig builds the {count} layers its layer list names")
    c.data = {**c.data, "layers_block_type": raw, "layer_types": None,
              "num_hidden_layers": count}
    kinds = layer_types_field(c, "layers_block_type", count,
                         ("linear_attention", "full_attention", "mlp", "moe"))
    kw = _core(c, 8, 4096, ffn=21504)
    if kw["kv_channels"] is None:
        kw["kv_channels"] = 128           # NemotronHConfig head_dim default
    mixers = tuple({"linear_attention": "mamba", "full_attention": "attention"}.get(k, "none")
                   for k in kinds)
    moe = tuple(int(k == "moe") for k in kinds)
    mlp_bias = c.bool("mlp_bias", False)
    if mlp_bias and any(moe):
        raise c._bad("mlp_bias true with MoE layers is not modelled (the shared expert gets "
                     "biases, the routed experts none)")
    proj_bias = c.bool("use_bias", False)
    kw.update(layer_mixers=mixers, ffn_layers=tuple(int(k in ("mlp", "moe")) for k in kinds),
              swiglu=False, add_bias_linear=mlp_bias, norms_per_layer=1,
              norm_fp32_scale=True,     # NemotronHRMSNorm: weight.to(torch.float32) * x
              mamba_in_proj_bias=proj_bias, mamba_out_proj_bias=proj_bias,
              **mamba2_fields(c, c.int("mamba_num_heads", 128) * c.int("mamba_head_dim", 64),
                        heads="mamba_num_heads", groups=("n_groups", "mamba_n_groups"),
                        state="ssm_state_size", conv=("conv_kernel", "mamba_d_conv"),
                        conv_bias=("use_conv_bias", "mamba_conv_bias"),
                        defaults=(128, 8, 128, 4)))
    if any(moe):
        f_e = c.int("moe_intermediate_size", 7688)
        kw.update(num_experts=c.int(("n_routed_experts", "num_local_experts"), 8),
                  moe_router_topk=c.int("num_experts_per_tok", 2), moe_ffn_hidden_size=f_e,
                  moe_shared_expert_intermediate_size=c.int(
                      "moe_shared_expert_intermediate_size", 7688),
                  moe_layer_freq=moe, moe_router_bias=False)
        # Nemotron 3 Super's latent MoE (the Bridge's provider_bridge reads moe_latent_size:
        # nemotron_h_bridge.py:320-321 at Megatron-Bridge 067f987df0)
        latent = c.int("moe_latent_size", None, null=None)
        if latent is not None:
            kw["moe_latent_size"] = latent
        notes.append(f"e_score_correction_bias ({sum(moe)} x {kw['num_experts']}) not counted: "
                     "a buffer, not a parameter, in transformers' NemotronHTopkRouter")
    n_mtp = c.int("num_nextn_predict_layers", 0, allow_zero=True)
    if n_mtp:
        kw["mtp_layer_pattern"] = _nemotron_h_mtp_pattern(c, any(moe))
        notes.append(f"num_nextn_predict_layers={n_mtp} not counted: transformers' "
                     "NemotronHForCausalLM builds no MTP layer (its block "
                     f"{kw['mtp_layer_pattern']!r} is kept for a run's mtp_num_layers)")
    return kw


def _nemotron_h_mtp_pattern(c: ConfigFields, has_moe: bool) -> str:
    # NemotronHConfig.__post_init__ (transformers 5.25.0): mtp_layers_block_type (legacy names
    # remapped), else ["full_attention", "moe"]; the legacy mtp_hybrid_override_pattern
    # replaces only that default (_pattern_to_list); validate_layer_type's four names
    block = c.data.get("mtp_layers_block_type")
    legacy = c.data.get("mtp_hybrid_override_pattern")
    if block is None or block in (["full_attention", "moe"], ["attention", "moe"]):
        if legacy is not None:
            if not isinstance(legacy, str) or not legacy or len(legacy) > 64 or any(
                    ch not in _PATTERN for ch in legacy):
                raise c._bad("field 'mtp_hybrid_override_pattern' must be 1 to 64 of the "
                             "characters M (Mamba), * (attention), - (MLP), E (MoE)")
            block = [_PATTERN[ch] for ch in legacy]
        block = block or ["full_attention", "moe"]
    letter = {v: k for k, v in _PATTERN.items()}
    if not isinstance(block, list) or not 0 < len(block) <= 64 or any(
            not isinstance(v, str) or _LEGACY.get(v, v) not in letter for v in block):
        raise c._bad("field 'mtp_layers_block_type' must list 1 to 64 layer types, each one of "
                     "linear_attention, full_attention, mlp, moe")
    pattern = "".join(letter[_LEGACY.get(v, v)] for v in block)
    if "E" in pattern and not has_moe:
        raise c._bad(f"the MTP block {pattern!r} has an MoE layer (E) but the model has none: "
                     "memsym takes the experts' sizes from the decoder's MoE layers")
    return pattern


def _read_granitemoehybrid(c: ConfigFields, notes: list) -> dict:
    # GraniteMoeHybridDecoderLayer: GraniteMoeHybridMambaLayer iff layer_types[i] is
    # "linear_attention" ("mamba"), else GraniteMoeHybridAttention (bias=attention_bias); two
    # RMSNorms; a gated shared_mlp of shared_intermediate_size (no bias) in every layer, and a
    # GraniteMoeHybridMoE (router E x h, E gated experts of intermediate_size, no bias) iff
    # num_local_experts > 0.  The Mamba layer: d_inner = int(mamba_expand * h), in_proj and
    # out_proj bias=mamba_proj_bias, a gated RMSNorm over d_inner.
    kw = _core(c, None, 2048)
    n_layers = kw["num_layers"]
    if c.data.get("layer_types") is None and c.data.get("layers_block_type") is None:
        kinds = ["linear_attention"] * n_layers
    else:
        kinds = layer_types_field(c, ("layer_types", "layers_block_type"), n_layers,
                             ("linear_attention", "full_attention"))
    mixers = tuple("mamba" if k == "linear_attention" else "attention" for k in kinds)
    n_exp = c.int("num_local_experts", 8, allow_zero=True)
    f_shared = c.int("shared_intermediate_size", 1024)
    proj_bias = c.bool("mamba_proj_bias", False)
    kw.update(layer_mixers=mixers, attention_bias=c.bool("attention_bias", False),
              mamba_in_proj_bias=proj_bias, mamba_out_proj_bias=proj_bias,
              **mamba2_fields(c, c.int("mamba_expand", 2) * kw["hidden_size"],
                        heads="mamba_n_heads", groups="mamba_n_groups", state="mamba_d_state",
                        conv="mamba_d_conv", conv_bias="mamba_conv_bias",
                        defaults=(128, 1, 256, 4)))
    if n_exp:
        kw.update(num_experts=n_exp, moe_router_topk=c.int("num_experts_per_tok", 2),
                  moe_ffn_hidden_size=kw["ffn_hidden_size"],
                  moe_shared_expert_intermediate_size=f_shared, moe_router_bias=False)
    else:
        kw["ffn_hidden_size"] = f_shared   # the shared MLP is the layer's only MLP
    return kw


def _gated_deltanet_stack(c: ConfigFields, experts: str) -> dict:
    """The Qwen3-Next / Qwen3.5 layer stack; ``experts``: ``"pattern"`` (Qwen3-Next: MoE where
    mlp_only_layers and decoder_sparse_step say), ``"all"`` (Qwen3.5-MoE) or ``"none"``
    (Qwen3.5)."""
    # Qwen3NextDecoderLayer: Qwen3NextGatedDeltaNet iff layer_types[i] == "linear_attention"
    # (default: every full_attention_interval-th layer (4) full attention), else
    # Qwen3NextAttention: q_proj h -> 2 a d_h (query and output gate), k, v, o, all with
    # bias=attention_bias; q_norm, k_norm RMSNorm(head_dim).  Qwen3NextSparseMoeBlock: a
    # router E x h, E gated experts of moe_intermediate_size, a gated shared_expert of
    # shared_expert_intermediate_size and its sigmoid gate h -> 1; else a gated MLP of
    # intermediate_size.  Two RMSNorms per layer (zero-centred: one weight each, as any).
    # Qwen3_5GatedDeltaNet splits in_proj_qkvz / in_proj_ba into in_proj_qkv, in_proj_z,
    # in_proj_b, in_proj_a: the same weights and outputs.
    n_exp = c.int("num_experts", 512 if experts == "pattern" else 256,
                  allow_zero=True) if experts != "none" else 0
    kw = _core(c, 2, 32768, ffn=None if experts == "all" else ...)
    if experts == "all":   # no dense MLP is built: the width is the experts' (never read)
        kw["ffn_hidden_size"] = c.int("moe_intermediate_size", 512)
    n_layers = kw["num_layers"]
    kw["kv_channels"] = c.int("head_dim", 256)
    if c.data.get("layer_types") is None:
        every = c.int("full_attention_interval", 4)
        kinds = ["full_attention" if (i + 1) % every == 0 else "linear_attention"
                 for i in range(n_layers)]
    else:
        kinds = layer_types_field(c, "layer_types", n_layers, ("linear_attention", "full_attention"))
    pattern = (tuple(int(n_exp > 0) * sparse for sparse in c.sparse_step_layers(n_layers))
               if experts == "pattern" else (int(n_exp > 0),) * n_layers)
    kw.update(layer_mixers=tuple("gdn" if k == "linear_attention" else "attention"
                                 for k in kinds),
              attention_bias=c.bool("attention_bias", False), qk_layernorm=True,
              qk_norm_fp32_scale=True,        # Qwen3NextRMSNorm: output * (1.0 + weight.float())
              norm_fp32_scale=True,           # input_layernorm, post_attention_layernorm too
              attention_output_gate=True,
              **gdn_fields(c, 16, 32))
    if any(pattern):
        kw.update(num_experts=n_exp, moe_router_topk=c.int("num_experts_per_tok",
                                                           10 if experts == "pattern" else 8),
                  moe_ffn_hidden_size=c.int("moe_intermediate_size", 512),
                  moe_shared_expert_intermediate_size=c.int("shared_expert_intermediate_size",
                                                            512),
                  moe_shared_expert_gate=True, moe_layer_freq=pattern, moe_router_bias=False)
    return kw


def _read_qwen3_next(c: ConfigFields, notes: list) -> dict:
    # Qwen3NextSparseMoeBlock iff i not in mlp_only_layers and num_experts > 0 and
    # (i + 1) % decoder_sparse_step == 0 (Qwen3NextConfig: num_experts 512, top-k 10)
    return _gated_deltanet_stack(c, "pattern")


def _read_qwen3_5_text(c: ConfigFields, notes: list) -> dict:
    # Qwen3_5DecoderLayer: Qwen3_5MLP(config, intermediate_size) in every layer
    # (Qwen3_5TextConfig removes the expert fields and mlp_only_layers)
    return _gated_deltanet_stack(c, "none")


def _read_qwen3_5_moe_text(c: ConfigFields, notes: list) -> dict:
    # Qwen3_5MoeDecoderLayer: a Qwen3_5MoeSparseMoeBlock (Qwen3-Next's) in every layer, no
    # dense MLP (Qwen3_5MoeTextConfig has no intermediate_size, mlp_only_layers or
    # decoder_sparse_step: num_experts 256, top-k 8)
    return _gated_deltanet_stack(c, "all")


def _read_olmo_hybrid(c: ConfigFields, notes: list) -> dict:
    # transformers 5.25.0 modeling_olmo_hybrid.py: OlmoHybridLinearAttentionDecoderLayer iff
    # layer_types[i] == "linear_attention" (default: every fourth layer full attention, the
    # last one if none is), its OlmoHybridGatedDeltaNet (:640-689) Qwen3-Next's mixer with split
    # projections (q, k of hk dk, v and g of hv dv, a and b of hv, a bias-free conv1d over
    # 2 hk dk + hv dv, A_log and dt_bias of hv, a gated RMSNorm of dv); else
    # OlmoHybridAttentionDecoderLayer: OLMo 3's attention (q, k, v, o bias=attention_bias,
    # q_norm RMSNorm(a d_h), k_norm RMSNorm(g d_h), no output gate, :179-192) and its
    # post-attention and post-feedforward norms (:859-860); a gated MLP of intermediate_size
    # and two RMSNorms in every layer.  OlmoHybridConfig.__post_init__: linear heads default to
    # a, linear_key_head_dim to int(0.75 h / hk), linear_value_head_dim to twice that
    kw = _core(c, None, 65536)
    n_layers, heads, hs = kw["num_layers"], kw["num_attention_heads"], kw["hidden_size"]
    if c.data.get("layer_types") is None:
        kinds = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(n_layers)]
        if "full_attention" not in kinds:
            kinds[-1] = "full_attention"
    else:
        kinds = layer_types_field(c, "layer_types", n_layers, ("linear_attention", "full_attention"))
    if len(set(kinds)) < 2:
        # OlmoHybridConfig.validate_architecture refuses it: transformers builds no model
        raise c._bad("layer_types must hold at least one 'linear_attention' and one "
                     "'full_attention' layer (OlmoHybridConfig refuses it otherwise)")
    k_heads = c.int("linear_num_key_heads", heads, null=heads)
    v_heads = c.int("linear_num_value_heads", heads, null=heads)
    k_dim = c.int("linear_key_head_dim", int(0.75 * hs / k_heads), null=int(0.75 * hs / k_heads))
    kw.update(layer_mixers=tuple("gdn" if k == "linear_attention" else "attention"
                                 for k in kinds),
              attention_bias=c.bool("attention_bias", False), qk_layernorm=True,
              qk_norm_width="full", norm_fp32_product=True,
              gdn_key_heads=k_heads, gdn_value_heads=v_heads, gdn_key_head_dim=k_dim,
              gdn_value_head_dim=c.int("linear_value_head_dim", 2 * k_dim, null=2 * k_dim),
              gdn_conv_kernel=c.int("linear_conv_kernel_dim", 4))
    if v_heads % k_heads:
        raise c._bad("linear_num_value_heads must be a multiple of linear_num_key_heads "
                     "(the Gated DeltaNet splits the value heads over the key heads)")
    # the count is checked against transformers' model; the activations are not measured here
    notes.append("olmo_hybrid's Gated DeltaNet activations take Qwen3-Next's derivation "
                 "(memsym/terms/gated_deltanet.py), not measured in OlmoHybridGatedDeltaNet")
    return kw


def _lfm2_ffn(c: ConfigFields) -> int:
    """Lfm2MLP's inner size: block_ff_dim (over intermediate_size, as Lfm2Config pops it),
    then with block_auto_adjust_ff_dim int(2 f / 3), int(multiplier f) and rounded up to
    block_multiple_of (Lfm2Config refuses a null block_ffn_dim_multiplier)."""
    width = c.int("block_ff_dim" if c.data.get("block_ff_dim") is not None
                  else "intermediate_size", 12288)
    if "block_ffn_dim_multiplier" in c.data and c.data["block_ffn_dim_multiplier"] is None:
        raise c._bad("block_ffn_dim_multiplier null: transformers' Lfm2Config refuses it")
    if c.bool("block_auto_adjust_ff_dim", True):
        width = int(c.positive("block_ffn_dim_multiplier", 1.0) * int(2 * width / 3))
        step = c.int("block_multiple_of", 256)
        width = step * ((width + step - 1) // step)
    if width < 1:
        raise c._bad(f"the LFM2 MLP width comes out as {width} (block_ff_dim and its adjustment)")
    return width


def _lfm2_core(c: ConfigFields, ffn) -> dict:
    """LFM2's and LFM2-MoE's core sizes (:func:`_core`: 8 KV heads, 128,000 positions by
    default), with ``tie_embedding`` read as ``tie_word_embeddings``: both config classes pop
    it over the latter (read by from_hf_config)."""
    if "tie_embedding" in c.data:
        c.data = {**c.data, "tie_word_embeddings": c.data["tie_embedding"]}
    return _core(c, 8, 128000, ffn=ffn)


def _lfm2_mixers(c: ConfigFields, kinds) -> dict:
    """LFM2's token mixers by ``kinds`` (``layer_types``' entries): Lfm2ShortConv for
    ``"conv"`` (``conv_L_cache`` taps, ``conv_bias``), else attention with q and k norms."""
    return dict(layer_mixers=tuple("conv" if k == "conv" else "attention" for k in kinds),
                qk_layernorm=True, short_conv_kernel=c.int("conv_L_cache", 3),
                short_conv_bias=c.bool("conv_bias", False))


def _read_lfm2(c: ConfigFields, notes: list) -> dict:
    # Lfm2DecoderLayer: Lfm2ShortConv iff layer_types[i] == "conv" (default: the layers not in
    # full_attn_idxs, which defaults to every layer), else Lfm2Attention (q, k, v, out_proj
    # without bias; q_layernorm, k_layernorm RMSNorm(head_dim)); a gated Lfm2MLP (w1, w3, w2
    # without bias) of the adjusted width (_lfm2_ffn) in every layer; operator_norm and
    # ffn_norm; the final norm is Lfm2Model.embedding_norm.  Lfm2ShortConv: in_proj h -> 3h,
    # a depthwise conv1d of conv_L_cache taps, out_proj h -> h, bias=conv_bias on each.
    kw = _lfm2_core(c, ffn=None)
    n_layers = kw["num_layers"]
    if c.data.get("layer_types") is not None:
        kinds = layer_types_field(c, "layer_types", n_layers, ("conv", "full_attention"))
    else:
        listed = c.int_list("full_attn_idxs") if c.data.get("full_attn_idxs") is not None else None
        kinds = ["full_attention" if listed is None or i in listed else "conv"
                 for i in range(n_layers)]
    kw.update(ffn_hidden_size=_lfm2_ffn(c), **_lfm2_mixers(c, kinds))
    return kw


def _read_lfm2_moe(c: ConfigFields, notes: list) -> dict:
    # Lfm2MoeDecoderLayer: LFM2's mixers (Lfm2ShortConv where layer_types[i] == "conv", else
    # Lfm2Attention: q, k, v, out_proj without bias, q_layernorm and k_layernorm), operator_norm
    # and ffn_norm; a gated Lfm2MoeMLP of intermediate_size as given (Lfm2MLP's width
    # adjustment is not inherited) in the first num_dense_layers layers, else
    # Lfm2MoeSparseMoeBlock: a router E x h (its expert_bias an nn.Buffer), E gated experts of
    # moe_intermediate_size, no shared expert.  Lfm2MoeConfig has no default layer_types, which
    # every layer indexes: a file without it cannot be built.
    kw = _lfm2_core(c, ffn=7168)
    n_layers = kw["num_layers"]
    if c.data.get("layer_types") is None:
        raise c._bad("missing field 'layer_types' (Lfm2MoeConfig has no default and every "
                     "LFM2-MoE layer reads its entry: transformers cannot build the model)")
    kinds = layer_types_field(c, "layer_types", n_layers, ("conv", "full_attention"))
    dense = c.int("num_dense_layers", 2, allow_zero=True)
    pattern = tuple(int(i >= dense) for i in range(n_layers))
    kw.update(_lfm2_mixers(c, kinds))
    if any(pattern):
        n_exp = c.int("num_experts", 32)
        kw.update(num_experts=n_exp, moe_router_topk=c.int("num_experts_per_tok", 4),
                  moe_ffn_hidden_size=c.int("moe_intermediate_size", 1792),
                  moe_layer_freq=pattern, moe_router_bias=False)
        if c.bool("use_expert_bias", True):
            notes.append(f"expert_bias ({sum(pattern)} x {n_exp}) not counted: a buffer, not a "
                         "parameter, in transformers' Lfm2MoeSparseMoeBlock")
    return kw


def _read_minimax(c: ConfigFields, notes: list) -> dict:
    # MiniMaxDecoderLayer: MiniMaxLightningAttention iff layer_types[i] == "linear_attention"
    # (default: odd layers), else MiniMaxAttention (q, k, v, o without bias; head_dim, or
    # h // a when null); a MiniMaxSparseMoeBlock in every layer (router E x h, E gated experts
    # of intermediate_size, no shared expert); two RMSNorms.  The lightning mixer uses the
    # attention's a heads of head_dim.  The alpha/beta residual factors are scalars.
    kw = _core(c, 8, 131072)
    n_layers = kw["num_layers"]
    if c.data.get("layer_types") is None:
        kinds = ["full_attention" if (i + 1) % 2 else "linear_attention" for i in range(n_layers)]
    else:
        kinds = layer_types_field(c, "layer_types", n_layers, ("linear_attention", "full_attention"))
    kw.update(layer_mixers=tuple("lightning" if k == "linear_attention" else "attention"
                                 for k in kinds),
              num_experts=c.int("num_local_experts", 8),
              moe_router_topk=c.int("num_experts_per_tok", 2),
              moe_ffn_hidden_size=kw["ffn_hidden_size"], moe_router_bias=False,
              lightning_block_size=c.int("block_size", 256))
    return kw


# model_type -> (reader, the config class's tie_word_embeddings default, the dropout
# probabilities its causal LM applies with their defaults).  REF: transformers 5.24.0
# configuration_<type>.py (every class: tie_word_embeddings False, attention_dropout 0.0;
# Nemotron-H also hidden_dropout, which its modeling file never applies).
HYBRID_READERS = {
    "jamba": (_read_jamba, False, {"attention_dropout": 0.0}),
    "bamba": (_read_bamba, False, {"attention_dropout": 0.0}),
    "falcon_h1": (_read_falcon_h1, False, {"attention_dropout": 0.0}),
    "nemotron_h": (_read_nemotron_h, False, {"attention_dropout": 0.0}),
    "granitemoehybrid": (_read_granitemoehybrid, False, {"attention_dropout": 0.0}),
    # Qwen3NextConfig: tie_word_embeddings False, attention_dropout 0.0 (transformers 5.25.0)
    "qwen3_next": (_read_qwen3_next, False, {"attention_dropout": 0.0}),
    # Qwen3_5TextConfig, Qwen3_5MoeTextConfig (Qwen3NextConfig's subclasses): the same defaults
    "qwen3_5_text": (_read_qwen3_5_text, False, {"attention_dropout": 0.0}),
    "qwen3_5_moe_text": (_read_qwen3_5_moe_text, False, {"attention_dropout": 0.0}),
    # Lfm2Config: tie_word_embeddings True; Lfm2Attention applies no dropout
    "lfm2": (_read_lfm2, True, {}),
    # Lfm2MoeConfig: tie_word_embeddings True; no dropout applied
    "lfm2_moe": (_read_lfm2_moe, True, {}),
    # MiniMaxConfig: tie_word_embeddings False, attention_dropout 0.0
    "minimax": (_read_minimax, False, {"attention_dropout": 0.0}),
    # OlmoHybridConfig: tie_word_embeddings False, attention_dropout 0.0 (transformers 5.25.0)
    "olmo_hybrid": (_read_olmo_hybrid, False, {"attention_dropout": 0.0}),
}
HYBRID_TYPES = tuple(sorted(HYBRID_READERS))
"""The hybrid Mamba / attention ``model_type`` values read here."""
