r"""What a job's framework decides for it: the layout as the framework lays it out, and
whether dropout masks are kept.

:func:`framework_layout` applies torchtitan's own pipeline split and sequence-parallel TP;
:func:`resolve_dropout` reads the framework, the model's recipe and its config.json.
:func:`memsym.job.job` calls them once.

References
----------
.. [torchtitan] torchtitan/distributed/pipeline_parallel.py (generate_llm_fqn_per_model_part);
   torchtitan/models/llama3/infra/parallelize.py (apply_tp).
"""

from __future__ import annotations

import dataclasses

from .errors import InvalidValueError
from .frameworks import framework as framework_record
from .model import preset_dropout, recipe
from .model.torchtitan_stages import torchtitan_end_stages
from .job_record import Layout, Training

__all__ = ["framework_layout", "framework_architecture", "framework_dropout", "resolve_dropout",
           "dropout_kept"]


def framework_layout(x, layout: Layout, training: Training) -> tuple:
    """The layout as the job's framework lays it out, and a note for each change.

    torchtitan splits the layers over its pipeline stages itself
    (:func:`memsym.model.torchtitan_stages.torchtitan_rank_layers`) unless told the split: memsym takes
    that split as the first and last stage sizes; its tensor parallelism is always sequence
    parallel (``apply_tp``).  A split whose middle ranks differ is
    refused (memsym's stages between the ends hold equal layers); give the split as
    ``first_stage_layers`` / ``last_stage_layers``.

    Examples
    --------
    >>> from memsym.model import preset
    >>> lay, notes = framework_layout(preset("llama3-405b"), Layout(t=8, p=8),
    ...                               Training(framework="torchtitan"))
    >>> lay.first_stage_layers, lay.last_stage_layers
    (15, 15)
    """
    notes, fw = [], framework_record(training.framework)
    if fw.tp_without_sequence_parallel and layout.t > 1 and layout.sequence_parallel:
        raise InvalidValueError(f"sequence_parallel with t = {layout.t}: {fw.title}'s tensor "
                                "parallelism (AutoTP) keeps the activations whole on every TP "
                                "rank; drop --sequence-parallel")
    if fw.tp_sequence_parallel and layout.t > 1 and not layout.sequence_parallel:
        # apply_tp: SequenceParallel norms and Shard(1) block outputs; no switch turns it off
        layout = dataclasses.replace(layout, sequence_parallel=True)
        notes.append("torchtitan's tensor parallelism is sequence parallel (apply_tp shards the "
                     "norms and the block outputs over the sequence): counted with it")
    if (not fw.torch_pipelining or layout.p == 1
            or layout.first_stage_layers is not None or layout.last_stage_layers is not None):
        return layout, notes

    # the V placement's split (stages r and 2p-1-r on rank r) needs its 2 stages per rank;
    # other v are refused by rule v-placement after this
    style = "v" if training.pipeline.stage_placement == "v" and layout.v == 2 else "loop"
    first, last, ranks = torchtitan_end_stages(x.num_layers, layout.p, layout.v or 1,
                                               style=style)
    if first is None:
        return layout, notes
    return (dataclasses.replace(layout, first_stage_layers=first, last_stage_layers=last),
            notes + [f"torchtitan's pipeline split: {ranks} layers per rank (generate_llm_fqn_"
                     "per_model_part, the embedding and the output counted as one layer each)"])


def framework_architecture(arch, framework: str):
    """The architecture as the framework builds it: a framework that runs the transformers
    model's own code (``hf_model_code``: DeepSpeed) keeps its vocabulary unpadded
    (``make_vocab_size_divisible_by = 1``: ``nn.Embedding(config.vocab_size, ...)``, and
    AutoTP splits the output layer's own rows, DeepSpeed edaa722126
    ``module_inject/tp_shard.py:47-93``); elsewhere ``arch`` as it is.

    Examples
    --------
    >>> from memsym.model import preset
    >>> framework_architecture(preset("gpt3-175b"), "deepspeed").make_vocab_size_divisible_by
    1
    """
    if not framework_record(framework).hf_model_code or arch.make_vocab_size_divisible_by == 1:
        return arch
    return dataclasses.replace(arch, make_vocab_size_divisible_by=1)


def framework_dropout(framework: str, dropout=None, arch=None):
    """Whether dropout masks are kept under ``framework`` when ``dropout`` is asked for (None:
    not asked), and why, as ``(dropout, reason)`` (reason None: nothing to say).

    * a framework whose models build no dropout (``Framework.dropout_layers`` False in
      :data:`memsym.frameworks.FRAMEWORK`: torchtitan's): off, and asking for it is refused;
    * one that runs the model's own code (``hf_model_code``: DeepSpeed): a ``config.json``'s
      model (``arch.extra["hf_dropout"]``, :func:`memsym.model.from_hf_config`), or a preset's
      (its transformers class, :func:`memsym.model.preset_dropout`), keeps masks if one of
      the probabilities its modeling code applies is > 0 (Llama-style models:
      ``attention_dropout`` 0.0, none); a model with neither, Megatron's 0.1, said;
    * elsewhere what was asked, else None (the job's default, Megatron's 0.1 dropouts).

    Examples
    --------
    >>> framework_dropout("torchtitan")[0], framework_dropout("megatron", False)
    (False, (False, None))
    >>> framework_dropout("torchtitan", False)
    (False, None)
    """
    fw = framework_record(framework)
    if not fw.dropout_layers:
        if dropout:
            raise InvalidValueError(f"{fw.title}'s models have no dropout layers: dropout must "
                                    f"be off with framework {fw.name} (--hidden-dropout 0 "
                                    "--attention-dropout 0, or leave them out)")
        return False, (None if dropout is not None
                       else f"dropout off: {fw.title}'s models have no dropout layers")
    # a config.json's own, else a preset's class's (by name: a resized preset keeps its class)
    # (an empty reading is a model with no dropout at all, ERNIE-4.5's: not "unknown")
    probs = None if arch is None else (arch.extra or {}).get("hf_dropout")
    if probs is None and arch is not None:
        probs = preset_dropout(arch.name)
    if dropout is None and fw.hf_model_code and probs is not None:
        on = any(p_ > 0 for p_ in probs.values())
        shown = ", ".join(f"{k} {v:g}" for k, v in probs.items())
        return on, (f"dropout {'on' if on else 'off'}: {fw.title} runs the transformers model, "
                    + (f"whose config.json sets {shown}" if shown else
                       "whose modeling code has no dropout"))
    if dropout is None and fw.hf_model_code:
        return None, ("dropout masks counted as Megatron's 0.1 defaults: DeepSpeed runs the "
                      "model's own code (give the model as its config.json to take its "
                      "dropouts, or --hidden-dropout 0 --attention-dropout 0)")
    return dropout, None


def resolve_dropout(framework: str, dropout=None, model=None, arch=None) -> tuple:
    """Whether dropout masks are kept, and why: ``(bool, reason or None)``.

    What was asked (``dropout``) under the framework's rules (:func:`framework_dropout`);
    when nothing was asked, a preset's recipe under Megatron (:func:`memsym.model.recipe`),
    else Megatron-LM's 0.1 dropouts.  ``model`` is the name or preset the job was built from,
    ``arch`` its architecture.

    Examples
    --------
    >>> resolve_dropout("megatron", None, "llama3-70b")[0], resolve_dropout("megatron")
    (False, (True, None))
    >>> resolve_dropout("megatron", True, "llama3-70b")
    (True, None)
    """
    kept, why = framework_dropout(framework, dropout, arch)
    if kept is None and framework_record(framework).recipe_defaults:
        options, source = recipe(model)
        if "dropout" in options:
            name = getattr(model, "name", model)
            return options["dropout"], f"{name}'s recipe, {source}"
    return (True if kept is None else kept), why


def dropout_kept(training) -> bool:
    """``training.dropout`` with None read as Megatron-LM's default (masks kept): for code
    given a Training that no :func:`job` resolved."""
    return True if training.memory.dropout is None else training.memory.dropout
