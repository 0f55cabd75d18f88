"""A run's options and their checks: everything that can be refused before a run starts, in one place.

``Options`` is what ``memscope.run(..., **options)``, ``memscope run`` and ``%memscope`` all fill in; the checks
raise ``LaunchError`` with one line for the user.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from typing import Sequence

from .. import outfile
from ..errors import LaunchError

# The agent's sitecustomize directory, put first on the run's PYTHONPATH.
AGENT_SITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agent", "site")
_INTERVALS = ("interval_s", "pss_interval_s", "host_interval_s", "discover_interval_s")
# A sampling period below this buys no information (a round of /proc reads takes about a millisecond a process)
# and costs a whole core: --interval 1e-9 made memscope's sampler spin at 96 % of one.
MIN_INTERVAL_S = 0.01


@dataclass
class Options:
    """How a run is watched and recorded (the same options as ``memscope run``'s flags)."""

    record_dir: str | None = None
    interval_s: float = 0.2  # RSS rounds (statm): cheap
    pss_interval_s: float = 2.0  # PSS rounds (smaps_rollup): 0.5-14 ms a process
    host_interval_s: float = 1.0
    discover_interval_s: float = 0.5
    grace_s: float = 5.0  # SIGINT -> SIGTERM -> SIGKILL
    output: str = "inherit"  # "inherit" (CLI), "capture" (notebook: kept as a tail and recorded)
    agent: bool = True
    limit_bytes: int | None = None  # a budget to compare against, instead of the container's limit
    summary_json: str | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    script: str | None = None
    scalene: str | bool | None = None  # None, "cpu" or "memory": the script runs under Scalene, profiling off
    cuda_history: int | None = None  # entries of CUDA allocation history kept for the OOM snapshot (None: none)
    prometheus: str | None = None  # "[HOST:]PORT": serve the run's state to Prometheus (export/prometheus.py)
    hostname: str | None = None  # the hostname label (default: this machine's)
    pushgateway: str | None = None  # push the final state to this Pushgateway at the end
    prometheus_linger_s: float = 0.0  # keep the endpoint up this long after the end, for a last scrape
    stacks_at: float = 0.9  # take every process's stacks once the tree reaches this share of its limit (0: never)
    stall_after_s: float = 60.0  # ... and once it used no CPU and printed nothing this long (0: never)


def check_options(o: Options) -> None:
    """Refuse options no sampler can honour (raises LaunchError)."""
    for name in _INTERVALS:
        v = getattr(o, name)
        # NaN makes a busy loop, inf a sampler that never wakes: refuse both here too (the API's door).
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (MIN_INTERVAL_S <= v <= 86400):
            raise LaunchError(f"{name} must be a number of seconds from {MIN_INTERVAL_S:g} to 86400, not {v!r}")
    v = o.grace_s
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= 86400):
        raise LaunchError(f"grace_s must be a number of seconds above 0 and at most 86400, not {v!r}")
    v = o.prometheus_linger_s
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v <= 86400):
        raise LaunchError(f"prometheus_linger_s must be a number of seconds from 0 to 86400, not {v!r}")
    v = o.stacks_at
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v <= 1):
        raise LaunchError(f"stacks_at must be a share of the limit from 0 (never) to 1, not {v!r}")
    v = o.stall_after_s
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v <= 86400):
        raise LaunchError(f"stall_after_s must be a number of seconds from 0 (never) to 86400, not {v!r}")
    if o.limit_bytes is not None and not (isinstance(o.limit_bytes, int) and 0 < o.limit_bytes < 2**63):
        raise LaunchError(f"limit_bytes must be a positive number of bytes, not {o.limit_bytes!r}")


def attach_target(pid: int) -> list[str]:
    """The command line of the running process ``pid`` that a run attaches to (LaunchError if there is none)."""
    import psutil

    if not psutil.pid_exists(pid) or pid <= 0:
        raise LaunchError(f"no process with pid {pid}")
    try:
        return psutil.Process(pid).cmdline() or [str(pid)]
    except psutil.Error as exc:
        raise LaunchError(f"cannot watch pid {pid}: {exc}") from None


def resolve_command(argv: Sequence[str], cwd: str | None = None) -> tuple[list[str], str | None]:
    """A first argument ending in .py runs with this Python; returns (command, user's script or None).

    Relative paths are checked where the command will run (``cwd``), as the child will resolve them."""
    argv = list(argv)
    if not argv:
        raise LaunchError("no command given: memscope run train.py [args] | memscope run -- CMD [args]")
    here = os.path.abspath(cwd) if cwd else os.getcwd()
    if cwd is not None and not os.path.isdir(here):
        raise LaunchError(f"{cwd}: no such directory (cwd)")

    def at(path: str) -> str:
        return os.path.join(here, path)

    first = argv[0]
    if first.endswith(".py"):
        if not os.path.exists(at(first)):
            raise LaunchError(f"{first}: no such file" + (f" in {cwd}" if cwd else ""))
        if os.path.isdir(at(first)):
            raise LaunchError(f"{first} is a directory, not a script")
        if not os.path.isfile(at(first)):  # a FIFO would hang the read below until a writer came
            raise LaunchError(f"{first} is not a regular file (a FIFO, socket or device), not a script")
        try:
            with open(at(first), "rb") as f:
                compile(f.read(), first, "exec")
        except SyntaxError as exc:
            raise LaunchError(f"{first}, line {exc.lineno}: SyntaxError: {exc.msg}") from None
        except (OSError, ValueError) as exc:
            raise LaunchError(f"{first}: cannot read it: {exc}") from None
        return [sys.executable, *argv], os.path.normpath(at(first))
    if os.path.isdir(at(first)) and os.sep in first:
        raise LaunchError(f"{first} is a directory, not a command or a script")
    path = shutil.which(first) if os.sep not in first else first
    if os.sep in first:
        if not os.path.exists(at(first)):
            raise LaunchError(f"{first}: no such file")
        if os.path.isdir(at(first)):
            raise LaunchError(f"{first} is a directory, not a command")
        if not os.access(at(first), os.X_OK):
            raise LaunchError(f"{first} is not executable (chmod +x it, or run it with its interpreter)")
    elif path is None:
        if os.path.isdir(at(first)):
            raise LaunchError(f"{first} is a directory, not a command or a script")
        raise LaunchError(f"{first}: command not found")
    # python script.py / bash script.sh: check the script the interpreter is about to run.
    script = None
    base = os.path.basename(first)
    if base.startswith("python") and len(argv) > 1 and argv[1].endswith(".py"):
        resolve_command(argv[1:], cwd)
        script = os.path.normpath(at(argv[1]))
    elif base in ("bash", "sh", "zsh") and len(argv) > 1 and not argv[1].startswith("-"):
        if not os.path.isfile(at(argv[1])):
            raise LaunchError(f"{argv[1]}: no such file")
    return argv, script


def check_record_dir(path: str) -> None:
    """Create the record directory, or refuse one memscope cannot write to."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)  # made here: this user's only (records hold command lines)
    except OSError as exc:
        raise LaunchError(f"cannot create the record directory {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise LaunchError(f"cannot write to the record directory {path}")


def check_summary_path(path: str) -> None:
    """Refuse up front a summary path that cannot be written: a directory, no writable directory for a file, a
    device or FIFO not writable, a descriptor (/dev/fd/N) not open."""
    try:
        outfile.check_writable(path)
    except OSError as exc:
        raise LaunchError(f"cannot write the summary to {path}: {exc.strerror or exc}") from None
