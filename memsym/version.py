"""memsym's version, in the core layer: the package's namespace and the compiled-function cache
(which records the version that wrote each file) both read it."""

__all__ = ["__version__"]

__version__ = "0.1.0"
