"""Bounded time and memory for the tests of issue 15 (hangs and runaway memory).

``run_python`` runs code in a fresh interpreter under an address-space limit
(``resource.RLIMIT_AS``, what ``ulimit -v`` sets) and a wall-clock timeout, so a hang or a
runaway allocation fails the test instead of the machine; ``time_limit`` bounds code run
in-process with ``SIGALRM``.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
GiB = 2**30


class Hang(AssertionError):
    """The code ran past its time bound."""


def _limits(memory: int):
    def apply():  # runs in the child between fork and exec
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def run_python(code: str, *, seconds: float = 60, memory: int = 3 * GiB, args=(),
               stdin=None, stdout=subprocess.PIPE, shell_prefix: str | None = None):
    """``python -c code`` (or ``python -m memsym args`` with ``code=None``) in a child bounded
    to ``memory`` bytes of address space and ``seconds`` of wall time."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    argv = [sys.executable] + (["-c", code] if code is not None else ["-m", "memsym", *args])
    try:
        return subprocess.run(argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                              text=True, timeout=seconds, env=env, cwd=str(ROOT),
                              preexec_fn=_limits(memory))
    except subprocess.TimeoutExpired as exc:
        raise Hang(f"still running after {seconds} s: {code or args}") from exc


@contextlib.contextmanager
def time_limit(seconds: float):
    """Fail with :class:`Hang` if the block runs longer than ``seconds`` (main thread only)."""
    def boom(signum, frame):
        raise Hang(f"ran past {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
