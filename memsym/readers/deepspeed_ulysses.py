"""Read a DeepSpeed config's Ulysses sequence parallelism (``sequence_parallel_size``, ALST):
DeepSpeed 0.19.6, deepspeedai/DeepSpeed ``edaa722126``.

Ulysses for Hugging Face models (``runtime/sequence_parallel/ulysses_sp.py``) splits every
sequence over ``sequence_parallel_size`` ranks everywhere but inside attention:
``UlyssesSPDataLoaderAdapter`` gives each rank ``s/sp`` tokens of one sequence (``refill``,
``chunk_len = seq_length // sp_world_size``), and ``UlyssesSPAttentionHF`` all-to-alls the
queries, keys and values to the whole sequence with ``a/sp`` heads (``_combine_local_sequences``),
runs the model's own attention kernel and all-to-alls the output back
(``_partition_global_sequence``).  That is Megatron's ``--cp-comm-type a2a`` (DeepSpeed-Ulysses
in Transformer Engine's ``AttnFuncWithCPAndQKVOA2A``), so memsym counts it as context
parallelism c = ``sequence_parallel_size`` with the ``a2a`` method
(:data:`memsym.frameworks.FRAMEWORK`'s ``cp_attention`` for DeepSpeed).

The data-parallel size and the batch: the SP ranks of a group read one sequence between them,
so DeepSpeed's batch rule counts ``world_size / sequence_parallel_size`` data-parallel ranks
(``runtime/config.py:713-724``: ``world / mpu.get_sequence_parallel_world_size()``, or without an
mpu ``world / config["sequence_parallel_size"]``); Accelerate writes ``train_batch_size`` as
micro-batch x accumulation x processes // sp, then micro-batch x accumulation x its
ParallelismConfig's data-parallel size (accelerate 1.16.0 ``accelerator.py:2191-2197``,
``:2321-2328``).  ZeRO partitions over every rank, the sequence-data-parallel group
(``runtime/engine.py:2351``, ``dp_process_group=self.seq_data_parallel_group``), as memsym's
states shard over d c.  DeepSpeed's refusals are kept: sp must divide the world
(``parallel_state_sp.py:29-31``), the attention heads (``ulysses_sp.py:145-146``), and the KV
heads or be a multiple of them (``:147-150``), and the sequence (``:697-698``); AutoEP beside
Ulysses under ZeRO-3 (``runtime/engine.py:1898-1900``).  What memsym does not model is
refused: more SP ranks than KV heads (Ulysses replicates each KV head ``sp / kv_heads`` times,
``ulysses_sp.py:131-136``, ``:182-184``) and AutoTP beside Ulysses (:mod:`memsym.rules_layout`);
and eager attention, which Ulysses refuses (``register_with_transformers``, ``:461-468``), is
refused without flash (rule ``ulysses-eager``).

Not counted: the ``position_ids`` all-gather of each attention call (8 b s bytes of int64),
and, as for Megatron's a2a, the kernel's own saved output beside the all-to-all'd output the
output projection saves (one more :math:`b s a d_h / c` per layer); ALST's tiled MLP and loss
and its checkpoint offload (:data:`ALST_EXTRAS`).
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..text import short
from ._values import MAX_GPUS
from .deepspeed_values import deepspeed_count

__all__ = ["read_sequence_parallel", "ulysses_world", "ulysses_refusals", "ulysses_defaults",
           "ULYSSES_BATCH", "ULYSSES_AUTO_BATCH", "ULYSSES_SWITCH", "ALST_EXTRAS"]

#: Why a Ulysses job's batch rule counts world / sp data-parallel ranks.
ULYSSES_BATCH = ("DeepSpeed's batch rule counts world / sequence_parallel_size data-parallel "
                 "ranks (runtime/config.py:713-724)")
#: Where a Trainer's ``"auto"`` train batch comes from under Ulysses: Accelerate's.
ULYSSES_AUTO_BATCH = ("DeepSpeed config \"auto\" = micro-batch x accumulation x world size / "
                      "sequence_parallel_size (accelerate 1.16.0 accelerator.py:2191-2197, "
                      ":2321-2328, over the Trainer's world-size fill)")
#: What switches Ulysses on beside the key: the model's attention registered and the mpu given.
ULYSSES_SWITCH = ("Ulysses runs once the script registers UlyssesSPAttentionHF and passes its "
                  "mpu to deepspeed.initialize (or Accelerate's ParallelismConfig sp_size, "
                  "sp_backend deepspeed); the key alone only changes the batch rule")


#: ALST's other pieces (the ulysses_sp.py module docstring): patches the script applies itself.
ALST_EXTRAS = ("ALST's TiledMLP, tiled logits loss (sequence_tiled_compute) and activation "
               "checkpoint offload are the script's own patches, not read: memsym counts the "
               "untiled MLP and logits")


def read_sequence_parallel(data: dict, notes: list) -> int:
    """Ulysses' sequence-parallel size c of a DeepSpeed config [GPUs]:
    ``sequence_parallel_size``, 1 when absent.

    .. math:: c = \\text{sequence\\_parallel\\_size}

    Parameters
    ----------
    data : dict
        The whole DeepSpeed config.
    notes : list
        Where the note on Ulysses is appended (c > 1).

    References
    ----------
    DeepSpeed ``edaa722126`` ``runtime/sequence_parallel/ulysses_sp.py`` (``UlyssesSPAttentionHF``,
    ``UlyssesSPDataLoaderAdapter``), ``runtime/config.py:713-724``, ``deepspeed/__init__.py:
    200-206``.

    Examples
    --------
    >>> read_sequence_parallel({"sequence_parallel_size": 4}, [])
    4
    >>> read_sequence_parallel({}, [])
    1
    """
    sp = data.get("sequence_parallel_size")
    c = 1 if sp is None else deepspeed_count(sp, "sequence_parallel_size", 1, MAX_GPUS, "gpus")
    if c > 1:
        notes.append(f"sequence_parallel_size {c}: DeepSpeed Ulysses splits each sequence over "
                     f"c = {c} GPUs (UlyssesSPDataLoaderAdapter) and all-to-alls the attention "
                     "to the whole sequence with a/c heads (UlyssesSPAttentionHF), counted as "
                     "context parallelism c with cp_comm_type a2a; " + ULYSSES_SWITCH)
        notes.append(ALST_EXTRAS)
    return c


def ulysses_world(data: dict, world_size, c: int, notes: list):
    """The world size DeepSpeed's batch rule counts under Ulysses' c [GPUs]: the data-parallel
    size, ``world_size / c`` (None where the world is unknown and the config names no
    ``data_parallel_size``).

    .. math:: d = W / c

    A config with both ``data_parallel_size`` and ``sequence_parallel_size`` builds a
    (data, sequence) device mesh of those sizes (``deepspeed/__init__.py:203-206``) whose data
    dimension the batch rule counts (``runtime/config.py:719-720``): d = ``data_parallel_size``,
    and W must be d c.

    Parameters
    ----------
    data : dict
        The whole DeepSpeed config.
    world_size : int or None
        The GPUs W [GPUs].
    c : int
        ``sequence_parallel_size`` [GPUs].
    notes : list
        Where the note on the batch is appended.

    Examples
    --------
    >>> ulysses_world({}, 8, 2, [])
    4
    >>> ulysses_world({"data_parallel_size": 2, "sequence_parallel_size": 4}, None, 4, [])
    2
    """
    if c == 1:
        return world_size
    mesh = data.get("data_parallel_size")
    if mesh is not None:
        mesh = deepspeed_count(mesh, "data_parallel_size", 1, MAX_GPUS, "gpus")
        if world_size is not None and mesh * c != world_size:
            raise InvalidValueError(f"data_parallel_size {mesh} x sequence_parallel_size {c} is "
                                    f"not the world size {short(world_size)} (DeepSpeed's "
                                    "(data, sequence) mesh, deepspeed/__init__.py:203-206)")
        notes.append(f"data-parallel size {mesh} = data_parallel_size (the (data, sequence) "
                     "mesh's data dimension, runtime/config.py:719-720)")
        return mesh
    if world_size is None:
        return None
    if world_size % c:
        raise InvalidValueError(f"sequence_parallel_size {c} does not divide the world size "
                                f"{short(world_size)} (DeepSpeed's parallel_state_sp."
                                "initialize_sequence_parallel refuses it)")
    notes.append(f"data-parallel size {world_size // c} = {world_size} GPUs / "
                 f"sequence_parallel_size {c}; " + ULYSSES_BATCH)
    return world_size // c


def ulysses_refusals(c: int, t: int, e, zero_stage: int) -> None:
    """Refuse, in one line, what a config sets beside Ulysses' c that DeepSpeed or memsym does
    not run: AutoEP under ZeRO-3 (DeepSpeed, ``runtime/engine.py:1898-1900``) and AutoTP's t
    (not modelled: Ulysses' mpu and AutoTP's (data, tensor) mesh are built apart).

    Parameters
    ----------
    c : int
        ``sequence_parallel_size`` [GPUs].
    t : int
        AutoTP's ``autotp_size`` [GPUs].
    e : int or None
        AutoEP's ``autoep_size`` [GPUs] (None: off).
    zero_stage : int
        ``zero_optimization.stage``.

    Examples
    --------
    >>> ulysses_refusals(4, 1, None, 3)
    >>> ulysses_refusals(1, 2, 8, 3)
    """
    if c == 1:
        return
    if t > 1:
        raise InvalidValueError(f"sequence_parallel_size {c} with tensor_parallel.autotp_size "
                                f"{t}: Ulysses beside AutoTP is not modelled by memsym; drop one "
                                "of them")
    if e is not None and zero_stage == 3:
        raise InvalidValueError(f"expert_parallel with sequence_parallel_size {c} under ZeRO-3: "
                                "DeepSpeed refuses AutoEP with ZeRO Stage 3 beside sequence "
                                "parallelism (runtime/engine.py:1898-1900)")


def ulysses_defaults(defaults: list, c: int) -> list:
    """The filled ``"auto"`` values ``(key, value, source)`` with a train batch's source said
    as Accelerate fills it under Ulysses (:data:`ULYSSES_AUTO_BATCH`) where c > 1.

    Parameters
    ----------
    defaults : list
        The ``(key, value, source)`` of each ``"auto"`` filled.
    c : int
        ``sequence_parallel_size`` [GPUs].

    Examples
    --------
    >>> ulysses_defaults([("train_batch_size", 4, "the Trainer")], 4)[0][2][:27]
    'DeepSpeed config "auto" = m'
    """
    if c == 1:
        return defaults
    return [(k, v, ULYSSES_AUTO_BATCH if k == "train_batch_size" else why)
            for k, v, why in defaults]
