"""Read a Megatron-Bridge recipe (a recipe name and Hydra-style ``section.field=value``
overrides) as a memsym job: the model preset and the layout, training and precision options.

A Bridge job is ``python scripts/training/run_recipe.py --recipe NAME [-tp N ...]
[section.field=value ...]`` (``scripts/training/run_recipe.py`` at Megatron-Bridge
``067f987df0``).  The recipe's values are the table :data:`memsym.readers._bridge_recipes.RECIPES`,
generated from the recipe functions' source by ``python -m tools.bridge_recipes`` (read with
:mod:`ast`, never executed); what a recipe computes in code is transcribed here by hand with
its file:line.  Bridge's performance recipes (``perf_recipes/<family>/<system>/``, e.g.
``llama3_70b_pretrain_64gpu_h100_fp8cs_config``, and the SFT and LoRA ones such as
``llama3_70b_sft_32gpu_h100_fp8cs_config`` on the fine-tuning recipes) are read the same way
(:data:`memsym.readers._bridge_recipes.PERF_RECIPES`: the base recipe with the perf helpers'
precision, bf16 gradient reduction, recompute modules, layout, offloading, CUDA graphs and
dispatcher); what memsym does not count is said in a note, NVFP4 is read as fp4.  A name
both packages export is the perf recipe, as run_recipe.py reads it, the library one its
module path or Bridge's alias (:mod:`memsym.readers.bridge_names`).  An override is applied
with Bridge's meaning for the fields memsym models (:data:`FIELDS`); a field of a known
section memsym does not model is listed as ignored; an unknown section is refused.  Override values are read as literals (integers, decimals,
true/false, null, quoted strings, ``[lists]``), never evaluated
(:mod:`memsym.readers.bridge_command`, with run_recipe.py's own options).

Sources (Megatron-Bridge 067f987df0 unless said): ``recipes/common.py:_pretrain_common``;
``training/mixed_precision.py`` (the precision recipes; a recipe's fields replace the DDP
config's fields of the same name, ``update_config_with_precision_overrides``);
``training/setup.py:762-784`` (``use_tokenizer_vocab_size``: the tokenizer's vocabulary,
padded; unset or False, the perf recipes' setting, the model's own, unpadded:
``models/gpt_provider.py:266-271``);
``training/config.py:2101-2137`` (the ddp and optimizer sections' ``use_distributed_optimizer``
and ``overlap_param_gather``, either one's True setting both) and Muon's fields
(:mod:`memsym.readers.bridge_optimizer`);
``training/comm_overlap.py:442-448`` (TP overlap off at TP < 2 or without sequence
parallelism); Megatron-LM d98e8a64dd ``megatron/core/tokenizers/text/libraries/
null_tokenizer.py:60`` (the NullTokenizer's vocabulary is the ``vocab_size`` given).
"""

from __future__ import annotations

import re

from ..errors import InvalidValueError
from ..model import resolve_model
from ._bridge_recipes import SECTION_FIELDS
from ._values import MAX_ARGS, MAX_GPUS, check_unpadded_vocab, recipe_flag
from ..terms.cuda_graphs import cuda_graph_notes, cuda_graph_settings
from .bridge_benchmark import benchmark_defaults, check_benchmark_word, determinism, mock_dataset
from .bridge_command import SECTIONS, parse_override
from .bridge_names import is_recipe_name, recipe_row, shared_name_notes
from .bridge_models import HF_PRESETS, recipe_model
from .bridge_optimizer import MUON_FIELDS, recipe_muon, synced_flag
from .bridge_peft import PEFT_FIELDS, apply_mode, check_peft, fp8_base_note, recipe_peft
from .bridge_precision import PRECISION_RECIPES, recipe_precision, recipe_sharding
from .bridge_userbuffers import recipe_ub_option
from .recipe_mechanisms import recipe_dispatcher, recipe_mechanism_options

__all__ = ["read_bridge_recipe", "bridge_job_options", "FIELDS", "HF_PRESETS", "PRECISION_RECIPES",
           "BRIDGE_COMMIT", "is_recipe_name"]

BRIDGE_COMMIT = "067f987df0"
_PERF = "src/megatron/bridge/perf_recipes/"

#: ``section.field`` -> what memsym makes of it: ("job", option), ("arch", field), or
#: ("bridge", what) for the fields this module resolves itself.
FIELDS = {
    "model.tensor_model_parallel_size": ("job", "t"),
    "model.pipeline_model_parallel_size": ("job", "p"),
    "model.context_parallel_size": ("job", "c"),
    "model.expert_model_parallel_size": ("job", "e"),
    "model.expert_tensor_parallel_size": ("job", "t_e"),
    "model.virtual_pipeline_model_parallel_size": ("job", "v"),
    "model.sequence_parallel": ("job", "sequence_parallel"),
    "model.cp_comm_type": ("job", "cp_comm_type"),
    "model.pipeline_model_parallel_layout": ("bridge", "layout"),
    "model.num_layers_in_first_pipeline_stage": ("job", "first_stage_layers"),
    "model.num_layers_in_last_pipeline_stage": ("job", "last_stage_layers"),
    "model.account_for_embedding_in_pipeline_split": ("job", "account_for_embedding_in_pipeline_split"),
    "model.account_for_loss_in_pipeline_split": ("job", "account_for_loss_in_pipeline_split"),
    "model.recompute_granularity": ("bridge", "recompute"),
    "model.recompute_method": ("job", "recompute_method"),
    "model.recompute_num_layers": ("job", "recompute_num_layers"),
    "model.recompute_modules": ("bridge", "recompute_modules"),
    "model.cpu_offloading": ("bridge", "offloading"),
    "model.cpu_offloading_num_layers": ("bridge", "offloading"),
    "model.offload_modules": ("bridge", "offloading"),
    "model.cpu_offloading_activations": ("bridge", "offloading"),
    "model.cpu_offloading_weights": ("bridge", "offloading"),
    "model.cross_entropy_loss_fusion": ("bridge", "loss_fusion"),
    "model.cross_entropy_fusion_impl": ("bridge", "loss_fusion"),
    "model.cuda_graph_scope": ("bridge", "cuda_graphs"),
    "model.moe_token_dispatcher_type": ("bridge", "dispatcher"),
    "model.moe_flex_dispatcher_backend": ("bridge", "dispatcher"),
    "model.moe_expert_capacity_factor": ("job", "capacity_factor"),
    "model.bias_activation_fusion": ("job", "bias_activation_fusion"),
    "model.fp32_residual_connection": ("bridge", "numerics"),
    "model.softmax_type": ("bridge", "numerics"),
    # TransformerConfig's FP8 SwiGLU input (memsym.terms.activations.fp8_glu_input)
    "model.activation_func_fp8_input_store": ("job", "activation_func_fp8_input_store"),
    "model.cuda_graph_impl": ("bridge", "cuda_graphs"),
    "optimizer.optimizer_cuda_graph": ("bridge", "cuda_graphs"),
    "dataset.create_attention_mask": ("bridge", "cuda_graphs"),
    "model.fine_grained_activation_offloading": ("bridge", "offloading"),
    "model.seq_length": ("bridge", "seq_length"),
    "dataset.seq_length": ("bridge", "seq_length"),
    "model.num_layers": ("arch", "num_layers"),
    "model.hidden_size": ("arch", "hidden_size"),
    "model.ffn_hidden_size": ("arch", "ffn_hidden_size"),
    "model.num_attention_heads": ("arch", "num_attention_heads"),
    "model.num_query_groups": ("arch", "num_query_groups"),
    "model.kv_channels": ("arch", "kv_channels"),
    "model.num_moe_experts": ("arch", "num_experts"),
    "model.moe_router_topk": ("arch", "moe_router_topk"),
    "model.moe_ffn_hidden_size": ("arch", "moe_ffn_hidden_size"),
    "model.moe_shared_expert_intermediate_size": ("arch", "moe_shared_expert_intermediate_size"),
    "model.moe_latent_size": ("arch", "moe_latent_size"),
    "model.mtp_num_layers": ("arch", "mtp_num_layers"),
    "model.mtp_use_repeated_layer": ("arch", "mtp_repeated"),
    "model.vocab_size": ("arch", "vocab_size"),
    "model.make_vocab_size_divisible_by": ("arch", "make_vocab_size_divisible_by"),
    "train.micro_batch_size": ("job", "micro_batch_size"),
    "train.global_batch_size": ("job", "global_batch_size"),
    "ddp.use_distributed_optimizer": ("bridge", "sharding"),
    "ddp.use_megatron_fsdp": ("bridge", "sharding"),
    "ddp.data_parallel_sharding_strategy": ("bridge", "sharding"),
    "ddp.overlap_grad_reduce": ("job", "overlap_grad_reduce"),
    "ddp.overlap_param_gather": ("bridge", "overlap_param_gather"),
    "optimizer.overlap_param_gather": ("bridge", "overlap_param_gather"),
    "optimizer.use_distributed_optimizer": ("bridge", "sharding"),
    "ddp.grad_reduce_in_fp32": ("bridge", "grad_dtype"),
    "ddp.megatron_fsdp_main_grads_dtype": ("bridge", "grad_dtype"),
    "ddp.fsdp_double_buffer": ("bridge", "sharding"), "ddp.nccl_ub": ("bridge", "sharding"),
    "ddp.megatron_fsdp_max_pool_double_buffer": ("bridge", "sharding"),
    "mixed_precision": ("bridge", "precision"),
    "mixed_precision.grad_reduce_in_fp32": ("bridge", "grad_dtype"),
    "mixed_precision.fp8": ("bridge", "precision"),
    "mixed_precision.fp8_param_gather": ("bridge", "precision"),
    "mixed_precision.fp4_param_gather": ("bridge", "precision"),
    "mixed_precision.fp8_recipe": ("bridge", "precision"),
    "mixed_precision.fp8_dot_product_attention": ("bridge", "precision"),
    "mixed_precision.fp4": ("bridge", "precision"),
    "mixed_precision.bf16": ("bridge", "precision"),
    "mixed_precision.fp16": ("bridge", "precision"),
    "mixed_precision.first_last_layers_bf16": ("bridge", "precision"),
    "mixed_precision.num_layers_at_start_in_bf16": ("bridge", "precision"),
    "mixed_precision.num_layers_at_end_in_bf16": ("bridge", "precision"),
    "comm_overlap.tp_comm_overlap": ("bridge", "tp_comm_overlap"),
    "comm_overlap.tp_comm_overlap_cfg": ("bridge", "tp_comm_overlap_cfg"),
    "comm_overlap.overlap_moe_expert_parallel_comm": ("job", "overlap_moe_expert_parallel_comm"),
    "comm_overlap.defer_embedding_wgrad_compute": ("job", "defer_embedding_wgrad_compute"),
    "optimizer.optimizer": ("job", "optimizer"),
    "optimizer.use_precision_aware_optimizer": ("job", "precision_aware"),
    "optimizer.exp_avg_dtype": ("bridge", "moments"),
    "optimizer.exp_avg_sq_dtype": ("bridge", "moments"),
    "optimizer.main_params_dtype": ("bridge", "moments"),
    **{key: ("bridge", "muon") for key in MUON_FIELDS},
    "optimizer.use_layer_wise_distributed_optimizer": ("bridge", "muon"),
    "model.mla_down_proj_fusion": ("job", "mla_down_proj_fusion"),
    "tokenizer.tokenizer_type": ("bridge", "vocab"),
    "tokenizer.vocab_size": ("bridge", "vocab"),
    "tokenizer.use_tokenizer_vocab_size": ("bridge", "vocab"),
    # the fine-tuning recipes' PEFT class (None: full fine-tuning) and fields (bridge_peft)
    "peft": ("bridge", "peft"), **{key: ("bridge", "peft") for key in PEFT_FIELDS},
}

#: The GPU count a performance recipe's name carries (``..._64gpu_h100_...``).
_GPUS_IN_NAME = re.compile(r"_([0-9]{1,6})gpu_")


def read_bridge_recipe(name: str, overrides=(), world_size: int | None = None,
                       as_run: bool = True) -> dict:
    """A Bridge recipe with its overrides, as plain data.

    Parameters
    ----------
    name : str
        A recipe function name (``llama3_8b_pretrain_2gpu_h100_bf16_config``) or its legacy
        alias (``llama3_8b_pretrain_config``).
    overrides : list of str
        ``section.field=value`` words, applied in order (a later one wins).
    world_size : int, optional
        W [GPUs]; default: the GPU count in the recipe's name.
    as_run : bool
        Apply what run_recipe.py does to a performance recipe after the overrides
        (:func:`memsym.readers.bridge_benchmark.benchmark_defaults`); False: the recipe's
        fields and the overrides alone.

    Returns
    -------
    dict
        ``recipe`` (the function), ``source`` (file:line), ``hf_model``, ``values`` (the
        fields memsym reads, overrides applied), ``overridden`` (their keys), ``ignored``
        (overrides memsym does not model), ``world_size`` and ``computed`` (the recipe's
        statements not read as literals).

    Examples
    --------
    >>> r = read_bridge_recipe("llama3_8b_pretrain_config", ["model.tensor_model_parallel_size=2"])
    >>> r["recipe"], r["world_size"], r["values"]["model.tensor_model_parallel_size"]
    ('llama3_8b_pretrain_2gpu_h100_bf16_config', 2, 2)
    """
    full, row = recipe_row(name)
    if len(overrides) > MAX_ARGS:
        raise InvalidValueError(f"more than {MAX_ARGS} Bridge overrides")
    values, ignored, overridden = dict(row["values"]), [], []
    bench = row["source"].startswith(_PERF)
    notes = ((mock_dataset(values) if bench and as_run else [])   # before the overrides, as
             + (determinism(values) if "--deterministic" in overrides else []))  # run_recipe.py
    for word in overrides:
        if word == "--deterministic":       # applied before the overrides, as run_recipe.py
            continue
        if word.startswith(("--dataset=", "--step-func=", "--step_func=")):
            # run_recipe.py's own options: a benchmark recipe refuses them (recipe_metadata.py:
            # 228-256); a library recipe's dataset preset is not modelled
            if bench:
                check_benchmark_word(full, word)
            else:
                ignored.append(word)
            continue
        if word.startswith("--mode="):
            if word == "--mode=dora" and bench:
                # validate_benchmark_recipe_scope, scripts/training/recipe_metadata.py:243-244
                raise InvalidValueError(f"--mode dora: {full} is a performance recipe, a fixed "
                                        "LoRA config (run_recipe.py refuses it; omit --mode)")
            apply_mode(full, word[7:], values)
            continue
        key, value = parse_override(word)
        section = key.split(".", 1)[0]
        if section not in SECTIONS:
            raise InvalidValueError(f"{key}: unknown Megatron-Bridge config section {section!r} "
                                    f"(ConfigContainer has {', '.join(SECTIONS[:9])}, ...)")
        name = key.split(".")[1] if "." in key else None
        if name is not None and section in SECTION_FIELDS and name not in SECTION_FIELDS[section]:
            close = [f for f in SECTION_FIELDS[section] if f.startswith(name[:4])][:4]
            raise InvalidValueError(f"{key}: Bridge's {section} config has no field {name!r}"
                                    + (f" (did you mean {', '.join(close)}?)" if close else ""))
        if key not in FIELDS:
            ignored.append(word)
            continue
        if key == "mixed_precision":   # a new precision recipe replaces the section's fields
            values = {k: v for k, v in values.items() if not k.startswith("mixed_precision.")}
        values[key] = value
        overridden.append(key)
    check_peft(row["values"], values, overridden)
    from_name = world_size is None
    if world_size is None:
        m = _GPUS_IN_NAME.search(full)
        world_size = int(m.group(1)) if m else None
    if world_size is not None and not (isinstance(world_size, int) and 1 <= world_size <= MAX_GPUS):
        raise InvalidValueError(f"world size must be a whole number of GPUs, got {world_size!r}")
    given = [w.lstrip("+~").split("=", 1)[0] for w in overrides if not w.startswith("--")]
    if bench and as_run and world_size is not None:
        notes += benchmark_defaults(full, row["values"], values, given, world_size)
    return {"recipe": full, "source": row["source"], "hf_model": row["hf_model"],
            "values": values, "overridden": tuple(dict.fromkeys(overridden)),
            "ignored": tuple(ignored), "world_size": world_size, "world_from_name": from_name,
            "computed": row["computed"], "notes": tuple(notes)}


def _builder_layouts(tail: str, more=()) -> dict:
    """(PP, VPP) -> the layout string of DeepSeek-V3's and Kimi K2's layout builders, whose
    stages are the same but for the last one's ``tail`` (Megatron's layout string: E
    embedding, t decoder layer, m MTP, L loss, | between stages); ``more``: the (PP, VPP)
    pairs of 16 stages of 4 layers a builder has beyond the six they share.

    DeepSeek-V3's (recipes/deepseek/h100/deepseek_v3.py:50-61, tail ``["mtp"] * mtp_layers +
    ["loss"]``) and Kimi K2's (recipes/kimi/h100/kimi_k2.py:29-40, tail ``["loss"]``, and
    (2, 8)); their (1, 1) is None there, the even split.  run_recipe.py
    sync_model_pipeline_layout rebuilds the layout after the overrides.

    >>> _builder_layouts("L")[(8, 1)].split("|")[-1], _builder_layouts("mL")[(16, 1)][-5:]
    ('tttttL', 't|tmL')
    """
    of4 = "E" + "t" * 4 + "|" + ("t" * 4 + "|") * 14 + "t" + tail
    of8 = "E" + "t" * 8 + "|" + ("t" * 8 + "|") * 6 + "t" * 5 + tail
    return {(4, 1): "E" + "t" * 16 + "|" + ("t" * 16 + "|") * 2 + "t" * 13 + tail,
            (8, 1): of8, (4, 2): of8, **{pv: of4 for pv in ((16, 1), (8, 2), (4, 4)) + more}}


#: The job options of :data:`FIELDS` that are switches, and those that are names.
_SWITCHES = frozenset({"sequence_parallel", "overlap_grad_reduce", "overlap_param_gather",
                       "overlap_moe_expert_parallel_comm", "defer_embedding_wgrad_compute",
                       "precision_aware", "account_for_embedding_in_pipeline_split",
                       "account_for_loss_in_pipeline_split", "mtp_repeated",
                       "bias_activation_fusion", "mla_down_proj_fusion",
                       "activation_func_fp8_input_store"})

_NAMES = frozenset({"recompute_method", "optimizer"})


def _typed(key, name, value):
    """``value`` of override ``key`` checked against the kind of job option ``name``."""
    if name in _SWITCHES:
        return recipe_flag({key: value}, key)
    if name in _NAMES:
        if not isinstance(value, str):
            raise InvalidValueError(f"{key} must be a name, got {value!r:.40}")
        return value
    if name == "cp_comm_type":
        # TransformerConfig.cp_comm_type: one name, one per layer, or None (p2p)
        # (megatron/core/transformer/transformer_config.py:1030 at d98e8a64dd)
        names = value if isinstance(value, (list, tuple)) else (value,)
        if value is not None and not (names and all(isinstance(v, str) for v in names)):
            raise InvalidValueError(f"{key} must be a name or a list of names, got "
                                    f"{value!r:.40}")
        return tuple(value) if isinstance(value, (list, tuple)) else value
    if name == "capacity_factor":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    else:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if not ok:
        raise InvalidValueError(f"{key} must be a whole number, got {value!r:.40}"
                                if name != "capacity_factor" else
                                f"{key} must be a positive number, got {value!r:.40}")
    return value


def bridge_job_options(reading: dict, model=None) -> tuple:
    """``(model, job options, notes)`` of a :func:`read_bridge_recipe` reading: the model a
    preset name or an Architecture (:func:`memsym.readers.bridge_models.recipe_model`: the
    recipe's checkpoint, or ``model`` in its place).

    The options are :func:`memsym.job.job`'s (architecture fields included), each set
    from the recipe as Bridge resolves it.

    Examples
    --------
    >>> model, opts, _ = bridge_job_options(read_bridge_recipe("llama3_70b_pretrain_config"))
    >>> model, opts["t"], opts["p"], opts["v"], opts["c"], opts["tp_comm_overlap"]
    ('llama3-70b', 4, 4, 5, 2, True)
    """
    values, notes = reading["values"], []
    notes += shared_name_notes(reading["recipe"])   # a name both packages export
    notes += reading.get("notes", ())               # run_recipe.py's benchmark defaults
    preset, opts, fused, more = recipe_model(reading, model)
    notes += more
    label = preset if isinstance(preset, str) else preset.name
    for key, (kind, name) in FIELDS.items():
        if kind in ("job", "arch") and values.get(key) is not None:
            opts[name] = _typed(key, name, values[key])
    if "mla_down_proj_fusion" in opts and not resolve_model(preset).multi_latent_attention:
        # a field of MLATransformerConfig (Megatron-LM 2a75ac12c5 transformer_config.py:3076),
        # so of Bridge's MLAModelProvider (models/mla_provider.py:28) alone: Hydra refuses a
        # key the model's config lacks (struct mode, training/utils/omegaconf_utils.py:180)
        raise InvalidValueError(f"model.mla_down_proj_fusion: a field of Bridge's MLA model "
                                f"providers; {label} has no multi-latent attention")
    # a recipe's (or override's) model.bias_activation_fusion, else its model bridge's
    opts.setdefault("bias_activation_fusion", fused)
    # run_recipe.py: the dataset owns the sequence length; the model's is synchronized from it
    seq = values.get("dataset.seq_length", values.get("model.seq_length"))
    if seq is not None:
        opts["seq_length"] = seq
        # rotary positions have no table: Bridge (unlike Megatron-LM's validate_args) does not
        # bound the sequence by max_position_embeddings, so the long-context recipes run
        base = resolve_model(preset)
        if isinstance(seq, int) and seq > (opts.get("max_position_embeddings")
                                           or base.max_position_embeddings or seq):
            opts["max_position_embeddings"] = seq
    # Bridge sets the ddp and optimizer sections' flag when either is (config.py:2125-2137)
    opts["overlap_param_gather"] = synced_flag(values, "overlap_param_gather", False, notes)
    if opts["overlap_param_gather"] and not opts.get("overlap_grad_reduce"):
        # Bridge runs it (training/config.py:2125-2137 only syncs the two sections' flags);
        # Megatron-LM's validate_args, whose rule memsym's job applies, refuses it
        opts["overlap_param_gather"] = False
        notes.append("ddp.overlap_param_gather without ddp.overlap_grad_reduce (Bridge runs it, "
                     "Megatron-LM refuses it): counted without the parameter-gather overlap")
    granularity = values.get("model.recompute_granularity")
    opts["recompute"] = "none" if granularity is None else granularity
    modules = values.get("model.recompute_modules")
    if granularity == "selective" and modules is not None:
        # Megatron-Core reads recompute_modules only under selective granularity
        if not isinstance(modules, list):
            raise InvalidValueError("model.recompute_modules: give a list, e.g. [core_attn]")
        opts["recompute_modules"] = tuple(modules)
    notes += _unmodelled(values, resolve_model(preset))
    recipe_peft(values, resolve_model(preset), opts, notes, reading.get("computed") or ())
    layout = _recipe_layout(label, values, reading, opts)
    if layout is not None:
        opts["pipeline_layout"] = layout
    # recipes/common.py:53: distributed_fused_adam_with_cosine_annealing, Adam
    opts.setdefault("optimizer", "adam")
    prec = recipe_precision(values, notes)
    opts["sharding"] = recipe_sharding(values, prec, notes)
    recipe_muon(values, opts, notes)
    opts.update(prec)
    notes += fp8_base_note(opts)
    tp_overlap = recipe_flag(values, "comm_overlap.tp_comm_overlap", False)
    # comm_overlap.py:442-448: Bridge turns TP overlap off at TP < 2 or without SP
    opts["tp_comm_overlap"] = bool(tp_overlap and opts.get("t", 1) > 1
                                   and opts.get("sequence_parallel"))
    opts.update(recipe_ub_option(values, opts["tp_comm_overlap"], notes))
    opts.update(recipe_mechanism_options(values, opts))
    if resolve_model(preset).num_experts:   # the flex dispatcher's DeepEP / HybridEP buffers
        opts.update(recipe_dispatcher(values, reading.get("computed") or ()))
    opts.update(_vocab(values, label, notes, reading.get("computed") or ()))
    unpadded = not values.get("tokenizer.use_tokenizer_vocab_size", True)
    vocab = (opts.get("vocab_size") or resolve_model(preset).vocab_size) if unpadded else 0
    check_unpadded_vocab(vocab, opts.get("t", 1), "model.tensor_model_parallel_size",
                         "this recipe (tokenizer.use_tokenizer_vocab_size False)")
    world = reading["world_size"]
    if world is not None:
        opts["world_size"] = world
        group = opts.get("t", 1) * opts.get("p", 1) * opts.get("c", 1)
        if reading.get("world_from_name") and world % group:
            raise InvalidValueError(f"the recipe's name gives {world} GPUs, not a multiple of "
                                    f"t*p*c = {group}: give --world-size N (run_recipe.py takes "
                                    "WORLD_SIZE from its launcher)")
    return preset, opts, notes


def _recipe_layout(preset, values, reading, opts):
    """The recipe's pipeline layout as Megatron's layout string (None: the even split): the
    recipe's own string, or its layout builder's at the run's (PP, VPP)."""
    layout = values.get("model.pipeline_model_parallel_layout")
    overridden = "model.pipeline_model_parallel_layout" in reading["overridden"]
    if preset == "deepseek-v3" and not overridden and {
            "model.pipeline_model_parallel_size",
            "model.virtual_pipeline_model_parallel_size"} & set(reading["overridden"]):
        # recipe_runner.py:373 sync_model_pipeline_layout: a PP/VPP override rebuilds the
        # layout with the recipe's builder (deepseek_v3.py:322), replacing a perf recipe's string
        layout = None
    if isinstance(layout, str):
        return layout
    if layout is not None:
        raise InvalidValueError("model.pipeline_model_parallel_layout: give Megatron's layout "
                                "string (e.g. \"Ett|tt|ttL\")")
    # DeepSeek-V3's last stage is ["mtp"] * mtp_layers + ["loss"], mtp_layers the model's
    # mtp_num_layers or 0 (recipes/deepseek/h100/deepseek_v3.py:52, :86)
    mtp = "m" * (opts.get("mtp_num_layers", 1) or 0)
    builders = {"deepseek-v3": ("DeepSeek-V3", (mtp + "L",), "deepseek_v3.py:63-67"),
                "kimi-k2": ("Kimi K2", ("L", ((2, 8),)), "kimi/h100/kimi_k2.py:43-47")}
    if preset not in builders or overridden:
        return None
    name, tail, where = builders[preset]
    table = _builder_layouts(*tail)
    pv = (opts.get("p", 1), opts.get("v") or 1)
    if pv != (1, 1) and pv not in table:
        # run_recipe.py sync_model_pipeline_layout calls the recipe's layout builder, which
        # raises for a (PP, VPP) its table lacks
        raise InvalidValueError(f"{name}'s layout builder has no layout for PP {pv[0]}, VPP "
                                f"{pv[1]} (it has {', '.join(map(str, table))}; {where}): "
                                "give model.pipeline_model_parallel_layout")
    return table.get(pv)


def _unmodelled(values, model) -> list:
    """Notes for what a recipe sets that memsym does not count (each said, none refused)."""
    notes = []
    notes += cuda_graph_notes(*cuda_graph_settings(values.get("model.cuda_graph_impl"),
                                                   values.get("model.cuda_graph_scope")))
    if values.get("model.cpu_offloading"):
        notes.append(f"model.cpu_offloading of {values.get('model.cpu_offloading_num_layers')} "
                     "layers: their activations leave the GPU; the host's pinned buffers are "
                     "not counted")
    if values.get("model.fine_grained_activation_offloading"):
        notes.append(f"model.fine_grained_activation_offloading "
                     f"{values.get('model.offload_modules')}: the offloaded activations are "
                     "counted as kept on the GPU")
    return notes


def _vocab(values, preset, notes, computed=()) -> dict:
    # setup.py:762-784 (_validate_and_set_vocab_size): use_tokenizer_vocab_size True
    # (_pretrain_common, recipes/common.py:114) takes the tokenizer's vocabulary and pads it
    # (should_pad_vocab True); a NullTokenizer's is the vocab_size given (null_tokenizer.py:60).
    # False (the perf recipes, perf_recipes/_common.py:51) keeps the model's own vocabulary
    # unpadded: should_pad_vocab False, so the provider builds vocab_size rows
    # (gpt_provider.py:266-271, hybrid/hybrid_provider.py:297): no multiple of a divisor
    if not values.get("tokenizer.use_tokenizer_vocab_size", True):
        notes.append(f"vocabulary of {preset}'s own config, unpadded (tokenizer."
                     "use_tokenizer_vocab_size False: should_pad_vocab False, "
                     "training/setup.py:762-784, models/gpt_provider.py:266-271)")
        return {"make_vocab_size_divisible_by": 1}
    if values.get("tokenizer.tokenizer_type") == "NullTokenizer":
        size = values.get("tokenizer.vocab_size")
        if size is None and any(c.endswith("tokenizer.vocab_size = cfg.model.vocab_size")
                                for c in computed):
            return {}    # kimi_k2.py:130: the NullTokenizer takes the model's own vocabulary
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise InvalidValueError("tokenizer.vocab_size: a NullTokenizer needs a whole number")
        return {"vocab_size": size}
    notes.append(f"vocabulary of {preset}'s config.json (Bridge pads len(tokenizer), which can "
                 "be smaller)")
    return {}
