"""How memscope writes numbers, times and process endings for people: one place, so every view says them alike.

Standard library only (layer 0): collectors, analysis, views and the CLI all use it.
"""

from __future__ import annotations

import os
import signal as _signal
from typing import Literal

ByteStyle = Literal["view", "torch", "tenth"]

# Each style is what one audience already reads; the outputs are the ones memscope has always printed.
#   view:  the dashboards and the terminal ("1.25 GiB", "512 MiB", "—" for unknown)
#   torch: PyTorch's own OOM wording ("226.00 MiB", "12 bytes"), so memscope's words and PyTorch's read alike
#   tenth: census and probe tables, one decimal ("3.5 MiB", "?" for unknown)
_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def fmt_bytes(n: float | None, style: ByteStyle = "view") -> str:
    """A byte count for people, in one of the three styles above."""
    if n is None:
        return "—" if style == "view" else "?"
    for unit, size in _UNITS:
        if abs(n) >= size:
            if style == "torch":
                return f"{n / size:.2f} {unit}"
            if style == "tenth":
                return f"{n / size:.1f} {unit}"
            return f"{n / size:.2f} {unit}" if unit == "GiB" else f"{n / size:.0f} {unit}"
    if style == "torch":
        return f"{int(n)} bytes"
    return f"{int(n) if style == 'tenth' else n} B"


def fmt_elapsed(s: float) -> str:
    """Seconds as H:MM:SS."""
    s = int(s)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def signal_name(n: int) -> str:
    """A signal's name ("SIGSEGV"), or "SIG<n>" for a number Python does not name."""
    try:
        return _signal.Signals(n).name
    except ValueError:
        return f"SIG{n}"


def decode_wait_status(status: int | None) -> tuple[int | None, str | None]:
    """A wait(2) status as (exit code, signal name); (None, None) when unknown or neither."""
    if status is None:
        return None, None
    if os.WIFSIGNALED(status):
        return None, signal_name(os.WTERMSIG(status))
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None
    return None, None


def stderr_line(text: str) -> None:
    """One line for the user on memscope's stderr (never raises: the run must reach its end)."""
    import sys

    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
