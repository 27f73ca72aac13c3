"""Framework inputs as memsym jobs: a read Megatron-LM argument list becomes a
:class:`memsym.job.Job` with Megatron's meaning (its defaults were applied by the reader).

The mapping is one function per framework and says, in the job's notes, where memsym's model
approximates the framework's (Megatron-FSDP's strategies as the sharding schemes that keep
the same states, recompute modules as Korthikanti's selective recompute).
"""

from __future__ import annotations

from ..errors import InvalidValueError

__all__ = ["megatron_job", "MEGATRON_FSDP_SCHEMES"]

#: Megatron-FSDP's --data-parallel-sharding-strategy -> the scheme that shards the same
#: states (megatron/core/distributed/fsdp: no_shard keeps everything, optim shards the
#: optimizer states, optim_grads also the gradients, optim_grads_params also the weights).
MEGATRON_FSDP_SCHEMES = {"no_shard": "ddp", "optim": "distributed-optimizer",
                         "optim_grads": "zero2", "optim_grads_params": "fsdp"}


def megatron_job(mj, model=None, **options):
    """The :class:`memsym.job.Job` of a :class:`memsym.readers.megatron.MegatronJob`.

    Parameters
    ----------
    mj : MegatronJob
        From :func:`memsym.readers.megatron.read_megatron_args`.
    model : str, optional
        A preset or config.json whose architecture the arguments' model fields override
        (a pasted command normally carries the whole model, so this is usually None).
    **options
        Job options on top (``gpu``, ``capacity``, ``convention``, allowances, ...).

    Returns
    -------
    Job
        With the reader's notes, and one per approximation made here.

    Examples
    --------
    >>> from memsym.readers.megatron import read_megatron_args
    >>> mj = read_megatron_args(["--num-layers", "2", "--hidden-size", "64",
    ...     "--num-attention-heads", "4", "--seq-length", "32", "--max-position-embeddings", "32",
    ...     "--vocab-size", "1000", "--tokenizer-type", "NullTokenizer", "--world-size", "2",
    ...     "--micro-batch-size", "1", "--bf16"])
    >>> j = megatron_job(mj)
    >>> j.layout.d, j.training.sharding, j.training.precision
    (2, 'ddp', 'bf16')
    """
    from ..job import job

    notes = list(mj.notes)
    lay, trn, prec, opt = mj.layout, mj.training, mj.precision, mj.optimizer
    opts = {k: lay[k] for k in ("t", "p", "c", "e", "t_e", "v", "sequence_parallel",
                                "first_stage_layers", "last_stage_layers") if lay.get(k) is not None}
    if lay.get("world_size") is not None:
        opts["world_size"] = lay["world_size"]
    elif lay.get("d") is not None:
        opts["d"] = lay["d"]
    else:
        raise InvalidValueError("the data-parallel size is world/(t p c): give --world-size N "
                                "(Megatron reads WORLD_SIZE from torchrun, not from its arguments)")
    opts.update(seq_length=trn["seq_length"], micro_batch_size=trn["micro_batch_size"])
    if trn.get("global_batch_size") is not None:
        opts["global_batch_size"] = trn["global_batch_size"]
    rc = trn.get("recompute") or {}
    granularity = rc.get("granularity")
    opts["recompute"] = granularity or "none"
    if granularity == "selective" and tuple(rc.get("modules") or ("core_attn",)) != ("core_attn",):
        notes.append(f"--recompute-modules {' '.join(rc['modules'])}: memsym models selective "
                     "recompute as Korthikanti's (the attention core's activations recomputed)")
    opts["flash_attention"] = bool(trn.get("flash_attention", True))
    hidden, attention = trn.get("hidden_dropout", 0), trn.get("attention_dropout", 0)
    opts["dropout"] = bool(hidden > 0 or attention > 0)
    if (hidden > 0) != (attention > 0):
        notes.append(f"dropout masks kept for both (--hidden-dropout {hidden}, --attention-dropout "
                     f"{attention}): memsym models one dropout setting")
    params = prec.get("params_dtype", "fp32")
    if prec.get("fp8"):
        opts["precision"] = "fp8"
        opts["fp8_param_gather"] = bool(prec.get("fp8_param_gather"))
    else:
        opts["precision"] = params
    if prec.get("grad_dtype") not in (None, "fp32"):
        opts["grad_dtype"] = prec["grad_dtype"]
    if prec.get("precision_aware_optimizer"):
        opts["precision_aware"] = True
    opts["optimizer"] = opt.get("optimizer", "adam")
    if opt.get("use_megatron_fsdp"):
        strategy = opt.get("data_parallel_sharding_strategy") or "optim_grads_params"
        opts["sharding"] = MEGATRON_FSDP_SCHEMES[strategy]
        notes.append(f"Megatron-FSDP {strategy}: counted as sharding {opts['sharding']} (the same "
                     "states sharded)")
    elif opt.get("use_torch_fsdp2"):
        opts["sharding"] = "fsdp"
    else:
        # Megatron-LM: plain DDP unless --use-distributed-optimizer (arguments.py store_true)
        opts["sharding"] = "distributed-optimizer" if opt.get("use_distributed_optimizer") else "ddp"
    opts.update(mj.architecture if model is None else
                {k: v for k, v in mj.architecture.items() if v is not None})
    opts.update(options)
    return job(model, _notes=tuple(notes), **opts)
