"""Compatibility conventions: NVIDIA's own memory estimators, reproduced exactly as cited terms.

``megatron-lm`` reproduces Megatron-LM core 0.19 ``megatron/training/theoretical_memory_usage.py``
and ``megatron-bridge`` reproduces Megatron-Bridge 0.6 ``estimate_training_memory``, quirks
included: each framework counts parameters its own way (norms, routers, MLA, MTP, vocabulary
padding), shards them its own way, and has its own activation formula.  The results are exact
SymPy numbers (the frameworks compute the same quantities in floating point).  Where memsym's
own model differs, and why, is tabulated in ``docs/conventions.md``.

The formulas are transcribed in ``shared/guide/MEGATRON-ESTIMATORS.md`` (§2 Megatron-LM, §3
Megatron-Bridge) and were checked against the published source.

References
----------
.. [megatron-lm] NVIDIA, Megatron-LM core 0.19, ``megatron/training/theoretical_memory_usage.py``.
.. [megatron-bridge] NVIDIA, Megatron-Bridge 0.6,
   ``src/megatron/bridge/training/utils/theoretical_memory_utils.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import sympy as sp

from .errors import DivisibilityError, InvalidValueError, UnknownNameError, choose
from .symbols import L, V, b, c, d, e, f, f_e, f_sh, h, k, m, p, s, t, t_e, v
from .term import Source, Term, Total
from .terms.activations import RECOMPUTE
from .terms.model_state import normalize_scheme
from .values import as_expr, exact

__all__ = [
    "CONVENTION_NAMES",
    "ConventionResult",
    "convention_breakdown",
    "megatron_lm",
    "megatron_bridge",
    "megatron_bytes_per_parameter",
    "bridge_bytes_per_parameter",
    "pipeline_factor",
    "megatron_lm_activation",
    "megatron_bridge_activation",
    "padded_vocab",
]

#: The framework conventions this module reproduces.
CONVENTION_NAMES = ("megatron-lm", "megatron-bridge")

_LM_WO = Source("megatron-lm", "theoretical_memory_usage.py, compute_weight_and_optimizer_memory")
_LM_A = Source("megatron-lm", "theoretical_memory_usage.py, compute_activation_memory "
                              "(Korthikanti et al. 2022 Table 2, TP + SP + selective)")
_LM_B = Source("megatron-lm", "theoretical_memory_usage.py, compute_activation_memory_without_sp")
_BR_WO = Source("megatron-bridge", "theoretical_memory_utils.py, estimate_training_memory "
                                   "(model_state_components)")
_BR_A = Source("megatron-bridge", "theoretical_memory_utils.py, _compute_activation_memory_bytes")

_R = sp.Rational


# ------------------------------------------------------------------------------------------------
# Formula-level functions (registry symbols; these are what formulas/conventions.toml checks)
# ------------------------------------------------------------------------------------------------
def megatron_bytes_per_parameter(distributed_optimizer: bool = True, shard=None) -> sp.Expr:
    r"""Megatron-LM's bytes per parameter: 18, or :math:`6 + 12/n` with the distributed optimizer.

    .. math::

        \beta(n) = \begin{cases} 18 & \text{without the distributed optimizer}\\
                                 6 + 12/n & \text{with it} \end{cases}

    18 = 2 (bf16 weight) + 4 (fp32 gradient) + 4 (fp32 main weight) + 8 (Adam moments); the
    distributed optimizer shards only the 12 bytes of main weight and moments over the
    data-parallel group of size ``n`` (the fp32 gradient buffer stays whole, issue #654).

    Parameters
    ----------
    distributed_optimizer : bool
        ``--use-distributed-optimizer``.
    shard : sympy.Expr, optional
        The group the optimizer is sharded over [GPUs]; default ``d``.

    Returns
    -------
    sympy.Expr
        Bytes per parameter [bytes/parameter].

    Examples
    --------
    >>> megatron_bytes_per_parameter()
    6 + 12/d
    >>> megatron_bytes_per_parameter(False)
    18

    References
    ----------
    Megatron-LM ``theoretical_memory_usage.py`` (``num_bytes_per_parameter``);
    ``docs/user-guide/features/dist_optimizer.md``.
    """
    # REF: megatron-lm, compute_weight_and_optimizer_memory, num_bytes_per_parameter
    if not distributed_optimizer:
        return sp.Integer(18)
    n = d if shard is None else as_expr(shard)
    return 6 + 12 / n


def bridge_bytes_per_parameter(distributed_optimizer: bool = True, shard=None) -> sp.Expr:
    r"""Megatron-Bridge's bytes per parameter: 18, or :math:`6 + 12/\max(1, n)`.

    The dense optimizer is sharded over DP x CP (``n = d c``), unlike Megatron-LM's ``d``.

    .. math::

        \beta_{\mathrm{Bridge}}(n) = 6 + \frac{12}{\max(1, n)}, \qquad n = d\,c

    Parameters
    ----------
    distributed_optimizer : bool
        ``config.optimizer.use_distributed_optimizer``.
    shard : sympy.Expr, optional
        The optimizer group [GPUs]; default ``d c`` (for which the max is a no-op).

    Returns
    -------
    sympy.Expr
        Bytes per parameter [bytes/parameter].

    Examples
    --------
    >>> bridge_bytes_per_parameter()
    6 + 12/(c*d)

    References
    ----------
    Megatron-Bridge ``theoretical_memory_utils.py``, ``_bytes_per_parameter``.
    """
    if not distributed_optimizer:
        return sp.Integer(18)
    if shard is None:
        return 6 + 12 / (d * c)  # max(1, d c) = d c: both are positive integers
    return 6 + 12 / sp.Max(1, as_expr(shard))


def pipeline_factor(schedule: str = "none") -> sp.Expr:
    r"""The pipeline factor :math:`\phi` both frameworks apply to the stage-0 activations.

    .. math::

        \phi = \begin{cases} 1 + \dfrac{p - 1}{p\,v} & \text{interleaved (VPP)}\\
                             \min(1, m/p) & \text{p > 1 and the number of microbatches given}\\
                             1 & \text{otherwise} \end{cases}

    Parameters
    ----------
    schedule : {"none", "interleaved", "microbatches"}
        Which branch the framework takes.

    Returns
    -------
    sympy.Expr
        The factor [1].

    Examples
    --------
    >>> pipeline_factor("interleaved")
    1 + (p - 1)/(p*v)
    >>> pipeline_factor("microbatches")
    Min(1, m/p)

    References
    ----------
    Megatron-LM ``compute_activation_memory`` ("interleaved_schedule_memory_penalty").
    """
    schedule = choose("pipeline schedule", schedule, ("none", "interleaved", "microbatches"))
    if schedule == "interleaved":
        return 1 + (p - 1) / (p * v)
    if schedule == "microbatches":
        return sp.Min(1, m / p)
    return sp.Integer(1)


def megatron_lm_activation(path: str = "A", schedule: str = "none",
                           output_layer: bool = True) -> sp.Expr:
    r"""Megatron-LM's activation bytes on pipeline stage 0 (its two paths).

    Path A (sequence parallel + selective recompute, Korthikanti Table 2 with the MLP widened
    to ``f``), path B (``compute_activation_memory_without_sp``, 5 % buffer included):

    .. math::

        A = \frac{1}{t}\Big\{\phi\,[\,s b h (18 + 4f/h) L + 8 s b p + s b h p\,]
            + [p=1]\, 4 s b h (1 + V/h)\Big\}

        B = \tfrac{21}{20}\Big\{\phi\,[\,s b h (10 + 24/t) L + 8 s b p + s b h p\,]
            + [p=1]\, 2 (s b V/t + s b h)\Big\}

    Parameters
    ----------
    path : {"A", "B"}
        A = ``compute_activation_memory``, B = ``compute_activation_memory_without_sp``.
    schedule : str
        The branch of :func:`pipeline_factor`.
    output_layer : bool
        Include the output-layer term (the source adds it only when ``p = 1``).

    Returns
    -------
    sympy.Expr
        Activation memory [bytes].

    Examples
    --------
    >>> megatron_lm_activation("A", output_layer=False).subs({f: 4 * h, p: 1})
    (34*L*b*h*s + b*h*s + 8*b*s)/t

    References
    ----------
    Megatron-LM ``theoretical_memory_usage.py``; Korthikanti et al. (2022), Table 2.
    """
    phi = pipeline_factor(schedule)
    if path == "A":
        stage = s * b * h * (18 + 4 * f / h) * L + 8 * s * b * p + s * b * h * p
        out = 4 * s * b * h * (1 + V / h) if output_layer else 0
        return (phi * stage + out) / t
    if path == "B":
        stage = s * b * h * (10 + 24 / t) * L + 8 * s * b * p + s * b * h * p
        out = 2 * (s * b * V / t + s * b * h) if output_layer else 0
        # REF: megatron-lm, compute_activation_memory_without_sp, "overhead_factor = 1.05"
        return _R(105, 100) * (phi * stage + out)
    raise UnknownNameError("Megatron-LM activation path", path, ("A", "B"))


def megatron_bridge_activation(schedule: str = "none", output_layer: bool = True,
                               moe: bool = False, ratio=None, layers=None) -> sp.Expr:
    r"""Megatron-Bridge's activation bytes (one formula whatever the recompute and SP settings).

    .. math::

        A = \frac{\phi\,[\,s b h (18 + 4 r) L_{\mathrm{tot}} + 8 s b p + s b h p\,]
                  + [p=1]\, 4 s b h (1 + V/h)}{t\,c},
        \qquad r = \frac{L_d f + L_m (k f_e + f_{sh})}{L_{\mathrm{tot}}\,h}

    Parameters
    ----------
    schedule : str
        The branch of :func:`pipeline_factor`.
    output_layer : bool
        Include the output-layer term (``p = 1`` only in the source).
    moe : bool
        Every layer is an MoE layer (``r = (k f_e + f_sh)/h``); default all dense (``r = f/h``).
    ratio, layers : sympy.Expr, optional
        Explicit ``r`` and :math:`L_{\mathrm{tot}}` (mixed dense/MoE models, MTP layers).

    Returns
    -------
    sympy.Expr
        Activation memory [bytes].

    Examples
    --------
    >>> megatron_bridge_activation(output_layer=False).subs({f: 4 * h, p: 1})
    (34*L*b*h*s + b*h*s + 8*b*s)/(c*t)

    References
    ----------
    Megatron-Bridge ``theoretical_memory_utils.py``, ``_compute_activation_memory_bytes`` and
    ``_ffn_activation_ratio``.
    """
    phi = pipeline_factor(schedule)
    r = ratio if ratio is not None else ((k * f_e + f_sh) / h if moe else f / h)
    n_layers = L if layers is None else layers
    stage = s * b * h * (18 + 4 * r) * n_layers + 8 * s * b * p + s * b * h * p
    out = 4 * s * b * h * (1 + V / h) if output_layer else 0
    return (phi * stage + out) / (t * c)


def padded_vocab(vocab_size: int, divisible_by: int = 128, tp=t) -> sp.Expr:
    r"""Megatron's padded vocabulary :math:`\lceil V/(128 t)\rceil \cdot 128 t`.

    Examples
    --------
    >>> padded_vocab(128256, tp=4), padded_vocab(50257, tp=8)
    (128512, 51200)
    """
    mult = divisible_by * tp
    return sp.ceiling(sp.Integer(vocab_size) / mult) * mult


# ------------------------------------------------------------------------------------------------
# Reading the architecture, the layout and the training knobs
# ------------------------------------------------------------------------------------------------
_ALIASES = {
    "t": ("t", "tensor_model_parallel_size", "tp"),
    "p": ("p", "pipeline_model_parallel_size", "pp"),
    "d": ("d", "data_parallel_size", "dp"),
    "c": ("c", "context_parallel_size", "cp"),
    "e": ("e", "expert_model_parallel_size", "ep"),
    "t_e": ("t_e", "expert_tensor_parallel_size", "etp"),
    "v": ("v", "virtual_pipeline_model_parallel_size", "vpp"),
    "s": ("s", "seq_length", "seq"),
    "b": ("b", "micro_batch_size"),
    "m": ("m", "num_microbatches"),
    "B": ("B", "global_batch_size"),
    "sequence_parallel": ("sequence_parallel",),
    "recompute": ("recompute", "recompute_granularity"),
    "sharding": ("sharding",),
    "distributed_optimizer": ("distributed_optimizer", "use_distributed_optimizer"),
    "precision": ("precision",),
    "optimizer": ("optimizer",),
    "should_pad_vocab": ("should_pad_vocab",),
    "first_stage_layers": ("first_stage_layers", "num_layers_in_first_pipeline_stage"),
    "last_stage_layers": ("last_stage_layers", "num_layers_in_last_pipeline_stage"),
}
_INT_KNOBS = ("t", "p", "d", "c", "e", "t_e", "v", "s", "b", "m", "B",
              "first_stage_layers", "last_stage_layers")
def _read(obj, name):
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _knobs(layout, training, overrides) -> dict:
    """One flat dict of knobs from a layout, training settings and keyword overrides."""
    known = {alias for names in _ALIASES.values() for alias in names}
    for key in overrides:
        if key not in known:
            raise UnknownNameError("layout or training knob", key, sorted(known))
    out = {}
    for canon, names in _ALIASES.items():
        val = None
        for src in (overrides, training, layout):
            for name in names:
                got = _read(src, name)
                if got is not None:
                    val = got
                    break
            if val is not None:
                break
        out[canon] = val
    for key in _INT_KNOBS:
        if out[key] is None:
            continue
        val = exact(out[key], key)
        if not val.is_integer or val <= 0:
            raise InvalidValueError(f"{key} must be a positive whole number, got {out[key]!r}")
        out[key] = int(val)
    for key, default in (("t", 1), ("p", 1), ("d", 1), ("c", 1), ("e", 1)):
        if out[key] is None:
            out[key] = default
    if out["s"] is None or out["b"] is None:
        raise InvalidValueError("the framework conventions need the sequence length s and the "
                                "micro-batch size b")
    # Megatron's default --recompute-granularity is None: no recompute.
    out["recompute"] = "none" if out["recompute"] is None else \
        choose("recompute", out["recompute"], RECOMPUTE)
    out["sequence_parallel"] = bool(out["sequence_parallel"])
    out["m_derived"] = False
    if out["m"] is None and out["B"] is not None:
        # The training loop passes get_num_microbatches() = B / (b d) (d excludes CP).
        if out["B"] % (out["b"] * out["d"]):
            raise DivisibilityError(f"global batch {out['B']} is not divisible by micro-batch "
                                    f"{out['b']} x data-parallel {out['d']}")
        out["m"] = out["B"] // (out["b"] * out["d"])
        out["m_derived"] = True
    if out["distributed_optimizer"] is None:
        sharding = "distributed-optimizer" if out["sharding"] is None else \
            normalize_scheme(out["sharding"])  # a name memsym knows, then Megatron's subset
        accepted = ("distributed-optimizer", "zero1", "ddp")
        if sharding not in accepted:
            raise InvalidValueError(
                f"the Megatron conventions model ddp or the distributed optimizer (zero1), not "
                f"sharding {out['sharding']!r} (accepted: {', '.join(accepted)})")
        out["distributed_optimizer"] = sharding != "ddp"
    out["distributed_optimizer"] = bool(out["distributed_optimizer"])
    return out


@dataclass(frozen=True)
class _Arch:
    """The Architecture fields the frameworks read, resolved as Megatron's validate_args does."""

    L: int
    h: int
    a: int
    g: int
    gqa: bool
    kv: int
    f: int
    swiglu: bool
    rmsnorm: bool
    vocab: int
    divisible_by: int
    untied: bool
    bias: bool
    E: int | None
    k: int
    f_e: int
    f_sh: int
    pattern: tuple
    mla: bool
    q_lora: int | None
    kv_lora: int | None
    qk: int | None
    qk_pos: int | None
    v_head: int | None
    n_mtp: int
    latent: int | None
    shared_gate: bool


def _arch(arch) -> _Arch:
    def get(name, default=None):
        val = getattr(arch, name, default)
        if val is None and isinstance(getattr(arch, "extra", None), Mapping):
            val = arch.extra.get(name, default)
        return default if val is None else val

    L_, h_, a_ = int(arch.num_layers), int(arch.hidden_size), int(arch.num_attention_heads)
    g_raw = get("num_query_groups")
    kv = get("kv_channels")
    if kv is None:
        if h_ % a_:
            raise DivisibilityError(f"hidden_size {h_} is not divisible by num_attention_heads {a_}; "
                                    "give kv_channels")
        kv = h_ // a_
    E_ = get("num_experts")
    f_ = int(get("ffn_hidden_size", 4 * h_))
    if E_ is not None:
        freq = get("moe_layer_freq", 1)
        if isinstance(freq, int):
            if freq <= 0:
                raise InvalidValueError(f"moe_layer_freq must be positive, got {freq}")
            pattern = tuple(1 if i % freq == 0 else 0 for i in range(L_))
        else:
            pattern = tuple(int(bool(x)) for x in freq)
            if len(pattern) != L_:
                raise InvalidValueError(f"moe_layer_freq has {len(pattern)} entries for {L_} layers")
    else:
        pattern = (0,) * L_
    return _Arch(
        L=L_, h=h_, a=a_, g=int(g_raw) if g_raw is not None else a_,
        gqa=g_raw is not None and int(g_raw) != a_, kv=int(kv), f=f_,
        swiglu=bool(get("swiglu", False)), rmsnorm=get("normalization", "LayerNorm") == "RMSNorm",
        vocab=int(arch.vocab_size), divisible_by=int(get("make_vocab_size_divisible_by", 128)),
        untied=bool(get("untie_embeddings_and_output_weights", False)),
        bias=bool(get("add_bias_linear", True)),
        E=int(E_) if E_ is not None else None, k=int(get("moe_router_topk", 2)),
        f_e=int(get("moe_ffn_hidden_size", f_)) if E_ is not None else 0,
        f_sh=int(get("moe_shared_expert_intermediate_size", 0)),
        pattern=pattern, mla=bool(get("multi_latent_attention", False)),
        q_lora=get("q_lora_rank"), kv_lora=get("kv_lora_rank"), qk=get("qk_head_dim"),
        qk_pos=get("qk_pos_emb_head_dim"), v_head=get("v_head_dim"),
        n_mtp=int(get("mtp_num_layers", 0) or 0), latent=get("moe_latent_size"),
        shared_gate=bool(get("moe_shared_expert_gate", False)),
    )


def _launchable(arch, kn: dict):
    """The resolved architecture, after the same launch rules as every memsym job
    (:mod:`memsym.rules`): a framework's estimator prints numbers for layouts the framework
    refuses to start (an expert data-parallel size of 0, t not dividing the KV heads); memsym
    refuses them with the rule's line instead."""
    from . import rules
    from .model import Architecture, resolve

    if not isinstance(arch, Architecture):
        return arch
    x = resolve(arch, seq_length=kn["s"])
    k = {"t": kn["t"], "p": kn["p"], "c": kn["c"], "d": kn["d"], "e": kn["e"],
         "t_e": kn["t_e"] or kn["t"], "v": kn["v"] or 1, "s": kn["s"], "b": kn["b"],
         "B": kn["B"], "m": kn["m"], "sequence_parallel": kn["sequence_parallel"],
         "first_stage_layers": kn["first_stage_layers"],
         "last_stage_layers": kn["last_stage_layers"], "offload": False,
         "shards_gradients": False, "microbatch_group_size": None}
    rules.check(x, k)
    return x


def _schedule(kn: dict) -> str:
    """Which branch of the pipeline factor the frameworks take for this layout."""
    if kn["v"] is not None and kn["v"] > 1:  # v = 1 means no interleaving (Megatron sets None)
        return "interleaved"
    if kn["p"] > 1 and kn["m"] is not None:
        return "microbatches"
    return "none"


@dataclass(frozen=True)
class ConventionResult:
    """A framework convention evaluated for one layout.

    Attributes
    ----------
    convention : str
        ``"megatron-lm"`` or ``"megatron-bridge"``.
    total : Total
        The cited terms [bytes], symbolic in the layout symbols (t, p, d, c, e, t_e, v, s, b, m)
        with the architecture's numbers substituted; branches (p = 1, VPP, microbatches given,
        activation path) are those the framework takes for :attr:`values`.
    values : dict
        The layout values (registry symbols to exact numbers) the branches were chosen for.
    path : str
        The activation path taken.
    assumptions : tuple of str
        What the framework assumes or ignores for this configuration.
    parameters : dict
        The framework's own parameter counts (total and on the most-loaded shard) [parameters].
    """

    convention: str
    total: Total
    values: dict
    path: str
    assumptions: tuple = ()
    parameters: dict = field(default_factory=dict)

    def breakdown(self) -> dict:
        """Exact bytes of each term and ``"total"`` at :attr:`values`."""
        return self.total.breakdown(self.values)


def _values(kn: dict, *, with_te: int) -> dict:
    vals = {t: kn["t"], p: kn["p"], d: kn["d"], c: kn["c"], e: kn["e"], t_e: with_te,
            s: kn["s"], b: kn["b"]}
    if kn["v"] is not None:
        vals[v] = kn["v"]
    if kn["m"] is not None:
        vals[m] = kn["m"]
    return {key: sp.Integer(val) for key, val in vals.items()}


# ------------------------------------------------------------------------------------------------
# Megatron-LM core 0.19
# ------------------------------------------------------------------------------------------------
def megatron_lm(arch, layout=None, training=None, *, num_microbatches=None,
                **knobs) -> ConventionResult:
    r"""Megatron-LM core 0.19's theoretical memory on its most-loaded GPU [bytes], exactly.

    Parameters are split as the source splits them (pipeline stage 0: an even 1/p share of the
    decoder layers, the whole MTP block, the input embedding):

    .. math::

        M = (T + R)\,\beta(d) + X\,\beta(D_e) + A, \qquad
        D_e = \lfloor t\,c\,d/(t_e\,e) \rfloor = \lfloor W/(t_e e p) \rfloor

    with :math:`T` the TP-sharded parameters, :math:`R` the replicated ones (norms, routers,
    latent projections), :math:`X` the routed experts, :math:`\beta` from
    :func:`megatron_bytes_per_parameter`, and :math:`A` path A of :func:`megatron_lm_activation`
    when sequence parallelism and selective recompute are both on, path B otherwise.

    Parameters
    ----------
    arch : memsym.model.Architecture
        The model (Megatron argument names).
    layout, training : mapping or object, optional
        Knobs ``t p d c e t_e v`` and ``s b m sequence_parallel recompute sharding``
        (Megatron's argument names are accepted too); keyword ``knobs`` override both.
    num_microbatches : int, optional
        What the training loop passes (``get_num_microbatches()``); the offline tool passes none.

    Returns
    -------
    ConventionResult

    Examples
    --------
    >>> from memsym.model import Architecture
    >>> gpt = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1000)
    >>> r = megatron_lm(gpt, dict(t=2, p=1, d=2),
    ...                 dict(s=32, b=1, sequence_parallel=True, recompute="selective"))
    >>> r.path
    'A'
    >>> r.breakdown()["total"]
    1131136

    References
    ----------
    Megatron-LM ``megatron/training/theoretical_memory_usage.py`` (core 0.19).
    """
    if num_microbatches is not None:
        knobs = {**knobs, "m": num_microbatches}
    kn = _knobs(layout, training, knobs)
    arch = _launchable(arch, kn)
    A = _arch(arch)
    assumptions = []
    te_val = kn["t_e"] if kn["t_e"] is not None else kn["t"]  # validate_args: ETP defaults to TP
    if kn["t_e"] is None and A.E is not None:
        assumptions.append("expert_tensor_parallel_size unset: resolved to TP as validate_args does")
    moe = A.E is not None
    eta = 1 if A.rmsnorm else 2  # RMSNorm has no bias (since core 0.16)
    gamma = _R(3, 2) if A.swiglu else 1
    h_, a_ = A.h, A.a

    # --- parameter counts, as the source counts them -----------------------------------------
    if A.mla:
        if A.gqa:
            raise InvalidValueError("Megatron-LM asserts that multi_latent_attention is not "
                                    "combined with group query attention")
        qd = A.qk + A.qk_pos
        q_term = h_ * a_ * qd if A.q_lora is None else A.q_lora * (h_ + a_ * qd + eta)
        P_attn = (q_term + A.kv_lora * (h_ + a_ * (A.qk + A.v_head) + eta)
                  + h_ * A.qk_pos + a_ * A.v_head * h_)
    else:
        # 2h^2 (1 + g/a)(a d/h) = 2 d h (a + g); biases never counted.
        P_attn = 2 * A.kv * h_ * (a_ + A.g)
    P_mlp = 2 * gamma * h_ * A.f
    P_sh = 2 * gamma * h_ * A.f_sh
    h_hat = A.latent if A.latent is not None else h_
    P_exp = 2 * gamma * h_hat * A.f_e * A.E if moe else 0
    P_lat = 2 * h_ * A.latent if (moe and A.latent is not None) else 0
    P_rt = (h_ * A.E + (A.E if A.bias else 0)) if moe else 0
    P_gate = h_ if (A.f_sh > 0 and A.shared_gate) else 0
    P_norm = 2 * eta * h_
    L_m = sum(A.pattern)
    L_d = A.L - L_m
    mtp_moe = A.pattern[-1] * A.n_mtp  # each MTP layer copies the last decoder layer's type
    mtp_dense = A.n_mtp - mtp_moe

    V_pad = padded_vocab(A.vocab, A.divisible_by, t)  # the tokenizer pads to 128 t
    emb = h_ * V_pad
    tp_block = (P_attn + P_mlp) * L_d + (P_attn + P_sh) * L_m
    tp_mtp = (P_attn + P_mlp) * mtp_dense + (P_attn + P_sh) * mtp_moe
    rep_block = P_norm * L_d + (P_norm + P_lat + P_rt + P_gate) * L_m + eta * h_
    rep_mtp = P_norm * mtp_dense + (P_norm + P_lat + P_rt + P_gate) * mtp_moe
    exp_block = P_exp * L_m
    exp_mtp = P_exp * mtp_moe
    untied_p1 = A.untied and kn["p"] == 1

    T_expr = (sp.Integer(tp_block) / p + tp_mtp + emb) / t + (emb / t if untied_p1 else 0)
    R_expr = sp.Integer(rep_block) / p + rep_mtp
    X_expr = (sp.Integer(exp_block) / p + exp_mtp) / (t_e * e)
    beta_d = megatron_bytes_per_parameter(kn["distributed_optimizer"], d)
    D_e = sp.floor(t * c * d / (t_e * e))  # W // (t_e e p) with W = t p c d
    beta_e = megatron_bytes_per_parameter(kn["distributed_optimizer"], D_e)
    opt = "6 + 12/d" if kn["distributed_optimizer"] else "18"
    terms = [
        Term("weights_and_optimizer_tp", T_expr * beta_d,
             f"TP-sharded parameters on stage 0 (layers/p, whole MTP block, embedding) x {opt} "
             "bytes", _LM_WO, label="TP-sharded x beta(d)"),
        Term("weights_and_optimizer_replicated", R_expr * beta_d,
             f"norms, routers and latent projections, replicated over TP, x {opt} bytes",
             _LM_WO, label="replicated x beta(d)"),
    ]
    if moe:
        terms.append(Term("weights_and_optimizer_experts", X_expr * beta_e,
                          "routed experts on stage 0 over t_e e, x beta(expert DP)", _LM_WO,
                          label="experts x beta(D_e)"))

    # --- activations -------------------------------------------------------------------------
    sp_on = kn["sequence_parallel"] and kn["t"] > 1
    if kn["sequence_parallel"] and kn["t"] == 1:
        assumptions.append("sequence_parallel is switched off by Megatron when TP = 1")
    path = "A" if (sp_on and kn["recompute"] == "selective") else "B"
    schedule = _schedule(kn)
    act = megatron_lm_activation(path, schedule, output_layer=kn["p"] == 1)
    act = act.xreplace({h: h_, f: A.f, L: A.L, V: V_pad})
    src = _LM_A if path == "A" else _LM_B
    desc = ("stage-0 activations, SP + selective recompute, / t" if path == "A" else
            "stage-0 activations 'without SP' (10 + 24/t per layer, x 1.05)")
    terms.append(Term("activations", act, desc, src, label=f"activations (path {path})"))

    # --- what the framework assumes here -----------------------------------------------------
    assumptions.append(f"activation path {path}: " + (
        "compute_activation_memory (SP + selective)" if path == "A" else
        "compute_activation_memory_without_sp (taken unless SP and selective are both on)"))
    if path == "B" and kn["recompute"] == "full":
        assumptions.append("full recompute is not modelled: path B keeps every layer's activations")
    if kn["c"] > 1:
        assumptions.append("context parallelism is ignored: activations are not divided by c and "
                           "the dense optimizer is sharded over d only")
    if moe:
        assumptions.append("activations ignore MoE (dense ffn_hidden_size, no top-k)")
    if A.n_mtp:
        assumptions.append("the whole MTP block is counted on stage 0; MTP activations ignored")
    if kn["first_stage_layers"] or kn["last_stage_layers"]:
        assumptions.append("uneven pipeline stages are ignored (even split assumed)")
    if schedule == "interleaved":
        assumptions.append("interleaved schedule: activations x (1 + (p - 1)/(p v))")
    elif schedule == "microbatches":
        assumptions.append("fewer microbatches than stages discounted: x min(1, m/p)")
    if kn["p"] > 1:
        assumptions.append("most-loaded GPU taken to be pipeline stage 0; output-layer logits "
                           "(last stage) not counted")
    _precision_note(kn, assumptions)

    vals = _values(kn, with_te=te_val)
    n_total = (tp_block + rep_block + exp_block + (P_attn + P_mlp + P_norm) * mtp_dense
               + (P_attn + P_sh + P_exp + P_lat + P_norm + P_rt + P_gate) * mtp_moe
               + (2 if A.untied else 1) * emb)
    params = {
        "total": as_expr(n_total).xreplace(vals),
        "most_loaded_shard": (T_expr + R_expr + X_expr).xreplace(vals),
        "padded_vocab": V_pad.xreplace(vals),
        "attention_per_layer": as_expr(P_attn),
    }
    total = Total("megatron-lm core 0.19 theoretical memory (most-loaded GPU)", tuple(terms))
    return ConventionResult("megatron-lm", total, vals, path, tuple(assumptions), params)


def _precision_note(kn, assumptions):
    if kn["m_derived"]:
        assumptions.append(f"num_microbatches = B/(b d) = {kn['m']}, as the training loop passes it")
    prec = kn["precision"]
    opt = kn["optimizer"]
    if prec is not None and str(prec).lower() != "bf16":
        assumptions.append(f"precision {prec} ignored: the framework always counts bf16 weights, "
                           "fp32 gradients, fp32 main weights")
    if opt is not None and str(opt).lower() not in ("adam", "adamw"):
        assumptions.append(f"optimizer {opt} ignored: the framework always counts Adam (8 B)")


# ------------------------------------------------------------------------------------------------
# Megatron-Bridge 0.6
# ------------------------------------------------------------------------------------------------
def _stage_layers(kn: dict, n_layers: int):
    """Bridge's uneven-PP layer indices per pipeline rank, or None for an even split."""
    first, last, pp = kn["first_stage_layers"], kn["last_stage_layers"], kn["p"]
    if first is None and last is None:
        return None
    if pp <= 1:
        raise InvalidValueError("uneven pipeline stages need p > 1")
    rest, left = n_layers, pp
    if first is not None:
        rest, left = rest - first, left - 1
    if last is not None:
        rest, left = rest - last, left - 1
    if left == 0:
        if rest != 0:
            raise DivisibilityError("first/last stage layers do not add up to num_layers")
        middle = 0
    else:
        if rest <= 0 or rest % left:
            raise DivisibilityError(f"{rest} remaining layers do not divide over {left} middle stages")
        middle = rest // left
    counts = [middle] * pp
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    vpp = kn["v"]
    if vpp is None:
        out, start = [], 0
        for n in counts:
            out.append(list(range(start, start + n)))
            start += n
        return out
    if any(n % vpp for n in counts):
        raise DivisibilityError("each pipeline stage's layers must divide over the virtual stages")
    out, start = [[] for _ in counts], 0
    for _ in range(vpp):  # interleaved chunks: rank r holds chunk j of every round
        for rank, n in enumerate(counts):
            out[rank].extend(range(start, start + n // vpp))
            start += n // vpp
    return out


def megatron_bridge(arch, layout=None, training=None, *, num_microbatches=None,
                    should_pad_vocab: bool | None = None, **knobs) -> ConventionResult:
    r"""Megatron-Bridge 0.6 ``estimate_training_memory`` on its most-loaded GPU [bytes], exactly.

    .. math::

        M = N_d\,\beta(d c) + N_x\,\beta(\max(1, \lfloor d t c/(e t_e)\rfloor)) + A,\qquad
        N_d = \frac{P_{\mathrm{dense}}}{p t} + \frac{hV}{t}\,(1 + [\text{untied} \wedge p=1]),
        \quad N_x = \frac{P_{\mathrm{routed}}}{p\,e\,t_e}

    (uneven PP: the largest stage, with :math:`hV` on both the first and the last stage) and
    :math:`A` from :func:`megatron_bridge_activation` (MoE layers weighted by top-k, divided by
    :math:`t c`, no x1.05, the same formula for every recompute mode).  Bridge counts 4h of norm
    per layer + 2h (divided by t), no router parameters, no MLA (attention from ``kv_channels``
    and query groups), a gated MLP only for SwiGLU, and the unpadded vocabulary unless
    ``should_pad_vocab``.

    Parameters
    ----------
    arch : memsym.model.Architecture
    layout, training : mapping or object, optional
        As for :func:`megatron_lm`; ``first_stage_layers`` / ``last_stage_layers`` select uneven PP.
    num_microbatches : int, optional
    should_pad_vocab : bool, optional
        Default False (``GPTModelProvider``'s default).

    Returns
    -------
    ConventionResult

    Examples
    --------
    >>> from memsym.model import Architecture
    >>> gpt = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1000)
    >>> megatron_bridge(gpt, dict(t=2, d=2), dict(s=32, b=1)).breakdown()["total"]
    1116544

    References
    ----------
    Megatron-Bridge ``src/megatron/bridge/training/utils/theoretical_memory_utils.py`` (0.6).
    """
    if num_microbatches is not None:
        knobs = {**knobs, "m": num_microbatches}
    if should_pad_vocab is not None:
        knobs = {**knobs, "should_pad_vocab": should_pad_vocab}
    kn = _knobs(layout, training, knobs)
    arch = _launchable(arch, kn)
    A = _arch(arch)
    assumptions = []
    te_val = kn["t_e"] if kn["t_e"] is not None else kn["t"]
    if kn["t_e"] is None and A.E is not None:
        assumptions.append("expert_tensor_parallel_size unset: resolved to TP as TransformerConfig "
                           "does (a hand-built Bridge config would use 1)")
    moe = A.E is not None and A.E > 0
    kappa = 3 if A.swiglu else 2  # gated_linear_unit and activation_func is F.silu
    h_ = A.h
    pad = bool(kn["should_pad_vocab"])
    V_used = padded_vocab(A.vocab, A.divisible_by, t) if pad else sp.Integer(A.vocab)

    # --- Bridge's own parameter counts -------------------------------------------------------
    pattern = A.pattern if moe else (0,) * A.L
    pattern = pattern + (pattern[-1],) * A.n_mtp  # MTP layers: copies of the last layer's type
    P_attn = 2 * A.kv * h_ * (A.a + A.g)  # no MLA branch: 2h^2(1 + g/a)(a d/h) = 2 d h (a + g)
    P_norm = 4 * h_  # always 4h per layer, RMSNorm not distinguished
    P_mlp = kappa * h_ * A.f
    P_sh = kappa * h_ * A.f_sh
    if moe and any(pattern[:A.L]):
        P_exp = kappa * (A.latent if A.latent is not None else h_) * A.f_e * A.E
        P_lat = 2 * h_ * A.latent if A.latent is not None else 0
    else:
        P_exp, P_lat = 0, 0
    dense_by_layer = [P_attn + P_norm + ((P_sh + P_lat) if is_moe else P_mlp) for is_moe in pattern]
    routed_by_layer = [P_exp if is_moe else 0 for is_moe in pattern]
    final_norm = 2 * h_
    dense_total = sum(dense_by_layer) + final_norm
    routed_total = sum(routed_by_layer)

    stages = _stage_layers(kn, A.L)
    emb = h_ * V_used
    if stages is None:
        N_d = sp.Integer(dense_total) / (p * t) + emb / t + (
            emb / t if (A.untied and kn["p"] == 1) else 0)
        N_x = sp.Integer(routed_total) / (p * e * t_e)
        pp_note = None
    else:
        dense_st = [sum(dense_by_layer[i] for i in idx) for idx in stages]
        routed_st = [sum(routed_by_layer[i] for i in idx) for idx in stages]
        dense_st[-1] += sum(dense_by_layer[A.L:]) + final_norm  # MTP + final norm: last stage
        routed_st[-1] += sum(routed_by_layer[A.L:])
        # hV on the first and on the last stage, tied or not (the value depends on t only
        # through padding; max taken at the layout's t).
        vals_t = {t: kn["t"]}
        dense_st = [sp.Integer(x) for x in dense_st]
        dense_st[0] += emb
        dense_st[-1] += emb
        best = max(dense_st, key=lambda x: x.xreplace(vals_t))
        N_d = best / t
        N_x = sp.Integer(max(routed_st)) / (e * t_e)
        pp_note = f"uneven pipeline stages {[len(i) for i in stages]}; the largest stage counted"

    beta_dense = bridge_bytes_per_parameter(kn["distributed_optimizer"])
    edp = sp.Max(1, sp.floor(d * t * c / (e * t_e)))
    beta_exp = bridge_bytes_per_parameter(kn["distributed_optimizer"], edp)
    opt = "6 + 12/(d c)" if kn["distributed_optimizer"] else "18"
    terms = [Term("weights_and_optimizer_dense", N_d * beta_dense,
                  f"dense parameters and optimizer (norms / t, embeddings) x {opt} bytes", _BR_WO,
                  label="dense x beta(d c)")]
    if routed_total > 0:
        terms.append(Term("weights_and_optimizer_experts", N_x * beta_exp,
                          "routed expert parameters and optimizer over e t_e, x beta(EDP)", _BR_WO,
                          label="experts x beta(EDP)"))

    # --- activations -------------------------------------------------------------------------
    L_tot = len(pattern)
    L_m = sum(pattern) if moe else 0
    L_d = L_tot - L_m
    ratio = (sp.Integer(L_d * A.f + L_m * (A.f_e * A.k + A.f_sh)) / (L_tot * h_))
    schedule = _schedule(kn)
    act = megatron_bridge_activation(schedule, output_layer=kn["p"] == 1, ratio=ratio,
                                     layers=L_tot)
    act = act.xreplace({h: h_, V: V_used})
    terms.append(Term("activations", act,
                      "stage-0 activations, MoE layers weighted by top-k, / (t c)", _BR_A,
                      label="activations"))

    assumptions.append("activations: one formula (SP + selective assumed) whatever the recompute "
                       "and sequence-parallel settings; no x1.05")
    if kn["recompute"] != "selective" or not kn["sequence_parallel"]:
        assumptions.append(f"recompute {kn['recompute']}, sequence_parallel "
                           f"{kn['sequence_parallel']}: not modelled (Bridge's report prints the "
                           "activation line only with SP + selective)")
    assumptions.append("vocabulary " + ("padded to a multiple of 128 t" if pad else
                                        "unpadded (should_pad_vocab False, the provider default)"))
    if A.mla:
        assumptions.append("multi-latent attention not modelled: attention counted from "
                           "kv_channels and query groups")
    if moe:
        assumptions.append("router and shared-expert-gate parameters not counted")
    if pp_note:
        assumptions.append(pp_note)
    if schedule == "interleaved":
        assumptions.append("interleaved schedule: activations x (1 + (p - 1)/(p v))")
    elif schedule == "microbatches":
        assumptions.append("fewer microbatches than stages discounted: x min(1, m/p)")
    _precision_note(kn, assumptions)

    vals = _values(kn, with_te=te_val)
    params = {
        "total": (sp.Integer(dense_total + routed_total) + (2 if A.untied else 1) * emb).xreplace(vals),
        "most_loaded_shard": (N_d + N_x).xreplace(vals),
        "vocab": V_used.xreplace(vals),
        "attention_per_layer": sp.Integer(P_attn),
    }
    total = Total("megatron-bridge 0.6 estimate_training_memory (most-loaded GPU)", tuple(terms))
    return ConventionResult("megatron-bridge", total, vals, "bridge", tuple(assumptions), params)


# ------------------------------------------------------------------------------------------------
# One entry point for the command line
# ------------------------------------------------------------------------------------------------
def convention_breakdown(convention: str, arch, layout=None, training=None, **knobs) -> dict:
    """Bytes per GPU under a framework's convention, as a plain dict (for ``memsym estimate``).

    Parameters
    ----------
    convention : {"megatron-lm", "megatron-bridge"}
    arch : memsym.model.Architecture
    layout, training : mapping or object
        Knobs as for :func:`megatron_lm`.
    **knobs
        Overrides (``num_microbatches``, ``should_pad_vocab`` for Bridge, ...).

    Returns
    -------
    dict
        ``weights_and_optimizer``, ``weights_and_optimizer_dense``,
        ``weights_and_optimizer_experts``, ``activations``, ``total``: exact SymPy numbers
        [bytes] (the frameworks' formulas can give fractions of a byte, e.g. the x1.05 of
        path B); ``bytes``: the same rounded up to whole bytes (ints, JSON-ready);
        ``terms``: exact bytes per term; ``path``, ``assumptions``, ``parameters``,
        ``units`` and ``result`` (the :class:`ConventionResult`).

    Examples
    --------
    >>> from memsym.model import Architecture
    >>> gpt = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1000)
    >>> out = convention_breakdown("megatron-lm", gpt, dict(t=2), dict(s=32, b=1))
    >>> out["path"], out["bytes"]["total"]
    ('B', 1621824)
    """
    key = choose("convention", convention, CONVENTION_NAMES)
    fn = megatron_lm if key == "megatron-lm" else megatron_bridge
    res = fn(arch, layout, training, **knobs)
    bd = res.breakdown()
    dense = sum((bd[k_] for k_ in bd if k_.startswith("weights_and_optimizer")
                 and k_ != "weights_and_optimizer_experts"), sp.Integer(0))
    experts = bd.get("weights_and_optimizer_experts", sp.Integer(0))
    out = {
        "convention": key,
        "weights_and_optimizer": dense + experts,
        "weights_and_optimizer_dense": dense,
        "weights_and_optimizer_experts": experts,
        "activations": bd["activations"],
        "total": bd["total"],
        "terms": {k_: val for k_, val in bd.items() if k_ != "total"},
        "path": res.path,
        "assumptions": list(res.assumptions),
        "parameters": res.parameters,
        "units": "bytes (exact); the frameworks print MiB (2^20) as 'MB' and Bridge's GB is GiB",
        "result": res,
    }
    out["bytes"] = {k_: int(sp.ceiling(out[k_])) for k_ in (
        "weights_and_optimizer", "weights_and_optimizer_dense", "weights_and_optimizer_experts",
        "activations", "total")}
    return out
