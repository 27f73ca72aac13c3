"""Run a function on every rank of a CPU gloo process group (processes of a fork server).

``run_group(worker, world, arg)`` starts ``world`` processes running
``worker(rank, world, port, arg, queue)`` on a free local port; each puts ``(rank, result)``
on the queue, or ``(rank, repr(exc))`` when it fails (a result is never a plain string).  Bounded: every wait has a timeout and a
process still alive after it is killed, so a hung collective never hangs the suite.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_group(worker, world: int, arg=None, timeout: float = 120, preload=()) -> dict:
    """``rank -> result`` of ``worker`` on a gloo group of ``world`` processes (``preload``:
    more modules the fork server imports once, where this call starts it).

    Raises
    ------
    AssertionError
        When a rank reports an exception (its ``repr``) instead of a result.
    """
    import torch.multiprocessing as mp

    ctx = mp.get_context("forkserver")
    # the server imports torch and torch.distributed once (about 3 s of CPU) and forks every
    # rank of every group from itself: a spawned rank imported them anew, 4 ranks for
    # test_engine_fsdp2.py's group.  The server never runs an operator, so it has no OpenMP
    # pool and no process group a fork could copy; each rank starts as a spawned one did.
    ctx.set_forkserver_preload(["torch", "torch.distributed", *preload])
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, world, port, arg, queue)) for r in range(world)]
    for proc in procs:
        proc.start()
    results = {}
    try:
        for _ in range(world):
            rank, out = queue.get(timeout=timeout)
            results[rank] = out
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():  # pragma: no cover - bounded: never hang the suite
                proc.kill()
    failed = {rank: out for rank, out in results.items() if isinstance(out, str)}
    assert not failed, f"ranks failed: {failed}"
    return results
