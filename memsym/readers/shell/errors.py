"""Why a reading of a launch script stops: refused (:class:`LaunchScriptError`) or undecided
(:class:`Unknown`).

Every stage of the bash-subset reader (:mod:`memsym.readers.shell`) raises these;
:mod:`memsym.readers.launch_script` re-exports :class:`LaunchScriptError`.
"""

from __future__ import annotations

from ...errors import InvalidValueError
from ...text import printable


class LaunchScriptError(InvalidValueError):
    """A launch script memsym cannot read (the construct and the line are named).

    The message is one line of inert text: script text quoted in it has its newlines and
    control characters escaped (:func:`memsym.text.printable`)."""

    def __init__(self, message):
        super().__init__(printable(str(message), 400))


class Unknown(Exception):
    """A condition that cannot be decided from the script alone."""
