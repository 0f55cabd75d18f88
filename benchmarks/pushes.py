"""What the dashboard sends to the browser over a long run: each push's bytes, and the whole window a reload gets.

    python benchmarks/pushes.py --hours 168 --hz 5     # a week at memscope's default rate (16 processes)
    python benchmarks/pushes.py --hours 24             # a day at 10 Hz
    python benchmarks/pushes.py --quick                # 30 simulated minutes: a CI smoke test
    python benchmarks/pushes.py --out FILE             # also write the Markdown report to FILE

The run is benchmarks/dayrun.py's replayed day (same seeded generator: a wrapper, the main process with its
validations and spikes, 8 DataLoader workers restarted every epoch, 4 compile workers, 2 helpers). Only the
dashboard's data path runs: ``RunSeries`` fed every record; at each push what ``Dashboard._push`` gives the
chart (``snapshot()`` with the phases from ``analysis.phases.intervals``) is assigned to a ``MemoryChart`` made as
the dashboard makes it, whose custom messages (their JSON content plus their float32 buffers) are counted: what
the push sends; its ``meta`` (phases, marks, labels: a synced trait, sent when it changed); and the process
table's HTML from the live snapshot (``Snapshot.update``), a widget resent at every push. Every simulated
hour, the chart's answer to a window request: the whole window a reloaded page or a new tab asks for once.

By default the pushes come at the dashboard's own pace (``dashboard.push_period``: every 0.25 s, slower as the
window grows, every 2 s at most) in simulated time, which is the run's time. ``--push-every 60`` is faster to
replay: a push a simulated minute carries a minute of new points, so its size bounds a real push's from above
(a merge of the series' buckets, which rewrites a line, costs the same at any pace).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dayrun import Day  # noqa: E402
from hostinfo import emit, machine_rows  # noqa: E402

from memscope.analysis import phases as phases_mod  # noqa: E402
from memscope.model import Event, ProcessSeen  # noqa: E402
from memscope.session.live import Snapshot  # noqa: E402
from memscope.ui.chart import WINDOW_REQUEST, MemoryChart, _meta, chart_payload, count_points  # noqa: E402
from memscope.ui.dashboard import PUSH_PERIOD_S, TABLE_EXITED, push_period  # noqa: E402
from memscope.ui.fragments import process_table  # noqa: E402
from memscope.ui.series import RunSeries  # noqa: E402

KiB = 1024


@dataclass
class Pushes:
    hours: float
    hz: float
    push_every_s: float | None  # None: the dashboard's own pace (dashboard.push_period)
    pushes: int = 0
    message_max: int = 0  # the largest single message (a push, or a part of a whole window)
    table_max: int = 0  # the process table's HTML (a widget resent at every push)
    total_max: int = 0  # a push in all: the chart's messages, its meta if it changed, the table
    sizes: list[int] = field(default_factory=list)
    meta_sizes: list[int] = field(default_factory=list)  # only the pushes whose meta changed
    merges: int = 0  # pushes that rewrote a line from its first point
    full_sizes: list[tuple[float, int, int]] = field(default_factory=list)  # (hour, bytes, points)
    push_ms: list[float] = field(default_factory=list)
    old_bytes_max: int = 0  # what the same push sent before: the whole payload as JSON in the widget's state
    replay_s: float = 0.0


def _size(msg: tuple[dict, list[bytes]]) -> int:
    content, buffers = msg
    return len(json.dumps(content)) + sum(len(b) for b in buffers)


def replay(hours: float, hz: float, push_every_s: float | None, say) -> Pushes:
    res = Pushes(hours, hz, push_every_s)
    day = Day(hours * 3600.0, hz)
    series = RunSeries()
    chart = MemoryChart(spread=True)  # the dashboard's chart; no kernel here, so its messages are only counted
    sent: list[tuple[dict, list[bytes]]] = []
    chart.send = lambda content, buffers=None: sent.append((content, list(buffers or [])))  # type: ignore[method-assign]
    events: list[dict] = []
    main = day.main.pid
    meta: dict = {}
    snapshot, root_pid = Snapshot(), day.wrapper.pid  # what the process table reads
    next_push, next_full = push_every_s or PUSH_PERIOD_S, 3600.0
    w0 = time.perf_counter()
    for r in day.records():
        if type(r) is tuple:  # dayrun's markers: the pushes here follow the records' own times
            continue
        series.feed(r)
        snapshot.update(r, root_pid)
        if type(r) is Event and r.kind in ("phase", "epoch"):
            events.append({"t": r.t, "pid": r.pid, "kind": r.kind, "data": r.data})
        elif type(r) is ProcessSeen and r.role == "main":
            main = r.pid
        t = r.t
        if t + 1e-9 >= next_push:
            next_push += push_every_s or 0.0
            a = time.perf_counter()
            snap = series.snapshot()
            snap["phases"] = [
                {"name": n, "start_s": s, "end_s": e if e < t else None}  # as Dashboard._push: the open one
                for n, s, e in phases_mod.intervals(sorted(events, key=lambda x: x["t"]), t, main)
            ]
            payload = chart_payload(snap)
            chart.data = payload
            msgs, sent[:] = list(sent), []
            m = _meta(payload)
            res.push_ms.append((time.perf_counter() - a) * 1e3)
            res.pushes += 1
            res.sizes.append(sum(_size(x) for x in msgs))
            res.message_max = max([res.message_max, *map(_size, msgs)])
            if res.pushes > 1 and any(k == 0 for x in msgs for _, k, _, _ in x[0]["series"]):
                res.merges += 1
            table = process_table({p: dict(d) for p, d in snapshot.procs.items()}, max_exited=TABLE_EXITED)
            res.table_max = max(res.table_max, len(table))
            if push_every_s is None:  # the dashboard's own pace: slower as the window grows
                next_push = t + push_period(count_points(payload))
            meta_bytes = 0
            if m != meta:
                meta = m
                meta_bytes = len(json.dumps(m))
                res.meta_sizes.append(meta_bytes)
            res.total_max = max(res.total_max, res.sizes[-1] + meta_bytes + len(table))
            if res.pushes % 60 == 0 or t + 1e-9 >= next_full:  # the old push (the whole payload), now and then
                res.old_bytes_max = max(res.old_bytes_max, len(json.dumps(payload)))
            if t + 1e-9 >= next_full:
                next_full += 3600.0
                chart._on_custom_msg(chart, {"type": WINDOW_REQUEST}, [])
                whole, sent[:] = list(sent), []
                res.full_sizes.append((t / 3600.0, sum(map(_size, whole)), count_points(payload)))
                res.message_max = max([res.message_max, *map(_size, whole)])
                say(
                    f"  {t / 3600:5.1f} h: window {res.full_sizes[-1][1] / KiB:.0f} KiB, push max so far "
                    f"{max(res.sizes) / KiB:.1f} KiB ({time.perf_counter() - w0:.0f} s)"
                )
    res.replay_s = time.perf_counter() - w0
    return res


def _pct(xs: list, q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def report(r: Pushes, cmd: str) -> str:
    lines = [
        "## What the dashboard sends over a long run",
        "",
        f"`{cmd}` ({r.replay_s:.0f} s of replay)",
        "",
        "| | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in machine_rows()),
        f"| replay | {r.hours:g} h at {r.hz:g} Hz, 16 processes; "
        + (f"a push every {r.push_every_s:g} simulated s" if r.push_every_s else "pushes at the dashboard's pace")
        + f" ({r.pushes:,} pushes) |",
        f"| **a push (lines)** | **max {max(r.sizes or [0]) / KiB:.1f} KiB**; median {_pct(r.sizes, 0.5) / KiB:.2f} "
        f"KiB, 99th percentile {_pct(r.sizes, 0.99) / KiB:.1f} KiB; {r.merges} pushes rewrote a line whole "
        f"(the series' buckets merged); the largest single message {r.message_max / KiB:.1f} KiB |",
        f"| the process table (its HTML, resent at every push) | max {r.table_max / KiB:.1f} KiB |",
        f"| **a push in all** (the chart's messages, its meta if it changed, the table) | **max "
        f"{r.total_max / KiB:.1f} KiB** |",
        f"| a push's meta (phases, marks; only when changed: {len(r.meta_sizes)} times) | max "
        f"{max(r.meta_sizes or [0]) / KiB:.1f} KiB |",
        f"| the whole window (a reload or a new tab, once) | max {max((s for _, s, _ in r.full_sizes), default=0) / KiB:.0f}"
        f" KiB, at the end {(r.full_sizes[-1][1] if r.full_sizes else 0) / KiB:.0f} KiB "
        f"({r.full_sizes[-1][2] if r.full_sizes else 0:,} points) |",
        f"| the same push before (the whole window as JSON in the widget's state) | max {r.old_bytes_max / KiB:.0f} KiB |",
        f"| a push's kernel-side cost (snapshot, payload, delta) | median {_pct(r.push_ms, 0.5):.1f} ms, "
        f"max {max(r.push_ms or [0]):.1f} ms |",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hours", type=float, default=24.0, help="simulated hours (24)")
    ap.add_argument("--hz", type=float, default=10.0, help="RSS rounds per second (10)")
    ap.add_argument(
        "--push-every", type=float, help="simulated seconds between pushes (default: the dashboard's pace, 0.25-2 s)"
    )
    ap.add_argument("--quick", action="store_true", help="30 simulated minutes: a CI smoke test")
    ap.add_argument("--out", metavar="FILE", help="also write the Markdown report here")
    a = ap.parse_args(argv)
    if a.quick:
        a.hours = 0.5
    if not (a.hours > 0 and a.hz > 0 and (a.push_every is None or a.push_every > 0)):
        print("pushes.py: --hours, --hz and --push-every must be positive", file=sys.stderr)
        return 2
    cmd = "python benchmarks/pushes.py " + " ".join(argv if argv is not None else sys.argv[1:])
    r = replay(a.hours, a.hz, a.push_every, lambda s: print(s, file=sys.stderr, flush=True))
    emit(report(r, cmd.strip()), a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
