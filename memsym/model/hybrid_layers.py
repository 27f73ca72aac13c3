"""The layers of a hybrid Mamba / attention model by kind: which mixer and which MLP each
layer holds, its parameters, and the Mamba sizes the activation term reads.

A transformer's layers differ only as dense or MoE; a hybrid's (Jamba, Bamba, Falcon-H1,
Nemotron-H, Granite 4.0; Megatron-core's ``hybrid_override_pattern``) also by their token
mixer.  :mod:`memsym.model.stages` splits them over pipeline stages as Megatron-core's
``hybrid_layer_allocation.select_pipeline_segment`` does without ``'|'`` separators (the
same even or first/last split as a transformer's layers).
"""

from __future__ import annotations

import functools

from .architecture import Architecture, lenient
from .layer_patterns import is_hybrid, moe_layer_pattern
from .counts import ZERO, as_int, global_attention_parts, layer_parts, mamba_parts, parameter_values
from .kv_sharing import kv_reuse_parts
from .shared_blocks import shared_use_parts
from .token_mixers import conv_parts, gdn_parts, lightning_parts, mixer_values
from ..symbols import G_ssm, H_ssm, N_ssm, d_hg, d_ssm, g_g, k_conv, k_sc, r_dt

__all__ = ["layer_kind_pattern", "hybrid_layer_parameters", "hybrid_kinds", "mamba_values",
           "mtp_layer_kinds"]


#: A hybrid layer's token mixers by its ``layer_mixers`` entry (``"mamba1"``: a Mamba-1 mixer).
_HAS_ATTENTION = ("attention", "parallel")
_HAS_MAMBA = ("mamba", "mamba1", "parallel", "shared")
#: The other token mixers' parameter parts (memsym.model.token_mixers), by layer_mixers entry.
_OTHER_MIXERS = {"gdn": gdn_parts, "conv": conv_parts, "lightning": lightning_parts,
                 "global": global_attention_parts,
                 # Gemma 4's layers reusing an earlier layer's keys and values
                 "kv_reuse": lambda x: kv_reuse_parts(x, layer_parts(x, False)["attention"][:2]),
                 "global_kv_reuse": lambda x: kv_reuse_parts(x, global_attention_parts(x), True)}


def layer_kind_pattern(arch: Architecture) -> tuple:
    """Each decoder layer's kind, as :func:`memsym.model.stages.layer_parameters` and the
    activations take it.

    A transformer's layer is its MoE flag (:func:`memsym.model.moe_layer_pattern`).  A hybrid
    Mamba / attention layer is a pair ``(mixer, ffn)``: ``mixer`` its ``layer_mixers`` entry
    (``"attention"``, ``"mamba"`` (Mamba-2), ``"mamba1"`` (Mamba-1: Jamba), ``"gdn"`` (Gated
    DeltaNet: Qwen3-Next), ``"conv"`` (short convolution: LFM2), ``"lightning"``
    (MiniMax-01), ``"shared"`` (a Mamba layer after a use of a shared block: Zamba),
    ``"parallel"``
    (both side by side: Falcon-H1) or ``"none"``) and ``ffn`` None (no MLP), False (a dense
    MLP) or True (an MoE block).  Nemotron-H's pattern ``M-*E`` (one mixer or one MLP per
    layer, as Megatron's ``hybrid_override_pattern`` counts layers) reads
    ``(("mamba", None), ("none", False), ("attention", None), ("none", True))``.

    Examples
    --------
    >>> from memsym.model import Architecture
    >>> layer_kind_pattern(Architecture(num_layers=3, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("mamba", "attention", "none"),
    ...     ffn_layers=(0, 0, 1), mamba_inner_size=16, mamba_state_dim=4, mamba_num_heads=2))
    (('mamba', None), ('attention', None), ('none', False))
    """
    return _kind_pattern(lenient(arch))


@functools.lru_cache(maxsize=64)
def _kind_pattern(x) -> tuple:
    # cached per architecture: asked once per stage, and a pattern is L entries long
    moe = moe_layer_pattern(x)
    if not is_hybrid(x):
        return moe
    n_layers = x.num_layers
    mixers = x.layer_mixers or ("attention",) * n_layers
    ffn = x.ffn_layers or (1,) * n_layers
    one = "mamba1" if x.mamba_version == 1 else "mamba"
    return tuple((one if m == "mamba" else m, bool(is_moe) if has_ffn else None)
                 for m, has_ffn, is_moe in zip(mixers, ffn, moe))


#: Megatron's hybrid pattern letters (an MTP block's) as layer kinds; "M" is the model's Mamba.
_LETTER_KINDS = {"*": ("attention", None), "-": ("none", False), "E": ("none", True)}


def mtp_layer_kinds(arch: Architecture) -> tuple:
    """The layer kinds of one multi-token-prediction layer's block: a hybrid model's
    ``mtp_layer_pattern`` (one layer per letter: Megatron-core builds the MTP layer's
    ``HybridStack`` from its pattern, multi_token_prediction.py:1199-1214 at d98e8a64dd), else
    one layer of the last decoder layer's kind (the GPT path, lines 1215-1229).

    Examples
    --------
    >>> from memsym.model import preset
    >>> from dataclasses import replace
    >>> mtp_layer_kinds(replace(preset("nemotron-3-super"), mtp_num_layers=1))
    (('attention', None), ('none', True))
    >>> mtp_layer_kinds(preset("deepseek-v3"))
    (True,)
    """
    x = lenient(arch)
    if not x.mtp_layer_pattern:
        return (_kind_pattern(x)[-1],)
    mamba = ("mamba1" if x.mamba_version == 1 else "mamba", None)
    return tuple(_LETTER_KINDS.get(ch, mamba) for ch in x.mtp_layer_pattern)


@functools.lru_cache(maxsize=256)
def hybrid_layer_parameters(x, kind: tuple) -> tuple:
    """One hybrid layer of kind ``(mixer, ffn)``: ``(("tp", n), ("replicated", n),
    ("experts", n))`` (exact ints) of a resolved architecture ``x``."""
    # the components of memsym.model.counts.parameter_expression, one layer's share: its
    # norms (norms_per_layer in every layer), its mixer(s), its MLP or MoE block
    mixer, ffn = kind
    parts = layer_parts(x, bool(ffn))
    # Gemma 4's per-layer input gate, projection and norm (memsym.model.counts.layer_parts)
    tp, rep, ex = ZERO, parts["norms"][1] + parts.get("per_layer_inputs", (0, ZERO))[1], ZERO
    if mixer in _HAS_ATTENTION:
        tp, rep = tp + parts["attention"][0], rep + parts["attention"][1]
    if mixer in _HAS_MAMBA:
        mt, mr = mamba_parts(x)
        tp, rep = tp + mt, rep + mr
    if mixer in _OTHER_MIXERS:
        gt, gr = _OTHER_MIXERS[mixer](x)
        tp, rep = tp + gt, rep + gr
    if mixer == "shared":
        # a use of a shared block (Zamba): its own linear layer and adapters; the block's
        # weights are the model's, not this layer's (memsym.model.stages places them)
        tp += sum(shared_use_parts(x).values(), ZERO)
    if ffn is not None:
        for key in ("router", "latent_projections", "shared_experts", "experts") if ffn \
                else ("mlp",):
            if key in parts:
                tp, rep, ex = tp + parts[key][0], rep + parts[key][1], ex + parts[key][2]
        if mixer in ("kv_reuse", "global_kv_reuse") and x.kv_reuse_wide_mlp:
            tp += parts["mlp"][0]        # the double-wide MLP: its f-wide part once more
    vals = parameter_values(x)
    return (("tp", as_int(tp, vals)), ("replicated", as_int(rep, vals)),
            ("experts", as_int(ex, vals)))


def hybrid_kinds(arch: Architecture, layers) -> tuple:
    """A hybrid model's ``layers`` counted by kind: ``((kind, count, gated_norm), ...)`` in
    order of first appearance (:func:`layer_kind_pattern`; ``gated_norm``: the Mamba mixers'
    gated RMSNorm), or ``()`` for a transformer, whose layers are counted by their MoE flag.

    Examples
    --------
    >>> from memsym.model import Architecture
    >>> hybrid_kinds(Architecture(num_layers=3, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("mamba", "none", "mamba"),
    ...     ffn_layers=(0, 1, 0), mamba_inner_size=16, mamba_state_dim=4, mamba_num_heads=2),
    ...     range(3))
    ((('mamba', None), 2, True), (('none', False), 1, True))
    """
    x = lenient(arch)
    if not is_hybrid(x):
        return ()
    pattern, counts = _kind_pattern(x), {}
    for i in layers:
        counts[pattern[i]] = counts.get(pattern[i], 0) + 1
    return tuple((kind, n, bool(x.mamba_gated_norm)) for kind, n in counts.items())


def mamba_values(arch: Architecture) -> dict:
    """The Mamba-2 sizes of a hybrid model as values of the registry symbols ``d_ssm``,
    ``G_ssm``, ``N_ssm``, ``H_ssm`` (none without Mamba-2 layers), the short-convolution
    width ``k_sc`` (with short-convolution layers) and the Gated DeltaNet sizes and lightning
    block size (with those layers: :func:`memsym.model.token_mixers.mixer_values`), for the
    activation terms
    :func:`memsym.terms.mamba2.mamba_layer_activations` and
    :func:`memsym.terms.short_conv.short_conv_activations` and
    :func:`memsym.terms.gated_deltanet.gdn_activations`.

    Examples
    --------
    >>> from memsym.model import Architecture
    >>> sorted(mamba_values(Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("mamba", "attention"),
    ...     mamba_inner_size=16, mamba_state_dim=4, mamba_num_heads=2)).values())
    [1, 2, 4, 16]
    """
    x = lenient(arch)
    # a plain model's pattern holds no mixers (and may be 10^6 layers long): not walked
    kinds = {kind[0] for kind in set(_kind_pattern(x))} if is_hybrid(x) else set()
    vals = parameter_values(x)
    out = {sym: vals[sym] for sym in (k_sc,) if "conv" in kinds}
    if "gdn" in kinds or "lightning" in kinds:
        out.update(mixer_values(x))
    if "global" in kinds or "global_kv_reuse" in kinds:
        # Gemma 4's global attention layers' head width and KV heads
        out.update({sym: vals[sym] for sym in (d_hg, g_g)})
    if x.mamba_version == 2 and any(kind in _HAS_MAMBA for kind in kinds):
        out.update({sym: vals[sym] for sym in (d_ssm, G_ssm, N_ssm, H_ssm)})
    if x.mamba_version == 1 and x.shared_blocks and any(k in _HAS_MAMBA for k in kinds):
        # Zamba's Mamba-1 mixers (memsym.terms.mamba1): its n_mamba_heads split x_proj
        out.update({sym: vals[sym] for sym in (d_ssm, N_ssm, k_conv, r_dt)})
        out[H_ssm] = x.mamba_num_heads or 1
    return out
