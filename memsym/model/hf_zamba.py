"""The Zamba and Zamba2 ``config.json`` families: Mamba layers with shared transformer blocks.

A Zamba (``zamba``: Mamba-1 layers, one shared block) or Zamba2 (``zamba2``: Mamba-2 layers,
``num_mem_blocks`` shared blocks with per-use LoRA adapters) model is read into an
:class:`~memsym.model.architecture.Architecture` whose ``layer_mixers`` are ``"mamba"`` for
the ``layers_block_type`` Mamba layers and ``"shared"`` for its ``"hybrid"`` layers (a Mamba
layer after one use of a shared block); the shared blocks are counted once each and every use's
linear layer and adapters once per use (:mod:`memsym.model.shared_blocks`), so that the
parameter count equals ``sum(p.numel())`` of ``AutoModelForCausalLM.from_config`` on the meta
device (transformers 5.25.0, ``tests/test_hf_zamba.py``).  A Zamba2 hybrid layer's activations
are its Mamba-2 layer's and one use of the shared block's (:mod:`memsym.terms.shared_block`);
a Zamba layer's Mamba-1 mixer keeps what transformers' torch path keeps (the scan's fallback
without the mamba_ssm kernels, :mod:`memsym.terms.mamba1`), priced under transformers' own
model code (``--framework deepspeed``) without tensor parallelism.  Pipeline parallelism is
refused: transformers builds no pipeline stages, and a shared block read by layers on several
stages would need its weights (and their gradients' reduction) on each of them.

REF: transformers 5.25.0 ``models/zamba/configuration_zamba.py`` and ``modeling_zamba.py``
(ZambaMambaMixer, ZambaAttentionDecoderLayer, ZambaHybridLayer, ZambaModel),
``models/zamba2/configuration_zamba2.py`` and ``modeling_zamba2.py`` (Zamba2MambaMixer,
Zamba2Attention, Zamba2MLP, Zamba2HybridLayer, Zamba2Model.get_layers).
"""

from __future__ import annotations

from .hf_fields import ConfigFields

__all__ = ["ZAMBA_READERS", "ZAMBA_TYPES"]

# layers_block_type entries: "hybrid" runs a shared block before its Mamba layer; every other
# entry builds a Mamba layer (transformers remaps the legacy "mamba" to "linear_attention")
_BLOCK_TYPES = {"hybrid": "shared", "linear_attention": "mamba", "mamba": "mamba"}


def _block_types(c: ConfigFields, n_layers: int, default: list) -> tuple:
    """The ``layer_mixers`` of ``layers_block_type`` (``default`` when absent or null)."""
    val = c.data.get("layers_block_type")
    if val is None:
        val = default
    if (not isinstance(val, list) or len(val) != n_layers
            or any(not isinstance(v, str) or v not in _BLOCK_TYPES for v in val)):
        raise c._bad(f"field 'layers_block_type' must list {n_layers} layer types, each one of "
                     f"{', '.join(_BLOCK_TYPES)}")
    return tuple(_BLOCK_TYPES[v] for v in val)


def _core(c: ConfigFields, kv_default, ffn) -> dict:
    """The sizes both families spell the same way: the shared block's attention of 2h inputs,
    its gated MLP, RMSNorms, one norm per Mamba layer, no MLP in a layer."""
    hs, heads = c.int("hidden_size"), c.int("num_attention_heads")
    n_layers = c.int("num_hidden_layers")
    return dict(num_layers=n_layers, hidden_size=hs, num_attention_heads=heads,
                num_query_groups=c.int("num_key_value_heads", kv_default or heads, null=heads),
                ffn_hidden_size=ffn, swiglu=True, normalization="RMSNorm",
                vocab_size=c.int("vocab_size"), max_position_embeddings=c.int(
                    "max_position_embeddings", 4096), attention_bias=False, norms_per_layer=1,
                ffn_layers=(0,) * n_layers, shared_blocks=1)


def _untied_copies(c: ConfigFields, kw: dict, notes: list, mem_blocks: int) -> None:
    """Untied, every hybrid layer builds its own block copy, as transformers 5.25 does."""
    # PreTrainedModel.get_expanded_tied_weights_keys applies _tied_weights_keys (the shared
    # blocks' ties too) only when tie_word_embeddings is true; a Zamba2 block copy of block
    # id b holds the adapters of every use i with i % num_mem_blocks == b
    if c.bool("tie_word_embeddings", True):
        return
    uses = kw["layer_mixers"].count("shared")
    ids = range(min(mem_blocks, uses))
    kw.update(shared_blocks=max(uses, 1),
              shared_adapter_sets=sum(len(range(b, uses, mem_blocks)) ** 2 for b in ids) or None)
    notes.append(f"{c.data.get('model_type')}: tie_word_embeddings false: transformers ties no "
                 "shared block either, so every hybrid layer holds its own copy (counted so)")


def _read_zamba(c: ConfigFields, notes: list) -> dict:
    # ZambaConfig.__post_init__: attention_hidden_size = 2h, attention_head_dim = 2h // a,
    # mamba_dt_rank "auto" = ceil(h / 16), the default layers_block_type below.  The Mamba
    # mixer's per-head x_proj (H, r + 2N, d_inner / H) and dt_proj (H, d_inner / H, r) hold
    # Mamba-1's (r + 2N) d_inner and r d_inner weights; dt bias, A_log, D as Mamba-1's.
    hs, heads = c.int("hidden_size"), c.int("num_attention_heads")
    kw = _core(c, 16, c.int("intermediate_size", 14848))
    if c.int("attention_hidden_size", 2 * hs) != 2 * hs:
        raise c._bad("attention_hidden_size must be 2 * hidden_size: the shared attention reads "
                     "the concatenated hidden state and embedding")
    period, offset = c.int("attn_layer_period", 6), c.int("attn_layer_offset", 4, allow_zero=True)
    n = kw["num_layers"]
    default = ["mamba", "mamba", "hybrid"] + ["hybrid" if i % period == offset else "mamba"
                                              for i in range(n - 3)]
    d_inner, n_heads = c.int("mamba_expand", 2) * hs, c.int("n_mamba_heads", 2)
    if d_inner % n_heads:
        raise c._bad(f"the Mamba inner size {d_inner} is not a multiple of n_mamba_heads "
                     "(ZambaConfig refuses it)")
    rank = c.data.get("mamba_dt_rank", "auto")
    bias = c.bool("mamba_proj_bias", False)
    kw.update(kv_channels=c.int(("attention_head_dim", "head_dim"), 2 * hs // heads),
              position_embedding_type="none", add_bias_linear=False,
              layer_mixers=_block_types(c, n, default), mamba_version=1,
              mamba_inner_size=d_inner, mamba_num_heads=n_heads,
              mamba_state_dim=c.int("mamba_d_state", 16),
              mamba_conv_kernel=c.int("mamba_d_conv", 4),
              mamba_dt_rank=-(-hs // 16) if rank == "auto" else c.int("mamba_dt_rank"),
              mamba_conv_bias=c.bool("mamba_conv_bias", True), mamba_in_proj_bias=bias,
              mamba_out_proj_bias=bias, mamba_gated_norm=False, mamba_inner_norms=False)
    notes.append("zamba: the shared transformer block counted once, each hybrid layer's linear "
                 "layer once per use; the Mamba-1 mixers' activations as transformers' torch "
                 "path keeps them (no mamba_ssm kernels); pipeline parallelism not modelled")
    _untied_copies(c, kw, notes, 1)
    return kw


def _read_zamba2(c: ConfigFields, notes: list) -> dict:
    # Zamba2Config.__post_init__: intermediate_size None = 4h, attention_hidden_size = 2h and
    # attention_head_dim = 2h // a always (a file's own are overwritten), the default
    # layers_block_type below.  Zamba2MambaMixer: conv1d always with bias (use_conv_bias is
    # not read), in_proj / out_proj biased iff add_bias_linear, the gated RMSNorm of d_inner.
    # Zamba2MLP always builds its gate/up LoRA adapters (rank adapter_rank) for each use.
    hs, heads = c.int("hidden_size"), c.int("num_attention_heads")
    kw = _core(c, None, c.int("intermediate_size", 4 * hs, null=4 * hs))
    n = kw["num_layers"]
    default = (["mamba"] + (["mamba"] * 5 + ["hybrid"]) * 7 + ["mamba"] * 4 + ["hybrid"]
               + ["mamba"] * 3 + ["hybrid"] + ["mamba"] * 2)
    if c.data.get("layers_block_type") is None and n != len(default):
        raise c._bad(f"num_hidden_layers {n} without layers_block_type: Zamba2Config builds its "
                     f"{len(default)}-layer default pattern whatever num_hidden_layers says")
    d_inner = c.int("mamba_expand", 2) * hs
    n_heads, groups = c.int("n_mamba_heads", 8), c.int("mamba_ngroups", 1)
    if d_inner % groups:
        raise c._bad(f"the Mamba inner size {d_inner} is not a multiple of its {groups} groups")
    bias = c.bool("add_bias_linear", False)
    kw.update(kv_channels=2 * hs // heads, position_embedding_type="rope", add_bias_linear=bias,
              layer_mixers=_block_types(c, n, default),
              mamba_version=2, mamba_inner_size=d_inner, mamba_num_heads=n_heads,
              mamba_num_groups=groups, mamba_state_dim=c.int("mamba_d_state", 64),
              mamba_conv_kernel=c.int("mamba_d_conv", 4), mamba_conv_bias=True,
              mamba_in_proj_bias=bias, mamba_out_proj_bias=bias, mamba_gated_norm=True,
              shared_blocks=c.int("num_mem_blocks", 1),
              shared_adapter_rank=c.int("adapter_rank", 128, allow_zero=True) or None,
              shared_attention_adapters=c.bool("use_shared_attention_adapter", False))
    notes.append("zamba2: each shared transformer block counted once, each hybrid layer's "
                 "linear layer, LoRA adapters and block activations once per use; pipeline "
                 "parallelism not modelled")
    _untied_copies(c, kw, notes, kw["shared_blocks"])
    return kw


# model_type -> (reader, the config class's tie_word_embeddings default, the dropout
# probabilities its causal LM applies).  REF: transformers 5.25.0 configuration_zamba.py,
# configuration_zamba2.py (tie_word_embeddings True, attention_dropout 0.0).
ZAMBA_READERS = {
    "zamba": (_read_zamba, True, {"attention_dropout": 0.0}),
    "zamba2": (_read_zamba2, True, {"attention_dropout": 0.0}),
}
ZAMBA_TYPES = tuple(sorted(ZAMBA_READERS))
"""The Zamba ``model_type`` values read here."""
