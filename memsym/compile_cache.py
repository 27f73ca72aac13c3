"""The on-disk cache of compiled expressions: their generated source, kept between runs.

Building a numpy function from a SymPy total with common-subexpression elimination costs
milliseconds (the CSE itself, code printing, SymPy's own caches warming up).  The generated
Python source (lambdify's form, written by :func:`memsym.numeric._generate`) depends only on
the expressions, the argument names, the backend, SymPy's printers and memsym's own printer
(:mod:`memsym.numeric`), so it is stored once under a key of all of them and executed in a
fresh namespace on the next run, as Python's ``__pycache__`` stores byte code.  Functions
compiled without CSE (the search's one-expression templates) are not stored: printing one
walks the expression once, as computing its key would.

Where: ``$MEMSYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/memsym/compiled`` (``~/.cache/...``).
``MEMSYM_CACHE_DIR=off`` (or empty) turns it off.  Bounded: at most :data:`MAX_FILES` entries
of at most :data:`MAX_BYTES` each; an unreadable, oversize or broken entry is ignored and
rebuilt; a directory that cannot be written is skipped.  The cache is memsym's own output,
never user input: only files named by a key this module computed are read, only from a
directory and files the current user owns that no one else may write (as ssh treats its
keys: a shared ``/tmp`` cannot plant code), and only their source defines the function (a
file that does not define it is ignored).
"""

from __future__ import annotations

import functools
import os
import pathlib

__all__ = ["cache_dir", "load", "store", "key", "MAX_FILES", "MAX_BYTES"]

#: The most entries the directory may hold; beyond it nothing more is written.
MAX_FILES = 4096
#: The largest generated source kept or read [bytes].
MAX_BYTES = 1 << 20
FUNC_NAME = "_lambdifygenerated"      # the name lambdify gives the function it writes
_OFF = ("", "0", "off", "none", "false")


def cache_dir() -> pathlib.Path | None:
    """The cache directory, or None when the cache is off.

    Examples
    --------
    >>> import os
    >>> os.environ["MEMSYM_CACHE_DIR"], saved = "off", os.environ.get("MEMSYM_CACHE_DIR")
    >>> cache_dir() is None
    True
    >>> _ = os.environ.pop("MEMSYM_CACHE_DIR") if saved is None else os.environ.update(
    ...     MEMSYM_CACHE_DIR=saved)
    """
    env = os.environ.get("MEMSYM_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in _OFF else pathlib.Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "memsym" / "compiled"


@functools.lru_cache(maxsize=1)
def _code_version() -> str:
    # what the generated source depends on besides the expressions: SymPy's printers,
    # numpy (the namespace), memsym's printer and CSE (memsym/numeric.py, read as bytes);
    # hashlib and tempfile are imported where used: `import memsym` reaches this module
    # (Term.compile) without compiling anything
    import hashlib

    import numpy
    import sympy

    here = pathlib.Path(__file__).resolve().parent
    digest = hashlib.sha256((here / "numeric.py").read_bytes()).hexdigest()
    return f"sympy {sympy.__version__} numpy {numpy.__version__} numeric {digest}"


def key(exprs: tuple, names: tuple, backend: str) -> str:
    """The cache key of one compiled function: a SHA-256 of everything its source depends on.

    Examples
    --------
    >>> from memsym.symbols import N, d
    >>> key((16 * N / d,), ("N", "d"), "numpy") == key((16 * N / d,), ("N", "d"), "numpy")
    True
    >>> key((16 * N / d,), ("N", "d"), "numpy") == key((16 * N / d,), ("N", "d"), "math")
    False
    """
    import hashlib

    import sympy as sp

    text = "\n".join((_code_version(), backend, ",".join(names),
                      *(sp.srepr(e) for e in exprs)))
    return hashlib.sha256(text.encode()).hexdigest()


def _private(st) -> bool:
    # owned by this user and writable by no one else (POSIX; elsewhere the owner is unknown)
    if not hasattr(os, "getuid"):
        return True
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def load(digest: str, namespace: dict):
    """The cached function of key ``digest`` executed in a copy of ``namespace``, or None.

    Parameters
    ----------
    digest : str
        A :func:`key` (64 hexadecimal digits); anything else is never opened.
    namespace : dict
        The globals the function runs in (:func:`memsym.numeric._namespace`).
    """
    root = cache_dir()
    if root is None or len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        return None
    path = root / f"{digest}.py"
    try:
        if not path.is_file() or not _private(root.stat()):
            return None
        st = path.stat()
        if st.st_size > MAX_BYTES or not _private(st):
            return None
        source = path.read_text(encoding="utf-8")
        ns = dict(namespace)
        exec(compile(source, str(path), "exec"), ns)   # memsym's own generated code
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, NameError, TypeError):
        return None
    fn = ns.get(FUNC_NAME)
    return fn if callable(fn) else None


def store(digest: str, source: str) -> bool:
    """Write the generated ``source`` under key ``digest`` (atomically); False when skipped.

    Parameters
    ----------
    digest : str
        A :func:`key`.
    source : str
        The generated module source (it must define ``_lambdifygenerated``).
    """
    import tempfile

    root = cache_dir()
    if root is None or len(source.encode()) > MAX_BYTES or f"def {FUNC_NAME}(" not in source \
            or len(digest) != 64:
        return False
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(root.stat()):
            return False
        with os.scandir(root) as entries:
            if sum(1 for _ in zip(range(MAX_FILES), entries)) >= MAX_FILES:
                return False
        fd, tmp = tempfile.mkstemp(dir=root, suffix=".tmp")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(source)
        os.replace(tmp, root / f"{digest}.py")
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    return True
