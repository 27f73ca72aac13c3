"""The Hugging Face Trainer's command-line arguments, as transformers 5.25.0 defines them.

``HfArgumentParser`` (``hf_argparser.py:150-235``) turns each field of the ``TrainingArguments``
dataclass (``training_args.py``) into ``--name`` and, for a name with ``_``, ``--na-me``; a
``bool`` field takes an optional value (``nargs="?"``, ``const=True``: a bare ``--bf16`` is
True, ``--bf16 false`` is False; ``string_to_bool`` reads yes/no, true/false, t/f, y/n, 1/0),
a ``bool`` field whose default is True has a ``--no_name`` complement, a ``list`` field takes
one or more values, every other field one.  The tables below hold, for each field, its arity
and the line of ``src/transformers/training_args.py`` (transformers 5.25.0) that defines it, and
sort the fields memsym reads (:data:`READ`), those that change memory but that memsym does not
model (:data:`REFUSED`: one line each) and the rest, which do not change a step's memory
(logging, saving, evaluation, the learning-rate schedule, the data loader; :data:`IGNORED`).

The example script ``examples/pytorch/language-modeling/run_clm.py`` (huggingface/transformers
at 00d481d18f, ``ModelArguments`` and ``DataTrainingArguments``) adds its own fields:
:data:`SCRIPT`.
"""

from __future__ import annotations

from ..errors import InvalidValueError

__all__ = ["TRAINING_ARGS", "RUN_CLM", "FIELDS", "READ", "REFUSED", "REFUSED_DEFAULTS",
           "IGNORED", "SCRIPT",
           "NO_FLAGS", "ADAMW", "arity", "field_name", "BOOL_WORDS", "flag_value"]

#: Where the fields are defined.
TRAINING_ARGS = "transformers 5.25.0 src/transformers/training_args.py"
#: Where run_clm.py's own fields are defined.
RUN_CLM = ("transformers 00d481d18f examples/pytorch/language-modeling/run_clm.py "
           "(ModelArguments, DataTrainingArguments)")

# name: (arity, line): "?" an optional boolean value, "+" one or more values, 1 one value
_Q, _P = "?", "+"
#: Every field of TrainingArguments: (arity, line of training_args.py).
FIELDS = {
    "output_dir": (1, 771), "per_device_train_batch_size": (1, 777),
    "num_train_epochs": (1, 778), "max_steps": (1, 779), "learning_rate": (1, 787),
    "lr_scheduler_type": (1, 788), "lr_scheduler_kwargs": (1, 792), "warmup_steps": (1, 798),
    "optim": (1, 812), "optim_args": (1, 816), "weight_decay": (1, 822),
    "adam_beta1": (1, 828), "adam_beta2": (1, 834), "adam_epsilon": (1, 840),
    "optim_target_modules": (1, 843), "gradient_accumulation_steps": (1, 849),
    "average_tokens_across_devices": (_Q, 858), "max_grad_norm": (1, 866),
    "label_smoothing_factor": (1, 869), "bf16": (_Q, 874), "fp16": (_Q, 880),
    "bf16_full_eval": (_Q, 886), "fp16_full_eval": (_Q, 892), "tf32": (1, 898),
    "activation_checkpointing": (_Q, 908), "activation_checkpointing_kwargs": (1, 916),
    "gradient_checkpointing": (_Q, 926), "gradient_checkpointing_kwargs": (1, 934),
    "torch_compile": (_Q, 940), "torch_compile_backend": (1, 943),
    "torch_compile_mode": (1, 949), "use_liger_kernel": (_Q, 957),
    "liger_kernel_config": (1, 963), "use_cache": (_Q, 971), "neftune_noise_alpha": (1, 977),
    "torch_empty_cache_steps": (1, 983), "auto_find_batch_size": (_Q, 989),
    "logging_strategy": (1, 997), "logging_steps": (1, 1001), "logging_first_step": (_Q, 1010),
    "log_on_each_node": (_Q, 1013), "logging_nan_inf_filter": (_Q, 1022),
    "include_num_input_tokens_seen": (_Q, 1028), "log_level": (1, 1039),
    "log_level_replica": (1, 1046), "disable_tqdm": (1, 1053), "report_to": (1, 1059),
    "run_name": (1, 1065), "project": (1, 1074), "trackio_space_id": (1, 1078),
    "trackio_bucket_id": (1, 1089), "trackio_static_space_id": (1, 1093),
    "eval_strategy": (1, 1106), "eval_steps": (1, 1110), "eval_delay": (1, 1119),
    "per_device_eval_batch_size": (1, 1128), "prediction_loss_only": (_Q, 1131),
    "eval_on_start": (_Q, 1135), "eval_do_concat_batches": (_Q, 1141),
    "eval_use_gather_object": (_Q, 1147), "eval_accumulation_steps": (1, 1153),
    "include_for_metrics": (_P, 1161), "batch_eval_metrics": (_Q, 1165),
    "save_only_model": (_Q, 1171), "save_strategy": (1, 1177), "save_steps": (1, 1183),
    "save_on_each_node": (_Q, 1192), "save_total_limit": (1, 1201),
    "enable_jit_checkpoint": (_Q, 1207), "push_to_hub": (_Q, 1215), "hub_token": (1, 1218),
    "hub_private_repo": (1, 1224), "hub_model_id": (1, 1233), "hub_strategy": (1, 1236),
    "hub_always_push": (_Q, 1242), "hub_revision": (1, 1246),
    "load_best_model_at_end": (_Q, 1254), "metric_for_best_model": (1, 1258),
    "greater_is_better": (1, 1264), "ignore_data_skip": (_Q, 1270),
    "restore_callback_states_from_checkpoint": (_Q, 1276), "full_determinism": (_Q, 1284),
    "seed": (1, 1293), "data_seed": (1, 1294), "use_cpu": (_Q, 1300),
    "accelerator_config": (1, 1308), "parallelism_config": (1, 1314),
    "dataloader_drop_last": (_Q, 1320), "dataloader_num_workers": (1, 1323),
    "dataloader_pin_memory": (_Q, 1332), "dataloader_persistent_workers": (_Q, 1335),
    "dataloader_prefetch_factor": (1, 1341), "dataloader_multiprocessing_context": (1, 1350),
    "dataloader_in_order": (_Q, 1363), "remove_unused_columns": (_Q, 1373),
    "label_names": (_P, 1377), "train_sampling_strategy": (1, 1380),
    "length_column_name": (1, 1387), "ddp_find_unused_parameters": (1, 1395),
    "ddp_bucket_cap_mb": (1, 1404), "ddp_broadcast_buffers": (1, 1413),
    "ddp_static_graph": (1, 1422), "ddp_backend": (1, 1431), "ddp_timeout": (1, 1438),
    "fsdp": (_Q, 1447), "fsdp_config": (1, 1455), "deepspeed": (1, 1463), "debug": (_P, 1469),
    "skip_memory_metrics": (_Q, 1475), "do_train": (_Q, 1483), "do_eval": (_Q, 1489),
    "do_predict": (_Q, 1495), "resume_from_checkpoint": (1, 1501), "local_rank": (1, 1508),
}

#: The boolean fields whose default is True: HfArgumentParser adds ``--no_<name>``
#: (hf_argparser.py, "a complement `no_*` argument").
NO_FLAGS = frozenset({"average_tokens_across_devices", "log_on_each_node",
                      "logging_nan_inf_filter", "eval_do_concat_batches", "dataloader_pin_memory",
                      "dataloader_in_order", "remove_unused_columns", "skip_memory_metrics"})

#: The fields memsym reads into the job (their meaning: :mod:`memsym.readers.hf_trainer`).
READ = frozenset({"per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "fp16",
                  "bf16_full_eval", "fp16_full_eval", "tf32", "activation_checkpointing",
                  "gradient_checkpointing", "optim", "deepspeed", "fsdp", "fsdp_config"})

#: Fields that change a step's memory and that memsym does not model: refused in one line
#: (when set to anything but their default).
REFUSED = {
    "activation_checkpointing_kwargs": "checkpointing keyword arguments (every_n_layers, "
    "offload) are not modelled: memsym counts every decoder layer checkpointed",
    "gradient_checkpointing_kwargs": "checkpointing keyword arguments (every_n_layers, offload) "
    "are not modelled: memsym counts every decoder layer checkpointed",
    "torch_compile": "torch.compile changes the activations kept: not modelled",
    "torch_compile_backend": "torch.compile (a backend set switches it on) is not modelled",
    "torch_compile_mode": "torch.compile (a mode set switches it on) is not modelled",
    "use_liger_kernel": "Liger's fused kernels change the activations kept: not modelled",
    "liger_kernel_config": "Liger's fused kernels are not modelled",
    "auto_find_batch_size": "the Trainer halves the batch until it fits: give the "
    "per_device_train_batch_size to estimate",
    "optim_target_modules": "GaLore / APOLLO low-rank optimizer states are not modelled",
    "use_cpu": "a CPU run has no GPU memory to estimate",
    "parallelism_config": "Accelerate's ParallelismConfig (tensor, context parallel) is not "
    "read: memsym reads the DeepSpeed config (Ulysses: its sequence_parallel_size) or plain DDP",
    "torch_empty_cache_steps": "emptying the allocator's cache every few steps is not modelled",
    "accelerator_config": "Accelerate's options (split_batches, dispatch_batches, ...) change "
    "how a batch is made: not read",
    "label_smoothing_factor": "the Trainer's LabelSmoother computes its own log-softmax over "
    "the logits (trainer.py:547-556), a loss memsym does not model",
}

#: Values of a refused field that are its default (no effect): read as ignored.
REFUSED_DEFAULTS = {"label_smoothing_factor": frozenset({"0", "0.0", "0."})}

#: AdamW's ``--optim`` names: two moments per parameter in the parameters' (fp32 master)
#: dtype, memsym's ``adam`` (training_args.py:118-119 ``OptimizerNames``; the default is
#: ``adamw_torch_fused`` on torch >= 2.8, ``adamw_torch`` before, lines 806-814).
ADAMW = frozenset({"adamw_torch", "adamw_torch_fused"})

#: Fields that change nothing memsym estimates (one step's memory, its time): read and listed
#: as ignored.
IGNORED = frozenset(FIELDS) - READ - frozenset(REFUSED)

#: run_clm.py's own fields (arity); ``block_size`` gives the sequence, ``model_name_or_path``
#: the model, ``dtype`` the weights' dtype under plain DDP; the others (data, tokenizer,
#: caching) change no memory.
SCRIPT = {
    "model_name_or_path": 1, "model_type": 1, "config_overrides": 1, "config_name": 1,
    "tokenizer_name": 1, "cache_dir": 1, "use_fast_tokenizer": _Q, "model_revision": 1,
    "token": 1, "trust_remote_code": _Q, "dtype": 1, "torch_dtype": 1, "dataset_name": 1,
    "dataset_config_name": 1, "train_file": 1, "validation_file": 1, "max_train_samples": 1,
    "max_eval_samples": 1, "streaming": _Q, "block_size": 1, "overwrite_cache": _Q,
    "validation_split_percentage": 1, "preprocessing_num_workers": 1, "keep_linebreaks": _Q,
}

#: string_to_bool's words (hf_argparser.py:36-45): the Trainer's own spellings, kept apart from
#: the YAML 1.1 words of megatron_userbuffers and Hydra's true / false of bridge_command (each
#: reader takes its framework's words).
BOOL_WORDS = {"yes": True, "true": True, "t": True, "y": True, "1": True,
              "no": False, "false": False, "f": False, "n": False, "0": False}


def flag_value(values, name) -> bool:
    """A boolean argument's value: given bare, True; else its one word, as HfArgumentParser's
    ``string_to_bool`` reads it (:data:`BOOL_WORDS`), or InvalidValueError.

    Examples
    --------
    >>> flag_value([], "bf16"), flag_value(["False"], "bf16")
    (True, False)
    """
    if not values:
        return True
    word = values[0].lower()
    if word not in BOOL_WORDS:
        raise InvalidValueError(f"--{name} takes true or false, got {values[0][:40]!r}")
    return BOOL_WORDS[word]


def field_name(option: str) -> str | None:
    """The field an option word names (``--per_device_train_batch_size``,
    ``--per-device-train-batch-size``, ``--no_dataloader_pin_memory``), or None.

    Examples
    --------
    >>> field_name("--per-device-train-batch-size"), field_name("--no_remove_unused_columns")
    ('per_device_train_batch_size', 'no_remove_unused_columns')
    >>> field_name("--tensor-model-parallel-size") is None
    True
    """
    if not option.startswith("--"):
        return None
    name = option[2:]
    for spelled in (name, name.replace("-", "_")):
        if spelled in FIELDS or spelled in SCRIPT:
            return spelled
        if spelled.startswith("no_") and spelled[3:] in NO_FLAGS | {
                k for k, a in SCRIPT.items() if a == _Q}:
            return spelled
    return None


def arity(name: str):
    """How many values the field ``name`` (as :func:`field_name` gives it) takes: 0 for a
    ``--no_`` complement, ``"?"``, ``"+"`` or 1.

    Examples
    --------
    >>> arity("bf16"), arity("deepspeed"), arity("no_remove_unused_columns")
    ('?', 1, 0)
    """
    if name.startswith("no_") and name not in FIELDS and name not in SCRIPT:
        return 0
    if name in FIELDS:
        return FIELDS[name][0]
    return SCRIPT[name]
