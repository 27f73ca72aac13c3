"""Read a pasted Hugging Face Trainer launch as the job it runs.

``deepspeed --num_gpus 8 train.py --deepspeed ds.json --per_device_train_batch_size 4
--gradient_checkpointing --bf16 ...``, ``torchrun --nproc_per_node 8 run_clm.py ...``,
``accelerate launch --num_processes 8 train.py ...`` and ``python train.py ...`` start a script
that parses ``TrainingArguments`` with ``HfArgumentParser`` (transformers 5.25.0; the fields,
their arities and lines: :mod:`memsym.readers.hf_trainer_args`).  The launcher gives the world
size, the arguments the job:

* ``--per_device_train_batch_size`` (default 8, training_args.py:777) is the micro-batch b,
  ``--gradient_accumulation_steps`` (default 1, :849) the accumulation;
* ``--bf16`` / ``--fp16`` (default False, :874, :880; ``--bf16_full_eval`` / ``--fp16_full_eval``
  count too, as ``trainer_config_process`` reads them) the precision, fp32 without them;
* ``--gradient_checkpointing`` / ``--activation_checkpointing`` (default None: off, :908,
  :926) the model's own checkpointing of every decoder layer, memsym's full recompute
  (:data:`memsym.readers.deepspeed_notes.MODEL_CHECKPOINTING`);
* ``--optim`` (default ``adamw_torch_fused``, :806-814): AdamW's two moments; any other
  optimizer is refused in one line, unless the DeepSpeed config has its own optimizer section
  (then DeepSpeed builds that one and ``--optim`` is ignored: :mod:`memsym.cli.hf_launch`);
* ``--deepspeed ds.json`` (:1463): the DeepSpeed config, read by
  :func:`memsym.readers.deepspeed.read_deepspeed_config` with its ``"auto"`` values filled
  from these arguments exactly as ``HfTrainerDeepSpeedConfig.trainer_config_process`` fills
  them (transformers 5.25.0 ``integrations/deepspeed.py:138-194``: micro-batch, accumulation,
  ``train_batch_size = world_size x per_device_train_batch_size x gradient_accumulation_steps``,
  ``fp16.enabled <- fp16 or fp16_full_eval``, ``bf16.enabled <- bf16 or bf16_full_eval``; a
  config value that differs from the argument is a mismatch the Trainer refuses, as memsym does);
* ``--fsdp`` / ``--fsdp_config`` (:1447, :1455): Accelerate's FSDP2 plugin, read as
  ``_process_fsdp_args`` reads them (:mod:`memsym.readers.hf_fsdp`; its job:
  :mod:`memsym.cli.hf_fsdp_launch`);
* without either, plain DDP (:mod:`memsym.cli.hf_launch`): torch DDP through Accelerate,
  whose reducer keeps a second copy of the gradients in its buckets
  (``DistributedDataParallelKwargs.gradient_as_bucket_view`` False:
  :mod:`memsym.terms.torch_ddp`), and ``torch.optim.AdamW`` keeps its moments in the
  parameters' dtype: read for the weights' dtype, run_clm.py's ``--dtype`` or the
  checkpoint's (transformers 5.25 ``from_pretrained`` loads ``dtype="auto"``, the checkpoint's
  dtype, unless told: modeling_utils.py:4236-4237), with ``--bf16`` / ``--fp16`` (autocast)
  only over 16-bit weights of the same dtype (:func:`memsym.cli.hf_launch.hf_trainer_words`).

The model is ``--model_name_or_path`` (a config.json directory or a Hub id, as memsym reads a
MODEL), the sequence run_clm.py's ``--block_size`` (its default is the tokenizer's maximum,
unknown here: memsym's ``--seq-length`` then) or memsym's ``--seq-length``.  Fields that change
nothing memsym estimates are read and listed as ignored; an unknown option is refused in one
line with the closest spellings.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from ..errors import InvalidValueError
from ..limits import check_limit
from ..text import looks_like_option, option_values
from ._values import MAX_BATCH, MAX_GPUS, MAX_SEQ, whole
from .hf_trainer_args import (ADAMW, BOOL_WORDS, FIELDS, IGNORED, REFUSED, REFUSED_DEFAULTS,
                              RUN_CLM, SCRIPT, TRAINING_ARGS, arity, field_name, flag_value)
from .hf_fsdp import FsdpReading, read_fsdp
from .megatron_arguments import megatron_arity
from .trl_sft import TRL_FIELDS, read_trl, trl_defaults, trl_field, trl_script

__all__ = ["HfTrainerLaunch", "read_hf_trainer_launch", "is_hf_trainer_launch", "LAUNCHERS",
           "refused_optim", "load_dtype"]

#: Launcher words -> (world-size options, per-node options, options with a value that change
#: nothing here, options without a value).  torchrun: torch/distributed/run.py ``get_args_parser``;
#: deepspeed: deepspeed/launcher/runner.py ``parse_args``; accelerate: commands/launch.py
#: ``launch_command_parser`` (``--num_processes``: all processes, over every machine).
LAUNCHERS = {
    "torchrun": ({"--nproc_per_node", "--nproc-per-node"}, {"--nnodes"},
                 {"--node_rank", "--node-rank", "--master_addr", "--master-addr", "--master_port",
                  "--master-port", "--rdzv_backend", "--rdzv-backend", "--rdzv_endpoint",
                  "--rdzv-endpoint", "--rdzv_id", "--rdzv-id", "--max_restarts",
                  "--max-restarts", "--log_dir", "--log-dir", "--redirects", "--tee",
                  "--local_addr", "--local-addr", "--monitor_interval", "--monitor-interval"},
                 {"--standalone"}),
    "deepspeed": ({"--num_gpus", "--num-gpus"}, {"--num_nodes", "--num-nodes"},
                  {"--hostfile", "--include", "--exclude", "--launcher", "--ssh_port",
                   "--master_port", "--master_addr"}, {"--force_multi", "--no_ssh_check"}),
    "accelerate": ({"--num_processes"}, set(),
                   {"--num_machines", "--machine_rank", "--main_process_ip", "--main_process_port",
                    "--rdzv_backend", "--gpu_ids", "--dynamo_backend"},
                   {"--multi_gpu", "--same_network"}),
}
#: Accelerate's own options that would change the job: refused (the Trainer's arguments say it).
_ACCELERATE_REFUSED = ("--use_deepspeed", "--use_fsdp", "--deepspeed_config_file",
                       "--mixed_precision", "--fsdp_sharding_strategy", "--zero_stage")
_SOURCE = f"{TRAINING_ARGS}, TrainingArguments"
#: TRL's argument names outside a TRL launch: said in one line.
TRL = ("TRL's argument: memsym reads it in TRL's SFT launch (trl sft ..., "
       "trl/scripts/sft.py: memsym.readers.trl_sft)")


@dataclass
class HfTrainerLaunch:
    """A Hugging Face Trainer launch, read.

    Attributes
    ----------
    world_size : int or None
        GPUs [GPUs]: the launcher's processes per node x nodes (None: not given).
    script : str
        The script started (``train.py``).
    values : dict
        field -> value read (only the fields given).
    model : str or None
        ``--model_name_or_path``.
    seq_length : int or None
        run_clm.py's ``--block_size`` [tokens].
    deepspeed : str or None
        The DeepSpeed config's path.
    micro_batch_size, gradient_accumulation_steps : int
        b [sequences] and the accumulation [1], defaults filled.
    precision : str
        ``bf16``, ``fp16`` or ``fp32``: ``--bf16`` / ``--fp16`` or their ``*_full_eval``, as
        DeepSpeed's config takes them.
    autocast : {"bf16", "fp16", None}
        Under plain DDP, Accelerate's training torch.autocast: ``--bf16`` / ``--fp16`` alone
        (training_args.py:1614-1618; ``*_full_eval`` cast the model for evaluation only).
    weights : str or None
        Under plain DDP, the parameters' dtype as memsym's precision (``fp32``, ``bf16``,
        ``fp16``: run_clm.py's ``--dtype`` or the checkpoint's), set by
        :mod:`memsym.cli.hf_launch`; None under ``--deepspeed``.
    recompute : bool
        The model's gradient checkpointing.
    optim : str or None
        ``--optim`` as given (under ``--deepspeed`` checked against the config's own optimizer
        by :mod:`memsym.cli.hf_launch`).
    own : list of str
        memsym's own options found among the words (and the MODEL), in order.
    ignored, notes, defaults : list
        Fields read that change nothing; what the reading says; (name, value, source) of each
        default taken.
    config : dict or None
        The DeepSpeed config, parsed once where the launch is checked against it
        (:mod:`memsym.cli.hf_launch`) and read from here by the job's reader.
    trl : bool
        TRL's SFT (``trl sft``, ``trl/scripts/sft.py``: :mod:`memsym.readers.trl_sft`).
    lora : dict or None
        TRL's ``--use_peft``: ``finetune`` (lora, qlora), ``rank``, ``targets`` (``"all"`` or
        memsym's names), ``quantization`` (None, nf4, nf4-dq), ``dropout`` (``lora_dropout``
        above 0) and ``dora`` (``use_dora``).
    chunked_loss : bool
        TRL's ``loss_type`` chunked_nll (its default): memsym's ``--chunked-loss``.
    fsdp : FsdpReading or None
        ``--fsdp`` / ``--fsdp_config`` as the Trainer reads them (None: FSDP off).
    """

    world_size: int | None = None
    script: str = ""
    values: dict = field(default_factory=dict)
    model: str | None = None
    seq_length: int | None = None
    deepspeed: str | None = None
    micro_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    precision: str = "fp32"
    weights: str | None = None
    autocast: str | None = None
    recompute: bool = False
    optim: str | None = None
    own: list = field(default_factory=list)
    ignored: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    defaults: list = field(default_factory=list)
    config: dict | None = None
    trl: bool = False
    lora: dict | None = None
    chunked_loss: bool = False
    fsdp: FsdpReading | None = None


def is_hf_trainer_launch(words) -> bool:
    """Whether ``words`` are a Hugging Face Trainer launch: some option names a field of
    TrainingArguments (or run_clm.py) in transformers' own spelling with ``_``
    (``--per_device_train_batch_size``, ``--model_name_or_path``, ``--output_dir``), or is
    ``--deepspeed`` / ``--fsdp`` / ``--optim``, and is not a Megatron-LM argument or torchrun
    option; and the script is not Megatron's (``pretrain_gpt.py``, any ``pretrain_*.py``:
    Megatron-DeepSpeed's ``--deepspeed`` switch is its own).  Megatron-LM spells its arguments
    with ``-``, so its launches never qualify.

    Examples
    --------
    >>> is_hf_trainer_launch(["torchrun", "train.py", "--per_device_train_batch_size", "4"])
    True
    >>> is_hf_trainer_launch(["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py",
    ...                       "--micro-batch-size", "4", "--bf16"])
    False
    >>> is_hf_trainer_launch(["deepspeed", "pretrain_gpt.py", "--deepspeed", "--zero-stage", "1"])
    False
    """
    if any(w == "trl" or isinstance(w, str) and w.endswith("trl/scripts/sft.py") for w in words):
        return True
    if any(isinstance(w, str) and w.rsplit("/", 1)[-1].startswith("pretrain_")
           and w.endswith(".py") for w in words):
        return False
    for w in words:
        if not isinstance(w, str) or not w.startswith("--"):
            continue
        name = w.partition("=")[0]
        spelled = name[2:]
        if (("_" in spelled and (spelled in FIELDS or spelled in SCRIPT))
                or spelled in ("deepspeed", "fsdp", "optim")) and megatron_arity(name) is None:
            return True
    return False


def read_hf_trainer_launch(words, own_arities=None) -> HfTrainerLaunch:
    """Read a Hugging Face Trainer launch (see the module's docstring).

    Parameters
    ----------
    words : list of str
        The pasted command, memsym's own options and MODEL among them.
    own_arities : dict, optional
        memsym's option -> arity (:func:`memsym.cli.reading.option_arities`); an option that
        is neither the Trainer's nor memsym's is refused.

    Returns
    -------
    HfTrainerLaunch

    Examples
    --------
    >>> r = read_hf_trainer_launch(["torchrun", "--nproc_per_node", "8", "run_clm.py",
    ...     "--model_name_or_path", "org/model", "--block_size", "2048", "--bf16",
    ...     "--gradient_checkpointing", "--output_dir", "out", "--dtype", "float32"])
    >>> r.world_size, r.micro_batch_size, r.precision, r.recompute, r.seq_length, r.ignored
    (8, 8, 'bf16', True, 2048, ['output_dir'])
    """
    own_arities = own_arities or {}
    out = HfTrainerLaunch()
    launcher, counts = _walk(list(words), own_arities, out)
    out.world_size = _world_size(launcher, counts, out)
    _read_values(out)
    if out.fsdp is not None and launcher == "python":
        raise InvalidValueError("--fsdp under python (one process): the Trainer runs FSDP in "
                                "distributed training only (trainer.py:477-478); launch with "
                                "torchrun or accelerate launch")
    return out


def _walk(words, own_arities, out):
    """Sort the words: the launcher's options (returned as ``(launcher, {option: value})``),
    the script, the Trainer's fields (``out.values``) and memsym's own words (``out.own``)."""
    launcher, counts, i, n, script = None, {}, 0, len(words), False
    while i < n:
        w = words[i]
        i += 1
        name, eq, inline = w.partition("=")
        if not script and launcher == "python" and w in ("-m", "-u"):
            if w == "-m" and i < n:              # python -m MODULE: torchrun's or the script
                module = words[i]
                i += 1
                if module in ("torch.distributed.run", "torch.distributed.launch"):
                    launcher = "torchrun"
                else:
                    script, out.script, out.trl = True, module, trl_script(module)
            continue
        if not looks_like_option(w):
            if not script and launcher is None and w in LAUNCHERS:
                launcher = w
                if w == "accelerate":
                    if i >= n or words[i] != "launch":
                        raise InvalidValueError("accelerate: the Trainer is started by "
                                                "`accelerate launch SCRIPT`")
                    i += 1
            elif not script and w.rsplit("/", 1)[-1].startswith("python"):
                launcher = launcher or "python"
            elif not script and w.endswith(".py"):
                script, out.script, out.trl = True, w, trl_script(w)
            elif w == "trl" and not script:
                if launcher is not None or i >= n or words[i] != "sft":
                    raise InvalidValueError("trl: memsym reads `trl sft ...` (it starts accelerate "
                                            "launch itself: trl/cli/commands/training.py:50-68)")
                script, out.script, out.trl, launcher = True, "trl sft", True, "accelerate"
                i += 1
            elif "=" in w and launcher is None and not out.own:
                out.ignored.append(w.partition("=")[0] + " (environment)")
            elif script:
                raise InvalidValueError(f"{w[:60]!r}: a Trainer script takes options only (an "
                                        "arguments file .json/.yaml is not read: paste its "
                                        "options)")
            else:
                out.own.append(w)          # the MODEL (memsym's positional)
            continue
        if launcher is not None and (not script or out.script == "trl sft"):
            got, i = _launcher_option(words, i, launcher, name, inline if eq else None, counts)
            if got:
                continue
        hf = trl_field(name) if out.trl else None
        hf = hf or field_name(name)
        if out.trl and hf in SCRIPT and hf not in TRL_FIELDS:
            hf = None                  # run_clm.py's, not TRL's
        if hf is not None:
            n_args = TRL_FIELDS[hf][0] if out.trl and hf in TRL_FIELDS else arity(hf)
            got, i = _values(words, i, name, n_args, inline if eq else None)
            out.values[hf] = got         # argparse: a later spelling wins
            continue
        if name in own_arities:
            got, i = _own_values(words, i, own_arities[name], inline if eq else None)
            out.own += [w, *got]
            continue
        raise _unknown(name)
    if not script and launcher is not None:
        raise InvalidValueError(f"{launcher}: a Hugging Face Trainer launch names its script "
                                "(train.py)")
    if launcher is None:      # the Trainer's arguments alone: the GPUs are --world-size
        out.script = "a Trainer script"
    return launcher, counts


def _launcher_option(words, i, launcher, name, inline, counts):
    """``(taken, next index)``: a launcher option read into ``counts`` (or dropped)."""
    if launcher == "python":
        return False, i
    world, nodes, valued, flags = LAUNCHERS[launcher]
    if launcher == "accelerate" and name in _ACCELERATE_REFUSED:
        raise InvalidValueError(f"accelerate launch {name} is not read: the Trainer's arguments "
                                "say the job (--deepspeed ds.json, --bf16)")
    if launcher == "accelerate" and name == "--config_file":
        counts["config_file"] = inline if inline is not None else (
            words[i] if i < len(words) else "")
        return True, i + (0 if inline is not None else 1)
    if name in flags:
        return True, i
    if name in world or name in nodes or name in valued:
        if inline is None and (i >= len(words) or looks_like_option(words[i])):
            raise InvalidValueError(f"{launcher} {name} needs a value")
        value = inline if inline is not None else words[i]
        i += 0 if inline is not None else 1
        if name in world:
            counts["per_node" if launcher != "accelerate" else "all"] = value
        elif name in nodes:
            counts["nodes"] = value
        return True, i
    return False, i


def _world_size(launcher, counts, out):
    """GPUs [GPUs] from the launcher's options, or None when it does not say."""
    if launcher is None:
        return None
    if launcher == "python":
        out.notes.append("python starts one process: 1 GPU (the Trainer's nn.DataParallel over "
                         "several visible GPUs is not modelled; launch with torchrun)")
        return 1
    if launcher == "accelerate" and "all" not in counts:
        if "config_file" in counts:
            raise InvalidValueError("accelerate launch --config_file: its process count is not "
                                    "read; give --num_processes N")
        return None
    if "per_node" not in counts and "all" not in counts:
        return None
    if "all" in counts:
        return check_limit("gpus", whole(counts["all"], "--num_processes", 1, MAX_GPUS), "GPUs")
    per = counts["per_node"]
    if per in ("gpu", "auto", "cpu"):
        raise InvalidValueError(f"{launcher} --nproc_per_node {per}: give the count of GPUs per "
                                "node")
    per = whole(per, "processes per node", 1, MAX_GPUS)
    nodes = whole(counts.get("nodes", "1"), "nodes (a fixed count; an elastic range is not "
                  "read)", 1, MAX_GPUS)
    return check_limit("gpus", per * nodes, "GPUs")


def _values(words, i, name, n, inline):
    """The values of a Trainer option (HfArgumentParser's arities): (values, next index)."""
    if n == 0:
        return [], i
    if n == "?":
        if inline is not None:
            return [inline], i
        if i < len(words) and words[i].lower() in BOOL_WORDS:
            return [words[i]], i + 1
        if i < len(words) and not looks_like_option(words[i]) and name.startswith("--fsdp"):
            return [words[i]], i + 1
        return [], i
    if inline is not None:
        return [inline], i
    got, j = option_values(words, i, n)
    if not got:
        raise InvalidValueError(f"{name} needs a value")
    return got, j


def _own_values(words, i, n, inline):
    """memsym's option's values (its parser's arity)."""
    if inline is not None or n == 0:
        return [], i
    if isinstance(n, frozenset):
        return (words[i:i + 1], i + 1) if i < len(words) and words[i] in n else ([], i)
    return option_values(words, i, n)


def _unknown(name):
    if trl_field(name) is not None:
        return InvalidValueError(f"{name[:40]}: {TRL}")
    accepted = sorted(f"--{k}" for k in (*FIELDS, *SCRIPT))
    # no field is 60 characters long: a longer word is compared with none (difflib is slow on
    # a 100 000-character word)
    close = [] if len(name) > 80 else difflib.get_close_matches(
        name.replace("-", "_").replace("__", "--", 1), accepted, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else \
        " (a script's own argument: memsym reads TrainingArguments and run_clm.py's)"
    return InvalidValueError(f"unknown Hugging Face Trainer argument {name[:80]!r}{hint}")


def _line(name) -> str:
    return f"{_SOURCE}.{name} (line {FIELDS[name][1]})"


def _read_values(out):
    """The job's settings from the fields read (defaults filled, each with its source)."""
    v = out.values
    if out.trl:
        trl_defaults(out)
    kept = set()
    for name in v:
        if name in REFUSED and v[name] and v[name][0] in REFUSED_DEFAULTS.get(name, ()):
            kept.add(name)          # its default spelled out: no effect
        elif name in REFUSED and (FIELDS[name][0] != "?" or flag_value(v[name], name)):
            raise InvalidValueError(f"--{name}: {REFUSED[name]}")
        elif name in REFUSED:
            kept.add(name)          # a switch turned off
    out.ignored += sorted(n for n in v if (n in IGNORED or n in kept or n.startswith("no_")
                          or (n in SCRIPT and n not in ("model_name_or_path", "block_size",
                                                        "dtype", "torch_dtype")))
                          and not (out.trl and n in TRL_FIELDS))
    _read_batch(out)
    bf16 = any(flag_value(v[k], k) for k in ("bf16", "bf16_full_eval") if k in v)
    fp16 = any(flag_value(v[k], k) for k in ("fp16", "fp16_full_eval") if k in v)
    # Accelerate's training autocast reads --bf16 / --fp16 alone (training_args.py:1614-1618);
    # the *_full_eval switches count only where DeepSpeed's config takes them (above)
    out.autocast = ("bf16" if "bf16" in v and flag_value(v["bf16"], "bf16") else
                    "fp16" if "fp16" in v and flag_value(v["fp16"], "fp16") else None)
    if bf16 and fp16:
        raise InvalidValueError("--bf16 and --fp16 both given: the Trainer takes one")
    out.precision = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    if not bf16 and not fp16:
        out.defaults.append(("precision", "fp32", f"{_line('bf16')} and .fp16 default False"))
    if "tf32" in v:
        flag_value(v["tf32"], "tf32")
        out.ignored.append("tf32")          # the matmuls' math mode: no memory
    on = [k for k in ("gradient_checkpointing", "activation_checkpointing") if k in v]
    said = {k: flag_value(v[k], k) for k in on}
    # gradient_checkpointing, the deprecated alias, counts only without activation_checkpointing
    # (training_args.py:1536-1545)
    out.recompute = said.get("activation_checkpointing", said.get("gradient_checkpointing", False))
    if not on:
        out.defaults.append(("recompute", "none", f"{_line('activation_checkpointing')} and "
                             ".gradient_checkpointing (line 926): default None, no checkpointing"))
    optim = v.get("optim", [None])[0]
    out.optim = optim
    if optim is not None and optim not in ADAMW and "deepspeed" not in v:
        raise InvalidValueError(refused_optim(optim))
    if optim is None and "deepspeed" not in v:   # a ds_config's own optimizer is its reader's
        out.defaults.append(("optimizer", "adamw_torch_fused", f"{_line('optim')}: AdamW, two "
                             "moments (adamw_torch before torch 2.8)"))
    # a bare --fsdp is True (nargs "?", const True: training_args.py:1447-1454)
    out.fsdp = read_fsdp(v, out.recompute)
    if out.fsdp is None and ("fsdp" in v or "fsdp_config" in v):
        out.ignored += [k for k in ("fsdp", "fsdp_config") if k in v]
        out.notes.append("FSDP off: --fsdp absent or empty, so the Trainer reads no "
                         "--fsdp_config (training_args.py:2776-2777)")
    if "deepspeed" in v:
        out.deepspeed = v["deepspeed"][0]
    if "model_name_or_path" in v:
        out.model = v["model_name_or_path"][0]
    if "block_size" in v:
        out.seq_length = check_limit("sequence", whole(v["block_size"][0], "--block_size", 1,
                                                       MAX_SEQ), "--block_size")
        out.notes.append(f"sequence length {out.seq_length} from run_clm.py's --block_size "
                         f"({RUN_CLM})")
    if out.trl:
        read_trl(out)


def refused_optim(optim: str) -> str:
    """The one line refusing an optimizer memsym does not count.

    Examples
    --------
    >>> refused_optim("adamw_bnb_8bit")[:28]
    '--optim adamw_bnb_8bit: mems'
    """
    return (f"--optim {optim[:40]}: memsym counts AdamW's two moments "
            f"({', '.join(sorted(ADAMW))}); other optimizers (8-bit, Adafactor, paged, GaLore, "
            "...) are not modelled")


def _read_batch(out):
    """b and the accumulation, TrainingArguments' defaults (8, 1) when not given."""
    v = out.values
    for key, attr, default in (("per_device_train_batch_size", "micro_batch_size", 8),
                               ("gradient_accumulation_steps", "gradient_accumulation_steps",
                                1)):
        if key in v:
            value = whole(v[key][0], f"--{key}", 1, MAX_BATCH)
            check_limit("micro_batch" if attr == "micro_batch_size" else "microbatches", value,
                        f"--{key}")
        else:
            value = default
            out.defaults.append((key, default, f"{_line(key)}: default {default}"))
        setattr(out, attr, value)


def load_dtype(out) -> str | None:
    """The dtype the script loads the model in (run_clm.py's ``--dtype`` / ``--torch_dtype``),
    or None when not given.

    Examples
    --------
    >>> load_dtype(HfTrainerLaunch(values={"dtype": ["float32"]}))
    'float32'
    """
    for key in ("dtype", "torch_dtype"):
        if key in out.values:
            return out.values[key][0]
    return None

