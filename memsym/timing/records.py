"""The records of the step-time model: which communication overlaps compute
(:class:`Overlap`), what one layout's step does (:class:`Settings`), and the answer
(:class:`StepTime`).  :mod:`memsym.timing.step` computes with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

__all__ = ["Overlap", "Settings", "StepTime"]


@dataclass(frozen=True)
class Overlap:
    """Which communication hides behind compute; each switch is a framework option.

    Attributes
    ----------
    grad_reduce : bool
        ``--overlap-grad-reduce``: the DP gradient reduce-scatter / all-reduce runs during the
        last micro-batch's backward (exposed: what exceeds that backward).
    param_gather : bool
        ``--overlap-param-gather``: the distributed optimizer's parameter all-gather runs
        during the next step's first forward.
    tp_comm : bool
        ``--tp-comm-overlap`` (Transformer Engine userbuffers): TP all-gather /
        reduce-scatter overlap the GEMMs they feed.
    tp_comm_split : bool
        How that overlap runs: as Transformer Engine's default userbuffers (True; a dense
        layer's GEMMs split into ring-exchange and pipelined chunks, 16 SMs given to the
        collectives beside them, :func:`_userbuffers`), or as collectives hidden behind the
        layer's whole GEMMs at full efficiency (False: torch's async TP as memsym counts it,
        and MoE / MLA layers either way).
    ep_a2a : bool
        ``--overlap-moe-expert-parallel-comm``: EP all-to-all hidden behind another
        micro-batch's compute (exposed: what exceeds the layer's expert GEMMs).
    pp_p2p : bool
        ``overlap_p2p_comm`` (Megatron's default, on with interleaving only; arguments.py
        turns it off without): the p2p sends of the steady state hide behind compute.
    cp_ring : bool
        Ring context parallelism passes K/V blocks while attention computes the previous
        block (Transformer Engine): exposed is what exceeds the attention compute.
    tp_async_backward : bool
        Megatron's always-on backward overlap in ``LinearWithGradAccumulationAndAsync-
        Communication``: the column-parallel dgrad all-reduce / reduce-scatter under the
        weight-gradient GEMM, the SP input re-gather under the dgrad GEMM.
    """

    grad_reduce: bool = True
    param_gather: bool = True
    tp_comm: bool = False
    tp_comm_split: bool = True
    ep_a2a: bool = False
    pp_p2p: bool = True
    cp_ring: bool = True
    tp_async_backward: bool = True

    @classmethod
    def none(cls) -> "Overlap":
        """Nothing overlapped (every byte on the critical path)."""
        return cls(**{f.name: False for f in fields(cls)})


@dataclass(frozen=True)
class Settings:
    """What the step does beyond the layout (a Training's time-relevant fields).

    Attributes
    ----------
    seq_length : int
        Sequence length s [tokens].
    micro_batch_size : int
        Micro-batch size b [sequences].
    recompute : {"none", "selective", "full", "selective-op"}
        Activation recomputation (full: the backward reruns the forward; selective-op:
        torchtitan's per-op policy, every second forward matmul rerun).
    sequence_parallel : bool
        Megatron sequence parallelism (norm/dropout work split by t).
    flash_attention : bool
        Flash attention (no s x s scores through HBM, causal blocks skipped).
    dropout : bool
        Dropout on (its masks' memory traffic).
    precision : {"bf16", "fp16", "fp8", "fp32", "fp4"}
        GEMM precision (fp8: GEMMs in FP8, fp4: in NVFP4, everything else in bf16).
    fp8_recipe : {None, "delayed", "tensorwise", "mxfp8"}
        Megatron's ``--fp8-recipe`` under fp8 (None: per-tensor scaling).  ``"mxfp8"``: the
        GEMMs at the FP8 peak and ceiling (Blackwell only), the FP8 tensors it moves carry
        one scale byte per 32 elements (:data:`memsym.terms.widths.FP8_RECIPES`).
    fp8_param_gather, fp4_param_gather : bool
        Megatron's ``--fp8-param-gather`` (fp8) and ``--fp4-param-gather`` (fp4): the
        parameter all-gather moves the linear weights in FP8 (1 B; MXFP8 still 2 B) or NVFP4
        (1/2 B) (:func:`memsym.terms.widths.param_gather_bytes`).
    bf16_layers : tuple of (int, int)
        Under fp8 / fp4, Megatron's first and last decoder layers in BF16 [layers]
        (``--first-last-layers-bf16``; :mod:`memsym.training.bf16_layers`): on the first and
        last stages, each priced as a layer at 16 bits (:func:`memsym.timing.step.step_time_grid`).
    distributed_optimizer : bool
        Gradient reduce-scatter + parameter all-gather (else an all-reduce).
    grad_bytes : int
        Bytes per gradient element reduced [bytes] (Megatron: fp32 main grads, 4; 2 with
        ``--grad-reduce-in-bf16``).
    group_size : int or None
        ``microbatch_group_size_per_vp_stage`` [micro-batches] (None = p).
    torch_rounds : bool
        torch's interleaved schedules (torchtitan): the warm-up runs rounds of
        ``m // max(1, m // p)`` micro-batches (:func:`memsym.terms.schedule.torch_round_size`)
        in place of Megatron's group size, per layout.
    schedule : {"1f1b", "gpipe"}
        Pipeline schedule (1F1B is interleaved where v > 1).
    output_first : bool
        torch's V placement (ZBVZeroBubble, DualPipeV): the first rank runs the output layer
        and the loss too (stages 0 and 2p - 1), not the last.
    gather_per_microbatch : bool
        ZeRO-3 / FSDP: parameters all-gathered in forward and again in backward and
        gradients reduce-scattered for every micro-batch, hidden behind the pipeline's compute
        where they fit (else once per step, overlapped with the first forward and last
        backward).
    reduce_per_microbatch : bool
        ZeRO-2 (DeepSpeed stage 2, Megatron-FSDP ``optim_grads``): the gradients are
        reduce-scattered after every micro-batch's backward (Megatron-LM d98e8a64dd
        ``megatron_fsdp.py``: ``grad_reduce_every_bprop`` for ``optim_grads`` and
        ``optim_grads_params``), hidden behind the pipeline's compute where they fit; the
        parameters are gathered once per step.
    pipelined_fsdp : bool
        FSDP2 under ``torch.distributed.pipelining`` (torchtitan with PP): nothing reshards
        and gradients sync after the last micro-batch, so where p > 1 the stage is gathered
        and reduced once per step even with ``gather_per_microbatch``.
    fsdp_groups : tuple
        FSDP2 groups of one GPU whose collectives are priced one by one, ``((parameters,
        groups, regathered), ...)`` [parameters, 1, bool]: Accelerate's under the Hugging Face
        Trainer (:func:`memsym.training.accelerate_fsdp.accelerate_fsdp_groups`).  Each group
        is all-gathered in every micro-batch's forward, those ``regathered`` again in its
        backward, at the precision's width, and reduce-scattered once per step at
        ``grad_bytes`` (the last micro-batch's; ``no_sync`` before it), in place of
        ``gather_per_microbatch``'s whole-model collectives; empty for every other job.
    recompute_fraction : float or numpy.ndarray
        Under full recompute, the fraction of layers whose forward the backward reruns [1]
        (Megatron's ``--recompute-method block`` N: N over the layers of a chunk; 1 else);
        an array gives one per layout, broadcast with the knobs.
    recompute_modules : tuple of str
        Under selective recompute, Megatron-core's ``--recompute-modules``
        (:data:`memsym.vocabulary.RECOMPUTE_MODULES`; its default ``core_attn``), each
        module's forward rerun in backward (:mod:`memsym.timing.recompute`).
    whole_embedding : bool
        Whether the word embedding (and a tied output layer) is whole on every TP rank, not
        split over t: DeepSpeed AutoTP (:attr:`memsym.frameworks.Framework.tp_whole_embedding`);
        its gradient is reduced whole over the data-parallel group.
    gathered_logits : bool
        Whether every TP rank's loss works on all V logits (DeepSpeed AutoTP's gathered output
        layer, :attr:`memsym.frameworks.Framework.tp_gathered_logits`): the loss's memory
        traffic counts T V, not T V / t (the all-gather itself is not priced).
    tp_overlap_cfg : str, tuple or None
        The userbuffers config ``--tp-comm-overlap`` runs with (a key of
        :data:`memsym.timing.userbuffers.UB_CONFIGS`, e.g. a Megatron-Bridge recipe's
        ``comm_overlap.tp_comm_overlap_cfg``, or a user's config as
        :func:`memsym.timing.userbuffers.user_ub_config` reads Megatron's
        ``--tp-comm-overlap-cfg`` file); None: Transformer Engine's default.
    moe_dispatcher : {"alltoall", "allgather", "deepep", "hybridep"}
        Megatron-core's MoE token dispatcher (``--moe-token-dispatcher-type``, the flex
        backends by name): DeepEP and HybridEP send a token once per EP rank and NVLink domain
        its experts sit on (:mod:`memsym.timing.flex_dispatch`), the others a row per expert.
    moe_host_sync : bool
        Whether the MoE token dispatcher waits on the host in every MoE layer (Megatron-core's
        default, :mod:`memsym.timing.moe_host`); False where it cannot: full-iteration CUDA
        graphs with a static HybridEP budget (``moe_expert_rank_capacity_factor``) or
        drop-and-pad (``moe_pad_expert_input_to_capacity``).
    optimizer : {"adam", "sgd", "muon"}
        The optimizer; ``"muon"`` adds its Newton-Schulz GEMMs to the step
        (:mod:`memsym.timing.muon`) and, with ``distributed_optimizer``, runs as Megatron's
        layer-wise distributed optimizer: gradients all-reduced, whole parameters stepped on
        one DP rank each and all-gathered after the step.
    muon_tp_mode : {"blockwise", "duplicated", "distributed"}
        ``--muon-tp-mode`` (Megatron-LM's default duplicated; Megatron-Bridge's Muon recipes
        blockwise).
    muon_ns_steps : int
        ``--muon-num-ns-steps`` [iterations] (default 5).
    muon_nesterov : bool
        ``--muon-nesterov`` (Megatron-LM's default off, optimizer_config.py:266): one more
        element-wise pass per Muon parameter (:func:`memsym.timing.muon.muon_step_bytes`).
    mla_down_proj_fusion : bool
        ``--mla-down-proj-fusion`` (default off): MLA's input norm fused into the q/kv
        down-projection, not rerun by ``layernorm`` (:func:`memsym.timing.recompute.
        norms_recomputed`).
    bias_activation_fusion : bool
        Megatron's ``bias_activation_fusion`` (default on, as memsym's jobs): off, a clamped
        quick-GeGLU's experts run the eager ``glu`` (moe/experts.py:995-1016 at d98e8a64dd,
        :func:`memsym.timing.moe_eager.eager_glu_bytes`) in place of the fused kernel.
    fp32_residual_connection : bool
        Megatron's ``--fp32-residual-connection`` (default off): the pipeline's p2p messages
        in fp32 (``pipeline_dtype`` torch.float, transformer_config.py:1419-1430 at
        d98e8a64dd), twice the 16-bit bytes (:mod:`memsym.terms.fp32_residual`).
    expert_quantize : {"per-expert", "grouped"}
        How Transformer Engine casts the routed experts' tensors under MXFP8
        (:mod:`memsym.timing.expert_casts`): ``"per-expert"``, a kernel per local expert, as
        TE through 2.14 does, the NeMo / Megatron-Bridge releases through 26.04.01
        (Megatron-Bridge issue #2885: the expert path's casts unfused, the fused one "delayed to
        26.06"); ``"grouped"``, one kernel for all local experts (TE pull request #2769, 2.15).
    mtp_recompute : bool
        Under full recompute, whether the backward reruns the MTP depths' checkpointed block
        (their projection and layer, :func:`memsym.timing.mtp.mtp_settings`): Megatron's
        ``--recompute-method uniform`` checkpoints it, ``block`` skips it
        (multi_token_prediction.py:1621-1649 at d98e8a64dd).
    """

    seq_length: int = 2048
    micro_batch_size: int = 1
    recompute: str = "none"
    sequence_parallel: bool = True
    flash_attention: bool = True
    dropout: bool = False
    precision: str = "bf16"
    distributed_optimizer: bool = True
    fp8_recipe: str | None = None
    fp8_param_gather: bool = False
    fp4_param_gather: bool = False
    bf16_layers: tuple = (0, 0)
    grad_bytes: int = 4
    group_size: int | None = None
    torch_rounds: bool = False
    schedule: str = "1f1b"
    output_first: bool = False
    gather_per_microbatch: bool = False
    reduce_per_microbatch: bool = False
    pipelined_fsdp: bool = False
    fsdp_groups: tuple = ()
    recompute_fraction: float = 1.0
    recompute_modules: tuple = ("core_attn",)
    tp_overlap_cfg: str | tuple | None = None
    moe_dispatcher: str = "alltoall"
    moe_host_sync: bool = True
    optimizer: str = "adam"
    muon_tp_mode: str = "duplicated"
    muon_ns_steps: int = 5
    muon_nesterov: bool = False
    mla_down_proj_fusion: bool = False
    mtp_recompute: bool = True
    expert_quantize: str = "per-expert"
    bias_activation_fusion: bool = True
    fp32_residual_connection: bool = False
    whole_embedding: bool = False
    gathered_logits: bool = False


@dataclass(frozen=True)
class StepTime:
    """One layout's step time [s] and its breakdown [s] (``parts``), with what it assumed.

    ``communication`` holds, per group (tp, cp, pp, dp, ep), ``bytes`` (what one GPU sends in
    the step), ``seconds`` (its collectives as issued, before overlap), ``exposed_seconds``
    (the step's part of that group) and ``link`` (``"intra"`` / ``"inter"``): the one
    communication model both the step time and the estimate's report use.

    Attributes
    ----------
    total : float
        The step [s].
    parts : dict
        Its breakdown [s] (:func:`memsym.timing.step.step_time_grid`'s parts).
    bubble : float
        The pipeline's idle seconds [s].
    mfu : float or None
        Model FLOPs utilisation [1] (None without FLOPs per token).
    assumptions : dict
        What the step assumed (overlap, micro-batches, settings, sources).
    communication : dict
        Per group its bytes [bytes], seconds [s], exposed seconds [s] and link.
    """

    total: float
    parts: dict
    bubble: float
    mfu: float | None = None
    assumptions: dict = field(default_factory=dict)
    communication: dict = field(default_factory=dict)
