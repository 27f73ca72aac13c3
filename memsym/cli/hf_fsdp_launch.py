"""A Hugging Face Trainer launch with ``--fsdp`` as memsym's own options.

The launch's FSDP arguments, read as transformers 5.25.0 reads them
(:mod:`memsym.readers.hf_fsdp`), are the job Accelerate 1.16.0's FSDP2 plugin runs on
transformers' model (:mod:`memsym.terms.accelerate_fsdp`):

``--framework deepspeed --sharding fsdp --accelerate-fsdp MODE --optimizer adam
--overlap-grad-reduce --overlap-param-gather --precision P`` (``--framework deepspeed``: the
transformers model code, as for the Trainer's plain DDP; no DeepSpeed engine), with

* ``--bf16`` / ``--fp16``: MODE ``mixed``, P the 16-bit dtype: every trained parameter upcast
  to an fp32 shard (fsdp_utils.py:799-806), gathered and reduced in P (state.py:975-976,
  utils/dataclasses.py:2008-2012), no autocast (``_prepare_fsdp2`` never wraps the forward:
  accelerator.py:1643-1735), whatever dtype the checkpoint loads in;
* neither: MODE ``plain``, P the weights' dtype (run_clm.py's ``--dtype`` or the checkpoint's,
  :func:`memsym.cli.hf_weights.weights_dtype`), every tensor in it (fsdp_utils.py:768);
* ``shard_grad_op`` or ``fsdp_config`` ``reshard_after_forward`` false: ``--fsdp-keep-gathered``;
* ``fsdp_config`` ``activation_checkpointing``: Accelerate's checkpoint wrapper on each decoder
  layer (fsdp_utils.py:690-719), the same full recompute as the Trainer's own.

FSDP2 reshards after forward and prefetches the next group in forward and backward: the
data-parallel collectives overlap the compute (``--overlap-grad-reduce
--overlap-param-gather``).  ``--optim adamw_torch`` (torch's foreach AdamW, whose step copies
every moment shard: torch/optim/adam.py:762) and TRL's ``--use_peft`` under FSDP are refused in
one line; so is a ``transformer_layer_cls_to_wrap`` other than the model's own
``_no_split_modules`` (Accelerate's default, fsdp_utils.py:960-970).
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..text import printable
from .hf_weights import DTYPE_NAMES, DTYPES, checkpoint_config, weights_dtype

__all__ = ["fsdp_words"]

_ACC = "Accelerate 1.16.0"


def fsdp_words(r) -> list:
    """The memsym words of a Trainer launch ``r`` with ``--fsdp`` (``r.fsdp`` read), its notes,
    defaults and ignored keys added to ``r``.

    Parameters
    ----------
    r : HfTrainerLaunch
        The launch read (:func:`memsym.readers.hf_trainer.read_hf_trainer_launch`).

    Returns
    -------
    list of str
        memsym's options (the module's docstring).

    Examples
    --------
    >>> from memsym.readers.hf_trainer import read_hf_trainer_launch
    >>> r = read_hf_trainer_launch(["torchrun", "--nproc_per_node", "8", "run_clm.py",
    ...     "--model_name_or_path", "llama3-8b", "--bf16", "--fsdp", "shard_grad_op"])
    >>> " ".join(fsdp_words(r))
    '--framework deepspeed --sharding fsdp --accelerate-fsdp mixed --optimizer adam --overlap-grad-reduce --overlap-param-gather --fsdp-keep-gathered'
    """
    fs = r.fsdp
    if r.lora is not None:
        raise InvalidValueError("--use_peft under --fsdp: PEFT's adapters in Accelerate's FSDP2 "
                                "(update_fsdp_plugin_peft, fp32 adapters beside a frozen base "
                                "in one group) are not modelled; memsym reads them under plain "
                                "DDP or --deepspeed")
    if r.optim == "adamw_torch":
        raise InvalidValueError("--optim adamw_torch under --fsdp: torch's foreach AdamW "
                                "copies every exp_avg_sq shard in its step (torch/optim/adam.py:"
                                "762, _multi_tensor_adam), not counted here; the default "
                                "adamw_torch_fused updates in place")
    if fs.layer_classes is not None:
        _check_layer_classes(r, fs.layer_classes)
    mode = "mixed" if r.autocast is not None else "plain"
    if mode == "mixed":
        r.weights = r.autocast
        r.notes.append(
            f"--fsdp with --{r.autocast}: Accelerate's FSDP2 ({_ACC} utils/fsdp_utils.py:"
            "740-904, fsdp2_prepare_model) upcasts every trained parameter to fp32 "
            "(:799-806) and shards it over the GPUs: fp32 shards, fp32 sharded gradients and "
            "AdamW's two fp32 moments, 4 + 4 + 8 bytes over d; the mixed-precision policy "
            f"gathers and reduces in {DTYPE_NAMES[r.autocast]} (state.py:975-976, "
            "utils/dataclasses.py:2008-2012: param_dtype = reduce_dtype), and no torch.autocast "
            "wraps the forward (_prepare_fsdp2 never calls prepare_model: accelerator.py:"
            f"1643-1735): the model computes in its gathered {DTYPE_NAMES[r.autocast]} weights")
    else:
        dtype, said = weights_dtype(r, "--fsdp without --bf16 / --fp16")
        r.weights = DTYPES.get(dtype)
        if r.weights is None:
            raise InvalidValueError(f"--fsdp with {said}: memsym counts float32, bfloat16 or "
                                    "float16 weights (run_clm.py's --dtype choices)")
        r.notes.append(
            f"--fsdp without --bf16 / --fp16 ({said}): Accelerate's FSDP2 without mixed "
            f"precision ({_ACC} utils/fsdp_utils.py:768, MixedPrecisionPolicy()) shards, "
            f"gathers, reduces and steps every tensor in {DTYPE_NAMES[r.weights]}: "
            "weights, gradients and AdamW's two moments (torch/optim/adam.py:178-184), no "
            "fp32 copy")
    # --bf16 / --fp16 are Accelerate's mixed precision here, not the states' precision
    r.defaults = [("fsdp mixed precision", "no", src) if name == "precision" else
                  (name, value, src) for name, value, src in r.defaults]
    r.notes += fs.notes + [
        "FSDP2 groups (fsdp_utils.py:850-904): each decoder layer, an untied embedding, and "
        "[final norm, output layer] with reshard_after_forward=False (a tied embedding joins "
        "it: then gathered from the forward's start to the backward's end with its unsharded "
        "gradient, no post-backward hook being registered on token ids: torch "
        "_fsdp_param_group.py:540-555); the Trainer's model.zero_grad() leaves no gradient "
        "before the backward (trainer.py:1991); AdamW fused (trainer_optimizer.py:201-208): "
        "no step copy of the moments"]
    if r.gradient_accumulation_steps > 1:
        r.notes.append(f"{r.gradient_accumulation_steps} micro-batches: all but the last run "
                       f"under Accelerate's no_sync (trainer.py:1941-1952; {_ACC} "
                       "accelerator.py:1126-1131), each parameter's unsharded gradient kept "
                       "until the last backward reduce-scatters it")
    if fs.activation_checkpointing:
        r.recompute = True
        r.defaults = [row for row in r.defaults if row[0] != "recompute"]
        r.notes.append("fsdp_config activation_checkpointing: Accelerate's checkpoint_wrapper "
                       f"on each decoder layer ({_ACC} utils/fsdp_utils.py:690-719), a full "
                       "recompute of every layer")
    r.defaults += fs.defaults
    r.ignored += fs.ignored
    return (["--framework", "deepspeed", "--sharding", "fsdp", "--accelerate-fsdp", mode,
             "--optimizer", "adam", "--overlap-grad-reduce", "--overlap-param-gather"]
            + ([] if fs.reshard_after_forward else ["--fsdp-keep-gathered"]))


def _check_layer_classes(r, classes: tuple) -> None:
    """``transformer_layer_cls_to_wrap`` must name the groups memsym counts: the model's own
    ``_no_split_modules`` (Accelerate's default, fsdp_utils.py:960-970), as transformers
    defines them for the checkpoint's model type."""
    kind = checkpoint_config(r.model).get("model_type")
    try:
        import transformers
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:    # pragma: no cover - depends on the environment
        raise InvalidValueError("fsdp_config transformer_layer_cls_to_wrap: memsym checks it "
                                "against transformers' _no_split_modules (pip install "
                                "transformers) or leave it out") from None
    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(kind) if isinstance(kind, str) else None
    own = getattr(getattr(transformers, name, None), "_no_split_modules", None) if name else None
    if not own or set(classes) != set(own):
        raise InvalidValueError(
            f"fsdp_config transformer_layer_cls_to_wrap {', '.join(classes)[:80]}: memsym "
            "counts one group per decoder layer, the model's _no_split_modules ("
            + (", ".join(own) if own else f"unknown for {printable(str(kind), 30)}")
            + "), Accelerate's default; leave it out")
    r.notes.append(f"fsdp_config transformer_layer_cls_to_wrap {', '.join(classes)[:80]}: the "
                   "model's own _no_split_modules, Accelerate's default groups")
