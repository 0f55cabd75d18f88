"""The agent's own descriptors: held where the program cannot be handed their numbers, close-on-exec, and checked
before each use.

A program may close every inherited descriptor (``os.closerange(3, ...)``, as daemonizers do) and be handed the
same numbers by its next open() or dup2(). The agent must then never write to, read from or close that number: it
would be the program's file or connection. So each descriptor the agent keeps is moved to a number at or above
the process's soft RLIMIT_NOFILE (the limit is lifted for the time of one fcntl, then put back): open(), dup(),
dup2() and F_DUPFD never hand out such a number, so no thread of the program can be given it, not even one that
races the agent between its check and its use. Where that cannot be done (the soft limit is already the hard
one and this process may not raise it; a huge limit, whose descriptor table would cost memory; the program
raised its limit later), the descriptor goes to a high number below the limit (the program's own opens get the
lowest free one). Either way it is remembered by identity (st_dev, st_ino) and checked before each use: a number
that no longer names it is forgotten, never closed.
"""
from __future__ import annotations

import os
import stat
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up cost)
if TYPE_CHECKING:
    from typing import Tuple

    Ident = Tuple[int, int, bool]  # what a descriptor names: (st_dev, st_ino, is a socket)

try:
    import fcntl
except ImportError:  # not on Linux/macOS: no descriptor juggling, the identity check still holds
    fcntl = None  # type: ignore[assignment]  # (mypy checks the POSIX branch)

HIGH = 1000  # above what a program usually holds; below the common soft limit of 1024
SPAN = 16  # numbers lifted above the soft limit: the agent's own descriptors (socket, faulthandler, probes)
MAX_LIFTED = 1 << 14  # a descriptor at number N makes the kernel's table ~8 N bytes (fork copies it): not above


def _floor() -> int:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except Exception:
        return HIGH
    if soft == resource.RLIM_INFINITY:
        return HIGH
    return max(3, min(HIGH, soft - 24))  # F_DUPFD fails when the floor is at or past the soft limit


def lift(fd: int) -> int:
    """A close-on-exec duplicate of ``fd`` at a high number; ``fd`` (just opened by the agent) is closed. Where
    that cannot be done, ``fd`` itself is returned, made close-on-exec."""
    if fcntl is None:
        return fd
    try:
        high = _above_limit(fd)
        if high is None:
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _floor())
    except (OSError, ValueError, AttributeError):
        try:
            os.set_inheritable(fd, False)
        except OSError:
            pass
        return fd
    os.close(fd)
    return high


def _above_limit(fd: int) -> int | None:
    """A close-on-exec duplicate of ``fd`` at the soft RLIMIT_NOFILE or just above, or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        inf = resource.RLIM_INFINITY
        if soft == inf or soft > MAX_LIFTED:
            return None
        if hard != inf and hard < soft + SPAN:
            if os.geteuid() != 0:  # only a privileged process may raise its hard limit (then put it back)
                return None
            with open("/proc/sys/fs/nr_open") as f:
                if int(f.read()) < soft + SPAN:
                    return None
        raised = (soft + SPAN, max(hard, soft + SPAN) if hard != inf else inf)
        resource.setrlimit(resource.RLIMIT_NOFILE, raised)
        try:
            return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, soft)
        except OSError:
            return None  # all SPAN numbers taken (the agent's, a fork's): the high floor below the limit
        finally:
            if resource.getrlimit(resource.RLIMIT_NOFILE) == raised:  # not the program's own setting since
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    except (OSError, ValueError):
        return None


def identity(fd: int) -> Ident | None:
    """What ``fd`` names now: (st_dev, st_ino, is a socket), or None when it names nothing."""
    try:
        st = os.fstat(fd)
    except (OSError, ValueError, TypeError):
        return None
    return st.st_dev, st.st_ino, stat.S_ISSOCK(st.st_mode)


def owns(fd: int | None, ident: Ident | None) -> bool:
    """True while ``fd`` still names the object the agent opened (``ident`` from ``identity`` then)."""
    return fd is not None and fd >= 0 and ident is not None and identity(fd) == ident


def close_if_own(fd: int | None, ident: Ident | None) -> None:
    """Close ``fd`` only if it is still the agent's; a number the program was handed since is left alone."""
    if fd is not None and owns(fd, ident):
        try:
            os.close(fd)
        except OSError:
            pass
