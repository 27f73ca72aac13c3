"""Repository tooling: generators that read this checkout (``formulas/``, ``docs/``).

Not part of the installed package (``pyproject.toml`` packages ``memsym`` only); run from a
source checkout, e.g. ``python tools/reference.py``.  ``tools/README.md`` lists them.
"""
