"""The command line's output: computed first, then written in one go; a failed write is an error.

Commands build their whole output as text, and only once every value is
computed and validated is it written, with :func:`write_stdout` or :func:`write_file`.  A write
that fails -- a closed pipe (``| head`` gone, EPIPE), stdout closed (``>&-``), a full disk
(ENOSPC), a FIFO or device as ``--output`` -- raises :class:`OutputError`, an exit-2 error,
instead of exiting 0 with the output lost.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

from ..errors import MemsymError
from ..text import printable

__all__ = ["OutputError", "write_stdout", "write_file"]


class OutputError(MemsymError):
    """The output could not be written (closed stdout, broken pipe, full disk, not a file)."""


def _silence_stdout() -> None:
    """After EPIPE, point fd 1 at /dev/null so the interpreter's final flush cannot print
    "Exception ignored ... BrokenPipeError" (Python docs, signal: note on SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:  # pragma: no cover - nothing more can be done
        pass


def _failure(exc: OSError, where: str) -> OutputError:
    reason = {errno.EPIPE: "the reading end of the pipe was closed",
              errno.EBADF: "it is closed",
              errno.ENOSPC: "no space left on the device",
              errno.EDQUOT: "disk quota exceeded"}.get(exc.errno, exc.strerror or str(exc))
    return OutputError(f"cannot write the output to {where}: {reason}")


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout in one go and flush it; a failed write is an :class:`OutputError`.

    ``sys.stdout`` is ``None`` when the program was started with stdout closed (``>&-``);
    that is refused too, before anything else is attempted.

    Parameters
    ----------
    text : str
        The whole output.
    """
    stream = sys.stdout           # looked up at call time, so pytest's capture works
    if stream is None:
        raise OutputError("cannot write the output to stdout: it is closed")
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError as exc:
        _silence_stdout()
        raise _failure(exc, "stdout") from None
    except (OSError, ValueError) as exc:  # ValueError: "I/O operation on closed file"
        if isinstance(exc, OSError):
            raise _failure(exc, "stdout") from None
        raise OutputError("cannot write the output to stdout: it is closed") from None


def write_file(path, text: str) -> None:
    """Write ``text`` to the file ``path`` atomically (all or nothing), refusing non-files.

    A FIFO would block until a reader appears and a device (``/dev/full``) is not a file;
    both are refused before opening.  The text goes to a temporary file beside ``path`` that
    replaces it only once fully written and synced, so a failure (ENOSPC) leaves no partial file.
    """
    path = os.fspath(path)
    shown = printable(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _failure(exc, shown) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "not a regular file")
        raise OutputError(f"cannot write the output to {shown}: it is {kind} (give a file path)")
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.memsym-{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            data = text.encode("utf-8")
            view = memoryview(data)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise _failure(exc, shown) from None
