"""What ``scripts/training/run_recipe.py`` does to a *performance (benchmark) recipe* after
loading it and applying the command line's overrides (Megatron-Bridge ``067f987df0``), so that
memsym reads the job Bridge runs.

``main()`` (run_recipe.py:455-500), for a recipe ``resolved_benchmark_recipe_metadata`` names a
benchmark (recipe_metadata.py:175-179; memsym: a recipe read from ``perf_recipes/``):

1. ``validate_benchmark_recipe_scope`` (recipe_metadata.py:228-256) refuses ``--dataset``, a
   mode of another task, ``--mode dora`` on a LoRA recipe, and a forward step other than the
   recipe's (the text recipes': ``llm_step``, which ``gpt_step`` and ``dsv4_step`` match,
   recipe_metadata.py:67 and 202-206);
2. ``_apply_benchmark_dataset_defaults`` (run_recipe.py:397-415): mock data for SFT/LoRA (a note
   of :func:`memsym.readers.bridge.bridge_job_options`);
3. the overrides, then ``_apply_benchmark_runtime_defaults`` (run_recipe.py:377-394): a bf16
   recipe (the precision in its name, recipe_metadata.py:40-45) with the Adam optimizer gets
   ``optimizer.use_precision_aware_optimizer = True`` unless an override names ``optimizer`` or
   that field;
4. ``_apply_benchmark_weak_scaling`` (run_recipe.py:343-374): the data-parallel size of the
   launcher's world size (``_benchmark_world_size``, run_recipe.py:307-330: ``WORLD_SIZE``, else
   the GPUs in the name under ``--dry-run``) with the overridden TP/PP/CP/EP differs from the
   recipe's own (its topology at the name's GPU count): the global batch becomes
   ``GBS * DP / DP_recipe`` (``weak_scaled_global_batch_size``, scripts/common/
   benchmark_parallelism.py:126-141), unless an override names ``train.global_batch_size``
   (or ``train``).  ``data_parallel_size`` (benchmark_parallelism.py:67-123) refuses a world
   size that TP*PP*CP or ETP*EP*PP does not divide.

Library recipes are read as they are.  ``apply_determinism`` (``--deterministic``,
scripts/training/recipe_runner.py:315-321), before the overrides and for every recipe, is
:func:`determinism`.
"""

from __future__ import annotations

import re

from ..errors import InvalidValueError

__all__ = ["BENCHMARK_NAME", "check_benchmark_word", "benchmark_defaults", "determinism",
           "mock_dataset"]

#: recipe_metadata.py:40-45 ``BENCHMARK_RECIPE_PATTERN``: a benchmark name's GPUs and precision.
BENCHMARK_NAME = re.compile(
    r"_(?P<task>pretrain|sft|peft)_(?P<num_gpus>[1-9][0-9]*)gpu_(?P<hardware>[a-z0-9]+)_"
    r"(?P<precision>bf16|fp8cs|fp8ds|fp8mx|fp8sc|nvfp4)(?:_[a-z0-9_]+)?_config$")

#: recipe_metadata.py:67 ``TEXT_FORWARD_STEPS``: the steps a text recipe's ``llm_step`` matches.
_TEXT_STEPS = frozenset({"dsv4_step", "gpt_step", "llm_step"})


def determinism(values: dict) -> list:
    """run_recipe.py ``--deterministic`` (recipe_runner.py:315-321, before the overrides, any
    recipe): ``apply_determinism_overrides`` (src/megatron/bridge/recipes/utils/
    determinism_utils.py:20-47) sets ``model.cross_entropy_loss_fusion = False`` and
    ``comm_overlap.tp_comm_overlap = False`` (a recipe without comm_overlap has none to turn
    off); ``model.deterministic_mode``'s kernel choices are not counted.  Returns the note.

    >>> v = {"comm_overlap.tp_comm_overlap": True}
    >>> _ = determinism(v); v["model.cross_entropy_loss_fusion"], v["comm_overlap.tp_comm_overlap"]
    (False, False)
    """
    values["model.cross_entropy_loss_fusion"] = False
    values["comm_overlap.tp_comm_overlap"] = False
    return ["--deterministic: run_recipe.py turns off the fused cross-entropy and TP "
            "communication overlap (recipes/utils/determinism_utils.py, recipe_runner.py:"
            "315-321); deterministic_mode's kernel choices are not counted"]


def check_benchmark_word(full: str, word: str) -> None:
    """Refuse, in one line, run_recipe.py's ``--dataset`` or a foreign ``--step-func`` given
    with the benchmark recipe ``full`` (``validate_benchmark_recipe_scope``,
    recipe_metadata.py:246-256).

    >>> check_benchmark_word("llama3_8b_pretrain_8gpu_h100_bf16_config", "--step-func=gpt_step")
    """
    name, _, value = word.partition("=")
    if name == "--dataset":
        raise InvalidValueError(f"--dataset {value[:30]}: {full} is a performance recipe, which "
                                "owns its dataset (run_recipe.py refuses --dataset, "
                                "recipe_metadata.py:251-255)")
    if name in ("--step-func", "--step_func") and value.lower() not in _TEXT_STEPS:
        raise InvalidValueError(f"--step-func {value[:30]}: {full} is a performance recipe with "
                                "the llm_step forward step (run_recipe.py refuses another, "
                                "recipe_metadata.py:245-250)")


def _explicit(given, field: str) -> bool:
    """run_recipe.py:333-340 ``_config_override_is_explicit``: an override names ``field`` or
    its section."""
    return bool({field, field.split(".", 1)[0]} & set(given))


def _size(values: dict, key: str, default):
    value = values.get(key)
    return default if value is None else value


def _data_parallel(world: int, values: dict, whose: str) -> int:
    """benchmark_parallelism.py:67-123 ``data_parallel_size``: the dense DP degree of ``world``
    GPUs under the topology of ``values`` (``topology_from_config``, :43-57; an unset ETP is
    TP), the grids checked."""
    t = _size(values, "model.tensor_model_parallel_size", 1)
    p = _size(values, "model.pipeline_model_parallel_size", 1)
    c = _size(values, "model.context_parallel_size", 1)
    e = _size(values, "model.expert_model_parallel_size", 1)
    t_e = _size(values, "model.expert_tensor_parallel_size", t)
    bad = {k: v for k, v in (("TP", t), ("PP", p), ("CP", c), ("EP", e), ("ETP", t_e))
           if isinstance(v, bool) or not isinstance(v, int) or v <= 0}
    if bad:
        raise InvalidValueError(f"parallel sizes must be positive integers, got {bad}")
    # the factors spelled as data_parallel_size's own message spells them (:90-102, :108-120)
    if world % (t * p * c):
        raise InvalidValueError(f"{whose}: {world} GPUs is not divisible by TP * PP * CP "
                                f"({t} * {p} * {c} = {t * p * c}), which run_recipe.py refuses "
                                "for a benchmark recipe (scripts/common/benchmark_parallelism.py:"
                                "86-104)")
    if world % (t_e * e * p):
        raise InvalidValueError(f"{whose}: {world} GPUs is not divisible by ETP * EP * PP "
                                f"({t_e} * {e} * {p} = {t_e * e * p}), which run_recipe.py refuses "
                                "for a benchmark recipe (scripts/common/benchmark_parallelism.py:"
                                "104-121)")
    return world // (t * p * c)


def mock_dataset(values: dict) -> list:
    """run_recipe.py's dataset of a performance SFT or LoRA recipe: mock sequences of
    ``model.seq_length``, not the recipe's packed dataset (``_apply_benchmark_dataset_defaults``,
    run_recipe.py:397-415, before the overrides): ``values``' packing switched off in place;
    the note saying so.

    >>> v = {"dataset.enable_offline_packing": True}
    >>> len(mock_dataset(v)), v["dataset.enable_offline_packing"]
    (1, False)
    """
    if not values.get("dataset.enable_offline_packing"):
        return []
    values["dataset.enable_offline_packing"] = False
    return ["run_recipe.py runs a performance SFT/LoRA recipe on mock sequences of "
            "model.seq_length (run_recipe.py:397-415), not its packed dataset"]


def benchmark_defaults(full: str, recipe_values: dict, values: dict, given, world: int) -> list:
    """Apply to ``values`` (the benchmark recipe ``full``'s fields, overrides applied) what
    run_recipe.py's main() does after the overrides (run_recipe.py:484-495), in its order;
    return the notes of what changed.

    Parameters
    ----------
    full : str
        The recipe's name (its GPU count and precision, recipe_metadata.py:40-45).
    recipe_values : dict
        The recipe's own fields, before the overrides (its canonical topology and batch,
        run_recipe.py:477-480).
    values : dict
        The fields with the overrides applied; changed in place.
    given : iterable of str
        The keys the overrides name (run_recipe.py's ``cli_overrides``).
    world : int
        W [GPUs]: the launcher's world size, else the name's (``--dry-run``).

    Returns
    -------
    list of str
        A note for each value changed.

    Notes
    -----
    Weak scaling keeps the samples per data-parallel rank (benchmark_parallelism.py:126-141):

    .. math:: B' = B \\, D / D_0, \\qquad D = W / (t p c), \\quad D_0 = W_0 / (t_0 p_0 c_0)

    with B [samples] the recipe's global batch, W_0 [GPUs] its name's GPU count.

    References
    ----------
    Megatron-Bridge 067f987df0 scripts/training/run_recipe.py:343-394.

    Examples
    --------
    >>> v = {"model.tensor_model_parallel_size": 2, "train.global_batch_size": 128}
    >>> notes = benchmark_defaults("llama3_8b_pretrain_8gpu_h100_bf16_config",
    ...     {"model.tensor_model_parallel_size": 1, "train.global_batch_size": 128}, v,
    ...     ["model.tensor_model_parallel_size"], 8)
    >>> v["train.global_batch_size"], v["optimizer.use_precision_aware_optimizer"]
    (64, True)
    """
    meta = BENCHMARK_NAME.search(full)
    notes = []
    if meta is None:     # no benchmark metadata: run_recipe.py treats it as a library recipe
        return notes
    # run_recipe.py:377-394: the flat runner's default, bf16 + Adam, unless the optimizer is given
    if not _explicit(given, "optimizer.use_precision_aware_optimizer") \
            and meta.group("precision") == "bf16" \
            and values.get("optimizer.optimizer", "adam") == "adam" \
            and values.get("optimizer.use_precision_aware_optimizer") is not True:
        values["optimizer.use_precision_aware_optimizer"] = True
        notes.append("run_recipe.py turns on the precision-aware optimizer for bf16 benchmark "
                     "recipes with Adam (run_recipe.py:377-394; optimizer."
                     "use_precision_aware_optimizer=false keeps it off)")
    # run_recipe.py:343-374: both grids are checked before the explicit-batch test; the
    # recipe's own topology is taken before the overrides (run_recipe.py:481-484, 354), so
    # a recipe whose layout does not fit its name's GPUs runs under no override or world size
    dp0 = _data_parallel(int(meta.group("num_gpus")), recipe_values,
                         f"{full} cannot run under run_recipe.py: its own layout (taken before "
                         "any override, run_recipe.py:481-484, 354) at the GPUs its name gives")
    dp = _data_parallel(world, values, "the layout with the overrides")
    if _explicit(given, "train.global_batch_size") or dp == dp0:
        return notes
    gbs0 = _size(recipe_values, "train.global_batch_size", 1)
    if (gbs0 * dp) % dp0:
        raise InvalidValueError(f"weak scaling global batch {gbs0} from DP {dp0} to DP {dp} gives "
                                "no whole batch: give train.global_batch_size (run_recipe.py "
                                "refuses it, benchmark_parallelism.py:135-140)")
    values["train.global_batch_size"] = gbs0 * dp // dp0
    notes.append(f"global batch {gbs0} -> {gbs0 * dp // dp0}: run_recipe.py weak-scales a "
                 f"benchmark recipe's batch to keep samples per DP rank (DP {dp0} -> {dp}; "
                 "run_recipe.py:343-374; give train.global_batch_size to keep it)")
    return notes
