import pathlib
import sys

# tests/catalogue.py is a helper module shared by the catalogue and docs tests
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
