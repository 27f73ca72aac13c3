"""Which Megatron-Bridge recipe a name names, as ``scripts/training/run_recipe.py --recipe
NAME`` resolves it (Megatron-Bridge ``067f987df0``).

Bridge has two recipe packages: the library (``recipes/<family>/<system>/<model>.py``) and the
performance recipes (``perf_recipes/<family>/<system>/<model>.py``), and a few function names
are exported by both (``llama3_70b_sft_32gpu_h100_bf16_config``: the library's at
recipes/llama/h100/llama3.py:1762, the perf one at perf_recipes/llama/h100/llama3.py:290).
run_recipe.py's ``load_recipe`` (scripts/training/recipe_runner.py:234-243) takes the
*performance* recipe for any name its family's ``perf_recipes/<family>/__init__.py`` exports
(``resolved_benchmark_recipe_metadata``, recipe_metadata.py:164-179; the shared names are
listed at recipe_metadata.py:49-64, "Bare recipe lookup selects the benchmark definition; each
library workload remains available through its generic library alias"), and reaches the
library one only through that alias (``llama3_70b_sft_config``, the ``as`` import of
recipes/llama/llama3.py:56, exported by recipes/llama/__init__.py:34 and star-imported by
recipes/__init__.py, found by ``find_library_recipe``, recipe_runner.py:191-214).

So here, as there: the bare shared name is the performance recipe; Bridge's alias (memsym's
:data:`ALIASES`, generated from the library's ``as`` imports) stays the library recipe, which
is also named by its module path (``recipes.llama.h100.llama3.llama3_70b_sft_32gpu_h100_bf16_
config``, the only name of a library recipe that has no alias); the perf recipe's module path
(``perf_recipes.llama.h100.llama3.llama3_70b_sft_32gpu_h100_bf16_config``, the name the
generated table keys it by) names it too.
"""

from __future__ import annotations

from ..errors import InvalidValueError, UnknownNameError
from ._bridge_finetune import FINETUNE_RECIPES
from ._bridge_recipes import ALIASES as _GENERATED_ALIASES, PERF_RECIPES, RECIPES

__all__ = ["RECIPE_TABLE", "ALIASES", "SHARED", "recipe_row", "is_recipe_name",
           "shared_name_notes", "recipe_for_source"]

_SRC = "src/megatron/bridge/"


def _module_name(source: str) -> str:
    """A row's ``file:line function`` as its module path and function name.

    >>> _module_name("src/megatron/bridge/recipes/llama/h100/llama3.py:1762 f_config")
    'recipes.llama.h100.llama3.f_config'
    """
    path, _, name = source.partition(" ")
    return path.split(":")[0][len(_SRC):-len(".py")].replace("/", ".") + "." + name


_LIBRARY = {**RECIPES, **FINETUNE_RECIPES}

#: bare name exported by both packages -> (its perf recipe's module-path name, its library
#: recipe's module-path name).  The generator keys such a perf recipe by its module path
#: (tools/bridge_recipes.py ``perf_rows``).
SHARED = {key.rsplit(".", 1)[1]: (key, _module_name(_LIBRARY[key.rsplit(".", 1)[1]]["source"]))
          for key in PERF_RECIPES if "." in key}

#: Bridge's generic library aliases -> the recipe they run; a shared name's alias runs the
#: library recipe (recipe_runner.py:245, never the perf one), so it names the module path.
ALIASES = {alias: SHARED[full][1] if full in SHARED else full
           for alias, full in _GENERATED_ALIASES.items()}

#: Every recipe by the names memsym reads: the library's and the perf recipes' functions, a
#: shared bare name as run_recipe.py reads it (the perf one), both module paths of a shared name.
RECIPE_TABLE = {**PERF_RECIPES, **_LIBRARY}
RECIPE_TABLE.update({lib: _LIBRARY[bare] for bare, (_, lib) in SHARED.items()})
RECIPE_TABLE.update({bare: PERF_RECIPES[perf] for bare, (perf, _) in SHARED.items()})


def recipe_row(name: str):
    """``(the name read, its row)`` of a recipe name or alias; a vision-language, audio,
    omni-modal or diffusion recipe, or a name of none, refused in one line.

    >>> recipe_row("llama3_70b_sft_32gpu_h100_bf16_config")[1]["source"][:45]
    'src/megatron/bridge/perf_recipes/llama/h100/l'
    >>> recipe_row("llama3_70b_sft_config")[0]
    'recipes.llama.h100.llama3.llama3_70b_sft_32gpu_h100_bf16_config'
    """
    full = ALIASES.get(name, name)
    row = RECIPE_TABLE.get(full)
    if row is None and ("_vl_" in f"_{full}_" or "vlm" in full or "_vl" in full
                        or "_audio_" in full or "_omni_" in full
                        or full.startswith(("flux_", "wan_", "glm_45v_"))):
        # Bridge's vision-language recipes (_sft_common_vlm, recipes/common.py:346), and the
        # audio, omni-modal and diffusion ones (tools/bridge_recipes.py OTHER_MODALITIES)
        raise InvalidValueError(f"{name[:60]}: Bridge's vision-language, audio, omni-modal and "
                                "diffusion recipes are not modelled (memsym reads the language "
                                "models' recipes)")
    if row is None:
        # a private function (Bridge's _nemotron_3_super_pretrain_64gpu_h100_bf16_config,
        # reached by its alias nemotron_3_super_pretrain_config) is no name to offer
        raise UnknownNameError("Megatron-Bridge recipe", name,
                               sorted(n for n in set(RECIPE_TABLE) | set(ALIASES)
                                      if not n.startswith("_")))
    return full, row


def is_recipe_name(name: str) -> bool:
    """Whether ``name`` names a Megatron-Bridge recipe memsym reads (or one of its aliases)."""
    return ALIASES.get(name, name) in RECIPE_TABLE


def _aliases_of(library: str) -> str:
    names = sorted(a for a, full in ALIASES.items() if full == library)
    return f" (Bridge's alias {', '.join(names)})" if names else \
        " (Bridge exports no alias for it: run_recipe.py cannot reach it by name)"


def shared_name_notes(recipe: str) -> list:
    """The note of a reading of a name both packages export: which recipe was read, and how
    the other one is named.

    >>> shared_name_notes("llama3_8b_pretrain_config")
    []
    >>> note = shared_name_notes("qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config")[0]
    >>> "the performance recipe" in note and "recipes.qwen.h100.qwen3_moe." in note
    True
    """
    for bare, (perf, library) in SHARED.items():
        perf_file = PERF_RECIPES[perf]["source"].split(":")[0][len(_SRC):]
        library_file = _LIBRARY[bare]["source"].split(":")[0][len(_SRC):]
        if recipe in (bare, perf):
            return [f"{bare} is exported by both recipes/ and perf_recipes/: read as "
                    f"run_recipe.py --recipe reads it, the performance recipe ({perf_file}; "
                    f"recipe_runner.py:234-243); the library recipe ({library_file}) is "
                    f"--bridge-recipe {library}" + _aliases_of(library)]
        if recipe == library:
            return [f"read as the library recipe ({library_file}); run_recipe.py --recipe "
                    f"{bare} runs the performance recipe ({perf_file}), which memsym's "
                    f"--bridge-recipe {bare} reads"]
    return []


def recipe_for_source(recipe: str) -> str:
    """The name memsym reads a recipe function by, from its ``path:function`` (as a measured
    run's ``recipe`` gives it): the bare name unless the other package's recipe owns it.

    >>> recipe_for_source("src/megatron/bridge/recipes/gpt_oss/h100/gpt_oss.py:"
    ...                   "gpt_oss_120b_pretrain_64gpu_h100_bf16_config (line 162)")
    'recipes.gpt_oss.h100.gpt_oss.gpt_oss_120b_pretrain_64gpu_h100_bf16_config'
    >>> recipe_for_source("src/megatron/bridge/perf_recipes/gpt_oss/h100/gpt_oss.py:"
    ...                   "gpt_oss_120b_pretrain_64gpu_h100_bf16_config (line 25)")
    'gpt_oss_120b_pretrain_64gpu_h100_bf16_config'
    """
    path, _, rest = recipe.partition(":")
    name = rest.split()[0] if rest.split() else ""
    if name in SHARED and not path.startswith(_SRC + "perf_recipes/"):
        return SHARED[name][1]
    return name
