"""The DeepSeek-style MoE ``config.json`` families: DeepSeek-V2 / V3 (multi-latent attention),
DeepSeek-V3.2 (``deepseek_v32``: MLA with the sparse-attention indexer), DBRX, GLM-4.5
(``glm4_moe``), GLM-4.7-Flash (``glm4_moe_lite``: multi-latent attention), dots.llm1
(``dots1``), ERNIE-4.5 MoE, Command A MoE (``cohere2_moe``), AFMoE (Trinity), Solar Open, and
the dense multi-latent-attention MiniCPM3 and Youtu.

Each reader returns :class:`~memsym.model.architecture.Architecture` keyword arguments read with
the defaults of transformers' config class and the modules its ``modeling_<type>.py`` builds
(transformers 5.24.0).  :func:`memsym.model.hf_config.from_hf_config` dispatches here.
"""

from __future__ import annotations

from .architecture import printable
from .hf_decoders import decoder_fields
from .hf_fields import ConfigFields

# (first_dense_pattern, mlp_layer_types, uncounted_notes: shared with memsym.model.hf_moe_more)
__all__ = ["MOE_READERS", "first_dense_pattern", "mlp_layer_types", "uncounted_notes"]


def first_dense_pattern(fields: ConfigFields, n_layers: int, default: int) -> tuple:
    """The MoE pattern of a DeepSeek-style ``first_k_dense_replace`` (dense layers first)."""
    c = fields
    # DeepSeek-style decoder layer: MoE iff layer_idx >= config.first_k_dense_replace
    first_dense = c.int("first_k_dense_replace", default, allow_zero=True, null=default)
    return tuple(int(i >= first_dense) for i in range(n_layers))


# the types AutoModelForCausalLM builds as Glm4MoeForCausalLM -> their config class's defaults
# (n_routed_experts, n_shared_experts, num_experts_per_tok, moe_intermediate_size, use_qk_norm)
# and its attribute_map's aliases.  REF: transformers 5.25.0 configuration_glm4_moe.py,
# configuration_param2moe.py, configuration_sarvam_moe.py (modeling_auto.py maps param2moe and
# sarvam_moe to Glm4MoeForCausalLM; first_k_dense_replace 1 in all three)
_GLM4_MOE_LIKE = {"glm4_moe": ((128, 1, 8, 1408, False), ()),
                  "param2moe": ((64, 2, 6, 2048, True), ("num_experts", "num_local_experts")),
                  "sarvam_moe": ((128, 1, 6, 1024, True), ("num_experts", "num_local_experts"))}


def _read_shared_moe(c: ConfigFields, mtype: str, notes: list) -> dict:
    # Glm4MoeDecoderLayer / Dots1DecoderLayer: a gated MLP of intermediate_size in the first
    # first_k_dense_replace layers, then MoE: a router weight E x h (its
    # e_score_correction_bias is an nn.Buffer, not a parameter), E gated experts of
    # moe_intermediate_size and one gated shared MLP of n_shared_experts * moe_intermediate_size.
    glm = mtype in _GLM4_MOE_LIKE
    kw = decoder_fields(c, mtype)
    if glm:
        (experts, shared, k, moe_ffn, qk_norm), aliases = _GLM4_MOE_LIKE[mtype]
        if mtype == "glm4_moe":
            _glm4_moe_head_dim(c, kw)
        # Glm4MoeAttention: q, k, v bias=config.attention_bias, o_proj bias=False; q_norm,
        # k_norm = RMSNorm(head_dim) iff use_qk_norm (Param2Moe / SarvamMoE spell
        # attention_bias use_qkv_bias too, and the shared experts num_shared_experts)
        bias_keys = ("attention_bias", "use_qkv_bias") if aliases else "attention_bias"
        shared_keys = ("n_shared_experts", "num_shared_experts") if aliases else "n_shared_experts"
        kw.update(add_qkv_bias=c.bool(bias_keys, False),
                  qk_layernorm=c.bool("use_qk_norm", qk_norm))
        n_exp = c.int(("n_routed_experts", *aliases), experts)
        n_shared = c.int(shared_keys, shared, allow_zero=True)
        topk, moe_f = c.int("num_experts_per_tok", k), c.int("moe_intermediate_size", moe_ffn)
    else:
        # Dots1Attention: q, k, v, o bias=config.attention_bias; RMSNorm(head_dim) on q and k.
        # n_routed_experts, n_shared_experts and num_experts_per_tok default to None in
        # Dots1Config, which builds no model (Dots1NaiveMoe's torch.empty(None, ...),
        # modeling_dots1.py:322, transformers 5.25.0): they are required
        for key in ("n_routed_experts", "n_shared_experts", "num_experts_per_tok"):
            if c.data.get(key) is None:
                raise c._bad(f"missing field {key!r}: transformers builds no model without it "
                             "(Dots1Config's default None); give it")
        kw.update(attention_bias=c.bool("attention_bias", False), qk_layernorm=True)
        n_exp, n_shared = c.int("n_routed_experts"), c.int("n_shared_experts", allow_zero=True)
        topk, moe_f = c.int("num_experts_per_tok"), c.int("moe_intermediate_size", 1408)
    pattern = first_dense_pattern(c, kw["num_layers"], 1 if glm else 0)
    kw.update(num_experts=n_exp, moe_router_topk=topk, moe_ffn_hidden_size=moe_f,
              moe_shared_expert_intermediate_size=n_shared * moe_f or None,
              moe_layer_freq=pattern, moe_router_bias=False)
    uncounted_notes(c, notes, pattern, n_exp, "Glm4Moe" if glm else "Dots1", mtp=glm)
    return kw


def _glm4_moe_head_dim(c: ConfigFields, kw: dict) -> None:
    # Glm4MoeConfig has no head_dim field; Glm4MoeAttention takes getattr(config, "head_dim",
    # h // a) (modeling_glm4_moe.py:181, transformers 5.25.0): the floor of h / a where the file
    # has none (the class defaults' 4096 / 96 builds heads of 42), and a null one fails there
    if "head_dim" not in c.data:
        kw["kv_channels"] = kw["hidden_size"] // kw["num_attention_heads"]
    elif kw["kv_channels"] is None:
        raise c._bad("head_dim null in a glm4_moe config: transformers builds no model of it "
                     "(Glm4MoeAttention's head_dim**-0.5); give a number or leave it out")


def _read_exaone_moe(c: ConfigFields, mtype: str, notes: list) -> dict:
    # ExaoneMoeDecoderLayer (OlmoeDecoderLayer's input and post-attention RMSNorms) around
    # Exaone4Attention (q, k, v, o bias=False; q_norm, k_norm RMSNorm(head_dim); sliding
    # layers change no parameter) and ExaoneMoeSparseMoEBlock iff mlp_layer_types[i] ==
    # "sparse" (default: the first first_k_dense_replace layers dense): DeepSeek-V3's router
    # E x h (e_score_correction_bias an nn.Buffer), E gated experts of moe_intermediate_size
    # and a gated shared MLP of num_shared_experts * moe_intermediate_size; else a gated
    # Qwen2MoeMLP of intermediate_size.  ExaoneMoeConfig's defaults: 64 experts, top-8, 1024
    # wide, one shared, first layer dense; MTP weights are not loaded (mtp.* ignored)
    kw = decoder_fields(c, mtype)
    n_layers = kw["num_layers"]
    pattern = mlp_layer_types(c, n_layers, lambda n: first_dense_pattern(c, n, 1))
    n_exp, moe_f = c.int("num_experts", 64), c.int("moe_intermediate_size", 1024)
    n_shared = c.int("num_shared_experts", 1, allow_zero=True)
    kw.update(qk_layernorm=True, num_experts=n_exp, moe_router_topk=c.int("num_experts_per_tok", 8),
              moe_ffn_hidden_size=moe_f, moe_shared_expert_intermediate_size=n_shared * moe_f or None,
              moe_layer_freq=pattern, moe_router_bias=False)
    uncounted_notes(c, notes, pattern, n_exp, "ExaoneMoe", mtp=False)
    return kw


def uncounted_notes(fields: ConfigFields, notes: list, pattern, n_exp: int, cls: str, *,
                    mtp: bool) -> None:
    """Say what a DeepSeek-V3-style config holds that transformers' ``cls`` model does not
    build as parameters: the routers' e_score_correction_bias (an nn.Buffer) and, where the
    config has them, the MTP layers (num_nextn_predict_layers)."""
    c = fields
    if any(pattern):
        notes.append(f"e_score_correction_bias ({sum(pattern)} x {n_exp}) not counted: a buffer, "
                     f"not a parameter, in transformers' {cls}TopkRouter")
    n_mtp = c.int("num_nextn_predict_layers", 0, allow_zero=True) if mtp else 0
    if n_mtp:
        notes.append(f"num_nextn_predict_layers={n_mtp} not counted: transformers' "
                     f"{cls}ForCausalLM builds no MTP layer (count it with --mtp-num-layers "
                     "when the training framework builds one)")


def _read_ernie_moe(c: ConfigFields, mtype: str, notes: list) -> dict:
    # Ernie4_5_MoeDecoderLayer: Ernie4_5_MoeSparseMoeBlock iff (i + 1) % moe_layer_interval == 0
    # and moe_layer_start_index <= i <= moe_layer_end_index, else Ernie4_5_MoeMLP of
    # intermediate_size.  The block: router weight E x h plus e_score_correction_bias, an
    # nn.Parameter of E (requires_grad=False); E gated experts of moe_intermediate_size (never
    # biased); a shared MLP of moe_num_shared_experts * moe_intermediate_size.
    kw = decoder_fields(c, mtype)
    if c.bool("use_bias", False):
        raise c._bad("use_bias true in an ERNIE-4.5 MoE config is not modelled (its experts stay "
                     "unbiased while every other projection and lm_head get biases; no released "
                     "ERNIE-4.5 MoE model uses it)")
    n_layers = kw["num_layers"]
    start = c.int("moe_layer_start_index", 1, allow_zero=True)
    end = c.int("moe_layer_end_index", 27, allow_zero=True)
    step = c.int("moe_layer_interval", 1)
    pattern = tuple(int((i + 1) % step == 0 and start <= i <= end) for i in range(n_layers))
    n_exp = c.int(("moe_num_experts", "num_experts"), 64)
    moe_f = c.int("moe_intermediate_size", 1536)
    n_shared = c.int("moe_num_shared_experts", 2, allow_zero=True)
    kw.update(num_experts=n_exp, moe_router_topk=c.int(("moe_k", "num_experts_per_tok"), 6),
              moe_ffn_hidden_size=moe_f,
              moe_shared_expert_intermediate_size=n_shared * moe_f or None,
              moe_layer_freq=pattern, moe_router_bias=True)
    if any(pattern):
        notes.append(f"e_score_correction_bias ({sum(pattern)} x {n_exp}) counted: an "
                     "nn.Parameter (requires_grad=False) of transformers' Ernie4_5_MoeStatics")
    return kw


# the types AutoModelForCausalLM builds as DeepseekV2/V3ForCausalLM -> their config class's
# defaults (first_k_dense_replace, n_shared_experts, moe_intermediate_size, n_routed_experts,
# q_lora_rank), the model class and the aliases of n_routed_experts / n_shared_experts.  REF:
# transformers 5.25.0 configuration_deepseek_v2.py, configuration_deepseek_v3.py,
# configuration_sarvam_mla.py (modeling_auto.py maps sarvam_mla to DeepseekV3ForCausalLM)
_DEEPSEEK = {"deepseek_v2": ((0, 2, 1407, 64, 1536), "DeepseekV2", (), ()),
             "deepseek_v3": ((3, 1, 2048, 256, 1536), "DeepseekV3", (), ()),
             "sarvam_mla": ((1, 1, 2048, 128, None), "DeepseekV3",
                            ("num_experts", "num_local_experts"), ("num_shared_experts",))}


def _read_deepseek(c: ConfigFields, mtype: str, notes: list) -> dict:
    (dense_k, shared, moe_ffn, experts, q_rank), cls, exp_alias, shared_alias = _DEEPSEEK[mtype]
    v3 = cls == "DeepseekV3"
    kw = decoder_fields(c, mtype)
    heads = kw["num_attention_heads"]
    if c.bool("attention_bias", False) or c.bool("mlp_bias", False):
        raise c._bad("attention_bias / mlp_bias true in a DeepSeek MLA config is not modelled "
                     "(no released DeepSeek model uses them)")
    n_layers = kw["num_layers"]
    first_dense = c.int("first_k_dense_replace", dense_k, allow_zero=True, null=dense_k)
    freq = c.int("moe_layer_freq", 1)
    if freq != 1:
        notes.append(f"moe_layer_freq={freq} ignored: transformers' DeepSeek decoder layer is MoE "
                     "from layer first_k_dense_replace on")
    n_shared = c.int(("n_shared_experts", *shared_alias), shared, allow_zero=True)
    moe_f = c.int("moe_intermediate_size", moe_ffn)
    # DeepseekV{2,3}DecoderLayer: MoE iff layer_idx >= config.first_k_dense_replace
    pattern = tuple(int(i >= first_dense) for i in range(n_layers))
    if not v3 and c.data.get("num_experts_per_tok") is None:
        # DeepseekV2Config's default None builds a model, whose DeepseekV2TopkRouter then calls
        # torch.topk(scores, k=None) at its first forward (modeling_deepseek_v2.py:88, 102,
        # transformers 5.25.0): it cannot be trained, so there is nothing to estimate
        raise c._bad("missing field 'num_experts_per_tok': transformers builds DeepseekV2 of "
                     "DeepseekV2Config's default None but its router's torch.topk(k=None) fails "
                     "at the first forward; give it")
    topk = c.int("num_experts_per_tok", 8)
    v_head = c.int("v_head_dim", 128, null=128)
    kw.update(num_query_groups=heads, kv_channels=v_head,
              num_experts=c.int(("n_routed_experts", *exp_alias), experts), moe_router_topk=topk,
              moe_ffn_hidden_size=moe_f, moe_layer_freq=pattern,
              moe_shared_expert_intermediate_size=n_shared * moe_f or None,
              multi_latent_attention=True, q_lora_rank=c.int("q_lora_rank", q_rank, null=None),
              kv_lora_rank=c.int("kv_lora_rank", 512), qk_head_dim=c.int("qk_nope_head_dim", 128),
              qk_pos_emb_head_dim=c.int("qk_rope_head_dim", 64), v_head_dim=v_head,
              # DeepseekV3TopkRouter keeps e_score_correction_bias as an nn.Buffer (not a
              # parameter) in transformers 5; DeepSeek-V2's router has no bias
              moe_router_bias=False, mtp_num_layers=0)
    uncounted_notes(c, notes, pattern if v3 else (), kw["num_experts"], cls, mtp=True)
    return kw



def _mla_moe_fields(c: ConfigFields, heads: int, pattern: tuple, q_rank, expert_keys, *,
                    experts: int, moe_ffn: int, topk: int, qk_nope: int, v_head: int) -> dict:
    """The multi-latent attention and DeepSeek-style MoE fields (a router, routed experts of
    ``moe_intermediate_size``, a shared MLP of ``n_shared_experts`` of them; no router bias,
    no MTP layer in transformers) of GLM-4 MoE Lite and DeepSeek-V3.2, read with each config
    class's own defaults (the keywords)."""
    n_exp = c.int(expert_keys, experts)
    moe_f = c.int("moe_intermediate_size", moe_ffn)
    n_shared = c.int("n_shared_experts", 1, allow_zero=True)
    v_dim = c.int("v_head_dim", v_head)
    return dict(num_query_groups=heads, kv_channels=v_dim, num_experts=n_exp,
                moe_router_topk=c.int("num_experts_per_tok", topk), moe_ffn_hidden_size=moe_f,
                moe_layer_freq=pattern,
                moe_shared_expert_intermediate_size=n_shared * moe_f or None,
                multi_latent_attention=True, q_lora_rank=q_rank,
                kv_lora_rank=c.int("kv_lora_rank", 512),
                qk_head_dim=c.int("qk_nope_head_dim", qk_nope),
                qk_pos_emb_head_dim=c.int("qk_rope_head_dim", 64), v_head_dim=v_dim,
                moe_router_bias=False, mtp_num_layers=0)


def _read_glm4_moe_lite(c: ConfigFields, mtype: str, notes: list) -> dict:
    # Glm4MoeLiteAttention: DeepSeek-V3's multi-latent attention (q_a_proj, q_a_layernorm,
    # q_b_proj or q_proj; kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj; o_proj), with
    # bias=config.attention_bias on q_a_proj, kv_a_proj_with_mqa and o_proj.
    # Glm4MoeLiteDecoderLayer: Glm4MoeLiteMoE iff mlp_layer_types[i] == "sparse" (default
    # ["dense"] + ["sparse"] * (L - 1); first_k_dense_replace is not read): a router E x h (its
    # e_score_correction_bias an nn.Buffer), E gated experts of moe_intermediate_size and a
    # shared MLP of n_shared_experts * moe_intermediate_size; else a gated MLP of
    # intermediate_size.
    def layer_0_dense(n_layers):
        first = c.data.get("first_k_dense_replace")
        if first is not None and first != 1:
            notes.append(f"first_k_dense_replace={printable(repr(first), 20)} ignored: "
                         "transformers' Glm4MoeLiteConfig makes layer 0 dense and the rest MoE "
                         "unless mlp_layer_types says otherwise")
        return tuple(int(i > 0) for i in range(n_layers))

    kw, heads, pattern = _latent_moe_decoder(c, mtype, "GLM-4 MoE Lite", layer_0_dense)
    # Glm4MoeLiteConfig's defaults
    kw.update(_mla_moe_fields(c, heads, pattern, c.int("q_lora_rank", 768, null=None),
                              ("n_routed_experts", "num_local_experts"), experts=64,
                              moe_ffn=1536, topk=4, qk_nope=192, v_head=256))
    uncounted_notes(c, notes, pattern, kw["num_experts"], "Glm4MoeLite", mtp=True)
    return kw


def _latent_moe_decoder(c: ConfigFields, mtype: str, family: str, default) -> tuple:
    """(decoder fields, heads, MoE pattern) of a multi-latent-attention MoE family whose layers
    a ``mlp_layer_types`` list may name (GLM-4 MoE Lite, DeepSeek-V3.2): ``attention_bias``
    true refused (``family`` names the config), the pattern from ``mlp_layer_types`` or, where
    the file has none, ``default(n_layers)``."""
    kw = decoder_fields(c, mtype)
    if c.bool("attention_bias", False):
        raise c._bad(f"attention_bias true in a {family} config is not modelled (biases on "
                     "q_a_proj, kv_a_proj_with_mqa and o_proj only)")
    return kw, kw["num_attention_heads"], mlp_layer_types(c, kw["num_layers"], default)


def mlp_layer_types(fields: ConfigFields, n_layers: int, default) -> tuple:
    """The MoE pattern a file's ``mlp_layer_types`` lists ("sparse": MoE, "dense": MLP), or
    ``default(n_layers)`` (the config class's own pattern) where the file has none or null.

    ``default`` is called only then: a file that lists its layers has no other field read for
    the pattern (``first_k_dense_replace`` among them)."""
    c = fields
    raw = c.data.get("mlp_layer_types")
    if raw is None:
        return default(n_layers)
    if (not isinstance(raw, list) or len(raw) != n_layers
            or any(v not in ("dense", "sparse") for v in raw)):
        raise c._bad(f"field 'mlp_layer_types' must list {n_layers} entries, each "
                     "'dense' or 'sparse'")
    return tuple(int(v == "sparse") for v in raw)


def _read_deepseek_v32(c: ConfigFields, mtype: str, notes: list) -> dict:
    # DeepseekV32Attention: DeepSeek-V3's multi-latent attention with q_a_proj always built
    # (q_lora_rank may not be null), bias=config.attention_bias on q_a_proj, kv_a_proj_with_mqa
    # and o_proj, plus a DeepseekV32Indexer per layer (DeepSeek Sparse Attention): wq_b
    # q_lora_rank -> index_n_heads * index_head_dim, wk h -> index_head_dim, k_norm
    # nn.LayerNorm(index_head_dim) (weight and bias), weights_proj h -> index_n_heads; none
    # biased.  DeepseekV32DecoderLayer: DeepseekV32MoE iff mlp_layer_types[i] == "sparse"
    # (default: the first first_k_dense_replace layers dense); the MoE as DeepSeek-V3's (router
    # E x h, its e_score_correction_bias an nn.Buffer; a shared MLP of n_shared_experts *
    # moe_intermediate_size); DeepseekV32MLP never biased (mlp_bias is not read).
    # DeepseekV32Config's defaults
    return _dsa_model(c, mtype, notes, family="DeepSeek-V3.2", cls="DeepseekV32", q_rank=1536,
                      qk_nope=128, v_head=128, index_heads=64)


def _dsa_model(c: ConfigFields, mtype: str, notes: list, *, family: str, cls: str, q_rank: int,
               qk_nope: int, v_head: int, index_heads: int, layers_ok=None) -> dict:
    """The Architecture fields of a DeepSeek-V3.2-style model (multi-latent attention, the DSA
    indexer in every layer, DeepSeek MoE after the first_k_dense_replace dense layers), read
    with its config class's defaults (``q_rank``, ``qk_nope``, ``v_head``, ``index_heads``);
    ``layers_ok(kw)`` refuses what the family's layers add (GLM-5's shared indexers)."""
    kw, heads, pattern = _latent_moe_decoder(c, mtype, family,
                                             lambda n_layers: first_dense_pattern(c, n_layers, 3))
    if layers_ok is not None:
        layers_ok(kw)
    q_rank = c.int("q_lora_rank", q_rank, null=None)
    if q_rank is None:
        raise c._bad(f"q_lora_rank null: transformers' {cls}Attention and its indexer "
                     "always build q_a_proj and wq_b of q_lora_rank")
    kw.update(_mla_moe_fields(c, heads, pattern, q_rank,
                              ("n_routed_experts", "num_local_experts", "num_experts"),
                              experts=256, moe_ffn=2048, topk=8, qk_nope=qk_nope, v_head=v_head),
              dsa_index_heads=c.int("index_n_heads", index_heads),
              dsa_index_head_dim=c.int("index_head_dim", 128))
    notes.append("DeepSeek Sparse Attention: the indexer's weights counted as any weight; its "
                 f"forward keeps no activation (torch.no_grad in transformers' {cls}Indexer); "
                 "attention estimated as dense")
    uncounted_notes(c, notes, pattern, kw["num_experts"], cls, mtp=True)
    return kw


def _glm_dsa_indexers(c: ConfigFields, n_layers: int) -> list:
    """GlmMoeDsaConfig's indexer_types: the file's list, else its index_topk_pattern ("F" full,
    "S" shared), else index_topk_freq / index_skip_topk_offset (defaults 1 and 2: every layer
    "full"), as its __post_init__ derives them (configuration_glm_moe_dsa.py:131-144)."""
    listed = c.data.get("indexer_types")
    pattern = c.data.get("index_topk_pattern")
    if listed is None and isinstance(pattern, str):
        listed = [{"F": "full", "S": "shared"}.get(ch, ch) for ch in pattern[:n_layers + 1]]
    elif listed is None and pattern is not None:
        listed = pattern
    if listed is not None:
        if not isinstance(listed, list) or len(listed) != n_layers \
                or any(v not in ("full", "shared") for v in listed):
            raise c._bad(f"the indexer pattern (indexer_types or index_topk_pattern) must list "
                         f"{n_layers} entries, each 'full' or 'shared' ('F' or 'S')")
        return listed
    freq = max(c.int("index_topk_freq", 1), 1)
    offset = c.int("index_skip_topk_offset", 2, allow_zero=True)
    return ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n_layers)]


def _read_glm_moe_dsa(c: ConfigFields, mtype: str, notes: list) -> dict:
    # GlmMoeDsaAttention (GLM-5): DeepSeek-V3.2's multi-latent attention and DSA indexer
    # (wq_b, wk, k_norm, weights_proj), the indexer built only where indexer_types[i] is "full"
    # ("shared" layers reuse the previous full layer's top-k: no indexer, modeling_glm_moe_dsa.py
    # :332-333); GlmMoeDsaDecoderLayer: GlmMoeDsaMoE iff mlp_layer_types[i] == "sparse"
    # (default: the first first_k_dense_replace layers dense), a router E x h (its
    # e_score_correction_bias an nn.Buffer), E gated experts and a shared MLP of
    # n_shared_experts * moe_intermediate_size; GlmMoeDsaMLP unbiased.
    def shared_indexers_refused(kw):
        if "shared" in _glm_dsa_indexers(c, kw["num_layers"]):
            raise c._bad("layers that share the previous layer's top-k (indexer_types 'shared') "
                         "build no indexer: memsym's Architecture counts one in every layer")

    # GlmMoeDsaConfig's defaults (configuration_glm_moe_dsa.py:88-129)
    return _dsa_model(c, mtype, notes, family="GLM-MoE-DSA", cls="GlmMoeDsa", q_rank=2048,
                      qk_nope=192, v_head=256, index_heads=32,
                      layers_ok=shared_indexers_refused)


def _read_dbrx(c: ConfigFields, mtype: str, notes: list) -> dict:
    # DbrxConfig: d_model, n_heads, n_layers, max_seq_len; attn_config (DbrxAttentionConfig:
    # kv_n_heads default 1, attn_pdrop) and ffn_config (DbrxFFNConfig: ffn_hidden_size 3584,
    # moe_num_experts 4, moe_top_k 1) nested.  DbrxBlock: norm_1 and norm_2 nn.LayerNorm(h,
    # bias=False); DbrxAttention: Wqkv h -> h + 2 g (h // a), out_proj h x h, no bias;
    # DbrxFFN in every layer: router h -> E (no bias), E gated experts (w1, v1, w2 of f x h);
    # norm_f nn.LayerNorm(h, bias=False); lm_head untied (DbrxConfig refuses tying).
    attn, ffn = c.object("attn_config"), c.object("ffn_config")
    if attn.get("rope_theta") is None:
        # DbrxAttention reads attn_config.rope_theta (modeling_dbrx.py:184, transformers
        # 5.25.0), a field DbrxAttentionConfig has no default for: DbrxConfig's own defaults
        # and any attn_config without it build no model
        raise c._bad("missing field 'attn_config.rope_theta': transformers builds no model "
                     "without it (DbrxAttention reads it; DbrxAttentionConfig has no default)")
    # the nested fields are read (their dropout too) as top-level ones; the modules read only
    # the nested copies (a top-level kv_n_heads or attn_pdrop is ignored by transformers, so
    # here too), and ffn_config's hidden_size is the model's d_model
    own = {"attn_config": ("kv_n_heads", "attn_pdrop"),
           "ffn_config": ("ffn_hidden_size", "moe_num_experts", "moe_top_k")}
    nested_keys = own["attn_config"] + own["ffn_config"]
    c.data = {**{k: v for k, v in c.data.items() if k not in nested_keys},
              **{k: attn[k] for k in own["attn_config"] if k in attn},
              **{k: ffn[k] for k in own["ffn_config"] if k in ffn}}
    if c.bool("tie_word_embeddings", False):
        raise c._bad("tie_word_embeddings true: transformers' DbrxConfig refuses it")
    hs, heads = c.int(("d_model", "hidden_size")), c.int(("n_heads", "num_attention_heads"))
    if hs % heads:
        raise c._bad(f"d_model {hs} is not a multiple of n_heads {heads} (DbrxAttention's "
                     "head_dim is d_model // n_heads)")
    n_layers, n_exp = c.int(("n_layers", "num_hidden_layers")), c.int("moe_num_experts", 4)
    f_exp = c.int("ffn_hidden_size", 3584)
    return dict(num_layers=n_layers, hidden_size=hs, num_attention_heads=heads,
                num_query_groups=c.int("kv_n_heads", 1), kv_channels=hs // heads,
                ffn_hidden_size=f_exp, swiglu=True, normalization="LayerNorm", norm_bias=False,
                vocab_size=c.int("vocab_size"), position_embedding_type="rope",
                max_position_embeddings=c.int(("max_seq_len", "max_position_embeddings"), 2048),
                add_bias_linear=False, num_experts=n_exp,
                moe_router_topk=c.int("moe_top_k", 1), moe_ffn_hidden_size=f_exp,
                moe_router_bias=False)


def _read_cohere2_moe(c: ConfigFields, mtype: str, notes: list) -> dict:
    # Cohere2MoeAttention: q, k, v, o bias=config.attention_bias (head_dim default 128);
    # Cohere2MoeDecoderLayer: one input_layernorm (Cohere2MoeRMSNorm when rms_norm_eps is set,
    # else Cohere2MoeLayerNorm: a weight each, no bias) feeding attention and the MLP in
    # parallel; Cohere2MoeMLP(prefix_dense_intermediate_size) iff mlp_layer_types[i] == "dense"
    # (default: the first first_k_dense_replace layers, default 0), else
    # Cohere2MoeSparseMoeBlock: router E x h (no bias), E gated experts of intermediate_size and,
    # iff num_shared_experts > 0, a gated shared MLP of num_shared_experts * intermediate_size
    kw = decoder_fields(c, mtype)
    n_layers, f_e = kw["num_layers"], kw["ffn_hidden_size"]
    pattern = mlp_layer_types(c, n_layers, lambda n: first_dense_pattern(c, n, 0))
    # a dense layer needs prefix_dense_intermediate_size (Cohere2MoeConfig's default None
    # builds no MLP)
    f_dense = f_e if all(pattern) else c.int("prefix_dense_intermediate_size")
    n_shared = c.int("num_shared_experts", 0, allow_zero=True)
    kw.update(normalization="RMSNorm" if c.data.get("rms_norm_eps") is not None else "LayerNorm",
              norm_bias=False, norms_per_layer=1, parallel_attention=True,
              attention_bias=c.bool("attention_bias", False), ffn_hidden_size=f_dense,
              num_experts=c.int("num_experts", 8), moe_router_topk=c.int("num_experts_per_tok", 2),
              moe_ffn_hidden_size=f_e, moe_shared_expert_intermediate_size=n_shared * f_e or None,
              moe_layer_freq=pattern, moe_router_bias=False)
    return kw


def _read_afmoe(c: ConfigFields, mtype: str, notes: list) -> dict:
    # AfmoeAttention: q, k, v, o bias=config.attention_bias, q_norm and k_norm RMSNorm(head_dim),
    # gate_proj h -> a d_h (no bias: a sigmoid gate on the attention output, counted as
    # attention_output_gate); AfmoeDecoderLayer: input, post-attention, pre-MLP and post-MLP
    # RMSNorms; AfmoeMLP of intermediate_size in the first num_dense_layers layers, else
    # AfmoeSparseMoeBlock: router gate h -> E (no bias), E gated experts and a gated shared MLP
    # of num_shared_experts * moe_intermediate_size, and expert_bias, an nn.Parameter of E
    # (requires_grad=False)
    kw = decoder_fields(c, mtype)
    if c.bool("attention_bias", False):
        raise c._bad("attention_bias true in an AFMoE config is not modelled (q, k, v, o biased "
                     "beside an unbiased output-gate projection)")
    n_dense = c.int("num_dense_layers", 1, allow_zero=True)
    pattern = tuple(int(i >= n_dense) for i in range(kw["num_layers"]))
    n_exp, moe_f = c.int("num_experts", 64), c.int("moe_intermediate_size", 1408)
    n_shared = c.int("num_shared_experts", 2, allow_zero=True)
    kw.update(qk_layernorm=True, attention_output_gate=True, norms_per_layer=4,
              num_experts=n_exp, moe_router_topk=c.int("num_experts_per_tok", 6),
              moe_ffn_hidden_size=moe_f, moe_shared_expert_intermediate_size=n_shared * moe_f or None,
              moe_layer_freq=pattern, moe_router_bias=True)
    if any(pattern):
        notes.append(f"expert_bias ({sum(pattern)} x {n_exp}) counted: an nn.Parameter "
                     "(requires_grad=False) of transformers' AfmoeSparseMoeBlock")
    return kw


#: the dense multi-latent-attention types: (family, q_lora_rank, kv_lora_rank,
#: qk_nope_head_dim, qk_rope_head_dim, v_head_dim (None: h // a), whether the MLP reads
#: mlp_bias), their config classes' defaults (MiniCPM3Config, YoutuConfig)
_DENSE_MLA = {"minicpm3": ("MiniCPM3", 768, 256, 64, 32, None, True),
              "youtu": ("Youtu", 1536, 512, 128, 64, 128, False)}


def _read_dense_mla(c: ConfigFields, mtype: str, notes: list) -> dict:
    # MiniCPM3Attention / YoutuAttention: DeepSeek-V2/V3's multi-latent attention (q_a_proj,
    # q_a_layernorm, q_b_proj or q_proj; kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj; o_proj),
    # bias=config.attention_bias on q_a_proj, kv_a_proj_with_mqa and o_proj; a gated MLP in every
    # layer (MiniCPM3MLP bias=config.mlp_bias, YoutuMLP never biased); input and post-attention
    # RMSNorms; MiniCPM3's embedding scale is a buffer; lm_head tied by default
    family, q_rank, kv_rank, nope, rope, v_dflt, mlp_bias = _DENSE_MLA[mtype]
    kw = decoder_fields(c, mtype)
    if c.bool("attention_bias", False):
        raise c._bad(f"attention_bias true in a {family} config is not modelled (biases on "
                     "q_a_proj, kv_a_proj_with_mqa and o_proj only)")
    heads, hs = kw["num_attention_heads"], kw["hidden_size"]
    v_dflt = hs // heads if v_dflt is None else v_dflt
    v_head = c.int("v_head_dim", v_dflt, null=v_dflt)
    kw.update(num_query_groups=heads, kv_channels=v_head, attention_bias=False,
              add_bias_linear=c.bool("mlp_bias", False) if mlp_bias else False,
              multi_latent_attention=True, q_lora_rank=c.int("q_lora_rank", q_rank, null=None),
              kv_lora_rank=c.int("kv_lora_rank", kv_rank),
              qk_head_dim=c.int("qk_nope_head_dim", nope),
              qk_pos_emb_head_dim=c.int("qk_rope_head_dim", rope), v_head_dim=v_head)
    return kw


def _read_solar_open(c: ConfigFields, mtype: str, notes: list) -> dict:
    # SolarOpenAttention: q, k, v bias=config.attention_bias, o_proj never; SolarOpenMoE in
    # every layer: a router E x h (its e_score_correction_bias an nn.Buffer), E gated experts of
    # moe_intermediate_size and a gated shared MLP of n_shared_experts * moe_intermediate_size;
    # intermediate_size is not read (SolarOpenConfig has none)
    moe_f = c.int("moe_intermediate_size", 1280)
    kw = decoder_fields(ConfigFields({**c.data, "intermediate_size": moe_f}, c.where), mtype)
    n_exp = c.int(("n_routed_experts", "num_local_experts"), 128)
    n_shared = c.int("n_shared_experts", 1, allow_zero=True)
    pattern = (1,) * kw["num_layers"]
    kw.update(add_qkv_bias=c.bool("attention_bias", False), num_experts=n_exp,
              moe_router_topk=c.int("num_experts_per_tok", 8), moe_ffn_hidden_size=moe_f,
              moe_shared_expert_intermediate_size=n_shared * moe_f or None,
              moe_layer_freq=pattern, moe_router_bias=False)
    uncounted_notes(c, notes, pattern, n_exp, "SolarOpen", mtp=False)
    return kw


MOE_READERS = {"deepseek_v2": _read_deepseek, "deepseek_v3": _read_deepseek,
               "sarvam_mla": _read_deepseek, "param2moe": _read_shared_moe,
               "sarvam_moe": _read_shared_moe,
               "deepseek_v32": _read_deepseek_v32, "dbrx": _read_dbrx,
               "glm4_moe": _read_shared_moe, "dots1": _read_shared_moe,
               "ernie4_5_moe": _read_ernie_moe, "glm4_moe_lite": _read_glm4_moe_lite,
               "exaone_moe": _read_exaone_moe, "glm_moe_dsa": _read_glm_moe_dsa,
               "cohere2_moe": _read_cohere2_moe, "afmoe": _read_afmoe,
               "minicpm3": _read_dense_mla, "youtu": _read_dense_mla,
               "solar_open": _read_solar_open}
"""model_type -> its reader ``(c, mtype, notes) -> Architecture keyword arguments``."""
