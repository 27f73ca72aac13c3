r"""Activations one layer of a hybrid Mamba / attention model keeps for its backward.

:func:`hybrid_layer_activations` sums a hybrid layer ``(mixer, ffn)`` from the parts it holds,
each with its own pre-norm: an attention mixer (the attention half of
:func:`memsym.terms.activations.layer_activations`), a Mamba-2 mixer
(:func:`memsym.terms.mamba2.mamba_layer_activations`), a Mamba-1 mixer
(:mod:`memsym.terms.mamba1`), a short convolution, Gated DeltaNet or lightning mixer, a shared
block, and an MLP or MoE block; :func:`hybrid_stack` sums a stage's kinds.  It refuses what is
not modelled (recompute and context parallelism of the mixers that do not support them).
Conventions as :mod:`memsym.terms.mamba2`.
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError
from ..symbols import G_ssm, b, h, s, t
from ..term import Source, Term, Total
from .activations import layer_activations
from .gated_deltanet import gdn_activations
from .global_attention import as_global
from .lightning import lightning_activations
from .mamba2 import mamba_layer_activations
from .mamba1 import mamba1_layer_terms, refuse_mamba1
from .shared_block import shared_block_activations
from .short_conv import short_conv_activations

__all__ = ["hybrid_layer_activations", "hybrid_stack", "ATTENTION_KEYS", "MLP_KEYS", "MOE_KEYS"]

#: What each part of a transformer layer keeps (:func:`memsym.terms.activations.
#: layer_activations`' keys), besides its norm (``norm_inputs`` and ``norm_statistics`` hold
#: both norms of the layer: one each to the attention and to the MLP / MoE part).
ATTENTION_KEYS = ("qkv_input", "qk", "qk_norm_inputs", "qk_norm_fp32_output",
                   "qk_norm_fp32_input", "v",
                   "softmax_stats", "scores", "proj_input", "output_gate", "sdpa_output_copy",
                   "attn_dropout_mask")
MLP_KEYS = ("mlp_input", "mlp_activation", "fc2_input", "mlp_dropout_mask")
MOE_KEYS = ("moe_input", "router", "routed_tokens", "expert_activation", "expert_fc2_input",
             "combine", "latent_fc1_input", "latent_fc2_input", "shared_expert",
             "mlp_dropout_mask")
_TE_NORM = Source("transformer-engine", "pytorch/module/layernorm_linear.py (the fused norm "
                  "saves its per-token rstd); Megatron-core models/hybrid/hybrid_layer_specs.py "
                  "(in_proj = TELayerNormColumnParallelLinear)")


def _part(terms, prefix: str, keys=None) -> list:
    """``terms`` (those named in ``keys``, where given) keyed and labelled with ``prefix``."""
    return [Term(f"{prefix}_{term.key}", term.expr, term.description, term.source,
                 label=f"{prefix} {term.label}")
            for term in terms if keys is None or term.key in keys]


def _half(total: Total, key: str):
    """Half of ``total``'s term ``key`` (one of a layer's two norms), 0 without it [bytes]."""
    return total[key].expr / 2 if key in total else 0


def _norm(total: Total, prefix: str, stats, fp32=0, copy=0) -> list:
    """The part's own norm: half the layer's two norm inputs, the statistics ``stats``, what
    its fp32 ``1 + weight`` product keeps, ``fp32``, and its fp32 input copy, ``copy``
    (:mod:`memsym.terms.hf_norms`)."""
    out = [Term(f"{prefix}_norm_input", total["norm_inputs"].expr / 2,
                "input of the part's pre-norm (one of a layer's two)",
                total["norm_inputs"].source, label=f"{prefix} norm")]
    if stats != 0:
        out.append(Term(f"{prefix}_norm_statistics", stats, "fp32 per-token statistics of the "
                        "part's pre-norm", total["norm_statistics"].source,
                        label=f"{prefix} norm stats"))
    return out + _fp32_norm(prefix, fp32, total) + _fp32_norm(prefix, copy, total, "input")


_FP32_WHAT = {"output": "scaling by 1 + weight in fp32: its fp32 normalised output and 1 + weight",
              "input": "(a transformers RMSNorm): its fp32 input copy and the 16-bit normalised "
                       "tensor"}


def _fp32_norm(prefix: str, expr, total: Total, which: str = "output") -> list:
    """A part's pre-norm's fp32 ``1 + weight`` product (``which`` "output") or fp32 input copy
    (``"input"``), ``expr`` [bytes], if any: one of ``total``'s two norms' ``norm_fp32_*``."""
    if expr == 0:
        return []
    return [Term(f"{prefix}_norm_fp32_{which}", expr, f"the part's pre-norm {_FP32_WHAT[which]}",
                 total[f"norm_fp32_{which}"].source, label=f"{prefix} norm fp32 {which}")]


def _ffn_part(block: Total, moe: bool, ones) -> list:
    """The MLP or MoE part of ``block`` (a whole layer's terms) with its pre-norm: what the
    layer's norms keep less the mixer's share ``ones`` (statistics, fp32 product, fp32 copy)."""
    own = [block[key].expr - one if key in block else 0 for key, one in
           zip(("norm_statistics", "norm_fp32_output", "norm_fp32_input"), ones)]
    prefix, keys = ("moe", MOE_KEYS) if moe else ("mlp", MLP_KEYS)
    return _norm(block, prefix, *own) + _post_norm(block, prefix) + _part(block, prefix, keys)


def _attention_part(mixer: str, dense: Total, ones) -> list:
    """The attention part of ``dense`` (a whole layer's terms) with its pre- and post-norm, at
    a global layer's head width and KV heads for ``mixer`` ``"global"``."""
    part = _norm(dense, "attn", *ones) + _post_norm(dense, "attn") \
        + _part(dense, "attn", ATTENTION_KEYS)
    if mixer == "attention":
        return part
    return [Term(term.key, as_global(term.expr), term.description + " (global layer)",
                 term.source, label=term.label) for term in part]


def _post_norm(block: Total, prefix: str) -> list:
    """The part's post-norm (Gemma's layers: one after the attention, one after the MLP):
    half of the layer's ``post_norms`` term, none without it [bytes]."""
    if "post_norms" not in block:
        return []
    return [Term(f"{prefix}_post_norm", block["post_norms"].expr / 2, "input and statistics "
                 "of the part's post-norm (one of a layer's two)", block["post_norms"].source,
                 label=f"{prefix} post-norm")]


_PRE_NORM = {"conv": ("models/lfm2/modeling_lfm2.py Lfm2DecoderLayer.forward "
                       "(operator_norm before the conv)", short_conv_activations),
             "gdn": ("models/qwen3_next/modeling_qwen3_next.py Qwen3NextDecoderLayer.forward "
                     "(input_layernorm before linear_attn)", gdn_activations),
             "lightning": ("models/minimax/modeling_minimax.py MiniMaxDecoderLayer.forward "
                           "(input_layernorm before self_attn)", lightning_activations)}


def _pair(kind) -> tuple:
    """A hybrid layer's ``(mixer, ffn)`` (a KV-reusing mixer as its base's), refused in one
    line when it is not a pair."""
    if not isinstance(kind, (tuple, list)) or len(kind) != 2:
        raise InvalidValueError("kind must be a (mixer, ffn) pair: mixer 'attention', 'mamba', "
                                "'conv', 'gdn', 'lightning', 'shared' or 'none', ffn None, False "
                                f"or True; got {kind!r:.40}")
    # a layer reusing keys and values (Gemma 4): its base layer's here, less what it does not
    # keep in the job's add-ons (memsym.terms.kv_sharing, memsym.training.layer_model)
    mixer = kind[0]
    return ({"kv_reuse": "attention", "global_kv_reuse": "global"}.get(mixer, mixer)
            if isinstance(mixer, str) else mixer, kind[1])


def _refuse_unmodelled(kind: tuple, recompute: str, context_parallel: bool, common: dict,
                       shared_block=None) -> None:
    """Raise InvalidValueError for a hybrid layer whose activations memsym does not model."""
    mixer, ffn = kind
    if mixer == "mamba1" or (mixer == "shared" and (shared_block or {}).get("mamba1")):
        # Zamba's Mamba-1 mixers, as transformers' torch path runs them (memsym.terms.mamba1)
        refuse_mamba1(recompute, context_parallel, common, shared_block)
    if mixer == "shared":
        _refuse_shared(recompute, context_parallel, common, shared_block)
    elif mixer == "mamba1" and ffn is None:
        pass
    elif mixer not in ("attention", "global", "mamba", "none", *_PRE_NORM) \
            or ffn not in (None, False, True):
        what = {"mamba1": "Mamba-1 mixers (Jamba, Mamba, Falcon-Mamba)",
                "parallel": "attention and Mamba side by side in one layer (Falcon-H1)",
                }.get(mixer, f"the layer kind {kind!r}")
        raise InvalidValueError(f"the activations of {what} are not modelled (Megatron-core "
                                "trains Mamba-2 mixers, one mixer per layer)")
    if common.get("mla"):
        raise InvalidValueError("multi-latent attention in a hybrid Mamba/attention model is "
                                "not modelled")
    if recompute == "selective-op":
        raise InvalidValueError("torchtitan's per-op recompute (selective-op) of a hybrid "
                                "Mamba/attention model is not modelled")
    what = {"mamba": "a Mamba mixer", "conv": "a short-convolution mixer",
            "gdn": "a Gated DeltaNet mixer", "lightning": "a lightning-attention mixer"}.get(mixer)
    if (what or mixer in ("mamba1", "shared")) and common.get("width", 2) != 2:
        # the mixers' terms are written for 16-bit compute (their fp32 statistics beside them)
        whose = what or {"mamba1": "a Mamba-1 mixer"}.get(mixer, "a shared transformer block")
        raise InvalidValueError(f"fp32 activations of {whose} are not modelled (its tensors "
                                "are counted at 16 bits): use bf16 or fp16 for a hybrid model")
    if what and mixer != "mamba" and common.get("fp8_inputs"):
        raise InvalidValueError(f"FP8 activations of {what} are not modelled (use bf16 for a "
                                "hybrid model)")
    if what and context_parallel:
        raise InvalidValueError(f"context parallelism (c > 1) of {what} is not modelled")


def _refuse_shared(recompute: str, context_parallel: bool, common: dict, shared_block) -> None:
    """Raise InvalidValueError for a use of a shared block (Zamba) that is not modelled."""
    # transformers 5.25.0 modeling_zamba2.py Zamba2HybridLayer.forward (lines 1140-1192) and
    # Zamba2AttentionDecoderLayer.forward (torch.concatenate, line 1060): memsym.terms.
    # shared_block models a use given the block's adapters (shared_block)
    what = None
    if shared_block is None:
        what = ("the activations of a shared transformer block's uses without the block's "
                "sizes (Zamba, Zamba2: the shared attention and MLP on the 2h-wide "
                "concatenation of hidden state and embeddings, with per-use LoRA adapters, "
                "then a per-use linear)")
    elif recompute in ("selective", "selective-op"):
        what = f"{recompute} recompute of a shared transformer block (Zamba2)"
    elif common.get("fp8_inputs"):
        what = "FP8 activations of a shared transformer block (use bf16 for Zamba2)"
    elif context_parallel or common.get("mla"):
        what = ("context parallelism (c > 1)" if context_parallel else "multi-latent "
                "attention") + " in a shared transformer block (Zamba2)"
    if what:
        raise InvalidValueError(f"{what} is not modelled")


_FUSED_NORM = Source("mamba-ssm", "ops/triton/ssd_combined.py at e9594ce1c7, "
                     "MambaSplitConv1dScanCombinedFn.forward lines 872 (rstd of the gated norm "
                     "run in the kernel), 888-889 (saved: zxbcdt, out_x, rstd), backward line 913 "
                     "(recompute_output: the norm's output rebuilt for out_proj's weight "
                     "gradient); transformers 5.25.0 modeling_nemotron_h.py NemotronHMamba2Mixer."
                     "forward lines 670-690 (rmsnorm_weight=self.norm.weight, outproj_weight=self."
                     "out_proj.weight; Zamba2, Bamba, GraniteMoeHybrid the same)")


def _mamba_mixer(sp_on: bool, dropout: bool, gated_norm: bool, one_stat, fp8,
                 hf: bool = False) -> list:
    """The Mamba-2 mixer's terms of a hybrid layer [bytes], its fused pre-norm's statistics too;
    ``hf``: transformers' training path, the gated norm and out_proj run inside mamba_ssm's
    kernel, which keeps the norm's fp32 rstd, :math:`4G\tau/t`, and neither the norm's input
    (rebuilt from out_x and z, kept already) nor its output (out_proj's input, recomputed)."""
    mamba = mamba_layer_activations(sequence_parallel=sp_on, dropout=dropout,
                                    gated_norm=gated_norm, fp8_inputs=fp8)
    if hf and gated_norm:
        mamba = [term for term in mamba if term.key not in ("norm_input", "out_proj_input")] + [
            Term("gated_norm_rstd", 4 * G_ssm * s * b / t, "the gated RMSNorm's per-group fp32 "
                 "rstd, saved by the fused kernel (its output recomputed)", _FUSED_NORM,
                 label="gated norm rstd")]
    terms = _part(mamba, "mamba")
    if one_stat != 0:
        terms.append(Term("mamba_norm_statistics", one_stat,
                          "fp32 per-token statistics of the fused pre-norm", _TE_NORM,
                          label="mamba norm stats"))
    return terms


def _other_mixer(mixer: str, sp_on: bool, dropout: bool, one_stat) -> list:
    """A short-convolution or Gated DeltaNet mixer's terms of a hybrid layer [bytes], with its
    pre-norm's input and statistics and, with dropout, a hidden-dropout mask (as the other
    parts')."""
    sigma = t if sp_on else 1
    where, terms_of = _PRE_NORM[mixer]
    src = Source("hf-transformers-5-25", where)
    terms = [Term(f"{mixer}_norm_input", 2 * s * b * h / sigma, "input of the mixer's pre-norm",
                  src, label=f"{mixer} norm")]
    if one_stat != 0:
        terms.append(Term(f"{mixer}_norm_statistics", one_stat, "fp32 per-token statistics of "
                          "the mixer's pre-norm", src, label=f"{mixer} norm stats"))
    terms += _part(terms_of(sequence_parallel=sp_on), mixer)
    if dropout:
        terms.append(Term(f"{mixer}_dropout_mask", s * b * h / sigma, "hidden dropout mask "
                          "after the mixer (1 byte), as the other parts'", src,
                          label=f"{mixer} dropout"))
    return terms


def _mixer_terms(mixer: str, common: dict, gated_norm: bool, norm: tuple, shared_block) -> list:
    """The terms of a hybrid layer's non-attention mixer [bytes]: a shared block's use (Zamba2)
    and the Mamba-2 mixer it feeds, a Mamba-2 mixer, or a short-conv / GDN / lightning mixer.
    ``norm``: (one norm's statistics, fp32 product and fp32 copy; the layer terms they halve)."""
    sp_on, dropout = common.get("sequence_parallel", False), common.get("dropout", True)
    (one_stat, one_fp32, one_copy), plain = norm
    terms: list = []
    if mixer == "shared":
        use = shared_block_activations(
            adapter_rank=shared_block.get("adapter_rank", 0),
            attention_adapters=shared_block.get("attention_adapters", False),
            sequence_parallel=sp_on, flash=common.get("flash", True),
            hf_norms=bool(common.get("hf_norms")))
        terms += _part(use, "shared")
    if mixer == "mamba1" or (mixer == "shared" and shared_block.get("mamba1")):
        terms += mamba1_layer_terms(one_stat)        # Zamba (transformers' torch path)
    elif mixer in ("mamba", "shared"):
        terms += _mamba_mixer(sp_on, dropout, gated_norm, one_stat, common.get("fp8_inputs"),
                              hf=bool(common.get("hf_norms")))
    if mixer in _PRE_NORM:
        terms += _other_mixer(mixer, sp_on, dropout, one_stat)
    # the mixer's pre-norm is the model's RMSNorm class (NemotronHBlock.norm,
    # Zamba2MambaDecoderLayer.input_layernorm, Bamba's input_layernorm): under the model's own
    # code the same fp32 product and input copy as the attention's pre-norm (none without one)
    part = "mamba" if mixer == "shared" else mixer
    if mixer in ("mamba", "mamba1", "shared", *_PRE_NORM):
        part = "mamba" if mixer == "mamba1" else part
        terms += _fp32_norm(part, one_fp32, plain) + _fp32_norm(part, one_copy, plain, "input")
    return terms


def hybrid_layer_activations(kind: tuple, *, recompute: str = "none", modules=None,
                             shared_expert: bool = False, gated_norm: bool = True,
                             context_parallel: bool = False, shared_block=None, **common) -> Total:
    r"""Activations one layer of a hybrid Mamba / attention model keeps for its backward [bytes].

    A hybrid layer ``kind = (mixer, ffn)`` (:func:`memsym.model.stages.layer_kind_pattern`) is
    summed from the parts it holds, each with its own pre-norm:

    * an attention mixer: the attention half of :func:`~memsym.terms.activations.
      layer_activations` (its pre-norm's input and statistics, Q, K, V, the scores or the
      softmax statistics, the projection input, the dropout mask); ``"global"``: as_global's;
    * a Mamba-2 mixer: :func:`mamba_layer_activations` and the fused norm's fp32 statistics
      (Transformer Engine's ``LayerNormColumnParallelLinear`` keeps them as for the QKV norm);
      with ``hf_norms`` its pre-norm's fp32 copy and product as the other parts'
      (:mod:`memsym.terms.hf_norms`; transformers' fused kernel runs the gated norm);
    * a short-convolution (LFM2), Gated DeltaNet (Qwen3-Next) or lightning (MiniMax-01)
      mixer: its pre-norm's input and statistics and the ``short_conv``, ``gated_deltanet``
      or ``lightning`` module's term;
    * a use of a shared block and its Mamba layer (``"shared"``): :func:`~memsym.terms.
      shared_block.shared_block_activations` and the Mamba-2 (Zamba2) or Mamba-1 mixer's terms
      (Zamba's, also ``"mamba1"``: :mod:`memsym.terms.mamba1`, transformers' code only);
    * an MLP (``ffn`` False) or MoE block (``ffn`` True): the other half of
      :func:`~memsym.terms.activations.layer_activations` of that kind.

    Megatron-core's hybrid stack builds each ``hybrid_override_pattern`` character (``M``,
    ``*``, ``-``, ``E``) as its own layer with one pre-norm (``models/hybrid/
    hybrid_layer_specs.py``), which is Nemotron-H's layer; a Bamba or Granite layer holds a
    mixer and an MLP, two pre-norms.  Full recompute keeps each layer's input,
    :math:`2sbh/\sigma` (Korthikanti Table 2), whatever it holds.  Selective recompute drops
    what the recomputed modules drop from the attention and MLP parts; no
    ``--recompute-modules`` entry covers a Mamba mixer, which keeps everything.

    Parameters
    ----------
    kind : tuple
        ``(mixer, ffn)``: mixer ``"attention"``, ``"global"``, ``"mamba"``, ``"mamba1"``,
        ``"shared"``, ``"conv"``, ``"gdn"``, ``"lightning"``, ``"none"``; ffn None/False/True.
    recompute : {"none", "selective", "full"}
    modules : sequence of str, optional
        Megatron's ``--recompute-modules`` under selective recompute.
    shared_expert : bool
        The MoE block has shared experts.
    gated_norm : bool
        The Mamba mixer's gated RMSNorm before out_proj.
    context_parallel : bool
        c > 1: refused for a Mamba layer (Megatron's ``MambaContextParallel`` is not modelled).
    shared_block : dict, optional
        A ``"shared"`` layer's block: ``adapter_rank`` [1], ``attention_adapters``, ``mamba1``.
    **common
        :func:`~memsym.terms.activations.layer_activations`' switches (``gated``, ``flash``,
        ``norm``, ``qk_norm``, ``output_gate``, ``hf_qwen3_next``, ``fp8_inputs``, ...).

    Returns
    -------
    Total
        Per layer, per micro-batch, per GPU [bytes].

    Raises
    ------
    InvalidValueError
        ``kind`` not a (mixer, ffn) pair; Mamba-1 outside Zamba, a side-by-side mixer, MLA,
        torchtitan's per-op recompute, FP8 of a non-Mamba mixer, or context parallelism: one
        line naming what is not modelled.

    References
    ----------
    Megatron-core ``megatron/core/models/hybrid/hybrid_layer_specs.py`` (one pre-norm per
    pattern character) and ``megatron/core/ssm/mamba_mixer.py`` at d98e8a64dd
    (megatron-core); Korthikanti et al. 2022, arXiv:2205.05198, §4.1 and Table 2
    (korthikanti).

    Examples
    --------
    An attention layer and an MLP layer of Nemotron-H hold, together, one transformer layer:

    >>> from memsym.terms.activations import layer_activations
    >>> att = hybrid_layer_activations(("attention", None), gated=False, flash=True)
    >>> mlp = hybrid_layer_activations(("none", False), gated=False, flash=True)
    >>> (att.expr + mlp.expr - layer_activations(gated=False, flash=True).expr).expand()
    0
    """
    mixer, ffn = kind = _pair(kind)
    _refuse_unmodelled(kind, recompute, context_parallel, common, shared_block)
    if recompute == "full":
        return Total("activations per hybrid layer (full recompute)", tuple(
            layer_activations(recompute="full", **common)))
    plain = layer_activations(**common)       # one norm's share: half of its two norms' terms
    ones = [_half(plain, k) for k in ("norm_statistics", "norm_fp32_output", "norm_fp32_input")]
    terms: list = []
    if mixer in ("attention", "global"):
        terms += _attention_part(mixer, layer_activations(recompute=recompute, modules=modules,
                                                          **common), ones)
    terms += _mixer_terms(mixer, common, gated_norm, (ones, plain), shared_block)
    if ffn is not None:
        terms += _ffn_part(layer_activations(recompute=recompute, modules=modules, moe=ffn,
                                             shared_expert=shared_expert and ffn, **common),
                           ffn, ones)
    return Total(f"activations per hybrid layer ({mixer}, "
                 f"{ {None: 'no MLP', False: 'MLP', True: 'MoE'}[ffn] }, recompute {recompute})",
                 tuple(terms))


def hybrid_stack(kinds, recompute: str, modules, shared_expert: bool, context_parallel: bool,
                 common: dict, shared_block=None, addons=None) -> sp.Expr:
    r"""The activations of a hybrid stage's layers, each kind's times its count [bytes].

    .. math:: A_{\mathrm{stage}} = \sum_k n_k\, (A_{\mathrm{layer}}(\mathrm{kind}_k)
              + \Delta(\mathrm{kind}_k))

    with :math:`A_{\mathrm{layer}}` :func:`hybrid_layer_activations` and :math:`\Delta` what
    the framework and the recipe add to the attention and MLP / MoE parts a kind holds (as
    to a plain transformer layer's, ``addons``).

    Parameters
    ----------
    kinds : sequence of (kind, count, gated_norm)
        The stage's layers by kind (:func:`memsym.model.stages.hybrid_kinds`).
    recompute : str
        The recompute mode of these layers.
    modules : sequence of str or None
        ``--recompute-modules`` (read under selective recompute only).
    shared_expert, context_parallel : bool
        As in :func:`hybrid_layer_activations`.
    common : dict
        The transformer term's switches.
    shared_block : dict, optional
        A shared block's sizes (Zamba2), as in :func:`hybrid_layer_activations`.
    addons : callable, optional
        ``addons(kind, recompute)``: what the job's framework and recipe add to one layer of
        that kind [bytes] (:func:`memsym.training.layer_model.layer_model_of`: an eager
        SwiGLU's kept products, PEFT's adapters, ... on the parts the kind holds); None: none.

    Returns
    -------
    sympy.Expr
        Per micro-batch, per GPU [bytes].

    References
    ----------
    Megatron-core ``megatron/core/ssm/mamba_block.py`` at d98e8a64dd (megatron-core): a stage
    runs its layers one after another, each keeping its own activations.

    Examples
    --------
    >>> one = hybrid_layer_activations(("mamba", None)).expr
    >>> hybrid_stack([(("mamba", None), 3, True)], "none", None, False, False, {}) == 3 * one
    True
    """
    mods = modules if recompute == "selective" else None
    return sum((n * (hybrid_layer_activations(kind, recompute=recompute, modules=mods,
                                              shared_expert=shared_expert, gated_norm=gated,
                                              context_parallel=context_parallel,
                                              shared_block=shared_block, **common).expr
                     + (addons(tuple(kind), recompute) if addons is not None else 0))
                for kind, n, gated in kinds), 0)
