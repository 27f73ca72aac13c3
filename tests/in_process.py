"""Running ``memsym estimate`` in the test's own process (shared by the config-file tests)."""


def estimate(capsys, *argv):
    """``memsym estimate ARGV`` in this process (memsym.cli.main, what the installed command
    runs): (exit status, stdout, stderr).  A fresh process is tests/test_cli.py's subject."""
    from memsym.cli import main

    code = main(["estimate", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err
