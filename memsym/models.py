"""Model architectures: the shape description every term family reads.

Field names follow Megatron-LM's arguments (``num_layers``, ``hidden_size``, ...), so a launch
command's arguments map one to one.  Parameter counts (exact integers and SymPy forms in the
registry's symbols), per-pipeline-stage counts, presets and the Hugging Face ``config.json``
reader live here too.

Conventions (each chosen so that the counts equal the published / Hugging Face totals):

* ``vocab_size`` is the tokenizer's vocabulary as published (Llama-2: 32000); Megatron-LM pads it to
  ⌈V/(128·t)⌉·128·t (:func:`padded_vocab_size`).  Totals use the published size unless
  ``pad_vocab=True``; per-stage (memory) counts pad by default, as Megatron allocates the padded rows.
* Norms: ``LayerNorm`` has weight and bias (2h), ``RMSNorm`` a weight only (h).
* Biases follow ``add_bias_linear`` (all linear layers, experts and router included) and
  ``add_qkv_bias`` (only Q, K, V, as Qwen2 does).
* MTP layers (DeepSeek-V3) share the embedding and the output layer with the main model (as they do in
  training); each holds two norms on its inputs, the 2h→h projection, one transformer layer of the kind
  of the last decoder layer, and its own final norm.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Optional, Union

import sympy as sp

from .errors import DivisibilityError, InvalidValueError, UnknownNameError
from .symbols import (E, L, L_m, V, a, d_h, d_qk, d_r, d_v, f, f_e, f_sh, g, h, k, n_mtp, r_kv,
                      r_q, s_max)

__all__ = [
    "Architecture", "StageParameters", "COMPONENTS",
    "resolve", "padded_vocab_size", "moe_layer_pattern",
    "parameter_expression", "parameter_values", "parameter_counts", "parameter_count",
    "active_parameter_count", "layer_parameters", "stage_layers", "stage_parameters",
    "check_layout", "gpt_parameter_expression", "symbolic_parameters", "parameter_total",
    "PRESETS", "preset", "preset_names", "from_hf_config", "resolve_model",
]


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
    head, gpt-oss), ``untie_embeddings_and_output_weights`` as in Megatron.
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
    # Multi-latent attention (DeepSeek-V3)
    multi_latent_attention: bool = False
    q_lora_rank: Optional[int] = None
    kv_lora_rank: Optional[int] = None
    qk_head_dim: Optional[int] = None
    qk_pos_emb_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    mtp_num_layers: int = 0
    extra: dict = field(default_factory=dict, compare=False, hash=False)  # documented extras per preset
    # --- added by the models module (issue 3) ---
    qk_layernorm: bool = False                     # per-head norm on Q and K (Qwen3): 2*d_h per layer
    moe_router_bias: Optional[bool] = None         # E biases per MoE router; None = add_bias_linear
    moe_shared_expert_gate: bool = False           # sigmoid gate h->1 on the shared expert (Qwen2-MoE)
    attention_sinks: bool = False                  # one learned sink logit per head (gpt-oss)

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
               "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
_BOOL_FIELDS = ("swiglu", "untie_embeddings_and_output_weights", "add_bias_linear", "add_qkv_bias",
                "multi_latent_attention", "qk_layernorm", "moe_shared_expert_gate",
                "attention_sinks")


def _pos_int(value, what: str, allow_zero: bool = False) -> int:
    # bool is an int subclass in Python: True must not pass as 1 layer.
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numbers
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        except Exception:  # pragma: no cover
            ok = False
        if not ok:
            raise InvalidValueError(f"{what} must be a whole number, got {type(value).__name__} "
                                    f"{str(value)[:40]!r}")
        value = int(value)
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidValueError(f"{what} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


def resolve(arch: Architecture, seq_length: Optional[int] = None) -> Architecture:
    """A copy of ``arch`` with Megatron's defaults filled in and every field checked.

    ``num_query_groups`` → a, ``kv_channels`` → h/a (h must divide), ``ffn_hidden_size`` → 4h,
    ``moe_ffn_hidden_size`` → ``ffn_hidden_size``, ``max_position_embeddings`` → ``seq_length``
    (when learned positions need it), ``moe_router_bias`` → ``add_bias_linear``,
    ``normalization`` and ``position_embedding_type`` spelled canonically.

    Raises
    ------
    InvalidValueError
        A field of the wrong type or range (one line naming the field).

    Examples
    --------
    >>> r = resolve(Architecture(num_layers=2, hidden_size=64, num_attention_heads=8), seq_length=2048)
    >>> (r.num_query_groups, r.kv_channels, r.ffn_hidden_size)
    (8, 8, 256)
    """
    if not isinstance(arch, Architecture):
        raise InvalidValueError(f"expected an Architecture, got {type(arch).__name__}")
    upd = {}
    for name in _INT_FIELDS:
        val = getattr(arch, name)
        if val is not None:
            upd[name] = _pos_int(val, name)
    for name in _BOOL_FIELDS:
        val = getattr(arch, name)
        if not isinstance(val, bool):
            raise InvalidValueError(f"{name} must be true or false, got {val!r:.40}")
    if arch.moe_router_bias is not None and not isinstance(arch.moe_router_bias, bool):
        raise InvalidValueError(f"moe_router_bias must be true, false or None, got "
                                f"{arch.moe_router_bias!r:.40}")
    upd["mtp_num_layers"] = _pos_int(arch.mtp_num_layers, "mtp_num_layers", allow_zero=True)
    if arch.moe_shared_expert_intermediate_size is not None:
        upd["moe_shared_expert_intermediate_size"] = _pos_int(
            arch.moe_shared_expert_intermediate_size, "moe_shared_expert_intermediate_size",
            allow_zero=True)
    norm = _NORMS.get(str(arch.normalization).lower())
    if norm is None:
        raise UnknownNameError("normalization", arch.normalization, list(_NORMS.values()))
    upd["normalization"] = norm
    pos = _POSITIONS.get(str(arch.position_embedding_type).lower())
    if pos is None:
        raise UnknownNameError("position_embedding_type", arch.position_embedding_type,
                               ["learned_absolute", "rope", "none"])
    upd["position_embedding_type"] = pos
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
        upd["max_position_embeddings"] = _pos_int(seq_length, "seq_length")
    if upd.get("num_experts"):
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
            upd["moe_layer_freq"] = _pos_int(freq, "moe_layer_freq")
    if arch.multi_latent_attention:
        for name in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            if name not in upd:
                raise InvalidValueError(f"multi_latent_attention needs {name}")
    if arch.moe_router_bias is None:
        upd["moe_router_bias"] = bool(arch.add_bias_linear)
    return replace(arch, **upd)


def _lenient(arch: Architecture) -> Architecture:
    # structure-only resolution: a missing position-table length does not matter here
    return resolve(arch, seq_length=1 if isinstance(arch, Architecture)
                   and arch.max_position_embeddings is None else None)


def padded_vocab_size(vocab_size: int, t: int = 1, divisible_by: int = 128) -> int:
    """Megatron-LM's padded vocabulary: the next multiple of ``divisible_by * t``.

    .. math:: V_{\\mathrm{pad}} = \\left\\lceil \\frac{V}{128\\,t} \\right\\rceil 128\\,t

    Parameters
    ----------
    vocab_size : int
        Tokenizer vocabulary [tokens].
    t : int
        Tensor-parallel size [GPUs].
    divisible_by : int
        ``--make-vocab-size-divisible-by`` (default 128).

    References
    ----------
    Megatron-LM ``_vocab_size_with_padding`` (megatron/training/tokenizer); MEGATRON-ESTIMATORS.md §2.1.

    Examples
    --------
    >>> padded_vocab_size(50257, t=1), padded_vocab_size(50257, t=8), padded_vocab_size(32000, t=8)
    (50304, 51200, 32768)
    """
    vocab_size = _pos_int(vocab_size, "vocab_size")
    mult = _pos_int(divisible_by, "make_vocab_size_divisible_by") * _pos_int(t, "t")
    return -(-vocab_size // mult) * mult


def moe_layer_pattern(arch: Architecture) -> tuple:
    """Which decoder layers are MoE layers: a tuple of L booleans (all False for a dense model).

    ``moe_layer_freq`` = q (int): layer i (0-based) is MoE iff i mod q = 0 (Megatron-LM);
    a tuple gives the pattern itself (DeepSeek-V3: three dense layers, then 58 MoE layers).

    Examples
    --------
    >>> moe_layer_pattern(preset("mixtral-8x7b"))[:3]
    (True, True, True)
    >>> sum(moe_layer_pattern(preset("deepseek-v3")))
    58
    """
    x = _lenient(arch)
    if not x.is_moe:
        return (False,) * x.num_layers
    if isinstance(x.moe_layer_freq, tuple):
        return tuple(bool(v) for v in x.moe_layer_freq)
    return tuple(i % x.moe_layer_freq == 0 for i in range(x.num_layers))


# ----------------------------------------------------------------------------------------------
# symbolic parameter counts
# ----------------------------------------------------------------------------------------------

COMPONENTS = ("embedding", "position_embedding", "attention", "mlp", "norms", "router",
              "shared_experts", "experts", "output_layer", "mtp", "mtp_experts")
"""Keys of :func:`parameter_expression` / :func:`parameter_counts`, in model order."""

_ZERO = sp.Integer(0)


def _eta(x: Architecture) -> int:
    # parameters per normalised element: RMSNorm has a scale only, LayerNorm scale and shift.
    return 1 if x.normalization == "RMSNorm" else 2


def _attention_parts(x: Architecture):
    """Per-layer attention parameters as (TP-sharded, TP-replicated) expressions."""
    bias_all, bias_qkv = x.add_bias_linear, x.add_bias_linear or x.add_qkv_bias
    eta = _eta(x)
    if x.multi_latent_attention:
        # DeepSeek-V2/V3 MLA (arXiv 2405.04434 §2.1): queries and keys/values through low-rank
        # latents with an RMSNorm each; the down projections are duplicated on every TP rank in
        # Megatron-core (parallel_mode="duplicated"), the up projections and output are sharded.
        rep = _ZERO
        if x.q_lora_rank:
            rep += h * r_q + eta * r_q
            tp = r_q * a * (d_qk + d_r)
        else:
            tp = h * a * (d_qk + d_r)
        rep += h * (r_kv + d_r) + eta * r_kv
        tp += r_kv * a * (d_qk + d_v) + a * d_v * h
        if bias_all:  # not used by any preset; counted as Megatron would build it
            tp += a * (d_qk + d_r) + a * (d_qk + d_v)
            rep += h
        return tp, rep
    # Q and O are h x a*d_h, K and V are h x g*d_h (GQA; g = a is multi-head attention).
    tp = h * a * d_h + 2 * h * g * d_h + a * d_h * h
    rep = _ZERO
    if bias_qkv:
        tp += (a + 2 * g) * d_h
    if bias_all:
        rep += h                      # the output projection's bias (row-parallel: replicated)
    if x.qk_layernorm:
        rep += 2 * eta * d_h          # one norm over the head dim for Q and one for K
    if x.attention_sinks:
        tp += a                       # one sink logit per head, sharded with the heads
    return tp, rep


def _mlp_parts(x: Architecture, width):
    """An MLP of inner size ``width``: (TP-sharded, replicated) weights and biases."""
    gated = x.gated
    tp = (3 if gated else 2) * h * width
    rep = _ZERO
    if x.add_bias_linear:
        tp += (2 if gated else 1) * width   # column-parallel fc1 (gate and up) biases
        rep += h                            # row-parallel fc2 bias
    return tp, rep


def _layer_parts(x: Architecture, moe: bool) -> dict:
    """One decoder layer: component -> (TP-sharded, replicated, routed-expert) expressions."""
    at, ar = _attention_parts(x)
    parts = {"attention": (at, ar, _ZERO), "norms": (_ZERO, 2 * _eta(x) * h, _ZERO)}
    if not moe:
        mt, mr = _mlp_parts(x, f)
        parts["mlp"] = (mt, mr, _ZERO)
        return parts
    router = h * E + (E if x.moe_router_bias else 0)
    parts["router"] = (_ZERO, router, _ZERO)
    if x.moe_shared_expert_intermediate_size:
        st, sr = _mlp_parts(x, f_sh)
        if x.moe_shared_expert_gate:
            sr += h
        parts["shared_experts"] = (st, sr, _ZERO)
    et, er = _mlp_parts(x, f_e)
    parts["experts"] = (_ZERO, _ZERO, E * (et + er))
    return parts


def _per_layer_total(x: Architecture, moe: bool, experts: bool = True):
    return sum((tp + rep + (ex if experts else 0) for tp, rep, ex in _layer_parts(x, moe).values()),
               _ZERO)


def _mtp_extra(x: Architecture):
    # REF: DeepSeek-V3 (arXiv 2412.19437) §2.2: each MTP module has RMSNorms on the hidden state
    # and on the embedding, the projection M (2h -> h) and a transformer block; Megatron-core adds
    # a final norm per MTP layer.  The embedding and output head are shared with the main model.
    return 3 * _eta(x) * h + 2 * h * h


def parameter_expression(arch: Architecture) -> dict:
    """The parameter count of each component as a SymPy expression in registry symbols.

    The structure (gated or not, GQA or MLA, biases, norms, tied or untied) comes from ``arch``;
    the sizes stay symbols (h, a, g, d_h, f, V, E, k, f_e, f_sh, L, L_m, s_max, r_q, r_kv,
    d_qk, d_r, d_v, n_mtp), and :func:`parameter_values` gives their values.

    .. math::
        N = \\underbrace{Vh}_{\\text{embedding}} + L\\,P_{\\text{attn}} + (L-L_m)P_{\\text{mlp}}
          + L_m\\,(hE + P_{\\text{sh}} + E\\,P_{\\text{exp}}) + 2\\eta h L + \\eta h
          + [\\text{untied}]\\,Vh + n_{\\text{mtp}}(\\dots)

    Parameters
    ----------
    arch : Architecture
        The model.

    Returns
    -------
    dict
        ``{component: expr}`` for every key of :data:`COMPONENTS` [parameters].

    References
    ----------
    Narayanan et al. 2021, Eq. 2 (GPT); MEGATRON-ESTIMATORS.md §2.2 (GQA, SwiGLU, MoE, MLA).

    Examples
    --------
    >>> ex = parameter_expression(preset("llama2-7b"))
    >>> ex["attention"], ex["mlp"], ex["norms"]
    (L*(2*a*d_h*h + 2*d_h*g*h), 3*L*f*h, 2*L*h + h)
    """
    x = _lenient(arch)
    pattern = moe_layer_pattern(x)
    any_moe, any_dense = any(pattern), not all(pattern)
    n_moe = L_m if any_moe else _ZERO
    n_dense = (L - L_m) if any_moe else L
    out = {key: _ZERO for key in COMPONENTS}
    out["embedding"] = V * h
    if x.position_embedding_type == "learned_absolute":
        out["position_embedding"] = s_max * h
    if x.untie_embeddings_and_output_weights:
        out["output_layer"] = V * h
    dense_parts = _layer_parts(x, False) if any_dense else {}
    moe_parts = _layer_parts(x, True) if any_moe else {}
    for key in ("attention", "norms"):
        out[key] = L * sum(_layer_parts(x, any_moe)[key][:3], _ZERO)
    out["norms"] += _eta(x) * h                  # final norm
    if any_dense:
        out["mlp"] = n_dense * sum(dense_parts["mlp"], _ZERO)
    for key in ("router", "shared_experts", "experts"):
        if key in moe_parts:
            out[key] = n_moe * sum(moe_parts[key], _ZERO)
    if x.mtp_num_layers:
        last_moe = pattern[-1]
        out["mtp"] = n_mtp * (_per_layer_total(x, last_moe, experts=False) + _mtp_extra(x))
        if last_moe:
            out["mtp_experts"] = n_mtp * _layer_parts(x, True)["experts"][2]
    return {key: sp.expand(val) if key in ("mtp", "mtp_experts") else val
            for key, val in out.items()}


def parameter_values(arch: Architecture, t: int = 1, pad_vocab: bool = False) -> dict:
    """The values of the symbols in :func:`parameter_expression` for ``arch`` (exact Integers).

    ``V`` is the published vocabulary, or Megatron's padded one when ``pad_vocab`` (padding to a
    multiple of ``make_vocab_size_divisible_by * t``).

    Examples
    --------
    >>> vals = parameter_values(preset("gpt3-175b"), pad_vocab=True)
    >>> int(vals[V]), int(vals[h])
    (50304, 12288)
    """
    x = resolve(arch)   # strict: learned positions need max_position_embeddings
    vocab = (padded_vocab_size(x.vocab_size, t, x.make_vocab_size_divisible_by) if pad_vocab
             else x.vocab_size)
    vals = {h: x.hidden_size, a: x.num_attention_heads, g: x.num_query_groups,
            d_h: x.kv_channels, f: x.ffn_hidden_size, V: vocab, L: x.num_layers,
            s_max: x.max_position_embeddings or 1, n_mtp: x.mtp_num_layers,
            L_m: sum(moe_layer_pattern(x))}
    if x.is_moe:
        vals.update({E: x.num_experts, k: x.moe_router_topk, f_e: x.moe_ffn_hidden_size,
                     f_sh: x.moe_shared_expert_intermediate_size or 0})
    if x.multi_latent_attention:
        vals.update({r_kv: x.kv_lora_rank, d_qk: x.qk_head_dim, d_r: x.qk_pos_emb_head_dim,
                     d_v: x.v_head_dim})
        if x.q_lora_rank:
            vals[r_q] = x.q_lora_rank
    return {sym: sp.Integer(val) for sym, val in vals.items()}


def _as_int(expr, vals) -> int:
    value = sp.sympify(expr).xreplace(vals)
    if not value.is_Integer:  # pragma: no cover - a symbol left unvalued is a bug here
        raise InvalidValueError(f"parameter count did not evaluate to an integer: {value}")
    return int(value)


def parameter_counts(arch: Architecture, t: int = 1, pad_vocab: bool = False) -> dict:
    """Exact parameter count of each component (ints), keys as :data:`COMPONENTS`.

    Examples
    --------
    >>> c = parameter_counts(preset("llama2-7b"))
    >>> c["embedding"], c["output_layer"], c["norms"]
    (131072000, 131072000, 266240)
    """
    vals = parameter_values(arch, t, pad_vocab)
    return {key: _as_int(expr, vals) for key, expr in parameter_expression(arch).items()}


def parameter_count(arch: Architecture, t: int = 1, pad_vocab: bool = False, mtp: bool = True,
                    embedding: bool = True) -> int:
    """The exact number of parameters of ``arch`` [parameters].

    .. math:: N = \\sum_{\\text{components}} N_c

    Parameters
    ----------
    arch : Architecture
        The model.
    t : int
        Tensor-parallel size; matters only with ``pad_vocab`` (the padding multiple is 128·t).
    pad_vocab : bool
        Count Megatron's padded vocabulary rows (default: the published vocabulary).
    mtp : bool
        Include the multi-token-prediction layers (DeepSeek-V3's published 671B excludes them).
    embedding : bool
        Include the input embedding (and learned position table).

    Examples
    --------
    >>> parameter_count(preset("llama2-7b"))
    6738415616
    """
    counts = parameter_counts(arch, t, pad_vocab)
    if not mtp:
        counts["mtp"] = counts["mtp_experts"] = 0
    if not embedding:
        counts["embedding"] = counts["position_embedding"] = 0
    return sum(counts.values())


def active_parameter_count(arch: Architecture, t: int = 1, pad_vocab: bool = False,
                           mtp: bool = False, embedding: bool = True) -> int:
    """Parameters a token passes through: routed experts count k of E per MoE layer.

    .. math:: N_{\\text{active}} = N - L_m (E - k) P_{\\text{exp}}

    MTP layers are excluded by default (they are a training-only head).  DeepSeek-V3's "37B
    activated" and gpt-oss's "5.1B active" are stated without the input embedding: pass
    ``embedding=False`` for those.

    Examples
    --------
    >>> active_parameter_count(preset("mixtral-8x7b"))
    12879925248
    """
    counts = parameter_counts(arch, t, pad_vocab)
    x = _lenient(arch)
    if x.is_moe:
        ratio = sp.Rational(x.moe_router_topk, x.num_experts)
        counts["experts"] = int(counts["experts"] * ratio)
        counts["mtp_experts"] = int(counts["mtp_experts"] * ratio)
    if not mtp:
        counts["mtp"] = counts["mtp_experts"] = 0
    if not embedding:
        counts["embedding"] = counts["position_embedding"] = 0
    return sum(counts.values())


def gpt_parameter_expression(final_norm: bool = True) -> sp.Expr:
    """The GPT count in h, L, V, s_max only (f = 4h, d_h = h/a, tied, biases, learned positions).

    .. math:: N = 12Lh^2 + 13Lh + (V + s_{\\max})h \\;[+\\,2h]

    Narayanan et al. 2021 Eq. 2 omits the final LayerNorm (``final_norm=False`` reproduces it).

    Examples
    --------
    >>> sp.factor(gpt_parameter_expression(final_norm=False) - 12*L*h**2)
    h*(13*L + V + s_max)
    """
    arch = Architecture(name="gpt", num_layers=2, hidden_size=64, num_attention_heads=8,
                        vocab_size=128, max_position_embeddings=16)
    total = sum(parameter_expression(arch).values(), _ZERO)
    total = total.subs({f: 4 * h, d_h: h / a, g: a})
    if not final_norm:
        total -= 2 * h
    return sp.expand(total)


_PER_LAYER = {"attention": False, "norms": False, "mlp": False, "layer": False,
              "router": True, "shared_experts": True, "experts": True, "moe_layer": True}


def symbolic_parameters(model, component: str = "total", per_layer: bool = False) -> sp.Expr:
    """One component's parameter count as a SymPy expression, for a preset name or Architecture.

    ``per_layer=True`` gives one decoder layer's share: ``attention``, ``norms``, ``mlp``,
    ``layer`` (a dense layer), ``router``, ``shared_experts``, ``experts``, ``moe_layer``.
    Otherwise a key of :data:`COMPONENTS` or ``"total"``.

    Examples
    --------
    >>> symbolic_parameters("llama3-8b", "layer", per_layer=True)
    2*a*d_h*h + 2*d_h*g*h + 3*f*h + 2*h
    """
    arch = model if isinstance(model, Architecture) else preset(model)
    x = _lenient(arch)
    if per_layer:
        if component not in _PER_LAYER:
            raise UnknownNameError("per-layer component", component, list(_PER_LAYER))
        moe = _PER_LAYER[component]
        if moe and not x.is_moe:
            raise InvalidValueError(f"{x.name} has no MoE layers (asked for {component})")
        parts = _layer_parts(x, moe)
        if component in ("layer", "moe_layer"):
            return sp.expand(sum((sum(q, _ZERO) for q in parts.values()), _ZERO))
        return sp.expand(sum(parts.get(component, (_ZERO,)), _ZERO))
    exprs = parameter_expression(x)
    if component == "total":
        return sum(exprs.values(), _ZERO)
    if component not in exprs:
        raise UnknownNameError("parameter component", component, list(exprs) + ["total"])
    return exprs[component]


def _component_sources(x: Architecture) -> dict:
    from .term import Source

    mega = "theoretical_memory_usage.py (MEGATRON-ESTIMATORS.md §2.2)"
    return {
        "embedding": Source("narayanan", "§5.1 Eq. 2 (the Vh term)"),
        "position_embedding": Source("narayanan", "§5.1 Eq. 2 (the sh term)"),
        "attention": (Source("deepseek-v2", "§2.1.2-2.1.3 (MLA projections)")
                      if x.multi_latent_attention else Source("megatron-lm", mega + ": 2dh(a+g)")),
        "mlp": Source("megatron-lm", mega + ": 2γhf"),
        "norms": Source("megatron-lm", mega + ": 2ηh per layer + ηh"),
        "router": Source("megatron-lm", mega + ": hE (+E)"),
        "shared_experts": Source("megatron-lm", mega + ": 2γh f_sh"),
        "experts": Source("megatron-lm", mega + ": 2γh f_e E"),
        "output_layer": Source("megatron-lm", mega + ": hV when untied"),
        "mtp": Source("deepseek-v3", "§2.2 (MTP modules: norms, projection M, one block)"),
        "mtp_experts": Source("deepseek-v3", "§2.2 (the MTP block's routed experts)"),
    }


def parameter_total(arch: Architecture):
    """The parameter count as a :class:`~memsym.term.Total` of cited terms [parameters].

    Zero components are left out; evaluate with :func:`parameter_values`.

    Examples
    --------
    >>> tot = parameter_total(preset("llama2-7b"))
    >>> [t.key for t in tot]
    ['embedding', 'attention', 'mlp', 'norms', 'output_layer']
    >>> tot.expr.xreplace(parameter_values(preset("llama2-7b")))
    6738415616
    """
    from .term import Term, Total

    x = _lenient(arch)
    sources = _component_sources(x)
    what = {"embedding": "word embedding (V rows of h)", "position_embedding": "learned positions",
            "attention": "attention projections per layer", "mlp": "dense MLPs",
            "norms": "normalisation weights (per layer and final)", "router": "MoE routers",
            "shared_experts": "shared experts", "experts": "routed experts",
            "output_layer": "untied output layer", "mtp": "multi-token-prediction layers",
            "mtp_experts": "routed experts of the MTP layers"}
    terms = [Term(key, expr, what[key], sources[key], unit="parameters")
             for key, expr in parameter_expression(x).items() if expr != 0]
    return Total(f"parameters of {x.name}", tuple(terms), unit="parameters")


# ----------------------------------------------------------------------------------------------
# pipeline stages
# ----------------------------------------------------------------------------------------------

def check_layout(arch: Architecture, t: int = 1, p: int = 1, e: int = 1, t_e: Optional[int] = None,
                 first_stage_layers: Optional[int] = None,
                 last_stage_layers: Optional[int] = None) -> None:
    """Refuse a layout that Megatron-LM cannot build, naming the divisibility rule broken.

    Rules: t divides the attention heads and the KV heads (query groups), t divides the ffn size;
    p divides the layers (unless first/last stage sizes are given: then p − (number given)
    divides the rest); e divides the experts; t_e divides the expert ffn size.

    Raises
    ------
    DivisibilityError
        One line naming the rule.

    Examples
    --------
    >>> check_layout(preset("llama2-70b"), t=8, p=4)
    >>> check_layout(preset("llama2-70b"), t=16)
    Traceback (most recent call last):
    ...
    memsym.errors.DivisibilityError: tensor-parallel size t=16 must divide the KV heads (num_query_groups=8)
    """
    x = _lenient(arch)
    t, p, e = _pos_int(t, "t"), _pos_int(p, "p"), _pos_int(e, "e")
    t_e = t if t_e is None else _pos_int(t_e, "t_e")
    if x.num_attention_heads % t:
        raise DivisibilityError(f"tensor-parallel size t={t} must divide the attention heads "
                                f"(num_attention_heads={x.num_attention_heads})")
    if not x.multi_latent_attention and x.num_query_groups % t:
        raise DivisibilityError(f"tensor-parallel size t={t} must divide the KV heads "
                                f"(num_query_groups={x.num_query_groups})")
    if not all(moe_layer_pattern(x)) and x.ffn_hidden_size % t:
        raise DivisibilityError(f"tensor-parallel size t={t} must divide the ffn size "
                                f"(ffn_hidden_size={x.ffn_hidden_size})")
    if x.is_moe:
        if x.num_experts % e:
            raise DivisibilityError(f"expert-parallel size e={e} must divide the experts "
                                    f"(num_experts={x.num_experts})")
        if x.moe_ffn_hidden_size % t_e:
            raise DivisibilityError(f"expert tensor-parallel size t_e={t_e} must divide the "
                                    f"expert ffn size (moe_ffn_hidden_size={x.moe_ffn_hidden_size})")
    elif e != 1:
        raise DivisibilityError(f"expert-parallel size e={e} needs a model with experts "
                                f"({x.name} has none); use e=1")
    _split_layers(x.num_layers, p, first_stage_layers, last_stage_layers)


def _split_layers(n_layers: int, p: int, first=None, last=None) -> list:
    """Layers per stage (Megatron's even split, or given first/last stage sizes)."""
    if first is None and last is None:
        if n_layers % p:
            raise DivisibilityError(f"pipeline-parallel size p={p} must divide the layers "
                                    f"(num_layers={n_layers}) unless first/last stage sizes are given")
        return [n_layers // p] * p
    if p == 1:
        raise DivisibilityError("first/last pipeline stage sizes need p > 1")
    sizes = [None] * p
    rest, middle = n_layers, p
    if first is not None:
        sizes[0] = _pos_int(first, "first_stage_layers", allow_zero=True)
        rest, middle = rest - sizes[0], middle - 1
    if last is not None:
        sizes[-1] = _pos_int(last, "last_stage_layers", allow_zero=True)
        rest, middle = rest - sizes[-1], middle - 1
    if rest < 0:
        raise DivisibilityError(f"first/last stage sizes exceed num_layers={n_layers}")
    if middle == 0:
        if rest:
            raise DivisibilityError(f"first and last stages hold {n_layers - rest} layers, "
                                    f"not num_layers={n_layers}")
        return sizes
    if rest % middle:
        raise DivisibilityError(f"the {middle} remaining pipeline stages must split the remaining "
                                f"{rest} layers evenly")
    return [rest // middle if s is None else s for s in sizes]


def stage_layers(arch: Architecture, p: int = 1, stage: int = 0,
                 first_stage_layers: Optional[int] = None,
                 last_stage_layers: Optional[int] = None) -> range:
    """The decoder layers (0-based indices) held by pipeline ``stage`` of ``p``.

    Examples
    --------
    >>> stage_layers(preset("llama3-405b"), p=16, stage=0, first_stage_layers=7, last_stage_layers=7)
    range(0, 7)
    """
    n = _lenient(arch).num_layers
    p = _pos_int(p, "p")
    sizes = _split_layers(n, p, first_stage_layers, last_stage_layers)
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < p:
        raise InvalidValueError(f"stage must be a whole number in 0..{p - 1}, got {stage!r}")
    start = sum(sizes[:stage])
    return range(start, start + sizes[stage])


def layer_parameters(arch: Architecture, moe: bool = False) -> dict:
    """One decoder layer's parameters split by how they shard (exact ints).

    Returns ``{"tp": ..., "replicated": ..., "experts": ...}``: TP-sharded weights (divide by t),
    weights every TP rank holds whole (norms, router, row-parallel biases, MLA down projections),
    and routed-expert weights (divide by e·t_e).

    Examples
    --------
    >>> layer_parameters(preset("llama2-7b"))
    {'tp': 202375168, 'replicated': 8192, 'experts': 0}
    """
    x = _lenient(arch)
    vals = parameter_values(replace(x, position_embedding_type="rope"))  # no s_max needed here
    parts = _layer_parts(x, moe)
    return {"tp": _as_int(sum((q[0] for q in parts.values()), _ZERO), vals),
            "replicated": _as_int(sum((q[1] for q in parts.values()), _ZERO), vals),
            "experts": _as_int(sum((q[2] for q in parts.values()), _ZERO), vals)}


@dataclass(frozen=True)
class StageParameters:
    """Parameters held by one pipeline stage, whole and per GPU.

    Attributes
    ----------
    stage : int
        The stage index (0 = first).
    layers : range
        The decoder layers it holds.
    embedding, output_layer, mtp : bool
        Whether it holds the input embedding, the output layer (with the final norm), the MTP layers.
    tp : int
        TP-sharded parameters of the stage (whole, before dividing by t) [parameters].
    replicated : int
        Parameters every TP rank holds whole (norms, router, position table, ...) [parameters].
    experts : int
        Routed-expert parameters of the stage (whole, before dividing by e·t_e) [parameters].
    t, e, t_e : int
        The tensor, expert and expert-tensor parallel sizes used for the per-GPU numbers.
    """

    stage: int
    layers: range
    embedding: bool
    output_layer: bool
    mtp: bool
    tp: int
    replicated: int
    experts: int
    t: int = 1
    e: int = 1
    t_e: int = 1

    @property
    def dense(self) -> int:
        """Stage parameters outside the routed experts [parameters]."""
        return self.tp + self.replicated

    @property
    def total(self) -> int:
        """All parameters of the stage [parameters]."""
        return self.tp + self.replicated + self.experts

    @property
    def dense_per_gpu(self) -> sp.Rational:
        """Non-expert parameters on one GPU of the stage: tp/t + replicated [parameters]."""
        return sp.Rational(self.tp, self.t) + self.replicated

    @property
    def experts_per_gpu(self) -> sp.Rational:
        """Routed-expert parameters on one GPU: experts/(e·t_e) [parameters]."""
        return sp.Rational(self.experts, self.e * self.t_e)

    @property
    def per_gpu(self) -> sp.Rational:
        """All parameters on one GPU of the stage [parameters]."""
        return self.dense_per_gpu + self.experts_per_gpu


def stage_parameters(arch: Architecture, t: int = 1, p: int = 1, stage: int = 0, *, e: int = 1,
                     t_e: Optional[int] = None, first_stage_layers: Optional[int] = None,
                     last_stage_layers: Optional[int] = None, pad_vocab: bool = True,
                     tied_output_copy: bool = True) -> StageParameters:
    """The parameters pipeline ``stage`` of ``p`` holds (Megatron-LM placement).

    The first stage holds the word embedding (V_pad·h, sharded over t) and the learned position
    table (replicated); the last stage holds the final norm, the output layer and the MTP layers
    (Megatron-core places MTP on the last stage).  With tied embeddings and p > 1 the last stage
    also holds a copy of the word embedding as its output weight (Megatron allocates it and
    all-reduces its gradient with the first stage); ``tied_output_copy=False`` drops it.

    .. math:: N_{\\text{GPU}} = \\frac{N_{\\text{tp}}}{t} + N_{\\text{rep}} + \\frac{N_{\\text{exp}}}{e\\,t_e}

    Parameters
    ----------
    arch : Architecture
    t, p, e : int
        Tensor-, pipeline- and expert-parallel sizes [GPUs].
    t_e : int, optional
        Expert tensor-parallel size (default t, as Megatron resolves it).
    stage : int
        0 .. p−1.
    first_stage_layers, last_stage_layers : int, optional
        Uneven pipeline: layers on the first / last stage (Megatron's
        ``--decoder-first/last-pipeline-num-layers``); the rest split evenly.
    pad_vocab : bool
        Use Megatron's padded vocabulary (default True: it is what is allocated).

    Examples
    --------
    >>> sp0 = stage_parameters(preset("llama2-7b"), t=1, p=4, stage=0, pad_vocab=False)
    >>> sp0.total == 8 * 202383360 + 32000 * 4096
    True
    """
    x = resolve(arch)   # strict: the position table is counted on stage 0
    check_layout(x, t, p, e, t_e, first_stage_layers, last_stage_layers)
    t_e = t if t_e is None else t_e
    rng = stage_layers(x, p, stage, first_stage_layers, last_stage_layers)
    pattern = moe_layer_pattern(x)
    per = {kind: layer_parameters(x, kind) for kind in set(pattern)}
    tp = sum(per[pattern[i]]["tp"] for i in rng)
    rep = sum(per[pattern[i]]["replicated"] for i in rng)
    ex = sum(per[pattern[i]]["experts"] for i in rng)
    vals = parameter_values(x, t, pad_vocab)
    vh = _as_int(V * h, vals)
    first, last = stage == 0, stage == p - 1
    if first:
        tp += vh
        if x.position_embedding_type == "learned_absolute":
            rep += x.max_position_embeddings * x.hidden_size
    if last:
        rep += _eta(x) * x.hidden_size
        if x.untie_embeddings_and_output_weights or (p > 1 and tied_output_copy):
            tp += vh
        if x.mtp_num_layers:
            # each MTP layer: a block of the last layer's kind, its three norms (replicated) and
            # the 2h -> h projection (counted as TP-sharded)
            block = per[pattern[-1]]
            norms = 3 * _eta(x) * x.hidden_size
            proj = _as_int(_mtp_extra(x), vals) - norms
            tp += x.mtp_num_layers * (block["tp"] + proj)
            rep += x.mtp_num_layers * (block["replicated"] + norms)
            ex += x.mtp_num_layers * block["experts"]
    return StageParameters(stage, rng, first, last, bool(last and x.mtp_num_layers), tp, rep, ex,
                           t, e, t_e)


# ----------------------------------------------------------------------------------------------
# presets
# ----------------------------------------------------------------------------------------------

def _llama(name, L_, h_, a_, g_, f_, V_, **kw):
    return Architecture(name=name, num_layers=L_, hidden_size=h_, num_attention_heads=a_,
                        num_query_groups=g_, ffn_hidden_size=f_, swiglu=True,
                        normalization="RMSNorm", vocab_size=V_,
                        untie_embeddings_and_output_weights=True, position_embedding_type="rope",
                        add_bias_linear=False, **kw)


# Values are the Hugging Face config.json files of each model (hidden_size, num_hidden_layers,
# num_attention_heads, num_key_value_heads, intermediate_size, vocab_size, ...); see
# tests/test_models.py for the published totals each one reproduces.
PRESETS: dict = {
    # REF: Brown et al. 2020 (arXiv 2005.14165) Table 2.1: 96 layers, d_model 12288, 96 heads,
    # d_head 128, context 2048; GPT-2 vocabulary 50257, learned positions, tied, biases.
    "gpt3-175b": Architecture(name="gpt3-175b", num_layers=96, hidden_size=12288,
                              num_attention_heads=96, vocab_size=50257,
                              max_position_embeddings=2048),
    "llama2-7b": _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, max_position_embeddings=4096),
    "llama2-13b": _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000,
                         max_position_embeddings=4096),
    "llama2-70b": _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000,
                         max_position_embeddings=4096),
    "llama3-8b": _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, max_position_embeddings=8192),
    "llama3-70b": _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256,
                         max_position_embeddings=8192),
    "llama3-405b": _llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256,
                          max_position_embeddings=131072),
    "mistral-7b": _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000,
                         max_position_embeddings=32768, extra={"sliding_window": 4096}),
    "mixtral-8x7b": _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000,
                           max_position_embeddings=32768, num_experts=8, moe_router_topk=2,
                           moe_ffn_hidden_size=14336),
    "deepseek-v3": Architecture(
        name="deepseek-v3", num_layers=61, hidden_size=7168, num_attention_heads=128,
        ffn_hidden_size=18432, swiglu=True, normalization="RMSNorm", vocab_size=129280,
        untie_embeddings_and_output_weights=True, position_embedding_type="rope",
        max_position_embeddings=163840, add_bias_linear=False,
        num_experts=256, moe_router_topk=8, moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048, moe_layer_freq=(0,) * 3 + (1,) * 58,
        multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
        qk_pos_emb_head_dim=64, v_head_dim=128, kv_channels=128, mtp_num_layers=1,
        moe_router_bias=True,   # e_score_correction_bias (noaux_tc routing), a parameter in HF
        extra={"first_k_dense_replace": 3, "n_shared_experts": 1}),
    "qwen3-8b": _llama("qwen3-8b", 36, 4096, 32, 8, 12288, 151936, kv_channels=128,
                       qk_layernorm=True, max_position_embeddings=40960),
    "qwen3-30b-a3b": _llama("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, kv_channels=128,
                            qk_layernorm=True, max_position_embeddings=40960, num_experts=128,
                            moe_router_topk=8, moe_ffn_hidden_size=768),
    # gpt-oss-120b: 36 layers, all MoE (128 experts, top-4, expert ffn 2880), GQA 64/8 heads of 64,
    # biases on every linear layer (attention, experts, router), one sink logit per head, untied.
    # Sliding-window (128) attention on alternate layers changes activations, not parameters.
    "gpt-oss-120b": Architecture(
        name="gpt-oss-120b", num_layers=36, hidden_size=2880, num_attention_heads=64,
        num_query_groups=8, kv_channels=64, ffn_hidden_size=2880, swiglu=True,
        normalization="RMSNorm", vocab_size=201088, untie_embeddings_and_output_weights=True,
        position_embedding_type="rope", max_position_embeddings=131072, add_bias_linear=True,
        num_experts=128, moe_router_topk=4, moe_ffn_hidden_size=2880, attention_sinks=True,
        extra={"sliding_window": 128, "layer_types": "sliding/full alternating",
               "swiglu_limit": 7.0}),
}


def preset_names() -> list:
    """The preset names, sorted."""
    return sorted(PRESETS)


def _normalise_name(name: str) -> str:
    return str(name).strip().lower().replace("_", "-").replace(" ", "-")


def preset(name: str) -> Architecture:
    """The preset architecture called ``name`` (case-insensitive; ``_`` reads as ``-``).

    Raises
    ------
    UnknownNameError
        When no preset has that name; the message suggests the closest.

    Examples
    --------
    >>> preset("Llama2-7B").num_layers
    32
    >>> preset("llama2-7")
    Traceback (most recent call last):
    ...
    memsym.errors.UnknownNameError: unknown model 'llama2-7'; did you mean llama2-7b or llama2-70b or llama3-70b? (accepted: deepseek-v3, gpt-oss-120b, gpt3-175b, llama2-13b, llama2-70b, llama2-7b, llama3-405b, llama3-70b, llama3-8b, mistral-7b, mixtral-8x7b, qwen3-30b-a3b, ...)
    """
    if not isinstance(name, str):
        raise InvalidValueError(f"a model name must be a string, got {type(name).__name__}")
    key = _normalise_name(name)
    if key not in PRESETS:
        raise UnknownNameError("model", name, list(PRESETS))
    return PRESETS[key]


# ----------------------------------------------------------------------------------------------
# Hugging Face config.json
# ----------------------------------------------------------------------------------------------

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


def resolve_model(name_or_path) -> Architecture:
    """A preset name or a path to a ``config.json`` (or its directory), as the CLI's MODEL.

    Anything that names an existing file or directory, or ends in ``.json``, is read as a
    config; everything else is looked up among the presets.

    Examples
    --------
    >>> resolve_model("MIXTRAL-8x7B").num_experts
    8
    """
    if isinstance(name_or_path, Architecture):
        return name_or_path
    if isinstance(name_or_path, os.PathLike):
        return from_hf_config(name_or_path)
    if not isinstance(name_or_path, str):
        raise InvalidValueError(f"a model must be a preset name or a config.json path, got "
                                f"{type(name_or_path).__name__}")
    if name_or_path.lower().endswith(".json") or os.path.exists(name_or_path):
        return from_hf_config(name_or_path)
    return preset(name_or_path)
