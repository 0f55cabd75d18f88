"""The platform, chosen once: ``procfs`` is /proc's reader on Linux and psutil's stand-in elsewhere (macOS), with
the same functions; every other module takes it from here rather than choosing again."""

from __future__ import annotations

import sys

LINUX = sys.platform.startswith("linux")

if LINUX:
    from . import procfs
else:  # pragma: no cover - exercised on macOS
    from . import portable as procfs  # type: ignore[no-redef]

__all__ = ["LINUX", "procfs"]
