"""A searched job's own settings in its emitted launch (issue 32, deliverable 5).

``memsym search`` of a job holds the job's settings fixed over every row
(:data:`memsym.search.job_fields.HELD_FIELDS`, ``Space.held``); an emitted layout writes each
of them in the framework's own input, spelled as memsym's reader of that framework reads it
back, so that reading the emitted launch back (``memsym estimate``) gives the same job:

* Megatron-LM (:data:`MEGATRON_HELD`): each field's argument ``dest`` of
  ``megatron/training/arguments.py`` at ``d98e8a64dd``, its spelling found by inverting the
  reader's own argument table (:data:`memsym.readers.megatron_arguments.TABLE`), as
  :mod:`memsym.readers.megatron` and :mod:`memsym.readers.megatron_precision` translate the
  dests into job fields;
* torchtitan (:data:`TORCHTITAN_HELD`): the v0.2.2 job-TOML keys
  :func:`memsym.readers.torchtitan.torchtitan_settings` and
  :func:`memsym.readers.jobs.torchtitan_job` read;
* DeepSpeed (:data:`DEEPSPEED_HELD`): the ``zero_optimization`` keys
  :func:`memsym.readers.jobs.deepspeed_job` reads into ``zero_buckets``.

A held field that a framework's input cannot spell is refused with :class:`NotExpressible`,
one line naming the field and why (:data:`REFUSED`): never emitted as another job.
"""

from __future__ import annotations

from .errors import InvalidValueError
from .frameworks import FRAMEWORK
from .readers.megatron_arguments import TABLE
from .readers.recipe_mechanisms import TE_LOSS_REFUSED
from .search.job_fields import HELD_FIELDS, MEGATRON_FSDP_STRATEGY
from .terms.transients import DEFAULTS as TRANSIENT_DEFAULTS
from .symbols import n_bkt

__all__ = ["NotExpressible", "MEGATRON_HELD", "TORCHTITAN_HELD", "DEEPSPEED_HELD", "REFUSED",
           "MEGATRON_HELD_DESTS", "megatron_flag", "check_held", "megatron_held",
           "torchtitan_held", "deepspeed_held"]


class NotExpressible(InvalidValueError):
    """A layout (or a whole search) that a framework's arguments cannot spell so that memsym
    reads it back the same; the message is one line saying why."""


#: Megatron-LM's spelling of each ``(dest, constant)``: the reader's argument table inverted,
#: the first spelling of a dest kept (argparse's own before the deprecated aliases:
#: ``--no-x`` before ``--disable-x``).  Value arguments are keyed by ``(dest, None)``.
def _inverted(table: dict) -> dict:
    out = {}
    for option, (dest, _, const) in table.items():
        out.setdefault((dest, const), option)
    return out


_FLAG_OF = _inverted(TABLE)


def megatron_flag(dest: str, const=None) -> str:
    """The Megatron-LM option that stores ``const`` in ``dest`` (a value option: None).

    Examples
    --------
    >>> megatron_flag("fp8_param_gather", True), megatron_flag("overlap_p2p_comm", False)
    ('--fp8-param-gather', '--no-overlap-p2p-communication')
    >>> megatron_flag("exp_avg_dtype")
    '--exp-avg-dtype'
    """
    return _FLAG_OF[(dest, const)]


# ---------------------------------------------------------------------------------------------
# Megatron-LM
# ---------------------------------------------------------------------------------------------
def _switch(dest: str, const=True):
    """A store_true / store_false dest: its flag where the field holds ``const``."""
    return lambda value, row, space: [megatron_flag(dest, const)] if value == const else []


def _value(dest: str):
    """A one-value dest: its option and the value."""
    return lambda value, row, space: [megatron_flag(dest), str(value)]


def _values(dest: str):
    """A list dest (``nargs='+'``): its option and the values."""
    return lambda value, row, space: [megatron_flag(dest), *map(str, value)]


def _grad_dtype(value, row, space) -> list:
    """The gradient buffer's dtype.  A Megatron-FSDP row: ``--megatron-fsdp-main-grads-dtype``
    (:func:`memsym.readers.megatron_precision.megatron_fsdp_options`; Megatron-FSDP reads no
    ``grad_reduce_in_fp32``).  Else bf16 under bf16 parameters (bf16, FP8, NVFP4 runs) is
    ``--grad-reduce-in-bf16`` (``megatron_precision``: ``validate_args`` keeps fp32 gradients
    under ``--bf16`` unless it is given), and the parameters' own dtype under ``--fp16`` or
    fp32 is Megatron's default (no argument).  fp32 gradients under ``--fp16``
    (``--accumulate-allreduce-grads-in-fp32``) are refused: memsym reads that flag over a
    MODEL as without effect (:func:`memsym.readers.megatron.read_megatron_overrides`)."""
    if row["sharding"] in MEGATRON_FSDP_STRATEGY:
        if value not in ("fp32", "bf16", "fp16"):
            raise NotExpressible(f"grad_dtype {value}: --megatron-fsdp-main-grads-dtype takes "
                                 "fp32, bf16, fp16")
        return [megatron_flag("megatron_fsdp_main_grads_dtype"), value]
    params = "fp32" if space.precision == "fp32" else \
        "fp16" if space.precision == "fp16" else "bf16"
    if value == "bf16" and params == "bf16":
        return [megatron_flag("grad_reduce_in_bf16", True)]
    if value == params or (value == "fp32" and params == "bf16"):
        return []                  # Megatron's own gradient dtype for these parameters
    raise NotExpressible(f"grad_dtype {value} under {space.precision} parameters: no "
                         "Megatron-LM argument reads back as it over a MODEL "
                         "(--grad-reduce-in-bf16 is bf16 under --bf16 only; "
                         "--accumulate-allreduce-grads-in-fp32 is read as without effect)")


def _fp8_param_gather(value, row, space) -> list:
    """``--fp8-param-gather``: validate_args needs the distributed optimizer or FSDP."""
    if value and row["sharding"] == "ddp":
        raise NotExpressible("fp8_param_gather on a ddp row: Megatron-LM's --fp8-param-gather "
                             "needs the distributed optimizer or Megatron-FSDP (validate_args)")
    return _switch("fp8_param_gather")(value, row, space)


def _precision_aware(value, row, space) -> list:
    """``--use-precision-aware-optimizer``: the distributed optimizer's only
    (:func:`memsym.readers.megatron_precision.megatron_optimizer` refuses it without
    ``--use-distributed-optimizer``)."""
    if value and row["sharding"] != "distributed-optimizer":
        raise NotExpressible(f"precision_aware on a {row['sharding']} row: Megatron-LM's "
                             "--use-precision-aware-optimizer needs --use-distributed-optimizer")
    return _switch("use_precision_aware_optimizer")(value, row, space)


def _recompute_modules(value, row, space) -> list:
    """``--recompute-modules`` on a selective row; a row of another recompute mode keeps none
    (Megatron-core reads the modules under selective granularity only, and the search prices
    them there only: :mod:`memsym.search.evaluate`)."""
    return _values("recompute_modules")(value, row, space) if row["recompute"] == "selective" \
        else []


def _bf16_layers(value, row, space) -> list:
    """``--first-last-layers-bf16`` with its counts (:func:`memsym.readers.megatron_precision.
    megatron_bf16_layers`: read under FP8 or FP4 only)."""
    if space.precision not in ("fp8", "fp4"):
        raise NotExpressible(f"bf16_layers {value[0]}/{value[1]} under {space.precision}: "
                             "Megatron-LM's --first-last-layers-bf16 acts under FP8 or FP4 only")
    first, last = value
    return [megatron_flag("first_last_layers_bf16", True),
            megatron_flag("num_layers_at_start_in_bf16"), str(first),
            megatron_flag("num_layers_at_end_in_bf16"), str(last)]


def _bias_activation_fusion(value, row, space) -> list:
    """An eager gated unit: ``--no-bias-swiglu-fusion`` for a SwiGLU, ``--no-bias-gelu-fusion``
    for GPT-OSS's clamped quick-GeGLU (argument_utils.py:314-319 at ``d98e8a64dd``: under
    ``--swiglu`` the fusion is ``bias_swiglu_fusion``'s, else ``bias_gelu_fusion``'s;
    :func:`memsym.readers.megatron.read_megatron_overrides`)."""
    if value:
        return []
    arch = space.arch
    if not arch.swiglu:
        raise NotExpressible("bias_activation_fusion off without a gated unit: no Megatron-LM "
                             "argument reads it back")
    geglu = (arch.extra or {}).get("swiglu_limit") is not None
    return [megatron_flag("bias_gelu_fusion" if geglu else "bias_swiglu_fusion", False)]


def _cuda_graph_impl(value, row, space) -> list:
    """``--cuda-graph-impl``; full_iteration with ``--no-check-for-nan-in-loss-and-grad``,
    which validate_args asks of it (:func:`memsym.readers.recipe_mechanisms.
    megatron_cuda_graph_options`)."""
    nan = [megatron_flag("check_for_nan_in_loss_and_grad", False)] \
        if value == "full_iteration" else []
    return [megatron_flag("cuda_graph_impl"), str(value), *nan]


#: Each held field (:data:`memsym.search.job_fields.HELD_FIELDS`) that Megatron-LM's
#: arguments spell -> ``(the dests it is written with, its writer (value, row, space) ->
#: words)``: the reader's translation inverted (:mod:`memsym.readers.megatron_precision`,
#: :mod:`memsym.readers.megatron`, :mod:`memsym.readers.recipe_mechanisms`).  The dests
#: include the aliases a job's own words may have set the field with (a relaunch of the job's
#: arguments drops them: :func:`memsym.cli.search_job.relaunch`).
MEGATRON_HELD = {
    "grad_dtype": (("grad_reduce_in_bf16", "megatron_fsdp_main_grads_dtype",
                    "accumulate_allreduce_grads_in_fp32"), _grad_dtype),
    "fp8_param_gather": (("fp8_param_gather",), _fp8_param_gather),
    "recompute_modules": (("recompute_modules", "moe_layer_recompute"), _recompute_modules),
    "precision_aware": (("use_precision_aware_optimizer",), _precision_aware),
    "main_params_dtype": (("main_params_dtype",), _value("main_params_dtype")),
    "exp_avg_dtype": (("exp_avg_dtype",), _value("exp_avg_dtype")),
    "exp_avg_sq_dtype": (("exp_avg_sq_dtype",), _value("exp_avg_sq_dtype")),
    "batch_attention_mask": (("create_attention_mask_in_dataloader",),
                             _switch("create_attention_mask_in_dataloader", False)),
    "cuda_graph_impl": (("cuda_graph_impl", "enable_cuda_graph", "external_cuda_graph"),
                        _cuda_graph_impl),
    "cuda_graph_modules": (("cuda_graph_modules", "cuda_graph_scope_deprecated"),
                           _values("cuda_graph_modules")),
    "optimizer_cuda_graph": (("optimizer_cuda_graph",), _switch("optimizer_cuda_graph")),
    "overlap_moe_expert_parallel_comm": (("overlap_moe_expert_parallel_comm",),
                                         _switch("overlap_moe_expert_parallel_comm")),
    "overlap_p2p_comm": (("overlap_p2p_comm",), _switch("overlap_p2p_comm", False)),
    "bias_activation_fusion": (("bias_swiglu_fusion", "bias_gelu_fusion"),
                               _bias_activation_fusion),
    "muon_tp_mode": (("muon_tp_mode",), _value("muon_tp_mode")),
    "muon_num_ns_steps": (("muon_num_ns_steps",), _value("muon_num_ns_steps")),
    "muon_nesterov": (("muon_nesterov",), _switch("muon_nesterov")),
    "mla_down_proj_fusion": (("mla_down_proj_fusion",), _switch("mla_down_proj_fusion")),
    "fp32_residual_connection": (("fp32_residual_connection",),
                                 _switch("fp32_residual_connection")),
    "bf16_layers": (("first_last_layers_bf16", "num_layers_at_start_in_bf16",
                     "num_layers_at_end_in_bf16"), _bf16_layers),
    # one type, or one per layer (nargs "+": arguments.py --cp-comm-type at d98e8a64dd)
    "cp_comm_type": (("cp_comm_type",), _values("cp_comm_type")),
}

#: The Megatron-LM dests the held fields are written with (:data:`MEGATRON_HELD`).
MEGATRON_HELD_DESTS = frozenset(d for dests, _ in MEGATRON_HELD.values() for d in dests)

_TORCHTITAN_ONLY = ("torchtitan's (torch.compile and loss parallel are its job TOML's); "
                    "Megatron-LM has no argument for it")

#: Why a held field is refused, per framework (a field neither spelled nor listed here is
#: refused with a generic reason).
REFUSED = {
    "megatron": {
        "cross_entropy_fusion_impl": TE_LOSS_REFUSED + "; without the fusion the impl is not "
                                                       "used",
        "activation_func_fp8_input_store": "TransformerConfig.activation_func_fp8_input_store "
                                           "is no Megatron-LM argument at d98e8a64dd "
                                           "(Megatron-Bridge's model. field)",
        "fp8_attention": "Megatron-LM has no --fp8-dot-product-attention at d98e8a64dd "
                         "(Megatron-Bridge's mixed_precision.fp8_dot_product_attention)",
        "zero_buckets": "DeepSpeed's ZeRO buffers; Megatron-LM has no argument for them",
        **{k: _TORCHTITAN_ONLY for k in ("compiled_loss", "compiled_model", "loss_parallel")},
        "sac_saves_attention": "torchtitan's per-op SAC (the torchtitan version and GPU decide "
                               "it); Megatron-LM has no argument for it",
    },
    "torchtitan": {
        "sac_saves_attention": "whether per-op SAC saves the SDPA output is torchtitan's "
                               "version and GPU (its _save_list), not a job-TOML key",
        "cp_comm_type": "memsym's torchtitan reader does not read "
                        "parallelism.context_parallel_rotate_method back (its default, "
                        "allgather, is what an emitted TOML runs)",
    },
    "deepspeed": {
        "cp_comm_type": "a DeepSpeed config's context parallelism is Ulysses' "
                        "sequence_parallel_size, whose method memsym reads as a2a",
    },
}

# autocast over fp32 weights is the Trainer's --bf16 / --fp16 (Accelerate's torch.autocast)
# over the model's fp32 weights: no framework file memsym emits spells it
for _fields in REFUSED.values():
    _fields["autocast"] = ("autocast over fp32 weights is the Hugging Face Trainer's --bf16 / "
                           "--fp16 (Accelerate's torch.autocast), not a key of this file")


# ---------------------------------------------------------------------------------------------
# torchtitan: [compile] and [parallelism] disable_loss_parallel (torchtitan v0.2.2
# config/job_config.py; memsym.readers.torchtitan reads them)
# ---------------------------------------------------------------------------------------------
def _compile(held: dict) -> dict:
    """``[compile]``: ``enable`` with the components compiled (``"model"``: each block,
    ``"loss"``: the loss, as :func:`memsym.readers.torchtitan.torchtitan_settings` reads
    them)."""
    parts = [name for name, field in (("model", "compiled_model"), ("loss", "compiled_loss"))
             if held.get(field)]
    return {"compile": {"enable": True, "components": parts}} if parts else {}


#: The held fields torchtitan's job TOML spells -> ``(section, key)`` written (a field whose
#: value is the default writes nothing).
TORCHTITAN_HELD = {"compiled_loss": ("compile", "components"),
                   "compiled_model": ("compile", "components"),
                   "loss_parallel": ("parallelism", "disable_loss_parallel")}

#: The held fields a DeepSpeed config spells -> the ``zero_optimization`` keys written.
DEEPSPEED_HELD = {"zero_buckets": ("reduce_bucket_size", "stage3_prefetch_bucket_size",
                                   "contiguous_gradients")}

_SPELLED = {"megatron": MEGATRON_HELD, "torchtitan": TORCHTITAN_HELD,
            "deepspeed": DEEPSPEED_HELD}


def check_held(framework: str, space) -> None:
    """Refuse a search whose held settings (``space.held``) ``framework``'s input cannot
    spell, in one line naming the field (raises :class:`NotExpressible`).

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> check_held("megatron", NS(held=(("fp8_param_gather", True),)))
    >>> check_held("deepspeed", NS(held=(("fp8_param_gather", True),)))
    Traceback (most recent call last):
    ...
    memsym.emit_held.NotExpressible: --emit deepspeed: the job's fp8_param_gather True: a ...
    """
    spelled, why = _SPELLED[framework], REFUSED[framework]
    for name, value in space.held:
        if name not in spelled:
            reason = why.get(name, f"a {FRAMEWORK[framework].title} config spells no such "
                                   "setting as memsym reads it back")
            raise NotExpressible(f"--emit {framework}: the job's {name} {_shown(value)}: "
                                 f"{reason}")


def _shown(value) -> str:
    if isinstance(value, tuple):
        return " ".join(str(x[1] if isinstance(x, tuple) else x) for x in value)
    return str(value)


def megatron_held(space, row) -> list:
    """Megatron-LM's arguments of ``space.held`` for one searched ``row``
    (:data:`MEGATRON_HELD`, in :data:`HELD_FIELDS` order).

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> sp = NS(held=(("fp8_param_gather", True), ("bf16_layers", (1, 2))), precision="fp8")
    >>> megatron_held(sp, {"sharding": "distributed-optimizer", "recompute": "none"})
    ['--fp8-param-gather', '--first-last-layers-bf16', '--num-layers-at-start-in-bf16', '1', \
'--num-layers-at-end-in-bf16', '2']
    """
    check_held("megatron", space)
    held = dict(space.held)
    words = []
    for name in HELD_FIELDS:
        if name in held:
            words += MEGATRON_HELD[name][1](held[name], row, space)
    return words


def torchtitan_held(space) -> dict:
    """torchtitan's job-TOML keys of ``space.held``, ``{section: {key: value}}``
    (:data:`TORCHTITAN_HELD`).

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> torchtitan_held(NS(held=(("compiled_loss", True), ("loss_parallel", False))))
    {'compile': {'enable': True, 'components': ['loss']}, 'parallelism': {'disable_loss_parallel': True}}
    """
    check_held("torchtitan", space)
    held = dict(space.held)
    out = _compile(held)
    if held.get("loss_parallel", True) is False:
        out["parallelism"] = {"disable_loss_parallel": True}
    return out


def deepspeed_held(space, overlap_comm: bool) -> dict:
    """The ``zero_optimization`` keys of ``space.held``'s ``zero_buckets``
    (:data:`DEEPSPEED_HELD`): its sizes [elements] as they are, no IPG buffer (0) as
    ``contiguous_gradients: false``; an IPG buffer count is otherwise what the config's
    ``overlap_comm`` makes (DeepSpeed's ``setup_buckets``: two with it, one without,
    :func:`memsym.training.transients`), and another count is refused.

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> deepspeed_held(NS(held=(("zero_buckets", (("reduce_bucket_size", 10**8),
    ...                                           ("ipg_buffers", 0))),)), True)
    {'reduce_bucket_size': 100000000, 'contiguous_gradients': False}
    """
    check_held("deepspeed", space)
    out = {}
    for name, value in dict(space.held).get("zero_buckets", ()):
        if name != "ipg_buffers":
            out[name] = value
        elif value == 0:
            out["contiguous_gradients"] = False
        elif value != (2 if overlap_comm else TRANSIENT_DEFAULTS[n_bkt]):
            raise NotExpressible(f"--emit deepspeed: the job's zero_buckets ipg_buffers {value}: "
                                 "a DeepSpeed config gives 2 with overlap_comm, 1 without, 0 "
                                 f"without contiguous_gradients (overlap_comm "
                                 f"{'on' if overlap_comm else 'off'} here)")
    return out
