"""The architecture record (Megatron-LM field names), its resolution and validation.

Every size is checked against memsym's documented limits (:mod:`memsym.limits`) and a name
read from a file is stored inert (:func:`memsym.text.printable`).
"""

from __future__ import annotations

import dataclasses
import threading
from types import MappingProxyType
from dataclasses import dataclass, field
from typing import Optional, Union

from .. import limits as _limits
from ..errors import InvalidValueError, UnknownNameError
from ..text import printable
from .sizes import inert_name, padded_vocab_size, pos_int

__all__ = ["Architecture", "Resolved", "resolve", "padded_vocab_size", "LIMITS", "MIXERS",
           "check_limit", "printable", "norm_params"]

# Every size an architecture carries is bounded (memsym.limits, the one table of limits): a
# hostile or mistyped value is refused at once, not built into a 10^8-entry layer pattern.
#: Architecture field -> its largest accepted value, a view of :data:`memsym.limits.LIMITS`
#: through :data:`memsym.limits.FIELD_LIMITS`.
LIMITS = MappingProxyType({field_: _limits.limit_of(kind).maximum
                           for field_, kind in _limits.FIELD_LIMITS.items()})


def check_limit(name: str, value: int, what: str = None) -> int:
    """Refuse ``value`` above the limit of Architecture field ``name``, naming the field and
    the limit (:func:`memsym.limits.check_limit`); return it.

    Examples
    --------
    >>> check_limit("num_layers", 96)
    96
    """
    return _limits.check_limit(_limits.FIELD_LIMITS[name], value, what or name)


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer, described as Megatron-LM's arguments describe it.

    Defaults resolve as Megatron's ``validate_args`` resolves them: ``num_query_groups``
    to ``num_attention_heads`` (no GQA), ``kv_channels`` to h/a, ``ffn_hidden_size`` to 4h
    (8h/3 rounded is *not* implied by ``swiglu``; presets state f explicitly).
    Use :func:`resolve` to get a copy with every default filled in and every field checked.

    Fields added beyond Megatron's argument names: ``qk_layernorm`` (per-head RMSNorm on Q and K,
    Qwen3), ``moe_router_bias`` (E router biases per MoE layer: gpt-oss's router bias,
    DeepSeek-V3's ``e_score_correction_bias``; None follows ``add_bias_linear``),
    ``moe_shared_expert_gate`` (Qwen2-MoE's h→1 gate), ``attention_sinks`` (one learned logit per
    head, gpt-oss), ``off_by_one_softmax`` (softmax_type off-by-one: a zero sink, no parameter).

    Fields added for the Hugging Face families (each default keeps Megatron's layer):

    * ``norms_per_layer``: norms in each decoder layer (2; 1 for a parallel block with one input
      norm: GPT-J, Cohere, Falcon-7B; 4 for Gemma 2/3's pre- and post-norms).
    * ``norm_affine``: whether a norm has a learned scale (False: OLMo's non-parametric LayerNorm).
    * ``norm_bias``: whether a norm has a learned shift; None = LayerNorm yes, RMSNorm no
      (False: Cohere's bias-free LayerNorm).  Together they set η, parameters per normalised
      element: 0, 1 or 2.
    * ``qk_norm_width``: with ``qk_layernorm``, ``"head"`` = one norm of d_h for Q and one for K
      shared by all heads (Qwen3, Gemma 3: 2·d_h); ``"full"`` = over all heads ((a + g)·d_h:
      OLMo 2, Cohere).
    * ``qk_norm_fp32_scale`` / ``norm_fp32_scale``: the Q and K / the layer's norms multiply by a
      fresh fp32 weight, ``1 + weight.float()`` (Gemma, Qwen3-Next, VaultGemma) or
      ``weight.to(float32)`` (Helium, Nemotron-H); ``norm_fp32_product``: all its RMSNorms by the
      16-bit weight into fp32 (OLMo 2/3, FlexOlmo, GPT-OSS).  None changes a parameter count.
    * ``attention_bias``: biases on Q, K, V and the output projection; None follows
      ``add_bias_linear`` (False with ``add_bias_linear`` True: GPT-J, GPT-NeoX without
      attention bias, where only the MLP has biases); ``attention_out_bias`` the output
      projection's alone (None: as ``attention_bias``; True beside False: GPT-Neo's out_proj).
    * ``output_layer_bias``: V biases on the output layer (GPT-J, Phi-MoE ``lm_head_bias``).
    * ``embedding_norm``: a norm right after the word embedding (BLOOM), on the first stage.
    * ``parallel_attention``: attention and MLP read the same normalised input (GPT-J, Falcon,
      Cohere); recorded for activation models, it changes no parameter count by itself.
    * ``xielu_activation``: the MLP's activation is xIELU with two learned scalars (``alpha_p``,
      ``alpha_n``) per MLP (Apertus).
    * ``moe_latent_size``: latent MoE (Megatron-core's ``moe_latent_size``, Nemotron 3 Super):
      each MoE layer projects its input h -> latent (``fc1_latent_proj``) before the dispatch
      and back latent -> h (``fc2_latent_proj``) after the combine, both replicated on every
      TP rank; the routed experts run latent -> expert width -> latent; the router and the
      shared experts keep the hidden width.  None: no latent projections.
    * ``dsa_index_heads``, ``dsa_index_head_dim``: DeepSeek-V3.2's sparse-attention indexer in
      every MLA layer (wq_b r_q -> H_idx d_idx, wk h -> d_idx, a LayerNorm of d_idx, weights_proj
      h -> H_idx); None: no indexer.

    Fields of the hybrid Mamba / attention models (Jamba, Bamba, Falcon-H1, Nemotron-H,
    Granite 4.0; Megatron-core's ``hybrid_override_pattern`` describes the same per layer):

    * ``layer_mixers``: a tuple of L entries of :data:`MIXERS`: ``"attention"``, ``"mamba"``,
      ``"parallel"`` (attention and Mamba side by side on one input, Falcon-H1), ``"gdn"`` (a
      Gated DeltaNet linear-attention mixer, Qwen3-Next), ``"conv"`` (a gated short
      convolution, LFM2), ``"lightning"`` (lightning attention, of the attention's heads and
      head dim, MiniMax-01), ``"global"`` (softmax attention of its own head width and KV
      heads, ``global_kv_channels`` and ``global_num_query_groups``, without v_proj unless
      ``global_v_proj``: Gemma 4's full-attention layers), ``"kv_reuse"`` /
      ``"global_kv_reuse"`` (an attention / global layer that reuses an earlier layer's keys
      and values and builds no k_proj, v_proj, k_norm: Gemma 4's ``num_kv_shared_layers``;
      their MLP 2f wide with ``kv_reuse_wide_mlp``) or ``"none"`` (an MLP/MoE-only
      layer, Nemotron-H); None: every layer has attention.
    * ``ffn_layers``: a tuple of L 0/1 entries, 1 where the layer has an MLP or MoE block
      (Nemotron-H's Mamba and attention layers have none); None: every layer.  A MoE pattern
      (``moe_layer_freq``) may only mark layers that have one.
    * ``mamba_version`` 1 (Mamba-1: x_proj, dt_proj, A of d_inner x N; Jamba) or 2 (Mamba-2:
      one in_proj to z, x, B, C, dt; A, D, dt bias per head), ``mamba_inner_size`` d_inner,
      ``mamba_state_dim`` N, ``mamba_num_heads`` and ``mamba_num_groups`` (Mamba-2),
      ``mamba_conv_kernel``, ``mamba_dt_rank`` (Mamba-1), the bias switches of conv1d, in_proj
      and out_proj, ``mamba_gated_norm`` (Mamba-2's RMSNorm over d_inner before out_proj) and
      ``mamba_inner_norms`` (Jamba's RMSNorms of dt_rank, N, N on dt, B, C).
    * ``gdn_key_heads``, ``gdn_value_heads``, ``gdn_key_head_dim``, ``gdn_value_head_dim``,
      ``gdn_conv_kernel``: the Gated DeltaNet mixers' sizes; ``attention_output_gate``: the
      attention layers' q_proj also gives a sigmoid gate of a d_h on the output (Qwen3-Next).
    * ``short_conv_kernel``, ``short_conv_bias``: the short-convolution mixers' depthwise conv
      taps and biases (in_proj, conv, out_proj).
    * ``per_layer_input_size`` p and ``per_layer_input_vocab`` V_p (Gemma 4's per-layer input
      embeddings, ``hidden_size_per_layer_input``, ``vocab_size_per_layer_input``): a packed
      V_p x L p embedding table, a model projection h -> L p with a norm of p, and in every
      layer a gate h -> p, a projection p -> h and a norm of h, all whole on every TP rank;
      None: none.
    * ``shared_blocks`` (Zamba, Zamba2): the distinct shared transformer blocks that the
      ``"shared"`` layers (a Mamba layer run after one use of a shared block) cycle through;
      ``shared_adapter_rank`` the per-use LoRA rank on the shared MLP's gate/up projection (None:
      none), ``shared_attention_adapters`` per-use LoRA on Q, K, V too, ``shared_adapter_sets``
      the adapter sets built (None: one per use; more where untied blocks each hold every
      use's) (:mod:`memsym.model.shared_blocks`).  Every size is bounded by :data:`LIMITS`;
    the name is kept printable (:func:`printable`).
    """

    name: str = "custom"
    num_layers: int = 1
    hidden_size: int = 1
    num_attention_heads: int = 1
    num_query_groups: Optional[int] = None        # KV heads (GQA); None = num_attention_heads
    kv_channels: Optional[int] = None             # head dim; None = hidden_size / heads
    ffn_hidden_size: Optional[int] = None         # None = 4 * hidden_size
    swiglu: bool = False                          # gated MLP (3 matrices)
    normalization: str = "LayerNorm"              # or "RMSNorm"
    vocab_size: int = 1
    make_vocab_size_divisible_by: int = 128
    untie_embeddings_and_output_weights: bool = False
    position_embedding_type: str = "learned_absolute"   # or "rope"
    max_position_embeddings: Optional[int] = None
    add_bias_linear: bool = True                   # biases on the linear layers
    add_qkv_bias: bool = False                     # QKV bias even when add_bias_linear is False
    # Mixture of experts
    num_experts: Optional[int] = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: Optional[int] = None
    moe_shared_expert_intermediate_size: Optional[int] = None
    moe_layer_freq: Union[int, tuple] = 1          # int q: layer i is MoE iff i % q == 0; or a 0/1 tuple
    moe_latent_size: Optional[int] = None          # latent MoE width (routed experts, dispatch)
    # Multi-latent attention (DeepSeek-V3)
    multi_latent_attention: bool = False
    q_lora_rank: Optional[int] = None
    kv_lora_rank: Optional[int] = None
    qk_head_dim: Optional[int] = None
    qk_pos_emb_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    dsa_index_heads: Optional[int] = None          # DeepSeek-V3.2 indexer heads; None = no indexer
    dsa_index_head_dim: Optional[int] = None       # DeepSeek-V3.2 indexer head dim
    mtp_num_layers: int = 0
    mtp_repeated: bool = False                     # one MTP block's weights for all the passes
    mtp_layer_pattern: Optional[str] = None        # a hybrid's MTP block ("*E"); None: last kind
    extra: dict = field(default_factory=dict, compare=False, hash=False)  # documented extras per preset
    # --- added by the models module (issue 3) ---
    qk_layernorm: bool = False                     # per-head norm on Q and K (Qwen3): 2*d_h per layer
    moe_router_bias: Optional[bool] = None         # E biases per MoE router; None = add_bias_linear
    moe_shared_expert_gate: bool = False           # sigmoid gate h->1 on the shared expert (Qwen2-MoE)
    attention_sinks: bool = False                  # one learned sink logit per head (gpt-oss)
    off_by_one_softmax: bool = False               # a zero sink logit (TE's off-by-one softmax)
    # --- added for the Hugging Face families (issue 13) ---
    norms_per_layer: int = 2                       # 1: parallel block (GPT-J, Cohere); 4: Gemma 2/3
    norm_affine: bool = True                       # False: non-parametric LayerNorm (OLMo)
    norm_bias: Optional[bool] = None               # None: LayerNorm has a shift, RMSNorm not
    qk_norm_width: str = "head"                    # "head": 2*d_h; "full": (a+g)*d_h (OLMo 2, Cohere)
    qk_norm_fp32_scale: bool = False               # Q/K norms scale by 1 + weight in fp32 (Gemma 3)
    norm_fp32_scale: bool = False                  # layer norms scale by 1 + weight in fp32 (Gemma)
    norm_fp32_product: bool = False                # RMSNorms' (weight * x) in fp32 (OLMo 2, GPT-OSS)
    attention_bias: Optional[bool] = None          # Q, K, V, O biases; None = add_bias_linear
    attention_out_bias: Optional[bool] = None      # O bias alone; None = attention_bias (GPT-Neo)
    output_layer_bias: bool = False                # V biases on the output layer (GPT-J)
    embedding_norm: bool = False                   # norm after the word embedding (BLOOM)
    parallel_attention: bool = False               # attention and MLP in parallel (no count change)
    # --- added for the newer Hugging Face families (issue 32) ---
    xielu_activation: bool = False                 # 2 learned activation scalars per MLP (Apertus)
    # --- hybrid Mamba / attention models (issue 32) ---
    layer_mixers: Optional[tuple] = None           # per layer: MIXERS entry; None = all attention
    ffn_layers: Optional[tuple] = None             # per layer 0/1: has an MLP or MoE; None = all
    mamba_version: int = 2                         # 1: Mamba-1 selective scan; 2: Mamba-2 SSD
    mamba_inner_size: Optional[int] = None         # d_inner (expand * h, or heads * head dim)
    mamba_state_dim: Optional[int] = None          # d_state N
    mamba_num_heads: Optional[int] = None          # Mamba-2 heads (dt, A, D per head)
    mamba_num_groups: int = 1                      # Mamba-2 B/C groups
    mamba_conv_kernel: int = 4                     # d_conv
    mamba_dt_rank: Optional[int] = None            # Mamba-1 dt_rank
    mamba_conv_bias: bool = True                   # conv1d bias
    mamba_in_proj_bias: bool = False               # in_proj bias
    mamba_out_proj_bias: bool = False              # out_proj bias
    mamba_gated_norm: bool = True                  # Mamba-2 gated RMSNorm over d_inner
    mamba_inner_norms: bool = False                # Jamba's RMSNorms on dt, B and C (Mamba-1)
    # --- Gated DeltaNet linear-attention mixers and gated attention (Qwen3-Next, issue 32) ---
    gdn_key_heads: Optional[int] = None            # linear_num_key_heads (q and k heads)
    gdn_value_heads: Optional[int] = None          # linear_num_value_heads (v heads, states)
    gdn_key_head_dim: Optional[int] = None         # linear_key_head_dim
    gdn_value_head_dim: Optional[int] = None       # linear_value_head_dim
    gdn_conv_kernel: int = 4                       # linear_conv_kernel_dim
    attention_output_gate: bool = False            # q_proj of 2 a d_h: a sigmoid output gate
    short_conv_kernel: int = 3                     # LFM2's conv_L_cache
    short_conv_bias: bool = False                  # LFM2's conv_bias (in_proj, conv, out_proj)
    lightning_block_size: int = 256                # MiniMax-01's block_size (lightning blocks)
    # --- "global" attention layers of their own head sizes (Gemma 4, issue 32) ---
    global_kv_channels: Optional[int] = None       # global_head_dim; None: kv_channels
    global_num_query_groups: Optional[int] = None  # their KV heads; None: num_query_groups
    global_v_proj: bool = True                     # False: attention_k_eq_v (keys as values)
    # --- per-layer input embeddings (Gemma 4's hidden_size_per_layer_input, issue 32) ---
    per_layer_input_size: Optional[int] = None     # p_pl; None: none
    per_layer_input_vocab: Optional[int] = None    # V_pl; None: vocab_size
    kv_reuse_wide_mlp: bool = False                # the KV-reusing layers' MLP is 2f wide
    shared_blocks: Optional[int] = None            # Zamba's shared transformer blocks; None: none
    shared_adapter_rank: Optional[int] = None      # Zamba2's per-use MLP LoRA rank; None: none
    shared_attention_adapters: bool = False        # Zamba2's per-use LoRA on Q, K, V
    shared_adapter_sets: Optional[int] = None      # adapter sets built; None: one per use

    @property
    def is_moe(self) -> bool:
        """Whether the model has routed experts."""
        return bool(self.num_experts)

    @property
    def gated(self) -> bool:
        """Whether the MLP is gated (SwiGLU: three matrices)."""
        return bool(self.swiglu)


# ----------------------------------------------------------------------------------------------
# resolution and checks
# ----------------------------------------------------------------------------------------------

_NORMS = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}
_POSITIONS = {"learned_absolute": "learned_absolute", "learned": "learned_absolute",
              "rope": "rope", "none": "none", "yarn": "rope"}
_INT_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups",
               "kv_channels", "ffn_hidden_size", "vocab_size", "make_vocab_size_divisible_by",
               "max_position_embeddings", "num_experts", "moe_router_topk", "moe_ffn_hidden_size",
               "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim",
               "mamba_inner_size", "mamba_state_dim", "mamba_num_heads", "mamba_num_groups",
               "mamba_conv_kernel", "mamba_dt_rank", "dsa_index_heads", "dsa_index_head_dim",
               "gdn_key_heads", "gdn_value_heads", "gdn_key_head_dim", "gdn_value_head_dim",
               "gdn_conv_kernel", "short_conv_kernel", "lightning_block_size", "shared_blocks",
               "shared_adapter_rank", "shared_adapter_sets", "moe_latent_size",
               "global_kv_channels", "global_num_query_groups", "per_layer_input_size",
               "per_layer_input_vocab")
_BOOL_FIELDS = ("swiglu", "untie_embeddings_and_output_weights", "add_bias_linear", "add_qkv_bias",
                "multi_latent_attention", "qk_layernorm", "moe_shared_expert_gate", "attention_sinks",
                "off_by_one_softmax", "norm_affine", "output_layer_bias", "embedding_norm",
                "parallel_attention", "xielu_activation", "mamba_conv_bias", "mamba_in_proj_bias",
                "mamba_out_proj_bias", "mamba_gated_norm", "mamba_inner_norms", "mtp_repeated",
                "attention_output_gate", "short_conv_bias", "shared_attention_adapters",
                "global_v_proj", "kv_reuse_wide_mlp")
_OPTIONAL_BOOL_FIELDS = ("moe_router_bias", "norm_bias", "attention_bias", "attention_out_bias")
_QK_NORM_WIDTHS = ("head", "full")
MIXERS = ("attention", "mamba", "parallel", "gdn", "conv", "lightning", "global", "shared",
          "none", "kv_reuse", "global_kv_reuse")
"""The ``layer_mixers`` entries: a layer's token mixer(s)."""


def resolve(arch: Architecture, seq_length: Optional[int] = None) -> Architecture:
    """A copy of ``arch`` with Megatron's defaults filled in and every field checked.

    ``num_query_groups`` → a, ``kv_channels`` → h/a (h must divide), ``ffn_hidden_size`` → 4h,
    ``moe_ffn_hidden_size`` → ``ffn_hidden_size``, ``max_position_embeddings`` → ``seq_length``
    (when learned positions need it), ``moe_router_bias`` → ``add_bias_linear``,
    ``normalization`` and ``position_embedding_type`` spelled canonically.

    Every size is checked against :data:`LIMITS` before anything is built from it; the name is
    passed through :func:`printable`.

    Parameters
    ----------
    arch : Architecture
        The model as given (a :class:`Resolved` one is returned unchanged).
    seq_length : int, optional
        Sequence length s [tokens]: the default ``max_position_embeddings`` of learned positions.

    Returns
    -------
    Resolved
        The architecture with every default filled in.

    Raises
    ------
    InvalidValueError
        A field of the wrong type or range, or above its limit (one line naming the field).

    Examples
    --------
    >>> r = resolve(Architecture(num_layers=2, hidden_size=64, num_attention_heads=8), seq_length=2048)
    >>> (r.num_query_groups, r.kv_channels, r.ffn_hidden_size)
    (8, 8, 256)
    """
    if not isinstance(arch, Architecture):
        raise InvalidValueError(f"expected an Architecture, got {type(arch).__name__}")
    if isinstance(arch, Resolved):
        return arch             # resolved once: nothing resolves it again
    upd = {}
    _check_fields(arch, upd)
    pos = _canonical_names(arch, upd)
    _attention_defaults(upd, pos, seq_length)
    if upd.get("num_experts"):
        _resolve_moe(arch, upd)
    if arch.multi_latent_attention:
        for name in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            if name not in upd:
                raise InvalidValueError(f"multi_latent_attention needs {name}")
    if (arch.dsa_index_heads is None) != (arch.dsa_index_head_dim is None) or (
            arch.dsa_index_heads and not (arch.multi_latent_attention and arch.q_lora_rank)):
        raise InvalidValueError("dsa_index_heads and dsa_index_head_dim (DeepSeek-V3.2's "
                                "indexer) go together, with multi_latent_attention and q_lora_rank")
    if arch.attention_output_gate and arch.multi_latent_attention:
        raise InvalidValueError("attention_output_gate (Qwen3-Next's gated q_proj) with "
                                "multi_latent_attention is not modelled")
    if arch.moe_router_bias is None:
        upd["moe_router_bias"] = bool(arch.add_bias_linear)
    if arch.moe_latent_size is not None and not arch.num_experts:
        raise InvalidValueError("moe_latent_size (latent MoE projections) needs routed "
                                "experts (num_experts)")
    _resolve_hybrid(arch, upd)
    if upd.get("per_layer_input_size") and not upd.get("per_layer_input_vocab"):
        upd["per_layer_input_vocab"] = upd["vocab_size"]
    fields = {f.name: getattr(arch, f.name) for f in dataclasses.fields(Architecture)}
    fields.update(upd)
    _MAKING.ok = True
    try:
        return Resolved(**fields)
    finally:
        _MAKING.ok = False


def _check_fields(arch: Architecture, upd: dict) -> None:
    """Check the name, the sizes and the switches of ``arch`` into ``upd``."""
    upd["name"] = inert_name(arch.name)
    for name in _INT_FIELDS:
        val = getattr(arch, name)
        if val is not None:
            upd[name] = check_limit(name, pos_int(val, name))
    for name in _BOOL_FIELDS:
        val = getattr(arch, name)
        if not isinstance(val, bool):
            raise InvalidValueError(f"{name} must be true or false, got {printable(repr(val), 40)}")
    for name in _OPTIONAL_BOOL_FIELDS:
        val = getattr(arch, name)
        if val is not None and not isinstance(val, bool):
            raise InvalidValueError(f"{name} must be true, false or None, got "
                                    f"{printable(repr(val), 40)}")
    upd["mtp_num_layers"] = check_limit("mtp_num_layers", pos_int(
        arch.mtp_num_layers, "mtp_num_layers", allow_zero=True))
    upd["norms_per_layer"] = check_limit("norms_per_layer", pos_int(
        arch.norms_per_layer, "norms_per_layer", allow_zero=True))
    if arch.qk_norm_width not in _QK_NORM_WIDTHS:
        raise UnknownNameError("qk_norm_width", arch.qk_norm_width, _QK_NORM_WIDTHS)
    if arch.moe_shared_expert_intermediate_size is not None:
        upd["moe_shared_expert_intermediate_size"] = check_limit(
            "moe_shared_expert_intermediate_size", pos_int(
                arch.moe_shared_expert_intermediate_size, "moe_shared_expert_intermediate_size",
                allow_zero=True))


def _canonical_names(arch: Architecture, upd: dict) -> str:
    """Spell ``normalization`` and ``position_embedding_type`` canonically into ``upd``;
    returns the position embedding type."""
    norm = _NORMS.get(str(arch.normalization).lower())
    if norm is None:
        raise UnknownNameError("normalization", arch.normalization, list(_NORMS.values()))
    upd["normalization"] = norm
    pos = _POSITIONS.get(str(arch.position_embedding_type).lower())
    if pos is None:
        raise UnknownNameError("position_embedding_type", arch.position_embedding_type,
                               ["learned_absolute", "rope", "none"])
    upd["position_embedding_type"] = pos
    return pos


def _attention_defaults(upd: dict, pos: str, seq_length) -> None:
    """Default the query groups, head width, FFN width and learned position table in ``upd``."""
    hs, heads = upd["hidden_size"], upd["num_attention_heads"]
    upd.setdefault("num_query_groups", heads)
    if "kv_channels" not in upd:
        if hs % heads:
            raise InvalidValueError(f"kv_channels is not given and hidden_size {hs} is not a "
                                    f"multiple of num_attention_heads {heads}; give kv_channels")
        upd["kv_channels"] = hs // heads
    upd.setdefault("ffn_hidden_size", 4 * hs)
    if upd["num_query_groups"] > heads or heads % upd["num_query_groups"]:
        raise InvalidValueError(f"num_query_groups {upd['num_query_groups']} must divide "
                                f"num_attention_heads {heads}")
    if pos == "learned_absolute" and "max_position_embeddings" not in upd:
        if seq_length is None:
            raise InvalidValueError("learned position embeddings need max_position_embeddings "
                                    "(or a seq_length to default it to)")
        upd["max_position_embeddings"] = check_limit(
            "max_position_embeddings", pos_int(seq_length, "seq_length"), "seq_length")


def _resolve_moe(arch: Architecture, upd: dict) -> None:
    """Check the mixture-of-experts fields into ``upd`` (the expert width, top-k, layer pattern)."""
    upd.setdefault("moe_ffn_hidden_size", upd["ffn_hidden_size"])
    if upd["moe_router_topk"] > upd["num_experts"]:
        raise InvalidValueError(f"moe_router_topk {upd['moe_router_topk']} exceeds "
                                f"num_experts {upd['num_experts']}")
    freq = arch.moe_layer_freq
    if isinstance(freq, (list, tuple)):
        if len(freq) != upd["num_layers"] or any(
                isinstance(x, bool) or x not in (0, 1) for x in freq):
            raise InvalidValueError(f"moe_layer_freq as a pattern must list {upd['num_layers']}"
                                    " entries of 0 or 1")
        upd["moe_layer_freq"] = tuple(int(x) for x in freq)
    else:
        upd["moe_layer_freq"] = check_limit("num_layers", pos_int(freq, "moe_layer_freq"),
                                            "moe_layer_freq")


def _resolve_hybrid(arch: Architecture, upd: dict) -> None:
    """Check the hybrid Mamba / attention fields into ``upd`` (patterns of L entries)."""
    n_layers = upd["num_layers"]
    mixers, ffn = arch.layer_mixers, arch.ffn_layers
    if mixers is not None:
        if (not isinstance(mixers, (list, tuple)) or len(mixers) != n_layers
                or any(not isinstance(m, str) or m not in MIXERS for m in mixers)):
            raise InvalidValueError(f"layer_mixers must list {n_layers} entries, each one of "
                                    f"{', '.join(MIXERS)}")
        upd["layer_mixers"] = tuple(mixers)
    if ffn is not None:
        if (not isinstance(ffn, (list, tuple)) or len(ffn) != n_layers
                or any(isinstance(v, bool) or v not in (0, 1) for v in ffn)):
            raise InvalidValueError(f"ffn_layers must list {n_layers} entries of 0 or 1")
        upd["ffn_layers"] = tuple(int(v) for v in ffn)
        moe = upd.get("moe_layer_freq")
        if upd.get("num_experts") and isinstance(moe, tuple) and any(
                m and not v for m, v in zip(moe, upd["ffn_layers"])):
            raise InvalidValueError("moe_layer_freq marks a layer that ffn_layers says has no "
                                    "MLP or MoE block")
    p, ok = arch.mtp_layer_pattern, set("M*-E" if upd.get("num_experts") else "M*-")
    if p is not None and not (mixers and isinstance(p, str) and 0 < len(p) <= 64 and set(p) <= ok):
        raise InvalidValueError("mtp_layer_pattern: a hybrid's MTP letters of M*-E, e.g. '*E'")
    if arch.mamba_version not in (1, 2) or isinstance(arch.mamba_version, bool):
        raise InvalidValueError(f"mamba_version must be 1 or 2, got "
                                f"{printable(repr(arch.mamba_version), 40)}")
    if mixers is not None and any(m in ("mamba", "parallel", "shared") for m in mixers):
        need = ["mamba_inner_size", "mamba_state_dim"]
        need.append("mamba_num_heads" if arch.mamba_version == 2 else "mamba_dt_rank")
        for name in need:
            if name not in upd:
                raise InvalidValueError(f"Mamba layers (mamba_version {arch.mamba_version}) "
                                        f"need {name}")
    if mixers is not None and "gdn" in mixers:
        for name in ("gdn_key_heads", "gdn_value_heads", "gdn_key_head_dim", "gdn_value_head_dim"):
            if name not in upd:
                raise InvalidValueError(f"Gated DeltaNet layers need {name}")
    if mixers is not None and ("global" in mixers or "global_kv_reuse" in mixers):
        _resolve_global(arch, upd)
    reuse = mixers is not None and any(m in ("kv_reuse", "global_kv_reuse") for m in mixers)
    if reuse and (arch.multi_latent_attention or not arch.qk_layernorm
                  or arch.qk_norm_width != "head"):
        raise InvalidValueError("KV-reusing layers (kv_reuse) are modelled with per-head q/k "
                                "norms (qk_layernorm, qk_norm_width head) and without MLA")
    if arch.kv_reuse_wide_mlp and arch.num_experts:
        raise InvalidValueError("kv_reuse_wide_mlp (the KV-reusing layers' double-wide MLP) "
                                "with MoE layers is not modelled")


def _resolve_global(arch: Architecture, upd: dict) -> None:
    """Default the global attention layers' head width and KV heads to the model's."""
    if arch.multi_latent_attention:
        raise InvalidValueError("global attention layers with multi_latent_attention are not "
                                "modelled")
    upd.setdefault("global_kv_channels", upd["kv_channels"])
    upd.setdefault("global_num_query_groups", upd["num_query_groups"])
    heads, groups = upd["num_attention_heads"], upd["global_num_query_groups"]
    if groups > heads or heads % groups:
        raise InvalidValueError(f"global_num_query_groups {groups} must divide "
                                f"num_attention_heads {heads}")


_MAKING = threading.local()


@dataclass(frozen=True)
class Resolved(Architecture):
    """An :class:`Architecture` with every default filled in and every field checked.

    Only :func:`resolve` makes one; everything downstream of a job (counts, stages,
    activations) takes it as it is, so no caller resolves twice with another leniency;
    ``dataclasses.replace`` on a Resolved gives a plain Architecture (checked again).

    Examples
    --------
    >>> r = resolve(Architecture(num_layers=2, hidden_size=64, num_attention_heads=8,
    ...                          position_embedding_type="rope"))
    >>> isinstance(r, Resolved), resolve(r) is r
    (True, True)
    >>> dataclasses.replace(r, num_layers=0)
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: num_layers must be > 0, got 0
    """

    def __post_init__(self):
        # made by resolve(), or by dataclasses.replace() on a Resolved: then the changed
        # fields are checked by resolving a plain copy (which must change nothing)
        if getattr(_MAKING, "ok", False):
            return
        plain = Architecture(**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        again = resolve(plain)
        if again != self:
            raise InvalidValueError("a Resolved architecture is made by memsym.model.resolve()")


def lenient(arch: Architecture) -> Architecture:
    # structure-only resolution: a missing position-table length does not matter here
    return resolve(arch, seq_length=1 if isinstance(arch, Architecture)
                   and arch.max_position_embeddings is None else None)


def norm_params(x: Architecture) -> int:
    """Parameters per normalised element: 0, 1 or 2 (``norm_affine``, ``norm_bias``)."""
    # parameters per normalised element: RMSNorm has a scale only, LayerNorm scale and shift;
    # norm_affine=False (OLMo's LayerNorm) has neither, norm_bias=False (Cohere's) no shift.
    if not x.norm_affine:
        return 0
    shift = x.normalization == "LayerNorm" if x.norm_bias is None else x.norm_bias
    return 1 + int(bool(shift))
