"""Megatron-LM's ``--fp32-residual-connection`` and ``--softmax-type``, read as Megatron-core
and Transformer Engine act on them.

* ``--fp32-residual-connection`` (``TransformerConfig.fp32_residual_connection``): the job's
  ``fp32_residual_connection`` (:mod:`memsym.terms.fp32_residual`); ``validate_args`` allows
  it under ``--bf16`` or ``--fp16`` only (``training/arguments.py:1374-1376``).
* ``--softmax-type`` ``vanilla`` / ``off-by-one`` / ``learnable``: ``learnable`` registers a
  ``softmax_offset`` parameter of ``num_attention_heads // tp_size`` elements in each layer's
  core attention (Transformer Engine's ``DotProductAttention``,
  ``attention/dot_product_attention/dot_product_attention.py:779-784`` at d0067d0da6;
  Megatron-core's own, ``transformer/dot_product_attention.py:126-138``): the architecture's
  ``attention_sinks`` (a per layer, split with the heads).  ``off-by-one`` keeps a zero
  tensor of the same size, not a parameter (a/t fp32 elements a layer, not counted): the
  architecture's ``off_by_one_softmax``.
  Either sink makes Transformer Engine turn FlashAttention off and run cuDNN's fused
  attention (``attention/dot_product_attention/utils.py:1113-1124``), which saves what flash
  attention does; it is off under context parallelism other than a2a (``:1148-1155``;
  unfused attention runs no context parallelism, ``:1169-1173``: no backend; the rule
  ``sinks-cp``, :mod:`memsym.rules_model_kinds`, refuses it however c is given) and under
  deterministic mode (``:1535-1545``: TE's unfused attention then, which keeps the s x s
  softmax).
* ``--fp8-dot-product-attention`` is no Megatron-LM argument (TransformerConfig's
  ``fp8_dot_product_attention`` has none, arguments.py:2307-2334): a sink under FP8 attention
  comes from a Megatron-Bridge recipe (:mod:`memsym.readers.te_attention`).

Megatron-LM ``megatron/`` at d98e8a64dd; Transformer Engine ``transformer_engine/pytorch/`` at
d0067d0da6.
"""

from __future__ import annotations

from ..errors import InvalidValueError
from .megatron_arguments import MegatronArguments

__all__ = ["SOFTMAX_TYPES", "megatron_fp32_residual", "megatron_softmax"]

#: ``--softmax-type``'s choices (training/arguments.py; TransformerConfig.softmax_type).
SOFTMAX_TYPES = ("vanilla", "off-by-one", "learnable")


def megatron_fp32_residual(r: MegatronArguments) -> bool:
    """Whether ``--fp32-residual-connection`` is on, checked as ``validate_args`` checks it.

    Examples
    --------
    >>> from memsym.readers.megatron_arguments import parse_megatron_argv
    >>> r = MegatronArguments(*parse_megatron_argv(["--fp32-residual-connection",
    ...                                             "--bf16"])[::2])
    >>> megatron_fp32_residual(r)
    True
    """
    if not r.flag("fp32_residual_connection"):
        return False
    if not (r.flag("bf16") or r.flag("fp16")):
        raise InvalidValueError("--fp32-residual-connection needs --bf16 or --fp16: residual "
                                "connection in fp32 only supported when using fp16 or bf16 "
                                "(Megatron's validate_args, arguments.py:1374-1376)")
    if r.raw.get("transformer_impl") == "local":
        r.note("--fp32-residual-connection counted as under Transformer Engine's layer spec "
               "(its fused norms save 16-bit casts); with --transformer-impl local each norm "
               "saves its fp32 input")
    return True


def megatron_softmax(r: MegatronArguments, *, backend: str) -> dict:
    """What ``--softmax-type`` changes: ``{"attention_sinks": True}`` for ``learnable`` (one
    parameter per head and layer), ``{"off_by_one_softmax": True}`` for ``off-by-one``,
    ``{"flash_attention": False}`` where Transformer Engine falls back to its unfused attention
    (deterministic mode); refused where no attention backend runs the sink (context
    parallelism: the rule ``sinks-cp`` over the job, whose c may be memsym's ``--cp``).

    Parameters
    ----------
    r : MegatronArguments
        The arguments read.
    backend : str
        The ``--attention-backend`` read (flash, fused, unfused, local or auto).

    Examples
    --------
    >>> from memsym.readers.megatron_arguments import parse_megatron_argv
    >>> r = MegatronArguments(*parse_megatron_argv(["--softmax-type", "learnable"])[::2])
    >>> megatron_softmax(r, backend="auto")
    {'attention_sinks': True}
    """
    kind = r.choice("softmax_type", SOFTMAX_TYPES, "vanilla")
    if kind == "vanilla":
        return {}
    out = {"attention_sinks": True} if kind == "learnable" else {"off_by_one_softmax": True}
    if r.raw.get("transformer_impl") == "local" or backend == "local":
        return out      # Megatron-core's DotProductAttention: the s x s scores, already counted
    if backend == "flash":
        raise InvalidValueError(f"--softmax-type {kind} with --attention-backend flash: "
                                "Transformer Engine runs a softmax sink only in its fused or "
                                "unfused attention (dot_product_attention/utils.py:1122-1124 "
                                "at d0067d0da6), which flash turns off")
    if r.flag("deterministic_mode"):
        if backend == "fused":
            raise InvalidValueError(f"--softmax-type {kind} with --deterministic-mode and "
                                    "--attention-backend fused: Transformer Engine disables "
                                    "fused attention for a sink in deterministic mode "
                                    "(dot_product_attention/utils.py:1535-1545 at d0067d0da6)")
        r.note(f"--softmax-type {kind} with --deterministic-mode: Transformer Engine runs its "
               "unfused attention (dot_product_attention/utils.py:1535-1545 at d0067d0da6), "
               "which keeps the s x s softmax (counted; its sink column, 2bs/t bytes per head "
               "and layer, is not)")
        out["flash_attention"] = False
    return out
