r"""Megatron-LM's option table, ``memsym/readers/_megatron_flags.py``, generated from its parser.

``python -m tools.megatron_flags [--source DIR] [--check]`` (from the checkout's root) builds
the ``argparse`` parser of NVIDIA/Megatron-LM at the pinned commit :data:`COMMIT` -- the real
one: ``megatron/training/arguments.py:add_megatron_arguments`` run on an
``ArgumentParser(allow_abbrev=False)`` as ``parse_args`` makes it, its dataclass groups built
by ``argument_utils.py:ArgumentGroupFactory`` from the real config dataclasses -- and writes
one row per option string, ``option: (dest, arity, constant)``, in the parser's order.
``--check`` writes nothing and exits with status 1, printing a one-line summary of the
difference, when the file on disk is not what would be written;
``tests/test_megatron_flag_table.py`` runs the same comparison.  ``--source`` is a Megatron-LM
source tree at the commit: a full checkout, or (the default) the files the parser needs,
vendored unmodified in ``tools/data/megatron-lm-d98e8a64dd/``.

Building the parser without Megatron's dependencies
---------------------------------------------------
Importing ``megatron.training.arguments`` the ordinary way runs the package ``__init__``
files, which import most of Megatron-Core (Triton kernels, Transformer Engine, Apex, ...).
The parser needs none of that: only the modules in :data:`PINNED` define what it contains.
So this module imports under a finder that decides every non-standard-library import:

* the :data:`PINNED` files are executed from ``--source``, unmodified, after their size and
  git blob id are checked against the commit (a tree at another commit is refused);
* the packages in :data:`BARE` exist with their ``__init__`` not run;
* the modules in :data:`STUBS` are stand-ins whose every attribute is an inert class: they
  supply names the loaded files import but use only when Megatron runs (``torch``, say, is
  the type and default of fields the parser excludes, such as ``params_dtype``);
* any other import fails with ``ModuleNotFoundError``, as for a package that is not installed
  -- whatever this interpreter has installed, so the output does not depend on it.

Everything else is Megatron's own code.  The same 876 rows, in the same order (the 26 options
of ``BooleanOptionalAction``s aside, whose ``const`` is None: see the rows below), came from
importing a full checkout the ordinary way (CPU ``torch``; stubbed only the Triton kernels
``megatron.core.transformer.moe.ops.paged_stash`` and ``megatron.core.ssm.ops``, and, on
Python 3.11, ``typing.override`` for ``training/models/hybrid.py``), when this module was
written.  The modules are loaded with bytecode writing off, and :data:`sys.modules`,
:data:`sys.meta_path` and the warning filters are restored afterwards.

Each row: ``dest``; the arity -- 0 for actions that take no value (``store_true``,
``store_false``, ``BooleanOptionalAction``), 1 for ``nargs=None``, else ``nargs`` (``'+'``,
``'*'``, an int); the constant a 0-arity option stores (``action.const``; for a
``BooleanOptionalAction``, True for ``--x`` and False for ``--no-x``, as its ``__call__``
does), None for the others.  argparse's own ``-h``/``--help`` is left out.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import pathlib
import re
import sys
import types
import warnings

#: The repository root: this file is ``tools/megatron_flags.py`` of a source checkout.
ROOT = pathlib.Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as `python tools/megatron_flags.py`: this checkout first
    sys.path.insert(0, str(ROOT))

from memsym.errors import InvalidValueError, MemsymError  # noqa: E402

__all__ = ["COMMIT", "PINNED", "BARE", "STUBS", "VENDORED", "OUTPUT",
           "MODELOPT_OUTPUT", "check_source", "flags",
           "modelopt_flags", "render", "difference", "write", "main"]

#: The Megatron-LM commit the table is generated from (NVIDIA/Megatron-LM, main, 2026-08-22).
COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
#: The pinned Megatron-LM files, vendored unmodified (with its ``LICENSE``).
VENDORED = ROOT / "tools" / "data" / "megatron-lm-d98e8a64dd"
#: The generated table, relative to the repository root.
OUTPUT = pathlib.Path("memsym") / "readers" / "_megatron_flags.py"
#: ModelOpt's options, generated beside it (``pretrain_gpt.py`` adds them when ModelOpt imports).
MODELOPT_OUTPUT = pathlib.Path("memsym") / "readers" / "_megatron_modelopt_flags.py"

#: The Megatron-LM files executed to build the parser: path -> (git blob id, size in bytes)
#: at :data:`COMMIT` (``git rev-parse COMMIT:path``, ``git cat-file -s COMMIT:path``).
PINNED = {
    "megatron/training/arguments.py": ("50327de464b7dfd1c30a189d83b0350d1496530a", 219175),
    "megatron/training/argument_utils.py": ("124083ead832b34fd2dbd061295b972e81566ffc", 28305),
    "megatron/training/config/__init__.py": ("63e2c6ceaebe41d2d98e5acb253b292979edcc34", 768),
    "megatron/training/config/common_config.py":
        ("cb61f50c13ccbd54bce13952be46d13a5c430230", 6529),
    "megatron/training/config/training_config.py":
        ("34c257d8d6e4acd2170b3a142e20b9947a0bd150", 33785),
    "megatron/training/config/resilience_config.py":
        ("be2a56b3bfb9237829261fc9f4c008c461a821f3", 1574),
    "megatron/core/fault_injector.py": ("68e0464fad77f7cffdbee884165cefaf3e7a3d62", 8637),
    "megatron/core/transformer/__init__.py": ("75e3b485c4fcd4cf0878220d8838d0299926f15d", 358),
    "megatron/core/transformer/transformer_config.py":
        ("f4550603d55c462fec7b598817b09dff08404386", 165680),
    "megatron/core/model_parallel_config.py": ("157ae1437f59084758db056f86d3cbf97420e4ca", 26018),
    "megatron/core/enums.py": ("cb378d88e0f2b3338ab7e120faee0ff96c77ecee", 512),
    "megatron/core/transformer/enums.py": ("eb83c9c4ca003900e13deec29acc268b46ba6f1d", 3076),
    "megatron/core/transformer/cuda_graph_config.py":
        ("075e09ea94fd293656c6eef600794098be541f14", 5701),
    "megatron/core/inference/moe/__init__.py": ("cc64fb65110a0e24213843cca1ff9df7e11f65a1", 540),
    # the public stub of the unreleased Kitchen extension: HAVE_KITCHEN = False, so
    # _add_kitchen_quantization_arguments adds nothing
    "megatron/core/extensions/kitchen.py": ("a8a83fb341c68e5b02ef0886b108ec8c2d7c803b", 1013),
    # ModelOpt's options: pretrain_gpt.py:83-90 imports add_modelopt_args when nvidia-modelopt
    # imports, and :525-526 passes it to parse_and_validate_args (arguments.py:125-126)
    "megatron/post_training/arguments.py": ("2b1442b08ecdc6c1837c56af87299849eacf47da", 6034),
}

#: Packages whose ``__init__`` is not run (each imports much of Megatron-Core).
BARE = ("megatron", "megatron.core", "megatron.training", "megatron.core.inference",
        "megatron.core.extensions", "megatron.post_training")

#: Stand-in modules (and their submodules) -> what the loaded files take from them; none of
#: it is called while the parser is built.
STUBS = {
    "torch": "dtypes, torch.Tensor and F.gelu in annotations and defaults of fields the "
             "parser excludes; run-time code",
    "megatron.core.utils": "version probes and helpers called at run time (validate_args)",
    "megatron.core._rank_utils": "log_single_rank, called in __post_init__",
    "megatron.core.fusions": "quick_gelu, compared in __post_init__",
    "megatron.core.quantization": "RecipeConfig, the type of the excluded field quant_recipe",
    "megatron.core.msc_utils": "MultiStorageClientFeature, used in parse_args",
    "megatron.core.rerun_state_machine": "RerunStateMachine, used at run time",
    "megatron.core.transformer.pipeline_parallel_layer_layout":
        "PipelineParallelLayerLayout, the type of the excluded pipeline_model_parallel_layout",
    "megatron.core.transformer.module": "MegatronModule, imported by the package __init__",
    "megatron.core.transformer.spec_utils": "ModuleSpec, build_module, import_module",
    "megatron.core.transformer.transformer_layer": "layer classes, imported by the package "
                                                   "__init__",
    "megatron.core.inference.moe.fused_moe": "Triton MoE kernels, imported by the package "
                                             "__init__",
    "megatron.core.inference.moe.vllm_fused_moe": "vLLM MoE kernels, imported by the package "
                                                  "__init__",
    "megatron.training.global_vars": "set_global_variables, called after parsing",
    "megatron.training.utils": "print_rank_0, warn_rank_0 and other run-time helpers",
    "megatron.training.models": "GPTModelConfig, HybridModelConfig, used after parsing",
    "megatron.training.config.inference_config": "InferenceSetupConfig, used after parsing",
    "megatron.training.config.container": "config containers, used after parsing",
    "megatron.training.config.instantiate_utils": "target allowlist, used after parsing",
}

_BLOCK = 1 << 16  # bytes read at a time while hashing a pinned file


# ----------------------------------------------------------------------------------------------
# the pinned source
# ----------------------------------------------------------------------------------------------
def _blob_id(path: pathlib.Path, size: int) -> str:
    """The git blob id (SHA-1 of ``"blob <size>\\0"`` + content) of a file of known size."""
    digest = hashlib.sha1(b"blob %d\0" % size)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def check_source(source) -> pathlib.Path:
    """The source tree as a path, once every :data:`PINNED` file in it is the pinned version.

    Raises
    ------
    InvalidValueError
        When ``source`` is not a directory, or a pinned file is missing, not a regular file,
        or differs from :data:`COMMIT`'s (its size is compared before anything is read, so an
        oversized file is never read).
    """
    root = pathlib.Path(source)
    if not root.is_dir():
        raise InvalidValueError(f"--source {str(source)!r} is not a directory; give a "
                                f"Megatron-LM source tree at {COMMIT[:10]}")
    for rel, (blob, size) in PINNED.items():
        path = root / rel
        if not path.is_file():
            raise InvalidValueError(f"{path} is missing (or not a regular file); the source "
                                    f"must be a Megatron-LM tree at {COMMIT[:10]}")
        if path.stat().st_size != size or _blob_id(path, size) != blob:
            raise InvalidValueError(f"{path} is not Megatron-LM {COMMIT[:10]}'s {rel} (git blob "
                                    f"{blob[:10]}, {size} bytes); the table is pinned to that "
                                    f"commit")
    return root


# ----------------------------------------------------------------------------------------------
# the import sandbox
# ----------------------------------------------------------------------------------------------
class _StubType(type):
    """Metaclass of the stand-ins: any attribute of a stand-in class is another one."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in(f"{cls.__qualname__}.{name}")


class _StandIn(metaclass=_StubType):
    """An inert value: accepts any arguments, is callable, and its attributes are stand-ins."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return self

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in(f"{type(self).__qualname__}.{name}")


def _stand_in(name: str) -> type:
    # a class, not an instance: it must be usable in annotations (Optional[X]) and as a default
    return _StubType(name, (_StandIn,), {"__qualname__": name, "__module__": "stub"})


class _StubModule(types.ModuleType):
    """A module whose every public attribute is a (cached) stand-in class."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stand_in(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Decides every import outside the standard library while the parser is built."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        # module name -> file: megatron/a/b.py is megatron.a.b, megatron/a/__init__.py megatron.a
        self.real = {}
        for rel in PINNED:
            parts = rel[:-len(".py")].split("/")
            if parts[-1] == "__init__":
                parts.pop()
            self.real[".".join(parts)] = root / rel

    @staticmethod
    def _stubbed(name: str) -> bool:
        return any(name == stub or name.startswith(stub + ".") for stub in STUBS)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in sys.stdlib_module_names:
            return None  # the ordinary finders
        if fullname in self.real:
            file = self.real[fullname]
            package = [str(file.parent)] if file.name == "__init__.py" else None
            return importlib.util.spec_from_file_location(fullname, file,
                                                          submodule_search_locations=package)
        if fullname in BARE or self._stubbed(fullname):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)

    def create_module(self, spec):
        module = (types.ModuleType if spec.name in BARE else _StubModule)(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass  # a bare package runs no __init__; a stub has nothing to run


@contextlib.contextmanager
def _sandbox(root: pathlib.Path):
    """Import under :class:`_Finder`; restore the interpreter's import state afterwards."""
    saved_modules = dict(sys.modules)
    saved_finders = list(sys.meta_path)
    saved_bytecode = sys.dont_write_bytecode
    # modules already imported would bypass the finder: hide all but the standard library's
    for name in list(sys.modules):
        if name != "__main__" and name.partition(".")[0] not in sys.stdlib_module_names:
            del sys.modules[name]
    sys.meta_path.insert(0, _Finder(root))
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            # ArgumentGroupFactory prints a WARNING for fields typed from metadata; not ours
            warnings.simplefilter("ignore")
            yield
    finally:
        sys.meta_path[:] = saved_finders
        sys.dont_write_bytecode = saved_bytecode
        for name in list(sys.modules):
            if name not in saved_modules:
                del sys.modules[name]
        sys.modules.update(saved_modules)


# ----------------------------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------------------------
def _parser(source=VENDORED) -> tuple[argparse.ArgumentParser, int]:
    """The parser ``pretrain_gpt.py`` builds when ModelOpt imports, and how many of its actions
    are Megatron's own (ModelOpt's follow)."""
    root = check_source(source)
    try:
        with _sandbox(root):
            arguments = importlib.import_module("megatron.training.arguments")
            # as megatron/training/arguments.py:parse_args makes it
            parser = argparse.ArgumentParser(description="Megatron-LM Arguments",
                                             allow_abbrev=False)
            arguments.add_megatron_arguments(parser)
            own = len(parser._actions)
            # parse_args:125-126 (extra_args_provider), pretrain_gpt.py:525-526
            importlib.import_module("megatron.post_training.arguments").add_modelopt_args(parser)
    except ModuleNotFoundError as err:  # what moving the pin would meet: a new import
        raise InvalidValueError(f"building Megatron's parser imported {err.name!r}, which "
                                f"tools/megatron_flags.py neither runs nor stands in for (add "
                                f"it to PINNED, BARE or STUBS)") from None
    return parser, own


def _tables(source=VENDORED) -> tuple[dict, dict]:
    """Megatron's options and ModelOpt's, each ``{option: (dest, arity, constant)}`` in the
    parser's order, from the parser ``pretrain_gpt.py`` builds when ModelOpt imports."""
    parser, own = _parser(source)
    return _rows(parser._actions[:own]), _rows(parser._actions[own:])


def defaults(source=VENDORED) -> dict:
    """``{dest: default}`` of Megatron's own options, as its parser holds them (the first
    action of a dest; ``argparse.SUPPRESS`` where the parser suppresses it)."""
    parser, own = _parser(source)
    out = {}
    for action in parser._actions[:own]:
        out.setdefault(action.dest, action.default)
    return out


def _rows(actions) -> dict[str, tuple]:
    """``{option: (dest, arity, constant)}`` of argparse actions."""
    table = {}
    for action in actions:
        if isinstance(action, argparse._HelpAction):
            continue  # argparse's -h/--help: prints the usage and exits, not a Megatron option
        arity = 1 if action.nargs is None else action.nargs
        for option in action.option_strings:
            if arity != 0:
                constant = None
            elif isinstance(action, argparse.BooleanOptionalAction):
                constant = not option.startswith("--no-")  # BooleanOptionalAction.__call__
            else:
                constant = action.const
            table[option] = (action.dest, arity, constant)
    return table


def flags(source=VENDORED) -> dict[str, tuple]:
    """``{option: (dest, arity, constant)}`` in the parser's order, from Megatron's own parser.

    Raises
    ------
    InvalidValueError
        When ``source`` is not a Megatron-LM tree at :data:`COMMIT` (:func:`check_source`), or
        its code imports a module the sandbox neither runs nor stands in for.
    """
    return _tables(source)[0]


def modelopt_flags(source=VENDORED) -> dict[str, tuple]:
    """ModelOpt's options (``megatron/post_training/arguments.py:add_modelopt_args``), as
    :func:`flags` dumps Megatron's."""
    return _tables(source)[1]


_DOCSTRING = f'''\
"""Megatron-LM's argument table: every option ``pretrain_gpt.py`` accepts, its ``dest`` and arity.

GENERATED by ``tools/megatron_flags.py``; do not edit.  Regenerate it from the checkout's root
with ``python -m tools.megatron_flags`` (``--check``: report, write nothing); its default
``--source`` is the pinned Megatron-LM files vendored in ``tools/data/megatron-lm-{COMMIT[:10]}/``.
``tests/test_megatron_flag_table.py`` fails when this file is not what the generator writes.

The ``argparse`` parser built by ``megatron/training/arguments.py:add_megatron_arguments`` of
NVIDIA/Megatron-LM ``{COMMIT[:10]}`` (main, 2026-08-22; the dataclass-generated groups of
``argument_utils.py:ArgumentGroupFactory`` included), dumped action by action as
``option: (dest, arity, constant)``.  Arity: 0 for store_true/store_false/BooleanOptional
actions, 1 for a single value, ``'+'``/``'*'`` for lists, an int for a fixed count; the
constant is the value a 0-arity flag stores (None otherwise; a ``BooleanOptionalAction``
stores True for ``--x`` and False for ``--no-x``).  Left out: argparse's own ``-h``/``--help``,
Kitchen's options (``HAVE_KITCHEN`` is False at this commit) and ModelOpt's, which
:mod:`memsym.readers._megatron_modelopt_flags` holds (``pretrain_gpt.py:83-90`` adds them).
Megatron parses with ``allow_abbrev=False`` (``parse_args``), so prefixes are not accepted.
"""
'''


_MODELOPT_DOCSTRING = f'''\
"""ModelOpt's Megatron-LM options: those ``pretrain_gpt.py`` adds when ``nvidia-modelopt`` imports.

GENERATED by ``tools/megatron_flags.py`` beside :mod:`memsym.readers._megatron_flags` (same
format, same parser); do not edit.  ``pretrain_gpt.py:83-90`` at ``{COMMIT[:10]}`` imports
``megatron/post_training/arguments.py:add_modelopt_args`` when ModelOpt imports and passes it to
``parse_and_validate_args`` as ``extra_args_provider`` (``:525-526``; ``arguments.py:125-126``
runs it on the parser after Megatron's own options).
"""
'''


def render(source=VENDORED, modelopt: bool = False) -> str:
    """The text of ``memsym/readers/_megatron_flags.py`` generated from ``source``
    (``modelopt``: of :data:`MODELOPT_OUTPUT`)."""
    table = _tables(source)[1 if modelopt else 0]
    rows = "".join(f"    {option!r}: {row!r},\n" for option, row in table.items())
    if modelopt:
        return _MODELOPT_DOCSTRING + "\nMODELOPT = {\n" + rows + "}\n"
    return _DOCSTRING + "\nFLAGS = {\n" + rows + "}\n"


_ROW = re.compile(r"^    ('[^']*'): (.*),$", re.M)


def difference(old: str, new: str) -> str | None:
    """One line saying how the table text ``old`` differs from ``new``; None when equal.

    Rows are compared as text (no evaluation): options added, removed, or with another row.

    Examples
    --------
    >>> old = "FLAGS = {\\n    '--a': ('a', 1, None),\\n    '--b': ('b', 0, True),\\n}\\n"
    >>> new = "FLAGS = {\\n    '--a': ('a', '+', None),\\n    '--c': ('c', 1, None),\\n}\\n"
    >>> difference(old, new)
    "option: 1 added ('--c'), 1 removed ('--b'), 1 changed ('--a')"
    >>> difference(old, old) is None
    True
    >>> difference("# edited\\n" + old, old)
    'same rows; the docstring, the order or the layout differs'
    """
    if old == new:
        return None
    before, after = dict(_ROW.findall(old)), dict(_ROW.findall(new))
    parts = []
    for what, names in (("added", [k for k in after if k not in before]),
                        ("removed", [k for k in before if k not in after]),
                        ("changed", [k for k in after if k in before and before[k] != after[k]])):
        if names:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            parts.append(f"{len(names)} {what} ({shown})")
    if not parts:
        return "same rows; the docstring, the order or the layout differs"
    return ("option: " if parts[0].startswith("1 ") else "options: ") + ", ".join(parts)


def write(source=VENDORED, root=None) -> bool:
    """Write the tables under ``root`` (default: this checkout) if changed; True if written."""
    written = False
    for output, modelopt in ((OUTPUT, False), (MODELOPT_OUTPUT, True)):
        text = render(source, modelopt)
        path = pathlib.Path(root or ROOT) / output
        if not (path.is_file() and path.read_text(encoding="utf-8") == text):
            path.write_text(text, encoding="utf-8")
            written = True
    return written


def main(argv=None) -> int:
    """``python -m tools.megatron_flags [--source DIR] [--check]``: exit 0, 1 (stale), 2."""
    parser = argparse.ArgumentParser(prog="python -m tools.megatron_flags",
                                     description=f"Regenerate {OUTPUT} and {MODELOPT_OUTPUT} "
                                     f"from Megatron-LM's argument parser at {COMMIT[:10]}.")
    parser.add_argument("--source", default=str(VENDORED),
                        help="a Megatron-LM source tree at the pinned commit "
                        "(default: the vendored files, tools/data/megatron-lm-d98e8a64dd)")
    parser.add_argument("--check", action="store_true",
                        help=f"write nothing; exit 1 if {OUTPUT} or {MODELOPT_OUTPUT} is stale")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = 0
            for output, modelopt in ((OUTPUT, False), (MODELOPT_OUTPUT, True)):
                path = ROOT / output
                old = path.read_text(encoding="utf-8") if path.is_file() else ""
                summary = difference(old, render(args.source, modelopt))
                if summary:
                    print(f"stale: {output}: {summary} (run python -m tools.megatron_flags)",
                          file=sys.stderr)
                    stale = 1
            return stale
        if write(args.source):
            print(f"wrote {OUTPUT} and {MODELOPT_OUTPUT}")
    except (MemsymError, OSError) as err:  # one line, like the memsym command: no traceback
        print(f"python -m tools.megatron_flags: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
