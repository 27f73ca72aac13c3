"""Read a torchtitan Python job config (the newest torchtitan's form) without running it.

torchtitan after v0.2.2 describes a job as a function returning ``Trainer.Config(...)`` in a
``config_registry.py`` (``torchtitan/models/llama3/config_registry.py: llama3_8b``), chosen with
``--module llama3 --config llama3_8b``.  This module parses such a file with :mod:`ast` and
evaluates only what is plainly data:

* literals (numbers, strings, booleans, None, lists, tuples, dicts) and integer ``+ - * //``
  of literals (``8 * 8192``);
* dataclass constructor calls (``ParallelismConfig(...)``, ``FullAC.Config()``) with keyword
  arguments, and ``model_registry("FLAVOR", converters=[...], num_mtp_layers=N)`` of a
  torchtitan model module;
* in the function: assignments to a name or to an attribute path of a config
  (``config.parallelism.tensor_parallel_degree = 4``), calls of another config function of
  the same file without arguments (``config = llama3_8b()``), ``assert``, ``import``,
  nested ``def`` (bound to an unread value), ``return``.

Anything else a value holds (``DATASETS["c4"]``, ``default_adamw(lr=3e-4)``) is kept as an
unread value: harmless where memsym does not read it, refused in one line where it does
(a degree, the batch, the context length, the model).  Any other statement (``if``, ``for``,
``with``, an augmented assignment, a call for its effect) refuses the config in one line.
Nothing is imported, compiled or executed.

The keys are those of the newest snapshot, pytorch/torchtitan b5bcd76c66d0 (2026-08-21):
``torchtitan/config/configs.py`` (TrainingConfig, ParallelismConfig, CompileConfig),
``torchtitan/trainer.py`` (Trainer.Config defaults: SelectiveAC; the token budget:
``num_tokens_per_microbatch_per_dp_rank * num_pp_microbatches`` per data-parallel rank and
micro-step, ``num_tokens_per_train_step`` = that x dp unless set),
``torchtitan/distributed/activation_checkpoint.py`` (SelectiveAC = per-op SAC, FullAC,
MemoryBudgetAC).  They are translated into the v0.2 TOML's keys and checked by
:func:`memsym.readers.torchtitan.torchtitan_settings`.
"""

from __future__ import annotations

import ast
import os
import warnings

from ..errors import InvalidValueError
from ..text import printable
from .torchtitan_models import NOT_COUNTED, TORCHTITAN_FLAVORS
from ..limits import MAX_CONFIG_CALL_DEPTH, MAX_NESTING, check_text
from ._values import MAX_BATCH, MAX_BYTES_INPUT, MAX_LAYERS, MAX_SEQ, read_bounded
from .torchtitan import TORCHTITAN_KEYS, read_torchtitan_toml, torchtitan_settings
from .torchtitan_models import NOT_COUNTED, torchtitan_architecture

__all__ = ["read_torchtitan_python", "read_torchtitan_config", "split_config_spec"]

WHAT = "torchtitan Python config"
_BIG = 2**62      # an integer expression's bound (every size memsym reads is far below)


class _Unread:
    """A value memsym does not evaluate (its source text, shortened, and line)."""

    def __init__(self, node):
        self.text = ast.unparse(node)[:50].replace("\n", " ")
        self.line = getattr(node, "lineno", 0)

    def __repr__(self):
        return f"<unread {self.text!r} (line {self.line})>"


class _Config:
    """A dataclass constructor call: its dotted name and keyword values."""

    def __init__(self, name, kwargs, line=0):
        self.name, self.kwargs, self.line = name, kwargs, line

    def copy(self):
        return _Config(self.name, {k: v.copy() if isinstance(v, _Config) else v
                                   for k, v in self.kwargs.items()}, self.line)


def _dotted(node):
    # Name or Attribute chain of Names -> "a.b.c"; None otherwise (iterative: no recursion)
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
        if len(parts) > MAX_NESTING:
            return None
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _fail(line, what):
    raise InvalidValueError(f"{WHAT} line {line}: {what}")


def _check_depth(tree):
    # the syntax tree's depth, walked without recursion: ast.unparse and the reader recurse per
    # level, and chains without brackets (a.b.c over many lines, a + b + ...) escape
    # check_text's bracket count; real configs are 12-16 levels deep
    stack = [(tree, 1, 1)]
    while stack:
        node, depth, line = stack.pop()
        line = getattr(node, "lineno", line)
        if depth > MAX_NESTING:
            raise InvalidValueError(f"{WHAT} nests deeper than {MAX_NESTING} syntax levels (line "
                                    f"{line}); real configs nest 12-16")
        stack.extend((child, depth + 1, line) for child in ast.iter_child_nodes(node))


def split_config_spec(spec) -> tuple:
    """``(path, function)`` of ``config_registry.py:llama3_8b`` (function None without one).

    >>> split_config_spec("models/llama3/config_registry.py:llama3_8b")
    ('models/llama3/config_registry.py', 'llama3_8b')
    >>> split_config_spec("job.py")
    ('job.py', None)
    """
    spec = os.fspath(spec)
    head, sep, tail = spec.rpartition(":")
    if sep and head.endswith(".py") and tail.isidentifier():
        return head, tail
    return spec, None


class _Reader:
    def __init__(self, tree, path):
        self.functions, self.registries, self.constants = {}, {}, {}
        package = os.path.basename(os.path.dirname(os.path.abspath(path))) if path else None
        self.package = package
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.functions[node.name] = node
            elif isinstance(node, ast.ImportFrom):
                self._import(node, package)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name):
                try:
                    value = self.value(node.value, {}, 0, 0)
                except InvalidValueError:
                    continue      # refused where it is used (an unread name there)
                if not isinstance(value, (_Unread, _Config)):
                    self.constants[node.targets[0].id] = value

    def _import(self, node, package):
        # model_registry of torchtitan.models.X (or "from . import model_registry" in
        # torchtitan/models/X/config_registry.py): the model module X names the model
        for alias in node.names:
            if alias.name != "model_registry":
                continue
            if node.level == 0 and (node.module or "").startswith("torchtitan.models."):
                module = node.module.split(".")[2]
            elif node.level == 1 and not node.module:
                module = package
            else:
                continue
            if module:
                self.registries[alias.asname or alias.name] = module

    def value(self, node, env, depth, calls):
        if depth > MAX_NESTING:
            _fail(node.lineno, f"an expression nested deeper than {MAX_NESTING} levels")
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (int, float, str, bool, type(None))):
                return node.value
            return _Unread(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and \
                isinstance(node.operand, ast.Constant) and \
                type(node.operand.value) in (int, float):
            return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult,
                                                                ast.FloorDiv)):
            a = self.value(node.left, env, depth + 1, calls)
            b = self.value(node.right, env, depth + 1, calls)
            if type(a) is int and type(b) is int and abs(a) < _BIG and abs(b) < _BIG:
                if isinstance(node.op, ast.FloorDiv):
                    return a // b if b else _Unread(node)
                out = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}[type(node.op)]
                return out if abs(out) < _BIG else _Unread(node)
            return _Unread(node)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(x, env, depth + 1, calls) for x in node.elts]
        if isinstance(node, ast.Dict):
            if not all(isinstance(k, ast.Constant) for k in node.keys):
                return _Unread(node)
            return {k.value: self.value(v, env, depth + 1, calls)
                    for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            return self.constants.get(node.id, _Unread(node))
        if isinstance(node, ast.Call):
            return self.call(node, env, depth, calls)
        return _Unread(node)

    def call(self, node, env, depth, calls):
        name = _dotted(node.func)
        if name is None or any(isinstance(k.arg, type(None)) for k in node.keywords) or \
                any(isinstance(a, ast.Starred) for a in node.args):
            return _Unread(node)
        kwargs = {k.arg: self.value(k.value, env, depth + 1, calls) for k in node.keywords}
        if name in self.registries:
            if len(node.args) != 1:
                return _Unread(node)
            kwargs["flavor"] = self.value(node.args[0], env, depth + 1, calls)
            kwargs["module"] = self.registries[name]
            return _Config("model_registry", kwargs, node.lineno)
        if name in self.functions and not node.args and not node.keywords:
            return self.function(name, calls + 1)
        if name.endswith("Config") and not node.args:
            return _Config(name, kwargs, node.lineno)
        return _Unread(node)

    def function(self, name, calls=0):
        if calls > MAX_CONFIG_CALL_DEPTH:
            raise InvalidValueError(f"{WHAT}: {name} is reached through more than "
                                    f"{MAX_CONFIG_CALL_DEPTH} config functions")
        fn = self.functions[name]
        if fn.args.args or fn.args.posonlyargs or fn.args.kwonlyargs or fn.args.vararg or \
                fn.args.kwarg:
            _fail(fn.lineno, f"{name} takes arguments (torchtitan's --config calls it with none)")
        env = {}
        for st in fn.body:
            if isinstance(st, ast.Return):
                if st.value is None:
                    _fail(st.lineno, f"{name} returns nothing")
                out = self.value(st.value, env, 0, calls)
                return out.copy() if isinstance(out, _Config) else out
            if isinstance(st, (ast.Assert, ast.Pass, ast.Import, ast.ImportFrom)) or (
                    isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant)):
                continue     # cannot change the config (an import is not performed)
            if isinstance(st, ast.FunctionDef):
                env[st.name] = _Unread(st)
                continue
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                if st.value is None or len(targets) != 1:
                    _fail(st.lineno, "only single assignments are read")
                self.assign(targets[0], self.value(st.value, env, 0, calls), env, st.lineno)
                continue
            kind = ("a call for its effect" if isinstance(st, ast.Expr) else
                    f"the {type(st).__name__.lower()} statement")
            _fail(st.lineno, f"{kind} in {name} is not read (memsym reads config functions "
                  "of assignments of literal values and config constructors only; nothing is "
                  "executed)")
        _fail(fn.lineno, f"{name} has no return statement")

    def assign(self, target, value, env, line):
        if isinstance(target, ast.Name):
            env[target.id] = value
            return
        name = _dotted(target)
        if name is None:
            _fail(line, "only assignments to a name or an attribute path are read")
        root, *path = name.split(".")
        obj = env.get(root)
        if not isinstance(obj, _Config):
            _fail(line, f"{name}: {root} is not a config read from this file")
        for attr in path[:-1]:
            nxt = obj.kwargs.get(attr)
            if nxt is None:     # a field left at its default dataclass: set on an empty one
                nxt = obj.kwargs[attr] = _Config(f"{attr} (default)", {}, line)
            if not isinstance(nxt, _Config):
                _fail(line, f"{name}: {attr} is not a config read from this file")
            obj = nxt
        obj.kwargs[path[-1]] = value


def _literal(value, where, types):
    if isinstance(value, _Unread):
        raise InvalidValueError(f"{WHAT}: {where} = {value.text} (line {value.line}) is not a "
                                "literal; memsym reads literal values only")
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise InvalidValueError(f"{WHAT}: {where} must be a {types[0].__name__}, got "
                                f"{value!r:.40}")
    return value


def _section(cfg, key, ctor_ending):
    sec = cfg.kwargs.get(key)
    if sec is None:
        return {}
    if not isinstance(sec, _Config) or not (sec.name.endswith(ctor_ending)
                                            or sec.name.endswith("(default)")):
        raise InvalidValueError(f"{WHAT}: {key} must be {ctor_ending}(...) with literal "
                                f"values, got {getattr(sec, 'text', sec)!r:.50}")
    return sec.kwargs


#: converter class -> how memsym counts it (the others are refused)
_CONVERTERS = {"Float8LinearConverter.Config": "float8", "MXFP8LinearConverter.Config": "mxfp8",
               "NVFP4LinearConverter.Config": "nvfp4",
               "Float8GroupedExpertsConverter.Config": "float8 grouped-experts",
               "MXFP8GroupedExpertsConverter.Config": "mxfp8 grouped-experts"}


def read_torchtitan_python(source, world_size: int | None = None) -> dict:
    """A torchtitan Python job config as :func:`read_torchtitan_toml`'s plain data.

    Parameters
    ----------
    source : str or path
        ``file.py`` or ``file.py:FUNCTION`` (the function torchtitan's ``--config`` names;
        needed when the file defines more than one).
    world_size : int, optional
        W [GPUs]; needed when ``data_parallel_shard_degree`` is -1 (the default).

    Returns
    -------
    dict
        As :func:`memsym.readers.torchtitan.read_torchtitan_toml`, the ``model`` with
        ``mtp_layers`` and the ``layout`` with ``sequence_parallel``.

    Examples
    --------
    >>> import tempfile, os
    >>> text = ('from torchtitan.models.llama3 import model_registry\\n'
    ...         'def job() -> Trainer.Config:\\n'
    ...         '    return Trainer.Config(model_spec=model_registry("8B"),\\n'
    ...         '        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=2 * 8192,\\n'
    ...         '                                max_context_length=8192),\\n'
    ...         '        parallelism=ParallelismConfig(tensor_parallel_degree=8),\\n'
    ...         '        activation_checkpoint=FullAC.Config())\\n')
    >>> with tempfile.TemporaryDirectory() as d:
    ...     path = os.path.join(d, "job.py")
    ...     _ = open(path, "w").write(text)
    ...     c = read_torchtitan_python(path, world_size=64)
    >>> c["model"], c["layout"]["dp_shard"], c["training"]["local_batch_size"], c["training"]["ac_mode"]
    ({'name': 'llama3', 'flavor': '8B', 'mtp_layers': 0}, 8, 2, 'full')
    """
    path, function = split_config_spec(source)
    text = read_bounded(path, WHAT, MAX_BYTES_INPUT)
    check_text(text, WHAT, "python")
    try:
        # the parser's SyntaxWarnings ("invalid decimal literal") would print beside memsym's
        # one line: the text is judged by what it parses to, not warned about
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text, filename="<config>")
    except (RecursionError, MemoryError):
        raise InvalidValueError(f"{WHAT} nests too deeply for Python's parser") from None
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        raise InvalidValueError(f"{WHAT} is not valid Python"
                                + (f" (line {line})" if line else "")) from None
    _check_depth(tree)
    reader = _Reader(tree, path)
    if function is None:
        configs = [n for n, f in reader.functions.items()
                   if f.returns is not None and ast.unparse(f.returns).endswith("Config")]
        if len(configs) != 1:
            shown = ", ".join(configs[:8]) + (", ..." if len(configs) > 8 else "")
            raise InvalidValueError(f"{WHAT} defines {len(configs)} config functions"
                                    + (f" ({shown})" if configs else "")
                                    + ": name one as FILE.py:FUNCTION (torchtitan's --config)")
        function = configs[0]
    if function not in reader.functions:
        raise InvalidValueError(f"{WHAT} has no function {function!r:.60}")
    said = _model_of_a_copy(reader, function)
    cfg = reader.function(function)
    if not isinstance(cfg, _Config) or not cfg.name.endswith("Trainer.Config"):
        raise InvalidValueError(f"{WHAT}: {function} does not return Trainer.Config(...) with "
                                f"literal values (it returns {getattr(cfg, 'text', cfg)!r:.50})")
    out = _settings(cfg, world_size)
    out["notes"] = (*said, *out.get("notes", ()))
    return out


def _model_of_a_copy(reader, function: str) -> list:
    """Where ``from . import model_registry`` names a folder that is no torchtitan model (a
    copy of ``torchtitan/models/X/config_registry.py`` kept elsewhere), the model the config
    function is named for (``llama3_8b``: llama3; the longest model name it starts with),
    said in the notes returned; refused in one line where it names none."""
    known, said = {name for name, _ in TORCHTITAN_FLAVORS} | set(NOT_COUNTED), []
    for alias, module in list(reader.registries.items()):
        if module != reader.package or module in known:
            continue
        named = [m for m in known if function == m or function.startswith(m + "_")]
        if not named:
            raise InvalidValueError(
                f"{WHAT} imports model_registry from its own folder ({printable(module, 40)!r}), "
                "which names no torchtitan model, and its function "
                f"{printable(function, 60)!r} names none either (known: "
                f"{', '.join(sorted(known))}): keep it in torchtitan/models/<model>/ or give "
                "the MODEL")
        reader.registries[alias] = max(named, key=len)
        said.append(f"model {reader.registries[alias]} read from the function's name "
                    f"{printable(function, 60)}: the file's folder "
                    f"({printable(module, 40)!r}) names no torchtitan model")
    return said


#: b5bcd76c6's ParallelismConfig (config/configs.py:282-291) has expert_parallel_degree and
#: no expert TP: EP borrows its ranks from dp_shard x cp x tp (parallel_dims.py:187-192) and
#: the routed experts are sharded on EP only (models/common/MOE_SHARDING.md), which the v0.2
#: keys spell as expert_tensor_parallel_degree = 1 (its default)
_NO_ETP = (f"{WHAT}: parallelism.expert_tensor_parallel_degree is torchtitan v0.2.x's key; "
           "the Python config's ParallelismConfig (b5bcd76c6) has none (the experts are split "
           "over expert_parallel_degree only): remove it")


def _settings(cfg, world_size):
    # the model first: a model memsym does not count is the one line to say
    model, formats = _model(cfg.kwargs.get("model_spec"))
    pairs, notes = [], []
    read = {k for s, k in TORCHTITAN_KEYS if s == "parallelism"}
    par = _section(cfg, "parallelism", "ParallelismConfig")
    if "expert_tensor_parallel_degree" in par:
        raise InvalidValueError(_NO_ETP)
    for key, v in par.items():
        if key in read or key in ("num_pp_microbatches", "enable_sequence_parallel"):
            kind = (bool,) if key in ("enable_sequence_parallel", "disable_loss_parallel") else \
                (str,) if key in ("pipeline_parallel_schedule", "fsdp_reshard_after_forward") \
                else (int,)
            if key == "pipeline_parallel_layers_per_stage" and v is None:
                continue
            _literal(v, f"parallelism.{key}", kind)
            if key not in ("num_pp_microbatches", "enable_sequence_parallel"):
                pairs.append(("parallelism", key, v))
        else:
            pairs.append(("parallelism", key, None))    # not read: listed as ignored
    p = par.get("pipeline_parallel_degree", 1)
    # trainer.py: the pipeline micro-batches per data-parallel rank count only with PP on
    n_pp = par.get("num_pp_microbatches", 1) if p > 1 else 1
    if not 1 <= n_pp <= MAX_BATCH:
        raise InvalidValueError(f"{WHAT}: parallelism.num_pp_microbatches must be between 1 "
                                f"and {MAX_BATCH}, got {n_pp}")
    trn = _section(cfg, "training", "TrainingConfig")
    got = {k: _literal(trn[k], f"training.{k}", (int,)) for k in
           ("num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step",
            "max_context_length") if k in trn}
    ctx = got.get("max_context_length", 2048)
    tokens = got.get("num_tokens_per_microbatch_per_dp_rank", 16384)
    if not 1 <= ctx <= MAX_SEQ or not 1 <= tokens <= MAX_SEQ * MAX_BATCH:
        raise InvalidValueError(f"{WHAT}: training.max_context_length must be between 1 and "
                                f"{MAX_SEQ}, num_tokens_per_microbatch_per_dp_rank at most "
                                f"{MAX_SEQ * MAX_BATCH}")
    if tokens % ctx:
        raise InvalidValueError(f"{WHAT}: num_tokens_per_microbatch_per_dp_rank {tokens} is not "
                                f"a multiple of max_context_length {ctx}: memsym counts "
                                "micro-batches of whole packed sequences")
    mbs = tokens // ctx
    pairs += [("training", "seq_len", ctx), ("training", "local_batch_size", mbs * n_pp),
              ("parallelism", "pipeline_parallel_microbatch_size", mbs)]
    step = got.get("num_tokens_per_train_step", -1)
    if step != -1:
        if step < 1 or step % ctx:
            raise InvalidValueError(f"{WHAT}: num_tokens_per_train_step {step} is not a "
                                    f"multiple of max_context_length {ctx}")
        pairs.append(("training", "global_batch_size", step // ctx))
    for key in ("dtype", "mixed_precision_param", "mixed_precision_reduce"):
        if key in trn:
            pairs.append(("training", key, _literal(trn[key], f"training.{key}", (str,))))
    if "enable_cpu_offload" in trn:
        pairs.append(("training", "enable_cpu_offload",
                      _literal(trn["enable_cpu_offload"], "training.enable_cpu_offload", (bool,))))
    ac = cfg.kwargs.get("activation_checkpoint", "default")
    if ac is None:
        pairs.append(("activation_checkpoint", "mode", "none"))
    elif ac == "default" or (isinstance(ac, _Config) and ac.name.endswith("SelectiveAC.Config")):
        # Trainer.Config's default; SelectiveAC is torchtitan's per-op SAC
        pairs += [("activation_checkpoint", "mode", "selective"),
                  ("activation_checkpoint", "selective_ac_option", "op")]
    elif isinstance(ac, _Config) and ac.name.endswith("FullAC.Config"):
        pairs.append(("activation_checkpoint", "mode", "full"))
    elif isinstance(ac, _Config) and ac.name.endswith("MemoryBudgetAC.Config"):
        pairs.append(("activation_checkpoint", "mode", "memory_budget"))
    else:
        raise InvalidValueError(f"{WHAT}: activation_checkpoint must be SelectiveAC.Config(), "
                                "FullAC.Config(), MemoryBudgetAC.Config() or None, got "
                                f"{getattr(ac, 'text', getattr(ac, 'name', ac))!r:.50}")
    comp = _section(cfg, "compile", "CompileConfig")
    if "enable" in comp:
        pairs.append(("compile", "enable", _literal(comp["enable"], "compile.enable", (bool,))))
    if "components" in comp:
        pairs.append(("compile", "components",
                      _literal(comp["components"], "compile.components", (list,))))
    if formats:
        # the converters swap nn.Linear for low-precision GEMMs; FSDP2 keeps the parameters
        pairs.append(("model", "converters", ["float8"]))
        notes.append(f"{', '.join(formats)} linear converters: counted as float8 is "
                     "(parameters and states as FSDP2 keeps them)")
    # the other fields (loss, optimizer, dataloader, ...) are listed as ignored, unread
    pairs += [("", k, None) for k in cfg.kwargs
              if k not in ("parallelism", "training", "activation_checkpoint", "compile",
                           "model_spec")]
    out = torchtitan_settings(pairs, world_size, notes)
    out["model"] = model
    sp = par.get("enable_sequence_parallel", True)
    out["layout"]["sequence_parallel"] = bool(sp) and out["layout"]["t"] > 1
    return out


def _model(spec):
    # model_spec=model_registry("FLAVOR", converters=[...], num_mtp_layers=N) -> name, flavor
    if spec is None:
        return {}, ()
    if not isinstance(spec, _Config) or spec.name != "model_registry":
        raise InvalidValueError(f"{WHAT}: model_spec = {getattr(spec, 'text', spec)!r:.50} is "
                                "not model_registry(\"FLAVOR\") of a torchtitan model module; "
                                "give the MODEL (a preset or a Hugging Face config.json)")
    kw = spec.kwargs
    flavor = _literal(kw["flavor"], "model_registry flavor", (str,))
    if kw["module"] in NOT_COUNTED:
        torchtitan_architecture(kw["module"], flavor)     # its one-line refusal
    mtp = _literal(kw.get("num_mtp_layers", 0), "model_registry num_mtp_layers", (int,))
    if not 0 <= mtp <= MAX_LAYERS:
        raise InvalidValueError(f"{WHAT}: num_mtp_layers must be between 0 and {MAX_LAYERS}")
    formats = []
    converters = kw.get("converters") or []
    for c in _literal(converters, "model_registry converters", (list,)):
        kind = _CONVERTERS.get(getattr(c, "name", None))
        if kind is None:
            raise InvalidValueError(f"{WHAT}: model converter "
                                    f"{getattr(c, 'name', getattr(c, 'text', c))!r:.50} is not "
                                    f"modelled (memsym reads {', '.join(_CONVERTERS)})")
        formats.append(kind)
    return {"name": kw["module"], "flavor": flavor, "mtp_layers": mtp}, tuple(formats)


def read_torchtitan_config(source, world_size: int | None = None) -> dict:
    """A torchtitan job config by its suffix: ``.py`` (or ``.py:FUNCTION``) as a Python
    config (:func:`read_torchtitan_python`), anything else as a v0.2 TOML
    (:func:`memsym.readers.torchtitan.read_torchtitan_toml`).

    Parameters
    ----------
    source : str or path
        The config file (``FILE.py[:FUNCTION]`` or a TOML path), or TOML text.
    world_size : int, optional
        The number of GPUs G [GPUs] (torchtitan's degrees of -1 take what is left).

    Examples
    --------
    >>> read_torchtitan_config("[training]\\nlocal_batch_size = 2\\n", 8)["layout"]["dp_shard"]
    8
    """
    # TOML text (it holds a newline) is never a path
    if isinstance(source, (str, os.PathLike)) and "\n" not in os.fspath(source) and \
            split_config_spec(os.fspath(source))[0].endswith(".py"):
        return read_torchtitan_python(source, world_size)
    return read_torchtitan_toml(source, world_size)
