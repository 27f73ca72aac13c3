"""The on-disk cache of compiled expressions: their generated source, kept between runs.

Building a numpy function from a SymPy total with common-subexpression elimination costs
milliseconds (the CSE itself, code printing, SymPy's own caches warming up).  The generated
Python source (lambdify's form, written by :func:`memsym.numeric._generate`) depends only on
the expressions, the argument names, the backend, SymPy's printers and memsym's own printer
(:mod:`memsym.numeric`), so it is stored once under a key of all of them and executed in a
fresh namespace on the next run, as Python's ``__pycache__`` stores byte code.  Functions
compiled without CSE are not stored one by one (printing one walks the expression once, as
computing its key would): the search keeps all of a space's templates in one file instead,
keyed by what they are built from (:func:`input_key`, :class:`memsym.search.templates.StageTable`).

Where: ``$MEMSYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/memsym/compiled`` (``~/.cache/...``).
``MEMSYM_CACHE_DIR=off`` (or empty) turns it off.  Bounded: at most :data:`MAX_FILES` entries
of at most :data:`MAX_BYTES` each; an unreadable, oversize or broken entry is ignored and
rebuilt; a directory that cannot be written is skipped.  The cache is memsym's own output,
never user input: only files named by a key this module computed are read, only from a
directory and files the current user owns that no one else may write (as ssh treats its
keys: a shared ``/tmp`` cannot plant code), and only their source defines the function (a
file that does not define it is ignored).

Each file verifies before it is executed: its first line names the format, the memsym version
that wrote it and a SHA-256 of its key, that version and the source below the line
(:func:`_seal`).  A file whose line is missing, whose version differs or whose hash does not
match (a changed byte, a truncated write, another memsym) is never compiled or executed: it is
removed and the function is built again and written anew.  The directory is created 0700; one
owned by someone else, or that the group or others may write, is not used at all (no disk
cache, no error).

An entry may have a companion (``<key>.code``, :func:`store_companion`): what its source
compiles to, in ``marshal``'s form (as ``__pycache__`` keeps a module's byte code): the
search's table of templates keeps its functions' byte code there, since compiling hundreds of
kilobytes of source costs a tenth of a second or more in every new process.  A companion is
sealed to its entry: a SHA-256 of the entry's own first line (so of every byte of its
source), the Python that wrote it and the companion's bytes; it is read only from the same
private directory, only after its entry verified and only where its seal matches.

Data a new process would otherwise recompute is kept the same way (``<key>.data``,
:func:`store_data`: the search's interleaved schedules, ordered pass by pass in Python),
sealed by a SHA-256 of its key, the memsym version, the Python and its bytes, and loaded only
where that seal matches.
"""

from __future__ import annotations

import functools
import marshal
import os
import pathlib
import stat
import hashlib
import sys
import tempfile

import sympy as sp

from .version import __version__

__all__ = ["cache_dir", "load", "store", "load_companion", "store_companion",
           "load_data", "store_data", "key", "input_key", "package_stamp", "MAX_FILES",
           "MAX_BYTES"]

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
    # hashlib, tempfile and numpy are imported where used: `import memsym` reaches this
    # module (Term.compile) without compiling anything, and the memory path never needs numpy

    import numpy

    here = pathlib.Path(__file__).resolve().parent
    digest = hashlib.sha256((here / "numeric.py").read_bytes()).hexdigest()
    return f"sympy {sp.__version__} numpy {numpy.__version__} numeric {digest}"


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

    text = "\n".join((_code_version(), backend, ",".join(names),
                      *(sp.srepr(e) for e in exprs)))
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def package_stamp() -> str:
    """A SHA-256 of the path, size and modification time of every file of the installed
    package: what decides whether byte code (``__pycache__``) is stale, here deciding
    whether a function built from memsym's formulas is.

    Examples
    --------
    >>> len(package_stamp())
    64
    """

    root = str(pathlib.Path(__file__).resolve().parent)
    h = hashlib.sha256(root.encode())
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")   # byte code: derived
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            h.update(f"\n{os.path.relpath(path, root)} {st.st_size} {st.st_mtime_ns}".encode())
    return h.hexdigest()


def input_key(kind: str, *parts: str) -> str:
    """The cache key of a function named by what it is built from rather than by its
    expressions (the search's stage templates, :mod:`memsym.search.templates`): a SHA-256 of
    ``kind``, ``parts`` (each the ``repr`` of an input), the code generation
    (:func:`_code_version`) and every file of the package (:func:`package_stamp`), so that
    a change to any formula, rule or preset is a new key.

    Examples
    --------
    >>> input_key("t", "1") == input_key("t", "1") != input_key("t", "2")
    True
    """

    text = "\n".join((kind, _code_version(), package_stamp(), *parts))
    return hashlib.sha256(text.encode()).hexdigest()


def _is_key(digest: str) -> bool:
    """Whether ``digest`` is a :func:`key` (64 lowercase hexadecimal digits): the only names
    the cache opens or writes, so no path can be smuggled in through one."""
    return len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)


def _private(st) -> bool:
    # owned by this user and writable by no one else (POSIX; elsewhere the owner is unknown)
    if not hasattr(os, "getuid"):
        return True
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


#: The first line of every cache file: this format's name; the memsym version and the SHA-256
#: of (key, version, source) follow.
_MAGIC = "# memsym compiled cache 1"
_HEADER_MAX = 256          # the longest first line read [bytes]


def _seal(digest: str, source: str, version: str | None = None) -> str:
    """The first line of the file that holds ``source`` under key ``digest``.

    The hash covers the key (a file copied under another name does not verify), the version
    and every byte of the source (a changed or missing byte does not verify).

    Examples
    --------
    >>> _seal("a" * 64, "x = 1\\n", "0.1.0")[:46]
    '# memsym compiled cache 1; memsym 0.1.0; sha25'
    """

    version = str(__version__) if version is None else version
    h = hashlib.sha256(f"{digest}\n{version}\n".encode() + source.encode("utf-8")).hexdigest()
    return f"{_MAGIC}; memsym {version}; sha256 {h}\n"


def _verified(digest: str, raw: bytes) -> str | None:
    """The source in ``raw`` if its first line seals it for ``digest`` and this version."""
    first, newline, body = raw.partition(b"\n")
    if not newline or len(first) > _HEADER_MAX:
        return None
    try:
        source = body.decode("utf-8")
        header = first.decode("ascii") + "\n"
    except UnicodeDecodeError:
        return None
    return source if header == _seal(digest, source) else None


def _open_private(path):
    # the entry itself, never a link it is replaced by (O_NOFOLLOW), checked on the open file
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES + _HEADER_MAX \
                or not _private(st):
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read(MAX_BYTES + _HEADER_MAX + 1)
    finally:
        os.close(fd)


def load(digest: str, namespace: dict):
    """The cached function of key ``digest`` executed in a copy of ``namespace``, or None.

    The file is read only from a private directory (:func:`_private`), and executed only
    once it verifies (:func:`_seal`: format, memsym version, SHA-256 of key, version and
    source); a file that does not verify is removed, so that the caller's rebuilt function
    replaces it.

    Parameters
    ----------
    digest : str
        A :func:`key` (64 hexadecimal digits); anything else is never opened.
    namespace : dict
        The globals the function runs in (:func:`memsym.numeric._namespace`).
    """
    root = cache_dir()
    if root is None or not _is_key(digest):
        return None
    path = root / f"{digest}.py"
    try:
        if not _private(root.stat()):
            return None      # someone else's, or writable by others: not used at all
        raw = _open_private(path)
    except OSError:          # absent (the usual miss), unreadable, or a link
        return None
    if raw is None:
        return None
    source = _verified(digest, raw)
    if source is None:       # tampered, truncated, another version: never executed
        try:
            path.unlink()
        except OSError:
            pass
        return None
    try:
        ns = dict(namespace)
        exec(compile(source, str(path), "exec"), ns)   # memsym's own generated code, verified
    except (SyntaxError, ValueError, NameError, TypeError):
        return None
    fn = ns.get(FUNC_NAME)
    return fn if callable(fn) else None


#: The first line of a companion file: this format's name; the SHA-256 of what it belongs to
#: (its entry's own first line, the Python that wrote it) and of its bytes follows.
_COMPANION_MAGIC = "# memsym compiled companion 1"


def _companion_seal(entry_header: bytes, body: bytes) -> bytes:
    """The first line of the companion of the entry whose first line is ``entry_header``
    (:func:`_seal`'s, which covers every byte of the entry's source): the hash covers that
    line, this Python (``sys.version``: ``marshal``'s format is its own) and ``body``."""
    h = hashlib.sha256(entry_header + f"\n{sys.version}\n".encode() + body)
    return f"{_COMPANION_MAGIC}; sha256 {h.hexdigest()}".encode()


def _entry_header(root, digest: str) -> bytes | None:
    # the first line of entry ``digest`` where the entry verifies (else None)
    raw = _open_private(root / f"{digest}.py")
    if raw is None or _verified(digest, raw) is None:
        return None
    return raw.partition(b"\n")[0]


def _checked_root(digest: str):
    # the cache directory where it is on, private and ``digest`` is a key (else None)
    root = cache_dir()
    if root is None or not _is_key(digest):
        return None
    try:
        return root if _private(root.stat()) else None
    except OSError:
        return None


def load_companion(digest: str):
    """The object kept beside entry ``digest`` (:func:`store_companion`), or None.

    Read only where the entry itself verifies (:func:`load`'s checks) and the companion's
    seal matches that very entry and this Python: a companion of another source, another
    Python or with a changed byte is never loaded (:func:`marshal.loads`)."""
    root = _checked_root(digest)
    if root is None:
        return None
    try:
        header = _entry_header(root, digest)
        raw = None if header is None else _open_private(root / f"{digest}.code")
    except OSError:
        return None
    return _unsealed(raw, lambda body: _companion_seal(header, body))


def store_companion(digest: str, value) -> bool:
    """Keep ``value`` (``marshal``'s types: code objects, tuples, dicts, strings, numbers)
    beside entry ``digest``, sealed to that entry's source (``<digest>.code``), so that a new
    process reads what the entry's source would compile to without compiling it (a search's
    table of templates: hundreds of kilobytes of source, a tenth of a second or more to
    compile, a millisecond to read); False when skipped (no verified entry, too large, a
    value ``marshal`` cannot write)."""
    root = _checked_root(digest)
    if root is None:
        return False
    try:
        header = _entry_header(root, digest)
        body = marshal.dumps(value)
    except (OSError, ValueError):
        return False
    if header is None or len(body) > MAX_BYTES:
        return False
    return _write(root, root / f"{digest}.code", _companion_seal(header, body) + b"\n" + body)


#: The first line of a data file: this format's name; the SHA-256 of its key, the memsym version,
#: the Python that wrote it and its bytes follows.
_DATA_MAGIC = "# memsym data 1"


def _data_seal(digest: str, body: bytes) -> bytes:
    """The first line of data file ``digest`` holding ``body`` (this memsym, this Python:
    ``marshal``'s format is its own)."""
    h = hashlib.sha256(f"{digest}\n{__version__}\n{sys.version}\n".encode() + body)
    return f"{_DATA_MAGIC}; sha256 {h.hexdigest()}".encode()


def load_data(digest: str):
    """The value kept under key ``digest`` by :func:`store_data`, or None.

    Read only from the private directory, and loaded (:func:`marshal.loads`) only where its
    seal matches the key, this memsym and this Python and every byte (:func:`_data_seal`)."""
    root = _checked_root(digest)
    if root is None:
        return None
    try:
        raw = _open_private(root / f"{digest}.data")
    except OSError:
        return None
    return _unsealed(raw, lambda body: _data_seal(digest, body))


def _unsealed(raw, seal):
    """The value marshalled in file bytes ``raw`` (None: no file) whose first line is
    ``seal(body)`` of the rest, else None: the seal is compared before anything is loaded."""
    if raw is None:
        return None
    first, newline, body = raw.partition(b"\n")
    if not newline or first != seal(body):
        return None
    try:
        return marshal.loads(body)
    except (EOFError, ValueError, TypeError):
        return None


def store_data(digest: str, value) -> bool:
    """Keep ``value`` (``marshal``'s types: tuples, dicts, bytes, strings, numbers) under key
    ``digest`` (``<digest>.data``, atomically), for what a new process would otherwise
    recompute (the search's interleaved schedules, :mod:`memsym.timing.interleaved`); False
    when skipped (the cache off or full, too large, a value ``marshal`` cannot write)."""
    root = cache_dir()
    if root is None or not _is_key(digest):
        return False
    try:
        body = marshal.dumps(value)
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(root.stat()) or len(body) > MAX_BYTES:
            return False
    except (OSError, ValueError):
        return False
    return _write(root, root / f"{digest}.data", _data_seal(digest, body) + b"\n" + body)


def store(digest: str, source: str) -> bool:
    """Write the generated ``source`` under key ``digest`` (atomically); False when skipped.

    Parameters
    ----------
    digest : str
        A :func:`key`.
    source : str
        The generated module source (it must define ``_lambdifygenerated``).
    """

    root = cache_dir()
    if root is None or len(source.encode()) > MAX_BYTES or f"def {FUNC_NAME}(" not in source \
            or not _is_key(digest):
        return False
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(root.stat()):
            return False
    except OSError:
        return False
    # checked by load before it runs
    return _write(root, root / f"{digest}.py", (_seal(digest, source) + source).encode("utf-8"))


def _write(root, path, data: bytes) -> bool:
    """Write ``data`` to ``path`` in the cache directory ``root`` atomically (a temporary file
    renamed), unless the directory holds :data:`MAX_FILES` entries; False when skipped."""
    try:
        with os.scandir(root) as entries:
            if sum(1 for _ in zip(range(MAX_FILES), entries)) >= MAX_FILES:
                return False
        fd, tmp = tempfile.mkstemp(dir=root, suffix=".tmp")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    return True
