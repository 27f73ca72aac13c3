"""Live bytes on the CPU allocator, phase by phase, read from PyTorch's profiler.

``torch.profiler.profile(profile_memory=True)`` records every allocation and free of the CPU
allocator as a ``[memory]`` event with its signed size (storage resizes included, which a
tensor-level tracker misses).  :class:`Phases` sums them in time order and reports, for each
``with phases.phase(name):`` block, the live bytes at its start, the peak inside it and the
live bytes at its end, relative to the start of profiling.  Allocations on other threads
(gloo's) are counted too: the peak is the process's.
"""

from __future__ import annotations

import contextlib

from torch.profiler import ProfilerActivity, profile, record_function

_PREFIX = "memsym-phase:"


class Phases:
    """Per-phase (start, peak, end) live bytes of one profiled run.

    Examples
    --------
    >>> import torch
    >>> ph = Phases()
    >>> with ph.run():
    ...     with ph.phase("alloc"):
    ...         x = torch.empty(1000, dtype=torch.float32)
    >>> ph.result["alloc"][1] >= 4000
    True
    """

    def __init__(self):
        self.result: dict[str, tuple[int, int, int]] = {}

    @contextlib.contextmanager
    def run(self):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            yield self
        events = prof.profiler.kineto_results.events()
        mem = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
        spans = sorted((e.start_ns(), e.end_ns(), e.name()[len(_PREFIX):])
                       for e in events if e.name().startswith(_PREFIX))
        live, i = 0, 0
        for start, end, name in spans:
            while i < len(mem) and mem[i][0] < start:
                live += mem[i][1]
                i += 1
            first = peak = live
            while i < len(mem) and mem[i][0] <= end:
                live += mem[i][1]
                i += 1
                peak = max(peak, live)
            self.result[name] = (first, peak, live)

    @staticmethod
    def phase(name: str):
        return record_function(_PREFIX + name)
