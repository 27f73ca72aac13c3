r"""Megatron-Bridge's pretrain recipes as data, ``memsym/readers/_bridge_recipes.py``, read from
the recipe functions' source with :mod:`ast` (never imported, never executed).

``python -m tools.bridge_recipes [--source GIT_DIR] [--check]`` (from the checkout's root) reads
the files of NVIDIA-NeMo/Megatron-Bridge at :data:`COMMIT` from a git directory (default: the
mirror ``/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo``) with ``git show COMMIT:path`` and
writes one row per recipe function of every language-model family (:func:`recipe_files`: the
families of :data:`OTHER_MODALITIES` left out), whatever its model (memsym's preset for it, else
its checkpoint read from the Hub, :mod:`memsym.readers.bridge_models`): the value each field memsym reads
(:data:`memsym.readers.bridge.FIELDS`) has when the function returns, in statement order:

* ``cfg = _pretrain_common()``: the keyword values of the ``ConfigContainer(...)`` built in
  ``recipes/common.py:_pretrain_common``, its optimizer the literal keywords of the
  ``OptimizerConfig(...)`` its helper builds (``recipes/utils/optimizer_utils.py``, the
  helper's parameters bound to the call's literal keywords, else their defaults);
* ``cfg = other_recipe()`` / ``cfg = _helper("literal")``: that function's values (its
  parameters bound to the literal arguments);
* ``cfg.section.field = LITERAL`` (and ``cfg.section = Config(field=LITERAL, ...)``): the
  literal; ``torch.bfloat16`` is ``"bfloat16"``; a module-level string constant is its value;
* ``cfg.model = AutoBridge.from_hf_pretrained("ID")...``: the row's ``hf_model``;
* ``cfg.model = HybridModelProvider(field=LITERAL, ...)`` (:data:`INLINE_PROVIDERS`): its
  keywords; the row's ``hf_model`` is the recipe's ``cfg.tokenizer.tokenizer_model`` (or its
  ``cfg.model.hf_model_id``); ``set_cuda_graph_modules(cfg.model, [...])``: the modules;
* ``cfg.mixed_precision = bf16_mixed()`` / ``get_mixed_precision_config(NAME)``: the recipe's
  name; ``MixedPrecisionConfig(...)``: its keywords;
* any other statement (a call, an ``if``, a computed value) is listed in the row's ``computed``
  with its line: :mod:`memsym.readers.bridge` transcribes the ones that matter by hand.

It also writes ``PERF_RECIPES``: one row per performance recipe function
``*_pretrain_*_config``, ``*_sft_*_config`` and ``*_peft_*_config`` of
``perf_recipes/<family>/<system>/<model>.py`` (the families of :data:`PERF_FAMILIES`), read by
:class:`_Perf`, a small reader of the statements (never an import, never a call):
``cfg = base()`` starts from the base recipe's values (found through the imports:
``perf_recipes/<family>/common.py`` and the legacy names of ``recipes/<family>/<model>.py``; a
fine-tuning base such as ``llama3_70b_peft_config(peft_scheme="lora")`` is its row, called with
its defaults, another argument value not read; ``_sft_common()`` and ``_peft_common()`` are
their values); ``cfg.model = AutoBridge.from_hf_pretrained("ID")...`` makes ``ID`` the row's
model; ``cfg.peft.target_modules = [...]`` sets the LoRA's field; ``_perf_precision("fp8_cs")`` and the other
helpers of ``perf_recipes/_common.py`` and ``perf_recipes/<family>/common.py`` (and the
recipes' own, such as ``set_deepseek_v3_pipeline_model_parallel_layout``) are read the same way,
their parameters bound; an ``if`` whose condition is literal (``compute_dtype == "bf16"``,
``not isinstance(cfg.mixed_precision, str)``, a field the recipe set) takes its branch; a
precision recipe call (``bf16_with_fp8_current_scaling_mixed()``) is its name and a config
class (``CommOverlapConfig(...)``) its literal keywords.  What it cannot read (a condition on a
field no recipe set, an unknown call) is listed in the row's ``computed`` with its file:line.
A perf recipe named like a library recipe keeps its module path as its key here
(``perf_recipes.qwen.h100.qwen3_moe.qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config``);
:mod:`memsym.readers.bridge_names` gives it the bare name, as run_recipe.py does, and the
library recipe its module path.

It also writes ``SECTION_FIELDS``: the dataclass field names of each ConfigContainer section
(:data:`SECTION_CLASSES`, with their bases followed through the imports into Megatron-LM at
:data:`MCORE_COMMIT`, the commit Bridge pins as ``3rdparty/Megatron-LM``), so that an override
naming no field is refused; and it checks that each field memsym reads is one.

The rows are written compact (:func:`_compact`, read back by
:func:`memsym.readers.bridge_rows.expand_rows`): each the difference from the earlier row of its
table it differs least from, each unread statement once (``COMPUTED``), one row a line, so that
the 451 pretrain and performance recipes take about 250 kB and 550 lines (written out in full,
well over a megabyte and the package's 600-line limit).

``--check`` writes nothing and exits 1 when the file on disk differs from what would be written.
"""

from __future__ import annotations

import argparse
import ast
import pprint
import re
import subprocess
import sys
from pathlib import Path

COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"
DEFAULT_SOURCE = "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"
OUT = Path(__file__).resolve().parent.parent / "memsym" / "readers" / "_bridge_recipes.py"
_BASE = "src/megatron/bridge/"
COMMON = _BASE + "recipes/common.py"
MIXED_PRECISION = _BASE + "training/mixed_precision.py"
#: The optimizer helpers ``_pretrain_common`` builds its optimizer config with.
OPTIMIZER_UTILS = _BASE + "recipes/utils/optimizer_utils.py"
#: Module constants the recipes import (``DEFAULT_NULL_TOKENIZER_VOCAB_SIZE``).
IMPORTED_CONSTANTS = (_BASE + "recipes/utils/tokenizer_utils.py",)
#: The recipe families (``recipes/<family>/``) not read: vision-language, audio, omni-modal and
#: diffusion models, whose encoders and image or video towers memsym does not count (their
#: recipes are refused by name, :data:`memsym.readers.bridge`).
OTHER_MODALITIES = ("flux", "wan", "gemma3_vl", "gemma4_vl", "glm_vl", "kimi_vl", "nemotron_omni",
                    "nemotron_vl", "qwen2_audio", "qwen_omni", "qwen_vl")


def recipe_files(source: str) -> tuple:
    """``(recipe files, alias files)`` of every language-model family at COMMIT:
    ``recipes/<family>/<system>/<model>.py`` (the recipe functions) and
    ``recipes/<family>/<model>.py`` (the legacy names), the families of
    :data:`OTHER_MODALITIES` left out."""
    listing = subprocess.run(["git", "--git-dir", source, "ls-tree", "-r", "--name-only", COMMIT,
                              _BASE + "recipes/"], check=True, capture_output=True,
                             text=True).stdout.split()
    recipes, aliases = [], []
    for path in listing:
        parts = path[len(_BASE + "recipes/"):].split("/")
        if parts[0] in OTHER_MODALITIES + ("utils",) or not parts[-1].endswith(".py") \
                or parts[-1] == "__init__.py":
            continue
        if len(parts) == 3:
            recipes.append("/".join(["recipes"] + parts))
        elif len(parts) == 2:
            aliases.append("/".join(["recipes"] + parts))
    return tuple(recipes), tuple(aliases)


#: Model providers a recipe builds inline (``cfg.model = HybridModelProvider(num_layers=52,
#: ...)``, recipes/nemotronh/h100/nemotron_3_nano.py:78): their literal keywords are the
#: ``model.*`` values, and the row's Hugging Face model is the checkpoint the recipe names as
#: its tokenizer (``cfg.tokenizer.tokenizer_model``), whose architecture the keywords spell.
INLINE_PROVIDERS = ("HybridModelProvider",)
#: Same-file helpers a recipe calls on ``cfg`` with literal arguments whose body is not
#: literal assignments (a branch on the argument, a factory from another module), transcribed
#: from their source at COMMIT: (function, arguments) -> (where, the sections they replace,
#: the fields they set).  ``_apply_kimi_k2_optimizer(cfg, "muon")``
#: (recipes/kimi/h100/kimi_k2.py:54-88, its muon branch 66-75) sets ``cfg.optimizer`` to
#: ``distributed_muon_with_cosine_annealing(...)`` (recipes/utils/optimizer_utils.py:20-97:
#: an OptimizerConfig with optimizer "dist_muon" and the muon_* defaults it passes; it passes
#: no use_distributed_optimizer nor overlap_param_gather, so OptimizerConfig's False stays,
#: Megatron-LM 2a75ac12c5 optimizer_config.py:324, :333), then the
#: dtypes, the gradient reduction and the DDP flags (kimi_k2.py:73-88; mixed_precision is the
#: recipe's MixedPrecisionConfig, not a string, so its grad_reduce_in_fp32 is set too).
HELPER_CALLS = {
    ("_apply_kimi_k2_optimizer", ("muon",)): (
        "recipes/kimi/h100/kimi_k2.py:54-88, recipes/utils/optimizer_utils.py:20-97",
        ("optimizer",),
        {"optimizer.optimizer": "dist_muon", "optimizer.bf16": True, "optimizer.fp16": False,
         "optimizer.muon_momentum": 0.95, "optimizer.muon_nesterov": True,
         "optimizer.muon_scale_mode": "spectral", "optimizer.muon_fp32_matmul_prec": "medium",
         "optimizer.muon_num_ns_steps": 5, "optimizer.muon_tp_mode": "blockwise",
         "optimizer.muon_extra_scale_factor": 1.0, "optimizer.muon_scalar_optimizer": "adam",
         "optimizer.use_distributed_optimizer": False, "optimizer.overlap_param_gather": False,
         "ddp.grad_reduce_in_fp32": True, "ddp.use_distributed_optimizer": False,
         "ddp.overlap_param_gather": False, "optimizer.use_precision_aware_optimizer": False,
         "optimizer.main_grads_dtype": "float32", "optimizer.main_params_dtype": "float32",
         "optimizer.exp_avg_dtype": "float32", "optimizer.exp_avg_sq_dtype": "float32",
         "mixed_precision.grad_reduce_in_fp32": True}),
}
_SECTIONS = ("model", "train", "dataset", "ddp", "optimizer", "comm_overlap", "mixed_precision",
             "tokenizer", "peft")
#: The base configs of the fine-tuning recipes (recipes/common.py:136 ``_sft_common``, :238
#: ``_peft_common``), read like ``_pretrain_common``.
FINETUNE_COMMONS = ("_sft_common", "_peft_common")
#: The PEFT classes ``default_peft_config`` builds (recipes/utils/dataset_utils.py:48-72:
#: ``"lora"`` -> ``LoRA(**kwargs)``, ``"dora"`` -> ``DoRA(**kwargs)``, no kwargs from a recipe):
#: scheme -> (file, class); the row takes the class's dataclass defaults.
PEFT_CLASSES = {"lora": (_BASE + "peft/lora.py", "LoRA"), "dora": (_BASE + "peft/dora.py", "DoRA")}
#: The one condition the PEFT recipes branch on (recipes/llama/h100/llama3.py:2367 and the
#: others): true for the recipes' default scheme ``peft_scheme="lora"``.
_SCHEME_TEST = "isinstance(peft_scheme, str) and peft_scheme.lower() in ['lora', 'dora']"
#: Where a finetune row goes (its own generated module keeps both under 600 lines).
FINETUNE_OUT = OUT.parent / "_bridge_finetune.py"


def _show(source: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", source, "show", f"{COMMIT}:{path}"], check=True,
                          capture_output=True, text=True).stdout


class _Unknown(Exception):
    """A value that is not a literal (listed as computed)."""


def _value(node, env):
    """The literal ``node`` stands for (``env``: bound names), else :class:`_Unknown`."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id == "torch":
        return node.attr                      # torch.bfloat16 -> "bfloat16"
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, env) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, env)
    raise _Unknown(ast.unparse(node))


def _hf_id(node, env):
    """The model id of ``AutoBridge.from_hf_pretrained(ID)...`` anywhere in ``node``."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                and sub.func.attr == "from_hf_pretrained" and sub.args:
            try:
                return _value(sub.args[0], env)
            except _Unknown:
                return None                   # a computed id: listed as computed
    return None


def _config_call(node, env, section, values, computed, line):
    """``Config(field=..., ...)`` assigned to a section: each literal keyword a value."""
    for kw in node.keywords:
        if kw.arg is None:
            continue
        try:
            values[f"{section}.{kw.arg}"] = _value(kw.value, env)
        except _Unknown as exc:
            # a userbuffers config object, say: its name stands for it
            if isinstance(kw.value, ast.Name):
                values[f"{section}.{kw.arg}"] = kw.value.id
            else:
                computed.append(f"{line}: {section}.{kw.arg} = {exc}")


class _File:
    def __init__(self, text: str, path: str, imported=None):
        self.path, self.tree = path, ast.parse(text)
        self.functions = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        self.constants = dict(imported or {})
        for n in self.tree.body:
            if isinstance(n, (ast.Assign, ast.AnnAssign)):
                target = n.targets[0] if isinstance(n, ast.Assign) else n.target
                if isinstance(target, ast.Name) and isinstance(n.value, ast.Constant):
                    self.constants[target.id] = n.value.value


def _recipe_constants(source: str, text: str) -> dict:
    """The string constants ``text`` imports from another recipe module
    (``from megatron.bridge.recipes.deepseek.h100.deepseek_v4 import DEEPSEEK_V4_FLASH_HF_PATH``,
    recipes/deepseek/gb200/deepseek_v4.py:27-29)."""
    out = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "megatron.bridge.recipes.") and not node.level:
            path = "src/" + node.module.replace(".", "/") + ".py"
            try:
                constants = _File(_show(source, path), path).constants
            except subprocess.CalledProcessError:
                continue
            out.update({a.asname or a.name: constants[a.name] for a in node.names
                        if a.name in constants})
    return out


def _optimizer_helper(text: str, call) -> dict:
    """The literal keywords of the ``OptimizerConfig(...)`` an optimizer helper of ``text``
    (recipes/utils/optimizer_utils.py) builds, its parameters bound to ``call``'s literal
    keywords, else to their defaults: ``{"optimizer.field": value}``.

    ``_pretrain_common``'s ``distributed_fused_adam_with_cosine_annealing(...)``
    (recipes/common.py:53-58) gives ``optimizer="adam"`` and ``use_distributed_optimizer=True``
    (optimizer_utils.py:140-152); a keyword that is not a literal (``bf16=precision == ...``)
    is not read."""
    name = getattr(call.func, "id", None)
    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    params = fn.args.args[len(fn.args.args) - len(fn.args.defaults):]
    env = {}
    for arg, node in [(a.arg, d) for a, d in zip(params, fn.args.defaults)] + [
            (kw.arg, kw.value) for kw in call.keywords]:
        try:
            env[arg] = _value(node, {})
        except _Unknown:
            env.pop(arg, None)
    cfg = next(n for n in ast.walk(fn) if isinstance(n, ast.Call)
               and getattr(n.func, "id", None) == "OptimizerConfig")
    values = {}
    for kw in cfg.keywords:
        try:
            values[f"optimizer.{kw.arg}"] = _value(kw.value, env)
        except _Unknown:
            pass
    return values


def _common_values(text: str, optimizer_utils: str = "", name: str = "_pretrain_common") -> dict:
    """``name``'s values (``_pretrain_common``, ``_sft_common``, ``_peft_common``): its
    ConfigContainer's literal keywords (its local literals bound: ``seq_length = 2048``), the
    optimizer config its optimizer helper builds (``opt_cfg, scheduler_cfg = helper(...)``), the
    keywords of its dataset helper (``default_squad_config(seq_length=..., ...)``, recipes/utils/
    dataset_utils.py:119) as ``dataset.*`` and its ``peft=LoRA(...)`` as ``peft`` and ``peft.*``."""
    tree = ast.parse(text)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    call = next(n for n in ast.walk(fn) if isinstance(n, ast.Call)
                and getattr(n.func, "id", None) == "ConfigContainer")
    helpers, env = {}, {}    # opt_cfg -> the helper call that builds it; local literals
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Tuple) \
                and isinstance(n.value, ast.Call) and optimizer_utils:
            helpers[ast.unparse(n.targets[0].elts[0])] = n.value
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) \
                and isinstance(n.value, ast.Constant):
            env[n.targets[0].id] = n.value.value
    values, computed = {}, []
    for kw in call.keywords:
        if isinstance(kw.value, ast.Call):
            if kw.arg == "peft":
                values["peft"] = getattr(kw.value.func, "id", None)
            _config_call(kw.value, env, kw.arg, values, computed, kw.value.lineno)
        elif kw.arg == "optimizer" and ast.unparse(kw.value) in helpers:
            values.update(_optimizer_helper(optimizer_utils, helpers[ast.unparse(kw.value)]))
        else:
            try:
                values[kw.arg] = _value(kw.value, {})
            except _Unknown:
                pass   # scheduler_cfg: built by a helper, not read
    return values


def peft_defaults(text: str, cls: str) -> dict:
    """The dataclass defaults of PEFT class ``cls`` of ``text`` as ``peft.*`` values (a
    ``field(default_factory=lambda: [...])`` is its list), with ``peft`` the class name."""
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == cls)
    out = {"peft": cls}
    for n in node.body:
        if not (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value):
            continue
        value = n.value
        if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
            value = next((kw.value.body for kw in value.keywords if kw.arg == "default_factory"
                          and isinstance(kw.value, ast.Lambda)), None)
        try:
            out[f"peft.{n.target.id}"] = _value(value, {})
        except (_Unknown, AttributeError):
            pass
    return out


def _helper_call(call, env, values) -> bool:
    """Apply a :data:`HELPER_CALLS` call ``helper(cfg, *literals)`` to ``values``; False when
    ``call`` is not one."""
    if [ast.unparse(a) for a in call.args[:1]] != ["cfg"] or call.keywords:
        return False
    try:
        key = (getattr(call.func, "id", None), tuple(_value(a, env) for a in call.args[1:]))
    except _Unknown:
        return False
    if key not in HELPER_CALLS:
        return False
    _, replaced, fields = HELPER_CALLS[key]
    for k in [k for k in values if k.split(".")[0] in replaced]:
        del values[k]
    values.update(fields)
    return True


def _peft_statement(stmt, env, values, local, common) -> bool:
    """Read one statement of a fine-tuning recipe's PEFT or local literals; False when
    ``stmt`` is none of them.

    ``seq_length = 4096``: a local literal (bound for the statements after it);
    ``peft_cfg = default_peft_config(peft_scheme)``: the scheme's PEFT class with its defaults
    (:data:`PEFT_CLASSES`); ``cfg.peft = peft_cfg``: those become the row's ``peft.*``;
    ``peft_cfg.dim = 8``: the field of the same object (``cfg.peft`` is ``peft_cfg``)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return False
    target, node = stmt.targets[0], stmt.value
    if isinstance(target, ast.Name) and isinstance(node, ast.Constant):
        env[target.id] = node.value
        return True
    if isinstance(target, ast.Name) and isinstance(node, ast.Call) \
            and getattr(node.func, "id", None) == "default_peft_config":
        scheme = _value(node.args[0], env) if node.args else None
        local[target.id] = ("peft", dict(common["peft_classes"].get(
            scheme.lower() if isinstance(scheme, str) else scheme, {"peft": None})))
        return True
    chain = ast.unparse(target)
    if chain == "cfg.peft" and isinstance(node, ast.Name) and node.id in local \
            and local[node.id][0] == "peft":
        for k in [k for k in values if k == "peft" or k.startswith("peft.")]:
            del values[k]
        values.update(local[node.id][1])
        local[node.id] = ("peft", local[node.id][1], True)
        return True
    parts = chain.split(".")
    if len(parts) == 2 and parts[0] in local and local[parts[0]][0] == "peft":
        try:       # the object's field, and the config's once cfg.peft is that object
            local[parts[0]][1]["peft." + parts[1]] = _value(node, env)
        except _Unknown:
            return False
        if len(local[parts[0]]) > 2:
            values["peft." + parts[1]] = local[parts[0]][1]["peft." + parts[1]]
        return True
    if chain in ("cfg.mixed_precision",) and isinstance(node, ast.Constant):
        # a precision recipe by name (llama3.py:2385): it replaces the section
        for k in [k for k in values if k.startswith("mixed_precision")]:
            del values[k]
        values["mixed_precision"] = node.value
        return True
    return False


def _run(file: _File, name: str, args, common: dict):
    """(values, hf_model, computed) of recipe function ``name`` called with ``args``
    (``common``: the values of ``_pretrain_common`` and the fine-tuning bases by name, and
    ``peft_classes``: :data:`PEFT_CLASSES`' defaults by scheme)."""
    fn = file.functions[name]
    env = dict(file.constants)
    env.update({a.arg: v for a, v in zip(fn.args.args, args)})
    # the recipes' default scheme (``peft_scheme: str | PEFT = "lora"``, llama3.py:2337)
    env.update({a.arg: _value(d, {}) for a, d in zip(fn.args.args[len(fn.args.args)
                                                                 - len(fn.args.defaults):],
                                                     fn.args.defaults)
                if isinstance(d, ast.Constant) and a.arg not in env})
    values, hf, computed, local, inline = {}, None, [], {}, False
    body = list(fn.body)
    while body:
        stmt = body.pop(0)
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == _SCHEME_TEST \
                and isinstance(env.get("peft_scheme"), str):
            body[:0] = stmt.body if env["peft_scheme"].lower() in ("lora", "dora") else stmt.orelse
            continue
        if _peft_statement(stmt, env, values, local, common):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue                                          # the docstring
        if isinstance(stmt, ast.Return) or isinstance(stmt, ast.Assert):
            continue
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if isinstance(call, ast.Call) and _helper_call(call, env, values):
            continue
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == \
                "set_cuda_graph_modules" and [ast.unparse(a) for a in call.args[:1]] == ["cfg.model"]:
            # utils/cuda_graph.py:77-86: the modules (Megatron-LM's cuda_graph_modules, which
            # memsym reads as cuda_graph_scope), the deprecated scope cleared
            try:
                values["model.cuda_graph_scope"] = _value(call.args[1], env)
                continue
            except (_Unknown, IndexError):
                pass
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, node = stmt.targets[0], stmt.value
            chain = ast.unparse(target)
            if isinstance(target, ast.Name) and target.id == "cfg" and isinstance(node, ast.Call):
                callee = getattr(node.func, "id", None)
                if callee in common and callee.startswith("_"):
                    values = dict(common[callee])
                    continue
                # cfg = other_recipe() (a helper taking cfg itself is listed as computed)
                if callee in file.functions and not any(
                        isinstance(a, ast.Name) and a.id == "cfg" for a in node.args):
                    values, hf, more = _run(file, callee, [_value(a, env) for a in node.args],
                                            common)
                    computed += more
                    continue
            if isinstance(target, ast.Name) and isinstance(node, ast.Call) \
                    and getattr(node.func, "id", None) == "get_mixed_precision_config":
                local[target.id] = _value(node.args[0], env)
                continue
            if chain == "cfg.model" and _hf_id(node, env) is not None:
                hf = _hf_id(node, env)
                continue
            if chain == "cfg.model" and isinstance(node, ast.Call) \
                    and getattr(node.func, "id", None) in INLINE_PROVIDERS and not node.args:
                values = {k: v for k, v in values.items() if not k.startswith("model.")}
                _config_call(node, env, "model", values, computed, stmt.lineno)
                inline = True
                continue
            if chain == "cfg.mixed_precision" and isinstance(node, ast.Call) \
                    and getattr(node.func, "id", None) == "get_mixed_precision_config" \
                    and [ast.unparse(a) for a in node.args] == ["cfg.mixed_precision"]:
                continue                     # the named recipe as its config: the same values
            parts = chain.split(".")
            if parts[0] == "cfg" and len(parts) == 2 and parts[1] in _SECTIONS:
                sec = parts[1]
                if isinstance(node, ast.Name) and node.id in local:
                    values[sec] = local[node.id]
                    continue
                if isinstance(node, ast.Call):
                    callee = getattr(node.func, "id", None)
                    if callee in ("CommOverlapConfig", "MixedPrecisionConfig"):
                        for k in [k for k in values if k.startswith(sec + ".") or k == sec]:
                            del values[k]
                        if callee == "MixedPrecisionConfig":
                            values[sec] = "MixedPrecisionConfig"
                        _config_call(node, env, sec, values, computed, stmt.lineno)
                        continue
                    if callee is not None and not node.args and not node.keywords:
                        values[sec] = callee                 # bf16_mixed()
                        continue
            if parts[0] == "cfg" and len(parts) == 3 and parts[1] in _SECTIONS:
                try:
                    values[".".join(parts[1:])] = _value(node, env)
                    continue
                except _Unknown as exc:
                    computed.append(f"{stmt.lineno}: {chain[4:]} = {exc}")
                    continue
            if parts[0] == "cfg" and len(parts) > 1 and parts[1] not in _SECTIONS:
                continue                                     # rng, checkpoint, logger, ...
        if isinstance(stmt, ast.Assign) and ast.unparse(stmt.targets[0]).startswith(
                ("cfg.env_vars", "cfg.rng", "cfg.checkpoint", "cfg.logger", "cfg.scheduler",
                 "cfg.validation", "cfg.dist")):
            continue
        text = ast.unparse(stmt).splitlines()[0]
        computed.append(f"{stmt.lineno}: {text[:100]}")
    if inline and hf is None:
        hf = values.get("tokenizer.tokenizer_model")
    if values.get("model.hf_model_id"):
        # a recipe built on another that names its own checkpoint (nemotron_3_nano.py:272)
        hf = values["model.hf_model_id"]
    return values, hf, computed


#: Megatron-LM's commit Bridge pins (Megatron-Bridge 067f987df0 ``3rdparty/Megatron-LM``).
MCORE_COMMIT = "2a75ac12c54ba6a42b34024756820bf819a2e25f"
DEFAULT_MCORE = "/work/.mirror/NVIDIA+Megatron-LM/repo"
#: ConfigContainer's sections (training/config.py:965-1010) -> the classes whose dataclass
#: fields an override may name (each with its bases, followed through the imports); the model
#: section takes the providers the recipes read build (GPT, and MLA for DeepSeek-V3).
SECTION_CLASSES = {
    "model": (("megatron.bridge.models.gpt_provider", "GPTModelProvider"),
              ("megatron.bridge.models.mla_provider", "MLAModelProvider")),
    "train": (("megatron.bridge.training.config", "TrainingConfig"),),
    "validation": (("megatron.bridge.training.config", "ValidationConfig"),),
    "ddp": (("megatron.bridge.training.config", "DistributedDataParallelConfig"),),
    "optimizer": (("megatron.bridge.training.config", "OptimizerConfig"),),
    "scheduler": (("megatron.bridge.training.config", "SchedulerConfig"),),
    "dataset": (("megatron.bridge.training.config", "GPTDatasetConfig"),
                # the fine-tuning recipes' dataset (recipes/utils/dataset_utils.py:90)
                ("megatron.bridge.data.builders.gpt_sft", "GPTSFTDatasetConfig")),
    "logger": (("megatron.bridge.training.config", "LoggerConfig"),),
    "tokenizer": (("megatron.bridge.training.tokenizers.config", "TokenizerConfig"),),
    "checkpoint": (("megatron.bridge.training.config", "CheckpointConfig"),),
    "dist": (("megatron.bridge.training.config", "DistributedInitConfig"),),
    "rng": (("megatron.bridge.training.config", "RNGConfig"),),
    "profiling": (("megatron.bridge.training.config", "ProfilingConfig"),),
    "rerun_state_machine": (("megatron.bridge.training.config", "RerunStateMachineConfig"),),
    "ft": (("megatron.bridge.training.config", "FaultToleranceConfig"),),
    "straggler": (("megatron.bridge.training.config", "StragglerDetectionConfig"),),
    "nvrx_straggler": (("megatron.bridge.training.config", "NVRxStragglerDetectionConfig"),),
    "inprocess_restart": (("megatron.bridge.training.config", "InProcessRestartConfig"),),
    "tensor_inspect": (("megatron.bridge.training.config", "TensorInspectConfig"),),
    "comm_overlap": (("megatron.bridge.training.comm_overlap", "CommOverlapConfig"),),
    "mixed_precision": (("megatron.bridge.training.mixed_precision", "MixedPrecisionConfig"),),
    # the fine-tuning recipes' PEFT (ConfigContainer.peft, training/config.py)
    "peft": (("megatron.bridge.peft.lora", "LoRA"), ("megatron.bridge.peft.dora", "DoRA")),
}


class _Modules:
    """Python modules of Bridge (at COMMIT) and of its Megatron-LM (at MCORE_COMMIT), parsed."""

    def __init__(self, bridge: str, mcore: str):
        self.bridge, self.mcore, self.cache = bridge, mcore, {}

    def tree(self, module: str):
        if module not in self.cache:
            if module.startswith("megatron.bridge"):
                git, commit, base = self.bridge, COMMIT, "src/"
            else:
                git, commit, base = self.mcore, MCORE_COMMIT, ""
            path = base + module.replace(".", "/")
            text = None
            for candidate in (path + ".py", path + "/__init__.py"):
                run = subprocess.run(["git", "--git-dir", git, "show", f"{commit}:{candidate}"],
                                     capture_output=True, text=True)
                if run.returncode == 0:
                    text = run.stdout
                    break
            self.cache[module] = (ast.parse(text), candidate.endswith("__init__.py")) if text else None
        return self.cache[module]

    def find(self, module: str, name: str, depth: int = 0):
        """(module, ClassDef) of ``name`` as ``module`` sees it (through its imports)."""
        got = self.tree(module)
        if got is None or depth > 8:
            return None
        tree, package = got
        for n in tree.body:
            if isinstance(n, ast.ClassDef) and n.name == name:
                return module, n
        for n in tree.body:
            if isinstance(n, ast.ImportFrom):
                for a in n.names:
                    if (a.asname or a.name) == name:
                        return self.find(self._absolute(module, n, package), a.name, depth + 1)
        return None

    @staticmethod
    def _absolute(module, node, package):
        if not node.level:
            return node.module
        parts = module.split(".")
        keep = parts if package else parts[:-1]
        keep = keep[:len(keep) - (node.level - 1)]
        return ".".join(keep + ([node.module] if node.module else []))

    def fields(self, module: str, name: str, seen=None) -> set:
        """The dataclass field names of class ``name`` of ``module`` and of its bases."""
        seen = set() if seen is None else seen
        found = self.find(module, name)
        if found is None or (found[0], name) in seen:
            return set()
        where, cls = found
        seen.add((where, name))
        out = {n.target.id for n in cls.body
               if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
        for base in cls.bases:
            base = base.value if isinstance(base, ast.Subscript) else base
            if isinstance(base, ast.Name):
                # a subclass named as its base (Bridge's DistributedDataParallelConfig of
                # Megatron-Core's) imports the base under an alias
                out |= self.fields(where, base.id, seen)
        return out


def section_fields(bridge: str, mcore: str) -> dict:
    """section -> the sorted field names an override may name."""
    mods = _Modules(bridge, mcore)
    out = {}
    for section, classes in SECTION_CLASSES.items():
        names = set()
        for module, name in classes:
            got = mods.fields(module, name)
            if not got:
                raise SystemExit(f"no fields found for {module}.{name}")
            names |= got
        out[section] = tuple(sorted(n for n in names if not n.startswith("_")))
    return out


# --- performance recipes ---------------------------------------------------------------------
#: The families of ``perf_recipes/<family>/<system>/<model>.py`` read (the language models';
#: qwen_vl and wan are not); each function ``*_pretrain_*``, ``*_sft_*`` or ``*_peft_*_config``
#: is one row of PERF_RECIPES.
#: The perf recipe functions read: pretraining, SFT and PEFT (LoRA) ones.
_PERF_TASK = re.compile(r"_(pretrain|sft|peft)_")
PERF_FAMILIES = ("llama", "qwen", "deepseek", "gpt_oss", "kimi", "nemotronh", "glm_moe_dsa")
_PERF = _BASE + "perf_recipes/"


class _Cfg:
    """A ConfigContainer as the recipe builds it: flat ``section.field`` values, the Hugging
    Face model, and the sections assigned a string (``mixed_precision="bf16_mixed"``)."""

    def __init__(self, values, hf, strings=()):
        self.values, self.hf, self.strings = dict(values), hf, set(strings)


class _Ref:
    """``cfg`` (path "") or one of its sections (``cfg.model``)."""

    def __init__(self, cfg, path):
        self.cfg, self.path = cfg, path


class _Obj(dict):
    """A config object the recipe builds (a precision or comm-overlap config): its recipe or
    class name under "" and its fields."""


class _Return(Exception):
    def __init__(self, value):
        self.value = value


_UNSET = object()


def _default(fn, name):
    """The literal default of parameter ``name`` of function ``fn`` (``_UNSET`` if none)."""
    params = fn.args.args[len(fn.args.args) - len(fn.args.defaults):]
    for p, d in list(zip(params, fn.args.defaults)) + list(zip(fn.args.kwonlyargs,
                                                                fn.args.kw_defaults)):
        if p.arg == name and isinstance(d, ast.Constant):
            return d.value
    return _UNSET


class _Perf:
    """Reads perf recipe functions statement by statement (:meth:`call`), following the names
    they call through the imports: base recipes (their rows' values), helpers in
    ``perf_recipes`` and ``recipes`` (read the same way), precision recipes and config classes
    (their names and literal keywords).  What it cannot read (a condition on an unset field,
    a call it does not know) goes to ``computed`` with its file:line."""

    def __init__(self, mods: "_Modules", base: dict, sections):
        self.mods, self.base, self.sections = mods, base, set(sections)
        self.computed = []

    # expressions
    def value_of(self, node, env, module):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env and env[node.id] is not _UNSET:
                return env[node.id]
            raise _Unknown(node.id)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "torch":
                return node.attr
            return self._get(self.value_of(node.value, env, module), node.attr)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value_of(e, env, module) for e in node.elts]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not self.value_of(node.operand, env, module)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.value_of(node.operand, env, module)
        if isinstance(node, ast.BoolOp):
            return self._boolop(node, env, module)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = self.value_of(node.left, env, module), self.value_of(node.comparators[0], env, module)
            op = type(node.ops[0])
            table = {ast.Eq: lambda: a == b, ast.NotEq: lambda: a != b, ast.Is: lambda: a is b,
                     ast.IsNot: lambda: a is not b, ast.In: lambda: a in b,
                     ast.NotIn: lambda: a not in b}
            if op in table:
                return table[op]()
        if isinstance(node, ast.IfExp):
            branch = node.body if self.value_of(node.test, env, module) else node.orelse
            return self.value_of(branch, env, module)
        if isinstance(node, ast.Call):
            return self._call(node, env, module)
        raise _Unknown(ast.unparse(node)[:80])

    def _boolop(self, node, env, module):
        unknown = None
        for i, v in enumerate(node.values):
            try:
                x = self.value_of(v, env, module)
            except _Unknown as exc:
                unknown = exc
                continue
            last = i == len(node.values) - 1
            if isinstance(node.op, ast.And) and not x:
                return x
            if isinstance(node.op, ast.Or) and x:
                return x
            if last and unknown is None:
                return x
        raise unknown or _Unknown(ast.unparse(node)[:80])

    @staticmethod
    def _get(obj, attr):
        if isinstance(obj, _Ref):
            key = f"{obj.path}.{attr}" if obj.path else attr
            if not obj.path:
                return _Ref(obj.cfg, attr)            # cfg.model
            if key in obj.cfg.values:
                return obj.cfg.values[key]
        elif isinstance(obj, _Obj) and attr in obj:
            return obj[attr]
        raise _Unknown(attr)

    def _call(self, node, env, module):
        fname = node.func.id if isinstance(node.func, ast.Name) else None
        if fname == "isinstance" and len(node.args) == 2 and ast.unparse(node.args[1]) == "str":
            target = self.value_of(node.args[0], env, module)
            if isinstance(target, _Ref) and target.path:
                # a section the recipe assigned a string or a config object; a base recipe's
                # (read without that distinction) is not known
                if target.path in target.cfg.strings:
                    return True
                if target.path + ".<obj>" in target.cfg.values:
                    return False
                raise _Unknown(f"isinstance({target.path})")
            return isinstance(target, str)
        if fname == "getattr" and len(node.args) >= 2:
            return self._get(self.value_of(node.args[0], env, module),
                             self.value_of(node.args[1], env, module))
        if fname is None or fname in ("hasattr", "float", "int", "len"):
            raise _Unknown(ast.unparse(node.func))
        found = _resolve(self.mods, module, fname)
        if found is None:
            raise _Unknown(fname)
        where, fn = found
        kwargs = {kw.arg: self.value_of(kw.value, env, module) for kw in node.keywords if kw.arg}
        if (where, fn.name) == ("megatron.bridge.utils.cuda_graph", "set_cuda_graph_modules"):
            # utils/cuda_graph.py:77-86, as the base recipes' reader takes it: the modules
            # (Megatron-LM's cuda_graph_modules, read as cuda_graph_scope)
            target, modules = (self.value_of(a, env, module) for a in node.args[:2])
            if isinstance(target, _Ref) and target.path == "model" and isinstance(modules, list):
                target.cfg.values["model.cuda_graph_scope"] = modules
                return None
            raise _Unknown("set_cuda_graph_modules")
        if isinstance(fn, ast.ClassDef):                  # CommOverlapConfig(...)
            obj = _Obj({"": fn.name})
            for kw in node.keywords:
                try:
                    obj[kw.arg] = self.value_of(kw.value, env, module)
                except _Unknown:
                    obj[kw.arg] = ast.unparse(kw.value)   # a userbuffers config: its name
            return obj
        if where == "megatron.bridge.training.mixed_precision":
            return _Obj({"": fn.name})                    # bf16_with_fp8_current_scaling_mixed
        if fn.name in self.base and not where.startswith("megatron.bridge.perf_recipes"):
            # the base's row is the function called with its defaults: a call passing another
            # value (``llama3_70b_peft_config(peft_scheme="dora")``) is not that row
            if node.args or any(_default(fn, k) != v for k, v in kwargs.items()):
                raise _Unknown(f"{fn.name}(...) with arguments other than its defaults")
            values, hf, unread = self.base[fn.name]
            # the base's own unread statements run too: DeepSeek-V3's base ends in
            # apply_flex_dispatcher_backend (recipes/deepseek/h100/deepseek_v3.py:256), which
            # the perf recipes built on it inherit (memsym.readers.recipe_mechanisms)
            self.computed += unread
            return _Ref(_Cfg(values, hf), "")
        args = [self.value_of(a, env, module) for a in node.args]
        return self.call(where, fn, args, kwargs)

    # statements
    def call(self, module, fn, args, kwargs):
        """Run function ``fn`` of ``module`` on bound arguments; its return value."""
        env = dict(_module_constants(self.mods, module))
        params = fn.args.args
        defaults = [None] * (len(params) - len(fn.args.defaults)) + list(fn.args.defaults)
        for i, (p, d) in enumerate(zip(params, defaults)):
            if i < len(args):
                env[p.arg] = args[i]
            elif p.arg in kwargs:
                env[p.arg] = kwargs[p.arg]
            else:
                env[p.arg] = self.value_of(d, {}, module) if d is not None else _UNSET
        for p, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults):
            env[p.arg] = kwargs.get(p.arg, self.value_of(d, {}, module) if d is not None else _UNSET)
        try:
            self.run(fn.body, env, module)
        except _Return as r:
            return r.value
        return None

    def _note(self, module, stmt):
        path = module.replace("megatron.bridge.", "").replace(".", "/")
        self.computed.append(f"{path}.py:{stmt.lineno}: {ast.unparse(stmt).splitlines()[0][:90]}")

    def run(self, body, env, module):
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue
            if isinstance(stmt, (ast.Pass, ast.Assert, ast.Import, ast.ImportFrom)):
                continue
            if isinstance(stmt, ast.Return):
                raise _Return(None if stmt.value is None else self.value_of(stmt.value, env, module))
            if isinstance(stmt, ast.If):
                try:
                    test = self.value_of(stmt.test, env, module)
                except _Unknown:
                    self._note(module, stmt)
                    continue
                self.run(stmt.body if test else stmt.orelse, env, module)
                continue
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                try:
                    self.value_of(stmt.value, env, module)
                except _Unknown:
                    self._note(module, stmt)
                continue
            if isinstance(stmt, ast.Assign):
                self._assign(stmt, env, module)
                continue
            self._note(module, stmt)

    def _assign(self, stmt, env, module):
        targets = [ast.unparse(t) for t in stmt.targets]
        if any(t.startswith(("cfg.env_vars", "cfg.checkpoint", "cfg.logger", "cfg.scheduler",
                             "cfg.validation", "cfg.rerun_state_machine", "cfg.rng",
                             "cfg.dist", "cfg.profiling")) for t in targets):
            return                                 # no memory or time meaning
        try:
            value = self.value_of(stmt.value, env, module)
        except _Unknown:
            # an imported config object (a userbuffers config): its name stands for it
            value = stmt.value.id if isinstance(stmt.value, ast.Name) else _UNSET
        hf = _hf_id(stmt.value, env)
        if targets == ["cfg.model"] and isinstance(hf, str) and isinstance(env.get("cfg"), _Ref):
            # cfg.model = AutoBridge.from_hf_pretrained("zai-org/GLM-5.1").to_megatron_provider(
            # ...) (perf_recipes/glm_moe_dsa/gb200/glm5.py:28): the row's model is that
            # checkpoint, the earlier model fields gone with the model object they were on
            cfg = env["cfg"].cfg
            cfg.hf = hf
            for key in [k for k in cfg.values if k.startswith("model.")]:
                del cfg.values[key]
            return
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                env[target.id] = value
                continue
            if not isinstance(target, ast.Attribute):
                self._note(module, stmt)
                continue
            try:
                obj = self.value_of(target.value, env, module)
            except _Unknown:
                self._note(module, stmt)
                continue
            if isinstance(obj, _Obj):
                if value is _UNSET:
                    obj.pop(target.attr, None)
                    self._note(module, stmt)
                else:
                    obj[target.attr] = value
                continue
            if not isinstance(obj, _Ref):
                self._note(module, stmt)
                continue
            self._set(obj, target.attr, value, module, stmt)

    def _set(self, ref, attr, value, module, stmt):
        values = ref.cfg.values
        if not ref.path:                            # cfg.section = ...
            section = attr
            if section not in self.sections:
                return
            if isinstance(value, (_Obj, str)):
                for k in [k for k in values if k == section or k.startswith(section + ".")]:
                    del values[k]
                ref.cfg.strings.discard(section)
                if isinstance(value, str):
                    values[section] = value
                    ref.cfg.strings.add(section)
                else:
                    values[section + ".<obj>"] = True
                    if value.get("") not in ("CommOverlapConfig",):
                        values[section] = value[""]
                    for k, v in value.items():
                        if k:
                            values[f"{section}.{k}"] = v
                return
            self._note(module, stmt)
            return
        key = f"{ref.path}.{attr}"
        if key == "model.hf_model_id" and isinstance(value, str):
            # a perf recipe naming another checkpoint (Nemotron 3.5 Lightning on Nano's recipe,
            # perf_recipes/nemotronh/h100/nemotronh.py:226): the row's model is that one
            ref.cfg.hf = value
        if value is _UNSET:
            values.pop(key, None)
            self._note(module, stmt)
        else:
            values[key] = value


def _resolve(mods, module, name, depth=0):
    """(module, FunctionDef or ClassDef) that ``name`` is in ``module``, through its imports."""
    got = mods.tree(module)
    if got is None or depth > 8:
        return None
    tree, package = got
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name:
            return module, n
    for n in tree.body:
        if isinstance(n, ast.ImportFrom):
            for a in n.names:
                if (a.asname or a.name) == name:
                    return _resolve(mods, _Modules._absolute(module, n, package), a.name,
                                    depth + 1)
    return None


def _module_constants(mods, module, depth=0):
    """The literal module-level constants of ``module``, with those it imports from Bridge
    (``DEFAULT_NULL_TOKENIZER_VOCAB_SIZE``, perf_recipes/glm_moe_dsa/gb200/glm5.py:20)."""
    got = mods.tree(module)
    out = {}
    for n in (got[0].body if got else ()):
        target = n.targets[0] if isinstance(n, ast.Assign) else getattr(n, "target", None)
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(target, ast.Name) \
                and isinstance(n.value, ast.Constant):
            out[target.id] = n.value.value   # also ``NAME: int = 32000`` (tokenizer_utils.py:15)
        if isinstance(n, ast.ImportFrom) and depth < 4 and n.names[0].name != "*":
            source = _Modules._absolute(module, n, got[1])
            if not source.startswith("megatron.bridge."):
                continue
            names = {a.name: a.asname or a.name for a in n.names}
            if not any(name.isupper() for name in names):
                continue            # only constants (upper-case names) are followed
            theirs = _module_constants(mods, source, depth + 1)
            out.update({mine: theirs[name] for name, mine in names.items() if name in theirs})
    return out


def perf_rows(source: str, mcore: str, base: dict, keep) -> dict:
    """name -> row of each perf recipe of :data:`PERF_FAMILIES`."""
    mods = _Modules(source, mcore)
    listing = subprocess.run(["git", "--git-dir", source, "ls-tree", "-r", "--name-only", COMMIT,
                              _PERF], check=True, capture_output=True, text=True).stdout.split()
    rows = {}
    for path in listing:
        parts = path[len(_PERF):].split("/")
        if len(parts) != 3 or parts[0] not in PERF_FAMILIES or parts[2] == "__init__.py" \
                or not parts[2].endswith(".py"):
            continue
        module = path[len("src/"):-3].replace("/", ".")
        tree, _ = mods.tree(module)
        for fn in tree.body:
            if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_") \
                    or not _PERF_TASK.search(fn.name) or not fn.name.endswith("_config"):
                continue
            reader = _Perf(mods, base, SECTION_CLASSES)
            try:
                cfg = reader.call(module, fn, [], {})
            except _Unknown:
                continue
            cfg = cfg.cfg if isinstance(cfg, _Ref) and not cfg.path else None
            if cfg is None:
                continue
            name = fn.name if fn.name not in keep[0] else module[len("megatron.bridge."):] \
                + "." + fn.name
            rows[name] = {"source": f"{path}:{fn.lineno} {fn.name}", "hf_model": cfg.hf,
                          "computed": tuple(dict.fromkeys(reader.computed)),
                          "values": {k: v for k, v in sorted(cfg.values.items()) if k in keep[1]}}
    return rows


def _check_shared(source: str, perf: dict) -> None:
    """Stop when a perf recipe keyed by its module path (a name the library exports too) is
    not exported by its family's ``perf_recipes/<family>/__init__.py``: run_recipe.py takes
    the perf recipe for such a name only when it is (``benchmark_recipe_names``,
    scripts/training/recipe_metadata.py:142-179), which :mod:`memsym.readers.bridge_names`
    assumes."""
    for key in (k for k in perf if "." in k):
        family, name = key.split(".")[1], key.rsplit(".", 1)[1]
        names = {a.asname or a.name for n in ast.walk(ast.parse(_show(
            source, f"{_PERF}{family}/__init__.py"))) if isinstance(n, ast.ImportFrom)
            for a in n.names}
        if name not in names:
            raise SystemExit(f"{key}: not exported by perf_recipes/{family}/__init__.py, so "
                             "run_recipe.py runs the library recipe of that name")


def _aliases(source: str) -> dict:
    out = {}
    for rel in recipe_files(source)[1]:
        try:
            tree = ast.parse(_show(source, _BASE + rel))
        except subprocess.CalledProcessError:
            continue
        for n in tree.body:
            if isinstance(n, ast.ImportFrom):
                for a in n.names:
                    if a.asname:
                        out[a.asname] = a.name
            target = _wrapped(n)
            if target:
                out[n.name] = target
    return out


def _wrapped(node) -> str | None:
    """The recipe a legacy name's one-line wrapper returns (``def name(): return
    _full_name()``, recipes/nemotronh/nemotron_3_super.py:32-34), else None."""
    if not isinstance(node, ast.FunctionDef) or node.args.args:
        return None
    body = [stmt for stmt in node.body
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Call) \
            and isinstance(body[0].value.func, ast.Name) and not body[0].value.args:
        return body[0].value.func.id
    return None


def build(source: str, mcore: str = DEFAULT_MCORE) -> tuple:
    """The texts of ``memsym/readers/_bridge_recipes.py`` and ``_bridge_finetune.py``."""
    sys.path.insert(0, str(OUT.parent.parent.parent))
    from memsym.readers.bridge import FIELDS

    fields = section_fields(source, mcore)
    for key in FIELDS:      # every field memsym reads is a field of Bridge's config
        section, _, name = key.partition(".")
        if name and name not in fields[section]:
            raise SystemExit(f"{key} is not a field of Bridge's {section} config")

    text, opt = _show(source, COMMON), _show(source, OPTIMIZER_UTILS)
    common = {name: _common_values(text, opt, name) for name in ("_pretrain_common",)
              + FINETUNE_COMMONS}
    common["peft_classes"] = {scheme: peft_defaults(_show(source, path), cls)
                              for scheme, (path, cls) in PEFT_CLASSES.items()}
    imported = {}
    for path in IMPORTED_CONSTANTS:
        imported.update(_File(_show(source, path), path).constants)
    rows, base, tuning = {}, {}, {}
    wrapped = set(_aliases(source).values())   # a private recipe a legacy name returns is read
    for rel in recipe_files(source)[0]:
        text = _show(source, _BASE + rel)
        file = _File(text, rel, {**imported, **_recipe_constants(source, text)})
        for name, fn in file.functions.items():
            finetune = "_sft_" in name or "_peft_" in name
            if (name.startswith("_") and name not in wrapped) or not name.endswith("_config") \
                    or ("_pretrain_" not in name and not finetune):
                continue
            values, hf, computed = _run(file, name, [], common)
            # a perf recipe starts from a pretrain or a fine-tuning recipe
            base[name] = (values, hf, [f"{rel}:{line}" for line in computed])
            keep = {k: v for k, v in sorted(values.items()) if k in FIELDS or k == "peft"}
            (tuning if finetune else rows)[name] = {
                "source": f"{_BASE}{rel}:{fn.lineno} {name}", "hf_model": hf,
                "values": keep, "computed": tuple(computed)}
    # the bases a perf recipe may call itself (``cfg = _sft_common()``,
    # perf_recipes/glm_moe_dsa/gb200/glm5.py:26)
    base.update({name: (common[name], None, []) for name in ("_pretrain_common",)
                 + FINETUNE_COMMONS})
    perf = perf_rows(source, mcore, base, (set(rows) | set(tuning), set(FIELDS) | {"peft"}))
    _check_shared(source, perf)
    aliases = {k: v for k, v in sorted(_aliases(source).items()) if v in rows or v in tuning}
    head = (f'"""Megatron-Bridge {COMMIT[:10]} pretrain recipes as data: GENERATED by '
            "``python -m tools.bridge_recipes`` (do not edit).\n\n"
            "Each row: the recipe function's file:line, its Hugging Face model, the values of "
            "the fields\nmemsym reads when the function returns, and the statements it did not "
            'read as literals\n(``computed``; :mod:`memsym.readers.bridge` transcribes the ones '
            "that matter).\nStored compact (:mod:`memsym.readers.bridge_rows`): each row the "
            "difference from an earlier one,\neach computed statement once.\n"
            '"""\n\nfrom .bridge_rows import expand_rows\n\n')
    computed = _Interned()
    lines = ["#: the recipe functions of recipes/<family>/<system>/<model>.py",
             "_RECIPES = {"] + _compact(rows, computed) + ["}"]
    lines += ["", "#: Megatron-Bridge's performance recipes (perf_recipes/<family>/<system>/): "
              "what each sets,", "#: through its base recipe and the helpers it calls "
              "(tools/bridge_recipes.py _Perf)", "_PERF_RECIPES = {"]
    lines += _compact(perf, computed) + ["}"]
    lines += ["", "#: the statements the rows did not read as literals (``computed``), by index",
              "COMPUTED = ("] + _wrapped_items(map(repr, computed.items)) + [")", "",
              "RECIPES = expand_rows(_RECIPES, COMPUTED)",
              "PERF_RECIPES = expand_rows(_PERF_RECIPES, COMPUTED)"]
    lines += ["", f"#: section -> its config's dataclass fields (with Megatron-LM {MCORE_COMMIT[:10]}'s "
              "bases)", "SECTION_FIELDS = {"]
    lines += [f"    {k!r}: {v!r}," for k, v in fields.items()]
    lines.append("}")
    lines += ["", "#: legacy name -> recipe function", "ALIASES = {"]
    lines += _wrapped_items([f"{k!r}: {v!r}" for k, v in sorted(aliases.items())])
    lines.append("}")
    return (head + f"COMMIT = {COMMIT!r}\nMCORE_COMMIT = {MCORE_COMMIT!r}\n\n" + "\n".join(lines)
            + "\n"), _finetune_text(tuning)


class _Interned:
    """Distinct strings in first-seen order, each with its index."""

    def __init__(self):
        self.items, self.index = [], {}

    def __call__(self, text: str) -> int:
        if text not in self.index:
            self.index[text] = len(self.items)
            self.items.append(text)
        return self.index[text]


def _cost(base: dict, values: dict) -> int:
    """Characters of ``values`` written as the difference from ``base``."""
    return sum(len(k) + len(repr(v)) + 4 for k, v in values.items()
               if k not in base or base[k] != v or type(base[k]) is not type(v)) \
        + sum(len(k) + 4 for k in base if k not in values)


def _compact(rows: dict, computed: _Interned) -> list:
    """One line per row of ``rows`` (in name order) as :func:`memsym.readers.bridge_rows.
    expand_rows` reads it: each row the difference from the earlier row it differs least
    from (or from nothing), its computed statements as indices of ``computed``."""
    lines, done = [], []
    for name in sorted(rows):
        row = rows[name]
        values = row["values"]
        like, best = None, _cost({}, values)
        for other in done:
            cost = _cost(rows[other]["values"], values) + len(other)
            if cost < best:
                like, best = other, cost
        base = rows[like]["values"] if like else {}
        changed = {k: v for k, v in values.items()
                   if k not in base or base[k] != v or type(base[k]) is not type(v)}
        unset = tuple(k for k in base if k not in values)
        indices = tuple(computed(c) for c in row["computed"])
        lines.append(f"    {name!r}: ({like!r}, {changed!r}, {unset!r}, {row['source']!r}, "
                     f"{row['hf_model']!r}, {indices!r}),")
        done.append(name)
    return lines


def _wrapped_items(items, width: int = 1000) -> list:
    """``items`` (texts) as lines of comma-separated items up to ``width`` characters."""
    lines, line = [], ""
    for text in items:
        if line and len(line) + len(text) + 2 > width:
            lines.append("    " + line)
            line = ""
        line += text + ", "
    if line:
        lines.append("    " + line.rstrip())
    return lines


def _finetune_text(rows: dict) -> str:
    """The text of ``memsym/readers/_bridge_finetune.py``: the SFT and PEFT recipes, one row a
    line, compact as the pretrain recipes."""
    head = (f'"""Megatron-Bridge {COMMIT[:10]} fine-tuning recipes (built on ``_sft_common`` and '
            "``_peft_common``,\nrecipes/common.py:136, :238) as data: GENERATED by ``python -m "
            "tools.bridge_recipes`` (do not edit).\n\nEach row as in "
            ":mod:`memsym.readers._bridge_recipes`; ``peft`` is the PEFT class\n(None: full "
            "fine-tuning) and ``peft.*`` its fields as the recipe leaves them.\n\"\"\"\n\n"
            "from .bridge_rows import expand_rows\n\n")
    computed = _Interned()
    lines = ["_FINETUNE_RECIPES = {"] + _compact(rows, computed) + ["}", "", "COMPUTED = ("]
    lines += _wrapped_items(map(repr, computed.items)) + [")", "",
                                               "FINETUNE_RECIPES = expand_rows(_FINETUNE_RECIPES, COMPUTED)"]
    return head + "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", default=DEFAULT_SOURCE, help="Megatron-Bridge git directory")
    p.add_argument("--mcore", default=DEFAULT_MCORE, help="Megatron-LM git directory")
    p.add_argument("--check", action="store_true", help="compare, write nothing")
    a = p.parse_args(argv)
    texts = dict(zip((OUT, FINETUNE_OUT), build(a.source, a.mcore)))
    if a.check:
        stale = [out.name for out, text in texts.items()
                 if not out.exists() or out.read_text() != text]
        print(f"{', '.join(stale)} differ from what the source gives" if stale else "current")
        return 1 if stale else 0
    for out, text in texts.items():
        out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
