"""Output files (the summary JSON, HTML pages) written the way shell redirection writes them.

A path names what the user means: a symlink is followed, a FIFO, a device or ``/dev/stdout`` is opened and
written to. Only a regular file (or a path that does not exist yet) is written whole-or-not-at-all, through a
temporary beside it renamed over it; renaming over anything else would replace the thing itself (a device node
turned into a file, a FIFO's reader left waiting, a symlink turned into a copy).

Standard library only (layer 0).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
import time

FIFO_WAIT_S = 60.0  # how long a FIFO may go without a reader before the write is given up (the shell waits forever)
_MAX_HOPS = 40  # the kernel's own limit on a chain of symlinks
# Paths that name one of this process's descriptors (``>(jq .)`` passes /dev/fd/63). The shell writes to the
# descriptor itself, not to whatever it was opened on: reopening /proc/self/fd/1 with O_TRUNC would empty a
# file the user redirected stdout to, and renaming over its target would replace it.
_FD_PATH = re.compile(r"/(?:dev/fd|proc/self/fd|proc/thread-self/fd|proc/(\d+)/fd)/(\d+)")
_STD = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}


def _own_fd(path: str) -> int | None:
    if path in _STD:
        return _STD[path]
    m = _FD_PATH.fullmatch(path)
    if m and (m.group(1) is None or int(m.group(1)) == os.getpid()):
        return int(m.group(2))
    return None


def _resolve(path: str) -> tuple[str, int | None]:
    """Follow ``path``'s symlinks one hop at a time: (the last path, a descriptor of ours it names or None)."""
    path = os.path.abspath(path)
    for _ in range(_MAX_HOPS):
        fd = _own_fd(path)
        if fd is not None:
            return path, fd
        try:
            target = os.readlink(path)
        except OSError:  # not a symlink, or nothing there yet
            return path, None
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)


def _stat_target(real: str, path: str) -> os.stat_result | None:
    """What the resolved path names now (None: nothing yet); a directory is refused."""
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "it is a directory", path)
    return st


def check_writable(path: str) -> None:
    """Raise OSError (with a ``strerror`` fit for one line) if ``path`` cannot be written as an output file."""
    real, fd = _resolve(path)
    if fd is not None:
        os.fstat(fd)  # EBADF: no such descriptor
        return
    st = _stat_target(real, path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        if not os.access(real, os.W_OK):
            raise PermissionError(errno.EACCES, "not writable", path)
        return
    d = os.path.dirname(real)
    if not os.path.isdir(d):
        raise FileNotFoundError(errno.ENOENT, f"no directory {d}", path)
    if not os.access(d, os.W_OK | os.X_OK) and not (st is not None and os.access(real, os.W_OK)):
        raise PermissionError(errno.EACCES, f"no writable directory {d}", path)


def write_text(path: str, text: str) -> str:
    """Write ``text`` (UTF-8) to ``path`` as ``> path`` would; returns ``path``. Raises OSError."""
    # A lone surrogate is a byte of argv or a file name that was not UTF-8 (Python's surrogateescape): written
    # as \udcff, not refused (a strict encode made `report --html` refuse a valid record).
    data = text.encode("utf-8", "backslashreplace")
    real, fd = _resolve(path)
    if fd is not None:
        _write_all(fd, data)
        return path
    st = _stat_target(real, path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_and_close(_open_special(real, stat.S_ISFIFO(st.st_mode)), data)
        return path
    try:
        tmp_fd, tmp = tempfile.mkstemp(prefix=".memscope-", dir=os.path.dirname(real))
    except PermissionError:
        if st is None:
            raise
        # A file the user may write in a directory they may not: what the shell does, in place.
        _write_and_close(os.open(real, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC), data)
        return path
    try:
        _write_all(tmp_fd, data)
        os.fsync(tmp_fd)
        # The file keeps its mode; a new one gets what the shell would give it (mkstemp's 0600 is too tight for
        # a summary meant to be read by CI or a colleague).
        mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
        os.fchmod(tmp_fd, mode)
        os.close(tmp_fd)
        tmp_fd = -1
        os.replace(tmp, real)
    except BaseException:
        if tmp_fd >= 0:
            os.close(tmp_fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def _write_and_close(fd: int, data: bytes) -> None:
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _open_special(path: str, fifo: bool) -> int:
    """Open a device or FIFO for writing; a FIFO waits for its reader (FIFO_WAIT_S at most, not forever)."""
    if not fifo:
        return os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    deadline = time.monotonic() + FIFO_WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                if exc.errno == errno.ENXIO:
                    raise OSError(errno.ENXIO, f"no reader on the FIFO after {FIFO_WAIT_S:g} s", path) from None
                raise
            time.sleep(0.1)
            continue
        os.set_blocking(fd, True)  # a slow reader is waited for, as the shell's writer would be
        return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def is_stdout(path: str) -> bool:
    """Whether ``path`` is where this process's stdout goes (a note "written to X" then belongs on stderr)."""
    try:
        return os.path.samestat(os.stat(path), os.fstat(1))
    except (OSError, ValueError):
        return False
