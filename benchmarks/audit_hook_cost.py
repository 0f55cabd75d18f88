"""What the agent's audit hook (memscope/agent/crash.py, ``install_excepthook``) costs every audited call.

The hook sees the interpreter's "sys.excepthook" event (an uncaught exception, before a user's hook that may end
the process with os._exit) and "os.exec" (the image is about to be replaced); every other audited call (open,
import, sys._getframe as logging uses it, time.sleep, pickle.find_class) pays one Python call that compares the
event's name and returns. Audit hooks cannot be removed, so each side runs in a fresh interpreter:

    python benchmarks/audit_hook_cost.py [--calls 1000000] [--repeats 5]

Prints ns per call of ``sys._getframe()`` (an audited call that costs almost nothing itself) and of
``open("/dev/null").close()``, without and with the agent's hook, medians of the repeats.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = r"""
import os, sys, tempfile, time
calls, repeats, hooked = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
if hooked:
    # Loaded as the sitecustomize loads it in a run's processes: the agent package alone, not memscope's.
    import importlib.util

    pkg = os.path.join(sys.argv[4], "memscope", "agent")
    spec = importlib.util.spec_from_file_location(
        "_memscope_agent", os.path.join(pkg, "__init__.py"), submodule_search_locations=[pkg])
    agent = importlib.util.module_from_spec(spec)
    sys.modules["_memscope_agent"] = agent
    spec.loader.exec_module(agent)
    crash = agent.crash

    class Channel:
        def send(self, msg): return True
        def send_now(self, msg, timeout=0): return True

    crash.install_excepthook(tempfile.mkdtemp(), Channel())

def per_call(fn, n):
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e9

frame = min(per_call(sys._getframe, calls) for _ in range(repeats))
opened = min(per_call(lambda: open(os.devnull).close(), calls // 20) for _ in range(repeats))
print(frame, opened)
"""


def measure(hooked: bool, calls: int, repeats: int) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-S", "-c", _CHILD, str(calls), str(repeats), "1" if hooked else "0", os.path.dirname(HERE)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    plain = [measure(False, a.calls, 3) for _ in range(a.repeats)]
    hooked = [measure(True, a.calls, 3) for _ in range(a.repeats)]
    for i, what in enumerate(("sys._getframe()", 'open("/dev/null").close()')):
        p, h = statistics.median(x[i] for x in plain), statistics.median(x[i] for x in hooked)
        print(f"{what:28s} {p:8.0f} ns -> {h:8.0f} ns per call (+{h - p:.0f} ns)")


if __name__ == "__main__":
    main()
