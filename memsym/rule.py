"""One framework rule as data: :class:`Rule`, and :func:`negate` for the checks it holds.

The rule table is :data:`memsym.rules.RULES`, assembled from the modules that own the rules by
what they guard: :mod:`memsym.rules_layout` (the parallel layout, the sequence, the batch),
:mod:`memsym.rules_model_kinds` (experts, hybrid layers) and :mod:`memsym.rules_states` (the
training states: sharding and the parameter gather's precision).  A check is written with
``&``, ``|`` and ``%`` only, so one function serves Python integers (an estimate) and numpy
arrays (a search grid).  :data:`MLM_VALIDATE_ARGS` and :data:`MLM_CONFIG_POST_INIT` name the
two places in Megatron-LM that state most of the rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .errors import DivisibilityError
from .term import Source

__all__ = ["Rule", "negate", "MLM_VALIDATE_ARGS", "MLM_CONFIG_POST_INIT"]

#: Where Megatron-LM checks its arguments, and its transformer config's own checks: the
#: sources most rules cite (each adds the check it states).
MLM_VALIDATE_ARGS = "megatron/training/arguments.py, validate_args"
MLM_CONFIG_POST_INIT = ("megatron/core/transformer/transformer_config.py, "
                        "TransformerConfig.__post_init__")


@dataclass(frozen=True)
class Rule:
    """One framework rule.

    Attributes
    ----------
    name : str
        Short identifier, shown by the search (``tp-heads``).
    summary : str
        The rule in words.
    test : callable
        ``test(x, k) -> bool or numpy bool array``: True where the rule is *broken*, for a
        resolved architecture ``x`` and knob values ``k`` (see :func:`knobs`); ``&``, ``|``,
        ``%`` only, so one function serves integers and arrays.
    message : callable
        ``message(x, k) -> str``: the refusal for one (scalar) job.
    source : Source
        Where the framework states the rule.
    error : type
        The exception :func:`check` raises.
    kind : str
        ``"launch"``: the framework refuses to start; ``"preference"``: memsym's search
        prefers it (TP inside a node) but an estimate of a given job does not refuse it.
    """

    name: str
    summary: str
    test: Callable
    message: Callable
    source: Source
    error: type = DivisibilityError
    kind: str = "launch"


def negate(flag):
    """``not flag`` for a Python bool, ``~flag`` for a numpy bool array (``~True`` is -2).

    Examples
    --------
    >>> import numpy as np
    >>> negate(True), negate(np.array([True, False])).tolist()
    (False, [False, True])
    """
    return ~flag if hasattr(flag, "dtype") else not flag
