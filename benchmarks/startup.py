"""memscope's start-up in a notebook: from ``%memscope`` to the first point sent to the chart, and import times.

    python benchmarks/startup.py                 # 3 fresh kernels (~1 min)
    python benchmarks/startup.py --quick         # 1 kernel, 1 import measurement: a CI smoke test (< 30 s)
    python benchmarks/startup.py --out FILE      # also write the Markdown report to FILE

1. In a real IPython kernel (jupyter_client + ipykernel, no browser), per fresh kernel: a cell
   ``%load_ext memscope``, then a cell ``run = %memscope --record DIR sleeper.py`` (a small Python script that
   holds 32 MiB for a few seconds), then the same magic again in the same kernel. For each magic cell the time is
   taken from the kernel's own message timestamps: from ``execute_input`` (the kernel starts the cell) to the
   first chart message (comm_open or update) whose data holds at least one point, i.e. the first point that
   leaves the kernel for the browser. Also: when the cell returned (the kernel's ``idle``). The first magic in a
   kernel pays memscope's imports (the runner, the dashboard, ipywidgets, anywidget, bokeh); the second does not.
2. Import times, each in a fresh interpreter (median of N): ``import memscope`` (what a training script or a
   kernel pays for ``import memscope``; ``python -X importtime``'s cumulative figure), and the magic's imports
   (``memscope.magic``, ``memscope.session``, ``memscope.ui.dashboard``) in an interpreter that has already
   imported IPython and ipykernel, as a kernel has, with the largest packages they pull in.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hostinfo import emit, machine_rows, package_version  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLEEPER = """import sys, time
keep = bytearray(b"x") * (32 << 20)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 4)
"""
KERNEL_PRELOAD = "import IPython, ipykernel.ipkernel"
MAGIC_IMPORTS = "import memscope.magic, memscope.session, memscope.ui.dashboard"


# -- in a kernel ----------------------------------------------------------------------------------------------
def _ts(msg: dict[str, Any]) -> float:
    d = msg["header"]["date"]
    if isinstance(d, str):
        d = dt.datetime.fromisoformat(d.replace("Z", "+00:00"))
    return d.timestamp()


def _points(msg: dict[str, Any]) -> int:
    """The points a chart's custom message carries (memscope.ui.chart.ChartWire: a float32 y buffer a line)."""
    data = msg["content"].get("data") or {}
    content = data.get("content") or {}
    if data.get("method") != "custom" or content.get("type") != "memscope-data":
        return 0
    buffers = msg.get("buffers") or []
    return sum(len(buffers[e[3]]) // 4 for e in content.get("series") or [] if e[3] < len(buffers))


def kernel_trial(workdir: str, sleeper: str, say) -> dict[str, Any]:
    import jupyter_client

    out: dict[str, Any] = {}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO] + [p for p in [env.get("PYTHONPATH")] if p])
    km = jupyter_client.KernelManager(kernel_name="python3")
    t0 = time.perf_counter()
    km.start_kernel(cwd=workdir, env=env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        out["kernel_ready_s"] = time.perf_counter() - t0

        def cell(code: str, timeout: float = 60, want_point: bool = False) -> dict[str, Any]:
            """Run one cell; the kernel's timestamps of its start, its return, and the first chart point."""
            msg_id = kc.execute(code)
            r: dict[str, Any] = {"first_point": None, "points": 0}
            charts: set[str] = set()
            deadline = time.monotonic() + timeout
            idle = False
            while time.monotonic() < deadline:
                try:
                    m = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
                except queue.Empty:
                    break
                t, c = m["msg_type"], m["content"]
                if t == "execute_input" and m["parent_header"].get("msg_id") == msg_id:
                    r["start"] = _ts(m)
                elif t == "error":
                    raise RuntimeError(f"the cell failed: {c.get('ename')}: {c.get('evalue')}")
                elif t == "comm_open" and "rendered_points" in (c.get("data", {}).get("state") or {}):
                    charts.add(c["comm_id"])
                elif t == "comm_msg" and c.get("comm_id") in charts and r["first_point"] is None:
                    n = _points(m)
                    if n:
                        r["first_point"], r["points"] = _ts(m), n
                elif t == "status" and m["parent_header"].get("msg_id") == msg_id and c["execution_state"] == "idle":
                    r["idle"], idle = _ts(m), True
                if idle and (r["first_point"] is not None or not want_point):
                    break
            return r

        rec = os.path.join(workdir, "runs")
        r = cell("%load_ext memscope")
        out["load_ext_s"] = r["idle"] - r["start"]
        for key in ("cold", "warm"):
            r = cell(f"run = %memscope --record {rec} {sleeper} 3", want_point=True)
            if r["first_point"] is None:
                raise RuntimeError(f"{key}: no chart point within the time limit")
            out[f"{key}_first_point_s"] = r["first_point"] - r["start"]
            out[f"{key}_cell_s"] = r["idle"] - r["start"]
            out[f"{key}_points"] = r["points"]
            say(
                f"  {key}: cell returned in {out[f'{key}_cell_s']:.3f} s, first point sent at "
                f"{out[f'{key}_first_point_s']:.3f} s"
            )
            cell("run.wait(30); None", timeout=40)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return out


# -- import times -----------------------------------------------------------------------------------------------
def importtime(code: str, preload: str = "") -> tuple[float, list[tuple[str, float]]]:
    """(cumulative seconds of the imports ``code`` triggers, [(package, seconds)] largest first), from
    ``python -X importtime`` in a fresh interpreter; modules ``preload`` imported before are not counted. A
    package's figure is the largest cumulative time of any of its modules (nested packages overlap)."""
    src = (preload + "\n" if preload else "") + "import sys; sys.stderr.write('--MARK--\\n')\n" + code
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", src],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    if p.returncode != 0:
        raise RuntimeError(f"{code!r} failed: {p.stderr[-500:]}")
    after = p.stderr.split("--MARK--\n", 1)[-1]
    total = 0.0
    pkgs: dict[str, float] = {}
    for line in after.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
        if not m:
            continue
        cum = int(m.group(2)) / 1e6
        if not m.group(3):  # a top-level import (not nested under another)
            total += cum
        root = m.group(4).split(".")[0]
        pkgs[root] = max(pkgs.get(root, 0.0), cum)
    return total, sorted(((k, v) for k, v in pkgs.items() if k != "memscope"), key=lambda x: -x[1])


def wall(code: str, preload: str = "") -> float:
    src = (
        preload + "\n" if preload else ""
    ) + f"import time; t = time.perf_counter()\n{code}\nprint(time.perf_counter() - t)"
    p = subprocess.run(
        [sys.executable, "-c", src], capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO)
    )
    return float(p.stdout.strip().splitlines()[-1])


# -- report -----------------------------------------------------------------------------------------------------
def machine() -> list[tuple[str, str]]:
    return machine_rows(*((p, package_version(p)) for p in ("ipykernel", "ipywidgets", "anywidget", "bokeh")))


def _range(xs: list[float], fmt: str = "{:.3f}") -> str:
    if not xs:
        return "—"
    med = statistics.median(xs)
    if len(xs) == 1:
        return fmt.format(med) + " s"
    return f"{fmt.format(med)} s median ({fmt.format(min(xs))}–{fmt.format(max(xs))}, n={len(xs)})"


def report(trials: list[dict[str, Any]], imp: dict[str, Any], load_end: tuple) -> str:
    lines = ["# memscope start-up", "", "| machine | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in machine()]
    lines += [f"| load average at end | {' '.join(f'{x:.2f}' for x in load_end)} |", ""]
    g = lambda k: [t[k] for t in trials if k in t]  # noqa: E731
    lines += [
        "| in a kernel (kernel-side timestamps) | |",
        "|---|---|",
        f"| **`%memscope` to the first point sent to the chart**, first run in the kernel | "
        f"**{_range(g('cold_first_point_s'))}** |",
        f"| the same, second run in the same kernel | **{_range(g('warm_first_point_s'))}** |",
        f"| the `%memscope` cell returns, first / second run | {_range(g('cold_cell_s'))} / "
        f"{_range(g('warm_cell_s'))} |",
        f"| points in that first message, first / second run | "
        f"{', '.join(str(x) for x in g('cold_points'))} / {', '.join(str(x) for x in g('warm_points'))} |",
        f"| `%load_ext memscope` | {_range(g('load_ext_s'))} |",
        f"| (the kernel itself starting, not memscope) | {_range(g('kernel_ready_s'), '{:.2f}')} |",
        "",
    ]
    lines += [
        "| import times (fresh interpreter each) | |",
        "|---|---|",
        f"| `import memscope` (-X importtime, cumulative) | {_range(imp['memscope_it'], '{:.4f}')} |",
        f"| `import memscope` (wall, perf_counter around it) | {_range(imp['memscope_wall'], '{:.4f}')} |",
        f"| the magic's imports after IPython + ipykernel ({MAGIC_IMPORTS.replace('import ', '')}), wall | "
        f"{_range(imp['magic_wall'])} |",
        f"| the same, -X importtime (cumulative over the top-level imports) | {_range(imp['magic_it'])} |",
        "| largest packages the magic's imports pull in (-X importtime, one run; nested ones overlap) | "
        + ", ".join(f"{n} {s * 1e3:.0f} ms" for n, s in imp["magic_top"][:8])
        + " |",
        "",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=3, help="fresh kernels (3)")
    ap.add_argument("--imports", type=int, default=7, help="fresh interpreters per import measurement (7)")
    ap.add_argument("--quick", action="store_true", help="1 kernel, 1 interpreter each: a CI smoke test")
    ap.add_argument("--out", metavar="FILE", help="also write the Markdown report here")
    ns = ap.parse_args(argv)
    kernels, n_imp = (1, 1) if ns.quick else (ns.kernels, ns.imports)

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    imp: dict[str, Any] = {"memscope_it": [], "memscope_wall": [], "magic_it": [], "magic_wall": []}
    say("import times...")
    for _ in range(n_imp):
        imp["memscope_it"].append(importtime("import memscope")[0])
        imp["memscope_wall"].append(wall("import memscope"))
        s, top = importtime(MAGIC_IMPORTS, KERNEL_PRELOAD)
        imp["magic_it"].append(s)
        imp["magic_top"] = top
        imp["magic_wall"].append(wall(MAGIC_IMPORTS, KERNEL_PRELOAD))
    trials = []
    try:
        import ipykernel  # noqa: F401
        import jupyter_client  # noqa: F401
    except ImportError:
        say("jupyter_client or ipykernel is not installed: no kernel measurement")
    else:
        work = tempfile.mkdtemp(prefix="memscope-startup-")
        try:
            sleeper = os.path.join(work, "sleeper.py")
            with open(sleeper, "w") as f:
                f.write(SLEEPER)
            for i in range(kernels):
                say(f"kernel {i + 1}/{kernels}")
                trials.append(kernel_trial(work, sleeper, say))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    text = report(trials, imp, os.getloadavg())
    emit(text, ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
