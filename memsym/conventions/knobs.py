"""Reading a job for the framework estimators: the knobs, the architecture as the frameworks
resolve it, the launch rules, and the result record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import sympy as sp

from ..errors import DivisibilityError, InvalidValueError, UnknownNameError, choose
from ..symbols import b, c, d, e, m, p, s, t, t_e, v
from ..term import Total
from ..terms.activations import RECOMPUTE
from ..terms.model_state import normalize_scheme
from ..values import exact
from ..model import Architecture, moe_layer_pattern, resolve
from .. import rules


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
    "pipeline_layout": ("pipeline_layout", "pipeline_model_parallel_layout"),
}
#: The assumption both estimators make under a custom pipeline layout (neither reads it:
#: theoretical_memory_usage.py and Bridge's theoretical_memory_utils.py split by p).
LAYOUT_IGNORED = ("the custom pipeline layout is not read by the estimator: the layers are "
                  "split evenly over p")
_INT_KNOBS = ("t", "p", "d", "c", "e", "t_e", "v", "s", "b", "m", "B",
              "first_stage_layers", "last_stage_layers")
def _read(obj, name):
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def convention_knobs(layout, training, overrides) -> dict:
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


def architecture_of(arch) -> _Arch:
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
        # the model layer's pattern (Megatron's rule: layer i is MoE iff i % q == 0, or the list)
        pattern = tuple(int(x) for x in moe_layer_pattern(arch))
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


def launchable(arch, kn: dict):
    """The resolved architecture, after the same launch rules as every memsym job
    (:mod:`memsym.rules`): a framework's estimator prints numbers for layouts the framework
    refuses to start (an expert data-parallel size of 0, t not dividing the KV heads); memsym
    refuses them with the rule's line instead."""
    if not isinstance(arch, Architecture):
        return arch
    x = resolve(arch, seq_length=kn["s"])
    k = {"t": kn["t"], "p": kn["p"], "c": kn["c"], "d": kn["d"], "e": kn["e"],
         "t_e": kn["t_e"] or kn["t"], "v": kn["v"] or 1, "s": kn["s"], "b": kn["b"],
         "B": kn["B"], "m": kn["m"], "sequence_parallel": kn["sequence_parallel"],
         "first_stage_layers": kn["first_stage_layers"],
         "last_stage_layers": kn["last_stage_layers"], "offload": False,
         "pipeline_layout": kn.get("pipeline_layout") is not None,
         "shards_gradients": False, "microbatch_group_size": None}
    rules.check(x, k)
    return x


def megatron_knobs(arch, layout, training, knobs: dict, etp_resolved: str, **given) -> tuple:
    """A Megatron estimator's inputs: its knobs, the launchable architecture, its symbols, the
    expert tensor-parallel size and the assumptions list.

    ``given`` (``m``, ``should_pad_vocab``) overrides ``knobs`` where it is not None.  An unset
    expert tensor-parallel size resolves to TP, said in the assumptions ("resolved to TP as
    ``etp_resolved``") when the model has experts.

    Returns
    -------
    tuple
        (knobs, architecture, :func:`architecture_of` symbols, expert TP size [GPUs],
        assumptions).
    """
    knobs = {**knobs, **{key: val for key, val in given.items() if val is not None}}
    kn = convention_knobs(layout, training, knobs)
    arch = launchable(arch, kn)
    A = architecture_of(arch)
    assumptions = []
    te_val = kn["t_e"] if kn["t_e"] is not None else kn["t"]
    if kn["t_e"] is None and A.E is not None:
        assumptions.append(f"expert_tensor_parallel_size unset: resolved to TP as {etp_resolved}")
    return kn, arch, A, te_val, assumptions


def schedule_name(kn: dict) -> str:
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


def knob_values(kn: dict, *, with_te: int) -> dict:
    vals = {t: kn["t"], p: kn["p"], d: kn["d"], c: kn["c"], e: kn["e"], t_e: with_te,
            s: kn["s"], b: kn["b"]}
    if kn["v"] is not None:
        vals[v] = kn["v"]
    if kn["m"] is not None:
        vals[m] = kn["m"]
    return {key: sp.Integer(val) for key, val in vals.items()}
