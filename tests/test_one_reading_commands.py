"""Every own option honoured or refused on solve and latex (issue 28), in a file of its own.

The same check as tests/test_one_reading.py's for estimate, run on the other job commands: each
option of memsym's own changes the answer (the solved value and its derivation, or the design
document) or is refused in one line.  Its own file, so that pytest-xdist's ``--dist loadfile``
runs it beside test_one_reading.py rather than after it (the latex half is
tests/test_one_reading_latex.py, for the same reason: about 45 s each).
"""

from __future__ import annotations

from test_one_reading import _OWN_VALUES, run


def check_every_own_option(capsys, command):
    # the same options on the other job commands: each changes the answer (the solved value
    # and its derivation, or the design document) or is refused in one line, exit 2
    # one pipeline stage, so that the document (one stage) shows the output layer's terms too
    base = ["llama2-7b", "--tp", 2, "--global-batch-size", 16, "--seq-length", 1024,
            "--gpu", "h100-80gb"]
    json_out = ["--json"] if command[0] == "solve" else []
    code, plain, err = run(capsys, *command, *base, *json_out)
    assert code == 0, err
    for option, values in _OWN_VALUES.items():
        values = ["4"] if option in ("--tp", "--pp") else values
        code, out, err = run(capsys, *command, *base, option, *values, *json_out)
        if code == 2:
            assert out == "" and err.count("\n") == 1 and "Traceback" not in err, option
            continue
        assert code in (0, 1), (option, err)
        assert out != plain, f"{command[0]} {option} {values} was dropped"


def test_every_own_option_is_honoured_or_refused_by_solve(capsys):
    check_every_own_option(capsys, ["solve", "dp"])
