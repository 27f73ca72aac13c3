"""Every own option honoured or refused by ``memsym latex`` (issue 28; the check is
tests/test_one_reading_commands.py's, in a file of its own so that pytest-xdist's
``--dist loadfile`` runs it beside the solve half)."""

from __future__ import annotations

from test_one_reading_commands import check_every_own_option


def test_every_own_option_is_honoured_or_refused_by_latex(capsys):
    check_every_own_option(capsys, ["latex", "--markdown", "--solve", "tp"])
