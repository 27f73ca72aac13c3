"""The checks of Megatron-core's own options beside the launch rules: its FP8 activation store,
Transformer Engine's FP8 attention, the first and last layers in BF16 and Megatron-FSDP's
strategy, each refused in one line where the framework would refuse it or memsym does not
count it (called by :func:`memsym.job_checks.validate`).

References
----------
.. [megatron-lm] megatron/training/arguments.py (validate_args);
   core/transformer/transformer_config.py (TransformerConfig.__post_init__) at d98e8a64dd.
"""

from __future__ import annotations

from .errors import InvalidValueError, choose
from .frameworks import framework as framework_record
from .job_record import Training, whole
from .vocabulary import MEGATRON_FSDP_OPTIMIZERS, MEGATRON_FSDP_SCHEMES

__all__ = ["check_fp8_glu_input", "check_fp8_attention", "check_bf16_layers",
           "check_megatron_fsdp"]


def check_fp8_glu_input(x, training: Training) -> None:
    """``activation_func_fp8_input_store`` is Megatron-core's, for SwiGLU only: its
    ``TransformerConfig.__post_init__`` refuses another activation (transformer_config.py:
    2467-2469 at d98e8a64dd); memsym takes a clamped GLU (``swiglu_limit``) for GPT-OSS's
    quick-GeGLU, which it refuses too."""
    if not training.memory.activation_func_fp8_input_store:
        return
    if not framework_record(training.framework).megatron_options:
        raise InvalidValueError("activation_func_fp8_input_store is Megatron-core's "
                                f"TransformerConfig field (framework megatron), not "
                                f"{training.framework}'s")
    if not x.swiglu or (x.extra or {}).get("activation") or (x.extra or {}).get("swiglu_limit"):
        raise InvalidValueError("activation_func_fp8_input_store: Megatron-core stores the "
                                "activation input in FP8 for SwiGLU only (TransformerConfig "
                                "refuses another activation)")


def check_fp8_attention(training: Training) -> None:
    """``fp8_attention`` is Transformer Engine's ``fp8_dpa`` under Megatron-core (Bridge's
    ``mixed_precision.fp8_dot_product_attention``), a field of an FP8 or FP4 recipe."""
    if not training.memory.fp8_attention:
        return
    if not framework_record(training.framework).megatron_options:
        raise InvalidValueError("fp8_attention is Transformer Engine's fp8_dpa under "
                                f"Megatron-core (framework megatron), not {training.framework}'s")
    if training.states.precision not in ("fp8", "fp4"):
        raise InvalidValueError("fp8_attention needs precision fp8 (or fp4): it is a field of "
                                f"Transformer Engine's FP8 recipe, got {training.states.precision!r}")


def check_bf16_layers(x, training: Training) -> None:
    """``bf16_layers`` (Megatron's ``--first-last-layers-bf16``): two whole numbers; under fp8
    or fp4 on Megatron (the flag is a TransformerConfig field, and without FP8 / FP4 every
    layer runs in BF16 anyway: memsym refuses the no-op), not with delayed scaling
    (TransformerConfig.__post_init__, transformer_config.py:1528-1530 at d98e8a64dd)."""
    pair = training.states.bf16_layers
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise InvalidValueError(f"bf16_layers must be (first, last) layer counts, got {pair!r:.40}")
    start, end = (whole(n, "bf16_layers", minimum=0) for n in pair)
    if not start and not end:
        return
    if max(start, end) > x.num_layers:   # the bound on a user's size: the model's layers
        raise InvalidValueError(f"bf16_layers {max(start, end)} exceeds the model's "
                                f"{x.num_layers} layers")
    st = training.states
    if st.precision not in ("fp8", "fp4") or not framework_record(training.framework).megatron_options:
        raise InvalidValueError("bf16_layers is Megatron's --first-last-layers-bf16 under fp8 or "
                                f"fp4 (framework megatron), not {training.framework} in "
                                f"{st.precision}: without FP8/FP4 every layer runs in BF16")
    if st.precision == "fp8" and st.fp8_recipe == "delayed":
        raise InvalidValueError("Delayed scaling does not support first / last layer in BF16 "
                                "(Megatron's TransformerConfig, transformer_config.py:1528-1530 "
                                "at d98e8a64dd)")
    # at most floor(L/p) each under FP8: the rule bf16-layers-stage (memsym.rules_layout)


def check_megatron_fsdp(training: Training) -> None:
    """Megatron-FSDP's strategy: Megatron's, and the job's sharding the scheme that shards the
    same states (:data:`MEGATRON_FSDP_SCHEMES`); its double buffer only with Megatron-FSDP;
    its optimizer one it steps (:data:`MEGATRON_FSDP_OPTIMIZERS`)."""
    strategy = training.states.megatron_fsdp
    if strategy is None:
        if training.states.fsdp_double_buffer:
            raise InvalidValueError("fsdp_double_buffer is Megatron-FSDP's (set megatron_fsdp)")
        return
    choose("megatron_fsdp (data_parallel_sharding_strategy)", strategy,
           tuple(MEGATRON_FSDP_SCHEMES))
    if not framework_record(training.framework).megatron_options:
        raise InvalidValueError(f"megatron_fsdp is Megatron-LM's (framework megatron), not "
                                f"{training.framework}'s")
    if training.states.sharding != MEGATRON_FSDP_SCHEMES[strategy]:
        raise InvalidValueError(f"Megatron-FSDP {strategy} shards as sharding "
                                f"{MEGATRON_FSDP_SCHEMES[strategy]}, not "
                                f"{training.states.sharding}")
    if training.states.optimizer not in MEGATRON_FSDP_OPTIMIZERS:
        raise InvalidValueError(f"Megatron-FSDP does not support the {training.states.optimizer} "
                                "optimizer (Megatron-LM's validate_args: sgd or adam)")
