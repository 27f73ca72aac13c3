import pathlib
import sys

# tests/catalogue.py is a helper module shared by the catalogue and docs tests
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

# tests/data holds other projects' files verbatim (torchtitan's config_registry.py files, read
# by memsym with ast and never imported): not test modules
collect_ignore_glob = ["data/*"]
# this file is a plugin, not a doctest module: collecting it as one clashes with the other
# conftest.py files (notebooks/, tools/), which share its module name
collect_ignore = ["conftest.py"]
