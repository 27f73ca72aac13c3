"""A pasted Hugging Face Trainer launch as memsym's own options (:mod:`memsym.readers.hf_trainer`).

The rule that sends a command here rather than to Megatron-LM's reader
(:func:`memsym.readers.hf_trainer.is_hf_trainer_launch`): some option names a field of
transformers' ``TrainingArguments`` (or of run_clm.py) in transformers' own underscore spelling
(``--per_device_train_batch_size``, ``--output_dir``, ``--model_name_or_path``) or is
``--deepspeed`` / ``--fsdp`` / ``--optim``, and is not a Megatron-LM argument, and the script
is not Megatron's ``pretrain_*.py``.  Megatron-LM spells every argument with dashes, so a
Megatron launch never qualifies.

The launch is read once, then written as the memsym options that say the same job, which the
job commands read as they read any other: with ``--deepspeed ds.json``, ``--deepspeed-config
ds.json --world-size N --micro-batch-size b --num-microbatches GAS --precision P`` (the config's
``"auto"`` values filled from them as the Trainer fills them) and ``--recompute-granularity
full`` for the model's gradient checkpointing.  Plain DDP (neither ``--deepspeed`` nor
``--fsdp``) is refused in one line: the weights' dtype is the script's (transformers 5.25 loads
the checkpoint's, ``dtype="auto"``), and torch DDP's reducer keeps a second copy of every
gradient in its buckets (Accelerate's ``gradient_as_bucket_view`` False), which memsym's DDP
does not count.
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..limits import check_limit
from ..readers.hf_trainer import load_dtype, read_hf_trainer_launch
from ..readers.hf_trainer_args import ADAMW, TRAINING_ARGS
from ..text import looks_like_option

__all__ = ["hf_trainer_words", "hf_report"]

#: memsym's options a launch sets (a second spelling of them beside the launch is refused).
_SET = ("--deepspeed-config", "--micro-batch-size", "--num-microbatches", "--global-batch-size",
        "--precision", "--recompute-granularity", "--recompute", "--framework", "--sharding")

#: memsym's options the launch was written as -> the launch's own words (in the report).
_SPELLED = (("--micro-batch-size", "--per_device_train_batch_size"),
            ("--num-microbatches", "--gradient_accumulation_steps"),
            ("--precision bf16", "--bf16"), ("--precision fp16", "--fp16"),
            ("--precision fp32", "neither --bf16 nor --fp16"))

#: The weights' dtype of a plain-DDP job: run_clm.py's --dtype choices (ModelArguments.dtype).
_FP32 = ("float32",)


def hf_trainer_words(own_arities, words, *, searched: bool = False):
    """``(memsym's words, HfTrainerLaunch)`` of a Hugging Face Trainer launch ``words``.

    For ``memsym search`` (``searched``) the micro-batch is the search's: the launch gives the
    global batch it holds, per_device_train_batch_size x gradient_accumulation_steps x GPUs
    (:func:`memsym.readers.deepspeed.searched_deepspeed_config`).

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "ds.json")
    >>> with open(path, "w") as fh:
    ...     _ = fh.write('{"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"}}')
    >>> words, r = hf_trainer_words({"--gpu": 1}, ["deepspeed", "--num_gpus", "8", "run_clm.py",
    ...     "--deepspeed", path, "--model_name_or_path", "llama3-8b", "--bf16",
    ...     "--gradient_checkpointing", "--block_size", "4096", "--gpu", "h100-80gb"])
    >>> " ".join(words).replace(path, "ds.json")
    'llama3-8b --deepspeed-config ds.json --micro-batch-size 8 --num-microbatches 1 --precision bf16 --world-size 8 --recompute-granularity full --seq-length 4096 --gpu h100-80gb'
    """
    r = read_hf_trainer_launch(words, own_arities)
    own = list(r.own)
    models = [w for k, w in enumerate(own) if not looks_like_option(w)
              and (k == 0 or not looks_like_option(own[k - 1]) or own_arities.get(own[k - 1]) == 0)]
    given = {w.partition("=")[0] for w in own if looks_like_option(w)}
    said = sorted(given & set(_SET))
    if said:
        raise InvalidValueError(f"{said[0]} beside a Hugging Face Trainer launch: its arguments "
                                "say it (--deepspeed, --per_device_train_batch_size, "
                                "--gradient_accumulation_steps, --bf16, --gradient_checkpointing)")
    model = r.model
    if models:
        if r.model is not None:
            r.notes.append(f"MODEL {models[0][:60]} read for --model_name_or_path {r.model[:60]}")
        model = None          # the MODEL named beside the launch is in ``own``
    elif model is None:
        raise InvalidValueError("name the model: --model_name_or_path (a config.json directory "
                                "or a Hub id) or a MODEL beside the launch")
    out = [] if model is None else [model]
    if r.deepspeed is None:
        _refuse_ddp(r)
    _check_config(r, searched)
    out += _batch_words(r, searched)
    if r.world_size is not None:
        if "--world-size" in given:
            raise InvalidValueError("--world-size beside a launch that gives its processes: give "
                                    "one of them")
        out += ["--world-size", str(r.world_size)]
    elif "--world-size" not in given:
        raise InvalidValueError("the launcher does not say how many processes: give "
                                "--num_gpus / --nproc_per_node / --num_processes, or --world-size")
    if r.recompute:
        out += ["--recompute-granularity", "full"]
    if r.seq_length is not None:
        if "--seq-length" in given:
            raise InvalidValueError("--seq-length beside run_clm.py's --block_size: give one")
        out += ["--seq-length", str(r.seq_length)]
    elif "--seq-length" not in given:
        raise InvalidValueError("the sequence length: give run_clm.py's --block_size or "
                                "memsym's --seq-length (a Trainer script's default is its "
                                "tokenizer's, unknown here)")
    return out + own, r


def _batch_words(r, searched):
    """The DeepSpeed config and the batch as memsym's words: the micro-batch and accumulation,
    or under a search (which varies the micro-batch) the global batch it holds."""
    if not searched:
        return ["--deepspeed-config", r.deepspeed, "--micro-batch-size", str(r.micro_batch_size),
                "--num-microbatches", str(r.gradient_accumulation_steps),
                "--precision", r.precision]
    if r.world_size is None:
        raise InvalidValueError("the launcher does not say how many processes, so the global "
                                "batch a search holds is unknown: give --num_gpus / "
                                "--nproc_per_node / --num_processes")
    batch = check_limit("global_batch", r.micro_batch_size * r.gradient_accumulation_steps
                        * r.world_size, "per_device_train_batch_size x accumulation x GPUs")
    return ["--deepspeed-config", r.deepspeed, "--global-batch-size", str(batch),
            "--precision", r.precision]


def _check_config(r, searched):
    """The launch against its DeepSpeed config, as the Trainer checks them: ``--optim`` (unused
    where the config has its own optimizer section: transformers 5.25
    integrations/deepspeed.py:578, ``deepspeed_optim_sched``; the Trainer's
    ``create_optimizer`` otherwise, :589), and each value of the config's own that differs
    from the argument that would fill it (``trainer_config_process``'s ``fill_match``,
    :110-134 and :138-194: a mismatch ``trainer_config_finalize`` refuses)."""
    from ..readers._values import load_json, read_bounded
    from ..readers.hf_trainer import refused_optim

    source = r.deepspeed
    text = source if source.lstrip().startswith("{") else read_bounded(source, "DeepSpeed config")
    cfg = load_json(text, "DeepSpeed config")
    if not isinstance(cfg, dict):
        return                    # the DeepSpeed reader says what is wrong with it
    if r.optim is not None and r.optim not in ADAMW:
        if "optimizer" not in cfg:
            raise InvalidValueError(refused_optim(r.optim))
        r.ignored.append("optim")
        r.notes.append(f"--optim {r.optim[:40]} unused: the DeepSpeed config's optimizer "
                       "section is the one DeepSpeed builds (transformers "
                       "integrations/deepspeed.py:578, deepspeed_optim_sched)")
    checks = [("bf16.enabled", r.precision == "bf16", "--bf16 (or --bf16_full_eval)"),
              ("fp16.enabled", r.precision == "fp16", "--fp16 (or --fp16_full_eval)")]
    if not searched:
        checks += [("train_micro_batch_size_per_gpu", r.micro_batch_size,
                    "--per_device_train_batch_size (default 8)"),
                   ("gradient_accumulation_steps", r.gradient_accumulation_steps,
                    "--gradient_accumulation_steps (default 1)")]
        if r.world_size is not None:
            checks.append(("train_batch_size", r.micro_batch_size * r.gradient_accumulation_steps
                           * r.world_size, "GPUs x per-device batch x accumulation"))
    for key, hf, said in checks:
        section, _, leaf = key.rpartition(".")
        node = cfg.get(section) if section else cfg
        value = node.get(leaf) if isinstance(node, dict) else None
        if value is not None and value != "auto" and value != hf:
            raise InvalidValueError(
                f"the DeepSpeed config's {key} {str(value)[:20]} differs from the launch's {said}: "
                f"{str(hf)[:20]}; the Trainer refuses the mismatch (trainer_config_process, "
                'fill_match): set it to "auto" or give the argument')


def _refuse_ddp(r):
    """Plain DDP (no ``--deepspeed``): refused in one line, with what memsym would miss."""
    dtype = load_dtype(r)
    said = ("the model loaded in the checkpoint's dtype (transformers 5.25 from_pretrained "
            'dtype "auto", modeling_utils.py:4236-4237: 16-bit weights, gradients and AdamW '
            "states, no fp32 copy) and " if dtype not in _FP32 else "")
    raise InvalidValueError(
        f"plain DDP (no --deepspeed, no --fsdp) is not read: {said}torch DDP's reducer keeps its "
        "gradient buckets beside param.grad (Accelerate 1.16 DistributedDataParallelKwargs "
        "gradient_as_bucket_view False; torch distributed.py: a second copy of every gradient), "
        "which memsym's DDP does not count; give --deepspeed ds.json (ZeRO) or memsym's options")


def hf_report(args, rep: dict) -> None:
    """Say in an estimate's report that the job is a Trainer launch: how it was read, the
    fields ignored, the notes and the Trainer's defaults taken (each with its source)."""
    words = getattr(args, "job_words", None)
    r = getattr(words, "hf_trainer", None)
    if r is None:
        return
    rep["read_as"] = (f"a Hugging Face Trainer launch ({r.script[:60]} with DeepSpeed; "
                      f"{TRAINING_ARGS} semantics and defaults)")
    rep["ignored"] = [n if n.endswith("(environment)") else f"--{n}" for n in r.ignored] + list(rep.get("ignored", []))
    rep["notes"] = list(dict.fromkeys(list(r.notes) + list(rep.get("notes", []))))
    rows = [{"option": name, "value": value, "source": source}
            for name, value, source in r.defaults]
    for row in rep.get("defaults", []):       # the DeepSpeed reader's words, the launch's
        source = str(row.get("source", ""))
        for mine, theirs in _SPELLED:
            source = source.replace(mine, theirs)
        rows.append({**row, "source": source})
    rep["defaults"] = rows
