"""memscope's overhead on a training run: the same training loop, plain and under memscope, in alternating pairs.

    python benchmarks/overhead.py                     # 5 pairs, the full loop (~3 min on 2 cores)
    python benchmarks/overhead.py --pairs 9 --out overhead.md
    python benchmarks/overhead.py --quick             # 1 pair, a short loop: a CI smoke test (~1 min)

Each pair runs ``python benchmarks/train_loop.py`` plain and under
``python -m memscope.cli run --quiet --record <tmpdir> benchmarks/train_loop.py`` (default settings, agent on),
plain first in even pairs and memscope first in odd ones, so that slow drift of the machine cancels out.

What it measures, per run:

- loop: the ``LOOP_SECONDS`` the training prints (first optimizer step to the end of the last validation). The
  loop-time ratio memscope/plain is the honest overhead on training: the agent in every process, the collector's
  sampling competing for the CPU, the reads of /proc/<pid>/smaps_rollup taking the training's mmap lock.
- wall: the whole command, from spawn to reaped; the ratio adds memscope's own start-up and finish.
- memscope CPU: the collector process's own user+sys time (all its threads, not the training's). Exactly:
  os.wait4's rusage of the memscope process (itself plus its reaped children) minus its children's time as
  /proc/<pid>/stat (cutime+cstime) shows it once the training has been reaped; it falls back to the last polled
  utime+stime (polled every 50 ms) when that is not available. Given as % of one core over the memscope run's
  wall time, and as the steady-state rate (the slope between 30% and 80% of the run), which leaves out memscope's
  start-up (imports) and finish (summary).
- CPU ratio: all the CPU time of the memscope run (the training tree and memscope, from wait4's rusage) over the
  plain run's: what memscope adds to the work, less sensitive than time to other jobs on the machine.
- other load: CPU the rest of the machine used during the run (from /proc/stat, minus the run's own tree and this
  script), in cores. Another job on a 2-core machine skews the ratios: look at this column before trusting them.

- steal: CPU time the hypervisor gave to other guests during the run (/proc/stat), in cores: on a VM, a noisy
  neighbour slows a run without showing up as load on this machine.

For comparison, the same loop under other tools where this Python can import them (never installed by this
script), ``--tool-runs`` runs each (default 2), interleaved with the first pairs so that they see the same
machine, each against the median plain run:

- memray: ``python -m memray run --quiet --force -o <tmp>/out.bin`` (its default: every allocation of the main
  process, Python allocators not traced natively; workers not followed);
- scalene-cpu: ``python -m scalene run --cpu-only`` (CPU sampling only: no memory or GPU profiling);
- scalene-off: ``python -m scalene run --cpu-only --off`` (started with profiling off: Scalene's cost when loaded
  but not profiling). Scalene's default mode (memory profiling through its preloaded allocator) is not run.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from hostinfo import emit, machine_rows, package_version

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOP = os.path.join("benchmarks", "train_loop.py")
TICK = os.sysconf("SC_CLK_TCK")
QUICK_STEPS = 60


# -- measuring one run -------------------------------------------------------------------------------------------


@dataclass
class Result:
    mode: str
    wall_s: float
    loop_s: float | None
    rc: int
    tree_cpu_s: float  # user+sys of the whole tree (wait4 rusage: the process and reaped children)
    self_cpu_s: float | None = None  # the launched process alone (memscope's collector, for memscope runs)
    self_cpu_method: str = ""
    self_cpu_polled: float | None = None  # the last polled utime+stime: a lower bound, for a cross-check
    steady_cpu_frac: float | None = None
    other_load: float | None = None  # cores used by the rest of the machine during the run
    steal: float | None = None  # cores the hypervisor gave to other guests during the run
    final: str = ""  # the FINAL line (losses): the same everywhere when the loop is deterministic
    output: str = ""
    record: dict = field(default_factory=dict)


def _read_stat(pid: int) -> tuple[float, float] | None:
    """(utime+stime, cutime+cstime) of a process, in seconds; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    # fields[0] is field 3 (state): utime, stime, cutime, cstime are fields 14-17.
    return (int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK


def _busy_jiffies() -> tuple[float, float] | None:
    """(busy, steal) seconds of the whole machine, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()[1:]
    except OSError:
        return None
    v = [int(x) for x in parts]
    user, nice, system, _idle, _iowait, irq, softirq = v[:7]
    steal = v[7] if len(v) > 7 else 0
    return (user + nice + system + irq + softirq) / TICK, steal / TICK


def machine_load(window_s: float = 1.0) -> float:
    """Cores busy on the whole machine over a short window (this script is idle meanwhile)."""
    a = _busy_jiffies()
    time.sleep(window_s)
    b = _busy_jiffies()
    return (b[0] - a[0]) / window_s if a and b else 0.0


def wait_idle(max_wait_s: float, threshold: float, say) -> None:
    """Wait (up to max_wait_s) until the machine is quiet: another job skews a pair more than memscope does."""
    deadline = time.monotonic() + max_wait_s
    load = machine_load()
    if load <= threshold:
        return
    say(f"the machine is busy ({load:.2f} cores): waiting up to {max_wait_s:.0f} s for it to go below {threshold}")
    while time.monotonic() < deadline:
        load = machine_load(2.0)
        if load <= threshold:
            return
    say(f"still busy ({load:.2f} cores): going on anyway")


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_once(mode: str, argv: list[str], env: dict[str, str], poll_s: float = 0.05) -> Result:
    out = tempfile.TemporaryFile()
    series: list[tuple[float, float, float]] = []  # (t, self cpu, children cpu)
    stop = threading.Event()
    busy0, me0 = _busy_jiffies(), _self_cpu()
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)

    def poll() -> None:
        while True:
            s = _read_stat(proc.pid)
            if s is None:
                return
            series.append((time.perf_counter() - t0, *s))
            if stop.wait(poll_s):
                return

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    while True:
        try:
            _, status, ru = os.wait4(proc.pid, 0)
            break
        except InterruptedError:
            continue
    wall = time.perf_counter() - t0
    stop.set()
    th.join()
    busy1, me1 = _busy_jiffies(), _self_cpu()
    proc.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from reaping again
    out.seek(0)
    text = out.read().decode("utf-8", "replace")
    out.close()

    tree_cpu = ru.ru_utime + ru.ru_stime
    res = Result(mode, wall, _parse_loop(text), proc.returncode, tree_cpu, output=text)
    m = re.search(r"^FINAL .*$", text, re.M)
    res.final = m.group(0) if m else ""
    # The launched process's own CPU: exact once its only child (the training root) has been reaped.
    res.self_cpu_polled = series[-1][1] if series else None
    reaped = [s for s in series if s[2] > 0]
    if reaped:
        res.self_cpu_s, res.self_cpu_method = max(0.0, tree_cpu - reaped[-1][2]), "exact"
    elif series:
        res.self_cpu_s, res.self_cpu_method = series[-1][1], "polled"
    if len(series) > 4:
        a = min(series, key=lambda s: abs(s[0] - 0.3 * wall))
        b = min(series, key=lambda s: abs(s[0] - 0.8 * wall))
        if b[0] - a[0] > 1.0:
            res.steady_cpu_frac = (b[1] - a[1]) / (b[0] - a[0])
    if busy0 and busy1:
        other = (busy1[0] - busy0[0]) - tree_cpu - (me1 - me0)
        res.other_load = max(0.0, other) / wall
        res.steal = max(0.0, busy1[1] - busy0[1]) / wall
    return res


def _parse_loop(text: str) -> float | None:
    m = re.findall(r"^LOOP_SECONDS=([0-9.]+)\s*$", text, re.M)
    return float(m[-1]) if m else None


# -- the modes ---------------------------------------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    """This environment without any memscope of an outer run (this script may itself run under memscope), and
    with bytecode written and read, as an installed memscope has it: PYTHONDONTWRITEBYTECODE over a source checkout
    would compile memscope's modules (the engine's, the agent's in every process) at every start."""
    skip = ("PYTHONDONTWRITEBYTECODE",)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSCOPE_") and k not in skip}
    site = os.path.join("memscope", "agent", "site")
    pp = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not p.rstrip(os.sep).endswith(site)]
    if pp:
        env["PYTHONPATH"] = os.pathsep.join(pp)
    else:
        env.pop("PYTHONPATH", None)
    return env


def command(mode: str, py: str, loop_args: list[str], tmp: str) -> list[str]:
    if mode == "plain":
        return [py, LOOP, *loop_args]
    if mode == "memscope":
        return [py, "-m", "memscope.cli", "run", "--quiet", "--record", tmp, LOOP, *loop_args]
    if mode == "memray":
        return [py, "-m", "memray", "run", "--quiet", "--force", "-o", os.path.join(tmp, "out.bin"), LOOP, *loop_args]
    if mode in ("scalene-cpu", "scalene-off"):
        off = ["--off"] if mode == "scalene-off" else []
        return [
            py,
            "-m",
            "scalene",
            "run",
            "--cpu-only",
            *off,
            "-o",
            os.path.join(tmp, "out.json"),
            LOOP,
            "---",
            *loop_args,
        ]
    raise ValueError(mode)


TOOLS = {"memray": "memray", "scalene-cpu": "scalene", "scalene-off": "scalene"}  # mode -> module it needs


def run_mode(mode: str, py: str, loop_args: list[str], env: dict[str, str]) -> Result:
    tmp = tempfile.mkdtemp(prefix=f"memscope-bench-{mode}-")
    try:
        res = run_once(mode, command(mode, py, loop_args, tmp), env)
        if mode == "memscope" and res.rc == 0:
            res.record = _record_summary(py, tmp, env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if res.rc != 0 or res.loop_s is None:
        tail = "\n".join(res.output.splitlines()[-25:])
        raise SystemExit(f"overhead: the {mode} run failed (exit status {res.rc}):\n{tail}")
    return res


def _record_summary(py: str, tmp: str, env: dict[str, str]) -> dict:
    """What memscope recorded (a check that it really watched the tree), read after the timing."""
    p = subprocess.run(
        [py, "-m", "memscope.cli", "report", "last", "--json", "--record", tmp],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    try:
        s = json.loads(p.stdout)
    except ValueError:
        return {}
    return {
        "cause": (s.get("exit") or {}).get("cause"),
        "processes": len(s.get("processes") or []),
        "peak_pss": (s.get("peak") or {}).get("tree_pss_bytes"),
    }


# -- the report --------------------------------------------------------------------------------------------------


def machine() -> list[tuple[str, str]]:
    return machine_rows(("torch", package_version("torch")), load_when="at the end")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def spread(runs: list[Result]) -> str:
    loops = [r.loop_s for r in runs if r.loop_s is not None]
    cv = 100 * statistics.pstdev(loops) / statistics.mean(loops)
    return f"{min(loops):.2f}–{max(loops):.2f} s ({cv:.1f} % CV)"


def report(pairs: list[tuple[Result, Result, str]], others: dict[str, str | list[Result]], settings: dict) -> str:
    lines = ["# memscope overhead", "", "| machine | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in machine()]
    lines += ["", "| settings | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in settings.items()]
    lines += [
        "",
        "| pair | order | loop plain (s) | loop memscope (s) | **loop ratio** | wall plain (s) "
        "| wall memscope (s) | wall ratio | memscope CPU (s) | memscope CPU, % of a core (steady) "
        "| other load (cores) | steal (cores) | CPU ratio |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    loop_r, wall_r, cpu_pct, steady_pct, cpu_r = [], [], [], [], []
    for i, (p, m, order) in enumerate(pairs):
        lr, wr = _ratio(m.loop_s, p.loop_s), _ratio(m.wall_s, p.wall_s)
        pct = 100 * m.self_cpu_s / m.wall_s if m.self_cpu_s is not None else None
        st = 100 * m.steady_cpu_frac if m.steady_cpu_frac is not None else None
        cr = _ratio(m.tree_cpu_s, p.tree_cpu_s)
        loop_r.append(lr)
        wall_r.append(wr)
        cpu_r.append(cr)
        if pct is not None:
            cpu_pct.append(pct)
        if st is not None:
            steady_pct.append(st)
        other = _max(p.other_load, m.other_load)
        steal = _max(p.steal, m.steal)
        lines.append(
            f"| {i + 1} | {order} | {p.loop_s:.2f} | {m.loop_s:.2f} | **{_f(lr, '{:.3f}')}** "
            f"| {p.wall_s:.2f} | {m.wall_s:.2f} | {_f(wr, '{:.3f}')} "
            f"| {_f(m.self_cpu_s)} ({m.self_cpu_method}; polled {_f(m.self_cpu_polled)}) "
            f"| {_f(pct, '{:.1f}')} % ({_f(st, '{:.1f}')} %) "
            f"| {_f(other)} | {_f(steal)} | {_f(cr, '{:.3f}')} |"
        )
    plains = [p for p, _, _ in pairs]
    mems = [m for _, m, _ in pairs]
    med = statistics.median
    lines += [
        "",
        "| summary | |",
        "|---|---|",
        f"| **median loop-time ratio** (memscope / plain) | **{med([r for r in loop_r if r]):.3f}** "
        f"(min {min(r for r in loop_r if r):.3f}, max {max(r for r in loop_r if r):.3f}) |",
        f"| median wall ratio (with memscope's start-up and finish) | {med([r for r in wall_r if r]):.3f} "
        f"(min {min(r for r in wall_r if r):.3f}, max {max(r for r in wall_r if r):.3f}) |",
        f"| median CPU-time ratio: all CPU of the run under memscope (training tree + memscope) / plain | "
        f"{med([r for r in cpu_r if r]):.3f} (min {min(r for r in cpu_r if r):.3f}, "
        f"max {max(r for r in cpu_r if r):.3f}): less sensitive to the machine's other load than time |",
        f"| time outside the loop (start-up + finish), plain / under memscope (s) | "
        f"{med([p.wall_s - p.loop_s for p in plains]):.2f} / {med([m.wall_s - m.loop_s for m in mems]):.2f}"
        f" median |",
        f"| memscope's own CPU, % of one core over the run | "
        f"{_f(med(cpu_pct) if cpu_pct else None, '{:.1f}')} % median; steady state "
        f"{_f(med(steady_pct) if steady_pct else None, '{:.1f}')} % |",
        f"| memscope's own CPU per run (s) | {_f(med([m.self_cpu_s for m in mems if m.self_cpu_s is not None]))}"
        f" median |",
        f"| training tree CPU (s), plain / under memscope (collector excluded) | "
        f"{med([p.tree_cpu_s for p in plains]):.2f} / "
        f"{med([m.tree_cpu_s - (m.self_cpu_s or 0) for m in mems]):.2f} median |",
        f"| noise: loop time spread, plain / under memscope | {spread(plains)} / {spread(mems)} |",
        f"| other load on the machine (cores) | max {_f(max((r.other_load or 0) for r in plains + mems))}, "
        f"median {_f(med([(r.other_load or 0) for r in plains + mems]))} |",
        f"| steal (cores) | max {_f(max((r.steal or 0) for r in plains + mems))}, "
        f"median {_f(med([(r.steal or 0) for r in plains + mems]))} |",
    ]
    recs = [m.record for m in mems if m.record]
    if recs:
        causes = sorted({r.get("cause") for r in recs})
        procs = sorted({r.get("processes") for r in recs})
        peak = med([r["peak_pss"] for r in recs if r.get("peak_pss")] or [0])
        lines.append(
            f"| what memscope recorded | exit cause {', '.join(map(str, causes))}; "
            f"processes {', '.join(map(str, procs))}; peak tree PSS {peak / 2**20:.0f} MiB median |"
        )
    finals = {r.final for r in plains + mems + [r for v in others.values() if not isinstance(v, str) for r in v]}
    same = "yes" if len(finals) == 1 else f"NO: {sorted(finals)}"
    lines.append(f"| deterministic (same losses in every run, other tools' included) | {same} |")
    if others:
        lines += [
            "",
            "Other tools on the same loop, against the median plain run (loop "
            f"{med([p.loop_s for p in plains]):.2f} s, wall {med([p.wall_s for p in plains]):.2f} s); "
            "memscope's own figures for the same comparison in the first row:",
            "",
            "| tool | runs | loop ratio (median; each) | wall ratio (median) | other load / steal (cores, max) |",
            "|---|---:|---|---:|---|",
        ]
        lp, wp = med([p.loop_s for p in plains]), med([p.wall_s for p in plains])
        rows: list[tuple[str, str | list[Result]]] = [("memscope (the pairs above)", mems)] + list(others.items())
        for tool, v in rows:
            if isinstance(v, str):
                lines.append(f"| {tool} | 0 | {v} | | |")
                continue
            lrs = [r.loop_s / lp for r in v]
            wrs = [r.wall_s / wp for r in v]
            each = ", ".join(f"{x:.3f}" for x in lrs) if len(lrs) <= 10 else f"{min(lrs):.3f}–{max(lrs):.3f}"
            lines.append(
                f"| {tool} | {len(v)} | **{med(lrs):.3f}** ({each}) | {med(wrs):.3f} | "
                f"{_f(max((r.other_load or 0) for r in v))} / {_f(max((r.steal or 0) for r in v))} |"
            )
    return "\n".join(lines) + "\n"


def _max(*xs: float | None) -> float | None:
    vals = [x for x in xs if x is not None]
    return max(vals) if vals else None


def probes_present() -> str:
    """The agent's in-process probes in this tree (each attaches when the run imports what it watches)."""
    d = os.path.join(REPO, "memscope", "agent", "probes")
    try:
        names = sorted(n[:-3] for n in os.listdir(d) if n.endswith(".py") and not n.startswith("_"))
    except OSError:
        return "none"
    return ", ".join(names) or "none"


def importable(py: str, module: str) -> bool:
    if py == sys.executable:
        return importlib.util.find_spec(module) is not None
    return subprocess.run([py, "-c", f"import {module}"], capture_output=True).returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=5, help="plain/memscope pairs (5)")
    ap.add_argument(
        "--quick", action="store_true", help=f"1 pair of a short loop (--steps {QUICK_STEPS}): a CI smoke test, ~1 min"
    )
    ap.add_argument("--steps", type=int, help="training steps per run (train_loop.py's default: 350)")
    ap.add_argument("--out", metavar="FILE", help="also write the Markdown report here")
    ap.add_argument("--python", default=sys.executable, help="the Python that runs everything (this one)")
    ap.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="S",
        help="before each pair, wait up to S seconds for the rest of the machine to be idle (0: don't)",
    )
    ap.add_argument(
        "--idle-threshold",
        type=float,
        default=0.2,
        metavar="CORES",
        help="what --wait-idle calls idle: cores busy on the machine (0.2)",
    )
    ap.add_argument(
        "--redo-busy",
        type=int,
        default=0,
        metavar="N",
        help="redo a pair (N times in all at most) when the rest of the machine used more than "
        "--idle-threshold cores during either of its runs (0: keep every pair)",
    )
    ap.add_argument("--no-warmup", action="store_true", help="skip the short untimed run of each mode first")
    ap.add_argument(
        "--tool-runs",
        type=int,
        default=None,
        metavar="N",
        help="runs of each other tool (memray, scalene-cpu, scalene-off) where installed, after the "
        "first N pairs (default: 2, 1 with --quick; 0: none)",
    )
    ns = ap.parse_args()
    if ns.pairs < 1:
        ap.error("--pairs must be at least 1")
    pairs_n = 1 if ns.quick else ns.pairs
    steps = ns.steps or (QUICK_STEPS if ns.quick else None)
    loop_args = ["--steps", str(steps)] if steps else []
    if ns.quick and not ns.steps:
        loop_args += ["--steps-per-epoch", "30"]
    py, env = ns.python, clean_env()
    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if not ns.no_warmup:  # page cache, .pyc files: the first run of each mode is not timed
        say("warm-up (untimed)")
        for mode in ("plain", "memscope"):
            run_mode(mode, py, ["--steps", "3", "--steps-per-epoch", "3", "--val-batches", "1"], env)
    tool_runs = ns.tool_runs if ns.tool_runs is not None else (1 if ns.quick else 2)
    others: dict[str, str | list[Result]] = {}
    for tool, module in TOOLS.items():
        if tool_runs <= 0:
            continue
        others[tool] = [] if importable(py, module) else "not installed"

    def tool_round() -> None:
        for tool, got in others.items():
            if isinstance(got, str):
                continue
            try:
                r = run_mode(tool, py, loop_args, env)
            except SystemExit as exc:
                others[tool] = f"failed: {str(exc).splitlines()[0]}"
                continue
            got.append(r)
            say(f"{tool:11}: loop {r.loop_s:.2f} s, wall {r.wall_s:.2f} s, other load {_f(r.other_load)} cores")

    pairs: list[tuple[Result, Result, str]] = []
    redone = 0
    i = 0
    tools_done = 0
    while i < pairs_n or tools_done < tool_runs:
        if i >= pairs_n:
            tool_round()
            tools_done += 1
            continue
        order = ("plain", "memscope") if i % 2 == 0 else ("memscope", "plain")
        if ns.wait_idle > 0:
            wait_idle(ns.wait_idle, ns.idle_threshold, say)
        got = {}
        for mode in order:
            got[mode] = r = run_mode(mode, py, loop_args, env)
            extra = f", memscope CPU {r.self_cpu_s:.2f} s" if mode == "memscope" and r.self_cpu_s is not None else ""
            say(
                f"pair {i + 1}/{pairs_n} {mode:8}: loop {r.loop_s:.2f} s, wall {r.wall_s:.2f} s{extra}, "
                f"other load {_f(r.other_load)} cores"
            )
        if redone < ns.redo_busy and any((r.other_load or 0) > ns.idle_threshold for r in got.values()):
            redone += 1
            say(f"pair {i + 1}: the machine was busy during it; redoing it ({redone}/{ns.redo_busy})")
            continue
        pairs.append((got["plain"], got["memscope"], " then ".join(order)))
        i += 1
        if tools_done < tool_runs:
            tool_round()
            tools_done += 1
    settings = {
        "pairs": f"{pairs_n} (order alternates plain-first / memscope-first)",
        "training loop": f"python {LOOP} {' '.join(loop_args)}".rstrip(),
        "under memscope": f"python -m memscope.cli run --quiet --record <tmpdir> {LOOP}",
        "memscope settings": "defaults: RSS every 0.2 s, PSS every 2 s, agent on",
        "agent probes present": probes_present(),
        "load average at start": load_start,
    }
    if ns.redo_busy:
        settings["pairs redone (machine busy)"] = (
            f"{redone} (at most {ns.redo_busy}; busy = other load > {ns.idle_threshold} cores)"
        )
    text = report(pairs, others, settings)
    emit(text, ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
