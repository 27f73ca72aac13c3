"""The per-GPU training-memory total on the most-loaded GPU.

Model states (:func:`memsym.terms.model_state.model_state` with the exact parameter count of
the stage) + activations (:mod:`memsym.terms.activations` and :mod:`memsym.terms.schedule`)
+ named allowances (workspace, NCCL buffers, allocator fragmentation), each a registered
symbol with a documented default that a user can set to 0 or to a measured value.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Mapping

import sympy as sp

from .errors import InvalidValueError, UnknownNameError, choose
from .symbols import (E, L, M_nccl, M_ws, V, a, b, c, c_f, d, d_h, e, f, f_e, f_sh, g, h, k, m, p,
                      phi_frag, s, t, t_e, v)
from .term import Source, Term, Total
from .terms.activations import (RECOMPUTE, embedding_activations, layer_activations,
                                output_activations)
from .terms.model_state import CONVENTIONS, byte_widths, model_state
from .terms.schedule import (SCHEDULES, embedding_microbatches, logits_microbatches,
                             stage_microbatches)
from .values import exact
from .job import Job, Layout, Training, _check_fields, microbatches, validate as _validate_job

__all__ = ["Layout", "Training", "Allowance", "ALLOWANCES", "TrainingEstimate", "allowance_values",
           "allowance_terms", "arch_values", "microbatches", "validate", "job_memory", "stage_activations",
           "stage_total", "training_values", "training_memory", "RECOMPUTE", "SCHEDULES"]

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
    _check_fields(layout, training)
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
    _check_fields(layout, training)
    return _stage_total(_resolve(arch, training), layout, training, stage)


def stage_counts(x, layout: Layout, training: Training, stage: int) -> dict:
    """The parameter counts of one pipeline stage, as values of the total's count symbols.

    Full training: ``N_tp`` (the stage's tensor-split parameters, all t ranks together),
    ``N_rep`` (replicated on every TP rank) and ``N_exp`` (routed experts, all e t_e ranks
    together), so one GPU holds ``N_tp/t + N_rep`` dense and ``N_exp/(e t_e)`` expert
    parameters (:func:`memsym.model.stage_parameters`, exact, vocabulary padded at t).
    LoRA/QLoRA: ``N_q`` (frozen linear weights per GPU), ``N_u`` (frozen, unquantized) and
    ``N_a`` (adapters) per GPU.

    Examples
    --------
    >>> from memsym.model import preset
    >>> from memsym.symbols import N_tp, N_rep
    >>> c = stage_counts(preset("llama2-7b"), Layout(t=2), Training(), 0)
    >>> c[N_tp] + c[N_rep] == 6738415616     # Llama-2 7B (vocabulary 32000 is already padded)
    True
    """
    from . import model as models
    from .symbols import N_a, N_exp, N_lin, N_q, N_rep, N_tp, N_u

    sp_ = models.stage_parameters(
        x, layout.t, layout.p, stage, e=layout.e, t_e=layout.t_e,
        first_stage_layers=layout.first_stage_layers, last_stage_layers=layout.last_stage_layers)
    pattern = models.moe_layer_pattern(x)
    # the decoder layers' tensor-split weights (the GEMMs FP8 and LoRA act on), per GPU
    # one layer_parameters call per layer kind (dense, MoE), not per layer: memsym.search
    # asks for hundreds of stages
    per_kind = {kind: models.layer_parameters(x, kind)["tp"]
                for kind in {pattern[i] for i in sp_.layers}}
    lin = sum(per_kind[pattern[i]] for i in sp_.layers)
    if training.finetune == "full":
        return {N_tp: sp.Integer(sp_.tp), N_rep: sp.Integer(sp_.replicated),
                N_exp: sp.Integer(sp_.experts), N_lin: sp.Rational(lin, layout.t)}
    from .terms.adapters import LORA_TARGETS, lora_parameter_count

    quant = sp.Rational(lin, layout.t) + sp_.experts_per_gpu
    targets = LORA_TARGETS if training.lora_targets == "all" else training.lora_targets
    adapters = sp.Rational(lora_parameter_count(x, training.lora_rank, targets) * len(sp_.layers),
                           x.num_layers * layout.t)
    return {N_q: quant, N_u: sp_.per_gpu - quant, N_a: adapters}


def _stage_has_experts(x, layout: Layout, stage: int) -> bool:
    from . import model as models

    if not x.num_experts:
        return False
    pattern = models.moe_layer_pattern(x)
    return any(pattern[i] for i in models.stage_layers(
        x, layout.p, stage, layout.first_stage_layers, layout.last_stage_layers))


def _model_states(x, layout: Layout, training: Training, stage: int) -> list:
    """The model-state Terms of one stage, in the count symbols of :func:`stage_counts`."""
    return list(_state_terms(_stage_has_experts(x, layout, stage), _state_training(training)))


def _state_training(training: Training) -> Training:
    """The fields of ``training`` that model states depend on (the cache key)."""
    keep = ("finetune", "sharding", "convention", "precision", "optimizer", "offload",
            "quantization", "grad_dtype", "precision_aware", "fp8_param_gather")
    return Training(**{name: getattr(training, name) for name in keep})


@functools.lru_cache(maxsize=1024)
def _state_terms(experts: bool, training: Training) -> tuple:
    # cached: the search builds one stage total per discrete choice and pipeline template,
    # and the model states depend only on these fields
    from .symbols import N_a, N_exp, N_lin, N_q, N_rep, N_tp, N_u, b_g, b_m, b_o

    if training.finetune != "full":
        from .terms.adapters import lora
        from .terms.model_state import OPTIMIZERS

        # adapters train in fp32 with the optimizer's moments (PEFT); ZeRO-3/FSDP shards the
        # frozen base over data parallel, every other scheme keeps it whole on each GPU
        widths = {b_g: 4, b_m: 0, b_o: OPTIMIZERS[training.optimizer]}
        quant = training.quantization or ("nf4-dq" if training.finetune == "qlora" else "bf16")
        tot = lora(quant, "fp32", params=N_q, adapters=N_a, unquantized=N_u,
                   sharded=training.sharding in ("zero3", "fsdp")).subs(widths)
        return tuple(tot.terms)
    conv = choose("convention", training.convention, CONVENTIONS)
    framework = dict(grad_dtype=training.grad_dtype, precision_aware=training.precision_aware,
                     fp8_param_gather=training.fp8_param_gather)
    widths = byte_widths(training.sharding, training.precision, training.optimizer, conv,
                         **framework)
    fp8 = dict(precision=training.precision, optimizer=training.optimizer, **framework)
    # t, e and t_e stay symbols (N_tp/t + N_rep, N_exp/(e t_e)): equal to the stage's exact
    # per-GPU counts at the layout's values, and differentiable in t for sensitivities.
    # FP8 caches cover the linear-layer weights only (N_lin of the stage's dense part).
    states = model_state(training.sharding, convention=conv, offload=training.offload,
                         params=N_tp / t + N_rep, dp=d * c,
                         linear_params=N_lin if training.precision == "fp8" else None,
                         **fp8).subs(widths)
    terms = list(states.terms)
    if experts:
        edp = d * c * t / (e * t_e)
        ex = model_state(training.sharding, convention=conv, offload=training.offload,
                         params=N_exp / (e * t_e), dp=edp, **fp8).subs(widths)
        terms += [replace(term, key="expert_" + term.key, label="expert " + term.label,
                          description="routed experts: " + term.description) for term in ex]
    return tuple(terms)


def _stage_total(x, layout: Layout, training: Training, stage: int,
                 m_known: bool | None = None) -> Total:
    """:func:`stage_total` of a resolved architecture: the one composition of the per-GPU
    total (model states + activations + allowances), in the count symbols of
    :func:`stage_counts`; ``memsym.search`` compiles this same total over its grid."""
    terms = _model_states(x, layout, training, stage)
    act = _stage_activations(x, layout, training, stage, m_known)
    terms += list(act.terms)
    allocated = sp.Add(*(term.expr for term in terms))
    terms += list(allowance_terms(allocated))
    return Total(f"training memory per GPU, pipeline stage {stage} ({_role(stage, layout.p)})",
                 tuple(terms))


def training_values(arch, layout: Layout = Layout(), training: Training = Training(),
                    allowances: Mapping | None = None, stage: int = 0) -> dict:
    """Symbol -> exact value for every symbol a :func:`stage_total` can contain.

    Examples
    --------
    >>> vals = training_values("llama2-7b", Layout(t=2, d=4), Training(seq_length=4096,
    ...                                                              global_batch_size=32))
    >>> vals[t], vals[d], vals[m], vals[L]
    (2, 4, 8, 32)
    """
    _check_fields(layout, training)
    x = _resolve(arch, training)
    return {**_training_values(x, layout, training, allowances),
            **stage_counts(x, layout, training, stage)}


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


_STATE_KEYS = ("weights", "weights_unquantized", "adapter_weights", "gradients",
               "main_gradients", "optimizer", "fp8_weights", "expert_weights", "expert_gradients",
               "expert_main_gradients", "expert_optimizer", "expert_fp8_weights")
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
    arch : Job, Architecture, str or path
        A :class:`~memsym.job.Job` (then ``layout``, ``training`` and ``allowances`` come from
        it), or an architecture, preset name or config.json path (str or :class:`pathlib.Path`).
    layout : Layout
    training : Training
    allowances : mapping, optional
        Overrides of the allowance defaults (see :data:`ALLOWANCES`), e.g. ``{"workspace": 0}``.
    stage : int, optional
        Evaluate this stage instead of searching for the most loaded.

    Examples
    --------
    >>> est = training_memory("llama2-7b", Layout(t=1, p=4, d=2),
    ...                       Training(seq_length=4096, micro_batch_size=1, recompute="selective",
    ...                                flash_attention=True, dropout=False, global_batch_size=64))
    >>> est.stage, est.role
    (0, 'first')
    """
    if isinstance(arch, Job):
        if layout is not None or training is not None:
            raise InvalidValueError("a Job carries its layout and training: pass the Job alone "
                                    "(job.replace(...) changes it)")
        return job_memory(arch, stage=stage, allowances=allowances)
    from .job import job as make_job

    return job_memory(make_job(arch, layout=layout, training=training, allowances=allowances),
                      stage=stage)


def job_memory(j: Job, *, stage: int | None = None, allowances: Mapping | None = None) -> TrainingEstimate:
    """:func:`training_memory` of a validated :class:`~memsym.job.Job`."""
    x, layout, training = j.model, j.layout, j.training
    alw = dict(j.allowances)
    alw.update(allowances or {})
    vals = _training_values(x, layout, training, alw, j.m)
    stages = range(layout.p) if stage is None else [stage]
    results = {}
    for i in stages:
        tot = _stage_total(x, layout, training, i, j.m is not None)
        vals_i = {**vals, **stage_counts(x, layout, training, i)}
        results[i] = (tot, tot.evaluate(vals_i), vals_i)
    best = max(results, key=lambda i: (results[i][1], -i))
    return TrainingEstimate(results[best][0], results[best][2], best, _role(best, layout.p),
                            tuple(results[i][1] for i in sorted(results)), j.notes)


def validate(arch, layout: Layout, training: Training) -> None:
    """Refuse settings the framework would refuse, one line naming the rule
    (:mod:`memsym.rules`); ``arch`` may be an Architecture, a preset name or a config.json path.

    Examples
    --------
    >>> validate("llama2-70b", Layout(t=16), Training(seq_length=4096))
    Traceback (most recent call last):
    ...
    memsym.errors.DivisibilityError: tensor-parallel size t=16 must divide the KV heads (num_query_groups=8)
    """
    _check_fields(layout, training)
    _validate_job(_resolve(arch, training), layout, training)
