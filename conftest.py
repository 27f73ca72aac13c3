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

import os
import sys

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

if sys.modules.get("torch") is not None:   # a plugin imported it before this file ran (None:
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # import blocked)
