"""Out as a launch command (issue 32): a searched layout in a framework's own arguments.

:func:`emit` turns one row of :func:`memsym.search.search` into what the framework reads:

* ``megatron``: ``pretrain_gpt.py`` arguments, ``pretrain_hybrid.py``'s for a hybrid Mamba model
  (:func:`megatron_script`; Megatron-LM ``megatron/training/arguments.py``
  at ``d98e8a64dd``, the commit :mod:`memsym.readers.megatron` reads), the layout, batch,
  precision, sharding, recompute, dropout and overlap arguments only (the model stays the
  MODEL the user named; each setting's flags: :mod:`memsym.emit_megatron_flags`), plus
  ``--world-size`` (memsym's addition: Megatron reads ``WORLD_SIZE`` from the launcher); ``--overlap-param-gather`` only where ``validate_args``
  allows it (:func:`memsym.emit_rules.megatron_overlaps`: left out on plain DDP, which
  gathers no parameters);
* ``torchtitan``: a job TOML fragment with the ``[parallelism]``, ``[training]`` and
  ``[activation_checkpoint]`` keys of torchtitan v0.2.2 (``torchtitan/config/job_config.py``,
  the keys :mod:`memsym.readers.torchtitan` reads), expert parallelism as
  ``expert_parallel_degree`` with ``expert_tensor_parallel_degree`` = TP;
* ``deepspeed``: a ``ds_config.json`` (the batch triple, ``bf16``/``fp16`` and
  ``zero_optimization`` of DeepSpeed 0.19.6, the keys :mod:`memsym.readers.deepspeed` reads),
  expert parallelism as AutoEP's ``expert_parallel`` section (:data:`AUTOEP_NOTE`), a full
  recompute as the model's gradient checkpointing beside it (``MODEL_CHECKPOINTING``).

A searched job's own settings (``space.held``) are written in each framework's input too
(:mod:`memsym.emit_held`), or the row is refused.

The contract is the round trip: reading the emitted arguments back (``memsym estimate MODEL
...``, :meth:`Emitted.read_back`) gives the layout and the per-GPU bytes the search priced.
Each sharding scheme, recompute mode and setting is spelled in the framework's own flags
only where memsym's reader of that framework reads it back as the same thing; a row that
cannot be spelled so is refused with :class:`NotExpressible`, one line saying why, never
emitted as something that reads back differently.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass

from .errors import InvalidValueError
from .frameworks import FRAMEWORK
from .job import resolve_dropout
from .emit_held import NotExpressible, check_held, deepspeed_held, megatron_held, torchtitan_held
from .emit_megatron_flags import dispatcher_flags, precision_flags, recompute_flags, sharding_flags
from .emit_rules import AUTOEP_NOTE, AUTOTP_NOTE, ULYSSES_NOTE, megatron_overlaps, ulysses_section
from .model.torchtitan_stages import torchtitan_end_stages, torchtitan_layers_per_stage
from .readers.deepspeed_notes import MODEL_CHECKPOINTING
from .readers.jobs import DEEPSPEED_SCHEMES
from .readers.megatron_userbuffers import ub_yaml
from .search import launch_overlaps
from .search.choices import recompute_layers

__all__ = ["EMIT_FRAMEWORKS", "FILE_SUFFIX", "Emitted", "NotExpressible", "check_emittable",
           "emit", "megatron_script"]

#: The frameworks a layout is emitted for, as ``memsym search --emit`` names them.
EMIT_FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")

#: The file each framework reads: an argument file, a job TOML, a DeepSpeed config
#: (:attr:`memsym.frameworks.Framework.config_suffix`).
FILE_SUFFIX = {name: FRAMEWORK[name].config_suffix for name in EMIT_FRAMEWORKS}
#: The frameworks whose launch is words on a command line as well as a file.
EMIT_AS_WORDS = ("megatron",)
#: The file a carried userbuffers config is written to (Megatron-LM's --tp-comm-overlap-cfg).
UB_FILE = "tp_comm_overlap_cfg.yaml"

#: memsym's scheme -> DeepSpeed's ``zero_optimization.stage`` (the reader's table inverted).
_DEEPSPEED_STAGE = {scheme: stage for stage, scheme in DEEPSPEED_SCHEMES.items()}

#: Megatron-LM's dropout defaults (arguments.py ``--hidden-dropout`` and
#: ``--attention-dropout``, both 0.1): written out, since a MODEL's recipe may differ.
_MEGATRON_DROPOUT = "0.1"

#: torchtitan's schedules per memsym schedule: (single stage per rank, looped) --
#: torch.distributed.pipelining ScheduleGPipe / ScheduleLoopedBFS and Schedule1F1B /
#: ScheduleInterleaved1F1B, the pairs :func:`memsym.readers.jobs.torchtitan_job` reads back.
_TORCHTITAN_SCHEDULES = {"gpipe": ("GPipe", "LoopedBFS"), "1f1b": ("1F1B", "Interleaved1F1B")}


def megatron_script(arch) -> str:
    """The Megatron-LM script a model's arguments are given to: ``pretrain_hybrid.py`` for a
    hybrid layer pattern (``layer_mixers``: a HybridModel, Megatron-LM ``d98e8a64dd``
    ``pretrain_hybrid.py:44``; the same arguments and defaults), else ``pretrain_gpt.py``, as
    memsym's Megatron reader names it (:mod:`memsym.cli.training_options`).

    >>> from memsym.model.presets import preset
    >>> megatron_script(preset("llama3-8b")), megatron_script(preset("nemotron-3-nano"))
    ('pretrain_gpt.py', 'pretrain_hybrid.py')
    """
    return "pretrain_gpt.py" if getattr(arch, "layer_mixers", None) is None else \
        "pretrain_hybrid.py"


@dataclass(frozen=True)
class Emitted:
    """One layout in one framework's input.

    Attributes
    ----------
    framework : str
        One of :data:`EMIT_FRAMEWORKS`.
    text : str
        The file's content: the arguments one per line (Megatron), the TOML, the JSON.
    arguments : tuple of str
        Megatron-LM's arguments as words (empty for the config-file frameworks).
    host : tuple of str
        memsym's own options the read-back needs that are no framework argument (the GPU,
        a non-default memory convention).
    world_size : int
        The GPUs of the job [GPUs].
    seq_length : int
        Sequence length [tokens].
    files : tuple of (str, str)
        The other files the arguments name, as (file name, content): the userbuffers config
        of ``--tp-comm-overlap-cfg`` (:data:`UB_FILE`).
    notes : tuple of str
        What the user must know to launch it that the file cannot say (a JSON config holds
        no comments): DeepSpeed's AutoEP and the model code it needs (:data:`AUTOEP_NOTE`).
    script : str
        The script Megatron-LM's arguments are given to (:func:`megatron_script`; Bridge's
        ``run_recipe.py`` for a recipe's); empty for the config-file frameworks.
    """

    framework: str
    text: str
    arguments: tuple
    host: tuple
    world_size: int
    seq_length: int
    files: tuple = ()
    notes: tuple = ()
    script: str = ""

    @property
    def suffix(self) -> str:
        return FILE_SUFFIX[self.framework]

    def file_name(self, n: int) -> str:
        """``layout_N.<suffix>``."""
        return f"layout_{int(n)}.{self.suffix}"

    def read_back(self, path=None) -> list:
        """The words after ``memsym estimate MODEL`` that read the layout back.

        ``path``: the file the text was written to; without it, Megatron's arguments are
        given as words (the config-file frameworks need the file).

        Examples
        --------
        >>> e = Emitted("deepspeed", "{}", (), ("--gpu", "h100-80gb"), 8, 4096)
        >>> e.read_back("ds.json")
        ['--deepspeed-config', 'ds.json', '--world-size', '8', '--seq-length', '4096', '--gpu', 'h100-80gb']
        """
        fw = FRAMEWORK[self.framework]
        if path is None:
            if fw.name not in EMIT_AS_WORDS:
                raise InvalidValueError(f"a {self.framework} config is read back from its file")
            head = list(self.arguments)
        else:
            # what the framework's file does not hold is given beside it
            sizes = {"world_size": ("--world-size", self.world_size),
                     "seq_length": ("--seq-length", self.seq_length)}
            head = [fw.reader_option, str(path)]
            for key in fw.config_lacks:
                head += [sizes[key][0], str(sizes[key][1])]
        return head + list(self.host)


def check_emittable(framework: str, space, model=None, held: bool = True) -> None:
    """Refuse a whole search whose shared settings ``framework`` cannot spell (raises
    :class:`NotExpressible`); a row's own choices are checked by :func:`emit`.

    ``model``: the MODEL the search was given (a preset's recipe decides the dropout a
    DeepSpeed or torchtitan job reads back).  ``held``: the job's held settings
    (``space.held``) are written too (:func:`memsym.emit_held.check_held`); False where a
    recipe carries them (a Megatron-Bridge recipe's relaunch).
    """
    if framework not in EMIT_FRAMEWORKS:
        raise InvalidValueError(f"--emit takes {', '.join(EMIT_FRAMEWORKS)}, got {framework!r:.40}")
    if space.framework != framework:
        raise NotExpressible(f"--emit {framework} needs the layouts priced under {framework}'s "
                             f"rules, not --framework {space.framework}")
    if space.finetune != "full" and held:   # a recipe's relaunch: the recipe carries it
        raise NotExpressible(f"--emit: {space.finetune} fine-tuning has no {framework} "
                             "pre-training arguments (memsym reads back full training)")
    fw = FRAMEWORK[framework]
    name = fw.title
    if space.optimizer not in fw.config_optimizers:
        spelled = (f"{name}'s --optimizer adam / sgd" if fw.megatron_options else
                   f"a {name} job as Adam (its optimizer section is not read)")
        raise NotExpressible(f"--emit {framework}: optimizer {space.optimizer}; memsym reads "
                             f"back {spelled}")
    if held:
        check_held(framework, space)
    if fw.megatron_options:
        return                        # its arguments spell attention, dropout and precision
    if not space.flash_attention:
        raise NotExpressible(f"--emit {framework}: attention without flash is the model code's "
                             f"choice, not {name}'s config (memsym reads flash attention back)")
    kept, _ = resolve_dropout(framework, None, model, space.arch)
    if bool(space.dropout) != bool(kept):
        raise NotExpressible(f"--emit {framework}: dropout {'on' if space.dropout else 'off'} is "
                             f"the model code's, not {name}'s config (memsym reads it back "
                             f"{'on' if kept else 'off'})")
    spelled = fw.config_precisions
    if space.precision not in spelled:
        raise NotExpressible(f"--emit {framework}: precision {space.precision} is not one "
                             f"{name}'s config spells as memsym reads it back "
                             f"({', '.join(spelled)})")


def _host(space) -> tuple:
    """memsym's options of the read-back that no framework spells: the GPU (its workspace
    and step time) and a memory convention other than the framework's own."""
    out = ("--gpu", space.gpu.name)
    if space.convention != "framework":
        out += ("--convention", space.convention)
    return out


def _batch(row, space) -> tuple:
    """(b, m, B): micro-batch, micro-batches per step and global batch [sequences]."""
    b, m = row["b"], row.get("m")
    B = space.global_batch_size
    if B is None or m is None:
        raise NotExpressible("no global batch: give --global-batch-size (the frameworks need "
                             "one)")
    return b, m, B


def emit(framework: str, row: dict, space, gpus: int, model=None, folder=None,
         held: bool = True) -> Emitted:
    """One row of a search in ``framework``'s input (see the module's docstring).

    Parameters
    ----------
    framework : {"megatron", "torchtitan", "deepspeed"}
    row : dict
        :meth:`memsym.search.SearchResult.row`.
    space : memsym.search.Space
        The search's space (``result.space``).
    gpus : int
        The world size [GPUs].
    model : str, optional
        The MODEL the search was given (see :func:`check_emittable`).
    folder : str, optional
        Where the other files (:attr:`Emitted.files`) are written: the arguments name them
        there (without it, by their bare names).
    held : bool
        Write the job's held settings (``space.held``, :mod:`memsym.emit_held`); False where
        a recipe carries them (a Megatron-Bridge recipe's relaunch).

    Returns
    -------
    Emitted

    Raises
    ------
    NotExpressible
        The row (or the search) cannot be spelled so that it reads back the same.
    """
    check_emittable(framework, space, model, held)
    if row["offload"] != "none" and not FRAMEWORK[framework].reads_offload:
        raise NotExpressible(f"offload {row['offload']}: memsym's {framework} reader reads no "
                             "CPU offload")
    # one writer per framework; Megatron's alone may write a file beside the command
    writers = {"megatron": lambda: _megatron(row, space, int(gpus), folder, held),
               "torchtitan": lambda: _torchtitan(row, space, int(gpus), held),
               "deepspeed": lambda: _deepspeed(row, space, int(gpus), held)}
    return writers[framework]()


# ---------------------------------------------------------------------------------------------
# Megatron-LM
# ---------------------------------------------------------------------------------------------
def _overlaps(space, row) -> dict:
    """The data-parallel overlaps a row's step was priced with: the launch's
    (:func:`memsym.search.launch_overlaps`), or a searched job's own (``space.overlaps``)."""
    if space.overlaps is None:
        return launch_overlaps(space.framework, row["sharding"])
    return {k: v for k, v in space.overlaps if v is not None}


def _megatron(row, space, gpus, folder=None, held=True) -> Emitted:
    b, _, B = _batch(row, space)
    if row["p"] > 1 and space.schedule == "gpipe":
        raise NotExpressible("schedule gpipe: Megatron-LM runs 1F1B (interleaved with v > 1)")
    words = ["--tensor-model-parallel-size", str(row["t"]),
             "--pipeline-model-parallel-size", str(row["p"])]
    for flag, key in (("--context-parallel-size", "c"), ("--expert-model-parallel-size", "e"),
                      ("--num-virtual-stages-per-pipeline-rank", "v")):
        if row[key] > 1:
            words += [flag, str(row[key])]
    if (row.get("t_e") or row["t"]) != row["t"]:
        # validate_args sets expert_tensor_parallel_size to TP when unset (arguments.py:587)
        words += ["--expert-tensor-parallel-size", str(row["t_e"])]
    for flag, key in (("--decoder-first-pipeline-num-layers", "first_stage_layers"),
                      ("--decoder-last-pipeline-num-layers", "last_stage_layers")):
        if row.get(key) is not None:
            words += [flag, str(row[key])]
    files = ()
    if row["sequence_parallel"] and row["t"] > 1:
        words.append("--sequence-parallel")
        if space.tp_comm_overlap:   # as the search priced it: on where SP is (validate_args)
            words.append("--tp-comm-overlap")
            if space.tp_comm_overlap_cfg is not None:   # its userbuffers config, as a file
                files = ((UB_FILE, ub_yaml(space.tp_comm_overlap_cfg)),)
                words += ["--tp-comm-overlap-cfg",
                          UB_FILE if folder is None else os.path.join(str(folder), UB_FILE)]
    words += ["--world-size", str(gpus), "--seq-length", str(space.seq_length),
              "--micro-batch-size", str(b), "--global-batch-size", str(B)]
    words += precision_flags(space.precision, space.fp8_recipe)
    words += ["--optimizer", "sgd" if space.optimizer == "sgd" else "adam"]
    words += sharding_flags(row["sharding"], space.fsdp_double_buffer)
    words += dispatcher_flags(space)
    words += recompute_flags(row["recompute"])
    rate = _MEGATRON_DROPOUT if space.dropout else "0.0"
    words += ["--hidden-dropout", rate, "--attention-dropout", rate]
    if not space.flash_attention:
        words += ["--attention-backend", "unfused"]
    words += megatron_overlaps(_overlaps(space, row), row["sharding"])
    words += megatron_held(space, row) if held else []   # the job's own settings
    lines, i = [], 0
    while i < len(words):            # one argument (and its values) per line
        j = i + 1
        while j < len(words) and not words[j].startswith("--"):
            j += 1
        lines.append(shlex.join(words[i:j]))
        i = j
    host = _host(space)
    if row["sharding"] == "ddp":
        # Megatron-LM runs plain DDP without --use-distributed-optimizer, but memsym reads a
        # MODEL's arguments over memsym.job.DEFAULTS (the distributed optimizer, as the
        # recipes launch): the read-back says ddp in memsym's own option
        host += ("--sharding", "ddp")
    if space.precision == "fp32":
        # likewise fp32 is Megatron's default (no --bf16/--fp16), memsym's is bf16
        host += ("--precision", "fp32")
    return Emitted("megatron", "\n".join(lines) + "\n", tuple(words), host, gpus,
                   space.seq_length, files, script=megatron_script(space.arch))


# ---------------------------------------------------------------------------------------------
# torchtitan
# ---------------------------------------------------------------------------------------------
def _toml_value(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(map(_toml_value, v)) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return json.dumps(str(v))        # a TOML basic string is a JSON string for these values


def _torchtitan(row, space, gpus, held=True) -> Emitted:
    b, m, B = _batch(row, space)
    t, p, d, v = row["t"], row["p"], row["d"], row["v"]
    if row["sharding"] not in ("fsdp", "ddp"):
        raise NotExpressible(f"sharding {row['sharding']}: torchtitan shards with FSDP2 or "
                             "replicates")
    if row["sharding"] == "fsdp" and d == 1:
        raise NotExpressible("sharding fsdp over d = 1: data_parallel_shard_degree 1 reads back "
                             "as plain replicas (ddp)")
    if bool(row["sequence_parallel"]) != (t > 1):
        raise NotExpressible("torchtitan's tensor parallelism always shards the sequence: "
                             "sequence parallelism on exactly when t > 1")
    par = {"data_parallel_replicate_degree": d if row["sharding"] == "ddp" else 1,
           "data_parallel_shard_degree": d if row["sharding"] == "fsdp" else 1,
           "tensor_parallel_degree": t, "pipeline_parallel_degree": p,
           "context_parallel_degree": row["c"]}
    t_e = row.get("t_e") or t
    if t_e != t and (row["e"] == 1 or t_e != 1):
        # without EP the experts take the TP mesh (llama4/infra/parallelize.py:561-563)
        raise NotExpressible(f"t_e = {t_e}: torchtitan v0.2.2 splits the experts over t_e = t, "
                             "or t_e = 1 with e > 1 (parallel_dims.py:58-59)")
    if row["e"] > 1:
        # the experts' TP is torchtitan v0.2.2's etp (parallel_dims.py:59 takes etp = tp or
        # 1), which memsym's reader reads back; its expert mesh is (pp, dp_replicate, efsdp,
        # ep, etp) with efsdp = dp_shard * cp * tp // (etp * ep) (parallel_dims.py:138,
        # 154-157), so EP borrows from the sharded data, context and (etp = 1) TP ranks only
        shard = d if row["sharding"] == "fsdp" else 1
        if (shard * row["c"] * t) % (row["e"] * t_e):
            raise NotExpressible(f"e = {row['e']} over data_parallel_shard_degree {shard} x "
                                 f"context_parallel_degree {row['c']}: torchtitan's expert "
                                 "parallelism borrows from those ranks only (efsdp = dp_shard "
                                 f"x cp x tp / (ep x etp), etp = {t_e})")
        par["expert_parallel_degree"] = row["e"]
        par["expert_tensor_parallel_degree"] = t_e
    L = space.arch.num_layers
    if p > 1:
        single, looped = _TORCHTITAN_SCHEDULES[space.schedule or "1f1b"]
        par["pipeline_parallel_schedule"] = single if v == 1 else looped
        if v > 2:
            n = torchtitan_layers_per_stage(L, p, v)
            if n is None:
                raise NotExpressible(f"v = {v}: no pipeline_parallel_layers_per_stage gives "
                                     f"{v} stages per rank of {L} layers")
            par["pipeline_parallel_layers_per_stage"] = n
        par["pipeline_parallel_microbatch_size"] = b
    ends = (row.get("first_stage_layers"), row.get("last_stage_layers"))
    if ends != (None, None) and ends != torchtitan_end_stages(L, p, v)[:2]:
        raise NotExpressible(f"first/last stage layers {ends[0]}/{ends[1]}: torchtitan generates "
                             "its own split (pipeline_parallel_first/last_stage_less_layers)")
    rc = row["recompute"]
    got = recompute_layers(rc)
    if got is not None and got[0] == "every":
        ac = {"mode": "selective", "selective_ac_option": str(got[1])}
    elif rc in ("none", "full"):
        ac = {"mode": rc}
    elif rc == "selective-op":
        ac = {"mode": "selective", "selective_ac_option": "op"}
    else:
        raise NotExpressible(f"recompute {rc}: torchtitan checkpoints per op, every N-th block "
                             "or fully (Megatron's selective and block-N are not its modes)")
    # without PP a rank's step is m micro-batches of b (gradient accumulation); with PP its
    # local batch is split into micro-batches of pipeline_parallel_microbatch_size
    training = {"seq_len": space.seq_length, "local_batch_size": b if p == 1 else b * m,
                "global_batch_size": B, "mixed_precision_param": "bfloat16"}
    sections = torchtitan_held(space) if held else {}    # the job's own settings
    par.update(sections.pop("parallelism", {}))
    sections = {"parallelism": par, "training": training, "activation_checkpoint": ac, **sections}
    lines = []
    for name, keys in sections.items():
        lines += ([""] if lines else []) + [f"[{name}]"]
        lines += [f"{k} = {_toml_value(x)}" for k, x in keys.items()]
    return Emitted("torchtitan", "\n".join(lines) + "\n", (), _host(space), gpus,
                   space.seq_length)


# ---------------------------------------------------------------------------------------------
# DeepSpeed
# ---------------------------------------------------------------------------------------------
def _autotp(row, space) -> dict:
    """The ``tensor_parallel`` section of a DeepSpeed row's t (AutoTP,
    :mod:`memsym.readers.deepspeed_autotp`), or ``{}`` at t = 1; refused where AutoTP does not
    run the row as memsym priced it."""
    t = row["t"]
    if t == 1:
        return {}
    if row["sequence_parallel"]:
        raise NotExpressible(f"t = {t} with sequence parallelism: DeepSpeed AutoTP keeps the "
                             "activations whole on every TP rank (no sequence parallelism)")
    if row["e"] > 1:
        raise NotExpressible(f"t = {t} with e = {row['e']}: memsym does not model AutoEP beside "
                             "AutoTP (its experts unsplit by TP)")
    x = space.arch
    if x.untie_embeddings_and_output_weights and x.vocab_size % t:
        raise NotExpressible(f"t = {t} does not divide the vocabulary ({x.vocab_size}): AutoTP "
                             "splits the output layer unevenly, memsym counts even shards")
    return {"tensor_parallel": {"autotp_size": t}}


def _deepspeed(row, space, gpus, held=True) -> Emitted:
    b, m, B = _batch(row, space)
    split = [f"{k} = {row[k]}" for k in ("p", "v") if row[k] > 1]
    if split:
        raise NotExpressible(f"{', '.join(split)}: {FRAMEWORK['deepspeed'].searched_sizes_reason}")
    autotp = _autotp(row, space)
    stage = _DEEPSPEED_STAGE.get(row["sharding"])
    if stage is None:
        raise NotExpressible(f"sharding {row['sharding']}: DeepSpeed's ZeRO stages are ddp, "
                             "zero1, zero2, zero3")
    if row["recompute"] not in ("none", "full"):
        raise NotExpressible(f"recompute {row['recompute']}: a DeepSpeed job recomputes through "
                             "the model's own gradient checkpointing, every layer or none")
    if row["offload"] != "none" and stage == 0:
        # ZeRO-Offload "is a ZeRO optimization" (DeepSpeed docs/_tutorials/zero-offload.md):
        # stage 0 builds no ZeRO optimizer to offload
        raise NotExpressible(f"offload {row['offload']} with ddp: DeepSpeed offloads through "
                             "a ZeRO stage (1-3), not plain data parallelism")
    zero = {"stage": stage}
    # the overlap the search priced the step time with (memsym.search.launch_overlaps)
    zero["overlap_comm"] = bool(_overlaps(space, row).get("overlap_grad_reduce"))
    zero.update(deepspeed_held(space, zero["overlap_comm"]) if held else {})   # its buckets
    if row["offload"] in ("optimizer", "optimizer+params"):
        zero["offload_optimizer"] = {"device": "cpu"}
    if row["offload"] == "optimizer+params":
        if stage != 3:
            raise NotExpressible("offload optimizer+params: DeepSpeed offloads parameters "
                                 "under ZeRO-3 only")
        zero["offload_param"] = {"device": "cpu"}
    # DeepSpeed's batch rule counts every GPU without an mpu (AUTOTP_BATCH): B t under AutoTP
    cfg = {"train_batch_size": B * row["t"], "train_micro_batch_size_per_gpu": b,
           "gradient_accumulation_steps": m}
    if space.precision in ("bf16", "fp16"):
        cfg[space.precision] = {"enabled": True}
    cfg["zero_optimization"] = zero
    cfg.update({**autotp, **ulysses_section(row)})     # Ulysses: its rule counts W / c ranks
    host, notes = _host(space), ()   # the model's checkpointing: read back beside the config
    if row["recompute"] == "full":
        host, notes = host + ("--recompute-granularity", "full"), (MODEL_CHECKPOINTING,)
    notes += tuple(n for k, n in (("tensor_parallel", AUTOTP_NOTE),
                                  ("sequence_parallel_size", ULYSSES_NOTE)) if k in cfg)
    if row["e"] > 1:
        # AutoEP (AUTOEP_NOTE): the one config key that splits the experts, what
        # memsym.readers.deepspeed reads back as e
        cfg["expert_parallel"] = {"enabled": True, "autoep_size": row["e"]}
        notes += (AUTOEP_NOTE,)
    return Emitted("deepspeed", json.dumps(cfg, indent=2) + "\n", (), host, gpus,
                   space.seq_length, notes=notes)
