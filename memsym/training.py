"""The per-GPU training-memory total on the most-loaded GPU.

Model states (:func:`memsym.terms.model_state.model_state` with the exact parameter count of
the stage) + activations (:mod:`memsym.terms.activations` and :mod:`memsym.terms.schedule`)
+ named allowances (workspace, NCCL buffers, allocator fragmentation), each a registered
symbol with a documented default that a user can set to 0 or to a measured value.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Mapping

import sympy as sp

from .errors import DivisibilityError, InvalidValueError, UnknownNameError, choose
from .symbols import (E, L, M_nccl, M_ws, V, a, b, c, c_f, d, d_h, e, f, f_e, f_sh, g, h, k, m, p,
                      phi_frag, s, t, t_e, v)
from .term import Source, Term, Total
from .terms.activations import (RECOMPUTE, embedding_activations, layer_activations,
                                output_activations)
from .terms.model_state import CONVENTIONS, byte_widths, model_state
from .terms.schedule import (SCHEDULES, embedding_microbatches, logits_microbatches,
                             stage_microbatches)
from .values import exact

__all__ = ["Layout", "Training", "Allowance", "ALLOWANCES", "TrainingEstimate", "allowance_values",
           "allowance_terms", "arch_values", "microbatches", "validate", "stage_activations",
           "stage_total", "training_values", "training_memory", "RECOMPUTE", "SCHEDULES"]

@dataclass(frozen=True)
class Layout:
    """A parallel layout: how the GPUs are split (Megatron-LM's ordering [TP, CP, PP, DP]).

    Attributes
    ----------
    t, p, d, c : int
        Tensor-, pipeline-, data- and context-parallel sizes; world size ``G = t p c d``.
    e, t_e : int or None
        Expert-parallel size and expert tensor-parallel size (``t_e`` None = ``t``, as
        Megatron-LM's ``validate_args`` resolves it).
    v : int or None
        Virtual pipeline stages (model chunks) per pipeline rank; None = not interleaved.
    sequence_parallel : bool
        Megatron sequence parallelism (only meaningful for ``t > 1``).
    first_stage_layers, last_stage_layers : int or None
        Uneven pipeline: decoder layers on the first / last stage (Megatron's
        ``--decoder-first/last-pipeline-num-layers``); the rest split evenly.
    """

    t: int = 1
    p: int = 1
    d: int = 1
    c: int = 1
    e: int = 1
    t_e: int | None = None
    v: int | None = None
    sequence_parallel: bool = False
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None

    @property
    def world_size(self) -> int:
        return self.t * self.p * self.c * self.d

    @property
    def expert_tp(self) -> int:
        return self.t if self.t_e is None else self.t_e


@dataclass(frozen=True)
class Training:
    """What one training step does (Megatron-LM argument names where they exist).

    Attributes
    ----------
    seq_length : int
        ``s`` [tokens].
    micro_batch_size : int
        ``b`` [sequences].
    num_microbatches : int or None
        ``m`` per step and pipeline; None = derived from ``global_batch_size`` as
        ``B/(b d)``, or "enough" (at least ``p``) when that is also None.
    global_batch_size : int or None
        ``B`` [sequences].
    recompute : {"none", "selective", "full"}
        Activation recomputation (Megatron ``--recompute-granularity``; absent = none).
    flash_attention : bool
        Memory-efficient attention (no s^2 scores kept; softmax statistics kept).
    dropout : bool
        Whether dropout masks are kept (Megatron's defaults --hidden-dropout 0.1 and
        --attention-dropout 0.1; Llama-style recipes set both to 0, and PyTorch keeps no
        mask at p = 0).
    schedule : {"1f1b", "gpipe"}
        Pipeline schedule; 1F1B is interleaved when the layout's ``v`` > 1.
    precision, optimizer, sharding, convention, offload : str
        As in :func:`memsym.terms.model_state.model_state` / :func:`byte_widths`.
    capacity_factor : number
        MoE routed-token load of the busiest expert rank relative to a perfectly balanced
        one (1 = balanced; Megatron's ``--moe-expert-capacity-factor`` when tokens are dropped).
    """

    seq_length: int = 2048
    micro_batch_size: int = 1
    num_microbatches: int | None = None
    global_batch_size: int | None = None
    recompute: str = "none"
    flash_attention: bool = False
    dropout: bool = True
    schedule: str = "1f1b"
    precision: str = "bf16"
    optimizer: str = "adam"
    sharding: str = "distributed-optimizer"
    convention: str = "memsym"
    offload: str = "none"
    capacity_factor: float = 1


# ---------------------------------------------------------------------------------------------
# allowances: named, cited, each a registered symbol with a default a user can override
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Allowance:
    """One named allowance: its symbol, default value and where the default comes from."""

    key: str
    symbol: sp.Symbol
    default: sp.Expr
    source: Source
    description: str


_GIB = sp.Integer(2) ** 30

#: The allowances of the training total, by key.  Defaults are memsym's documented judgment,
#: not measurements: set them to 0 (``allowances={"workspace": 0}``) or to a measured value.
ALLOWANCES = {
    # CUDA context and kernel images (outside PyTorch's allocator, visible in nvidia-smi),
    # cuBLAS / Transformer Engine workspaces (32 MiB per stream on Hopper) and transient
    # buffers of fused kernels; seed 001 lists "temporary / workspace memory: CUDA kernels,
    # NCCL buffers, CUDA graphs" as a peak-memory component that the Bridge estimator omits.
    "workspace": Allowance("workspace", M_ws, _GIB,
                           Source("seed001", "概要 (一時メモリ／ワークスペースメモリ)"),
                           "CUDA context, cuBLAS/TE workspaces and temporary buffers (default 1 GiB)"),
    # NCCL keeps NCCL_BUFFSIZE = 4 MiB per channel and peer for each communicator: with up to
    # 32 channels and 2 ring peers about 256 MiB per communicator, and a training job opens
    # several (TP, DP, PP, CP, EP): 1 GiB.
    "nccl": Allowance("nccl", M_nccl, _GIB,
                      Source("nccl-env", "NCCL_BUFFSIZE (4 MiB per channel and peer)"),
                      "NCCL communicator buffers (default 1 GiB)"),
    # Seed 001: a 58.8 GB peak OOMed on an 80 GB H100 from fragmentation alone (>26 % of the
    # card unusable), fixed by PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.  The default
    # 10 % assumes expandable segments; without them measure (reserved - allocated).
    "fragmentation": Allowance("fragmentation", phi_frag, sp.Rational(1, 10),
                               Source("seed001", "概要; 測定結果 (expandable_segments)"),
                               "allocator fragmentation margin, a fraction of model states + "
                               "activations (default 10 %)"),
}


def allowance_values(allowances: Mapping | None = None) -> dict:
    """Allowance symbols -> exact values: the defaults, overridden by ``allowances``.

    Keys may be allowance keys (``workspace``, ``nccl``, ``fragmentation``) or symbol names
    (``M_ws``, ``M_nccl``, ``phi_frag``).

    Examples
    --------
    >>> allowance_values({"workspace": 0})[M_ws]
    0
    >>> allowance_values()[phi_frag]
    1/10
    """
    out = {a_.symbol: a_.default for a_ in ALLOWANCES.values()}
    by_name = {a_.symbol.name: a_ for a_ in ALLOWANCES.values()}
    for key, val in (dict(allowances) if allowances else {}).items():
        name = getattr(key, "name", key)
        al = ALLOWANCES.get(name) or by_name.get(name)
        if al is None:
            raise UnknownNameError("allowance", key, list(ALLOWANCES) + list(by_name))
        num = exact(val, f"allowance {al.key}")
        if num < 0:
            raise InvalidValueError(f"allowance {al.key} must be >= 0, got {val}")
        out[al.symbol] = num
    return out


def allowance_terms(allocated: sp.Expr) -> tuple:
    r"""The three allowance Terms; fragmentation is a fraction of ``allocated`` [bytes].

    .. math:: M_{\mathrm{ws}} + M_{\mathrm{nccl}} + \varphi_{\mathrm{frag}}\,(M_{\mathrm{states}} + M_{\mathrm{act}})

    Examples
    --------
    >>> [t_.key for t_ in allowance_terms(sp.Integer(10))]
    ['workspace', 'nccl', 'fragmentation']
    """
    w, n_, fr = (ALLOWANCES[x] for x in ("workspace", "nccl", "fragmentation"))
    return (
        Term("workspace", w.symbol, w.description, w.source, label="workspace"),
        Term("nccl", n_.symbol, n_.description, n_.source, label="NCCL buffers"),
        Term("fragmentation", fr.symbol * allocated, fr.description, fr.source,
             label="fragmentation"),
    )


# ---------------------------------------------------------------------------------------------
# the architecture's sizes as symbol values
# ---------------------------------------------------------------------------------------------
def _resolve(arch, training):
    """An Architecture (passed through), preset name, or config.json path (str or Path),
    with Megatron's defaults filled in."""
    from . import model as models

    return models.resolve(models.resolve_model(arch), seq_length=training.seq_length)


def _check_types(layout, training) -> None:
    # a dict (or anything else) would fail later with an AttributeError, not a clear refusal
    for obj, cls, name in ((layout, Layout, "layout"), (training, Training, "training")):
        if not isinstance(obj, cls):
            raise InvalidValueError(f"{name} must be a memsym.training.{cls.__name__}(...), got "
                                    f"{type(obj).__name__}")


def arch_values(arch, t_: int = 1) -> dict:
    """Registry symbol -> exact value for a resolved architecture (padded vocabulary at t).

    Examples
    --------
    >>> from memsym.model import preset
    >>> vals = arch_values(preset("llama2-7b"))
    >>> vals[h], vals[g], vals[f], vals[V]
    (4096, 32, 11008, 32000)
    """
    from . import model as models

    x = models.resolve(arch, seq_length=1) if arch.max_position_embeddings is None else models.resolve(arch)
    vals = {h: x.hidden_size, a: x.num_attention_heads, g: x.num_query_groups,
            d_h: x.kv_channels, f: x.ffn_hidden_size, L: x.num_layers,
            V: models.padded_vocab_size(x.vocab_size, t_, x.make_vocab_size_divisible_by)}
    if x.num_experts:
        vals.update({E: x.num_experts, k: x.moe_router_topk, f_e: x.moe_ffn_hidden_size,
                     f_sh: x.moe_shared_expert_intermediate_size or 0})
    return {key: sp.Integer(val) for key, val in vals.items()}


def _mla(x) -> dict | None:
    if not x.multi_latent_attention:
        return None
    return {name: getattr(x, name) for name in ("q_lora_rank", "kv_lora_rank", "qk_head_dim",
                                                 "qk_pos_emb_head_dim", "v_head_dim")}


# ---------------------------------------------------------------------------------------------
# validation (issue 3, part 8): one clear line per broken rule
# ---------------------------------------------------------------------------------------------

def microbatches(layout: Layout, training: Training):
    """The number of micro-batches m per step (None when neither m nor B is given).

    Megatron: ``B = m · b · d`` (the global batch is split over data-parallel ranks and
    micro-batches; CP ranks share a sequence).

    Examples
    --------
    >>> microbatches(Layout(d=2), Training(micro_batch_size=1, global_batch_size=32))
    16
    """
    m_, B_ = training.num_microbatches, training.global_batch_size
    bd = training.micro_batch_size * layout.d
    if B_ is not None:
        if B_ % bd:
            raise DivisibilityError(f"global batch size B={B_} must be a multiple of micro-batch "
                                    f"size x data-parallel size b*d={bd}")
        if m_ is not None and m_ != B_ // bd:
            raise InvalidValueError(f"num_microbatches {m_} contradicts B/(b*d) = {B_ // bd}")
        return B_ // bd
    return m_


def cp_sequence_ok(seq, c_):
    """Whether context parallelism ``c`` can split a sequence of ``seq`` tokens: c = 1, or 2c
    divides it (works on ints and numpy arrays).

    >>> cp_sequence_ok(4096, 2048), cp_sequence_ok(4096, 4096), cp_sequence_ok(6, 1)
    (True, False, True)
    """
    # REF: Megatron-LM get_batch_on_this_cp_rank: the sequence is cut into 2c chunks and rank
    # i keeps chunks i and 2c-1-i, so that causal attention work is balanced
    return (c_ == 1) | (seq % (2 * c_) == 0)


def validate(arch, layout: Layout, training: Training) -> None:
    """Refuse settings Megatron-LM would refuse, one line naming the rule.

    ``arch`` may be an Architecture, a preset name or a config.json path.

    Raises
    ------
    DivisibilityError
        t must divide the heads and KV heads, p the layers (unless uneven stages are given),
        e the experts, e·t_e must divide t·c·d, c the sequence length, v the layers of every
        pipeline stage (first and last included when uneven), B must be a multiple of b·d.
    InvalidValueError
        A bad value, an unknown recompute mode or schedule, MoE with t > 1 but no SP, a
        layout or training that is not a :class:`Layout` / :class:`Training`.

    Examples
    --------
    >>> validate("llama2-7b", Layout(p=4, v=2, first_stage_layers=5, last_stage_layers=9),
    ...          Training(seq_length=4096))
    Traceback (most recent call last):
    ...
    memsym.errors.DivisibilityError: virtual pipeline size v=2 must divide the layers of every pipeline stage (stage 0 has 5)
    """
    _check_types(layout, training)
    _validate(_resolve(arch, training), layout, training)


def _validate(arch, layout: Layout, training: Training):
    """:func:`validate` of a resolved architecture; returns the canonical recompute mode,
    schedule and micro-batch count m (or None), so callers need not recompute them."""
    from . import model as models

    for name in ("t", "p", "d", "c", "e"):
        val = getattr(layout, name)
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise InvalidValueError(f"layout {name} must be a whole number >= 1, got {val!r}")
    for name in ("seq_length", "micro_batch_size"):
        val = getattr(training, name)
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise InvalidValueError(f"{name} must be a whole number >= 1, got {val!r}")
    # optional knobs: None or a whole number >= 1 (v = 0 must not mean "not interleaved")
    for obj, name in ((layout, "v"), (layout, "t_e"), (training, "num_microbatches"),
                      (training, "global_batch_size")):
        val = getattr(obj, name)
        if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 1):
            raise InvalidValueError(f"{name} must be a whole number >= 1 or None, got {val!r}")
    # flags: a string such as "false" is truthy in Python, so only real booleans are accepted
    for obj, name in ((layout, "sequence_parallel"), (training, "flash_attention"),
                      (training, "dropout")):
        if not isinstance(getattr(obj, name), bool):
            raise InvalidValueError(f"{name} must be true or false, got {getattr(obj, name)!r:.40}")
    if training.offload != "none" and layout.p > 1:
        # REF: seed001 (MCore raises "no support for Pipeline parallelism with CPU offloading")
        raise InvalidValueError("CPU offload needs p = 1: Megatron-Core refuses pipeline "
                                "parallelism with CPU offloading")
    recompute = choose("recompute mode", training.recompute, RECOMPUTE)
    schedule = choose("pipeline schedule", training.schedule, SCHEDULES)
    models.check_layout(arch, layout.t, layout.p, layout.e, layout.t_e,
                        layout.first_stage_layers, layout.last_stage_layers)
    if arch.num_experts:
        te = layout.expert_tp
        if (layout.t * layout.c * layout.d) % (layout.e * te):
            raise DivisibilityError(f"expert-parallel x expert-tensor-parallel size e*t_e="
                                    f"{layout.e * te} must divide t*c*d={layout.t * layout.c * layout.d}")
        if layout.t > 1 and not layout.sequence_parallel:
            # REF: Megatron-LM arguments.py: "When using MoE and tensor parallelism, sequence
            # parallelism must be used."
            raise InvalidValueError("MoE with tensor parallelism needs sequence parallelism "
                                    "(Megatron-LM refuses t > 1 without --sequence-parallel)")
    if not cp_sequence_ok(training.seq_length, layout.c):
        raise DivisibilityError(f"context parallelism c={layout.c} needs 2c to divide the sequence "
                                f"length s={training.seq_length} (Megatron cuts it into 2c chunks)")
    if layout.v is not None and layout.v > 1:
        if layout.p == 1:
            raise InvalidValueError("virtual pipeline stages (v > 1) need p > 1")
        per = arch.num_layers // layout.p
        if layout.first_stage_layers is None and layout.last_stage_layers is None:
            if per % layout.v:
                # REF: seed001 (MCore: layers on each middle pipeline rank must be divisible by v)
                raise DivisibilityError(f"virtual pipeline size v={layout.v} must divide the "
                                        f"layers per pipeline stage ({per})")
        else:
            # REF: Megatron-Core TransformerConfig: "number of layers at first stage ... must
            # be divisible by virtual pipeline parallel degree" (likewise the last stage and
            # the middle ones): every model chunk holds a whole number of layers
            for i in range(layout.p):
                n_i = len(models.stage_layers(arch, layout.p, i, layout.first_stage_layers,
                                              layout.last_stage_layers))
                if n_i % layout.v:
                    raise DivisibilityError(
                        f"virtual pipeline size v={layout.v} must divide the layers of every "
                        f"pipeline stage (stage {i} has {n_i})")
    m_ = microbatches(layout, training)
    if schedule == "gpipe" and m_ is None:
        raise InvalidValueError("GPipe keeps all m micro-batches: give num_microbatches or "
                                "global_batch_size")
    return recompute, schedule, m_


# ---------------------------------------------------------------------------------------------
# one stage
# ---------------------------------------------------------------------------------------------
def _role(i: int, pp: int) -> str:
    if pp == 1:
        return "only"
    return "first" if i == 0 else "last" if i == pp - 1 else "middle"


def stage_activations(arch, layout: Layout = Layout(), training: Training = Training(),
                      stage: int = 0) -> Total:
    r"""Activations pipeline stage ``stage`` holds at its peak [bytes].

    .. math::

        M_{\mathrm{act}} = n_{\mathrm{mb}}(i)\,\frac{L_i}{v}\,A_{\mathrm{layer}}
            + [i = 0]\,n_{\mathrm{emb}}\,A_{\mathrm{emb}}
            + [i = p - 1]\,n_{\mathrm{logits}}\,(A_{\mathrm{out}} + n_{\mathrm{mtp}}(A_{\mathrm{layer}} + A_{\mathrm{out}}))
            + [\text{full}]\,A_{\mathrm{layer}}^{\mathrm{none}}

    with :math:`n_{\mathrm{mb}}(i)` from :func:`memsym.terms.schedule.stage_microbatches`
    (L_i/v layers per model chunk; an even split of a uniform model keeps the symbolic L/p),
    the embedding on the first stage, the output layer, logits and MTP layers on the last.
    Under full recompute the layer being recomputed briefly holds all its activations again
    (the ``recompute_working_set``, once per stage).

    Returns
    -------
    Total
        Terms ``layer_activations``, and where they apply ``embedding_activations``,
        ``output_activations``, ``mtp_activations``, ``recompute_working_set``.

    Examples
    --------
    Seed 002's 7B-class stack without recompute, one micro-batch, no pipeline: L layers of
    Eq. 1 plus the embedding and the output layer:

    >>> from memsym.model import Architecture
    >>> gpt = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...                    vocab_size=32000, position_embedding_type="rope")
    >>> A = stage_activations(gpt, Layout(), Training(seq_length=4096))
    >>> A.keys
    ('layer_activations', 'embedding_activations', 'output_activations')
    """
    _check_types(layout, training)
    return _stage_activations(_resolve(arch, training), layout, training, stage)


def _stage_activations(x, layout: Layout, training: Training, stage: int,
                       m_known: bool | None = None) -> Total:
    """:func:`stage_activations` of a resolved architecture (``m_known``: whether m is known,
    None = work it out)."""
    from . import model as models

    pp = layout.p
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < pp:
        raise InvalidValueError(f"stage must be a whole number in 0..{pp - 1}, got {stage!r}")
    recompute = choose("recompute mode", training.recompute, RECOMPUTE)
    schedule = choose("pipeline schedule", training.schedule, SCHEDULES)
    sp_on = bool(layout.sequence_parallel and layout.t > 1)   # Megatron turns SP off at t = 1
    interleaved = layout.v is not None and layout.v > 1
    if m_known is None:
        m_known = microbatches(layout, training) is not None
    vv = v if interleaved else None
    mm = m if m_known else None
    common = dict(gated=x.swiglu, flash=training.flash_attention, sequence_parallel=sp_on,
                  dropout=training.dropout, norm=x.normalization.lower(), mla=_mla(x))
    shared = bool(x.moe_shared_expert_intermediate_size)

    def per_layer(moe: bool, mode: str = recompute) -> sp.Expr:
        return layer_activations(recompute=mode, moe=moe, shared_expert=shared and moe, **common).expr

    pattern = models.moe_layer_pattern(x)
    rng = models.stage_layers(x, pp, stage, layout.first_stage_layers, layout.last_stage_layers)
    kinds = [pattern[i] for i in rng]
    n_moe = sum(kinds)
    uniform = (layout.first_stage_layers is None and layout.last_stage_layers is None
               and len(set(pattern)) == 1)
    where = "first" if stage == 0 else "last" if stage == pp - 1 else stage
    chunks = stage_microbatches(where, schedule, pp=p, vv=vv, mm=mm)
    if uniform:
        per_chunk = L / p if vv is None else L / (p * v)
        stack = per_chunk * per_layer(pattern[0])
    else:
        vdiv = 1 if vv is None else vv
        stack = (sp.Integer(len(kinds) - n_moe) * per_layer(False) if len(kinds) > n_moe else 0) \
            + (sp.Integer(n_moe) * per_layer(True) if n_moe else 0)
        stack = stack / vdiv
    derived = Source("memsym-derivation", "memsym/training.py, stage_activations")
    terms = [Term("layer_activations", chunks * stack,
                  f"{len(kinds)} decoder layers x in-flight micro-batches ({schedule}"
                  + (", interleaved" if interleaved else "") + f", recompute {recompute})",
                  Source("korthikanti", "§4.2.3, Eq. 5 (first stage holds L layers' worth)"),
                  label="layers")]
    if stage == 0:
        n_emb = embedding_microbatches(schedule, pp=p, vv=vv, mm=mm)
        terms.append(Term("embedding_activations",
                          n_emb * embedding_activations(sequence_parallel=sp_on,
                                                        dropout=training.dropout).expr,
                          "input ids and embedding dropout of the in-flight micro-batches",
                          Source("korthikanti", "§4.3 (embedding dropout sbhp/t); Megatron-LM 8sbp"),
                          label="embedding"))
    if stage == pp - 1:
        n_out = logits_microbatches(schedule, mm=mm)
        out = output_activations(sequence_parallel=sp_on, norm=x.normalization.lower()).expr
        terms.append(Term("output_activations", n_out * out,
                          "final norm, output-layer input and fp32 logits for the loss",
                          Source("korthikanti", "§4.3 (2sbh/t, 2sbh/t, 4sbv/t)"), label="output layer"))
        if x.mtp_num_layers:
            last_kind = pattern[-1]
            terms.append(Term("mtp_activations",
                              n_out * x.mtp_num_layers * (per_layer(last_kind) + out),
                              "multi-token-prediction layers: one layer and one more logits each",
                              derived, label="MTP"))
    if recompute == "full" and kinds:
        terms.append(Term("recompute_working_set", per_layer(any(kinds), "none"),
                          "one layer's activations rematerialised during its backward",
                          derived, label="recompute working set"))
    return Total(f"activations of pipeline stage {stage} ({_role(stage, pp)})", tuple(terms))


def stage_total(arch, layout: Layout = Layout(), training: Training = Training(),
                stage: int = 0) -> Total:
    r"""Per-GPU training memory of pipeline stage ``stage`` [bytes], symbolic in the registry.

    .. math::

        M = M_{\mathrm{states}}(N_{\mathrm{stage}}) + M_{\mathrm{act}}
            + M_{\mathrm{ws}} + M_{\mathrm{nccl}}
            + \varphi_{\mathrm{frag}}\,(M_{\mathrm{states}} + M_{\mathrm{act}})

    Model states use the exact parameters on one GPU of the stage
    (:func:`memsym.model.stage_parameters`): the dense part sharded over the data-parallel
    group including context parallelism (d·c, as Megatron-Core's distributed optimizer does),
    routed experts over the expert data-parallel group t·c·d/(e·t_e), with keys
    ``expert_weights``, ``expert_gradients``, ``expert_optimizer``.

    Examples
    --------
    >>> stage_total("llama2-7b", Layout(), Training(seq_length=4096)).keys[:3]
    ('weights', 'gradients', 'optimizer')
    """
    _check_types(layout, training)
    return _stage_total(_resolve(arch, training), layout, training, stage)


def _stage_total(x, layout: Layout, training: Training, stage: int,
                 m_known: bool | None = None) -> Total:
    """:func:`stage_total` of a resolved architecture."""
    from . import model as models

    sp_ = models.stage_parameters(
        x, layout.t, layout.p, stage, e=layout.e, t_e=layout.t_e,
        first_stage_layers=layout.first_stage_layers, last_stage_layers=layout.last_stage_layers)
    conv = choose("convention", training.convention, CONVENTIONS)
    widths = byte_widths(training.sharding, training.precision, training.optimizer, conv)
    # t, e and t_e stay symbols (tp/t + replicated, experts/(e t_e)): equal to the stage's
    # exact per-GPU counts at the layout's values, and differentiable in t for sensitivities
    # (the stage's layer split, hence p, enters through the counts themselves)
    states = model_state(training.sharding, convention=conv, offload=training.offload,
                         params=sp.Integer(sp_.tp) / t + sp_.replicated, dp=d * c).subs(widths)
    terms = list(states.terms)
    if sp_.experts:
        edp = d * c * t / (e * t_e)
        ex = model_state(training.sharding, convention=conv, offload=training.offload,
                         params=sp.Integer(sp_.experts) / (e * t_e), dp=edp).subs(widths)
        terms += [replace(term, key="expert_" + term.key, label="expert " + term.label,
                          description="routed experts: " + term.description) for term in ex]
    act = _stage_activations(x, layout, training, stage, m_known)
    terms += list(act.terms)
    allocated = sp.Add(*(term.expr for term in terms))
    terms += list(allowance_terms(allocated))
    return Total(f"training memory per GPU, pipeline stage {stage} ({_role(stage, layout.p)})",
                 tuple(terms))


def training_values(arch, layout: Layout = Layout(), training: Training = Training(),
                    allowances: Mapping | None = None) -> dict:
    """Symbol -> exact value for every symbol a :func:`stage_total` can contain.

    Examples
    --------
    >>> vals = training_values("llama2-7b", Layout(t=2, d=4), Training(seq_length=4096,
    ...                                                              global_batch_size=32))
    >>> vals[t], vals[d], vals[m], vals[L]
    (2, 4, 8, 32)
    """
    _check_types(layout, training)
    return _training_values(_resolve(arch, training), layout, training, allowances)


_UNSET = object()


def _training_values(x, layout: Layout, training: Training, allowances: Mapping | None = None,
                     m_=_UNSET) -> dict:
    """:func:`training_values` of a resolved architecture (``m_`` if already worked out)."""
    vals = arch_values(x, layout.t)     # already exact Integers
    vals.update({key: sp.Integer(val) for key, val in (
        (s, training.seq_length), (b, training.micro_batch_size), (t, layout.t), (p, layout.p),
        (d, layout.d), (c, layout.c), (e, layout.e), (t_e, layout.expert_tp))})
    vals[c_f] = exact(training.capacity_factor, "capacity_factor")
    if vals[c_f] <= 0:
        raise InvalidValueError(f"capacity_factor must be > 0, got {training.capacity_factor}")
    if m_ is _UNSET:
        m_ = microbatches(layout, training)
    if m_ is not None:
        vals[m] = sp.Integer(m_)
    if layout.v is not None and layout.v > 1:
        vals[v] = sp.Integer(layout.v)
    vals.update(allowance_values(allowances))
    return vals


_STATE_KEYS = ("weights", "gradients", "optimizer", "expert_weights", "expert_gradients",
               "expert_optimizer")
_ACT_KEYS = ("layer_activations", "embedding_activations", "output_activations",
             "mtp_activations", "recompute_working_set")


@dataclass(frozen=True)
class TrainingEstimate:
    """The per-GPU training memory on the most-loaded GPU, and how it was found.

    Attributes
    ----------
    total : Total
        The most-loaded stage's total, symbolic (registry symbols).
    values : dict
        Symbol -> exact value used to evaluate it.
    stage : int
        The most-loaded pipeline stage (0 = first).
    role : str
        ``"only"`` (p = 1), ``"first"``, ``"last"`` or ``"middle"``.
    stage_bytes : tuple
        Exact total [bytes] of every stage, so the comparison can be checked.
    notes : tuple of str
        Adjustments made, e.g. sequence parallelism switched off at t = 1.
    """

    total: Total
    values: dict
    stage: int
    role: str
    stage_bytes: tuple
    notes: tuple = ()

    @cached_property
    def _breakdown(self) -> dict:
        # evaluated once: bytes_total, grouped() and activations() all read it
        return self.total.breakdown(self.values)

    def breakdown(self) -> dict:
        """Exact bytes per term and ``total``."""
        return dict(self._breakdown)

    @property
    def bytes_total(self) -> sp.Expr:
        return self._breakdown["total"]

    def grouped(self) -> dict:
        """Exact bytes grouped as the command line reports them: model-state keys,
        ``activations`` (all activation terms), ``workspace``, ``nccl``, ``fragmentation``
        and ``total`` (their sum)."""
        bd = self._breakdown
        out = {key: bd[key] for key in _STATE_KEYS if key in bd}
        out["activations"] = sp.Add(*(bd[key] for key in _ACT_KEYS if key in bd))
        for key in ALLOWANCES:
            out[key] = bd[key]
        out["total"] = bd["total"]
        return out

    def activations(self) -> dict:
        """Exact bytes of each activation term."""
        bd = self._breakdown
        return {key: bd[key] for key in _ACT_KEYS if key in bd}


def training_memory(arch, layout: Layout | None = None, training: Training | None = None, *,
                    allowances: Mapping | None = None, stage: int | None = None) -> TrainingEstimate:
    r"""Per-GPU training memory on the most-loaded GPU [bytes].

    Every pipeline stage is evaluated (model states of its exact parameters, its in-flight
    activations, the embedding on the first and the output layer and logits on the last,
    the allowances) and the largest is returned: the first stage is *not* assumed.

    .. math:: M_{\max} = \max_{i} M_i,\qquad M_i = M_{\mathrm{states},i} + M_{\mathrm{act},i}
        + M_{\mathrm{ws}} + M_{\mathrm{nccl}} + \varphi_{\mathrm{frag}}(M_{\mathrm{states},i} + M_{\mathrm{act},i})

    Parameters
    ----------
    arch : Architecture, str or path
        An architecture, preset name or config.json path (str or :class:`pathlib.Path`).
    layout : Layout
    training : Training
    allowances : mapping, optional
        Overrides of the allowance defaults (see :data:`ALLOWANCES`), e.g. ``{"workspace": 0}``.
    stage : int, optional
        Evaluate this stage instead of searching for the most loaded.

    Examples
    --------
    >>> from memsym.model import preset
    >>> est = training_memory("llama2-7b", Layout(t=1, p=4, d=2),
    ...                       Training(seq_length=4096, micro_batch_size=1, recompute="selective",
    ...                                flash_attention=True, dropout=False, global_batch_size=64))
    >>> est.stage, est.role
    (0, 'first')
    """
    layout = Layout() if layout is None else layout
    training = Training() if training is None else training
    _check_types(layout, training)
    x = _resolve(arch, training)        # once: the private helpers take the resolved arch
    _, _, m_ = _validate(x, layout, training)
    notes = []
    if layout.sequence_parallel and layout.t == 1:
        notes.append("sequence parallelism is off at t = 1 (as Megatron-LM turns it off)")
    vals = _training_values(x, layout, training, allowances, m_)
    stages = range(layout.p) if stage is None else [stage]
    results = {}
    for i in stages:
        tot = _stage_total(x, layout, training, i, m_ is not None)
        results[i] = (tot, tot.evaluate(vals))
    best = max(results, key=lambda i: (results[i][1], -i))
    return TrainingEstimate(results[best][0], vals, best, _role(best, layout.p),
                            tuple(results[i][1] for i in sorted(results)), tuple(notes))
