"""The machine a benchmark ran on: one description for every benchmark's report (run as scripts, so imported
as a sibling module)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import subprocess


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def ram() -> str:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except (OSError, ValueError):
        pass
    return "?"


def hypervisor() -> str:
    """' (VM, KVM)' on a virtual machine (timings there are noisier), else ''."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    m = re.search(r"Hypervisor vendor:\s*(\S+)", out)
    return f" (VM, {m.group(1)})" if m else ""


def package_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def emit(text: str, out: str | None) -> None:
    """A benchmark's Markdown report: printed, and also written to ``out`` when one is given (run_all.py reads it)."""
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)


def machine_rows(*extra: tuple[str, str], load_when: str = "at start") -> list[tuple[str, str]]:
    """The report's machine table: CPU, cores, RAM, kernel, Python, memscope, then ``extra``, then the load."""
    return [
        ("CPU", cpu_model() + hypervisor()),
        ("cores", str(os.cpu_count())),
        ("RAM", ram()),
        ("kernel", f"{platform.system()} {platform.release()}"),
        ("Python", platform.python_version()),
        ("memscope", package_version("memscope-ml")),
        *extra,
        (f"load average {load_when}", " ".join(f"{x:.2f}" for x in os.getloadavg())),
    ]
