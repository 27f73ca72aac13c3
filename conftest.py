"""Settings for every path the suite collects (tests/, memsym/ doctests, docs/, notebooks/).

One intra-op thread for OpenMP, MKL and OpenBLAS (issue 29, the suite's CPU time).  The
README's command runs a pytest-xdist worker per core, and every tensor the tests build is tiny
(a few hundred elements: one layer at ``h = 8``, a 4-rank gloo group, a 64 x 1,000 loss), so
a second OpenMP thread per worker has no work to share, only the spin-wait of PyTorch's
thread pool after each operator: with two workers on two cores, one ``derive_saved_bytes``
of notebook 07 took 5.0 s of CPU with PyTorch's default two threads and 1.2 s with one, for
the same bytes measured.  What the tests assert never depends on the thread count (saved
bytes, storages, allocator peaks), only how long they take.

The variables are read when the libraries load, so they are set here, before any test module
imports torch; whatever they inherit does too (the gloo groups' spawned ranks, nbval's
notebook kernels, the CLI subprocesses).  A value already in the environment is kept.
"""

import gc
import os
import sys

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

if sys.modules.get("torch") is not None:   # a plugin imported it before this file ran (None:
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # import blocked)


# The cyclic garbage collector (issue 29, the suite's CPU time).  A test process holds the
# whole suite's modules, SymPy's caches and memsym's remembered expressions (hundreds of
# thousands of objects, none of them garbage), and CPython's default thresholds (700, 10, 10)
# ran a young collection every 700 new objects and walked that heap again and again: about
# 4 s of a worker's 15 s collecting the suite, 5 s of tests/test_search.py and
# test_production_runs_fit.py's 72 s.  Collected less often (every 20,000 new objects), and
# the objects alive once the suite is collected frozen out of every later pass (a cycle that
# is garbage at that moment stays until the worker exits), garbage is freed later; no test's
# result depends on when.  Measured with gc.callbacks: 3.9 -> 1.4 s of collecting the suite,
# 1.8 -> 0.7 s of tests/test_bounds.py.
gc.set_threshold(20_000, 10, 10)


def pytest_collection_finish(session):
    """The objects alive after collection (modules, caches, parameter lists) are moved to the
    permanent generation (``gc.freeze``): no later collection walks them again."""
    gc.freeze()
