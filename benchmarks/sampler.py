"""Cost of memscope's tree sampler (memscope.collect.tree.TreeSampler).

Builds real process trees (one root Python process that forks N-1 children, each holding ~20 MB of touched
memory and sleeping), points a TreeSampler at the root and times ``rss_round()``, ``pss_round()`` and
``discover()`` on the calling thread: CPU time with ``time.thread_time()`` (user + system time of this thread,
so the kernel's smaps_rollup walk counts) and wall time with ``time.perf_counter()``.

Trees: plain Python for N = 1, 4, 9, 16, 64, and a "torch" flavour for N = 9 (the root imports torch and
allocates a tensor, then forks 8 DataLoader-like children): torch-loaded processes map hundreds of shared
libraries, which is what makes smaps_rollup expensive.

Then the sustained cost: on the 16-process tree, 10 Hz RSS rounds + a PSS round every 2 s + discover every
0.5 s for 20 s, all on one thread, reported as % of one core (thread CPU time / wall time).

    .venv/bin/python benchmarks/sampler.py              # full run (a few minutes)
    .venv/bin/python benchmarks/sampler.py --quick      # CI smoke: N = 1, 9 only, fewer repetitions (< 30 s)
    .venv/bin/python benchmarks/sampler.py --out FILE   # also write the Markdown report to FILE

Every process started is killed at the end (its process group), on errors, Ctrl-C and SIGTERM too; the
tree's processes also die on their own if this script dies (stdin EOF for the root, PDEATHSIG for children).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import platform
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from hostinfo import cpu_model, hypervisor, package_version, ram

from memscope.collect.tree import TreeSampler

MB_PER_PROC = 20

# The tree: argv = [flavour, n]. The root forks n-1 children; each child (and the root) holds ~20 MB of touched
# memory. The root prints "READY" once every child has allocated, then waits for stdin EOF.
TREE_SCRIPT = r"""
import ctypes, os, signal, sys, time
flavour, n, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1

if flavour == "torch":
    import torch
    x = torch.randn(2_000_000)
    def alloc():
        return torch.ones(mb * 1024 * 1024 // 4)
else:
    x = None
    def alloc():
        return bytearray(b"\x01") * (mb * 1024 * 1024)   # written byte by byte: resident, not calloc'ed zeros

root = os.getpid()
r, w = os.pipe()
for _ in range(n - 1):
    pid = os.fork()
    if pid == 0:
        try:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != root:
                os._exit(0)
            os.close(r)
            if flavour == "torch":
                torch.set_num_threads(1)      # as DataLoader workers do (OpenMP after fork)
                s = float(x[::4096].sum())    # read the parent's tensor like a worker would
            keep = alloc()
            os.write(w, b"x")
            os.close(w)
            while True:
                time.sleep(3600)
        finally:
            os._exit(0)
os.close(w)
keep = alloc()
got = 0
while got < n - 1:
    b = os.read(r, 64)
    if not b:
        break
    got += len(b)
sys.stdout.write(f"READY {got}\n")
sys.stdout.flush()
sys.stdin.read()          # until the benchmark closes our stdin (or dies)
"""


# -- process trees -----------------------------------------------------------------------------------------------
@dataclass
class Tree:
    flavour: str
    n: int
    proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 120.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TREE_SCRIPT, self.flavour, str(self.n), str(MB_PER_PROC)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        LIVE.append(self)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().decode() if ready else ""
        if not line.startswith("READY") or int(line.split()[1]) != self.n - 1:
            raise RuntimeError(f"tree {self.flavour}/{self.n} did not start: {line!r}")

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # start_new_session: pgid == root pid, children inherit it
        except ProcessLookupError:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f:
                    f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self in LIVE:
            LIVE.remove(self)
        self.proc = None


LIVE: list[Tree] = []


def stop_all() -> None:
    for t in list(LIVE):
        t.stop()


def pids_in_group(pgid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            rest = data[data.rindex(b")") + 2 :].split()
            if int(rest[2]) == pgid and rest[0] not in (b"Z", b"X"):
                out.append(int(name))
    return out


# -- measuring --------------------------------------------------------------------------------------------------
@dataclass
class Timing:
    cpu_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)


def time_calls(fn: Callable[[], object], reps: int, warmup: int = 3) -> Timing:
    for _ in range(warmup):
        fn()
    t = Timing()
    for _ in range(reps):
        c0, w0 = time.thread_time(), time.perf_counter()
        fn()
        c1, w1 = time.thread_time(), time.perf_counter()
        t.cpu_ms.append((c1 - c0) * 1e3)
        t.wall_ms.append((w1 - w0) * 1e3)
    return t


def median(xs: list[float]) -> float:
    s = sorted(xs)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(0.95 * len(s)) - 1))]


def count_maps(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


@dataclass
class Row:
    flavour: str
    n: int
    maps_root: int
    maps_child: int
    rss: Timing
    pss: Timing
    disc: Timing  # discover(): incremental (foreign processes listed last time are not read again)
    disc_full: Timing  # discover(full=True): every process on the machine read (every 2 s, and at a stop)


def measure(tree: Tree, reps_rss: int, reps_pss: int, reps_disc: int) -> Row:
    sampler = TreeSampler(tree.pid, emit=lambda r: None, clock=time.monotonic, marker=None)
    sampler.discover()
    found = len(sampler.alive_pids())
    if found != tree.n:
        raise RuntimeError(f"sampler found {found} processes in the {tree.flavour}/{tree.n} tree, expected {tree.n}")
    s = sampler.pss_round()
    if len(s.procs) != tree.n:
        raise RuntimeError(f"pss_round measured {len(s.procs)} of {tree.n} processes")
    kids = [p for p in sampler.alive_pids() if p != tree.pid]
    rss = time_calls(sampler.rss_round, reps_rss)
    pss = time_calls(sampler.pss_round, reps_pss)
    disc = time_calls(sampler.discover, reps_disc)
    disc_full = time_calls(lambda: sampler.discover(full=True), reps_disc)
    return Row(
        tree.flavour, tree.n, count_maps(tree.pid), count_maps(kids[0]) if kids else 0, rss, pss, disc, disc_full
    )


@dataclass
class Sustained:
    n: int
    seconds: float
    cpu_s: float
    wall_s: float
    rounds: dict[str, int]
    cpu_by_kind: dict[str, float]


def sustained(
    tree: Tree,
    seconds: float,
    rss_hz: float = 10.0,
    pss_every: float = 2.0,
    disc_every: float = 0.5,
    budget: float | None = None,
) -> Sustained:
    """``budget``: space PSS rounds as memscope's run does (at least ``pss_every``, and at most ``budget`` of a
    core: the period grows to the round's CPU cost / budget)."""
    sampler = TreeSampler(tree.pid, emit=lambda r: None, clock=time.monotonic, marker=None)
    sampler.discover()
    jobs = {
        "rss": (sampler.rss_round, 1.0 / rss_hz),
        "pss": (sampler.pss_round, pss_every),
        "discover": (sampler.discover, disc_every),
    }
    rounds = {k: 0 for k in jobs}
    cpu_by = {k: 0.0 for k in jobs}
    w0, c0 = time.perf_counter(), time.thread_time()
    due = {k: w0 for k in jobs}
    end = w0 + seconds
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        for k, (fn, period) in jobs.items():
            if now >= due[k]:
                a = time.thread_time()
                fn()
                cost = time.thread_time() - a
                cpu_by[k] += cost
                rounds[k] += 1
                if k == "pss" and budget:
                    period = max(pss_every, cost / budget)
                    jobs[k] = (fn, period)
                due[k] += period
                while due[k] <= now:  # never burst to catch up
                    due[k] += period
        nxt = min(min(due.values()), end)
        delay = nxt - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    w1, c1 = time.perf_counter(), time.thread_time()
    return Sustained(tree.n, seconds, c1 - c0, w1 - w0, rounds, cpu_by)


# -- report -----------------------------------------------------------------------------------------------------
def machine() -> list[str]:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    nprocs = sum(1 for n in os.listdir("/proc") if n.isdigit())
    return [
        f"- CPU: {cpu_model()}{hypervisor()}, {os.cpu_count()} logical cores ({usable} usable)",
        f"- RAM: {ram()}",
        f"- Kernel: {platform.system()} {platform.release()}",
        f"- Python: {platform.python_version()} ({sys.executable}); memscope {package_version('memscope')}, "
        f"torch {package_version('torch')}",
        f"- Processes on the machine at start: {nprocs} (discover() lists all of /proc; it reads the stat of "
        f"each process not known to be foreign, and of every process every 2 s)",
    ]


def _sustained_line(sus: Sustained, what: str, note: str = "") -> str:
    pct = 100.0 * sus.cpu_s / sus.wall_s
    parts = ", ".join(
        f"{k} {sus.rounds[k]} rounds = {100.0 * sus.cpu_by_kind[k] / sus.wall_s:.2f}%"
        for k in ("rss", "pss", "discover")
    )
    return f"{what}: **{pct:.2f}% of one core** ({note}{sus.cpu_s * 1e3:.0f} ms CPU; {parts})."


def report(
    rows: list[Row],
    sus: Sustained | None,
    args: argparse.Namespace,
    reps: tuple[int, int, int],
    sus_torch: Sustained | None = None,
) -> str:
    out = ["# memscope tree sampler cost", ""]
    out += machine()
    out += [
        f"- Repetitions per row: rss_round {reps[0]}, pss_round {reps[1]}, discover {reps[2]}"
        f"{' (--quick)' if args.quick else ''}; each process holds ~{MB_PER_PROC} MB of touched memory",
        "",
    ]
    out += [
        "CPU = `time.thread_time()` of the calling thread (user + system); wall = `time.perf_counter()`. "
        "All times in ms per round (whole tree).",
        "",
    ]
    out += [
        "| tree | processes | maps/proc (root, child) | RSS round CPU ms median / p95 | "
        "PSS round CPU ms median / p95 | PSS CPU ms per process (median) | discover CPU ms median, "
        "incremental / full | RSS / PSS / discover wall ms median |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r.flavour} | {r.n} | {r.maps_root}, {r.maps_child if r.n > 1 else '-'} | "
            f"{median(r.rss.cpu_ms):.3f} / {p95(r.rss.cpu_ms):.3f} | "
            f"{median(r.pss.cpu_ms):.2f} / {p95(r.pss.cpu_ms):.2f} | "
            f"{median(r.pss.cpu_ms) / r.n:.3f} | {median(r.disc.cpu_ms):.3f} / {median(r.disc_full.cpu_ms):.3f} | "
            f"{median(r.rss.wall_ms):.3f} / {median(r.pss.wall_ms):.2f} / {median(r.disc.wall_ms):.3f} |"
        )
    out.append("")
    if sus is not None:
        out += [
            _sustained_line(
                sus,
                f"**Sustained** ({sus.n}-process plain tree, 10 Hz RSS + PSS every 2 s + "
                f"discover every 0.5 s, {sus.wall_s:.1f} s on one thread)",
            ),
            "",
        ]
    if sus_torch is not None:
        out += [
            _sustained_line(
                sus_torch,
                f"**Sustained, as a run samples** ({sus_torch.n}-process torch tree, "
                "RSS every 0.2 s with the fast series, discover every 0.5 s, PSS every 2 s "
                f"or slower under its 1.5 % budget, {sus_torch.wall_s:.1f} s)",
                "target < 3 %; ",
            ),
            "",
        ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 1, 9 only, fewer repetitions (CI smoke, < 30 s)")
    ap.add_argument("--out", metavar="FILE", help="also write the Markdown report to FILE")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch flavour")
    args = ap.parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("this benchmark reads /proc: Linux only", file=sys.stderr)
        return 2

    if args.quick:
        sizes, reps, sus_n, sus_s, torch_sus = [1, 9], (100, 15, 20), 9, 4.0, 9
    else:
        sizes, reps, sus_n, sus_s, torch_sus = [1, 4, 9, 16, 64], (500, 60, 100), 16, 20.0, 16
    plan = [("plain", n) for n in sizes]
    have_torch = importlib.util.find_spec("torch") is not None
    if not args.no_torch and have_torch:
        plan.insert(plan.index(("plain", 9)) + 1, ("torch", 9))
        if torch_sus != 9:
            plan.insert(plan.index(("torch", 9)) + 1, ("torch", torch_sus))
    elif not args.no_torch:
        print("torch is not installed: skipping the torch flavour", file=sys.stderr)

    def on_term(signum, frame):  # run the finally blocks on SIGTERM/SIGHUP too
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    rows: list[Row] = []
    sus: Sustained | None = None
    sus_torch: Sustained | None = None
    try:
        for flavour, n in plan:
            tree = Tree(flavour, n)
            t0 = time.perf_counter()
            tree.start()
            print(f"[{flavour} x{n}] started in {time.perf_counter() - t0:.1f} s, measuring...", file=sys.stderr)
            try:
                rows.append(measure(tree, *reps))
                if flavour == "plain" and n == sus_n:
                    print(f"[{flavour} x{n}] sustained load for {sus_s:.0f} s...", file=sys.stderr)
                    sus = sustained(tree, sus_s)
                if flavour == "torch" and n == torch_sus:
                    # As a run samples: RSS every 0.2 s, discover every 0.5 s, PSS every 2 s or slower (its
                    # CPU budget). This is the bar: < 3 % of a core on a 16-process torch tree.
                    from memscope.session.sampling import PSS_CPU_BUDGET

                    print(
                        f"[{flavour} x{n}] sustained load, memscope's schedule, for {sus_s:.0f} s...", file=sys.stderr
                    )
                    sus_torch = sustained(tree, max(sus_s, 8.0), rss_hz=5.0, budget=PSS_CPU_BUDGET)
            finally:
                pgid = tree.pid
                tree.stop()
                deadline = time.monotonic() + 10
                while (left := pids_in_group(pgid)) and time.monotonic() < deadline:
                    time.sleep(0.05)  # SIGKILLed processes take a moment to tear down their memory
                if left:
                    print(f"warning: processes still alive in group {pgid}: {left}", file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        stop_all()

    text = report(rows, sus, args, reps, sus_torch)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
