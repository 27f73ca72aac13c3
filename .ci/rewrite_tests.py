"""Write pytest's assertion-rewritten byte code of the test modules once, before the workers start.

pytest rewrites the asserts of every test module (``test_*.py``) and ``conftest.py`` it imports
and keeps the result in ``__pycache__/<name>.<tag>-pytest-<version>.pyc``, which it reads
back whenever the source's mtime and size match (``_pytest/assertion/rewrite.py``,
``AssertionRewritingHook.exec_module``), but writes only where byte code may be written.  CI
sets ``PYTHONDONTWRITEBYTECODE``, so each xdist worker, which collects the whole suite, rewrote
all the test modules itself: about 6 s of CPU per worker.  Here they are rewritten once, in
parallel; the workers then only read them.

The rewriting itself is pytest's ``rewrite_asserts`` (``_pytest.assertion.rewrite``: a
function pytest documents nowhere, and the only code that rewrites asserts as pytest does;
no public API runs it without importing the test modules, which is the work saved here).
Everything around it is plain code: the file is CPython's timestamp pyc (PEP 552: magic
number, zero flags, the source's mtime and size as 32-bit little-endian numbers, the
marshalled code), named ``<module>.<cache tag>-pytest-<version>.pyc`` in the source's
``__pycache__`` (or under ``sys.pycache_prefix``), as pytest's ``AssertionRewritingHook``
names and reads it (pytest 9.0.3 ``_pytest/assertion/rewrite.py``: ``PYTEST_TAG``,
``get_cache_dir``, ``_write_pyc_fp``, ``_read_pyc``).

Best effort: with a pytest that rewrites, names or checks the files otherwise, nothing is
written or what is written is not read, and each worker rewrites as before (the files are a
cache, checked by pytest on every read).  A file whose byte code is current (its header
names the source's mtime and size) is left as it is, so a second run costs only the reads.
Repository tooling, run by ``.ci/run`` and by ``tests/conftest.py`` before pytest-xdist starts
its workers; never imported by memsym.
"""

import ast
import importlib.util
import marshal
import os
import pathlib
import struct
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest


def cache_dir(fn: pathlib.Path) -> pathlib.Path:
    """Where pytest looks for the rewritten byte code of ``fn``: beside it in
    ``__pycache__``, or its directory under ``sys.pycache_prefix`` where one is set."""
    if sys.pycache_prefix:
        return pathlib.Path(sys.pycache_prefix, *fn.parts[1:-1])
    return fn.parent / "__pycache__"


def pyc_bytes(stat: os.stat_result, code) -> bytes:
    """A timestamp pyc of ``code`` compiled from a source of ``stat`` (PEP 552)."""
    # the 32-bit fields hold the low bits of larger numbers, as CPython and pytest write them
    header = struct.pack("<4sLLL", importlib.util.MAGIC_NUMBER, 0,
                         int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF)
    return header + marshal.dumps(code)


def is_current(pyc: pathlib.Path, stat: os.stat_result) -> bool:
    """Whether ``pyc`` holds byte code compiled from a source of ``stat``: its header is
    the one :func:`pyc_bytes` writes for it (pytest's ``_read_pyc`` checks the same fields)."""
    try:
        with open(pyc, "rb") as fp:
            head = fp.read(16)
    except OSError:
        return False
    return head == pyc_bytes(stat, None)[:16]


def _rewrite(path: str) -> None:
    from _pytest.assertion.rewrite import rewrite_asserts

    fn = pathlib.Path(path)
    stat = os.stat(fn)
    cache = cache_dir(fn)
    tag = f"{sys.implementation.cache_tag}-pytest-{pytest.__version__}"
    pyc = cache / f"{fn.name[:-3]}.{tag}.pyc"
    if is_current(pyc, stat):     # written by an earlier run from this very source
        return
    source = fn.read_bytes()
    tree = ast.parse(source, filename=path)
    rewrite_asserts(tree, source, path, None)   # None: no assertion-pass hook (pytest's default)
    code = compile(tree, path, "exec", dont_inherit=True)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = f"{pyc}.{os.getpid()}"
    with open(tmp, "wb") as fp:
        fp.write(pyc_bytes(stat, code))
    os.replace(tmp, pyc)    # atomic, as pytest writes it


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    files = [str(p) for p in sorted((root / "tests").glob("test_*.py"))]
    files += [str(p) for p in (root / "conftest.py", root / "tests" / "conftest.py") if p.exists()]
    try:
        with ProcessPoolExecutor() as pool:
            list(pool.map(_rewrite, files))
    except Exception as exc:    # another pytest: the workers rewrite as they always did
        print(f"rewrite_tests: skipped ({type(exc).__name__}: {exc})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
