"""The GPT-style ``config.json`` families: GPT-2, GPT-NeoX, GPT-J, Falcon, BLOOM, StarCoder2,
Nemotron (Nemotron-4 / Minitron), Phi (Phi-1, Phi-1.5, Phi-2), GPTBigCode (StarCoder, SantaCoder),
StableLM, OPT, GPT-Neo, CodeGen, MPT and Persimmon: biased projections, LayerNorms, learned,
rotary or ALiBi positions, parallel blocks.

Each reader returns :class:`~memsym.model.architecture.Architecture` keyword arguments read with
the defaults of transformers' config class and the modules its ``modeling_<type>.py`` builds
(transformers 5.24.0).  :func:`memsym.model.hf_config.from_hf_config` dispatches here.
"""

from __future__ import annotations

from .architecture import printable
from .hf_decoders import decoder_fields
from .hf_fields import ConfigFields

__all__ = ["CLASSIC_READERS"]


def _read_gpt2(c: ConfigFields, mtype: str, notes: list) -> dict:
    hs = c.int(("n_embd", "hidden_size"))
    return dict(num_layers=c.int(("n_layer", "num_hidden_layers")), hidden_size=hs,
                num_attention_heads=c.int(("n_head", "num_attention_heads")),
                ffn_hidden_size=c.int("n_inner", 4 * hs), vocab_size=c.int("vocab_size"),
                max_position_embeddings=c.int(("n_positions", "max_position_embeddings"), 1024),
                add_bias_linear=True,
                # GPT2Config's default gelu_new (transformers 5.25.0 configuration_gpt2.py:83),
                # read for autocast: its pow is an fp32 op under CUDA's (memsym.terms.autocast)
                extra={"hf_activation": c.str("activation_function", "gelu_new")})


def _read_gpt_neox(c: ConfigFields, mtype: str, notes: list) -> dict:
    # GPTNeoXAttention: query_key_value and dense with bias=config.attention_bias;
    # GPTNeoXMLP: dense_h_to_4h, dense_4h_to_h with nn.Linear's default bias
    return dict(num_layers=c.int("num_hidden_layers"), hidden_size=c.int("hidden_size"),
                num_attention_heads=c.int("num_attention_heads"),
                ffn_hidden_size=c.int("intermediate_size"), vocab_size=c.int("vocab_size"),
                position_embedding_type="rope",
                max_position_embeddings=c.int("max_position_embeddings", 2048),
                add_bias_linear=True, attention_bias=c.bool("attention_bias", True),
                parallel_attention=c.bool("use_parallel_residual", True),
                # GPTNeoXConfig's default (configuration_gpt_neox.py:66), read for autocast
                extra={"hf_activation": c.str("hidden_act", "gelu")})


def _read_gptj(c: ConfigFields, mtype: str, notes: list) -> dict:
    # GPTJBlock: one ln_1 feeding attention and MLP in parallel; q, k, v, out_proj bias=False;
    # fc_in, fc_out with bias; GPTJForCausalLM.lm_head = nn.Linear(n_embd, vocab) with bias
    hs = c.int(("n_embd", "hidden_size"))
    return dict(num_layers=c.int(("n_layer", "num_hidden_layers")), hidden_size=hs,
                num_attention_heads=c.int(("n_head", "num_attention_heads")),
                ffn_hidden_size=c.int("n_inner", 4 * hs, null=4 * hs),
                vocab_size=c.int("vocab_size"), position_embedding_type="rope",
                max_position_embeddings=c.int(("n_positions", "max_position_embeddings"), 2048),
                add_bias_linear=True, attention_bias=False, output_layer_bias=True,
                norms_per_layer=1, parallel_attention=True,
                # GPTJConfig's default gelu_new (configuration_gptj.py), GPTJMLP's act
                extra={"hf_activation": c.str("activation_function", "gelu_new")})


def _read_falcon(c: ConfigFields, mtype: str, notes: list) -> dict:
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
                add_bias_linear=bias, norms_per_layer=norms, parallel_attention=parallel,
                # FalconConfig's default gelu (configuration_falcon.py:87), read for autocast
                extra={"hf_activation": c.str("activation", "gelu")})


def _read_bloom(c: ConfigFields, mtype: str, notes: list) -> dict:
    # BloomModel: word_embeddings_layernorm after the embedding; fused qkv 3h and dense with
    # bias; 4h MLP with bias; input and post-attention LayerNorms; ALiBi (no position table)
    hs = c.int(("hidden_size", "n_embed"))
    return dict(num_layers=c.int(("n_layer", "num_hidden_layers")), hidden_size=hs,
                num_attention_heads=c.int(("n_head", "num_attention_heads")),
                ffn_hidden_size=4 * hs, vocab_size=c.int("vocab_size"),
                position_embedding_type="none", add_bias_linear=True, embedding_norm=True)


def _read_starcoder2(c: ConfigFields, mtype: str, notes: list) -> dict:
    # Starcoder2: q, k, v, o and c_fc, c_proj with bias=config.use_bias; nn.LayerNorm norms;
    # head_dim = getattr(config, "head_dim", None) or h // a
    kw = decoder_fields(c, mtype, gated=False, norm="LayerNorm")
    kw["add_bias_linear"] = c.bool("use_bias", True)
    # Starcoder2Config's default gelu_pytorch_tanh (transformers 5.25.0
    # configuration_starcoder2.py:66), Starcoder2MLP's act (modeling_starcoder2.py:59): read
    # for autocast (memsym.terms.autocast.AUTOCAST_ACTIVATIONS)
    kw["extra"] = {**kw.get("extra", {}),
                   "hf_activation": c.str("hidden_act", "gelu_pytorch_tanh")}
    return kw



def _read_nemotron(c: ConfigFields, mtype: str, notes: list) -> dict:
    # NemotronDecoderLayer: input and post-attention NemotronLayerNorm1P (an nn.LayerNorm: a
    # weight and a bias of h); NemotronAttention: q, k, v, o with bias=config.attention_bias,
    # head_dim = config.head_dim (h // a when null); NemotronMLP: up_proj, relu2, down_proj
    # (no gate) with bias=config.mlp_bias.  partial_rotary_factor changes no parameter.
    # NemotronConfig leaves num_key_value_heads None, which NemotronAttention cannot build with
    # (num_heads // num_key_value_heads, modeling_nemotron.py:238, transformers 5.25.0): it is
    # required
    if c.data.get("num_key_value_heads") is None:
        raise c._bad("missing field 'num_key_value_heads': transformers builds no model without "
                     "it (NemotronConfig's default None fails in NemotronAttention); give it")
    kw = decoder_fields(c, mtype, gated=False, norm="LayerNorm")
    kw.update(num_query_groups=c.int("num_key_value_heads"), attention_bias=c.bool("attention_bias", False),
              add_bias_linear=c.bool("mlp_bias", False))
    return kw


def _read_phi(c: ConfigFields, mtype: str, notes: list) -> dict:
    # PhiDecoderLayer: one input_layernorm (nn.LayerNorm, weight and bias) feeding attention and
    # MLP in parallel; PhiAttention: q, k, v and dense all with bias; qk_layernorm: one
    # nn.LayerNorm(head_dim) on q and one on k (shared by the heads); PhiMLP: fc1, gelu, fc2 with
    # bias; final_layernorm; lm_head with bias.
    kw = decoder_fields(c, mtype, gated=False, norm="LayerNorm")
    qk_norm = c.bool("qk_layernorm", False)
    hs, heads = kw["hidden_size"], kw["num_attention_heads"]
    if qk_norm and kw["kv_channels"] not in (None, hs // heads):
        # PhiAttention's q_layernorm and k_layernorm are of h // a, not head_dim
        raise c._bad("qk_layernorm with a Phi head_dim other than hidden_size / "
                     "num_attention_heads is not modelled (its q and k norms keep h / a)")
    kw.update(add_bias_linear=True, attention_bias=True, norms_per_layer=1,
              parallel_attention=True, output_layer_bias=True, qk_layernorm=qk_norm,
              # PhiConfig's default gelu_new (configuration_phi.py), PhiMLP's activation_fn
              extra={"hf_activation": c.str("hidden_act", "gelu_new")})
    return kw


def _read_gpt_bigcode(c: ConfigFields, mtype: str, notes: list) -> dict:
    # GPTBigCodeAttention: c_attn h -> h + 2 d_h with multi_query (one KV head), 3h without,
    # c_proj, all with bias; GPTBigCodeMLP: c_fc h -> n_inner (default 4h), c_proj, with bias;
    # ln_1, ln_2, ln_f LayerNorms; learned positions wpe; lm_head tied (no bias).
    if c.bool("add_cross_attention", False):
        raise c._bad("add_cross_attention true (an encoder-decoder GPTBigCode) is not modelled")
    kw = _read_gpt2(c, mtype, notes)
    # GPTBigCodeConfig's default activation is gelu_pytorch_tanh (transformers 5.25.0
    # configuration_gpt_bigcode.py:64), a fused F.gelu, not GPT-2's gelu_new
    kw["extra"] = {**kw["extra"], "hf_activation": c.str("activation_function",
                                                         "gelu_pytorch_tanh")}
    if c.bool("multi_query", True):
        kw["num_query_groups"] = 1
    return kw


def _read_stablelm(c: ConfigFields, mtype: str, notes: list) -> dict:
    # StableLmAttention: head_dim = h // a (a file's head_dim is not read); q, k, v with
    # bias=config.use_qkv_bias, o_proj h x h without; StableLmMLP gated, no bias; nn.LayerNorm
    # norms (weight and bias): input_layernorm, and post_attention_layernorm unless
    # use_parallel_residual (attention and MLP side by side on one norm)
    if c.bool("qk_layernorm", False):
        # StableLmLayerNormPerHead: a bias-free LayerNorm per head beside the biased ones
        raise c._bad("qk_layernorm true (bias-free per-head LayerNorms on q and k) is not "
                     "modelled for StableLM")
    data = {k: v for k, v in c.data.items() if k != "head_dim"}
    kw = decoder_fields(ConfigFields(data, c.where), mtype, norm="LayerNorm")
    if kw["hidden_size"] % kw["num_attention_heads"]:
        raise c._bad("hidden_size must be a multiple of num_attention_heads (StableLmAttention "
                     "refuses it)")
    parallel = c.bool("use_parallel_residual", False)
    kw.update(add_qkv_bias=c.bool("use_qkv_bias", False), attention_bias=False,
              norms_per_layer=1 if parallel else 2, parallel_attention=parallel,
              # StableLmConfig's default silu (transformers 5.25.0 configuration_stablelm.py:50),
              # StableLmMLP's act_fn (modeling_stablelm.py:149): read for autocast
              extra={**kw.get("extra", {}), "hf_activation": c.str("hidden_act", "silu")})
    return kw


def _read_opt(c: ConfigFields, mtype: str, notes: list) -> dict:
    # OPTDecoder: embed_tokens V x word_embed_proj_dim (None: h), embed_positions
    # OPTLearnedPositionalEmbedding(max_position_embeddings + 2, h) (offset 2), final_layer_norm
    # iff do_layer_norm_before and not _remove_final_layer_norm; OPTDecoderLayer: q, k, v,
    # out_proj and fc1, fc2 with bias=config.enable_bias, self_attn_layer_norm and
    # final_layer_norm nn.LayerNorm(h, elementwise_affine=config.layer_norm_elementwise_affine)
    # (weight and bias, or neither); lm_head word_embed_proj_dim -> V, no bias, tied by default
    hs = c.int("hidden_size")
    if c.int("word_embed_proj_dim", hs, null=hs) != hs:
        raise c._bad("word_embed_proj_dim other than hidden_size (OPT-350m's project_in and "
                     "project_out around a narrower embedding) is not modelled")
    if not c.bool("do_layer_norm_before", True) or c.bool("_remove_final_layer_norm", False):
        raise c._bad("an OPT without the final LayerNorm (do_layer_norm_before false or "
                     "_remove_final_layer_norm true) is not modelled")
    bias, positions = c.bool("enable_bias", True), c.int("max_position_embeddings", 2048)
    notes.append(f"position table of max_position_embeddings + 2 = {positions + 2} rows "
                 "(OPTLearnedPositionalEmbedding's offset of 2), read as max_position_embeddings")
    return dict(num_layers=c.int("num_hidden_layers"), hidden_size=hs,
                num_attention_heads=c.int("num_attention_heads"),
                ffn_hidden_size=c.int("ffn_dim"), vocab_size=c.int("vocab_size"),
                max_position_embeddings=positions + 2, add_bias_linear=bias,
                norm_affine=c.bool("layer_norm_elementwise_affine", True),
                # OPTConfig's default relu (configuration_opt.py), OPTDecoderLayer's activation_fn
                extra={"hf_activation": c.str("activation_function", "relu")})


def _read_xglm(c: ConfigFields, mtype: str, notes: list) -> dict:
    # XGLMModel (transformers 5.25.0 modeling_xglm.py): XGLMScaledWordEmbedding V x d_model,
    # XGLMSinusoidalPositionalEmbedding (its table a buffer, no parameter), num_layers
    # XGLMDecoderLayers, a final nn.LayerNorm; the layer: q, k, v, out_proj biased (bias=True),
    # self_attn_layer_norm and final_layer_norm nn.LayerNorm, fc1 / fc2 (ffn_dim) biased;
    # lm_head tied to embed_tokens (_tied_weights_keys)
    if c.bool("add_cross_attention", False):
        raise c._bad("add_cross_attention true in an XGLM config (an encoder attention and its "
                     "LayerNorm in every layer) is not modelled")
    notes.append("sinusoidal positions: XGLMSinusoidalPositionalEmbedding's table is a buffer, "
                 "not a parameter")
    return dict(num_layers=c.int(("num_layers", "num_hidden_layers")),
                hidden_size=c.int(("d_model", "hidden_size")),
                num_attention_heads=c.int(("attention_heads", "num_attention_heads")),
                ffn_hidden_size=c.int("ffn_dim"), vocab_size=c.int("vocab_size"),
                position_embedding_type="none",
                max_position_embeddings=c.int("max_position_embeddings", 2048),
                add_bias_linear=True,
                # XGLMConfig's default gelu (configuration_xglm.py), the layer's activation_fn
                extra={"hf_activation": c.str("activation_function", "gelu")})


def _read_biogpt(c: ConfigFields, mtype: str, notes: list) -> dict:
    # BioGptModel (transformers 5.25.0 modeling_biogpt.py): BioGptScaledWordEmbedding V x h,
    # BioGptLearnedPositionalEmbedding(max_position_embeddings + 2, h) (offset 2, as OPT's), a
    # final nn.LayerNorm; the layer: q, k, v, out_proj biased, self_attn_layer_norm and
    # final_layer_norm nn.LayerNorm, fc1 / fc2 (intermediate_size) biased; output_projection
    # tied to embed_tokens (_tied_weights_keys)
    positions = c.int("max_position_embeddings", 1024)
    notes.append(f"position table of max_position_embeddings + 2 = {positions + 2} rows "
                 "(BioGptLearnedPositionalEmbedding's offset of 2), read as "
                 "max_position_embeddings")
    return dict(num_layers=c.int("num_hidden_layers"), hidden_size=c.int("hidden_size"),
                num_attention_heads=c.int("num_attention_heads"),
                ffn_hidden_size=c.int("intermediate_size"), vocab_size=c.int("vocab_size"),
                max_position_embeddings=positions + 2, add_bias_linear=True,
                # BioGptConfig's default gelu (configuration_biogpt.py), the layer's activation_fn
                extra={"hf_activation": c.str("hidden_act", "gelu")})


def _gpt_neo_layers(c: ConfigFields) -> int:
    """GPT-Neo's layer count, which its attention_types must expand to (GPTNeoConfig's
    validate_architecture refuses a file where they differ)."""
    n_layers = c.int(("num_layers", "num_hidden_layers"))
    types = c.data.get("attention_types", [[["global", "local"], 12]])
    try:
        expanded = sum(len(kinds) * repeat for kinds, repeat in types if isinstance(kinds, list)
                       and isinstance(repeat, int) and not isinstance(repeat, bool))
    except (TypeError, ValueError):
        expanded = None
    if expanded != n_layers:
        raise c._bad(f"attention_types must expand to num_layers={n_layers} layers (as "
                     "[[[\"global\", \"local\"], repeats], ...]; transformers' GPTNeoConfig "
                     "refuses the file otherwise)")
    return n_layers


def _read_gpt_neo(c: ConfigFields, mtype: str, notes: list) -> dict:
    # GPTNeoSelfAttention: q, k, v without bias, out_proj with bias (its local layers' window
    # is a buffer); GPTNeoMLP: c_fc h -> intermediate_size (None: 4h), c_proj, both biased;
    # ln_1, ln_2 and ln_f nn.LayerNorm; wte and the learned wpe; lm_head tied, no bias
    hs, heads = c.int("hidden_size"), c.int(("num_heads", "num_attention_heads"))
    if hs % heads:
        raise c._bad("hidden_size must be a multiple of num_heads (GPTNeoSelfAttention refuses "
                     "it)")
    return dict(num_layers=_gpt_neo_layers(c), hidden_size=hs, num_attention_heads=heads,
                ffn_hidden_size=c.int("intermediate_size", 4 * hs, null=4 * hs),
                vocab_size=c.int("vocab_size"),
                max_position_embeddings=c.int("max_position_embeddings", 2048),
                add_bias_linear=True, attention_bias=False, attention_out_bias=True,
                # GPTNeoConfig's default gelu_new (configuration_gpt_neo.py), GPTNeoMLP's act
                extra={"hf_activation": c.str("activation_function", "gelu_new")})


def _read_mpt(c: ConfigFields, mtype: str, notes: list) -> dict:
    # MptAttention: Wqkv h -> 3h, out_proj, no bias; MptMLP: up_proj h -> 4h (expansion_ratio
    # is not read), GELU, down_proj, no bias (no_bias is not read); norm_1, norm_2 and norm_f
    # nn.LayerNorm with their bias set to None; wte only (ALiBi: no position table, whatever
    # learned_pos_emb says); lm_head tied by default, no bias.  Dropout: attn_config.attn_pdrop
    # (attention, MLP output and attention residual), read here as a top-level field
    attn = c.object("attn_config")
    c.data = {**{k: v for k, v in c.data.items() if k != "attn_pdrop"},
              **{k: v for k, v in attn.items() if k == "attn_pdrop"}}
    hs = c.int(("d_model", "hidden_size"))
    ratio = c.data.get("expansion_ratio", 4)
    if ratio != 4:
        notes.append(f"expansion_ratio={printable(repr(ratio), 20)} ignored: transformers' "
                     "MptMLP builds 4 * d_model")
    return dict(num_layers=c.int(("n_layers", "num_hidden_layers")), hidden_size=hs,
                num_attention_heads=c.int(("n_heads", "num_attention_heads")),
                ffn_hidden_size=4 * hs, vocab_size=c.int("vocab_size"),
                position_embedding_type="none",
                max_position_embeddings=c.int(("max_seq_len", "max_position_embeddings"), 2048),
                add_bias_linear=False, norm_bias=False, extra={"hf_activation": "gelu"})


def _read_persimmon(c: ConfigFields, mtype: str, notes: list) -> dict:
    # PersimmonAttention: query_key_value h -> 3h and dense with bias; q_layernorm and
    # k_layernorm nn.LayerNorm(h // a) (weight and bias, shared by the heads) iff qk_layernorm;
    # PersimmonMLP: dense_h_to_4h, relu2, dense_4h_to_h with bias; input and post-attention
    # nn.LayerNorm; final_layernorm; lm_head untied by default, no bias
    hs, heads = c.int("hidden_size"), c.int("num_attention_heads")
    if hs % heads:
        raise c._bad("hidden_size must be a multiple of num_attention_heads "
                     "(PersimmonAttention refuses it)")
    return dict(num_layers=c.int("num_hidden_layers"), hidden_size=hs, num_attention_heads=heads,
                ffn_hidden_size=c.int("intermediate_size"), vocab_size=c.int("vocab_size"),
                position_embedding_type="rope",
                max_position_embeddings=c.int("max_position_embeddings", 16384),
                add_bias_linear=True, qk_layernorm=c.bool("qk_layernorm", True),
                # PersimmonConfig's default relu2 (configuration_persimmon.py)
                extra={"hf_activation": c.str("hidden_act", "relu2")})


CLASSIC_READERS = {"gpt2": _read_gpt2, "gpt_neox": _read_gpt_neox, "gptj": _read_gptj,
                   "falcon": _read_falcon, "bloom": _read_bloom, "starcoder2": _read_starcoder2,
                   "nemotron": _read_nemotron, "phi": _read_phi,
                   "gpt_bigcode": _read_gpt_bigcode, "stablelm": _read_stablelm,
                   "opt": _read_opt, "gpt_neo": _read_gpt_neo,
                   # CodeGenBlock is GPTJBlock: ln_1 feeding attention and MLP in parallel,
                   # qkv_proj h -> 3h and out_proj without bias, fc_in / fc_out (n_inner, None:
                   # 4h) with bias, lm_head with bias (modeling_codegen.py)
                   "codegen": _read_gptj, "mpt": _read_mpt, "persimmon": _read_persimmon,
                   "xglm": _read_xglm, "biogpt": _read_biogpt}
"""model_type -> its reader ``(c, mtype, notes) -> Architecture keyword arguments``."""
