"""memsym's own command-line options as a job's options: the layout, training and host
options given (only those given: argparse's absent options are None, so no default of the
command line's own enters a job), for every input a job is read from (a MODEL, a pasted
Megatron-LM command, a framework's config or recipe: :mod:`memsym.cli.training_options`,
:mod:`memsym.cli.framework_jobs`).
"""

from __future__ import annotations

from .option_table import arch_options, job_fields, switches

__all__ = ["ARCH_OPTIONS", "host_options", "memsym_options", "grad_reduce"]

#: option dest -> Architecture field (Megatron-LM long names, dashes for underscores).
ARCH_OPTIONS = arch_options()


def host_options(args) -> dict:
    """The job options memsym's own (host) options give, whatever the framework input."""
    from ..terms.model_state import CONVENTIONS

    extra = {}
    if args.convention in CONVENTIONS and args.convention != "framework":
        extra["convention"] = args.convention
    for key, dest in (("workspace", "workspace"), ("nccl", "nccl_buffers"),
                      ("fragmentation", "fragmentation")):
        if getattr(args, dest, None) is not None:
            extra[key] = getattr(args, dest)
    if getattr(args, "metric", None) is not None:
        extra["metric"] = args.metric
    if getattr(args, "gpu", None) is not None:
        extra["gpu"] = args.gpu
    if getattr(args, "gpu_memory", None) is not None:
        extra["capacity"] = args.gpu_memory
    if getattr(args, "gpus_per_node", None) is not None:
        extra["gpus_per_node"] = args.gpus_per_node
    return extra


#: (dest, Job option) of the valued layout and training options (memsym.cli.option_table);
#: None values are left to the job's defaults (memsym.job.DEFAULTS), so the command line has
#: no defaults of its own.
_JOB_OPTIONS = job_fields()


def memsym_options(args) -> dict:
    """The job options memsym's own options give, only those given (argparse's absent
    options are None or False, so no default of the command line's own enters a job)."""
    from ..errors import InvalidValueError
    from .options import resolve_scheme

    opts = {dest_job: getattr(args, dest) for dest, dest_job in _JOB_OPTIONS
            if getattr(args, dest, None) is not None}
    if getattr(args, "sequence_parallel", False):
        opts["sequence_parallel"] = True
    for flag in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        if getattr(args, flag, False):
            opts[flag] = True
    if getattr(args, "no_flash_attn", False):
        opts["flash_attention"] = False
    elif getattr(args, "use_flash_attn", False):
        opts["flash_attention"] = True
    hidden, attention = getattr(args, "hidden_dropout", None), getattr(args, "attention_dropout", None)
    if getattr(args, "dropout", False):      # --dropout: masks kept, as Megatron's 0.1
        if 0 in (hidden, attention):
            raise InvalidValueError("--dropout keeps dropout masks: a dropout of 0 contradicts it")
        hidden = attention = hidden or attention or 1
    if hidden is not None or attention is not None:
        hidden = hidden if hidden is not None else attention
        attention = attention if attention is not None else hidden
        if (hidden > 0) != (attention > 0):
            raise InvalidValueError("memsym models one dropout setting: give --hidden-dropout and "
                                    "--attention-dropout both zero or both non-zero")
        opts["dropout"] = hidden > 0
    if getattr(args, "sharding", None) is not None or getattr(args, "use_distributed_optimizer", False):
        opts["sharding"] = resolve_scheme(args)
    if getattr(args, "grad_reduce_in_bf16", False):
        # Megatron's validate_args: the flag only stops --bf16 forcing fp32 gradients; under
        # fp16 or fp32 parameters it changes nothing (the reader notes the same)
        opts["_grad_reduce_in_bf16"] = True
    if getattr(args, "fp8_param_gather", False):
        opts["fp8_param_gather"] = True
    if getattr(args, "fp4_param_gather", False):
        opts["fp4_param_gather"] = True
    if getattr(args, "first_last_layers_bf16", False):   # Megatron's counts: 1 by default
        opts["bf16_layers"] = tuple(1 if n is None else n for n in (
            getattr(args, "num_layers_at_start_in_bf16", None),
            getattr(args, "num_layers_at_end_in_bf16", None)))
    for name in ("lora_regather", "lora_dropout", "dora"):
        if getattr(args, name, False):
            opts[name] = True
    if getattr(args, "should_pad_vocab", False) and args.convention != "megatron-bridge":
        opts["_notes"] = ("--should-pad-vocab has effect only with --convention megatron-bridge "
                          "(Megatron-Bridge's GPTModelProvider.should_pad_vocab)",)
    for _, dest, option, value in switches():
        if getattr(args, dest, False):
            opts[option] = value
    if getattr(args, "framework", None) is not None:
        opts["framework"] = args.framework
    # the convention (a framework estimator such as megatron-bridge reports its own breakdown
    # beside the job's), allowances, GPU, capacity and node size: as for every input
    opts.update(host_options(args))
    if getattr(args, "world_size", None) is not None:
        opts["world_size"] = args.world_size
    return opts


def grad_reduce(opts: dict) -> dict:
    """``--grad-reduce-in-bf16`` as Megatron's validate_args reads it: a bf16 gradient buffer
    under bf16 (or fp8) parameters, no effect otherwise (said in a note)."""
    if opts.pop("_grad_reduce_in_bf16", False):
        if opts.get("precision", "bf16") in ("bf16", "fp8"):
            opts["grad_dtype"] = "bf16"
        else:
            opts["_notes"] = tuple(opts.get("_notes", ())) + (
                "--grad-reduce-in-bf16 has effect only with bf16 parameters (Megatron's --bf16)",)
    return opts
