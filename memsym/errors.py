"""memsym's exceptions: every refusal is one of these, and each is a ``ValueError``.

Messages are one line that says what was wrong and what is accepted; the command line
prints them on stderr (exit status 2, or 1 when a query has no answer) without a traceback.
"""

from __future__ import annotations

import difflib

__all__ = [
    "MemsymError",
    "InvalidValueError",
    "StepTimeNotModelledError",
    "UnknownNameError",
    "DivisibilityError",
    "NoFitError",
    "LimitError",
    "BeyondSearchBound",
    "choose",
    "catalogue_key",
]


class MemsymError(ValueError):
    """Base class of memsym's errors (a ``ValueError``)."""


class InvalidValueError(MemsymError):
    """A value of the wrong kind or range (zero degrees, NaN, malformed units, ...)."""


class StepTimeNotModelledError(InvalidValueError):
    """A model whose step time the timing layer does not price (its memory it does):
    ``memsym search`` then ranks by memory headroom instead of refusing."""


class UnknownNameError(MemsymError):
    """A name that memsym does not know; the message suggests the closest valid ones.

    Examples
    --------
    >>> str(UnknownNameError("sharding", "fdsp", ["ddp", "fsdp", "zero3"]))
    "unknown sharding 'fdsp'; did you mean fsdp? (accepted: ddp, fsdp, zero3)"
    """

    def __init__(self, kind: str, name, accepted, limit: int = 12):
        self.kind, self.name = kind, name
        self.accepted = sorted(str(a) for a in accepted)
        lowered = {a.lower(): a for a in self.accepted}
        close = [lowered[x] for x in difflib.get_close_matches(str(name).lower(), list(lowered),
                                                               n=3, cutoff=0.6)]
        self.suggestions = close
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        shown = ", ".join(self.accepted[:limit]) + (", ..." if len(self.accepted) > limit else "")
        # repr() of the name: a hostile string is shown quoted, never interpreted.
        super().__init__(f"unknown {kind} {str(name)[:80]!r}{hint} (accepted: {shown})")


def choose(kind: str, name, accepted) -> str:
    """The canonical spelling of ``name`` among ``accepted`` (case-insensitive; ``_`` may
    stand for ``-``), or :class:`UnknownNameError` with the closest names.

    This is the one place user-given names are matched: against a fixed table, never parsed.

    Examples
    --------
    >>> choose("sharding", " ZeRO3 ", ("ddp", "zero3"))
    'zero3'
    >>> choose("recompute", "Distributed_Optimizer", ("distributed-optimizer",))
    'distributed-optimizer'
    """
    if not isinstance(name, str):  # None must not become the name "none"
        raise UnknownNameError(kind, name, accepted)
    key = name.strip().lower()
    if key in accepted:
        return key
    if key.replace("_", "-") in accepted:
        return key.replace("_", "-")
    raise UnknownNameError(kind, name, accepted)


def catalogue_key(name) -> str:
    """The key a catalogue (GPUs, clusters, model presets) files ``name`` under: lower case,
    ``_`` and spaces read as ``-``.

    Examples
    --------
    >>> catalogue_key(" H100_80GB "), catalogue_key("Llama 3 8B")
    ('h100-80gb', 'llama-3-8b')
    """
    return str(name).strip().lower().replace("_", "-").replace(" ", "-")


class DivisibilityError(InvalidValueError):
    """A layout that violates a divisibility rule (the rule is named in the message)."""


class NoFitError(MemsymError):
    """A sizing question with no answer: nothing fits, whatever the unknown.

    Attributes
    ----------
    binding : tuple of str
        Keys of the terms that do not shrink with the unknown and set the floor.
    floor : sympy.Expr
        The memory [bytes] that stays whatever the unknown (the limit of the total).
    hint : str
        One line on what else could fit (the command line prints it below the message).
    """

    def __init__(self, message: str, binding=(), floor=None, hint: str = ""):
        super().__init__(message)
        self.binding = tuple(binding)
        self.floor = floor
        self.hint = hint


class LimitError(InvalidValueError):
    """A size above memsym's documented limit (:mod:`memsym.limits`); the message names it.

    Attributes
    ----------
    name : str
        The limit's key in :data:`memsym.limits.LIMITS` (``"layers"``, ``"gpus"``, ...).
    limit : int
        The largest accepted value.
    """

    def __init__(self, message: str, name: str = "", limit: int | None = None):
        super().__init__(message)
        self.name, self.limit = name, limit


class BeyondSearchBound(MemsymError):
    """A search stopped at its documented bound without an answer.

    Distinct from :class:`NoFitError` ("nothing fits, whatever the unknown"): here an answer
    may exist, but beyond the range memsym searches (:data:`memsym.limits.SEARCH_BOUND`, or
    :data:`memsym.limits.MAX_CANDIDATES` divisibility checks), so none is claimed.
    """

    def __init__(self, message: str, bound: int | None = None):
        super().__init__(message)
        self.bound = bound
