"""Running ``memsym`` in the test's own process (shared by the command-line tests)."""


def run(capsys, *argv):
    """``memsym ARGV`` in this process (memsym.cli.main, what the installed command runs), each
    argument as a string: (exit status, stdout, stderr).  A fresh process is
    tests/test_cli.py's subject."""
    from memsym.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def estimate(capsys, *argv):
    """``memsym estimate ARGV`` in this process (memsym.cli.main, what the installed command
    runs): (exit status, stdout, stderr).  A fresh process is tests/test_cli.py's subject."""
    return run(capsys, "estimate", *argv)


def json_report(capsys, argv, codes=(0, 1)) -> dict:
    """``memsym ARGV --json`` in this process: its JSON report, the exit status one of
    ``codes`` (0 fits, 1 an honest "nothing fits")."""
    import json

    code, out, err = run(capsys, *argv, "--json")
    assert code in codes, err
    return json.loads(out)


def refused_line(capsys, argv) -> str:
    """``memsym ARGV`` in this process, refused as bad input: exit 2, nothing on stdout, one
    line on stderr (returned)."""
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "") and err.count("\n") == 1, (code, out, err)
    return err
