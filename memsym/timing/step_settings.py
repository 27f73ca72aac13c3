r"""What a job's records set for its step time: the overlaps it runs with and the settings the
step prices beyond the layout.

:func:`memsym.timing.step.step_time` reads a job's :class:`~memsym.job_record.Training` and
layout once, through :func:`overlap_of` (each overlap switch, or its framework's default),
:func:`settings_of` (the :class:`~memsym.timing.records.Settings` record) and
:func:`recompute_fraction` (the share of layers full recompute reruns); this module owns that
reading, the step composes it (:mod:`memsym.timing.step`).

References
----------
.. [megatron-lm] arguments.py (--overlap-grad-reduce, --overlap-param-gather, --recompute-method,
   --recompute-num-layers); distributed/distributed_data_parallel_config.py.
"""

from __future__ import annotations

from ..frameworks import framework
from ..job import dropout_kept, recompute_modules_of
from ..symbols import b_r
from ..terms.accelerate_fsdp import accelerate_fsdp_widths
from ..training.accelerate_fsdp import accelerate_fsdp_groups, uses_accelerate_groups
from .pipeline import most_layers_per_rank
from .records import Overlap, Settings

__all__ = ["overlap_of", "settings_of", "recompute_fraction"]


def recompute_fraction(arch, layout, training) -> float:
    r"""The share of the slowest stage's layers that full recompute reruns [1].

    .. math:: \phi = \begin{cases} \lfloor n/N \rfloor / n & \text{every } N\text{-th layer} \\
              \min(N, L/(pv)) / (L/(pv)) & \text{block of } N \\ 1 & \text{otherwise}
              \end{cases}

    Megatron's ``--recompute-method block`` with ``--recompute-num-layers N`` reruns the first
    N layers of each of the :math:`pv` model chunks of :math:`L` layers; torchtitan's layer
    SAC (``every``) every N-th block of the rank with the most layers, :math:`n`.  Anything
    but full recompute, or full recompute of every layer, is 1.

    Parameters
    ----------
    arch : memsym.model.Architecture
        The model.
    layout : memsym.training.Layout
        The parallel layout.
    training : memsym.training.Training
        The training step.

    >>> from memsym.model import preset
    >>> from memsym.training import Layout, Training
    >>> recompute_fraction(preset("llama3-8b"), Layout(p=2), Training(
    ...     recompute="full", recompute_method="block", recompute_num_layers=4))
    0.25

    References
    ----------
    .. [megatron-lm] megatron/core/transformer/transformer_block.py (``_checkpointed_forward``:
       ``uniform`` and ``block``) at d98e8a64dd; torchtitan
       distributed/activation_checkpoint.py (``_apply_layer_sac``).
    """
    method = training.memory.recompute_method if training.memory.recompute == "full" else None
    if method == "every":
        n = int(most_layers_per_rank(arch.num_layers, layout.p, layout.first_stage_layers or 0,
                                     layout.last_stage_layers or 0))
        return (n // training.memory.recompute_num_layers) / n
    if method != "block":
        return 1.0
    chunk = arch.num_layers / (layout.p * (layout.v or 1))
    return min(training.memory.recompute_num_layers, chunk) / chunk


def overlap_of(training) -> Overlap:
    """The overlaps a job runs with, each one left unset at its framework's default.

    Its ``overlap_grad_reduce`` / ``overlap_param_gather`` / ``tp_comm_overlap`` /
    ``overlap_moe_expert_parallel_comm`` / ``overlap_p2p_comm``; the defaults from
    :meth:`memsym.frameworks.Framework.overlaps_by_default`.  Megatron-LM's ``--overlap-grad-reduce`` and ``--overlap-param-gather`` are ``store_true``
    flags (off unless given); torchtitan's FSDP2 and torch DDP overlap in the backward;
    DeepSpeed's ``overlap_comm`` defaults to on for ZeRO-3 only.  The other switches keep
    :class:`Overlap`'s defaults (Megatron's own: ``overlap_p2p_comm`` with interleaving, the
    backward's async TP collectives, Transformer Engine's ring attention).

    Parameters
    ----------
    training : memsym.training.Training
        The training step (its framework, sharding and overlap switches).

    Examples
    --------
    >>> from memsym.training import Training
    >>> overlap_of(Training()).grad_reduce, overlap_of(Training(framework="torchtitan",
    ...     sharding="fsdp")).grad_reduce
    (False, True)
    >>> o = overlap_of(Training(overlap_grad_reduce=True, overlap_param_gather=True))
    >>> o.grad_reduce, o.param_gather, o.tp_comm
    (True, True, False)

    References
    ----------
    .. [megatron-lm-arguments] --overlap-grad-reduce, --overlap-param-gather (store_true).
    .. [torchtitan-job-config] FSDP2; [deepspeed-config] zero/config.py overlap_comm.
    """
    fw = framework(training.framework)
    default = fw.overlaps_by_default(training.states.sharding)

    def pick(value):
        return default if value is None else bool(value)

    return Overlap(grad_reduce=pick(training.comm.overlap_grad_reduce),
                   param_gather=pick(training.comm.overlap_param_gather),
                   tp_comm=bool(training.comm.tp_comm_overlap),
                   # torchtitan's async TP is torch's micro-pipelining, not TE's userbuffers
                   tp_comm_split=fw.tp_userbuffers,
                   ep_a2a=bool(training.comm.overlap_moe_expert_parallel_comm),
                   pp_p2p=bool(training.pipeline.overlap_p2p_comm))


def settings_of(arch, layout, training) -> Settings:
    """What the step of ``layout`` and ``training`` does beyond the layout.

    Reads the job's batch, memory, states and pipeline records (and the framework's table,
    :mod:`memsym.frameworks`) into the :class:`memsym.timing.records.Settings` that
    :func:`memsym.timing.step.step_time_grid` prices.

    Parameters
    ----------
    arch : memsym.model.Architecture
        The model.
    layout : memsym.training.Layout
        The parallel layout.
    training : memsym.training.Training
        The training step.

    >>> from memsym.model import preset
    >>> from memsym.training import Layout, Training
    >>> st = settings_of(preset("llama3-8b"), Layout(t=2, sequence_parallel=True),
    ...                  Training(seq_length=4096))
    >>> st.seq_length, st.sequence_parallel, st.distributed_optimizer
    (4096, True, True)

    References
    ----------
    .. [megatron-lm] arguments.py (--sequence-parallel, --recompute-granularity,
       --recompute-modules, --use-distributed-optimizer, --grad-reduce-in-bf16) at d98e8a64dd;
       the frameworks' defaults: :mod:`memsym.frameworks`.
    """
    batch, mem, states, pipe = training.batch, training.memory, training.states, training.pipeline
    titan = framework(training.framework).torch_pipelining      # torch.distributed.pipelining
    return Settings(seq_length=batch.seq_length, micro_batch_size=batch.micro_batch_size,
                    recompute=mem.recompute,
                    sequence_parallel=bool(layout.sequence_parallel and layout.t > 1),
                    flash_attention=mem.flash_attention, dropout=dropout_kept(training),
                    # autocast over fp32 weights runs its matmuls at the autocast dtype
                    precision=states.autocast or states.precision, fp8_recipe=states.fp8_recipe,
                    fp8_param_gather=bool(states.fp8_param_gather),
                    fp4_param_gather=bool(states.fp4_param_gather),
                    bf16_layers=tuple(states.bf16_layers)
                    if states.precision in ("fp8", "fp4") else (0, 0),
                    # every scheme but DDP shards the optimizer and reduce-scatters (ZeRO-1 on)
                    distributed_optimizer=states.sharding != "ddp",
                    grad_bytes=_grad_bytes(training),
                    gather_per_microbatch=states.sharding in ("zero3", "fsdp"),
                    reduce_per_microbatch=states.sharding == "zero2",
                    # Accelerate's groups, each gathered and reduced as FSDP2 issues it
                    fsdp_groups=accelerate_fsdp_groups(arch, training)
                    if uses_accelerate_groups(training) else (),
                    whole_embedding=framework(training.framework).tp_whole_embedding,
                    gathered_logits=framework(training.framework).tp_gathered_logits,
                    pipelined_fsdp=states.sharding == "fsdp" and titan,
                    recompute_fraction=recompute_fraction(arch, layout, training),
                    # block skips the MTP layer's recompute (multi_token_prediction.py:1630)
                    mtp_recompute=mem.recompute_method != "block",
                    # Megatron's --recompute-modules under selective (default core_attn)
                    recompute_modules=(recompute_modules_of(training)
                                       if mem.recompute == "selective" else ("core_attn",)),
                    group_size=pipe.microbatch_group_size, torch_rounds=titan,
                    schedule=pipe.schedule, output_first=pipe.stage_placement == "v",
                    tp_overlap_cfg=training.comm.tp_comm_overlap_cfg,
                    moe_dispatcher=mem.moe_dispatcher, optimizer=states.optimizer,
                    # the job's Muon and MLA switches, Megatron-LM's names (memsym.job_record)
                    muon_tp_mode=states.muon_tp_mode, muon_ns_steps=states.muon_num_ns_steps,
                    muon_nesterov=states.muon_nesterov,
                    mla_down_proj_fusion=mem.mla_down_proj_fusion,
                    bias_activation_fusion=bool(mem.bias_activation_fusion),
                    fp32_residual_connection=bool(mem.fp32_residual_connection))


def _grad_bytes(training) -> int:
    """Bytes per gradient element the data-parallel reduction moves: Accelerate's FSDP2 reduces
    in its ``reduce_dtype`` (:func:`memsym.terms.accelerate_fsdp.accelerate_fsdp_widths`: the
    16-bit dtype under mixed precision, the weights' without); elsewhere
    ``--grad-reduce-in-bf16`` (grad_dtype bf16) 2-byte gradients, as the memory counts its
    buffer, otherwise Megatron's fp32 main-grad buffer."""
    states = training.states
    if states.accelerate_fsdp is not None:
        return int(accelerate_fsdp_widths(states.accelerate_fsdp, states.precision)[b_r])
    return 2 if states.grad_dtype in ("bf16", "fp16") else 4
