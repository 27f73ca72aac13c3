"""Pipeline stages: the layer split and per-stage parameter counts."""

from __future__ import annotations

import collections
import functools
from dataclasses import dataclass, replace
from typing import Optional

import sympy as sp

from .. import rules   # the one rule table; it reads only the architecture
from ..errors import DivisibilityError, InvalidValueError
from .architecture import Architecture, lenient, pos_int, resolve
from .counts import ZERO, as_int, norm_params, layer_parts, mtp_extra, parameter_values
from .per_layer_inputs import per_layer_model_parts
from .shared_blocks import shared_model_parts
from .hybrid_layers import (hybrid_kinds, hybrid_layer_parameters, layer_kind_pattern,
                            mamba_values, mtp_layer_kinds)
from ..symbols import V, h
from ..text import shared_doc

# ----------------------------------------------------------------------------------------------
# pipeline stages
# ----------------------------------------------------------------------------------------------

__all__ = ["StageParameters", "check_layout", "stage_layers", "layer_parameters", "stage_parameters",
           "kind_counts", "layer_kinds",
           "layer_kind_pattern", "hybrid_kinds", "mamba_values", "mtp_layer_kinds", "mtp_parameters"]

_doc = shared_doc(layout_params="""
    arch : Architecture
        The model.
    t, p, e : int
        Tensor-, pipeline- and expert-parallel sizes [GPUs].
    t_e : int, optional
        Expert tensor-parallel size [GPUs] (default t, as Megatron resolves it).
    """)


@_doc
def check_layout(arch: Architecture, t: int = 1, p: int = 1, e: int = 1, t_e: Optional[int] = None,
                 first_stage_layers: Optional[int] = None,
                 last_stage_layers: Optional[int] = None, pipeline_layout=None) -> None:
    """Refuse a layout that Megatron-LM cannot build, naming the divisibility rule broken.

    The structural rules of :data:`memsym.rules.RULES`: ``tp-heads``, ``tp-kv-heads``,
    ``tp-ffn`` (t divides the dense and shared-expert ffn, t_e the routed experts'),
    ``ep-experts`` and ``pp-layers``.

    Parameters
    ----------
    {layout_params}
    first_stage_layers, last_stage_layers : int, optional
        Uneven pipeline: decoder layers on the first / last stage [1].
    pipeline_layout : memsym.model.pipeline_layout.PipelineLayout, optional
        A custom layout (``--pipeline-model-parallel-layout``): validated in place of the
        split rules.

    Raises
    ------
    DivisibilityError
        One line naming the rule.

    Examples
    --------
    >>> from memsym.model import preset
    >>> check_layout(preset("llama2-70b"), t=8, p=4)
    >>> check_layout(preset("llama2-70b"), t=16)
    Traceback (most recent call last):
    ...
    memsym.errors.DivisibilityError: tensor-parallel size t=16 must divide the KV heads (num_query_groups=8)
    """
    x = lenient(arch)
    t, p, e = pos_int(t, "t"), pos_int(p, "p"), pos_int(e, "e")
    t_e = t if t_e is None else pos_int(t_e, "t_e")
    # a shared block serves layers on several stages: which rank owns its weights and how
    # its gradients are reduced is no framework's documented placement (memsym assumes none)
    rules.check(x, {"p": p}, ("shared-block-pipeline",))
    if pipeline_layout is not None:
        rules.check(x, {"t": t, "p": p, "e": e, "t_e": t_e, "pipeline_layout": True},
                    ("tp-heads", "tp-kv-heads", "tp-ffn", "ep-experts") + _HYBRID_RULES)
        _check_pipeline_layout(x, p, pipeline_layout, first_stage_layers, last_stage_layers)
        return
    rules.check(x, {"t": t, "p": p, "e": e, "t_e": t_e, "first_stage_layers": first_stage_layers,
                    "last_stage_layers": last_stage_layers},
                ("tp-heads", "tp-kv-heads", "tp-ffn", "ep-experts", "pp-layers")
                + _HYBRID_RULES)
    _split_layers(x.num_layers, p, first_stage_layers, last_stage_layers)


#: The hybrid Mamba / attention rules a stage split checks (memsym.rules, Megatron's
#: MambaMixer and hybrid_layer_allocation.select_pipeline_segment).
_HYBRID_RULES = ("tp-mamba-heads", "tp-mamba-groups", "hybrid-pipeline")


def _check_pipeline_layout(x, p, pipeline_layout, first, last) -> None:
    # transformer_config.py __post_init__: the layout excludes the uneven-stage arguments;
    # its stages are a multiple of p; validate_layer_layout
    if first is not None or last is not None:
        raise InvalidValueError("a pipeline layout cannot be given with first/last stage sizes "
                                "(Megatron: pipeline_model_parallel_layout cannot be set with "
                                "other pipeline layout arguments)")
    if pipeline_layout.p != p:
        raise InvalidValueError(f"the pipeline layout is for p={pipeline_layout.p}, the layout "
                                f"has p={p}")
    pipeline_layout.validate(x.num_layers, x.mtp_num_layers or 0)


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
        sizes[0] = pos_int(first, "first_stage_layers", allow_zero=True)
        rest, middle = rest - sizes[0], middle - 1
    if last is not None:
        sizes[-1] = pos_int(last, "last_stage_layers", allow_zero=True)
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
                 last_stage_layers: Optional[int] = None, pipeline_layout=None):
    """The decoder layers (0-based indices) held by pipeline ``stage`` of ``p``.

    Parameters
    ----------
    arch : Architecture
        The model.
    p : int
        Pipeline-parallel size [GPUs].
    stage : int
        The stage index, 0 .. p−1.
    first_stage_layers, last_stage_layers : int, optional
        Uneven pipeline: decoder layers on the first / last stage [1]; the rest split evenly.
    pipeline_layout : memsym.model.pipeline_layout.PipelineLayout, optional
        A custom layout: the stage's chunks' layers (not contiguous when v > 1).

    Returns
    -------
    range or tuple of int
        The stage's layer indices (a tuple under a custom layout).

    Examples
    --------
    >>> from memsym.model import preset
    >>> stage_layers(preset("llama3-405b"), p=16, stage=0, first_stage_layers=7, last_stage_layers=7)
    range(0, 7)
    """
    n = lenient(arch).num_layers
    p = pos_int(p, "p")
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < p:
        raise InvalidValueError(f"stage must be a whole number in 0..{p - 1}, got {stage!r}")
    if pipeline_layout is not None:
        return tuple(i for ids in pipeline_layout.layer_ids(stage) for i in ids)
    sizes = _split_layers(n, p, first_stage_layers, last_stage_layers)
    start = sum(sizes[:stage])
    return range(start, start + sizes[stage])


def layer_kinds(pattern, layers) -> list:
    """The kinds ``pattern`` gives ``layers`` (indices into it), in order.

    A stage's layers are a ``range`` (:func:`stage_layers`): read as a slice of the pattern,
    in C, not index by index (a 10^6-layer model in 1000 stages: limits.LIMITS).

    Examples
    --------
    >>> layer_kinds((True, False, False, True), range(1, 4)), layer_kinds((1, 2, 3), (0, 2))
    ([False, False, True], [1, 3])
    """
    if isinstance(layers, range) and layers.step == 1:
        return list(pattern[layers.start:layers.stop])
    return [pattern[i] for i in layers]


def kind_counts(pattern, layers) -> collections.Counter:
    """How many of ``layers`` (indices into ``pattern``) have each kind (:func:`layer_kinds`).

    Examples
    --------
    >>> kind_counts((True, False, False, True), range(1, 4)) == {False: 2, True: 1}
    True
    >>> kind_counts((True, False, False, True), (0, 3))
    Counter({True: 2})
    """
    return collections.Counter(layer_kinds(pattern, layers))


def layer_parameters(arch: Architecture, moe=False) -> dict:
    """One decoder layer's parameters split by how they shard (exact ints).

    Returns ``{"tp": ..., "replicated": ..., "experts": ...}``: TP-sharded weights (divide by t),
    weights every TP rank holds whole (norms, router, row-parallel biases, MLA down projections),
    and routed-expert weights (divide by e·t_e).  ``moe`` is the layer's kind as
    :func:`layer_kind_pattern` gives it: a bool (dense / MoE), or a hybrid layer's
    ``(mixer, ffn)`` pair.

    Examples
    --------
    >>> from memsym.model import preset
    >>> layer_parameters(preset("llama2-7b"))
    {'tp': 202375168, 'replicated': 8192, 'experts': 0}
    """
    # an architecture hashes by its fields (``extra`` is excluded), as the search's caches use it
    if isinstance(moe, tuple):
        return dict(hybrid_layer_parameters(lenient(arch), moe))
    return dict(_layer_parameters(lenient(arch), bool(moe)))


@functools.lru_cache(maxsize=256)
def _layer_parameters(x, moe: bool) -> tuple:
    # cached per (architecture, kind): the search asks for the same two layer kinds for
    # hundreds of stages; a tuple of pairs, copied into a fresh dict by the caller
    # no s_max needed here: a rope model is counted as it is (not resolved again), a model
    # with learned positions as its rope variant
    vals = parameter_values(x if x.position_embedding_type == "rope"
                            else replace(x, position_embedding_type="rope"))
    parts = layer_parts(x, moe)
    return (("tp", as_int(sum((q[0] for q in parts.values()), ZERO), vals)),
            ("replicated", as_int(sum((q[1] for q in parts.values()), ZERO), vals)),
            ("experts", as_int(sum((q[2] for q in parts.values()), ZERO), vals)))


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
        The tensor, expert and expert-tensor parallel sizes used for the per-GPU numbers [GPUs].
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


def mtp_parameters(arch: Architecture, t: int = 1, pad_vocab: bool = True) -> dict:
    """The parameters of the MTP layers, as the last stage holds them [parameters].

    Each MTP layer: its block (:func:`mtp_layer_kinds`), its three norms (replicated) and the
    2h -> h projection ``eh_proj`` (TP-sharded, a column-parallel linear); one layer's
    weights when it is run repeatedly (``mtp_use_repeated_layer``,
    multi_token_prediction.py:1960-1996 at d98e8a64dd).

    Parameters
    ----------
    arch : Architecture
        The model.
    t : int
        Tensor-parallel size [GPUs] (the vocabulary padding of the shared counts).
    pad_vocab : bool
        Use Megatron's padded vocabulary.

    Returns
    -------
    dict
        ``{"tp", "replicated", "experts"}``: TP-sharded (whole, before dividing by t),
        replicated and routed-expert (whole) parameters [parameters]; zeros without MTP.

    Examples
    --------
    DeepSeek-V3's one MTP layer holds a 2h x h ``eh_proj`` beside an MoE layer's block:

    >>> from memsym.model import preset
    >>> x = preset("deepseek-v3")
    >>> mtp_parameters(x)["tp"] - layer_parameters(x, True)["tp"] == 2 * 7168 * 7168
    True
    """
    x = resolve(arch)
    if not x.mtp_num_layers:
        return {"tp": 0, "replicated": 0, "experts": 0}
    kinds = mtp_layer_kinds(x)
    per = {kind: layer_parameters(x, kind) for kind in set(kinds)}
    n = 1 if x.mtp_repeated else x.mtp_num_layers
    norms = 3 * norm_params(x) * x.hidden_size
    proj = as_int(mtp_extra(x), parameter_values(x, t, pad_vocab)) - norms
    return {"tp": n * (sum(per[k]["tp"] for k in kinds) + proj),
            "replicated": n * (sum(per[k]["replicated"] for k in kinds) + norms),
            "experts": n * sum(per[k]["experts"] for k in kinds)}


@_doc
def stage_parameters(arch: Architecture, t: int = 1, p: int = 1, stage: int = 0, *, e: int = 1,
                     t_e: Optional[int] = None, first_stage_layers: Optional[int] = None,
                     last_stage_layers: Optional[int] = None, pad_vocab: bool = True,
                     tied_output_copy: bool = True, pipeline_layout=None,
                     output_stage: Optional[int] = None,
                     split_embedding: bool = True) -> StageParameters:
    """The parameters pipeline ``stage`` of ``p`` holds (Megatron-LM placement).

    The first stage holds the word embedding (V_pad·h, sharded over t) and the learned position
    table (replicated); the last stage holds the final norm, the output layer and the MTP layers
    (Megatron-core places MTP on the last stage).  With tied embeddings and p > 1 the last stage
    also holds a copy of the word embedding as its output weight (Megatron allocates it and
    all-reduces its gradient with the first stage); ``tied_output_copy=False`` drops it.

    .. math:: N_{\\text{GPU}} = \\frac{N_{\\text{tp}}}{t} + N_{\\text{rep}} + \\frac{N_{\\text{exp}}}{e\\,t_e}

    Parameters
    ----------
    {layout_params}
    stage : int
        0 .. p−1.
    first_stage_layers, last_stage_layers : int, optional
        Uneven pipeline: layers on the first / last stage (Megatron's
        ``--decoder-first/last-pipeline-num-layers``); the rest split evenly.
    pad_vocab : bool
        Use Megatron's padded vocabulary (default True: it is what is allocated).
    tied_output_copy : bool
        Count the last stage's copy of a tied embedding as its output weight.
    pipeline_layout : memsym.model.pipeline_layout.PipelineLayout, optional
        A custom layout (``--pipeline-model-parallel-layout``): the stage's layers from it.
    output_stage : int, optional
        The rank that holds the final norm and the output layer (default p - 1; 0 under
        torch's V placement, where rank 0 holds the first and the last stage).
    split_embedding : bool
        Whether the word embedding is split over t (default True: Megatron's
        ``VocabParallelEmbedding``).  False: it is whole on every TP rank, and so is a tied
        output layer (DeepSpeed AutoTP, :attr:`memsym.frameworks.Framework.tp_whole_embedding`);
        an untied output layer stays split over its vocabulary.

    Examples
    --------
    >>> from memsym.model import preset
    >>> sp0 = stage_parameters(preset("llama2-7b"), t=1, p=4, stage=0, pad_vocab=False)
    >>> sp0.total == 8 * 202383360 + 32000 * 4096
    True
    >>> sp1 = stage_parameters(preset("llama2-7b"), t=2, pad_vocab=False, split_embedding=False)
    >>> sp1.replicated - stage_parameters(preset("llama2-7b"), t=2, pad_vocab=False).replicated
    131072000
    """
    x = resolve(arch)   # strict: the position table is counted on stage 0
    check_layout(x, t, p, e, t_e, first_stage_layers, last_stage_layers, pipeline_layout)
    t_e = t if t_e is None else t_e
    rng = stage_layers(x, p, stage, first_stage_layers, last_stage_layers, pipeline_layout)
    # each layer's kind (dense / MoE, or a hybrid's mixer and MLP): one count per kind
    pattern = layer_kind_pattern(x)
    counts = kind_counts(pattern, rng)
    per = {kind: layer_parameters(x, kind) for kind in counts}
    tp, rep, ex = (sum(per[kind][part] * n for kind, n in counts.items())
                   for part in ("tp", "replicated", "experts"))
    vals = parameter_values(x, t, pad_vocab)
    vh = as_int(V * h, vals)
    first, last = stage == 0, stage == (p - 1 if output_stage is None else output_stage)
    if first:
        if split_embedding:
            tp += vh
        else:
            rep += vh
        if x.position_embedding_type == "learned_absolute":
            rep += x.max_position_embeddings * x.hidden_size
        if x.embedding_norm:                    # BLOOM's norm after the word embedding
            rep += norm_params(x) * x.hidden_size
        if x.per_layer_input_size:              # Gemma 4's per-layer table and projection
            rep += as_int(per_layer_model_parts(x), vals)
        if x.shared_blocks:                     # Zamba's shared blocks (p = 1: check_layout)
            shared = shared_model_parts(x)
            tp += as_int(shared["attention"] + shared["mlp"], vals)
            rep += as_int(shared["norms"], vals)
    if last:
        rep += norm_params(x) * x.hidden_size
        if x.untie_embeddings_and_output_weights:
            tp += vh
        elif p > 1 and tied_output_copy:
            # AutoTP leaves a tied output layer whole beside its embedding
            rep, tp = (rep, tp + vh) if split_embedding else (rep + vh, tp)
        if x.output_layer_bias:                 # GPT-J's lm_head bias, one per (padded) row
            tp += as_int(V, vals)
        if x.mtp_num_layers:
            mtp = mtp_parameters(x, t, pad_vocab)
            tp, rep, ex = tp + mtp["tp"], rep + mtp["replicated"], ex + mtp["experts"]
    return StageParameters(stage, rng, first, last, bool(last and x.mtp_num_layers), tp, rep, ex,
                           t, e, t_e)
