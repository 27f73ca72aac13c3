"""What a job's settings imply for the per-GPU total, read by its activations and transients.

The architecture resolved for the job's sequence length, the pipeline rank that holds the
output layer, a stage's role, the width of the 16-bit activations, whether sequence
parallelism is on, the hidden states at a stage boundary and which cross-entropy the last
stage runs: small facts that :mod:`memsym.training.stage_activations` and
:mod:`memsym.training.phase_transients` both read, kept here so that neither imports the
other's helpers.
"""

from __future__ import annotations

import sympy as sp

from ..frameworks import framework as framework_record
from ..job import Layout, Training
from .. import model as models
from ..symbols import b, c, h, s, t
from ..terms.context_parallel import cp_method


#: DeepSpeed's ZeRO stages (memsym.readers.jobs.DEEPSPEED_SCHEMES 1-3), whose engine casts
#: every parameter, PEFT's adapters included, to the config's dtype and trains the adapters
#: (memsym.training.model_states, memsym.training.layer_model).
DEEPSPEED_ZERO = ("zero1", "zero2", "zero3")


def resolve_arch(arch, training: Training):
    """An Architecture, preset name or config.json path, with Megatron's defaults filled in.

    Examples
    --------
    >>> resolve_arch("llama2-7b", Training(seq_length=4096)).num_layers
    32
    """
    return models.resolve(models.resolve_model(arch), seq_length=training.batch.seq_length)


def output_stage(layout: Layout, training: Training) -> int:
    """The pipeline rank that holds the final norm, the output layer and the loss.

    The last (stage i on rank i mod p), or 0 under torch's V placement
    (``training.stage_placement == "v"``: stages r and 2p - 1 - r on rank r, so rank 0
    holds the first and the last stage).

    Examples
    --------
    >>> output_stage(Layout(p=4), Training()), output_stage(
    ...     Layout(p=4, v=2), Training(framework="torchtitan", stage_placement="v"))
    (3, 0)
    """
    return 0 if training.pipeline.stage_placement == "v" else layout.p - 1


def stage_role(i: int, pp: int) -> str:
    """The role of pipeline stage ``i`` of ``pp``: only, first, last or middle.

    Examples
    --------
    >>> [stage_role(i, 3) for i in range(3)], stage_role(0, 1)
    (['first', 'middle', 'last'], 'only')
    """
    return "only" if pp == 1 else "first" if i == 0 else "last" if i == pp - 1 else "middle"


def activation_width(training: Training) -> int:
    """Bytes per element of the 16-bit activations and buffers (4 when training in fp32; 2
    under torch.autocast over fp32 weights, whose fp32 residual stream
    :mod:`memsym.terms.autocast` adds).

    Examples
    --------
    >>> activation_width(Training()), activation_width(Training(precision="fp32"))
    (2, 4)
    >>> activation_width(Training(precision="fp32", autocast="bf16"))
    2
    """
    return 4 if training.states.precision == "fp32" and training.states.autocast is None else 2


def residual_width(training: Training) -> int:
    """Bytes per element of the residual stream's hidden states: 4 over fp32 weights, with or
    without torch.autocast (``residual + out`` promotes to fp32: :mod:`memsym.terms.autocast`),
    else 2.

    Examples
    --------
    >>> residual_width(Training()), residual_width(Training(precision="fp32", autocast="bf16"))
    (2, 4)
    """
    return 4 if training.states.precision == "fp32" else 2


def cp_a2a_on(layout: Layout, training: Training, symbolic: bool = False) -> bool | None:
    """Whether the attention runs the all-to-all (Ulysses) context-parallel method at c > 1:
    Megatron's ``--cp-comm-type a2a`` (Transformer Engine) or DeepSpeed Ulysses; None where
    the method is a2a and c stays a symbol (``symbolic``: a search template).

    Examples
    --------
    >>> cp_a2a_on(Layout(c=2), Training(cp_comm_type="a2a")), cp_a2a_on(Layout(c=2), Training())
    (True, False)
    """
    if cp_method(training.framework, training.comm.cp_comm_type) != "a2a":
        return False
    return None if symbolic else layout.c > 1


def sequence_parallel_on(layout: Layout) -> bool:
    """Whether sequence parallelism is on: Megatron turns it off at t = 1.

    Examples
    --------
    >>> sequence_parallel_on(Layout(t=1, sequence_parallel=True))
    False
    """
    return bool(layout.sequence_parallel and layout.t > 1)


def boundary_bytes(sp_on: bool, training: Training) -> sp.Expr:
    """One micro-batch's hidden states at a pipeline-stage boundary [bytes]: 2 tau h / sigma
    (4 in fp32), sequence-sharded over t under sequence parallelism.

    Examples
    --------
    >>> boundary_bytes(True, Training())
    2*b*h*s/(c*t)
    """
    width = activation_width(training)
    return width * b * s * h / (c * (t if sp_on else 1))


def logits_gathered(layout: Layout, training: Training) -> bool:
    """Whether every TP rank holds all logits (DTensor TP without loss_parallel; DeepSpeed
    AutoTP's at any t, :func:`autotp_logits`).

    Examples
    --------
    >>> logits_gathered(Layout(t=2), Training())
    False
    """
    fw = framework_record(training.framework)
    return layout.t > 1 and fw.dtensor_tp and not training.memory.loss_parallel


def autotp_logits(training: Training) -> bool:
    """Whether every TP rank holds all logits at any t, so that one expression stands for
    every t (a search's templates keep t symbolic): DeepSpeed AutoTP's gathered output layer
    (:attr:`memsym.frameworks.Framework.tp_gathered_logits`); at t = 1 the same logits.

    Examples
    --------
    >>> autotp_logits(Training(framework="deepspeed")), autotp_logits(Training())
    (True, False)
    """
    return framework_record(training.framework).tp_gathered_logits


def loss_kind(layout: Layout, training: Training) -> str:
    """Which cross-entropy the last stage runs: ``"chunked"`` (TRL's chunked_nll,
    :mod:`memsym.terms.chunked_loss`), ``"compiled"`` (torch.compile'd), ``"loss-parallel"``
    (torchtitan, t > 1: DTensor ``loss_parallel``), ``"torch"`` (eager ``F.cross_entropy`` of a
    ``.float()`` copy: torchtitan, memsym's FSDP2), ``"transformers"`` (transformers'
    ``ForCausalLMLoss``, the loss of its model code: DeepSpeed and the Hugging Face Trainer,
    :func:`memsym.terms.transients.hf_cross_entropy_transient`), ``"te"``
    (:mod:`memsym.terms.recipe_buffers`) or ``"vocab-parallel"`` (Megatron-core's fused
    vocab-parallel cross-entropy).

    Examples
    --------
    >>> loss_kind(Layout(), Training()), loss_kind(Layout(), Training(framework="deepspeed"))
    ('vocab-parallel', 'transformers')
    """
    if training.memory.chunked_loss:
        return "chunked"
    if training.memory.compiled_loss:
        return "compiled"
    if framework_record(training.framework).hf_model_code:
        return "transformers"
    if framework_record(training.framework).torch_loss:
        return "loss-parallel" if layout.t > 1 and training.memory.loss_parallel else "torch"
    if training.memory.cross_entropy_fusion_impl == "te":
        return "te"
    if training.states.sharding == "fsdp" and training.states.convention == "framework":
        return "torch"
    return "vocab-parallel"
