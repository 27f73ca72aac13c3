"""Read a DeepSpeed config's AutoTP (``tensor_parallel``) keys: DeepSpeed 0.19.6,
deepspeedai/DeepSpeed ``edaa722126``.

AutoTP training is switched on by ``tensor_parallel.autotp_size`` > 1
(``deepspeed/__init__.py:210-212``, ``runtime/engine.py:332-333``; ``TPTrainingConfig.autotp_size``
0 by default, "when set to 0, indicates that it is disabled", ``runtime/tensor_parallel/
config.py:45-49``).  The engine builds a (data, tensor) device mesh of ``world // autotp_size``
by ``autotp_size`` ranks (``utils/groups.py:146-155``, ``_init_tp_mesh_device``) and shards the
linear layers the model's transformers ``tp_plan`` names (``runtime/engine.py:816-848``): the
attention's q/k/v and the MLP's gate/up column-wise, o_proj and down_proj row-wise, the output
layer column-wise with its outputs all-gathered; the word embedding and the norms stay whole,
and activations are whole on every TP rank (no sequence split).  memsym counts this as its
tensor-parallel size t without sequence parallelism
(:attr:`memsym.frameworks.Framework.tp_whole_embedding`, ``tp_gathered_logits``).

Every ZeRO stage composes with it: each rank's TP shard is partitioned over the data-parallel
group (the tutorial names stages 0-2, ``docs/_tutorials/autotp-training.md:20``; the engine
also supports ZeRO-3, ``runtime/engine.py:666-669``), except AutoEP beside AutoTP under
ZeRO-3 (``runtime/engine.py:1894-1897``), which memsym refuses under every stage.
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..text import short
from ._values import MAX_GPUS
from .deepspeed_values import deepspeed_count, deepspeed_flag, deepspeed_object

__all__ = ["read_tensor_parallel", "autotp_data_parallel", "AUTOTP_BATCH"]

#: Why a DeepSpeed AutoTP job's ``train_batch_size`` counts every GPU: without an ``mpu`` (the
#: Hugging Face Trainer passes none) ``DeepSpeedConfig`` takes the whole world as its batch
#: rule's data-parallel size (``runtime/config.py:720-724``), and Accelerate writes
#: micro-batch x accumulation x processes (accelerate 1.16.0 ``accelerator.py:2191-2197``);
#: but the ranks of a TP group read the same micro-batches (Accelerate's ``prepare_data_loader``
#: divides its processes by the ``tp`` mesh size, ``data_loader.py:1124-1128``; the engine
#: checks it, ``runtime/engine.py:676-721``), so one step trains train_batch_size / t
#: sequences.
AUTOTP_BATCH = ("train_batch_size counts every GPU (DeepSpeedConfig's world size without an "
                "mpu, runtime/config.py:720-724) but a TP group's ranks read the same "
                "micro-batches (Accelerate data_loader.py:1124-1128)")


def read_tensor_parallel(data: dict, notes: list, ignored: list) -> int:
    """AutoTP's tensor-parallel size t of a DeepSpeed config [GPUs]: ``tensor_parallel.
    autotp_size`` when > 1, else 1 (0, DeepSpeed's default, and 1 shard nothing).

    .. math:: t = \\max(1, \\text{autotp\\_size})

    Ulysses' ``sequence_parallel_size`` is read apart
    (:mod:`memsym.readers.deepspeed_ulysses`).  ``tensor_parallel.tp.tp_size`` must be 1 or
    ``autotp_size`` (``runtime/engine.py:729-732``); a ``partition_config`` or
    ``preset_model`` is read into a note (memsym counts the transformers ``tp_plan`` split).

    Parameters
    ----------
    data : dict
        The whole DeepSpeed config.
    notes, ignored : list
        Where the notes and the ignored keys are appended.

    References
    ----------
    DeepSpeed ``edaa722126`` ``runtime/tensor_parallel/config.py:38-146`` (``TPTrainingConfig``,
    ``get_tensor_parallel_config``), ``deepspeed/__init__.py:203-212``, ``runtime/config.py:
    720-724``.

    Examples
    --------
    >>> read_tensor_parallel({"tensor_parallel": {"autotp_size": 4}}, [], [])
    4
    >>> read_tensor_parallel({"tensor_parallel": {"autotp_size": 0}}, [], [])
    1
    """
    sec = data.get("tensor_parallel")
    if sec is None:
        return 1
    deepspeed_object(sec, "tensor_parallel", '{"autotp_size": 2}')
    t = max(1, deepspeed_count(sec.get("autotp_size", 0), "tensor_parallel.autotp_size", 0,
                               MAX_GPUS, "gpus"))
    inner = sec.get("tp", sec.get("tensor_parallel", {}))
    deepspeed_object(inner, "tensor_parallel.tp")
    size = deepspeed_count(inner.get("tp_size", 1), "tensor_parallel.tp.tp_size", 1, MAX_GPUS,
                           "gpus")
    if t > 1 and size not in (1, t):   # engine.py:_apply_autotp_partitioning
        raise InvalidValueError(f"tensor_parallel.tp.tp_size {size} does not match "
                                f"tensor_parallel.autotp_size {t} (DeepSpeed refuses it)")
    ignored += [f"tensor_parallel.tp.{k}" for k in inner if k != "tp_size"]
    for key, value in sec.items():
        if key in ("autotp_size", "tp", "tensor_parallel"):
            continue
        if key in ("partition_config", "preset_model") and value is not None and t > 1:
            notes.append(f"tensor_parallel.{key} read: memsym counts the transformers tp_plan "
                         "split (q/k/v, gate/up by columns; o_proj, down_proj by rows; the "
                         "output layer by vocabulary), not a custom one")
        elif key == "tp_overlap_comm" and deepspeed_flag(value, "tensor_parallel.tp_overlap_comm") \
                and t > 1:
            notes.append("tensor_parallel.tp_overlap_comm read, not modelled: the time counts "
                         "the TP all-reduces exposed")
        elif key not in ("partition_config", "preset_model", "tp_overlap_comm"):
            ignored.append(f"tensor_parallel.{key}")
    if t > 1:
        notes.append(f"tensor_parallel.autotp_size {t}: AutoTP splits the attention and MLP "
                     f"linears over t = {t} (the transformers tp_plan: columns, then rows), the "
                     "output layer by vocabulary with its logits all-gathered; the word "
                     "embedding, a tied output layer, the norms and the activations between "
                     "the linears are whole on each GPU (no sequence parallelism)")
    return t


def autotp_data_parallel(world, t: int, notes: list):
    """The data-parallel size d of ``world`` GPUs under AutoTP's t [GPUs] (None where the
    world is unknown).

    .. math:: d = W / t

    DeepSpeed's TP mesh is ``(world // autotp_size, autotp_size)``
    (``utils/groups.py:146-155``), which torch's ``init_device_mesh`` builds only when t
    divides the world: refused otherwise.

    Parameters
    ----------
    world : int or None
        DeepSpeed's world size W [GPUs].
    t : int
        AutoTP's ``autotp_size`` [GPUs].
    notes : list
        Where the note on the batch is appended.

    Examples
    --------
    >>> autotp_data_parallel(8, 2, [])
    4
    """
    if world is None or t == 1:
        return world
    if world % t:
        raise InvalidValueError(f"tensor_parallel.autotp_size {t} does not divide the world size "
                                f"{short(world)} (DeepSpeed's (data, tensor) mesh, "
                                "utils/groups.py _init_tp_mesh_device)")
    notes.append(f"data-parallel size {world // t} = {world} GPUs / autotp_size {t}; "
                 + AUTOTP_BATCH)
    return world // t
