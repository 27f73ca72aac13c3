"""What of a job a search carries: the :class:`memsym.training.Training` fields it holds or
explores (:data:`SEARCHED_FIELDS`), the one-line refusal of any other setting a job makes
(:func:`refuse_unsearched`), and a job's recompute choice and global batch as a search takes
them (:func:`recompute_choice`, :func:`global_batch_of`).
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..job_record import FIELD_PARTS
from ..text import short
from ..training import Training
from ..vocabulary import MEGATRON_FSDP_SCHEMES


#: The search's schemes a Megatron search runs as Megatron-FSDP, with the
#: ``--data-parallel-sharding-strategy`` each is (memsym.vocabulary.MEGATRON_FSDP_SCHEMES
#: inverted): ZeRO-2's states as ``optim_grads``, FSDP's as ``optim_grads_params``, each
#: priced with Megatron-FSDP's own buffers, as ``memsym estimate`` reads the launch back.
MEGATRON_FSDP_STRATEGY = {scheme: strategy for strategy, scheme in MEGATRON_FSDP_SCHEMES.items()
                          if scheme in ("zero2", "fsdp")}


#: The :class:`memsym.training.Training` fields a search carries: the space's own settings
#: (:meth:`Space.training`) and the choices it explores (recompute and its layer-wise form,
#: sharding, offload, micro-batch size).  Any other field a job sets is not searched.
SEARCHED_FIELDS = frozenset((
    "seq_length", "micro_batch_size", "global_batch_size", "recompute", "recompute_method",
    "recompute_num_layers", "flash_attention", "dropout", "schedule", "precision", "optimizer",
    "sharding", "convention", "offload", "capacity_factor", "finetune", "lora_rank",
    "lora_targets", "quantization", "framework", "fp8_recipe", "moe_dispatcher",
    "tp_comm_overlap"))


#: The data-parallel overlap fields a search can price a job's own values of (``overlaps``).
OVERLAP_FIELDS = ("overlap_grad_reduce", "overlap_param_gather")


def unsearched_fields(tr, carried=()) -> list:
    """``"name value"`` of each field of the Training ``tr`` that a search does not carry
    (not in :data:`SEARCHED_FIELDS`, nor in ``carried``: fields this search is given, such as
    :data:`OVERLAP_FIELDS` with ``overlaps``) and that differs from :class:`Training`'s
    default: a search of the job would price, and draw, a different job without it.

    Examples
    --------
    >>> from memsym.training import Training
    >>> unsearched_fields(Training(optimizer="sgd")), unsearched_fields(Training(metric="reserved"))
    ([], ['metric reserved'])
    """
    default = Training()
    return [f"{name} {val if isinstance(val, str) else short(val)}" for name, val in
            ((name, tr.value(name)) for name in FIELD_PARTS)
            if name not in SEARCHED_FIELDS and name not in carried
            and val != default.value(name)]


def refuse_unsearched(tr, what: str = "search", carried=()) -> None:
    """Refuse, in one line, a job's setting that the search's space does not carry (it would
    be priced, and emitted, without it): a Megatron-FSDP strategy other than the one the
    search spells the job's scheme as (ZeRO-2 as ``optim_grads``, FSDP as
    ``optim_grads_params``: :data:`MEGATRON_FSDP_STRATEGY`), Megatron-FSDP's double buffer,
    the userbuffers config, NVFP4 parameters (``fp4_param_gather``), the optimizer step's CUDA
    graph, and any other field outside :data:`SEARCHED_FIELDS` (:func:`unsearched_fields`,
    ``carried`` as there).  ``what``: the command that searches, as the message names it.
    The MoE dispatcher and ``tp_comm_overlap`` are carried (:attr:`Space.moe_dispatcher`,
    :attr:`Space.tp_comm_overlap`).

    Examples
    --------
    >>> from memsym.training import Training
    >>> refuse_unsearched(Training())            # the defaults: nothing to refuse
    >>> refuse_unsearched(Training(sharding="fsdp", megatron_fsdp="optim_grads_params"))
    >>> refuse_unsearched(Training(megatron_fsdp="optim"))
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: search: the job's megatron_fsdp optim is not a searched setting (the search runs Megatron-FSDP as zero2 = optim_grads and fsdp = optim_grads_params, without its double buffer, TE's default userbuffers and the job's settings the search keeps); estimate the layout instead
    """
    if tr.states.megatron_fsdp == MEGATRON_FSDP_STRATEGY.get(tr.states.sharding):
        carried = (*carried, "megatron_fsdp")       # the search's own spelling of the scheme
    kept = unsearched_fields(tr, carried)
    if kept:
        raise InvalidValueError(f"{what}: the job's {', '.join(kept)} is not a searched setting "
                                "(the search runs Megatron-FSDP as zero2 = optim_grads and "
                                "fsdp = optim_grads_params, without its double buffer, TE's "
                                "default userbuffers and the job's settings the search keeps); "
                                "estimate the layout instead")


def recompute_choice(memory) -> str:
    """The search's recompute choice of a job's :class:`memsym.job_record.Memory` (the
    inverse of :func:`recompute_fields`): its mode, or ``"block-N"`` / ``"every-N"`` for a
    layer-wise full recompute.  Megatron's ``uniform`` grouping is not a search choice and is
    refused in one line.

    Examples
    --------
    >>> from memsym.job_record import Memory
    >>> recompute_choice(Memory(recompute="selective"))
    'selective'
    >>> recompute_choice(Memory(recompute="full", recompute_method="block", recompute_num_layers=2))
    'block-2'
    """
    if memory.recompute_method is None:
        return memory.recompute
    if memory.recompute_method not in ("block", "every"):
        raise InvalidValueError(f"recompute method {memory.recompute_method} is not a search "
                                "choice (block-N or every-N); estimate the layout instead")
    return f"{memory.recompute_method}-{memory.recompute_num_layers or 1}"


def global_batch_of(job) -> int | None:
    """A job's global batch ``B`` [sequences]: its own, else its ``m`` micro-batches at its
    layout, ``B = m b d`` (the same batch at every layout a search tries), else None.

    Examples
    --------
    >>> from memsym.job import job
    >>> global_batch_of(job("llama2-7b", dp=4, micro_batch_size=2, num_microbatches=8))
    64
    """
    batch = job.training.batch
    if batch.global_batch_size is not None or batch.num_microbatches is None:
        return batch.global_batch_size
    return batch.num_microbatches * batch.micro_batch_size * job.layout.d
