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
``--fsdp``) is ``--framework deepspeed --sharding ddp --torch-ddp-buckets --optimizer adam
--precision P`` (the transformers model code; torch ``DistributedDataParallel`` through
Accelerate, whose reducer keeps a second copy of every gradient in its buckets, and
``torch.optim.AdamW`` on the module's own parameters, every state in their dtype, no fp32
master copy: :mod:`memsym.terms.torch_ddp`), ``P`` the weights' dtype: run_clm.py's ``--dtype``
or, without it, the checkpoint's config.json ``dtype`` (transformers 5.25 loads
``dtype="auto"``).  ``--bf16`` over bf16 weights casts no weight; on GPT-2, GPT-NeoX, Phi,
StableLM, GPT-J, CodeGen, GPTBigCode, StarCoder2, OPT, Falcon, BLOOM and MPT it is
``--precision bf16 --autocast bf16`` (their LayerNorms and gelu_new's pow run in fp32 on a GPU:
:func:`memsym.terms.autocast16.autocast16_layer_excess`), on the Llama family the 16-bit job
(nothing more kept), and on any other model the 16-bit job with a note saying what is not
counted (:func:`_autocast16`); over fp32 weights it is ``--precision fp32 --autocast bf16`` (a
16-bit cast of every linear weight kept for the backward, an fp32 residual stream:
:mod:`memsym.terms.autocast`); over 16-bit weights of the other dtype, and ``--fp16`` over fp16
weights (the GradScaler refuses their gradients), it is refused in one line.  ``--fsdp`` is
Accelerate's FSDP2, ``--framework deepspeed --sharding fsdp --accelerate-fsdp mixed|plain``
(:mod:`memsym.cli.hf_fsdp_launch`).

``search``, ``solve`` and ``plot`` read the same words and say the same reading
(:func:`hf_reading`, :func:`reading_lines`); the DeepSpeed config is parsed once, where the
launch is checked against it, and the job's reader takes that parse (:func:`config_of`).
"""

from __future__ import annotations

import copy

from ..errors import InvalidValueError
from ..limits import check_limit
from ..readers.hf_trainer import read_hf_trainer_launch
from ..readers.hf_trainer_args import ADAMW, TRAINING_ARGS
from .hf_fsdp_launch import fsdp_words
from .hf_weights import DTYPE_NAMES, DTYPES, checkpoint_config, weights_dtype
from ..text import looks_like_option, printable
from .report_text import notes_and_defaults

__all__ = ["hf_trainer_words", "hf_report", "hf_reading", "reading_lines", "read_as",
           "launch_of", "config_of"]

#: memsym's options a launch sets (a second spelling of them beside the launch is refused).
_SET = ("--deepspeed-config", "--micro-batch-size", "--num-microbatches", "--global-batch-size",
        "--precision", "--recompute-granularity", "--recompute", "--framework", "--sharding",
        "--optimizer", "--torch-ddp-buckets", "--overlap-grad-reduce", "--autocast",
        "--chunked-loss", "--accelerate-fsdp", "--fsdp-keep-gathered", "--overlap-param-gather")

#: memsym's LoRA options, said by TRL's --use_peft.
_LORA = ("--finetune", "--lora-rank", "--lora-targets", "--lora-quantization", "--lora-dropout",
         "--dora", "--lora-expert-params")

#: memsym's options the launch was written as -> the launch's own words (in the report).
_SPELLED = (("--micro-batch-size", "--per_device_train_batch_size"),
            ("--num-microbatches", "--gradient_accumulation_steps"),
            ("--precision bf16", "--bf16"), ("--precision fp16", "--fp16"),
            ("--precision fp32", "neither --bf16 nor --fp16"))

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
    if r.fsdp is not None:
        out += fsdp_words(r)          # Accelerate's FSDP2 (memsym.cli.hf_fsdp_launch)
    elif r.deepspeed is None:
        out += _ddp_words(r)
    else:
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
    out += ["--recompute-granularity", "full" if r.recompute else "none"]
    if r.chunked_loss:   # TRL's loss_type chunked_nll (memsym.readers.trl_sft)
        out.append("--chunked-loss")
    if r.lora is not None:
        said = sorted(given & set(_LORA))
        if said:
            raise InvalidValueError(f"{said[0]} beside TRL's --use_peft: its arguments say it "
                                    "(--lora_r, --lora_target_modules, --load_in_4bit)")
        out += _lora_words(r)
    if r.seq_length is not None:
        if "--seq-length" in given:
            raise InvalidValueError("--seq-length beside run_clm.py's --block_size: give one")
        out += ["--seq-length", str(r.seq_length)]
    elif "--seq-length" not in given:
        raise InvalidValueError("the sequence length: give run_clm.py's --block_size or "
                                "memsym's --seq-length (a Trainer script's default is its "
                                "tokenizer's, unknown here)")
    return out + own, r


def _lora_words(r):
    """TRL's ``--use_peft`` (:mod:`memsym.readers.trl_sft`) as memsym's LoRA words: the rank,
    the targets (PEFT's default for the checkpoint's model type when not given) and the frozen
    base's format (QLoRA's NF4, else the weights' dtype)."""
    from ..readers.trl_sft import peft_default_targets

    lora = r.lora
    r.notes.append("--use_peft under plain DDP: only PEFT's adapters require a gradient, so "
                   "param.grad, DDP's buckets and AdamW's two moments are the adapters', in "
                   "fp32 (get_peft_model's autocast_adapter_dtype True: TRL sft_trainer.py:"
                   "1077-1096), beside the frozen base" if r.deepspeed is None else
                   "--use_peft under DeepSpeed: the engine casts every parameter, the adapters "
                   "too, to the config's dtype (DeepSpeed edaa72212 runtime/engine.py:1537-1544),"
                   " and the Trainer gives its optimizer only those that require a gradient "
                   "(transformers 5.25.0 integrations/deepspeed.py:671): ZeRO shards the "
                   "adapters' states as a trained model's; the frozen base is whole on each GPU "
                   "under ZeRO-1/2, partitioned under ZeRO-3")
    if not r.recompute:
        # measured on tiny Qwen3-MoE models (tests/test_peft_expert_params_only.py)
        r.notes.append("--use_peft without gradient checkpointing: no enable_input_require_"
                       "grads (trl f2cd57710a sft_trainer.py:1119-1121), so the frozen part "
                       "before the first adapter keeps nothing (with the experts alone: the "
                       "leading dense layers, the first MoE layer's attention); memsym counts "
                       "those layers as every other, an over-count")
    targets = lora["targets"]
    if targets is None:
        targets = peft_default_targets(checkpoint_config(r.model).get("model_type"), r,
                                       lora.get("expert_params", ()))
    if r.autocast is None and r.weights != "fp32":
        raise InvalidValueError(
            f"--use_peft over {DTYPE_NAMES[r.weights]} weights without --bf16 / --fp16: PEFT's fp32 "
            "adapters then run in fp32 on an fp32 copy of each input (_cast_input_dtype, peft "
            "v0.20.0 tuners_utils.py:1777-1792), mixed widths memsym does not model; keep the "
            "autocast (--bf16, TRL's default)")
    words = ["--finetune", lora["finetune"], "--lora-rank", str(lora["rank"])]
    words += ["--lora-dropout"] * bool(lora.get("dropout")) + ["--dora"] * bool(lora.get("dora"))
    if lora.get("expert_params"):
        words += ["--lora-expert-params", ",".join(lora["expert_params"])]
    if targets != "all":
        words += ["--lora-targets", ",".join(targets) or "none"]
    base = lora["quantization"] or r.weights
    return words + (["--lora-quantization", base] if base else [])


def _batch_words(r, searched):
    """The DeepSpeed config (none under plain DDP) and the batch as memsym's words: the
    micro-batch and accumulation, or under a search (which varies the micro-batch) the global
    batch it holds."""
    config = [] if r.deepspeed is None else ["--deepspeed-config", r.deepspeed]
    if not searched:
        return config + ["--micro-batch-size", str(r.micro_batch_size),
                         "--num-microbatches", str(r.gradient_accumulation_steps),
                         "--precision", r.weights or r.precision]
    if r.world_size is None:
        raise InvalidValueError("the launcher does not say how many processes, so the global "
                                "batch a search holds is unknown: give --num_gpus / "
                                "--nproc_per_node / --num_processes")
    # Ulysses' SP ranks read one sequence between them (_trainer_ulysses): world / sp
    sp = (r.config or {}).get("sequence_parallel_size", 1)
    ranks = r.world_size // sp if isinstance(sp, int) and not isinstance(sp, bool) and sp > 1 \
        and r.world_size % sp == 0 else r.world_size
    batch = check_limit("global_batch", r.micro_batch_size * r.gradient_accumulation_steps
                        * ranks, "per_device_train_batch_size x accumulation x GPUs")
    return config + ["--global-batch-size", str(batch), "--precision", r.weights or r.precision]


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
    r.config = cfg                # read once: the job's reader takes it from here (config_of)
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
    _trainer_ulysses(r, cfg)


def _trainer_ulysses(r, cfg):
    """A Trainer launch whose DeepSpeed config sets ``sequence_parallel_size`` > 1: read as
    Ulysses run by the script's ``ParallelismConfig`` (said in a note; no launch flag sets it
    for DeepSpeed), the config's own ``train_batch_size`` replaced as Accelerate replaces it
    (accelerate 1.16.0 ``accelerator.py:2321-2328``: micro-batch x accumulation x its
    data-parallel size)."""
    sp = cfg.get("sequence_parallel_size")
    if not isinstance(sp, int) or isinstance(sp, bool) or sp <= 1:
        return                    # 1, absent, or refused by the DeepSpeed reader
    r.notes.append(f"sequence_parallel_size {sp}: the Trainer runs Ulysses only where the "
                   "script gives TrainingArguments(parallelism_config=ParallelismConfig("
                   f'sp_backend="deepspeed", sp_size={sp})) (trainer.py:1820-1821; Accelerate '
                   "registers UlyssesSPAttentionHF, accelerator.py:2358-2396); accelerate "
                   "launch's --use_parallelism_config needs FSDP2 (commands/launch.py:1261-1262)")
    if cfg.get("train_batch_size", "auto") != "auto":
        r.config = {**cfg, "train_batch_size": "auto"}
        r.notes.append("train_batch_size replaced by micro-batch x accumulation x world size / "
                       "sequence_parallel_size, as Accelerate replaces it under Ulysses "
                       "(accelerator.py:2321-2328)")


def _ddp_words(r):
    """Plain DDP (no ``--deepspeed``, no ``--fsdp``) as memsym's words: the transformers model
    (``--framework deepspeed``: the model code the Trainer runs; no DeepSpeed engine) under
    ``--sharding ddp`` with torch DDP's bucket copy (``--torch-ddp-buckets``: torch.optim.AdamW
    on the module's parameters, every state in their dtype), at the weights' dtype
    (:func:`_weights_dtype`), with ``--autocast`` over fp32 weights; autocast over 16-bit
    weights of another dtype is refused in one line."""
    dtype, said = weights_dtype(r)
    weights, counted = DTYPES.get(dtype), False
    if weights is None:
        raise InvalidValueError(f"plain DDP with {said}: memsym counts float32, bfloat16 "
                                "or float16 weights (run_clm.py's --dtype choices)")
    if r.autocast is not None:
        _check_autocast(r.autocast, weights, said)
    r.weights = weights
    # --bf16 / --fp16 are autocast here: their default is no autocast, not the precision
    r.defaults = [("autocast", "none", src) if name == "precision" else (name, value, src)
                  for name, value, src in r.defaults]
    moments = "float32 (the adapters': below)" if r.lora else DTYPE_NAMES[weights]
    r.notes.append(
        f"plain DDP (no --deepspeed, no --fsdp) of {DTYPE_NAMES[weights]} weights ({said}): the "
        "Trainer wraps the model in torch DistributedDataParallel through Accelerate "
        "(transformers 5.25.0 trainer.py:758-766; Accelerate 1.16 DistributedDataParallelKwargs "
        "gradient_as_bucket_view False), whose reducer keeps a second copy of every gradient in "
        "its buckets (--torch-ddp-buckets: torch distributed.py:828, reducer.cpp "
        "Reducer::initialize_buckets); torch.optim.AdamW (--optim adamw_torch_fused, the "
        "default: training_args.py:806-814, trainer_optimizer.py:201-208) updates the "
        f"parameters in place, its two moments {moments} (torch/optim/adam.py:178-184 "
        "zeros_like(p)), no fp32 master copy")
    if r.autocast is not None and weights == "fp32":
        r.notes.append(
            f"--{r.autocast} runs the forward under torch.autocast({DTYPE_NAMES[r.autocast]}) "
            "(Accelerate 1.16 accelerator.py:1791-1801, utils/modeling.py:2066-2069) over the "
            "float32 weights (--autocast: memsym.terms.autocast): a cached 16-bit copy of every "
            "linear weight kept for the backward, an fp32 residual stream, the matmuls in "
            f"{DTYPE_NAMES[r.autocast]}; not counted: Accelerate's fp32 copy of the model's outputs "
            "(convert_outputs_to_fp32, accelerator.py:1796-1801, utils/operations.py:896-914)")
    elif r.autocast is not None:
        counted, said_ops = _autocast16(r)
        r.notes.append(
            f"--{r.autocast} runs the forward under torch.autocast({DTYPE_NAMES[weights]}) (Accelerate "
            "1.16 accelerator.py:1791-1801, utils/modeling.py:2066-2069), which casts no "
            f"{DTYPE_NAMES[weights]} weight (autocast caches casts of fp32 leaves only) "
            f"{said_ops}; not counted: Accelerate's fp32 copy of the model's outputs "
            "(convert_outputs_to_fp32, accelerator.py:1796-1801, utils/operations.py:896-914), "
            f"the logits' 4 x {r.micro_batch_size} x {r.seq_length or 'sequence'} x vocabulary "
            "bytes from the forward's end until compute_loss returns")
    if "ddp_bucket_cap_mb" in r.values:
        r.notes.append("--ddp_bucket_cap_mb groups the gradients into buckets of that size; "
                       "the buckets together hold every gradient once whatever the cap")
    # the reducer all-reduces each bucket from its autograd hooks as the backward fills it
    # (reducer.cpp, Reducer::autograd_hook -> mark_variable_ready): the reduce overlaps it
    return ["--framework", "deepspeed", "--sharding", "ddp", "--torch-ddp-buckets",
            "--optimizer", "adam", "--overlap-grad-reduce"] + (
        ["--autocast", r.autocast] if r.autocast is not None and (
            weights == "fp32" or counted) else [])


def _autocast16(r):
    """(whether memsym counts it, a phrase) for ``--bf16`` / ``--fp16`` over 16-bit weights
    of the same dtype: CUDA's autocast runs some ops in fp32 that meet the model's 16-bit
    tensors (LayerNorm, gelu_new's pow: :mod:`memsym.terms.autocast`); counted (memsym's
    ``--autocast``) on the measured layers (AUTOCAST16_LAYERS) of their default activation
    (qk_layernorm on Phi alone) in full training or plain LoRA under gradient checkpointing
    and the model's own loss, none on the Llama family, said as not counted on any other
    model."""
    from ..terms.autocast import AUTOCAST_ACTIVATIONS
    from ..terms.autocast16 import AUTOCAST16_LAYERS

    cfg = checkpoint_config(r.model)
    kind = cfg.get("model_type")
    measured = "/".join(k for k, v in AUTOCAST16_LAYERS.items() if v is not None)
    if kind in AUTOCAST16_LAYERS and AUTOCAST16_LAYERS[kind] is None:
        return False, ("and runs no op in fp32 on this model's 16-bit tensors that it does not "
                       f"run in fp32 itself ({kind}: its RMSNorm casts to fp32; measured, "
                       "memsym.terms.autocast)")
    field, measured_act = AUTOCAST_ACTIVATIONS.get(kind, ("", None))
    activation = cfg.get(field, measured_act)
    # Phi's qk_layernorm and Falcon's alibi measured (memsym.terms.autocast16)
    plain_norms = not (cfg.get("qk_layernorm") and kind != "phi") and cfg.get(
        "layer_norm_elementwise_affine", True) is not False
    # PEFT's LoRA as measured (memsym.job_checks_hf: plain LoRA, full recompute, whose
    # enable_input_require_grads gives every norm's input a gradient); TRL's chunked loss packs
    # the final norm's fp32 output (fp32 rows: job_checks_hf.check_chunked_loss)
    lora = r.lora
    peft = "TRL's chunked loss" if r.chunked_loss else None if lora is None else \
        "DoRA, a 4-bit base or expert parameters" if (
            lora["finetune"] != "lora" or lora["dora"] or lora["expert_params"]) else \
        "no gradient checkpointing" if not r.recompute else None
    if kind in AUTOCAST16_LAYERS and peft is None and activation == measured_act \
            and plain_norms:
        gelu = " and gelu_new's pow" if activation == "gelu_new" else ""
        return True, (f"but runs its LayerNorms{gelu} in fp32 on a GPU, which keep "
                      "fp32 copies of their 16-bit inputs (--autocast: memsym.terms.autocast, "
                      "autocast16_layer_excess; torch 2.13 aten/src/ATen/autocast_mode.h:870, "
                      ":874)")
    what = (f"a {printable(str(kind), 40)} model" if kind else "a model without a config.json "
            "type") + ((" under --use_peft" if lora else "") + f" with {peft}"
                       if peft and kind else "") + (
        " with qk_layernorm or LayerNorms without weight" if not plain_norms
        and peft is None else
        f" of activation {printable(str(activation), 40)}" if kind in AUTOCAST16_LAYERS
        and peft is None else "")
    return False, ("but runs some ops in fp32 on a GPU (torch 2.13 aten/src/ATen/"
                   "autocast_mode.h AT_FORALL_FP32: LayerNorm, pow, softmax, exp, ...), counted "
                   f"for full training (or plain LoRA under gradient checkpointing) of "
                   f"{measured} of their default activation; not counted "
                   f"for {what}: e.g. each LayerNorm's fp32 copy of its 16-bit input (2 bytes an "
                   "element more), weight and bias")


def _check_autocast(autocast, weights, said):
    """Refuse ``--bf16`` / ``--fp16`` (Accelerate's torch.autocast) over 16-bit weights of the
    other dtype (cast at every use) and fp16 weights under ``--fp16`` (the GradScaler refuses
    fp16 gradients); over fp32 weights it is memsym's ``--autocast`` (whose job check says
    which models it counts)."""
    if weights == autocast == "fp16":
        raise InvalidValueError(
            f"plain DDP with --fp16 over float16 weights ({said}): the Trainer's GradScaler "
            "refuses to unscale fp16 gradients at the first step (torch 2.13 "
            "torch/amp/grad_scaler.py:275: 'Attempting to unscale FP16 gradients.'); drop --fp16")
    if weights != autocast and weights != "fp32":   # fp32 weights: --autocast
        raise InvalidValueError(
            f"plain DDP with --{autocast} over {DTYPE_NAMES[weights]} weights ({said}): autocast "
            f"casts each weight to {DTYPE_NAMES[autocast]} at every use (it caches casts of fp32 "
            "leaves only), which memsym does not model; drop --" + autocast
            + (" or give --bf16" if weights == "bf16" else ""))


def read_as(r) -> str:
    """How a Trainer launch ``r`` was read, one phrase (every job command says it).

    Examples
    --------
    >>> from memsym.readers.hf_trainer import HfTrainerLaunch
    >>> read_as(HfTrainerLaunch(script="run_clm.py"))[:56]
    'a Hugging Face Trainer launch (run_clm.py with torch DDP'
    """
    how = ("Accelerate's FSDP2" if r.fsdp is not None else
           "torch DDP, no DeepSpeed config" if r.deepspeed is None else
           "the DeepSpeed config " + (r.deepspeed[:200] if not r.deepspeed.lstrip().startswith("{")
                                      else "given inline"))
    return (f"a Hugging Face Trainer launch ({r.script[:60]} with {how}; {TRAINING_ARGS} "
            "semantics and defaults)")


def config_of(args, source):
    """The DeepSpeed config ``source`` a job command reads: the one a Trainer launch parsed
    (a copy: the reader fills its "auto"s) where ``source`` is the path the launch named, else
    ``source`` itself."""
    r = launch_of(args)
    if r is None or r.config is None or source != r.deepspeed:
        return source
    return copy.deepcopy(r.config)


def launch_of(args):
    """The :class:`memsym.readers.hf_trainer.HfTrainerLaunch` a job command read, or None."""
    return getattr(getattr(args, "job_words", None), "hf_trainer", None)


def hf_report(args, rep: dict) -> None:
    """Say in a job command's report (``rep``: an estimate's, or the reading alone of a
    search, solve or plot, :func:`hf_reading`) that the job is a Trainer launch: how it was
    read, the fields ignored, the notes and the Trainer's defaults taken (each with its
    source), before what the config's reader and the job say."""
    r = launch_of(args)
    if r is None:
        return
    rep["read_as"] = read_as(r)
    rep["ignored"] = list(dict.fromkeys(
        [n if n.endswith("(environment)") else f"--{n}" for n in r.ignored]
        + list(rep.get("ignored", []))))
    rep["notes"] = list(dict.fromkeys(list(r.notes) + [_trainer(n, r) for n in rep.get("notes", [])]))
    rows = [{"option": name, "value": value, "source": source}
            for name, value, source in r.defaults]
    for row in rep.get("defaults", []):       # the DeepSpeed reader's words, the launch's
        source = str(row.get("source", ""))
        for mine, theirs in _SPELLED:
            source = source.replace(mine, theirs)
        rows.append({**row, "source": _trainer(source, r)})
    # one line per value: the Trainer's default that a DeepSpeed "auto" then takes (an
    # accumulation of 1 is TrainingArguments' default and the config's "auto") says both
    merged: dict = {}
    for row in rows:
        key = (row["option"], repr(row["value"]))
        if key in merged:
            merged[key]["source"] += "; " + row["source"]
        else:
            merged[key] = dict(row)
    rep["defaults"] = list(merged.values())


def hf_reading(args, job=None):
    """The reading of a Trainer launch as ``search``, ``solve`` and ``plot`` say it (None for
    any other job): ``read_as``, ``ignored`` (the launch's, then its DeepSpeed config's),
    ``notes`` and ``defaults`` (the launch's, then those of the ``job`` built from it), as
    :func:`hf_report` puts them in an estimate's report."""
    if launch_of(args) is None:
        return None
    from .job_report import defaults_rows

    reading = getattr(args, "reading", None) or {}
    rep = {"ignored": [str(x) for x in reading.get("ignored", [])],
           "notes": [] if job is None else list(job.notes),
           "defaults": [] if job is None else defaults_rows(job.defaults, job.training.states)}
    hf_report(args, rep)
    return rep


def reading_lines(rep) -> list:
    """The text lines of a reading (:func:`hf_reading`), worded as an estimate's report words
    them (:mod:`memsym.cli.report_text`); none for None.

    Examples
    --------
    >>> reading_lines({"read_as": "x", "ignored": ["--a"], "notes": ["n"],
    ...                "defaults": [{"option": "o", "value": 1, "source": "s"}]})
    ['read as x', 'ignored (no effect on memory or time): --a', 'note: n', 'default: o = 1 (s)']
    """
    if not rep:
        return []
    out = [f"read as {rep['read_as']}"]
    if rep.get("ignored"):
        out.append("ignored (no effect on memory or time): " + " ".join(rep["ignored"]))
    return out + notes_and_defaults(rep)


def _trainer(text: str, r) -> str:
    """``text`` with DeepSpeed named as the runner where plain DDP runs the model (the
    job's ``--framework deepspeed`` stands for the transformers model code)."""
    return text if r.deepspeed is not None else text.replace(
        "DeepSpeed runs the transformers model", "the Trainer runs the transformers model")
