"""TRL's SFT launch (``trl sft ...``, ``python trl/scripts/sft.py ...``) read as a Trainer job.

TRL's ``sft`` script parses ``ScriptArguments``, ``SFTConfig``, ``ModelConfig`` and
``DatasetMixtureConfig`` with ``TrlParser`` (an ``HfArgumentParser``: huggingface/trl at
f2cd57710a, trl/scripts/sft.py:122-130); ``trl sft`` imports that script's ``make_parser`` and
starts it under ``accelerate launch``, handing it the options its parser does not take (so
``--num_processes N`` is Accelerate's: trl/cli/commands/training.py:50-68).  ``SFTConfig``
subclasses ``TrainingArguments`` through ``_BaseConfig`` and changes three defaults memsym reads:

* ``gradient_checkpointing`` True (trl/trainer/base_config.py:61-66): memsym's full recompute;
* ``bf16`` None, set to ``not fp16`` (base_config.py:67-75, 104-105): bf16 unless ``--fp16``;
* ``max_length`` 1024 (trl/trainer/sft_config.py:205): the sequence, truncated to it (a shorter
  batch is padded to its longest; memsym counts the bound).

``ModelConfig`` (trl/trainer/model_config.py) loads the model at ``dtype`` (default
``"float32"``, :89-95; sft.py:74-79 passes it to ``from_pretrained``) and, with ``--use_peft``,
``get_peft_config`` (trl/trainer/utils.py:254-279) builds PEFT's ``LoraConfig(r=lora_r,
target_modules=lora_target_modules, ...)``: memsym's LoRA of rank ``lora_r`` on the targets.
``lora_target_modules`` None takes PEFT's default for the model type
(``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``, huggingface/peft at 5d602fdbff
src/peft/utils/constants.py:67-108: ``q_proj``, ``v_proj`` for the Llama-style types read
here); ``all-linear`` (constants.py:404) every linear layer but the output layer.  ``lora_dropout``
(default 0.05, :115) above 0 is memsym's ``--lora-dropout`` and ``--use_dora`` (:142) its
``--dora`` (:mod:`memsym.terms.peft_lora` counts what each keeps).
``--lora_target_parameters`` (:123, PEFT's ``target_parameters``) names the fused routed
experts' ``mlp.experts.gate_up_proj`` / ``down_proj`` of the MoE types whose experts
transformers 5 builds so (memsym's ``--lora-expert-params``: a ``ParamWrapper`` of rank
``lora_r`` each, :func:`memsym.model.lora_counts.expert_parameter_adapters`, and the merged
weight each forward keeps, :func:`memsym.terms.peft_lora.peft_expert_weights`); without
``--lora_target_modules`` the experts alone (``--lora-targets none``: PEFT applies no default
beside them on these types, :func:`peft_default_targets`; refused on MLA models); PEFT's
``ParamWrapper`` raises on ``lora_dropout`` > 0 (TRL's default 0.05) and on DoRA, refused here.
``--load_in_4bit`` (``get_quantization_config``, utils.py:235-252: ``bnb_4bit_quant_type``
default nf4, ``use_bnb_nested_quant`` default False) is QLoRA's NF4 base.

``loss_type`` None is ``chunked_nll`` (sft_config.py:283-295, 334-336): memsym's
``--chunked-loss`` (:mod:`memsym.terms.chunked_loss`; with ``--use_peft`` TRL patches the
base model, whose ``lm_head`` stays frozen: no weight gradient); ``nll`` the model's own loss.

What memsym does not count is refused in one line (:data:`REFUSED`).
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..limits import check_limit
from ..model.lora_counts import EXPERT_PARAMETER_TYPES, PEFT_MOE_TYPES
from ..text import short
from ._values import MAX_SEQ, whole
from .hf_trainer_args import flag_value

__all__ = ["TRL_FIELDS", "REFUSED", "PEFT_TARGETS", "trl_field", "trl_script", "trl_defaults",
           "read_trl", "peft_default_targets", "TRL", "PEFT"]

TRL = "huggingface/trl f2cd57710a"
PEFT = "huggingface/peft 5d602fdbff"
_SFT = f"{TRL} trl/trainer/sft_config.py"
_MODEL = f"{TRL} trl/trainer/model_config.py"
_BASE = f"{TRL} trl/trainer/base_config.py"
_PEFT_MAP = f"{PEFT} src/peft/utils/constants.py:67-108"

_Q, _P = "?", "+"
#: TRL's own fields (the sft script's four dataclasses) -> (HfArgumentParser arity, where):
#: a ``bool`` takes an optional value, a ``list`` one or more, the rest one.
TRL_FIELDS = {
    **{n: (a, f"{_SFT}:{line}") for n, a, line in (
        ("model_init_kwargs", 1, 149), ("router_aux_loss_coef", 1, 156),
        ("trust_remote_code", _Q, 164), ("chat_template_path", 1, 171),
        ("dataset_text_field", 1, 182), ("dataset_kwargs", 1, 186), ("dataset_num_proc", 1, 195),
        ("eos_token", 1, 199), ("max_length", 1, 205), ("truncation_mode", 1, 213),
        ("shuffle_dataset", _Q, 221), ("packing", _Q, 225), ("packing_strategy", 1, 232),
        ("padding_free", _Q, 241), ("pad_to_multiple_of", 1, 251), ("eval_packing", _Q, 255),
        ("completion_only_loss", _Q, 261), ("assistant_only_loss", _Q, 273),
        ("loss_type", 1, 283), ("activation_offloading", _Q, 296), ("pad_token", 1, 302))},
    **{n: (a, f"{_MODEL}:{line}") for n, a, line in (
        ("model_name_or_path", 1, 81), ("model_revision", 1, 85), ("dtype", 1, 89),
        ("attn_implementation", 1, 96), ("use_peft", _Q, 103), ("lora_r", 1, 107),
        ("lora_alpha", 1, 111), ("lora_dropout", 1, 115), ("lora_target_modules", _P, 119),
        ("lora_target_parameters", _P, 123), ("lora_modules_to_save", _P, 127),
        ("lora_task_type", 1, 131), ("use_rslora", _Q, 135), ("use_dora", _Q, 142),
        ("load_in_8bit", _Q, 152), ("load_in_4bit", _Q, 156), ("bnb_4bit_quant_type", 1, 160),
        ("use_bnb_nested_quant", _Q, 164), ("bnb_4bit_quant_storage", 1, 168))},
    **{n: (a, f"{TRL} trl/scripts/utils.py:{line}") for n, a, line in (
        ("datasets", _P, 121), ("streaming", _Q, 125), ("test_split_size", 1, 129),
        ("dataset_name", 1, 169), ("dataset_config", 1, 173), ("dataset_train_split", 1, 180),
        ("dataset_test_split", 1, 184), ("dataset_streaming", _Q, 188),
        ("ignore_bias_buffers", _Q, 195))},
}

#: Switches memsym does not model (refused when on) -> why.
REFUSED = {
    "packing": "packing (sft_config.py:225) concatenates examples into padding-free rows "
               "(sft_trainer.py:1143): memsym counts b padded sequences of max_length",
    "padding_free": "padding_free (sft_config.py:241) flattens the batch into one row "
                    "(sft_trainer.py:473-498): memsym counts b padded sequences of max_length",
    "activation_offloading": "activation_offloading (sft_config.py:296) moves saved "
                             "activations to the CPU: not modelled",
    "load_in_8bit": "8-bit bitsandbytes (model_config.py:152): its per-row scales and "
                    "outliers are not modelled (QLoRA's --load_in_4bit nf4 is)",
}
#: Lists memsym does not model (refused when given) -> why.
_REFUSED_LISTS = {
    "lora_modules_to_save": "lora_modules_to_save (model_config.py:127) trains full copies of "
                            "those modules: memsym counts the adapters only",
    "model_init_kwargs": "model_init_kwargs (sft_config.py:149) can change the loading dtype "
                         "and quantization: give --dtype / --load_in_4bit",
    "bnb_4bit_quant_storage": "bnb_4bit_quant_storage (model_config.py:168) changes the "
                              "4-bit storage dtype: not modelled",
}

#: PEFT module names -> memsym's LoRA targets (memsym.terms.adapters.LORA_TARGETS).
_MODULES = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "gate_proj": "gate",
            "up_proj": "up", "down_proj": "down"}
#: The model types whose PEFT default is ["q_proj", "v_proj"] that memsym reads
#: (constants.py:85, 95, 99, 100, 101, 103, 104); Mixtral's (:96) is never applied under
#: transformers 5 (:func:`peft_default_targets`).
PEFT_TARGETS = {t: ("q", "v") for t in ("llama", "mistral", "gemma", "gemma2",
                                          "gemma3_text", "qwen2", "qwen3")}


def trl_field(option: str) -> str | None:
    """The TRL field an option names (``--lora_r``, ``--lora-r``), or None.

    Examples
    --------
    >>> trl_field("--lora-target-modules"), trl_field("--bf16")
    ('lora_target_modules', None)
    """
    if not option.startswith("--"):
        return None
    for spelled in (option[2:], option[2:].replace("-", "_")):
        if spelled in TRL_FIELDS:
            return spelled
    return None


def trl_script(name: str) -> bool:
    """Whether ``name`` is TRL's SFT script (``trl/scripts/sft.py``, ``trl.scripts.sft``);
    another TRL script is refused in one line.

    Examples
    --------
    >>> trl_script("trl/scripts/sft.py"), trl_script("run_clm.py")
    (True, False)
    """
    if name in ("trl.scripts.sft", "sft") or name.endswith("trl/scripts/sft.py"):
        return True
    if name.startswith("trl.") or "trl/scripts/" in name or "trl/cli" in name:
        raise InvalidValueError(f"{name[:60]}: memsym reads TRL's SFT (trl sft, "
                                "trl/scripts/sft.py); other TRL trainers are not read")
    return False


def trl_defaults(out):
    """SFTConfig's own defaults of TrainingArguments' fields, put in ``out.values`` before the
    Trainer's reading (each said as a default): gradient checkpointing on, bf16 unless fp16."""
    v = out.values
    if "gradient_checkpointing" not in v and "activation_checkpointing" not in v:
        v["gradient_checkpointing"] = ["true"]
        out.defaults.append(("gradient_checkpointing", True, f"{_BASE}:61-66, _BaseConfig: "
                             "default True (full recompute)"))
    loss = v.get("loss_type", [None])[0]
    if loss == "chunked_nll" and "use_liger_kernel" in v and flag_value(v["use_liger_kernel"],
                                                                        "use_liger_kernel"):
        raise InvalidValueError("loss_type chunked_nll with --use_liger_kernel: TRL refuses them "
                                "together (sft_trainer.py:1325-1326)")
    if "bf16" not in v:
        bf16 = not ("fp16" in v and flag_value(v["fp16"], "fp16"))
        v["bf16"] = ["true" if bf16 else "false"]
        out.defaults.append(("bf16", bf16, f"{_BASE}:67-75, 104-105: bf16 = not fp16"))


def read_trl(out):
    """TRL's own fields of ``out.values``: the sequence (``max_length``), the loss, the loading
    dtype and LoRA / QLoRA (``out.lora``, its targets None for PEFT's default:
    :func:`peft_default_targets`); refusals in one line."""
    v = out.values
    for name, why in {**REFUSED, **_REFUSED_LISTS}.items():
        if name in v and (name in _REFUSED_LISTS or flag_value(v[name], name)):
            raise InvalidValueError(f"--{name}: {why}")
    _read_loss(v, out)
    if "max_length" in v:
        out.seq_length = check_limit("sequence", whole(v["max_length"][0], "--max_length", 1,
                                                       MAX_SEQ), "--max_length")
    else:
        out.seq_length = 1024
        out.defaults.append(("max_length", 1024, f"{_SFT}:205"))
    out.notes.append(f"sequence length {out.seq_length}: SFTConfig.max_length truncates each "
                     "example; a batch of shorter ones is padded to its longest (memsym counts "
                     "the bound)")
    if "dtype" not in v:
        v["dtype"] = ["float32"]
        out.defaults.append(("dtype", "float32", f"{_MODEL}:89-95 (sft.py:74-79 loads at it)"))
    if "attn_implementation" in v and v["attn_implementation"][0] == "eager":
        raise InvalidValueError("--attn_implementation eager keeps the attention scores: memsym "
                                "counts a fused attention (sdpa, flash_attention_2)")
    task = v.get("lora_task_type", ["CAUSAL_LM"])[0]
    if task != "CAUSAL_LM":
        raise InvalidValueError(f"--lora_task_type {task[:20]}: memsym reads CAUSAL_LM")
    out.ignored += sorted(n for n in v if n in TRL_FIELDS and n not in (
        "max_length", "loss_type", "dtype", "model_name_or_path", "use_peft", "lora_r",
        "lora_target_modules", "load_in_4bit", "bnb_4bit_quant_type", "use_bnb_nested_quant",
        "lora_dropout", "use_dora", "lora_target_parameters"))
    if "use_peft" in v and flag_value(v["use_peft"], "use_peft"):
        if "chat_template_path" in v:
            raise InvalidValueError("--chat_template_path with --use_peft: tokens the template "
                                    "adds make lm_head trainable (modules_to_save, "
                                    "sft_trainer.py:1056-1076), which memsym does not count")
        out.lora = _lora(v, out)
    elif any(n in v for n in ("load_in_4bit", "lora_r", "lora_target_modules")) and \
            ("load_in_4bit" not in v or flag_value(v["load_in_4bit"], "load_in_4bit")):
        raise InvalidValueError("LoRA's arguments without --use_peft: TRL builds no adapter "
                                "(utils.py:254-256); give --use_peft")


def _read_loss(v, out) -> None:
    """``loss_type``: ``nll`` the model's own loss over the whole logits; ``chunked_nll`` (the
    default, sft_config.py:283-295, 334-336) TRL's chunked loss (``out.chunked_loss``:
    :mod:`memsym.terms.chunked_loss`; with ``--use_peft`` on the base model, its ``lm_head``
    frozen: sft_trainer.py:1306-1319), refused with a LoRA adapter on ``lm_head`` as TRL
    refuses one (:1307-1318; ``lm_head`` in ``lora_modules_to_save``, which would train it, is
    refused as every ``lora_modules_to_save``), under DeepSpeed counted as its engine runs it
    (no autocast; ZeRO-3's ``lm_head`` gathered per chunk, trl/trainer/utils.py:188-220:
    :mod:`memsym.terms.chunked_loss`, :func:`memsym.job_checks_hf.check_chunked_loss`);
    ``dft`` refused."""
    loss = v.get("loss_type", [None])[0]
    if loss is None:
        loss = "chunked_nll"
        out.defaults.append(("loss_type", "chunked_nll", f"{_SFT}:283-295, 334-336 (None: "
                             "chunked_nll unless use_liger_kernel)"))
    if loss == "dft":
        raise InvalidValueError("loss_type dft: dft_loss (sft_trainer.py:773-788) runs "
                                "selective_log_softmax (utils.py:479-518) row by row over the "
                                "whole logits, each row's log-softmax kept in the logits' dtype, "
                                "not the nll loss's fp32 one: not modelled (give nll or "
                                "chunked_nll)")
    if loss not in ("nll", "chunked_nll"):
        raise InvalidValueError(f"loss_type {short(loss, 20)}: TRL supports nll, dft and chunked_nll "
                                "(sft_trainer.py:1320-1324)")
    out.chunked_loss = loss == "chunked_nll"
    peft = "use_peft" in v and flag_value(v["use_peft"], "use_peft")
    if out.chunked_loss and peft and any("lm_head" in w for w in v.get("lora_target_modules", [])):
        raise InvalidValueError("loss_type chunked_nll with lm_head in --lora_target_modules: TRL "
                                "refuses a PEFT adapter on lm_head (sft_trainer.py:1307-1318)")


def _lora(v, out) -> dict:
    """memsym's LoRA of ``get_peft_config``'s LoraConfig (and QLoRA's 4-bit base)."""
    rank = whole(v["lora_r"][0], "--lora_r", 1, 65536) if "lora_r" in v else 16
    if "lora_r" not in v:
        out.defaults.append(("lora_r", 16, f"{_MODEL}:107"))
    targets = _targets(v.get("lora_target_modules"))
    dora = "use_dora" in v and flag_value(v["use_dora"], "use_dora")
    lora = {"finetune": "lora", "rank": rank, "targets": targets, "quantization": None,
            "dropout": _dropout(v, out), "dora": dora,
            "expert_params": _expert_params(v.get("lora_target_parameters"))}
    if lora["expert_params"] and (lora["dropout"] or dora or "load_in_4bit" in v
                                  and flag_value(v["load_in_4bit"], "load_in_4bit")):
        raise InvalidValueError("--lora_target_parameters with lora_dropout > 0 (TRL's default "
                                "0.05), --use_dora or --load_in_4bit: PEFT's ParamWrapper raises "
                                "on dropout and DoRA (peft v0.20.0 lora/layer.py:2265-2275) and "
                                "QLoRA's experts are not modelled; give --lora_dropout 0")
    if dora:
        out.notes.append("--use_dora: PEFT's DoRA (model_config.py:142, LoraConfig(use_dora=True)): "
                         "a trainable magnitude vector per adapted matrix, and each forward the "
                         "identity through lora_A and lora_B and the magnitude's products kept "
                         "(peft v0.20.0 lora/dora.py:93-165)")
    if "load_in_4bit" in v and flag_value(v["load_in_4bit"], "load_in_4bit"):
        kind = v.get("bnb_4bit_quant_type", ["nf4"])[0]
        if kind != "nf4":
            raise InvalidValueError(f"--bnb_4bit_quant_type {kind[:12]}: memsym counts "
                                    "bitsandbytes' NF4 (its fp4's block constants are not read)")
        nested = "use_bnb_nested_quant" in v and flag_value(v["use_bnb_nested_quant"],
                                                     "use_bnb_nested_quant")
        lora.update(finetune="qlora", quantization="nf4-dq" if nested else "nf4")
        out.notes.append("--load_in_4bit: QLoRA's NF4 base (utils.py:235-244), "
                         + ("nested (double) quantization" if nested else
                            "no nested quantization (use_bnb_nested_quant default False, "
                            "model_config.py:164)"))
    return lora


#: PEFT parameter names (``target_parameters``, matched as a suffix of the parameter's full
#: name: peft v0.20.0 tuners_utils.py:1141-1176) -> memsym's expert parameters.
_EXPERT_PARAMS = {f"{prefix}{name}_proj": name for name in ("gate_up", "down")
                  for prefix in ("", "experts.", "mlp.experts.")}


def _expert_params(given) -> tuple:
    """memsym's expert parameters of ``lora_target_parameters`` (model_config.py:123), the
    fused routed experts' ``gate_up_proj`` / ``down_proj``; another name refused in one line.

    Examples
    --------
    >>> _expert_params(["mlp.experts.down_proj", "mlp.experts.gate_up_proj"])
    ('gate_up', 'down')
    """
    if given is None:
        return ()
    names = [n.strip() for w in given for n in w.split(",") if n.strip()]
    bad = [n for n in names if n not in _EXPERT_PARAMS]
    if bad or not names:
        raise InvalidValueError(f"--lora_target_parameters {short(bad[0] if bad else '', 40)}: "
                                "memsym reads the fused experts' mlp.experts.gate_up_proj and "
                                "mlp.experts.down_proj")
    kept = {_EXPERT_PARAMS[n] for n in names}
    return tuple(n for n in ("gate_up", "down") if n in kept)


def _dropout(v, out) -> bool:
    """Whether ``lora_dropout`` (default 0.05, model_config.py:115) is above 0: PEFT builds an
    ``nn.Dropout`` before each ``lora_A`` (peft v0.20.0 lora/layer.py:251-254), whose dropped
    input copy and mask memsym counts; 0 is ``nn.Identity``."""
    text = v["lora_dropout"][0] if "lora_dropout" in v else None
    if text is None:
        out.defaults.append(("lora_dropout", 0.05, f"{_MODEL}:115"))
        return True
    try:
        p = float(text)
    except ValueError:
        p = -1.0
    if not 0 <= p < 1:
        raise InvalidValueError(f"--lora_dropout {text[:20]}: a probability in [0, 1)")
    return p > 0


def peft_default_targets(model_type, out, expert_params=()) -> tuple:
    """PEFT's default LoRA targets (``lora_target_modules`` None) for the checkpoint's
    ``model_type``, said as a default; refused in one line for a type not read here.

    PEFT applies its per-type default only while ``target_modules`` is still None
    (``_prepare_adapter_config``, peft v0.20.0 tuners/lora/model.py:573-583).  Under
    transformers 5 the MoE types with a v4 -> v5 checkpoint conversion (Mixtral's, Qwen2-MoE's
    pattern: memsym.model.lora_counts.PEFT_MOE_TYPES) first pass through
    ``_convert_peft_config_moe``, which sets ``target_modules = set(target_modules or [])``
    (utils/transformers_weight_conversion.py:438, called from tuners_utils.py:786-803 before
    :819), so no default is applied: Mixtral's ``["q_proj", "v_proj"]`` never is, and
    without ``target_parameters`` PEFT raises (tuners_utils.py:996-1001).  With
    ``lora_target_parameters`` on an :data:`~memsym.model.lora_counts.EXPERT_PARAMETER_TYPES`
    type (none of which has an entry in PEFT's default map but Mixtral) the job adapts the
    experts' parameters alone: ``()``.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> peft_default_targets("qwen3", SimpleNamespace(defaults=[]))
    ('q', 'v')
    >>> peft_default_targets("qwen3_moe", SimpleNamespace(defaults=[]), ("down",))
    ()
    """
    if expert_params and model_type in EXPERT_PARAMETER_TYPES:
        out.defaults.append(("lora_target_modules", "none", "huggingface/peft v0.20.0 "
                             "src/peft/tuners/lora/model.py:573-583 (target_parameters given: "
                             f"no default for model type {model_type}; "
                             "utils/transformers_weight_conversion.py:438)"))
        return ()
    if model_type in PEFT_MOE_TYPES:
        raise InvalidValueError(f"--lora_target_modules not given on model type {model_type}: "
                                "PEFT's v5 MoE conversion leaves target_modules empty and PEFT "
                                "raises (tuners_utils.py:996-1001); give them or "
                                "--lora_target_parameters")
    if model_type not in PEFT_TARGETS:
        raise InvalidValueError(f"--lora_target_modules not given: PEFT's default targets "
                                f"for model type {str(model_type)[:30]} are not read here; "
                                "give them (q_proj v_proj ..., or all-linear)")
    out.defaults.append(("lora_target_modules", "q_proj,v_proj",
                         f"{_PEFT_MAP}, model type {model_type}"))
    return PEFT_TARGETS[model_type]


def _targets(given):
    """memsym's targets of ``lora_target_modules`` (``"all"`` for every linear layer; None:
    PEFT's default for the model type, :func:`peft_default_targets`)."""
    if given is None:
        return None
    if given == ["all-linear"]:
        return "all"
    names = [n.strip() for w in given for n in w.split(",") if n.strip()]
    bad = [n for n in names if n not in _MODULES]
    if bad:
        raise InvalidValueError(f"--lora_target_modules {bad[0][:30]}: memsym adapts "
                                f"{', '.join(_MODULES)} or all-linear")
    kept = {_MODULES[n] for n in names}
    return tuple(t for t in ("q", "k", "v", "o", "gate", "up", "down") if t in kept)
