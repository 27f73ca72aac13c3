"""Write pytest's assertion-rewritten byte code of the test modules once, before the workers start.

pytest rewrites the asserts of every test module (``test_*.py``) and ``conftest.py`` it imports
and keeps the result in ``__pycache__/<name>.<tag>-pytest-<version>.pyc``, which it reads
back whenever the source's mtime and size match (``_pytest/assertion/rewrite.py``,
``AssertionRewritingHook.exec_module``), but writes only where byte code may be written.  CI
sets ``PYTHONDONTWRITEBYTECODE``, so each xdist worker, which collects the whole suite, rewrote
all the test modules itself: about 6 s of CPU per worker.  Here they are rewritten once, in
parallel, by pytest's own functions; the workers then only read them.

Best effort: with a pytest whose rewrite functions differ from these, nothing is written and
each worker rewrites as before (the files are a cache, checked by pytest on every read).
Repository tooling, run by ``.ci/run``; never imported by memsym.
"""

import ast
import os
import pathlib
import sys
from concurrent.futures import ProcessPoolExecutor


def _rewrite(path: str) -> None:
    from _pytest.assertion.rewrite import PYC_TAIL, _write_pyc_fp, get_cache_dir, rewrite_asserts

    fn = pathlib.Path(path)
    stat = os.stat(fn)
    source = fn.read_bytes()
    tree = ast.parse(source, filename=path)
    rewrite_asserts(tree, source, path, None)   # None: no assertion-pass hook (pytest's default)
    code = compile(tree, path, "exec", dont_inherit=True)
    cache = get_cache_dir(fn)
    cache.mkdir(parents=True, exist_ok=True)
    pyc = cache / (fn.name[:-3] + PYC_TAIL)
    tmp = f"{pyc}.{os.getpid()}"
    with open(tmp, "wb") as fp:
        _write_pyc_fp(fp, stat, code)
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
