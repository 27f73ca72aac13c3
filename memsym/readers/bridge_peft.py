"""The PEFT section of a Megatron-Bridge fine-tuning recipe as memsym's LoRA options.

Bridge's SFT and PEFT recipes start from ``_sft_common()`` / ``_peft_common()``
(``recipes/common.py:136``, ``:238`` at 067f987df0); a PEFT recipe then sets
``cfg.peft = default_peft_config(peft_scheme)`` (``recipes/utils/dataset_utils.py:48-72``:
``LoRA()`` or ``DoRA()`` with the class's defaults, ``peft/lora.py:143-157``,
``peft/dora.py:59-67``) and changes ``dim``, ``alpha`` or ``target_modules``.  An SFT recipe
has ``peft=None``: full fine-tuning, memsym's ``finetune="full"``.  A LoRA recipe is
``finetune="lora"`` with ``lora_rank`` = ``dim``, the targets mapped from Megatron's module
names (:data:`LORA_MODULES`) and ``lora_regather`` = ``sequence_parallel_input_regather``.
What memsym does not count is refused (DoRA's magnitude vector and its weight-norm
activations, a separate adapter dtype, MoE adapter variants, wildcard or excluded modules) or
said in a note (dropout > 0, the A2A experimental path), each in one line.
"""

from __future__ import annotations

from ..errors import InvalidValueError

__all__ = ["PEFT_FIELDS", "LORA_MODULES", "recipe_peft", "lora_targets", "apply_mode", "recipe_mode",
           "check_peft", "fp8_base_note"]

#: The PEFT fields memsym reads (LoRA's dataclass fields, ``peft/lora.py:143-157``, and
#: ModuleMatcher's ``exclude_modules``), and the fine-tuning dataset's packing switch
#: (``GPTSFTDatasetConfig.enable_offline_packing``, set by ``default_squad_config``).
PEFT_FIELDS = ("peft.target_modules", "peft.exclude_modules", "peft.dim", "peft.alpha",
               "peft.dropout", "peft.dropout_position", "peft.sequence_parallel_input_regather",
               "peft.lora_dtype", "peft.a2a_experimental", "peft.normalize_moe_lora",
               "peft.share_expert_adapters", "peft.experts_shared_outer_loras",
               "dataset.enable_offline_packing")

#: Megatron's LoRA target modules -> memsym's adapted matrices
#: (:data:`memsym.terms.adapters.LORA_TARGETS`): linear_qkv is the fused Q, K, V projection,
#: linear_proj the attention output, linear_fc1 the fused gate and up projection of a SwiGLU
#: MLP, linear_fc2 the down projection (``peft/lora.py:100-107``).
LORA_MODULES = {"linear_qkv": ("q", "k", "v"), "linear_proj": ("o",),
                "linear_fc1": ("gate", "up"), "linear_fc2": ("down",)}


def lora_targets(modules) -> tuple:
    """memsym's adapted matrices of Bridge's ``target_modules``; a name that is not one of
    the four linear modules (a wildcard pattern, ``linear_kv_down_proj``) is refused.

    >>> lora_targets(["linear_qkv", "linear_proj"])
    ('q', 'k', 'v', 'o')
    """
    if not isinstance(modules, (list, tuple)) or not modules:
        raise InvalidValueError("peft.target_modules: give a list of Megatron's linear modules, "
                                f"e.g. [{', '.join(LORA_MODULES)}]")
    out = []
    for name in modules:
        if name not in LORA_MODULES:
            raise InvalidValueError(f"peft.target_modules {str(name)[:40]!r}: memsym models LoRA "
                                    f"on {', '.join(LORA_MODULES)} only (no patterns)")
        out += [m for m in LORA_MODULES[name] if m not in out]
    return tuple(out)


def _refuse_moe_variants(values, model):
    # LoRA on experts: memsym counts LoRA's defaults (lora.py:155-157 at 067f987df0), one
    # ParallelLinearAdapter shared by a layer's grouped experts, whole on every EP rank
    # (memsym.model.lora_layer_adapters); the other layouts are refused, naming the key
    if not getattr(model, "num_experts", None):
        return
    for key, default in (("peft.normalize_moe_lora", False), ("peft.share_expert_adapters", True),
                         ("peft.experts_shared_outer_loras", False)):
        if values.get(key, default) != default:
            raise InvalidValueError(f"{key}={values[key]!r}: this LoRA layout of the experts' "
                                    "adapters is not modelled (memsym counts Bridge's default, "
                                    "one adapter shared by a layer's grouped experts)")


def recipe_peft(values: dict, model, opts: dict, notes: list, computed=()) -> None:
    """Set ``opts``' fine-tuning options from a recipe's ``peft`` section (``notes``: what is
    read but not counted; ``computed``: the recipe's statements the generator did not read,
    of which one building ``cfg.peft`` in code refuses the recipe).

    Examples
    --------
    >>> opts, notes = {}, []
    >>> recipe_peft({"peft": "LoRA", "peft.dim": 8, "peft.target_modules": ["linear_qkv"],
    ...              "peft.dropout": 0.1}, None, opts, notes)
    >>> opts["finetune"], opts["lora_rank"], opts["lora_targets"], len(notes)
    ('lora', 8, ('q', 'k', 'v'), 1)
    """
    kind = values.get("peft")
    if values.get("dataset.enable_offline_packing"):
        notes.append("packed sequences (dataset.enable_offline_packing): each micro-batch is "
                     "counted as micro_batch_size x seq_length tokens")
    if kind is None:
        return
    built = [c for c in computed if "cfg.peft = " in c]
    if built:
        raise InvalidValueError(f"the recipe builds its PEFT in code ({built[0][:70]}...): "
                                "not read")
    if kind == "DoRA" or (isinstance(kind, str) and kind.lower() == "dora"):
        raise InvalidValueError("DoRA (peft=DoRA, --mode dora): its magnitude vector and "
                                "weight-norm activations are not modelled; memsym reads LoRA")
    if kind not in ("LoRA", "lora"):
        raise InvalidValueError(f"peft={str(kind)[:40]!r}: memsym reads Bridge's LoRA only")
    if values.get("peft.exclude_modules"):
        raise InvalidValueError("peft.exclude_modules: adapters on every linear but some are "
                                "not modelled; give peft.target_modules")
    if values.get("peft.lora_dtype") is not None:
        # lora.py:154: None is the model's params_dtype, the width memsym's Megatron path uses
        raise InvalidValueError(f"peft.lora_dtype={values['peft.lora_dtype']!r}: adapters in a "
                                "dtype other than the model's are not modelled")
    _refuse_moe_variants(values, model)
    dim = values.get("peft.dim", 32)            # lora.py:146
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise InvalidValueError(f"peft.dim must be a whole number >= 1, got {dim!r:.40}")
    opts["finetune"], opts["lora_rank"] = "lora", dim
    opts["lora_targets"] = lora_targets(values.get(
        "peft.target_modules", ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]))
    regather = values.get("peft.sequence_parallel_input_regather", False)
    if not isinstance(regather, bool):
        raise InvalidValueError("peft.sequence_parallel_input_regather must be true or false")
    opts["lora_regather"] = regather
    dropout = values.get("peft.dropout", 0.0)
    if dropout:
        notes.append(f"peft.dropout {dropout}: the adapters' dropout mask and input are not "
                     "counted (0.0 builds no dropout, peft/utils.py:1037)")
    if values.get("peft.a2a_experimental"):
        notes.append("peft.a2a_experimental: the adapters' all-to-all path is counted as the "
                     "default path")


#: The name's word -> the mode run_recipe.py infers from it, in its order
#: (``infer_recipe_mode``, scripts/training/recipe_metadata.py:214-225 at 067f987df0).
_NAMED_MODES = (("_pretrain_", "pretrain"), ("_sft_", "sft"), ("_finetune_", "sft"),
                ("_dora_", "dora"), ("_peft_", "lora"), ("_lora_", "lora"))


def recipe_mode(recipe: str, words=()) -> str | None:
    """The training mode run_recipe.py runs ``recipe`` in: the last ``--mode=X`` of the job's
    ``words`` (argparse keeps the last), else the one it infers from the recipe's name
    (``_infer_mode``, scripts/training/run_recipe.py:292-297; ``infer_recipe_mode``,
    recipe_metadata.py:214-225: a ``_peft_`` name is LoRA); None: neither (run_recipe.py
    refuses it).

    >>> recipe_mode("llama3_70b_peft_8gpu_h100_fp8cs_config"), recipe_mode("llama3_8b_sft_config")
    ('lora', 'sft')
    >>> recipe_mode("gemma2_2b_peft_config", ["--mode=dora"]), recipe_mode("x_config")
    ('dora', None)
    """
    given = [w[len("--mode="):] for w in words if w.startswith("--mode=")]
    if given:
        return given[-1]
    named = f"_{recipe.rsplit('.', 1)[-1].lower().strip('_')}_"
    return next((mode for word, mode in _NAMED_MODES if word in named), None)


def apply_mode(recipe: str, mode: str, values: dict) -> None:
    """run_recipe.py's ``--mode``: refused when it contradicts the recipe's name
    (``_validate_recipe_mode``, scripts/training/run_recipe.py:300-304, and ``recipe_task``,
    recipe_metadata.py:209-211: pretrain, sft, and lora/dora for a ``_peft_`` name); lora
    and dora are the recipe's ``peft_scheme`` (run_recipe.py:425), dora building DoRA."""
    inferred = recipe_mode(recipe)
    named = "peft" if inferred in ("lora", "dora") else inferred
    task = "peft" if mode in ("lora", "dora") else mode
    if named is not None and task != named:
        raise InvalidValueError(f"--mode {mode[:20]} is incompatible with recipe {recipe} "
                                "(run_recipe.py refuses it)")
    if mode == "dora":
        values["peft"] = "DoRA"


def check_peft(recipe: dict, values: dict, overridden) -> None:
    """Refuse PEFT overrides a recipe without PEFT cannot take: run_recipe.py refuses
    ``--mode lora`` on a recipe whose name is not a PEFT one (``_validate_recipe_mode``), and a
    ``peft.*`` field of a ``peft=None`` config has no object to set."""
    if recipe.get("peft") is None and values.get("peft") not in (None, "dora", "DoRA"):
        raise InvalidValueError(f"peft={values['peft']!r:.40}: the recipe has no PEFT; name "
                                "one of Bridge's *_peft_* recipes")
    stray = [k for k in overridden if k.startswith("peft.")]
    if stray and values.get("peft") is None:
        raise InvalidValueError(f"{stray[0]}: the recipe has no PEFT (peft=None, full "
                                "fine-tuning or pretraining)")


def fp8_base_note(opts: dict) -> list:
    """A note for LoRA over FP8 parameters under Megatron-FSDP, the one sharding whose frozen
    FP8 base memsym does not count as Bridge builds it.

    ``fp8_param_gather`` sets ``fp8_param`` (training/mixed_precision.py:81-100 at 067f987df0),
    under which Megatron-core builds the linear weights as FP8 parameters, frozen or not
    (``get_fp8_context(config, is_init=True)``: ``fp8_model_init`` where ``config.fp8_param``,
    Megatron-LM d98e8a64dd fp8_utils.py:848).  Under the distributed optimizer and DDP memsym
    counts them so (:func:`memsym.terms.megatron_lora.quantized_frozen_base`); under Megatron-FSDP
    it keeps the sharded 16-bit base with Transformer Engine's cached copies
    (:func:`memsym.terms.model_state.te_weight_cache`), more than Bridge holds.

    >>> len(fp8_base_note({"finetune": "lora", "fp8_param_gather": True, "sharding": "fsdp"}))
    1
    >>> fp8_base_note({"finetune": "lora", "fp8_param_gather": True,
    ...                "sharding": "distributed-optimizer"})
    []
    """
    if opts.get("finetune") != "lora" or not opts.get("fp8_param_gather") \
            or opts.get("sharding") != "fsdp":
        return []
    return ["LoRA with mixed_precision.fp8_param_gather under Megatron-FSDP: Bridge builds the "
            "frozen base as FP8 parameters (fp8_param, training/mixed_precision.py:81-100); "
            "memsym counts it as sharded 16-bit weights with Transformer Engine's cached FP8 "
            "copies, more than Bridge holds"]
