"""The cited formulas, one module per family (model states, activations, communication, ...)."""

import importlib


def __getattr__(name):
    # ``memsym.terms.<module>`` after a bare ``import memsym`` (the package loads its names on
    # first use, memsym/__init__.py): the module is imported when first reached

    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
