"""torch's MemTracker around a whole model, as the chunked-loss and PEFT-output tests use it:
the tracker, the live bytes it sees, windows whose peak is taken from a mark, and a hook that
stops a backward once the window it measures has closed.

``torch.distributed._tools.mem_tracker.MemTracker`` registers a gradient hook on every
parameter and refuses a frozen one (no ``requires_grad``): a frozen parameter gets no-op
handles in its place, so PEFT's frozen base can be tracked.
"""

from __future__ import annotations


class _NoHook:
    def remove(self):
        pass


def tracker_of(mem_tracker, model):
    """A MemTracker (``mem_tracker``: the ``torch.distributed._tools.mem_tracker`` module)
    tracking ``model``, its frozen parameters given no-op gradient-hook handles."""
    mt = mem_tracker.MemTracker()
    for param in model.parameters():
        if not param.requires_grad:
            mt._param_to_grad_hook_handles[param] = (_NoHook(), _NoHook())
    mt.track_external(model)
    return mt


def live(mem_tracker, mt, kind: str = "current") -> int:
    """The activation and temporary bytes the tracker sees now (``kind="peak"``: at its
    running peak) [bytes]."""
    (snap,) = mt.get_tracker_snapshot(kind).values()
    return sum(v for k, v in snap.items() if k in (mem_tracker._MemRefType.ACT,
                                                   mem_tracker._MemRefType.TEMP))


def module_kept(mem_tracker, mt, fqn: str, state) -> int:
    """The activation and temporary bytes the tracker recorded for the module ``fqn`` at its
    ``state`` (``mem_tracker._ModState``: PEAK_FW, POST_FW, PRE_BW, ...) [bytes]."""
    root = next(st for st in mt.memory_tracking.values() if st.mod_fqn == fqn)
    (snap,) = root.snapshots[state][0].values()
    return sum(v for k, v in snap.items() if k in (mem_tracker._MemRefType.ACT,
                                                   mem_tracker._MemRefType.TEMP))


class Windows:
    """Named windows of a tracked run: ``start(name)`` marks the live bytes and restarts the
    tracker's running peak; ``end(name)`` stores the peak above that mark in ``marks``."""

    def __init__(self, mem_tracker, mt):
        self.mem_tracker, self.mt, self.marks = mem_tracker, mt, {}

    def start(self, name: str) -> None:
        self.marks[name] = live(self.mem_tracker, self.mt)
        self.mt._peak_mem.clear()      # the tracker's running peak, from here
        self.mt._peak_mem_snap.clear()

    def end(self, name: str) -> None:
        self.marks[name] = live(self.mem_tracker, self.mt, "peak") - self.marks[name]


class WindowClosed(Exception):
    """Raised by :func:`closing` once a measured window of a backward has closed."""


def closing(close):
    """A tensor hook that calls ``close()`` (the window's end, its peak read there) and then
    stops the backward by raising :class:`WindowClosed`, which the caller suppresses
    (``contextlib.suppress(WindowClosed)`` around ``backward()``).  What the backward would
    run after the window, the backbone's backward (and, with gradient checkpointing, its
    forward recomputed), is most of a tiny model's step and nothing a test reads: the window's
    peak is the same either way (a peak is taken up to its end)."""
    def hook(grad):
        close()
        raise WindowClosed
    return hook
