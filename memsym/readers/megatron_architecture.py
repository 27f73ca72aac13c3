"""Megatron-LM's model arguments to :class:`memsym.model.Architecture` fields, with its rules.

This module owns the architecture of a ``pretrain_gpt.py`` command: the attention (multi-head,
grouped-query, multi-latent), the MLP and its activation, the norms and biases, the positions,
the vocabulary and its padding, the experts and the multi-token prediction layers, each with
Megatron's default when the command leaves it out and ``validate_args``'s checks.  The values
are read through :class:`memsym.readers.megatron_arguments.MegatronArguments`.

Revision read: NVIDIA/Megatron-LM ``d98e8a64dd`` (main, 2026-08-22).  ``args`` below means
``megatron/training/arguments.py``.
"""

from __future__ import annotations

import re

from ..errors import InvalidValueError
from ._values import (MAX_HEADS, MAX_HIDDEN, MAX_LAYERS, MAX_SEQ, MAX_VOCAB,
                      check_unpadded_vocab, decimal)
from .megatron_numerics import SOFTMAX_TYPES
from .megatron_arguments import KNOWN_TOKENIZER_VOCAB, MegatronArguments
from .megatron_pattern import parse_hybrid_pattern, parse_moe_layer_freq, unified_hybrid_pattern

__all__ = ["POSITION_EMBEDDING_TYPES", "counted_position_type", "megatron_architecture",
           "megatron_padded_vocab", "hybrid_override"]

#: The values ``--position-embedding-type`` accepts (args: its choices).
POSITION_EMBEDDING_TYPES = ("learned_absolute", "rope", "yarn", "mrope", "relative", "none")


def counted_position_type(r: MegatronArguments, pos: str) -> str:
    """The position embedding memsym counts for Megatron's ``--position-embedding-type pos``.

    YaRN and multimodal RoPE have no position parameters, as RoPE: they are counted as rope
    (and noted); a learned relative-attention bias is refused.

    Parameters
    ----------
    r : MegatronArguments
        The command's values (the note is recorded there).
    pos : str
        One of :data:`POSITION_EMBEDDING_TYPES`.

    Returns
    -------
    str
        ``learned_absolute``, ``rope`` or ``none``.

    References
    ----------
    Megatron-LM ``megatron/training/arguments.py`` at ``d98e8a64dd``
    (``--position-embedding-type``).

    Examples
    --------
    >>> r = MegatronArguments({}, {})
    >>> counted_position_type(r, "yarn"), r.notes
    ('rope', ['--position-embedding-type yarn: counted as rope (no position parameters)'])
    """
    if pos == "relative":
        raise InvalidValueError("--position-embedding-type relative (a learned relative-"
                                "attention bias) is not modelled")
    if pos in ("yarn", "mrope"):
        r.note(f"--position-embedding-type {pos}: counted as rope (no position parameters)")
        return "rope"
    return pos


def megatron_architecture(r: MegatronArguments) -> dict:
    """The :class:`memsym.model.Architecture` keyword arguments of a Megatron-LM command.

    Megatron's defaults apply to what the command leaves out: multi-head attention unless
    ``--group-query-attention``, ``kv_channels`` h/heads, ``ffn_hidden_size`` 4h (swiglu:
    ``int(4h·2/3/64)·64``), LayerNorm, biases unless ``--disable-bias-linear``, learned absolute
    positions, tied embeddings, a vocabulary padded to a multiple of 128, ``moe_router_topk`` 2
    and the MLA dimensions of ``MLATransformerConfig``.

    Parameters
    ----------
    r : MegatronArguments
        The command's values; the defaults applied are noted there.

    Returns
    -------
    dict
        Architecture field -> value (Megatron's names).

    Raises
    ------
    InvalidValueError
        A required argument missing, or a combination ``validate_args`` refuses.

    References
    ----------
    Megatron-LM ``megatron/training/arguments.py`` (``validate_args``),
    ``megatron/training/argument_utils.py`` (``core_transformer_config_from_args``),
    ``megatron/core/tokenizers/utils/build_tokenizer.py`` at ``d98e8a64dd``.

    Examples
    --------
    >>> from memsym.readers.megatron_arguments import parse_megatron_argv
    >>> r = MegatronArguments(*parse_megatron_argv(["--num-layers", "2", "--hidden-size", "64",
    ...     "--num-attention-heads", "4", "--seq-length", "128", "--swiglu",
    ...     "--vocab-size", "1000", "--tokenizer-type", "NullTokenizer"])[::2])
    >>> a = megatron_architecture(r)
    >>> a["kv_channels"], a["ffn_hidden_size"], a["max_position_embeddings"]
    (16, 128, 128)
    """
    a = {}
    hybrid = _hybrid_pattern(r)
    # args:787-797: a hybrid pattern's main layers replace --num-layers
    a["num_layers"] = (len(hybrid.main) if hybrid else r.require("num_layers", MAX_LAYERS))
    a["hidden_size"] = r.require("hidden_size", MAX_HIDDEN)
    a["num_attention_heads"] = r.require("num_attention_heads", MAX_HEADS)
    a["multi_latent_attention"] = r.flag("multi_latent_attention")
    _attention(r, a)
    _feed_forward(r, a)
    a["normalization"] = r.choice("normalization", ("LayerNorm", "RMSNorm"), "LayerNorm")
    a["add_bias_linear"] = bool(r.raw.get("add_bias_linear", True))
    a["add_qkv_bias"] = r.flag("add_qkv_bias")
    a["untie_embeddings_and_output_weights"] = r.flag("untie_embeddings_and_output_weights")
    a["qk_layernorm"] = r.flag("qk_layernorm")
    if r.flag("attention_output_gate"):
        # attention.py:1689-1691 at d98e8a64dd: linear_qkv's output grows by a*d_h, a sigmoid
        # gate on the attention's output (MLA refuses it, transformer_config.py:3348)
        a["attention_output_gate"] = True
    softmax = r.choice("softmax_type", SOFTMAX_TYPES, "vanilla")
    if softmax == "learnable":
        # a softmax_offset parameter of a/t per layer (memsym.readers.megatron_numerics)
        a["attention_sinks"] = True
    elif softmax == "off-by-one":   # no parameter; its attention backends are a sink's
        a["off_by_one_softmax"] = True
    a["position_embedding_type"] = _positions(r)
    _max_positions(r, a)
    _vocab(r, a)
    _experts(r, a)
    _glu_clamp(r, a)
    if a["multi_latent_attention"]:
        _latent_attention(r, a)
    a["mtp_num_layers"] = r.int("mtp_num_layers", 0, lo=0, hi=MAX_LAYERS)
    if hybrid:
        _hybrid(r, a, hybrid)
    # --mtp-use-repeated-layer (transformer_config.py:82): one MTP layer built, run
    # mtp_num_layers times (multi_token_prediction.py:1985-1996, 2049)
    a["mtp_repeated"] = bool(a["mtp_num_layers"]) and r.flag("mtp_use_repeated_layer")
    return a


def _attention(r: MegatronArguments, a: dict):
    """The query groups and the head dimension (``kv_channels``)."""
    h, heads = a["hidden_size"], a["num_attention_heads"]
    # argument_utils.py (core_transformer_config_from_args): num_query_groups only with
    # --group-query-attention, else None (= multi-head attention).
    if r.flag("group_query_attention"):
        if a["multi_latent_attention"]:
            # args: "Group query attention is mutually exclusive with multi latent attention."
            raise InvalidValueError("--group-query-attention and --multi-latent-attention are "
                                    "mutually exclusive (Megatron's validate_args)")
        if not r.given("num_query_groups"):
            r.note("--num-query-groups absent: Megatron's default 1 (one KV head) applies")
        g = r.int("num_query_groups", 1, hi=MAX_HEADS)
        if heads % g:
            raise InvalidValueError(f"--num-query-groups {g} must divide --num-attention-heads {heads}")
        a["num_query_groups"] = g
    elif r.given("num_query_groups"):
        r.note("--num-query-groups has no effect without --group-query-attention "
               "(Megatron uses multi-head attention)")
    if r.given("kv_channels"):
        a["kv_channels"] = r.int("kv_channels", hi=MAX_HIDDEN)
    else:   # args: validate_args, "assert args.hidden_size % args.num_attention_heads == 0"
        if h % heads:
            raise InvalidValueError(f"--hidden-size {h} is not a multiple of "
                                    f"--num-attention-heads {heads}; give --kv-channels")
        a["kv_channels"] = h // heads


def _feed_forward(r: MegatronArguments, a: dict):
    """The gated activation and the MLP's hidden size."""
    h = a["hidden_size"]
    gated = r.flag("swiglu") or r.flag("quick_geglu")
    if r.flag("swiglu") and (r.flag("squared_relu") or r.flag("quick_geglu")):
        raise InvalidValueError("--swiglu cannot be combined with --squared-relu or --quick-geglu")
    a["swiglu"] = gated
    if r.given("ffn_hidden_size"):
        a["ffn_hidden_size"] = r.int("ffn_hidden_size", hi=MAX_HIDDEN * 64)
    elif r.flag("swiglu"):
        # args: validate_args, int((4 * h * 2 / 3) / 64) * 64 (exact: 8h // 192 * 64)
        a["ffn_hidden_size"] = (8 * h) // 192 * 64
        r.note(f"--ffn-hidden-size absent: Megatron's swiglu rule int(4h*2/3/64)*64 = "
               f"{a['ffn_hidden_size']}")
    else:
        a["ffn_hidden_size"] = 4 * h


#: The largest ``--activation-func-clamp-value`` magnitude read: memsym's own bound on the
#: input, not Megatron's (its argparse takes any float).
MAX_GLU_CLAMP = 10**6
#: Python's float() spellings of infinity and NaN (argparse's type=float takes them).
_NON_FINITE = re.compile(r"[+-]?(inf|infinity|nan)", re.I)


def _glu_clamp(r: MegatronArguments, a: dict):
    """``--activation-func-clamp-value`` (``TransformerConfig.activation_func_clamp_value``,
    transformer_config.py:235 at d98e8a64dd): the gated unit's halves clamped before the
    activation.  Under ``--quick-geglu`` the experts' fused path clamps them eagerly and keeps
    the clamped copy (fused_bias_geglu.py:424-440, moe/experts.py:973-981): memsym's
    ``swiglu_limit`` (GPT-OSS's name for it); Megatron checks no value there.  Under
    ``--swiglu`` the fused kernel clamps inside its autograd function, which saves only its
    input (fused_bias_swiglu.py:163-190, :216-241, :266-276), and ``TransformerConfig`` takes
    it with MoE only and finite > 0 (transformer_config.py:2470-2485); the eager ``glu``
    (``--no-bias-swiglu-fusion``: mlp.py:321-334, moe/experts.py:995-1016) keeps the clamped gate
    half ``F.silu`` saves (:func:`memsym.terms.eager_glu.eager_clamped_glu_input`): memsym's
    ``swiglu_clamp``.  Beyond those, memsym reads magnitudes up to :data:`MAX_GLU_CLAMP` only
    (its own bound)."""
    if not r.given("activation_func_clamp_value"):
        return
    name = r.name("activation_func_clamp_value")
    if not a["swiglu"]:   # used only inside the gated unit (mlp.py:280-330, experts.py:1003-1006)
        r.note(f"{name} has no effect without --swiglu or --quick-geglu")
        return
    token = str(r.raw["activation_func_clamp_value"]).strip()
    # argparse's type=float (arguments.py) also takes inf and nan: None here
    value = None if _NON_FINITE.fullmatch(token) else decimal(token, name)
    if r.flag("swiglu") and (value is None or value <= 0):
        raise InvalidValueError(f"{name} for SwiGLU must be finite and greater than zero "
                                f"(Megatron's TransformerConfig check), got {token[:60]}")
    if value is None or abs(value) > MAX_GLU_CLAMP:
        raise InvalidValueError(f"{name} {token[:60]}: memsym reads finite values up to "
                                f"{MAX_GLU_CLAMP} in magnitude (its own bound, not Megatron's)")
    if r.flag("swiglu"):
        if not a.get("num_experts"):
            raise InvalidValueError(f"{name} with --swiglu needs MoE (--num-experts): "
                                    "Megatron's TransformerConfig supports it only with MoE")
        a["extra"] = {**a.get("extra", {}), "swiglu_clamp": float(value)}
        if r.raw.get("bias_swiglu_fusion", True) is not False:
            r.note(f"{name} with --swiglu: clamped inside the fused SwiGLU kernel, no memory "
                   "effect (the eager glu of --no-bias-swiglu-fusion keeps the clamped gate)")
        return
    a["extra"] = {**a.get("extra", {}), "swiglu_limit": float(value)}


def _positions(r: MegatronArguments) -> str:
    """The position embedding type counted."""
    # positions: default learned_absolute; --use-rotary-position-embeddings is the legacy
    # spelling of rope; --no-position-embedding without rope is a RuntimeError (args).
    pos = r.choice("position_embedding_type", POSITION_EMBEDDING_TYPES, "learned_absolute")
    if r.flag("use_rotary_position_embeddings"):
        pos = "rope"
    if r.raw.get("add_position_embedding", True) is False and pos != "rope":
        raise InvalidValueError("--no-position-embedding is deprecated and refused by Megatron "
                                "unless the positions are rope; use --position-embedding-type")
    return counted_position_type(r, pos)


def _max_positions(r: MegatronArguments, a: dict):
    """``max_position_embeddings``, at least every sequence length given."""
    seq = r.seq_length()
    if r.given("max_position_embeddings"):
        a["max_position_embeddings"] = r.int("max_position_embeddings", hi=MAX_SEQ)
    else:   # Megatron requires it (required_args); the practitioner's evident intent
        a["max_position_embeddings"] = seq
        r.note(f"--max-position-embeddings absent (Megatron requires it): set to "
               f"--seq-length {seq}")
    for dest in ("seq_length", "decoder_seq_length"):
        n = seq if dest == "seq_length" else r.int(dest, hi=MAX_SEQ)
        if n is not None and a["max_position_embeddings"] < n:
            raise InvalidValueError(
                f"--max-position-embeddings {a['max_position_embeddings']} is smaller than "
                f"{r.name(dest)} {n} (Megatron's validate_args asserts >=)")


def _tokenizer_vocab_note(name: str, size: int) -> str:
    return (f"vocabulary {size} for tokenizer {name!r} (the published config.json vocab_size; "
            "Megatron's HuggingFaceTokenizer uses len(tokenizer), which can be smaller: add "
            "--vocab-size N to use another)")


def megatron_padded_vocab(r: MegatronArguments, fields: dict, t: int) -> bool:
    """Whether ``--padded-vocab-size N`` fixes the model's vocabulary rows, and if so put them
    in ``fields`` (``vocab_size`` N, unpadded); ``--no-pad-vocab-size`` without it is refused.

    The embedding and output layer have ``args.padded_vocab_size`` rows (gpt_builders.py:89).
    ``build_tokenizer`` computes it from the tokenizer only when it is None and
    ``--no-pad-vocab-size`` is not given (build_tokenizer.py:113-114, 127-128, 149-152), so a
    given ``--padded-vocab-size`` is the row count as it stands, which tensor parallelism must
    divide (:func:`memsym.readers._values.check_unpadded_vocab`).  Without either, the rows
    come from a checkpoint's arguments (``--use-checkpoint-args``, checkpointing.py:2349).

    Parameters
    ----------
    r : MegatronArguments
        The command's values.
    fields : dict
        Architecture field -> value; ``vocab_size`` and ``make_vocab_size_divisible_by`` are
        set when ``--padded-vocab-size`` is given.
    t : int
        The job's tensor-parallel size [GPUs].

    Returns
    -------
    bool
        True when the command fixes the rows.

    Raises
    ------
    InvalidValueError
        ``--no-pad-vocab-size`` alone, or a tensor-parallel size that does not divide N.

    References
    ----------
    Megatron-LM ``gpt_builders.py``, ``megatron/core/tokenizers/utils/build_tokenizer.py``,
    ``megatron/training/checkpointing.py`` at ``d98e8a64dd``.

    Examples
    --------
    >>> r = MegatronArguments({"padded_vocab_size": "128256"}, {})
    >>> fields = {}
    >>> megatron_padded_vocab(r, fields, 8), fields
    (True, {'vocab_size': 128256, 'make_vocab_size_divisible_by': 1})
    """
    if r.given("padded_vocab_size"):
        fields["vocab_size"] = r.int("padded_vocab_size", hi=MAX_VOCAB)
        fields["make_vocab_size_divisible_by"] = 1
        check_unpadded_vocab(fields["vocab_size"], t, "the tensor-parallel size",
                             r.name("padded_vocab_size"))
        r.note(f"{r.name('padded_vocab_size')} {fields['vocab_size']}: the embedding and output "
               "layer have exactly these rows (Megatron pads only a vocabulary it computes "
               "from the tokenizer)")
        return True
    if r.raw.get("pad_vocab_size", True) is False:
        raise InvalidValueError("--no-pad-vocab-size without --padded-vocab-size: Megatron then "
                                "takes the vocabulary rows from a checkpoint's arguments "
                                "(--use-checkpoint-args), which memsym cannot read; add "
                                "--padded-vocab-size N (the rows, divisible by the TP size)")
    return False


def _vocab(r: MegatronArguments, a: dict):
    """The vocabulary size [tokens] and its padding multiple."""
    # build_tokenizer.py: NullTokenizer/TikTokenizer take --vocab-size; the others read their
    # files (GPT2BPE: len(encoder); HuggingFace: len(tokenizer)) and ignore --vocab-size.
    kind = r.raw.get("tokenizer_type")
    model = r.raw.get("tokenizer_model")
    a["make_vocab_size_divisible_by"] = r.int("make_vocab_size_divisible_by", 128,
                                              hi=MAX_VOCAB)
    if megatron_padded_vocab(r, a, r.int("tensor_model_parallel_size", 1)):
        return
    if r.given("vocab_size"):
        a["vocab_size"] = r.int("vocab_size", hi=MAX_VOCAB)
        if kind not in ("NullTokenizer", "TikTokenizer", "NullMultimodalTokenizer", None):
            r.note(f"--vocab-size {a['vocab_size']} taken as the tokenizer's vocabulary "
                   f"(Megatron's {kind} reads it from its file; it must equal that length)")
        return
    if kind == "NullTokenizer":
        raise InvalidValueError("--tokenizer-type NullTokenizer needs --vocab-size N")
    if model in KNOWN_TOKENIZER_VOCAB:
        a["vocab_size"] = KNOWN_TOKENIZER_VOCAB[model]
        r.note(_tokenizer_vocab_note(model, a["vocab_size"]))
        return
    if kind == "GPT2BPETokenizer":
        a["vocab_size"] = KNOWN_TOKENIZER_VOCAB[kind]
        r.note("vocabulary 50257 of GPT2BPETokenizer (gpt2-vocab.json)")
        return
    source = (f"the tokenizer {model!r}" if model else
              f"--vocab-file {r.raw['vocab_file']!r}" if r.given("vocab_file") else
              "a tokenizer the command does not name")
    raise InvalidValueError(f"the vocabulary comes from {source}, which memsym cannot read: "
                            "add --vocab-size N (the tokenizer's length, e.g. 50257 for "
                            "gpt2-vocab.json)")


def _experts(r: MegatronArguments, a: dict):
    """The MoE fields, when the command has experts."""
    # MoE: --num-experts 0 means dense (args: "if args.num_experts == 0: None").
    E = r.int("num_experts", None, lo=0, hi=MAX_HEADS)
    if not E:
        if r.given("moe_latent_size"):
            raise InvalidValueError("--moe-latent-size (latent MoE projections) needs routed "
                                    "experts (--num-experts)")
        return
    a["num_experts"] = E
    a["moe_router_topk"] = r.int("moe_router_topk", 2, hi=E)
    if r.given("moe_ffn_hidden_size"):
        a["moe_ffn_hidden_size"] = r.int("moe_ffn_hidden_size", hi=MAX_HIDDEN * 64)
    else:   # args: validate_args, moe_ffn_hidden_size = ffn_hidden_size
        a["moe_ffn_hidden_size"] = a["ffn_hidden_size"]
        r.note("--moe-ffn-hidden-size absent: Megatron uses --ffn-hidden-size "
               f"{a['ffn_hidden_size']}")
    if r.given("moe_shared_expert_intermediate_size"):
        a["moe_shared_expert_intermediate_size"] = r.int(
            "moe_shared_expert_intermediate_size", hi=MAX_HIDDEN * 64)
        a["moe_shared_expert_gate"] = r.flag("moe_shared_expert_gate")
    if r.given("moe_latent_size"):      # arguments.py:1980-1981; moe_layer.py:266-304
        a["moe_latent_size"] = r.int("moe_latent_size", hi=MAX_HIDDEN)
    a["moe_layer_freq"] = parse_moe_layer_freq(r.raw.get("moe_layer_freq", 1), a["num_layers"])
    # router.py: the router's bias Parameter exists iff add_bias_linear; the expert bias
    # (--moe-router-enable-expert-bias) is an fp32 buffer, not a parameter.
    a["moe_router_bias"] = a["add_bias_linear"]


def _latent_attention(r: MegatronArguments, a: dict):
    """The MLA dimensions (multi-latent attention)."""
    # MLA defaults are the argparse defaults of MLATransformerConfig's fields.
    if r.given("q_lora_rank"):
        a["q_lora_rank"] = r.int("q_lora_rank", hi=MAX_HIDDEN)
    a["kv_lora_rank"] = r.int("kv_lora_rank", 32, hi=MAX_HIDDEN)
    a["qk_head_dim"] = r.int("qk_head_dim", 128, hi=MAX_HIDDEN)
    a["qk_pos_emb_head_dim"] = r.int("qk_pos_emb_head_dim", 64, hi=MAX_HIDDEN)
    a["v_head_dim"] = r.int("v_head_dim", 128, hi=MAX_HIDDEN)
    if not a["qk_layernorm"]:
        r.note("--multi-latent-attention without --qk-layernorm: Megatron builds no "
               "norms on the q/kv latents, memsym's MLA count includes them")


#: Megatron's hybrid symbols as memsym's per-layer mixer (``layer_mixers``).
_HYBRID_MIXERS = {"M": "mamba", "*": "attention", "-": "none", "E": "none"}
_NOT_MODELLED = {"G": "Gated DeltaNet (G)", "D": "DSA attention (D)", "+": "MLA (+)"}


def _hybrid_pattern(r: MegatronArguments, mtp_layers=None):
    """The command's unified hybrid pattern, parsed (None: not a hybrid model);
    ``mtp_layers``: the MTP depths where the command does not spell them (a MODEL's)."""
    if mtp_layers is None:
        mtp_layers = r.int("mtp_num_layers", None, lo=0, hi=MAX_LAYERS)
    text = unified_hybrid_pattern(r.raw.get("hybrid_layer_pattern"),
                                  r.raw.get("hybrid_override_pattern"),
                                  r.raw.get("mtp_hybrid_override_pattern"), mtp_layers)
    if text is None:
        return None
    parsed = parse_hybrid_pattern(text)
    # the layer kinds memsym builds from a Megatron command, and no '|' stage boundaries
    # (args:799-862: they set the pipeline layout and virtual stages)
    other = [_NOT_MODELLED[ch] for ch in _NOT_MODELLED if ch in text]
    if other:
        raise InvalidValueError(f"--hybrid-layer-pattern: {', '.join(other)} layers are not "
                                "modelled from a Megatron command (M, *, -, E are)")
    if "|" in (parsed.main or ""):
        raise InvalidValueError("--hybrid-layer-pattern: '|' pipeline-stage boundaries are not "
                                "modelled; give the pattern without them and "
                                "--pipeline-model-parallel-size")
    if not parsed.main:
        raise InvalidValueError("the hybrid layer pattern has no decoder layers before its "
                                "'/' (Megatron's layer count is 0; --mtp-hybrid-override-pattern "
                                "needs --hybrid-layer-pattern)")
    if len(parsed.main) > MAX_LAYERS:
        raise InvalidValueError(f"--hybrid-layer-pattern has {len(parsed.main)} layers, over "
                                f"{MAX_LAYERS}")
    if r.given("num_layers") and r.int("num_layers", lo=1, hi=MAX_LAYERS) != len(parsed.main):
        r.note(f"--num-layers ignored: --hybrid-layer-pattern gives {len(parsed.main)} layers "
               "(Megatron's validate_args)")
    return parsed


def hybrid_override(r: MegatronArguments, *, num_experts, mamba: bool, mtp_layers: int = 0):
    """The Architecture fields a hybrid layer pattern sets over a MODEL (None: no pattern).

    As Megatron reads ``--hybrid-layer-pattern`` (args:787-797 at d98e8a64dd), the pattern
    defines the decoder: its main part's length is the layer count (``--num-layers``
    ignored, ``hybrid_layer_allocation.py:128-142``), one layer per symbol, each with one
    norm, its ``E`` symbols the MoE layers, and its ``/`` parts the MTP depths (none without
    them: HybridModel builds MTP only from the pattern, ``hybrid_model.py:220``).  The
    MODEL's sizes stay: its Mamba mixer sizes, its experts.

    Parameters
    ----------
    r : MegatronArguments
        The pasted arguments (notes recorded there).
    num_experts : int or None
        The MODEL's experts [experts]: ``E`` needs some.
    mamba : bool
        Whether the MODEL has Mamba mixer sizes: ``M`` needs them.
    mtp_layers : int
        The MODEL's (or memsym's option's) MTP depths [layers], for the legacy
        ``--mtp-hybrid-override-pattern``.

    Returns
    -------
    dict or None

    Examples
    --------
    >>> from memsym.readers.megatron_arguments import parse_megatron_argv
    >>> r = MegatronArguments(*parse_megatron_argv(["--hybrid-layer-pattern", "M*-E/*E"])[::2])
    >>> o = hybrid_override(r, num_experts=8, mamba=True)
    >>> o["num_layers"], o["layer_mixers"], o["ffn_layers"], o["moe_layer_freq"]
    (4, ('mamba', 'attention', 'none', 'none'), (0, 0, 1, 1), (0, 0, 0, 1))
    >>> o["mtp_num_layers"], o["mtp_layer_pattern"]
    (1, '*E')
    """
    parsed = _hybrid_pattern(r, mtp_layers)
    if parsed is None:
        return None
    main, block = parsed.main, parsed.mtp or ""
    if "E" in main + block and not num_experts:
        raise InvalidValueError("--hybrid-layer-pattern has MoE layers (E) but the MODEL has "
                                "no experts")
    if "M" in main + block and not mamba:
        raise InvalidValueError("--hybrid-layer-pattern has Mamba layers (M) but the MODEL has "
                                "no Mamba sizes: give the whole Megatron command without a "
                                "MODEL")
    out = {"num_layers": len(main), "layer_mixers": tuple(_HYBRID_MIXERS[ch] for ch in main),
           "ffn_layers": tuple(int(ch in "-E") for ch in main), "norms_per_layer": 1,
           "mtp_num_layers": parsed.depths, "mtp_layer_pattern": block or None,
           "mtp_repeated": bool(parsed.depths) and r.flag("mtp_use_repeated_layer")}
    if num_experts:
        out["moe_layer_freq"] = tuple(int(ch == "E") for ch in main)
    return out


def _hybrid(r: MegatronArguments, a: dict, parsed) -> None:
    """The hybrid fields of a Megatron hybrid model: one layer per symbol of the main
    pattern, each with one norm (HybridStack's layers: Mamba, attention, MLP or MoE alone),
    the Mamba-2 mixer's sizes and the MTP block's pattern and depths."""
    main, block = parsed.main, parsed.mtp or ""
    a["layer_mixers"] = tuple(_HYBRID_MIXERS[ch] for ch in main)
    a["ffn_layers"] = tuple(int(ch in "-E") for ch in main)
    a["norms_per_layer"] = 1
    if "E" in main + block and not a.get("num_experts"):
        raise InvalidValueError("--hybrid-layer-pattern has MoE layers (E) but no --num-experts")
    if a.get("num_experts"):
        if r.given("moe_layer_freq"):
            r.note("--moe-layer-freq ignored: the hybrid pattern's E symbols are the MoE layers")
        a["moe_layer_freq"] = tuple(int(ch == "E") for ch in main)
    if "M" in main + block:
        # TransformerConfig's Mamba defaults (transformer_config.py:1259-1268); MambaMixer
        # (mamba_mixer.py:181, 217-251): d_inner = heads * head_dim, or expand (2) * h split
        # into heads of head_dim; d_conv 4 (:179), no in/out projection bias, conv bias, the
        # gated RMSNorm (:276-278 assert them)
        head_dim = r.int("mamba_head_dim", 64, hi=MAX_HIDDEN)
        heads = r.int("mamba_num_heads", None, hi=MAX_HIDDEN)
        if heads is None:
            if (2 * a["hidden_size"]) % head_dim:
                raise InvalidValueError(f"Mamba: d_inner = 2 x --hidden-size = "
                                        f"{2 * a['hidden_size']} must be a multiple of "
                                        f"--mamba-head-dim {head_dim} (Megatron's MambaMixer)")
            heads = 2 * a["hidden_size"] // head_dim
        a.update(mamba_inner_size=heads * head_dim, mamba_num_heads=heads,
                 mamba_state_dim=r.int("mamba_state_dim", 128, hi=MAX_HIDDEN),
                 mamba_num_groups=r.int("mamba_num_groups", 8, hi=MAX_HIDDEN),
                 mamba_conv_kernel=4)
    given = a["mtp_num_layers"]
    if parsed.depths:
        # args:864-879: the pattern's depth count wins over --mtp-num-layers
        if r.given("mtp_num_layers") and given != parsed.depths:
            r.note(f"--mtp-num-layers {given} ignored: --hybrid-layer-pattern has "
                   f"{parsed.depths} MTP depths (Megatron uses the pattern's)")
        a["mtp_num_layers"], a["mtp_layer_pattern"] = parsed.depths, block
        a["mtp_repeated"] = r.flag("mtp_use_repeated_layer")
    elif given:
        # args:897-907 warns; HybridModel builds MTP only from a pattern (hybrid_model.py:220)
        r.note(f"--mtp-num-layers {given} ignored: a hybrid model builds MTP layers only from "
               "the '/' part of --hybrid-layer-pattern (Megatron's HybridModel)")
        a["mtp_num_layers"] = 0
        a["mtp_repeated"] = False
    if a["mtp_num_layers"] and a["position_embedding_type"] not in ("rope", "none"):
        raise InvalidValueError("multi-token prediction needs --position-embedding-type rope "
                                "or none (Megatron's validate_args)")
