"""A job read from a framework's own input instead of memsym's options: a DeepSpeed config
(``--deepspeed-config``), a torchtitan TOML or Python config (``--torchtitan-config``) or a
Megatron-Bridge recipe with its overrides (``--bridge-recipe``).  The input sets the layout
and the training; memsym's options for them beside it are refused, only the host's (the GPU,
the allowances, the world size) go with it.  Nothing here evaluates argument text.
"""

from __future__ import annotations

from .job_options import ARCH_OPTIONS, host_options, memsym_options

__all__ = ["framework_input", "framework_job_from_args", "framework_read_as"]


def framework_input(args) -> bool:
    """Whether a DeepSpeed config or torchtitan TOML describes the job."""
    return bool(getattr(args, "deepspeed_config", None) or getattr(args, "torchtitan_config", None)
                or getattr(args, "bridge_recipe", None))


def framework_job_from_args(args):
    """The Job of a DeepSpeed config or torchtitan TOML given with ``--deepspeed-config`` /
    ``--torchtitan-config`` (None when neither is given)."""
    from ..errors import InvalidValueError

    ds, tt = getattr(args, "deepspeed_config", None), getattr(args, "torchtitan_config", None)
    if getattr(args, "bridge_recipe", None) is not None:
        ds = tt = None if ds is None and tt is None else _refuse_two()
    if ds is None and tt is None:
        return None if getattr(args, "bridge_recipe", None) is None else _bridge_job(args)
    # the readers load only for a config file (a tenth of a MODEL's estimate otherwise)
    from ..readers import read_deepspeed_config, read_torchtitan_config
    from ..readers.jobs import deepspeed_job, torchtitan_job
    if ds is not None and tt is not None:
        raise InvalidValueError("give --deepspeed-config or --torchtitan-config, not both")
    # the config decides the layout and the training: memsym's options for them, or pasted
    # Megatron-LM arguments, would be dropped silently, so they are refused
    host = set(host_options(args)) | {"world_size", "seq_length"}
    if ds is not None:   # what a DeepSpeed config's "auto" values are filled from (HF Trainer)
        # and the model's own gradient checkpointing, which no config key switches on, and
        # PEFT's adapters and TRL's chunked loss, which the script makes and no config key says
        host |= {"micro_batch_size", "num_microbatches", "precision", "recompute", *_BESIDE}
        if getattr(args, "recompute_granularity", None) not in (None, "none", "full"):
            raise InvalidValueError(
                f"--recompute-granularity {args.recompute_granularity} with --deepspeed-config: "
                "a DeepSpeed job recomputes through the model's own gradient checkpointing, "
                "every decoder layer (full) or none")
    said = sorted(k for k in memsym_options(args) if k not in host and not k.startswith("_"))
    arch = [n for n in ARCH_OPTIONS if getattr(args, n, None) is not None]
    words = getattr(args, "job_words", None)
    if said or arch or (words is not None and words.megatron):
        what = ", ".join(said + arch) or words.megatron[0]
        beside = ("; the micro-batch, precision and --recompute-granularity full, the model's "
                  "gradient checkpointing, too" if ds else "")
        raise InvalidValueError(f"{what}: with {'--deepspeed-config' if ds else '--torchtitan-config'}"
                                " the config file sets the layout and the training; give them "
                                "there (only --world-size, --seq-length, the GPU and the "
                                f"allowances go beside it{beside})")
    extra = host_options(args)
    if args.seq_length is not None:
        extra["seq_length"] = args.seq_length
    if ds is not None:
        if args.model is None:
            raise InvalidValueError("a DeepSpeed config has no model: name a MODEL (a preset or a "
                                    "Hugging Face config.json) before --deepspeed-config")
        from .hf_launch import config_of

        cfg = read_deepspeed_config(config_of(args, ds), world_size=args.world_size,
                                    micro_batch_size=getattr(args, "micro_batch_size", None),
                                    gradient_accumulation_steps=getattr(args, "num_microbatches", None),
                                    precision=getattr(args, "precision", None))
        if cfg["layout"]["d"] is None:
            # DeepSpeed takes the data-parallel size from the launcher's world size; the config
            # gives it only through train_batch_size = micro-batch x accumulation x d
            raise InvalidValueError("the DeepSpeed config leaves the data-parallel size unknown "
                                    "(no train_batch_size): give --world-size N")
        args.reading = {"read_as": "a DeepSpeed config", "ignored": list(cfg["ignored"])}
        if getattr(args, "recompute_granularity", None) is not None:
            extra["recompute"] = args.recompute_granularity
        extra.update({name: getattr(args, name) for name in _BESIDE
                      if getattr(args, name, None) is not None})
        return deepspeed_job(cfg, args.model, **extra)
    return torchtitan_job(read_torchtitan_config(tt, world_size=args.world_size), args.model,
                          **{k: v for k, v in extra.items() if k != "seq_length"})


#: memsym's LoRA / QLoRA fields a DeepSpeed job takes beside its config (the adapters are the
#: script's, PEFT's get_peft_model; the engine trains them: memsym.training.model_states).
_PEFT = ("finetune", "lora_rank", "lora_targets", "quantization", "lora_dropout", "dora",
         "lora_expert_params")
#: ... and TRL's chunked loss (``loss_type`` chunked_nll: the SFTTrainer's patched forward,
#: memsym.terms.chunked_loss), which the engine runs as it runs the model.
_BESIDE = (*_PEFT, "chunked_loss")


def _refuse_two():
    from ..errors import InvalidValueError

    raise InvalidValueError("give one of --bridge-recipe, --deepspeed-config, --torchtitan-config")


def _bridge_job(args):
    """The Job of a Megatron-Bridge recipe and its overrides (memsym.readers.bridge): the
    recipe names the model and sets the layout and the training, so memsym's layout and
    training options and Megatron-LM arguments beside it are refused; a MODEL beside it (a
    preset, a config.json or a Hub id) replaces the recipe's model (said in the notes)."""
    from ..errors import InvalidValueError
    from ..job import job
    from ..readers.bridge import bridge_job_options, read_bridge_recipe
    from ..readers.bridge_command import launcher_world_size
    from ..readers.te_attention import recipe_attention_notes

    words = args.job_words
    host = set(host_options(args)) | {"world_size"}
    said = sorted(k for k in memsym_options(args) if k not in host and not k.startswith("_"))
    said += [n for n in ARCH_OPTIONS if getattr(args, n, None) is not None]
    if said:
        raise InvalidValueError(f"{', '.join(said)[:60]}: with --bridge-recipe the recipe sets the "
                                "layout and the training; change them with section.field=value "
                                "overrides (only a MODEL, --world-size, the GPU and the "
                                "allowances go beside it)")
    # memsym's --world-size, else WORLD_SIZE or torchrun's options, else the recipe's name
    world = args.world_size if args.world_size is not None else launcher_world_size(words.megatron)
    reading = read_bridge_recipe(args.bridge_recipe, words.bridge, world_size=world)
    preset, opts, notes = bridge_job_options(reading, args.model)
    if opts.get("world_size") is None:
        raise InvalidValueError(f"{reading['recipe']}: its name gives no GPU count: give --world-size")
    extra = host_options(args)
    # the attention TE runs under the recipe's FP8 attention (a sink: on the GPU's arch)
    notes += recipe_attention_notes(reading["values"], preset, extra.get("gpu"))
    j = job(preset, **opts, **extra, _notes=tuple(notes))
    args.reading = {"read_as": f"the Megatron-Bridge recipe {reading['recipe']} ({reading['source']} "
                    "at 067f987df0) with its overrides", "ignored": list(reading["ignored"])}
    return j


def framework_read_as(args) -> str:
    """How a framework's config or recipe was read (:func:`framework_job_from_args`)."""
    path = str(args.torchtitan_config or "")
    python = path.rpartition(":")[0].endswith(".py") or path.endswith(".py")
    return ("a DeepSpeed config" if args.deepspeed_config else
            "a torchtitan Python config (read with ast, not run)" if python and path else
            "a torchtitan job TOML (v0.2 keys)" if path else args.reading["read_as"])
