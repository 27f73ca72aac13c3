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
