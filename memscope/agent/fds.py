"""The agent's own descriptors: held above the program's usual range, close-on-exec, and checked before each use.

A program may close every inherited descriptor (``os.closerange(3, ...)``, as daemonizers do) and be handed the
same numbers by its next open(). The agent must then never write to, read from or close that number: it would be
the program's file or connection. So each descriptor the agent keeps is moved to a high number (the program's own
opens get the lowest free one) and remembered by identity (st_dev, st_ino); before each use the number is checked
to still name that object, and one that does not is forgotten, never closed.
"""

import os
import stat

try:
    import fcntl
except ImportError:  # not on Linux/macOS: no descriptor juggling, the identity check still holds
    fcntl = None

HIGH = 1000  # above what a program usually holds; below the common soft limit of 1024


def _floor():
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except Exception:
        return HIGH
    if soft == resource.RLIM_INFINITY:
        return HIGH
    return max(3, min(HIGH, soft - 24))  # F_DUPFD fails when the floor is at or past the soft limit


def lift(fd):
    """A close-on-exec duplicate of ``fd`` at a high number; ``fd`` (just opened by the agent) is closed. Where
    that cannot be done, ``fd`` itself is returned, made close-on-exec."""
    if fcntl is None:
        return fd
    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _floor())
    except (OSError, ValueError, AttributeError):
        try:
            os.set_inheritable(fd, False)
        except OSError:
            pass
        return fd
    os.close(fd)
    return high


def identity(fd):
    """What ``fd`` names now: (st_dev, st_ino, is a socket), or None when it names nothing."""
    try:
        st = os.fstat(fd)
    except (OSError, ValueError, TypeError):
        return None
    return st.st_dev, st.st_ino, stat.S_ISSOCK(st.st_mode)


def owns(fd, ident):
    """True while ``fd`` still names the object the agent opened (``ident`` from ``identity`` then)."""
    return fd is not None and fd >= 0 and ident is not None and identity(fd) == ident


def close_if_own(fd, ident):
    """Close ``fd`` only if it is still the agent's; a number the program was handed since is left alone."""
    if owns(fd, ident):
        try:
            os.close(fd)
        except OSError:
            pass
