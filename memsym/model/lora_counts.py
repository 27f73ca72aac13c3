"""Exact trainable LoRA parameters of an architecture (split from :mod:`memsym.model.counts`,
which re-exports :func:`lora_parameter_count`, so that the counts module keeps room).

An MoE layer's adapters are counted as the frameworks build them:

* Megatron-Bridge (``fused``), ``LoRA`` / ``CanonicalLoRA`` with their defaults
  (``share_expert_adapters=True``, ``normalize_moe_lora=False``,
  ``experts_shared_outer_loras=False``; src/megatron/bridge/peft/lora.py:143-157, 189-261 at
  067f987df0): Bridge's MoE models run grouped experts (``mlp.experts.linear_fc1`` /
  ``linear_fc2``, ``is_grouped_expert_linear``, peft/utils.py:682-706), and a grouped expert
  linear gets one ``ParallelLinearAdapter`` of the expert linear's in and out features,
  shared by the rank's local experts (``in_features = m.in_features``,
  ``out_features = m.out_features * tp_size`` of the expert-TP group, utils.py:603-655): an
  expert-TP-split adapter that every EP rank holds whole (``_synchronize_shared_expert_parameters``
  broadcasts it over EP, ``_allreduce_shared_expert_grad`` sums its gradient over EP,
  utils.py:1294-1349).  CanonicalLoRA keeps the grouped experts' linear_fc1 one adapter
  (``_should_treat_linear_fc1_as_unfused``, canonical_lora.py:43-46, 376-379).  The shared
  experts (``mlp.shared_experts.linear_fc1/fc2``, not expert linears) match the same target
  names and get TP-split adapters of the shared expert's width.  The router is targeted only
  when ``router`` is named, which memsym's targets never do.
* Hugging Face PEFT (every other framework, and QLoRA) on transformers 5.25.0: the routed
  experts are fused 3-D parameters (``Qwen3MoeExperts`` / ``MixtralExperts``:
  ``gate_up_proj`` [E, 2f, h], ``down_proj`` [E, h, f]), no ``nn.Linear``.  PEFT >= 0.19
  (``convert_peft_config_for_transformers``, src/peft/tuners/tuners_utils.py:787-803 and
  src/peft/utils/transformers_weight_conversion.py:332-482 at v0.20.0) rewrites the targets
  of a Mixtral- or Qwen2-MoE-style model: gate and up (together only, else it raises) become
  the parameter target ``gate_up_proj`` at rank 2r, down becomes ``down_proj`` at rank r, and
  they leave ``target_modules``; a ``ParamWrapper`` on a 3-D parameter builds
  ``lora_A = Linear(in, r E)`` and ``lora_B = Linear(r E, out)`` (src/peft/tuners/lora/layer.py:
  2236, 2348-2349, ``ParamWrapper.update_layer``): E r (in + out) per fused matrix, one
  adapter per expert.  The router (a ``TopKRouter`` module, not ``nn.Linear``) is targeted
  only by the name ``gate``, which memsym's targets never give (its ``gate`` is gate_proj).
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..terms.adapters import LORA_TARGETS, lower_choice
from .architecture import lenient
from .layer_patterns import is_hybrid, moe_layer_pattern
from .presets import PRESET_MODEL_TYPES

__all__ = ["lora_parameter_count", "lora_layer_adapters", "PEFT_MOE_TYPES",
           "EXPERT_PARAMETER_TYPES", "expert_parameter_adapters"]

_ATTENTION = ("q", "k", "v", "o")


def _groups(keys, swiglu: bool, fused: bool) -> list:
    """The adapted matrix groups: one per adapter.  Megatron's LoRA puts one adapter on each
    of linear_qkv and linear_fc1; a part of one of them (q and v alone) is Bridge's
    CanonicalLoRA (peft/canonical_lora.py:180-306 at 067f987df0), which has an adapter per
    matrix everywhere (linear_q, linear_k, linear_v, linear_fc1_gate, linear_fc1_up), so
    a job with any part is canonical throughout."""
    single = [(k,) for k in LORA_TARGETS if k in keys]
    if not fused:
        return single
    whole = [g for g in (("q", "k", "v"), ("gate", "up") if swiglu else ("up",)) if set(g) & keys]
    if any(not set(g) <= keys for g in whole):
        return single
    return whole + [(k,) for k in LORA_TARGETS if k in keys and not any(k in g for g in whole)]


def _count(groups, shapes, rank: int) -> int:
    return sum(rank * (shapes[g[0]][0] + sum(shapes[k][1] for k in g)) for g in groups)


def _magnitudes(groups, shapes) -> int:
    # DoRA's magnitude vector: d_out per adapted matrix
    return sum(shapes[k][1] for g in groups for k in g)


def _check(x, keys, expert_params=()) -> None:
    if is_hybrid(x):    # its layers differ: the per-layer adapter below would miscount them
        kinds = (", ".join(sorted(set(x.layer_mixers)))[:80] if x.layer_mixers
                 else "some without an MLP")
        raise InvalidValueError(f"LoRA adapters of {x.name!r}, whose layers differ ({kinds}), "
                                "are not modelled (its layers hold different projections)")
    if x.multi_latent_attention and keys & set(_ATTENTION):
        # beside target_parameters the MLP's target modules are refused too (rank 2r): the
        # experts' adapters alone are counted (no targets); a job of them alone is refused by
        # memsym.job_checks_hf.check_expert_params_alone (the frozen MLA attention measured)
        raise InvalidValueError(f"LoRA on {x.name!r}'s attention: MLA's projections (q/kv down "
                                "and up) are not modelled as q, k, v, o targets; " + (
                                    "a job of the experts' target parameters alone is not "
                                    "modelled" if expert_params else "target the MLP"))
    if x.num_experts and keys - set(_ATTENTION) and x.moe_latent_size:
        raise InvalidValueError("LoRA on latent MoE experts (moe_latent_size) is not modelled")


def lora_layer_adapters(arch, rank: int, targets=("q", "v"), *, fused: bool = False,
                        moe: bool = False, dora: bool = False, expert_params=()) -> dict:
    r"""One decoder layer's trainable LoRA parameters, by how they shard [parameters].

    .. math:: N = r\,(d_{in} + d_{out})\;(+\,d_{out}\text{ under DoRA}) \text{ per adapter}

    ``"tp"``: split over the t tensor-parallel ranks (attention, dense MLP, shared experts);
    ``"expert"``: Megatron-Bridge's adapter shared by a layer's grouped experts, split over
    the t_e expert-TP ranks and held whole by every EP rank; ``"experts"``: PEFT's per-expert
    adapters of all E experts, split as the experts are (over e t_e).  See the module's
    docstring for the sources.

    Parameters
    ----------
    arch : memsym.model.Architecture
    rank : int
        LoRA rank r [1].
    targets : iterable of str
        Subset of :data:`LORA_TARGETS` (``"all"`` for every one).
    fused : bool
        Megatron-Bridge's modules (linear_qkv, linear_fc1); else PEFT's separate projections.
    moe : bool
        The layer is an MoE layer.
    dora : bool
        PEFT's DoRA (``use_dora=True``): each adapted matrix adds its magnitude vector,
        ``nn.Parameter(weight_norm)`` of :math:`d_{out}` (peft v0.20.0
        src/peft/tuners/lora/dora.py:124-130); PEFT's separate projections only.
    expert_params : tuple of str
        PEFT's ``target_parameters`` on the fused routed experts, from ``("gate_up",
        "down")``: a ``ParamWrapper`` of rank r on each named 3-D parameter [E, in, out],
        ``lora_A = Linear(in, r E)``, ``lora_B = Linear(r E, out)`` (peft v0.20.0
        src/peft/tuners/lora/layer.py:2289-2349): E r (h + 2 f_e) for gate_up_proj,
        E r (f_e + h) for down_proj (:func:`expert_parameter_adapters`).

    Examples
    --------
    Qwen3-30B-A3B's MoE layer at r = 8 under Bridge, q and v (CanonicalLoRA) and the
    grouped experts' linear_fc1 and linear_fc2: 8 (2048 + 4096) + 8 (2048 + 512) = 69632
    split over TP, 8 (2048 + 2 * 768) + 8 (768 + 2048) = 51200 shared by the experts:

    >>> from memsym.model import preset
    >>> lora_layer_adapters(preset("qwen3-30b-a3b"), 8, ("q", "v", "gate", "up", "down"),
    ...                     fused=True, moe=True)
    {'tp': 69632, 'expert': 51200, 'experts': 0}

    DoRA on Llama-3-8B's q and v at r = 16: 16 (4096 + 4096) + 16 (4096 + 1024) LoRA weights
    and the magnitudes 4096 + 1024:

    >>> lora_layer_adapters(preset("llama3-8b"), 16, ("q", "v"), dora=True)["tp"]
    218112

    References
    ----------
    .. [bridge] src/megatron/bridge/peft/lora.py:159-262, peft/utils.py:549-706, 923-1349 at
       067f987df0.
    .. [peft] huggingface/peft v0.20.0, src/peft/utils/transformers_weight_conversion.py:332-482;
       transformers 5.25.0, models/qwen3_moe/modeling_qwen3_moe.py:211-220.
    """
    if isinstance(rank, bool) or int(rank) != rank or rank < 1:
        raise InvalidValueError(f"LoRA rank must be a whole number >= 1, got {rank!r}")
    x, rank = lenient(arch), int(rank)
    keys = {lower_choice("LoRA target", name, LORA_TARGETS)
            for name in (LORA_TARGETS if targets == "all" else targets)}
    if not x.swiglu:
        keys.discard("gate")  # an ungated MLP has no gate projection
    _check(x, keys, expert_params)
    hs, q = x.hidden_size, x.num_attention_heads * x.kv_channels
    kv = x.num_query_groups * x.kv_channels

    def shapes(f):
        return {"q": (hs, q), "k": (hs, kv), "v": (hs, kv), "o": (q, hs),
                "gate": (hs, f), "up": (hs, f), "down": (f, hs)}

    groups = _groups(keys, x.swiglu, fused)
    attention = [g for g in groups if g[0] in _ATTENTION]
    mlp = [g for g in groups if g[0] not in _ATTENTION]
    if dora and (fused or moe and mlp):
        raise InvalidValueError("DoRA is PEFT's, on nn.Linear projections: not on Megatron's "
                                "fused modules nor on transformers 5's fused MoE experts")
    if not moe:
        return {"tp": _count(groups, shapes(x.ffn_hidden_size), rank)
                + (_magnitudes(groups, shapes(x.ffn_hidden_size)) if dora else 0),
                "expert": 0, "experts": 0}
    out = {"tp": _count(attention, shapes(1), rank)
           + (_magnitudes(attention, shapes(1)) if dora else 0), "expert": 0, "experts": 0}
    if expert_params:
        out["experts"] = expert_parameter_adapters(x, rank, expert_params, keys, fused)
    if not mlp:
        return out
    fe, fs = x.moe_ffn_hidden_size, x.moe_shared_expert_intermediate_size
    if fused:
        # grouped experts: linear_fc1 whole even under CanonicalLoRA (canonical_lora.py:46)
        whole = [("gate", "up") if x.swiglu else ("up",)] if keys & {"gate", "up"} else []
        out["expert"] = _count(whole + [("down",)] * ("down" in keys), shapes(fe), rank)
        out["tp"] += _count(mlp, shapes(fs), rank) if fs else 0
        return out
    return _peft_experts(x, keys, out, rank, shapes(fe))


#: The model types whose fused experts PEFT 0.20.0's v5 target conversion reaches: PEFT's own
#: "mixtral" and the types transformers 5.25.0 maps to the "mixtral" or "qwen2_moe" conversion
#: (conversion_mapping.py:49-79 at 5.25.0; peft utils/transformers_weight_conversion.py:44-45,
#: 413-416 at v0.20.0: any other type keeps its targets, which name no expert module).
PEFT_MOE_TYPES = frozenset((
    "mixtral", "minimax", "minimax_m2", "Dots3NoteTextModel", "afmoe", "deepseek_v2",
    "deepseek_v3", "deepseek_v32", "dots1", "ernie4_5_moe", "glm4_moe", "glm4_moe_lite",
    "glm_moe_dsa", "glm4v_moe", "longcat_flash", "solar_open", "mellum", "qwen3_moe", "beam",
    "qwen3_omni_moe", "qwen3_omni_moe_thinker", "qwen3_omni_moe_text", "qwen3_next",
    "hunyuan_v1_moe", "flex_olmo", "olmoe", "sarvam_mla", "exaone_moe", "cohere2_moe"))

#: memsym's MoE presets -> their config.json ``model_type`` (a hub-read model carries its own
#: in ``extra["hf_model_type"]``).
def _peft_experts(x, keys, out: dict, rank: int, shape: dict) -> dict:
    # PEFT >= 0.19 on transformers 5's fused experts (see the module's docstring)
    mtype = (x.extra or {}).get("hf_model_type") or PRESET_MODEL_TYPES.get(x.name)
    if mtype not in PEFT_MOE_TYPES or not x.swiglu:
        raise InvalidValueError(f"LoRA on {x.name!r}'s routed experts under PEFT (model_type "
                                f"{mtype!r}): PEFT 0.20.0 reaches transformers 5's fused experts "
                                "for Mixtral- and Qwen2-MoE-style types only; target attention")
    if x.moe_shared_expert_intermediate_size or not all(moe_layer_pattern(x)):
        raise InvalidValueError(f"LoRA on {x.name!r}'s MLP under PEFT: transformers 5's "
                                "target conversion moves gate/up/down to the routed experts' "
                                "fused parameters, so its dense or shared-expert MLPs' "
                                "adapters are not modelled; target attention only")
    if len(keys & {"gate", "up"}) == 1:
        raise InvalidValueError("LoRA on the routed experts under PEFT: gate and up are one "
                                "fused gate_up_proj parameter in transformers 5; target both "
                                "or neither (PEFT refuses one alone)")
    h, f = shape["down"][1], shape["down"][0]
    gate_up = 2 * rank * (h + 2 * f) if "up" in keys else 0      # gate_up_proj at rank 2r
    down = rank * (f + h) if "down" in keys else 0
    out["experts"] = x.num_experts * (gate_up + down)
    return out


#: The model types whose routed experts transformers 5.25.0 builds as two fused 3-D parameters
#: named gate_up_proj [E, 2 f_e, h] and down_proj [E, h, f_e] (no bias) under ``mlp.experts``,
#: the names ``--lora_target_parameters`` may give; models/<type>/modeling_<type>.py, the two
#: parameters, then the shared expert(s) and the dense layers' condition where the type has
#: them: qwen3_moe :219-220; mixtral :65-66; olmoe :287-288; gpt_oss :74-76; qwen2_moe
#: :280-281, ``shared_expert`` :337, ``mlp_only_layers`` / ``decoder_sparse_step`` :358-363;
#: deepseek_v2 :54-55, :125, ``first_k_dense_replace`` :412; deepseek_v3 :169-170, :210,
#: :477-480; deepseek_v32 :532-533, :573, ``mlp_layer_types`` :593; glm4_moe :340-341, :381,
#: :402-405; glm4_moe_lite :430-431, :471, :491; glm_moe_dsa :505-506, :546, :566; dots1
#: :322-323, :363, :384-387; ernie4_5_moe :305-306, :369-371, ``moe_layer_interval`` /
#: ``moe_layer_start_index`` :397-404; hunyuan_v1_moe :254-255, ``shared_mlp`` :291;
#: exaone_moe :278-279, :319, :338-339; solar_open :153-154, :194; cohere2_moe :110-111,
#: :177, :352-354; afmoe :165-166, :208, ``num_dense_layers`` :412-416.  Their shared experts
#: and dense MLPs are ``nn.Linear`` modules: ``target_parameters`` matches a parameter's full
#: name ``<module>.<parameter>`` by suffix (peft v0.20.0 tuners_utils.py:1165-1166), so
#: ``mlp.experts.down_proj`` (or ``down_proj``) never reaches ``mlp.shared_experts.down_proj.
#: weight``: every type here gets E adapters per MoE layer and none elsewhere.
EXPERT_PARAMETER_TYPES = frozenset((
    "qwen3_moe", "mixtral", "olmoe", "gpt_oss", "qwen2_moe", "deepseek_v2", "deepseek_v3",
    "deepseek_v32", "glm4_moe", "glm4_moe_lite", "glm_moe_dsa", "dots1", "ernie4_5_moe",
    "hunyuan_v1_moe", "exaone_moe", "solar_open", "cohere2_moe", "afmoe"))


def expert_parameter_adapters(arch, rank: int, expert_params, keys=(), fused=False) -> int:
    r"""PEFT's ``target_parameters`` adapters of one MoE layer's routed experts [parameters].

    .. math:: N = E\,r\,(h + 2 f_e)\,[\text{gate\_up}] + E\,r\,(f_e + h)\,[\text{down}]

    A ``ParamWrapper`` on a 3-D parameter [E, in, out] builds ``lora_A = Linear(in, r E)``
    and ``lora_B = Linear(r E, out)``, no bias: one rank-r adapter per expert, held as two
    matrices (peft v0.20.0 src/peft/tuners/lora/layer.py:2289-2349).  Counted for an MoE
    layer only: a dense layer's MLP and an MoE layer's shared expert(s) are ``nn.Linear``
    modules, which no ``target_parameters`` name reaches, so they get none (the model's total
    sums this over its MoE layers alone, :func:`lora_parameter_count`).  Refused in one line
    outside :data:`EXPERT_PARAMETER_TYPES`, under Megatron (``fused``) and beside MLP
    ``target_modules`` (PEFT's v5 conversion would move those to the same parameters at
    rank 2r).

    Examples
    --------
    Qwen3-30B-A3B (h 2048, f_e 768, E 128) at r = 8 on both: 128 * 8 * (2048 + 1536 + 768 +
    2048):

    >>> from memsym.model import preset
    >>> expert_parameter_adapters(preset("qwen3-30b-a3b"), 8, ("gate_up", "down"))
    6553600

    DeepSeek-V3 (h 7168, f_e 2048, E 256; one shared expert, the first three layers dense) at
    r = 16 on down_proj, one MoE layer's: 256 * 16 * (2048 + 7168):

    >>> expert_parameter_adapters(preset("deepseek-v3"), 16, ("down",))
    37748736

    References
    ----------
    .. [peft] huggingface/peft v0.20.0, src/peft/tuners/lora/layer.py:2236-2349,
       src/peft/tuners/tuners_utils.py:1165-1166 (the suffix match).
    .. [hf] transformers 5.25.0, the modeling files of :data:`EXPERT_PARAMETER_TYPES`
       (models/deepseek_v3/modeling_deepseek_v3.py:161-170, 210, 477-480 among them).
    """
    x = lenient(arch)
    mtype = (x.extra or {}).get("hf_model_type") or PRESET_MODEL_TYPES.get(x.name)
    if fused or mtype not in EXPERT_PARAMETER_TYPES:
        raise InvalidValueError(f"LoRA target parameters on {x.name!r} (model_type {mtype!r}"
                                f"{', Megatron' if fused else ''}): read for PEFT on the fused "
                                f"experts of {', '.join(sorted(EXPERT_PARAMETER_TYPES))}")
    if set(keys) & {"gate", "up", "down"}:
        raise InvalidValueError("LoRA target parameters beside gate/up/down target modules on an"
                                " MoE model: PEFT moves those onto the same expert parameters "
                                "at rank 2r; give attention target modules only")
    bad = [n for n in expert_params if n not in ("gate_up", "down")]
    if bad or len(set(expert_params)) != len(expert_params) or not expert_params:
        raise InvalidValueError(f"LoRA expert parameters {list(expert_params)!r}: give "
                                "gate_up and/or down once each")
    h, f = x.hidden_size, x.moe_ffn_hidden_size
    return x.num_experts * rank * ((h + 2 * f) * ("gate_up" in expert_params)
                                   + (f + h) * ("down" in expert_params))


def lora_parameter_count(arch, rank: int, targets=("q", "v"), *, fused: bool = False,
                         expert_params=()) -> int:
    """Exact trainable LoRA parameters of an architecture: r(d_in + d_out) per adapter, over
    every decoder layer (:func:`lora_layer_adapters`; Bridge's shared expert adapter once per
    layer, PEFT's per-expert ones E times; Bridge's MTP layers' adapters are the stage's,
    :func:`memsym.training.stage_counts`).

    Equals :func:`lora_parameters` when every target is square (d_in = d_out = h).  Under
    Megatron (``fused``) Q, K and V are one module, linear_qkv (h -> q + 2kv), and a gated
    MLP's gate and up one, linear_fc1 (h -> 2f): Megatron-Bridge puts one adapter on each
    module (``LoRA.transform``, src/megatron/bridge/peft/lora.py:159-250 at 067f987df0:
    one ``ParallelLinearAdapter`` of the module's in and out features), so the fused group is
    one matrix there.

    Parameters
    ----------
    arch : memsym.model.Architecture
    rank : int
        LoRA rank r.
    targets : iterable of str
        Subset of :data:`LORA_TARGETS` (``"all"`` for every linear layer).
    expert_params : tuple of str
        PEFT's ``target_parameters`` on the fused experts (:func:`expert_parameter_adapters`).

    Examples
    --------
    >>> from memsym.model import preset
    >>> lora_parameter_count(preset("gpt3-175b"), 8)
    37748736

    Llama-3 8B at r = 8 on Bridge's four modules: r(h + q + 2kv) + r(q + h) + r(h + 2f) +
    r(f + h) = 8 (10240 + 8192 + 32768 + 18432) = 557056 per layer, 32 layers:

    >>> lora_parameter_count(preset("llama3-8b"), 8, "all", fused=True)
    17825792
    """
    x = lenient(arch)
    pattern = moe_layer_pattern(x)
    kinds = {kind: sum(lora_layer_adapters(x, rank, targets, fused=fused, moe=kind,
                                           expert_params=expert_params).values())
             for kind in set(pattern)}
    return sum(kinds[kind] for kind in pattern)
